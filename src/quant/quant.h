/* quant.h — weight formats and the matrix kernels that read them.
 *
 * Formats are the GGUF/ggml ones, block layouts byte-identical to ggml so that
 * real files load. Each format has ONE scalar reference (quant_ref.c) that is
 * its specification, and SIMD variants (quant_avx2.c, quant_avx512.c) that
 * must return bit-identical results.
 *
 * ---- The dot-product contract (every kernel, every ISA) ----------------
 * Weights are dequantized to exact FP32 values w[k] by the format's reference
 * formula (quant_ref.c). Activations x[k] are FP32. A row dot product
 *     y = sum_k w[k] * x[k],  k = 0 .. n-1
 * is computed in 16 lanes: lane l (0..15) starts at +0.0f and, for k = l,
 * l+16, l+32, ... in increasing order, does acc[l] = fmaf(w[k], x[k], acc[l])
 * (one rounding). The lanes are then reduced as a fixed tree:
 *     a[l] += a[l+8] (l<8); a[l] += a[l+4] (l<4); a[l] += a[l+2] (l<2); y = a[0] + a[1]
 * A second-level scale, when present, multiplies y afterwards (one rounding).
 * This order is what one 512-bit accumulator (or two 256-bit ones) gives
 * naturally, so SIMD code pays nothing for being exact. Because every output
 * value is one such dot product, results do not depend on how rows or tokens
 * are split across threads or batches. */
#ifndef MOE_QUANT_H
#define MOE_QUANT_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* The type table (ids, names, block sizes, traits): types.h. */
#include "quant/types.h"

/* ---- scalar reference (the specification) ------------------------------ */

/* Dequantize n values (n a multiple of the block size). */
void moe_dequant_row(uint32_t type, const void *src, float *dst, int64_t n);
/* Quantize n values from FP32 (n a multiple of the block size), ggml's
 * rounding rules where ggml defines them; documented in quant_ref.c. */
void moe_quantize_row(uint32_t type, const float *src, void *dst, int64_t n);

/* ---- kernels ------------------------------------------------------------ */

/* The levels (moe_isa) and the descriptor that pairs a level's kernel
 * table here with its attention kernels: isa/isa.h. */
#include "isa/isa.h"

/* y[r] = dot(row r of W, x) for r in [0, nrows); rows are row_bytes apart.
 * n = row length (a multiple of the block size). */
typedef void (*moe_gemv_fn)(const void *w, size_t row_bytes, int64_t nrows,
                            const float *x, float *y, int64_t n);
/* Batched: Y[t*y_stride + r] = dot(row r of W, X + t*x_stride) for t < ntok,
 * r < nrows. Each output is the same value the gemv would give. */
typedef void (*moe_gemm_fn)(const void *w, size_t row_bytes, int64_t nrows,
                            const float *x, size_t x_stride, int64_t ntok,
                            float *y, size_t y_stride, int64_t n);

/* The same products with 8-bit activation blocks (act8_ref.c): xa is one
 * A8 row (moe_quantize_act8), w is in the a8 layout (moe_repack_a8). */
typedef void (*moe_gemv_a8_fn)(const void *w, size_t row_bytes, int64_t nrows,
                               const void *xa, float *y, int64_t n);
typedef void (*moe_gemm_a8_fn)(const void *w, size_t row_bytes, int64_t nrows,
                               const void *xa, size_t xa_stride, int64_t ntok,
                               float *y, size_t y_stride, int64_t n);

