/* attn_avx512.c — AVX-512 attention kernels, bit-identical to attn.c: one
 * zmm per 16-lane dot accumulator, the same tree, one FMA per element. */
#include <immintrin.h>

#include "attention/attn.h"
#include "base/util.h"
#include "quant/hsum_avx512.h"

/* Loops over register arrays must be fully unrolled, or GCC keeps the array
 * in memory (a store and reload per FMA). */
#define UNROLL _Pragma("GCC unroll 32")

static inline __mmask16 tail_mask(int left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

/* 16 keys/values from float or (h16) half storage, masked lanes 0 */
static inline __attribute__((always_inline)) __m512 ldkv(const void *base, size_t idx, __mmask16 m, const int h16) {
    if (!h16) return _mm512_maskz_loadu_ps(m, (const float *)base + idx);
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)base + idx));
}

/* One tile of scores: HN heads (h0..h0+HN-1) x 16/HN keys (j..), sixteen dot
 * accumulators acc[hh*KB + u] that stay in registers (the loops are fully
 * unrolled; a runtime-sized tile ends up in memory, a store-to-load round
 * trip per FMA: ~7 cycles per FMA, estimated from one perf profile; the fix
 * priced at decode window x1.09, prefill x1.10, docs/PERFORMANCE.md). Each key vector
 * is converted once and serves HN heads. */
static inline __attribute__((always_inline)) void scores_tile(const float *q, size_t qs, int h0, const void *k,
                                                              size_t ks, int j, int D, __m512 vs, float *sc,
                                                              size_t scs, const int HN, const int h16,
                                                              const int stream) {
    const int KB = 16 / HN;
    __m512 acc[16];
    UNROLL for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    if (stream) {
        /* key by key, each row front to back: one sequential stream from
         * memory (the 4 interleaved rows below read at about half the
         * speed, bench_attn "mem"); the query vectors come again from L1 */
        UNROLL for (int u = 0; u < KB; u++)
            for (int d = 0; d < D; d += 16) {
                const __m512 kv = ldkv(k, (size_t)(j + u) * ks + (size_t)d, 0xFFFF, h16);
                UNROLL for (int hh = 0; hh < HN; hh++)
                    acc[hh * KB + u] =
                        _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)(h0 + hh) * qs + (size_t)d), kv, acc[hh * KB + u]);
            }
    } else {
        for (int d = 0; d < D; d += 16) {
            __m512 qv[4];
            UNROLL for (int hh = 0; hh < HN; hh++) qv[hh] = _mm512_loadu_ps(q + (size_t)(h0 + hh) * qs + (size_t)d);
            UNROLL for (int u = 0; u < KB; u++) {
                const __m512 kv = ldkv(k, (size_t)(j + u) * ks + (size_t)d, 0xFFFF, h16);
                UNROLL for (int hh = 0; hh < HN; hh++) acc[hh * KB + u] = _mm512_fmadd_ps(qv[hh], kv, acc[hh * KB + u]);
            }
        }
    }
    const __m512 r = _mm512_mul_ps(hsum16x16(acc), vs);     /* lane hh*KB + u: head h0+hh, key j+u */
    float *o = sc + (size_t)h0 * scs + (size_t)j;
    if (HN == 1) {
        _mm512_storeu_ps(o, r);
    } else if (HN == 2) {
        _mm256_storeu_ps(o, _mm512_castps512_ps256(r));
        _mm256_storeu_ps(o + scs, _mm512_extractf32x8_ps(r, 1));
    } else {
        _mm_storeu_ps(o, _mm512_castps512_ps128(r));
        _mm_storeu_ps(o + scs, _mm512_extractf32x4_ps(r, 1));
        _mm_storeu_ps(o + 2 * scs, _mm512_extractf32x4_ps(r, 2));
        _mm_storeu_ps(o + 3 * scs, _mm512_extractf32x4_ps(r, 3));
    }
}

/* pf (kv_prefetch, attn.h): the first MOE_KV_PREFETCH_KEYS rows at the
 * start, then per block of 16 keys the block that many rows ahead */
