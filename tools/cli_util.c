/* cli_util.c — argument parsing helpers shared by the sub-commands. */
#include <errno.h>
#include <stdarg.h>
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

int cli_sampling_arg(const char *cmd, const char *a, const char *v, moe_sampler_params *sp) {
    long l;
    double d;
    if (!strcmp(a, "--temp")) {
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
