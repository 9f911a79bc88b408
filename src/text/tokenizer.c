/* tokenizer.c — tokenizers from GGUF metadata (see docs/TOKENIZER.md).
 *
 * Two families, both following llama.cpp's behaviour (the reference the
 * shared token ids come from):
 *  - `gpt2`: byte-level BPE. Text is split by the pre-tokenizer regexes of
 *    tokenizer.ggml.pre (PCRE2, UTF + UCP, JIT when available), each piece is
 *    mapped byte -> GPT-2 unicode char and merged by merge rank.
 *  - `llama`: SentencePiece-style BPE over UTF-8 characters, merged by token
 *    score, with <0xNN> byte fallback; spaces become U+2581.
 * Special tokens (CONTROL when parse_special, USER_DEFINED always) are cut
 * out of the text first, longest first, exactly as llama.cpp's
 * tokenizer_st_partition does.
 *
 * Merges are kept as an id-pair hash map (left id, right id) -> (rank, merged
 * id), and each word is merged with a binary heap over a linked list of
 * symbols: O(n log n) per word, no string rebuilding. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"
#include "base/util.h"

enum { TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3,
       TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };
enum { KIND_BPE = 1, KIND_SPM = 2 };

#define MAX_PRE_REGEX 6

typedef struct merge_ent { int32_t l, r, rank, id; } merge_ent;

struct moe_tokenizer {
    int kind;
    int n_vocab;
    char *text;             /* all token texts, concatenated */
    uint32_t *text_off, *text_len;
    char *piece;            /* decoded bytes of every token */
    uint32_t *piece_off, *piece_len;
    uint8_t *type;          /* TT_* per token */
    float *score;           /* SPM scores (NULL for BPE) */
    uint8_t *eog;
    uint32_t *tmap; uint32_t tmap_mask;      /* text -> id+1 (0 empty) */
    merge_ent *mmap; uint32_t mmap_mask;     /* (l, r) -> rank, id; l == -1 empty */
    int32_t byte_tok[256];  /* BPE: token of the mapped byte; SPM: <0xNN> token */
    int32_t *special; int n_special;         /* special-token candidates, longest first */
    uint8_t special_first[256];              /* 1 if some special starts with that byte */
    int32_t bos, eos, unk;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    int n_re;
    pcre2_code *re[MAX_PRE_REGEX];
    bool re_jit[MAX_PRE_REGEX];
};

/* ------------------------------------------------------------------ */
/* hashing                                                             */

static uint64_t hash_bytes(const void *p, size_t n) {
    /* FNV-1a with a final mix: short keys, load-time and per-pair lookups. */
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ull; }
    h ^= h >> 29; h *= 0xbf58476d1ce4e5b9ull; h ^= h >> 32;
    return h;
}

static uint64_t hash_pair(int32_t a, int32_t b) {
    uint64_t h = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull; h ^= h >> 33;
    return h;
}

static int32_t text_lookup(const moe_tokenizer *t, const char *s, size_t n) {
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->tmap_mask;
    for (;;) {
        uint32_t v = t->tmap[i];
        if (!v) return -1;
        int32_t id = (int32_t)(v - 1);
        if (t->text_len[id] == n && memcmp(t->text + t->text_off[id], s, n) == 0) return id;
        i = (i + 1) & t->tmap_mask;
    }
}

static const merge_ent *merge_lookup(const moe_tokenizer *t, int32_t l, int32_t r) {
    if (!t->mmap) return NULL;
    uint32_t i = (uint32_t)hash_pair(l, r) & t->mmap_mask;
    for (;;) {
        const merge_ent *e = &t->mmap[i];
        if (e->l == -1) return NULL;
        if (e->l == l && e->r == r) return e;
        i = (i + 1) & t->mmap_mask;
    }
}

static uint32_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c <<= 1;
    return (uint32_t)c;
}

/* ------------------------------------------------------------------ */
/* UTF-8                                                               */

static size_t utf8_put(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xC0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xE0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        o[2] = (char)(0x80 | (c & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3F)); o[3] = (char)(0x80 | (c & 0x3F)); return 4;
}

/* Decodes one code point the way llama.cpp's unicode_cpt_from_utf8 does:
 * only the lead byte's length bits and the continuation bytes' top bits are
 * checked, so overlong forms and surrogates decode. Returns false (an invalid
 * byte, *adv = 1) otherwise; we also reject results past U+10FFFF, which
 * llama.cpp cannot re-encode. */
static bool utf8_dec_lenient(const uint8_t *s, size_t n, uint32_t *cp, size_t *adv) {
    uint8_t b = s[0];
    *adv = 1;
    if (b < 0x80) { *cp = b; return true; }
    if (!(b & 0x40)) return false;
    if (!(b & 0x20)) {
        if (n < 2 || (s[1] & 0xC0) != 0x80) return false;
        *cp = ((uint32_t)(b & 0x1F) << 6) | (s[1] & 0x3F); *adv = 2; return true;
    }
    if (!(b & 0x10)) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return false;
        *cp = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        *adv = 3; return true;
    }
    if (!(b & 0x08)) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return false;
        uint32_t c = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                     ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
        if (c > 0x10FFFF) return false;
        *cp = c; *adv = 4; return true;
    }
    return false;
}

static size_t utf8_len_canon(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

/* ------------------------------------------------------------------ */
/* GPT-2 byte <-> unicode                                              */

static uint32_t gpt2_byte_cp(int b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return (uint32_t)b;
    int n = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) n++;
    return 256u + (uint32_t)n;
}

/* ------------------------------------------------------------------ */
/* loading                                                             */

void moe_tokenizer_free(moe_tokenizer *t) {
    if (!t) return;
    free(t->text); free(t->text_off); free(t->text_len);
    free(t->piece); free(t->piece_off); free(t->piece_len);
    free(t->type); free(t->score); free(t->eog);
    free(t->tmap); free(t->mmap); free(t->special);
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    free(t);
}

