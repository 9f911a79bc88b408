/* act8_ref.c — the 8-bit activation path (flag `act_q8`): its specification.
 *
 * Why a second numerics: the FP32 contract of quant.h costs four vector
 * operations per 16 weights (widen, convert, scale, FMA), so on a 2-core
 * machine the matrix-vector products run at ~20 GB/s per core, below what
 * memory delivers. Quantizing the *activations* to 8-bit blocks, as llama.cpp
 * does for Q8_0 weights, turns a block's dot product into integer
 * multiply-adds (one VNNI vpdpbusd per 64 weights) whose sum is exact, so
 * the kernels become memory-bound. It changes the logits (by about as much as
 * llama.cpp's own Q8_0 runs differ from FP32), so it is a separate, opt-in
 * numerics, never a default; within it every guarantee holds: the same bits
 * for every ISA, thread count and prefill split.
 *
 * ---- Activation blocks (moe_quantize_act8): llama.cpp's x86 Q8_0 ---------
 * A row of n values (n % 32 == 0) is cut into blocks of 32. Per block b:
 *     amax = max |x_k|               (NaN ignored)
 *     id   = amax != 0 ? 127 / amax : 0
 *     q_k  = round_half_even(x_k * id), clamped to [-127, 127], NaN -> 0
 *     da_b = (float)(half)(amax / 127)   (rounded to IEEE half, as ggml stores it)
 *
 * ---- The dot-product contracts ----------------------------------------------
 * Every weight format splits a row into the same blocks of 32 values, and
 * block b's terms go to lane b mod 16: lane j takes blocks j, j+16, j+32, ...
 * in increasing order, acc[j] starts from +0 and takes the block's FMA(s)
 * below; lanes are reduced by quant.h's fixed tree; a second-level scale
 * multiplies after. Each isum is an exact int32 (so a kernel may sum a block's
 * products in any order); only the float steps are fixed.
 *   Q8_0 (dw_b = the block's f16 scale):
 *     isum_b = sum_{k in block b} qw_k * q_k,   S_b = dw_b * da_b  (one rounding)
 *     acc = fmaf((float)isum_b, S_b, acc)
 *   NVFP4: a 64-value block is two 32-blocks; 32-block b has halves h = 0, 1
 *   (its values 16h .. 16h+15), each exactly one NVFP4 sub-block with its own
 *   UE4M3 scale byte sc_{b,h}; kv = moe_kvalues_fp4 (twice the E2M1 values):
 *     isum_{b,h} = sum_{k in half h} kv[code_k] * q_k
 *     S_{b,h}    = moe_ue4m3_half[sc_{b,h}] * da_b  (one rounding)
 *     acc = fmaf((float)isum_{b,0}, S_{b,0}, acc); acc = fmaf((float)isum_{b,1}, S_{b,1}, acc)
 *   (the FP32 path's weight is w = (float)kv[code] * moe_ue4m3_half[sc]: the
 *   same value, its scale applied once per half instead of per weight).
 *   MXFP4 (E8M0 byte e_b per block):
 *     isum_b = sum kv[code_k] * q_k,   S_b = moe_e8m0_half(e_b) * da_b,   one FMA
 *   Q4_0 (f16 scale d_b per block):
 *     isum_b = sum (code_k - 8) * q_k, S_b = d_b * da_b,                  one FMA
 *   Q4_K: a 256-value super-block is 8 32-blocks; 32-block b is its
 *   sub-block j = b mod 8, with 6-bit scale sc_j and min m_j
 *   (moe_q4k_scale_min), the super-block's f16 d and dmin, and codes c_k in
 *   0..15. The FP32 path's weight is w = d1 * c - m1 with d1 = d * (float)sc_j
 *   and m1 = dmin * (float)m_j (quant_ref.c; both products are exact: an
 *   f16 significand of 11 bits times 6 bits). Here, with the same d1, m1:
 *     isum_b = sum_k c_k * q_k,   qsum_b = sum_k q_k    (exact int32)
 *     S_b = d1 * da_b,   M_b = m1 * da_b                (one rounding each)
 *     acc = fmaf((float)isum_b, S_b, acc); acc = fmaf(-(float)qsum_b, M_b, acc)
 *   (the two terms of sum_k (d1 c_k - m1) q_k, each scaled once per block:
 *   the FP32 path rounds d1 c - m1 once per weight, this path never forms it).
 *   Q6_K: a 256-value super-block is 16 sub-blocks of 16 values with int8
 *   scales and one f16 d; 32-block b (j = b mod 8 of its super-block) has
 *   halves h = 0, 1 (its values 16h .. 16h+15), each one sub-block (2j + h)
 *   with scale sc_{b,h}; codes u_k in 0..63, value u - 32. The FP32 path's
 *   weight is w = (d * (float)sc) * (float)(u - 32), exact (11 + 7 + 5 bits):
 *     isum_{b,h} = sum_{k in half h} (u_k - 32) * q_k
 *     S_{b,h}    = (d * (float)sc_{b,h}) * da_b   (d * sc exact; one rounding)
 *     acc = fmaf((float)isum_{b,0}, S_{b,0}, acc); acc = fmaf((float)isum_{b,1}, S_{b,1}, acc)
 *   (like NVFP4: the same weight values, scaled once per half).
 *
 * ---- Memory layouts ---------------------------------------------------------
 * Both sides are cut into groups of G = 16 blocks (512 values; the last group
 * of a row may have nb < 16 blocks), and inside a group the bytes are
 * "slab-transposed": slab t (t = 0..7) holds, for each block j of the group,
 * its values 4t..4t+3. So one 64-byte slab feeds one vpdpbusd whose lane j
 * accumulates block j — exactly the lane assignment above.
 *   activations, per group (A8_GROUP_BYTES = 768; the group's fields other
 *   than q and da are derived from q, and the kernels rely on them):
 *     @0   int8  q[8][16][4]   slab t, block j, value 4t+i (zeros for absent blocks)
 *     @512 int32 corr[16]      -128 * sum of block j's q (0 for absent blocks)
 *     @576 float da[16]        (0 for absent blocks)
 *     @640 int32 hsum[32]      hsum[j] = sum of block j's q over its values
 *                              0..15, hsum[16 + j] over values 16..31 (0 for
 *                              absent blocks): the corrections of the 4-bit
 *                              formats and K-quants
 * The a8 weight layouts (moe_repack_a8) keep the file's bytes per block
 * (K-quants: per 256-value super-block, so a group of 16 blocks is two
 * super-blocks, and a row with an odd super-block count ends with a group of
 * 8), so a row keeps its byte count and rows stay row_bytes apart; a group of
 * a row is self-contained (its scales and codes only), and nothing is
 * precomputed: every byte of a group is one of the file's bits, moved (one
 * exception, NVFP4's scale bytes: below).
 *   Q8_0, per group of gn blocks (34 gn bytes):
 *     uint16 d[gn]        the blocks' f16 scales
 *     uint8  u[8][gn][4]  qw ^ 0x80 (= qw + 128): unsigned, as vpdpbusd wants;
 *                         corr removes the 128 * sum q the bias adds.
 *   The 4-bit formats (NVFP4 18 gn bytes, MXFP4 17 gn, Q4_0 18 gn, Q4_K 18
 *   gn): first the scales, then 16 gn bytes of codes (code(j, k) = the 4-bit
 *   code of value k of block j, as in the file: moe_kvalues_fp4 index, or
 *   the Q4_0 / Q4_K nibble):
 *     NVFP4: uint8 sc[2][gn]  sc[h][j] = the UE4M3 byte of half h of block j,
 *                         canonical: b & 0x7F, except 0x7F -> 0x00 and
 *                         0xFF -> 0x7F (the same values: ggml ignores bit 7
 *                         except in 0x7F, which is 0), so every stored byte
 *                         decodes by the shift alone, (c << 20 as a float) *
 *                         2^119 = moe_ue4m3_half[c | 0x80], with no special
 *                         case (two vector operations fewer per 16 scales)
 *     MXFP4: uint8 e[gn]      the E8M0 bytes
 *     Q4_0:  uint16 d[gn]     the f16 scales
 *     Q4_K:  uint8 hdr[gn/8][16]  the first 16 bytes of each of the group's
 *                         super-blocks, as in the file: f16 d, f16 dmin, the
 *                         12 packed scale/min bytes (gn = 16, or 8 in the
 *                         last group of a row with an odd super-block count)
 *   Q6_K (26.25 gn bytes: 210 per super-block), per group of gn = 16 or 8
 *   blocks (nsb = gn / 8 super-blocks):
 *     uint16 d[nsb]       the super-blocks' f16 scales
 *     int8   sc[2][gn]    sc[h][j] = the scale of half h of block j
 *     uint8  lo[16 gn]    the low 4 bits of the codes, in the 4-bit formats'
 *                         code layout below (full or partial group)
 *     uint8  hi[2][4 gn]  the high 2 bits: chunk h (slabs 4h .. 4h+3 = the
 *                         values of half h), byte 4j + i, bits 2s, 2s+1 =
 *                         those of code(j, 16h + 4s + i); so byte p of a chunk
 *                         lines up with byte p of the unpacked nibble slab
 *                         (block j at bytes 4j..4j+3, in full and partial
 *                         groups alike), and (chunk >> 2s & 3) << 4 is the
 *                         part of slab 4h + s that the nibbles lack.
 *   codes of a group of gn blocks (16, or fewer in a row's last; NVFP4: gn
 *   even): 4 slab pairs of 4 gn bytes; pair p, byte 4j + i (j < gn, i < 4):
 *       low nibble = code(j, 8p + i) (slab 2p), high nibble = code(j, 8p + 4 + i) (slab 2p+1)
 *     so a nibble split of a pair gives two slabs, each with block j at
 *     bytes 4j..4j+3 as in the activation slabs: no lane moves are needed
 *     for any gn, and only the pair's 4 gn bytes are read (NVFP4: pairs 0,
 *     1 are half 0, pairs 2, 3 half 1). A full group's pair is one 64-byte
 *     load, a shift, two ANDs and two lookups for two vpdpbusd; the earlier
 *     full-group layout (slab t of 32 bytes, blocks 8.. in the high nibbles)
 *     took a broadcast load, a masked shift, an AND and a lookup per
 *     vpdpbusd (figures: docs/KERNELS.md, the 4-bit formats under act_q8).
 *   The kernels turn codes into unsigned bytes u for vpdpbusd and start the
 *   sums from corrections: NVFP4 / MXFP4 u = kv[code] + 12 (0..24, a
 *   16-entry table), starting from -12 * hsum (NVFP4 half h: -12 * hsum[16h
 *   + j]; MXFP4: -12 * (hsum[j] + hsum[16 + j])); Q4_0 u = code, starting
 *   from corr / 16 = -8 * sum q; Q4_K u = code, starting from 0, with
 *   qsum_b = hsum[j] + hsum[16 + j]; Q6_K u = the 6-bit code, half h
 *   starting from -32 * hsum[16h + j]. Every such sum is the exact isum above. */
