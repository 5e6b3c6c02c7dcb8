#!/usr/bin/env bash
# Checks build-system integration from the build tree and from an install:
# a consumer project builds the example pipeline with gpipe_add_pipeline(),
# and the stage program trains.
# usage: check.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
src=$1 build=$2 work=$3
rm -rf "$work" && mkdir -p "$work"

consume() { # consume NAME PACKAGE_DIR GPIPE_RUN -> trains 2 steps with the pipeline
  local name=$1 pkg=$2 run=$3
  cmake -S "$src/test/cmake" -B "$work/$name" -G Ninja \
    -Dgpipe-compile_DIR="$pkg" -DGPIPE_EXAMPLES="$src/examples" > "$work/$name.log"
  cmake --build "$work/$name" > "$work/$name.build.log" 2>&1 \
    || { cat "$work/$name.build.log"; exit 1; }
  local dir; dir=$(cat "$work/$name/pipeline_dir.txt")
  test -x "$dir/stage0"
  "$run" "$dir" --data "$src/examples/data" --steps 2
}

# 1. From the build tree.
consume from-build "$build" "$build/bin/gpipe-run"
grep -q "$src/runtime/include" "$work/from-build.build.log"
echo "build tree: ok"

# 2. From an install prefix: the installed compiler links the installed runtime.
cmake --install "$build" --prefix "$work/prefix" > /dev/null
consume from-install "$work/prefix/lib/cmake/gpipe-compile" "$work/prefix/bin/gpipe-run"
grep -q -- "-I$work/prefix/include " "$work/from-install.build.log"
grep -q "$work/prefix/lib/gpipe/libgpipe_runtime.a" "$work/from-install.build.log"
echo "install tree: ok"
