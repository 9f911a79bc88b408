#!/usr/bin/env python3
"""tools_check.py PORT MODEL MOEFAST TMPDIR PORT_DS3 PORT_HARMONY — the checks of
tests/cli_serve_tools.sh (see there). PORT serves the model with
MOEFAST_SERVE_TEST_TOOL_TEXT='Let me check.<tool_call>' (auto requests write
that first); the others with --chat-format deepseek3 / harmony. Prints one
line per failure; exits 1 on any. Prompts are kept short: under ASan a
prefill runs at ~150 tokens/s."""
import json, subprocess, sys, threading, time
from http_post import post_json
from gguf_meta import gguf_template

PORT, MODEL, REL, TMP = sys.argv[1:5]
OTHER = list(zip(("deepseek3", "harmony"), sys.argv[5:7]))     # servers with --chat-format
PORT2 = PORT
fails = 0


def bad(name, why):
    global fails
    fails += 1
    print(f"FAIL: {name}: {why}")


def post(body, port=PORT, raw=None):
    return post_json(port, "chat/completions", body, raw)


WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12},
    "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "unit": {"enum": ["c", "f"]}}, "required": ["city", "days"]}
ADD = {"type": "object", "properties": {"a": {"type": "number", "minimum": -10, "maximum": 10},
                                        "b": {"type": "boolean"}}, "required": ["a", "b"]}
ITEMS = {"type": "object", "properties": {"items": {"type": "array", "maxItems": 2, "items": {
    "type": "object", "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99},
                                     "tag": {"type": ["string", "null"], "maxLength": 4}},
    "required": ["id"]}}}, "required": ["items"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "parameters": ADD}},
         {"type": "function", "function": {"name": "ping"}}]
ITEMS_TOOL = [{"type": "function", "function": {"name": "put_items", "parameters": ITEMS}}]
SCHEMA = {t["function"]["name"]: t["function"].get("parameters", {"type": "object", "properties": {}}) for t in TOOLS + ITEMS_TOOL}
MSGS = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Weather in Paris?"}]


def valid(v, s):
    """The JSON Schema subset the tools use; additionalProperties absent = false (as the grammar)."""
    if "enum" in s:
        return v in s["enum"]
    ts = s.get("type")
    ts = ts if isinstance(ts, list) else [ts]
    for t in ts:
        if t == "null" and v is None: return True
        if t == "boolean" and isinstance(v, bool): return True
        if t == "string" and isinstance(v, str) and len(v) <= s.get("maxLength", 1 << 30): return True
        if t in ("integer", "number") and isinstance(v, (int, float)) and not isinstance(v, bool):
            if t == "integer" and not isinstance(v, int): continue
            if s.get("minimum", -1e308) <= v <= s.get("maximum", 1e308): return True
        if t == "array" and isinstance(v, list) and len(v) <= s.get("maxItems", 1 << 30):
            if all(valid(x, s.get("items", {})) for x in v): return True
        if t == "object" and isinstance(v, dict):
            props = s.get("properties", {})
            if set(v) <= set(props) and set(s.get("required", [])) <= set(v) and all(valid(v[k], props[k]) for k in v):
                return True
    return False


def check_calls(name, calls, allowed=None):
    if not calls:
        bad(name, "no tool_calls"); return
    ids = set()
    for c in calls:
        f = c.get("function", {})
        if c.get("type") != "function" or not c.get("id") or c["id"] in ids:
            bad(name, f"bad call shape {c}")
        ids.add(c.get("id"))
        if f.get("name") not in (allowed or SCHEMA):
            bad(name, f"function {f.get('name')!r} not allowed"); continue
        try:
            a = json.loads(f["arguments"])
        except Exception as e:
            bad(name, f"arguments do not parse ({e}): {f.get('arguments')!r}"); continue
        if not valid(a, SCHEMA[f["name"]]):
            bad(name, f"arguments invalid for {f['name']}: {a!r}")


def chat(name, body, port=PORT, want=200):
    st, txt = post(body, port)
    if st != want:
        bad(name, f"status {st} (want {want}): {txt[:300]}")
        return None
    return json.loads(txt)


