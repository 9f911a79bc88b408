/* mla.c — multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 §2.1),
 * in the absorbed form llama.cpp computes (blocks.h: moe_block_mla):
 *
 *   h      = RMSNorm(x) * attn_norm                               [n][E]
 *   q      = Wq_b (RMSNorm(Wq_a h) * q_a_norm)   (or Wq h)       [n][H][nope | rope]
 *   [c|kp] = Wkv_a h                                              [n][C + rope]
 *   c      = RMSNorm(c) * kv_a_norm;  kp = RoPE(kp)     (NORM pairs, YaRN)
 *   cache  <- [c | kp] at the token's position: ONE row of C + rope values per
 *             token and layer, shared by all heads (F32: 4 (C + rope) bytes,
 *             kv_f16: 2 (C + rope); DeepSeek-V3: 576 values = 1152 bytes in
 *             F16 where full K/V would be 128 x (192 + 128) = 40960 values)
 *   per head h:
 *     q~   = [Wk_b_h q_nope_h | RoPE(q_pe_h)]                     [C + rope]
 *     s_j  = q~ . cache_j * kq_scale      for the visible positions j
 *     o_h  = sum_j softmax(s)_j c_j       (values: the first C dims of each row)
 *     out_h = Wv_b_h o_h                                          [v]
 *   x     += Wo [out_0 .. out_{H-1}]
 *
 * Computation order (the same in prefill and decode, so they agree bit for
 * bit, and the same for any batch, chunking or thread count):
 *   1. per token: the norm and the projections (row dot products under the
 *      kernels' contract: a row's bits do not depend on the other rows);
 *   2. per token, alone: the q_a norm, the c norm, RoPE of kp, the cache store;
 *   3. per head, over the step's tokens: q~ = Wk_b_h q_nope (one product per
 *      head, all tokens as its rows: in a prompt the head's matrix streams
 *      once, not once per token; each row is the same dot products either way);
 *   4. per (token, head) item, on any thread (a token's heads in groups
 *      that share the key loads; the arithmetic is the item's alone): RoPE
 *      of q_pe, the scores over the token's sequence's keys in increasing
 *      position order, softmax (max, exp, sum in key order), the weighted
 *      sum of the c rows in key order, times 1/sum;
 *   5. per head, over the tokens: out_h = Wv_b_h o;
 *   6. per token: Wo, the residual.
 * Phase 2 finishes before phase 4 starts, so a token reads the keys of the
 * step's earlier tokens exactly as a later decode step reads them. */
#include <string.h>

#include "attention/attn.h"
#include "base/flags.h"
#include "model/blocks.h"

typedef struct {
    moe_context *c;
    const moe_mla_desc *d;
    const moe_attn_desc *a;
    int il;
    float *q;                /* [n][H][nope + rope] */
    float *out;              /* [n][H][v] */
    uint8_t *a8;             /* act_q8: [n][H] A8 rows of q_nope, then of o (a8_nope, a8_c bytes) */
    size_t a8_nope, a8_c;
    int phase;               /* head products: 0 Wk_b (q~), 1 Wv_b (out) */
    /* phase 4's units handed out so far (moe_next_item); on a line of its
     * own, so the threads' increments do not evict the fields above */
    _Alignas(64) atomic_llong claimed;
} mla_task;

/* Index of the first float (half) of sequence seq's cache rows for layer il
 * (one KV head: rows of C + rope, n_ctx of them). */
static size_t cache_rows(const moe_context *c, int seq, int il) {
    return ((size_t)seq * (size_t)c->m->hp.n_layer + (size_t)il) * (size_t)c->n_ctx;
}

/* Phase 2 for the step's tokens [b, e). */
static void rows_worker(void *arg, int ith, int nth) {
    const mla_task *mt = arg;
    const moe_context *c = mt->c;
    const moe_mla_desc *d = mt->d;
    const moe_hparams *hp = &c->m->hp;
    const moe_rope *rp = &c->m->ropes[mt->a->rope];
    const size_t D = (size_t)d->kv_lora + (size_t)d->rope_dim;
    int64_t b, e;
    moe_split(c->n_tok, ith, nth, 1, &b, &e);
    for (int64_t t = b; t < e; t++) {
        if (d->q_lora) {
            float *qa = c->blk_tok + (size_t)t * (size_t)d->q_lora;
            moe_rms_norm(qa, d->q_a_norm, qa, d->q_lora, hp->rms_eps);
        }
        float *kv = c->k + (size_t)t * D;
        moe_rms_norm(kv, d->kv_a_norm, kv, d->kv_lora, hp->rms_eps);
        const int pos = c->tok_pos[t];
        moe_rope_apply(kv + d->kv_lora, c->rope_tab[mt->a->rope] + (size_t)pos * (size_t)rp->n_rot, rp->n_rot,
                       rp->adjacent);
        const size_t at = (cache_rows(c, c->tok_seq[t], mt->il) + (size_t)pos) * D;
        if (c->kv_half) c->attn->to_half(kv, (uint16_t *)c->k_cache + at, (int)D);
        else memcpy((float *)c->k_cache + at, kv, D * sizeof(float));
    }
}