#include "quant/quant_internal.h"
#include "base/util.h"

#include <math.h>

int64_t moe_act8_row_bytes(int64_t n) {
    const int64_t nb = n / 32;
    return (nb + A8_G - 1) / A8_G * A8_GROUP_BYTES;
}

void moe_quantize_act8(const float *x, void *dst, int64_t n) {
    const int64_t nb = n / 32, ng = (nb + A8_G - 1) / A8_G;
    uint8_t *D = dst;
    memset(D, 0, (size_t)(ng * A8_GROUP_BYTES));
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * 32;
        uint8_t *g = D + (b / A8_G) * A8_GROUP_BYTES;
        const int j = (int)(b % A8_G);
        float amax = 0.0f;
        for (int k = 0; k < 32; k++) {
            const float a = fabsf(xb[k]);
            if (a > amax) amax = a;
        }
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int32_t hs[2] = {0, 0};
        for (int k = 0; k < 32; k++) {
            const float v = xb[k] * id;
            int q = v >= 127.0f ? 127 : v <= -127.0f ? -127 : v == v ? moe_nearest_int(v) : 0;
            g[(k / 4) * 64 + j * 4 + (k % 4)] = (uint8_t)(int8_t)q;
            hs[k / 16] += q;
        }
        const int32_t corr = -128 * (hs[0] + hs[1]);
        const float da = moe_f16_to_f32(moe_f32_to_f16(amax / 127.0f));
        memcpy(g + 512 + 4 * j, &corr, 4);
        memcpy(g + 576 + 4 * j, &da, 4);
        memcpy(g + 640 + 4 * j, &hs[0], 4);
        memcpy(g + 704 + 4 * j, &hs[1], 4);
    }
}

