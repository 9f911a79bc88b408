/* act8_kquant_avx512.c — the act_q8 kernels of Q5_K, Q3_K, Q2_K and IQ4_XS
 * with AVX-512 VNNI, bit-identical to act8_kquant_ref.c.
 *
 * As act8_legacy_avx512.c: block j of a 16-block group (two super-blocks)
 * is lane j of every 64-byte slab, so a part of a block (Q5_K, IQ4_XS: the
 * whole block, 8 slabs; Q3_K, Q2_K: a 16-value half, 4 slabs) is vpdpbusd
 * per slab from the part's start (0, -4 hsum or corr), exact int32. Q3_K /
 * Q2_K then weight the two halves' sums by their integer scales (vpmulld:
 * exact, < 2^24) before one conversion; the float steps per block lane are
 * the contract's, in its order. u per slab: Q5_K the nibble with bit 4 from
 * the hi run (as Q5_0), IQ4_XS a vpshufb of kv + 128, Q3_K / Q2_K the 2 bits
 * of the c2 chunk (Q3_K: bit 2 from hb). Scales per lane from the group's
 * header bytes (lanes 0..7: super-block 0, 8..15: 1). A row's last group
 * with one super-block (gn = 8) is read with masked loads and its FMAs
 * masked to lanes 0..7, so absent lanes keep their +0. */
#include "quant/act8_kquant.h"

#include <immintrin.h>

#include "quant/hsum_avx512.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

enum { KF_Q5_K, KF_Q3_K, KF_Q2_K, KF_IQ4_XS };
#define KF_QB(F) ((F) == KF_Q5_K ? QB_Q5_K : (F) == KF_Q3_K ? QB_Q3_K : (F) == KF_Q2_K ? QB_Q2_K : QB_IQ4_XS)
#define KF_HALVES(F) ((F) == KF_Q3_K || (F) == KF_Q2_K) /* two parts (16-value halves) per block */

/* Bytes [0, 4 gn) at p: a plain load in a full group, else masked. */
ALWAYS_INLINE __m512i ld_run(const uint8_t *p, const int PARTIAL) {
    return PARTIAL ? _mm512_maskz_loadu_epi8(((__mmask64)1 << 32) - 1, p) : _mm512_loadu_si512(p);
}
/* gn bytes at p, zero-extended to 16 dword lanes. */
ALWAYS_INLINE __m512i ld_bytes16(const uint8_t *p, const int PARTIAL) {
    return _mm512_cvtepu8_epi32(PARTIAL ? _mm_loadl_epi64((const __m128i *)p) : _mm_loadu_si128((const __m128i *)p));
}
/* The f16 at p (lanes 0..7) and at p + step (lanes 8..15) as floats. */
ALWAYS_INLINE __m512 f16_pair(const uint8_t *p, size_t step, const int PARTIAL) {
    const uint16_t a = moe_rd16(p), b = PARTIAL ? a : moe_rd16(p + step);
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)a)),
                                                   _mm_set1_epi16((short)b), 1));
}
/* The dwords at p (lanes 0..7) and p + 4 (lanes 8..15; partial: 0). */
ALWAYS_INLINE __m512i u32_pair(const uint8_t *p, size_t step, const int PARTIAL) {
    const __m128i v = PARTIAL ? _mm_cvtsi32_si128((int)moe_kq_rd32(p))
                              : _mm_insert_epi32(_mm_cvtsi32_si128((int)moe_kq_rd32(p)), (int)moe_kq_rd32(p + step), 1);
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                    _mm512_castsi128_si512(v));
}
/* 4 jj (+ add) per lane, jj = lane % 8: the shift of block jj's field. */
ALWAYS_INLINE __m512i lane_shift(int mul, int add) {
    const __m512i jj = _mm512_and_si512(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7), _mm512_set1_epi32(7));
    return _mm512_add_epi32(_mm512_mullo_epi32(jj, _mm512_set1_epi32(mul)), _mm512_set1_epi32(add));
}

/* Q5_K: one header's 12 scale bytes (16 bytes at hdr: d, dmin, scales)
 * unpacked to {sc0..7, m0..7} (moe_q4k_unpack16 on dword lanes). */
