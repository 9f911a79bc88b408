/* test_act8_legacy.c — the act_q8 path of Q4_1, Q5_0, Q5_1 and IQ4_NL
 * (act8_legacy_ref.c):
 *  - moe_a8_dot_ref equals this file's own reading of the contract (codes
 *    read ggml's way, the FMAs written out), bit for bit;
 *  - moe_repack_a8 puts every byte where the layout says;
 *  - every ISA's gemv_a8 / gemm_a8 (scalar, avx2, avx512 where the CPU has
 *    them) equals moe_a8_dot_ref bit for bit over whole and partial groups
 *    (1..15 blocks), 1..8 rows, 1..5 tokens, odd strides, and crafted
 *    scales: zero, -0, subnormal, f16 max, Inf / NaN, huge and tiny
 *    activation blocks;
 *  - the result is close to the FP32 path's dot product (a sanity bound). */
#include "check.h"
#include "quant/quant.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "a8_harness.h"

static const uint32_t FORMATS[] = {MOE_T_Q4_1, MOE_T_Q5_0, MOE_T_Q5_1, MOE_T_IQ4_NL};
#define NF 4
static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static float f16(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return moe_f16_to_f32(h); }
static size_t bpb(uint32_t t) { return moe_type_get(t)->block_bytes; }
static bool has_m(uint32_t t) { return t == MOE_T_Q4_1 || t == MOE_T_Q5_1; }
static bool five(uint32_t t) { return t == MOE_T_Q5_0 || t == MOE_T_Q5_1; }

/* ggml's reading of block b: codes (qh >> j << 4 & 0x10, qh >> (j + 12) & 0x10). */
static void codes(uint32_t t, const uint8_t *row, int64_t b, int c[32]) {
    const uint8_t *x = row + (size_t)b * bpb(t), *qs = x + (has_m(t) ? 4 : 2) + (five(t) ? 4 : 0);
    uint32_t qh = 0;
    if (five(t)) memcpy(&qh, x + (has_m(t) ? 4 : 2), 4);
    for (int j = 0; j < 16; j++) {
        c[j] = (qs[j] & 0x0F) | (int)(((qh >> j) << 4) & 0x10);
        c[j + 16] = (qs[j] >> 4) | (int)((qh >> (j + 12)) & 0x10);
    }
}

/* The contract of act8_legacy_ref.c, written out. */
static float contract(uint32_t t, const uint8_t *row, const uint8_t *xa, int64_t n) {
    static const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    float acc[16] = {0};
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *g = xa + (b / 16) * A8_GROUP_BYTES, *x = row + (size_t)b * bpb(t);
        const int j = (int)(b % 16);
        int c[32], isum = 0, qsum = 0;
        codes(t, row, b, c);
        for (int k = 0; k < 32; k++) {
            const int q = (int8_t)g[(k / 4) * 64 + 4 * j + k % 4];
            isum += (t == MOE_T_IQ4_NL ? kv[c[k]] : t == MOE_T_Q5_0 ? c[k] - 16 : c[k]) * q;
            qsum += q;
        }
        float da;
        memcpy(&da, g + 576 + 4 * j, 4);
        acc[j] = fmaf((float)isum, f16(x) * da, acc[j]);
        if (has_m(t)) acc[j] = fmaf((float)qsum, f16(x + 2) * da, acc[j]);
    }
    float b8[8], c4[4];
    for (int l = 0; l < 8; l++) b8[l] = acc[l] + acc[l + 8];
    for (int l = 0; l < 4; l++) c4[l] = b8[l] + b8[l + 4];
    return (c4[0] + c4[2]) + (c4[1] + c4[3]);
}

/* A plain row: quantized random values (a magnitude per block), with
 * `edges`: crafted scales / offsets (some poison a whole row) and codes. */
static void make_row(uint32_t t, uint8_t *row, int64_t n, bool edges) {
    a8_random_row(t, row, n, true);
    if (!edges) return;
    for (int64_t b = 0; b < n / 32; b++) {
        uint8_t *blk = row + (size_t)b * bpb(t);
        const uint32_t r = rnd32() % 100;
        if (r < 8) put16(blk, edge_f16());
        else if (r < 16 && has_m(t)) put16(blk + 2, edge_f16());
        else if (r < 22) for (size_t i = has_m(t) ? 4 : 2; i < bpb(t); i++) blk[i] = (uint8_t)rnd32(); /* any codes */
        else if (r < 25) memset(blk + (has_m(t) ? 4 : 2), 0xFF, bpb(t) - (has_m(t) ? 4 : 2));         /* top code */
        else if (r < 27) memset(blk, 0, bpb(t));
    }
}

/* The layout of act8_legacy_ref.c, byte by byte, for one repacked row. */
static int layout_diffs(uint32_t t, const uint8_t *plain, const uint8_t *rep, int64_t n) {
    int bad = 0;
    const int64_t nb = n / 32;
    const int ns = has_m(t) ? 4 : 2;
    for (int64_t g0 = 0; g0 < nb; g0 += 16) {
        const int gn = (int)(nb - g0 < 16 ? nb - g0 : 16);
        const uint8_t *G = rep + (size_t)g0 * bpb(t);
        for (int j = 0; j < gn; j++) {
            const uint8_t *x = plain + (size_t)(g0 + j) * bpb(t);
            bad += memcmp(G + 2 * j, x, 2) != 0;
            if (has_m(t)) bad += memcmp(G + 2 * gn + 2 * j, x + 2, 2) != 0;
            int c[32];
            codes(t, plain, g0 + j, c);
            for (int k = 0; k < 32; k++) {
                const int s = k / 4, pr = s / 2;
                const uint8_t byte = G[ns * gn + 4 * gn * pr + 4 * j + k % 4];
                bad += ((s % 2 ? byte >> 4 : byte) & 15) != (c[k] & 15);
                if (five(t)) bad += ((G[ns * gn + 16 * gn + 4 * j + k % 4] >> s) & 1) != (c[k] >> 4);
            }
        }
    }
    return bad;
}

static void check_layout(uint32_t t, const uint8_t *plain, const uint8_t *rep, int64_t n) {
    CHECK_MSG(layout_diffs(t, plain, rep, n) == 0, "%s layout n=%lld", moe_type_get(t)->name, (long long)n);
}


int main(void) {
    moe_rng_seed(&g_rng, 0xa8a8);
    static const int64_t NS[] = {32, 64, 96, 128, 256, 288, 480, 512, 544, 800, 1024, 2048};
    for (int f = 0; f < NF; f++) {
        a8_check_format(FORMATS[f], NS, (int)(sizeof NS / sizeof NS[0]), 800, 0.02, make_row, check_layout, contract);
    }
    return check_report("test_act8_legacy");
}
