/* cmd_bench.c — `moefast bench`: times the two mlx.fast windows.
 *
 *   prefill: one forward of a P-token prompt on an empty KV cache (+ the
 *            argmax of its last logits); seconds / P.            P = 512
 *   decode:  from the start of a P-token seed prefill through D teacher-forced
 *            single-token steps (each followed by an argmax); seconds / D.
 *            The seed is charged to decode so no work can hide in it. D = 128
 *
 * Outside both windows: process start, model load, session allocation,
 * tokenization (ids are given), one untimed warm-up forward, the token check
 * and the bandwidth measurement. docs/MEASUREMENT.md documents the windows
 * and the JSON schema ("moefast.bench/1"), which `moefast price` parses.
 *
 * --ab SPEC: the decode steps alternate between the session's flags (A, even
 * steps) and A changed by SPEC (B, odd steps) in the same process, session
 * and KV cache, so both see the same memory state, which on a shared VM drifts
 * far more between minutes than the effects being measured; the exactness
 * contract (every forward-time flag keeps the logits bit-identical) keeps
 * both on one token stream. Each step is timed alone; the flag switch is
 * outside the timer. A spec that changes the KV cache format (kv_f16, kv_q8:
 * fixed when a session is created) runs B on a sibling session
 * (moe_session_new_sibling: same model, same worker pool) fed the same ids,
 * with a seed prefill of its own (untimed); when B's numerics differ from A's,
 * B's tokens are not checked (the trace belongs to A's numerics).
 *
 * --phases: the session's phase profile (moe_session_profile_*) is on for the
 * last repeat's D decode steps (after the seed) and its prefill window, and
 * printed as a table per window: where a step's time goes, and how fast each
 * matrix phase streams its weights. */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "stats.h"
#include "moefast.h"

#define CMD "bench"
#define BENCH_SCHEMA "moefast.bench/1"
#define TIE_TOPK 8 /* the gate's rule: golden token within the top 8 */
#define AB_SEED 20260101ull /* --ab bootstrap: fixed, so the same steps give the same interval */
#define AB_RESAMPLES 2000

enum { WIN_PREFILL = 1, WIN_DECODE = 2 };

typedef struct {
    const char *model, *flags, *trace;
    const char *ab;      /* --ab SPEC: B = A changed by SPEC; NULL: no A/B */
    bool ab_sibling;     /* --ab-sibling: B on a sibling session even when SPEC could switch the live one */
    int threads, windows, repeat, prompt_len, decode_steps;
    bool json, bandwidth;
    bool phases;         /* --phases: profile the last repeat's windows */
} bench_opts;

/* One token-check failure (or the first tolerated tie, for the record). */
typedef struct {
    bool ok;
    int checked, ties;
    int step;            /* first failing step (-1: none); 0 = token after the prompt */
    const char *window;  /* where it failed */
    char config;         /* --ab: 'A' or 'B', the flags that ran the failing step; 0 otherwise */
    int32_t expected, actual;
} token_check;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Peak resident set (VmHWM) in bytes: the live working set, not address space. */
static long long peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

static double median(const double *v, int n) {
    double tmp[n > 0 ? n : 1];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    return stats_median_inplace(tmp, n);
}

/* ---- --ab statistics ------------------------------------------------------
 * price's bootstrap (tools/price_report.c) is bound to its report structs, so
 * this is a small one of the same kind: percentile bootstrap, pairs resampled
 * with replacement, fixed seed. */


typedef struct {
    int pairs;
    double a_med, b_med;  /* median seconds per step */
    double speedup;       /* a_med / b_med: > 1, B is faster */
    double lo, hi;        /* bootstrap 95% interval of the speedup */
} ab_stats;

/* a[i], b[i]: the A and the B step of pair i (adjacent steps, so both saw
 * the same memory state). A resample draws n pair indices and takes the ratio
 * of the two medians over them: pairs stay together. -1: out of memory. */
static int ab_analyse(const double *a, const double *b, int n, ab_stats *st) {
    double *ta = malloc((size_t)n * sizeof *ta), *tb = malloc((size_t)n * sizeof *tb);
    double *boot = malloc(AB_RESAMPLES * sizeof *boot);
    int rc = -1;
    if (ta && tb && boot) {
        st->pairs = n;
        memcpy(ta, a, (size_t)n * sizeof *ta);
        memcpy(tb, b, (size_t)n * sizeof *tb);
        st->a_med = stats_median_inplace(ta, n);
        st->b_med = stats_median_inplace(tb, n);
        st->speedup = st->a_med / st->b_med;
        uint64_t x = AB_SEED;
        for (int k = 0; k < AB_RESAMPLES; k++) {
            for (int i = 0; i < n; i++) {
                int j = (int)((stats_splitmix64(&x) >> 11) * 0x1.0p-53 * n);
                ta[i] = a[j];
                tb[i] = b[j];
            }
            boot[k] = stats_median_inplace(ta, n) / stats_median_inplace(tb, n);
        }
        qsort(boot, AB_RESAMPLES, sizeof *boot, stats_cmp_double);
        st->lo = stats_quantile_sorted(boot, AB_RESAMPLES, 0.025);
        st->hi = stats_quantile_sorted(boot, AB_RESAMPLES, 0.975);
        rc = 0;
    }
    free(ta);
    free(tb);
    free(boot);
    return rc;
}

/* Deterministic pseudo-random ids in [0, n_vocab): splitmix64, fixed seed, so
 * every run and every binary times the same token sequence. */
static void random_ids(int32_t *ids, int n, int n_vocab) {
    uint64_t x = 0x6d6f65666173744bull;
    for (int i = 0; i < n; i++) ids[i] = (int32_t)(stats_splitmix64(&x) % (uint64_t)n_vocab);
}

/* The gate's pass rule for one step: the argmax equals the golden token, or
 * the golden token is in our top 8 (ties by ascending id) and its logit is
 * within tol of the top logit. Called only on a mismatch. */
static bool tie_tolerated(const float *logits, int n_vocab, int32_t expected, int32_t actual, float tol) {
    if (expected < 0 || expected >= n_vocab) return false;
    float le = logits[expected];
    if (!(logits[actual] - le <= tol)) return false;
    int above = 0;
    for (int v = 0; v < n_vocab && above < TIE_TOPK; v++)
        if (logits[v] > le || (logits[v] == le && v < expected)) above++;
    return above < TIE_TOPK;
}

/* Records one checked step into tc (the argmax was already computed); config:
 * 'A'/'B' under --ab, else 0. */
