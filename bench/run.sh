#!/bin/sh
# Step-time benchmark: gpipe-compile'd MLP (8 x 1024 Linear+ReLU, B=256, SGD) vs torch,
# at 1 and 2 threads.  Prints a markdown table (ms/step, median after warmup).
#
# usage: bench/run.sh [BIN_DIR] [extra bench_step.py args, e.g. --threads 1,2,4 --steps 50]
#   BIN_DIR defaults to $GPIPE_BIN, else the first of build/bin, build/tools, build
#   that contains gpipe-run.  Output is also saved to $WORKDIR/bench.md
#   (WORKDIR default /tmp/gpipe_bench).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(dirname "$HERE")
PY=${PY:-/usr/bin/python3}
WORKDIR=${WORKDIR:-/tmp/gpipe_bench}

BIN=${GPIPE_BIN:-}
if [ $# -ge 1 ] && [ "${1#-}" = "$1" ]; then BIN=$1; shift; fi
if [ -z "$BIN" ]; then
  for d in "$REPO/build/bin" "$REPO/build/tools" "$REPO/build"; do
    if [ -x "$d/gpipe-run" ]; then BIN=$d; break; fi
  done
fi
if [ -z "$BIN" ]; then
  echo "bench/run.sh: gpipe-run not found; pass BIN_DIR or set GPIPE_BIN" >&2
  exit 2
fi
mkdir -p "$WORKDIR"
rcfile="$WORKDIR/.bench_rc"
{ rc=0; "$PY" "$HERE/bench_step.py" --bin "$BIN" --workdir "$WORKDIR" "$@" || rc=$?; echo $rc > "$rcfile"; } \
  | tee "$WORKDIR/bench.md"
exit "$(cat "$rcfile")"
