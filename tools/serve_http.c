/* serve_http.c — the HTTP side of `moefast serve`, on libmicrohttpd.
 *
 * libmicrohttpd runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION):
 * a connection's thread parses the request, hands it to the engine and then
 * blocks until its answer is ready (non-streamed) or writes the stream's
 * events as the engine produces text (a content-reader callback that waits on
 * the request's condition variable). While waiting, it polls its socket every
 * 50 ms: a client that has gone away gets its request cancelled, and the
 * engine frees the slot at its next step.
 *
 * Every request is logged in one line on stderr when it completes. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "serve.h"

static atomic_int g_active;

int http_active(void) { return atomic_load(&g_active); }

typedef struct conn {
    srv *s;
    char *body;
    size_t len, cap;
    int status;
    bool aborted;                   /* the client went away before the answer was sent */
    srv_req *req;                   /* a reference, for the log line */
    srv_req *more[SRV_MAX_CHOICES - 1]; /* n > 1: choices 1..n-1, references too */
    int n_more;
    char method[8], path[48];
    double t0;
} conn;

/* ---- replies ------------------------------------------------------------ */

static enum MHD_Result reply(struct MHD_Connection *c, conn *k, int status, const char *ctype, char *body,
                             const char *hname, const char *hval) {
    static const char OOM[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
    struct MHD_Response *rsp = body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!rsp) {
        free(body);
        status = 500;
        ctype = "application/json";
        hname = NULL;
        rsp = MHD_create_response_from_buffer(sizeof OOM - 1, (void *)OOM, MHD_RESPMEM_PERSISTENT);
        if (!rsp) return MHD_NO;
    }
    MHD_add_response_header(rsp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (hname) MHD_add_response_header(rsp, hname, hval);
    k->status = status;
    const enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, rsp);
    MHD_destroy_response(rsp);
    return rc;
}

static enum MHD_Result reply_err(struct MHD_Connection *c, conn *k, const api_err *e) {
    const char *hn = NULL, *hv = NULL;
    if (e->status == 503) { hn = MHD_HTTP_HEADER_RETRY_AFTER; hv = "1"; }
    if (e->status == 401) { hn = MHD_HTTP_HEADER_WWW_AUTHENTICATE; hv = "Bearer"; }
    if (e->status == 405) { hn = MHD_HTTP_HEADER_ALLOW; hv = e->code; }
    return reply(c, k, e->status, "application/json", api_error_json(e), hn, hv);
}

static enum MHD_Result fail(struct MHD_Connection *c, conn *k, int status, const char *param, const char *code,
                            const char *msg) {
    api_err e = {0};
    api_fail(&e, status, param, code, "%s", msg);
    return reply_err(c, k, &e);
}

/* ---- waiting for the engine ------------------------------------------------ */

/* Whether the peer has closed its end (or the socket failed). */
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* A stream's news: text past `sent`, or tool calls changed since version tv. */
static bool news(const srv_req *r, size_t sent, uint64_t tv) {
    return r->emit > sent || (r->tools && r->tools->version != tv);
}

/* One wait of at most 50 ms on cv (s->mu held), so that the caller can
 * look at its socket between waits. */
static void wait_50ms(srv *s, pthread_cond_t *cv) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
    pthread_cond_timedwait(cv, &s->mu, &ts);
}

/* Waits until r is done (a whole answer). false: the client went away, and
 * r was cancelled. */
