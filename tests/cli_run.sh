#!/bin/sh
# cli_run.sh — `moefast run` and `moefast info` end to end: the reference
# prompt text tokenizes to the reference ids; greedy `run --json` reproduces
# llama.cpp's 64 tokens exactly where both compute in FP32 (the F32-KV,
# no-flash references, also for the Q8_0 files that hold the same weights);
# sampling is reproducible with a seed; the penalties (OpenAI's, llama.cpp's
# repeat penalty) repeat less; bad arguments exit 2 with one line;
# -f FILE / -f - prompts (incl. 1 MB and bad files); --ctx past the trained
# context warns (or names YaRN's reach).
# Reference files through ref (tests/lib.sh): ../shared, else the vendored copy.
BIN=${MOEFAST_BIN:-build/asan/moefast}
BIN_REL=${MOEFAST_BIN_REL:-build/rel/moefast}
[ -x "$BIN_REL" ] || BIN_REL=$BIN
. tests/lib.sh
d=$(mktemp -d /tmp/moefast-cli-run-XXXXXX) || exit 1
trap 'rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

# the ids of a one-line JSON array field: field FILE NAME -> "1,2,3"
field() { sed -n "s/.*\"$2\": *\[\([0-9, ]*\)\].*/\1/p" "$1" | head -n 1 | tr -d ' '; }

PROMPT="The quick brown fox jumps over the lazy dog. Once upon a time"
for pair in qwen3moe-tiny-f32:qwen3moe-tiny-f32.f32kv-noflash qwen3moe-tiny-q8_0:qwen3moe-tiny-f32.f32kv-noflash \
            laguna-tiny-f32:laguna-tiny-f32.f32kv-noflash laguna-tiny-q8_0:laguna-tiny-f32.f32kv-noflash; do
  model=${pair%%:*}
  mf=$(ref "oracle/$model.gguf") && rj=$(ref "oracle/${pair#*:}.json") || continue
  # reference greedy tokens: the second "tokens" array of the reference JSON
  want=$(grep '"tokens"' "$rj" | sed -n 2p | sed 's/.*\[\(.*\)\].*/\1/' | tr -d ' ')
  wprompt=$(grep '"tokens"' "$rj" | sed -n 1p | sed 's/.*\[\(.*\)\].*/\1/' | tr -d ' ')
  "$BIN" run -m "$mf" -p "$PROMPT" -n 64 -t 2 --json >"$d/out.json" 2>"$d/err" ||
    { bad "$model: run failed: $(cat "$d/err")"; continue; }
  [ "$(field "$d/out.json" prompt_tokens)" = "$wprompt" ] || bad "$model: prompt ids $(field "$d/out.json" prompt_tokens) != $wprompt"
  [ "$(field "$d/out.json" tokens)" = "$want" ] || bad "$model: tokens differ from ${pair#*:}: $(field "$d/out.json" tokens)"
done

M=$(ref oracle/laguna-tiny-bf16-nvfp4.gguf) || { echo "cli_run: the rest needs that file"; exit $fail; }
L=$(ref oracle/laguna-tiny-q8_0.gguf) || { echo "cli_run: the rest needs that file"; exit $fail; }
# plain output: the continuation on stdout, one timing line on stderr
"$BIN" run -m "$M" --tokens 588,418,515 -n 8 >"$d/out" 2>"$d/err" || bad "plain run failed"
grep -q "^prefill: 3 tokens" "$d/err" || bad "no timing line: $(cat "$d/err")"
# sampling: the same seed gives the same tokens, another seed (very likely) not
for seed in 1 1 2; do
  "$BIN" run -m "$M" --tokens 588,418 -n 24 --temp 1.5 --top-k 50 --top-p 0.95 --min-p 0.01 --seed $seed --json 2>/dev/null |
    sed 's/.*"tokens":\[\([0-9,]*\)\].*/\1/' >>"$d/seeds"
