/* hsum_avx512.h — quant.h's 16-lane reduction tree at AVX-512, shared by the
 * files compiled for it (quant_avx512.c, act8_avx512.c, attn_avx512.c).
 * Include after <immintrin.h>, from AVX-512 translation units only. */
#ifndef MOE_HSUM_AVX512_H
#define MOE_HSUM_AVX512_H

#include <immintrin.h>

/* The tree of quant.h: a[l]+a[l+8], then +4, +2, +1 (lower lane first). */
static inline __attribute__((always_inline)) float hsum16(__m512 a) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* The tree of two accumulators packed in one register, a's lanes 0..7 in
 * lanes 0..7 and b's in lanes 8..15, each with lanes 8..15 = +0 (rows of one
 * partial group of <= 8 blocks): step 1 is then x[l] + 0, steps 2-4 run in
 * both 256-bit halves at once. *a = hsum16 of the first, *b of the second. */
static inline __attribute__((always_inline)) void hsum8x2(__m512 x, float *a, float *b) {
    x = _mm512_add_ps(x, _mm512_setzero_ps());                                /* + 8 (= +0) */
    x = _mm512_add_ps(x, _mm512_shuffle_f32x4(x, x, _MM_SHUFFLE(3, 3, 1, 1))); /* + 4 */
    x = _mm512_add_ps(x, _mm512_shuffle_ps(x, x, _MM_SHUFFLE(3, 2, 3, 2)));    /* + 2 */
    x = _mm512_add_ps(x, _mm512_shuffle_ps(x, x, _MM_SHUFFLE(1, 1, 1, 1)));    /* + 1 */
    *a = _mm512_cvtss_f32(x);
    *b = _mm_cvtss_f32(_mm512_extractf32x4_ps(x, 2));
}

/* Reduces 16 accumulators at once with the same tree, lane by lane: step 1
 * adds the 256-bit halves (a[l] + a[l+8]) of two accumulators in one add,
 * step 2 the 128-bit quarters (+4), steps 3 and 4 the pairs (+2, +1) inside
 * 128-bit lanes. Every output is the same sum in the same order (lower lane
 * first) as hsum16() on its accumulator; only the packing differs. Result
 * element i is the reduction of a[i]. */
static inline __attribute__((always_inline)) __m512 hsum16x16(const __m512 a[16]) {
    __m512 p[8], q[4], r[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        p[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        q[i] = _mm512_add_ps(_mm512_shuffle_f32x4(p[2 * i], p[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(p[2 * i], p[2 * i + 1], 0xDD));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        r[i] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * i], q[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(q[2 * i], q[2 * i + 1], 0xEE));
    const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(r[0], r[1], 0x88), _mm512_shuffle_ps(r[0], r[1], 0xDD));
    /* s holds, in 128-bit lane k: a[k], a[k+4], a[k+8], a[k+12] */
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(idx, s);
}

#endif
