#!/bin/sh
# cli_rope_llamacpp.sh — `--rope-scaling / --rope-scale / --yarn-orig-ctx`
# against llama.cpp's same options: greedy 64-token continuations of FP32
# models equal llama.cpp's (tests/data/llamacpp-yarn/PROVENANCE.md: how they
# were made, and how the texts are compared). Needs ../shared's tiny files
# (skips without them).
BIN=${MOEFAST_BIN:-build/asan/moefast}
. tests/lib.sh
d=$(mktemp -d /tmp/moefast-cli-rope-XXXXXX) || exit 1
trap 'rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
R=tests/data/llamacpp-yarn
PROMPT="The quick brown fox jumps over the lazy dog. Once upon a time"

Q=$(ref oracle/qwen3moe-tiny-f32.gguf) || { echo "skip: cli_rope_llamacpp: oracle/qwen3moe-tiny-f32.gguf not found"; exit 0; }
# model file: the F32 requantization of the shared Q8_0 file (as the references were made)
f32_of() {
  src=$(ref "oracle/$1-tiny-q8_0.gguf") || return 1
  [ -f "$d/$1.gguf" ] || "$BIN" quantize "$src" "$d/$1.gguf" F32 >/dev/null 2>"$d/err" || { bad "quantize $1: $(cat "$d/err")"; return 1; }
  echo "$d/$1.gguf"
}
check() { # case model-file args...
  c=$1; f=$2; shift 2
  "$BIN" run -m "$f" -p "$PROMPT" -n 64 -t 2 "$@" >"$d/out" 2>"$d/err" || { bad "$c: run failed: $(cat "$d/err")"; return; }
  python3 - "$R/$c.out" "$d/out" <<'PY' || bad "$c ($*): the continuation differs from llama.cpp's"
import sys
ref = open(sys.argv[1], 'rb').read().decode('utf-8', 'replace').rstrip('\n')
got = open(sys.argv[2], 'rb').read().replace(b'\x00', b'').decode('utf-8').rstrip('\n')
if ref != got:
    n = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
    print(f"differs at char {n}: llama.cpp {ref[n:n+40]!r}, moefast {got[n:n+40]!r}", file=sys.stderr)
    sys.exit(1)
PY
}
check qwen3moe__yarn4_1024 "$Q" --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 1024
check qwen3moe__yarn8 "$Q" --rope-scaling yarn --rope-scale 8
if G=$(f32_of gpt-oss); then
  check gpt-oss__none "$G" --rope-scaling none
  check gpt-oss__scale8 "$G" --rope-scale 8
  check gpt-oss__yarn16_2000 "$G" --rope-scaling yarn --rope-scale 16 --yarn-orig-ctx 2000
else echo "skip: cli_rope_llamacpp: oracle/gpt-oss-tiny-q8_0.gguf not found"; fi
if S=$(f32_of deepseek2); then
  check deepseek2__none "$S" --rope-scaling none
  check deepseek2__scale8 "$S" --rope-scale 8
  check deepseek2__orig100 "$S" --yarn-orig-ctx 100
else echo "skip: cli_rope_llamacpp: oracle/deepseek2-tiny-q8_0.gguf not found"; fi
[ $fail -eq 0 ] && echo "cli_rope_llamacpp: ok"
exit $fail
