/* simd_avx2.h — helpers shared by the files compiled for AVX2 (quant_avx2.c,
 * act8_*avx2.c, iq2_avx2.c, iq3_avx2.c, attention/attn_avx2.c,
 * attention/attn_tq_avx2.c), as hsum_avx512.h is at AVX-512.
 * Include after <immintrin.h>, from AVX2 translation units only. */
#ifndef MOE_SIMD_AVX2_H
#define MOE_SIMD_AVX2_H

#include <immintrin.h>

/* 16 bytes repeated in both 128-bit lanes (one vbroadcasti128 load): codes
 * or a 16-entry vpshufb table for in-lane work on 32 bytes. */
static inline __attribute__((always_inline)) __m256i ld128x2(const void *p) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
}

/* The tree of quant.h over the 16 lanes held as lo = lanes 0..7, hi =
 * 8..15: a[l]+a[l+8] (lo + hi), then +4, +2, +1 (lower lane first). */
static inline __attribute__((always_inline)) float hsum16(__m256 lo, __m256 hi) {
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* Sub-block ib's 32 weights (v[0..3]: values 8q .. 8q + 7) into a wide-GEMM
 * buffer row at o (quant_internal.h's [k/16][row][16]: values 16c .. 16c +
 * 15 at o + 64 c; o 32-byte aligned). */
static inline __attribute__((always_inline)) void wide_store32(float *o, int ib, const __m256 v[4]) {
    for (int q = 0; q < 4; q++) _mm256_store_ps(o + 64 * (2 * ib + q / 2) + 8 * (q & 1), v[q]);
}

/* is += the exact products of signed byte levels q (|q| <= 127; qa = |q|)
 * and signed bytes a (|a| <= 127: activation codes as moe_quantize_act8
 * clamps them, kv_q8 keys, kv_tq's integer centroids),
 * four per dword: vpmaddubsw of |q| against a with q's sign (a pair is at
 * most 2*127*127 < 32767, no saturation), then vpmaddwd by 1. */
static inline __attribute__((always_inline)) __m256i dot_signed(__m256i is, __m256i qa, __m256i q, __m256i a) {
    return _mm256_add_epi32(is, _mm256_madd_epi16(_mm256_maddubs_epi16(qa, _mm256_sign_epi8(a, q)), _mm256_set1_epi16(1)));
}

#endif
