/* attn_tq_avx512.c — the kv_tq kernels (kv_tq.h) at AVX-512. Value sum: a
 * group of 32 codes unpacks into two vectors of 16 lanes (dims 32g + l and
 * 32g + 16 + l), the float centroids come from one in-register permute
 * (permutexvar: 8 or 16 entries; permutex2var: 32), and every fmadd is the
 * scalar reference's fmaf in its order, so the results are the same bits.
 * Scores: integer (below), exact in any order: 4 and 5 bits (the keys of
 * every flag) in tiles of 16 keys with int8 vpdpbusd, 3 bits in int16. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "attention/kv_tq.h"
#include "base/util.h"

#define UNROLL _Pragma("GCC unroll 16")

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

/* ---- scores_tq at 3 bits (no flag stores 3-bit keys; the kernel table
 * takes every width): 16-bit lanes ----
 * A key's codes unpack, a unit of 128 dims (four groups) at a time, into
 * vectors of 32 16-bit codes in the order the packing gives them; vpermw
 * looks up the integer centroids and vpdpwssd multiplies them with the
 * query's integers, which were put into that same order once per call
 * (qperm). The sum is exact, so the lane order and the reduction tree
 * change nothing. 4 and 5 bits: scores_tiles, below. */
#define HQ 4   /* heads per pass: one reduction sums four */

static inline int unit_dims(int bits) { (void)bits; return 128; }

/* The dim of word w of vector v of a unit (the unpack order below). */
static inline int word_dim(int v, int w) { return 32 * (w / 8) + 8 * v + w % 8; }

/* qi (D values) in unpack order into qp: per unit, U/32 vectors of 32
 * words; dims past D (a unit longer than D) are 0. */
static void qperm(const int16_t *qi, int D, int bits, int16_t *qp) {
    const int U = unit_dims(bits), B = 8;                            /* word_dim keeps runs of B dims */
    for (int u0 = 0; u0 < D; u0 += U)
        for (int v = 0; v < U / 32; v++)
            for (int w = 0; w < 32; w += B) {
                const int d = u0 + word_dim(v, w);
                if (d < D) memcpy(qp + u0 + 32 * v + w, qi + d, sizeof(int16_t) * (size_t)B);
                else memset(qp + u0 + 32 * v + w, 0, sizeof(int16_t) * (size_t)B);
            }
}

/* The top-bit word of group g, 0 past the row's groups. */
static inline uint32_t topw(const uint8_t *plane, int g, int ng) { return g < ng ? ld32(plane + 4 * (size_t)g) : 0; }

/* The 16-bit codes of unit u of a 3-bit row (four vectors into c). */
static inline __attribute__((always_inline)) void unit_codes(const uint8_t *row, int D, int u, const int bits,
                                                             __m512i *c) {
    (void)bits;
    const int ng = D / 32, nb = D / 4 - 32 * u < 32 ? D / 4 - 32 * u : 32;
    const __m512i x = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8((__mmask32)(0xffffffffu >> (32 - nb)), row + 32 * u));
    const uint8_t *plane = row + D / 4;
    uint32_t t[4];
    for (int k = 0; k < 4; k++) t[k] = topw(plane, 4 * u + k, ng);
    UNROLL for (int s = 0; s < 4; s++) {
        uint32_t m = 0;
        for (int k = 0; k < 4; k++) m |= ((t[k] >> (8 * s)) & 0xffu) << (8 * k);
        const __m512i i = _mm512_and_si512(_mm512_srli_epi16(x, (unsigned)(2 * s)), _mm512_set1_epi16(3));
        c[s] = _mm512_mask_add_epi16(i, (__mmask32)m, i, _mm512_set1_epi16(4));
    }
}

