#!/bin/sh
# cli_help.sh — every command listed by `moefast --help`, and every trace
# sub-command, answers --help and -h with its usage on stdout and exit 0.
BIN=${MOEFAST_BIN:-build/asan/moefast}
d=$(mktemp -d /tmp/moefast-cli-help-XXXXXX) || exit 1
trap 'rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

"$BIN" --help >"$d/top" 2>&1 || bad "moefast --help exited $?"
# the command lines: two spaces, a name, spaces, its description
cmds=$(sed -n 's/^  \([a-z][a-z_-]*\)  .*/\1/p' "$d/top")
[ "$(echo "$cmds" | wc -w)" -ge 10 ] || bad "moefast --help lists only: $cmds"
for c in $cmds "trace record"; do
  for h in --help -h; do
    # shellcheck disable=SC2086 # "trace record" is two words
    "$BIN" $c $h >"$d/out" 2>"$d/err"; rc=$?
    [ $rc -eq 0 ] || bad "'moefast $c $h' exited $rc: $(head -c 300 "$d/err")"
    grep -q "^usage: moefast $c" "$d/out" || bad "'moefast $c $h' has no 'usage: moefast $c' line on stdout"
  done
done
[ $fail -eq 0 ] && echo "cli_help: ok"
exit $fail
