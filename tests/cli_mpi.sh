#!/bin/sh
# cli_mpi.sh — `mpirun -np N moefast ...` (tools/mpi.c, docs/SCALE.md): the
# experts sharded over N ranks give the same tokens and logits as one
# process (golden traces byte-identical: tokens and top-8 logits per step),
# on two architectures, two weight formats and act_q8, N = 2 and 3 (3 does
# not divide the 8 experts; oversubscribed on a small machine), threads per
# rank, batches and the server; and the faults end cleanly: a rank killed
# mid-run, a rank that cannot load its shard, a rank with another file, a
# command that does not run over MPI. Skips, saying why, when the binary was
# built without MPI or mpirun is absent.
set -u
BIN=${MOEFAST_BIN:-build/asan/moefast}
REL=${MOEFAST_BIN_REL:-build/rel/moefast}
[ -x "$REL" ] || REL=$BIN
command -v mpirun >/dev/null 2>&1 || { echo "skip: mpirun not found (Debian: openmpi-bin)" >&2; exit 0; }
"$REL" --help 2>&1 | grep -q "not in this build" && { echo "skip: $REL built without MPI (libopenmpi-dev absent at build time)" >&2; exit 0; }
T=$(mktemp -d /tmp/moefast-cli-mpi.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
nfail=0
fail() { echo "FAIL: $*"; nfail=$((nfail + 1)); }
# CI runs as root: Open MPI refuses that unless told; the ranks share this
# machine's cores (--oversubscribe), unbound; LeakSanitizer would report Open
# MPI's own allocations, so only memory errors are checked under MPI.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
MPI="mpirun --oversubscribe --bind-to none -np"

"$REL" gen --arch qwen3moe --preset tiny --type Q8_0 -o "$T/q8.gguf" >/dev/null || { echo "gen failed"; exit 1; }
"$REL" gen --arch qwen3moe --preset tiny --type Q8_0 --seed 7 -o "$T/q8-seed7.gguf" >/dev/null || exit 1
"$REL" gen --arch laguna --preset tiny --type Q4_0 -o "$T/lg.gguf" >/dev/null || { echo "gen laguna failed"; exit 1; }

# 1. the same golden trace (tokens and top-8 logits of every step) for any N
for case in "q8.gguf|" "q8.gguf|--flags +act_q8" "lg.gguf|" "lg.gguf|-t 2"; do
  f=${case%%|*} opts=${case#*|}
  # shellcheck disable=SC2086
  "$REL" trace record -m "$T/$f" --tokens 5,6,7,8,9 --steps 12 -o "$T/one.json" $opts >/dev/null 2>"$T/err" ||
    { fail "trace record $f $opts: $(cat "$T/err")"; continue; }
  for np in 2 3; do
    bin=$REL; [ "$np" = 3 ] && [ "$f" = q8.gguf ] && [ -z "$opts" ] && bin=$BIN   # one case under ASan+UBSan
    # shellcheck disable=SC2086
    $MPI $np "$bin" trace record -m "$T/$f" --tokens 5,6,7,8,9 --steps 12 -o "$T/np.json" $opts >/dev/null 2>"$T/err" ||
      { fail "np $np $f $opts: $(cat "$T/err")"; continue; }
    cmp -s "$T/one.json" "$T/np.json" && echo "ok $f $opts: np $np records the trace of one process" ||
      fail "np $np $f $opts: the trace differs from one process's"
  done
  # and gate replays the one-process trace under MPI
  # shellcheck disable=SC2086
  $MPI 2 "$REL" gate -m "$T/$f" "$T/one.json" $opts >"$T/out" 2>&1 && grep -q "^PASS" "$T/out" ||
    fail "np 2 gate $f $opts: $(cat "$T/out")"
done

# 2. a batch of prompts (run --batch) and seeded sampling, np 3 vs one process
printf 'The quick brown fox\nOnce upon a time\nHi\n' >"$T/p.txt"
for opts in "" "--temp 0.8 --seed 11"; do
  # shellcheck disable=SC2086
  "$REL" run -m "$T/q8.gguf" --batch "$T/p.txt" -n 12 -t 1 --json $opts 2>/dev/null | sed 's/"timings":{[^}]*}//g' >"$T/a.json"
  # shellcheck disable=SC2086
  $MPI 3 "$REL" run -m "$T/q8.gguf" --batch "$T/p.txt" -n 12 -t 1 --json $opts 2>"$T/err" |
    sed 's/"timings":{[^}]*}//g' >"$T/b.json"
  [ -s "$T/a.json" ] && cmp -s "$T/a.json" "$T/b.json" && echo "ok run --batch $opts: np 3 gives one process's tokens" ||
    fail "run --batch $opts under np 3: $(head -c 300 "$T/b.json") $(cat "$T/err")"
done

# 3. the server: the same completion from np 2 as from one process
port=$((20000 + $$ % 20000))
serve_once() {  # $1: launcher prefix ("" or "$MPI 2"); prints the completion's text
  $1 "$REL" serve -m "$T/q8.gguf" --port "$port" -t 1 >"$T/serve.log" 2>&1 &
  sp=$!
  i=0
  until curl -s "http://127.0.0.1:$port/health" >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 100 ] && break; sleep 0.1
  done
  curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":16,"temperature":0}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
  kill -INT $sp 2>/dev/null; wait $sp 2>/dev/null
}
if command -v curl >/dev/null 2>&1; then
  a=$(serve_once "")
  port=$((port + 1))
  b=$(serve_once "$MPI 2")
  [ -n "$a" ] && [ "$a" = "$b" ] && echo "ok serve: np 2 answers with one process's tokens" ||
    fail "serve under np 2: '$b' vs one process '$a' ($(tail -3 "$T/serve.log"))"
else
  echo "skip: curl not found: the server case" >&2
fi

# 4. faults. A rank killed mid-run: the job ends within seconds, naming it.
( $MPI 3 "$REL" run -m "$T/q8.gguf" --tokens 5,6,7 -n 4000 -t 1 --flags +test_slow >/dev/null 2>"$T/kill.err"
  echo "rc=$?" >>"$T/kill.err" ) &
job=$!
victim=""
i=0
while [ -z "$victim" ] && [ $i -lt 100 ]; do
  for p in $(pgrep -f "moefast run -m $T/q8.gguf" 2>/dev/null); do
    r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ "$r" = 1 ] && victim=$p
  done
  i=$((i + 1)); sleep 0.1