ALWAYS_INLINE __m128i q5k_unpack(const uint8_t *hdr) {
    const __m128i u = _mm_srli_si128(_mm_loadu_si128((const __m128i *)hdr), 4); /* u0 u1 u2 0 */
    const __m128i a = _mm_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0));            /* u0 u2 u1 u2 */
    const __m128i b = _mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0));            /* u0 u0 u1 u1 */
    const __m128i lo = _mm_and_si128(a, _mm_set1_epi8(0x3F));
    const __m128i hi = _mm_or_si128(_mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)), _mm_set1_epi8(0x0F)),
                                    _mm_and_si128(_mm_srli_epi32(b, 2), _mm_set1_epi8(0x30)));
    return _mm_blend_epi32(lo, hi, 0xA);
}

/* A row's scales for one group, per block lane (act8_kquant_ref.c): Q5_K
 * fs = d1, fm = m1; IQ4_XS fs = d * (ls - 32); Q3_K fs = d, is0 / is1 the
 * halves' scales - 32; Q2_K fs = d, fm = dmin, is0 / is1 the halves' 4-bit
 * scales, im0 / im1 their mins. */
typedef struct { __m512 fs, fm; __m512i s0, s1, m0, m1; } kscales;

ALWAYS_INLINE kscales row_scales(const uint8_t *G, int gn, const int F, const int PARTIAL) {
    kscales k;
    k.fm = _mm512_setzero_ps();
    k.s0 = k.s1 = k.m0 = k.m1 = _mm512_setzero_si512();
    if (F == KF_Q5_K) {
        const __m128i v0 = q5k_unpack(G), v1 = PARTIAL ? v0 : q5k_unpack(G + 16);
        k.fs = _mm512_mul_ps(f16_pair(G, 16, PARTIAL), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi64(v0, v1))));
        k.fm = _mm512_mul_ps(f16_pair(G + 2, 16, PARTIAL), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi64(v0, v1))));
    } else if (F == KF_IQ4_XS) {
        const __m512i dsh = u32_pair(G, 8, PARTIAL), sl = u32_pair(G + 4, 8, PARTIAL);
        const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(sl, lane_shift(4, 0)), _mm512_set1_epi32(15));
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(dsh, lane_shift(2, 16)), _mm512_set1_epi32(3));
        const __m512i ls = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
        k.fs = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(dsh)), _mm512_cvtepi32_ps(ls));
    } else if (F == KF_Q3_K) {
        const __m512i sl = ld_bytes16(G, PARTIAL), sh = u32_pair(G + A8K_Q3_SH(gn), 4, PARTIAL);
        UNROLL for (int h = 0; h < 2; h++) {
            const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(sl, 4 * h), _mm512_set1_epi32(15));
            const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(sh, lane_shift(4, 2 * h)), _mm512_set1_epi32(3));
            const __m512i s = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
            if (h == 0) k.s0 = s; else k.s1 = s;
        }
        k.fs = f16_pair(G + A8K_Q3_D(gn), 2, PARTIAL);
    } else {
        const __m512i v0 = ld_bytes16(G, PARTIAL), v1 = ld_bytes16(G + gn, PARTIAL);
        k.s0 = _mm512_and_si512(v0, _mm512_set1_epi32(15));
        k.s1 = _mm512_and_si512(v1, _mm512_set1_epi32(15));
        k.m0 = _mm512_srli_epi32(v0, 4);
        k.m1 = _mm512_srli_epi32(v1, 4);
        k.fs = f16_pair(G + A8K_Q2_DM(gn), 4, PARTIAL);
        k.fm = f16_pair(G + A8K_Q2_DM(gn) + 2, 4, PARTIAL);
    }
    return k;
}

/* u of slab t: 4-bit formats from the pair z holding it (and Q5_K's hi run
 * h); 2-bit formats from the chunk z of its half (and Q3_K's hb run h). */
