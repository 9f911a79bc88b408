#!/usr/bin/env python3
"""tools_family.py FAMILY PORT MODEL MOEFAST LOG — tool calls of one template
family (llama3, mistral, deepseek3, glm4, kimi-k2) on a random-weight model written by
`gen --chat-template FAMILY-tools`, served with MOEFAST_SERVE_TEST_TOOL_TEXT
= 'Let me check.' + the family's trigger (tests/cli_serve_tools.sh):
  required / named: the raw text starts with the family's call syntax (its
    markers written as the one control token each: the returned token ids),
    the calls valid; streamed == not streamed;
  auto through the hook: the text before the trigger is content, then a call;
  the same request again (its grammar from the cache) gives the same tokens;
  a conversation with calls and results sent back: the prompt's tokens equal
    the gen'd template rendered by jinja2 (when installed), and a call follows;
    kimi-k2 also without a system message (the template's default system
    turn, after the tools turn), with a named first message, and without tools;
  kimi-k2: each call's id is functions.NAME:IDX, IDX running on from the
    history's calls; a message's name in its header; bad history is a 400;
    with KIMI_PARALLEL (the hook writes a first call and starts a second):
    more calls, and the hook breaking the grammar (parallel false, an index
    not the running one) fails the request; with KIMI_MAX (the hook writes
    63 calls): the model's 64th ends the turn, the most calls it may have.
Prints one line per failure; exits 1 on any."""
import json, os, subprocess, sys, time, urllib.request
from gguf_meta import gguf_template
from http_post import post_json

FAM, PORT, MODEL, REL, LOG = sys.argv[1:6]
fails = 0
def bad(name, why):
    global fails
    fails += 1
    print(f"FAIL: {FAM} {name}: {why}")

def post_to(path, body): return post_json(PORT, path, body)

def post(body): return post_to("chat/completions", body)

def chat(name, body):
    st, txt = post(body)
    if st != 200: bad(name, f"status {st}: {txt[:300]}"); return None
    return json.loads(txt)

def stream_calls(body):
    st, txt = post({**body, "stream": True})
    calls, content, finish = {}, "", None
    for line in txt.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]": continue
        ch = json.loads(line[6:])["choices"][0]
        d = ch.get("delta", {})
        content += d.get("content") or ""
        for tc in d.get("tool_calls") or []:
            c = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
            c["name"] += tc.get("function", {}).get("name") or ""
            c["arguments"] += tc.get("function", {}).get("arguments") or ""
        finish = ch.get("finish_reason") or finish
    return content, [(c["name"], c["arguments"]) for _, c in sorted(calls.items())], finish

def raw_of(r):
    rid = int(r["id"].split("-")[1])
    for _ in range(100):
        for line in open(LOG):
            if line.startswith(f"moefast serve: id={rid} raw="): return json.loads(line.split(" raw=", 1)[1])
        time.sleep(0.05)
    return ""

def tok(text):
    out = subprocess.run([REL, "tokenize", "-m", MODEL, "-f", "-", "--json"], input=text.encode(), capture_output=True, check=True).stdout
    return json.loads(out)


US, DS = "\u2581", lambda x: "<\uff5c" + x + "\uff5c>"
START = {"llama3": '{"name": "', "mistral": '[TOOL_CALLS] [{"name": "',
         "deepseek3": DS(f"tool{US}calls{US}begin") + DS(f"tool{US}call{US}begin") + "function" + DS(f"tool{US}sep"),
         "glm4": "<tool_call>", "kimi-k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions."}[FAM]
# control tokens the grammar must have written as one token each (not the trigger, which is the prompt's)
MARKERS = {"llama3": [], "mistral": [], "deepseek3": [DS(f"tool{US}call{US}begin"), DS(f"tool{US}sep")],
           "glm4": ["</tool_call>"],
           "kimi-k2": ["<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>"]}[FAM]
TRIGGER = {"llama3": '{"name"', "mistral": "[TOOL_CALLS]", "deepseek3": DS(f"tool{US}calls{US}begin"),
           "glm4": "\n<think></think>\n<tool_call>", "kimi-k2": "<|tool_calls_section_begin|>"}[FAM]

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}]
MSGS = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Weather in Paris?"}]
KIMI_SYS = "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
base = {"messages": MSGS, "tools": TOOLS, "max_tokens": 120, "temperature": 0, "return_tokens": True,
        "parallel_tool_calls": False}

GLM_ARGS = ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"] if FAM == "glm4" else []
def glm_text(f):
    """A call as GLM-4.5's template writes it (string values raw, others JSON)."""
    a = json.loads(f["arguments"])
    return ("<tool_call>" + f["name"] + "\n" + "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v if isinstance(v, str) else json.dumps(v)}</arg_value>\n"
                                                      for k, v in a.items()) + "</tool_call>")
