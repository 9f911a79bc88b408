#!/usr/bin/env python3
"""reason_check.py PORT PORT_QWEN3 PORT_HARMONY MODEL MOEFAST — the checks of
tests/cli_serve_reason.sh (see there). PORT: the default --reasoning-format
(deepseek), chatml template, the hook writing HOOK; PORT_QWEN3: --chat-format
qwen3 --reasoning-format none, the same hook; PORT_HARMONY: --chat-format
harmony, the hook writing HHOOK. Prints one line per failure; exits 1 on any."""
import datetime, json, subprocess, sys
from gguf_meta import gguf_template
from http_post import post_json

PORT, PQ, PH, MODEL, REL = sys.argv[1:6]
REASON = "I could write <tool_call> here."
HOOK = f"<think>\n{REASON}\n</think>\n\nLet me check.<tool_call>"
fails = 0


def bad(name, why):
    global fails
    fails += 1
    print(f"FAIL: {name}: {why}")


def post(body, port):
    return post_json(port, "chat/completions", body)


def chat(name, body, port=PORT, want=200):
    st, txt = post(body, port)
    if st != want:
        bad(name, f"status {st} (want {want}): {txt[:300]}")
        return None
    return json.loads(txt)


def stream(name, body, port=PORT):
    """(reasoning, content, calls, finish, tokens) from the SSE deltas; every
    reasoning delta must come before the first content delta."""
    st, txt = post({**body, "stream": True}, port)
    if st != 200:
        bad(name, f"stream status {st}: {txt[:300]}"); return None
    reasoning, content, calls, finish, tokens = "", "", {}, None, None
    for line in txt.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]": continue
        ch = json.loads(line[6:])["choices"]
        if not ch: continue
        d = ch[0]["delta"]
        if d.get("reasoning_content"):
            if content: bad(name, f"reasoning after content: {d}")
            reasoning += d["reasoning_content"]
        content += d.get("content") or ""
        for tc in d.get("tool_calls") or []:
            c = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
            if "id" in tc: c["name"] = tc["function"]["name"]
            c["arguments"] += tc["function"].get("arguments", "")
        finish = ch[0]["finish_reason"] or finish
        tokens = ch[0].get("tokens", tokens)
    return reasoning, content, [calls[k] for k in sorted(calls)], finish, tokens


def tokens_of(text):
    out = subprocess.run([REL, "tokenize", "-m", MODEL, "-f", "-", "--json"], input=text.encode(),
                         capture_output=True, check=True).stdout
    return json.loads(out)["n_tokens"]


def plain(r):
    """(reasoning, content, calls, finish, tokens) of a non-streamed answer."""
    c = r["choices"][0]
    m = c["message"]
    calls = [{"name": t["function"]["name"], "arguments": t["function"]["arguments"]} for t in m.get("tool_calls") or []]
    return m.get("reasoning_content") or "", m["content"] or "", calls, c["finish_reason"], c.get("tokens")


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12, "description": "A city."},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7},
                                     "unit": {"type": "string", "enum": ["c", "f"]},
                                     "tags": {"type": "array", "items": {"type": "string"}},
                                     "where": {"type": "object", "properties": {"lat": {"type": "number"},
                                                                                "tag": {"type": "string"}},
                                               "required": ["lat"]}},
    "required": ["city", "days"]}}}]
MSGS = [{"role": "user", "content": "Weather in Paris?"}]
BASE = {"messages": MSGS, "tools": TOOLS, "tool_choice": "auto", "temperature": 0, "max_tokens": 160, "return_tokens": True}

