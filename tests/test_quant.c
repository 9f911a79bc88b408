/* test_quant.c — weight formats and kernels.
 *  - the type table (every ggml id, block sizes, names) and every level's
 *    kernel table against its traits (supported, x4, a8);
 *  - hand-built blocks whose dequantized values are known (the layouts);
 *  - every SIMD level present: gemv/gemm/dot/axpy bit-identical (memcmp,
 *    all NaNs treated as one value) to the scalar reference over several
 *    shapes, odd strides and edge-case scales (NaN/Inf/subnormal f16,
 *    UE4M3 0x00/0x7F/0x7E/subnormals, E8M0 0/254/255, zero blocks, code 8);
 *  - quantize -> dequantize within each format's documented bound;
 *  - the shared oracle files: Q8_0 dequantizes to its F32 twin bit for bit,
 *    BF16 = F32 rounded to nearest even;
 *  - ISA selection (moe_set_isa, MOEFAST_ISA warnings). */
#include "check.h"
#include "quant/quant.h"
#include "quant/quant_internal.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "moefast.h"

#include <math.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

static const uint32_t FORMATS[] = {MOE_T_F32, MOE_T_F16, MOE_T_BF16, MOE_T_Q8_0, MOE_T_Q4_0,
                                   MOE_T_Q4_1, MOE_T_Q5_0, MOE_T_Q5_1, MOE_T_IQ4_NL,
                                   MOE_T_Q4_K, MOE_T_Q6_K, MOE_T_MXFP4, MOE_T_NVFP4,
                                   MOE_T_Q5_K, MOE_T_Q3_K, MOE_T_Q2_K, MOE_T_IQ4_XS};
#define NFMT (sizeof FORMATS / sizeof FORMATS[0])

static moe_rng g_rng;
static uint32_t rnd32(void) { return (uint32_t)(moe_rng_next(&g_rng) >> 32); }
static float rndf(void) { return (float)(moe_rng_uniform(&g_rng) * 2.0 - 1.0); }

/* same bits, except every NaN compares equal to every NaN */
static bool same_f32(float a, float b) {
    if (isnan(a) && isnan(b)) return true;
    return memcmp(&a, &b, 4) == 0;
}

static uint16_t f16_bits(float f) { return moe_f32_to_f16(f); }
static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static uint16_t moe_rd16_test(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* An f16 scale: mostly ordinary, sometimes an edge case. */
static uint16_t rnd_f16_scale(bool edges) {
    uint32_t r = rnd32() % 100;
    if (edges && r < 3) return 0x7E00 | (rnd32() & 0x8000);     /* NaN */
    if (edges && r < 6) return 0x7C00 | (rnd32() & 0x8000);     /* +-Inf */
    if (edges && r < 12) return (uint16_t)(rnd32() & 0x83FF);   /* subnormal or zero */
    if (edges && r < 14) return 0x7BFF;                         /* max */
    return f16_bits(rndf() * 0.05f);
}

/* Fill one row of `type` with n random values/codes. */
static void fill_row(uint32_t type, uint8_t *row, int64_t n, bool edges) {
    const moe_type_info *ti = moe_type_get(type);
    const int64_t nb = n / ti->block;
    if (type == MOE_T_F32) {
        for (int64_t i = 0; i < n; i++) {
            float f = rndf() * 2.0f;
            uint32_t r = rnd32() % 200;
            if (edges && r == 0) f = NAN;
            else if (edges && r == 1) f = -INFINITY;
            else if (edges && r < 6) f = rndf() * 1e-39f;   /* subnormal */
            else if (edges && r < 9) f = -0.0f;
            memcpy(row + 4 * i, &f, 4);
        }
        return;
    }
    if (type == MOE_T_F16 || type == MOE_T_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float f = rndf() * 2.0f;
            uint16_t h = type == MOE_T_F16 ? f16_bits(f) : moe_f32_to_bf16(f);
            if (edges && rnd32() % 50 == 0) h = (uint16_t)rnd32(); /* any bit pattern */
            put16(row + 2 * i, h);
        }
        return;
    }
    for (int64_t i = 0; i < (int64_t)(nb * ti->block_bytes); i++) row[i] = (uint8_t)rnd32();
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = row + b * ti->block_bytes;
        bool zero = edges && rnd32() % 40 == 0;
        if (zero) { memset(blk, 0, ti->block_bytes); continue; }
        switch (type) {
        case MOE_T_Q8_0: case MOE_T_Q4_0: put16(blk, rnd_f16_scale(edges)); break;
        case MOE_T_Q5_0: case MOE_T_IQ4_NL: put16(blk, rnd_f16_scale(edges)); break;
        case MOE_T_Q4_1: case MOE_T_Q5_1: put16(blk, rnd_f16_scale(edges)); put16(blk + 2, rnd_f16_scale(edges)); break;
        case MOE_T_Q4_K: put16(blk, rnd_f16_scale(edges)); put16(blk + 2, rnd_f16_scale(edges)); break;
        case MOE_T_Q6_K: put16(blk + 208, rnd_f16_scale(edges)); break;
        case MOE_T_Q5_K: put16(blk, rnd_f16_scale(edges)); put16(blk + 2, rnd_f16_scale(edges)); break;
        case MOE_T_Q3_K: put16(blk + 108, rnd_f16_scale(edges)); break;
        case MOE_T_Q2_K: put16(blk + 80, rnd_f16_scale(edges)); put16(blk + 82, rnd_f16_scale(edges)); break;
        case MOE_T_IQ4_XS: put16(blk, rnd_f16_scale(edges)); break;
        case MOE_T_MXFP4: {
            uint32_t r = rnd32() % 100;
            blk[0] = (uint8_t)(120 + rnd32() % 12);
            if (edges && r < 4) blk[0] = 0;
            else if (edges && r < 6) blk[0] = 1;
            else if (edges && r < 8) blk[0] = 254;
            else if (edges && r < 10) blk[0] = 255;
            break;
        }
        case MOE_T_NVFP4:
            for (int s = 0; s < 4; s++) {
                uint32_t r = rnd32() % 100;
                uint8_t v = (uint8_t)(0x30 + rnd32() % 24); /* normal range around 1 */
                if (edges && r < 10) v = 0x7F;
                else if (edges && r < 20) v = 0x00;
                else if (edges && r < 28) v = 0x7E;
                else if (edges && r < 40) v = (uint8_t)(rnd32() % 8); /* subnormal */
                else if (edges && r < 46) v = (uint8_t)rnd32();       /* any byte, bit 7 too */
                blk[s] = v;
            }
            break;
        default: break;
        }
    }
}

static void fill_x(float *x, int64_t n, bool edges) {
    for (int64_t i = 0; i < n; i++) {
        float f = rndf();
        uint32_t r = rnd32() % 300;
        if (edges && r == 0) f = 0.0f;
        else if (edges && r == 1) f = -0.0f;
        else if (edges && r == 2) f = rndf() * 1e-40f;
        else if (edges && r == 3) f = rndf() * 1e30f;
        x[i] = f;
    }
}

