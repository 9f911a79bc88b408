/* matmul.c — the matrix products of the forward pass: rows of W . X with the
 * context's kernels, split over the pool by output rows (never inside a dot
 * product), and the act_q8 quantization of their inputs. */
#include <string.h>

#include "base/flags.h"
#include "model/blocks.h"

/* Rows [r0, r1) of Y[t][r] = W_mat . X[t] (+ second-level scale). Weights in
 * the a8 layout (flag act_q8) read the inputs as A8 rows xa (xa_stride bytes
 * apart), every other weight the float rows x. */
void moe_matmul_rows(const moe_context *c, const moe_weight *w, int64_t mat, const float *x, size_t x_stride,
                     const uint8_t *xa, size_t xa_stride, int n, float *y, size_t y_stride, int64_t r0, int64_t r1) {
    if (r0 >= r1) return;
    const moe_kernels *k = c->kern;
    /* x4 data: r0 is a multiple of 8 (every split is 8-aligned) and r1 is a
     * multiple of 8 or the matrix end, as the layout requires */
    const uint8_t *base = w->data + (size_t)mat * w->mat_bytes + (size_t)r0 * w->row_bytes;
    if (w->a8) {
        if (n == 1) k->gemv_a8[w->type](base, w->row_bytes, r1 - r0, xa, y + r0, w->n_in);
        else k->gemm_a8[w->type](base, w->row_bytes, r1 - r0, xa, xa_stride, n, y + r0, y_stride, w->n_in);
    } else if (n == 1) {
        (w->x4 ? k->gemv_x4 : k->gemv)[w->type](base, w->row_bytes, r1 - r0, x, y + r0, w->n_in);
    } else {
        /* gemm_wide: the same values from the level's wide kernel, if it has
         * one and there are enough tokens to pay for its fill (the level's
         * wide_min_tokens: a batched decode step's few tokens go to the
         * 4-token tiles) */
        moe_gemm_fn g = NULL;
        if (moe_flag_on(c->flags, MOE_FLAG_GEMM_WIDE) && n >= k->wide_min_tokens[w->type])
            g = (w->x4 ? k->gemm_wide_x4 : k->gemm_wide)[w->type];
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

static void q8_worker(void *arg, int ith, int nth) {
    const q8_task *t = arg;
    int64_t b, e;
    moe_split(t->rows, ith, nth, 1, &b, &e);
    const size_t ds = (size_t)moe_act8_row_bytes(t->n);
    for (int64_t r = b; r < e; r++) t->k->quantize_act8(t->x + (size_t)r * t->xs, t->dst + (size_t)r * ds, t->n);
}

/* One row (decode) is done here; more are spread over the pool. */
const uint8_t *moe_act_rows(moe_context *c, const moe_weight *w, const float *x, size_t xs, int rows, uint8_t *dst) {
    if (!w->a8) return NULL;
    q8_task t = {c->kern, x, xs, rows, (int)w->n_in, dst};
    if (rows == 1 || c->n_threads == 1) q8_worker(&t, 0, 1);
    else moe_pool_run(c->pool, q8_worker, &t);
    return dst;
}

typedef struct {
    moe_context *c;
    const moe_weight *w;
    int64_t mat;
    const float *x;
    const uint8_t *xa;
    int n;
    float *y;
} mm_task;

static void mm_worker(void *arg, int ith, int nth) {
    mm_task *t = arg;
    int64_t r0, r1;
    moe_split(t->w->n_out, ith, nth, 8, &r0, &r1);
    moe_matmul_rows(t->c, t->w, t->mat, t->x, (size_t)t->w->n_in, t->xa, (size_t)moe_act8_row_bytes(t->w->n_in),
                    t->n, t->y, (size_t)t->w->n_out, r0, r1);
}

void moe_matmul(moe_context *c, const moe_weight *w, const float *x, int n, float *y) {
    mm_task t = {c, w, 0, x, moe_act_rows(c, w, x, (size_t)w->n_in, n, c->xa), n, y};
    moe_ctx_par(c, mm_worker, &t);
}

/* Several products of the same input in one parallel phase (Q, K, V and an
 * extra projection): the combined row space is split, so one barrier
 * instead of four. */
typedef struct {
    moe_context *c;
    int count, n;
    const moe_weight *const *w;
    float *const *y;
    const float *x;
    const uint8_t *xa;       /* the input as A8 rows, when some w[i] is a8 */
} mm_multi_task;

static void mm_multi_worker(void *arg, int ith, int nth) {
    mm_multi_task *t = arg;
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
            moe_matmul_rows(t->c, w, 0, t->x, (size_t)w->n_in, t->xa, (size_t)moe_act8_row_bytes(w->n_in), t->n,
                            t->y[i], (size_t)w->n_out, r0, r1);
        }
        base += (w->n_out + 7) & ~(int64_t)7;
    }
}

void moe_matmul_multi(moe_context *c, const moe_weight *const *w, float *const *y, int count, const float *x,
                      const uint8_t *xa, int n) {
    mm_multi_task t = {c, count, n, w, y, x, xa};
    moe_ctx_par(c, mm_multi_worker, &t);
}

/* The input of moe_matmul_multi as A8 rows, quantized once when some w[i]
 * reads them; NULL when all read floats. A step of its own so that the
 * profile charges it to the norm (preparing the input), not the products. */
const uint8_t *moe_act_rows_multi(moe_context *c, const moe_weight *const *w, int count, const float *x, int n) {
    const uint8_t *xa = NULL;
    for (int i = 0; i < count && !xa; i++) xa = moe_act_rows(c, w[i], x, (size_t)w[i]->n_in, n, c->xa);
    return xa;
}
