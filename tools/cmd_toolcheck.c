/* cmd_toolcheck.c — `moefast toolcheck URL`: runs the tool-call scenarios
 * (toolcheck_scen.c) against an OpenAI-compatible endpoint, deterministic
 * requests (temperature 0, seed 1), each answer checked and each failure
 * classified and kept with its full request and response; results as JSON
 * and CSV (docs/TOOLCHECK.md). HTTP is libcurl's. */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "toolcheck.h"

static const char HELP[] =
    "usage: moefast toolcheck URL [--model M] [--api-key KEY] [--json FILE] [--csv FILE]\n"
    "                         [--only SUBSTR] [--timeout S]\n"
    "\n"
    "Tool-call conformance of an OpenAI-compatible endpoint. URL is the API base\n"
    "(http://127.0.0.1:8080/v1). Runs %d scenarios (argument shapes, every\n"
    "tool_choice mode, parallel calls, streaming reassembly, multi-turn with tool\n"
    "results, traps, limits, bad requests), deterministic (temperature 0, seed 1),\n"
    "and classifies each failure (error, empty_response, unparsed_tool_call,\n"
    "wrong_function, invalid_arguments, schema_violation, ...). Scenarios only a\n"
    "trained model can pass are counted apart. Exit 0 when every structural\n"
    "scenario passes, 1 otherwise, 2 on bad usage.\n"
    "  --model M      the model field (default: the first of GET URL/models)\n"
    "  --api-key KEY  Authorization: Bearer KEY (default: $OPENAI_API_KEY)\n"
    "  --json FILE    every scenario's result; failures with request and response\n"
    "  --csv FILE     one row per scenario\n"
    "  --only SUBSTR  the scenarios whose name contains SUBSTR\n"
    "  --timeout S    per request (default 300)\n";

typedef struct buf { char *p; size_t n; } buf;

static size_t on_data(char *d, size_t sz, size_t nm, void *u) {
    buf *b = u;
    const size_t n = sz * nm;
    char *np = realloc(b->p, b->n + n + 1);
    if (!np) return 0;
    memcpy(np + b->n, d, n);
    b->n += n;
    np[b->n] = 0;
    b->p = np;
    return n;
}

typedef struct tc_ctx { const char *base, *key; long timeout; } tc_ctx;

/* One HTTP exchange; body NULL: GET. Returns the status (0: transport error in err). */
static int http(const tc_ctx *c, const char *path, const char *body, buf *out, char *err, size_t errlen) {
    CURL *h = curl_easy_init();
    if (!h) { snprintf(err, errlen, "curl_easy_init failed"); return 0; }
    char url[1024], auth[600];
    snprintf(url, sizeof url, "%s%s", c->base, path);
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    if (c->key) { snprintf(auth, sizeof auth, "Authorization: Bearer %s", c->key); hd = curl_slist_append(hd, auth); }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, c->timeout);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (body) curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    const CURLcode rc = curl_easy_perform(h);
    long st = 0;
    if (rc != CURLE_OK) snprintf(err, errlen, "%.200s: %s", url, curl_easy_strerror(rc));
    else curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    return rc == CURLE_OK ? (int)st : 0;
}

/* The request body of a scenario (malloc'd). */
static char *request_body(const tc_scen *s, const char *model, bool stream) {
    if (s->raw_body) return strdup(s->raw_body);
    json_t *o = json_object();
    json_error_t je;
    if (model) json_object_set_new(o, "model", json_string(model));
    json_object_set_new(o, "messages", json_loads(s->messages, 0, &je));
    if (s->tools) json_object_set_new(o, "tools", json_loads(s->tools, 0, &je));
    if (s->choice) json_object_set_new(o, "tool_choice", json_loads(s->choice, JSON_DECODE_ANY, &je));
    if (s->parallel >= 0) json_object_set_new(o, "parallel_tool_calls", json_boolean(s->parallel));
    json_object_set_new(o, "temperature", json_integer(0));
    json_object_set_new(o, "seed", json_integer(1));
    json_object_set_new(o, "max_tokens", json_integer(s->max_tokens));
    if (stream) json_object_set_new(o, "stream", json_true());
    char *d = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return d;
}

static void answer_free(tc_answer *a) {
    json_decref(a->body);
    json_decref(a->calls);
    free(a->content);
    memset(a, 0, sizeof *a);
}

