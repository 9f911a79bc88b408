/* quant_ref.c — for every supported format (types.h) the scalar reference:
 * the bit layout, dequantization, quantization from FP32 and the
 * gemv/gemm/dot/axpy kernels. This file IS the specification; the SIMD files
 * must reproduce its results bit for bit.
 *
 * Dequantized values are defined by the exact float operations written in
 * dq_block() below (the Makefile sets -ffp-contract=off, so nothing is
 * fused behind our back). Every operation there is a single IEEE rounding of
 * operands that SIMD code can form the same way (an int converted to float
 * is exact, so "(float)q * d" is one product). */
#include "quant/quant_internal.h"
#include "quant/kquant.h"
#include "quant/iq3.h"
#include "quant/iq2.h"
#include "base/util.h"

#include <math.h>
#include <string.h>

#define QMIN(a, b) ((a) < (b) ? (a) : (b))
#define QMAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- shared constants ---------------------------------------------------- */

float moe_f16_f32_tab[65536] __attribute__((aligned(64)));
float moe_e8m0_half_tab[256] __attribute__((aligned(64)));

void moe_quant_init_tables(void) {
    for (uint32_t h = 0; h < 65536; h++) moe_f16_f32_tab[h] = moe_f16_to_f32((uint16_t)h);
    for (int e = 0; e < 256; e++) moe_e8m0_half_tab[e] = moe_e8m0_half((uint8_t)e);
}