def stream(name, body, port=PORT):
    """The answer reassembled from the SSE deltas as OpenAI's SDKs do."""
    st, txt = post({**body, "stream": True}, port)
    if st != 200:
        bad(name, f"stream status {st}: {txt[:300]}"); return None
    content, calls, finish = "", {}, None
    for line in txt.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]": continue
        ch = json.loads(line[6:])["choices"]
        if not ch: continue
        d = ch[0]["delta"]
        content += d.get("content") or ""
        for tc in d.get("tool_calls") or []:
            c = calls.setdefault(tc["index"], {"function": {"name": "", "arguments": ""}})
            if "id" in tc:
                if "id" in c: bad(name, "a call's id sent twice")
                c["id"], c["type"] = tc["id"], tc["type"]
                c["function"]["name"] = tc["function"]["name"]
            elif "id" not in c:
                bad(name, "arguments before the call's first delta")
            c["function"]["arguments"] += tc["function"].get("arguments", "")
        finish = ch[0]["finish_reason"] or finish
    return content, [calls[k] for k in sorted(calls)], finish


def strip_ids(calls):
    return [(c["function"]["name"], c["function"]["arguments"]) for c in calls or []]


def raw_log(log, rid):
    """The request's raw text from the log (written once the answer went out: polled)."""
    for _ in range(100):
        for line in open(log):
            if line.startswith(f"moefast serve: id={rid} raw="):
                return json.loads(line.split(" raw=", 1)[1])
        time.sleep(0.05)
    return None


base = {"messages": MSGS, "tools": TOOLS, "max_tokens": 200, "return_tokens": True}

# ---- required / named: a call from the first token ----------------------------
r = chat("required", {**base, "tool_choice": "required", "temperature": 0})
if r:
    c = r["choices"][0]
    if c["finish_reason"] != "tool_calls": bad("required", f"finish {c['finish_reason']}")
    if c["message"]["content"] is not None: bad("required", f"content {c['message']['content']!r} before the call")
    check_calls("required", c["message"].get("tool_calls"))
    rid = int(r["id"].split("-")[1])
    raw = raw_log(f"{TMP}/log1", rid)
    if not raw or not raw.startswith('<tool_call>\n{"name": "'):
        bad("required", f"raw text does not start with the call: {raw!r}")
    s = stream("required-stream", {**base, "tool_choice": "required", "temperature": 0})
    if s and (s[0] != "" or strip_ids(s[1]) != strip_ids(c["message"].get("tool_calls")) or s[2] != "tool_calls"):
        bad("required-stream", f"streamed {s} != {c['message']}")

for fn in ("put_items", "ping"):       # arrays of objects with nullable members; no arguments
    r = chat(f"named-{fn}", {**base, "tools": TOOLS + ITEMS_TOOL, "tool_choice": {"type": "function", "function": {"name": fn}},
                             "temperature": 1, "seed": 3, "parallel_tool_calls": False})
    if r:
        c = r["choices"][0]
        calls = c["message"].get("tool_calls") or []
        check_calls(f"named-{fn}", calls, {fn})
        if len(calls) != 1 or c["finish_reason"] != "tool_calls":
            bad(f"named-{fn}", f"{len(calls)} calls, finish {c['finish_reason']} (want 1, tool_calls)")

# sampled: every answer valid; parallel false exactly one call; true: several for some seed
multi = 0
for seed, par in ((0, True), (1, True), (2, True), (0, False), (1, False), (2, False)):
    if True:
        r = chat(f"sampled-{seed}-{par}", {**base, "tool_choice": "required", "temperature": 1.3, "seed": seed,
                                           "parallel_tool_calls": par})
        if not r: continue
        c = r["choices"][0]
        calls = c["message"].get("tool_calls") or []
        if c["finish_reason"] == "length": continue
        check_calls(f"sampled-{seed}-{par}", calls)
        if not par and len(calls) != 1: bad(f"sampled-{seed}-{par}", f"{len(calls)} calls with parallel_tool_calls false")
        multi += par and len(calls) > 1
if multi == 0: bad("parallel", "no seed gave more than one call with parallel_tool_calls true")