/* ---- the 4-bit formats on the file's layout ----------------------------- */

/* Bytes per 32 values in the file (and so in the a8 layout). */
static size_t a8_bpb(uint32_t type) { return type == MOE_T_MXFP4 ? 17 : 18; }
/* Bytes of scale per block in the a8 layout's scale area. */
static int a8_sb(uint32_t type) { return type == MOE_T_MXFP4 ? 1 : 2; }

/* The 32 codes of 32-block b of a plain row, in value order. */
static void plain_codes(uint32_t type, const uint8_t *row, int64_t b, uint8_t c[32]) {
    if (type == MOE_T_NVFP4) {
        const uint8_t *blk = row + (size_t)(b / 2) * QB_NVFP4;
        for (int h = 0; h < 2; h++) {
            const uint8_t *qs = blk + 4 + 8 * (2 * (b % 2) + h);
            for (int j = 0; j < 8; j++) {
                c[16 * h + j] = qs[j] & 15;
                c[16 * h + j + 8] = qs[j] >> 4;
            }
        }
    } else if (type == MOE_T_Q4_K) {
        /* sub-block j of its super-block: the nibbles (low for even j) of qs[32 (j/2) ..] */
        const int j = (int)(b % 8);
        const uint8_t *qs = row + (size_t)(b / 8) * QB_Q4_K + 16 + 32 * (j / 2);
        for (int k = 0; k < 32; k++) c[k] = (qs[k] >> (4 * (j % 2))) & 15;
    } else {
        const uint8_t *qs = type == MOE_T_Q4_0 ? row + (size_t)b * QB_Q4_0 + 2 : row + (size_t)b * QB_MXFP4 + 1;
        for (int j = 0; j < 16; j++) {
            c[j] = qs[j] & 15;
            c[j + 16] = qs[j] >> 4;
        }
    }
}

