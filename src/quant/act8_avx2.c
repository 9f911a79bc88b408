/* act8_avx2.c — the act_q8 kernels with AVX2 (no VNNI), bit-identical to
 * act8_ref.c.
 *
 * Lanes. The layouts (act8_ref.c) put block j of a 16-block group at bytes
 * 4j..4j+3 of every 64-byte slab; a ymm holds half a slab: blocks 0..7
 * ("lo", lanes 0..7 of the contract) or 8..15 ("hi", lanes 8..15). So the
 * int32 lane of a ymm that covers bytes 4j..4j+3 is exactly block j's lane:
 * the block sums land where the float accumulators (lo, hi, as in
 * quant_avx2.c) need them, with no shuffles.
 *
 * The integer products. AVX2 has no vpdpbusd, and vpmaddubsw (u8 x s8,
 * pairs summed to int16 with SATURATION) is not exact here: two weight bytes
 * 255 against activations 127 give 64770 > 32767. Instead each 32 bytes are
 * split into their even and odd bytes as 16-bit words, with in-lane shifts
 * only (no pmovzx/unpack shuffles):
 *     weights (unsigned):   even = u & 0x00FF,        odd = u >> 8 (logical)
 *     activations (signed): even = (a << 8) >> 8,     odd = a >> 8 (arithmetic)
 * vpmaddwd(even_w, even_a) puts the products of bytes 4j and 4j+2 into dword
 * j, vpmaddwd(odd_w, odd_a) those of bytes 4j+1 and 4j+3: together block j's
 * four products of that slab. Each product is at most 255 * 128 in magnitude,
 * so nothing saturates or wraps, for any byte values (qw = -128 included,
 * and even activation bytes -128, which moe_quantize_act8 never writes). A
 * block sum starts from the activation's correction (corr = -128 * sum q,
 * read from the A8 row as the reference does) and adds the 8 slabs; being
 * exact integers, the order is free. Per 32 weight bytes and row x token
 * that is 2 vpmaddwd + 2 vpaddd, the same count as the usual sign trick
 * (vpsignb + vpmaddubsw + vpmaddwd + vpaddd), which is exact only for
 * activations != -128.
 *
 * The float steps are the contract's, lane by lane: S = dw * da (vcvtph2ps
 * is the exact f16 conversion), acc = fma((float)isum, S, acc), then the
 * fixed tree (lo + hi, +4, +2, +1). In a row's last, partial group (gn < 16
 * blocks) the weight slabs are read with dword-masked loads (vpmaskmovd: the
 * group is 34*gn bytes, and a plain 32-byte load would run past the row) and
 * the new accumulator values are blended in only for lanes j < gn, so an
 * absent lane keeps its bits, and garbage scales read past d[gn-1] (the
 * 16-byte scale load stays inside the group: 16 <= 34*gn) cannot leak in.
 *
 * Structure. tile_q8_0 does R rows x T tokens (compile-time constants):
 *   - gemv, 2 rows per tile (two independent chains, the activation shifts
 *     shared). The two rows of a tile are NOT neighbours: rows r and r + h
 *     (h = nrows/2) are paired. Reading two adjacent rows (2176 bytes apart
 *     for n = 2048) interleaved defeats the hardware stream prefetcher of
 *     the Zen 4 VM this was measured on: a 100352x2048 matrix from DRAM, one
 *     core, went at 9 GB/s with neighbour pairs, 26 GB/s one row at a time
 *     and 30 GB/s with distant pairs (software prefetch did not recover it).
 *     A row's value does not depend on its partner, so the pairing is free
 *     to choose. Each slab is done whole (lo and hi halves) per row: 4 int32
 *     sums + 4 float accumulators + 4 shifted halves + the constant = 13 ymm.
 *   - gemm, 4 rows x 2 tokens (the rows stay in L1 while all tokens pass):
 *     a half group at a time, so the live registers are the 8 int32 sums, the
 *     4 shifted activation halves (shared by the rows), 2 shifted weight
 *     halves and the 0x00FF constant; the 16 float accumulators do not fit
 *     and live in memory, touched once per half group (per 64 vpmaddwd).
 *     Measured (1 core, 256 rows x 64 tokens, weights in L2, GOP/s): 4x2 97,
 *     2x1 95, 4x1 91, 3x2 88, 2x2 78, 1x2 64 (this VM's speed moves by up
 *     to 40 % between runs; the order held). */
