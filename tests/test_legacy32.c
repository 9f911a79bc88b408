/* test_legacy32.c — Q4_1, Q5_0, Q5_1 and IQ4_NL against llama.cpp's own files.
 *
 * The oracle mixes (../shared/oracle/qwen3moe-tiny-{q4_1,q5_0,q5_k_m,q3_k_m,
 * iq4_xs}.gguf) were written by llama-quantize from qwen3moe-tiny-f32.gguf
 * without an importance matrix, so each of their Q4_1 / Q5_0 / Q5_1 / IQ4_NL
 * tensors is ggml's reference quantizer applied to the F32 twin's values:
 *  - moe_quantize_row on the F32 twin must give the file's bytes exactly
 *    (our quantizer is ggml's, bit for bit);
 *  - moe_dequant_row must equal a second dequantizer written here the way
 *    ggml's dequantize_row_* reads the bits (qh shifted by j and j + 12,
 *    d * kvalues_iq4nl[q]), independently of quant_ref.c's formulation;
 *  - the dequantized values are finite and within the format's step of the
 *    F32 twin. */
#include "check.h"
#include "quant/quant.h"
#include "gguf/gguf.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }

/* ggml's dequantize_row_{q4_1,q5_0,q5_1,iq4_nl}, one block, transcribed. */
static void ggml_style_block(uint32_t type, const uint8_t *x, float *y) {
    static const int8_t kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    const float d = moe_f16_to_f32(rd16(x));
    if (type == MOE_T_IQ4_NL) {
        for (int j = 0; j < 16; ++j) {
            y[j] = d * kv[x[2 + j] & 0xf];
            y[j + 16] = d * kv[x[2 + j] >> 4];
        }
        return;
    }
    if (type == MOE_T_Q4_1) {
        const float m = moe_f16_to_f32(rd16(x + 2));
        for (int j = 0; j < 16; ++j) {
            const int x0 = x[4 + j] & 0x0F, x1 = x[4 + j] >> 4;
            y[j] = x0 * d + m;
            y[j + 16] = x1 * d + m;
        }
        return;
    }
    const int one = type == MOE_T_Q5_1;
    const float m = one ? moe_f16_to_f32(rd16(x + 2)) : 0.0f;
    uint32_t qh;
    memcpy(&qh, x + (one ? 4 : 2), 4);
    const uint8_t *qs = x + (one ? 8 : 6);
    for (int j = 0; j < 16; ++j) {
        const uint8_t xh_0 = (uint8_t)(((qh >> (j + 0)) << 4) & 0x10);
        const uint8_t xh_1 = (uint8_t)(((qh >> (j + 12))) & 0x10);
        const int x0 = (qs[j] & 0x0F) | xh_0, x1 = (qs[j] >> 4) | xh_1;
        if (one) {
            y[j] = x0 * d + m;
            y[j + 16] = x1 * d + m;
        } else {
            y[j] = (x0 - 16) * d;
            y[j + 16] = (x1 - 16) * d;
        }
    }
}

/* Every `type` tensor of oracle file qname against its F32 twin; returns
 * how many were compared. */
static int check_file(const char *qname, uint32_t type, gguf_file *f32) {
    char rel[256], err[MOE_ERR_LEN];
    snprintf(rel, sizeof rel, "oracle/%s", qname);
    const char *qp = check_ref(rel);
    if (!qp || !f32) return 0;
    gguf_file *q = NULL;
    const int rc = gguf_open(qp, &q, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (rc != MOE_OK) return 0;
    const moe_type_info *ti = moe_type_get(type);
    int compared = 0, bytes_bad = 0, dq_bad = 0, far = 0;
    for (uint64_t i = 0; i < q->n_tensors; i++) {
        const gguf_tensor *t = &q->tensors[i];
        if (t->type != type) continue;
        const gguf_tensor *tf = gguf_find_tensor(f32, t->name);
        CHECK_MSG(tf && tf->type == MOE_T_F32, "%s: %s has no F32 twin", qname, t->name);
        if (!tf || tf->type != MOE_T_F32) continue;
        const int64_t n = (int64_t)(t->nbytes / ti->block_bytes) * ti->block;
        CHECK_EQ_INT(tf->nbytes, (uint64_t)n * 4);
        if (tf->nbytes != (uint64_t)n * 4) continue;
        float *x = malloc((size_t)n * 4), *w = malloc((size_t)n * 4), *v = malloc((size_t)n * 4);
        uint8_t *qb = malloc(t->nbytes);
        memcpy(x, tf->data, (size_t)n * 4);
        moe_quantize_row(type, x, qb, n);
        if (memcmp(qb, t->data, t->nbytes) != 0) {
            bytes_bad++;
            for (uint64_t k = 0; k < t->nbytes; k++)
                if (qb[k] != t->data[k]) {
                    fprintf(stderr, "  %s %s: byte %llu (block %llu) ours 0x%02x, llama.cpp's 0x%02x\n", qname,
                            t->name, (unsigned long long)k, (unsigned long long)(k / ti->block_bytes), qb[k], t->data[k]);
                    break;
                }
        }
        moe_dequant_row(type, t->data, w, n);
        for (int64_t b = 0; b < n / 32; b++) ggml_style_block(type, t->data + (size_t)b * ti->block_bytes, v + 32 * b);
        dq_bad += memcmp(w, v, (size_t)n * 4) != 0;
        for (int64_t k = 0; k < n; k += 32) {
            float amax = 0;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[k + j]));
            for (int j = 0; j < 32; j++) far += !(fabsf(w[k + j] - x[k + j]) <= amax * 0.2f);
        }
        free(x); free(w); free(v); free(qb);
        compared++;
    }
    CHECK_MSG(bytes_bad == 0, "%s: %d %s tensors quantize differently from llama.cpp", qname, bytes_bad, ti->name);
    CHECK_MSG(dq_bad == 0, "%s: %d %s tensors dequantize differently", qname, dq_bad, ti->name);
    CHECK_MSG(far == 0, "%s: %d %s values far from the F32 twin", qname, far, ti->name);
    printf("%s: %d %s tensors: llama.cpp's bytes reproduced, dequantization equal\n", qname, compared, ti->name);
    gguf_close(q);
    return compared;
}

int main(void) {
    char err[MOE_ERR_LEN];
    const char *fp = check_ref("oracle/qwen3moe-tiny-f32.gguf");
    if (!fp) return check_report("test_legacy32");
    gguf_file *f32 = NULL;
    const int rc = gguf_open(fp, &f32, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (rc != MOE_OK) return check_report("test_legacy32");
    /* weight_types of each file's JSON: Q4_1 21, Q5_0 21, Q5_0 4, Q5_1 2, IQ4_NL 4 */
    CHECK_EQ_INT(check_file("qwen3moe-tiny-q4_1.gguf", MOE_T_Q4_1, f32), 21);
    CHECK_EQ_INT(check_file("qwen3moe-tiny-q5_0.gguf", MOE_T_Q5_0, f32), 21);
    CHECK_EQ_INT(check_file("qwen3moe-tiny-q3_k_m.gguf", MOE_T_Q5_0, f32), 4);
    CHECK_EQ_INT(check_file("qwen3moe-tiny-q5_k_m.gguf", MOE_T_Q5_1, f32), 2);
    CHECK_EQ_INT(check_file("qwen3moe-tiny-iq4_xs.gguf", MOE_T_IQ4_NL, f32), 4);
    gguf_close(f32);
    return check_report("test_legacy32");
}