/* The scale bytes of 32-block b of a plain row, as the a8 layout stores
 * them: NVFP4 s[h] = half h's UE4M3 byte; MXFP4 s[0] = e; Q4_0 s = the f16. */
static void plain_scales(uint32_t type, const uint8_t *row, int64_t b, uint8_t s[2]) {
    if (type == MOE_T_NVFP4) {
        const uint8_t *blk = row + (size_t)(b / 2) * QB_NVFP4;
        s[0] = blk[2 * (b % 2)];
        s[1] = blk[2 * (b % 2) + 1];
    } else if (type == MOE_T_MXFP4) {
        s[0] = row[(size_t)b * QB_MXFP4];
        s[1] = 0;
    } else {
        memcpy(s, row + (size_t)b * QB_Q4_0, 2);
    }
}

/* Where code(j, k) lives in a group's code area (gn blocks): byte, and
 * whether in the high nibble (the layout above). */
static inline size_t a8_code_pos(int gn, int j, int k, int *hi) {
    *hi = (k % 8) >= 4;
    return (size_t)(4 * gn * (k / 8) + 4 * j + k % 4);
}

/* Q6_K: the 6-bit codes u (0..63, value u - 32) of 32-block b of a plain
 * row, the scales of its two halves, and (return) its super-block's f16 d.
 * 32-block j of a super-block is values 32j..32j+31: file half f = j / 4,
 * g = j % 4; value l has low bits from ql[64f + l] (g = 0: low nibble, g = 2:
 * high) or ql[64f + 32 + l] (g = 1 low, g = 3 high), high bits (qh[32f + l]
 * >> 2g) & 3; half h is sub-block 2j + h. */
static uint16_t q6k_plain(const uint8_t *row, int64_t b, uint8_t u[32], int8_t sc[2]) {
    const uint8_t *sb = row + (size_t)(b / 8) * QB_Q6_K;
    const int j = (int)(b % 8), f = j / 4, g = j % 4;
    for (int l = 0; l < 32; l++) {
        const uint8_t lo = sb[64 * f + 32 * (g % 2) + l] >> (4 * (g / 2)) & 15;
        u[l] = (uint8_t)(lo | ((sb[128 + 32 * f + l] >> (2 * g)) & 3) << 4);
    }
    sc[0] = (int8_t)sb[192 + 2 * j];
    sc[1] = (int8_t)sb[192 + 2 * j + 1];
    return moe_rd16(sb + 208);
}