/* ---- type table ------------------------------------------------------------ */

static void test_type_table(void) {
    static const struct { uint32_t id; const char *name; uint32_t blk, bytes; bool sup; } want[] = {
        {0, "F32", 1, 4, true}, {1, "F16", 1, 2, true}, {2, "Q4_0", 32, 18, true},
        {3, "Q4_1", 32, 20, true}, {6, "Q5_0", 32, 22, true}, {7, "Q5_1", 32, 24, true},
        {8, "Q8_0", 32, 34, true}, {9, "Q8_1", 32, 36, false}, {10, "Q2_K", 256, 84, true},
        {11, "Q3_K", 256, 110, true}, {12, "Q4_K", 256, 144, true}, {13, "Q5_K", 256, 176, true},
        {14, "Q6_K", 256, 210, true}, {15, "Q8_K", 256, 292, false}, {16, "IQ2_XXS", 256, 66, true},
        {17, "IQ2_XS", 256, 74, true}, {18, "IQ3_XXS", 256, 98, true}, {19, "IQ1_S", 256, 50, true},
        {20, "IQ4_NL", 32, 18, true}, {21, "IQ3_S", 256, 110, true}, {22, "IQ2_S", 256, 82, true},
        {23, "IQ4_XS", 256, 136, true}, {24, "I8", 1, 1, false}, {25, "I16", 1, 2, false},
        {26, "I32", 1, 4, false}, {27, "I64", 1, 8, false}, {28, "F64", 1, 8, false},
        {29, "IQ1_M", 256, 56, true}, {30, "BF16", 1, 2, true}, {34, "TQ1_0", 256, 54, false},
        {35, "TQ2_0", 256, 66, false}, {39, "MXFP4", 32, 17, true}, {40, "NVFP4", 64, 36, true},
    };
    int known = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const moe_type_info *ti = moe_type_get(want[i].id);
        CHECK_MSG(ti != NULL, "type %u", want[i].id);
        if (!ti) continue;
        known++;
        CHECK_MSG(strcmp(ti->name, want[i].name) == 0, "type %u name %s", want[i].id, ti->name);
        CHECK_EQ_INT(ti->block, want[i].blk);
        CHECK_EQ_INT(ti->block_bytes, want[i].bytes);
        CHECK_EQ_INT(ti->supported, want[i].sup);
        CHECK_EQ_INT(moe_type_by_name(want[i].name), want[i].id);
    }
    CHECK_EQ_INT(known, 33);
    /* every level's kernel table (whether or not this CPU runs it) has
     * exactly the kernels the type table's traits promise */
    for (int l = 0; l < MOE_ISA_COUNT; l++) {
        const moe_kernels *k = moe_isa_table_entry((moe_isa)l)->quant;
        for (uint32_t t = 0; t < MOE_T_COUNT; t++) {
            const moe_type_info *ti = moe_type_get(t);
            const bool sup = ti && ti->supported, x4 = ti && ti->has_x4, a8 = ti && ti->has_a8;
            CHECK_MSG(!k->gemv[t] == !sup && !k->gemm[t] == !sup, "%s: type %u gemv/gemm vs supported", k->name, t);
            CHECK_MSG(!k->gemv_x4[t] == !x4 && !k->gemm_x4[t] == !x4, "%s: type %u x4 kernels vs has_x4", k->name, t);
            CHECK_MSG(!k->gemv_a8[t] == !a8 && !k->gemm_a8[t] == !a8, "%s: type %u a8 kernels vs has_a8", k->name, t);
            CHECK_MSG(!k->gemm_wide[t] || sup, "%s: type %u wide kernel of an unsupported type", k->name, t);
            /* a wide kernel comes with its threshold: 0 would take it for 1-token products the gemv serves */
            CHECK_MSG(!k->gemm_wide[t] == !k->wide_min_tokens[t] && (!k->gemm_wide[t] || k->wide_min_tokens[t] >= 2),
                      "%s: type %u wide_min_tokens %d with%s a wide kernel", k->name, t, k->wide_min_tokens[t],
                      k->gemm_wide[t] ? "" : "out");
            CHECK_EQ_INT(moe_type_has_x4(t), x4);
            CHECK_EQ_INT(moe_type_has_a8(t), a8);
            if (ti) CHECK_EQ_INT(ti->plain, ti->supported && ti->block == 1);
        }
    }
    CHECK(!moe_type_has_x4(MOE_T_COUNT) && !moe_type_has_a8(1000));
    static const uint32_t gone[] = {4, 5, 31, 32, 33, 36, 37, 38, 41, 1000};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++) CHECK(moe_type_get(gone[i]) == NULL);
    CHECK_EQ_INT(moe_type_by_name("nvfp4"), MOE_T_NVFP4);
    CHECK_EQ_INT(moe_type_by_name("q4_k"), MOE_T_Q4_K);
    CHECK_EQ_INT(moe_type_by_name("Q4_2"), -1);
    CHECK_EQ_INT(moe_type_by_name(""), -1);
    CHECK_EQ_INT(moe_row_bytes(MOE_T_Q8_0, 4096), 128 * 34);
    CHECK_EQ_INT(moe_row_bytes(MOE_T_Q8_0, 33), 0);
    CHECK_EQ_INT(moe_row_bytes(MOE_T_NVFP4, 128), 72);
    CHECK_EQ_INT(moe_row_bytes(MOE_T_F16, 7), 14);
    CHECK_EQ_INT(moe_row_bytes(MOE_T_Q6_K, 512), 420);
    CHECK_EQ_INT(moe_row_bytes(4, 32), 0);
    CHECK_EQ_INT(moe_row_bytes(MOE_T_Q8_0, UINT64_MAX - 31), 0); /* 2^59 blocks x 34 bytes overflows */
}

/* ---- known values: the layouts ---------------------------------------------- */

