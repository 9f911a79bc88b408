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
#include <stdint.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

#define TIE_TOPK 8 /* the gate's rule: golden token within the top 8 */

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

static double median(const double *v, int n) {
    double tmp[n > 0 ? n : 1];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    return stats_median_inplace(tmp, n);
}

/* ---- --ab statistics ------------------------------------------------------
 * price's bootstrap (tools/price_report.c) is bound to its report structs, so
 * this is a small one of the same kind: percentile bootstrap, pairs resampled
 * with replacement, fixed seed. */

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
static bool tie_tolerated(const int32_t *ids, const float *vals, int32_t expected, float tol) {
    for (int j = 0; j < TIE_TOPK; j++)
        if (ids[j] == expected) return vals[0] - vals[j] <= tol;
    return false;
}

/* Records one checked step into tc (the argmax was already computed); config:
 * 'A'/'B' under --ab, else 0. */
static void check_step(token_check *tc, const char *window, int step, char config, const int32_t *ids,
                       const float *vals, int32_t expected, int32_t actual, float tol) {
    tc->checked++;
    if (actual == expected) return;
    if (tie_tolerated(ids, vals, expected, tol)) { tc->ties++; return; }
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
            "                     [--prompt-len P] [--decode-steps D] [--no-bandwidth] [--ab SPEC] [--cold]\n"
            "                     [--ab-sibling] [--phases] [--rope-scaling yarn --rope-scale F]\n"
            "  prefill window: one forward of a P-token prompt (default 512), seconds / P\n"
            "  decode window:  P-token seed prefill + D teacher-forced steps (default 128), seconds / D;\n"
            "           set against the read bandwidth measured before and after each window, and\n"
            "           against the roofline: each kind of matrix product and the attention items\n"
            "           timed from cache right after the window, its bytes (weights, KV cache) at\n"
            "           the slower of that rate and the bandwidth\n"
            "           (--no-bandwidth skips both; docs/MEASUREMENT.md)\n"
            "  --trace: prompt and teacher-forced tokens from the trace's first case, every\n"
            "           step's argmax checked against it (see docs/MEASUREMENT.md)\n"
            "  --ab SPEC: in-process A/B of the decode steps: even steps run the flags A\n"
            "           (--flags), odd steps A changed by SPEC (B, e.g. -parallel_glue), in one\n"
            "           session; reports each one's median step and the speedup A/B with a\n"
            "           bootstrap 95%% interval over adjacent step pairs. Only flags read while\n"
            "           forwarding can differ (simd, gemm_batch, gemm_wide, key_stream,\n"
            "           fused_gate_up, parallel_glue, value_prefetch, kv_prefetch; gemm_batch and\n"
            "           gemm_wide act in prefill only, key_stream and the prefetches in decode only).\n"
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
            "           prefill window when it runs. Not with --ab.\n"
            "  --cold: no untimed warm-up forward before the windows: the prefill window is\n"
            "           the process's first forward (the first touch of the weights' pages and\n"
            "           the session's buffers). One repeat, a prefill window, no --ab.\n");
}

static int parse_args(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.threads = 0, .windows = WIN_PREFILL | WIN_DECODE, .repeat = 1,
                      .prompt_len = 512, .decode_steps = 128, .bandwidth = true};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        int rr;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 1; }
        else if ((rr = cli_rope_arg(CMD, a, v, &o->rope)) != 0) {
            if (rr < 0) return -1;
            i++;
        }
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--no-bandwidth")) o->bandwidth = false;
        else if (!strcmp(a, "--phases")) o->phases = true;
        else if (!strcmp(a, "--cold")) o->cold = true;
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
    /* only the first forward of a process is cold */
    if (o->cold && (o->repeat > 1 || o->ab || !(o->windows & WIN_PREFILL)))
        return cli_fail(CMD, "--cold times the process's first forward: one repeat, no --ab, a prefill window"), -1;
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

/* ---- the run ------------------------------------------------------------------
 * Each step below returns 0, or 2 after printing its error. */

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

