/* act8_kquant_avx2.c — the act_q8 kernels of Q5_K, Q3_K, Q2_K and IQ4_XS
 * with AVX2, bit-identical to act8_kquant_ref.c.
 *
 * As act8_kquant_avx512.c, in lane halves (act8_avx2.c): a ymm holds bytes
 * 32L.. of a run or slab, blocks 8L..8L+7 — exactly super-block L of the
 * group, so a row's last group of one super-block is half 0 alone and no
 * load or FMA needs a mask. The integer products: Q5_K, Q3_K, Q2_K's u <=
 * 31 makes vpmaddubsw exact (two slabs: |sum| <= 4 * 31 * 127; Q3_K / Q2_K's
 * four slabs of a half <= 8 * 7 * 127), then one vpmaddwd by 1 to int32;
 * IQ4_XS takes its signed levels q = kv[c] (|q| <= 127) instead of the
 * reference's u = q + 128 and correction: vpmaddubsw of |q| against the
 * activations with q's sign (vpsignb; moe_quantize_act8 clamps to
 * [-127, 127], so a pair is <= 2 * 127 * 127 < 32767: exact), then vpmaddwd
 * by 1 — the same int32 block sums (sum u*a - 128 sum a = sum q*a) in 4
 * instructions per 32 bytes and row x token where the even/odd split took
 * 9. The panel GEMM (prefill) takes IQ4_XS's u = kv + 128 as two base-16
 * digits instead (iq4_digits: two vpmaddubsw per 32 bytes, the sums from
 * the correction, exact for any activation byte): vpsignb competes with
 * the multiplies for the same two pipes on Zen 3, and the panel unpacks the
 * digits once per block of tokens. The halves' integer scales (Q3_K, Q2_K)
 * multiply with vpmulld (exact, < 2^24); the float steps per block lane are
 * the contract's. */
#include "quant/act8_kquant.h"

#include <immintrin.h>

#include "quant/simd_avx2.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
/* act8_avx2.c's KEEP: an add chain GCC must not re-associate into a tree. */
#define KEEP(v) __asm__("" : "+x"(v))

enum { KF_Q5_K, KF_Q3_K, KF_Q2_K, KF_IQ4_XS };
#define KF_QB(F) ((F) == KF_Q5_K ? QB_Q5_K : (F) == KF_Q3_K ? QB_Q3_K : (F) == KF_Q2_K ? QB_Q2_K : QB_IQ4_XS)
#define KF_HALVES(F) ((F) == KF_Q3_K || (F) == KF_Q2_K)

ALWAYS_INLINE __m256i ld(const uint8_t *p) { return _mm256_loadu_si256((const __m256i *)p); }
/* A half scale in all lanes: broadcast-loaded from moe_f16_f32_tab (the
 * reference conversion; quant_internal.h), no vector instruction, where a
 * vpbroadcastw and a vcvtph2ps took two in kernels bound by their vector
 * instructions (docs/PERFORMANCE.md, "What moved the numbers"). */
ALWAYS_INLINE __m256 f16_bcast(const uint8_t *p) { return _mm256_set1_ps(moe_f16_f32_tab[moe_rd16(p)]); }
ALWAYS_INLINE __m256i bytes8(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

/* Q5_K: one header's 12 scale bytes (16 bytes at hdr) unpacked to {sc0..7,
 * m0..7} (moe_q4k_unpack16 on dword lanes). */
ALWAYS_INLINE __m128i q5k_unpack(const uint8_t *hdr) {
    const __m128i u = _mm_srli_si128(_mm_loadu_si128((const __m128i *)hdr), 4); /* u0 u1 u2 0 */
    const __m128i a = _mm_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0));            /* u0 u2 u1 u2 */
    const __m128i b = _mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0));            /* u0 u0 u1 u1 */
    const __m128i lo = _mm_and_si128(a, _mm_set1_epi8(0x3F));
    const __m128i hi = _mm_or_si128(_mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)), _mm_set1_epi8(0x0F)),
                                    _mm_and_si128(_mm_srli_epi32(b, 2), _mm_set1_epi8(0x30)));
    return _mm_blend_epi32(lo, hi, 0xA);
}