static void check_step(token_check *tc, const char *window, int step, char config, const float *logits,
                       int n_vocab, int32_t expected, int32_t actual, float tol) {
    tc->checked++;
    if (actual == expected) return;
    if (tie_tolerated(logits, n_vocab, expected, actual, tol)) { tc->ties++; return; }
    if (tc->ok) {
        tc->ok = false;
        tc->step = step;
        tc->window = window;
        tc->config = config;
        tc->expected = expected;
        tc->actual = actual;
    }
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: moefast bench -m FILE [-t N] [--json] [--flags SPEC] [--trace FILE]\n"
            "                     [--window prefill|decode|both] [--repeat R]\n"
            "                     [--prompt-len P] [--decode-steps D] [--no-bandwidth] [--ab SPEC]\n"
            "                     [--ab-sibling] [--phases]\n"
            "  prefill window: one forward of a P-token prompt (default 512), seconds / P\n"
            "  decode window:  P-token seed prefill + D teacher-forced steps (default 128), seconds / D;\n"
            "           set against the read bandwidth measured before and after each window, and\n"
            "           against the roofline: each kind of matrix product timed from cache right\n"
            "           after the window, its bytes at the slower of that rate and the bandwidth\n"
            "           (--no-bandwidth skips both; docs/MEASUREMENT.md)\n"
            "  --trace: prompt and teacher-forced tokens from the trace's first case, every\n"
            "           step's argmax checked against it (see docs/MEASUREMENT.md)\n"
            "  --ab SPEC: in-process A/B of the decode steps: even steps run the flags A\n"
            "           (--flags), odd steps A changed by SPEC (B, e.g. -parallel_glue), in one\n"
            "           session; reports each one's median step and the speedup A/B with a\n"
            "           bootstrap 95%% interval over adjacent step pairs. Only flags read while\n"
            "           forwarding can differ (simd, gemm_batch, gemm_wide, key_stream,\n"
            "           fused_gate_up, parallel_glue, value_prefetch; gemm_batch and gemm_wide\n"
            "           act in prefill only, key_stream and value_prefetch in decode only).\n"
            "           Run the A/A control first: --ab '' (an empty SPEC changes nothing);\n"
            "           its interval shows the noise and any bias of the step order.\n"
            "           A KV cache format (kv_f16, kv_q8) or the buffers' placement\n"
            "           (aligned_buffers) cannot change in a session: B then runs on a\n"
            "           sibling session (same model and worker pool, its own KV cache and\n"
            "           buffers), both run every step, and a pair is A's and B's run of it;\n"
            "           B's tokens are checked only if its numerics are A's.\n"
            "  --ab-sibling: B on a sibling session whatever SPEC is (the A/A control of\n"
            "           that mode: --ab '' --ab-sibling).\n"
            "  --phases: phase profile of the last repeat: per phase of the forward pass\n"
            "           (embed, attn_norm, qkv, attention, wo, ..., lm_head) the calls, ms and\n"
            "           share per decode step, weight MB per step and GB/s; the same for the\n"
            "           prefill window when it runs. Not with --ab.\n");
}

static int parse_args(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.threads = 0, .windows = WIN_PREFILL | WIN_DECODE, .repeat = 1,
                      .prompt_len = 512, .decode_steps = 128, .bandwidth = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 1; }
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--no-bandwidth")) o->bandwidth = false;
        else if (!strcmp(a, "--phases")) o->phases = true;
        else if (!strcmp(a, "--ab-sibling")) o->ab_sibling = true;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!v) return cli_fail(CMD, "%s needs a file", a), -1;
            o->model = v; i++;
        } else if (!strncmp(a, "--flags=", 8)) {
            o->flags = a + 8;
        } else if (!strcmp(a, "--flags")) {
            if (!v) return cli_fail(CMD, "--flags needs a spec"), -1;
            o->flags = v; i++;
        } else if (!strncmp(a, "--ab=", 5)) {
            o->ab = a + 5;
        } else if (!strcmp(a, "--ab")) {
            if (!v) return cli_fail(CMD, "--ab needs a flag spec (e.g. -parallel_glue; '' for an A/A control)"), -1;
            o->ab = v; i++;
        } else if (!strcmp(a, "--trace")) {
            if (!v) return cli_fail(CMD, "--trace needs a file"), -1;
            o->trace = v; i++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_parse_int(CMD, a, v, 1, 1024, &x)) return -1;
            o->threads = (int)x; i++;
        } else if (!strcmp(a, "--repeat")) {
            if (cli_parse_int(CMD, a, v, 1, 1000, &x)) return -1;
            o->repeat = (int)x; i++;
        } else if (!strcmp(a, "--prompt-len")) {
            if (cli_parse_int(CMD, a, v, 1, 1 << 20, &x)) return -1;
            o->prompt_len = (int)x; i++;
        } else if (!strcmp(a, "--decode-steps")) {
            if (cli_parse_int(CMD, a, v, 1, 1 << 20, &x)) return -1;
            o->decode_steps = (int)x; i++;
        } else if (!strcmp(a, "--window")) {
            if (!v) return cli_fail(CMD, "--window needs prefill|decode|both"), -1;
            if (!strcmp(v, "prefill")) o->windows = WIN_PREFILL;
            else if (!strcmp(v, "decode")) o->windows = WIN_DECODE;
            else if (!strcmp(v, "both")) o->windows = WIN_PREFILL | WIN_DECODE;
            else return cli_fail(CMD, "bad value for --window: '%s' (expected prefill, decode or both)", v), -1;
            i++;
        } else {
            return cli_fail(CMD, "unknown option '%s' (see moefast bench --help)", a), -1;
        }
    }
    if (!o->model) return cli_fail(CMD, "missing -m FILE (see moefast bench --help)"), -1;
    if (o->ab_sibling && !o->ab) return cli_fail(CMD, "--ab-sibling needs --ab SPEC ('' for an A/A control)"), -1;
    if (o->ab && !(o->windows & WIN_DECODE))
        return cli_fail(CMD, "--ab alternates decode steps; --window prefill has none (use decode or both)"), -1;
    /* A profile over alternating A and B steps would describe neither. */
    if (o->ab && o->phases)
        return cli_fail(CMD, "--phases with --ab: a profile of alternating A and B steps describes neither; "
                        "profile each flag set in its own run"), -1;
    if (o->ab) {
        char e[MOE_ERR_LEN];
        if (moe_flags_check(o->ab, e, sizeof e) != MOE_OK) return cli_fail(CMD, "--ab: %s", e), -1;
    }
    if (access(o->model, R_OK) != 0)
        return cli_fail(CMD, "cannot read model '%s': %s", o->model, strerror(errno)), -1;
    if (o->trace && access(o->trace, R_OK) != 0)
        return cli_fail(CMD, "cannot read trace '%s': %s", o->trace, strerror(errno)), -1;
    if (o->threads <= 0) o->threads = cpu_count();
    return 0;
}

#define MAX_CEIL_PARTS 32

typedef struct {
    double *prefill;              /* [repeat] window seconds */
    double *decode, *seed, *steps; /* [repeat] */
    double *bw0;                  /* [repeat] read bandwidth measured right before decode window r, GB/s */
    double *bw1;                  /* [repeat] ... and right after it */
    double *bw;                   /* [repeat] the window's bandwidth (stats_bw_windows) */
    double *pct;                  /* [repeat] that window's decode steps as % of its bandwidth limit */
    int *steady;                  /* [repeat] the two measurements agreed (stats_bw_windows) */
    double *ceil;                 /* [repeat] the compute ceiling measured right after window r, s per step */
    moe_ceiling_part *parts;      /* [repeat][MAX_CEIL_PARTS] its kernels */
    int *n_parts;                 /* [repeat] */
    double *roof;                 /* [repeat] the window's steps as % of its roofline (0: not computed) */
} timings;

