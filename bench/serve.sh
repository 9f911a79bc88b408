#!/bin/sh
# bench/serve.sh BIN MODEL OUT_JSON — the `moefast serve` benchmark (run by
# bench/run.sh; timing only). One server (--slots 8 --profile, BENCH_THREADS
# threads) on 127.0.0.1; for concurrency 1, 2, 4, 8 the load generator
# (bench/serve/load.mjs: streamed completions, distinct prompts, greedy)
# measures aggregate tokens/s, time to first token p50/p99 and per-request
# decode tokens/s; /metrics before and after each level gives the decode-only
# steps' time, tokens (their aggregate decode tokens/s, the prefills left out)
# and weight bytes (shared matrices once, the union of the
# selected experts once per step), compared with the read bandwidth the
# server measured at start; the server's RSS after each level, then over
# SERVE_SUSTAIN (3) more rounds at 8 (flat or not). Needs node and the openai
# package of tests/serve (installed by `make test`; npm ci here otherwise).
# Environment: BENCH_THREADS (2), SERVE_N (requests per client: 2), SERVE_MAXTOK (64).
set -u
BIN=$1; MODEL=$2; OUTJ=$3
T=${BENCH_THREADS:-2}; N=${SERVE_N:-2}; MAXTOK=${SERVE_MAXTOK:-64}; SUSTAIN=${SERVE_SUSTAIN:-3}
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { echo "bench/serve.sh: skipped: node/npm not installed"; exit 0; }
if [ ! -f tests/serve/node_modules/openai/package.json ] &&
   ! (cd tests/serve && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1); then
  echo "bench/serve.sh: skipped: npm ci in tests/serve failed (registry unreachable?)"; exit 0
fi
LOG=$(mktemp /tmp/moefast-bench-serve.XXXXXX) || exit 2
"$BIN" serve -m "$MODEL" --port 0 --slots 8 --profile -t "$T" --ctx 512 2>"$LOG" &
SPID=$!
trap 'kill "$SPID" 2>/dev/null; rm -f "$LOG"' EXIT
PORT=""
for _ in $(seq 1 600); do
  PORT=$(sed -n 's/^moefast serve: listening on http:\/\/127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$LOG")
  [ -n "$PORT" ] && break
  kill -0 "$SPID" 2>/dev/null || break
  sleep 0.1
done
[ -n "$PORT" ] || { echo "bench/serve.sh: the server did not start: $(cat "$LOG")" >&2; exit 1; }
URL=http://127.0.0.1:$PORT
NAME=$(basename "$MODEL" .gguf)
# metric NAME: its value now
metric() { curl -s "$URL/metrics" | awk -v n="$1" '$1 == n { print $2 }'; }
rss_mb() { awk '/^VmRSS:/ { printf "%.0f", $2 / 1024 }' "/proc/$SPID/status"; }
snap() { echo "$(metric moefast_decode_step_seconds_sum) $(metric moefast_decode_step_seconds_count) $(metric moefast_decode_step_tokens_total) $(metric moefast_decode_step_weight_bytes_total)"; }
BW=$(metric moefast_read_bandwidth_bytes_per_second)
# one level: load.mjs's JSON with the server's figures added
level() { # concurrency seed
  s0=$(snap)
  j=$(BASE=$URL/v1 MODEL=$NAME C=$1 N=$N MAXTOK=$MAXTOK SEED=$2 node bench/serve/load.mjs) || return 1
  s1=$(snap)
  echo "$j" | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
a, b = [list(map(float, s.split())) for s in sys.argv[1:3]]
sec, steps, tok, wb = (b[i] - a[i] for i in range(4))
bw = float(sys.argv[3])
j.update(decode_steps=int(steps), decode_step_tokens=int(tok), decode_step_seconds=sec,
         decode_weight_gb_per_second=wb / sec / 1e9 if sec else None,
         decode_weight_mb_per_step=wb / steps / 1e6 if steps else None,
         pct_of_bandwidth=100 * wb / sec / bw if sec and bw else None,
         rss_mb=int(sys.argv[4]))
print(json.dumps(j))' "$s0" "$s1" "$BW" "$(rss_mb)"
}
echo "-- serve: $NAME, $T threads, 8 slots, $N requests per client, $MAXTOK tokens each; read bandwidth $(awk -v b="$BW" 'BEGIN { printf "%.1f", b / 1e9 }') GB/s"
: >"$OUTJ.tmp"
for c in 1 2 4 8; do
  level "$c" "$c" >>"$OUTJ.tmp" || { echo "bench/serve.sh: load at $c failed" >&2; exit 1; }
done
rss=""
for r in $(seq 1 "$SUSTAIN"); do
  level 8 "$((100 + r))" >/dev/null || break
  rss="$rss $(rss_mb)"
done
python3 - "$OUTJ.tmp" "$OUTJ" "$BW" "$rss" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rss = [int(x) for x in sys.argv[4].split()]
base = rows[0]["tokens_per_second"]
# the decode-only steps' aggregate rate (tokens / seconds of the steps that
# carried no prompt chunk): decode throughput without the prefills
for r in rows:
    r["decode_tokens_per_second"] = r["decode_step_tokens"] / r["decode_step_seconds"] if r["decode_step_seconds"] else None
dbase = rows[0]["decode_tokens_per_second"]
print(f"{'conc':>4} {'tok/s':>7} {'x1':>5} {'dec tok/s':>9} {'x1':>5} {'TTFT p50':>9} {'TTFT p99':>9} {'req tok/s':>9} {'MB/step':>8} {'GB/s':>6} {'% bw':>5} {'RSS MB':>7}")
for r in rows:
    f = lambda v, s: (s % v) if v is not None else "-"
    d = r["decode_tokens_per_second"]
    print(f"{r['concurrency']:>4} {r['tokens_per_second']:7.1f} {r['tokens_per_second'] / base:5.2f} "
          f"{f(d, '%9.1f')} {f(d / dbase if d and dbase else None, '%5.2f')} {r['ttft_p50']:8.3f}s {r['ttft_p99']:8.3f}s "
          f"{f(r['request_decode_tps_p50'], '%9.1f')} {f(r['decode_weight_mb_per_step'], '%8.1f')} {f(r['decode_weight_gb_per_second'], '%6.1f')} "
          f"{f(r['pct_of_bandwidth'], '%5.0f')} {r['rss_mb']:7d}")
print(f"RSS after {len(rss)} more rounds at 8: {' '.join(map(str, rss))} MB (after the levels: {rows[-1]['rss_mb']} MB)")
json.dump({"levels": rows, "read_bandwidth_bytes_per_second": float(sys.argv[3]), "rss_sustained_mb": rss}, open(sys.argv[2], "w"), indent=1)
PY
rm -f "$OUTJ.tmp"
