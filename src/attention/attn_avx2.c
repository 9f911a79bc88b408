/* attn_avx2.c — AVX2 attention kernels, bit-identical to attn.c: the 16
 * lanes of a dot are two ymm accumulators (lanes 0-7, 8-15), reduced with the
 * same tree; one FMA per element. */
#include <immintrin.h>

#include "attention/attn.h"
#include "base/util.h"
#include "quant/simd_avx2.h"   /* hsum16, dot_signed */

/* hsum16 of four dots at once, (lo_i, hi_i) for i < 4: returns [s_0, s_1,
 * s_2, s_3]. Every add is one of hsum16's, with the same operands in the same
 * order (the lower lanes first): lo + hi, then the 128-bit halves, then lanes
 * 0,1 + 2,3, then 0 + 1; the shuffles only gather the four dots' lanes into
 * one register per level. */
static inline __m128 hsum16x4(const __m256 *lo, const __m256 *hi) {
    const __m256 a = _mm256_add_ps(lo[0], hi[0]), b = _mm256_add_ps(lo[1], hi[1]);
    const __m256 c = _mm256_add_ps(lo[2], hi[2]), d = _mm256_add_ps(lo[3], hi[3]);
    const __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
    const __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
    /* per 128-bit lane: [a,c] 2-sums | [b,d] 2-sums */
    const __m256 s2 = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 s1 = _mm256_add_ps(_mm256_shuffle_ps(s2, s2, _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm256_shuffle_ps(s2, s2, _MM_SHUFFLE(3, 1, 3, 1)));
    /* s1: [a, c, a, c | b, d, b, d] */
    return _mm_unpacklo_ps(_mm256_castps256_ps128(s1), _mm256_extractf128_ps(s1, 1));
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
 * (lanes 0-7 and 8-15); each key vector is converted once and serves HN
 * heads. The query is meant as a memory operand (16 ymm registers do not
 * hold more); at 2 x 3 GCC 12 keeps it in registers instead and 3 of the 12
 * accumulators on the stack (a store and a reload per FMA): 25 % slower than
 * scores_tile22 below for FP32 keys from L2 (prefill; scores_impl). */
static inline __attribute__((always_inline)) void scores_tile(const float *q, size_t qs, int h0, const void *k,
                                                              size_t ks, int j, int D, float scale, float *sc,
                                                              size_t scs, const int HN, const int KB, const int h16,
                                                              const int stream) {
    __m256 lo[6], hi[6];
    UNROLL for (int i = 0; i < HN * KB; i++) lo[i] = hi[i] = _mm256_setzero_ps();
    /* SCORES_STEP: dims d..d+15 of key j+u into its HN heads' accumulators.
     * stream: key by key, each row front to back (one sequential stream, for
     * keys from memory: scores_stream); else the KB rows interleaved. The
     * same FMAs per accumulator, in the same order, either way. */
#define SCORES_STEP(u, d)                                                                                        \
    do {                                                                                                         \
        const size_t kj = (size_t)(j + (u)) * ks + (size_t)(d);                                                  \
        const __m256 k0 = ldkv8(k, kj, D - (d), h16), k1 = ldkv8(k, kj + 8, D - (d) - 8, h16);                   \
        UNROLL for (int hh = 0; hh < HN; hh++) {                                                                 \
            const float *qh = q + (size_t)(h0 + hh) * qs + (d);                                                  \
            lo[hh * KB + (u)] = _mm256_fmadd_ps(load8(qh, D - (d)), k0, lo[hh * KB + (u)]);                      \
            hi[hh * KB + (u)] = _mm256_fmadd_ps(load8(qh + 8, D - (d) - 8), k1, hi[hh * KB + (u)]);              \
        }                                                                                                        \
    } while (0)
    if (stream) {
        UNROLL for (int u = 0; u < KB; u++)
            for (int d = 0; d < D; d += 16) SCORES_STEP(u, d);
    } else {
        for (int d = 0; d < D; d += 16)
            UNROLL for (int u = 0; u < KB; u++) SCORES_STEP(u, d);
    }
#undef SCORES_STEP
    UNROLL for (int hh = 0; hh < HN; hh++)
        UNROLL for (int u = 0; u < KB; u++)
            sc[(size_t)(h0 + hh) * scs + (size_t)(j + u)] = hsum16(lo[hh * KB + u], hi[hh * KB + u]) * scale;
}

/* scores_tile's 2 heads x 2 keys for D % 16 == 0 (every load whole; FP32
 * or, h16, half keys), written out with its registers pinned: the 4 query vectors
 * of a 16-dim step, then each key's 2 vectors, serve 4 FMAs each. Left to
 * itself GCC 12 reloaded the queries per key and folded every key load into
 * both heads' FMAs (16 loads per 8 FMAs). The same FMAs per accumulator in
 * the same order as scores_tile, and the same reduction. */
static inline __attribute__((always_inline)) void scores_tile22(const float *q, size_t qs, int h0, const void *k,
                                                                size_t ks, int j, int D, float scale, float *sc,
                                                                size_t scs, const int h16) {
    __m256 lo[4], hi[4];                         /* [hh * 2 + u] */
    UNROLL for (int i = 0; i < 4; i++) lo[i] = hi[i] = _mm256_setzero_ps();
    const float *q0p = q + (size_t)h0 * qs, *q1p = q0p + qs;
    const size_t k0i = (size_t)j * ks, k1i = k0i + ks;
    for (int d = 0; d < D; d += 16) {
        __m256 qa = _mm256_loadu_ps(q0p + d), qb = _mm256_loadu_ps(q0p + d + 8);
        __m256 qc = _mm256_loadu_ps(q1p + d), qd = _mm256_loadu_ps(q1p + d + 8);
        __asm__("" : "+x"(qa), "+x"(qb), "+x"(qc), "+x"(qd));
        UNROLL for (int u = 0; u < 2; u++) {     /* key j + u */
            const size_t ki = (u ? k1i : k0i) + (size_t)d;
            __m256 ka = ldkv8(k, ki, 8, h16), kb = ldkv8(k, ki + 8, 8, h16);
            __asm__("" : "+x"(ka), "+x"(kb));
            lo[u] = _mm256_fmadd_ps(qa, ka, lo[u]);
            hi[u] = _mm256_fmadd_ps(qb, kb, hi[u]);
            lo[2 + u] = _mm256_fmadd_ps(qc, ka, lo[2 + u]);
            hi[2 + u] = _mm256_fmadd_ps(qd, kb, hi[2 + u]);
        }
    }
    const __m128 r = _mm_mul_ps(hsum16x4(lo, hi), _mm_set1_ps(scale));   /* [h0 j, h0 j+1, h1 j, h1 j+1] */
    _mm_storel_pi((__m64 *)(sc + (size_t)h0 * scs + (size_t)j), r);
    _mm_storeh_pi((__m64 *)(sc + (size_t)(h0 + 1) * scs + (size_t)j), r);
}

/* Half keys, HN = 4 or 6 heads x 1 key: each key vector converted once for
 * all the heads (scores_tile22 converts it once per pair of heads; for
 * laguna's G = 6, a 4 x 1 tile beside a 2 x 1 one was slower than 2 x 2,
 * where one 6 x 1 tile is faster: docs/PERFORMANCE.md). At 6 heads the 12
 * accumulators and the two key vectors fill 14 of the 16 registers; the
 * queries are memory operands. The same FMAs per accumulator in the same
 * order; heads 0-3 reduced by hsum16x4, 4-5 by hsum16 (the same adds). */
static inline __attribute__((always_inline)) void scores_tile_h1(const float *q, size_t qs, int h0, const uint16_t *k,
                                                                 size_t ks, int j, int D, float scale, float *sc,
                                                                 size_t scs, const int HN) {
    __m256 lo[6], hi[6];
    UNROLL for (int i = 0; i < HN; i++) lo[i] = hi[i] = _mm256_setzero_ps();
    const float *qh = q + (size_t)h0 * qs;
    const uint16_t *kj = k + (size_t)j * ks;
    for (int d = 0; d < D; d += 16) {
        __m256 ka = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kj + d)));
        __m256 kb = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kj + d + 8)));
        __asm__("" : "+x"(ka), "+x"(kb));
        UNROLL for (int hh = 0; hh < HN; hh++) {
            lo[hh] = _mm256_fmadd_ps(_mm256_loadu_ps(qh + (size_t)hh * qs + d), ka, lo[hh]);
            hi[hh] = _mm256_fmadd_ps(_mm256_loadu_ps(qh + (size_t)hh * qs + d + 8), kb, hi[hh]);
        }
    }
    float r[4];
    _mm_storeu_ps(r, _mm_mul_ps(hsum16x4(lo, hi), _mm_set1_ps(scale)));
    UNROLL for (int hh = 0; hh < 4; hh++) sc[(size_t)(h0 + hh) * scs + (size_t)j] = r[hh];
    UNROLL for (int hh = 4; hh < HN; hh++) sc[(size_t)(h0 + hh) * scs + (size_t)j] = hsum16(lo[hh], hi[hh]) * scale;
}