static bool wait_req(srv *s, struct MHD_Connection *c, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    while (!r->done) {
        wait_50ms(s, &r->cv);
        if (r->done) break;
        pthread_mutex_unlock(&s->mu);
        const bool gone = client_gone(c);
        pthread_mutex_lock(&s->mu);
        if (gone) {
            pthread_mutex_unlock(&s->mu);
            srv_cancel(s, r);
            return false;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return true;
}

/* ---- streaming (server-sent events) --------------------------------------- */

/* One choice of a stream (n > 1: each a request of its own, its chunks
 * carrying index i): what of its answer has been sent. */
typedef struct st_choice {
    srv_req *r;                     /* the stream's own reference */
    size_t sent;                    /* text bytes already turned into events */
    size_t r_sent, c_sent;          /* with reasoning: where the reasoning / content sent so far end in the text */
    int lp_sent;                    /* generated tokens whose logprobs were sent */
    bool ended;                     /* its finish chunk was written */
    /* tool calls: the one being sent, its head sent, its argument bytes sent, the version seen */
    int tc_call;
    bool tc_head;
    size_t tc_args;
    uint64_t tc_ver;
} st_choice;

typedef struct stream {
    srv *s;
    struct MHD_Connection *c;
    conn *k;
    st_choice ch[SRV_MAX_CHOICES];
    int n_ch;
    char *buf;                      /* events not yet written */
    size_t n, off, cap;
    bool finished;
} stream;

static bool st_add(stream *st, char *ev) {
    if (!ev) return false;
    const size_t l = strlen(ev);
    if (st->n + l > st->cap) {
        size_t nc = st->cap ? st->cap : 1024;
        while (nc < st->n + l) nc *= 2;
        char *nb = realloc(st->buf, nc);
        if (!nb) { free(ev); return false; }
        st->buf = nb;
        st->cap = nc;
    }
    memcpy(st->buf + st->n, ev, l);
    st->n += l;
    free(ev);
    return true;
}

/* Whether a choice has something to write (under srv.mu). */
static bool ch_news(const st_choice *ch) {
    return !ch->ended && (ch->r->done || news(ch->r, ch->sent, ch->tc_ver));
}

static bool st_news(const stream *st) {
    for (int i = 0; i < st->n_ch; i++)
        if (ch_news(&st->ch[i])) return true;
    return false;
}

static void st_cancel(stream *st) {
    for (int i = 0; i < st->n_ch; i++) srv_cancel(st->s, st->ch[i].r);
}

/* Waits until a choice has news: every choice signals choice 0's cv
 * (srv_req_notify). false: the client went away, and every choice was
 * cancelled. */
static bool wait_stream(stream *st) {
    srv *s = st->s;
    pthread_mutex_lock(&s->mu);
    while (!st_news(st)) {
        wait_50ms(s, &st->ch[0].r->cv);
        if (st_news(st)) break;
        pthread_mutex_unlock(&s->mu);
        const bool gone = client_gone(st->c);
        pthread_mutex_lock(&s->mu);
        if (gone) {
            pthread_mutex_unlock(&s->mu);
            st_cancel(st);
            return false;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return true;
}

/* The text not sent yet (under srv.mu): the new reasoning [rf, rt) and
 * content [cf, ct) of text[0..emit) (without reasoning: all content). */
static void new_spans(const st_choice *ch, bool done, size_t *rf, size_t *rt, size_t *cf, size_t *ct) {
    const srv_req *r = ch->r;
    *rf = *rt = 0;
    *cf = ch->c_sent;
    *ct = r->emit;
    if (!r->reason) return;
    reason_span sp;
    reason_split_req(r, r->text, r->emit, done, &sp);
    *rf = sp.r_from > ch->r_sent ? sp.r_from : ch->r_sent;
    *rt = sp.r_to > *rf ? sp.r_to : *rf;
    *cf = sp.c_from > ch->c_sent ? sp.c_from : ch->c_sent;
    *ct = sp.c_to > *cf ? sp.c_to : *cf;
}

/* One choice's next events: new text, tool-call deltas, its finish chunk
 * once it is done (*failed: it failed, and its error event was written). */
static bool ch_refill(stream *st, st_choice *ch, bool *failed) {
    srv *s = st->s;
    srv_req *r = ch->r;
    pthread_mutex_lock(&s->mu);
    char *calls = NULL;                            /* the tool calls' new deltas */
    if (r->tools && !r->err_status) {
        ch->tc_ver = r->tools->version;
        calls = api_tool_chunks(s, r, &ch->tc_call, &ch->tc_head, &ch->tc_args);
    }
    const size_t avail = r->emit - ch->sent;
    const bool done = r->done && r->emit == r->len;
    *failed = r->err_status != 0;
    size_t rf, rt, cf, ct;
    new_spans(ch, done, &rf, &rt, &cf, &ct);
    char *reason = rt > rf ? malloc(rt - rf) : NULL, *text = ct > cf ? malloc(ct - cf) : NULL;
    if (reason) memcpy(reason, r->text + rf, rt - rf);
    if (text) memcpy(text, r->text + cf, ct - cf);
    /* a chunk carries the logprobs of the tokens whose text it completes;
     * the last one those of the rest (an end token, a stop string's) */
    api_lp_span lp = {ch->lp_sent, ch->lp_sent, r->len};
    if (r->n_top >= 0)
        while (lp.to < r->n_gen && (done || r->tok_end[lp.to] <= r->emit)) lp.to++;
    pthread_mutex_unlock(&s->mu);
    if ((ct > cf && !text) || (rt > rf && !reason) || (r->tools && !*failed && !calls)) {
        free(text); free(reason); free(calls);
        return false;
    }
    ch->sent += avail;
    bool ok = true;
    /* r's fields read below without the lock are final once done; the
     * reasoning goes before the content, the logprobs with the last chunk */
    if (rt > rf && !*failed) {
        ok = st_add(st, api_chunk_field(s, r, "reasoning_content", reason, rt - rf, false, NULL, ct > cf ? NULL : &lp));
        if (ct <= cf) ch->lp_sent = lp.from = lp.to;
        ch->r_sent = rt;
    }
    if (ok && ct > cf && !*failed) {
        ok = st_add(st, api_chunk(s, r, text, ct - cf, false, NULL, &lp));
        ch->lp_sent = lp.from = lp.to;
        ch->c_sent = ct;
    }
    free(text);
    free(reason);
    if (calls && ok) ok = *calls ? st_add(st, calls) : (free(calls), true);
    else free(calls);
    if (ok && done && ch->sent == r->len) {
        ok = st_add(st, *failed ? api_error_chunk(s, r) : api_chunk(s, r, "", 0, false, r->finish, &lp));
        ch->ended = true;
    }
    return ok;
}

/* The next events of every choice with news; once all have ended, the
 * usage (summed over the choices) and [DONE]. A choice that fails ends the
 * stream with its error event (the others are cancelled). */
static bool st_refill(stream *st) {
    st->n = st->off = 0;
    if (!wait_stream(st)) return false;
    bool ok = true, failed = false, all = true;
    for (int i = 0; ok && !failed && i < st->n_ch; i++)
        if (!st->ch[i].ended) ok = ch_refill(st, &st->ch[i], &failed);
    for (int i = 0; i < st->n_ch; i++) all &= st->ch[i].ended;
    if (ok && failed) st_cancel(st);
    if (ok && (failed || all)) {
        srv_req *rs[SRV_MAX_CHOICES];
        for (int i = 0; i < st->n_ch; i++) rs[i] = st->ch[i].r;
        if (!failed && rs[0]->include_usage) ok = st_add(st, api_usage_chunk_n(st->s, rs, st->n_ch));
        if (ok) ok = st_add(st, strdup("data: [DONE]\n\n"));
        st->finished = true;
    }
    return ok;
}

static ssize_t st_read(void *cls, uint64_t pos, char *out, size_t max) {
    stream *st = cls;
    while (st->off == st->n) {
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        if (!st_refill(st)) {
            st->k->aborted = true;
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t l = st->n - st->off;
    if (l > max) l = max;
    memcpy(out, st->buf + st->off, l);
    st->off += l;
    return (ssize_t)l;
}

static void st_free(void *cls) {
    stream *st = cls;
    st_cancel(st);                                 /* no-op for the choices done */
    for (int i = 0; i < st->n_ch; i++) srv_req_unref(st->s, st->ch[i].r);
    free(st->buf);
    free(st);
}

/* The SSE answer of the n choices rs[0..n) (submitted). */
static enum MHD_Result start_stream(struct MHD_Connection *c, conn *k, srv_req *const *rs, int n) {
    srv *s = k->s;
    stream *st = calloc(1, sizeof *st);
    if (!st) {
        for (int i = 0; i < n; i++) srv_cancel(s, rs[i]);
        return fail(c, k, 500, NULL, NULL, "out of memory");
    }
    st->s = s;
    st->c = c;
    st->k = k;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < n; i++) {
        rs[i]->refs++;
        st->ch[i].r = rs[i];
    }
    st->n_ch = n;
    pthread_mutex_unlock(&s->mu);
    /* OpenAI's chat streams open with the role, per choice; completions go straight to text */
    for (int i = 0; i < n && rs[0]->kind == SRV_CHAT; i++)
        if (!st_add(st, api_chunk(s, rs[i], "", 0, true, NULL, NULL))) { st_free(st); return fail(c, k, 500, NULL, NULL, "out of memory"); }
    struct MHD_Response *rsp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, st_read, st, st_free);
    if (!rsp) { st_free(st); return fail(c, k, 500, NULL, NULL, "out of memory"); }
    MHD_add_response_header(rsp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(rsp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    k->status = 200;
    const enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, rsp);
    MHD_destroy_response(rsp);
    return rc;
}

/* ---- endpoints ------------------------------------------------------------ */

/* n > 1: each choice is a request of its own (the same body, choice i
 * seeded with seed + i), so each one's tokens are what it gives alone; they
 * share the prompt through the prompt cache. All or none are submitted.
 * Not streamed, the answer waits for every one; streamed, the choices'
 * chunks interleave as they come (index i, the id of choice 0). */
static enum MHD_Result completions_n(struct MHD_Connection *c, conn *k, int kind) {
    srv *s = k->s;
    api_err e = {0};
    const int n = k->req->n_choices;
    srv_req *rs[SRV_MAX_CHOICES] = {k->req};
    for (int i = 1; i < n; i++) {
        if (api_parse(s, kind, k->body ? k->body : "", k->len, i, &k->more[i - 1], &e)) return reply_err(c, k, &e);
        k->n_more = i;
        rs[i] = k->more[i - 1];
        rs[i]->answer_id = k->req->id;               /* one answer: one id, one creation time */
        rs[i]->created = k->req->created;
        if (k->req->stream) srv_req_notify(s, rs[i], k->req);
    }
    const char *why = NULL;
    int sub = 0;
    for (; sub < n; sub++)
        if (srv_submit(s, rs[sub], &why)) break;
    if (sub < n) {
        for (int i = 0; i < sub; i++) srv_cancel(s, rs[i]);
        return fail(c, k, 503, NULL, "server_busy", why);
    }
    if (k->req->stream) return start_stream(c, k, rs, n);
    for (int i = 0; i < n; i++) {
        if (!wait_req(s, c, rs[i])) {
            for (int j = 0; j < n; j++) srv_cancel(s, rs[j]);
            k->aborted = true;
            return MHD_NO;
        }
    }
    int status;
    char *body = api_final_json_n(s, rs, n, &status);
    return reply(c, k, status, "application/json", body, status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL, "1");
}

static enum MHD_Result completions(struct MHD_Connection *c, conn *k, int kind) {
    srv *s = k->s;
    api_err e = {0};
    srv_req *r;
    if (api_parse(s, kind, k->body ? k->body : "", k->len, 0, &r, &e)) return reply_err(c, k, &e);
    k->req = r;                                    /* the HTTP side's reference */
    if (r->n_choices > 1) return completions_n(c, k, kind);
    const char *why = NULL;
    if (srv_submit(s, r, &why)) return fail(c, k, 503, NULL, "server_busy", why);
    if (r->stream) return start_stream(c, k, &r, 1);
    if (!wait_req(s, c, r)) { k->aborted = true; return MHD_NO; }
    int status;
    char *body = api_final_json(s, r, &status);
    return reply(c, k, status, "application/json", body, status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL, "1");
}

static int appendf(char **b, size_t *n, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int appendf(char **b, size_t *n, size_t *cap, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const int w = vsnprintf(*b ? *b + *n : NULL, *b ? *cap - *n : 0, fmt, ap);
        va_end(ap);
        if (w < 0) return -1;
        if (*b && *n + (size_t)w < *cap) { *n += (size_t)w; return 0; }
        size_t nc = *cap ? *cap * 2 : 4096;
        while (nc <= *n + (size_t)w) nc *= 2;
        char *nb = realloc(*b, nc);
        if (!nb) return -1;
        *b = nb;
        *cap = nc;
    }
}

/* Prometheus text exposition format 0.0.4. */
/* the label of size bucket i: its number of tokens, the last one "17+" */
static void size_label(char *lab, size_t n, int i) {
    snprintf(lab, n, "%d%s", i + 1, i + 1 < SRV_SIZE_BUCKETS ? "" : "+");
}

static char *metrics_text(srv *s) {
    pthread_mutex_lock(&s->mu);
    const srv_metrics m = s->met;
    const int q = s->q_len, busy = s->busy;
    pthread_mutex_unlock(&s->mu);
    char *b = NULL;
    size_t n = 0, cap = 0;
    int e = appendf(&b, &n, &cap, "# HELP moefast_requests_total HTTP requests answered, by status (499: the client went away).\n"
                                  "# TYPE moefast_requests_total counter\n");
    for (int i = 0; i < SRV_N_STATUS; i++) {
        if (SRV_STATUS_CODES[i]) e |= appendf(&b, &n, &cap, "moefast_requests_total{status=\"%d\"} %llu\n", SRV_STATUS_CODES[i], (unsigned long long)m.requests[i]);
        else e |= appendf(&b, &n, &cap, "moefast_requests_total{status=\"other\"} %llu\n", (unsigned long long)m.requests[i]);
    }
#define C(name, help, v) e |= appendf(&b, &n, &cap, "# HELP moefast_" name " " help "\n# TYPE moefast_" name " counter\nmoefast_" name " %llu\n", (unsigned long long)(v))
#define G(name, help, v) e |= appendf(&b, &n, &cap, "# HELP moefast_" name " " help "\n# TYPE moefast_" name " gauge\nmoefast_" name " %d\n", (int)(v))
    C("prompt_tokens_total", "Prompt tokens of the requests admitted to a slot.", m.prompt_tokens);
    C("completion_tokens_total", "Tokens generated.", m.completion_tokens);
    C("prompt_cache_hits_total", "Requests that reused a slot's cached prefix.", m.cache_hits);
    C("prompt_cache_tokens_total", "Prompt tokens reused from the cache instead of prefilled.", m.cache_tokens);
    C("prompt_cache_copies_total", "Cache hits whose prefix was copied from a busy slot.", m.cache_copies);
    C("requests_cancelled_total", "Requests whose client went away before the end.", m.cancelled);
    uint64_t gc_hits, gc_misses;
    gcache_stats(s, &gc_hits, &gc_misses);
    C("grammar_cache_hits_total", "Constrained requests that reused a compiled grammar of an earlier request.", gc_hits);
    C("grammar_cache_misses_total", "Constrained requests that built their grammar.", gc_misses);
    C("step_tokens_total", "Tokens run through the model (prompt and decode).", m.step_tokens);
    G("queue_depth", "Requests waiting for a slot.", q);
    G("slots_busy", "Slots running a request.", busy);
    G("slots_total", "Slots (sequences of the context).", s->n_slots);
#undef C
#undef G
    e |= appendf(&b, &n, &cap, "# HELP moefast_step_seconds Time of one engine step (one batch).\n# TYPE moefast_step_seconds summary\n"
                               "moefast_step_seconds_sum %.6f\nmoefast_step_seconds_count %llu\n", m.step_seconds, (unsigned long long)m.steps);
    e |= appendf(&b, &n, &cap, "# HELP moefast_decode_step_seconds Time of the steps that ran no prompt chunk (decode only).\n"
                               "# TYPE moefast_decode_step_seconds summary\nmoefast_decode_step_seconds_sum %.6f\nmoefast_decode_step_seconds_count %llu\n"
                               "# HELP moefast_decode_step_tokens_total Tokens of those steps.\n# TYPE moefast_decode_step_tokens_total counter\n"
                               "moefast_decode_step_tokens_total %llu\n",
                 m.decode_seconds, (unsigned long long)m.decode_steps, (unsigned long long)m.decode_tokens);
    /* by size: the steps of exactly n tokens (the last bucket: 17 and more),
     * so a load test reads a step of four apart from the steps of fewer */
    e |= appendf(&b, &n, &cap, "# HELP moefast_decode_step_by_tokens_seconds The decode-only steps by their number of tokens.\n"
                               "# TYPE moefast_decode_step_by_tokens_seconds summary\n");
    for (int i = 0; i < SRV_SIZE_BUCKETS; i++) {
        if (!m.size_steps[i]) continue;
        char lab[16];
        size_label(lab, sizeof lab, i);
        e |= appendf(&b, &n, &cap, "moefast_decode_step_by_tokens_seconds_sum{tokens=\"%s\"} %.6f\n"
                                   "moefast_decode_step_by_tokens_seconds_count{tokens=\"%s\"} %llu\n",
                     lab, m.size_seconds[i], lab, (unsigned long long)m.size_steps[i]);
    }
    if (s->profile) {
        e |= appendf(&b, &n, &cap, "# HELP moefast_decode_step_by_tokens_weight_bytes_total Their weight bytes (--profile).\n"
                                   "# TYPE moefast_decode_step_by_tokens_weight_bytes_total counter\n");
        for (int i = 0; i < SRV_SIZE_BUCKETS; i++) {
            if (!m.size_steps[i]) continue;
            char lab[16];
            size_label(lab, sizeof lab, i);
            e |= appendf(&b, &n, &cap, "moefast_decode_step_by_tokens_weight_bytes_total{tokens=\"%s\"} %.0f\n", lab, m.size_weight_bytes[i]);
        }
    }
    if (s->profile)
        e |= appendf(&b, &n, &cap, "# HELP moefast_step_weight_bytes_total Weight bytes the steps streamed (--profile): shared matrices once, the union of the selected experts once per step.\n"
                                   "# TYPE moefast_step_weight_bytes_total counter\nmoefast_step_weight_bytes_total %.0f\n"
                                   "# HELP moefast_decode_step_weight_bytes_total The same for the decode-only steps.\n"
                                   "# TYPE moefast_decode_step_weight_bytes_total counter\nmoefast_decode_step_weight_bytes_total %.0f\n"
                                   "# HELP moefast_read_bandwidth_bytes_per_second Memory read bandwidth measured at start (--profile).\n"
                                   "# TYPE moefast_read_bandwidth_bytes_per_second gauge\nmoefast_read_bandwidth_bytes_per_second %.0f\n",
                     m.weight_bytes, m.decode_weight_bytes, s->read_bw);
    if (e) { free(b); return NULL; }
    return b;
}

static enum MHD_Result route(struct MHD_Connection *c, conn *k, const char *url, const char *method) {
    srv *s = k->s;
    const bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    static const struct { const char *path; const char *allow; } PATHS[] = {
        {"/health", "GET"}, {"/metrics", "GET"}, {"/v1/models", "GET"}, {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"},
        {"/tokenize", "POST"}, {"/detokenize", "POST"}};
    for (size_t i = 0; i < sizeof PATHS / sizeof PATHS[0]; i++) {
        if (strcmp(url, PATHS[i].path)) continue;
        if (strcmp(method, PATHS[i].allow)) {
            api_err e = {0};
            api_fail(&e, 405, NULL, PATHS[i].allow, "%s %s: method not allowed (use %s)", method, url, PATHS[i].allow);
            return reply_err(c, k, &e);
        }
        break;
    }
    if (get && !strcmp(url, "/health")) {
        pthread_mutex_lock(&s->mu);
        const bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        return reply(c, k, stopping ? 503 : 200, "application/json",
                     strdup(stopping ? "{\"status\":\"shutting down\"}" : "{\"status\":\"ok\"}"), NULL, NULL);
    }
    if (get && !strcmp(url, "/metrics")) return reply(c, k, 200, "text/plain; version=0.0.4", metrics_text(s), NULL, NULL);
    if (get && !strcmp(url, "/v1/models")) return reply(c, k, 200, "application/json", api_models_json(s, false), NULL, NULL);
    if (get && !strncmp(url, "/v1/models/", 11)) {
        if (strcmp(url + 11, s->model_name)) return fail(c, k, 404, "model", "model_not_found", "The model does not exist");
        return reply(c, k, 200, "application/json", api_models_json(s, true), NULL, NULL);
    }
    if (post && !strcmp(url, "/v1/chat/completions")) return completions(c, k, SRV_CHAT);
    if (post && !strcmp(url, "/v1/completions")) return completions(c, k, SRV_COMPLETION);
    if (post && (!strcmp(url, "/tokenize") || !strcmp(url, "/detokenize"))) {
        api_err e = {0};
        char *b = (url[1] == 't' ? api_tokenize_json : api_detokenize_json)(s, k->body ? k->body : "", k->len, &e);
        return b ? reply(c, k, 200, "application/json", b, NULL, NULL) : reply_err(c, k, &e);
    }
    return fail(c, k, 404, NULL, "not_found", "no such endpoint");
}

/* Constant-time comparison of the Authorization header with "Bearer KEY". */
static bool auth_ok(struct MHD_Connection *c, const char *key) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    h += 7;
    const size_t lh = strlen(h), lk = strlen(key);
    unsigned diff = lh != lk;
    for (size_t i = 0; i < lk; i++) diff |= (unsigned)(unsigned char)key[i] ^ (unsigned)(unsigned char)h[i < lh ? i : 0];
    return diff == 0;
}

static enum MHD_Result too_large(struct MHD_Connection *c, conn *k) {
    char msg[96];
    snprintf(msg, sizeof msg, "the request body exceeds %zu bytes (--max-body)", k->s->max_body);
    return fail(c, k, 413, NULL, "request_too_large", msg);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv *s = cls;
    conn *k = *con_cls;
    if (!k) {                                      /* the headers: check what can be checked now */
        if (!(k = calloc(1, sizeof *k))) return MHD_NO;
        k->s = s;
        k->t0 = srv_now();
        snprintf(k->method, sizeof k->method, "%s", method);
        snprintf(k->path, sizeof k->path, "%s", url);
        *con_cls = k;
        atomic_fetch_add(&g_active, 1);
        if (s->api_key && !strncmp(url, "/v1/", 4) && !auth_ok(c, s->api_key))
            return fail(c, k, 401, NULL, "invalid_api_key", "Incorrect or missing API key (Authorization: Bearer KEY)");
        /* a declared body over the limit is refused before it is read (MHD
         * then closes the connection); a chunked one once it passes the limit */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->max_body) return too_large(c, k);
        return MHD_YES;
    }
    if (k->status) { *upload_size = 0; return MHD_YES; }  /* answered already: the rest is dropped */
    if (*upload_size) {
        const size_t n = *upload_size;
        *upload_size = 0;
        if (k->cap == SIZE_MAX || k->len + n > s->max_body) { k->cap = SIZE_MAX; return MHD_YES; }
        if (k->len + n + 1 > k->cap) {
            size_t nc = k->cap ? k->cap : 4096;
            while (nc < k->len + n + 1) nc *= 2;
            char *nb = realloc(k->body, nc);
            if (!nb) return MHD_NO;
            k->body = nb;
            k->cap = nc;
        }
        memcpy(k->body + k->len, upload, n);
        k->len += n;
        k->body[k->len] = 0;
        return MHD_YES;
    }
    if (k->cap == SIZE_MAX) return too_large(c, k);
    return route(c, k, url, method);
}

/* The request's log line (under s->mu): id, slot, tokens in / cached / out,
 * time to first token, decode rate, the connection's time, how it ended. */
static void log_req(const conn *k, const srv_req *r, int status) {
    char slot[16] = "-", in[16] = "-", out[16] = "-", ttft[24] = "-", tps[24] = "-", cached[16] = "-";
    const char *finish = "-";
    if (r) {
        if (r->slot >= 0) snprintf(slot, sizeof slot, "%d", r->slot);
        snprintf(in, sizeof in, "%d", r->n_prompt);
        snprintf(cached, sizeof cached, "%d", r->n_cached);
        snprintf(out, sizeof out, "%d", r->n_gen);
        if (r->n_gen > 0) snprintf(ttft, sizeof ttft, "%.3fs", r->t_first - r->t_arrive);
        if (r->n_gen > 1 && r->t_done > r->t_first) snprintf(tps, sizeof tps, "%.1f", (r->n_gen - 1) / (r->t_done - r->t_first));
        finish = r->err_status ? "error" : r->cancelled ? "cancelled" : r->finish ? r->finish : "-";
    }
    fprintf(stderr, "moefast serve: %s %s id=%llu status=%d slot=%s in=%s cached=%s out=%s ttft=%s tok/s=%s time=%.3fs finish=%s\n",
            k->method, k->path, r ? (unsigned long long)r->id : 0ull, status, slot, in, cached, out, ttft, tps,
            srv_now() - k->t0, finish);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv *s = cls;
    conn *k = *con_cls;
    if (!k) return;
    *con_cls = NULL;
    srv_req *r = k->req;
    if (r && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        srv_cancel(s, r);
        for (int i = 0; i < k->n_more; i++) srv_cancel(s, k->more[i]);
        k->aborted = true;
    }
    int status = k->aborted ? 499 : k->status;
    pthread_mutex_lock(&s->mu);
    int b = 0;
    while (b < SRV_N_STATUS - 1 && SRV_STATUS_CODES[b] != status) b++;
    s->met.requests[b]++;
    /* one line per choice (n > 1: the choices after the first, then the first) */
    for (int i = 0; i < k->n_more; i++) log_req(k, k->more[i], status);
    log_req(k, r, status);
    /* with tools: the raw generated text (special tokens spelled), what the
     * calls were parsed from, or why there were none */
    char *raw = r && r->tools ? tools_raw_json(r) : NULL;
    if (raw) fprintf(stderr, "moefast serve: id=%llu raw=%s\n", (unsigned long long)r->id, raw);
    free(raw);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < k->n_more; i++) srv_req_unref(s, k->more[i]);
    srv_req_unref(s, r);
    free(k->body);
    free(k);
    atomic_fetch_sub(&g_active, 1);
}

struct MHD_Daemon *http_start(srv *s, const char *host, int port, int *bound_port, char *err, size_t errlen) {
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    const struct sockaddr *sa = (const struct sockaddr *)&a4;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC;
    if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) { sa = (const struct sockaddr *)&a6; flags |= MHD_USE_IPv6; }
    else if (inet_pton(AF_INET, host, &a4.sin_addr) != 1) {
        snprintf(err, errlen, "--host %s: not an IPv4 or IPv6 address", host);
        return NULL;
    }
    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handler, s,
                                            MHD_OPTION_SOCK_ADDR, sa,
                                            MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)256,
                                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300,
                                            MHD_OPTION_END);
    if (!d) {
        snprintf(err, errlen, "cannot listen on %s:%d (address in use, or not this machine's?)", host, port);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = di ? di->port : port;
    return d;
}
