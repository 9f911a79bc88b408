/* ceiling.c — the compute side of a decode step's roofline.
 *
 * The bandwidth limit (weight bytes per token / read bandwidth) assumes the
 * kernels multiply as fast as memory delivers. Under the FP32 contract they
 * may not: a Zen 4 core dequantizes and multiplies Q8_0 at ~21 GB/s and
 * NVFP4 at ~12 GB/s even from cache (docs/PERFORMANCE.md), while this VM's
 * memory reads 33-60 GB/s on two cores. So `moefast bench` also measures how
 * fast this session's kernels run each kind of matrix a decode step
 * multiplies, with the weights already in cache, and sets the step against
 * the slower of the two limits (the roofline).
 *
 * A kind is (format, layout, row length): the row length changes the
 * kernels' per-row overhead (bench_quant: a8 Q8_0 rows of 2048 read 96 GB/s
 * per core from L2, rows of 256 64). Each kind is timed on a sample of the
 * largest of its real matrices (the first rows, up to SAMPLE_BYTES, small
 * enough for one core's L2 with its activation), every thread of the session
 * running the same product at once, as a decode phase keeps every core
 * busy. Only the matrix products: attention, norms, routing and the glue
 * between phases are not in the ceiling, so a real step is slower than it. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "base/util.h"

#define SAMPLE_BYTES (160 * 1024)   /* rows of the sample, per thread (L2 is 1 MB on the machines measured) */
#define RUN_SECONDS 2e-3            /* one timed run */
/* Timed runs per kind; the fastest counts. A ceiling is what the kernel can
 * do: a neighbour on this VM can halve a run's speed (two `bench` runs of one
 * configuration read 99 and 197 GB/s for one kind), nothing makes it faster. */
#define RUNS 7

typedef struct {
    uint32_t type;
    char layout;                 /* 'a' a8, 'x' x4, 'p' the file's */
    int64_t n_in;
    const moe_weight *w;         /* the sample: the largest matrix of the kind */
    double bytes;                /* weight bytes per decoded token */
    double gbps;
} ceil_kind;

typedef struct {
    const moe_context *c;
    const moe_weight *w;
    int64_t rows;
    const float *x;
    const uint8_t *xa;
    float *y;                    /* [n_threads][y_stride] */
    size_t y_stride;
    int reps;
} ceil_task;

static void ceil_worker(void *ctx, int ith, int nth) {
    (void)nth;
    const ceil_task *t = ctx;
    const int64_t n = t->w->n_in;
    float *y = t->y + (size_t)ith * t->y_stride;
    for (int i = 0; i < t->reps; i++)
        moe_matmul_rows(t->c, t->w, 0, t->x, (size_t)n, t->xa, (size_t)moe_act8_row_bytes(n), 1, y, t->y_stride, 0,
                        t->rows);
}

static double run_once(const moe_context *c, ceil_task *t) {
    const double t0 = moe_now();
    moe_ctx_par(c, ceil_worker, t);
    return moe_now() - t0;
}

/* Rows of a kind's sample: whole 8-row groups (the x4 and a8 layouts' thread
 * cuts) up to SAMPLE_BYTES, at least 8, at most the matrix. */
static int64_t sample_rows(const moe_weight *w) {
    int64_t rows = (int64_t)(SAMPLE_BYTES / w->row_bytes) & ~(int64_t)7;
    if (rows < 8) rows = 8;
    return rows > w->n_out ? w->n_out : rows;
}

static int cmp_kind_bytes(const void *a, const void *b) {
    const ceil_kind *x = a, *y = b;
    return (x->bytes < y->bytes) - (x->bytes > y->bytes);   /* descending */
}

/* Adds bytes of weight w (read per token) to its kind, creating it. */
static void add_kind(ceil_kind *k, int *nk, const moe_weight *w, double bytes) {
    if (!w->data || bytes <= 0) return;
    const char layout = w->a8 ? 'a' : w->x4 ? 'x' : 'p';
    for (int i = 0; i < *nk; i++)
        if (k[i].type == w->type && k[i].layout == layout && k[i].n_in == w->n_in) {
            k[i].bytes += bytes;
            if (w->mat_bytes > k[i].w->mat_bytes) k[i].w = w;
            return;
        }
    k[(*nk)++] = (ceil_kind){w->type, layout, w->n_in, w, bytes, 0};
}

