#!/bin/sh
# Runs a GPU test, or skips it visibly (exit 77, ctest's SKIP_RETURN_CODE)
# when no CUDA device can be used: CI machines have the CUDA toolkit, no GPU.
# usage: gpu_test.sh PROBE COMMAND [ARGS...]
PROBE=$1; shift
if ! why=$("$PROBE" 2>&1); then
  echo "SKIPPED: no CUDA device ($why)"
  exit 77
fi
exec "$@"
