/* moefast's pre-tokenizer pieces, same output format as split.cpp */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gguf/gguf.h"
#include "text/tokenizer.h"
#include "moefast.h"
int main(int argc, char **argv) {
    char err[512];
    gguf_file *g = NULL; moe_tokenizer *t = NULL;
    if (gguf_open(argv[1], &g, err, sizeof err) || moe_tokenizer_load(g, &t, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    FILE *f = fopen(argv[2], "rb"); fseek(f, 0, SEEK_END); long n = ftell(f); rewind(f);
    char *all = malloc(n + 1); fread(all, 1, n, f); all[n] = 0;
    const char *sep = "\n__ggml_vocab_test__\n";
    static uint32_t ends[1 << 20];
    for (char *p = all;;) {
        char *q = strstr(p, sep);
        if (!q) break;
        size_t m = 0, prev = 0;
        if (moe_tokenizer_pretokenize(t, p, q - p, ends, 1 << 20, &m, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        for (size_t k = 0; k < m; k++) {
            if (k) putchar('|');
            for (size_t i = prev; i < ends[k]; i++) printf("%02x", (unsigned char)p[i]);
            prev = ends[k];
        }
        putchar('\n');
        p = q + strlen(sep);
    }
    return 0;
}
