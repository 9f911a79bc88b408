/* attn_tq_avx2.c — the kv_tq kernels (kv_tq.h) at AVX2: a group of 32 codes
 * unpacks into four vectors of 8 lanes, dims 32g + 0..7, 8..15, 16..23,
 * 24..31. Centroids come from in-register permutes (permutevar8x32,
 * blended on the index's bits 3 and 4 for 16 and 32 entries): float ones
 * for the value sum, whose every fmadd is the scalar reference's fmaf in
 * its order (decode and prefill alike through accum_tq_rows: centroids
 * staged once per block of keys for all rows). Scores (an exact integer
 * sum, any order): int8 centroids by vpshufb and vpmaddubsw at 4 and 5 bits
 * from head size 64 (scores8_bits), int32 ones by the same permutes and
 * vpmulld otherwise. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "attention/kv_tq.h"
#include "base/util.h"
#include "quant/simd_avx2.h"

#define UNROLL _Pragma("GCC unroll 16")

typedef struct { __m256 t[4]; int bits; } tq_tab;   /* centroids 0..7, 8..15, 16..23, 24..31 */

static tq_tab tab_for(int bits) {
    const float *cb = moe_tq_codebook(bits);
    float t[32] = {0};
    memcpy(t, cb, sizeof(float) * (size_t)(1 << bits));
    tq_tab r;
    for (int i = 0; i < 4; i++) r.t[i] = _mm256_loadu_ps(t + 8 * i);
    r.bits = bits;
    return r;
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

static inline __m256 lut(const tq_tab *t, __m256i i) {
    const __m256 a = _mm256_permutevar8x32_ps(t->t[0], i);
    if (t->bits == 3) return a;
    const __m256 b = _mm256_blendv_ps(a, _mm256_permutevar8x32_ps(t->t[1], i), _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
    if (t->bits == 4) return b;
    const __m256 c = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t->t[2], i), _mm256_permutevar8x32_ps(t->t[3], i),
                                      _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
    return _mm256_blendv_ps(b, c, _mm256_castsi256_ps(_mm256_slli_epi32(i, 27)));
}

/* The top code bit of 8 dims: bits k .. k+7 of top -> lanes, times add. */
static inline __m256i top8(uint32_t top, int k, int add) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)((top >> k) & 0xff)), bit), bit);
    return _mm256_and_si256(m, _mm256_set1_epi32(add));
}

/* The codes of dims 32g + 8i .. 32g + 8i + 7, i = 0..3, in ix[i]. */
static inline void group_idx(const uint8_t *row, int D, int bits, int g, __m256i *ix) {
    __m256i i0, i1, i2, i3;
    if (bits == 3) {
        const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + 8 * g)));
        const __m256i three = _mm256_set1_epi32(3);
        i0 = _mm256_and_si256(x, three);
        i1 = _mm256_and_si256(_mm256_srli_epi32(x, 2), three);
        i2 = _mm256_and_si256(_mm256_srli_epi32(x, 4), three);
        i3 = _mm256_srli_epi32(x, 6);
        const uint32_t top = ld32(row + D / 4 + 4 * g);
        i0 = _mm256_or_si256(i0, top8(top, 0, 4));
        i1 = _mm256_or_si256(i1, top8(top, 8, 4));
        i2 = _mm256_or_si256(i2, top8(top, 16, 4));
        i3 = _mm256_or_si256(i3, top8(top, 24, 4));
    } else {
        const __m256i xa = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + 16 * g)));
        const __m256i xb = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + 16 * g + 8)));
        const __m256i f = _mm256_set1_epi32(15);
        i0 = _mm256_and_si256(xa, f);
        i1 = _mm256_and_si256(xb, f);
        i2 = _mm256_srli_epi32(xa, 4);
        i3 = _mm256_srli_epi32(xb, 4);
        if (bits == 5) {
            const uint32_t top = ld32(row + D / 2 + 4 * g);
            i0 = _mm256_or_si256(i0, top8(top, 0, 16));
            i1 = _mm256_or_si256(i1, top8(top, 8, 16));
            i2 = _mm256_or_si256(i2, top8(top, 16, 16));
            i3 = _mm256_or_si256(i3, top8(top, 24, 16));
        }
    }
    ix[0] = i0;
    ix[1] = i1;
    ix[2] = i2;
    ix[3] = i3;
}