/* One forward whose output is the top of the last token (all the bench
 * reads): the argmax, and with --trace the tie rule's top 8, into
 * b->top_ids / top_vals. A top 8 costs the lm-head screen more than an
 * argmax (its bound must reach the 8th logit), so only --trace asks for it. */
static int fwd_top(bench_run *b, moe_session *s, const int32_t *tok, int n) {
    const int k = !b->expected ? 1 : b->n_vocab < TIE_TOPK ? b->n_vocab : TIE_TOPK;
    for (int j = k; j < TIE_TOPK; j++) b->top_ids[j] = -1;
    return moe_session_forward_topk(s, tok, n, k, b->top_ids, b->top_vals);
}

static int fwd_fail(const moe_session *s) {
    return cli_fail(CMD, "forward failed: %s", moe_session_error(s));
}

/* The token sequence: the prompt (P ids) then the D teacher-forced inputs,
 * from the trace's first case (which may shorten P and D: said in b->note)
 * or pseudo-random. */
static int prepare_ids(bench_run *b) {
    const char *trace = b->o.trace;
    const int n_vocab = b->n_vocab;
    char err[MOE_ERR_LEN];
    int P = b->o.prompt_len, D = b->o.decode_steps;
    if (trace) {
        if (moe_trace_load(trace, &b->tr, err, sizeof err) != MOE_OK) return cli_fail(CMD, "%s", err);
        if (moe_trace_check_model(b->tr, b->m, err, sizeof err) != MOE_OK)
            return cli_fail(CMD, "trace %s does not belong to this model: %s", trace, err);
        const moe_trace_case *c = moe_trace_n_cases(b->tr) > 0 ? moe_trace_case_at(b->tr, 0) : NULL;
        if (!c || c->n_prompt < 1 || c->n_expected < 1)
            return cli_fail(CMD, "trace %s: needs a first case with a prompt and expected tokens", trace);
        b->tol = moe_trace_tie_tolerance(b->tr);
        b->expected = c->expected;
        b->n_expected = c->n_expected;
        /* The trace defines the lengths when it is shorter than asked: say so. */
        if (c->n_prompt != P || c->n_expected < D) {
            int d2 = c->n_expected < D ? c->n_expected : D;
            snprintf(b->note, sizeof b->note, "trace case '%s' has a %d-token prompt and %d expected tokens: "
                     "windows use prompt %d and %d decode steps (asked %d and %d)",
                     c->name ? c->name : "0", c->n_prompt, c->n_expected, c->n_prompt, d2, P, D);
            P = c->n_prompt;
            D = d2;
        }
        b->ids = malloc((size_t)(P + D) * sizeof *b->ids);
        if (!b->ids) return cli_fail(CMD, "out of memory");
        memcpy(b->ids, c->prompt, (size_t)P * sizeof *b->ids);
        memcpy(b->ids + P, c->expected, (size_t)D * sizeof *b->ids);
        for (int i = 0; i < P + D; i++)
            if (b->ids[i] < 0 || b->ids[i] >= n_vocab)
                return cli_fail(CMD, "trace %s: token id %d at position %d is outside the vocabulary (%d)", trace,
                                b->ids[i], i, n_vocab);
    } else {
        b->ids = malloc((size_t)(P + D) * sizeof *b->ids);
        if (!b->ids) return cli_fail(CMD, "out of memory");
        random_ids(b->ids, P + D, n_vocab);
    }
    b->P = P;
    b->D = D;
    return 0;
}

/* --ab: B is A changed by the spec: switched on the live session when the
 * spec allows it, else a sibling session (a KV cache format); a flag fixed
 * at load is refused here, with the library's message. */