# ---- the reasoning split off: thinking does not trigger a call, the call after </think> does
r = chat("split", BASE)
if r:
    p = plain(r)
    if p[0] != REASON: bad("split", f"reasoning_content {p[0]!r}, want {REASON!r}")
    if p[1] != "Let me check.": bad("split", f"content {p[1]!r}")
    if p[3] != "tool_calls" or len(p[2]) < 1 or p[2][0]["name"] != "get_weather": bad("split", f"calls {p[2]} finish {p[3]}")
    s = stream("split-stream", BASE)
    if s and s[:4] != p[:4]: bad("split-stream", f"streamed {s[:4]} != {p[:4]}")
    if s and s[4] != p[4]: bad("split-stream", "streamed tokens differ")
    # presentation only: the same tokens with the reasoning left in the content
    n = chat("inline", {**BASE, "reasoning_format": "none"})
    if n:
        q = plain(n)
        if q[4] != p[4]: bad("inline", "tokens differ from the split answer's")
        if q[0] or q[1] != HOOK[:-len("<tool_call>")]: bad("inline", f"reasoning {q[0]!r} content {q[1]!r}")
        s = stream("inline-stream", {**BASE, "reasoning_format": "none"})
        if s and s[:4] != q[:4]: bad("inline-stream", f"streamed {s[:4]} != {q[:4]}")

# ---- an unterminated think block cut by max_tokens: finish length, the reasoning so far
cut = {**BASE, "max_tokens": tokens_of("<think>\nI could write")}
r = chat("cut", cut)
if r:
    p = plain(r)
    if p[3] != "length" or p[1] != "" or p[2] or p[0] != "I could write":
        bad("cut", f"finish {p[3]} content {p[1]!r} reasoning {p[0]!r} calls {p[2]}")
    s = stream("cut-stream", cut)
    if s and s[:4] != p[:4]: bad("cut-stream", f"streamed {s[:4]} != {p[:4]}")

# ---- no think block: content untouched (the same text as with reasoning_format none)
free = {"messages": MSGS, "temperature": 0, "max_tokens": 12, "return_tokens": True}
a, b = chat("free", free), chat("free-none", {**free, "reasoning_format": "none"})
if a and b:
    if plain(a)[:2] != plain(b)[:2] or plain(a)[4] != plain(b)[4] or "reasoning_content" in a["choices"][0]["message"]:
        bad("free", f"{plain(a)} != {plain(b)}")
    s = stream("free-stream", free)
    if s and s[:2] != plain(a)[:2]: bad("free-stream", f"{s[:2]} != {plain(a)[:2]}")

# ---- --reasoning-format none: inline by default, the request field overrides it
r = chat("server-none", BASE, PQ)
if r and (plain(r)[0] or not plain(r)[1].startswith("<think>")): bad("server-none", f"{plain(r)[:2]}")
r = chat("server-none-field", {**BASE, "reasoning_format": "deepseek"}, PQ)
if r and plain(r)[0] != REASON: bad("server-none-field", f"{plain(r)[:2]}")

# ---- bad types: 400 naming the field
for name, body, param in (("format-type", {**free, "reasoning_format": 5}, "reasoning_format"),
                          ("format-value", {**free, "reasoning_format": "xml"}, "reasoning_format"),
                          ("kwargs-type", {**free, "chat_template_kwargs": []}, "chat_template_kwargs"),
                          ("thinking-type", {**free, "chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs"),
                          ("history-type", {**free, "messages": [{"role": "user", "content": "Hi"},
                                                                 {"role": "assistant", "content": "A", "reasoning_content": 5},
                                                                 {"role": "user", "content": "Q"}]}, "messages")):
    st, txt = post(body, PORT)
    if st != 400 or json.loads(txt)["error"]["param"] != param: bad(name, f"status {st}: {txt[:200]}")


# ---- reasoning sent back: rendered as Qwen3's template does (dropped before the
# last user query, kept in the agent loop after it); plain ChatML drops it
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 1}"}}
HIST = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello.", "reasoning_content": "A greeting."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "reasoning_content": "Need the tool.", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
NO_R = [{k: v for k, v in m.items() if k != "reasoning_content"} for m in HIST]
hb = {"tools": TOOLS, "temperature": 0, "max_tokens": 1}
a, b = chat("history-chatml", {**hb, "messages": HIST}), chat("history-chatml-bare", {**hb, "messages": NO_R})
if a and b and a["usage"]["prompt_tokens"] != b["usage"]["prompt_tokens"]:
    bad("history-chatml", "plain ChatML wrote reasoning_content into the prompt")
