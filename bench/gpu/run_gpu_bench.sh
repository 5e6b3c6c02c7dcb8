#!/usr/bin/env bash
# GPU step-time benchmark: gpipe-compile --target cuda (1 stage) vs PyTorch eager, side by side.
#
# usage: bench/gpu/run_gpu_bench.sh BUILD_BIN [options]
#   BUILD_BIN            directory with gpipe-compile and gpipe-run (e.g. build/bin)
#   --steps N            measured steps per run (default 50)
#   --warmup W           warm-up steps per run, excluded (default 10)
#   --repeat R           rounds; each round runs gpipe and torch once per precision,
#                        alternating which goes first (default 3)
#   --layers L --width W --classes C --batch B
#                        model (default 16 layers, width 4096, 1024 classes, batch 1024)
#   --precisions LIST    comma-separated, of fp32, tf32, bf16 (default fp32,bf16);
#                        gpipe: fp32 = --precision fp32, tf32 = --precision fp32 --allow-tf32,
#                        bf16 = --precision bf16; torch: torch_mlp.py --precision P
#   --lr LR              SGD learning rate, both sides (default 0.01)
#   --cuda-arch A        passed to gpipe-compile --cuda-arch (default: the compiler's own)
#   --peak-fp32 X --peak-tf32 X --peak-bf16 X
#                        TFLOP/s peaks for MFU (default 67 / 494.7 / 989.4, H100 SXM dense)
#   --workdir DIR        exported model, compiled programs, logs (default $WORKDIR, else
#                        /tmp/gpipe_gpu_bench); an export of the same model there is reused
#   --fresh              re-export even if WORKDIR has the same model
#   --out FILE           table + raw numbers (default bench/gpu/results.txt)
# environment:
#   PY                   python with torch (CUDA) and numpy (default python3)
#   EXPORT_PY            python for the ONNX export, needs torch + onnx (default $PY, else
#                        /usr/bin/python3 if $PY lacks onnx)
#   GPIPE_BENCH_TARGET   cuda (default) or cpu: a dry run without a GPU (gpipe-compile
#                        --target cpu without --precision, torch_mlp.py --device cpu)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

die() { echo "run_gpu_bench.sh: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; -*) echo "run_gpu_bench.sh: BUILD_BIN must come first" >&2; usage ;; esac
BIN=$(cd "$1" 2>/dev/null && pwd) || die "BUILD_BIN '$1' is not a directory"
shift

STEPS=50; WARMUP=10; REPEAT=3
LAYERS=16; WIDTH=4096; CLASSES=1024; BATCH=1024
PRECISIONS=fp32,bf16; LR=0.01; CUDA_ARCH=""
PEAK_FP32=67; PEAK_TF32=494.7; PEAK_BF16=989.4
WORKDIR=${WORKDIR:-/tmp/gpipe_gpu_bench}; FRESH=0
OUT="$REPO/bench/gpu/results.txt"

need() { if [ $# -lt 2 ] || [ -z "$2" ]; then die "option $1 needs a value"; fi; }
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) need "$@"; STEPS=$2; shift 2 ;;
    --warmup) need "$@"; WARMUP=$2; shift 2 ;;
    --repeat) need "$@"; REPEAT=$2; shift 2 ;;
    --layers) need "$@"; LAYERS=$2; shift 2 ;;
    --width) need "$@"; WIDTH=$2; shift 2 ;;
    --classes) need "$@"; CLASSES=$2; shift 2 ;;
    --batch) need "$@"; BATCH=$2; shift 2 ;;
    --precisions) need "$@"; PRECISIONS=$2; shift 2 ;;
    --lr) need "$@"; LR=$2; shift 2 ;;
    --cuda-arch) need "$@"; CUDA_ARCH=$2; shift 2 ;;
    --peak-fp32) need "$@"; PEAK_FP32=$2; shift 2 ;;
    --peak-tf32) need "$@"; PEAK_TF32=$2; shift 2 ;;
    --peak-bf16) need "$@"; PEAK_BF16=$2; shift 2 ;;
    --workdir) need "$@"; WORKDIR=$2; shift 2 ;;
    --fresh) FRESH=1; shift ;;
    --out) need "$@"; OUT=$2; shift 2 ;;
    -h|--help) usage ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

