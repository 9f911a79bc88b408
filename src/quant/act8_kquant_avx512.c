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
 * with one super-block (gn = 8) is read 32 bytes per run: two rows side by
 * side in one zmm where the tile has an even row count, else alone with
 * its FMAs masked to lanes 0..7 (absent lanes keep their +0). */
#include "quant/act8_kquant.h"

#include <immintrin.h>

#include "quant/hsum_avx512.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

enum { KF_Q5_K, KF_Q3_K, KF_Q2_K, KF_IQ4_XS };
#define KF_QB(F) ((F) == KF_Q5_K ? QB_Q5_K : (F) == KF_Q3_K ? QB_Q3_K : (F) == KF_Q2_K ? QB_Q2_K : QB_IQ4_XS)
#define KF_HALVES(F) ((F) == KF_Q3_K || (F) == KF_Q2_K) /* two parts (16-value halves) per block */

/* A group is read in one of three modes: M_FULL (16 blocks, two
 * super-blocks: lanes 0..7 the first, 8..15 the second), M_HALF (a row's
 * last group of one super-block: lanes 0..7, the rest masked) and M_PAIR
 * (two rows' one-super-block groups side by side, row a in lanes 0..7 and
 * row b in 8..15, against the activation's blocks 0..7 in both halves: a
 * half-empty zmm would halve the rate of rows of 256 values, the experts'
 * down projections of the laguna bench shapes). Each lane half L reads its
 * super-block from (P_L, j_L): the group base and the block offset (0 or 8)
 * of its first block in that group's layout of gn blocks. */
enum { M_FULL, M_HALF, M_PAIR };

