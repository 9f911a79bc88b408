/* iq2.h — what IQ2_XXS, IQ2_XS and IQ2_S share between their scalar
 * reference (iq2_ref.c, the specification: layouts and float operations
 * spelled out there), the codebooks (iq2_tables.c), the SIMD kernels
 * (iq2_avx2.c, iq2_avx512.c) and the kernel tables (quant_ref.c,
 * quant_avx2.c, quant_avx512.c: one IQ2_ENTRIES line each).
 *
 * All three code a super-block of 256 values as 32 groups of 8: each group
 * is one codebook entry (8 magnitudes from {8, 25, 43}) times 8 signs, and
 * the scale of a group's 16 (XS, S) or 32 (XXS) values is
 * d * (0.5 + s) * 0.25 with s a 4-bit code and d the block's f16. */
#ifndef MOE_IQ2_H
#define MOE_IQ2_H

#include "quant/quant_internal.h"
#include "quant/iq_common.h"

/* ggml's iq2xxs_grid, iq2xs_grid, iq2s_grid (iq2_tables.c: provenance). */
extern const uint64_t moe_iq2xxs_grid[256];
extern const uint64_t moe_iq2xs_grid[512];
extern const uint64_t moe_iq2s_grid[1024];
/* FNV-1a 64 of each table's 8*N bytes in index order, computed by a one-off
 * script from the tables in ggml-common.h (tests/test_iq2.c recomputes it). */
#define MOE_IQ2XXS_FNV 0xbb4ee025b5ac6e8eull
#define MOE_IQ2XS_FNV 0xc9b1ee61e79909bdull
#define MOE_IQ2S_FNV 0x123edd38a3b62b90ull

static inline bool moe_iq2_type(uint32_t type) {
    return type == MOE_T_IQ2_XXS || type == MOE_T_IQ2_XS || type == MOE_T_IQ2_S;
}

/* Group g (0..31: values 8g..8g+7) of block b: its codebook entry, its 8
 * sign bits (bit j set: value j negative) and its 4-bit scale code. The
 * layouts are spelled out in iq2_ref.c. */
static inline void moe_iq2_group(uint32_t type, const uint8_t *b, int g, uint64_t *grid, uint8_t *signs,
                                 unsigned *sc) {
    const int ib = g / 4, l = g % 4;
    if (type == MOE_T_IQ2_XXS) {
        uint32_t a1;
        memcpy(&a1, b + 2 + 8 * ib + 4, 4);
        *grid = moe_iq2xxs_grid[b[2 + 8 * ib + l]];
        *signs = moe_iq_signs((a1 >> (7 * l)) & 127);
        *sc = a1 >> 28;
    } else if (type == MOE_T_IQ2_XS) {
        const uint16_t q = moe_rd16(b + 2 + 2 * g);
        *grid = moe_iq2xs_grid[q & 511];
        *signs = moe_iq_signs(q >> 9);
        *sc = (b[66 + ib] >> (4 * (l / 2))) & 15;
    } else {
        *grid = moe_iq2s_grid[b[2 + g] | ((b[66 + ib] << (8 - 2 * l)) & 0x300)];
        *signs = b[34 + g];
        *sc = (b[74 + ib] >> (4 * (l / 2))) & 15;
    }
}

/* The 4 sign bytes of 4 sign codes (7 bits each, byte l of c): each byte's
 * parity into its bit 7, as moe_iq_signs does for one (the folds stay
 * inside each byte: bit 0 of byte l ends as the parity of byte l). */
