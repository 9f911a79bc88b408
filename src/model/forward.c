/* forward.c — the transformer forward pass shared by laguna and qwen3moe.
 *
 * One call processes a chunk of n tokens (n <= n_batch) at positions
 * n_past .. n_past+n-1. Every value a token produces is computed by the same
 * sequence of operations whatever n is, whichever thread computes it and
 * whichever flag set is on: matrix products follow the kernels' dot-product
 * contract (quant.h), attention processes each (token, head) pair alone over
 * its visible keys in increasing position order, and expert outputs are
 * combined in the router's rank order. That is what makes prefill logits equal
 * decode logits bit for bit, for any thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention/attn.h"
#include "base/flags.h"
#include "model/model.h"
#include "base/util.h"

/* ---- parallel helpers --------------------------------------------------------- */

static void par(moe_session *s, moe_task_fn fn, void *ctx) { moe_session_par(s, fn, ctx); }

/* Rows [r0, r1) of Y[t][r] = W_mat . X[t] (+ second-level scale). Weights in
 * the a8 layout (flag act_q8) read the inputs as A8 rows xa (xa_stride bytes
 * apart), every other weight the float rows x. */
void moe_matmul_rows(const moe_session *s, const moe_weight *w, int64_t mat, const float *x, size_t x_stride,
                     const uint8_t *xa, size_t xa_stride, int n, float *y, size_t y_stride, int64_t r0, int64_t r1) {
    if (r0 >= r1) return;
    const moe_kernels *k = s->kern;
    /* x4 data: r0 is a multiple of 8 (every split is 8-aligned) and r1 is a
     * multiple of 8 or the matrix end, as the layout requires */
    const uint8_t *base = w->data + (size_t)mat * w->mat_bytes + (size_t)r0 * w->row_bytes;
    if (w->a8) {
        if (n == 1) k->gemv_a8[w->type](base, w->row_bytes, r1 - r0, xa, y + r0, w->n_in);
        else k->gemm_a8[w->type](base, w->row_bytes, r1 - r0, xa, xa_stride, n, y + r0, y_stride, w->n_in);
    } else if (n == 1) {
        (w->x4 ? k->gemv_x4 : k->gemv)[w->type](base, w->row_bytes, r1 - r0, x, y + r0, w->n_in);
    } else {
        /* gemm_wide: the same values from the level's wide kernel, if it has one */
        moe_gemm_fn g = NULL;
        if (moe_flag_on(s->flags, MOE_FLAG_GEMM_WIDE)) g = (w->x4 ? k->gemm_wide_x4 : k->gemm_wide)[w->type];
        if (!g) g = (w->x4 ? k->gemm_x4 : k->gemm)[w->type];
        g(base, w->row_bytes, r1 - r0, x, x_stride, n, y + r0, y_stride, w->n_in);
    }
    if (w->scale) {
        float sc = w->scale[w->n_scale == 1 ? 0 : mat];
        for (int t = 0; t < n; t++)
            for (int64_t r = r0; r < r1; r++) y[(size_t)t * y_stride + (size_t)r] *= sc;
    }
}

/* ---- act_q8: float rows -> A8 rows (every ISA gives the spec's bytes) ---------- */

typedef struct {
    const moe_kernels *k;    /* its quantize_act8: the spec's bytes at this ISA */
    const float *x;
    size_t xs;               /* floats between input rows */
    int rows, n;
    uint8_t *dst;            /* rows moe_act8_row_bytes(n) apart */
} q8_task;

static void q8_worker(void *ctx, int ith, int nth) {
    const q8_task *t = ctx;
    int64_t b, e;
    moe_split(t->rows, ith, nth, 1, &b, &e);
    const size_t ds = (size_t)moe_act8_row_bytes(t->n);
    for (int64_t r = b; r < e; r++) t->k->quantize_act8(t->x + (size_t)r * t->xs, t->dst + (size_t)r * ds, t->n);
}

/* Quantizes rows when weight w reads A8 rows; returns dst, or NULL when w
 * reads floats. One row (decode) is done here; more are spread over the pool. */
static const uint8_t *act_rows(moe_session *s, const moe_weight *w, const float *x, size_t xs, int rows,
                               uint8_t *dst) {
    if (!w->a8) return NULL;
    q8_task t = {s->kern, x, xs, rows, (int)w->n_in, dst};
    if (rows == 1 || s->n_threads == 1) q8_worker(&t, 0, 1);
    else moe_pool_run(s->pool, q8_worker, &t);
    return dst;
}

typedef struct {
    moe_session *s;
    const moe_weight *w;
    int64_t mat;
    const float *x;
    const uint8_t *xa;
    int n;
    float *y;
} mm_task;

static void mm_worker(void *ctx, int ith, int nth) {
    mm_task *t = ctx;
    int64_t r0, r1;
    moe_split(t->w->n_out, ith, nth, 8, &r0, &r1);
    moe_matmul_rows(t->s, t->w, t->mat, t->x, (size_t)t->w->n_in, t->xa, (size_t)moe_act8_row_bytes(t->w->n_in),
                    t->n, t->y, (size_t)t->w->n_out, r0, r1);
}

/* Y[n][n_out] = X[n][n_in] W^T */
static void matmul(moe_session *s, const moe_weight *w, const float *x, int n, float *y) {
    mm_task t = {s, w, 0, x, act_rows(s, w, x, (size_t)w->n_in, n, s->xa), n, y};
    par(s, mm_worker, &t);
}

/* Several products of the same input in one parallel phase (Q, K, V and the
 * gate): the combined row space is split, so one barrier instead of four. */
typedef struct {
    moe_session *s;
    int count, n;
    const moe_weight *const *w;
    float *const *y;
    const float *x;
    const uint8_t *xa;       /* the input as A8 rows, when some w[i] is a8 */
} mm_multi_task;

static void mm_multi_worker(void *ctx, int ith, int nth) {
    mm_multi_task *t = ctx;
    int64_t total = 0;                       /* each matrix starts 8-aligned */
    for (int i = 0; i < t->count; i++) total += (t->w[i]->n_out + 7) & ~(int64_t)7;
    int64_t b, e;
    moe_split(total, ith, nth, 8, &b, &e);
    int64_t base = 0;
    for (int i = 0; i < t->count && b < e; i++) {
        const moe_weight *w = t->w[i];
        int64_t r0 = b - base, r1 = e - base;
        if (r0 < w->n_out && r1 > 0) {
            if (r0 < 0) r0 = 0;
            if (r1 > w->n_out) r1 = w->n_out;
            moe_matmul_rows(t->s, w, 0, t->x, (size_t)w->n_in, t->xa, (size_t)moe_act8_row_bytes(w->n_in), t->n,
                            t->y[i], (size_t)w->n_out, r0, r1);
        }
        base += (w->n_out + 7) & ~(int64_t)7;
    }
}

