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
 * blocks) the weight slabs are read with load_run (plain loads inside the
 * slab where gn >= 8, dword-masked ones below: the group is 34*gn bytes, and
 * a plain 32-byte load could run past the row) and
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
 *     and 30 GB/s with distant pairs (software prefetch did not recover it;
 *     one-off measurements while choosing, not reproducible from the tree).
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

#include "quant/simd_avx2.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
/* An empty asm that "changes" v. Integer additions are associative, and
 * without it GCC re-associates the unrolled chain of 8 slabs into a tree,
 * computing all products of a tile before adding them: many more live
 * registers than AVX2 has, and the spills cost a third of the speed. */
#define KEEP(v) __asm__("" : "+x"(v))

/* dword lanes of half h present in a group of gn blocks (lane l = block 8h + l) */
ALWAYS_INLINE __m256i live_lanes(int gn, int h) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(gn - 8 * h), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Lane half h of a partial group's run of 4 gn bytes at p (4 bytes per
 * block: a Q8_0 slab, a 4-bit slab pair), blocks 8h.. in dwords 0..: with
 * gn >= 8, a plain load (h = 0: the run's first 32 bytes) or the run's last
 * 32 bytes moved down by vpermd (h = 1); only for gn < 8 a dword-masked
 * load (vpmaskmovd), which is slow when it misses the caches (measured on
 * this machine, 1024x256 Q8_0 from DRAM, 1 core: 8.6 GB/s with masked
 * loads for every row, 24 GB/s with plain ones; a one-off measurement).
 * Lanes past gn hold other
 * bytes of the run; the callers blend them away. */
ALWAYS_INLINE __m256i load_run(const uint8_t *p, int gn, int h, __m256i live) {
    if (gn >= 8) {
        if (!h) return _mm256_loadu_si256((const __m256i *)p);
        const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 4 * gn - 32));
        return _mm256_permutevar8x32_epi32(v, _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                                _mm256_set1_epi32(16 - gn)));
    }
    return _mm256_maskload_epi32((const int *)p, live);
}

/* Lane half h (bytes 32h..) of a full group's 64-byte run at p (a Q8_0
 * slab, a 4-bit slab pair), or of a partial group's run (load_run). */
ALWAYS_INLINE __m256i load_half(const uint8_t *p, int gn, int h, __m256i live, const int PARTIAL) {
    return PARTIAL ? load_run(p, gn, h, live) : _mm256_loadu_si256((const __m256i *)(p + 32 * h));
}

/* 32 weight bytes of lane half h of the slab at p (load_half) as their even
 * (ue) and odd (uo) bytes in 16-bit words. */
ALWAYS_INLINE void load_w(const uint8_t *p, int gn, int h, __m256i live, __m256i *ue, __m256i *uo, const int PARTIAL) {
    const __m256i u = load_half(p, gn, h, live, PARTIAL);
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
            load_w(G + (size_t)r * rs + 2 * gn + 4 * gn * s, gn, h, live, &ue, &uo, PARTIAL);
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
            load_w(G + (size_t)r * rs + 32 + 64 * s, A8_G, h, all, &ue, &uo, 0);
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

/* ---- a few tokens (batched decode): 2 rows x 4 tokens ----
 * At 4 tokens the 4x2 tile shifts each token's activation bytes apart
 * (load_a) once per 4 rows and each weight row's bytes once per 2 tokens:
 * a third of its instructions, while the vpmaddwd are half. For 4 or 8
 * tokens whose words fit X4_BYTES (the activations stay in L1 beside the
 * rows), their even and odd words are written once per call (expand_a) and
 * the tile takes 2 rows x 4 tokens, the activation words as vpmaddwd's
 * memory operands: a row's words are made once per 4 tokens. The block sums
 * are the same exact integers and fold is tile_q8_0's, so the bits are too.
 * With more words than X4_BYTES (row length 4096 at 4 tokens) the tile was
 * no faster than 4x2, so such rows keep the 4x2 tile. GCC's register
 * allocation of this loop is fragile: a variant that called the tile once
 * for a fixed 4 tokens ran slower than the 4x2 tile; keep the loop's shape
 * when changing it, and time it (docs/PERFORMANCE.md, "What moved the
 * numbers"). */
#define X4_BYTES 16384

/* Token row xa's codes as load_a's words: per group, slab s, half h, the
 * 16 even words then the 16 odd ones, at int16 (16 g + 2 s + h) * 32. */
static void expand_a(const uint8_t *xa, int64_t ng, int16_t *out) {
    for (int64_t g = 0; g < ng; g++)
        for (int sh = 0; sh < 16; sh++) {
            __m256i ae, ao;
            load_a(xa + (size_t)g * A8_GROUP_BYTES + 32 * (size_t)sh, &ae, &ao);
            _mm256_store_si256((__m256i *)(void *)(out + ((size_t)g * 16 + (size_t)sh) * 32), ae);
            _mm256_store_si256((__m256i *)(void *)(out + ((size_t)g * 16 + (size_t)sh) * 32 + 16), ao);
        }
}

/* half_group for 2 rows x 4 tokens, token t's words of this group at
 * X + t * xxs (expand_a). */
ALWAYS_INLINE void half_group_x4(const uint8_t *G, size_t rs, const uint8_t *A, size_t xs, const int16_t *X,
                                 size_t xxs, int gn, int h, __m256 acc[2][4][2], const int PARTIAL) {
    const __m256i live = PARTIAL ? live_lanes(gn, h) : _mm256_set1_epi32(-1);
    __m256i is[2][4];
    UNROLL for (int t = 0; t < 4; t++)
        is[0][t] = is[1][t] = _mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 512 + 32 * h));
    UNROLL for (int s = 0; s < 8; s++) UNROLL for (int r = 0; r < 2; r++) {
        __m256i ue, uo;
        load_w(G + (size_t)r * rs + 2 * gn + 4 * gn * s, gn, h, live, &ue, &uo, PARTIAL);
        UNROLL for (int t = 0; t < 4; t++) {
            const int16_t *x = X + (size_t)t * xxs + (size_t)(2 * s + h) * 32;
            is[r][t] = dot_half(is[r][t], ue, uo, _mm256_load_si256((const __m256i *)(const void *)x),
                                _mm256_load_si256((const __m256i *)(const void *)(x + 16)));
        }
    }
    UNROLL for (int r = 0; r < 2; r++) UNROLL for (int t = 0; t < 4; t++)
        acc[r][t][h] = fold(acc[r][t][h], is[r][t], G + (size_t)r * rs, A + (size_t)t * xs, h, live, PARTIAL);
}

