/* test_forward.c — exactness of the forward pass on the shared tiny models
 * (and two generated here with rows and heads of odd sizes):
 * prefill == token-by-token decode, bit for bit; any chunk size, thread count,
 * ISA level and flag set gives the same logits; decode steps allocate nothing. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "moefast.h"

#define NTOK 30 /* longer than laguna-tiny's sliding window (12) */

static int32_t toks[NTOK];

/* Logits of every position: one forward call over all tokens (chunked by n_batch)
 * or, with single = 1, one call per token. */
static float *run(const char *path, const char *flags, int threads, int n_batch, int single, const char *isa) {
    char err[MOE_ERR_LEN];
    if (isa && moe_set_isa(isa, err, sizeof err) != MOE_OK) return NULL;
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags};
    if (moe_model_load(path, &lp, &m, err, sizeof err)) { fprintf(stderr, "%s\n", err); return NULL; }
    int V = moe_model_n_vocab(m);
    moe_session_params sp = {.n_ctx = 64, .n_threads = threads, .n_batch = n_batch};
    moe_session *s = NULL;
    if (moe_session_new(m, &sp, &s, err, sizeof err)) { fprintf(stderr, "%s\n", err); moe_model_free(m); return NULL; }
    float *lg = calloc((size_t)NTOK * V, sizeof(float));
    if (single) {
        /* decode steps must not allocate (after the first, which may warm up) */
        for (int i = 0; i < NTOK; i++) {
            long before = check_allocs();
            int rc = moe_session_forward(s, &toks[i], 1, lg + (size_t)i * V, false);
            CHECK_MSG(rc == MOE_OK, "%s", moe_session_error(s));
            CHECK_MSG(check_allocs() == before, "decode step %d allocated %ld times", i, check_allocs() - before);
        }
    } else {
        int rc = moe_session_forward(s, toks, NTOK, lg, true);
        CHECK_MSG(rc == MOE_OK, "%s", moe_session_error(s));
    }
    moe_session_free(s);
    moe_model_free(m);
    if (isa) moe_set_isa("auto", err, sizeof err);
    return lg;
}

static void same(const float *a, const float *b, size_t n, const char *what, const char *model) {
    CHECK_MSG(a && b, "%s: %s: run failed", model, what);
    if (!a || !b) return;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) { if (!bad) first = i; bad++; }
    CHECK_MSG(bad == 0, "%s: %s: %zu logits differ (first at %zu: %.9g vs %.9g)", model, what, bad, first,
              (double)a[first], (double)b[first]);
}

/* spec = numerics + rest ("none" / "" / "-name" ...), e.g. "+act_q8,-simd" */
static const char *spec2(char *buf, size_t len, const char *numerics, const char *rest) {
    if (!*numerics) return rest;                     /* NULL rest: the defaults */
    snprintf(buf, len, "%s%s%s", rest ? rest : "", rest ? "," : "", numerics);
    return buf;
}