/* w[i] all have the same n_in; xa: x as A8 rows when some w[i] is a8 (see
 * act_rows_multi), else NULL */
static void matmul_multi(moe_session *s, const moe_weight *const *w, float *const *y, int count, const float *x,
                         const uint8_t *xa, int n) {
    mm_multi_task t = {s, count, n, w, y, x, xa};
    par(s, mm_multi_worker, &t);
}

/* The input of matmul_multi as A8 rows, quantized once when some w[i] reads
 * them; NULL when all read floats. A step of its own so that the profile
 * charges it to attn_norm (preparing the input) and qkv is the products alone. */
static const uint8_t *act_rows_multi(moe_session *s, const moe_weight *const *w, int count, const float *x, int n) {
    const uint8_t *xa = NULL;
    for (int i = 0; i < count && !xa; i++) xa = act_rows(s, w[i], x, (size_t)w[i]->n_in, n, s->xa);
    return xa;
}

/* Profile helpers: weight bytes of a set of matrices streamed once, and the
 * KV-cache bytes attention reads (keys and values of every visible position
 * of each (token, KV head) item). Called only when the profile is on. */
static double mats_bytes(const moe_weight *const *w, int count) {
    double b = 0;
    for (int i = 0; i < count; i++) b += (double)w[i]->mat_bytes;
    return b;
}

/* KV-cache bytes layer L's attention reads for tokens at positions pos ..
 * pos+n-1: keys and values of every visible position, every KV head. */
static double kv_bytes_span(const moe_session *s, const moe_layer *L, int pos, int n) {
    const moe_hparams *hp = &s->m->hp;
    double keys = 0;
    for (int t = 0; t < n; t++) {
        const int p = pos + t;
        int j0 = L->swa ? p - hp->swa_window + 1 : 0;
        if (j0 < 0) j0 = 0;
        keys += p - j0 + 1;
    }
    const double elem = s->kv_q8 ? 34.0 / 32.0 : s->kv_half ? 2.0 : 4.0;   /* kv_q8: a code + a half per 32 */
    return keys * hp->n_head_kv * (double)(hp->head_dim + hp->head_dim_v) * elem;
}

static double attn_kv_bytes(const moe_session *s, const moe_layer *L, int n) { return kv_bytes_span(s, L, s->n_past, n); }

double moe_session_kv_bytes_at(const moe_session *s, int pos) {
    if (!s || pos < 0) return 0;
    double b = 0;
    for (int il = 0; il < s->m->hp.n_layer; il++) b += kv_bytes_span(s, &s->m->layers[il], pos, 1);
    return b;
}

/* ---- elementwise operations (scalar; their order is fixed) ------------------------ */

/* y = x * (1/sqrt(mean + eps)) * w, mean = sum / n in float: the second half
 * of ggml's RMS norm, given the row's sum of squares. */
static void rms_apply(const float *x, const float *w, float *y, int n, double sum, float eps) {
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    if (w)
        for (int i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else
        for (int i = 0; i < n; i++) y[i] = x[i] * scale;
}

/* ggml's RMS norm: sum of squares in double, scale = 1/sqrt(mean + eps) in float. */
static void rms_norm(const float *x, const float *w, float *y, int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    rms_apply(x, w, y, n, sum, eps);
}

/* rms_norm in place on `count` rows of n values, `stride` floats apart (the
 * query heads of a KV head): the same operations per row, the sequential
 * double sums of up to four rows interleaved so that each add does not wait
 * on the one before it (a 128-value sum is ~4 cycles per value alone). */
static void rms_norm_rows(float *x, const float *w, int n, int count, size_t stride, float eps) {
    int r = 0;
    for (; r + 4 <= count; r += 4) {
        float *x0 = x + (size_t)r * stride, *x1 = x0 + stride, *x2 = x1 + stride, *x3 = x2 + stride;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        for (int i = 0; i < n; i++) {
            s0 += (double)(x0[i] * x0[i]);
            s1 += (double)(x1[i] * x1[i]);
            s2 += (double)(x2[i] * x2[i]);
            s3 += (double)(x3[i] * x3[i]);
        }
        rms_apply(x0, w, x0, n, s0, eps);
        rms_apply(x1, w, x1, n, s1, eps);
        rms_apply(x2, w, x2, n, s2, eps);
        rms_apply(x3, w, x3, n, s3, eps);
    }
    for (; r < count; r++) rms_norm(x + (size_t)r * stride, w, x + (size_t)r * stride, n, eps);
}

/* xn[t] = RMSNorm(x[t]) * w for t < n: a prompt's rows spread over the pool
 * with parallel_glue (one sequential double sum per row, ~1 us: 1.6 % of a
 * laguna prompt on the calling thread alone). */
typedef struct {
    moe_session *s;
    const float *w;
    int n;
} norm_task;

static void norm_worker(void *ctx, int ith, int nth) {
    const norm_task *nt = ctx;
    const size_t E = (size_t)nt->s->m->hp.n_embd;
    int64_t b, e;
    moe_split(nt->n, ith, nth, 1, &b, &e);
    for (int64_t t = b; t < e; t++)
        rms_norm(nt->s->x + (size_t)t * E, nt->w, nt->s->xn + (size_t)t * E, (int)E, nt->s->m->hp.rms_eps);
}

static void norm_rows(moe_session *s, const float *w, int n) {
    norm_task nt = {s, w, n};
    if (n > 1 && moe_flag_on(s->flags, MOE_FLAG_PARALLEL_GLUE)) par(s, norm_worker, &nt);
    else norm_worker(&nt, 0, 1);
}

static inline float softplus(float x) { return x > 20.0f ? x : log1pf(moe_expf(x)); }
static inline float sigmoid(float x) { return 1.0f / (1.0f + moe_expf(-x)); }

/* NEOX rotation of the first n_rot dims with a precomputed (cos, sin) row. */
static void rope_apply(float *x, const float *cs, int n_rot) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float c = cs[2 * i], sn = cs[2 * i + 1];
        float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * sn;
        x[i + half] = x0 * sn + x1 * c;
    }
}

/* ---- attention ------------------------------------------------------------------- */

typedef struct {
    moe_session *s;
    int il, n;
    bool prep;               /* decode with parallel_glue: each item first runs attn_prep */
    bool gate;               /* parallel_glue: each item applies the output gate to its heads */
} attn_task;