int  moe_tokenizer_n_vocab(const moe_tokenizer *t) { return t->n_vocab; }
int32_t moe_tokenizer_bos(const moe_tokenizer *t) { return t->bos; }
int32_t moe_tokenizer_eos(const moe_tokenizer *t) { return t->eos; }
bool moe_tokenizer_add_bos(const moe_tokenizer *t) { return t->add_bos; }
bool moe_tokenizer_is_eog(const moe_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

/* Pre-tokenizer regexes, as llama.cpp's llm_tokenizer_bpe uses them. */
static const char RX_GPT2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
static const char RX_LLAMA3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX_QWEN2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* o200k (gpt-4o, gpt-oss): case-aware words (an optional leading
 * non-letter, "upper" letters then "lower" ones or the reverse, then an
 * optional contraction), digits in groups of 1-3, punctuation runs with
 * trailing newlines or slashes. llama.cpp's form of tokenizer.json's
 * expression: "upper" = a letter other than a-z, "lower" = a letter other
 * than A-Z. */
static const char RX_GPT4O[] =
    "[^\\r\\n\\p{L}\\p{N}]?(?:(?=[\\p{L}])[^a-z])*(?:(?=[\\p{L}])[^A-Z])+"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "[^\\r\\n\\p{L}\\p{N}]?(?:(?=[\\p{L}])[^a-z])+(?:(?=[\\p{L}])[^A-Z])*"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX_NEWLINES[] = "[^\\n]+|[\\n]+";
/* llama.cpp's DEEPSEEK3_LLM expressions (pre deepseek-v3): digit runs of
 * 1-3, CJK / kana runs, then the word, punctuation and space rules */
static const char RX_DS3_NUM[] = "\\p{N}{1,3}";
static const char RX_DS3_CJK[] = "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+";
static const char RX_DS3[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* Kimi-K2 (pre kimi-k2): llama.cpp's hand-written splitter
 * (unicode_regex_split_custom_kimi_k2), not tokenization_kimi.py's regex it
 * cites. Its "Han" is a list of CJK ideograph blocks, not the script (kana,
 * CJK radicals and U+3007 are not Han); its words are \p{L} minus Han with no
 * upper/lower split and no marks (a combining mark is punctuation there); its
 * contractions are ASCII only ('S but not U+017F). PCRE2 10.42 has no class
 * intersection: "letter but not Han" is the negated class [^\P{L}HAN]. */
#define KIMI_HAN "\\x{3400}-\\x{4DBF}\\x{4E00}-\\x{9FFF}\\x{F900}-\\x{FAFF}\\x{20000}-\\x{2A6DF}" \
                 "\\x{2A700}-\\x{2EBEF}\\x{2F800}-\\x{2FA1F}"
static const char RX_KIMI_K2[] =
    "[" KIMI_HAN "]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[^\\P{L}" KIMI_HAN "]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
/* llama.cpp's DEEPSEEK_LLM (DeepSeek-V2 / V2-Lite, deepseek-llm) and
 * DEEPSEEK_CODER (DeepSeek-Coder-V2) expressions, as llama-vocab.cpp writes
 * them (its letter and CJK ranges as literal characters); llama.cpp's
 * "\\s+$" runs on one fragment with std::wregex, where $ is the fragment's
 * end only: \\z here (PCRE2's $ would also match before a final newline). */
static const char RX_DSL_NL[] = "[\r\n]";
static const char RX_DSL_LETTERS[] =
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
static const char RX_DSL_PUNCT[] = "\\s?[!-/:-~！-／：-～‘-‟　-。]+";
static const char RX_DSL_TAILSPACE[] = "\\s+\\z";
static const char RX_DSL_CJK[] = "[一-龥ࠀ-一가-퟿]+";
static const char RX_DEF_NUM_ONE[] = "\\p{N}";
static const char RX_DSC_LETTERS[] = "\\s?\\p{L}+";
static const char RX_DSC_PUNCT[] = "\\s?\\p{P}+";
static const char RX_DEF_PUNCT[] = "[\\p{P}\\$\\+<=>\\^~\\|]+";
static const char RX_DEF_NUM[] = "\\p{N}+";
static const char RX_DEF_DIGIT3[] = "[0-9][0-9][0-9]";

typedef struct pre_def {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *rx[MAX_PRE_REGEX];
    bool ignore_merges;
} pre_def;

static const pre_def PRE_DEFS[] = {
    {"default|", {RX_DEF_PUNCT, RX_GPT2, RX_DEF_NUM, RX_DEF_DIGIT3}, false},
    {"gpt-2|phi-2|gpt2|olmo|", {RX_GPT2}, false},   /* llama.cpp: OLMO uses the GPT-2 expression */
    {"qwen2|deepseek-r1-qwen|megrez|stablelm2|hunyuan|grok-2|", {RX_QWEN2}, false},
    /* llama.cpp (LLAMA_VOCAB_PRE_TYPE_LAGUNA): newline runs split first, then
     * the Qwen2 expression. */
    {"laguna|", {RX_NEWLINES, RX_QWEN2}, false},
    {"llama3|llama-v3|llama-bpe|falcon3|", {RX_LLAMA3}, true},
    {"dbrx|smaug-bpe|", {RX_LLAMA3}, false},
    {"deepseek-v3|", {RX_DS3_NUM, RX_DS3_CJK, RX_DS3}, false},
    {"deepseek-llm|", {RX_DSL_NL, RX_DSL_LETTERS, RX_DSL_PUNCT, RX_DSL_TAILSPACE, RX_DSL_CJK, RX_DEF_NUM}, false},
    {"deepseek-coder|", {RX_DSL_NL, RX_DSC_LETTERS, RX_DSC_PUNCT, RX_DSL_CJK, RX_DEF_NUM_ONE}, false},
    /* llama.cpp's CHATGLM4: the Llama-3 expression without ignore_merges; it
     * also forces the BOS id to none, which is already so for gpt2 vocabularies
     * without tokenizer.ggml.bos_token_id (the key, when present, wins there too) */
    {"glm4|chatglm-bpe|", {RX_LLAMA3}, false},
    {"gpt-4o|llama4|", {RX_GPT4O}, false},
    /* llama.cpp: no ignore_merges; clean_spaces off, which only matters to
     * decoding with clean-up, not done here */
    {"kimi-k2|", {RX_KIMI_K2}, false},
};

static bool pre_name_match(const char *names, const char *v, size_t vlen) {
    for (const char *p = names; *p;) {
        const char *e = strchr(p, '|');
        size_t n = (size_t)(e - p);
        if (n == vlen && memcmp(p, v, n) == 0) return true;
        p = e + 1;
    }
    return false;
}

static int compile_pre(moe_tokenizer *t, const pre_def *d, const char *path, char *err, size_t errlen) {
    for (int i = 0; i < MAX_PRE_REGEX && d->rx[i]; i++) {
        int ec; PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)d->rx[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(ec, msg, sizeof msg);
            return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: tokenizer.ggml.pre: regex %d does not compile at %zu: %s",
                            path, i, (size_t)eo, (const char *)msg);
        }
        t->re[t->n_re] = re;
        t->re_jit[t->n_re] = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
        t->n_re++;
    }
    return MOE_OK;
}

#define FPATH(f) ((f)->path ? (f)->path : "(memory)")

static int kv_str(const gguf_file *f, const char *key, gguf_str *out, bool required, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        if (required) return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing key %s", FPATH(f), key);
        return 1;
    }
    if (kv->type != GGUF_STRING)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: key %s at offset %llu has type %s, expected string",
                        FPATH(f), key, (unsigned long long)kv->offset, gguf_vtype_name(kv->type));
    *out = kv->v.s;
    return MOE_OK;
}

/* An array key: present (MOE_OK), absent (1), or a type error. */
static int kv_arr(const gguf_file *f, const char *key, const gguf_kv **out, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_ARRAY)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: key %s at offset %llu has type %s, expected an array",
                        FPATH(f), key, (unsigned long long)kv->offset, gguf_vtype_name(kv->type));
    *out = kv;
    return MOE_OK;
}

static bool vtype_is_int(uint32_t t) {
    return t == GGUF_U8 || t == GGUF_I8 || t == GGUF_U16 || t == GGUF_I16 || t == GGUF_U32 ||
           t == GGUF_I32 || t == GGUF_U64 || t == GGUF_I64;
}

static int64_t arr_int_at(const gguf_kv *kv, uint64_t i) {
    const uint8_t *d = kv->v.arr.data;
    switch (kv->v.arr.type) {
    case GGUF_U8: return d[i];
    case GGUF_I8: return (int8_t)d[i];
    case GGUF_U16: { uint16_t v; memcpy(&v, d + 2 * i, 2); return v; }
    case GGUF_I16: { int16_t v; memcpy(&v, d + 2 * i, 2); return v; }
    case GGUF_U32: { uint32_t v; memcpy(&v, d + 4 * i, 4); return v; }
    case GGUF_I32: { int32_t v; memcpy(&v, d + 4 * i, 4); return v; }
    case GGUF_U64: { uint64_t v; memcpy(&v, d + 8 * i, 8); return (int64_t)v; }
    case GGUF_I64: { int64_t v; memcpy(&v, d + 8 * i, 8); return v; }
    default: return 0;
    }
}

/* Special token id keys: absent keeps *id; out of range is a load error. */
static int read_id(const gguf_file *f, const char *key, int n_vocab, int32_t *id, char *err, size_t errlen) {
    int64_t v;
    int rc = gguf_get_i64(f, key, &v, err, errlen);
    if (rc == 1) return MOE_OK;
    if (rc != MOE_OK) return rc;
    if (v < 0 || v >= n_vocab) {
        const gguf_kv *kv = gguf_find_kv(f, key);
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: key %s at offset %llu: token id %lld out of range (vocabulary has %d tokens)",
                        FPATH(f), key, kv ? (unsigned long long)kv->offset : 0ull, (long long)v, n_vocab);
    }
    *id = (int32_t)v;
    return MOE_OK;
}

static int read_bool(const gguf_file *f, const char *key, bool *b, char *err, size_t errlen) {
    int rc = gguf_get_bool(f, key, b, err, errlen);
    return rc == 1 ? MOE_OK : rc;
}

static const char *const EOG_TEXTS[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    /* FIM pad / repo / file separator end generation in llama.cpp too */
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    /* poolside Laguna's end of turn (its chat format closes assistant turns
     * with it); not in llama.cpp's list, whose Laguna files name it eot */
    "</assistant>",
};

static int cmp_special(const void *a, const void *b, void *ctx) {
    const moe_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y]) return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static int hexdig(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

static int build_pieces(moe_tokenizer *t) {
    /* decoded bytes are never longer than the token text */
    size_t total = 0;
    for (int i = 0; i < t->n_vocab; i++) total += t->text_len[i];
    t->piece = malloc(total + 1);
    t->piece_off = malloc(sizeof(uint32_t) * (size_t)t->n_vocab);
    t->piece_len = malloc(sizeof(uint32_t) * (size_t)t->n_vocab);
    if (!t->piece || !t->piece_off || !t->piece_len) return MOE_ENOMEM;
    int16_t rev[512]; /* GPT-2 unicode char -> byte */
    for (int i = 0; i < 512; i++) rev[i] = -1;
    for (int b = 0; b < 256; b++) rev[gpt2_byte_cp(b)] = (int16_t)b;
    size_t o = 0;
    for (int id = 0; id < t->n_vocab; id++) {
        const uint8_t *s = (const uint8_t *)t->text + t->text_off[id];
        size_t n = t->text_len[id];
        t->piece_off[id] = (uint32_t)o;
        int ty = t->type[id];
        if (t->kind == KIND_BPE && ty == TT_NORMAL) {
            for (size_t i = 0; i < n;) {
                uint32_t cp; size_t adv;
                if (utf8_dec_lenient(s + i, n - i, &cp, &adv) && cp < 512 && rev[cp] >= 0) {
                    t->piece[o++] = (char)rev[cp];
                } else { /* not a mapped byte: pass the bytes through */
                    memcpy(t->piece + o, s + i, adv); o += adv;
                }
                i += adv;
            }
        } else if (t->kind == KIND_SPM && ty == TT_BYTE && n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>' &&
                   hexdig(s[3]) >= 0 && hexdig(s[4]) >= 0) {
            t->piece[o++] = (char)(hexdig(s[3]) * 16 + hexdig(s[4]));
        } else if (t->kind == KIND_SPM && ty == TT_NORMAL) {
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && s[i] == 0xE2 && s[i + 1] == 0x96 && s[i + 2] == 0x81) {
                    t->piece[o++] = ' '; i += 3;
                } else {
                    t->piece[o++] = (char)s[i++];
                }
            }
        } else {
            memcpy(t->piece + o, s, n); o += n;
        }
        t->piece_len[id] = (uint32_t)(o - t->piece_off[id]);
    }
    return MOE_OK;
}