/* The 32 bytes of a run for each lane half: pa + 4 ja and pb + 4 jb. */
ALWAYS_INLINE __m512i ld_run(const uint8_t *pa, const uint8_t *pb, const int M) {
    if (M == M_FULL) return _mm512_loadu_si512(pa);
    if (M == M_HALF) return _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)pa));
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)pa)),
                              _mm256_loadu_si256((const __m256i *)pb), 1);
}
/* 64 activation bytes at p (M_PAIR: blocks 0..7 in both halves). */
ALWAYS_INLINE __m512i ld_act(const uint8_t *p, const int M) {
    return M == M_PAIR ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p)) : _mm512_loadu_si512(p);
}
ALWAYS_INLINE __m512 ld_actf(const uint8_t *p, const int M) {
    return M == M_PAIR ? _mm512_broadcast_f32x8(_mm256_loadu_ps((const float *)p)) : _mm512_loadu_ps((const float *)p);
}
/* 8 bytes at pa (lanes 0..7) and pb (8..15), zero-extended to dwords. */
ALWAYS_INLINE __m512i bytes8x2(const uint8_t *pa, const uint8_t *pb) {
    return _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)pa), _mm_loadl_epi64((const __m128i *)pb)));
}
/* The f16 at pa (lanes 0..7) and at pb (lanes 8..15) as floats. */
ALWAYS_INLINE __m512 f16x2(const uint8_t *pa, const uint8_t *pb) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)moe_rd16(pa))),
                                                   _mm_set1_epi16((short)moe_rd16(pb)), 1));
}
/* The dword at pa in lanes 0..7, at pb in lanes 8..15. */
ALWAYS_INLINE __m512i u32x2(const uint8_t *pa, const uint8_t *pb) {
    const __m128i v = _mm_insert_epi32(_mm_cvtsi32_si128((int)moe_kq_rd32(pa)), (int)moe_kq_rd32(pb), 1);
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                    _mm512_castsi128_si512(v));
}
/* mul * (lane % 8) + add per lane: the shift of block (lane % 8)'s field. */
ALWAYS_INLINE __m512i lane_shift(int mul, int add) {
    const __m512i jj = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
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

/* A zmm row's scales per block lane (act8_kquant_ref.c): Q5_K fs = d1, fm =
 * m1; IQ4_XS fs = d * (ls - 32); Q3_K fs = d, s0 / s1 the halves' scales -
 * 32; Q2_K fs = d, fm = dmin, s0 / s1 the halves' 4-bit scales, m0 / m1
 * their mins. */
typedef struct { __m512 fs, fm; __m512i s0, s1, m0, m1; } kscales;

/* From lane half 0's super-block (pa, ja) and half 1's (pb, jb), groups of gn blocks. */
ALWAYS_INLINE kscales row_scales(const uint8_t *pa, int ja, const uint8_t *pb, int jb, const int gn, const int F) {
    kscales k;
    k.fm = _mm512_setzero_ps();
    k.s0 = k.s1 = k.m0 = k.m1 = _mm512_setzero_si512();
    if (F == KF_Q5_K) {
        const uint8_t *ha = pa + 2 * ja, *hb = pb + 2 * jb; /* hdr[j / 8][16] */
        const __m128i v0 = q5k_unpack(ha), v1 = q5k_unpack(hb);
        k.fs = _mm512_mul_ps(f16x2(ha, hb), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi64(v0, v1))));
        k.fm = _mm512_mul_ps(f16x2(ha + 2, hb + 2), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi64(v0, v1))));
    } else if (F == KF_IQ4_XS) {
        const uint8_t *ha = pa + ja, *hb = pb + jb;         /* hdr[j / 8][8] */
        const __m512i dsh = u32x2(ha, hb), sl = u32x2(ha + 4, hb + 4);
        const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(sl, lane_shift(4, 0)), _mm512_set1_epi32(15));
        const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(dsh, lane_shift(2, 16)), _mm512_set1_epi32(3));
        const __m512i ls = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
        k.fs = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(dsh)), _mm512_cvtepi32_ps(ls));
    } else if (F == KF_Q3_K) {
        const __m512i sl = bytes8x2(pa + ja, pb + jb);
        const __m512i sh = u32x2(pa + A8K_Q3_SH(gn) + ja / 2, pb + A8K_Q3_SH(gn) + jb / 2);
        UNROLL for (int h = 0; h < 2; h++) {
            const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(sl, 4 * h), _mm512_set1_epi32(15));
            const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(sh, lane_shift(4, 2 * h)), _mm512_set1_epi32(3));
            const __m512i s = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
            if (h == 0) k.s0 = s; else k.s1 = s;
        }
        k.fs = f16x2(pa + A8K_Q3_D(gn) + ja / 4, pb + A8K_Q3_D(gn) + jb / 4);
    } else {
        const __m512i v0 = bytes8x2(pa + ja, pb + jb), v1 = bytes8x2(pa + gn + ja, pb + gn + jb);
        k.s0 = _mm512_and_si512(v0, _mm512_set1_epi32(15));
        k.s1 = _mm512_and_si512(v1, _mm512_set1_epi32(15));
        k.m0 = _mm512_srli_epi32(v0, 4);
        k.m1 = _mm512_srli_epi32(v1, 4);
        k.fs = f16x2(pa + A8K_Q2_DM(gn) + ja / 2, pb + A8K_Q2_DM(gn) + jb / 2);
        k.fm = f16x2(pa + A8K_Q2_DM(gn) + ja / 2 + 2, pb + A8K_Q2_DM(gn) + jb / 2 + 2);
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
ALWAYS_INLINE __m512i part_start(const uint8_t *At, int h, const int F, const int M) {
    if (F == KF_IQ4_XS) return ld_act(At + 512, M);                             /* corr = -128 sum q */
    if (F == KF_Q3_K) return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(ld_act(At + 640 + 64 * h, M), 2));
    return _mm512_setzero_si512();
}

