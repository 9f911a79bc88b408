/* quant_internal.h — what the scalar reference shares with the SIMD kernel
 * files and the dispatcher (src/quant/ only). */
#ifndef MOE_QUANT_INTERNAL_H
#define MOE_QUANT_INTERNAL_H

#include <string.h>
#include "quant/quant.h"

/* Block sizes in bytes, QB_Q8_0 ... (ggml layouts, spelled out in
 * quant_ref.c), as compile-time constants from the type table (types.h):
 *   Q8_0  34  f16 d, int8 qs[32]          Q4_0  18  f16 d, uint8 qs[16]
 *   Q4_K 144  f16 d, f16 dmin, uint8 scales[12], uint8 qs[128]
 *   Q6_K 210  uint8 ql[128], uint8 qh[64], int8 scales[16], f16 d
 *   MXFP4 17  uint8 e, uint8 qs[16]       NVFP4 36  uint8 d[4], uint8 qs[32] */
#define MOE_QB_(N, id, blk, bytes, k, x4, a8, ft) QB_##N = bytes,
enum { MOE_TYPES(MOE_QB_) };
#undef MOE_QB_

/* ggml's kvalues_mxfp4: twice the E2M1 values (so they are integers); code 8
 * is +0 (an int8 0), not -0. Used by MXFP4 and NVFP4. */
extern const int8_t moe_kvalues_fp4[16];
/* The same values as floats (exact), for SIMD tables. */
extern const float moe_kvalues_fp4_f[16];
/* ggml's kvalues_iq4nl, the IQ4_NL levels (quant_ref.c), and as floats. */
extern const int8_t moe_kvalues_iq4nl[16];
extern const float moe_kvalues_iq4nl_f[16];
/* Half of the UE4M3 value of each scale byte, exactly ggml_ue4m3_to_fp32():
 * bit 7 ignored, 0x00 and 0x7F give 0, exponent 15 decodes like any other. */
extern const float moe_ue4m3_half[256];
/* Every NVFP4 weight value, by scale byte and code: moe_kvalues_fp4_f[c] *
 * moe_ue4m3_half[b], the exact product the dequantizers form (signed zeros
 * included), 64-byte rows: AVX-512 loads a sub-block's 16 values with one
 * load instead of a broadcast and a multiply (bench_quant NVFP4 gemv +8 %
 * in L2). A compile-time table (quant_ref.c). */
extern const float moe_nvfp4_wtab[256][16];
/* Every IEEE half as a float (moe_f16_to_f32, exact), filled once before any
 * kernel table is handed out (moe_quant_init_tables, from isa.c). Why: the FP32-contract Q8_0 and
 * Q4_0 dequantizers need each block's scale in all lanes, and a broadcast
 * load from this table is a plain load (or a multiply's embedded broadcast),
 * where converting the half in a register took an insert, a conversion and a
 * broadcast on the vector pipes those kernels are bound by (bench_quant,
 * AVX-512, one core, weights in L2: Q8_0 19.7-20.8 -> 21.8-22.2 GB/s, Q4_0
 * 11.6 -> 14.8-14.9). Filling it costs ~0.25 ms once (the first kernel
 * table handed out). 256 KB,
 * of which a model's scales touch a few lines. */
extern float moe_f16_f32_tab[65536];
/* moe_e8m0_half of every byte, filled alongside: MXFP4's block scales, the
 * same reason (the same rows: MXFP4 9.5-11.5 -> 13.9-14.0 GB/s). */
extern float moe_e8m0_half_tab[256];
/* Fills the two tables above; isa.c calls it once, before any descriptor
 * (and so any kernel table) is handed out. */
void moe_quant_init_tables(void);
/* ggml's GGML_E8M0_TO_FP32_HALF(e) = 2^(e-128) (e = 0 and 1 are subnormal). */
static inline float moe_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f; memcpy(&f, &bits, 4); return f;
}
/* Q4_K: 6-bit scale and min j (0..7) from the 12 packed bytes (ggml's get_scale_min_k4). */
static inline void moe_q4k_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63; *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m  = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}
/* All 8 Q4_K scales and mins at once, as 16 bytes {sc0..sc7, m0..m7}: the
 * same unpacking as moe_q4k_scale_min, done on 32-bit words (the SIMD
 * kernels convert the 16 bytes in one go). */
