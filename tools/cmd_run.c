/* cmd_run.c — `moefast run`: prompt in, continuation out, with timings. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "moefast.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: moefast run -m FILE (-p TEXT | -f FILE | --tokens ID,ID,... | --batch FILE) [-n N] [-t THREADS]\n"
            "                   [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S]\n"
            "                   [--ctx N] [--batch-size N] [--flags SPEC] [--stop-eos] [--json] [--check TRACE]\n"
            "                   [--grammar FILE | --json-schema FILE]\n"
            "  -f FILE      the prompt text from a file (- for standard input; at most 64 MiB)\n"
            "  -n N         tokens to generate (default 32)\n"
            "  --ctx N      context size (default: prompt + N, at most the trained context;\n"
            "               a warning past the trained context unless YaRN covers it)\n"
            "  --batch FILE the prompts of FILE (one per line, - for stdin) generated together in\n"
            "               one context; each gets the tokens it gets alone (--json: ids per prompt)\n"
            "  --batch-size N  tokens per forward step (default 512)\n"
            "  --check TRACE  then replay the golden trace TRACE on the model (moefast gate) and say\n"
            "               whether this machine reproduced every token (exit 1 if not)\n"
            "  --json       print one JSON object: prompt/generated ids, text, timings\n"
            "  --grammar FILE      constrain the output to the GBNF grammar of FILE (llama.cpp's\n"
            "                      format; docs/GRAMMAR.md); generation stops where it must end\n"
            "  --json-schema FILE  constrain the output to JSON valid for the JSON Schema of FILE\n"
            "  --presence-penalty P, --frequency-penalty P  in [-2, 2]: OpenAI's penalties over the\n"
            "               generated tokens (logit - count x frequency - (count > 0) x presence)\n"
            "  --repeat-penalty P  > 0 (1: off): llama.cpp's; a token among the last N of prompt and\n"
            "               output gets logit / P (logit > 0) or logit x P (before the above)\n"
            "  --repeat-last-n N   that window (default 64; 0: off; -1: the whole context)\n"
            CLI_ROPE_USAGE
            "  sampling is greedy unless --temp > 0\n");
}

/* --grammar / --json-schema FILE compiled (before the model loads: a bad
 * file fails fast, with the parser's line:column or the schema's path). */
static int load_constraint_file(const char *C, const char *gfile, const char *sfile, moe_grammar **out) {
    const char *f = gfile ? gfile : sfile;
    FILE *fp = fopen(f, "rb");
    if (!fp) return cli_fail(C, "cannot open %s file %s: %s", gfile ? "grammar" : "JSON Schema", f, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 > cap) {
            char *nb = cap < ((size_t)16 << 20) ? realloc(buf, cap = cap ? 2 * cap : 8192) : NULL;
            if (!nb) { free(buf); fclose(fp); return cli_fail(C, "%s: too large or out of memory", f); }
            buf = nb;
        }
        size_t k = fread(buf + n, 1, cap - n, fp);
        n += k;
        if (k == 0) break;
    }
    int rd = ferror(fp);
    fclose(fp);
    if (rd) { free(buf); return cli_fail(C, "cannot read %s", f); }
    char err[MOE_ERR_LEN];
    int rc = gfile ? moe_grammar_parse(buf ? buf : "", n, NULL, out, err, sizeof err)
                   : moe_grammar_from_json_schema(buf ? buf : "", n, out, err, sizeof err);
    free(buf);
    return rc ? cli_fail(C, "%s: %s", f, err) : 0;
}

