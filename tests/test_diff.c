/* test_diff.c — differential mode: with every optimisation on, each forward is
 * recomputed with all flags off and must agree bit for bit; a perturbing
 * test flag is caught and named by layer and tensor. */
#include <stdint.h>

#include "check.h"
#include "moefast.h"

static int run(const char *path, const char *flags, int n_batch, char *msg, size_t msglen) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags, .diff = true};
    if (moe_model_load(path, &lp, &m, err, sizeof err)) { snprintf(msg, msglen, "%s", err); return -100; }
    moe_session_params sp = {.n_ctx = 64, .n_threads = 2, .n_batch = n_batch};
    moe_session *s = NULL;
    if (moe_session_new(m, &sp, &s, err, sizeof err)) { snprintf(msg, msglen, "%s", err); moe_model_free(m); return -101; }
    int32_t toks[30];
    for (int i = 0; i < 30; i++) toks[i] = (int32_t)((i * 7919 + 13) % 997);
    float *lg = malloc(sizeof(float) * 30 * (size_t)moe_model_n_vocab(m));
    int rc = moe_session_forward(s, toks, 24, lg, true);               /* prefill in chunks */
    for (int i = 24; i < 30 && rc == MOE_OK; i++) rc = moe_session_forward(s, &toks[i], 1, lg, false); /* decode */
    snprintf(msg, msglen, "%s", moe_session_error(s));
    free(lg);
    moe_session_free(s);
    moe_model_free(m);
    return rc;
}

int main(void) {
    const char *models[] = {"laguna-tiny-bf16-nvfp4.gguf", "qwen3moe-tiny-q4_k.gguf"}; /* NVFP4 experts: a8 under act_q8 */
    char rel[128], msg[MOE_ERR_LEN];
    int ran = 0;
    for (int i = 0; i < 2; i++) {
        snprintf(rel, sizeof rel, "oracle/%s", models[i]);
        const char *path = check_ref(rel);
        if (!path) continue;
        ran++;
        int rc = run(path, "all", 7, msg, sizeof msg);
        CHECK_MSG(rc == MOE_OK, "%s: all flags vs none diverged: %s", models[i], msg);
        rc = run(path, "+test_perturb", 512, msg, sizeof msg);
        CHECK_MSG(rc == MOE_EDIVERGE, "%s: test_perturb not caught (rc %d)", models[i], rc);
        CHECK_STR_CONTAINS(msg, "layer 3 ffn output differs at position 20");
        CHECK_STR_CONTAINS(msg, "with flags none");
        /* within a numerics: the twin keeps the numerics flags and drops the rest */
        rc = run(path, "all,+act_q8,+kv_f16", 7, msg, sizeof msg);
        CHECK_MSG(rc == MOE_OK, "%s: all flags vs none within act_q8,kv_f16 diverged: %s", models[i], msg);
        rc = run(path, "+act_q8,+kv_f16,+test_perturb", 512, msg, sizeof msg);
        CHECK_MSG(rc == MOE_EDIVERGE, "%s: test_perturb not caught under act_q8 (rc %d)", models[i], rc);
        CHECK_STR_CONTAINS(msg, "with flags +act_q8,+kv_f16");
        /* kv_q8: the twin's scalar kernels and single thread give the same bits */
        rc = run(path, "all,+kv_q8", 7, msg, sizeof msg);
        CHECK_MSG(rc == MOE_OK, "%s: all flags vs none within kv_q8 diverged: %s", models[i], msg);
    }
    CHECK_MSG(ran > 0, "no shared models");
    return check_report("test_diff");
}