/* ---- scores_tq at 3 bits and head size 32: int32 lanes ----
 * Codes unpack as for the value sum, the integer centroids come from the
 * same permutes (on int32 tables), and each head's int32 lanes take
 * qi[d] * ck[c] (vpmulld): exact, so lane order and tree change nothing. */
#define HQ 4   /* heads per pass: one reduction sums four */

static inline __m256i ilut(const __m256i *t, int bits, __m256i i) {
    const __m256i a = _mm256_permutevar8x32_epi32(t[0], i);
    if (bits == 3) return a;
    const __m256 m3 = _mm256_castsi256_ps(_mm256_slli_epi32(i, 28));
    const __m256i b = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(t[1], i)), m3));
    if (bits == 4) return b;
    const __m256i c = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(_mm256_permutevar8x32_epi32(t[2], i)),
                                                           _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(t[3], i)), m3));
    return _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(b), _mm256_castsi256_ps(c), _mm256_castsi256_ps(_mm256_slli_epi32(i, 27))));
}

/* The sums of a, b, c, d (int32 lanes) in lanes 0..3: exact, any order. */
static inline __m128i hsum4(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
    const __m256i cd = _mm256_add_epi32(_mm256_unpacklo_epi32(c, d), _mm256_unpackhi_epi32(c, d));
    const __m256i x = _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
    return _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
}

/* ---- scores_tq at 4 and 5 bits, head size >= 64: int8 products ----
 * The int8 contract (kv_tq.h) lets a key's codes become signed int8
 * centroids with one vpshufb per 32 (the 5th bit blends a second table by
 * a byte mask built from the top-bit plane), and vpmaddubsw multiplies 32
 * of them at a time: |q| (u8) times sign(ck, q), pair sums <= 2 * 127 * 127
 * (no saturation), widened by vpmaddwd. Per 64 dims, "lo" holds dims
 * 64m + i and 64m + 32 + i (i < 16: the low nibbles of bytes 32m .. 32m +
 * 31), "hi" the same + 16; the query rows were put in that order once.
 * The centroids of a tile of keys are built once for every row of the
 * call; the sums are exact, so the reduction tree changes nothing. */
#define KT8 16   /* keys per tile: score_row8 takes 8 at a time (and loads 8 scales) */
_Static_assert(KT8 % 8 == 0, "KT8: whole groups of 8 keys");
#define RC8 32   /* query rows per chunk: a prefill call's 4 tokens x 8 heads build the tile once */
#define QB8 16384 /* bytes of the chunk's query rows, and of the tile's centroids */

/* The signed int8 centroids of dims 64m.. of row kj: lo and hi (above). */
static inline void lut8_64(const uint8_t *kj, int D, int m, const int bits, __m256i tl, __m256i th, __m256i *lo,
                           __m256i *hi) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)(kj + 32 * (size_t)m));
    const __m256i f = _mm256_set1_epi8(15);
    const __m256i cl = _mm256_and_si256(x, f), ch = _mm256_and_si256(_mm256_srli_epi16(x, 4), f);
    if (bits == 4) {
        *lo = _mm256_shuffle_epi8(tl, cl);
        *hi = _mm256_shuffle_epi8(tl, ch);
        return;
    }
    uint64_t w;                                    /* the top-bit words of groups 2m, 2m + 1 */
    memcpy(&w, kj + D / 2 + 8 * (size_t)m, 8);
    const __m256i W = _mm256_set1_epi64x((long long)w);
    /* byte p of lo: bit p % 16 of word p / 16 = bit p % 8 of byte 4 (p / 16) + (p % 16) / 8 */
    const __m256i pl = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                        4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5);
    const __m256i ph = _mm256_add_epi8(pl, _mm256_set1_epi8(2));
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
    const __m256i ml = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(W, pl), bit), bit);
    const __m256i mh = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(W, ph), bit), bit);
    *lo = _mm256_blendv_epi8(_mm256_shuffle_epi8(tl, cl), _mm256_shuffle_epi8(th, cl), ml);
    *hi = _mm256_blendv_epi8(_mm256_shuffle_epi8(tl, ch), _mm256_shuffle_epi8(th, ch), mh);
}

/* moe_tq_query_q at AVX2, the same integers: amax is an exact max (a NaN,
 * an Inf or a zero row goes to the scalar function, which owns those
 * cases), the products are the same doubles, and cvtpd_epi32 rounds in the
 * current mode as lrint does (|q * inv| <= Q: no overflow); the clamp to
 * +-Q as there. D is a multiple of 8. */