/* att *= softplus(gate) for token t, query heads h0 .. h1-1 (layers with an
 * attention output gate) */
static void attn_gate(moe_session *s, const moe_layer *L, int t, int h0, int h1) {
    if (!L->has_gate) return;
    const int H = L->n_head, Dv = s->m->hp.head_dim_v;
    for (int h = h0; h < h1; h++) {
        float *o = s->att + ((size_t)t * H + h) * Dv;
        if (L->gate_per_elem) {
            const float *gp = s->gate + ((size_t)t * H + h) * Dv;
            for (int d = 0; d < Dv; d++) o[d] *= softplus(gp[d]);
        } else {
            float gv = softplus(s->gate[(size_t)t * H + h]);
            for (int d = 0; d < Dv; d++) o[d] *= gv;
        }
    }
}

/* Token t, KV head g: QK-norm and RoPE of the query heads g*G .. g*G+G-1 and
 * of key head g, then key and value row g stored in the cache at position
 * n_past + t. Items touch disjoint data, so they may run on any thread. */
static void attn_prep(moe_session *s, const moe_layer *L, int il, int t, int g, int ith) {
    const moe_hparams *hp = &s->m->hp;
    const int H = L->n_head, Hkv = hp->n_head_kv, D = hp->head_dim, Dv = hp->head_dim_v, G = H / Hkv;
    const moe_rope *rp = L->rope;
    const int pos = s->n_past + t;
    const float *cs = (L->swa ? s->rope_swa : s->rope_full) + (size_t)pos * (size_t)rp->n_rot;
    float *qg = s->q + ((size_t)t * H + (size_t)g * G) * D;      /* the group's G query heads */
    if (L->q_norm) rms_norm_rows(qg, L->q_norm, D, G, (size_t)D, hp->rms_eps);
    for (int h = 0; h < G; h++) rope_apply(qg + (size_t)h * D, cs, rp->n_rot);
    float *k = s->k + ((size_t)t * Hkv + g) * D;
    if (L->k_norm) rms_norm(k, L->k_norm, k, D, hp->rms_eps);
    rope_apply(k, cs, rp->n_rot);
    const float *v = s->v + ((size_t)t * Hkv + g) * Dv;
    if (s->kv_q8) {                                               /* kv_q8: 8-bit blocks (attn.h) */
        const size_t Cp = (size_t)s->ctx_pad, lg = (size_t)il * Hkv + (size_t)g;
        uint8_t *tmp = s->kv_a8 + (size_t)ith * s->a8_row;
        s->kern->quantize_act8(k, tmp, D);
        moe_kv8_store_key(tmp, D, (int8_t *)s->k_cache + lg * Cp * (size_t)D, s->k_scale + lg * (size_t)(D / 32) * Cp, Cp, pos);
        s->kern->quantize_act8(v, tmp, Dv);
        moe_kv8_store_value(tmp, Dv, (int8_t *)s->v_cache + lg * Cp * (size_t)Dv, s->v_scale + lg * (size_t)(Dv / 32) * Cp,
                            Cp, pos);
        return;
    }
    const size_t C = (size_t)s->n_ctx;                            /* cache [layer][Hkv][n_ctx][D] */
    const size_t kp = ((size_t)il * Hkv * C + (size_t)g * C + (size_t)pos) * (size_t)D;
    const size_t vp = ((size_t)il * Hkv * C + (size_t)g * C + (size_t)pos) * (size_t)Dv;
    if (s->kv_half) {                                             /* kv_f16: round to nearest even */
        s->attn->to_half(k, (uint16_t *)s->k_cache + kp, D);
        s->attn->to_half(v, (uint16_t *)s->v_cache + vp, Dv);
    } else {
        memcpy((float *)s->k_cache + kp, k, (size_t)D * sizeof(float));
        memcpy((float *)s->v_cache + vp, v, (size_t)Dv * sizeof(float));
    }
}

/* kv_q8 (attn.h): one item's scores, softmax and weighted sum. The query
 * heads are quantized to A8 rows, the scores go to sc[h][j] at the key's
 * absolute position j, the softmax is the FP32 one over j0 .. j0+nk-1.
 * stream: a decode step (one token), whose keys and values come from memory. */
static void attn_item_q8(moe_session *s, int il, int g, int G, const float *q, int j0, int nk, float kq_scale,
                         int ith, bool stream, float *sc, float *sums, float *o) {
    const moe_hparams *hp = &s->m->hp;
    const int D = hp->head_dim, Dv = hp->head_dim_v;
    const size_t C = (size_t)s->n_ctx, Cp = (size_t)s->ctx_pad, lg = (size_t)il * (size_t)hp->n_head_kv + (size_t)g;
    uint8_t *qa = s->q_a8 + (size_t)ith * (size_t)hp->n_head_max * s->a8_row;
    for (int h = 0; h < G; h++) s->kern->quantize_act8(q + (size_t)h * D, qa + (size_t)h * s->a8_row, D);
    s->attn->scores_q8(qa, s->a8_row, G, (const int8_t *)s->k_cache + lg * Cp * (size_t)D,
                       s->k_scale + lg * (size_t)(D / 32) * Cp, Cp, j0, nk, D, kq_scale, sc, C);
    for (int h = 0; h < G; h++) sums[h] = s->attn->softmax_q8(sc + (size_t)h * C + (size_t)j0, nk);
    float *w = s->attn_w + (size_t)ith * (size_t)hp->n_head_max * (size_t)(Dv / 32) * C;
    /* value_prefetch: a decode step's values come from memory (attn.h) */
    const bool pf = stream && moe_flag_on(s->flags, MOE_FLAG_VALUE_PREFETCH);
    (pf ? s->attn->accum_q8_stream : s->attn->accum_q8)(sc, C, G, (const int8_t *)s->v_cache + lg * Cp * (size_t)Dv,
                                                        s->v_scale + lg * (size_t)(Dv / 32) * Cp, Cp, j0, nk, Dv, w, o,
                                                        (size_t)Dv);
    for (int h = 0; h < G; h++) {
        const float inv = 1.0f / sums[h];
        for (int d = 0; d < Dv; d++) o[(size_t)h * Dv + d] *= inv;
    }
}

static void prep_worker(void *ctx, int ith, int nth) {
    attn_task *at = ctx;
    const int Hkv = at->s->m->hp.n_head_kv;
    const moe_layer *L = &at->s->m->layers[at->il];
    for (int64_t it = ith; it < (int64_t)at->n * Hkv; it += nth) attn_prep(at->s, L, at->il, (int)(it / Hkv), (int)(it % Hkv), ith);
}

