/* act8_legacy_avx2.c — the act_q8 kernels of Q4_1, Q5_0, Q5_1 and IQ4_NL
 * with AVX2, bit-identical to act8_legacy_ref.c.
 *
 * As act8_legacy_avx512.c, in lane halves (act8_avx2.c): a ymm holds bytes
 * 32L.. of a slab, blocks 8L..8L+7, whose int32 lanes are exactly those
 * blocks' lanes of the contract. The integer products: the others' u <= 31
 * makes vpmaddubsw exact (bench_quant AVX2 'a8 128x2048', 1 thread, L2:
 * Q4_1 / Q5_0 / Q5_1 16.4 / 15.8 / 17.3 GB/s where act8_avx2.c's even/odd
 * split took them all); IQ4_NL's u = kv + 128 reaches 241, where vpmaddubsw
 * would saturate, so it takes the signed level q = kv (|q| <= 127) instead,
 * with act8_kquant_avx2.c's sign trick (vpmaddubsw of |q| and the
 * activation with q's sign, exact for activations in [-127, 127]) and no
 * correction: the same int32 sums. A row's last, partial group (gn < 16) is read
 * with dword-masked loads (vpmaskmovd: nothing past the group is touched)
 * and its FMAs blended in for lanes j < gn only. */
#include "quant/kquant.h"
#include "quant/quant_internal.h"

#include <immintrin.h>

#include "quant/simd_avx2.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

enum { LF_Q4_1, LF_Q5_0, LF_Q5_1, LF_IQ4_NL };
#define LF_HAS_M(F) ((F) == LF_Q4_1 || (F) == LF_Q5_1)
#define LF_FIVE(F) ((F) == LF_Q5_0 || (F) == LF_Q5_1)
#define LF_BPB(F) ((F) == LF_Q4_1 ? 20 : (F) == LF_Q5_0 ? 22 : (F) == LF_Q5_1 ? 24 : 18)

/* u of slab t (lane half) from its pair z (and, 5-bit formats, the hi area h). */
ALWAYS_INLINE __m256i slab_u(__m256i z, __m256i h, const int t, const int F) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i nib = _mm256_and_si256(t % 2 ? _mm256_srli_epi16(z, 4) : z, m4);
    if (F == LF_IQ4_NL) {   /* the signed level kv[c] (moe_kq_iq4nl) */
        const __m256i tab = ld128x2(moe_kq_iq4nl);
        return _mm256_shuffle_epi8(tab, nib);
    }
    if (!LF_FIVE(F)) return nib;
    const __m256i hb = t <= 4 ? _mm256_slli_epi16(h, 4 - t) : _mm256_srli_epi16(h, t - 4);
    return _mm256_or_si256(nib, _mm256_and_si256(hb, _mm256_set1_epi8(0x10)));
}

/* 32 bytes at p: plain in a full group, else the dwords in live only. */
ALWAYS_INLINE __m256i ld_run(const uint8_t *p, __m256i live, const int PARTIAL) {
    return PARTIAL ? _mm256_maskload_epi32((const int *)p, live) : _mm256_loadu_si256((const __m256i *)p);
}
/* 8 f16 at p (lane half L of d or m) as floats; partial: the dwords up to
 * lane gn - 8L (one f16 past it may be read: still inside the group, and
 * its lane is blended away). */
ALWAYS_INLINE __m256 ld_f16(const uint8_t *p, int nl, const int PARTIAL) {
    if (!PARTIAL) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    const __m128i k = _mm_cmpgt_epi32(_mm_set1_epi32((nl + 1) / 2), _mm_setr_epi32(0, 1, 2, 3));
    return _mm256_cvtph_ps(_mm_maskload_epi32((const int *)p, k));
}

/* R rows x T tokens of lane half L of one group of gn blocks (row r at G +
 * r*gs), folded into acc for the lanes j < gn. */
