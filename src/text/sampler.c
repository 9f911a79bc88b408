/* sampler.c — token selection from logits.
 *
 * Greedy (temp <= 0) is argmax with ties to the lowest id. Otherwise the
 * chain is llama.cpp's order: top-k -> top-p -> min-p -> temperature ->
 * draw. Candidates are ordered by (logit desc, id asc), so the result is a
 * pure function of the logits and the seeded generator.
 *
 * Adjustments (engine.h) change a copy of the logits before the chain, in
 * this order, each in float: (1) the logit bias is added; (2) llama.cpp's
 * repeat penalty: a token seen in the window of the last repeat_last_n
 * accepted tokens (the context passed to moe_sampler_accept_context, then
 * the generated ones) gets logit / penalty when its logit is > 0, logit *
 * penalty otherwise; (3) OpenAI's penalties: - count * frequency - (count >
 * 0) * presence, count over the generated tokens only (all of them, no
 * window). llama.cpp's penalties sampler applies (2) then (3) and its logit
 * bias before both, so the order is its; unlike it, (3) counts the whole
 * completion, as OpenAI's API defines them. Buffers are allocated when the
 * sampler is created or an adjustment is switched on, never while sampling
 * or accepting; an adjustment set to its neutral value allocates nothing. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moefast.h"
#include "base/util.h"

typedef struct { float logit; int32_t id; float p; } cand;

struct moe_sampler {
    moe_sampler_params p;
    int n_vocab;
    cand *c;
    moe_rng rng;
    float presence, frequency;   /* penalties; both 0: off */
    int32_t *count;              /* accepted tokens per id (with penalties) */
    float *bias;                 /* logit bias per id, or NULL */
    float repeat;                /* repeat penalty; 1 (or no window): off */
    int32_t *ring;               /* the window: the last win_cap tokens, oldest at ring_at once full */
    int win_cap, win_len, ring_at;
    int32_t *win_count;          /* occurrences per id in the window */
    float *adj;                  /* the adjusted logits (with any adjustment) */
};

static bool repeating(const moe_sampler *s) { return s->win_cap > 0 && s->repeat != 1.0f; }
static bool adjusting(const moe_sampler *s) {
    return s->bias || s->presence != 0.0f || s->frequency != 0.0f || repeating(s);
}

int32_t moe_argmax(const float *logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

int moe_sampler_new(const moe_sampler_params *p, int n_vocab, moe_sampler **out, char *err, size_t errlen) {
    if (!out) return moe_errf(err, errlen, MOE_EINVAL, "sampler: out is NULL");
    *out = NULL;
    if (n_vocab <= 0) return moe_errf(err, errlen, MOE_EINVAL, "sampler: n_vocab must be > 0");
    moe_sampler_params d = {0.0f, 0, 1.0f, 0.0f, 0};
    if (p) d = *p;
    if (!isfinite(d.temp) || !isfinite(d.top_p) || !isfinite(d.min_p))
        return moe_errf(err, errlen, MOE_EINVAL, "sampler: temp, top_p and min_p must be finite");
    if (d.top_p < 0.0f) return moe_errf(err, errlen, MOE_EINVAL, "sampler: top_p %g must be in [0, 1] (0 or 1: off)", (double)d.top_p);
    if (d.min_p < 0.0f || d.min_p >= 1.0f) return moe_errf(err, errlen, MOE_EINVAL, "sampler: min_p %g must be in [0, 1)", (double)d.min_p);
    if (d.top_k < 0) return moe_errf(err, errlen, MOE_EINVAL, "sampler: top_k %d must be >= 0 (0: off)", d.top_k);
    if (d.top_p == 0.0f) d.top_p = 1.0f;
    moe_sampler *s = calloc(1, sizeof *s);
    if (!s) return moe_errf(err, errlen, MOE_ENOMEM, "sampler: out of memory");
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    if (!s->c) { free(s); return moe_errf(err, errlen, MOE_ENOMEM, "sampler: out of memory"); }
    s->p = d;
    s->n_vocab = n_vocab;
    s->repeat = 1.0f;
    moe_rng_seed(&s->rng, d.seed);
    *out = s;
    return MOE_OK;
}

void moe_sampler_free(moe_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->count);
    free(s->bias);
    free(s->ring);
    free(s->win_count);
    free(s->adj);
    free(s);
}