/* Every exactness property, within one numerics ("" = FP32, "+act_q8"). */
static void check_model(const char *path, const char *model, const char *num, size_t n) {
    char b1[96], b2[96];
    float *ref = run(path, spec2(b1, sizeof b1, num, "none"), 1, 512, 1, NULL); /* plain path, token by token */
    float *pre = run(path, spec2(b1, sizeof b1, num, NULL), 2, 512, 0, NULL);  /* default flags, one prefill */
    char what[96];
    snprintf(what, sizeof what, "%s prefill vs decode (none vs default flags)", num);
    same(ref, pre, n, what, model);
    /* 4, 7, 10, 16: both sides of moe_matmul_rows's gemm / gemm_wide choice
     * (the level table's wide_min_tokens: 5 tokens for Q4_K, 10 for Q8_0, 16 for F32) */
    int chunks[] = {1, 4, 7, 10, 16, 64};
    for (int c = 0; c < (int)(sizeof chunks / sizeof chunks[0]); c++) {
        float *x = run(path, spec2(b1, sizeof b1, num, NULL), 2, chunks[c], 0, NULL);
        snprintf(what, sizeof what, "%s prefill chunk %d", num, chunks[c]);
        same(ref, x, n, what, model);
        free(x);
    }
    int threads[] = {1, 3, 5};
    for (int t = 0; t < 3; t++) {
        float *x = run(path, spec2(b1, sizeof b1, num, NULL), threads[t], 512, t == 1, NULL);
        snprintf(what, sizeof what, "%s %d threads", num, threads[t]);
        same(ref, x, n, what, model);
        free(x);
    }
    const char *isas[] = {"scalar", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        char err[MOE_ERR_LEN];
        if (moe_set_isa(isas[k], err, sizeof err) != MOE_OK) { fprintf(stderr, "skip ISA %s: %s\n", isas[k], err); continue; }
        moe_set_isa("auto", err, sizeof err);
        float *x = run(path, spec2(b1, sizeof b1, num, NULL), 2, 7, 0, isas[k]);
        snprintf(what, sizeof what, "%s ISA %s", num, isas[k]);
        same(ref, x, n, what, model);
        free(x);
    }
    /* every single default flag off in turn */
    for (int fi = 0; fi < moe_flag_count(); fi++) {
        const char *name; bool def, test_only;
        moe_flag_describe(fi, &name, NULL, &def, &test_only);
        if (test_only || !def) continue;
        char spec[64]; snprintf(spec, sizeof spec, "-%s", name);
        float *x = run(path, spec2(b2, sizeof b2, num, spec), 2, 7, 0, NULL);
        snprintf(what, sizeof what, "%s %s", num, spec);
        same(ref, x, n, what, model);
        free(x);
    }
    /* a perturbed run must give different logits (the comparisons above are not vacuous) */
    float *pert = run(path, spec2(b1, sizeof b1, num, "+test_perturb"), 2, 512, 0, NULL);
    if (pert && ref) {
        size_t diff = 0;
        for (size_t i = 0; i < n; i++) diff += memcmp(&pert[i], &ref[i], 4) != 0;
        CHECK_MSG(diff > 0, "%s%s: test_perturb changed nothing", model, num);
    }
    free(pert);
    free(ref);
    free(pre);
}