static void test_known_values(void) {
    float w[256];
    { /* Q8_0: d = 0.5; q[j] = j - 16 */
        uint8_t b[34];
        put16(b, 0x3800);
        for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(j - 16);
        moe_dequant_row(MOE_T_Q8_0, b, w, 32);
        CHECK(w[0] == -8.0f && w[31] == 7.5f && w[16] == 0.0f);
    }
    { /* Q4_1: d = 2, m = -1; byte j = low (j), high (15-j): w = 2c - 1 */
        uint8_t b[20];
        put16(b, 0x4000);
        put16(b + 2, 0xBC00);
        for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(j | (15 - j) << 4);
        moe_dequant_row(MOE_T_Q4_1, b, w, 32);
        CHECK(w[0] == -1.0f && w[15] == 29.0f && w[16] == 29.0f && w[31] == -1.0f && w[3] == 5.0f);
    }
    { /* Q5_0: d = 0.5; qh = 0xA5A5F00F (bit j: value j); w = (q - 16) / 2 */
        uint8_t b[22];
        put16(b, 0x3800);
        const uint32_t qh = 0xA5A5F00Fu;
        memcpy(b + 2, &qh, 4);
        for (int j = 0; j < 16; j++) b[6 + j] = (uint8_t)(j | (15 - j) << 4);
        moe_dequant_row(MOE_T_Q5_0, b, w, 32);
        for (int j = 0; j < 16; j++) {
            CHECK_MSG(w[j] == (float)((j | (int)((qh >> j) & 1) << 4) - 16) * 0.5f, "Q5_0 value %d", j);
            CHECK_MSG(w[j + 16] == (float)(((15 - j) | (int)((qh >> (j + 16)) & 1) << 4) - 16) * 0.5f, "Q5_0 value %d", j + 16);
        }
        CHECK(w[0] == 0.0f && w[4] == -6.0f && w[16] == 7.5f && w[31] == 0.0f);
    }
    { /* Q5_1: d = 1, m = 0.25; codes as above: w = q + 0.25 */
        uint8_t b[24];
        put16(b, 0x3C00);
        put16(b + 2, 0x3400);
        const uint32_t qh = 0xA5A5F00Fu;
        memcpy(b + 4, &qh, 4);
        for (int j = 0; j < 16; j++) b[8 + j] = (uint8_t)(j | (15 - j) << 4);
        moe_dequant_row(MOE_T_Q5_1, b, w, 32);
        CHECK(w[0] == 16.25f && w[4] == 4.25f && w[16] == 31.25f && w[31] == 16.25f && w[12] == 28.25f);
    }
    { /* IQ4_NL: d = 0.5; nibble j -> ggml's level j (ggml-common.h kvalues_iq4nl) */
        static const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
        uint8_t b[18];
        put16(b, 0x3800);
        for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | (15 - j) << 4);
        moe_dequant_row(MOE_T_IQ4_NL, b, w, 32);
        for (int j = 0; j < 16; j++) {
            CHECK_MSG(w[j] == (float)kv[j] * 0.5f, "IQ4_NL value %d", j);
            CHECK_MSG(w[j + 16] == (float)kv[15 - j] * 0.5f, "IQ4_NL value %d", j + 16);
        }
    }
    { /* Q4_0: d = 2; byte j = low (j), high (15-j) */
        uint8_t b[18];
        put16(b, 0x4000);
        for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | (15 - j) << 4);
        moe_dequant_row(MOE_T_Q4_0, b, w, 32);
        CHECK(w[0] == -16.0f && w[15] == 14.0f && w[16] == 14.0f && w[31] == -16.0f && w[8] == 0.0f);
    }
    { /* Q4_K: d = 1, dmin = 0.5; sub-block 0: sc 3, m 2; sub-block 5: sc = 0x25, m = 0x31 */
        uint8_t b[144] = {0};
        put16(b, 0x3C00); put16(b + 2, 0x3800);
        uint8_t *sc = b + 4;
        sc[0] = 3; sc[4] = 2;
        /* j = 5: sc = (q[9] & 15) | (q[1] >> 6) << 4; m = (q[9] >> 4) | (q[5] >> 6) << 4 */
        sc[9] = 0x15; sc[1] = 0x80; sc[5] = 0xC0;
        b[16] = 0x7A;                  /* value 0 = low nibble 10, value 32 = high nibble 7 */
        b[16 + 32 * 2 + 3] = 0x90;     /* value 128+32+3 (sub-block 5) = high nibble 9 */
        moe_dequant_row(MOE_T_Q4_K, b, w, 256);
        CHECK_MSG(w[0] == 3.0f * 10 - 1.0f, "%g", w[0]);
        /* sub-block 1: sc = q[1]&63 = 0, m = q[5]&63 = 0 */
        CHECK_MSG(w[32] == 0.0f, "%g", w[32]);
        /* sub-block 5: sc = 5 | 2<<4 = 37, m = 1 | 3<<4 = 49 */
        CHECK_MSG(w[163] == 37.0f * 9 - 24.5f, "%g", w[163]);
    }
    { /* Q6_K: d = 0.25, sc[k/16] = k/16 - 8 */
        uint8_t b[210] = {0};
        put16(b + 208, 0x3400);
        for (int j = 0; j < 16; j++) b[192 + j] = (uint8_t)(int8_t)(j - 8);
        b[0] = 0x5F;      /* value 0: low 15, value 64: high 5 */
        b[128] = 0x27;    /* qh[0]: value 0 bits 3 -> q = 15|48 = 63; value 32: 1; value 64: 2; value 96: 0 */
        b[64 + 33] = 0x0C; /* half 1, ql[l+32] with l = 1: value 128+32+1 low 12 */
        moe_dequant_row(MOE_T_Q6_K, b, w, 256);
        CHECK_MSG(w[0] == (0.25f * -8) * (63 - 32), "%g", w[0]);
        CHECK_MSG(w[32] == (0.25f * -6) * (16 - 32), "%g", w[32]);
        CHECK_MSG(w[64] == (0.25f * -4) * ((5 | 32) - 32), "%g", w[64]);
        CHECK_MSG(w[96] == (0.25f * -2) * (0 - 32), "%g", w[96]);
        CHECK_MSG(w[161] == (0.25f * 2) * (12 - 32), "%g", w[161]);
    }
    { /* MXFP4: e = 127 -> 2^-1 * kv, i.e. E2M1 itself */
        uint8_t b[17];
        b[0] = 127;
        for (int j = 0; j < 16; j++) b[1 + j] = (uint8_t)(j | (15 - j) << 4);
        moe_dequant_row(MOE_T_MXFP4, b, w, 32);
        static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, 0, -0.5f, -1, -1.5f, -2, -3, -4, -6};
        for (int j = 0; j < 16; j++) {
            CHECK_MSG(w[j] == e2m1[j], "j %d %g", j, w[j]);
            CHECK(w[16 + j] == e2m1[15 - j]);
        }
        CHECK(!signbit(w[8])); /* code 8 decodes to +0 as in ggml */
        b[0] = 0;   moe_dequant_row(MOE_T_MXFP4, b, w, 32); CHECK(w[1] == 0x1p-128f && w[7] == 12 * 0x1p-128f);
        b[0] = 254; moe_dequant_row(MOE_T_MXFP4, b, w, 32); CHECK(w[1] == 0x1p126f && isinf(w[7]));
        b[0] = 255; moe_dequant_row(MOE_T_MXFP4, b, w, 32); CHECK(w[1] == 0x1p127f && isinf(w[6]));
    }
    { /* NVFP4: scales 0x38 (1.0), 0x7E (448), 0x01 (2^-9), 0x7F (0) */
        uint8_t b[36];
        b[0] = 0x38; b[1] = 0x7E; b[2] = 0x01; b[3] = 0x7F;
        for (int j = 0; j < 32; j++) b[4 + j] = 0x97; /* low 7 (6.0), high 9 (-0.5) */
        moe_dequant_row(MOE_T_NVFP4, b, w, 64);
        CHECK(w[0] == 6.0f && w[7] == 6.0f && w[8] == -0.5f && w[15] == -0.5f);
        CHECK(w[16] == 6.0f * 448 && w[24] == -0.5f * 448);
        CHECK(w[32] == 6.0f * 0x1p-9f && w[40] == -0.5f * 0x1p-9f);
        CHECK(w[48] == 0.0f && w[63] == 0.0f);
        b[0] = 0xFF; b[1] = 0x80; b[2] = 0x78;
        moe_dequant_row(MOE_T_NVFP4, b, w, 64);
        CHECK_MSG(w[0] == 6.0f * 480, "%g", w[0]);   /* ggml ignores bit 7: 0xFF = e15 m7 */
        CHECK(w[16] == 0.0f && w[32] == 6.0f * 256);
    }
    { /* BF16 / F16 */
        uint8_t b[4];
        put16(b, 0x3FC0); put16(b + 2, 0xC000);
        moe_dequant_row(MOE_T_BF16, b, w, 2);
        CHECK(w[0] == 1.5f && w[1] == -2.0f);
        put16(b, 0x0001); put16(b + 2, 0xFC00);
        moe_dequant_row(MOE_T_F16, b, w, 2);
        CHECK(w[0] == 0x1p-24f && isinf(w[1]) && w[1] < 0);
    }
}