/* Q6_K: where the low nibble of code(j, k) lives in a group's lo area (as
 * a8_code_pos) and the high 2 bits in its hi area: byte, and bit shift. */
static inline size_t q6k_hi_pos(int gn, int j, int k, int *shift) {
    *shift = 2 * ((k % 16) / 4);
    return (size_t)(4 * gn * (k / 16) + 4 * j + k % 4);
}

/* ---- moe_repack_a8 -------------------------------------------------------- */

/* NVFP4's canonical scale byte (the layout above): the same UE4M3 value,
 * bit 7 clear, 0x7F meaning 480 (ggml's 0xFF) and 0 stored as 0x00. */
static uint8_t a8_ue4m3_byte(uint8_t b) { return b == 0x7F ? 0x00 : b == 0xFF ? 0x7F : (uint8_t)(b & 0x7F); }

static void repack_q8_0(const void *src, void *dst, int64_t nrows, int64_t n) {
    const int64_t nb = n / 32;
    const size_t rb = (size_t)nb * QB_Q8_0;
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *S = (const uint8_t *)src + (size_t)r * rb;
        uint8_t *D = (uint8_t *)dst + (size_t)r * rb;
        for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
            const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
            uint8_t *G = D + (size_t)g0 * QB_Q8_0;
            for (int j = 0; j < gn; j++) {
                const uint8_t *blk = S + (size_t)(g0 + j) * QB_Q8_0;
                memcpy(G + 2 * j, blk, 2);
                for (int k = 0; k < 32; k++)
                    G[2 * gn + (k / 4) * gn * 4 + j * 4 + (k % 4)] = blk[2 + k] ^ 0x80;
            }
        }
    }
}

static void repack_4bit(uint32_t type, const void *src, void *dst, int64_t nrows, int64_t n) {
    const int64_t nb = n / 32;
    const size_t bpb = a8_bpb(type), rb = (size_t)nb * bpb;
    const int sb = a8_sb(type);
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *S = (const uint8_t *)src + (size_t)r * rb;
        uint8_t *D = (uint8_t *)dst + (size_t)r * rb;
        for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
            const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
            uint8_t *G = D + (size_t)g0 * bpb, *C = G + sb * gn;
            memset(C, 0, (size_t)(16 * gn));
            if (type == MOE_T_Q4_K)                      /* the super-blocks' headers */
                for (int s8 = 0; s8 < gn / 8; s8++) memcpy(G + 16 * s8, S + (size_t)(g0 / 8 + s8) * QB_Q4_K, 16);
            for (int j = 0; j < gn; j++) {
                uint8_t s[2], c[32];
                plain_codes(type, S, g0 + j, c);
                if (type != MOE_T_Q4_K) plain_scales(type, S, g0 + j, s);
                if (type == MOE_T_NVFP4) { G[j] = a8_ue4m3_byte(s[0]); G[gn + j] = a8_ue4m3_byte(s[1]); }
                else if (type != MOE_T_Q4_K) memcpy(G + sb * j, s, (size_t)sb);
                for (int k = 0; k < 32; k++) {
                    int hi;
                    const size_t p = a8_code_pos(gn, j, k, &hi);
                    C[p] |= (uint8_t)(c[k] << (hi ? 4 : 0));
                }
            }
        }
    }
}

static void repack_q6_k(const void *src, void *dst, int64_t nrows, int64_t n) {
    const int64_t nb = n / 32;
    const size_t rb = (size_t)(n / 256) * QB_Q6_K;
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *S = (const uint8_t *)src + (size_t)r * rb;
        uint8_t *D = (uint8_t *)dst + (size_t)r * rb;
        for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
            const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G), nsb = gn / 8;
            uint8_t *G = D + (size_t)(g0 / 8) * QB_Q6_K, *C = G + 18 * nsb, *H = C + 16 * gn;
            memset(C, 0, (size_t)(24 * gn));
            for (int j = 0; j < gn; j++) {
                uint8_t u[32];
                int8_t sc[2];
                const uint16_t d = q6k_plain(S, g0 + j, u, sc);
                if (j % 8 == 0) memcpy(G + 2 * (j / 8), &d, 2);
                G[2 * nsb + j] = (uint8_t)sc[0];
                G[2 * nsb + gn + j] = (uint8_t)sc[1];
                for (int k = 0; k < 32; k++) {
                    int hi, sh;
                    const size_t pc = a8_code_pos(gn, j, k, &hi), ph = q6k_hi_pos(gn, j, k, &sh);
                    C[pc] |= (uint8_t)((u[k] & 15) << (hi ? 4 : 0));
                    H[ph] |= (uint8_t)((u[k] >> 4) << sh);
                }
            }
        }
    }
}

