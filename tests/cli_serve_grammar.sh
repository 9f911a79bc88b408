#!/bin/sh
# cli_serve_grammar.sh — `moefast serve` with `grammar` (GBNF) and
# `response_format` (json_object, json_schema): the content of a random-weight
# model follows the grammar (chat and completions, streamed too: the deltas
# join to the same text); a bad grammar or schema, both fields at once, or an
# unknown format type is a 400 naming the field and the place.
set -u
. tests/lib.sh   # serve_port
BIN=${MOEFAST_BIN:-build/asan/moefast}
REL=${MOEFAST_BIN_REL:-build/rel/moefast}
[ -x "$REL" ] || REL=$BIN
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is not installed"; exit 0; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 is not installed"; exit 0; }
T=$(mktemp -d /tmp/moefast-cli-serve-grammar.XXXXXX) || exit 2
SPID=""
cleanup() { [ -n "$SPID" ] && kill -9 "$SPID" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
M=$T/q.gguf
"$REL" gen --arch qwen3moe --preset tiny --type Q8_0 -o "$M" >/dev/null || { echo "gen failed"; exit 1; }
"$BIN" serve -m "$M" --port 0 --slots 2 2>"$T/log" &
SPID=$!
PORT=$(serve_port "$T/log" "$SPID") || { echo "server did not start: $(cat "$T/log")"; exit 1; }
post() { curl -s -o "$T/$1" -w '%{http_code}' -H 'Content-Type: application/json' \
  "http://127.0.0.1:$PORT/v1/$2" -d "$3"; }

# every case: a file with the request, checked by python3 (one start)
i=0
req() { # name endpoint body
  i=$((i + 1)); echo "$1|$2|$(post "r$i" "$2" "$3")|$T/r$i" >>"$T/list"
}
G='root ::= \"{\\\"n\\\": \" [1-9] [0-9]? \", \\\"ok\\\": \" (\"true\" | \"false\") \"}\"'
S='{"type":"object","additionalProperties":false,"required":["city","days"],"properties":{"city":{"type":"string","maxLength":10},"days":{"type":"integer","minimum":1,"maximum":7},"unit":{"enum":["c","f"]}}}'
MSG='"messages":[{"role":"user","content":"weather?"}]'
req gbnf chat/completions "{$MSG,\"max_tokens\":40,\"grammar\":\"$G\"}"
req gbnf-sampled chat/completions "{$MSG,\"max_tokens\":40,\"temperature\":1.5,\"seed\":5,\"grammar\":\"$G\"}"
req gbnf-completion completions "{\"prompt\":\"x\",\"max_tokens\":40,\"grammar\":\"$G\"}"
req schema chat/completions "{$MSG,\"max_tokens\":80,\"temperature\":1,\"seed\":2,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"w\",\"schema\":$S}}}"
req schema-stream chat/completions "{$MSG,\"max_tokens\":80,\"temperature\":1,\"seed\":2,\"stream\":true,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"w\",\"schema\":$S}}}"
req json-object chat/completions "{$MSG,\"max_tokens\":200,\"temperature\":0.7,\"seed\":9,\"response_format\":{\"type\":\"json_object\"}}"
req text chat/completions "{$MSG,\"max_tokens\":4,\"response_format\":{\"type\":\"text\"}}"
req bad-grammar chat/completions "{$MSG,\"grammar\":\"root ::= [a-\"}"
req undefined-rule chat/completions "{$MSG,\"grammar\":\"root ::= item\"}"
req grammar-type chat/completions "{$MSG,\"grammar\":5}"
req bad-schema chat/completions "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"string\",\"pattern\":\"a\"}}}}"
req no-schema chat/completions "{$MSG,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}}"
req bad-type chat/completions "{$MSG,\"response_format\":{\"type\":\"xml\"}}"
req both chat/completions "{$MSG,\"grammar\":\"root ::= \\\"a\\\"\",\"response_format\":{\"type\":\"json_object\"}}"

python3 - "$T/list" <<'PY'
import json, re, sys
ok = True
def bad(name, why):
    global ok; ok = False; print(f"FAIL: {name}: {why}")
G = re.compile(r'^\{"n": [1-9][0-9]?, "ok": (true|false)\}$')
for line in open(sys.argv[1]):
    name, ep, code, path = line.strip().split("|")
    body = open(path).read()
    if name.startswith("gbnf") or name in ("schema", "schema-stream", "json-object", "text"):
        if code != "200": bad(name, f"status {code}: {body}"); continue
        if name == "schema-stream":
            text = ""
            for l in body.splitlines():
                if l.startswith("data: ") and l != "data: [DONE]":
                    ch = json.loads(l[6:])["choices"]
                    if ch: text += ch[0]["delta"].get("content") or ""
        else:
            ch = json.loads(body)["choices"][0]
            text = ch["message"]["content"] if "message" in ch else ch["text"]
        if name.startswith("gbnf"):
            if not G.match(text): bad(name, f"does not follow the grammar: {text!r}")
        elif name in ("schema", "schema-stream"):
            try:
                v = json.loads(text)
            except Exception as e:
                bad(name, f"not JSON ({e}): {text!r}"); continue
            if not (isinstance(v, dict) and set(v) <= {"city", "days", "unit"} and {"city", "days"} <= set(v)
                    and isinstance(v["city"], str) and len(v["city"]) <= 10 and type(v["days"]) is int
                    and 1 <= v["days"] <= 7 and v.get("unit", "c") in ("c", "f")):
                bad(name, f"not valid for the schema: {text!r}")
        elif name == "json-object":
            t = text.strip()
            if not (t.startswith("{")): bad(name, f"not an object: {text!r}")
            try:
                if not isinstance(json.loads(t), dict): bad(name, f"not an object: {text!r}")
            except Exception:
                if json.loads(body)["choices"][0]["finish_reason"] != "length": bad(name, f"not JSON: {text!r}")
        continue
    want = {"bad-grammar": ("grammar", "grammar:1:10"), "undefined-rule": ("grammar", "undefined rule 'item'"),
            "grammar-type": ("grammar", "must be a string"),
            "bad-schema": ("response_format", "unsupported keyword 'pattern' at #"),
            "no-schema": ("response_format", "json_schema.schema' is required"),
            "bad-type": ("response_format", "'xml'"), "both": ("grammar", "give one of")}[name]
    if code != "400": bad(name, f"status {code} (want 400): {body}"); continue
    err = json.loads(body).get("error", {})
    if err.get("param") != want[0] or want[1] not in err.get("message", ""):
        bad(name, f"error {err} lacks param {want[0]} / '{want[1]}'")
sys.exit(0 if ok else 1)
PY
rc=$?
kill -TERM "$SPID"; wait "$SPID"; src=$?; SPID=""
[ $src -eq 0 ] || { echo "FAIL: server exit $src: $(tail -5 "$T/log")"; rc=1; }
grep -q "ERROR: AddressSanitizer\|LeakSanitizer" "$T/log" && { echo "FAIL: sanitizer: $(cat "$T/log")"; rc=1; }
exit $rc
