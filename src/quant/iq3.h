/* iq3.h — IQ3_XXS, IQ3_S, IQ1_S and IQ1_M: what their specification
 * (iq3_ref.c) shares with the SIMD kernel files (iq3_avx2.c, iq3_avx512.c)
 * and the kernel tables (quant_ref.c, quant_avx2.c, quant_avx512.c).
 * The codebooks are data from ggml (iq3_tables.c says where from and how
 * they were verified); the sign code of IQ3_XXS is computed (iq_common.h). */
#ifndef MOE_IQ3_H
#define MOE_IQ3_H

#include "quant/quant_internal.h"
#include "quant/iq_common.h"

/* ggml's grids: 4 values per u32 (IQ3), 8 int8 values per u64 (IQ1), byte j
 * = value j. */
extern const uint32_t moe_iq3xxs_grid[256];
extern const uint32_t moe_iq3s_grid[512];
extern const uint64_t moe_iq1s_grid[2048];

/* IQ1_S / IQ1_M: ggml's IQ1S_DELTA / IQ1M_DELTA (both 0.125f). */
#define MOE_IQ1_DELTA 0.125f

/* +-MOE_IQ1_DELTA with the sign taken from bit 0 of neg, formed without a
 * branch (the sign bits are random: a branch per group of 8 values made the
 * SIMD IQ1_M kernels mispredict-bound). The same float as the reference's
 * neg ? -0.125f : 0.125f. */
static inline float moe_iq1_delta(unsigned neg) {
    const uint32_t bits = 0x3E000000u | (neg & 1u) << 31;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Whether the type is one of the four (the dispatch in quant_ref.c). */
static inline bool moe_iq3_type(uint32_t type) {
    return type == MOE_T_IQ3_XXS || type == MOE_T_IQ3_S || type == MOE_T_IQ1_S || type == MOE_T_IQ1_M;
}

/* ---- the per-sub-block scales, exactly as ggml forms them --------------- */

/* IQ3_XXS: sub-block ib's scale from its 32-bit word (top 4 bits s):
 * (d * (0.5f + s)) * 0.5f, two rounded products as in ggml. */
static inline float moe_iq3xxs_db(float d, uint32_t aux) {
    return d * (0.5f + (float)(aux >> 28)) * 0.5f;
}
/* IQ3_S: d * (1 + 2 s), s the nibble of scales[ib / 2] (low for even ib). */
static inline float moe_iq3s_db(float d, const uint8_t *b, int ib) {
    return d * (float)(1 + 2 * ((b[106 + ib / 2] >> (4 * (ib & 1))) & 15));
}
/* IQ1_M: the f16 bits of d, spread over the top nibbles of the 4 u16 scale
 * words at b + 48 (ggml's iq1m_scale_t). */
static inline uint16_t moe_iq1m_d16(const uint8_t *b) {
    const uint16_t s0 = moe_rd16(b + 48), s1 = moe_rd16(b + 50), s2 = moe_rd16(b + 52), s3 = moe_rd16(b + 54);
    return (uint16_t)((s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000));
}
/* IQ1_M: the 3-bit scale of half h (0: values 0-15, 1: 16-31) of sub-block ib. */
static inline int moe_iq1m_s(const uint8_t *b, int ib, int h) {
    return (moe_rd16(b + 48 + 2 * (ib / 2)) >> (6 * (ib % 2) + 3 * h)) & 7;
}

/* Dequantize one block (256 values) of these types: iq3_ref.c, the
 * specification. */
void moe_iq3_dq_block(uint32_t type, const uint8_t *b, float *w);
/* Quantize 256 values into one block (iq3_ref.c documents the search). */
void moe_iq3_quantize_block(uint32_t type, const float *x, uint8_t *y);

/* ---- SIMD kernels (iq3_avx2.c, iq3_avx512.c): gemv / gemm, plain and x4 */
#define MOE_IQ3_DECL(name, isa)                                                                    \
    void moe_gemv_##name##_##isa(const void *w, size_t rb, int64_t nrows, const float *x, float *y, int64_t n); \
    void moe_gemm_##name##_##isa(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs, \
                                 int64_t ntok, float *y, size_t ys, int64_t n);                    \
    void moe_gemv_x4_##name##_##isa(const void *w, size_t rb, int64_t nrows, const float *x, float *y, int64_t n); \
    void moe_gemm_x4_##name##_##isa(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs, \
                                    int64_t ntok, float *y, size_t ys, int64_t n);
#define MOE_IQ3_DECL_ISA(name) MOE_IQ3_DECL(name, avx2) MOE_IQ3_DECL(name, avx512)
MOE_IQ3_DECL_ISA(iq3_xxs)
MOE_IQ3_DECL_ISA(iq3_s)
MOE_IQ3_DECL_ISA(iq1_s)
MOE_IQ3_DECL_ISA(iq1_m)
#undef MOE_IQ3_DECL_ISA
#undef MOE_IQ3_DECL
/* AVX2: one 256-value block's exact FP32 weights into a wide-GEMM buffer
 * (as moe_wide_block_iq2_xxs_avx2, iq2.h). */
