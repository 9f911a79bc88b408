/* act8_kquant_ref.c — the act_q8 path (act8_ref.c) for Q5_K, Q3_K, Q2_K and
 * IQ4_XS: their specification, a8 layouts (act8_kquant.h) and scalar
 * kernels; the SIMD ones are act8_kquant_avx2.c / act8_kquant_avx512.c.
 * act8_ref.c's activation rows (32-value blocks, f16-rounded scale da_b,
 * hsum halves), lane assignment (32-block b -> lane b mod 16, blocks in
 * increasing order per lane, +0 start, quant.h's tree) and group layout
 * apply unchanged; act8_ref.c hands these types to this file.
 *
 * ---- The dot-product contracts ----------------------------------------------
 * The arithmetic is llama.cpp's integer dot of each format against 8-bit
 * activations (ggml's vec_dot_{q5_K,q3_K,q2_K,iq4_xs}_q8_K): exact integer
 * sums per sub-block, multiplied by the sub-block's integer scale (and min)
 * and summed as integers where the format's scales are integers, then one
 * float scale per term. ggml's Q8_K activations carry one scale per 256
 * values; here each 32-block has its own da_b (act8_ref.c), so the float
 * steps happen per 32-block, in this order (q_k: the activation's codes;
 * kquant_ref.c: the weights' codes and scales):
 *   Q5_K (32-block b = sub-block j of its super-block; as act8_ref.c's Q4_K):
 *     codes c_k 0..31, d1 = d * (float)sc_j, m1 = dmin * (float)m_j (exact);
 *     isum = sum c_k q_k, qsum = sum q_k                        (exact int32)
 *     acc = fmaf((float)isum, d1 * da_b, acc); acc = fmaf(-(float)qsum, m1 * da_b, acc)
 *   IQ4_XS (32-block b = sub-block ib; scale ls - 32, kv = kvalues_iq4nl):
 *     isum = sum kv[c_k] q_k;  acc = fmaf((float)isum, (d * (float)(ls - 32)) * da_b, acc)
 *     (d * (ls - 32) exact, as the FP32 path forms it)
 *   Q3_K (32-block b has halves h = 0, 1 = 16-value sub-blocks 2j + h with
 *     scales s_h - 32 in -32..31; values v_k = code - 4 in -4..3):
 *     isum_h = sum_{k in half h} v_k q_k;  isum = (s_0 - 32) isum_0 + (s_1 - 32) isum_1  (int32)
 *     acc = fmaf((float)isum, d * da_b, acc)
 *   Q2_K (halves as Q3_K; 4-bit scale sc_h and min m_h; codes c_k 0..3):
 *     isum = sc_0 sum_{half 0} c_k q_k + sc_1 sum_{half 1} c_k q_k    (int32)
 *     msum = m_0 hsum_0 + m_1 hsum_1   (hsum_h = sum of the half's q; int32)
 *     acc = fmaf((float)isum, d * da_b, acc); acc = fmaf(-(float)msum, dmin * da_b, acc)
 * Every integer is below 2^24 in magnitude (Q3_K: 2 * 32 * 16 * 4 * 127),
 * so each conversion is exact; the rounded steps are the products S = scale
 * * da_b and the FMAs, one at a time, in the order written.
 *
 * ---- The a8 layouts (moe_repack_a8; offsets in act8_kquant.h) ---------------
 * Per group of gn = 16 blocks (two super-blocks) or 8 (a row's last, with an
 * odd super-block count), nsb = gn / 8, at the group's first super-block's
 * place in the row: the file's bytes per super-block, so rows keep their
 * size. Every byte is the file's bits, moved. The 4-bit code runs are
 * act8_ref.c's slab pairs (pair p, byte 4j + i: low nibble code(j, 8p + i),
 * high code(j, 8p + 4 + i)); the 2-bit runs are Q6_K's hi chunks (chunk h,
 * byte 4j + i, bits 2s, 2s+1: code(j, 16h + 4s + i)); the 1-bit runs are
 * Q5_0's (byte 4j + i, bit t: code(j, 4t + i)). In all, byte p of a run lines
 * up with byte p of an activation slab (block j at bytes 4j..4j+3).
 *   Q5_K  (22 gn): hdr[nsb][16] the file's f16 d, f16 dmin, 12 scale bytes |
 *         lo[16 gn] the low 4 bits of the codes | hi[4 gn] bit 4
 *   Q3_K  (13.75 gn): sl[gn] low 4 bits of the unsigned 6-bit scales (block
 *         j: half 0 in the low nibble, half 1 high) | sh u32[nsb] their high
 *         2 bits (block j of super-block s, half h: bits 4j + 2h, +1) |
 *         d f16[nsb] | c2[2][4 gn] the low 2 bits of the codes (0..7) |
 *         hb[4 gn] bit 2 (the file's hmask bit)
 *   Q2_K  (10.5 gn): sc[2][gn] the file's scale bytes (sc | m << 4) of half
 *         h of block j | dm[nsb] f16 d, f16 dmin | c2[2][4 gn] the codes
 *   IQ4_XS (17 gn): hdr[nsb][8] the file's f16 d, u16 scales_h, scales_l[4] |
 *         lo[16 gn] the codes
 * The kernels turn codes into unsigned bytes u and start the sums where the
 * exact isum needs: Q5_K, Q2_K u = the code from 0 (qsum / hsum from the
 * activation's hsum); Q3_K u = code 0..7 from -4 hsum_h; IQ4_XS u = kv[c] +
 * 128 (1..241) from corr (= -128 sum q). */
