/* act8_avx512.c — the act_q8 kernels with AVX-512 VNNI, bit-identical to
 * act8_ref.c.
 *
 * The a8 layouts (act8_ref.c) put block j of a 16-block group in lane j of
 * every 64-byte slab, so a group is 8 vpdpbusd per row (unsigned weight
 * bytes x signed activation bytes, 4 products per lane per instruction)
 * starting from the activation's correction vector; the exact int32 block
 * sums are then converted and folded into the 16 float lanes with one FMA per
 * group, as the contract says. A tile does R rows x T tokens (compile-time
 * constants) so weight slabs are reused across tokens in prefill. */
#include "quant/quant_internal.h"

#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* The tree of quant.h: a[l]+a[l+8], then +4, +2, +1. */
ALWAYS_INLINE float hsum16(__m512 a) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* R rows x T tokens of Q8_0 (a8 layout); tile rows rb bytes apart, A8 rows
 * xs bytes apart, outputs y[t*ys + r*yr]. */
ALWAYS_INLINE void tile_q8_0(const uint8_t *w, size_t rb, const uint8_t *xa, size_t xs, float *y, size_t ys,
                             size_t yr, int64_t n, const int R, const int T) {
    const int64_t nb = n / 32;
    __m512 acc[4][4];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
        const uint8_t *G = w + (size_t)g0 * QB_Q8_0;
        const uint8_t *A = xa + (size_t)(g0 / A8_G) * A8_GROUP_BYTES;
        __m512i is[4][4];
        UNROLL for (int t = 0; t < T; t++) {
            const __m512i c = _mm512_loadu_si512(A + (size_t)t * xs + 512);
            UNROLL for (int r = 0; r < R; r++) is[r][t] = c;
        }
        if (gn == A8_G) {
            UNROLL for (int s = 0; s < 8; s++) {
                __m512i a[4];
                UNROLL for (int t = 0; t < T; t++) a[t] = _mm512_loadu_si512(A + (size_t)t * xs + 64 * s);
                UNROLL for (int r = 0; r < R; r++) {
                    const __m512i u = _mm512_loadu_si512(G + (size_t)r * rb + 32 + 64 * s);
                    UNROLL for (int t = 0; t < T; t++) is[r][t] = _mm512_dpbusd_epi32(is[r][t], u, a[t]);
                }
            }
            UNROLL for (int r = 0; r < R; r++) {
                const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(G + (size_t)r * rb)));
                UNROLL for (int t = 0; t < T; t++) {
                    const __m512 S = _mm512_mul_ps(dw, _mm512_loadu_ps((const float *)(A + (size_t)t * xs + 576)));
                    acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[r][t]), S, acc[r][t]);
                }
            }
        } else {                       /* the row's last, partial group: gn < 16 lanes */
            const __mmask64 mb = ((__mmask64)1 << (4 * gn)) - 1;
            const __mmask16 ml = (__mmask16)((1u << gn) - 1);
            UNROLL for (int s = 0; s < 8; s++) {
                __m512i a[4];
                UNROLL for (int t = 0; t < T; t++) a[t] = _mm512_loadu_si512(A + (size_t)t * xs + 64 * s);
                UNROLL for (int r = 0; r < R; r++) {
                    const __m512i u = _mm512_maskz_loadu_epi8(mb, G + (size_t)r * rb + 2 * gn + 4 * gn * s);
                    UNROLL for (int t = 0; t < T; t++) is[r][t] = _mm512_dpbusd_epi32(is[r][t], u, a[t]);
                }
            }
            UNROLL for (int r = 0; r < R; r++) {
                const __m512 dw = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(ml, G + (size_t)r * rb));
                UNROLL for (int t = 0; t < T; t++) {
                    const __m512 S = _mm512_mul_ps(dw, _mm512_loadu_ps((const float *)(A + (size_t)t * xs + 576)));
                    acc[r][t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(is[r][t]), S, acc[r][t], ml);
                }
            }
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r * yr] = hsum16(acc[r][t]);
}

/* Decode: rows r and r + h in one tile (h = nrows/2), the odd row left over
 * alone. Measured on the lm-head from DRAM, 1 thread: adjacent rows in one
 * tile (two streams 2 KB apart) ~12 GB/s, one row at a time ~22-30 GB/s,
 * distant pairs ~30-33 GB/s: this machine's hardware prefetcher loses track
 * of streams that close, but follows two far-apart ones. A row's value does
 * not depend on its partner. */
void moe_gemv_a8_q8_0_avx512(const void *w, size_t rb, int64_t nrows, const void *xa, float *y, int64_t n) {
    const uint8_t *W = w;
    const int64_t h = nrows / 2;
    for (int64_t r = 0; r < h; r++) tile_q8_0(W + (size_t)r * rb, (size_t)h * rb, xa, 0, y + r, 0, (size_t)h, n, 2, 1);
    if (nrows & 1) tile_q8_0(W + (size_t)(nrows - 1) * rb, rb, xa, 0, y + nrows - 1, 0, 1, n, 1, 1);
}

/* Prefill: 4 rows x 2 tokens per tile (8 int32 + 8 float accumulators);
 * the 4 rows stay in L1 while all tokens pass. */
void moe_gemm_a8_q8_0_avx512(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs, int64_t ntok,
                             float *y, size_t ys, int64_t n) {
    const uint8_t *W = w, *X = xa;
    int64_t r = 0;
    for (; r + 4 <= nrows; r += 4) {
        int64_t t = 0;
        for (; t + 2 <= ntok; t += 2)
            tile_q8_0(W + (size_t)r * rb, rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, 1, n, 4, 2);
        for (; t < ntok; t++)
            tile_q8_0(W + (size_t)r * rb, rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, 1, n, 4, 1);
    }
    for (; r < nrows; r++)
        for (int64_t t = 0; t < ntok; t++)
            tile_q8_0(W + (size_t)r * rb, rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, 1, n, 1, 1);
}