/* A row's scales for super-block L of a group (act8_kquant_avx512.c's kscales). */
typedef struct { __m256 fs, fm; __m256i s0, s1, m0, m1; } kscales;

ALWAYS_INLINE kscales row_scales(const uint8_t *G, int gn, int L, const int F) {
    kscales k;
    k.fm = _mm256_setzero_ps();
    k.s0 = k.s1 = k.m0 = k.m1 = _mm256_setzero_si256();
    const __m256i sh8 = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    if (F == KF_Q5_K) {
        const uint8_t *hdr = G + 16 * L;
        const __m128i v = q5k_unpack(hdr);
        k.fs = _mm256_mul_ps(f16_bcast(hdr), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)));
        k.fm = _mm256_mul_ps(f16_bcast(hdr + 2), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(v, 8))));
    } else if (F == KF_IQ4_XS) {
        const uint8_t *hdr = G + 8 * L;
        const __m256i dsh = _mm256_set1_epi32((int)moe_kq_rd32(hdr)), sl = _mm256_set1_epi32((int)moe_kq_rd32(hdr + 4));
        const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(sl, sh8), _mm256_set1_epi32(15));
        const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(dsh, _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30)),
                                            _mm256_set1_epi32(3));
        const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
        k.fs = _mm256_mul_ps(f16_bcast(hdr), _mm256_cvtepi32_ps(ls));
    } else if (F == KF_Q3_K) {
        const __m256i sl = bytes8(G + 8 * L), sh = _mm256_set1_epi32((int)moe_kq_rd32(G + A8K_Q3_SH(gn) + 4 * L));
        UNROLL for (int h = 0; h < 2; h++) {
            const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(sl, 4 * h), _mm256_set1_epi32(15));
            const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(sh, _mm256_add_epi32(sh8, _mm256_set1_epi32(2 * h))),
                                                _mm256_set1_epi32(3));
            const __m256i s = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
            if (h == 0) k.s0 = s; else k.s1 = s;
        }
        k.fs = f16_bcast(G + A8K_Q3_D(gn) + 2 * L);
    } else {
        const __m256i v0 = bytes8(G + 8 * L), v1 = bytes8(G + gn + 8 * L);
        k.s0 = _mm256_and_si256(v0, _mm256_set1_epi32(15));
        k.s1 = _mm256_and_si256(v1, _mm256_set1_epi32(15));
        k.m0 = _mm256_srli_epi32(v0, 4);
        k.m1 = _mm256_srli_epi32(v1, 4);
        k.fs = f16_bcast(G + A8K_Q2_DM(gn) + 4 * L);
        k.fm = f16_bcast(G + A8K_Q2_DM(gn) + 4 * L + 2);
    }
    return k;
}