#include "quant/act8_kquant.h"
#include "base/util.h"

#include <math.h>

bool moe_a8k_type(uint32_t type) {
    return type == MOE_T_Q5_K || type == MOE_T_Q3_K || type == MOE_T_Q2_K || type == MOE_T_IQ4_XS;
}

static size_t k_qb(uint32_t type) { return moe_type_get(type)->block_bytes; }

/* 32-block b of a plain row, read the file's way (kquant_ref.c): its
 * stored codes c (Q5_K 0..31, Q3_K 0..7 = value + 4, Q2_K 0..3, IQ4_XS
 * 0..15), scales sc[h] and mins mn[h] (Q5_K: sc[0], mn[0] the 6-bit pair;
 * Q3_K: sc[h] = s - 32 of half h; Q2_K: the 4-bit scale and min of half h;
 * IQ4_XS: sc[0] = ls - 32), its super-block's f16 d and dmin (0 if none). */
static void k_plain(uint32_t type, const uint8_t *row, int64_t b, uint8_t c[32], int sc[2], int mn[2], uint16_t *d,
                    uint16_t *dmin) {
    const uint8_t *sb = row + (size_t)(b / 8) * k_qb(type);
    const int j = (int)(b % 8), h = j / 4, jj = j % 4;
    sc[1] = mn[0] = mn[1] = 0;
    *dmin = 0;
    if (type == MOE_T_Q5_K) {
        uint8_t s, m;
        moe_q4k_scale_min(j, sb + 4, &s, &m);
        sc[0] = s; mn[0] = m;
        *d = moe_rd16(sb); *dmin = moe_rd16(sb + 2);
        for (int l = 0; l < 32; l++)
            c[l] = (uint8_t)(((sb[48 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 15) | ((sb[16 + l] >> j) & 1) << 4);
    } else if (type == MOE_T_Q3_K) {
        int8_t s[16];
        moe_q3k_scales(sb + 96, s);
        sc[0] = s[2 * j]; sc[1] = s[2 * j + 1];
        *d = moe_rd16(sb + 108);
        for (int l = 0; l < 32; l++)
            c[l] = (uint8_t)(((sb[32 + 32 * h + l] >> (2 * jj)) & 3) | ((sb[l] >> (4 * h + jj)) & 1) << 2);
    } else if (type == MOE_T_Q2_K) {
        for (int k = 0; k < 2; k++) { sc[k] = sb[2 * j + k] & 15; mn[k] = sb[2 * j + k] >> 4; }
        *d = moe_rd16(sb + 80); *dmin = moe_rd16(sb + 82);
        for (int l = 0; l < 32; l++) c[l] = (uint8_t)((sb[16 + 32 * h + l] >> (2 * jj)) & 3);
    } else {
        sc[0] = moe_iq4xs_scale(sb, j);
        *d = moe_rd16(sb);
        for (int l = 0; l < 16; l++) {
            c[l] = sb[8 + 16 * j + l] & 15;
            c[l + 16] = sb[8 + 16 * j + l] >> 4;
        }
    }
}

/* ---- moe_repack_a8 ------------------------------------------------------------ */

/* Codes of block j into a group's runs: the 4-bit low part (lo, NULL: none),
 * the 2-bit low part (c2, NULL: none) and one high bit at `bit` (hb). */
static void k_put_codes(const uint8_t c[32], int gn, int j, uint8_t *lo, uint8_t *c2, uint8_t *hb, int bit) {
    for (int k = 0; k < 32; k++) {
        const int i = k % 4;
        if (lo) lo[4 * gn * (k / 8) + 4 * j + i] |= (uint8_t)((c[k] & 15) << ((k % 8) >= 4 ? 4 : 0));
        if (c2) c2[4 * gn * (k / 16) + 4 * j + i] |= (uint8_t)((c[k] & 3) << (2 * ((k % 16) / 4)));
        if (hb) hb[4 * j + i] |= (uint8_t)(((c[k] >> bit) & 1) << (k / 4));
    }
}

static void k_repack_group(uint32_t type, const uint8_t *S, uint8_t *G, int64_t g0, int gn) {
    const size_t qb = k_qb(type);
    memset(G, 0, qb * (size_t)(gn / 8));
    for (int j = 0; j < gn; j++) {
        const int64_t b = g0 + j;
        const uint8_t *sb = S + (size_t)(b / 8) * qb;
        uint8_t c[32];
        int sc[2], mn[2];
        uint16_t d, dmin;
        k_plain(type, S, b, c, sc, mn, &d, &dmin);
        if (type == MOE_T_Q5_K) {
            if (j % 8 == 0) memcpy(G + 16 * (j / 8), sb, 16);
            k_put_codes(c, gn, j, G + A8K_Q5_LO(gn), NULL, G + A8K_Q5_HI(gn), 4);
        } else if (type == MOE_T_Q3_K) {
            const int u0 = sc[0] + 32, u1 = sc[1] + 32;
            G[j] = (uint8_t)((u0 & 15) | (u1 & 15) << 4);
            uint32_t sh = moe_kq_rd32(G + A8K_Q3_SH(gn) + 4 * (j / 8));
            sh |= (uint32_t)((u0 >> 4) | (u1 >> 4) << 2) << (4 * (j % 8));
            memcpy(G + A8K_Q3_SH(gn) + 4 * (j / 8), &sh, 4);
            if (j % 8 == 0) memcpy(G + A8K_Q3_D(gn) + 2 * (j / 8), &d, 2);
            k_put_codes(c, gn, j, NULL, G + A8K_Q3_C2(gn), G + A8K_Q3_HB(gn), 2);
        } else if (type == MOE_T_Q2_K) {
            G[j] = sb[2 * (b % 8)];
            G[gn + j] = sb[2 * (b % 8) + 1];
            if (j % 8 == 0) { memcpy(G + A8K_Q2_DM(gn) + 4 * (j / 8), &d, 2); memcpy(G + A8K_Q2_DM(gn) + 4 * (j / 8) + 2, &dmin, 2); }
            k_put_codes(c, gn, j, NULL, G + A8K_Q2_C2(gn), NULL, 0);
        } else {
            if (j % 8 == 0) memcpy(G + 8 * (j / 8), sb, 8);
            k_put_codes(c, gn, j, G + A8K_IQ4_LO(gn), NULL, NULL, 0);
        }
    }
}

void moe_a8k_repack(uint32_t type, const void *src, void *dst, int64_t nrows, int64_t n) {
    const int64_t nb = n / 32;
    const size_t qb = k_qb(type), rb = (size_t)(n / 256) * qb;
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *S = (const uint8_t *)src + (size_t)r * rb;
        uint8_t *D = (uint8_t *)dst + (size_t)r * rb;
        for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
            const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
            k_repack_group(type, S, D + (size_t)(g0 / 8) * qb, g0, gn);
        }
    }
}

