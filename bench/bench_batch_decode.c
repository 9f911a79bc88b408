/* bench_batch_decode.c — what a batched decode step costs against a step of
 * one sequence (the serving target of issue #23: aggregate decode throughput
 * at 4 concurrent sequences against one), without a server, a load generator
 * or prefill chunks in the steps: only decode steps, all at the same depth.
 *
 * One context with 8 sequences, each prefilled with its own P-token prompt.
 * A round runs, for every batch size N of 1, 2, 4, 8 (in an order rotated
 * per round, so no size always runs first), one greedy decode step
 * (moe_context_decode_topk, k 1: what serve's greedy steps call) of
 * sequences 0..N-1, and truncates them back to P: every step sees the same
 * depth and the same first N sequences. Per N: the median step (ms), the
 * aggregate tokens/s, and the throughput ratio against N = 1 as the median
 * over rounds of N x t(1) / t(N) within the round, with the 10th-90th
 * percentile of those per-round ratios as its spread; then the phase profile
 * per step (ms, weight MB, GB/s), so the phases whose time grows faster than
 * their bytes show.
 *
 *   bench_batch_decode MODEL [ROUNDS [P [FLAGS]]]
 * defaults: 24 rounds, P 64, flags "default"; 2 threads. Timing only: never
 * part of the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moefast.h"
#include "bench_util.h"

enum { MAX_SEQ = 8, N_SIZES = 4, MAX_PHASES = 64 };
static const int SIZES[N_SIZES] = {1, 2, 4, 8};

typedef struct {
    moe_phase_stat ph[MAX_PHASES];
    int n_ph;
} profile;

static double pct(double *v, int n, double q) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    const int i = (int)(q * (n - 1) + 0.5);
    return v[i];
}

/* One step of sequences 0..ns-1 at depth P, truncated back after. Returns its
 * seconds, or -1 on error; prof (when not NULL) gets the step's phases. */
static double step(moe_context *c, int ns, int P, const int32_t *next, profile *prof) {
    int32_t tok[MAX_SEQ], seq[MAX_SEQ], ids[MAX_SEQ];
    float vals[MAX_SEQ];
    bool want[MAX_SEQ];
    for (int s = 0; s < ns; s++) tok[s] = next[s], seq[s] = s, want[s] = true;
    const moe_batch b = {.n_tokens = ns, .token = tok, .seq = seq, .logits = want};
    if (prof && moe_context_profile_enable(c, true)) return -1;
    const double t0 = now_s();
    const int rc = moe_context_decode_topk(c, &b, 1, ids, vals);
    const double dt = now_s() - t0;
    if (rc) { fprintf(stderr, "bench_batch_decode: %s\n", moe_context_error(c)); return -1; }
    if (prof) {
        prof->n_ph = moe_context_profile_read(c, prof->ph, MAX_PHASES);
        moe_context_profile_enable(c, false);
    }
    for (int s = 0; s < ns; s++)
        if (moe_context_seq_truncate(c, s, P)) return -1;
    return dt;
}

static int prefill(moe_context *c, int P, int32_t *next) {
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)P), *seq = malloc(sizeof(int32_t) * (size_t)P);
    int rc = !tok || !seq;
    for (int s = 0; s < MAX_SEQ && !rc; s++) {
        for (int i = 0; i < P; i++) tok[i] = 11 + (37 * s + 101 * i) % 900, seq[i] = s;
        const moe_batch b = {.n_tokens = P, .token = tok, .seq = seq, .logits = NULL};
        int32_t id;
        float v;
        rc = moe_context_decode_topk(c, &b, 1, &id, &v);
        if (rc) fprintf(stderr, "bench_batch_decode: prefill: %s\n", moe_context_error(c));
        next[s] = id;
    }
    free(tok);
    free(seq);
    return rc;
}

