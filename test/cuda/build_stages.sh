#!/bin/sh
# CI without a GPU: compiles the example model into 4 CUDA stage executables
# and checks that each holds sm_90 (and sm_80) device code and links NCCL; a
# bf16 1-stage build must link too. Nothing here runs on a GPU.
# usage: build_stages.sh BIN_DIR EXAMPLES_DIR WORK_DIR
set -eu
BIN=$1 EXAMPLES=$2 WORK=$3
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$WORK" && mkdir -p "$WORK"
"$BIN/gpipe-compile" "$EXAMPLES/mlp.onnx" -o "$WORK/k4" --stages 4 \
    --microbatches 4 --target cuda
test "$(grep -c '"executable": "stage' "$WORK/k4/pipeline.json")" -eq 4
grep -q '"target": "cuda"' "$WORK/k4/pipeline.json"
/usr/bin/python3 "$HERE/check_cuda_binaries.py" --arch 80 --arch 90 \
    --needs nccl --needs cublasLt "$WORK"/k4/stage0 "$WORK"/k4/stage1 \
    "$WORK"/k4/stage2 "$WORK"/k4/stage3
"$BIN/gpipe-compile" "$EXAMPLES/mlp.onnx" -o "$WORK/bf16" --target cuda \
    --precision bf16 --cuda-arch 90
/usr/bin/python3 "$HERE/check_cuda_binaries.py" --arch 90 --needs cublasLt \
    "$WORK/bf16/stage0"
# Without a GPU a CUDA stage program says so and fails cleanly.
if [ ! -e /dev/nvidia0 ]; then
  if "$WORK/bf16/stage0" --data "$EXAMPLES/data" --steps 1 \
      --weights-in "$WORK/bf16/weights" > "$WORK/nogpu.log" 2>&1; then
    echo "FAIL: a CUDA stage program ran without a GPU"; exit 1
  fi
  grep -q "gpipe: error: stage 0: no CUDA device" "$WORK/nogpu.log" ||
    { cat "$WORK/nogpu.log"; exit 1; }
  echo "ok: without a GPU: $(cat "$WORK/nogpu.log")"
fi
echo "cuda build: ok"