const int8_t moe_kvalues_fp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
const float moe_kvalues_fp4_f[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
/* ggml's kvalues_iq4nl (ggml-common.h), the 16 non-linear IQ4_NL levels. */
const int8_t moe_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const float moe_kvalues_iq4nl_f[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ggml_ue4m3_to_fp32(x): 0x00 and 0x7F -> 0; e = (x>>3)&15, m = x&7;
 * e == 0: m*2^-9; else (1+m/8)*2^(e-7); the result is then halved (the
 * kvalues are doubled). Bit 7 is ignored, so 0x80..0xFF alias 0x00..0x7F,
 * except that only 0x7F is special: 0xFF decodes like e = 15, m = 7 (UE4M3
 * 480, table entry 240), as in ggml. Halved values: e == 0: m*2^-10; else
 * (8+m)*2^(e-11). Every entry is exact. */
#define UE(e, m) ((e) == 0 ? (float)(m) * 0x1p-10f : (float)(8 + (m)) * (float)(1 << (e)) * 0x1p-11f)
#define UE_ROW(e) UE(e,0), UE(e,1), UE(e,2), UE(e,3), UE(e,4), UE(e,5), UE(e,6), UE(e,7)
#define UE_LOW UE_ROW(0), UE_ROW(1), UE_ROW(2), UE_ROW(3), UE_ROW(4), UE_ROW(5), UE_ROW(6), UE_ROW(7), \
               UE_ROW(8), UE_ROW(9), UE_ROW(10), UE_ROW(11), UE_ROW(12), UE_ROW(13), UE_ROW(14)
const float moe_ue4m3_half[256] = {
    UE_LOW, UE(15,0), UE(15,1), UE(15,2), UE(15,3), UE(15,4), UE(15,5), UE(15,6), 0.0f /* 0x7F */,
    UE_LOW, UE_ROW(15) /* 0x80 -> 0 via UE(0,0); 0xFF -> 240 (= 480 / 2) */
};
/* moe_nvfp4_wtab: the same entry of byte b (a constant expression), times
 * each moe_kvalues_fp4_f code, folded by the compiler (every product is
 * exact, and -1.0f * 0.0f gives -0 as at run time; test_quant compares all
 * 4096 entries with the run-time products). */
#define UEB(b) (((b) & 0x7F) == 0x7F ? ((b) == 0xFF ? UE(15, 7) : 0.0f) : UE(((b) & 0x7F) >> 3, (b) & 7))
#define NV_ROW(b)                                                                                  \
    {0.0f * UEB(b),  1.0f * UEB(b),  2.0f * UEB(b),  3.0f * UEB(b),  4.0f * UEB(b),  6.0f * UEB(b),  \
     8.0f * UEB(b),  12.0f * UEB(b), 0.0f * UEB(b),  -1.0f * UEB(b), -2.0f * UEB(b), -3.0f * UEB(b), \
     -4.0f * UEB(b), -6.0f * UEB(b), -8.0f * UEB(b), -12.0f * UEB(b)}
#define NV_R4(b) NV_ROW(b), NV_ROW((b) + 1), NV_ROW((b) + 2), NV_ROW((b) + 3)
#define NV_R16(b) NV_R4(b), NV_R4((b) + 4), NV_R4((b) + 8), NV_R4((b) + 12)
#define NV_R64(b) NV_R16(b), NV_R16((b) + 16), NV_R16((b) + 32), NV_R16((b) + 48)
const float moe_nvfp4_wtab[256][16] __attribute__((aligned(64))) = {NV_R64(0), NV_R64(64), NV_R64(128), NV_R64(192)};
#undef NV_R64
#undef NV_R16
#undef NV_R4
#undef NV_ROW
#undef UEB
#undef UE
#undef UE_ROW
#undef UE_LOW

/* ---- dequantization: the bit layouts ------------------------------------ *
 * All multi-byte fields are little-endian; "f16" is IEEE binary16 converted
 * exactly (moe_f16_to_f32), including subnormals, Inf and NaN.
 *
 * Q8_0  (32 values, 34 bytes): f16 d | int8 q[32].          w[j] = (float)q[j] * d
 * Q4_0  (32 values, 18 bytes): f16 d | u8 qs[16]; value j < 16 is the low
 *       nibble of qs[j], value j+16 its high nibble.        w = (float)(nib - 8) * d
 * Q4_K  (256 values, 144 bytes): f16 d | f16 dmin | u8 scales[12] | u8 qs[128].
 *       8 sub-blocks of 32 with a 6-bit scale sc and min m each (unpacked by
 *       moe_q4k_scale_min = ggml's get_scale_min_k4). Values 64c..64c+31 are
 *       the low nibbles of qs[32c..32c+31] (sub-block 2c), values
 *       64c+32..64c+63 the high nibbles (sub-block 2c+1).
 *       d1 = d * (float)sc; m1 = dmin * (float)m;             w = d1 * (float)nib - m1
 *       (two products and one subtraction, each rounded; never fused).
 * Q6_K  (256 values, 210 bytes): u8 ql[128] | u8 qh[64] | int8 sc[16] | f16 d.
 *       Two halves of 128 (h = 0, 1) using ql[64h..], qh[32h..]; for l < 32:
 *         value 128h+l    = (ql[64h+l]    & 15) | ((qh[32h+l] >> 0) & 3) << 4
 *         value 128h+l+32 = (ql[64h+l+32] & 15) | ((qh[32h+l] >> 2) & 3) << 4
 *         value 128h+l+64 = (ql[64h+l]    >> 4) | ((qh[32h+l] >> 4) & 3) << 4
 *         value 128h+l+96 = (ql[64h+l+32] >> 4) | ((qh[32h+l] >> 6) & 3) << 4
 *       value k uses scale sc[k/16];      w = (d * (float)sc[k/16]) * (float)(q - 32)
 * MXFP4 (32 values, 17 bytes): u8 e | u8 qs[16]; value j < 16 is the low
 *       nibble of qs[j], value j+16 the high nibble (an E2M1 code).
 *       w = (float)kv[code] * 2^(e-128), kv = moe_kvalues_fp4 (twice E2M1:
 *       0,1,2,3,4,6,8,12 and negatives; code 8 gives +0), 2^(e-128) exactly
 *       ggml's GGML_E8M0_TO_FP32_HALF (e = 255 gives 2^127, not NaN).
 * NVFP4 (64 values, 36 bytes): u8 d[4] (UE4M3, one per 16 values) | u8 qs[32];
 *       in sub-block s, qs[8s+j] holds value 16s+j (low nibble) and 16s+j+8
 *       (high nibble).                         w = (float)kv[code] * moe_ue4m3_half[d[s]]
 *       (= E2M1 x UE4M3; the product is always exact).
 * F16   w = exact conversion; BF16: w = bits << 16; F32: as stored. */

/* Dequantize one block of a block format (not F32/F16/BF16). */
static void dq_block(uint32_t type, const uint8_t *b, float *w) {
    if (moe_iq3_type(type)) { moe_iq3_dq_block(type, b, w); return; }  /* IQ3_XXS, IQ3_S, IQ1_S, IQ1_M: iq3_ref.c */
    switch (type) {
    case MOE_T_Q8_0: {
        const float d = moe_f16_to_f32(moe_rd16(b));
        for (int j = 0; j < 32; j++) w[j] = (float)(int8_t)b[2 + j] * d;
        break;
    }
    case MOE_T_Q4_0: {
        const float d = moe_f16_to_f32(moe_rd16(b));
        for (int j = 0; j < 16; j++) {
            w[j] = (float)((b[2 + j] & 15) - 8) * d;
            w[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
        }
        break;
    }
    case MOE_T_Q4_1: case MOE_T_IQ4_NL: {
        const bool nl = type == MOE_T_IQ4_NL;
        const float d = moe_f16_to_f32(moe_rd16(b)), m = nl ? 0.0f : moe_f16_to_f32(moe_rd16(b + 2));
        const uint8_t *qs = b + (nl ? 2 : 4);
        for (int j = 0; j < 16; j++) {
            if (nl) {
                w[j] = (float)moe_kvalues_iq4nl[qs[j] & 15] * d;
                w[j + 16] = (float)moe_kvalues_iq4nl[qs[j] >> 4] * d;
            } else {
                w[j] = (float)(qs[j] & 15) * d + m;
                w[j + 16] = (float)(qs[j] >> 4) * d + m;
            }
        }
        break;
    }
    case MOE_T_Q5_0: case MOE_T_Q5_1: {
        const bool one = type == MOE_T_Q5_1;
        const float d = moe_f16_to_f32(moe_rd16(b)), m = one ? moe_f16_to_f32(moe_rd16(b + 2)) : 0.0f;
        const uint8_t *qh = b + (one ? 4 : 2), *qs = qh + 4;
        const uint32_t h = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
        for (int j = 0; j < 16; j++) {
            const int q0 = (qs[j] & 15) | (int)((h >> j) & 1) << 4, q1 = (qs[j] >> 4) | (int)((h >> (j + 16)) & 1) << 4;
            if (one) {
                w[j] = (float)q0 * d + m;
                w[j + 16] = (float)q1 * d + m;
            } else {
                w[j] = (float)(q0 - 16) * d;
                w[j + 16] = (float)(q1 - 16) * d;
            }
        }
        break;
    }
    case MOE_T_Q4_K: {
        const float d = moe_f16_to_f32(moe_rd16(b)), dmin = moe_f16_to_f32(moe_rd16(b + 2));
        const uint8_t *sc = b + 4, *q = b + 16;
        for (int c = 0; c < 4; c++) {
            uint8_t s0, m0, s1, m1;
            moe_q4k_scale_min(2 * c, sc, &s0, &m0);
            moe_q4k_scale_min(2 * c + 1, sc, &s1, &m1);
            const float d1 = d * (float)s0, mm1 = dmin * (float)m0;
            const float d2 = d * (float)s1, mm2 = dmin * (float)m1;
            for (int l = 0; l < 32; l++) {
                w[64 * c + l] = d1 * (float)(q[32 * c + l] & 15) - mm1;
                w[64 * c + 32 + l] = d2 * (float)(q[32 * c + l] >> 4) - mm2;
            }
        }
        break;
    }
    case MOE_T_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        const float d = moe_f16_to_f32(moe_rd16(b + 208));
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = ql[64 * h + l], hi = ql[64 * h + l + 32], hb = qh[32 * h + l];
                const int q[4] = {
                    ((lo & 15) | ((hb >> 0) & 3) << 4) - 32, ((hi & 15) | ((hb >> 2) & 3) << 4) - 32,
                    ((lo >> 4) | ((hb >> 4) & 3) << 4) - 32, ((hi >> 4) | ((hb >> 6) & 3) << 4) - 32};
                for (int g = 0; g < 4; g++) {
                    const int k = 128 * h + 32 * g + l;
                    w[k] = (d * (float)sc[k / 16]) * (float)q[g];
                }
            }
        }
        break;
    }
    case MOE_T_MXFP4: {
        const float d = moe_e8m0_half(b[0]);
        for (int j = 0; j < 16; j++) {
            w[j] = (float)moe_kvalues_fp4[b[1 + j] & 15] * d;
            w[j + 16] = (float)moe_kvalues_fp4[b[1 + j] >> 4] * d;
        }
        break;
    }
    case MOE_T_NVFP4: {
        for (int s = 0; s < 4; s++) {
            const float d = moe_ue4m3_half[b[s]];
            for (int j = 0; j < 8; j++) {
                const uint8_t q = b[4 + 8 * s + j];
                w[16 * s + j] = (float)moe_kvalues_fp4[q & 15] * d;
                w[16 * s + j + 8] = (float)moe_kvalues_fp4[q >> 4] * d;
            }
        }
        break;
    }
    case MOE_T_IQ2_XXS: case MOE_T_IQ2_XS: case MOE_T_IQ2_S:
        moe_iq2_dq_block(type, b, w);  /* iq2_ref.c */
        break;
    default:
        moe_kq_dq_block(type, b, w);  /* Q2_K, Q3_K, Q5_K, IQ4_XS: kquant_ref.c */
        break;
    }
}

