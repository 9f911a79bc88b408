#!/bin/sh
# cli_price.sh — `moefast price`: malformed SPECs, missing files and failing
# runs exit 2 with one clear line; A against A gives a score interval that
# contains 1 and a score near 1; a side slowed by the test-only flag
# test_slow (2 ms per token, made dominant by a long prompt and few steps) is
# reported slower with its interval below 1 and rejected; a run that changes
# a token is rejected and named. Every output has the informational steps
# window (the decode steps without the seed prefill), the score stays
# decode^0.75 x prefill^0.25 of the reported medians, and a change seen only
# in the steps window is never a rejection (a fake bench with fixed timings).
# No absolute timing is ever asserted.
# The timed runs use the release binary ($MOEFAST_BIN_REL) when it exists, so
# the sanitizer's overhead does not swamp the differences; price itself runs
# from $MOEFAST_BIN.
BIN=${MOEFAST_BIN:-build/asan/moefast}
REL=${MOEFAST_BIN_REL:-build/rel/moefast}
. tests/lib.sh
d=$(mktemp -d /tmp/moefast-cli-price-XXXXXX) || exit 1
trap 'rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
M=$(tiny_f32 "$d") && [ -f "$M" ] || { echo "FAIL: no qwen3moe-tiny F32 model" >&2; exit 1; }
CHILD=$BIN
[ -x "$REL" ] && CHILD=$REL
P="$BIN price -m $M --bin $CHILD"

. scripts/jget.sh

expect_err() {
  "$BIN" "$@" >"$d/out" 2>"$d/err"; rc=$?
  [ $rc -eq 2 ] || bad "'$*' exited $rc, expected 2"
  [ "$(grep -c . "$d/err")" -eq 1 ] || bad "'$*' printed $(grep -c . "$d/err") stderr lines: $(cat "$d/err")"
  grep -q "^moefast price: " "$d/err" || bad "'$*' message lacks 'moefast price: ': $(cat "$d/err")"
}
expect_msg() { grep -q -- "$1" "$d/err" || bad "message lacks '$1': $(cat "$d/err")"; }

# ---- arguments and SPECs
NT=--no-token-check
expect_err price; expect_msg "-m"
expect_err price -m "$d/missing.gguf" --a default --b default $NT; expect_msg "missing.gguf"
expect_err price -m "$M" --b default $NT; expect_msg "--a"
expect_err price -m "$M" --a default $NT; expect_msg "--b"
expect_err price -m "$M" --a default --b default --noise $NT; expect_msg "noise"
expect_err price -m "$M" --a default --b default --json --csv $NT; expect_msg "csv"
expect_err price -m "$M" --a default --b default; expect_msg "trace"
expect_err price -m "$M" --a default --b default --trace "$d/missing.json"; expect_msg "missing.json"
expect_err price -m "$M" --a default --b default --pairs 0 $NT; expect_msg "pairs"
expect_err price -m "$M" --a default --b default --resamples 100 $NT; expect_msg "resamples"
expect_err price -m "$M" --a default --b default --bin "$d/nope" $NT; expect_msg "nope"
for spec in "flags:" "threads:0" "threads:abc" "env:A" "env:1X=2" "env:" "bin:$d/no-binary" "foo:bar" \
            "fast" "flags:+no_such_flag" "" "flags:+simd;" "flags:none;flags:all" "threads:1;threads:2"; do
  expect_err price -m "$M" --a default --b "$spec" $NT
  case $spec in
    flags:+no_such_flag) expect_msg "no_such_flag" ;;
    foo:bar) expect_msg "foo" ;;
    bin:*) expect_msg "no-binary" ;;
    threads:abc) expect_msg "abc" ;;
    env:1X=2) expect_msg "1X=2" ;;
  esac
done
expect_err price -m "$M" --a "threads:x" --b default $NT; expect_msg "--a"
# a run that fails (a binary that prints no JSON) stops price with exit 2
expect_err price -m "$M" --a default --b "bin:/bin/true" --pairs 1 $NT; expect_msg "side B"

