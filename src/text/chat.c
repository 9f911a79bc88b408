/* chat.c — chat prompt rendering for the formats moefast knows (see
 * docs/TOKENIZER.md, "Chat formats"). Templates are recognised, not
 * executed: moefast has no Jinja engine, so each known template family has a
 * hand-written renderer and anything else is an error naming the formats.
 *
 *  chatml  <|im_start|>ROLE\nCONTENT<|im_end|>\n ... then <|im_start|>assistant\n
 *          (the synthetic qwen3moe/laguna templates, Qwen2.5, Hermes).
 *          Plain ChatML, as the messages give it (Qwen3's own template
 *          is the qwen3 format).
 *  qwen3   Qwen3's template (ChatML; recognised by <|im_start|> and </think>):
 *          an assistant turn's <think>R</think> is split off its content and
 *          R written back as <think>\nR\n</think>\n\n only in the turns after
 *          the last user query that is not a tool response (an agent loop's
 *          calls), else dropped; enable_thinking=false is not applied.
 *  laguna  <system>\nCONTENT\n</system>\n<user>\nCONTENT\n</user>\n
 *          <assistant>\nCONTENT\n</assistant>\n ... then <assistant>\n
 *          (poolside Laguna's own role tags; reconstructed from public
 *          descriptions, not checked against the real template).
 *  deepseek3  SYSTEM\n\n<｜User｜>CONTENT<｜Assistant｜>CONTENT<｜end▁of▁sentence｜>
 *          ... then <｜Assistant｜> (DeepSeek-V3/R1's turn markers, as llama.cpp's
 *          built-in DeepSeek-V3 rendering writes them; the BOS the Jinja
 *          template prepends is the tokenizer's business, tool calls and
 *          R1's reasoning handling are not applied).
 *  glm4    [gMASK]<sop><|ROLE|>\nCONTENT ... then <|assistant|>\n
 *          (GLM-4 / GLM-4.5; as llama.cpp's built-in chatglm4 renders it,
 *          without GLM-4.5's <think> handling or tool calls).
 *  glm45   GLM-4.5/4.6's template (zai-org's chat_template.jinja, recognised by
 *          [gMASK]<sop> and its <arg_key> tool-call syntax): [gMASK]<sop>,
 *          <|system|>\nS, <|user|>\nU, assistant turns as
 *          <|assistant|>\n<think></think>\nCONTENT (content stripped; the
 *          reasoning of a turn after the last user turn, taken from
 *          <think>R</think> in the content, is kept as \n<think>R</think>),
 *          runs of tool results as <|observation|> then
 *          \n<tool_response>\nR\n</tool_response> each, then <|assistant|>
 *          (enable_thinking undefined: the model opens its own think block;
 *          the pseudo-role "enable_thinking" with content "false" writes
 *          the template's enable_thinking=false: "/nothink" after each user
 *          message not already ending so, and <|assistant|>\n<think></think>).
 *          Tool calls are written into the assistant content by the caller
 *          (serve), in the template's <tool_call> / <arg_key> form.
 *  harmony <|start|>ROLE<|message|>CONTENT<|end|> ..., assistant turns as
 *          <|start|>assistant<|channel|>final<|message|>CONTENT<|end|>, then
 *          <|start|>assistant (OpenAI's harmony format of gpt-oss), after the
 *          system message gpt-oss's template always writes first (model
 *          identity, knowledge cutoff, current date, reasoning effort, the
 *          valid channels; harmony_system below). A system message becomes
 *          the developer message "# Instructions\n\nCONTENT\n\n" as the
 *          template writes it. Pseudo-roles that set the system message and
 *          are not rendered: "reasoning_effort" (low / medium / high;
 *          default medium), "current_date" (YYYY-MM-DD; default today in
 *          local time, the template's strftime_now), "functions" (the
 *          request declares function tools: the template's line routing
 *          calls to the commentary channel). Pseudo-roles for an agent
 *          loop's history (serve writes them; OpenAI's harmony format, the
 *          cookbook's rendering):
 *          "developer" the developer message as given (instructions and
 *          the tools' namespace); "analysis" / "commentary" an assistant
 *          message on that channel; "to=functions.NAME" a call, content the
 *          arguments: <|start|>assistant<|channel|>commentary to=functions.NAME
 *          <|constrain|>json<|message|>ARGS<|call|>; "functions.NAME" its
 *          result: <|start|>functions.NAME to=assistant<|channel|>commentary
 *          <|message|>RESULT<|end|>.
 *  llama3  <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|> ... then
 *          <|start_header_id|>assistant<|end_header_id|>\n\n (Llama 3.x, as
 *          llama.cpp's built-in llama3 rendering; role tool is written as
 *          Llama 3.1's ipython). The 3.1 template's date/"Environment"
 *          system preamble is written by the caller that lists tools
 *          (serve), not here; the BOS is the tokenizer's business.
 *  mistral [SYSTEM_PROMPT]S[/SYSTEM_PROMPT] [INST]U[/INST] A</s>, tool results
 *          [TOOL_RESULTS]C[/TOOL_RESULTS], the pseudo-role available_tools
 *          [AVAILABLE_TOOLS]C[/AVAILABLE_TOOLS] (Mistral-Small-3.1's v7
 *          template, its marker order; CONTENT as given, so the caller
 *          writes the template's spaces and JSON). Older [INST] templates
 *          (v1-v3, which fold the system message into the last user turn)
 *          are recognised too and rendered this same way. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "text/chat.h"
#include "base/util.h"

typedef struct sbuf { char *p; size_t n, cap; bool oom; } sbuf;

static void sb_add(sbuf *b, const char *s) {
    size_t l = strlen(s);
    if (b->oom) return;
    if (b->n + l + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + l + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = true; return; }
        b->p = np; b->cap = nc;
    }
    memcpy(b->p + b->n, s, l + 1);
    b->n += l;
}

static void sb_addn(sbuf *b, const char *s, const char *e) {
    char *t = strndup(s, (size_t)(e - s));
    if (!t) { b->oom = true; return; }
    sb_add(b, t);
    free(t);
}

typedef void (*render_fn)(sbuf *b, const moe_chat_msg *msgs, size_t n, bool gen);

static void render_chatml(sbuf *b, const moe_chat_msg *msgs, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        sb_add(b, "<|im_start|>"); sb_add(b, msgs[i].role); sb_add(b, "\n");
        sb_add(b, msgs[i].content); sb_add(b, "<|im_end|>\n");
    }
    if (gen) sb_add(b, "<|im_start|>assistant\n");
}

/* The text after the last </think> of c, '\n's stripped ahead (Qwen3's
 * content.split('</think>')[-1].lstrip('\n')); c itself without one. */