/* Values [k0, k0+cnt) of a row of F32/F16/BF16. */
static void dq_plain(uint32_t type, const uint8_t *row, int64_t k0, int64_t cnt, float *w) {
    const size_t vb = moe_type_get(type)->block_bytes;
    for (int64_t i = 0; i < cnt; i++) {
        const uint8_t *p = row + (size_t)(k0 + i) * vb;
        if (type == MOE_T_F32) memcpy(&w[i], p, 4);
        else if (type == MOE_T_F16) w[i] = moe_f16_to_f32(moe_rd16(p));
        else w[i] = moe_bf16_to_f32(moe_rd16(p));
    }
}

static bool is_plain(uint32_t type) {
    const moe_type_info *ti = moe_type_get(type);
    return ti && ti->plain;
}

void moe_dequant_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const moe_type_info *ti = moe_type_get(type);
    if (!ti || !ti->supported || n <= 0) return;
    const uint8_t *s = src;
    if (is_plain(type)) { dq_plain(type, s, 0, n, dst); return; }
    for (int64_t b = 0; b < n / ti->block; b++)
        dq_block(type, s + (size_t)b * ti->block_bytes, dst + b * ti->block);
}

/* ---- quantization (ggml's reference rounding) --------------------------- */

/* ggml make_qx_quants(n, nmax, x, L, rmse_type = 1, qw = NULL). */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
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
        l = QMAX(-nmax, QMIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = moe_nearest_int(iscale * x[i]);
            l = QMAX(-nmax, QMIN(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                int l = moe_nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + QMAX(-nmax, QMIN(nmax - 1, l)));
            }
            scale = sumlx / suml2; best = scale * sumlx;
        }
    }
    return scale;
}

