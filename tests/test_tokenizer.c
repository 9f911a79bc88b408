/* test_tokenizer.c — the tokenizers against llama.cpp's reference ids
 * (../shared/vocab), the synthetic oracle prompt, round trips, special
 * tokens, invalid UTF-8, malformed vocabularies, the merge paths (heap,
 * bucket queue, naive scan) agreeing, 1 MB of spaces, and the UTF-8 stream. */
#include <jansson.h>
#include <stdint.h>

#include "check.h"
#include "gguf/gguf.h"
#include "moefast.h"
#include "text/tokenizer.h"
#include "base/util.h"

static char g_err[MOE_ERR_LEN];

static moe_tokenizer *load_vocab(const char *rel) {
    const char *path = check_ref(rel);
    if (!path) return NULL;
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f, g_err, sizeof g_err);
    CHECK_MSG(rc == MOE_OK, "%s", g_err);
    if (rc != MOE_OK) return NULL;
    moe_tokenizer *t = NULL;
    rc = moe_tokenizer_load(f, &t, g_err, sizeof g_err);
    CHECK_MSG(rc == MOE_OK, "%s: %s", rel, g_err);
    gguf_close(f); /* the tokenizer must not keep the file */
    return t;
}

/* Encodes into a malloc'd array (two calls: the size, then the ids). */
static int32_t *enc(const moe_tokenizer *t, const char *s, size_t n, bool bos, bool special, size_t *nout) {
    size_t need = 0;
    int rc = moe_tokenizer_encode(t, s, n, bos, special, NULL, 0, &need, g_err, sizeof g_err);
    CHECK_MSG(rc == MOE_OK, "%s", g_err);
    int32_t *ids = malloc((need + 1) * sizeof *ids);
    size_t n2 = 0;
    rc = moe_tokenizer_encode(t, s, n, bos, special, ids, need, &n2, g_err, sizeof g_err);
    CHECK(rc == MOE_OK && n2 == need);
    *nout = need;
    return ids;
}

static char *dec(const moe_tokenizer *t, const int32_t *ids, size_t n, bool show, size_t *len) {
    size_t cap = 64, o = 0;
    char *s = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        const char *p; size_t l;
        CHECK(moe_tokenizer_piece(t, ids[i], show, &p, &l) == MOE_OK);
        while (o + l + 1 > cap) { cap *= 2; s = realloc(s, cap); }
        memcpy(s + o, p, l); o += l;
    }
    s[o] = 0;
    *len = o;
    return s;
}

static void print_ids(const char *what, const int32_t *v, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", v[i]);
    fputc('\n', stderr);
}

static bool ids_equal(const char *label, const int32_t *got, size_t ng, const int32_t *want, size_t nw) {
    bool ok = ng == nw && (nw == 0 || memcmp(got, want, nw * sizeof *got) == 0);
    CHECK_MSG(ok, "%s: ids differ", label);
    if (!ok) { print_ids("got ", got, ng); print_ids("want", want, nw); }
    return ok;
}

static char *read_file(const char *rel, size_t *len) {
    const char *path = check_ref(rel);
    *len = 0;
    if (!path) return NULL;
    char *b = check_read_file(path, len);
    CHECK_MSG(b != NULL, "cannot read %s", path);
    return b;
}

/* llama.cpp's test-tokenizer-0 files: strings separated by
 * "\n__ggml_vocab_test__\n", one line of ids per string (no BOS, no
 * special-token parsing); n_want strings (46 in llama.cpp's own files). */
static void test_inp_out_n(const char *vocab, int n_want) {
    moe_tokenizer *t = load_vocab(vocab);
    if (!t) return;
    char name[256];
    size_t ni, no;
    snprintf(name, sizeof name, "%s.inp", vocab);
    char *inp = read_file(name, &ni);
    snprintf(name, sizeof name, "%s.out", vocab);
    char *out = read_file(name, &no);
    if (!inp || !out) { free(inp); free(out); moe_tokenizer_free(t); return; }
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    char *p = inp, *line = out;
    int n_cases = 0, n_ok = 0;
    for (;;) {
        char *q = strstr(p, SEP);
        if (!q) break;
        char *eol = strchr(line, '\n');
        if (!eol) break;
        *eol = 0;
        int32_t want[512]; size_t nw = 0;
        for (char *s = line; *s;) {
            char *e;
            long v = strtol(s, &e, 10);
            if (e == s) break;
            want[nw++] = (int32_t)v;
            s = e;
        }
        size_t ng;
        int32_t *got = enc(t, p, (size_t)(q - p), false, false, &ng);
        char label[128];
        snprintf(label, sizeof label, "%s case %d", vocab, n_cases);
        n_ok += ids_equal(label, got, ng, want, nw);
        free(got);
        n_cases++;
        p = q + sizeof SEP - 1;
        line = eol + 1;
    }
    CHECK_EQ_INT(n_cases, n_want);
    printf("  %s: %d/%d reference strings match\n", vocab, n_ok, n_cases);
    free(inp); free(out);
    moe_tokenizer_free(t);
}

static void test_inp_out(const char *vocab) { test_inp_out_n(vocab, 46); }