# A fake bench with fixed timings (the same for every run, so every interval
# is a point): FAKE_STEPS_X scales the decode steps' seconds only, FAKE_NO_STEPS
# drops decode.steps_seconds as a bench older than the steps window would.
cat >"$d/fake" <<'FAKE'
#!/bin/sh
awk -v x="${FAKE_STEPS_X:-1}" -v no="${FAKE_NO_STEPS:-0}" 'BEGIN {
  printf "{\n  \"config\": {\n    \"prompt_len\": 16,\n    \"decode_steps\": 8\n  },\n"
  printf "  \"prefill\": {\n    \"seconds_per_token\": 0.001\n  },\n"
  printf "  \"decode\": {\n    \"steps\": 8,\n    \"seconds_per_token\": 0.003"
  if (!no) printf ",\n    \"steps_seconds\": %.9g", 0.016 * x
  printf "\n  },\n  \"token_check\": null\n}\n" }'
FAKE
chmod +x "$d/fake"
expect_err price -m "$M" --a "bin:$d/fake" --b "bin:$d/fake;env:FAKE_NO_STEPS=1" --pairs 1 $NT
expect_msg "side B"; expect_msg "decode.steps_seconds"
# B's steps twice as slow, prefill and decode unchanged: the steps window says
# so, and neither the score nor the verdict moves.
"$BIN" price -m "$M" --a "bin:$d/fake" --b "bin:$d/fake;env:FAKE_STEPS_X=2" --pairs 3 $NT --json \
  >"$d/f.json" 2>"$d/err"; rc=$?
[ $rc -eq 0 ] || bad "steps-only slowdown: exit $rc, expected 0 (informational window): $(cat "$d/err")"
j=$d/f.json
num_ok $j windows.steps.median_speedup "v == 0.5"
num_ok $j windows.steps.a_median_s_per_token "v == 0.002"
num_ok $j windows.steps.b_median_s_per_token "v == 0.004"
is_val $j windows.steps.verdict '"B slower"'
num_ok $j windows.decode.median_speedup "v == 1"
num_ok $j score.value "v == 1"
is_val $j score.verdict '"within noise"'
is_val $j verdict '"within noise"'
is_val $j rejected false
is_val $j reasons '""'
num_ok $j runs[2].b.steps "v == 0.004"

SMALL="--prompt-len 16 --decode-steps 8"

# ---- A against A (--noise): interval contains 1, score near 1. A 95%
# interval misses the truth 5% of the time by construction, and more often
# on this shared VM, whose memory bandwidth can change state between the two
# runs of a pair (seen: 0.93 [0.90, 0.97] twice in a row); a bias in the
# pricer would miss every time, so up to three attempts.
ok=0
for attempt in 1 2 3; do
  $P --a 'threads:1' --noise --pairs 5 $NT $SMALL --json >"$d/n.json" 2>"$d/err"; rc=$?
  [ $rc -le 1 ] || { bad "price --noise exited $rc: $(cat "$d/err")"; break; }
  lo=$(jget "$d/n.json" score.ci95[0]); hi=$(jget "$d/n.json" score.ci95[1]); sc=$(jget "$d/n.json" score.value)
  if awk -v lo="$lo" -v hi="$hi" -v s="$sc" 'BEGIN { exit !(lo <= 1 && hi >= 1 && s >= 0.5 && s <= 2) }'; then
    ok=1; break
  fi
  echo "note: A vs A attempt $attempt: score $sc [$lo, $hi]" >&2
done
[ $ok -eq 1 ] || bad "A against A: score $sc with interval [$lo, $hi] (expected within [0.5, 2], containing 1)"
j=$d/n.json
is_val $j schema '"moefast.price/1"'
is_val $j pairs 5
is_val $j noise true
is_val $j prompt_len 16
is_val $j decode_steps 8
is_val $j token_check.enabled false
is_val $j a.threads 1
is_val $j b.spec '"threads:1"'
num_ok $j noise_floor.score "v >= 0"
num_ok $j windows.decode.speedups[4] "v > 0"
[ -z "$(jget $j windows.decode.speedups[5])" ] || bad "more than 5 speedups"
is_val $j runs[0].order '"AB"'
is_val $j runs[1].order '"BA"'
num_ok $j bootstrap.resamples "v >= 2000"
[ -n "$(jget $j timing_map.outside)" ] || bad "JSON lacks the timing map"
[ -n "$(jget $j timing_map.steps)" ] || bad "JSON timing map lacks the steps window"
num_ok $j noise_floor.steps "v >= 0"
num_ok $j windows.steps.speedups[4] "v > 0"
num_ok $j windows.steps.a_median_s_per_token "v > 0"
num_ok $j runs[0].a.steps "v > 0"
num_ok $j runs[0].b.steps "v > 0"

