# Shared by the multi-host tests (sourced): their verdicts and the weight
# comparison.

# Exit 77 (ctest: skipped) with the reason.
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

# same_weights REF GOT WHAT: every .npy file of REF equals GOT's bit for bit
# (else fail, naming the file and WHAT); sets weight_files to how many.
same_weights() {
  local f
  weight_files=0
  for f in "$1"/*.npy; do
    [[ -e $f ]] || break
    cmp -s "$f" "$2/$(basename "$f")" || fail "$(basename "$f") differs $3"
    weight_files=$((weight_files + 1))
  done
  (( weight_files > 0 )) || fail "no weights written in $1"
}