static void take_message(tc_answer *a, json_t *ch) {
    json_t *m = json_object_get(ch, "message"), *c = json_object_get(m, "content"), *tc = json_object_get(m, "tool_calls");
    if (json_is_string(c)) a->content = strdup(json_string_value(c));
    a->calls = json_is_array(tc) ? json_incref(tc) : json_array();
    const char *f = json_string_value(json_object_get(ch, "finish_reason"));
    snprintf(a->finish, sizeof a->finish, "%s", f ? f : "");
}

/* A stream's deltas joined as OpenAI's SDKs join them: content appended,
 * tool_calls by index (id, type and name from the first delta, arguments
 * concatenated). */
static void take_stream(tc_answer *a, const char *sse) {
    buf content = {0};
    a->calls = json_array();
    bool any = false, done = false;
    for (const char *l = sse; l && *l;) {
        const char *e = strchr(l, '\n');
        const size_t n = e ? (size_t)(e - l) : strlen(l);
        if (n > 6 && !strncmp(l, "data: ", 6)) {
            if (n == 12 && !strncmp(l + 6, "[DONE]", 6)) done = true;
            json_error_t je;
            json_t *ev = done ? NULL : json_loadb(l + 6, n - 6, JSON_ALLOW_NUL, &je);
            json_t *ch = json_array_get(json_object_get(ev, "choices"), 0), *d = json_object_get(ch, "delta");
            if (json_object_get(ev, "error")) snprintf(a->err, sizeof a->err, "stream error event: %.150s", l + 6);
            json_t *c = json_object_get(d, "content"), *tcs = json_object_get(d, "tool_calls");
            if (json_is_string(c)) { on_data((char *)json_string_value(c), 1, json_string_length(c), &content); any = true; }
            size_t i;
            json_t *tc;
            json_array_foreach(tcs, i, tc) {
                const size_t k = (size_t)json_integer_value(json_object_get(tc, "index"));
                while (json_array_size(a->calls) <= k && k < 128) {
                    json_t *nc = json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", "", "type", "function", "function", "name", "", "arguments", "");
                    json_array_append_new(a->calls, nc);
                }
                json_t *call = json_array_get(a->calls, k), *f = json_object_get(call, "function"), *df = json_object_get(tc, "function");
                if (!call) continue;
                if (json_is_string(json_object_get(tc, "id"))) json_object_set(call, "id", json_object_get(tc, "id"));
                json_t *nm = json_object_get(df, "name"), *ar = json_object_get(df, "arguments");
                if (json_is_string(nm)) {
                    char *j = NULL;
                    if (asprintf(&j, "%s%s", json_string_value(json_object_get(f, "name")), json_string_value(nm)) > 0)
                        json_object_set_new(f, "name", json_string(j));
                    free(j);
                }
                if (json_is_string(ar)) {
                    buf x = {0};
                    const char *old = json_string_value(json_object_get(f, "arguments"));
                    on_data((char *)old, 1, strlen(old), &x);
                    on_data((char *)json_string_value(ar), 1, json_string_length(ar), &x);
                    json_object_set_new(f, "arguments", json_string(x.p ? x.p : ""));
                    free(x.p);
                }
            }
            const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
            if (fr) snprintf(a->finish, sizeof a->finish, "%s", fr);
            json_decref(ev);
        }
        l = e ? e + 1 : NULL;
    }
    if (any) a->content = content.p ? content.p : strdup("");
    else free(content.p);
    if (!done && !a->err[0]) snprintf(a->err, sizeof a->err, "the stream did not end with [DONE]");
}

static void ask(const tc_ctx *c, const char *body, bool stream, tc_answer *a, char **raw) {
    buf out = {0};
    memset(a, 0, sizeof *a);
    a->status = http(c, "/chat/completions", body, &out, a->err, sizeof a->err);
    *raw = out.p ? out.p : strdup("");
    if (!a->status) return;
    if (stream && a->status == 200) { take_stream(a, *raw); return; }
    json_error_t je;
    a->body = json_loads(*raw, JSON_ALLOW_NUL, &je);
    if (a->status == 200 && !a->body) { snprintf(a->err, sizeof a->err, "the response is not JSON: %s", je.text); return; }
    json_t *ch = json_array_get(json_object_get(a->body, "choices"), 0);
    if (a->status == 200 && !ch) { snprintf(a->err, sizeof a->err, "the response has no choices[0]"); return; }
    if (ch) take_message(a, ch);
}

