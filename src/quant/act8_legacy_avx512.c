/* act8_legacy_avx512.c — the act_q8 kernels of Q4_1, Q5_0, Q5_1 and IQ4_NL
 * with AVX-512 VNNI, bit-identical to act8_legacy_ref.c.
 *
 * As act8_avx512.c: block j of a 16-block group is lane j of every 64-byte
 * slab, so a group is 8 vpdpbusd per row and token (unsigned weight bytes u
 * x signed activation bytes, exact int32 sums) starting from the format's
 * correction, then one (Q4_1 / Q5_1: two) FMA per block lane. u per slab t
 * from the slab pair p = t / 2 (one 64-byte load, a nibble split): IQ4_NL a
 * vpshufb of kv + 128, Q5_0 / Q5_1 the nibble with bit 4 from the hi area
 * (shifted to bit 4 and merged by one vpternlogd), Q4_1 the nibble.
 * A row's last, partial group (gn < 16 blocks) is read with masked loads
 * (zeros past the group: nothing past the row is touched) and its FMAs
 * are masked to lanes j < gn, so absent lanes keep their +0. (A first
 * version copied the group into a zero-padded full image: bench_quant
 * "a8 1024x256", one partial group of 8 blocks per row, read 6-7 GB/s.) */
#include "quant/quant_internal.h"

#include <immintrin.h>

#include "quant/hsum_avx512.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

enum { LF_Q4_1, LF_Q5_0, LF_Q5_1, LF_IQ4_NL };
#define LF_HAS_M(F) ((F) == LF_Q4_1 || (F) == LF_Q5_1)
#define LF_FIVE(F) ((F) == LF_Q5_0 || (F) == LF_Q5_1)
#define LF_BPB(F) ((F) == LF_Q4_1 ? 20 : (F) == LF_Q5_0 ? 22 : (F) == LF_Q5_1 ? 24 : 18)

/* u of slab t from its pair z (and, 5-bit formats, the hi area h). */
ALWAYS_INLINE __m512i slab_u(__m512i z, __m512i h, const int t, const int F) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i nib = _mm512_and_si512(t % 2 ? _mm512_srli_epi16(z, 4) : z, m4);
    if (F == LF_IQ4_NL) {
        const __m512i tab = _mm512_broadcast_i32x4(_mm_setr_epi8(1, 24, 45, 63, 79, 93, 106, 118, (char)129, (char)141,
                                                                 (char)153, (char)166, (char)181, (char)197, (char)217,
                                                                 (char)241));
        return _mm512_shuffle_epi8(tab, nib);
    }
    if (!LF_FIVE(F)) return nib;
    const __m512i hb = t <= 4 ? _mm512_slli_epi16(h, 4 - t) : _mm512_srli_epi16(h, t - 4);
    return _mm512_ternarylogic_epi32(nib, hb, _mm512_set1_epi8(0x10), 0xF8); /* nib | (hb & 0x10) */
}

/* Bytes [0, 4 gn) at p: a plain load in a full group, else masked. */
ALWAYS_INLINE __m512i ld_run(const uint8_t *p, int gn, const int PARTIAL) {
    return PARTIAL ? _mm512_maskz_loadu_epi8(((__mmask64)1 << (4 * gn)) - 1, p) : _mm512_loadu_si512(p);
}
/* gn f16 at p as floats (lanes past gn: 0). */
ALWAYS_INLINE __m512 ld_f16(const uint8_t *p, int gn, const int PARTIAL) {
    return _mm512_cvtph_ps(PARTIAL ? _mm256_maskz_loadu_epi16((__mmask16)((1u << gn) - 1), p)
                                   : _mm256_loadu_si256((const __m256i *)p));
}

/* R rows x T tokens of one group of gn blocks (row r's group at G + r*gs),
 * its block sums folded into acc for the lanes j < gn. */
