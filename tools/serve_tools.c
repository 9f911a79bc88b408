/* serve_tools.c — tool calls in `moefast serve` (docs/SERVE.md, "Tool calls").
 *
 * The calls are written in the syntax of the model's chat template family
 * (Qwen3/Hermes <tool_call> JSON for chatml, DeepSeek-V3's tool-call tokens,
 * gpt-oss harmony's commentary channel, Llama 3.x's JSON, Mistral's
 * [TOOL_CALLS] list, GLM-4.5's <arg_key> pairs, Kimi-K2's tool-call
 * section), and a grammar built from the
 * tools' parameter schemas constrains them: only a supplied function can be
 * named, its arguments are JSON valid for its schema. Under tool_choice
 * required or a named function the call's trigger is put after the prompt
 * and the grammar holds from the first generated token; under auto the
 * model writes freely until it writes the trigger, then the grammar takes
 * over (the trigger's bytes are accepted into it). Each request has its own
 * grammar and constraint: batch composition never changes a request's
 * tokens. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

/* ---- the call syntax of each template family ---------------------------------
 * A turn's calls: trigger open CALL close (sep open CALL close)* end, where
 * CALL is {"name": "NAME", "arguments": ARGS} (name_in_json) or NAME mid
 * ARGS. The trigger starts the calls: the grammar engages there. */
typedef struct tool_syntax {
    const char *family;
    const char *trigger, *open, *mid, *close, *sep, *end;
    bool name_in_json, parallel;
    const char *args_key;      /* name_in_json: the arguments' member (NULL: "arguments") */
    const char *first;         /* after the trigger, before the first call (NULL: none) */
    bool first_sp;             /* an optional space before `first` (the template writes one) */
    bool trigger_in_call;      /* the trigger is the call's own start (not written apart) */
    bool kv_args;              /* GLM-4.5: arguments as <arg_key>K</arg_key>\n<arg_value>V</arg_value>\n, not JSON */
    const char *forced;        /* required / named: the text put after the prompt (NULL: the trigger) */
    /* Kimi-K2: a call is open ID mid ARGS close, ID = id_ns NAME ":" IDX
     * (IDX the call's running index in the conversation) and the call's id
     * (NULL: open NAME mid ARGS close, ids made up) */
    const char *id_ns;
} tool_syntax;

#define DS_(x) "<\xef\xbd\x9c" x "\xef\xbd\x9c>"          /* <｜x｜> */
#define US "\xe2\x96\x81"                                   /* ▁ */

static const tool_syntax SYNTAX[] = {
    /* Qwen3's template (and Hermes 2 Pro's) */
    {"chatml", "<tool_call>", "\n", NULL, "\n</tool_call>", "\n<tool_call>", "", true, true, NULL, NULL, false, false, false, NULL, NULL},
    /* laguna and glm4: their own tool syntaxes are not implemented; the
     * Hermes form, described in the system prompt */
    {"laguna", "<tool_call>", "\n", NULL, "\n</tool_call>", "\n<tool_call>", "", true, true, NULL, NULL, false, false, false, NULL, NULL},
    {"glm4", "<tool_call>", "\n", NULL, "\n</tool_call>", "\n<tool_call>", "", true, true, NULL, NULL, false, false, false, NULL, NULL},
    /* DeepSeek-V3's template */
    {"deepseek3", DS_("tool" US "calls" US "begin"), DS_("tool" US "call" US "begin") "function" DS_("tool" US "sep"),
     "\n```json\n", "\n```" DS_("tool" US "call" US "end"), "", DS_("tool" US "calls" US "end"), false, true, NULL, NULL, false, false, false, NULL, NULL},
    /* gpt-oss: one call per assistant message, ended by <|call|> */
    {"harmony", "<|channel|>commentary to=functions.", "", " <|constrain|>json<|message|>", "", "", "", false, false, NULL, NULL, false, false, false, NULL, NULL},
    /* Llama 3.1-3.3's JSON tool calling: the message is the call, one per
     * turn ({"name": N, "parameters": A}); <|python_tag|> (built-in tools)
     * is not generated */
    {"llama3", "{\"name\"", "", NULL, "", "", "", true, false, "parameters", NULL, false, true, false, NULL, NULL},
    /* Mistral's v3+ list: [TOOL_CALLS] [{"name": N, "arguments": A}, ...]
     * (the space optional; the newer [TOOL_CALLS]N[ARGS]A form is not) */
    {"mistral", "[TOOL_CALLS]", "", NULL, "", ", ", "]", true, true, "arguments", "[", true, false, false, NULL, NULL},
    /* GLM-4.5's template: <tool_call>NAME\n then per argument
     * <arg_key>K</arg_key>\n<arg_value>V</arg_value>\n (strings raw, others
     * JSON), </tool_call>; calls joined by \n; an assistant turn with calls
     * opens with an empty think block */
    {"glm45", "<tool_call>", "", "\n", "</tool_call>", "\n<tool_call>", "", false, true, NULL, NULL, false, false,
     true, "\n<think></think>\n<tool_call>", NULL},
    /* Kimi-K2's (Kimi-K2-Instruct's template, llama.cpp's parser):
     * <|tool_calls_section_begin|> then per call <|tool_call_begin|>
     * functions.NAME:IDX<|tool_call_argument_begin|>A<|tool_call_end|>,
     * <|tool_calls_section_end|>; serve_kimi.c writes the prompt */
    {"kimi-k2", "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>", "",
     "<|tool_calls_section_end|>", false, true, NULL, NULL, false, false, false, NULL, "functions."},
};

static const char *args_key(const tool_syntax *sy) { return sy->args_key ? sy->args_key : "arguments"; }

/* The family of the model's template: the markers chat.c recognises
 * (moe_chat_detect is internal; the CLI uses the public API only). */
static const tool_syntax *syntax_of(srv *s) {
    const char *f = s->chat_format, *t = moe_model_chat_template(s->m);
    if (!f && t) {
        if (strstr(t, "<|im_start|>")) f = "chatml";
        else if (strstr(t, "</assistant>") || strstr(t, "laguna_glm_thinking")) f = "laguna";
        else if (strstr(t, DS_("User")) && strstr(t, DS_("Assistant"))) f = "deepseek3";
        else if (strstr(t, "[gMASK]<sop>") && strstr(t, "<arg_key>")) f = "glm45";
        else if (strstr(t, "[gMASK]<sop>")) f = "glm4";
        else if (strstr(t, "<|start|>") && strstr(t, "<|message|>")) f = "harmony";
        else if (strstr(t, "<|im_assistant|>assistant<|im_middle|>")) f = "kimi-k2";
        else if (strstr(t, "<|start_header_id|>") && strstr(t, "<|end_header_id|>") && strstr(t, "<|eot_id|>")) f = "llama3";
        else if (strstr(t, "[INST]") && strstr(t, "[/INST]") && !strstr(t, "<<SYS>>")) f = "mistral";
    }
    for (size_t i = 0; f && i < sizeof SYNTAX / sizeof SYNTAX[0]; i++)
        if (!strcmp(SYNTAX[i].family, f)) return &SYNTAX[i];
    return &SYNTAX[0];
}

/* ---- growing strings ---------------------------------------------------------- */

void tb_addn(tbuf *b, const char *s, size_t l) {
    if (b->oom) return;
    if (b->n + l + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + l + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->oom = true; return; }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, l);
    b->n += l;
    b->p[b->n] = 0;
}
void tb_add(tbuf *b, const char *s) { if (s) tb_addn(b, s, strlen(s)); }

/* A GBNF literal ("" never written: the parser wants something to match). */
static void tb_lit(tbuf *b, const char *s) {
    if (!s || !*s) return;
    tb_add(b, " \"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') { char e[3] = {'\\', *s, 0}; tb_add(b, e); }
        else if (*s == '\n') tb_add(b, "\\n");
        else if (*s == '\r') tb_add(b, "\\r");
        else if (*s == '\t') tb_add(b, "\\t");
        else tb_addn(b, s, 1);
    }
    tb_add(b, "\"");
}

/* The control token whose name is exactly p[0..n) (not an end of
 * generation), or -1. */
static int control_token(srv *s, const char *p, size_t n) {
    int32_t ids[4];
    size_t need = 0;
    const char *pc;
    size_t l = 1;
    char err[MOE_ERR_LEN];
    if (moe_tokenize(s->m, p, n, false, true, ids, 4, &need, err, sizeof err) || need != 1) return -1;
    if (moe_token_is_eog(s->m, ids[0]) || moe_token_piece(s->m, ids[0], false, &pc, &l) || l) return -1;
    return ids[0];
}

/* A literal of the call syntax, its markers that are the model's control
 * tokens written as <[ID]> (docs/GRAMMAR.md): the model must write each as
 * the one token, as its template does, never spell it in text pieces. */