/* Times one kind: a warm-up run, one to size the runs, RUNS timed ones. */
static void time_kind(const moe_context *s, ceil_kind *k, const float *x, uint8_t *xa, float *y, size_t y_stride) {
    const moe_weight *w = k->w;
    const int64_t rows = sample_rows(w);
    if (w->a8) s->kern->quantize_act8(x, xa, w->n_in);
    ceil_task t = {s, w, rows, x, w->a8 ? xa : NULL, y, y_stride, 1};
    run_once(s, &t);
    const double t1 = run_once(s, &t);
    const double want = t1 > 0 ? RUN_SECONDS / t1 : 1e5;
    t.reps = want < 1 ? 1 : want > 1e5 ? 100000 : (int)want;
    double best = 0;
    for (int i = 0; i < RUNS; i++) {
        const double ti = run_once(s, &t);
        if (i == 0 || ti < best) best = ti;
    }
    const double bytes = (double)rows * (double)w->row_bytes * (double)t.reps * (double)s->n_threads;
    k->gbps = best > 0 ? bytes / best / 1e9 : 0;
}

int moe_context_compute_ceiling_(moe_context *s, moe_ceiling_part *parts, int max, int *n_parts, double *seconds,
                                char *err, size_t errlen) {
    if (n_parts) *n_parts = 0;
    if (seconds) *seconds = 0;
    if (!s) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_compute_ceiling: session is NULL");
    if (max < 0 || (max > 0 && !parts))
        return moe_errf(err, errlen, MOE_EINVAL, "moe_session_compute_ceiling: parts is NULL or max < 0");
    const moe_model *m = s->m;
    const moe_hparams *hp = &m->hp;
    ceil_kind *k = calloc((size_t)m->n_weights + 1, sizeof *k);
    if (!k) return moe_errf(err, errlen, MOE_ENOMEM, "out of memory");
    int nk = 0;
    /* the matrices a decode step multiplies, and their bytes, as
     * moe_model_bytes_per_token counts them (loader.c): the weight list */
    for (int i = 0; i < m->n_weights; i++) {
        const moe_weight *w = m->weights[i].w;
        add_kind(k, &nk, w, m->weights[i].use == MOE_USE_TOPK ? (double)hp->n_expert_used * (double)w->mat_bytes
                                                               : (double)w->mat_bytes * (double)w->n_mat);
    }

    int64_t n_max = 1, rows_max = 1;
    for (int i = 0; i < nk; i++) {
        if (k[i].n_in > n_max) n_max = k[i].n_in;
        if (sample_rows(k[i].w) > rows_max) rows_max = sample_rows(k[i].w);
    }
    const size_t y_stride = ((size_t)rows_max + 15) & ~(size_t)15;
    float *x = moe_calloc_aligned((size_t)n_max, sizeof(float), 0);
    uint8_t *xa = moe_calloc_aligned((size_t)moe_act8_row_bytes(((n_max + 31) / 32) * 32), 1, 0);
    float *y = moe_calloc_aligned((size_t)s->n_threads * y_stride, sizeof(float), 0);
    if (!x || !xa || !y) {
        moe_free_aligned(x); moe_free_aligned(xa); moe_free_aligned(y); free(k);
        return moe_errf(err, errlen, MOE_ENOMEM, "out of memory");
    }
    moe_rng rng;                                     /* activations of a realistic spread */
    moe_rng_seed(&rng, 1);
    for (int64_t i = 0; i < n_max; i++) x[i] = (float)(2.0 * moe_rng_uniform(&rng) - 1.0);

    double total = 0;
    for (int i = 0; i < nk; i++) {
        time_kind(s, &k[i], x, xa, y, y_stride);
        total += k[i].gbps > 0 ? k[i].bytes / (k[i].gbps * 1e9) : 0;
    }
    qsort(k, (size_t)nk, sizeof *k, cmp_kind_bytes);
    for (int i = 0; i < nk && i < max; i++) {
        const moe_type_info *ti = moe_type_get(k[i].type);
        snprintf(parts[i].kernel, sizeof parts[i].kernel, "%s%s, rows of %lld", ti && ti->name ? ti->name : "?",
                 k[i].layout == 'a' ? " a8" : k[i].layout == 'x' ? " x4" : "", (long long)k[i].n_in);
        parts[i].bytes_per_token = k[i].bytes;
        parts[i].gb_per_s = k[i].gbps;
    }
    if (n_parts) *n_parts = nk;
    if (seconds) *seconds = total;
    moe_free_aligned(x);
    moe_free_aligned(xa);
    moe_free_aligned(y);
    free(k);
    return MOE_OK;
}

/* ---- attention: a decode step's items with their keys and values in cache
 *
 * The roofline's other kind of product: the scores (query heads x keys) and
 * the weighted sum (weights x values) of every (layer, KV head) item, whose
 * operand is the KV cache. Each thread repeats one item of its own KV head
 * at the given position (a head's keys and values: 590 KB in FP32 at 576
 * keys, in one core's L2), as the forward pass runs it; layers of the same
 * shape (query heads, KV bytes: a sliding window caps them) are timed once.
 * Latent-attention layers (v_from_k, mla.c) have their own kernels and are
 * not timed: their bytes count at the bandwidth. */
