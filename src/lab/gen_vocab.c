/* gen_vocab.c — the byte-level BPE vocabulary that `moefast gen` writes into
 * its models, so that text prompts work with generated files.
 *
 * Layout (the shape of the shared oracle vocabularies): 256 byte tokens in
 * GPT-2's byte-to-unicode order, then merged tokens in merge order, then
 * <|endoftext|>, <|im_start|>, <|im_end|> as CONTROL tokens (or the special
 * tokens of the chat template's family, gen_templates.c). Merges are
 * learned from the English text embedded below by plain BPE training (most
 * frequent adjacent pair, ties to the lowest id pair); when the text has no
 * pairs left, deterministic filler merges of existing tokens fill the vocab.
 * Everything depends only on n_vocab: the same request gives the same vocab. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* Shared with gen.c (declared there). */
typedef struct moe_gen_vocab {
    char **tokens;      /* n_vocab NUL-terminated UTF-8 strings */
    int32_t *types;     /* 1 normal, 3 control */
    char **merges;      /* n_merges "left right" strings */
    size_t n_tokens, n_merges;
} moe_gen_vocab;

int moe_gen_vocab_build(int64_t n_vocab, const char *const *special, int n_special, moe_gen_vocab *out,
                        char *err, size_t errlen);
void moe_gen_vocab_free(moe_gen_vocab *v);

#define N_SPECIAL 3
static const char *const SPECIAL[N_SPECIAL] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};

/* Training text: plain English prose written for this purpose. It covers the
 * test prompt's words so that common prompts tokenize into few tokens. */
static const char TRAIN_TEXT[] =
    "The quick brown fox jumps over the lazy dog. Once upon a time there was a small "
    "village at the edge of a great forest, and in that village lived a girl who liked "
    "to count the stars. Every night she climbed the hill behind her house and looked "
    "up at the sky. She wrote the numbers in a little book: one, two, three, four, "
    "five, six, seven, eight, nine, ten. Her father was a baker and her mother made "
    "shoes for the people of the town. They were not rich, but they were happy, and "
    "the house was always warm and full of the smell of fresh bread.\n"
    "One morning a stranger came to the village. He wore a long grey coat and carried "
    "a wooden box under his arm. He said that the box held a machine that could answer "
    "any question, if only the question was asked in the right way. The people did not "
    "believe him at first. Then the old teacher asked the machine how many days it "
    "would take to walk to the sea, and the machine said eleven days, which was true.\n"
    "The girl wanted to know how the machine worked. She asked the stranger, and he "
    "smiled and opened the box. Inside there were thousands of small wheels and tiny "
    "levers, and each wheel had a word written on it. When you ask a question, he "
    "said, the words turn and find each other, and the answer is the path they make. "
    "The machine does not think the way we do; it only remembers which words like to "
    "stand next to which other words. But if it has read enough, that is almost the "
    "same thing.\n"
    "In the years that followed, the girl learned to build machines of her own. She "
    "learned that a model is a list of numbers, that the numbers are stored in blocks, "
    "and that the blocks can be made smaller if you are careful about how you round "
    "them. She learned that a matrix is a table of numbers and that multiplying a "
    "vector by a matrix is just many dot products done one after another. She learned "
    "that memory is slow and arithmetic is fast, so a good program reads each byte "
    "only once. She learned that a mixture of experts is a model in which a router "
    "chooses, for every token, a few experts out of many, so that most of the weights "
    "stay asleep while the others work.\n"
    "When she was older she came back to the village and built a machine that could "
    "tell stories. It was not as clever as the stranger's box, but it was fast, and it "
    "always gave the same answer to the same question, which the teacher said was the "
    "most important thing of all. \"If a machine gives a different answer every time "
    "you ask,\" he said, \"how can you ever know which answer to trust?\"\n"
    "The children of the village loved the machine. They asked it about dragons and "
    "rivers, about the moon and the weather, about why the sky is blue and why the "
    "grass is green. The machine answered them in short sentences, and sometimes the "
    "answers were strange, but the children did not mind. They laughed and asked "
    "again, and the machine, which never got tired, answered again.\n"
    "Years later, people from the city came to see the machine. They brought computers "
    "with many cores and large memories, and they measured how quickly the machine "
    "could read its weights. They wrote down the numbers: tokens per second, bytes per "
    "token, gigabytes per second. They said the machine was very efficient, because it "
    "read almost nothing that it did not need. The girl, who was now a woman with grey "
    "hair, only nodded. She knew that the real work had been in the small things: in "
    "checking every result twice, in writing tests that could fail, and in never "
    "trusting a number that she had not measured herself.\n"
    "def main():\n    for i in range(10):\n        print(i, i * i)\n    return 0\n"
    "The weather today is sunny with a light wind from the west. Tomorrow it will rain "
    "in the morning and clear up in the afternoon. Temperatures will stay between 12 "
    "and 18 degrees. It's a good day for a walk, isn't it? We'll see what they've said "
    "about the weekend; I'd rather you didn't forget your umbrella.\n"
    "Question: What is the capital of France? Answer: The capital of France is Paris.\n"
    "Question: How many legs does a spider have? Answer: A spider has eight legs.\n"
    "Question: What is two plus two? Answer: Two plus two is four.\n"
    "Hello! How are you today? I am fine, thank you. What would you like to talk about?\n";