/* u of slab t (act8_kquant_avx512.c's slab_u, lane half). */
ALWAYS_INLINE __m256i slab_u(__m256i z, __m256i h, const int t, const int F) {
    if (F == KF_Q3_K || F == KF_Q2_K) {
        const int s = t % 4;
        const __m256i v = _mm256_and_si256(s ? _mm256_srli_epi16(z, 2 * s) : z, _mm256_set1_epi8(3));
        if (F == KF_Q2_K) return v;
        const __m256i hb = t <= 2 ? _mm256_slli_epi16(h, 2 - t) : _mm256_srli_epi16(h, t - 2);
        return _mm256_or_si256(v, _mm256_and_si256(hb, _mm256_set1_epi8(4)));
    }
    const __m256i nib = _mm256_and_si256(t % 2 ? _mm256_srli_epi16(z, 4) : z, _mm256_set1_epi8(0x0F));
    if (F == KF_IQ4_XS) {   /* the signed level kv[c] (moe_kq_iq4nl), not u = kv + 128 */
        const __m256i tab = ld128x2(moe_kq_iq4nl);
        return _mm256_shuffle_epi8(tab, nib);
    }
    const __m256i hb = t <= 4 ? _mm256_slli_epi16(h, 4 - t) : _mm256_srli_epi16(h, t - 4);
    return _mm256_or_si256(nib, _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
}

/* IQ4_XS's level kv[c] + 128 of the codes nib as two base-16 digits, hi
 * and lo (kv + 128 = 16 hi + lo, each 0..15; moe_kq_iq4nl + 128 = 1, 24,
 * 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241):
 * vpmaddubsw of a digit against any activation bytes is exact (a pair <= 2
 * * 15 * 128), and 8 slabs of them add in int16 (<= 30720) before one
 * widening. Two vpmaddubsw per 32 bytes, where the sign trick took vpsignb,
 * vpmaddubsw and vpmaddwd on the two pipes that multiply. */
static const uint8_t iq4_hi[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 10, 11, 12, 13, 15};
static const uint8_t iq4_lo[16] = {1, 8, 13, 15, 15, 13, 10, 6, 1, 13, 9, 6, 5, 5, 9, 1};
ALWAYS_INLINE void iq4_digits(__m256i nib, __m256i *hi, __m256i *lo) {
    *hi = _mm256_shuffle_epi8(ld128x2(iq4_hi), nib);
    *lo = _mm256_shuffle_epi8(ld128x2(iq4_lo), nib);
}

/* int16 pair sums to int32 lanes. */
ALWAYS_INLINE __m256i widen(__m256i s16) { return _mm256_madd_epi16(s16, _mm256_set1_epi16(1)); }
/* R rows x T tokens of super-block L of one group (row r at G + r*gs). */
ALWAYS_INLINE void group_k(const uint8_t *G, size_t gs, int gn, const uint8_t *A, size_t xs, int L, __m256 acc[4][4],
                           const int R, const int T, const int F) {
    __m256i is[4][4], tot[4][4], hrun[4];
    const int NP = KF_HALVES(F) ? 2 : 1;
    UNROLL for (int r = 0; r < R; r++) {
        const uint8_t *Gr = G + (size_t)r * gs + 32 * L;
        hrun[r] = F == KF_Q5_K ? ld(Gr + A8K_Q5_HI(gn)) : F == KF_Q3_K ? ld(Gr + A8K_Q3_HB(gn)) : _mm256_setzero_si256();
    }
    kscales ks[4];
    UNROLL for (int r = 0; r < R; r++) ks[r] = row_scales(G + (size_t)r * gs, gn, L, F);
    UNROLL for (int h = 0; h < NP; h++) {
        UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *At = A + (size_t)t * xs + 32 * L;
            const __m256i s = F == KF_Q3_K ? _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(ld(At + 640 + 64 * h), 2))
                                           : _mm256_setzero_si256();
            UNROLL for (int r = 0; r < R; r++) is[r][t] = s;
        }
        if (NP == 2) {            /* the half's 4 slabs from its 2-bit chunk */
            UNROLL for (int r = 0; r < R; r++) {
                const uint8_t *c2 = G + (size_t)r * gs + (F == KF_Q3_K ? A8K_Q3_C2(gn) : A8K_Q2_C2(gn)) + 4 * gn * h + 32 * L;
                const __m256i z = ld(c2);
                __m256i u[4];
                UNROLL for (int s = 0; s < 4; s++) u[s] = slab_u(z, hrun[r], 4 * h + s, F);
                UNROLL for (int t = 0; t < T; t++) {
                    const uint8_t *At = A + (size_t)t * xs + 256 * h + 32 * L;
                    __m256i s16 = _mm256_maddubs_epi16(u[0], ld(At));
                    UNROLL for (int s = 1; s < 4; s++) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(u[s], ld(At + 64 * s)));
                    is[r][t] = _mm256_add_epi32(is[r][t], widen(s16));
                }
            }
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) {
                const __m256i w = _mm256_mullo_epi32(is[r][t], h ? ks[r].s1 : ks[r].s0);
                tot[r][t] = h ? _mm256_add_epi32(tot[r][t], w) : w;
            }
        } else {                  /* 4 slab pairs from the nibble runs */
            UNROLL for (int p = 0; p < 4; p++) {
                UNROLL for (int r = 0; r < R; r++) {
                    const uint8_t *lo = G + (size_t)r * gs + (F == KF_Q5_K ? A8K_Q5_LO(gn) : A8K_IQ4_LO(gn));
                    const __m256i z = ld(lo + 4 * gn * p + 32 * L);
                    const __m256i u0 = slab_u(z, hrun[r], 2 * p, F), u1 = slab_u(z, hrun[r], 2 * p + 1, F);
                    const __m256i ua0 = _mm256_abs_epi8(u0), ua1 = _mm256_abs_epi8(u1);   /* IQ4_XS */
                    UNROLL for (int t = 0; t < T; t++) {
                        const uint8_t *At = A + (size_t)t * xs + 128 * p + 32 * L;
                        const __m256i a0 = ld(At), a1 = ld(At + 64);
                        if (F == KF_IQ4_XS) {
                            is[r][t] = dot_signed(is[r][t], ua0, u0, a0);
                            is[r][t] = dot_signed(is[r][t], ua1, u1, a1);
                        } else {
                            is[r][t] = _mm256_add_epi32(is[r][t], widen(_mm256_add_epi16(_mm256_maddubs_epi16(u0, a0),
                                                                                       _mm256_maddubs_epi16(u1, a1))));
                        }
                    }
                }
            }
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) tot[r][t] = is[r][t];
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) {
        const uint8_t *At = A + (size_t)t * xs;
        const __m256 da = _mm256_loadu_ps((const float *)(At + 576 + 32 * L));
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[r][t]), _mm256_mul_ps(ks[r].fs, da), acc[r][t]);
        if (F == KF_Q5_K || F == KF_Q2_K) {
            const __m256i h0 = ld(At + 640 + 32 * L), h1 = ld(At + 704 + 32 * L);
            const __m256i ms = F == KF_Q5_K ? _mm256_add_epi32(h0, h1)
                                            : _mm256_add_epi32(_mm256_mullo_epi32(ks[r].m0, h0), _mm256_mullo_epi32(ks[r].m1, h1));
            acc[r][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(ks[r].fm, da), acc[r][t]);
        }
    }
}

