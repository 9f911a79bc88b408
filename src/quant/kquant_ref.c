/* kquant_ref.c — the specification of Q2_K, Q3_K, Q5_K and IQ4_XS: bit
 * layouts (ggml's, byte for byte), dequantization as exact float operations,
 * and ggml's reference quantizers. quant_ref.c's kernels call
 * moe_kq_dq_block for these types, so the dot-product contract of quant.h
 * applies unchanged; the SIMD files must form the same values.
 *
 * All multi-byte fields little-endian; "f16" converted exactly
 * (moe_f16_to_f32: subnormals, Inf, NaN included). Every product below whose
 * factors are a small integer and an f16 value is exact; the only rounded
 * steps are the ones written as separate operations (never fused:
 * -ffp-contract=off).
 *
 * Q5_K   (256 values, 176 bytes): f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128].
 *        8 sub-blocks of 32, 6-bit scale sc and min m each, packed as Q4_K's
 *        (moe_q4k_scale_min). For c = 0..3, l = 0..31:
 *          value 64c+l    = (qs[32c+l] & 15) | ((qh[l] >> 2c) & 1) << 4      (sub-block 2c)
 *          value 64c+32+l = (qs[32c+l] >> 4) | ((qh[l] >> (2c+1)) & 1) << 4  (sub-block 2c+1)
 *        d1 = d * (float)sc; m1 = dmin * (float)m;   w = d1 * (float)q - m1
 *        (as Q4_K: two products, one subtraction, each rounded once).
 * Q3_K   (256 values, 110 bytes): u8 hmask[32] | u8 qs[64] | u8 scales[12] | f16 d.
 *        16 sub-blocks of 16 with 6-bit scales (moe_q3k_scales: s_j - 32).
 *        Value k: h = k / 128, j = (k % 128) / 32, l = k % 32;
 *          q = ((qs[32h+l] >> 2j) & 3) - (((hmask[l] >> (4h+j)) & 1) ? 0 : 4)   (-4..3)
 *        w = (d * (float)(s_{k/16} - 32)) * (float)q   (both products exact)
 * Q2_K   (256 values, 84 bytes): u8 scales[16] | u8 qs[64] | f16 d | f16 dmin.
 *        16 sub-blocks of 16; scales[s] = sc | m << 4 (4 bits each).
 *        Value k: h, j, l as Q3_K; q = (qs[32h+l] >> 2j) & 3;
 *        dl = d * (float)sc; ml = dmin * (float)m;   w = dl * (float)q - ml
 * IQ4_XS (256 values, 136 bytes): f16 d | u16 scales_h | u8 scales_l[4] | u8 qs[128].
 *        8 sub-blocks of 32, 6-bit scales ls (moe_iq4xs_scale: ls - 32).
 *        Sub-block ib, l < 16: value 32ib+l = code qs[16ib+l] & 15, value
 *        32ib+16+l = code qs[16ib+l] >> 4;
 *        w = (d * (float)(ls - 32)) * (float)kv[code], kv = kvalues_iq4nl
 *        (exact: 11 + 6 + 7 significant bits). */
#include "quant/kquant.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

#define KMIN(a, b) ((a) < (b) ? (a) : (b))
#define KMAX(a, b) ((a) > (b) ? (a) : (b))

