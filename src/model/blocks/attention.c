/* attention.c — the grouped-query attention block (blocks.h):
 *
 *   h = RMSNorm(x) * norm
 *   q, k, v (, extra) = Wq h, Wk h, Wv h (, Wextra h)      one pool phase
 *   per token (when there are any): the biases, whole-row QK-norms
 *   per (token, KV head) item: QK-norm, RoPE, the key and value stored in the
 *     token's sequence's cache at its position; then scores over the visible
 *     keys in position order, softmax, the weighted sum of values, the hook
 *   x += Wo a (+ bo)
 *
 * An item reads only its own sequence's cache, so tokens of other sequences
 * in the step change nothing; which thread runs it never changes its bits. */
#include <stdatomic.h>
#include <string.h>

#include "attention/attn.h"
#include "attention/kv_tq.h"
#include "base/flags.h"
#include "model/blocks.h"

typedef struct {
    moe_context *c;
    const moe_attn_desc *d;
    int il;
    bool prep;               /* decode with parallel_glue: each item first runs attn_prep */
    bool hook;               /* parallel_glue: each item applies the head hook to its heads */
    /* attn_worker: items handed out so far; on a line of its own, so the
     * threads' increments do not evict the fields above that every item reads */
    _Alignas(64) atomic_llong claimed;
} attn_task;

/* The cache block of layer il, KV head g of sequence seq: index of its first
 * row ([seq][layer][kv head] blocks of n_ctx (kv_q8: ctx_pad) rows). */
static size_t cache_block(const moe_context *c, int seq, int il, int g) {
    const moe_hparams *hp = &c->m->hp;
    return ((size_t)seq * (size_t)hp->n_layer + (size_t)il) * (size_t)hp->n_head_kv + (size_t)g;
}

/* Token t, KV head g: QK-norm and RoPE of the query heads g*G .. g*G+G-1 and
 * of key head g, then key and value row g stored in the cache at the token's
 * position. Items touch disjoint data, so they may run on any thread. */
