/* bench_profile.c — what the phase profile (moe_session_profile_enable,
 * `moefast bench --phases`) costs when on: decode steps alternate profile
 * off (even) and on (odd) in one session, as `bench --ab` alternates flags,
 * so both see the same memory state; the figure is the median of the
 * adjacent (off, on) step ratios. An off/off run of the same length is the
 * control (its ratio shows the noise and the bias of the step order). Also
 * the cost of one clock_gettime(CLOCK_MONOTONIC), what a mark adds.
 *
 *   bench_profile [MODEL [FLAGS [STEPS]]]
 * defaults: the shared qwen3moe-tiny Q8_0 ($MOEFAST_SHARED or ../shared),
 * "+act_q8,+kv_f16", 4000 steps, 2 threads. A missing default model is
 * skipped (exit 0). Timing only: never part of the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moefast.h"
#include "bench_util.h"

#define PROMPT 16

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* D steps after the prompt; odd steps profiled when profile_odd. Returns the
 * median of the (even, odd) step ratios odd/even; *even_ms: the median even
 * (unprofiled) step; *calls: the phase calls of the last profiled step. -1 on
 * error. */
static double run(moe_session *s, const int32_t *ids, int D, bool profile_odd, float *lg, int V, double *even_ms,
                  long long *calls) {
    if (moe_session_truncate(s, 0) != MOE_OK || moe_session_forward(s, ids, PROMPT, lg, false) != MOE_OK) return -1;
    const int n = D / 2;
    double *r = malloc((size_t)n * sizeof *r), *ev = malloc((size_t)n * sizeof *ev);
    if (!r || !ev) { free(r); free(ev); return -1; }
    double even = 0;
    for (int i = 0; i < 2 * n; i++) {
        const bool on = profile_odd && i % 2;
        moe_session_profile_enable(s, on);
        double t = now_s();
        if (moe_session_forward(s, ids + PROMPT + i, 1, lg, false) != MOE_OK) { free(r); free(ev); return -1; }
        moe_argmax(lg, V);
        t = now_s() - t;
        if (i % 2 == 0) {
            even = t;
            continue;
        }
        r[i / 2] = t / even;
        ev[i / 2] = even;
        if (on) {
            moe_phase_stat st[64];
            int k = moe_session_profile_read(s, st, 64);
            *calls = 0;
            for (int j = 0; j < k && j < 64; j++) *calls += st[j].calls;
        }
    }
    moe_session_profile_enable(s, false);
    double m = median(r, n);
    *even_ms = 1e3 * median(ev, n);
    free(r);
    free(ev);
    return m;
}

int main(int argc, char **argv) {
    char def[512];
    const char *sh = getenv("MOEFAST_SHARED");
    snprintf(def, sizeof def, "%s/oracle/qwen3moe-tiny-q8_0.gguf", sh && *sh ? sh : "../shared");
    const char *path = argc > 1 ? argv[1] : def;
    const char *flags = argc > 2 ? argv[2] : "+act_q8,+kv_f16";
    const int D = argc > 3 ? atoi(argv[3]) : 4000;
    if (D < 2) { fprintf(stderr, "bench_profile: STEPS must be >= 2\n"); return 2; }
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (argc > 1) { fprintf(stderr, "bench_profile: cannot read %s\n", path); return 2; }
        printf("bench_profile: skipped (%s not found)\n", path);
        return 0;
    }
    fclose(f);
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags};
    if (moe_model_load(path, &lp, &m, err, sizeof err) != MOE_OK) { fprintf(stderr, "bench_profile: %s\n", err); return 2; }
    moe_session *s = NULL;
    moe_session_params sp = {.n_ctx = PROMPT + D + 1, .n_threads = 2, .n_batch = 0};
    if (moe_session_new(m, &sp, &s, err, sizeof err) != MOE_OK) {
        fprintf(stderr, "bench_profile: %s\n", err);
        moe_model_free(m);
        return 2;
    }
    const int V = moe_model_n_vocab(m);
    float *lg = malloc((size_t)V * sizeof *lg);
    int32_t *ids = malloc((size_t)(PROMPT + D) * sizeof *ids);
    int rc = 2;
    if (!lg || !ids) goto done;
    for (int i = 0; i < PROMPT + D; i++) ids[i] = (int32_t)(((uint64_t)i * 7919u + 13u) % (uint64_t)V);
    long long calls = 0, none = 0;
    double off_ms = 0, aa_ms = 0;
    double on = run(s, ids, D, true, lg, V, &off_ms, &calls);
    double aa = run(s, ids, D, false, lg, V, &aa_ms, &none);
    if (on < 0 || aa < 0) { fprintf(stderr, "bench_profile: forward failed: %s\n", moe_session_error(s)); goto done; }
    const int N = 2000000;
    double t = now_s(), sink = 0;
    for (int i = 0; i < N; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        sink += (double)ts.tv_nsec;
    }
    t = now_s() - t;
    printf("bench_profile: %s [%s], 2 threads, %d decode steps after a %d-token prompt\n", path, flags, 2 * (D / 2),
           PROMPT);
    printf("  profile on/off, median of adjacent step ratios  %.4f  (%lld phase calls per step; off steps %.4f ms)\n",
           on, calls, off_ms);
    printf("  control off/off                                 %.4f\n", aa);
    printf("  clock_gettime(CLOCK_MONOTONIC)                  %.1f ns per call%s\n", 1e9 * t / N, sink < 0 ? " " : "");
    rc = 0;
done:
    free(lg);
    free(ids);
    moe_session_free(s);
    moe_model_free(m);
    return rc;
}
