/* act8_iq.h — the act_q8 path of the i-quants IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M: one 32-value block's integer weights and
 * scales (act8_iq_ref.c's contract spells them out), shared by the scalar
 * reference and the SIMD kernel files (act8_iq_avx2.c, act8_iq_avx512.c).
 *
 * The a8 layout of these formats is the file's (moe_repack_a8 copies the
 * rows): their codebook lookups cannot be turned into lane-aligned runs the
 * way act8_kquant_ref.c moves bits, so every kernel decodes a group of 16
 * blocks into a Q8_0-style slab buffer (moe_a8iq_group below) and dots that
 * with vpdpbusd / vpmaddwd. The decoding is integer only (exact), written
 * once here, so every level forms the same bytes. */
#ifndef MOE_ACT8_IQ_H
#define MOE_ACT8_IQ_H

#include "quant/iq2.h"
#include "quant/iq3.h"
#include "base/util.h"

#define A8IQ_INLINE static inline __attribute__((always_inline))
/* Bytes per super-block of 256 values (a compile-time constant where type is). */
#define A8IQ_QB(t)                                                                                                 \
    ((t) == MOE_T_IQ2_XXS ? QB_IQ2_XXS : (t) == MOE_T_IQ2_XS ? QB_IQ2_XS : (t) == MOE_T_IQ2_S ? QB_IQ2_S           \
     : (t) == MOE_T_IQ3_XXS ? QB_IQ3_XXS : (t) == MOE_T_IQ3_S ? QB_IQ3_S : (t) == MOE_T_IQ1_S ? QB_IQ1_S : QB_IQ1_M)

/* 0xFF in byte j of the result where bit j of s is set (8 sign bits -> a
 * byte mask): bit j moved to byte j, then "byte != 0" to its top bit. */
A8IQ_INLINE uint64_t moe_a8iq_mask8(unsigned s) {
    const uint64_t x = ((uint64_t)(s & 255u) * 0x0101010101010101ull) & 0x8040201008040201ull;
    const uint64_t y = (x | ((x & 0x7F7F7F7F7F7F7F7Full) + 0x7F7F7F7F7F7F7F7Full)) & 0x8080808080808080ull;
    return (y >> 7) * 0xFF;
}

/* 8 magnitudes g (bytes < 128) with 8 sign bits s as unsigned bytes u =
 * 128 + (s_j ? -g_j : g_j): 0x80 | g or 0x80 - g per byte (no carries). */
A8IQ_INLINE uint64_t moe_a8iq_signed(uint64_t g, unsigned s) {
    const uint64_t m = moe_a8iq_mask8(s), b = 0x8080808080808080ull;
    return ((b | g) & ~m) | ((b - g) & m);
}

/* IQ1: 8 grid bytes g in {-1, 0, 1} and the delta's sign as u = 128 + 8 g
 * + (neg ? -1 : 1) (the weight (g + delta) times 8, an integer in -9..9):
 * e = g + 1 per byte (0..2, no carry), then 8 e + 119 or + 121. */
A8IQ_INLINE uint64_t moe_a8iq_iq1(uint64_t g, unsigned neg) {
    const uint64_t e = ((g & 0x7F7F7F7F7F7F7F7Full) + 0x0101010101010101ull) ^ (g & 0x8080808080808080ull);
    return (e << 3) + (0x7979797979797979ull - (uint64_t)(neg & 1u) * 0x0202020202020202ull);
}

/* The super-block's float factor F (the contract): d times 1/8 (IQ2, IQ1),
 * 1/4 (IQ3_XXS) or 1 (IQ3_S); exact products. */
A8IQ_INLINE float moe_a8iq_f(uint32_t type, const uint8_t *b) {
    const float d = moe_f16_to_f32(type == MOE_T_IQ1_M ? moe_iq1m_d16(b) : moe_rd16(b));
    return type == MOE_T_IQ3_XXS ? d * 0.25f : type == MOE_T_IQ3_S ? d : d * 0.125f;
}

/* Block ib (values 32 ib .. 32 ib + 31) of super-block b before its signs:
 * IQ2 / IQ3: g[l] = the grid magnitudes of values 8l .. 8l + 7 (byte j =
 * value 8l + j) and *sg the 32 sign bits (bit k: value k negative); IQ1:
 * g[l] = u already (below) and *sg = 0. s[h] = the integer scale of half h
 * (values 16h .. 16h + 15). */