static const char *after_think(const char *c) {
    const char *last = NULL;
    for (const char *p = c; (p = strstr(p, "</think>")); p += 8) last = p;
    if (!last) return c;
    for (c = last + 8; *c == '\n'; c++) {}
    return c;
}

/* Qwen3's template: ChatML, with an assistant turn's <think>R</think> split
 * off its content; R is kept (as <think>\nR\n</think>\n\n) only in the turns
 * after the last user query (a user turn that is not only a tool response:
 * the calls and results of the current agent loop), and dropped before. */
static void render_qwen3(sbuf *b, const moe_chat_msg *msgs, size_t n, bool gen) {
    size_t last_query = n ? n - 1 : 0;
    for (size_t i = n; i-- > 0;) {
        const char *c = msgs[i].content, *ce = c + strlen(c);
        const bool response = !strncmp(c, "<tool_response>", 15) && ce - c >= 16 && !strcmp(ce - 16, "</tool_response>");
        if (!strcmp(msgs[i].role, "user") && !response) { last_query = i; break; }
    }
    for (size_t i = 0; i < n; i++) {
        const char *c = msgs[i].content;
        if (strcmp(msgs[i].role, "assistant")) { render_chatml(b, msgs + i, 1, false); continue; }
        const char *close = strstr(c, "</think>"), *r = c, *re = c, *content = after_think(c);
        if (close) {                               /* .split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
            for (re = close; re > c && re[-1] == '\n'; re--) {}
            for (const char *p = c; (p = strstr(p, "<think>")) && p + 7 <= re; p += 7) r = p + 7;
            while (r < re && *r == '\n') r++;
        }
        sb_add(b, "<|im_start|>assistant\n");
        if (i > last_query && (i + 1 == n || r < re)) {
            while (r < re && *r == '\n') r++;    /* reasoning_content.strip('\n') */
            while (re > r && re[-1] == '\n') re--;
            sb_add(b, "<think>\n");
            sb_addn(b, r, re);
            sb_add(b, "\n</think>\n\n");
            while (*content == '\n') content++;
        }
        sb_add(b, content); sb_add(b, "<|im_end|>\n");
    }
    if (gen) sb_add(b, "<|im_start|>assistant\n");
}

