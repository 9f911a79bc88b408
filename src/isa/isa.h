/* isa.h — the SIMD levels: ONE descriptor per level (its name, the CPU
 * extensions it needs, its quant kernel table and its attention kernel
 * table), chosen in one place (isa.c: cpuid once, MOEFAST_CPU_MASK,
 * MOEFAST_ISA, moe_set_isa). A session takes both tables from the same
 * descriptor, so its quant and attention kernels are always of one level.
 *
 * What a level needs is what its files were compiled with, by construction:
 * the Makefile builds every *_avx2.c / *_avx512.c from one list per level
 * (AVX2_ISA, AVX512_ISA: -m<name> for each), and the level's descriptor
 * (isa_avx2.c, isa_avx512.c) is compiled with those same flags and reads
 * the extensions the compiler then enables, implied ones included (-mavx2
 * enables avx, sse4.2, popcnt, ...), from its predefined macros (need.h).
 * isa.c also refuses a level whose Makefile list names an extension it does
 * not know. docs/KERNELS.md, "Choosing a level". */
#ifndef MOE_ISA_H
#define MOE_ISA_H

#include <stddef.h>
#include <stdint.h>

typedef enum moe_isa { MOE_ISA_SCALAR = 0, MOE_ISA_AVX2 = 1, MOE_ISA_AVX512 = 2, MOE_ISA_COUNT } moe_isa;

/* The x86 extensions a level can need: X(ID, name, cpuid leaf, subleaf,
 * register, bit, state). name is the compiler's -m<name>; register 0..3 =
 * EAX, EBX, ECX, EDX; state: the register state the OS must save for the
 * instructions to run (XGETBV: 0 none, 1 YMM, 2 ZMM and opmasks). Every
 * extension a compiler enables with the Makefile's flags is here (need.h
 * maps each predefined macro to one). */
#define MOE_CPU_FEATURES(X)                                  \
    X(SSE3, "sse3", 1, 0, 2, 0, 0)                           \
    X(PCLMUL, "pclmul", 1, 0, 2, 1, 0)                       \
    X(SSSE3, "ssse3", 1, 0, 2, 9, 0)                         \
    X(FMA, "fma", 1, 0, 2, 12, 1)                            \
    X(SSE4_1, "sse4.1", 1, 0, 2, 19, 0)                      \
    X(SSE4_2, "sse4.2", 1, 0, 2, 20, 0)                      \
    X(MOVBE, "movbe", 1, 0, 2, 22, 0)                        \
    X(POPCNT, "popcnt", 1, 0, 2, 23, 0)                      \
    X(AES, "aes", 1, 0, 2, 25, 0)                            \
    X(XSAVE, "xsave", 1, 0, 2, 26, 0)                        \
    X(AVX, "avx", 1, 0, 2, 28, 1)                            \
    X(F16C, "f16c", 1, 0, 2, 29, 1)                          \
    X(BMI, "bmi", 7, 0, 1, 3, 0)                             \
    X(AVX2, "avx2", 7, 0, 1, 5, 1)                           \
    X(BMI2, "bmi2", 7, 0, 1, 8, 0)                           \
    X(AVX512F, "avx512f", 7, 0, 1, 16, 2)                    \
    X(AVX512DQ, "avx512dq", 7, 0, 1, 17, 2)                  \
    X(AVX512IFMA, "avx512ifma", 7, 0, 1, 21, 2)              \
    X(AVX512CD, "avx512cd", 7, 0, 1, 28, 2)                  \
    X(AVX512BW, "avx512bw", 7, 0, 1, 30, 2)                  \
    X(AVX512VL, "avx512vl", 7, 0, 1, 31, 2)                  \
    X(AVX512VBMI, "avx512vbmi", 7, 0, 2, 1, 2)               \
    X(AVX512VBMI2, "avx512vbmi2", 7, 0, 2, 6, 2)             \
    X(GFNI, "gfni", 7, 0, 2, 8, 0)                           \
    X(VAES, "vaes", 7, 0, 2, 9, 1)                           \
    X(VPCLMULQDQ, "vpclmulqdq", 7, 0, 2, 10, 1)              \
    X(AVX512VNNI, "avx512vnni", 7, 0, 2, 11, 2)              \
    X(AVX512BITALG, "avx512bitalg", 7, 0, 2, 12, 2)          \
    X(AVX512VPOPCNTDQ, "avx512vpopcntdq", 7, 0, 2, 14, 2)    \
    X(AVX512FP16, "avx512fp16", 7, 0, 3, 23, 2)              \
    X(AVXVNNI, "avxvnni", 7, 1, 0, 4, 1)                     \
    X(AVX512BF16, "avx512bf16", 7, 1, 0, 5, 2)               \
    X(LZCNT, "lzcnt", 0x80000001u, 0, 2, 5, 0)

#define MOE_CPU_ENUM_(ID, name, leaf, sub, reg, bit, state) MOE_CPU_##ID,
enum moe_cpu_feature { MOE_CPU_FEATURES(MOE_CPU_ENUM_) MOE_CPU_COUNT };
#undef MOE_CPU_ENUM_
#define MOE_CPU_BIT(f) (UINT64_C(1) << (f))

struct moe_kernels;      /* quant/quant.h */
struct moe_attn_kernels; /* attention/attn.h */

typedef struct moe_isa_table {
    moe_isa isa;
    const char *name;                     /* "scalar", "avx2", "avx512" */
    const unsigned char *need;            /* enum moe_cpu_feature values, MOE_CPU_COUNT-terminated */
    const char *built_with;               /* the Makefile's list for the level ("" for scalar) */
    const struct moe_kernels *quant;      /* matrix kernels of every weight format */
    const struct moe_attn_kernels *attn;  /* attention and elementwise kernels */
} moe_isa_table;

/* The descriptor of a level, or NULL when this CPU (after MOEFAST_CPU_MASK)
 * cannot run it; scalar is always there. */
const moe_isa_table *moe_isa_table_for(moe_isa isa);
/* The level in use for sessions created now: the best one, unless
 * MOEFAST_ISA or moe_set_isa chose another. */
const moe_isa_table *moe_isa_table_active(void);
/* Best level this CPU runs. */
moe_isa moe_isa_best(void);

/* Every level's descriptor, whether or not this CPU runs it (tests). */
const moe_isa_table *moe_isa_table_entry(moe_isa isa);
/* The level's needs as a bit set (MOE_CPU_BIT); 0 for an unknown level. */
uint64_t moe_isa_need_bits(const moe_isa_table *t);
/* Extensions this CPU offers, after MOEFAST_CPU_MASK cleared some. */
uint64_t moe_cpu_features(void);
/* "avx512vnni" ... for a feature; NULL past the end. */
const char *moe_cpu_feature_name(int f);
/* Feature by its -m name (case-insensitive); -1 if unknown. */
int moe_cpu_feature_by_name(const char *name);
/* Why a level cannot run: the extensions it needs that this CPU lacks
 * ("avx512vbmi, bmi2 (cleared by MOEFAST_CPU_MASK)"), or that its build
 * list names unknown ones; "" when it can. Returns buf. */
char *moe_isa_missing(moe_isa isa, char *buf, size_t len);

#endif