/* R rows x T tokens of one group (row r's at G + r*gs) in mode M, folded into acc. */
ALWAYS_INLINE void group_k(const uint8_t *G, size_t gs, const uint8_t *A, size_t xs, __m512 acc[4][4], const int R,
                           const int T, const int F, const int M) {
    const int gn = M == M_FULL ? 16 : 8, RZ = M == M_PAIR ? R / 2 : R; /* zmm rows */
    const __mmask16 ml = M == M_HALF ? 0x00FF : 0xFFFF;
    const int ja = 0, jb = M == M_FULL ? 8 : 0;
    const uint8_t *pa[4], *pb[4];
    UNROLL for (int q = 0; q < RZ; q++) {
        pa[q] = G + (size_t)(M == M_PAIR ? 2 * q : q) * gs;
        pb[q] = M == M_PAIR ? pa[q] + gs : pa[q];
    }
    __m512i is[4][4], tot[4][4], hrun[4];
    const int NP = KF_HALVES(F) ? 2 : 1;
    UNROLL for (int q = 0; q < RZ; q++) {
        const int o = F == KF_Q5_K ? A8K_Q5_HI(gn) : A8K_Q3_HB(gn);
        hrun[q] = F == KF_Q5_K || F == KF_Q3_K ? ld_run(pa[q] + o, pb[q] + o, M) : _mm512_setzero_si512();
    }
    kscales ks[4];
    UNROLL for (int q = 0; q < RZ; q++) ks[q] = row_scales(pa[q], ja, pb[q], jb, gn, F);
    UNROLL for (int h = 0; h < NP; h++) {
        UNROLL for (int t = 0; t < T; t++) {
            const __m512i s = part_start(A + (size_t)t * xs, h, F, M);
            UNROLL for (int q = 0; q < RZ; q++) is[q][t] = s;
        }
        if (NP == 2) {            /* the half's 4 slabs from its 2-bit chunk */
            const int o = (F == KF_Q3_K ? A8K_Q3_C2(gn) : A8K_Q2_C2(gn)) + 4 * gn * h;
            UNROLL for (int s = 0; s < 4; s++) {
                __m512i a[4];
                UNROLL for (int t = 0; t < T; t++) a[t] = ld_act(A + (size_t)t * xs + 64 * (4 * h + s), M);
                UNROLL for (int q = 0; q < RZ; q++) {
                    const __m512i u = slab_u(ld_run(pa[q] + o, pb[q] + o, M), hrun[q], 4 * h + s, F);
                    UNROLL for (int t = 0; t < T; t++) is[q][t] = _mm512_dpbusd_epi32(is[q][t], u, a[t]);
                }
            }
            UNROLL for (int q = 0; q < RZ; q++) UNROLL for (int t = 0; t < T; t++) {
                const __m512i w = _mm512_mullo_epi32(is[q][t], h ? ks[q].s1 : ks[q].s0);
                tot[q][t] = h ? _mm512_add_epi32(tot[q][t], w) : w;
            }
        } else {                  /* 4 slab pairs from the nibble runs */
            UNROLL for (int p = 0; p < 4; p++) {
                __m512i a0[4], a1[4];
                UNROLL for (int t = 0; t < T; t++) {
                    a0[t] = ld_act(A + (size_t)t * xs + 128 * p, M);
                    a1[t] = ld_act(A + (size_t)t * xs + 128 * p + 64, M);
                }
                const int o = (F == KF_Q5_K ? A8K_Q5_LO(gn) : A8K_IQ4_LO(gn)) + 4 * gn * p;
                UNROLL for (int q = 0; q < RZ; q++) {
                    const __m512i z = ld_run(pa[q] + o, pb[q] + o, M);
                    const __m512i u0 = slab_u(z, hrun[q], 2 * p, F), u1 = slab_u(z, hrun[q], 2 * p + 1, F);
                    UNROLL for (int t = 0; t < T; t++) {
                        is[q][t] = _mm512_dpbusd_epi32(is[q][t], u0, a0[t]);
                        is[q][t] = _mm512_dpbusd_epi32(is[q][t], u1, a1[t]);
                    }
                }
            }
            UNROLL for (int q = 0; q < RZ; q++) UNROLL for (int t = 0; t < T; t++) tot[q][t] = is[q][t];
        }
    }
    UNROLL for (int q = 0; q < RZ; q++) UNROLL for (int t = 0; t < T; t++) {
        const uint8_t *At = A + (size_t)t * xs;
        const __m512 da = ld_actf(At + 576, M);
        /* M_PAIR: rows 2q and 2q + 1's lanes 0..7 side by side */
        __m512 c = M == M_PAIR ? _mm512_shuffle_f32x4(acc[2 * q][t], acc[2 * q + 1][t], 0x44) : acc[q][t];
        c = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(tot[q][t]), _mm512_mul_ps(ks[q].fs, da), c, ml);
        if (F == KF_Q5_K || F == KF_Q2_K) {
            const __m512i h0 = ld_act(At + 640, M), h1 = ld_act(At + 704, M);
            const __m512i ms = F == KF_Q5_K ? _mm512_add_epi32(h0, h1)
                                            : _mm512_add_epi32(_mm512_mullo_epi32(ks[q].m0, h0), _mm512_mullo_epi32(ks[q].m1, h1));
            c = _mm512_mask3_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(ks[q].fm, da), c, ml);
        }
        if (M == M_PAIR) {
            acc[2 * q][t] = _mm512_mask_mov_ps(acc[2 * q][t], 0x00FF, c);
            acc[2 * q + 1][t] = _mm512_mask_mov_ps(acc[2 * q + 1][t], 0x00FF, _mm512_shuffle_f32x4(c, c, 0xEE));
        } else {
            acc[q][t] = c;
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
        if (nb - g0 >= A8_G) group_k(G, rb, A, xs, acc, R, T, F, M_FULL);
        else if (R % 2 == 0) group_k(G, rb, A, xs, acc, R, T, F, M_PAIR);
        else group_k(G, rb, A, xs, acc, R, T, F, M_HALF);
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r * yr] = hsum16(acc[r][t]);
}