/* The calls' names and arguments (ids differ between two answers). */
static bool same_calls(json_t *x, json_t *y) {
    if (json_array_size(x) != json_array_size(y)) return false;
    for (size_t i = 0; i < json_array_size(x); i++) {
        json_t *fx = json_object_get(json_array_get(x, i), "function"), *fy = json_object_get(json_array_get(y, i), "function");
        if (!json_equal(json_object_get(fx, "name"), json_object_get(fy, "name")) ||
            !json_equal(json_object_get(fx, "arguments"), json_object_get(fy, "arguments"))) return false;
    }
    return true;
}

typedef struct tc_result { const char *cls; char why[300]; char finish[32]; int status, n_calls; } tc_result;

/* Runs scenario s: the result, and into rec its JSON record. */
static void run_scen(const tc_ctx *c, const tc_scen *s, const char *model, tc_result *res, json_t *rec) {
    char *body = request_body(s, model, s->stream), *raw = NULL;
    json_error_t je;
    json_t *tools = s->tools ? json_loads(s->tools, 0, &je) : json_array();
    tc_answer a;
    ask(c, body, s->stream, &a, &raw);
    res->cls = tc_check(s, tools, &a, res->why, sizeof res->why);
    char *body2 = NULL, *raw2 = NULL;
    if (!res->cls && s->stream) {                  /* the same request not streamed gives the same answer */
        tc_answer b;
        body2 = request_body(s, model, false);
        ask(c, body2, false, &b, &raw2);
        /* a cut call: the stream has its partial deltas, the answer none */
        const bool cut = s->expect == TC_LENGTH;
        const bool same = b.status == 200 && !strcmp(a.content ? a.content : "", b.content ? b.content : "") &&
                          (cut || same_calls(a.calls, b.calls)) && !strcmp(a.finish, b.finish);
        if (!same) {
            res->cls = "stream_mismatch";
            snprintf(res->why, sizeof res->why, "streamed: finish %s, %zu calls; not streamed: HTTP %d finish %s, %zu calls",
                     a.finish, json_array_size(a.calls), b.status, b.finish, json_array_size(b.calls));
        }
        answer_free(&b);
    }
    res->status = a.status;
    res->n_calls = (int)json_array_size(a.calls);
    snprintf(res->finish, sizeof res->finish, "%s", a.finish);
    json_object_set_new(rec, "name", json_string(s->name));
    json_object_set_new(rec, "category", json_string(s->category));
    json_object_set_new(rec, "kind", json_string(s->trained ? "trained" : "structural"));
    json_object_set_new(rec, "pass", json_boolean(!res->cls));
    json_object_set_new(rec, "class", res->cls ? json_string(res->cls) : json_null());
    json_object_set_new(rec, "detail", json_string(res->why));
    json_object_set_new(rec, "http_status", json_integer(a.status));
    json_object_set_new(rec, "finish_reason", json_string(a.finish));
    json_object_set_new(rec, "calls", a.calls ? json_incref(a.calls) : json_array());
    if (res->cls) {                                /* the full exchange, to reproduce it */
        json_object_set_new(rec, "request", json_string(body));
        json_t *rs = json_stringn(raw, strlen(raw));  /* NULL when the server sent invalid UTF-8 */
        json_object_set_new(rec, "response", rs ? rs : json_string("(the response is not valid UTF-8)"));
        if (raw2) json_object_set_new(rec, "response_not_streamed", json_string(raw2));
    }
    answer_free(&a);
    json_decref(tools);
    free(body);
    free(raw);
    free(body2);
    free(raw2);
}

static char *first_model(const tc_ctx *c, char *err, size_t errlen) {
    buf out = {0};
    const int st = http(c, "/models", NULL, &out, err, errlen);
    json_error_t je;
    json_t *o = st == 200 ? json_loads(out.p ? out.p : "", JSON_ALLOW_NUL, &je) : NULL;
    const char *id = json_string_value(json_object_get(json_array_get(json_object_get(o, "data"), 0), "id"));
    char *m = id ? strdup(id) : NULL;
    if (!m && !err[0]) snprintf(err, errlen, "GET %s/models: HTTP %d, no model id (give --model)", c->base, st);
    json_decref(o);
    free(out.p);
    return m;
}