/* R rows (rb bytes apart) x T tokens (A8 rows xs apart) -> y[t*ys + r*yr];
 * acc[L] holds lanes 8L..8L+7 (half 1 stays +0 in a one-super-block group). */
ALWAYS_INLINE void tile_k(const uint8_t *w, size_t rb, const uint8_t *xa, size_t xs, float *y, size_t ys, size_t yr,
                          int64_t n, const int R, const int T, const int F) {
    const int64_t nb = n / 32;
    __m256 acc[2][4][4];
    UNROLL for (int L = 0; L < 2; L++) UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        acc[L][r][t] = _mm256_setzero_ps();
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const uint8_t *G = w + (size_t)(g0 / 8) * KF_QB(F), *A = xa + (size_t)(g0 / A8_G) * A8_GROUP_BYTES;
        if (nb - g0 >= A8_G) {
            UNROLL for (int L = 0; L < 2; L++) group_k(G, rb, A8_G, A, xs, L, acc[L], R, T, F);
        } else {
            group_k(G, rb, 8, A, xs, 0, acc[0], R, T, F);
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r * yr] = hsum16(acc[0][r][t], acc[1][r][t]);
}

/* ---- prefill: the panel GEMM (act8_kquant_avx512.c says why) -------------
 * A panel of 4 rows is unpacked once per block of A8P_TB tokens into khalf
 * records (per row, group and lane half: the 8 u slabs and the lane scales
 * group_k computes), then the block's tokens run over it 2 x 2 at a time,
 * lane half 0 over all groups, then half 1 (each lane's FMAs stay in group
 * order; a one-super-block group has no half 1). The integer sums are the
 * same exact int32 (group_k's vpmaddubsw / even-odd vpmaddwd steps), the
 * float steps group_k's in its order, so the bits are its bits. */
