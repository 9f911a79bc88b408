/* attn_avx2.c — AVX2 attention kernels, bit-identical to attn.c: the 16
 * lanes of a dot are two ymm accumulators (lanes 0-7, 8-15), reduced with the
 * same tree; one FMA per element. */
#include <immintrin.h>

#include "attn.h"

static inline float hsum16(__m256 lo, __m256 hi) {
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

static inline __m256i tail_mask8(int left) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left < 0 ? 0 : left), idx);
}

static inline __m256 load8(const float *p, int left) {
    return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask8(left));
}

/* 8 keys/values from float or (h16) half storage; lanes past left are 0 */
static inline __attribute__((always_inline)) __m256 ldkv8(const void *base, size_t idx, int left, const int h16) {
    if (!h16) return load8((const float *)base + idx, left);
    const uint16_t *p = (const uint16_t *)base + idx;
    if (left >= 8) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    uint16_t t[8] = {0};
    for (int i = 0; i < left; i++) t[i] = p[i];
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t));
}

/* Loops over register arrays must be fully unrolled, or GCC keeps the array
 * in memory (a store and reload per FMA). */
#define UNROLL _Pragma("GCC unroll 16")

/* One tile of scores: HN heads x KB keys, each dot two ymm accumulators
 * (lanes 0-7 and 8-15) kept in registers; each key vector is converted once
 * and serves HN heads. The query is read as a memory operand (16 ymm
 * registers do not hold more). */
static inline __attribute__((always_inline)) void scores_tile(const float *q, size_t qs, int h0, const void *k,
                                                              size_t ks, int j, int D, float scale, float *sc,
                                                              size_t scs, const int HN, const int KB, const int h16) {
    __m256 lo[6], hi[6];
    UNROLL for (int i = 0; i < HN * KB; i++) lo[i] = hi[i] = _mm256_setzero_ps();
    for (int d = 0; d < D; d += 16) {
        UNROLL for (int u = 0; u < KB; u++) {
            const size_t kj = (size_t)(j + u) * ks + (size_t)d;
            const __m256 k0 = ldkv8(k, kj, D - d, h16), k1 = ldkv8(k, kj + 8, D - d - 8, h16);
            UNROLL for (int hh = 0; hh < HN; hh++) {
                const float *qh = q + (size_t)(h0 + hh) * qs + d;
                lo[hh * KB + u] = _mm256_fmadd_ps(load8(qh, D - d), k0, lo[hh * KB + u]);
                hi[hh * KB + u] = _mm256_fmadd_ps(load8(qh + 8, D - d - 8), k1, hi[hh * KB + u]);
            }
        }
    }
    UNROLL for (int hh = 0; hh < HN; hh++)
        UNROLL for (int u = 0; u < KB; u++)
            sc[(size_t)(h0 + hh) * scs + (size_t)(j + u)] = hsum16(lo[hh * KB + u], hi[hh * KB + u]) * scale;
}

static inline __attribute__((always_inline)) void scores_impl(const float *q, size_t qs, int G, const void *k,
                                                              size_t ks, int nk, int D, float scale, float *sc,
                                                              size_t scs, const int h16) {
    int j = 0;
    for (; j + 3 <= nk; j += 3) {                 /* heads in pairs x 3 keys, then a last head */
        int h0 = 0;
        for (; h0 + 2 <= G; h0 += 2) scores_tile(q, qs, h0, k, ks, j, D, scale, sc, scs, 2, 3, h16);
        if (h0 < G) scores_tile(q, qs, h0, k, ks, j, D, scale, sc, scs, 1, 3, h16);
    }
    for (; j < nk; j++)
        for (int h = 0; h < G; h++) scores_tile(q, qs, h, k, ks, j, D, scale, sc, scs, 1, 1, h16);
}

/* One tile of the weighted sum: HN heads x NC vectors of 8 dims from d0,
 * over all keys in order, accumulators in registers; each value vector is
 * converted once and serves HN heads. */