static inline __attribute__((always_inline)) void scores_impl(const float *q, size_t qs, int G, const void *k,
                                                              size_t ks, int nk, int D, float scale, float *sc,
                                                              size_t scs, const int h16, const int stream,
                                                              const int pf) {
    /* pf (kv_prefetch, attn.h): the first MOE_KV_PREFETCH_KEYS rows at the
     * start, then with each step of keys the rows that many keys ahead */
    const size_t row = ks * (h16 ? 2 : 4);
#define SCORES_PREFETCH(n)                                                                                       \
    if (pf && j + (n) + MOE_KV_PREFETCH_KEYS <= nk)                                                              \
        moe_prefetch_bytes((const char *)k + (size_t)(j + MOE_KV_PREFETCH_KEYS) * row, (size_t)(n) * row)
    int j = 0;
    if (pf) moe_prefetch_bytes(k, (size_t)(nk < MOE_KV_PREFETCH_KEYS ? nk : MOE_KV_PREFETCH_KEYS) * row);
    /* head size a multiple of 16, keys not in key_stream order: heads in
     * pairs x 2 keys (bench_attn, us per item, FP32 cache from L2: 12.6 ->
     * 9.5 qwen3moe, 16.5 -> 12.0 laguna sliding; kv_f16 from L2 19.5-21.7
     * -> 7.8-8.0 and 25.8-30.8 -> 10.2, from memory 23.7 -> 13.5 and 28.3
     * -> 13.8-14.5). Decode's key_stream order over the FP32 cache keeps the
     * 2 x 3 tiles: read as 2 x 2 from memory it took 22-43 us against 15-17 */
    if (h16 && !stream && D % 16 == 0 && G % 4 == 0)
        for (; j < nk; j++) {
            SCORES_PREFETCH(1);
            for (int h0 = 0; h0 < G; h0 += 4) scores_tile_h1(q, qs, h0, (const uint16_t *)k, ks, j, D, scale, sc, scs, 4);
        }
    if (h16 && !stream && D % 16 == 0 && G == 6)
        for (; j < nk; j++) {
            SCORES_PREFETCH(1);
            scores_tile_h1(q, qs, 0, (const uint16_t *)k, ks, j, D, scale, sc, scs, 6);
        }
    if (!stream && D % 16 == 0)
        for (; j + 2 <= nk; j += 2) {
            SCORES_PREFETCH(2);
            int h0 = 0;
            for (; h0 + 2 <= G; h0 += 2) scores_tile22(q, qs, h0, k, ks, j, D, scale, sc, scs, h16);
            if (h0 < G) scores_tile(q, qs, h0, k, ks, j, D, scale, sc, scs, 1, 2, h16, stream);
        }
    for (; j + 3 <= nk; j += 3) {                 /* heads in pairs x 3 keys, then a last head */
        SCORES_PREFETCH(3);
        int h0 = 0;
        for (; h0 + 2 <= G; h0 += 2) scores_tile(q, qs, h0, k, ks, j, D, scale, sc, scs, 2, 3, h16, stream);
        if (h0 < G) scores_tile(q, qs, h0, k, ks, j, D, scale, sc, scs, 1, 3, h16, stream);
    }
    for (; j < nk; j++)
        for (int h = 0; h < G; h++) scores_tile(q, qs, h, k, ks, j, D, scale, sc, scs, 1, 1, h16, 0);
#undef SCORES_PREFETCH
}

