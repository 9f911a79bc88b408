#!/bin/sh
# cli_gate.sh — the exactness instruments end to end.
#  1. every golden trace in tests/golden/ passes the gate with the default
#     flags, for each ISA level the CPU has x 1, 2, 3 threads (release binary
#     for the sweep: it is the optimised code that must be exact);
#  2. the instrument can fail: with --flags=+test_perturb the gate reports the
#     first divergent case and step, computed independently from a free-run
#     trace recorded with the flag on; bisect names test_perturb; bisecting a
#     trace the reference path disagrees with says no flag is responsible;
#  3. malformed traces exit 2 with a one-line message naming the problem.
# Uses $MOEFAST_BIN (sanitized CLI) and $MOEFAST_BIN_REL (release CLI).
set -u
BIN=${MOEFAST_BIN:-build/asan/moefast}
REL=${MOEFAST_BIN_REL:-build/rel/moefast}
[ -x "$REL" ] || REL=$BIN
. tests/lib.sh   # ref: ../shared, else the vendored copy (tests/data/shared)
G=tests/golden
T=$(mktemp -d /tmp/moefast-cli-gate.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
nfail=0
fail() { echo "FAIL: $*"; nfail=$((nfail + 1)); }

# ---- which model file a golden trace belongs to -------------------------------
# The default laguna model is generated (deterministically) by moefast gen: the
# trace's sha256 pins the generator's output, so regenerate and let the gate's
# provenance check compare. A trace whose model file is neither in ../shared
# nor vendored prints a "skip:" line (ref) and gives nothing.
model_for() { # trace -> model path, or nothing
  f=$(sed -n 's/.*"model": {"file": "\([^"]*\)".*/\1/p' "$1" | head -n 1)
  case "$f" in
    laguna-default.gguf)
      if [ ! -f "$T/$f" ]; then
        "$REL" gen --arch laguna --preset default -o "$T/$f" >"$T/gen.log" 2>&1 ||
          { fail "gen laguna default: $(tail -n 1 "$T/gen.log")"; }
      fi
      echo "$T/$f" ;;
    *) ref "oracle/$f" ;;
  esac
}

# ---- 1. ISA x threads sweep ---------------------------------------------------------
isas=scalar
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo && isas="$isas avx2"
has512=1
for fl in avx512f avx512bw avx512vl avx512dq avx512vbmi; do grep -qw $fl /proc/cpuinfo || has512=0; done
[ $has512 = 1 ] && isas="$isas avx512"
echo "ISA levels: $isas"

# Time budget (2 shared cores): the two tiny F32 traces run every case and
# step in every configuration; the others check the first 8 steps of every
# case (each case's prefill and first decode steps), and under the slow scalar
# kernels only case "fox". MOEFAST_GATE_FULL=1 checks everything everywhere.
steps_for() { # trace isa
  [ "${MOEFAST_GATE_FULL:-0}" = 1 ] && return
  case "$(basename "$1")" in
    qwen3moe-tiny-f32.trace.json|laguna-tiny-f32.trace.json) ;;
    *) [ "$2" = scalar ] && echo "--steps 8 --case fox" || echo "--steps 8" ;;
  esac
}
ntr=0
for tr in $G/*.trace.json; do
  [ -f "$tr" ] || continue
  ntr=$((ntr + 1))
  m=$(model_for "$tr")
  [ -n "$m" ] || continue                                # skipped, with a line
  [ -f "$m" ] || { fail "$tr: model $m missing"; continue; }
  for isa in $isas; do
    for th in 1 2 3; do
      out=$(MOEFAST_ISA=$isa "$REL" gate -m "$m" "$tr" -t $th $(steps_for "$tr" $isa) 2>&1)
      rc=$?
      if [ $rc -ne 0 ]; then fail "gate $tr isa=$isa t=$th (exit $rc): $out"; continue; fi
      echo "$out" | grep -q "^PASS .* cases, .* steps$" || fail "gate $tr isa=$isa t=$th: no PASS line: $out"
      echo "$out" | grep -q "isa $isa, threads $th" || fail "gate $tr: did not run with isa=$isa t=$th: $out"
    done
  done
  echo "ok gate $(basename "$tr") on $isas x 1,2,3 threads: $(echo "$out" | head -n 1)"
done
[ $ntr -ge 1 ] || fail "no golden traces in $G"

# ---- 2. the instrument can fail ---------------------------------------------------------
# on the F32 trace when its model is at hand, else on the Q8_0 one (vendored)
if M=$(ref oracle/qwen3moe-tiny-f32.gguf 2>/dev/null); then GT=$G/qwen3moe-tiny-f32.trace.json
else GT=$G/qwen3moe-tiny-q8_0.trace.json; M=$(ref oracle/qwen3moe-tiny-q8_0.gguf); fi
[ -f "$GT" ] && [ -f "$M" ] || { fail "$GT or $M missing"; echo "$nfail failures"; exit 1; }
steps=$(sed -n 's/.*"gate": {"steps": \([0-9]*\).*/\1/p' "$GT")

