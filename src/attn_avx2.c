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

static inline __attribute__((always_inline)) void scores_impl(const float *q, size_t qs, int G, const void *k,
                                                              size_t ks, int nk, int D, float scale, float *sc,
                                                              size_t scs, const int h16) {
    for (int j = 0; j < nk; j++) {
        const size_t kj = (size_t)j * ks;
        for (int h0 = 0; h0 < G; h0 += 2) {
            const int hn = G - h0 < 2 ? G - h0 : 2;
            __m256 lo[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, hi[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
            for (int d = 0; d < D; d += 16) {
                const __m256 k0 = ldkv8(k, kj + (size_t)d, D - d, h16), k1 = ldkv8(k, kj + (size_t)d + 8, D - d - 8, h16);
                for (int hh = 0; hh < hn; hh++) {
                    const float *qh = q + (size_t)(h0 + hh) * qs + d;
                    lo[hh] = _mm256_fmadd_ps(load8(qh, D - d), k0, lo[hh]);
                    hi[hh] = _mm256_fmadd_ps(load8(qh + 8, D - d - 8), k1, hi[hh]);
                }
            }
            for (int hh = 0; hh < hn; hh++) sc[(size_t)(h0 + hh) * scs + (size_t)j] = hsum16(lo[hh], hi[hh]) * scale;
        }
    }
}

static inline __attribute__((always_inline)) void accum_impl(const float *p, size_t ps, int G, const void *v, size_t vs,
                                                             int nk, int Dv, float *out, size_t os, const int h16) {
    for (int h = 0; h < G; h++) {
        for (int d0 = 0; d0 < Dv; d0 += 64) {
            const int nv = (Dv - d0 + 7) / 8 < 8 ? (Dv - d0 + 7) / 8 : 8;
            __m256 o[8];
            for (int c = 0; c < 8; c++) o[c] = _mm256_setzero_ps();
            for (int j = 0; j < nk; j++) {
                const size_t vj = (size_t)j * vs + (size_t)d0;
                const __m256 a = _mm256_set1_ps(p[(size_t)h * ps + (size_t)j]);
                for (int c = 0; c < nv; c++)
                    o[c] = _mm256_fmadd_ps(a, ldkv8(v, vj + 8 * (size_t)c, Dv - d0 - 8 * c, h16), o[c]);
            }
            float *oh = out + (size_t)h * os + d0;
            for (int c = 0; c < nv; c++) {
                int left = Dv - d0 - 8 * c;
                if (left >= 8) _mm256_storeu_ps(oh + 8 * c, o[c]);
                else _mm256_maskstore_ps(oh + 8 * c, tail_mask8(left), o[c]);
            }
        }
    }
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

const moe_attn_kernels moe_attn_avx2 = {scores_avx2, accum_avx2, scores_h_avx2, accum_h_avx2, exp_shift_avx2,
                                        silu_mul_avx2};