void moe_repack_a8(uint32_t type, const void *src, void *dst, int64_t nrows, int64_t n) {
    if (moe_a8l_type(type)) { moe_a8l_repack(type, src, dst, nrows, n); return; } /* act8_legacy_ref.c */
    if (moe_a8k_type(type)) { moe_a8k_repack(type, src, dst, nrows, n); return; } /* act8_kquant_ref.c */
    if (moe_a8iq_type(type)) { moe_a8iq_repack(type, src, dst, nrows, n); return; } /* act8_iq_ref.c */
    if (type == MOE_T_Q8_0) repack_q8_0(src, dst, nrows, n);
    else if (type == MOE_T_Q6_K) repack_q6_k(src, dst, nrows, n);
    else repack_4bit(type, src, dst, nrows, n);
}

/* ---- the contract on plain rows (moe_a8_dot_ref) ------------------------- */

/* Block b's activation values and scale, read back from the A8 layout. */
static void a8_block(const uint8_t *xa, int64_t b, int8_t q[32], float *da) {
    const uint8_t *g = xa + (b / A8_G) * A8_GROUP_BYTES;
    const int j = (int)(b % A8_G);
    for (int k = 0; k < 32; k++) q[k] = (int8_t)g[(k / 4) * 64 + j * 4 + (k % 4)];
    memcpy(da, g + 576 + 4 * j, 4);
}

float moe_a8_dot_ref(uint32_t type, const void *row, const void *xa, int64_t n) {
    if (moe_a8l_type(type)) return moe_a8l_dot_ref(type, row, xa, n); /* act8_legacy_ref.c */
    if (moe_a8k_type(type)) return moe_a8k_dot_ref(type, row, xa, n); /* act8_kquant_ref.c */
    if (moe_a8iq_type(type)) return moe_a8iq_dot_ref(type, row, xa, n); /* act8_iq_ref.c */
    const uint8_t *R = row;
    float acc[16] = {0};
    for (int64_t b = 0; b < n / 32; b++) {
        int8_t q[32];
        float da;
        a8_block(xa, b, q, &da);
        float *a = &acc[b % 16];
        if (type == MOE_T_Q8_0) {
            const uint8_t *blk = R + b * QB_Q8_0;
            int32_t isum = 0;
            for (int k = 0; k < 32; k++) isum += (int32_t)(int8_t)blk[2 + k] * q[k];
            const float S = moe_f16_to_f32(moe_rd16(blk)) * da;
            *a = fmaf((float)isum, S, *a);
            continue;
        }
        if (type == MOE_T_Q6_K) {
            uint8_t u[32];
            int8_t sc[2];
            const float d = moe_f16_to_f32(q6k_plain(R, b, u, sc));
            for (int h = 0; h < 2; h++) {
                int32_t isum = 0;
                for (int k = 16 * h; k < 16 * h + 16; k++) isum += ((int32_t)u[k] - 32) * q[k];
                const float S = (d * (float)sc[h]) * da;
                *a = fmaf((float)isum, S, *a);
            }
            continue;
        }
        uint8_t c[32], s[2];
        plain_codes(type, R, b, c);
        if (type == MOE_T_Q4_K) {
            const uint8_t *sb = R + (size_t)(b / 8) * QB_Q4_K;
            uint8_t sc, m;
            moe_q4k_scale_min((int)(b % 8), sb + 4, &sc, &m);
            const float d1 = moe_f16_to_f32(moe_rd16(sb)) * (float)sc, m1 = moe_f16_to_f32(moe_rd16(sb + 2)) * (float)m;
            int32_t isum = 0, qsum = 0;
            for (int k = 0; k < 32; k++) { isum += (int32_t)c[k] * q[k]; qsum += q[k]; }
            const float S = d1 * da, M = m1 * da;
            *a = fmaf((float)isum, S, *a);
            *a = fmaf(-(float)qsum, M, *a);
            continue;
        }
        plain_scales(type, R, b, s);
        if (type == MOE_T_NVFP4) {
            for (int h = 0; h < 2; h++) {
                int32_t isum = 0;
                for (int k = 16 * h; k < 16 * h + 16; k++) isum += (int32_t)moe_kvalues_fp4[c[k]] * q[k];
                const float S = moe_ue4m3_half[s[h]] * da;
                *a = fmaf((float)isum, S, *a);
            }
        } else {
            int32_t isum = 0;
            for (int k = 0; k < 32; k++)
                isum += (type == MOE_T_Q4_0 ? (int32_t)c[k] - 8 : (int32_t)moe_kvalues_fp4[c[k]]) * q[k];
            const float dw = type == MOE_T_Q4_0 ? moe_f16_to_f32(moe_rd16(s)) : moe_e8m0_half(s[0]);
            const float S = dw * da;
            *a = fmaf((float)isum, S, *a);
        }
    }
    return moe_a8_reduce16(acc);
}