# score_ok FILE: score.value = decode^0.75 x prefill^0.25 of the reported
# median speedups (JSON reals carry 9 significant digits)
score_ok() {
  awk -v s="$(jget "$1" score.value)" -v dm="$(jget "$1" windows.decode.median_speedup)" \
      -v pm="$(jget "$1" windows.prefill.median_speedup)" \
      'BEGIN { f = exp(0.75 * log(dm) + 0.25 * log(pm)); exit !(s > 0 && (s - f) ^ 2 <= (1e-7 * f) ^ 2) }' ||
    bad "$1: score.value $(jget "$1" score.value) is not decode^0.75 x prefill^0.25 of the medians"
}
score_ok $j

# ---- a deliberately slowed B: 2 ms per token sleep against a tiny model with
# a 48-token prompt and 4 steps: the delay dominates both windows (B about 5x
# slower). 9 pairs, so that one scheduling stall on this shared machine (seen:
# a run 10x slower than its neighbours) cannot stretch the interval past 1.
$P --a 'threads:1' --b 'threads:1;flags:+test_slow' --pairs 9 $NT --prompt-len 48 --decode-steps 4 --json \
  >"$d/s.json" 2>"$d/err"; rc=$?
[ $rc -eq 1 ] || bad "slowed B: exit $rc, expected 1 (rejected): $(cat "$d/err")"
j=$d/s.json
for w in prefill decode; do
  num_ok $j windows.$w.median_speedup "v < 1"
  num_ok $j windows.$w.ci95[1] "v < 1"
  is_val $j windows.$w.verdict '"rejected"'
done
num_ok $j score.ci95[1] "v < 1"
is_val $j score.verdict '"B slower"'
is_val $j verdict '"rejected"'
is_val $j rejected true
jget $j reasons | grep -q "decode median speedup" || bad "reasons do not name the decode window: $(jget $j reasons)"
jget $j reasons | grep -q "steps" && bad "reasons name the informational steps window: $(jget $j reasons)"
num_ok $j windows.steps.median_speedup "v < 1"
is_val $j windows.steps.verdict '"B slower"'
score_ok $j
is_val $j b.flags '"+test_slow"'

# ---- env: items reach the child (MOEFAST_FLAGS is read when --flags is absent)
$P --a 'threads:1' --b 'threads:1;env:MOEFAST_FLAGS=+test_slow,MOEFAST_UNUSED=1' --pairs 3 $NT \
  --prompt-len 48 --decode-steps 4 --json >"$d/e.json" 2>"$d/err"
num_ok $d/e.json windows.prefill.median_speedup "v < 1"
is_val $d/e.json b.env[1] '"MOEFAST_UNUSED=1"'

# ---- text, CSV and SVG reports
$P --a default --b 'threads:1' --pairs 2 $NT $SMALL --svg "$d/p.svg" >"$d/t.txt" 2>"$d/err"; rc=$?
[ $rc -le 1 ] || bad "text report exited $rc: $(cat "$d/err")"
for w in "TOKEN CHECK DISABLED" "timing windows" "outside every window" "speedup A/B" "score" "per-pair" \
         "verdict:" "steps    inside: the decode window's D steps alone"; do
  grep -q "$w" "$d/t.txt" || bad "text report lacks '$w'"
done
for w in prefill decode steps; do
  grep -q "^  $w  *[0-9.]* ms  *[0-9.]* ms  *[0-9.]*   \[" "$d/t.txt" || bad "text table lacks the $w row"
done
grep -q "^   pair order    prefill     decode      steps$" "$d/t.txt" || bad "per-pair table lacks the steps column"
[ "$(grep -c "^      [01]    [AB][AB]  *[0-9][0-9.]*  *[0-9][0-9.]*  *[0-9][0-9.]*$" "$d/t.txt")" -eq 2 ] ||
  bad "per-pair table should have 2 rows of 3 speedups"
grep -q "^<svg" "$d/p.svg" && grep -q "</svg>" "$d/p.svg" || bad "--svg did not write an SVG"
[ "$(grep -c "<circle" "$d/p.svg")" -eq 6 ] || bad "SVG should have 6 points (2 pairs x 3 windows)"
grep -q ">steps (informational" "$d/p.svg" || bad "SVG lacks the steps panel"
$P --a default --b default --pairs 2 $NT $SMALL --csv >"$d/c.csv" 2>"$d/err"
grep -q "^kind,window,pair,order,a_s_per_token,b_s_per_token,speedup,ci95_lo,ci95_hi,verdict$" "$d/c.csv" ||
  bad "CSV header missing"