/* The sums of a, b, c, d (int32 lanes) in lanes 0..3: exact, any order. */
static inline __m128i hsum4(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    const __m512i x = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
    const __m256i y = _mm256_add_epi32(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
}

/* The int32 sums of HN (<= 4) heads for NK (1 or 2) keys from kj (row
 * stride rb) into isb[0..NK-1][0..3]: both keys' codes meet each query
 * vector once. */
static inline __attribute__((always_inline)) void key_sums(const int16_t *qp, int ql, const uint8_t *kj, size_t rb,
                                                           int D, const int bits, const __m512i tab, int32_t *isb,
                                                           const int HN, const int NK) {
    const int U = unit_dims(bits), NV = U / 32, nu = (D + U - 1) / U;
    __m512i acc[2][HQ];
    UNROLL for (int n = 0; n < 2; n++) UNROLL for (int h = 0; h < HQ; h++) acc[n][h] = _mm512_setzero_si512();
    for (int u = 0; u < nu; u++) {
        __m512i c[2][4];
        UNROLL for (int n = 0; n < NK; n++) unit_codes(kj + (size_t)n * rb, D, u, bits, c[n]);
        UNROLL for (int v = 0; v < NV; v++) {
            __m512i cv[2];
            UNROLL for (int n = 0; n < NK; n++) cv[n] = _mm512_permutexvar_epi16(c[n][v], tab);
            UNROLL for (int h = 0; h < HN; h++) {
                const __m512i q = _mm512_loadu_si512(qp + (size_t)h * ql + U * u + 32 * v);
                UNROLL for (int n = 0; n < NK; n++) acc[n][h] = _mm512_dpwssd_epi32(acc[n][h], q, cv[n]);
            }
        }
    }
    UNROLL for (int n = 0; n < NK; n++)
        _mm_storeu_si128((__m128i *)(isb + 4 * n), hsum4(acc[n][0], acc[n][1], acc[n][2], acc[n][3]));
}

/* HN (<= 4) heads h0.. against every key, 16 keys a tile: the int32 sums
 * land in isb [key][head], then per head one vector of 16 keys takes the
 * contract's three products (in its order) and one masked store. qp: the
 * heads' permuted queries (stride ql words), S their S (kv_tq.h). */
static inline __attribute__((always_inline)) void scores_heads(const int16_t *qp, int ql, int h0, const float *S,
                                                               const uint8_t *k, int nk, int D, const int bits,
                                                               const __m512i tab, float scale, float *sc, size_t scs,
                                                               const int HN) {
    const size_t rb = moe_tq_row_bytes(D, bits);
    const __m512 vs = _mm512_set1_ps(scale);
    for (int j0 = 0; j0 < nk; j0 += 16) {
        const int nb = nk - j0 < 16 ? nk - j0 : 16;
        _Alignas(64) int32_t isb[16 * 4] = {0};
        _Alignas(64) float sg[16] = {0};
        int jj = 0;
        for (; jj + 2 <= nb; jj += 2)
            key_sums(qp, ql, k + (size_t)(j0 + jj) * rb, rb, D, bits, tab, isb + 4 * jj, HN, 2);
        if (jj < nb) key_sums(qp, ql, k + (size_t)(j0 + jj) * rb, rb, D, bits, tab, isb + 4 * jj, HN, 1);
        for (jj = 0; jj < nb; jj++) sg[jj] = sigma(k + (size_t)(j0 + jj) * rb, D, bits);
        const __m512 sgv = _mm512_load_ps(sg);
        const __m512i x0 = _mm512_load_si512(isb), x1 = _mm512_load_si512(isb + 16);
        const __m512i x2 = _mm512_load_si512(isb + 32), x3 = _mm512_load_si512(isb + 48);
        const __mmask16 m = (__mmask16)((1u << nb) - 1u);
        UNROLL for (int h = 0; h < HN; h++) {
            /* lanes 0..7: isb[4k + h] of x0:x1, lanes 8..15: of x2:x3 */
            const __m512i idx = _mm512_add_epi32(
                _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28), _mm512_set1_epi32(h));
            const __m512i col = _mm512_mask_blend_epi32((__mmask16)0xff00, _mm512_permutex2var_epi32(x0, idx, x1),
                                                        _mm512_permutex2var_epi32(x2, idx, x3));
            const __m512 f = _mm512_mul_ps(
                _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(col), _mm512_set1_ps(S[h])), sgv), vs);
            _mm512_mask_storeu_ps(sc + (size_t)(h0 + h) * scs + (size_t)j0, m, f);
        }
    }
}

/* moe_tq_query_q at AVX-512, the same integers: amax is an exact max (a NaN,
 * an Inf or a zero row goes to the scalar function, which owns those
 * cases), the products are the same doubles, and cvtpd_epi64 rounds in the
 * current mode as lrint does; the clamp to +-Q as there. */
