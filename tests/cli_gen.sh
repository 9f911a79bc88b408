#!/bin/sh
# cli_gen.sh — `moefast gen` / `moefast quantize` from the command line:
# errors exit 2 with one line "moefast <cmd>: ...", failed writes leave
# nothing behind, same arguments give the same bytes.
BIN=${MOEFAST_BIN:-build/asan/moefast}
. tests/lib.sh   # ref: ../shared, else the vendored copy (tests/data/shared)
d=$(mktemp -d /tmp/moefast-cli-gen-XXXXXX) || exit 1
trap 'rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

# expect_err CMD... : exit status 2, exactly one stderr line naming the command
expect_err() {
  "$BIN" "$@" >"$d/out" 2>"$d/err"; rc=$?
  [ $rc -eq 2 ] || bad "'$*' exited $rc, expected 2"
  [ "$(wc -l <"$d/err")" -eq 1 ] || bad "'$*' printed $(wc -l <"$d/err") stderr lines: $(cat "$d/err")"
  grep -q "^moefast $1: " "$d/err" || bad "'$*' message lacks 'moefast $1: ': $(cat "$d/err")"
}
# expect_msg TEXT : the last error message contains TEXT
expect_msg() { grep -q -- "$1" "$d/err" || bad "message lacks '$1': $(cat "$d/err")"; }

expect_err gen --arch mistral --preset tiny -o "$d/x.gguf"; expect_msg "mistral"
expect_err gen --arch laguna --preset huge -o "$d/x.gguf"; expect_msg "huge"
expect_err gen --arch laguna --preset tiny -o "$d/x.gguf" n_layers=3; expect_msg "n_layers"
expect_err gen --arch laguna --preset tiny -o "$d/x.gguf" n_layer=-1; expect_msg "n_layer"
expect_err gen --arch qwen3moe --preset tiny -o "$d/x.gguf" swa_window=8; expect_msg "swa_window"
expect_err gen --arch laguna --preset tiny -o "$d/x.gguf" --type Q9_9; expect_msg "Q9_9"
expect_err gen --arch qwen3moe --preset tiny -o "$d/x.gguf" head_peak=-1; expect_msg "head_peak"
expect_err gen --arch qwen3moe --preset tiny -o "$d/x.gguf" embd_scale=x; expect_msg "embd_scale"
expect_err gen --arch qwen3moe --preset tiny -o "$d/x.gguf" key_outliers=-2; expect_msg "key_outliers"
expect_err gen --arch laguna --preset tiny -o "$d/x.gguf" --seed -3; expect_msg "seed"
expect_err gen --arch laguna --preset tiny -o "$d/x.gguf" --bogus; expect_msg "bogus"
expect_err gen --arch laguna --preset tiny -o "$d/x.gguf" --chat-template jinja; expect_msg "chat_template"
expect_err gen --arch laguna --preset tiny -o "$d/x.gguf" --chat-template; expect_msg "needs a value"
expect_err gen --arch laguna --preset tiny; expect_msg "-o"
expect_err gen --arch laguna -o "$d/x.gguf"; expect_msg "preset"
[ -e "$d/x.gguf" ] && bad "a failed gen left $d/x.gguf"

# unwritable outputs: a path under a regular file, and a directory (the
# rename fails after the data was written: the temp file must go too)
mkdir "$d/w"; : >"$d/w/file"; mkdir "$d/w/dir"
expect_err gen --arch qwen3moe --preset tiny -o "$d/w/file/x.gguf"
expect_err gen --arch qwen3moe --preset tiny -o "$d/w/dir"
[ "$(ls -A "$d/w" | tr '\n' ' ')" = "dir file " ] || bad "failed writes left: $(ls -A "$d/w")"
[ -z "$(ls -A "$d/w/dir")" ] || bad "failed write left in dir: $(ls -A "$d/w/dir")"

# success, determinism, seed
"$BIN" gen --arch qwen3moe --preset tiny -o "$d/a.gguf" >/dev/null || bad "gen tiny failed"
"$BIN" gen --arch qwen3moe --preset tiny --type F32 --seed 42 -o "$d/b.gguf" >/dev/null || bad "gen tiny (explicit) failed"
cmp -s "$d/a.gguf" "$d/b.gguf" || bad "two gens differ"
# rows are drawn in parallel: one CPU must give the same bytes
if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -gt 1 ]; then
  taskset -c 0 "$BIN" gen --arch qwen3moe --preset tiny -o "$d/c.gguf" >/dev/null || bad "gen on one CPU failed"
  cmp -s "$d/a.gguf" "$d/c.gguf" || bad "gen on one CPU differs"