/* tile_q8_0 for 2 rows (w, w + rs) x 4 tokens (xa + t * xs, their words at
 * X + t * xxs). */
static void tile_q8_0_x4(const uint8_t *w, size_t rs, const uint8_t *xa, size_t xs, const int16_t *X, size_t xxs,
                         float *y, size_t ys, size_t yr, int64_t n) {
    const int64_t nb = n / 32;
    __m256 acc[2][4][2];
    UNROLL for (int r = 0; r < 2; r++) UNROLL for (int t = 0; t < 4; t++)
        acc[r][t][0] = acc[r][t][1] = _mm256_setzero_ps();
    int64_t g0 = 0;
    for (; g0 + A8_G <= nb; g0 += A8_G) {
        const size_t g = (size_t)(g0 / A8_G);
        const uint8_t *G = w + (size_t)g0 * QB_Q8_0, *A = xa + g * A8_GROUP_BYTES;
        half_group_x4(G, rs, A, xs, X + g * 512, xxs, A8_G, 0, acc, 0);
        half_group_x4(G, rs, A, xs, X + g * 512, xxs, A8_G, 1, acc, 0);
    }
    if (g0 < nb) {
        const int gn = (int)(nb - g0);
        const size_t g = (size_t)(g0 / A8_G);
        const uint8_t *G = w + (size_t)g0 * QB_Q8_0, *A = xa + g * A8_GROUP_BYTES;
        half_group_x4(G, rs, A, xs, X + g * 512, xxs, gn, 0, acc, 1);
        if (gn > 8) half_group_x4(G, rs, A, xs, X + g * 512, xxs, gn, 1, acc, 1);
    }
    UNROLL for (int r = 0; r < 2; r++) UNROLL for (int t = 0; t < 4; t++)
        y[(size_t)t * ys + (size_t)r * yr] = hsum16(acc[r][t][0], acc[r][t][1]);
}

/* 4 or 8 tokens whose words fit X4_BYTES: rows r and r + h (h = nrows/2, as
 * the gemv pairs them) in 2 x 4 tiles, the odd last row alone; false for
 * other shapes. 5 to 7 tokens stay with the 4x2 tile: with the tokens past 4
 * in 2 x 2 and 2 x 1 tiles here, 6 and 7 ran slower than it. The loops for
 * tokens past a multiple of 4 do not run for 4 or 8, but they stay: GCC's
 * code for the tile loop depends on this function's shape, and without them
 * 8 tokens ran at half the speed of the 4x2 tile (docs/PERFORMANCE.md, "What
 * moved the numbers": time any change). */
static bool gemm_few_q8_0(const uint8_t *W, size_t rb, int64_t nrows, const uint8_t *X, size_t xs, int64_t ntok,
                          float *y, size_t ys, int64_t n) {
    const int64_t ng = (n / 32 + A8_G - 1) / A8_G;
    const size_t xxs = (size_t)ng * 512;   /* int16 words per token */
    if ((ntok != 4 && ntok != 8) || (size_t)ntok * xxs * 2 > X4_BYTES) return false;
    _Alignas(32) int16_t xw[X4_BYTES / 2];
    for (int64_t t = 0; t < ntok; t++) expand_a(X + (size_t)t * xs, ng, xw + (size_t)t * xxs);
    const int64_t h = nrows / 2, t4 = ntok / 4 * 4;
    for (int64_t r = 0; r < h; r++) {
        const uint8_t *wr = W + (size_t)r * rb;
        int64_t t = 0;
        for (; t < t4; t += 4)
            tile_q8_0_x4(wr, (size_t)h * rb, X + (size_t)t * xs, xs, xw + (size_t)t * xxs, xxs, y + (size_t)t * ys + r,
                         ys, (size_t)h, n);
        for (; t + 2 <= ntok; t += 2)
            tile_q8_0(wr, (size_t)h * rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, (size_t)h, n, 2, 2);
        if (t < ntok)
            tile_q8_0(wr, (size_t)h * rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, (size_t)h, n, 2, 1);
    }
    if (nrows & 1)
        for (int64_t t = 0; t < ntok; t++)
            tile_q8_0(W + (size_t)(nrows - 1) * rb, rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + nrows - 1, ys,
                      1, n, 1, 1);
    return true;
}

/* Decode: rows r and r + h in one tile (h = nrows/2; see the top comment),
 * the odd row left over alone. */
void moe_gemv_a8_q8_0_avx2(const void *w, size_t rb, int64_t nrows, const void *xa, float *y, int64_t n) {
    const uint8_t *W = w;
    const int64_t h = nrows / 2;
    for (int64_t r = 0; r < h; r++) tile_q8_0(W + (size_t)r * rb, (size_t)h * rb, xa, 0, y + r, 0, (size_t)h, n, 2, 1);
    if (nrows & 1) tile_q8_0(W + (size_t)(nrows - 1) * rb, rb, xa, 0, y + nrows - 1, 0, 1, n, 1, 1);
}

/* Prefill and batched decode: 4 rows x 2 tokens per tile; the 4 rows stay
 * in L1 while all tokens pass. A tile's rows are r + i q (q = nrows/4), far
 * apart, as in act8_avx512.c (adjacent rows from memory lose the
 * prefetcher at a few tokens). */
