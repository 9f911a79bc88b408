/* serve_harmony.c — gpt-oss's harmony format for an agent loop's history
 * (docs/SERVE.md, "Tool calls"): the tools declared in the developer
 * message as gpt-oss's chat template writes them (a TypeScript-like
 * `namespace functions`), assistant calls in the commentary channel with
 * the recipient, results from `functions.NAME` back to the assistant, the
 * reasoning before a call kept as an analysis message until a final answer
 * follows (OpenAI's harmony cookbook; chat.c renders the pseudo-roles). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

static void tb_json(tbuf *b, json_t *v) {                  /* Jinja's tojson: ", " and ": " */
    char *d = json_dumps(v, JSON_ENCODE_ANY);
    if (d) tb_add(b, d); else b->oom = true;
    free(d);
}

/* A JSON value as Jinja's `~`/`+` writes it into text: a string as is. */
static void tb_text(tbuf *b, json_t *v) {
    if (json_is_string(v)) tb_add(b, json_string_value(v));
    else tb_json(b, v);
}

static bool type_is(json_t *spec, const char *t) {
    json_t *ty = json_object_get(spec, "type");
    return json_is_string(ty) && !strcmp(json_string_value(ty), t);
}

static bool listed(json_t *arr, const char *name) {
    for (size_t i = 0; i < json_array_size(arr); i++)
        if (json_is_string(json_array_get(arr, i)) && !strcmp(json_string_value(json_array_get(arr, i)), name)) return true;
    return false;
}

/* gpt-oss's render_typescript_type: a parameter's type in TypeScript words.
 * The template's whitespace under transformers' jinja2 settings (trim_blocks,
 * lstrip_blocks) is kept: a nested object's member types follow ": " on a
 * new line indented 16 spaces, oneOf variants are joined by " | \n" and a
 * variant's default comes after 20 spaces, as the template renders them. */
static void ts_type(tbuf *b, json_t *spec, int depth) {
    json_t *ty = json_object_get(spec, "type"), *one = json_object_get(spec, "oneOf");
    const bool nullable = json_is_true(json_object_get(spec, "nullable"));
    if (depth > 16) { tb_add(b, "any"); return; }
    if (type_is(spec, "array")) {
        json_t *it = json_object_get(spec, "items");
        if (!json_is_object(it)) tb_add(b, "any[]");
        else if (type_is(it, "string")) tb_add(b, "string[]");
        else if (type_is(it, "number") || type_is(it, "integer")) tb_add(b, "number[]");
        else if (type_is(it, "boolean")) tb_add(b, "boolean[]");
        else {
            tbuf in = {0};
            ts_type(&in, it, depth + 1);
            if (in.oom || !in.p || !strcmp(in.p, "object | object") || in.n > 50) tb_add(b, "any[]");
            else { tb_add(b, in.p); tb_add(b, "[]"); }
            free(in.p);
        }
        if (nullable) tb_add(b, " | null");
    } else if (json_is_array(ty) && json_array_size(ty) > 0) {
        for (size_t i = 0; i < json_array_size(ty); i++) {
            if (i) tb_add(b, " | ");
            tb_text(b, json_array_get(ty, i));
        }
    } else if (json_is_array(one) && json_array_size(one) > 0) {
        bool objects = false;
        for (size_t i = 0; i < json_array_size(one); i++) objects |= type_is(json_array_get(one, i), "object");
        if (objects && json_array_size(one) > 1) { tb_add(b, "any"); return; }
        for (size_t i = 0; i < json_array_size(one); i++) {
            json_t *v = json_array_get(one, i), *d = json_object_get(v, "description");
            ts_type(b, v, depth + 1);
            if (json_is_string(d)) { tb_add(b, "// "); tb_add(b, json_string_value(d)); }
            if (json_object_get(v, "default")) { tb_add(b, "                    // default: "); tb_json(b, json_object_get(v, "default")); }
            if (i + 1 < json_array_size(one)) tb_add(b, " | \n");
        }
    } else if (type_is(spec, "string")) {
        json_t *en = json_object_get(spec, "enum");
        if (json_is_array(en) && json_array_size(en)) {
            tb_add(b, "\"");
            for (size_t i = 0; i < json_array_size(en); i++) {
                if (i) tb_add(b, "\" | \"");
                tb_text(b, json_array_get(en, i));
            }
            tb_add(b, "\"");
        } else {
            tb_add(b, "string");
            if (nullable) tb_add(b, " | null");
        }
    } else if (type_is(spec, "number") || type_is(spec, "integer")) tb_add(b, "number");
    else if (type_is(spec, "boolean")) tb_add(b, "boolean");
    else if (type_is(spec, "object")) {
        json_t *props = json_object_get(spec, "properties"), *req = json_object_get(spec, "required");
        if (!json_is_object(props) || !json_object_size(props)) { tb_add(b, "object"); return; }
        tb_add(b, "{\n");
        size_t k = 0;
        const char *name;
        json_t *ps;
        json_object_foreach(props, name, ps) {
            tb_add(b, name);
            if (!listed(req, name)) tb_add(b, "?");
            tb_add(b, ": \n                ");
            ts_type(b, ps, depth + 1);
            if (++k < json_object_size(props)) tb_add(b, ", ");
        }
        tb_add(b, "}");
    } else
        tb_add(b, "any");
}

