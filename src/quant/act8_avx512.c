/* act8_avx512.c — the act_q8 kernels with AVX-512 VNNI, bit-identical to
 * act8_ref.c.
 *
 * The a8 layouts (act8_ref.c) put block j of a 16-block group in lane j of
 * every 64-byte slab, so a group is 8 vpdpbusd per row (unsigned weight
 * bytes x signed activation bytes, 4 products per lane per instruction)
 * starting from the activation's correction vector; the exact int32 block
 * sums are then converted and folded into the 16 float lanes with one FMA per
 * group, as the contract says. A tile does R rows x T tokens (compile-time
 * constants) so weight slabs are reused across tokens in prefill. The 4-bit
 * formats (NVFP4, MXFP4, Q4_0) and the K-quants (Q4_K, Q6_K) follow below. Only F/BW/VL/DQ + VNNI
 * instructions (no VBMI: no vpermb; the nibble tables are vpshufb). */
#include "quant/quant_internal.h"

#include <immintrin.h>

#include "quant/hsum_avx512.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")


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

/* The activation side of a decode row of n <= 256 (one partial group),
 * loaded once per gemv: its 8 slabs and da, blocks 0..7 in both halves. */
ALWAYS_INLINE void short_slabs(const uint8_t *A, __m512i a[8], __m512 *da) {
    UNROLL for (int s = 0; s < 8; s++) a[s] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(A + 64 * s)));
    *da = _mm512_broadcast_f32x8(_mm256_loadu_ps((const float *)(A + 576)));
}

/* Decode rows of n <= 256 (one partial group of gn <= 8 blocks: laguna's
 * expert down projections, n = 256): tile_q8_0 leaves lanes gn..15 of every
 * zmm idle (bench_quant "a8 1024x256" read 35 GB/s per core against 80 on
 * 128x2048),
 * so here two rows A and B share one zmm: lanes 0..7 hold A's blocks, 8..15
 * B's, against the activation's first 8 blocks in both halves (corr and da
 * too). Per row the contract's steps: its sums from corr, S = dw * da, one
 * FMA from +0 per block (lanes past gn stay +0, as untouched accumulators
 * are), then the 16-lane tree with A's (and B's) lanes 8..15 = +0, both
 * rows' trees in one register (hsum8x2). */
ALWAYS_INLINE void pair_q8_0_short(const uint8_t *ga, const uint8_t *gb, const __m512i a[8], __m512i corr, __m512 da,
                                   float *ya, float *yb, const int gn) {
    const __mmask32 mb = (__mmask32)(((uint64_t)1 << (4 * gn)) - 1);
    const __mmask8 mh = (__mmask8)((1u << gn) - 1);
    const __mmask16 ml = (__mmask16)(mh | (mh << 8));
    __m512i is = corr;
    UNROLL for (int s = 0; s < 8; s++) {
        const __m512i u = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_maskz_loadu_epi8(mb, ga + 2 * gn + 4 * gn * s)),
            _mm256_maskz_loadu_epi8(mb, gb + 2 * gn + 4 * gn * s), 1);
        is = _mm512_dpbusd_epi32(is, u, a[s]);
    }
    const __m256i dh = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_maskz_loadu_epi16(mh, ga)),
                                               _mm_maskz_loadu_epi16(mh, gb), 1);
    const __m512 S = _mm512_mul_ps(_mm512_cvtph_ps(dh), da);
    hsum8x2(_mm512_maskz_fmadd_ps(ml, _mm512_cvtepi32_ps(is), S, _mm512_setzero_ps()), ya, yb);
}

/* Decode: rows r and r + h in one tile (h = nrows/2), the odd row left over
 * alone. Measured on the lm-head from DRAM, 1 thread: adjacent rows in one
 * tile (two streams 2 KB apart) ~12 GB/s, one row at a time ~22-30 GB/s,
 * distant pairs ~30-33 GB/s (best of 5 in a throwaway harness, while choosing;
 * docs/KERNELS.md): this machine's hardware prefetcher loses track of
 * streams that close, but follows two far-apart ones. A row's value does not
 * depend on its partner. */
void moe_gemv_a8_q8_0_avx512(const void *w, size_t rb, int64_t nrows, const void *xa, float *y, int64_t n) {
    const uint8_t *W = w;
    const int64_t h = nrows / 2;
    if (n <= 8 * 32) {
        /* the activation's 8 slabs, corr and da (blocks 0..7 in both
         * halves) stay in registers for all rows */
        const uint8_t *A = xa;
        __m512i a[8];
        __m512 da;
        short_slabs(A, a, &da);
        const __m512i corr = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(A + 512)));
        const int gn = (int)(n / 32);
        for (int64_t r = 0; r < h; r++)
            pair_q8_0_short(W + (size_t)r * rb, W + (size_t)(r + h) * rb, a, corr, da, y + r, y + r + h, gn);
    } else {
        for (int64_t r = 0; r < h; r++)
            tile_q8_0(W + (size_t)r * rb, (size_t)h * rb, xa, 0, y + r, 0, (size_t)h, n, 2, 1);
    }
    if (nrows & 1) tile_q8_0(W + (size_t)(nrows - 1) * rb, rb, xa, 0, y + nrows - 1, 0, 1, n, 1, 1);
}

/* Prefill and batched decode: 4 rows x 2 tokens per tile (8 int32 + 8
 * float accumulators); the 4 rows stay in L1 while all tokens pass. The
 * rows of a tile are r, r + q, r + 2q, r + 3q (q = nrows/4), far apart for
 * the reason gemv pairs distant rows: at a few tokens (a batched decode
 * step's experts) the rows stream from memory, and adjacent ones lose the
 * prefetcher (bench_gemm_small, 1 thread, 2048x2048 from memory, us for
 * 2 / 4 / 8 tokens: 460 / 546 / 827 adjacent, 299 / 440 / 571 spaced). */