/* ---- prefill: the panel GEMM ------------------------------------------------
 * group_k unpacks a tile's codes again for every 2 tokens, which costs more
 * than the vpdpbusd it feeds. The panel GEMM unpacks a panel of 4 rows once
 * per block of A8P_TB tokens into kgroup records (per row and group: the 8
 * u slabs vpdpbusd takes and the lane scales, exactly what group_k computes
 * in registers), then runs the block's tokens over the panel A8P_T at a
 * time from L1. Per (row, token) the integer sums are the same exact int32
 * and the float steps the same operations in the same order (group by
 * group, part by part, masked to lanes 0..7 in a one-super-block group), so
 * the bits are group_k's (tests/test_act8_kquant.c). */
typedef struct { __m512i u[8]; __m512 fs, fm; __m512i s0, s1, m0, m1; } kgroup;

/* Row G's group in mode M (M_FULL or M_HALF) unpacked into k. */
ALWAYS_INLINE void unpack_k(const uint8_t *G, kgroup *k, const int F, const int M) {
    const int gn = M == M_FULL ? 16 : 8, jb = M == M_FULL ? 8 : 0;
    const int oh = F == KF_Q5_K ? A8K_Q5_HI(gn) : A8K_Q3_HB(gn);
    const __m512i hrun = F == KF_Q5_K || F == KF_Q3_K ? ld_run(G + oh, G + oh, M) : _mm512_setzero_si512();
    const kscales ks = row_scales(G, 0, G, jb, gn, F);
    k->fs = ks.fs; k->fm = ks.fm; k->s0 = ks.s0; k->s1 = ks.s1; k->m0 = ks.m0; k->m1 = ks.m1;
    if (KF_HALVES(F)) {
        UNROLL for (int h = 0; h < 2; h++) {
            const int o = (F == KF_Q3_K ? A8K_Q3_C2(gn) : A8K_Q2_C2(gn)) + 4 * gn * h;
            const __m512i z = ld_run(G + o, G + o, M);
            UNROLL for (int s = 0; s < 4; s++) k->u[4 * h + s] = slab_u(z, hrun, 4 * h + s, F);
        }
    } else {
        UNROLL for (int p = 0; p < 4; p++) {
            const int o = (F == KF_Q5_K ? A8K_Q5_LO(gn) : A8K_IQ4_LO(gn)) + 4 * gn * p;
            const __m512i z = ld_run(G + o, G + o, M);
            k->u[2 * p] = slab_u(z, hrun, 2 * p, F);
            k->u[2 * p + 1] = slab_u(z, hrun, 2 * p + 1, F);
        }
    }
}