static int setup_ab(bench_run *b) {
    char err[MOE_ERR_LEN];
    moe_session_flags(b->s, b->a_flags, sizeof b->a_flags);
    if (b->o.ab_sibling || moe_session_set_flags(b->s, b->o.ab, err, sizeof err) != MOE_OK) {
        if (moe_session_new_sibling(b->s, b->o.ab, &b->sb, err, sizeof err) != MOE_OK)
            return cli_fail(CMD, "--ab: %s", err);
        b->b_sibling = true;
        moe_session_flags(b->sb, b->b_flags, sizeof b->b_flags);
        char na[256], nb[256];
        if (moe_flags_numerics_of(b->a_flags, na, sizeof na, err, sizeof err) != MOE_OK ||
            moe_flags_numerics_of(b->b_flags, nb, sizeof nb, err, sizeof err) != MOE_OK)
            return cli_fail(CMD, "--ab: %s", err);
        b->b_check = !strcmp(na, nb);
    } else {
        moe_session_flags(b->s, b->b_flags, sizeof b->b_flags);
    }
    snprintf(b->a_abs, sizeof b->a_abs, "none,%s", b->a_flags);
    snprintf(b->b_abs, sizeof b->b_abs, "none,%s", b->b_flags);
    if (moe_session_set_flags(b->s, b->a_abs, err, sizeof err) != MOE_OK) return cli_fail(CMD, "--ab: %s", err);
    const size_t n = (size_t)b->o.repeat * (size_t)b->D;
    b->step_s = malloc(n * sizeof *b->step_s);
    if (b->sb) b->step_sb = malloc(n * sizeof *b->step_sb);
    if (!b->step_s || (b->sb && !b->step_sb)) return cli_fail(CMD, "out of memory");
    return 0;
}

static int alloc_buffers(bench_run *b) {
    const size_t R = (size_t)b->o.repeat;
    timings *tm = &b->tm;
    b->logits = malloc((size_t)b->n_vocab * sizeof *b->logits);
    b->argmax_ids = malloc((size_t)(b->D + 1) * sizeof *b->argmax_ids);
    tm->prefill = calloc(R, sizeof(double));
    tm->decode = calloc(R, sizeof(double));
    tm->seed = calloc(R, sizeof(double));
    tm->steps = calloc(R, sizeof(double));
    tm->bw0 = calloc(R, sizeof(double));
    tm->bw1 = calloc(R, sizeof(double));
    tm->bw = calloc(R, sizeof(double));
    tm->pct = calloc(R, sizeof(double));
    tm->steady = calloc(R, sizeof(int));
    tm->ceil = calloc(R, sizeof(double));
    tm->parts = calloc(R * MAX_CEIL_PARTS, sizeof *tm->parts);
    tm->n_parts = calloc(R, sizeof(int));
    tm->roof = calloc(R, sizeof(double));
    tm->roof_w = calloc(R, sizeof(double));
    tm->attn = calloc(R, sizeof *tm->attn);
    if (!b->logits || !b->argmax_ids || !tm->prefill || !tm->decode || !tm->seed || !tm->steps || !tm->bw0 ||
        !tm->bw1 || !tm->bw || !tm->pct || !tm->steady || !tm->ceil || !tm->parts || !tm->n_parts || !tm->roof ||
        !tm->roof_w || !tm->attn)
        return cli_fail(CMD, "out of memory");
    return 0;
}

/* Model, token sequence, session(s) and buffers; then an untimed warm-up
 * forward over the prompt, which faults in the weights and the session's
 * buffers. */