/* ---- SIMD == scalar ------------------------------------------------------------ */

static int cmp_out(const float *a, const float *b, int64_t n, const char *what, const char *isa,
                   uint32_t type, int64_t nrows, int64_t k, int64_t ntok) {
    for (int64_t i = 0; i < n; i++) {
        if (!same_f32(a[i], b[i])) {
            CHECK_MSG(0, "%s %s %s nrows=%lld n=%lld ntok=%lld: [%lld] %a != ref %a", isa, what,
                      moe_type_get(type)->name, (long long)nrows, (long long)k, (long long)ntok,
                      (long long)i, a[i], b[i]);
            return 1;
        }
    }
    check_count_++;
    return 0;
}

static void test_kernels_match(const moe_kernels *ref, const moe_kernels *simd) {
    /* 2: an even count, all rows in the far-apart pairs of the 2-row gemv tiles */
    static const int64_t NROWS[] = {1, 2, 3, 17};
    /* 2, 3, 6, 7: the 4x4 tile's left-over 2 or 3 tokens in one tile (a batched decode step) */
    static const int64_t NTOK[] = {1, 2, 3, 5, 6, 7, 16};
    for (size_t f = 0; f < NFMT; f++) {
        const uint32_t type = FORMATS[f];
        const moe_type_info *ti = moe_type_get(type);
        int64_t blk = ti->block;
        /* 2880 = gpt-oss's n_embd (90 blocks of 32: not a multiple of 256 or
         * 512) and 2912 (91 blocks), for the 32-value formats */
        int64_t NS[6] = {blk, 2 * blk, 4096, 0, blk == 32 ? 2880 : 0, blk == 32 ? 2912 : 0};
        if (blk == 1) { NS[0] = 1; NS[1] = 37; NS[3] = 70; }
        for (int ni = 0; ni < 6; ni++) {
            const int64_t n = NS[ni];
            if (!n) continue;
            for (int ri = 0; ri < (int)(sizeof NROWS / sizeof NROWS[0]); ri++) {
                const int64_t nrows = NROWS[ri];
                const size_t rb = (size_t)moe_row_bytes(type, (uint64_t)n) + 3 + (size_t)ri; /* odd strides */
                uint8_t *w = malloc(rb * (size_t)nrows);
                for (int64_t r = 0; r < nrows; r++) {
                    memset(w + r * rb, 0xA5, rb);
                    fill_row(type, w + r * rb, n, true);
                }
                for (int ti2 = 0; ti2 < (int)(sizeof NTOK / sizeof NTOK[0]); ti2++) {
                    const int64_t ntok = NTOK[ti2];
                    const size_t xs = (size_t)n + 5, ys = (size_t)nrows + 3;
                    float *x = malloc(sizeof(float) * xs * (size_t)ntok);
                    float *y0 = malloc(sizeof(float) * ys * (size_t)ntok);
                    float *y1 = malloc(sizeof(float) * ys * (size_t)ntok);
                    float *yv = malloc(sizeof(float) * (size_t)nrows);
                    fill_x(x, (int64_t)xs * ntok, true);
                    for (size_t i = 0; i < ys * (size_t)ntok; i++) y0[i] = y1[i] = 12345.0f;
                    ref->gemm[type](w, rb, nrows, x, xs, ntok, y0, ys, n);
                    simd->gemm[type](w, rb, nrows, x, xs, ntok, y1, ys, n);
                    cmp_out(y1, y0, (int64_t)ys * ntok, "gemm", simd->name, type, nrows, n, ntok);
                    for (int64_t t = 0; t < ntok; t++) {
                        simd->gemv[type](w, rb, nrows, x + t * xs, yv, n);
                        cmp_out(yv, y0 + t * ys, nrows, "gemv", simd->name, type, nrows, n, t);
                    }
                    free(x); free(y0); free(y1); free(yv);
                }
                free(w);
            }
        }
    }
    /* more tokens than one 32-token gemm block, 4-row tiles plus remainders */
    for (size_t f = 0; f < NFMT; f++) {
        const uint32_t type = FORMATS[f];
        const int64_t n = moe_type_get(type)->block == 1 ? 45 : 2 * moe_type_get(type)->block;
        const int64_t nrows = 7, ntok = 37;
        const size_t rb = (size_t)moe_row_bytes(type, (uint64_t)n) + 1, xs = (size_t)n + 1, ys = 9;
        uint8_t *w = malloc(rb * nrows);
        float *x = malloc(sizeof(float) * xs * ntok), *y0 = malloc(sizeof(float) * ys * ntok);
        float *y1 = malloc(sizeof(float) * ys * ntok);
        for (int64_t r = 0; r < nrows; r++) fill_row(type, w + r * rb, n, true);
        fill_x(x, (int64_t)xs * ntok, true);
        for (size_t i = 0; i < ys * ntok; i++) y0[i] = y1[i] = -1.0f;
        ref->gemm[type](w, rb, nrows, x, xs, ntok, y0, ys, n);
        simd->gemm[type](w, rb, nrows, x, xs, ntok, y1, ys, n);
        cmp_out(y1, y0, (int64_t)ys * ntok, "gemm", simd->name, type, nrows, n, ntok);
        free(w); free(x); free(y0); free(y1);
    }
    /* -0 accumulators: products that underflow to -0 must stay -0 in every
     * lane, including the lanes past a ragged F32 tail. */
    for (int64_t n = 1; n <= 40; n++) {
        float wv[40], xv[40], y0, y1;
        for (int i = 0; i < 40; i++) { wv[i] = -1e-30f; xv[i] = 1e-30f; }
        ref->gemv[MOE_T_F32](wv, 0, 1, xv, &y0, n);
        simd->gemv[MOE_T_F32](wv, 0, 1, xv, &y1, n);
        /* n >= 16: every lane holds -0, so the sum is -0 (the +0 of an
         * untouched lane would make it +0 for n < 16) */
        CHECK_MSG(same_f32(y0, y1) && (n < 16 || signbit(y0)), "%s n=%lld %a %a", simd->name, (long long)n, y0, y1);
        y0 = ref->dot_f32(wv, xv, n);
        y1 = simd->dot_f32(wv, xv, n);
        CHECK_MSG(same_f32(y0, y1) && (n < 16 || signbit(y0)), "%s dot n=%lld %a %a", simd->name, (long long)n, y0, y1);
    }
    /* dot / axpy for n = 0..70 */
    for (int64_t n = 0; n <= 70; n++) {
        float a[80], b[80], y0[80], y1[80];
        fill_x(a, 80, true); fill_x(b, 80, true); fill_x(y0, 80, true);
        memcpy(y1, y0, sizeof y0);
        CHECK_MSG(same_f32(ref->dot_f32(a, b, n), simd->dot_f32(a, b, n)), "%s dot n=%lld", simd->name, (long long)n);
        const float s = rndf();
        ref->axpy_f32(s, a, y0, n);
        simd->axpy_f32(s, a, y1, n);
        int bad = 0;
        for (int i = 0; i < 80; i++) bad += !same_f32(y0[i], y1[i]);
        CHECK_MSG(bad == 0, "%s axpy n=%lld", simd->name, (long long)n);
    }
}