static float query_q(const float *qr, int D, int bits, int16_t *qi) {
    __m512 mx = _mm512_setzero_ps();
    __mmask16 nan = 0;
    for (int d = 0; d < D; d += 16) {
        const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(qr + d));
        nan |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
        mx = _mm512_max_ps(mx, a);
    }
    const float amax = _mm512_reduce_max_ps(mx);
    if (nan || amax == 0.0f || amax > 3.4028235e38f) return moe_tq_query_q(qr, D, bits, qi);
    const int Q = moe_tq_qmax(D);
    const __m512d inv = _mm512_set1_pd((double)Q / (double)amax);
    const __m512i hi = _mm512_set1_epi64(Q), lo = _mm512_set1_epi64(-Q);
    for (int d = 0; d < D; d += 8) {
        const __m512d x = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(qr + d)), inv);
        const __m512i v = _mm512_min_epi64(_mm512_max_epi64(_mm512_cvtpd_epi64(x), lo), hi);
        _mm_storeu_si128((__m128i *)(void *)(qi + d), _mm512_cvtepi64_epi16(v));
    }
    return (amax / (float)Q) * moe_tq_cscale(bits);
}

/* ---- scores_tq at 4 and 5 bits: keys in lanes ----
 * The integer centroids fit in int8 (kv_tq.h), so vpdpbusd multiplies 64
 * of them a instruction, and a tile of 16 keys puts one key in each int32
 * lane: no per-key reduction. Per unit of 128 dims (the 64 bytes of nibbles
 * of four groups), each key's codes are looked up (vpshufb, the 5th bit by
 * a mask blend) into two vectors of biased centroids ck + 128 (u8): "lo"
 * (byte 16g + i: dim 32g + i) and "hi" (dim 32g + 16 + i); two 16 x 16
 * transposes of dwords give, for each dword w, the 16 keys' four bytes, and
 * each query row adds vpdpbusd(tile[w], its four int8 values broadcast).
 * The bias is taken off once per row: sum_d qi[d] * 128. Exact in int32,
 * so the same sums as the reference in any order. */
#define KT 16    /* keys per tile */
#define RC 16    /* query rows per chunk (fewer past head size 960: QB) */
#define QB 16384 /* bytes of the chunk's int8 query rows */

/* r[0..15] (16 dwords each) -> c[w] lane k = r[k] dword w. */
static inline __attribute__((always_inline)) void transpose16(const __m512i *r, __m512i *c) {
    __m512i t[16], u[16];
    UNROLL for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    UNROLL for (int i = 0; i < 4; i++) {            /* u[4i + m], 128-bit lane L: keys 4i..4i+3, dword 4L + m */
        u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    UNROLL for (int m = 0; m < 4; m++) {            /* the 4 x 4 transpose of 128-bit lanes */
        const __m512i v0 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0x44), v1 = _mm512_shuffle_i32x4(u[m], u[4 + m], 0xEE);
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0x44);
        const __m512i v3 = _mm512_shuffle_i32x4(u[8 + m], u[12 + m], 0xEE);
        c[m] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        c[4 + m] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        c[8 + m] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        c[12 + m] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
}

/* The biased centroids of unit u of key row kj: lo and hi (above). nb: the
 * unit's nibble bytes (64, or D/2 for D < 128). */
static inline __attribute__((always_inline)) void unit_lut8(const uint8_t *kj, int D, int u, int nb, const int bits,
                                                            __m512i tl, __m512i th, __m512i *lo, __m512i *hi) {
    const __m512i x = _mm512_maskz_loadu_epi8(nb == 64 ? ~0ull : (1ull << nb) - 1, kj + 64 * (size_t)u);
    const __m512i f = _mm512_set1_epi8(15);
    const __m512i cl = _mm512_and_si512(x, f), ch = _mm512_and_si512(_mm512_srli_epi16(x, 4), f);
    if (bits == 4) {
        *lo = _mm512_shuffle_epi8(tl, cl);
        *hi = _mm512_shuffle_epi8(tl, ch);
        return;
    }
    uint64_t w[2] = {0, 0};                         /* the unit's top-bit words: group g's bit i = dim 32g + i */
    if (nb == 64) memcpy(w, kj + D / 2 + 16 * (size_t)u, 16);
    else memcpy(w, kj + D / 2, (size_t)(nb / 4));
    const uint64_t ML = 0x0000ffff0000ffffull, MH = 0xffff0000ffff0000ull;
    const __mmask64 ml = _pext_u64(w[0], ML) | _pext_u64(w[1], ML) << 32;
    const __mmask64 mh = _pext_u64(w[0], MH) | _pext_u64(w[1], MH) << 32;
    *lo = _mm512_mask_shuffle_epi8(_mm512_shuffle_epi8(tl, cl), ml, th, cl);
    *hi = _mm512_mask_shuffle_epi8(_mm512_shuffle_epi8(tl, ch), mh, th, ch);
}

