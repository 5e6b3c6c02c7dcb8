#!/usr/bin/env bash
# Fuzzes the ONNX importer and the .npy reader with libFuzzer (clang-14,
# ASan + UBSan) in the separate build tree build-fuzz (GPIPE_FUZZ=ON).
#
#   bash tools/fuzz.sh [SECONDS]     build, then run each harness SECONDS
#                                    (default 600) on a copy of its corpus
#   bash tools/fuzz.sh --build-only  configure (if needed) and build only
#
# New inputs go to build-fuzz/fuzz-work/<harness>/corpus, never into the
# repository's seed corpus (test/fuzz/corpus); crash reproducers go to
# build-fuzz/fuzz-work/<harness>/artifacts. Exits non-zero if a harness
# found a crash, leak, timeout or out-of-memory input (its path is printed).
# CXX / CC pick another clang (default clang++-14 / clang-14).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=600 build_only=0
case "${1:-}" in
  --build-only) build_only=1 ;;
  '') ;;
  *[!0-9]*) echo "usage: bash tools/fuzz.sh [SECONDS | --build-only]" >&2; exit 2 ;;
  *) seconds=$1 ;;
esac
build=build-fuzz
harnesses=(fuzz_npy fuzz_onnx_import)
if [[ ! -f $build/build.ninja ]]; then
  mkdir -p $build
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release \
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