static inline __attribute__((always_inline)) void scores_impl(const float *q, size_t qs, int G, const void *k,
                                                              size_t ks, int nk, int D, float scale, float *sc,
                                                              size_t scs, const int h16, const int stream,
                                                              const int pf) {
    const size_t row = ks * (h16 ? 2 : 4);                  /* bytes from one key to the next */
    int j = 0;
    if (pf) moe_prefetch_bytes(k, (size_t)(nk < MOE_KV_PREFETCH_KEYS ? nk : MOE_KV_PREFETCH_KEYS) * row);
    if (D % 16 == 0) {
        /* blocks of 16 keys (4 KB of half keys, in L1 for every head group):
         * heads in groups of 4 (4 tiles of 4 keys), then 2, then 1 */
        const __m512 vs = _mm512_set1_ps(scale);
        for (; j + 16 <= nk; j += 16) {
            if (pf && j + 16 + MOE_KV_PREFETCH_KEYS <= nk)
                moe_prefetch_bytes((const char *)k + (size_t)(j + MOE_KV_PREFETCH_KEYS) * row, 16 * row);
            int h0 = 0;
            for (; h0 + 4 <= G; h0 += 4)
                for (int u = 0; u < 16; u += 4) scores_tile(q, qs, h0, k, ks, j + u, D, vs, sc, scs, 4, h16, stream);
            if (h0 + 2 <= G) {
                for (int u = 0; u < 16; u += 8) scores_tile(q, qs, h0, k, ks, j + u, D, vs, sc, scs, 2, h16, stream);
                h0 += 2;
            }
            if (h0 < G) scores_tile(q, qs, h0, k, ks, j, D, vs, sc, scs, 1, h16, stream);
        }
    }
    for (; j < nk; j++) {                                    /* the last keys, or D not a multiple of 16 */
        const size_t kj = (size_t)j * ks;
        for (int h = 0; h < G; h++) {
            const float *qh = q + (size_t)h * qs;
            __m512 acc = _mm512_setzero_ps();
            for (int d = 0; d < D; d += 16) {
                const __mmask16 mk = tail_mask(D - d);
                acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, qh + d), ldkv(k, kj + (size_t)d, mk, h16), acc);
            }
            sc[(size_t)h * scs + (size_t)j] = hsum16(acc) * scale;
        }
    }
}

/* One tile of the weighted sum: HN heads x 16/HN vectors of 16 dims
 * (d0 .. d0 + 256/HN), over all keys in order, sixteen accumulators in
 * registers; each value vector is converted once and serves HN heads.
 * Vectors past Dv are masked to nothing. pf (kv_prefetch): each key
 * prefetches the tile's part of the row MOE_KV_PREFETCH_VALUES keys on. */
static inline __attribute__((always_inline)) void accum_tile(const float *p, size_t ps, int h0, const void *v,
                                                             size_t vs, int nk, int d0, int Dv, float *out, size_t os,
                                                             const int HN, const int h16, const int pf) {
    const size_t es = h16 ? 2 : 4;
    const int NC = 16 / HN;
    __mmask16 m[16];
    __m512 acc[16];
    UNROLL for (int c = 0; c < NC; c++) m[c] = Dv - d0 - 16 * c > 0 ? tail_mask(Dv - d0 - 16 * c) : 0;
    UNROLL for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    for (int j = 0; j < nk; j++) {
        const size_t vj = (size_t)j * vs + (size_t)d0;
        if (pf && j + MOE_KV_PREFETCH_VALUES < nk)
            moe_prefetch_bytes((const char *)v + (vj + (size_t)MOE_KV_PREFETCH_VALUES * vs) * es, (size_t)NC * 16 * es);
        __m512 a[4];
        UNROLL for (int hh = 0; hh < HN; hh++) a[hh] = _mm512_set1_ps(p[(size_t)(h0 + hh) * ps + (size_t)j]);
        UNROLL for (int c = 0; c < NC; c++) {
            const __m512 vv = ldkv(v, vj + 16 * (size_t)c, m[c], h16);
            UNROLL for (int hh = 0; hh < HN; hh++) acc[hh * NC + c] = _mm512_fmadd_ps(a[hh], vv, acc[hh * NC + c]);
        }
    }
    UNROLL for (int hh = 0; hh < HN; hh++)
        UNROLL for (int c = 0; c < NC; c++)
            _mm512_mask_storeu_ps(out + (size_t)(h0 + hh) * os + (size_t)d0 + 16 * (size_t)c, m[c], acc[hh * NC + c]);
}