int moe_tokenizer_load(const gguf_file *f, moe_tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    const char *path = f->path ? f->path : "(memory)";
    gguf_str model;
    int rc = kv_str(f, "tokenizer.ggml.model", &model, true, err, errlen);
    if (rc != MOE_OK) return rc;
    int kind;
    if (model.len == 4 && !memcmp(model.ptr, "gpt2", 4)) kind = KIND_BPE;
    else if (model.len == 5 && !memcmp(model.ptr, "llama", 5)) kind = KIND_SPM;
    else
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' is not supported (known: gpt2, llama)",
                        path, (int)(model.len > 64 ? 64 : model.len), model.ptr);

    const gguf_kv *tokens = NULL, *types = NULL, *scores = NULL, *merges = NULL;
    rc = kv_arr(f, "tokenizer.ggml.tokens", &tokens, err, errlen);
    if (rc == 1) return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing key tokenizer.ggml.tokens (the token array)", path);
    if (rc != MOE_OK) return rc;
    if (tokens->v.arr.type != GGUF_STRING)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: key tokenizer.ggml.tokens at offset %llu is an array of %s, expected strings",
                        path, (unsigned long long)tokens->offset, gguf_vtype_name(tokens->v.arr.type));
    if (tokens->v.arr.n == 0 || tokens->v.arr.n > 0x7fffffff)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: key tokenizer.ggml.tokens at offset %llu has %llu entries",
                        path, (unsigned long long)tokens->offset, (unsigned long long)tokens->v.arr.n);
    int nv = (int)tokens->v.arr.n;
    rc = kv_arr(f, "tokenizer.ggml.token_type", &types, err, errlen);
    if (rc < 0) return rc;
    if (types && (!vtype_is_int(types->v.arr.type) || types->v.arr.n < (uint64_t)nv))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: key tokenizer.ggml.token_type at offset %llu must be an integer array of %d entries (has %llu of %s)",
                        path, (unsigned long long)types->offset, nv, (unsigned long long)types->v.arr.n, gguf_vtype_name(types->v.arr.type));
    rc = kv_arr(f, "tokenizer.ggml.scores", &scores, err, errlen);
    if (rc < 0) return rc;
    if (scores && ((scores->v.arr.type != GGUF_F32 && scores->v.arr.type != GGUF_I32) || scores->v.arr.n < (uint64_t)nv))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: key tokenizer.ggml.scores at offset %llu must be an f32 array of %d entries (has %llu of %s)",
                        path, (unsigned long long)scores->offset, nv, (unsigned long long)scores->v.arr.n, gguf_vtype_name(scores->v.arr.type));
    if (kind == KIND_BPE) {
        rc = kv_arr(f, "tokenizer.ggml.merges", &merges, err, errlen);
        if (rc == 1) return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing key tokenizer.ggml.merges (required for a gpt2 tokenizer)", path);
        if (rc != MOE_OK) return rc;
        if (merges->v.arr.type != GGUF_STRING)
            return moe_errf(err, errlen, MOE_EFORMAT, "%s: key tokenizer.ggml.merges at offset %llu is an array of %s, expected strings",
                            path, (unsigned long long)merges->offset, gguf_vtype_name(merges->v.arr.type));
    }

    moe_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory loading the tokenizer", path);
    t->kind = kind;
    t->n_vocab = nv;
    t->bos = t->eos = t->unk = -1;
    if (kind == KIND_SPM) { /* llama.cpp's SPM defaults */
        t->bos = nv > 1 ? 1 : -1; t->eos = nv > 2 ? 2 : -1; t->unk = 0;
        t->add_bos = true; t->add_space_prefix = true;
    }
    size_t total = 0;
    for (int i = 0; i < nv; i++) total += tokens->v.arr.strs[i].len ? tokens->v.arr.strs[i].len : 24;
    if (total > 0xffffffffu) { moe_tokenizer_free(t);
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: key tokenizer.ggml.tokens: token texts too large", path); }
    t->text = malloc(total + 1);
    t->text_off = malloc(sizeof(uint32_t) * (size_t)nv);
    t->text_len = malloc(sizeof(uint32_t) * (size_t)nv);
    t->type = malloc((size_t)nv);
    t->eog = calloc((size_t)nv, 1);
    t->tmap_mask = pow2_at_least((uint64_t)nv * 2) - 1;
    t->tmap = calloc((size_t)t->tmap_mask + 1, sizeof(uint32_t));
    if (kind == KIND_SPM) t->score = calloc((size_t)nv, sizeof(float));
    if (!t->text || !t->text_off || !t->text_len || !t->type || !t->eog || !t->tmap || (kind == KIND_SPM && !t->score)) {
        moe_tokenizer_free(t);
        return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory loading the tokenizer", path);
    }
    size_t o = 0;
    for (int i = 0; i < nv; i++) {
        const gguf_str *s = &tokens->v.arr.strs[i];
        t->text_off[i] = (uint32_t)o;
        if (s->len) { memcpy(t->text + o, s->ptr, s->len); o += s->len; }
        else o += (size_t)snprintf(t->text + o, 24, "[EMPTY_%d]", i); /* as llama.cpp names them */
        t->text_len[i] = (uint32_t)(o - t->text_off[i]);
        int64_t ty = types ? arr_int_at(types, (uint64_t)i) : TT_NORMAL;
        t->type[i] = (uint8_t)(ty >= 1 && ty <= 6 ? ty : TT_UNDEFINED);
        if (t->score) {
            if (scores && scores->v.arr.type == GGUF_F32) memcpy(&t->score[i], (const uint8_t *)scores->v.arr.data + 4 * (size_t)i, 4);
            else if (scores) t->score[i] = (float)arr_int_at(scores, (uint64_t)i);
        }
        /* insert; a duplicate text is malformed (llama.cpp refuses it too) */
        uint32_t h = (uint32_t)hash_bytes(t->text + t->text_off[i], t->text_len[i]) & t->tmap_mask;
        for (;;) {
            uint32_t v = t->tmap[h];
            if (!v) { t->tmap[h] = (uint32_t)i + 1; break; }
            int32_t j = (int32_t)(v - 1);
            if (t->text_len[j] == t->text_len[i] && !memcmp(t->text + t->text_off[j], t->text + t->text_off[i], t->text_len[i])) {
                int len = (int)(t->text_len[i] > 40 ? 40 : t->text_len[i]);
                char buf[48]; memcpy(buf, t->text + t->text_off[i], (size_t)len);
                moe_errf(err, errlen, MOE_EFORMAT, "%s: key tokenizer.ggml.tokens at offset %llu: duplicate token '%.*s' (ids %d and %d)",
                         path, (unsigned long long)tokens->offset, len, buf, j, i);
                moe_tokenizer_free(t);
                return MOE_EFORMAT;
            }
            h = (h + 1) & t->tmap_mask;
        }
    }

    /* special ids and flags */
    if ((rc = read_id(f, "tokenizer.ggml.bos_token_id", nv, &t->bos, err, errlen)) ||
        (rc = read_id(f, "tokenizer.ggml.eos_token_id", nv, &t->eos, err, errlen)) ||
        (rc = read_id(f, "tokenizer.ggml.unknown_token_id", nv, &t->unk, err, errlen)) ||
        (rc = read_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos, err, errlen)) ||
        (rc = read_bool(f, "tokenizer.ggml.add_eos_token", &t->add_eos, err, errlen)) ||
        (rc = read_bool(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err, errlen))) {
        moe_tokenizer_free(t);
        return rc;
    }
    int32_t eot = -1, eom = -1, pad = -1;
    if ((rc = read_id(f, "tokenizer.ggml.eot_token_id", nv, &eot, err, errlen)) ||
        (rc = read_id(f, "tokenizer.ggml.eom_token_id", nv, &eom, err, errlen)) ||
        (rc = read_id(f, "tokenizer.ggml.padding_token_id", nv, &pad, err, errlen))) {
        moe_tokenizer_free(t);
        return rc;
    }
    if (t->add_bos && t->bos < 0) {
        moe_tokenizer_free(t);
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is not set", path);
    }
    /* end-of-generation set: eos/eot/eom plus the texts llama.cpp recognises;
     * those are treated as control tokens whatever their declared type */
    for (size_t i = 0; i < sizeof EOG_TEXTS / sizeof EOG_TEXTS[0]; i++) {
        int32_t id = text_lookup(t, EOG_TEXTS[i], strlen(EOG_TEXTS[i]));
        if (id >= 0) { t->eog[id] = 1; t->type[id] = TT_CONTROL; }
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (eot >= 0) t->eog[eot] = 1;
    if (eom >= 0) t->eog[eom] = 1;
    /* gpt-oss (harmony): <|end|> closes every message, the analysis one
     * before the answer included; its turns end with <|return|> or <|call|>.
     * A vocabulary with both keeps <|end|> out of the set (as llama.cpp's) */
    const int32_t h_end = text_lookup(t, "<|end|>", 7);
    if (h_end >= 0 && text_lookup(t, "<|return|>", 10) >= 0 && text_lookup(t, "<|call|>", 8) >= 0) t->eog[h_end] = 0;

    /* byte tokens */
    for (int b = 0; b < 256; b++) {
        char buf[8];
        if (kind == KIND_BPE) {
            size_t n = utf8_put(gpt2_byte_cp(b), buf);
            t->byte_tok[b] = text_lookup(t, buf, n);
        } else {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            int32_t id = text_lookup(t, buf, 6);
            if (id < 0) { buf[0] = (char)b; id = text_lookup(t, buf, 1); }
            t->byte_tok[b] = id;
        }
    }

    /* merges */
    if (kind == KIND_BPE) {
        uint64_t nm = merges->v.arr.n;
        t->mmap_mask = pow2_at_least(nm * 2 + 1) - 1;
        t->mmap = malloc(sizeof(merge_ent) * ((size_t)t->mmap_mask + 1));
        if (!t->mmap) { moe_tokenizer_free(t); return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory for merges", path); }
        for (size_t i = 0; i <= t->mmap_mask; i++) t->mmap[i].l = -1;
        char *cat = NULL; size_t catcap = 0;
        for (uint64_t m = 0; m < nm; m++) {
            const gguf_str *s = &merges->v.arr.strs[m];
            const char *sp = s->len > 1 ? memchr(s->ptr + 1, ' ', s->len - 1) : NULL;
            int32_t l = -1, r = -1, id = -1;
            const char *bad = NULL; size_t badn = 0;
            if (!sp) { bad = s->ptr; badn = s->len; }
            else {
                size_t ln = (size_t)(sp - s->ptr), rn = s->len - ln - 1;
                l = text_lookup(t, s->ptr, ln);
                r = text_lookup(t, sp + 1, rn);
                if (l < 0) { bad = s->ptr; badn = ln; }
                else if (r < 0) { bad = sp + 1; badn = rn; }
                else {
                    if (ln + rn > catcap) { catcap = (ln + rn) * 2; char *nc = realloc(cat, catcap); if (!nc) { free(cat); moe_tokenizer_free(t); return MOE_ENOMEM; } cat = nc; }
                    memcpy(cat, s->ptr, ln); memcpy(cat + ln, sp + 1, rn);
                    id = text_lookup(t, cat, ln + rn);
                    if (id < 0) { bad = cat; badn = ln + rn; }
                }
            }
            if (bad) {
                int len = (int)(badn > 40 ? 40 : badn);
                char buf[48]; memcpy(buf, bad, (size_t)len);
                moe_errf(err, errlen, MOE_EFORMAT, sp ? "%s: key tokenizer.ggml.merges at offset %llu: merge %llu names unknown token '%.*s'"
                                                      : "%s: key tokenizer.ggml.merges at offset %llu: merge %llu '%.*s' has no separating space",
                         path, (unsigned long long)merges->offset, (unsigned long long)m, len, buf);
                free(cat); moe_tokenizer_free(t);
                return MOE_EFORMAT;
            }
            uint32_t h = (uint32_t)hash_pair(l, r) & t->mmap_mask;
            while (t->mmap[h].l != -1 && !(t->mmap[h].l == l && t->mmap[h].r == r)) h = (h + 1) & t->mmap_mask;
            if (t->mmap[h].l == -1) /* first occurrence wins, as in llama.cpp */
                t->mmap[h] = (merge_ent){l, r, (int32_t)m, id};
        }
        free(cat);

        gguf_str pre = {"default", 7};
        rc = kv_str(f, "tokenizer.ggml.pre", &pre, false, err, errlen);
        if (rc < 0) { moe_tokenizer_free(t); return rc; }
        const pre_def *d = NULL;
        for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++)
            if (pre_name_match(PRE_DEFS[i].names, pre.ptr, pre.len)) d = &PRE_DEFS[i];
        if (!d) {
            moe_tokenizer_free(t);
            return moe_errf(err, errlen, MOE_EUNSUPPORTED,
                            "%s: tokenizer.ggml.pre '%.*s' is not supported (known: default, gpt-2, olmo, qwen2, laguna, llama3/llama-bpe, dbrx, deepseek-v3, deepseek-llm, deepseek-coder, glm4, gpt-4o, kimi-k2)",
                            path, (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
        }
        t->ignore_merges = d->ignore_merges;
        rc = compile_pre(t, d, path, err, errlen);
        if (rc != MOE_OK) { moe_tokenizer_free(t); return rc; }
        t->add_space_prefix = false;
    }

    /* special-token candidates, longest first (ties by id) */
    int ns = 0;
    for (int i = 0; i < nv; i++)
        if (t->type[i] == TT_CONTROL || t->type[i] == TT_USER_DEFINED || t->type[i] == TT_UNKNOWN) ns++;
    t->special = malloc(sizeof(int32_t) * (size_t)(ns ? ns : 1));
    if (!t->special) { moe_tokenizer_free(t); return MOE_ENOMEM; }
    for (int i = 0; i < nv; i++)
        if (t->type[i] == TT_CONTROL || t->type[i] == TT_USER_DEFINED || t->type[i] == TT_UNKNOWN) {
            t->special[t->n_special++] = i;
            t->special_first[(uint8_t)t->text[t->text_off[i]]] = 1;
        }
    qsort_r(t->special, (size_t)t->n_special, sizeof(int32_t), cmp_special, t);

    if (build_pieces(t) != MOE_OK) { moe_tokenizer_free(t); return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path); }
    *out = t;
    return MOE_OK;
}

int moe_tokenizer_piece(const moe_tokenizer *t, int32_t id, bool show_special, const char **bytes, size_t *len) {
    if (id < 0 || id >= t->n_vocab) { *bytes = ""; *len = 0; return MOE_ERANGE; }
    int ty = t->type[id];
    if (!show_special && (ty == TT_CONTROL || ty == TT_UNKNOWN || ty == TT_UNUSED || ty == TT_UNDEFINED)) {
        *bytes = ""; *len = 0; return MOE_OK;
    }
    *bytes = t->piece + t->piece_off[id];
    *len = t->piece_len[id];
    return MOE_OK;
}

/* ------------------------------------------------------------------ */
/* encoding                                                            */

typedef struct ids_buf { int32_t *v; size_t n, cap; bool oom; } ids_buf;

static void ids_push(ids_buf *b, int32_t id) {
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        int32_t *nv = realloc(b->v, nc * sizeof *nv);
        if (!nv) { b->oom = true; return; }
        b->v = nv; b->cap = nc;
    }
    b->v[b->n++] = id;
}

