#!/usr/bin/env bash
# Configures and builds gpipe-compile into ./build (Release, Ninja).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > build/configure.log 2>&1 \
  || { cat build/configure.log; exit 1; }
cmake --build build
