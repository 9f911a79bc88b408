/* test_grammar.c — the grammar engine: GBNF parse errors with positions,
 * strings accepted and rejected, JSON Schema keywords (each accepted and
 * rejected), masks equal to a brute-force walk of every token, masked
 * sampling (greedy is the argmax over the allowed tokens), limits. */
#include <math.h>
#include <stdarg.h>
#include <jansson.h>
#include "check.h"
#include "moefast.h"
#include "text/grammar.h"
#include "base/util.h"

static char g_err[MOE_ERR_LEN];

/* A vocabulary of every single byte (ids 0..255), an end token (256) and a
 * control token (257): strings are fed byte by byte. */
static moe_grammar_vocab *byte_vocab(void) {
    static char b[256];
    const char *p[258];
    size_t l[258];
    uint8_t k[258];
    for (int i = 0; i < 256; i++) { b[i] = (char)i; p[i] = &b[i]; l[i] = 1; k[i] = GV_BYTES; }
    p[256] = p[257] = ""; l[256] = l[257] = 0; k[256] = GV_EOG; k[257] = GV_NEVER;
    moe_grammar_vocab *v = NULL;
    CHECK(moe_grammar_vocab_from_pieces(258, p, l, k, &v, g_err, sizeof g_err) == MOE_OK);
    return v;
}

static moe_grammar_vocab *BV;

/* 1: s is a complete sentence, 0: a valid prefix only, -1: not a prefix. */
static int match_g(const moe_grammar *g, const char *s) {
    moe_constraint *c = NULL;
    if (moe_constraint_new(g, BV, &c, g_err, sizeof g_err)) return -2;
    int r = moe_constraint_accept_bytes(c, s, strlen(s)) ? -1 : moe_constraint_accepting(c) ? 1 : 0;
    moe_constraint_free(c);
    return r;
}

static int match(const char *gbnf, const char *s) {
    moe_grammar *g = NULL;
    if (moe_grammar_parse(gbnf, strlen(gbnf), NULL, &g, g_err, sizeof g_err)) {
        fprintf(stderr, "parse: %s\n", g_err);
        return -3;
    }
    int r = match_g(g, s);
    moe_grammar_free(g);
    return r;
}

