#!/bin/sh
# bench/roofline.sh BUILD_DIR — decode steps against `moefast bench`'s limits
# on every bench configuration (timing only; part of `make bench`,
# BENCH_ROOFLINE=0 skips it): the qwen3moe and laguna bench models in Q8_0,
# Q4_K_M, Q5_K_M, Q3_K_M and IQ4_XS, laguna BF16 + NVFP4 and gpt-oss
# BF16 + MXFP4, each in the default exact numerics (fp32) and the 8-bit one
# (q8: +act_q8,+kv_f16). Files are made when missing (bench/models.sh).
#
# One `moefast bench --window decode --repeat 1` per file and numerics (a
# 512-token seed, 128 steps, the bandwidth measured right before and after,
# the weights' kernels and the attention items timed from cache right after),
# every configuration once per round, ROOF_ROUNDS (3) rounds, so a drift of
# the machine's speed hits every configuration alike. Per configuration the
# table gives the median (min..max) over the rounds of: the steps against the
# roofline (weights and KV cache, each at the slower of the bandwidth and its
# kernels' rate from cache), against the weights' roofline alone, against
# the bandwidth limit with and without the KV bytes, the steps' tok/s and the
# window's bandwidth. Environment: BENCH_THREADS (2), ROOF_ROUNDS,
# ROOF_MODELS (names below), ROOF_NUMERICS ("fp32 q8").
# Output: build/bench/roofline.tsv (every run) and build/bench/roofline.md.
set -u
B=${1:-build/rel}
BIN=$B/moefast
MODELS=build/models
OUT=build/bench
T=${BENCH_THREADS:-2}
ROUNDS=${ROOF_ROUNDS:-3}
ALL="qwen3moe-bench-q8_0 qwen3moe-bench-q4_k_m qwen3moe-bench-q5_k_m qwen3moe-bench-q3_k_m qwen3moe-bench-iq4_xs
     laguna-bench-q8_0 laguna-bench-q4_k_m laguna-bench-q5_k_m laguna-bench-q3_k_m laguna-bench-iq4_xs
     laguna-bench-bf16-nvfp4 gpt-oss-bench-bf16-mxfp4"
SEL=${ROOF_MODELS:-$ALL}
NUMS=${ROOF_NUMERICS:-fp32 q8}
[ -x "$BIN" ] || { echo "bench/roofline.sh: $BIN is missing (run: make bench)" >&2; exit 2; }
for nm in $NUMS; do
  case $nm in fp32|q8) ;; *) echo "bench/roofline.sh: unknown numerics '$nm' (fp32, q8)" >&2; exit 2 ;; esac
done
mkdir -p "$MODELS" "$OUT"
. bench/models.sh   # make_model
. scripts/jget.sh

# shellcheck disable=SC2086
files=$(model_files $SEL)
TSV=$OUT/roofline.tsv
: >"$TSV"
status=0
r=1
while [ $r -le "$ROUNDS" ]; do
  echo "== round $r of $ROUNDS"
  for f in $files; do
    m=$(basename "$f" .gguf)
    for nm in $NUMS; do
      if [ "$nm" = fp32 ]; then fl=default; else fl="+act_q8,+kv_f16"; fi
      j=$OUT/roofline.$$.json
      if "$BIN" bench -m "$f" -t "$T" --flags "$fl" --window decode --repeat 1 --json >"$j" 2>"$j.err"; then
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$nm" \
          "$(jget "$j" decode.pct_of_roofline)" "$(jget "$j" decode.pct_of_weights_roofline)" \
          "$(jget "$j" decode.pct_of_bandwidth_limit)" "$(jget "$j" decode.pct_of_bandwidth_limit_with_kv)" \
          "$(jget "$j" decode.steps_tokens_per_second)" "$(jget "$j" decode.bandwidth_gb_per_second)" >>"$TSV"
        echo "-- $m $nm: $(tail -n 1 "$TSV" | cut -f3-)"
      else
        echo "bench/roofline.sh: $m ($nm): $(tail -n 1 "$j.err")" >&2; status=1
      fi
      rm -f "$j" "$j.err"
    done
  done
  r=$((r + 1))
done

cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
isa=$("$BIN" info "$(echo $files | cut -d' ' -f1)" 2>/dev/null | awk '/^kernels:/ { print $2; exit }')
{
  echo "# Decode against the roofline — $cpu (kernels ${isa:-?}), $T threads, $(date -u +%Y-%m-%d)"
  echo
  echo "Median (min..max) over $ROUNDS interleaved rounds; each a 512-token seed and 128 decode steps."
  echo "Roofline: weights and KV cache, each kind at the slower of the window's read bandwidth and its"
  echo "kernels' rate from cache; weights only: the same without the KV cache; limit: weight bytes per"
  echo "step / bandwidth (with KV: weights + KV cache). fp32 = default exact numerics, q8 = +act_q8,+kv_f16."
  echo
  echo "| file | numerics | % of roofline | % of weights' roofline | % of limit | % of limit with KV | steps tok/s | bandwidth GB/s |"
  echo "|---|---|---|---|---|---|---|---|"
  awk -F'\t' '
    function cell(k, c,   n, i, j, t, a, f) { n = cnt[k]; for (i = 1; i <= n; i++) a[i] = v[k, c, i]
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      f = c <= 6 ? "%.1f" : "%.2f"
      return sprintf(f " (" f ".." f ")", n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2, a[1], a[n]) }
    $3 ~ /^[0-9.]+$/ { k = $1 "\t" $2; if (!(k in cnt)) order[++nk] = k; cnt[k]++
                       for (c = 3; c <= 8; c++) v[k, c, cnt[k]] = $c + 0 }
    END { for (i = 1; i <= nk; i++) { k = order[i]; split(k, mn, "\t")
            printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", mn[1], mn[2], cell(k, 3), cell(k, 4), cell(k, 5),
                   cell(k, 6), cell(k, 7), cell(k, 8) } }' "$TSV"
} >"$OUT/roofline.md"
cat "$OUT/roofline.md"
exit $status