typedef struct {
    moe_context *c;
    int il, pos, reps;
    float *o;                    /* [n_threads][o_stride] */
    size_t o_stride;
} attn_ceil_task;

static void attn_ceil_worker(void *ctx, int ith, int nth) {
    (void)nth;
    const attn_ceil_task *t = ctx;
    const moe_hparams *hp = &t->c->m->hp;
    const int g = ith % hp->n_head_kv, G = t->c->m->layers[t->il].attn.n_head / hp->n_head_kv;
    const float *q = t->c->q + (size_t)g * (size_t)G * (size_t)hp->head_dim;   /* the last step's queries */
    for (int i = 0; i < t->reps; i++)
        moe_attn_decode_item(t->c, t->il, t->pos, g, q, t->o + (size_t)ith * t->o_stride, ith);
}

static double attn_run_once(moe_context *c, attn_ceil_task *t) {
    const double t0 = moe_now();
    moe_ctx_par(c, attn_ceil_worker, t);
    return moe_now() - t0;
}

/* Items per second, all threads together, of layer il's items (the fastest
 * of RUNS runs after a warm-up and a sizing run). */
static double time_attn_layer(moe_context *c, attn_ceil_task *t, int il) {
    t->il = il;
    t->reps = 1;
    attn_run_once(c, t);
    const double t1 = attn_run_once(c, t);
    const double want = t1 > 0 ? RUN_SECONDS / t1 : 1e5;
    t->reps = want < 1 ? 1 : want > 1e5 ? 100000 : (int)want;
    double best = 0;
    for (int i = 0; i < RUNS; i++) {
        const double ti = attn_run_once(c, t);
        if (i == 0 || ti < best) best = ti;
    }
    return best > 0 ? (double)t->reps * (double)c->n_threads / best : 0;
}

static const char *kv_format_name(const moe_context *c) {
    return c->kv_tq ? (c->tq_kbits == 4 ? "kv_tq_small" : "kv_tq") : c->kv_q8 ? "kv_q8" : c->kv_half ? "F16" : "F32";
}

int moe_context_attention_ceiling_(moe_context *c, int pos, moe_ceiling_part *part, double *kv_bytes, char *err,
                                   size_t errlen) {
    if (kv_bytes) *kv_bytes = 0;
    if (!c || !part) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_attention_ceiling: session or part is NULL");
    memset(part, 0, sizeof *part);
    if (pos < 0 || pos >= moe_context_seq_len(c, 0))
        return moe_errf(err, errlen, MOE_EINVAL, "moe_session_attention_ceiling: position %d is not cached (0..%d)", pos,
                        moe_context_seq_len(c, 0) - 1);
    const moe_model *m = c->m;
    const moe_hparams *hp = &m->hp;
    const size_t o_stride = (size_t)hp->n_head_max * (size_t)hp->head_dim_v;
    float *o = moe_calloc_aligned((size_t)c->n_threads * o_stride, sizeof(float), 0);
    double *rate = calloc((size_t)hp->n_layer, sizeof *rate);     /* items per second, per layer */
    if (!o || !rate) {
        moe_free_aligned(o);
        free(rate);
        return moe_errf(err, errlen, MOE_ENOMEM, "out of memory");
    }
    attn_ceil_task t = {c, 0, pos, 1, o, o_stride};
    double seconds = 0, bytes = 0, all = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const moe_attn_desc *d = &m->layers[il].attn;
        const double b = moe_attn_kv_bytes(c, d, pos);
        all += b;
        if (d->v_from_k) continue;
        for (int j = 0; j < il && rate[il] == 0; j++)             /* a layer of the same shape, timed already */
            if (rate[j] > 0 && m->layers[j].attn.n_head == d->n_head && moe_attn_kv_bytes(c, &m->layers[j].attn, pos) == b)
                rate[il] = rate[j];
        if (rate[il] == 0) rate[il] = time_attn_layer(c, &t, il);
        if (rate[il] <= 0) continue;
        seconds += hp->n_head_kv / rate[il];
        bytes += b;
    }
    snprintf(part->kernel, sizeof part->kernel, "attention, %s cache, %d keys", kv_format_name(c), pos + 1);
    part->bytes_per_token = bytes;
    part->gb_per_s = seconds > 0 ? bytes / seconds / 1e9 : 0;
    if (kv_bytes) *kv_bytes = all;
    moe_free_aligned(o);
    free(rate);
    return MOE_OK;
}