static inline __attribute__((always_inline)) void accum_impl(const float *p, size_t ps, int G, const void *v, size_t vs,
                                                             int nk, int Dv, float *out, size_t os, const int h16,
                                                             const int pf) {
    int h0 = 0;
    for (; h0 + 4 <= G; h0 += 4)
        for (int d0 = 0; d0 < Dv; d0 += 64) accum_tile(p, ps, h0, v, vs, nk, d0, Dv, out, os, 4, h16, pf);
    if (h0 + 2 <= G) {
        for (int d0 = 0; d0 < Dv; d0 += 128) accum_tile(p, ps, h0, v, vs, nk, d0, Dv, out, os, 2, h16, pf);
        h0 += 2;
    }
    if (h0 < G)
        for (int d0 = 0; d0 < Dv; d0 += 256) accum_tile(p, ps, h0, v, vs, nk, d0, Dv, out, os, 1, h16, pf);
}

static void scores_avx512(const float *q, size_t qs, int G, const float *k, size_t ks, int nk, int D, float scale,
                          float *sc, size_t scs) {
    scores_impl(q, qs, G, k, ks, nk, D, scale, sc, scs, 0, 0, 0);
}
/* half keys: the interleaved order measured as fast or faster from memory too */
static void scores_h_avx512(const float *q, size_t qs, int G, const uint16_t *k, size_t ks, int nk, int D,
                            float scale, float *sc, size_t scs) {
    scores_impl(q, qs, G, k, ks, nk, D, scale, sc, scs, 1, 0, 0);
}
static void scores_stream_avx512(const float *q, size_t qs, int G, const float *k, size_t ks, int nk, int D,
                                 float scale, float *sc, size_t scs) {
    scores_impl(q, qs, G, k, ks, nk, D, scale, sc, scs, 0, 1, 0);
}
static void accum_avx512(const float *p, size_t ps, int G, const float *v, size_t vs, int nk, int Dv, float *out,
                         size_t os) {
    accum_impl(p, ps, G, v, vs, nk, Dv, out, os, 0, 0);
}
static void accum_h_avx512(const float *p, size_t ps, int G, const uint16_t *v, size_t vs, int nk, int Dv,
                           float *out, size_t os) {
    accum_impl(p, ps, G, v, vs, nk, Dv, out, os, 1, 0);
}
/* kv_prefetch (attn.h): scores_h and accum_h with the prefetches */
static void scores_h_prefetch_avx512(const float *q, size_t qs, int G, const uint16_t *k, size_t ks, int nk, int D,
                                     float scale, float *sc, size_t scs) {
    scores_impl(q, qs, G, k, ks, nk, D, scale, sc, scs, 1, 0, 1);
}
static void accum_h_prefetch_avx512(const float *p, size_t ps, int G, const uint16_t *v, size_t vs, int nk, int Dv,
                                    float *out, size_t os) {
    accum_impl(p, ps, G, v, vs, nk, Dv, out, os, 1, 1);
}

/* moe_expf (src/util.h) 16 lanes at a time, operation for operation: the
 * same clamps, the same separate multiplies and adds (no FMA), the same
 * polynomial order and 2^n construction, so every lane has the scalar bits. */