static inline uint32_t moe_iq_signs4(uint32_t c) {
    uint32_t p = c ^ (c >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return c | (p & 0x01010101u) << 7;
}

/* Sub-block ib (values 32ib..32ib+31) of block b at once, for the SIMD
 * kernels: the 4 codebook entries, the 32 sign bits (bit k: value 32ib+k
 * negative) and the scale codes of its two halves of 16. Same fields as
 * moe_iq2_group. */
static inline void moe_iq2_sub(uint32_t type, const uint8_t *b, int ib, uint64_t g[4], uint32_t *signs,
                               unsigned sc[2]) {
    if (type == MOE_T_IQ2_XXS) {
        const uint8_t *q = b + 2 + 8 * ib;
        uint32_t a1;
        memcpy(&a1, q + 4, 4);
        for (int l = 0; l < 4; l++) g[l] = moe_iq2xxs_grid[q[l]];
        const uint32_t c = (a1 & 127) | ((a1 >> 7) & 127) << 8 | ((a1 >> 14) & 127) << 16 | ((a1 >> 21) & 127) << 24;
        *signs = moe_iq_signs4(c);
        sc[0] = sc[1] = a1 >> 28;
    } else if (type == MOE_T_IQ2_XS) {
        uint64_t v;
        memcpy(&v, b + 2 + 8 * ib, 8);
        for (int l = 0; l < 4; l++) g[l] = moe_iq2xs_grid[(v >> (16 * l)) & 511];
        const uint32_t c = (uint32_t)((v >> 9) & 127) | (uint32_t)((v >> 25) & 127) << 8 |
                           (uint32_t)((v >> 41) & 127) << 16 | (uint32_t)((v >> 57) & 127) << 24;
        *signs = moe_iq_signs4(c);
        sc[0] = b[66 + ib] & 15;
        sc[1] = b[66 + ib] >> 4;
    } else {
        const uint8_t *lo = b + 2 + 4 * ib;
        const unsigned qh = b[66 + ib];
        for (int l = 0; l < 4; l++) g[l] = moe_iq2s_grid[lo[l] | ((qh >> (2 * l)) & 3) << 8];
        memcpy(signs, b + 34 + 4 * ib, 4);
        sc[0] = b[74 + ib] & 15;
        sc[1] = b[74 + ib] >> 4;
    }
}

/* The scale of a group: ggml's d * (0.5f + s) * 0.25f, left to right. */
static inline float moe_iq2_db(float d, unsigned s) { return d * (0.5f + (float)s) * 0.25f; }

/* Dequantize / quantize one block of 256 values (iq2_ref.c). */
void moe_iq2_dq_block(uint32_t type, const uint8_t *b, float *w);
void moe_iq2_quantize_block(uint32_t type, const float *x, uint8_t *y);

/* The kernels: plain and x4 layouts (quant.h), one set per level. */
#define IQ2_DECL(name, isa)                                                                                  \
    void moe_gemv_##name##_##isa(const void *w, size_t rb, int64_t nrows, const float *x, float *y, int64_t n); \
    void moe_gemm_##name##_##isa(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs,          \
                                 int64_t ntok, float *y, size_t ys, int64_t n);                               \
    void moe_gemv_x4_##name##_##isa(const void *w, size_t rb, int64_t nrows, const float *x, float *y,       \
                                    int64_t n);                                                               \
    void moe_gemm_x4_##name##_##isa(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs,       \
                                    int64_t ntok, float *y, size_t ys, int64_t n);
#define IQ2_DECL_ALL(name) IQ2_DECL(name, ref) IQ2_DECL(name, avx2) IQ2_DECL(name, avx512)
IQ2_DECL_ALL(iq2_xxs)
IQ2_DECL_ALL(iq2_xs)
IQ2_DECL_ALL(iq2_s)
#undef IQ2_DECL_ALL
#undef IQ2_DECL
/* AVX2: one 256-value block's exact FP32 weights into a wide-GEMM buffer
 * (quant_internal.h's gemm_wide): values 16c .. 16c + 15 at o + 64 c (o
 * 32-byte aligned). */
void moe_wide_block_iq2_xxs_avx2(const uint8_t *b, float *o);
void moe_wide_block_iq2_xs_avx2(const uint8_t *b, float *o);
void moe_wide_block_iq2_s_avx2(const uint8_t *b, float *o);

/* A kernel table's entries for the three formats at level isa. */
#define IQ2_ENTRY(id, name, isa)                                                                   \
    .gemv[id] = moe_gemv_##name##_##isa, .gemm[id] = moe_gemm_##name##_##isa,                      \
    .gemv_x4[id] = moe_gemv_x4_##name##_##isa, .gemm_x4[id] = moe_gemm_x4_##name##_##isa
#define IQ2_ENTRIES(isa)                                                                           \
    IQ2_ENTRY(MOE_T_IQ2_XXS, iq2_xxs, isa), IQ2_ENTRY(MOE_T_IQ2_XS, iq2_xs, isa),                  \
    IQ2_ENTRY(MOE_T_IQ2_S, iq2_s, isa)

#endif
