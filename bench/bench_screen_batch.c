/* bench_screen_batch.c — the certified lm-head screen in a batch
 * (moe_context_decode_topk, docs/SCREEN.md "Batches"): n_seq sequences
 * decoded greedily together, one token each per step, on a peaked model
 * (gen's head_peak) per head format (F32, BF16, Q8_0) and n_seq 1, 2, 3, 4,
 * 8. Per configuration the median step time (ms) with the screen on, with
 * -lm_screen (the top k of a batched full head) and through full logits
 * (moe_context_decode + an argmax per row), and the lm-head bytes read per
 * step / the full head's (the screen's, from moe_context_screen_stats). The
 * three runs' tokens must be equal (a difference exits 1).
 *
 *   bench_screen_batch [PEAKED [N_VOCAB [STEPS]]]
 * defaults "head_peak=1,embd_scale=4", 32768, 48. Models are generated into
 * build/bench-screen/ (qwen3moe, default preset, experts Q8_0). Timing only:
 * never part of the tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "moefast.h"
#include "bench_util.h"

enum { MAX_SEQ = 8 };

/* mode 0: decode_topk, 1: decode + argmax. out [steps][ns] tokens; returns
 * the median step ms (or -1), *ratio the screen's bytes / the full head's. */
static double run(const char *path, const char *flags, int mode, int ns, int steps, int32_t *out, double *ratio) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_context *c = NULL;
    moe_load_params lp = {.flags = flags};
    if (moe_model_load(path, &lp, &m, err, sizeof err)) { fprintf(stderr, "bench_screen_batch: %s\n", err); return -1; }
    moe_context_params cp = {.n_ctx = steps + 8, .n_threads = 2, .n_batch = 64, .n_seq = ns};
    if (moe_context_new(m, &cp, &c, err, sizeof err)) { fprintf(stderr, "bench_screen_batch: %s\n", err); return -1; }
    const int V = moe_model_n_vocab(m);
    float *lg = mode ? malloc((size_t)ns * (size_t)V * sizeof(float)) : NULL, vals[MAX_SEQ];
    double *ms = malloc((size_t)steps * sizeof(double));
    int32_t tok[MAX_SEQ * 4], seq[MAX_SEQ * 4], ids[MAX_SEQ];
    bool want[MAX_SEQ * 4];
    int nt = 0, rc = 0;
    for (int s = 0; s < ns; s++)                               /* a 4-token prompt each */
        for (int j = 0; j < 4; j++) tok[nt] = 17 + 101 * s + 13 * j, seq[nt] = s, want[nt] = j == 3, nt++;
    for (int st = 0; st <= steps && !rc; st++) {
        moe_batch b = {.n_tokens = nt, .token = tok, .seq = seq, .logits = want};
        const double t0 = now_s();
        rc = mode ? moe_context_decode(c, &b, lg) : moe_context_decode_topk(c, &b, 1, ids, vals);
        if (mode && !rc)
            for (int s = 0; s < ns; s++) ids[s] = moe_argmax(lg + (size_t)s * V, V);
        if (st > 0) ms[st - 1] = (now_s() - t0) * 1e3;         /* decode steps only, not the prompts */
        if (st == steps) break;
        for (int s = 0; s < ns; s++) out[st * ns + s] = tok[s] = ids[s], seq[s] = s, want[s] = true;
        nt = ns;
    }
    moe_screen_stats z;
    moe_context_screen_stats(c, &z);
    *ratio = z.full_bytes > 0 ? z.bytes / z.full_bytes : 0;
    if (rc) fprintf(stderr, "bench_screen_batch: %s\n", moe_context_error(c));
    qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
    const double med = rc ? -1 : ms[steps / 2];
    free(ms);
    free(lg);
    moe_context_free(c);
    moe_model_free(m);
    return med;
}

int main(int argc, char **argv) {
    const char *peak = argc > 1 ? argv[1] : "head_peak=1,embd_scale=4";
    const char *nv = argc > 2 ? argv[2] : "32768";
    const int steps = argc > 3 ? atoi(argv[3]) : 48;
    if (steps < 2) return 2;
    mkdir("build", 0755);
    mkdir("build/bench-screen", 0755);
    static const char *TYPES[] = {"F32", "BF16", "Q8_0"};
    static const int NS[] = {1, 2, 3, 4, 8};
    int32_t *t[3];
    for (int i = 0; i < 3; i++) t[i] = malloc((size_t)steps * MAX_SEQ * sizeof(int32_t));
    int status = 0;
    printf("bench_screen_batch: qwen3moe default preset, n_vocab %s, %s, %d greedy steps of n_seq tokens, 2 threads\n",
           nv, peak, steps);
    printf("%-5s %5s %14s %12s %14s %12s\n", "head", "n_seq", "bytes (on)", "ms on", "ms -lm_screen", "ms logits");
    for (int ti = 0; ti < 3; ti++) {
        char path[512], kv[64], kp[256], ty[32];
        snprintf(path, sizeof path, "build/bench-screen/qwen3moe-%s-peaked-v%s-p%s.gguf", TYPES[ti], nv, peak);
        snprintf(kv, sizeof kv, "n_vocab=%s", nv);
        snprintf(kp, sizeof kp, "%s", peak);
        snprintf(ty, sizeof ty, "type=%s", TYPES[ti]);
        const char *ov[16] = {kv, ty, "type_experts=Q8_0"};
        int no = 3;
        for (char *tk = strtok(kp, ","); tk && no < 15; tk = strtok(NULL, ",")) ov[no++] = tk;
        ov[no] = NULL;
        char err[MOE_ERR_LEN];
        struct stat st;
        if (stat(path, &st) != 0 && moe_gen_model("qwen3moe", "default", ov, path, err, sizeof err)) {
            fprintf(stderr, "bench_screen_batch: gen: %s\n", err);
            return 2;
        }
        for (size_t ni = 0; ni < sizeof NS / sizeof NS[0]; ni++) {
            const int ns = NS[ni];
            double r_on = 0, r_off = 0, r_lg = 0;
            const double on = run(path, "default", 0, ns, steps, t[0], &r_on);
            const double off = run(path, "-lm_screen", 0, ns, steps, t[1], &r_off);
            const double lg = run(path, "default", 1, ns, steps, t[2], &r_lg);
            if (on < 0 || off < 0 || lg < 0) return 2;
            const size_t nb = (size_t)steps * (size_t)ns * sizeof(int32_t);
            if (memcmp(t[0], t[1], nb) || memcmp(t[0], t[2], nb)) {
                printf("TOKENS DIFFER (%s n_seq %d)\n", TYPES[ti], ns);
                status = 1;
            }
            printf("%-5s %5d %13.1f%% %12.2f %14.2f %12.2f\n", TYPES[ti], ns, 100 * r_on, on, off, lg);
            fflush(stdout);
        }
    }
    printf("bytes: lm-head bytes the top-k steps read / a batched full head's (one pass per step); the screen runs\n"
           "only while n_seq x its level-1 bytes < the head's (docs/SCREEN.md), else the batched full head\n");
    for (int i = 0; i < 3; i++) free(t[i]);
    return status;
}