typedef struct { __m256i u[8]; __m256 fs, fm; __m256i s0, s1, m0, m1; } khalf;
/* khalf records per lane half: IQ4_XS's second holds its lo digits (iq4_digits) */
#define KH_N(F) ((F) == KF_IQ4_XS ? 2 : 1)

/* Lane half L of row G's group (gn blocks) unpacked into k (KH_N(F) records). */
ALWAYS_INLINE void unpack_k(const uint8_t *G, int gn, int L, khalf *k, const int F) {
    const __m256i hrun = F == KF_Q5_K ? ld(G + A8K_Q5_HI(gn) + 32 * L)
                         : F == KF_Q3_K ? ld(G + A8K_Q3_HB(gn) + 32 * L) : _mm256_setzero_si256();
    const kscales ks = row_scales(G, gn, L, F);
    k->fs = ks.fs; k->fm = ks.fm; k->s0 = ks.s0; k->s1 = ks.s1; k->m0 = ks.m0; k->m1 = ks.m1;
    if (KF_HALVES(F)) {
        UNROLL for (int h = 0; h < 2; h++) {
            const __m256i z = ld(G + (F == KF_Q3_K ? A8K_Q3_C2(gn) : A8K_Q2_C2(gn)) + 4 * gn * h + 32 * L);
            UNROLL for (int s = 0; s < 4; s++) k->u[4 * h + s] = slab_u(z, hrun, 4 * h + s, F);
        }
    } else if (F == KF_IQ4_XS) {  /* k[0].u[s]: slab s's hi digits, k[1].u[s] its lo digits */
        UNROLL for (int p = 0; p < 4; p++) {
            const __m256i z = ld(G + A8K_IQ4_LO(gn) + 4 * gn * p + 32 * L), m4 = _mm256_set1_epi8(0x0F);
            iq4_digits(_mm256_and_si256(z, m4), &k[0].u[2 * p], &k[1].u[2 * p]);
            iq4_digits(_mm256_and_si256(_mm256_srli_epi16(z, 4), m4), &k[0].u[2 * p + 1], &k[1].u[2 * p + 1]);
        }
    } else {
        UNROLL for (int p = 0; p < 4; p++) {
            const __m256i z = ld(G + A8K_Q5_LO(gn) + 4 * gn * p + 32 * L);
            k->u[2 * p] = slab_u(z, hrun, 2 * p, F);
            k->u[2 * p + 1] = slab_u(z, hrun, 2 * p + 1, F);
        }
    }
}

