#!/bin/sh
# bench/mpi.sh BUILD_DIR [MODEL...] — expert parallelism on one machine
# (docs/SCALE.md): for N = 1, 2, 3 ranks (N = 1: no mpirun), `moefast bench`'s
# decode window with the phase profile, and per run: the decode step, the
# part of it rank 0 waits for the other shards' rows (phase shard_wait), the
# bytes rank 0 sends and receives per decoded token (two `run`s differing in
# their decode length: the difference over the extra 32 tokens) and each
# rank's peak RSS. Timing only,
# never a test. The speed on one machine is not the point (the ranks share
# its cores and memory): the overhead per step and the memory per rank are.
# Environment: MPI_THREADS (1 per rank), MPI_PROMPT (128), MPI_STEPS (64),
# MPI_RANKS ("1 2 3"), MPI_ROUNDS (3: interleaved, medians).
set -u
B=${1:-build/rel}
shift 2>/dev/null
BIN=$B/moefast
T=${MPI_THREADS:-1}
P=${MPI_PROMPT:-128}
D=${MPI_STEPS:-64}
RANKS=${MPI_RANKS:-1 2 3}
ROUNDS=${MPI_ROUNDS:-3}
MODELS=${*:-build/models/qwen3moe-bench-q8_0.gguf}
command -v mpirun >/dev/null 2>&1 || { echo "bench/mpi.sh: mpirun not found (Debian: openmpi-bin)" >&2; exit 2; }
"$BIN" --help 2>&1 | grep -q "not in this build" && { echo "bench/mpi.sh: $BIN built without MPI" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OUT=$(mktemp -d /tmp/moefast-bench-mpi.XXXXXX) || exit 2
trap 'rm -rf "$OUT"' EXIT
echo "cpu: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $(nproc) cores; $T thread(s) per rank"
for f in $MODELS; do
  [ -r "$f" ] || { echo "bench/mpi.sh: $f not found (make bench generates it)" >&2; continue; }
  for r in $(seq 1 "$ROUNDS"); do
    for n in $RANKS; do
      pre=""; [ "$n" -gt 1 ] && pre="mpirun --oversubscribe --bind-to none -np $n"
      MOEFAST_MPI_STATS=1 $pre "$BIN" bench -m "$f" -t "$T" --window decode --prompt-len "$P" --decode-steps "$D" \
        --phases --no-bandwidth >"$OUT/$n.$r" 2>&1 || echo "bench/mpi.sh: N=$n round $r failed" >&2
    done
  done
  # bytes per decoded token: two greedy runs that differ only in their
  # decode length; the difference of rank 0's totals over the extra tokens
  for n in $RANKS; do
    [ "$n" -gt 1 ] || continue
    for k in 8 40; do
      MOEFAST_MPI_STATS=1 mpirun --oversubscribe --bind-to none -np "$n" "$BIN" run -m "$f" -t "$T" \
        --tokens 1,2,3,4,5,6,7,8 -n $k >/dev/null 2>"$OUT/bytes.$n.$k" || echo "bench/mpi.sh: bytes N=$n failed" >&2
    done
  done
  echo "== $f: decode window ($P seed + $D steps), medians of $ROUNDS interleaved rounds (min..max)"
  printf '%-3s %22s %22s %16s %s\n' N "step ms" "shard_wait ms" "bytes/token" "peak RSS MB per rank"
  for n in $RANKS; do
    python3 - "$OUT" "$n" "$ROUNDS" "$P" "$D" <<'PY'
import re, sys, statistics as st
out, n, rounds, P, D = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
step, wait, byt, rss = [], [], [], {}
for r in range(1, rounds + 1):
    t = open(f"{out}/{n}.{r}").read()
    m = re.search(r"decode steps alone\s+\S+ tok/s\s+(\S+) ms/tok", t)
    if m: step.append(float(m.group(1)))
    m = re.search(r"^\s+shard_wait\s+\S+\s+(\S+)", t, re.M)
    wait.append(float(m.group(1)) if m else 0.0)
    if r == 1 and n > 1:
        tot = []
        for k in (8, 40):
            m = re.search(r"mpi: rank 0: \d+ exchanges, (\d+) bytes sent, (\d+) received", open(f"{out}/bytes.{n}.{k}").read())
            tot.append(int(m.group(1)) + int(m.group(2)) if m else 0)
        byt.append((tot[1] - tot[0]) / 32)
    for k, v in re.findall(r"mpi: rank (\d+):.*\(peak ([\d.]+)\)", t):
        rss.setdefault(int(k), []).append(float(v))
    if n == 1:
        m = re.search(r"peak RSS \(VmHWM\)\s+([\d.]+) MB", t)
        if m: rss.setdefault(0, []).append(float(m.group(1)))
fmt = lambda v: f"{st.median(v):.3f} ({min(v):.3f}..{max(v):.3f})" if v else "-"
print(f"{n:<3} {fmt(step):>22} {fmt(wait):>22} {(st.median(byt) if byt else 0):>16.0f} " +
      " ".join(f"r{k}:{st.median(v):.0f}" for k, v in sorted(rss.items())))
PY
  done
done