/* ---- the contract on plain rows (moe_a8_dot_ref) --------------------------- */

/* One block's FMAs (the contract above) from its codes, scales and the
 * activation block's q and da. */
static float k_block(uint32_t type, const uint8_t c[32], const int sc[2], const int mn[2], uint16_t d16,
                     uint16_t dmin16, const int8_t q[32], float da, float acc) {
    int32_t part[2] = {0, 0}, qs[2] = {0, 0};
    for (int k = 0; k < 32; k++) {
        const int32_t w = type == MOE_T_IQ4_XS ? moe_kq_iq4nl[c[k]] : type == MOE_T_Q3_K ? c[k] - 4 : c[k];
        part[k / 16] += w * q[k];
        qs[k / 16] += q[k];
    }
    const float d = moe_f16_to_f32(d16), dmin = moe_f16_to_f32(dmin16);
    if (type == MOE_T_Q5_K) {
        acc = fmaf((float)(part[0] + part[1]), (d * (float)sc[0]) * da, acc);
        return fmaf(-(float)(qs[0] + qs[1]), (dmin * (float)mn[0]) * da, acc);
    }
    if (type == MOE_T_IQ4_XS) return fmaf((float)(part[0] + part[1]), (d * (float)sc[0]) * da, acc);
    acc = fmaf((float)(sc[0] * part[0] + sc[1] * part[1]), d * da, acc);
    if (type == MOE_T_Q2_K) acc = fmaf(-(float)(mn[0] * qs[0] + mn[1] * qs[1]), dmin * da, acc);
    return acc;
}

