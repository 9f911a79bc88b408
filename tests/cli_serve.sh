#!/bin/sh
# cli_serve.sh — `moefast serve` (the sanitized binary) on 127.0.0.1 with a
# tiny generated model:
#   raw HTTP with curl: every bad input gets its status and an OpenAI error
#     object naming the field; the API key; the body limit; /health, /metrics;
#   the official openai npm package (tests/serve, pinned by its lockfile;
#     skipped with a reason when npm or the registry is unavailable): chat,
#     streaming, completions, stop strings, and 8 concurrent requests giving
#     each the tokens it gets alone (tests/serve/test.mjs);
#   a slowed server (MOEFAST_SERVE_STEP_DELAY_MS): the queue full (503 with
#     Retry-After), clients leaving mid-request (their slot freed), SIGTERM
#     (running requests finish or are cancelled after --shutdown-timeout,
#     queued ones get 503, exit 0, ASan clean).
set -u
. tests/lib.sh   # serve_port
BIN=${MOEFAST_BIN:-build/asan/moefast}
REL=${MOEFAST_BIN_REL:-build/rel/moefast}
[ -x "$REL" ] || REL=$BIN
command -v curl >/dev/null 2>&1 || { echo "SKIP: curl is not installed"; exit 0; }
T=$(mktemp -d /tmp/moefast-cli-serve.XXXXXX) || exit 2
PIDS=""
cleanup() { for p in $PIDS; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
nfail=0
fail() { echo "FAIL: $*"; nfail=$((nfail + 1)); }
M=$T/q.gguf
"$REL" gen --arch qwen3moe --preset tiny --type Q8_0 -o "$M" >/dev/null || { echo "gen failed"; exit 1; }

# start_server LOG ARGS...: sets SPID and PORT (the server picks a free port)
start_server() {
  log=$1; shift
  : >"$log"
  "$BIN" serve -m "$M" --port 0 "$@" 2>"$log" &
  SPID=$!
  PIDS="$PIDS $SPID"
  PORT=$(serve_port "$log" "$SPID") && return 0
  echo "server did not start: $(cat "$log")"
  exit 1
}
# stop_server SIGNAL: the exit status in SRC
stop_server() { kill -"$1" "$SPID"; wait "$SPID"; SRC=$?; }
URL() { echo "http://127.0.0.1:$PORT$1"; }
metric() { curl -s "$(URL /metrics)" | awk -v n="$1" '$1 == n { print $2 }'; }
wait_metric() { # name value: polls for up to 20 s
  for _ in $(seq 1 200); do [ "$(metric "$1")" = "$2" ] && return 0; sleep 0.1; done
  fail "metric $1 never reached $2 (is $(metric "$1"))"
}

# ---- bad command lines: exit 2, the last line names the problem -------------
badcli() { # label, expected substring, args...
  label=$1; want=$2; shift 2
  out=$("$BIN" serve "$@" 2>&1)
  rc=$?
  [ $rc -eq 2 ] || fail "$label: exit $rc (want 2): $out"
  echo "$out" | tail -n 1 | grep -qF -- "moefast serve: $want" || fail "$label: lacks '$want': $out"
}
badcli "no model" "-m FILE is required" --port 0
badcli "missing model file" "$T/nope.gguf" -m "$T/nope.gguf" --port 0
badcli "port out of range" "bad value for --port" -m "$M" --port 70000
badcli "bad host" "--host example.com: not an IPv4 or IPv6 address" -m "$M" --port 0 --host example.com
badcli "unknown option" "unknown argument '--bogus'" -m "$M" --bogus
# --ctx past the trained context (4096): the warning run and chat give
timeout 5 "$REL" serve -m "$M" --port 0 --ctx 5000 --slots 1 >/dev/null 2>"$T/ctxwarn"
grep -q "^moefast serve: warning: --ctx 5000 .*trained context 4096" "$T/ctxwarn" || fail "serve --ctx 5000: no warning: $(cat "$T/ctxwarn")"
echo "ok bad command lines: exit 2 with one line; --ctx past the trained context warned"

# ---- server A: the API ------------------------------------------------------
KEY=sekrit
start_server "$T/a.log" --slots 8 --ctx 256 --chunk 16 -t 2 --api-key $KEY --max-body 65536 --queue 16
grep -q '^moefast serve: listening on .*, numerics fp32, API key required)$' "$T/a.log" || fail "the startup line does not say the numerics: $(cat "$T/a.log")"
echo "server A on port $PORT"
badcli "port in use" "cannot listen on 127.0.0.1:$PORT" -m "$M" --port "$PORT" --slots 1 --ctx 64

# call METHOD PATH [BODY]: the status in ST, the body in $T/body
call() {
  if [ $# -ge 3 ]; then
    ST=$(curl -s -o "$T/body" -D "$T/head" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $KEY" \
         -H 'Content-Type: application/json' --data-binary "$3" "$(URL "$2")")
  else
    ST=$(curl -s -o "$T/body" -D "$T/head" -w '%{http_code}' -X "$1" -H "Authorization: Bearer $KEY" "$(URL "$2")")
  fi
}
# bad LABEL STATUS PARAM METHOD PATH BODY [SUBSTRING]: an OpenAI error object
# naming PARAM ("null": none); the bodies are checked together at the end
# (one python3 start, not one per case)
NBAD=0
: >"$T/bad.list"
bad() {
  label=$1; want=$2; param=$3; sub=${7:-}
  call "$4" "$5" "$6"
  [ "$ST" = "$want" ] || { fail "$label: status $ST (want $want): $(cat "$T/body")"; return; }
  NBAD=$((NBAD + 1))
  cp "$T/body" "$T/bad.$NBAD"
  printf '%s\t%s\t%s\t%s\n' "$T/bad.$NBAD" "$param" "$sub" "$label" >>"$T/bad.list"
  echo "ok $label: $want $param"
}
check_bad() {
  python3 - "$T/bad.list" <<'EOF' || fail "error objects"
import json, sys
for line in open(sys.argv[1]):
    path, param, sub, label = line.rstrip("\n").split("\t")
    try:
        e = json.load(open(path))["error"]
        assert set(e) == {"message", "type", "param", "code"}, e
        assert isinstance(e["message"], str) and e["message"], e
        assert e["type"] in ("invalid_request_error", "server_error"), e
        assert e["param"] == (None if param == "null" else param), e
        assert sub in e["message"], e
    except Exception as x:
        print("FAIL: %s: %r: %s" % (label, x, open(path).read()))
        sys.exit(1)
EOF
}
CH=/v1/chat/completions
MSG='"messages":[{"role":"user","content":"hi"}]'
bad "malformed JSON" 400 null POST $CH '{"messages": [' "malformed JSON"
bad "empty body" 400 null POST $CH ''
bad "not an object" 400 null POST $CH '[1,2]'
bad "invalid UTF-8" 400 null POST $CH "$(printf '{"messages":[{"role":"user","content":"\377"}]}')"
bad "deep nesting" 400 null POST $CH "$(awk 'BEGIN { for (i = 0; i < 20000; i++) printf "["; for (i = 0; i < 20000; i++) printf "]" }')"
bad "no messages" 400 messages POST $CH '{"model":"q"}'
bad "messages not an array" 400 messages POST $CH '{"messages":"hi"}'
bad "empty messages" 400 messages POST $CH '{"messages":[]}'
bad "message not an object" 400 messages POST $CH '{"messages":[7]}'
bad "unknown role" 400 messages POST $CH '{"messages":[{"role":"wizard","content":"x"}]}' "wizard"
bad "content a number" 400 messages POST $CH '{"messages":[{"role":"user","content":5}]}'
bad "content missing" 400 messages POST $CH '{"messages":[{"role":"user"}]}'
bad "image content" 400 messages POST $CH '{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}'
bad "temperature a string" 400 temperature POST $CH "{$MSG,\"temperature\":\"hot\"}"
bad "temperature 5" 400 temperature POST $CH "{$MSG,\"temperature\":5}"
bad "top_p 2" 400 top_p POST $CH "{$MSG,\"top_p\":2}"
bad "top_k -1" 400 top_k POST $CH "{$MSG,\"top_k\":-1}"
bad "seed a string" 400 seed POST $CH "{$MSG,\"seed\":\"x\"}"
bad "max_tokens -1" 400 max_tokens POST $CH "{$MSG,\"max_tokens\":-1}"
bad "max_tokens 0" 400 max_tokens POST $CH "{$MSG,\"max_tokens\":0}"
bad "max_tokens 2.5" 400 max_tokens POST $CH "{$MSG,\"max_tokens\":2.5}"
bad "max_tokens huge" 400 max_tokens POST $CH "{$MSG,\"max_tokens\":1000000000}" "(1000000000) exceed the context (256 tokens)"
bad "max_completion_tokens huge" 400 max_completion_tokens POST $CH "{$MSG,\"max_completion_tokens\":300}" "(300) exceed"
bad "max_tokens past int64" 400 null POST $CH "{$MSG,\"max_tokens\":99999999999999999999999}"
bad "n 9" 400 n POST $CH "{$MSG,\"n\":9}" "[1, 8]"
bad "n 0" 400 n POST $CH "{$MSG,\"n\":0}"
bad "n a string" 400 n POST $CH "{$MSG,\"n\":\"3\"}" "integer"
bad "n 9 streamed" 400 n POST $CH "{$MSG,\"n\":9,\"stream\":true}" "[1, 8]"
bad "n 0 (completions)" 400 n POST /v1/completions '{"prompt":"a","n":0,"stream":true}' "[1, 8]"
bad "stop a number" 400 stop POST $CH "{$MSG,\"stop\":5}"
bad "stop 5 strings" 400 stop POST $CH "{$MSG,\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}"
bad "stop empty" 400 stop POST $CH "{$MSG,\"stop\":\"\"}"
bad "stream a string" 400 stream POST $CH "{$MSG,\"stream\":\"yes\"}"
bad "presence_penalty 3" 400 presence_penalty POST $CH "{$MSG,\"presence_penalty\":3}" "[-2, 2]"
bad "frequency_penalty a string" 400 frequency_penalty POST $CH "{$MSG,\"frequency_penalty\":\"x\"}"
bad "repeat_penalty 0" 400 repeat_penalty POST $CH "{$MSG,\"repeat_penalty\":0}" "> 0"
bad "repeat_penalty -1" 400 repeat_penalty POST /v1/completions '{"prompt":"a","repeat_penalty":-1}' "> 0"
bad "repeat_penalty a string" 400 repeat_penalty POST $CH "{$MSG,\"repeat_penalty\":\"1.1\"}" "number"
bad "repeat_last_n -2" 400 repeat_last_n POST $CH "{$MSG,\"repeat_last_n\":-2}" "-1"
bad "repeat_last_n 2.5" 400 repeat_last_n POST /v1/completions '{"prompt":"a","repeat_last_n":2.5}' "integer"
bad "repeat_last_n a string" 400 repeat_last_n POST $CH "{$MSG,\"repeat_last_n\":\"64\"}" "integer"
bad "logit_bias a list" 400 logit_bias POST $CH "{$MSG,\"logit_bias\":[1]}"
bad "logit_bias key not an id" 400 logit_bias POST $CH "{$MSG,\"logit_bias\":{\"abc\":1}}" "'abc' is not a token id"
bad "logit_bias id out of range" 400 logit_bias POST $CH "{$MSG,\"logit_bias\":{\"999999\":1}}" "999999"
bad "logit_bias 101" 400 logit_bias POST $CH "{$MSG,\"logit_bias\":{\"5\":101}}" "[-100, 100]"
bad "logit_bias a string value" 400 logit_bias POST $CH "{$MSG,\"logit_bias\":{\"5\":\"up\"}}"
bad "logprobs a number (chat)" 400 logprobs POST $CH "{$MSG,\"logprobs\":3}"
bad "top_logprobs without logprobs" 400 top_logprobs POST $CH "{$MSG,\"top_logprobs\":2}" "needs 'logprobs': true"
bad "top_logprobs 21" 400 top_logprobs POST $CH "{$MSG,\"logprobs\":true,\"top_logprobs\":21}"
bad "top_logprobs a string" 400 top_logprobs POST $CH "{$MSG,\"logprobs\":true,\"top_logprobs\":\"2\"}"
bad "logprobs 6 (completions)" 400 logprobs POST /v1/completions '{"prompt":"a","logprobs":6}'
bad "logprobs true (completions)" 400 logprobs POST /v1/completions '{"prompt":"a","logprobs":true}'
bad "unknown model" 404 model POST $CH "{$MSG,\"model\":\"gpt-9\"}" "gpt-9"
bad "model a number" 400 model POST $CH "{$MSG,\"model\":1}"
bad "no prompt" 400 prompt POST /v1/completions '{"max_tokens":2}'
bad "prompt an object" 400 prompt POST /v1/completions '{"prompt":{}}'
bad "two prompts" 400 prompt POST /v1/completions '{"prompt":["a","b"]}'
bad "empty prompt" 400 prompt POST /v1/completions '{"prompt":[]}'
bad "token id out of range" 400 prompt POST /v1/completions '{"prompt":[1,999999]}' "999999"
bad "negative token id" 400 prompt POST /v1/completions '{"prompt":[-1]}'
LONG=$(seq -f 'w%g' 0 399 | tr '\n' ' ')
bad "prompt over the context" 400 prompt POST /v1/completions "{\"prompt\":\"$LONG\"}" "exceeds the context (256 tokens)"
# prompt + max_tokens: both numbers named
call POST /v1/completions '{"prompt":[1,2,3,4,5,6,7,8,9,10],"max_tokens":247}'
[ "$ST" = 400 ] && grep -q 'the prompt (10 tokens) + .max_tokens. (247) exceed the context (256 tokens)' "$T/body" \
  || fail "prompt + max_tokens: $ST $(cat "$T/body")"
call POST /v1/completions '{"prompt":[1,2,3,4,5,6,7,8,9,10],"max_tokens":246,"temperature":0}'
[ "$ST" = 200 ] || fail "prompt + max_tokens = context: $ST $(cat "$T/body")"
echo "ok prompt + max_tokens over the context: 400 naming 10, 247 and 256; 246 fits"
# n > 1: every choice is the request alone with seed + i (the same tokens),
# index 0..n-1, usage summing the completions; greedy choices are equal
call POST /v1/completions '{"prompt":[1,2,3],"max_tokens":8,"temperature":1,"seed":5,"n":3,"return_tokens":true}'
cp "$T/body" "$T/n3.json"
for i in 0 1 2; do
  call POST /v1/completions "{\"prompt\":[1,2,3],\"max_tokens\":8,\"temperature\":1,\"seed\":$((5 + i)),\"return_tokens\":true}"
  cp "$T/body" "$T/n1-$i.json"
done
call POST $CH "{$MSG,\"max_tokens\":6,\"temperature\":0,\"n\":2}"; cp "$T/body" "$T/ng.json"
python3 - "$T" <<'EOF2' || fail "n > 1"
import json, sys
d = sys.argv[1]
ld = lambda n: json.load(open(f"{d}/{n}.json"))
n3, g = ld("n3"), ld("ng")
ch = n3["choices"]
assert [c["index"] for c in ch] == [0, 1, 2], ch
for i in range(3):
    alone = ld(f"n1-{i}")["choices"][0]
    assert ch[i]["tokens"] == alone["tokens"] and ch[i]["text"] == alone["text"], (i, ch[i], alone)
assert len({tuple(c["tokens"]) for c in ch}) > 1, "three seeds, one answer"
assert n3["usage"]["completion_tokens"] == sum(len(c["tokens"]) for c in ch), n3["usage"]
assert n3["usage"]["total_tokens"] == n3["usage"]["prompt_tokens"] + n3["usage"]["completion_tokens"]
gc = g["choices"]
assert len(gc) == 2 and gc[0]["message"] == gc[1]["message"] and gc[1]["index"] == 1, gc
print("ok n = 3: each choice = the request alone with seed + i; usage summed; greedy n = 2 equal")
EOF2
# streamed n > 1: OpenAI's shape (one SSE stream; each chunk one choice's,
# index i; per choice a role delta first and one finish chunk; then one usage
# chunk summing the choices; [DONE]); joined per index, each choice is the
# non-streamed n request's choice i (chat and completions, seeded and greedy)
sse() { curl -sN -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' --data-binary "$2" "$(URL "$1")" >"$T/$3.sse"; }
for kind in chat completion; do
  for samp in '"temperature":1,"seed":21' '"temperature":0'; do
    if [ $kind = chat ]; then P=$CH; B="{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}],\"max_tokens\":10,$samp,\"n\":3,\"return_tokens\":true"
    else P=/v1/completions; B="{\"prompt\":\"Once upon a time \u00e9\u4e2d\",\"max_tokens\":10,$samp,\"n\":3,\"return_tokens\":true,\"logprobs\":1"; fi
    tag=$kind-$(echo "$samp" | tr -dc 'a-z0-9')
    call POST $P "$B}"; cp "$T/body" "$T/$tag.json"
    sse $P "$B,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" "$tag"
    python3 - "$T/$tag.json" "$T/$tag.sse" $kind <<'EOF2' || fail "streamed n = 3 ($tag)"
import json, sys
plain, kind = json.load(open(sys.argv[1])), sys.argv[3]
ev = open(sys.argv[2]).read().split("\n\n")
assert ev[-1] == "" and ev[-2] == "data: [DONE]", ev[-3:]
chunks = [json.loads(e[6:]) for e in ev[:-2]]
usage = chunks[-1]
assert usage["choices"] == [] and usage["usage"] is not None, usage
assert all(c["id"] == chunks[0]["id"] for c in chunks) and chunks[0]["id"].startswith(plain["id"].split("-")[0] + "-"), "ids differ"
text, toks, fin, lps, first = {}, {}, {}, {}, {}
for c in chunks[:-1]:
    assert len(c["choices"]) == 1 and c["usage"] is None, c
    ch = c["choices"][0]
    i = ch["index"]
    assert i not in fin, ("a chunk after choice %d's finish" % i, c)
    if kind == "chat":
        d = ch["delta"]
        if i not in first: first[i] = d; assert d == {"role": "assistant", "content": ""}, ("role first", d)
        text[i] = text.get(i, "") + d.get("content", "")
    else:
        text[i] = text.get(i, "") + ch["text"]
        if ch["logprobs"]: lps.setdefault(i, []).extend(ch["logprobs"]["tokens"])
    if ch["finish_reason"]: fin[i] = ch["finish_reason"]; toks[i] = ch["tokens"]
pc = plain["choices"]
assert sorted(fin) == [0, 1, 2], fin
for i in range(3):
    want = pc[i]["message"]["content"] if kind == "chat" else pc[i]["text"]
    assert text[i] == want and toks[i] == pc[i]["tokens"] and fin[i] == pc[i]["finish_reason"], (i, text[i], want, toks[i], pc[i]["tokens"])
    if kind == "completion": assert lps[i] == pc[i]["logprobs"]["tokens"], (i, lps[i])
u, pu = usage["usage"], plain["usage"]
assert u["completion_tokens"] == sum(len(toks[i]) for i in range(3)) == pu["completion_tokens"], (u, pu)
assert u["prompt_tokens"] == pu["prompt_tokens"] and u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], u
EOF2
  done
done
python3 - "$T" <<'EOF2' || fail "streamed n: seeded choices"
import json, sys
for k in ("chat", "completion"):
    ch = json.load(open(f"{sys.argv[1]}/{k}-temperature1seed21.json"))["choices"]
    assert len({tuple(c["tokens"]) for c in ch}) > 1, (k, "three seeds, one answer")
print("ok streamed n = 3 (chat, completions; seeded, greedy): per index = the plain n = 3 choice, role first, one finish each, usage summed")
EOF2
# repeat_penalty (llama.cpp's): a token biased +100 is taken every step;
# penalty 1e6 over a window of 1 divides it to ~1e-4 right after it was
# taken, so it alternates with others; a window of 2 keeps it out for two
# steps; the prompt is in the window (a prompt ending in it keeps it out of
# the first step)
rp_req() { echo "{\"prompt\":[$1],\"max_tokens\":9,\"temperature\":0,\"logit_bias\":{\"300\":100},\"repeat_penalty\":1e6,\"repeat_last_n\":$2,\"return_tokens\":true}"; }
for w in 1 2; do call POST /v1/completions "$(rp_req 1,2,3 $w)"; cp "$T/body" "$T/rp$w.json"; done
call POST /v1/completions "$(rp_req 1,300,3 2)"; cp "$T/body" "$T/rpp.json"
call POST /v1/completions "$(rp_req 1,300,3 1)"; cp "$T/body" "$T/rpq.json"
call POST /v1/completions "$(rp_req 1,2,3 1 | sed 's/"repeat_penalty":1e6,//')"; cp "$T/body" "$T/rp0.json"
python3 - "$T" <<'EOF2' || fail "repeat_penalty"
import json, sys
t = lambda n: json.load(open(f"{sys.argv[1]}/{n}.json"))["choices"][0]["tokens"]
at = lambda n: [i for i, x in enumerate(t(n)) if x == 300]
assert t("rp0") == [300] * 9, t("rp0")
assert at("rp1") == [0, 2, 4, 6, 8], t("rp1")
assert at("rp2") == [0, 3, 6], t("rp2")
assert at("rpp") == [1, 4, 7], ("the prompt's 300 is in a window of 2", t("rpp"))
assert at("rpq") == [0, 2, 4, 6, 8], ("a window of 1 holds only the prompt's last token", t("rpq"))
print("ok repeat_penalty: windows of 1 and 2 (prompt included) space the biased token as llama.cpp's formula says")
EOF2
# logit_bias and the penalties (engine.h's formula): +100 on token 300 makes
# greedy take it every step, also under a presence penalty (a fixed 2); a
# frequency penalty of 2 takes 2 more from it per use, so within 80 tokens it
# must give way (100 - 2c falls below the other logits) yet hold the first 40;
# streamed == plain with both set
pen_req() { echo "{\"prompt\":[1,2,3],\"max_tokens\":$1,\"temperature\":0,\"logit_bias\":{\"300\":100},\"logprobs\":0$2}"; }
call POST /v1/completions "$(pen_req 8 '')"; cp "$T/body" "$T/bias.json"
call POST /v1/completions "$(pen_req 8 ',"presence_penalty":2')"; cp "$T/body" "$T/pres.json"
call POST /v1/completions "$(pen_req 80 ',"frequency_penalty":2')"; cp "$T/body" "$T/freq.json"
curl -sN -H "Authorization: Bearer $KEY" -d "$(pen_req 80 ',"frequency_penalty":2,"stream":true')" "$(URL /v1/completions)" >"$T/freq.sse"
python3 - "$T/bias.json" "$T/pres.json" "$T/freq.json" "$T/freq.sse" <<'EOF2' || fail "logit_bias and penalties"
import json, sys
toks = lambda f: json.load(open(f))["choices"][0]["logprobs"]["tokens"]
b, p, f = toks(sys.argv[1]), toks(sys.argv[2]), toks(sys.argv[3])
assert len(b) == 8 and len(set(b)) == 1, ("bias +100: not one token every step", b)
assert p == b, ("presence 2 under bias +100 should not move it", p)
x = b[0]
n = sum(t == x for t in f)
assert f[:40] == [x] * 40 and n < len(f), ("frequency 2: the biased token should hold 40 steps and then give way", n, len(f))
text = "".join(json.loads(l[6:])["choices"][0]["text"] for l in open(sys.argv[4]) if l.startswith("data: {"))
assert text == json.load(open(sys.argv[3]))["choices"][0]["text"], "streamed != plain with penalties"
print("ok logit_bias +100 holds every step (presence 2 too); frequency 2: %d of %d, then others; streamed == plain" % (n, len(f)))
EOF2
bad "body over --max-body" 413 null POST $CH "{\"x\":\"$(head -c 70000 /dev/zero | tr '\0' a)\"}" "65536"
# a chunked body has no Content-Length: refused once it passes the limit
head -c 70000 /dev/zero | tr '\0' a | curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer $KEY" \
  -H 'Transfer-Encoding: chunked' --data-binary @- "$(URL $CH)" >"$T/st"
[ "$(cat "$T/st")" = 413 ] && grep -q request_too_large "$T/body" || fail "chunked body over --max-body: $(cat "$T/st" "$T/body")"
bad "unknown path" 404 null GET /v1/nope ''
bad "tokenize: no content" 400 content POST /tokenize '{}'
bad "tokenize: content a number" 400 content POST /tokenize '{"content":5}'
bad "tokenize: with_pieces a string" 400 with_pieces POST /tokenize '{"content":"a","with_pieces":"yes"}'
bad "tokenize: malformed JSON" 400 null POST /tokenize '{"content":'
bad "detokenize: tokens not a list" 400 tokens POST /detokenize '{"tokens":"1 2"}'
bad "detokenize: id out of range" 400 tokens POST /detokenize '{"tokens":[1,999999]}' "tokens[1]"
bad "detokenize: id a string" 400 tokens POST /detokenize '{"tokens":["1"]}'
bad "GET /tokenize" 405 null GET /tokenize ''
bad "GET on a POST endpoint" 405 null GET $CH ''
check_bad
# /tokenize and /detokenize (llama.cpp server's shapes): text -> ids -> the
# same text; the pieces join to the text; the ids are the prompt a completion
# of that text runs (its usage); a control token written in the text is one id
TXT='Hello world, tokenize me<|im_end|>'
call POST /tokenize "{\"content\":\"$TXT\"}"; cp "$T/body" "$T/tok.json"
call POST /tokenize "{\"content\":\"$TXT\",\"with_pieces\":true}"; cp "$T/body" "$T/pieces.json"
call POST /tokenize "{\"content\":\"$TXT\",\"parse_special\":false}"; cp "$T/body" "$T/plain.json"
IDS=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["tokens"]))' "$T/tok.json")
call POST /detokenize "{\"tokens\":$IDS}"; cp "$T/body" "$T/detok.json"
call POST /v1/completions "{\"prompt\":\"$TXT\",\"max_tokens\":1,\"temperature\":0}"; cp "$T/body" "$T/usage.json"
python3 - "$TXT" "$T" <<'EOF2' || fail "tokenize / detokenize"
import json, sys
txt, d = sys.argv[1], sys.argv[2]
ld = lambda n: json.load(open(f"{d}/{n}.json"))
ids, pieces, plain = ld("tok")["tokens"], ld("pieces")["tokens"], ld("plain")["tokens"]
assert ld("detok")["content"] == txt, ld("detok")
assert [p["id"] for p in pieces] == ids and "".join(p["piece"] for p in pieces) == txt, pieces
assert ld("usage")["usage"]["prompt_tokens"] == len(ids), (ld("usage")["usage"], len(ids))
assert len(plain) > len(ids), ("parse_special false should spell the control token", plain, ids)
print(f"ok tokenize/detokenize: {len(ids)} ids round trip, pieces join, = the completion's prompt")
EOF2
echo "ok $NBAD error objects: {message, type, param, code}, the param named"
# the API key
ST=$(curl -s -o "$T/body" -w '%{http_code}' "$(URL /v1/models)")
[ "$ST" = 401 ] && grep -q invalid_api_key "$T/body" || fail "no key: $ST $(cat "$T/body")"
ST=$(curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: Bearer sekrit2" "$(URL /v1/models)")
[ "$ST" = 401 ] || fail "wrong key: $ST"
ST=$(curl -s -o "$T/body" -w '%{http_code}' -H "Authorization: sekrit" "$(URL /v1/models)")
[ "$ST" = 401 ] || fail "key without Bearer: $ST"
ST=$(curl -s -o "$T/body" -w '%{http_code}' "$(URL /health)")
[ "$ST" = 200 ] && grep -q '"ok"' "$T/body" || fail "health: $ST $(cat "$T/body")"
echo "ok API key: 401 without, with a wrong one, without Bearer; /health open"
call GET /v1/models
[ "$ST" = 200 ] && grep -q '"id":"q"' "$T/body" || fail "models: $ST $(cat "$T/body")"
call GET /v1/models/q
[ "$ST" = 200 ] && grep -q '"object":"model"' "$T/body" || fail "models/q: $ST $(cat "$T/body")"
# a stream over raw HTTP: SSE framing, [DONE] last
curl -sN -H "Authorization: Bearer $KEY" -d "{$MSG,\"stream\":true,\"max_tokens\":5,\"temperature\":0}" "$(URL $CH)" >"$T/sse"
python3 - "$T/sse" <<'EOF' || fail "SSE framing: $(cat "$T/sse")"
import json, sys
ev = open(sys.argv[1]).read().split("\n\n")
assert ev[-1] == "" and ev[-2] == "data: [DONE]", ev[-2:]
chunks = [json.loads(e[6:]) for e in ev[:-2]]
assert all(e.startswith("data: ") for e in ev[:-1])
assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["choices"][0]["delta"] == {}
assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
assert "usage" not in chunks[0]
EOF
echo "ok raw SSE stream: role first, finish chunk, [DONE]"

# the OpenAI SDK
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "SKIP openai SDK checks: node/npm not installed"
elif ! { [ -f tests/serve/node_modules/openai/package.json ] && [ ! tests/serve/package-lock.json -nt tests/serve/node_modules/.package-lock.json ]; } &&
     ! (cd tests/serve && npm ci --no-audit --no-fund --loglevel=error >"$T/npm.log" 2>&1); then
  echo "SKIP openai SDK checks: npm ci failed (registry unreachable?): $(tail -n 3 "$T/npm.log" | tr '\n' ' ')"
else
  BASE="$(URL /v1)" KEY=$KEY MODEL=q node tests/serve/test.mjs >"$T/sdk.log" 2>&1 || fail "openai SDK checks"
  sed 's/^/  sdk: /' "$T/sdk.log"
fi

# metrics and the log
curl -s "$(URL /metrics)" >"$T/metrics"
for m in 'moefast_requests_total{status="200"}' 'moefast_requests_total{status="400"}' moefast_completion_tokens_total \
         moefast_prompt_tokens_total moefast_step_seconds_count; do
  v=$(awk -v n="$m" '$1 == n { print $2 }' "$T/metrics")
  [ -n "$v" ] && [ "$v" -gt 0 ] || fail "metric $m: '$v'"
done
for m in moefast_queue_depth moefast_slots_busy; do
  [ "$(awk -v n="$m" '$1 == n { print $2 }' "$T/metrics")" = 0 ] || fail "metric $m not 0"
done
grep -q '^# TYPE moefast_step_seconds summary' "$T/metrics" || fail "metrics: no step_seconds summary"
# the decode-only steps by size add up to the decode-only totals: steps, and
# tokens (size x steps); the concurrent requests above made steps of several
python3 - "$T/metrics" <<'EOF' || fail "metrics: decode steps by size"
import re, sys
m = {}
for l in open(sys.argv[1]):
    if not l.startswith("#") and l.strip():
        k, v = l.rsplit(" ", 1); m[k] = float(v)
by = {int(x.group(1)): v for k, v in m.items() if (x := re.fullmatch(r'moefast_decode_step_by_tokens_seconds_count\{tokens="(\d+)"\}', k))}
assert by and 'moefast_decode_step_by_tokens_seconds_count{tokens="17+"}' not in m, by
assert sum(by.values()) == m["moefast_decode_step_seconds_count"] > 0, (by, m["moefast_decode_step_seconds_count"])
assert sum(n * c for n, c in by.items()) == m["moefast_decode_step_tokens_total"], by
assert max(by) > 1, f"no decode step of several requests: {by}"
secs = sum(v for k, v in m.items() if k.startswith("moefast_decode_step_by_tokens_seconds_sum"))
assert abs(secs - m["moefast_decode_step_seconds_sum"]) < 1e-3, (secs, m["moefast_decode_step_seconds_sum"])
EOF
grep -Eq '^moefast serve: POST /v1/chat/completions id=[0-9]+ status=200 slot=[0-9]+ in=[0-9]+ cached=[0-9]+ out=[0-9]+ ttft=[0-9.]+s tok/s=[0-9.]+ time=[0-9.]+s finish=(stop|length)$' "$T/a.log" \
  || fail "no request log line: $(tail -n 3 "$T/a.log")"
grep -Eq '^moefast serve: POST /v1/chat/completions id=[0-9]+ status=400 ' "$T/a.log" || fail "no log line for a 400"
echo "ok metrics and one log line per request"
stop_server INT
[ "$SRC" = 0 ] || fail "server A: exit $SRC after SIGINT: $(tail -n 20 "$T/a.log")"
grep -q "Sanitizer" "$T/a.log" && fail "server A: sanitizer report: $(grep -A5 Sanitizer "$T/a.log" | head -20)"
echo "ok server A: SIGINT, exit $SRC"

# ---- server B: slowed, 2 slots, a queue of 1 ----------------------------------
MOEFAST_SERVE_STEP_DELAY_MS=25 start_server "$T/b.log" --slots 2 --queue 1 --ctx 256 -t 1 --shutdown-timeout 2
echo "server B on port $PORT"
bg() { # out-file curl-args...: a background client; its pid in BGPID
  out=$1; shift
  curl -sN -o "$out" -w '%{http_code}' "$@" >"$out.st" 2>/dev/null &
  BGPID=$!
  PIDS="$PIDS $BGPID"
}
LONGREQ='{"prompt":"Once upon a time","max_tokens":200,"temperature":0'
bg "$T/l1" -d "$LONGREQ,\"stream\":true}" "$(URL /v1/completions)"; L1=$BGPID
bg "$T/l2" -d "$LONGREQ}" "$(URL /v1/completions)"; L2=$BGPID
wait_metric moefast_slots_busy 2
bg "$T/l3" -d "$LONGREQ}" "$(URL /v1/completions)"; L3=$BGPID
wait_metric moefast_queue_depth 1
ST=$(curl -s -o "$T/body" -D "$T/head" -w '%{http_code}' -d "$LONGREQ}" "$(URL /v1/completions)")
[ "$ST" = 503 ] && grep -qi '^retry-after: 1' "$T/head" && grep -q '"error"' "$T/body" || fail "queue full: $ST $(cat "$T/head" "$T/body")"
echo "ok queue full: 503 with Retry-After"
# clients leave: a stream and a plain request; the queued one takes a slot
kill "$L1" "$L2"
wait_metric moefast_requests_cancelled_total 2
wait_metric moefast_queue_depth 0
wait_metric moefast_slots_busy 1
n=$(grep -c 'id=[0-9]* status=499 .*finish=cancelled' "$T/b.log")
[ "$n" = 2 ] || fail "disconnects: $n log lines with status=499 finish=cancelled: $(grep POST "$T/b.log")"
grep 'status=499' "$T/b.log" | grep -q ' out=200 ' && fail "a disconnected request ran to its end"
kill "$L3"
wait_metric moefast_slots_busy 0
wait_metric moefast_requests_cancelled_total 3
echo "ok 3 clients left mid-request: cancelled, slots freed"
# a streamed n = 2 whose client leaves: both choices cancelled, both slots freed
bg "$T/sn" -d "$LONGREQ,\"stream\":true,\"n\":2}" "$(URL /v1/completions)"; SN=$BGPID
wait_metric moefast_slots_busy 2
kill "$SN"
wait_metric moefast_requests_cancelled_total 5
wait_metric moefast_slots_busy 0
n=$(grep -c 'id=[0-9]* status=499 .*finish=cancelled' "$T/b.log")
[ "$n" = 5 ] || fail "streamed n = 2 left: $n log lines with status=499 (want 5): $(grep POST "$T/b.log")"
echo "ok a streamed n = 2 client left: both choices cancelled (two log lines), slots freed"
# a prompt whose prefix a BUSY slot holds: copied (moe_context_seq_copy), not
# prefilled again, and the answer is the cold one's
P=$(seq -s, 1 40)
bg "$T/p1" -d "{\"prompt\":[$P],\"max_tokens\":150,\"temperature\":0}" "$(URL /v1/completions)"; P1=$BGPID
c0=$(metric moefast_completion_tokens_total)
for _ in $(seq 1 200); do [ "$(metric moefast_completion_tokens_total)" -gt "$c0" ] && break; sleep 0.05; done
# (earlier requests of this server may have copied prefixes too: count from here)
k0=$(metric moefast_prompt_cache_copies_total)
call POST /v1/completions "{\"prompt\":[$P,50,51,52],\"max_tokens\":8,\"temperature\":0,\"return_tokens\":true}"
cp "$T/body" "$T/warm"
grep -q '"cached_tokens":40' "$T/warm" && [ "$(metric moefast_prompt_cache_copies_total)" = $((k0 + 1)) ] \
  || fail "busy-slot prefix: $ST $(cat "$T/warm") copies $k0 -> $(metric moefast_prompt_cache_copies_total)"
call POST /v1/completions "{\"prompt\":[$P,50,51,52],\"max_tokens\":8,\"temperature\":0,\"return_tokens\":true,\"cache_prompt\":false}"
tw=$(sed 's/.*"tokens":\(\[[0-9,]*\]\).*/\1/' "$T/warm"); tc=$(sed 's/.*"tokens":\(\[[0-9,]*\]\).*/\1/' "$T/body")
[ -n "$tw" ] && [ "$tw" = "$tc" ] || fail "busy-slot prefix copy changed the tokens: $tw vs cold $tc"
kill "$P1"
wait_metric moefast_slots_busy 0
echo "ok a busy slot's prefix copied (40 tokens cached), same tokens as a cold prefill"
# SIGTERM: a short request finishes, a long one is cancelled after 2 s, a queued one gets 503
bg "$T/g1" -d '{"prompt":"Hello","max_tokens":30,"temperature":0}' "$(URL /v1/completions)"; G1=$BGPID
bg "$T/g2" -d "$LONGREQ,\"stream\":true}" "$(URL /v1/completions)"; G2=$BGPID
wait_metric moefast_slots_busy 2
bg "$T/g3" -d "$LONGREQ}" "$(URL /v1/completions)"; G3=$BGPID
wait_metric moefast_queue_depth 1
stop_server TERM
wait "$G1" "$G2" "$G3"
[ "$SRC" = 0 ] || fail "server B: exit $SRC after SIGTERM: $(tail -n 20 "$T/b.log")"
grep -q "Sanitizer" "$T/b.log" && fail "server B: sanitizer report: $(grep -A5 Sanitizer "$T/b.log" | head -20)"
[ "$(cat "$T/g1.st")" = 200 ] && grep -q '"completion_tokens":30' "$T/g1" || fail "running request at SIGTERM: $(cat "$T/g1.st" "$T/g1")"
[ "$(cat "$T/g2.st")" = 200 ] && grep -q '^data: {"error"' "$T/g2" && tail -n 2 "$T/g2" | grep -q '^data: \[DONE\]' \
  || fail "stream cancelled at the deadline: $(cat "$T/g2.st"; tail -n 4 "$T/g2")"
[ "$(cat "$T/g3.st")" = 503 ] || fail "queued request at SIGTERM: $(cat "$T/g3.st" "$T/g3")"
curl -s -o /dev/null "$(URL /health)" && fail "server B still answers after exiting"
echo "ok SIGTERM: the running request finished, the long one ended with an error event, the queued one 503, exit 0"

echo "$nfail failures"
[ $nfail -eq 0 ]
