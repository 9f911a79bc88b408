#!/bin/sh
# bench/run.sh BUILD_DIR — what `make bench` runs (timing only, never a test):
#   1. every micro-benchmark binary in BUILD_DIR/bench/;
#   2. the `bench`-preset models in build/models/ (generated only when missing)
#      and a golden trace for each (512-token prompt, 129 steps);
#   3. `moefast bench` on each model (2 threads, the standard 512/128 windows,
#      token check against the trace), `moefast price --noise` on one model;
#      where the default kernel level is AVX-512, also the first model's fp32
#      run at the AVX2 level (MOEFAST_ISA=avx2: what a CPU without AVX-512 gets);
#   3b. bench_batch_decode: decode steps of 1/2/4/8 sequences on the qwen3moe model;
#   3c. decode against the roofline on every bench configuration, the K-quant
#      and IQ4_XS mixes included, both numerics (bench/roofline.sh; BENCH_ROOFLINE=0
#      skips it; it makes the mixes' files when missing);
#   4. `moefast serve` at concurrency 1/2/4/8 on the qwen3moe model (bench/serve.sh;
#      BENCH_SERVE=0 skips it);
#   4b. expert parallelism over MPI at N = 1, 2, 3 ranks (bench/mpi.sh; BENCH_MPI=0
#      skips it; skipped when mpirun or the MPI build is absent);
#   5. with LLAMA_BENCH / IK_LLAMA_BENCH set, bench/sidebyside.sh (moefast
#      against those llama-bench binaries on the same files, interleaved);
#   6. a summary table. JSON and SVG output stay in build/bench/.
# Environment: BENCH_THREADS (2), BENCH_REPEAT (3: medians of 3 runs), PRICE_PAIRS (5), BENCH_AVX2 (1; 0 skips
# the AVX2 run), BENCH_MODELS (space-
# separated subset of the model names below), BENCH_NUMERICS ("fp32 q8 q8kv": fp32 = the default exact FP32
# numerics, q8 = the numerics flags +act_q8,+kv_f16, q8kv = +act_q8,+kv_q8 (docs/EXACTNESS.md); each has its
# own golden trace).
set -u
B=${1:-build/rel}
BIN=$B/moefast
MODELS=build/models
OUT=build/bench
T=${BENCH_THREADS:-2}
PAIRS=${PRICE_PAIRS:-5}
REPEAT=${BENCH_REPEAT:-3}
ALL="qwen3moe-bench-q8_0 laguna-bench-q8_0 laguna-bench-bf16-nvfp4 llama-bench-q8_0 olmoe-bench-q8_0 qwen2moe-bench-q8_0
     glm4moe-bench-q8_0 gpt-oss-bench-bf16-mxfp4 deepseek2-bench-q8_0"
SEL=${BENCH_MODELS:-$ALL}
NUMS=${BENCH_NUMERICS:-fp32 q8 q8kv}
# flags of a numerics; suffix of its trace and result files
num_flags() { case $1 in fp32) echo default ;; q8) echo "+act_q8,+kv_f16" ;; q8kv) echo "+act_q8,+kv_q8" ;; *) return 1 ;; esac; }
num_sfx() { case $1 in fp32) echo "" ;; *) echo ".$1" ;; esac; }
[ -x "$BIN" ] || { echo "bench/run.sh: $BIN is missing (run: make bench)" >&2; exit 2; }
mkdir -p "$MODELS" "$OUT"
status=0

