/* cmd_price.c — `moefast price`: what does a change cost or buy?
 *
 * Runs `moefast bench --json --window both` for side A and side B in fresh
 * processes, alternating the order pair by pair (A B, B A, A B, ...) so slow
 * drift of the machine falls on both sides equally, after one discarded
 * warm-up run of each. Statistics and reports are in price_report.c; the
 * SPEC grammar, windows and schemas in docs/MEASUREMENT.md. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "moefast.h"
#include "price_report.h"

#define CMD "price"
/* the environment gate's bandwidth probe: 128 MB, 3 passes (lab.h) */
#define PROBE_BYTES ((size_t)128 << 20)

typedef struct {
    const char *model, *a_spec, *b_spec, *trace, *svg, *bin;
    int pairs, threads, resamples, prompt_len, decode_steps;
    long long seed;
    bool json, csv, noise, no_token_check, cold;
    int gate_bw, gate_retries;  /* the environment gate (price_env.c): % tolerance (0: no probe), reruns a pair */
} price_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: moefast price -m FILE --a SPEC --b SPEC [--pairs N] [--trace FILE | --no-token-check]\n"
            "                     [--json | --csv] [--svg FILE] [--noise] [-t N] [--bin PATH]\n"
            "                     [--seed S] [--resamples R] [--prompt-len P] [--decode-steps D]\n"
            "                     [--cold] [--gate-bw PCT] [--gate-retries N]\n"
            "  SPEC: items joined by ';':  flags:SPEC  threads:N  env:NAME=VALUE[,NAME=VALUE]\n"
            "        bin:PATH  default      e.g. --b 'flags:-gemm_batch;threads:1'\n"
            "  --noise: A against A (no --b); reports the noise floor.\n"
            "  Each run is a fresh `bench --json --window both` process; speedup = A time / B time.\n"
            "  windows: prefill, decode (score = decode^0.75 x prefill^0.25), steps (the decode window's\n"
            "  steps without the seed prefill; informational: not in the score, never a rejection)\n"
            "  --cold: the prefill window without the warm-up forward (each run's first forward)\n"
            "  environment gate: around each pair the load average, the stolen CPU time and a bandwidth\n"
            "  probe before and after; a pair whose probes differ by > PCT %% (default 10; 0: no probe)\n"
            "  or that lost > 10%% of its CPU time to steal is rerun, at most N times (default 2)\n"
            "  exit: 0 accepted, 1 rejected (a changed token, or a prefill or decode median speedup < 0.95), 2 error\n");
}

/* ---- SPEC parsing ----------------------------------------------------- */

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) { memcpy(d, s, n); d[n] = 0; }
    return d;
}

static void side_free(price_side *s) {
    free(s->bin);
    free(s->flags);
    for (int i = 0; i < s->n_env; i++) free(s->env[i]);
    free(s->env);
    memset(s, 0, sizeof *s);
}

/* Checks the flag names of a flags: item against this binary's registry. */
static int check_flag_names(const char *label, const char *spec) {
    char err[MOE_ERR_LEN];
    if (moe_flags_check(spec, err, sizeof err) == MOE_OK) return 0;
    cli_fail(CMD, "%s: %s", label, err);
    return -1;
}

static bool valid_env_name(const char *s, size_t n) {
    if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_')) return false;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_')) return false;
    return true;
}

static int parse_env_item(const char *label, const char *v, price_side *out) {
    const char *p = v;
    for (;;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (!eq || !valid_env_name(p, (size_t)(eq - p))) {
            cli_fail(CMD, "%s: bad env item '%.*s' (expected NAME=VALUE, NAME of [A-Za-z_][A-Za-z0-9_]*)", label,
                     (int)n, p);
            return -1;
        }
        char **ne = realloc(out->env, (size_t)(out->n_env + 1) * sizeof *ne);
        if (!ne) return cli_fail(CMD, "out of memory"), -1;
        out->env = ne;
        if (!(out->env[out->n_env] = dup_n(p, n))) return cli_fail(CMD, "out of memory"), -1;
        out->n_env++;
        if (!e) return 0;
        p = e + 1;
    }
}