static inline __m512 expf16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(MOE_EXP_LO), hi = _mm512_set1_ps(MOE_EXP_HI);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __mmask16 small = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), big = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ);
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    xc = _mm512_mask_mov_ps(xc, nan, _mm512_setzero_ps());
    const __m512 magic = _mm512_set1_ps(MOE_EXP_MAGIC);
    const __m512 t = _mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(MOE_EXP_LOG2E)), magic);
    const __m512 n = _mm512_sub_ps(t, magic);
    __m512 r = _mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(MOE_EXP_LN2_HI)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(MOE_EXP_LN2_LO)));
    __m512 p = _mm512_set1_ps(MOE_EXP_P0);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(MOE_EXP_P1));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(MOE_EXP_P2));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(MOE_EXP_P3));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(MOE_EXP_P4));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(MOE_EXP_P5));
    __m512 y = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(p, _mm512_mul_ps(r, r)), r), _mm512_set1_ps(1.0f));
    __m512i ni = _mm512_cvttps_epi32(n);
    const __mmask16 over = _mm512_cmpgt_epi32_mask(ni, _mm512_set1_epi32(127));
    y = _mm512_mask_mul_ps(y, over, y, _mm512_set1_ps(2.0f));
    ni = _mm512_min_epi32(ni, _mm512_set1_epi32(127));
    const __m512 scale = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(ni, _mm512_set1_epi32(127)), 23));
    y = _mm512_mul_ps(y, scale);
    y = _mm512_mask_mov_ps(y, small, _mm512_setzero_ps());
    y = _mm512_mask_mov_ps(y, big, _mm512_set1_ps(__builtin_inff()));
    return _mm512_mask_mov_ps(y, nan, x);
}

static void exp_shift_avx512(float *r, int n, float mx) {
    const __m512 m = _mm512_set1_ps(mx);
    int j = 0;
    for (; j + 16 <= n; j += 16) _mm512_storeu_ps(r + j, expf16(_mm512_sub_ps(_mm512_loadu_ps(r + j), m)));
    if (j < n) {
        const __mmask16 k = tail_mask(n - j);
        _mm512_mask_storeu_ps(r + j, k, expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, r + j), m)));
    }
}

/* x / (1 + exp(-x)) * u, in the scalar order: negate, exp, add, divide, multiply */
static inline __m512 silu_mul16(__m512 x, __m512 u) {
    const __m512 e = expf16(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

static void silu_mul_avx512(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(g + i, silu_mul16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
    if (i < n) {
        const __mmask16 k = tail_mask((int)(n - i));
        _mm512_mask_storeu_ps(g + i, k, silu_mul16(_mm512_maskz_loadu_ps(k, g + i), _mm512_maskz_loadu_ps(k, u + i)));
    }
}

/* swiglu_clamp in the scalar order (see attn_avx2.c) */
static inline __m512 swiglu_clamp16(__m512 g, __m512 u) {
    const __m512 lim = _mm512_set1_ps(7.0f), nlim = _mm512_set1_ps(-7.0f), one = _mm512_set1_ps(1.0f);
    const __m512 x = _mm512_min_ps(g, lim);
    __m512 y = _mm512_mask_mov_ps(u, _mm512_cmp_ps_mask(u, nlim, _CMP_LT_OQ), nlim);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(u, lim, _CMP_GT_OQ), lim);
    const __m512 nx = _mm512_xor_ps(x, _mm512_set1_ps(-0.0f));
    const __m512 e = expf16(_mm512_mul_ps(_mm512_set1_ps(1.702f), nx));
    return _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_add_ps(y, one));
}

static void swiglu_clamp_avx512(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(g + i, swiglu_clamp16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
    if (i < n) {
        const __mmask16 k = tail_mask((int)(n - i));
        _mm512_mask_storeu_ps(g + i, k,
                              swiglu_clamp16(_mm512_maskz_loadu_ps(k, g + i), _mm512_maskz_loadu_ps(k, u + i)));
    }
}

/* the same bits as moe_f32_to_f16 for every input (see attn_avx2.c) */
static void to_half_avx512(const float *x, uint16_t *y, int n) {
    int i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        const __mmask16 k = tail_mask(n - i);
        _mm256_mask_storeu_epi16(y + i, k, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, x + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

/* 16 elements at a time through all K experts, in registers (attn.h) */
static void combine_avx512(const float *eout, const int32_t *slot, const float *w, int K, const float *sh, float *o,
                           float *x, int n) {
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        __m512 acc = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, eout + (size_t)slot[0] * (size_t)n + i), _mm512_set1_ps(w[0]));
        for (int k = 1; k < K; k++)
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, eout + (size_t)slot[k] * (size_t)n + i),
                                                   _mm512_set1_ps(w[k])));
        if (sh) acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, sh + i));
        _mm512_mask_storeu_ps(o + i, m, acc);
        _mm512_mask_storeu_ps(x + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), acc));
    }
}

