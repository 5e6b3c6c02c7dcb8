#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: install, build, run every test
# (lit + FileCheck, GoogleTest units, end-to-end training against PyTorch).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
cd build
ctest --output-on-failure -j "$(nproc)"