static void tb_lit_tok(tbuf *b, srv *s, const char *lit) {
    if (!lit) return;
    const size_t n = strlen(lit);
    size_t done = 0;
    for (size_t i = 0; i < n; i++) {
        if (lit[i] != '<' && lit[i] != '[') continue;
        for (size_t j = i + 2; j <= n; j++) {
            if (lit[j - 1] != '>' && lit[j - 1] != ']') continue;
            const int id = control_token(s, lit + i, j - i);
            if (id < 0) continue;
            char *seg = strndup(lit + done, i - done), ref[24];
            if (!seg) { b->oom = true; return; }
            tb_lit(b, seg);
            free(seg);
            snprintf(ref, sizeof ref, " <[%d]>", id);
            tb_add(b, ref);
            done = j;
            i = j - 1;
            break;
        }
    }
    tb_lit(b, lit + done);
}

/* A compiled schema's GBNF with every rule name prefixed ("t3-"), so the
 * tools' grammars live side by side in one grammar. Names are words
 * starting with a letter outside literals, classes, counts and comments. */
static void tb_renamed(tbuf *b, const char *g, const char *prefix) {
    for (const char *p = g; *p;) {
        if (*p == '"' || *p == '[') {
            const char close = *p == '"' ? '"' : ']';
            const char *q = p + 1;
            while (*q && *q != close) q += (*q == '\\' && q[1]) ? 2 : 1;
            if (*q) q++;
            tb_addn(b, p, (size_t)(q - p));
            p = q;
        } else if (*p == '{' || *p == '#') {
            const char *q = p;
            while (*q && *q != (*p == '{' ? '}' : '\n')) q++;
            tb_addn(b, p, (size_t)(q - p));
            p = q;
        } else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')) {
            const char *q = p;
            while ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '-' || *q == '_') q++;
            tb_add(b, prefix);
            tb_addn(b, p, (size_t)(q - p));
            p = q;
        } else
            tb_addn(b, p++, 1);
    }
}

/* GLM-4.5's key/value arguments: the section at the end of this file. */
static int kv_grammars(srv *s, json_t *tools, char **gbnf, json_t **kv_raw, api_err *e);
static int kv_messages(json_t *ms, const moe_chat_msg *msgs, size_t n, json_t *tools, moe_chat_msg *o,
                       size_t *n_out, char ***owned, size_t *n_owned, api_err *e);
static bool kv_progress(srv_tools *t, const char *base);

/* ---- the request's tools ----------------------------------------------------- */

static bool valid_name(const char *n) {
    const size_t l = strlen(n);
    if (l == 0 || l > 64) return false;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
            return false;
    return true;
}

/* tool i's parameters compiled (GBNF, malloc'd), or -1 after api_fail. */
static int tool_gbnf(json_t *tool, size_t i, const char **name, char **gbnf, api_err *e) {
    json_t *ty = json_object_get(tool, "type"), *fn = json_object_get(tool, "function");
    if (!json_is_object(tool) || !json_is_string(ty) || strcmp(json_string_value(ty), "function"))
        return api_fail(e, 400, "tools", "invalid_value", "'tools[%zu]' must be {\"type\": \"function\", \"function\": {...}}", i);
    json_t *nm = json_object_get(fn, "name"), *ps = json_object_get(fn, "parameters"), *ds = json_object_get(fn, "description");
    if (!json_is_object(fn)) return api_fail(e, 400, "tools", "invalid_value", "'tools[%zu].function' must be an object", i);
    if (!json_is_string(nm) || !valid_name(json_string_value(nm)))
        return api_fail(e, 400, "tools", "invalid_value", "'tools[%zu].function.name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -", i);
    if (ds && !json_is_null(ds) && !json_is_string(ds))
        return api_fail(e, 400, "tools", "invalid_type", "'tools[%zu].function.description' must be a string", i);
    if (ps && !json_is_null(ps) && !json_is_object(ps))
        return api_fail(e, 400, "tools", "invalid_type", "'tools[%zu].function.parameters' must be a JSON Schema object", i);
    *name = json_string_value(nm);
    /* no parameters: a function without arguments, {} */
    char *txt = ps && !json_is_null(ps) ? json_dumps(ps, JSON_COMPACT) : strdup("{\"type\":\"object\",\"properties\":{}}");
    char err[MOE_ERR_LEN];
    if (!txt) return api_fail(e, 500, NULL, NULL, "out of memory");
    const int rc = moe_json_schema_to_gbnf(txt, strlen(txt), gbnf, err, sizeof err);
    free(txt);
    if (rc == MOE_ENOMEM) return api_fail(e, 500, NULL, NULL, "out of memory");
    if (rc) return api_fail(e, 400, "tools", "invalid_value", "'tools[%zu].function.parameters': %s", i, err);
    return 0;
}

/* The most calls one turn of an id_ns syntax may have: each has its own
 * rule (its index is in its text), so the grammar has an alternative per
 * index and tool (the tools' argument rules are shared, written once) and
 * grows with their product; the parser finds rule names by hash, so that
 * stays cheap next to the prompt's prefill of the tools' JSON. */
enum { MAX_INDEXED = 64 };

/* An id_ns syntax's calls (Kimi-K2): call k (k0, k1, ...) writes the index
 * idx0 + k, so the ids run on from the history's calls (idx0 of them) and
 * are unique in the conversation. The name is written with its index, then
 * the arguments of that tool's schema. */
static void indexed_grammar(tbuf *b, srv *s, const tool_syntax *sy, const char *const *names, char *const *gbnf, size_t n,
                            int only, bool parallel, long idx0) {
    const int nk = parallel && sy->parallel ? MAX_INDEXED : 1;
    tb_add(b, "root ::=");
    tb_lit(b, sy->trigger);
    tb_add(b, " k0");
    tb_lit_tok(b, s, sy->end);
    tb_add(b, "\n");
    for (int k = 0; k < nk; k++) {
        char line[48];
        snprintf(line, sizeof line, "k%d ::=", k);
        tb_add(b, line);
        tb_lit_tok(b, s, sy->open);
        tb_lit(b, sy->id_ns);
        tb_add(b, " (");
        for (size_t i = 0, alt = 0; i < n; i++) {
            if (only >= 0 && (size_t)only != i) continue;
            tbuf id = {0};
            snprintf(line, sizeof line, ":%ld", idx0 + k);
            tb_add(&id, names[i]);
            tb_add(&id, line);
            if (alt++) tb_add(b, " |");
            tb_lit(b, id.oom ? "" : id.p);
            if (id.oom) b->oom = true;
            free(id.p);
            tb_lit_tok(b, s, sy->mid);
            snprintf(line, sizeof line, " t%zu-s0", i);
            tb_add(b, line);
        }
        tb_add(b, " )");
        tb_lit_tok(b, s, sy->close);
        if (k + 1 < nk) { snprintf(line, sizeof line, " k%d?", k + 1); tb_add(b, line); }
        tb_add(b, "\n");
    }
    for (size_t i = 0; i < n; i++) {
        if (only >= 0 && (size_t)only != i) continue;
        char pre[32];
        snprintf(pre, sizeof pre, "t%zu-", i);
        tb_renamed(b, gbnf[i], pre);
    }
}

/* The grammar of a turn's calls over the tools allowed (only = -1: all). */
static void calls_grammar(tbuf *b, srv *s, const tool_syntax *sy, const char *const *names, char *const *gbnf, size_t n,
                          int only, bool parallel) {
    /* the trigger is text: it is accepted as bytes (after the prompt, or
     * found in the generated text), never sampled under the grammar */
    tb_add(b, "root ::=");
    if (!sy->trigger_in_call) tb_lit(b, sy->trigger);
    if (sy->first_sp) tb_add(b, " \" \"?");
    tb_lit_tok(b, s, sy->first);
    tb_lit_tok(b, s, sy->open);
    tb_add(b, " call");
    tb_lit_tok(b, s, sy->close);
    if (parallel && sy->parallel) {
        tb_add(b, " (");
        tb_lit_tok(b, s, sy->sep);
        tb_lit_tok(b, s, sy->open);
        tb_add(b, " call");
        tb_lit_tok(b, s, sy->close);
        tb_add(b, ")*");
    }
    tb_lit_tok(b, s, sy->end);
    tb_add(b, "\ncall ::=");
    for (size_t i = 0, k = 0; i < n; i++) {
        if (only >= 0 && (size_t)only != i) continue;
        char c[48];
        snprintf(c, sizeof c, "%s c%zu", k++ ? " |" : "", i);
        tb_add(b, c);
    }
    tb_add(b, "\n");
    for (size_t i = 0; i < n; i++) {
        if (only >= 0 && (size_t)only != i) continue;
        char pre[32], line[64];
        snprintf(pre, sizeof pre, "t%zu-", i);
        snprintf(line, sizeof line, "c%zu ::=", i);
        tb_add(b, line);
        if (sy->name_in_json) {
            tbuf q = {0};
            tb_add(&q, "{\"name\": \"");
            tb_add(&q, names[i]);
            tb_add(&q, "\", \"");
            tb_add(&q, args_key(sy));
            tb_add(&q, "\": ");
            tb_lit(b, q.oom ? "" : q.p);
            free(q.p);
        } else {
            tb_lit(b, names[i]);
            tb_lit_tok(b, s, sy->mid);
        }
        snprintf(line, sizeof line, " t%zu-s0", i);
        if (*gbnf[i]) tb_add(b, line);             /* kv_args without arguments: "" */
        if (sy->name_in_json) tb_lit(b, "}");
        tb_add(b, "\n");
        tb_renamed(b, gbnf[i], pre);
    }
}