static void render_laguna(sbuf *b, const moe_chat_msg *msgs, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        sb_add(b, "<"); sb_add(b, msgs[i].role); sb_add(b, ">\n");
        sb_add(b, msgs[i].content);
        sb_add(b, "\n</"); sb_add(b, msgs[i].role); sb_add(b, ">\n");
    }
    if (gen) sb_add(b, "<assistant>\n");
}

#define DS_USER "<\xef\xbd\x9cUser\xef\xbd\x9c>"              /* <｜User｜> */
#define DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"     /* <｜Assistant｜> */
#define DS_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"   /* <｜end▁of▁sentence｜> */

static void render_deepseek3(sbuf *b, const moe_chat_msg *msgs, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(msgs[i].role, "system")) {
            sb_add(b, msgs[i].content); sb_add(b, "\n\n");
        } else if (!strcmp(msgs[i].role, "user")) {
            sb_add(b, DS_USER); sb_add(b, msgs[i].content);
        } else if (!strcmp(msgs[i].role, "assistant")) {
            sb_add(b, DS_ASSISTANT); sb_add(b, msgs[i].content); sb_add(b, DS_EOS);
        }
    }
    if (gen) sb_add(b, DS_ASSISTANT);
}

static void render_glm4(sbuf *b, const moe_chat_msg *msgs, size_t n, bool gen) {
    sb_add(b, "[gMASK]<sop>");
    for (size_t i = 0; i < n; i++) {
        sb_add(b, "<|"); sb_add(b, msgs[i].role); sb_add(b, "|>\n");
        sb_add(b, msgs[i].content);
    }
    if (gen) sb_add(b, "<|assistant|>\n");
}

/* Python's str.strip() over [a, e): advances *a, returns the new end. */
static const char *py_strip(const char **a, const char *e) {
    while (*a < e && strchr(" \t\n\r\f\v", **a)) ++*a;
    while (e > *a && strchr(" \t\n\r\f\v", e[-1])) e--;
    return e;
}

/* One GLM-4.5 assistant turn: the template splits <think>R</think> off the
 * content and keeps R only after the last user turn. */
static void glm45_assistant(sbuf *b, const char *c, bool keep_reasoning) {
    const char *ce = c + strlen(c), *r = "", *re = r, *close = strstr(c, "</think>");
    if (close) {
        re = close;                                    /* .split('</think>')[0].rstrip('\n') */
        while (re > c && re[-1] == '\n') re--;
        r = c;                                         /* .split('<think>')[-1] */
        for (const char *p = c; (p = strstr(p, "<think>")) && p < re; p += 7) r = p + 7;
        if (r > re) r = re;
        while (r < re && *r == '\n') r++;             /* .lstrip('\n') */
        const char *last = close;                      /* .split('</think>')[-1].lstrip('\n') */
        for (const char *p = close; (p = strstr(p, "</think>")); p += 8) last = p;
        c = last + 8;
        while (*c == '\n') c++;
    }
    sb_add(b, "<|assistant|>\n<think>");
    const char *rs = r, *rse = py_strip(&rs, re);
    if (keep_reasoning && r < re) sb_addn(b, rs, rse);
    sb_add(b, "</think>");
    const char *cs = c, *cse = py_strip(&cs, ce);
    if (cse > cs) { sb_add(b, "\n"); sb_addn(b, cs, cse); }
}

