/* serve_api.c — the OpenAI request and response bodies of `moefast serve`.
 *
 * Requests are checked field by field; an error names the field the way
 * OpenAI does ({"error":{"message","type","param","code"}}). Unknown fields
 * are ignored, as OpenAI's own SDKs send fields newer than any server. The
 * response shapes follow the OpenAI API reference: chat.completion,
 * chat.completion.chunk, text_completion, list of models. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"

int api_fail(api_err *e, int status, const char *param, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    e->status = status;
    e->param = param;
    e->code = code;
    e->type = status >= 500 ? "server_error" : "invalid_request_error";
    return -1;
}

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

/* Error messages quote request text (a role, a model name) cut at a byte
 * count: non-ASCII bytes become '?' so the JSON string is always valid. */
static json_t *ascii_string(const char *m) {
    char b[sizeof ((api_err *)0)->message];
    size_t i = 0;
    for (; m[i] && i + 1 < sizeof b; i++) b[i] = (unsigned char)m[i] < 0x80 ? m[i] : '?';
    b[i] = 0;
    return json_string(b);
}

char *api_error_json(const api_err *e) {
    json_t *o = json_object(), *er = json_object();
    json_object_set_new(er, "message", ascii_string(e->message));
    json_object_set_new(er, "type", json_string(e->type ? e->type : "invalid_request_error"));
    json_object_set_new(er, "param", str_or_null(e->param));
    json_object_set_new(er, "code", str_or_null(e->code));
    json_object_set_new(o, "error", er);
    char *d = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return d;
}

/* ---- field readers: -1 after api_fail ----------------------------------- */

static int get_num(json_t *o, const char *k, double lo, double hi, double *v, bool *set, api_err *e) {
    json_t *x = json_object_get(o, k);
    if (set) *set = false;
    if (!x || json_is_null(x)) return 0;
    if (!json_is_number(x)) return api_fail(e, 400, k, "invalid_type", "'%s' must be a number", k);
    const double d = json_number_value(x);
    if (!(d >= lo && d <= hi)) return api_fail(e, 400, k, "invalid_value", "'%s' must be in [%g, %g], got %g", k, lo, hi, d);
    *v = d;
    if (set) *set = true;
    return 0;
}

static int get_int(json_t *o, const char *k, long long *v, bool *set, api_err *e) {
    json_t *x = json_object_get(o, k);
    *set = false;
    if (!x || json_is_null(x)) return 0;
    if (!json_is_integer(x)) return api_fail(e, 400, k, "invalid_type", "'%s' must be an integer", k);
    *v = json_integer_value(x);
    *set = true;
    return 0;
}

static int get_bool(json_t *o, const char *k, bool *v, api_err *e) {
    json_t *x = json_object_get(o, k);
    if (!x || json_is_null(x)) return 0;
    if (!json_is_boolean(x)) return api_fail(e, 400, k, "invalid_type", "'%s' must be a boolean", k);
    *v = json_is_true(x);
    return 0;
}

static int get_stop(json_t *o, srv_req *r, api_err *e) {
    json_t *x = json_object_get(o, "stop");
    if (!x || json_is_null(x)) return 0;
    json_t *one[1] = {x};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(x)) {
        n = json_array_size(x);
        if (n > SRV_MAX_STOP) return api_fail(e, 400, "stop", "invalid_value", "'stop' has %zu sequences; at most %d", n, SRV_MAX_STOP);
        items = NULL;
    } else if (!json_is_string(x))
        return api_fail(e, 400, "stop", "invalid_type", "'stop' must be a string or an array of strings");
    for (size_t i = 0; i < n; i++) {
        json_t *it = items ? items[i] : json_array_get(x, i);
        if (!json_is_string(it)) return api_fail(e, 400, "stop", "invalid_type", "'stop[%zu]' must be a string", i);
        const size_t l = json_string_length(it);
        if (l == 0 || l > 256) return api_fail(e, 400, "stop", "invalid_value", "'stop' sequences must be 1 to 256 bytes, got %zu", l);
        if (!(r->stop[r->n_stop] = strdup(json_string_value(it)))) return api_fail(e, 500, NULL, NULL, "out of memory");
        r->n_stop++;
        if (l > r->max_stop_len) r->max_stop_len = l;
    }
    return 0;
}

/* ---- prompts ------------------------------------------------------------- */

static int tokenize_text(srv *s, srv_req *r, const char *text, size_t len, const char *param, api_err *e) {
    char err[MOE_ERR_LEN];
    size_t need = 0;
    const bool bos = moe_token_add_bos(s->m);
    if (moe_tokenize(s->m, text, len, bos, true, NULL, 0, &need, err, sizeof err))
        return api_fail(e, 400, param, "invalid_value", "%s", err);
    if (need == 0) return api_fail(e, 400, param, "invalid_value", "'%s' has no tokens", param);
    if (need > (size_t)s->n_ctx)
        return api_fail(e, 400, param, "context_length_exceeded", "the prompt (%zu tokens) exceeds the context (%d tokens)", need, s->n_ctx);
    if (!(r->prompt = malloc(need * sizeof *r->prompt))) return api_fail(e, 500, NULL, NULL, "out of memory");
    if (moe_tokenize(s->m, text, len, bos, true, r->prompt, need, &need, err, sizeof err))
        return api_fail(e, 400, param, "invalid_value", "%s", err);
    r->n_prompt = (int)need;
    return 0;
}

/* A message's content: a string, an array of {"type":"text","text":...}
 * parts (joined), or null (an assistant turn that only called tools). */
static int message_content(json_t *c, size_t i, const char **out, char **owned, api_err *e) {
    char param[48];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    *owned = NULL;
    if (!c || json_is_null(c)) { *out = ""; return 0; }
    if (json_is_string(c)) { *out = json_string_value(c); return 0; }
    if (!json_is_array(c)) return api_fail(e, 400, "messages", "invalid_type", "'%s' must be a string or an array of text parts", param);
    size_t total = 0, np = json_array_size(c);
    for (size_t k = 0; k < np; k++) {
        json_t *p = json_array_get(c, k), *ty = json_object_get(p, "type"), *tx = json_object_get(p, "text");
        if (!json_is_object(p) || !json_is_string(ty) || strcmp(json_string_value(ty), "text") || !json_is_string(tx))
            return api_fail(e, 400, "messages", "invalid_value", "'%s[%zu]' must be {\"type\": \"text\", \"text\": string} (only text is supported)", param, k);
        total += json_string_length(tx);
    }
    char *b = malloc(total + 1);
    if (!b) return api_fail(e, 500, NULL, NULL, "out of memory");
    size_t at = 0;
    for (size_t k = 0; k < np; k++) {
        json_t *tx = json_object_get(json_array_get(c, k), "text");
        memcpy(b + at, json_string_value(tx), json_string_length(tx));
        at += json_string_length(tx);
    }
    b[at] = 0;
    *out = *owned = b;
    return 0;
}