static inline void moe_q4k_unpack16(const uint8_t *q, uint8_t out[16]) {
    uint32_t u[4];
    memcpy(u, q, 12);
    const uint32_t m1 = 0x3f3f3f3fu, m2 = 0x0f0f0f0fu, m3 = 0x03030303u;
    u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
    const uint32_t mins_lo = u[1] & m1;
    u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
    u[2] = mins_lo;
    u[0] &= m1;
    memcpy(out, u, 16);
}
static inline uint16_t moe_rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline void moe_st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
/* ggml's nearest_int: round half to even via the 1.5*2^23 trick (|f| < 2^22);
 * the quantizers and the A8 activation rows round with it. */
static inline int moe_nearest_int(float f) {
    float v = f + 12582912.f;
    int i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}
/* ggml's make_qkx2_quants(n, nmax, x, weights, L, &min, Laux, rmin, rdelta,
 * nstep, use_mad): the scale (returned) and -min of a block's codes 0..nmax
 * by weighted least squares over nstep + 1 trial scales (quant_ref.c; Q4_K,
 * Q5_K, Q2_K). */
float moe_make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                           uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad);
/* The first half of ggml's Q4_K / Q5_K quantizers: per 32-value sub-block
 * a scale and min (moe_make_qkx2_quants, nmax, rmin, nstep), packed as 6-bit
 * pairs into y[4..16) with the f16 d / dmin in y[0..4), then every value's
 * code 0..nmax against those rounded scales into L[256]. */
void moe_k4_scales_codes(const float *x, uint8_t *y, uint8_t *L, int nmax, float rmin, int nstep);
static inline uint64_t moe_rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* The gemv / gemm entry points of a block format, shared by the SIMD files:
 * each file defines tile_NAME(w, row_step, x, xs, y, ys, n, R, T, S) (R rows x
 * T tokens; block b of tile row rr at w + rr*row_step + b*S*block_bytes) and
 * gemm_body_NAME(..., x4, block_bytes); these wrap them for the plain and the
 * x4 layouts (quant.h). */
#define DEF_BLOCK_DRIVERS(NAME, QBYTES)                                                            \
    static void gemv_##NAME(const void *w, size_t rb, int64_t nrows, const float *x, float *y,     \
                            int64_t n) {                                                           \
        const uint8_t *W = w;                                                                      \
        int64_t r = 0;                                                                             \
        for (; r + 4 <= nrows; r += 4) tile_##NAME(W + r * rb, rb, x, 0, y + r, 0, n, 4, 1, 1);    \
        for (; r < nrows; r++) tile_##NAME(W + r * rb, rb, x, 0, y + r, 0, n, 1, 1, 1);            \
    }                                                                                              \
    /* x4 layout (quant.h): a group of 4 rows is one sequential stream */                        \
    static void gemv_x4_##NAME(const void *w, size_t rb, int64_t nrows, const float *x, float *y,  \
                               int64_t n) {                                                        \
        const uint8_t *W = w;                                                                      \
        int64_t r = 0;                                                                             \
        for (; r + 4 <= nrows; r += 4) tile_##NAME(W + r * rb, QBYTES, x, 0, y + r, 0, n, 4, 1, 4); \
        for (; r < nrows; r++) tile_##NAME(W + r * rb, rb, x, 0, y + r, 0, n, 1, 1, 1);            \
    }                                                                                              \
    static void gemm_##NAME(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs,   \
                            int64_t ntok, float *y, size_t ys, int64_t n) {                        \
        gemm_body_##NAME(w, rb, nrows, x, xs, ntok, y, ys, n, 0, QBYTES);                          \
    }                                                                                              \
    static void gemm_x4_##NAME(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs,\
                               int64_t ntok, float *y, size_t ys, int64_t n) {                     \
        gemm_body_##NAME(w, rb, nrows, x, xs, ntok, y, ys, n, 1, QBYTES);                          \
    }

