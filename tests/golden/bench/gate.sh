#!/bin/sh
# gate.sh — gates the bench-preset golden traces (recorded with --flags=none)
# against the models `make bench` generates in build/models/. Too slow for the
# test suite (1.2–1.9 GB models); meant to be called from bench/run.sh.
# Usage: sh tests/golden/bench/gate.sh [BIN] [THREADS]   exit 0 pass, 1 divergence, 2 error
BIN=${1:-build/rel/moefast}
T=${2:-${BENCH_THREADS:-2}}
status=0
for tr in tests/golden/bench/*.trace.json; do
  m=build/models/$(basename "$tr" .trace.json).gguf
  if [ ! -f "$m" ]; then
    echo "golden gate: $m is missing (make bench generates it)" >&2
    status=2
    continue
  fi
  echo "-- gate $(basename "$tr") -t $T"
  "$BIN" gate -m "$m" "$tr" -t "$T"
  rc=$?
  [ $rc -gt $status ] && status=$rc
done
exit $status