/* GPT-2's byte-to-unicode table: printable Latin-1 bytes map to themselves,
 * the others to U+0100 upwards, in the order token ids use. */
static void byte_order(int order[256], int cp_of[256]) {
    bool used[256] = {false};
    int k = 0;
    for (int b = 0; b < 256; b++)
        if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
            used[b] = true; order[k++] = b; cp_of[b] = b;
        }
    int extra = 0;
    for (int b = 0; b < 256; b++)
        if (!used[b]) { order[k++] = b; cp_of[b] = 256 + extra++; }
}

/* ---- a string hash set (raw token bytes), to keep tokens unique ---------- */

typedef struct { uint32_t *slot; size_t cap; } strset; /* slot: token id + 1, 0 empty */

static uint64_t fnv1a(const unsigned char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 0x100000001b3ull; }
    return h;
}

typedef struct {
    unsigned char **raw;  /* raw bytes of each token */
    uint32_t *rlen;
    size_t n, cap;
    strset set;
} toktab;

static int32_t set_find(const toktab *t, const unsigned char *s, size_t n) {
    size_t mask = t->set.cap - 1, i = fnv1a(s, n) & mask;
    for (; t->set.slot[i]; i = (i + 1) & mask) {
        uint32_t id = t->set.slot[i] - 1;
        if (t->rlen[id] == n && !memcmp(t->raw[id], s, n)) return (int32_t)id;
    }
    return -1;
}

static void set_insert(toktab *t, uint32_t id) {
    size_t mask = t->set.cap - 1, i = fnv1a(t->raw[id], t->rlen[id]) & mask;
    while (t->set.slot[i]) i = (i + 1) & mask;
    t->set.slot[i] = id + 1;
}

static int tok_add(toktab *t, const unsigned char *s, size_t n) {
    unsigned char *c = malloc(n ? n : 1);
    if (!c) return -1;
    memcpy(c, s, n);
    t->raw[t->n] = c;
    t->rlen[t->n] = (uint32_t)n;
    set_insert(t, (uint32_t)t->n);
    t->n++;
    return 0;
}

/* ---- pre-tokenisation of the training text --------------------------------
 * An ASCII approximation of the GPT-2/Qwen2 split: contractions, an optional
 * leading non-letter (usually the space) plus letters, single digits, an
 * optional space plus a punctuation run (plus newlines), whitespace runs.
 * Merges never cross these boundaries, as in real BPE training. */
