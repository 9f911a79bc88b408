/* act8q_avx2.c — moe_quantize_act8 (act8_ref.c, the specification) with
 * AVX2: the same operations lane by lane, so the same bytes (see
 * act8q_avx512.c for why this exists and why the bits agree). */
#include "quant/quant_internal.h"
#include "base/util.h"

#include <immintrin.h>

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline int32_t hadd8(__m256i v) {
    __m128i m = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 0x4E));
    m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 0xB1));
    return _mm_cvtsi128_si32(m);
}

void moe_quantize_act8_avx2(const float *x, void *dst, int64_t n) {
    const int64_t nb = n / 32, ng = (nb + A8_G - 1) / A8_G;
    uint8_t *D = dst;
    if (nb % A8_G) memset(D + (ng - 1) * A8_GROUP_BYTES, 0, A8_GROUP_BYTES); /* absent blocks stay 0 */
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 p127 = _mm256_set1_ps(127.0f), m127 = _mm256_set1_ps(-127.0f);
    /* packs works inside 128-bit lanes; this dword order restores value order */
    const __m256i unlane = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * 32;
        uint8_t *g = D + (b / A8_G) * A8_GROUP_BYTES;
        const int j = (int)(b % A8_G);
        __m256 v[4], a = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            const __m256 ok = _mm256_cmp_ps(v[i], v[i], _CMP_ORD_Q);      /* NaN lanes -> 0 */
            a = _mm256_max_ps(a, _mm256_and_ps(_mm256_and_ps(v[i], absm), ok));
        }
        const float amax = hmax8(a);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int i = 0; i < 4; i++) {
            __m256 w = _mm256_mul_ps(v[i], vid);
            const __m256 ok = _mm256_cmp_ps(w, w, _CMP_ORD_Q);
            w = _mm256_max_ps(_mm256_min_ps(w, p127), m127);
            q[i] = _mm256_and_si256(_mm256_cvtps_epi32(w), _mm256_castps_si256(ok));
        }
        const int32_t hs0 = hadd8(_mm256_add_epi32(q[0], q[1])), hs1 = hadd8(_mm256_add_epi32(q[2], q[3]));
        const __m256i p8 = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), unlane);
        uint32_t qb[8];                                /* the 32 codes; 4 per slab */
        _mm256_storeu_si256((__m256i *)qb, p8);
        for (int t = 0; t < 8; t++) memcpy(g + t * 64 + j * 4, &qb[t], 4);
        const int32_t corr = -128 * (hs0 + hs1);
        const float da = moe_f16_to_f32(moe_f32_to_f16(amax / 127.0f));
        memcpy(g + 512 + 4 * j, &corr, 4);
        memcpy(g + 576 + 4 * j, &da, 4);
        memcpy(g + 640 + 4 * j, &hs0, 4);
        memcpy(g + 704 + 4 * j, &hs1, 4);
    }
}