/* Any tool result or assistant tool_calls in the conversation: the
 * messages then go through tools_messages (the template's tool syntax). */
static bool has_tool_turns(json_t *ms) {
    for (size_t i = 0; i < json_array_size(ms); i++) {
        json_t *m = json_array_get(ms, i), *ro = json_object_get(m, "role"), *tc = json_object_get(m, "tool_calls");
        if ((json_is_string(ro) && !strcmp(json_string_value(ro), "tool")) || (tc && !json_is_null(tc))) return true;
    }
    return false;
}

/* An assistant message's reasoning_content (DeepSeek's API, llama.cpp's
 * server): a string or null. A template that writes reasoning back (Qwen3,
 * GLM-4.5) finds it as <think>R</think> before the content, the form it
 * splits itself; the others drop it, as their templates do. */
static int history_reasoning(srv *s, json_t *m, size_t i, bool assistant, const char **content, char **owned, api_err *e) {
    json_t *x = json_object_get(m, "reasoning_content");
    if (!x || json_is_null(x)) return 0;
    if (!json_is_string(x))
        return api_fail(e, 400, "messages", "invalid_type", "'messages[%zu].reasoning_content' must be a string or null", i);
    if (!assistant || json_string_length(x) == 0 || !reason_history_folds(s)) return 0;
    const size_t rl = json_string_length(x), cl = strlen(*content);
    char *b = malloc(rl + cl + 16);
    if (!b) return api_fail(e, 500, NULL, NULL, "out of memory");
    snprintf(b, rl + cl + 16, "<think>%s</think>%s", json_string_value(x), *content);
    free(*owned);
    *content = *owned = b;
    return 0;
}

static int append_text(char **text, const char *add, api_err *e) {
    const size_t tl = strlen(*text), al = strlen(add);
    char *t2 = realloc(*text, tl + al + 1);
    if (!t2) return api_fail(e, 500, NULL, NULL, "out of memory");
    memcpy(t2 + tl, add, al + 1);
    *text = t2;
    return 0;
}

/* chat_template_kwargs.enable_thinking (llama.cpp's and vLLM's field for
 * Qwen3's template variable): a boolean; other templates ignore it. */
static int get_enable_thinking(json_t *o, bool *think, api_err *e) {
    json_t *k = json_object_get(o, "chat_template_kwargs");
    if (!k || json_is_null(k)) return 0;
    if (!json_is_object(k)) return api_fail(e, 400, "chat_template_kwargs", "invalid_type", "'chat_template_kwargs' must be an object");
    json_t *x = json_object_get(k, "enable_thinking");
    if (!x || json_is_null(x)) return 0;
    if (!json_is_boolean(x))
        return api_fail(e, 400, "chat_template_kwargs", "invalid_type", "'chat_template_kwargs.enable_thinking' must be a boolean");
    *think = json_is_true(x);
    return 0;
}

/* reasoning_effort (OpenAI's field; llama.cpp also takes it in
 * chat_template_kwargs): "low", "medium" or "high", the levels gpt-oss's
 * system message knows; *effort stays NULL when absent. Checked for every
 * model; only the harmony format uses it. */
static int get_reasoning_effort(json_t *o, const char **effort, api_err *e) {
    json_t *x = json_object_get(o, "reasoning_effort");
    const char *field = "reasoning_effort";
    json_t *k = json_object_get(o, "chat_template_kwargs");
    if ((!x || json_is_null(x)) && json_is_object(k)) { x = json_object_get(k, "reasoning_effort"); field = "chat_template_kwargs"; }
    if (!x || json_is_null(x)) return 0;
    static const char *const LEVELS[] = {"low", "medium", "high"};
    for (int i = 0; i < 3 && json_is_string(x); i++)
        if (!strcmp(json_string_value(x), LEVELS[i])) { *effort = LEVELS[i]; return 0; }
    return api_fail(e, 400, field, json_is_string(x) ? "invalid_value" : "invalid_type",
                    "'%s' must be \"low\", \"medium\" or \"high\"", !strcmp(field, "reasoning_effort") ? field : "chat_template_kwargs.reasoning_effort");
}

/* The template settings as chat.c's pseudo-roles before the messages:
 * harmony's system message (reasoning effort, function tools declared),
 * GLM-4.5's enable_thinking false. *out: NULL when there are none, else
 * malloc'd with *n_out entries. */
static int template_settings(const srv *s, const moe_chat_msg *msgs, size_t n, const char *effort, bool tools, bool think,
                             moe_chat_msg **out, size_t *n_out, api_err *e) {
    moe_chat_msg pre[3];
    size_t k = 0;
    if (s->harmony && effort) pre[k++] = (moe_chat_msg){"reasoning_effort", effort};
    if (s->harmony && tools) pre[k++] = (moe_chat_msg){"functions", ""};
    if (!think && reason_glm45(s)) pre[k++] = (moe_chat_msg){"enable_thinking", "false"};
    *out = NULL;
    if (k == 0) return 0;
    moe_chat_msg *m = malloc((n + k) * sizeof *m);
    if (!m) return api_fail(e, 500, NULL, NULL, "out of memory");
    memcpy(m, pre, k * sizeof *m);
    memcpy(m + k, msgs, n * sizeof *m);
    *out = m;
    *n_out = n + k;
    return 0;
}