static inline __attribute__((always_inline)) void accum_tile(const float *p, size_t ps, int h0, const void *v,
                                                             size_t vs, int nk, int d0, int Dv, float *out, size_t os,
                                                             const int HN, const int NC, const int h16) {
    __m256 o[8];
    UNROLL for (int i = 0; i < HN * NC; i++) o[i] = _mm256_setzero_ps();
    for (int j = 0; j < nk; j++) {
        const size_t vj = (size_t)j * vs + (size_t)d0;
        __m256 a[2];
        UNROLL for (int hh = 0; hh < HN; hh++) a[hh] = _mm256_set1_ps(p[(size_t)(h0 + hh) * ps + (size_t)j]);
        UNROLL for (int c = 0; c < NC; c++) {
            const __m256 vv = ldkv8(v, vj + 8 * (size_t)c, Dv - d0 - 8 * c, h16);
            UNROLL for (int hh = 0; hh < HN; hh++) o[hh * NC + c] = _mm256_fmadd_ps(a[hh], vv, o[hh * NC + c]);
        }
    }
    UNROLL for (int hh = 0; hh < HN; hh++) {
        float *oh = out + (size_t)(h0 + hh) * os + d0;
        UNROLL for (int c = 0; c < NC; c++) {
            const int left = Dv - d0 - 8 * c;
            if (left >= 8) _mm256_storeu_ps(oh + 8 * c, o[hh * NC + c]);
            else if (left > 0) _mm256_maskstore_ps(oh + 8 * c, tail_mask8(left), o[hh * NC + c]);
        }
    }
}

static inline __attribute__((always_inline)) void accum_impl(const float *p, size_t ps, int G, const void *v, size_t vs,
                                                             int nk, int Dv, float *out, size_t os, const int h16) {
    int h0 = 0;
    for (; h0 + 2 <= G; h0 += 2)
        for (int d0 = 0; d0 < Dv; d0 += 32) accum_tile(p, ps, h0, v, vs, nk, d0, Dv, out, os, 2, 4, h16);
    if (h0 < G)
        for (int d0 = 0; d0 < Dv; d0 += 64) accum_tile(p, ps, h0, v, vs, nk, d0, Dv, out, os, 1, 8, h16);
}

static void scores_avx2(const float *q, size_t qs, int G, const float *k, size_t ks, int nk, int D, float scale,
                        float *sc, size_t scs) {
    scores_impl(q, qs, G, k, ks, nk, D, scale, sc, scs, 0);
}
static void scores_h_avx2(const float *q, size_t qs, int G, const uint16_t *k, size_t ks, int nk, int D, float scale,
                          float *sc, size_t scs) {
    scores_impl(q, qs, G, k, ks, nk, D, scale, sc, scs, 1);
}
static void accum_avx2(const float *p, size_t ps, int G, const float *v, size_t vs, int nk, int Dv, float *out,
                       size_t os) {
    accum_impl(p, ps, G, v, vs, nk, Dv, out, os, 0);
}
static void accum_h_avx2(const float *p, size_t ps, int G, const uint16_t *v, size_t vs, int nk, int Dv, float *out,
                         size_t os) {
    accum_impl(p, ps, G, v, vs, nk, Dv, out, os, 1);
}

/* exp: the scalar reference's loop (the compiler may vectorize it; the
 * operations, and so the bits, are the same either way) */
static void exp_shift_avx2(float *r, int n, float mx) { moe_attn_scalar.exp_shift(r, n, mx); }

static void silu_mul_avx2(float *g, const float *u, int64_t n) { moe_attn_scalar.silu_mul(g, u, n); }

/* F16C's conversion with round-to-nearest-even is IEEE's, the same bits as
 * moe_f32_to_f16 for every input, NaN included (test_attn checks) */
static void to_half_avx2(const float *x, uint16_t *y, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    moe_attn_scalar.to_half(x + i, y + i, n - i);
}

/* 8 elements at a time through all K experts, in registers; the rest by
 * the scalar kernel (the operations per element are the same) */
static void combine_avx2(const float *eout, const int32_t *slot, const float *w, int K, const float *sh, float *o,
                         float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 acc = _mm256_mul_ps(_mm256_loadu_ps(eout + (size_t)slot[0] * (size_t)n + i), _mm256_set1_ps(w[0]));
        for (int k = 1; k < K; k++)
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(eout + (size_t)slot[k] * (size_t)n + i),
                                                   _mm256_set1_ps(w[k])));
        if (sh) acc = _mm256_add_ps(acc, _mm256_loadu_ps(sh + i));
        _mm256_storeu_ps(o + i, acc);
        _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), acc));
    }
    for (; i < n; i++) {
        float a = eout[(size_t)slot[0] * (size_t)n + i] * w[0];
        for (int k = 1; k < K; k++) a += eout[(size_t)slot[k] * (size_t)n + i] * w[k];
        if (sh) a += sh[i];
        o[i] = a;
        x[i] += a;
    }
}

const moe_attn_kernels moe_attn_avx2 = {scores_avx2, accum_avx2, scores_h_avx2, accum_h_avx2, exp_shift_avx2,
                                        silu_mul_avx2, to_half_avx2, combine_avx2};
