#!/bin/sh
# cli_gguf.sh — `moefast info` on every file of the malformed-GGUF corpus must
# fail cleanly: exit status 2, nothing on stdout, exactly one line on stderr
# that contains "moefast info:" and the file's name (and no sanitizer report,
# which would add lines). Skips only while `info` is not built into the binary.
BIN=${MOEFAST_BIN:-build/asan/moefast}
DIR=tests/data/malformed
if [ ! -x "$BIN" ]; then echo "FAIL: $BIN is not an executable (set MOEFAST_BIN)"; exit 1; fi
if [ ! -d "$DIR" ]; then echo "FAIL: $DIR not found (run from the repository root)"; exit 1; fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cli_gguf.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

"$BIN" info "$DIR/empty.gguf" >"$tmp/out" 2>"$tmp/err"
if grep -q "is not built" "$tmp/err"; then
  echo "SKIP: $(cat "$tmp/err")"
  exit 0
fi

n=0; bad=0
for f in "$DIR"/*.gguf; do
  n=$((n + 1))
  name=$(basename "$f")
  "$BIN" info "$f" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  lines=$(awk 'END { print NR }' "$tmp/err")
  why=""
  [ "$rc" -eq 2 ] || why="$why exit status $rc (want 2);"
  [ -s "$tmp/out" ] && why="$why wrote to stdout;"
  [ "$lines" -eq 1 ] || why="$why $lines stderr lines (want 1);"
  grep -q "moefast info:" "$tmp/err" || why="$why no 'moefast info:' on stderr;"
  grep -qF "$name" "$tmp/err" || why="$why file name not in the message;"
  if [ -n "$why" ]; then
    bad=$((bad + 1))
    echo "FAIL $name:$why"
    sed 's/^/    stderr| /' "$tmp/err" | head -n 5
    sed 's/^/    stdout| /' "$tmp/out" | head -n 3
  fi
done
if [ "$n" -lt 20 ]; then echo "FAIL: only $n corpus files in $DIR"; exit 1; fi
echo "cli_gguf: $n files, $bad failed"
[ "$bad" -eq 0 ]
