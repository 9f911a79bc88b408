/* serve_engine.c — the engine thread of `moefast serve` (see serve.h).
 *
 * One thread owns the moe_context (n_slots sequences). Each step it admits
 * queued requests into free slots, gathers one decode token of every running
 * slot and up to `chunk` prompt tokens of the slots still prefilling (so a
 * long prompt never stalls the others' decode tokens for more than one
 * chunk), runs them as one moe_batch, samples each wanted row with its own
 * request's sampler and hands the text over. The context's batch contract
 * makes every request's tokens the ones it would get alone.
 *
 * The prompt cache: a slot keeps the tokens of its KV after its request
 * ends; a new request goes to the free slot sharing the longest prefix with
 * its prompt and only the rest is prefilled (the KV of the shared prefix is
 * the same bits a cold prefill writes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "serve.h"

const int SRV_STATUS_CODES[SRV_N_STATUS] = {200, 400, 401, 404, 405, 413, 499, 500, 503, 0};

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int srv_init(srv *s, moe_model *m, const moe_context_params *cp, int chunk, int queue_cap, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->m = m;
    s->n_vocab = moe_model_n_vocab(m);
    s->chunk = chunk;
    s->queue_cap = queue_cap;
    s->next_id = 1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    moe_context_params p = *cp;
    p.n_batch = chunk + p.n_seq;                   /* one step's tokens never split */
    int rc = moe_context_new(m, &p, &s->ctx, err, errlen);
    if (rc) return rc;
    s->n_slots = moe_context_n_seq(s->ctx);
    s->n_ctx = moe_context_n_ctx(s->ctx);
    const size_t nb = (size_t)(chunk + s->n_slots);
    s->q_size = queue_cap + s->n_slots;
    s->queue = calloc((size_t)s->q_size, sizeof *s->queue);
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    s->tok = malloc(nb * sizeof *s->tok);
    s->seq = malloc(nb * sizeof *s->seq);
    s->want = malloc(nb * sizeof *s->want);
    s->row_slot = malloc((size_t)s->n_slots * sizeof *s->row_slot);
    s->ids = malloc((size_t)s->n_slots * sizeof *s->ids);
    s->logits = malloc((size_t)s->n_slots * (size_t)s->n_vocab * sizeof *s->logits);
    s->top_ids = malloc((size_t)s->n_slots * 64 * sizeof *s->top_ids);
    s->top_vals = malloc((size_t)s->n_slots * 64 * sizeof *s->top_vals);
    bool ok = s->queue && s->slots && s->tok && s->seq && s->want && s->row_slot && s->ids && s->logits && s->top_ids &&
              s->top_vals;
    for (int i = 0; ok && i < s->n_slots; i++) ok = (s->slots[i].cache = malloc((size_t)s->n_ctx * sizeof(int32_t))) != NULL;
    if (!ok) {
        snprintf(err, errlen, "out of memory");
        return MOE_ENOMEM;
    }
    if (gcache_new(s)) { snprintf(err, errlen, "out of memory"); return MOE_ENOMEM; }
    return moe_grammar_vocab_new(m, &s->gvoc, err, errlen);
}

void srv_free(srv *s) {
    if (s->slots)
        for (int i = 0; i < s->n_slots; i++) free(s->slots[i].cache);
    free(s->slots);
    free(s->queue);
    free(s->tok);
    free(s->seq);
    free(s->want);
    free(s->row_slot);
    free(s->ids);
    free(s->logits);
    free(s->top_ids);
    free(s->top_vals);
    free(s->phases);
    gcache_free(s);
    moe_grammar_vocab_free(s->gvoc);
    moe_context_free(s->ctx);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    memset(s, 0, sizeof *s);
}

srv_req *srv_req_new(srv *s) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_cond_init(&r->cv, NULL);
    r->refs = 1;
    r->slot = -1;
    r->t_arrive = srv_now();
    pthread_mutex_lock(&s->mu);
    r->id = s->next_id++;
    pthread_mutex_unlock(&s->mu);
    r->answer_id = r->id;
    return r;
}

