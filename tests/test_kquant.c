/* test_kquant.c — Q5_K, Q3_K, Q2_K, IQ4_XS against ggml, independently of
 * src/quant/kquant_ref.c:
 *  - hand-built blocks with values worked out from ggml's layouts;
 *  - every tensor of these types in llama.cpp's own quantized files
 *    (../shared/oracle/qwen3moe-tiny-{q5_k_m,q3_k_m,q2_k,iq4_xs}.gguf,
 *    written by llama-quantize) decoded here in double precision, following
 *    ggml's dequantize_row_* loops: every value of these formats is one
 *    rounding of an exact value (d*sc*q is exact in FP32, then at most one
 *    subtraction), so ggml's float result, fused or not, is that double
 *    rounded to float, and moe_dequant_row must give exactly it;
 *  - ggml's reference quantizer reproduced: quantizing the F32 twin
 *    (qwen3moe-tiny-f32.gguf, the file llama-quantize read) with
 *    moe_quantize_row gives llama.cpp's blocks byte for byte. */
#include "check.h"
#include "quant/quant.h"
#include "gguf/gguf.h"
#include "base/util.h"
#include "moefast.h"

#include <math.h>
#include <stdint.h>

static const int8_t KV[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static double h2d(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return (double)moe_f16_to_f32(v); }

/* ggml get_scale_min_k4 */
static void scale_min(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) { *d = q[j] & 63; *m = q[j + 4] & 63; }
    else { *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4); *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
}

