/* act8_iq_avx2.c — the act_q8 kernels of the i-quants (IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) with AVX2, bit-identical to
 * act8_iq_ref.c.
 *
 * As act8_iq_avx512.c (a group decoded once per row in slab layout), in
 * lane halves (act8_avx2.c): a ymm holds bytes 32L.. of a slab, blocks
 * 8L..8L+7 = super-block L of the group, so a row's last group of one
 * super-block is half 0 alone and nothing needs a mask. Every integer
 * weight is within -62..62 (the grids' bytes, test_act8_iq checks every
 * entry; IQ1: -9..9), so the group is decoded to u = v + 64 (2..126) where
 * AVX-512 takes v + 128: vpmaddubsw of u against any activation bytes is
 * exact (a pair <= 2 * 126 * 128 = 32256), then vpmaddwd by 1, and the sums
 * start from -64 times the activation's half sums. Three instructions per
 * 32 bytes and row x token, where v + 128 needed the even/odd split of
 * both sides (nine). */
#include "quant/act8_iq.h"

#include <immintrin.h>

#include "quant/simd_avx2.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* is += the exact products of u (bytes 0..127) and a (signed), per dword. */
ALWAYS_INLINE __m256i dot4(__m256i is, __m256i u, __m256i a) {
    return _mm256_add_epi32(is, _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1)));
}

ALWAYS_INLINE __m256i ld(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* A row's decoded group. */
typedef struct {
    _Alignas(32) uint8_t u[512];
    _Alignas(32) int32_t s0[16], s1[16];
    _Alignas(32) float f[16];
} dgroup;

/* IQ2_XXS: the sign bits and the odd scale of a super-block's 8 blocks
 * (q03, q47: their 8-byte records, 4 grid indices then the u32 aux), lane
 * j = block j, as moe_iq2_sub and moe_a8iq_raw form them: the four 7-bit
 * sign codes of aux moved into bytes, each byte's bit 7 its parity
 * (moe_iq_signs4, lane-wise), the scale 2 (aux >> 28) + 1. */
ALWAYS_INLINE void iq2_xxs_fields(__m256i q03, __m256i q47, __m256i *sg, __m256i *sc) {
    const __m256i a = _mm256_permute4x64_epi64(
        _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(q03), _mm256_castsi256_ps(q47), 0xDD)), 0xD8);
    __m256i c = _mm256_and_si256(a, _mm256_set1_epi32(0x7F));
    c = _mm256_or_si256(c, _mm256_and_si256(_mm256_slli_epi32(a, 1), _mm256_set1_epi32(0x7F00)));
    c = _mm256_or_si256(c, _mm256_and_si256(_mm256_slli_epi32(a, 2), _mm256_set1_epi32(0x7F0000)));
    c = _mm256_or_si256(c, _mm256_and_si256(_mm256_slli_epi32(a, 3), _mm256_set1_epi32(0x7F000000)));
    __m256i p = _mm256_xor_si256(c, _mm256_srli_epi32(c, 4));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
    p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
    *sg = _mm256_or_si256(c, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi32(0x01010101)), 7));
    *sc = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(a, 28), 1), _mm256_set1_epi32(1));
}

/* A row's group decoded (act8_iq.h's moe_a8iq_raw per block), per lane
 * half u = v + 64: IQ2 / IQ3 with the signs applied as act8_iq_avx512.c
 * does, u = 0x40 - g where the sign bit is set, else 0x40 | g (g < 64);
 * IQ1's u = v + 128 less 64. The 8 blocks' codebook words are moved into
 * slab order in registers (block j's values 8l .. 8l + 7 are the 8 bytes
 * of its word l; slab 2l takes their low dwords, 2l + 1 the high ones), and
 * every field leaves in one vector store: written as 4-byte pieces (the
 * slab layout's), each vector load after them waited for the pieces to
 * reach the cache instead of taking them from the store buffer. */