# Case name, prompt ids and expected ids, one case per line: name|p,p,p|e e e
cases() {
  awk '/"name":/ { n = $0; sub(/.*"name": "/, "", n); sub(/",?$/, "", n) }
       /"prompt_tokens":/ { p = $0; sub(/.*\[/, "", p); sub(/\].*/, "", p); gsub(/ /, "", p) }
       /"expected_tokens":/ { e = $0; sub(/.*\[/, "", e); sub(/\].*/, "", e); gsub(/,/, "", e); print n "|" p "|" e }' "$1"
}
cases "$GT" >"$T/golden.cases"

# Record the same prompts free-running with the perturbation on.
set --
while IFS='|' read -r name p e; do set -- "$@" --tokens "$p" --name "$name"; done <"$T/golden.cases"
"$BIN" trace record -m "$M" --flags=+test_perturb --steps "$steps" -o "$T/perturbed.json" "$@" >"$T/rec.log" 2>&1 ||
  fail "trace record with +test_perturb: $(cat "$T/rec.log")"
cases "$T/perturbed.json" >"$T/perturbed.cases"

# The first case (in trace order) and step where the greedy tokens differ.
want=$(paste -d'|' "$T/golden.cases" "$T/perturbed.cases" | awk -F'|' -v steps="$steps" '
  { ng = split($3, g, " "); np = split($6, q, " ");
    for (s = 1; s <= steps && s <= ng && s <= np; s++) if (g[s] != q[s]) { print "case \"" $1 "\" step " (s - 1); exit } }')
[ -n "$want" ] || fail "test_perturb changed no greedy token in $GT (the perturbation test would be vacuous)"
echo "perturbed run first differs at: $want"
wstep=${want##* }
wcase=$(echo "$want" | sed 's/^case "\(.*\)" step .*/\1/')
# bisect and the checks below gate only that case up to that step: enough to
# fail, and each bisect probe (some on the slow reference path) stays short
only="--case $wcase --steps $((wstep + 1))"

for mode in teacher free; do
  out=$("$BIN" gate -m "$M" "$GT" --mode $mode --flags=+test_perturb 2>&1)
  rc=$?
  [ $rc -eq 1 ] || fail "gate --flags=+test_perturb --mode $mode: exit $rc (want 1): $out"
  echo "$out" | head -n 1 | grep -q "^FAIL $want: expected " ||
    fail "gate --mode $mode reported '$(echo "$out" | head -n 1)', want '$want'"
  echo "$out" | grep -q "top 5:" || fail "gate output lacks the top 5: $out"
done
# the same flag set minus the perturbation passes (threads and ISA unchanged)
"$BIN" gate -m "$M" "$GT" --flags=+test_perturb,-test_perturb >"$T/g.log" 2>&1 ||
  fail "gate with +test_perturb,-test_perturb: $(cat "$T/g.log")"
# MOEFAST_FLAGS reaches the gate when --flags is absent
MOEFAST_FLAGS=+test_perturb "$BIN" gate -m "$M" "$GT" $only >"$T/g.log" 2>&1
[ $? -eq 1 ] || fail "MOEFAST_FLAGS=+test_perturb did not make the gate fail: $(cat "$T/g.log")"

out=$("$BIN" bisect -m "$M" "$GT" --flags=+test_perturb $only 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "bisect: exit $rc (want 1): $out"
echo "$out" | grep -q "^culprit: +test_perturb (" || fail "bisect did not name test_perturb alone: $out"
echo "$out" | grep -q "^probes: [0-9]" || fail "bisect printed no probe count: $out"
echo "$out" | tail -n 2

out=$("$BIN" bisect -m "$M" "$GT" --steps 4 --case "$wcase" 2>&1)
rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "^PASS" || fail "bisect on a passing gate: exit $rc: $out"

out=$("$BIN" bisect -m "$M" "$T/perturbed.json" $only 2>&1)
rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "^no flag is responsible" ||
  fail "bisect of a trace the reference path disagrees with: exit $rc: $out"

# differential mode localises the same perturbation: last layer (qwen3moe-tiny
# has 4), FFN output, the first perturbed position (20)
out=$(MOEFAST_DIFF=1 "$BIN" gate -m "$M" "$GT" --case fox --steps 8 --flags=+test_perturb 2>&1)
rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "^FAIL .*differential mode: layer 3 ffn output differs at position 20" ||
  fail "MOEFAST_DIFF=1 with +test_perturb: exit $rc: $out"
out=$(MOEFAST_DIFF=1 "$BIN" gate -m "$M" "$GT" --case fox --steps 8 2>&1) || fail "MOEFAST_DIFF=1 gate: $out"

# ---- 3. malformed traces: exit 2, one line naming the problem ---------------------------
bad() { # label, file, expected substring
  out=$("$BIN" gate -m "$M" "$2" 2>&1)
  rc=$?
  [ $rc -eq 2 ] || fail "$1: exit $rc (want 2): $out"
  [ "$(echo "$out" | wc -l)" -eq 1 ] || fail "$1: message is not one line: $out"
  echo "$out" | grep -qF -- "$3" || fail "$1: message lacks '$3': $out"
  echo "$out" | grep -q "^moefast gate: " || fail "$1: message lacks the 'moefast gate:' prefix: $out"
}
sed 's/"format": "moefast-trace\/1",/"format": "moefast-trace\/1", "comment": "x",/' "$GT" >"$T/unknown.json"
bad "unknown field" "$T/unknown.json" '"comment": unknown field'
sed 's/"tie_tolerance"/"tie_tolerence"/' "$GT" >"$T/typo.json"
bad "misspelt field" "$T/typo.json" 'gate."tie_tolerence": unknown field'
head -c 300 "$GT" >"$T/trunc.json"
bad "bad JSON" "$T/trunc.json" "invalid JSON"
sed 's/"sha256": "[0-9a-f]*"/"sha256": "0000000000000000000000000000000000000000000000000000000000000000"/' "$GT" >"$T/sha.json"
bad "wrong sha256" "$T/sha.json" "model.sha256"
sed 's/"arch": "qwen3moe"/"arch": "laguna"/' "$GT" >"$T/arch.json"
bad "wrong arch" "$T/arch.json" "model.arch"
sed '0,/"prompt_tokens": \[/s/"prompt_tokens": \[/"prompt_tokens": [-3, /' "$GT" >"$T/neg.json"
bad "negative id" "$T/neg.json" "prompt_tokens[0]: negative token id -3"
sed '0,/"expected_tokens": \[/s/"expected_tokens": \[[0-9]*/"expected_tokens": [999/' "$GT" >"$T/exp.json"
bad "expected not top-1" "$T/exp.json" "expected_tokens[0]"
bad "missing file" "$T/nonexistent.json" "cannot open"
cmp -s "$T/unknown.json" "$GT" && fail "sed edit had no effect (test would be vacuous)"
out=$("$BIN" gate -m "$M" "$GT" --case no_such_case 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q 'no case named "no_such_case"' || fail "unknown --case: $out"
out=$("$BIN" gate -m "$M" "$GT" --mode sideways 2>&1)
[ $? -eq 2 ] || fail "bad --mode accepted: $out"
out=$("$BIN" gate -m "$M" "$GT" --flags=+no_such_flag 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "no_such_flag" || fail "unknown flag: $out"
# a model that is not the trace's
other=$(ref oracle/qwen3moe-tiny-q4_0.gguf)
out=$("$BIN" gate -m "$other" "$GT" 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "model.file" || fail "gate on another model: $out"

# ---- record --append and the flags listing ---------------------------------------------
"$BIN" trace record -m "$M" --tokens 1,2,3 --steps 3 -o "$T/app.json" --name a --flags=none >/dev/null 2>&1 &&
  "$BIN" trace record -m "$M" -p "Once upon" --name b -o "$T/app.json" --append >/dev/null 2>&1 ||
  fail "trace record / --append"
[ "$(grep -c '"name":' "$T/app.json" 2>/dev/null)" = 2 ] || fail "--append did not add a case"
"$BIN" gate -m "$M" "$T/app.json" -t 2 >/dev/null 2>&1 || fail "gate of the appended trace"
out=$("$BIN" trace record -m "$M" --tokens 1 --name a -o "$T/app.json" --append 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "duplicate" || fail "--append with a duplicate name: $out"
# recorded_with: the whole flag list, however long (it was cut at 96 characters);
# -f reads a prompt from a file or standard input, as -p gives it
"$BIN" trace record -m "$M" --tokens 1,2 --steps 2 -o "$T/long.json" --flags=all,+kv_f16,+act_q8 >/dev/null 2>"$T/err" ||
  fail "trace record with a long flag set: $(cat "$T/err")"
rec=$(sed -n 's/.*"recorded_with": "\([^"]*\)".*/\1/p' "$T/long.json")
for want in +simd +value_prefetch +act_q8 +kv_f16 "isa=" "threads=default"; do
  case "$rec" in *"$want"*) ;; *) fail "recorded_with lacks '$want': $rec";; esac
done
[ ${#rec} -gt 96 ] || fail "recorded_with is only ${#rec} characters: $rec"
printf 'Once upon' >"$T/p.txt"
"$BIN" trace record -m "$M" -f "$T/p.txt" --steps 2 -o "$T/f1.json" >/dev/null 2>&1 &&
  printf 'Once upon' | "$BIN" trace record -m "$M" -f - --steps 2 -o "$T/f2.json" >/dev/null 2>&1 &&
  "$BIN" trace record -m "$M" -p 'Once upon' --steps 2 -o "$T/f3.json" >/dev/null 2>&1 || fail "trace record -f"
exp() { sed -n 's/.*"expected_tokens": *\[\([0-9, ]*\)\].*/\1/p' "$1" | head -n 1; }
[ -n "$(exp "$T/f3.json")" ] && [ "$(exp "$T/f1.json")" = "$(exp "$T/f3.json")" ] && [ "$(exp "$T/f2.json")" = "$(exp "$T/f3.json")" ] ||
  fail "trace record -f FILE / -f - / -p differ: $(exp "$T/f1.json") / $(exp "$T/f2.json") / $(exp "$T/f3.json")"
: >"$T/empty"
for f in "$T/empty" "$T/missing" "$T"; do
  "$BIN" trace record -m "$M" -f "$f" --steps 2 -o "$T/bad.json" >/dev/null 2>"$T/err"
  [ $? -eq 2 ] && [ "$(grep -c '^moefast trace: ' "$T/err")" = 1 ] || fail "trace record -f $f: $(cat "$T/err")"
done
out=$("$BIN" flags)
echo "$out" | grep -q "^test_perturb .*off .*\[test-only\]" || fail "flags listing: $out"
echo "$out" | grep -q "^simd .*on " || fail "flags listing lacks simd: $out"


# ---- numerics flags: own traces; a mismatch fails with a note, bisect names the flag -----
Q=$(ref oracle/qwen3moe-tiny-q8_0.gguf)
P14=588,418,515,478,560,429,258,462,489,13,573,552,259,377   # the oracle prompt
if "$BIN" trace record -m "$Q" --tokens "$P14" --steps 64 -o "$T/q8.json" --flags=none,+act_q8,+kv_f16 \
     >/dev/null 2>&1; then
  "$REL" gate -m "$Q" "$T/q8.json" --flags=+act_q8,+kv_f16 -t 2 >/dev/null 2>&1 ||
    fail "act_q8,kv_f16 trace does not pass with the same numerics and default speed flags"
  out=$("$REL" gate -m "$Q" "$T/q8.json" 2>&1)
  [ $? -eq 1 ] && echo "$out" | grep -q "note: the trace was recorded with numerics flags +act_q8,+kv_f16, this run uses none" ||
    fail "gate of an act_q8 trace in FP32: $out"
  # a recorded_with naming flags this build does not know: still a plain FAIL, no note, no crash
  sed 's/"recorded_with": "flags=[^ "]*/"recorded_with": "flags=+no_such_flag,+act_q8/' "$T/q8.json" >"$T/q8odd.json"
  grep -q 'flags=+no_such_flag' "$T/q8odd.json" || fail "could not edit recorded_with"
  out=$("$REL" gate -m "$Q" "$T/q8odd.json" 2>&1)
  [ $? -eq 1 ] && ! echo "$out" | grep -q "note:" || fail "gate with an unknown flag in recorded_with: $out"
  out=$("$REL" bisect -m "$Q" "$T/q8.json" --flags=-act_q8,+kv_f16 2>&1)
  echo "$out" | grep -q "no flag" ||
    fail "bisect without act_q8 should find that no flag (of those on) is responsible: $out"
else
  fail "trace record --flags=none,+act_q8,+kv_f16"
fi
# an FP32 trace gated with act_q8 on: bisect names the numerics flag
if "$BIN" trace record -m "$Q" --tokens "$P14" --steps 64 -o "$T/f32.json" --flags=none >/dev/null 2>&1; then
  out=$("$REL" bisect -m "$Q" "$T/f32.json" --flags=+act_q8 2>&1)
  echo "$out" | grep -q "^culprit: +act_q8 " || fail "bisect of act_q8 against an FP32 trace: $out"
else
  fail "trace record --flags=none"
fi
"$BIN" flags | grep -q "^act_q8 .*off .*NUMERICS" || fail "flags listing lacks act_q8 as NUMERICS"

echo "$nfail failures"
[ $nfail -eq 0 ]
