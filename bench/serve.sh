#!/bin/sh
# bench/serve.sh BIN MODEL OUT_JSON — the `moefast serve` benchmark (run by
# bench/run.sh; timing only). One server (--slots 8 --profile, BENCH_THREADS
# threads) on 127.0.0.1; the load generator (bench/serve/load.mjs: streamed
# completions, distinct prompts, greedy) at concurrency 1, 2, 4, 8.
#
# Paired and interleaved: after an untimed warm-up level (8 clients: the
# weights' and KV caches' pages touched), SERVE_ROUNDS rounds each run the four
# levels in an order rotated per round, so no level always runs first or on a
# host in the same state; every ratio is taken against concurrency 1 of the
# same round, and the table gives the median over rounds with the min..max.
# Per level:
#   - aggregate tokens/s (load.mjs: tokens / wall, prompts' prefill included),
#     time to first token p50/p99, per-request decode tokens/s;
#   - from /metrics before and after: the decode-only steps of exactly c tokens
#     (moefast_decode_step_by_tokens_*): their aggregate decode tokens/s
#     (c x steps / seconds) — the issue's "aggregate decode throughput at c
#     concurrent requests" without the steps of fewer (staggered arrivals and
#     ends) or the prefill chunks — and their weight bytes per step (shared
#     matrices once, the union of the selected experts) against the read
#     bandwidth measured right before and right after the level (bench/membw,
#     a process of its own, while the server waits: the mean of the two, as
#     `bench` sets each decode window against its own; the level is "steady"
#     when they agree within 15 %). Not the server's reading at start: this
#     VM's bandwidth changes state within minutes, and one quiet reading
#     before the load stood for none of the levels;
#   - the server's RSS, and the load generator's CPU seconds (it shares the
#     machine's cores with the server: said, not hidden).
# Then SERVE_SUSTAIN (3) more levels at 8: RSS flat or not. Needs node and the
# openai package of tests/serve (installed by `make test`; npm ci here
# otherwise). Environment: BENCH_THREADS (2), SERVE_ROUNDS (3), SERVE_N
# (requests per client: 2), SERVE_MAXTOK (64), SERVE_SUSTAIN (3), SERVE_FLAGS
# (the server's --flags; default: none given, the default numerics).
set -u
BIN=$1; MODEL=$2; OUTJ=$3
T=${BENCH_THREADS:-2}; N=${SERVE_N:-2}; MAXTOK=${SERVE_MAXTOK:-64}; SUSTAIN=${SERVE_SUSTAIN:-3}; ROUNDS=${SERVE_ROUNDS:-3}
FLAGS=${SERVE_FLAGS:-}
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { echo "bench/serve.sh: skipped: node/npm not installed"; exit 0; }
if [ ! -f tests/serve/node_modules/openai/package.json ] &&
   ! (cd tests/serve && npm ci --no-audit --no-fund --loglevel=error >/dev/null 2>&1); then
  echo "bench/serve.sh: skipped: npm ci in tests/serve failed (registry unreachable?)"; exit 0