static int tool_choice(json_t *tc, json_t *tools, int *mode, int *only, api_err *e) {
    *only = -1;
    *mode = 1;                                     /* auto */
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        const char *v = json_string_value(tc);
        if (!strcmp(v, "none")) *mode = 0;
        else if (!strcmp(v, "required")) *mode = 2;
        else if (strcmp(v, "auto"))
            return api_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}, got '%.40s'", v);
        return 0;
    }
    json_t *ty = json_object_get(tc, "type"), *fn = json_object_get(tc, "function"), *nm = json_object_get(fn, "name");
    if (!json_is_object(tc) || !json_is_string(ty) || strcmp(json_string_value(ty), "function") || !json_is_string(nm))
        return api_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *n2 = json_object_get(json_object_get(json_array_get(tools, i), "function"), "name");
        if (json_is_string(n2) && !strcmp(json_string_value(n2), json_string_value(nm))) { *only = (int)i; *mode = 2; return 0; }
    }
    return api_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' names the function '%.64s', which is not in 'tools'", json_string_value(nm));
}

static bool has_constraint_field(json_t *o) {
    json_t *g = json_object_get(o, "grammar"), *rf = json_object_get(o, "response_format"), *t = json_object_get(rf, "type");
    if (g && !json_is_null(g)) return true;
    return rf && !json_is_null(rf) && !(json_is_string(t) && !strcmp(json_string_value(t), "text"));
}

static int tools_check(json_t *o, json_t *tools, api_err *e) {
    json_t *tc = json_object_get(o, "tool_choice"), *ptc = json_object_get(o, "parallel_tool_calls");
    if (!tools || json_is_null(tools)) {
        if (tc && !json_is_null(tc)) return api_fail(e, 400, "tool_choice", "invalid_value", "'tool_choice' is only allowed when 'tools' are given");
        if (ptc && !json_is_null(ptc)) return api_fail(e, 400, "parallel_tool_calls", "invalid_value", "'parallel_tool_calls' is only allowed when 'tools' are given");
        return 0;
    }
    if (!json_is_array(tools)) return api_fail(e, 400, "tools", "invalid_type", "'tools' must be an array");
    if (json_array_size(tools) == 0) return api_fail(e, 400, "tools", "invalid_value", "'tools' must not be empty");
    if (json_array_size(tools) > 128) return api_fail(e, 400, "tools", "invalid_value", "'tools' has %zu functions; at most 128", json_array_size(tools));
    if (ptc && !json_is_null(ptc) && !json_is_boolean(ptc)) return api_fail(e, 400, "parallel_tool_calls", "invalid_type", "'parallel_tool_calls' must be a boolean");
    return 0;
}

static int test_force(srv *s, srv_tools *t, const char *text, api_err *e) {
    size_t need = 0;
    char err[MOE_ERR_LEN];
    if (moe_tokenize(s->m, text, strlen(text), false, true, NULL, 0, &need, err, sizeof err) || need == 0 ||
        !(t->force = malloc(need * sizeof *t->force)) ||
        moe_tokenize(s->m, text, strlen(text), false, true, t->force, need, &need, err, sizeof err))
        return api_fail(e, 500, NULL, NULL, "MOEFAST_SERVE_TEST_TOOL_TEXT does not tokenize");
    t->n_force = (int)need;
    return 0;
}

/* The calls of the history's assistant messages (malformed ones are the
 * prompt's 400, later). */
static long history_calls(json_t *o) {
    json_t *ms = json_object_get(o, "messages");
    long c = 0;
    for (size_t i = 0; i < json_array_size(ms); i++) {
        json_t *m = json_array_get(ms, i), *ro = json_object_get(m, "role");
        if (json_is_string(ro) && !strcmp(json_string_value(ro), "assistant")) c += (long)json_array_size(json_object_get(m, "tool_calls"));
    }
    return c;
}

int tools_parse(srv *s, json_t *o, srv_req *r, bool *forced, json_t **tools_json, api_err *e) {
    json_t *tools = json_object_get(o, "tools");
    *forced = false;
    *tools_json = NULL;
    if (tools_check(o, tools, e)) return -1;
    if (!tools || json_is_null(tools)) return 0;
    const size_t n = json_array_size(tools);
    int mode, only, rc = 0;
    if (tool_choice(json_object_get(o, "tool_choice"), tools, &mode, &only, e)) return -1;
    const bool parallel = !json_is_false(json_object_get(o, "parallel_tool_calls"));
    const char **names = calloc(n, sizeof *names);
    char **gbnf = calloc(n, sizeof *gbnf);
    if (!names || !gbnf) rc = api_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = tool_gbnf(json_array_get(tools, i), i, &names[i], &gbnf[i], e);
        for (size_t j = 0; rc == 0 && j < i; j++)
            if (!strcmp(names[i], names[j]))
                rc = api_fail(e, 400, "tools", "invalid_value", "'tools[%zu].function.name': '%s' is given twice", i, names[i]);
    }
    if (rc == 0) *tools_json = tools;
    if (rc == 0 && mode != 0 && has_constraint_field(o))
        rc = api_fail(e, 400, "tools", "invalid_value", "'tools' (unless 'tool_choice' is 'none') cannot be combined with 'grammar' or 'response_format'");
    if (rc == 0 && mode != 0) {
        const tool_syntax *sy = syntax_of(s);
        json_t *kv_raw = NULL;
        if (sy->kv_args) rc = kv_grammars(s, tools, gbnf, &kv_raw, e);
        tbuf g = {0};
        char err[MOE_ERR_LEN];
        if (rc == 0 && sy->id_ns) indexed_grammar(&g, s, sy, names, gbnf, n, only, parallel, history_calls(o));
        else if (rc == 0) calls_grammar(&g, s, sy, names, gbnf, n, only, parallel);
        if (rc) {}
        else if (g.oom) rc = api_fail(e, 500, NULL, NULL, "out of memory");
        else if ((rc = gcache_build(s, r, 'G', g.p, g.n, err, sizeof err)))
            rc = api_fail(e, rc == MOE_ENOMEM ? 500 : 400, "tools", "invalid_value", "the tools' grammar: %s", err);
        else if (!(r->allowed = malloc((size_t)s->n_vocab)) || !(r->tools = calloc(1, sizeof *r->tools)))
            rc = api_fail(e, 500, NULL, NULL, "out of memory");
        free(g.p);
        if (rc == 0) {
            r->tools->kv_raw = kv_raw;
            kv_raw = NULL;
            r->tools->syn = sy;
            const char *tt = getenv("MOEFAST_SERVE_TEST_TOOL_TEXT");
            if (mode == 1 && tt && *tt) rc = test_force(s, r->tools, tt, e);
            if (mode == 2) {                           /* the calls start at once */
                *forced = true;
                r->tools->engaged = true;
                tbuf raw = {0};
                tb_add(&raw, sy->trigger);
                r->tools->raw = raw.p;
                r->tools->raw_len = raw.n;
                r->tools->raw_cap = raw.cap;
                if (raw.oom || moe_constraint_accept_bytes(r->con, sy->trigger, strlen(sy->trigger)))
                    rc = api_fail(e, 500, NULL, NULL, "the tools' grammar refused its own trigger");
            }
        }
        json_decref(kv_raw);
    }
    for (size_t i = 0; gbnf && i < n; i++) free(gbnf[i]);
    free(gbnf);
    free(names);
    return rc;
}

const char *tools_forced_text(const srv_req *r) {
    if (!r->tools || !r->tools->engaged || r->n_gen != 0) return NULL;
    return r->tools->syn->forced ? r->tools->syn->forced : r->tools->syn->trigger;
}

void tools_free(srv_tools *t) {
    if (!t) return;
    for (int i = 0; i < t->n_calls; i++) { free(t->calls[i].id); free(t->calls[i].name); free(t->calls[i].args); }
    free(t->calls);
    free(t->raw);
    free(t->force);
    free(t->raw_at);
    free(t->txt_at);
    json_decref(t->kv_raw);
    free(t);
}

/* ---- the prompt ----------------------------------------------------------------- */

/* The tools section of the system prompt. chatml: Qwen3's template's text;
 * the other families the same words with their own call form. */