/* Parses SPEC into out; prints a message and returns -1 when malformed. */
static int parse_spec(const char *label, const char *spec, price_side *out) {
    memset(out, 0, sizeof *out);
    out->text = spec;
    if (!spec || !*spec) {
        cli_fail(CMD, "%s: empty SPEC (use 'default' for the unchanged configuration)", label);
        return -1;
    }
    const char *p = spec;
    bool any = false;
    while (*p) {
        const char *e = strchr(p, ';');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char *item = dup_n(p, n);
        if (!item) return cli_fail(CMD, "out of memory"), -1;
        char *colon = strchr(item, ':');
        const char *val = colon ? colon + 1 : "";
        if (colon) *colon = 0;
        int bad = 0;
        if (!colon && !strcmp(item, "default")) {
            /* nothing to change */
        } else if (!colon) {
            cli_fail(CMD, "%s: malformed SPEC item '%s' in \"%s\" (expected flags:, threads:, env:, bin: or default)",
                     label, item, spec);
            bad = 1;
        } else if (!strcmp(item, "flags")) {
            if (out->flags) bad = cli_fail(CMD, "%s: flags: given twice in \"%s\"", label, spec);
            else if (!*val) bad = cli_fail(CMD, "%s: flags: needs a flag spec (e.g. flags:-simd)", label);
            else if (!(out->flags = strdup(val))) bad = cli_fail(CMD, "out of memory");
        } else if (!strcmp(item, "threads")) {
            char *end;
            errno = 0;
            long t = strtol(val, &end, 10);
            if (out->threads) bad = cli_fail(CMD, "%s: threads: given twice in \"%s\"", label, spec);
            else if (errno || end == val || *end || t < 1 || t > 1024)
                bad = cli_fail(CMD, "%s: bad threads:%s (expected an integer in 1..1024)", label, val);
            else out->threads = (int)t;
        } else if (!strcmp(item, "env")) {
            if (parse_env_item(label, val, out)) bad = 1;
        } else if (!strcmp(item, "bin")) {
            if (out->bin) bad = cli_fail(CMD, "%s: bin: given twice in \"%s\"", label, spec);
            else if (!*val) bad = cli_fail(CMD, "%s: bin: needs a path", label);
            else if (access(val, X_OK) != 0)
                bad = cli_fail(CMD, "%s: bin:%s is not an executable file: %s", label, val, strerror(errno));
            else if (!(out->bin = strdup(val))) bad = cli_fail(CMD, "out of memory");
        } else {
            cli_fail(CMD, "%s: unknown SPEC item '%s:' in \"%s\" (expected flags:, threads:, env:, bin: or default)",
                     label, item, spec);
            bad = 1;
        }
        free(item);
        if (bad) { side_free(out); return -1; }
        any = true;
        if (!e) break;
        p = e + 1;
        if (!*p) { cli_fail(CMD, "%s: SPEC \"%s\" ends with ';'", label, spec); side_free(out); return -1; }
    }
    if (!any) { cli_fail(CMD, "%s: empty SPEC", label); side_free(out); return -1; }
    /* Flag names can be checked here only for this binary's own registry. */
    if (out->flags && !out->bin && check_flag_names(label, out->flags)) { side_free(out); return -1; }
    out->text = spec;
    return 0;
}

/* ---- arguments ---------------------------------------------------------- */

