# scripts/jget.sh — sourced by bench/run.sh and the CLI tests: a JSON field
# reader in POSIX sh + awk for the pretty-printed JSON that moefast writes.

# jget FILE PATH — the value at PATH (a.b, a[0]) of JSON pretty-printed one
# value per line (as bench writes it); strings keep their quotes, objects and
# arrays print "{" / "[", an absent key prints nothing.
jget() {
  awk -v want="$2" '
    function enter(p, arr) { depth++; stack[depth] = p; isarr[depth] = arr; idx[depth] = 0 }
    {
      line = $0; sub(/^[ \t]+/, "", line); sub(/[ \t]*,?[ \t]*$/, "", line)
      if (line == "") next
      if (line == "}" || line == "]") { depth--; next }
      if (match(line, /^"[^"]*": /)) {
        key = substr(line, 2, RLENGTH - 4); val = substr(line, RLENGTH + 1)
        path = (depth > 0 ? stack[depth] "." : "") key
      } else if (depth > 0 && isarr[depth]) {
        val = line; path = stack[depth] "[" idx[depth] "]"; idx[depth]++
      } else next
      if (path == want) { print val; exit }
      if (val == "{") enter(path, 0); else if (val == "[") enter(path, 1)
    }' "$1"
}

# For tests (the caller defines bad MESSAGE):
# num_ok FILE PATH AWK-CONDITION-ON-v : the value is a number satisfying it
num_ok() {
  v=$(jget "$1" "$2")
  awk -v v="$v" "BEGIN { exit !(v ~ /^-?[0-9][0-9.eE+-]*\$/ && ($3)) }" ||
    bad "$1: $2 = '$v' does not satisfy $3"
}
is_val() { v=$(jget "$1" "$2"); [ "$v" = "$3" ] || bad "$1: $2 = '$v', expected '$3'"; }