def glm_same(name, raw, calls):
    """the parsed arguments (strings JSON-escaped) give back the model's text"""
    want = "\n".join(glm_text(c["function"]) for c in calls)
    if raw != want: bad(name + "-kv", f"raw {raw!r} != the calls written back {want!r}")

if os.environ.get("GLM_ESCAPE"):
    # the server's hook wrote a whole GLM call whose raw string value holds a
    # quote and a backslash: arguments must be JSON with that string exactly
    r = chat("escape", {**base, "tool_choice": "auto"})
    calls = (r or {}).get("choices", [{}])[0].get("message", {}).get("tool_calls") or []
    try:
        a = json.loads(calls[0]["function"]["arguments"]) if calls else None
    except (ValueError, KeyError) as e:
        a = f"not JSON: {e}: {calls[0]['function']['arguments']!r}"
    if a != {"city": 'a"b\\c', "days": 3}: bad("escape", f"arguments {a!r}")
    print(f"tools {FAM} escape check:", "ok" if fails == 0 else "failed")
    sys.exit(1 if fails else 0)

if os.environ.get("KIMI_MAX"):
    # the hook wrote 63 calls (ping, indexes 0..62; 1068 of max_tokens); this model keeps calling:
    # it writes the 64th (index 63), the most a turn may have, then the
    # grammar ends the section
    r = chat("max-calls", {**base, "tool_choice": "auto", "parallel_tool_calls": True, "max_tokens": 1400})
    c = (r or {}).get("choices", [{}])[0]
    calls = c.get("message", {}).get("tool_calls") or []
    if len(calls) != 64 or c.get("finish_reason") != "tool_calls" or \
       any(x["id"] != f"functions.{x['function']['name']}:{i}" for i, x in enumerate(calls)):
        bad("max-calls", f"{len(calls)} calls (want 64), finish {c.get('finish_reason')}, ids {[x['id'] for x in calls[60:]]}")
    print(f"tools {FAM} max-calls check:", "ok" if fails == 0 else "failed")
    sys.exit(1 if fails else 0)

