/* act8_legacy_ref.c — the act_q8 path (act8_ref.c) for the four 32-value
 * formats with an f16 scale and 4- or 5-bit codes: Q4_1, Q5_0, Q5_1 and
 * IQ4_NL. Their specification, a8 layouts and scalar kernels; the SIMD ones
 * are act8_legacy_avx2.c / act8_legacy_avx512.c. act8_ref.c's activation
 * blocks (A8 rows), lane assignment (32-block b -> lane b mod 16, blocks in
 * increasing order per lane, +0 start, quant.h's tree) and group/slab layout
 * apply unchanged; act8_ref.c hands these types to this file.
 *
 * ---- The dot-product contracts (da_b, q_k: the activation block's) --------
 * Block b has the f16 scale d_b (Q4_1 / Q5_1 also the f16 offset m_b) and
 * codes c_k (Q4_1, IQ4_NL: 0..15; Q5_0, Q5_1: 0..31). The FP32 path's weights
 * (quant_ref.c) are d c + m (Q4_1, Q5_1), d (c - 16) (Q5_0), d kv[c]
 * (IQ4_NL, kv = moe_kvalues_iq4nl); here:
 *   IQ4_NL: isum_b = sum kv[c_k] q_k,   S_b = d_b * da_b,   acc = fmaf((float)isum_b, S_b, acc)
 *   Q5_0:   isum_b = sum (c_k - 16) q_k, S_b = d_b * da_b,  one FMA as IQ4_NL
 *   Q4_1, Q5_1: isum_b = sum c_k q_k, qsum_b = sum q_k (exact int32),
 *           S_b = d_b * da_b, M_b = m_b * da_b (one rounding each),
 *           acc = fmaf((float)isum_b, S_b, acc); acc = fmaf((float)qsum_b, M_b, acc)
 *   (the two terms of sum_k (d c_k + m) q_k, each scaled once per block, as
 *   Q4_K's two terms in act8_ref.c, with the offset's sign).
 * (llama.cpp pairs Q4_1 / Q5_1 with Q8_1 activation blocks whose sum term
 * is rounded to f16; this path keeps act8_ref.c's one activation format.)
 *
 * ---- The a8 layouts (moe_repack_a8): per group of gn blocks (16, or fewer
 * in a row's last), the file's bytes per block (IQ4_NL 18, Q4_1 20, Q5_0 22,
 * Q5_1 24 gn), so rows keep their size:
 *   uint16 d[gn]            the f16 scales
 *   uint16 m[gn]            (Q4_1, Q5_1) the f16 offsets
 *   uint8  lo[16 gn]        the low 4 bits of the codes, in act8_ref.c's
 *                           4-bit code layout (slab pairs: pair p, byte 4j + i:
 *                           low nibble code(j, 8p + i), high code(j, 8p + 4 + i))
 *   uint8  hi[4 gn]         (Q5_0, Q5_1) byte 4j + i, bit t (t = 0..7) = bit
 *                           4 of code(j, 4t + i): byte p of it lines up with
 *                           byte p of slab t, and ((hi >> t) & 1) << 4 is
 *                           what slab t's nibbles lack.
 * The kernels turn codes into unsigned bytes u and start the sums where the
 * exact isum needs: IQ4_NL u = kv[c] + 128 (1..241) from corr (= -128 sum q);
 * Q5_0 u = the 5-bit code from corr / 8 (= -16 sum q); Q4_1, Q5_1 u = the
 * code from 0, with qsum_b = hsum[j] + hsum[16 + j]. */
#include "quant/quant_internal.h"
#include "base/util.h"

#include <math.h>

bool moe_a8l_type(uint32_t type) {
    return type == MOE_T_Q4_1 || type == MOE_T_Q5_0 || type == MOE_T_Q5_1 || type == MOE_T_IQ4_NL;
}

/* Block bytes; whether the block has an offset m; whether 5-bit codes. */
static size_t l_bpb(uint32_t type) { return moe_type_get(type)->block_bytes; }
static bool l_has_m(uint32_t type) { return type == MOE_T_Q4_1 || type == MOE_T_Q5_1; }
static bool l_five(uint32_t type) { return type == MOE_T_Q5_0 || type == MOE_T_Q5_1; }

/* The 32 codes of block b of a plain row, in value order, and its d and m
 * (f16 bits; m = 0 where the format has none). quant_ref.c's layouts. */