/* R rows (row r's record at K + r*ks) x T tokens of lane half L of one group. */
ALWAYS_INLINE void group_p(const khalf *K, int64_t ks, const uint8_t *A, size_t xs, int L, __m256 acc[4][4],
                           const int R, const int T, const int F) {
    const int NP = KF_HALVES(F) ? 2 : 1;
    __m256i is[4][4], tot[4][4];
    UNROLL for (int h = 0; h < NP; h++) {
        UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *At = A + (size_t)t * xs + 32 * L;
            const __m256i s = F == KF_Q3_K ? _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(ld(At + 640 + 64 * h), 2))
                                           : _mm256_setzero_si256();
            UNROLL for (int r = 0; r < R; r++) is[r][t] = s;
        }
        if (NP == 2) {
            UNROLL for (int t = 0; t < T; t++) {
                const uint8_t *At = A + (size_t)t * xs + 256 * h + 32 * L;
                const __m256i a0 = ld(At), a1 = ld(At + 64), a2 = ld(At + 128), a3 = ld(At + 192);
                UNROLL for (int r = 0; r < R; r++) {
                    const __m256i *u = &K[r * ks].u[4 * h];
                    __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(u[0], a0), _mm256_maddubs_epi16(u[1], a1));
                    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(u[2], a2));
                    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(u[3], a3));
                    is[r][t] = _mm256_add_epi32(is[r][t], widen(s16));
                }
            }
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) {
                const __m256i w = _mm256_mullo_epi32(is[r][t], h ? K[r * ks].s1 : K[r * ks].s0);
                tot[r][t] = h ? _mm256_add_epi32(tot[r][t], w) : w;
            }
        } else if (F == KF_IQ4_XS) {   /* sum (16 hi + lo) a - 128 sum a: from corr */
            __m256i shi[4][4], slo[4][4];
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
                shi[r][t] = slo[r][t] = _mm256_setzero_si256();
            UNROLL for (int s = 0; s < 8; s++) {
                __m256i a[4];
                UNROLL for (int t = 0; t < T; t++) {
                    a[t] = ld(A + (size_t)t * xs + 64 * s + 32 * L);
                    KEEP(a[t]);
                }
                UNROLL for (int r = 0; r < R; r++) {
                    __m256i hi = K[r * ks].u[s], lo = K[r * ks + 1].u[s];
                    KEEP(hi);
                    KEEP(lo);
                    UNROLL for (int t = 0; t < T; t++) {
                        shi[r][t] = _mm256_add_epi16(shi[r][t], _mm256_maddubs_epi16(hi, a[t]));
                        slo[r][t] = _mm256_add_epi16(slo[r][t], _mm256_maddubs_epi16(lo, a[t]));
                        KEEP(shi[r][t]);
                        KEEP(slo[r][t]);
                    }
                }
            }
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) {
                const __m256i c = ld(A + (size_t)t * xs + 512 + 32 * L);
                tot[r][t] = _mm256_add_epi32(_mm256_add_epi32(c, _mm256_madd_epi16(shi[r][t], _mm256_set1_epi16(16))),
                                             widen(slo[r][t]));
            }
        } else {
            UNROLL for (int p = 0; p < 4; p++) {
                UNROLL for (int t = 0; t < T; t++) {
                    const uint8_t *At = A + (size_t)t * xs + 128 * p + 32 * L;
                    const __m256i a0 = ld(At), a1 = ld(At + 64);
                    UNROLL for (int r = 0; r < R; r++) {
                        const __m256i u0 = K[r * ks].u[2 * p], u1 = K[r * ks].u[2 * p + 1];
                        is[r][t] = _mm256_add_epi32(is[r][t], widen(_mm256_add_epi16(_mm256_maddubs_epi16(u0, a0),
                                                                                   _mm256_maddubs_epi16(u1, a1))));
                    }
                }
            }
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) tot[r][t] = is[r][t];
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) {
        const uint8_t *At = A + (size_t)t * xs;
        const __m256 da = _mm256_loadu_ps((const float *)(At + 576 + 32 * L));
        acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[r][t]), _mm256_mul_ps(K[r * ks].fs, da), acc[r][t]);
        if (F == KF_Q5_K || F == KF_Q2_K) {
            const __m256i h0 = ld(At + 640 + 32 * L), h1 = ld(At + 704 + 32 * L);
            const __m256i ms = F == KF_Q5_K ? _mm256_add_epi32(h0, h1)
                                            : _mm256_add_epi32(_mm256_mullo_epi32(K[r * ks].m0, h0),
                                                               _mm256_mullo_epi32(K[r * ks].m1, h1));
            acc[r][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms), _mm256_mul_ps(K[r * ks].fm, da), acc[r][t]);
        }
    }
}