static void test_parse_errors(void) {
    static const struct { const char *g, *msg; } cases[] = {
        {"root ::= foo", "grammar:1:10: undefined rule 'foo'"},
        {"root ::= \"abc", "grammar:1:10: unterminated string literal"},
        {"root ::= [a-", "grammar:1:10: unterminated character class"},
        {"root := \"x\"", "grammar:1:6: expected '::='"},
        {"root ::= x\nx ::= x \"a\"", "left recursion: rule 'x'"},
        {"root ::= y\ny ::= z? y \"b\"\nz ::= \"a\"", "left recursion: rule 'y'"},
        {"root ::= (\"a\"", "grammar:1:14: expected ')'"},
        {"root ::= \"a\" )", "grammar:1:14: unmatched ')'"},
        {"root ::= *", "grammar:1:10: '*' has nothing before it"},
        {"root ::= \"a\"{3,1}", "grammar:1:13: repetition {3,1}: max below min"},
        {"a ::= \"x\"", "no rule named 'root'"},
        {"root ::= \"\\q\"", "grammar:1:11: unknown escape '\\q'"},
        {"root ::= [z-a]", "grammar:1:12: range end U+61 is below its start U+7A"},
        {"root ::= \"a\"\n\nroot ::= \"b\"", "grammar:3:1: rule 'root' is defined twice"},
        {"root ::= \"a\"{100001}", "grammar:1:14: repetition count above 100000"},
        {"root ::= []", "grammar:1:10: empty character class"},
        {"root ::= <tok>", "token references by text (<...>) are not supported; name the token by id: <[ID]>"},
        {"root ::= \"\\xZZ\"", "needs 2 hex digits"},
        {"root ::= \"a\" x ::= \"b\"", "grammar:1:16: unexpected ':'"},
        {"", "no rule named 'root'"},
        {"root ::= (\"a\"?)* \"b\"", "a group or repetition in rule 'root' can repeat without consuming input"},
        {"root ::= [a]{0,100000} [b]{0,100000} [c]{0,100000} [d]{0,100000} [e]{0,100000} [f]{0,100000}",
         "grammar too large"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        moe_grammar *g = NULL;
        int rc = moe_grammar_parse(cases[i].g, strlen(cases[i].g), NULL, &g, g_err, sizeof g_err);
        CHECK_MSG(rc != MOE_OK && !g, "case %zu parsed", i);
        CHECK_STR_CONTAINS(g_err, cases[i].msg);
        CHECK_MSG(!strchr(g_err, '\n'), "case %zu: message has a newline", i);
        moe_grammar_free(g);
    }
}

static void test_gbnf_match(void) {
    CHECK_EQ_INT(match("root ::= \"abc\"", "abc"), 1);
    CHECK_EQ_INT(match("root ::= \"abc\"", "ab"), 0);
    CHECK_EQ_INT(match("root ::= \"abc\"", "abd"), -1);
    CHECK_EQ_INT(match("root ::= \"abc\"", "abcd"), -1);
    CHECK_EQ_INT(match("root ::= \"a\" | \"b\" \"c\"", "bc"), 1);
    CHECK_EQ_INT(match("root ::= \"a\" | \"b\" \"c\"", "ac"), -1);
    CHECK_EQ_INT(match("root ::= [a-c]+", "abcabc"), 1);
    CHECK_EQ_INT(match("root ::= [a-c]+", ""), 0);
    CHECK_EQ_INT(match("root ::= [a-c]*", ""), 1);
    CHECK_EQ_INT(match("root ::= [a-c]+", "abd"), -1);
    CHECK_EQ_INT(match("root ::= [^a-c]+", "xyz"), 1);
    CHECK_EQ_INT(match("root ::= [^a-c]+", "xaz"), -1);
    CHECK_EQ_INT(match("root ::= \"x\"?  \"y\"", "y"), 1);
    CHECK_EQ_INT(match("root ::= \"x\"?  \"y\"", "xy"), 1);
    CHECK_EQ_INT(match("root ::= \"x\"?  \"y\"", "xxy"), -1);
    CHECK_EQ_INT(match("root ::= \"ab\"{2,3}", "ab"), 0);
    CHECK_EQ_INT(match("root ::= \"ab\"{2,3}", "abab"), 1);
    CHECK_EQ_INT(match("root ::= \"ab\"{2,3}", "ababab"), 1);
    CHECK_EQ_INT(match("root ::= \"ab\"{2,3}", "abababa"), -1);
    CHECK_EQ_INT(match("root ::= [0-9]{3}", "123"), 1);
    CHECK_EQ_INT(match("root ::= [0-9]{3}", "1234"), -1);
    CHECK_EQ_INT(match("root ::= [0-9]{2,}", "1"), 0);
    CHECK_EQ_INT(match("root ::= [0-9]{2,}", "12345678"), 1);
    CHECK_EQ_INT(match("root ::= ( \"a\" | \"b\" )* \"c\"", "ababbc"), 1);
    CHECK_EQ_INT(match("root ::= ( \"a\" | \"b\" )* \"c\"", "abcb"), -1);
    CHECK_EQ_INT(match("root ::= \"\\n\\t\\\\\\\"\\x41\\u00e9\"", "\n\t\\\"A\xc3\xa9"), 1);
    /* code points: classes match whole UTF-8 characters, nothing else */
    CHECK_EQ_INT(match("root ::= [α-ω]+", "αβγ"), 1);
    CHECK_EQ_INT(match("root ::= [α-ω]+", "αb"), -1);
    CHECK_EQ_INT(match("root ::= [α-ω]+", "\xce"), 0);           /* half a character: a prefix */
    CHECK_EQ_INT(match("root ::= [^a]", "\xe2\x82\xac"), 1);      /* U+20AC */
    CHECK_EQ_INT(match("root ::= [^a]", "\xf0\x9f\x98\x80"), 1);  /* U+1F600 */
    CHECK_EQ_INT(match("root ::= [^a]", "\xed\xa0\x80"), -1);     /* a surrogate: not UTF-8 */
    CHECK_EQ_INT(match("root ::= [^a]", "\xc0\xaf"), -1);         /* overlong */
    CHECK_EQ_INT(match("root ::= [^a]", "\xff"), -1);
    CHECK_EQ_INT(match("root ::= .+", "a\xc3\xa9\xe4\xb8\xad"), 1);
    CHECK_EQ_INT(match("root ::= [\\u4e00-\\u9fff]", "\xe4\xb8\xad"), 1);
    CHECK_EQ_INT(match("root ::= [\\u4e00-\\u9fff]", "\xe3\x81\x82"), -1);
    /* rules, recursion, comments, continuation lines */
    const char *arith =
        "# arithmetic\n"
        "root ::= expr\n"
        "expr ::= term ((\"+\" | \"-\") term)*\n"
        "term ::= num | \"(\" expr \")\"   # nested\n"
        "num  ::= [0-9]+\n";
    CHECK_EQ_INT(match(arith, "1+(2-3)+((4))"), 1);
    CHECK_EQ_INT(match(arith, "1+(2-3"), 0);
    CHECK_EQ_INT(match(arith, "1+)"), -1);
    const char *multi =
        "root ::=\n"
        "  \"{\" (\n"
        "     \"a\"\n"
        "     | \"b\"\n"
        "  ) \"}\"\n"
        "  | \"x\"\n"
        "ws ::= | \" \"\n";
    CHECK_EQ_INT(match(multi, "{b}"), 1);
    CHECK_EQ_INT(match(multi, "x"), 1);
    CHECK_EQ_INT(match(multi, "{c}"), -1);
    /* an empty alternative first, names with - and _, a call without space */
    CHECK_EQ_INT(match("root ::= my-ws_1 f(\"x\")\nmy-ws_1 ::= | \" \"\nf ::= \"f\"", " fx"), 1);
    /* another start rule */
    moe_grammar *g = NULL;
    CHECK(moe_grammar_parse("a ::= \"1\"\nb ::= \"2\"", 19, "b", &g, g_err, sizeof g_err) == MOE_OK);
    if (g) { CHECK_EQ_INT(match_g(g, "2"), 1); CHECK_EQ_INT(match_g(g, "1"), -1); }
    moe_grammar_free(g);
}

/* A growing text for generated grammars (NULL p after a failed allocation). */
typedef struct { char *p; size_t n, cap; } tbuf_t;

static void tb_catf(tbuf_t *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp) { free(b->p); *b = (tbuf_t){0}; return; }
    if (b->n + (size_t)k + 1 > b->cap) {
        const size_t nc = (b->cap ? b->cap * 2 : 4096) + (size_t)k;
        char *np = realloc(b->p, nc);
        if (!np) { free(b->p); *b = (tbuf_t){0}; return; }
        b->p = np; b->cap = nc;
    }
    memcpy(b->p + b->n, tmp, (size_t)k + 1);
    b->n += (size_t)k;
}
#define tb_cat(b, s) tb_catf((b), "%s", (s))

/* Many rules, referred to before they are defined, with names that are
 * prefixes of one another (r1000, r100, r10, r1: the longer first): each
 * reference finds its own rule through the parser's name index as it grows
 * (Kimi-K2's parallel tool calls refer to thousands); a rule defined twice
 * and an undefined one are still found among them. */