static int bench_setup(bench_run *b) {
    char err[MOE_ERR_LEN] = "";
    moe_load_params lp = b->o.rope;
    lp.flags = b->o.flags;
    b->t_load = now_s();
    if (cli_model_load(b->o.model, &lp, &b->m, err, sizeof err) != MOE_OK) return cli_fail(CMD, "%s", err);
    b->t_load = now_s() - b->t_load;
    b->n_vocab = moe_model_n_vocab(b->m);
    if (prepare_ids(b)) return 2;
    if (b->o.ab && b->D < 2)
        return cli_fail(CMD, "--ab needs at least 2 decode steps (one A and one B), have %d", b->D);
    moe_session_params sp = {.n_ctx = b->P + b->D + 1, .n_threads = b->o.threads, .n_batch = 0};
    if (moe_session_new(b->m, &sp, &b->s, err, sizeof err) != MOE_OK) return cli_fail(CMD, "%s", err);
    if (b->o.ab && setup_ab(b)) return 2;
    if (alloc_buffers(b)) return 2;

    /* --cold: none, so the prefill window pays the first touch of the
     * weights' pages and the session's buffers */
    if (!b->o.cold && fwd_top(b, b->s, b->ids, b->P) != MOE_OK) return fwd_fail(b->s);
    if (b->sb && fwd_top(b, b->sb, b->ids, b->P) != MOE_OK) return fwd_fail(b->sb);
    /* Everything is allocated now (decode steps allocate nothing), and the
     * bandwidth measurements map a buffer of their own: read the high-water
     * mark before the first one. */
    b->hwm = moe_proc_status_bytes("VmHWM");
    /* one probe buffer for every window, mapped now and kept: an unmapped
     * one's pages went to the next first touch (lab.h, moe_membw_new) */
    if (b->o.bandwidth && !b->o.ab && !(b->probe = moe_membw_new(b->o.threads)))
        return cli_fail(CMD, "out of memory for the bandwidth probe's buffer (--no-bandwidth skips it)");
    b->bpt = moe_model_bytes_per_token(b->m);
    /* the KV cache the decode steps read (positions P .. P+D-1), per step on
     * average: the bytes the weight-only limit leaves out */
    b->kvpt = 0;
    if (b->o.windows & WIN_DECODE) {
        for (int i = 0; i < b->D; i++) b->kvpt += moe_session_kv_bytes_at(b->s, b->P + i);
        b->kvpt /= b->D;
    }
    return 0;
}

/* The prefill window of repeat r: one forward of the P-token prompt on an
 * empty KV cache, plus the argmax of its last logits. */
static int prefill_window(bench_run *b, int r, bool prof) {
    moe_session *s = b->s;
    moe_session_truncate(s, 0); /* KV empty */
    if (prof) moe_session_profile_enable(s, true);
    double t0 = now_s();
    if (fwd_top(b, s, b->ids, b->P) != MOE_OK) return fwd_fail(s);
    int32_t a = b->top_ids[0];
    b->tm.prefill[r] = now_s() - t0;
    if (prof && profile_take(s, &b->prof_prefill, 1, b->tm.prefill[r]) != 0)
        return cli_fail(CMD, "--phases: cannot read the profile");
    if (b->expected)
        check_step(&b->tc, "prefill", 0, b->o.ab ? 'A' : 0, b->top_ids, b->top_vals, b->expected[0], a, b->tol);
    return 0;
}

/* The D decode steps, each a forward and an argmax. Checked in the loop only
 * because a tie needs this step's logits; a match costs one compare. */
static int decode_steps(bench_run *b) {
    const int32_t *in = b->ids + b->P;
    for (int i = 0; i < b->D; i++) {
        if (fwd_top(b, b->s, in + i, 1) != MOE_OK) return fwd_fail(b->s);
        b->argmax_ids[i + 1] = b->top_ids[0];
        if (b->expected && i + 1 < b->n_expected)
            check_step(&b->tc, "decode", i + 1, 0, b->top_ids, b->top_vals, b->expected[i + 1], b->argmax_ids[i + 1],
                       b->tol);
    }
    return 0;
}

/* --ab on the live session: even steps run A, odd ones B. Each step is timed
 * alone (forward + argmax, as above); the flag switch and the check stay
 * outside. *sum: the timed steps' seconds, A and B mixed. */
static int decode_steps_ab_live(bench_run *b, int r, double *sum) {
    char err[MOE_ERR_LEN];
    const int32_t *in = b->ids + b->P;
    for (int i = 0; i < b->D; i++) {
        const char cfg = i % 2 ? 'B' : 'A';
        if (moe_session_set_flags(b->s, i % 2 ? b->b_abs : b->a_abs, err, sizeof err) != MOE_OK)
            return cli_fail(CMD, "--ab: %s", err);
        double ts = now_s();
        if (fwd_top(b, b->s, in + i, 1) != MOE_OK) return fwd_fail(b->s);
        b->argmax_ids[i + 1] = b->top_ids[0];
        double dt = now_s() - ts;
        b->step_s[(size_t)r * (size_t)b->D + (size_t)i] = dt;
        *sum += dt;
        if (b->expected && i + 1 < b->n_expected)
            check_step(&b->tc, "decode", i + 1, cfg, b->top_ids, b->top_vals, b->expected[i + 1], b->argmax_ids[i + 1],
                       b->tol);
    }
    return 0;
}

