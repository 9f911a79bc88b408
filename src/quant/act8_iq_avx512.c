/* act8_iq_avx512.c — the act_q8 kernels of the i-quants (IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) with AVX-512 VNNI, bit-identical to
 * act8_iq_ref.c.
 *
 * Per group of 16 blocks, each row is decoded once (act8_iq.h: integer
 * only) into a 512-byte slab buffer of u = v + 128, block j at bytes 4j..
 * of each slab like the activation's, plus the blocks' scales; then per
 * token each half of the blocks is 4 vpdpbusd from -128 hsum_h (exact
 * int32: the contract's isum_h in lane j), the halves weighted by their
 * scales (vpmulld, exact) and one FMA per lane with F * da, masked to the
 * group's blocks (a row's last group may hold 8: lanes 8..15 keep their
 * sums). */
#include "quant/act8_iq.h"

#include <immintrin.h>

#include "quant/hsum_avx512.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* A row's decoded group. */
typedef struct {
    _Alignas(64) uint8_t u[512];
    _Alignas(64) uint32_t sg[16];
    _Alignas(64) int32_t s0[16], s1[16];
    _Alignas(64) float f[16];
} dgroup;

/* IQ2_XXS, IQ3_XXS: moe_a8iq_group's bytes with the grid entries fetched 8
 * blocks at a time: both keep each block's 8 index bytes together (bytes
 * 2 + 8 ib ..), so one zmm holds a super-block's, lane ib = block ib; a
 * gather per group of 8 values (IQ2_XXS, 8-byte entries; vpmovqd splits
 * them into the two slabs) or per 4 (IQ3_XXS, 4-byte entries: one slab
 * half each). Signs and scales from the 32-bit words, as act8_iq.h. */
ALWAYS_INLINE void gather_group(const uint32_t F, const uint8_t *G, int gn, dgroup *dg) {
    const size_t qb = A8IQ_QB(F);
    const __m512i m8 = _mm512_set1_epi64(255);
    for (int L = 0; L < gn / 8; L++) {
        const uint8_t *sb = G + (size_t)L * qb;
        const __m512i Q = _mm512_loadu_si512(sb + 2);
        UNROLL for (int l = 0; l < 4; l++) {
            uint8_t *u = dg->u + 128 * l + 32 * L;
            if (F == MOE_T_IQ2_XXS) {
                const __m512i e = _mm512_i64gather_epi64(_mm512_and_si512(_mm512_srli_epi64(Q, 8 * l), m8),
                                                         (const void *)moe_iq2xxs_grid, 8);
                _mm256_store_si256((__m256i *)u, _mm512_cvtepi64_epi32(e));
                _mm256_store_si256((__m256i *)(u + 64), _mm512_cvtepi64_epi32(_mm512_srli_epi64(e, 32)));
            } else {
                UNROLL for (int h = 0; h < 2; h++) {
                    const __m512i ix = _mm512_and_si512(_mm512_srli_epi64(Q, 16 * l + 8 * h), m8);
                    _mm256_store_si256((__m256i *)(u + 64 * h), _mm512_i64gather_epi32(ix, (const void *)moe_iq3xxs_grid, 4));
                }
            }
        }
        const float f = moe_a8iq_f(F, sb);
        for (int ib = 0; ib < 8; ib++) {
            const int j = 8 * L + ib;
            uint32_t a;
            memcpy(&a, F == MOE_T_IQ2_XXS ? sb + 2 + 8 * ib + 4 : sb + 66 + 4 * ib, 4);
            dg->sg[j] = moe_iq_signs4((a & 127) | ((a >> 7) & 127) << 8 | ((a >> 14) & 127) << 16 | ((a >> 21) & 127) << 24);
            dg->s0[j] = dg->s1[j] = 2 * (int32_t)(a >> 28) + 1;
            dg->f[j] = f;
        }
    }
}

/* A row's group decoded (act8_iq.h), the signs applied: the sign bits of
 * slab t of block j (bits 4t..4t+3 of sg[j]) spread to its 4 bytes and
 * tested against {1, 2, 4, 8}; u = 0x80 - g where set, else 0x80 | g. */