int main(void) {
    check_alloc_guard_install();
    /* fp32: the default numerics; extra: other numerics checked the same way
     * (act_q8 on all-Q8_0 models, on Q8_0 attention with NVFP4 experts, on
     * BF16 attention (FP32 path) with NVFP4 experts whose short rows (64, 256)
     * are partial a8 groups; kv_f16 and kv_q8 alone and with act_q8; laguna's
     * sliding window starts kv_q8 key tiles part-way) */
    static const struct { const char *file; bool fp32; const char *extra[3]; } models[] = {
        {"laguna-tiny-f32.gguf", true, {"+kv_f16", "+kv_q8", "+kv_tq_small"}},
        {"qwen3moe-tiny-q8_0.gguf", true, {"+act_q8", "+act_q8,+kv_f16", "+act_q8,+kv_q8"}},
        {"laguna-tiny-bf16-nvfp4.gguf", true, {"+act_q8", NULL}},
        {"qwen3moe-tiny-q8_0-nvfp4-scale2.gguf", true, {"+act_q8", NULL}},
        {"qwen3moe-tiny-q4_k.gguf", true, {"+act_q8", NULL}},
        {"laguna-tiny-q8_0.gguf", false, {"+act_q8", "+act_q8,+kv_q8"}},
        /* the later architectures: adjacent-pair RoPE (llama), whole-row
         * QK-norm (olmoe), attention biases and a gated shared expert (qwen2moe) */
        {"mixtral-tiny-q8_0.gguf", true, {"+act_q8,+kv_q8", NULL}},
        {"olmoe-tiny-q8_0.gguf", true, {"+act_q8,+kv_f16", NULL}},
        {"qwen2moe-tiny-q8_0.gguf", true, {"+act_q8", "+kv_q8", NULL}},
        /* MLA (per-head Wk_b / Wv_b products inside the attention items, the
         * latent cache read as keys and values) and group-limited routing */
        {"deepseek2-tiny-q8_0.gguf", true, {"+act_q8,+kv_f16", "+kv_f16", NULL}},
        /* glm4moe: partial RoPE, per-head q/k norm with biases, a dense lead, an unrun MTP block */
        {"glm4moe-tiny-q8_0.gguf", true, {"+act_q8,+kv_f16", NULL}},
        /* gpt-oss: attention sinks (in each KV format), expert and router
         * biases, the clamped SwiGLU, sliding even layers; MXFP4 experts */
        {"gpt-oss-tiny-q8_0.gguf", true, {"+act_q8,+kv_q8", "+kv_f16", "+kv_tq"}},
        {"gpt-oss-tiny-bf16-mxfp4.gguf", true, {"+act_q8", NULL}},
    };
    /* Generated here: shapes the shared files do not have but users' files
     * may. 5 query heads of 18 dims on one KV head: Q/O rows of 90 values
     * (the x4 layout needs a multiple of 32, so the plain kernels with their
     * tails; 90 rows are not whole 8-row thread shares either), an odd
     * query group (G = 5) and a head size that is not a multiple of 16 (the
     * attention kernels' tail paths). laguna: BF16 attention and dense FFN,
     * Q8_0 experts (act_q8 where the rows allow it). kv_q8 needs heads of a
     * multiple of 32 and is refused for them (checked below). */
    static const struct { const char *arch, *file; const char *ov[7]; const char *extra[3]; } gens[] = {
        {"qwen3moe", "qwen3moe-odd-f32.gguf", {"head_dim=18", "n_head=5", "n_head_kv=1", "n_layer=2", "type=F32", NULL},
         {"+kv_f16", NULL}},
        {"laguna", "laguna-odd-bf16-q8_0.gguf",
         {"head_dim=18", "n_head=5", "n_head_kv=1", "type=BF16", "type_experts=Q8_0", NULL}, {"+act_q8", "+act_q8,+kv_f16", NULL}},
    };
    char gdir[] = "/tmp/moefast-test-forward-XXXXXX";
    CHECK_MSG(mkdtemp(gdir) != NULL, "mkdtemp failed");
    for (int i = 0; i < NTOK; i++) toks[i] = (int32_t)((i * 7919 + 13) % 997);
    char path[512];
    int ran = 0;
    const size_t n_shared = sizeof models / sizeof models[0], n_gen = sizeof gens / sizeof gens[0];
    for (size_t mi = 0; mi < n_shared + n_gen; mi++) {
        const bool gen = mi >= n_shared;
        const char *file = gen ? gens[mi - n_shared].file : models[mi].file;
        const bool fp32 = gen || models[mi].fp32;
        const char *const *extra = gen ? gens[mi - n_shared].extra : models[mi].extra;
        if (gen) {
            char err[MOE_ERR_LEN];
            snprintf(path, sizeof path, "%s/%s", gdir, file);
            int rc = moe_gen_model(gens[mi - n_shared].arch, "tiny", gens[mi - n_shared].ov, path, err, sizeof err);
            CHECK_MSG(rc == MOE_OK, "gen %s: %s", file, err);
            if (rc) continue;
            /* kv_q8 refused with a message naming the head size */
            moe_model *m = NULL;
            moe_load_params lp = {.flags = "+kv_q8"};
            rc = moe_model_load(path, &lp, &m, err, sizeof err);
            moe_session *sq = NULL;
            if (rc == MOE_OK) {
                moe_session_params sp = {.n_ctx = 64, .n_threads = 1};
                rc = moe_session_new(m, &sp, &sq, err, sizeof err);
                moe_session_free(sq);
                moe_model_free(m);
            }
            CHECK_MSG(rc != MOE_OK && strstr(err, "head_dim 18"), "%s: kv_q8 not refused (%d: %s)", file, rc, err);
        } else {
            char rel[128];
            snprintf(rel, sizeof rel, "oracle/%s", file);
            const char *p = check_ref(rel);
            if (!p) continue;
            snprintf(path, sizeof path, "%s", p);
            ran++;
        }
        size_t n = 0;
        {
            char err[MOE_ERR_LEN]; moe_model *m = NULL;
            if (moe_model_load(path, NULL, &m, err, sizeof err) == MOE_OK) { n = (size_t)NTOK * moe_model_n_vocab(m); moe_model_free(m); }
        }
        CHECK_MSG(n > 0, "cannot load %s", path);
        if (!n) continue;
        if (fp32) check_model(path, file, "", n);
        for (int x = 0; x < 3 && extra[x]; x++) {
            const char *num = extra[x];
            check_model(path, file, num, n);
            /* the numerics really differ (the flag is not silently off) */
            char spec[64];
            snprintf(spec, sizeof spec, "none,%s", num);
            float *a = run(path, "none", 1, 512, 0, NULL), *b = run(path, spec, 1, 512, 0, NULL);
            if (a && b) {
                size_t diff = 0;
                for (size_t i = 0; i < n; i++) diff += memcmp(&a[i], &b[i], 4) != 0;
                CHECK_MSG(diff > n / 2, "%s: %s changed only %zu of %zu logits", file, num, diff, n);
            }
            free(a);
            free(b);
        }
        if (gen) remove(path);
    }
    rmdir(gdir);
    CHECK_MSG(ran > 0, "no reference models found (check_ref)");
    return check_report("test_forward");
}