/* Query row qi (D int16 values, |qi| <= 127) as int8 in the tile's order:
 * per unit, 64 bytes lo then 64 bytes hi (dims past D: 0); returns the
 * row's sum. */
static int32_t qbytes(const int16_t *qi, int D, int8_t *qb) {
    int32_t sum = 0;
    for (int u = 0; u < (D + 127) / 128; u++)
        for (int p = 0; p < 64; p++) {
            const int dl = 128 * u + 32 * (p / 16) + p % 16, dh = dl + 16;
            qb[128 * u + p] = (int8_t)(dl < D ? qi[dl] : 0);
            qb[128 * u + 64 + p] = (int8_t)(dh < D ? qi[dh] : 0);
            sum += (dl < D ? qi[dl] : 0) + (dh < D ? qi[dh] : 0);
        }
    return sum;
}

static inline __attribute__((always_inline)) void scores_tiles(const float *qr, size_t qs, int G, const uint8_t *k,
                                                               int nk, int D, const int bits, float scale, float *sc,
                                                               size_t scs) {
    const size_t rb = moe_tq_row_bytes(D, bits);
    const int nu = (D + 127) / 128, nb = D < 128 ? D / 2 : 64, nw = nb / 4;
    uint8_t cu[32] = {0};                          /* the biased centroids ck + 128 */
    for (int c = 0; c < 1 << bits; c++) cu[c] = (uint8_t)(moe_tq_codebook_int(bits)[c] + 128);
    const __m512i tl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)cu));
    const __m512i th = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(cu + 16)));
    const __m512 vs = _mm512_set1_ps(scale);
    int16_t qi[MOE_TQ_MAX_D];
    /* rows at a stride of their length + 64 (16 rows 4 KiB apart would share
     * L1 sets), as many as QB bytes hold: the stack stays small at any head
     * size */
    _Alignas(64) int8_t qbuf[QB];
    const size_t qst = (size_t)(D < 128 ? 128 : D) + 64;
    const int rc = QB / (int)qst < RC ? QB / (int)qst : RC;
    _Alignas(64) __m512i tile[32], lut[2 * KT], acc[RC];
    float S[RC];
    int32_t qsum[RC];
    for (int r0 = 0; r0 < G; r0 += rc) {
        const int nr = G - r0 < rc ? G - r0 : rc;
        for (int r = 0; r < nr; r++) {
            S[r] = query_q(qr + (size_t)(r0 + r) * qs, D, bits, qi);
            qsum[r] = qbytes(qi, D, qbuf + (size_t)r * qst) * 128;
        }
        for (int j0 = 0; j0 < nk; j0 += KT) {
            const int nj = nk - j0 < KT ? nk - j0 : KT;
            for (int r = 0; r < nr; r++) acc[r] = _mm512_set1_epi32(-qsum[r]);
            for (int u = 0; u < nu; u++) {
                const uint8_t *kj = k + (size_t)j0 * rb;   /* through memory: 32 vectors would spill */
                if (nj == KT && nb == 64)
                    for (int j = 0; j < KT; j++) unit_lut8(kj + (size_t)j * rb, D, u, 64, bits, tl, th, &lut[j], &lut[KT + j]);
                else
                    for (int j = 0; j < KT; j++) {
                        if (j < nj) unit_lut8(kj + (size_t)j * rb, D, u, nb, bits, tl, th, &lut[j], &lut[KT + j]);
                        else lut[j] = lut[KT + j] = _mm512_setzero_si512();
                    }
                transpose16(lut, tile);
                transpose16(lut + KT, tile + 16);
                int r = 0;
                for (; r + 4 <= nr; r += 4) {           /* 8 chains: vpdpbusd's latency hidden */
                    __m512i a[2][4];
                    UNROLL for (int i = 0; i < 4; i++) {
                        a[0][i] = acc[r + i];
                        a[1][i] = _mm512_setzero_si512();
                    }
                    for (int w = 0; w < nw; w++)
                        UNROLL for (int half = 0; half < 2; half++) {
                            const __m512i t = tile[16 * half + w];
                            const int o = 128 * u + 64 * half + 4 * w;
                            UNROLL for (int i = 0; i < 4; i++) {
                                int32_t b;
                                memcpy(&b, qbuf + (size_t)(r + i) * qst + o, 4);
                                a[half][i] = _mm512_dpbusd_epi32(a[half][i], t, _mm512_set1_epi32(b));
                            }
                        }
                    UNROLL for (int i = 0; i < 4; i++) acc[r + i] = _mm512_add_epi32(a[0][i], a[1][i]);
                }
                for (; r < nr; r++) {
                    __m512i a = acc[r];
                    for (int w = 0; w < nw; w++)
                        UNROLL for (int half = 0; half < 2; half++) {
                            int32_t b;
                            memcpy(&b, qbuf + (size_t)r * qst + 128 * u + 64 * half + 4 * w, 4);
                            a = _mm512_dpbusd_epi32(a, tile[16 * half + w], _mm512_set1_epi32(b));
                        }
                    acc[r] = a;
                }
            }
            _Alignas(64) float sg[KT] = {0};
            for (int j = 0; j < nj; j++) sg[j] = sigma(k + (size_t)(j0 + j) * rb, D, bits);
            const __m512 sgv = _mm512_load_ps(sg);
            const __mmask16 m = (__mmask16)((1u << nj) - 1u);
            for (int r = 0; r < nr; r++) {
                const __m512 f = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc[r]), _mm512_set1_ps(S[r])), sgv), vs);
                _mm512_mask_storeu_ps(sc + (size_t)(r0 + r) * scs + (size_t)j0, m, f);
            }
        }
    }
}