/* The gemm driver of F32/F16/BF16 rows, plain or x4 layout, shared by the
 * SIMD files: tokens in blocks of 32 (their activations stay in L2 while
 * the rows stream by); the rows of the full groups of 4, RS at a time, by
 * GROUP(W, r, rb, x, xs, y, ys, n, T) over all tokens of the block, TT at a
 * time, then the 1..TT-1 left over in one call where TT allows (a batched
 * decode step's 2, 3, 5, 6 tokens: the rows dequantized once for them, not
 * once per token), else 1 at a time (so a tile's rows stay in L1 across the
 * block); the last
 * nrows % 4 rows (plain in both layouts) by TILE1(row, rb, x, xs, y, ys, 1,
 * n, 1, T). */
#define MOE_DEF_PLAIN_GEMM(FNAME, GROUP, TILE1, RS, TT)                                            \
    static void FNAME(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs,          \
                      int64_t ntok, float *y, size_t ys, int64_t n) {                              \
        const uint8_t *W = w;                                                                      \
        const int64_t full = nrows - nrows % 4;                                                    \
        for (int64_t t0 = 0; t0 < ntok; t0 += 32) {                                                \
            const int64_t t1 = t0 + 32 < ntok ? t0 + 32 : ntok;                                    \
            int64_t r = 0;                                                                         \
            for (; r < full; r += (RS)) {                                                          \
                int64_t t = t0;                                                                    \
                for (; t + (TT) <= t1; t += (TT)) GROUP(W, r, rb, x + t * xs, xs, y + t * ys + r, ys, n, TT); \
                if ((TT) > 3 && t1 - t == 3)                                                       \
                    GROUP(W, r, rb, x + t * xs, xs, y + t * ys + r, ys, n, (TT) > 3 ? 3 : 1);      \
                else if ((TT) > 2 && t1 - t == 2)                                                  \
                    GROUP(W, r, rb, x + t * xs, xs, y + t * ys + r, ys, n, (TT) > 2 ? 2 : 1);      \
                else                                                                               \
                    for (; t < t1; t++) GROUP(W, r, rb, x + t * xs, xs, y + t * ys + r, ys, n, 1); \
            }                                                                                      \
            for (; r < nrows; r++) {                                                               \
                int64_t t = t0;                                                                    \
                for (; t + (TT) <= t1; t += (TT))                                                  \
                    TILE1(W + r * rb, rb, x + t * xs, xs, y + t * ys + r, ys, 1, n, 1, TT);        \
                for (; t < t1; t++) TILE1(W + r * rb, rb, x + t * xs, xs, y + t * ys + r, ys, 1, n, 1, 1); \
            }                                                                                      \
        }                                                                                          \
    }

/* ---- gemm_wide (flag gemm_wide): the driver shared by the SIMD files ----
 * Each file defines, for a format NAME, fill_NAME(g, rs, S, R, k0, kc, wb,
 * st): values [k0, k0+kc) of the R (<= 4) rows of a group (row rr at g +
 * rr*rs, block stride S: 4 in an x4 group, else 1) as exact FP32 weights in
 * wb[k/16][row][16]; and wide_tiles(wb, kc/16, x, xs, nt, sp, first, last,
 * y, ys, R): all nt tokens of a block against that chunk (first: start the
 * sums from zero, else from those parked at sp; last: store them, else park
 * them). quant_avx512.c explains the why. */
#define WIDE_KC 1024             /* values per dequantized chunk: 16 KB of FP32 for 4 rows */
#define WIDE_TB 96               /* tokens per block: a multiple of every level's tile (6, 3) */
#define WIDE_SPILL (WIDE_TB * 4 * 16) /* floats of parked sums: 4 rows x 16 lanes per token */

/* Asks for the bytes the next fill will read (the same values [k0, k0+kc)
 * of the next group of 4 rows) while this group's tiles run: a fill from
 * memory otherwise waits on ~70-130 cache lines per group, about a third of
 * the compute of a 32-token block (measured at AVX-512: BF16 512x1024, 32
 * tokens, 79 -> 98 GFLOP/s). Into L2 (locality 2): the buffer and the
 * tiles' activations own L1. */