void moe_gemm_a8_q8_0_avx512(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs, int64_t ntok,
                             float *y, size_t ys, int64_t n) {
    const uint8_t *W = w, *X = xa;
    const int64_t q = nrows / 4;
    for (int64_t r = 0; r < q; r++) {
        int64_t t = 0;
        for (; t + 2 <= ntok; t += 2)
            tile_q8_0(W + (size_t)r * rb, (size_t)q * rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys,
                      (size_t)q, n, 4, 2);
        for (; t < ntok; t++)
            tile_q8_0(W + (size_t)r * rb, (size_t)q * rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys,
                      (size_t)q, n, 4, 1);
    }
    for (int64_t r = 4 * q; r < nrows; r++)
        for (int64_t t = 0; t < ntok; t++)
            tile_q8_0(W + (size_t)r * rb, rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, 1, n, 1, 1);
}

/* ---- the 4-bit formats (NVFP4, MXFP4, Q4_0) --------------------------------
 * Codes become unsigned bytes u (act8_ref.c): a vpshufb of a 16-entry table
 * kv + 12 (NVFP4, MXFP4) or the code itself (Q4_0), and each sum starts
 * from the activation's correction. A group's slab pair p (4 gn bytes: one
 * 64-byte load in a full group, a masked one in a partial group) gives slab
 * 2p (low nibbles) and 2p+1 (high nibbles) with block j at bytes 4j..4j+3,
 * against the 64-byte activation slabs 2p and 2p+1 (group_pairs).
 * A partial group of gn <= 8 blocks (n = 256: the experts' down projections
 * of the laguna bench model) would leave half of every zmm idle, so tiles
 * with an even row count put two rows in one zmm (lanes 0..7 and 8..15);
 * each row's float lanes still take exactly its own blocks' FMAs, in order.
 * Per block the float steps are the contract's: S = scale * da (vcvtph2ps
 * and the conversions below are exact), one FMA per part (NVFP4: half 0,
 * then half 1), lanes in the fixed tree.
 * The K-quants share this tile (a group of 16 blocks = two super-blocks, a
 * partial group = one, gn = 8, so it takes the two-rows-per-zmm path):
 * Q4_K's codes are the nibbles themselves (sums from 0), its scales come
 * from the two 16-byte super-block headers (q4k_scales: the 6-bit unpack of
 * both in one ymm, d1 = d * sc and m1 = dmin * m per lane), and each block
 * takes a second FMA, -qsum * (m1 * da), with qsum = hsum lo + hi. Q6_K is
 * NVFP4's shape (two halves, 4 slabs each, sums from -32 hsum): its codes
 * are the nibbles with the 2 high bits of the hi chunk (one 64-byte load
 * per half and row) put in by a shift, an AND and a vpternlogd, and its
 * scales are d * sc (int8).
 * Prefill of 4 tokens or more (rows of n <= 8192) takes the panel GEMM
 * below instead, for all five formats: the same u slabs, unpacked once per
 * 64 tokens. */
enum { FMT_Q4_0, FMT_MXFP4, FMT_NVFP4, FMT_Q4_K, FMT_Q6_K };

/* moe_ue4m3_half[c | 0x80] of 16 canonical a8 scale bytes c (act8_ref.c:
 * bit 7 clear, no special byte): c << 7 is an IEEE half whose exponent field
 * is the UE4M3 exponent e and whose top 3 mantissa bits its mantissa m, so
 * the half is (8 + m) * 2^(e - 18), or m * 2^-17 for e = 0 (a subnormal
 * half, a normal float); times 2^7 (exact) it is (8 + m) * 2^(e - 11) or
 * m * 2^-10. Not c << 20 as a float: for e = 0 that is a subnormal float,
 * and a multiply with a subnormal input takes a microcode assist on Intel
 * cores (10x slower kernels on files with small weights, whose scales are
 * all UE4M3 subnormals); the half conversion has no such input. */
ALWAYS_INLINE __m512 ue4m3_half16(__m128i bytes) {
    const __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), 7);
    return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(0x1p7f));
}
/* moe_e8m0_half of 16 bytes: (e - 1) << 23 for e >= 2, 0x00200000 << e for e < 2. */
ALWAYS_INLINE __m512 e8m0_half16(__m128i bytes) {
    const __m512i e = _mm512_cvtepu8_epi32(bytes);
    const __m512i big = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), big, small));
}

/* Q6_K: d * sc (exact: 11 x 7 bits) of half h's 16 lanes, from the f16 d
 * of lanes 0..7 (at d0) and of lanes 8..15 (at d1) and 8 int8 scales each
 * (at s0, s1). */
ALWAYS_INLINE __m512 q6k_scales(const uint8_t *d0, const uint8_t *d1, const uint8_t *s0, const uint8_t *s1) {
    const __m512 d = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)moe_rd16(d0))),
                                                             _mm_set1_epi16((short)moe_rd16(d1)), 1));
    const __m128i sc = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)s0), _mm_loadl_epi64((const __m128i *)s1));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)));
}

/* The weight scales of a group's lanes (NVFP4: of half h), gn blocks. */
ALWAYS_INLINE __m512 w_scales(const uint8_t *G, int gn, int h, const int FMT, const int PARTIAL) {
    const __mmask16 ml = (__mmask16)((1u << gn) - 1);
    if (FMT == FMT_Q6_K) {      /* a full group: d[2], sc[2][16]; a partial one (gn = 8): d, sc[2][8] */
        if (!PARTIAL) return q6k_scales(G, G + 2, G + 4 + 16 * h, G + 12 + 16 * h);
        return q6k_scales(G, G, G + 2 + 8 * h, G + 2 + 8 * h);
    }
    if (FMT == FMT_Q4_0)
        return _mm512_cvtph_ps(PARTIAL ? _mm256_maskz_loadu_epi16(ml, G) : _mm256_loadu_si256((const __m256i *)G));
    const uint8_t *p = G + (size_t)(h * gn);
    const __m128i b = PARTIAL ? _mm_maskz_loadu_epi8(ml, p) : _mm_loadu_si128((const __m128i *)p);
    return FMT == FMT_NVFP4 ? ue4m3_half16(b) : e8m0_half16(b);
}

