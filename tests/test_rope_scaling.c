/* test_rope_scaling.c — RoPE scaling asked for at load (moe_load_params:
 * rope_scaling, rope_scale, yarn_orig_ctx; the CLI's --rope-scaling yarn
 * --rope-scale F --yarn-orig-ctx N, as llama.cpp names them).
 *
 * The override must give exactly what a file carrying the same YaRN keys
 * gives: a laguna file written without YaRN, loaded with yarn x32 over 512
 * positions, has the logits, bit for bit, of the file written with them; a
 * YaRN file loaded with "none" those of the file without. Then: a factor
 * override on a YaRN file equals the file written with that factor; the
 * reach moe_model_ctx_limit reports follows the override; architectures
 * whose files never carry YaRN (qwen3moe) take it and change their logits;
 * every bad combination is refused with a message naming the field. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "moefast.h"

#define NTOK 24

static char dir[] = "/tmp/moefast-test-rope-XXXXXX";

static const char *gen(const char *arch, const char *name, const char *const *ov) {
    static char paths[8][512];
    static int n;
    char *p = paths[n++ % 8], err[MOE_ERR_LEN];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    int rc = moe_gen_model(arch, "tiny", ov, p, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "gen %s: %s", name, err);
    return p;
}

/* Every position's logits of NTOK tokens (NULL after a failure, printed). */
static float *logits(const char *path, const moe_load_params *lp, int *V) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    int rc = moe_model_load(path, lp, &m, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s: %s", path, err);
    if (rc) return NULL;
    *V = moe_model_n_vocab(m);
    moe_session_params sp = {.n_ctx = 64, .n_threads = 2};
    moe_session *s = NULL;
    float *lg = NULL;
    if (moe_session_new(m, &sp, &s, err, sizeof err) == MOE_OK && (lg = calloc((size_t)NTOK * (size_t)*V, 4))) {
        int32_t toks[NTOK];
        for (int i = 0; i < NTOK; i++) toks[i] = (int32_t)((i * 7919 + 13) % 997);
        rc = moe_session_forward(s, toks, NTOK, lg, true);
        CHECK_MSG(rc == MOE_OK, "%s: %s", path, moe_session_error(s));
        if (rc) { free(lg); lg = NULL; }
    }
    moe_session_free(s);
    moe_model_free(m);
    return lg;
}

/* Number of logits whose bits differ (SIZE_MAX when a run failed). */
static size_t n_diff(const float *a, const float *b, int V) {
    if (!a || !b) return (size_t)-1;
    size_t d = 0;
    for (size_t i = 0; i < (size_t)NTOK * (size_t)V; i++) d += memcmp(a + i, b + i, 4) != 0;
    return d;
}

static void expect_same(const char *what, float *a, float *b, int V) {
    const size_t d = n_diff(a, b, V);
    CHECK_MSG(d == 0, "%s: %zu logits differ", what, d);
    free(a);
    free(b);
}

static void expect_changed(const char *what, float *a, float *b, int V) {
    const size_t d = n_diff(a, b, V);
    CHECK_MSG(d != (size_t)-1 && d > (size_t)NTOK * (size_t)V / 2, "%s: only %zu of %d logits changed", what, d, NTOK * V);
    free(a);
    free(b);
}

/* A load that must fail with a message containing want. */
static void refused(const char *path, moe_load_params lp, const char *want) {
    char err[MOE_ERR_LEN] = "";
    moe_model *m = NULL;
    int rc = moe_model_load(path, &lp, &m, err, sizeof err);
    CHECK_MSG(rc != MOE_OK && m == NULL, "%s: load with a bad override succeeded (want '%s')", path, want);
    CHECK_STR_CONTAINS(err, want);
    moe_model_free(m);
}

static int reach(const char *path, moe_load_params lp) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    if (moe_model_load(path, &lp, &m, err, sizeof err)) { CHECK_MSG(0, "%s: %s", path, err); return -1; }
    int yarn = 0;
    moe_model_ctx_limit(m, &yarn);
    moe_model_free(m);
    return yarn;
}