float moe_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                           uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = moe_nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)QMAX(0, QMIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = moe_nearest_int(iscale * (x[i] - min));
            l = QMAX(0, QMIN(nmax, l));
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* ggml best_index_mxfp4: the code whose value kv*d is nearest to x (first wins ties). */
static int best_index_fp4(float x, float d) {
    int best = 0;
    float best_err = fabsf(moe_kvalues_fp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        float err = fabsf(moe_kvalues_fp4[i] * d - x);
        if (err < best_err) { best = i; best_err = err; }
    }
    return best;
}

/* ggml_fp32_to_ue4m3: round-half-up on the 4th mantissa bit, saturating at 0x7E. */
static uint8_t f32_to_ue4m3(float x) {
    if (!(x > 0.0f)) return 0;
    if (x > 448.0f) x = 448.0f;
    uint32_t bits; memcpy(&bits, &x, 4);
    int e = (int)((bits >> 23) & 0xFF) - 127 + 7;
    int m = (bits >> 20) & 7;
    if (e <= 0) {
        int s = (int)(x * 512.0f + 0.5f);
        if (s > 7) s = 7;
        return s < 1 ? 0 : (uint8_t)s;
    }
    if (e >= 15) return 0x7E;
    m += (bits >> 19) & 1;
    if (m > 7) { m = 0; if (++e >= 15) return 0x7E; }
    return (uint8_t)((e << 3) | m);
}

static void q_q8_0(const float *x, uint8_t *y) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = QMAX(amax, fabsf(x[j]));
    const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
    moe_st16(y, moe_f32_to_f16(d));
    for (int j = 0; j < 32; j++) y[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

static void q_q4_0(const float *x, uint8_t *y) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    const float d = max / -8, id = d ? 1.0f / d : 0.0f;
    moe_st16(y, moe_f32_to_f16(d));
    for (int j = 0; j < 16; j++) {
        const uint8_t a = (uint8_t)QMIN(15, (int8_t)(x[j] * id + 8.5f));
        const uint8_t b = (uint8_t)QMIN(15, (int8_t)(x[j + 16] * id + 8.5f));
        y[2 + j] = (uint8_t)(a | b << 4);
    }
}

/* ggml quantize_row_q4_1_ref / q5_1_ref: d = (max - min) / (2^bits - 1), m = min;
 * code = (uint8_t)((x - min) * id + 0.5f) (Q4_1: through int8, capped at
 * 15; Q5_1: uncapped, its top bit lands in qh). */
static void q_q45_1(const float *x, uint8_t *y, const int bits) {
    float min = 3.402823466e+38f, max = -3.402823466e+38f;
    for (int j = 0; j < 32; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / (float)((1 << bits) - 1), id = d ? 1.0f / d : 0.0f;
    moe_st16(y, moe_f32_to_f16(d));
    moe_st16(y + 2, moe_f32_to_f16(min));
    uint32_t qh = 0;
    uint8_t *qs = y + (bits == 5 ? 8 : 4);
    for (int j = 0; j < 16; j++) {
        const float x0 = (x[j] - min) * id, x1 = (x[j + 16] - min) * id;
        uint8_t a, b;
        if (bits == 4) {
            a = (uint8_t)QMIN(15, (int8_t)(x0 + 0.5f));
            b = (uint8_t)QMIN(15, (int8_t)(x1 + 0.5f));
        } else {
            a = (uint8_t)(x0 + 0.5f);
            b = (uint8_t)(x1 + 0.5f);
        }
        qs[j] = (uint8_t)((a & 15) | (b & 15) << 4);
        qh |= (uint32_t)((a & 0x10u) >> 4) << j;
        qh |= (uint32_t)((b & 0x10u) >> 4) << (j + 16);
    }
    if (bits == 5) memcpy(y + 4, &qh, 4);
}

/* ggml quantize_row_q5_0_ref: as Q4_0 with d = max / -16 and codes to 31. */
static void q_q5_0(const float *x, uint8_t *y) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) { amax = fabsf(x[j]); max = x[j]; }
    const float d = max / -16, id = d ? 1.0f / d : 0.0f;
    moe_st16(y, moe_f32_to_f16(d));
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        const uint8_t a = (uint8_t)QMIN(31, (int8_t)(x[j] * id + 16.5f));
        const uint8_t b = (uint8_t)QMIN(31, (int8_t)(x[j + 16] * id + 16.5f));
        y[6 + j] = (uint8_t)((a & 15) | (b & 15) << 4);
        qh |= (uint32_t)((a & 0x10u) >> 4) << j;
        qh |= (uint32_t)((b & 0x10u) >> 4) << (j + 16);
    }
    memcpy(y + 2, &qh, 4);
}

/* ggml best_index_int8: the nearest level of a sorted table (ties: the
 * upper one; below / above the range: the end). */