static void l_plain(uint32_t type, const uint8_t *row, int64_t b, uint8_t c[32], uint16_t *d, uint16_t *m) {
    const uint8_t *blk = row + (size_t)b * l_bpb(type);
    *d = moe_rd16(blk);
    *m = l_has_m(type) ? moe_rd16(blk + 2) : 0;
    const uint8_t *p = blk + (l_has_m(type) ? 4 : 2);
    uint32_t qh = 0;
    if (l_five(type)) { memcpy(&qh, p, 4); p += 4; }
    for (int j = 0; j < 16; j++) {
        c[j] = (uint8_t)((p[j] & 15) | ((qh >> j) & 1) << 4);
        c[j + 16] = (uint8_t)((p[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    }
}

void moe_a8l_repack(uint32_t type, const void *src, void *dst, int64_t nrows, int64_t n) {
    const int64_t nb = n / 32;
    const size_t bpb = l_bpb(type), rb = (size_t)nb * bpb;
    const int ns = l_has_m(type) ? 4 : 2; /* scale bytes per block */
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *S = (const uint8_t *)src + (size_t)r * rb;
        uint8_t *D = (uint8_t *)dst + (size_t)r * rb;
        for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
            const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
            uint8_t *G = D + (size_t)g0 * bpb, *C = G + ns * gn, *H = C + 16 * gn;
            memset(C, 0, (size_t)(bpb - (size_t)ns) * (size_t)gn);
            for (int j = 0; j < gn; j++) {
                uint8_t c[32];
                uint16_t d, m;
                l_plain(type, S, g0 + j, c, &d, &m);
                memcpy(G + 2 * j, &d, 2);
                if (l_has_m(type)) memcpy(G + 2 * gn + 2 * j, &m, 2);
                for (int k = 0; k < 32; k++) {
                    const int hi = (k % 8) >= 4;
                    C[4 * gn * (k / 8) + 4 * j + k % 4] |= (uint8_t)((c[k] & 15) << (hi ? 4 : 0));
                    if (l_five(type)) H[4 * j + k % 4] |= (uint8_t)((c[k] >> 4) << (k / 4));
                }
            }
        }
    }
}

/* One block's terms of the contract, from its codes, scales and the activation's. */
static float l_block(uint32_t type, const uint8_t c[32], uint16_t d, uint16_t m, const int8_t q[32], float da,
                     float acc) {
    int32_t isum = 0, qsum = 0;
    for (int k = 0; k < 32; k++) {
        const int32_t w = type == MOE_T_IQ4_NL ? moe_kvalues_iq4nl[c[k]] : type == MOE_T_Q5_0 ? c[k] - 16 : c[k];
        isum += w * q[k];
        qsum += q[k];
    }
    acc = fmaf((float)isum, moe_f16_to_f32(d) * da, acc);
    if (l_has_m(type)) acc = fmaf((float)qsum, moe_f16_to_f32(m) * da, acc);
    return acc;
}

float moe_a8l_dot_ref(uint32_t type, const void *row, const void *xa, int64_t n) {
    float acc[16] = {0};
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *g = (const uint8_t *)xa + (b / A8_G) * A8_GROUP_BYTES;
        const int j = (int)(b % A8_G);
        int8_t q[32];
        uint8_t c[32];
        uint16_t d, m;
        float da;
        for (int k = 0; k < 32; k++) q[k] = (int8_t)g[(k / 4) * 64 + j * 4 + (k % 4)];
        memcpy(&da, g + 576 + 4 * j, 4);
        l_plain(type, row, b, c, &d, &m);
        acc[b % 16] = l_block(type, c, d, m, q, da, acc[b % 16]);
    }
    return moe_a8_reduce16(acc);
}

/* ---- the scalar kernels on the a8 layout: as the SIMD ones compute (u
 * bytes from the layout, sums from the corrections) ---------------------- */
static float l_row_dot(uint32_t type, const uint8_t *row, const uint8_t *xa, int64_t n) {
    const int64_t nb = n / 32;
    const size_t bpb = l_bpb(type);
    const int ns = l_has_m(type) ? 4 : 2;
    float acc[16] = {0};
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
        const uint8_t *G = row + (size_t)g0 * bpb, *C = G + ns * gn, *H = C + 16 * gn;
        const uint8_t *A = xa + (g0 / A8_G) * A8_GROUP_BYTES;
        for (int j = 0; j < gn; j++) {
            int32_t hs[2], corr;
            float da;
            memcpy(&corr, A + 512 + 4 * j, 4);
            memcpy(&da, A + 576 + 4 * j, 4);
            memcpy(&hs[0], A + 640 + 4 * j, 4);
            memcpy(&hs[1], A + 704 + 4 * j, 4);
            int32_t isum = type == MOE_T_IQ4_NL ? corr : type == MOE_T_Q5_0 ? corr / 8 : 0;
            for (int k = 0; k < 32; k++) {
                const int t = k / 4;
                const uint8_t lo = (uint8_t)((C[4 * gn * (t / 2) + 4 * j + k % 4] >> (t % 2 ? 4 : 0)) & 15);
                const uint8_t hb = l_five(type) ? (uint8_t)(((H[4 * j + k % 4] >> t) & 1) << 4) : 0;
                const int32_t u = type == MOE_T_IQ4_NL ? moe_kvalues_iq4nl[lo] + 128 : lo | hb;
                isum += u * (int8_t)A[t * 64 + j * 4 + k % 4];
            }
            acc[j] = fmaf((float)isum, moe_f16_to_f32(moe_rd16(G + 2 * j)) * da, acc[j]);
            if (l_has_m(type)) acc[j] = fmaf((float)(hs[0] + hs[1]), moe_f16_to_f32(moe_rd16(G + 2 * gn + 2 * j)) * da, acc[j]);
        }
    }
    return moe_a8_reduce16(acc);
}

#define A8L_REF_KERNELS(name, type) MOE_A8_REF_KERNELS(name, type, l_row_dot)  /* quant_internal.h */
A8L_REF_KERNELS(q4_1, MOE_T_Q4_1)
A8L_REF_KERNELS(q5_0, MOE_T_Q5_0)
A8L_REF_KERNELS(q5_1, MOE_T_Q5_1)
A8L_REF_KERNELS(iq4_nl, MOE_T_IQ4_NL)
