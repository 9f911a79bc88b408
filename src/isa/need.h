/* need.h — the extensions the compiler enabled for the file that includes
 * it, from its predefined macros: a MOE_CPU_COUNT-terminated array
 * moe_isa_need_ of enum moe_cpu_feature values. Included by each level's
 * descriptor file (isa.c for scalar, isa_avx2.c, isa_avx512.c), which the
 * Makefile compiles with exactly that level's flags, so a level needs what
 * its kernels may contain, implied extensions included. One line per entry
 * of MOE_CPU_FEATURES (isa.h), in its order; the count check below catches
 * a feature added there but not here. */
#ifndef MOE_ISA_NEED_H
#define MOE_ISA_NEED_H

#include "isa/isa.h"

#define MOE_NEED_LINES_ 33 /* entries below, present or not */
_Static_assert(MOE_NEED_LINES_ == MOE_CPU_COUNT, "need.h lacks a feature of MOE_CPU_FEATURES");

static const unsigned char moe_isa_need_[] = {
#if defined(__SSE3__)
    MOE_CPU_SSE3,
#endif
#if defined(__PCLMUL__)
    MOE_CPU_PCLMUL,
#endif
#if defined(__SSSE3__)
    MOE_CPU_SSSE3,
#endif
#if defined(__FMA__)
    MOE_CPU_FMA,
#endif
#if defined(__SSE4_1__)
    MOE_CPU_SSE4_1,
#endif
#if defined(__SSE4_2__) || defined(__CRC32__)
    MOE_CPU_SSE4_2,
#endif
#if defined(__MOVBE__)
    MOE_CPU_MOVBE,
#endif
#if defined(__POPCNT__)
    MOE_CPU_POPCNT,
#endif
#if defined(__AES__)
    MOE_CPU_AES,
#endif
#if defined(__XSAVE__)
    MOE_CPU_XSAVE,
#endif
#if defined(__AVX__)
    MOE_CPU_AVX,
#endif
#if defined(__F16C__)
    MOE_CPU_F16C,
#endif
#if defined(__BMI__)
    MOE_CPU_BMI,
#endif
#if defined(__AVX2__)
    MOE_CPU_AVX2,
#endif
#if defined(__BMI2__)
    MOE_CPU_BMI2,
#endif
#if defined(__AVX512F__)
    MOE_CPU_AVX512F,
#endif
#if defined(__AVX512DQ__)
    MOE_CPU_AVX512DQ,
#endif
#if defined(__AVX512IFMA__)
    MOE_CPU_AVX512IFMA,
#endif
#if defined(__AVX512CD__)
    MOE_CPU_AVX512CD,
#endif
#if defined(__AVX512BW__)
    MOE_CPU_AVX512BW,
#endif
#if defined(__AVX512VL__)
    MOE_CPU_AVX512VL,
#endif
#if defined(__AVX512VBMI__)
    MOE_CPU_AVX512VBMI,
#endif
#if defined(__AVX512VBMI2__)
    MOE_CPU_AVX512VBMI2,
#endif
#if defined(__GFNI__)
    MOE_CPU_GFNI,
#endif
#if defined(__VAES__)
    MOE_CPU_VAES,
#endif
#if defined(__VPCLMULQDQ__)
    MOE_CPU_VPCLMULQDQ,
#endif
#if defined(__AVX512VNNI__)
    MOE_CPU_AVX512VNNI,
#endif
#if defined(__AVX512BITALG__)
    MOE_CPU_AVX512BITALG,
#endif
#if defined(__AVX512VPOPCNTDQ__)
    MOE_CPU_AVX512VPOPCNTDQ,
#endif
#if defined(__AVX512FP16__)
    MOE_CPU_AVX512FP16,
#endif
#if defined(__AVXVNNI__)
    MOE_CPU_AVXVNNI,
#endif
#if defined(__AVX512BF16__)
    MOE_CPU_AVX512BF16,
#endif
#if defined(__LZCNT__)
    MOE_CPU_LZCNT,
#endif
    MOE_CPU_COUNT,
};

#endif
