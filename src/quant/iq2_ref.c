/* iq2_ref.c — the specification of IQ2_XXS, IQ2_XS and IQ2_S: bit layouts
 * (ggml's, byte for byte), dequantization as exact float operations (equal,
 * bit for bit, to ggml's dequantize_row_iq2_*), the kernels of the FP32 dot
 * contract (quant.h) over them, and a quantizer of our own.
 *
 * All multi-byte fields little-endian; d is an f16 converted exactly
 * (moe_f16_to_f32). A block holds 256 values as 8 sub-blocks of 32 (ib =
 * 0..7), each 4 groups of 8 (l = 0..3; group g = 4 ib + l holds values
 * 8g..8g+7). A group is a codebook entry G (8 magnitudes, byte j of the
 * uint64 for value j, each 8, 25 or 43: iq2_tables.c) and 8 signs.
 *
 * IQ2_XXS (256 values, 66 bytes = 2.0625 bits per weight):
 *        f16 d | 8 x { u8 idx[4] | u32 aux }.
 *        Group l of sub-block ib: G = iq2xxs_grid[idx[l]], signs =
 *        ksigns((aux >> 7l) & 127); scale code s = aux >> 28 (one per 32).
 * IQ2_XS (256 values, 74 bytes = 2.3125 bpw): f16 d | u16 qs[32] | u8 scales[8].
 *        Group g: G = iq2xs_grid[qs[g] & 511], signs = ksigns(qs[g] >> 9);
 *        s = (scales[ib] >> 4 (l / 2)) & 15 (one per 16 values).
 * IQ2_S  (256 values, 82 bytes = 2.5625 bpw):
 *        f16 d | u8 lo[32] | u8 signs[32] | u8 qh[8] | u8 scales[8].
 *        Group g: G = iq2s_grid[lo[g] | ((qh[ib] >> 2l) & 3) << 8], the 8
 *        sign bits are signs[g] itself; s as IQ2_XS.
 * ksigns(c) = c | parity(c) << 7 (moe_iq_signs, iq_common.h: ggml's
 * ksigns_iq2xs), so XXS and XS groups always have an even number of minus
 * signs. Bit j of the signs set: value j is negative.
 *
 * Value j of a group: db = d * (0.5f + (float)s) * 0.25f (left to right, as
 * ggml), w = db * (float)(bit j ? -G_j : G_j).
 * Every step is exact for finite d: d has 11 significant bits, 0.5 + s at
 * most 5 (x.5 with s <= 15), so d * (0.5 + s) has at most 16 and is well
 * inside the normal range (|d| >= 2^-24); * 0.25 is exact (>= 2^-27); G_j
 * has at most 6 bits, so the product has at most 22. ggml forms
 * (db * G_j) * (±1.f): the same exact value, the same zero sign
 * (db = ±0 included), ±Inf alike. A NaN d gives NaN values in both; their
 * sign is not ggml's to define (a compiler may turn its * -1.f into a sign
 * flip: GCC -O2 does), here it is d's (a NaN operand propagates). The SIMD
 * kernels form w the same way: convert the signed byte, one multiply by
 * db, so every level gives these bits, NaN included. */
#include "quant/iq2.h"
#include "base/util.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

/* ---- dequantization ----------------------------------------------------- */

void moe_iq2_dq_block(uint32_t type, const uint8_t *b, float *w) {
    const float d = moe_f16_to_f32(moe_rd16(b));
    for (int g = 0; g < 32; g++) {
        uint64_t grid;
        uint8_t signs;
        unsigned sc;
        moe_iq2_group(type, b, g, &grid, &signs, &sc);
        const float db = moe_iq2_db(d, sc);
        for (int j = 0; j < 8; j++) {
            const int m = (int)((grid >> (8 * j)) & 255);
            w[8 * g + j] = db * (float)((signs >> j) & 1 ? -m : m);
        }
    }
}

/* ---- the dot-product contract (quant.h), literally ------------------------ */

static float reduce16(const float a[16]) {
    float b[8], c[4];
    for (int l = 0; l < 8; l++) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; l++) c[l] = b[l] + b[l + 4];
    const float e0 = c[0] + c[2], e1 = c[1] + c[3];
    return e0 + e1;
}

/* One output; block i of the row at row + i * bstride. */
static float row_dot(uint32_t type, const uint8_t *row, size_t bstride, const float *x, int64_t n) {
    float acc[16] = {0}, w[256];
    for (int64_t k0 = 0; k0 < n; k0 += 256) {
        moe_iq2_dq_block(type, row + (size_t)(k0 / 256) * bstride, w);
        for (int i = 0; i < 256; i++) acc[i & 15] = fmaf(w[i], x[k0 + i], acc[i & 15]);
    }
    return reduce16(acc);
}

/* Plain rows; x4 (quant.h): row r of a full group starts at (r & ~3) * rb +
 * (r & 3) * block_bytes, its blocks 4 block_bytes apart; the last nrows % 4
 * rows are plain. */
static void gemv_ref(uint32_t type, const void *w, size_t rb, int64_t nrows, const float *x, float *y, int64_t n,
                     bool x4) {
    const uint8_t *W = w;
    const size_t qb = moe_type_get(type)->block_bytes;
    const int64_t full = x4 ? nrows - nrows % 4 : 0;
    for (int64_t r = 0; r < nrows; r++)
        y[r] = r < full ? row_dot(type, W + (size_t)(r & ~3) * rb + (size_t)(r & 3) * qb, 4 * qb, x, n)
                        : row_dot(type, W + (size_t)r * rb, qb, x, n);
}

#define IQ2_REF(name, type)                                                                        \
    void moe_gemv_##name##_ref(const void *w, size_t rb, int64_t nrows, const float *x, float *y, int64_t n) { \
        gemv_ref(type, w, rb, nrows, x, y, n, false);                                              \
    }                                                                                              \
    void moe_gemm_##name##_ref(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs, \
                               int64_t ntok, float *y, size_t ys, int64_t n) {                     \
        for (int64_t t = 0; t < ntok; t++) gemv_ref(type, w, rb, nrows, x + t * xs, y + t * ys, n, false); \
    }                                                                                              \
    void moe_gemv_x4_##name##_ref(const void *w, size_t rb, int64_t nrows, const float *x, float *y, int64_t n) { \
        gemv_ref(type, w, rb, nrows, x, y, n, true);                                               \
    }                                                                                              \
    void moe_gemm_x4_##name##_ref(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs, \
                                  int64_t ntok, float *y, size_t ys, int64_t n) {                  \
        for (int64_t t = 0; t < ntok; t++) gemv_ref(type, w, rb, nrows, x + t * xs, y + t * ys, n, true); \
    }
IQ2_REF(iq2_xxs, MOE_T_IQ2_XXS)
IQ2_REF(iq2_xs, MOE_T_IQ2_XS)
IQ2_REF(iq2_s, MOE_T_IQ2_S)
