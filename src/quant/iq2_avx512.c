/* iq2_avx512.c — IQ2_XXS / IQ2_XS / IQ2_S kernels at the AVX-512 level,
 * bit-identical to iq2_ref.c (the specification).
 *
 * One zmm accumulator holds the 16 lanes of the contract. A 16-value chunk
 * is groups 2c and 2c+1 of a block, which share one scale db in every
 * format: their two codebook entries as 16 bytes widened to 16 int32, the
 * sign bits of the two groups (16 bits: value j of the chunk at bit j) used
 * directly as a write mask of 0 - q, then one exact conversion and one
 * multiply by db: the reference's w = db * (float)(±G), formed the same way. */
#include "quant/iq2.h"

#include <immintrin.h>

#include "quant/hsum_avx512.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* Chunk c (values 16c..16c+15) of block b with scale base d. */
ALWAYS_INLINE __m512 chunk16(const uint32_t type, const uint8_t *b, int c, float d) {
    uint64_t g0, g1;
    uint8_t s0, s1;
    unsigned sc, sc1;
    moe_iq2_group(type, b, 2 * c, &g0, &s0, &sc);
    moe_iq2_group(type, b, 2 * c + 1, &g1, &s1, &sc1);
    const __m512i q = _mm512_cvtepu8_epi32(_mm_set_epi64x((long long)g1, (long long)g0));
    const __m512i s = _mm512_mask_sub_epi32(q, (__mmask16)(s0 | s1 << 8), _mm512_setzero_si512(), q);
    return _mm512_mul_ps(_mm512_set1_ps(moe_iq2_db(d, sc)), _mm512_cvtepi32_ps(s));
}

/* The R x T tile: block i of row rr at w + rr * rs + i * S * QB; tokens tt
 * at x + tt * xs, outputs at y[tt * ys + rr]. */
ALWAYS_INLINE void tile(const uint32_t type, const size_t QB, const uint8_t *w, size_t rs, const float *x, size_t xs,
                        float *y, size_t ys, int64_t n, const int R, const int T, const int S) {
    __m512 acc[4][2];
    UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)
        acc[rr][tt] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        UNROLL for (int rr = 0; rr < R; rr++) {
            const uint8_t *b = w + rr * rs + (size_t)i * S * QB;
            _mm_prefetch((const char *)b + 8192, _MM_HINT_T0);
            const float d = moe_f16_f32_tab[moe_rd16(b)];
            for (int c = 0; c < 16; c++) {
                const __m512 v = chunk16(type, b, c, d);
                UNROLL for (int tt = 0; tt < T; tt++)
                    acc[rr][tt] = _mm512_fmadd_ps(v, _mm512_loadu_ps(x + tt * xs + i * 256 + 16 * c), acc[rr][tt]);
            }
        }
    }
    UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)
        y[tt * ys + rr] = hsum16(acc[rr][tt]);
}

/* gemv: 4 rows per tile (x4: one group's interleaved stream), the last
 * nrows % 4 alone. */
ALWAYS_INLINE void gemv_body(const uint32_t type, const size_t QB, const uint8_t *W, size_t rb, int64_t nrows,
                             const float *x, float *y, int64_t n, const int x4) {
    int64_t r = 0;
    for (; r + 4 <= nrows; r += 4) {
        if (x4) tile(type, QB, W + r * rb, QB, x, 0, y + r, 0, n, 4, 1, 4);
        else tile(type, QB, W + r * rb, rb, x, 0, y + r, 0, n, 4, 1, 1);
    }
    for (; r < nrows; r++) tile(type, QB, W + r * rb, rb, x, 0, y + r, 0, n, 1, 1, 1);
}

/* gemm: tokens in blocks of 32; 2 rows x 2 tokens per tile (a group of 4
 * in x4 is two such row pairs); the last rows alone. */
ALWAYS_INLINE void gemm_body(const uint32_t type, const size_t QB, const uint8_t *W, size_t rb, int64_t nrows,
                             const float *x, size_t xs, int64_t ntok, float *y, size_t ys, int64_t n, const int x4) {
    for (int64_t t0 = 0; t0 < ntok; t0 += 32) {
        const int64_t t1 = t0 + 32 < ntok ? t0 + 32 : ntok;
        int64_t r = 0;
        for (; r + (x4 ? 4 : 2) <= nrows; r += x4 ? 4 : 2)
            for (int h = 0; h < (x4 ? 4 : 2); h += 2) {
                const uint8_t *g = x4 ? W + r * rb + h * QB : W + (r + h) * rb;
                const size_t rs = x4 ? QB : rb;
                int64_t t = t0;
                for (; t + 2 <= t1; t += 2) {
                    if (x4) tile(type, QB, g, rs, x + t * xs, xs, y + t * ys + r + h, ys, n, 2, 2, 4);
                    else tile(type, QB, g, rs, x + t * xs, xs, y + t * ys + r + h, ys, n, 2, 2, 1);
                }
                for (; t < t1; t++) {
                    if (x4) tile(type, QB, g, rs, x + t * xs, xs, y + t * ys + r + h, ys, n, 2, 1, 4);
                    else tile(type, QB, g, rs, x + t * xs, xs, y + t * ys + r + h, ys, n, 2, 1, 1);
                }
            }
        for (; r < nrows; r++) {
            int64_t t = t0;
            for (; t + 2 <= t1; t += 2) tile(type, QB, W + r * rb, rb, x + t * xs, xs, y + t * ys + r, ys, n, 1, 2, 1);
            for (; t < t1; t++) tile(type, QB, W + r * rb, rb, x + t * xs, xs, y + t * ys + r, ys, n, 1, 1, 1);
        }
    }
}

#define IQ2_KERNELS(name, TYPE, QB)                                                                \
    void moe_gemv_##name##_avx512(const void *w, size_t rb, int64_t nrows, const float *x, float *y, int64_t n) { \
        gemv_body(TYPE, QB, w, rb, nrows, x, y, n, 0);                                             \
    }                                                                                              \
    void moe_gemv_x4_##name##_avx512(const void *w, size_t rb, int64_t nrows, const float *x, float *y, int64_t n) { \
        gemv_body(TYPE, QB, w, rb, nrows, x, y, n, 1);                                             \
    }                                                                                              \
    void moe_gemm_##name##_avx512(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs, int64_t ntok, \
                                float *y, size_t ys, int64_t n) {                                  \
        gemm_body(TYPE, QB, w, rb, nrows, x, xs, ntok, y, ys, n, 0);                               \
    }                                                                                              \
    void moe_gemm_x4_##name##_avx512(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs,        \
                                   int64_t ntok, float *y, size_t ys, int64_t n) {                 \
        gemm_body(TYPE, QB, w, rb, nrows, x, xs, ntok, y, ys, n, 1);                               \
    }
IQ2_KERNELS(iq2_xxs, MOE_T_IQ2_XXS, QB_IQ2_XXS)
IQ2_KERNELS(iq2_xs, MOE_T_IQ2_XS, QB_IQ2_XS)
IQ2_KERNELS(iq2_s, MOE_T_IQ2_S, QB_IQ2_S)