static bool is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_space(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t next_piece(const char *s, size_t n, size_t i) {
    static const char *const contr[] = {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"};
    for (size_t k = 0; k < sizeof contr / sizeof contr[0]; k++) {
        size_t l = strlen(contr[k]);
        if (i + l <= n && !memcmp(s + i, contr[k], l)) return i + l;
    }
    int c = (unsigned char)s[i];
    if (!is_alpha(c) && !is_digit(c) && c != '\n' && c != '\r' && i + 1 < n && is_alpha(s[i + 1])) {
        size_t j = i + 1;
        while (j < n && is_alpha(s[j])) j++;
        return j;
    }
    if (is_alpha(c)) { size_t j = i; while (j < n && is_alpha(s[j])) j++; return j; }
    if (is_digit(c)) return i + 1;
    size_t j = i;
    if (c == ' ' && i + 1 < n && !is_space(s[i + 1]) && !is_alpha(s[i + 1]) && !is_digit(s[i + 1])) j++;
    if (j < n && !is_space(s[j]) && !is_alpha(s[j]) && !is_digit(s[j])) {
        while (j < n && !is_space(s[j]) && !is_alpha(s[j]) && !is_digit(s[j])) j++;
        while (j < n && (s[j] == '\n' || s[j] == '\r')) j++;
        return j;
    }
    /* whitespace run; leave one space for the next word (\s+(?!\S)) */
    j = i;
    while (j < n && is_space(s[j])) j++;
    if (j < n && j - i > 1 && s[j - 1] == ' ') j--;
    return j;
}

typedef struct { int32_t *sym; int len; int count; } word;

static int cmp_word(const void *a, const void *b) {
    const word *x = a, *y = b;
    int n = x->len < y->len ? x->len : y->len;
    for (int i = 0; i < n; i++)
        if (x->sym[i] != y->sym[i]) return x->sym[i] < y->sym[i] ? -1 : 1;
    return x->len - y->len;
}

/* Unique pre-tokens of the text as byte-token id sequences, with counts. */
static int split_words(const int id_of_byte[256], word **out, size_t *n_out) {
    size_t n = sizeof TRAIN_TEXT - 1, cap = 0, nw = 0;
    word *w = NULL;
    for (size_t i = 0; i < n;) {
        size_t j = next_piece(TRAIN_TEXT, n, i);
        if (nw == cap) {
            cap = cap ? 2 * cap : 1024;
            word *nwp = realloc(w, cap * sizeof *w);
            if (!nwp) goto oom;
            w = nwp;
        }
        w[nw].len = (int)(j - i);
        w[nw].count = 1;
        w[nw].sym = malloc((j - i) * sizeof(int32_t));
        if (!w[nw].sym) goto oom;
        for (size_t k = i; k < j; k++) w[nw].sym[k - i] = id_of_byte[(unsigned char)TRAIN_TEXT[k]];
        nw++;
        i = j;
    }
    qsort(w, nw, sizeof *w, cmp_word);
    size_t u = 0;
    for (size_t i = 0; i < nw; i++) {
        if (u && !cmp_word(&w[u - 1], &w[i])) { w[u - 1].count++; free(w[i].sym); continue; }
        w[u++] = w[i];
    }
    *out = w;
    *n_out = u;
    return 0;
oom:
    for (size_t i = 0; i < nw; i++) free(w[i].sym);
    free(w);
    return -1;
}

/* ---- pair counting -------------------------------------------------------- */

typedef struct { uint64_t key; int64_t count; } pair_slot; /* key = (a<<32|b)+1, 0 empty */

static void best_pair(const word *w, size_t nw, pair_slot *tab, size_t cap,
                      int32_t *ba, int32_t *bb, int64_t *bc) {
    memset(tab, 0, cap * sizeof *tab);
    size_t mask = cap - 1;
    *bc = 0;
    for (size_t i = 0; i < nw; i++)
        for (int k = 0; k + 1 < w[i].len; k++) {
            uint64_t key = (((uint64_t)(uint32_t)w[i].sym[k] << 32) | (uint32_t)w[i].sym[k + 1]) + 1;
            size_t h = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & mask;
            while (tab[h].key && tab[h].key != key) h = (h + 1) & mask;
            tab[h].key = key;
            tab[h].count += w[i].count;
        }
    uint64_t best = 0;
    for (size_t h = 0; h < cap; h++) {
        if (!tab[h].key) continue;
        /* most frequent; ties to the lowest (left, right) id pair */
        if (tab[h].count > *bc || (tab[h].count == *bc && tab[h].key < best)) {
            *bc = tab[h].count; best = tab[h].key;
        }
    }
    if (*bc) { *ba = (int32_t)((best - 1) >> 32); *bb = (int32_t)((best - 1) & 0xffffffffu); }
}

static void apply_merge(word *w, size_t nw, int32_t a, int32_t b, int32_t id) {
    for (size_t i = 0; i < nw; i++) {
        int o = 0;
        for (int k = 0; k < w[i].len; k++) {
            if (k + 1 < w[i].len && w[i].sym[k] == a && w[i].sym[k + 1] == b) {
                w[i].sym[o++] = id; k++;
            } else {
                w[i].sym[o++] = w[i].sym[k];
            }
        }
        w[i].len = o;
    }
}

/* ---- output strings -------------------------------------------------------- */

static char *encode_token(const unsigned char *raw, size_t n, const int cp_of[256]) {
    char *s = malloc(2 * n + 1), *p = s;
    if (!s) return NULL;
    for (size_t i = 0; i < n; i++) {
        int cp = cp_of[raw[i]];
        if (cp < 0x80) *p++ = (char)cp;
        else { *p++ = (char)(0xC0 | (cp >> 6)); *p++ = (char)(0x80 | (cp & 0x3F)); }
    }
    *p = 0;
    return s;
}

void moe_gen_vocab_free(moe_gen_vocab *v) {
    if (!v) return;
    for (size_t i = 0; v->tokens && i < v->n_tokens; i++) free(v->tokens[i]);
    for (size_t i = 0; v->merges && i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens); free(v->types); free(v->merges);
    memset(v, 0, sizeof *v);
}

int moe_gen_vocab_build(int64_t n_vocab, const char *const *special, int n_special, moe_gen_vocab *out,
                        char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!special || n_special <= 0) { special = SPECIAL; n_special = N_SPECIAL; }
    if (n_vocab < 256 + n_special || n_vocab > (1 << 24))
        return moe_errf(err, errlen, MOE_EINVAL, "n_vocab %lld out of range (%d..%d)",
                        (long long)n_vocab, 256 + n_special, 1 << 24);
    size_t n_norm = (size_t)n_vocab - (size_t)n_special, n_merge = n_norm - 256;
    int order[256], cp_of[256], id_of_byte[256];
    byte_order(order, cp_of);
    for (int i = 0; i < 256; i++) id_of_byte[order[i]] = i;

    int rc = MOE_ENOMEM;
    toktab t = {0};
    word *w = NULL;
    size_t nw = 0, pcap = 1;
    while (pcap < 2 * sizeof TRAIN_TEXT) pcap <<= 1;
    pair_slot *ptab = NULL;
    int32_t (*mp)[2] = malloc((n_merge ? n_merge : 1) * sizeof *mp);
    t.cap = n_norm;
    t.raw = calloc(n_norm, sizeof *t.raw);
    t.rlen = calloc(n_norm, sizeof *t.rlen);
    t.set.cap = 1;
    while (t.set.cap < 2 * n_norm + 16) t.set.cap <<= 1;
    t.set.slot = calloc(t.set.cap, sizeof *t.set.slot);
    ptab = malloc(pcap * sizeof *ptab);
    if (!mp || !t.raw || !t.rlen || !t.set.slot || !ptab) goto done;
    for (int i = 0; i < 256; i++) {
        unsigned char b = (unsigned char)order[i];
        if (tok_add(&t, &b, 1)) goto done;
    }
    if (split_words(id_of_byte, &w, &nw)) goto done;

    size_t m = 0;
    unsigned char buf[64];
    /* learned merges */
    while (m < n_merge) {
        int32_t a = 0, b = 0;
        int64_t c;
        best_pair(w, nw, ptab, pcap, &a, &b, &c);
        if (!c) break;
        size_t la = t.rlen[a], lb = t.rlen[b];
        unsigned char *cat = malloc(la + lb);
        if (!cat) goto done;
        memcpy(cat, t.raw[a], la);
        memcpy(cat + la, t.raw[b], lb);
        int32_t ex = set_find(&t, cat, la + lb);
        int32_t id = ex;
        if (ex < 0) {
            /* a new token; an existing string (reachable by two paths) just
             * reuses its id, and its second merge is not recorded */
            id = (int32_t)t.n;
            int r = tok_add(&t, cat, la + lb);
            if (r) { free(cat); goto done; }
            mp[m][0] = a; mp[m][1] = b; m++;
        }
        free(cat);
        apply_merge(w, nw, a, b, id);
    }
    /* filler merges: two existing tokens whose concatenation is short and new */
    moe_rng rng;
    moe_rng_seed(&rng, 0x6d6f6566617374ull ^ (uint64_t)n_vocab);
    while (m < n_merge) {
        uint64_t r = moe_rng_next(&rng);
        int32_t a = (int32_t)((r & 0xffffffffu) % t.n), b = (int32_t)((r >> 32) % t.n);
        size_t la = t.rlen[a], lb = t.rlen[b];
        if (la + lb > 12) continue;
        memcpy(buf, t.raw[a], la);
        memcpy(buf + la, t.raw[b], lb);
        if (set_find(&t, buf, la + lb) >= 0) continue;
        if (tok_add(&t, buf, la + lb)) goto done;
        mp[m][0] = a; mp[m][1] = b; m++;
    }

    out->n_tokens = (size_t)n_vocab;
    out->n_merges = n_merge;
    out->tokens = calloc(out->n_tokens, sizeof *out->tokens);
    out->types = calloc(out->n_tokens, sizeof *out->types);
    out->merges = calloc(n_merge ? n_merge : 1, sizeof *out->merges);
    if (!out->tokens || !out->types || !out->merges) goto done;
    for (size_t i = 0; i < n_norm; i++) {
        out->tokens[i] = encode_token(t.raw[i], t.rlen[i], cp_of);
        out->types[i] = 1;
        if (!out->tokens[i]) goto done;
    }
    for (size_t i = 0; i < (size_t)n_special; i++) {
        out->tokens[n_norm + i] = strdup(special[i]);
        out->types[n_norm + i] = 3;
        if (!out->tokens[n_norm + i]) goto done;
    }
    for (size_t i = 0; i < n_merge; i++) {
        const char *l = out->tokens[mp[i][0]], *r = out->tokens[mp[i][1]];
        size_t ll = strlen(l), lr = strlen(r);
        out->merges[i] = malloc(ll + lr + 2);
        if (!out->merges[i]) goto done;
        memcpy(out->merges[i], l, ll);
        out->merges[i][ll] = ' ';
        memcpy(out->merges[i] + ll + 1, r, lr + 1);
    }
    rc = MOE_OK;
done:
    for (size_t i = 0; i < t.n; i++) free(t.raw[i]);
    free(t.raw); free(t.rlen); free(t.set.slot); free(ptab); free(mp);
    for (size_t i = 0; i < nw; i++) free(w[i].sym);
    free(w);
    if (rc != MOE_OK) {
        moe_gen_vocab_free(out);
        return moe_errf(err, errlen, rc, "out of memory building the vocabulary");
    }
    return MOE_OK;
}