echo "== micro-benchmarks"
for b in "$B"/bench/*; do
  [ -f "$b" ] && [ -x "$b" ] || continue
  # the studies that take a model argument: bench_batch_decode runs below on
  # the qwen3moe model; the KV studies (minutes each) by hand, docs/KV_TQ.md
  case $(basename "$b") in bench_batch_decode|bench_kv_kl|bench_kv_ab) continue ;; esac
  echo "-- $(basename "$b")"
  "$b" || { echo "bench/run.sh: $(basename "$b") failed" >&2; status=1; }
done

# gen arguments of each model
gen_args() {
  case $1 in
    qwen3moe-bench-q8_0) echo "--arch qwen3moe --preset bench --type Q8_0" ;;
    laguna-bench-q8_0) echo "--arch laguna --preset bench --type Q8_0" ;;
    laguna-bench-bf16-nvfp4) echo "--arch laguna --preset bench --type BF16 --type-experts NVFP4" ;;
    llama-bench-q8_0) echo "--arch llama --preset bench --type Q8_0" ;;
    olmoe-bench-q8_0) echo "--arch olmoe --preset bench --type Q8_0" ;;
    qwen2moe-bench-q8_0) echo "--arch qwen2moe --preset bench --type Q8_0" ;;
    glm4moe-bench-q8_0) echo "--arch glm4moe --preset bench --type Q8_0" ;;
    gpt-oss-bench-bf16-mxfp4) echo "--arch gpt-oss --preset bench --type BF16 --type-experts MXFP4" ;;
    deepseek2-bench-q8_0) echo "--arch deepseek2 --preset bench --type Q8_0" ;;
    *) return 1 ;;
  esac
}

# 512 pseudo-random prompt ids below n_vocab (a fixed LCG: the same every run)
prompt_ids() {
  awk -v n="$1" 'BEGIN { x = 12345; for (i = 0; i < 512; i++) {
    x = (x * 1103515245 + 12345) % 2147483648; printf "%s%d", (i ? "," : ""), int(x / 65536) % n } }'
}

. scripts/jget.sh

echo "== models (build/models, generated when missing)"
for m in $SEL; do
  f=$MODELS/$m.gguf
  args=$(gen_args "$m") || { echo "bench/run.sh: unknown model '$m'" >&2; status=1; continue; }
  if [ ! -f "$f" ]; then
    echo "-- generating $f ($args)"
    # shellcheck disable=SC2086
    "$BIN" gen $args -o "$f" || { echo "bench/run.sh: gen $m failed" >&2; status=1; continue; }
  fi
  # ids spread over the vocabulary ("vocab N," in `moefast info`); 1000 is
  # below every preset's vocabulary if that line ever changes
  nv=$("$BIN" info "$f" 2>/dev/null | awk '{ for (i = 1; i < NF; i++) if ($i == "vocab") {
         v = $(i + 1); sub(/,$/, "", v); if (v ~ /^[0-9]+$/) { print v; exit } } }')
  [ -n "$nv" ] || nv=1000
  for nm in $NUMS; do
    fl=$(num_flags "$nm") || { echo "bench/run.sh: unknown numerics '$nm'" >&2; status=1; continue; }
    t=$MODELS/$m$(num_sfx "$nm").trace.json
    if [ ! -f "$t" ] || [ "$t" -ot "$f" ]; then
      echo "-- recording $t (flags $fl; 512 prompt ids below $nv, 129 greedy steps)"
      "$BIN" trace record -m "$f" --flags "$fl" --tokens "$(prompt_ids "$nv")" --steps 129 -o "$t" ||
        { echo "bench/run.sh: trace record for $m ($nm) failed: benchmarking without a token check" >&2; rm -f "$t"; }
    fi
  done
done

echo "== moefast bench (-t $T, prompt 512, decode 128)"
for m in $SEL; do
  f=$MODELS/$m.gguf
  [ -f "$f" ] || continue
  for nm in $NUMS; do
    fl=$(num_flags "$nm") || continue
    sx=$(num_sfx "$nm"); t=$MODELS/$m$sx.trace.json
    tr=""; [ -f "$t" ] && tr="--trace $t"
    echo "-- $m ($nm: flags $fl)"
    # shellcheck disable=SC2086
    "$BIN" bench -m "$f" -t "$T" --flags "$fl" --repeat "$REPEAT" $tr --json >"$OUT/$m$sx.bench.json"; rc=$?
    [ $rc -eq 0 ] || { echo "bench/run.sh: bench $m ($nm) exited $rc" >&2; status=1; }
  done
done

first=""
for m in $SEL; do [ -f "$MODELS/$m.gguf" ] && { first=$m; break; }; done
avx2=""
if [ -n "$first" ] && [ "${BENCH_AVX2:-1}" != 0 ] && [ "$(printf '%s' "$NUMS" | tr ' ' '\n' | grep -cx fp32)" -gt 0 ] &&
   "$BIN" info "$MODELS/$first.gguf" 2>/dev/null | grep -q '^kernels: *avx512'; then
  avx2=$first
  t=$MODELS/$first.trace.json; tr=""; [ -f "$t" ] && tr="--trace $t"
  echo "-- $first (fp32 at the AVX2 level: MOEFAST_ISA=avx2)"
  # shellcheck disable=SC2086
  MOEFAST_ISA=avx2 "$BIN" bench -m "$MODELS/$first.gguf" -t "$T" --repeat "$REPEAT" $tr --json \
    >"$OUT/$first.avx2.bench.json"; rc=$?
  [ $rc -eq 0 ] || { echo "bench/run.sh: bench $first (avx2) exited $rc" >&2; status=1; }
fi
if [ -n "$first" ]; then
  f=$MODELS/$first.gguf; t=$MODELS/$first.trace.json
  tc="--no-token-check"; [ -f "$t" ] && tc="--trace $t"
  echo "== moefast price --noise on $first ($PAIRS pairs, -t $T)"
  # shellcheck disable=SC2086
  "$BIN" price -m "$f" --a "threads:$T" --noise --pairs "$PAIRS" $tc --svg "$OUT/noise.svg" --json \
    >"$OUT/noise.json"; rc=$?
  [ $rc -le 1 ] || { echo "bench/run.sh: price --noise exited $rc" >&2; status=1; }
fi

if [ -f "$MODELS/qwen3moe-bench-q8_0.gguf" ]; then
  echo "== batched decode steps of 1, 2, 4, 8 sequences (bench_batch_decode)"
  "$B/bench/bench_batch_decode" "$MODELS/qwen3moe-bench-q8_0.gguf" 16 64 ||
    { echo "bench/run.sh: bench_batch_decode failed" >&2; status=1; }
fi
if [ "${BENCH_ROOFLINE:-1}" != 0 ]; then
  echo "== decode against the roofline on every bench configuration (bench/roofline.sh)"
  sh bench/roofline.sh "$B" || { echo "bench/run.sh: bench/roofline.sh failed" >&2; status=1; }
fi
if [ "${BENCH_SERVE:-1}" != 0 ] && [ -f "$MODELS/qwen3moe-bench-q8_0.gguf" ]; then
  echo "== moefast serve at concurrency 1, 2, 4, 8 (bench/serve.sh)"
  sh bench/serve.sh "$BIN" "$MODELS/qwen3moe-bench-q8_0.gguf" "$OUT/serve.json" ||
    { echo "bench/run.sh: bench/serve.sh failed" >&2; status=1; }
fi

if [ "${BENCH_MPI:-1}" != 0 ] && [ -f "$MODELS/qwen3moe-bench-q8_0.gguf" ]; then
  echo "== expert parallelism over MPI, N = 1, 2, 3 ranks (bench/mpi.sh)"
  sh bench/mpi.sh "$B" "$MODELS/qwen3moe-bench-q8_0.gguf" || echo "bench/run.sh: bench/mpi.sh skipped or failed" >&2
fi

if [ -n "${LLAMA_BENCH:-}${IK_LLAMA_BENCH:-}" ]; then
  echo "== side by side with llama.cpp / ik_llama.cpp (bench/sidebyside.sh)"
  sh bench/sidebyside.sh "$B" || { echo "bench/run.sh: bench/sidebyside.sh failed" >&2; status=1; }
else
  echo "== side by side: skipped (set LLAMA_BENCH and/or IK_LLAMA_BENCH to llama-bench binaries; bench/sidebyside.sh)"
fi

echo
echo "== summary (threads $T; build/bench/*.json)"
printf "%-26s %-5s %7s %9s %9s %9s %9s %6s %7s %8s %6s %6s %7s %6s %8s %6s\n" model num "load s" "prefill/s" "decode/s" \
  "steps/s" "MB/token" "KV MB" "GB/s" "bw GB/s" "% bw" "+KV %" "ceil/s" "roof %" "peak MB" tokens
rows=""
for m in $SEL; do for nm in $NUMS; do rows="$rows $m:$nm:$m$(num_sfx "$nm")"; done; done
[ -n "$avx2" ] && rows="$rows $avx2:avx2:$avx2.avx2"
for row in $rows; do
  m=${row%%:*}; rest=${row#*:}; nm=${rest%%:*}; j=$OUT/${rest#*:}.bench.json
  [ -s "$j" ] || { printf "%-26s %-5s (no result)\n" "$m" "$nm"; continue; }
  tok=$(jget "$j" token_check.ok); [ "$tok" = true ] && tok=ok; [ "$tok" = false ] && tok=FAIL
  [ -z "$tok" ] || [ "$tok" = null ] && tok=none
  awk -v m="$m" -v nm="$nm" -v l="$(jget "$j" load_seconds)" -v p="$(jget "$j" prefill.tokens_per_second)" \
      -v d="$(jget "$j" decode.tokens_per_second)" -v s="$(jget "$j" decode.steps_tokens_per_second)" \
      -v b="$(jget "$j" decode.bytes_per_token)" -v g="$(jget "$j" decode.achieved_gb_per_second)" \
      -v w="$(jget "$j" decode.pct_of_bandwidth_limit)" -v r="$(jget "$j" peak_rss_bytes)" -v t="$tok" \
      -v bw="$(jget "$j" decode.bandwidth_gb_per_second)" -v kv="$(jget "$j" decode.kv_bytes_per_token)" \
      -v wk="$(jget "$j" decode.pct_of_bandwidth_limit_with_kv)" \
      -v ce="$(jget "$j" decode.compute_ceiling.tokens_per_second)" -v rf="$(jget "$j" decode.pct_of_roofline)" \
      'BEGIN { printf "%-26s %-5s %7.2f %9.1f %9.2f %9.2f %9.1f %6.1f %7.2f %8s %6s %6s %7s %6s %8.0f %6s\n", m, nm, l, p, d, s,
               b / 1e6, kv / 1e6, g, (bw == "null" ? "-" : sprintf("%.1f", bw)), (w == "null" ? "-" : sprintf("%.1f", w)),
               (wk == "null" || wk == "" ? "-" : sprintf("%.1f", wk)), (ce == "null" || ce == "" ? "-" : sprintf("%.0f", ce)),
               (rf == "null" || rf == "" ? "-" : sprintf("%.1f", rf)), r / 1e6, t }'
done
echo "(num: fp32 = default exact FP32 numerics, q8 = +act_q8,+kv_f16, q8kv = +act_q8,+kv_q8, avx2 = fp32 at the AVX2 kernel level;"
echo " prefill/s: prefill window tokens/s;"
echo " decode/s: decode window incl. the 512-token seed, per decoded token;"
echo " steps/s: the 128 steps alone; KV MB: KV-cache bytes a step reads (mean over the steps, not in MB/token);"
echo " ceil/s: the compute ceiling, the step's matrix products from cache (tok/s); roof %: the steps against the roofline,"
echo " each kernel's bytes at the slower of the bandwidth and its rate from cache (the same windows as % bw);"
echo " GB/s: steps/s x MB/token; +KV %: % bw counting the KV bytes too; bw GB/s and % bw: medians over the windows whose"
echo " bandwidth held steady (measured before and after within 15 %; all windows when none did), so with repeats"
echo " they may come from other windows than the steps/s median (docs/MEASUREMENT.md); tokens: trace check)"
j=$OUT/noise.json
if [ -s "$j" ]; then
  awk -v f="$first" -v n="$PAIRS" -v p="$(jget "$j" noise_floor.prefill)" -v d="$(jget "$j" noise_floor.decode)" \
      -v st="$(jget "$j" noise_floor.steps)" \
      -v s="$(jget "$j" noise_floor.score)" -v v="$(jget "$j" verdict)" -v o="$OUT/noise.svg" \
      'BEGIN { gsub(/"/, "", v); printf "noise floor, %s A against A, %d pairs (95%% interval half-width of the speedup): " \
               "prefill +-%.3f, decode +-%.3f, steps +-%.3f (informational), score +-%.3f; verdict %s (plot: %s)\n",
               f, n, p, d, st, s, v, o }'
fi
exit $status