static float query_q(const float *qr, int D, int bits, int16_t *qi) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mx = _mm256_setzero_ps(), un = _mm256_setzero_ps();
    for (int d = 0; d < D; d += 8) {
        const __m256 a = _mm256_and_ps(_mm256_loadu_ps(qr + d), absm);
        un = _mm256_or_ps(un, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
        mx = _mm256_max_ps(mx, a);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (_mm256_movemask_ps(un) || amax == 0.0f || amax > 3.4028235e38f) return moe_tq_query_q(qr, D, bits, qi);
    const int Q = moe_tq_qmax(D);
    const __m256d inv = _mm256_set1_pd((double)Q / (double)amax);
    const __m128i hi = _mm_set1_epi32(Q), lo = _mm_set1_epi32(-Q);
    for (int d = 0; d < D; d += 8) {
        const __m128i a = _mm256_cvtpd_epi32(_mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(qr + d)), inv));
        const __m128i b = _mm256_cvtpd_epi32(_mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(qr + d + 4)), inv));
        _mm_storeu_si128((__m128i *)(void *)(qi + d), _mm_packs_epi32(_mm_min_epi32(_mm_max_epi32(a, lo), hi),
                                                                       _mm_min_epi32(_mm_max_epi32(b, lo), hi)));
    }
    return (amax / (float)Q) * moe_tq_cscale(bits);
}

/* Query row qi (|qi| <= 127) in the order of lut8_64: |q| into qa, q into
 * qs. Per 64 dims the 16-dim chunks go 0, 2 | 1, 3: packs_epi16 of chunks
 * 0 and 2 interleaves their 128-bit halves, permute4x64 0xD8 puts them
 * back in order. */
static void q8_order(const int16_t *qi, int D, uint8_t *qa, int8_t *qs) {
    for (int m = 0; m < D / 64; m++) {
        const __m256i *q = (const __m256i *)(const void *)(qi + 64 * m);
        const __m256i a = _mm256_permute4x64_epi64(_mm256_packs_epi16(_mm256_loadu_si256(q), _mm256_loadu_si256(q + 2)), 0xD8);
        const __m256i b = _mm256_permute4x64_epi64(_mm256_packs_epi16(_mm256_loadu_si256(q + 1), _mm256_loadu_si256(q + 3)), 0xD8);
        _mm256_storeu_si256((__m256i *)(void *)(qs + 64 * m), a);
        _mm256_storeu_si256((__m256i *)(void *)(qs + 64 * m + 32), b);
        _mm256_storeu_si256((__m256i *)(void *)(qa + 64 * m), _mm256_abs_epi8(a));
        _mm256_storeu_si256((__m256i *)(void *)(qa + 64 * m + 32), _mm256_abs_epi8(b));
    }
}

/* The sums of the int32 lanes of a[0..7], in lane k of the result: exact,
 * any order. */
static inline __m256i hsum8(const __m256i *a) {
    const __m256i a01 = _mm256_add_epi32(_mm256_unpacklo_epi32(a[0], a[1]), _mm256_unpackhi_epi32(a[0], a[1]));
    const __m256i a23 = _mm256_add_epi32(_mm256_unpacklo_epi32(a[2], a[3]), _mm256_unpackhi_epi32(a[2], a[3]));
    const __m256i a45 = _mm256_add_epi32(_mm256_unpacklo_epi32(a[4], a[5]), _mm256_unpackhi_epi32(a[4], a[5]));
    const __m256i a67 = _mm256_add_epi32(_mm256_unpacklo_epi32(a[6], a[7]), _mm256_unpackhi_epi32(a[6], a[7]));
    /* per 128-bit half: lanes 0..3 = partial sums of a0, a1, a2, a3 (a4 .. a7) */
    const __m256i b03 = _mm256_add_epi32(_mm256_unpacklo_epi64(a01, a23), _mm256_unpackhi_epi64(a01, a23));
    const __m256i b47 = _mm256_add_epi32(_mm256_unpacklo_epi64(a45, a67), _mm256_unpackhi_epi64(a45, a67));
    return _mm256_add_epi32(_mm256_permute2x128_si256(b03, b47, 0x20), _mm256_permute2x128_si256(b03, b47, 0x31));
}

/* One query row (|q| in qa, q in qs) against 8 keys whose int8 centroids
 * are at cb (D bytes each): each query load serves the 8 keys, and the 8
 * scores, ((isum * S) * sigma_j) * scale as the reference rounds them, leave
 * in one store (past a tile's last key, nj < 8: computed on the zeroed
 * centroids there and not stored). */