/* The same for two rows of a partial group of gn <= 8 blocks: row 0's
 * scales in lanes 0..7, row 1's in lanes 8..15 (one conversion for both). */
ALWAYS_INLINE __m512 w_scales_pair(const uint8_t *G0, const uint8_t *G1, int gn, int h, const int FMT) {
    const __mmask8 ml = (__mmask8)((1u << gn) - 1);
    if (FMT == FMT_Q6_K) return q6k_scales(G0, G1, G0 + 2 + 8 * h, G1 + 2 + 8 * h); /* gn = 8 */
    if (FMT == FMT_Q4_0)
        return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_maskz_loadu_epi16(ml, G0)),
                                                       _mm_maskz_loadu_epi16(ml, G1), 1));
    const __m128i b = _mm_unpacklo_epi64(_mm_maskz_loadu_epi8(ml, G0 + (size_t)(h * gn)),
                                         _mm_maskz_loadu_epi8(ml, G1 + (size_t)(h * gn)));
    return FMT == FMT_NVFP4 ? ue4m3_half16(b) : e8m0_half16(b);
}

/* Q4_K: d1 = d * sc and m1 = dmin * m (act8_ref.c) of 16 lanes from two
 * super-block headers, X = [the header of lanes 0..7 | that of lanes 8..15]
 * (per 128-bit half, dwords: d | dmin << 16, then the packed bytes u0, u1,
 * u2). moe_q4k_unpack16 per half: sc0..3 = u0 & 0x3f, sc4..7 = (u2 & 0xf) |
 * (u0 >> 6) << 4, m0..3 = u1 & 0x3f, m4..7 = (u2 >> 4 & 0xf) | (u1 >> 6) << 4
 * (bytewise; (x >> 6 & 3) << 4 is x >> 2 & 0x30 on dwords). The products
 * are exact (11 x 6 bits), vcvtph2ps is the exact conversion. */
ALWAYS_INLINE void q4k_scales(__m256i X, __m512 *d1, __m512 *m1) {
    const __m256i Xp = _mm256_shuffle_epi32(X, _MM_SHUFFLE(3, 2, 3, 1)); /* u0 u2 u1 u2 */
    const __m256i Xq = _mm256_shuffle_epi32(X, _MM_SHUFFLE(2, 2, 1, 1)); /* u0 u0 u1 u1 */
    const __m256i lo = _mm256_and_si256(Xp, _mm256_set1_epi8(0x3F));
    const __m256i hi = _mm256_ternarylogic_epi32(_mm256_srlv_epi32(Xp, _mm256_setr_epi32(0, 0, 0, 4, 0, 0, 0, 4)),
                                                 _mm256_set1_epi8(0x0F),
                                                 _mm256_and_si256(_mm256_srli_epi32(Xq, 2), _mm256_set1_epi8(0x30)),
                                                 0xEA); /* (a & b) | c */
    /* per half [sc0..7, m0..7]; qwords reordered to [sc lanes 0..15 | m lanes 0..15] */
    const __m256i v = _mm256_permute4x64_epi64(_mm256_blend_epi32(lo, hi, 0xAA), _MM_SHUFFLE(3, 1, 2, 0));
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(v)));
    const __m512 m = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(v, 1)));
    /* d, dmin of both headers: [d0, dmin0, d1, dmin1] */
    const __m512 dd = _mm512_castps128_ps512(
        _mm_cvtph_ps(_mm_unpacklo_epi32(_mm256_castsi256_si128(X), _mm256_extracti128_si256(X, 1))));
    *d1 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2), dd), sc);
    *m1 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3), dd), m);
}

/* Q4_K: qsum of the 16 blocks (hsum lo + hi) as floats (exact). */
ALWAYS_INLINE __m512 q4k_qsum(const uint8_t *A) {
    return _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_loadu_si512(A + 640), _mm512_loadu_si512(A + 704)));
}

/* Where part h's sums start (NVFP4, Q6_K: half h; the others: the whole block). */
ALWAYS_INLINE __m512i corr4(const uint8_t *A, int h, const int FMT) {
    if (FMT == FMT_Q4_K) return _mm512_setzero_si512();
    if (FMT == FMT_Q6_K) /* -32 * hsum */
        return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(_mm512_loadu_si512(A + 640 + 64 * h), 5));
    if (FMT == FMT_Q4_0) return _mm512_srai_epi32(_mm512_loadu_si512(A + 512), 4); /* -8 * sum q */
    const __m512i m12 = _mm512_set1_epi32(-12);
    if (FMT == FMT_NVFP4) return _mm512_mullo_epi32(_mm512_loadu_si512(A + 640 + 64 * h), m12);
    return _mm512_mullo_epi32(_mm512_add_epi32(_mm512_loadu_si512(A + 640), _mm512_loadu_si512(A + 704)), m12);
}

ALWAYS_INLINE __m512i to_u(__m512i codes, __m512i tab, const int FMT) {
    return FMT == FMT_Q4_0 || FMT == FMT_Q4_K ? codes : _mm512_shuffle_epi8(tab, codes);
}

/* Q6_K: the 6-bit codes of slab 4h + s from its unpacked nibbles z (bits
 * 4..7 of each byte undefined) and hi chunk h: (z & 0xf) | (H >> 2s & 3) << 4. */
