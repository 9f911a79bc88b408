/* act8q_avx512.c — moe_quantize_act8 (act8_ref.c, the specification) with
 * AVX-512: the same operations lane by lane, so the same bytes.
 *
 * Why: decode quantizes ~140k activation values per token (every matrix
 * input) on the main thread between parallel phases; the scalar routine
 * takes ~3.5 ns per value (~4 % of a decode step), this one ~0.5 ns
 * (bench_quant's "act8 q" rows, thread CPU time, medians of 7).
 * Bit-identity with the scalar spec: |x| with NaN lanes zeroed, then a max
 * (order-free for non-NaN values) gives amax; id is the same scalar
 * expression; x*id is one rounding per lane; clamping to +-127 before a
 * round-to-nearest-even conversion gives moe_nearest_int's result for every
 * in-range value (|v| <= 127); NaN lanes become 0; the sums are integers. */
#include "quant/quant_internal.h"
#include "base/util.h"

#include <immintrin.h>

void moe_quantize_act8_avx512(const float *x, void *dst, int64_t n) {
    const int64_t nb = n / 32, ng = (nb + A8_G - 1) / A8_G;
    uint8_t *D = dst;
    if (nb % A8_G) memset(D + (ng - 1) * A8_GROUP_BYTES, 0, A8_GROUP_BYTES); /* absent blocks stay 0 */
    const __m512 absm = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512 p127 = _mm512_set1_ps(127.0f), m127 = _mm512_set1_ps(-127.0f);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * 32;
        uint8_t *g = D + (b / A8_G) * A8_GROUP_BYTES;
        const int j = (int)(b % A8_G);
        const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        const __mmask16 n0 = _mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q), n1 = _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q);
        const __m512 a = _mm512_max_ps(_mm512_maskz_and_ps((__mmask16)~n0, v0, absm),
                                       _mm512_maskz_and_ps((__mmask16)~n1, v1, absm));
        const float amax = _mm512_reduce_max_ps(a);
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        const __m512 vid = _mm512_set1_ps(id);
        __m512 w0 = _mm512_mul_ps(v0, vid), w1 = _mm512_mul_ps(v1, vid);
        const __mmask16 z0 = _mm512_cmp_ps_mask(w0, w0, _CMP_UNORD_Q), z1 = _mm512_cmp_ps_mask(w1, w1, _CMP_UNORD_Q);
        w0 = _mm512_max_ps(_mm512_min_ps(w0, p127), m127);
        w1 = _mm512_max_ps(_mm512_min_ps(w1, p127), m127);
        const __m512i q0 = _mm512_maskz_cvtps_epi32((__mmask16)~z0, w0), q1 = _mm512_maskz_cvtps_epi32((__mmask16)~z1, w1);
        const int32_t hs0 = _mm512_reduce_add_epi32(q0), hs1 = _mm512_reduce_add_epi32(q1);
        uint32_t qb[8];                                /* the 32 codes; 4 per slab */
        _mm_storeu_si128((__m128i *)qb, _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(qb + 4), _mm512_cvtepi32_epi8(q1));
        for (int t = 0; t < 8; t++) memcpy(g + t * 64 + j * 4, &qb[t], 4);
        const int32_t corr = -128 * (hs0 + hs1);
        const float da = moe_f16_to_f32(moe_f32_to_f16(amax / 127.0f));
        memcpy(g + 512 + 4 * j, &corr, 4);
        memcpy(g + 576 + 4 * j, &da, 4);
        memcpy(g + 640 + 4 * j, &hs0, 4);
        memcpy(g + 704 + 4 * j, &hs1, 4);
    }
}