static void test_many_rules(void) {
    enum { NR = 3000 };
    tbuf_t b = {0};
    tb_cat(&b, "root ::= (");
    for (int i = NR - 1; i >= 0; i--) tb_catf(&b, "%s \"%d:\" r%d", i < NR - 1 ? " |" : "", i, i);
    tb_cat(&b, ")\n");
    for (int i = 0; i < NR; i++) tb_catf(&b, "r%d ::= \"<%d>\"\n", i, i);
    CHECK(b.p != NULL);
    if (!b.p) return;
    moe_grammar *g = NULL;
    CHECK(moe_grammar_parse(b.p, b.n, NULL, &g, g_err, sizeof g_err) == MOE_OK);
    CHECK(g && g->n_rules == NR + 2);                 /* root, its group, r0..r2999 */
    static const int probe[] = {0, 1, 10, 100, 1000, 2999, 17, 170, 1700, 299};
    for (size_t i = 0; g && i < sizeof probe / sizeof probe[0]; i++) {
        char ok[32], no[32];
        snprintf(ok, sizeof ok, "%d:<%d>", probe[i], probe[i]);
        snprintf(no, sizeof no, "%d:<%d0>", probe[i], probe[i]);
        CHECK_MSG(match_g(g, ok) == 1, "%s", ok);
        CHECK_MSG(match_g(g, no) == -1, "%s", no);
    }
    moe_grammar_free(g);
    g = NULL;
    tb_cat(&b, "r1234 ::= \"again\"\n");
    CHECK(moe_grammar_parse(b.p, b.n, NULL, &g, g_err, sizeof g_err) != MOE_OK && !g);
    CHECK_STR_CONTAINS(g_err, "rule 'r1234' is defined twice");
    b.n -= strlen("r1234 ::= \"again\"\n");
    tb_cat(&b, "x ::= r30000\n");
    CHECK(moe_grammar_parse(b.p, b.n, NULL, &g, g_err, sizeof g_err) != MOE_OK && !g);
    CHECK_STR_CONTAINS(g_err, "undefined rule 'r30000'");
    free(b.p);
}

/* ---- JSON Schema ---------------------------------------------------------------- */

static int smatch(const char *schema, const char *s) {
    moe_grammar *g = NULL;
    if (moe_grammar_from_json_schema(schema, strlen(schema), &g, g_err, sizeof g_err)) {
        fprintf(stderr, "schema %s: %s\n", schema, g_err);
        return -3;
    }
    int r = match_g(g, s);
    moe_grammar_free(g);
    return r;
}

#define ACC(schema, s) CHECK_MSG(smatch(schema, s) == 1, "%s should accept %s", schema, s)
#define REJ(schema, s) CHECK_MSG(smatch(schema, s) < 1 && smatch(schema, s) > -3, "%s should reject %s", schema, s)

static void test_schema(void) {
    const char *t;
    ACC("{\"type\":\"string\"}", "\"h\\u00e9llo \\\"x\\\"\"");
    REJ("{\"type\":\"string\"}", "\"a\nb\"");
    REJ("{\"type\":\"string\"}", "12");
    ACC("{\"type\":\"integer\"}", "-120");
    REJ("{\"type\":\"integer\"}", "1.5");
    REJ("{\"type\":\"integer\"}", "012");
    ACC("{\"type\":\"number\"}", "-1.5e+3");
    REJ("{\"type\":\"number\"}", "1.");
    ACC("{\"type\":\"boolean\"}", "false");
    REJ("{\"type\":\"boolean\"}", "0");
    ACC("{\"type\":\"null\"}", "null");
    REJ("{\"type\":\"null\"}", "nul");
    t = "{\"type\":[\"integer\",\"null\"]}";
    ACC(t, "7"); ACC(t, "null"); REJ(t, "\"7\"");
    t = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}},"
        "\"required\":[\"b\"],\"additionalProperties\":false}";
    ACC(t, "{\"a\": 1, \"b\": \"x\"}");
    ACC(t, "{\"b\":\"x\"}");
    REJ(t, "{\"a\":1}");                   /* b is required */
    REJ(t, "{}");
    REJ(t, "{\"b\":\"x\",\"c\":1}");      /* no additional properties */
    REJ(t, "{\"a\":\"1\",\"b\":\"x\"}");  /* a's type */
    t = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":true}";
    ACC(t, "{\"a\":1,\"zz\":[1,{}]}");
    ACC(t, "{\"q\":null}");
    t = "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}";
    ACC(t, "{\"x\":1,\"y\":2}");
    REJ(t, "{\"x\":\"1\"}");
    ACC("{\"type\":\"object\"}", "{\"k\": [true, {\"n\": null}]}");
    t = "{\"enum\":[\"red\",\"green\",3,null]}";
    ACC(t, "\"green\""); ACC(t, "3"); ACC(t, "null"); REJ(t, "\"blue\""); REJ(t, "4");
    t = "{\"const\":{\"k\":[1,2]}}";
    ACC(t, "{\"k\":[1,2]}"); REJ(t, "{\"k\":[1,3]}");
    t = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}";
    ACC(t, "[1, 2]"); ACC(t, "[1,2,3]"); REJ(t, "[1]"); REJ(t, "[1,2,3,4]"); REJ(t, "[1,\"2\"]");
    t = "{\"type\":\"array\",\"maxItems\":0}";
    ACC(t, "[]"); REJ(t, "[1]");
    ACC("{\"type\":\"array\"}", "[]");
    ACC("{\"type\":\"array\"}", "[1,\"a\",[]]");
    t = "{\"type\":\"integer\",\"minimum\":-15,\"maximum\":230}";
    ACC(t, "-15"); ACC(t, "0"); ACC(t, "99"); ACC(t, "230"); ACC(t, "-9");
    REJ(t, "-16"); REJ(t, "231"); REJ(t, "1000"); REJ(t, "-100"); REJ(t, "-0");
    t = "{\"type\":\"integer\",\"exclusiveMinimum\":10}";
    ACC(t, "11"); ACC(t, "123456"); REJ(t, "10"); REJ(t, "9"); REJ(t, "-11");
    t = "{\"type\":\"integer\",\"maximum\":-3}";
    ACC(t, "-3"); ACC(t, "-3000"); REJ(t, "-2"); REJ(t, "0"); REJ(t, "5");
    t = "{\"type\":\"number\",\"minimum\":0,\"maximum\":10}";
    ACC(t, "0"); ACC(t, "3.75"); ACC(t, "10"); ACC(t, "10.000"); ACC(t, "0.5"); ACC(t, "-0");
    REJ(t, "10.5"); REJ(t, "-0.5"); REJ(t, "11"); REJ(t, "1e3");
    t = "{\"type\":\"number\",\"exclusiveMinimum\":-2,\"exclusiveMaximum\":2}";
    ACC(t, "-1.99"); ACC(t, "1.5"); REJ(t, "2"); REJ(t, "-2"); REJ(t, "2.0"); REJ(t, "-2.5");
    t = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}";
    ACC(t, "\"ab\""); ACC(t, "\"\\u00e9\xc3\xa9x\""); REJ(t, "\"a\""); REJ(t, "\"abcd\"");
    t = "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}";
    ACC(t, "5"); ACC(t, "\"x\""); REJ(t, "\"xy\""); REJ(t, "true");
    t = "{\"oneOf\":[{\"type\":\"boolean\"},{\"type\":\"null\"}]}";
    ACC(t, "true"); ACC(t, "null"); REJ(t, "1");
    t = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
        "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},"
        "\"$ref\":\"#/$defs/node\"}";
    ACC(t, "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}");
    REJ(t, "{\"v\":1,\"next\":{\"v\":2}}");
    t = "{\"type\":\"string\",\"nullable\":true}";
    ACC(t, "null"); ACC(t, "\"s\""); REJ(t, "1");
    t = "{\"title\":\"x\",\"description\":\"any\"}";
    ACC(t, "[1, {\"a\": \"b\"}]");
    ACC("true", "42");
}