void moe_gemm_a8_q8_0_avx2(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs, int64_t ntok,
                           float *y, size_t ys, int64_t n) {
    const uint8_t *W = w, *X = xa;
    if (gemm_few_q8_0(W, rb, nrows, X, xs, ntok, y, ys, n)) return;
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

/* ---- the 4-bit formats (NVFP4, MXFP4, Q4_0) and Q4_K -----------------------
 * Codes become unsigned bytes u (act8_ref.c: vpshufb of the table kv + 12
 * for NVFP4 / MXFP4, the code itself for Q4_0), and vpmaddubsw (u8 x s8,
 * pairs summed to int16) is exact here: |u * q| <= 24 * 128, a pair <= 6144,
 * and 4 slabs of pairs summed in int16 (vpaddw) <= 24576 < 32767, for any
 * activation byte (-128 included). After 4 slabs vpmaddwd with ones widens
 * to the int32 block sums, which start from the correction (act8_ref.c).
 * Lane halves as for Q8_0: L = 0 covers blocks 0..7, L = 1 blocks 8..15. A
 * group's slab pair p gives, for lane half L (its bytes 32L..: a plain load
 * in a full group, load_run in a partial one), slab 2p in the low nibbles
 * and 2p + 1 in the high ones. Each lane half is done on its own (half the
 * live registers).
 * Q4_K: u = the nibble (0..15), so all 8 slabs fit in int16 (8 * 2 * 15 *
 * 128 = 30720) before one widening; sums start from 0. In a full group lane
 * half L is super-block L (its 16-byte header unpacked by q4k_scales8), a
 * partial group is one super-block (gn = 8, L = 0, plain loads). Each block
 * then takes the contract's two FMAs, the second -qsum * (m1 * da). Q6_K
 * follows after these. Prefill of 4 tokens or more (rows of n <= 8192)
 * takes the panel GEMM further below instead, for all five formats. */
enum { FMT_Q4_0, FMT_MXFP4, FMT_NVFP4, FMT_Q4_K, FMT_Q6_K };

/* moe_ue4m3_half[c | 0x80] of 8 canonical a8 scale bytes c (see
 * act8_avx512.c: c << 7 as an IEEE half times 2^7; never a subnormal
 * float into the multiply). */
ALWAYS_INLINE __m256 ue4m3_half8(__m128i bytes) {
    return _mm256_mul_ps(_mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(bytes), 7)), _mm256_set1_ps(0x1p7f));
}
/* moe_e8m0_half of 8 bytes: (e - 1) << 23 for e >= 2, 0x00200000 << e for e < 2. */
ALWAYS_INLINE __m256 e8m0_half8(__m128i bytes) {
    const __m256i e = _mm256_cvtepu8_epi32(bytes);
    const __m256i big = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(big, small, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
}

/* The weight scales of lane half L of a group of gn blocks (NVFP4: of half
 * h). Reads 8 (16 for Q4_0) bytes; in a partial group the dead lanes hold
 * other bytes of the group (never past it) and are blended away. */
ALWAYS_INLINE __m256 w_scales(const uint8_t *G, int gn, int h, int L, const int FMT) {
    if (FMT == FMT_Q4_0) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(G + 16 * L)));
    const __m128i b = _mm_loadl_epi64((const __m128i *)(G + (size_t)(h * gn) + 8 * L));
    return FMT == FMT_NVFP4 ? ue4m3_half8(b) : e8m0_half8(b);
}

/* Where the sums of part h (NVFP4: half h; others: the block) start, lane half L. */
ALWAYS_INLINE __m256i corr4(const uint8_t *A, int h, int L, const int FMT) {
    if (FMT == FMT_Q4_0) return _mm256_srai_epi32(_mm256_loadu_si256((const __m256i *)(A + 512 + 32 * L)), 4);
    const __m256i m12 = _mm256_set1_epi32(-12);
    if (FMT == FMT_NVFP4) return _mm256_mullo_epi32(_mm256_loadu_si256((const __m256i *)(A + 640 + 64 * h + 32 * L)), m12);
    return _mm256_mullo_epi32(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(A + 640 + 32 * L)),
                                               _mm256_loadu_si256((const __m256i *)(A + 704 + 32 * L))), m12);
}

ALWAYS_INLINE __m256i to_u(__m256i codes, __m256i tab, const int FMT) {
    return FMT == FMT_Q4_0 || FMT == FMT_Q4_K ? codes : _mm256_shuffle_epi8(tab, codes);
}

/* Q4_K: d1 = d * sc and m1 = dmin * m (act8_ref.c) of the 8 lanes of one
 * super-block from its 16-byte header at h (dwords: d | dmin << 16, then the
 * packed bytes u0, u1, u2), moe_q4k_unpack16 on dwords: sc0..3 = u0 & 0x3f,
 * sc4..7 = (u2 & 0xf) | (u0 >> 6) << 4, m0..3 = u1 & 0x3f, m4..7 = (u2 >> 4
 * & 0xf) | (u1 >> 6) << 4 ((x >> 6 & 3) << 4 = x >> 2 & 0x30 bytewise).
 * Exact products (11 x 6 bits), exact conversions; d and dmin broadcast-
 * loaded from moe_f16_f32_tab (the reference conversion, a load and no
 * vector instruction, where vcvtph2ps and two broadcasts took three in a
 * kernel bound by its vector instructions; docs/PERFORMANCE.md). */
