/* bench_tokenizer.c — encode throughput (MB/s) of the Qwen3 vocabulary on
 * >= 1 MB of mixed text (English prose, code, numbers, whitespace runs, CJK,
 * emoji, accented Latin), one thread. Timing only: `make bench`, never a test.
 *
 * `bench_tokenizer VOCAB --input FILE` instead encodes FILE once and prints
 * the encode time and the process's peak RSS (one process per input, so the
 * peak belongs to that input): the scaling table of docs/TOKENIZER.md.
 * `--merge heap|queue|naive` after it forces one merge path (default auto). */
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "text/tokenizer.h"
#include "base/util.h"

static const char *const SAMPLES[] = {
    ("The quick brown fox jumps over the lazy dog. Once upon a time, in a land far away, "
     "there lived a king who didn't know what he'd planned for the kingdom's future.\n"),
    "def add(a, b):\n    return a + b\n\nfor (int i = 0; i < n; i++) {\n\tsum += x[i] * y[i];\n}\n",
    "2024-06-01T12:34:56Z 3.14159 1,000,000 and 12,345.67 dollars; call +1 (555) 123-4567\n",
    "你好，世界！日本語のテキストとカタカナ、ひらがな。한국어 문장입니다. 混合 mixed 文本 text 123\n",
    "naïve café résumé jalapeño — Äpfel Österreich Übermut straße. Zażółć gęślą jaźń.\n",
    "I love 🍕 and 🍣! 👩\xe2\x80\x8d👩\xe2\x80\x8d👧 family, 👍🏽 thumbs, 🇫🇷 flag\n",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}   \n\n    <div class=\"main\">link</div>\n",
    "Привет, мир! Ελληνικά. مرحبا بالعالم. नमस्ते दुनिया\n",
};

static long peak_kb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static int encode_file(moe_tokenizer *t, const char *file, int merge) {
    FILE *fp = fopen(file, "rb");
    if (!fp) { fprintf(stderr, "bench_tokenizer: cannot open %s\n", file); moe_tokenizer_free(t); return 2; }
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, fp) != (size_t)n) { fprintf(stderr, "bench_tokenizer: cannot read %s\n", file); return 2; }
    fclose(fp);
    long kb0 = peak_kb();
    char err[MOE_ERR_LEN];
    size_t n_ids = 0;
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    double t0 = moe_now();
    moe_tok_merge how = {.merge = merge};
    int rc = moe_tokenizer_encode_merge(t, &how, text, (size_t)n, false, true, ids, (size_t)n + 1, &n_ids, err, sizeof err);
    double dt = moe_now() - t0;
    if (rc != MOE_OK) { fprintf(stderr, "bench_tokenizer: %s\n", err); return 2; }
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the ids: paths must agree */
    for (size_t i = 0; i < n_ids; i++) { h ^= (uint32_t)ids[i]; h *= 1099511628211ull; }
    printf("%s: %ld bytes -> %zu tokens (ids hash %016llx, %zu queue fallbacks) in %.1f ms; peak RSS %ld KB (%ld KB before encoding)\n",
           file, n, n_ids, (unsigned long long)h, how.n_fallback, dt * 1e3, peak_kb(), kb0);
    free(ids); free(text);
    moe_tokenizer_free(t);
    return 0;
}

int main(int argc, char **argv) {
    const char *shared = getenv("MOEFAST_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/qwen3-vocab.gguf", shared && *shared ? shared : "../shared");
    if (argc > 1) snprintf(path, sizeof path, "%s", argv[1]);
    const char *input = argc > 3 && !strcmp(argv[2], "--input") ? argv[3] : NULL;
    char err[MOE_ERR_LEN];
    gguf_file *f = NULL;
    moe_tokenizer *t = NULL;
    if (gguf_open(path, &f, err, sizeof err) != MOE_OK || moe_tokenizer_load(f, &t, err, sizeof err) != MOE_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", err);
        return 2;
    }
    gguf_close(f);
    int merge = MOE_TOK_MERGE_AUTO;
    if (input && argc > 5 && !strcmp(argv[4], "--merge"))
        merge = !strcmp(argv[5], "heap") ? MOE_TOK_MERGE_HEAP : !strcmp(argv[5], "queue") ? MOE_TOK_MERGE_QUEUE
              : !strcmp(argv[5], "naive") ? MOE_TOK_MERGE_NAIVE : MOE_TOK_MERGE_AUTO;
    if (input) return encode_file(t, input, merge);
    /* >= 1 MB: runs of 1..12 consecutive space-separated words taken from
     * random places of the samples, random numbers and line breaks between
     * them, so words recur (as in real text) but lines do not repeat */
    size_t cap = (1u << 20) + 4096, n = 0;
    char *text = malloc(cap);
    moe_rng r;
    moe_rng_seed(&r, 42);
    size_t ns = sizeof SAMPLES / sizeof SAMPLES[0];
    while (n < (1u << 20)) {
        const char *s = SAMPLES[moe_rng_next(&r) % ns];
        size_t l = strlen(s), a = moe_rng_next(&r) % l;
        while (a > 0 && s[a - 1] != ' ') a--;
        size_t b = a;
        for (int w = 1 + (int)(moe_rng_next(&r) % 12); w > 0 && b < l; w--) {
            b++;
            while (b < l && s[b] != ' ') b++;
        }
        memcpy(text + n, s + a, b - a);
        n += b - a;
        uint64_t x = moe_rng_next(&r);
        if (x % 3 == 0) n += (size_t)snprintf(text + n, 32, " %llu", (unsigned long long)(x >> 40));
        if (x % 7 == 0) text[n++] = '\n';
    }
    size_t cap_ids = n, n_ids = 0;
    int32_t *ids = malloc(cap_ids * sizeof *ids);
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = moe_now();
        if (moe_tokenizer_encode(t, text, n, false, true, ids, cap_ids, &n_ids, err, sizeof err) != MOE_OK) {
            fprintf(stderr, "bench_tokenizer: %s\n", err);
            return 2;
        }
        double dt = moe_now() - t0;
        if (dt < best) best = dt;
    }
    printf("tokenizer encode (qwen3, 1 thread): %.2f MB in %.1f ms -> %.1f MB/s, %zu tokens (%.2f bytes/token)\n",
           n / 1e6, best * 1e3, n / 1e6 / best, n_ids, (double)n / (double)n_ids);
    free(ids); free(text);
    moe_tokenizer_free(t);
    return 0;
}