/* One tile of the weighted sum: HN heads x NC vectors of 8 dims from d0,
 * over keys j0 .. nk-1 in order, accumulators in registers, starting from
 * +0 or (carry) from the sums a previous range stored in out; each value
 * vector is converted once and serves HN heads. */
static inline __attribute__((always_inline)) void accum_tile(const float *p, size_t ps, int h0, const void *v,
                                                             size_t vs, int j0, int nk, int d0, int Dv, float *out,
                                                             size_t os, const int HN, const int NC, const int h16,
                                                             const int full, const int carry) {
    __m256 o[8];
    UNROLL for (int hh = 0; hh < HN; hh++) UNROLL for (int c = 0; c < NC; c++) {
        const int left = Dv - d0 - 8 * c;        /* carry: the sums of keys before j0, stored below */
        const float *oh = out + (size_t)(h0 + hh) * os + d0 + 8 * c;
        o[hh * NC + c] = !carry ? _mm256_setzero_ps()
                         : full || left >= 8 ? _mm256_loadu_ps(oh)
                         : left > 0 ? _mm256_maskload_ps(oh, tail_mask8(left)) : _mm256_setzero_ps();
    }
    for (int j = j0; j < nk; j++) {
        const size_t vj = (size_t)j * vs + (size_t)d0;
        __m256 a[4];
        UNROLL for (int hh = 0; hh < HN; hh++) a[hh] = _mm256_set1_ps(p[(size_t)(h0 + hh) * ps + (size_t)j]);
        UNROLL for (int c = 0; c < NC; c++) {
            const __m256 vv = ldkv8(v, vj + 8 * (size_t)c, full ? 8 : Dv - d0 - 8 * c, h16);
            UNROLL for (int hh = 0; hh < HN; hh++) o[hh * NC + c] = _mm256_fmadd_ps(a[hh], vv, o[hh * NC + c]);
        }
    }
    UNROLL for (int hh = 0; hh < HN; hh++) {
        float *oh = out + (size_t)(h0 + hh) * os + d0;
        UNROLL for (int c = 0; c < NC; c++) {
            const int left = Dv - d0 - 8 * c;
            if (full || left >= 8) _mm256_storeu_ps(oh + 8 * c, o[hh * NC + c]);
            else if (left > 0) _mm256_maskstore_ps(oh + 8 * c, tail_mask8(left), o[hh * NC + c]);
        }
    }
}