ALWAYS_INLINE __m512i q6k_u(__m512i z, __m512i H, const int s) {
    const __m512i hb = s == 0 ? _mm512_slli_epi16(H, 4) : s == 1 ? _mm512_slli_epi16(H, 2) : s == 2 ? H : _mm512_srli_epi16(H, 2);
    return _mm512_ternarylogic_epi32(z, _mm512_set1_epi8(0x0F), _mm512_and_si512(hb, _mm512_set1_epi8(0x30)), 0xEA);
}

/* The activation-aligned slab 2i + k of a slab pair z: its low (k = 0) or
 * high (k = 1) nibbles as unsigned bytes (Q6_K: plus the slab's high bits
 * from H). */
ALWAYS_INLINE __m512i slab_u(__m512i z, __m512i H, int i, const int k, __m512i tab, const int FMT) {
    const __m512i zk = k ? _mm512_srli_epi16(z, 4) : z;
    if (FMT == FMT_Q6_K) return q6k_u(zk, H, 2 * i + k);
    return to_u(_mm512_and_si512(zk, _mm512_set1_epi8(0x0F)), tab, FMT);
}

/* Both slabs of a slab pair. */
ALWAYS_INLINE void pair_u(__m512i z, __m512i H, int i, __m512i tab, const int FMT, __m512i *u0, __m512i *u1) {
    *u0 = slab_u(z, H, i, 0, tab, FMT);
    *u1 = slab_u(z, H, i, 1, tab, FMT);
}

/* A group's run of 4 gn bytes at p (a slab pair, a Q6_K high-bit chunk):
 * one 64-byte load in a full group, the first 4 gn bytes (mask mb) in a
 * partial one. */
ALWAYS_INLINE __m512i ld_run(const uint8_t *p, __mmask64 mb, const int PARTIAL) {
    return PARTIAL ? _mm512_maskz_loadu_epi8(mb, p) : _mm512_loadu_si512(p);
}

/* One group of gn blocks (16, or fewer when PARTIAL: a row's last) for R
 * rows x T tokens, slab pair by slab pair (act8_ref.c: a pair's nibble
 * split gives two activation-aligned slabs for any gn; a full group's pair
 * is one plain 64-byte load). */
ALWAYS_INLINE void group_pairs(const uint8_t *G, const uint8_t *C, const uint8_t *HI, size_t rb, const uint8_t *A,
                               size_t xs, int gn, __m512 acc[4][4], const int R, const int T, const int FMT,
                               const int PARTIAL) {
    const int NP = FMT == FMT_NVFP4 || FMT == FMT_Q6_K ? 2 : 1; /* parts (FMAs) per block */
    const int SPP = 8 / NP;                                      /* slabs per part */
    const __m512i tab = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __mmask64 mb = PARTIAL ? ((__mmask64)1 << (4 * gn)) - 1 : ~(__mmask64)0;
    const __mmask16 ml = PARTIAL ? (__mmask16)((1u << gn) - 1) : (__mmask16)0xFFFF;
    UNROLL for (int h = 0; h < NP; h++) {
        __m512i is[4][4];
        UNROLL for (int t = 0; t < T; t++) {
            const __m512i c = corr4(A + (size_t)t * xs, h, FMT);
            UNROLL for (int r = 0; r < R; r++) is[r][t] = c;
        }
        __m512i H[4];
        if (FMT == FMT_Q6_K)
            UNROLL for (int r = 0; r < R; r++) H[r] = ld_run(HI + (size_t)r * rb + (size_t)(4 * gn * h), mb, PARTIAL);
        UNROLL for (int i = 0; i < SPP / 2; i++) {
            const int p = SPP / 2 * h + i;
            if (T == 1) {      /* both activation slabs in registers, each row's pair loaded once */
                const __m512i a0 = _mm512_loadu_si512(A + 128 * p), a1 = _mm512_loadu_si512(A + 128 * p + 64);
                UNROLL for (int r = 0; r < R; r++) {
                    const __m512i z = ld_run(C + (size_t)r * rb + (size_t)(4 * gn * p), mb, PARTIAL);
                    __m512i u0, u1;
                    pair_u(z, FMT == FMT_Q6_K ? H[r] : z, i, tab, FMT, &u0, &u1);
                    is[r][0] = _mm512_dpbusd_epi32(is[r][0], u0, a0);
                    is[r][0] = _mm512_dpbusd_epi32(is[r][0], u1, a1);
                }
            } else {           /* slab 2p for all rows, then 2p + 1 (the pair read again, from L1):
                                * T activation vectors live instead of 2 T (the 4x3 tile would spill) */
                UNROLL for (int k = 0; k < 2; k++) {
                    __m512i a[4];
                    UNROLL for (int t = 0; t < T; t++) a[t] = _mm512_loadu_si512(A + (size_t)t * xs + 128 * p + 64 * k);
                    UNROLL for (int r = 0; r < R; r++) {
                        const __m512i z = ld_run(C + (size_t)r * rb + (size_t)(4 * gn * p), mb, PARTIAL);
                        const __m512i u = slab_u(z, FMT == FMT_Q6_K ? H[r] : z, i, k, tab, FMT);
                        UNROLL for (int t = 0; t < T; t++) is[r][t] = _mm512_dpbusd_epi32(is[r][t], u, a[t]);
                    }
                }
            }
        }
        UNROLL for (int r = 0; r < R; r++) {
            __m512 sc, m1 = _mm512_setzero_ps();
            /* Q4_K: a full group is two super-blocks (two headers), a partial
             * one (gn = 8) one header (lanes 8..15 compute from a copy, masked off) */
            if (FMT == FMT_Q4_K)
                q4k_scales(PARTIAL ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(G + (size_t)r * rb)))
                                   : _mm256_loadu_si256((const __m256i *)(G + (size_t)r * rb)),
                           &sc, &m1);
            else sc = w_scales(G + (size_t)r * rb, gn, h, FMT, PARTIAL);
            UNROLL for (int t = 0; t < T; t++) {
                const __m512 da = _mm512_loadu_ps((const float *)(A + (size_t)t * xs + 576));
                const __m512 S = _mm512_mul_ps(sc, da);
                acc[r][t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(is[r][t]), S, acc[r][t], ml);
                if (FMT == FMT_Q4_K)
                    acc[r][t] = _mm512_mask3_fnmadd_ps(q4k_qsum(A + (size_t)t * xs), _mm512_mul_ps(m1, da), acc[r][t], ml);
            }
        }
    }
}