done
[ "$(sed -n 1p "$d/seeds")" = "$(sed -n 2p "$d/seeds")" ] || bad "same seed, different tokens"
[ "$(sed -n 1p "$d/seeds")" != "$(sed -n 3p "$d/seeds")" ] || bad "seeds 1 and 2 gave identical samples"
# penalties: a frequency penalty of 2 on a greedy run changes nothing until a
# token repeats; on this model (its greedy answer repeats tokens) 2 and 2
# repeat less than the plain run; the same flags give the same tokens
"$BIN" run -m "$M" --tokens 588,418 -n 32 --json 2>/dev/null | sed 's/.*"tokens":\[\([0-9,]*\)\].*/\1/' >"$d/pen0"
for i in 1 2; do
  "$BIN" run -m "$M" --tokens 588,418 -n 32 --frequency-penalty 2 --presence-penalty 2 --json 2>/dev/null |
    sed 's/.*"tokens":\[\([0-9,]*\)\].*/\1/' >"$d/pen$i"
done
cmp -s "$d/pen1" "$d/pen2" || bad "penalties: the same flags gave different tokens"
maxrep() { tr ',' '\n' <"$1" | sort | uniq -c | sort -rn | awk 'NR == 1 { print $1 }'; }
[ "$(maxrep "$d/pen1")" -lt "$(maxrep "$d/pen0")" ] || bad "penalties: no less repetition than without ($(cat "$d/pen0") / $(cat "$d/pen1"))"
# llama.cpp's repeat penalty over a window: less repetition than the plain
# run, the same tokens twice; 1 or a window of 0 is off (the plain tokens)
rp() { "$BIN" run -m "$M" --tokens 588,418 -n 32 --json "$@" 2>/dev/null | sed 's/.*"tokens":\[\([0-9,]*\)\].*/\1/'; }
rp --repeat-penalty 3 --repeat-last-n 16 >"$d/rp1"
rp --repeat-penalty 3 --repeat-last-n 16 >"$d/rp2"
rp --repeat-penalty 1 >"$d/rp3"
rp --repeat-penalty 3 --repeat-last-n 0 >"$d/rp4"
cmp -s "$d/rp1" "$d/rp2" || bad "repeat penalty: the same flags gave different tokens"
[ -s "$d/rp1" ] && [ "$(maxrep "$d/rp1")" -lt "$(maxrep "$d/pen0")" ] || bad "repeat penalty: no less repetition ($(cat "$d/pen0") / $(cat "$d/rp1"))"
cmp -s "$d/rp3" "$d/pen0" && cmp -s "$d/rp4" "$d/pen0" || bad "repeat penalty 1 / window 0: not the plain tokens"