/* quad: heads in fours first, 2 vectors (16 dims) per tile: a key's values
 * are read G/4 times instead of G/2, a quarter line per head and FMA pair
 * instead of half (bench_attn, L2 rows: value sum 9.5 -> 6.7-7.1 us per
 * qwen3moe item, 12.3 -> 9.6-9.9 per laguna sliding item; kv_f16, before
 * the whole tiles below, 24 -> 18 / 32 -> 24); but it walks each value row
 * in 8 passes, and from memory the FP32 sum took 42-54 us against 25-26
 * (kv_f16: 33-38 against 37): so the FP32 cache keeps pairs in decode
 * (accum_stream). */
static inline __attribute__((always_inline)) void accum_impl(const float *p, size_t ps, int G, const void *v, size_t vs,
                                                             int nk, int Dv, float *out, size_t os, const int h16,
                                                             const int quad, const int pf) {
    int h0 = 0;
    /* full (half cache): the tile's dims all exist, so its loads need no
     * test; a test per load with the tail's buffer spilled the tile
     * (bench_attn, kv_f16 value sum, us per item: L2 17.8 -> 5.8 qwen3moe,
     * 26.6 -> 7.9 laguna sliding; memory 31.5 -> 20, 39 -> 19-21). The
     * FP32 cache measured no faster so (its decode tiles slower: 9.5 -> 12.2
     * from L2), and keeps the tested loads. */
#define ACCUM_TILES(HN, NC, J0, J1, CARRY)                                                                    \
    for (int d0 = 0; d0 < Dv; d0 += 8 * (NC)) {                                                               \
        if (h16 && Dv - d0 >= 8 * (NC)) accum_tile(p, ps, h0, v, vs, J0, J1, d0, Dv, out, os, HN, NC, h16, 1, CARRY); \
        else accum_tile(p, ps, h0, v, vs, J0, J1, d0, Dv, out, os, HN, NC, h16, 0, CARRY);                  \
    }
#define ACCUM_HEADS(J0, J1, CARRY)                                                                  \
    h0 = 0;                                                                                         \
    if (quad)                                                                                       \
        for (; h0 + 4 <= G; h0 += 4) ACCUM_TILES(4, 2, J0, J1, CARRY)                               \
    for (; h0 + 2 <= G; h0 += 2) ACCUM_TILES(2, 4, J0, J1, CARRY)                                   \
    if (h0 < G) ACCUM_TILES(1, 8, J0, J1, CARRY)
    if (!pf) {
        ACCUM_HEADS(0, nk, 0)
        return;
    }
    /* pf (kv_prefetch): the keys in chunks of MOE_KV_CHUNK_KEYS, every tile
     * over a chunk before the next, each tile's sums carried in out between
     * chunks (stored and reloaded exactly: each lane's FMAs in key order, the
     * same bits); while a chunk is summed the next one's lines are read once,
     * in address order. The tiles walk a row a line at a time in 8 passes:
     * from memory those strided walks left the value sum at a third of its
     * speed from L2, where a chunk's lines read in order keep the memory
     * stream sequential (docs/PERFORMANCE.md). */
    const size_t row = vs * (h16 ? 2 : 4);
    for (int c0 = 0; c0 < nk; c0 += MOE_KV_CHUNK_KEYS) {
        const int c1 = nk - c0 < MOE_KV_CHUNK_KEYS ? nk : c0 + MOE_KV_CHUNK_KEYS;
        const int n1 = nk - c1 < MOE_KV_CHUNK_KEYS ? nk : c1 + MOE_KV_CHUNK_KEYS;
        moe_touch_bytes((const char *)v + (size_t)c1 * row, (size_t)(n1 - c1) * row);
        ACCUM_HEADS(c0, c1, c0 > 0)
    }
#undef ACCUM_HEADS
#undef ACCUM_TILES
}

