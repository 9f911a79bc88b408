/* cmd_chat.c — `moefast chat`: interactive multi-turn chat on stdin/stdout.
 *
 * One user turn per input line. The KV cache is kept across turns: each turn
 * renders the whole conversation with the chat format, and only the part
 * after what the session already holds is tokenized and fed. The session's
 * content is tracked as text (what was fed, plus the generated pieces with
 * their special tokens) with the text offset of every position, so when the
 * rendering disagrees with what was generated (the model ended with another
 * end-of-generation token, or a reply hit -n) the session is truncated to the
 * last position inside the common prefix and the rest is fed again.
 *
 * Replies stop at an end-of-generation token (the tokenizer's set: EOS plus
 * <|im_end|>, <|endoftext|>, ... — see docs/TOKENIZER.md; the public API
 * exposes EOS, so the pieces of EOS and the known end tokens are matched),
 * at -n tokens, or on Ctrl-C; Ctrl-C at the prompt, or end of input, exits.
 * stdout carries only the replies (one line each); prompts and notes go to
 * stderr. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "moefast.h"

static volatile sig_atomic_t g_sigint = 0;
static void on_sigint(int sig) { (void)sig; g_sigint = 1; }

static void usage(FILE *f) {
    fprintf(f,
            "usage: moefast chat -m FILE [--system TEXT] [--chat-format NAME] [-n MAX] [-t N]\n"
            "                    [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S]\n"
            "                    [--ctx N] [--flags SPEC] [-v]\n"
            "  one user message per input line; replies go to stdout\n"
            "  --chat-format NAME  chatml | laguna | harmony (default: recognised from the model's template)\n"
            "  -n MAX              most tokens per reply (default 256)\n"
            "  -v                  per-turn token counts on stderr\n"
            "  --presence-penalty P, --frequency-penalty P  in [-2, 2], over the tokens generated so far\n"
            "  --repeat-penalty P  > 0 (1: off): llama.cpp's, over the last --repeat-last-n N tokens of\n"
            "                      the conversation (default 64; 0: off; -1: the whole context)\n"
            CLI_ROPE_USAGE
            "  Ctrl-C stops the current reply; at the prompt (or end of input) it exits\n");
}

typedef struct conv {
    moe_chat_msg *msgs; size_t n, cap;
} conv;

static int conv_add(conv *c, const char *role, const char *content, size_t len) {
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 8;
        moe_chat_msg *nm = realloc(c->msgs, nc * sizeof *nm);
        if (!nm) return -1;
        c->msgs = nm; c->cap = nc;
    }
    char *r = strdup(role), *t = malloc(len + 1);
    if (!r || !t) { free(r); free(t); return -1; }
    memcpy(t, content, len);
    t[len] = 0;
    c->msgs[c->n].role = r;
    c->msgs[c->n].content = t;
    c->n++;
    return 0;
}

static void conv_free(conv *c) {
    for (size_t i = 0; i < c->n; i++) { free((char *)c->msgs[i].role); free((char *)c->msgs[i].content); }
    free(c->msgs);
}

/* What the session holds: text, and text offset at the end of each position. */
typedef struct held {
    char *text; size_t len, cap;
    size_t *end; int n, ncap;
} held;

static int held_add(held *h, const char *p, size_t n) {
    if (h->len + n + 1 > h->cap) {
        size_t nc = h->cap ? h->cap : 4096;
        while (nc < h->len + n + 1) nc *= 2;
        char *nt = realloc(h->text, nc);
        if (!nt) return -1;
        h->text = nt; h->cap = nc;
    }
    memcpy(h->text + h->len, p, n);
    h->len += n;
    h->text[h->len] = 0;
    if (h->n == h->ncap) {
        int nc = h->ncap ? h->ncap * 2 : 1024;
        size_t *ne = realloc(h->end, (size_t)nc * sizeof *ne);
        if (!ne) return -1;
        h->end = ne; h->ncap = nc;
    }
    h->end[h->n++] = h->len;
    return 0;
}