static bool ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), k = strlen(tail);
    return n >= k && !memcmp(s + n - k, tail, k);
}

static void render_glm45(sbuf *b, const moe_chat_msg *msgs, size_t n, bool gen) {
    size_t last_user = (size_t)-1;
    bool nothink = false;                        /* the pseudo-role enable_thinking "false" */
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(msgs[i].role, "user")) last_user = i;
        if (!strcmp(msgs[i].role, "enable_thinking") && !strcmp(msgs[i].content, "false")) nothink = true;
    }
    sb_add(b, "[gMASK]<sop>");
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role, *c = msgs[i].content;
        if (!strcmp(r, "system") || !strcmp(r, "user")) {
            sb_add(b, "<|"); sb_add(b, r); sb_add(b, "|>\n"); sb_add(b, c);
            if (nothink && !strcmp(r, "user") && !ends_with(c, "/nothink")) sb_add(b, "/nothink");
        }
        else if (!strcmp(r, "assistant")) glm45_assistant(b, c, last_user == (size_t)-1 || i > last_user);
        else if (!strcmp(r, "tool")) {
            if (i == 0 || strcmp(msgs[i - 1].role, "tool")) sb_add(b, "<|observation|>");
            sb_add(b, "\n<tool_response>\n"); sb_add(b, c); sb_add(b, "\n</tool_response>");
        }
    }
    if (gen) sb_add(b, nothink ? "<|assistant|>\n<think></think>" : "<|assistant|>");
}

static bool harmony_setting(const char *role) {
    return !strcmp(role, "reasoning_effort") || !strcmp(role, "current_date") || !strcmp(role, "functions");
}

/* gpt-oss's template's build_system_message, without builtin tools. */
static void harmony_system(sbuf *b, const moe_chat_msg *msgs, size_t n) {
    const char *effort = "medium", *date = NULL;
    bool tools = false;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(msgs[i].role, "reasoning_effort")) effort = msgs[i].content;
        else if (!strcmp(msgs[i].role, "current_date")) date = msgs[i].content;
        else if (!strcmp(msgs[i].role, "functions")) tools = true;
    }
    char today[32];
    if (!date) {
        const time_t t = time(NULL);
        struct tm tm;
        if (!localtime_r(&t, &tm) || !strftime(today, sizeof today, "%Y-%m-%d", &tm)) snprintf(today, sizeof today, "1970-01-01");
        date = today;
    }
    sb_add(b, "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
              "Knowledge cutoff: 2024-06\nCurrent date: ");
    sb_add(b, date);
    sb_add(b, "\n\nReasoning: ");
    sb_add(b, effort);
    sb_add(b, "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.");
    if (tools) sb_add(b, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    sb_add(b, "<|end|>");
}