static void test_schema_errors(void) {
    static const struct { const char *s, *msg; int rc; } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"a+\"}", "json-schema: unsupported keyword 'pattern' at #", MOE_EUNSUPPORTED},
        {"{\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"}}}",
         "unsupported keyword 'format' at #/properties/d", MOE_EUNSUPPORTED},
        {"{\"items\":{\"allOf\":[]}}", "unsupported keyword 'allOf' at #/items", MOE_EUNSUPPORTED},
        {"{\"type\":\"number\",\"minimum\":0.5}", "'minimum' 0.5: only integer bounds", MOE_EUNSUPPORTED},
        {"{\"type\":\"strin\"}", "unknown type 'strin' at #/type", MOE_EUNSUPPORTED},
        {"{\"$ref\":\"http://x/y\"}", "does not name a local definition", MOE_EUNSUPPORTED},
        {"{\"$ref\":\"#/$defs/missing\"}", "at #/$ref", MOE_EUNSUPPORTED},
        {"{\"type\":\"object\",\"properties\":{},\"required\":[\"a\"]}", "at #/required/0", MOE_EUNSUPPORTED},
        {"{\"anyOf\":[{\"type\":\"integer\"}],\"properties\":{}}", "keyword 'properties' beside 'anyOf'", MOE_EUNSUPPORTED},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "maxItems 2 below minItems 3", MOE_EUNSUPPORTED},
        {"{\"type\":\"array\",\"items\":[{}]}", "tuple 'items'", MOE_EUNSUPPORTED},
        {"{\"type\":\"string\",\"maxLength\":-1}", "'maxLength' must be an integer", MOE_EUNSUPPORTED},
        {"{\"type\": ", "json-schema: bad JSON at line 1", MOE_EFORMAT},
        {"false", "a schema must be an object or true at #", MOE_EUNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *g = NULL;
        int rc = moe_json_schema_to_gbnf(cases[i].s, strlen(cases[i].s), &g, g_err, sizeof g_err);
        CHECK_MSG(rc == cases[i].rc, "case %zu: rc %d", i, rc);
        CHECK_STR_CONTAINS(g_err, cases[i].msg);
        CHECK(!g);
        free(g);
    }
}

/* ---- masks against a brute-force walk ------------------------------------------ */

/* At each step: the mask equals, token by token, "its bytes are a valid
 * prefix" (try_bytes), end tokens iff accepting, control tokens never; then
 * a random allowed token is accepted. Returns the steps checked. */
static int mask_walk_check(const moe_grammar *g, const moe_grammar_vocab *v, int n_vocab, const char *const *bytes,
                           const size_t *lens, const uint8_t *kind, int steps, uint64_t seed) {
    moe_constraint *c = NULL;
    if (moe_constraint_new(g, v, &c, g_err, sizeof g_err)) { CHECK_MSG(0, "%s", g_err); return 0; }
    uint8_t *m = malloc((size_t)n_vocab);
    int done = 0, bad = 0;
    moe_rng rng;
    moe_rng_seed(&rng, seed);
    for (int s = 0; s < steps && m; s++) {
        int na = 0;
        if (moe_constraint_mask(c, m, &na)) { CHECK_MSG(0, "%s", moe_constraint_error(c)); break; }
        int cnt = 0;
        for (int t = 0; t < n_vocab; t++) {
            bool want;
            if (kind[t] == GV_EOG) want = moe_constraint_accepting(c);
            else if (kind[t] == GV_NEVER) want = false;
            else moe_constraint_try_bytes(c, bytes[t], lens[t], &want);
            if ((m[t] != 0) != want && bad++ < 5) CHECK_MSG(0, "step %d token %d: mask %d, brute force %d", s, t, m[t], want);
            cnt += m[t];
        }
        CHECK_EQ_INT(cnt, na);
        done++;
        if (!na) break;
        int pick = (int)(moe_rng_uniform(&rng) * na), t = 0;
        for (; t < n_vocab; t++) if (m[t] && pick-- == 0) break;
        if (kind[t] == GV_EOG) { /* end: restart */
            CHECK(moe_constraint_accept(c, t) == MOE_OK);
            CHECK(moe_constraint_finished(c));
            moe_constraint_reset(c);
            continue;
        }
        CHECK(moe_constraint_accept(c, t) == MOE_OK);
    }
    free(m);
    moe_constraint_free(c);
    return done;
}