static void tools_block(tbuf *b, const tool_syntax *sy, json_t *tools) {
    tb_add(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
              "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        char *t = json_dumps(json_array_get(tools, i), 0);    /* ", " and ": " as Jinja's tojson */
        tb_add(b, "\n");
        if (t) tb_add(b, t); else b->oom = true;
        free(t);
    }
    tb_add(b, "\n</tools>\n\n");
    if (sy->name_in_json) {
        tb_add(b, "For each function call, return a json object with function name and arguments within "
                  "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
                  "<args-json-object>}\n</tool_call>");
        return;
    }
    tb_add(b, "To call a function, write:\n");
    tb_add(b, sy->trigger); tb_add(b, sy->open); tb_add(b, "<function-name>"); tb_add(b, sy->mid);
    tb_add(b, "<args-json-object>"); tb_add(b, sy->close); tb_add(b, sy->end);
}

/* One call as the template writes it (the model's own syntax). */
static void call_text(tbuf *b, const tool_syntax *sy, bool first, const char *name, const char *args) {
    if (first && !sy->trigger_in_call) tb_add(b, sy->trigger);
    if (first && sy->first_sp) tb_add(b, " ");
    if (first) tb_add(b, sy->first);
    if (!first) tb_add(b, sy->sep);
    tb_add(b, sy->open);
    if (sy->name_in_json) {
        tb_add(b, "{\"name\": \""); tb_add(b, name); tb_add(b, "\", \""); tb_add(b, args_key(sy)); tb_add(b, "\": ");
    }
    else { tb_add(b, name); tb_add(b, sy->mid); }
    tb_add(b, args);
    if (sy->name_in_json) tb_add(b, "}");
    tb_add(b, sy->close);
}

static int assistant_calls(tbuf *b, const tool_syntax *sy, json_t *calls, size_t i, api_err *e) {
    const size_t nc = json_array_size(calls);
    for (size_t k = 0; k < nc; k++) {
        json_t *c = json_array_get(calls, k), *fn = json_object_get(c, "function");
        json_t *nm = json_object_get(fn, "name"), *ar = json_object_get(fn, "arguments");
        if (!json_is_string(nm) || !(json_is_string(ar) || json_is_object(ar)))
            return api_fail(e, 400, "messages", "invalid_value",
                            "'messages[%zu].tool_calls[%zu]' must be {\"id\", \"type\": \"function\", \"function\": {\"name\": string, \"arguments\": string}}", i, k);
        char *dumped = json_is_object(ar) ? json_dumps(ar, 0) : NULL;
        call_text(b, sy, k == 0, json_string_value(nm), dumped ? dumped : json_string_value(ar));
        free(dumped);
    }
    if (nc) tb_add(b, sy->end);
    return 0;
}

static int keep(char ***owned, size_t *n_owned, tbuf *b, api_err *e) {
    char **no = b->oom ? NULL : realloc(*owned, (*n_owned + 1) * sizeof *no);
    if (!no) { free(b->p); return api_fail(e, 500, NULL, NULL, "out of memory"); }
    *owned = no;
    no[(*n_owned)++] = b->p ? b->p : strdup("");
    return no[*n_owned - 1] ? 0 : api_fail(e, 500, NULL, NULL, "out of memory");
}

/* ---- the prompt: Llama 3.x and Mistral (their templates place tools apart) ---- */

static void tb_trim(tbuf *b, const char *s) {           /* Jinja's |trim */
    const char *e = s + strlen(s);
    while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r') s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) e--;
    tb_addn(b, s, (size_t)(e - s));
}

static int need_call_id(json_t *ms, size_t i, api_err *e) {
    if (json_is_string(json_object_get(json_array_get(ms, i), "tool_call_id"))) return 0;
    return api_fail(e, 400, "messages", "missing_required_parameter", "'messages[%zu].tool_call_id' is required for role 'tool'", i);
}

/* Llama 3.1's template: with tools, the system turn gets its ipython/date
 * preamble and the first turn after it the tools (indented JSON) and the
 * instructions; one call per assistant turn; results as ipython turns
 * (chat.c writes role tool so). */
static int llama3_messages(const tool_syntax *sy, json_t *ms, const moe_chat_msg *msgs, size_t n, json_t *tools, moe_chat_msg **out, moe_chat_msg *o,
                           size_t *n_out, char ***owned, size_t *n_owned, api_err *e) {
    size_t k = 0, i = 0;
    if (tools) {
        tbuf b = {0}, u = {0};
        tb_add(&b, "Environment: ipython\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
        if (n && !strcmp(msgs[0].role, "system")) { tb_trim(&b, msgs[0].content); i = 1; }
        if (keep(owned, n_owned, &b, e)) return -1;
        o[k++] = (moe_chat_msg){"system", (*owned)[*n_owned - 1]};
        if (i >= n)
            return api_fail(e, 400, "messages", "invalid_value", "Llama 3.x's template lists the tools in the first message after the system message; there is none");
        tb_add(&u, "Given the following functions, please respond with a JSON for a function call with its proper "
                   "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function name, "
                   "\"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n");
        for (size_t t = 0; t < json_array_size(tools); t++) {
            char *d = json_dumps(json_array_get(tools, t), JSON_INDENT(4));   /* tojson(indent=4) */
            if (d) tb_add(&u, d); else u.oom = true;
            free(d);
            tb_add(&u, "\n\n");
        }
        tb_trim(&u, msgs[i].content);
        if (keep(owned, n_owned, &u, e)) return -1;
        o[k++] = (moe_chat_msg){"user", (*owned)[*n_owned - 1]};
        i++;
    }
    for (; i < n; i++) {
        json_t *tc = json_object_get(json_array_get(ms, i), "tool_calls");
        if (!strcmp(msgs[i].role, "tool") && need_call_id(ms, i, e)) return -1;
        if (strcmp(msgs[i].role, "assistant") || !tc || json_is_null(tc)) { o[k++] = msgs[i]; continue; }
        if (!json_is_array(tc)) return api_fail(e, 400, "messages", "invalid_type", "'messages[%zu].tool_calls' must be an array", i);
        /* the template takes one call per turn: several become consecutive
         * assistant turns, as if the model had called one at a time */
        moe_chat_msg *no = json_array_size(tc) > 1 ? realloc(o, (k + n - i + json_array_size(tc) + 1) * sizeof *o) : o;
        if (!no) return api_fail(e, 500, NULL, NULL, "out of memory");
        *out = o = no;
        for (size_t c = 0; c < json_array_size(tc); c++) {
            json_t *one = json_array();
            tbuf b = {0};
            tb_add(&b, "");
            const int bad = !one || json_array_append(one, json_array_get(tc, c)) || assistant_calls(&b, sy, one, i, e);
            json_decref(one);
            if (bad) { free(b.p); return e->status ? -1 : api_fail(e, 500, NULL, NULL, "out of memory"); }
            if (keep(owned, n_owned, &b, e)) return -1;
            o[k++] = (moe_chat_msg){"assistant", (*owned)[*n_owned - 1]};
        }
    }
    *n_out = k;
    return 0;
}

static const char *last9(const char *id) { const size_t l = strlen(id); return l > 9 ? id + l - 9 : id; }

/* Mistral-Small-3.1's template: the tools in [AVAILABLE_TOOLS] before the
 * last user turn, calls as [TOOL_CALLS] [{name, arguments, id}], results as
 * [TOOL_RESULTS] {"content": C, "call_id": ID} (ids: their last 9
 * characters); chat.c writes the markers. */
static int mistral_messages(json_t *ms, const moe_chat_msg *msgs, size_t n, json_t *tools, moe_chat_msg *o,
                            size_t *n_out, char ***owned, size_t *n_owned, api_err *e) {
    size_t k = 0, last_user = n;
    for (size_t i = 0; i < n; i++) if (!strcmp(msgs[i].role, "user")) last_user = i;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(ms, i), *tc = json_object_get(m, "tool_calls");
        if (i == last_user && tools) {
            tbuf b = {0};
            tb_add(&b, " [");
            for (size_t t = 0; t < json_array_size(tools); t++) {
                char *d = json_dumps(json_array_get(tools, t), 0);
                if (t) tb_add(&b, ", ");
                if (d) tb_add(&b, d); else b.oom = true;
                free(d);
            }
            tb_add(&b, "]");
            if (keep(owned, n_owned, &b, e)) return -1;
            o[k++] = (moe_chat_msg){"available_tools", (*owned)[*n_owned - 1]};
        }
        tbuf b = {0};
        if (!strcmp(msgs[i].role, "tool")) {
            if (need_call_id(ms, i, e)) return -1;
            tb_add(&b, " {\"content\": ");
            tb_add(&b, msgs[i].content);
            tb_add(&b, ", \"call_id\": \"");
            tb_add(&b, last9(json_string_value(json_object_get(m, "tool_call_id"))));
            tb_add(&b, "\"}");
        } else if (!strcmp(msgs[i].role, "assistant") && tc && !json_is_null(tc)) {
            if (!json_is_array(tc)) return api_fail(e, 400, "messages", "invalid_type", "'messages[%zu].tool_calls' must be an array", i);
            tb_add(&b, "[TOOL_CALLS] [");
            for (size_t c = 0; c < json_array_size(tc); c++) {
                json_t *call = json_array_get(tc, c), *fn = json_object_get(call, "function"), *id = json_object_get(call, "id");
                json_t *nm = json_object_get(fn, "name"), *ar = json_object_get(fn, "arguments");
                if (!json_is_string(nm) || !(json_is_string(ar) || json_is_object(ar)) || !json_is_string(id)) {
                    free(b.p);
                    return api_fail(e, 400, "messages", "invalid_value",
                                    "'messages[%zu].tool_calls[%zu]' must be {\"id\": string, \"type\": \"function\", \"function\": {\"name\": string, \"arguments\": string}}", i, c);
                }
                char *d = json_is_object(ar) ? json_dumps(ar, 0) : NULL;
                tb_add(&b, c ? ", {\"name\": \"" : "{\"name\": \"");
                tb_add(&b, json_string_value(nm));
                tb_add(&b, "\", \"arguments\": ");
                tb_add(&b, d ? d : json_string_value(ar));
                tb_add(&b, ", \"id\": \"");
                tb_add(&b, last9(json_string_value(id)));
                tb_add(&b, "\"}");
                free(d);
            }
            tb_add(&b, "]");
        } else {
            o[k++] = msgs[i];
            continue;
        }
        if (keep(owned, n_owned, &b, e)) return -1;
        o[k++] = (moe_chat_msg){msgs[i].role, (*owned)[*n_owned - 1]};
    }
    *n_out = k;
    return 0;
}

