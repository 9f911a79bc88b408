/* test_bind.c — model binding errors: a GGUF that is well-formed but does not
 * describe a model we can run must fail to load with a message that names the
 * key or tensor (and both shapes for a mis-shaped tensor). Each case rewrites
 * a reference model (check_ref) with one thing changed. */
#include <stdint.h>
#include <unistd.h>

#include "check.h"
#include "gguf/gguf.h"
#include "moefast.h"
#include "quant/quant.h"

typedef struct {
    const char *drop_key, *drop_tensor;   /* leave this out */
    const char *reshape_tensor;           /* swap ne[0] and ne[1] of this tensor */
    const char *u32_key; uint32_t u32_val; /* replace a u32 key's value */
    const char *str_key; const char *str_val;
    const char *add_scale; int64_t scale_n; /* add "<name>.scale" with scale_n F32 values */
    const char *retype_tensor;             /* store this tensor as Q8_1 (known type, no kernels) */
} edit;

static int rewrite(const char *src, const char *dst, const edit *e) {
    char err[512];
    gguf_file *f = NULL;
    if (gguf_open(src, &f, err, sizeof err)) { fprintf(stderr, "%s\n", err); return -1; }
    gguf_writer *w = gguf_writer_new(f->alignment);
    int rc = 0;
    for (uint64_t i = 0; i < f->n_kv && !rc; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (e->drop_key && !strcmp(kv->key, e->drop_key)) continue;
        if (e->u32_key && !strcmp(kv->key, e->u32_key)) { rc = gguf_w_u32(w, kv->key, e->u32_val); continue; }
        if (e->str_key && !strcmp(kv->key, e->str_key)) { rc = gguf_w_str(w, kv->key, e->str_val); continue; }
        rc = gguf_w_kv(w, kv);
    }
    uint8_t *zeros = calloc(1, 1 << 22);
    for (uint64_t i = 0; i < f->n_tensors && !rc; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (e->drop_tensor && !strcmp(t->name, e->drop_tensor)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        uint32_t type = t->type;
        const void *data = t->data;
        uint64_t nbytes = t->nbytes;
        uint32_t n_dims = t->n_dims;
        if (e->reshape_tensor && !strcmp(t->name, e->reshape_tensor)) {
            ne[0] = t->ne[1];
            ne[1] = t->ne[0];
            if (n_dims < 2) n_dims = 2;          /* a vector [n] becomes [1, n] */
        }
        if (e->retype_tensor && !strcmp(t->name, e->retype_tensor)) {
            type = MOE_T_Q8_1;
            nbytes = moe_row_bytes(type, (uint64_t)ne[0]) * (uint64_t)(ne[1] * ne[2] * ne[3]);
            data = zeros;
        }
        rc = gguf_w_tensor(w, t->name, type, n_dims, ne, data, nbytes);
        if (!rc && e->add_scale && !strcmp(t->name, e->add_scale)) {
            char sname[256];
            snprintf(sname, sizeof sname, "%.*s.scale", (int)(strlen(t->name) - 7), t->name);
            int64_t sne[4] = {e->scale_n, 1, 1, 1};
            float ones[64];
            for (int k = 0; k < 64; k++) ones[k] = 1.0f;
            rc = gguf_w_tensor(w, sname, MOE_T_F32, 1, sne, ones, (uint64_t)e->scale_n * 4);
        }
    }
    if (!rc) rc = gguf_writer_write(w, dst, err, sizeof err);
    if (rc) fprintf(stderr, "rewrite: %s\n", err);
    free(zeros);
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}

static void expect_fail(const char *src, const edit *e, int want_rc, const char *const *needles, const char *label) {
    char dst[256], err[MOE_ERR_LEN] = "";
    snprintf(dst, sizeof dst, "/tmp/moefast-test-bind-%d.gguf", (int)getpid());
    if (rewrite(src, dst, e)) { CHECK_MSG(0, "%s: could not build the test file", label); return; }
    moe_model *m = NULL;
    int rc = moe_model_load(dst, NULL, &m, err, sizeof err);
    CHECK_MSG(rc == want_rc, "%s: load returned %d, expected %d (%s)", label, rc, want_rc, err);
    CHECK_MSG(m == NULL, "%s: a model handle came back", label);
    for (int i = 0; needles[i]; i++) CHECK_STR_CONTAINS(err, needles[i]);
    CHECK_MSG(strchr(err, '\n') == NULL, "%s: multi-line message", label);
    moe_model_free(m);
    unlink(dst);
}

/* The later architectures' own checks, on their reference files when present. */
static void later_architectures(void) {
    char mx[512], ol[512], q2[512];
    snprintf(mx, sizeof mx, "%s/oracle/mixtral-tiny-q8_0.gguf", check_shared_dir());
    snprintf(ol, sizeof ol, "%s/oracle/olmoe-tiny-q8_0.gguf", check_shared_dir());
    snprintf(q2, sizeof q2, "%s/oracle/qwen2moe-tiny-q8_0.gguf", check_shared_dir());
    if (access(mx, R_OK) || access(ol, R_OK) || access(q2, R_OK)) {
        printf("skip the mixtral/olmoe/qwen2moe cases: their files are not under %s/oracle\n", check_shared_dir());
        return;
    }
    edit a1 = {.drop_key = "llama.expert_count"};
    expect_fail(mx, &a1, MOE_EUNSUPPORTED, (const char *[]){"llama without experts", "not a MoE model", NULL}, "dense llama");
    edit a2 = {.u32_key = "llama.expert_count", .u32_val = 0};
    expect_fail(mx, &a2, MOE_EUNSUPPORTED, (const char *[]){"llama without experts", NULL}, "llama, 0 experts");
    edit a3 = {.u32_key = "llama.rope.dimension_count", .u32_val = 16};
    expect_fail(mx, &a3, MOE_EFORMAT, (const char *[]){"llama.rope.dimension_count 16 must equal the head size 32", NULL},
                "llama partial rope");
    edit a4 = {.drop_key = "llama.feed_forward_length"};
    expect_fail(mx, &a4, MOE_EFORMAT, (const char *[]){"llama.feed_forward_length (the experts' width)", NULL}, "llama width");
    edit a5 = {.drop_tensor = "blk.2.attn_k_norm.weight"};
    expect_fail(ol, &a5, MOE_EFORMAT, (const char *[]){"missing tensor 'blk.2.attn_k_norm.weight' (olmoe)", NULL}, "olmoe k norm");
    edit a6 = {.reshape_tensor = "blk.1.attn_q_norm.weight"};
    expect_fail(ol, &a6, MOE_EFORMAT, (const char *[]){"'blk.1.attn_q_norm.weight' has shape [1, 256]", "expected [256]", NULL},
                "olmoe q norm shape");
    edit a7 = {.drop_tensor = "blk.3.ffn_gate_inp_shexp.weight"};
    expect_fail(q2, &a7, MOE_EFORMAT, (const char *[]){"missing tensor 'blk.3.ffn_gate_inp_shexp.weight' (qwen2moe)", NULL},
                "qwen2moe shared gate");
    edit a8 = {.reshape_tensor = "blk.0.attn_k.bias"};
    expect_fail(q2, &a8, MOE_EFORMAT, (const char *[]){"'blk.0.attn_k.bias' has shape [1, 256]", "expected [256]", NULL},
                "qwen2moe bias shape");
    edit a9 = {.drop_key = "qwen2moe.expert_shared_feed_forward_length", .drop_tensor = "blk.0.ffn_up_shexp.weight"};
    expect_fail(q2, &a9, MOE_EFORMAT, (const char *[]){"'blk.0.ffn_gate_shexp.weight' has shape [256, 64]", "expected [256, 32]", NULL},
                "qwen2moe shared width default");
}

int main(void) {
    /* laguna-tiny-q8_0: the same keys and shapes as the F32 file, and vendored
     * in tests/data/shared, so a clone without ../shared runs every case */
    const char *lag = check_ref("oracle/laguna-tiny-q8_0.gguf"), *qw = check_ref("oracle/qwen3moe-tiny-q8_0.gguf");
    if (!lag || !qw) return check_report("test_bind");
    /* the unmodified rewrite loads (the harness itself is sound) */
    {
        char dst[256], err[MOE_ERR_LEN];
        snprintf(dst, sizeof dst, "/tmp/moefast-test-bind-ok-%d.gguf", (int)getpid());
        edit none = {0};
        CHECK(rewrite(lag, dst, &none) == 0);
        moe_model *m = NULL;
        CHECK_MSG(moe_model_load(dst, NULL, &m, err, sizeof err) == MOE_OK, "%s", err);
        moe_model_free(m);
        unlink(dst);
    }
    edit e1 = {.drop_tensor = "blk.2.ffn_up_exps.weight"};
    expect_fail(lag, &e1, MOE_EFORMAT, (const char *[]){"missing tensor 'blk.2.ffn_up_exps.weight'", NULL}, "missing tensor");
    edit e2 = {.reshape_tensor = "blk.1.attn_q.weight"};
    expect_fail(lag, &e2, MOE_EFORMAT, (const char *[]){"'blk.1.attn_q.weight' has shape [384, 256]", "expected [256, 384]", NULL}, "mis-shaped");
    edit e3 = {.drop_key = "laguna.expert_count"};
    expect_fail(lag, &e3, MOE_EFORMAT, (const char *[]){"missing required key 'laguna.expert_count'", NULL}, "missing key");
    edit e4 = {.u32_key = "laguna.attention.head_count_kv", .u32_val = 4};
    expect_fail(lag, &e4, MOE_EFORMAT, (const char *[]){"query heads, not a positive multiple of 4 KV heads", NULL}, "head counts");
    edit e5 = {.str_key = "general.architecture", .str_val = "mamba"};
    expect_fail(lag, &e5, MOE_EUNSUPPORTED, (const char *[]){"'mamba' is not supported", NULL}, "architecture");
    edit e6 = {.retype_tensor = "blk.0.attn_k.weight"};
    expect_fail(lag, &e6, MOE_EUNSUPPORTED, (const char *[]){"'blk.0.attn_k.weight' has type Q8_1", NULL}, "no kernels");
    edit e7 = {.add_scale = "blk.1.ffn_down_exps.weight", .scale_n = 3};
    expect_fail(lag, &e7, MOE_EFORMAT, (const char *[]){"'blk.1.ffn_down_exps.scale' must be F32 with 1 or 16 values", NULL}, "scale shape");
    edit e8 = {.u32_key = "laguna.expert_used_count", .u32_val = 17};
    expect_fail(lag, &e8, MOE_EFORMAT, (const char *[]){"expert_used_count", NULL}, "top-k > experts");
    edit e9 = {.str_key = "laguna.rope.scaling.type", .str_val = "longrope"};
    expect_fail(lag, &e9, MOE_EUNSUPPORTED, (const char *[]){"'longrope' is not supported", NULL}, "rope scaling");
    edit e10 = {.u32_key = "laguna.block_count", .u32_val = 0xFFFFFFFFu};
    expect_fail(lag, &e10, MOE_EFORMAT, (const char *[]){"laguna.block_count = 4294967295 is out of range", NULL}, "huge count");
    edit e11 = {.drop_tensor = "token_embd.weight"};
    expect_fail(qw, &e11, MOE_EFORMAT, (const char *[]){"missing tensor 'token_embd.weight'", NULL}, "qwen3moe embedding");
    edit e12 = {.u32_key = "qwen3moe.block_count", .u32_val = 5};
    expect_fail(qw, &e12, MOE_EFORMAT, (const char *[]){"missing tensor 'blk.4.attn_norm.weight'", NULL}, "qwen3moe layers");
    edit e13 = {.drop_key = "qwen3moe.expert_feed_forward_length"};
    expect_fail(qw, &e13, MOE_EFORMAT, (const char *[]){"expert_feed_forward_length missing or < 1", NULL}, "expert width");
    later_architectures();
    return check_report("test_bind");
}
