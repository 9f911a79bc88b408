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
 * and the JSON schema ("moefast.bench/1"), which `moefast price` parses. */
#include <errno.h>
#include <jansson.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "moefast.h"

#define CMD "bench"
#define BENCH_SCHEMA "moefast.bench/1"
#define TIE_TOPK 8 /* the gate's rule: golden token within the top 8 */

enum { WIN_PREFILL = 1, WIN_DECODE = 2 };

typedef struct {
    const char *model, *flags, *trace;
    int threads, windows, repeat, prompt_len, decode_steps;
    bool json, bandwidth;
} bench_opts;

/* One token-check failure (or the first tolerated tie, for the record). */
typedef struct {
    bool ok;
    int checked, ties;
    int step;            /* first failing step (-1: none); 0 = token after the prompt */
    const char *window;  /* where it failed */
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

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double tmp[n > 0 ? n : 1];
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

/* Deterministic pseudo-random ids in [0, n_vocab): splitmix64, fixed seed, so
 * every run and every binary times the same token sequence. */
static void random_ids(int32_t *ids, int n, int n_vocab) {
    uint64_t x = 0x6d6f65666173744bull;
    for (int i = 0; i < n; i++) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        ids[i] = (int32_t)(z % (uint64_t)n_vocab);
    }
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

/* Records one checked step into tc (the argmax was already computed). */
static void check_step(token_check *tc, const char *window, int step, const float *logits, int n_vocab,
                       int32_t expected, int32_t actual, float tol) {
    tc->checked++;
    if (actual == expected) return;
    if (tie_tolerated(logits, n_vocab, expected, actual, tol)) { tc->ties++; return; }
    if (tc->ok) {
        tc->ok = false;
        tc->step = step;
        tc->window = window;
        tc->expected = expected;
        tc->actual = actual;
    }
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: moefast bench -m FILE [-t N] [--json] [--flags SPEC] [--trace FILE]\n"
            "                     [--window prefill|decode|both] [--repeat R]\n"
            "                     [--prompt-len P] [--decode-steps D] [--no-bandwidth]\n"
            "  prefill window: one forward of a P-token prompt (default 512), seconds / P\n"
            "  decode window:  P-token seed prefill + D teacher-forced steps (default 128), seconds / D\n"
            "  --trace: prompt and teacher-forced tokens from the trace's first case, every\n"
            "           step's argmax checked against it (see docs/MEASUREMENT.md)\n");
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
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!v) return cli_fail(CMD, "%s needs a file", a), -1;
            o->model = v; i++;
        } else if (!strncmp(a, "--flags=", 8)) {
            o->flags = a + 8;
        } else if (!strcmp(a, "--flags")) {
            if (!v) return cli_fail(CMD, "--flags needs a spec"), -1;
            o->flags = v; i++;
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
    if (access(o->model, R_OK) != 0)
        return cli_fail(CMD, "cannot read model '%s': %s", o->model, strerror(errno)), -1;
    if (o->trace && access(o->trace, R_OK) != 0)
        return cli_fail(CMD, "cannot read trace '%s': %s", o->trace, strerror(errno)), -1;
    if (o->threads <= 0) o->threads = cpu_count();
    return 0;
}

typedef struct {
    double *prefill;              /* [repeat] window seconds */
    double *decode, *seed, *steps; /* [repeat] */
} timings;

static json_t *num_or_null(bool have, double v) { return have ? json_real(v) : json_null(); }

