#!/bin/sh
# cli_act8_formats.sh — generated Q5_K, Q3_K_M (Q3_K / Q4_K / Q5_K / Q8_0),
# Q2_K, IQ4_XS and IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_M models run under --flags
# +act_q8 (the 8-bit paths of act8_kquant_ref.c and act8_iq_ref.c: rows of
# 256 values, a one-super-block group, and of 512, a full one) with the same
# tokens and top logits at every ISA level the CPU has and at 1, 2 and 3
# threads: a teacher-forced trace recorded on the scalar path with 1 thread
# (prefill in one call, then every decode step's argmax) gates every level
# at 2 threads and the best one at 1 and 3, and a trace recorded at each of
# those equals it (its top-k logits, 8 digits) but for the line naming the
# ISA and thread count.
set -u
BIN=${MOEFAST_BIN:-build/asan/moefast}
REL=${MOEFAST_BIN_REL:-build/rel/moefast}
[ -x "$REL" ] || REL=$BIN
d=$(mktemp -d /tmp/moefast-cli-a8f-XXXXXX) || exit 1
trap 'rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

isas=scalar
grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo && isas="$isas avx2"
has512=1
for fl in avx512f avx512bw avx512vl avx512dq avx512_vnni; do grep -qw $fl /proc/cpuinfo || has512=0; done
[ $has512 = 1 ] && isas="$isas avx512"

for t in Q5_K Q3_K_M Q2_K IQ4_XS IQ2_XXS IQ2_XS IQ3_XXS IQ1_M; do
  m="$d/$t.gguf"
  "$REL" gen --arch qwen3moe --preset tiny --type $t n_embd=256 n_ff_exp=512 n_layer=2 -o "$m" >/dev/null 2>"$d/err" ||
    { bad "gen --type $t: $(cat "$d/err")"; continue; }
  MOEFAST_ISA=scalar "$BIN" trace record -m "$m" --tokens 1,2,3,4,5,6 --steps 6 -t 1 --flags=+act_q8 \
    -o "$d/$t.json" >/dev/null 2>"$d/err" || { bad "trace record $t: $(cat "$d/err")"; continue; }
  grep -v recorded_with "$d/$t.json" >"$d/want"
  for isa in $isas; do
    for th in 1 2 3; do
      [ $th != 2 ] && [ "$isa" != "${isas##* }" ] && continue   # 1 and 3 threads at the best ISA only
      out=$(MOEFAST_ISA=$isa "$BIN" gate -m "$m" "$d/$t.json" --flags=+act_q8 -t $th 2>&1) ||
        bad "$t +act_q8 isa=$isa t=$th: $out"
      MOEFAST_ISA=$isa "$BIN" trace record -m "$m" --tokens 1,2,3,4,5,6 --steps 6 -t $th --flags=+act_q8 \
        -o "$d/got.json" >/dev/null 2>"$d/err" || { bad "trace record $t isa=$isa t=$th: $(cat "$d/err")"; continue; }
      grep -v recorded_with "$d/got.json" | cmp -s - "$d/want" || bad "$t +act_q8 isa=$isa t=$th: other top-k logits"
    done
  done
  [ $fail -eq 0 ] && echo "ok $t +act_q8: the same tokens and logits on $isas (2 threads; 1, 3 at ${isas##* })"
done
[ $fail -eq 0 ] && echo "cli_act8_formats: ok"
exit $fail
