/* screen_avx2.c — the lm-head screen's level-1 pass at the AVX2 level: the
 * operations of moe_screen_value (screen.c) in two 8-lane registers (lanes
 * 0-7 and 8-15 of the scalar code's acc): the same bits. */
#include <immintrin.h>
#include <string.h>

#include "model/screen.h"

void moe_screen_l1_avx2(const moe_screen *s, int64_t r0, int64_t r1, const float *x, float *out) {
    const size_t half = (size_t)s->n / 2;
    const __m256i m15 = _mm256_set1_epi32(15), c120 = _mm256_set1_epi32(120);
    for (int64_t i = r0; i < r1; i++) {
        const uint8_t *hp = s->hi + (size_t)i * half;
        __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int64_t b = 0; b < s->nb; b++) {
            float sc;
            if (s->levels == 2) {
                const uint32_t bits = (uint32_t)s->sexp[i * s->nb + b] << 23;
                memcpy(&sc, &bits, 4);
            } else {
                sc = _cvtsh_ss(s->sd[i * s->nb + b]);
            }
            const __m256 vs = _mm256_set1_ps(sc);
            for (int h = 0; h < 2; h++) {
                const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(hp + b * 16 + 8 * h)));
                const __m256i lo = _mm256_and_si256(v, m15), hi = _mm256_srli_epi32(v, 4);
                const __m256 p0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_slli_epi32(lo, 4), c120)), vs);
                const __m256 p1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_slli_epi32(hi, 4), c120)), vs);
                acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(p0, _mm256_loadu_ps(x + b * 32 + 8 * h)));
                acc[h] = _mm256_add_ps(acc[h], _mm256_mul_ps(p1, _mm256_loadu_ps(x + b * 32 + 16 + 8 * h)));
            }
        }
        float a[16];
        _mm256_storeu_ps(a, acc[0]);
        _mm256_storeu_ps(a + 8, acc[1]);
        out[i] = moe_screen_reduce16(a);
    }
}