fi
MEMBW=$(dirname "$BIN")/bench/membw
[ -x "$MEMBW" ] || { echo "bench/serve.sh: $MEMBW not built (make MODE=rel $MEMBW)" >&2; exit 1; }
W=$(mktemp -d /tmp/moefast-bench-serve.XXXXXX) || exit 2
"$BIN" serve -m "$MODEL" --port 0 --slots 8 --profile -t "$T" --ctx 512 ${FLAGS:+--flags "$FLAGS"} 2>"$W/log" &
SPID=$!
trap 'kill "$SPID" 2>/dev/null; rm -rf "$W"' EXIT
PORT=""
for _ in $(seq 1 600); do
  PORT=$(sed -n 's/^moefast serve: listening on http:\/\/127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$W/log")
  [ -n "$PORT" ] && break
  kill -0 "$SPID" 2>/dev/null || break
  sleep 0.1
done
[ -n "$PORT" ] || { echo "bench/serve.sh: the server did not start: $(cat "$W/log")" >&2; exit 1; }
URL=http://127.0.0.1:$PORT
NAME=$(basename "$MODEL" .gguf)
rss_mb() { awk '/^VmRSS:/ { printf "%.0f", $2 / 1024 }' "/proc/$SPID/status"; }
# one level: "round concurrency bw0 bw1" + load.mjs's JSON + the RSS, and
# /metrics before and after in $W/m.K.0 / $W/m.K.1 (K the level's number);
# bw0 / bw1 the read bandwidth (GB/s) right before and after, 0 if it failed
K=0
level() { # round concurrency seed
  K=$((K + 1))
  b0=$("$MEMBW" "$T" 2>/dev/null) || b0=0
  curl -s "$URL/metrics" >"$W/m.$K.0"
  j=$(BASE=$URL/v1 MODEL=$NAME C=$2 N=$N MAXTOK=$MAXTOK SEED=$3 node bench/serve/load.mjs) || return 1
  curl -s "$URL/metrics" >"$W/m.$K.1"
  b1=$("$MEMBW" "$T" 2>/dev/null) || b1=0
  echo "$K $1 $2 $b0 $b1 $(rss_mb) $j" >>"$W/levels"
}
: >"$W/levels"
BW=$(curl -s "$URL/metrics" | awk '$1 == "moefast_read_bandwidth_bytes_per_second" { print $2 }')
echo "-- serve: $NAME, $T threads, 8 slots, $N requests per client, $MAXTOK tokens each, $ROUNDS rounds; read bandwidth $(awk -v b="$BW" 'BEGIN { printf "%.1f", b / 1e9 }') GB/s"
level warmup 8 999 || { echo "bench/serve.sh: the warm-up level failed" >&2; exit 1; }
for r in $(seq 0 $((ROUNDS - 1))); do
  for i in 0 1 2 3; do
    c=$(echo "1 2 4 8" | cut -d' ' -f$(( (i + r) % 4 + 1 )))
    level "$r" "$c" "$((r * 10 + c))" || { echo "bench/serve.sh: load at $c failed" >&2; exit 1; }
  done
done
for r in $(seq 1 "$SUSTAIN"); do level sustain 8 "$((100 + r))" || break; done
python3 - "$W" "$OUTJ" "$BW" <<'PY'
import json, re, statistics, sys
W, outj, bw = sys.argv[1], sys.argv[2], float(sys.argv[3] or 0)
def metrics(path):
    m = {}
    for l in open(path):
        if l.strip() and not l.startswith("#"):
            k, v = l.rsplit(" ", 1); m[k] = float(v)
    return m
levels = []
for l in open(f"{W}/levels"):
    k, rnd, c, b0, b1, rss, j = l.split(" ", 6)
    c = int(c); j = json.loads(j); b0, b1 = float(b0), float(b1)
    # the level's bandwidth: tools/stats.h's stats_bw_windows, in Python
    ok = [x for x in (b0, b1) if x > 0]
    lbw = 1e9 * sum(ok) / len(ok) if ok else 0.0
    steady = len(ok) == 2 and max(b0, b1) / min(b0, b1) <= 1.15
    a, b = metrics(f"{W}/m.{k}.0"), metrics(f"{W}/m.{k}.1")
    d = lambda name: b.get(name, 0.0) - a.get(name, 0.0)
    lab = f'{{tokens="{c}"}}'
    steps = d("moefast_decode_step_by_tokens_seconds_count" + lab)
    sec = d("moefast_decode_step_by_tokens_seconds_sum" + lab)
    wb = d("moefast_decode_step_by_tokens_weight_bytes_total" + lab)
    j.update(round=rnd, rss_mb=int(rss), bw_before_gbps=b0, bw_after_gbps=b1, bw_gbps=lbw / 1e9, bw_steady=steady,
             steps_at_c=int(steps), seconds_at_c=sec,
             decode_tps_at_c=c * steps / sec if sec else None,
             mb_per_step_at_c=wb / steps / 1e6 if steps else None,
             gbps_at_c=wb / sec / 1e9 if sec else None,
             pct_bw_at_c=100 * wb / sec / lbw if sec and lbw else None,
             pct_start_bw_at_c=100 * wb / sec / bw if sec and bw else None,
             decode_only_tps=d("moefast_decode_step_tokens_total") / d("moefast_decode_step_seconds_sum")
                 if d("moefast_decode_step_seconds_sum") else None)
    levels.append(j)
timed = [l for l in levels if l["round"] not in ("warmup", "sustain")]
rounds = sorted({l["round"] for l in timed})
# per round, each level's ratios against concurrency 1 of that round
for l in timed:
    one = next(x for x in timed if x["round"] == l["round"] and x["concurrency"] == 1)
    l["x1_tps"] = l["tokens_per_second"] / one["tokens_per_second"]
    l["x1_decode_at_c"] = l["decode_tps_at_c"] / one["decode_tps_at_c"] if l["decode_tps_at_c"] and one["decode_tps_at_c"] else None
def med(v):
    v = [x for x in v if x is not None]
    return (statistics.median(v), min(v), max(v)) if v else None
def f(t, fmt):
    return (fmt % t[0]) if t is not None else "-".rjust(len(fmt % 0.0))
def fs(t, fmt):
    return "-" if t is None else f"{fmt % t[0]} ({fmt % t[1]}..{fmt % t[2]})"
print(f"median over {len(rounds)} rounds (min..max); 'at c': the decode-only steps of exactly c requests;")
print("'bw': the read bandwidth around the level (before/after mean), '% bw' of it over the steady levels (n of them)")
print(f"{'conc':>4} {'tok/s':>6} {'x c=1':>18} {'dec tok/s at c':>14} {'x c=1':>18} {'TTFT p50':>8} {'p99':>7} {'req tok/s':>9} {'MB/step':>7} {'GB/s':>5} {'bw':>5} {'% bw':>9} {'RSS MB':>6} {'client cpu s':>12}")
summary = []
for c in (1, 2, 4, 8):
    L = [l for l in timed if l["concurrency"] == c]
    s = {k: med([l[k] for l in L]) for k in ("tokens_per_second", "x1_tps", "decode_tps_at_c", "x1_decode_at_c", "ttft_p50", "ttft_p99",
                                             "request_decode_tps_p50", "mb_per_step_at_c", "gbps_at_c", "bw_gbps", "rss_mb", "client_cpu_seconds",
                                             "pct_start_bw_at_c")}
    # the share of the bandwidth: over the levels whose two readings agreed, or every level if none did
    St = [l for l in L if l["bw_steady"]]
    s["pct_bw_at_c"] = med([l["pct_bw_at_c"] for l in (St or L)])
    s["steady_levels"] = len(St)
    summary.append(dict(concurrency=c, **s))
    print(f"{c:>4} {f(s['tokens_per_second'], '%6.1f')} {fs(s['x1_tps'], '%.2f'):>18} {f(s['decode_tps_at_c'], '%14.1f')} {fs(s['x1_decode_at_c'], '%.2f'):>18} "
          f"{f(s['ttft_p50'], '%7.2fs')} {f(s['ttft_p99'], '%6.2fs')} {f(s['request_decode_tps_p50'], '%9.1f')} {f(s['mb_per_step_at_c'], '%7.1f')} "
          f"{f(s['gbps_at_c'], '%5.1f')} {f(s['bw_gbps'], '%5.1f')} {f(s['pct_bw_at_c'], '%4.0f'):>4} ({s['steady_levels']}/{len(L)}) {f(s['rss_mb'], '%6.0f')} {f(s['client_cpu_seconds'], '%12.1f')}")
rss = [l["rss_mb"] for l in levels if l["round"] == "sustain"]
print(f"RSS after the timed levels: {timed[-1]['rss_mb']} MB; after {len(rss)} more levels at 8: {' '.join(map(str, rss))} MB")
json.dump({"levels": levels, "summary": summary, "read_bandwidth_bytes_per_second": bw, "rss_sustained_mb": rss}, open(outj, "w"), indent=1)
PY