/* R rows of the panel (records [row][group][half], ng groups) x T tokens -> y[t*ys + r]. */
ALWAYS_INLINE void tile_p(const khalf *P, int64_t ng, int64_t nb, const uint8_t *xa, size_t xs, float *y, size_t ys,
                          const int R, const int T, const int F) {
    __m256 acc[2][4][4];
    UNROLL for (int L = 0; L < 2; L++) {
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[L][r][t] = _mm256_setzero_ps();
        for (int64_t g = 0; g < ng; g++) {
            if (L == 1 && nb - A8_G * g < A8_G) break;   /* one super-block: no half 1 */
            group_p(P + (2 * g + L) * KH_N(F), 2 * ng * KH_N(F), xa + (size_t)g * A8_GROUP_BYTES, xs, L, acc[L], R,
                    T, F);
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r] = hsum16(acc[0][r][t], acc[1][r][t]);
}

ALWAYS_INLINE void panel_tokens_r(const khalf *P, int64_t ng, int64_t nb, const uint8_t *xa, size_t xs, int64_t nt,
                                  float *y, size_t ys, const int R, const int F) {
    int64_t t = 0;
    for (; t + 2 <= nt; t += 2) tile_p(P, ng, nb, xa + (size_t)t * xs, xs, y + (size_t)t * ys, ys, R, 2, F);
    for (; t < nt; t++) tile_p(P, ng, nb, xa + (size_t)t * xs, xs, y + (size_t)t * ys, ys, R, 1, F);
}

#define A8P_R 4        /* rows per panel */
#define A8P_TB 64      /* tokens per block */
#define A8P_MAXG 16    /* groups per row in the panel buffer (n <= 8192; 112 KB of stack, IQ4_XS's digits) */

/* A panel's rows, 2 at a time (the 16 ymm registers hold a 2 x 2 tile). */
ALWAYS_INLINE void panel_gemm(const uint8_t *W, size_t rb, int64_t nrows, const uint8_t *X, size_t xs, int64_t ntok,
                              float *y, size_t ys, int64_t n, const int F) {
    const int64_t nb = n / 32, ng = (nb + A8_G - 1) / A8_G;
    _Alignas(32) khalf P[A8P_R * A8P_MAXG * 2 * 2];
    for (int64_t t0 = 0; t0 < ntok; t0 += A8P_TB) {
        const int64_t nt = ntok - t0 < A8P_TB ? ntok - t0 : A8P_TB;
        for (int64_t r = 0; r < nrows; r += A8P_R) {
            const int R = nrows - r < A8P_R ? (int)(nrows - r) : A8P_R;
            for (int rr = 0; rr < R; rr++)
                for (int64_t g = 0; g < ng; g++) {
                    const uint8_t *G = W + (size_t)(r + rr) * rb + (size_t)(g * 2) * KF_QB(F);
                    khalf *k = &P[(rr * ng + g) * 2 * KH_N(F)];
                    if (nb - A8_G * g >= A8_G) {
                        unpack_k(G, A8_G, 0, k, F);
                        unpack_k(G, A8_G, 1, k + KH_N(F), F);
                    } else {
                        unpack_k(G, 8, 0, k, F);
                    }
                }
            const uint8_t *Xt = X + (size_t)t0 * xs;
            float *yt = y + (size_t)t0 * ys + r;
            int rr = 0;
            const int64_t rs = ng * 2 * KH_N(F);   /* records per row */
            for (; rr + 2 <= R; rr += 2) panel_tokens_r(P + rr * rs, ng, nb, Xt, xs, nt, yt + rr, ys, 2, F);
            if (rr < R) panel_tokens_r(P + rr * rs, ng, nb, Xt, xs, nt, yt + rr, ys, 1, F);
        }
    }
}

/* Fewer tokens than this (decode's experts: 1 token each) take the tiled
 * driver: a panel unpacked for them costs more than unpacking in registers. */
#define A8P_MIN_TOK 4

/* gemv: quant_internal.h's tiled driver; gemm: the panel GEMM, or that
 * driver's gemm for rows too long for the panel buffer or few tokens. */
#define A8K_KERNELS(name, F) \
    MOE_A8_PANEL_KERNELS(name, avx2, tile_k, panel_gemm, F, A8P_MIN_TOK, A8P_MAXG * A8_G * 32) /* quant_internal.h */
A8K_KERNELS(q5_k, KF_Q5_K)
A8K_KERNELS(q3_k, KF_Q3_K)
A8K_KERNELS(q2_k, KF_Q2_K)
A8K_KERNELS(iq4_xs, KF_IQ4_XS)