/* ---- the scalar kernels on the a8 layout ---------------------------------
 * The same contract over rows in the a8 layout, computed as the SIMD kernels
 * do (unsigned bytes and corrections): the kernels of every table without a
 * SIMD one. */
static float a8_row_dot_q8_0(const uint8_t *row, const uint8_t *xa, int64_t n) {
    const int64_t nb = n / 32;
    float acc[16] = {0};
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
        const uint8_t *G = row + (size_t)g0 * QB_Q8_0;
        const uint8_t *A = xa + (g0 / A8_G) * A8_GROUP_BYTES;
        for (int j = 0; j < gn; j++) {
            int32_t isum;
            memcpy(&isum, A + 512 + 4 * j, 4);                 /* -128 * sum q */
            for (int t = 0; t < 8; t++)
                for (int i = 0; i < 4; i++)
                    isum += (int32_t)G[2 * gn + t * gn * 4 + j * 4 + i] * (int8_t)A[t * 64 + j * 4 + i];
            float da;
            memcpy(&da, A + 576 + 4 * j, 4);
            const float S = moe_f16_to_f32(moe_rd16(G + 2 * j)) * da;
            acc[j] = fmaf((float)isum, S, acc[j]);
        }
    }
    return moe_a8_reduce16(acc);
}

static float a8_row_dot_4bit(uint32_t type, const uint8_t *row, const uint8_t *xa, int64_t n) {
    const int64_t nb = n / 32;
    const size_t bpb = a8_bpb(type);
    const int sb = a8_sb(type);
    float acc[16] = {0};
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
        const uint8_t *G = row + (size_t)g0 * bpb, *C = G + sb * gn;
        const uint8_t *A = xa + (g0 / A8_G) * A8_GROUP_BYTES;
        for (int j = 0; j < gn; j++) {
            int32_t hs[2], corr, isum[2];
            float da;
            memcpy(&hs[0], A + 640 + 4 * j, 4);
            memcpy(&hs[1], A + 704 + 4 * j, 4);
            memcpy(&corr, A + 512 + 4 * j, 4);
            memcpy(&da, A + 576 + 4 * j, 4);
            if (type == MOE_T_NVFP4) { isum[0] = -12 * hs[0]; isum[1] = -12 * hs[1]; }
            else if (type == MOE_T_MXFP4) { isum[0] = -12 * (hs[0] + hs[1]); isum[1] = 0; }
            else if (type == MOE_T_Q4_K) { isum[0] = 0; isum[1] = 0; }
            else { isum[0] = corr / 16; isum[1] = 0; }  /* -8 * sum q (corr = -128 * sum q) */
            for (int k = 0; k < 32; k++) {
                int hi;
                const size_t pos = a8_code_pos(gn, j, k, &hi);
                const uint8_t code = (C[pos] >> (hi ? 4 : 0)) & 15;
                const int32_t u = type == MOE_T_Q4_0 || type == MOE_T_Q4_K ? code : moe_kvalues_fp4[code] + 12;
                isum[type == MOE_T_NVFP4 ? k / 16 : 0] += u * (int8_t)A[(k / 4) * 64 + j * 4 + k % 4];
            }
            if (type == MOE_T_Q4_K) {
                const uint8_t *hdr = G + 16 * (j / 8);
                uint8_t sc, m;
                moe_q4k_scale_min(j % 8, hdr + 4, &sc, &m);
                const float d1 = moe_f16_to_f32(moe_rd16(hdr)) * (float)sc;
                const float m1 = moe_f16_to_f32(moe_rd16(hdr + 2)) * (float)m;
                acc[j] = fmaf((float)isum[0], d1 * da, acc[j]);
                acc[j] = fmaf(-(float)(hs[0] + hs[1]), m1 * da, acc[j]);
            } else if (type == MOE_T_NVFP4) {
                /* canonical bytes: c | 0x80 reads ggml's value of c (0x7F: 480) */
                acc[j] = fmaf((float)isum[0], moe_ue4m3_half[G[j] | 0x80] * da, acc[j]);
                acc[j] = fmaf((float)isum[1], moe_ue4m3_half[G[gn + j] | 0x80] * da, acc[j]);
            } else {
                const float dw = type == MOE_T_Q4_0 ? moe_f16_to_f32(moe_rd16(G + 2 * j)) : moe_e8m0_half(G[j]);
                acc[j] = fmaf((float)isum[0], dw * da, acc[j]);
            }
        }
    }
    return moe_a8_reduce16(acc);
}