/* R rows x T tokens of a 4-bit format (a8 layout), as tile_q8_0. */
ALWAYS_INLINE void tile_4bit(const uint8_t *w, size_t rb, const uint8_t *xa, size_t xs, float *y, size_t ys,
                             size_t yr, int64_t n, const int R, const int T, const int FMT) {
    const int64_t nb = n / 32;
    const size_t BPB = FMT == FMT_MXFP4 ? 17 : 18;
    const int SB = FMT == FMT_MXFP4 ? 1 : 2;
    const int NP = FMT == FMT_NVFP4 || FMT == FMT_Q6_K ? 2 : 1; /* parts (FMAs) per block */
    const int SPP = 8 / NP;                                      /* slabs per part */
    const __m512i tab = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    __m512 acc[4][4];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
        /* Q6_K: 210 bytes per 8 blocks; its codes after d[gn/8] and sc[2][gn] */
        const uint8_t *G = FMT == FMT_Q6_K ? w + (size_t)(g0 / 8) * QB_Q6_K : w + (size_t)g0 * BPB;
        const uint8_t *A = xa + (size_t)(g0 / A8_G) * A8_GROUP_BYTES;
        const uint8_t *C = FMT == FMT_Q6_K ? G + (size_t)(18 * (gn / 8)) : G + (size_t)(SB * gn);
        const uint8_t *HI = C + 16 * gn; /* Q6_K: the high bits, chunk h at HI + 4 gn h */
        if (gn == A8_G) {
            group_pairs(G, C, HI, rb, A, xs, A8_G, acc, R, T, FMT, 0);
        } else if (R % 2 == 0 && gn <= 8) {
            /* a partial group of <= 8 blocks fills half a zmm: two rows share
             * one (row 2q in lanes 0..7, row 2q+1 in lanes 8..15) against
             * the activation's blocks 0..7 broadcast to both halves */
            const __mmask32 mb = (__mmask32)(((uint64_t)1 << (4 * gn)) - 1);
            const __mmask16 ml = (__mmask16)((1u << gn) - 1), ml2 = (__mmask16)(ml | ml << 8);
            UNROLL for (int h = 0; h < NP; h++) {
                __m512i is[2][4];
                UNROLL for (int t = 0; t < T; t++) {
                    const __m512i c = corr4(A + (size_t)t * xs, h, FMT);
                    UNROLL for (int q = 0; q < R / 2; q++) is[q][t] = _mm512_shuffle_i64x2(c, c, 0x44);
                }
                __m512i H[2];
                if (FMT == FMT_Q6_K)  /* gn = 8: both rows' chunk h (32 bytes each) */
                    UNROLL for (int q = 0; q < R / 2; q++) {
                        const uint8_t *h0 = HI + (size_t)(2 * q) * rb + 32 * h;
                        H[q] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)h0)),
                                                  _mm256_loadu_si256((const __m256i *)(h0 + rb)), 1);
                    }
                UNROLL for (int i = 0; i < SPP / 2; i++) {
                    const int p = SPP / 2 * h + i;
                    __m512i a0[4], a1[4];
                    UNROLL for (int t = 0; t < T; t++) {
                        a0[t] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 128 * p)));
                        a1[t] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 128 * p + 64)));
                    }
                    UNROLL for (int q = 0; q < R / 2; q++) {
                        const uint8_t *c0 = C + (size_t)(2 * q) * rb + (size_t)(4 * gn * p);
                        const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi8(mb, c0)),
                                                             _mm256_maskz_loadu_epi8(mb, c0 + rb), 1);
                        __m512i u0, u1;  /* Q6_K: slabs 2p, 2p + 1 = slabs 2i, 2i + 1 of half h */
                        pair_u(z, FMT == FMT_Q6_K ? H[q] : z, i, tab, FMT, &u0, &u1);
                        UNROLL for (int t = 0; t < T; t++) {
                            is[q][t] = _mm512_dpbusd_epi32(is[q][t], u0, a0[t]);
                            is[q][t] = _mm512_dpbusd_epi32(is[q][t], u1, a1[t]);
                        }
                    }
                }
                UNROLL for (int q = 0; q < R / 2; q++) {
                    __m512 sc, m1 = _mm512_setzero_ps();
                    if (FMT == FMT_Q4_K)
                        q4k_scales(_mm256_inserti128_si256(
                                       _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(G + (size_t)(2 * q) * rb))),
                                       _mm_loadu_si128((const __m128i *)(G + (size_t)(2 * q + 1) * rb)), 1),
                                   &sc, &m1);
                    else sc = w_scales_pair(G + (size_t)(2 * q) * rb, G + (size_t)(2 * q + 1) * rb, gn, h, FMT);
                    UNROLL for (int t = 0; t < T; t++) {
                        const __m512 da = _mm512_broadcast_f32x8(_mm256_loadu_ps((const float *)(A + (size_t)t * xs + 576)));
                        const __m512 S = _mm512_mul_ps(sc, da);
                        __m512 c = _mm512_shuffle_f32x4(acc[2 * q][t], acc[2 * q + 1][t], 0x44);
                        c = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(is[q][t]), S, c, ml2);
                        if (FMT == FMT_Q4_K) {
                            const __m512 qs = q4k_qsum(A + (size_t)t * xs);
                            c = _mm512_mask3_fnmadd_ps(_mm512_shuffle_f32x4(qs, qs, 0x44), _mm512_mul_ps(m1, da), c, ml2);
                        }
                        acc[2 * q][t] = _mm512_mask_mov_ps(acc[2 * q][t], 0x00FF, c);
                        acc[2 * q + 1][t] = _mm512_mask_mov_ps(acc[2 * q + 1][t], 0x00FF, _mm512_shuffle_f32x4(c, c, 0xEE));
                    }
                }
            }
        } else {                       /* the row's last, partial group */
            group_pairs(G, C, HI, rb, A, xs, gn, acc, R, T, FMT, 1);
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r * yr] = hsum16(acc[r][t]);
}