# the other families: a call in their syntax (the log's raw text), streamed the same
for fam, port in OTHER:
    b = {**base, "tools": TOOLS[1:], "tool_choice": "required", "temperature": 1, "seed": 1, "max_tokens": 300}
    r = chat(fam, b, port=port)
    if not r: continue
    c = r["choices"][0]
    if c["finish_reason"] != "tool_calls": bad(fam, f"finish {c['finish_reason']}"); continue
    check_calls(fam, c["message"].get("tool_calls"))
    raw = raw_log(f"{TMP}/log{2 if fam == 'deepseek3' else 3}", int(r["id"].split("-")[1])) or ""
    want = {"deepseek3": "<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>function<\uff5ctool\u2581sep\uff5c>",
            "harmony": "<|channel|>commentary to=functions."}[fam]
    if not raw.startswith(want): bad(fam, f"raw text {raw!r}")
    if fam == "deepseek3":
        s = stream(fam + "-stream", b, port=port)
        if s and strip_ids(s[1]) != strip_ids(c["message"].get("tool_calls")): bad(fam + "-stream", f"{s} != {c}")

# streamed arguments never split a UTF-8 character: sampled strings (the random
# vocabulary's multi-byte pieces), streamed == not streamed
NOTE = [{"type": "function", "function": {"name": "note", "parameters": {"type": "object", "properties": {
    "text": {"type": "string", "maxLength": 40}}, "required": ["text"]}}}]
for seed in (1, 2, 3):
    b = {**base, "tools": NOTE, "tool_choice": "required", "temperature": 1.5, "seed": seed, "max_tokens": 120,
         "parallel_tool_calls": False}
    r = chat(f"utf8-{seed}", b)
    s = stream(f"utf8-stream-{seed}", b)
    if r and s and r["choices"][0]["finish_reason"] == "tool_calls" and strip_ids(s[1]) != strip_ids(r["choices"][0]["message"].get("tool_calls")):
        bad(f"utf8-stream-{seed}", f"{s[1]} != {r['choices'][0]['message'].get('tool_calls')}")

# a call cut by max_tokens
r = chat("cut", {**base, "tool_choice": "required", "max_tokens": 6})
if r and (r["choices"][0]["finish_reason"] != "length" or r["choices"][0]["message"].get("tool_calls")):
    bad("cut", f"a cut call: {r['choices'][0]}")

# ---- none / auto ------------------------------------------------------------------
for mode, port in (("none", PORT), ("auto", OTHER[1][1] if OTHER else PORT)):   # auto: a server without the hook
    r = chat(mode, {**base, "tools": TOOLS[1:], "tool_choice": mode, "max_tokens": 12, "temperature": 0}, port=port)
    if r:
        c = r["choices"][0]
        if c["finish_reason"] not in ("stop", "length") or c["message"].get("tool_calls") or not isinstance(c["message"]["content"], str):
            bad(mode, f"{c}")

# auto, the model writes text then the trigger (test hook): content, then the grammar's call
r = chat("auto-call", {**base, "temperature": 0}, port=PORT2)
if r:
    c = r["choices"][0]
    if c["message"]["content"] != "Let me check." or c["finish_reason"] != "tool_calls":
        bad("auto-call", f"content {c['message']['content']!r} finish {c['finish_reason']}")
    check_calls("auto-call", c["message"].get("tool_calls"))
    s = stream("auto-call-stream", {**base, "temperature": 0}, port=PORT2)
    if s and (s[0] != "Let me check." or strip_ids(s[1]) != strip_ids(c["message"].get("tool_calls")) or s[2] != "tool_calls"):
        bad("auto-call-stream", f"streamed {s} != {c['message']}")

# ---- exactness: alone == among concurrent requests -----------------------------
NB = 3
bodies = [{**base, "tools": TOOLS[1:2], "tool_choice": "required", "temperature": 1.0, "seed": 100 + i,
           "max_tokens": 40 + 10 * i} for i in range(NB)]
alone = [chat(f"alone-{i}", b) for i, b in enumerate(bodies)]
together = [None] * NB
def run(i): together[i] = chat(f"together-{i}", bodies[i])
th = [threading.Thread(target=run, args=(i,)) for i in range(NB)]
for t in th: t.start()
for t in th: t.join()
for i in range(NB):
    if alone[i] and together[i] and alone[i]["choices"][0]["tokens"] != together[i]["choices"][0]["tokens"]:
        bad(f"concurrent-{i}", "tokens differ alone and among others")