static inline __attribute__((always_inline)) void scores_bits(const float *qr, size_t qs, int G, const uint8_t *k,
                                                              int nk, int D, const int bits, float scale, float *sc,
                                                              size_t scs) {
    const int U = unit_dims(bits), ql = (D + U - 1) / U * U;
    int16_t qi[MOE_TQ_MAX_D];
    _Alignas(64) int16_t qp[HQ * MOE_TQ_MAX_D];
    int16_t ck[32] = {0};
    memcpy(ck, moe_tq_codebook_int(bits), sizeof(int16_t) * (size_t)(1 << bits));
    const __m512i tab = _mm512_loadu_si512(ck);
    for (int h0 = 0; h0 < G; h0 += HQ) {
        const int nh = G - h0 < HQ ? G - h0 : HQ;
        float S[4] = {0};
        for (int h = 0; h < nh; h++) {
            S[h] = query_q(qr + (size_t)(h0 + h) * qs, D, bits, qi);
            qperm(qi, D, bits, qp + (size_t)h * ql);
        }
        if (nh == 4) scores_heads(qp, ql, h0, S, k, nk, D, bits, tab, scale, sc, scs, 4);
        else if (nh == 3) scores_heads(qp, ql, h0, S, k, nk, D, bits, tab, scale, sc, scs, 3);
        else if (nh == 2) scores_heads(qp, ql, h0, S, k, nk, D, bits, tab, scale, sc, scs, 2);
        else scores_heads(qp, ql, h0, S, k, nk, D, bits, tab, scale, sc, scs, 1);
    }
}

static void scores_tq_avx512(const float *qr, size_t qs, int G, const uint8_t *k, int nk, int D, int bits, float scale,
                             float *sc, size_t scs) {
    if (bits == 3) scores_bits(qr, qs, G, k, nk, D, 3, scale, sc, scs);
    else if (bits == 4) scores_tiles(qr, qs, G, k, nk, D, 4, scale, sc, scs);
    else scores_tiles(qr, qs, G, k, nk, D, 5, scale, sc, scs);
}

#define DB 4   /* groups of 32 dims per pass: 8 accumulators */

#define WK 64   /* keys per block of staged weights */

/* Four heads h0 .. h0+3 at once: each value row's codes are unpacked once
 * per pass for the four (16 accumulators: 4 heads x 2 groups x 2 halves).
 * The weights p * sigma of a block of WK keys are computed once into wb
 * (the same product the contract names) and serve every pass; a pass's
 * accumulators park in out between blocks, so each o[d] still takes its
 * fmaf in key order. */
