#!/bin/sh
# bench/sidebyside.sh BUILD_DIR — moefast against llama.cpp's and
# ik_llama.cpp's llama-bench on the same files, interleaved (timing only;
# run by bench/run.sh when LLAMA_BENCH or IK_LLAMA_BENCH is set).
#
# The other engines are not built here: give the path of each one's
# llama-bench binary, built by you from your own source tree (CPU build):
#   LLAMA_BENCH=/path/to/llama.cpp/build/bin/llama-bench
#   IK_LLAMA_BENCH=/path/to/ik_llama.cpp/build/bin/llama-bench
# An engine whose variable is unset or not executable is skipped with a line
# saying so. Per file and round, in this order: moefast fp32 (the default
# exact numerics), moefast q8 (+act_q8,+kv_f16), llama.cpp, ik_llama.cpp —
# so a drift of the machine's speed during the run hits every engine alike.
# Prefill: 512 prompt tokens from an empty cache (llama-bench -p 512).
# Decode: 128 tokens after a 512-token prompt, the decode steps alone
# (moefast bench's steps/s; llama-bench -n 128 -d 512, or ik's -gp 512,128).
# SIDE_WARMUP rounds (1) are run and dropped (page cache, frequency), then
# SIDE_ROUNDS (5) rounds; the table gives the median and the spread (min..max)
# per engine, file and window, and the ratios of the medians.
# Environment: BENCH_THREADS (2), SIDE_MODELS (names below), SIDE_ROUNDS,
# SIDE_WARMUP, LLAMA_ARGS / IK_ARGS (extra llama-bench arguments, e.g.
# IK_ARGS="-rtr 1"; the defaults of each engine otherwise).
# Output: build/bench/sidebyside.tsv (every measurement) and
# build/bench/sidebyside.md (the table, with the CPU's name).
set -u
B=${1:-build/rel}
BIN=$B/moefast
MODELS=build/models
OUT=build/bench
T=${BENCH_THREADS:-2}
ROUNDS=${SIDE_ROUNDS:-5}
WARMUP=${SIDE_WARMUP:-1}
ALL="qwen3moe-bench-q8_0 qwen3moe-bench-q4_k_m qwen3moe-bench-q5_k_m qwen3moe-bench-q3_k_m qwen3moe-bench-iq4_xs
     laguna-bench-q8_0 laguna-bench-q4_k_m laguna-bench-q5_k_m laguna-bench-q3_k_m laguna-bench-iq4_xs
     laguna-bench-bf16-nvfp4"
SEL=${SIDE_MODELS:-$ALL}
[ -x "$BIN" ] || { echo "bench/sidebyside.sh: $BIN is missing (run: make bench)" >&2; exit 2; }
mkdir -p "$MODELS" "$OUT"

engines="fp32 q8"
for e in llama ik; do
  if [ "$e" = llama ]; then p=${LLAMA_BENCH:-}; nm="llama.cpp (LLAMA_BENCH)"; else p=${IK_LLAMA_BENCH:-}; nm="ik_llama.cpp (IK_LLAMA_BENCH)"; fi
  if [ -z "$p" ]; then echo "bench/sidebyside.sh: $nm not set: skipped"
  elif [ ! -x "$p" ]; then echo "bench/sidebyside.sh: $nm=$p is not an executable: skipped"
  else engines="$engines $e"; fi
done

. bench/models.sh   # make_model

# the first "avg_ts" (mean tokens/s of its one repetition) of llama-bench's
# JSON output (-o json; CSV would need a real parser: fields hold commas)
avg_ts() {
  sed -n 's/^ *"avg_ts": *\([0-9.eE+-]*\),*$/\1/p' | head -n 1
}