typedef struct moe_kernels {
    moe_isa isa;
    const char *name;                 /* "scalar", "avx2", "avx512" */
    moe_gemv_fn gemv[MOE_T_COUNT];    /* NULL for unsupported types */
    moe_gemm_fn gemm[MOE_T_COUNT];
    /* The same products over weights in the x4 layout (below); NULL for
     * types that have no x4 form. Same results, bit for bit. */
    moe_gemv_fn gemv_x4[MOE_T_COUNT];
    moe_gemm_fn gemm_x4[MOE_T_COUNT];
    /* flag gemm_wide: the same products, for prefill, by kernels that
     * dequantize a 4-row group once per block of tokens (quant_internal.h,
     * quant_avx512.c, quant_avx2.c); NULL where a level or format has none
     * (then gemm / gemm_x4 serve). */
    moe_gemm_fn gemm_wide[MOE_T_COUNT];
    moe_gemm_fn gemm_wide_x4[MOE_T_COUNT];
    /* The fewest tokens for which gemm_wide is taken over the 4-token-tile
     * gemm (the wide kernel dequantizes 4 rows x 1024 values into an L1
     * buffer: at a decode batch's 2-8 tokens that fill is paid for few FMAs,
     * and the tile, which dequantizes in registers, wins). Either gives the
     * same bits: speed only. Set where gemm_wide is. */
    uint8_t wide_min_tokens[MOE_T_COUNT];
    /* FP32 dot of two vectors (any n >= 0), same 16-lane contract; used by attention. */
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    /* y[i] += a * x[i] (elementwise fmaf, order irrelevant); used by attention. */
    void (*axpy_f32)(float a, const float *x, float *y, int64_t n);
    /* The 8-bit activation path (flag act_q8, act8_ref.c): weights in the a8
     * layout, activations from moe_quantize_act8 (x_stride in bytes of A8
     * rows). NULL for types without it (moe_type_has_a8). */
    moe_gemv_a8_fn gemv_a8[MOE_T_COUNT];
    moe_gemm_a8_fn gemm_a8[MOE_T_COUNT];
    /* moe_quantize_act8 at this level: the same bytes (act8q_*.c) */
    void (*quantize_act8)(const float *x, void *dst, int64_t n);
} moe_kernels;

/* ---- the x4 layout (load-time repack, flag `repack`) ----------------------
 * Rows are taken in groups of 4; inside a group, unit b of row rr is stored
 * at group_start + (4*b + rr) * unit_bytes, so a 4-row kernel tile reads one
 * sequential stream instead of four. A unit is one block of a block format,
 * or a run of MOE_X4_PLAIN_RUN values of F32/F16/BF16 (64 or 128 bytes: a
 * whole number of cache lines; those rows need n % MOE_X4_PLAIN_RUN == 0).
 * A group occupies the same 4*row_bytes as before, so row r of a group starts
 * where it did (r a multiple of 4); the last nrows % 4 rows keep the plain
 * layout. Kernel calls on x4 data must start at a row that is a multiple of 4. */
#define MOE_X4_PLAIN_RUN 32
bool moe_type_has_x4(uint32_t type);
/* Whether rows of n values of this type can take the x4 layout. */
bool moe_x4_fits(uint32_t type, int64_t n);
/* Bytes of one unit of a row in an x4 group (above). */
size_t moe_x4_unit_bytes(uint32_t type);
/* Repacks nrows rows of n values from src (plain) to dst (x4); no overlap;
 * moe_x4_fits(type, n) must hold. */
void moe_repack_x4(uint32_t type, const void *src, void *dst, int64_t nrows, int64_t n);

/* ---- 8-bit activations (flag act_q8; contract and layouts in act8_ref.c) -- */
#define A8_G 16               /* blocks of 32 per group */
#define A8_GROUP_BYTES 768    /* one activation group: q[512], corr[16], da[16], hsum[32] */
/* Weight types with an act_q8 kernel (Q8_0, NVFP4, MXFP4, Q4_0, Q4_K, Q6_K;
 * Q4_1, Q5_0, Q5_1, IQ4_NL: act8_legacy_ref.c; Q5_K, Q3_K, Q2_K, IQ4_XS:
 * act8_kquant_ref.c). */
bool moe_type_has_a8(uint32_t type);
/* Bytes of one A8 activation row of n values (n a multiple of 32); a
 * multiple of 64, so rows laid end to end stay 64-byte aligned. */
int64_t moe_act8_row_bytes(int64_t n);
/* Quantizes n values (n % 32 == 0) into one A8 row: the specification.
 * Each kernel table's quantize_act8 gives the same bytes, faster. */
void moe_quantize_act8(const float *x, void *dst, int64_t n);
/* Repacks nrows plain rows of n values into the a8 layout; no overlap. */
void moe_repack_a8(uint32_t type, const void *src, void *dst, int64_t nrows, int64_t n);
/* The contract on one plain (file-layout) row: the specification the a8
 * kernels are tested against. */
float moe_a8_dot_ref(uint32_t type, const void *row, const void *xa, int64_t n);

/* The table of a level's descriptor (isa.h), or NULL when this CPU cannot
 * run it. */
const moe_kernels *moe_kernels_for(moe_isa isa);
/* The active descriptor's table: chosen once (first call) from cpuid,
 * overridden by MOEFAST_ISA=scalar|avx2|avx512 or moe_set_isa(). */
const moe_kernels *moe_kernels_active(void);

#endif