int tools_messages(srv *s, json_t *ms, const moe_chat_msg *msgs, size_t n, json_t *tools,
                   moe_chat_msg **out, size_t *n_out, char ***owned, size_t *n_owned, api_err *e) {
    const tool_syntax *sy = syntax_of(s);
    moe_chat_msg *o = calloc(n + 2, sizeof *o);
    size_t k = 0, i = 0;
    *out = o;
    if (!o) return api_fail(e, 500, NULL, NULL, "out of memory");
    if (!strcmp(sy->family, "llama3")) return llama3_messages(sy, ms, msgs, n, tools, out, o, n_out, owned, n_owned, e);
    if (!strcmp(sy->family, "mistral")) return mistral_messages(ms, msgs, n, tools, o, n_out, owned, n_owned, e);
    if (!strcmp(sy->family, "harmony")) return harmony_messages(ms, msgs, n, tools, out, n_out, owned, n_owned, e);
    if (sy->id_ns) return kimi_messages(ms, msgs, n, tools, out, n_out, owned, n_owned, e);
    if (sy->kv_args) return kv_messages(ms, msgs, n, tools, o, n_out, owned, n_owned, e);
    if (tools) {                                   /* the system prompt gets the tools */
        tbuf b = {0};
        if (n && !strcmp(msgs[0].role, "system")) { tb_add(&b, msgs[0].content); tb_add(&b, "\n\n"); i = 1; }
        tools_block(&b, sy, tools);
        if (keep(owned, n_owned, &b, e)) return -1;
        o[k++] = (moe_chat_msg){"system", (*owned)[*n_owned - 1]};
    }
    for (; i < n; i++) {
        json_t *m = json_array_get(ms, i), *tc = json_object_get(m, "tool_calls");
        if (!strcmp(msgs[i].role, "tool")) {       /* consecutive results: one user turn (Qwen3) */
            tbuf b = {0};
            for (; i < n && !strcmp(msgs[i].role, "tool"); i++) {
                if (!json_is_string(json_object_get(json_array_get(ms, i), "tool_call_id"))) {
                    free(b.p);
                    return api_fail(e, 400, "messages", "missing_required_parameter", "'messages[%zu].tool_call_id' is required for role 'tool'", i);
                }
                tb_add(&b, b.n ? "\n<tool_response>\n" : "<tool_response>\n");
                tb_add(&b, msgs[i].content);
                tb_add(&b, "\n</tool_response>");
            }
            i--;
            if (keep(owned, n_owned, &b, e)) return -1;
            o[k++] = (moe_chat_msg){"user", (*owned)[*n_owned - 1]};
        } else if (!strcmp(msgs[i].role, "assistant") && tc && !json_is_null(tc)) {
            if (!json_is_array(tc)) return api_fail(e, 400, "messages", "invalid_type", "'messages[%zu].tool_calls' must be an array", i);
            tbuf b = {0};
            tb_add(&b, msgs[i].content);
            /* Qwen3's template tests the content without its reasoning */
            const char *vis = reason_history_folds(s) ? reason_visible(msgs[i].content) : msgs[i].content;
            if (*vis && json_array_size(tc)) tb_add(&b, "\n");
            if (assistant_calls(&b, sy, tc, i, e)) { free(b.p); return -1; }
            if (keep(owned, n_owned, &b, e)) return -1;
            o[k++] = (moe_chat_msg){"assistant", (*owned)[*n_owned - 1]};
        } else
            o[k++] = msgs[i];
    }
    *n_out = k;
    return 0;
}

/* ---- generation (engine thread, under srv.mu) ------------------------------------ */

static bool raw_add(srv_tools *t, const char *p, size_t n) {
    if (t->raw_len + n + 1 > t->raw_cap) {
        size_t nc = t->raw_cap ? t->raw_cap : 256;
        while (nc < t->raw_len + n + 1) nc *= 2;
        char *np = realloc(t->raw, nc);
        if (!np) return false;
        t->raw = np;
        t->raw_cap = nc;
    }
    memcpy(t->raw + t->raw_len, p, n);
    t->raw_len += n;
    t->raw[t->raw_len] = 0;
    return true;
}

void tools_before_token(srv_req *r) {
    srv_tools *t = r->tools;
    t->raw_at[r->n_gen] = t->raw_len;
    t->txt_at[r->n_gen] = r->len;
}

/* The generated token whose bytes hold raw offset p. */
static int token_at(const srv_req *r, size_t p) {
    int k = r->n_gen - 1;
    while (k > 0 && r->tools->raw_at[k] > p) k--;
    return k;
}

size_t tools_after_token(srv *s, srv_req *r, int32_t id) {
    srv_tools *t = r->tools;
    const char *piece;
    size_t n = 0;
    if (!moe_token_is_eog(s->m, id) && moe_token_piece(s->m, id, true, &piece, &n) == MOE_OK && !raw_add(t, piece, n)) n = 0;
    if (t->engaged) return r->len;
    /* the model's reasoning (<think>...</think>) may mention the trigger:
     * not a call (whatever the answer's reasoning format: the tokens never
     * depend on the presentation); the calls begin after it */
    reason_span sp = {0};
    if (!r->harmony) reason_split(t->raw ? t->raw : "", t->raw_len, r->think_open, false, &sp);
    if (sp.has && sp.open) return r->len;
    const size_t think_end = sp.has ? sp.close_end : 0;
    const char *tr = t->syn->trigger;
    const size_t tl = strlen(tr), before = t->raw_len - n;
    size_t from = before >= tl ? before - tl + 1 : 0;
    if (from < think_end) from = think_end;
    const char *hit = t->raw_len >= tl ? memmem(t->raw + from, t->raw_len - from, tr, tl) : NULL;
    if (hit) {
        /* the calls begin: the grammar takes the trigger and what followed
         * it in this token; the text goes back to before that token */
        const size_t p = (size_t)(hit - t->raw);
        if (moe_constraint_accept_bytes(r->con, hit, t->raw_len - p) == MOE_OK) {
            t->engaged = true;
            t->call_at = t->parse_at = p;
            size_t cut = t->txt_at[token_at(r, p)];
            if (cut < r->emit) cut = r->emit;      /* never un-send text (the hold-back prevents it) */
            r->len = cut;
            r->text[r->len] = 0;
            return r->len;
        }
        moe_constraint_reset(r->con);              /* it did not fit: plain text */
    }
    /* hold back text that may be the start of the trigger */
    for (size_t h = tl - 1; h > 0; h--)
        if (h + think_end <= t->raw_len && !memcmp(t->raw + t->raw_len - h, tr, h)) return t->txt_at[token_at(r, t->raw_len - h)];
    return r->len;
}

static bool starts(const char **p, const char *lit) {
    const size_t l = strlen(lit);
    if (strncmp(*p, lit, l)) return false;
    *p += l;
    return true;
}

/* The end of the JSON value at p (NULL: none). Integers are read as reals:
 * an unbounded integer of any length still parses. */
