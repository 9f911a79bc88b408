#!/bin/sh
# Runs every test: the C test programs in $1/tests and the CLI scripts
# tests/cli_*.sh (given the release binary build/rel/moefast and the sanitized
# one $1/moefast). Prints one line per test and "N passed, N failed, N skipped"
# last. A reference file that is neither in ../shared ($MOEFAST_SHARED) nor
# vendored in tests/data/shared makes its test print a "skip: PATH absent
# (...)" line (tests/check.h check_ref, tests/lib.sh ref) and go on; those
# lines are shown under the test's own line and counted as "skipped" (parts
# of tests, not whole tests: a test that skips parts still passes or fails on
# the rest).
B=${1:-build/asan}
pass=0; fail=0; skip=0; failed=""
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export MOEFAST_BIN=${MOEFAST_BIN:-$B/moefast}
export MOEFAST_BIN_REL=${MOEFAST_BIN_REL:-build/rel/moefast}
log=build/test-logs; mkdir -p $log
run_one() { # name, command...
  name=$1; shift
  t0=$(date +%s)
  if "$@" >"$log/$name.log" 2>&1; then
    pass=$((pass+1)); echo "ok   $name ($(( $(date +%s) - t0 ))s)"
  else
    fail=$((fail+1)); failed="$failed $name"; echo "FAIL $name ($(( $(date +%s) - t0 ))s)"
    tail -n 30 "$log/$name.log" | sed 's/^/     | /'
  fi
  n=$(grep -c '^skip: ' "$log/$name.log")
  skip=$((skip+n))
  [ "$n" -gt 0 ] && grep '^skip: ' "$log/$name.log" | sort | uniq -c |
    awk '{ c = $1; sub(/^ *[0-9]+ /, ""); print "     " $0 (c > 1 ? " (" c " times)" : "") }'
  return 0
}
for t in "$B"/tests/test_*; do
  [ -x "$t" ] || continue
  run_one "$(basename "$t")" "$t"
done
for s in tests/cli_*.sh; do
  [ -f "$s" ] || continue
  run_one "$(basename "$s" .sh)" sh "$s"
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
