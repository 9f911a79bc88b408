/* bench_grammar.c — the cost of a grammar-constrained step: the mask time
 * per step (JSON Schema of a tool call's arguments, and llama.cpp-style JSON
 * GBNF) on the bench models' vocabularies and on Qwen3's 151k-token one,
 * against a decode step of the bench models. Timing only: `make bench`,
 * never a test (docs/GRAMMAR.md has the figures).
 *
 * Each walk follows a fixed JSON text, tokenized by the vocabulary: per
 * step one mask (timed) then the text's token accepted. "cold" is a fresh
 * constraint (every transition computed), "warm" the same walk again (the
 * constraint's cached transitions). Models: BENCH_GRAMMAR_MODELS
 * (space-separated GGUF paths; default the bench models of build/models that
 * exist), BENCH_THREADS threads (2) for the decode step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moefast.h"
#include "base/util.h"

static const char *SCHEMA =
    "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"city\",\"days\",\"units\"],"
    "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":64},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14},"
    "\"units\":{\"enum\":[\"metric\",\"imperial\"]},"
    "\"notes\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":4}}}";
static const char *TEXT_SCHEMA =
    "{\"city\": \"San Francisco, California \xe2\x80\x94 near the Golden Gate\", \"days\": 7, \"units\": \"metric\", "
    "\"notes\": [\"bring a jacket\", \"fog in the morning, sun later\"]}";
static const char *GBNF =
    "root ::= value\n"
    "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\" ws\n"
    "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\" ws\n"
    "string ::= \"\\\"\" ([^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}))* \"\\\"\" ws\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";
static const char *TEXT_GBNF =
    "{\"items\": [{\"id\": 1, \"name\": \"alpha beta gamma delta\", \"score\": -12.5e3}, "
    "{\"id\": 2, \"tags\": [true, false, null], \"text\": \"Lorem ipsum dolor sit amet, consectetur\"}]}";

typedef struct { double mean, max; int steps; } walk_t;

/* One walk of text under g: per step, the mask's time. */
static int walk(moe_model *m, const moe_grammar_vocab *v, const moe_grammar *g, const char *text, int reps,
                walk_t *cold, walk_t *warm) {
    char err[MOE_ERR_LEN];
    int32_t ids[512];
    size_t n = 0;
    if (moe_tokenize(m, text, strlen(text), false, false, ids, 512, &n, err, sizeof err) || n > 512) return -1;
    int nv = moe_grammar_vocab_n(v);
    uint8_t *mask = malloc((size_t)nv);
    moe_constraint *c = NULL;
    if (!mask) return -1;
    walk_t *w[2] = {cold, warm};
    memset(cold, 0, sizeof *cold);
    memset(warm, 0, sizeof *warm);
    for (int r = 0; r < reps; r++) {
        if (moe_constraint_new(g, v, &c, err, sizeof err)) { fprintf(stderr, "%s\n", err); free(mask); return -1; }
        for (int pass = 0; pass < 2; pass++) {
            if (pass) moe_constraint_reset(c); /* the same walk, its transitions cached */
            for (size_t i = 0; i < n; i++) {
                double t0 = moe_now();
                int na = 0;
                moe_constraint_mask(c, mask, &na);
                double dt = moe_now() - t0;
                w[pass]->mean += dt;
                if (dt > w[pass]->max) w[pass]->max = dt;
                w[pass]->steps++;
                if (!mask[ids[i]] || moe_constraint_accept(c, ids[i])) {
                    fprintf(stderr, "bench_grammar: token %zu (%d) of the text not allowed\n", i, ids[i]);
                    break;
                }
            }
        }
        moe_constraint_free(c);
    }
    cold->mean /= cold->steps ? cold->steps : 1;
    warm->mean /= warm->steps ? warm->steps : 1;
    free(mask);
    return 0;
}

/* Median decode step (ms) of model m: 16 single-token forwards after an
 * 8-token prompt. */