/* One item = (token t, KV head g) with the G query heads that share it:
 * scores over the visible keys j0..pos in position order, softmax per head,
 * weighted sum of values. Items are independent, so any split over threads
 * and any chunking of the prompt gives the same bits. */
static void attn_worker(void *ctx, int ith, int nth) {
    attn_task *at = ctx;
    moe_session *s = at->s;
    const moe_model *m = s->m;
    const moe_hparams *hp = &m->hp;
    const moe_layer *L = &m->layers[at->il];
    const int H = L->n_head, Hkv = hp->n_head_kv, D = hp->head_dim, Dv = hp->head_dim_v;
    const int G = H / Hkv;
    /* cache layout [layer][kv head][position][dim]: the keys of one KV head are contiguous */
    const size_t koff = (size_t)at->il * (size_t)Hkv * (size_t)s->n_ctx * (size_t)D;
    const size_t voff = (size_t)at->il * (size_t)Hkv * (size_t)s->n_ctx * (size_t)Dv;
    const float kq_scale = 1.0f / sqrtf((float)D);
    const size_t C = (size_t)s->n_ctx;
    float *sc = s->scores + (size_t)ith * (size_t)hp->n_head_max * C;  /* [G][n_ctx] */
    float *sums = s->attn_sum + (size_t)ith * (size_t)hp->n_head_max;   /* [G] */
    /* key_stream: a decode step's keys and values come from memory, so the
     * FP32 cache is read by the kernels ordered for that (attn.h) */
    const moe_attn_kernels *ak = s->attn;
    const bool stream = at->n == 1 && moe_flag_on(s->flags, MOE_FLAG_KEY_STREAM);
    void (*const scores_f32)(const float *, size_t, int, const float *, size_t, int, int, float, float *, size_t) =
        stream ? ak->scores_stream : ak->scores;
    void (*const accum_f32)(const float *, size_t, int, const float *, size_t, int, int, float *, size_t) =
        stream ? ak->accum_stream : ak->accum;
    /* Items are dealt out cyclically: in a prompt, later tokens see more keys,
     * so contiguous shares would leave the last thread with most of the work.
     * Which thread runs an item never changes its result. */
    for (int64_t it = ith; it < (int64_t)at->n * Hkv; it += nth) {
        int t = (int)(it / Hkv), g = (int)(it % Hkv);
        if (at->prep) attn_prep(s, L, at->il, t, g, ith);     /* its own KV head's new row, before reading it */
        int pos = s->n_past + t;
        int j0 = L->swa ? pos - hp->swa_window + 1 : 0;
        if (j0 < 0) j0 = 0;
        const int nk = pos - j0 + 1;
        const float *q = s->q + ((size_t)t * H + (size_t)g * G) * D;      /* heads g*G .. g*G+G-1 */
        float *o = s->att + ((size_t)t * H + (size_t)g * G) * Dv;
        if (s->kv_q8) {                           /* the same steps on 8-bit blocks, keys indexed absolutely */
            attn_item_q8(s, at->il, g, G, q, j0, nk, kq_scale, ith, at->n == 1, sc, sums, o);
            if (at->gate) attn_gate(s, L, t, g * G, (g + 1) * G);
            continue;
        }
        const size_t kg = koff + ((size_t)g * C + (size_t)j0) * (size_t)D;   /* keys [nk][D] */
        const size_t vg = voff + ((size_t)g * C + (size_t)j0) * (size_t)Dv;  /* values [nk][Dv] */
        if (s->kv_half) s->attn->scores_h(q, (size_t)D, G, (const uint16_t *)s->k_cache + kg, (size_t)D, nk, D, kq_scale, sc, C);
        else scores_f32(q, (size_t)D, G, (const float *)s->k_cache + kg, (size_t)D, nk, D, kq_scale, sc, C);
        for (int h = 0; h < G; h++) {                                     /* softmax numerators per head */
            float *r = sc + (size_t)h * C;
            s->attn->exp_shift(r, nk, s->attn->max_f32(r, nk));          /* r[j] = exp(r[j] - max) */
        }
        moe_attn_row_sums(sc, C, G, nk, sums);                            /* denominators, in key order */
        if (s->kv_half) s->attn->accum_h(sc, C, G, (const uint16_t *)s->v_cache + vg, (size_t)Dv, nk, Dv, o, (size_t)Dv);
        else accum_f32(sc, C, G, (const float *)s->v_cache + vg, (size_t)Dv, nk, Dv, o, (size_t)Dv);
        for (int h = 0; h < G; h++) {
            float inv = 1.0f / sums[h];
            for (int d = 0; d < Dv; d++) o[(size_t)h * Dv + d] *= inv;
        }
        if (at->gate) attn_gate(s, L, t, g * G, (g + 1) * G);
    }
}

static void attention_block(moe_session *s, int il, int n) {
    const moe_model *m = s->m;
    const moe_hparams *hp = &m->hp;
    const moe_layer *L = &m->layers[il];
    const int E = hp->n_embd;

    norm_rows(s, L->attn_norm, n);                                /* h = RMSNorm(x) * attn_norm  [n][E] */
    /* q [n][H][D], k [n][Hkv][D], v [n][Hkv][Dv], gate [n][H] or [n][H*Dv] */
    const moe_weight *ws[4] = {&L->wq, &L->wk, &L->wv, &L->wgate};
    float *ys[4] = {s->q, s->k, s->v, s->gate};
    const int nw = L->has_gate ? 4 : 3;
    const uint8_t *xa = act_rows_multi(s, ws, nw, s->xn, n);
    PROF_MARK(s, MOE_PH_ATTN_NORM, 0, 0);
    matmul_multi(s, ws, ys, nw, s->xn, xa, n);
    PROF_MARK(s, MOE_PH_QKV, mats_bytes(ws, nw), 0);

    /* QK-norm, RoPE and the cache store: per (token, KV head) item; with
     * parallel_glue inside the attention phase (decode: an item reads only its
     * own KV head) or as a phase of its own (prefill: a token reads the keys
     * other items store), otherwise here in item order */
    const bool glue = moe_flag_on(s->flags, MOE_FLAG_PARALLEL_GLUE);
    attn_task at = {s, il, n, glue && n == 1, glue};
    if (!glue || n > 1) {                                         /* prep not inside the attention phase */
        if (glue) par(s, prep_worker, &at);
        else prep_worker(&at, 0, 1);
        PROF_MARK(s, MOE_PH_ATTN_PREP, 0, 0);
    }
    par(s, attn_worker, &at);                                     /* att [n][H][Dv] */
    if (!glue)                                                    /* the output gate, here in order */
        for (int t = 0; t < n; t++) attn_gate(s, L, t, 0, L->n_head);
    PROF_MARK(s, MOE_PH_ATTENTION, 0, attn_kv_bytes(s, L, n));
    matmul(s, &L->wo, s->att, n, s->proj);                        /* proj [n][E] */
    for (size_t i = 0; i < (size_t)n * E; i++) s->x[i] += s->proj[i];
    PROF_MARK(s, MOE_PH_WO, (double)L->wo.mat_bytes, 0);
}