ALWAYS_INLINE __m512i slab_u(__m512i z, __m512i h, const int t, const int F) {
    if (F == KF_Q3_K || F == KF_Q2_K) {
        const int s = t % 4;
        const __m512i v = s ? _mm512_srli_epi16(z, 2 * s) : z;
        if (F == KF_Q2_K) return _mm512_and_si512(v, _mm512_set1_epi8(3));
        const __m512i hb = t <= 2 ? _mm512_slli_epi16(h, 2 - t) : _mm512_srli_epi16(h, t - 2);
        return _mm512_ternarylogic_epi32(v, _mm512_set1_epi8(3), _mm512_and_si512(hb, _mm512_set1_epi8(4)), 0xEA);
    }
    const __m512i nib = _mm512_and_si512(t % 2 ? _mm512_srli_epi16(z, 4) : z, _mm512_set1_epi8(0x0F));
    if (F == KF_IQ4_XS) {
        const __m512i tab = _mm512_broadcast_i32x4(_mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141,
                                                                 (char)153, (char)166, (char)181, (char)197, (char)217,
                                                                 (char)241));
        return _mm512_shuffle_epi8(tab, nib);
    }
    const __m512i hb = t <= 4 ? _mm512_slli_epi16(h, 4 - t) : _mm512_srli_epi16(h, t - 4);
    return _mm512_ternarylogic_epi32(nib, hb, _mm512_set1_epi8(0x10), 0xF8); /* nib | (hb & 0x10) */
}

/* Where part h's sums start (the contract's exact isum, from the activation). */
ALWAYS_INLINE __m512i part_start(const uint8_t *At, int h, const int F) {
    if (F == KF_IQ4_XS) return _mm512_loadu_si512(At + 512);                    /* corr = -128 sum q */
    if (F == KF_Q3_K) return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_loadu_si512(At + 640 + 64 * h), 2));
    return _mm512_setzero_si512();
}

/* R rows x T tokens of one group (row r's at G + r*gs), folded into acc. */
ALWAYS_INLINE void group_k(const uint8_t *G, size_t gs, int gn, const uint8_t *A, size_t xs, __m512 acc[4][4],
                           const int R, const int T, const int F, const int PARTIAL) {
    const __mmask16 ml = PARTIAL ? 0x00FF : 0xFFFF;
    __m512i is[4][4], tot[4][4], hrun[4];
    const int NP = KF_HALVES(F) ? 2 : 1;
    UNROLL for (int r = 0; r < R; r++) {
        const uint8_t *Gr = G + (size_t)r * gs;
        hrun[r] = F == KF_Q5_K ? ld_run(Gr + A8K_Q5_HI(gn), PARTIAL)
                  : F == KF_Q3_K ? ld_run(Gr + A8K_Q3_HB(gn), PARTIAL) : _mm512_setzero_si512();
    }
    kscales ks[4];
    UNROLL for (int r = 0; r < R; r++) ks[r] = row_scales(G + (size_t)r * gs, gn, F, PARTIAL);
    UNROLL for (int h = 0; h < NP; h++) {
        UNROLL for (int t = 0; t < T; t++) {
            const __m512i s = part_start(A + (size_t)t * xs, h, F);
            UNROLL for (int r = 0; r < R; r++) is[r][t] = s;
        }
        if (NP == 2) {            /* the half's 4 slabs from its 2-bit chunk */
            UNROLL for (int s = 0; s < 4; s++) {
                __m512i a[4];
                UNROLL for (int t = 0; t < T; t++) a[t] = _mm512_loadu_si512(A + (size_t)t * xs + 64 * (4 * h + s));
                UNROLL for (int r = 0; r < R; r++) {
                    const uint8_t *c2 = G + (size_t)r * gs + (F == KF_Q3_K ? A8K_Q3_C2(gn) : A8K_Q2_C2(gn));
                    const __m512i u = slab_u(ld_run(c2 + 4 * gn * h, PARTIAL), hrun[r], 4 * h + s, F);
                    UNROLL for (int t = 0; t < T; t++) is[r][t] = _mm512_dpbusd_epi32(is[r][t], u, a[t]);
                }
            }
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) {
                const __m512i w = _mm512_mullo_epi32(is[r][t], h ? ks[r].s1 : ks[r].s0);
                tot[r][t] = h ? _mm512_add_epi32(tot[r][t], w) : w;
            }
        } else {                  /* 4 slab pairs from the nibble runs */
            UNROLL for (int p = 0; p < 4; p++) {
                __m512i a0[4], a1[4];
                UNROLL for (int t = 0; t < T; t++) {
                    a0[t] = _mm512_loadu_si512(A + (size_t)t * xs + 128 * p);
                    a1[t] = _mm512_loadu_si512(A + (size_t)t * xs + 128 * p + 64);
                }
                UNROLL for (int r = 0; r < R; r++) {
                    const uint8_t *lo = G + (size_t)r * gs + (F == KF_Q5_K ? A8K_Q5_LO(gn) : A8K_IQ4_LO(gn));
                    const __m512i z = ld_run(lo + 4 * gn * p, PARTIAL);
                    const __m512i u0 = slab_u(z, hrun[r], 2 * p, F), u1 = slab_u(z, hrun[r], 2 * p + 1, F);
                    UNROLL for (int t = 0; t < T; t++) {
                        is[r][t] = _mm512_dpbusd_epi32(is[r][t], u0, a0[t]);
                        is[r][t] = _mm512_dpbusd_epi32(is[r][t], u1, a1[t]);
                    }
                }
            }
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) tot[r][t] = is[r][t];
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) {
        const uint8_t *At = A + (size_t)t * xs;
        const __m512 da = _mm512_loadu_ps((const float *)(At + 576));
        acc[r][t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(tot[r][t]), _mm512_mul_ps(ks[r].fs, da), acc[r][t], ml);
        if (F == KF_Q5_K || F == KF_Q2_K) {
            const __m512i h0 = _mm512_loadu_si512(At + 640), h1 = _mm512_loadu_si512(At + 704);
            const __m512i ms = F == KF_Q5_K ? _mm512_add_epi32(h0, h1)
                                            : _mm512_add_epi32(_mm512_mullo_epi32(ks[r].m0, h0), _mm512_mullo_epi32(ks[r].m1, h1));
            acc[r][t] = _mm512_mask3_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(ks[r].fm, da), acc[r][t], ml);
        }
    }
}