static void render_harmony(sbuf *b, const moe_chat_msg *msgs, size_t n, bool gen) {
    harmony_system(b, msgs, n);
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role, *c = msgs[i].content;
        if (harmony_setting(r)) continue;
        const bool sys = !strcmp(r, "system");
        if (!strncmp(r, "to=", 3)) {               /* a call: the recipient in the channel, as the model writes it */
            sb_add(b, "<|start|>assistant<|channel|>commentary "); sb_add(b, r);
            sb_add(b, " <|constrain|>json<|message|>"); sb_add(b, c); sb_add(b, "<|call|>");
            continue;
        }
        if (!strncmp(r, "functions.", 10)) {       /* a tool's result, addressed back to the assistant */
            sb_add(b, "<|start|>"); sb_add(b, r); sb_add(b, " to=assistant<|channel|>commentary<|message|>");
            sb_add(b, c); sb_add(b, "<|end|>");
            continue;
        }
        const bool channel = !strcmp(r, "analysis") || !strcmp(r, "commentary");
        sb_add(b, "<|start|>"); sb_add(b, sys ? "developer" : channel ? "assistant" : r);
        if (!strcmp(r, "assistant")) sb_add(b, "<|channel|>final");
        if (channel) { sb_add(b, "<|channel|>"); sb_add(b, r); }
        sb_add(b, "<|message|>");
        if (sys) sb_add(b, "# Instructions\n\n");
        sb_add(b, c);
        if (sys) sb_add(b, "\n\n");
        sb_add(b, "<|end|>");
    }
    if (gen) sb_add(b, "<|start|>assistant");
}

static void render_llama3(sbuf *b, const moe_chat_msg *msgs, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        sb_add(b, "<|start_header_id|>");
        sb_add(b, strcmp(msgs[i].role, "tool") ? msgs[i].role : "ipython");
        sb_add(b, "<|end_header_id|>\n\n"); sb_add(b, msgs[i].content); sb_add(b, "<|eot_id|>");
    }
    if (gen) sb_add(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render_mistral(sbuf *b, const moe_chat_msg *msgs, size_t n, bool gen) {
    (void)gen;                         /* the prompt ends with [/INST]: nothing to add */
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role, *c = msgs[i].content;
        if (!strcmp(r, "system")) { sb_add(b, "[SYSTEM_PROMPT]"); sb_add(b, c); sb_add(b, "[/SYSTEM_PROMPT]"); }
        else if (!strcmp(r, "user")) { sb_add(b, "[INST]"); sb_add(b, c); sb_add(b, "[/INST]"); }
        else if (!strcmp(r, "assistant")) { sb_add(b, c); sb_add(b, "</s>"); }
        else if (!strcmp(r, "tool")) { sb_add(b, "[TOOL_RESULTS]"); sb_add(b, c); sb_add(b, "[/TOOL_RESULTS]"); }
        else if (!strcmp(r, "available_tools")) { sb_add(b, "[AVAILABLE_TOOLS]"); sb_add(b, c); sb_add(b, "[/AVAILABLE_TOOLS]"); }
    }
}

/* Kimi-K2 (llama.cpp's LLM_CHAT_TEMPLATE_KIMI_K2): each turn a role token,
 * the role's name, <|im_middle|>, the content, <|im_end|>; tool results as a
 * system-token turn named tool. Other roles get no header, as there.
 * moonshotai's templates add what the built-in leaves out; kimi_k2 writes
 * those parts (serve's tool turns use the pseudo-roles):
 *   dflt: the default system turn, <|im_system|>system<|im_middle|>DFLT
 *     <|im_end|>, before the first message when that is not a system one
 *     (Kimi-K2-Instruct's `loop.first and messages[0]['role'] != 'system'`:
 *     after the tools turn, nothing for an empty conversation); NULL: none;
 *   "tool_declare": the tools turn, <|im_system|>tool_declare<|im_middle|>C
 *     <|im_end|>, which the template writes first, outside the messages (so
 *     it is not the "first message" above);
 *   "name": the next message's header names C in place of its role (the
 *     template's `message.get('name') or message['role']`; "" names none). */