static const char *json_end(const char *p) {
    json_error_t je;
    json_t *v = json_loadb(p, strlen(p), JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    if (!v) return NULL;
    json_decref(v);
    return p + je.position;
}

/* A new call named [name, name + nl); its id [id, id + il) as the model
 * wrote it (Kimi-K2's), or (id NULL) made up. */
static bool add_call(srv_req *r, const char *name, size_t nl, const char *id, size_t il) {
    srv_tools *t = r->tools;
    srv_tool_call *nc = realloc(t->calls, (size_t)(t->n_calls + 1) * sizeof *nc);
    if (!nc) return false;
    t->calls = nc;
    char mk[48];
    snprintf(mk, sizeof mk, "call_%llu_%d", (unsigned long long)r->id, t->n_calls);
    srv_tool_call *c = &nc[t->n_calls++];
    memset(c, 0, sizeof *c);
    c->id = id ? strndup(id, il) : strdup(mk);
    c->name = strndup(name, nl);
    c->args = strdup("");
    return c->id && c->name && c->args;
}

/* The arguments text [a, a + n) so far (the model's text, as OpenAI gives it). */
static bool set_args(srv_tools *t, srv_tool_call *c, const char *a, size_t n) {
    if (n <= c->args_len) return true;
    char *na = realloc(c->args, n + 1);
    if (!na) return false;
    memcpy(na, a, n);
    na[n] = 0;
    c->args = na;
    c->args_len = n;
    t->version++;
    return true;
}

/* A prefix of [a, a + n) that ends on a UTF-8 character boundary. */
static size_t utf8_cut(const char *a, size_t n) {
    size_t k = n;
    while (k > 0 && ((unsigned char)a[k - 1] & 0xC0) == 0x80 && n - k < 3) k--;
    if (k == 0) return 0;
    const unsigned char lead = (unsigned char)a[k - 1];
    const size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    return k - 1 + len <= n ? n : k - 1;
}

enum { PH_OPEN = 0, PH_NAME = 1, PH_ARGS = 2 };

/* Walks the calls the grammar wrote so far: trigger/sep + open, the name,
 * the arguments (held back by what may still be the call's closing text,
 * until the call is complete). The grammar guarantees the text will
 * match, so a literal not (yet) there means "wait". */
void tools_progress(srv_req *r) {
    srv_tools *t = r->tools;
    const tool_syntax *sy = t->syn;
    for (;;) {
        const char *base = t->raw ? t->raw : "", *p = base + t->parse_at;
        if (t->phase == PH_OPEN) {
            if (t->n_calls && (!sy->parallel || (!*sy->sep && !*sy->open))) return;
            if (t->n_calls) {
                if (!starts(&p, sy->sep)) return;
            } else {
                if (!sy->trigger_in_call && !starts(&p, sy->trigger)) return;
                if (sy->first_sp && *p == ' ') p++;
                if (sy->first && !starts(&p, sy->first)) return;
            }
            if (!starts(&p, sy->open)) return;
            t->parse_at = (size_t)(p - base);
            t->phase = PH_NAME;
        } else if (t->phase == PH_NAME) {
            const char *nm = p, *ne, *id = NULL;
            size_t il = 0;
            if (sy->id_ns) {                        /* functions.NAME:IDX, then mid */
                const char *me = strstr(p, sy->mid);
                if (!me || !starts(&p, sy->id_ns) || !(ne = memchr(p, ':', (size_t)(me - p)))) return;
                id = nm;
                il = (size_t)(me - nm);
                nm = p;
                p = me + strlen(sy->mid);
            } else if (sy->name_in_json) {
                if (!starts(&p, "{\"name\": \"") || !(ne = strchr(nm = p, '"'))) return;
                p = ne;
                if (!starts(&p, "\", \"") || !starts(&p, args_key(sy)) || !starts(&p, "\": ")) return;
            } else {
                if (!(ne = strstr(nm, sy->mid))) return;
                p = ne + strlen(sy->mid);
            }
            if (!add_call(r, nm, (size_t)(ne - nm), id, il)) return;
            t->version++;
            t->args_at = (size_t)(p - base);
            t->phase = PH_ARGS;
        } else if (sy->kv_args) {
            if (!kv_progress(t, base)) return;
        } else {
            const char *a = base + t->args_at, *ae = json_end(a), *q = ae;
            const bool done = ae && (!sy->name_in_json || starts(&q, "}")) && starts(&q, sy->close);
            const size_t avail = t->raw_len - t->args_at, hold = (sy->name_in_json ? 1 : 0) + strlen(sy->close);
            size_t n = done ? (size_t)(ae - a) : avail > hold ? avail - hold : 0;
            if (!done) n = utf8_cut(a, n);
            srv_tool_call *c = &t->calls[t->n_calls - 1];
            if (!set_args(t, c, a, n) || !done) return;
            c->complete = true;
            t->version++;
            t->parse_at = (size_t)(q - base);
            t->phase = PH_OPEN;
        }
    }
}

bool tools_finish(srv_req *r, char *why, size_t whylen) {
    srv_tools *t = r->tools;
    tools_progress(r);
    const char *p = (t->raw ? t->raw : "") + t->parse_at;
    const bool ok = t->phase == PH_OPEN && t->n_calls > 0 && starts(&p, t->syn->end) && !*p;
    if (!ok) snprintf(why, whylen, "the model's tool call did not parse (call %d; the raw text is in the log)", t->n_calls);
    return ok;
}

/* ---- answers ------------------------------------------------------------------------ */

json_t *tools_calls_json(const srv_req *r) {
    json_t *a = json_array();
    for (int i = 0; i < r->tools->n_calls; i++) {
        const srv_tool_call *c = &r->tools->calls[i];
        json_t *o = json_object(), *f = json_object();
        json_object_set_new(o, "id", json_string(c->id));
        json_object_set_new(o, "type", json_string("function"));
        json_object_set_new(f, "name", json_string(c->name));
        json_object_set_new(f, "arguments", json_string(c->args));
        json_object_set_new(o, "function", f);
        json_array_append_new(a, o);
    }
    return a;
}

/* One stream chunk whose delta holds a tool_calls entry. */
static void call_chunk(srv *s, srv_req *r, tbuf *b, int i, bool head, const char *args, size_t n) {
    const srv_tool_call *c = &r->tools->calls[i];
    json_t *tc = json_object(), *f = json_object(), *a = json_array(), *d = json_object();
    json_object_set_new(tc, "index", json_integer(i));
    if (head) {
        json_object_set_new(tc, "id", json_string(c->id));
        json_object_set_new(tc, "type", json_string("function"));
        json_object_set_new(f, "name", json_string(c->name));
    }
    json_object_set_new(f, "arguments", json_stringn(args, n));
    json_object_set_new(tc, "function", f);
    json_array_append_new(a, tc);
    json_object_set_new(d, "tool_calls", a);
    char *ev = api_delta_chunk(s, r, d);
    if (ev) tb_add(b, ev); else b->oom = true;
    free(ev);
}

/* As OpenAI streams calls: per call, a first delta with index, id, type,
 * the name and empty arguments as soon as the name is written, then the
 * arguments in fragments as they grow (never inside a UTF-8 character). */
char *api_tool_chunks(srv *s, srv_req *r, int *call, bool *head_sent, size_t *args_sent) {
    tbuf b = {0};
    tb_add(&b, "");
    while (r->tools && *call < r->tools->n_calls) {
        const srv_tool_call *c = &r->tools->calls[*call];
        if (!*head_sent) { call_chunk(s, r, &b, *call, true, "", 0); *head_sent = true; }
        if (c->args_len > *args_sent) { call_chunk(s, r, &b, *call, false, c->args + *args_sent, c->args_len - *args_sent); *args_sent = c->args_len; }
        if (!c->complete) break;
        ++*call;
        *head_sent = false;
        *args_sent = 0;
    }
    if (b.oom) { free(b.p); return NULL; }
    return b.p;
}

char *tools_raw_json(const srv_req *r) {
    const srv_tools *t = r->tools;
    moe_utf8_stream *u = moe_utf8_stream_new();
    const size_t cap = 4 * t->raw_len + 8;
    char *v = u ? malloc(cap) : NULL, *d = NULL;
    if (v) {
        size_t k = moe_utf8_stream_push(u, t->raw ? t->raw : "", t->raw_len, v, cap);
        k += moe_utf8_stream_flush(u, v + k, cap - k);
        json_t *j = json_stringn(v, k);
        d = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
        json_decref(j);
    }
    free(v);
    moe_utf8_stream_free(u);
    return d;
}

/* ---- GLM-4.5: arguments as <arg_key>/<arg_value> pairs ------------------------------
 * Its template writes each argument as <arg_key>K</arg_key>\n<arg_value>V
 * </arg_value>\n, V raw when the value is a string and tojson otherwise. The
 * grammar gives the schema's properties in their order (the required ones
 * always, the others optionally); a property whose schema is a string (type
 * string, or an enum/const of strings) has a raw value, any other property
 * (numbers, objects, unions, nullable strings) JSON valid for its schema,
 * compiled by the JSON Schema compiler. A raw value can never contain the
 * text </arg_value> (so the call parses back at the first one); with
 * minLength/maxLength it is counted per character and may not contain "</". */

static const char KV_CLOSE[] = "/arg_value>";           /* </arg_value> after its '<' */

/* A string value that cannot contain </arg_value>: chunks of one character
 * other than '<', or '<' + a broken partial match; it may end inside one. */
static void kv_raw_free(tbuf *b, const char *v) {
    const size_t n = sizeof KV_CLOSE - 1;
    tb_add(b, v); tb_add(b, " ::= ( [^<] | \"<\" "); tb_add(b, v); tb_add(b, "-y* "); tb_add(b, v);
    tb_add(b, "-x )* ( \"<\" "); tb_add(b, v); tb_add(b, "-y* "); tb_add(b, v); tb_add(b, "-z )?\n");
    tb_add(b, v); tb_add(b, "-y ::= "); tb_add(b, v); tb_add(b, "-z \"<\"\n");
    tb_add(b, v); tb_add(b, "-x ::=");
    for (size_t i = 0; i < n; i++) {                   /* [^c0<] | "c0" ([^c1<] | "c1" (...)) */
        char cls[16], lit[8];
        snprintf(cls, sizeof cls, " [^%c<]", KV_CLOSE[i]);
        snprintf(lit, sizeof lit, " \"%c\" (", KV_CLOSE[i]);
        tb_add(b, cls);
        if (i + 1 < n) { tb_add(b, " |"); tb_add(b, lit); }
    }
    for (size_t i = 0; i + 1 < n; i++) tb_add(b, " )");
    tb_add(b, "\n");
    tb_add(b, v); tb_add(b, "-z ::=");
    for (size_t i = 0; i + 1 < n; i++) { char lit[8]; snprintf(lit, sizeof lit, " ( \"%c\"", KV_CLOSE[i]); tb_add(b, lit); }
    for (size_t i = 0; i + 1 < n; i++) tb_add(b, " )?");
    tb_add(b, "\n");
}

/* A string of mn..mx characters (mx < 0: no maximum) without "</": state
 * a (after anything but '<') and b (after '<') per count. */
static void kv_raw_counted(tbuf *b, const char *v, long mn, long mx) {
    const long end = mx >= 0 ? mx : mn;
    char l[256];
    snprintf(l, sizeof l, "%s ::= %s-a0\n", v, v);
    tb_add(b, l);
    for (long i = 0; i < end; i++) {
        char na[64] = "", nb[64] = "";
        if (i + 1 < end) { snprintf(na, sizeof na, " %s-a%ld", v, i + 1); snprintf(nb, sizeof nb, " %s-b%ld", v, i + 1); }
        else if (mx < 0) { snprintf(na, sizeof na, " %s-w", v); snprintf(nb, sizeof nb, " %s-wb", v); }
        for (int st = 0; st < 2; st++) {
            snprintf(l, sizeof l, "%s-%c%ld ::= ( %s%s | \"<\"%s )%s\n", v, st ? 'b' : 'a', i, st ? "[^</]" : "[^<]", na, nb,
                     i >= mn ? "?" : "");
            tb_add(b, l);
        }
    }
    if (mx < 0) {
        snprintf(l, sizeof l, "%s-w ::= ( [^<] | \"<\"+ [^</] )* \"<\"*\n%s-wb ::= \"<\"* ( [^</] %s-w )?\n", v, v, v);
        tb_add(b, l);
    }
}

/* The schema $ref names (local #/$defs/X or #/definitions/X), or s. */
static json_t *kv_deref(json_t *root, json_t *sch) {
    for (int hop = 0; hop < 8 && json_is_string(json_object_get(sch, "$ref")); hop++) {
        const char *ref = json_string_value(json_object_get(sch, "$ref"));
        json_t *t = !strncmp(ref, "#/$defs/", 8) ? json_object_get(json_object_get(root, "$defs"), ref + 8)
                  : !strncmp(ref, "#/definitions/", 14) ? json_object_get(json_object_get(root, "definitions"), ref + 14) : NULL;
        if (!t) return sch;
        sch = t;
    }
    return sch;
}

/* A string-only schema: its values are written raw. */
static bool kv_is_string(json_t *sch) {
    if (!json_is_object(sch) || json_is_true(json_object_get(sch, "nullable")) || json_object_get(sch, "anyOf") ||
        json_object_get(sch, "oneOf") || json_object_get(sch, "$ref"))
        return false;
    json_t *ty = json_object_get(sch, "type"), *en = json_object_get(sch, "enum"), *cn = json_object_get(sch, "const");
    if (ty && !(json_is_string(ty) && !strcmp(json_string_value(ty), "string"))) return false;
    if (cn && !json_is_string(cn)) return false;
    if (en) {
        size_t i;
        json_t *x;
        if (!json_is_array(en) || !json_array_size(en)) return false;
        json_array_foreach(en, i, x) if (!json_is_string(x)) return false;
    }
    return ty || en || cn;
}

/* The rule v (raw value of string schema sch); *empty_only: only "" fits. */
static int kv_raw_rule(tbuf *b, const char *v, json_t *sch, const char *where, bool *empty_only, api_err *e) {
    json_t *en = json_object_get(sch, "enum"), *cn = json_object_get(sch, "const");
    *empty_only = false;
    if (en || cn) {
        size_t i, k = 0;
        bool empty = false;
        json_t *x, *one = cn ? json_pack("[O]", cn) : json_incref(en);
        tbuf alt = {0};
        json_array_foreach(one, i, x) {
            const char *sv = json_string_value(x);
            if (!*sv) { empty = true; continue; }
            if (strstr(sv, "</arg_value>")) continue;         /* cannot be written */
            if (k++) tb_add(&alt, " |");
            tb_lit(&alt, sv);
        }
        json_decref(one);
        if (!k && !empty) { free(alt.p); return api_fail(e, 400, "tools", "invalid_value", "'%s': no value can be written in GLM-4.5's call syntax", where); }
        if (!k) *empty_only = true;
        else { tb_add(b, v); tb_add(b, " ::= ("); tb_add(b, alt.p); tb_add(b, empty ? " )?\n" : " )\n"); }
        if (alt.oom) b->oom = true;
        free(alt.p);
        return 0;
    }
    json_t *jn = json_object_get(sch, "minLength"), *jx = json_object_get(sch, "maxLength");
    const long mn = json_is_integer(jn) ? (long)json_integer_value(jn) : 0, mx = json_is_integer(jx) ? (long)json_integer_value(jx) : -1;
    if (mx > 2048 || mn > 2048)
        return api_fail(e, 400, "tools", "invalid_value", "'%s': a string's minLength/maxLength above 2048 is not supported in GLM-4.5's call syntax", where);
    if (mx == 0) *empty_only = true;
    else if (mn == 0 && mx < 0) kv_raw_free(b, v);
    else kv_raw_counted(b, v, mn, mx);
    return 0;
}

/* The rule v: JSON valid for sch (the root's $defs kept for its $refs). */
static int kv_json_rule(tbuf *b, const char *v, json_t *root, json_t *sch, const char *where, api_err *e) {
    json_t *w = json_is_object(sch) ? json_copy(sch) : json_incref(sch);
    const char *dk[] = {"$defs", "definitions"};
    for (int i = 0; i < 2 && json_is_object(w); i++)
        if (json_object_get(root, dk[i]) && !json_object_get(w, dk[i])) json_object_set(w, dk[i], json_object_get(root, dk[i]));
    char *txt = w ? json_dumps(w, JSON_ENCODE_ANY | JSON_COMPACT) : NULL, *g = NULL, err[MOE_ERR_LEN], pre[80];
    json_decref(w);
    if (!txt) return api_fail(e, 500, NULL, NULL, "out of memory");
    const int rc = moe_json_schema_to_gbnf(txt, strlen(txt), &g, err, sizeof err);
    free(txt);
    if (rc == MOE_ENOMEM) return api_fail(e, 500, NULL, NULL, "out of memory");
    if (rc) return api_fail(e, 400, "tools", "invalid_value", "'%s': %s", where, err);
    snprintf(pre, sizeof pre, "%s-", v);
    tb_renamed(b, g, pre);
    free(g);
    tb_add(b, v); tb_add(b, " ::= "); tb_add(b, pre); tb_add(b, "s0\n");
    return 0;
}

/* Tool ti's arguments grammar (rule s0; "" without properties). */
static int kv_tool(srv *s, json_t *ps, size_t ti, char **out, json_t *raw_keys, api_err *e) {
    json_t *props = json_object_get(ps, "properties"), *req = json_object_get(ps, "required"), *sub;
    const char *key;
    tbuf b = {0}, rules = {0};
    int k = 0, rc = 0;
    tb_add(&b, "");
    if (json_object_size(props)) tb_add(&b, "s0 ::=");
    json_object_foreach(props, key, sub) {
        char v[32], where[160], ref[40];
        snprintf(v, sizeof v, "v%d", k);
        snprintf(where, sizeof where, "tools[%zu].function.parameters.properties.%.64s", ti, key);
        if (!*key || strstr(key, "</arg_key>")) { rc = api_fail(e, 400, "tools", "invalid_value", "'%s': the name cannot be written in GLM-4.5's call syntax", where); break; }
        bool required = false, empty_only = false;
        size_t i;
        json_t *x;
        json_array_foreach(req, i, x) if (json_is_string(x) && !strcmp(json_string_value(x), key)) required = true;
        json_t *d = kv_deref(ps, sub);
        if (kv_is_string(d)) {
            json_object_set_new(raw_keys, key, json_true());
            rc = kv_raw_rule(&rules, v, d, where, &empty_only, e);
        } else
            rc = kv_json_rule(&rules, v, ps, sub, where, e);
        if (rc) break;
        snprintf(ref, sizeof ref, " a%d%s", k, required ? "" : "?");
        tb_add(&b, ref);
        snprintf(ref, sizeof ref, "a%d ::=", k);
        tb_add(&rules, ref);
        tb_lit_tok(&rules, s, "<arg_key>");
        tb_lit(&rules, key);
        tb_lit_tok(&rules, s, "</arg_key>\n<arg_value>");
        if (!empty_only) { tb_add(&rules, " "); tb_add(&rules, v); }
        tb_lit_tok(&rules, s, "</arg_value>\n");
        tb_add(&rules, "\n");
        k++;
    }
    tb_add(&b, "\n");
    tb_add(&b, rules.p);
    free(rules.p);
    if (!rc && (b.oom || rules.oom)) rc = api_fail(e, 500, NULL, NULL, "out of memory");
    if (rc) { free(b.p); return rc; }
    *out = k ? b.p : (free(b.p), strdup(""));
    return *out ? 0 : api_fail(e, 500, NULL, NULL, "out of memory");
}

/* Each tool's JSON grammar replaced by its key/value one; *kv_raw gets the
 * raw (string) keys per tool name. */
static int kv_grammars(srv *s, json_t *tools, char **gbnf, json_t **kv_raw, api_err *e) {
    *kv_raw = json_object();
    if (!*kv_raw) return api_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function"), *keys = json_object();
        char *g = NULL;
        if (!keys || json_object_set_new(*kv_raw, json_string_value(json_object_get(fn, "name")), keys))
            return api_fail(e, 500, NULL, NULL, "out of memory");
        if (kv_tool(s, json_object_get(fn, "parameters"), i, &g, keys, e)) return -1;
        free(gbnf[i]);
        gbnf[i] = g;
    }
    return 0;
}

