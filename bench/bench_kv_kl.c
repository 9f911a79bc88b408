/* bench_kv_kl.c — what a lossy KV cache does to the next-token distribution
 * (issue: TurboQuant KV cache; docs/KV_TQ.md): along one long teacher-forced
 * token sequence, every step's softmax with the KV cache format under test
 * against the FP32 cache's: the KL divergence KL(P_fp32 || P_format) (mean,
 * p99, max over the steps) and how often the argmax agrees on the steps whose
 * FP32 top-1 margin is clear (> 1 logit). Not a test: a measurement.
 *
 *   bench_kv_kl MODEL [TOKENS=2048] [SPECS="+kv_f16 +kv_q8 +kv_tq +kv_tq_small"]
 *
 * The sequence is seeded pseudo-random token ids (the same for every format),
 * fed in chunks of 128 tokens with every logit wanted; both sessions advance
 * in lockstep, so memory stays at two chunks of logits. A random-weight model
 * made by `moefast gen ... key_outliers=F head_peak=P embd_scale=S` has keys
 * with outlier channels and peaked logits, as trained models do. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moefast.h"
#include "bench_util.h"

#define CHUNK 128

/* log-softmax normaliser of logits l[V]: max + log(sum exp(l - max)), in double */
static double log_norm(const float *l, int V) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < V; i++) s += exp((double)l[i] - mx);
    return mx + log(s);
}

static double kl(const float *p, const float *q, int V) {
    const double zp = log_norm(p, V), zq = log_norm(q, V);
    double k = 0;
    for (int i = 0; i < V; i++) {
        const double lp = (double)p[i] - zp, lq = (double)q[i] - zq;
        k += exp(lp) * (lp - lq);
    }
    return k > 0 ? k : 0;   /* rounding can give -1e-17 */
}

static void top2(const float *l, int V, int *arg, double *margin) {
    int a = 0;
    for (int i = 1; i < V; i++) a = l[i] > l[a] ? i : a;
    double second = -INFINITY;
    for (int i = 0; i < V; i++)
        if (i != a && l[i] > second) second = l[i];
    *arg = a, *margin = (double)l[a] - second;
}

static moe_session *open_session(const char *path, const char *flags, int n_ctx, moe_model **m) {
    char err[MOE_ERR_LEN];
    moe_load_params lp = {.flags = flags};
    if (moe_model_load(path, &lp, m, err, sizeof err)) { fprintf(stderr, "bench_kv_kl: %s\n", err); return NULL; }
    moe_session_params sp = {.n_ctx = n_ctx, .n_batch = CHUNK};
    moe_session *s = NULL;
    if (moe_session_new(*m, &sp, &s, err, sizeof err)) {
        fprintf(stderr, "bench_kv_kl: %s: %s\n", flags, err);
        moe_model_free(*m), *m = NULL;
    }
    return s;
}

/* One format against FP32 along toks[0..n): prints its row. */
static int measure(const char *path, const char *spec, const int32_t *toks, int n) {
    moe_model *mr = NULL, *mt = NULL;
    moe_session *ref = open_session(path, "default", n + 1, &mr);
    moe_session *tst = ref ? open_session(path, spec, n + 1, &mt) : NULL;
    if (!ref || !tst) { moe_session_free(ref), moe_model_free(mr); return 1; }
    const int V = moe_model_n_vocab(mr);
    float *lr = malloc((size_t)CHUNK * V * sizeof(float)), *lt = malloc((size_t)CHUNK * V * sizeof(float));
    double *kls = malloc((size_t)n * sizeof(double));
    int clear = 0, agree = 0, all_agree = 0, rc = 0;
    for (int done = 0; done < n && !rc; done += CHUNK) {
        const int c = n - done < CHUNK ? n - done : CHUNK;
        if (moe_session_forward(ref, toks + done, c, lr, true) || moe_session_forward(tst, toks + done, c, lt, true)) {
            fprintf(stderr, "bench_kv_kl: forward: %s / %s\n", moe_session_error(ref), moe_session_error(tst));
            rc = 1;
            break;
        }
        for (int i = 0; i < c; i++) {
            const float *p = lr + (size_t)i * V, *q = lt + (size_t)i * V;
            kls[done + i] = kl(p, q, V);
            int ap, aq;
            double mp, mq;
            top2(p, V, &ap, &mp);
            top2(q, V, &aq, &mq);
            all_agree += ap == aq;
            if (mp > 1.0) clear++, agree += ap == aq;
        }
    }
    if (!rc) {
        double mean = 0;
        for (int i = 0; i < n; i++) mean += kls[i];
        mean /= n;
        qsort(kls, (size_t)n, sizeof *kls, cmp_double);
        const double p99 = kls[(size_t)((n - 1) * 0.99)], mx = kls[n - 1];
        printf("%-16s %12.3e %12.3e %12.3e   %5d/%-5d (%.1f %%)   %5d/%d\n", spec, mean, p99, mx, agree, clear,
               clear ? 100.0 * agree / clear : 0.0, all_agree, n);
        fflush(stdout);
    }
    free(lr), free(lt), free(kls);
    moe_session_free(ref), moe_session_free(tst);
    moe_model_free(mr), moe_model_free(mt);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_kv_kl MODEL [TOKENS=2048] [SPECS=\"+kv_f16 +kv_q8 +kv_tq +kv_tq_small\"]\n");
        return 2;
    }
    const int n = argc > 2 ? atoi(argv[2]) : 2048;
    const char *specs = argc > 3 ? argv[3] : "+kv_f16 +kv_q8 +kv_tq +kv_tq_small";
    if (n < 2 || n > 1 << 20) { fprintf(stderr, "bench_kv_kl: TOKENS must be in 2..1048576\n"); return 2; }
    moe_model *m = NULL;
    char err[MOE_ERR_LEN];
    if (moe_model_load(argv[1], &(moe_load_params){.vocab_only = true}, &m, err, sizeof err)) {
        fprintf(stderr, "bench_kv_kl: %s\n", err);
        return 2;
    }
    const int V = moe_model_n_vocab(m);
    moe_model_free(m);
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    uint64_t st = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < n; i++) {
        st ^= st << 13, st ^= st >> 7, st ^= st << 17;
        toks[i] = (int32_t)(st % (uint64_t)(V > 256 ? V - 1 : V)) + (V > 256);
    }
    printf("%s: %d teacher-forced tokens (seeded pseudo-random ids), every step against the FP32 cache\n", argv[1], n);
    printf("%-16s %12s %12s %12s   %-22s %s\n", "flags", "KL mean", "KL p99", "KL max", "argmax, margin > 1",
           "argmax, all");
    int rc = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", specs);
    for (char *sp = strtok(buf, " "); sp; sp = strtok(NULL, " ")) rc |= measure(argv[1], sp, toks, n);
    free(toks);
    return rc;
}