static inline __attribute__((always_inline)) void accum4_avx512(const float *p, size_t ps, int h0, const uint8_t *v,
                                                                int nk, int Dv, const tq_tab *t0, size_t rb, float *out,
                                                                size_t os, const int bits) {
    const tq_tab tt = {t0->lo, t0->hi, bits}, *t = &tt;   /* bits a constant: group() has no branches */
    float wb[4][WK];
    for (int j0 = 0; j0 < nk; j0 += WK) {
        const int nb = nk - j0 < WK ? nk - j0 : WK;
        for (int jj = 0; jj < nb; jj++) {
            const float sig = sigma(v + (size_t)(j0 + jj) * rb, Dv, t->bits);
            UNROLL for (int h = 0; h < 4; h++) wb[h][jj] = p[(size_t)(h0 + h) * ps + (size_t)(j0 + jj)] * sig;
        }
        for (int g0 = 0; g0 < Dv / 32; g0 += 2) {     /* Dv >= 64, a power of two: whole pairs */
            __m512 acc[4][4];
            UNROLL for (int h = 0; h < 4; h++)
                UNROLL for (int i = 0; i < 4; i++)
                    acc[h][i] = j0 ? _mm512_loadu_ps(out + (size_t)(h0 + h) * os + 32 * g0 + 16 * i) : _mm512_setzero_ps();
            for (int jj = 0; jj < nb; jj++) {
                const uint8_t *vj = v + (size_t)(j0 + jj) * rb;
                __m512 c[4];
                group(vj, Dv, t, g0, &c[0], &c[1]);
                group(vj, Dv, t, g0 + 1, &c[2], &c[3]);
                UNROLL for (int h = 0; h < 4; h++) {
                    const __m512 w = _mm512_set1_ps(wb[h][jj]);
                    UNROLL for (int i = 0; i < 4; i++) acc[h][i] = _mm512_fmadd_ps(w, c[i], acc[h][i]);
                }
            }
            UNROLL for (int h = 0; h < 4; h++)
                UNROLL for (int i = 0; i < 4; i++) _mm512_storeu_ps(out + (size_t)(h0 + h) * os + 32 * g0 + 16 * i, acc[h][i]);
        }
    }
    if (nk == 0)
        UNROLL for (int h = 0; h < 4; h++) memset(out + (size_t)(h0 + h) * os, 0, sizeof(float) * (size_t)Dv);
}

static void accum_tq_avx512(const float *p, size_t ps, int G, const uint8_t *v, int nk, int Dv, int bits, float *out,
                            size_t os) {
    const tq_tab t = tab_for(bits);
    const size_t rb = moe_tq_row_bytes(Dv, bits);
    int h0 = 0;
    for (; h0 + 4 <= G && Dv >= 64; h0 += 4) {
        if (bits == 3) accum4_avx512(p, ps, h0, v, nk, Dv, &t, rb, out, os, 3);
        else if (bits == 4) accum4_avx512(p, ps, h0, v, nk, Dv, &t, rb, out, os, 4);
        else accum4_avx512(p, ps, h0, v, nk, Dv, &t, rb, out, os, 5);
    }
    for (int h = h0; h < G; h++) {
        float *o = out + (size_t)h * os;
        const float *ph = p + (size_t)h * ps;
        for (int g0 = 0; g0 < Dv / 32; g0 += DB) {
            const int ng = Dv / 32 - g0 < DB ? Dv / 32 - g0 : DB;
            __m512 acc[2 * DB];
            UNROLL for (int i = 0; i < 2 * DB; i++) acc[i] = _mm512_setzero_ps();
            for (int j = 0; j < nk; j++) {
                const uint8_t *vj = v + (size_t)j * rb;
                const __m512 w = _mm512_set1_ps(ph[j] * sigma(vj, Dv, bits));
                UNROLL for (int i = 0; i < ng; i++) {
                    __m512 c0, c1;
                    group(vj, Dv, &t, g0 + i, &c0, &c1);
                    acc[2 * i] = _mm512_fmadd_ps(w, c0, acc[2 * i]);
                    acc[2 * i + 1] = _mm512_fmadd_ps(w, c1, acc[2 * i + 1]);
                }
            }
            UNROLL for (int i = 0; i < ng; i++) {
                _mm512_storeu_ps(o + 32 * (g0 + i), acc[2 * i]);
                _mm512_storeu_ps(o + 32 * (g0 + i) + 16, acc[2 * i + 1]);
            }
        }
    }
}

/* accum_tq_rows at AVX-512: accum_tq per run of rows with one key count.
 * (Sharing the value codes' unpacking across a block's rows, as AVX2 does,
 * measured no faster here: the fmadds, which the contract fixes, set the
 * pace.) */
