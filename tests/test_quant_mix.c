/* test_quant_mix.c — llama-quantize's named mixes (src/lab/quant_mix.c):
 *  - the plan for qwen3moe-tiny-f32.gguf equals the tensor types of
 *    llama.cpp's own qwen3moe-tiny-{q2_k,q3_k_m,q4_k_m,q5_k_m,iq4_xs}.gguf,
 *    tensor by tensor (../shared/oracle; skipped without it);
 *  - `quantize` with the Q2_K mix (all its types have kernels here) writes
 *    llama.cpp's q2_k file's tensors byte for byte (ggml's reference
 *    quantizers, no imatrix);
 *  - broken inputs: no architecture / block count, a mix name as an expert
 *    type. */
#include "check.h"
#include "gguf/gguf.h"
#include "lab/quant_mix.h"
#include "quant/quant.h"
#include "moefast.h"

#include <unistd.h>

static void plan_vs_llama(const char *mixname, const char *file, const gguf_file *f32) {
    char rel[256], err[MOE_ERR_LEN];
    snprintf(rel, sizeof rel, "oracle/%s", file);
    const char *p = check_ref(rel);
    if (!p) return;
    gguf_file *g = NULL;
    CHECK_MSG(gguf_open(p, &g, err, sizeof err) == MOE_OK, "%s", err);
    if (!g) return;
    const int mix = moe_mix_by_name(mixname);
    CHECK(mix >= 0);
    int *target = malloc(sizeof(int) * f32->n_tensors);
    CHECK_MSG(moe_mix_plan(mix, f32, target, err, sizeof err) == MOE_OK, "%s", err);
    int same = 0, diff = 0;
    for (uint64_t i = 0; i < f32->n_tensors; i++) {
        const gguf_tensor *t = &f32->tensors[i], *lt = gguf_find_tensor(g, t->name);
        CHECK_MSG(lt != NULL, "%s: %s missing", file, t->name);
        if (!lt) continue;
        const uint32_t ours = target[i] < 0 ? t->type : (uint32_t)target[i];
        if (ours == lt->type) same++;
        else {
            diff++;
            fprintf(stderr, "  %s %s: ours %s, llama.cpp %s\n", mixname, t->name, moe_type_get(ours)->name,
                    moe_type_get(lt->type)->name);
        }
    }
    CHECK_MSG(diff == 0, "%s: %d tensor types differ from llama.cpp's", mixname, diff);
    printf("mix %-7s: %d tensors, every type as llama.cpp's %s\n", mixname, same, file);
    free(target);
    gguf_close(g);
}

static void quantize_q2_k(const char *f32path) {
    const char *lp = check_ref("oracle/qwen3moe-tiny-q2_k.gguf");
    if (!lp) return;
    char out[] = "/tmp/moefast_mix_XXXXXX", err[MOE_ERR_LEN];
    int fd = mkstemp(out);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    int rc = moe_quantize_file(f32path, out, "Q2_K", NULL, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    gguf_file *a = NULL, *b = NULL;
    if (!rc) CHECK_MSG(gguf_open(out, &a, err, sizeof err) == MOE_OK, "%s", err);
    CHECK_MSG(gguf_open(lp, &b, err, sizeof err) == MOE_OK, "%s", err);
    if (a && b) {
        int same = 0, bad = 0;
        for (uint64_t i = 0; i < a->n_tensors; i++) {
            const gguf_tensor *t = &a->tensors[i], *u = gguf_find_tensor(b, t->name);
            if (u && u->type == t->type && u->nbytes == t->nbytes && !memcmp(u->data, t->data, t->nbytes)) same++;
            else { bad++; fprintf(stderr, "  Q2_K mix: %s differs from llama.cpp's\n", t->name); }
        }
        CHECK_MSG(bad == 0 && same == (int)b->n_tensors, "Q2_K mix: %d tensors differ", bad);
        uint32_t ft = 0;
        CHECK(gguf_get_u32(a, "general.file_type", &ft, err, sizeof err) == MOE_OK && ft == 10);
        printf("quantize Q2_K mix: %d tensors byte-identical to llama.cpp's q2_k file\n", same);
    }
    if (a) gguf_close(a);
    if (b) gguf_close(b);
    unlink(out);
}

/* a GGUF with one matrix and the given metadata */
static void broken(void) {
    char err[MOE_ERR_LEN];
    static const uint8_t zeros[256 * 4 * 4] = {0};
    const int64_t ne[4] = {256, 4, 1, 1};
    for (int c = 0; c < 2; c++) {
        gguf_writer *w = gguf_writer_new(32);
        if (c == 1) gguf_w_str(w, "general.architecture", "qwen3moe");
        gguf_w_tensor(w, "blk.0.attn_q.weight", MOE_T_F32, 2, ne, zeros, sizeof zeros);
        char path[] = "/tmp/moefast_mixb_XXXXXX";
        int fd = mkstemp(path);
        close(fd);
        CHECK(gguf_writer_write(w, path, err, sizeof err) == MOE_OK);
        gguf_writer_free(w);
        gguf_file *f = NULL;
        CHECK(gguf_open(path, &f, err, sizeof err) == MOE_OK);
        int *target = malloc(sizeof(int) * (f ? f->n_tensors : 1));
        err[0] = 0;
        CHECK(f && moe_mix_plan(MOE_MIX_Q4_K_M, f, target, err, sizeof err) == MOE_EFORMAT);
        CHECK_STR_CONTAINS(err, c == 0 ? "general.architecture" : "qwen3moe.block_count");
        err[0] = 0;
        CHECK(moe_quantize_file(path, "/tmp/moefast_mixb_out", "Q3_K_M", NULL, err, sizeof err) == MOE_EFORMAT);
        CHECK_STR_CONTAINS(err, path);
        free(target);
        if (f) gguf_close(f);
        unlink(path);
    }
    CHECK(moe_quantize_file("/nonexistent.gguf", "/tmp/x", "Q4_K", "Q4_K_M", err, sizeof err) == MOE_EINVAL);
    CHECK_STR_CONTAINS(err, "Q4_K_M");
    CHECK_EQ_INT(moe_mix_by_name("q4_k_m"), MOE_MIX_Q4_K_M);
    CHECK_EQ_INT(moe_mix_by_name("Q4_K"), -1);
}

int main(void) {
    broken();
    char err[MOE_ERR_LEN];
    const char *fp = check_ref("oracle/qwen3moe-tiny-f32.gguf");
    if (fp) {
        gguf_file *f = NULL;
        CHECK_MSG(gguf_open(fp, &f, err, sizeof err) == MOE_OK, "%s", err);
        if (f) {
            plan_vs_llama("Q2_K", "qwen3moe-tiny-q2_k.gguf", f);
            plan_vs_llama("Q3_K_M", "qwen3moe-tiny-q3_k_m.gguf", f);
            plan_vs_llama("Q4_K_M", "qwen3moe-tiny-q4_k_m.gguf", f);
            plan_vs_llama("Q5_K_M", "qwen3moe-tiny-q5_k_m.gguf", f);
            plan_vs_llama("IQ4_XS", "qwen3moe-tiny-iq4_xs.gguf", f);
            gguf_close(f);
        }
        quantize_q2_k(fp);
    }
    return check_report("test_quant_mix");
}
