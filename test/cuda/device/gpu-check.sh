#!/usr/bin/env bash
# The GPU check in one command, for a GPU machine that only runs programs:
#
#   OUT=DIR bash test/cuda/device/gpu-check.sh BUNDLE.tar.xz [--budget S] [RUN.PY ARGS...]
#
# BUNDLE.tar.xz is what test/cuda/device/pack.py --tar wrote here (tiers 0 and
# 1 of priority.txt, --bench). Most valuable first, and never past --budget
# seconds (default 480) in all:
#   1. the environment -> OUT/env.txt (GPU, driver, compute mode, MIG, torch and
#      its CUDA, nvcc, compute-sanitizer, ssh, mpirun/orterun, the nvidia/*/lib
#      folders, /dev/shm, memory): read it first when anything fails;
#   2. unpack the bundle (into $GPU_CHECK_WORK, default /tmp/gpu-check);
#   3. run.py: Open MPI install, the library path, the probe (nothing else
#      when it fails), the mpirun smoke job, the kernel test, the e2e cases of
#      tier 0 then tier 1 (4 at a time), memcheck on 1 stage, the benchmark,
#      memcheck on 2 stages; with a deadline that leaves 25 s for the logs, and
#      an outer `timeout` whose SIGTERM makes run.py kill what it started and
#      write its results;
#   4. the launcher's version (after the install) appended to env.txt.
# OUT gets at most 6 files: env.txt, results.json (every check: kind, name, ok,
# detail, seconds; "not run (deadline)" for those cut off), kernels.log,
# logs.tgz, bench.txt, gpu-check.log (this script's output). Exit status:
# run.py's (the number of failed checks), 1 when the bundle cannot be
# unpacked, 2 for bad arguments.
set -u
if [ $# -lt 1 ] || [ ! -f "$1" ]; then
  echo "usage: OUT=DIR gpu-check.sh BUNDLE.tar.xz [--budget S] [run.py args]" >&2
  exit 2
fi
START=$(date +%s)
BUNDLE=$(readlink -f "$1"); shift
BUDGET=480
if [ "${1:-}" = "--budget" ]; then
  BUDGET=${2:?--budget needs seconds}; shift 2
fi
case $BUDGET in ''|*[!0-9]*) echo "gpu-check: --budget takes whole seconds" >&2; exit 2;; esac
REPO=$(cd "$(dirname "$0")/../../.." && pwd)
OUT=${OUT:-$PWD/gpu-check-out}
WORK=${GPU_CHECK_WORK:-/tmp/gpu-check}
mkdir -p "$OUT" || exit 2
exec > >(tee -a "$OUT/gpu-check.log") 2>&1
elapsed() { echo $(( $(date +%s) - START )); }
say() { echo "gpu-check [$(elapsed)s] $*"; }

# The Python with numpy (and torch for the benchmark): $PY, python3, or the
# GPU machine's venv.
PY=${PY:-}
for c in "$PY" python3 /opt/torch/.venv/bin/python3 /usr/bin/python3; do
  if [ -n "$c" ] && "$c" -c "import numpy" 2>/dev/null; then PY=$c; break; fi
done
[ -n "$PY" ] || PY=python3

say "environment -> $OUT/env.txt"
{
  echo "# gpu-check.sh environment, $(date -u +%FT%TZ)"
  echo "## host"; uname -a; (. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
  ldd --version 2>&1 | head -1; nproc; free -m 2>&1
  echo "## GPU"
  timeout 30 nvidia-smi 2>&1 | head -25
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode,mig.mode.current,clocks.sm,clocks.mem --format=csv 2>&1
  echo "## python: $PY"
  timeout 60 "$PY" -c 'import sys, numpy; print(sys.version.split()[0], "numpy", numpy.__version__)
try:
    import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "available", torch.cuda.is_available())
except Exception as e: print("torch:", e)' 2>&1
  echo "## tools"
  for t in nvcc compute-sanitizer ssh rsh mpirun orterun ldconfig xz; do
    printf '%s: %s\n' "$t" "$(which -a $t 2>/dev/null | tr '\n' ' ')"
  done
  ls -d /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null
  echo "## nvidia/*/lib"
  "$PY" -c 'import site, glob
for sp in site.getsitepackages(): print("\n".join(sorted(glob.glob(sp + "/nvidia/*/lib"))))' 2>&1
  ls -d /opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null
  echo "## /dev/shm, /tmp"; df -h /dev/shm /tmp 2>&1
  echo "## environment"; env | grep -E '^(CUDA|LD_LIBRARY|NVIDIA|OMPI|PATH=)' | sort
} > "$OUT/env.txt" 2>&1

say "unpack $BUNDLE -> $WORK"
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
if ! tar -xJf "$BUNDLE" -C "$WORK" 2>"$WORK/untar.err" || [ ! -f "$WORK/gpu-bundle/run.py" ]; then
  say "cannot unpack the bundle: $(tail -c 500 "$WORK/untar.err")"
  printf '[{"kind": "setup", "name": "unpack", "ok": false, "detail": %s, "seconds": null}]\n' \
    "\"cannot unpack $(basename "$BUNDLE")\"" > "$OUT/results.json"
  exit 1
fi
say "unpacked: $(du -sh "$WORK/gpu-bundle" | cut -f1)"

# run.py stops starting checks LOGS_S before the end (logs.tgz, the summary);
# the outer timeout is the hard stop.
LOGS_S=25
LEFT=$(( BUDGET - $(elapsed) ))
if [ "$LEFT" -le $(( LOGS_S + 5 )) ]; then
  say "no time left for run.py (budget ${BUDGET}s)"
  printf '[{"kind": "setup", "name": "run.py", "ok": false, "detail": "not run (deadline)", "seconds": null}]\n' \
    > "$OUT/results.json"
  exit 1
fi
say "run.py: deadline $(( LEFT - LOGS_S ))s"
timeout -s TERM -k 10 "$(( LEFT - 5 ))" env PYTHONUNBUFFERED=1 "$PY" \
  "$WORK/gpu-bundle/run.py" --out "$OUT" --work "$WORK/work" \
  --deadline "$(( LEFT - LOGS_S ))" \
  --bench-script "$REPO/bench/gpu/device_bench.py" "$@"
RC=$?
{
  echo "## launcher after the install"
  for t in mpirun orterun; do printf '%s: %s\n' "$t" "$(which -a $t 2>/dev/null | tr '\n' ' ')"; done
  timeout 10 /usr/bin/orterun --version 2>&1 | head -2
} >> "$OUT/env.txt" 2>&1
say "done: run.py exit $RC; $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $RC
