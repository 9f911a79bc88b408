/* test_act8_kquant.c — the act_q8 path of Q5_K, Q3_K, Q2_K and IQ4_XS
 * (act8_kquant_ref.c):
 *  - moe_a8_dot_ref equals this file's own reading of the contract (codes
 *    and scales read ggml's way, the integer sums and FMAs written out), bit
 *    for bit;
 *  - every ISA's gemv_a8 / gemm_a8 (scalar, avx2, avx512 where the CPU has
 *    them) on moe_repack_a8's rows equals moe_a8_dot_ref bit for bit over
 *    rows of 1..8 super-blocks (odd counts end in a one-super-block group),
 *    1..8 rows, 1..5 tokens (the gemm tiles: 4 rows x 2 tokens and their
 *    tails) and the panel GEMMs' shapes (up to 9 rows, 130 tokens, n 8448),
 *    odd strides, random and worst-case codes (every code the
 *    largest or smallest, every scale the extreme), and crafted scales:
 *    zero, -0, subnormal, f16 max, Inf / NaN, huge and tiny activations;
 *  - the result is close to the FP32 path's dot product (a sanity bound). */
#include "check.h"
#include "quant/quant.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "a8_harness.h"

static const uint32_t FORMATS[] = {MOE_T_Q5_K, MOE_T_Q3_K, MOE_T_Q2_K, MOE_T_IQ4_XS};
#define NF 4
static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static float f16(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return moe_f16_to_f32(h); }
static size_t qb(uint32_t t) { return moe_type_get(t)->block_bytes; }

/* ggml's get_scale_min_k4 */
static void k4(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) { *d = q[j] & 63; *m = q[j + 4] & 63; }
    else { *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4); *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
}

/* Super-block s of a row, ggml's way: values v[256] (the integer weight
 * levels: Q5_K 0..31, Q3_K -4..3, Q2_K 0..3, IQ4_XS kv), sub-block scales
 * sc[16] and mins mn[16] per 16 values (32-value formats: repeated). */
static void superblock(uint32_t t, const uint8_t *x, int v[256], int sc[16], int mn[16]) {
    static const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    if (t == MOE_T_Q5_K) {
        const uint8_t *qh = x + 16, *ql = x + 48;
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                v[64 * c + l] = (ql[32 * c + l] & 15) + (qh[l] & (1 << (2 * c)) ? 16 : 0);
                v[64 * c + 32 + l] = (ql[32 * c + l] >> 4) + (qh[l] & (2 << (2 * c)) ? 16 : 0);
            }
        for (int j = 0; j < 16; j++) k4(j / 2, x + 4, &sc[j], &mn[j]);
    } else if (t == MOE_T_Q3_K) {
        const uint8_t *hm = x, *q = x + 32, *s = x + 96;
        for (int k = 0; k < 256; k++) {
            const int h = k / 128, sh = (k % 128) / 32, l = k % 32;
            v[k] = ((q[32 * h + l] >> (2 * sh)) & 3) - ((hm[l] & (1 << (4 * h + sh))) ? 0 : 4);
        }
        uint32_t aux[4];   /* ggml's kmask1 / kmask2 unpacking */
        memcpy(aux, s, 12);
        const uint32_t tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & 0x0f0f0f0f) | (((tmp >> 4) & 0x03030303) << 4);
        aux[3] = ((aux[1] >> 4) & 0x0f0f0f0f) | (((tmp >> 6) & 0x03030303) << 4);
        aux[0] = (aux[0] & 0x0f0f0f0f) | (((tmp >> 0) & 0x03030303) << 4);
        aux[1] = (aux[1] & 0x0f0f0f0f) | (((tmp >> 2) & 0x03030303) << 4);
        const int8_t *sc8 = (const int8_t *)aux;
        for (int j = 0; j < 16; j++) { sc[j] = sc8[j] - 32; mn[j] = 0; }
    } else if (t == MOE_T_Q2_K) {
        for (int k = 0; k < 256; k++) v[k] = (x[16 + 32 * (k / 128) + k % 32] >> (2 * ((k % 128) / 32))) & 3;
        for (int j = 0; j < 16; j++) { sc[j] = x[j] & 15; mn[j] = x[j] >> 4; }
    } else {
        uint16_t sh;
        memcpy(&sh, x + 2, 2);
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((x[4 + ib / 2] >> 4 * (ib % 2)) & 0xf) | (((sh >> 2 * ib) & 3) << 4);
            sc[2 * ib] = sc[2 * ib + 1] = ls - 32;
            mn[2 * ib] = mn[2 * ib + 1] = 0;
            for (int j = 0; j < 16; j++) {
                v[32 * ib + j] = kv[x[8 + 16 * ib + j] & 0xf];
                v[32 * ib + 16 + j] = kv[x[8 + 16 * ib + j] >> 4];
            }
        }
    }
}

/* The f16 d and dmin offsets in a block (dmin: -1 if none). */
static int off_d(uint32_t t) { return t == MOE_T_Q3_K ? 108 : t == MOE_T_Q2_K ? 80 : 0; }
static int off_dmin(uint32_t t) { return t == MOE_T_Q5_K ? 2 : t == MOE_T_Q2_K ? 82 : -1; }