/* ---- feed-forward ------------------------------------------------------------------- */

/* SwiGLU jobs: out[row] = Wd (silu(Wg x[row]) * Wu x[row]) for the rows of
 * one job (a routed expert with its gathered tokens, the shared expert over
 * all tokens, or the dense FFN). All jobs of a layer run in the same two
 * parallel phases, so the shared expert is scheduled together with the routed
 * ones and each thread gets an equal, contiguous share of the rows. */
typedef struct {
    moe_session *s;
    const moe_ffn_job *jobs;
    int n_jobs;
    int phase;               /* 0: gate+up with SiLU fused, 1: gate, 2: up, 3: SiLU, 4: down */
    const int64_t *pre;      /* prefix sums of the rows of this phase (each padded to 8), [n_jobs + 1] */
    const int64_t *work;     /* prefix sums of rows x tokens, [n_jobs + 1] */
} jobs_task;

/* ffn_out[t] = sum over ranks k of eout[slot(t, k)] * w[t][k] (+ the shared
 * expert's proj[t]), then x[t] += ffn_out[t]: the router's rank order for
 * every element (the combine kernel, attn.h: the same bits at every ISA). */
static void combine_token(moe_session *s, const moe_layer *L, int t) {
    const size_t E = (size_t)s->m->hp.n_embd;
    const int K = s->m->hp.n_expert_used;
    s->attn->combine(s->eout, s->ex_slot + (size_t)t * K, s->selw + (size_t)t * K, K,
                     L->has_shexp ? s->proj + (size_t)t * E : NULL, s->ffn_out + (size_t)t * E, s->x + (size_t)t * E,
                     (int)E);
}

typedef struct {
    moe_session *s;
    const moe_layer *L;
    int n;
} combine_task;

static void combine_worker(void *ctx, int ith, int nth) {
    const combine_task *c = ctx;
    int64_t b, e;
    moe_split(c->n, ith, nth, 1, &b, &e);
    for (int64_t t = b; t < e; t++) combine_token(c->s, c->L, (int)t);
}

static void jobs_worker(void *ctx, int ith, int nth) {
    jobs_task *jt = ctx;
    /* Each thread gets an equal share of the work (rows x tokens), cut on
     * 8-row boundaries: in a prompt chunk one expert may have 100 tokens and
     * the next one, so equal row counts would be badly unbalanced. */
    const int64_t total = jt->work[jt->n_jobs];
    const int64_t w0 = total * ith / nth, w1 = total * (ith + 1) / nth;
    for (int ji = 0; ji < jt->n_jobs; ji++) {
        const moe_ffn_job *j = &jt->jobs[ji];
        const int64_t rows = jt->pre[ji + 1] - jt->pre[ji];      /* padded to 8 */
        /* rows of this job whose work starts in [w0, w1), in units of 8 rows */
        const int64_t unit = 8 * (int64_t)j->nr, jw = jt->work[ji];
        if (jw >= w1 || jw + rows * j->nr <= w0) continue;
        int64_t u0 = w0 > jw ? (w0 - jw + unit - 1) / unit : 0;
        int64_t u1 = w1 > jw ? (w1 - jw + unit - 1) / unit : 0;
        if (ith == nth - 1) u1 = rows / 8;
        int64_t r0 = u0 * 8, r1 = u1 * 8;
        if (r1 > rows) r1 = rows;
        const size_t F = (size_t)j->wg->n_out, En = (size_t)j->wg->n_in;
        const int ph = jt->phase;
        const int64_t real = ph == 4 ? j->wd->n_out : j->wg->n_out;
        if (r1 > real) r1 = real;                    /* padding rows do not exist */
        if (r0 >= r1) continue;
        const size_t aEn = (size_t)moe_act8_row_bytes((int64_t)En), aF = (size_t)moe_act8_row_bytes((int64_t)F);
        if (ph == 0 || ph == 1) moe_matmul_rows(jt->s, j->wg, j->mat, j->x, En, j->xa, aEn, j->nr, j->hg, F, r0, r1);
        if (ph == 0 || ph == 2) moe_matmul_rows(jt->s, j->wu, j->mat, j->x, En, j->xa, aEn, j->nr, j->hu, F, r0, r1);
        if (ph == 0 || ph == 3)
            for (int t = 0; t < j->nr; t++)
                jt->s->attn->silu_mul(j->hg + (size_t)t * F + (size_t)r0, j->hu + (size_t)t * F + (size_t)r0, r1 - r0);
        if (ph == 4) moe_matmul_rows(jt->s, j->wd, j->mat, j->hg, F, j->ha, aF, j->nr, j->out, (size_t)j->wd->n_out, r0, r1);
    }
}

/* act_q8: the hidden rows of all jobs (hg after SiLU*up) quantized for the
 * down projections; rows numbered across jobs, split evenly over threads. */
typedef struct {
    const moe_kernels *k;
    const moe_ffn_job *jobs;
    int n_jobs, rows;
} hidden_q8_task;

static void hidden_q8_worker(void *ctx, int ith, int nth) {
    const hidden_q8_task *t = ctx;
    int64_t b, e, r = 0;
    moe_split(t->rows, ith, nth, 1, &b, &e);
    for (int i = 0; i < t->n_jobs && r < e; i++) {
        const moe_ffn_job *j = &t->jobs[i];
        if (!j->wd->a8) { r += j->nr; continue; }
        const int64_t F = j->wd->n_in;
        const size_t aF = (size_t)moe_act8_row_bytes(F);
        for (int q = 0; q < j->nr; q++, r++)
            if (r >= b && r < e) t->k->quantize_act8(j->hg + (size_t)q * (size_t)F, j->ha + (size_t)q * aF, F);
    }
}

/* Weight bytes the jobs' gate+up (down: the down) matrices stream, for the profile. */
static double jobs_bytes(const moe_ffn_job *jobs, int n_jobs, bool down) {
    double b = 0;
    for (int i = 0; i < n_jobs; i++)
        b += down ? (double)jobs[i].wd->mat_bytes : (double)jobs[i].wg->mat_bytes + (double)jobs[i].wu->mat_bytes;
    return b;
}