static int hexval(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

static void test_public_json(void) {
    moe_tokenizer *t = load_vocab("vocab/qwen3-vocab.gguf");
    if (!t) return;
    json_error_t je;
    const char *pt = check_ref("vocab/texts-public.json"), *pl = check_ref("vocab/ids-public-llamacpp.json");
    const char *pj = check_ref("vocab/ids-public-transformersjs.json");
    json_t *texts = pt ? json_load_file(pt, JSON_ALLOW_NUL, &je) : NULL;
    json_t *lc = pl ? json_load_file(pl, JSON_ALLOW_NUL, &je) : NULL;
    json_t *tj = pj ? json_load_file(pj, JSON_ALLOW_NUL, &je) : NULL;
    if (pt && pl && pj) CHECK(texts && lc && tj); /* present but unreadable: a failure, not a skip */
    if (!texts || !lc || !tj) { json_decref(texts); json_decref(lc); json_decref(tj); moe_tokenizer_free(t); return; }
    json_t *cases = json_object_get(texts, "cases");
    json_t *lc_ids = json_object_get(lc, "ids"), *tj_ids = json_object_get(tj, "ids");
    size_t i; json_t *c;
    int n = 0, ok_lc = 0, n_tj = 0, ok_tj = 0;
    json_array_foreach(cases, i, c) {
        const char *id = json_string_value(json_object_get(c, "id"));
        json_t *jt = json_object_get(c, "text");
        char *buf; size_t len;
        if (jt) {
            len = json_string_length(jt);
            buf = malloc(len + 1);
            memcpy(buf, json_string_value(jt), len + 1);
        } else {
            const char *hx = json_string_value(json_object_get(c, "bytes_hex"));
            len = strlen(hx) / 2;
            buf = malloc(len + 1);
            for (size_t k = 0; k < len; k++) buf[k] = (char)(hexval(hx[2 * k]) * 16 + hexval(hx[2 * k + 1]));
        }
        size_t ng;
        int32_t *got = enc(t, buf, len, false, true, &ng);
        json_t *w = json_object_get(lc_ids, id);
        CHECK_MSG(json_is_array(w), "no llama.cpp ids for %s", id);
        int32_t want[1024]; size_t nw = 0;
        size_t k; json_t *v;
        json_array_foreach(w, k, v) want[nw++] = (int32_t)json_integer_value(v);
        char label[64];
        snprintf(label, sizeof label, "texts-public %s vs llama.cpp", id);
        ok_lc += ids_equal(label, got, ng, want, nw);
        n++;
        /* transformers.js agrees with llama.cpp except on p61 (it NFC-normalizes)
         * and has no ids for the raw-byte cases */
        json_t *w2 = json_object_get(tj_ids, id);
        if (json_is_array(w2) && strcmp(id, "p61") != 0) {
            nw = 0;
            json_array_foreach(w2, k, v) want[nw++] = (int32_t)json_integer_value(v);
            snprintf(label, sizeof label, "texts-public %s vs transformers.js", id);
            ok_tj += ids_equal(label, got, ng, want, nw);
            n_tj++;
        }
        free(got); free(buf);
    }
    CHECK_EQ_INT(n, 68);
    CHECK_EQ_INT(n_tj, 64);
    printf("  texts-public: %d/%d match llama.cpp, %d/%d match transformers.js\n", ok_lc, n, ok_tj, n_tj);
    json_decref(texts); json_decref(lc); json_decref(tj);
    moe_tokenizer_free(t);
}

static void test_oracle_prompt(const char *model) {
    moe_tokenizer *t = load_vocab(model);
    if (!t) return;
    static const char P[] = "The quick brown fox jumps over the lazy dog. Once upon a time";
    static const int32_t W[] = {588, 418, 515, 478, 560, 429, 258, 462, 489, 13, 573, 552, 259, 377};
    size_t n;
    int32_t *got = enc(t, P, strlen(P), moe_tokenizer_add_bos(t), true, &n);
    ids_equal(model, got, n, W, 14);
    free(got);
    /* special tokens of the synthetic vocabulary */
    CHECK_EQ_INT(moe_tokenizer_bos(t), 997);
    CHECK_EQ_INT(moe_tokenizer_eos(t), 999);
    CHECK(!moe_tokenizer_add_bos(t));
    CHECK(moe_tokenizer_is_eog(t, 999));
    CHECK(moe_tokenizer_is_eog(t, 997)); /* <|endoftext|> ends generation in llama.cpp too */
    CHECK(!moe_tokenizer_is_eog(t, 998));
    CHECK(!moe_tokenizer_is_eog(t, 5));
    CHECK(!moe_tokenizer_is_eog(t, -1) && !moe_tokenizer_is_eog(t, 1000));
    got = enc(t, "<|im_start|>user<|im_end|>", 26, true, true, &n);
    CHECK(n >= 4 && got[0] == 997 && got[1] == 998 && got[n - 1] == 999);
    free(got);
    moe_tokenizer_free(t);
}

/* o200k (pre gpt-4o) starts a word at a lower->upper case change: the
 * synthetic vocabulary's tokens " overThe" (606) and " testHello" (681),
 * which the qwen2 expression keeps whole, come out split. */
static void test_o200k_case_split(void) {
    moe_tokenizer *t = load_vocab("oracle/gpt-oss-tiny-q8_0.gguf");
    if (!t) return;
    static const int32_t W[] = {429, 588, 379, 589};   /* " over" "The" " test" "Hello" */
    size_t n;
    int32_t *got = enc(t, " overThe testHello", 18, false, true, &n);
    ids_equal("gpt-oss o200k case split", got, n, W, 4);
    free(got);
    moe_tokenizer_free(t);
}

static void test_special(void) {
    moe_tokenizer *t = load_vocab("vocab/qwen3-vocab.gguf");
    if (!t) return;
    size_t n;
    int32_t *got = enc(t, "<|im_start|>", 12, false, true, &n);
    CHECK(n == 1 && got[0] == 151644);
    free(got);
    /* control tokens are plain text without parse_special */
    got = enc(t, "<|im_start|>", 12, false, false, &n);
    CHECK(n > 1);
    for (size_t i = 0; i < n; i++) CHECK(got[i] < 151643);
    size_t dl;
    char *d = dec(t, got, n, false, &dl);
    CHECK(dl == 12 && memcmp(d, "<|im_start|>", 12) == 0);
    free(d); free(got);
    /* user-defined tokens are matched whatever parse_special says (llama.cpp) */
    got = enc(t, "a<think>b", 9, false, false, &n);
    CHECK(n == 3 && got[1] == 151667);
    free(got);
    /* pieces: control "" unless show_special; user-defined give their text */
    const char *p; size_t l;
    CHECK(moe_tokenizer_piece(t, 151645, false, &p, &l) == MOE_OK && l == 0);
    CHECK(moe_tokenizer_piece(t, 151645, true, &p, &l) == MOE_OK && l == 10 && !memcmp(p, "<|im_end|>", 10));
    CHECK(moe_tokenizer_piece(t, 151667, false, &p, &l) == MOE_OK && l == 7 && !memcmp(p, "<think>", 7));
    CHECK(moe_tokenizer_piece(t, 151700, false, &p, &l) == MOE_OK && l == 0); /* [PAD] unused */
    CHECK(moe_tokenizer_piece(t, 21927, false, &p, &l) == MOE_OK && l == 6 && !memcmp(p, " Hello", 6));
    CHECK(moe_tokenizer_piece(t, -1, false, &p, &l) == MOE_ERANGE);
    CHECK(moe_tokenizer_piece(t, 151936, false, &p, &l) == MOE_ERANGE);
    CHECK_EQ_INT(moe_tokenizer_n_vocab(t), 151936);
    CHECK(moe_tokenizer_is_eog(t, 151645) && moe_tokenizer_is_eog(t, 151643));
    CHECK(!moe_tokenizer_is_eog(t, 151644));
    /* BOS is added when asked (the vocabulary has one) */
    got = enc(t, "Hi", 2, true, true, &n);
    CHECK(n >= 2 && got[0] == 151643);
    free(got);
    /* the cap contract: the total count comes back, at most cap ids are written */
    int32_t small[2] = {-7, -7};
    size_t total = 0;
    CHECK(moe_tokenizer_encode(t, "Hello world, how are you", 24, false, true, small, 1, &total, g_err, sizeof g_err) == MOE_OK);
    CHECK(total > 2 && small[0] == 9707 && small[1] == -7);
    /* adjacent / overlapping specials: longest first, leftmost */
    got = enc(t, "<|im_end|><|im_end|><|endoftext|>x", 34, false, true, &n);
    CHECK(n == 4 && got[0] == 151645 && got[1] == 151645 && got[2] == 151643);
    free(got);
    moe_tokenizer_free(t);
}

/* Random valid UTF-8 (no surrogates), seeded: ASCII words, whitespace runs,
 * digits, Latin-1, CJK, emoji. */
static size_t rand_utf8(moe_rng *r, char *o, size_t max_cp) {
    size_t n = 0, k = 1 + moe_rng_next(r) % max_cp;
    for (size_t i = 0; i < k; i++) {
        uint32_t c, cls = (uint32_t)(moe_rng_next(r) % 10);
        if (cls < 4) c = 'a' + (uint32_t)(moe_rng_next(r) % 26);
        else if (cls == 4) { static const char ws[] = " \t\n\r  "; c = (uint8_t)ws[moe_rng_next(r) % 6]; }
        else if (cls == 5) c = 0x21 + (uint32_t)(moe_rng_next(r) % 94);
        else if (cls == 6) c = 0x80 + (uint32_t)(moe_rng_next(r) % 0x780);
        else if (cls == 7) { do c = 0x800 + (uint32_t)(moe_rng_next(r) % 0xF7FE); while (c >= 0xD800 && c <= 0xDFFF); }
        else if (cls == 8) c = 0x10000 + (uint32_t)(moe_rng_next(r) % 0x100000);
        else c = (uint32_t)(moe_rng_next(r) % 0x80);
        if (c < 0x80) o[n++] = (char)c;
        else if (c < 0x800) { o[n++] = (char)(0xC0 | (c >> 6)); o[n++] = (char)(0x80 | (c & 0x3F)); }
        else if (c < 0x10000) { o[n++] = (char)(0xE0 | (c >> 12)); o[n++] = (char)(0x80 | ((c >> 6) & 0x3F)); o[n++] = (char)(0x80 | (c & 0x3F)); }
        else { o[n++] = (char)(0xF0 | (c >> 18)); o[n++] = (char)(0x80 | ((c >> 12) & 0x3F)); o[n++] = (char)(0x80 | ((c >> 6) & 0x3F)); o[n++] = (char)(0x80 | (c & 0x3F)); }
    }
    return n;
}

static void test_roundtrip(const char *vocab, int count, uint64_t seed) {
    moe_tokenizer *t = load_vocab(vocab);
    if (!t) return;
    moe_rng r;
    moe_rng_seed(&r, seed);
    char buf[4 * 64 + 8];
    int bad = 0;
    for (int i = 0; i < count; i++) {
        size_t len = rand_utf8(&r, buf, 64), n, dl;
        int32_t *ids = enc(t, buf, len, false, false, &n);
        char *d = dec(t, ids, n, true, &dl);
        if (dl != len || memcmp(d, buf, len) != 0) {
            if (bad++ < 3) CHECK_MSG(false, "%s: round trip %d differs (%zu vs %zu bytes)", vocab, i, dl, len);
        }
        free(ids); free(d);
    }
    CHECK_MSG(bad == 0, "%s: %d of %d round trips differ", vocab, bad, count);
    moe_tokenizer_free(t);
}

static size_t unescape_spaces(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (i + 2 < n && (uint8_t)s[i] == 0xE2 && (uint8_t)s[i + 1] == 0x96 && (uint8_t)s[i + 2] == 0x81) { s[o++] = ' '; i += 2; }
        else s[o++] = s[i];
    }
    return o;
}