static void req_destroy(srv_req *r) {
    free(r->prompt);
    free(r->gen);
    free(r->lp);
    free(r->top_id);
    free(r->top_lp);
    free(r->tok_end);
    free(r->text);
    free(r->model_name);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    moe_sampler_free(r->smp);
    gcache_give(r);                                /* the constraint goes back to the cache */
    free(r->gkey);
    moe_constraint_free(r->con);
    moe_grammar_free(r->gram);
    free(r->allowed);
    tools_free(r->tools);
    moe_utf8_stream_free(r->utf8);
    pthread_cond_destroy(&r->cv);
    srv_req *first = r->notify;
    free(r);
    if (first && --first->refs == 0) req_destroy(first);
}

/* Drops one reference; the caller holds s->mu (locked) or not (unlocked). */
static void unref_locked(srv_req *r) {
    if (--r->refs == 0) req_destroy(r);
}

void srv_req_notify(srv *s, srv_req *r, srv_req *first) {
    pthread_mutex_lock(&s->mu);
    first->refs++;
    r->notify = first;
    pthread_mutex_unlock(&s->mu);
}

/* r changed (text, done, error): its waiter, and a streamed n's waiter on choice 0. */
static void req_signal(srv_req *r) {
    pthread_cond_broadcast(&r->cv);
    if (r->notify) pthread_cond_broadcast(&r->notify->cv);
}

void srv_req_unref(srv *s, srv_req *r) {
    if (!r) return;
    pthread_mutex_lock(&s->mu);
    unref_locked(r);
    pthread_mutex_unlock(&s->mu);
}