static int parse_args(int argc, char **argv, price_opts *o) {
    *o = (price_opts){.pairs = 10, .resamples = 2000, .seed = 20260101, .gate_bw = 10, .gate_retries = 2};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 1; }
        else if (!strcmp(a, "--json")) o->json = true;
        else if (!strcmp(a, "--csv")) o->csv = true;
        else if (!strcmp(a, "--noise")) o->noise = true;
        else if (!strcmp(a, "--no-token-check")) o->no_token_check = true;
        else if (!strcmp(a, "--cold")) o->cold = true;
        else if (!strcmp(a, "--gate-bw")) {
            if (cli_parse_int(CMD, a, v, 0, 100, &x)) return -1;
            o->gate_bw = (int)x; i++;
        } else if (!strcmp(a, "--gate-retries")) {
            if (cli_parse_int(CMD, a, v, 0, 20, &x)) return -1;
            o->gate_retries = (int)x; i++;
        }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--a") || !strcmp(a, "--b") ||
                 !strcmp(a, "--trace") || !strcmp(a, "--svg") || !strcmp(a, "--bin")) {
            if (!v) return cli_fail(CMD, "%s needs a value", a), -1;
            const char **dst = a[1] == 'm' || !strcmp(a, "--model") ? &o->model
                             : !strcmp(a, "--a") ? &o->a_spec : !strcmp(a, "--b") ? &o->b_spec
                             : !strcmp(a, "--trace") ? &o->trace : !strcmp(a, "--svg") ? &o->svg : &o->bin;
            *dst = v;
            i++;
        } else if (!strcmp(a, "--pairs")) {
            if (cli_parse_int(CMD, a, v, 1, 10000, &x)) return -1;
            o->pairs = (int)x; i++;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_parse_int(CMD, a, v, 1, 1024, &x)) return -1;
            o->threads = (int)x; i++;
        } else if (!strcmp(a, "--resamples")) {
            if (cli_parse_int(CMD, a, v, 2000, 10000000, &x)) return -1;
            o->resamples = (int)x; i++;
        } else if (!strcmp(a, "--seed")) {
            if (cli_parse_int(CMD, a, v, 0, 0x7fffffffL, &x)) return -1;
            o->seed = x; i++;
        } else if (!strcmp(a, "--prompt-len")) {
            if (cli_parse_int(CMD, a, v, 1, 1 << 20, &x)) return -1;
            o->prompt_len = (int)x; i++;
        } else if (!strcmp(a, "--decode-steps")) {
            if (cli_parse_int(CMD, a, v, 1, 1 << 20, &x)) return -1;
            o->decode_steps = (int)x; i++;
        } else {
            return cli_fail(CMD, "unknown option '%s' (see moefast price --help)", a), -1;
        }
    }
    if (!o->model) return cli_fail(CMD, "missing -m FILE (see moefast price --help)"), -1;
    if (access(o->model, R_OK) != 0)
        return cli_fail(CMD, "cannot read model '%s': %s", o->model, strerror(errno)), -1;
    if (!o->a_spec) return cli_fail(CMD, "missing --a SPEC"), -1;
    if (o->noise && o->b_spec) return cli_fail(CMD, "--noise compares A with itself: drop --b"), -1;
    if (!o->noise && !o->b_spec) return cli_fail(CMD, "missing --b SPEC (or --noise for A against A)"), -1;
    if (o->json && o->csv) return cli_fail(CMD, "--json and --csv exclude each other"), -1;
    if (o->trace && o->no_token_check) return cli_fail(CMD, "--trace and --no-token-check exclude each other"), -1;
    if (!o->trace && !o->no_token_check)
        return cli_fail(CMD, "a golden trace is required (--trace FILE, see moefast trace record); "
                             "--no-token-check times without checking tokens"), -1;
    if (o->trace && access(o->trace, R_OK) != 0)
        return cli_fail(CMD, "cannot read trace '%s': %s", o->trace, strerror(errno)), -1;
    if (o->bin && access(o->bin, X_OK) != 0)
        return cli_fail(CMD, "--bin %s is not an executable file: %s", o->bin, strerror(errno)), -1;
    return 0;
}

/* ---- running one bench process ----------------------------------------- */

/* Last non-empty line of the child's stderr, for error messages. */
static void last_line(FILE *f, char *buf, size_t len) {
    buf[0] = 0;
    if (!f) return;
    fflush(f);
    rewind(f);
    char line[400];
    while (fgets(line, sizeof line, f)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
        if (n) snprintf(buf, len, "%s", line);
    }
}

static int run_label(char *buf, size_t len, int pair, char side) {
    if (pair < 0) return snprintf(buf, len, "warm-up run, side %c", side);
    return snprintf(buf, len, "pair %d, side %c", pair, side);
}

/* fork+exec one `bench --json --window both` and parse what it prints.
 * Returns 0, or 2 with a message. */
