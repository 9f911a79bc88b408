/* attn.c — scalar reference attention kernels (the contract of attn.h written
 * out literally); the level descriptors (isa/isa.h) pair each level's table
 * with its quant kernels. */
#include <math.h>
#include <string.h>

#include "attention/attn.h"
#include "base/util.h"

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

static void swiglu_clamp_scalar(float *g, const float *u, int64_t n) {
    const float alpha = 1.702f, limit = 7.0f;
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i] < limit ? g[i] : limit;                 /* NaN: min(NaN, 7) = 7, as std::min */
        const float y = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        g[i] = x / (1.0f + moe_expf(alpha * -x)) * (y + 1.0f);
    }
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

/* ---- kv_q8 (attn.h): the contract written out ---- */

void moe_kv8_store_key(const uint8_t *xa, int D, int8_t *k8, uint16_t *kd, size_t kds, int j) {
    for (int d = 0; d < D; d++) k8[moe_kv8_key_off(j, d, D)] = (int8_t)xa[moe_a8_code_off(d / 32, d % 32)];
    for (int b = 0; b < D / 32; b++) kd[(size_t)b * kds + (size_t)j] = moe_f32_to_f16(moe_a8_f32(xa + moe_a8_da_off(b)));
}

void moe_kv8_store_value(const uint8_t *xa, int Dv, int8_t *v8, uint16_t *vd, size_t vds, int j) {
    int8_t *row = v8 + (size_t)j * (size_t)Dv;
    for (int d = 0; d < Dv; d++) row[d] = (int8_t)xa[moe_a8_code_off(d / 32, d % 32)];
    for (int b = 0; b < Dv / 32; b++) vd[(size_t)b * vds + (size_t)j] = moe_f32_to_f16(moe_a8_f32(xa + moe_a8_da_off(b)));
}

static void scores_q8_scalar(const uint8_t *qa, size_t qas, int G, const int8_t *k8, const uint16_t *kd, size_t kds,
                             int j0, int nk, int D, float scale, float *sc, size_t scs) {
    for (int h = 0; h < G; h++) {
        const uint8_t *qh = qa + (size_t)h * qas;
        for (int j = j0; j < j0 + nk; j++) {
            float acc = 0.0f;
            for (int b = 0; b < D / 32; b++) {
                int32_t isum = 0;
                for (int k = 0; k < 32; k++)
                    isum += (int32_t)k8[moe_kv8_key_off(j, 32 * b + k, D)] * (int8_t)qh[moe_a8_code_off(b, k)];
                const float S = moe_f16_to_f32(kd[(size_t)b * kds + (size_t)j]) * moe_a8_f32(qh + moe_a8_da_off(b));
                acc = fmaf((float)isum, S, acc);
            }
            sc[(size_t)h * scs + (size_t)j] = acc * scale;
        }
    }
}

static void accum_q8_scalar(const float *p, size_t ps, int G, const int8_t *v8, const uint16_t *vd, size_t vds,
                            int j0, int nk, int Dv, float *wbuf, float *out, size_t os) {
    (void)wbuf;
    for (int h = 0; h < G; h++) {
        float *o = out + (size_t)h * os;
        memset(o, 0, (size_t)Dv * sizeof *o);
        for (int j = j0; j < j0 + nk; j++) {
            const int8_t *vj = v8 + (size_t)j * (size_t)Dv;
            for (int b = 0; b < Dv / 32; b++) {
                const float w = p[(size_t)h * ps + (size_t)j] * moe_f16_to_f32(vd[(size_t)b * vds + (size_t)j]);
                for (int d = 32 * b; d < 32 * b + 32; d++) o[d] = fmaf(w, (float)vj[d], o[d]);
            }
        }
    }
}

static float max_f32_scalar(const float *r, int n) {
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) if (r[j] > mx) mx = r[j];
    return mx;
}

void moe_attn_row_sums(const float *r, size_t stride, int G, int n, float *sums) {
    int h = 0;
    for (; h + 4 <= G; h += 4) {
        const float *r0 = r + (size_t)h * stride, *r1 = r0 + stride, *r2 = r1 + stride, *r3 = r2 + stride;
        float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
        for (int j = 0; j < n; j++) {
            s0 += r0[j];
            s1 += r1[j];
            s2 += r2[j];
            s3 += r3[j];
        }
        sums[h] = s0; sums[h + 1] = s1; sums[h + 2] = s2; sums[h + 3] = s3;
    }
    if (h + 2 <= G) {
        const float *r0 = r + (size_t)h * stride, *r1 = r0 + stride;
        float s0 = 0.0f, s1 = 0.0f;
        for (int j = 0; j < n; j++) {
            s0 += r0[j];
            s1 += r1[j];
        }
        sums[h] = s0; sums[h + 1] = s1;
        h += 2;
    }
    if (h < G) {
        const float *r0 = r + (size_t)h * stride;
        float s0 = 0.0f;
        for (int j = 0; j < n; j++) s0 += r0[j];
        sums[h] = s0;
    }
}

static float softmax_q8_scalar(float *r, int n) {
    float mx = -INFINITY, acc[16] = {0};
    for (int j = 0; j < n; j++) if (r[j] > mx) mx = r[j];
    for (int j = 0; j < n; j++) {
        r[j] = moe_expf(r[j] - mx);
        acc[j & 15] += r[j];
    }
    for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
    for (int l = 0; l < 4; l++) acc[l] += acc[l + 4];
    for (int l = 0; l < 2; l++) acc[l] += acc[l + 2];
    return acc[0] + acc[1];
}

const moe_attn_kernels moe_attn_scalar = {scores_scalar,   accum_scalar,     scores_h_scalar, accum_h_scalar,
                                          exp_shift_scalar, silu_mul_scalar, to_half_scalar,  combine_scalar,
                                          scores_q8_scalar, accum_q8_scalar, softmax_q8_scalar, max_f32_scalar,
                                          scores_scalar,   accum_scalar,     accum_q8_scalar, swiglu_clamp_scalar,
                                          scores_h_scalar, accum_h_scalar};