# ---- multi-turn: assistant tool_calls and tool results ------------------------
turn = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}},
    {"id": "call_2", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": true}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "call_2", "content": "2"}]
r = chat("multi-turn", {**base, "messages": turn, "tool_choice": "required", "max_tokens": 100, "temperature": 0})
if r: check_calls("multi-turn", r["choices"][0]["message"].get("tool_calls"))




try:
    import jinja2
except ImportError:
    jinja2 = None
    print("skip: the prompt against Qwen3's template (python3 jinja2 not installed)")
if jinja2:
    env = jinja2.Environment()
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)   # transformers' tojson
    tmpl = env.from_string(gguf_template(MODEL))
    for name, msgs in (("prompt-tools", MSGS), ("prompt-turn", turn)):
        jm = [dict(m, content=m["content"] or "") for m in msgs]
        text = tmpl.render(messages=jm, tools=TOOLS, add_generation_prompt=True)
        out = subprocess.run([REL, "tokenize", "-m", MODEL, "-f", "-", "--json"], input=text.encode(),
                             capture_output=True, check=True).stdout
        n = json.loads(out)["n_tokens"]
        r = chat(name, {**base, "messages": msgs, "tool_choice": "auto", "max_tokens": 1})
        if r and r["usage"]["prompt_tokens"] != n:
            bad(name, f"prompt {r['usage']['prompt_tokens']} tokens, Qwen3's template gives {n}:\n{text}")
        # required: the prompt is followed by the trigger, which the model then continues
        out = subprocess.run([REL, "tokenize", "-m", MODEL, "-f", "-", "--json"], input=(text + "<tool_call>").encode(),
                             capture_output=True, check=True).stdout
        n = json.loads(out)["n_tokens"]
        r = chat(name, {**base, "messages": msgs, "tool_choice": "required", "max_tokens": 1})
        if r and r["usage"]["prompt_tokens"] != n:
            bad(name + "-required", f"prompt {r['usage']['prompt_tokens']} tokens, want {n} (the template's and the trigger's)")

# ---- bad inputs: 400 naming the field -------------------------------------------
def fn(name="f", params=None):
    f = {"name": name}
    if params is not None: f["parameters"] = params
    return {"type": "function", "function": f}

BAD = [
    ("tools-type", {"tools": {"a": 1}}, "tools", "must be an array"),
    ("tools-empty", {"tools": []}, "tools", "must not be empty"),
    ("tool-type", {"tools": [{"type": "retrieval"}]}, "tools", "tools[0]"),
    ("tool-name", {"tools": [fn("bad name")]}, "tools", "tools[0].function.name"),
    ("tool-dup", {"tools": [fn("f"), fn("f")]}, "tools", "given twice"),
    ("tool-params", {"tools": [fn("f", [1])]}, "tools", "must be a JSON Schema object"),
    ("tool-schema", {"tools": [fn("f"), fn("g", {"type": "object", "properties": {"x": {"type": "string", "pattern": "a"}}})]},
     "tools", "'tools[1].function.parameters': json-schema: unsupported keyword 'pattern' at #/properties/x"),
    ("choice-unknown", {"tools": [fn()], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice", "'nope', which is not in 'tools'"),
    ("choice-bad", {"tools": [fn()], "tool_choice": "always"}, "tool_choice", "'always'"),
    ("choice-shape", {"tools": [fn()], "tool_choice": {"type": "function"}}, "tool_choice", "must be"),
    ("choice-no-tools", {"tool_choice": "auto"}, "tool_choice", "only allowed when 'tools'"),
    ("parallel-type", {"tools": [fn()], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "must be a boolean"),
    ("with-format", {"tools": [fn()], "response_format": {"type": "json_object"}}, "tools", "cannot be combined"),
    ("tool-msg-id", {"messages": MSGS + [{"role": "tool", "content": "x"}]}, "messages", "tool_call_id"),
    ("tool-calls-shape", {"messages": MSGS + [{"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}]},
     "messages", "tool_calls[0]"),
]
for name, extra, param, text in BAD:
    st, txt = post({"messages": MSGS, "max_tokens": 4, **extra})
    try:
        err = json.loads(txt).get("error", {})
    except Exception:
        err = {}
    if st != 400 or err.get("param") != param or text not in err.get("message", ""):
        bad(name, f"status {st}, error {err} (want 400, param {param}, '{text}')")
# invalid UTF-8 in the body: a 400, never a 500
st, _ = post(None, raw=b'{"messages":[{"role":"user","content":"\xff\xfe"}],"tools":[]}')
if st != 400: bad("utf8", f"status {st}")

print("tools checks:", "ok" if fails == 0 else f"{fails} failed")
sys.exit(1 if fails else 0)
