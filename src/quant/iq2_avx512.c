/* iq2_avx512.c — IQ2_XXS / IQ2_XS / IQ2_S kernels at the AVX-512 level,
 * bit-identical to iq2_ref.c (the specification).
 *
 * One zmm accumulator holds the 16 lanes of the contract. A sub-block of
 * 32 values is 4 groups: their codebook entries as 32 bytes in one ymm, the
 * 32 sign bits (moe_iq2_sub: value k at bit k) used directly as the byte
 * write mask of 0 - q, then per half of 16 (one scale db each) a widening,
 * one exact conversion and one multiply by db: the reference's
 * w = db * (float)(±G), formed the same way. Decoding whole sub-blocks
 * rather than 16-value chunks halves the scalar field work (bench_quant,
 * one core, GB/s per CPU-second, XXS / XS / S: 1.0 / 1.4 / 1.5 before). */
#include "quant/iq2.h"

#include <immintrin.h>

#include "quant/hsum_avx512.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* Sub-block ib (values 32ib..32ib+31) of block b with scale base d:
 * v[0] values 0..15, v[1] 16..31. The 32 codebook bytes in one ymm, the
 * 32 sign bits a byte mask of 0 - q. */
ALWAYS_INLINE void sub32(const uint32_t type, const uint8_t *b, int ib, float d, __m512 *v) {
    uint64_t g[4];
    uint32_t signs;
    unsigned sc[2];
    moe_iq2_sub(type, b, ib, g, &signs, sc);
    /* two 128-bit halves, not one 256-bit load of g[] (stores just made:
     * a failed store forward) */
    const __m128i lo = _mm_insert_epi64(_mm_cvtsi64_si128((long long)g[0]), (long long)g[1], 1);
    const __m128i hi = _mm_insert_epi64(_mm_cvtsi64_si128((long long)g[2]), (long long)g[3], 1);
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    const __m256i s = _mm256_mask_sub_epi8(q, (__mmask32)signs, _mm256_setzero_si256(), q);
    v[0] = _mm512_mul_ps(_mm512_set1_ps(moe_iq2_db(d, sc[0])),
                         _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(s))));
    v[1] = _mm512_mul_ps(_mm512_set1_ps(moe_iq2_db(d, sc[1])),
                         _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(s, 1))));
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
            for (int ib = 0; ib < 8; ib++) {
                __m512 v[2];
                sub32(type, b, ib, d, v);
                UNROLL for (int tt = 0; tt < T; tt++) {
                    const float *xp = x + tt * xs + i * 256 + 32 * ib;
                    acc[rr][tt] = _mm512_fmadd_ps(v[0], _mm512_loadu_ps(xp), acc[rr][tt]);
                    acc[rr][tt] = _mm512_fmadd_ps(v[1], _mm512_loadu_ps(xp + 16), acc[rr][tt]);
                }
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