ALWAYS_INLINE void q4k_scales8(const uint8_t *h, __m256 *d1, __m256 *m1) {
    const __m128i X = _mm_loadu_si128((const __m128i *)h);
    const __m128i Xp = _mm_shuffle_epi32(X, _MM_SHUFFLE(3, 2, 3, 1)); /* u0 u2 u1 u2 */
    const __m128i Xq = _mm_shuffle_epi32(X, _MM_SHUFFLE(2, 2, 1, 1)); /* u0 u0 u1 u1 */
    const __m128i lo = _mm_and_si128(Xp, _mm_set1_epi8(0x3F));
    const __m128i hi = _mm_or_si128(_mm_and_si128(_mm_srlv_epi32(Xp, _mm_setr_epi32(0, 0, 0, 4)), _mm_set1_epi8(0x0F)),
                                    _mm_and_si128(_mm_srli_epi32(Xq, 2), _mm_set1_epi8(0x30)));
    const __m128i v = _mm_blend_epi32(lo, hi, 0xA); /* sc0..7, m0..7 */
    const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(v, v)));
    *d1 = _mm256_mul_ps(_mm256_set1_ps(moe_f16_f32_tab[moe_rd16(h)]), sc);
    *m1 = _mm256_mul_ps(_mm256_set1_ps(moe_f16_f32_tab[moe_rd16(h + 2)]), m);
}

/* p16 += the products of slabs s0 .. s0+3 (pairs s0/2, s0/2 + 1), lane
 * half L, R rows (codes at C + r*rs) x T tokens. */
ALWAYS_INLINE void chunk4(const uint8_t *C, size_t rs, int gn, const uint8_t *A, size_t xs, int L, int s0,
                          __m256i live, __m256i p16[4][4], const int R, const int T, const int FMT, const int PARTIAL) {
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    UNROLL for (int i = 0; i < 2; i++) {
        const int p = s0 / 2 + i;
        __m256i a0[4], a1[4];
        UNROLL for (int t = 0; t < T; t++) {
            a0[t] = _mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 128 * p + 32 * L));
            a1[t] = _mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 128 * p + 64 + 32 * L));
        }
        UNROLL for (int r = 0; r < R; r++) {
            const __m256i z = load_half(C + (size_t)r * rs + (size_t)(4 * gn * p), gn, L, live, PARTIAL);
            const __m256i u0 = to_u(_mm256_and_si256(z, m4), tab, FMT);
            const __m256i u1 = to_u(_mm256_and_si256(_mm256_srli_epi16(z, 4), m4), tab, FMT);
            UNROLL for (int t = 0; t < T; t++) {
                p16[r][t] = _mm256_add_epi16(p16[r][t], _mm256_maddubs_epi16(u0, a0[t]));
                KEEP(p16[r][t]);
                p16[r][t] = _mm256_add_epi16(p16[r][t], _mm256_maddubs_epi16(u1, a1[t]));
                KEEP(p16[r][t]);
            }
        }
    }
}

/* acc = fma((float)is, sc * da, acc) for lane half L (blended into the live lanes of a partial group). */
ALWAYS_INLINE __m256 fold4(__m256 acc, __m256i is, __m256 sc, const uint8_t *A, int L, __m256i live, const int PARTIAL) {
    const __m256 S = _mm256_mul_ps(sc, _mm256_loadu_ps((const float *)(A + 576 + 32 * L)));
    const __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), S, acc);
    return PARTIAL ? _mm256_blendv_ps(acc, v, _mm256_castsi256_ps(live)) : v;
}

/* Lane half L of one group (gn blocks) for R rows (group at G + r*rs) x T
 * tokens (A8 group at A + t*xs). */
ALWAYS_INLINE void group4(const uint8_t *G, size_t rs, const uint8_t *A, size_t xs, int gn, int L,
                          __m256 acc[4][4][2], const int R, const int T, const int FMT, const int PARTIAL) {
    const int SB = FMT == FMT_MXFP4 ? 1 : 2;
    const uint8_t *C = G + (size_t)(SB * gn);
    const __m256i live = PARTIAL ? live_lanes(gn, L) : _mm256_set1_epi32(-1), ones = _mm256_set1_epi16(1);
    __m256i p16[4][4];
    if (FMT == FMT_Q4_K) {
        /* all 8 slabs in int16: |sum| <= 8 * 2 * 15 * 128 = 30720 */
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) p16[r][t] = _mm256_setzero_si256();
        chunk4(C, rs, gn, A, xs, L, 0, live, p16, R, T, FMT, PARTIAL);
        chunk4(C, rs, gn, A, xs, L, 4, live, p16, R, T, FMT, PARTIAL);
        __m256 da[4], qs[4];
        UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *At = A + (size_t)t * xs;
            da[t] = _mm256_loadu_ps((const float *)(At + 576 + 32 * L));
            qs[t] = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(At + 640 + 32 * L)),
                                                        _mm256_loadu_si256((const __m256i *)(At + 704 + 32 * L))));
        }
        UNROLL for (int r = 0; r < R; r++) {
            __m256 d1, m1;    /* lane half L is super-block L of the group */
            q4k_scales8(G + (size_t)r * rs + 16 * L, &d1, &m1);
            UNROLL for (int t = 0; t < T; t++) {
                __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p16[r][t], ones)), _mm256_mul_ps(d1, da[t]),
                                           acc[r][t][L]);
                v = _mm256_fnmadd_ps(qs[t], _mm256_mul_ps(m1, da[t]), v);
                acc[r][t][L] = PARTIAL ? _mm256_blendv_ps(acc[r][t][L], v, _mm256_castsi256_ps(live)) : v;
            }
        }
    } else if (FMT == FMT_NVFP4) {
        UNROLL for (int h = 0; h < 2; h++) {
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) p16[r][t] = _mm256_setzero_si256();
            chunk4(C, rs, gn, A, xs, L, 4 * h, live, p16, R, T, FMT, PARTIAL);
            UNROLL for (int r = 0; r < R; r++) {
                const __m256 sc = w_scales(G + (size_t)r * rs, gn, h, L, FMT);
                UNROLL for (int t = 0; t < T; t++) {
                    const __m256i is = _mm256_add_epi32(corr4(A + (size_t)t * xs, h, L, FMT), _mm256_madd_epi16(p16[r][t], ones));
                    acc[r][t][L] = fold4(acc[r][t][L], is, sc, A + (size_t)t * xs, L, live, PARTIAL);
                }
            }
        }
    } else {
        __m256i is[4][4];
        UNROLL for (int t = 0; t < T; t++) {
            const __m256i c = corr4(A + (size_t)t * xs, 0, L, FMT);
            UNROLL for (int r = 0; r < R; r++) is[r][t] = c;
        }
        UNROLL for (int c = 0; c < 2; c++) {
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) p16[r][t] = _mm256_setzero_si256();
            chunk4(C, rs, gn, A, xs, L, 4 * c, live, p16, R, T, FMT, PARTIAL);
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
                is[r][t] = _mm256_add_epi32(is[r][t], _mm256_madd_epi16(p16[r][t], ones));
        }
        UNROLL for (int r = 0; r < R; r++) {
            const __m256 sc = w_scales(G + (size_t)r * rs, gn, 0, L, FMT);
            UNROLL for (int t = 0; t < T; t++)
                acc[r][t][L] = fold4(acc[r][t][L], is[r][t], sc, A + (size_t)t * xs, L, live, PARTIAL);
        }
    }
}

