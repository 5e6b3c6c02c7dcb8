#!/usr/bin/env bash
# Fuzzes the ONNX importer and the .npy reader with libFuzzer (clang-14,
# ASan + UBSan) in the separate build tree build-fuzz (GPIPE_FUZZ=ON).
#
#   bash tools/fuzz.sh [SECONDS]     build, then run each harness SECONDS
#                                    (default 600) on a copy of its corpus
#   bash tools/fuzz.sh --build-only  configure (if needed) and build only
#   bash tools/fuzz.sh --O0 SECONDS  the same in build-fuzz-o0, compiled at
#                                    -O0: builds in about half the time (3.5
#                                    min on 2 cores), fuzzes ~10x slower; the
#                                    CI's smoke run (.ci/run)
#
# New inputs go to build-fuzz/fuzz-work/<harness>/corpus, never into the
# repository's seed corpus (test/fuzz/corpus); crash reproducers go to
# build-fuzz/fuzz-work/<harness>/artifacts. Exits non-zero if a harness
# found a crash, leak, timeout or out-of-memory input (its path is printed).
# CXX / CC pick another clang (default clang++-14 / clang-14).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=600 build_only=0
build=build-fuzz opt=(-DCMAKE_BUILD_TYPE=Release)
if [[ "${1:-}" == --O0 ]]; then
  build=build-fuzz-o0 opt=(-DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS=-O0)
  shift
fi
case "${1:-}" in
  --build-only) build_only=1 ;;
  '') ;;
  *[!0-9]*) echo "usage: bash tools/fuzz.sh [--O0] [SECONDS | --build-only]" >&2; exit 2 ;;
  *) seconds=$1 ;;
esac
harnesses=(fuzz_npy fuzz_onnx_import)
if [[ ! -f $build/build.ninja ]]; then
  mkdir -p $build
  cmake -S . -B $build -G Ninja "${opt[@]}" \
    -DCMAKE_CXX_COMPILER="${CXX:-clang++-14}" -DCMAKE_C_COMPILER="${CC:-clang-14}" \
    -DGPIPE_FUZZ=ON > $build/configure.log 2>&1 \
    || { cat $build/configure.log; rm -f $build/build.ninja; exit 1; }
fi
ninja -C $build "${harnesses[@]}"
[[ $build_only -eq 1 ]] && exit 0

declare -A corpus=([fuzz_npy]=npy [fuzz_onnx_import]=onnx)
status=0
for h in "${harnesses[@]}"; do
  echo "== $h: ${seconds} s"
  test/fuzz/run_fuzzer.sh "$build/test/fuzz/$h" "test/fuzz/corpus/${corpus[$h]}" \
    "$build/fuzz-work/$h" "$seconds" || status=1
done
exit $status