/* R rows (rb bytes apart) x T tokens (A8 rows xs apart) -> y[t*ys + r*yr]. */
ALWAYS_INLINE void tile_k(const uint8_t *w, size_t rb, const uint8_t *xa, size_t xs, float *y, size_t ys, size_t yr,
                          int64_t n, const int R, const int T, const int F) {
    const int64_t nb = n / 32;
    __m512 acc[4][4];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const uint8_t *G = w + (size_t)(g0 / 8) * KF_QB(F), *A = xa + (size_t)(g0 / A8_G) * A8_GROUP_BYTES;
        if (nb - g0 >= A8_G) group_k(G, rb, A8_G, A, xs, acc, R, T, F, 0);
        else group_k(G, rb, 8, A, xs, acc, R, T, F, 1);
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r * yr] = hsum16(acc[r][t]);
}

/* gemv: rows r and r + nrows/2 in one tile (act8_avx512.c: two far-apart
 * streams keep the hardware prefetcher on); gemm: 4 rows x 2 tokens. */
#define A8K_KERNELS(name, F)                                                                                 \
    void moe_gemv_a8_##name##_avx512(const void *w, size_t rb, int64_t nrows, const void *xa, float *y,      \
                                     int64_t n) {                                                            \
        const uint8_t *W = w;                                                                                \
        const int64_t h = nrows / 2;                                                                         \
        for (int64_t r = 0; r < h; r++)                                                                      \
            tile_k(W + (size_t)r * rb, (size_t)h * rb, xa, 0, y + r, 0, (size_t)h, n, 2, 1, F);             \
        if (nrows & 1) tile_k(W + (size_t)(nrows - 1) * rb, rb, xa, 0, y + nrows - 1, 0, 1, n, 1, 1, F);     \
    }                                                                                                        \
    void moe_gemm_a8_##name##_avx512(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs,     \
                                     int64_t ntok, float *y, size_t ys, int64_t n) {                         \
        const uint8_t *W = w, *X = xa;                                                                       \
        int64_t r = 0;                                                                                       \
        for (; r + 4 <= nrows; r += 4) {                                                                     \
            int64_t t = 0;                                                                                   \
            for (; t + 2 <= ntok; t += 2)                                                                    \
                tile_k(W + (size_t)r * rb, rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, 1, n, 4, 2, F); \
            for (; t < ntok; t++)                                                                            \
                tile_k(W + (size_t)r * rb, rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, 1, n, 4, 1, F); \
        }                                                                                                    \
        for (; r < nrows; r++)                                                                               \
            for (int64_t t = 0; t < ntok; t++)                                                               \
                tile_k(W + (size_t)r * rb, rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, 1, n, 1, 1, F); \
    }
A8K_KERNELS(q5_k, KF_Q5_K)
A8K_KERNELS(q3_k, KF_Q3_K)
A8K_KERNELS(q2_k, KF_Q2_K)
A8K_KERNELS(iq4_xs, KF_IQ4_XS)