#include "quant/quant_internal.h"

#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
/* An empty asm that "changes" v. Integer additions are associative, and
 * without it GCC re-associates the unrolled chain of 8 slabs into a tree,
 * computing all products of a tile before adding them: many more live
 * registers than AVX2 has, and the spills cost a third of the speed. */
#define KEEP(v) __asm__("" : "+x"(v))

/* The tree of quant.h: a[l]+a[l+8] (lo + hi), then +4, +2, +1. */
ALWAYS_INLINE float hsum16(__m256 lo, __m256 hi) {
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

/* dword lanes of half h present in a group of gn blocks (lane l = block 8h + l) */
ALWAYS_INLINE __m256i live_lanes(int gn, int h) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(gn - 8 * h), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* 32 weight bytes at p (masked to the live dwords when PARTIAL) as their
 * even (ue) and odd (uo) bytes in 16-bit words. */
ALWAYS_INLINE void load_w(const uint8_t *p, __m256i live, __m256i *ue, __m256i *uo, const int PARTIAL) {
    const __m256i u = PARTIAL ? _mm256_maskload_epi32((const int *)p, live) : _mm256_loadu_si256((const __m256i *)p);
    *ue = _mm256_and_si256(u, _mm256_set1_epi16(0x00FF));
    *uo = _mm256_srli_epi16(u, 8);
}
/* The same for 32 activation bytes at p (signed: arithmetic shifts). */
ALWAYS_INLINE void load_a(const uint8_t *p, __m256i *ae, __m256i *ao) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)p);
    *ae = _mm256_srai_epi16(_mm256_slli_epi16(a, 8), 8);
    *ao = _mm256_srai_epi16(a, 8);
}
/* is += the products of one half slab: per dword, one block's 4 products. */
ALWAYS_INLINE __m256i dot_half(__m256i is, __m256i ue, __m256i uo, __m256i ae, __m256i ao) {
    is = _mm256_add_epi32(is, _mm256_madd_epi16(ue, ae));
    KEEP(is);
    is = _mm256_add_epi32(is, _mm256_madd_epi16(uo, ao));
    KEEP(is);
    return is;
}

/* acc = fma((float)is, dw * da, acc) for the lanes of half h; dw from the
 * row group's scales at G, da from the activation group at A. */
ALWAYS_INLINE __m256 fold(__m256 acc, __m256i is, const uint8_t *G, const uint8_t *A, int h, __m256i live,
                          const int PARTIAL) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(G + 16 * h)));
    const __m256 S = _mm256_mul_ps(dw, _mm256_loadu_ps((const float *)(A + 576 + 32 * h)));
    const __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), S, acc);
    return PARTIAL ? _mm256_blendv_ps(acc, v, _mm256_castsi256_ps(live)) : v;
}

/* Half h (blocks 8h..8h+7) of one group for R rows x T tokens: the rows'
 * groups at G + r*rs, the tokens' activation groups at A + t*xs, gn blocks. */