/* Decode rows of n <= 256 of NVFP4, MXFP4 and Q4_0 (one partial group, gn <=
 * 8), as pair_q8_0_short: rows A and B in one zmm, the activation's slabs,
 * part corrections and da held in registers by the caller (blocks 0..7 in
 * both halves), then per part (NVFP4: half 0, then half 1) one FMA from the
 * row's accumulator, and the two rows' trees side by side. */
ALWAYS_INLINE void pair_4bit_short(const uint8_t *ga, const uint8_t *gb, const __m512i a[8], const __m512i corr[2],
                                   __m512 da, float *ya, float *yb, const int gn, const int FMT) {
    const int SB = FMT == FMT_MXFP4 ? 1 : 2;
    const int NP = FMT == FMT_NVFP4 ? 2 : 1, PPP = 4 / NP; /* parts; slab pairs per part */
    const __m512i tab = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __mmask32 mb = (__mmask32)(((uint64_t)1 << (4 * gn)) - 1);
    const __mmask16 ml = (__mmask16)(((1u << gn) - 1) | ((1u << gn) - 1) << 8);
    const uint8_t *ca = ga + (size_t)(SB * gn), *cb = gb + (size_t)(SB * gn);
    __m512 x = _mm512_setzero_ps();
    UNROLL for (int h = 0; h < NP; h++) {
        __m512i is = corr[h];
        UNROLL for (int i = 0; i < PPP; i++) {
            const int p = PPP * h + i;
            const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_maskz_loadu_epi8(mb, ca + 4 * gn * p)),
                                                 _mm256_maskz_loadu_epi8(mb, cb + 4 * gn * p), 1);
            __m512i u0, u1;
            pair_u(z, z, i, tab, FMT, &u0, &u1);
            is = _mm512_dpbusd_epi32(is, u0, a[2 * p]);
            is = _mm512_dpbusd_epi32(is, u1, a[2 * p + 1]);
        }
        const __m512 S = _mm512_mul_ps(w_scales_pair(ga, gb, gn, h, FMT), da);
        x = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(is), S, x, ml);
    }
    hsum8x2(x, ya, yb);
}

/* short_slabs plus the part corrections (corr4), for the 4-bit formats. */
ALWAYS_INLINE void short_act(const uint8_t *A, __m512i a[8], __m512i corr[2], __m512 *da, const int FMT) {
    short_slabs(A, a, da);
    UNROLL for (int h = 0; h < 2; h++) {
        const __m512i c = corr4(A, h, FMT);
        corr[h] = _mm512_shuffle_i64x2(c, c, 0x44);
    }
}

/* ---- prefill: the panel GEMM (act8_kquant_avx512.c says why) ---------------
 * tile_4bit unpacks a row's codes (nibble split, table lookup, Q6_K's high
 * bits) again for every tile of tokens: at 4 x 3 that is one unpack per 3
 * token products. Here a panel of 4 rows is unpacked once per block of
 * A8P_TB tokens into pgroup records (per row and group: the 8 u slabs
 * group_pairs makes and the parts' scales: NVFP4's and Q6_K's two halves,
 * MXFP4's and Q4_0's one, Q4_K's d1 and m1), then the block's tokens run
 * over it 4 x 3 at a time. A row's last group has any gn of 1..15 blocks
 * (K-quants: 8); it is unpacked with the masks group_pairs uses (codes past
 * the group read as 0, their lanes masked off in every FMA). Same exact
 * int32 part sums, same float steps in the same order (part by part, lanes
 * masked to the group's blocks): group_pairs' bits. */
typedef struct { __m512i u[8]; __m512 sc[2]; } pgroup;

/* Parts (FMAs from the int32 sums) per block: NVFP4 and Q6_K two halves. */
#define NPARTS(FMT) ((FMT) == FMT_NVFP4 || (FMT) == FMT_Q6_K ? 2 : 1)

