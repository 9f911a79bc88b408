/* screen_avx512.c — the lm-head screen's level-1 pass at the AVX-512 level:
 * the operations of moe_screen_value (screen.c) in one 16-lane register,
 * lane j = the scalar code's acc[j]: the same products, the same additions in
 * the same order, the same tree, so the same bits (tests/test_screen.c). */
#include <immintrin.h>
#include <string.h>

#include "model/screen.h"

void moe_screen_l1_avx512(const moe_screen *s, int64_t r0, int64_t r1, const float *x, float *out) {
    const size_t half = (size_t)s->n / 2;
    const __m512i m15 = _mm512_set1_epi32(15), c120 = _mm512_set1_epi32(120);
    for (int64_t i = r0; i < r1; i++) {
        const uint8_t *hp = s->hi + (size_t)i * half;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t b = 0; b < s->nb; b++) {
            float sc;
            if (s->levels == 2) {
                const uint32_t bits = (uint32_t)s->sexp[i * s->nb + b] << 23;
                memcpy(&sc, &bits, 4);
            } else {
                sc = _cvtsh_ss(s->sd[i * s->nb + b]);
            }
            const __m512 vs = _mm512_set1_ps(sc);
            const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(hp + b * 16)));
            const __m512i lo = _mm512_and_si512(v, m15), hi = _mm512_srli_epi32(v, 4);
            const __m512 p0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_slli_epi32(lo, 4), c120)), vs);
            const __m512 p1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_slli_epi32(hi, 4), c120)), vs);
            acc = _mm512_add_ps(acc, _mm512_mul_ps(p0, _mm512_loadu_ps(x + b * 32)));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(p1, _mm512_loadu_ps(x + b * 32 + 16)));
        }
        float a[16];
        _mm512_storeu_ps(a, acc);
        out[i] = moe_screen_reduce16(a);
    }
}