static int best_index_iq4nl(float x) {
    const int8_t *val = moe_kvalues_iq4nl;
    if (x <= val[0]) return 0;
    if (x >= val[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav; else ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* ggml quantize_iq4_nl without an importance matrix (llama-quantize's
 * path: quantize_row_iq4_nl_impl(32, 32, ..., ntry = 7)): weights x^2, the
 * least-squares scale of the first assignment, then 15 trial scales
 * (itry - 127) / max, the best by sumqx^2 / sumq2, and the codes again
 * for the chosen scale. */
static void q_iq4_nl(const float *x, uint8_t *y) {
    const int8_t *val = moe_kvalues_iq4nl;
    float wt[32], amax = 0.0f, max = 0.0f, d = 0.0f;
    uint8_t L[32];
    for (int j = 0; j < 32; j++) {
        wt[j] = x[j] * x[j];
        const float ax = fabsf(x[j]);
        if (ax > amax) { amax = ax; max = x[j]; }
    }
    if (amax >= 1e-15f) {
        float id = 1 / (-max / val[0]), sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float q = val[best_index_iq4nl(id * x[j])];
            sumqx += wt[j] * q * x[j];
            sumq2 += wt[j] * q * q;
        }
        d = sumqx / sumq2;
        float best = d * sumqx;
        for (int itry = -7; itry <= 7; ++itry) {
            id = (itry + val[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; j++) {
                const float q = val[best_index_iq4nl(id * x[j])];
                sumqx += wt[j] * q * x[j];
                sumq2 += wt[j] * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) { d = sumqx / sumq2; best = d * sumqx; }
        }
    }
    moe_st16(y, moe_f32_to_f16(d));
    const float id = d ? 1 / d : 0;
    for (int j = 0; j < 32; j++) L[j] = (uint8_t)best_index_iq4nl(id * x[j]);
    for (int j = 0; j < 16; j++) y[2 + j] = (uint8_t)(L[j] | L[j + 16] << 4);
}

void moe_k4_scales_codes(const float *x, uint8_t *y, uint8_t *L, int nmax, float rmin, int nstep) {
    uint8_t Laux[32], *sc = y + 4;
    float weights[32], mins[8], scales[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = moe_make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(sc, 0, 12);
    for (int j = 0; j < 8; ++j) {
        uint8_t ls = (uint8_t)moe_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)moe_nearest_int(inv_min * mins[j]);
        ls = QMIN(63, ls);
        lm = QMIN(63, lm);
        if (j < 4) {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            sc[j - 4] |= (uint8_t)((ls >> 4) << 6);
            sc[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    moe_st16(y, moe_f32_to_f16(max_scale / 63.f));
    moe_st16(y + 2, moe_f32_to_f16(max_min / 63.f));
    const float fd = moe_f16_to_f32(moe_rd16(y)), fm = moe_f16_to_f32(moe_rd16(y + 2));
    for (int j = 0; j < 8; ++j) {
        uint8_t s, m;
        moe_q4k_scale_min(j, sc, &s, &m);
        const float d = fd * s;
        if (!d) continue;
        const float dm = fm * m;
        for (int ii = 0; ii < 32; ++ii) {
            int l = moe_nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)QMAX(0, QMIN(nmax, l));
        }
    }
}

static void q_q4_k(const float *x, uint8_t *y) {
    uint8_t L[256], *q = y + 16;
    moe_k4_scales_codes(x, y, L, 15, -1.f, 20);
    for (int j = 0; j < 256; j += 64) {
        for (int l = 0; l < 32; ++l) q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        q += 32;
    }
}

static void q_q6_k(const float *x, uint8_t *y) {
    int8_t L[256];
    float scales[16], max_scale = 0, max_abs_scale = 0;
    uint8_t *ql = y, *qh = y + 128;
    int8_t *sc = (int8_t *)(y + 192);
    for (int ib = 0; ib < 16; ++ib) {
        const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
        scales[ib] = scale;
        if (fabsf(scale) > max_abs_scale) { max_abs_scale = fabsf(scale); max_scale = scale; }
    }
    if (max_abs_scale < 1e-15f) { memset(y, 0, QB_Q6_K); return; }
    float iscale = -128.f / max_scale;
    moe_st16(y + 208, moe_f32_to_f16(1 / iscale));
    for (int ib = 0; ib < 16; ++ib) sc[ib] = (int8_t)QMIN(127, moe_nearest_int(iscale * scales[ib]));
    const float fd = moe_f16_to_f32(moe_rd16(y + 208));
    for (int j = 0; j < 16; ++j) {
        float d = fd * sc[j];
        if (!d) continue;
        for (int ii = 0; ii < 16; ++ii) {
            int l = moe_nearest_int(x[16 * j + ii] / d);
            L[16 * j + ii] = (int8_t)(QMAX(-32, QMIN(31, l)) + 32);
        }
    }
    for (int j = 0; j < 256; j += 128) {
        for (int l = 0; l < 32; ++l) {
            const uint8_t q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
            const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
            ql[l] = (uint8_t)(q1 | (q3 << 4));
            ql[l + 32] = (uint8_t)(q2 | (q4 << 4));
            qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) |
                              ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
        }
        ql += 64;
        qh += 32;
    }
}

static void q_mxfp4(const float *x, uint8_t *y) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]);
    /* ggml: e = floor(log2(amax)) - 2 + 127 (0 for amax == 0). Clamped to
     * [0, 254] where ggml's conversion would be undefined (|amax| < 2^-125
     * or Inf). */
    float fe = amax > 0.0f ? floorf(log2f(amax)) - 2 + 127 : 0;
    if (!(fe >= 0)) fe = 0;
    if (fe > 254) fe = 254;
    const uint8_t e = (uint8_t)fe;
    const float d = moe_e8m0_half(e);
    y[0] = e;
    for (int j = 0; j < 16; j++)
        y[1 + j] = (uint8_t)(best_index_fp4(x[j], d) | best_index_fp4(x[j + 16], d) << 4);
}

static void q_nvfp4(const float *x, uint8_t *y) {
    for (int s = 0; s < 4; s++) {
        const float *xb = x + 16 * s;
        float amax = 0.0f;
        for (int j = 0; j < 16; j++)
            if (amax < fabsf(xb[j])) amax = fabsf(xb[j]);
        const uint8_t ue = f32_to_ue4m3(amax / 6.0f);
        y[s] = ue;
        const float d = moe_ue4m3_half[ue];
        for (int j = 0; j < 8; j++)
            y[4 + 8 * s + j] = (uint8_t)(best_index_fp4(xb[j], d) | best_index_fp4(xb[j + 8], d) << 4);
    }
}

void moe_quantize_row(uint32_t type, const float *src, void *dst, int64_t n) {
    const moe_type_info *ti = moe_type_get(type);
    if (!ti || !ti->supported || n <= 0) return;
    uint8_t *d = dst;
    if (is_plain(type)) {
        for (int64_t i = 0; i < n; i++) {
            if (type == MOE_T_F32) memcpy(d + 4 * i, &src[i], 4);
            else moe_st16(d + 2 * i, type == MOE_T_F16 ? moe_f32_to_f16(src[i]) : moe_f32_to_bf16(src[i]));
        }
        return;
    }
    for (int64_t b = 0; b < n / ti->block; b++) {
        const float *x = src + b * ti->block;
        uint8_t *y = d + (size_t)b * ti->block_bytes;
        if (moe_iq3_type(type)) { moe_iq3_quantize_block(type, x, y); continue; }  /* iq3_ref.c */
        switch (type) {
        case MOE_T_Q8_0: q_q8_0(x, y); break;
        case MOE_T_Q4_0: q_q4_0(x, y); break;
        case MOE_T_Q4_1: q_q45_1(x, y, 4); break;
        case MOE_T_Q5_0: q_q5_0(x, y); break;
        case MOE_T_Q5_1: q_q45_1(x, y, 5); break;
        case MOE_T_IQ4_NL: q_iq4_nl(x, y); break;
        case MOE_T_Q4_K: q_q4_k(x, y); break;
        case MOE_T_Q6_K: q_q6_k(x, y); break;
        case MOE_T_MXFP4: q_mxfp4(x, y); break;
        case MOE_T_NVFP4: q_nvfp4(x, y); break;
        case MOE_T_IQ2_XXS: case MOE_T_IQ2_XS: case MOE_T_IQ2_S:
            moe_iq2_quantize_block(type, x, y); break;  /* iq2_quant.c */
        default: moe_kq_quantize_block(type, x, y); break;  /* kquant_ref.c */
        }
    }
}

/* ---- scalar kernels: the dot-product contract, literally ----------------- */

/* The fixed reduction tree of quant.h. */
static float reduce16(const float a[16]) {
    float b[8], c[4];
    for (int l = 0; l < 8; l++) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; l++) c[l] = b[l] + b[l + 4];
    const float e0 = c[0] + c[2], e1 = c[1] + c[3];
    return e0 + e1;
}

