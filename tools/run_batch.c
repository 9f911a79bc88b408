/* run_batch.c — `moefast run --batch FILE`: every prompt of FILE (one per
 * line) in one context, generated together: the prompts' prefill in shared
 * steps, then one step per token with a decode token of every unfinished
 * prompt. Each prompt's tokens are those `moefast run -p PROMPT` gives it
 * alone (the batch contract, docs/EXACTNESS.md), so the command checks the
 * contract from the command line: compare the --json ids. With --grammar /
 * --json-schema each prompt has its own constraint of the one grammar and
 * samples among the tokens it allows, as `run -p` does alone. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "moefast.h"

typedef struct {
    char *text;
    int32_t *ids;              /* prompt ids, then the generated ones */
    int n_prompt, n_gen;
    bool done;
    moe_sampler *smp;
    moe_constraint *con;       /* --grammar: this prompt's constraint (NULL: none) */
} batch_prompt;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The non-blank lines of path (a trailing '\r' dropped), each malloc'd into
 * *out (freed by the caller, also after an error). */
static int read_prompts(const char *C, const char *path, batch_prompt **out, int *n) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return cli_fail(C, "--batch %s: cannot open", path);
    int rc = 0, line_no = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while (!rc && (len = getline(&line, &cap, f)) >= 0) {
        line_no++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (strspn(line, " \t") == (size_t)len) continue;
        batch_prompt *ps = *n < 4096 ? realloc(*out, (size_t)(*n + 1) * sizeof **out) : NULL;
        if (ps) *out = ps;
        char *t = ps ? strdup(line) : NULL;
        if (t) ps[(*n)++] = (batch_prompt){.text = t};
        else if (*n >= 4096) rc = cli_fail(C, "--batch %s: more than 4096 prompts (line %d)", path, line_no);
        else rc = cli_fail(C, "out of memory");
    }
    free(line);
    if (!rc && ferror(f)) rc = cli_fail(C, "--batch %s: read error", path);
    if (f != stdin) fclose(f);
    if (!rc && *n == 0) rc = cli_fail(C, "--batch %s: no prompts (one per line)", path);
    return rc;
}

static int tokenize_prompt(const char *C, moe_model *m, batch_prompt *p, int i, long n_gen) {
    char err[MOE_ERR_LEN];
    size_t need = 0, len = strlen(p->text);
    if (moe_tokenize(m, p->text, len, moe_token_add_bos(m), true, NULL, 0, &need, err, sizeof err))
        return cli_fail(C, "prompt %d: %s", i + 1, err);
    if (need == 0) return cli_fail(C, "prompt %d has no tokens", i + 1);
    p->ids = malloc((need + (size_t)n_gen + 1) * sizeof *p->ids);
    if (!p->ids) return cli_fail(C, "out of memory");
    if (moe_tokenize(m, p->text, len, moe_token_add_bos(m), true, p->ids, need, &need, err, sizeof err))
        return cli_fail(C, "prompt %d: %s", i + 1, err);
    p->n_prompt = (int)need;
    return 0;
}

/* The tokens of one step: every unfinished prompt's next input (its whole
 * prompt in the first step, then its last sampled token), the logits of
 * each prompt's last input. */
static int fill_step(batch_prompt *ps, int np, bool first, int32_t *tok, int32_t *seq, bool *want) {
    int nt = 0;
    for (int i = 0; i < np; i++) {
        if (ps[i].done) continue;
        const int from = first ? 0 : ps[i].n_prompt + ps[i].n_gen - 1, to = ps[i].n_prompt + ps[i].n_gen;
        for (int k = from; k < to; k++) {
            tok[nt] = ps[i].ids[k];
            seq[nt] = i;
            want[nt] = k == to - 1;
            nt++;
        }
    }
    return nt;
}