int main(void) {
    CHECK_MSG(mkdtemp(dir) != NULL, "mkdtemp failed");
    /* laguna: YaRN on its full layers; beta_fast 64 written, which is also
     * the default laguna takes when the key is absent (the override's case) */
    const char *ov_none[] = {"rope_scaling=none", NULL};
    const char *ov_yarn[] = {"rope_scaling=yarn", "yarn_factor=32", "yarn_orig_ctx=512", "yarn_beta_fast=64", NULL};
    const char *ov_yarn8[] = {"rope_scaling=yarn", "yarn_factor=8", "yarn_orig_ctx=512", "yarn_beta_fast=64", NULL};
    const char *plain = gen("laguna", "laguna-none.gguf", ov_none);
    const char *yarn = gen("laguna", "laguna-yarn32.gguf", ov_yarn);
    const char *yarn8 = gen("laguna", "laguna-yarn8.gguf", ov_yarn8);
    int V = 0;
    const moe_load_params file = {0};
    const moe_load_params to_yarn = {.rope_scaling = "yarn", .rope_scale = 32, .yarn_orig_ctx = 512};
    const moe_load_params to_none = {.rope_scaling = "none"};
    const moe_load_params factor8 = {.rope_scale = 8};

    expect_same("no-YaRN file + yarn x32/512 == the YaRN file", logits(plain, &to_yarn, &V), logits(yarn, &file, &V), V);
    expect_same("YaRN file + none == the no-YaRN file", logits(yarn, &to_none, &V), logits(plain, &file, &V), V);
    expect_same("YaRN x32 file + rope_scale 8 == the x8 file", logits(yarn, &factor8, &V), logits(yarn8, &file, &V), V);
    expect_same("'yarn' on a YaRN file, no numbers: the file's", logits(yarn, &(moe_load_params){.rope_scaling = "yarn"}, &V),
                logits(yarn, &file, &V), V);
    /* not vacuous: the scaling moves the logits */
    expect_changed("no-YaRN file vs + yarn", logits(plain, &file, &V), logits(plain, &to_yarn, &V), V);
    expect_changed("yarn x32 vs x8", logits(yarn, &file, &V), logits(yarn8, &file, &V), V);
    /* an original context of its own */
    expect_changed("yarn_orig_ctx 128 vs the file's 512", logits(yarn, &(moe_load_params){.yarn_orig_ctx = 128}, &V),
                   logits(yarn, &file, &V), V);

    /* the reach follows the override: original context x factor */
    CHECK_EQ_INT(reach(plain, file), 0);
    CHECK_EQ_INT(reach(plain, to_yarn), 512 * 32);
    CHECK_EQ_INT(reach(yarn, file), 512 * 32);
    CHECK_EQ_INT(reach(yarn, to_none), 0);
    CHECK_EQ_INT(reach(yarn, factor8), 512 * 8);

    /* qwen3moe (its files carry no YaRN; Qwen3's card asks for factor 4 over
     * 32768): original context defaults to the trained one */
    const char *qwen = gen("qwen3moe", "qwen3moe.gguf", NULL);
    const moe_load_params q4 = {.rope_scaling = "yarn", .rope_scale = 4};
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    if (moe_model_load(qwen, &file, &m, err, sizeof err) == MOE_OK) {
        CHECK_EQ_INT(reach(qwen, q4), 4 * moe_model_n_ctx_train(m));
        moe_model_free(m);
    } else CHECK_MSG(0, "%s", err);
    expect_changed("qwen3moe + yarn x4", logits(qwen, &file, &V), logits(qwen, &q4, &V), V);
    /* gpt-oss: YaRN on both tables (full and sliding) */
    const char *oss = gen("gpt-oss", "gpt-oss.gguf", NULL);
    expect_changed("gpt-oss + none", logits(oss, &file, &V), logits(oss, &to_none, &V), V);

    /* refusals, each naming what is wrong */
    refused(plain, (moe_load_params){.rope_scaling = "linear"}, "rope_scaling 'linear' is not supported");
    refused(plain, (moe_load_params){.rope_scaling = "yarn"}, "needs rope_scale");
    refused(plain, (moe_load_params){.rope_scale = 4}, "the file has no YaRN");
    refused(plain, (moe_load_params){.yarn_orig_ctx = 4096}, "the file has no YaRN");
    refused(yarn, (moe_load_params){.rope_scale = 0.5f}, "rope_scale 0.5 must be in [1, 1e6]");
    refused(yarn, (moe_load_params){.rope_scale = NAN}, "rope_scale nan");
    refused(yarn, (moe_load_params){.rope_scale = INFINITY}, "rope_scale inf");
    refused(yarn, (moe_load_params){.yarn_orig_ctx = -1}, "yarn_orig_ctx -1 must be > 0");
    refused(yarn, (moe_load_params){.rope_scaling = "none", .rope_scale = 4}, "given with rope_scaling none");
    /* vocab-only loads ignore it (no positions) */
    const moe_load_params vo = {.vocab_only = true, .rope_scaling = "yarn", .rope_scale = 4};
    m = NULL;
    CHECK(moe_model_load(plain, &vo, &m, err, sizeof err) == MOE_OK);
    moe_model_free(m);

    const char *names[] = {"laguna-none.gguf", "laguna-yarn32.gguf", "laguna-yarn8.gguf", "qwen3moe.gguf", "gpt-oss.gguf"};
    char p[600];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    return check_report("test_rope_scaling");
}