/* --ab with a sibling B: each session must see every token, so every step
 * runs both, A first on even steps and B first on odd ones; the pair is (A's
 * step i, B's step i). *sum: A's steps only (the window's figure is A's). */
static int decode_steps_ab_sibling(bench_run *b, int r, double *sum) {
    const int32_t *in = b->ids + b->P;
    for (int i = 0; i < b->D; i++) {
        for (int o2 = 0; o2 < 2; o2++) {
            const bool is_b = (o2 ^ (i % 2)) != 0;
            moe_session *cur = is_b ? b->sb : b->s;
            double ts = now_s();
            if (fwd_top(b, cur, in + i, 1) != MOE_OK) return fwd_fail(cur);
            const int32_t am = b->top_ids[0];
            double dt = now_s() - ts;
            (is_b ? b->step_sb : b->step_s)[(size_t)r * (size_t)b->D + (size_t)i] = dt;
            if (!is_b) { *sum += dt; b->argmax_ids[i + 1] = am; }
            if (b->expected && i + 1 < b->n_expected && (!is_b || b->b_check))
                check_step(&b->tc, "decode", i + 1, is_b ? 'B' : 'A', b->top_ids, b->top_vals, b->expected[i + 1], am,
                           b->tol);
        }
    }
    return 0;
}

/* The decode window of repeat r: the P-token seed prefill and the D steps,
 * with the read bandwidth measured right before and right after it and the
 * compute ceiling right after (not under --ab). */
static int decode_window(bench_run *b, int r, bool prof) {
    const bench_opts *o = &b->o;
    timings *tm = &b->tm;
    moe_session *s = b->s;
    char err[MOE_ERR_LEN];
    /* the read bandwidth right before the window (and right after it, below) */
    if (o->bandwidth && !o->ab) tm->bw0[r] = moe_membw_measure(b->probe);
    if (b->sb) {                                     /* B's own seed, untimed, before A's window */
        moe_session_truncate(b->sb, 0);
        if (fwd_top(b, b->sb, b->ids, b->P) != MOE_OK) return fwd_fail(b->sb);
    }
    moe_session_truncate(s, 0);
    double t0 = now_s();
    if (fwd_top(b, s, b->ids, b->P) != MOE_OK) return fwd_fail(s);
    b->argmax_ids[0] = b->top_ids[0];
    if (b->expected)
        check_step(&b->tc, "decode", 0, o->ab ? 'A' : 0, b->top_ids, b->top_vals, b->expected[0], b->argmax_ids[0],
                   b->tol);
    if (prof) moe_session_profile_enable(s, true); /* the D steps, not the seed */
    double t1 = now_s(), t2;
    if (!o->ab) {
        if (decode_steps(b)) return 2;
        t2 = now_s();
    } else {
        /* the window's steps figure is then the sum of the timed steps: the
         * ab block is the result */
        double sum = 0;
        if ((b->sb ? decode_steps_ab_sibling : decode_steps_ab_live)(b, r, &sum)) return 2;
        /* the next window (prefill of the next repeat, the seed) runs A */
        if (moe_session_set_flags(s, b->a_abs, err, sizeof err) != MOE_OK) return cli_fail(CMD, "--ab: %s", err);
        t2 = t1 + sum;
    }
    tm->seed[r] = t1 - t0;
    tm->steps[r] = t2 - t1;
    tm->decode[r] = t2 - t0;
    /* This VM's read bandwidth changes by up to 2x within minutes, so one
     * measurement at the end can belong to another state than the runs; each
     * decode window is set against the bandwidth measured right before and
     * right after it (stats_bw_windows; the steps alone, as the limit is per
     * step). Not under --ab: its steps mix two configurations. */
    if (o->bandwidth && !o->ab) tm->bw1[r] = moe_membw_measure(b->probe);
    /* and the compute side of the roofline, as the CPU runs now (its speed
     * drifts too): the step's matrix products from cache */
    if (o->bandwidth && !o->ab &&
        moe_session_compute_ceiling(s, tm->parts + (size_t)r * MAX_CEIL_PARTS, MAX_CEIL_PARTS, &tm->n_parts[r],
                                    &tm->ceil[r], err, sizeof err) != MOE_OK)
        return cli_fail(CMD, "compute ceiling: %s", err);
    /* the attention items from cache, at the steps' mean position (the
     * positions they read are all cached now); their bytes scaled to the
     * steps' mean KV bytes, as the limit with KV counts them */
    if (o->bandwidth && !o->ab) {
        moe_ceiling_part *a = &tm->attn[r];
        double kv_at = 0;
        if (moe_session_attention_ceiling(s, b->P + b->D / 2, a, &kv_at, err, sizeof err) != MOE_OK)
            return cli_fail(CMD, "attention ceiling: %s", err);
        a->bytes_per_token = kv_at > 0 ? a->bytes_per_token * b->kvpt / kv_at : 0;
        if (a->gb_per_s > 0) tm->ceil[r] += a->bytes_per_token / (a->gb_per_s * 1e9);
    }
    if (prof && profile_take(s, &b->prof_decode, b->D, tm->steps[r]) != 0)
        return cli_fail(CMD, "--phases: cannot read the profile");
    return 0;
}