typedef struct sym { int32_t id; int32_t prev, next; uint32_t start, len; } sym;
typedef struct bigram { float score; int32_t rank; int32_t left, right; uint32_t size; int32_t lid, rid, mid; } bigram;

/* Per-call scratch, sized to the text once per encode call. */
typedef struct scratch {
    sym *syms; size_t syms_cap;
    bigram *heap; size_t heap_n, heap_cap;
    char *buf; size_t buf_cap;      /* normalized text (BPE) or escaped text (SPM) */
    char *rxbuf; size_t rxbuf_cap;  /* regex subject when it differs */
    uint32_t *seg, *seg2; size_t seg_n, seg_cap, seg2_cap;
    char *word; size_t word_cap;    /* mapped word for ignore_merges lookups */
    pcre2_match_data *md;
    /* word cache: pre-tokenized words recur (Zipf), and a word's ids depend
     * only on its bytes, so each call remembers the short words it merged */
    struct wc_ent { uint64_t h; uint32_t boff, blen, ioff, nids; } *wc;
    uint32_t wc_mask, wc_used;
    char *wc_bytes; size_t wc_bn, wc_bcap;
    int32_t *wc_ids; size_t wc_in, wc_icap;
    int merge, sink;                /* MOE_TOK_MERGE_*, SINK_* */
    size_t n_fallback;
    /* the bucket queue (pq_*): pairs grouped by priority key */
    struct pq_ent { int32_t left, next; } *pe; size_t pe_n, pe_cap; int32_t pe_free;
    struct pq_bkt { uint32_t key; int32_t head, tail; } *bk; size_t bk_n, bk_cap;
    int32_t *bmap; size_t bmap_cap; uint32_t bmap_mask;
    int32_t *bheap; size_t bheap_n, bheap_cap;
    uint32_t *ord; size_t ord_cap;
    uint32_t pq_cur; bool pq_active, pq_fallback;
    bool oom;
} scratch;

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return false;
    *p = np; *cap = nc;
    return true;
}