/* The reference itself follows the contract: a direct 16-lane evaluation
 * over moe_dequant_row must give the same bits. */
static void test_ref_contract(const moe_kernels *ref) {
    for (size_t f = 0; f < NFMT; f++) {
        const uint32_t type = FORMATS[f];
        const int64_t n = type == MOE_T_F32 || type == MOE_T_F16 || type == MOE_T_BF16 ? 75 : 512;
        uint8_t *w = malloc((size_t)moe_row_bytes(type, (uint64_t)n));
        float wv[512], x[512], acc[16] = {0}, y;
        fill_row(type, w, n, false);
        fill_x(x, n, false);
        moe_dequant_row(type, w, wv, n);
        for (int64_t k = 0; k < n; k++) acc[k % 16] = fmaf(wv[k], x[k], acc[k % 16]);
        for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
        for (int l = 0; l < 4; l++) acc[l] += acc[l + 4];
        for (int l = 0; l < 2; l++) acc[l] += acc[l + 2];
        const float want = acc[0] + acc[1];
        ref->gemv[type](w, 0, 1, x, &y, n);
        CHECK_MSG(same_f32(y, want), "%s %a %a", moe_type_get(type)->name, y, want);
        free(w);
    }
}

/* ---- quantize round trip ----------------------------------------------------------- */

/* Documented in docs/KERNELS.md: per-block bound on |x - dequant(quant(x))|
 * as a function of the block's values. */
static float bound_for(uint32_t type, const float *x, int64_t i, float *scratch) {
    (void)scratch;
    float amax = 0, mx = -INFINITY, mn = INFINITY;
    int64_t b0, len;
    switch (type) {
    case MOE_T_Q8_0: case MOE_T_Q4_0: case MOE_T_MXFP4: b0 = i / 32 * 32; len = 32; break;
    case MOE_T_Q4_1: case MOE_T_Q5_0: case MOE_T_Q5_1: case MOE_T_IQ4_NL: b0 = i / 32 * 32; len = 32; break;
    case MOE_T_NVFP4: b0 = i / 16 * 16; len = 16; break;
    case MOE_T_Q4_K: case MOE_T_Q6_K: case MOE_T_Q5_K: case MOE_T_Q3_K: case MOE_T_Q2_K: case MOE_T_IQ4_XS:
        b0 = i / 256 * 256; len = 256; break;
    default: b0 = i; len = 1; break;
    }
    for (int64_t k = b0; k < b0 + len; k++) {
        amax = fmaxf(amax, fabsf(x[k]));
        mx = fmaxf(mx, x[k]); mn = fminf(mn, x[k]);
    }
    switch (type) {
    case MOE_T_F32: return 0;
    case MOE_T_F16: return fmaxf(fabsf(x[i]) * 0x1p-11f, 0x1p-25f); /* subnormal f16 step 2^-24 */
    case MOE_T_BF16: return fabsf(x[i]) * 0x1p-8f;
    case MOE_T_Q8_0: return amax / 127 * 0.57f;
    /* the value clamped at code 15 is 7*d for d = amax/8 rounded to half:
     * off by up to d * (1 + 7 * 2^-11) (seen: 1.0014 d) */
    case MOE_T_Q4_0: return amax / 8 * 1.004f;
    /* half a step of the f16-rounded d, plus the f16 rounding of m and of
     * d times the largest code (2^-11 relative each) */
    case MOE_T_Q4_1: return (mx - mn) / 15 * 0.51f + (fabsf(mn) + (mx - mn)) * 0x1p-10f;
    case MOE_T_Q5_1: return (mx - mn) / 31 * 0.51f + (fabsf(mn) + (mx - mn)) * 0x1p-10f;
    /* as Q4_0: the value clamped at code 31 is 15*d for d = amax/16 */
    case MOE_T_Q5_0: return amax / 16 * 1.004f;
    /* the widest gap of the levels is 113..89 = 24 of 127: half of it times
     * the scale (about amax/127, up to 1.3 times that for the searched one) */
    case MOE_T_IQ4_NL: return amax * 0.13f;
    case MOE_T_Q4_K: return (mx - fminf(mn, 0)) / 15 * 1.0f;
    case MOE_T_Q6_K: return amax / 32 * 1.01f;
    case MOE_T_Q5_K: return (mx - fminf(mn, 0)) / 31 * 1.0f;
    case MOE_T_Q3_K: return amax / 4 * 1.0f;
    /* empirical: ggml's scale search minimises the weighted squared error,
     * not the worst value, which can pass range/5 (seen: 1.001 times) */
    case MOE_T_Q2_K: return (mx - fminf(mn, 0)) / 5 * 1.05f;
    /* empirical, as Q2_K: the scale search minimises the weighted squared
     * error and the 6-bit sub-block scales round (seen: up to 1.088 times
     * amax / 8 over seeds 1-6 of test_round_trip) */
    case MOE_T_IQ4_XS: return amax / 8 * 1.15f;
    case MOE_T_MXFP4: return amax > 0 ? exp2f(floorf(log2f(amax)) - 1) : 0;
    /* a UE4M3 scale in the subnormal range (steps of 2^-9) can round down
     * by up to 2^-10, and the largest value then clamps at code 6: up to
     * 6 x 2^-10 more than the half step */
    case MOE_T_NVFP4: return amax / 6 * 1.0625f + 0x1.8p-8f;
    default: return 0;
    }
}