/* The model's and session's facts the report prints; then both are freed
 * (the sibling before the session whose pool it uses). */
static void bench_release(bench_run *b) {
    moe_model_flags(b->m, b->flags_buf, sizeof b->flags_buf);
    b->kern_name = moe_model_kernels(b->m);
    b->threads_used = b->s ? moe_session_threads(b->s) : b->o.threads;
    const char *arch = moe_model_arch(b->m);
    snprintf(b->arch_buf, sizeof b->arch_buf, "%s", arch ? arch : "?");
    if (b->sb) moe_session_free(b->sb);
    b->sb = NULL;
    if (b->s) moe_session_free(b->s);
    b->s = NULL;
    moe_model_free(b->m);
    b->m = NULL;
}

/* ---- the summary over the repeats -------------------------------------------- */

/* The bandwidth limit: each window against the bandwidth measured around it,
 * summarized over the windows during which it held steady; under --ab one
 * measurement now (the steps mix two configurations). */
static void summarize_bandwidth(bench_run *b) {
    bench_summary *u = &b->sum;
    timings *tm = &b->tm;
    const int R = b->o.repeat;
    if (!(u->have_d && b->o.bandwidth)) return;
    if (b->o.ab) {
        u->bw = u->bw_lo = u->bw_hi = moe_measure_read_bandwidth(b->o.threads);   /* once, as before */
        return;
    }
    double rate[R];
    for (int r = 0; r < R; r++) rate[r] = tm->steps[r] > 0 ? (double)b->bpt * b->D / tm->steps[r] / 1e9 : 0;
    stats_bw_windows(tm->bw0, tm->bw1, rate, R, tm->bw, tm->pct, tm->steady, &u->bws);
    u->bw = u->bws.bw;
    u->pct = u->bws.pct;
    u->bw_lo = u->bws.lo;
    u->bw_hi = u->bws.hi;
}

/* The roofline: the phases run one after another and each multiplies one
 * kind of matrix, so a step takes at least the sum over kernels of its bytes
 * at the slower of the read bandwidth and the kernel's rate from cache (the
 * rest of bytes_per_token, one embedding row, at the bandwidth) — the
 * weights' kernels and attention's, whose operand is the KV cache (its mean
 * bytes per step; layers whose attention is not timed at the bandwidth).
 * Per window, against its own bandwidth and ceiling; summarized over the
 * same windows as the bandwidth limit. The last window's kernels are the
 * ones printed. Kinds past MAX_CEIL_PARTS (a model with that many formats and
 * row lengths) count at the bandwidth. Also the weights' roofline alone. */