static inline void moe_wide_prefetch(const uint8_t *W, size_t rb, int64_t nrows, int64_t n, int64_t r, int64_t k0,
                                     int64_t kc, int x4) {
    const int64_t nr = r + 4;
    if (nr >= nrows) return;
    const int nx = nrows - nr < 4 ? (int)(nrows - nr) : 4;
    const size_t b0 = (size_t)((uint64_t)k0 * rb / (uint64_t)n), b1 = (size_t)((uint64_t)(k0 + kc) * rb / (uint64_t)n);
    if (x4 && nx == 4) {                    /* an x4 group: values [k0, k0+kc) of its rows are one range */
        const uint8_t *g = W + nr * rb;
        for (size_t o = 4 * b0; o < 4 * b1; o += 64) __builtin_prefetch(g + o, 0, 2);
    } else {
        for (int rr = 0; rr < nx; rr++)
            for (size_t o = b0; o < b1; o += 64) __builtin_prefetch(W + (nr + rr) * rb + o, 0, 2);
    }
}

/* wide_tiles(wb, nk, x, xs, nt, sp, first, last, y, ys, R): each SIMD file's
 * wide_tiles_r with the group's real row count R as a compile-time constant. */
#define MOE_DEF_WIDE_TILES                                                                         \
    static void wide_tiles(const float *wb, int64_t nk, const float *x, size_t xs, int64_t nt, float *sp, \
                           int first, int last, float *y, size_t ys, int R) {                      \
        switch (R) {                                                                               \
        case 4: wide_tiles_r(wb, nk, x, xs, nt, sp, first, last, y, ys, 4); break;                 \
        case 3: wide_tiles_r(wb, nk, x, xs, nt, sp, first, last, y, ys, 3); break;                 \
        case 2: wide_tiles_r(wb, nk, x, xs, nt, sp, first, last, y, ys, 2); break;                 \
        default: wide_tiles_r(wb, nk, x, xs, nt, sp, first, last, y, ys, 1); break;                \
        }                                                                                          \
    }

/* gemm_wide_body_NAME: token blocks of WIDE_TB, groups of 4 rows, chunks of
 * WIDE_KC values; rows R..3 of a partial group are zeros in the buffer
 * (their sums are never stored). The buffer and the parked sums live on the
 * stack: 40 KB per call, on the pool's threads (glibc's default 8 MB stacks)
 * or the caller's. */
