/* run_check.c — `moefast run --check TRACE`: after the generation, the same
 * model replays a golden trace (the gate, teacher-forced, at the run's thread
 * count) and one line says whether this machine reproduced every golden token
 * and at which ISA. `make run` uses it on the default model, so a newcomer's
 * first run also proves the exactness promise on their machine. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "moefast.h"

int cli_check_open(const char *cmd, const char *trace_path, moe_model *m, moe_trace **out) {
    char err[MOE_ERR_LEN];
    *out = NULL;
    if (moe_trace_load(trace_path, out, err, sizeof err)) return cli_fail(cmd, "--check: %s", err);
    if (moe_trace_check_model(*out, m, err, sizeof err)) {
        moe_trace_free(*out);
        *out = NULL;
        return cli_fail(cmd, "--check: %s", err);
    }
    return 0;
}

/* The numerics flags (act_q8, kv_f16, kv_q8) change the arithmetic on purpose:
 * a trace recorded without them is not expected to pass with them. */
static void note_numerics(const moe_model *m) {
    char fl[256], num[256], err[MOE_ERR_LEN];
    moe_model_flags(m, fl, sizeof fl);
    if (moe_flags_numerics_of(fl, num, sizeof num, err, sizeof err) == MOE_OK && strcmp(num, "none"))
        fprintf(stderr, "check: this run uses the numerics flags %s, a different arithmetic: compare with a "
                "trace recorded with them (docs/EXACTNESS.md)\n", num);
}

int cli_check_gate(const char *cmd, moe_model *m, const moe_trace *t, const char *trace_path, int n_threads) {
    char err[MOE_ERR_LEN];
    moe_gate_params gp = {.n_threads = n_threads};
    moe_gate_result r;
    int rc = moe_trace_gate(m, t, &gp, &r, err, sizeof err);
    const char *isa = moe_model_kernels(m), *s = n_threads == 1 ? "" : "s";
    if (rc == MOE_EDIVERGE) { /* differential mode (MOEFAST_DIFF): reference and optimised paths apart */
        fprintf(stderr, "check: FAIL: %s\n", err);
        return 1;
    }
    if (rc) return cli_fail(cmd, "--check: %s", err);
    if (r.pass) {
        fprintf(stderr, "check: this machine reproduced all %d golden tokens of %s (isa %s, %d thread%s", r.n_steps,
                trace_path, isa, n_threads, s);
        if (r.n_ties) fprintf(stderr, "; %d within the trace's tie tolerance", r.n_ties);
        fprintf(stderr, ")\n");
        return 0;
    }
    const moe_trace_case *c = moe_trace_case_at(t, r.case_index);
    fprintf(stderr, "check: FAIL: %d of the %d golden tokens of %s differ (isa %s, %d thread%s); the first: "
            "case \"%s\" step %d, expected %d, got %d. Details: moefast gate -m %s %s\n",
            r.n_fail, r.n_steps, trace_path, isa, n_threads, s, c->name, r.step, (int)r.expected, (int)r.actual,
            moe_model_path(m), trace_path);
    note_numerics(m);
    return 1;
}