[ "$(grep -c "^pair," "$d/c.csv")" -eq 6 ] || bad "CSV should have 6 pair rows (2 pairs x 3 windows)"
[ "$(grep -c "^pair,steps," "$d/c.csv")" -eq 2 ] || bad "CSV should have 2 steps pair rows"
grep -q "^summary,steps,,,[0-9]" "$d/c.csv" || bad "CSV lacks the steps summary row"
grep -q "^# steps window: " "$d/c.csv" || bad "CSV lacks the steps window's timing comment"
grep -q "^summary,score," "$d/c.csv" || bad "CSV lacks the score row"
# the CSV's score (6 significant digits) from its own summary medians
awk -F, '$1 == "summary" { m[$2] = $7 }
         END { f = exp(0.75 * log(m["decode"]) + 0.25 * log(m["prefill"]))
               exit !(m["score"] > 0 && (m["score"] - f) ^ 2 <= (2e-5 * f) ^ 2) }' "$d/c.csv" ||
  bad "CSV score is not decode^0.75 x prefill^0.25 of the summary medians"
grep -q "^# .*TOKEN CHECK DISABLED" "$d/c.csv" || bad "CSV does not state the disabled token check"
expect_err price -m "$M" --a default --b default --pairs 1 $NT $SMALL --svg "$d/no/such/dir.svg"
expect_msg "dir.svg"

# ---- token check through a golden trace (needs `moefast trace record`)
if "$BIN" trace record -m "$M" --tokens 5,17,300,42,7,999,0,123,55,66,77,88,99,100,200,250 --steps 9 \
     -o "$d/t.json" >"$d/out" 2>"$d/err"; then
  $P --a default --b 'threads:1' --pairs 2 --trace "$d/t.json" $SMALL --json >"$d/g.json" 2>"$d/err"; rc=$?
  [ $rc -le 1 ] || bad "price --trace exited $rc: $(cat "$d/err")"
  is_val $d/g.json token_check.enabled true
  is_val $d/g.json token_check.ok true
  # change expected token 3 (swap the top two of step 3): every run fails there
  S=3
  trace_tamper "$d/t.json" $S "$d/bad.json"
  $P --a default --b 'threads:1' --pairs 2 --trace "$d/bad.json" $SMALL >"$d/r.txt" 2>"$d/err"; rc=$?
  [ $rc -eq 1 ] || bad "price with a changed token exited $rc, expected 1: $(cat "$d/err")"
  grep -q "REJECTED" "$d/r.txt" || bad "changed token: report does not say REJECTED"
  grep -q "pair 1, side B: decode step $S" "$d/r.txt" || bad "changed token: report does not name pair 1, side B, step $S"
  $P --a default --b 'threads:1' --pairs 1 --trace "$d/bad.json" $SMALL --json >"$d/rj.json" 2>"$d/err"
  is_val $d/rj.json token_check.ok false
  is_val $d/rj.json token_check.failures[0].step $S
  is_val $d/rj.json token_check.failures[0].warmup true
  is_val $d/rj.json verdict '"rejected"'
else
  if grep -q "not built" "$d/err"; then
    echo "note: 'moefast trace' is not built into $BIN yet: token-check cases skipped" >&2
  else
    bad "trace record failed: $(cat "$d/err")"
  fi
fi

# ---- the environment gate and --cold
for bv in "--gate-bw 101" "--gate-bw -1" "--gate-bw x" "--gate-retries 21" "--gate-retries -1" "--gate-bw"; do
  expect_err price -m "$M" --a default --b default $NT $bv; expect_msg "gate"
done
expect_err price -m "$M" --a default --b default $NT --cold --pairs 0; expect_msg "pairs"
"$BIN" bench -m "$M" --cold --repeat 2 >/dev/null 2>"$d/err" && bad "bench --cold --repeat 2 accepted"
grep -q "cold" "$d/err" || bad "bench --cold --repeat 2: message lacks 'cold': $(cat "$d/err")"
# the gate's fields, every pair (a fake bench: the pairs are quick; a 100 %
# tolerance never reruns for bandwidth)
$P --a "bin:$d/fake" --b "bin:$d/fake" --pairs 2 $NT --gate-bw 100 --json >"$d/e.json" 2>"$d/err" ||
  bad "price with the gate: $(cat "$d/err")"