try:
    import jinja2
except ImportError:
    jinja2 = None
    print("skip: the prompt against Qwen3's template (python3 jinja2 not installed)")
QWEN3 = "tests/data/shared/vocab/qwen3-vocab.gguf"
if jinja2:
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
    tmpl = env.from_string(gguf_template(QWEN3))
    for name, msgs, kw in (("history-qwen3", HIST, {}), ("history-qwen3-bare", NO_R, {}), ("history-qwen3-early", HIST[:4], {}),
                           ("history-qwen3-nothink", HIST, {"enable_thinking": False})):
        want = tokens_of(tmpl.render(messages=msgs, tools=TOOLS, add_generation_prompt=True, **kw))
        r = chat(name, {**hb, "messages": msgs, "chat_template_kwargs": kw}, PQ)
        if r and r["usage"]["prompt_tokens"] != want:
            bad(name, f"prompt {r['usage']['prompt_tokens']} tokens, Qwen3's template gives {want}")


# ---- harmony (gpt-oss): the tools' namespace in the developer message, a call
# in the commentary channel, its result from functions.NAME, the reasoning
# before the call kept as analysis until a final answer follows
def harmony_system(effort="medium", tools=True, date=None):
    """gpt-oss's template's system message (the server's local date)."""
    date = date or datetime.date.today().isoformat()
    return ("<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
            f"Knowledge cutoff: 2024-06\nCurrent date: {date}\n\nReasoning: {effort}\n\n"
            "# Valid channels: analysis, commentary, final. Channel must be included for every message."
            + ("\nCalls to these tools must go to the commentary channel: 'functions'." if tools else "") + "<|end|>")


def harmony(msgs, final_follows=False, effort="medium"):
    dev = harmony_system(effort) + ("<|start|>developer<|message|># Instructions\n\nBe terse.\n\n# Tools\n\n## functions\n\nnamespace functions {\n\n"
           "// The weather.\ntype get_weather = (_: {\n// A city.\ncity: string,\ndays: number,\nunit?: \"c\" | \"f\",\n"
           "tags?: string[],\nwhere?: {\nlat: \n                number, tag?: \n                string},\n}) => any;\n\n"
           "} // namespace functions<|end|>")
    t = dev + "<|start|>user<|message|>Hi<|end|><|start|>assistant<|channel|>final<|message|>Hello.<|end|>"
    t += "<|start|>user<|message|>Weather in Paris?<|end|>"
    if not final_follows: t += "<|start|>assistant<|channel|>analysis<|message|>Need the tool.<|end|>"
    t += ("<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
          "{\"city\": \"Paris\", \"days\": 1}<|call|>"
          "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>sunny<|end|>")
    if final_follows: t += "<|start|>assistant<|channel|>final<|message|>Sunny.<|end|>"
    return t + "<|start|>assistant"


# (the date is read around the request: a run across midnight accepts either day)
for name, msgs, ff, extra, effort in (("harmony-loop", HIST, False, {}, "medium"),
                                      ("harmony-final", HIST + [{"role": "assistant", "content": "Sunny."}], True, {}, "medium"),
                                      ("harmony-effort", HIST, False, {"reasoning_effort": "high"}, "high"),
                                      ("harmony-effort-kwargs", HIST, False, {"chat_template_kwargs": {"reasoning_effort": "low"}}, "low")):
    before = tokens_of(harmony(msgs, ff, effort))
    r = chat(name, {**hb, "messages": msgs, **extra}, PH)
    want = {before, tokens_of(harmony(msgs, ff, effort))}
    if r and r["usage"]["prompt_tokens"] not in want:
        bad(name, f"prompt {r['usage']['prompt_tokens']} tokens, the harmony rendering gives {want}:\n{harmony(msgs, ff, effort)}")
