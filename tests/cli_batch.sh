#!/bin/sh
# cli_batch.sh — `moefast run --batch FILE`: the prompts of a file generated
# together in one context give each prompt exactly the tokens `moefast run -p`
# gives it alone (greedy and seeded sampling, threads, step sizes); bad input
# is refused with one line.
set -u
BIN=${MOEFAST_BIN:-build/asan/moefast}
REL=${MOEFAST_BIN_REL:-build/rel/moefast}
[ -x "$REL" ] || REL=$BIN
T=$(mktemp -d /tmp/moefast-cli-batch.XXXXXX) || exit 2
trap 'rm -rf "$T"' EXIT
nfail=0
fail() { echo "FAIL: $*"; nfail=$((nfail + 1)); }
M=$T/q.gguf
"$REL" gen --arch qwen3moe --preset tiny --type Q8_0 -o "$M" >/dev/null || { echo "gen failed"; exit 1; }
printf 'The quick brown fox\n\nOnce upon a time\nHi\nA much longer prompt that goes on and on for quite a while longer\n' >"$T/p.txt"

ids() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(",".join(map(str,p["tokens"])) for p in d["prompts"]) if "prompts" in d else ",".join(map(str,d["tokens"])))'; }
# same_as_alone N OPTS: the prompts of p.txt run as one batch give each the
# tokens it gets run alone (-p) with the same options
same_as_alone() {
  # shellcheck disable=SC2086
  b=$("$BIN" run -m "$M" --batch "$T/p.txt" -n "$1" $2 --json 2>"$T/err" | ids) || fail "run --batch $2: $(cat "$T/err")"
  alone=""
  while IFS= read -r p; do
    [ -n "$p" ] || continue
    # shellcheck disable=SC2086
    a=$("$REL" run -m "$M" -p "$p" -n "$1" $2 --json 2>"$T/err" | ids) || fail "run -p '$p' $2: $(cat "$T/err")"
    alone="$alone${alone:+ }$a"
  done <"$T/p.txt"
  [ -n "$b" ] && [ "$b" = "$alone" ] || { fail "run --batch $2: tokens differ from the prompts run alone:
  batch: $b
  alone: $alone"; return 1; }
}
for opts in "-t 1" "-t 2 --batch-size 3" "-t 3 --temp 0.9 --seed 7" "-t 2 --flags +kv_q8" "-t 2 --flags +act_q8,+kv_f16"; do
  same_as_alone 10 "$opts" &&
  echo "ok --batch $opts: 4 prompts, the same tokens as alone"
done
# --grammar / --json-schema: each prompt constrained by its own constraint of
# the one grammar; a prompt's tokens are those it gets alone with the grammar
# (prompts finish at different steps: the grammar ends, then the end token)
printf 'root ::= "{\\"n\\": " [1-9] [0-9]{0,6} ", \\"w\\": \\"" [a-z ]{1,9} "\\"}"\n' >"$T/g.gbnf"
printf '{"type": "object", "required": ["k"], "properties": {"k": {"enum": ["a", "bb"]}, "v": {"type": "integer", "maximum": 99}}}' >"$T/s.json"
for opts in "-t 2 --grammar $T/g.gbnf" "-t 3 --temp 0.9 --seed 7 --grammar $T/g.gbnf" "-t 2 --temp 1.2 --seed 3 --json-schema $T/s.json"; do
  same_as_alone 24 "$opts" &&
  echo "ok --batch $opts: the same tokens as alone"
done
"$BIN" run -m "$M" --batch "$T/p.txt" -n 40 --grammar "$T/g.gbnf" >"$T/out" 2>"$T/err" || fail "grammar batch text: $(cat "$T/err")"
[ "$(grep -cE '^\{"n": [1-9][0-9]{0,6}, "w": "[a-z ]{1,9}"\}$' "$T/out")" -eq 4 ] || fail "grammar batch: not 4 outputs of the grammar: $(cat "$T/out")"
printf 'root ::= "a" item\nitem ::= [a-\n' >"$T/bad.gbnf"
"$BIN" run -m "$M" --batch "$T/p.txt" --grammar "$T/bad.gbnf" >/dev/null 2>"$T/err"
[ $? -eq 2 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -qF "bad.gbnf: grammar:2:13" "$T/err" || fail "broken grammar with --batch: $(cat "$T/err")"

# text mode: one block per prompt, a summary line on stderr
out=$("$BIN" run -m "$M" --batch "$T/p.txt" -n 4 2>"$T/err")
[ "$(echo "$out" | grep -c '^== prompt [1-4]: ')" = 4 ] || fail "text mode: $out"
grep -q "^batch: 4 prompts" "$T/err" || fail "text mode summary: $(cat "$T/err")"
# standard input
"$BIN" run -m "$M" --batch - -n 2 --json <"$T/p.txt" >/dev/null 2>"$T/err" || fail "--batch -: $(cat "$T/err")"

bad() { # label, expected substring, args...
  label=$1; want=$2; shift 2
  out=$("$BIN" run "$@" 2>&1)
  rc=$?
  [ $rc -eq 2 ] || fail "$label: exit $rc (want 2): $out"
  [ "$(echo "$out" | wc -l)" -eq 1 ] || fail "$label: not one line: $out"
  echo "$out" | grep -qF -- "$want" || fail "$label: lacks '$want': $out"
}
: >"$T/empty.txt"
printf '\n  \n' >"$T/blank.txt"
bad "missing file" "cannot open" -m "$M" --batch "$T/nope.txt"
bad "empty file" "no prompts" -m "$M" --batch "$T/empty.txt"
bad "blank lines only" "no prompts" -m "$M" --batch "$T/blank.txt"
bad "no value" "--batch needs a file" -m "$M" --batch
out=$("$BIN" run -m "$M" --batch "$T/p.txt" -p hi 2>&1)
[ $? -eq 2 ] && echo "$out" | tail -n 1 | grep -q "^moefast run: give exactly one of" || fail "--batch with -p: $out"
bad "context too small" "exceed the context (8)" -m "$M" --batch "$T/p.txt" -n 4 --ctx 8
echo "$nfail failures"
[ $nfail -eq 0 ]