/* ---- Q6_K -----------------------------------------------------------------
 * Lane half L of a group as for the 4-bit formats, the 6-bit codes u = the
 * nibbles | (hi >> 2s & 3) << 4 (act8_ref.c). vpmaddubsw is exact: |u * q| <=
 * 63 * 128, a pair <= 16128, two slabs summed in int16 <= 32256 (any
 * activation byte, -128 included); widened with vpmaddwd every two slabs.
 * Each half h of the blocks (slabs 4h .. 4h+3) starts from -32 hsum and
 * takes its own scale d * sc. */

/* The codes of slab 4h + s from its nibbles z (bits 4..7 undefined) and hi chunk h. */
ALWAYS_INLINE __m256i q6k_u8(__m256i z, __m256i H, const int s) {
    const __m256i hb = s == 0 ? _mm256_slli_epi16(H, 4) : s == 1 ? _mm256_slli_epi16(H, 2) : s == 2 ? H : _mm256_srli_epi16(H, 2);
    return _mm256_or_si256(_mm256_and_si256(z, _mm256_set1_epi8(0x0F)), _mm256_and_si256(hb, _mm256_set1_epi8(0x30)));
}

/* d * sc (exact) of half h of lane half L (= super-block L of the group);
 * d broadcast-loaded from moe_f16_f32_tab, as q4k_scales8's. */
ALWAYS_INLINE __m256 q6k_scales8(const uint8_t *G, int gn, int h, int L) {
    const __m256 d = _mm256_set1_ps(moe_f16_f32_tab[moe_rd16(G + 2 * L)]);
    const __m128i sc = _mm_loadl_epi64((const __m128i *)(G + 2 * (gn / 8) + gn * h + 8 * L));
    return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
}

/* Lane half L of one Q6_K group (gn = 16, or 8 when PARTIAL) for R rows x T tokens. */
ALWAYS_INLINE void group_q6k(const uint8_t *G, size_t rs, const uint8_t *A, size_t xs, int gn, int L,
                             __m256 acc[4][4][2], const int R, const int T, const int PARTIAL) {
    const uint8_t *C = G + (size_t)(18 * (gn / 8)), *HI = C + 16 * gn;
    const __m256i live = PARTIAL ? live_lanes(gn, L) : _mm256_set1_epi32(-1), ones = _mm256_set1_epi16(1);
    UNROLL for (int h = 0; h < 2; h++) {
        __m256i is[4][4], H[4];
        UNROLL for (int t = 0; t < T; t++) {
            const __m256i hs = _mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 640 + 64 * h + 32 * L));
            const __m256i c = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(hs, 5)); /* -32 hsum */
            UNROLL for (int r = 0; r < R; r++) is[r][t] = c;
        }
        UNROLL for (int r = 0; r < R; r++)
            H[r] = PARTIAL ? load_run(HI + (size_t)r * rs + (size_t)(4 * gn * h), gn, L, live)
                           : _mm256_loadu_si256((const __m256i *)(HI + (size_t)r * rs + 64 * h + 32 * L));
        UNROLL for (int i = 0; i < 2; i++) {          /* slabs 4h + 2i, 4h + 2i + 1 */
            const int s0 = 4 * h + 2 * i;
            __m256i a0[4], a1[4];
            UNROLL for (int t = 0; t < T; t++) {      /* a partial group's pair s0/2: the same activation slabs */
                a0[t] = _mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 64 * s0 + 32 * L));
                a1[t] = _mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 64 * s0 + 64 + 32 * L));
            }
            UNROLL for (int r = 0; r < R; r++) {
                const __m256i z0 = load_half(C + (size_t)r * rs + (size_t)(2 * gn * s0), gn, L, live, PARTIAL); /* pair s0/2 */
                const __m256i z1 = _mm256_srli_epi16(z0, 4);
                const __m256i u0 = q6k_u8(z0, H[r], 2 * i), u1 = q6k_u8(z1, H[r], 2 * i + 1);
                UNROLL for (int t = 0; t < T; t++) {
                    const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(u0, a0[t]), _mm256_maddubs_epi16(u1, a1[t]));
                    is[r][t] = _mm256_add_epi32(is[r][t], _mm256_madd_epi16(p16, ones));
                    KEEP(is[r][t]);
                }
            }
        }
        UNROLL for (int r = 0; r < R; r++) {
            const __m256 sc = q6k_scales8(G + (size_t)r * rs, gn, h, L);
            UNROLL for (int t = 0; t < T; t++)
                acc[r][t][L] = fold4(acc[r][t][L], is[r][t], sc, A + (size_t)t * xs, L, live, PARTIAL);
        }
    }
}

