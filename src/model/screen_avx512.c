/* screen_avx512.c — the lm-head screen's level-1 pass at the AVX-512 level:
 * the operations of moe_screen_value (screen.c) in one 16-lane register,
 * lane j = the scalar code's acc[j]: the same products, the same additions in
 * the same order, the same tree, so the same bits (tests/test_screen.c).
 * R rows at a time: each row's additions are one dependent chain, so
 * independent rows side by side keep the adder busy. */
#include <immintrin.h>
#include <string.h>

#include "model/screen.h"

static inline float block_scale(const moe_screen *s, int64_t i, int64_t b) {
    if (s->levels == 2) {
        const uint32_t bits = (uint32_t)s->sexp[i * s->nb + b] << 23;
        float sc;
        memcpy(&sc, &bits, 4);
        return sc;
    }
    return _cvtsh_ss(s->sd[i * s->nb + b]);
}

/* one row's block b into acc: the scalar code's two additions per lane */
static inline __m512 row_block(const moe_screen *s, int64_t i, int64_t b, __m512 x0, __m512 x1, __m512 acc) {
    const __m512i m15 = _mm512_set1_epi32(15), c120 = _mm512_set1_epi32(120);
    const __m512 vs = _mm512_set1_ps(block_scale(s, i, b));
    const uint8_t *hb = s->hi + (size_t)i * ((size_t)s->n / 2) + b * 16;
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)hb));
    const __m512i lo = _mm512_and_si512(v, m15), hi = _mm512_srli_epi32(v, 4);
    const __m512 p0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_slli_epi32(lo, 4), c120)), vs);
    const __m512 p1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_slli_epi32(hi, 4), c120)), vs);
    acc = _mm512_add_ps(acc, _mm512_mul_ps(p0, x0));
    return _mm512_add_ps(acc, _mm512_mul_ps(p1, x1));
}

static inline float finish(__m512 acc) {
    float a[16];
    _mm512_storeu_ps(a, acc);
    return moe_screen_reduce16(a);
}

void moe_screen_l1_avx512(const moe_screen *s, int64_t r0, int64_t r1, const float *x, float *out) {
    int64_t i = r0;
    for (; i + 4 <= r1; i += 4) {             /* 4 independent chains in registers */
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t b = 0; b < s->nb; b++) {
            const __m512 x0 = _mm512_loadu_ps(x + b * 32), x1 = _mm512_loadu_ps(x + b * 32 + 16);
            a0 = row_block(s, i, b, x0, x1, a0);
            a1 = row_block(s, i + 1, b, x0, x1, a1);
            a2 = row_block(s, i + 2, b, x0, x1, a2);
            a3 = row_block(s, i + 3, b, x0, x1, a3);
        }
        out[i] = finish(a0), out[i + 1] = finish(a1), out[i + 2] = finish(a2), out[i + 3] = finish(a3);
    }
    for (; i < r1; i++) {
        __m512 a0 = _mm512_setzero_ps();
        for (int64_t b = 0; b < s->nb; b++)
            a0 = row_block(s, i, b, _mm512_loadu_ps(x + b * 32), _mm512_loadu_ps(x + b * 32 + 16), a0);
        out[i] = finish(a0);
    }
}

/* The integer level 1 (moe_screen_int_value is its specification): per pair
 * of blocks the 32 packed bytes' low nibbles then high nibbles are the u8
 * operand of vpdpbusd against the activation codes in the same order. */
static inline __m512 int_pair(const moe_screen *s, int64_t i, int64_t p, __m512 S16, const moe_screen_scratch *scr,
                              __m512 acc) {
    const __m256i m = _mm256_set1_epi8(15);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(s->hi + (size_t)i * ((size_t)s->n / 2) + p * 32));
    const __m256i lo = _mm256_and_si256(v, m), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
    const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    const __m512i D = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_loadu_si512(scr->xq + p * 64));
    const __m512i L = _mm512_sub_epi32(_mm512_slli_epi32(D, 4), _mm512_loadu_si512(scr->q120 + p * 16));
    const int q = (int)(p & 7);
    const __m512i idx = _mm512_set_epi32(2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q, 2 * q, 2 * q, 2 * q,
                                         2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q, 2 * q, 2 * q, 2 * q);
    const __m512 sv = _mm512_mul_ps(_mm512_permutexvar_ps(idx, S16), _mm512_loadu_ps(scr->tv + p * 16));
    return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(L), sv));
}

/* 16 block scales of row i from block 16c */
static inline __m512 scales16(const moe_screen *s, int64_t i, int64_t c) {
    if (s->levels == 2) {
        const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(s->sexp + i * s->nb + 16 * c)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
    }
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(s->sd + i * s->nb + 16 * c)));
}

void moe_screen_int_avx512(const moe_screen *s, int64_t r0, int64_t r1, const moe_screen_scratch *scr, float *out) {
    int64_t i = r0;
    for (; i + 4 <= r1; i += 4) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t c = 0; c < s->nb / 16; c++) {
            const __m512 s0 = scales16(s, i, c), s1 = scales16(s, i + 1, c), s2 = scales16(s, i + 2, c),
                         s3 = scales16(s, i + 3, c);
            for (int64_t p = 8 * c; p < 8 * c + 8; p++) {
                a0 = int_pair(s, i, p, s0, scr, a0);
                a1 = int_pair(s, i + 1, p, s1, scr, a1);
                a2 = int_pair(s, i + 2, p, s2, scr, a2);
                a3 = int_pair(s, i + 3, p, s3, scr, a3);
            }
        }
        out[i] = finish(a0), out[i + 1] = finish(a1), out[i + 2] = finish(a2), out[i + 3] = finish(a3);
    }
    for (; i < r1; i++) {
        __m512 a0 = _mm512_setzero_ps();
        for (int64_t c = 0; c < s->nb / 16; c++) {
            const __m512 s0 = scales16(s, i, c);
            for (int64_t p = 8 * c; p < 8 * c + 8; p++) a0 = int_pair(s, i, p, s0, scr, a0);
        }
        out[i] = finish(a0);
    }
}