/* prof: mark the gate_up / hidden_q8 / down phases (MoE layers; a dense
 * layer's jobs are profiled as one dense_ffn entry by the caller). */
static void run_ffn_jobs(moe_session *s, const moe_ffn_job *jobs, int n_jobs, bool prof) {
    int64_t *pre = s->job_pre, *work = s->job_pre + (n_jobs + 1);
    jobs_task jt = {s, jobs, n_jobs, 0, pre, work};
    pre[0] = work[0] = 0;
    /* rows padded to 8 (thread cuts fall on 8-row boundaries, as the x4 layout needs) */
    for (int i = 0; i < n_jobs; i++) {
        pre[i + 1] = pre[i] + ((jobs[i].wg->n_out + 7) & ~(int64_t)7);
        work[i + 1] = work[i] + (pre[i + 1] - pre[i]) * jobs[i].nr;
    }
    if (moe_flag_on(s->flags, MOE_FLAG_FUSED_GATE_UP)) {
        par(s, jobs_worker, &jt);
    } else {
        for (jt.phase = 1; jt.phase <= 3; jt.phase++) par(s, jobs_worker, &jt);
    }
    if (prof) PROF_MARK(s, MOE_PH_GATE_UP, jobs_bytes(jobs, n_jobs, false), 0);
    bool any_a8 = false;
    for (int i = 0; i < n_jobs; i++) any_a8 |= jobs[i].wd->a8;
    if (any_a8) {                                    /* act_q8: hidden rows -> A8, in parallel */
        hidden_q8_task hq = {s->kern, jobs, n_jobs, 0};
        for (int i = 0; i < n_jobs; i++) hq.rows += jobs[i].nr;
        if (hq.rows == 1 || s->n_threads == 1) hidden_q8_worker(&hq, 0, 1);
        else moe_pool_run(s->pool, hidden_q8_worker, &hq);
        if (prof) PROF_MARK(s, MOE_PH_HIDDEN_Q8, 0, 0);
    }
    for (int i = 0; i < n_jobs; i++) {
        pre[i + 1] = pre[i] + ((jobs[i].wd->n_out + 7) & ~(int64_t)7);
        work[i + 1] = work[i] + (pre[i + 1] - pre[i]) * jobs[i].nr;
    }
    jt.phase = 4;
    par(s, jobs_worker, &jt);
    if (prof) PROF_MARK(s, MOE_PH_DOWN, jobs_bytes(jobs, n_jobs, true), 0);
}

/* Router: chooses experts and weights for token t (rank order = descending score). */
static void route_token(const moe_session *s, const moe_layer *L, int t, bool perturb) {
    const moe_hparams *hp = &s->m->hp;
    const int NE = hp->n_expert, K = hp->n_expert_used;
    float *lg = s->router + (size_t)t * NE;                      /* logits -> probabilities in place */
    if (hp->gating_func == 2) {
        for (int e = 0; e < NE; e++) lg[e] = sigmoid(lg[e]);
    } else {                                                      /* ggml soft_max: double sum */
        float mx = -INFINITY;
        for (int e = 0; e < NE; e++) if (lg[e] > mx) mx = lg[e];
        double sum = 0.0;
        for (int e = 0; e < NE; e++) { lg[e] = moe_expf(lg[e] - mx); sum += (double)lg[e]; }
        float inv = (float)(1.0 / sum);
        for (int e = 0; e < NE; e++) lg[e] *= inv;
    }
    int32_t *sel = s->sel + (size_t)t * K;
    float *w = s->selw + (size_t)t * K;
    uint64_t taken[64] = {0};                                     /* n_expert <= 4096 */
    for (int k = 0; k < K; k++) {                                 /* top-k on p + bias, ties -> lowest id */
        int best = -1;
        float bv = -INFINITY;
        for (int e = 0; e < NE; e++) {
            if ((taken[e >> 6] >> (e & 63)) & 1) continue;
            float v = L->exp_bias ? lg[e] + L->exp_bias[e] : lg[e];
            if (best < 0 || v > bv) { best = e; bv = v; }
        }
        taken[best >> 6] |= 1ull << (best & 63);
        sel[k] = best;
        w[k] = lg[best];
    }
    if (hp->expert_weights_norm) {
        double sum = 0.0;
        for (int k = 0; k < K; k++) sum += (double)w[k];
        float fs = (float)sum;
        if (fs < 6.103515625e-5f) fs = 6.103515625e-5f;
        for (int k = 0; k < K; k++) w[k] /= fs;
    }
    if (hp->expert_weights_scale != 1.0f)
        for (int k = 0; k < K; k++) w[k] *= hp->expert_weights_scale;
    if (perturb)                                                  /* TEST ONLY: reversed weighting */
        for (int k = 0; k < K / 2; k++) { float tmp = w[k]; w[k] = w[K - 1 - k]; w[K - 1 - k] = tmp; }
}

/* Routing of a prompt's tokens, spread over the pool (each token's choice
 * is its own: ~3 us of sigmoids and top-k per token, 2 % of a laguna prompt
 * on one thread). */
typedef struct {
    moe_session *s;
    const moe_layer *L;
    int n;
    bool perturb;
} route_task;

static void route_worker(void *ctx, int ith, int nth) {
    const route_task *rt = ctx;
    int64_t b, e;
    moe_split(rt->n, ith, nth, 1, &b, &e);
    for (int64_t t = b; t < e; t++) route_token(rt->s, rt->L, (int)t, rt->perturb && rt->s->n_past + t >= 20);
}

/* Gathered rows [r0, r1): row r gets token gather_src[r]'s normed row (and
 * its A8 row, when xa), unless it is -1 (the row is read in place). */
typedef struct {
    moe_session *s;
    const uint8_t *xa;
    int r0, r1;
} gather_task;

static void gather_worker(void *ctx, int ith, int nth) {
    const gather_task *g = ctx;
    moe_session *s = g->s;
    const size_t E = (size_t)s->m->hp.n_embd, aE = (size_t)moe_act8_row_bytes((int64_t)E);
    int64_t b, e;
    moe_split(g->r1 - g->r0, ith, nth, 1, &b, &e);
    for (int64_t r = g->r0 + b; r < g->r0 + e; r++) {
        const int t = s->gather_src[r];
        if (t < 0) continue;
        memcpy(s->xg + (size_t)r * E, s->xn + (size_t)t * E, E * sizeof(float));
        if (g->xa) memcpy(s->xga + (size_t)r * aE, g->xa + (size_t)t * aE, aE);
    }
}

