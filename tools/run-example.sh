#!/usr/bin/env bash
# Trains the shipped example, a character-level GPT on the opening of
# Shakespeare's Coriolanus (examples/gpt), as a 4-stage pipeline of 8
# micro-batches on the CPU, printing the loss of every step.
# Usage: tools/run-example.sh [BUILD_DIR [OUT_DIR [STEPS]]]
# (defaults: build, BUILD_DIR/example, 300; relative to the repository)
set -euo pipefail
here="$PWD"
abs() { case "$1" in /*) echo "$1" ;; *) echo "$here/$1" ;; esac; }
build="${1:+$(abs "$1")}"
out="${2:+$(abs "$2")}"
steps="${3:-300}"
cd "$(dirname "$0")/.."
build="${build:-build}"
out="${out:-$build/example}"
rm -rf "$out"
"$build/bin/gpipe-compile" examples/gpt/gpt.onnx -o "$out" \
  --stages 4 --microbatches 8 --optimizer adam --lr 0.003
"$build/bin/gpipe-run" "$out" --data examples/gpt/data --steps "$steps" \
  --log-json "$out/log.jsonl" --save-onnx "$out/trained.onnx"
echo "trained model: $out/trained.onnx"