/* R rows (row r's group at K + r*ks) x T tokens of one unpacked group, lanes ml. */
ALWAYS_INLINE void group_p(const kgroup *K, int64_t ks, const uint8_t *A, size_t xs, __mmask16 ml, __m512 acc[4][4],
                           const int R, const int T, const int F) {
    const int NP = KF_HALVES(F) ? 2 : 1, SPP = 8 / NP;
    __m512i is[4][4], tot[4][4];
    UNROLL for (int h = 0; h < NP; h++) {
        UNROLL for (int t = 0; t < T; t++) {
            const __m512i s = part_start(A + (size_t)t * xs, h, F, M_FULL);
            UNROLL for (int r = 0; r < R; r++) is[r][t] = s;
        }
        UNROLL for (int s = 0; s < SPP; s++) {
            __m512i a[4];
            UNROLL for (int t = 0; t < T; t++) a[t] = _mm512_loadu_si512(A + (size_t)t * xs + 64 * (SPP * h + s));
            UNROLL for (int r = 0; r < R; r++) {
                const __m512i u = _mm512_load_si512(&K[r * ks].u[SPP * h + s]);
                UNROLL for (int t = 0; t < T; t++) is[r][t] = _mm512_dpbusd_epi32(is[r][t], u, a[t]);
            }
        }
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) {
            if (NP == 1) { tot[r][t] = is[r][t]; continue; }
            const __m512i w = _mm512_mullo_epi32(is[r][t], h ? K[r * ks].s1 : K[r * ks].s0);
            tot[r][t] = h ? _mm512_add_epi32(tot[r][t], w) : w;
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        const __m512 fs = K[r * ks].fs;
        UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *At = A + (size_t)t * xs;
            const __m512 da = _mm512_loadu_ps((const float *)(At + 576));
            acc[r][t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(tot[r][t]), _mm512_mul_ps(fs, da), acc[r][t], ml);
            if (F == KF_Q5_K || F == KF_Q2_K) {
                const __m512i h0 = _mm512_loadu_si512(At + 640), h1 = _mm512_loadu_si512(At + 704);
                const __m512i ms = F == KF_Q5_K ? _mm512_add_epi32(h0, h1)
                                                : _mm512_add_epi32(_mm512_mullo_epi32(K[r * ks].m0, h0),
                                                                   _mm512_mullo_epi32(K[r * ks].m1, h1));
                acc[r][t] = _mm512_mask3_fnmadd_ps(_mm512_cvtepi32_ps(ms), _mm512_mul_ps(K[r * ks].fm, da), acc[r][t], ml);
            }
        }
    }
}

/* R rows of the panel (ng groups per row) x T tokens -> y[t*ys + r]. */
ALWAYS_INLINE void tile_p(const kgroup *P, int64_t ng, int64_t nb, const uint8_t *xa, size_t xs, float *y, size_t ys,
                          const int R, const int T, const int F) {
    __m512 acc[4][4];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const __mmask16 ml = nb - A8_G * g >= A8_G ? 0xFFFF : 0x00FF;
        group_p(P + g, ng, xa + (size_t)g * A8_GROUP_BYTES, xs, ml, acc, R, T, F);
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) y[(size_t)t * ys + (size_t)r] = hsum16(acc[r][t]);
}