static double decode_ms(moe_model *m, int threads) {
    char err[MOE_ERR_LEN];
    moe_session *s = NULL;
    moe_session_params sp = {.n_ctx = 64, .n_threads = threads};
    if (moe_session_new(m, &sp, &s, err, sizeof err)) return -1;
    int nv = moe_model_n_vocab(m);
    float *lg = malloc((size_t)nv * sizeof *lg);
    int32_t p[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    double t[16];
    if (lg && !moe_session_forward(s, p, 8, lg, false)) {
        for (int i = 0; i < 16; i++) {
            int32_t id = moe_argmax(lg, nv);
            double t0 = moe_now();
            moe_session_forward(s, &id, 1, lg, false);
            t[i] = moe_now() - t0;
        }
        for (int i = 1; i < 16; i++) /* insertion sort */
            for (int j = i; j > 0 && t[j] < t[j - 1]; j--) { double x = t[j]; t[j] = t[j - 1]; t[j - 1] = x; }
    } else {
        t[8] = -1e-3;
    }
    free(lg);
    moe_session_free(s);
    return t[8] * 1e3;
}

static void report(const char *what, moe_model *m, double step_ms) {
    char err[MOE_ERR_LEN];
    moe_grammar_vocab *v = NULL;
    double t0 = moe_now();
    if (moe_grammar_vocab_new(m, &v, err, sizeof err)) { fprintf(stderr, "bench_grammar: %s\n", err); return; }
    double tv = moe_now() - t0;
    moe_grammar *gs = NULL, *gg = NULL;
    if (moe_grammar_from_json_schema(SCHEMA, strlen(SCHEMA), &gs, err, sizeof err) ||
        moe_grammar_parse(GBNF, strlen(GBNF), NULL, &gg, err, sizeof err)) {
        fprintf(stderr, "bench_grammar: %s\n", err);
        moe_grammar_vocab_free(v); moe_grammar_free(gs);
        return;
    }
    printf("%-40s vocab %6d  trie built in %6.1f ms\n", what, moe_grammar_vocab_n(v), tv * 1e3);
    const char *names[2] = {"json-schema (tool args)", "json.gbnf"};
    const moe_grammar *gr[2] = {gs, gg};
    const char *tx[2] = {TEXT_SCHEMA, TEXT_GBNF};
    for (int k = 0; k < 2; k++) {
        walk_t c, w;
        if (walk(m, v, gr[k], tx[k], 3, &c, &w)) { printf("  %s: walk failed\n", names[k]); continue; }
        printf("  %-24s %3d steps: mask cold mean %7.3f ms (max %7.3f), warm mean %7.3f ms (max %7.3f)",
               names[k], c.steps / 3, c.mean * 1e3, c.max * 1e3, w.mean * 1e3, w.max * 1e3);
        if (step_ms > 0) printf("; cold mean = %.1f %% of a %.2f ms decode step", 100 * c.mean * 1e3 / step_ms, step_ms);
        printf("\n");
    }
    moe_grammar_free(gs); moe_grammar_free(gg);
    moe_grammar_vocab_free(v);
}

int main(void) {
    const char *env = getenv("BENCH_GRAMMAR_MODELS");
    const char *th = getenv("BENCH_THREADS");
    int threads = th && atoi(th) > 0 ? atoi(th) : 2;
    char list[4096];
    snprintf(list, sizeof list, "%s", env ? env :
             "build/models/qwen3moe-bench-q8_0.gguf build/models/laguna-bench-q8_0.gguf build/models/laguna-default.gguf");
    char err[MOE_ERR_LEN];
    double step_ms = -1;
    for (char *save = NULL, *p = strtok_r(list, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
        moe_model *m = NULL;
        if (moe_model_load(p, NULL, &m, err, sizeof err)) { printf("bench_grammar: %s: skipped (%s)\n", p, err); continue; }
        double ms = decode_ms(m, threads);
        printf("%s: decode step %.2f ms (median of 16, %d threads)\n", p, ms, threads);
        if (step_ms < 0) step_ms = ms;  /* the first model's step: the reference for the 151k vocabulary */
        report(p, m, ms);
        moe_model_free(m);
    }
    const char *shared = getenv("MOEFAST_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/qwen3-vocab.gguf", shared && *shared ? shared : "../shared");
    moe_load_params lp = {.vocab_only = true};
    moe_model *q = NULL;
    if (moe_model_load(path, &lp, &q, err, sizeof err)) { printf("bench_grammar: %s: skipped (%s)\n", path, err); return 0; }
    printf("(the 151k vocabulary against the first model's decode step above)\n");
    report(path, q, step_ms);
    moe_model_free(q);
    return 0;
}
