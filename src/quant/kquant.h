/* kquant.h — what the scalar reference of Q2_K, Q3_K, Q5_K and IQ4_XS
 * (kquant_ref.c, their specification) shares with the SIMD kernel files.
 * Kept apart from quant_internal.h so these formats stay one self-contained
 * addition (src/quant/ only). */
#ifndef MOE_KQUANT_H
#define MOE_KQUANT_H

#include "quant/quant_internal.h"

/* ggml's kvalues_iq4nl: the 16 non-linear levels of IQ4_NL / IQ4_XS. */
extern const int8_t moe_kq_iq4nl[16];
extern const float moe_kq_iq4nl_f[16];

/* Q3_K: the 16 6-bit sub-block scales minus 32 (-32..31), unpacked from the
 * 12 scale bytes (ggml's dequantize_row_q3_K kmask shuffle): scale j has its
 * low 4 bits in byte j (j < 8, low nibble) or j - 8 (high nibble), its high
 * 2 bits at bit 2 (j / 4) of byte 8 + j % 4. */
static inline void moe_q3k_scales(const uint8_t *s, int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        const int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
        const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | hi << 4) - 32);
    }
}

/* IQ4_XS: the scale of 32-value sub-block ib (0..7) minus 32 (-32..31):
 * low 4 bits in scales_l[ib / 2] (nibble ib % 2), high 2 bits at bit 2 ib of
 * the u16 scales_h. b is the block (f16 d at 0, scales_h at 2, scales_l at 4). */
static inline int moe_iq4xs_scale(const uint8_t *b, int ib) {
    const uint16_t h = moe_rd16(b + 2);
    return (((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | ((h >> (2 * ib)) & 3) << 4) - 32;
}

static inline uint32_t moe_kq_rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* Dequantize one block of Q2_K, Q3_K, Q5_K or IQ4_XS (kquant_ref.c spells
 * the layouts and the float operations out). */
void moe_kq_dq_block(uint32_t type, const uint8_t *b, float *w);
/* Quantize 256 values into one block: ggml's reference quantizers
 * (quantize_row_*_ref, no importance matrix). */
void moe_kq_quantize_block(uint32_t type, const float *x, uint8_t *y);

/* The wide kernels of these formats (quant_internal.h DEF_WIDE_BLOCK): each
 * dequantizes a super-block in 4 parts of 64 values. */
#define MOE_KQ_WIDE_FORMATS(X) X(q5_k, 64, 4, QB_Q5_K) X(q3_k, 64, 4, QB_Q3_K) X(q2_k, 64, 4, QB_Q2_K) \
    X(iq4_xs, 64, 4, QB_IQ4_XS)

#endif