static void kimi_k2(sbuf *b, const moe_chat_msg *msgs, size_t n, bool gen, const char *dflt, size_t dflt_len) {
    bool first = true;
    const char *name = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!strcmp(r, "tool_declare")) {
            sb_add(b, "<|im_system|>tool_declare<|im_middle|>"); sb_add(b, msgs[i].content); sb_add(b, "<|im_end|>");
            continue;
        }
        if (!strcmp(r, "name")) { name = *msgs[i].content ? msgs[i].content : NULL; continue; }
        if (first && dflt && strcmp(r, "system")) {
            sb_add(b, "<|im_system|>system<|im_middle|>"); sb_addn(b, dflt, dflt + dflt_len); sb_add(b, "<|im_end|>");
        }
        first = false;
        const bool user = !strcmp(r, "user"), asst = !strcmp(r, "assistant");
        if (user || asst || name || !strcmp(r, "system") || !strcmp(r, "tool")) {
            sb_add(b, user ? "<|im_user|>" : asst ? "<|im_assistant|>" : "<|im_system|>");
            sb_add(b, name ? name : r);
            sb_add(b, "<|im_middle|>");
        }
        name = NULL;
        sb_add(b, msgs[i].content); sb_add(b, "<|im_end|>");
    }
    if (gen) sb_add(b, "<|im_assistant|>assistant<|im_middle|>");
}

static void render_kimi_k2(sbuf *b, const moe_chat_msg *msgs, size_t n, bool gen) { kimi_k2(b, msgs, n, gen, NULL, 0); }

/* The default system sentence a Kimi template writes, or NULL: the text
 * between the first <|im_system|>system<|im_middle|> and <|im_end|> that is a
 * plain literal (no template syntax, quotes, escapes or tags), in a template
 * that tests for a first message that is not a system one. Kimi-K2-Instruct
 * (-0905) and -Thinking: "You are Kimi, an AI assistant created by Moonshot
 * AI."; Moonlight / Kimi-VL: "You are a helpful assistant". llama.cpp's
 * built-in kimi-k2 writes none, nor does its test template (which has no
 * such literal), so that keeps rendering as llama.cpp does. */
static const char *kimi_default_system(const char *tmpl, size_t *len) {
    static const char HDR[] = "<|im_system|>system<|im_middle|>";
    if (!tmpl || !(strstr(tmpl, "!= 'system'") || strstr(tmpl, "!= \"system\""))) return NULL;
    for (const char *p = tmpl; (p = strstr(p, HDR)); p++) {
        const char *s = p + sizeof HDR - 1, *e = strstr(s, "<|im_end|>");
        if (!e) return NULL;
        size_t l = (size_t)(e - s);
        if (l == 0 || l > 1024) continue;
        bool plain = true;
        for (const char *c = s; c < e && plain; c++) plain = !strchr("{}%'\"\\<>\n\r", *c);
        if (plain) { *len = l; return s; }
    }
    return NULL;
}

static const struct { const char *name; render_fn fn; } FORMATS[] = {
    {"chatml", render_chatml},
    {"qwen3", render_qwen3},
    {"laguna", render_laguna},
    {"deepseek3", render_deepseek3},
    {"glm4", render_glm4},
    {"glm45", render_glm45},
    {"harmony", render_harmony},
    {"llama3", render_llama3},
    {"mistral", render_mistral},
    {"kimi-k2", render_kimi_k2},
};

const char *moe_chat_formats(void) { return "chatml, laguna, deepseek3, glm4, glm45, harmony, kimi-k2, llama3, mistral, qwen3"; }