static void scores_avx2(const float *q, size_t qs, int G, const float *k, size_t ks, int nk, int D, float scale,
                        float *sc, size_t scs) {
    scores_impl(q, qs, G, k, ks, nk, D, scale, sc, scs, 0, 0, 0);
}
static void scores_h_avx2(const float *q, size_t qs, int G, const uint16_t *k, size_t ks, int nk, int D, float scale,
                          float *sc, size_t scs) {
    scores_impl(q, qs, G, k, ks, nk, D, scale, sc, scs, 1, 0, 0);
}
static void scores_stream_avx2(const float *q, size_t qs, int G, const float *k, size_t ks, int nk, int D, float scale,
                               float *sc, size_t scs) {
    scores_impl(q, qs, G, k, ks, nk, D, scale, sc, scs, 0, 1, 0);
}
static void accum_stream_avx2(const float *p, size_t ps, int G, const float *v, size_t vs, int nk, int Dv, float *out,
                              size_t os) {
    accum_impl(p, ps, G, v, vs, nk, Dv, out, os, 0, 0, 0);
}
static void accum_avx2(const float *p, size_t ps, int G, const float *v, size_t vs, int nk, int Dv, float *out,
                       size_t os) {
    accum_impl(p, ps, G, v, vs, nk, Dv, out, os, 0, 1, 0);
}
static void accum_h_avx2(const float *p, size_t ps, int G, const uint16_t *v, size_t vs, int nk, int Dv, float *out,
                         size_t os) {
    accum_impl(p, ps, G, v, vs, nk, Dv, out, os, 1, 1, 0);
}
/* kv_prefetch (attn.h): scores_h and accum_h with the prefetches */
static void scores_h_prefetch_avx2(const float *q, size_t qs, int G, const uint16_t *k, size_t ks, int nk, int D,
                                   float scale, float *sc, size_t scs) {
    scores_impl(q, qs, G, k, ks, nk, D, scale, sc, scs, 1, 0, 1);
}
static void accum_h_prefetch_avx2(const float *p, size_t ps, int G, const uint16_t *v, size_t vs, int nk, int Dv,
                                  float *out, size_t os) {
    accum_impl(p, ps, G, v, vs, nk, Dv, out, os, 1, 1, 1);
}

/* exp: the scalar reference's loop (the compiler may vectorize it; the
 * operations, and so the bits, are the same either way) */
/* moe_expf (src/util.h) 8 lanes at a time, operation for operation (as
 * attn_avx512.c's expf16): the same clamps, separate multiplies and adds,
 * polynomial order and 2^n construction, so every lane has the scalar bits. */
static inline __m256 expf8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(MOE_EXP_LO), hi = _mm256_set1_ps(MOE_EXP_HI), zero = _mm256_setzero_ps();
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m256 small = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), big = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    xc = _mm256_blendv_ps(xc, zero, nan);
    const __m256 magic = _mm256_set1_ps(MOE_EXP_MAGIC);
    const __m256 t = _mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(MOE_EXP_LOG2E)), magic);
    const __m256 n = _mm256_sub_ps(t, magic);
    __m256 r = _mm256_sub_ps(xc, _mm256_mul_ps(n, _mm256_set1_ps(MOE_EXP_LN2_HI)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(MOE_EXP_LN2_LO)));
    __m256 p = _mm256_set1_ps(MOE_EXP_P0);
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(MOE_EXP_P1));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(MOE_EXP_P2));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(MOE_EXP_P3));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(MOE_EXP_P4));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(MOE_EXP_P5));
    __m256 y = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvttps_epi32(n);
    const __m256 over = _mm256_castsi256_ps(_mm256_cmpgt_epi32(ni, _mm256_set1_epi32(127)));
    y = _mm256_blendv_ps(y, _mm256_mul_ps(y, _mm256_set1_ps(2.0f)), over);
    ni = _mm256_min_epi32(ni, _mm256_set1_epi32(127));
    const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23));
    y = _mm256_mul_ps(y, scale);
    y = _mm256_blendv_ps(y, zero, small);
    y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), big);
    return _mm256_blendv_ps(y, x, nan);
}