/* The contract of act8_kquant_ref.c, written out. */
static float contract(uint32_t t, const uint8_t *row, const uint8_t *xa, int64_t n) {
    float acc[16] = {0};
    int v[256], sc[16], mn[16];
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *g = xa + (b / 16) * A8_GROUP_BYTES, *x = row + (size_t)(b / 8) * qb(t);
        const int j = (int)(b % 16), sub = (int)(b % 8);
        superblock(t, x, v, sc, mn);
        int part[2] = {0, 0}, qs[2] = {0, 0};
        for (int k = 0; k < 32; k++) {
            const int q = (int8_t)g[(k / 4) * 64 + 4 * j + k % 4];
            part[k / 16] += v[32 * sub + k] * q;
            qs[k / 16] += q;
        }
        float da;
        memcpy(&da, g + 576 + 4 * j, 4);
        const float d = f16(x + off_d(t)), dmin = off_dmin(t) >= 0 ? f16(x + off_dmin(t)) : 0.0f;
        const int s0 = sc[2 * sub], s1 = sc[2 * sub + 1];
        if (t == MOE_T_Q5_K || t == MOE_T_IQ4_XS) {
            acc[j] = fmaf((float)(part[0] + part[1]), (d * (float)s0) * da, acc[j]);
            if (t == MOE_T_Q5_K) acc[j] = fmaf(-(float)(qs[0] + qs[1]), (dmin * (float)mn[2 * sub]) * da, acc[j]);
        } else {
            acc[j] = fmaf((float)(s0 * part[0] + s1 * part[1]), d * da, acc[j]);
            if (t == MOE_T_Q2_K) acc[j] = fmaf(-(float)(mn[2 * sub] * qs[0] + mn[2 * sub + 1] * qs[1]), dmin * da, acc[j]);
        }
    }
    float b8[8], c4[4];
    for (int l = 0; l < 8; l++) b8[l] = acc[l] + acc[l + 8];
    for (int l = 0; l < 4; l++) c4[l] = b8[l] + b8[l + 4];
    return (c4[0] + c4[2]) + (c4[1] + c4[3]);
}

/* A plain row: quantized random values (a magnitude per super-block), with
 * `edges`: crafted d / dmin (some poison a whole row), random bytes, every
 * bit set (the largest codes and scales) or clear. */
static void make_row(uint32_t t, uint8_t *row, int64_t n, bool edges) {
    a8_random_row(t, row, n, true);
    if (!edges) return;
    for (int64_t s = 0; s < n / 256; s++) {
        uint8_t *blk = row + (size_t)s * qb(t);
        const uint32_t r = rnd32() % 100;
        uint8_t keep[4];
        memcpy(keep, blk + off_d(t), 2);
        if (off_dmin(t) >= 0) memcpy(keep + 2, blk + off_dmin(t), 2);
        if (r < 25) for (size_t i = 0; i < qb(t); i++) blk[i] = (uint8_t)rnd32();   /* any codes and scales */
        else if (r < 40) memset(blk, 0xFF, qb(t));                                   /* the largest */
        else if (r < 50) memset(blk, 0x00, qb(t));                                   /* the smallest */
        if (r < 50 && rnd32() % 2) {                                                 /* a sane d, dmin */
            memcpy(blk + off_d(t), keep, 2);
            if (off_dmin(t) >= 0) memcpy(blk + off_dmin(t), keep + 2, 2);
        }
        if (rnd32() % 100 < 12) put16(blk + off_d(t), edge_f16());
        if (off_dmin(t) >= 0 && rnd32() % 100 < 12) put16(blk + off_dmin(t), edge_f16());
    }
}


int main(void) {
    moe_rng_seed(&g_rng, 0xa8c0);
    static const int64_t NS[] = {256, 512, 768, 1024, 1280, 2048};
    for (int f = 0; f < NF; f++) {
        a8_check_format(FORMATS[f], NS, (int)(sizeof NS / sizeof NS[0]), 768, 0.03, make_row, NULL, contract);
    }
    /* The panel GEMMs (act8_kquant_avx512.c / _avx2.c): panels of 4 rows
     * and their tails, token tiles of 3 (2 for Q3_K / Q2_K) and their tails
     * inside blocks of 64 tokens, a block's tail, one-super-block groups,
     * and rows past the panel buffer (n > 8192: the tiled driver). */
    static const struct { int64_t n, rows, tok; } PANEL[] = {
        {768, 4, 6}, {2048, 7, 7}, {512, 6, 67}, {1280, 9, 130}, {256, 3, 64}, {8192, 5, 4}, {8448, 2, 3}};
    for (int f = 0; f < NF; f++)
        for (int i = 0; i < (int)(sizeof PANEL / sizeof PANEL[0]); i++)
            a8_check_shape(FORMATS[f], PANEL[i].n, PANEL[i].rows, PANEL[i].tok, i % 2, i, 0.03, make_row, NULL, contract);
    return check_report("test_act8_kquant");
}