static void attn_prep(moe_context *c, const moe_attn_desc *d, int il, int t, int g, int ith) {
    const moe_hparams *hp = &c->m->hp;
    const int H = d->n_head, Hkv = hp->n_head_kv, D = hp->head_dim, Dv = hp->head_dim_v, G = H / Hkv;
    const int n_rot = c->m->ropes[d->rope].n_rot;
    const bool adj = c->m->ropes[d->rope].adjacent;
    const int pos = c->tok_pos[t];
    const float *cs = c->rope_tab[d->rope] + (size_t)pos * (size_t)n_rot;
    float *qg = c->q + ((size_t)t * H + (size_t)g * G) * D;      /* the group's G query heads */
    const bool head_norm = !d->qk_norm_full;                      /* full-row norms: attn_rows, before */
    if (d->q_norm && head_norm) moe_rms_norm_rows(qg, d->q_norm, D, G, (size_t)D, hp->rms_eps);
    for (int h = 0; h < G; h++) moe_rope_apply(qg + (size_t)h * D, cs, n_rot, adj);
    float *k = c->k + ((size_t)t * Hkv + g) * D;
    if (d->k_norm && head_norm) moe_rms_norm(k, d->k_norm, k, D, hp->rms_eps);
    moe_rope_apply(k, cs, n_rot, adj);
    const float *v = c->v + ((size_t)t * Hkv + g) * Dv;
    const size_t blk = cache_block(c, c->tok_seq[t], il, g);
    if (c->kv_tq) {                                               /* kv_tq: rotated, Lloyd-Max coded rows */
        uint64_t s[MOE_TQ_MAX_D / 64];
        const size_t Dm = (size_t)(D > Dv ? D : Dv);                 /* after the G rotated query heads */
        float *tmp = c->tq_buf + (size_t)ith * c->tq_stride + (size_t)hp->n_head_max * Dm;
        const size_t C = (size_t)c->n_ctx, row = blk * C + (size_t)pos;
        uint8_t *kr = (uint8_t *)c->k_cache + row * c->tq_krow, *vr = (uint8_t *)c->v_cache + row * c->tq_vrow;
        const moe_tq_kernels *tk = moe_tq_for(c->attn);
        if (c->tq_kbits && c->tq_vbits && D == Dv) {             /* one call: the two rows' sums overlap */
            moe_tq_signs(il, g, D, s);                            /* the value's signs are the key's at D == Dv */
            tk->encode2(k, v, s, D, c->tq_kbits, c->tq_vbits, tmp - Dm, kr, vr);   /* 2 D: the last query slot too */
            return;
        }
        if (c->tq_kbits) {
            moe_tq_signs(il, g, D, s);
            moe_tq_encode_k(tk, k, s, D, c->tq_kbits, tmp, kr);
        } else memcpy(kr, k, (size_t)D * sizeof(float));         /* kv_tq_v: exact keys */
        if (c->tq_vbits) {
            moe_tq_signs(il, g, Dv, s);
            moe_tq_encode_k(tk, v, s, Dv, c->tq_vbits, tmp, vr);
        } else memcpy(vr, v, (size_t)Dv * sizeof(float));        /* kv_tq_k: exact values */
        return;
    }
    if (c->kv_q8) {                                               /* kv_q8: 8-bit blocks (attn.h) */
        const size_t Cp = (size_t)c->ctx_pad;
        uint8_t *tmp = c->kv_a8 + (size_t)ith * c->a8_row;
        c->kern->quantize_act8(k, tmp, D);
        moe_kv8_store_key(tmp, D, (int8_t *)c->k_cache + blk * Cp * (size_t)D, c->k_scale + blk * (size_t)(D / 32) * Cp, Cp,
                          pos);
        c->kern->quantize_act8(v, tmp, Dv);
        moe_kv8_store_value(tmp, Dv, (int8_t *)c->v_cache + blk * Cp * (size_t)Dv,
                            c->v_scale + blk * (size_t)(Dv / 32) * Cp, Cp, pos);
        return;
    }
    const size_t C = (size_t)c->n_ctx;                            /* rows of n_ctx positions */
    const size_t kp = (blk * C + (size_t)pos) * (size_t)D, vp = (blk * C + (size_t)pos) * (size_t)Dv;
    if (c->kv_half) {                                             /* kv_f16: round to nearest even */
        c->attn->to_half(k, (uint16_t *)c->k_cache + kp, D);
        c->attn->to_half(v, (uint16_t *)c->v_cache + vp, Dv);
    } else {
        memcpy((float *)c->k_cache + kp, k, (size_t)D * sizeof(float));
        memcpy((float *)c->v_cache + vp, v, (size_t)Dv * sizeof(float));
    }
}

/* kv_q8 (attn.h): one item's scores, softmax and weighted sum. The query
 * heads are quantized to A8 rows, the scores go to sc[h][j] at the key's
 * absolute position j, the softmax is the FP32 one over j0 .. j0+nk-1.
 * stream: a decode step (one token), whose keys and values come from memory. */
static void attn_item_q8(moe_context *c, size_t blk, int G, const float *q, int j0, int nk, float kq_scale, int ith,
                         bool stream, const float *sinks, float *sc, float *sums, float *o) {
    const moe_hparams *hp = &c->m->hp;
    const int D = hp->head_dim, Dv = hp->head_dim_v;
    const size_t C = (size_t)c->n_ctx, Cp = (size_t)c->ctx_pad, S = c->sc_stride;
    uint8_t *qa = c->q_a8 + (size_t)ith * (size_t)hp->n_head_max * c->a8_row;
    for (int h = 0; h < G; h++) c->kern->quantize_act8(q + (size_t)h * D, qa + (size_t)h * c->a8_row, D);
    c->attn->scores_q8(qa, c->a8_row, G, (const int8_t *)c->k_cache + blk * Cp * (size_t)D,
                       c->k_scale + blk * (size_t)(D / 32) * Cp, Cp, j0, nk, D, kq_scale, sc, S);
    for (int h = 0; h < G; h++) {
        float *r = sc + (size_t)h * S + (size_t)j0;
        /* a sink joins the denominator, shifted by the scores' own maximum
         * (softmax_q8's; a sink far above it gives weights 0, its limit) */
        const float mx = sinks ? c->attn->max_f32(r, nk) : 0.0f;
        sums[h] = c->attn->softmax_q8(r, nk);
        if (sinks) sums[h] += moe_expf(sinks[h] - mx);
    }
    float *w = c->attn_w + (size_t)ith * (size_t)hp->n_head_max * (size_t)(Dv / 32) * C;
    /* value_prefetch: a decode step's values come from memory (attn.h) */
    const bool pf = stream && moe_flag_on(c->flags, MOE_FLAG_VALUE_PREFETCH);
    (pf ? c->attn->accum_q8_stream : c->attn->accum_q8)(sc, S, G, (const int8_t *)c->v_cache + blk * Cp * (size_t)Dv,
                                                        c->v_scale + blk * (size_t)(Dv / 32) * Cp, Cp, j0, nk, Dv, w, o,
                                                        (size_t)Dv);
    for (int h = 0; h < G; h++) {
        const float inv = 1.0f / sums[h];
        for (int d = 0; d < Dv; d++) o[(size_t)h * Dv + d] *= inv;
    }
}

