/* cli_util.c — argument parsing helpers shared by the sub-commands. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "moefast.h"

int cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "moefast %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 2;
}

int cli_read_prompt(const char *cmd, const char *path, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    bool is_stdin = !strcmp(path, "-");
    const char *name = is_stdin ? "standard input" : path;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) { cli_fail(cmd, "cannot open prompt file %s: %s", path, strerror(errno)); return -1; }
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    bool too_big = false;
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        if (cap >= CLI_PROMPT_MAX) { /* one byte more tells a file of exactly the cap from a larger one */
            too_big = fgetc(f) != EOF;
            break;
        }
        size_t nc = cap * 2 < CLI_PROMPT_MAX ? cap * 2 : CLI_PROMPT_MAX;
        char *nb = realloc(b, nc + 1);
        if (!nb) { free(b); b = NULL; break; }
        b = nb; cap = nc;
    }
    int rd_err = ferror(f) ? errno : 0;
    if (!is_stdin) fclose(f);
    if (!b) { cli_fail(cmd, "out of memory reading %s", name); return -1; }
    if (rd_err || too_big || n == 0) {
        if (rd_err) cli_fail(cmd, "cannot read prompt file %s: %s", name, strerror(rd_err));
        else if (too_big) cli_fail(cmd, "prompt file %s is larger than %zu MiB (the most a prompt may have)", name, CLI_PROMPT_MAX >> 20);
        else cli_fail(cmd, "prompt file %s is empty", name);
        free(b);
        return -1;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}

void cli_check_ctx(const char *cmd, const moe_model *m, long n_ctx) {
    int yarn = 0, train = moe_model_ctx_limit(m, &yarn);
    if (n_ctx <= train || train <= 0) return;
    if (yarn >= n_ctx)
        fprintf(stderr, "moefast %s: note: --ctx %ld is past the trained context %d; the model's YaRN rope scaling covers up to %d\n",
                cmd, n_ctx, train, yarn);
    else
        fprintf(stderr, "moefast %s: warning: --ctx %ld is past the model's trained context %d%s; positions beyond it were never trained\n",
                cmd, n_ctx, train, yarn ? " (and its YaRN reach)" : "");
}

int cli_parse_int(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out) {
    if (!s) { cli_fail(cmd, "%s needs a value", opt); return -1; }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        cli_fail(cmd, "bad value for %s: '%s' (expected an integer in %ld..%ld)", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_float(const char *cmd, const char *opt, const char *s, double lo, double hi, double *out) {
    if (!s) { cli_fail(cmd, "%s needs a value", opt); return -1; }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        cli_fail(cmd, "bad value for %s: '%s' (expected a number in %g..%g)", opt, s, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_ids(const char *cmd, const char *s, int **ids, int *n) {
    *ids = NULL;
    *n = 0;
    if (!s || !*s) { cli_fail(cmd, "--tokens needs a comma-separated list of token ids"); return -1; }
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int *v = malloc(cap * sizeof *v);
    if (!v) { cli_fail(cmd, "out of memory"); return -1; }
    int k = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > 0x7fffffff || (*end && *end != ',')) {
            cli_fail(cmd, "bad token id list '%s' at character %d", s, (int)(p - s));
            free(v);
            return -1;
        }
        v[k++] = (int)x;
        p = *end ? end + 1 : end;
    }
    *ids = v;
    *n = k;
    return 0;
}

int cli_sampling_arg(const char *cmd, const char *a, const char *v, cli_sampling *cs) {
    moe_sampler_params *sp = &cs->p;
    long l;
    double d;
    if (!strcmp(a, "--presence-penalty") || !strcmp(a, "--frequency-penalty")) {
        if (cli_parse_float(cmd, a, v, -2, 2, &d)) return -1;
        *(a[2] == 'p' ? &cs->presence : &cs->frequency) = (float)d;
    } else if (!strcmp(a, "--repeat-penalty")) {
        if (cli_parse_float(cmd, a, v, 1e-6, 1e6, &d)) return -1;
        cs->repeat = (float)d;
    } else if (!strcmp(a, "--repeat-last-n")) {
        if (cli_parse_int(cmd, a, v, -1, MOE_SAMPLER_MAX_REPEAT_WINDOW, &l)) return -1;
        cs->repeat_last_n = (int)l;
        cs->repeat_last_n_set = true;
    } else if (!strcmp(a, "--temp")) {
        if (cli_parse_float(cmd, a, v, 0, 100, &d)) return -1;
        sp->temp = (float)d;
    } else if (!strcmp(a, "--top-k")) {
        if (cli_parse_int(cmd, a, v, 0, 1 << 30, &l)) return -1;
        sp->top_k = (int)l;
    } else if (!strcmp(a, "--top-p")) {
        if (cli_parse_float(cmd, a, v, 1e-9, 1, &d)) return -1;
        sp->top_p = (float)d;
    } else if (!strcmp(a, "--min-p")) {
        if (cli_parse_float(cmd, a, v, 0, 0.999999, &d)) return -1;
        sp->min_p = (float)d;
    } else if (!strcmp(a, "--seed")) {
        if (cli_parse_int(cmd, a, v, 0, 0x7fffffffL, &l)) return -1;
        sp->seed = (uint64_t)l;
    } else {
        return 0;
    }
    return 1;
}

int cli_sampler_new(const char *cmd, const cli_sampling *cs, int n_vocab, int n_ctx, moe_sampler **out) {
    char err[MOE_ERR_LEN];
    /* llama.cpp's defaults: a window of 64; -1 (or more than the context) is the whole context */
    int last_n = cs->repeat_last_n_set ? cs->repeat_last_n : 64;
    if (last_n < 0 || last_n > n_ctx) last_n = n_ctx;
    const float repeat = cs->repeat != 0.0f ? cs->repeat : 1.0f;
    if (moe_sampler_new(&cs->p, n_vocab, out, err, sizeof err) ||
        ((cs->presence != 0.0f || cs->frequency != 0.0f) &&
         moe_sampler_set_penalties(*out, cs->presence, cs->frequency, err, sizeof err)) ||
        (repeat != 1.0f && moe_sampler_set_repeat_penalty(*out, repeat, last_n, err, sizeof err))) {
        moe_sampler_free(*out);
        *out = NULL;
        return cli_fail(cmd, "%s", err);
    }
    return 0;
}

const char *cli_numerics(const struct moe_model *m, char *buf, size_t len) {
    char spec[512], err[MOE_ERR_LEN];
    moe_model_flags(m, spec, sizeof spec);
    if (moe_flags_numerics_of(spec, buf, len, err, sizeof err) != MOE_OK) snprintf(buf, len, "unknown");
    else if (!strcmp(buf, "none")) snprintf(buf, len, "fp32");
    return buf;
}

int cli_rope_arg(const char *cmd, const char *a, const char *v, moe_load_params *lp) {
    if (!strcmp(a, "--rope-scaling")) {
        if (!v || (strcmp(v, "none") && strcmp(v, "yarn")))
            return cli_fail(cmd, "bad value for --rope-scaling: '%s' (expected none or yarn)", v ? v : ""), -1;
        lp->rope_scaling = v;
        return 1;
    }
    if (!strcmp(a, "--rope-scale")) {
        double f;
        if (cli_parse_float(cmd, a, v, 1.0, 1e6, &f)) return -1;
        lp->rope_scale = (float)f;
        return 1;
    }
    if (!strcmp(a, "--yarn-orig-ctx")) {
        long n;
        if (cli_parse_int(cmd, a, v, 1, 1 << 24, &n)) return -1;
        lp->yarn_orig_ctx = (int)n;
        return 1;
    }
    return 0;
}