/* One output: 16 lanes, lane k%16 accumulates w[k]*x[k] with fmaf in order.
 * Block b of a block-format row is at row + b * bstride (block_bytes for the
 * plain layout, 4 * block_bytes inside an x4 group). */
static float row_dot_strided(uint32_t type, const uint8_t *row, const float *x, int64_t n, size_t bstride);
static float row_dot(uint32_t type, const uint8_t *row, const float *x, int64_t n) {
    return row_dot_strided(type, row, x, n, is_plain(type) ? 0 : moe_type_get(type)->block_bytes);
}
static float row_dot_strided(uint32_t type, const uint8_t *row, const float *x, int64_t n, size_t bstride) {
    float acc[16] = {0}, w[256];
    /* plain types: 256 contiguous values at a time, or (x4) one 32-value run
     * per bstride bytes */
    const bool plain = is_plain(type);
    const int64_t blk = plain ? (bstride ? MOE_X4_PLAIN_RUN : 256) : moe_type_get(type)->block;
    for (int64_t k0 = 0; k0 < n; k0 += blk) {
        const int64_t cnt = n - k0 < blk ? n - k0 : blk;
        if (plain && bstride) dq_plain(type, row + (size_t)(k0 / blk) * bstride, 0, cnt, w);
        else if (plain) dq_plain(type, row, k0, cnt, w);
        else dq_block(type, row + (size_t)(k0 / blk) * bstride, w);
        for (int64_t i = 0; i < cnt; i++) {
            const int64_t k = k0 + i;
            acc[k & 15] = fmaf(w[i], x[k], acc[k & 15]);
        }
    }
    return reduce16(acc);
}

#define REF_KERNELS(name, type)                                                                   \
    static void gemv_##name(const void *w, size_t rb, int64_t nrows, const float *x, float *y,    \
                            int64_t n) {                                                          \
        for (int64_t r = 0; r < nrows; r++) y[r] = row_dot(type, (const uint8_t *)w + r * rb, x, n); \
    }                                                                                             \
    static void gemm_##name(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs,   \
                            int64_t ntok, float *y, size_t ys, int64_t n) {                       \
        for (int64_t t = 0; t < ntok; t++) gemv_##name(w, rb, nrows, x + t * xs, y + t * ys, n);  \
    }