static void ffn_block(moe_session *s, int il, int n) {
    const moe_model *m = s->m;
    const moe_hparams *hp = &m->hp;
    const moe_layer *L = &m->layers[il];
    const int E = hp->n_embd;
    norm_rows(s, L->ffn_norm, n);                                 /* h = RMSNorm(x) * ffn_norm  [n][E] */
    moe_ffn_job *jobs = s->jobs;

    if (L->dense) {                                               /* dense SwiGLU over all n tokens */
        const uint8_t *xa = act_rows(s, &L->ffn_gate, s->xn, (size_t)E, n, s->xa);
        if (!xa) xa = act_rows(s, &L->ffn_up, s->xn, (size_t)E, n, s->xa);
        jobs[0] = (moe_ffn_job){.wg = &L->ffn_gate, .wu = &L->ffn_up, .wd = &L->ffn_down, .mat = 0, .x = s->xn,
                                .xa = xa, .nr = n, .ha = s->ha, .hg = s->hg, .hu = s->hu, .out = s->ffn_out};
        PROF_MARK(s, MOE_PH_FFN_NORM, 0, 0);
        run_ffn_jobs(s, jobs, 1, false);
        for (size_t i = 0; i < (size_t)n * E; i++) s->x[i] += s->ffn_out[i];
        PROF_MARK(s, MOE_PH_DENSE_FFN, jobs_bytes(jobs, 1, false) + jobs_bytes(jobs, 1, true), 0);
        return;
    }
    PROF_MARK(s, MOE_PH_FFN_NORM, 0, 0);
    const int NE = hp->n_expert, K = hp->n_expert_used;
    const size_t Fx = (size_t)hp->n_ff_exp;
    matmul(s, &L->router, s->xn, n, s->router);                   /* router logits [n][NE] */
    PROF_MARK(s, MOE_PH_ROUTER, (double)L->router.mat_bytes, 0);
    const bool glue = moe_flag_on(s->flags, MOE_FLAG_PARALLEL_GLUE);
    route_task rt = {s, L, n, moe_flag_on(s->flags, MOE_FLAG_TEST_PERTURB) && il == hp->n_layer - 1};
    if (glue && n > 1) par(s, route_worker, &rt);
    else route_worker(&rt, 0, 1);
    PROF_MARK(s, MOE_PH_ROUTE, 0, 0);

    /* Jobs: one per selected expert with its (token, slot) rows gathered in
     * token order, plus the shared expert. With gemm_batch a chunk's tokens
     * share one job per expert, so each expert's weights stream once per
     * chunk; without it, token by token. Either way every output row is the
     * same dot products. */
    bool batch = moe_flag_on(s->flags, MOE_FLAG_GEMM_BATCH);
    /* act_q8: xn as A8 rows, once; expert jobs gather these rows like xg */
    const uint8_t *xa = act_rows(s, &L->gate_exps, s->xn, (size_t)E, n, s->xa);
    if (!xa) xa = act_rows(s, &L->up_exps, s->xn, (size_t)E, n, s->xa);
    if (!xa && L->has_shexp) xa = act_rows(s, &L->gate_sh, s->xn, (size_t)E, n, s->xa);
    if (!xa && L->has_shexp) xa = act_rows(s, &L->up_sh, s->xn, (size_t)E, n, s->xa);
    PROF_EXTEND(s, MOE_PH_FFN_NORM);                              /* the input quantization: with the norm */
    const size_t aE = (size_t)moe_act8_row_bytes(E), aFx = (size_t)moe_act8_row_bytes((int64_t)Fx);
    int rows = 0;                                                 /* gathered rows [n*K][E] in s->xg */
    int32_t *cnt = s->expert_rows;
    for (int t_begin = 0; t_begin < n;) {
        int t_end = batch ? n : t_begin + 1, n_jobs = 0;
        /* rows by expert (ascending id), each expert's in token order: a
         * counting sort of the chunk's (token, rank) choices */
        memset(cnt, 0, sizeof(int32_t) * (size_t)NE);
        for (int t = t_begin; t < t_end; t++)
            for (int k = 0; k < K; k++) cnt[s->sel[(size_t)t * K + k]]++;
        const int rows0 = rows;
        for (int e = 0; e < NE; e++) {
            const int c = cnt[e];
            cnt[e] = rows;                                        /* its first row, then the next free one */
            rows += c;
        }
        for (int t = t_begin; t < t_end; t++)
            for (int k = 0; k < K; k++) {
                const int r = cnt[s->sel[(size_t)t * K + k]]++;
                s->ex_slot[(size_t)t * K + k] = r;
                s->gather_src[r] = t;
            }
        for (int e = 0, start = rows0; e < NE; start = cnt[e], e++) {
            if (cnt[e] == start) continue;                        /* not chosen in this chunk */
            const int t_first = s->gather_src[start];
            /* with parallel_glue an expert with one token reads its row where it is */
            const bool in_place = glue && cnt[e] - start == 1;
            if (in_place) s->gather_src[start] = -1;
            jobs[n_jobs++] = (moe_ffn_job){.wg = &L->gate_exps, .wu = &L->up_exps, .wd = &L->down_exps, .mat = e,
                                           .x = in_place ? s->xn + (size_t)t_first * E : s->xg + (size_t)start * E,
                                           .xa = !xa        ? NULL
                                                 : in_place ? xa + (size_t)t_first * aE
                                                            : s->xga + (size_t)start * aE,
                                           .nr = cnt[e] - start,
                                           .ha = s->ha ? s->ha + (size_t)start * aFx : NULL,
                                           .hg = s->hg + (size_t)start * Fx, .hu = s->hu + (size_t)start * Fx,
                                           .out = s->eout + (size_t)start * E};
        }
        gather_task gt = {s, xa, rows0, rows};                  /* the copies, [n*K][E] */
        if (glue && rows - rows0 > K) par(s, gather_worker, &gt);
        else gather_worker(&gt, 0, 1);
        bool last = t_end == n;
        if (L->has_shexp && last) {                               /* shared expert: all n tokens, same phases */
            size_t off = (size_t)n * K * Fx;
            jobs[n_jobs++] = (moe_ffn_job){.wg = &L->gate_sh, .wu = &L->up_sh, .wd = &L->down_sh, .mat = 0, .x = s->xn,
                                           .xa = xa, .nr = n, .ha = s->ha ? s->ha + (size_t)n * K * aFx : NULL,
                                           .hg = s->hg + off, .hu = s->hu + off, .out = s->proj};
        }
        PROF_EXTEND(s, MOE_PH_ROUTE);                             /* the gather (and job list) */
        run_ffn_jobs(s, jobs, n_jobs, true);
        t_begin = t_end;
    }
    /* rank order, + shared; x += ffn_out. With parallel_glue a prompt's
     * tokens are spread over the pool; one token stays here: ~1 us per layer
     * (bench --phases, qwen3moe q8: combine 0.02 ms per step). Cutting the down
     * phase by output rows to combine inside it was tried: the short
     * per-expert row ranges streamed at 50-80 % of the work-split phase's speed. */
    combine_task ct = {s, L, n};
    if (glue && n > 1) par(s, combine_worker, &ct);
    else combine_worker(&ct, 0, 1);
    PROF_MARK(s, MOE_PH_COMBINE, 0, 0);
}