static const char *JSON_GBNF =
    "root ::= value\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\" ws\n"
    "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\" ws\n"
    "string ::= \"\\\"\" ([^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\nt])* \"\\\"\" ws\n"
    "number ::= \"-\"? [0-9]+ (\".\" [0-9]+)? ws\n"
    "ws ::= [ \\n]?\n";

static void test_mask_synthetic(void) {
    /* bytes, random multi-byte pieces over a JSON-ish alphabet, UTF-8
     * pieces (whole and cut), duplicates, an end and a control token */
    enum { NV = 1200 };
    static char buf[NV][8];
    const char *p[NV];
    size_t l[NV];
    uint8_t k[NV];
    const char alpha[] = "{}[]\",: \n0123456789.-truefalsn\\xaz";
    moe_rng rng;
    moe_rng_seed(&rng, 7);
    for (int i = 0; i < NV; i++) {
        k[i] = GV_BYTES;
        if (i < 256) { buf[i][0] = (char)i; l[i] = 1; }
        else if (i < 300) { const char *u = "\xc3\xa9\xe4\xb8\xad"; int o = i % 3, n = 1 + i % 4; memcpy(buf[i], u + o, (size_t)n); l[i] = (size_t)n; }
        else {
            int n = 1 + (int)(moe_rng_uniform(&rng) * 6);
            for (int j = 0; j < n; j++) buf[i][j] = alpha[(int)(moe_rng_uniform(&rng) * (sizeof alpha - 1))];
            l[i] = (size_t)n;
        }
        p[i] = buf[i];
    }
    memcpy(buf[NV - 3], "tr", 2); l[NV - 3] = 2; /* a duplicate of some piece is likely; force one */
    memcpy(buf[NV - 4], "tr", 2); l[NV - 4] = 2;
    k[NV - 1] = GV_EOG; k[NV - 2] = GV_NEVER;
    moe_grammar_vocab *v = NULL;
    CHECK(moe_grammar_vocab_from_pieces(NV, p, l, k, &v, g_err, sizeof g_err) == MOE_OK);
    moe_grammar *g = NULL;
    CHECK(moe_grammar_parse(JSON_GBNF, strlen(JSON_GBNF), NULL, &g, g_err, sizeof g_err) == MOE_OK);
    int steps = 0;
    for (int r = 0; r < 8 && g && v; r++) steps += mask_walk_check(g, v, NV, p, l, k, 250, 100 + (uint64_t)r);
    CHECK_MSG(steps >= 1000, "only %d states checked", steps);
    moe_grammar_free(g);
    /* a schema grammar too */
    const char *sc = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120},"
                     "\"s\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"tr\"]},\"maxItems\":4}},\"required\":[\"n\"]}";
    CHECK(moe_grammar_from_json_schema(sc, strlen(sc), &g, g_err, sizeof g_err) == MOE_OK);
    for (int r = 0; r < 8 && g && v; r++) mask_walk_check(g, v, NV, p, l, k, 60, 200 + (uint64_t)r);
    moe_grammar_free(g);
    moe_grammar_vocab_free(v);
}

/* The real 151k-token vocabulary: masks against brute force on a few
 * states, and mask + accept allocate nothing. */
static void test_mask_qwen3(void) {
    const char *path = check_ref("vocab/qwen3-vocab.gguf");
    if (!path) return;
    moe_load_params lp = {.vocab_only = true};
    moe_model *m = NULL;
    if (moe_model_load(path, &lp, &m, g_err, sizeof g_err)) { CHECK_MSG(0, "%s", g_err); return; }
    moe_grammar_vocab *v = NULL;
    CHECK(moe_grammar_vocab_new(m, &v, g_err, sizeof g_err) == MOE_OK);
    int n = moe_model_n_vocab(m);
    const char **p = malloc((size_t)n * sizeof *p);
    size_t *l = malloc((size_t)n * sizeof *l);
    uint8_t *k = malloc((size_t)n);
    for (int i = 0; i < n; i++) {
        moe_token_piece(m, i, false, &p[i], &l[i]);
        k[i] = moe_token_is_eog(m, i) ? GV_EOG : l[i] ? GV_BYTES : GV_NEVER;
    }
    moe_grammar *g = NULL;
    CHECK(moe_grammar_parse(JSON_GBNF, strlen(JSON_GBNF), NULL, &g, g_err, sizeof g_err) == MOE_OK);
    if (g && v) mask_walk_check(g, v, n, p, l, k, 12, 5);
    /* no allocation in mask / accept */
    moe_constraint *c = NULL;
    uint8_t *mask = malloc((size_t)n);
    if (g && v && moe_constraint_new(g, v, &c, g_err, sizeof g_err) == MOE_OK) {
        int32_t ids[64];
        size_t nt = 0;
        const char *txt = "{\"name\": [1, 2.5, \"\xc3\xa9t\xc3\xa9\"], \"k\": {}}";
        CHECK(moe_tokenize(m, txt, strlen(txt), false, false, ids, 64, &nt, g_err, sizeof g_err) == MOE_OK);
        long a0 = check_allocs();
        for (size_t i = 0; i < nt && i < 64; i++) {
            int na = 0;
            CHECK(moe_constraint_mask(c, mask, &na) == MOE_OK);
            CHECK_MSG(mask[ids[i]], "token %d of the JSON text not allowed", ids[i]);
            CHECK(moe_constraint_accept(c, ids[i]) == MOE_OK);
        }
        CHECK_EQ_INT(check_allocs() - a0, 0);
        CHECK(moe_constraint_accepting(c));
        moe_constraint_free(c);
    }
    free(mask);
    moe_grammar_free(g);
    moe_grammar_vocab_free(v);
    free(p); free(l); free(k);
    moe_model_free(m);
}