/* All nt tokens against the R unpacked rows of the panel, A8P_T at a time. */
ALWAYS_INLINE void panel_tokens_r(const kgroup *P, int64_t ng, int64_t nb, const uint8_t *xa, size_t xs, int64_t nt,
                                  float *y, size_t ys, const int R, const int F) {
    const int TT = KF_HALVES(F) ? 2 : 3; /* halves also keep tot[R][T] live: 4 x 3 would spill */
    int64_t t = 0;
    for (; t + TT <= nt; t += TT) tile_p(P, ng, nb, xa + (size_t)t * xs, xs, y + (size_t)t * ys, ys, R, TT, F);
    for (; t < nt; t++) tile_p(P, ng, nb, xa + (size_t)t * xs, xs, y + (size_t)t * ys, ys, R, 1, F);
}

#define A8P_R 4        /* rows per panel */
#define A8P_TB 64      /* tokens per block: their activations (48 KB at n = 2048) stay in L2 */
#define A8P_MAXG 16    /* groups per row in the panel buffer (n <= 8192; 56 KB of stack) */

ALWAYS_INLINE void panel_gemm(const uint8_t *W, size_t rb, int64_t nrows, const uint8_t *X, size_t xs, int64_t ntok,
                              float *y, size_t ys, int64_t n, const int F) {
    const int64_t nb = n / 32, ng = (nb + A8_G - 1) / A8_G;
    _Alignas(64) kgroup P[A8P_R * A8P_MAXG];
    for (int64_t t0 = 0; t0 < ntok; t0 += A8P_TB) {
        const int64_t nt = ntok - t0 < A8P_TB ? ntok - t0 : A8P_TB;
        for (int64_t r = 0; r < nrows; r += A8P_R) {
            const int R = nrows - r < A8P_R ? (int)(nrows - r) : A8P_R;
            for (int rr = 0; rr < R; rr++)
                for (int64_t g = 0; g < ng; g++) {
                    const uint8_t *G = W + (size_t)(r + rr) * rb + (size_t)(g * 2) * KF_QB(F);
                    if (nb - A8_G * g >= A8_G) unpack_k(G, &P[rr * ng + g], F, M_FULL);
                    else unpack_k(G, &P[rr * ng + g], F, M_HALF);
                }
            const uint8_t *Xt = X + (size_t)t0 * xs;
            float *yt = y + (size_t)t0 * ys + r;
            if (R == 4) panel_tokens_r(P, ng, nb, Xt, xs, nt, yt, ys, 4, F);
            else if (R == 3) panel_tokens_r(P, ng, nb, Xt, xs, nt, yt, ys, 3, F);
            else if (R == 2) panel_tokens_r(P, ng, nb, Xt, xs, nt, yt, ys, 2, F);
            else panel_tokens_r(P, ng, nb, Xt, xs, nt, yt, ys, 1, F);
        }
    }
}

/* Fewer tokens than this (decode's experts: 1 token each) take the tiled
 * driver: a panel unpacked for them costs more than unpacking in registers. */
#define A8P_MIN_TOK 4

/* gemv: quant_internal.h's tiled driver; gemm: the panel GEMM, or that
 * driver's gemm for rows too long for the panel buffer or few tokens. */
#define A8K_KERNELS(name, F) \
    MOE_A8_PANEL_KERNELS(name, avx512, tile_k, panel_gemm, F, A8P_MIN_TOK, A8P_MAXG * A8_G * 32) /* quant_internal.h */
A8K_KERNELS(q5_k, KF_Q5_K)
A8K_KERNELS(q3_k, KF_Q3_K)
A8K_KERNELS(q2_k, KF_Q2_K)
A8K_KERNELS(iq4_xs, KF_IQ4_XS)
