/* act8_iq_ref.c — the act_q8 path (act8_ref.c) for the i-quants IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M: their specification and
 * scalar kernels; the SIMD ones are act8_iq_avx2.c / act8_iq_avx512.c.
 * act8_ref.c's activation rows (32-value blocks, f16-rounded scale da_b,
 * hsum halves), lane assignment (32-block b -> lane b mod 16, blocks in
 * increasing order per lane, +0 start, quant.h's tree) apply unchanged;
 * act8_ref.c hands these types to this file.
 *
 * ---- The dot-product contract ----------------------------------------------
 * The arithmetic is llama.cpp's integer dot of these formats against 8-bit
 * activations (ggml's vec_dot_{iq2_xxs,iq2_xs,iq2_s,iq3_xxs,iq3_s,iq1_s,
 * iq1_m}_q8_K): per 32-value sub-block an exact integer sum of grid value
 * (signed) times activation code, times the sub-block's odd integer scale,
 * then float scales. ggml's Q8_K activations carry one scale per 256
 * values; here each 32-block has its own da_b, so the float steps happen
 * per 32-block. With the formats' layouts and fields as iq2_ref.c /
 * iq3_ref.c spell them out, 32-block b = sub-block ib of its super-block,
 * v_k its integer weights, s_h the integer scale of half h (values
 * 16h .. 16h+15) and F the super-block's float factor:
 *   IQ2_XXS, IQ2_XS, IQ2_S: v = +-g (grid magnitude 8, 25 or 43, sign bit),
 *     s_h = 2 sc_h + 1 (the 4-bit code of half h; XXS: one per block),
 *     F = d * 0.125f                     (the FP32 path's d (0.5 + sc) 0.25)
 *   IQ3_XXS: v = +-g (grid 4..62), s = 2 sc + 1, F = d * 0.25f   (d (0.5 + sc) 0.5)
 *   IQ3_S:   v = +-g (grid 1..15), s = 2 sc + 1, F = d           (d (1 + 2 sc))
 *   IQ1_S:   v = 8 g + (delta < 0 ? -1 : 1), g in {-1, 0, 1} (-9..9),
 *            s = 2 sc + 1, F = d * 0.125f       (d (2 sc + 1) (g +- 1/8))
 *   IQ1_M:   as IQ1_S with a delta sign per 8 values, s_h per half and d
 *            the f16 spread over the scale words (moe_iq1m_d16)
 * and then, q_k the activation's codes:
 *     isum_h = sum_{k in half h} v_k q_k;  isum = s_0 isum_0 + s_1 isum_1  (int32)
 *     acc = fmaf((float)isum, F * da_b, acc)
 * F * s_h * v_k is the FP32 path's weight exactly (every product there is
 * exact: an f16 significand times at most 5 + 6 bits). |isum| <= 32 * 62 *
 * 127 * 31 < 2^24, so the conversion is exact; the rounded steps are F,
 * the product F * da_b and the FMA, in the order written (F is exact too,
 * a power-of-two scaling, unless d is Inf / NaN).
 *
 * ---- The a8 layout -----------------------------------------------------------
 * The file's bytes (moe_a8iq_repack copies): the kernels decode each group
 * of 16 blocks (act8_iq.h: moe_a8iq_group) into unsigned bytes u = v + 128
 * in the activation's slab layout and start each half's sum from -128
 * hsum_h (act8_ref.c's hsum), which makes it the exact isum_h. */
#include "quant/act8_iq.h"
#include "base/util.h"

#include <math.h>

bool moe_a8iq_type(uint32_t type) {
    return type == MOE_T_IQ2_XXS || type == MOE_T_IQ2_XS || type == MOE_T_IQ2_S || type == MOE_T_IQ3_XXS ||
           type == MOE_T_IQ3_S || type == MOE_T_IQ1_S || type == MOE_T_IQ1_M;
}

void moe_a8iq_repack(uint32_t type, const void *src, void *dst, int64_t nrows, int64_t n) {
    const size_t rb = (size_t)(n / 256) * moe_type_get(type)->block_bytes;
    if (dst != src) memmove(dst, src, rb * (size_t)nrows);
}

/* ---- the contract on plain rows (moe_a8_dot_ref), as written above -------- */

float moe_a8iq_dot_ref(uint32_t type, const void *row, const void *xa, int64_t n) {
    const size_t qb = moe_type_get(type)->block_bytes;
    float acc[16] = {0};
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *g = (const uint8_t *)xa + (b / A8_G) * A8_GROUP_BYTES, *sb = (const uint8_t *)row + (size_t)(b / 8) * qb;
        const int j = (int)(b % A8_G);
        uint64_t u[4];
        int32_t s[2], part[2] = {0, 0};
        moe_a8iq_block(type, sb, (int)(b % 8), u, s);
        for (int k = 0; k < 32; k++) {
            const int32_t v = (int32_t)((u[k / 8] >> (8 * (k % 8))) & 255) - 128;
            part[k / 16] += v * (int8_t)g[(k / 4) * 64 + j * 4 + (k % 4)];
        }
        float da;
        memcpy(&da, g + 576 + 4 * j, 4);
        acc[b % 16] = fmaf((float)(s[0] * part[0] + s[1] * part[1]), moe_a8iq_f(type, sb) * da, acc[b % 16]);
    }
    return moe_a8_reduce16(acc);
}

/* ---- the scalar kernels: the a8 layout is the file's, so the kernels are
 * the contract itself, rows in order and tokens in order -------------------- */

#define A8IQ_REF_KERNELS(name, type) MOE_A8_REF_KERNELS(name, type, moe_a8iq_dot_ref)  /* quant_internal.h */
A8IQ_REF_KERNELS(iq2_xxs, MOE_T_IQ2_XXS)
A8IQ_REF_KERNELS(iq2_xs, MOE_T_IQ2_XS)
A8IQ_REF_KERNELS(iq2_s, MOE_T_IQ2_S)
A8IQ_REF_KERNELS(iq3_xxs, MOE_T_IQ3_XXS)
A8IQ_REF_KERNELS(iq3_s, MOE_T_IQ3_S)
A8IQ_REF_KERNELS(iq1_s, MOE_T_IQ1_S)
A8IQ_REF_KERNELS(iq1_m, MOE_T_IQ1_M)