/* kv_tq (kv_tq.h), after the scores: the softmax of the FP32 cache over the
 * G heads' scores of nk keys (rows sc_stride apart), numerators in place, the
 * denominators (the sinks' terms last) in sums. */
static void tq_softmax(moe_context *c, int G, int nk, const float *sinks, float *sc, float *sums, float *sink_w) {
    const size_t S = c->sc_stride;
    const moe_attn_kernels *ak = c->attn;
    for (int h = 0; h < G; h++) {
        float *r = sc + (size_t)h * S;
        float mx = ak->max_f32(r, nk);
        if (sinks && sinks[h] > mx) mx = sinks[h];
        if (sinks) sink_w[h] = moe_expf(sinks[h] - mx);
        ak->exp_shift(r, nk, mx);
    }
    moe_attn_row_sums(sc, S, G, nk, sums);
    if (sinks)
        for (int h = 0; h < G; h++) sums[h] += sink_w[h];
}

/* The G heads' value sums o (kv_tq's, in the rotated domain) rotated back
 * once per head and step, then divided by their softmax denominators. */
static void tq_out(moe_context *c, int il, int g, int G, const float *sums, float *o) {
    const int Dv = c->m->hp.head_dim_v;
    if (c->tq_vbits) {
        uint64_t s[MOE_TQ_MAX_D / 64];
        moe_tq_signs(il, g, Dv, s);
        for (int h = 0; h < G; h++) moe_tq_unrotate_k(moe_tq_for(c->attn), o + (size_t)h * Dv, s, Dv);
    }
    for (int h = 0; h < G; h++) {
        float *oh = o + (size_t)h * Dv;
        const float inv = 1.0f / sums[h];
        for (int d = 0; d < Dv; d++) oh[d] *= inv;
    }
}

/* kv_tq, after the scores of one token: softmax, the value sum in the
 * rotated domain (kv_tq_k, exact values: the FP32 cache's kernel), out. */
static void tq_finish(moe_context *c, int il, int g, size_t blk, int G, int j0, int nk, const float *sinks, float *sc,
                      float *sums, float *sink_w, float *o) {
    const int Dv = c->m->hp.head_dim_v;
    const size_t C = (size_t)c->n_ctx;
    const uint8_t *vr = (const uint8_t *)c->v_cache + (blk * C + (size_t)j0) * c->tq_vrow;
    tq_softmax(c, G, nk, sinks, sc, sums, sink_w);
    if (c->tq_vbits) moe_tq_for(c->attn)->accum_tq(sc, c->sc_stride, G, vr, nk, Dv, c->tq_vbits, o, (size_t)Dv);
    else c->attn->accum(sc, c->sc_stride, G, (const float *)(const void *)vr, (size_t)Dv, nk, Dv, o, (size_t)Dv);
    tq_out(c, il, g, G, sums, o);
}

/* kv_tq: the scores of the G query heads of nt tokens (token i's at q +
 * i * qtok, heads D apart) against keys j0 .. j0+nk-1 of block blk, at
 * sc[i * G + h][j - j0]. The rows are rotated once (the keys stay coded:
 * scores_tq reads the codes). A row's scores do not depend on the other
 * rows of the call (kv_tq.h: an exact integer sum per key). kv_tq_v (exact
 * keys) scores one token with the FP32 cache's kernel. */