static inline __attribute__((always_inline)) void score_row8(const int8_t *cb, int nj, int D, const uint8_t *qa,
                                                             const int8_t *qs, float S, const float *sig, float scale,
                                                             float *o) {
    __m256i acc[8];
    UNROLL for (int k = 0; k < 8; k++) acc[k] = _mm256_setzero_si256();
    for (int d = 0; d < D; d += 32) {
        const __m256i a = _mm256_loadu_si256((const __m256i *)(qa + d));
        const __m256i s = _mm256_loadu_si256((const __m256i *)(qs + d));
        UNROLL for (int k = 0; k < 8; k++)
            acc[k] = dot_signed(acc[k], a, s, _mm256_load_si256((const __m256i *)(cb + (size_t)k * D + d)));
    }
    const __m256 f = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(hsum8(acc)), _mm256_set1_ps(S)),
                                                 _mm256_loadu_ps(sig)), _mm256_set1_ps(scale));
    if (nj >= 8) {
        _mm256_storeu_ps(o, f);
        return;
    }
    float r[8];
    _mm256_storeu_ps(r, f);
    for (int k = 0; k < nj; k++) o[k] = r[k];
}

static inline __attribute__((always_inline)) void scores8_bits(const float *qr, size_t qs, int G, const uint8_t *k,
                                                               int nk, int D, const int bits, float scale, float *sc,
                                                               size_t scs) {
    const size_t rb = moe_tq_row_bytes(D, bits);
    int8_t ck[32] = {0};
    for (int c = 0; c < 1 << bits; c++) ck[c] = (int8_t)moe_tq_codebook_int(bits)[c];
    const __m256i tl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ck));
    const __m256i th = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(ck + 16)));
    int16_t qi[MOE_TQ_MAX_D];
    /* the chunk's rows (at a stride of D + 64: not 4 KiB apart) in QB8
     * bytes and the tile's centroids in QB8 too, or 8 keys' past head size
     * 2048 (score_row8 reads keys 8 at a time): the stack stays small at any
     * head size (fewer rows and keys per chunk past head size 1024) */
    _Alignas(32) uint8_t qa[QB8];
    _Alignas(32) int8_t qsg[QB8], cb[2 * QB8];
    const size_t qst = (size_t)D + 64;
    const int rc = QB8 / (int)qst < RC8 ? QB8 / (int)qst : RC8, kt = QB8 / D < KT8 ? QB8 / D : KT8;
    float S[RC8], sig[KT8] = {0};   /* sig: each key's scale, once for every row */
    for (int r0 = 0; r0 < G; r0 += rc) {
        const int nr = G - r0 < rc ? G - r0 : rc;
        for (int r = 0; r < nr; r++) {
            S[r] = query_q(qr + (size_t)(r0 + r) * qs, D, bits, qi);
            q8_order(qi, D, qa + (size_t)r * qst, qsg + (size_t)r * qst);
        }
        for (int j0 = 0; j0 < nk; j0 += kt) {
            const int nj = nk - j0 < kt ? nk - j0 : kt;
            for (int j = 0; j < nj; j++)
                for (int m = 0; m < D / 64; m++) {
                    __m256i lo, hi;
                    lut8_64(k + (size_t)(j0 + j) * rb, D, m, bits, tl, th, &lo, &hi);
                    _mm256_store_si256((__m256i *)(cb + (size_t)j * D + 64 * m), lo);
                    _mm256_store_si256((__m256i *)(cb + (size_t)j * D + 64 * m + 32), hi);
                }
            if (nj % 8) memset(cb + (size_t)nj * D, 0, (size_t)(8 - nj % 8) * (size_t)D);   /* lanes not stored */
            for (int j = 0; j < nj; j++) sig[j] = sigma(k + (size_t)(j0 + j) * rb, D, bits);
            for (int r = 0; r < nr; r++)
                for (int j = 0; j < nj; j += 8)
                    score_row8(cb + (size_t)j * D, nj - j, D, qa + (size_t)r * qst, qsg + (size_t)r * qst, S[r],
                               sig + j, scale, sc + (size_t)(r0 + r) * scs + (size_t)(j0 + j));
        }
    }
}