static void print_profiles(profile prof[N_SIZES], int rounds) {
    printf("\nphase profile, ms per step (mean over %d profiled rounds) and weight MB per step:\n", rounds);
    printf("%-14s", "phase");
    for (int k = 0; k < N_SIZES; k++) printf(" | N=%d ms     MB", SIZES[k]);
    printf("\n");
    for (int p = 0; p < prof[0].n_ph && p < MAX_PHASES; p++) {
        if (!prof[N_SIZES - 1].ph[p].calls) continue;
        printf("%-14s", prof[0].ph[p].name);
        for (int k = 0; k < N_SIZES; k++)
            printf(" | %7.2f %6.1f", prof[k].ph[p].seconds * 1e3 / rounds, prof[k].ph[p].weight_bytes / 1e6 / rounds);
        printf("\n");
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_batch_decode MODEL [ROUNDS [P [FLAGS]]]\n");
        return 2;
    }
    const int R = argc > 2 ? atoi(argv[2]) : 24, P = argc > 3 ? atoi(argv[3]) : 64;
    const char *flags = argc > 4 ? argv[4] : "default";
    if (R < 2 || P < 1) { fprintf(stderr, "bench_batch_decode: ROUNDS >= 2 and P >= 1\n"); return 2; }
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_context *c = NULL;
    const moe_load_params lp = {.flags = flags};
    if (moe_model_load(argv[1], &lp, &m, err, sizeof err)) { fprintf(stderr, "bench_batch_decode: %s\n", err); return 1; }
    const moe_context_params cp = {.n_ctx = P + 8, .n_threads = 2, .n_batch = 512, .n_seq = MAX_SEQ};
    if (moe_context_new(m, &cp, &c, err, sizeof err)) {
        fprintf(stderr, "bench_batch_decode: %s\n", err);
        moe_model_free(m);
        return 1;
    }
    int32_t next[MAX_SEQ];
    double *t = calloc((size_t)R * N_SIZES, sizeof *t), *tmp = calloc((size_t)R, sizeof *tmp);
    static profile prof[N_SIZES], one;
    int rc = !t || !tmp || prefill(c, P, next);
    for (int k = 0; k < N_SIZES && !rc; k++) rc = step(c, SIZES[k], P, next, NULL) < 0;   /* warm-up */
    for (int r = 0; r < R && !rc; r++)
        for (int j = 0; j < N_SIZES && !rc; j++) {
            const int k = (j + r) % N_SIZES;
            /* the last quarter of the rounds is profiled (off in the timed ones) */
            const bool profiled = r >= R - R / 4;
            const double dt = step(c, SIZES[k], P, next, profiled ? &one : NULL);
            if (dt < 0) { rc = 1; break; }
            t[r * N_SIZES + k] = dt;
            if (profiled) {
                prof[k].n_ph = one.n_ph;
                for (int p = 0; p < one.n_ph && p < MAX_PHASES; p++) {
                    prof[k].ph[p].name = one.ph[p].name;
                    prof[k].ph[p].calls += one.ph[p].calls;
                    prof[k].ph[p].seconds += one.ph[p].seconds;
                    prof[k].ph[p].weight_bytes += one.ph[p].weight_bytes;
                }
            }
        }
    if (!rc) {
        const int RT = R - R / 4;                      /* unprofiled rounds */
        printf("bench_batch_decode %s: flags %s, depth %d, 2 threads, %d rounds (%d timed, %d profiled)\n", argv[1],
               flags, P, R, RT, R / 4);
        printf("%3s | %9s | %9s | %-26s\n", "N", "step ms", "tok/s", "x N=1 (p10..p90 of rounds)");
        for (int k = 0; k < N_SIZES; k++) {
            for (int r = 0; r < RT; r++) tmp[r] = t[r * N_SIZES + k];
            const double med = pct(tmp, RT, 0.5);
            for (int r = 0; r < RT; r++) tmp[r] = SIZES[k] * t[r * N_SIZES] / t[r * N_SIZES + k];
            const double x = pct(tmp, RT, 0.5), lo = pct(tmp, RT, 0.1), hi = pct(tmp, RT, 0.9);
            printf("%3d | %9.2f | %9.1f | %.3f (%.3f..%.3f)\n", SIZES[k], med * 1e3, SIZES[k] / med, x, lo, hi);
        }
        if (R / 4 > 0) print_profiles(prof, R / 4);
    }
    free(t);
    free(tmp);
    moe_context_free(c);
    moe_model_free(m);
    return rc;
}