/* The developer message: the instructions (the first system message) and
 * the tools as gpt-oss's template declares them. */
static void developer_text(tbuf *b, const char *instructions, json_t *tools) {
    if (instructions) { tb_add(b, "# Instructions\n\n"); tb_add(b, instructions); tb_add(b, "\n\n"); }
    if (!tools) return;
    tb_add(b, "# Tools\n\n## functions\n\nnamespace functions {\n\n");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function"), *d = json_object_get(fn, "description");
        json_t *pa = json_object_get(fn, "parameters"), *props = json_object_get(pa, "properties"), *req = json_object_get(pa, "required");
        if (json_is_string(d)) { tb_add(b, "// "); tb_add(b, json_string_value(d)); tb_add(b, "\n"); }
        tb_add(b, "type ");
        tb_add(b, json_string_value(json_object_get(fn, "name")));
        tb_add(b, " = ");
        if (!json_is_object(props) || !json_object_size(props)) { tb_add(b, "() => any;\n\n"); continue; }
        tb_add(b, "(_: {\n");
        const char *name;
        json_t *ps;
        json_object_foreach(props, name, ps) {
            json_t *pd = json_object_get(ps, "description"), *def = json_object_get(ps, "default");
            if (json_is_string(pd)) { tb_add(b, "// "); tb_add(b, json_string_value(pd)); tb_add(b, "\n"); }
            tb_add(b, name);
            if (!listed(req, name)) tb_add(b, "?");
            tb_add(b, ": ");
            ts_type(b, ps, 0);
            if (def && json_object_get(ps, "enum")) { tb_add(b, ", // default: "); tb_text(b, def); }
            else if (def && json_object_get(ps, "oneOf")) { tb_add(b, "// default: "); tb_text(b, def); }
            else if (def) { tb_add(b, ", // default: "); tb_json(b, def); }
            tb_add(b, ",\n");
        }
        tb_add(b, "}) => any;\n\n");
    }
    tb_add(b, "} // namespace functions");
}

static int keep(char ***owned, size_t *n_owned, tbuf *b, api_err *e) {
    char **no = b->oom ? NULL : realloc(*owned, (*n_owned + 1) * sizeof *no);
    if (!no) { free(b->p); return api_fail(e, 500, NULL, NULL, "out of memory"); }
    *owned = no;
    no[(*n_owned)++] = b->p ? b->p : strdup("");
    return no[*n_owned - 1] ? 0 : api_fail(e, 500, NULL, NULL, "out of memory");
}

/* A string kept for the request's life: "PREFIX" + s. */
static const char *kept(char ***owned, size_t *n_owned, const char *prefix, const char *s, api_err *e) {
    tbuf b = {0};
    tb_add(&b, prefix);
    tb_add(&b, s);
    return keep(owned, n_owned, &b, e) ? NULL : (*owned)[*n_owned - 1];
}

static bool call_name_ok(const char *n) {
    const size_t l = strlen(n);
    if (l == 0 || l > 64) return false;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-')) return false;
    return true;
}

/* The name of the call a tool message answers: by tool_call_id, else (as
 * gpt-oss's template does) the most recent call's. */
static const char *result_name(json_t *ms, size_t i) {
    const char *id = json_string_value(json_object_get(json_array_get(ms, i), "tool_call_id")), *last = NULL;
    for (size_t j = 0; j < i; j++) {
        json_t *tc = json_object_get(json_array_get(ms, j), "tool_calls");
        for (size_t k = 0; k < json_array_size(tc); k++) {
            json_t *c = json_array_get(tc, k), *nm = json_object_get(json_object_get(c, "function"), "name");
            if (!json_is_string(nm)) continue;
            if (id && json_is_string(json_object_get(c, "id")) && !strcmp(json_string_value(json_object_get(c, "id")), id)) return json_string_value(nm);
            last = json_string_value(nm);
        }
    }
    return last;
}

