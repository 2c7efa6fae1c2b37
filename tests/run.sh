#!/bin/sh
# Runs every test binary given, sums cmocka's per-binary results and ends with the one line
# CI reads: "N passed, N failed, N skipped". A binary that crashes or prints no summary counts as
# one failure.
passed=0; failed=0; skipped=0
for t in "$@"; do
  name=$(basename "$t")
  out=$("$t" 2>&1); rc=$?
  printf '%s\n' "$out"
  p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
  f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
  s=$(printf '%s\n' "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
  if ! printf '%s\n' "$out" | grep -q '^\[  PASSED  \]'; then
    echo "run.sh: $name exited $rc without a cmocka summary" >&2
    f=1
  elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "run.sh: $name exited $rc" >&2
    f=1
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