/* ---- kv_q8 (attn.h) ---- */

/* Scores of one 16-key tile (keys jt .. jt+15, lanes outside m not stored)
 * for HN heads from h0. Per block: the keys' codes are made unsigned (x ^
 * 0x80 = x + 128) for vpdpbusd, whose sums start from corr = -128 * the
 * query block's code sum, so each lane ends with the exact isum of its key;
 * then one multiply (S) and one FMA per key and head, as the contract says. */
static inline __attribute__((always_inline)) void sq8_tile(const uint8_t *qa, size_t qas, int h0, const int8_t *kt,
                                                           const uint16_t *kd, size_t kds, int jt, int D, __m512 vs,
                                                           float *sc, size_t scs, __mmask16 m, const int HN) {
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    __m512 acc[4];
    UNROLL for (int hh = 0; hh < HN; hh++) acc[hh] = _mm512_setzero_ps();
    for (int b = 0; b < D / 32; b++) {
        const size_t qb = moe_a8_code_off(b, 0);
        __m512i is[4];
        UNROLL for (int hh = 0; hh < HN; hh++)
            is[hh] = _mm512_set1_epi32(moe_a8_i32(qa + (size_t)(h0 + hh) * qas + moe_a8_corr_off(b)));
        UNROLL for (int t = 0; t < 8; t++) {
            const __m512i kv = _mm512_xor_si512(_mm512_loadu_si512(kt + (size_t)(8 * b + t) * 64), x80);
            UNROLL for (int hh = 0; hh < HN; hh++)
                is[hh] = _mm512_dpbusd_epi32(is[hh], kv,
                                             _mm512_set1_epi32(moe_a8_i32(qa + (size_t)(h0 + hh) * qas + qb + 64 * (size_t)t)));
        }
        const __m512 dk = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kd + (size_t)b * kds + (size_t)jt)));
        UNROLL for (int hh = 0; hh < HN; hh++) {
            const __m512 S = _mm512_mul_ps(dk, _mm512_set1_ps(moe_a8_f32(qa + (size_t)(h0 + hh) * qas + moe_a8_da_off(b))));
            acc[hh] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[hh]), S, acc[hh]);
        }
    }
    UNROLL for (int hh = 0; hh < HN; hh++)
        _mm512_mask_storeu_ps(sc + (size_t)(h0 + hh) * scs + (size_t)jt, m, _mm512_mul_ps(acc[hh], vs));
}