/* Arbitrary bytes never fail; for byte-level BPE every valid character comes
 * back and each invalid byte becomes U+FFFD (docs/TOKENIZER.md). */
static void test_invalid_bytes(void) {
    moe_tokenizer *q = load_vocab("vocab/qwen3-vocab.gguf");
    moe_tokenizer *s = load_vocab("vocab/ggml-vocab-llama-spm.gguf");
    if (!q || !s) { moe_tokenizer_free(q); moe_tokenizer_free(s); return; }
    moe_rng r;
    moe_rng_seed(&r, 7);
    char buf[300];
    for (int i = 0; i < 300; i++) {
        size_t len = 1 + moe_rng_next(&r) % 200, n;
        for (size_t k = 0; k < len; k++) buf[k] = (char)(moe_rng_next(&r) & 0xFF);
        int32_t *ids = enc(q, buf, len, false, true, &n);
        for (size_t k = 0; k < n; k++) CHECK(ids[k] >= 0 && ids[k] < 151936);
        free(ids);
        ids = enc(s, buf, len, false, true, &n);
        /* SPM byte fallback is lossless up to the space escape: a lead byte
         * can swallow part of an escaped space (U+2581), which then comes
         * back as its bytes (llama.cpp does the same) */
        size_t dl;
        char *d = dec(s, ids, n, true, &dl);
        char want[302];
        want[0] = ' ';
        memcpy(want + 1, buf, len);
        size_t wl = unescape_spaces(want, len + 1);
        dl = unescape_spaces(d, dl);
        CHECK(dl == wl && memcmp(d, want, wl) == 0);
        free(d); free(ids);
    }
    /* the documented cases: truncated, overlong, surrogate, past U+10FFFF */
    struct { const char *in; size_t n; const char *out; } cases[] = {
        {"a\xff" "b", 3, "a\xef\xbf\xbd" "b"},
        {"\xe4\xbd", 2, "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xc0\xaf \x80", 4, "/ \xef\xbf\xbd"},
        {"x\xed\xa0\x80y", 5, "x\xed\xa0\x80y"},                  /* surrogate kept as its bytes */
        {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xe0\x80\x80", 3, "\x00"},                                /* overlong NUL */
        {"a\xc2\x85" "b", 4, "a\xc2\x85" "b"},                      /* NEL */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n, dl;
        int32_t *ids = enc(q, cases[i].in, cases[i].n, false, true, &n);
        char *d = dec(q, ids, n, true, &dl);
        size_t wl = i == 5 ? 1 : strlen(cases[i].out);
        CHECK_MSG(dl == wl && memcmp(d, cases[i].out, wl) == 0, "invalid-UTF-8 case %zu", i);
        free(ids); free(d);
    }
    /* a long input of one character class (regex and merge loop stay sane) */
    size_t big = 200000, n;
    char *b = malloc(big);
    memset(b, 'a', big);
    int32_t *ids = enc(q, b, big, false, true, &n);
    CHECK(n > 0 && n < big);
    free(ids);
    memset(b, ' ', big);
    ids = enc(q, b, big, false, true, &n);
    CHECK(n > 0);
    free(ids); free(b);
    moe_tokenizer_free(q); moe_tokenizer_free(s);
}

/* ---- malformed vocabularies, built in memory ---- */

typedef struct mbuf { uint8_t *p; size_t n, cap; } mbuf;
static void mb_put(mbuf *b, const void *d, size_t n) {
    while (b->n + n > b->cap) { b->cap = b->cap ? b->cap * 2 : 1024; b->p = realloc(b->p, b->cap); }
    memcpy(b->p + b->n, d, n); b->n += n;
}
static void mb_u32(mbuf *b, uint32_t v) { mb_put(b, &v, 4); }
static void mb_u64(mbuf *b, uint64_t v) { mb_put(b, &v, 8); }
static void mb_str(mbuf *b, const char *s) { mb_u64(b, strlen(s)); mb_put(b, s, strlen(s)); }
static void mb_key(mbuf *b, const char *k, uint32_t type) { mb_str(b, k); mb_u32(b, type); }
static void mb_strarr(mbuf *b, const char *k, const char *const *v, size_t n) {
    mb_key(b, k, GGUF_ARRAY); mb_u32(b, GGUF_STRING); mb_u64(b, n);
    for (size_t i = 0; i < n; i++) mb_str(b, v[i]);
}
static void mb_i32arr(mbuf *b, const char *k, const int32_t *v, size_t n) {
    mb_key(b, k, GGUF_ARRAY); mb_u32(b, GGUF_I32); mb_u64(b, n);
    mb_put(b, v, 4 * n);
}

enum { BAD_NONE, BAD_NO_TOKENS, BAD_TOKENS_TYPE, BAD_MERGE, BAD_BOS, BAD_NO_MODEL, BAD_TOKTYPE, BAD_PRE, BAD_DUP };

static int load_synthetic(int bad, char *err, size_t errlen) {
    static const char *const toks[] = {"a", "b", "ab", "<s>", "c"};
    static const char *const merges_ok[] = {"a b"};
    static const char *const merges_bad[] = {"a b", "ab zz"};
    static const char *const toks_dup[] = {"a", "b", "ab", "<s>", "a"};
    static const int32_t types[] = {1, 1, 1, 3, 1};
    mbuf b = {0};
    int n_kv = 6 - (bad == BAD_NO_TOKENS) - (bad == BAD_NO_MODEL);
    mb_put(&b, "GGUF", 4); mb_u32(&b, 3); mb_u64(&b, 0); mb_u64(&b, (uint64_t)n_kv);
    if (bad != BAD_NO_MODEL) { mb_key(&b, "tokenizer.ggml.model", GGUF_STRING); mb_str(&b, "gpt2"); }
    mb_key(&b, "tokenizer.ggml.pre", GGUF_STRING); mb_str(&b, bad == BAD_PRE ? "no-such-pre" : "qwen2");
    if (bad == BAD_TOKENS_TYPE) mb_i32arr(&b, "tokenizer.ggml.tokens", types, 5);
    else if (bad == BAD_DUP) mb_strarr(&b, "tokenizer.ggml.tokens", toks_dup, 5);
    else if (bad != BAD_NO_TOKENS) mb_strarr(&b, "tokenizer.ggml.tokens", toks, 5);
    if (bad == BAD_TOKTYPE) mb_strarr(&b, "tokenizer.ggml.token_type", toks, 5);
    else mb_i32arr(&b, "tokenizer.ggml.token_type", types, 5);
    if (bad == BAD_MERGE) mb_strarr(&b, "tokenizer.ggml.merges", merges_bad, 2);
    else mb_strarr(&b, "tokenizer.ggml.merges", merges_ok, 1);
    mb_key(&b, "tokenizer.ggml.bos_token_id", GGUF_U32); mb_u32(&b, bad == BAD_BOS ? 5 : 3);
    gguf_file *f = NULL;
    int rc = gguf_open_memory(b.p, b.n, "synthetic.gguf", &f, err, errlen);
    if (rc == MOE_OK) {
        moe_tokenizer *t = NULL;
        rc = moe_tokenizer_load(f, &t, err, errlen);
        if (rc == MOE_OK) {
            size_t n;
            int32_t *ids = enc(t, "abc<s>", 6, true, true, &n);
            CHECK(n == 4 && ids[0] == 3 && ids[1] == 2 && ids[2] == 4 && ids[3] == 3);
            free(ids);
            CHECK(!moe_tokenizer_add_bos(t));
        }
        moe_tokenizer_free(t);
        gguf_close(f);
    }
    free(b.p);
    return rc;
}

static void test_malformed(void) {
    char err[MOE_ERR_LEN];
    CHECK_MSG(load_synthetic(BAD_NONE, err, sizeof err) == MOE_OK, "%s", err);
    struct { int bad; const char *needle; } cases[] = {
        {BAD_NO_TOKENS, "tokenizer.ggml.tokens"},
        {BAD_TOKENS_TYPE, "tokenizer.ggml.tokens"},
        {BAD_MERGE, "tokenizer.ggml.merges"},
        {BAD_BOS, "tokenizer.ggml.bos_token_id"},
        {BAD_NO_MODEL, "tokenizer.ggml.model"},
        {BAD_TOKTYPE, "tokenizer.ggml.token_type"},
        {BAD_PRE, "tokenizer.ggml.pre"},
        {BAD_DUP, "duplicate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        err[0] = 0;
        int rc = load_synthetic(cases[i].bad, err, sizeof err);
        CHECK_MSG(rc < 0, "malformed case %zu loaded", i);
        CHECK_STR_CONTAINS(err, cases[i].needle);
        CHECK_STR_CONTAINS(err, "synthetic.gguf");
    }
    CHECK_STR_CONTAINS((load_synthetic(BAD_MERGE, err, sizeof err), err), "zz");
}

/* A vocabulary declaring no end-of-generation ids: Laguna's end of turn
 * `</assistant>` (a user-defined token, type 4, in its vocabulary) still
 * ends generation, from the fallback list; pre `glm4` (llama.cpp's
 * CHATGLM4: the Llama-3 expression) loads with no BOS id. */
static void test_eog_fallback(const char *pre) {
    static const char *const toks[] = {"a", "b", "ab", "</assistant>", "c", "1", "2", "3", "4"};
    static const char *const merges[] = {"a b"};
    static const int32_t types[] = {1, 1, 1, 4, 1, 1, 1, 1, 1};
    mbuf b = {0};
    mb_put(&b, "GGUF", 4); mb_u32(&b, 3); mb_u64(&b, 0); mb_u64(&b, 5);
    mb_key(&b, "tokenizer.ggml.model", GGUF_STRING); mb_str(&b, "gpt2");
    mb_key(&b, "tokenizer.ggml.pre", GGUF_STRING); mb_str(&b, pre);
    mb_strarr(&b, "tokenizer.ggml.tokens", toks, 9);
    mb_i32arr(&b, "tokenizer.ggml.token_type", types, 9);
    mb_strarr(&b, "tokenizer.ggml.merges", merges, 1);
    gguf_file *f = NULL;
    moe_tokenizer *t = NULL;
    int rc = gguf_open_memory(b.p, b.n, "synthetic.gguf", &f, g_err, sizeof g_err);
    if (rc == MOE_OK) rc = moe_tokenizer_load(f, &t, g_err, sizeof g_err);
    CHECK_MSG(rc == MOE_OK, "pre %s: %s", pre, g_err);
    if (t) {
        CHECK(moe_tokenizer_is_eog(t, 3));
        CHECK(!moe_tokenizer_is_eog(t, 2));
        CHECK_EQ_INT(moe_tokenizer_bos(t), -1);
        CHECK(!moe_tokenizer_add_bos(t));
        size_t n;
        int32_t *ids = enc(t, "1234ab</assistant>", 18, true, true, &n);
        CHECK(n == 6 && ids[0] == 5 && ids[3] == 8 && ids[4] == 2 && ids[5] == 3);
        free(ids);
    }
    moe_tokenizer_free(t);
    gguf_close(f);
    free(b.p);
}

/* Kimi-K2's pre-tokenizer on hand-worked cases, each derived by walking
 * llama.cpp's unicode_regex_split_custom_kimi_k2 (the spec, not the Python
 * regex it cites): Han blocks apart, words of non-Han letters with no case
 * split and no marks, ASCII contractions in any case, digits by three,
 * punctuation runs with their newlines, llama.cpp's whitespace rules. */
static void test_kimi_k2_split(void) {
    /* Kimi-K2's special tokens: [EOS] is its eos; <|im_end|> closes a turn */
    static const char *const toks[] = {"a", "b", "ab", "[EOS]", "<|im_end|>", "<|im_middle|>"};
    static const int32_t types[] = {1, 1, 1, 3, 3, 3};
    static const char *const merges[] = {"a b"};
    mbuf b = {0};
    mb_put(&b, "GGUF", 4); mb_u32(&b, 3); mb_u64(&b, 0); mb_u64(&b, 6);
    mb_key(&b, "tokenizer.ggml.model", GGUF_STRING); mb_str(&b, "gpt2");
    mb_key(&b, "tokenizer.ggml.pre", GGUF_STRING); mb_str(&b, "kimi-k2");
    mb_strarr(&b, "tokenizer.ggml.tokens", toks, 6);
    mb_i32arr(&b, "tokenizer.ggml.token_type", types, 6);
    mb_strarr(&b, "tokenizer.ggml.merges", merges, 1);
    mb_key(&b, "tokenizer.ggml.eos_token_id", GGUF_U32); mb_u32(&b, 3);
    gguf_file *f = NULL;
    moe_tokenizer *t = NULL;
    int rc = gguf_open_memory(b.p, b.n, "kimi.gguf", &f, g_err, sizeof g_err);
    if (rc == MOE_OK) rc = moe_tokenizer_load(f, &t, g_err, sizeof g_err);
    CHECK_MSG(rc == MOE_OK, "kimi-k2: %s", g_err);
    if (t) CHECK(moe_tokenizer_is_eog(t, 3) && moe_tokenizer_is_eog(t, 4) && !moe_tokenizer_is_eog(t, 5));
    /* the text, then its pieces separated by '|' (no case uses '|') */
    static const struct { const char *text, *pieces; } cases[] = {
        {"Hello World", "Hello| World"},
        {"HelloWorld ABCdef", "HelloWorld| ABCdef"},          /* no upper/lower split */
        {" \xe4\xb8\xad\xe6\x96\x87" "abc", " |\xe4\xb8\xad\xe6\x96\x87|abc"}, /* " 中文abc": no space before Han */
        {"abc\xe4\xb8\xad" "def", "abc|\xe4\xb8\xad|def"},
        {"I'M DON'T you'Re we'VE", "I'M| DON'T| you'Re| we'VE"},
        {"it'\xc5\xbf", "it|'\xc5\xbf"},                         /* 'ſ is no contraction */
        {"1234567", "123|456|7"},
        {"\xd9\xa3\xd9\xa4\xd9\xa5\xd9\xa6", "\xd9\xa3\xd9\xa4\xd9\xa5|\xd9\xa6"}, /* Arabic-Indic digits */
        {"e\xcc\x81x", "e|\xcc\x81x"},                          /* a combining mark leads the next word */
        {"e\xcc\x81\xcc\x81", "e|\xcc\x81\xcc\x81"},            /* or is punctuation */
        {"Hi!!\n\nthere", "Hi|!!\n\n|there"},
        {"a  \n  b", "a|  \n| | b"},
        {"x   ", "x|   "},
        {"\t\tab", "\t|\tab"},
        {"\xe3\x82\xab\xe3\x83\x8a\xe6\xbc\xa2\xe5\xad\x97", "\xe3\x82\xab\xe3\x83\x8a|\xe6\xbc\xa2\xe5\xad\x97"}, /* kana is no Han */
        {"\xe3\x80\x87\xe4\xb8\x80", "\xe3\x80\x87|\xe4\xb8\x80"}, /* U+3007 is a number here */
        {" \xf0\x9f\xa6\x99x", " \xf0\x9f\xa6\x99|x"},          /* " 🦙x" */
        {"\xe4\xb8\xad'S", "\xe4\xb8\xad|'S"},
        {"\xf0\xa0\x80\x80\xef\xa4\x80" "a", "\xf0\xa0\x80\x80\xef\xa4\x80|a"}, /* ext. B, compatibility ideographs */
        {"a\xc2\x85" "b", "a|\xc2\x85" "b"},                    /* NEL: whitespace, and a leading character */
        {"!\xe1\xa0\x8e?", "!\xe1\xa0\x8e?"},                  /* U+180E: a control to llama.cpp, no space */
        {"a \xe1\xa0\x8e" "b", "a| \xe1\xa0\x8e|b"},
        /* CJK Extension I (Unicode 15.1): a letter to llama.cpp, outside its
         * Han list: inside a word, apart from Han; unassigned to PCRE2 10.42
         * (without the stand-in: "a|\U0002EBF0b") */
        {"a\xf0\xae\xaf\xb0" "b", "a\xf0\xae\xaf\xb0" "b"},
        {"\xe4\xb8\xad\xf0\xae\xb9\x9d" "x", "\xe4\xb8\xad|\xf0\xae\xb9\x9d" "x"},
    };
    for (size_t i = 0; t && i < sizeof cases / sizeof cases[0]; i++) {
        uint32_t ends[32];
        size_t n = 0, len = strlen(cases[i].text);
        CHECK(moe_tokenizer_pretokenize(t, cases[i].text, len, ends, 32, &n, g_err, sizeof g_err) == MOE_OK);
        char got[128];
        size_t o = 0, prev = 0;
        for (size_t k = 0; k < n && k < 32; k++) {
            if (k) got[o++] = '|';
            memcpy(got + o, cases[i].text + prev, ends[k] - prev);
            o += ends[k] - prev;
            prev = ends[k];
        }
        got[o] = 0;
        CHECK_MSG(strcmp(got, cases[i].pieces) == 0, "kimi-k2 split case %zu: got \"%s\"", i, got);
    }
    moe_tokenizer_free(t);
    gguf_close(f);
    free(b.p);
}

/* gpt-oss's vocabulary (<|return|> and <|call|> beside <|end|>): <|end|>
 * ends a message, not the generation, even declared as the eot id; without
 * <|call|> it still ends generation (the fallback list) */
static void test_eog_harmony(bool with_call) {
    static const char *const toks[] = {"a", "b", "ab", "<|end|>", "<|return|>", "<|call|>", "<|start|>"};
    static const char *const merges[] = {"a b"};
    static const int32_t types[] = {1, 1, 1, 3, 3, 3, 3};
    mbuf b = {0};
    mb_put(&b, "GGUF", 4); mb_u32(&b, 3); mb_u64(&b, 0); mb_u64(&b, 7);
    mb_key(&b, "tokenizer.ggml.model", GGUF_STRING); mb_str(&b, "gpt2");
    mb_key(&b, "tokenizer.ggml.pre", GGUF_STRING); mb_str(&b, "qwen2");
    mb_strarr(&b, "tokenizer.ggml.tokens", toks, with_call ? 7 : 5);
    mb_i32arr(&b, "tokenizer.ggml.token_type", types, with_call ? 7 : 5);
    mb_strarr(&b, "tokenizer.ggml.merges", merges, 1);
    mb_key(&b, "tokenizer.ggml.eos_token_id", GGUF_U32); mb_u32(&b, 4);
    mb_key(&b, "tokenizer.ggml.eot_token_id", GGUF_U32); mb_u32(&b, 3);
    gguf_file *f = NULL;
    moe_tokenizer *t = NULL;
    int rc = gguf_open_memory(b.p, b.n, "synthetic.gguf", &f, g_err, sizeof g_err);
    if (rc == MOE_OK) rc = moe_tokenizer_load(f, &t, g_err, sizeof g_err);
    CHECK_MSG(rc == MOE_OK, "%s", g_err);
    if (t) {
        CHECK(moe_tokenizer_is_eog(t, 3) == !with_call);
        CHECK(moe_tokenizer_is_eog(t, 4));
        CHECK(!with_call || moe_tokenizer_is_eog(t, 5));
        CHECK(!moe_tokenizer_is_eog(t, 2));
    }
    moe_tokenizer_free(t);
    gguf_close(f);
    free(b.p);
}

/* ---- merge paths: heap, bucket queue and the naive O(n^2) scan agree ---- */

static int32_t *enc_with(const moe_tokenizer *t, int merge, const char *s, size_t n, size_t *nout, size_t *fallbacks) {
    moe_tok_merge how = {.merge = merge};
    size_t need = 0;
    int rc = moe_tokenizer_encode_merge(t, &how, s, n, false, true, NULL, 0, &need, g_err, sizeof g_err);
    CHECK_MSG(rc == MOE_OK, "%s", g_err);
    int32_t *ids = malloc((need + 1) * sizeof *ids);
    rc = moe_tokenizer_encode_merge(t, &how, s, n, false, true, ids, need, nout, g_err, sizeof g_err);
    CHECK(rc == MOE_OK && *nout == need);
    if (fallbacks) *fallbacks += how.n_fallback;
    return ids;
}

/* Encodes s by every path in `paths` and checks they give the same ids as the
 * first; returns false (and says which) otherwise. */
static bool paths_agree(const char *label, const moe_tokenizer *t, const int *paths, int np, const char *s, size_t n, size_t *fallbacks) {
    static const char *const NAME[] = {"auto", "heap", "queue", "naive"};
    size_t n0;
    int32_t *ref = enc_with(t, paths[0], s, n, &n0, fallbacks);
    bool ok = true;
    for (int k = 1; k < np && ok; k++) {
        size_t n1;
        int32_t *got = enc_with(t, paths[k], s, n, &n1, fallbacks);
        if (n1 != n0 || memcmp(got, ref, n0 * sizeof *ref) != 0) {
            ok = false;
            CHECK_MSG(false, "%s: %s and %s differ on %zu bytes (%zu vs %zu ids)", label, NAME[paths[0]], NAME[paths[k]], n, n0, n1);
        }
        free(got);
    }
    free(ref);
    return ok;
}

/* Text with long runs: a repeated unit (spaces, letters, an emoji, a word). */
static size_t runs_text(moe_rng *r, char *o, size_t max) {
    static const char *const UNITS[] = {" ", "a", "ab", "\xf0\x9f\x98\x80", " the", "\n", "  \t", "1", "\xe4\xbd\xa0", "aaab "};
    size_t n = 0;
    while (n < max) {
        const char *u = UNITS[moe_rng_next(r) % (sizeof UNITS / sizeof UNITS[0])];
        size_t ul = strlen(u), reps = 1 + moe_rng_next(r) % 200;
        for (size_t i = 0; i < reps && n + ul <= max; i++) { memcpy(o + n, u, ul); n += ul; }
        if (moe_rng_next(r) % 4 == 0) break;
    }
    return n;
}

static void test_merge_paths(const char *vocab, uint64_t seed) {
    moe_tokenizer *t = load_vocab(vocab);
    if (!t) return;
    moe_rng r;
    moe_rng_seed(&r, seed);
    static const int ALL[] = {MOE_TOK_MERGE_NAIVE, MOE_TOK_MERGE_HEAP, MOE_TOK_MERGE_QUEUE, MOE_TOK_MERGE_AUTO};
    static const int FAST[] = {MOE_TOK_MERGE_HEAP, MOE_TOK_MERGE_QUEUE, MOE_TOK_MERGE_AUTO};
    char *buf = malloc(1 << 16);
    int bad = 0;
    for (int i = 0; i < 300 && bad < 3; i++) { /* random short strings */
        size_t len = rand_utf8(&r, buf, 48);
        bad += !paths_agree(vocab, t, ALL, 4, buf, len, NULL);
    }
    for (int i = 0; i < 40 && bad < 3; i++) { /* runs up to 1.5 KB: still naive-checkable */
        size_t len = runs_text(&r, buf, 1500);
        bad += !paths_agree(vocab, t, ALL, 4, buf, len, NULL);
    }
    for (int i = 0; i < 20 && bad < 3; i++) { /* long runs: past the queue threshold */
        size_t len = runs_text(&r, buf, 1 << 16);
        bad += !paths_agree(vocab, t, FAST, 3, buf, len, NULL);
    }
    CHECK_MSG(bad == 0, "%s: merge paths differ", vocab);
    free(buf);
    moe_tokenizer_free(t);
}

/* A vocabulary whose merges are not in build order ("ab c" ranks before
 * "a b"): the queue must notice the rank going back and hand the word to the
 * heap, which merges "abc" whole. */
static void test_merge_out_of_order(void) {
    static const char *const toks[] = {"a", "b", "c", "ab", "abc", "bc", "ca"};
    static const char *const merges[] = {"ab c", "a b", "b c", "c a"};
    mbuf b = {0};
    mb_put(&b, "GGUF", 4); mb_u32(&b, 3); mb_u64(&b, 0); mb_u64(&b, 4);
    mb_key(&b, "tokenizer.ggml.model", GGUF_STRING); mb_str(&b, "gpt2");
    mb_key(&b, "tokenizer.ggml.pre", GGUF_STRING); mb_str(&b, "qwen2");
    mb_strarr(&b, "tokenizer.ggml.tokens", toks, 7);
    mb_strarr(&b, "tokenizer.ggml.merges", merges, 4);
    gguf_file *f = NULL;
    moe_tokenizer *t = NULL;
    CHECK_MSG(gguf_open_memory(b.p, b.n, "order.gguf", &f, g_err, sizeof g_err) == MOE_OK, "%s", g_err);
    if (f) CHECK_MSG(moe_tokenizer_load(f, &t, g_err, sizeof g_err) == MOE_OK, "%s", g_err);
    if (t) {
        size_t n, fb = 0;
        int32_t *ids = enc_with(t, MOE_TOK_MERGE_QUEUE, "abc", 3, &n, &fb);
        CHECK(n == 1 && ids[0] == 4);
        CHECK_MSG(fb == 1, "the queue did not fall back (%zu)", fb);
        free(ids);
        static const int ALL[] = {MOE_TOK_MERGE_NAIVE, MOE_TOK_MERGE_HEAP, MOE_TOK_MERGE_QUEUE, MOE_TOK_MERGE_AUTO};
        moe_rng r;
        moe_rng_seed(&r, 7);
        char s[600];
        int bad = 0;
        fb = 0;
        for (int i = 0; i < 200 && bad < 3; i++) {
            size_t len = 1 + moe_rng_next(&r) % (i < 150 ? 40 : sizeof s);
            for (size_t k = 0; k < len; k++) s[k] = "abc"[moe_rng_next(&r) % 3];
            bad += !paths_agree("order.gguf", t, ALL, 4, s, len, &fb);
        }
        CHECK(bad == 0);
        CHECK_MSG(fb > 0, "no fallback in 200 strings");
    }
    moe_tokenizer_free(t);
    gguf_close(f);
    free(b.p);
}

/* Random vocabularies "trained" over {a, b, c}: each merge joins two tokens
 * that already exist; some tokens get a second merge (a second route), which
 * queues pairs of one rank out of position order and sometimes breaks the
 * build order (the queue falls back). All paths must agree with the naive
 * scan on periodic text (long runs of overlapping pairs). */
static void test_merge_random_vocab(void) {
    enum { NT = 3, NM = 80 };
    char texts[NT + NM][24];
    const char *toks[NT + NM], *merges[NM];
    char mtext[NM][48];
    moe_rng r;
    moe_rng_seed(&r, 99);
    int bad = 0;
    size_t fb = 0;
    for (int v = 0; v < 20 && bad < 3; v++) {
        int nt = NT, nm = 0;
        for (int i = 0; i < NT; i++) { texts[i][0] = (char)('a' + i); texts[i][1] = 0; toks[i] = texts[i]; }
        for (int tries = 0; nm < NM && tries < 10000; tries++) {
            int l = (int)(moe_rng_next(&r) % (uint64_t)nt), rr = (int)(moe_rng_next(&r) % (uint64_t)nt);
            size_t ll = strlen(texts[l]), rl = strlen(texts[rr]);
            if (ll + rl > 10) continue;
            char cat[24];
            memcpy(cat, texts[l], ll); memcpy(cat + ll, texts[rr], rl + 1);
            int dup = 0;
            for (int k = 0; k < nt && !dup; k++) dup = !strcmp(texts[k], cat);
            /* a second route to an existing token is kept too: tokens formed
             * by different ranks are what queues a rank out of order */
            snprintf(mtext[nm], sizeof mtext[nm], "%s %s", texts[l], texts[rr]);
            merges[nm] = mtext[nm]; nm++;
            if (!dup) { memcpy(texts[nt], cat, ll + rl + 1); toks[nt] = texts[nt]; nt++; }
        }
        mbuf b = {0};
        mb_put(&b, "GGUF", 4); mb_u32(&b, 3); mb_u64(&b, 0); mb_u64(&b, 4);
        mb_key(&b, "tokenizer.ggml.model", GGUF_STRING); mb_str(&b, "gpt2");
        mb_key(&b, "tokenizer.ggml.pre", GGUF_STRING); mb_str(&b, "qwen2");
        mb_strarr(&b, "tokenizer.ggml.tokens", toks, (size_t)nt);
        mb_strarr(&b, "tokenizer.ggml.merges", merges, (size_t)nm);
        gguf_file *f = NULL;
        moe_tokenizer *t = NULL;
        CHECK_MSG(gguf_open_memory(b.p, b.n, "random.gguf", &f, g_err, sizeof g_err) == MOE_OK, "%s", g_err);
        if (f) CHECK_MSG(moe_tokenizer_load(f, &t, g_err, sizeof g_err) == MOE_OK, "%s", g_err);
        static const int ALL[] = {MOE_TOK_MERGE_NAIVE, MOE_TOK_MERGE_HEAP, MOE_TOK_MERGE_QUEUE};
        char str[400];
        for (int i = 0; t && i < 100 && bad < 3; i++) {
            size_t len = 1 + moe_rng_next(&r) % sizeof str;
            int period = 1 + (int)(moe_rng_next(&r) % 7); /* periodic text makes long overlapping runs */
            for (size_t k = 0; k < len; k++)
                str[k] = (k >= (size_t)period && moe_rng_next(&r) % 8) ? str[k - (size_t)period] : "abc"[moe_rng_next(&r) % 3];
            bad += !paths_agree("random.gguf", t, ALL, 3, str, len, &fb);
        }
        moe_tokenizer_free(t);
        gguf_close(f);
        free(b.p);
    }
    CHECK(bad == 0);

}

/* 1 MB of spaces (one pre-token of a million bytes): the ids are those of
 * the heap (the pre-queue algorithm) and decode back to the spaces. No
 * timing here; docs/TOKENIZER.md has the scaling table. */
static void test_megabyte_of_spaces(void) {
    moe_tokenizer *t = load_vocab("vocab/qwen3-vocab.gguf");
    if (!t) return;
    size_t big = 1 << 20, n, nh, dl;
    char *b = malloc(big);
    memset(b, ' ', big);
    int32_t *ids = enc(t, b, big, false, true, &n);
    int32_t *heap = enc_with(t, MOE_TOK_MERGE_HEAP, b, big, &nh, NULL);
    CHECK_EQ_INT(n, 8192); /* 128 spaces a token, as the heap gave before the queue */
    CHECK(nh == n && !memcmp(ids, heap, n * sizeof *ids));
    char *d = dec(t, ids, n, true, &dl);
    CHECK(dl == big && !memcmp(d, b, big));
    free(d); free(heap); free(ids); free(b);
    moe_tokenizer_free(t);
}

/* ---- the streaming UTF-8 decoder ---- */

static size_t stream_all(const char *in, size_t n, size_t chunk, char *out) {
    moe_utf8_stream *u = moe_utf8_stream_new();
    size_t o = 0;
    for (size_t i = 0; i < n; i += chunk) {
        size_t k = n - i < chunk ? n - i : chunk;
        o += moe_utf8_stream_push(u, in + i, k, out + o, 4 * k + 4);
    }
    o += moe_utf8_stream_flush(u, out + o, 4);
    moe_utf8_stream_free(u);
    return o;
}

static void test_stream(void) {
    char out[256];
    /* a character split across pushes is emitted once complete */
    moe_utf8_stream *u = moe_utf8_stream_new();
    CHECK_EQ_INT(moe_utf8_stream_push(u, "a\xf0\x9f", 3, out, sizeof out), 1);
    CHECK_EQ_INT(moe_utf8_stream_push(u, "\xa6", 1, out, sizeof out), 0);
    CHECK_EQ_INT(moe_utf8_stream_push(u, "\x99z", 2, out, sizeof out), 5);
    CHECK(memcmp(out, "\xf0\x9f\xa6\x99z", 5) == 0);
    CHECK_EQ_INT(moe_utf8_stream_flush(u, out, sizeof out), 0);
    /* incomplete at the end: one U+FFFD */
    CHECK_EQ_INT(moe_utf8_stream_push(u, "\xe4\xbd", 2, out, sizeof out), 0);
    CHECK_EQ_INT(moe_utf8_stream_flush(u, out, sizeof out), 3);
    CHECK(memcmp(out, "\xef\xbf\xbd", 3) == 0);
    /* cap is honoured */
    CHECK_EQ_INT(moe_utf8_stream_push(u, "hello", 5, out, 2), 2);
    moe_utf8_stream_free(u);
    /* maximal-subpart replacement, whatever the chunking */
    struct { const char *in; size_t n; const char *want; } cases[] = {
        {"a\xff" "b", 3, "a\xef\xbf\xbd" "b"},
        {"\xe4\xbd" "x", 3, "\xef\xbf\xbd" "x"},
        {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"\xe2\x82\xac\xf0\x9f", 5, "\xe2\x82\xac\xef\xbf\xbd"},
        {"\xe2\x82" "\xe2\x82\xac", 5, "\xef\xbf\xbd\xe2\x82\xac"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t chunk = 1; chunk <= 3; chunk++) {
            size_t o = stream_all(cases[i].in, cases[i].n, chunk, out);
            CHECK_MSG(o == strlen(cases[i].want) && memcmp(out, cases[i].want, o) == 0, "stream case %zu chunk %zu", i, chunk);
        }
}

int main(void) {
    test_inp_out("vocab/ggml-vocab-gpt-2.gguf");
    test_inp_out("vocab/ggml-vocab-llama-spm.gguf");
    test_inp_out("vocab/qwen3-vocab.gguf");
    /* llama.cpp's own test vocabularies (tests/data/llamacpp-vocab, vendored:
     * reached from the vendored directory, none of them is in ../shared) */
    test_inp_out("../llamacpp-vocab/ggml-vocab-deepseek-llm.gguf");
    test_inp_out("../llamacpp-vocab/ggml-vocab-deepseek-coder.gguf");
    /* the deepseek-coder vocabulary with pre kimi-k2: the 46 strings and 16
     * of Han/Latin, contractions, digits, marks; ids from llama-tokenize */
    test_inp_out_n("../llamacpp-vocab/ggml-vocab-kimi-k2.gguf", 62);
    test_public_json();
    test_oracle_prompt("oracle/qwen3moe-tiny-q8_0.gguf"); /* the F32 files' vocabulary */
    test_oracle_prompt("oracle/laguna-tiny-q8_0.gguf");
    test_oracle_prompt("oracle/deepseek2-tiny-q8_0.gguf");   /* pre deepseek-v3 */
    test_oracle_prompt("oracle/gpt-oss-tiny-q8_0.gguf");   /* pre gpt-4o (o200k) */
    test_o200k_case_split();
    test_special();
    test_roundtrip("vocab/qwen3-vocab.gguf", 1000, 1);
    test_roundtrip("vocab/ggml-vocab-gpt-2.gguf", 1000, 2);
    test_roundtrip("oracle/laguna-tiny-q8_0.gguf", 1000, 3);
    test_invalid_bytes();
    test_malformed();
    test_eog_fallback("laguna");
    test_eog_fallback("glm4");
    test_kimi_k2_split();
    test_eog_harmony(true);
    test_eog_harmony(false);
    test_merge_paths("vocab/qwen3-vocab.gguf", 11);
    test_merge_paths("vocab/ggml-vocab-gpt-2.gguf", 12);
    test_merge_paths("vocab/ggml-vocab-llama-spm.gguf", 13);
    test_merge_paths("oracle/laguna-tiny-f32.gguf", 14);
    test_merge_out_of_order();
    test_merge_random_vocab();
    test_megabyte_of_spaces();
    test_stream();
    return check_report("test_tokenizer");
}
