/* types.h — the ggml weight types: ONE table (MOE_TYPES below) that the
 * enum, the block-size constants of the kernels (QB_*, quant_internal.h),
 * the type lookups (types.c), the GGUF reader and writer (gguf.c) and the
 * lab tools all read. Adding a type or a trait is one line here.
 *
 * Depends on nothing else in the project, so the GGUF reader can size
 * tensors without pulling in the kernels. */
#ifndef MOE_TYPES_H
#define MOE_TYPES_H

#include <stdbool.h>
#include <stdint.h>

/* X(NAME, ggml id, values per block, bytes per block, kernels, x4, a8, ftype)
 *   kernels: gemv/gemm at every ISA level (moe_kernels.gemv[id] != NULL);
 *            types without can still be sized, named and skipped.
 *   x4:      has the load-time x4 layout (quant.h; moe_kernels.gemv_x4).
 *   a8:      has the 8-bit activation kernels (act8_ref.c; moe_kernels.gemv_a8).
 *   ftype:   llama.cpp's general.file_type (llama_ftype) for a file whose
 *            weights are mostly this type, as its converters name them (the
 *            K-quants: the _M variant); -1: none.
 * Block layouts are ggml's, byte for byte (quant_ref.c spells them out for
 * the supported ones). ids 4, 5 (Q4_2/Q4_3), 31-33 and 36-38 (repacked
 * variants) were removed from ggml and are not types here.
 * tests/test_quant.c checks every kernel table against kernels, x4 and a8. */
#define MOE_TYPES(X)                        \
    X(F32,       0,   1,   4, 1, 1, 0,   0) \
    X(F16,       1,   1,   2, 1, 1, 0,   1) \
    X(Q4_0,      2,  32,  18, 1, 1, 1,   2) \
    X(Q4_1,      3,  32,  20, 1, 1, 1,   3) \
    X(Q5_0,      6,  32,  22, 1, 1, 1,   8) \
    X(Q5_1,      7,  32,  24, 1, 1, 1,   9) \
    X(Q8_0,      8,  32,  34, 1, 1, 1,   7) \
    X(Q8_1,      9,  32,  36, 0, 0, 0,  -1) \
    X(Q2_K,     10, 256,  84, 1, 1, 1,  10) \
    X(Q3_K,     11, 256, 110, 1, 1, 1,  12) \
    X(Q4_K,     12, 256, 144, 1, 1, 1,  14) \
    X(Q5_K,     13, 256, 176, 1, 1, 1,  16) \
    X(Q6_K,     14, 256, 210, 1, 1, 1,  18) \
    X(Q8_K,     15, 256, 292, 0, 0, 0,  -1) \
    X(IQ2_XXS,  16, 256,  66, 1, 1, 1,  19) \
    X(IQ2_XS,   17, 256,  74, 1, 1, 1,  20) \
    X(IQ3_XXS,  18, 256,  98, 1, 1, 1,  23) \
    X(IQ1_S,    19, 256,  50, 1, 1, 1,  24) \
    X(IQ4_NL,   20,  32,  18, 1, 1, 1,  25) \
    X(IQ3_S,    21, 256, 110, 1, 1, 1,  26) \
    X(IQ2_S,    22, 256,  82, 1, 1, 1,  28) \
    X(IQ4_XS,   23, 256, 136, 1, 1, 1,  30) \
    X(I8,       24,   1,   1, 0, 0, 0,  -1) \
    X(I16,      25,   1,   2, 0, 0, 0,  -1) \
    X(I32,      26,   1,   4, 0, 0, 0,  -1) \
    X(I64,      27,   1,   8, 0, 0, 0,  -1) \
    X(F64,      28,   1,   8, 0, 0, 0,  -1) \
    X(IQ1_M,    29, 256,  56, 1, 1, 1,  31) \
    X(BF16,     30,   1,   2, 1, 1, 0,  32) \
    X(TQ1_0,    34, 256,  54, 0, 0, 0,  36) \
    X(TQ2_0,    35, 256,  66, 0, 0, 0,  37) \
    X(MXFP4,    39,  32,  17, 1, 1, 1,  38) \
    X(NVFP4,    40,  64,  36, 1, 1, 1,  39)

/* ggml type ids (the values stored in GGUF tensor infos): MOE_T_Q8_0, ... */
#define MOE_TYPE_ENUM_(N, id, blk, bytes, k, x4, a8, ft) MOE_T_##N = id,
enum moe_type { MOE_TYPES(MOE_TYPE_ENUM_) MOE_T_COUNT = 41 /* > every id (types.c checks) */ };
#undef MOE_TYPE_ENUM_

typedef struct moe_type_info {
    const char *name;     /* "Q8_0" ... ; NULL for ids that do not exist */
    uint32_t block;       /* values per block (1 for F32/F16/BF16) */
    uint32_t block_bytes; /* bytes per block */
    bool supported;       /* has kernels here (known-but-unsupported types can still be sized) */
    bool has_x4;          /* the x4 layout (quant.h) */
    bool has_a8;          /* the act_q8 kernels (act8_ref.c) */
    bool plain;           /* one value per block, with kernels: F32, F16, BF16 */
    int16_t ftype;        /* llama_ftype of a file mostly of this type; -1: none */
} moe_type_info;

/* NULL for an id that is not a ggml type at all. */
const moe_type_info *moe_type_get(uint32_t type);
/* Type id by name (case-insensitive, "q8_0", "nvfp4", ...); -1 if unknown. */
int moe_type_by_name(const char *name);
/* "F32, F16, Q4_0, ...": the types with kernels, in id order (for the
 * error that refuses a tensor of another type). */
void moe_type_list_supported(char *buf, size_t len);
/* Bytes of a row of n values; 0 when n is not a multiple of the block size. */
uint64_t moe_row_bytes(uint32_t type, uint64_t n);

#endif