/* One call's arguments as the template writes them (arguments a JSON
 * object, or its text). */
static int kv_call(tbuf *b, json_t *fn, size_t i, size_t c, api_err *e) {
    json_t *nm = json_object_get(fn, "name"), *ar = json_object_get(fn, "arguments"), *obj = NULL;
    if (json_is_string(ar)) obj = json_loads(json_string_value(ar), JSON_DECODE_ANY, NULL);
    else if (json_is_object(ar)) obj = json_incref(ar);
    if (!json_is_string(nm) || !json_is_object(obj)) {
        json_decref(obj);
        return api_fail(e, 400, "messages", "invalid_value",
                        "'messages[%zu].tool_calls[%zu]' must be {\"id\", \"type\": \"function\", \"function\": {\"name\": string, \"arguments\": a JSON object}}", i, c);
    }
    const char *k;
    json_t *v;
    tb_add(b, "\n<tool_call>"); tb_add(b, json_string_value(nm)); tb_add(b, "\n");
    json_object_foreach(obj, k, v) {
        tb_add(b, "<arg_key>"); tb_add(b, k); tb_add(b, "</arg_key>\n<arg_value>");
        char *d = json_is_string(v) ? NULL : json_dumps(v, JSON_ENCODE_ANY);   /* tojson: ", " and ": " */
        tb_add(b, d ? d : json_string_value(v));
        free(d);
        tb_add(b, "</arg_value>\n");
    }
    tb_add(b, "</tool_call>");
    json_decref(obj);
    return 0;
}