static void print_results(moe_model *m, const batch_prompt *ps, int np, bool json, int steps, int n_in, int n_out,
                          double pre_s, double dec_s) {
    if (!json) {
        for (int i = 0; i < np; i++) {
            printf("== prompt %d: %s\n", i + 1, ps[i].text);
            moe_utf8_stream *us = moe_utf8_stream_new();
            char buf[4 * 256 + 4];
            for (int k = 0; k < ps[i].n_gen; k++) {
                const char *piece;
                size_t plen;
                if (moe_token_piece(m, ps[i].ids[ps[i].n_prompt + k], false, &piece, &plen) != MOE_OK) continue;
                for (size_t off = 0; off < plen; off += 256) {
                    const size_t part = plen - off < 256 ? plen - off : 256;
                    fwrite(buf, 1, moe_utf8_stream_push(us, piece + off, part, buf, sizeof buf), stdout);
                }
            }
            fwrite(buf, 1, moe_utf8_stream_flush(us, buf, sizeof buf), stdout);
            moe_utf8_stream_free(us);
            printf("\n");
        }
        fflush(stdout);
        char num[128];
        fprintf(stderr, "batch: %d prompts, %d prompt tokens in %.3f s (%.1f tok/s); %d steps generated %d tokens in "
                        "%.3f s (%.1f tok/s); %s, numerics %s\n",
                np, n_in, pre_s, n_in / (pre_s > 0 ? pre_s : 1e-9), steps, n_out, dec_s,
                n_out / (dec_s > 0 ? dec_s : 1e-9), moe_model_kernels(m), cli_numerics(m, num, sizeof num));
        return;
    }
    json_t *o = json_object(), *arr = json_array();
    for (int i = 0; i < np; i++) {
        json_t *po = json_object(), *pa = json_array(), *ga = json_array();
        for (int k = 0; k < ps[i].n_prompt; k++) json_array_append_new(pa, json_integer(ps[i].ids[k]));
        for (int k = 0; k < ps[i].n_gen; k++) json_array_append_new(ga, json_integer(ps[i].ids[ps[i].n_prompt + k]));
        json_object_set_new(po, "prompt_tokens", pa);
        json_object_set_new(po, "tokens", ga);
        json_array_append_new(arr, po);
    }
    json_object_set_new(o, "prompts", arr);
    json_t *tm = json_object();
    json_object_set_new(tm, "prefill_s", json_real(pre_s));
    json_object_set_new(tm, "prefill_tokens", json_integer(n_in));
    json_object_set_new(tm, "decode_s", json_real(dec_s));
    json_object_set_new(tm, "decode_steps", json_integer(steps));
    json_object_set_new(tm, "decode_tokens", json_integer(n_out));
    json_object_set_new(tm, "decode_tok_s", json_real(n_out / (dec_s > 0 ? dec_s : 1e-9)));
    json_object_set_new(o, "timings", tm);
    json_object_set_new(o, "isa", json_string(moe_model_kernels(m)));
    char *dump = json_dumps(o, JSON_COMPACT);
    if (dump) { printf("%s\n", dump); free(dump); }
    json_decref(o);
}

/* One constraint of grammar g per prompt (the vocabulary's tables shared). */
static int batch_constraints(const char *C, moe_model *m, batch_prompt *ps, int np, const moe_grammar *g,
                             moe_grammar_vocab **gv, uint8_t **allowed) {
    char err[MOE_ERR_LEN];
    if (moe_grammar_vocab_new(m, gv, err, sizeof err)) return cli_fail(C, "%s", err);
    for (int i = 0; i < np; i++)
        if (moe_constraint_new(g, *gv, &ps[i].con, err, sizeof err)) return cli_fail(C, "%s", err);
    if (!(*allowed = malloc((size_t)moe_model_n_vocab(m)))) return cli_fail(C, "out of memory");
    return 0;
}

/* Prompt p's token among those its constraint allows, as `run -p` samples
 * it alone: 0 with *id, 1 when the output is complete and nothing may
 * follow (no token added), -1 on an error (printed). */
static int batch_masked(const char *C, batch_prompt *p, int i, const float *logits, uint8_t *allowed, int32_t *id) {
    if (moe_constraint_mask(p->con, allowed, NULL)) return cli_fail(C, "%s", moe_constraint_error(p->con)), -1;
    *id = moe_sampler_sample_masked(p->smp, logits, allowed);
    if (*id < 0) {
        if (moe_constraint_accepting(p->con)) return 1;
        return cli_fail(C, "prompt %d: no token of the vocabulary continues the grammar here", i + 1), -1;
    }
    if (moe_constraint_accept(p->con, *id)) return cli_fail(C, "%s", moe_constraint_error(p->con)), -1;
    return 0;
}