/* ---- the whole model ------------------------------------------------------------------ */

static void embed(moe_session *s, const int32_t *tokens, int n) {
    const moe_model *m = s->m;
    const int E = m->hp.n_embd;
    for (int t = 0; t < n; t++)                                   /* x = embedding rows  [n][E] */
        moe_dequant_row(m->tok_embd.type, m->tok_embd.data + (size_t)tokens[t] * m->tok_embd.row_bytes,
                        s->x + (size_t)t * E, E);
    PROF_MARK(s, MOE_PH_EMBED, (double)n * (double)m->tok_embd.row_bytes, 0);
}

static void head(moe_session *s, int n, float *logits, bool all_logits) {
    const moe_model *m = s->m;
    const int E = m->hp.n_embd;
    int first = all_logits ? 0 : n - 1, cnt = all_logits ? n : 1;
    for (int t = first; t < n; t++)                               /* final RMSNorm of the rows we need */
        rms_norm(s->x + (size_t)t * E, m->output_norm, s->xn + (size_t)(t - first) * E, E, m->hp.rms_eps);
    matmul(s, &m->output, s->xn, cnt, logits);                    /* logits [cnt][n_vocab] */
    PROF_MARK(s, MOE_PH_LM_HEAD, (double)m->output.mat_bytes, 0);
}

/* Differential mode: the first tensor (in data-flow order) whose bits differ. */
static bool diff_check(moe_session *s, const float *a, const float *b, size_t rows, size_t cols,
                       const char *what, int il) {
    for (size_t i = 0; i < rows * cols; i++) {
        if (!memcmp(&a[i], &b[i], sizeof(float))) continue;
        uint32_t ua, ub;
        memcpy(&ua, &a[i], 4);
        memcpy(&ub, &b[i], 4);
        char fl[128], tw[64];
        moe_flags_format(s->flags, fl, sizeof fl);
        moe_flags_format(s->shadow ? s->shadow->flags : 0, tw, sizeof tw);  /* "none" or the numerics kept */
        char where[32] = "final";
        if (il >= 0) snprintf(where, sizeof where, "layer %d", il);
        moe_errf(s->err, sizeof s->err, MOE_EDIVERGE,
                 "differential mode: %s %s differs at position %zu, element %zu: %.9g (0x%08x) with flags %s "
                 "vs %.9g (0x%08x) with flags %s",
                 where, what, (size_t)s->n_past + i / cols, i % cols, (double)a[i], ua, fl, (double)b[i], ub, tw);
        return false;
    }
    return true;
}

static int forward_diff(moe_session *s, const int32_t *tokens, int n, float *logits, bool all_logits) {
    moe_session *r = s->shadow;
    const moe_model *m = s->m;
    const moe_hparams *hp = &m->hp;
    const size_t E = (size_t)hp->n_embd, N = (size_t)n;
    /* Profile (main session only; the twin's is never on): each block's
     * chain restarts after the twin's block and the comparisons. */
    PROF_START(s);
    embed(s, tokens, n);
    embed(r, tokens, n);
    for (int il = 0; il < hp->n_layer; il++) {
        const moe_layer *L = &m->layers[il];
        PROF_START(s);
        attention_block(s, il, n);
        attention_block(r, il, n);
        const size_t qd = (size_t)L->n_head * (size_t)hp->head_dim, kd = (size_t)hp->n_head_kv * (size_t)hp->head_dim;
        const size_t vd = (size_t)hp->n_head_kv * (size_t)hp->head_dim_v, ad = (size_t)L->n_head * (size_t)hp->head_dim_v;
        if (!diff_check(s, s->q, r->q, N, qd, "attn q (after QK-norm and RoPE)", il) ||
            !diff_check(s, s->k, r->k, N, kd, "attn k (after QK-norm and RoPE)", il) ||
            !diff_check(s, s->v, r->v, N, vd, "attn v", il) ||
            !diff_check(s, s->att, r->att, N, ad, "attention output (gated)", il) ||
            !diff_check(s, s->proj, r->proj, N, E, "attn_output projection", il) ||
            !diff_check(s, s->x, r->x, N, E, "residual after attention", il))
            return MOE_EDIVERGE;
        PROF_START(s);
        ffn_block(s, il, n);
        ffn_block(r, il, n);
        if (!L->dense && !diff_check(s, s->router, r->router, N, (size_t)hp->n_expert, "router probabilities", il))
            return MOE_EDIVERGE;
        if (!diff_check(s, s->ffn_out, r->ffn_out, N, E, "ffn output", il) ||
            !diff_check(s, s->x, r->x, N, E, "residual after ffn", il))
            return MOE_EDIVERGE;
    }
    if (logits) {
        PROF_START(s);
        head(s, n, logits, all_logits);
        head(r, n, r->logits_tmp, all_logits);
        if (!diff_check(s, logits, r->logits_tmp, all_logits ? N : 1, (size_t)hp->n_vocab, "logits", -1))
            return MOE_EDIVERGE;
    }
    s->n_past += n;
    r->n_past += n;
    return MOE_OK;
}

int moe_forward_chunk(moe_session *s, const int32_t *tokens, int n, float *logits, bool all_logits) {
    if (s->shadow) {
        int rc = forward_diff(s, tokens, n, logits, all_logits);
        if (rc) return rc;
    } else {
        PROF_START(s);                                            /* the profile's phases chain from here */
        embed(s, tokens, n);
        for (int il = 0; il < s->m->hp.n_layer; il++) {
            attention_block(s, il, n);
            ffn_block(s, il, n);
        }
        if (logits) head(s, n, logits, all_logits);
        s->n_past += n;
    }
    if (moe_flag_on(s->flags, MOE_FLAG_TEST_SLOW)) {
        struct timespec ts = {0, 2000000L * n};
        while (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        nanosleep(&ts, NULL);
    }
    return MOE_OK;
}
