/* bench_screen.c — what the certified lm-head screen (flag lm_screen,
 * docs/SCREEN.md) saves: per head format (F32, F16, BF16, Q8_0) on a flat
 * random model and on a peaked one (gen's head_peak), greedy decode steps
 * through moe_session_forward_topk, and per step the lm-head bytes read / the
 * full head's, the rows that reached level 2 and the rows evaluated exactly
 * (p50 / p90 / max), the top-1 margin (logit 1 - logit 2: p10 / p50 / p90)
 * and the step time with the screen on and off (ms, median). The tokens of
 * both runs are compared (they must be equal; a difference exits 1).
 *
 *   bench_screen [PEAKED [N_VOCAB [STEPS]]]
 * PEAKED: the peaked model's gen overrides, comma-separated (default
 * "head_peak=1,embd_scale=8"); N_VOCAB 16384, STEPS 64.
 * Models are generated into build/bench-screen/ (qwen3moe, default preset,
 * experts Q8_0). Timing only: never part of the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "moefast.h"
#include "bench_util.h"

static double pct(double *v, int n, double p) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* Greedy decode of steps tokens (ids out) asking for the top k (1: what
 * greedy needs; 2: the off run, for the top-1 margin); per-step figures. */
static int decode(const char *path, const char *flags, int k, int steps, int32_t *out, double *ms, double *exact,
                  double *lvl2, double *margin, double *ratio) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_session *s = NULL;
    moe_load_params lp = {.flags = flags};
    if (moe_model_load(path, &lp, &m, err, sizeof err)) { fprintf(stderr, "bench_screen: %s\n", err); return -1; }
    moe_session_params sp = {.n_ctx = steps + 8, .n_threads = 2};
    if (moe_session_new(m, &sp, &s, err, sizeof err)) { fprintf(stderr, "bench_screen: %s\n", err); return -1; }
    int32_t prompt[4] = {17, 300, 41, 99}, ids[2];
    float vals[2];
    int rc = moe_session_forward_topk(s, prompt, 4, k, ids, vals);
    moe_screen_stats a, b;
    moe_session_screen_stats(s, &a);
    for (int i = 0; i < steps && !rc; i++) {
        out[i] = ids[0];
        if (k > 1) margin[i] = (double)vals[0] - (double)vals[1];
        double t0 = now_s();
        rc = moe_session_forward_topk(s, &out[i], 1, k, ids, vals);
        ms[i] = (now_s() - t0) * 1e3;
        moe_session_screen_stats(s, &b);
        exact[i] = b.last_exact_rows < 0 ? (double)moe_model_n_vocab(m) : (double)b.last_exact_rows;
        lvl2[i] = (double)(b.level2_rows - a.level2_rows);
        a = b;
    }
    moe_screen_stats z;
    moe_session_screen_stats(s, &z);
    *ratio = z.full_bytes > 0 ? z.bytes / z.full_bytes : 0;
    if (rc) fprintf(stderr, "bench_screen: %s\n", moe_session_error(s));
    moe_session_free(s);
    moe_model_free(m);
    return rc ? -1 : 0;
}

int main(int argc, char **argv) {
    const char *peak = argc > 1 ? argv[1] : "head_peak=1,embd_scale=8";
    const char *nv = argc > 2 ? argv[2] : "16384";
    const int steps = argc > 3 ? atoi(argv[3]) : 64;
    if (steps < 2) return 2;
    mkdir("build", 0755);
    mkdir("build/bench-screen", 0755);
    static const char *TYPES[] = {"F32", "F16", "BF16", "Q8_0"};
    int32_t *t_on = malloc((size_t)steps * 4), *t_off = malloc((size_t)steps * 4);
    double *v[6];
    for (int i = 0; i < 6; i++) v[i] = malloc((size_t)steps * sizeof(double));
    int status = 0;
    printf("bench_screen: qwen3moe default preset, n_vocab %s, %d greedy steps, 2 threads\n", nv, steps);
    printf("%-5s %-12s %8s %18s %16s %22s %14s\n", "head", "model", "bytes", "exact p50/p90/max", "level2 p50/max",
           "top-1 margin p10/50/90", "ms on / off");
    for (int ti = 0; ti < 4; ti++)
        for (int pk = 0; pk < 2; pk++) {
            char path[512], kv[64], kp[256], name[32];
            snprintf(name, sizeof name, "%s", pk ? "peaked" : "flat");
            snprintf(path, sizeof path, "build/bench-screen/qwen3moe-%s-%s-v%s%s%s.gguf", TYPES[ti], name, nv,
                     pk ? "-p" : "", pk ? peak : "");
            snprintf(kv, sizeof kv, "n_vocab=%s", nv);
            snprintf(kp, sizeof kp, "%s", pk ? peak : "head_peak=0");
            char te[32] = "type_experts=Q8_0", ty[32];
            snprintf(ty, sizeof ty, "type=%s", TYPES[ti]);
            const char *ov[16] = {kv, ty, te};
            int no = 3;
            for (char *tok = strtok(kp, ","); tok && no < 15; tok = strtok(NULL, ",")) ov[no++] = tok;
            ov[no] = NULL;
            char err[MOE_ERR_LEN];
            struct stat st;
            if (stat(path, &st) != 0 && moe_gen_model("qwen3moe", "default", ov, path, err, sizeof err)) {
                fprintf(stderr, "bench_screen: gen: %s\n", err);
                return 2;
            }
            double ratio = 0, r_off = 0;
            if (decode(path, "-lm_screen", 2, steps, t_off, v[5], v[1], v[2], v[3], &r_off)) return 2;
            if (decode(path, "default", 1, steps, t_on, v[0], v[1], v[2], v[4], &ratio)) return 2;
            if (memcmp(t_on, t_off, (size_t)steps * 4)) { printf("TOKENS DIFFER (%s %s)\n", TYPES[ti], name); status = 1; }
            const double e50 = pct(v[1], steps, 0.5), e90 = pct(v[1], steps, 0.9), emax = pct(v[1], steps, 1.0);
            const double l50 = pct(v[2], steps, 0.5), lmax = pct(v[2], steps, 1.0);
            const double m10 = pct(v[3], steps, 0.1), m50 = pct(v[3], steps, 0.5), m90 = pct(v[3], steps, 0.9);
            printf("%-5s %-12s %7.1f%% %6.0f/%5.0f/%5.0f %7.0f/%7.0f %7.2f/%6.2f/%6.2f %6.2f/%6.2f\n", TYPES[ti], name,
                   100 * ratio, e50, e90, emax, l50, lmax, m10, m50, m90, pct(v[0], steps, 0.5), pct(v[5], steps, 0.5));
            fflush(stdout);
        }
    printf("bytes: lm-head bytes read per greedy step / the full head's (screen arrays + exact rows; x4 heads\n"
           "evaluate whole 4-row groups); exact: rows the kernel evaluated per step (n_vocab when the full head ran)\n");
    for (int i = 0; i < 6; i++) free(v[i]);
    free(t_on);
    free(t_off);
    return status;
}