static void test_round_trip(void) {
    enum { N = 4096 };
    moe_rng_seed(&g_rng, 0x5eed);   /* its own inputs, whatever the tests before drew */
    float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
    uint8_t *q = malloc(N * 4);
    for (size_t f = 0; f < NFMT; f++) {
        const uint32_t type = FORMATS[f];
        for (int dist = 0; dist < 3; dist++) {
            for (int i = 0; i < N; i++) {
                x[i] = dist == 0 ? rndf() : dist == 1 ? (float)moe_rng_normal(&g_rng) * 0.02f
                                                      : rndf() * (float)(1 + i % 7) + 0.3f;
            }
            for (int i = 0; i < 64; i++) x[i] = 0.0f;  /* an all-zero block */
            moe_quantize_row(type, x, q, N);
            moe_dequant_row(type, q, y, N);
            int bad = 0;
            double worst = 0;
            for (int i = 0; i < N; i++) {
                const float err = fabsf(x[i] - y[i]), bnd = bound_for(type, x, i, NULL);
                if (!(err <= bnd)) {
                    if (!bad)
                        fprintf(stderr, "  %s dist %d [%d]: x=%g y=%g err=%g bound=%g\n",
                                moe_type_get(type)->name, dist, i, x[i], y[i], err, bnd);
                    bad++;
                }
                if (bnd > 0 && err / bnd > worst) worst = err / bnd;
            }
            CHECK_MSG(bad == 0, "%s dist %d: %d values outside the bound", moe_type_get(type)->name, dist, bad);
            if (getenv("MOEFAST_TEST_VERBOSE")) printf("  %s dist %d: worst err/bound %.3f\n", moe_type_get(type)->name, dist, worst);
            for (int i = 0; i < 64; i++) CHECK(y[i] == 0.0f);
        }
    }
    /* ggml's reference rounding on fixed inputs (values worked out by hand). */
    float v[32];
    uint8_t b[36];
    for (int i = 0; i < 32; i++) v[i] = (float)(i - 16) / 16.0f; /* amax 1 at i = 0 */
    moe_quantize_row(MOE_T_Q8_0, v, b, 32);
    CHECK_EQ_INT(moe_rd16_test(b), f16_bits(1.0f / 127));
    CHECK_EQ_INT((int8_t)b[2], -127);
    {
        const float d = 1.0f / 127, id = 1.0f / d;
        CHECK_EQ_INT((int8_t)b[2 + 24], (int)roundf(0.5f * id)); /* roundf: half away from 0 */
        CHECK_EQ_INT((int8_t)b[2 + 17], (int)roundf(0.0625f * id));
    }
    moe_quantize_row(MOE_T_Q4_0, v, b, 32);
    CHECK_EQ_INT(moe_rd16_test(b), f16_bits(0.125f)); /* d = max / -8 = -1/-8 */
    CHECK_EQ_INT(b[2] & 15, 0);                     /* -1 / 0.125 = -8 -> 0 */
    /* Q5_0: d = -1 / -16; value 0 -> 0, value 31 (15/16) -> 15 + 16 = 31 */
    moe_quantize_row(MOE_T_Q5_0, v, b, 32);
    CHECK_EQ_INT(moe_rd16_test(b), f16_bits(0.0625f));
    CHECK_EQ_INT(b[6] & 15, 0);
    CHECK_EQ_INT(b[6 + 15] >> 4, 15);
    CHECK_EQ_INT(b[5] >> 7, 1);                     /* qh bit 31 */
    CHECK_EQ_INT(b[2] & 1, 0);                      /* qh bit 0 */
    /* Q4_1 / Q5_1: d = (max - min) / 15 (31), m = min = -1 */
    moe_quantize_row(MOE_T_Q4_1, v, b, 32);
    CHECK_EQ_INT(moe_rd16_test(b), f16_bits((15.0f / 16 + 1) / 15));
    CHECK_EQ_INT(moe_rd16_test(b + 2), f16_bits(-1.0f));
    CHECK_EQ_INT(b[4] & 15, 0);
    CHECK_EQ_INT(b[4 + 15] >> 4, 15);
    moe_quantize_row(MOE_T_Q5_1, v, b, 32);
    CHECK_EQ_INT(moe_rd16_test(b), f16_bits((15.0f / 16 + 1) / 31));
    CHECK_EQ_INT(b[8 + 15] >> 4, 15);
    CHECK_EQ_INT(b[7] >> 7, 1);
    /* IQ4_NL: an all-zero block is d = 0 and code 8 (level 1, nearest to 0) */
    for (int i = 0; i < 32; i++) v[i] = 0.0f;
    moe_quantize_row(MOE_T_IQ4_NL, v, b, 32);
    CHECK_EQ_INT(moe_rd16_test(b), 0);
    CHECK_EQ_INT(b[2], 0x88);
    free(x); free(y); free(q);
}

/* ---- oracle files ------------------------------------------------------------------ */

static void oracle_pair(const char *qname, const char *fname, uint32_t qtype) {
    char rel[256], err[MOE_ERR_LEN];
    snprintf(rel, sizeof rel, "oracle/%s", qname);
    const char *qp = check_ref(rel);
    snprintf(rel, sizeof rel, "oracle/%s", fname);
    const char *fp = check_ref(rel);
    if (!qp || !fp) return;
    gguf_file *q = NULL, *f = NULL;
    int rq = gguf_open(qp, &q, err, sizeof err);
    CHECK_MSG(rq == MOE_OK, "%s", err);
    int rf = gguf_open(fp, &f, err, sizeof err);
    CHECK_MSG(rf == MOE_OK, "%s", err);
    if (rq != MOE_OK || rf != MOE_OK) { if (q) gguf_close(q); if (f) gguf_close(f); return; }
    int compared = 0, bad = 0;
    for (uint64_t i = 0; i < q->n_tensors; i++) {
        const gguf_tensor *tq = &q->tensors[i];
        if (tq->type != qtype) continue;
        const gguf_tensor *tf = gguf_find_tensor(f, tq->name);
        CHECK_MSG(tf && tf->type == MOE_T_F32, "%s: %s missing in the F32 file", qname, tq->name);
        if (!tf || tf->type != MOE_T_F32) continue;
        int64_t n = 1;
        for (uint32_t d = 0; d < tq->n_dims; d++) n *= tq->ne[d];
        CHECK_EQ_INT(tf->nbytes, (uint64_t)n * 4);
        if (tf->nbytes != (uint64_t)n * 4) continue;
        if (qtype == MOE_T_BF16) {
            /* BF16 file = F32 values rounded to nearest even */
            for (int64_t k = 0; k < n; k++) {
                float v; memcpy(&v, tf->data + 4 * k, 4);
                if (moe_rd16_test(tq->data + 2 * k) != moe_f32_to_bf16(v)) { bad++; break; }
            }
        } else {
            float *w = malloc((size_t)n * sizeof(float));
            moe_dequant_row(qtype, tq->data, w, n);
            if (memcmp(w, tf->data, (size_t)n * 4) != 0) {
                bad++;
                fprintf(stderr, "  %s: %s differs from its F32 twin\n", qname, tq->name);
            }
            free(w);
        }
        compared++;
    }
    CHECK_MSG(bad == 0, "%s: %d tensors differ", qname, bad);
    CHECK_MSG(compared >= 10, "%s: only %d %s tensors", qname, compared, moe_type_get(qtype)->name);
    printf("oracle %s: %d %s tensors equal their F32 twin\n", qname, compared, moe_type_get(qtype)->name);
    gguf_close(q);
    gguf_close(f);
}

