#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: install, build, run every test
# (lit + FileCheck, GoogleTest units, end-to-end training against PyTorch).
# Ends with the phase times (install, build, tests) and the ten slowest
# tests, so that a slower CI is seen when it happens.
set -euo pipefail
cd "$(dirname "$0")/.."
phase_start=$(date +%s)
phases=()
phase() {  # phase NAME: the time since the last call is NAME's
  local now; now=$(date +%s)
  phases+=("$(printf '%-8s %5ds' "$1" $((now - phase_start)))")
  phase_start=$now
}
summary() {
  local rc=$?
  set +e  # the summary never changes the exit status
  echo
  echo "== phase times: ${phases[*]/%/;}"
  if command -v ccache > /dev/null; then
    echo "== ccache (build and tests): $(ccache --print-stats 2>/dev/null | awk -F'\t' \
      '$1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" {h += $2}
       $1 == "cache_miss" {m = $2} END {printf "%d hits, %d misses", h, m}')"
  fi
  if [[ -f build/ctest.log ]]; then
    echo "== slowest tests:"
    sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) \.+.* ([0-9.]+) sec$/\2 \1/p' \
      build/ctest.log | sort -rn | awk 'NR <= 10 {printf "   %8.1f s  %s\n", $1, $2}'
  fi
  return $rc
}
trap summary EXIT
bash tools/install-deps.sh
phase install
# ccache (installed above) also caches the stage programs that gpipe-compile
# builds in the tests; paths under this tree are hashed relative to it, so a
# clone in another directory hits the same entries.
if command -v ccache > /dev/null; then
  export GPIPE_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=$PWD
  ccache --zero-stats > /dev/null
fi
bash tools/build.sh
phase build
cd build
set +e
ctest --output-on-failure -j "$(nproc)" 2>&1 | tee ctest.log
rc=${PIPESTATUS[0]}
set -e
cd ..
phase tests
exit "$rc"
