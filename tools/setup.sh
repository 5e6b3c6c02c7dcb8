#!/usr/bin/env bash
# One command from a fresh Debian 12 machine: install, build, and train the
# shipped example model on the CPU, printing the loss of every step.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
bash tools/build.sh
rm -rf build/example
build/bin/gpipe-compile examples/mlp.onnx -o build/example \
  --optimizer adam --lr 0.01 --explain
build/bin/gpipe-run build/example --data examples/data --steps 40 \
  --log-json build/example/log.jsonl --save-onnx build/example/trained.onnx
echo "trained model: build/example/trained.onnx"