/* Real tensors (Q4_0, Q4_K, NVFP4 from the oracle files): every SIMD level
 * agrees with the reference on every row, and the values are finite. */
static void oracle_kernels(const char *name) {
    char rel[256], err[MOE_ERR_LEN];
    snprintf(rel, sizeof rel, "oracle/%s", name);
    const char *p = check_ref(rel);
    if (!p) return;
    gguf_file *g = NULL;
    int rc = gguf_open(p, &g, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (rc != MOE_OK) return;
    const moe_kernels *ref = moe_kernels_for(MOE_ISA_SCALAR);
    int tested = 0, bad = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const moe_type_info *ti = moe_type_get(t->type);
        if (!ti || !ti->supported || t->type == MOE_T_F32 || t->n_dims < 2) continue;
        const int64_t n = t->ne[0], rows = t->nbytes / moe_row_bytes(t->type, (uint64_t)n);
        const size_t rb = (size_t)moe_row_bytes(t->type, (uint64_t)n);
        float *x = malloc(sizeof(float) * (size_t)n), *y0 = malloc(sizeof(float) * (size_t)rows);
        float *y1 = malloc(sizeof(float) * (size_t)rows), *w = malloc(sizeof(float) * (size_t)n);
        fill_x(x, n, false);
        moe_dequant_row(t->type, t->data, w, n);
        for (int64_t k = 0; k < n; k++) bad += !isfinite(w[k]);
        ref->gemv[t->type](t->data, rb, rows, x, y0, n);
        for (int l = 1; l < MOE_ISA_COUNT; l++) {
            const moe_kernels *k = moe_kernels_for((moe_isa)l);
            if (!k) continue;
            k->gemv[t->type](t->data, rb, rows, x, y1, n);
            bad += memcmp(y0, y1, sizeof(float) * (size_t)rows) != 0;
        }
        tested++;
        free(x); free(y0); free(y1); free(w);
    }
    CHECK_MSG(bad == 0, "%s: %d mismatches", name, bad);
    CHECK_MSG(tested >= 8, "%s: only %d tensors", name, tested);
    gguf_close(g);
}

static void test_oracle(void) {
    oracle_kernels("qwen3moe-tiny-q4_0.gguf");
    oracle_kernels("qwen3moe-tiny-q4_k.gguf");
    oracle_kernels("qwen3moe-tiny-q4_1.gguf");      /* Q4_1 */
    oracle_kernels("qwen3moe-tiny-q5_0.gguf");      /* Q5_0 */
    oracle_kernels("qwen3moe-tiny-q5_k_m.gguf");    /* Q5_1 among others */
    oracle_kernels("qwen3moe-tiny-iq4_xs.gguf");    /* IQ4_NL among others */
    oracle_kernels("laguna-tiny-bf16-nvfp4.gguf");
    oracle_kernels("qwen3moe-tiny-q8_0-nvfp4-scale2.gguf");
    oracle_pair("qwen3moe-tiny-q8_0.gguf", "qwen3moe-tiny-f32.gguf", MOE_T_Q8_0);
    oracle_pair("laguna-tiny-q8_0.gguf", "laguna-tiny-f32.gguf", MOE_T_Q8_0);
    oracle_pair("qwen3moe-tiny-bf16.gguf", "qwen3moe-tiny-f32.gguf", MOE_T_BF16);
    oracle_pair("laguna-tiny-bf16.gguf", "laguna-tiny-f32.gguf", MOE_T_BF16);
}

/* ---- ISA selection ------------------------------------------------------------------ */

/* In a fresh child (the level is chosen once per process, so the parent
 * must not have touched the kernels yet): MOEFAST_ISA=value. The child exits
 * 0 when it selected `want` (NULL: the best level). Its stderr is returned. */
static int env_child(const char *value, const char *want, char *buf, size_t cap) {
    int pfd[2];
    buf[0] = 0;
    if (pipe(pfd) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        dup2(pfd[1], 2);
        setenv("MOEFAST_ISA", value, 1);
        const char *name = moe_isa_name();
        const moe_kernels *best = moe_kernels_for(moe_isa_best());
        if (!want) want = best->name;
        if (strcmp(want, "avx2") == 0 && !moe_kernels_for(MOE_ISA_AVX2)) want = best->name;
        _exit(strcmp(name, want) == 0 ? 0 : 1);
    }
    close(pfd[1]);
    return check_child_result(pfd[0], pid, buf, cap);
}