static void tq_scores(moe_context *c, int il, int g, size_t blk, int G, int nt, const float *q, size_t qtok, int j0,
                      int nk, float kq_scale, int ith, float *sc) {
    const int D = c->m->hp.head_dim;
    const size_t C = (size_t)c->n_ctx;
    const moe_tq_kernels *tk = moe_tq_for(c->attn);
    const uint8_t *kr = (const uint8_t *)c->k_cache + (blk * C + (size_t)j0) * c->tq_krow;
    if (!c->tq_kbits) {
        c->attn->scores(q, (size_t)D, G, (const float *)(const void *)kr, (size_t)D, nk, D, kq_scale, sc, c->sc_stride);
        return;
    }
    uint64_t s[MOE_TQ_MAX_D / 64];
    float *qr = c->tq_buf + (size_t)ith * c->tq_stride;
    moe_tq_signs(il, g, D, s);
    for (int i = 0; i < nt; i++)
        for (int h = 0; h < G; h++)
            moe_tq_rotate_k(tk, q + (size_t)i * qtok + (size_t)h * D, s, D, qr + ((size_t)i * G + (size_t)h) * D);
    tk->scores_tq(qr, (size_t)D, nt * G, kr, nk, D, c->tq_kbits, kq_scale, sc, c->sc_stride);
}

/* kv_tq: one item (token, KV head g with its G query heads): its scores,
 * softmax and weighted sum. Scores at sc[h][j - j0]. */
static void attn_item_tq(moe_context *c, int il, int g, size_t blk, int G, const float *q, int j0, int nk,
                         float kq_scale, int ith, const float *sinks, float *sc, float *sums, float *sink_w, float *o) {
    tq_scores(c, il, g, blk, G, 1, q, 0, j0, nk, kq_scale, ith, sc);
    tq_finish(c, il, g, blk, G, j0, nk, sinks, sc, sums, sink_w, o);
}

/* kv_tq prefill: how many tokens' items share one scores_tq call — the
 * codes of a tile of keys are unpacked once for all their heads' rows.
 * Bounded by the per-thread buffers (n_head_max rows of scores and of
 * rotated queries). */
#define TQ_BLOCK_TOKENS 4
static int tq_block_tokens(const moe_context *c, int G) {
    if (!c->kv_tq || !c->tq_kbits) return 1;
    bool run = false;                            /* a decode step of a batch: one token per sequence */
    for (int t = 1; t < c->n_tok && !run; t++) run = c->tok_seq[t] == c->tok_seq[t - 1];
    const int T = c->m->hp.n_head_max / G;
    return !run ? 1 : T < TQ_BLOCK_TOKENS ? (T > 0 ? T : 1) : TQ_BLOCK_TOKENS;
}

/* What comes between the projections and the per-head items, per token:
 * the biases, then the whole-row QK-norms (qk_norm_full), which need every
 * head of the token at once. */
static bool has_row_ops(const moe_attn_desc *d) {
    return d->bq || d->bk || d->bv || (d->qk_norm_full && (d->q_norm || d->k_norm));
}

static void add_bias(float *y, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += b[i];
}

static void rows_worker(void *arg, int ith, int nth) {
    const attn_task *at = arg;
    const moe_context *c = at->c;
    const moe_attn_desc *d = at->d;
    const moe_hparams *hp = &c->m->hp;
    const size_t qd = (size_t)d->n_head * (size_t)hp->head_dim, kd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    const size_t vd = (size_t)hp->n_head_kv * (size_t)hp->head_dim_v;
    int64_t b, e;
    moe_split(c->n_tok, ith, nth, 1, &b, &e);
    for (int64_t t = b; t < e; t++) {
        float *q = c->q + (size_t)t * qd, *k = c->k + (size_t)t * kd, *v = c->v + (size_t)t * vd;
        if (d->bq) add_bias(q, d->bq, qd);
        if (d->bk) add_bias(k, d->bk, kd);
        if (d->bv) add_bias(v, d->bv, vd);
        if (!d->qk_norm_full) continue;
        if (d->q_norm) moe_rms_norm(q, d->q_norm, q, (int)qd, hp->rms_eps);
        if (d->k_norm) moe_rms_norm(k, d->k_norm, k, (int)kd, hp->rms_eps);
    }
}

static void prep_worker(void *arg, int ith, int nth) {
    attn_task *at = arg;
    const int Hkv = at->c->m->hp.n_head_kv;
    for (int64_t it = ith; it < (int64_t)at->c->n_tok * Hkv; it += nth)
        attn_prep(at->c, at->d, at->il, (int)(it / Hkv), (int)(it % Hkv), ith);
}