float moe_a8k_dot_ref(uint32_t type, const void *row, const void *xa, int64_t n) {
    float acc[16] = {0};
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *g = (const uint8_t *)xa + (b / A8_G) * A8_GROUP_BYTES;
        const int j = (int)(b % A8_G);
        int8_t q[32];
        uint8_t c[32];
        int sc[2], mn[2];
        uint16_t d, dmin;
        float da;
        for (int k = 0; k < 32; k++) q[k] = (int8_t)g[(k / 4) * 64 + j * 4 + (k % 4)];
        memcpy(&da, g + 576 + 4 * j, 4);
        k_plain(type, row, b, c, sc, mn, &d, &dmin);
        acc[b % 16] = k_block(type, c, sc, mn, d, dmin, q, da, acc[b % 16]);
    }
    return moe_a8_reduce16(acc);
}

/* ---- the scalar kernels on the a8 layout: as the SIMD ones compute (u
 * bytes from the runs, sums from the corrections, scales from the group's
 * header bytes) ------------------------------------------------------------ */

/* u of value k (0..31) of block j, from the group's runs. */
static int32_t k_u(uint32_t type, const uint8_t *G, int gn, int j, int k) {
    const int i = k % 4, t = k / 4;
    if (type == MOE_T_Q5_K || type == MOE_T_IQ4_XS) {
        const uint8_t *lo = G + (type == MOE_T_Q5_K ? A8K_Q5_LO(gn) : A8K_IQ4_LO(gn));
        const int nib = (lo[4 * gn * (t / 2) + 4 * j + i] >> (t % 2 ? 4 : 0)) & 15;
        if (type == MOE_T_IQ4_XS) return moe_kq_iq4nl[nib] + 128;
        return nib | ((G[A8K_Q5_HI(gn) + 4 * j + i] >> t) & 1) << 4;
    }
    const uint8_t *c2 = G + (type == MOE_T_Q3_K ? A8K_Q3_C2(gn) : A8K_Q2_C2(gn));
    const int v = (c2[4 * gn * (t / 4) + 4 * j + i] >> (2 * (t % 4))) & 3;
    return type == MOE_T_Q2_K ? v : v | ((G[A8K_Q3_HB(gn) + 4 * j + i] >> t) & 1) << 2;
}