int cmd_run(int argc, char **argv) {
    const char *C = "run", *path = NULL, *prompt = NULL, *pfile = NULL, *ids_s = NULL, *flags = NULL;
    const char *batch_file = NULL, *check = NULL, *gfile = NULL, *sfile = NULL;
    long n_gen = 32, threads = 0, n_ctx = 0, n_batch = 0;
    cli_sampling smpp = {.p = {.temp = 0.0f, .top_p = 1.0f}}; /* greedy unless --temp */
    int sr;
    int json = 0, stop_eos = 0;
    moe_load_params lp = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!v) return cli_fail(C, "%s needs a file", a); path = v; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { if (!v) return cli_fail(C, "%s needs text", a); prompt = v; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { if (!v) return cli_fail(C, "%s needs a file (- for standard input)", a); pfile = v; }
        else if (!strcmp(a, "--tokens")) { if (!v) return cli_fail(C, "--tokens needs ids"); ids_s = v; }
        else if (!strcmp(a, "-n")) { if (cli_parse_int(C, a, v, 0, 1 << 24, &n_gen)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_int(C, a, v, 1, 1024, &threads)) return 2; }
        else if ((sr = cli_sampling_arg(C, a, v, &smpp)) != 0) { if (sr < 0) return 2; }
        else if ((sr = cli_rope_arg(C, a, v, &lp)) != 0) { if (sr < 0) return 2; }
        else if (!strcmp(a, "--ctx")) { if (cli_parse_int(C, a, v, 1, 1 << 22, &n_ctx)) return 2; }
        else if (!strcmp(a, "--batch-size")) { if (cli_parse_int(C, a, v, 1, 65536, &n_batch)) return 2; }
        else if (!strcmp(a, "--batch")) { if (!v) return cli_fail(C, "--batch needs a file of prompts"); batch_file = v; }
        else if (!strcmp(a, "--flags")) { if (!v) return cli_fail(C, "--flags needs a spec"); flags = v; }
        else if (!strcmp(a, "--grammar")) { if (!v) return cli_fail(C, "--grammar needs a GBNF file"); gfile = v; }
        else if (!strcmp(a, "--json-schema")) { if (!v) return cli_fail(C, "--json-schema needs a file"); sfile = v; }
        else if (!strcmp(a, "--check")) { if (!v) return cli_fail(C, "--check needs a trace file"); check = v; }
        else if (!strncmp(a, "--flags=", 8)) { flags = a + 8; used = 0; }
        else if (!strcmp(a, "--json")) { json = 1; used = 0; }
        else if (!strcmp(a, "--stop-eos")) { stop_eos = 1; used = 0; }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else { usage(stderr); return cli_fail(C, "unknown argument '%s'", a); }
        i += used;
    }
    if (!path) { usage(stderr); return cli_fail(C, "-m FILE is required"); }
    if (!!prompt + !!pfile + !!ids_s + !!batch_file != 1) {
        usage(stderr);
        return cli_fail(C, "give exactly one of -p TEXT, -f FILE, --tokens IDS or --batch FILE");
    }
    if (batch_file && check) return cli_fail(C, "--check replays one prompt's golden trace; not with --batch");
    if (gfile && sfile) return cli_fail(C, "give one of --grammar and --json-schema");
    moe_grammar *gram = NULL;
    if ((gfile || sfile) && load_constraint_file(C, gfile, sfile, &gram)) return 2;
    char *pbuf = NULL;
    size_t prompt_len = 0;
    if (pfile) { /* read before the model loads: a bad file fails fast */
        if (cli_read_prompt(C, pfile, &pbuf, &prompt_len)) return 2;
        prompt = pbuf;
    } else if (prompt) {
        prompt_len = strlen(prompt);
    }

    char err[MOE_ERR_LEN];
    double t0 = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t0 = ts.tv_sec + 1e-9 * ts.tv_nsec;
    moe_model *m = NULL;
    lp.flags = flags;
    if (cli_model_load(path, &lp, &m, err, sizeof err)) { free(pbuf); moe_grammar_free(gram); return cli_fail(C, "%s", err); }
    moe_trace *check_t = NULL;
    if (check && cli_check_open(C, check, m, &check_t)) { free(pbuf); moe_grammar_free(gram); moe_model_free(m); return 2; }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double t_load = ts.tv_sec + 1e-9 * ts.tv_nsec - t0;
    if (batch_file) {
        if (n_ctx) cli_check_ctx(C, m, n_ctx);
        const run_batch_opts bo = {n_gen, threads, n_ctx, n_batch, smpp, json, stop_eos, gram};
        int brc = run_batch(C, m, batch_file, &bo);
        moe_grammar_free(gram);
        moe_model_free(m);
        return brc;
    }

    int rc = 2, n_prompt = 0, *prompt_ids = NULL;
    int32_t *toks = NULL, *out_ids = NULL;
    float *logits = NULL;
    char *text = NULL;
    size_t text_len = 0;
    moe_session *s = NULL;
    moe_sampler *smp = NULL;
    moe_grammar_vocab *gvoc = NULL;
    moe_constraint *con = NULL;
    uint8_t *allowed = NULL;
    if (ids_s) {
        if (cli_parse_ids(C, ids_s, &prompt_ids, &n_prompt)) goto done;
    } else {
        size_t need = 0;
        if (moe_tokenize(m, prompt, prompt_len, moe_token_add_bos(m), true, NULL, 0, &need, err, sizeof err)) {
            cli_fail(C, "%s", err);
            goto done;
        }
        prompt_ids = malloc((need ? need : 1) * sizeof *prompt_ids);
        if (!prompt_ids) { cli_fail(C, "out of memory"); goto done; }
        if (moe_tokenize(m, prompt, prompt_len, moe_token_add_bos(m), true, prompt_ids, need, &need, err, sizeof err)) {
            cli_fail(C, "%s", err);
            goto done;
        }
        n_prompt = (int)need;
    }
    if (n_prompt == 0) { cli_fail(C, "the prompt has no tokens"); goto done; }
    int n_vocab = moe_model_n_vocab(m);
    for (int i = 0; i < n_prompt; i++)
        if (prompt_ids[i] >= n_vocab) { cli_fail(C, "token id %d is outside the vocabulary (0..%d)", prompt_ids[i], n_vocab - 1); goto done; }
    if (n_ctx) cli_check_ctx(C, m, n_ctx);
    moe_session_params sp = {.n_ctx = (int)n_ctx, .n_threads = (int)threads, .n_batch = (int)n_batch};
    if (!sp.n_ctx) {
        long want = n_prompt + n_gen;
        int train = moe_model_n_ctx_train(m);
        sp.n_ctx = (int)(want < train ? want : train);
        if (sp.n_ctx < 1) sp.n_ctx = 1;
    }
    if (n_prompt + n_gen > sp.n_ctx) {
        cli_fail(C, "prompt (%d) + tokens to generate (%ld) exceed the context (%d)", n_prompt, n_gen, sp.n_ctx);
        goto done;
    }
    if (moe_session_new(m, &sp, &s, err, sizeof err)) { cli_fail(C, "%s", err); goto done; }
    if (cli_sampler_new(C, &smpp, n_vocab, sp.n_ctx, &smp)) goto done;
    toks = malloc((size_t)n_prompt * sizeof *toks);
    out_ids = malloc(((size_t)n_gen + 1) * sizeof *out_ids);
    logits = malloc((size_t)n_vocab * sizeof *logits);
    if (!toks || !out_ids || !logits) { cli_fail(C, "out of memory"); goto done; }
    if (gram) {
        if (moe_grammar_vocab_new(m, &gvoc, err, sizeof err) || moe_constraint_new(gram, gvoc, &con, err, sizeof err)) {
            cli_fail(C, "%s", err);
            goto done;
        }
        if (!(allowed = malloc((size_t)n_vocab))) { cli_fail(C, "out of memory"); goto done; }
    }
    for (int i = 0; i < n_prompt; i++) toks[i] = prompt_ids[i];
    moe_sampler_accept_context(smp, toks, n_prompt);   /* the repeat penalty's window starts with the prompt */

    clock_gettime(CLOCK_MONOTONIC, &ts);
    double tp0 = ts.tv_sec + 1e-9 * ts.tv_nsec;
    /* greedy or top-k sampling needs only the top logits (lm_screen); a
     * grammar masks the whole vocabulary, so it takes every logit */
    const int topn = con ? 0 : moe_sampler_topk_need(smp);
    int32_t top_ids[64];
    float top_vals[64];
    if (topn ? moe_session_forward_topk(s, toks, n_prompt, topn, top_ids, top_vals)
             : moe_session_forward(s, toks, n_prompt, logits, false)) {
        cli_fail(C, "%s", moe_session_error(s));
        goto done;
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double tp1 = ts.tv_sec + 1e-9 * ts.tv_nsec;
    int32_t eos = moe_token_eos(m);
    int n_out = 0;
    moe_utf8_stream *us = moe_utf8_stream_new();
    for (long i = 0; i < n_gen; i++) {
        int32_t id;
        if (con) { /* only tokens that keep the output a valid prefix; end tokens where it may end */
            if (moe_constraint_mask(con, allowed, NULL)) { cli_fail(C, "%s", moe_constraint_error(con)); goto done; }
            id = moe_sampler_sample_masked(smp, logits, allowed);
            if (id < 0) {
                if (moe_constraint_accepting(con)) break; /* complete, and no end token in the vocabulary */
                cli_fail(C, "no token of the vocabulary continues the grammar here");
                goto done;
            }
            if (moe_constraint_accept(con, id)) { cli_fail(C, "%s", moe_constraint_error(con)); goto done; }
        } else {
            id = topn ? moe_sampler_sample_topk(smp, top_ids, top_vals, topn) : moe_sampler_sample(smp, logits);
        }
        moe_sampler_accept(smp, id);
        out_ids[n_out++] = id;
        if (!json) {
            const char *piece; size_t plen;
            if (moe_token_piece(m, id, false, &piece, &plen) == MOE_OK) {
                char buf[4 * 256 + 4];
                for (size_t off = 0; off < plen; off += 256) { /* pieces longer than 256 bytes go in parts */
                    size_t part = plen - off < 256 ? plen - off : 256;
                    size_t k = moe_utf8_stream_push(us, piece + off, part, buf, sizeof buf);
                    fwrite(buf, 1, k, stdout);
                }
                fflush(stdout);
            }
        }
        if ((stop_eos || con) && (id == eos || moe_token_is_eog(m, id))) break;
        if (i + 1 == n_gen) break;  /* the last token needs no forward */
        if (topn ? moe_session_forward_topk(s, &id, 1, topn, top_ids, top_vals)
                 : moe_session_forward(s, &id, 1, logits, false)) {
            cli_fail(C, "%s", moe_session_error(s));
            goto done;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double tp2 = ts.tv_sec + 1e-9 * ts.tv_nsec;
    int n_dec = n_out > 1 ? n_out - 1 : 0;  /* forwards after the prompt */
    double pre_s = tp1 - tp0, dec_s = tp2 - tp1;
    if (!json) {
        char buf[16];
        size_t k = moe_utf8_stream_flush(us, buf, sizeof buf);
        fwrite(buf, 1, k, stdout);
        printf("\n");
        fflush(stdout); /* the timing line (stderr) comes after the text */
        char num[128];
        fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s); decode: %d tokens in %.3f s (%.1f tok/s); load %.3f s; %s, numerics %s\n",
                n_prompt, pre_s, n_prompt / (pre_s > 0 ? pre_s : 1e-9), n_dec, dec_s,
                n_dec ? n_dec / (dec_s > 0 ? dec_s : 1e-9) : 0.0, t_load, moe_model_kernels(m), cli_numerics(m, num, sizeof num));
    } else {
        for (int i = 0; i < n_out; i++) {
            const char *piece; size_t plen;
            if (moe_token_piece(m, out_ids[i], false, &piece, &plen) == MOE_OK) {
                char *nt = realloc(text, text_len + plen + 1);
                if (!nt) { cli_fail(C, "out of memory"); moe_utf8_stream_free(us); goto done; }
                text = nt;
                memcpy(text + text_len, piece, plen);
                text_len += plen;
                text[text_len] = 0;
            }
        }
        json_t *o = json_object(), *pa = json_array(), *ga = json_array(), *tm = json_object();
        for (int i = 0; i < n_prompt; i++) json_array_append_new(pa, json_integer(prompt_ids[i]));
        for (int i = 0; i < n_out; i++) json_array_append_new(ga, json_integer(out_ids[i]));
        json_object_set_new(o, "model", json_string(path));
        json_object_set_new(o, "arch", json_string(moe_model_arch(m)));
        json_object_set_new(o, "prompt_tokens", pa);
        json_object_set_new(o, "tokens", ga);
        /* invalid UTF-8 in the text is replaced (jansson needs valid UTF-8) */
        json_t *js = json_stringn(text ? text : "", text_len);
        if (!js) {
            char *fixed = malloc(text_len * 3 + 1);
            size_t fl = 0;
            if (fixed) {
                moe_utf8_stream *u2 = moe_utf8_stream_new();
                fl = moe_utf8_stream_push(u2, text ? text : "", text_len, fixed, text_len * 3 + 1);
                fl += moe_utf8_stream_flush(u2, fixed + fl, text_len * 3 + 1 - fl);
                moe_utf8_stream_free(u2);
                js = json_stringn(fixed, fl);
                free(fixed);
            }
        }
        json_object_set_new(o, "text", js ? js : json_string(""));
        json_object_set_new(tm, "load_s", json_real(t_load));
        json_object_set_new(tm, "prefill_s", json_real(pre_s));
        json_object_set_new(tm, "prefill_tok_s", json_real(n_prompt / (pre_s > 0 ? pre_s : 1e-9)));
        json_object_set_new(tm, "decode_s", json_real(dec_s));
        json_object_set_new(tm, "decode_tokens", json_integer(n_dec));
        json_object_set_new(tm, "decode_tok_s", json_real(n_dec ? n_dec / (dec_s > 0 ? dec_s : 1e-9) : 0.0));
        json_object_set_new(o, "timings", tm);
        json_object_set_new(o, "isa", json_string(moe_model_kernels(m)));
        char fl[256];
        moe_model_flags(m, fl, sizeof fl);
        json_object_set_new(o, "flags", json_string(fl));
        char *dump = json_dumps(o, JSON_COMPACT);
        if (dump) { printf("%s\n", dump); free(dump); }
        json_decref(o);
    }
    moe_utf8_stream_free(us);
    rc = check ? cli_check_gate(C, m, check_t, check, moe_session_threads(s)) : 0;
done:
    free(pbuf);
    free(text);
    free(prompt_ids);
    free(toks);
    free(out_ids);
    free(logits);
    moe_sampler_free(smp);
    moe_constraint_free(con);
    moe_grammar_vocab_free(gvoc);
    moe_grammar_free(gram);
    free(allowed);
    moe_session_free(s);
    if (check_t) moe_trace_free(check_t);
    moe_model_free(m);
    return rc;
}