/* x4 layout: row r of a full group g = r/4 starts at g*4*rb + (r%4)*unit
 * and its units are 4*unit apart (unit = moe_x4_unit_bytes); trailing rows
 * are plain. */
#define REF_KERNELS_X4(name, type)                                                                \
    static void gemv_x4_##name(const void *w, size_t rb, int64_t nrows, const float *x, float *y, \
                               int64_t n) {                                                       \
        const uint8_t *W = w;                                                                     \
        const size_t bb = moe_x4_unit_bytes(type);                                                \
        const int64_t full = nrows - nrows % 4;                                                   \
        for (int64_t r = 0; r < nrows; r++)                                                       \
            y[r] = r < full ? row_dot_strided(type, W + (size_t)(r & ~3) * rb + (size_t)(r & 3) * bb, x, n, 4 * bb) \
                            : row_dot(type, W + (size_t)r * rb, x, n);                            \
    }                                                                                             \
    static void gemm_x4_##name(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs,\
                               int64_t ntok, float *y, size_t ys, int64_t n) {                    \
        for (int64_t t = 0; t < ntok; t++) gemv_x4_##name(w, rb, nrows, x + t * xs, y + t * ys, n); \
    }
REF_KERNELS(f32, MOE_T_F32)
REF_KERNELS(f16, MOE_T_F16)
REF_KERNELS(bf16, MOE_T_BF16)
REF_KERNELS(q8_0, MOE_T_Q8_0)
REF_KERNELS(q4_0, MOE_T_Q4_0)
REF_KERNELS(q4_1, MOE_T_Q4_1)
REF_KERNELS(q5_0, MOE_T_Q5_0)
REF_KERNELS(q5_1, MOE_T_Q5_1)
REF_KERNELS(iq4_nl, MOE_T_IQ4_NL)
REF_KERNELS(q4_k, MOE_T_Q4_K)
REF_KERNELS(q6_k, MOE_T_Q6_K)
REF_KERNELS(mxfp4, MOE_T_MXFP4)
REF_KERNELS(nvfp4, MOE_T_NVFP4)
REF_KERNELS_X4(f32, MOE_T_F32)
REF_KERNELS_X4(f16, MOE_T_F16)
REF_KERNELS_X4(bf16, MOE_T_BF16)
REF_KERNELS_X4(q8_0, MOE_T_Q8_0)
REF_KERNELS_X4(q4_0, MOE_T_Q4_0)
REF_KERNELS_X4(q4_1, MOE_T_Q4_1)
REF_KERNELS_X4(q5_0, MOE_T_Q5_0)
REF_KERNELS_X4(q5_1, MOE_T_Q5_1)
REF_KERNELS_X4(iq4_nl, MOE_T_IQ4_NL)
REF_KERNELS_X4(q4_k, MOE_T_Q4_K)
REF_KERNELS_X4(q6_k, MOE_T_Q6_K)
REF_KERNELS_X4(mxfp4, MOE_T_MXFP4)
REF_KERNELS_X4(nvfp4, MOE_T_NVFP4)
/* Q5_K, Q3_K, Q2_K, IQ4_XS (specification: kquant_ref.c) */
REF_KERNELS(q5_k, MOE_T_Q5_K) REF_KERNELS_X4(q5_k, MOE_T_Q5_K)
REF_KERNELS(q3_k, MOE_T_Q3_K) REF_KERNELS_X4(q3_k, MOE_T_Q3_K)
REF_KERNELS(q2_k, MOE_T_Q2_K) REF_KERNELS_X4(q2_k, MOE_T_Q2_K)
REF_KERNELS(iq4_xs, MOE_T_IQ4_XS) REF_KERNELS_X4(iq4_xs, MOE_T_IQ4_XS)
/* IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (specification: iq3_ref.c) */
REF_KERNELS(iq3_xxs, MOE_T_IQ3_XXS) REF_KERNELS_X4(iq3_xxs, MOE_T_IQ3_XXS)
REF_KERNELS(iq3_s, MOE_T_IQ3_S) REF_KERNELS_X4(iq3_s, MOE_T_IQ3_S)
REF_KERNELS(iq1_s, MOE_T_IQ1_S) REF_KERNELS_X4(iq1_s, MOE_T_IQ1_S)
REF_KERNELS(iq1_m, MOE_T_IQ1_M) REF_KERNELS_X4(iq1_m, MOE_T_IQ1_M)

bool moe_x4_fits(uint32_t type, int64_t n) {
    return moe_type_has_x4(type) && n > 0 && (!is_plain(type) || n % MOE_X4_PLAIN_RUN == 0);
}

size_t moe_x4_unit_bytes(uint32_t type) {
    return is_plain(type) ? MOE_X4_PLAIN_RUN * moe_type_get(type)->block_bytes : moe_type_get(type)->block_bytes;
}

void moe_repack_x4(uint32_t type, const void *src, void *dst, int64_t nrows, int64_t n) {
    const size_t bb = moe_x4_unit_bytes(type), rb = (size_t)moe_row_bytes(type, (uint64_t)n), nb = rb / bb;
    const uint8_t *S = src;
    uint8_t *D = dst;
    const int64_t full = nrows - nrows % 4;
    for (int64_t g = 0; g < full; g += 4)
        for (size_t b = 0; b < nb; b++)
            for (int rr = 0; rr < 4; rr++)
                memcpy(D + (size_t)g * rb + (4 * b + (size_t)rr) * bb, S + (size_t)(g + rr) * rb + b * bb, bb);
    memcpy(D + (size_t)full * rb, S + (size_t)full * rb, (size_t)(nrows - full) * rb);
}