/* BPE heap: smallest rank first, then leftmost. SPM: highest score first, then leftmost. */
static bool bg_before(const bigram *a, const bigram *b, bool spm) {
    if (spm) return a->score > b->score || (a->score == b->score && a->left < b->left);
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(scratch *s, bigram g, bool spm) {
    if (!grow((void **)&s->heap, &s->heap_cap, s->heap_n + 1, sizeof(bigram))) { s->oom = true; return; }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bg_before(&g, &s->heap[p], spm)) break;
        s->heap[i] = s->heap[p]; i = p;
    }
    s->heap[i] = g;
}

static bigram heap_pop(scratch *s, bool spm) {
    bigram top = s->heap[0];
    bigram last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bg_before(&s->heap[c + 1], &s->heap[c], spm)) c++;
        if (!bg_before(&s->heap[c], &last, spm)) break;
        s->heap[i] = s->heap[c]; i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* ---- pairs ----
 * A pair of adjacent symbols that some merge joins, built by make_pair and
 * handed to the current sink: the heap, the bucket queue, or nothing (the
 * naive reference scans for pairs itself). */
enum { SINK_HEAP, SINK_QUEUE };

static void pq_push(scratch *s, uint32_t key, int32_t left);

/* BPE key: the merge rank. SPM key: the score, highest first (an order-
 * preserving map of the float, inverted); -0 is 0 as for the heap's float
 * compare, and a NaN score has no place in either order (returns false). */
static bool spm_key(float f, uint32_t *key) {
    if (f != f) return false;
    if (f == 0) f = 0.0f;
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    *key = ~u;
    return true;
}

static bool bpe_make_pair(const moe_tokenizer *t, const scratch *s, int32_t l, int32_t r, bigram *g) {
    if (l < 0 || r < 0) return false;
    const sym *a = &s->syms[l], *b = &s->syms[r];
    if (a->id < 0 || b->id < 0) return false;
    const merge_ent *m = merge_lookup(t, a->id, b->id);
    if (!m) return false;
    *g = (bigram){0, m->rank, l, r, 0, a->id, b->id, m->id};
    return true;
}

static bool spm_make_pair(const moe_tokenizer *t, const scratch *s, const char *txt, int32_t l, int32_t r, bigram *g) {
    if (l < 0 || r < 0) return false;
    const sym *a = &s->syms[l], *b = &s->syms[r];
    int32_t id = text_lookup(t, txt + a->start, a->len + b->len);
    if (id < 0) return false;
    *g = (bigram){t->score[id], 0, l, r, a->len + b->len, 0, 0, id};
    return true;
}

static void bpe_try_pair(const moe_tokenizer *t, scratch *s, int32_t l, int32_t r) {
    bigram g;
    if (!bpe_make_pair(t, s, l, r, &g)) return;
    if (s->sink == SINK_QUEUE) pq_push(s, (uint32_t)g.rank, l);
    else heap_push(s, g, false);
}

static void spm_try_pair(const moe_tokenizer *t, scratch *s, const char *txt, int32_t l, int32_t r) {
    bigram g;
    if (!spm_make_pair(t, s, txt, l, r, &g)) return;
    uint32_t key;
    if (s->sink != SINK_QUEUE) heap_push(s, g, true);
    else if (spm_key(g.score, &key)) pq_push(s, key, l);
    else s->pq_fallback = true;
}

/* Merges pair g if it is still there (its symbols unchanged); offers the
 * two pairs the merge creates to the sink unless naive. */
static bool bpe_apply(const moe_tokenizer *t, scratch *s, const bigram *g, bool naive) {
    sym *a = &s->syms[g->left], *b = &s->syms[g->right];
    if (a->len == 0 || b->len == 0 || a->id != g->lid || b->id != g->rid || a->next != g->right) return false;
    a->id = g->mid;
    a->len += b->len;
    b->len = 0;
    a->next = b->next;
    if (b->next >= 0) s->syms[b->next].prev = g->left;
    if (naive) return true;
    bpe_try_pair(t, s, a->prev, g->left);
    bpe_try_pair(t, s, g->left, a->next);
    return true;
}

static bool spm_apply(const moe_tokenizer *t, scratch *s, const char *txt, const bigram *g, bool naive) {
    sym *a = &s->syms[g->left], *b = &s->syms[g->right];
    if (a->len == 0 || b->len == 0 || a->len + b->len != g->size) return false;
    a->len += b->len;
    b->len = 0;
    a->next = b->next;
    if (b->next >= 0) s->syms[b->next].prev = g->left;
    if (naive) return true;
    spm_try_pair(t, s, txt, a->prev, g->left);
    spm_try_pair(t, s, txt, g->left, a->next);
    return true;
}

/* ---- the bucket queue ----
 * The heap pops (key, left) one pair at a time; on a long word (1 MB of
 * spaces is a single pre-token) each pop walks ~20 cache-missing levels of a
 * heap of a million pairs. The queue instead groups the pending pairs by key
 * and merges one key's pairs in one left-to-right pass (sorted by position
 * when they were queued out of order). That is exactly the heap's order as
 * long as every pair a merge creates has a strictly later key than the key
 * being merged -- true of trained vocabularies, whose merges build on older
 * merges. A vocabulary that breaks it makes the queue give up (pq_fallback)
 * and the word is merged again by the heap, so the ids never depend on the
 * path taken (tests/test_tokenizer.c compares both with a naive scan). */

static void bheap_swap_up(scratch *s, size_t i) {
    int32_t v = s->bheap[i];
    uint32_t k = s->bk[v].key;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (s->bk[s->bheap[p]].key <= k) break;
        s->bheap[i] = s->bheap[p]; i = p;
    }
    s->bheap[i] = v;
}

static int32_t bheap_pop(scratch *s) {
    int32_t top = s->bheap[0], last = s->bheap[--s->bheap_n];
    size_t i = 0, n = s->bheap_n;
    uint32_t k = s->bk[last].key;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && s->bk[s->bheap[c + 1]].key < s->bk[s->bheap[c]].key) c++;
        if (s->bk[s->bheap[c]].key >= k) break;
        s->bheap[i] = s->bheap[c]; i = c;
    }
    if (n) s->bheap[i] = last;
    return top;
}

static uint32_t key_slot(uint32_t key, uint32_t mask) { return (uint32_t)hash_pair((int32_t)key, 0x51ed) & mask; }

static bool pq_map_resize(scratch *s, size_t slots) {
    if (!grow((void **)&s->bmap, &s->bmap_cap, slots, sizeof(int32_t))) return false;
    s->bmap_mask = (uint32_t)slots - 1;
    memset(s->bmap, 0xff, slots * sizeof(int32_t));
    for (size_t b = 0; b < s->bk_n; b++) {
        uint32_t i = key_slot(s->bk[b].key, s->bmap_mask);
        while (s->bmap[i] >= 0) i = (i + 1) & s->bmap_mask;
        s->bmap[i] = (int32_t)b;
    }
    return true;
}