# errors: exit 2, one line naming the command
expect_err() {
  "$BIN" "$@" >"$d/out" 2>"$d/err"; rc=$?
  [ $rc -eq 2 ] || bad "'$*' exited $rc, expected 2"
  [ "$(grep -c '^moefast ' "$d/err")" -eq 1 ] || bad "'$*': no single 'moefast ...' error line: $(cat "$d/err")"
  [ -s "$d/out" ] && bad "'$*' printed on stdout"
}
expect_err run -m "$M"
expect_err run -m "$M" -p hi --tokens 1,2
expect_err run -m "$d/missing.gguf" --tokens 1
expect_err run -m "$M" --tokens 1,99999
expect_err run -m "$M" --tokens 1,x
expect_err run -m "$M" --tokens 1 -n -4
expect_err run -m "$M" --tokens 1 --temp nan
expect_err run -m "$M" --tokens 1 --top-p 2
expect_err run -m "$M" --tokens 1 --presence-penalty 2.5
expect_err run -m "$M" --tokens 1 --frequency-penalty x
expect_err run -m "$M" --tokens 1 --repeat-penalty 0
expect_err run -m "$M" --tokens 1 --repeat-penalty x
expect_err run -m "$M" --tokens 1 --repeat-last-n -2
expect_err run -m "$M" --tokens 1 --ctx 4 -n 8
expect_err run -m "$M" --tokens 1 --flags +nosuch
expect_err run -m "$M" --tokens 1 --bogus
# kv_q8: not with kv_f16; needs head sizes that are multiples of 32 (a generated
# model with heads of 48); works with a context that is not a multiple of its
# 16-position key tiles, prefill and decode giving the tokens of one-token steps
expect_err run -m "$M" --tokens 1 --flags +kv_f16,+kv_q8
grep -q "kv_f16 and kv_q8" "$d/err" || bad "kv_f16+kv_q8: $(cat "$d/err")"
"$BIN" gen --arch qwen3moe --preset tiny -o "$d/h48.gguf" head_dim=48 >/dev/null 2>"$d/err" || bad "gen head_dim=48: $(cat "$d/err")"
expect_err run -m "$d/h48.gguf" --tokens 1 --flags +kv_q8
grep -q "head_dim 48" "$d/err" || bad "kv_q8 with heads of 48: $(cat "$d/err")"
"$BIN" run -m "$L" --tokens 5,17,300,42,7,999,0,123,55,66,77,88,99,100 -n 23 --ctx 37 \
  --flags +kv_q8 --json >"$d/q8a.json" 2>"$d/err" || bad "run --flags +kv_q8 --ctx 37: $(cat "$d/err")"
"$BIN" run -m "$L" --tokens 5,17,300,42,7,999,0,123,55,66,77,88,99,100 -n 23 --ctx 37 \
  --batch-size 1 -t 3 --flags +kv_q8 --json >"$d/q8b.json" 2>"$d/err" || bad "run --flags +kv_q8 --batch-size 1: $(cat "$d/err")"
[ -n "$(field "$d/q8a.json" tokens)" ] && [ "$(field "$d/q8a.json" tokens)" = "$(field "$d/q8b.json" tokens)" ] ||
  bad "kv_q8: batched prefill and one-token steps differ: $(field "$d/q8a.json" tokens) vs $(field "$d/q8b.json" tokens)"
# --check TRACE: the golden trace replayed after the run, one line on stderr
# (make run does this on the default model); a missing, broken or foreign
# trace fails before generating (exit 2); a divergence exits 1 with a FAIL line
Q=$(ref oracle/qwen3moe-tiny-q8_0.gguf) || { echo "cli_run: the rest needs that file"; exit $fail; }; G=tests/golden/qwen3moe-tiny-q8_0.trace.json
"$BIN" run -m "$Q" --tokens 1,2 -n 2 -t 3 --check "$G" >"$d/out" 2>"$d/err" || bad "run --check failed: $(cat "$d/err")"
grep -q "^check: this machine reproduced all 96 golden tokens of $G (isa [a-z0-9]*, 3 threads)\$" "$d/err" ||
  bad "run --check: no pass line: $(cat "$d/err")"
[ -s "$d/out" ] || bad "run --check printed no text"
expect_err run -m "$Q" --tokens 1 --check "$d/missing.json"
expect_err run -m "$Q" --tokens 1 --check tests/golden/laguna-tiny-q8_0.trace.json
grep -q "recorded on" "$d/err" || bad "--check with another model's trace: $(cat "$d/err")"
printf '{"format": "moefast-trace/1", "model": ' >"$d/broken.json"
expect_err run -m "$Q" --tokens 1 --check "$d/broken.json"
expect_err run -m "$Q" --tokens 1 --check
# the numerics flags change the arithmetic on purpose: this trace diverges
"$BIN" run -m "$Q" --tokens 1,2 -n 2 --flags +act_q8,+kv_q8 --check "$G" >"$d/out" 2>"$d/err"; rc=$?
[ $rc -eq 1 ] || bad "run --check with +act_q8,+kv_q8 exited $rc, expected 1: $(cat "$d/err")"
grep -q '^check: FAIL: [1-9][0-9]* of the 96 golden tokens .* the first: case "[a-z]*" step [0-9]*, expected' "$d/err" ||
  bad "run --check divergence: no FAIL line: $(cat "$d/err")"
