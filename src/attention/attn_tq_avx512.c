/* attn_tq_avx512.c — the kv_tq kernels (kv_tq.h) at AVX-512: a group of 32
 * codes unpacks into two vectors of 16 lanes (lane l = dims 32g + l and
 * 32g + 16 + l, the contract's lane l), the centroids come from one
 * in-register permute (permutexvar: 8 or 16 entries; permutex2var: 32),
 * and every fmadd is the scalar reference's fmaf in its order, so the
 * results are the same bits. */
#include <immintrin.h>
#include <string.h>

#include "attention/kv_tq.h"
#include "base/util.h"

typedef struct { __m512 lo, hi; int bits; } tq_tab;   /* centroids 0..15, 16..31 */

static tq_tab tab_for(int bits) {
    const float *cb = moe_tq_codebook(bits);
    float t[32] = {0};
    memcpy(t, cb, sizeof(float) * (size_t)(1 << bits));
    return (tq_tab){_mm512_loadu_ps(t), _mm512_loadu_ps(t + 16), bits};
}

/* The row's scale: its half converted exactly (F16C), as moe_tq_sigma does. */
static inline float sigma(const uint8_t *row, int D, int bits) {
    uint16_t h;
    memcpy(&h, row + (size_t)D * (size_t)bits / 8, 2);
    return _cvtsh_ss(h);
}

static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The centroids of dims 32g .. 32g+15 (c0) and 32g+16 .. 32g+31 (c1). */
static inline void group(const uint8_t *row, int D, const tq_tab *t, int g, __m512 *c0, __m512 *c1) {
    __m512i i0, i1;
    if (t->bits == 3) {
        const __m128i b = _mm_loadl_epi64((const __m128i *)(row + 8 * g));
        const __m512i x = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(b, b));   /* bytes 0..7 twice */
        const __m512i sh0 = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
        const __m512i three = _mm512_set1_epi32(3);
        i0 = _mm512_and_si512(_mm512_srlv_epi32(x, sh0), three);
        i1 = _mm512_and_si512(_mm512_srlv_epi32(x, _mm512_add_epi32(sh0, _mm512_set1_epi32(4))), three);
        const uint32_t top = ld32(row + D / 4 + 4 * g);
        i0 = _mm512_mask_or_epi32(i0, (__mmask16)(top & 0xffff), i0, _mm512_set1_epi32(4));
        i1 = _mm512_mask_or_epi32(i1, (__mmask16)(top >> 16), i1, _mm512_set1_epi32(4));
        *c0 = _mm512_permutexvar_ps(i0, t->lo);
        *c1 = _mm512_permutexvar_ps(i1, t->lo);
        return;
    }
    const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + 16 * g)));
    i0 = _mm512_and_si512(x, _mm512_set1_epi32(15));
    i1 = _mm512_srli_epi32(x, 4);
    if (t->bits == 4) {
        *c0 = _mm512_permutexvar_ps(i0, t->lo);
        *c1 = _mm512_permutexvar_ps(i1, t->lo);
        return;
    }
    const uint32_t top = ld32(row + D / 2 + 4 * g);
    i0 = _mm512_mask_or_epi32(i0, (__mmask16)(top & 0xffff), i0, _mm512_set1_epi32(16));
    i1 = _mm512_mask_or_epi32(i1, (__mmask16)(top >> 16), i1, _mm512_set1_epi32(16));
    *c0 = _mm512_permutex2var_ps(t->lo, i0, t->hi);
    *c1 = _mm512_permutex2var_ps(t->lo, i1, t->hi);
}

/* The tree of quant.h: l + 8, + 4, + 2, + 1. */
static inline float tree16(__m512 a) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

#define HB 8   /* heads per pass: 8 accumulators */