static int chat_prompt(srv *s, json_t *o, srv_req *r, json_t *tools, api_err *e) {
    json_t *ms = json_object_get(o, "messages");
    if (!ms) return api_fail(e, 400, "messages", "missing_required_parameter", "'messages' is required");
    if (!json_is_array(ms)) return api_fail(e, 400, "messages", "invalid_type", "'messages' must be an array");
    const size_t n = json_array_size(ms);
    if (n == 0) return api_fail(e, 400, "messages", "invalid_value", "'messages' must not be empty");
    static const char *const ROLES[] = {"system", "developer", "user", "assistant", "tool"};
    moe_chat_msg *msgs = calloc(n, sizeof *msgs);
    char **owned = calloc(n, sizeof *owned);
    int rc = 0;
    if (!msgs || !owned) rc = api_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_t *m = json_array_get(ms, i), *role = json_object_get(m, "role");
        if (!json_is_object(m)) { rc = api_fail(e, 400, "messages", "invalid_type", "'messages[%zu]' must be an object", i); break; }
        if (!json_is_string(role)) { rc = api_fail(e, 400, "messages", "invalid_value", "'messages[%zu].role' must be a string", i); break; }
        const char *rs = json_string_value(role);
        size_t k = 0;
        while (k < 5 && strcmp(rs, ROLES[k])) k++;
        if (k == 5) {
            rc = api_fail(e, 400, "messages", "invalid_value",
                          "'messages[%zu].role': unknown role '%.40s' (system, developer, user, assistant, tool)", i, rs);
            break;
        }
        json_t *c = json_object_get(m, "content");
        if ((!c || json_is_null(c)) && k != 3) {
            rc = api_fail(e, 400, "messages", "missing_required_parameter", "'messages[%zu].content' is required for role '%s'", i, rs);
            break;
        }
        msgs[i].role = k == 1 ? "system" : ROLES[k];  /* "developer" is the newer name of "system" */
        rc = message_content(c, i, &msgs[i].content, &owned[i], e);
        if (rc == 0) rc = history_reasoning(s, m, i, k == 3, &msgs[i].content, &owned[i], e);
    }
    char *text = NULL, err[MOE_ERR_LEN];
    moe_chat_msg *tm = NULL;                       /* with tools: the messages rewritten (serve_tools.c) */
    char **towned = NULL;
    size_t tn = 0, tn_owned = 0;
    if (rc == 0 && (tools || has_tool_turns(ms)))
        rc = tools_messages(s, ms, msgs, n, tools, &tm, &tn, &towned, &tn_owned, e);
    const char *effort = NULL;
    bool think = true;
    moe_chat_msg *hm = NULL;                       /* the template's settings first */
    size_t nh = 0;
    if (rc == 0) rc = get_reasoning_effort(o, &effort, e);
    if (rc == 0) rc = get_enable_thinking(o, &think, e);
    if (rc == 0) rc = template_settings(s, tm ? tm : msgs, tm ? tn : n, effort, tools != NULL, think, &hm, &nh, e);
    if (rc == 0 && moe_chat_render(s->m, s->chat_format, hm ? hm : tm ? tm : msgs, hm ? nh : tm ? tn : n, true, &text, err, sizeof err))
        rc = api_fail(e, 500, NULL, NULL, "%s", err);
    free(hm);
    /* Qwen3's template with enable_thinking false: an empty think block, then the answer */
    if (rc == 0 && !think && reason_qwen3(s)) rc = append_text(&text, "<think>\n\n</think>\n\n", e);
    const char *forced = tools_forced_text(r);     /* required / named: the calls begin after the prompt */
    if (rc == 0 && forced) rc = append_text(&text, forced, e);
    if (rc == 0) r->think_open = reason_prompt_open(text);   /* the template opened the think block */
    r->harmony = s->harmony;
    if (rc == 0) rc = tokenize_text(s, r, text, strlen(text), "messages", e);
    free(text);
    free(tm);
    for (size_t i = 0; i < tn_owned; i++) free(towned[i]);
    free(towned);
    for (size_t i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(msgs);
    return rc;
}

static int completion_prompt(srv *s, json_t *o, srv_req *r, api_err *e) {
    json_t *p = json_object_get(o, "prompt");
    if (!p) return api_fail(e, 400, "prompt", "missing_required_parameter", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0))) p = json_array_get(p, 0);
    if (json_is_string(p)) return tokenize_text(s, r, json_string_value(p), json_string_length(p), "prompt", e);
    if (!json_is_array(p))
        return api_fail(e, 400, "prompt", "invalid_type", "'prompt' must be a string, an array of token ids or an array of one string");
    const size_t n = json_array_size(p);
    if (n == 0) return api_fail(e, 400, "prompt", "invalid_value", "'prompt' must not be empty");
    if (n > (size_t)s->n_ctx)
        return api_fail(e, 400, "prompt", "context_length_exceeded", "the prompt (%zu tokens) exceeds the context (%d tokens)", n, s->n_ctx);
    if (!(r->prompt = malloc(n * sizeof *r->prompt))) return api_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(p, i);
        if (!json_is_integer(x))
            return api_fail(e, 400, "prompt", "invalid_type", "'prompt[%zu]' must be a token id (one prompt per request; n = 1)", i);
        const long long id = json_integer_value(x);
        if (id < 0 || id >= s->n_vocab)
            return api_fail(e, 400, "prompt", "invalid_value", "'prompt[%zu]': token id %lld is outside the vocabulary (0..%d)", i, id, s->n_vocab - 1);
        r->prompt[i] = (int32_t)id;
    }
    r->n_prompt = (int)n;
    return 0;
}

/* ---- the whole request ---------------------------------------------------- */

/* logit_bias: {"token id": bias, ...} (OpenAI's shape: ids as decimal
 * strings, biases in [-100, 100]). */
