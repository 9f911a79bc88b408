/* cmd_trace.c — `moefast trace record`: greedy free-run recording of golden
 * traces (format: docs/TRACE.md). Every prompt given (-p, --tokens,
 * --prompt-file, repeatable, in order) becomes one case; --append adds them
 * to an existing trace for the same model. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "moefast.h"

#define TRACE_USAGE                                                                              \
    "usage: moefast trace record -m FILE (-p TEXT | -f FILE | --tokens IDS)... --steps N " \
    "-o FILE [--name NAME]... [--append] [--tie-tolerance X] [-t N] [--flags SPEC]"
#define TRACE_HELP TRACE_USAGE \
    "\n  -f FILE (also --prompt-file FILE): a prompt read from a file, - for standard input (at most 64 MiB)"
#define MAX_PROMPTS 64

typedef struct prompt_src { char kind; const char *arg; } prompt_src; /* kind: 'p' text, 't' ids, 'f' file */

/* Prompt ids for one source (malloc'd); -1 after printing an error. */
static int prompt_ids(moe_model *m, const prompt_src *ps, int32_t **ids, int *n) {
    *ids = NULL;
    if (ps->kind == 't') {
        int *v, k;
        if (cli_parse_ids("trace", ps->arg, &v, &k)) return -1;
        int32_t *w = malloc((size_t)k * sizeof *w);
        if (!w) { free(v); cli_fail("trace", "out of memory"); return -1; }
        for (int i = 0; i < k; i++) w[i] = v[i];
        free(v);
        *ids = w;
        *n = k;
        return 0;
    }
    size_t len = strlen(ps->arg);
    char *text = (char *)ps->arg;
    if (ps->kind == 'f' && cli_read_prompt("trace", ps->arg, &text, &len)) return -1;
    char err[MOE_ERR_LEN];
    size_t cnt = 0;
    int rc = -1;
    /* no BOS: the models this is used on say add_bos_token false; a prompt
     * that wants one can name it with --tokens */
    if (moe_tokenize(m, text, len, false, true, NULL, 0, &cnt, err, sizeof err)) {
        cli_fail("trace", "tokenizing the prompt: %s", err);
    } else if (cnt == 0) {
        cli_fail("trace", "the prompt %s%s%s tokenizes to nothing", ps->kind == 'f' ? "file '" : "\"",
                 ps->arg, ps->kind == 'f' ? "'" : "\"");
    } else if (!(*ids = malloc(cnt * sizeof **ids))) {
        cli_fail("trace", "out of memory");
    } else if (moe_tokenize(m, text, len, false, true, *ids, cnt, &cnt, err, sizeof err)) {
        cli_fail("trace", "tokenizing the prompt: %s", err);
        free(*ids);
        *ids = NULL;
    } else {
        *n = (int)cnt;
        rc = 0;
    }
    if (ps->kind == 'f') free(text);
    return rc;
}