static void accum_tq_rows_avx512(const float *p, size_t ps, int R, const int *nkr, const uint8_t *v, int Dv, int bits,
                                 float *out, size_t os) {
    moe_tq_accum_runs(&moe_tq_avx512, p, ps, R, nkr, v, Dv, bits, out, os);
}

/* moe_tq_fwht at AVX-512 (D a multiple of 32): stages h = 1, 2, 4, 8 inside
 * each 16-lane vector, lane l paired with lane l ^ h by a permute: a lane
 * with bit h clear takes a + b (itself + partner), one with it set a - b
 * (partner - itself), the scalar butterfly's operands; the larger stages
 * between vectors. A vector runs its four small stages before the next one
 * (they mix only its own lanes): the same bits as moe_tq_fwht. */
static void fwht_avx512(float *t, int D) {
    const __m512i iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    static const __mmask16 upper[4] = {0xAAAA, 0xCCCC, 0xF0F0, 0xFF00};
    for (int i = 0; i < D; i += 16) {
        __m512 x = _mm512_loadu_ps(t + i);
        for (int s = 0; s < 4; s++) {
            const __m512 y = _mm512_permutexvar_ps(_mm512_xor_si512(iota, _mm512_set1_epi32(1 << s)), x);
            x = _mm512_mask_sub_ps(_mm512_add_ps(x, y), upper[s], y, x);
        }
        _mm512_storeu_ps(t + i, x);
    }
    for (int h = 16; h < D; h *= 2)
        for (int i = 0; i < D; i += 2 * h)
            for (int j = i; j < i + h; j += 16) {
                const __m512 a = _mm512_loadu_ps(t + j), b = _mm512_loadu_ps(t + j + h);
                _mm512_storeu_ps(t + j, _mm512_add_ps(a, b));
                _mm512_storeu_ps(t + j + h, _mm512_sub_ps(a, b));
            }
}

/* moe_tq_encode at AVX-512, the same bytes. A non-finite coordinate marks the
 * row wherever it is (the reference stops at the first, with the same
 * result); the norm's and the reconstruction's double sums run in dim order
 * as the reference's (each product is exact in double, only the sums round);
 * the centroid search is the reference's halving search, lane-wise: step s
 * compares u with threshold lo + s - 1, which for lo a multiple of 2s is
 * entry lo / 2s of that step's table (at most 16 entries: one permute); NaN
 * compares false, as in the reference. The two sums are chains of dependent
 * double adds, the encode's critical path: encode2 runs two rows' chains in
 * one loop, so they overlap (each row's own sums keep their order). */

/* The codes of row x (its norm n > 0, signs s, thresholds thr) packed into row, the int32
 * codes left in tmp (D floats). */