/* R rows x T tokens of a 4-bit format (a8 layout), as tile_q8_0. */
ALWAYS_INLINE void tile_4bit(const uint8_t *w, size_t rs, const uint8_t *xa, size_t xs, float *y, size_t ys,
                             size_t yr, int64_t n, const int R, const int T, const int FMT) {
    const int64_t nb = n / 32;
    const size_t BPB = FMT == FMT_MXFP4 ? 17 : 18;
    __m256 acc[4][4][2];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) {
        acc[r][t][0] = _mm256_setzero_ps();
        acc[r][t][1] = _mm256_setzero_ps();
    }
    int64_t g0 = 0;
    for (; g0 + A8_G <= nb; g0 += A8_G) {
        const uint8_t *A = xa + (size_t)(g0 / A8_G) * A8_GROUP_BYTES;
        if (FMT == FMT_Q6_K) {           /* 210 bytes per 8 blocks */
            const uint8_t *G = w + (size_t)(g0 / 8) * QB_Q6_K;
            group_q6k(G, rs, A, xs, A8_G, 0, acc, R, T, 0);
            group_q6k(G, rs, A, xs, A8_G, 1, acc, R, T, 0);
            continue;
        }
        const uint8_t *G = w + (size_t)g0 * BPB;
        group4(G, rs, A, xs, A8_G, 0, acc, R, T, FMT, 0);
        group4(G, rs, A, xs, A8_G, 1, acc, R, T, FMT, 0);
    }
    if (g0 < nb) {                       /* the row's last, partial group */
        const int gn = (int)(nb - g0);
        const uint8_t *A = xa + (size_t)(g0 / A8_G) * A8_GROUP_BYTES;
        if (FMT == FMT_Q6_K) group_q6k(w + (size_t)(g0 / 8) * QB_Q6_K, rs, A, xs, gn, 0, acc, R, T, 1); /* gn = 8 */
        else {
            const uint8_t *G = w + (size_t)g0 * BPB;
            group4(G, rs, A, xs, gn, 0, acc, R, T, FMT, 1);
            if (gn > 8) group4(G, rs, A, xs, gn, 1, acc, R, T, FMT, 1);
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r * yr] = hsum16(acc[r][t][0], acc[r][t][1]);
}

/* ---- prefill: the panel GEMM (act8_kquant_avx512.c says why) ---------------
 * As act8_kquant_avx2.c's panel_gemm: a panel of 4 rows is unpacked once per
 * block of A8P_TB tokens into pgroup records (per row, group and lane half
 * L: the 8 u slabs group4 / group_q6k make and the parts' scales: NVFP4's
 * and Q6_K's two halves, MXFP4's and Q4_0's one, Q4_K's d1 and m1; for the
 * K-quants lane half L is super-block L), then the block's tokens run over
 * it 4 x 2 at a time, lane half 0 over all groups, then half 1 (each lane's
 * FMAs stay in group order). A row's last group: the 4-bit formats' has any
 * gn of 1..15 blocks, read as tile_4bit reads it (load_run; its dead lanes
 * hold other bytes of the group) and blended into the live lanes only, and
 * has no half 1 when gn <= 8; the K-quants' is one super-block (gn = 8:
 * plain loads, every lane of half 0 live, no half 1, no blend). The integer
 * sums are the same exact int32 (vpmaddubsw into int16, widened by vpmaddwd
 * every two slabs: 2 * 2 * 63 * 128 = 32256 at most, Q6_K's codes), the
 * float steps the tile's in its order: its bits. */
typedef struct { __m256i u[8]; __m256 sc[2]; } pgroup;

/* Parts (FMAs from the int32 sums) per block: NVFP4 and Q6_K two halves. */
#define NPARTS(FMT) ((FMT) == FMT_NVFP4 || (FMT) == FMT_Q6_K ? 2 : 1)

/* Lane half L of row G's group (gn blocks: 16, or fewer in a row's last:
 * PARTIAL, live its live lanes; K-quants: gn = 8, PARTIAL = 0) into k. */
ALWAYS_INLINE void unpack_group(const uint8_t *G, int gn, int L, __m256i live, pgroup *k, const int FMT,
                                const int PARTIAL) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (FMT != FMT_Q6_K) {
        const int SB = FMT == FMT_MXFP4 ? 1 : 2; /* scale bytes per block, before the codes (Q4_K: the headers) */
        const __m256i tab = _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
        const uint8_t *C = G + SB * gn;
        UNROLL for (int p = 0; p < 4; p++) {
            const __m256i z = load_half(C + 4 * gn * p, gn, L, live, PARTIAL);
            k->u[2 * p] = to_u(_mm256_and_si256(z, m4), tab, FMT);
            k->u[2 * p + 1] = to_u(_mm256_and_si256(_mm256_srli_epi16(z, 4), m4), tab, FMT);
        }
        if (FMT == FMT_Q4_K) q4k_scales8(G + 16 * L, &k->sc[0], &k->sc[1]);
        else for (int h = 0; h < NPARTS(FMT); h++) k->sc[h] = w_scales(G, gn, h, L, FMT);
        return;
    }
    const uint8_t *C = G + 18 * (gn / 8), *HI = C + 16 * gn;
    UNROLL for (int h = 0; h < 2; h++) {
        const __m256i H = _mm256_loadu_si256((const __m256i *)(HI + 4 * gn * h + 32 * L));
        UNROLL for (int i = 0; i < 2; i++) {
            const int s0 = 4 * h + 2 * i;
            const __m256i z = _mm256_loadu_si256((const __m256i *)(C + 2 * gn * s0 + 32 * L));
            k->u[s0] = q6k_u8(z, H, 2 * i);
            k->u[s0 + 1] = q6k_u8(_mm256_srli_epi16(z, 4), H, 2 * i + 1);
        }
        k->sc[h] = q6k_scales8(G, gn, h, L);
    }
}

/* R rows (row r's record at K + r*ks) x T tokens of lane half L of one
 * group (PARTIAL: the new values blended into the lanes live only). */