/* The first position a token at pos sees. */
static int first_visible(const moe_attn_desc *d, int pos) {
    const int j0 = d->window > 0 ? pos - d->window + 1 : 0;
    return j0 < 0 ? 0 : j0;
}

/* kv_tq prefill, tokens ta .. tb-1 of one sequence whose keys all start at
 * lo (scored, rows sc_stride apart in sc): each token's softmax, then one value sum
 * for all their heads' rows (the codes of a block of keys unpacked once;
 * row r over its own token's keys: accum_tq's bits), into the thread's
 * tq_buf (the rotated queries are done with), then each token's heads
 * rotated back, divided and put in place, and the hook. */
#define TQ_MAX_ROWS 256
static void attn_tq_values(attn_task *at, int ta, int tb, int g, int lo, size_t blk, int ith, float *sc, float *sums,
                           float *sink_w) {
    moe_context *c = at->c;
    const moe_attn_desc *d = at->d;
    const int H = d->n_head, Dv = c->m->hp.head_dim_v, G = H / c->m->hp.n_head_kv;
    const size_t C = (size_t)c->n_ctx;
    const float *sinks = d->sinks ? d->sinks + (size_t)g * G : NULL;
    int nkr[TQ_MAX_ROWS];
    for (int t = ta; t < tb; t++) {
        const size_t r = (size_t)(t - ta) * G;
        tq_softmax(c, G, c->tok_pos[t] - lo + 1, sinks, sc + r * c->sc_stride, sums + r, sink_w + r);
        for (int h = 0; h < G; h++) nkr[r + (size_t)h] = c->tok_pos[t] - lo + 1;
    }
    float *o = c->tq_buf + (size_t)ith * c->tq_stride;
    const uint8_t *vr = (const uint8_t *)c->v_cache + (blk * C + (size_t)lo) * c->tq_vrow;
    moe_tq_for(c->attn)->accum_tq_rows(sc, c->sc_stride, (tb - ta) * G, nkr, vr, Dv, c->tq_vbits, o, (size_t)Dv);
    for (int t = ta; t < tb; t++) {
        const size_t r = (size_t)(t - ta) * G;
        tq_out(c, at->il, g, G, sums + r, o + r * Dv);
        memcpy(c->att + ((size_t)t * H + (size_t)g * G) * Dv, o + r * Dv, sizeof(float) * (size_t)G * Dv);
        if (at->hook) d->head_hook(c, d, t, g * G, (g + 1) * G);
    }
}

/* kv_tq prefill: the items of tokens t0 .. t1-1 for KV head g, the tokens
 * of each sequence in one scores_tq call over the keys any of them sees;
 * each token then takes its own keys' scores (the same bits as its own
 * item's) through tq_finish and the hook. */
static void attn_tq_tokens(attn_task *at, int t0, int t1, int g, int ith, float *sc, float *sums, float *sink_w) {
    moe_context *c = at->c;
    const moe_attn_desc *d = at->d;
    const moe_hparams *hp = &c->m->hp;
    const int H = d->n_head, D = hp->head_dim, Dv = hp->head_dim_v, G = H / hp->n_head_kv;
    const float kq_scale = 1.0f / sqrtf((float)D);
    const size_t S = c->sc_stride;
    const float *sinks = d->sinks ? d->sinks + (size_t)g * G : NULL;
    for (int ta = t0, tb; ta < t1; ta = tb) {
        int lo = first_visible(d, c->tok_pos[ta]), hi = c->tok_pos[ta];
        for (tb = ta + 1; tb < t1 && c->tok_seq[tb] == c->tok_seq[ta]; tb++) {
            const int f = first_visible(d, c->tok_pos[tb]);
            lo = f < lo ? f : lo;
            hi = c->tok_pos[tb] > hi ? c->tok_pos[tb] : hi;
        }
        const size_t blk = cache_block(c, c->tok_seq[ta], at->il, g);
        tq_scores(c, at->il, g, blk, G, tb - ta, c->q + ((size_t)ta * H + (size_t)g * G) * D, (size_t)H * D, lo,
                  hi - lo + 1, kq_scale, ith, sc);
        bool same_start = c->tq_vbits && (tb - ta) * G <= TQ_MAX_ROWS;
        for (int t = ta; t < tb; t++) same_start = same_start && first_visible(d, c->tok_pos[t]) == lo;
        if (same_start) {                         /* one value sum for the run's rows (accum_tq_rows) */
            attn_tq_values(at, ta, tb, g, lo, blk, ith, sc, sums, sink_w);
            continue;
        }
        for (int t = ta; t < tb; t++) {
            const int pos = c->tok_pos[t], j0 = first_visible(d, pos);
            float *o = c->att + ((size_t)t * H + (size_t)g * G) * Dv;
            tq_finish(c, at->il, g, blk, G, j0, pos - j0 + 1, sinks, sc + (size_t)(t - ta) * G * S + (size_t)(j0 - lo),
                      sums, sink_w, o);
            if (at->hook) d->head_hook(c, d, t, g * G, (g + 1) * G);
        }
    }
}