A8IQ_INLINE void moe_a8iq_raw(uint32_t type, const uint8_t *b, int ib, uint64_t g[4], uint32_t *sg, int32_t s[2]) {
    *sg = 0;
    if (moe_iq2_type(type)) {
        unsigned sc[2];
        moe_iq2_sub(type, b, ib, g, sg, sc);
        s[0] = 2 * (int32_t)sc[0] + 1;
        s[1] = 2 * (int32_t)sc[1] + 1;
    } else if (type == MOE_T_IQ3_XXS) {
        const uint8_t *qs = b + 2 + 8 * ib;
        uint32_t aux;
        memcpy(&aux, b + 66 + 4 * ib, 4);
        for (int l = 0; l < 4; l++) g[l] = moe_iq3xxs_grid[qs[2 * l]] | (uint64_t)moe_iq3xxs_grid[qs[2 * l + 1]] << 32;
        *sg = moe_iq_signs4((aux & 127) | ((aux >> 7) & 127) << 8 | ((aux >> 14) & 127) << 16 | ((aux >> 21) & 127) << 24);
        s[0] = s[1] = 2 * (int32_t)(aux >> 28) + 1;
    } else if (type == MOE_T_IQ3_S) {
        const uint8_t *qs = b + 2 + 8 * ib;
        const unsigned qh = b[66 + ib];
        for (int l = 0; l < 4; l++)
            g[l] = moe_iq3s_grid[qs[2 * l] | ((qh >> (2 * l)) & 1) << 8] |
                   (uint64_t)moe_iq3s_grid[qs[2 * l + 1] | ((qh >> (2 * l + 1)) & 1) << 8] << 32;
        memcpy(sg, b + 74 + 4 * ib, 4);
        s[0] = s[1] = 1 + 2 * ((b[106 + ib / 2] >> (4 * (ib & 1))) & 15);
    } else if (type == MOE_T_IQ1_S) {
        const unsigned qh = moe_rd16(b + 34 + 2 * ib);
        for (int l = 0; l < 4; l++) g[l] = moe_a8iq_iq1(moe_iq1s_grid[b[2 + 4 * ib + l] | ((qh >> (3 * l)) & 7) << 8], qh >> 15);
        s[0] = s[1] = 2 * (int32_t)((qh >> 12) & 7) + 1;
    } else {
        for (int l = 0; l < 4; l++) {
            const unsigned q = b[32 + 2 * ib + l / 2], c = l % 2 ? q >> 4 : q & 15;
            g[l] = moe_a8iq_iq1(moe_iq1s_grid[b[4 * ib + l] | (c & 7) << 8], c >> 3);
        }
        s[0] = 2 * moe_iq1m_s(b, ib, 0) + 1;
        s[1] = 2 * moe_iq1m_s(b, ib, 1) + 1;
    }
}

/* Whether moe_a8iq_raw gives magnitudes and signs (else u). */
#define A8IQ_SIGNED(t) ((t) != MOE_T_IQ1_S && (t) != MOE_T_IQ1_M)

/* Block ib of super-block b: u[l] = 128 + v for values 8l .. 8l + 7 (byte
 * j = value 8l + j; v the contract's integer weight), s[h] as above. */
A8IQ_INLINE void moe_a8iq_block(uint32_t type, const uint8_t *b, int ib, uint64_t u[4], int32_t s[2]) {
    uint32_t sg;
    moe_a8iq_raw(type, b, ib, u, &sg, s);
    if (A8IQ_SIGNED(type))
        for (int l = 0; l < 4; l++) u[l] = moe_a8iq_signed(u[l], sg >> (8 * l));
}

/* A group of gn (16, or 8: a row's last with an odd super-block count)
 * blocks starting at super-block G, decoded for the SIMD kernels:
 * U[64 t + 4 j + i] = value 4t + i of block j (the activation's slab
 * layout, as act8_ref.c's Q8_0 a8 rows): moe_a8iq_raw's bytes (IQ2 / IQ3:
 * magnitudes, the kernels apply sg[j], the block's sign bits, with vector
 * operations; IQ1: u), s0[j], s1[j] the halves' scales, f[j] the block's F.
 * Blocks gn..15 are left as they were. */
A8IQ_INLINE void moe_a8iq_group(uint32_t type, const uint8_t *G, int gn, uint8_t *U, uint32_t *sg, int32_t *s0,
                                int32_t *s1, float *f) {
    const size_t qb = A8IQ_QB(type);
    for (int j = 0; j < gn; j++) {
        const uint8_t *b = G + (size_t)(j / 8) * qb;
        uint64_t g[4];
        int32_t s[2];
        moe_a8iq_raw(type, b, j % 8, g, &sg[j], s);
        for (int l = 0; l < 4; l++) {
            memcpy(U + 128 * l + 4 * j, &g[l], 4);                           /* values 8l .. 8l+3: slab 2l */
            memcpy(U + 128 * l + 64 + 4 * j, (const uint8_t *)&g[l] + 4, 4); /* 8l+4 .. 8l+7 */
        }
        s0[j] = s[0];
        s1[j] = s[1];
        f[j] = j % 8 ? f[j - 1] : moe_a8iq_f(type, b);
    }
}

#endif