static int parse_logit_bias(srv *s, json_t *o, srv_req *r, api_err *e) {
    json_t *b = json_object_get(o, "logit_bias");
    if (!b || json_is_null(b)) return 0;
    if (!json_is_object(b)) return api_fail(e, 400, "logit_bias", "invalid_type", "'logit_bias' must be an object of token id -> bias");
    const size_t n = json_object_size(b);
    if (n == 0) return 0;
    if (n > (size_t)s->n_vocab)
        return api_fail(e, 400, "logit_bias", "invalid_value", "'logit_bias' has %zu entries, more than the vocabulary's %d tokens", n, s->n_vocab);
    int32_t *ids = malloc(n * sizeof *ids);
    float *vals = malloc(n * sizeof *vals);
    int rc = 0, k = 0;
    if (!ids || !vals) rc = api_fail(e, 500, NULL, NULL, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(b, key, v) {
        if (rc) break;
        char *end;
        errno = 0;
        const long id = strtol(key, &end, 10);
        if (!*key || *end || errno || id < 0 || id >= s->n_vocab) {
            rc = api_fail(e, 400, "logit_bias", "invalid_value", "'logit_bias': key '%.40s' is not a token id (0..%d)", key, s->n_vocab - 1);
            break;
        }
        if (!json_is_number(v)) { rc = api_fail(e, 400, "logit_bias", "invalid_type", "'logit_bias[\"%.40s\"]' must be a number", key); break; }
        const double d = json_number_value(v);
        if (!(d >= -100.0 && d <= 100.0)) {
            rc = api_fail(e, 400, "logit_bias", "invalid_value", "'logit_bias[\"%.40s\"]' must be in [-100, 100], got %g", key, d);
            break;
        }
        ids[k] = (int32_t)id;
        vals[k++] = (float)d;
    }
    char err[MOE_ERR_LEN];
    if (!rc && moe_sampler_set_logit_bias(r->smp, ids, vals, k, err, sizeof err)) rc = api_fail(e, 400, "logit_bias", "invalid_value", "%s", err);
    free(ids);
    free(vals);
    return rc;
}

/* repeat_penalty (> 0, 1: off) and repeat_last_n (-1: the whole context,
 * 0: off; default 64), llama.cpp's server's fields and formula (engine.h).
 * The window starts with the prompt's tokens, as llama.cpp's server's
 * does; one longer than prompt + max_tokens (-1 too) is that long — it
 * holds every token either way. */
static int parse_repeat(json_t *o, srv_req *r, api_err *e) {
    double rep = 1.0;
    long long last_n = 64;
    bool set;
    if (get_num(o, "repeat_penalty", -HUGE_VAL, HUGE_VAL, &rep, NULL, e) || get_int(o, "repeat_last_n", &last_n, &set, e)) return -1;
    if (!(rep > 0.0 && rep <= 1e6))
        return api_fail(e, 400, "repeat_penalty", "invalid_value", "'repeat_penalty' must be > 0 and at most 1e6 (1: off), got %g", rep);
    if (last_n < -1)
        return api_fail(e, 400, "repeat_last_n", "invalid_value", "'repeat_last_n' must be -1 (the whole context), 0 (off) or more, got %lld", last_n);
    const long long all = (long long)r->n_prompt + r->max_tokens;
    if (last_n == -1 || last_n > all) last_n = all;
    if (rep == 1.0 || last_n == 0) return 0;
    char err[MOE_ERR_LEN];
    if (moe_sampler_set_repeat_penalty(r->smp, (float)rep, (int)last_n, err, sizeof err))
        return api_fail(e, 400, "repeat_penalty", "invalid_value", "%s", err);
    moe_sampler_accept_context(r->smp, r->prompt, r->n_prompt);
    return 0;
}

/* presence_penalty, frequency_penalty ([-2, 2], OpenAI's formula over the
 * completion's tokens: engine.h), the repeat penalty and logit_bias. */
static int parse_penalties(srv *s, json_t *o, srv_req *r, api_err *e) {
    double pres = 0.0, freq = 0.0;
    if (get_num(o, "presence_penalty", -2, 2, &pres, NULL, e) || get_num(o, "frequency_penalty", -2, 2, &freq, NULL, e)) return -1;
    char err[MOE_ERR_LEN];
    if ((pres != 0.0 || freq != 0.0) && moe_sampler_set_penalties(r->smp, (float)pres, (float)freq, err, sizeof err))
        return api_fail(e, 400, "presence_penalty", "invalid_value", "%s", err);
    if (parse_repeat(o, r, e)) return -1;
    return parse_logit_bias(s, o, r, e);
}

static int parse_sampling(srv *s, json_t *o, srv_req *r, api_err *e) {
    double temp = 1.0, top_p = 1.0, min_p = 0.0;
    long long top_k = 0, seed = 0;
    bool seed_set, k_set;
    if (get_num(o, "temperature", 0, 2, &temp, NULL, e) || get_num(o, "top_p", 0, 1, &top_p, NULL, e) ||
        get_num(o, "min_p", 0, 1, &min_p, NULL, e) || get_int(o, "top_k", &top_k, &k_set, e) || get_int(o, "seed", &seed, &seed_set, e))
        return -1;
    if (top_k < 0 || top_k > s->n_vocab)
        return api_fail(e, 400, "top_k", "invalid_value", "'top_k' must be in [0, %d], got %lld", s->n_vocab, top_k);
    /* no seed: a fresh one per request, as OpenAI's sampling is unseeded */
    const uint64_t sd = seed_set ? (uint64_t)seed + (uint64_t)r->choice : (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ r->id * 0xbf58476d1ce4e5b9ull;
    moe_sampler_params sp = {.temp = (float)temp, .top_k = (int)top_k, .top_p = (float)top_p, .min_p = (float)min_p, .seed = sd};
    char err[MOE_ERR_LEN];
    if (moe_sampler_new(&sp, s->n_vocab, &r->smp, err, sizeof err)) return api_fail(e, 400, NULL, "invalid_value", "%s", err);
    return parse_penalties(s, o, r, e);
}

static int parse_limits(srv *s, json_t *o, int kind, srv_req *r, api_err *e) {
    long long mt = 0, n = 1;
    bool set = false, set2 = false, nset;
    const char *name = "max_tokens";
    if (get_int(o, "n", &n, &nset, e)) return -1;
    if (n < 1 || n > SRV_MAX_CHOICES) return api_fail(e, 400, "n", "invalid_value", "'n' must be in [1, %d], got %lld", SRV_MAX_CHOICES, n);
    r->n_choices = (int)n;
    if (kind == SRV_CHAT && get_int(o, "max_completion_tokens", &mt, &set2, e)) return -1;
    if (set2) name = "max_completion_tokens";
    else if (get_int(o, "max_tokens", &mt, &set, e)) return -1;
    if (set || set2) {
        if (mt < 1) return api_fail(e, 400, name, "invalid_value", "'%s' must be at least 1, got %lld", name, mt);
        if (mt > (long long)s->n_ctx - r->n_prompt)
            return api_fail(e, 400, name, "context_length_exceeded",
                            "the prompt (%d tokens) + '%s' (%lld) exceed the context (%d tokens)", r->n_prompt, name, mt, s->n_ctx);
        r->max_tokens = (int)mt;
    } else {
        r->max_tokens = s->n_ctx - r->n_prompt;
        if (r->max_tokens < 1)
            return api_fail(e, 400, kind == SRV_CHAT ? "messages" : "prompt", "context_length_exceeded",
                            "the prompt (%d tokens) leaves no room in the context (%d tokens)", r->n_prompt, s->n_ctx);
    }
    return 0;
}

/* Chat: "logprobs": true with "top_logprobs" 0..20 (OpenAI refuses
 * top_logprobs without logprobs, so do we). Completions (the legacy API):
 * "logprobs": the number of alternatives, 0..5. r->n_top = -1: none. */
static int get_logprobs(json_t *o, int kind, srv_req *r, api_err *e) {
    long long k = 0;
    bool set = false, on = false;
    r->n_top = -1;
    if (kind == SRV_COMPLETION) {
        if (get_int(o, "logprobs", &k, &set, e)) return -1;
        if (set && (k < 0 || k > 5)) return api_fail(e, 400, "logprobs", "invalid_value", "'logprobs' must be in [0, 5], got %lld", k);
        if (set) r->n_top = (int)k;
        return 0;
    }
    if (get_bool(o, "logprobs", &on, e) || get_int(o, "top_logprobs", &k, &set, e)) return -1;
    if (set && (k < 0 || k > 20)) return api_fail(e, 400, "top_logprobs", "invalid_value", "'top_logprobs' must be in [0, 20], got %lld", k);
    if (set && !on) return api_fail(e, 400, "top_logprobs", "invalid_value", "'top_logprobs' needs 'logprobs': true");
    if (on) r->n_top = set ? (int)k : 0;
    return 0;
}

/* "reasoning_format" (llama.cpp's server's field): "deepseek" (or "auto")
 * returns <think> reasoning as reasoning_content, "none" leaves it in the
 * content; absent: the server's --reasoning-format. */
static int get_reasoning_format(srv *s, json_t *o, srv_req *r, api_err *e) {
    json_t *x = json_object_get(o, "reasoning_format");
    r->reason = s->reason_extract;
    if (!x || json_is_null(x)) return 0;
    if (!json_is_string(x)) return api_fail(e, 400, "reasoning_format", "invalid_type", "'reasoning_format' must be a string");
    const char *v = json_string_value(x);
    if (!strcmp(v, "none")) r->reason = false;
    else if (!strcmp(v, "deepseek") || !strcmp(v, "auto")) r->reason = true;
    else return api_fail(e, 400, "reasoning_format", "invalid_value", "'reasoning_format' must be 'none', 'deepseek' or 'auto', got '%.40s'", v);
    return 0;
}

/* `grammar` (GBNF text) and `response_format` ({"type": "text" |
 * "json_object" | "json_schema", "json_schema": {"schema": {...}}}): a
 * constraint for the request; a bad grammar or schema is a 400 naming the
 * place (line:column, the schema's JSON path). */
static int get_grammar(srv *s, json_t *o, srv_req *r, api_err *e) {
    json_t *g = json_object_get(o, "grammar"), *rf = json_object_get(o, "response_format");
    if (g && json_is_null(g)) g = NULL;
    if (rf && json_is_null(rf)) rf = NULL;
    if (!g && !rf) return 0;
    char err[MOE_ERR_LEN];
    int rc;
    const char *param = g ? "grammar" : "response_format";
    if (g && rf) return api_fail(e, 400, "grammar", "invalid_value", "give one of 'grammar' and 'response_format'");
    if (g) {
        if (!json_is_string(g)) return api_fail(e, 400, "grammar", "invalid_type", "'grammar' must be a string (GBNF)");
        rc = gcache_build(s, r, 'G', json_string_value(g), json_string_length(g), err, sizeof err);
    } else {
        json_t *ty = json_object_get(rf, "type");
        const char *t = json_is_string(ty) ? json_string_value(ty) : NULL;
        if (!json_is_object(rf) || !t)
            return api_fail(e, 400, "response_format", "invalid_type", "'response_format' must be an object with a string 'type'");
        if (!strcmp(t, "text")) return 0;
        if (!strcmp(t, "json_object")) {
            rc = gcache_build(s, r, 'S', "{\"type\":\"object\"}", 17, err, sizeof err);
        } else if (!strcmp(t, "json_schema")) {
            json_t *js = json_object_get(rf, "json_schema"), *sc = json_object_get(js, "schema");
            if (!json_is_object(js) || !sc)
                return api_fail(e, 400, "response_format", "invalid_value", "'response_format.json_schema.schema' is required");
            char *txt = json_dumps(sc, JSON_COMPACT | JSON_ENCODE_ANY);
            if (!txt) return api_fail(e, 500, NULL, NULL, "out of memory");
            rc = gcache_build(s, r, 'S', txt, strlen(txt), err, sizeof err);
            free(txt);
        } else {
            return api_fail(e, 400, "response_format", "invalid_value",
                            "'response_format.type' must be 'text', 'json_object' or 'json_schema', got '%.40s'", t);
        }
    }
    if (rc == MOE_ENOMEM) return api_fail(e, 500, NULL, NULL, "out of memory");
    if (rc) return api_fail(e, 400, param, "invalid_value", "%s", err);
    if (!(r->allowed = malloc((size_t)s->n_vocab))) return api_fail(e, 500, NULL, NULL, "out of memory");
    return 0;
}

/* ---- /tokenize and /detokenize (llama.cpp server's shapes) ----------------- */

static char *dump_free(json_t *o, bool sse);

static json_t *parse_object(const char *body, size_t n, api_err *e) {
    json_error_t je;
    json_t *o = json_loadb(body, n, 0, &je);
    if (!o) api_fail(e, 400, NULL, "invalid_json", "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
    else if (!json_is_object(o)) { api_fail(e, 400, NULL, "invalid_json", "the body must be a JSON object"); json_decref(o); o = NULL; }
    return o;
}

/* bytes as a JSON string, invalid UTF-8 as U+FFFD (jansson takes UTF-8 only) */
static json_t *utf8_string(const char *p, size_t len) {
    moe_utf8_stream *u = moe_utf8_stream_new();
    char *buf = malloc(4 * len + 8);
    json_t *j = NULL;
    if (u && buf) {
        size_t k = moe_utf8_stream_push(u, p, len, buf, 4 * len + 4);
        k += moe_utf8_stream_flush(u, buf + k, 4 * len + 8 - k);
        j = json_stringn(buf, k);
    }
    moe_utf8_stream_free(u);
    free(buf);
    return j;
}

/* {"content": text, "add_special": bool (BOS when the model adds one;
 * default false), "parse_special": bool (default true), "with_pieces":
 * bool} -> {"tokens": [id, ...]} or [{"id", "piece"}, ...]. */
char *api_tokenize_json(srv *s, const char *body, size_t n, api_err *e) {
    json_t *o = parse_object(body, n, e);
    if (!o) return NULL;
    bool add = false, parse = true, pieces = false;
    json_t *c = json_object_get(o, "content"), *out = NULL;
    int32_t *ids = NULL;
    char err[MOE_ERR_LEN];
    size_t need = 0;
    if (!json_is_string(c)) api_fail(e, 400, "content", c ? "invalid_type" : "missing_required_parameter", "'content' must be a string");
    else if (get_bool(o, "add_special", &add, e) || get_bool(o, "parse_special", &parse, e) || get_bool(o, "with_pieces", &pieces, e)) {
    } else if (moe_tokenize(s->m, json_string_value(c), json_string_length(c), add && moe_token_add_bos(s->m), parse, NULL, 0,
                            &need, err, sizeof err) ||
               !(ids = malloc((need ? need : 1) * sizeof *ids)) ||
               moe_tokenize(s->m, json_string_value(c), json_string_length(c), add && moe_token_add_bos(s->m), parse, ids, need,
                            &need, err, sizeof err)) {
        if (ids) api_fail(e, 400, "content", "invalid_value", "%s", err); else api_fail(e, 500, NULL, NULL, "out of memory");
    } else {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < need; i++) {
            if (!pieces) { json_array_append_new(arr, json_integer(ids[i])); continue; }
            const char *p = "";
            size_t pl = 0;
            if (moe_token_piece(s->m, ids[i], true, &p, &pl)) pl = 0;
            json_array_append_new(arr, json_pack("{s:i, s:o}", "id", (json_int_t)ids[i], "piece", utf8_string(p, pl)));
        }
        out = json_pack("{s:o}", "tokens", arr);
    }
    free(ids);
    json_decref(o);
    if (!out) { if (!e->status) api_fail(e, 500, NULL, NULL, "out of memory"); return NULL; }
    return dump_free(out, false);
}

/* {"tokens": [id, ...]} -> {"content": the pieces joined, control tokens
 * spelled, invalid UTF-8 as U+FFFD}. */
char *api_detokenize_json(srv *s, const char *body, size_t n, api_err *e) {
    json_t *o = parse_object(body, n, e);
    if (!o) return NULL;
    json_t *t = json_object_get(o, "tokens"), *out = NULL;
    char *text = NULL;
    size_t len = 0, cap = 0;
    if (!json_is_array(t)) api_fail(e, 400, "tokens", t ? "invalid_type" : "missing_required_parameter", "'tokens' must be an array of token ids");
    for (size_t i = 0; json_is_array(t) && i < json_array_size(t); i++) {
        json_t *x = json_array_get(t, i);
        const long long id = json_is_integer(x) ? json_integer_value(x) : -1;
        if (id < 0 || id >= s->n_vocab) {
            api_fail(e, 400, "tokens", "invalid_value", "'tokens[%zu]' must be a token id (0..%d)", i, s->n_vocab - 1);
            break;
        }
        const char *p = "";
        size_t pl = 0;
        if (moe_token_piece(s->m, (int32_t)id, true, &p, &pl)) pl = 0;
        if (len + pl + 1 > cap) {
            size_t nc = cap ? cap * 2 : 256;
            while (nc < len + pl + 1) nc *= 2;
            char *nt = realloc(text, nc);
            if (!nt) { api_fail(e, 500, NULL, NULL, "out of memory"); break; }
            text = nt;
            cap = nc;
        }
        memcpy(text + len, p, pl);
        len += pl;
    }
    if (!e->status) out = json_pack("{s:o}", "content", utf8_string(text ? text : "", len));
    free(text);
    json_decref(o);
    if (!out) { if (!e->status) api_fail(e, 500, NULL, NULL, "out of memory"); return NULL; }
    return dump_free(out, false);
}

int api_parse(srv *s, int kind, const char *body, size_t n, int choice, srv_req **out, api_err *e) {
    *out = NULL;
    json_error_t je;
    json_t *o = json_loadb(body, n, 0, &je);
    if (!o) return api_fail(e, 400, NULL, "invalid_json", "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
    srv_req *r = NULL;
    int rc = -1;
    if (!json_is_object(o)) { api_fail(e, 400, NULL, "invalid_json", "the body must be a JSON object"); goto done; }
    json_t *mdl = json_object_get(o, "model");
    if (mdl && !json_is_string(mdl)) { api_fail(e, 400, "model", "invalid_type", "'model' must be a string"); goto done; }
    if (mdl && strcmp(json_string_value(mdl), s->model_name)) {
        api_fail(e, 404, "model", "model_not_found", "The model '%.100s' does not exist (this server has '%s')", json_string_value(mdl), s->model_name);
        goto done;
    }
    if (!(r = srv_req_new(s))) { api_fail(e, 500, NULL, NULL, "out of memory"); goto done; }
    r->kind = kind;
    r->choice = choice;
    r->created = (long)time(NULL);
    r->cache_prompt = true;
    json_t *so = json_object_get(o, "stream_options");
    if (get_bool(o, "stream", &r->stream, e) || get_bool(o, "return_tokens", &r->return_tokens, e) ||
        get_bool(o, "cache_prompt", &r->cache_prompt, e) || get_logprobs(o, kind, r, e)) goto done;
    if (so && !json_is_null(so) && (!json_is_object(so) || get_bool(so, "include_usage", &r->include_usage, e))) {
        if (!json_is_object(so)) api_fail(e, 400, "stream_options", "invalid_type", "'stream_options' must be an object");
        goto done;
    }
    if (get_stop(o, r, e) || (kind == SRV_CHAT && get_reasoning_format(s, o, r, e))) goto done;
    bool forced = false;
    json_t *tools = NULL;
    if (kind == SRV_CHAT && tools_parse(s, o, r, &forced, &tools, e)) goto done;
    if ((kind == SRV_CHAT ? chat_prompt(s, o, r, tools, e) : completion_prompt(s, o, r, e))) goto done;
    if (parse_limits(s, o, kind, r, e) || parse_sampling(s, o, r, e) || (!r->gram && get_grammar(s, o, r, e))) goto done;
    if (r->tools && (!(r->tools->raw_at = malloc((size_t)r->max_tokens * sizeof(size_t))) ||
                     !(r->tools->txt_at = malloc((size_t)r->max_tokens * sizeof(size_t))))) {
        api_fail(e, 500, NULL, NULL, "out of memory");
        goto done;
    }
    r->model_name = strdup(s->model_name);
    r->gen = malloc((size_t)r->max_tokens * sizeof *r->gen);
    r->cap = 256;
    r->text = malloc(r->cap);
    r->utf8 = moe_utf8_stream_new();
    if (r->n_top >= 0) {
        const size_t nt = (size_t)r->max_tokens, nk = nt * (size_t)(r->n_top ? r->n_top : 1);
        r->lp = malloc(nt * sizeof *r->lp);
        r->tok_end = malloc(nt * sizeof *r->tok_end);
        r->top_id = malloc(nk * sizeof *r->top_id);
        r->top_lp = malloc(nk * sizeof *r->top_lp);
        if (!r->lp || !r->tok_end || !r->top_id || !r->top_lp) { api_fail(e, 500, NULL, NULL, "out of memory"); goto done; }
    }
    if (!r->model_name || !r->gen || !r->text || !r->utf8) { api_fail(e, 500, NULL, NULL, "out of memory"); goto done; }
    r->text[0] = 0;
    rc = 0;
done:
    json_decref(o);
    if (rc) srv_req_unref(s, r);
    else *out = r;
    return rc;
}

/* ---- responses -------------------------------------------------------------- */

/* The usage of n choices: the prompt (and its cached tokens) once, as
 * the choices share it, the completions summed. */
static json_t *usage_json_n(srv_req *const *rs, int n) {
    json_t *u = json_object(), *d = json_object();
    int gen = 0;
    for (int i = 0; i < n; i++) gen += rs[i]->n_gen;
    json_object_set_new(u, "prompt_tokens", json_integer(rs[0]->n_prompt));
    json_object_set_new(u, "completion_tokens", json_integer(gen));
    json_object_set_new(u, "total_tokens", json_integer(rs[0]->n_prompt + gen));
    json_object_set_new(d, "cached_tokens", json_integer(rs[0]->n_cached));
    json_object_set_new(u, "prompt_tokens_details", d);
    return u;
}

static json_t *head_json(const srv_req *r, bool chunk) {
    char id[48];
    snprintf(id, sizeof id, "%s-%llu", r->kind == SRV_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)r->answer_id);
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "object", json_string(r->kind == SRV_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion"));
    json_object_set_new(o, "created", json_integer(r->created));
    json_object_set_new(o, "model", json_string(r->model_name));
    json_object_set_new(o, "system_fingerprint", json_string("moefast"));
    return o;
}

static char *dump_free(json_t *o, bool sse) {
    char *d = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!d || !sse) return d;
    const size_t l = strlen(d);
    char *ev = malloc(l + 9);
    if (ev) { memcpy(ev, "data: ", 6); memcpy(ev + 6, d, l); memcpy(ev + 6 + l, "\n\n", 3); }
    free(d);
    return ev;
}

/* ---- logprobs ----------------------------------------------------------------
 * A token's text in a logprobs entry: its bytes (control tokens by name),
 * made valid UTF-8 (a byte that does not complete a character there becomes
 * U+FFFD, as OpenAI does); "bytes" keeps the raw bytes. */
static json_t *token_string(srv *s, moe_utf8_stream *u, int32_t id) {
    const char *p;
    size_t n;
    char buf[4 * 64 + 8];
    if (moe_token_piece(s->m, id, true, &p, &n) != MOE_OK) n = 0;
    if (n > 64) n = 64;                            /* longer pieces do not exist in real vocabularies */
    size_t k = moe_utf8_stream_push(u, p, n, buf, sizeof buf);
    k += moe_utf8_stream_flush(u, buf + k, sizeof buf - k);
    return json_stringn(buf, k);
}

static json_t *token_bytes(srv *s, int32_t id) {
    const char *p;
    size_t n;
    json_t *a = json_array();
    if (moe_token_piece(s->m, id, true, &p, &n) == MOE_OK)
        for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

static json_t *lp_entry(srv *s, moe_utf8_stream *u, int32_t id, float lp) {
    json_t *o = json_object();
    json_object_set_new(o, "token", token_string(s, u, id));
    json_object_set_new(o, "logprob", json_real(lp));
    json_object_set_new(o, "bytes", token_bytes(s, id));
    return o;
}

/* Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}], "refusal": null}. */
static json_t *chat_logprobs(srv *s, const srv_req *r, moe_utf8_stream *u, int from, int to) {
    json_t *o = json_object(), *c = json_array();
    for (int i = from; i < to; i++) {
        json_t *e = lp_entry(s, u, r->gen[i], r->lp[i]), *top = json_array();
        for (int j = 0; j < r->n_top; j++) {
            const size_t at = (size_t)i * (size_t)r->n_top + (size_t)j;
            json_array_append_new(top, lp_entry(s, u, r->top_id[at], r->top_lp[at]));
        }
        json_object_set_new(e, "top_logprobs", top);
        json_array_append_new(c, e);
    }
    json_object_set_new(o, "content", c);
    json_object_set_new(o, "refusal", json_null());
    return o;
}

/* Completions (legacy): {tokens, token_logprobs, top_logprobs: [{text: lp}], text_offset}. */
static json_t *completion_logprobs(srv *s, const srv_req *r, moe_utf8_stream *u, int from, int to, size_t len) {
    json_t *o = json_object(), *tk = json_array(), *tl = json_array(), *top = json_array(), *off = json_array();
    for (int i = from; i < to; i++) {
        json_array_append_new(tk, token_string(s, u, r->gen[i]));
        json_array_append_new(tl, json_real(r->lp[i]));
        json_t *alt = json_object();
        for (int j = 0; j < r->n_top; j++) {
            const size_t at = (size_t)i * (size_t)r->n_top + (size_t)j;
            json_t *t = token_string(s, u, r->top_id[at]);
            json_object_set_new(alt, json_string_value(t), json_real(r->top_lp[at]));
            json_decref(t);
        }
        json_array_append_new(top, alt);
        /* where the token's text starts in the answer (text cut by a stop string: its end) */
        const size_t start = i ? r->tok_end[i - 1] : 0;
        json_array_append_new(off, json_integer((json_int_t)(start < len ? start : len)));
    }
    json_object_set_new(o, "tokens", tk);
    json_object_set_new(o, "token_logprobs", tl);
    json_object_set_new(o, "top_logprobs", top);
    json_object_set_new(o, "text_offset", off);
    return o;
}

/* The logprobs of generated tokens from..to of r, or null without them;
 * len: the answer's text length when they were taken (under the lock). */
static json_t *logprobs_json(srv *s, const srv_req *r, int from, int to, size_t len) {
    if (r->n_top < 0) return json_null();
    moe_utf8_stream *u = moe_utf8_stream_new();
    if (!u) return json_null();
    json_t *o = r->kind == SRV_CHAT ? chat_logprobs(s, r, u, from, to) : completion_logprobs(s, r, u, from, to, len);
    moe_utf8_stream_free(u);
    return o;
}

static json_t *final_obj(srv *s, srv_req *r);

char *api_final_json(srv *s, srv_req *r, int *status) {
    srv_req *const one[1] = {r};
    return api_final_json_n(s, one, 1, status);
}

char *api_final_json_n(srv *s, srv_req *const *rs, int n, int *status) {
    for (int i = 0; i < n; i++)
        if (rs[i]->err_status) {
            api_err e = {0};
            api_fail(&e, rs[i]->err_status, NULL, NULL, "%s", rs[i]->errmsg);
            *status = rs[i]->err_status;
            return api_error_json(&e);
        }
    *status = 200;
    json_t *o = final_obj(s, rs[0]), *arr = json_object_get(o, "choices");
    for (int i = 1; i < n; i++) {
        json_t *oi = final_obj(s, rs[i]), *ch = json_array_get(json_object_get(oi, "choices"), 0);
        json_array_append(arr, ch);
        json_decref(oi);
    }
    json_object_set_new(o, "usage", usage_json_n(rs, n));
    return dump_free(o, false);
}

static json_t *final_obj(srv *s, srv_req *r) {
    json_t *o = head_json(r, false), *ch = json_object(), *arr = json_array();
    json_object_set_new(ch, "index", json_integer(r->choice));
    if (r->kind == SRV_CHAT) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("assistant"));
        const bool calls = r->tools && r->finish && !strcmp(r->finish, "tool_calls");   /* complete calls only */
        reason_span sp = {.c_to = r->len};
        if (r->reason) reason_split_req(r, r->text, r->len, true, &sp);
        const size_t clen = sp.c_to - sp.c_from;
        /* with tool calls and no text before them, content is null (as OpenAI) */
        json_object_set_new(msg, "content", calls && clen == 0 ? json_null() : json_stringn(r->text + sp.c_from, clen));
        if (sp.r_to > sp.r_from) json_object_set_new(msg, "reasoning_content", json_stringn(r->text + sp.r_from, sp.r_to - sp.r_from));
        json_object_set_new(msg, "refusal", json_null());
        if (calls) json_object_set_new(msg, "tool_calls", tools_calls_json(r));
        json_object_set_new(ch, "message", msg);
    } else
        json_object_set_new(ch, "text", json_stringn(r->text, r->len));
    json_object_set_new(ch, "logprobs", logprobs_json(s, r, 0, r->n_gen, r->len));
    json_object_set_new(ch, "finish_reason", json_string(r->finish));
    if (r->return_tokens) {
        json_t *t = json_array();
        for (int i = 0; i < r->n_gen; i++) json_array_append_new(t, json_integer(r->gen[i]));
        json_object_set_new(ch, "tokens", t);
    }
    json_array_append_new(arr, ch);
    json_object_set_new(o, "choices", arr);
    return o;
}

char *api_error_chunk(srv *s, srv_req *r) {
    api_err e = {0};
    api_fail(&e, r->err_status, NULL, NULL, "%s", r->errmsg);
    char *d = api_error_json(&e), *ev = d ? malloc(strlen(d) + 9) : NULL;
    if (ev) sprintf(ev, "data: %s\n\n", d);
    free(d);
    return ev;
}

char *api_chunk(srv *s, srv_req *r, const char *text, size_t len, bool role, const char *finish, const api_lp_span *lp) {
    return api_chunk_field(s, r, "content", text, len, role, finish, lp);
}

char *api_chunk_field(srv *s, srv_req *r, const char *field, const char *text, size_t len, bool role, const char *finish,
                      const api_lp_span *lp) {
    json_t *o = head_json(r, true), *ch = json_object(), *arr = json_array();
    json_object_set_new(ch, "index", json_integer(r->choice));
    if (r->kind == SRV_CHAT) {
        json_t *d = json_object();
        if (role) json_object_set_new(d, "role", json_string("assistant"));
        if (role || len) json_object_set_new(d, field, json_stringn(text, len));
        json_object_set_new(ch, "delta", d);
    } else
        json_object_set_new(ch, "text", json_stringn(text, len));
    json_object_set_new(ch, "logprobs", !lp || lp->to <= lp->from ? json_null() : logprobs_json(s, r, lp->from, lp->to, lp->text_len));
    json_object_set_new(ch, "finish_reason", str_or_null(finish));
    if (finish && r->return_tokens) {
        json_t *t = json_array();
        for (int i = 0; i < r->n_gen; i++) json_array_append_new(t, json_integer(r->gen[i]));
        json_object_set_new(ch, "tokens", t);
    }
    json_array_append_new(arr, ch);
    json_object_set_new(o, "choices", arr);
    if (r->include_usage) json_object_set_new(o, "usage", json_null());
    return dump_free(o, true);
}

char *api_delta_chunk(srv *s, srv_req *r, json_t *delta) {
    json_t *o = head_json(r, true), *ch = json_object(), *arr = json_array();
    json_object_set_new(ch, "index", json_integer(r->choice));
    json_object_set_new(ch, "delta", delta);
    json_object_set_new(ch, "logprobs", json_null());
    json_object_set_new(ch, "finish_reason", json_null());
    json_array_append_new(arr, ch);
    json_object_set_new(o, "choices", arr);
    if (r->include_usage) json_object_set_new(o, "usage", json_null());
    return dump_free(o, true);
}

char *api_usage_chunk(srv *s, srv_req *r) {
    srv_req *const one[1] = {r};
    return api_usage_chunk_n(s, one, 1);
}

char *api_usage_chunk_n(srv *s, srv_req *const *rs, int n) {
    json_t *o = head_json(rs[0], true);
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage_json_n(rs, n));
    return dump_free(o, true);
}

char *api_models_json(srv *s, bool one) {
    json_t *o = json_object(), *arr = json_array(), *m = json_object();
    json_object_set_new(m, "id", json_string(s->model_name));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer(0));
    json_object_set_new(m, "owned_by", json_string("moefast"));
    if (one) {
        json_decref(o);
        json_decref(arr);
        return dump_free(m, false);
    }
    json_array_append_new(arr, m);
    json_object_set_new(o, "object", json_string("list"));
    json_object_set_new(o, "data", arr);
    return dump_free(o, false);
}