int run_batch(const char *C, moe_model *m, const char *file, const run_batch_opts *o) {
    char err[MOE_ERR_LEN];
    batch_prompt *ps = NULL;
    int np = 0, rc = 2, n_in = 0, longest = 0;
    moe_context *ctx = NULL;
    int32_t *tok = NULL, *seq = NULL;
    bool *want = NULL;
    float *logits = NULL, *top_vals = NULL;
    int32_t *top_ids = NULL;
    moe_grammar_vocab *gvoc = NULL;
    uint8_t *allowed = NULL;
    const int V = moe_model_n_vocab(m);
    if (read_prompts(C, file, &ps, &np)) goto done;
    for (int i = 0; i < np; i++) {
        if (tokenize_prompt(C, m, &ps[i], i, o->n_gen)) goto done;
        n_in += ps[i].n_prompt;
        if (ps[i].n_prompt > longest) longest = ps[i].n_prompt;
    }
    if (o->grammar && batch_constraints(C, m, ps, np, o->grammar, &gvoc, &allowed)) goto done;
    moe_context_params cp = {.n_ctx = (int)o->n_ctx, .n_threads = (int)o->threads, .n_batch = (int)o->n_batch, .n_seq = np};
    if (!cp.n_ctx) {
        const long want_ctx = longest + o->n_gen, train = moe_model_n_ctx_train(m);
        cp.n_ctx = (int)(want_ctx < train ? want_ctx : train);
    }
    if (longest + o->n_gen > cp.n_ctx) {
        cli_fail(C, "the longest prompt (%d) + tokens to generate (%ld) exceed the context (%d)", longest, o->n_gen, cp.n_ctx);
        goto done;
    }
    if (moe_context_new(m, &cp, &ctx, err, sizeof err)) { cli_fail(C, "%s", err); goto done; }
    for (int i = 0; i < np; i++) {
        if (cli_sampler_new(C, &o->sampling, V, cp.n_ctx, &ps[i].smp)) goto done;
        moe_sampler_accept_context(ps[i].smp, ps[i].ids, ps[i].n_prompt);   /* the repeat penalty's window */
    }
    const size_t step_max = (size_t)(n_in > np ? n_in : np);   /* the first step: every prompt whole */
    tok = malloc(step_max * sizeof *tok);
    seq = malloc(step_max * sizeof *seq);
    want = malloc(step_max * sizeof *want);
    /* greedy or top-k sampling needs only each row's top logits (the same
     * sampler for every prompt): the lm head is screened (lm_screen); a
     * grammar masks the whole vocabulary, so it takes every logit */
    const int topn = ps[0].con ? 0 : moe_sampler_topk_need(ps[0].smp);
    if (topn) {
        top_ids = malloc((size_t)np * (size_t)topn * sizeof *top_ids);
        top_vals = malloc((size_t)np * (size_t)topn * sizeof *top_vals);
    } else
        logits = malloc((size_t)np * (size_t)V * sizeof *logits);
    if (!tok || !seq || !want || (topn ? !top_ids || !top_vals : !logits)) { cli_fail(C, "out of memory"); goto done; }
    const int32_t eos = moe_token_eos(m);
    double t0 = now_s(), t1 = t0;
    int steps = 0, n_dec = 0;                              /* tokens sampled from decode steps */
    for (bool first = true; o->n_gen > 0; first = false) {
        const int nt = fill_step(ps, np, first, tok, seq, want);
        if (nt == 0) break;
        moe_batch b = {.n_tokens = nt, .token = tok, .seq = seq, .logits = want};
        if (topn ? moe_context_decode_topk(ctx, &b, topn, top_ids, top_vals) : moe_context_decode(ctx, &b, logits)) {
            cli_fail(C, "%s", moe_context_error(ctx));
            goto done;
        }
        if (first) t1 = now_s();
        else steps++;
        for (int i = 0, row = 0; i < np; i++) {            /* logits rows: the unfinished prompts in order */
            if (ps[i].done) continue;
            const size_t r = (size_t)row++;
            const size_t at = r * (size_t)topn;
            int32_t id = 0;
            const int gr = ps[i].con ? batch_masked(C, &ps[i], i, logits + r * V, allowed, &id) : 0;
            if (gr < 0) goto done;
            if (gr > 0) { ps[i].done = true; continue; }   /* the grammar is complete */
            if (!ps[i].con)
                id = topn ? moe_sampler_sample_topk(ps[i].smp, top_ids + at, top_vals + at, topn)
                          : moe_sampler_sample(ps[i].smp, logits + r * V);
            moe_sampler_accept(ps[i].smp, id);
            ps[i].ids[ps[i].n_prompt + ps[i].n_gen++] = id;
            n_dec += !first;
            /* a grammar ends at the end token, as run -p's */
            if (ps[i].n_gen >= o->n_gen || ((o->stop_eos || ps[i].con) && (id == eos || moe_token_is_eog(m, id)))) ps[i].done = true;
        }
    }
    print_results(m, ps, np, o->json, steps, n_in, n_dec, t1 - t0, now_s() - t1);
    rc = 0;
done:
    for (int i = 0; i < np; i++) {
        free(ps[i].text);
        free(ps[i].ids);
        moe_sampler_free(ps[i].smp);
        moe_constraint_free(ps[i].con);
    }
    moe_grammar_vocab_free(gvoc);
    free(allowed);
    free(ps);
    free(tok);
    free(seq);
    free(want);
    free(logits);
    free(top_ids);
    free(top_vals);
    moe_context_free(ctx);
    return rc;
}
