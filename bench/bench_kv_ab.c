/* bench_kv_ab.c — paired timing of KV cache formats, prefill or decode at
 * depth (issue: TurboQuant KV cache; docs/KV_TQ.md). `moefast bench --ab`
 * pairs decode steps of two configurations after four prefills (a warm-up
 * and a seed each); this times two or three formats on sibling sessions
 * (the same model and worker pool, each its own KV cache):
 *   prefill: N rounds; in each, every session prefills the same P
 *            pseudo-random ids on an empty cache, in an order rotated per
 *            round (after one untimed warm-up prefill each);
 *   decode:  every session prefills P ids once (untimed), then N steps; in
 *            each, every session forwards the same next id, in the rotated
 *            order: a decode step at depth P .. P+N-1.
 * Reports each session's median and, for each session against the last one,
 * the ratio of the medians with a percentile-bootstrap 95 % interval over the
 * rounds (rounds resampled whole); and the attention phases (prep: QK-norm,
 * RoPE, the cache store; attention: scores, softmax, value sum) per round from
 * the phase profile. Not a test: a measurement. BENCH_THREADS (default 2).
 *
 *   bench_kv_ab MODEL prefill|decode P N FLAGS_A SPEC_B [SPEC_C]
 *   e.g. bench_kv_ab m.gguf prefill 4096 6 +kv_q8 -kv_q8,+kv_tq
 *        bench_kv_ab m.gguf decode 16384 24 default +kv_q8 +kv_tq   (B, C: A changed by the spec) */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moefast.h"
#include "moefast/lab.h"
#include "bench_util.h"

#define RESAMPLES 2000
#define MAX_PHASES 32
#define MAX_S 3

static double median(const double *v, int n) {
    double t[n];
    memcpy(t, v, (size_t)n * sizeof *v);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Forward of ids[0..n) (after truncating the cache to pos); seconds, -1 on error. */
static double timed_forward(moe_session *s, int pos, const int32_t *ids, int n) {
    moe_session_truncate(s, pos);
    const double t0 = now_s();
    if (moe_session_forward(s, ids, n, NULL, false) != MOE_OK) {
        fprintf(stderr, "bench_kv_ab: %s\n", moe_session_error(s));
        return -1;
    }
    return now_s() - t0;
}

/* Seconds of the named phase per round, from s's profile over n rounds. */
static double phase_s(const moe_session *s, const char *name, int n) {
    moe_phase_stat st[MAX_PHASES];
    const int k = moe_session_profile_read(s, st, MAX_PHASES);
    for (int i = 0; i < k && i < MAX_PHASES; i++)
        if (!strcmp(st[i].name, name)) return st[i].seconds / n;
    return 0;
}

/* The ratio median(a) / median(b) and its bootstrap interval. */
static void ratio_ci(const double *a, const double *b, int n, double ci[2]) {
    double boot[RESAMPLES], ta[n], tb[n];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int k = 0; k < RESAMPLES; k++) {
        for (int i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            const int j = (int)(x % (uint64_t)n);
            ta[i] = a[j], tb[i] = b[j];
        }
        boot[k] = median(ta, n) / median(tb, n);
    }
    qsort(boot, RESAMPLES, sizeof *boot, cmp_double);
    ci[0] = boot[RESAMPLES / 40], ci[1] = boot[RESAMPLES - RESAMPLES / 40 - 1];
}

int main(int argc, char **argv) {
    if (argc < 7 || (strcmp(argv[2], "prefill") && strcmp(argv[2], "decode"))) {
        fprintf(stderr, "usage: bench_kv_ab MODEL prefill|decode P N FLAGS_A SPEC_B [SPEC_C]\n");
        return 2;
    }
    const bool dec = !strcmp(argv[2], "decode");
    const int P = atoi(argv[3]), n = atoi(argv[4]), ns = argc > 7 ? 3 : 2;
    const char *th = getenv("BENCH_THREADS");
    const int threads = th ? atoi(th) : 2;
    if (P < 1 || n < 1 || n > 10000 || threads < 1) { fprintf(stderr, "bench_kv_ab: bad P, N or BENCH_THREADS\n"); return 2; }
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_session *s[MAX_S] = {0};
    const moe_session_params sp = {.n_ctx = P + (dec ? n : 0), .n_threads = threads, .n_batch = 0};
    if (moe_model_load(argv[1], &(moe_load_params){.flags = argv[5]}, &m, err, sizeof err) != MOE_OK ||
        moe_session_new(m, &sp, &s[0], err, sizeof err) != MOE_OK) {
        fprintf(stderr, "bench_kv_ab: %s\n", err);
        return 2;
    }
    for (int k = 1; k < ns; k++)
        if (moe_session_new_sibling(s[0], argv[5 + k], &s[k], err, sizeof err) != MOE_OK) {
            fprintf(stderr, "bench_kv_ab: %s: %s\n", argv[5 + k], err);
            return 2;
        }
    const int n_ids = P + (dec ? n : 0);
    int32_t *ids = malloc((size_t)n_ids * sizeof *ids);
    double *t = malloc((size_t)ns * (size_t)n * sizeof *t);
    const int V = moe_model_n_vocab(m);
    uint64_t x = 0x6d6f65666173744bull;
    for (int i = 0; i < n_ids; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, ids[i] = (int32_t)(x % (uint64_t)V);
    int rc = 0;
    for (int k = 0; k < ns && !rc; k++) {             /* warm-up (prefill) or the depth (decode), untimed */
        const double ts = timed_forward(s[k], 0, ids, P);
        rc = ts < 0;
        fprintf(stderr, "session %d: untimed prefill of %d: %.1f s\n", k, P, ts);
        moe_session_profile_enable(s[k], true);
    }
    for (int i = 0; i < n && !rc; i++)
        for (int o = 0; o < ns && !rc; o++) {
            const int k = (i + o) % ns;               /* rotated order */
            const double dt = dec ? timed_forward(s[k], P + i, ids + P + i, 1) : timed_forward(s[k], 0, ids, P);
            rc = dt < 0;
            t[k * n + i] = dt;
        }
    if (!rc) {
        printf("%s: %s %d%s, %d rounds, %d threads; A = %s", argv[1], dec ? "decode at depth" : "prefill of", P,
               dec ? "" : " tokens", n, threads, argv[5]);
        for (int k = 1; k < ns; k++) printf(", %c = A %s", 'A' + k, argv[5 + k]);
        printf("\n");
        for (int k = 0; k < ns; k++) {
            const double md = median(t + k * n, n);
            printf("  %c: median %.2f ms%s  attn_prep %.2f ms  attention %.2f ms per %s\n", 'A' + k, 1e3 * md,
                   dec ? "/step" : "", 1e3 * phase_s(s[k], "attn_prep", n), 1e3 * phase_s(s[k], "attention", n),
                   dec ? "step" : "prefill");
        }
        for (int k = 0; k + 1 < ns; k++) {
            double ci[2];
            ratio_ci(t + k * n, t + (ns - 1) * n, n, ci);
            printf("  %c/%c = %.3f [%.3f, %.3f]  (> 1: %c faster)\n", 'A' + k, 'A' + ns - 1,
                   median(t + k * n, n) / median(t + (ns - 1) * n, n), ci[0], ci[1], 'A' + ns - 1);
        }
    }
    free(ids), free(t);
    for (int k = ns - 1; k >= 0; k--) moe_session_free(s[k]);
    moe_model_free(m);
    return rc;
}
