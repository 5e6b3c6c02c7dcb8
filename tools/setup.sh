#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: install, build, and train the
# shipped example (a character-level GPT, 4 stages x 8 micro-batches) on the
# CPU, printing the loss of every step.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
bash tools/run-example.sh