/* ---- sampling ------------------------------------------------------------------ */

static void test_sampling(void) {
    enum { N = 500 };
    float lg[N], copy[N];
    uint8_t al[N];
    moe_rng rng;
    moe_rng_seed(&rng, 3);
    moe_sampler *gs = NULL, *ts = NULL;
    moe_sampler_params gp = {.temp = 0}, tp = {.temp = 0.8f, .top_k = 40, .top_p = 0.9f, .seed = 11};
    CHECK(moe_sampler_new(&gp, N, &gs, g_err, sizeof g_err) == MOE_OK);
    CHECK(moe_sampler_new(&tp, N, &ts, g_err, sizeof g_err) == MOE_OK);
    for (int it = 0; it < 200 && gs && ts; it++) {
        for (int i = 0; i < N; i++) {
            lg[i] = (float)(moe_rng_uniform(&rng) * 20 - 10);
            if (i % 50 == 7) lg[i] = lg[i - 1];  /* ties */
            al[i] = moe_rng_uniform(&rng) < (it % 2 ? 0.02 : 0.5);
        }
        memcpy(copy, lg, sizeof lg);
        int32_t best = -1;
        for (int i = 0; i < N; i++) if (al[i] && (best < 0 || lg[i] > lg[best])) best = i;
        CHECK_EQ_INT(moe_sampler_sample_masked(gs, lg, al), best);
        int32_t t = moe_sampler_sample_masked(ts, lg, al);
        CHECK_MSG(best < 0 ? t == -1 : (t >= 0 && al[t]), "sampled %d not allowed", t);
        CHECK(!memcmp(copy, lg, sizeof lg));
    }
    /* unmasked: the same as moe_sampler_sample */
    for (int i = 0; i < N; i++) lg[i] = (float)i * 0.01f;
    CHECK_EQ_INT(moe_sampler_sample_masked(gs, lg, NULL), moe_sampler_sample(gs, lg));
    moe_sampler_free(gs);
    moe_sampler_free(ts);
}

/* ---- end tokens, control tokens, limits ---------------------------------------- */

static void test_end_and_limits(void) {
    moe_grammar *g = NULL;
    CHECK(moe_grammar_parse("root ::= \"ab\" \"c\"?", 18, NULL, &g, g_err, sizeof g_err) == MOE_OK);
    moe_constraint *c = NULL;
    uint8_t m[258];
    if (g && moe_constraint_new(g, BV, &c, g_err, sizeof g_err) == MOE_OK) {
        CHECK(moe_constraint_accept(c, 256) == MOE_EINVAL);   /* end before "ab" */
        CHECK(moe_constraint_accept(c, 257) == MOE_EINVAL);   /* control */
        CHECK(moe_constraint_accept(c, 'x') == MOE_EINVAL);
        CHECK(moe_constraint_accept(c, 'a') == MOE_OK);
        CHECK(moe_constraint_accept(c, 'b') == MOE_OK);
        int na = 0;
        CHECK(moe_constraint_mask(c, m, &na) == MOE_OK);
        CHECK_EQ_INT(na, 2);
        CHECK(m['c'] && m[256] && !m[257]);
        CHECK(!moe_constraint_finished(c));
        CHECK(moe_constraint_accept(c, 'c') == MOE_OK);
        CHECK(moe_constraint_finished(c));
        CHECK(moe_constraint_mask(c, m, &na) == MOE_OK && na == 1 && m[256]);
        CHECK(moe_constraint_accept(c, 256) == MOE_OK);
        CHECK(moe_constraint_mask(c, m, &na) == MOE_OK && na == 0);
        moe_constraint_reset(c);
        CHECK(!moe_constraint_accepting(c));
        moe_constraint_free(c);
    }
    moe_grammar_free(g);
    /* deep nesting: an error at the depth limit, never a crash */
    const char *deep = "root ::= \"(\" root \")\" | \"x\"";
    CHECK(moe_grammar_parse(deep, strlen(deep), NULL, &g, g_err, sizeof g_err) == MOE_OK);
    if (g && moe_constraint_new(g, BV, &c, g_err, sizeof g_err) == MOE_OK) {
        int rc = MOE_OK, i = 0;
        for (; i < MOE_GRAMMAR_MAX_DEPTH + 10 && rc == MOE_OK; i++) rc = moe_constraint_accept_bytes(c, "(", 1);
        CHECK_EQ_INT(rc, MOE_ERANGE);
        CHECK_STR_CONTAINS(moe_constraint_error(c), "deeper than");
        moe_constraint_free(c);
    }
    moe_grammar_free(g);
    /* ambiguity: every split of a run of a's is a parse stack */
    const char *amb = "root ::= [a]{0,6000} [a]{0,6000}";
    CHECK(moe_grammar_parse(amb, strlen(amb), NULL, &g, g_err, sizeof g_err) == MOE_OK);
    if (g && moe_constraint_new(g, BV, &c, g_err, sizeof g_err) == MOE_OK) {
        int rc = MOE_OK;
        for (int i = 0; i < 5000 && rc == MOE_OK; i++) rc = moe_constraint_accept_bytes(c, "a", 1);
        CHECK_EQ_INT(rc, MOE_ERANGE);
        CHECK_STR_CONTAINS(moe_constraint_error(c), "parse stacks alive");
        moe_constraint_free(c);
    }
    moe_grammar_free(g);
}


