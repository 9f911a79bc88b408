/* sampler.c — token selection from logits.
 *
 * Greedy (temp <= 0) is argmax with ties to the lowest id. Otherwise the
 * chain is llama.cpp's order: top-k -> top-p -> min-p -> temperature ->
 * draw. Candidates are ordered by (logit desc, id asc), so the result is a
 * pure function of the logits and the seeded generator. All buffers are
 * allocated when the sampler is created. */
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
};

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
    moe_rng_seed(&s->rng, d.seed);
    *out = s;
    return MOE_OK;
}

void moe_sampler_free(moe_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s);
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
    if (s->p.temp <= 0.0f) return 1;
    return s->p.top_k >= 1 && s->p.top_k <= 64 && s->p.top_k <= s->n_vocab ? s->p.top_k : 0;
}

/* ids/vals: moe_topk's order (logit descending, ties by id), which is the
 * candidates' sort order, so the chain sees the same list. */
int32_t moe_sampler_sample_topk(moe_sampler *s, const int32_t *ids, const float *vals, int k) {
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