/* One item = (a token at position pos of sequence seq, KV head g) with the
 * G query heads q that share it: scores over the visible keys j0..pos in
 * position order, softmax per head, weighted sum of values into o. decode:
 * the step has one token, whose keys and values come from memory. Items are
 * independent, so any split over threads and any batch gives the same bits. */
static void attn_item(const attn_task *at, int seq, int pos, int g, const float *q, float *o, int ith, bool decode) {
    moe_context *c = at->c;
    const moe_attn_desc *d = at->d;
    const moe_hparams *hp = &c->m->hp;
    const int H = d->n_head, Hkv = hp->n_head_kv, D = hp->head_dim, Dv = hp->head_dim_v;
    const int G = H / Hkv;
    const float kq_scale = 1.0f / sqrtf((float)D);
    const size_t C = (size_t)c->n_ctx, S = c->sc_stride;
    float *sc = moe_score_rows(c, ith);                                   /* [G][S] */
    float *sums = c->attn_sum + (size_t)ith * 2 * (size_t)hp->n_head_max;   /* [G] */
    float *sink_w = sums + hp->n_head_max;                                 /* [G]: exp(sink - max) */
    const int j0 = first_visible(d, pos), nk = pos - j0 + 1;
    const size_t blk = cache_block(c, seq, at->il, g);
    const float *sinks = d->sinks ? d->sinks + (size_t)g * G : NULL;      /* the group's G sinks */
    if (c->kv_tq) {                               /* kv_tq: the codes, queries rotated (kv_tq.h) */
        attn_item_tq(c, at->il, g, blk, G, q, j0, nk, kq_scale, ith, sinks, sc, sums, sink_w, o);
        return;
    }
    if (c->kv_q8) {                               /* the same steps on 8-bit blocks, keys indexed absolutely */
        attn_item_q8(c, blk, G, q, j0, nk, kq_scale, ith, decode, sinks, sc, sums, o);
        return;
    }
    /* key_stream (FP32) and kv_prefetch (F16): a decode step's keys and
     * values come from memory, so the cache is read by the kernels ordered
     * or prefetching for that (attn.h) */
    const moe_attn_kernels *ak = c->attn;
    const bool stream = decode && moe_flag_on(c->flags, MOE_FLAG_KEY_STREAM);
    const bool pf = decode && c->kv_half && moe_flag_on(c->flags, MOE_FLAG_KV_PREFETCH);
    const size_t kg = (blk * C + (size_t)j0) * (size_t)D;                 /* keys [nk][D] */
    const size_t vg = (blk * C + (size_t)j0) * (size_t)Dv;                /* values [nk][Dv] */
    if (c->kv_half)
        (pf ? ak->scores_h_prefetch : ak->scores_h)(q, (size_t)D, G, (const uint16_t *)c->k_cache + kg, (size_t)D, nk,
                                                    D, kq_scale, sc, S);
    else (stream ? ak->scores_stream : ak->scores)(q, (size_t)D, G, (const float *)c->k_cache + kg, (size_t)D, nk, D,
                                                     kq_scale, sc, S);
    if (pf)                         /* the first value rows arrive while the softmax runs */
        moe_prefetch_bytes((const uint16_t *)c->v_cache + vg,
                           (size_t)(nk < MOE_KV_PREFETCH_VALUES ? nk : MOE_KV_PREFETCH_VALUES) * (size_t)Dv * 2);
    for (int h = 0; h < G; h++) {                                         /* softmax numerators per head */
        float *r = sc + (size_t)h * S;
        float mx = ak->max_f32(r, nk);
        /* a sink: the max includes it, its exp joins the sum (ggml's soft_max with sinks) */
        if (sinks && sinks[h] > mx) mx = sinks[h];
        if (sinks) sink_w[h] = moe_expf(sinks[h] - mx);
        ak->exp_shift(r, nk, mx);                                         /* r[j] = exp(r[j] - max) */
    }
    moe_attn_row_sums(sc, S, G, nk, sums);                                /* denominators, in key order */
    if (sinks)                                                            /* the sink's term last */
        for (int h = 0; h < G; h++) sums[h] += sink_w[h];
    if (c->kv_half)
        (pf ? ak->accum_h_prefetch : ak->accum_h)(sc, S, G, (const uint16_t *)c->v_cache + vg, (size_t)Dv, nk, Dv, o,
                                                  (size_t)Dv);
    else (stream ? ak->accum_stream : ak->accum)(sc, S, G, (const float *)c->v_cache + vg, (size_t)Dv, nk, Dv, o,
                                                 (size_t)Dv);
    for (int h = 0; h < G; h++) {
        const float inv = 1.0f / sums[h];
        for (int dd = 0; dd < Dv; dd++) o[(size_t)h * Dv + dd] *= inv;
    }
}