static void scores_tq_avx2(const float *qr, size_t qs, int G, const uint8_t *k, int nk, int D, int bits, float scale,
                           float *sc, size_t scs) {
    if (D >= 64 && bits == 5) {
        scores8_bits(qr, qs, G, k, nk, D, 5, scale, sc, scs);
        return;
    }
    if (D >= 64 && bits == 4) {
        scores8_bits(qr, qs, G, k, nk, D, 4, scale, sc, scs);
        return;
    }
    const size_t rb = moe_tq_row_bytes(D, bits);
    int32_t ck[32] = {0};
    for (int c = 0; c < 1 << bits; c++) ck[c] = moe_tq_codebook_int(bits)[c];
    __m256i t[4];
    for (int i = 0; i < 4; i++) t[i] = _mm256_loadu_si256((const __m256i *)(ck + 8 * i));
    int16_t qi[HQ * MOE_TQ_MAX_D];
    const __m128 vs = _mm_set1_ps(scale);
    for (int h0 = 0; h0 < G; h0 += HQ) {
        const int nh = G - h0 < HQ ? G - h0 : HQ;
        float S[4] = {0};
        for (int h = 0; h < nh; h++) S[h] = query_q(qr + (size_t)(h0 + h) * qs, D, bits, qi + (size_t)h * D);
        const __m128 Sv = _mm_loadu_ps(S);
        for (int j = 0; j < nk; j++) {
            const uint8_t *kj = k + (size_t)j * rb;
            __m256i acc[HQ];
            UNROLL for (int h = 0; h < HQ; h++) acc[h] = _mm256_setzero_si256();
            for (int g = 0; g < D / 32; g++) {
                __m256i ix[4], c[4];
                group_idx(kj, D, bits, g, ix);
                UNROLL for (int i = 0; i < 4; i++) c[i] = ilut(t, bits, ix[i]);
                for (int h = 0; h < nh; h++)
                    for (int i = 0; i < 4; i++) {
                        const __m256i q = _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(qi + (size_t)h * D + 32 * g + 8 * i)));
                        acc[h] = _mm256_add_epi32(acc[h], _mm256_mullo_epi32(q, c[i]));
                    }
            }
            const __m128i is = hsum4(acc[0], acc[1], acc[2], acc[3]);
            const __m128 f = _mm_mul_ps(_mm_mul_ps(_mm_mul_ps(_mm_cvtepi32_ps(is), Sv), _mm_set1_ps(sigma(kj, D, bits))), vs);
            float o[4];
            _mm_storeu_ps(o, f);
            for (int h = 0; h < nh; h++) sc[(size_t)(h0 + h) * scs + (size_t)j] = o[h];
        }
    }
}

/* moe_tq_encode at AVX2, the same bytes (as encode_avx512: marks wherever the
 * non-finite value is, sequential double sums, the reference's halving search
 * lane-wise with one step table per step, up to 16 entries: two permutes
 * blended on the index's bit 3). */
static inline __m256 step_lut(const __m256 *t, int n, __m256i k) {
    const __m256 a = _mm256_permutevar8x32_ps(t[0], k);
    if (n <= 8) return a;
    const __m256 b = _mm256_permutevar8x32_ps(t[1], k);
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(k, 28)));
}

/* 8 int32 lanes (each < 256) to 8 bytes, in order */
static inline __m128i bytes8(__m256i v) {
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0xD8);   /* v0..7 as int16, twice */
    return _mm_packus_epi16(_mm256_castsi256_si128(p), _mm256_castsi256_si128(p));
}

/* moe_tq_fwht at AVX2: every butterfly is one add or sub of the same two
 * operands as the reference's, so the same bits. h = 1, 2, 4 inside a
 * vector (the partner by a permute, the upper lanes take partner - self),
 * h >= 8 between vectors. */
static void fwht_avx2(float *t, int D) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int i = 0; i < D; i += 8) {
        __m256 x = _mm256_loadu_ps(t + i);
        __m256 y = _mm256_permutevar8x32_ps(x, _mm256_xor_si256(iota, _mm256_set1_epi32(1)));
        x = _mm256_blend_ps(_mm256_add_ps(x, y), _mm256_sub_ps(y, x), 0xAA);
        y = _mm256_permutevar8x32_ps(x, _mm256_xor_si256(iota, _mm256_set1_epi32(2)));
        x = _mm256_blend_ps(_mm256_add_ps(x, y), _mm256_sub_ps(y, x), 0xCC);
        y = _mm256_permutevar8x32_ps(x, _mm256_xor_si256(iota, _mm256_set1_epi32(4)));
        x = _mm256_blend_ps(_mm256_add_ps(x, y), _mm256_sub_ps(y, x), 0xF0);
        _mm256_storeu_ps(t + i, x);
    }
    for (int h = 8; h < D; h *= 2)
        for (int i = 0; i < D; i += 2 * h)
            for (int j = i; j < i + h; j += 8) {
                const __m256 a = _mm256_loadu_ps(t + j), b = _mm256_loadu_ps(t + j + h);
                _mm256_storeu_ps(t + j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(t + j + h, _mm256_sub_ps(a, b));
            }
}