if os.environ.get("KIMI_PARALLEL"):
    # the hook wrote ping's call (index 0) and starts get_weather's (index 1)
    # (this model keeps calling: max_tokens cuts it a few calls on, each ~80
    # tokens, so streamed: the calls written before the cut; the most a turn
    # may have is KIMI_MAX's check)
    st, txt = post({**base, "tool_choice": "auto", "parallel_tool_calls": True, "max_tokens": 500, "stream": True})
    got = {}
    for line in txt.splitlines() if st == 200 else []:
        if not line.startswith("data: ") or line == "data: [DONE]": continue
        for tc in json.loads(line[6:])["choices"][0].get("delta", {}).get("tool_calls") or []:
            c = got.setdefault(tc["index"], {"id": "", "function": {"name": "", "arguments": ""}})
            c["id"] += tc.get("id") or ""
            for k in ("name", "arguments"): c["function"][k] += tc.get("function", {}).get(k) or ""
    calls = [c for _, c in sorted(got.items())]
    ids = [c["id"] for c in calls]
    if ids[:2] != ["functions.ping:0", "functions.get_weather:1"] or any(c["id"] != f"functions.{c['function']['name']}:{i}" for i, c in enumerate(calls)):
        bad("parallel", f"ids {ids}")
    elif len(calls) < 4: bad("parallel", f"{len(calls)} calls (this model keeps calling)")
    elif calls[0]["function"]["arguments"] != "{}" or not isinstance(json.loads(calls[1]["function"]["arguments"]).get("city"), str):
        bad("parallel", f"calls {calls}")
    # one call only: the grammar ends the section after the first, the hook's second call does not fit
    st, txt = post({**base, "tool_choice": "auto", "parallel_tool_calls": False})
    if st != 500 or "grammar" not in txt: bad("parallel-false", f"status {st}: {txt[:200]}")
    # a call in the history: the first index is 1, the hook's 0 does not fit
    hist = MSGS + [{"role": "assistant", "content": "", "tool_calls": [{"id": "functions.ping:0", "type": "function",
                   "function": {"name": "ping", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "functions.ping:0", "content": "pong"}]
    st, txt = post({**base, "messages": hist, "tool_choice": "auto", "parallel_tool_calls": True})
    if st != 500 or "grammar" not in txt: bad("index-from-history", f"status {st}: {txt[:200]}")
    print(f"tools {FAM} parallel checks:", "ok" if fails == 0 else "failed")
    sys.exit(1 if fails else 0)

def valid(name, calls, allowed=("get_weather", "ping"), idx0=0):
    if not calls: bad(name, "no calls"); return
    for i, c in enumerate(calls):
        f = c["function"]
        if FAM == "kimi-k2" and c["id"] != f"functions.{f['name']}:{idx0 + i}": bad(name, f"id {c['id']} (call {idx0 + i})")
        if f["name"] not in allowed: bad(name, f"function {f['name']}"); continue
        a = json.loads(f["arguments"])
        if f["name"] == "get_weather" and not (isinstance(a.get("city"), str) and len(a["city"]) <= 10 and
                                               isinstance(a.get("days"), int) and 1 <= a["days"] <= 7 and set(a) <= {"city", "days"}):
            bad(name, f"arguments {a}")
        if f["name"] == "ping" and a != {}: bad(name, f"arguments {a}")

for name, extra in (("required", {"tool_choice": "required"}),
                    ("named", {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}})):
    r = chat(name, {**base, **extra})
    if not r: continue
    c = r["choices"][0]
    if c["finish_reason"] != "tool_calls" or c["message"]["content"] is not None: bad(name, f"{c}")
    valid(name, c["message"].get("tool_calls"), ("get_weather",) if name == "named" else ("get_weather", "ping"))
    raw = raw_of(r)
    if not raw.startswith(START): bad(name, f"raw {raw!r} does not start with {START!r}")
    if FAM == "glm4": glm_same(name, raw, c["message"].get("tool_calls") or [])
    for m in MARKERS + (GLM_ARGS if name == "named" else []):
        t = tok(m)
        if t["n_tokens"] != 1 or t["ids"][0] not in c.get("tokens", []):
            bad(name, f"marker {m!r} not generated as its one token {t} in {c.get('tokens')}")
    # the same request again: its grammar comes from the cache (a constraint
    # reset to its start), the tokens are the same
    r2 = chat(name + "-again", {**base, **extra})
    if r2 and r2["choices"][0]["tokens"] != c["tokens"]: bad(name + "-again", "tokens differ from the first request's")
    s = stream_calls({**base, **extra})
    want = [(x["function"]["name"], x["function"]["arguments"]) for x in c["message"].get("tool_calls") or []]
    if s[1] != want or s[2] != "tool_calls": bad(name + "-stream", f"{s} != {want}")

r = chat("auto", {**base, "tool_choice": "auto"})
if r:
    c = r["choices"][0]
    if c["message"]["content"] != "Let me check." or c["finish_reason"] != "tool_calls": bad("auto", f"{c['message']} {c['finish_reason']}")
    valid("auto", c["message"].get("tool_calls"))

# a conversation with a call and its result sent back
CID = "functions.get_weather:0" if FAM == "kimi-k2" else "call_abcdefghi"
turn = MSGS + [{"role": "assistant", "content": None, "tool_calls": [
    {"id": CID, "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
    {"role": "tool", "tool_call_id": CID, "content": "sunny"}, {"role": "user", "content": "And Rome?"}]
if FAM == "kimi-k2":                                # Kimi's guide names the result's function: the header's name
    turn[3] = dict(turn[3], name="get_weather")
r = chat("turn", {**base, "messages": turn, "tool_choice": "required"})
if r: valid("turn", r["choices"][0]["message"].get("tool_calls"), idx0=1)

if FAM == "kimi-k2":                                # history the template cannot write: 400s naming messages
    call = turn[2]["tool_calls"][0]
    for name, msgs in (("no-id", turn[:2] + [dict(turn[2], tool_calls=[{k: v for k, v in call.items() if k != "id"}])] + turn[3:]),
                       ("args-number", turn[:2] + [dict(turn[2], tool_calls=[dict(call, function={"name": "get_weather", "arguments": 3})])] + turn[3:]),
                       ("calls-object", turn[:2] + [dict(turn[2], tool_calls=call)] + turn[3:]),
                       ("no-call-id", turn[:3] + [{k: v for k, v in turn[3].items() if k != "tool_call_id"}] + turn[4:]),
                       ("name-number", turn[:3] + [dict(turn[3], name=7)] + turn[4:])):
        st, txt = post({**base, "messages": msgs})
        if st != 400 or '"param": "messages"' not in txt.replace('":"', '": "'): bad("bad-" + name, f"status {st}: {txt[:200]}")

try:
    import jinja2
except ImportError:
    jinja2 = None
    print(f"skip: {FAM} prompts against the template (python3 jinja2 not installed)")
if jinja2 and FAM != "deepseek3":                   # deepseek3-tools renders plain turns only
    env = jinja2.Environment()
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)  # transformers'
    tmpl = env.from_string(gguf_template(MODEL))
    cases = [("prompt-tools", MSGS), ("prompt-turn", turn)]
    if FAM == "kimi-k2":                            # no system message: the template's default system turn
        cases += [("prompt-nosys", MSGS[1:]), ("prompt-nosys-turn", turn[1:]),
                  ("prompt-named-sys", [dict(MSGS[0], name="boss")] + MSGS[1:]),
                  ("prompt-named-user", [dict(MSGS[1], name="bob")])]
    for name, msgs in cases:
        jm = [dict(m, content=m["content"] or "") for m in msgs]
        if FAM == "glm4":                          # GLM-4.5's template takes the arguments as a mapping
            jm = [dict(m, tool_calls=[dict(tc, function=dict(tc["function"], arguments=json.loads(tc["function"]["arguments"])))
                                      for tc in m["tool_calls"]]) if m.get("tool_calls") else m for m in jm]
        text = tmpl.render(messages=jm, tools=TOOLS, add_generation_prompt=True)
        if FAM == "kimi-k2":                        # the gen'd template writes it after the tools turn
            d = text.find(KIMI_SYS)
            if (d >= 0) != (msgs[0]["role"] != "system") or (d >= 0 and text.find("tool_declare") > d):
                bad(name + "-default", f"default system turn at {d}: {text[:300]!r}")
        # the same prompt tokens: greedy continuations of the chat (tools shown,
        # nothing constrained under none) and of the rendered text are equal
        st, txt = post_to("completions", {"prompt": text, "max_tokens": 6, "temperature": 0, "return_tokens": True})
        r = chat(name + "-none", {**base, "messages": msgs, "tool_choice": "none", "max_tokens": 6})
        if st != 200 or not r or json.loads(txt)["choices"][0]["tokens"] != r["choices"][0]["tokens"]:
            bad(name + "-none", f"the chat's continuation differs from the rendered template's: {txt[:200]} {r and r['choices'][0]}")
        if FAM == "glm4":                          # enable_thinking false: /nothink and an empty think block
            nt = tmpl.render(messages=jm, tools=TOOLS, add_generation_prompt=True, enable_thinking=False)
            st, txt = post_to("completions", {"prompt": nt, "max_tokens": 6, "temperature": 0, "return_tokens": True})
            r = chat(name + "-nothink", {**base, "messages": msgs, "tool_choice": "none", "max_tokens": 6,
                                         "chat_template_kwargs": {"enable_thinking": False}})
            if nt == text or "/nothink" not in nt: bad(name + "-nothink", "the template ignores enable_thinking")
            if st != 200 or not r or json.loads(txt)["choices"][0]["tokens"] != r["choices"][0]["tokens"]:
                bad(name + "-nothink", f"the chat's continuation differs from the template's: {txt[:200]} {r and r['choices'][0]}")
            elif r["usage"]["prompt_tokens"] != tok(nt)["n_tokens"]:
                bad(name + "-nothink", f"prompt {r['usage']['prompt_tokens']} tokens, the template gives {tok(nt)['n_tokens']}")
        for choice, suffix in (("auto", ""), ("required", TRIGGER)):
            n = tok(text + suffix)["n_tokens"]
            r = chat(name, {**base, "messages": msgs, "tool_choice": choice, "max_tokens": 1})
            if r and r["usage"]["prompt_tokens"] != n:
                bad(f"{name}-{choice}", f"prompt {r['usage']['prompt_tokens']} tokens, the template gives {n}:\n{text + suffix}")

    if FAM == "kimi-k2":                            # no tools (chat.c alone): the default when no system message
        for name, msgs in (("plain-sys", MSGS), ("plain-nosys", MSGS[1:])):
            text = tmpl.render(messages=msgs, add_generation_prompt=True)
            if (KIMI_SYS in text) != (msgs[0]["role"] != "system"): bad(name, f"template text {text!r}")
            r = chat(name, {"messages": msgs, "max_tokens": 1, "temperature": 0})
            if r and r["usage"]["prompt_tokens"] != tok(text)["n_tokens"]:
                bad(name, f"prompt {r['usage']['prompt_tokens']} tokens, the template gives {tok(text)['n_tokens']}:\n{text}")

with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics", timeout=30) as m:
    hits = [l for l in m.read().decode().splitlines() if l.startswith("moefast_grammar_cache_hits_total ")]
if not hits or int(hits[0].split()[1]) < 4: bad("grammar-cache", f"{hits} (want at least 4 hits: each repeated grammar)")

print(f"tools {FAM} checks:", "ok" if fails == 0 else f"{fails} failed")
sys.exit(1 if fails else 0)