ALWAYS_INLINE void panel_group(const pgroup *K, int64_t ks, const uint8_t *A, size_t xs, int L, __m256i live,
                               __m256 acc[4][4], const int R, const int T, const int FMT, const int PARTIAL) {
    const __m256i ones = _mm256_set1_epi16(1);
    if (FMT == FMT_Q4_K) {
        __m256i p16[4][4];        /* all 8 slabs in int16, as group4 */
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) p16[r][t] = _mm256_setzero_si256();
        UNROLL for (int s = 0; s < 8; s++) {
            __m256i a[4];
            UNROLL for (int t = 0; t < T; t++) a[t] = _mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 64 * s + 32 * L));
            UNROLL for (int r = 0; r < R; r++) {
                const __m256i u = _mm256_load_si256(&K[r * ks].u[s]);
                UNROLL for (int t = 0; t < T; t++) {
                    p16[r][t] = _mm256_add_epi16(p16[r][t], _mm256_maddubs_epi16(u, a[t]));
                    KEEP(p16[r][t]);
                }
            }
        }
        UNROLL for (int t = 0; t < T; t++) {
            const uint8_t *At = A + (size_t)t * xs;
            const __m256 da = _mm256_loadu_ps((const float *)(At + 576 + 32 * L));
            const __m256 qs = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_loadu_si256((const __m256i *)(At + 640 + 32 * L)),
                                                                  _mm256_loadu_si256((const __m256i *)(At + 704 + 32 * L))));
            UNROLL for (int r = 0; r < R; r++) {
                const __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p16[r][t], ones)),
                                                 _mm256_mul_ps(K[r * ks].sc[0], da), acc[r][t]);
                acc[r][t] = _mm256_fnmadd_ps(qs, _mm256_mul_ps(K[r * ks].sc[1], da), v);
            }
        }
        return;
    }
    const int NP = NPARTS(FMT), PPP = 4 / NP; /* parts; slab pairs per part */
    UNROLL for (int h = 0; h < NP; h++) {
        __m256i is[4][4];
        UNROLL for (int t = 0; t < T; t++) {
            __m256i c;
            if (FMT == FMT_Q6_K) { /* -32 hsum */
                const __m256i hs = _mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 640 + 64 * h + 32 * L));
                c = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(hs, 5));
            } else {
                c = corr4(A + (size_t)t * xs, h, L, FMT);
            }
            UNROLL for (int r = 0; r < R; r++) is[r][t] = c;
        }
        UNROLL for (int i = 0; i < PPP; i++) {
            const int s0 = 2 * (PPP * h + i);
            __m256i a0[4], a1[4];
            UNROLL for (int t = 0; t < T; t++) {
                a0[t] = _mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 64 * s0 + 32 * L));
                a1[t] = _mm256_loadu_si256((const __m256i *)(A + (size_t)t * xs + 64 * s0 + 64 + 32 * L));
            }
            UNROLL for (int r = 0; r < R; r++) {
                const __m256i u0 = _mm256_load_si256(&K[r * ks].u[s0]), u1 = _mm256_load_si256(&K[r * ks].u[s0 + 1]);
                UNROLL for (int t = 0; t < T; t++) {
                    const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(u0, a0[t]), _mm256_maddubs_epi16(u1, a1[t]));
                    is[r][t] = _mm256_add_epi32(is[r][t], _mm256_madd_epi16(p16, ones));
                    KEEP(is[r][t]);
                }
            }
        }
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
            acc[r][t] = fold4(acc[r][t], is[r][t], K[r * ks].sc[h], A + (size_t)t * xs, L, live, PARTIAL);
    }
}

/* R rows of the panel (records [row][group][half], ng groups, nb blocks) x T tokens -> y[t*ys + r]. */
ALWAYS_INLINE void panel_tile(const pgroup *P, int64_t ng, int64_t nb, const uint8_t *xa, size_t xs, float *y,
                              size_t ys, const int R, const int T, const int FMT) {
    const int KQ = FMT == FMT_Q4_K || FMT == FMT_Q6_K;
    const int64_t nfull = nb / A8_G;
    const int gn = (int)(nb - A8_G * nfull); /* the last, partial group's blocks (0: none) */
    const __m256i all = _mm256_set1_epi32(-1);
    __m256 acc[2][4][4];
    UNROLL for (int L = 0; L < 2; L++) {
        UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++) acc[L][r][t] = _mm256_setzero_ps();
        for (int64_t g = 0; g < nfull; g++)
            panel_group(P + 2 * g + L, 2 * ng, xa + (size_t)g * A8_GROUP_BYTES, xs, L, all, acc[L], R, T, FMT, 0);
        if (gn > 8 * L) {                    /* gn <= 8: no half 1 */
            const uint8_t *A = xa + (size_t)nfull * A8_GROUP_BYTES;
            if (KQ) panel_group(P + 2 * nfull + L, 2 * ng, A, xs, L, all, acc[L], R, T, FMT, 0);
            else panel_group(P + 2 * nfull + L, 2 * ng, A, xs, L, live_lanes(gn, L), acc[L], R, T, FMT, 1);
        }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int t = 0; t < T; t++)
        y[(size_t)t * ys + (size_t)r] = hsum16(acc[0][r][t], acc[1][r][t]);
}

ALWAYS_INLINE void panel_tokens(const pgroup *P, int64_t ng, int64_t nb, const uint8_t *xa, size_t xs, int64_t nt,
                                float *y, size_t ys, const int R, const int FMT) {
    int64_t t = 0;
    for (; t + 2 <= nt; t += 2) panel_tile(P, ng, nb, xa + (size_t)t * xs, xs, y + (size_t)t * ys, ys, R, 2, FMT);
    for (; t < nt; t++) panel_tile(P, ng, nb, xa + (size_t)t * xs, xs, y + (size_t)t * ys, ys, R, 1, FMT);
}

#define A8P_R 4        /* rows per panel */
#define A8P_TB 64      /* tokens per block */
#define A8P_MAXG 16    /* groups per row in the panel buffer (n <= 8192; 40 KB of stack) */
/* Fewer tokens than this (decode's experts: 1 token each) keep tile_4bit: a
 * panel unpacked for them costs more than unpacking in registers. */
#define A8P_MIN_TOK 4