# one_run ENGINE FILE: appends "engine file window tok/s" lines to the TSV
one_run() {
  e=$1; f=$2; m=$(basename "$f" .gguf)
  case $e in
    fp32|q8)
      fl=default; [ "$e" = q8 ] && fl="+act_q8,+kv_f16"
      j=$OUT/side.$$.json
      # --no-bandwidth: llama-bench measures no bandwidth around its runs either
      if "$BIN" bench -m "$f" -t "$T" --flags "$fl" --repeat 1 --no-bandwidth --json >"$j" 2>"$j.err"; then
        echo "$e $m prefill $(jget "$j" prefill.tokens_per_second)" >>"$TSV"
        echo "$e $m decode $(jget "$j" decode.steps_tokens_per_second)" >>"$TSV"
      else
        echo "bench/sidebyside.sh: moefast $e on $m: $(tail -n 1 "$j.err")" >&2
      fi
      rm -f "$j" "$j.err" ;;
    llama|ik)
      if [ "$e" = llama ]; then lb=$LLAMA_BENCH; extra=${LLAMA_ARGS:-}; else lb=$IK_LLAMA_BENCH; extra=${IK_ARGS:-}; fi
      c=$OUT/side.$$.out
      # shellcheck disable=SC2086
      if "$lb" -m "$f" -t "$T" -p 512 -n 0 -r 1 -o json $extra >"$c" 2>"$c.err"; then
        echo "$e $m prefill $(avg_ts <"$c")" >>"$TSV"
      else echo "bench/sidebyside.sh: $e prefill on $m: $(grep -i error "$c.err" | tail -n 1)" >&2; fi
      if "$lb" --help 2>&1 | grep -q -- '-d, --n-depth'; then win="-p 0 -n 128 -d 512"; else win="-p 0 -n 0 -gp 512,128"; fi
      # shellcheck disable=SC2086
      if "$lb" -m "$f" -t "$T" $win -r 1 -o json $extra >"$c" 2>"$c.err"; then
        echo "$e $m decode $(avg_ts <"$c")" >>"$TSV"
      else echo "bench/sidebyside.sh: $e decode on $m: $(grep -i error "$c.err" | tail -n 1)" >&2; fi
      rm -f "$c" "$c.err" ;;
  esac
}

. scripts/jget.sh
# shellcheck disable=SC2086
files=$(model_files $SEL)
TSV=$OUT/sidebyside.tsv
: >"$TSV"
r=0
while [ $r -lt $((WARMUP + ROUNDS)) ]; do
  [ $r -lt "$WARMUP" ] && tag="warm-up round" || tag="round $((r - WARMUP + 1)) of $ROUNDS"
  echo "== $tag"
  keep=$TSV; [ $r -lt "$WARMUP" ] && TSV=/dev/null
  for f in $files; do for e in $engines; do one_run "$e" "$f"; done; done
  TSV=$keep
  r=$((r + 1))
done

cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
{
  echo "# moefast side by side — $cpu, $T threads, $(date -u +%Y-%m-%d)"
  echo
  echo "Tokens per second: median (min..max) over $ROUNDS interleaved rounds after $WARMUP warm-up round(s)."
  echo "Prefill: 512 tokens from an empty cache. Decode: 128 steps after a 512-token prompt."
  echo "fp32 = moefast's default exact numerics; q8 = moefast +act_q8,+kv_f16. Ratios: moefast fp32 / other engine (q8 / other in brackets)."
  echo
  echo "| file | window | moefast fp32 | moefast q8 | llama.cpp | ik_llama.cpp | ÷ llama.cpp | ÷ ik_llama.cpp |"
  echo "|---|---|---|---|---|---|---|---|"
  for f in $files; do
    m=$(basename "$f" .gguf)
    for w in prefill decode; do
      awk -v m="$m" -v w="$w" '
        function med(e,   n, i, j, t, a) { n = cnt[e]; if (!n) return ""
          for (i = 1; i <= n; i++) a[i] = v[e, i]
          for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
          lo[e] = a[1]; hi[e] = a[n]
          return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        function cell(e,   x) { x = md[e]; return x == "" ? "–" : sprintf("%.1f (%.1f..%.1f)", x, lo[e], hi[e]) }
        function ratio(o,   s) { if (md[o] == "" || md["fp32"] == "") return "–"
          s = sprintf("%.2f×", md["fp32"] / md[o]); if (md["q8"] != "") s = s sprintf(" (%.2f×)", md["q8"] / md[o]); return s }
        $2 == m && $3 == w && $4 ~ /^[0-9.]+$/ { cnt[$1]++; v[$1, cnt[$1]] = $4 + 0 }
        END { split("fp32 q8 llama ik", es, " "); for (i = 1; i <= 4; i++) md[es[i]] = med(es[i])
              printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", m, w, cell("fp32"), cell("q8"), cell("llama"), cell("ik"),
                     ratio("llama"), ratio("ik") }' "$TSV"
    done
  done
} >"$OUT/sidebyside.md"
cat "$OUT/sidebyside.md"
