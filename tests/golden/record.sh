#!/bin/sh
# record.sh — re-records the golden traces in tests/golden/ on the reference
# path (--flags=none, scalar kernels, one thread). Run it only when a change is
# MEANT to alter the model's results (a fix in the reference path, a new
# generator): say so in the commit. Usage: sh tests/golden/record.sh [BIN]
#   MOEFAST_GOLDEN_BENCH=1 also records tests/golden/bench/ on the bench-preset
#   models in build/models/ (~1.8 GB each; about a minute per model).
set -eu
BIN=${1:-build/rel/moefast}
SH=${MOEFAST_SHARED:-../shared}
G=tests/golden
MD=build/golden-models
mkdir -p "$MD"
export MOEFAST_ISA=scalar
unset MOEFAST_FLAGS
# fox: the oracle prompt (14 ids); bos: a single token; long: 64 ids, past the
# laguna sliding window (12) and long enough for batched prefill to matter.
FOX=588,418,515,478,560,429,258,462,489,13,573,552,259,377
LONG=$(awk 'BEGIN { x = 12345; s = ""; for (i = 0; i < 64; i++) { x = (x * 1103515245 + 12345) % 2147483648; s = s (i ? "," : "") (x % 997) } print s }')
rec() { # model, trace, steps
  "$BIN" trace record -m "$1" --flags=none -t 1 --steps "$3" -o "$2" \
    --tokens "$FOX" --name fox --tokens 997 --name bos --tokens "$LONG" --name long
}
for m in "$SH"/oracle/*.gguf; do
  b=$(basename "$m" .gguf)
  rec "$m" "$G/$b.trace.json" 32
done
"$BIN" gen --arch laguna --preset default -o "$MD/laguna-default.gguf"
rec "$MD/laguna-default.gguf" "$G/laguna-default.trace.json" 32
if [ "${MOEFAST_GOLDEN_BENCH:-0}" = 1 ]; then
  # the models of `make bench` (bench/run.sh), generated there when missing
  mkdir -p build/models
  for m in qwen3moe-bench-q8_0 laguna-bench-q8_0 laguna-bench-bf16-nvfp4; do
    case $m in
      qwen3moe-bench-q8_0) args="--arch qwen3moe --preset bench --type Q8_0" ;;
      laguna-bench-q8_0) args="--arch laguna --preset bench --type Q8_0" ;;
      laguna-bench-bf16-nvfp4) args="--arch laguna --preset bench --type BF16 --type-experts NVFP4" ;;
    esac
    # shellcheck disable=SC2086
    [ -f build/models/$m.gguf ] || "$BIN" gen $args -o build/models/$m.gguf
    "$BIN" trace record -m build/models/$m.gguf --flags=none -t 1 --steps 16 \
      -o "$G/bench/$m.trace.json" --tokens "$FOX" --name fox
  done
fi
