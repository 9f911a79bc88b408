/* cmd_bisect.c — `moefast bisect`: when the gate fails, find a minimal set of
 * optimisation flags whose removal makes it pass.
 *
 * Delta debugging (Zeller's ddmin) over the set of flags that are ON: the
 * property sought is "removing this subset makes the gate pass"; starting
 * from the whole set (checked first: with every flag off the gate must
 * pass, otherwise no flag is to blame), ddmin shrinks it to a 1-minimal
 * subset: removing it passes, removing it less any one of its flags fails. Every
 * probe is an in-process gate run on a fresh model load with an explicit
 * spec ("none,+a,+b"), so MOEFAST_FLAGS cannot leak into it. Results are
 * cached by flag set, so the probe count is the number of real gate runs.
 * Exit: 0 the gate passes, 1 it fails (culprits printed, or none
 * responsible), 2 error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "moefast.h"

#define BISECT_USAGE "usage: moefast bisect -m FILE TRACE [--mode teacher|free] [--steps N] [--case NAME] [-t N] [--flags SPEC]"
#define MAX_FLAGS 64
#define MAX_PROBES 1024

typedef struct bisect {
    const char *model;
    const moe_trace *t;
    moe_gate_params gp;
    int n_on;                     /* flags on in the starting set */
    int on[MAX_FLAGS];            /* their registry indices */
    uint64_t seen[MAX_PROBES];    /* probed removal masks (bits over on[]) */
    signed char seen_pass[MAX_PROBES];
    int n_seen, probes;
} bisect;

static int flag_index(const char *name, size_t len) {
    for (int i = 0; i < moe_flag_count(); i++) {
        const char *n;
        if (moe_flag_describe(i, &n, NULL, NULL, NULL) && strlen(n) == len && !strncmp(n, name, len)) return i;
    }
    return -1;
}

/* Spec naming the starting set less the flags in `removed` (bits over on[]). */
static void spec_without(const bisect *b, uint64_t removed, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "none");
    for (int i = 0; i < b->n_on && o < len; i++) {
        if ((removed >> i) & 1) continue;
        const char *n;
        moe_flag_describe(b->on[i], &n, NULL, NULL, NULL);
        o += (size_t)snprintf(buf + o, len - o, ",+%s", n);
    }
}

static void print_set(const bisect *b, uint64_t set) {
    int k = 0;
    for (int i = 0; i < b->n_on; i++) {
        if (!((set >> i) & 1)) continue;
        const char *n;
        moe_flag_describe(b->on[i], &n, NULL, NULL, NULL);
        printf("%s+%s", k++ ? "," : "", n);
    }
    if (!k) printf("none");
}

/* One gate run with `removed` switched off: 1 pass, 0 fail, -1 error (printed). */
static int probe(bisect *b, uint64_t removed, moe_gate_result *res) {
    for (int i = 0; i < b->n_seen && !res; i++)
        if (b->seen[i] == removed) return b->seen_pass[i];
    char spec[1024], err[MOE_ERR_LEN];
    spec_without(b, removed, spec, sizeof spec);
    moe_model *m = NULL;
    moe_load_params lp = {.flags = spec};
    if (moe_model_load(b->model, &lp, &m, err, sizeof err)) { cli_fail("bisect", "%s", err); return -1; }
    moe_gate_result r;
    int rc = moe_trace_gate(m, b->t, &b->gp, &r, err, sizeof err);
    moe_model_free(m);
    if (rc == MOE_EDIVERGE) { /* differential mode: this probe's flags diverge */
        memset(&r, 0, sizeof r);
        r.case_index = 0;
        r.step = -1;
    } else if (rc) {
        cli_fail("bisect", "flags %s: %s", spec, err);
        return -1;
    }
    b->probes++;
    printf("  probe %d: flags %s -> %s\n", b->probes, spec, r.pass ? "pass" : "FAIL");
    if (b->n_seen < MAX_PROBES) {
        b->seen[b->n_seen] = removed;
        b->seen_pass[b->n_seen++] = (signed char)r.pass;
    }
    if (res) *res = r;
    return r.pass;
}

/* ddmin: a 1-minimal subset of `set` whose removal passes; `set` itself passes. */
static int ddmin(bisect *b, uint64_t set, uint64_t *out) {
    int n = 2;
    for (;;) {
        int elems[MAX_FLAGS], ne = 0;
        for (int i = 0; i < b->n_on; i++) if ((set >> i) & 1) elems[ne++] = i;
        if (ne <= 1) break;
        if (n > ne) n = ne;
        bool reduced = false;
        /* chunks first, then complements */
        for (int pass = 0; pass < 2 && !reduced; pass++) {
            for (int c = 0; c < n; c++) {
                uint64_t chunk = 0;
                for (int j = ne * c / n; j < ne * (c + 1) / n; j++) chunk |= 1ull << elems[j];
                uint64_t cand = pass == 0 ? chunk : set & ~chunk;
                if (cand == 0 || cand == set) continue;
                int p = probe(b, cand, NULL);
                if (p < 0) return -1;
                if (p) {
                    set = cand;
                    n = pass == 0 ? 2 : (n - 1 > 2 ? n - 1 : 2);
                    reduced = true;
                    break;
                }
            }
        }
        if (reduced) continue;
        if (n >= ne) break;
        n = 2 * n < ne ? 2 * n : ne;
    }
    *out = set;
    return 0;
}