ALWAYS_INLINE void group_l(const uint8_t *G, size_t gs, int gn, const uint8_t *A, size_t xs, __m512 acc[4][4],
                           const int R, const int T, const int F, const int PARTIAL) {
    const int ns = LF_HAS_M(F) ? 4 : 2;
    const __mmask16 ml = (__mmask16)((1u << gn) - 1);
    __m512i is[4][4], h[4];
    UNROLL for (int t = 0; t < T; t++) {
        const __m512i c = _mm512_loadu_si512(A + (size_t)t * xs + 512);
        const __m512i s = F == LF_IQ4_NL ? c : F == LF_Q5_0 ? _mm512_srai_epi32(c, 3) : _mm512_setzero_si512();
        UNROLL for (int r = 0; r < R; r++) is[r][t] = s;
    }
    UNROLL for (int r = 0; r < R; r++)
        h[r] = LF_FIVE(F) ? ld_run(G + (size_t)r * gs + (ns + 16) * gn, gn, PARTIAL) : _mm512_setzero_si512();
    UNROLL for (int p = 0; p < 4; p++) {
        __m512i a0[4], a1[4];
        UNROLL for (int t = 0; t < T; t++) {
            a0[t] = _mm512_loadu_si512(A + (size_t)t * xs + 128 * p);
            a1[t] = _mm512_loadu_si512(A + (size_t)t * xs + 128 * p + 64);
        }
        UNROLL for (int r = 0; r < R; r++) {
            const __m512i z = ld_run(G + (size_t)r * gs + (ns + 4 * p) * gn, gn, PARTIAL);
            const __m512i u0 = slab_u(z, h[r], 2 * p, F), u1 = slab_u(z, h[r], 2 * p + 1, F);
            UNROLL for (int t = 0; t < T; t++) {
                is[r][t] = _mm512_dpbusd_epi32(is[r][t], u0, a0[t]);
                is[r][t] = _mm512_dpbusd_epi32(is[r][t], u1, a1[t]);
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        const __m512 d = ld_f16(G + (size_t)r * gs, gn, PARTIAL);
        const __m512 m = LF_HAS_M(F) ? ld_f16(G + (size_t)r * gs + 2 * gn, gn, PARTIAL) : _mm512_setzero_ps();
        UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *At = A + (size_t)t * xs;
            const __m512 da = _mm512_loadu_ps((const float *)(At + 576));
            acc[r][t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(is[r][t]), _mm512_mul_ps(d, da), acc[r][t], ml);
            if (LF_HAS_M(F)) {
                const __m512i qs = _mm512_add_epi32(_mm512_loadu_si512(At + 640), _mm512_loadu_si512(At + 704));
                acc[r][t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(qs), _mm512_mul_ps(m, da), acc[r][t], ml);
            }
        }
    }
}

/* R rows (rb bytes apart) x T tokens (A8 rows xs apart) -> y[t*ys + r*yr]. */
ALWAYS_INLINE void tile_l(const uint8_t *w, size_t rb, const uint8_t *xa, size_t xs, float *y, size_t ys, size_t yr,
                          int64_t n, const int R, const int T, const int F) {
    const int64_t nb = n / 32;
    __m512 acc[4][4];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
        const uint8_t *G = w + (size_t)g0 * LF_BPB(F), *A = xa + (size_t)(g0 / A8_G) * A8_GROUP_BYTES;
        if (gn == A8_G) group_l(G, rb, A8_G, A, xs, acc, R, T, F, 0);
        else group_l(G, rb, gn, A, xs, acc, R, T, F, 1);
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r * yr] = hsum16(acc[r][t]);
}

#define A8L_KERNELS(name, F) MOE_A8_TILED_KERNELS(name, avx512, tile_l, F)  /* quant_internal.h */
A8L_KERNELS(q4_1, LF_Q4_1)
A8L_KERNELS(q5_0, LF_Q5_0)
A8L_KERNELS(q5_1, LF_Q5_1)
A8L_KERNELS(iq4_nl, LF_IQ4_NL)
