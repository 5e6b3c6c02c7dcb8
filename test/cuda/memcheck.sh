#!/bin/sh
# compute-sanitizer memcheck over one training step of CUDA stage programs:
# the example model as 1 stage, and as 2 stages x 2 micro-batches on one GPU
# (host-staged transfers). Needs a GPU (run through gpu_test.sh) and
# compute-sanitizer (CUDA toolkit); skipped (77) without it.
# usage: memcheck.sh BIN_DIR EXAMPLES_DIR WORK_DIR
set -eu
BIN=$1 EXAMPLES=$2 WORK=$3
SAN=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer ||
  echo /usr/local/cuda/bin/compute-sanitizer)}
if [ ! -x "$SAN" ]; then
  echo "SKIPPED: compute-sanitizer not found (set COMPUTE_SANITIZER)"
  exit 77
fi
rm -rf "$WORK" && mkdir -p "$WORK"
"$BIN/gpipe-compile" "$EXAMPLES/mlp.onnx" -o "$WORK/k1" --target cuda
"$SAN" --tool memcheck --error-exitcode 3 --leak-check full \
  "$WORK/k1/stage0" --data "$EXAMPLES/data" --steps 1 \
  --weights-in "$WORK/k1/weights"
"$BIN/gpipe-compile" "$EXAMPLES/mlp.onnx" -o "$WORK/k2" --target cuda \
  --stages 2 --microbatches 2
ROOT=
[ "$(id -u)" = 0 ] && ROOT=--allow-run-as-root
mpirun $ROOT --oversubscribe -np 1 "$SAN" --tool memcheck --error-exitcode 3 \
  "$WORK/k2/stage0" --data "$EXAMPLES/data" --steps 1 \
  --weights-in "$WORK/k2/weights" : -np 1 "$SAN" --tool memcheck \
  --error-exitcode 3 "$WORK/k2/stage1" --data "$EXAMPLES/data" --steps 1 \
  --weights-in "$WORK/k2/weights"
echo "memcheck: clean"