static void attn_worker(void *arg, int ith, int nth) {
    (void)nth;
    attn_task *at = arg;
    moe_context *c = at->c;
    const moe_attn_desc *d = at->d;
    const moe_hparams *hp = &c->m->hp;
    const int H = d->n_head, Hkv = hp->n_head_kv, D = hp->head_dim, Dv = hp->head_dim_v;
    const int G = H / Hkv;
    const int T = tq_block_tokens(c, G);
    if (T > 1) {                                  /* kv_tq prefill: items of T tokens (attn_tq_tokens) */
        float *sc = moe_score_rows(c, ith);
        float *sums = c->attn_sum + (size_t)ith * 2 * (size_t)hp->n_head_max;
        const int nb = (c->n_tok + T - 1) / T;
        for (int64_t it; (it = moe_next_item(&at->claimed, (int64_t)nb * Hkv)) >= 0;) {
            const int t0 = (int)(it / Hkv) * T, g = (int)(it % Hkv);
            attn_tq_tokens(at, t0, t0 + T < c->n_tok ? t0 + T : c->n_tok, g, ith, sc, sums, sums + hp->n_head_max);
        }
        return;
    }
    for (int64_t it; (it = moe_next_item(&at->claimed, (int64_t)c->n_tok * Hkv)) >= 0;) {
        const int t = (int)(it / Hkv), g = (int)(it % Hkv);
        if (at->prep) attn_prep(c, d, at->il, t, g, ith);     /* its own KV head's new row, before reading it */
        attn_item(at, c->tok_seq[t], c->tok_pos[t], g, c->q + ((size_t)t * H + (size_t)g * G) * D,
                  c->att + ((size_t)t * H + (size_t)g * G) * Dv, ith, c->n_tok == 1);
        if (at->hook) d->head_hook(c, d, t, g * G, (g + 1) * G);
    }
}

void moe_attn_decode_item(moe_context *c, int il, int pos, int g, const float *q, float *o, int ith) {
    const attn_task at = {c, &c->m->layers[il].attn, il, false, false, 0};
    attn_item(&at, 0, pos, g, q, o, ith, true);
}

double moe_attn_kv_bytes(const moe_context *c, const moe_attn_desc *d, int pos) {
    const moe_hparams *hp = &c->m->hp;
    const double keys = pos - first_visible(d, pos) + 1;
    if (c->kv_tq)                                                 /* kv_tq: packed codes + a half per vector */
        return keys * hp->n_head_kv * (double)(c->tq_krow + c->tq_vrow);
    const double elem = c->kv_q8 ? 34.0 / 32.0 : c->kv_half ? 2.0 : 4.0;   /* kv_q8: a code + a half per 32 */
    return keys * hp->n_head_kv * (double)(hp->head_dim + (d->v_from_k ? 0 : hp->head_dim_v)) * elem;
}

/* For the profile: the KV bytes the step's attention read. */
static double step_kv_bytes(const moe_context *c, const moe_attn_desc *d) {
    double b = 0;
    for (int t = 0; t < c->n_tok; t++) b += moe_attn_kv_bytes(c, d, c->tok_pos[t]);
    return b;
}