/* GLM-4.5's template: the tools in a system turn of their own first, calls
 * after the assistant's content, results as role tool (chat.c groups them
 * under <|observation|>). */
static int kv_messages(json_t *ms, const moe_chat_msg *msgs, size_t n, json_t *tools, moe_chat_msg *o,
                       size_t *n_out, char ***owned, size_t *n_owned, api_err *e) {
    size_t k = 0;
    if (tools) {
        tbuf b = {0};
        tb_add(&b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                   "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n");
        for (size_t i = 0; i < json_array_size(tools); i++) {
            char *t = json_dumps(json_array_get(tools, i), 0);    /* tojson(ensure_ascii=False) */
            if (t) tb_add(&b, t); else b.oom = true;
            free(t);
            tb_add(&b, "\n");
        }
        tb_add(&b, "</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n"
                   "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
                   "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>");
        if (keep(owned, n_owned, &b, e)) return -1;
        o[k++] = (moe_chat_msg){"system", (*owned)[*n_owned - 1]};
    }
    for (size_t i = 0; i < n; i++) {
        json_t *tc = json_object_get(json_array_get(ms, i), "tool_calls");
        if (!strcmp(msgs[i].role, "tool") && need_call_id(ms, i, e)) return -1;
        if (strcmp(msgs[i].role, "assistant") || !tc || json_is_null(tc)) { o[k++] = msgs[i]; continue; }
        if (!json_is_array(tc)) return api_fail(e, 400, "messages", "invalid_type", "'messages[%zu].tool_calls' must be an array", i);
        tbuf b = {0};
        const char *c = msgs[i].content, *ce = c + strlen(c);   /* chat.c strips the content */
        while (*c && strchr(" \t\n\r\f\v", *c)) c++;
        while (ce > c && strchr(" \t\n\r\f\v", ce[-1])) ce--;
        tb_addn(&b, c, (size_t)(ce - c));
        for (size_t j = 0; j < json_array_size(tc); j++)
            if (kv_call(&b, json_object_get(json_array_get(tc, j), "function"), i, j, e)) { free(b.p); return -1; }
        tb_add(&b, "");
        if (keep(owned, n_owned, &b, e)) return -1;
        o[k++] = (moe_chat_msg){"assistant", (*owned)[*n_owned - 1]};
    }
    *n_out = k;
    return 0;
}

/* The current call's arguments parsed from the pairs written so far: the
 * JSON object grows pair by pair ({"k": V, ...), string values escaped,
 * others as written; true once </tool_call> closed it. */
static bool kv_progress(srv_tools *t, const char *base) {
    srv_tool_call *c = &t->calls[t->n_calls - 1];
    json_t *raw = json_object_get(t->kv_raw, c->name);
    const char *p = base + t->args_at;
    tbuf j = {0};
    bool done = false;
    tb_add(&j, "{");
    for (;;) {
        const char *q = p, *ke, *v, *ve;
        if (starts(&q, "</tool_call>")) { done = true; p = q; break; }
        if (!starts(&q, "<arg_key>") || !(ke = strstr(q, "</arg_key>"))) break;
        char *key = strndup(q, (size_t)(ke - q));
        q = ke + strlen("</arg_key>");
        const bool is_raw = key && json_is_true(json_object_get(raw, key));
        if (!key || !starts(&q, "\n<arg_value>") || !(ve = is_raw ? strstr(v = q, "</arg_value>") : json_end(v = q))) { free(key); break; }
        q = ve;
        if (!starts(&q, "</arg_value>") || !starts(&q, "\n")) { free(key); break; }
        json_t *ks = json_string(key), *vs = is_raw ? json_stringn(v, (size_t)(ve - v)) : NULL;
        char *kd = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL, *vd = vs ? json_dumps(vs, JSON_ENCODE_ANY) : NULL;
        if (j.n > 1) tb_add(&j, ", ");
        if (kd) tb_add(&j, kd); else j.oom = true;
        tb_add(&j, ": ");
        if (is_raw) { if (vd) tb_add(&j, vd); else j.oom = true; }
        else tb_addn(&j, v, (size_t)(ve - v));
        free(kd); free(vd); json_decref(ks); json_decref(vs); free(key);
        p = q;
    }
    if (done) tb_add(&j, "}");
    const bool ok = !j.oom && set_args(t, c, j.p, j.n);
    free(j.p);
    if (!ok || !done) return false;
    c->complete = true;
    t->version++;
    t->parse_at = (size_t)(p - base);
    t->phase = PH_OPEN;
    return true;
}