grep -q "numerics flags +act_q8,+kv_q8" "$d/err" || bad "run --check divergence does not name the numerics flags"
expect_err info
expect_err info "$d/missing.gguf"

# -f FILE and -f - (standard input) give the prompt ids of -p; a bad file is one
# error line, exit 2, before the model loads
Q=$(ref oracle/qwen3moe-tiny-q8_0.gguf) || exit $fail   # the F32 file's vocabulary and shapes
printf '%s' "$PROMPT" >"$d/prompt.txt"
"$BIN" run -m "$Q" -p "$PROMPT" -n 2 --json >"$d/p.json" 2>/dev/null || bad "run -p for -f"
"$BIN" run -m "$Q" -f "$d/prompt.txt" -n 2 --json >"$d/f.json" 2>"$d/err" || bad "run -f: $(cat "$d/err")"
"$BIN" run -m "$Q" -f - -n 2 --json <"$d/prompt.txt" >"$d/s.json" 2>"$d/err" || bad "run -f -: $(cat "$d/err")"
[ -n "$(field "$d/p.json" prompt_tokens)" ] &&
  [ "$(field "$d/f.json" prompt_tokens)" = "$(field "$d/p.json" prompt_tokens)" ] &&
  [ "$(field "$d/s.json" prompt_tokens)" = "$(field "$d/p.json" prompt_tokens)" ] || bad "-f / -f - / -p prompt ids differ"
: >"$d/empty"
expect_err run -m "$Q" -f "$d/empty"
grep -q "empty" "$d/err" || bad "empty prompt file: $(cat "$d/err")"
expect_err run -m "$Q" -f "$d/nosuch.txt"
grep -q "nosuch.txt" "$d/err" || bad "missing prompt file: $(cat "$d/err")"
expect_err run -m "$Q" -f "$d"
grep -q "cannot read" "$d/err" || bad "unreadable prompt file (a directory): $(cat "$d/err")"
expect_err run -m "$Q" -f "$d/prompt.txt" -p hi
expect_err run -m "$Q" -f "$d/prompt.txt" --tokens 1
expect_err run -m "$Q" -f
expect_err run -m "$Q" -f - </dev/null
# 1 MB: read and tokenized whole (tokenize -f counts it; run names the count
# when it cannot fit the tiny model's context)
awk 'BEGIN { for (i = 0; i < 16384; i++) printf "%063d\n", i }' >"$d/big.txt"
[ "$(wc -c <"$d/big.txt")" -eq 1048576 ] || bad "big.txt is not 1 MB"
"$BIN_REL" tokenize -m "$Q" -f "$d/big.txt" --json >"$d/big.json" 2>"$d/err" || bad "tokenize -f 1 MB: $(cat "$d/err")"
nbig=$(sed -n 's/.*"n_tokens":\([0-9]*\).*/\1/p' "$d/big.json")
[ "${nbig:-0}" -gt 100000 ] || bad "tokenize -f 1 MB: $nbig tokens"
"$BIN_REL" run -m "$Q" -f - -n 1 <"$d/big.txt" >"$d/out" 2>"$d/err"; rc=$?
[ $rc -eq 2 ] && grep -q "^moefast run: prompt ($nbig) " "$d/err" || bad "run -f 1 MB: rc $rc: $(cat "$d/err")"