/* Phases 3 and 5: heads dealt out cyclically; head h's product over all the
 * step's tokens (rows H apart): Wk_b_h q_nope -> q~'s first C values, or
 * Wv_b_h o -> out. With act_q8 the inputs are quantized here, a row each. */
static void heads_worker(void *arg, int ith, int nth) {
    const mla_task *mt = arg;
    const moe_context *c = mt->c;
    const moe_mla_desc *d = mt->d;
    const int n = c->n_tok, H = mt->a->n_head, Cl = d->kv_lora, D = Cl + d->rope_dim, Dq = d->nope + d->rope_dim;
    const bool k = mt->phase == 0;
    const moe_weight *w = k ? &d->wk_b : &d->wv_b;
    const float *x = k ? mt->q : c->att;                      /* [n][H][Dq] or [n][H][C] */
    const size_t xs = (size_t)H * (size_t)(k ? Dq : Cl), ab = k ? mt->a8_nope : mt->a8_c;
    uint8_t *xa = k ? mt->a8 : mt->a8 + (size_t)n * (size_t)H * mt->a8_nope;
    float *y = k ? c->q : mt->out;                            /* [n][H][D] or [n][H][v] */
    const size_t ys = (size_t)H * (size_t)(k ? D : d->v_dim);
    for (int h = ith; h < H; h += nth) {
        const float *xh = x + (size_t)h * (xs / (size_t)H);
        uint8_t *ah = w->a8 ? xa + (size_t)h * ab : NULL;
        if (ah)
            for (int t = 0; t < n; t++)
                c->kern->quantize_act8(xh + (size_t)t * xs, ah + (size_t)t * (size_t)H * ab, (int)w->n_in);
        moe_matmul_rows(c, w, h, xh, xs, ah, (size_t)H * ab, n, y + (size_t)h * (ys / (size_t)H), ys, 0, w->n_out);
    }
}

/* Phase 4's units: token t and a group of its heads. All heads read the
 * same key rows (one latent row per position), so a group's scores and sums
 * load each key once for the group, not once per head (attn.h: the result
 * per head does not depend on the group). A prompt has a unit per token;
 * a step with few tokens splits the heads so every thread has a unit. */
static int item_groups(int n, int H, int nth) {
    if (n >= 2 * nth) return 1;
    return nth < H ? nth : H;
}

/* Phase 4: units (token t, heads h0 .. h0+G-1), claimed deepest first
 * (moe_next_item). Per (token, head) the arithmetic is that of the item
 * alone. */
static void item_worker(void *arg, int ith, int nth) {
    mla_task *mt = arg;
    moe_context *c = mt->c;
    const moe_mla_desc *d = mt->d;
    const moe_hparams *hp = &c->m->hp;
    const moe_rope *rp = &c->m->ropes[mt->a->rope];
    const moe_attn_kernels *ak = c->attn;
    const int H = mt->a->n_head, Cl = d->kv_lora, D = d->kv_lora + d->rope_dim, Dq = d->nope + d->rope_dim;
    const size_t Cx = c->sc_stride;                                         /* between score rows */
    float *sc = moe_score_rows(c, ith);                                     /* [G][sc_stride] */
    float *sums = c->attn_sum + (size_t)ith * 2 * (size_t)hp->n_head_max;  /* [G] */
    const bool stream = c->n_tok == 1 && moe_flag_on(c->flags, MOE_FLAG_KEY_STREAM);
    const int ng = item_groups(c->n_tok, H, nth), gs = (H + ng - 1) / ng;
    for (int64_t it; (it = moe_next_item(&mt->claimed, (int64_t)c->n_tok * ng)) >= 0;) {
        const int t = (int)(it / ng), h0 = (int)(it % ng) * gs;
        const int G = (h0 + gs < H ? h0 + gs : H) - h0;
        if (G <= 0) continue;
        const int pos = c->tok_pos[t], nk = pos + 1;
        float *qt = c->q + ((size_t)t * H + h0) * (size_t)D;                /* [G][C | rope]: C from phase 3 */
        for (int h = 0; h < G; h++) {
            const float *qn = mt->q + ((size_t)t * H + h0 + h) * (size_t)Dq; /* [nope | rope] */
            float *qr = qt + (size_t)h * D + Cl;
            memcpy(qr, qn + d->nope, (size_t)d->rope_dim * sizeof(float));
            moe_rope_apply(qr, c->rope_tab[mt->a->rope] + (size_t)pos * (size_t)rp->n_rot, rp->n_rot, rp->adjacent);
        }
        const size_t k0 = cache_rows(c, c->tok_seq[t], mt->il) * (size_t)D;   /* keys [nk][D], values their first C */
        float *o = c->att + ((size_t)t * H + h0) * (size_t)Cl;             /* [G][C] */
        const uint16_t *kh = (const uint16_t *)c->k_cache + k0;
        const float *kf = (const float *)c->k_cache + k0;
        if (c->kv_half) ak->scores_h(qt, (size_t)D, G, kh, (size_t)D, nk, D, d->kq_scale, sc, Cx);
        else (stream ? ak->scores_stream : ak->scores)(qt, (size_t)D, G, kf, (size_t)D, nk, D, d->kq_scale, sc, Cx);
        for (int h = 0; h < G; h++) {
            float *r = sc + (size_t)h * Cx;
            ak->exp_shift(r, nk, ak->max_f32(r, nk));
        }
        moe_attn_row_sums(sc, Cx, G, nk, sums);
        if (c->kv_half) ak->accum_h(sc, Cx, G, kh, (size_t)D, nk, Cl, o, (size_t)Cl);
        else (stream ? ak->accum_stream : ak->accum)(sc, Cx, G, kf, (size_t)D, nk, Cl, o, (size_t)Cl);
        for (int h = 0; h < G; h++) {
            const float inv = 1.0f / sums[h];
            for (int i = 0; i < Cl; i++) o[(size_t)h * Cl + i] *= inv;
        }
    }
}