static bool is_end_piece(const char *p, size_t n) {
    static const char *const ENDS[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "<end_of_turn>",
                                       "</assistant>", "<|end_of_text|>", "</s>"};
    for (size_t i = 0; i < sizeof ENDS / sizeof ENDS[0]; i++)
        if (strlen(ENDS[i]) == n && !memcmp(ENDS[i], p, n)) return true;
    return false;
}

int cmd_chat(int argc, char **argv) {
    const char *C = "chat", *path = NULL, *system_msg = NULL, *format = NULL, *flags = NULL;
    long n_max = 256, threads = 0, n_ctx = 0;
    cli_sampling smpp = {.p = {.temp = 0.0f, .top_p = 1.0f}}; /* greedy unless --temp */
    int sr;
    int verbose = 0;
    moe_load_params lp = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int used = 1;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { if (!v) return cli_fail(C, "%s needs a file", a); path = v; }
        else if (!strcmp(a, "--system")) { if (!v) return cli_fail(C, "--system needs text"); system_msg = v; }
        else if (!strcmp(a, "--chat-format")) { if (!v) return cli_fail(C, "--chat-format needs a name"); format = v; }
        else if (!strcmp(a, "-n")) { if (cli_parse_int(C, a, v, 1, 1 << 24, &n_max)) return 2; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { if (cli_parse_int(C, a, v, 1, 1024, &threads)) return 2; }
        else if ((sr = cli_sampling_arg(C, a, v, &smpp)) != 0) { if (sr < 0) return 2; }
        else if ((sr = cli_rope_arg(C, a, v, &lp)) != 0) { if (sr < 0) return 2; }
        else if (!strcmp(a, "--ctx")) { if (cli_parse_int(C, a, v, 16, 1 << 22, &n_ctx)) return 2; }
        else if (!strcmp(a, "--flags")) { if (!v) return cli_fail(C, "--flags needs a spec"); flags = v; }
        else if (!strncmp(a, "--flags=", 8)) { flags = a + 8; used = 0; }
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) { verbose = 1; used = 0; }
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else { usage(stderr); return cli_fail(C, "unknown argument '%s'", a); }
        i += used;
    }
    if (!path) { usage(stderr); return cli_fail(C, "-m FILE is required"); }

    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    lp.flags = flags;
    if (cli_model_load(path, &lp, &m, err, sizeof err)) return cli_fail(C, "%s", err);

    int rc = 2;
    conv cv = {0};
    held h = {0};
    moe_session *s = NULL;
    moe_sampler *smp = NULL;
    float *logits = NULL;
    int32_t *ids = NULL, *gen = NULL;
    size_t ids_cap = 0;
    char *line = NULL, *rendered = NULL, *reply = NULL;
    size_t line_cap = 0, reply_len = 0, reply_cap = 0;
    moe_utf8_stream *us = moe_utf8_stream_new();
    int n_vocab = moe_model_n_vocab(m);
    int32_t eos = moe_token_eos(m);
    bool tty = isatty(0);

    /* check the format now, so an unknown template fails before any input */
    if (moe_chat_render(m, format, NULL, 0, true, &rendered, err, sizeof err)) { cli_fail(C, "%s", err); goto done; }
    free(rendered);
    rendered = NULL;

    if (n_ctx) cli_check_ctx(C, m, n_ctx);
    moe_session_params sp = {.n_ctx = (int)n_ctx, .n_threads = (int)threads};
    if (moe_session_new(m, &sp, &s, err, sizeof err)) { cli_fail(C, "%s", err); goto done; }
    /* the context a session gets (moe_session_params): --repeat-last-n -1 means it */
    const int ctx_len = n_ctx ? (int)n_ctx : moe_model_n_ctx_train(m) < 4096 ? moe_model_n_ctx_train(m) : 4096;
    if (cli_sampler_new(C, &smpp, n_vocab, ctx_len, &smp)) goto done;
    /* greedy or top-k sampling needs only the top logits: the lm head is
     * screened (lm_screen), the same tokens */
    const int topn = moe_sampler_topk_need(smp);
    int32_t top_ids[64];
    float top_vals[64];
    logits = malloc((size_t)n_vocab * sizeof *logits);
    gen = malloc((size_t)n_max * sizeof *gen);
    if (!logits || !gen || !us) { cli_fail(C, "out of memory"); goto done; }
    if (system_msg && conv_add(&cv, "system", system_msg, strlen(system_msg))) { cli_fail(C, "out of memory"); goto done; }
    /* vocabularies that want a BOS (tokenizer.ggml.add_bos_token) get it once,
     * at the start of the conversation; it holds no template text */
    if (moe_token_add_bos(m) && moe_token_bos(m) >= 0) {
        int32_t bos = moe_token_bos(m);
        if (moe_session_forward(s, &bos, 1, NULL, false)) { cli_fail(C, "%s", moe_session_error(s)); goto done; }
        moe_sampler_accept_context(smp, &bos, 1);
        if (held_add(&h, "", 0)) { cli_fail(C, "out of memory"); goto done; }
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a Ctrl-C at the prompt interrupts the read */
    sigaction(SIGINT, &sa, NULL);

    for (int turn = 1;; turn++) {
        if (tty) { fputs("> ", stderr); fflush(stderr); }
        g_sigint = 0;
        errno = 0;
        ssize_t ll = getline(&line, &line_cap, stdin);
        if (ll < 0 || g_sigint) { /* end of input, or Ctrl-C at the prompt */
            if (tty) fputc('\n', stderr);
            break;
        }
        while (ll > 0 && (line[ll - 1] == '\n' || line[ll - 1] == '\r')) ll--;
        if (ll == 0) { turn--; continue; }
        if (conv_add(&cv, "user", line, (size_t)ll)) { cli_fail(C, "out of memory"); goto done; }

        /* what to feed: the rendering past what the session already holds */
        if (moe_chat_render(m, format, cv.msgs, cv.n, true, &rendered, err, sizeof err)) { cli_fail(C, "%s", err); goto done; }
        size_t rl = strlen(rendered), common = 0;
        while (common < rl && common < h.len && rendered[common] == h.text[common]) common++;
        int keep = h.n;
        while (keep > 0 && h.end[keep - 1] > common) keep--;
        if (keep < h.n) {
            if (moe_session_truncate(s, keep)) { cli_fail(C, "%s", moe_session_error(s)); goto done; }
            h.n = keep;
            h.len = keep ? h.end[keep - 1] : 0;
        }
        const char *feed = rendered + h.len;
        size_t feed_len = rl - h.len, nf = 0;
        if (moe_tokenize(m, feed, feed_len, false, true, NULL, 0, &nf, err, sizeof err)) { cli_fail(C, "%s", err); goto done; }
        if (nf + (size_t)n_max + 1 > ids_cap) {
            ids_cap = nf + (size_t)n_max + 1;
            int32_t *ni = realloc(ids, ids_cap * sizeof *ids);
            if (!ni) { cli_fail(C, "out of memory"); goto done; }
            ids = ni;
        }
        if (moe_tokenize(m, feed, feed_len, false, true, ids, nf, &nf, err, sizeof err)) { cli_fail(C, "%s", err); goto done; }
        /* the held text follows the token pieces (exact for the text itself;
         * a token's piece may differ from its source only for special tokens,
         * whose show_special piece is their text) */
        for (size_t i = 0; i < nf; i++) {
            const char *p; size_t pl;
            if (moe_token_piece(m, ids[i], true, &p, &pl)) { p = ""; pl = 0; }
            if (held_add(&h, p, pl)) { cli_fail(C, "out of memory"); goto done; }
        }
        moe_sampler_accept_context(smp, ids, (int)nf);   /* the repeat penalty's window: the conversation's tokens */
        int n_past0 = moe_session_n_past(s);
        if (nf && (topn ? moe_session_forward_topk(s, ids, (int)nf, topn, top_ids, top_vals)
                        : moe_session_forward(s, ids, (int)nf, logits, false))) {
            fprintf(stderr, "moefast chat: %s\n", moe_session_error(s));
            rc = 2;
            goto done;
        }
        free(rendered);
        rendered = NULL;

        /* generate */
        reply_len = 0;
        int n_gen = 0;
        bool ended = false;
        g_sigint = 0;
        while (n_gen < n_max && !g_sigint) {
            int32_t id = topn ? moe_sampler_sample_topk(smp, top_ids, top_vals, topn) : moe_sampler_sample(smp, logits);
            const char *p; size_t pl;
            if (moe_token_piece(m, id, true, &p, &pl)) { p = ""; pl = 0; }
            bool end = id == eos || moe_token_is_eog(m, id) || (pl && is_end_piece(p, pl));
            if (held_add(&h, p, pl)) { cli_fail(C, "out of memory"); goto done; }
            moe_sampler_accept(smp, id);
            gen[n_gen++] = id;
            /* the end token is fed too, so the cache holds the closed turn */
            if (topn ? moe_session_forward_topk(s, &id, 1, topn, top_ids, top_vals)
                     : moe_session_forward(s, &id, 1, logits, false)) {
                fprintf(stderr, "\nmoefast chat: %s (the conversation is over)\n", moe_session_error(s));
                rc = 2;
                goto done;
            }
            if (end) { ended = true; break; }
            const char *q; size_t ql;
            if (moe_token_piece(m, id, false, &q, &ql) == MOE_OK && ql) {
                if (reply_len + ql + 1 > reply_cap) {
                    size_t nc = reply_cap ? reply_cap * 2 : 1024;
                    while (nc < reply_len + ql + 1) nc *= 2;
                    char *nr = realloc(reply, nc);
                    if (!nr) { cli_fail(C, "out of memory"); goto done; }
                    reply = nr; reply_cap = nc;
                }
                memcpy(reply + reply_len, q, ql);
                reply_len += ql;
                char buf[4 * 256 + 4];
                for (size_t off = 0; off < ql; off += 256) {
                    size_t part = ql - off < 256 ? ql - off : 256;
                    size_t k = moe_utf8_stream_push(us, q + off, part, buf, sizeof buf);
                    fwrite(buf, 1, k, stdout);
                }
                fflush(stdout);
            }
        }
        char fb[8];
        size_t k = moe_utf8_stream_flush(us, fb, sizeof fb);
        fwrite(fb, 1, k, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        if (g_sigint && tty) fputs("[interrupted]\n", stderr);
        if (verbose) {
            fprintf(stderr, "[turn %d: fed %zu tokens at position %d, generated %d%s, n_past %d]\n", turn, nf, n_past0,
                    n_gen, ended ? " (end token)" : g_sigint ? " (interrupted)" : " (limit)", moe_session_n_past(s));
            /* the ids, so a test can replay the conversation with `run --tokens` */
            fprintf(stderr, "[turn %d fed:", turn);
            for (size_t i = 0; i < nf; i++) fprintf(stderr, "%s%d", i ? "," : " ", ids[i]);
            fprintf(stderr, "]\n[turn %d generated:", turn);
            for (int i = 0; i < n_gen; i++) fprintf(stderr, "%s%d", i ? "," : " ", gen[i]);
            fprintf(stderr, "]\n");
        }
        g_sigint = 0;
        if (conv_add(&cv, "assistant", reply ? reply : "", reply_len)) { cli_fail(C, "out of memory"); goto done; }
    }
    rc = 0;
done:
    signal(SIGINT, SIG_DFL);
    free(line); free(rendered); free(reply); free(ids); free(gen); free(logits);
    free(h.text); free(h.end);
    conv_free(&cv);
    moe_utf8_stream_free(us);
    moe_sampler_free(smp);
    moe_session_free(s);
    moe_model_free(m);
    return rc;
}
