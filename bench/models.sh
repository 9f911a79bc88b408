# bench/models.sh — sourced by the bench scripts (needs BIN and MODELS set):
# make_model NAME makes build/models/NAME.gguf when missing: the Q8_0 and
# BF16 + FP4 bench models by `moefast gen`, the named mixes (Q4_K_M, Q5_K_M,
# Q3_K_M, IQ4_XS, Q2_K: llama-quantize's per-tensor choices,
# docs/QUANT_MIXES.md) by `moefast quantize` from the architecture's Q8_0
# model, as a user requantizes a file; q8_0-iq2_xxs (-iq3_xxs, -iq1_s, -iq1_m):
# that model with its expert matrices requantized to the i-quant (not in the
# scripts' default lists: IQ2_XXS takes minutes to quantize). Returns non-zero
# for an unknown name.
make_model() {
  [ -f "$MODELS/$1.gguf" ] && return 0
  mm_arch=${1%%-bench-*}; mm_kind=${1#*-bench-}
  case $mm_kind in
    q8_0) "$BIN" gen --arch "$mm_arch" --preset bench --type Q8_0 -o "$MODELS/$1.gguf" ;;
    bf16-nvfp4) "$BIN" gen --arch "$mm_arch" --preset bench --type BF16 --type-experts NVFP4 -o "$MODELS/$1.gguf" ;;
    bf16-mxfp4) "$BIN" gen --arch "$mm_arch" --preset bench --type BF16 --type-experts MXFP4 -o "$MODELS/$1.gguf" ;;
    q8_0-iq2_xxs|q8_0-iq3_xxs|q8_0-iq1_s|q8_0-iq1_m)   # experts in an i-quant, the rest Q8_0 (a "dynamic" mix's shape)
      mm_out=$MODELS/$1.gguf; mm_type=$(echo "${mm_kind#q8_0-}" | tr a-z A-Z)
      make_model "$mm_arch-bench-q8_0" &&
        "$BIN" quantize "$MODELS/$mm_arch-bench-q8_0.gguf" "$mm_out" Q8_0 --type-experts "$mm_type" >/dev/null ;;
    q4_k_m|q5_k_m|q3_k_m|iq4_xs|q2_k)
      mm_out=$MODELS/$1.gguf; mm_type=$(echo "$mm_kind" | tr a-z A-Z)
      make_model "$mm_arch-bench-q8_0" &&
        "$BIN" quantize "$MODELS/$mm_arch-bench-q8_0.gguf" "$mm_out" "$mm_type" >/dev/null ;;
    *) echo "bench: unknown model '$1'" >&2; return 1 ;;
  esac
}
# model_files NAME...: make each (make_model) and print the paths of those
# that exist, space-separated; a name that cannot be made is said on stderr.
model_files() {
  mf_out=""
  for mf_m in "$@"; do
    if make_model "$mf_m"; then mf_out="$mf_out $MODELS/$mf_m.gguf"; else echo "bench: no $mf_m" >&2; fi
  done
  echo "$mf_out"
}
