/* norm.c — RMSNorm as ggml computes it (the sum of squares in double, the
 * scale in float), for one row, for the query heads of a KV head, and for
 * the step's tokens over the pool. */
#include "base/flags.h"
#include "model/blocks.h"

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

void moe_rms_norm(const float *x, const float *w, float *y, int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    rms_apply(x, w, y, n, sum, eps);
}

/* The same operations per row, the sequential double sums of up to four
 * rows interleaved so that each add does not wait on the one before it (a
 * 128-value sum is ~4 cycles per value alone). */
void moe_rms_norm_rows(float *x, const float *w, int n, int count, size_t stride, float eps) {
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
    for (; r < count; r++) moe_rms_norm(x + (size_t)r * stride, w, x + (size_t)r * stride, n, eps);
}

/* A prompt's rows spread over the pool with parallel_glue (one sequential
 * double sum per row, ~1 us each). */
typedef struct {
    moe_context *c;
    const float *w;
} norm_task;

static void norm_worker(void *arg, int ith, int nth) {
    const norm_task *nt = arg;
    const moe_context *c = nt->c;
    const size_t E = (size_t)c->m->hp.n_embd;
    int64_t b, e;
    moe_split(c->n_tok, ith, nth, 1, &b, &e);
    for (int64_t t = b; t < e; t++) moe_rms_norm(c->x + (size_t)t * E, nt->w, c->xn + (size_t)t * E, (int)E, c->m->hp.rms_eps);
}

void moe_norm_tokens(moe_context *c, const float *w) {
    norm_task nt = {c, w};
    if (c->n_tok > 1 && moe_flag_on(c->flags, MOE_FLAG_PARALLEL_GLUE)) moe_ctx_par(c, norm_worker, &nt);
    else norm_worker(&nt, 0, 1);
}