ALWAYS_INLINE void half_group(const uint8_t *G, size_t rs, const uint8_t *A, size_t xs, int gn, int h,
                              __m256 acc[4][2][2], const int R, const int T, const int PARTIAL) {
    const __m256i live = PARTIAL ? live_lanes(gn, h) : _mm256_set1_epi32(-1);
    __m256i is[4][2];
    UNROLL for (int t = 0; t < T; t++) {
        const __m256i c = _mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 512 + 32 * h));
        UNROLL for (int r = 0; r < R; r++) is[r][t] = c;
    }
    /* weight slab s: after the 2*gn bytes of scales, 4*gn bytes per slab (32 + 64 s in a full group) */
    UNROLL for (int s = 0; s < 8; s++) {
        __m256i ae[2], ao[2], ue, uo;
        UNROLL for (int t = 0; t < T; t++) load_a(A + (size_t)t * xs + 64 * s + 32 * h, &ae[t], &ao[t]);
        UNROLL for (int r = 0; r < R; r++) {
            load_w(G + (size_t)r * rs + 2 * gn + 4 * gn * s + 32 * h, live, &ue, &uo, PARTIAL);
            UNROLL for (int t = 0; t < T; t++) is[r][t] = dot_half(is[r][t], ue, uo, ae[t], ao[t]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        acc[r][t][h] = fold(acc[r][t][h], is[r][t], G + (size_t)r * rs, A + (size_t)t * xs, h, live, PARTIAL);
}

/* A full group for R rows x 1 token, slab by slab, both halves of a slab
 * together (the decode loop: each weight line is used whole when it comes). */
ALWAYS_INLINE void full_group_1tok(const uint8_t *G, size_t rs, const uint8_t *A, __m256 acc[4][2][2], const int R) {
    const __m256i all = _mm256_set1_epi32(-1);
    __m256i is[4][2];
    UNROLL for (int h = 0; h < 2; h++) {
        const __m256i c = _mm256_loadu_si256((const __m256i *)(A + 512 + 32 * h));
        UNROLL for (int r = 0; r < R; r++) is[r][h] = c;
    }
    UNROLL for (int s = 0; s < 8; s++) UNROLL for (int h = 0; h < 2; h++) {
        __m256i ae, ao, ue, uo;
        load_a(A + 64 * s + 32 * h, &ae, &ao);
        UNROLL for (int r = 0; r < R; r++) {
            load_w(G + (size_t)r * rs + 32 + 64 * s + 32 * h, all, &ue, &uo, 0);
            is[r][h] = dot_half(is[r][h], ue, uo, ae, ao);
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int h = 0; h < 2; h++)
        acc[r][0][h] = fold(acc[r][0][h], is[r][h], G + (size_t)r * rs, A, h, all, 0);
}

/* R rows x T tokens of Q8_0 (a8 layout): tile row r at w + r*rs, token t's
 * A8 row at xa + t*xs; outputs y[t*ys + r*yr]. */
ALWAYS_INLINE void tile_q8_0(const uint8_t *w, size_t rs, const uint8_t *xa, size_t xs, float *y, size_t ys,
                             size_t yr, int64_t n, const int R, const int T) {
    const int64_t nb = n / 32;
    __m256 acc[4][2][2];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) {
        acc[r][t][0] = _mm256_setzero_ps();
        acc[r][t][1] = _mm256_setzero_ps();
    }
    int64_t g0 = 0;
    for (; g0 + A8_G <= nb; g0 += A8_G) {
        const uint8_t *G = w + (size_t)g0 * QB_Q8_0, *A = xa + (size_t)(g0 / A8_G) * A8_GROUP_BYTES;
        if (T == 1) full_group_1tok(G, rs, A, acc, R);
        else {
            half_group(G, rs, A, xs, A8_G, 0, acc, R, T, 0);
            half_group(G, rs, A, xs, A8_G, 1, acc, R, T, 0);
        }
    }
    if (g0 < nb) {                       /* the row's last, partial group */
        const int gn = (int)(nb - g0);
        const uint8_t *G = w + (size_t)g0 * QB_Q8_0, *A = xa + (size_t)(g0 / A8_G) * A8_GROUP_BYTES;
        half_group(G, rs, A, xs, gn, 0, acc, R, T, 1);
        if (gn > 8) half_group(G, rs, A, xs, gn, 1, acc, R, T, 1);
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r * yr] = hsum16(acc[r][t][0], acc[r][t][1]);
}

/* Decode: rows r and r + h in one tile (h = nrows/2; see the top comment),
 * the odd row left over alone. */
void moe_gemv_a8_q8_0_avx2(const void *w, size_t rb, int64_t nrows, const void *xa, float *y, int64_t n) {
    const uint8_t *W = w;
    const int64_t h = nrows / 2;
    for (int64_t r = 0; r < h; r++) tile_q8_0(W + (size_t)r * rb, (size_t)h * rb, xa, 0, y + r, 0, (size_t)h, n, 2, 1);
    if (nrows & 1) tile_q8_0(W + (size_t)(nrows - 1) * rb, rb, xa, 0, y + nrows - 1, 0, 1, n, 1, 1);
}

/* Prefill: 4 rows x 2 tokens per tile; the 4 rows stay in L1 while all
 * tokens pass. */
void moe_gemm_a8_q8_0_avx2(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs, int64_t ntok,
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
