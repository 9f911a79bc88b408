#!/bin/sh
# cli_tokenize.sh — `moefast tokenize` and `moefast chat` end to end:
# reference ids, JSON output, vocabulary-only files, errors; chat keeps the
# KV cache across turns (replayed with `run --tokens`), stops on Ctrl-C.
set -u
BIN=${MOEFAST_BIN:-build/asan/moefast}
. tests/lib.sh   # ref: ../shared, else the vendored copy (tests/data/shared)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

PROMPT="The quick brown fox jumps over the lazy dog. Once upon a time"
WANT="588 418 515 478 560 429 258 462 489 13 573 552 259 377"

# 1. the oracle prompt on both synthetic vocabularies (plain output: ID<TAB>piece)
for m in qwen3moe-tiny-q8_0 laguna-tiny-q8_0; do   # the F32 files' vocabularies
  mf=$(ref "oracle/$m.gguf") || continue
  got=$("$BIN" tokenize -m "$mf" "$PROMPT" | cut -f1 | tr '\n' ' ' | sed 's/ $//')
  [ "$got" = "$WANT" ] || bad "$m: tokenize gave '$got'"
done

# 2. JSON, special tokens, BOS, on the real Qwen3 vocabulary
if Q=$(ref vocab/qwen3-vocab.gguf); then
  out=$("$BIN" tokenize -m "$Q" --json "<|im_start|>user
Hello!<|im_end|>") || bad "tokenize --json failed"
  echo "$out" | grep -q '"ids":\[151644,872,198,9707,0,151645\]' || bad "special tokens: $out"
  echo "$out" | grep -q '"n_tokens":6' || bad "n_tokens: $out"
  out=$("$BIN" tokenize -m "$Q" --json --no-special "<|im_end|>")
  echo "$out" | grep -q '151645' && bad "--no-special still matched a control token: $out"
  out=$("$BIN" tokenize -m "$Q" --json --bos "Hello world")
  echo "$out" | grep -q '"ids":\[151643,9707,1879\]' || bad "--bos: $out"
  # raw bytes from a file: invalid UTF-8 as llama.cpp (each bad byte -> U+FFFD)
  printf 'a\377b' > "$T/bytes"
  out=$("$BIN" tokenize -m "$Q" --json -f "$T/bytes")
  echo "$out" | grep -q '"ids":\[64,5691,65\]' || bad "invalid UTF-8 from -f: $out"
fi

# 3. vocabulary-only GGUFs (no tensors) load
if G2=$(ref vocab/ggml-vocab-gpt-2.gguf) && SPM=$(ref vocab/ggml-vocab-llama-spm.gguf); then
  out=$("$BIN" tokenize -m "$G2" "Hello world") || bad "gpt-2 vocab-only"
  [ "$(echo "$out" | cut -f1 | tr '\n' ' ')" = "15496 995 " ] || bad "gpt-2: $out"
  out=$("$BIN" tokenize -m "$SPM" --no-bos "Hello world") || bad "spm vocab-only"
  [ "$(echo "$out" | cut -f1 | tr '\n' ' ')" = "15043 3186 " ] || bad "llama-spm: $out"
  # the file says add_bos_token = true: BOS (id 1) comes first by default
  out=$("$BIN" tokenize -m "$SPM" "Hello world") || bad "spm default bos"
  [ "$(echo "$out" | cut -f1 | tr '\n' ' ')" = "1 15043 3186 " ] || bad "llama-spm default BOS: $out"
fi

# 4. errors: one line on stderr, exit 2
"$BIN" tokenize "x" 2>"$T/e"; [ $? -eq 2 ] || bad "missing -m: exit code"
grep -q "moefast tokenize: -m FILE is required" "$T/e" || bad "missing -m message: $(cat "$T/e")"
"$BIN" tokenize -m "$T/nope.gguf" "x" 2>"$T/e"; [ $? -eq 2 ] || bad "missing file: exit code"
grep -q "nope.gguf" "$T/e" || bad "missing file message: $(cat "$T/e")"

# 5. chat: two turns; the second feeds only its own tokens at the position
#    after turn 1, and the replies equal a fresh `run` over the same ids
# (the Q8_0 files: any model does; these are vendored in tests/data/shared)
M=$(ref oracle/qwen3moe-tiny-q8_0.gguf) && L=$(ref oracle/laguna-tiny-q8_0.gguf) ||
  { [ $fail -eq 0 ] && echo "cli_tokenize: ok (chat skipped)"; exit $fail; }
printf 'Hello there\nHow are you?\n' | "$BIN" chat -m "$M" -n 8 -v --system "Be brief." >"$T/chat.out" 2>"$T/chat.err"
[ $? -eq 0 ] || bad "chat exit code: $(cat "$T/chat.err")"
[ "$(wc -l < "$T/chat.out")" -eq 2 ] || bad "chat: expected 2 reply lines, got: $(cat "$T/chat.out")"
grep -q "turn 2: fed [0-9]* tokens at position [1-9]" "$T/chat.err" || bad "chat: turn 2 did not continue the cache: $(cat "$T/chat.err")"
ids() { grep "^\[turn $1 $2:" "$T/chat.err" | sed 's/.*: //; s/\]$//'; }
f1=$(ids 1 fed); g1=$(ids 1 generated); f2=$(ids 2 fed); g2=$(ids 2 generated)
r1=$("$BIN" run -m "$M" --tokens "$f1" -n 8 --json 2>/dev/null | sed 's/.*"tokens":\[\([0-9,]*\)\].*/\1/')
[ "$r1" = "$g1" ] || bad "chat turn 1 '$g1' != run '$r1'"
r2=$("$BIN" run -m "$M" --tokens "$f1,$g1,$f2" -n 8 --json 2>/dev/null | sed 's/.*"tokens":\[\([0-9,]*\)\].*/\1/')
[ "$r2" = "$g2" ] || bad "chat turn 2 '$g2' != run over the whole conversation '$r2'"

# 6. chat errors and end of input
"$BIN" chat -m "$M" --chat-format vicuna </dev/null 2>"$T/e"; [ $? -eq 2 ] || bad "bad --chat-format: exit code"
grep -q "chatml, laguna" "$T/e" || bad "bad --chat-format message: $(cat "$T/e")"
"$BIN" chat -m "$M" </dev/null >"$T/o" 2>"$T/e" || bad "chat on empty input: $(cat "$T/e")"
printf 'hi\n' | "$BIN" chat -m "$L" --chat-format laguna -n 4 >"$T/o" 2>"$T/e" || bad "laguna format: $(cat "$T/e")"

# 7. Ctrl-C stops the reply, not the program: the next line is still answered
mkfifo "$T/in"
"$BIN" chat -m "$M" -n 1000000 -v <"$T/in" >"$T/sig.out" 2>"$T/sig.err" &
pid=$!
exec 3>"$T/in"
echo "Tell me everything" >&3
i=0; while [ ! -s "$T/sig.out" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
kill -INT $pid
i=0; while ! grep -q "turn 1:" "$T/sig.err" && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
n1=$(wc -c < "$T/sig.out")
echo "and more" >&3
i=0; while [ "$(wc -c < "$T/sig.out")" -le "$n1" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
kill -INT $pid
i=0; while ! grep -q "turn 2:" "$T/sig.err" && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
exec 3>&-
wait $pid; rc=$?
grep -q "turn 1: .*(interrupted)" "$T/sig.err" || bad "Ctrl-C did not interrupt the reply: $(head -c 300 "$T/sig.err")"
grep -q "turn 2: .*(interrupted)" "$T/sig.err" || bad "chat did not answer (and stop) again after Ctrl-C"
[ $rc -eq 0 ] || bad "chat exit code after Ctrl-C: $rc"

[ $fail -eq 0 ] && echo "cli_tokenize: ok"
exit $fail