static json_t *runs_array(const double *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_real(v[i]));
    return a;
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
    token_check tc = {.ok = true, .step = -1, .window = NULL, .expected = -1, .actual = -1};

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

    moe_session_params sp = {.n_ctx = P + D + 1, .n_threads = o.threads, .n_batch = 0};
    if (moe_session_new(m, &sp, &s, err, sizeof err) != MOE_OK) { cli_fail(CMD, "%s", err); goto out; }
    logits = malloc((size_t)n_vocab * sizeof *logits);
    argmax_ids = malloc((size_t)(D + 1) * sizeof *argmax_ids);
    tm.prefill = calloc((size_t)o.repeat, sizeof(double));
    tm.decode = calloc((size_t)o.repeat, sizeof(double));
    tm.seed = calloc((size_t)o.repeat, sizeof(double));
    tm.steps = calloc((size_t)o.repeat, sizeof(double));
    if (!logits || !argmax_ids || !tm.prefill || !tm.decode || !tm.seed || !tm.steps) {
        cli_fail(CMD, "out of memory");
        goto out;
    }

    /* Untimed warm-up: one forward over the prompt faults in the weights and
     * the session's buffers. */
    if (moe_session_forward(s, ids, P, logits, false) != MOE_OK) goto fwd_fail;

    for (int r = 0; r < o.repeat; r++) {
        if (o.windows & WIN_PREFILL) {
            moe_session_truncate(s, 0); /* KV empty */
            double t0 = now_s();
            if (moe_session_forward(s, ids, P, logits, false) != MOE_OK) goto fwd_fail;
            int32_t a = moe_argmax(logits, n_vocab);
            tm.prefill[r] = now_s() - t0;
            if (expected) check_step(&tc, "prefill", 0, logits, n_vocab, expected[0], a, tol);
        }
        if (o.windows & WIN_DECODE) {
            moe_session_truncate(s, 0);
            double t0 = now_s();
            if (moe_session_forward(s, ids, P, logits, false) != MOE_OK) goto fwd_fail;
            argmax_ids[0] = moe_argmax(logits, n_vocab);
            if (expected) check_step(&tc, "decode", 0, logits, n_vocab, expected[0], argmax_ids[0], tol);
            double t1 = now_s();
            for (int i = 0; i < D; i++) {
                if (moe_session_forward(s, ids + P + i, 1, logits, false) != MOE_OK) goto fwd_fail;
                argmax_ids[i + 1] = moe_argmax(logits, n_vocab);
                /* Checked in the loop only because a tie needs this step's
                 * logits; a match costs one compare. */
                if (expected && i + 1 < n_expected)
                    check_step(&tc, "decode", i + 1, logits, n_vocab, expected[i + 1], argmax_ids[i + 1], tol);
            }
            double t2 = now_s();
            tm.seed[r] = t1 - t0;
            tm.steps[r] = t2 - t1;
            tm.decode[r] = t2 - t0;
        }
    }
    long long hwm = peak_rss_bytes(); /* before the bandwidth buffer exists */

    char flags_buf[256] = "";
    moe_model_flags(m, flags_buf, sizeof flags_buf);
    const char *kern_name = moe_model_kernels(m); /* a static string: outlives the model */
    const int threads_used = s ? moe_session_threads(s) : o.threads;
    const char *arch = moe_model_arch(m);
    uint64_t bpt = moe_model_bytes_per_token(m);
    char arch_buf[64];
    snprintf(arch_buf, sizeof arch_buf, "%s", arch ? arch : "?");
    if (s) moe_session_free(s);
    s = NULL;
    moe_model_free(m);
    m = NULL;

    const bool have_p = o.windows & WIN_PREFILL, have_d = o.windows & WIN_DECODE;
    double bw = 0;
    if (have_d && o.bandwidth) bw = moe_measure_read_bandwidth(o.threads);
    double p_s = have_p ? median(tm.prefill, o.repeat) : 0;
    double d_s = have_d ? median(tm.decode, o.repeat) : 0;
    double seed_s = have_d ? median(tm.seed, o.repeat) : 0;
    double steps_s = have_d ? median(tm.steps, o.repeat) : 0;
    double steps_tps = steps_s > 0 ? D / steps_s : 0;
    double achieved = (double)bpt * steps_tps / 1e9;
    bool have_bw = have_d && bw > 0;

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
            json_object_set_new(jd, "pct_of_bandwidth_limit", num_or_null(have_bw, 100.0 * achieved / bw));
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
            json_object_set_new(root, "token_check", jt);
        } else {
            json_object_set_new(root, "token_check", json_null());
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
            printf("  achieved             %10.3f GB/s", achieved);
            if (have_bw)
                printf("  = %.1f %% of the measured %.2f GB/s read bandwidth (limit %.1f tok/s)\n",
                       100.0 * achieved / bw, bw, bpt ? bw * 1e9 / (double)bpt : 0.0);
            else
                printf("  (bandwidth not measured)\n");
        }
        printf("  peak RSS (VmHWM)     %10.1f MB\n", hwm >= 0 ? (double)hwm / 1e6 : -1.0);
        if (o.trace) {
            if (tc.ok)
                printf("  token check          ok (%d steps checked, %d tolerated ties) against %s\n", tc.checked,
                       tc.ties, o.trace);
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
    cli_fail(CMD, "forward failed: %s", moe_session_error(s));
    rc = 2;
out:
    free(tm.prefill);
    free(tm.decode);
    free(tm.seed);
    free(tm.steps);
    free(argmax_ids);
    free(logits);
    free(ids);
    if (tr) moe_trace_free(tr);
    if (s) moe_session_free(s);
    moe_model_free(m);
    return rc;
}