/* ---- 1000 constrained generations ------------------------------------------------ */

static size_t utf8_chars(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* The schema's rules checked on a parsed value (jansson), independently of
 * the grammar. */
static bool valid_record(json_t *o) {
    if (!json_is_object(o)) return false;
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (!strcmp(k, "name")) { if (!json_is_string(v) || utf8_chars(json_string_value(v)) > 8) return false; }
        else if (!strcmp(k, "age")) { if (!json_is_integer(v) || json_integer_value(v) < -5 || json_integer_value(v) > 130) return false; }
        else if (!strcmp(k, "tags")) {
            if (!json_is_array(v) || json_array_size(v) > 3) return false;
            size_t i;
            json_t *t;
            json_array_foreach(v, i, t) {
                const char *ts = json_string_value(t);
                if (!ts || (strcmp(ts, "a") && strcmp(ts, "tr") && strcmp(ts, "x y"))) return false;
            }
        } else if (!strcmp(k, "ok")) { if (!json_is_boolean(v)) return false; }
        else if (!strcmp(k, "score")) { if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1) return false; }
        else if (!strcmp(k, "sub")) {
            json_t *kk = json_object_get(v, "k");
            if (!json_is_object(v) || json_object_size(v) != 1 || !kk) return false;
            if (!json_is_null(kk) && (!json_is_string(kk) || utf8_chars(json_string_value(kk)) > 3)) return false;
        } else return false;
    }
    return json_object_get(o, "name") && json_object_get(o, "age") && json_object_get(o, "sub");
}

/* Random logits, masked sampling at temperature 1.5, until the end token:
 * every output parses and satisfies the schema. */
static void test_generations(void) {
    const char *sc =
        "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"name\",\"age\",\"sub\"],\"properties\":{"
        "\"name\":{\"type\":\"string\",\"maxLength\":8},\"age\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":130},"
        "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"tr\",\"x y\"]},\"maxItems\":3},\"ok\":{\"type\":\"boolean\"},"
        "\"score\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1},"
        "\"sub\":{\"type\":\"object\",\"properties\":{\"k\":{\"type\":[\"string\",\"null\"],\"maxLength\":3}},"
        "\"required\":[\"k\"],\"additionalProperties\":false}}}";
    enum { NV = 700 };
    static char buf[NV][6];
    const char *p[NV];
    size_t l[NV];
    uint8_t k[NV];
    const char alpha[] = "{}[]\",: \n0123456789.-eaxytrufl\\\xc3\xa9";
    moe_rng rng;
    moe_rng_seed(&rng, 99);
    for (int i = 0; i < NV; i++) {
        k[i] = GV_BYTES;
        if (i < 256) { buf[i][0] = (char)i; l[i] = 1; }
        else {
            int n = 1 + (int)(moe_rng_uniform(&rng) * 5);
            for (int j = 0; j < n; j++) buf[i][j] = alpha[(int)(moe_rng_uniform(&rng) * (sizeof alpha - 1))];
            l[i] = (size_t)n;
        }
        p[i] = buf[i];
    }
    k[NV - 1] = GV_EOG;
    moe_grammar_vocab *v = NULL;
    moe_grammar *g = NULL;
    moe_constraint *c = NULL;
    moe_sampler *smp = NULL;
    moe_sampler_params sp = {.temp = 1.5f, .seed = 5};
    CHECK(moe_grammar_vocab_from_pieces(NV, p, l, k, &v, g_err, sizeof g_err) == MOE_OK);
    CHECK(moe_grammar_from_json_schema(sc, strlen(sc), &g, g_err, sizeof g_err) == MOE_OK);
    CHECK(moe_sampler_new(&sp, NV, &smp, g_err, sizeof g_err) == MOE_OK);
    if (!v || !g || !smp || moe_constraint_new(g, v, &c, g_err, sizeof g_err)) { CHECK_MSG(0, "%s", g_err); return; }
    float lg[NV];
    uint8_t m[NV];
    static char out[8192];
    int ended = 0, valid = 0;
    for (int gen = 0; gen < 1000; gen++) {
        moe_constraint_reset(c);
        size_t n = 0;
        bool end = false;
        for (int step = 0; step < 2000 && !end; step++) {
            for (int i = 0; i < NV; i++) lg[i] = (float)(moe_rng_uniform(&rng) * 8);
            if (moe_constraint_mask(c, m, NULL)) { CHECK_MSG(0, "%s", moe_constraint_error(c)); break; }
            int32_t id = moe_sampler_sample_masked(smp, lg, m);
            if (id < 0) break;
            CHECK(moe_constraint_accept(c, id) == MOE_OK);
            if (k[id] == GV_EOG) { end = true; break; }
            if (n + l[id] < sizeof out) { memcpy(out + n, p[id], l[id]); n += l[id]; }
        }
        out[n] = 0;
        if (!end) continue;
        ended++;
        json_error_t je;
        json_t *o = json_loads(out, 0, &je);
        bool ok = o && valid_record(o);
        if (!ok && valid < 1000) CHECK_MSG(0, "generation %d invalid: %s", gen, out);
        valid += ok;
        json_decref(o);
    }
    CHECK_EQ_INT(ended, 1000);  /* a finite grammar: every generation reaches its end */
    CHECK_EQ_INT(valid, 1000);
    moe_constraint_free(c);
    moe_sampler_free(smp);
    moe_grammar_free(g);
    moe_grammar_vocab_free(v);
}