/* The adjusted-logits buffer, allocated by the setter that switches an
 * adjustment on (so the sampling path never allocates). */
static int need_adj(moe_sampler *s, char *err, size_t errlen) {
    if (!s->adj && !(s->adj = malloc((size_t)s->n_vocab * sizeof *s->adj)))
        return moe_errf(err, errlen, MOE_ENOMEM, "sampler: out of memory");
    return MOE_OK;
}

int moe_sampler_set_penalties(moe_sampler *s, float presence, float frequency, char *err, size_t errlen) {
    if (!s) return moe_errf(err, errlen, MOE_EINVAL, "sampler: NULL");
    if (!(presence >= -2.0f && presence <= 2.0f))
        return moe_errf(err, errlen, MOE_EINVAL, "sampler: presence penalty %g must be in [-2, 2]", (double)presence);
    if (!(frequency >= -2.0f && frequency <= 2.0f))
        return moe_errf(err, errlen, MOE_EINVAL, "sampler: frequency penalty %g must be in [-2, 2]", (double)frequency);
    if (presence != 0.0f || frequency != 0.0f) {
        if (!s->count && !(s->count = calloc((size_t)s->n_vocab, sizeof *s->count)))
            return moe_errf(err, errlen, MOE_ENOMEM, "sampler: out of memory");
        if (need_adj(s, err, errlen)) return MOE_ENOMEM;
    }
    s->presence = presence;
    s->frequency = frequency;
    return MOE_OK;
}

int moe_sampler_set_logit_bias(moe_sampler *s, const int32_t *ids, const float *bias, int n, char *err, size_t errlen) {
    if (!s) return moe_errf(err, errlen, MOE_EINVAL, "sampler: NULL");
    if (n < 0 || (n > 0 && (!ids || !bias))) return moe_errf(err, errlen, MOE_EINVAL, "sampler: bad logit bias list");
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->n_vocab)
            return moe_errf(err, errlen, MOE_EINVAL, "sampler: logit bias entry %d: token id %d is outside the vocabulary (0..%d)",
                            i, ids[i], s->n_vocab - 1);
        if (!(bias[i] >= -100.0f && bias[i] <= 100.0f))
            return moe_errf(err, errlen, MOE_EINVAL, "sampler: logit bias entry %d: %g must be in [-100, 100]", i, (double)bias[i]);
    }
    if (n == 0) { free(s->bias); s->bias = NULL; return MOE_OK; }
    if (!s->bias && !(s->bias = malloc((size_t)s->n_vocab * sizeof *s->bias)))
        return moe_errf(err, errlen, MOE_ENOMEM, "sampler: out of memory");
    if (need_adj(s, err, errlen)) return MOE_ENOMEM;
    memset(s->bias, 0, (size_t)s->n_vocab * sizeof *s->bias);
    for (int i = 0; i < n; i++) s->bias[ids[i]] = bias[i];
    return MOE_OK;
}