/* ggml's dequantize_row_* loops, one block, in double. */
static void ggml_block(uint32_t type, const uint8_t *x, double *y) {
    if (type == MOE_T_Q5_K) {
        const uint8_t *ql = x + 48, *qh = x + 16;
        const double d = h2d(x), min = h2d(x + 2);
        int is = 0, sc, m;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < 256; j += 64) {
            scale_min(is + 0, x + 4, &sc, &m);
            const double d1 = d * sc, m1 = min * m;
            scale_min(is + 1, x + 4, &sc, &m);
            const double d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32; is += 2;
            u1 = (uint8_t)(u1 << 2); u2 = (uint8_t)(u2 << 2);
        }
    } else if (type == MOE_T_Q3_K) {
        uint32_t aux[4];
        const int8_t *scales = (const int8_t *)aux;
        const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
        const double d_all = h2d(x + 108);
        const uint8_t *q = x + 32, *hm = x;
        uint8_t m = 1;
        memcpy(aux, x + 96, 12);
        uint32_t tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
        aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
        aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
        aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
        int is = 0;
        for (int n = 0; n < 256; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                double dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
                shift += 2;
                m = (uint8_t)(m << 1);
            }
            q += 32;
        }
    } else if (type == MOE_T_Q2_K) {
        const double d = h2d(x + 80), min = h2d(x + 82);
        const uint8_t *q = x + 16;
        int is = 0;
        for (int n = 0; n < 256; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                uint8_t sc = x[is++];
                double dl = d * (sc & 0xF), ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l] >> shift) & 3) - ml;
                sc = x[is++];
                dl = d * (sc & 0xF); ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16] >> shift) & 3) - ml;
                shift += 2;
            }
            q += 32;
        }
    } else { /* IQ4_XS */
        const uint8_t *qs = x + 8;
        const double d = h2d(x);
        uint16_t scales_h;
        memcpy(&scales_h, x + 2, 2);
        for (int ib = 0; ib < 8; ++ib) {
            const int ls = ((x[4 + ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
            const double dl = d * (ls - 32);
            for (int j = 0; j < 16; ++j) {
                y[j + 0] = dl * KV[qs[j] & 0xf];
                y[j + 16] = dl * KV[qs[j] >> 4];
            }
            y += 32;
            qs += 16;
        }
    }
}

/* moe_dequant_row == ggml's value rounded once, for n values (blocks). */
static int compare_blocks(uint32_t type, const uint8_t *data, int64_t nblocks) {
    const size_t bb = moe_type_get(type)->block_bytes;
    int bad = 0;
    for (int64_t b = 0; b < nblocks; b++) {
        double want[256];
        float got[256];
        ggml_block(type, data + b * bb, want);
        moe_dequant_row(type, data + b * bb, got, 256);
        for (int k = 0; k < 256; k++) {
            const float w = (float)want[k];
            if (memcmp(&w, &got[k], 4) != 0 && !(isnan(w) && isnan(got[k]))) {
                if (!bad) fprintf(stderr, "  %s block %lld [%d]: %a, ggml %a\n", moe_type_get(type)->name, (long long)b, k, got[k], w);
                bad++;
            }
        }
    }
    return bad;
}

static void test_known_values(void) {
    float w[256];
    { /* Q5_K: d = 1, dmin = 0.5, sub-block 0: sc 3, m 2; value 0: nibble 10 + qh bit 0 -> 26 */
        uint8_t b[176] = {0};
        put16(b, 0x3C00); put16(b + 2, 0x3800);
        b[4] = 3; b[8] = 2;
        b[48] = 0x7A;            /* value 0 low nibble 10; value 32 high nibble 7 (sub-block 1: sc 0) */
        b[16] = 0x01 | 0x40;     /* qh[0]: bit 0 -> value 0 +16; bit 6 -> value 192 +16 (sub-block 6) */
        b[48 + 96] = 0x05;       /* value 192 low nibble 5 */
        b[14] = 0x04;            /* sub-block 6: sc = (q[10] & 15) | (q[2] >> 6) << 4 = 4, m = 0 */
        moe_dequant_row(MOE_T_Q5_K, b, w, 256);
        CHECK_MSG(w[0] == 3.0f * 26 - 1.0f, "%g", w[0]);
        CHECK_MSG(w[32] == 0.0f, "%g", w[32]);
        CHECK_MSG(w[192] == 4.0f * 21, "%g", w[192]);
    }
    { /* Q3_K: d = 0.5; scale 0 = 33 (s-32 = 1), scale 13 = 5 (-27) */
        uint8_t b[110] = {0};
        put16(b + 108, 0x3800);
        b[96 + 0] = 1; b[96 + 8] = 0x02;   /* scale 0: low 1, high bits (byte 8, bits 0-1) 2 -> 33 */
        b[96 + 5] = 0x50;                   /* scale 13: low 4 bits = high nibble of byte 5 = 5; high bits 0 */
        b[32 + 0] = 0x03;                   /* value 0: q2 = 3; hmask[0] bit 0 clear -> 3 - 4 = -1 */
        b[0] = 0x20;                        /* hmask[0] bit 5: h = 1, j = 1 -> value 128 + 32 = 160 */
        b[32 + 32 + 16] = 0x08;             /* value 128 + 32 + 16 = 176 (sub-block 11): q2 = 2, hbit 0 -> -2 */
        b[32 + 32 + 0] = 0x0C;              /* value 160: q2 = 3, hbit set -> 3 */
        moe_dequant_row(MOE_T_Q3_K, b, w, 256);
        CHECK_MSG(w[0] == 0.5f * 1 * -1, "%g", w[0]);
        CHECK_MSG(w[1] == 0.5f * 1 * -4, "%g", w[1]);
        CHECK_MSG(w[160] == 0.5f * -32 * 3, "%g", w[160]);   /* sub-block 10: scale 0 -> -32 */
        CHECK_MSG(w[208] == 0.5f * -27 * -4, "%g", w[208]);  /* sub-block 13, q 0 - 4 */
        CHECK_MSG(w[176] == 0.5f * -32 * -2, "%g", w[176]);
    }
    { /* Q2_K: d = 2, dmin = 0.25; sub-block 0: sc 3, m 4; sub-block 9: sc 1, m 15 */
        uint8_t b[84] = {0};
        put16(b + 80, 0x4000); put16(b + 82, 0x3400);
        b[0] = 0x43; b[9] = 0xF1;
        b[16] = 0x02 | 0x0C;               /* value 0 = 2, value 32 (sub-block 2: sc 0, m 0) = 3 */
        b[16 + 32 + 16] = 0x30;            /* value 128 + 64 + 16 = 208? j = 2 -> bits 4-5: 3; sub-block 13 */
        b[16 + 32] = 0x0C;                 /* value 128 + 32 = 160 (j = 1), sub-block 10: 3 */
        b[10] = 0x25;
        b[16 + 16 + 0] = 0x01;             /* value 16 (sub-block 1): 1 */
        b[1] = 0x12;
        moe_dequant_row(MOE_T_Q2_K, b, w, 256);
        CHECK_MSG(w[0] == 2.0f * 3 * 2 - 0.25f * 4, "%g", w[0]);
        CHECK_MSG(w[32] == 0.0f, "%g", w[32]);
        CHECK_MSG(w[16] == 2.0f * 2 * 1 - 0.25f * 1, "%g", w[16]);
        CHECK_MSG(w[160] == 2.0f * 5 * 3 - 0.25f * 2, "%g", w[160]);
        CHECK_MSG(w[144] == 2.0f * 1 * 0 - 0.25f * 15, "%g", w[144]);   /* sub-block 9, code 0 */
        CHECK_MSG(w[208] == 0.0f * 3 - 0.0f, "%g", w[208]);             /* sub-block 13: sc 0, m 0 */
    }
    { /* IQ4_XS: d = 0.5; sub-block 0: ls = 33 (+1), sub-block 7: ls = 63 (31), sub-block 2: 0 (-32) */
        uint8_t b[136] = {0};
        put16(b, 0x3800);
        put16(b + 2, (uint16_t)(2 << 0 | 3 << 14 | 0 << 4));
        b[4] = 0x01; b[7] = 0xF0; b[5] = 0x00;
        b[8] = 0xF0;                 /* value 0 code 0 (-127), value 16 code 15 (113) */
        b[8 + 16 * 7 + 3] = 0x08;    /* value 224 + 3: code 8 (1) */
        b[8 + 32 + 1] = 0x90;        /* sub-block 2, value 64 + 16 + 1 code 9 (13) */
        moe_dequant_row(MOE_T_IQ4_XS, b, w, 256);
        CHECK_MSG(w[0] == 0.5f * -127, "%g", w[0]);
        CHECK_MSG(w[16] == 0.5f * 113, "%g", w[16]);
        CHECK_MSG(w[227] == 0.5f * 31 * 1, "%g", w[227]);
        CHECK_MSG(w[81] == 0.5f * -32 * 13, "%g", w[81]);
        CHECK_MSG(w[32] == 0.5f * -32 * -127, "%g", w[32]);   /* sub-block 1: ls 0 */
    }
    /* random blocks, every bit pattern: the double decoding above agrees */
    moe_rng r;
    moe_rng_seed(&r, 7);
    const uint32_t types[] = {MOE_T_Q5_K, MOE_T_Q3_K, MOE_T_Q2_K, MOE_T_IQ4_XS};
    for (int t = 0; t < 4; t++) {
        const size_t bb = moe_type_get(types[t])->block_bytes;
        uint8_t *buf = malloc(bb * 64);
        for (size_t i = 0; i < bb * 64; i++) buf[i] = (uint8_t)(moe_rng_next(&r) >> 40);
        CHECK_MSG(compare_blocks(types[t], buf, 64) == 0, "%s random blocks", moe_type_get(types[t])->name);
        free(buf);
    }
}

/* One oracle file: every tensor of our types decodes as ggml does, and (the
 * F32 twin given) re-quantizing the twin gives the file's bytes. */
static void oracle_file(const char *name, gguf_file *f32) {
    char rel[256], err[MOE_ERR_LEN];
    snprintf(rel, sizeof rel, "oracle/%s", name);
    const char *p = check_ref(rel);
    if (!p) return;
    gguf_file *g = NULL;
    int rc = gguf_open(p, &g, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (rc != MOE_OK) return;
    int tensors = 0, bad = 0, requant = 0, requant_same = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (t->type != MOE_T_Q5_K && t->type != MOE_T_Q3_K && t->type != MOE_T_Q2_K && t->type != MOE_T_IQ4_XS)
            continue;
        const int64_t nblocks = (int64_t)(t->nbytes / moe_type_get(t->type)->block_bytes);
        bad += compare_blocks(t->type, t->data, nblocks) != 0;
        tensors++;
        const gguf_tensor *tf = f32 ? gguf_find_tensor(f32, t->name) : NULL;
        if (tf && tf->type == MOE_T_F32 && tf->nbytes == (uint64_t)nblocks * 256 * 4) {
            uint8_t *q = malloc(t->nbytes);
            moe_quantize_row(t->type, (const float *)tf->data, q, nblocks * 256);
            requant++;
            if (memcmp(q, t->data, t->nbytes) == 0) requant_same++;
            else {
                int64_t diff = 0;
                const size_t bb = moe_type_get(t->type)->block_bytes;
                for (int64_t b = 0; b < nblocks; b++) diff += memcmp(q + b * bb, t->data + b * bb, bb) != 0;
                fprintf(stderr, "  %s: %s (%s): %lld of %lld blocks differ from ggml's quantizer\n", name, t->name,
                        moe_type_get(t->type)->name, (long long)diff, (long long)nblocks);
            }
            free(q);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d tensors decode differently from ggml", name, bad);
    CHECK_MSG(tensors >= 4, "%s: only %d tensors of the new types", name, tensors);
    CHECK_MSG(requant_same == requant, "%s: %d of %d tensors re-quantize to other bytes", name, requant - requant_same, requant);
    printf("oracle %s: %d tensors decode as ggml; %d of %d re-quantized from F32 byte for byte\n", name, tensors,
           requant_same, requant);
    gguf_close(g);
}

int main(void) {
    test_known_values();
    char err[MOE_ERR_LEN];
    const char *fp = check_ref("oracle/qwen3moe-tiny-f32.gguf");
    gguf_file *f32 = NULL;
    if (fp) CHECK_MSG(gguf_open(fp, &f32, err, sizeof err) == MOE_OK, "%s", err);
    oracle_file("qwen3moe-tiny-q5_k_m.gguf", f32);
    oracle_file("qwen3moe-tiny-q3_k_m.gguf", f32);
    oracle_file("qwen3moe-tiny-q2_k.gguf", f32);
    oracle_file("qwen3moe-tiny-iq4_xs.gguf", f32);
    oracle_file("qwen3moe-tiny-q4_k_m.gguf", f32);
    if (f32) gguf_close(f32);
    return check_report("test_kquant");
}