static void exp_shift_avx2(float *r, int n, float mx) {
    const __m256 m = _mm256_set1_ps(mx);
    int j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(r + j, expf8(_mm256_sub_ps(_mm256_loadu_ps(r + j), m)));
    moe_attn_scalar.exp_shift(r + j, n - j, mx);
}

static inline __m256 silu_mul8(__m256 x, __m256 u) {
    const __m256 e = expf8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}
static void silu_mul_avx2(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(g + i, silu_mul8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    moe_attn_scalar.silu_mul(g + i, u + i, n - i);
}

/* swiglu_clamp in the scalar order: min with 7 (NaN: 7, as minps), the
 * clamp of u by compares (NaN stays), sign flip, multiply, exp, add, divide,
 * add, multiply */
static inline __m256 swiglu_clamp8(__m256 g, __m256 u) {
    const __m256 lim = _mm256_set1_ps(7.0f), nlim = _mm256_set1_ps(-7.0f), one = _mm256_set1_ps(1.0f);
    const __m256 x = _mm256_min_ps(g, lim);
    __m256 y = _mm256_blendv_ps(u, nlim, _mm256_cmp_ps(u, nlim, _CMP_LT_OQ));
    y = _mm256_blendv_ps(y, lim, _mm256_cmp_ps(u, lim, _CMP_GT_OQ));
    const __m256 nx = _mm256_xor_ps(x, _mm256_set1_ps(-0.0f));
    const __m256 e = expf8(_mm256_mul_ps(_mm256_set1_ps(1.702f), nx));
    return _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_add_ps(y, one));
}
static void swiglu_clamp_avx2(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(g + i, swiglu_clamp8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    moe_attn_scalar.swiglu_clamp(g + i, u + i, n - i);
}

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

/* ---- kv_q8 (attn.h) ---- */

/* Scores of one 16-key tile (keys jt+lo .. jt+hi-1 stored) for HN heads from
 * h0; keys 0-7 of a slab are its first 32 bytes, keys 8-15 the next 32. No
 * VNNI here: vpmaddubsw takes |q| (unsigned) times the key codes with q's
 * sign moved onto them (vpsignb); a pair of such products is at most
 * 2 * 127 * 127, inside int16, and vpmaddwd widens the pairs to int32, so
 * each lane ends with the exact isum of its key, as in the contract. */
static inline __attribute__((always_inline)) void sq8_tile(const uint8_t *qa, size_t qas, int h0, const int8_t *kt,
                                                           const uint16_t *kd, size_t kds, int jt, int D, float scale,
                                                           float *sc, size_t scs, int lo, int hi, const int HN) {
    __m256 acc[2][2];
    UNROLL for (int hh = 0; hh < HN; hh++) acc[hh][0] = acc[hh][1] = _mm256_setzero_ps();
    for (int b = 0; b < D / 32; b++) {
        const size_t qb = moe_a8_code_off(b, 0);
        __m256i is[2][2];
        UNROLL for (int hh = 0; hh < HN; hh++) is[hh][0] = is[hh][1] = _mm256_setzero_si256();
        UNROLL for (int t = 0; t < 8; t++) {
            const __m256i k0 = _mm256_loadu_si256((const __m256i *)(kt + (size_t)(8 * b + t) * 64));
            const __m256i k1 = _mm256_loadu_si256((const __m256i *)(kt + (size_t)(8 * b + t) * 64 + 32));
            UNROLL for (int hh = 0; hh < HN; hh++) {
                const __m256i qv = _mm256_set1_epi32(moe_a8_i32(qa + (size_t)(h0 + hh) * qas + qb + 64 * (size_t)t));
                const __m256i qabs = _mm256_abs_epi8(qv);
                is[hh][0] = dot_signed(is[hh][0], qabs, qv, k0);
                is[hh][1] = dot_signed(is[hh][1], qabs, qv, k1);
            }
        }
        const uint16_t *kb = kd + (size_t)b * kds + (size_t)jt;
        const __m256 dk0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)kb));
        const __m256 dk1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kb + 8)));
        UNROLL for (int hh = 0; hh < HN; hh++) {
            const __m256 da = _mm256_set1_ps(moe_a8_f32(qa + (size_t)(h0 + hh) * qas + moe_a8_da_off(b)));
            acc[hh][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[hh][0]), _mm256_mul_ps(dk0, da), acc[hh][0]);
            acc[hh][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[hh][1]), _mm256_mul_ps(dk1, da), acc[hh][1]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
    UNROLL for (int hh = 0; hh < HN; hh++) {
        float r[16];
        _mm256_storeu_ps(r, _mm256_mul_ps(acc[hh][0], vs));
        _mm256_storeu_ps(r + 8, _mm256_mul_ps(acc[hh][1], vs));
        float *o = sc + (size_t)(h0 + hh) * scs + (size_t)jt;
        for (int l = lo; l < hi; l++) o[l] = r[l];
    }
}