fi
"$BIN" gen --arch qwen3moe --preset tiny --seed 5 -o "$d/b.gguf" >/dev/null || bad "gen --seed 5 failed"
cmp -s "$d/a.gguf" "$d/b.gguf" && bad "--seed did not change the file"
# --chat-template qwen3-tools: Qwen3's tool rendering in tokenizer.chat_template
"$BIN" gen --arch qwen3moe --preset tiny --chat-template qwen3-tools -o "$d/t.gguf" >/dev/null || bad "gen --chat-template failed"
grep -q "<tool_call>" "$d/t.gguf" || bad "--chat-template qwen3-tools: no <tool_call> in the file"
grep -q "<tool_call>" "$d/a.gguf" && bad "the default template has <tool_call>"
"$BIN" gen --help >"$d/help" || bad "gen --help failed"
# every key the help lists is a key gen knows (laguna takes them all)
nk=0
for k in $(sed -n 's/^    \([a-z][a-z_]*\)  .*/\1/p' "$d/help"); do
  nk=$((nk+1))
  "$BIN" gen --arch laguna --preset tiny -o "$d/nodir/x.gguf" "$k=@" 2>"$d/err" >/dev/null
  grep -q "unknown key" "$d/err" && bad "gen --help lists '$k', which gen rejects"
done
[ $nk -ge 30 ] || bad "gen --help lists only $nk keys"

# quantize
"$BIN" quantize "$d/a.gguf" "$d/q.gguf" Q8_0 >/dev/null || bad "quantize Q8_0 failed"
[ -s "$d/q.gguf" ] || bad "quantize wrote nothing"
expect_err quantize "$d/a.gguf" "$d/r.gguf" Q9_9; expect_msg "Q9_9"
expect_err quantize "$d/a.gguf" "$d/r.gguf" Q4_K; expect_msg "ffn_down_exps"
expect_err quantize "$d/a.gguf" "$d/r.gguf" Q8_0 --type-experts nope; expect_msg "nope"
expect_err quantize "$d/missing.gguf" "$d/r.gguf" Q8_0; expect_msg "missing.gguf"
expect_err quantize "$d/a.gguf" "$d/r.gguf"
[ -e "$d/r.gguf" ] && bad "a failed quantize left $d/r.gguf"
# the 32-value formats of the quantization mixes: quantize and gen --type
# write them, and a short greedy run gives the same tokens at every ISA
# level, with the 8-bit activation path too
for T in Q4_1 Q5_0 Q5_1 IQ4_NL; do
  "$BIN" quantize "$d/a.gguf" "$d/$T.gguf" $T >/dev/null || bad "quantize $T failed"
  "$BIN" gen --arch qwen3moe --preset tiny --type $T -o "$d/g$T.gguf" >/dev/null || bad "gen --type $T failed"
  "$BIN" info "$d/g$T.gguf" 2>/dev/null | grep -q "blk.0.ffn_up_exps.weight  *$T " || bad "gen --type $T: experts not $T"
  for fl in none +act_q8; do
    want=""
    for isa in scalar avx2 avx512; do
      got=$(MOEFAST_ISA=$isa "$BIN" run -m "$d/$T.gguf" --tokens 1,2,3,4 -n 6 --flags=$fl --json 2>/dev/null |
            grep -o '"tokens":\[[^]]*\]')
      [ -n "$got" ] || bad "run $T $fl $isa produced no tokens"
      [ -z "$want" ] && want=$got
      [ "$got" = "$want" ] || bad "run $T $fl: $isa gives $got, scalar $want"
    done
  done
done

# the 256-value K-quants (rows of 256: n_ff_exp) and llama-quantize's Q2_K mix
for t in Q5_K Q3_K Q2_K IQ4_XS; do
  "$BIN" gen --arch qwen3moe --preset tiny --type "$t" n_ff_exp=256 -o "$d/k.gguf" >/dev/null || bad "gen --type $t failed"
  "$BIN" run -m "$d/k.gguf" --tokens 1,2,3 -n 2 >/dev/null 2>&1 || bad "run on a $t model failed"
done
"$BIN" quantize "$d/a.gguf" "$d/m.gguf" Q2_K >/dev/null || bad "quantize with the Q2_K mix failed"
"$BIN" run -m "$d/m.gguf" --tokens 1,2,3 -n 2 >/dev/null 2>&1 || bad "run on the Q2_K mix failed"
expect_err quantize "$d/a.gguf" "$d/r.gguf" Q8_0 --type-experts Q4_K_M; expect_msg "Q4_K_M"
"$BIN" gen --arch qwen3moe --preset tiny --type Q4_K_M n_ff_exp=256 -o "$d/m.gguf" >/dev/null || bad "gen --type Q4_K_M failed"
"$BIN" run -m "$d/m.gguf" --tokens 1,2,3 -n 2 >/dev/null 2>&1 || bad "run on a gen Q4_K_M mix failed"
ls "$d"/*.f32.tmp >/dev/null 2>&1 && bad "gen --type Q4_K_M left its F32 file"
expect_err gen --arch qwen3moe --preset tiny --type Q5_K_M --type-experts Q8_0 -o "$d/r.gguf"; expect_msg "Q5_K_M"
if LF=$(ref oracle/laguna-tiny-f32.gguf); then
  "$BIN" quantize "$LF" "$d/l.gguf" BF16 --type-experts NVFP4 >/dev/null \
    || bad "quantize laguna BF16/NVFP4 failed"
fi
[ $fail -eq 0 ] && echo "cli_gen: ok"
exit $fail
