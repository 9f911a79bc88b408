/* act8_iq_avx512.c — the act_q8 kernels of the i-quants (IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) with AVX-512 VNNI, bit-identical to
 * act8_iq_ref.c.
 *
 * Per group of 16 blocks, each row is decoded once (integer only: the
 * IQ2 / IQ3 grid entries gathered 8 blocks at a time, IQ1 by act8_iq.h) into a 512-byte slab buffer of u = v + 128, block j at bytes 4j..
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

/* The IQ2 / IQ3 formats: moe_a8iq_group's bytes with the grid entries
 * fetched 8 blocks at a time, lane ib = block ib of a super-block: its
 * index bytes (IQ2_XXS, IQ2_XS, IQ3_S: 8 per block at 2 + 8 ib; IQ2_S: 4 at
 * 2 + 4 ib) and high index bits (IQ2_S, IQ3_S: the byte at 66 + ib), then
 * a gather per group of 8 values (8-byte entries; vpmovqd splits them into
 * the two slabs) or per 4 (IQ3: 4-byte entries, one slab half each). */
ALWAYS_INLINE void gather_grid(const uint32_t F, const uint8_t *sb, uint8_t *U) {
    const __m512i m8 = _mm512_set1_epi64(255);
    const __m512i Q = F == MOE_T_IQ2_S ? _mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)(sb + 2)))
                                       : _mm512_loadu_si512(sb + 2);
    const __m512i QH = F == MOE_T_IQ2_S || F == MOE_T_IQ3_S   /* (IQ2_XXS: byte 66 is past the block) */
                           ? _mm512_cvtepu8_epi64(_mm_loadl_epi64((const __m128i *)(sb + 66)))
                           : _mm512_setzero_si512();
    UNROLL for (int l = 0; l < 4; l++) {
        uint8_t *u = U + 128 * l;
        if (F == MOE_T_IQ3_XXS || F == MOE_T_IQ3_S) {
            UNROLL for (int h = 0; h < 2; h++) {
                __m512i ix = _mm512_and_si512(_mm512_srli_epi64(Q, 16 * l + 8 * h), m8);
                if (F == MOE_T_IQ3_S)
                    ix = _mm512_or_si512(ix, _mm512_slli_epi64(_mm512_and_si512(_mm512_srli_epi64(QH, 2 * l + h),
                                                                                _mm512_set1_epi64(1)), 8));
                const void *grid = F == MOE_T_IQ3_S ? (const void *)moe_iq3s_grid : (const void *)moe_iq3xxs_grid;
                _mm256_store_si256((__m256i *)(u + 64 * h), _mm512_i64gather_epi32(ix, grid, 4));
            }
            continue;
        }
        __m512i ix;
        const void *grid;
        if (F == MOE_T_IQ2_XXS) {
            ix = _mm512_and_si512(_mm512_srli_epi64(Q, 8 * l), m8);
            grid = moe_iq2xxs_grid;
        } else if (F == MOE_T_IQ2_XS) {
            ix = _mm512_and_si512(_mm512_srli_epi64(Q, 16 * l), _mm512_set1_epi64(511));
            grid = moe_iq2xs_grid;
        } else {
            ix = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi64(Q, 8 * l), m8),
                                 _mm512_slli_epi64(_mm512_and_si512(_mm512_srli_epi64(QH, 2 * l), _mm512_set1_epi64(3)), 8));
            grid = moe_iq2s_grid;
        }
        const __m512i e = _mm512_i64gather_epi64(ix, grid, 8);
        _mm256_store_si256((__m256i *)u, _mm512_cvtepi64_epi32(e));
        _mm256_store_si256((__m256i *)(u + 64), _mm512_cvtepi64_epi32(_mm512_srli_epi64(e, 32)));
    }
}

/* Block ib's sign bits and half scales, as moe_a8iq_raw forms them. */
ALWAYS_INLINE void signs_scales(const uint32_t F, const uint8_t *sb, int ib, uint32_t *sg, int32_t *s0, int32_t *s1) {
    if (F == MOE_T_IQ2_XXS || F == MOE_T_IQ3_XXS) {
        uint32_t a;
        memcpy(&a, F == MOE_T_IQ2_XXS ? sb + 2 + 8 * ib + 4 : sb + 66 + 4 * ib, 4);
        *sg = moe_iq_signs4((a & 127) | ((a >> 7) & 127) << 8 | ((a >> 14) & 127) << 16 | ((a >> 21) & 127) << 24);
        *s0 = *s1 = 2 * (int32_t)(a >> 28) + 1;
    } else if (F == MOE_T_IQ2_XS) {
        const uint64_t v = moe_rd64(sb + 2 + 8 * ib);
        *sg = moe_iq_signs4((uint32_t)((v >> 9) & 127) | (uint32_t)((v >> 25) & 127) << 8 |
                            (uint32_t)((v >> 41) & 127) << 16 | (uint32_t)((v >> 57) & 127) << 24);
        *s0 = 2 * (sb[66 + ib] & 15) + 1;
        *s1 = 2 * (sb[66 + ib] >> 4) + 1;
    } else if (F == MOE_T_IQ2_S) {
        memcpy(sg, sb + 34 + 4 * ib, 4);
        *s0 = 2 * (sb[74 + ib] & 15) + 1;
        *s1 = 2 * (sb[74 + ib] >> 4) + 1;
    } else {
        memcpy(sg, sb + 74 + 4 * ib, 4);
        *s0 = *s1 = 1 + 2 * ((sb[106 + ib / 2] >> (4 * (ib & 1))) & 15);
    }
}

ALWAYS_INLINE void gather_group(const uint32_t F, const uint8_t *G, int gn, dgroup *dg) {
    for (int L = 0; L < gn / 8; L++) {
        const uint8_t *sb = G + (size_t)L * A8IQ_QB(F);
        gather_grid(F, sb, dg->u + 32 * L);
        const float f = moe_a8iq_f(F, sb);
        for (int ib = 0; ib < 8; ib++) {
            signs_scales(F, sb, ib, &dg->sg[8 * L + ib], &dg->s0[8 * L + ib], &dg->s1[8 * L + ib]);
            dg->f[8 * L + ib] = f;
        }
    }
}

/* A row's group decoded (IQ2 / IQ3: gather_group; IQ1: act8_iq.h), the
 * signs applied: the sign bits of
 * slab t of block j (bits 4t..4t+3 of sg[j]) spread to its 4 bytes and
 * tested against {1, 2, 4, 8}; u = 0x80 - g where set, else 0x80 | g. */
ALWAYS_INLINE void decode(const uint32_t F, const uint8_t *G, int gn, dgroup *dg) {
    if (A8IQ_SIGNED(F)) gather_group(F, G, gn, dg);
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
