#!/bin/sh
# kv_mem.sh — the KV memory table of docs/KV_TQ.md (prints; timing-free, never a test):
#   sh bench/kv_mem.sh MODEL "4096 16384" ["default +kv_q8 +kv_tq +kv_tq_small"] [BUILD_DIR]
# For each context N and KV format: bench/kv_mem prefills N tokens into a
# session of n_ctx N (one process each) and reports VmHWM; the table sets the
# peak RSS above the FP32 cache's against the formula (moefast info's bytes
# per token x N), so transient copies would show as a surplus.
set -u
M=${1:?usage: kv_mem.sh MODEL \"N ...\" [\"FLAGS ...\"] [BUILD_DIR]}
NS=${2:-4096}
FL=${3:-default +kv_q8 +kv_tq +kv_tq_small}
B=${4:-build/rel}
bpt_line=$("$B/moefast" info -m "$M" 2>/dev/null | grep 'KV cache bytes per token')
[ -n "$bpt_line" ] || { echo "kv_mem.sh: no 'KV cache bytes per token' from moefast info -m $M" >&2; exit 2; }
# bytes per token of a flag spec, from that line
bpt() {
  case $1 in default) n=FP32 ;; +kv_f16) n=kv_f16 ;; +kv_q8) n=kv_q8 ;; +kv_tq) n=kv_tq ;; +kv_tq_small) n=kv_tq_small ;;
    *) echo 0; return ;; esac
  echo "$bpt_line" | tr ',' '\n' | sed -n "s/.* $n \([0-9]*\)$/\1/p" | head -n 1
}
echo "$bpt_line"
printf '| context | cache        | KV bytes (formula) | peak RSS | RSS - FP32 run | formula - FP32 | surplus |\n'
printf '|---------|--------------|--------------------|----------|----------------|----------------|---------|\n'
for n in $NS; do
  base=""
  for f in $FL; do
    out=$("$B/bench/kv_mem" "$M" "$f" "$n" 2>&1) || { echo "kv_mem $f $n: $out" >&2; continue; }
    hwm=$(echo "$out" | sed -n 's/.*VmHWM MB \([0-9.]*\).*/\1/p')
    b=$(bpt "$f")
    kv=$(awk -v b="$b" -v n="$n" 'BEGIN { printf "%.1f", b * n / 1e6 }')
    [ "$f" = default ] && { base=$hwm; basekv=$kv; }
    if [ -n "$base" ]; then
      d=$(awk -v a="$hwm" -v c="$base" 'BEGIN { printf "%+.1f", a - c }')
      e=$(awk -v a="$kv" -v c="$basekv" 'BEGIN { printf "%+.1f", a - c }')
      s=$(awk -v a="$hwm" -v c="$base" -v x="$kv" -v y="$basekv" 'BEGIN { printf "%+.1f", (a - c) - (x - y) }')
    else d=-; e=-; s=-; fi
    name=$([ "$f" = default ] && echo FP32 || echo "${f#+}")
    printf '| %7s | %-12s | %15s MB | %5s MB | %11s MB | %11s MB | %4s MB |\n' "$n" "$name" "$kv" "$hwm" "$d" "$e" "$s"
  done
done
