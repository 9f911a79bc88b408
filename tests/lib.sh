# lib.sh — sourced by tests/cli_*.sh: where the reference files are.
# ref REL ("oracle/x.gguf", "vocab/y.json") prints the path of REL:
# $MOEFAST_SHARED/REL (default ../shared) if it exists, else the copy vendored
# in tests/data/shared (see its PROVENANCE.md); else prints one "skip:" line
# on stderr (tests/run.sh counts and shows them) and returns 1, so the caller
# skips that part visibly:   M=$(ref oracle/x.gguf) || M=
# refs REL... succeeds when every REL resolves (printing a skip line for each
# absent one); use it to guard a section that needs several files.
MOEFAST_SHARED_DIR=${MOEFAST_SHARED:-../shared}
MOEFAST_VENDORED_DIR=tests/data/shared
ref() {
  if [ -e "$MOEFAST_SHARED_DIR/$1" ]; then echo "$MOEFAST_SHARED_DIR/$1"
  elif [ -e "$MOEFAST_VENDORED_DIR/$1" ]; then echo "$MOEFAST_VENDORED_DIR/$1"
  else
    if [ -d "$MOEFAST_SHARED_DIR" ]; then why="not in $MOEFAST_SHARED_DIR"; else why="no $MOEFAST_SHARED_DIR"; fi
    echo "skip: $MOEFAST_SHARED_DIR/$1 absent ($why, not vendored in $MOEFAST_VENDORED_DIR)" >&2
    return 1
  fi
}
refs() {
  ok=0
  for r in "$@"; do ref "$r" >/dev/null || ok=1; done
  return $ok
}
# tiny_f32 DIR: a qwen3moe-tiny F32 model for the tests that need one of that
# shape but no reference output (bench, price): oracle/qwen3moe-tiny-f32.gguf
# when ref finds it, else `moefast gen --arch qwen3moe --preset tiny` into
# DIR (the same shapes, keys and F32 type; other weight values).
tiny_f32() {
  ref oracle/qwen3moe-tiny-f32.gguf 2>/dev/null && return
  "${MOEFAST_BIN_REL:-build/rel/moefast}" gen --arch qwen3moe --preset tiny -o "$1/qwen3moe-tiny-f32.gguf" >/dev/null 2>&1 ||
    "${MOEFAST_BIN:-build/asan/moefast}" gen --arch qwen3moe --preset tiny -o "$1/qwen3moe-tiny-f32.gguf" >/dev/null || return 1
  echo "note: qwen3moe-tiny-f32.gguf not at hand: generated one of its shape" >&2
  echo "$1/qwen3moe-tiny-f32.gguf"
}
# serve_port LOG [PID]: waits up to 30 s for `moefast serve`'s listening line
# in LOG (it binds --port 0 and prints the port it got) and prints that port;
# returns 1 when the line never came or, with PID, the server died first.
serve_port() {
  for _ in $(seq 1 300); do
    sp=$(sed -n 's/^moefast serve: listening on http:\/\/127\.0\.0\.1:\([0-9]*\) .*/\1/p' "$1")
    [ -n "$sp" ] && { echo "$sp"; return 0; }
    [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null && return 1
    sleep 0.1
  done
  return 1
}
# serve_start LOG "FLAGS" [NAME=VALUE...]: starts `$BIN serve -m $M --port 0
# FLAGS` (FLAGS split on spaces) with those variables in its environment, its
# stderr in LOG; adds its pid to PIDS and sets PORT; exits the test when it
# does not start.
serve_start() {
  ss_log=$1; ss_flags=$2; shift 2; : >"$ss_log"
  # shellcheck disable=SC2086
  env "$@" "$BIN" serve -m "$M" --port 0 $ss_flags >/dev/null 2>"$ss_log" &
  PIDS="$PIDS $!"
  PORT=$(serve_port "$ss_log" $!) && return 0
  echo "server did not start: $(cat "$ss_log")"
  exit 1
}