/* The codes of row x (its norm n > 0, signs s, thresholds thr) packed into row, the int32
 * codes left in tmp (D floats). */
static inline __attribute__((always_inline)) void enc_codes(const float *x, const uint64_t *s, int D, int bits,
                                                            const float *thr, double n, float *tmp, uint8_t *row) {
    const __m256i bitv = _mm256_set_epi32(128, 64, 32, 16, 8, 4, 2, 1);
    const __m256 sgn = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    for (int d = 0; d < D; d += 8) {
        const __m256i m = _mm256_set1_epi32((int)((s[d >> 6] >> (d & 63)) & 0xffu));
        const __m256 neg = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(m, bitv), bitv));
        _mm256_storeu_ps(tmp + d, _mm256_xor_ps(_mm256_loadu_ps(x + d), _mm256_and_ps(neg, sgn)));
    }
    fwht_avx2(tmp, D);
    __m256 st[5][2];                                                /* step b: s = 2^(bits-1-b) */
    int nt[5];
    for (int b = 0; b < bits; b++) {
        const int sz = 1 << (bits - 1 - b);
        float t[16] = {0};
        nt[b] = (1 << bits) / (2 * sz);
        for (int k = 0; k < nt[b]; k++) t[k] = thr[2 * sz * k + sz - 1];
        st[b][0] = _mm256_loadu_ps(t);
        st[b][1] = _mm256_loadu_ps(t + 8);
    }
    const __m256 inv = _mm256_set1_ps((float)(1.0 / n));
    for (int g = 0; g < D / 32; g++) {
        __m256i c[4];
        for (int q = 0; q < 4; q++) {
            const __m256 u = _mm256_mul_ps(_mm256_loadu_ps(tmp + 32 * g + 8 * q), inv);
            __m256i lo = _mm256_setzero_si256();
            for (int b = 0; b < bits; b++) {
                const __m256 th = step_lut(st[b], nt[b], _mm256_srli_epi32(lo, bits - b));
                const __m256i gt = _mm256_castps_si256(_mm256_cmp_ps(u, th, _CMP_GT_OQ));
                lo = _mm256_add_epi32(lo, _mm256_and_si256(gt, _mm256_set1_epi32(1 << (bits - 1 - b))));
            }
            c[q] = lo;
            _mm256_storeu_si256((__m256i *)(void *)(tmp + 32 * g + 8 * q), lo);   /* int32 codes over read dims */
        }
        if (bits == 3) {
            const __m256i three = _mm256_set1_epi32(3);
            __m256i b = _mm256_and_si256(c[0], three);
            for (int q = 1; q < 4; q++) b = _mm256_or_si256(b, _mm256_slli_epi32(_mm256_and_si256(c[q], three), 2 * q));
            _mm_storel_epi64((__m128i *)(void *)(row + 8 * g), bytes8(b));
            uint32_t top = 0;
            for (int q = 0; q < 4; q++) top |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(c[q], 29))) << (8 * q);
            memcpy(row + D / 4 + 4 * g, &top, 4);
        } else {
            const __m256i f = _mm256_set1_epi32(15);
            const __m256i b0 = _mm256_or_si256(_mm256_and_si256(c[0], f), _mm256_slli_epi32(_mm256_and_si256(c[2], f), 4));
            const __m256i b1 = _mm256_or_si256(_mm256_and_si256(c[1], f), _mm256_slli_epi32(_mm256_and_si256(c[3], f), 4));
            _mm_storeu_si128((__m128i *)(void *)(row + 16 * g), _mm_unpacklo_epi64(bytes8(b0), bytes8(b1)));
            if (bits == 5) {
                uint32_t top = 0;
                for (int q = 0; q < 4; q++) top |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(c[q], 27))) << (8 * q);
                memcpy(row + D / 2 + 4 * g, &top, 4);
            }
        }
    }
}

