#!/bin/sh
# The kimi-k2 pre-tokenizer against llama.cpp's own splitter: random strings
# over edge characters, split by libllama's unicode_regex_split and by
# moefast_pretokenize; prints how many differ per seed (0 expected; U+180E
# and U+2EBF0 are left out of fuzz.py: Unicode-table differences, see
# docs/TOKENIZER.md). Run from the repository root after `make build/rel/libmoefast.a`.
# LLAMA_SRC / LLAMA_BIN: a llama.cpp tree and its build's bin directory.
set -eu
LLAMA_SRC=${LLAMA_SRC:-/work/llama-src}; LLAMA_BIN=${LLAMA_BIN:-/work/llama-build/bin}
D=scripts/kimi_split_check; T=$(mktemp -d)
g++ -O1 -o "$T/ref" $D/llama_split.cpp -L"$LLAMA_BIN" -lllama -Wl,-rpath,"$LLAMA_BIN"
gcc -O1 -std=c11 -Iinclude -Isrc -o "$T/got" $D/moefast_split.c build/rel/libmoefast.a \
    $(pkg-config --libs libpcre2-8 jansson libcrypto) -lm -lpthread
python3 scripts/gguf_set_pre.py tests/data/llamacpp-vocab/ggml-vocab-deepseek-coder.gguf "$T/v.gguf" kimi-k2
for seed in 1 2 3; do
    python3 $D/fuzz.py $seed 20000 > "$T/in"
    "$T/ref" "$T/in" > "$T/ref.out"; "$T/got" "$T/v.gguf" "$T/in" > "$T/got.out"
    echo "seed $seed: $(diff "$T/ref.out" "$T/got.out" | grep -c '^<' || true) of 20000 differ"
done
rm -rf "$T"