/* Rows of n <= 32 * A8_G * A8P_MAXG of any 4-bit format or K-quant; all 4
 * rows of a panel x 2 tokens per tile: the accumulators leave registers once
 * per group, and a tile of 2 rows (act8_kquant_avx2.c's) ran slower in
 * bench_quant here (K-quants). */
ALWAYS_INLINE void panel_gemm(const uint8_t *W, size_t rb, int64_t nrows, const uint8_t *X, size_t xs, int64_t ntok,
                              float *y, size_t ys, int64_t n, const int FMT) {
    const int64_t nb = n / 32, ng = (nb + A8_G - 1) / A8_G;
    /* bytes per group: two super-blocks (K-quants), 16 blocks of BPB */
    const size_t GBYTES = FMT == FMT_Q6_K ? 2 * QB_Q6_K : FMT == FMT_Q4_K ? 2 * QB_Q4_K
                        : (size_t)A8_G * (FMT == FMT_MXFP4 ? 17 : 18);
    const __m256i all = _mm256_set1_epi32(-1);
    _Alignas(32) pgroup P[A8P_R * A8P_MAXG * 2];
    for (int64_t t0 = 0; t0 < ntok; t0 += A8P_TB) {
        const int64_t nt = ntok - t0 < A8P_TB ? ntok - t0 : A8P_TB;
        for (int64_t r = 0; r < nrows; r += A8P_R) {
            const int R = nrows - r < A8P_R ? (int)(nrows - r) : A8P_R;
            for (int rr = 0; rr < R; rr++)
                for (int64_t g = 0; g < ng; g++) {
                    const uint8_t *G = W + (size_t)(r + rr) * rb + (size_t)g * GBYTES;
                    pgroup *k = &P[(rr * ng + g) * 2];
                    const int gn = (int)(nb - A8_G * g);
                    if (gn >= A8_G) {
                        unpack_group(G, A8_G, 0, all, k, FMT, 0);
                        unpack_group(G, A8_G, 1, all, k + 1, FMT, 0);
                    } else if (FMT == FMT_Q4_K || FMT == FMT_Q6_K) {
                        unpack_group(G, 8, 0, all, k, FMT, 0);   /* one super-block */
                    } else {
                        unpack_group(G, gn, 0, live_lanes(gn, 0), k, FMT, 1);
                        if (gn > 8) unpack_group(G, gn, 1, live_lanes(gn, 1), k + 1, FMT, 1);
                    }
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

/* gemv (rows r and r + nrows/2 paired, as for Q8_0) and gemm (4 rows x 2
 * tokens) of each 4-bit format. The gemm tile, measured (bench_quant, AVX2, 512x2048 x 512 tokens, 2
 * threads, GOP/s, Q4_0 / NVFP4 / MXFP4): 4x2 323 / 235 / 252, 3x2 297 / 220
 * / 248, 4x3 262 / 219 / 216, 4x1 317 / 176 / 227, 2x2 235 / 186 / 198.
 * K-quants (1 thread, 256x2048 x 48 tokens from L2, GOP/s, Q4_K / Q6_K,
 * interleaved runs): 4x2 135-145 / 100-101, 4x3 142 / -, 3x2 138 / 98,
 * 2x3 120 / 100-101, 2x2 117 / 98-99, 4x1 101 / 75, 2x1 - / 80. */
#define A8_4BIT_KERNELS(name, FMT, GEMM_R, GEMM_T)                                                                             \
    void moe_gemv_a8_##name##_avx2(const void *w, size_t rb, int64_t nrows, const void *xa, float *y,        \
                                   int64_t n) {                                                              \
        const uint8_t *W = w;                                                                                \
        const int64_t h = nrows / 2;                                                                         \
        for (int64_t r = 0; r < h; r++)                                                                      \
            tile_4bit(W + (size_t)r * rb, (size_t)h * rb, xa, 0, y + r, 0, (size_t)h, n, 2, 1, FMT);         \
        if (nrows & 1) tile_4bit(W + (size_t)(nrows - 1) * rb, rb, xa, 0, y + nrows - 1, 0, 1, n, 1, 1, FMT); \
    }                                                                                                        \
    void moe_gemm_a8_##name##_avx2(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs,       \
                                   int64_t ntok, float *y, size_t ys, int64_t n) {                           \
        const uint8_t *W = w, *X = xa;                                                                       \
        if (n <= (int64_t)A8P_MAXG * A8_G * 32 && ntok >= A8P_MIN_TOK) {                                    \
            panel_gemm(W, rb, nrows, X, xs, ntok, y, ys, n, FMT);                                            \
            return;                                                                                          \
        }                                                                                                    \
        /* a tile's rows r + i q, far apart (moe_gemm_a8_q8_0_avx2) */                                      \
        const int64_t q = nrows / GEMM_R;                                                                    \
        const size_t qs = (size_t)q * rb;                                                                    \
        for (int64_t r = 0; r < q; r++) {                                                                    \
            int64_t t = 0;                                                                                   \
            for (; t + GEMM_T <= ntok; t += GEMM_T)                                                          \
                tile_4bit(W + (size_t)r * rb, qs, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, (size_t)q, n, GEMM_R, GEMM_T, FMT); \
            for (; t < ntok; t++)                                                                            \
                tile_4bit(W + (size_t)r * rb, qs, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, (size_t)q, n, GEMM_R, 1, FMT); \
        }                                                                                                    \
        for (int64_t r = GEMM_R * q; r < nrows; r++)                                                        \
            for (int64_t t = 0; t < ntok; t++)                                                               \
                tile_4bit(W + (size_t)r * rb, rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, 1, n, 1, 1, FMT); \
    }
A8_4BIT_KERNELS(nvfp4, FMT_NVFP4, 4, 2)
A8_4BIT_KERNELS(mxfp4, FMT_MXFP4, 4, 2)
A8_4BIT_KERNELS(q4_0, FMT_Q4_0, 4, 2)
A8_4BIT_KERNELS(q4_k, FMT_Q4_K, 4, 2)
A8_4BIT_KERNELS(q6_k, FMT_Q6_K, 4, 2)