/* ---- control tokens: <[ID]> ------------------------------------------------------ */

/* mask of the constraint's state as a list: "1 3" */
static void mask_str(moe_constraint *c, int n, char *out, size_t cap) {
    uint8_t mask[64];
    int na = 0;
    out[0] = 0;
    CHECK(moe_constraint_mask(c, mask, &na) == MOE_OK);
    for (int i = 0; i < n; i++)
        if (mask[i]) snprintf(out + strlen(out), cap - strlen(out), "%s%d", out[0] ? " " : "", i);
}

/* A control token is allowed exactly where the grammar names it by id, as
 * the one token: never spelled by text tokens (even ones that print its
 * name), never where the grammar has its name as text. */
static void test_token_refs(void) {
    uint8_t code3[MOE_GRAMMAR_TOKEN_LEN], code5[MOE_GRAMMAR_TOKEN_LEN];
    moe_grammar_token_code(3, code3);
    moe_grammar_token_code(5, code5);
    const char *p[7] = {"a", "b", "<x>", (const char *)code3, "", (const char *)code5, "<"};
    size_t l[7] = {1, 1, 3, MOE_GRAMMAR_TOKEN_LEN, 0, MOE_GRAMMAR_TOKEN_LEN, 1};
    uint8_t k[7] = {GV_BYTES, GV_BYTES, GV_BYTES, GV_BYTES, GV_EOG, GV_BYTES, GV_BYTES};
    moe_grammar_vocab *v = NULL;
    CHECK(moe_grammar_vocab_from_pieces(7, p, l, k, &v, g_err, sizeof g_err) == MOE_OK);
    const char *gb = "root ::= \"a\" <[3]> (\"b\" | <[5]>)? \"<x>\"";
    moe_grammar *g = NULL;
    CHECK_MSG(moe_grammar_parse(gb, strlen(gb), NULL, &g, g_err, sizeof g_err) == MOE_OK, "%s", g_err);
    moe_constraint *c = NULL;
    char m[64];
    if (g && v && moe_constraint_new(g, v, &c, g_err, sizeof g_err) == MOE_OK) {
        mask_str(c, 7, m, sizeof m);
        CHECK_MSG(!strcmp(m, "0"), "start: %s", m);
        CHECK(moe_constraint_accept(c, 0) == MOE_OK);
        mask_str(c, 7, m, sizeof m);
        CHECK_MSG(!strcmp(m, "3"), "after a: %s (want the control token 3 alone)", m);
        CHECK(moe_constraint_accept(c, 5) != MOE_OK);
        CHECK(moe_constraint_accept(c, 3) == MOE_OK);
        mask_str(c, 7, m, sizeof m);
        CHECK_MSG(!strcmp(m, "1 2 5 6"), "after <[3]>: %s", m);
        CHECK(moe_constraint_accept(c, 5) == MOE_OK);
        mask_str(c, 7, m, sizeof m);
        CHECK_MSG(!strcmp(m, "2 6"), "after <[5]>: %s", m);
        CHECK(moe_constraint_accept(c, 2) == MOE_OK);
        CHECK(moe_constraint_accepting(c));
        moe_constraint_free(c);
    }
    moe_grammar_free(g);
    moe_grammar_vocab_free(v);
    /* parse errors: one line naming the place and the form */
    static const char *const bad[] = {"root ::= <x>", "root ::= <[]>", "root ::= <[12a]>", "root ::= <[16777216]>", "root ::= <[3]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        g = NULL;
        CHECK(moe_grammar_parse(bad[i], strlen(bad[i]), NULL, &g, g_err, sizeof g_err) != MOE_OK);
        moe_grammar_free(g);
        CHECK_STR_CONTAINS(g_err, "grammar:1:10:");
        CHECK_STR_CONTAINS(g_err, "<[");
    }
    /* a real vocabulary: <|im_start|> (151644, CONTROL) by id, and not as text */
    const char *path = check_ref("vocab/qwen3-vocab.gguf");
    if (!path) return;
    moe_load_params lp = {.vocab_only = true};
    moe_model *md = NULL;
    if (moe_model_load(path, &lp, &md, g_err, sizeof g_err)) { CHECK_MSG(0, "%s", g_err); return; }
    v = NULL;
    CHECK(moe_grammar_vocab_new(md, &v, g_err, sizeof g_err) == MOE_OK);
    const int n = moe_model_n_vocab(md);
    uint8_t *mask = malloc((size_t)n);
    static const char *const gs[] = {"root ::= <[151644]> \"user\"", "root ::= \"<|im_start|>\" \"user\""};
    for (int t = 0; t < 2 && v && mask; t++) {
        g = NULL;
        CHECK(moe_grammar_parse(gs[t], strlen(gs[t]), NULL, &g, g_err, sizeof g_err) == MOE_OK);
        if (g && moe_constraint_new(g, v, &c, g_err, sizeof g_err) == MOE_OK) {
            int na = 0;
            CHECK(moe_constraint_mask(c, mask, &na) == MOE_OK);
            CHECK_MSG(t ? !mask[151644] && na > 0 : mask[151644] && na == 1, "grammar %d: %d allowed, 151644 %s", t, na,
                      mask[151644] ? "among them" : "not");
            moe_constraint_free(c);
        }
        moe_grammar_free(g);
    }
    free(mask);
    moe_grammar_vocab_free(v);
    moe_model_free(md);
}

int main(void) {
    check_alloc_guard_install();
    BV = byte_vocab();
    test_parse_errors();
    test_gbnf_match();
    test_many_rules();
    test_schema();
    test_schema_errors();
    test_end_and_limits();
    test_sampling();
    test_mask_synthetic();
    test_mask_qwen3();
    test_token_refs();
    test_generations();
    moe_grammar_vocab_free(BV);
    return check_report("test_grammar");
}