static void scores_tq_avx512(const float *qr, size_t qs, int G, const uint8_t *k, int nk, int D, int bits, float scale,
                             float *sc, size_t scs) {
    const tq_tab t = tab_for(bits);
    const size_t rb = moe_tq_row_bytes(D, bits);
    for (int j = 0; j < nk; j++) {
        const uint8_t *kj = k + (size_t)j * rb;
        const float sig = sigma(kj, D, bits);
        int h4 = 0;
        for (; h4 + 4 <= G; h4 += 4) {                /* four heads: constant loops, registers */
            __m512 acc[4];
            for (int h = 0; h < 4; h++) acc[h] = _mm512_setzero_ps();
            for (int g = 0; g < D / 32; g++) {
                __m512 c0, c1;
                group(kj, D, &t, g, &c0, &c1);
                for (int h = 0; h < 4; h++) {
                    const float *q = qr + (size_t)(h4 + h) * qs + 32 * g;
                    acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q), c0, acc[h]);
                    acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16), c1, acc[h]);
                }
            }
            for (int h = 0; h < 4; h++) sc[(size_t)(h4 + h) * scs + (size_t)j] = (tree16(acc[h]) * sig) * scale;
        }
        for (int h0 = h4; h0 < G; h0 += HB) {
            const int nh = G - h0 < HB ? G - h0 : HB;
            __m512 acc[HB];
            for (int h = 0; h < nh; h++) acc[h] = _mm512_setzero_ps();
            for (int g = 0; g < D / 32; g++) {
                __m512 c0, c1;
                group(kj, D, &t, g, &c0, &c1);
                for (int h = 0; h < nh; h++) {
                    const float *q = qr + (size_t)(h0 + h) * qs + 32 * g;
                    acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q), c0, acc[h]);
                    acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16), c1, acc[h]);
                }
            }
            for (int h = 0; h < nh; h++) sc[(size_t)(h0 + h) * scs + (size_t)j] = (tree16(acc[h]) * sig) * scale;
        }
    }
}

#define DB 4   /* groups of 32 dims per pass: 8 accumulators */

/* Four heads h0 .. h0+3 at once: each value row's codes are unpacked once
 * per pass for the four (16 accumulators: 4 heads x 2 groups x 2 halves). */
static void accum4_avx512(const float *p, size_t ps, int h0, const uint8_t *v, int nk, int Dv, const tq_tab *t,
                          size_t rb, float *out, size_t os) {
    for (int g0 = 0; g0 < Dv / 32; g0 += 2) {     /* Dv >= 64, a power of two: whole pairs */
        __m512 acc[4][4];
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < 4; i++) acc[h][i] = _mm512_setzero_ps();
        for (int j = 0; j < nk; j++) {
            const uint8_t *vj = v + (size_t)j * rb;
            const float sig = sigma(vj, Dv, t->bits);
            __m512 c[4];
            group(vj, Dv, t, g0, &c[0], &c[1]);
            group(vj, Dv, t, g0 + 1, &c[2], &c[3]);
            for (int h = 0; h < 4; h++) {
                const __m512 w = _mm512_set1_ps(p[(size_t)(h0 + h) * ps + (size_t)j] * sig);
                for (int i = 0; i < 4; i++) acc[h][i] = _mm512_fmadd_ps(w, c[i], acc[h][i]);
            }
        }
        for (int h = 0; h < 4; h++)
            for (int i = 0; i < 4; i++) _mm512_storeu_ps(out + (size_t)(h0 + h) * os + 32 * g0 + 16 * i, acc[h][i]);
    }
}

static void accum_tq_avx512(const float *p, size_t ps, int G, const uint8_t *v, int nk, int Dv, int bits, float *out,
                            size_t os) {
    const tq_tab t = tab_for(bits);
    const size_t rb = moe_tq_row_bytes(Dv, bits);
    int h0 = 0;
    for (; h0 + 4 <= G && Dv >= 64; h0 += 4) accum4_avx512(p, ps, h0, v, nk, Dv, &t, rb, out, os);
    for (int h = h0; h < G; h++) {
        float *o = out + (size_t)h * os;
        const float *ph = p + (size_t)h * ps;
        for (int g0 = 0; g0 < Dv / 32; g0 += DB) {
            const int ng = Dv / 32 - g0 < DB ? Dv / 32 - g0 : DB;
            __m512 acc[2 * DB];
            for (int i = 0; i < 2 * ng; i++) acc[i] = _mm512_setzero_ps();
            for (int j = 0; j < nk; j++) {
                const uint8_t *vj = v + (size_t)j * rb;
                const __m512 w = _mm512_set1_ps(ph[j] * sigma(vj, Dv, bits));
                for (int i = 0; i < ng; i++) {
                    __m512 c0, c1;
                    group(vj, Dv, &t, g0 + i, &c0, &c1);
                    acc[2 * i] = _mm512_fmadd_ps(w, c0, acc[2 * i]);
                    acc[2 * i + 1] = _mm512_fmadd_ps(w, c1, acc[2 * i + 1]);
                }
            }
            for (int i = 0; i < ng; i++) {
                _mm512_storeu_ps(o + 32 * (g0 + i), acc[2 * i]);
                _mm512_storeu_ps(o + 32 * (g0 + i) + 16, acc[2 * i + 1]);
            }
        }
    }
}

const moe_tq_kernels moe_tq_avx512 = {scores_tq_avx512, accum_tq_avx512};