#define DEF_WIDE_BODY(NAME, FILL, QBYTES)                                                          \
    static inline __attribute__((always_inline)) void gemm_wide_body_##NAME(                       \
        const void *w, size_t rb, int64_t nrows, const float *x, size_t xs, int64_t ntok, float *y, \
        size_t ys, int64_t n, const int x4) {                                                      \
        _Alignas(64) float wb[WIDE_KC * 4];                                                        \
        _Alignas(64) float sp[WIDE_SPILL];                                                         \
        float st[4][16];                                                                           \
        const uint8_t *W = w;                                                                      \
        for (int64_t t0 = 0; t0 < ntok; t0 += WIDE_TB) {                                           \
            const int64_t nt = ntok - t0 < WIDE_TB ? ntok - t0 : WIDE_TB;                          \
            for (int64_t r = 0; r < nrows; r += 4) {                                               \
                const int R = nrows - r < 4 ? (int)(nrows - r) : 4;                                \
                const int grp = x4 && R == 4;  /* an x4 group (the last nrows % 4 rows are plain) */ \
                if (R < 4) memset(wb, 0, sizeof wb);                                               \
                for (int64_t k0 = 0; k0 < n; k0 += WIDE_KC) {                                      \
                    const int64_t kc = n - k0 < WIDE_KC ? n - k0 : WIDE_KC;                        \
                    moe_wide_prefetch(W, rb, nrows, n, r, k0, kc, x4);                             \
                    FILL(W + r * rb, grp ? (QBYTES) : rb, grp ? 4 : 1, R, k0, kc, wb, st);        \
                    wide_tiles(wb, kc / 16, x + t0 * xs + k0, xs, nt, sp, k0 == 0, k0 + kc == n,   \
                               y + t0 * ys + r, ys, R);                                            \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

/* The block formats with a wide kernel at both SIMD levels:
 * X(name, values per dequantized part, 16-value chunks per part, block bytes) */
#define MOE_WIDE_FORMATS(X)                                                                        \
    X(q8_0, 32, 2, QB_Q8_0) X(q4_0, 32, 2, QB_Q4_0) X(mxfp4, 32, 2, QB_MXFP4)                      \
    X(q4_1, 32, 2, QB_Q4_1) X(q5_0, 32, 2, QB_Q5_0) X(q5_1, 32, 2, QB_Q5_1) X(iq4_nl, 32, 2, QB_IQ4_NL) \
    X(nvfp4, 64, 4, QB_NVFP4) X(q4_k, 64, 4, QB_Q4_K) X(q6_k, 64, 4, QB_Q6_K)

/* fill_NAME for a block format: each file defines WIDE_PART(NAME, NV, row,
 * i, st, S, o), which dequantizes part i of one row (dq_NAME) and stores its
 * NV 16-value chunks at o, o + 64, ... (the buffer's [k/16][row][16]). */
#define DEF_WIDE_FILL(NAME, SUBV, NV)                                                              \
    static inline __attribute__((always_inline)) void fill_##NAME(                                 \
        const uint8_t *g, size_t rs, const int S, int R, int64_t k0, int64_t kc, float *wb, float (*st)[16]) { \
        const int64_t i0 = k0 / (SUBV), i1 = (k0 + kc) / (SUBV);                                   \
        for (int64_t i = i0; i < i1; i++) {                                                        \
            _Pragma("GCC unroll 4") for (int rr = 0; rr < 4; rr++) {                               \
                if (rr >= R) break;                                                                \
                WIDE_PART(NAME, NV, g + rr * rs, i, st[rr], S, wb + ((i - i0) * (NV) * 4 + rr) * 16); \
            }                                                                                      \
        }                                                                                          \
    }

/* The plain and x4 entry points of a block format over fill_NAME (the
 * block stride S made a compile-time constant for the dequantizers). */
#define DEF_WIDE_ENTRIES(NAME, QBYTES)                                                             \
    static inline __attribute__((always_inline)) void fill_s_##NAME(                               \
        const uint8_t *g, size_t rs, int S, int R, int64_t k0, int64_t kc, float *wb, float (*st)[16]) { \
        if (S == 4) fill_##NAME(g, rs, 4, R, k0, kc, wb, st);                                      \
        else fill_##NAME(g, rs, 1, R, k0, kc, wb, st);                                             \
    }                                                                                              \
    DEF_WIDE_BODY(NAME, fill_s_##NAME, QBYTES)                                                     \
    static void gemm_wide_##NAME(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs, \
                                 int64_t ntok, float *y, size_t ys, int64_t n) {                   \
        gemm_wide_body_##NAME(w, rb, nrows, x, xs, ntok, y, ys, n, 0);                             \
    }                                                                                              \
    static void gemm_wide_x4_##NAME(const void *w, size_t rb, int64_t nrows, const float *x,       \
                                    size_t xs, int64_t ntok, float *y, size_t ys, int64_t n) {     \
        gemm_wide_body_##NAME(w, rb, nrows, x, xs, ntok, y, ys, n, 1);                             \
    }

/* All of a block format's wide kernel: fill, driver, entry points. */
#define DEF_WIDE_BLOCK(NAME, SUBV, NV, QBYTES) DEF_WIDE_FILL(NAME, SUBV, NV) DEF_WIDE_ENTRIES(NAME, QBYTES)

/* act8_ref.c: the scalar a8 kernels (every table without a SIMD one uses
 * them); act8_avx512.c (AVX-512 VNNI) and act8_avx2.c: the SIMD ones. */
#define A8_DECL(name, isa)                                                                                   \
    void moe_gemv_a8_##name##_##isa(const void *w, size_t rb, int64_t nrows, const void *xa, float *y, int64_t n); \
    void moe_gemm_a8_##name##_##isa(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs,        \
                                    int64_t ntok, float *y, size_t ys, int64_t n);
#define A8_DECL_ALL(name) A8_DECL(name, ref) A8_DECL(name, avx512) A8_DECL(name, avx2)
A8_DECL_ALL(q8_0)
A8_DECL_ALL(nvfp4)
A8_DECL_ALL(mxfp4)
A8_DECL_ALL(q4_0)
A8_DECL_ALL(q4_1)
A8_DECL_ALL(q5_0)
A8_DECL_ALL(q5_1)
A8_DECL_ALL(iq4_nl)
A8_DECL_ALL(q4_k)
A8_DECL_ALL(q6_k)
A8_DECL_ALL(q5_k)
A8_DECL_ALL(q3_k)
A8_DECL_ALL(q2_k)
A8_DECL_ALL(iq4_xs)
A8_DECL_ALL(iq2_xxs)
A8_DECL_ALL(iq2_xs)
A8_DECL_ALL(iq2_s)
A8_DECL_ALL(iq3_xxs)
A8_DECL_ALL(iq3_s)
A8_DECL_ALL(iq1_s)
A8_DECL_ALL(iq1_m)
#undef A8_DECL_ALL
#undef A8_DECL
/* act8_legacy_ref.c: Q4_1, Q5_0, Q5_1, IQ4_NL on the act_q8 path (act8_ref.c
 * hands them over): which types, their a8 repack and the contract on a plain row. */