done
sleep 1
t0=$(date +%s)
[ -n "$victim" ] && kill -9 "$victim"
k=0
while kill -0 $job 2>/dev/null && [ $k -lt 200 ]; do k=$((k + 1)); sleep 0.1; done
t1=$(date +%s)
if kill -0 $job 2>/dev/null; then
  fail "rank 1 killed: the job still runs after 20 s"; pkill -9 -f "moefast run -m $T/q8.gguf"
else
  wait $job
  grep -q "rc=0" "$T/kill.err" && fail "rank 1 killed: exit status 0"
  grep -q "rank 1" "$T/kill.err" && echo "ok rank 1 killed: the job ended in $((t1 - t0)) s, naming it" ||
    fail "rank 1 killed: no message names it: $(cat "$T/kill.err")"
fi
[ -n "$victim" ] || fail "rank 1 of the kill case never appeared"

# A rank that stops answering (a test hook): rank 0's bounded wait ends the job, naming it.
t0=$(date +%s)
MOEFAST_MPI_TIMEOUT=2 timeout 60 $MPI 1 "$REL" run -m "$T/q8.gguf" --tokens 5,6 -n 4 -t 1 : \
  -np 1 env MOEFAST_MPI_TEST_STALL=1 "$REL" run -m "$T/q8.gguf" --tokens 5,6 -n 4 -t 1 >/dev/null 2>"$T/err"
rc=$?
t1=$(date +%s)
[ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "rank 1 did not answer layer 0's expert request within 2 s" "$T/err" &&
  echo "ok a silent rank: rank 0 gave up after 2 s, naming it (job ended in $((t1 - t0)) s)" ||
  fail "a silent rank: status $rc: $(cat "$T/err")"
# A rank that cannot load its shard, a rank with another file (MPMD: per-rank arguments).
$MPI 1 "$REL" run -m "$T/q8.gguf" --tokens 5,6 -n 4 -t 1 : -np 1 "$REL" run -m "$T/absent.gguf" --tokens 5,6 -n 4 -t 1 \
  >/dev/null 2>"$T/err" && fail "a rank without its file: exit status 0"
grep -q "rank 1 cannot load its expert shard: .*absent.gguf" "$T/err" && echo "ok a rank that cannot load: refused, naming it" ||
  fail "a rank that cannot load: $(cat "$T/err")"
$MPI 1 "$REL" run -m "$T/q8.gguf" --tokens 5,6 -n 4 -t 1 : -np 1 "$REL" run -m "$T/q8-seed7.gguf" --tokens 5,6 -n 4 -t 1 \
  >/dev/null 2>"$T/err" && fail "a rank with another file: exit status 0"
grep -q "rank 1's model file differs from rank 0's" "$T/err" && echo "ok a rank with another file: refused" ||
  fail "a rank with another file: $(cat "$T/err")"
# rank 0 fails before loading (a bad option): every rank ends, no hang
timeout 60 $MPI 2 "$REL" run -m "$T/q8.gguf" --no-such-option >/dev/null 2>"$T/err"
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && echo "ok a bad option under MPI: every rank ended (status $rc)" ||
  fail "a bad option under MPI: status $rc: $(cat "$T/err")"
# a command that does not run over MPI
$MPI 2 "$REL" gen --arch qwen3moe --preset tiny -o "$T/x.gguf" >/dev/null 2>"$T/err" && fail "gen under MPI: accepted"
grep -q "'gen' does not run over MPI" "$T/err" && [ ! -e "$T/x.gguf" ] && echo "ok gen under MPI: refused" ||
  fail "gen under MPI: $(cat "$T/err")"
# more ranks than experts per layer (8)
$MPI 9 "$REL" run -m "$T/q8.gguf" --tokens 5 -n 2 -t 1 >/dev/null 2>"$T/err" && fail "9 ranks for 8 experts: accepted"
grep -q "9 shards but the model has 8 routed experts" "$T/err" && echo "ok 9 ranks for 8 experts: refused" ||
  fail "9 ranks: $(cat "$T/err")"

[ $nfail -eq 0 ] || { echo "$nfail failure(s)"; exit 1; }
echo "cli_mpi: all passed"