static void test_isa_selection(void) {
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    char out_bogus[512], out_scalar[512], out_avx2[512];
    int rc_bogus = env_child("bogus", NULL, out_bogus, sizeof out_bogus);
    int rc_scalar = env_child("scalar", "scalar", out_scalar, sizeof out_scalar);
    int rc_avx2 = env_child("AVX2", "avx2", out_avx2, sizeof out_avx2);
    /* now the parent may choose */
    const moe_isa best = moe_isa_best();
    CHECK_EQ_INT(rc_bogus, 0);
    CHECK_STR_CONTAINS(out_bogus, "MOEFAST_ISA=bogus");
    CHECK_STR_CONTAINS(out_bogus, names[best]);
    CHECK_MSG(strchr(out_bogus, '\n') == strrchr(out_bogus, '\n'), "more than one line: %s", out_bogus);
    CHECK_EQ_INT(rc_scalar, 0);
    CHECK_MSG(out_scalar[0] == 0, "unexpected output: %s", out_scalar);
    CHECK_EQ_INT(rc_avx2, 0);
    if (moe_kernels_for(MOE_ISA_AVX2)) CHECK_MSG(out_avx2[0] == 0, "unexpected output: %s", out_avx2);
    else CHECK_STR_CONTAINS(out_avx2, "not supported");
    char err[MOE_ERR_LEN] = {0};
    CHECK_EQ_INT(moe_set_isa("sse9", err, sizeof err), MOE_EINVAL);
    CHECK_STR_CONTAINS(err, "sse9");
    CHECK_EQ_INT(moe_set_isa(NULL, err, sizeof err), MOE_EINVAL);
    CHECK(moe_kernels_for(MOE_ISA_SCALAR) != NULL);
    CHECK(moe_kernels_for(MOE_ISA_COUNT) == NULL);
    for (int i = 0; i < MOE_ISA_COUNT; i++) {
        const moe_kernels *k = moe_kernels_for((moe_isa)i);
        err[0] = 0;
        int rc = moe_set_isa(names[i], err, sizeof err);
        if (k) {
            CHECK_EQ_INT(rc, MOE_OK);
            CHECK(strcmp(moe_isa_name(), names[i]) == 0);
            CHECK(moe_kernels_active() == k);
            CHECK_EQ_INT(k->isa, i);
            for (size_t f = 0; f < NFMT; f++) CHECK(k->gemv[FORMATS[f]] && k->gemm[FORMATS[f]]);
            CHECK(k->gemv[MOE_T_Q8_1] == NULL && k->gemv[MOE_T_Q8_K] == NULL);
        } else {
            CHECK_EQ_INT(rc, MOE_EUNSUPPORTED);
            CHECK_STR_CONTAINS(err, names[i]);
        }
    }
    CHECK_EQ_INT(moe_set_isa(names[best], err, sizeof err), MOE_OK);
}

/* gemm_wide (flag gemm_wide): the same bits as the scalar gemm for every
 * format that has one, across its own edges: row lengths past a dequantized
 * chunk (1024 values: accumulators parked between chunks), token counts past
 * a token block (96) and every 6-token tile remainder, row counts that leave
 * a partial group of 1-3 rows, odd strides, and the -0 / NaN / Inf /
 * subnormal values fill_row plants. Outputs outside the product stay as they
 * were (cmp_out covers the padding of every y row). */
static void test_wide_match(const moe_kernels *ref, const moe_kernels *simd) {
    static const int64_t NROWS[] = {1, 3, 4, 7, 17};
    static const int64_t NTOK[] = {1, 2, 5, 6, 7, 37, 97, 200};
    int tested = 0;
    for (size_t f = 0; f < NFMT; f++) {
        const uint32_t type = FORMATS[f];
        if (!simd->gemm_wide[type]) continue;
        const int64_t blk = moe_type_get(type)->block;
        const int64_t NS[] = {blk == 1 ? 16 : blk, blk == 1 ? 48 : 2 * blk, 1280, 2304, blk == 1 ? 37 : 0,
                              blk == 32 ? 2880 : 0, blk == 32 ? 2912 : 0};   /* gpt-oss's n_embd, + 1 block */
        for (size_t ni = 0; ni < sizeof NS / sizeof NS[0]; ni++) {
            const int64_t n = NS[ni];
            if (!n) continue;
            for (size_t ri = 0; ri < sizeof NROWS / sizeof NROWS[0]; ri++) {
                const int64_t nrows = NROWS[ri];
                const size_t rb = (size_t)moe_row_bytes(type, (uint64_t)n) + 1 + ri;
                uint8_t *w = malloc(rb * (size_t)nrows);
                for (int64_t r = 0; r < nrows; r++) {
                    memset(w + r * rb, 0x5A, rb);
                    fill_row(type, w + r * rb, n, true);
                }
                for (size_t ti = 0; ti < sizeof NTOK / sizeof NTOK[0]; ti++) {
                    const int64_t ntok = NTOK[ti];
                    if (n > 1280 && ntok > 40) continue;     /* the scalar reference is slow */
                    const size_t xs = (size_t)n + 3, ys = (size_t)nrows + 2;
                    float *x = malloc(sizeof(float) * xs * (size_t)ntok);
                    float *y0 = malloc(sizeof(float) * ys * (size_t)ntok);
                    float *y1 = malloc(sizeof(float) * ys * (size_t)ntok);
                    fill_x(x, (int64_t)xs * ntok, true);
                    for (size_t i = 0; i < ys * (size_t)ntok; i++) y0[i] = y1[i] = 777.0f;
                    ref->gemm[type](w, rb, nrows, x, xs, ntok, y0, ys, n);
                    simd->gemm_wide[type](w, rb, nrows, x, xs, ntok, y1, ys, n);
                    cmp_out(y1, y0, (int64_t)ys * ntok, "gemm_wide", simd->name, type, nrows, n, ntok);
                    free(x); free(y0); free(y1);
                    tested++;
                }
                free(w);
            }
        }
    }
    /* F32 rows of -0 products: every lane stays -0 (the sum is -0) */
    if (simd->gemm_wide[MOE_T_F32]) {
        float wv[64], xv[64 * 7], y0[7], y1[7];
        for (int i = 0; i < 64; i++) wv[i] = -1e-30f;
        for (int i = 0; i < 64 * 7; i++) xv[i] = 1e-30f;
        ref->gemm[MOE_T_F32](wv, 0, 1, xv, 64, 7, y0, 1, 64);
        simd->gemm_wide[MOE_T_F32](wv, 0, 1, xv, 64, 7, y1, 1, 64);
        for (int t = 0; t < 7; t++) CHECK_MSG(same_f32(y0[t], y1[t]) && signbit(y1[t]), "%s -0 gemm_wide t=%d", simd->name, t);
    }
    printf("%s: gemm_wide compared on %d shapes\n", simd->name, tested);
}

int main(void) {
    moe_rng_seed(&g_rng, 0x5eed);
    test_isa_selection(); /* forks first: children must make their choice fresh */
    test_type_table();
    test_known_values();
    const moe_kernels *ref = moe_kernels_for(MOE_ISA_SCALAR);
    test_ref_contract(ref);
    /* the NVFP4 value table the AVX-512 dequantizer loads (folded at compile
     * time): every byte x code equals the run-time product, signed zeros too */
    for (int b = 0; b < 256; b++)
        for (int c = 0; c < 16; c++) {
            const float want = moe_kvalues_fp4_f[c] * moe_ue4m3_half[b];
            CHECK_MSG(!memcmp(&moe_nvfp4_wtab[b][c], &want, 4), "moe_nvfp4_wtab[%d][%d]", b, c);
        }
    int levels = 0;
    for (int i = 1; i < MOE_ISA_COUNT; i++) {
        const moe_kernels *k = moe_kernels_for((moe_isa)i);
        if (!k) { printf("ISA %d not available on this CPU: not tested\n", i); continue; }
        test_kernels_match(ref, k);
        test_wide_match(ref, k);
        levels++;
    }
    printf("SIMD levels compared with the scalar reference: %d\n", levels);
    test_round_trip();
    test_oracle();
    return check_report("test_quant");
}