static void pq_push(scratch *s, uint32_t key, int32_t left) {
    if (s->pq_active && key <= s->pq_cur) { s->pq_fallback = true; return; }
    uint32_t i = key_slot(key, s->bmap_mask);
    int32_t b;
    while ((b = s->bmap[i]) >= 0 && s->bk[b].key != key) i = (i + 1) & s->bmap_mask;
    if (b < 0) {
        if (!grow((void **)&s->bk, &s->bk_cap, s->bk_n + 1, sizeof *s->bk) ||
            !grow((void **)&s->bheap, &s->bheap_cap, s->bheap_n + 1, sizeof(int32_t))) { s->oom = true; return; }
        b = (int32_t)s->bk_n++;
        s->bk[b] = (struct pq_bkt){key, -1, -1};
        s->bmap[i] = b;
        s->bheap[s->bheap_n++] = b;
        bheap_swap_up(s, s->bheap_n - 1);
        if (s->bk_n * 2 > (size_t)s->bmap_mask + 1 && !pq_map_resize(s, ((size_t)s->bmap_mask + 1) * 2)) { s->oom = true; return; }
    }
    int32_t e;
    if (s->pe_free >= 0) { e = s->pe_free; s->pe_free = s->pe[e].next; }
    else {
        if (!grow((void **)&s->pe, &s->pe_cap, s->pe_n + 1, sizeof *s->pe)) { s->oom = true; return; }
        e = (int32_t)s->pe_n++;
    }
    s->pe[e] = (struct pq_ent){left, -1};
    if (s->bk[b].tail >= 0) s->pe[s->bk[b].tail].next = e;
    else s->bk[b].head = e;
    s->bk[b].tail = e;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* A queued entry is only a position: the pair now at `left` is merged when
 * its key is the bucket's. A pair found there that is not the one queued
 * still has its own entry at the same position in this bucket (every pair
 * is queued when it forms, and none forms with the key being merged), so the
 * merges are the same as if entries were checked against what they saw. */
static void pq_apply(const moe_tokenizer *t, scratch *s, bool spm, const char *txt, int32_t left) {
    const sym *a = &s->syms[left];
    if (a->len == 0 || a->next < 0) return;
    bigram g;
    uint32_t key;
    if (spm) {
        if (spm_make_pair(t, s, txt, left, a->next, &g) && spm_key(g.score, &key) && key == s->pq_cur)
            spm_apply(t, s, txt, &g, false);
    } else if (bpe_make_pair(t, s, left, a->next, &g) && (uint32_t)g.rank == s->pq_cur) {
        bpe_apply(t, s, &g, false);
    }
}

/* Merges syms[0..ns) through the queue; false when it gave up (or ran out of
 * memory: s->oom), leaving the symbols half merged. */
static bool pq_merge(const moe_tokenizer *t, scratch *s, bool spm, const char *txt, int32_t ns) {
    s->bk_n = s->pe_n = s->bheap_n = 0;
    s->pe_free = -1;
    s->pq_active = s->pq_fallback = false;
    if (!pq_map_resize(s, 64)) { s->oom = true; return false; }
    s->sink = SINK_QUEUE;
    for (int32_t i = 1; i < ns; i++) {
        if (spm) spm_try_pair(t, s, txt, i - 1, i);
        else bpe_try_pair(t, s, i - 1, i);
    }
    while (s->bheap_n && !s->pq_fallback && !s->oom) {
        int32_t b = bheap_pop(s);
        s->pq_cur = s->bk[b].key;
        s->pq_active = true;
        /* the bucket's positions in order: usually queued in order already */
        bool sorted = true;
        size_t k = 0;
        for (int32_t e = s->bk[b].head, prev = -1; e >= 0; prev = s->pe[e].left, e = s->pe[e].next, k++)
            if (s->pe[e].left < prev) sorted = false;
        if (sorted) {
            for (int32_t e = s->bk[b].head; e >= 0 && !s->pq_fallback && !s->oom; e = s->pe[e].next)
                pq_apply(t, s, spm, txt, s->pe[e].left);
        } else {
            if (!grow((void **)&s->ord, &s->ord_cap, k, sizeof(uint32_t))) { s->oom = true; break; }
            k = 0;
            for (int32_t e = s->bk[b].head; e >= 0; e = s->pe[e].next) s->ord[k++] = (uint32_t)s->pe[e].left;
            qsort(s->ord, k, sizeof(uint32_t), cmp_u32);
            for (size_t j = 0; j < k && !s->pq_fallback && !s->oom; j++) pq_apply(t, s, spm, txt, (int32_t)s->ord[j]);
        }
        if (s->bk[b].head >= 0) { /* the bucket's entries are free again */
            s->pe[s->bk[b].tail].next = s->pe_free;
            s->pe_free = s->bk[b].head;
            s->bk[b].head = s->bk[b].tail = -1;
        }
    }
    s->sink = SINK_HEAP;
    return !s->pq_fallback && !s->oom;
}

static void heap_merge(const moe_tokenizer *t, scratch *s, bool spm, const char *txt, int32_t ns) {
    s->heap_n = 0;
    s->sink = SINK_HEAP;
    for (int32_t i = 1; i < ns; i++) {
        if (spm) spm_try_pair(t, s, txt, i - 1, i);
        else bpe_try_pair(t, s, i - 1, i);
    }
    while (s->heap_n && !s->oom) {
        bigram g = heap_pop(s, spm);
        if (spm) spm_apply(t, s, txt, &g, false);
        else bpe_apply(t, s, &g, false);
    }
}

/* The reference: scan every adjacent pair for the best one, merge it,
 * repeat. O(n^2); tests only (MOE_TOK_MERGE_NAIVE). */
static void naive_merge(const moe_tokenizer *t, scratch *s, bool spm, const char *txt) {
    for (;;) {
        bigram best, g;
        bool have = false;
        for (int32_t i = 0; s->syms[i].next >= 0; i = s->syms[i].next) {
            bool ok = spm ? spm_make_pair(t, s, txt, i, s->syms[i].next, &g) : bpe_make_pair(t, s, i, s->syms[i].next, &g);
            if (ok && (!have || bg_before(&g, &best, spm))) { best = g; have = true; }
        }
        if (!have) return;
        if (spm) spm_apply(t, s, txt, &best, true);
        else bpe_apply(t, s, &best, true);
    }
}

/* Words shorter than this go through the heap, which is as fast there and
 * needs no table reset (see docs/TOKENIZER.md, "Scaling"). */
#define PQ_MIN_SYMS 256

/* Merges syms[0..ns) the way s->merge says; `init` rebuilds the unmerged
 * symbols when the queue gives up. */
static void merge_syms(const moe_tokenizer *t, scratch *s, bool spm, const char *txt, int32_t ns,
                       void (*init)(const moe_tokenizer *, scratch *, const char *, size_t), const char *w, size_t n) {
    if (s->merge == MOE_TOK_MERGE_NAIVE) { naive_merge(t, s, spm, txt); return; }
    if (s->merge == MOE_TOK_MERGE_QUEUE || (s->merge == MOE_TOK_MERGE_AUTO && !spm && ns >= PQ_MIN_SYMS)) {
        if (pq_merge(t, s, spm, txt, ns) || s->oom) return;
        s->n_fallback++;
        init(t, s, w, n);
    }
    heap_merge(t, s, spm, txt, ns);
}

static void bpe_word_merge(const moe_tokenizer *t, scratch *s, const char *w, size_t n, ids_buf *out);

#define WC_MAX_WORD 64
#define WC_SLOTS (1u << 15)

/* One pre-tokenized word (bytes w[0..n) of the normalized text), through the
 * per-call word cache. */
static void bpe_word(const moe_tokenizer *t, scratch *s, const char *w, size_t n, ids_buf *out) {
    if (n < 2 || n > WC_MAX_WORD || s->merge != MOE_TOK_MERGE_AUTO) { bpe_word_merge(t, s, w, n, out); return; }
    if (!s->wc) {
        s->wc = calloc(WC_SLOTS, sizeof *s->wc);
        if (!s->wc) { bpe_word_merge(t, s, w, n, out); return; }
        s->wc_mask = WC_SLOTS - 1;
    }
    uint64_t h = hash_bytes(w, n);
    uint32_t i = (uint32_t)h & s->wc_mask;
    for (; s->wc[i].blen; i = (i + 1) & s->wc_mask) {
        const struct wc_ent *e = &s->wc[i];
        if (e->h == h && e->blen == n && !memcmp(s->wc_bytes + e->boff, w, n)) {
            for (uint32_t k = 0; k < e->nids; k++) ids_push(out, s->wc_ids[e->ioff + k]);
            return;
        }
    }
    size_t start = out->n;
    bpe_word_merge(t, s, w, n, out);
    size_t nids = out->n - start;
    if (out->oom || s->wc_used >= WC_SLOTS / 2) return; /* full: keep what is there */
    if (!grow((void **)&s->wc_bytes, &s->wc_bcap, s->wc_bn + n, 1) ||
        !grow((void **)&s->wc_ids, &s->wc_icap, s->wc_in + nids, sizeof(int32_t)))
        return; /* the cache is optional */
    memcpy(s->wc_bytes + s->wc_bn, w, n);
    memcpy(s->wc_ids + s->wc_in, out->v + start, nids * sizeof(int32_t));
    s->wc[i] = (struct wc_ent){h, (uint32_t)s->wc_bn, (uint32_t)n, (uint32_t)s->wc_in, (uint32_t)nids};
    s->wc_bn += n;
    s->wc_in += nids;
    s->wc_used++;
}

/* One symbol per byte of w (its mapped char's token, -1 if none). */
static void bpe_init_syms(const moe_tokenizer *t, scratch *s, const char *w, size_t n) {
    for (size_t i = 0; i < n; i++)
        s->syms[i] = (sym){t->byte_tok[(uint8_t)w[i]], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1, (uint32_t)i, 1};
}

static void bpe_word_merge(const moe_tokenizer *t, scratch *s, const char *w, size_t n, ids_buf *out) {
    if (t->ignore_merges) {
        if (!grow((void **)&s->word, &s->word_cap, n * 2 + 1, 1)) { s->oom = true; return; }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += utf8_put(gpt2_byte_cp((uint8_t)w[i]), s->word + k);
        int32_t id = text_lookup(t, s->word, k);
        if (id >= 0) { ids_push(out, id); return; }
    }
    if (n == 1) { /* common fast path: a single byte */
        int32_t id = t->byte_tok[(uint8_t)w[0]];
        if (id >= 0) { ids_push(out, id); return; }
    }
    if (!grow((void **)&s->syms, &s->syms_cap, n, sizeof(sym))) { s->oom = true; return; }
    bpe_init_syms(t, s, w, n);
    merge_syms(t, s, false, NULL, (int32_t)n, bpe_init_syms, w, n);
    if (s->oom) return;
    for (int32_t i = 0; i >= 0; i = s->syms[i].next) {
        const sym *y = &s->syms[i];
        if (y->id >= 0) { ids_push(out, y->id); continue; }
        /* a byte whose mapped char is not a token: llama.cpp then looks up
         * each byte of the mapped char's UTF-8 as a one-byte token */
        char m[4];
        size_t k = utf8_put(gpt2_byte_cp((uint8_t)w[y->start]), m);
        for (size_t j = 0; j < k; j++) {
            int32_t id = text_lookup(t, m + j, 1);
            if (id >= 0) ids_push(out, id);
        }
    }
}

/* Normalizes a raw fragment the way llama.cpp's unicode_cpts_from_utf8 +
 * re-encoding does (see docs/TOKENIZER.md) into s->buf, and builds the
 * regex subject s->rxbuf (same byte length): surrogates -> U+E000, U+0085 ->
 * U+00A0 (whitespace to llama.cpp, not to PCRE2), U+180E -> U+200B (PCRE2's
 * \h lists U+180E; llama.cpp's tables make it a control character, as
 * U+200B is to both), CJK Extension I U+2EBF0..U+2EE5D -> U+10000 (Unicode
 * 15.1's ideographs: letters (Lo) to llama.cpp's tables, unassigned to
 * Debian's PCRE2 10.42; U+10000 is a Lo letter of the same UTF-8 length in
 * no range any expression names, Kimi's Han list included, which stops
 * before Extension I as llama.cpp's does), so PCRE2's classes agree with
 * llama.cpp's. Returns the length;
 * *rx points to the subject (the text itself when nothing changed). */
/* The code point the regex subject carries in cp's place (above), or 0: cp itself. */
static uint32_t rx_stand_in(uint32_t cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0xE000;
    if (cp == 0x85) return 0xA0;
    if (cp == 0x180E) return 0x200B;
    if (cp >= 0x2EBF0 && cp <= 0x2EE5D) return 0x10000;   /* CJK Extension I */
    return 0;
}

static size_t bpe_normalize(scratch *s, const char *text, size_t len, const char **norm, const char **rx) {
    const uint8_t *p = (const uint8_t *)text;
    size_t i = 0;
    bool clean = true;
    while (i < len) {
        if (p[i] < 0x80) { i++; continue; }
        uint32_t cp; size_t adv;
        if (!utf8_dec_lenient(p + i, len - i, &cp, &adv) || utf8_len_canon(cp) != adv ||
            rx_stand_in(cp)) { clean = false; break; }
        i += adv;
    }
    if (clean) { *norm = text; *rx = text; return len; }
    if (!grow((void **)&s->buf, &s->buf_cap, len * 3 + 1, 1) || !grow((void **)&s->rxbuf, &s->rxbuf_cap, len * 3 + 1, 1)) {
        s->oom = true; *norm = *rx = text; return 0;
    }
    size_t o = 0;
    for (i = 0; i < len;) {
        uint32_t cp; size_t adv;
        if (!utf8_dec_lenient(p + i, len - i, &cp, &adv)) cp = 0xFFFD; /* adv = 1 */
        size_t k = utf8_put(cp, s->buf + o);
        const uint32_t sub = rx_stand_in(cp);
        if (sub) utf8_put(sub, s->rxbuf + o);
        else memcpy(s->rxbuf + o, s->buf + o, k);
        o += k; i += adv;
    }
    *norm = s->buf; *rx = s->rxbuf;
    return o;
}

static void seg_push(scratch *s, uint32_t a, uint32_t b, size_t *n) {
    if (!grow((void **)&s->seg2, &s->seg2_cap, (*n + 1) * 2, sizeof(uint32_t))) { s->oom = true; return; }
    s->seg2[2 * *n] = a; s->seg2[2 * *n + 1] = b; (*n)++;
}

/* The pre-tokenizer's pieces of one fragment, as (start, end) pairs into
 * the normalized text *norm: s->seg[0 .. 2 * s->seg_n). */
static void bpe_pretokenize(const moe_tokenizer *t, scratch *s, const char *text, size_t len, const char **norm) {
    const char *rx;
    s->seg_n = 0;
    size_t n = bpe_normalize(s, text, len, norm, &rx);
    if (s->oom || n == 0) return;
    /* segments as (start, end) pairs; each regex splits every segment of the
     * previous one, unmatched gaps becoming pieces too (llama.cpp's
     * unicode_regex_split) */
    if (!grow((void **)&s->seg, &s->seg_cap, 2, sizeof(uint32_t))) { s->oom = true; return; }
    s->seg[0] = 0; s->seg[1] = (uint32_t)n; s->seg_n = 1;
    for (int r = 0; r < t->n_re && !s->oom; r++) {
        size_t n2 = 0;
        for (size_t k = 0; k < s->seg_n && !s->oom; k++) {
            uint32_t a = s->seg[2 * k], b = s->seg[2 * k + 1];
            PCRE2_SPTR subj = (PCRE2_SPTR)(rx + a);
            size_t sl = b - a, pos = 0, gap = 0;
            while (pos < sl) {
                int rc = pcre2_match(t->re[r], subj, sl, pos, PCRE2_NO_UTF_CHECK, s->md, NULL);
                if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT)
                    rc = pcre2_match(t->re[r], subj, sl, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, s->md, NULL);
                if (rc < 0) break; /* no further match (or a resource limit): the rest is one piece */
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
                size_t ms = ov[0], me = ov[1];
                if (me <= ms) { /* empty match: impossible with these patterns; step one char */
                    pos = ms + 1;
                    while (pos < sl && ((uint8_t)subj[pos] & 0xC0) == 0x80) pos++;
                    continue;
                }
                if (ms > gap) seg_push(s, a + (uint32_t)gap, a + (uint32_t)ms, &n2);
                seg_push(s, a + (uint32_t)ms, a + (uint32_t)me, &n2);
                gap = pos = me;
            }
            if (gap < sl) seg_push(s, a + (uint32_t)gap, b, &n2);
        }
        uint32_t *sw = s->seg; s->seg = s->seg2; s->seg2 = sw;
        size_t cw = s->seg_cap; s->seg_cap = s->seg2_cap; s->seg2_cap = cw;
        s->seg_n = n2;
    }
}

