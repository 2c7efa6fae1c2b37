#!/bin/sh
# Runs every test binary given, sums cmocka's per-binary results and ends with the one line
# CI reads: "N passed, N failed, N skipped". A binary that crashes or prints no summary counts as
# one failure.
# Output goes through a file, not a pipe, so a stray grandchild (a server a failed test left
# running) cannot hold the runner; each binary is bounded by QV_TEST_TIMEOUT seconds (1800).
passed=0; failed=0; skipped=0
log=$(mktemp); trap 'rm -f "$log"' EXIT
for t in "$@"; do
  name=$(basename "$t")
  timeout -k 10 "${QV_TEST_TIMEOUT:-1800}" "$t" >"$log" 2>&1; rc=$?
  out=$(cat "$log")
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