static void scores_q8_avx2(const uint8_t *qa, size_t qas, int G, const int8_t *k8, const uint16_t *kd, size_t kds,
                           int j0, int nk, int D, float scale, float *sc, size_t scs) {
    for (int jt = j0 & ~15; jt < j0 + nk; jt += 16) {
        const int lo = j0 > jt ? j0 - jt : 0, hi = j0 + nk - jt < 16 ? j0 + nk - jt : 16;
        const int8_t *kt = k8 + (size_t)jt * (size_t)D;                     /* tile jt/16 */
        int h0 = 0;
        for (; h0 + 2 <= G; h0 += 2) sq8_tile(qa, qas, h0, kt, kd, kds, jt, D, scale, sc, scs, lo, hi, 2);
        if (h0 < G) sq8_tile(qa, qas, h0, kt, kd, kds, jt, D, scale, sc, scs, lo, hi, 1);
    }
}

/* One tile of the weighted sum: HN heads x NC vectors of 8 dims from d0,
 * all inside one 32-block (8 NC divides 32), over all keys in order.
 * PF (accum_q8_stream): the tiles whose d0 starts a 64-byte run (the first
 * of the passes over it) prefetch that run of the row
 * MOE_VALUE_PREFETCH_KEYS keys ahead. */
static inline __attribute__((always_inline)) void aq8_tile(const float *wbuf, int NB, int h0, const int8_t *v8, int j0,
                                                           int nk, int d0, int Dv, float *out, size_t os, const int HN,
                                                           const int NC, const int PF) {
    const bool pf = PF && d0 % 64 == 0;
    const float *wp[4];
    UNROLL for (int hh = 0; hh < HN; hh++) wp[hh] = wbuf + ((size_t)(h0 + hh) * (size_t)NB + (size_t)(d0 / 32)) * (size_t)nk;
    __m256 o[8];
    UNROLL for (int i = 0; i < HN * NC; i++) o[i] = _mm256_setzero_ps();
    for (int j = 0; j < nk; j++) {
        const int8_t *vr = v8 + (size_t)(j0 + j) * (size_t)Dv + (size_t)d0;
        if (pf && j + MOE_VALUE_PREFETCH_KEYS < nk)
            _mm_prefetch((const char *)(vr + (size_t)MOE_VALUE_PREFETCH_KEYS * (size_t)Dv), _MM_HINT_T0);
        __m256 vv[4];
        UNROLL for (int c = 0; c < NC; c++)
            vv[c] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(vr + 8 * c))));
        UNROLL for (int hh = 0; hh < HN; hh++) {
            const __m256 a = _mm256_set1_ps(wp[hh][j]);
            UNROLL for (int c = 0; c < NC; c++) o[hh * NC + c] = _mm256_fmadd_ps(a, vv[c], o[hh * NC + c]);
        }
    }
    UNROLL for (int hh = 0; hh < HN; hh++)
        UNROLL for (int c = 0; c < NC; c++) _mm256_storeu_ps(out + (size_t)(h0 + hh) * os + (size_t)d0 + 8 * (size_t)c, o[hh * NC + c]);
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
            int i = 0;
            for (; i + 8 <= nk; i += 8)
                _mm256_storeu_ps(w + i, _mm256_mul_ps(_mm256_loadu_ps(ph + i),
                                                      _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(db + i)))));
            for (; i < nk; i++) w[i] = ph[i] * _cvtsh_ss(db[i]);
        }
    int h0 = 0;
    for (; h0 + 4 <= G; h0 += 4)
        for (int d0 = 0; d0 < Dv; d0 += 16) aq8_tile(wbuf, NB, h0, v8, j0, nk, d0, Dv, out, os, 4, 2, PF);
    for (; h0 + 2 <= G; h0 += 2)
        for (int d0 = 0; d0 < Dv; d0 += 32) aq8_tile(wbuf, NB, h0, v8, j0, nk, d0, Dv, out, os, 2, 4, PF);
    if (h0 < G)
        for (int d0 = 0; d0 < Dv; d0 += 32) aq8_tile(wbuf, NB, h0, v8, j0, nk, d0, Dv, out, os, 1, 4, PF);
}