int cmd_bisect(int argc, char **argv) {
    const char *model = NULL, *trace_path = NULL, *flags = NULL;
    moe_gate_params gp = {0};
    long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { printf("%s\n", BISECT_USAGE); return 0; }
        else if (!strcmp(a, "-m")) { if (++i >= argc) return cli_fail("bisect", "-m needs a file"); model = argv[i]; }
        else if (!strcmp(a, "--mode")) {
            if (++i >= argc) return cli_fail("bisect", "--mode needs teacher or free");
            if (!strcmp(argv[i], "teacher")) gp.free_run = false;
            else if (!strcmp(argv[i], "free")) gp.free_run = true;
            else return cli_fail("bisect", "bad value for --mode: '%s' (teacher or free)", argv[i]);
        } else if (!strcmp(a, "--steps")) {
            if (cli_parse_int("bisect", "--steps", i + 1 < argc ? argv[++i] : NULL, 1, 1000000, &v)) return 2;
            gp.steps = (int)v;
        } else if (!strcmp(a, "-t")) {
            if (cli_parse_int("bisect", "-t", i + 1 < argc ? argv[++i] : NULL, 1, 1024, &v)) return 2;
            gp.n_threads = (int)v;
        } else if (!strcmp(a, "--flags")) {
            if (++i >= argc) return cli_fail("bisect", "--flags needs a spec (see moefast flags)");
            flags = argv[i];
        } else if (!strcmp(a, "--case")) {
            if (++i >= argc) return cli_fail("bisect", "--case needs a case name");
            gp.only_case = argv[i];
        } else if (!strncmp(a, "--flags=", 8)) flags = a + 8;
        else if (a[0] == '-' && a[1]) return cli_fail("bisect", "unknown option '%s' (%s)", a, BISECT_USAGE);
        else if (!trace_path) trace_path = a;
        else return cli_fail("bisect", "unexpected argument '%s' (%s)", a, BISECT_USAGE);
    }
    if (!model || !trace_path) return cli_fail("bisect", "%s", BISECT_USAGE);

    char err[MOE_ERR_LEN];
    moe_trace *t = NULL;
    if (moe_trace_load(trace_path, &t, err, sizeof err)) return cli_fail("bisect", "%s", err);
    bisect *b = calloc(1, sizeof *b);
    if (!b) { moe_trace_free(t); return cli_fail("bisect", "out of memory"); }
    b->model = model;
    b->t = t;
    b->gp = gp;
    b->gp.stop_at_first = true; /* a probe only needs pass or fail */
    int status = 2;

    /* the starting set: what --flags (or MOEFAST_FLAGS, or the defaults) selects */
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags};
    if (moe_model_load(model, &lp, &m, err, sizeof err)) { cli_fail("bisect", "%s", err); goto out; }
    char fl[1024];
    moe_model_flags(m, fl, sizeof fl);
    moe_model_free(m);
    for (const char *p = fl; *p;) {
        while (*p == ',' || *p == '+') p++;
        const char *s = p;
        while (*p && *p != ',') p++;
        if (p == s || (p - s == 4 && !strncmp(s, "none", 4))) continue;
        int id = flag_index(s, (size_t)(p - s));
        if (id < 0 || b->n_on == MAX_FLAGS) { cli_fail("bisect", "cannot parse the model's flag set \"%s\"", fl); goto out; }
        b->on[b->n_on++] = id;
    }
    uint64_t all = b->n_on == 64 ? ~0ull : (1ull << b->n_on) - 1;

    moe_gate_result r;
    int p = probe(b, 0, &r);
    if (p < 0) goto out;
    if (p) {
        printf("PASS: the gate passes with flags %s; nothing to bisect (%d probe)\n", fl, b->probes);
        status = 0;
        goto out;
    }
    const moe_trace_case *c = moe_trace_case_at(t, r.case_index);
    if (r.step < 0)
        printf("gate fails with flags %s: differential mode divergence\n", fl);
    else
        printf("gate fails with flags %s: case \"%s\" step %d (expected %d, got %d)\n", fl, c->name, r.step,
               (int)r.expected, (int)r.actual);
    if (b->n_on > 0) p = probe(b, all, &r);
    if (p < 0) goto out;
    if (b->n_on == 0 || !p) {
        c = moe_trace_case_at(t, r.case_index);
        printf("no flag is responsible: the gate fails with flags none too (case \"%s\" step %d); probes: %d\n",
               c ? c->name : "?", r.step, b->probes);
        status = 1;
        goto out;
    }
    uint64_t culprit;
    if (ddmin(b, all, &culprit)) goto out;
    printf("culprit: ");
    print_set(b, culprit);
    printf(" (removing %s makes the gate pass)\nprobes: %d\n",
           __builtin_popcountll(culprit) == 1 ? "this flag" : "these flags together", b->probes);
    status = 1;
out:
    free(b);
    moe_trace_free(t);
    return status;
}