isint() { case "$1" in ''|*[!0-9]*) return 1 ;; *) return 0 ;; esac; }
for v in STEPS REPEAT LAYERS WIDTH CLASSES BATCH; do
  if ! isint "${!v}" || [ "${!v}" -lt 1 ]; then
    die "--$(echo "$v" | tr '[:upper:]' '[:lower:]') must be an integer >= 1, got '${!v}'"
  fi
done
isint "$WARMUP" || die "--warmup must be an integer >= 0, got '$WARMUP'"
IFS=, read -r -a PRECS <<< "$PRECISIONS"
[ ${#PRECS[@]} -ge 1 ] || die "--precisions is empty"
for p in "${PRECS[@]}"; do
  case "$p" in fp32|tf32|bf16) ;; *) die "--precisions: '$p' is not fp32, tf32 or bf16" ;; esac
done

TARGET=${GPIPE_BENCH_TARGET:-cuda}
case "$TARGET" in
  cuda) DEVICE=cuda ;;
  cpu) DEVICE=cpu ;;
  *) die "GPIPE_BENCH_TARGET must be cuda or cpu, got '$TARGET'" ;;
esac
PY=${PY:-python3}

# --- preconditions --------------------------------------------------------------------------
for t in gpipe-compile gpipe-run; do
  [ -x "$BIN/$t" ] || die "$BIN/$t not found or not executable (pass the build's bin directory, e.g. build/bin)"
done
command -v "$PY" >/dev/null 2>&1 || die "python '$PY' not found (set PY)"
"$PY" -c 'import torch, numpy' 2>/dev/null || die "$PY cannot import torch and numpy (set PY to a python that has them)"

if [ "$TARGET" = cuda ]; then
  help=$("$BIN/gpipe-compile" --help 2>&1 || true)
  if ! grep -q -- '--precision' <<< "$help"; then
    die "$BIN/gpipe-compile lacks the CUDA target: its --help has no --precision option
  (its --target line: $(grep -m1 -- '--target' <<< "$help" | sed 's/^ *//'))
  Build gpipe-compile with the CUDA target, or set GPIPE_BENCH_TARGET=cpu for a dry run."
  fi
  "$PY" - <<'EOF' || die "$PY: torch has no usable CUDA device (torch.cuda.is_available() is False); set PY to a CUDA build of torch"
import sys, torch
sys.exit(0 if torch.cuda.is_available() else 1)
EOF
fi