static inline int32_t code_at(const float *tmp, int d) {
    int32_t c;
    memcpy(&c, tmp + d, sizeof c);
    return c;
}

static inline bool nonfinite(const float *x, int D) {
    const __m256 inf = _mm256_set1_ps(__builtin_inff());
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 bad = _mm256_setzero_ps();
    for (int d = 0; d < D; d += 8)
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + d), absm), inf, _CMP_NLT_UQ));
    return _mm256_movemask_ps(bad) != 0;
}

MOE_TQ_DEF_ENCODE2(avx2)

static void encode_avx2(const float *x, const uint64_t *s, int D, int bits, float *tmp, uint8_t *row) {
    encode2_avx2(x, NULL, s, D, bits, 0, tmp, row, NULL);
}

/* moe_tq_rotate / moe_tq_unrotate: sign flips as xors of the sign bit (as
 * -x), the products lane-wise, fwht_avx2: the same bits. */
static inline __m256 flips(const uint64_t *s, int d) {
    const __m256i bitv = _mm256_set_epi32(128, 64, 32, 16, 8, 4, 2, 1);
    const __m256i m = _mm256_set1_epi32((int)((s[d >> 6] >> (d & 63)) & 0xffu));
    return _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(m, bitv), bitv)),
                         _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)));
}

static void rotate_avx2(const float *x, const uint64_t *s, int D, float *y) {
    for (int d = 0; d < D; d += 8) _mm256_storeu_ps(y + d, _mm256_xor_ps(_mm256_loadu_ps(x + d), flips(s, d)));
    fwht_avx2(y, D);
    const __m256 isd = _mm256_set1_ps(moe_tq_isd(D));
    for (int d = 0; d < D; d += 8) _mm256_storeu_ps(y + d, _mm256_mul_ps(_mm256_loadu_ps(y + d), isd));
}

static void unrotate_avx2(float *y, const uint64_t *s, int D) {
    fwht_avx2(y, D);
    const __m256 isd = _mm256_set1_ps(moe_tq_isd(D));
    for (int d = 0; d < D; d += 8)
        _mm256_storeu_ps(y + d, _mm256_xor_ps(_mm256_mul_ps(_mm256_loadu_ps(y + d), isd), flips(s, d)));
}

/* accum_tq_rows at AVX2: the float centroids of a block of WK2 keys and one
 * group of 32 dims are looked up once (permutes and blends per 8: the AVX2
 * value sum's larger cost) into cbuf and serve every row of the call (a
 * prefill block's tokens' heads). Each row's weights w = p * sigma of the
 * block are one vector product per 8 keys (the reference's float product),
 * made once per block for a chunk of RW rows; then two rows with the same
 * key count at a time take a key's four centroid vectors from registers (8
 * accumulators, parked in out between blocks), so each o[d] still takes its
 * fmaf in key order. */
#define WK2 64   /* keys per block of staged centroids */
#define RW 32    /* rows per chunk of staged weights */

/* rows r .. r + NR - 1 (NR = 1, 2) over the block's first ke keys, group g */
static inline __attribute__((always_inline)) void accum_rows_group(const float (*w)[WK2], const __m256 (*cbuf)[4], int ke,
                                                                   bool first, float *out, size_t os, int g, const int NR) {
    __m256 acc[2][4];
    UNROLL for (int h = 0; h < NR; h++)
        UNROLL for (int i = 0; i < 4; i++)
            acc[h][i] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(out + (size_t)h * os + 32 * g + 8 * i);
    for (int jj = 0; jj < ke; jj++) {
        __m256 c[4];
        UNROLL for (int i = 0; i < 4; i++) {
            c[i] = cbuf[jj][i];
            if (NR == 2) __asm__("" : "+x"(c[i]));   /* one load for both rows, not a memory operand each */
        }
        UNROLL for (int h = 0; h < NR; h++) {
            const __m256 wv = _mm256_broadcast_ss(&w[h][jj]);
            UNROLL for (int i = 0; i < 4; i++) acc[h][i] = _mm256_fmadd_ps(wv, c[i], acc[h][i]);
        }
    }
    UNROLL for (int h = 0; h < NR; h++)
        UNROLL for (int i = 0; i < 4; i++) _mm256_storeu_ps(out + (size_t)h * os + 32 * g + 8 * i, acc[h][i]);
}

/* cbuf[jj] = the centroids of group g of the nb rows from v (rb bytes
 * apart), at a constant code width */