static double mats_bytes(const moe_weight *const *w, int count) {
    double b = 0;
    for (int i = 0; i < count; i++) b += (double)w[i]->mat_bytes;
    return b;
}

static void attention_run(moe_context *c, const moe_attn_desc *d, int il) {
    const int n = c->n_tok, E = c->m->hp.n_embd;
    moe_norm_tokens(c, d->norm);                                  /* h = RMSNorm(x) * norm  [n][E] */
    /* q [n][H][D], k [n][Hkv][D], v [n][Hkv][Dv], extra [n][wextra.n_out] */
    const moe_weight *ws[4] = {&d->wq, &d->wk, &d->wv, &d->wextra};
    float *ys[4] = {c->q, c->k, c->v, c->gate};
    const int nw = d->wextra.data ? 4 : 3;
    const uint8_t *xa = moe_act_rows_multi(c, ws, nw, c->xn, n);
    PROF_MARK(c, MOE_PH_ATTN_NORM, 0, 0);
    moe_matmul_multi(c, ws, ys, nw, c->xn, xa, n);
    PROF_MARK(c, MOE_PH_QKV, mats_bytes(ws, nw), 0);

    /* QK-norm, RoPE and the cache store: per (token, KV head) item; with
     * parallel_glue inside the attention phase (decode: an item reads only its
     * own KV head) or as a phase of its own (several tokens: a token reads
     * the keys other items of its sequence store), otherwise here in order */
    const bool glue = moe_flag_on(c->flags, MOE_FLAG_PARALLEL_GLUE);
    attn_task at = {c, d, il, glue && n == 1, glue && d->head_hook, 0};
    if (has_row_ops(d)) {                                         /* biases, whole-row QK-norms */
        if (glue && n > 1) moe_ctx_par(c, rows_worker, &at);
        else rows_worker(&at, 0, 1);
        PROF_EXTEND(c, MOE_PH_QKV);
    }
    if (!glue || n > 1) {
        if (glue) moe_ctx_par(c, prep_worker, &at);
        else prep_worker(&at, 0, 1);
        PROF_MARK(c, MOE_PH_ATTN_PREP, 0, 0);
    }
    moe_ctx_par(c, attn_worker, &at);                             /* att [n][H][Dv] */
    if (!glue && d->head_hook)                                    /* the hook, here in order */
        for (int t = 0; t < n; t++) d->head_hook(c, d, t, 0, d->n_head);
    PROF_MARK(c, MOE_PH_ATTENTION, 0, step_kv_bytes(c, d));
    moe_matmul(c, &d->wo, c->att, n, c->proj);                    /* proj [n][E] */
    if (d->bo)
        for (int t = 0; t < n; t++) add_bias(c->proj + (size_t)t * E, d->bo, (size_t)E);
    for (size_t i = 0; i < (size_t)n * E; i++) c->x[i] += c->proj[i];
    PROF_MARK(c, MOE_PH_WO, (double)d->wo.mat_bytes, 0);
}

void moe_block_attention(moe_context *c, const moe_attn_desc *d, int il) {
    if (c->diverged) return;
    attention_run(c, d, il);
    moe_context *r = c->shadow;
    if (!r) return;
    attention_run(r, d, il);
    const moe_hparams *hp = &c->m->hp;
    const size_t N = (size_t)c->n_tok, E = (size_t)hp->n_embd;
    const size_t qd = (size_t)d->n_head * (size_t)hp->head_dim, kd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
    const size_t vd = (size_t)hp->n_head_kv * (size_t)hp->head_dim_v, ad = (size_t)d->n_head * (size_t)hp->head_dim_v;
    (void)(moe_diff_check(c, c->q, r->q, N, qd, "attn q (after QK-norm and RoPE)", il) &&
           moe_diff_check(c, c->k, r->k, N, kd, "attn k (after QK-norm and RoPE)", il) &&
           moe_diff_check(c, c->v, r->v, N, vd, "attn v", il) &&
           moe_diff_check(c, c->att, r->att, N, ad, "attention output (after the head hook)", il) &&
           moe_diff_check(c, c->proj, r->proj, N, E, "attn_output projection", il) &&
           moe_diff_check(c, c->x, r->x, N, E, "residual after attention", il));
    PROF_START(c);                    /* the profile's chain restarts after the twin's block */
}
