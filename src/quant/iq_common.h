/* iq_common.h — what the i-quant families (IQ2_XXS/IQ2_XS/IQ2_S,
 * IQ3_XXS/IQ3_S, IQ1_S/IQ1_M) share: the sign code of 8 values.
 *
 * ggml stores the signs of a group of 8 values in 7 bits; the 8th sign is
 * the parity of the other seven (an even number of minus signs, which keeps
 * a grid point times its signs on the E8 lattice). ggml's table ksigns_iq2xs
 * is exactly i | parity(i) << 7 for i = 0..127 (tests/test_iq2.c checks
 * the function against the table's public values). Computed, not stored:
 * one definition for every family. */
#ifndef MOE_IQ_COMMON_H
#define MOE_IQ_COMMON_H

#include <stdint.h>

/* The 8 sign bits (bit j set: value j is negated) of 7-bit sign code i. */
static inline uint8_t moe_iq_signs(unsigned i) {
    unsigned p = i & 127u;
    p ^= p >> 4; p ^= p >> 2; p ^= p >> 1;
    return (uint8_t)((i & 127u) | (p & 1u) << 7);
}

#endif