/* Block j's scales from the group's header bytes, as k_plain gives them. */
static void k_scales(uint32_t type, const uint8_t *G, int gn, int j, int sc[2], int mn[2], float *d, float *dmin) {
    const int s = j / 8, jj = j % 8;
    sc[1] = mn[0] = mn[1] = 0;
    *dmin = 0;
    if (type == MOE_T_Q5_K) {
        uint8_t a, m;
        moe_q4k_scale_min(jj, G + 16 * s + 4, &a, &m);
        sc[0] = a; mn[0] = m;
        *d = moe_f16_to_f32(moe_rd16(G + 16 * s));
        *dmin = moe_f16_to_f32(moe_rd16(G + 16 * s + 2));
    } else if (type == MOE_T_Q3_K) {
        const uint32_t sh = moe_kq_rd32(G + A8K_Q3_SH(gn) + 4 * s) >> (4 * jj);
        for (int h = 0; h < 2; h++) sc[h] = (((G[j] >> (4 * h)) & 15) | (int)((sh >> (2 * h)) & 3) << 4) - 32;
        *d = moe_f16_to_f32(moe_rd16(G + A8K_Q3_D(gn) + 2 * s));
    } else if (type == MOE_T_Q2_K) {
        for (int h = 0; h < 2; h++) { sc[h] = G[h * gn + j] & 15; mn[h] = G[h * gn + j] >> 4; }
        *d = moe_f16_to_f32(moe_rd16(G + A8K_Q2_DM(gn) + 4 * s));
        *dmin = moe_f16_to_f32(moe_rd16(G + A8K_Q2_DM(gn) + 4 * s + 2));
    } else {
        sc[0] = moe_iq4xs_scale(G + 8 * s, jj);
        *d = moe_f16_to_f32(moe_rd16(G + 8 * s));
    }
}

static float k_row_dot(uint32_t type, const uint8_t *row, const uint8_t *xa, int64_t n) {
    const int64_t nb = n / 32;
    const size_t qb = k_qb(type);
    float acc[16] = {0};
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
        const uint8_t *G = row + (size_t)(g0 / 8) * qb, *A = xa + (g0 / A8_G) * A8_GROUP_BYTES;
        for (int j = 0; j < gn; j++) {
            int32_t hs[2], corr, part[2];
            float da, d, dmin;
            int sc[2], mn[2];
            memcpy(&corr, A + 512 + 4 * j, 4);
            memcpy(&da, A + 576 + 4 * j, 4);
            memcpy(&hs[0], A + 640 + 4 * j, 4);
            memcpy(&hs[1], A + 704 + 4 * j, 4);
            part[0] = type == MOE_T_IQ4_XS ? corr : type == MOE_T_Q3_K ? -4 * hs[0] : 0;
            part[1] = type == MOE_T_Q3_K ? -4 * hs[1] : 0;
            for (int k = 0; k < 32; k++)
                part[type == MOE_T_Q3_K || type == MOE_T_Q2_K ? k / 16 : 0] +=
                    k_u(type, G, gn, j, k) * (int8_t)A[(k / 4) * 64 + j * 4 + k % 4];
            k_scales(type, G, gn, j, sc, mn, &d, &dmin);
            if (type == MOE_T_Q5_K) {
                acc[j] = fmaf((float)part[0], (d * (float)sc[0]) * da, acc[j]);
                acc[j] = fmaf(-(float)(hs[0] + hs[1]), (dmin * (float)mn[0]) * da, acc[j]);
            } else if (type == MOE_T_IQ4_XS) {
                acc[j] = fmaf((float)part[0], (d * (float)sc[0]) * da, acc[j]);
            } else {
                acc[j] = fmaf((float)(sc[0] * part[0] + sc[1] * part[1]), d * da, acc[j]);
                if (type == MOE_T_Q2_K) acc[j] = fmaf(-(float)(mn[0] * hs[0] + mn[1] * hs[1]), dmin * da, acc[j]);
            }
        }
    }
    return moe_a8_reduce16(acc);
}

#define A8K_REF_KERNELS(name, type) MOE_A8_REF_KERNELS(name, type, k_row_dot)  /* quant_internal.h */
A8K_REF_KERNELS(q5_k, MOE_T_Q5_K)
A8K_REF_KERNELS(q3_k, MOE_T_Q3_K)
A8K_REF_KERNELS(q2_k, MOE_T_Q2_K)
A8K_REF_KERNELS(iq4_xs, MOE_T_IQ4_XS)