static float dot_f32_ref(const float *a, const float *b, int64_t n) {
    float acc[16] = {0};
    for (int64_t k = 0; k < n; k++) acc[k & 15] = fmaf(a[k], b[k], acc[k & 15]);
    return reduce16(acc);
}

static void axpy_f32_ref(float a, const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = fmaf(a, x[i], y[i]);
}

#define ENTRY(id, name) .gemv[id] = gemv_##name, .gemm[id] = gemm_##name
#define ENTRY_X4(id, name) .gemv_x4[id] = gemv_x4_##name, .gemm_x4[id] = gemm_x4_##name
const moe_kernels moe_kernels_scalar_tab = {
    .isa = MOE_ISA_SCALAR, .name = "scalar",
    ENTRY(MOE_T_F32, f32), ENTRY(MOE_T_F16, f16), ENTRY(MOE_T_BF16, bf16),
    ENTRY(MOE_T_Q8_0, q8_0), ENTRY(MOE_T_Q4_0, q4_0), ENTRY(MOE_T_Q4_K, q4_k),
    ENTRY(MOE_T_Q4_1, q4_1), ENTRY(MOE_T_Q5_0, q5_0), ENTRY(MOE_T_Q5_1, q5_1), ENTRY(MOE_T_IQ4_NL, iq4_nl),
    ENTRY(MOE_T_Q6_K, q6_k), ENTRY(MOE_T_MXFP4, mxfp4), ENTRY(MOE_T_NVFP4, nvfp4),
    ENTRY_X4(MOE_T_F32, f32), ENTRY_X4(MOE_T_F16, f16), ENTRY_X4(MOE_T_BF16, bf16),
    ENTRY_X4(MOE_T_Q8_0, q8_0), ENTRY_X4(MOE_T_Q4_0, q4_0), ENTRY_X4(MOE_T_Q4_K, q4_k),
    ENTRY_X4(MOE_T_Q4_1, q4_1), ENTRY_X4(MOE_T_Q5_0, q5_0), ENTRY_X4(MOE_T_Q5_1, q5_1), ENTRY_X4(MOE_T_IQ4_NL, iq4_nl),
    ENTRY_X4(MOE_T_Q6_K, q6_k), ENTRY_X4(MOE_T_MXFP4, mxfp4), ENTRY_X4(MOE_T_NVFP4, nvfp4),
    .dot_f32 = dot_f32_ref, .axpy_f32 = axpy_f32_ref,
    A8_ENTRY(MOE_T_Q8_0, q8_0, ref), A8_ENTRY(MOE_T_NVFP4, nvfp4, ref),
    A8_ENTRY(MOE_T_MXFP4, mxfp4, ref), A8_ENTRY(MOE_T_Q4_0, q4_0, ref), A8_ENTRY(MOE_T_Q4_K, q4_k, ref),
    A8_ENTRY(MOE_T_Q6_K, q6_k, ref),
    A8_ENTRY(MOE_T_Q4_1, q4_1, ref), A8_ENTRY(MOE_T_Q5_0, q5_0, ref), A8_ENTRY(MOE_T_Q5_1, q5_1, ref),
    A8_ENTRY(MOE_T_IQ4_NL, iq4_nl, ref),
    A8_ENTRY(MOE_T_Q5_K, q5_k, ref), A8_ENTRY(MOE_T_Q3_K, q3_k, ref), A8_ENTRY(MOE_T_Q2_K, q2_k, ref),
    A8_ENTRY(MOE_T_IQ4_XS, iq4_xs, ref),
    A8IQ_ENTRIES(ref),  /* the i-quants: act8_iq_*.c */
    ENTRY(MOE_T_Q5_K, q5_k), ENTRY_X4(MOE_T_Q5_K, q5_k), ENTRY(MOE_T_Q3_K, q3_k), ENTRY_X4(MOE_T_Q3_K, q3_k),
    ENTRY(MOE_T_Q2_K, q2_k), ENTRY_X4(MOE_T_Q2_K, q2_k), ENTRY(MOE_T_IQ4_XS, iq4_xs), ENTRY_X4(MOE_T_IQ4_XS, iq4_xs),
    ENTRY(MOE_T_IQ3_XXS, iq3_xxs), ENTRY_X4(MOE_T_IQ3_XXS, iq3_xxs), ENTRY(MOE_T_IQ3_S, iq3_s), ENTRY_X4(MOE_T_IQ3_S, iq3_s),
    ENTRY(MOE_T_IQ1_S, iq1_s), ENTRY_X4(MOE_T_IQ1_S, iq1_s), ENTRY(MOE_T_IQ1_M, iq1_m), ENTRY_X4(MOE_T_IQ1_M, iq1_m),
    .quantize_act8 = moe_quantize_act8,
    IQ2_ENTRIES(ref),  /* IQ2_XXS, IQ2_XS, IQ2_S: iq2_ref.c */
};