/* Row G's group of gn blocks (16, or fewer in a row's last: PARTIAL) into k. */
ALWAYS_INLINE void unpack_group(const uint8_t *G, int gn, pgroup *k, const int FMT, const int PARTIAL) {
    const __mmask64 mb = PARTIAL ? ((__mmask64)1 << (4 * gn)) - 1 : ~(__mmask64)0;
    const int SB = FMT == FMT_MXFP4 ? 1 : 2; /* scale bytes per block, before the codes (Q4_K: the headers) */
    const uint8_t *C = FMT == FMT_Q6_K ? G + 18 * (gn / 8) : G + SB * gn, *HI = C + 16 * gn;
    const __m512i tab = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const int NP = NPARTS(FMT), SPP = 8 / NP;
    UNROLL for (int h = 0; h < NP; h++) {
        const __m512i H = FMT == FMT_Q6_K ? ld_run(HI + 4 * gn * h, mb, PARTIAL) : _mm512_setzero_si512();
        UNROLL for (int i = 0; i < SPP / 2; i++) {
            const int p = SPP / 2 * h + i;
            const __m512i z = ld_run(C + 4 * gn * p, mb, PARTIAL);
            pair_u(z, FMT == FMT_Q6_K ? H : z, i, tab, FMT, &k->u[2 * p], &k->u[2 * p + 1]);
        }
    }
    if (FMT == FMT_Q4_K)
        q4k_scales(PARTIAL ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)G))
                           : _mm256_loadu_si256((const __m256i *)G), &k->sc[0], &k->sc[1]);
    else UNROLL for (int h = 0; h < NP; h++) k->sc[h] = w_scales(G, gn, h, FMT, PARTIAL);
}

/* R rows (row r's record at K + r*ks) x T tokens of one unpacked group, lanes ml. */
ALWAYS_INLINE void panel_group(const pgroup *K, int64_t ks, const uint8_t *A, size_t xs, __mmask16 ml, __m512 acc[4][4],
                               const int R, const int T, const int FMT) {
    const int NP = NPARTS(FMT), SPP = 8 / NP;
    UNROLL for (int h = 0; h < NP; h++) {
        __m512i is[4][4];
        UNROLL for (int t = 0; t < T; t++) {
            const __m512i c = corr4(A + (size_t)t * xs, h, FMT);
            UNROLL for (int r = 0; r < R; r++) is[r][t] = c;
        }
        UNROLL for (int s = 0; s < SPP; s++) {
            __m512i a[4];
            UNROLL for (int t = 0; t < T; t++) a[t] = _mm512_loadu_si512(A + (size_t)t * xs + 64 * (SPP * h + s));
            UNROLL for (int r = 0; r < R; r++) {
                const __m512i u = _mm512_load_si512(&K[r * ks].u[SPP * h + s]);
                UNROLL for (int t = 0; t < T; t++) is[r][t] = _mm512_dpbusd_epi32(is[r][t], u, a[t]);
            }
        }
        UNROLL for (int r = 0; r < R; r++) {
            const __m512 sc = K[r * ks].sc[FMT == FMT_Q4_K ? 0 : h];
            UNROLL for (int t = 0; t < T; t++) {
                const __m512 da = _mm512_loadu_ps((const float *)(A + (size_t)t * xs + 576));
                acc[r][t] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(is[r][t]), _mm512_mul_ps(sc, da), acc[r][t], ml);
                if (FMT == FMT_Q4_K)
                    acc[r][t] = _mm512_mask3_fnmadd_ps(q4k_qsum(A + (size_t)t * xs), _mm512_mul_ps(K[r * ks].sc[1], da),
                                                       acc[r][t], ml);
            }
        }
    }
}

/* R rows of the panel (ng groups per row, nb blocks) x T tokens -> y[t*ys + r]. */
ALWAYS_INLINE void panel_tile(const pgroup *P, int64_t ng, int64_t nb, const uint8_t *xa, size_t xs, float *y,
                              size_t ys, const int R, const int T, const int FMT) {
    __m512 acc[4][4];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < ng; g++) {
        const int64_t gn = nb - A8_G * g < A8_G ? nb - A8_G * g : A8_G;
        panel_group(P + g, ng, xa + (size_t)g * A8_GROUP_BYTES, xs, (__mmask16)((1u << gn) - 1), acc, R, T, FMT);
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) y[(size_t)t * ys + (size_t)r] = hsum16(acc[r][t]);
}

ALWAYS_INLINE void panel_tokens(const pgroup *P, int64_t ng, int64_t nb, const uint8_t *xa, size_t xs, int64_t nt,
                                float *y, size_t ys, const int R, const int FMT) {
    int64_t t = 0;
    for (; t + 3 <= nt; t += 3) panel_tile(P, ng, nb, xa + (size_t)t * xs, xs, y + (size_t)t * ys, ys, R, 3, FMT);
    for (; t < nt; t++) panel_tile(P, ng, nb, xa + (size_t)t * xs, xs, y + (size_t)t * ys, ys, R, 1, FMT);
}

#define A8P_R 4        /* rows per panel */
#define A8P_TB 64      /* tokens per block: their activations (48 KB at n = 2048) stay in L2 */
#define A8P_MAXG 16    /* groups per row in the panel buffer (n <= 8192; 40 KB of stack) */
/* Fewer tokens than this (decode's experts: 1 token each) keep tile_4bit: a
 * panel unpacked for them costs more than unpacking in registers. */
#define A8P_MIN_TOK 4