# --ctx past the trained context: a warning naming both numbers (qwen3moe-tiny:
# 4096, no YaRN); a YaRN model whose reach covers it says so instead
"$BIN" run -m "$Q" --tokens 1 -n 1 --ctx 5000 >/dev/null 2>"$d/err" || bad "run --ctx 5000: $(cat "$d/err")"
grep -q "^moefast run: warning: --ctx 5000 .*trained context 4096" "$d/err" || bad "no --ctx warning: $(cat "$d/err")"
"$BIN" run -m "$Q" --tokens 1 -n 1 --ctx 4096 >/dev/null 2>"$d/err" || bad "run --ctx 4096"
grep -q "ctx" "$d/err" && bad "--ctx 4096 warned: $(cat "$d/err")"
"$BIN" gen --arch laguna --preset tiny -o "$d/yarn.gguf" n_ctx=1024 >/dev/null 2>"$d/err" || bad "gen n_ctx=1024: $(cat "$d/err")"
"$BIN" run -m "$d/yarn.gguf" --tokens 1 -n 1 --ctx 2000 >/dev/null 2>"$d/err" || bad "run yarn --ctx 2000: $(cat "$d/err")"
grep -q "^moefast run: note: --ctx 2000 .*trained context 1024.*YaRN.* 16384" "$d/err" || bad "no YaRN note: $(cat "$d/err")"
"$BIN" run -m "$d/yarn.gguf" --tokens 1 -n 1 --ctx 20000 >/dev/null 2>"$d/err" || bad "run yarn --ctx 20000: $(cat "$d/err")"
grep -q "^moefast run: warning: --ctx 20000 .*1024" "$d/err" || bad "no warning past YaRN: $(cat "$d/err")"
# --rope-scaling yarn --rope-scale F (llama.cpp's names): the reach moves,
# so the note replaces the warning; bad values and a factor on a file without
# YaRN are refused with one line
"$BIN" run -m "$Q" --tokens 1 -n 1 --ctx 5000 --rope-scaling yarn --rope-scale 4 >/dev/null 2>"$d/err" ||
  bad "run --rope-scaling yarn: $(cat "$d/err")"
grep -q "^moefast run: note: --ctx 5000 .*trained context 4096.*YaRN.* 16384" "$d/err" || bad "no YaRN note after --rope-scale 4: $(cat "$d/err")"
"$BIN" run -m "$Q" --tokens 1 -n 1 --ctx 5000 --rope-scaling yarn --rope-scale 2 --yarn-orig-ctx 2048 >/dev/null 2>"$d/err" ||
  bad "run --yarn-orig-ctx: $(cat "$d/err")"
grep -q "^moefast run: warning: --ctx 5000 .*4096 (and its YaRN reach)" "$d/err" || bad "2 x 2048 covers 5000?: $(cat "$d/err")"
for args in "--rope-scaling linear:bad value for --rope-scaling: 'linear'" "--rope-scale 0.5:bad value for --rope-scale" \
            "--rope-scale:--rope-scale needs a value" "--yarn-orig-ctx 0:bad value for --yarn-orig-ctx" \
            "--rope-scale 4:rope_scale / yarn_orig_ctx given, but the file has no YaRN" \
            "--rope-scaling yarn:needs rope_scale"; do
  "$BIN" run -m "$Q" --tokens 1 -n 1 ${args%%:*} >/dev/null 2>"$d/err"; rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$d/err")" -eq 1 ] && grep -q -- "${args#*:}" "$d/err" ||
    bad "run ${args%%:*}: exit $rc, $(cat "$d/err")"
done
"$BIN" serve -m "$Q" --port 0 --rope-scaling fast >/dev/null 2>"$d/err" && bad "serve --rope-scaling fast accepted"
grep -q "bad value for --rope-scaling" "$d/err" || bad "serve --rope-scaling fast: $(cat "$d/err")"
printf 'hi\n' | "$BIN" chat -m "$Q" --ctx 5000 -n 1 >/dev/null 2>"$d/err" || bad "chat --ctx 5000: $(cat "$d/err")"
grep -q "^moefast chat: warning: --ctx 5000 .*4096" "$d/err" || bad "chat: no --ctx warning: $(cat "$d/err")"