ALWAYS_INLINE void decode(const uint32_t F, const uint8_t *G, int gn, dgroup *dg) {
    const __m256i b40 = _mm256_set1_epi8(0x40), bit = _mm256_set1_epi32(0x08040201);
    const __m256i spread = _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C, 0, 0x04040404, 0x08080808, 0x0C0C0C0C);
    for (int L = 0; L < gn / 8; L++) {
        const uint8_t *b = G + (size_t)L * A8IQ_QB(F);
        uint64_t g[8][4];
        uint32_t sg[8];
        int32_t s[8][2];
        __m256i sw, s0v, s1v, q03 = _mm256_setzero_si256(), q47 = q03;
        if (F == MOE_T_IQ2_XXS) {   /* iq2_xxs_fields: the 8 blocks' words, signs and scales in vectors */
            q03 = _mm256_loadu_si256((const __m256i *)(b + 2));
            q47 = _mm256_loadu_si256((const __m256i *)(b + 34));
            iq2_xxs_fields(q03, q47, &sw, &s0v);
            s1v = s0v;
        } else {
            for (int j = 0; j < 8; j++) moe_a8iq_raw(F, b, j, g[j], &sg[j], s[j]);
            sw = _mm256_setr_epi32((int)sg[0], (int)sg[1], (int)sg[2], (int)sg[3], (int)sg[4], (int)sg[5], (int)sg[6],
                                   (int)sg[7]);
            s0v = _mm256_setr_epi32(s[0][0], s[1][0], s[2][0], s[3][0], s[4][0], s[5][0], s[6][0], s[7][0]);
            s1v = _mm256_setr_epi32(s[0][1], s[1][1], s[2][1], s[3][1], s[4][1], s[5][1], s[6][1], s[7][1]);
        }
        UNROLL for (int l = 0; l < 4; l++) {
            __m256 A, B;
            if (F == MOE_T_IQ2_XXS) {   /* byte l of each block's 8: its word l's grid index */
                const __m256i pick = _mm256_setr_epi8(l, -1, -1, -1, -1, -1, -1, -1, 8 + l, -1, -1, -1, -1, -1, -1, -1,
                                                      l, -1, -1, -1, -1, -1, -1, -1, 8 + l, -1, -1, -1, -1, -1, -1, -1);
                const long long *grid = (const long long *)(const void *)moe_iq2xxs_grid;
                A = _mm256_castsi256_ps(_mm256_i64gather_epi64(grid, _mm256_shuffle_epi8(q03, pick), 8));
                B = _mm256_castsi256_ps(_mm256_i64gather_epi64(grid, _mm256_shuffle_epi8(q47, pick), 8));
            } else {
                A = _mm256_castsi256_ps(_mm256_setr_epi64x((long long)g[0][l], (long long)g[1][l], (long long)g[2][l],
                                                           (long long)g[3][l]));
                B = _mm256_castsi256_ps(_mm256_setr_epi64x((long long)g[4][l], (long long)g[5][l], (long long)g[6][l],
                                                           (long long)g[7][l]));
            }
            UNROLL for (int h = 0; h < 2; h++) {
                const int t = 2 * l + h;   /* slab */
                const __m256i m = _mm256_permute4x64_epi64(_mm256_castps_si256(h ? _mm256_shuffle_ps(A, B, 0xDD)
                                                                                 : _mm256_shuffle_ps(A, B, 0x88)), 0xD8);
                __m256i u;
                if (A8IQ_SIGNED(F)) {
                    const __m256i x = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_srli_epi32(sw, 4 * t), spread), bit);
                    u = _mm256_blendv_epi8(_mm256_or_si256(m, b40), _mm256_sub_epi8(b40, m), _mm256_cmpeq_epi8(x, bit));
                } else {
                    u = _mm256_sub_epi8(m, b40);
                }
                _mm256_storeu_si256((__m256i *)(void *)(dg->u + 64 * t + 32 * L), u);
            }
        }
        _mm256_storeu_si256((__m256i *)(void *)(dg->s0 + 8 * L), s0v);
        _mm256_storeu_si256((__m256i *)(void *)(dg->s1 + 8 * L), s1v);
        _mm256_storeu_ps(dg->f + 8 * L, _mm256_set1_ps(moe_a8iq_f(F, b)));
    }
}

/* One group (blocks g0.., gn of them) for R rows, decoded at d[r], x T
 * tokens (A8 rows xs apart from xa): acc[r][t][L] takes lane half L. */
ALWAYS_INLINE void group_iq(const dgroup *const d[4], const uint8_t *xa, size_t xs, int64_t g0, int gn,
                            __m256 acc[4][2][2], const int R, const int T) {
    UNROLL for (int L = 0; L < 2; L++) {
        if (8 * L >= gn) break;
        UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *A = xa + (size_t)t * xs + (size_t)(g0 / A8_G) * A8_GROUP_BYTES + 32 * L;
            const __m256i c0 = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(ld(A + 640), 6));
            const __m256i c1 = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(ld(A + 704), 6));
            const __m256 da = _mm256_loadu_ps((const float *)(A + 576));
            UNROLL for (int r = 0; r < R; r++) {
                __m256i i0 = c0, i1 = c1;
                UNROLL for (int s = 0; s < 4; s++) {
                    i0 = dot4(i0, ld(d[r]->u + 64 * s + 32 * L), ld(A + 64 * s));
                    i1 = dot4(i1, ld(d[r]->u + 64 * (s + 4) + 32 * L), ld(A + 64 * (s + 4)));
                }
                const __m256i is = _mm256_add_epi32(_mm256_mullo_epi32(i0, ld(d[r]->s0 + 8 * L)),
                                                    _mm256_mullo_epi32(i1, ld(d[r]->s1 + 8 * L)));
                const __m256 S = _mm256_mul_ps(_mm256_loadu_ps(d[r]->f + 8 * L), da);
                acc[r][t][L] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), S, acc[r][t][L]);
            }
        }
    }
}

ALWAYS_INLINE void acc_zero(__m256 acc[4][2][2], const int R, const int T) {
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t][0] = acc[r][t][1] = _mm256_setzero_ps();
}
ALWAYS_INLINE void acc_store(__m256 acc[4][2][2], float *y, size_t ys, size_t yr, const int R, const int T) {
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r * yr] = hsum16(acc[r][t][0], acc[r][t][1]);
}

