#!/bin/sh
# cli_serve_tools.sh — tool calls in `moefast serve` (docs/SERVE.md, "Tool
# calls") on a random-weight qwen3moe written with gen's Qwen3 tool template:
#   every tool_choice mode: required and a named function give calls from the
#     first generated token (the log's raw text is the trigger then the call),
#     each call's name one of the tools and its arguments JSON valid for the
#     tool's schema, finish_reason tool_calls; parallel_tool_calls false gives
#     exactly one call, true several (some seed); none and auto (the model
#     writes no trigger) give text; auto with a model made to write text then
#     the trigger (the test hook MOEFAST_SERVE_TEST_TOOL_TEXT) gives that text
#     as content and a call after it;
#   deepseek3 and harmony (--chat-format) calls in their syntaxes;
#   llama3, mistral, deepseek3, glm4 (GLM-4.5's <arg_key> calls) and kimi-k2
#     models with their own templates and special tokens (gen --chat-template
#     F-tools): tests/serve/tools_family.py; Kimi-K2's parallel calls,
#     running call indexes and the 64-call limit through the hook;
#   streamed calls (deltas as the call is generated) reassemble to the
#     non-streamed ones, also sampled strings with multi-byte characters;
#   a call cut by max_tokens ends with finish_reason length;
#   the prompt: the tokens of Qwen3's template rendered by jinja2 (when
#     installed), with tools, assistant tool_calls and tool results;
#   a request's calls are the same tokens alone or among concurrent ones;
#   the openai npm client: a call, the SDK's stream helper reassembling it,
#     the call and its result sent back (tests/serve/test.mjs, TOOLS_ONLY);
#   bad tools / tool_choice / parallel_tool_calls / tool messages give 400s
#     naming the field (a bad parameter schema: the JSON path).
set -u
. tests/lib.sh   # serve_start
BIN=${MOEFAST_BIN:-build/asan/moefast}
REL=${MOEFAST_BIN_REL:-build/rel/moefast}
[ -x "$REL" ] || REL=$BIN
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed"; exit 0; }
T=$(mktemp -d /tmp/moefast-cli-serve-tools.XXXXXX) || exit 2
PIDS=""
cleanup() { for p in $PIDS; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
M=$T/q.gguf
"$REL" gen --arch qwen3moe --preset tiny --type Q8_0 --chat-template qwen3-tools -o "$M" >/dev/null || { echo "gen failed"; exit 1; }

start() { # log flags [env...]: sets PORT (tests/lib.sh)
  st_log=$1; st_flags=$2; shift 2; serve_start "$st_log" "--slots 4 $st_flags" "$@"
}
# auto requests first write this (the hook), so the random model writes the trigger
start "$T/log1" "" MOEFAST_SERVE_TEST_TOOL_TEXT='Let me check.<tool_call>'; P1=$PORT
# the other families' call syntaxes (their special tokens spelled in text here)
start "$T/log2" "--chat-format deepseek3" A=1; P2=$PORT
start "$T/log3" "--chat-format harmony" A=1; P3=$PORT

python3 tests/serve/tools_check.py "$P1" "$M" "$REL" "$T" "$P2" "$P3"
rc=$?
# Llama 3.x, Mistral and DeepSeek-V3 with their own templates and special
# tokens (gen --chat-template F-tools; the seeds those of cli_toolcheck.sh):
# call syntax, markers as one control token, the hook's auto call, calls and
# results sent back, the prompt against the template (tests/serve/tools_family.py)
M0=$M
for fs in llama3:42 mistral:2 deepseek3:12 glm4:11 kimi-k2:42; do
  fam=${fs%:*}; M=$T/$fam.gguf
  "$REL" gen --arch qwen3moe --preset tiny --type Q8_0 --chat-template "$fam-tools" --seed "${fs#*:}" -o "$M" >/dev/null || { echo "gen $fam failed"; exit 1; }
  case $fam in llama3) trig='{"name"';; mistral) trig='[TOOL_CALLS]';; glm4) trig='<tool_call>';; kimi-k2) trig='<|tool_calls_section_begin|>';;
    *) trig='<｜tool▁calls▁begin｜>';; esac
  start "$T/log-$fam" "--ctx 8192" MOEFAST_SERVE_TEST_TOOL_TEXT="Let me check.$trig"
  python3 tests/serve/tools_family.py "$fam" "$PORT" "$M" "$REL" "$T/log-$fam" || rc=1
done
# GLM's raw string values hold any text but </arg_value>: a quote and a
# backslash (the hook writes the whole call) come back JSON-escaped
M=$T/glm4.gguf
start "$T/log-glm4-esc" "--ctx 8192" MOEFAST_SERVE_TEST_TOOL_TEXT="$(printf 'Let me check.<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>a"b\\c</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>')"
GLM_ESCAPE=1 python3 tests/serve/tools_family.py glm4 "$PORT" "$M" "$REL" "$T/log-glm4-esc" || rc=1
# Kimi-K2: the hook writes ping's call (index 0) and starts get_weather's (1)
M=$T/kimi-k2.gguf
start "$T/log-kimi-par" "--ctx 8192" MOEFAST_SERVE_TEST_TOOL_TEXT='Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.ping:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>'
KIMI_PARALLEL=1 python3 tests/serve/tools_family.py kimi-k2 "$PORT" "$M" "$REL" "$T/log-kimi-par" || rc=1
# ... and 63 whole calls: the model's is the 64th, the most one turn may have
H='Let me check.<|tool_calls_section_begin|>'
i=0; while [ $i -lt 63 ]; do H="$H<|tool_call_begin|>functions.ping:$i<|tool_call_argument_begin|>{}<|tool_call_end|>"; i=$((i + 1)); done
start "$T/log-kimi-64" "--ctx 8192" MOEFAST_SERVE_TEST_TOOL_TEXT="$H"
KIMI_MAX=1 python3 tests/serve/tools_family.py kimi-k2 "$PORT" "$M" "$REL" "$T/log-kimi-64" || rc=1
M=$M0
# the official openai npm client (installed by tests/cli_serve.sh's npm ci)
if ! command -v node >/dev/null 2>&1 || [ ! -f tests/serve/node_modules/openai/package.json ]; then
  echo "SKIP openai SDK tool checks: node or tests/serve/node_modules absent (npm ci in tests/serve)"
elif ! BASE="http://127.0.0.1:$P1/v1" KEY=unused MODEL=q TOOLS_ONLY=1 node tests/serve/test.mjs >"$T/sdk.log" 2>&1; then
  echo "FAIL: openai SDK tool checks:"; cat "$T/sdk.log"; rc=1
else
  grep '^ok' "$T/sdk.log"
fi
for p in $PIDS; do kill -TERM "$p"; wait "$p" || { echo "FAIL: server $p exit $?"; rc=1; }; done
PIDS=""
for l in "$T/log1" "$T/log2" "$T/log3" "$T/log-llama3" "$T/log-mistral" "$T/log-deepseek3" "$T/log-glm4" "$T/log-glm4-esc" "$T/log-kimi-k2" "$T/log-kimi-par" "$T/log-kimi-64"; do
  grep -q "ERROR: AddressSanitizer\|LeakSanitizer\|runtime error" "$l" && { echo "FAIL: sanitizer: $(cat "$l")"; rc=1; }
done
exit $rc