/* An assistant message with calls, at i: its reasoning (reasoning_content,
 * else its content, as gpt-oss's template) as an analysis message unless a
 * final answer follows in the history (then the chain of thought is
 * dropped); content beside reasoning as a commentary preamble; then one
 * call message per call. */
static int assistant_turn(json_t *ms, const moe_chat_msg *msgs, size_t n, size_t i, json_t *tc, moe_chat_msg *o, size_t *k,
                          char ***owned, size_t *n_owned, api_err *e) {
    bool final_follows = false;
    for (size_t j = i + 1; j < n; j++) {
        json_t *t = json_object_get(json_array_get(ms, j), "tool_calls");
        final_follows |= !strcmp(msgs[j].role, "assistant") && (!t || json_is_null(t));
    }
    json_t *rs = json_object_get(json_array_get(ms, i), "reasoning_content");
    const char *reasoning = json_is_string(rs) && json_string_length(rs) ? json_string_value(rs) : NULL;
    const char *content = msgs[i].content;
    if (!final_follows && (reasoning || *content)) o[(*k)++] = (moe_chat_msg){"analysis", reasoning ? reasoning : content};
    if (!final_follows && reasoning && *content) o[(*k)++] = (moe_chat_msg){"commentary", content};
    for (size_t c = 0; c < json_array_size(tc); c++) {
        json_t *fn = json_object_get(json_array_get(tc, c), "function");
        json_t *nm = json_object_get(fn, "name"), *ar = json_object_get(fn, "arguments");
        if (!json_is_string(nm) || !call_name_ok(json_string_value(nm)) || !(json_is_string(ar) || json_is_object(ar)))
            return api_fail(e, 400, "messages", "invalid_value",
                            "'messages[%zu].tool_calls[%zu]' must be {\"id\", \"type\": \"function\", \"function\": {\"name\": 1-64 of a-zA-Z0-9_-, \"arguments\": string}}", i, c);
        tbuf a = {0};
        tb_add(&a, "");
        if (json_is_object(ar)) tb_json(&a, ar); else tb_add(&a, json_string_value(ar));
        if (keep(owned, n_owned, &a, e)) return -1;
        const char *args = (*owned)[*n_owned - 1], *role = kept(owned, n_owned, "to=functions.", json_string_value(nm), e);
        if (!role) return -1;
        o[(*k)++] = (moe_chat_msg){role, args};
    }
    return 0;
}

int harmony_messages(json_t *ms, const moe_chat_msg *msgs, size_t n, json_t *tools, moe_chat_msg **out, size_t *n_out,
                     char ***owned, size_t *n_owned, api_err *e) {
    size_t cap = n + 1;
    for (size_t i = 0; i < n; i++) cap += 2 + json_array_size(json_object_get(json_array_get(ms, i), "tool_calls"));
    moe_chat_msg *o = realloc(*out, cap * sizeof *o);
    if (!o) return api_fail(e, 500, NULL, NULL, "out of memory");
    *out = o;
    size_t k = 0, i = 0;
    if (tools) {                                   /* the developer message declares them */
        tbuf b = {0};
        tb_add(&b, "");
        if (n && !strcmp(msgs[0].role, "system")) { developer_text(&b, msgs[0].content, tools); i = 1; }
        else developer_text(&b, NULL, tools);
        if (keep(owned, n_owned, &b, e)) return -1;
        o[k++] = (moe_chat_msg){"developer", (*owned)[*n_owned - 1]};
    }
    for (; i < n; i++) {
        json_t *tc = json_object_get(json_array_get(ms, i), "tool_calls");
        if (!strcmp(msgs[i].role, "tool")) {
            if (!json_is_string(json_object_get(json_array_get(ms, i), "tool_call_id")))
                return api_fail(e, 400, "messages", "missing_required_parameter", "'messages[%zu].tool_call_id' is required for role 'tool'", i);
            const char *name = result_name(ms, i);
            if (!name) return api_fail(e, 400, "messages", "invalid_value", "'messages[%zu]': a tool result without an earlier assistant call", i);
            const char *role = kept(owned, n_owned, "functions.", name, e);
            if (!role) return -1;
            o[k++] = (moe_chat_msg){role, msgs[i].content};
        } else if (!strcmp(msgs[i].role, "assistant") && tc && !json_is_null(tc)) {
            if (!json_is_array(tc)) return api_fail(e, 400, "messages", "invalid_type", "'messages[%zu].tool_calls' must be an array", i);
            if (assistant_turn(ms, msgs, n, i, tc, o, &k, owned, n_owned, e)) return -1;
        } else
            o[k++] = msgs[i];
    }
    *n_out = k;
    return 0;
}