static void bpe_fragment(const moe_tokenizer *t, scratch *s, const char *text, size_t len, ids_buf *out) {
    const char *norm;
    bpe_pretokenize(t, s, text, len, &norm);
    for (size_t k = 0; k < s->seg_n && !s->oom; k++)
        bpe_word(t, s, norm + s->seg[2 * k], s->seg[2 * k + 1] - s->seg[2 * k], out);
}

/* ---- SPM ---- */

static int32_t spm_lookup(const moe_tokenizer *t, const char *s, size_t n) { return text_lookup(t, s, n); }

/* One symbol per UTF-8 character of txt (by lead byte, as llama.cpp). */
static int32_t spm_init_syms(scratch *s, const char *txt, size_t n) {
    static const uint8_t lenlut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    int32_t ns = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = lenlut[(uint8_t)txt[i] >> 4];
        if (cl > n - i) cl = n - i;
        s->syms[ns] = (sym){-1, ns - 1, -1, (uint32_t)i, (uint32_t)cl};
        if (ns > 0) s->syms[ns - 1].next = ns;
        ns++; i += cl;
    }
    return ns;
}

static void spm_reinit(const moe_tokenizer *t, scratch *s, const char *txt, size_t n) { spm_init_syms(s, txt, n); }

static void spm_fragment(const moe_tokenizer *t, scratch *s, const char *text, size_t len, bool prefix_space, ids_buf *out) {
    size_t cap = (len + 1) * 3 + 1;
    if (!grow((void **)&s->buf, &s->buf_cap, cap, 1)) { s->oom = true; return; }
    size_t n = 0;
    if (prefix_space) { memcpy(s->buf, "\xE2\x96\x81", 3); n = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(s->buf + n, "\xE2\x96\x81", 3); n += 3; }
        else s->buf[n++] = text[i];
    }
    const char *txt = s->buf;
    if (!grow((void **)&s->syms, &s->syms_cap, n, sizeof(sym))) { s->oom = true; return; }
    int32_t ns = spm_init_syms(s, txt, n);
    if (ns == 0) return;
    merge_syms(t, s, true, txt, ns, spm_reinit, txt, n);
    if (s->oom) return;
    for (int32_t i = 0; i >= 0; i = s->syms[i].next) {
        const sym *y = &s->syms[i];
        int32_t id = spm_lookup(t, txt + y->start, y->len);
        if (id >= 0) { ids_push(out, id); continue; }
        for (uint32_t j = 0; j < y->len; j++) { /* byte fallback */
            int32_t bid = t->byte_tok[(uint8_t)txt[y->start + j]];
            if (bid < 0) bid = t->unk;
            if (bid >= 0) ids_push(out, bid);
        }
    }
}

/* ---- special-token partition ---- */

typedef struct occ { uint32_t pos; int32_t rank; } occ; /* rank: index into t->special */

