#!/bin/sh
# cli_serve_reason.sh — reasoning and harmony history in `moefast serve`
# (docs/SERVE.md, "Reasoning"; "Tool calls") on a random-weight qwen3moe
# written with gen's Qwen3 tool template, made to think by the test hook
# MOEFAST_SERVE_TEST_TOOL_TEXT (auto tool requests write its text first):
#   <think>R</think> returned as reasoning_content R and the rest as content,
#     non-streamed and streamed (reasoning deltas first, joined = plain);
#   a trigger inside the reasoning is no call, the one after </think> is;
#   reasoning_format none (request field; --reasoning-format none) leaves it
#     inline, with the same tokens; a think block cut by max_tokens ends with
#     finish_reason length and the reasoning so far; text without a think
#     block is untouched;
#   reasoning_content sent back: a string or 400; Qwen3 (--chat-format qwen3)
#     renders it as its template does (the prompt's token count against the
#     shared Qwen3 template rendered by jinja2), plain ChatML drops it;
#   harmony (--chat-format harmony): the analysis channel returned as
#     reasoning_content (plain, streamed, inline, cut); the tools' namespace,
#     calls, results and the analysis before a call, against the cookbook's
#     rendering.
set -u
. tests/lib.sh   # serve_start
BIN=${MOEFAST_BIN:-build/asan/moefast}
REL=${MOEFAST_BIN_REL:-build/rel/moefast}
[ -x "$REL" ] || REL=$BIN
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed"; exit 0; }
T=$(mktemp -d /tmp/moefast-cli-serve-reason.XXXXXX) || exit 2
PIDS=""
cleanup() { for p in $PIDS; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
M=$T/q.gguf
"$REL" gen --arch qwen3moe --preset tiny --type Q8_0 --chat-template qwen3-tools -o "$M" >/dev/null || { echo "gen failed"; exit 1; }

start() { # log flags [env...]: sets PORT (tests/lib.sh)
  st_log=$1; st_flags=$2; shift 2; serve_start "$st_log" "--slots 2 $st_flags" "$@"
}
HOOK=$(printf '<think>\nI could write <tool_call> here.\n</think>\n\nLet me check.<tool_call>')
start "$T/log1" "" MOEFAST_SERVE_TEST_TOOL_TEXT="$HOOK"; P1=$PORT
start "$T/log2" "--chat-format qwen3 --reasoning-format none" MOEFAST_SERVE_TEST_TOOL_TEXT="$HOOK"; P2=$PORT
start "$T/log3" "--chat-format harmony" MOEFAST_SERVE_TEST_TOOL_TEXT='<|channel|>analysis<|message|>Think first.<|end|><|start|>assistant<|channel|>final<|message|>Hi'; P3=$PORT
python3 tests/serve/reason_check.py "$P1" "$P2" "$P3" "$M" "$REL"
rc=$?
for p in $PIDS; do kill -TERM "$p"; wait "$p" || { echo "FAIL: server $p exit $?"; rc=1; }; done
PIDS=""
for l in "$T/log1" "$T/log2" "$T/log3"; do
  grep -q "ERROR: AddressSanitizer\|LeakSanitizer\|runtime error" "$l" && { echo "FAIL: sanitizer: $(cat "$l")"; rc=1; }
done
exit $rc
