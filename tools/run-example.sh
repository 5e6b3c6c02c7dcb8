#!/usr/bin/env bash
# Trains the shipped example, a character-level GPT on the opening of
# Shakespeare's Coriolanus (examples/gpt), as a 4-stage pipeline of 8
# micro-batches on the CPU, printing the loss of every step.
# Usage: tools/run-example.sh [BUILD_DIR [OUT_DIR [STEPS]]]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
out="${2:-$build/example}"
steps="${3:-300}"
rm -rf "$out"
"$build/bin/gpipe-compile" "$root/examples/gpt/gpt.onnx" -o "$out" \
  --stages 4 --microbatches 8 --optimizer adam --lr 0.003
"$build/bin/gpipe-run" "$out" --data "$root/examples/gpt/data" \
  --steps "$steps" --log-json "$out/log.jsonl" \
  --save-onnx "$out/trained.onnx"
echo "trained model: $out/trained.onnx"