/* Rows of n <= 32 * A8_G * A8P_MAXG of any 4-bit format or K-quant. */
ALWAYS_INLINE void panel_gemm(const uint8_t *W, size_t rb, int64_t nrows, const uint8_t *X, size_t xs, int64_t ntok,
                              float *y, size_t ys, int64_t n, const int FMT) {
    const int64_t nb = n / 32, ng = (nb + A8_G - 1) / A8_G;
    /* bytes per group: two super-blocks (K-quants), 16 blocks of BPB */
    const size_t GBYTES = FMT == FMT_Q6_K ? 2 * QB_Q6_K : FMT == FMT_Q4_K ? 2 * QB_Q4_K
                        : (size_t)A8_G * (FMT == FMT_MXFP4 ? 17 : 18);
    _Alignas(64) pgroup P[A8P_R * A8P_MAXG];
    for (int64_t t0 = 0; t0 < ntok; t0 += A8P_TB) {
        const int64_t nt = ntok - t0 < A8P_TB ? ntok - t0 : A8P_TB;
        for (int64_t r = 0; r < nrows; r += A8P_R) {
            const int R = nrows - r < A8P_R ? (int)(nrows - r) : A8P_R;
            for (int rr = 0; rr < R; rr++)
                for (int64_t g = 0; g < ng; g++) {
                    const uint8_t *G = W + (size_t)(r + rr) * rb + (size_t)g * GBYTES;
                    if (nb - A8_G * g >= A8_G) unpack_group(G, A8_G, &P[rr * ng + g], FMT, 0);
                    else unpack_group(G, (int)(nb - A8_G * g), &P[rr * ng + g], FMT, 1);
                }
            const uint8_t *Xt = X + (size_t)t0 * xs;
            float *yt = y + (size_t)t0 * ys + r;
            if (R == 4) panel_tokens(P, ng, nb, Xt, xs, nt, yt, ys, 4, FMT);
            else if (R == 3) panel_tokens(P, ng, nb, Xt, xs, nt, yt, ys, 3, FMT);
            else if (R == 2) panel_tokens(P, ng, nb, Xt, xs, nt, yt, ys, 2, FMT);
            else panel_tokens(P, ng, nb, Xt, xs, nt, yt, ys, 1, FMT);
        }
    }
}

/* gemv (rows r and r + nrows/2 paired, as for Q8_0) and gemm of each 4-bit
 * format. The gemm tile, measured (bench_quant, 512x2048 x 512 tokens, 2
 * threads, GOP/s, Q4_0 / NVFP4 / MXFP4): 4x3 513-531 / 341 / 382-413, 3x4
 * 446 / 338, 4x4 454 / 337 / 307 (spills), 4x2 427 / 299, 2x4 336 / 294,
 * 2x3 316 / 285. K-quants (1 thread, 256x2048 x 48 tokens from L2, GOP/s,
 * Q4_K / Q6_K, interleaved runs): 4x3 210-213 / 184-188, 3x4 222 / 183-186,
 * 3x3 205 / 180-184, 4x4 190 / -, 2x4 - / 175, 4x2 171 / 155. */
#define A8_4BIT_KERNELS(name, FMT, GEMM_R, GEMM_T)                                                                             \
    void moe_gemv_a8_##name##_avx512(const void *w, size_t rb, int64_t nrows, const void *xa, float *y,      \
                                     int64_t n) {                                                            \
        const uint8_t *W = w;                                                                                \
        const int64_t h = nrows / 2;                                                                         \
        if (n <= 8 * 32 && (FMT == FMT_NVFP4 || FMT == FMT_MXFP4 || FMT == FMT_Q4_0)) {                     \
            __m512i a[8], corr[2];                                                                           \
            __m512 da;                                                                                       \
            short_act(xa, a, corr, &da, FMT);                                                                \
            for (int64_t r = 0; r < h; r++)                                                                  \
                pair_4bit_short(W + (size_t)r * rb, W + (size_t)(r + h) * rb, a, corr, da, y + r, y + r + h, \
                                (int)(n / 32), FMT);                                                         \
        } else {                                                                                             \
            for (int64_t r = 0; r < h; r++)                                                                  \
                tile_4bit(W + (size_t)r * rb, (size_t)h * rb, xa, 0, y + r, 0, (size_t)h, n, 2, 1, FMT);     \
        }                                                                                                    \
        if (nrows & 1) tile_4bit(W + (size_t)(nrows - 1) * rb, rb, xa, 0, y + nrows - 1, 0, 1, n, 1, 1, FMT); \
    }                                                                                                        \
    void moe_gemm_a8_##name##_avx512(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs,     \
                                     int64_t ntok, float *y, size_t ys, int64_t n) {                         \
        const uint8_t *W = w, *X = xa;                                                                       \
        if (n <= (int64_t)A8P_MAXG * A8_G * 32 && ntok >= A8P_MIN_TOK) {                                    \
            panel_gemm(W, rb, nrows, X, xs, ntok, y, ys, n, FMT);                                            \
            return;                                                                                          \
        }                                                                                                    \
        /* a tile's rows r + i q, far apart (moe_gemm_a8_q8_0_avx512) */                                    \
        const int64_t q = nrows / GEMM_R;                                                                    \
        const size_t qs = (size_t)q * rb;                                                                    \
        for (int64_t r = 0; r < q; r++) {                                                                    \
            int64_t t = 0;                                                                                   \
            for (; t + GEMM_T <= ntok; t += GEMM_T)                                                          \
                tile_4bit(W + (size_t)r * rb, qs, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, (size_t)q, n, GEMM_R, GEMM_T, FMT); \
            /* 2 left over (a batched decode step's 2, 5, 8 tokens): one tile, the rows unpacked once */     \
            if (GEMM_T > 2 && ntok - t == 2)                                                                 \
                tile_4bit(W + (size_t)r * rb, qs, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, (size_t)q, n, GEMM_R, 2, FMT); \
            else                                                                                             \
            for (; t < ntok; t++)                                                                            \
                tile_4bit(W + (size_t)r * rb, qs, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, (size_t)q, n, GEMM_R, 1, FMT); \
        }                                                                                                    \
        for (int64_t r = GEMM_R * q; r < nrows; r++)                                                        \
            for (int64_t t = 0; t < ntok; t++)                                                               \
                tile_4bit(W + (size_t)r * rb, rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, 1, n, 1, 1, FMT); \
    }
A8_4BIT_KERNELS(nvfp4, FMT_NVFP4, 4, 3)
A8_4BIT_KERNELS(mxfp4, FMT_MXFP4, 4, 3)
A8_4BIT_KERNELS(q4_0, FMT_Q4_0, 4, 3)
A8_4BIT_KERNELS(q4_k, FMT_Q4_K, 4, 3)
A8_4BIT_KERNELS(q6_k, FMT_Q6_K, 4, 3)