static void accum_q8_avx2(const float *p, size_t ps, int G, const int8_t *v8, const uint16_t *vd, size_t vds, int j0,
                          int nk, int Dv, float *wbuf, float *out, size_t os) {
    accum_q8_impl(p, ps, G, v8, vd, vds, j0, nk, Dv, wbuf, out, os, 0);
}
static void accum_q8_stream_avx2(const float *p, size_t ps, int G, const int8_t *v8, const uint16_t *vd, size_t vds,
                                 int j0, int nk, int Dv, float *wbuf, float *out, size_t os) {
    accum_q8_impl(p, ps, G, v8, vd, vds, j0, nk, Dv, wbuf, out, os, 1);
}

/* the scalar routine, as exp_shift (the compiler may vectorize its loops) */
/* softmax_q8 (attn.h): lanes 0-7 and 8-15 of the 16-lane sum in two ymm
 * accumulators; the last partial block adds +0 in the lanes past n, which
 * leaves a sum of exps (never -0) unchanged. */
static float max_f32_avx2(const float *r, int n);
static float softmax_q8_avx2(float *r, int n) {
    const __m256 mx = _mm256_set1_ps(max_f32_avx2(r, n));
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m256 e0 = expf8(_mm256_sub_ps(_mm256_loadu_ps(r + j), mx));
        const __m256 e1 = expf8(_mm256_sub_ps(_mm256_loadu_ps(r + j + 8), mx));
        _mm256_storeu_ps(r + j, e0);
        _mm256_storeu_ps(r + j + 8, e1);
        lo = _mm256_add_ps(lo, e0);
        hi = _mm256_add_ps(hi, e1);
    }
    if (j < n) {
        float t[16] = {0};
        const int left = n - j;
        for (int i = 0; i < left; i++) t[i] = r[j + i];
        const __m256 valid0 = _mm256_castsi256_ps(tail_mask8(left)), valid1 = _mm256_castsi256_ps(tail_mask8(left - 8));
        const __m256 e0 = _mm256_and_ps(expf8(_mm256_sub_ps(_mm256_loadu_ps(t), mx)), valid0);
        const __m256 e1 = _mm256_and_ps(expf8(_mm256_sub_ps(_mm256_loadu_ps(t + 8), mx)), valid1);
        _mm256_storeu_ps(t, e0);
        _mm256_storeu_ps(t + 8, e1);
        for (int i = 0; i < left; i++) r[j + i] = t[i];
        lo = _mm256_add_ps(lo, e0);
        hi = _mm256_add_ps(hi, e1);
    }
    return hsum16(lo, hi);
}

/* max_f32 (attn.h): 8 lanes; vmaxps returns its second operand when either is
 * NaN, so a NaN key never replaces the running maximum */
static float max_f32_avx2(const float *r, int n) {
    __m256 m = _mm256_set1_ps(-__builtin_inff());
    int j = 0;
    for (; j + 8 <= n; j += 8) m = _mm256_max_ps(_mm256_loadu_ps(r + j), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ps(h, _mm_movehdup_ps(h));
    float mx = _mm_cvtss_f32(h);
    for (; j < n; j++) if (r[j] > mx) mx = r[j];
    return mx;
}

const moe_attn_kernels moe_attn_avx2 = {scores_avx2,    accum_avx2,     scores_h_avx2,  accum_h_avx2,
                                        exp_shift_avx2, silu_mul_avx2, to_half_avx2,   combine_avx2,
                                        scores_q8_avx2, accum_q8_avx2,  softmax_q8_avx2, max_f32_avx2,
                                        scores_stream_avx2, accum_stream_avx2, accum_q8_stream_avx2, swiglu_clamp_avx2,
                                        scores_h_prefetch_avx2, accum_h_prefetch_avx2};