# info: architecture, per-layer heads, bytes per token, the tensor table
"$BIN" info "$L" >"$d/info" 2>&1 || bad "info failed"
for want in "architecture:  laguna" "query heads per layer: 4 6s 6s 6s" "YaRN factor 32" \
            "weight bytes read per decoded token" "blk.1.ffn_gate_exps.weight" "sliding window 12" \
            "KV cache bytes per token: FP32 4096, kv_f16 2048, kv_q8 1088, kv_tq 608, kv_tq_small 480"; do
  grep -qF "$want" "$d/info" || bad "info lacks '$want'"
done
# a vocabulary-only file is still described
if V=$(ref vocab/ggml-vocab-gpt-2.gguf); then
  "$BIN" info "$V" >"$d/info" 2>"$d/err" || bad "info on a vocab-only file failed: $(cat "$d/err")"
  grep -q "tokenizer.ggml.tokens" "$d/info" || bad "vocab-only info lacks the token array"
fi

# the kernel level: forced, automatic, and a bad value (a warning, then the best level)
MOEFAST_ISA=scalar "$BIN" info "$M" 2>/dev/null | grep -q "^kernels: *scalar" || bad "MOEFAST_ISA=scalar not applied"
MOEFAST_ISA=auto "$BIN" info "$M" >"$d/info" 2>"$d/err" || bad "MOEFAST_ISA=auto failed"
[ -s "$d/err" ] && bad "MOEFAST_ISA=auto warned: $(cat "$d/err")"
MOEFAST_ISA=bogus "$BIN" info "$M" >"$d/info" 2>"$d/err" || bad "MOEFAST_ISA=bogus made info fail"
grep -q "MOEFAST_ISA=bogus" "$d/err" || bad "no warning for MOEFAST_ISA=bogus"
MOEFAST_FLAGS=-simd "$BIN" info "$M" | grep -q "^kernels: *scalar" || bad "MOEFAST_FLAGS=-simd does not select the scalar kernels"
# extensions cleared by MOEFAST_CPU_MASK: no SIMD level, and info says what each lacks
MOEFAST_CPU_MASK=-avx2 "$BIN" info "$M" >"$d/info" 2>"$d/err" || bad "MOEFAST_CPU_MASK=-avx2 made info fail"
grep -q "^kernels: *scalar" "$d/info" || bad "MOEFAST_CPU_MASK=-avx2 still chose a SIMD level"
grep -q "^isa levels: *scalar; avx2 lacks .*avx2" "$d/info" || bad "info does not say what avx2 lacks: $(grep isa "$d/info")"
MOEFAST_CPU_MASK=-bogus "$BIN" info "$M" >/dev/null 2>"$d/err" || bad "MOEFAST_CPU_MASK=-bogus made info fail"
grep -q "MOEFAST_CPU_MASK: '-bogus'" "$d/err" || bad "no warning for MOEFAST_CPU_MASK=-bogus"

# the timing line says which numerics ran (the exact default or the flags)
"$BIN" run -m "$M" --tokens 1,2,3 -n 2 >/dev/null 2>"$d/err" || bad "run for the numerics line failed"
tail -n 1 "$d/err" | grep -q ', numerics fp32$' || bad "run does not say 'numerics fp32': $(tail -n 1 "$d/err")"
"$BIN" run -m "$M" --tokens 1,2,3 -n 2 --flags +act_q8,+kv_f16 >/dev/null 2>"$d/err" || bad "run +act_q8 failed"
tail -n 1 "$d/err" | grep -q ', numerics +act_q8,+kv_f16$' || bad "run does not name its numerics flags: $(tail -n 1 "$d/err")"
printf '1 2 3\n4 5\n' >"$d/b.txt"
"$BIN" run -m "$M" --batch "$d/b.txt" -n 2 --flags +kv_q8 >/dev/null 2>"$d/err" || bad "run --batch +kv_q8 failed"
tail -n 1 "$d/err" | grep -q ', numerics +kv_q8$' || bad "run --batch does not name its numerics: $(tail -n 1 "$d/err")"

[ $fail -eq 0 ] && echo "cli_run: ok"
exit $fail