const int8_t moe_kq_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const float moe_kq_iq4nl_f[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ---- dequantization ----------------------------------------------------- */

static void dq_q5_k(const uint8_t *b, float *w) {
    const float d = moe_f16_to_f32(moe_rd16(b)), dmin = moe_f16_to_f32(moe_rd16(b + 2));
    const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + 48;
    for (int c = 0; c < 4; c++) {
        uint8_t s0, m0, s1, m1;
        moe_q4k_scale_min(2 * c, sc, &s0, &m0);
        moe_q4k_scale_min(2 * c + 1, sc, &s1, &m1);
        const float d1 = d * (float)s0, mm1 = dmin * (float)m0;
        const float d2 = d * (float)s1, mm2 = dmin * (float)m1;
        for (int l = 0; l < 32; l++) {
            const int q1 = (qs[32 * c + l] & 15) | ((qh[l] >> (2 * c)) & 1) << 4;
            const int q2 = (qs[32 * c + l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4;
            w[64 * c + l] = d1 * (float)q1 - mm1;
            w[64 * c + 32 + l] = d2 * (float)q2 - mm2;
        }
    }
}

static void dq_q3_k(const uint8_t *b, float *w) {
    const uint8_t *hm = b, *qs = b + 32;
    const float d = moe_f16_to_f32(moe_rd16(b + 108));
    int8_t s[16];
    moe_q3k_scales(b + 96, s);
    for (int k = 0; k < 256; k++) {
        const int h = k / 128, j = (k % 128) / 32, l = k % 32;
        const int q = ((qs[32 * h + l] >> (2 * j)) & 3) - (((hm[l] >> (4 * h + j)) & 1) ? 0 : 4);
        w[k] = (d * (float)s[k / 16]) * (float)q;
    }
}

static void dq_q2_k(const uint8_t *b, float *w) {
    const uint8_t *sc = b, *qs = b + 16;
    const float d = moe_f16_to_f32(moe_rd16(b + 80)), dmin = moe_f16_to_f32(moe_rd16(b + 82));
    for (int k = 0; k < 256; k++) {
        const int h = k / 128, j = (k % 128) / 32, l = k % 32;
        const int q = (qs[32 * h + l] >> (2 * j)) & 3;
        const float dl = d * (float)(sc[k / 16] & 15), ml = dmin * (float)(sc[k / 16] >> 4);
        w[k] = dl * (float)q - ml;
    }
}

static void dq_iq4_xs(const uint8_t *b, float *w) {
    const float d = moe_f16_to_f32(moe_rd16(b));
    const uint8_t *qs = b + 8;
    for (int ib = 0; ib < 8; ib++) {
        const float dl = d * (float)moe_iq4xs_scale(b, ib);
        for (int l = 0; l < 16; l++) {
            w[32 * ib + l] = dl * (float)moe_kq_iq4nl[qs[16 * ib + l] & 15];
            w[32 * ib + 16 + l] = dl * (float)moe_kq_iq4nl[qs[16 * ib + l] >> 4];
        }
    }
}

void moe_kq_dq_block(uint32_t type, const uint8_t *b, float *w) {
    switch (type) {
    case MOE_T_Q5_K: dq_q5_k(b, w); break;
    case MOE_T_Q3_K: dq_q3_k(b, w); break;
    case MOE_T_Q2_K: dq_q2_k(b, w); break;
    case MOE_T_IQ4_XS: dq_iq4_xs(b, w); break;
    default: break;
    }
}

/* ---- quantization: ggml's reference quantizers --------------------------- */

/* ggml make_q3_quants(n, nmax, x, L, do_rmse = true). */
static float kq_make_q3(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < 1e-15f) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = moe_nearest_int(iscale * x[i]);
        l = KMAX(-nmax, KMIN(nmax - 1, l));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = moe_nearest_int(x[i] * sl2 / slx);
                new_l = KMAX(-nmax, KMIN(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l; sumlx = slx; suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* quantize_row_q5_K_ref */
static void q_q5_k(const float *x, uint8_t *y) {
    uint8_t L[256], *qh = y + 16, *ql = y + 48;
    moe_k4_scales_codes(x, y, L, 31, -0.5f, 15);
    memset(qh, 0, 32);
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < 256; n += 64) {
        for (int j = 0; j < 32; ++j) {
            int l1 = L[n + j];
            if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
            int l2 = L[n + j + 32];
            if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
            ql[j] = (uint8_t)(l1 | (l2 << 4));
        }
        m1 = (uint8_t)(m1 << 2);
        m2 = (uint8_t)(m2 << 2);
        ql += 32;
    }
}

/* quantize_row_q3_K_ref */
static void q_q3_k(const float *x, uint8_t *y) {
    int8_t L[256];
    float scales[16], max_scale = 0, amax = 0;
    uint8_t *hmask = y, *qs = y + 32, *sc = y + 96;
    for (int j = 0; j < 16; ++j) {
        scales[j] = kq_make_q3(16, 4, x + 16 * j, L + 16 * j);
        float scale = fabsf(scales[j]);
        if (scale > amax) { amax = scale; max_scale = scales[j]; }
    }
    memset(sc, 0, 12);
    if (max_scale) {
        float iscale = -32.f / max_scale;
        for (int j = 0; j < 16; ++j) {
            int l = moe_nearest_int(iscale * scales[j]);
            l = KMAX(-32, KMIN(31, l)) + 32;
            if (j < 8) sc[j] = (uint8_t)(l & 0xF);
            else sc[j - 8] |= (uint8_t)((l & 0xF) << 4);
            l >>= 4;
            sc[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
        }
        moe_st16(y + 108, moe_f32_to_f16(1 / iscale));
    } else {
        moe_st16(y + 108, moe_f32_to_f16(0.f));
    }
    int8_t s[16];
    moe_q3k_scales(sc, s);
    const float fd = moe_f16_to_f32(moe_rd16(y + 108));
    for (int j = 0; j < 16; ++j) {
        float d = fd * s[j];
        if (!d) continue;
        for (int ii = 0; ii < 16; ++ii) {
            int l = moe_nearest_int(x[16 * j + ii] / d);
            L[16 * j + ii] = (int8_t)(KMAX(-4, KMIN(3, l)) + 4);
        }
    }
    memset(hmask, 0, 32);
    int m = 0;
    uint8_t hm = 1;
    for (int j = 0; j < 256; ++j) {
        if (L[j] > 3) { hmask[m] |= hm; L[j] -= 4; }
        if (++m == 32) { m = 0; hm = (uint8_t)(hm << 1); }
    }
    for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* quantize_row_q2_K_ref */
static void q_q2_k(const float *x, uint8_t *y) {
    uint8_t L[256], Laux[16], *sc = y, *qs = y + 16;
    float weights[16], mins[16], scales[16], max_scale = 0, max_min = 0;
    const float q4scale = 15.f;
    for (int j = 0; j < 16; ++j) {
        for (int l = 0; l < 16; ++l) weights[l] = fabsf(x[16 * j + l]);
        scales[j] = moe_make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
        float iscale = q4scale / max_scale;
        for (int j = 0; j < 16; ++j) sc[j] = (uint8_t)moe_nearest_int(iscale * scales[j]);
        moe_st16(y + 80, moe_f32_to_f16(max_scale / q4scale));
    } else {
        for (int j = 0; j < 16; ++j) sc[j] = 0;
        moe_st16(y + 80, moe_f32_to_f16(0.f));
    }
    if (max_min > 0) {
        float iscale = q4scale / max_min;
        for (int j = 0; j < 16; ++j) sc[j] |= (uint8_t)(moe_nearest_int(iscale * mins[j]) << 4);
        moe_st16(y + 82, moe_f32_to_f16(max_min / q4scale));
    } else {
        moe_st16(y + 82, moe_f32_to_f16(0.f));
    }
    const float fd = moe_f16_to_f32(moe_rd16(y + 80)), fm = moe_f16_to_f32(moe_rd16(y + 82));
    for (int j = 0; j < 16; ++j) {
        const float d = fd * (sc[j] & 0xF);
        if (!d) continue;
        const float dm = fm * (sc[j] >> 4);
        for (int ii = 0; ii < 16; ++ii) {
            int l = moe_nearest_int((x[16 * j + ii] + dm) / d);
            L[16 * j + ii] = (uint8_t)KMAX(0, KMIN(3, l));
        }
    }
    for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* ggml best_index_int8: the level nearest to x (val sorted; at the exact
 * midpoint the upper one), compared exactly as 2x >= val[j-1] + val[j]. */
static int kq_best_index(const int8_t *val, float x) {
    const float x2 = x + x;
    int idx = 0;
    for (int step = 8; step > 0; step >>= 1) {
        const int j = idx + step;
        idx = (x2 >= (float)(val[j - 1] + val[j])) ? j : idx;
    }
    return idx;
}

/* quantize_row_iq4_xs_ref = quantize_row_iq4_nl_impl(QK_K, 32, 16 values,
 * no importance weights, ntry = 7) */
static void q_iq4_xs(const float *x, uint8_t *y) {
    const int8_t *values = moe_kq_iq4nl;
    const int ntry = 7;
    uint8_t L[256], *scales_l = y + 4, *q4 = y + 8;
    float weight[32], scales[8], max_scale = 0, amax_scale = 0;
    memset(q4, 0, 128);
    for (int ib = 0; ib < 8; ++ib) {
        const float *xb = x + 32 * ib;
        uint8_t *Lb = L + 32 * ib;
        for (int j = 0; j < 32; ++j) weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < 32; ++j) {
            float ax = fabsf(xb[j]);
            if (ax > amax) { amax = ax; max = xb[j]; }
        }
        if (amax < 1e-15f) {
            scales[ib] = 0;
            memset(Lb, 0, 32);
            continue;
        }
        float d = -max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            float al = id * xb[j];
            int l = kq_best_index(values, al);
            Lb[j] = (uint8_t)l;
            float q = values[l];
            float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; ++itry) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; ++j) {
                float al = id * xb[j];
                int l = kq_best_index(values, al);
                float q = values[l];
                float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        float abs_d = fabsf(d);
        if (abs_d > amax_scale) { amax_scale = abs_d; max_scale = d; }
    }
    uint16_t scales_h = 0;
    float d = -max_scale / 32;
    moe_st16(y, moe_f32_to_f16(d));
    float id = d ? 1 / d : 0.f;
    for (int ib = 0; ib < 8; ++ib) {
        int l = moe_nearest_int(id * scales[ib]);
        l = KMAX(-32, KMIN(31, l));
        float dl = d * l;
        float idl = dl ? 1 / dl : 0.f;
        uint8_t *Lb = L + 32 * ib;
        const float *xb = x + 32 * ib;
        for (int j = 0; j < 32; ++j) Lb[j] = (uint8_t)kq_best_index(values, idl * xb[j]);
        l += 32;
        const uint8_t l_l = (uint8_t)(l & 0xf), l_h = (uint8_t)(l >> 4);
        if (ib % 2 == 0) scales_l[ib / 2] = l_l;
        else scales_l[ib / 2] |= (uint8_t)(l_l << 4);
        scales_h |= (uint16_t)(l_h << (2 * ib));
    }
    moe_st16(y + 2, scales_h);
    for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 16; ++j) q4[16 * i + j] = (uint8_t)(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

void moe_kq_quantize_block(uint32_t type, const float *x, uint8_t *y) {
    switch (type) {
    case MOE_T_Q5_K: q_q5_k(x, y); break;
    case MOE_T_Q3_K: q_q3_k(x, y); break;
    case MOE_T_Q2_K: q_q2_k(x, y); break;
    case MOE_T_IQ4_XS: q_iq4_xs(x, y); break;
    default: break;
    }
}
