#!/bin/sh
# Run the end-to-end training checks (gpipe-compile/gpipe-run vs torch.optim).
#
# usage: test/e2e/run_e2e.sh BIN_DIR [WORK_DIR] [--quick] [--only REGEX]
#   BIN_DIR   directory with gpipe-compile and gpipe-run
#   WORK_DIR  scratch directory (default: /tmp/gpipe_e2e); one subdirectory per case, and
#             WORK_DIR/prepared (prepare.py: the cases' models, data and torch references,
#             check_training.py --prepared) and WORK_DIR/single-cache (the 1-stage reference
#             programs' results, check_training.py --single-cache)
#   --quick   only the first few cases
#   --only REGEX  only the cases whose name matches the extended regex (grep -E), e.g.
#             --only '^skip_' (the pipelining matrix) or --only '_k[0-9]+_m[0-9]+'
# Extra environment: PY (default /usr/bin/python3), TOL (default 1e-4), JOBS (prepare.py
# --jobs, default 2).
# Exit status: number of failed cases (0 = all passed), capped at 125.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PY:-/usr/bin/python3}
TOL=${TOL:-1e-4}
usage() { echo "usage: $0 BIN_DIR [WORK_DIR] [--quick] [--only REGEX]" >&2; exit 2; }
[ $# -ge 1 ] || usage
BIN=$1; shift
WORK=/tmp/gpipe_e2e
QUICK=0
ONLY=
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --only) [ $# -ge 2 ] || usage; ONLY=$2; shift ;;
    -*) usage ;;
    *) WORK=$1 ;;
  esac
  shift
done
mkdir -p "$WORK"
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"

# The cases' models, data and torch references, once per distinct key (those of the
# selected cases only); a case without an entry exports and trains by itself.
PREP_ONLY=$ONLY
if [ -z "$ONLY" ] && [ "$QUICK" = 1 ]; then
  PREP_ONLY="^($(grep -E '^[a-z0-9_]+\|' "$HERE/cases.txt" | cut -d'|' -f1 | head -5 | paste -sd'|'))\$"
fi
echo "prepare: $WORK/prepared (log: $WORK/prepare.log)"
# (Python's re: the names selected by --only (grep -E) are matched the same way here)
if ! "$PY" "$HERE/prepare.py" --out "$WORK/prepared" --jobs "${JOBS:-2}" \
      ${PREP_ONLY:+--only "$PREP_ONLY"} --single-cache "$WORK/single-cache" --bin "$BIN" \
      > "$WORK/prepare.log" 2>&1; then
  echo "prepare.py failed (log: $WORK/prepare.log); the cases export and train by themselves"
fi
tail -1 "$WORK/prepare.log"

# name | arguments to check_training.py (shared with CMakeLists.txt)
CASES=$(grep -v '^#' "$HERE/cases.txt")

pass=0; fail=0; failed=""
n=0
OLDIFS=$IFS
IFS='
'
for line in $CASES; do
  IFS=$OLDIFS
  [ -n "$line" ] || continue
  name=${line%%|*}; args=${line#*|}
  if [ -n "$ONLY" ] && ! printf '%s\n' "$name" | grep -Eq -- "$ONLY"; then
    IFS='
'
    continue
  fi
  n=$((n + 1))
  if [ "$QUICK" = 1 ] && [ $n -gt 5 ]; then break; fi
  # shellcheck disable=SC2086
  if "$PY" "$HERE/check_training.py" $args --tol "$TOL" --bin "$BIN" \
        --workdir "$WORK/$name" --prepared "$WORK/prepared" \
        --single-cache "$WORK/single-cache" > "$WORK/$name.log" 2>&1; then
    pass=$((pass + 1)); echo "PASS $name"
  else
    fail=$((fail + 1)); failed="$failed $name"
    echo "FAIL $name  (log: $WORK/$name.log)"
    grep -E '^(FAIL|  - )|error:' "$WORK/$name.log" | head -8 | sed 's/^/    /'
  fi
  IFS='
'
done
IFS=$OLDIFS
echo "e2e: $pass passed, $fail failed${failed:+ ($failed )}"
[ $fail -gt 125 ] && fail=125
exit $fail