ALWAYS_INLINE void decode(const uint32_t F, const uint8_t *G, int gn, dgroup *dg) {
    if (F == MOE_T_IQ2_XXS || F == MOE_T_IQ3_XXS) gather_group(F, G, gn, dg);
    else moe_a8iq_group(F, G, gn, dg->u, dg->sg, dg->s0, dg->s1, dg->f);
    if (!A8IQ_SIGNED(F)) return;
    const __m512i sw = _mm512_load_si512(dg->sg), b80 = _mm512_set1_epi8((char)0x80);
    const __m512i spread = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0x00000000);
    const __m512i bit = _mm512_set1_epi32(0x08040201);
    UNROLL for (int t = 0; t < 8; t++) {
        const __mmask64 neg = _mm512_test_epi8_mask(_mm512_shuffle_epi8(_mm512_srli_epi32(sw, 4 * t), spread), bit);
        const __m512i g = _mm512_load_si512(dg->u + 64 * t);
        _mm512_store_si512(dg->u + 64 * t, _mm512_mask_sub_epi8(_mm512_or_si512(g, b80), neg, b80, g));
    }
}

/* R rows (rs bytes apart) x T tokens (A8 rows xs apart) -> y[t*ys + r*yr]. */
ALWAYS_INLINE void tile_iq(const uint8_t *w, size_t rs, const uint8_t *xa, size_t xs, float *y, size_t ys,
                           size_t yr, int64_t n, const int R, const int T, const uint32_t F) {
    const int64_t nb = n / 32;
    __m512 acc[4][2];
    dgroup dg[4];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
        const __mmask16 ml = gn == 16 ? 0xFFFF : (__mmask16)((1u << gn) - 1);
        UNROLL for (int r = 0; r < R; r++)
            decode(F, w + (size_t)r * rs + (size_t)(g0 / 8) * A8IQ_QB(F), gn, &dg[r]);
        UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *A = xa + (size_t)t * xs + (size_t)(g0 / A8_G) * A8_GROUP_BYTES;
            __m512i a[8];
            UNROLL for (int s = 0; s < 8; s++) a[s] = _mm512_loadu_si512(A + 64 * s);
            const __m512i c0 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_loadu_si512(A + 640), 7));
            const __m512i c1 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_loadu_si512(A + 704), 7));
            const __m512 da = _mm512_loadu_ps(A + 576);
            UNROLL for (int r = 0; r < R; r++) {
                __m512i i0 = c0, i1 = c1;
                UNROLL for (int s = 0; s < 4; s++) {
                    i0 = _mm512_dpbusd_epi32(i0, _mm512_load_si512(dg[r].u + 64 * s), a[s]);
                    i1 = _mm512_dpbusd_epi32(i1, _mm512_load_si512(dg[r].u + 64 * (s + 4)), a[s + 4]);
                }
                const __m512i is = _mm512_add_epi32(_mm512_mullo_epi32(i0, _mm512_load_si512(dg[r].s0)),
                                                    _mm512_mullo_epi32(i1, _mm512_load_si512(dg[r].s1)));
                acc[r][t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(_mm512_load_ps(dg[r].f), da),
                                                  acc[r][t], ml);
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r * yr] = hsum16(acc[r][t]);
}

#define A8IQ_KERNELS(name, F) MOE_A8_TILED_KERNELS(name, avx512, tile_iq, F)  /* quant_internal.h */
A8IQ_KERNELS(iq2_xxs, MOE_T_IQ2_XXS)
A8IQ_KERNELS(iq2_xs, MOE_T_IQ2_XS)
A8IQ_KERNELS(iq2_s, MOE_T_IQ2_S)
A8IQ_KERNELS(iq3_xxs, MOE_T_IQ3_XXS)
A8IQ_KERNELS(iq3_s, MOE_T_IQ3_S)
A8IQ_KERNELS(iq1_s, MOE_T_IQ1_S)
A8IQ_KERNELS(iq1_m, MOE_T_IQ1_M)