int srv_submit(srv *s, srv_req *r, const char **why) {
    pthread_mutex_lock(&s->mu);
    int rc = 0;
    if (s->stopping) { rc = 503; *why = "the server is shutting down"; }
    /* the queue also holds requests for free slots until the engine wakes
     * up to admit them: only those beyond the free slots count as waiting */
    else if (s->q_len - (s->n_slots - s->busy) >= s->queue_cap) { rc = 503; *why = "the request queue is full; retry later"; }
    else {
        r->refs++;                                 /* the engine's */
        s->queue[(s->q_head + s->q_len++) % s->q_size] = r;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void srv_cancel(srv *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    if (!r->done && !r->cancelled) {
        r->cancelled = true;
        s->met.cancelled++;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
}

/* ---- under s->mu ------------------------------------------------------ */

static void finish_err(srv_req *r, int status, const char *msg) {
    r->err_status = status;
    snprintf(r->errmsg, sizeof r->errmsg, "%s", msg);
    r->done = true;
    r->emit = r->len;
    r->t_done = srv_now();
    req_signal(r);
}

static void release_slot(srv *s, int i) {
    srv_slot *sl = &s->slots[i];
    sl->last_used = ++s->step_no;
    unref_locked(sl->req);
    sl->req = NULL;
    s->busy--;
}

/* Tokens of r's prompt that slot i's cache holds as a prefix (at most
 * n_prompt - 1: the last prompt token must run to give the first logits). */
static int common_prefix(const srv_slot *sl, const srv_req *r) {
    if (!r->cache_prompt) return 0;
    const int lim = sl->n_cache < r->n_prompt - 1 ? sl->n_cache : r->n_prompt - 1;
    int c = 0;
    while (c < lim && sl->cache[c] == r->prompt[c]) c++;
    return c;
}

/* Where r runs: the free slot with the longest common prefix (ties to the
 * least recently used), unless another slot — busy with a request of its
 * own, or free — holds a longer one: then the least recently used free slot,
 * with that prefix copied into it (*src >= 0; moe_context_seq_copy gives the
 * same bits, so the request continues exactly as after a cold prefill). */
static int pick_slot(srv *s, const srv_req *r, int *common, int *src) {
    int best = -1, best_c = -1, lru = -1, from = -1, from_c = 0;
    for (int i = 0; i < s->n_slots; i++) {
        const srv_slot *sl = &s->slots[i];
        const int c = common_prefix(sl, r);
        if (c > from_c) { from = i; from_c = c; }
        if (sl->req) continue;
        if (c > best_c || (c == best_c && sl->last_used < s->slots[best].last_used)) { best = i; best_c = c; }
        if (lru < 0 || sl->last_used < s->slots[lru].last_used) lru = i;
    }
    *src = -1;
    *common = best_c;
    if (from_c > best_c) {
        *src = from;
        *common = from_c;
        return lru;
    }
    return best;
}

static void admit(srv *s) {
    while (s->q_len > 0 && s->busy < s->n_slots) {
        srv_req *r = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->q_size;
        s->q_len--;
        if (r->cancelled) { unref_locked(r); continue; }
        int common, src;
        const int i = pick_slot(s, r, &common, &src);
        srv_slot *sl = &s->slots[i];
        /* common <= the source's length: neither can fail */
        if (src >= 0) {
            moe_context_seq_copy(s->ctx, src, i, common);
            memcpy(sl->cache, s->slots[src].cache, (size_t)common * sizeof *sl->cache);
            s->met.cache_copies++;
        } else
            moe_context_seq_truncate(s->ctx, i, common);
        sl->n_cache = common;
        sl->req = r;
        s->busy++;
        r->slot = i;
        r->n_cached = common;
        if (common > 0) { s->met.cache_hits++; s->met.cache_tokens += (uint64_t)common; }
        s->met.prompt_tokens += (uint64_t)r->n_prompt;
    }
}

/* Cancelled requests leave their slots (their KV stays as a prompt cache);
 * past the shutdown deadline every running request is cancelled. */
static void drop_cancelled(srv *s) {
    const bool late = s->stopping && srv_now() > s->deadline;
    for (int i = 0; i < s->n_slots; i++) {
        srv_req *r = s->slots[i].req;
        if (!r) continue;
        if (late && !r->done) finish_err(r, 503, "the server shut down before the request finished");
        if (r->cancelled || r->done) release_slot(s, i);
    }
}

/* ---- the step (engine thread, unlocked) -------------------------------- */

/* Decode tokens first (one per running slot), then prompt chunks in slot
 * order within the step's budget. Returns the token count; rows gets the
 * slot of each wanted logits row. */
static int build_step(srv *s, int *n_rows) {
    int nt = 0, rows = 0, budget = s->chunk;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < s->n_slots; i++) {
            srv_slot *sl = &s->slots[i];
            srv_req *r = sl->req;
            if (!r) continue;
            const bool prefill = sl->n_cache < r->n_prompt;
            if (pass == 0 && !prefill) {               /* the last sampled token */
                s->tok[nt] = r->gen[r->n_gen - 1];
                s->seq[nt] = i;
                s->want[nt++] = true;
                s->row_slot[rows++] = i;
            } else if (pass == 1 && prefill && budget > 0) {
                int k = r->n_prompt - sl->n_cache;
                if (k > budget) k = budget;
                budget -= k;
                for (int j = 0; j < k; j++) {
                    s->tok[nt] = r->prompt[sl->n_cache + j];
                    s->seq[nt] = i;
                    s->want[nt++] = false;
                }
                if (sl->n_cache + k == r->n_prompt) {
                    s->want[nt - 1] = true;
                    s->row_slot[rows++] = i;
                }
            }
        }
    *n_rows = rows;
    return nt;
}

/* Appends bytes to r's text (under mu: the HTTP thread reads it). */
static bool text_add(srv_req *r, const char *p, size_t n) {
    if (r->len + n + 1 > r->cap) {
        size_t nc = r->cap ? r->cap : 256;
        while (nc < r->len + n + 1) nc *= 2;
        char *nt = realloc(r->text, nc);
        if (!nt) return false;
        r->text = nt;
        r->cap = nc;
    }
    memcpy(r->text + r->len, p, n);
    r->len += n;
    r->text[r->len] = 0;
    return true;
}

/* After text was added: cut at the first stop string (true: one was found),
 * else hold back a tail that may still become one. */
static bool check_stop(srv_req *r, size_t old_emit) {
    if (r->n_stop == 0) { r->emit = r->len; return false; }
    const size_t from = old_emit > r->max_stop_len ? old_emit - r->max_stop_len : 0;
    size_t cut = r->len;
    for (int k = 0; k < r->n_stop; k++) {
        const char *hit = memmem(r->text + from, r->len - from, r->stop[k], strlen(r->stop[k]));
        if (hit && (size_t)(hit - r->text) < cut) cut = (size_t)(hit - r->text);
    }
    if (cut < r->len) {
        r->len = cut;
        r->text[cut] = 0;
        r->emit = cut;
        return true;
    }
    size_t hold = 0;
    for (int k = 0; k < r->n_stop; k++) {
        const size_t sl = strlen(r->stop[k]);
        for (size_t h = sl - 1; h > hold; h--)
            if (h <= r->len - old_emit && !memcmp(r->text + r->len - h, r->stop[k], h)) { hold = h; break; }
    }
    r->emit = r->len - hold;
    return false;
}

/* One sampled token of slot i's request: text, stop conditions, handover. */
static void take_token(srv *s, int i, int32_t id, double now) {
    srv_slot *sl = &s->slots[i];
    srv_req *r = sl->req;
    char buf[4 * 256 + 4];
    if (r->n_gen == 0) r->t_first = now;
    if (r->tools) tools_before_token(r);
    r->gen[r->n_gen++] = id;
    s->met.completion_tokens++;
    const char *finish = NULL;
    const size_t old_emit = r->emit;
    bool oom = false;
    /* once tool calls began, their text is not content */
    const bool calls = r->tools && r->tools->engaged;
    if (moe_token_is_eog(s->m, id)) finish = calls ? "tool_calls" : "stop";
    else if (!calls) {
        const char *piece;
        size_t plen;
        /* harmony: the channels' control tokens stay in the text (split there) */
        if (moe_token_piece(s->m, id, r->harmony, &piece, &plen) != MOE_OK) plen = 0;
        for (size_t off = 0; off < plen; off += 256) {
            const size_t part = plen - off < 256 ? plen - off : 256;
            oom |= !text_add(r, buf, moe_utf8_stream_push(r->utf8, piece + off, part, buf, sizeof buf));
        }
    }
    size_t hold = r->len;                          /* tools: text that may be emitted */
    if (r->tools) hold = tools_after_token(s, r, id);
    if (r->tools && r->tools->engaged) tools_progress(r);   /* a stream sends the calls as they grow */
    if (!finish && r->n_gen >= r->max_tokens) finish = "length";
    if (finish && !(r->tools && r->tools->engaged)) oom |= !text_add(r, buf, moe_utf8_stream_flush(r->utf8, buf, sizeof buf));
    if (r->tok_end) r->tok_end[r->n_gen - 1] = r->len;
    if (oom) { finish_err(r, 500, "out of memory"); return; }
    if (check_stop(r, old_emit < r->len ? old_emit : r->len)) finish = "stop";
    if (r->emit > hold) r->emit = hold;
    char why[160];
    if (finish && !strcmp(finish, "tool_calls") && !tools_finish(r, why, sizeof why)) { finish_err(r, 500, why); return; }
    if (finish) {
        r->finish = finish;
        r->done = true;
        r->emit = r->len;
        r->t_done = now;
    }
    req_signal(r);
}

int srv_enable_profile(srv *s, double read_gbs) {
    s->n_phases = moe_context_profile_read(s->ctx, NULL, 0);
    if (s->n_phases <= 0 || !(s->phases = calloc((size_t)s->n_phases, sizeof *s->phases))) return -1;
    if (moe_context_profile_enable(s->ctx, true)) return -1;
    s->read_bw = 1e9 * read_gbs;
    s->profile = true;
    return 0;
}

/* The weight bytes the last step streamed (0 without --profile). */
static double step_weight_bytes(srv *s) {
    if (!s->profile || moe_context_profile_read(s->ctx, s->phases, s->n_phases) != s->n_phases) return 0;
    double total = 0;
    for (int i = 0; i < s->n_phases; i++) total += s->phases[i].weight_bytes;
    const double d = total - s->prof_bytes;
    s->prof_bytes = total;
    return d;
}

/* The log-probabilities of the model's distribution at this row (the raw
 * logits, temperature 1: what the model says, whatever the sampler does),
 * for the sampled token and the n_top best (ties to the lower id): the max
 * subtracted and the sum of exponentials in double, in vocabulary order, so
 * the values are a function of the logits alone — and the logits are the
 * same bits alone or batched. Stored at index n_gen, which the HTTP side
 * reads only once take_token has published it under the lock. */
static void token_logprobs(const float *l, int n_vocab, int32_t id, srv_req *r) {
    float mx = -INFINITY;
    for (int v = 0; v < n_vocab; v++) mx = l[v] > mx ? l[v] : mx;
    double sum = 0.0;
    for (int v = 0; v < n_vocab; v++) sum += exp((double)l[v] - (double)mx);
    const double lse = (double)mx + log(sum);
    const int i = r->n_gen, k = r->n_top;
    r->lp[i] = (float)((double)l[id] - lse);
    int32_t *ti = r->top_id + (size_t)i * (size_t)k;
    float *tl = r->top_lp + (size_t)i * (size_t)k;
    int have = 0;
    for (int v = 0; v < n_vocab && k > 0; v++) {
        if (have == k && !(l[v] > tl[k - 1])) continue;
        int j = have < k ? have++ : k - 1;
        for (; j > 0 && l[v] > tl[j - 1]; j--) { tl[j] = tl[j - 1]; ti[j] = ti[j - 1]; }
        tl[j] = l[v];
        ti[j] = v;
    }
    for (int j = 0; j < have; j++) tl[j] = (float)((double)tl[j] - lse);
}

/* A constrained request's token: sampled among the tokens its grammar
 * allows (logits untouched), then accepted. -1: nothing is allowed and the
 * output is complete (a vocabulary without an end token); -2: nothing is
 * allowed yet the output is incomplete, or a grammar limit. */
static int32_t grammar_sample(srv_req *r, const float *l) {
    if (moe_constraint_mask(r->con, r->allowed, NULL)) return -2;
    int32_t id = moe_sampler_sample_masked(r->smp, l, r->allowed);
    if (id < 0) return moe_constraint_accepting(r->con) ? -1 : -2;
    return moe_constraint_accept(r->con, id) ? -2 : id;
}

/* The test hook's next token under a grammar: taken only if the grammar
 * allows it (a hook text that breaks the grammar fails the request). */
static int32_t grammar_force(srv_req *r, int32_t id) {
    if (moe_constraint_mask(r->con, r->allowed, NULL) || !r->allowed[id]) return -2;
    return moe_constraint_accept(r->con, id) ? -2 : id;
}

/* Ends a constrained request that has no token to take (under srv.mu). */
static void grammar_end(srv_req *r, int32_t why, double now) {
    if (why == -2) { finish_err(r, 500, "the grammar cannot continue (a limit, or no token of the vocabulary fits)"); return; }
    char buf[160];
    if (r->tools && r->tools->engaged) {           /* the calls are complete */
        if (!tools_finish(r, buf, sizeof buf)) { finish_err(r, 500, buf); return; }
        r->finish = "tool_calls";
        r->done = true;
        r->emit = r->len;
        r->t_done = now;
        req_signal(r);
        return;
    }
    if (!text_add(r, buf, moe_utf8_stream_flush(r->utf8, buf, sizeof buf))) { finish_err(r, 500, "out of memory"); return; }
    r->finish = "stop";
    r->done = true;
    r->emit = r->len;
    r->t_done = now;
    req_signal(r);
}

/* The top logits a step needs: when every row's request samples greedily
 * or with top-k, and wants neither log-probabilities (the whole
 * distribution) nor a grammar (a mask over the vocabulary), the largest
 * count its samplers need; else 0 (full logits). A row's top k are the
 * same bits whatever k, so sampling from more than a request needs draws
 * the same token (moe_sampler_sample_topk). */
static int step_topk(const srv *s, int rows) {
    int k = 0;
    for (int j = 0; j < rows; j++) {
        const srv_req *r = s->slots[s->row_slot[j]].req;
        const int need = moe_sampler_topk_need(r->smp);
        if (need == 0 || r->con || r->n_top >= 0) return 0;
        k = need > k ? need : k;
    }
    return k;
}

static void run_step(srv *s) {
    int rows;
    const int nt = build_step(s, &rows);
    if (nt == 0) return;
    moe_batch b = {.n_tokens = nt, .token = s->tok, .seq = s->seq, .logits = s->want};
    const int topn = step_topk(s, rows);
    const double t0 = srv_now();
    const int rc = topn ? moe_context_decode_topk(s->ctx, &b, topn, s->top_ids, s->top_vals)
                        : moe_context_decode(s->ctx, &b, s->logits);
    const double t1 = srv_now();
    const double wbytes = step_weight_bytes(s);
    /* a decode step: every token gives logits (running requests' next tokens,
     * or a prompt's last one when only it was left to run) */
    const bool decode_only = rows == nt;
    /* the cached tokens follow what ran (nothing ran on an error) */
    if (rc == MOE_OK)
        for (int k = 0; k < nt; k++) {
            srv_slot *sl = &s->slots[s->seq[k]];
            sl->cache[sl->n_cache++] = s->tok[k];
        }
    /* sampling before taking the lock: each request's own sampler */
    int32_t *ids = s->ids;
    if (rc == MOE_OK)
        for (int k = 0; k < rows; k++) {
            srv_req *r = s->slots[s->row_slot[k]].req;
            const float *l = s->logits + (size_t)k * (size_t)s->n_vocab;
            /* tools under auto: free until the calls begin */
            const bool constrained = r->con && (!r->tools || r->tools->engaged);
            const size_t o = (size_t)k * (size_t)topn;
            const bool force = r->tools && r->n_gen < r->tools->n_force;                    /* test hook */
            if (topn) ids[k] = moe_sampler_sample_topk(r->smp, s->top_ids + o, s->top_vals + o, topn);
            else if (constrained) ids[k] = force ? grammar_force(r, r->tools->force[r->n_gen]) : grammar_sample(r, l);
            else ids[k] = moe_sampler_sample(r->smp, l);
            if (!constrained && force) ids[k] = r->tools->force[r->n_gen];
            if (ids[k] >= 0) moe_sampler_accept(r->smp, ids[k]);   /* the penalties' counts */
            if (r->n_top >= 0 && r->n_gen < r->max_tokens) token_logprobs(l, s->n_vocab, ids[k], r);
        }
    pthread_mutex_lock(&s->mu);
    s->met.steps++;
    s->met.step_tokens += (uint64_t)nt;
    s->met.step_seconds += t1 - t0;
    s->met.weight_bytes += wbytes;
    if (decode_only) {
        s->met.decode_steps++;
        s->met.decode_tokens += (uint64_t)nt;
        s->met.decode_seconds += t1 - t0;
        s->met.decode_weight_bytes += wbytes;
        const int bk = (nt < SRV_SIZE_BUCKETS ? nt : SRV_SIZE_BUCKETS) - 1;
        s->met.size_steps[bk]++;
        s->met.size_seconds[bk] += t1 - t0;
        s->met.size_weight_bytes[bk] += wbytes;
    }
    if (rc != MOE_OK) {
        fprintf(stderr, "moefast serve: step failed: %s\n", moe_context_error(s->ctx));
        for (int k = 0; k < nt; k++) {
            srv_slot *sl = &s->slots[s->seq[k]];
            if (sl->req && !sl->req->done) finish_err(sl->req, 500, "the engine failed on this request's step");
        }
    } else
        for (int k = 0; k < rows; k++) {
            srv_req *r = s->slots[s->row_slot[k]].req;
            if (!r->done && !r->cancelled && ids[k] < 0) grammar_end(r, ids[k], t1);
            else if (!r->done && !r->cancelled) take_token(s, s->row_slot[k], ids[k], t1);
        }
    drop_cancelled(s);
    pthread_mutex_unlock(&s->mu);
}

static void *engine_main(void *arg) {
    srv *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        drop_cancelled(s);
        admit(s);
        if (s->busy == 0) {
            if (s->quit && s->q_len == 0) break;
            pthread_cond_wait(&s->wake, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        run_step(s);
        if (s->step_delay_us) usleep(s->step_delay_us);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int srv_start(srv *s) {
    if (pthread_create(&s->engine, NULL, engine_main, s)) return -1;
    s->engine_started = true;
    return 0;
}

void srv_shutdown(srv *s, double grace) {
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    s->quit = true;
    s->deadline = srv_now() + grace;
    while (s->q_len > 0) {                         /* not started: refused */
        srv_req *r = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->q_size;
        s->q_len--;
        if (!r->done) finish_err(r, 503, "the server is shutting down");
        unref_locked(r);
    }
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    if (s->engine_started) pthread_join(s->engine, NULL);
    s->engine_started = false;
}
