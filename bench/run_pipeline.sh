#!/bin/sh
# Pipeline-efficiency benchmark: mlp_deep (8 x 1024 Linear+ReLU, B=256, SGD) trained as 1 stage
# and as 2 stages x 8 micro-batches, one thread per stage process; prints markdown (ms/step,
# speedups vs the ideal 2M/(M+K-1), loss-curve check, GEMM sweep, traced per-stage breakdown).
#
# usage: bench/run_pipeline.sh [BIN_DIR] [bench_pipeline.py args, e.g. --steps 20 --warmup 3 --repeat 5]
#   BIN_DIR defaults to $GPIPE_BIN, else the first of build/bin, build/tools, build that
#   contains gpipe-run.  Output is also saved to $WORKDIR/bench_pipeline.md
#   (WORKDIR default /tmp/gpipe_bench_pipeline).  Exit status 1 if the loss curves differ.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
PY=${PY:-/usr/bin/python3}
WORKDIR=${WORKDIR:-/tmp/gpipe_bench_pipeline}

BIN=${GPIPE_BIN:-}
if [ $# -ge 1 ] && [ "${1#-}" = "$1" ]; then BIN=$1; shift; fi
if [ -z "$BIN" ]; then
  for d in "$REPO/build/bin" "$REPO/build/tools" "$REPO/build"; do
    if [ -x "$d/gpipe-run" ]; then BIN=$d; break; fi
  done
fi
if [ -z "$BIN" ]; then
  echo "bench/run_pipeline.sh: gpipe-run not found; pass BIN_DIR or set GPIPE_BIN" >&2
  exit 2
fi
mkdir -p "$WORKDIR"
rcfile="$WORKDIR/.bench_rc"
{ rc=0; "$PY" "$HERE/bench_pipeline.py" --bin "$BIN" --workdir "$WORKDIR" "$@" || rc=$?; echo $rc > "$rcfile"; } \
  | tee "$WORKDIR/bench_pipeline.md"
exit "$(cat "$rcfile")"