EXPORT_PY=${EXPORT_PY:-}
if [ -z "$EXPORT_PY" ]; then
  if "$PY" -c 'import torch, onnx, numpy' 2>/dev/null; then EXPORT_PY=$PY
  elif [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import torch, onnx, numpy' 2>/dev/null; then EXPORT_PY=/usr/bin/python3
  else die "no python with torch, onnx and numpy for the export: $PY lacks onnx, and so does /usr/bin/python3 (set EXPORT_PY)"
  fi
fi
"$EXPORT_PY" -c 'import torch, onnx, numpy' 2>/dev/null || die "EXPORT_PY=$EXPORT_PY cannot import torch, onnx and numpy"

MODEL_DIR="$WORKDIR/model"
LOGS="$WORKDIR/logs"
mkdir -p "$WORKDIR" "$LOGS"
mkdir -p "$(dirname "$OUT")"
rm -f "$LOGS"/gpipe_*_r* "$LOGS"/torch_*_r*

HEADER="$WORKDIR/header.txt"
{
  echo "# gpipe-compile GPU benchmark: gpipe --target $TARGET (1 stage) vs PyTorch eager ($DEVICE)"
  echo
  echo "date: $(date '+%Y-%m-%d %H:%M:%S %Z'), host $(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)"
  echo "command: $0 $BIN --steps $STEPS --warmup $WARMUP --repeat $REPEAT --layers $LAYERS --width $WIDTH --classes $CLASSES --batch $BATCH --precisions $PRECISIONS --lr $LR${CUDA_ARCH:+ --cuda-arch $CUDA_ARCH} --workdir $WORKDIR --out $OUT"
  echo "repo: $(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "gpipe-compile: $BIN/gpipe-compile; python: $PY ($("$PY" -c 'import torch, sys; print("torch %s, CUDA %s, python %s" % (torch.__version__, torch.version.cuda, sys.version.split()[0]))')); export: $EXPORT_PY"
  echo
  echo "nvidia-smi --query-gpu=name,memory.total --format=csv:"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total --format=csv 2>&1 || true
    echo
    echo "nvidia-smi --query-gpu=driver_version,clocks.max.sm,power.limit --format=csv:"
    nvidia-smi --query-gpu=driver_version,clocks.max.sm,power.limit --format=csv 2>&1 || true
    echo
    echo "other GPU processes at the start (nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv):"
    nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv 2>&1 || true
  else
    echo "(nvidia-smi not found)"
  fi
  if [ "$TARGET" = cpu ]; then
    echo
    echo "DRY RUN (GPIPE_BENCH_TARGET=cpu): gpipe compiled with --target cpu (no --precision: every"
    echo "precision runs the same fp32 CPU program), torch on the CPU; the MFU figures against GPU"
    echo "peaks mean nothing."
  fi
  echo
} > "$HEADER"
cat "$HEADER"

# --- export ---------------------------------------------------------------------------------
reuse=0
if [ "$FRESH" = 0 ] && [ -f "$MODEL_DIR/meta.json" ] && [ -f "$MODEL_DIR/model.onnx" ] \
   && [ -f "$MODEL_DIR/data/x.npy" ] && [ -f "$MODEL_DIR/data/y.npy" ]; then
  if "$PY" - "$MODEL_DIR/meta.json" "$LAYERS" "$WIDTH" "$CLASSES" "$BATCH" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
sys.exit(0 if [m["layers"], m["width"], m["classes"], m["batch"]] == [int(v) for v in sys.argv[2:6]] else 1)
EOF
  then reuse=1; fi
fi
if [ "$reuse" = 1 ]; then
  echo "== reusing the export in $MODEL_DIR (same layers/width/classes/batch; --fresh to redo)"
  "$PY" "$HERE/mlp_model.py" --layers "$LAYERS" --width "$WIDTH" --classes "$CLASSES" --batch "$BATCH" \
    --out "$MODEL_DIR" --flops-only
else
  echo "== export: $EXPORT_PY bench/gpu/mlp_model.py --layers $LAYERS --width $WIDTH --classes $CLASSES --batch $BATCH --out $MODEL_DIR"
  rm -rf "$MODEL_DIR"
  "$EXPORT_PY" "$HERE/mlp_model.py" --layers "$LAYERS" --width "$WIDTH" --classes "$CLASSES" \
    --batch "$BATCH" --out "$MODEL_DIR" || die "export failed (see above)"
fi
DATA="$MODEL_DIR/data"

# --- compile --------------------------------------------------------------------------------
for p in "${PRECS[@]}"; do
  outdir="$WORKDIR/out_$p"
  flags=(--batch-size "$BATCH" --stages 1 --microbatches 1 --optimizer sgd --lr "$LR")
  if [ "$TARGET" = cuda ]; then
    case "$p" in
      fp32) flags+=(--target cuda --precision fp32) ;;
      tf32) flags+=(--target cuda --precision fp32 --allow-tf32) ;;
      bf16) flags+=(--target cuda --precision bf16) ;;
    esac
    [ -z "$CUDA_ARCH" ] || flags+=(--cuda-arch "$CUDA_ARCH")
  else
    flags+=(--target cpu)
  fi
  echo "== compile $p: $BIN/gpipe-compile $MODEL_DIR/model.onnx -o $outdir ${flags[*]}"
  t0=$(date +%s)
  if ! "$BIN/gpipe-compile" "$MODEL_DIR/model.onnx" -o "$outdir" "${flags[@]}" > "$WORKDIR/compile_$p.log" 2>&1; then
    tail -n 40 "$WORKDIR/compile_$p.log" >&2
    if grep -q -e 'cuda is not implemented' -e "unrecognised option '--precision'" -e "unrecognized option '--precision'" "$WORKDIR/compile_$p.log"; then
      die "gpipe-compile in $BIN lacks the CUDA target (see its message above)"
    fi
    die "gpipe-compile failed for $p (log: $WORKDIR/compile_$p.log)"
  fi
  sed 's/^/   /' "$WORKDIR/compile_$p.log"
  echo "   compiled in $(( $(date +%s) - t0 )) s"
