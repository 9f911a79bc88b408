/* attn.h — attention inner kernels (and the two elementwise kernels that
 * share moe_expf with them) for one (token, KV head) pair and the G
 * query heads that share that KV head (grouped-query attention).
 *
 * scores: sc[h*sc_stride + j] = dot(q_h, k_j) * scale for h < G, j < n_keys,
 *         each dot under the 16-lane contract of quant.h (lane l sums
 *         d = l, l+16, ... with fmaf; tree a[l]+a[l+8], +4, +2, +1).
 * accum:  out_h[d] = sum_j p[h*p_stride + j] * v_j[d], for j = 0 .. n_keys-1
 *         in increasing order, each step one fmaf starting from +0.0f.
 * Processing the heads of a group together loads each key and value row
 * once instead of G times; the arithmetic per output is unchanged, so every
 * ISA level gives the same bits.
 * scores_h / accum_h: the same with keys / values stored as IEEE half (the
 * kv_f16 numerics): each element is converted to float exactly, then the
 * arithmetic is the one above. */
#ifndef MOE_ATTN_H
#define MOE_ATTN_H

#include <stddef.h>
#include <stdint.h>
#include "quant/quant.h"

typedef struct moe_attn_kernels {
    void (*scores)(const float *q, size_t q_stride, int G, const float *k, size_t k_stride, int n_keys,
                   int D, float scale, float *sc, size_t sc_stride);
    void (*accum)(const float *p, size_t p_stride, int G, const float *v, size_t v_stride, int n_keys,
                  int Dv, float *out, size_t out_stride);
    void (*scores_h)(const float *q, size_t q_stride, int G, const uint16_t *k, size_t k_stride, int n_keys,
                     int D, float scale, float *sc, size_t sc_stride);
    void (*accum_h)(const float *p, size_t p_stride, int G, const uint16_t *v, size_t v_stride, int n_keys,
                    int Dv, float *out, size_t out_stride);
    /* r[j] = moe_expf(r[j] - mx) for j < n: elementwise, the same bits as the
     * scalar moe_expf (src/util.h) on every ISA. */
    void (*exp_shift)(float *r, int n, float mx);
    /* g[i] = silu(g[i]) * u[i], silu(x) = x / (1 + moe_expf(-x)): elementwise,
     * the same bits on every ISA (SwiGLU of the FFN). */
    void (*silu_mul)(float *g, const float *u, int64_t n);
    /* y[i] = moe_f32_to_f16(x[i]) for i < n (round to nearest even; NaN
     * keeps its sign and top payload bits, made quiet): the kv_f16 store. */
    void (*to_half)(const float *x, uint16_t *y, int n);
    /* The MoE combine of one token, elementwise for i < n, with y_k = eout +
     * slot[k] * n: o[i] = y_0[i]*w[0], then o[i] = o[i] + y_k[i]*w[k] for
     * k = 1 .. K-1 (a multiply, then an add: never fused), then o[i] += sh[i]
     * when sh, then x[i] += o[i]. */
    void (*combine)(const float *eout, const int32_t *slot, const float *w, int K, const float *sh, float *o,
                    float *x, int n);
} moe_attn_kernels;

const moe_attn_kernels *moe_attn_for(moe_isa isa);

/* per-ISA tables (attn.c, attn_avx2.c, attn_avx512.c) */
extern const moe_attn_kernels moe_attn_scalar, moe_attn_avx2, moe_attn_avx512;

#endif
