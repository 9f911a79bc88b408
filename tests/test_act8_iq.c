/* test_act8_iq.c — the act_q8 path of the i-quants IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S and IQ1_M (act8_iq_ref.c):
 *  - moe_a8_dot_ref equals this file's own reading of the contract, bit for
 *    bit: the integer weights s_h * v_k taken from the FP32 dequantizer
 *    (moe_dequant_row of the super-block with d set to 1, divided by the
 *    format's power of two: exact), not from the decoder the kernels share;
 *  - every ISA's gemv_a8 / gemm_a8 (scalar, avx2, avx512 where the CPU has
 *    them) on moe_repack_a8's rows equals moe_a8_dot_ref bit for bit over
 *    rows of 1..8 super-blocks (odd counts end in a one-super-block group),
 *    1..8 rows, 1..5 tokens, odd strides, random and worst-case codes (every
 *    byte 0xFF: the largest grid indices, every sign negative, the largest
 *    scales; every byte 0: scale codes 0), random bytes, crafted d (zero,
 *    -0, subnormal, f16 max, Inf / NaN), huge and tiny activations;
 *  - the result is close to the FP32 path's dot product (a sanity bound);
 *  - every grid byte is within what the AVX2 kernels' u = v + 64 allows. */
#include "check.h"
#include "quant/quant.h"
#include "base/util.h"
#include "quant/iq2.h"
#include "quant/iq3.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "a8_harness.h"

static const uint32_t FORMATS[] = {MOE_T_IQ2_XXS, MOE_T_IQ2_XS, MOE_T_IQ2_S, MOE_T_IQ3_XXS,
                                   MOE_T_IQ3_S,   MOE_T_IQ1_S,  MOE_T_IQ1_M};
#define NF 7
static size_t qb(uint32_t t) { return moe_type_get(t)->block_bytes; }

/* The block's f16 d: bytes 0..1, or (IQ1_M) the top nibbles of its four
 * scale words at 48..55, word i holding bits 4i..4i+3. */
static uint16_t get_d(uint32_t t, const uint8_t *b) {
    if (t != MOE_T_IQ1_M) return (uint16_t)(b[0] | b[1] << 8);
    uint16_t h = 0;
    for (int i = 0; i < 4; i++) h |= (uint16_t)((b[48 + 2 * i + 1] >> 4) << (4 * i));
    return h;
}
static void set_d(uint32_t t, uint8_t *b, uint16_t h) {
    if (t != MOE_T_IQ1_M) { b[0] = (uint8_t)h; b[1] = (uint8_t)(h >> 8); return; }
    for (int i = 0; i < 4; i++) b[48 + 2 * i + 1] = (uint8_t)((b[48 + 2 * i + 1] & 15) | ((h >> (4 * i)) & 15) << 4);
}
/* The power of two by which d * s_h * v_k is the FP32 path's weight. */
static float unit(uint32_t t) { return t == MOE_T_IQ3_XXS ? 0.25f : t == MOE_T_IQ3_S ? 1.0f : 0.125f; }

/* The contract of act8_iq_ref.c, written out. */
static float contract(uint32_t t, const uint8_t *row, const uint8_t *xa, int64_t n) {
    float acc[16] = {0};
    for (int64_t s = 0; s < n / 256; s++) {
        uint8_t blk[128];
        float w[256];
        memcpy(blk, row + (size_t)s * qb(t), qb(t));
        const float F = moe_f16_to_f32(get_d(t, blk)) * unit(t);
        set_d(t, blk, 0x3C00);                 /* d = 1: w = unit * s_h * v_k, exactly */
        moe_dequant_row(t, blk, w, 256);
        for (int sub = 0; sub < 8; sub++) {
            const int64_t b = 8 * s + sub;
            const uint8_t *g = xa + (b / 16) * A8_GROUP_BYTES;
            const int j = (int)(b % 16);
            int isum = 0;
            for (int k = 0; k < 32; k++) {
                const float sv = w[32 * sub + k] / unit(t);
                CHECK(sv == (float)(int)sv && fabsf(sv) <= 62 * 31);
                isum += (int)sv * (int8_t)g[(k / 4) * 64 + 4 * j + k % 4];
            }
            float da;
            memcpy(&da, g + 576 + 4 * j, 4);
            acc[j] = fmaf((float)isum, F * da, acc[j]);
        }
    }
    float b8[8], c4[4];
    for (int l = 0; l < 8; l++) b8[l] = acc[l] + acc[l + 8];
    for (int l = 0; l < 4; l++) c4[l] = b8[l] + b8[l + 4];
    return (c4[0] + c4[2]) + (c4[1] + c4[3]);
}

