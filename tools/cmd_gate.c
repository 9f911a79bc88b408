/* cmd_gate.c — `moefast gate`: replay a golden trace and report the first
 * divergence (exit 0 pass, 1 divergence, 2 error). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "moefast.h"

#define GATE_USAGE "usage: moefast gate -m FILE TRACE [--mode teacher|free] [--steps N] [--case NAME] [-t N] [--flags SPEC]"

/* Token text as a quoted C-style string (control bytes escaped). */
static void print_piece(FILE *f, const moe_model *m, int32_t id) {
    const char *b = NULL;
    size_t n = 0;
    if (moe_token_piece(m, id, true, &b, &n) != MOE_OK) { fputs("\"?\"", f); return; }
    fputc('"', f);
    for (size_t i = 0; i < n && i < 48; i++) {
        unsigned char c = (unsigned char)b[i];
        if (c >= 0x80) {
            /* whole UTF-8 sequences verbatim; stray bytes (byte-level BPE
             * pieces of a longer character) as \xNN */
            size_t k = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
            if (c >= 0xf5) k = 0;
            bool ok = k > 0 && i + k <= n;
            for (size_t j = 1; ok && j < k; j++) ok = ((unsigned char)b[i + j] & 0xc0) == 0x80;
            if (ok) { fwrite(b + i, 1, k, f); i += k - 1; }
            else fprintf(f, "\\x%02x", c);
        } else if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    if (n > 48) fputs("...", f);
    fputc('"', f);
}

/* A failing gate whose trace was recorded in another numerics (act_q8,
 * kv_f16) says so: that divergence is expected, not a bug. */
static void note_numerics(const moe_trace *t, int ci, const char *run_flags) {
    const char *rec = moe_trace_recorded_with(t, ci), *p = rec ? strstr(rec, "flags=") : NULL;
    if (!p) return;
    char spec[256], want[128], have[128], err[MOE_ERR_LEN];
    size_t n = strcspn(p + 6, " ");
    snprintf(spec, sizeof spec, "%.*s", (int)(n < sizeof spec ? n : sizeof spec - 1), p + 6);
    if (moe_flags_numerics_of(spec, want, sizeof want, err, sizeof err) ||
        moe_flags_numerics_of(run_flags, have, sizeof have, err, sizeof err) || !strcmp(want, have))
        return;
    printf("  note: the trace was recorded with numerics flags %s, this run uses %s: a different arithmetic,\n"
           "        so divergence is expected (docs/EXACTNESS.md); gate with --flags matching the trace\n",
           want, have);
}

int cmd_gate(int argc, char **argv) {
    const char *model = NULL, *trace_path = NULL, *flags = NULL;
    moe_gate_params gp = {0};
    long v;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { printf("%s\n", GATE_USAGE); return 0; }
        else if (!strcmp(a, "-m")) { if (++i >= argc) return cli_fail("gate", "-m needs a file"); model = argv[i]; }
        else if (!strcmp(a, "--mode")) {
            if (++i >= argc) return cli_fail("gate", "--mode needs teacher or free");
            if (!strcmp(argv[i], "teacher")) gp.free_run = false;
            else if (!strcmp(argv[i], "free")) gp.free_run = true;
            else return cli_fail("gate", "bad value for --mode: '%s' (teacher or free)", argv[i]);
        } else if (!strcmp(a, "--steps")) {
            if (cli_parse_int("gate", "--steps", i + 1 < argc ? argv[++i] : NULL, 1, 1000000, &v)) return 2;
            gp.steps = (int)v;
        } else if (!strcmp(a, "-t")) {
            if (cli_parse_int("gate", "-t", i + 1 < argc ? argv[++i] : NULL, 1, 1024, &v)) return 2;
            gp.n_threads = (int)v;
        } else if (!strcmp(a, "--flags")) {
            if (++i >= argc) return cli_fail("gate", "--flags needs a spec (see moefast flags)");
            flags = argv[i];
        } else if (!strcmp(a, "--case")) {
            if (++i >= argc) return cli_fail("gate", "--case needs a case name");
            gp.only_case = argv[i];
        } else if (!strncmp(a, "--flags=", 8)) flags = a + 8;
        else if (a[0] == '-' && a[1]) return cli_fail("gate", "unknown option '%s' (%s)", a, GATE_USAGE);
        else if (!trace_path) trace_path = a;
        else return cli_fail("gate", "unexpected argument '%s' (%s)", a, GATE_USAGE);
    }
    if (!model || !trace_path) return cli_fail("gate", "%s", GATE_USAGE);

    char err[MOE_ERR_LEN];
    moe_trace *t = NULL;
    if (moe_trace_load(trace_path, &t, err, sizeof err)) return cli_fail("gate", "%s", err);
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags};
    if (cli_model_load(model, &lp, &m, err, sizeof err)) {
        moe_trace_free(t);
        return cli_fail("gate", "%s", err);
    }
    moe_gate_result r;
    int rc = moe_trace_gate(m, t, &gp, &r, err, sizeof err);
    char threads[16] = "default";
    if (gp.n_threads > 0) snprintf(threads, sizeof threads, "%d", gp.n_threads);
    int status;
    if (rc == MOE_EDIVERGE) {
        /* differential mode (MOEFAST_DIFF) found the optimised and the
         * reference path apart: a divergence, not an error */
        printf("FAIL %s\n", err);
        status = 1;
    } else if (rc) {
        status = cli_fail("gate", "%s", err);
    } else if (r.pass) {
        char fl[256];
        moe_model_flags(m, fl, sizeof fl);
        printf("PASS %d cases, %d steps\n", r.n_cases, r.n_steps);
        printf("  %s mode, flags %s, isa %s, threads %s", gp.free_run ? "free" : "teacher", fl, moe_model_kernels(m),
               threads);
        if (r.n_ties) printf(", %d steps passed within the tie tolerance %g", r.n_ties, (double)moe_trace_tie_tolerance(t));
        printf("\n");
        status = 0;
    } else {
        const moe_trace_case *c = moe_trace_case_at(t, r.case_index);
        char fl[256];
        moe_model_flags(m, fl, sizeof fl);
        printf("FAIL case \"%s\" step %d: expected %d ", c->name, r.step, (int)r.expected);
        print_piece(stdout, m, r.expected);
        printf(", got %d ", (int)r.actual);
        print_piece(stdout, m, r.actual);
        printf(", margin %.9g%s\n", (double)r.margin,
               r.expected_in_topk ? "" : " (expected token not in the top 8)");
        printf("  top %d:", r.n_top < 5 ? r.n_top : 5);
        for (int j = 0; j < r.n_top && j < 5; j++) {
            printf("%s %d ", j ? ";" : "", (int)r.top_ids[j]);
            print_piece(stdout, m, r.top_ids[j]);
            printf(" %.9g", (double)r.top_logits[j]);
        }
        printf("\n  golden top 5 at that step:");
        for (int j = 0; j < c->top_k && j < 5; j++) {
            size_t o = (size_t)r.step * c->top_k + j;
            printf("%s %d ", j ? ";" : "", (int)c->topk_ids[o]);
            print_piece(stdout, m, c->topk_ids[o]);
            printf(" %.9g", (double)c->topk_logits[o]);
        }
        printf("\n  %s mode, flags %s, isa %s, threads %s: %d of %d steps checked diverge%s\n",
               gp.free_run ? "free" : "teacher", fl, moe_model_kernels(m), threads, r.n_fail, r.n_steps,
               gp.free_run ? " (free mode stops at the first)" : "");
        note_numerics(t, r.case_index, fl);
        status = 1;
    }
    moe_model_free(m);
    moe_trace_free(t);
    return status;
}