static int cmp_occ(const void *a, const void *b) {
    const occ *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static int cmp_occ_pos(const void *a, const void *b) {
    const occ *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* Finds the special tokens llama.cpp's tokenizer_st_partition would cut out:
 * tokens longest first, each one's leftmost non-overlapping occurrences in
 * the text not yet taken by a longer token. Returns the taken occurrences
 * sorted by position in *res (malloc'd), their count in *nres. */
static bool find_specials(const moe_tokenizer *t, const char *text, size_t len, bool parse_special, occ **res, size_t *nres) {
    *res = NULL; *nres = 0;
    if (!t->n_special) return true;
    occ *c = NULL; size_t nc = 0, cc = 0;
    for (size_t p = 0; p < len; p++) {
        if (!t->special_first[(uint8_t)text[p]]) continue;
        for (int k = 0; k < t->n_special; k++) {
            int32_t id = t->special[k];
            uint32_t sl = t->text_len[id];
            if (sl > len - p || (uint8_t)t->text[t->text_off[id]] != (uint8_t)text[p]) continue;
            if (!parse_special && t->type[id] != TT_USER_DEFINED) continue;
            if (memcmp(t->text + t->text_off[id], text + p, sl) != 0) continue;
            if (!grow((void **)&c, &cc, nc + 1, sizeof(occ))) { free(c); return false; }
            c[nc++] = (occ){(uint32_t)p, k};
        }
    }
    if (!nc) { free(c); return true; }
    qsort(c, nc, sizeof(occ), cmp_occ);
    uint8_t *cov = calloc(len, 1);
    if (!cov) { free(c); return false; }
    size_t nt = 0;
    int32_t cur = -1; size_t last_end = 0;
    for (size_t i = 0; i < nc; i++) {
        if (c[i].rank != cur) { cur = c[i].rank; last_end = 0; }
        uint32_t sl = t->text_len[t->special[c[i].rank]];
        if (c[i].pos < last_end) continue;
        bool free_span = true;
        for (uint32_t j = 0; j < sl; j++) if (cov[c[i].pos + j]) { free_span = false; break; }
        if (!free_span) continue;
        memset(cov + c[i].pos, 1, sl);
        last_end = c[i].pos + sl;
        c[nt++] = c[i];
    }
    free(cov);
    qsort(c, nt, sizeof(occ), cmp_occ_pos);
    *res = c; *nres = nt;
    return true;
}

int moe_tokenizer_pretokenize(const moe_tokenizer *t, const char *text, size_t len, uint32_t *ends, size_t cap,
                              size_t *n_out, char *err, size_t errlen) {
    if (n_out) *n_out = 0;
    if (!t || (!text && len) || (!ends && cap) || !n_out)
        return moe_errf(err, errlen, MOE_EINVAL, "pretokenize: invalid arguments");
    if (t->kind != KIND_BPE)
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "pretokenize: only gpt2 (BPE) vocabularies have a pre-tokenizer");
    if (len > 0xffffffffu)
        return moe_errf(err, errlen, MOE_EINVAL, "pretokenize: text of %zu bytes is too long", len);
    scratch s = {0};
    s.md = pcre2_match_data_create(1, NULL);
    const char *norm = NULL;
    if (!s.md) s.oom = true;
    else bpe_pretokenize(t, &s, text, len, &norm);
    bool oom = s.oom;
    if (!oom) {
        for (size_t k = 0; k < s.seg_n && k < cap; k++) ends[k] = s.seg[2 * k + 1];
        *n_out = s.seg_n;
    }
    free(s.buf); free(s.rxbuf); free(s.seg); free(s.seg2);
    pcre2_match_data_free(s.md);
    return oom ? moe_errf(err, errlen, MOE_ENOMEM, "pretokenize: out of memory (%zu bytes of text)", len) : MOE_OK;
}

int moe_tokenizer_encode(const moe_tokenizer *t, const char *text, size_t len, bool add_bos,
                         bool parse_special, int32_t *ids, size_t cap, size_t *n_out,
                         char *err, size_t errlen) {
    return moe_tokenizer_encode_merge(t, NULL, text, len, add_bos, parse_special, ids, cap, n_out, err, errlen);
}

int moe_tokenizer_encode_merge(const moe_tokenizer *t, moe_tok_merge *how, const char *text, size_t len, bool add_bos,
                               bool parse_special, int32_t *ids, size_t cap, size_t *n_out,
                               char *err, size_t errlen) {
    if (n_out) *n_out = 0;
    if (!t || (!text && len) || (!ids && cap) || !n_out)
        return moe_errf(err, errlen, MOE_EINVAL, "tokenize: invalid arguments");
    if (len > 0xffffffffu) /* offsets inside the encoder are 32-bit */
        return moe_errf(err, errlen, MOE_EINVAL, "tokenize: text of %zu bytes is too long (at most 4 GiB - 1 per call)", len);
    ids_buf out = {0};
    scratch s = {0};
    s.merge = how ? how->merge : MOE_TOK_MERGE_AUTO;
    occ *sp = NULL; size_t nsp = 0;
    if (add_bos && t->bos >= 0) ids_push(&out, t->bos);
    if (len && !find_specials(t, text, len, parse_special, &sp, &nsp)) s.oom = true;
    if (t->kind == KIND_BPE) {
        s.md = pcre2_match_data_create(1, NULL);
        if (!s.md) s.oom = true;
    }
    size_t pos = 0;
    bool prev_special = true; /* SPM: a space prefix at the start and after specials */
    for (size_t k = 0; k <= nsp && !s.oom; k++) {
        size_t end = k < nsp ? sp[k].pos : len;
        if (end > pos) {
            if (t->kind == KIND_BPE) bpe_fragment(t, &s, text + pos, end - pos, &out);
            else spm_fragment(t, &s, text + pos, end - pos, t->add_space_prefix && prev_special, &out);
            prev_special = false;
        }
        if (k < nsp) {
            int32_t id = t->special[sp[k].rank];
            ids_push(&out, id);
            pos = sp[k].pos + t->text_len[id];
            prev_special = true;
        }
    }
    free(sp);
    free(s.syms); free(s.heap); free(s.buf); free(s.rxbuf); free(s.seg); free(s.seg2); free(s.word);
    free(s.wc); free(s.wc_bytes); free(s.wc_ids);
    free(s.pe); free(s.bk); free(s.bmap); free(s.bheap); free(s.ord);
    if (how) how->n_fallback = s.n_fallback;
    if (s.md) pcre2_match_data_free(s.md);
    if (s.oom || out.oom) {
        free(out.v);
        return moe_errf(err, errlen, MOE_ENOMEM, "tokenize: out of memory (%zu bytes of text)", len);
    }
    size_t m = out.n < cap ? out.n : cap;
    if (m) memcpy(ids, out.v, m * sizeof(int32_t));
    *n_out = out.n;
    free(out.v);
    return MOE_OK;
}

/* ------------------------------------------------------------------ */
/* streaming UTF-8 output (public API, include/moefast.h)              */

struct moe_utf8_stream { unsigned char pend[4]; int n_pend; };

static size_t put_fffd(char *o) { o[0] = (char)0xEF; o[1] = (char)0xBF; o[2] = (char)0xBD; return 3; }

moe_utf8_stream *moe_utf8_stream_new(void) { return calloc(1, sizeof(moe_utf8_stream)); }
void moe_utf8_stream_free(moe_utf8_stream *u) { free(u); }

/* Total length of a sequence from its lead byte; 0 for a byte that cannot start one. */
static int lead_len(uint8_t b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* Whether b may follow the pending bytes (Unicode table 3-7 ranges). */
static bool cont_ok(const unsigned char *pend, int n, uint8_t b) {
    if (n == 1) {
        switch (pend[0]) {
        case 0xE0: return b >= 0xA0 && b <= 0xBF;
        case 0xED: return b >= 0x80 && b <= 0x9F;
        case 0xF0: return b >= 0x90 && b <= 0xBF;
        case 0xF4: return b >= 0x80 && b <= 0x8F;
        default: break;
        }
    }
    return b >= 0x80 && b <= 0xBF;
}

/* Output is staged through a small local buffer so that a short `out`
 * never overflows: bytes beyond cap are dropped (cap >= 4 * len + 4 always
 * suffices; each input byte yields at most 3 bytes, plus 3 for a pending
 * sequence turned into U+FFFD). */
size_t moe_utf8_stream_push(moe_utf8_stream *s, const char *bytes, size_t len, char *out, size_t cap) {
    size_t o = 0;
    char tmp[8];
    for (size_t i = 0; i < len; i++) {
        uint8_t b = (uint8_t)bytes[i];
        size_t k = 0;
        if (s->n_pend > 0) {
            if (cont_ok(s->pend, s->n_pend, b)) {
                s->pend[s->n_pend++] = b;
                if (s->n_pend == lead_len(s->pend[0])) {
                    k = (size_t)s->n_pend;
                    memcpy(tmp, s->pend, k);
                    s->n_pend = 0;
                }
                goto emit;
            }
            /* the pending bytes are a maximal invalid subpart: one U+FFFD,
             * then b starts afresh */
            k += put_fffd(tmp);
            s->n_pend = 0;
        }
        {
            int l = lead_len(b);
            if (l == 1) tmp[k++] = (char)b;
            else if (l == 0) k += put_fffd(tmp + k);
            else { s->pend[0] = b; s->n_pend = 1; }
        }
    emit:
        if (k > cap - o) k = cap - o;
        memcpy(out + o, tmp, k);
        o += k;
    }
    return o;
}

size_t moe_utf8_stream_flush(moe_utf8_stream *s, char *out, size_t cap) {
    if (s->n_pend == 0) return 0;
    s->n_pend = 0;
    char tmp[3];
    size_t k = put_fffd(tmp);
    if (k > cap) k = cap;
    memcpy(out, tmp, k);
    return k;
}