/* R rows (rs bytes apart) x T tokens (A8 rows xs apart) -> y[t*ys + r*yr],
 * each group decoded right before its products (decode, one token). */
ALWAYS_INLINE void tile_iq(const uint8_t *w, size_t rs, const uint8_t *xa, size_t xs, float *y, size_t ys,
                           size_t yr, int64_t n, const int R, const int T, const uint32_t F) {
    const int64_t nb = n / 32;
    __m256 acc[4][2][2];
    dgroup dg[4];
    const dgroup *d[4] = {&dg[0], &dg[1], &dg[2], &dg[3]};
    acc_zero(acc, R, T);
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
        UNROLL for (int r = 0; r < R; r++)
            decode(F, w + (size_t)r * rs + (size_t)(g0 / 8) * A8IQ_QB(F), gn, &dg[r]);
        group_iq(d, xa, xs, g0, gn, acc, R, T);
    }
    acc_store(acc, y, ys, yr, R, T);
}

/* ---- prefill: every row decoded once per call ----
 * The tiled gemm decodes a tile's rows again for every 2 tokens, and the
 * codebook decoding costs far more than the products it feeds. Here 4 rows
 * (r + i q, far apart as in the tiled gemm) are decoded whole into a panel
 * of groups, then every token runs over them 2 at a time: the same
 * decoded bytes and group_iq's steps in its order, so the same bits. */
#define IQP_MAXG 16   /* groups per row in the panel (n <= 8192; 48 KB of stack) */

ALWAYS_INLINE void panel_tile(dgroup P[4][IQP_MAXG], int64_t nb, const uint8_t *xa, size_t xs, float *y, size_t ys,
                              size_t yr, const int R, const int T) {
    __m256 acc[4][2][2];
    acc_zero(acc, R, T);
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G), g = (int)(g0 / A8_G);
        const dgroup *d[4] = {&P[0][g], &P[1][g], &P[2][g], &P[3][g]};
        group_iq(d, xa, xs, g0, gn, acc, R, T);
    }
    acc_store(acc, y, ys, yr, R, T);
}

/* Rows row0 + i * step (i < R) decoded into P, then all tokens over them. */
ALWAYS_INLINE void panel_rows(const uint8_t *W, size_t rb, int64_t row0, int64_t step, const uint8_t *X, size_t xs,
                              int64_t ntok, float *y, size_t ys, int64_t n, dgroup P[4][IQP_MAXG], const int R,
                              const uint32_t F) {
    const int64_t nb = n / 32;
    for (int i = 0; i < R; i++)
        for (int64_t g0 = 0; g0 < nb; g0 += A8_G)
            decode(F, W + (size_t)(row0 + i * step) * rb + (size_t)(g0 / 8) * A8IQ_QB(F),
                   (int)(nb - g0 < A8_G ? nb - g0 : A8_G), &P[i][g0 / A8_G]);
    int64_t t = 0;
    for (; t + 2 <= ntok; t += 2)
        panel_tile(P, nb, X + (size_t)t * xs, xs, y + (size_t)t * ys + row0, ys, (size_t)step, R, 2);
    for (; t < ntok; t++) panel_tile(P, nb, X + (size_t)t * xs, xs, y + (size_t)t * ys + row0, ys, (size_t)step, R, 1);
}

ALWAYS_INLINE void panel_gemm_iq(const uint8_t *W, size_t rb, int64_t nrows, const uint8_t *X, size_t xs,
                                 int64_t ntok, float *y, size_t ys, int64_t n, const uint32_t F) {
    dgroup P[4][IQP_MAXG];
    const int64_t q = nrows / 4;
    for (int64_t r = 0; r < q; r++) panel_rows(W, rb, r, q, X, xs, ntok, y, ys, n, P, 4, F);
    for (int64_t r = 4 * q; r < nrows; r++) panel_rows(W, rb, r, 1, X, xs, ntok, y, ys, n, P, 1, F);
}

/* gemv: quant_internal.h's tiled driver; gemm: the panel, or that driver's
 * gemm for one token or rows too long for the panel. */
#define A8IQ_KERNELS(name, F) \
    MOE_A8_PANEL_KERNELS(name, avx2, tile_iq, panel_gemm_iq, F, 2, IQP_MAXG * A8_G * 32) /* quant_internal.h */
A8IQ_KERNELS(iq2_xxs, MOE_T_IQ2_XXS)
A8IQ_KERNELS(iq2_xs, MOE_T_IQ2_XS)
A8IQ_KERNELS(iq2_s, MOE_T_IQ2_S)
A8IQ_KERNELS(iq3_xxs, MOE_T_IQ3_XXS)
A8IQ_KERNELS(iq3_s, MOE_T_IQ3_S)
A8IQ_KERNELS(iq1_s, MOE_T_IQ1_S)
A8IQ_KERNELS(iq1_m, MOE_T_IQ1_M)
