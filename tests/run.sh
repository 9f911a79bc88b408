#!/bin/sh
# Runs every test: the C test programs in $1/tests and the CLI scripts
# tests/cli_*.sh (given the release binary build/rel/moefast and the sanitized
# one $1/moefast). Prints one line per test as it ends and "N passed, N
# failed, N skipped" last. A reference file that is neither in ../shared
# ($MOEFAST_SHARED) nor vendored in tests/data/shared makes its test print a
# "skip: PATH absent (...)" line (tests/check.h check_ref, tests/lib.sh ref)
# and go on; those lines are shown under the test's own line and counted as
# "skipped" (parts of tests, not whole tests: a test that skips parts still
# passes or fails on the rest).
#
# Tests run TEST_JOBS at a time (default: the number of cores), longest
# first by the durations the last run recorded (build/test-logs/durations),
# so the suite's wall time is close to the longest test's, not the sum.
# Tests never assert timing and each works in its own temporary directory
# and on a free port, so running them side by side changes no result;
# TEST_JOBS=1 runs them one at a time; TESTS="test_util cli_help" runs only
# the tests named.

# run_one NAME COMMAND...: runs one test, then prints its result and its skip
# lines as one write (so lines of tests ending together do not interleave).
run_one() {
  name=$1; shift
  t0=$(date +%s)
  if "$@" >"$log/$name.log" 2>&1; then st=ok; else st=FAIL; fi
  secs=$(( $(date +%s) - t0 ))
  echo "$secs" >"$log/$name.secs"
  out=$(printf '%-4s %s (%ss)' "$st" "$name" "$secs")
  [ $st = FAIL ] && out="$out
$(tail -n 30 "$log/$name.log" | sed 's/^/     | /')"
  n=$(grep -c '^skip: ' "$log/$name.log")
  [ "$n" -gt 0 ] && out="$out
$(grep '^skip: ' "$log/$name.log" | sort | uniq -c |
    awk '{ c = $1; sub(/^ *[0-9]+ /, ""); print "     " $0 (c > 1 ? " (" c " times)" : "") }')"
  printf '%s\n' "$out"
  echo "$st $n" >"$log/$name.status"
}
# xargs runs each test as "sh tests/run.sh --run-one NAME COMMAND...".
if [ "${1:-}" = --run-one ]; then shift; run_one "$@"; exit 0; fi

B=${1:-build/asan}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export MOEFAST_BIN=${MOEFAST_BIN:-$B/moefast}
export MOEFAST_BIN_REL=${MOEFAST_BIN_REL:-build/rel/moefast}
export log=build/test-logs; mkdir -p $log
jobs=${TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
rm -f $log/*.status $log/*.secs

# The list: "name command..." per line, longest recorded duration first.
list=$log/list
: >"$list"
for t in "$B"/tests/test_*; do
  [ -x "$t" ] && echo "$(basename "$t") $t" >>"$list"
done
for s in tests/cli_*.sh; do
  [ -f "$s" ] && echo "$(basename "$s" .sh) sh $s" >>"$list"
done
if [ -n "${TESTS:-}" ]; then
  for n in $TESTS; do grep "^$n " "$list"; done >"$list.only"
  mv "$list.only" "$list"
fi
# The durations of the last run here, else those of a reference run
# (tests/durations, committed) so a fresh clone packs the jobs well too.
durations=$log/durations; [ -f $durations ] || durations=tests/durations
if [ -f $durations ]; then
  awk 'NR == FNR { d[$1] = $2; next } { print (($1 in d) ? d[$1] : 999999), $0 }' \
    $durations "$list" | sort -k1,1nr -s | cut -d' ' -f2- >"$list.sorted"
  mv "$list.sorted" "$list"
fi


t_start=$(date +%s)
xargs -P "$jobs" -L 1 sh "$0" --run-one <"$list"

pass=0; fail=0; skip=0; failed=""
: >$log/durations.new
while read -r name cmd; do
  if [ -f "$log/$name.status" ]; then
    read -r st n <"$log/$name.status"
    echo "$name $(cat "$log/$name.secs")" >>$log/durations.new
  else
    st=FAIL; n=0; echo "FAIL $name (did not run)"
  fi
  if [ "$st" = ok ]; then pass=$((pass+1)); else fail=$((fail+1)); failed="$failed $name"; fi
  skip=$((skip+n))
done <"$list"
[ -z "${TESTS:-}" ] && mv $log/durations.new $log/durations
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped ($(( $(date +%s) - t_start ))s, $jobs at a time)"
[ "$fail" -eq 0 ]
