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

# trace_tamper IN STEP OUT — a copy of trace IN whose expected token at STEP
# (first case) is the runner-up: the top two ids of that step's top-k are
# swapped (the logits stay sorted), so a run that reproduces IN's tokens
# diverges exactly there. Used by the tests of bench and price.
trace_tamper() {
  awk -v S="$2" '
    function ids_of(line,   parts, a, b, x) {
      split(line, parts, /\], \[/); x = parts[1]; sub(/^[ \t]*\[\[/, "", x)
      split(x, a, ","); ID1 = a[1]; split(parts[2], b, ","); ID2 = b[1] }
    NR == FNR { if (intopk) { if (n == S) ids_of($0); n++ }
                if ($0 ~ /"topk": \[/) { intopk = 1; n = 0 }
                next }
    /"expected_tokens": \[/ {
      i = index($0, "["); pre = substr($0, 1, i); body = substr($0, i + 1); sub(/\],?[ \t]*$/, "", body)
      k = split(body, e, ", "); e[S + 1] = ID2; out = pre e[1]
      for (j = 2; j <= k; j++) out = out ", " e[j]
      print out "],"; next }
    /"topk": \[/ { print; t2 = 1; m = 0; next }
    t2 && m == S {
      m++; np = split($0, parts, /\], \[/); i = index(parts[1], "[[")
      head = substr(parts[1], 1, i + 1); r1 = substr(parts[1], i + 2); sub(/^[0-9]+/, ID2, r1)
      r2 = parts[2]; sub(/^[0-9]+/, ID1, r2); out = head r1 "], [" r2
      for (j = 3; j <= np; j++) out = out "], [" parts[j]
      print out; next }
    { if (t2) m++; print }' "$1" "$1" >"$3"
}
