/* attn.c — scalar reference attention kernels (the contract of attn.h written
 * out literally) and the per-ISA dispatch. */
#include <math.h>
#include <string.h>

#include "attn.h"
#include "util.h"

static float dot16(const float *a, const float *b, int n) {
    float acc[16] = {0};
    for (int d = 0; d < n; d++) acc[d & 15] = fmaf(a[d], b[d], acc[d & 15]);
    for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
    for (int l = 0; l < 4; l++) acc[l] += acc[l + 4];
    for (int l = 0; l < 2; l++) acc[l] += acc[l + 2];
    return acc[0] + acc[1];
}

static void scores_scalar(const float *q, size_t qs, int G, const float *k, size_t ks, int nk, int D, float scale,
                          float *sc, size_t scs) {
    for (int j = 0; j < nk; j++)
        for (int h = 0; h < G; h++) sc[(size_t)h * scs + (size_t)j] = dot16(q + (size_t)h * qs, k + (size_t)j * ks, D) * scale;
}

static void accum_scalar(const float *p, size_t ps, int G, const float *v, size_t vs, int nk, int Dv, float *out,
                         size_t os) {
    for (int h = 0; h < G; h++) {
        float *o = out + (size_t)h * os;
        memset(o, 0, (size_t)Dv * sizeof *o);
        for (int j = 0; j < nk; j++) {
            const float a = p[(size_t)h * ps + (size_t)j], *vj = v + (size_t)j * vs;
            for (int d = 0; d < Dv; d++) o[d] = fmaf(a, vj[d], o[d]);
        }
    }
}

/* kv_f16: the same loops over exactly converted halves */
static void scores_h_scalar(const float *q, size_t qs, int G, const uint16_t *k, size_t ks, int nk, int D, float scale,
                            float *sc, size_t scs) {
    for (int j = 0; j < nk; j++)
        for (int h = 0; h < G; h++) {
            const float *qh = q + (size_t)h * qs;
            const uint16_t *kj = k + (size_t)j * ks;
            float acc[16] = {0};
            for (int d = 0; d < D; d++) acc[d & 15] = fmaf(qh[d], moe_f16_to_f32(kj[d]), acc[d & 15]);
            for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
            for (int l = 0; l < 4; l++) acc[l] += acc[l + 4];
            for (int l = 0; l < 2; l++) acc[l] += acc[l + 2];
            sc[(size_t)h * scs + (size_t)j] = (acc[0] + acc[1]) * scale;
        }
}

static void accum_h_scalar(const float *p, size_t ps, int G, const uint16_t *v, size_t vs, int nk, int Dv, float *out,
                           size_t os) {
    for (int h = 0; h < G; h++) {
        float *o = out + (size_t)h * os;
        memset(o, 0, (size_t)Dv * sizeof *o);
        for (int j = 0; j < nk; j++) {
            const float a = p[(size_t)h * ps + (size_t)j];
            const uint16_t *vj = v + (size_t)j * vs;
            for (int d = 0; d < Dv; d++) o[d] = fmaf(a, moe_f16_to_f32(vj[d]), o[d]);
        }
    }
}

static void exp_shift_scalar(float *r, int n, float mx) {
    for (int j = 0; j < n; j++) r[j] = moe_expf(r[j] - mx);
}

static void silu_mul_scalar(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + moe_expf(-g[i])) * u[i];
}

static void to_half_scalar(const float *x, uint16_t *y, int n) {
    for (int i = 0; i < n; i++) y[i] = moe_f32_to_f16(x[i]);
}

static void combine_scalar(const float *eout, const int32_t *slot, const float *w, int K, const float *sh, float *o,
                           float *x, int n) {
    for (int k = 0; k < K; k++) {
        const float *y = eout + (size_t)slot[k] * (size_t)n;
        if (k == 0)
            for (int i = 0; i < n; i++) o[i] = y[i] * w[k];
        else
            for (int i = 0; i < n; i++) o[i] += y[i] * w[k];
    }
    if (sh)
        for (int i = 0; i < n; i++) o[i] += sh[i];
    for (int i = 0; i < n; i++) x[i] += o[i];
}

const moe_attn_kernels moe_attn_scalar = {scores_scalar, accum_scalar, scores_h_scalar, accum_h_scalar,
                                          exp_shift_scalar, silu_mul_scalar, to_half_scalar, combine_scalar};

const moe_attn_kernels *moe_attn_for(moe_isa isa) {
    switch (isa) {
    case MOE_ISA_AVX512: return &moe_attn_avx512;
    case MOE_ISA_AVX2: return &moe_attn_avx2;
    default: return &moe_attn_scalar;
    }
}