static double weights_roof(const timings *tm, int r, double bpt, double bwr) {
    const moe_ceiling_part *pp = tm->parts + (size_t)r * MAX_CEIL_PARTS;
    double rest = bpt, roof = 0;
    for (int i = 0; i < tm->n_parts[r] && i < MAX_CEIL_PARTS; i++) {
        const double rate = pp[i].gb_per_s * 1e9 < bwr ? pp[i].gb_per_s * 1e9 : bwr;
        roof += rate > 0 ? pp[i].bytes_per_token / rate : 0;
        rest -= pp[i].bytes_per_token;
    }
    return roof + (rest > 0 ? rest / bwr : 0);
}

static double attention_roof(const timings *tm, int r, double kvpt, double bwr) {
    const moe_ceiling_part *a = &tm->attn[r];
    const double timed = a->gb_per_s > 0 ? a->bytes_per_token : 0, untimed = kvpt - timed;
    const double rate = a->gb_per_s * 1e9 < bwr ? a->gb_per_s * 1e9 : bwr;
    return (timed > 0 ? timed / rate : 0) + (untimed > 0 ? untimed / bwr : 0);
}

static void summarize_roofline(bench_run *b) {
    bench_summary *u = &b->sum;
    timings *tm = &b->tm;
    const int R = b->o.repeat;
    int last_parts = -1;
    if (u->have_d && b->o.bandwidth && !b->o.ab && b->bpt) {
        double cs[R], prs[R], pws[R], rts[R];
        int nc = 0, np = 0;
        for (int r = 0; r < R; r++) {
            if (tm->ceil[r] <= 0) continue;
            cs[nc++] = tm->ceil[r];
            last_parts = r;
            if (tm->bw[r] <= 0 || tm->steps[r] <= 0) continue;
            const double bwr = tm->bw[r] * 1e9, roof_w = weights_roof(tm, r, (double)b->bpt, bwr);
            const double roof = roof_w + attention_roof(tm, r, b->kvpt, bwr);
            tm->roof[r] = 100.0 * roof * b->D / tm->steps[r];
            tm->roof_w[r] = 100.0 * roof_w * b->D / tm->steps[r];
            if (u->bws.steady && !tm->steady[r]) continue;    /* the summary: the limit's windows */
            rts[np] = 1.0 / roof;
            pws[np] = tm->roof_w[r];
            prs[np++] = tm->roof[r];
        }
        u->ceil_s = nc ? median(cs, nc) : 0;
        u->pct_roof = np ? median(prs, np) : 0;
        u->pct_roof_w = np ? median(pws, np) : 0;
        u->roof_tps = np ? median(rts, np) : 0;
    }
    u->have_ceil = u->ceil_s > 0 && last_parts >= 0;
    u->ceil_parts = u->have_ceil ? tm->parts + (size_t)last_parts * MAX_CEIL_PARTS : NULL;
    u->n_ceil_parts = u->have_ceil ? tm->n_parts[last_parts] : 0;
    u->ceil_bw = u->have_ceil ? tm->bw[last_parts] : 0;
    u->attn_part = u->have_ceil ? &tm->attn[last_parts] : NULL;
}

/* --ab pairs: steps (2k, 2k+1) of every repeat (an odd D's last step, A, has
 * no partner); with a sibling B, A's and B's runs of each step. */