static void scores_q8_avx512(const uint8_t *qa, size_t qas, int G, const int8_t *k8, const uint16_t *kd, size_t kds,
                             int j0, int nk, int D, float scale, float *sc, size_t scs) {
    const __m512 vs = _mm512_set1_ps(scale);
    for (int jt = j0 & ~15; jt < j0 + nk; jt += 16) {
        const int lo = j0 > jt ? j0 - jt : 0, hi = j0 + nk - jt < 16 ? j0 + nk - jt : 16;
        const __mmask16 m = (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
        const int8_t *kt = k8 + (size_t)jt * (size_t)D;                     /* tile jt/16 */
        int h0 = 0;
        for (; h0 + 4 <= G; h0 += 4) sq8_tile(qa, qas, h0, kt, kd, kds, jt, D, vs, sc, scs, m, 4);
        if (h0 + 2 <= G) { sq8_tile(qa, qas, h0, kt, kd, kds, jt, D, vs, sc, scs, m, 2); h0 += 2; }
        if (h0 < G) sq8_tile(qa, qas, h0, kt, kd, kds, jt, D, vs, sc, scs, m, 1);
    }
}

/* One tile of the weighted sum: HN heads x NV vectors of 16 dims from d0
 * (NV even: whole 32-blocks), over all keys in order; each value vector is
 * converted once and serves HN heads; the weights w come from wbuf
 * [G][Dv/32][nk]. NV is a constant, so the unrolled loops carry no checks.
 * PF (accum_q8_stream): prefetch the bytes this tile reads of the row
 * MOE_VALUE_PREFETCH_KEYS keys ahead, one prefetch per 64 bytes. */
static inline __attribute__((always_inline)) void aq8_tile(const float *wbuf, int NB, int h0, const int8_t *v8, int j0,
                                                           int nk, int d0, int Dv, float *out, size_t os, const int HN,
                                                           const int NV, const int PF) {
    const float *wp[12];
    UNROLL for (int hh = 0; hh < HN; hh++)
        UNROLL for (int c = 0; c < NV; c += 2)
            wp[hh * (NV / 2) + c / 2] = wbuf + ((size_t)(h0 + hh) * (size_t)NB + (size_t)((d0 + 16 * c) / 32)) * (size_t)nk;
    __m512 acc[24];
    UNROLL for (int i = 0; i < HN * NV; i++) acc[i] = _mm512_setzero_ps();
    for (int j = 0; j < nk; j++) {
        const int8_t *vr = v8 + (size_t)(j0 + j) * (size_t)Dv + (size_t)d0;
        if (PF && j + MOE_VALUE_PREFETCH_KEYS < nk)
            UNROLL for (int o = 0; o < 16 * NV; o += 64)
                _mm_prefetch((const char *)(vr + (size_t)MOE_VALUE_PREFETCH_KEYS * (size_t)Dv + (size_t)o), _MM_HINT_T0);
        __m512 vv[8];
        UNROLL for (int c = 0; c < NV; c++)
            vv[c] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(vr + 16 * c))));
        UNROLL for (int hh = 0; hh < HN; hh++)
            UNROLL for (int c = 0; c < NV; c += 2) {
                const __m512 a = _mm512_set1_ps(wp[hh * (NV / 2) + c / 2][j]);
                acc[hh * NV + c] = _mm512_fmadd_ps(a, vv[c], acc[hh * NV + c]);
                acc[hh * NV + c + 1] = _mm512_fmadd_ps(a, vv[c + 1], acc[hh * NV + c + 1]);
            }
    }
    UNROLL for (int hh = 0; hh < HN; hh++)
        UNROLL for (int c = 0; c < NV; c++)
            _mm512_storeu_ps(out + (size_t)(h0 + hh) * os + (size_t)d0 + 16 * (size_t)c, acc[hh * NV + c]);
}

/* the tiles of HN heads over all Dv dims: NC vectors at a time, then the
 * last 2, 4 or 6 (Dv % 32 == 0) */
static inline __attribute__((always_inline)) void aq8_heads(const float *wbuf, int NB, int h0, const int8_t *v8, int j0,
                                                            int nk, int Dv, float *out, size_t os, const int HN,
                                                            const int NC, const int PF) {
    int d0 = 0;
    for (; d0 + 16 * NC <= Dv; d0 += 16 * NC) aq8_tile(wbuf, NB, h0, v8, j0, nk, d0, Dv, out, os, HN, NC, PF);
    const int left = (Dv - d0) / 16;
    if (left >= 6 && NC > 6) { aq8_tile(wbuf, NB, h0, v8, j0, nk, d0, Dv, out, os, HN, 6, PF); return; }
    if (left >= 4 && NC > 4) { aq8_tile(wbuf, NB, h0, v8, j0, nk, d0, Dv, out, os, HN, 4, PF); return; }
    if (left >= 2) aq8_tile(wbuf, NB, h0, v8, j0, nk, d0, Dv, out, os, HN, 2, PF);
}

