/* iq2_avx2.c — IQ2_XXS / IQ2_XS / IQ2_S kernels at the AVX2 level,
 * bit-identical to iq2_ref.c (the specification).
 *
 * The 16 lanes of the contract are two ymm accumulators (lanes 0..7 and
 * 8..15, as quant_avx2.c). A sub-block of 32 values is 4 groups: their
 * codebook entries as 32 bytes, the signs applied as integers (x ^ m) - m
 * with m the byte mask of the 32 sign bits (moe_iq2_sub), then per 8 bytes
 * a conversion to float (exact) and one multiply by the half's db: the
 * reference's w = db * (float)(±G), formed the same way. */
#include "quant/iq2.h"

#include <immintrin.h>

#include "quant/simd_avx2.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* Sub-block ib (values 32ib..32ib+31) of block b with scale base d:
 * v[2h] lanes 0..7 and v[2h+1] lanes 8..15 of half h. The 4 entries as
 * two 128-bit halves built from registers (one 256-bit load of the array
 * moe_iq2_sub just stored fails to forward: bench_quant AVX-512 XXS 1.0 ->
 * 0.6 GB/s per CPU-second that way). */
ALWAYS_INLINE void sub32(const uint32_t type, const uint8_t *b, int ib, float d, __m256 *v) {
    uint64_t g[4];
    uint32_t signs;
    unsigned sc[2];
    moe_iq2_sub(type, b, ib, g, &signs, sc);
    const __m128i lo = _mm_insert_epi64(_mm_cvtsi64_si128((long long)g[0]), (long long)g[1], 1);
    const __m128i hi = _mm_insert_epi64(_mm_cvtsi64_si128((long long)g[2]), (long long)g[3], 1);
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    const __m256i sb = _mm256_shuffle_epi8(_mm256_set1_epi32((int)signs),
                                           _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i m = _mm256_cmpeq_epi8(_mm256_and_si256(sb, bits), bits);
    const __m256i sq = _mm256_sub_epi8(_mm256_xor_si256(q, m), m);
    const __m128i s0 = _mm256_castsi256_si128(sq), s1 = _mm256_extracti128_si256(sq, 1);
    const __m256 d0 = _mm256_set1_ps(moe_iq2_db(d, sc[0])), d1 = _mm256_set1_ps(moe_iq2_db(d, sc[1]));
    v[0] = _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s0)));
    v[1] = _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(s0, s0))));
    v[2] = _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s1)));
    v[3] = _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(s1, s1))));
}

/* The R x T tile: block i of row rr at w + rr * rs + i * S * QB; tokens tt
 * at x + tt * xs, outputs at y[tt * ys + rr]. */
ALWAYS_INLINE void tile(const uint32_t type, const size_t QB, const uint8_t *w, size_t rs, const float *x, size_t xs,
                        float *y, size_t ys, int64_t n, const int R, const int T, const int S) {
    __m256 acc[4][2][2];
    UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)
        acc[rr][tt][0] = acc[rr][tt][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        UNROLL for (int rr = 0; rr < R; rr++) {
            const uint8_t *b = w + rr * rs + (size_t)i * S * QB;
            _mm_prefetch((const char *)b + 8192, _MM_HINT_T0);
            const float d = moe_f16_f32_tab[moe_rd16(b)];
            for (int ib = 0; ib < 8; ib++) {
                __m256 v[4];
                sub32(type, b, ib, d, v);
                UNROLL for (int tt = 0; tt < T; tt++) {
                    const float *xp = x + tt * xs + i * 256 + 32 * ib;
                    UNROLL for (int q = 0; q < 4; q++)
                        acc[rr][tt][q & 1] = _mm256_fmadd_ps(v[q], _mm256_loadu_ps(xp + 8 * q), acc[rr][tt][q & 1]);
                }
            }
        }
    }
    UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)
        y[tt * ys + rr] = hsum16(acc[rr][tt][0], acc[rr][tt][1]);
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

/* One block's weights into a wide buffer (iq2.h): sub32's vectors, stored. */
ALWAYS_INLINE void wide_block(const uint32_t type, const uint8_t *b, float *o) {
    const float d = moe_f16_f32_tab[moe_rd16(b)];
    for (int ib = 0; ib < 8; ib++) {
        __m256 v[4];
        sub32(type, b, ib, d, v);
        wide_store32(o, ib, v);
    }
}

#define IQ2_KERNELS(name, TYPE, QB)                                                                \
    void moe_wide_block_##name##_avx2(const uint8_t *b, float *o) { wide_block(TYPE, b, o); }     \
    void moe_gemv_##name##_avx2(const void *w, size_t rb, int64_t nrows, const float *x, float *y, int64_t n) { \
        gemv_body(TYPE, QB, w, rb, nrows, x, y, n, 0);                                             \
    }                                                                                              \
    void moe_gemv_x4_##name##_avx2(const void *w, size_t rb, int64_t nrows, const float *x, float *y, int64_t n) { \
        gemv_body(TYPE, QB, w, rb, nrows, x, y, n, 1);                                             \
    }                                                                                              \
    void moe_gemm_##name##_avx2(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs, int64_t ntok, \
                                float *y, size_t ys, int64_t n) {                                  \
        gemm_body(TYPE, QB, w, rb, nrows, x, xs, ntok, y, ys, n, 0);                               \
    }                                                                                              \
    void moe_gemm_x4_##name##_avx2(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs,        \
                                   int64_t ntok, float *y, size_t ys, int64_t n) {                 \
        gemm_body(TYPE, QB, w, rb, nrows, x, xs, ntok, y, ys, n, 1);                               \
    }
IQ2_KERNELS(iq2_xxs, MOE_T_IQ2_XXS, QB_IQ2_XXS)
IQ2_KERNELS(iq2_xs, MOE_T_IQ2_XS, QB_IQ2_XS)
IQ2_KERNELS(iq2_s, MOE_T_IQ2_S, QB_IQ2_S)
