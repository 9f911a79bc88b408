/* cmd_tokenize.c — `moefast tokenize`: text to token ids and pieces, from the
 * vocabulary alone (vocab_only load, so vocabulary-only GGUFs work). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "moefast.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: moefast tokenize -m FILE (TEXT | -f FILE) [--json] [--no-special] [--bos|--no-bos]\n"
            "  TEXT          the text (bytes taken verbatim; -f reads them from a file, - for stdin,\n"
            "                at most 64 MiB)\n"
            "  --no-special  control tokens written in the text stay plain text\n"
            "                (user-defined tokens such as <think> are still matched, as in llama.cpp)\n"
            "  --bos, --no-bos  prepend the BOS token or not (default: the file's add_bos_token)\n"
            "  --json        {\"n_tokens\":N,\"ids\":[...],\"pieces\":[...]} (pieces with U+FFFD for\n"
            "                invalid UTF-8); otherwise one line per token: ID<TAB>piece, escaped\n");
}

/* Printable ASCII as is; backslash, quotes and everything else escaped. */
static void print_escaped(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\\') fputs("\\\\", stdout);
        else if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c >= 0x20 && c < 0x7f) putchar(c);
        else if (c >= 0x80) putchar(c); /* UTF-8 passes through; invalid bytes are shown below */
        else printf("\\x%02x", c);
    }
}

static bool valid_utf8(const char *p, size_t n, char *tmp) {
    moe_utf8_stream *u = moe_utf8_stream_new();
    if (!u) return false;
    size_t k = moe_utf8_stream_push(u, p, n, tmp, 4 * n + 4);
    k += moe_utf8_stream_flush(u, tmp + k, 4);
    moe_utf8_stream_free(u);
    return k == n && memcmp(tmp, p, n) == 0;
}

int cmd_tokenize(int argc, char **argv) {
    const char *C = "tokenize", *path = NULL, *text = NULL, *file = NULL;
    int json = 0, special = 1, bos = 0; /* 0: the file's add_bos_token, 1: --bos, -1: --no-bos */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!v) return cli_fail(C, "%s needs a file", a); path = v; i++; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) return cli_fail(C, "%s needs a file", a); file = v; i++; }
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--no-special")) special = 0;
        else if (!strcmp(a, "--bos")) bos = 1;
        else if (!strcmp(a, "--no-bos")) bos = -1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--")) { if (!v) return cli_fail(C, "-- needs TEXT"); if (text) return cli_fail(C, "more than one TEXT"); text = v; i++; }
        else if (a[0] == '-' && a[1]) { usage(stderr); return cli_fail(C, "unknown argument '%s'", a); }
        else { if (text) { usage(stderr); return cli_fail(C, "more than one TEXT ('%s')", a); } text = a; }
    }
    if (!path) { usage(stderr); return cli_fail(C, "-m FILE is required"); }
    if (!text == !file) { usage(stderr); return cli_fail(C, "give exactly one of TEXT or -f FILE"); }

    char *buf = NULL;
    size_t len;
    if (file) {
        if (cli_read_prompt(C, file, &buf, &len)) return 2;
        text = buf;
    } else {
        len = strlen(text);
    }

    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_load_params lp = {.vocab_only = true};
    if (moe_model_load(path, &lp, &m, err, sizeof err)) { free(buf); return cli_fail(C, "%s", err); }
    int rc = 2;
    int32_t *ids = NULL;
    char *tmp = NULL;
    size_t n = 0;
    if (!bos) bos = moe_token_add_bos(m) ? 1 : -1;
    if (moe_tokenize(m, text, len, bos > 0, special, NULL, 0, &n, err, sizeof err)) { cli_fail(C, "%s", err); goto done; }
    ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) { cli_fail(C, "out of memory"); goto done; }
    if (moe_tokenize(m, text, len, bos > 0, special, ids, n, &n, err, sizeof err)) { cli_fail(C, "%s", err); goto done; }

    if (json) {
        json_t *o = json_object(), *ja = json_array(), *pa = json_array();
        for (size_t i = 0; i < n; i++) {
            const char *p; size_t pl;
            json_array_append_new(ja, json_integer(ids[i]));
            if (moe_token_piece(m, ids[i], true, &p, &pl)) { p = ""; pl = 0; }
            char *fixed = malloc(4 * pl + 8);
            size_t fl = 0;
            if (!fixed) { json_decref(o); json_decref(ja); json_decref(pa); cli_fail(C, "out of memory"); goto done; }
            moe_utf8_stream *u = moe_utf8_stream_new();
            if (u) {
                fl = moe_utf8_stream_push(u, p, pl, fixed, 4 * pl + 4);
                fl += moe_utf8_stream_flush(u, fixed + fl, 4);
                moe_utf8_stream_free(u);
            }
            json_array_append_new(pa, json_stringn(fixed, fl));
            free(fixed);
        }
        json_object_set_new(o, "n_tokens", json_integer((json_int_t)n));
        json_object_set_new(o, "ids", ja);
        json_object_set_new(o, "pieces", pa);
        char *dump = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (dump) { printf("%s\n", dump); free(dump); }
        json_decref(o);
    } else {
        for (size_t i = 0; i < n; i++) {
            const char *p; size_t pl;
            if (moe_token_piece(m, ids[i], true, &p, &pl)) { p = ""; pl = 0; }
            printf("%d\t", ids[i]);
            free(tmp);
            tmp = malloc(4 * pl + 8);
            if (tmp && valid_utf8(p, pl, tmp)) print_escaped(p, pl);
            else for (size_t k = 0; k < pl; k++) printf("\\x%02x", (unsigned char)p[k]);
            putchar('\n');
        }
    }
    rc = 0;
done:
    free(tmp);
    free(ids);
    free(buf);
    moe_model_free(m);
    return rc;
}