bool moe_a8l_type(uint32_t type);
void moe_a8l_repack(uint32_t type, const void *src, void *dst, int64_t nrows, int64_t n);
float moe_a8l_dot_ref(uint32_t type, const void *row, const void *xa, int64_t n);
/* act8_kquant_ref.c: the same for Q5_K, Q3_K, Q2_K, IQ4_XS. */
bool moe_a8k_type(uint32_t type);
void moe_a8k_repack(uint32_t type, const void *src, void *dst, int64_t nrows, int64_t n);
float moe_a8k_dot_ref(uint32_t type, const void *row, const void *xa, int64_t n);
/* act8_iq_ref.c: the same for the i-quants (IQ2_*, IQ3_*, IQ1_*). */
bool moe_a8iq_type(uint32_t type);
void moe_a8iq_repack(uint32_t type, const void *src, void *dst, int64_t nrows, int64_t n);
float moe_a8iq_dot_ref(uint32_t type, const void *row, const void *xa, int64_t n);
/* A table's a8 entries for the seven i-quants at level isa. */
#define A8IQ_ENTRIES(isa)                                                                                     \
    A8_ENTRY(MOE_T_IQ2_XXS, iq2_xxs, isa), A8_ENTRY(MOE_T_IQ2_XS, iq2_xs, isa), A8_ENTRY(MOE_T_IQ2_S, iq2_s, isa), \
    A8_ENTRY(MOE_T_IQ3_XXS, iq3_xxs, isa), A8_ENTRY(MOE_T_IQ3_S, iq3_s, isa), A8_ENTRY(MOE_T_IQ1_S, iq1_s, isa), \
    A8_ENTRY(MOE_T_IQ1_M, iq1_m, isa)
/* act8q_avx512.c, act8q_avx2.c: moe_quantize_act8, byte for byte. */
void moe_quantize_act8_avx512(const float *x, void *dst, int64_t n);
void moe_quantize_act8_avx2(const float *x, void *dst, int64_t n);
/* A table's a8 entries for one format. */
#define A8_ENTRY(id, name, isa) .gemv_a8[id] = moe_gemv_a8_##name##_##isa, .gemm_a8[id] = moe_gemm_a8_##name##_##isa

/* The kernel tables, filled in by each ISA file. */
extern const moe_kernels moe_kernels_scalar_tab;
extern const moe_kernels moe_kernels_avx2_tab;
extern const moe_kernels moe_kernels_avx512_tab;

/* The contract's 16-lane tree (quant.h): lanes l and l + 8, then l and
 * l + 4, then (0+2) + (1+3). The act_q8 scalar references end every row
 * with it. */
static inline float moe_a8_reduce16(const float a[16]) {
    float b[8], c[4];
    for (int l = 0; l < 8; l++) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; l++) c[l] = b[l] + b[l + 4];
    const float e0 = c[0] + c[2], e1 = c[1] + c[3];
    return e0 + e1;
}

/* The act_q8 scalar gemv / gemm of a format whose reference dot of one row
 * and one token is ROW_DOT(type, row, xa, n): rows in order, tokens in order.
 * Defines moe_gemv_a8_NAME_ref and moe_gemm_a8_NAME_ref. */
#define MOE_A8_REF_KERNELS(name, type, ROW_DOT)                                                              \
    void moe_gemv_a8_##name##_ref(const void *w, size_t rb, int64_t nrows, const void *xa, float *y, int64_t n) { \
        for (int64_t r = 0; r < nrows; r++) y[r] = ROW_DOT(type, (const uint8_t *)w + (size_t)r * rb, xa, n); \
    }                                                                                                        \
    void moe_gemm_a8_##name##_ref(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs,        \
                                  int64_t ntok, float *y, size_t ys, int64_t n) {                            \
        for (int64_t t = 0; t < ntok; t++)                                                                   \
            moe_gemv_a8_##name##_ref(w, rb, nrows, (const uint8_t *)xa + (size_t)t * xs, y + (size_t)t * ys, n); \
    }