void moe_wide_block_iq3_xxs_avx2(const uint8_t *b, float *o);
void moe_wide_block_iq3_s_avx2(const uint8_t *b, float *o);
void moe_wide_block_iq1_s_avx2(const uint8_t *b, float *o);
void moe_wide_block_iq1_m_avx2(const uint8_t *b, float *o);
/* A SIMD table's entries for one of these types. */
#define MOE_IQ3_ENTRY(id, name, isa)                                                               \
    .gemv[id] = moe_gemv_##name##_##isa, .gemm[id] = moe_gemm_##name##_##isa,                      \
    .gemv_x4[id] = moe_gemv_x4_##name##_##isa, .gemm_x4[id] = moe_gemm_x4_##name##_##isa

/* The entry points over each SIMD file's tile_NAME(w, rb, x, xs, y, ys, n,
 * R, T, S): R rows x T tokens, block b of tile row rr at w + rr*rb +
 * b*S*QB (S = 4 inside an x4 group). gemv: 4 rows a tile; gemm: tokens in
 * blocks of 32 (their activations stay in cache while the rows stream by),
 * 2 rows x 2 tokens a tile; x4: a group of 4 rows is one stream. */
#define MOE_IQ3_DRIVERS(NAME, ISA, QB)                                                             \
    void moe_gemv_##NAME##_##ISA(const void *w, size_t rb, int64_t nrows, const float *x, float *y, \
                                 int64_t n) {                                                      \
        const uint8_t *W = w;                                                                      \
        int64_t r = 0;                                                                             \
        for (; r + 4 <= nrows; r += 4) tile_##NAME(W + r * rb, rb, x, 0, y + r, 0, n, 4, 1, 1);    \
        for (; r < nrows; r++) tile_##NAME(W + r * rb, rb, x, 0, y + r, 0, n, 1, 1, 1);            \
    }                                                                                              \
    void moe_gemv_x4_##NAME##_##ISA(const void *w, size_t rb, int64_t nrows, const float *x, float *y, \
                                    int64_t n) {                                                   \
        const uint8_t *W = w;                                                                      \
        int64_t r = 0;                                                                             \
        for (; r + 4 <= nrows; r += 4) tile_##NAME(W + r * rb, QB, x, 0, y + r, 0, n, 4, 1, 4);    \
        for (; r < nrows; r++) tile_##NAME(W + r * rb, rb, x, 0, y + r, 0, n, 1, 1, 1);            \
    }                                                                                              \
    static inline __attribute__((always_inline)) void gemm_body_##NAME(                            \
        const uint8_t *W, size_t rb, int64_t nrows, const float *x, size_t xs, int64_t ntok, float *y, \
        size_t ys, int64_t n, const int x4) {                                                      \
        for (int64_t t0 = 0; t0 < ntok; t0 += 32) {                                                \
            const int64_t t1 = t0 + 32 < ntok ? t0 + 32 : ntok;                                    \
            const int64_t full = nrows - nrows % (x4 ? 4 : 2);  /* x4: the last nrows % 4 are plain */ \
            int64_t r = 0;                                                                         \
            for (; r < full; r += 2) {                                                             \
                /* x4: rows r, r+1 of a group start at group + (r % 4) * QB, blocks 4 QB apart */ \
                const uint8_t *g = x4 ? W + (r & ~(int64_t)3) * rb + (size_t)(r & 3) * (QB) : W + r * rb; \
                const size_t st = x4 ? (QB) : rb;                                                  \
                int64_t t = t0;                                                                    \
                for (; t + 2 <= t1; t += 2)                                                        \
                    tile_##NAME(g, st, x + t * xs, xs, y + t * ys + r, ys, n, 2, 2, x4 ? 4 : 1);   \
                for (; t < t1; t++) tile_##NAME(g, st, x + t * xs, xs, y + t * ys + r, ys, n, 2, 1, x4 ? 4 : 1); \
            }                                                                                      \
            for (; r < nrows; r++) {                                                               \
                int64_t t = t0;                                                                    \
                for (; t + 2 <= t1; t += 2) tile_##NAME(W + r * rb, rb, x + t * xs, xs, y + t * ys + r, ys, n, 1, 2, 1); \
                for (; t < t1; t++) tile_##NAME(W + r * rb, rb, x + t * xs, xs, y + t * ys + r, ys, n, 1, 1, 1); \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    void moe_gemm_##NAME##_##ISA(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs, \
                                 int64_t ntok, float *y, size_t ys, int64_t n) {                   \
        gemm_body_##NAME(w, rb, nrows, x, xs, ntok, y, ys, n, 0);                                  \
    }                                                                                              \
    void moe_gemm_x4_##NAME##_##ISA(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs, \
                                    int64_t ntok, float *y, size_t ys, int64_t n) {                \
        gemm_body_##NAME(w, rb, nrows, x, xs, ntok, y, ys, n, 1);                                  \
    }

#endif