static inline __attribute__((always_inline)) void accum_q8_impl(const float *p, size_t ps, int G, const int8_t *v8,
                                                                const uint16_t *vd, size_t vds, int j0, int nk, int Dv,
                                                                float *wbuf, float *out, size_t os, const int PF) {
    const int NB = Dv / 32;
    for (int h = 0; h < G; h++)                       /* w = p * dv, one rounding each */
        for (int b = 0; b < NB; b++) {
            const float *ph = p + (size_t)h * ps + (size_t)j0;
            const uint16_t *db = vd + (size_t)b * vds + (size_t)j0;
            float *w = wbuf + ((size_t)h * (size_t)NB + (size_t)b) * (size_t)nk;
            for (int i = 0; i < nk; i += 16) {
                const __mmask16 m = tail_mask(nk - i);
                _mm512_mask_storeu_ps(w + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, ph + i),
                                                              _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, db + i))));
            }
        }
    int h0 = 0;
    /* 6 heads x 4 vectors (24 accumulators) when G is not a multiple of 4
     * (laguna's sliding layers: 24 / 4 = 6): each value vector converted once
     * for 6 heads instead of once for 4 and again for the last 2 */
    if (G % 4)
        for (; h0 + 6 <= G; h0 += 6) aq8_heads(wbuf, NB, h0, v8, j0, nk, Dv, out, os, 6, 4, PF);
    for (; h0 + 4 <= G; h0 += 4) aq8_heads(wbuf, NB, h0, v8, j0, nk, Dv, out, os, 4, 4, PF);
    if (h0 + 2 <= G) {
        aq8_heads(wbuf, NB, h0, v8, j0, nk, Dv, out, os, 2, 8, PF);
        h0 += 2;
    }
    if (h0 < G) aq8_heads(wbuf, NB, h0, v8, j0, nk, Dv, out, os, 1, 8, PF);
}

static void accum_q8_avx512(const float *p, size_t ps, int G, const int8_t *v8, const uint16_t *vd, size_t vds,
                            int j0, int nk, int Dv, float *wbuf, float *out, size_t os) {
    accum_q8_impl(p, ps, G, v8, vd, vds, j0, nk, Dv, wbuf, out, os, 0);
}
static void accum_q8_stream_avx512(const float *p, size_t ps, int G, const int8_t *v8, const uint16_t *vd, size_t vds,
                                   int j0, int nk, int Dv, float *wbuf, float *out, size_t os) {
    accum_q8_impl(p, ps, G, v8, vd, vds, j0, nk, Dv, wbuf, out, os, 1);
}

/* The max: vmaxps returns its second operand when either is NaN, so NaN
 * keys leave the running max alone, as the scalar comparison does; which of
 * +0 / -0 wins may differ, and neither changes r - mx. Inactive tail lanes
 * are -inf for the max and add nothing to the sum. */
/* max_f32 (attn.h): vmaxps returns its second operand when either is NaN, so
 * a NaN key never replaces the running maximum */
static float max_f32_avx512(const float *r, int n) {
    const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
    __m512 m = ninf;
    for (int j = 0; j < n; j += 16) m = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tail_mask(n - j), r + j), m);
    return _mm512_reduce_max_ps(m);
}

static float softmax_q8_avx512(float *r, int n) {
    const __m512 mx = _mm512_set1_ps(max_f32_avx512(r, n));
    __m512 acc = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
        const __mmask16 k = tail_mask(n - j);
        const __m512 e = expf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, r + j), mx));
        _mm512_mask_storeu_ps(r + j, k, e);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
    }
    return hsum16(acc);
}

const moe_attn_kernels moe_attn_avx512 = {scores_avx512,   accum_avx512,     scores_h_avx512, accum_h_avx512,
                                          exp_shift_avx512, silu_mul_avx512, to_half_avx512,  combine_avx512,
                                          scores_q8_avx512, accum_q8_avx512, softmax_q8_avx512, max_f32_avx512,
                                          scores_stream_avx512, accum_avx512, accum_q8_stream_avx512, swiglu_clamp_avx512,
                                          scores_h_prefetch_avx512, accum_h_prefetch_avx512};