/* The act_q8 gemv / gemm drivers of the later formats (act8_legacy_*.c,
 * act8_kquant_*.c) over their TILE(w, rs, xa, xs, y, ys, yr, n, R, T, F)
 * kernel of R rows x T tokens: gemv takes rows r and r + nrows/2 in one tile
 * (two far-apart streams keep the hardware prefetcher on, as act8_avx2.c),
 * gemm 4 rows x 2 tokens (rows r + i q, q = nrows/4: far apart too, for a
 * batched decode step's few tokens), then the tails. Defines moe_gemv_a8_NAME_ISA and
 * moe_gemm_a8_NAME_ISA. */
#define MOE_A8_TILED_KERNELS(name, isa, TILE, F)                                                             \
    void moe_gemv_a8_##name##_##isa(const void *w, size_t rb, int64_t nrows, const void *xa, float *y,       \
                                    int64_t n) {                                                             \
        const uint8_t *W = w;                                                                                \
        const int64_t h = nrows / 2;                                                                         \
        for (int64_t r = 0; r < h; r++)                                                                      \
            TILE(W + (size_t)r * rb, (size_t)h * rb, xa, 0, y + r, 0, (size_t)h, n, 2, 1, F);               \
        if (nrows & 1) TILE(W + (size_t)(nrows - 1) * rb, rb, xa, 0, y + nrows - 1, 0, 1, n, 1, 1, F);       \
    }                                                                                                        \
    void moe_gemm_a8_##name##_##isa(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs,      \
                                    int64_t ntok, float *y, size_t ys, int64_t n) {                          \
        const uint8_t *W = w, *X = xa;                                                                       \
        const int64_t q = nrows / 4;                                                                         \
        for (int64_t r = 0; r < q; r++) {                                                                    \
            int64_t t = 0;                                                                                   \
            for (; t + 2 <= ntok; t += 2)                                                                    \
                TILE(W + (size_t)r * rb, (size_t)q * rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys,  \
                     (size_t)q, n, 4, 2, F);                                                                 \
            for (; t < ntok; t++)                                                                            \
                TILE(W + (size_t)r * rb, (size_t)q * rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys,  \
                     (size_t)q, n, 4, 1, F);                                                                 \
        }                                                                                                    \
        for (int64_t r = 4 * q; r < nrows; r++)                                                              \
            for (int64_t t = 0; t < ntok; t++)                                                               \
                TILE(W + (size_t)r * rb, rb, X + (size_t)t * xs, xs, y + (size_t)t * ys + r, ys, 1, n, 1, 1, F); \
    }

/* gemv: the tiled driver above (as name_tiles); gemm: PANEL(w, rb, nrows,
 * xa, xs, ntok, y, ys, n, F), a file's panel GEMM, from MIN_TOK tokens on
 * and for rows of n <= MAX_N (its buffer's), else the tiled driver's gemm. */
#define MOE_A8_PANEL_KERNELS(name, isa, TILE, PANEL, F, MIN_TOK, MAX_N)                                     \
    MOE_A8_TILED_KERNELS(name##_tiles, isa, TILE, F)                                                         \
    void moe_gemv_a8_##name##_##isa(const void *w, size_t rb, int64_t nrows, const void *xa, float *y,       \
                                    int64_t n) {                                                             \
        moe_gemv_a8_##name##_tiles_##isa(w, rb, nrows, xa, y, n);                                            \
    }                                                                                                        \
    void moe_gemm_a8_##name##_##isa(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs,      \
                                    int64_t ntok, float *y, size_t ys, int64_t n) {                          \
        if (n > (int64_t)(MAX_N) || ntok < (MIN_TOK))                                                        \
            moe_gemm_a8_##name##_tiles_##isa(w, rb, nrows, xa, xs, ntok, y, ys, n);                          \
        else PANEL(w, rb, nrows, xa, xs, ntok, y, ys, n, F);                                                 \
    }

#endif
