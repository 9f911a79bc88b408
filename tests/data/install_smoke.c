/* install_smoke.c — a program built by tests/cli_install.sh against an
 * installed moefast (pkg-config moefast), dynamically and statically. It
 * loads a model, prefills the given ids, decodes greedily and prints, per
 * step, the top 8 logits in the exact text of a trace's "topk" rows
 * (moefast trace record), then an FNV-1a hash of every logit's bits. The test
 * compares the rows with the installed CLI's trace and the two builds'
 * outputs with each other.
 *
 * usage: install_smoke MODEL STEPS ID [ID ...]   exit 0 ok, 1 failure */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <moefast.h>

#define TOPK 8

/* The trace's float text: the shortest %.Ng that reads back as v. */
static void fmt_float(char *buf, size_t len, float v) {
    if (v == 0.0f) { snprintf(buf, len, signbit(v) ? "-0.0" : "0"); return; }
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, len, "%.*g", prec, (double)v);
        float back = (float)strtod(buf, NULL);
        if (memcmp(&back, &v, sizeof v) == 0) return;
    }
    snprintf(buf, len, "%.9g", (double)v);
}

static int run(const char *path, int steps, const int32_t *prompt, int n_prompt) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_session *s = NULL;
    float *logits = NULL;
    int rc = 1;
    if (moe_model_load(path, NULL, &m, err, sizeof err) != MOE_OK) { fprintf(stderr, "%s\n", err); return 1; }
    const int n_vocab = moe_model_n_vocab(m);
    moe_session_params sp = {.n_ctx = n_prompt + steps, .n_threads = 0, .n_batch = 0};
    if (moe_session_new(m, &sp, &s, err, sizeof err) != MOE_OK) { fprintf(stderr, "%s\n", err); goto out; }
    logits = malloc((size_t)n_vocab * sizeof *logits);
    if (!logits) { fprintf(stderr, "out of memory\n"); goto out; }
    uint64_t h = 1469598103934665603ull;
    if (moe_session_forward(s, prompt, n_prompt, logits, false) != MOE_OK) goto fwd_fail;
    for (int step = 0; step < steps; step++) {
        int32_t ids[TOPK];
        float vals[TOPK];
        char b[48];
        for (int v = 0; v < n_vocab; v++) {
            if (!isfinite(logits[v])) { fprintf(stderr, "step %d: logit %d is not finite\n", step, v); goto out; }
            uint32_t bits;
            memcpy(&bits, &logits[v], sizeof bits);
            for (int k = 0; k < 4; k++) h = (h ^ ((bits >> (8 * k)) & 0xff)) * 1099511628211ull;
        }
        int n = moe_topk(logits, n_vocab, TOPK, ids, vals);
        printf("[");
        for (int j = 0; j < n; j++) {
            fmt_float(b, sizeof b, vals[j]);
            printf("%s[%d, %s]", j ? ", " : "", (int)ids[j], b);
        }
        printf("]\n");
        if (step + 1 == steps) break;
        int32_t next = moe_argmax(logits, n_vocab);
        if (moe_session_forward(s, &next, 1, logits, false) != MOE_OK) goto fwd_fail;
    }
    printf("logits fnv1a %016llx\n", (unsigned long long)h);
    rc = 0;
    goto out;
fwd_fail:
    fprintf(stderr, "forward: %s\n", moe_session_error(s));
out:
    free(logits);
    moe_session_free(s);
    moe_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: install_smoke MODEL STEPS ID [ID ...]\n"); return 1; }
    int steps = atoi(argv[2]), n = argc - 3;
    int32_t prompt[64];
    if (steps < 1 || n > 64) { fprintf(stderr, "install_smoke: 1..64 ids, steps >= 1\n"); return 1; }
    for (int i = 0; i < n; i++) prompt[i] = (int32_t)atoi(argv[3 + i]);
    return run(argv[1], steps, prompt, n);
}