static json_t *num_or_null(bool have, double v) { return have ? json_real(v) : json_null(); }

static json_t *runs_array(const double *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
    return a;
}

/* ---- --phases ------------------------------------------------------------- */

#define MAX_PHASES 64

/* One window's profile: the library's phases (summed over the window's
 * forward calls), the number of steps to divide by (decode: D; prefill: 1,
 * the whole P-token forward) and the window's measured seconds (the same
 * run), which also contain what lies outside the phases. */
typedef struct {
    bool have;
    int n;
    moe_phase_stat st[MAX_PHASES];
    int steps;
    double measured_s;
} phase_profile;

/* Reads s's profile into pp and switches it off (also resets it). */
static int profile_take(moe_session *s, phase_profile *pp, int steps, double measured_s) {
    int n = moe_session_profile_read(s, pp->st, MAX_PHASES);
    moe_session_profile_enable(s, false);
    if (n < 0) return n;
    pp->n = n < MAX_PHASES ? n : MAX_PHASES;
    pp->have = true;
    pp->steps = steps;
    pp->measured_s = measured_s;
    return 0;
}

static double profile_sum_s(const phase_profile *pp) {
    double t = 0;
    for (int i = 0; i < pp->n; i++) t += pp->st[i].seconds;
    return t;
}

/* The text table: phases that ran, in data-flow order. */
static void print_profile(const char *title, const phase_profile *pp) {
    const double k = 1.0 / pp->steps;
    printf("  %s\n", title);
    printf("    %-10s %8s %9s %7s %10s %8s %9s %8s\n", "phase", "calls", "ms", "share", "weight MB", "GB/s",
           "KV MB", "KV GB/s");
    for (int i = 0; i < pp->n; i++) {
        const moe_phase_stat *e = &pp->st[i];
        if (e->calls == 0) continue;
        printf("    %-10s %8.2f %9.4f %6.1f%% %10.3f", e->name, (double)e->calls * k, 1e3 * e->seconds * k,
               100.0 * e->seconds / pp->measured_s, e->weight_bytes * k / 1e6);
        if (e->weight_bytes > 0 && e->seconds > 0) printf(" %8.2f", e->weight_bytes / e->seconds / 1e9);
        else printf(" %8s", "-");
        if (e->kv_bytes > 0 && e->seconds > 0)
            printf(" %9.3f %8.2f", e->kv_bytes * k / 1e6, e->kv_bytes / e->seconds / 1e9);
        printf("\n");
    }
    const double sum = profile_sum_s(pp);
    printf("    %-19s %9.4f %5.1f%%   of the measured %.4f ms; the rest, %.4f ms, is outside the phases\n",
           "sum of phases", 1e3 * sum * k, 100.0 * sum / pp->measured_s, 1e3 * pp->measured_s * k, 1e3 * (pp->measured_s - sum) * k);
}