static void mla_run(moe_context *c, const moe_mla_desc *d, const moe_attn_desc *a, int il) {
    const moe_hparams *hp = &c->m->hp;
    const int n = c->n_tok, E = hp->n_embd, H = a->n_head;
    float *qa = c->blk_tok;                                       /* [n][blk_tok]: qa first, then q, out */
    const size_t qa_len = (size_t)d->q_lora, q_len = (size_t)H * (size_t)(d->nope + d->rope_dim);
    const size_t v_len = (size_t)H * (size_t)d->v_dim;
    mla_task mt = {c, d, a, il, c->blk_tok + (size_t)n * qa_len, c->blk_tok + (size_t)n * (qa_len + q_len),
                   (uint8_t *)(c->blk_tok + (size_t)n * (qa_len + q_len + v_len)),
                   (size_t)moe_act8_row_bytes(d->nope), (size_t)moe_act8_row_bytes(d->kv_lora), 0, 0};
    moe_norm_tokens(c, d->norm);                                  /* h = RMSNorm(x) * norm  [n][E] */
    /* qa [n][q_lora] (or q [n][H*(nope+rope)] directly) and [c | kp] [n][C + rope] */
    const moe_weight *ws[2] = {d->q_lora ? &d->wq_a : &d->wq, &d->wkv_a};
    float *ys[2] = {d->q_lora ? qa : mt.q, c->k};
    const uint8_t *xa = moe_act_rows_multi(c, ws, 2, c->xn, n);
    PROF_MARK(c, MOE_PH_ATTN_NORM, 0, 0);
    moe_matmul_multi(c, ws, ys, 2, c->xn, xa, n);
    const bool glue = moe_flag_on(c->flags, MOE_FLAG_PARALLEL_GLUE);
    if (glue && n > 1) moe_ctx_par(c, rows_worker, &mt);          /* phase 2 */
    else rows_worker(&mt, 0, 1);
    if (d->q_lora) moe_matmul(c, &d->wq_b, qa, n, mt.q);          /* q = Wq_b qa */
    PROF_MARK(c, MOE_PH_QKV, (double)ws[0]->mat_bytes + (double)ws[1]->mat_bytes + (d->q_lora ? (double)d->wq_b.mat_bytes : 0), 0);
    mt.phase = 0;
    moe_ctx_par(c, heads_worker, &mt);                            /* phase 3: q~ = Wk_b_h q_nope */
    moe_ctx_par(c, item_worker, &mt);                             /* phase 4 */
    mt.phase = 1;
    moe_ctx_par(c, heads_worker, &mt);                            /* phase 5: out_h = Wv_b_h o */
    double kvb = 0;
    for (int t = 0; t < n; t++) kvb += moe_attn_kv_bytes(c, a, c->tok_pos[t]);
    PROF_MARK(c, MOE_PH_ATTENTION, (double)(d->wk_b.mat_bytes * (size_t)d->wk_b.n_mat + d->wv_b.mat_bytes * (size_t)d->wv_b.n_mat), kvb);
    moe_matmul(c, &d->wo, mt.out, n, c->proj);                    /* proj [n][E] */
    for (size_t i = 0; i < (size_t)n * E; i++) c->x[i] += c->proj[i];
    PROF_MARK(c, MOE_PH_WO, (double)d->wo.mat_bytes, 0);
}

void moe_block_mla(moe_context *c, const moe_mla_desc *d, const moe_attn_desc *a, int il) {
    if (c->diverged) return;
    mla_run(c, d, a, il);
    moe_context *r = c->shadow;
    if (!r) return;
    mla_run(r, d, a, il);
    const size_t N = (size_t)c->n_tok, E = (size_t)c->m->hp.n_embd;
    const size_t qd = (size_t)a->n_head * (size_t)(d->kv_lora + d->rope_dim);
    (void)(moe_diff_check(c, c->q, r->q, N, qd, "mla absorbed query", il) &&
           moe_diff_check(c, c->proj, r->proj, N, E, "mla output projection", il) &&
           moe_diff_check(c, c->x, r->x, N, E, "residual after mla", il));
    PROF_START(c);
}