const char *moe_chat_detect(const char *tmpl) {
    if (!tmpl) return NULL;
    /* Qwen3's template splits <think> reasoning off assistant turns */
    if (strstr(tmpl, "<|im_start|>") && strstr(tmpl, "</think>")) return "qwen3";
    if (strstr(tmpl, "<|im_start|>")) return "chatml";
    /* Laguna's template closes assistant turns with </assistant> (its EOT
     * token) and is published as laguna_glm_thinking_*; either marks it */
    if (strstr(tmpl, "</assistant>") || strstr(tmpl, "laguna_glm_thinking")) return "laguna";
    if (strstr(tmpl, DS_USER) && strstr(tmpl, DS_ASSISTANT) && strstr(tmpl, DS_EOS)) return "deepseek3";
    /* GLM-4's templates open with these two special tokens; GLM-4.5's
     * (and 4.6's) also describe their <arg_key> tool-call syntax */
    if (strstr(tmpl, "[gMASK]<sop>") && strstr(tmpl, "<arg_key>")) return "glm45";
    if (strstr(tmpl, "[gMASK]<sop>")) return "glm4";
    /* gpt-oss's template writes harmony's message headers */
    if (strstr(tmpl, "<|start|>") && strstr(tmpl, "<|message|>")) return "harmony";
    /* Kimi-K2: llama.cpp's test, its assistant header as the template writes it */
    if (strstr(tmpl, "<|im_assistant|>assistant<|im_middle|>")) return "kimi-k2";
    /* Llama 3.x: its header and end-of-turn tokens (every 3.0-3.3 template) */
    if (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "<|end_header_id|>") && strstr(tmpl, "<|eot_id|>")) return "llama3";
    /* Mistral: [INST] turns; Llama 2's [INST] templates carry <<SYS>> */
    if (strstr(tmpl, "[INST]") && strstr(tmpl, "[/INST]") && !strstr(tmpl, "<<SYS>>")) return "mistral";
    return NULL;
}

int moe_chat_render_tmpl(const char *tmpl, const char *format, const moe_chat_msg *msgs, size_t n,
                         bool add_generation_prompt, char **out, char *err, size_t errlen) {
    if (!out) return moe_errf(err, errlen, MOE_EINVAL, "chat: out is NULL");
    *out = NULL;
    if (n && !msgs) return moe_errf(err, errlen, MOE_EINVAL, "chat: %zu messages but msgs is NULL", n);
    const char *name = format;
    if (!name) {
        if (!tmpl)
            return moe_errf(err, errlen, MOE_EUNSUPPORTED,
                            "chat: the model has no tokenizer.chat_template; pick a format with --chat-format NAME (known: %s)",
                            moe_chat_formats());
        name = moe_chat_detect(tmpl);
        if (!name)
            return moe_errf(err, errlen, MOE_EUNSUPPORTED,
                            "chat: tokenizer.chat_template is not a known format (known: %s); pick one with --chat-format NAME",
                            moe_chat_formats());
    }
    render_fn fn = NULL;
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
        if (!strcmp(FORMATS[i].name, name)) fn = FORMATS[i].fn;
    if (!fn)
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "chat: unknown chat format '%s' (known: %s)", name, moe_chat_formats());
    for (size_t i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r || !*r || strpbrk(r, "<>\n") || !msgs[i].content)
            return moe_errf(err, errlen, MOE_EINVAL, "chat: message %zu has %s", i,
                            !msgs[i].content ? "no content" : "an empty or malformed role");
    }
    sbuf b = {0};
    sb_add(&b, ""); /* an empty conversation still gives "" */
    if (fn == render_kimi_k2) {                    /* the template's own default system turn, if it writes one */
        size_t dl = 0;
        const char *d = kimi_default_system(tmpl, &dl);
        kimi_k2(&b, msgs, n, add_generation_prompt, d, dl);
    } else {
        fn(&b, msgs, n, add_generation_prompt);
    }
    if (b.oom) { free(b.p); return moe_errf(err, errlen, MOE_ENOMEM, "chat: out of memory rendering %zu messages", n); }
    *out = b.p;
    return MOE_OK;
}

int moe_chat_render(const moe_model *m, const char *format, const moe_chat_msg *msgs, size_t n,
                    bool add_generation_prompt, char **out, char *err, size_t errlen) {
    if (!m && !format) {
        if (out) *out = NULL;
        return moe_errf(err, errlen, MOE_EINVAL, "chat: no model and no format");
    }
    return moe_chat_render_tmpl(m ? moe_model_chat_template(m) : NULL, format, msgs, n,
                                add_generation_prompt, out, err, errlen);
}
