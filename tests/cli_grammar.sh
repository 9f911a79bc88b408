#!/bin/sh
# cli_grammar.sh — `moefast run --grammar FILE` and `--json-schema FILE`: the
# output of a random-weight model follows the grammar (greedy and sampled);
# a broken grammar or schema, a missing file and bad option mixes exit 2
# with one line naming the place (line:column, the schema's JSON path).
BIN=${MOEFAST_BIN:-build/asan/moefast}
. tests/lib.sh
d=$(mktemp -d /tmp/moefast-cli-grammar-XXXXXX) || exit 1
trap 'rm -rf "$d"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
M=$(ref oracle/laguna-tiny-bf16-nvfp4.gguf) || { echo "cli_grammar: needs that file"; exit 0; }

# one line on stderr, exit 2, the line contains $1
one_line_err() { # want, rc, errfile
  [ "$2" -eq 2 ] || bad "exit $2, not 2 ($1)"
  [ "$(wc -l <"$3")" -eq 1 ] || bad "not one line: $(cat "$3")"
  grep -qF -- "$1" "$3" || bad "'$1' not in: $(cat "$3")"
}

cat >"$d/g.gbnf" <<'G'
# a record
root ::= "{\"n\": " num ", \"ok\": " ("true" | "false") ", \"tags\": [" tag ("," tag){0,2} "]}"
num  ::= [1-9] [0-9]{0,2}
tag  ::= "\"" [a-z]{1,4} "\""
G
re='^\{"n": [1-9][0-9]{0,2}, "ok": (true|false), "tags": \["[a-z]{1,4}"(,"[a-z]{1,4}"){0,2}\]\}$'
"$BIN" run -m "$M" -p "Once upon a time" -n 60 --grammar "$d/g.gbnf" >"$d/out" 2>"$d/err" || bad "grammar run: $(cat "$d/err")"
grep -Eq "$re" "$d/out" || bad "greedy output does not follow the grammar: $(cat "$d/out")"
for seed in 1 2 3; do
  "$BIN" run -m "$M" -p "Hello" -n 60 --temp 1.5 --seed $seed --grammar "$d/g.gbnf" >"$d/out" 2>"$d/err" ||
    bad "sampled grammar run: $(cat "$d/err")"
  grep -Eq "$re" "$d/out" || bad "seed $seed: output does not follow the grammar: $(cat "$d/out")"
done

cat >"$d/s.json" <<'S'
{"type": "object", "additionalProperties": false, "required": ["n", "c"],
 "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 9},
                "c": {"enum": ["red", "blue"]}, "x": {"type": "boolean"}}}
S
for seed in 0 4; do
  "$BIN" run -m "$M" -p "JSON:" -n 80 --temp 1 --seed $seed --json-schema "$d/s.json" >"$d/out" 2>"$d/err" ||
    bad "schema run: $(cat "$d/err")"
  tr -d ' \n\t' <"$d/out" >"$d/flat"
  grep -Eq '^\{"n":[1-9],"c":"(red|blue)"(,"x":(true|false))?\}$' "$d/flat" || bad "seed $seed: not valid for the schema: $(cat "$d/out")"
done

# broken inputs
printf 'root ::= "a" item\nitem ::= [a-\n' >"$d/bad.gbnf"
"$BIN" run -m "$M" -p x --grammar "$d/bad.gbnf" >/dev/null 2>"$d/err"; one_line_err "bad.gbnf: grammar:2:13: unexpected end of line" $? "$d/err"
printf 'root ::= item\n' >"$d/undef.gbnf"
"$BIN" run -m "$M" -p x --grammar "$d/undef.gbnf" >/dev/null 2>"$d/err"; one_line_err "grammar:1:10: undefined rule 'item'" $? "$d/err"
printf '{"type": "string", "pattern": "^a"}' >"$d/bad.json"
"$BIN" run -m "$M" -p x --json-schema "$d/bad.json" >/dev/null 2>"$d/err"; one_line_err "unsupported keyword 'pattern' at #" $? "$d/err"
printf '{"type": ' >"$d/broken.json"
"$BIN" run -m "$M" -p x --json-schema "$d/broken.json" >/dev/null 2>"$d/err"; one_line_err "bad JSON" $? "$d/err"
"$BIN" run -m "$M" -p x --grammar "$d/missing.gbnf" >/dev/null 2>"$d/err"; one_line_err "cannot open grammar file" $? "$d/err"
"$BIN" run -m "$M" -p x --grammar "$d/g.gbnf" --json-schema "$d/s.json" >/dev/null 2>"$d/err"; one_line_err "give one of" $? "$d/err"
"$BIN" run -m "$M" -p x --grammar >/dev/null 2>"$d/err"; one_line_err "--grammar needs a GBNF file" $? "$d/err"
exit $fail