static int summarize_ab(bench_run *b) {
    const int D = b->D, per = b->b_sibling ? D : D / 2, n = b->o.repeat * per;
    b->pair_a = malloc((size_t)n * sizeof *b->pair_a);
    b->pair_b = malloc((size_t)n * sizeof *b->pair_b);
    if (!b->pair_a || !b->pair_b) return cli_fail(CMD, "out of memory");
    for (int r = 0; r < b->o.repeat; r++)
        for (int k = 0; k < per; k++) {
            const size_t ia = (size_t)r * (size_t)D + (b->b_sibling ? (size_t)k : 2 * (size_t)k);
            b->pair_a[r * per + k] = b->step_s[ia];
            b->pair_b[r * per + k] = b->b_sibling ? b->step_sb[ia] : b->step_s[ia + 1];
        }
    if (ab_analyse(b->pair_a, b->pair_b, n, &b->ab) != 0) return cli_fail(CMD, "out of memory");
    return 0;
}

static int bench_summarize(bench_run *b) {
    bench_summary *u = &b->sum;
    const timings *tm = &b->tm;
    const int R = b->o.repeat;
    u->have_p = b->o.windows & WIN_PREFILL;
    u->have_d = b->o.windows & WIN_DECODE;
    summarize_bandwidth(b);
    u->p_s = u->have_p ? median(tm->prefill, R) : 0;
    u->d_s = u->have_d ? median(tm->decode, R) : 0;
    u->seed_s = u->have_d ? median(tm->seed, R) : 0;
    u->steps_s = u->have_d ? median(tm->steps, R) : 0;
    u->steps_tps = u->steps_s > 0 ? b->D / u->steps_s : 0;
    u->achieved = (double)b->bpt * u->steps_tps / 1e9;
    u->have_bw = u->have_d && u->bw > 0;
    if (u->have_bw && b->o.ab) u->pct = 100.0 * u->achieved / u->bw;
    /* the same limit counting the KV cache's bytes too: (weights + KV) per
     * step / bandwidth, over the same step time */
    u->pct_kv = b->bpt ? u->pct * ((double)b->bpt + b->kvpt) / (double)b->bpt : 0;
    summarize_roofline(b);
    return b->o.ab ? summarize_ab(b) : 0;
}

static void bench_free(bench_run *b) {
    free(b->step_s);
    free(b->step_sb);
    free(b->pair_a);
    free(b->pair_b);
    free(b->tm.prefill);
    free(b->tm.decode);
    free(b->tm.seed);
    free(b->tm.steps);
    free(b->tm.bw0);
    free(b->tm.bw1);
    free(b->tm.bw);
    free(b->tm.pct);
    free(b->tm.steady);
    free(b->tm.ceil);
    free(b->tm.parts);
    free(b->tm.n_parts);
    free(b->tm.roof);
    free(b->tm.roof_w);
    free(b->tm.attn);
    free(b->argmax_ids);
    free(b->logits);
    free(b->ids);
    if (b->tr) moe_trace_free(b->tr);
    moe_membw_free(b->probe);
    if (b->sb) moe_session_free(b->sb);
    if (b->s) moe_session_free(b->s);
    moe_model_free(b->m);
    free(b);
}

int cmd_bench(int argc, char **argv) {
    /* on the heap: the two phase profiles hold 64 entries each */
    bench_run *b = calloc(1, sizeof *b);
    if (!b) return cli_fail(CMD, "out of memory");
    int pr = parse_args(argc, argv, &b->o);
    if (pr) {
        free(b);
        return pr > 0 ? 0 : 2;
    }
    b->tc = (token_check){.ok = true, .step = -1, .window = NULL, .config = 0, .expected = -1, .actual = -1};
    b->b_check = true;
    int rc = bench_setup(b);
    for (int r = 0; r < b->o.repeat && !rc; r++) {
        /* --phases: the last repeat only, so earlier ones run as without it */
        const bool prof = b->o.phases && r == b->o.repeat - 1;
        if (b->o.windows & WIN_PREFILL) rc = prefill_window(b, r, prof);
        if (!rc && (b->o.windows & WIN_DECODE)) rc = decode_window(b, r, prof);
    }
    if (!rc) {
        bench_release(b);
        rc = bench_summarize(b);
    }
    if (!rc) {
        if (b->o.json) rc = bench_report_json(b);
        else bench_report_text(b);
    }
    if (!rc) rc = b->tc.ok ? 0 : 1;
    bench_free(b);
    return rc;
}