static inline __attribute__((always_inline)) void enc_codes(const float *x, const uint64_t *s, int D, int bits,
                                                            const float *thr, double n, float *tmp, uint8_t *row) {
    const __m512i sgn = _mm512_set1_epi32((int)0x80000000u);
    for (int d = 0; d < D; d += 16) {
        const __mmask16 m = (__mmask16)(s[d >> 6] >> (d & 63));
        const __m512i v = _mm512_castps_si512(_mm512_loadu_ps(x + d));
        _mm512_storeu_ps(tmp + d, _mm512_castsi512_ps(_mm512_mask_xor_epi32(v, m, v, sgn)));
    }
    fwht_avx512(tmp, D);
    __m512 st[5];                                                   /* step b: s = 2^(bits-1-b) */
    for (int b = 0; b < bits; b++) {
        const int sz = 1 << (bits - 1 - b);
        float t[16] = {0};
        for (int k = 0; k < (1 << bits) / (2 * sz); k++) t[k] = thr[2 * sz * k + sz - 1];
        st[b] = _mm512_loadu_ps(t);
    }
    const __m512 inv = _mm512_set1_ps((float)(1.0 / n));
    for (int g = 0; g < D / 32; g++) {
        __m512i c[2];
        for (int hf = 0; hf < 2; hf++) {
            const __m512 u = _mm512_mul_ps(_mm512_loadu_ps(tmp + 32 * g + 16 * hf), inv);
            __m512i lo = _mm512_setzero_si512();
            for (int b = 0; b < bits; b++) {
                const __m512 th = _mm512_permutexvar_ps(_mm512_srli_epi32(lo, (unsigned)(bits - b)), st[b]);
                lo = _mm512_mask_add_epi32(lo, _mm512_cmp_ps_mask(u, th, _CMP_GT_OQ), lo,
                                           _mm512_set1_epi32(1 << (bits - 1 - b)));
            }
            c[hf] = lo;
            _mm512_storeu_si512((void *)(tmp + 32 * g + 16 * hf), lo);   /* the int32 codes over read dims */
        }
        if (bits == 3) {
            const __m512i t = _mm512_or_si512(_mm512_and_si512(c[0], _mm512_set1_epi32(3)),
                                              _mm512_slli_epi32(_mm512_and_si512(c[1], _mm512_set1_epi32(3)), 4));
            const __m512i t2 = _mm512_sllv_epi32(t, _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0));
            const __m256i b8 = _mm256_or_si256(_mm512_castsi512_si256(t2), _mm512_extracti64x4_epi64(t2, 1));
            _mm_storel_epi64((__m128i *)(void *)(row + 8 * g), _mm256_cvtepi32_epi8(b8));
            const uint32_t top = (uint32_t)_mm512_test_epi32_mask(c[0], _mm512_set1_epi32(4)) |
                                 (uint32_t)_mm512_test_epi32_mask(c[1], _mm512_set1_epi32(4)) << 16;
            memcpy(row + D / 4 + 4 * g, &top, 4);
        } else {
            const __m512i b = _mm512_or_si512(_mm512_and_si512(c[0], _mm512_set1_epi32(15)),
                                              _mm512_slli_epi32(_mm512_and_si512(c[1], _mm512_set1_epi32(15)), 4));
            _mm_storeu_si128((__m128i *)(void *)(row + 16 * g), _mm512_cvtepi32_epi8(b));
            if (bits == 5) {
                const uint32_t top = (uint32_t)_mm512_test_epi32_mask(c[0], _mm512_set1_epi32(16)) |
                                     (uint32_t)_mm512_test_epi32_mask(c[1], _mm512_set1_epi32(16)) << 16;
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

/* Whether x holds a NaN or an infinity. */
static inline bool nonfinite(const float *x, int D) {
    const __m512 inf = _mm512_set1_ps(__builtin_inff());
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    __mmask16 bad = 0;
    for (int d = 0; d < D; d += 16) {
        const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + d)), absm));
        bad |= _mm512_cmp_ps_mask(a, inf, _CMP_NLT_UQ);
    }
    return bad != 0;
}

MOE_TQ_DEF_ENCODE2(avx512)

static void encode_avx512(const float *x, const uint64_t *s, int D, int bits, float *tmp, uint8_t *row) {
    encode2_avx512(x, NULL, s, D, bits, 0, tmp, row, NULL);
}

/* moe_tq_rotate / moe_tq_unrotate: the sign flips as masked xors of the sign
 * bit (as -x), the products lane-wise, fwht_avx512: the same bits. */
static void rotate_avx512(const float *x, const uint64_t *s, int D, float *y) {
    const __m512i sgn = _mm512_set1_epi32((int)0x80000000u);
    for (int d = 0; d < D; d += 16) {
        const __m512i v = _mm512_castps_si512(_mm512_loadu_ps(x + d));
        _mm512_storeu_ps(y + d, _mm512_castsi512_ps(_mm512_mask_xor_epi32(v, (__mmask16)(s[d >> 6] >> (d & 63)), v, sgn)));
    }
    fwht_avx512(y, D);
    const __m512 isd = _mm512_set1_ps(moe_tq_isd(D));
    for (int d = 0; d < D; d += 16) _mm512_storeu_ps(y + d, _mm512_mul_ps(_mm512_loadu_ps(y + d), isd));
}

static void unrotate_avx512(float *y, const uint64_t *s, int D) {
    fwht_avx512(y, D);
    const __m512 isd = _mm512_set1_ps(moe_tq_isd(D));
    const __m512i sgn = _mm512_set1_epi32((int)0x80000000u);
    for (int d = 0; d < D; d += 16) {
        const __m512i v = _mm512_castps_si512(_mm512_mul_ps(_mm512_loadu_ps(y + d), isd));
        _mm512_storeu_ps(y + d, _mm512_castsi512_ps(_mm512_mask_xor_epi32(v, (__mmask16)(s[d >> 6] >> (d & 63)), v, sgn)));
    }
}

const moe_tq_kernels moe_tq_avx512 = {scores_tq_avx512, accum_tq_avx512, accum_tq_rows_avx512, fwht_avx512,
                                      encode_avx512,    encode2_avx512,  rotate_avx512,        unrotate_avx512};
