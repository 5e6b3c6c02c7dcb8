#!/usr/bin/env bash
# The README's main job: tools/run-example.sh (what tools/setup.sh runs)
# trains the shipped GPT example, 4 stages x 8 micro-batches on the CPU, from
# the committed artefacts, printing every step's loss; the loss falls.
# Usage: check_example.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
src="$1" build="$2" work="$3"
mkdir -p "$work"
bash "$src/tools/run-example.sh" "$build" "$work/out" > "$work/stdout.txt"
# Every step prints its loss; the first ones are torch's on the same model and
# data (make_gpt_example.py --check: 4.261041 at step 1, 3.027952 at step
# 10), and the mean of the last 10 steps is more than 1.0 below the first.
awk '
  /^step [0-9]+ loss / { n++; loss[n] = $4; if ($2 != n) bad = "step " $2 " printed as line " n }
  END {
    if (bad != "") { print "FAIL: " bad; exit 1 }
    if (n < 20) { print "FAIL: only " n " step lines"; exit 1 }
    d1 = loss[1] - 4.261041; d10 = loss[10] - 3.027952
    if (d1 < -1e-4 || d1 > 1e-4) { print "FAIL: step 1 loss " loss[1] ", torch 4.261041"; exit 1 }
    if (d10 < -2e-3 || d10 > 2e-3) { print "FAIL: step 10 loss " loss[10] ", torch 3.027952"; exit 1 }
    for (i = n - 9; i <= n; i++) last += loss[i]
    last /= 10
    printf "%d steps: loss %.4f at step 1, %.4f mean of the last 10 steps\n", n, loss[1], last
    if (last > loss[1] - 1.0) { print "FAIL: the loss did not fall by more than 1.0"; exit 1 }
    print "PASS"
  }' "$work/stdout.txt"
test -s "$work/out/trained.onnx"
