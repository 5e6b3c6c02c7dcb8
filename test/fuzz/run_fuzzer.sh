#!/usr/bin/env bash
# run_fuzzer.sh FUZZER CORPUS WORKDIR SECONDS: runs a libFuzzer harness for
# SECONDS on a copy of the seed corpus CORPUS (new inputs go into
# WORKDIR/corpus, never into the repository), crash files into WORKDIR.
# Prints libFuzzer's final stats; exits non-zero on a crash, a leak, a
# timeout or an out-of-memory input, with the reproducer's path in the log.
set -uo pipefail
fuzzer=$1 corpus=$2 work=$3 seconds=$4
name=$(basename "$fuzzer")
rm -rf "$work/corpus"
mkdir -p "$work/corpus" "$work/artifacts"
cp "$corpus"/* "$work/corpus/"
log="$work/$name.log"
# -timeout: one input may take at most 25 s; -rss_limit_mb: 4 GiB (ASan's quarantine and caches grow the RSS to ~0.7 GiB in 2 minutes).
"$fuzzer" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=4096 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" \
  "$work/corpus" > "$log" 2>&1
rc=$?
# The stats: the last status line (execs, cov, ft, corp) and the final ones.
grep -E '^#[0-9]+' "$log" | tail -n 1 | sed "s/^/$name: /"
grep -E '^stat::' "$log" | sed "s/^/$name: /"
if [[ $rc -ne 0 ]]; then
  echo "$name: FAILED (exit $rc); log $log; the end of it:"
  tail -n 60 "$log"
  grep -E 'Test unit written to|artifact_prefix' "$log" | sed "s/^/$name: /"
  exit 1
fi
echo "$name: ok ($(ls "$work/corpus" | wc -l) corpus inputs)"