int moe_sampler_set_repeat_penalty(moe_sampler *s, float penalty, int last_n, char *err, size_t errlen) {
    if (!s) return moe_errf(err, errlen, MOE_EINVAL, "sampler: NULL");
    if (!(penalty > 0.0f) || !isfinite(penalty))
        return moe_errf(err, errlen, MOE_EINVAL, "sampler: repeat penalty %g must be a finite number > 0 (1: off)", (double)penalty);
    if (last_n < 0 || last_n > MOE_SAMPLER_MAX_REPEAT_WINDOW)
        return moe_errf(err, errlen, MOE_EINVAL, "sampler: repeat window %d must be in [0, %d] (0: off)", last_n,
                        MOE_SAMPLER_MAX_REPEAT_WINDOW);
    const bool on = last_n > 0 && penalty != 1.0f;
    if (on) {
        if (!s->win_count && !(s->win_count = calloc((size_t)s->n_vocab, sizeof *s->win_count)))
            return moe_errf(err, errlen, MOE_ENOMEM, "sampler: out of memory");
        if (last_n > s->win_cap) {
            int32_t *r = realloc(s->ring, (size_t)last_n * sizeof *r);
            if (!r) return moe_errf(err, errlen, MOE_ENOMEM, "sampler: out of memory");
            s->ring = r;
        }
        if (need_adj(s, err, errlen)) return MOE_ENOMEM;
        memset(s->win_count, 0, (size_t)s->n_vocab * sizeof *s->win_count);
    }
    s->repeat = penalty;
    s->win_cap = on ? last_n : 0;
    s->win_len = s->ring_at = 0;
    return MOE_OK;
}

/* The window takes one token: the oldest leaves it once it is full. */
static void window_push(moe_sampler *s, int32_t token) {
    if (s->win_len == s->win_cap) s->win_count[s->ring[s->ring_at]]--;
    else s->win_len++;
    s->ring[s->ring_at] = token;
    s->win_count[token]++;
    if (++s->ring_at == s->win_cap) s->ring_at = 0;
}

void moe_sampler_accept(moe_sampler *s, int32_t token) {
    if (!s || token < 0 || token >= s->n_vocab) return;
    if (s->count && s->count[token] < INT32_MAX) s->count[token]++;
    if (repeating(s)) window_push(s, token);
}

void moe_sampler_accept_context(moe_sampler *s, const int32_t *tokens, int n) {
    if (!s || !tokens || !repeating(s)) return;
    for (int i = n > s->win_cap ? n - s->win_cap : 0; i < n; i++)
        if (tokens[i] >= 0 && tokens[i] < s->n_vocab) window_push(s, tokens[i]);
}

/* One logit after the adjustments, in the order of the header comment. */
static float adjust_one(const moe_sampler *s, int32_t id, float l) {
    if (s->bias) l += s->bias[id];
    if (s->win_cap > 0 && s->win_count[id] > 0) l = l > 0.0f ? l / s->repeat : l * s->repeat;
    if (s->count && s->count[id] > 0) l -= (float)s->count[id] * s->frequency + s->presence;
    return l;
}

/* The logits the chain reads: the caller's, or their adjusted copy. */
static const float *adjusted(moe_sampler *s, const float *logits) {
    if (!adjusting(s)) return logits;
    for (int i = 0; i < s->n_vocab; i++) s->adj[i] = adjust_one(s, i, logits[i]);
    return s->adj;
}

/* true when a sorts before b: larger logit first, NaN last, ties by id */
static bool cand_before(const cand *a, const cand *b) {
    bool an = isnan(a->logit), bn = isnan(b->logit);
    if (an != bn) return bn;
    if (!an && a->logit != b->logit) return a->logit > b->logit;
    return a->id < b->id;
}

/* In-place heapsort (glibc's qsort may allocate; the sampler must not). */
static void sift_down(cand *c, int root, int n) {
    for (;;) {
        int child = 2 * root + 1;
        if (child >= n) return;
        /* max-heap on "sorts after", so the array ends up in cand_before order */
        if (child + 1 < n && cand_before(&c[child], &c[child + 1])) child++;
        if (!cand_before(&c[root], &c[child])) return;
        cand t = c[root]; c[root] = c[child]; c[child] = t;
        root = child;
    }
}

static void sort_cands(cand *c, int n) {
    for (int i = n / 2 - 1; i >= 0; i--) sift_down(c, i, n);
    for (int end = n - 1; end > 0; end--) {
        cand t = c[0]; c[0] = c[end]; c[end] = t;
        sift_down(c, 0, end);
    }
}