static inline __attribute__((always_inline)) void stage_group(const uint8_t *v, size_t rb, int nb, int Dv,
                                                              const tq_tab *t, int g, __m256 (*cbuf)[4], const int bits) {
    tq_tab tc = *t;
    tc.bits = bits;                          /* a constant: lut's width tests fold away */
    for (int jj = 0; jj < nb; jj++) {
        __m256i ix[4];
        group_idx(v + (size_t)jj * rb, Dv, bits, g, ix);
        UNROLL for (int i = 0; i < 4; i++) cbuf[jj][i] = lut(&tc, ix[i]);
    }
}

static void accum_tq_rows_avx2(const float *p, size_t ps, int R, const int *nkr, const uint8_t *v, int Dv, int bits,
                               float *out, size_t os) {
    const tq_tab t = tab_for(bits);
    const size_t rb = moe_tq_row_bytes(Dv, bits);
    int mx = 0;
    for (int r = 0; r < R; r++) mx = nkr[r] > mx ? nkr[r] : mx;
    _Alignas(32) float sg[WK2];
    _Alignas(32) float w[RW][WK2];
    __m256 cbuf[WK2][4];
    for (int j0 = 0; j0 < mx; j0 += WK2) {
        const int nb = mx - j0 < WK2 ? mx - j0 : WK2;
        for (int jj = 0; jj < nb; jj++) sg[jj] = sigma(v + (size_t)(j0 + jj) * rb, Dv, bits);
        for (int r0 = 0; r0 < R; r0 += RW) {
            const int nr = R - r0 < RW ? R - r0 : RW;
            for (int r = 0; r < nr; r++) {
                const int ke = (nkr[r0 + r] < j0 + nb ? nkr[r0 + r] : j0 + nb) - j0;
                const float *pr = p + (size_t)(r0 + r) * ps + (size_t)j0;
                int jj = 0;
                for (; jj + 8 <= ke; jj += 8)
                    _mm256_store_ps(&w[r][jj], _mm256_mul_ps(_mm256_loadu_ps(pr + jj), _mm256_load_ps(sg + jj)));
                for (; jj < ke; jj++) w[r][jj] = pr[jj] * sg[jj];
            }
            for (int g = 0; g < Dv / 32; g++) {
                switch (bits) {      /* a constant code width: lookups without branches */
                case 3: stage_group(v + (size_t)j0 * rb, rb, nb, Dv, &t, g, cbuf, 3); break;
                case 4: stage_group(v + (size_t)j0 * rb, rb, nb, Dv, &t, g, cbuf, 4); break;
                default: stage_group(v + (size_t)j0 * rb, rb, nb, Dv, &t, g, cbuf, 5); break;
                }
                for (int r = 0, n2; r < nr; r += n2) {
                    n2 = r + 2 <= nr && nkr[r0 + r + 1] == nkr[r0 + r] ? 2 : 1;
                    const int ke = (nkr[r0 + r] < j0 + nb ? nkr[r0 + r] : j0 + nb) - j0;   /* this block's keys */
                    if (ke <= 0) continue;
                    float *o = out + (size_t)(r0 + r) * os;
                    if (n2 == 2) accum_rows_group(w + r, cbuf, ke, j0 == 0, o, os, g, 2);
                    else accum_rows_group(w + r, cbuf, ke, j0 == 0, o, os, g, 1);
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        if (nkr[r] == 0) memset(out + (size_t)r * os, 0, sizeof(float) * (size_t)Dv);
}

/* accum_tq at AVX2: accum_tq_rows with every row over all nk keys (its
 * bits are accum_tq's per row), in chunks of RW rows. */
static void accum_tq_avx2(const float *p, size_t ps, int G, const uint8_t *v, int nk, int Dv, int bits, float *out,
                          size_t os) {
    int nkr[RW];
    for (int i = 0; i < RW; i++) nkr[i] = nk;
    for (int h0 = 0; h0 < G; h0 += RW)
        accum_tq_rows_avx2(p + (size_t)h0 * ps, ps, G - h0 < RW ? G - h0 : RW, nkr, v, Dv, bits, out + (size_t)h0 * os, os);
}

const moe_tq_kernels moe_tq_avx2 = {scores_tq_avx2, accum_tq_avx2, accum_tq_rows_avx2, fwht_avx2,
                                    encode_avx2,    encode2_avx2,  rotate_avx2,        unrotate_avx2};