static void csv_field(FILE *f, const char *s) {
    fputc('"', f);
    for (; s && *s; s++) { if (*s == '"') fputc('"', f); fputc(*s == '\n' ? ' ' : *s, f); }
    fputc('"', f);
}

int cmd_toolcheck(int argc, char **argv) {
    const char *C = "toolcheck", *url = NULL, *model = NULL, *json_path = NULL, *csv_path = NULL, *only = NULL;
    tc_ctx c = {.key = getenv("OPENAI_API_KEY"), .timeout = 300};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { printf(HELP, TC_N_SCENS); return 0; }
        const bool opt = !strcmp(a, "--model") || !strcmp(a, "--json") || !strcmp(a, "--csv") || !strcmp(a, "--api-key") ||
                         !strcmp(a, "--only") || !strcmp(a, "--timeout");
        if (opt && !v) return cli_fail(C, "%s needs a value", a);
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--json")) json_path = v;
        else if (!strcmp(a, "--csv")) csv_path = v;
        else if (!strcmp(a, "--api-key")) c.key = v;
        else if (!strcmp(a, "--only")) only = v;
        else if (!strcmp(a, "--timeout")) {
            char *end;
            c.timeout = strtol(v, &end, 10);
            if (*end || c.timeout < 1) return cli_fail(C, "--timeout must be a positive number of seconds, got '%s'", v);
        } else if (a[0] == '-' || url) return cli_fail(C, "unknown argument '%s' (see moefast toolcheck --help)", a);
        else url = a;
        if (opt) i++;
    }
    if (!url) return cli_fail(C, "URL is required (the API base, e.g. http://127.0.0.1:8080/v1)");
    if (strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) return cli_fail(C, "URL must start with http:// or https://, got '%s'", url);
    char base[900];
    snprintf(base, sizeof base, "%s", url);
    for (size_t l = strlen(base); l && base[l - 1] == '/'; l--) base[l - 1] = 0;
    c.base = base;
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) return cli_fail(C, "curl_global_init failed");
    char err[300] = "";
    char *m = model ? strdup(model) : first_model(&c, err, sizeof err);
    if (!m) { curl_global_cleanup(); return cli_fail(C, "%s", err); }
    json_t *all = json_array();
    FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
    if (csv_path && !csv) { free(m); json_decref(all); curl_global_cleanup(); return cli_fail(C, "cannot write %s", csv_path); }
    if (csv) fputs("name,category,kind,pass,class,detail,http_status,finish_reason,n_calls\n", csv);
    int n[2] = {0}, pass[2] = {0};
    for (int i = 0; i < TC_N_SCENS; i++) {
        const tc_scen *s = &TC_SCENS[i];
        if (only && !strstr(s->name, only)) continue;
        tc_result r = {0};
        json_t *rec = json_object();
        run_scen(&c, s, m, &r, rec);
        json_array_append_new(all, rec);
        n[s->trained]++;
        pass[s->trained] += !r.cls;
        printf("%-4s %-28s %-10s %s%s%s\n", r.cls ? "FAIL" : "ok", s->name, s->trained ? "trained" : "structural",
               r.cls ? r.cls : "", r.cls ? ": " : "", r.cls ? r.why : "");
        fflush(stdout);
        if (csv) {
            fprintf(csv, "%s,%s,%s,%d,%s,", s->name, s->category, s->trained ? "trained" : "structural", !r.cls, r.cls ? r.cls : "");
            csv_field(csv, r.why);
            fprintf(csv, ",%d,%s,%d\n", r.status, r.finish, r.n_calls);
        }
    }
    printf("toolcheck %s (model %s): structural %d/%d passed, trained-only %d/%d passed\n", base, m, pass[0], n[0], pass[1], n[1]);
    int rc = pass[0] == n[0] ? 0 : 1;
    if (csv && fclose(csv)) rc = cli_fail(C, "cannot write %s", csv_path);
    if (json_path) {
        json_t *o = json_pack("{s:s,s:s,s:{s:i,s:i,s:i,s:i},s:o}", "url", base, "model", m, "summary", "structural", n[0],
                              "structural_passed", pass[0], "trained", n[1], "trained_passed", pass[1], "results", json_incref(all));
        if (!o || json_dump_file(o, json_path, JSON_INDENT(1)) != 0) rc = cli_fail(C, "cannot write %s", json_path);
        json_decref(o);
    }
    json_decref(all);
    free(m);
    curl_global_cleanup();
    return rc;
}