static float a8_row_dot_q6_k(const uint8_t *row, const uint8_t *xa, int64_t n) {
    const int64_t nb = n / 32;
    float acc[16] = {0};
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G), nsb = gn / 8;
        const uint8_t *G = row + (size_t)(g0 / 8) * QB_Q6_K, *C = G + 18 * nsb, *H = C + 16 * gn;
        const uint8_t *A = xa + (g0 / A8_G) * A8_GROUP_BYTES;
        for (int j = 0; j < gn; j++) {
            int32_t hs[2], isum[2];
            float da;
            memcpy(&hs[0], A + 640 + 4 * j, 4);
            memcpy(&hs[1], A + 704 + 4 * j, 4);
            memcpy(&da, A + 576 + 4 * j, 4);
            isum[0] = -32 * hs[0];
            isum[1] = -32 * hs[1];
            for (int k = 0; k < 32; k++) {
                int hi, sh;
                const size_t pc = a8_code_pos(gn, j, k, &hi), ph = q6k_hi_pos(gn, j, k, &sh);
                const int32_t u = ((C[pc] >> (hi ? 4 : 0)) & 15) | ((H[ph] >> sh) & 3) << 4;
                isum[k / 16] += u * (int8_t)A[(k / 4) * 64 + j * 4 + k % 4];
            }
            const float d = moe_f16_to_f32(moe_rd16(G + 2 * (j / 8)));
            for (int h = 0; h < 2; h++)
                acc[j] = fmaf((float)isum[h], (d * (float)(int8_t)G[2 * nsb + gn * h + j]) * da, acc[j]);
        }
    }
    return moe_a8_reduce16(acc);
}

static float a8_row_dot(uint32_t type, const uint8_t *row, const uint8_t *xa, int64_t n) {
    return type == MOE_T_Q8_0   ? a8_row_dot_q8_0(row, xa, n)
           : type == MOE_T_Q6_K ? a8_row_dot_q6_k(row, xa, n)
                                : a8_row_dot_4bit(type, row, xa, n);
}

#define A8_REF_KERNELS(name, type)                                                                           \
    void moe_gemv_a8_##name##_ref(const void *w, size_t rb, int64_t nrows, const void *xa, float *y, int64_t n) { \
        for (int64_t r = 0; r < nrows; r++) y[r] = a8_row_dot(type, (const uint8_t *)w + (size_t)r * rb, xa, n); \
    }                                                                                                        \
    void moe_gemm_a8_##name##_ref(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs,        \
                                  int64_t ntok, float *y, size_t ys, int64_t n) {                            \
        for (int64_t t = 0; t < ntok; t++)                                                                   \
            moe_gemv_a8_##name##_ref(w, rb, nrows, (const uint8_t *)xa + (size_t)t * xs, y + (size_t)t * ys, n); \
    }
A8_REF_KERNELS(q8_0, MOE_T_Q8_0)
A8_REF_KERNELS(nvfp4, MOE_T_NVFP4)
A8_REF_KERNELS(mxfp4, MOE_T_MXFP4)
A8_REF_KERNELS(q4_0, MOE_T_Q4_0)
A8_REF_KERNELS(q4_k, MOE_T_Q4_K)
A8_REF_KERNELS(q6_k, MOE_T_Q6_K)