/* A plain row: quantized random values (a magnitude per 32 values); with
 * `edges`: random bytes, every bit set or clear (a sane d kept or not),
 * crafted d. */
static void make_row(uint32_t t, uint8_t *row, int64_t n, bool edges) {
    a8_random_row(t, row, n, false);
    if (!edges) return;
    for (int64_t s = 0; s < n / 256; s++) {
        uint8_t *blk = row + (size_t)s * qb(t);
        const uint32_t r = rnd32() % 100;
        const uint16_t keep = get_d(t, blk);
        if (r < 25) for (size_t i = 0; i < qb(t); i++) blk[i] = (uint8_t)rnd32();   /* any codes and scales */
        else if (r < 45) memset(blk, 0xFF, qb(t));                                   /* the largest, all signs */
        else if (r < 55) memset(blk, 0x00, qb(t));                                   /* the smallest */
        if (r < 55 && rnd32() % 3) set_d(t, blk, keep);                              /* a sane d */
        if (rnd32() % 100 < 12) set_d(t, blk, edge_f16());
    }
}

/* Every grid byte the decoders can take: IQ2 / IQ3 magnitudes below 64
 * (the AVX2 kernels' u = v + 64 stays within 2..126, where vpmaddubsw is
 * exact), IQ1 values -1, 0, 1. */
static void check_grid_bytes(void) {
    int bad = 0;
    const struct { const void *grid; size_t bytes; } mags[] = {
        {moe_iq2xxs_grid, sizeof moe_iq2xxs_grid}, {moe_iq2xs_grid, sizeof moe_iq2xs_grid},
        {moe_iq2s_grid, sizeof moe_iq2s_grid},     {moe_iq3xxs_grid, sizeof moe_iq3xxs_grid},
        {moe_iq3s_grid, sizeof moe_iq3s_grid}};
    for (size_t g = 0; g < sizeof mags / sizeof mags[0]; g++)
        for (size_t i = 0; i < mags[g].bytes; i++) bad += ((const uint8_t *)mags[g].grid)[i] > 62;
    for (size_t i = 0; i < sizeof moe_iq1s_grid; i++) {
        const int8_t v = ((const int8_t *)moe_iq1s_grid)[i];
        bad += v < -1 || v > 1;
    }
    CHECK_MSG(bad == 0, "%d grid bytes outside the kernels' range", bad);
}

/* The repack of a whole matrix equals the rows' (and the file's bytes). */
static void check_repack(uint32_t t) {
    const int64_t n = 768, nrows = 3;
    const size_t rb = (size_t)moe_row_bytes(t, (uint64_t)n);
    uint8_t *plain = malloc(rb * nrows), *all = malloc(rb * nrows);
    for (int64_t r = 0; r < nrows; r++) make_row(t, plain + r * rb, n, r == 1);
    moe_repack_a8(t, plain, all, nrows, n);
    CHECK(memcmp(plain, all, rb * nrows) == 0);
    free(plain); free(all);
}

int main(void) {
    moe_rng_seed(&g_rng, 0xa81c);
    static const int64_t NS[] = {256, 512, 768, 1024, 1280, 2048};
    check_grid_bytes();
    for (int f = 0; f < NF; f++) {
        check_repack(FORMATS[f]);
        a8_check_format(FORMATS[f], NS, (int)(sizeof NS / sizeof NS[0]), 768, 0.03, make_row, NULL, contract);
    }
    return check_report("test_act8_iq");
}