static int run_bench(const price_opts *o, const price_side *sd, const char *default_bin, int pair, char side,
                     price_run *out) {
    const char *bin = sd->bin ? sd->bin : default_bin;
    char tbuf[16], pbuf[16], dbuf[16], label[64];
    run_label(label, sizeof label, pair, side);
    const char *av[32];
    int n = 0;
    av[n++] = bin;
    av[n++] = "bench";
    av[n++] = "-m"; av[n++] = o->model;
    av[n++] = "--json";
    av[n++] = "--window"; av[n++] = "both";
    av[n++] = "--no-bandwidth";
    if (o->cold) av[n++] = "--cold";
    int threads = sd->threads ? sd->threads : o->threads;
    if (threads) { snprintf(tbuf, sizeof tbuf, "%d", threads); av[n++] = "-t"; av[n++] = tbuf; }
    if (sd->flags) { av[n++] = "--flags"; av[n++] = sd->flags; }
    if (o->trace) { av[n++] = "--trace"; av[n++] = o->trace; }
    if (o->prompt_len) { snprintf(pbuf, sizeof pbuf, "%d", o->prompt_len); av[n++] = "--prompt-len"; av[n++] = pbuf; }
    if (o->decode_steps) {
        snprintf(dbuf, sizeof dbuf, "%d", o->decode_steps);
        av[n++] = "--decode-steps"; av[n++] = dbuf;
    }
    av[n] = NULL;

    int pfd[2];
    FILE *errf = tmpfile();
    if (!errf || pipe(pfd) != 0) {
        if (errf) fclose(errf);
        return cli_fail(CMD, "%s: cannot create a pipe: %s", label, strerror(errno));
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(pfd[0]); close(pfd[1]); fclose(errf);
        return cli_fail(CMD, "%s: fork failed: %s", label, strerror(errno));
    }
    if (pid == 0) {
        dup2(pfd[1], 1);
        dup2(fileno(errf), 2);
        close(pfd[0]);
        close(pfd[1]);
        for (int i = 0; i < sd->n_env; i++) {
            char *eq = strchr(sd->env[i], '=');
            *eq = 0; /* the child's own copy */
            setenv(sd->env[i], eq + 1, 1);
        }
        execv(bin, (char *const *)av);
        fprintf(stderr, "cannot execute %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    size_t cap = 1 << 14, len = 0;
    char *txt = malloc(cap);
    for (;;) {
        if (txt && len + 4096 > cap) {
            char *t2 = realloc(txt, cap *= 2);
            if (!t2) { free(txt); txt = NULL; }
            else txt = t2;
        }
        char sink[4096];
        ssize_t k = read(pfd[0], txt ? txt + len : sink, 4096);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        if (txt) len += (size_t)k;
    }
    close(pfd[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    char msg[512];
    last_line(errf, msg, sizeof msg);
    fclose(errf);
    if (!txt) return cli_fail(CMD, "out of memory");
    txt[len] = 0;
    /* bench exits 1 when its token check failed: still a valid report. */
    if (!WIFEXITED(st) || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 1)) {
        free(txt);
        if (WIFSIGNALED(st))
            return cli_fail(CMD, "%s: %s bench was killed by signal %d%s%s", label, bin, WTERMSIG(st),
                            msg[0] ? ": " : "", msg);
        return cli_fail(CMD, "%s: %s bench failed (exit %d): %s", label, bin, WEXITSTATUS(st),
                        msg[0] ? msg : "(no message)");
    }
    json_error_t je;
    json_t *root = json_loads(txt, 0, &je);
    free(txt);
    if (!root) return cli_fail(CMD, "%s: %s bench printed no valid JSON (line %d: %s)", label, bin, je.line, je.text);
    int rc = 0;
    const char *wn[PW_SCORED] = {"prefill", "decode"};
    for (int w = 0; w < PW_SCORED && !rc; w++) {
        json_t *spt = json_object_get(json_object_get(root, wn[w]), "seconds_per_token");
        if (!json_is_number(spt) || !(json_number_value(spt) > 0)) {
            rc = cli_fail(CMD, "%s: bench JSON lacks a positive %s.seconds_per_token", label, wn[w]);
            break;
        }
        out->s_per_tok[w] = json_number_value(spt);
    }
    /* The steps window: the decode window's D steps without the seed prefill.
     * Required, not skipped when absent: a report whose windows differ from
     * run to run could not be compared, and a bench without these keys
     * (an older binary given with bin:) is better named than half-priced. */
    if (!rc) {
        json_t *jd = json_object_get(root, "decode");
        json_t *ss = json_object_get(jd, "steps_seconds"), *sn = json_object_get(jd, "steps");
        if (!json_is_number(ss) || !(json_number_value(ss) > 0))
            rc = cli_fail(CMD, "%s: bench JSON lacks a positive decode.steps_seconds (needed for the steps window; "
                          "is %s an older moefast?)",
                          label, bin);
        else if (!json_is_integer(sn) || json_integer_value(sn) < 1)
            rc = cli_fail(CMD, "%s: bench JSON lacks a positive integer decode.steps", label);
        else
            out->s_per_tok[PW_STEPS] = json_number_value(ss) / (double)json_integer_value(sn);
    }
    json_t *cfg = json_object_get(root, "config");
    out->prompt_len = (int)json_integer_value(json_object_get(cfg, "prompt_len"));
    out->decode_steps = (int)json_integer_value(json_object_get(cfg, "decode_steps"));
    if (!rc && o->cold && !json_is_true(json_object_get(cfg, "cold")))
        rc = cli_fail(CMD, "%s: bench JSON lacks config.cold = true although --cold was given (is %s an older moefast?)",
                      label, bin);
    json_t *tc = json_object_get(root, "token_check");
    out->tc_present = json_is_object(tc);
    out->tc_ok = out->tc_present && json_is_true(json_object_get(tc, "ok"));
    out->tc_step = (int)json_integer_value(json_object_get(tc, "first_mismatch_step"));
    out->tc_expected = (int)json_integer_value(json_object_get(tc, "expected"));
    out->tc_actual = (int)json_integer_value(json_object_get(tc, "actual"));
    const char *tw = json_string_value(json_object_get(tc, "window"));
    snprintf(out->tc_window, sizeof out->tc_window, "%s", tw ? tw : "-");
    if (!rc && o->trace && !out->tc_present)
        rc = cli_fail(CMD, "%s: bench JSON has no token_check although --trace was given", label);
    json_decref(root);
    return rc;
}

/* The gate's probe; MOEFAST_PRICE_TEST_PROBE="BEFORE:AFTER" (tests only)
 * replaces its figures, so a test can make every pair fail the gate. */
static double probe(const price_opts *o, bool after) {
    if (!o->gate_bw) return 0;
    const char *t = getenv("MOEFAST_PRICE_TEST_PROBE");
    double v0, v1;
    if (t && sscanf(t, "%lf:%lf", &v0, &v1) == 2) return after ? v1 : v0;
    return moe_probe_read_bandwidth(o->threads, PROBE_BYTES);
}

static int note_fail(price_report *r, const price_run *run, int pair, char side) {
    if (!r->token_check || run->tc_ok) return 0;
    price_fail *nf = realloc(r->fails, (size_t)(r->n_fails + 1) * sizeof *nf);
    if (!nf) return cli_fail(CMD, "out of memory");
    r->fails = nf;
    price_fail *f = &r->fails[r->n_fails++];
    f->pair = pair;
    f->side = side;
    snprintf(f->window, sizeof f->window, "%s", run->tc_window);
    f->step = run->tc_step;
    f->expected = run->tc_expected;
    f->actual = run->tc_actual;
    return 0;
}

int cmd_price(int argc, char **argv) {
    price_opts o;
    int pr = parse_args(argc, argv, &o);
    if (pr) return pr > 0 ? 0 : 2;

    price_side a, b;
    if (parse_spec("--a", o.a_spec, &a)) return 2;
    if (o.noise) {
        if (parse_spec("--a", o.a_spec, &b)) { side_free(&a); return 2; }
    } else if (parse_spec("--b", o.b_spec, &b)) {
        side_free(&a);
        return 2;
    }
    char self[PATH_MAX];
    const char *default_bin = o.bin;
    if (!default_bin) {
        ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
        if (k <= 0) {
            side_free(&a);
            side_free(&b);
            return cli_fail(CMD, "cannot find this binary (/proc/self/exe): %s; pass --bin PATH", strerror(errno));
        }
        self[k] = 0;
        default_bin = self;
    }

    /* Opened before the runs so an unwritable path fails in a second, not
     * after minutes of timing. */
    FILE *svg = NULL;
    if (o.svg && !(svg = fopen(o.svg, "w"))) {
        side_free(&a);
        side_free(&b);
        return cli_fail(CMD, "cannot write %s: %s", o.svg, strerror(errno));
    }

    price_report r = {.model = o.model, .trace = o.trace, .default_bin = default_bin,
                      .token_check = !o.no_token_check, .noise = o.noise, .n_pairs = o.pairs,
                      .threads = o.threads, .resamples = o.resamples, .seed = (uint64_t)o.seed,
                      .a = &a, .b = &b, .cold = o.cold, .gate_bw_pct = o.gate_bw,
                      .gate_retries = o.gate_retries};
    r.ra = calloc((size_t)o.pairs, sizeof *r.ra);
    r.rb = calloc((size_t)o.pairs, sizeof *r.rb);
    r.b_first = calloc((size_t)o.pairs, sizeof *r.b_first);
    r.env = calloc((size_t)o.pairs, sizeof *r.env);
    int rc = 2;
    if (!r.ra || !r.rb || !r.b_first || !r.env) { cli_fail(CMD, "out of memory"); goto out; }

    if (!o.json && !o.csv && isatty(2)) { /* progress, for people only */
        fprintf(stderr, "moefast price: %d pairs + 1 warm-up each, A = %s, B = %s%s\n", o.pairs, a.text,
                o.noise ? "A (noise run)" : b.text, o.no_token_check ? ", TOKEN CHECK DISABLED" : "");
    }
    /* Warm-up runs: page cache, CPU clocks; their times are discarded. */
    price_run warm;
    memset(&warm, 0, sizeof warm);
    if (run_bench(&o, &a, default_bin, -1, 'A', &warm) || note_fail(&r, &warm, -1, 'A')) goto out;
    memset(&warm, 0, sizeof warm);
    if (run_bench(&o, &b, default_bin, -1, 'B', &warm) || note_fail(&r, &warm, -1, 'B')) goto out;
    for (int i = 0; i < o.pairs; i++) {
        r.b_first[i] = i % 2 == 1;
        price_env *e = &r.env[i];
        for (int att = 0;; att++) {                   /* the environment gate: rerun a pair that fails it */
            price_cpu c0, c1;
            e->load1 = price_load1();
            e->bw0 = probe(&o, false);
            price_cpu_read(&c0);
            for (int k = 0; k < 2; k++) {
                bool do_b = (k == 0) == r.b_first[i];
                price_run *run = do_b ? &r.rb[i] : &r.ra[i];
                if (run_bench(&o, do_b ? &b : &a, default_bin, i, do_b ? 'B' : 'A', run)) goto out;
                if (note_fail(&r, run, i, do_b ? 'B' : 'A')) goto out;
            }
            price_cpu_read(&c1);
            e->bw1 = probe(&o, true);
            e->steal = c0.ok && c1.ok && c1.total > c0.total ? (double)(c1.steal - c0.steal) / (double)(c1.total - c0.total)
                                                             : -1;
            e->attempts = att + 1;
            const char *why = price_gate_why(e, o.gate_bw);
            e->gate_ok = !why;
            if (!why) break;
            if (att == o.gate_retries) { r.kept_failing++; break; }   /* bounded: kept, and counted */
            if (why[0] == 'b') r.rerun_bw++;
            else r.rerun_steal++;
        }
    }
    r.prompt_len = r.ra[0].prompt_len;
    r.decode_steps = r.ra[0].decode_steps;
    if (price_analyse(&r)) { cli_fail(CMD, "out of memory"); goto out; }
    if (o.json) price_print_json(&r, stdout);
    else if (o.csv) price_print_csv(&r, stdout);
    else price_print_text(&r, stdout);
    if (svg) {
        int bad = price_write_svg(&r, svg);
        svg = NULL; /* closed by price_write_svg */
        if (bad) { cli_fail(CMD, "cannot write %s: %s", o.svg, strerror(errno)); goto out; }
    }
    rc = r.rejected ? 1 : 0;
out:
    if (svg) { fclose(svg); unlink(o.svg); } /* no half-made plot after a failure */
    for (int w = 0; w < PW_COUNT; w++) free(r.win[w].speedup);
    free(r.fails);
    free(r.ra);
    free(r.rb);
    free(r.b_first);
    free(r.env);
    side_free(&a);
    side_free(&b);
    return rc;
}