/* Probabilities of c[0..n) at temperature t (c sorted, c[0] the max). */
static void softmax_cands(cand *c, int n, float t) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        c[i].p = expf((c[i].logit - c[0].logit) / t);
        sum += c[i].p;
    }
    for (int i = 0; i < n; i++) c[i].p = (float)(c[i].p / sum);
}

/* The chain after the candidates c[0..n) are sorted and top-k applied. */
static int32_t sample_chain(moe_sampler *s, int n);

int32_t moe_sampler_sample(moe_sampler *s, const float *logits) {
    return moe_sampler_sample_masked(s, logits, NULL);
}

/* The chain runs over the allowed tokens only: their logits are read as
 * they are, so greedy is the argmax over them and every probability is
 * renormalised over them (a grammar never shifts a logit). */
int32_t moe_sampler_sample_masked(moe_sampler *s, const float *logits, const uint8_t *allowed) {
    logits = adjusted(s, logits);
    if (!allowed && s->p.temp <= 0.0f) return moe_argmax(logits, s->n_vocab);
    if (s->p.temp <= 0.0f) {
        int32_t best = -1;
        for (int i = 0; i < s->n_vocab; i++)
            if (allowed[i] && (best < 0 || logits[i] > logits[best])) best = i;
        return best;
    }
    int n = 0;
    for (int i = 0; i < s->n_vocab; i++)
        if (!allowed || allowed[i]) { s->c[n].logit = logits[i]; s->c[n].id = i; n++; }
    if (n == 0) return -1;
    sort_cands(s->c, n);
    /* NaN logits sort last and are never candidates. */
    while (n > 1 && isnan(s->c[n - 1].logit)) n--;
    if (s->p.top_k > 0 && s->p.top_k < n) n = s->p.top_k;
    return sample_chain(s, n);
}

int moe_sampler_topk_need(const moe_sampler *s) {
    if (!s) return 0;
    if (adjusting(s)) return 0;
    if (s->p.temp <= 0.0f) return 1;
    return s->p.top_k >= 1 && s->p.top_k <= 64 && s->p.top_k <= s->n_vocab ? s->p.top_k : 0;
}

/* ids/vals: moe_topk's order (logit descending, ties by id), which is the
 * candidates' sort order, so the chain sees the same list. (With penalties
 * or a bias, topk_need is 0 and callers pass full logits; a caller that
 * still comes here gets the k candidates adjusted and re-sorted.) */
int32_t moe_sampler_sample_topk(moe_sampler *s, const int32_t *ids, const float *vals, int k) {
    if (k > 0 && adjusting(s)) {
        for (int i = 0; i < k; i++) { s->c[i].id = ids[i]; s->c[i].logit = adjust_one(s, ids[i], vals[i]); }
        sort_cands(s->c, k);
        if (s->p.temp <= 0.0f) return s->c[0].id;
        return sample_chain(s, k < s->p.top_k || s->p.top_k == 0 ? k : s->p.top_k);
    }
    if (s->p.temp <= 0.0f || k <= 0) return k > 0 ? ids[0] : 0;
    const int n = k < s->p.top_k ? k : s->p.top_k;
    for (int i = 0; i < n; i++) { s->c[i].logit = vals[i]; s->c[i].id = ids[i]; }
    return sample_chain(s, n);
}

static int32_t sample_chain(moe_sampler *s, int n) {
    if (s->p.top_p < 1.0f) {
        softmax_cands(s->c, n, 1.0f);
        double cum = 0.0;
        for (int i = 0; i < n; i++) {
            cum += s->c[i].p;
            if (cum >= s->p.top_p) { n = i + 1; break; }
        }
    }
    if (s->p.min_p > 0.0f) {
        softmax_cands(s->c, n, 1.0f);
        float thr = s->c[0].p * s->p.min_p;
        int k = 1;
        while (k < n && s->c[k].p >= thr) k++;
        n = k;
    }
    softmax_cands(s->c, n, s->p.temp);
    double u = moe_rng_uniform(&s->rng), cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum += s->c[i].p;
        if (u < cum) return s->c[i].id;
    }
    return s->c[n - 1].id;
}