is_val $d/e.json cold false
is_val $d/e.json environment.bandwidth_tolerance_pct 100
is_val $d/e.json environment.max_reruns_per_pair 2
is_val $d/e.json environment.reruns_by_reason.bandwidth 0
for i in 0 1; do
  num_ok $d/e.json environment.pairs[$i].attempts "v >= 1 && v <= 3"
  num_ok $d/e.json environment.pairs[$i].bandwidth_before_gb_per_second "v > 0"
  num_ok $d/e.json environment.pairs[$i].bandwidth_after_gb_per_second "v > 0"
  num_ok $d/e.json environment.pairs[$i].load1 "v >= 0"
  [ -n "$(jget $d/e.json environment.pairs[$i].steal)" ] || bad "pair $i lacks steal"
  [ -n "$(jget $d/e.json environment.pairs[$i].gate_ok)" ] || bad "pair $i lacks gate_ok"
done
num_ok $d/e.json environment.reruns "v >= 0 && v <= 4"
num_ok $d/e.json environment.kept_failing "v >= 0 && v <= 2"
# every pair straddling a bandwidth change (a test hook fixes the probe's
# figures: 10 then 8 GB/s, 20 %): rerun once each, then kept and counted;
# 9 then 8.5 (5.6 %) passes at 10 %
MOEFAST_PRICE_TEST_PROBE=10:8 $P --a "bin:$d/fake" --b "bin:$d/fake" --pairs 2 $NT --gate-retries 1 --json \
  >"$d/r.json" 2>"$d/err" || bad "price, gate failing: $(cat "$d/err")"
is_val $d/r.json environment.reruns 2
is_val $d/r.json environment.reruns_by_reason.bandwidth 2
is_val $d/r.json environment.kept_failing 2
is_val $d/r.json environment.pairs[1].attempts 2
is_val $d/r.json environment.pairs[1].gate_ok false
MOEFAST_PRICE_TEST_PROBE=10:8 $P --a "bin:$d/fake" --b "bin:$d/fake" --pairs 1 $NT --gate-retries 0 --csv \
  >"$d/r.csv" 2>"$d/err" || bad "price --csv, gate failing: $(cat "$d/err")"
grep -q "^# environment gate: 0 reruns (bandwidth changed: 0, steal: 0), 1 pairs kept failing; cold: no" "$d/r.csv" ||
  bad "CSV lacks the gate's line: $(grep environment "$d/r.csv")"
MOEFAST_PRICE_TEST_PROBE=9:8.5 $P --a "bin:$d/fake" --b "bin:$d/fake" --pairs 1 $NT --json >"$d/r.json" 2>"$d/err" ||
  bad "price, gate passing: $(cat "$d/err")"
is_val $d/r.json environment.reruns_by_reason.bandwidth 0
is_val $d/r.json environment.pairs[0].gate_ok true
# a bench that does not say it ran cold is refused
expect_err price -m "$M" --a "bin:$d/fake" --b "bin:$d/fake" --pairs 1 $NT --cold; expect_msg "config.cold"
# --gate-bw 0: no probe (null), still load and steal; --cold reaches bench and the reports
$P --a default --b default --pairs 1 $NT $SMALL --gate-bw 0 --cold --json >"$d/k.json" 2>"$d/err" ||
  [ $? -eq 1 ] || bad "price --cold: $(cat "$d/err")"
is_val $d/k.json cold true
is_val $d/k.json environment.pairs[0].bandwidth_before_gb_per_second null
is_val $d/k.json environment.reruns_by_reason.bandwidth 0
$P --a default --b default --pairs 1 $NT $SMALL --cold >"$d/k.txt" 2>"$d/err" || [ $? -eq 1 ] ||
  bad "price --cold (text): $(cat "$d/err")"
grep -q "^  --cold: the prefill window is each run's first forward" "$d/k.txt" || bad "text report lacks --cold"
grep -q "^  environment gate: a pair is rerun when the bandwidth probe" "$d/k.txt" || bad "text report lacks the gate"
grep -q "^  reruns: [0-9]* (bandwidth changed: [0-9]*, steal: [0-9]*)" "$d/k.txt" || bad "text report lacks the reruns"

[ $fail -eq 0 ] && echo "cli_price: ok"
exit $fail