ALWAYS_INLINE void group_l(const uint8_t *G, size_t gs, int gn, const uint8_t *A, size_t xs, int L,
                           __m256 acc[4][4], const int R, const int T, const int F, const int PARTIAL) {
    const int ns = LF_HAS_M(F) ? 4 : 2, nl = gn - 8 * L; /* live lanes of this half */
    const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(nl), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256i is[4][4], h[4];
    UNROLL for (int t = 0; t < T; t++) {
        const __m256i c = _mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 512 + 32 * L));
        const __m256i s = F == LF_Q5_0 ? _mm256_srai_epi32(c, 3) : _mm256_setzero_si256();
        UNROLL for (int r = 0; r < R; r++) is[r][t] = s;
    }
    UNROLL for (int r = 0; r < R; r++)
        h[r] = LF_FIVE(F) ? ld_run(G + (size_t)r * gs + (ns + 16) * gn + 32 * L, live, PARTIAL) : _mm256_setzero_si256();
    UNROLL for (int p = 0; p < 4; p++) {
        UNROLL for (int r = 0; r < R; r++) {
            const __m256i z = ld_run(G + (size_t)r * gs + (ns + 4 * p) * gn + 32 * L, live, PARTIAL);
            const __m256i u0 = slab_u(z, h[r], 2 * p, F), u1 = slab_u(z, h[r], 2 * p + 1, F);
            const __m256i ua0 = _mm256_abs_epi8(u0), ua1 = _mm256_abs_epi8(u1);   /* IQ4_NL */
            UNROLL for (int t = 0; t < T; t++) {
                const uint8_t *At = A + (size_t)t * xs + 128 * p + 32 * L;
                const __m256i a0 = _mm256_loadu_si256((const __m256i *)At), a1 = _mm256_loadu_si256((const __m256i *)(At + 64));
                if (F == LF_IQ4_NL) {
                    is[r][t] = dot_signed(is[r][t], ua0, u0, a0);
                    is[r][t] = dot_signed(is[r][t], ua1, u1, a1);
                } else { /* u <= 31: vpmaddubsw is exact, |pair| <= 2*31*128, two slabs <= 15872 */
                    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(u0, a0), _mm256_maddubs_epi16(u1, a1));
                    is[r][t] = _mm256_add_epi32(is[r][t], _mm256_madd_epi16(s16, _mm256_set1_epi16(1)));
                }
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        const __m256 d = ld_f16(G + (size_t)r * gs + 16 * L, nl, PARTIAL);
        const __m256 m = LF_HAS_M(F) ? ld_f16(G + (size_t)r * gs + 2 * gn + 16 * L, nl, PARTIAL) : _mm256_setzero_ps();
        UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *At = A + (size_t)t * xs;
            const __m256 da = _mm256_loadu_ps((const float *)(At + 576 + 32 * L));
            __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r][t]), _mm256_mul_ps(d, da), acc[r][t]);
            if (LF_HAS_M(F)) {
                const __m256i qs = _mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(At + 640 + 32 * L)),
                                                    _mm256_loadu_si256((const __m256i *)(At + 704 + 32 * L)));
                v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(qs), _mm256_mul_ps(m, da), v);
            }
            acc[r][t] = PARTIAL ? _mm256_blendv_ps(acc[r][t], v, _mm256_castsi256_ps(live)) : v;
        }
    }
}

/* R rows (rb bytes apart) x T tokens (A8 rows xs apart) -> y[t*ys + r*yr];
 * acc[.][.] of half L: lanes 8L..8L+7. */
ALWAYS_INLINE void tile_l(const uint8_t *w, size_t rb, const uint8_t *xa, size_t xs, float *y, size_t ys, size_t yr,
                          int64_t n, const int R, const int T, const int F) {
    const int64_t nb = n / 32;
    __m256 acc[2][4][4];
    UNROLL for (int L = 0; L < 2; L++) UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        acc[L][r][t] = _mm256_setzero_ps();
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
        const uint8_t *G = w + (size_t)g0 * LF_BPB(F), *A = xa + (size_t)(g0 / A8_G) * A8_GROUP_BYTES;
        if (gn == A8_G) {
            UNROLL for (int L = 0; L < 2; L++) group_l(G, rb, A8_G, A, xs, L, acc[L], R, T, F, 0);
        } else {
            group_l(G, rb, gn, A, xs, 0, acc[0], R, T, F, 1);
            if (gn > 8) group_l(G, rb, gn, A, xs, 1, acc[1], R, T, F, 1);
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r * yr] = hsum16(acc[0][r][t], acc[1][r][t]);
}

#define A8L_KERNELS(name, F) MOE_A8_TILED_KERNELS(name, avx2, tile_l, F)  /* quant_internal.h */
A8L_KERNELS(q4_1, LF_Q4_1)
A8L_KERNELS(q5_0, LF_Q5_0)
A8L_KERNELS(q5_1, LF_Q5_1)
A8L_KERNELS(iq4_nl, LF_IQ4_NL)