static json_t *profile_json(const phase_profile *pp, int tokens) {
    if (!pp->have) return json_null();
    const double k = 1.0 / pp->steps, sum = profile_sum_s(pp);
    json_t *w = json_object();
    json_object_set_new(w, "steps", json_integer(pp->steps));
    json_object_set_new(w, "tokens", json_integer(tokens));
    json_object_set_new(w, "measured_ms_per_step", json_real(1e3 * pp->measured_s * k));
    json_object_set_new(w, "phases_ms_per_step", json_real(1e3 * sum * k));
    json_object_set_new(w, "outside_ms_per_step", json_real(1e3 * (pp->measured_s - sum) * k));
    json_t *a = json_array();
    for (int i = 0; i < pp->n; i++) {
        const moe_phase_stat *e = &pp->st[i];
        if (e->calls == 0) continue;
        json_t *o = json_object();
        json_object_set_new(o, "name", json_string(e->name));
        json_object_set_new(o, "calls_per_step", json_real((double)e->calls * k));
        json_object_set_new(o, "ms_per_step", json_real(1e3 * e->seconds * k));
        json_object_set_new(o, "share", json_real(e->seconds / pp->measured_s));
        json_object_set_new(o, "weight_mb_per_step", json_real(e->weight_bytes * k / 1e6));
        json_object_set_new(o, "gb_per_s", num_or_null(e->weight_bytes > 0 && e->seconds > 0,
                                                       e->weight_bytes / e->seconds / 1e9));
        json_object_set_new(o, "kv_mb_per_step", json_real(e->kv_bytes * k / 1e6));
        json_object_set_new(o, "kv_gb_per_s", num_or_null(e->kv_bytes > 0 && e->seconds > 0,
                                                          e->kv_bytes / e->seconds / 1e9));
        json_array_append_new(a, o);
    }
    json_object_set_new(w, "entries", a);
    return w;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o;
    int pr = parse_args(argc, argv, &o);
    if (pr) return pr > 0 ? 0 : 2;

    char err[MOE_ERR_LEN] = "";
    int rc = 2;
    moe_model *m = NULL;
    moe_session *s = NULL;
    moe_trace *tr = NULL;
    int32_t *ids = NULL, *argmax_ids = NULL;
    float *logits = NULL;
    timings tm = {0};
    char note[512] = "";
    token_check tc = {.ok = true, .step = -1, .window = NULL, .config = 0, .expected = -1, .actual = -1};
    /* --ab: every decode step's seconds [repeat][D], the paired A and B steps,
     * and the two flag sets as absolute specs ("none,+a,+b") so that each
     * switch is one call whatever the step before ran. */
    double *step_s = NULL, *step_sb = NULL, *pair_a = NULL, *pair_b = NULL;
    char a_flags[256] = "", b_flags[256] = "", a_abs[272] = "", b_abs[272] = "";
    moe_session *sb = NULL;  /* --ab with a KV cache format change: B's sibling session */
    moe_session *s_fail = NULL; /* the session whose forward failed, when not s */
    bool b_check = true;     /* --ab: B's steps are checked against the trace (same numerics as A) */
    bool b_sibling = false;  /* --ab: B ran on a sibling session */
    ab_stats ab = {0};
    /* --phases: the last repeat's profiles (static: ~2 x 64 entries) */
    static phase_profile prof_prefill, prof_decode;
    prof_prefill.have = prof_decode.have = false;

    moe_load_params lp = {.flags = o.flags};
    double t_load = now_s();
    if (moe_model_load(o.model, &lp, &m, err, sizeof err) != MOE_OK) {
        cli_fail(CMD, "%s", err);
        goto out;
    }
    t_load = now_s() - t_load;
    const int n_vocab = moe_model_n_vocab(m);

    /* The token sequence: prompt (P ids) then the D teacher-forced inputs. */
    int P = o.prompt_len, D = o.decode_steps;
    const int32_t *expected = NULL;
    int n_expected = 0;
    float tol = 0;
    if (o.trace) {
        if (moe_trace_load(o.trace, &tr, err, sizeof err) != MOE_OK) { cli_fail(CMD, "%s", err); goto out; }
        if (moe_trace_check_model(tr, m, err, sizeof err) != MOE_OK) {
            cli_fail(CMD, "trace %s does not belong to this model: %s", o.trace, err);
            goto out;
        }
        const moe_trace_case *c = moe_trace_n_cases(tr) > 0 ? moe_trace_case_at(tr, 0) : NULL;
        if (!c || c->n_prompt < 1 || c->n_expected < 1) {
            cli_fail(CMD, "trace %s: needs a first case with a prompt and expected tokens", o.trace);
            goto out;
        }
        tol = moe_trace_tie_tolerance(tr);
        expected = c->expected;
        n_expected = c->n_expected;
        /* The trace defines the lengths when it is shorter than asked: say so. */
        if (c->n_prompt != P || c->n_expected < D) {
            int d2 = c->n_expected < D ? c->n_expected : D;
            snprintf(note, sizeof note, "trace case '%s' has a %d-token prompt and %d expected tokens: "
                     "windows use prompt %d and %d decode steps (asked %d and %d)",
                     c->name ? c->name : "0", c->n_prompt, c->n_expected, c->n_prompt, d2, P, D);
            P = c->n_prompt;
            D = d2;
        }
        ids = malloc((size_t)(P + D) * sizeof *ids);
        if (!ids) { cli_fail(CMD, "out of memory"); goto out; }
        memcpy(ids, c->prompt, (size_t)P * sizeof *ids);
        memcpy(ids + P, c->expected, (size_t)D * sizeof *ids);
        for (int i = 0; i < P + D; i++)
            if (ids[i] < 0 || ids[i] >= n_vocab) {
                cli_fail(CMD, "trace %s: token id %d at position %d is outside the vocabulary (%d)",
                         o.trace, ids[i], i, n_vocab);
                goto out;
            }
    } else {
        ids = malloc((size_t)(P + D) * sizeof *ids);
        if (!ids) { cli_fail(CMD, "out of memory"); goto out; }
        random_ids(ids, P + D, n_vocab);
    }

    if (o.ab && D < 2) {
        cli_fail(CMD, "--ab needs at least 2 decode steps (one A and one B), have %d", D);
        goto out;
    }

    moe_session_params sp = {.n_ctx = P + D + 1, .n_threads = o.threads, .n_batch = 0};
    if (moe_session_new(m, &sp, &s, err, sizeof err) != MOE_OK) { cli_fail(CMD, "%s", err); goto out; }
    if (o.ab) {
        /* B is A changed by the spec: switched on the live session when the
         * spec allows it, else a sibling session (a KV cache format); a flag
         * fixed at load is refused here, with the library's message. */
        moe_session_flags(s, a_flags, sizeof a_flags);
        if (o.ab_sibling || moe_session_set_flags(s, o.ab, err, sizeof err) != MOE_OK) {
            if (moe_session_new_sibling(s, o.ab, &sb, err, sizeof err) != MOE_OK) {
                cli_fail(CMD, "--ab: %s", err);
                goto out;
            }
            b_sibling = true;
            moe_session_flags(sb, b_flags, sizeof b_flags);
            char na[256], nb[256];
            if (moe_flags_numerics_of(a_flags, na, sizeof na, err, sizeof err) != MOE_OK ||
                moe_flags_numerics_of(b_flags, nb, sizeof nb, err, sizeof err) != MOE_OK) {
                cli_fail(CMD, "--ab: %s", err);
                goto out;
            }
            b_check = !strcmp(na, nb);
        } else {
            moe_session_flags(s, b_flags, sizeof b_flags);
        }
        snprintf(a_abs, sizeof a_abs, "none,%s", a_flags);
        snprintf(b_abs, sizeof b_abs, "none,%s", b_flags);
        if (moe_session_set_flags(s, a_abs, err, sizeof err) != MOE_OK) { cli_fail(CMD, "--ab: %s", err); goto out; }
        step_s = malloc((size_t)o.repeat * (size_t)D * sizeof *step_s);
        if (sb) step_sb = malloc((size_t)o.repeat * (size_t)D * sizeof *step_sb);
        if (!step_s || (sb && !step_sb)) { cli_fail(CMD, "out of memory"); goto out; }
    }
    logits = malloc((size_t)n_vocab * sizeof *logits);
    argmax_ids = malloc((size_t)(D + 1) * sizeof *argmax_ids);
    tm.prefill = calloc((size_t)o.repeat, sizeof(double));
    tm.decode = calloc((size_t)o.repeat, sizeof(double));
    tm.seed = calloc((size_t)o.repeat, sizeof(double));
    tm.steps = calloc((size_t)o.repeat, sizeof(double));
    tm.bw0 = calloc((size_t)o.repeat, sizeof(double));
    tm.bw1 = calloc((size_t)o.repeat, sizeof(double));
    tm.bw = calloc((size_t)o.repeat, sizeof(double));
    tm.pct = calloc((size_t)o.repeat, sizeof(double));
    tm.steady = calloc((size_t)o.repeat, sizeof(int));
    tm.ceil = calloc((size_t)o.repeat, sizeof(double));
    tm.parts = calloc((size_t)o.repeat * MAX_CEIL_PARTS, sizeof *tm.parts);
    tm.n_parts = calloc((size_t)o.repeat, sizeof(int));
    tm.roof = calloc((size_t)o.repeat, sizeof(double));
    if (!logits || !argmax_ids || !tm.prefill || !tm.decode || !tm.seed || !tm.steps || !tm.bw0 || !tm.bw1 || !tm.bw ||
        !tm.pct || !tm.steady || !tm.ceil || !tm.parts || !tm.n_parts || !tm.roof) {
        cli_fail(CMD, "out of memory");
        goto out;
    }

    /* Untimed warm-up: one forward over the prompt faults in the weights and
     * the session's buffers. */
    if (moe_session_forward(s, ids, P, logits, false) != MOE_OK) goto fwd_fail;
    if (sb && moe_session_forward(sb, ids, P, logits, false) != MOE_OK) { s_fail = sb; goto fwd_fail; }
    /* Everything is allocated now (decode steps allocate nothing), and the
     * bandwidth measurements below map a buffer of their own: read the
     * high-water mark before the first one. */
    long long hwm = peak_rss_bytes();
    const uint64_t bpt = moe_model_bytes_per_token(m);
    /* the KV cache the decode steps read (positions P .. P+D-1), per step on
     * average: the bytes the weight-only limit leaves out */
    double kvpt = 0;
    if (o.windows & WIN_DECODE) {
        for (int i = 0; i < D; i++) kvpt += moe_session_kv_bytes_at(s, P + i);
        kvpt /= D;
    }

    for (int r = 0; r < o.repeat; r++) {
        /* --phases: the last repeat only, so earlier ones run as without it */
        const bool prof = o.phases && r == o.repeat - 1;
        if (o.windows & WIN_PREFILL) {
            moe_session_truncate(s, 0); /* KV empty */
            if (prof) moe_session_profile_enable(s, true);
            double t0 = now_s();
            if (moe_session_forward(s, ids, P, logits, false) != MOE_OK) goto fwd_fail;
            int32_t a = moe_argmax(logits, n_vocab);
            tm.prefill[r] = now_s() - t0;
            if (prof && profile_take(s, &prof_prefill, 1, tm.prefill[r]) != 0) {
                cli_fail(CMD, "--phases: cannot read the profile");
                goto out;
            }
            if (expected) check_step(&tc, "prefill", 0, o.ab ? 'A' : 0, logits, n_vocab, expected[0], a, tol);
        }
        if (o.windows & WIN_DECODE) {
            /* the read bandwidth right before the window (and right after it, below) */
            if (o.bandwidth && !o.ab) tm.bw0[r] = moe_measure_read_bandwidth(o.threads);
            if (sb) {                                     /* B's own seed, untimed, before A's window */
                moe_session_truncate(sb, 0);
                if (moe_session_forward(sb, ids, P, logits, false) != MOE_OK) { s_fail = sb; goto fwd_fail; }
            }
            moe_session_truncate(s, 0);
            double t0 = now_s();
            if (moe_session_forward(s, ids, P, logits, false) != MOE_OK) goto fwd_fail;
            argmax_ids[0] = moe_argmax(logits, n_vocab);
            if (expected) check_step(&tc, "decode", 0, o.ab ? 'A' : 0, logits, n_vocab, expected[0], argmax_ids[0], tol);
            if (prof) moe_session_profile_enable(s, true); /* the D steps, not the seed */
            double t1 = now_s(), t2;
            if (!o.ab) {
                for (int i = 0; i < D; i++) {
                    if (moe_session_forward(s, ids + P + i, 1, logits, false) != MOE_OK) goto fwd_fail;
                    argmax_ids[i + 1] = moe_argmax(logits, n_vocab);
                    /* Checked in the loop only because a tie needs this step's
                     * logits; a match costs one compare. */
                    if (expected && i + 1 < n_expected)
                        check_step(&tc, "decode", i + 1, 0, logits, n_vocab, expected[i + 1], argmax_ids[i + 1], tol);
                }
                t2 = now_s();
            } else {
                /* Each step timed alone (forward + argmax, as above); the
                 * flag switch and the check stay outside. The window's
                 * steps figure is then the sum of the timed steps, A and B
                 * mixed: the ab block is the result. */
                double sum = 0;
                for (int i = 0; i < D && !sb; i++) {
                    const char cfg = i % 2 ? 'B' : 'A';
                    if (moe_session_set_flags(s, i % 2 ? b_abs : a_abs, err, sizeof err) != MOE_OK) {
                        cli_fail(CMD, "--ab: %s", err);
                        goto out;
                    }
                    double ts = now_s();
                    if (moe_session_forward(s, ids + P + i, 1, logits, false) != MOE_OK) goto fwd_fail;
                    argmax_ids[i + 1] = moe_argmax(logits, n_vocab);
                    double dt = now_s() - ts;
                    step_s[(size_t)r * (size_t)D + (size_t)i] = dt;
                    sum += dt;
                    if (expected && i + 1 < n_expected)
                        check_step(&tc, "decode", i + 1, cfg, logits, n_vocab, expected[i + 1], argmax_ids[i + 1], tol);
                }
                /* A sibling B: each session must see every token, so every
                 * step runs both, A first on even steps and B first on odd
                 * ones; the pair is (A's step i, B's step i). The window's
                 * steps figure is A's. */
                for (int i = 0; i < D && sb; i++) {
                    for (int o2 = 0; o2 < 2; o2++) {
                        const bool is_b = (o2 ^ (i % 2)) != 0;
                        moe_session *cur = is_b ? sb : s;
                        double ts = now_s();
                        if (moe_session_forward(cur, ids + P + i, 1, logits, false) != MOE_OK) { s_fail = cur; goto fwd_fail; }
                        const int32_t am = moe_argmax(logits, n_vocab);
                        double dt = now_s() - ts;
                        (is_b ? step_sb : step_s)[(size_t)r * (size_t)D + (size_t)i] = dt;
                        if (!is_b) { sum += dt; argmax_ids[i + 1] = am; }
                        if (expected && i + 1 < n_expected && (!is_b || b_check))
                            check_step(&tc, "decode", i + 1, is_b ? 'B' : 'A', logits, n_vocab, expected[i + 1], am, tol);
                    }
                }
                /* the next window (prefill of the next repeat, the seed) runs A */
                if (moe_session_set_flags(s, a_abs, err, sizeof err) != MOE_OK) { cli_fail(CMD, "--ab: %s", err); goto out; }
                t2 = t1 + sum;
            }
            tm.seed[r] = t1 - t0;
            tm.steps[r] = t2 - t1;
            tm.decode[r] = t2 - t0;
            /* This VM's read bandwidth changes by up to 2x within minutes, so
             * one measurement at the end can belong to another state than
             * the runs; each decode window is set against the bandwidth
             * measured right before and right after it (stats_bw_windows;
             * the steps alone, as the limit is per step). Not under --ab:
             * its steps mix two configurations. */
            if (o.bandwidth && !o.ab) tm.bw1[r] = moe_measure_read_bandwidth(o.threads);
            /* and the compute side of the roofline, as the CPU runs now
             * (its speed drifts too): the step's matrix products from cache */
            if (o.bandwidth && !o.ab &&
                moe_session_compute_ceiling(s, tm.parts + (size_t)r * MAX_CEIL_PARTS, MAX_CEIL_PARTS, &tm.n_parts[r],
                                            &tm.ceil[r], err, sizeof err) != MOE_OK) {
                cli_fail(CMD, "compute ceiling: %s", err);
                goto out;
            }
            if (prof && profile_take(s, &prof_decode, D, tm.steps[r]) != 0) {
                cli_fail(CMD, "--phases: cannot read the profile");
                goto out;
            }
        }
    }

    char flags_buf[256] = "";
    moe_model_flags(m, flags_buf, sizeof flags_buf);
    const char *kern_name = moe_model_kernels(m); /* a static string: outlives the model */
    const int threads_used = s ? moe_session_threads(s) : o.threads;
    const char *arch = moe_model_arch(m);
    char arch_buf[64];
    snprintf(arch_buf, sizeof arch_buf, "%s", arch ? arch : "?");
    if (sb) moe_session_free(sb);                 /* the sibling before the session whose pool it uses */
    sb = NULL;
    if (s) moe_session_free(s);
    s = NULL;
    moe_model_free(m);
    m = NULL;

    const bool have_p = o.windows & WIN_PREFILL, have_d = o.windows & WIN_DECODE;
    double bw = 0, bw_lo = 0, bw_hi = 0, pct = 0;
    stats_bw_summary bws = {0, 0, 0, 0, 0, 0};
    if (have_d && o.bandwidth) {
        if (o.ab) {
            bw = bw_lo = bw_hi = moe_measure_read_bandwidth(o.threads);   /* once, as before */
        } else {
            /* each window against the bandwidth measured around it; the
             * summary over the windows during which it held steady */
            double rate[o.repeat];
            for (int r = 0; r < o.repeat; r++) rate[r] = tm.steps[r] > 0 ? (double)bpt * D / tm.steps[r] / 1e9 : 0;
            stats_bw_windows(tm.bw0, tm.bw1, rate, o.repeat, tm.bw, tm.pct, tm.steady, &bws);
            bw = bws.bw;
            pct = bws.pct;
            bw_lo = bws.lo;
            bw_hi = bws.hi;
        }
    }
    double p_s = have_p ? median(tm.prefill, o.repeat) : 0;
    double d_s = have_d ? median(tm.decode, o.repeat) : 0;
    double seed_s = have_d ? median(tm.seed, o.repeat) : 0;
    double steps_s = have_d ? median(tm.steps, o.repeat) : 0;
    double steps_tps = steps_s > 0 ? D / steps_s : 0;
    double achieved = (double)bpt * steps_tps / 1e9;
    bool have_bw = have_d && bw > 0;
    if (have_bw && o.ab) pct = 100.0 * achieved / bw;
    /* the same limit counting the KV cache's bytes too: (weights + KV) per
     * step / bandwidth, over the same step time */
    const double pct_kv = bpt ? pct * ((double)bpt + kvpt) / (double)bpt : 0;
    /* The roofline: the phases run one after another and each multiplies
     * one kind of matrix, so a step takes at least the sum over kernels of
     * its bytes at the slower of the read bandwidth and the kernel's rate
     * from cache (the rest of bytes_per_token, one embedding row, at the
     * bandwidth). Per window, against its own bandwidth and ceiling;
     * summarized over the same windows as the bandwidth limit. The last
     * window's kernels are the ones printed. Kinds past MAX_CEIL_PARTS (a
     * model with that many formats and row lengths) count at the bandwidth. */
    double ceil_s = 0, pct_roof = 0, roof_tps = 0;
    int last_parts = -1;
    if (have_d && o.bandwidth && !o.ab && bpt) {
        double cs[o.repeat], prs[o.repeat], rts[o.repeat];
        int nc = 0, np = 0;
        for (int r = 0; r < o.repeat; r++) {
            if (tm.ceil[r] <= 0) continue;
            cs[nc++] = tm.ceil[r];
            last_parts = r;
            if (tm.bw[r] <= 0 || tm.steps[r] <= 0) continue;
            const moe_ceiling_part *pp = tm.parts + (size_t)r * MAX_CEIL_PARTS;
            const double bwr = tm.bw[r] * 1e9;
            double rest = (double)bpt, roof = 0;
            for (int i = 0; i < tm.n_parts[r] && i < MAX_CEIL_PARTS; i++) {
                const double rate = pp[i].gb_per_s * 1e9 < bwr ? pp[i].gb_per_s * 1e9 : bwr;
                roof += rate > 0 ? pp[i].bytes_per_token / rate : 0;
                rest -= pp[i].bytes_per_token;
            }
            roof += rest > 0 ? rest / bwr : 0;
            tm.roof[r] = 100.0 * roof * D / tm.steps[r];
            if (bws.steady && !tm.steady[r]) continue;    /* the summary: the limit's windows */
            rts[np] = 1.0 / roof;
            prs[np++] = tm.roof[r];
        }
        ceil_s = nc ? median(cs, nc) : 0;
        pct_roof = np ? median(prs, np) : 0;
        roof_tps = np ? median(rts, np) : 0;
    }
    const bool have_ceil = ceil_s > 0 && last_parts >= 0;
    const moe_ceiling_part *ceil_parts = have_ceil ? tm.parts + (size_t)last_parts * MAX_CEIL_PARTS : NULL;
    const int n_ceil_parts = have_ceil ? tm.n_parts[last_parts] : 0;
    const double ceil_bw = have_ceil ? tm.bw[last_parts] : 0;   /* that window's bandwidth (0: none) */
    if (o.ab) {
        /* pairs: steps (2k, 2k+1) of every repeat (an odd D's last step, A,
         * has no partner); with a sibling B, A's and B's runs of each step */
        const int per = b_sibling ? D : D / 2, n = o.repeat * per;
        pair_a = malloc((size_t)n * sizeof *pair_a);
        pair_b = malloc((size_t)n * sizeof *pair_b);
        if (!pair_a || !pair_b) { cli_fail(CMD, "out of memory"); goto out; }
        for (int r = 0; r < o.repeat; r++)
            for (int k = 0; k < per; k++) {
                const size_t ia = (size_t)r * (size_t)D + (b_sibling ? (size_t)k : 2 * (size_t)k);
                pair_a[r * per + k] = step_s[ia];
                pair_b[r * per + k] = b_sibling ? step_sb[ia] : step_s[ia + 1];
            }
        if (ab_analyse(pair_a, pair_b, n, &ab) != 0) { cli_fail(CMD, "out of memory"); goto out; }
    }

    if (o.json) {
        json_t *root = json_object();
        json_object_set_new(root, "schema", json_string(BENCH_SCHEMA));
        json_t *jm = json_object();
        json_object_set_new(jm, "path", json_string(o.model));
        json_object_set_new(jm, "arch", json_string(arch_buf));
        json_object_set_new(jm, "n_vocab", json_integer(n_vocab));
        json_object_set_new(jm, "bytes_per_token", json_integer((json_int_t)bpt));
        json_object_set_new(root, "model", jm);
        json_t *jc = json_object();
        json_object_set_new(jc, "threads", json_integer(threads_used));
        json_object_set_new(jc, "flags", json_string(flags_buf));
        json_object_set_new(jc, "isa", json_string(kern_name));
        json_object_set_new(jc, "window", json_string(have_p && have_d ? "both" : have_p ? "prefill" : "decode"));
        json_object_set_new(jc, "prompt_len", json_integer(P));
        json_object_set_new(jc, "decode_steps", json_integer(D));
        json_object_set_new(jc, "repeat", json_integer(o.repeat));
        json_object_set_new(jc, "prompt_source", json_string(o.trace ? "trace" : "random"));
        json_object_set_new(jc, "trace", o.trace ? json_string(o.trace) : json_null());
        json_object_set_new(jc, "note", note[0] ? json_string(note) : json_null());
        json_object_set_new(root, "config", jc);
        json_object_set_new(root, "load_seconds", json_real(t_load));
        json_object_set_new(root, "peak_rss_bytes", json_integer(hwm));
        if (have_p) {
            json_t *jp = json_object();
            json_object_set_new(jp, "tokens", json_integer(P));
            json_object_set_new(jp, "seconds", json_real(p_s));
            json_object_set_new(jp, "seconds_per_token", json_real(p_s / P));
            json_object_set_new(jp, "tokens_per_second", json_real(p_s > 0 ? P / p_s : 0));
            json_object_set_new(jp, "runs_seconds", runs_array(tm.prefill, o.repeat));
            json_object_set_new(root, "prefill", jp);
        } else {
            json_object_set_new(root, "prefill", json_null());
        }
        if (have_d) {
            json_t *jd = json_object();
            json_object_set_new(jd, "seed_tokens", json_integer(P));
            json_object_set_new(jd, "steps", json_integer(D));
            json_object_set_new(jd, "seconds", json_real(d_s));
            json_object_set_new(jd, "seconds_per_token", json_real(d_s / D));
            json_object_set_new(jd, "tokens_per_second", json_real(d_s > 0 ? D / d_s : 0));
            json_object_set_new(jd, "seed_seconds", json_real(seed_s));
            json_object_set_new(jd, "steps_seconds", json_real(steps_s));
            json_object_set_new(jd, "steps_tokens_per_second", json_real(steps_tps));
            json_object_set_new(jd, "bytes_per_token", json_integer((json_int_t)bpt));
            json_object_set_new(jd, "achieved_gb_per_second", json_real(achieved));
            json_object_set_new(jd, "bandwidth_gb_per_second", num_or_null(have_bw, bw));
            json_object_set_new(jd, "pct_of_bandwidth_limit", num_or_null(have_bw, pct));
            json_object_set_new(jd, "kv_bytes_per_token", json_real(kvpt));
            json_object_set_new(jd, "pct_of_bandwidth_limit_with_kv", num_or_null(have_bw, pct_kv));
            if (have_ceil) {
                json_t *jce = json_object();
                json_object_set_new(jce, "seconds_per_token", json_real(ceil_s));
                json_object_set_new(jce, "tokens_per_second", json_real(1.0 / ceil_s));
                json_object_set_new(jce, "runs_seconds_per_token", runs_array(tm.ceil, o.repeat));
                json_t *jk = json_array();
                for (int i = 0; i < n_ceil_parts && i < MAX_CEIL_PARTS; i++) {
                    json_t *e = json_object();
                    json_object_set_new(e, "kernel", json_string(ceil_parts[i].kernel));
                    json_object_set_new(e, "bytes_per_token", json_real(ceil_parts[i].bytes_per_token));
                    json_object_set_new(e, "gb_per_second", json_real(ceil_parts[i].gb_per_s));
                    json_array_append_new(jk, e);
                }
                json_object_set_new(jce, "kernels", jk);
                json_object_set_new(jd, "compute_ceiling", jce);
            } else {
                json_object_set_new(jd, "compute_ceiling", json_null());
            }
            json_object_set_new(jd, "roofline_tokens_per_second", num_or_null(have_ceil && roof_tps > 0, roof_tps));
            json_object_set_new(jd, "pct_of_roofline", num_or_null(have_ceil && roof_tps > 0, pct_roof));
            json_object_set_new(jd, "pct_of_roofline_runs", have_ceil ? runs_array(tm.roof, o.repeat) : json_null());
            json_object_set_new(jd, "bandwidth_runs_gb_per_second",
                                have_bw && !o.ab ? runs_array(tm.bw, o.repeat) : json_null());
            json_object_set_new(jd, "bandwidth_before_runs_gb_per_second",
                                have_bw && !o.ab ? runs_array(tm.bw0, o.repeat) : json_null());
            json_object_set_new(jd, "bandwidth_after_runs_gb_per_second",
                                have_bw && !o.ab ? runs_array(tm.bw1, o.repeat) : json_null());
            json_t *st = json_array();
            for (int r = 0; r < o.repeat && have_bw && !o.ab; r++) json_array_append_new(st, json_boolean(tm.steady[r]));
            json_object_set_new(jd, "bandwidth_steady_runs", have_bw && !o.ab ? st : (json_decref(st), json_null()));
            json_object_set_new(jd, "pct_steady_windows", have_bw && !o.ab ? json_integer(bws.steady) : json_null());
            json_object_set_new(jd, "pct_runs", have_bw && !o.ab ? runs_array(tm.pct, o.repeat) : json_null());
            json_object_set_new(jd, "runs_seconds", runs_array(tm.decode, o.repeat));
            json_object_set_new(root, "decode", jd);
        } else {
            json_object_set_new(root, "decode", json_null());
        }
        if (o.trace) {
            json_t *jt = json_object();
            json_object_set_new(jt, "ok", json_boolean(tc.ok));
            json_object_set_new(jt, "checked", json_integer(tc.checked));
            json_object_set_new(jt, "ties", json_integer(tc.ties));
            json_object_set_new(jt, "first_mismatch_step", json_integer(tc.step));
            json_object_set_new(jt, "window", tc.window ? json_string(tc.window) : json_null());
            json_object_set_new(jt, "expected", json_integer(tc.expected));
            json_object_set_new(jt, "actual", json_integer(tc.actual));
            char cfg[2] = {tc.config, 0};
            json_object_set_new(jt, "config", tc.config ? json_string(cfg) : json_null());
            json_object_set_new(root, "token_check", jt);
        } else {
            json_object_set_new(root, "token_check", json_null());
        }
        if (o.ab) {
            json_t *ja = json_object();
            json_object_set_new(ja, "spec", json_string(o.ab));
            json_object_set_new(ja, "a_flags", json_string(a_flags));
            json_object_set_new(ja, "b_flags", json_string(b_flags));
            json_object_set_new(ja, "b_sibling_session", json_boolean(b_sibling));
            json_object_set_new(ja, "b_tokens_checked", json_boolean(b_check && o.trace));
            json_object_set_new(ja, "a_median_s", json_real(ab.a_med));
            json_object_set_new(ja, "b_median_s", json_real(ab.b_med));
            json_object_set_new(ja, "a_tokens_per_second", json_real(1.0 / ab.a_med));
            json_object_set_new(ja, "b_tokens_per_second", json_real(1.0 / ab.b_med));
            json_object_set_new(ja, "speedup", json_real(ab.speedup));
            json_object_set_new(ja, "lo", json_real(ab.lo));
            json_object_set_new(ja, "hi", json_real(ab.hi));
            json_object_set_new(ja, "pairs", json_integer(ab.pairs));
            json_object_set_new(ja, "resamples", json_integer(AB_RESAMPLES));
            json_object_set_new(ja, "seed", json_integer((json_int_t)AB_SEED));
            json_object_set_new(root, "ab", ja);
        } else {
            json_object_set_new(root, "ab", json_null());
        }
        if (o.phases) {
            json_t *jph = json_object();
            json_object_set_new(jph, "profiled_repeat", json_integer(o.repeat));
            json_object_set_new(jph, "decode", profile_json(&prof_decode, D));
            json_object_set_new(jph, "prefill", profile_json(&prof_prefill, P));
            json_object_set_new(root, "phases", jph);
        } else {
            json_object_set_new(root, "phases", json_null());
        }
        char *txt = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
        json_decref(root);
        if (!txt) { cli_fail(CMD, "out of memory"); goto out; }
        puts(txt);
        free(txt);
    } else {
        printf("moefast bench: %s (%s), %d thread%s, flags %s, isa %s\n", o.model, arch_buf, threads_used, threads_used == 1 ? "" : "s",
               flags_buf, kern_name);
        if (note[0]) printf("  note: %s\n", note);
        printf("  load                 %10.3f s\n", t_load);
        if (have_p)
            printf("  prefill  (%4d tok)  %10.2f tok/s   %9.3f ms/tok\n", P, P / p_s, 1e3 * p_s / P);
        if (have_d) {
            printf("  decode   (%d seed + %d steps)  %8.2f tok/s   %9.3f ms/tok\n", P, D, D / d_s, 1e3 * d_s / D);
            printf("  decode steps alone   %10.2f tok/s   %9.3f ms/tok  (seed %.3f s)\n", steps_tps,
                   1e3 * steps_s / D, seed_s);
            printf("  weights per token    %10.3f MB\n", (double)bpt / 1e6);
            printf("  KV cache per token   %10.3f MB  (mean over the steps: keys and values attention reads)\n",
                   kvpt / 1e6);
            printf("  achieved             %10.3f GB/s", achieved);
            if (have_bw && o.ab)
                printf("  = %.1f %% of the measured %.2f GB/s read bandwidth (limit %.1f tok/s)\n", pct, bw,
                       bpt ? bw * 1e9 / (double)bpt : 0.0);
            else if (have_bw && o.repeat == 1)
                printf("  = %.1f %% of the %.2f GB/s read bandwidth measured around the window (%.2f before, %.2f "
                       "after%s; limit %.1f tok/s)\n", pct, bw, tm.bw0[0], tm.bw1[0],
                       tm.steady[0] ? "" : ": NOT steady, the figure is doubtful", bpt ? bw * 1e9 / (double)bpt : 0.0);
            else if (have_bw)
                printf("\n  bandwidth limit      %10.1f %% (median over the %d of %d repeats whose read bandwidth, measured\n"
                       "                                  right before and right after the window, agreed within %.0f %%%s;\n"
                       "                                  window bandwidths %.2f..%.2f GB/s%s)\n",
                       pct, bws.steady ? bws.steady : bws.measured, o.repeat, 100.0 * (STATS_BW_STEADY - 1),
                       bws.steady ? "" : ": none did, so over all of them", bw_lo, bw_hi,
                       bw_hi > 1.25 * bw_lo ? "; the machine's bandwidth changed between repeats" : "");
            else
                printf("  (bandwidth not measured)\n");
            if (have_bw)
                printf("  limit with KV        %10.1f %% (the same, counting the KV cache's bytes too: (weights + KV)\n"
                       "                                  per step / bandwidth)\n", pct_kv);
            if (have_ceil) {
                printf("  compute ceiling      %10.1f tok/s (the step's matrix products with their weights in cache,\n"
                       "                                  %d thread%s; attention, norms and glue not in it), per kernel\n"
                       "                                  (measured after the last window):\n",
                       1.0 / ceil_s, threads_used, threads_used == 1 ? "" : "s");
                for (int i = 0; i < n_ceil_parts && i < MAX_CEIL_PARTS; i++)
                    printf("    %-28s %9.3f MB/token at %7.2f GB/s from cache = %6.3f ms%s\n", ceil_parts[i].kernel,
                           ceil_parts[i].bytes_per_token / 1e6, ceil_parts[i].gb_per_s,
                           ceil_parts[i].gb_per_s > 0 ? ceil_parts[i].bytes_per_token / ceil_parts[i].gb_per_s / 1e6 : 0.0,
                           ceil_parts[i].gb_per_s < ceil_bw ? "  (slower than that window's memory)" : "");
                if (roof_tps > 0)
                    printf("  roofline             %10.1f %% (the steps against the roofline, %.1f tok/s: each kernel's bytes at\n"
                           "                                  the slower of the read bandwidth and its rate from cache)\n",
                           pct_roof, roof_tps);
            }
        }
        if (o.ab) {
            printf("  in-process A/B (--ab %s%s): %d pairs of %s\n", o.ab[0] ? o.ab : "''",
                   strcmp(a_flags, b_flags) ? "" : ", B = A: an A/A control", ab.pairs,
                   b_sibling ? "runs of the same decode step, A first on even steps, B first on odd ones"
                             : "adjacent decode steps, A even, B odd");
            printf("    A %9.3f ms/step %10.2f tok/s   flags %s\n", 1e3 * ab.a_med, 1.0 / ab.a_med, a_flags);
            printf("    B %9.3f ms/step %10.2f tok/s   flags %s\n", 1e3 * ab.b_med, 1.0 / ab.b_med, b_flags);
            if (b_sibling)
                printf("    (B: a sibling session with its own KV cache and seed, same model and worker pool; the window's\n"
                       "     figures above are A's%s)\n",
                       b_check || !o.trace ? "" : "; its numerics differ from A's, so its tokens were not checked");
            printf("    speedup A/B of the medians %.4f [%.4f, %.4f] (bootstrap 95%%, %d resamples of the pairs, "
                   "seed %llu; > 1: B faster)\n", ab.speedup, ab.lo, ab.hi, AB_RESAMPLES, (unsigned long long)AB_SEED);
        }
        if (prof_prefill.have || prof_decode.have) {
            char title[256], rep_note[64] = "";
            if (o.repeat > 1) snprintf(rep_note, sizeof rep_note, " of the last repeat only (%d of %d)", o.repeat, o.repeat);
            if (prof_prefill.have) {
                snprintf(title, sizeof title, "phase profile, prefill window (%d tokens, one forward)%s, per window:", P,
                         rep_note);
                print_profile(title, &prof_prefill);
            }
            if (prof_decode.have) {
                snprintf(title, sizeof title, "phase profile, decode: the %d steps after the seed (context %d..%d)%s, "
                         "per step:", D, P + 1, P + D, rep_note);
                print_profile(title, &prof_decode);
            }
        }
        printf("  peak RSS (VmHWM)     %10.1f MB\n", hwm >= 0 ? (double)hwm / 1e6 : -1.0);
        if (o.trace) {
            if (tc.ok)
                printf("  token check          ok (%d steps checked, %d tolerated ties) against %s\n", tc.checked,
                       tc.ties, o.trace);
            else if (tc.config)
                printf("  token check          FAILED: %s step %d (run with flags %c) expected %d, got %d\n",
                       tc.window, tc.step, tc.config, tc.expected, tc.actual);
            else
                printf("  token check          FAILED: %s step %d expected %d, got %d\n", tc.window, tc.step,
                       tc.expected, tc.actual);
        } else {
            printf("  token check          none (no --trace; prompt = %d pseudo-random ids)\n", P);
        }
        if (o.repeat > 1) printf("  (medians of %d repeats)\n", o.repeat);
    }
    rc = tc.ok ? 0 : 1;
    goto out;

fwd_fail:
    cli_fail(CMD, "forward failed: %s", moe_session_error(s_fail ? s_fail : s));
    rc = 2;
out:
    free(step_s);
    free(step_sb);
    free(pair_a);
    free(pair_b);
    free(tm.prefill);
    free(tm.decode);
    free(tm.seed);
    free(tm.steps);
    free(tm.bw0);
    free(tm.bw1);
    free(tm.bw);
    free(tm.pct);
    free(tm.steady);
    free(tm.ceil);
    free(tm.parts);
    free(tm.n_parts);
    free(tm.roof);
    free(argmax_ids);
    free(logits);
    free(ids);
    if (tr) moe_trace_free(tr);
    if (sb) moe_session_free(sb);
    if (s) moe_session_free(s);
    moe_model_free(m);
    return rc;
}