# the effort reaches the prompt: the hook forces the same tokens, but their
# log-probabilities follow the prompt: "high" and "low" differ, an explicit
# "medium" equals the default
def effort_lp(extra):
    r = chat("effort-lp", {**hb, "messages": HIST, "max_tokens": 4, "logprobs": True, **extra}, PH)
    return r and [t["logprob"] for t in r["choices"][0]["logprobs"]["content"]]
lp = {e: effort_lp({"reasoning_effort": e} if e else {}) for e in ("high", "low", "medium", None)}
if lp["high"] == lp["low"] or lp["medium"] != lp[None] or not lp[None]:
    bad("effort-logprobs", f"{lp}")
# the system message without tools, and the instructions' closing blank line
# (gpt-oss's template: "# Instructions\n\nS\n\n"): the prompt's tokens
plain_msgs = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}]
want = tokens_of(harmony_system(tools=False) + "<|start|>developer<|message|># Instructions\n\nBe terse.\n\n<|end|>"
                 "<|start|>user<|message|>Hi<|end|><|start|>assistant")
r = chat("harmony-no-tools", {"messages": plain_msgs, "temperature": 0, "max_tokens": 1}, PH)
if r and r["usage"]["prompt_tokens"] != want: bad("harmony-no-tools", f"prompt {r['usage']['prompt_tokens']} tokens, want {want}")
for name, extra in (("effort-bad", {"reasoning_effort": "max"}), ("effort-type", {"reasoning_effort": 3}),
                    ("effort-kwargs-bad", {"chat_template_kwargs": {"reasoning_effort": "extreme"}})):
    st, txt = post({"messages": plain_msgs, "max_tokens": 1, **extra}, PH)
    if st != 400 or "low" not in txt: bad(name, f"status {st}: {txt[:200]}")
# ---- harmony's analysis channel returned as reasoning_content (the hook writes
# HHOOK there): the final channel's text is the content, the headers neither
HHOOK = "<|channel|>analysis<|message|>Think first.<|end|><|start|>assistant<|channel|>final<|message|>Hi"
hq = {"messages": MSGS, "tools": TOOLS, "tool_choice": "auto", "temperature": 0, "return_tokens": True,
      "max_tokens": tokens_of(HHOOK) + 3}
r = chat("harmony-split", hq, PH)
if r:
    p = plain(r)
    if p[0] != "Think first." or not p[1].startswith("Hi"): bad("harmony-split", f"reasoning {p[0]!r} content {p[1]!r}")
    s = stream("harmony-split-stream", hq, PH)
    if s and (s[:4] != p[:4] or s[4] != p[4]): bad("harmony-split-stream", f"streamed {s[:4]} != {p[:4]}")
    n = chat("harmony-inline", {**hq, "reasoning_format": "none"}, PH)
    if n and (plain(n)[4] != p[4] or not plain(n)[1].startswith(HHOOK)): bad("harmony-inline", f"{plain(n)[:2]}")
hc = {**hq, "max_tokens": tokens_of("<|channel|>analysis<|message|>Think")}
r = chat("harmony-cut", hc, PH)
if r:
    p = plain(r)
    if p[:4] != ("Think", "", [], "length"): bad("harmony-cut", f"{p[:4]}")
    s = stream("harmony-cut-stream", hc, PH)
    if s and s[:4] != p[:4]: bad("harmony-cut-stream", f"streamed {s[:4]} != {p[:4]}")
st, txt = post({**hb, "messages": HIST[:4] + [{"role": "tool", "tool_call_id": "x", "content": "?"}]}, PH)
if st != 400: bad("harmony-orphan-result", f"status {st}: {txt[:200]}")

sys.exit(1 if fails else 0)
