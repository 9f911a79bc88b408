#!/bin/sh
# cli_gate_numerics.sh — the golden traces of the numerics flags
# (tests/golden/numerics/: act_q8, kv_f16, kv_q8, act_q8+kv_q8, kv_tq, kv_tq_small on generated
# models, recorded on the reference path before the redesign of the engine)
# pass the gate with default speed flags and each trace's numerics, at every
# ISA the CPU has (2 threads; 1 and 3 at the best ISA). They need no ../shared:
# their models are regenerated from models.txt (gen is deterministic and the
# trace's sha256 pins its output).
set -u
BIN=${MOEFAST_BIN:-build/asan/moefast}
REL=${MOEFAST_BIN_REL:-build/rel/moefast}
[ -x "$REL" ] || REL=$BIN
G=tests/golden/numerics
T=$(mktemp -d /tmp/moefast-cli-gate-num.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
nfail=0
fail() { echo "FAIL: $*"; nfail=$((nfail + 1)); }

grep -v '^#' "$G/models.txt" | while read -r f args; do
  # shellcheck disable=SC2086
  "$REL" gen $args -o "$T/$f" >"$T/gen.log" 2>&1 || echo "gen $f: $(tail -n 1 "$T/gen.log")" >>"$T/genfail"
done
[ -f "$T/genfail" ] && fail "$(cat "$T/genfail")"

isas=scalar
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo && isas="$isas avx2"
has512=1
for fl in avx512f avx512bw avx512vl avx512dq avx512_vnni; do grep -qw $fl /proc/cpuinfo || has512=0; done
[ $has512 = 1 ] && isas="$isas avx512"
n=0
for tr in "$G"/*.trace.json; do
  f=$(sed -n 's/.*"model": {"file": "\([^"]*\)".*/\1/p' "$tr" | head -n 1)
  fl=$(sed -n 's/.*"recorded_with": "flags=\([^ "]*\).*/\1/p' "$tr" | head -n 1)
  [ -f "$T/$f" ] || { fail "$tr: model $f was not generated"; continue; }
  [ -n "$fl" ] && [ "$fl" != none ] || { fail "$tr: no numerics flags in recorded_with"; continue; }
  for isa in $isas; do
    for th in 1 2 3; do
      [ $th != 2 ] && [ "$isa" != "${isas##* }" ] && continue   # 1 and 3 threads at the best ISA only
      steps=""
      [ "$isa" = scalar ] && steps="--steps 8 --case fox"
      # shellcheck disable=SC2086
      out=$(MOEFAST_ISA=$isa "$REL" gate -m "$T/$f" "$tr" --flags="$fl" -t $th $steps 2>&1) ||
        fail "gate $(basename "$tr") --flags=$fl isa=$isa t=$th: $out"
    done
  done
  n=$((n + 1))
  echo "ok $(basename "$tr") (--flags=$fl) on $isas: $(echo "$out" | head -n 1)"
done
[ $n -ge 12 ] || fail "only $n numerics traces in $G"
# the instrument can fail: a numerics trace gated in FP32 does not pass
tr=$G/qwen3moe-tiny-q8_0-act_q8.trace.json
"$REL" gate -m "$T/qwen3moe-tiny-q8_0.gen.gguf" "$tr" >"$T/g.log" 2>&1
[ $? -eq 1 ] || fail "an act_q8 trace passed the gate in FP32: $(cat "$T/g.log")"
echo "$nfail failures"
[ $nfail -eq 0 ]