done

# --- rounds ---------------------------------------------------------------------------------
peak_for() { case "$1" in fp32) echo "$PEAK_FP32" ;; tf32) echo "$PEAK_TF32" ;; bf16) echo "$PEAK_BF16" ;; esac; }
TOTAL=$((WARMUP + STEPS))

now_ns() { date +%s%N; }

run_gpipe() {  # precision round
  # Two runs from the same initial weights: WARMUP steps, then WARMUP + STEPS steps (the
  # timed one, with --log-json). (wall(W+N) - wall(W)) / N cancels start-up (CUDA context,
  # loading the weights, writing the trained ones): the wall-clock cross-check of the
  # per-step "ms" the stage logs.
  local p=$1 r=$2 log="$LOGS/gpipe_$1_r$2.jsonl" out="$LOGS/gpipe_$1_r$2.log" t0 t1 t2
  t0=$(now_ns)
  if ! "$BIN/gpipe-run" "$WORKDIR/out_$p" --data "$DATA" --steps "$WARMUP" -q > "$out.base" 2>&1; then
    tail -n 40 "$out.base" >&2
    die "gpipe-run --steps $WARMUP failed for $p round $r (log: $out.base)"
  fi
  t1=$(now_ns)
  if ! "$BIN/gpipe-run" "$WORKDIR/out_$p" --data "$DATA" --steps "$TOTAL" --log-json "$log" -q > "$out" 2>&1; then
    tail -n 40 "$out" >&2
    die "gpipe-run failed for $p round $r (log: $out)"
  fi
  t2=$(now_ns)
  echo "$(( t1 - t0 )) $(( t2 - t1 ))" > "$LOGS/gpipe_$1_r$2.wall"
  echo "round $r $p gpipe: $("$PY" "$HERE/summarize.py" gpipe-ms "$log" --warmup "$WARMUP"); wall-clock $("$PY" -c 'import sys; a, b = map(int, open(sys.argv[1]).read().split()); print("%.4f" % ((b - a) / 1e6 / int(sys.argv[2])))' "$LOGS/gpipe_$1_r$2.wall" "$STEPS") ms/step"
}

run_torch() {  # precision round
  local p=$1 r=$2 js="$LOGS/torch_$1_r$2.json" err="$LOGS/torch_$1_r$2.log"
  if ! "$PY" "$HERE/torch_mlp.py" --workdir "$MODEL_DIR" --precision "$p" --device "$DEVICE" \
       --lr "$LR" --warmup "$WARMUP" --steps "$STEPS" --repeat 1 --peak-tflops "$(peak_for "$p")" \
       > "$js" 2> "$err"; then
    tail -n 40 "$err" >&2
    die "torch_mlp.py failed for $p round $r (log: $err)"
  fi
  echo "round $r $p torch: $(tail -n 1 "$err")"
}

echo "== $REPEAT rounds x (${PRECS[*]}) x (gpipe, torch): $WARMUP warm-up + $STEPS measured steps each"
for ((r = 1; r <= REPEAT; r++)); do
  for p in "${PRECS[@]}"; do
    if (( r % 2 == 1 )); then run_gpipe "$p" "$r"; run_torch "$p" "$r"
    else run_torch "$p" "$r"; run_gpipe "$p" "$r"; fi
  done
done

# --- table ----------------------------------------------------------------------------------
echo
"$PY" "$HERE/summarize.py" table --logs "$LOGS" --meta "$MODEL_DIR/meta.json" \
  --precisions "$PRECISIONS" --rounds "$REPEAT" --warmup "$WARMUP" --steps "$STEPS" \
  --peak "fp32=$PEAK_FP32,tf32=$PEAK_TF32,bf16=$PEAK_BF16" --header "$HEADER" --out "$OUT"
echo
echo "wrote $OUT (logs in $LOGS)"