int cmd_trace(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout, "%s\n", TRACE_HELP);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "record") != 0)
        return cli_fail("trace", "unknown sub-command '%s' (%s)", argv[1], TRACE_USAGE);
    const char *model = NULL, *out = NULL, *flags = NULL;
    const char *names[MAX_PROMPTS];
    prompt_src src[MAX_PROMPTS];
    int n_src = 0, n_names = 0, steps = 0, threads = 0;
    bool append = false;
    double tie = 1e-6;
    long v;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { printf("%s\n", TRACE_HELP); return 0; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--tokens") || !strcmp(a, "--prompt-file") || !strcmp(a, "-f")) {
            if (!val) return cli_fail("trace", "%s needs a value", a);
            if (n_src == MAX_PROMPTS) return cli_fail("trace", "at most %d prompts per command", MAX_PROMPTS);
            src[n_src++] = (prompt_src){a[1] == 'p' ? 'p' : a[1] == 'f' || a[2] == 'p' ? 'f' : 't', val};
            i++;
        } else if (!strcmp(a, "--name")) {
            if (!val) return cli_fail("trace", "--name needs a value");
            if (n_names == MAX_PROMPTS) return cli_fail("trace", "too many --name options");
            names[n_names++] = val;
            i++;
        } else if (!strcmp(a, "-m")) { if (!val) return cli_fail("trace", "-m needs a file"); model = val; i++; }
        else if (!strcmp(a, "-o")) { if (!val) return cli_fail("trace", "-o needs a file"); out = val; i++; }
        else if (!strcmp(a, "--steps")) {
            if (cli_parse_int("trace", "--steps", val, 1, 100000, &v)) return 2;
            steps = (int)v;
            i++;
        } else if (!strcmp(a, "-t")) {
            if (cli_parse_int("trace", "-t", val, 1, 1024, &v)) return 2;
            threads = (int)v;
            i++;
        } else if (!strcmp(a, "--tie-tolerance")) {
            if (cli_parse_float("trace", "--tie-tolerance", val, 0, 1e30, &tie)) return 2;
            i++;
        } else if (!strcmp(a, "--flags")) {
            if (!val) return cli_fail("trace", "--flags needs a spec (see moefast flags)");
            flags = val;
            i++;
        } else if (!strncmp(a, "--flags=", 8)) flags = a + 8;
        else if (!strcmp(a, "--append")) append = true;
        else return cli_fail("trace", "unexpected argument '%s' (%s)", a, TRACE_USAGE);
    }
    if (!model || !out || n_src == 0 || (!steps && !append)) return cli_fail("trace", "%s", TRACE_USAGE);
    if (n_names > n_src) return cli_fail("trace", "%d --name options for %d prompts", n_names, n_src);

    char err[MOE_ERR_LEN];
    moe_trace *t = NULL;
    if (append && moe_trace_load(out, &t, err, sizeof err)) return cli_fail("trace", "--append: %s", err);
    if (append && !steps) steps = moe_trace_steps(t);
    if (append && steps < moe_trace_steps(t)) {
        int ts = moe_trace_steps(t);
        moe_trace_free(t);
        return cli_fail("trace", "--steps %d is fewer than the trace's gate.steps %d", steps, ts);
    }
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags};
    if (cli_model_load(model, &lp, &m, err, sizeof err)) {
        moe_trace_free(t);
        return cli_fail("trace", "%s", err);
    }
    int status = 0;
    if (t ? moe_trace_check_model(t, m, err, sizeof err) : moe_trace_new(m, steps, (float)tie, &t, err, sizeof err))
        status = cli_fail("trace", "%s", err);
    for (int i = 0; i < n_src && !status; i++) {
        int32_t *ids = NULL;
        int n = 0;
        if (prompt_ids(m, &src[i], &ids, &n)) { status = 2; break; }
        char defname[32];
        int idx = moe_trace_n_cases(t);
        snprintf(defname, sizeof defname, "case%d", idx);
        const char *name = i < n_names ? names[i] : defname;
        if (moe_trace_record(t, m, name, ids, n, steps, threads, err, sizeof err)) {
            status = cli_fail("trace", "%s", err);
        } else {
            const moe_trace_case *c = moe_trace_case_at(t, idx);
            printf("recorded case \"%s\": %d prompt tokens, %d steps:", c->name, c->n_prompt, c->n_expected);
            for (int s = 0; s < c->n_expected && s < 16; s++) printf(" %d", (int)c->expected[s]);
            printf("%s\n", c->n_expected > 16 ? " ..." : "");
        }
        free(ids);
    }
    if (!status && moe_trace_save(t, out, err, sizeof err)) status = cli_fail("trace", "%s", err);
    if (!status) {
        char fl[256];
        moe_model_flags(m, fl, sizeof fl);
        printf("wrote %s: %d cases (flags %s, isa %s)\n", out, moe_trace_n_cases(t), fl, moe_model_kernels(m));
    }
    moe_model_free(m);
    moe_trace_free(t);
    return status;
}
