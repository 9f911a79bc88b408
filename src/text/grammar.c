/* grammar.c — the GBNF parser (llama.cpp's format) and its lowering to the
 * byte-level form of grammar.h.
 *
 * GBNF: `name ::= alternatives`, one rule per line (a rule continues across
 * newlines inside parentheses, after `::=` and after `|`, and on a next line
 * that starts with `|`); `#` comments; elements: "literal" (escapes \n \r \t
 * \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), [class] with ranges and ^ negation
 * (code points, written as UTF-8 or escaped), `.` any character, rule
 * names, ( groups ), <[ID]> one special (control) token by id (an
 * extension, see grammar.h); postfix * + ? {m} {m,} {m,n}. Errors: one line,
 * "grammar:LINE:COL: what". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/grammar.h"
#include "base/util.h"

typedef struct { gelem *v; int n, cap; } elvec;
typedef struct {
    char *name;
    bool defined, gen;
    size_t ref_off;            /* first reference (undefined-rule errors) */
    elvec *alts;
    int n_alt, cap_alt;
} prule;

typedef struct {
    const char *s;
    size_t len, pos;
    int depth;                 /* parentheses open */
    prule *r;
    int n_rules, cap_rules;
    int *hix;                  /* written rules by name: open addressing, rule + 1 (0: empty) */
    int hcap, hn;              /* slots (a power of two), rules in it */
    uint64_t (*bset)[4];
    int n_bset, cap_bset;
    int single[256];           /* bset index of each one-byte set, or -1 */
    int any_rule;              /* the rule for `.` (-1 until used) */
    long n_elems;
    int rc;
    char *err;
    size_t errlen;
} gparser;

static int perr(gparser *P, size_t off, const char *fmt, ...) {
    if (P->rc) return P->rc;
    int line = 1, col = 1;
    for (size_t i = 0; i < off && i < P->len; i++) {
        if (P->s[i] == '\n') { line++; col = 1; } else col++;
    }
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    P->rc = moe_errf(P->err, P->errlen, MOE_EFORMAT, "grammar:%d:%d: %s", line, col, msg);
    return P->rc;
}

static int oom(gparser *P) {
    if (!P->rc) P->rc = moe_errf(P->err, P->errlen, MOE_ENOMEM, "grammar: out of memory");
    return P->rc;
}

/* ---- building blocks ------------------------------------------------------ */

static int el_push(gparser *P, elvec *e, int kind, int arg) {
    if (P->rc) return P->rc;
    if (++P->n_elems > MOE_GRAMMAR_MAX_ELEMS)
        return perr(P, P->pos, "grammar too large (more than %d elements after expanding repetitions)",
                    MOE_GRAMMAR_MAX_ELEMS);
    if (e->n == e->cap) {
        int nc = e->cap ? e->cap * 2 : 8;
        gelem *nv = realloc(e->v, (size_t)nc * sizeof *nv);
        if (!nv) return oom(P);
        e->v = nv; e->cap = nc;
    }
    e->v[e->n].kind = (uint32_t)kind;
    e->v[e->n].arg = (uint32_t)arg;
    e->n++;
    return 0;
}

static int bset_intern(gparser *P, const uint64_t s[4]) {
    for (int i = 0; i < P->n_bset; i++)
        if (!memcmp(P->bset[i], s, sizeof P->bset[i])) return i;
    if (P->n_bset == P->cap_bset) {
        int nc = P->cap_bset ? P->cap_bset * 2 : 64;
        void *nv = realloc(P->bset, (size_t)nc * sizeof *P->bset);
        if (!nv) return oom(P), -1;
        P->bset = nv; P->cap_bset = nc;
    }
    memcpy(P->bset[P->n_bset], s, sizeof P->bset[0]);
    return P->n_bset++;
}

static int bset_range(gparser *P, unsigned lo, unsigned hi) {
    if (lo == hi && P->single[lo] >= 0) return P->single[lo];
    uint64_t s[4] = {0};
    for (unsigned b = lo; b <= hi; b++) s[b >> 6] |= 1ull << (b & 63);
    int i = bset_intern(P, s);
    if (lo == hi && i >= 0) P->single[lo] = i;
    return i;
}

static uint32_t name_hash(const char *name, size_t n) { /* FNV-1a */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)name[i]) * 16777619u;
    return h;
}

/* The slot of name[0..n) in P->hix: its rule's, or the empty one it would
 * take. A tool-call grammar refers to thousands of written rules (Kimi-K2's
 * parallel calls: an alternative per tool and call index), so a search of all
 * rules per reference made parsing quadratic (120 ms of the 160 a 128-tool
 * grammar's parse and build took). */
static int *name_slot(gparser *P, const char *name, size_t n) {
    const unsigned m = (unsigned)P->hcap - 1;
    for (unsigned i = name_hash(name, n) & m;; i = (i + 1) & m) {
        const int r = P->hix[i] - 1;
        if (r < 0 || (!strncmp(P->r[r].name, name, n) && !P->r[r].name[n])) return &P->hix[i];
    }
}

static int hix_grow(gparser *P) {
    const int nc = P->hcap ? P->hcap * 2 : 64;
    int *old = P->hix, oc = P->hcap;
    if (!(P->hix = calloc((size_t)nc, sizeof *P->hix))) { P->hix = old; return oom(P); }
    P->hcap = nc;
    for (int i = 0; i < oc; i++)
        if (old[i]) {
            const char *nm = P->r[old[i] - 1].name;
            *name_slot(P, nm, strlen(nm)) = old[i];
        }
    free(old);
    return 0;
}

/* The rule named name[0..n), made when new (search: the written rules only;
 * generated ones have unique names and are not searched). */
static int rule_add(gparser *P, const char *name, size_t n) {
    const bool written = !memchr(name, '~', n);
    if (written) {
        if (2 * (P->hn + 1) > P->hcap && hix_grow(P)) return -1;
        const int *h = name_slot(P, name, n);
        if (*h) return *h - 1;
    }
    if (P->n_rules == P->cap_rules) {
        int nc = P->cap_rules ? P->cap_rules * 2 : 32;
        prule *nv = realloc(P->r, (size_t)nc * sizeof *nv);
        if (!nv) return oom(P), -1;
        P->r = nv; P->cap_rules = nc;
    }
    prule *r = &P->r[P->n_rules];
    memset(r, 0, sizeof *r);
    r->name = malloc(n + 1);
    if (!r->name) return oom(P), -1;
    memcpy(r->name, name, n);
    r->name[n] = 0;
    if (written) {
        *name_slot(P, name, n) = P->n_rules + 1;
        P->hn++;
    }
    return P->n_rules++;
}

/* A rule for a group, class or repetition inside rule `parent`: its name
 * "parent~N" cannot clash with a written rule (names have no '~'). */
static int rule_gen(gparser *P, int parent) {
    char nm[160];
    const char *pn = parent >= 0 ? P->r[parent].name : "g";
    size_t pl = strcspn(pn, "~");
    snprintf(nm, sizeof nm, "%.*s~%d", (int)(pl < 100 ? pl : 100), pn, P->n_rules);
    int r = rule_add(P, nm, strlen(nm));
    if (r >= 0) P->r[r].defined = P->r[r].gen = true;
    return r;
}

static elvec *alt_new(gparser *P, int rule) {
    prule *r = &P->r[rule];
    if (r->n_alt == r->cap_alt) {
        int nc = r->cap_alt ? r->cap_alt * 2 : 4;
        elvec *nv = realloc(r->alts, (size_t)nc * sizeof *nv);
        if (!nv) return oom(P), NULL;
        r->alts = nv; r->cap_alt = nc;
    }
    elvec *e = &r->alts[r->n_alt++];
    memset(e, 0, sizeof *e);
    return e;
}

/* ---- code points: UTF-8 sequences of byte ranges --------------------------- */

static int utf8_enc(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) { o[0] = (uint8_t)cp; return 1; }
    if (cp < 0x800) { o[0] = (uint8_t)(0xC0 | cp >> 6); o[1] = (uint8_t)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | cp >> 12); o[1] = (uint8_t)(0x80 | ((cp >> 6) & 63));
        o[2] = (uint8_t)(0x80 | (cp & 63)); return 3;
    }
    o[0] = (uint8_t)(0xF0 | cp >> 18); o[1] = (uint8_t)(0x80 | ((cp >> 12) & 63));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 63)); o[3] = (uint8_t)(0x80 | (cp & 63)); return 4;
}

/* Adds to `rule` alternatives matching exactly the UTF-8 encodings of
 * [lo, hi] (no surrogates inside): split until each piece is a product of
 * byte ranges (the construction RE2 and Go's regexp use). */
static void utf8_split(gparser *P, int rule, uint32_t lo, uint32_t hi) {
    static const uint32_t top[3] = {0x7F, 0x7FF, 0xFFFF};
    if (lo > hi || P->rc) return;
    for (int i = 0; i < 3; i++)
        if (lo <= top[i] && hi > top[i]) {
            utf8_split(P, rule, lo, top[i]);
            utf8_split(P, rule, top[i] + 1, hi);
            return;
        }
    uint8_t a[4], b[4];
    int n = utf8_enc(lo, a);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) { utf8_split(P, rule, lo, lo | m); utf8_split(P, rule, (lo | m) + 1, hi); return; }
            if ((hi & m) != m) { utf8_split(P, rule, lo, (hi & ~m) - 1); utf8_split(P, rule, hi & ~m, hi); return; }
        }
    }
    utf8_enc(hi, b);
    elvec *e = alt_new(P, rule);
    for (int i = 0; e && i < n; i++) el_push(P, e, GE_BSET, bset_range(P, a[i], b[i]));
}

typedef struct { uint32_t lo, hi; } cprange;

static int cmp_range(const void *a, const void *b) {
    const cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Appends to e one element matching one character of the ranges (negated:
 * of their complement); surrogates never match. */
static void class_emit(gparser *P, int parent, elvec *e, cprange *r, int n, bool neg) {
    qsort(r, (size_t)n, sizeof *r, cmp_range);
    cprange *u = malloc(((size_t)n + 2) * 2 * sizeof *u);
    if (!u) { oom(P); return; }
    int k = 0;
    for (int i = 0; i < n; i++) { /* merge */
        if (k && r[i].lo <= u[k - 1].hi + 1) { if (r[i].hi > u[k - 1].hi) u[k - 1].hi = r[i].hi; }
        else u[k++] = r[i];
    }
    if (neg) { /* complement over [0, 0x10FFFF] */
        cprange *c = u + n + 2;
        int m = 0;
        uint32_t next = 0;
        for (int i = 0; i < k; i++) {
            if (u[i].lo > next) c[m++] = (cprange){next, u[i].lo - 1};
            next = u[i].hi + 1;
        }
        if (next <= 0x10FFFF) c[m++] = (cprange){next, 0x10FFFF};
        memmove(u, c, (size_t)m * sizeof *u);
        k = m;
    }
    bool ascii = true;
    for (int i = 0; i < k; i++) if (u[i].hi >= 0x80) ascii = false;
    if (ascii) {
        uint64_t s[4] = {0};
        for (int i = 0; i < k; i++)
            for (uint32_t b = u[i].lo; b <= u[i].hi; b++) s[b >> 6] |= 1ull << (b & 63);
        el_push(P, e, GE_BSET, bset_intern(P, s));
        free(u);
        return;
    }
    int g = rule_gen(P, parent);
    if (g < 0) { free(u); return; }
    for (int i = 0; i < k && !P->rc; i++) {
        uint32_t lo = u[i].lo, hi = u[i].hi;
        if (lo < 0xD800 && hi >= 0xD800) { utf8_split(P, g, lo, 0xD7FF); lo = 0xE000; }
        if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;
        if (hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
        utf8_split(P, g, lo, hi);
    }
    free(u);
    el_push(P, e, GE_REF, g);
}

/* ---- the source ----------------------------------------------------------- */

static int peek(gparser *P) { return P->pos < P->len ? (unsigned char)P->s[P->pos] : -1; }

static void skip_space(gparser *P, bool newlines) {
    while (P->pos < P->len) {
        char c = P->s[P->pos];
        if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) P->pos++;
        else if (c == '#') { while (P->pos < P->len && P->s[P->pos] != '\n') P->pos++; }
        else break;
    }
}

static bool name_char(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One code point of a literal or class: an escape or a UTF-8 character. */
static int read_cp(gparser *P, uint32_t *cp) {
    size_t at = P->pos;
    int c = peek(P);
    if (c < 0) return perr(P, at, "unexpected end of the grammar");
    if (c == '\n' || c == '\r') return perr(P, at, "unexpected end of line (unterminated literal or class)");
    if (c == '\\') {
        P->pos++;
        int e = peek(P);
        P->pos++;
        int nd = 0;
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case '0': *cp = 0; return 0;
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.':
            *cp = (uint32_t)e; return 0;
        case 'x': nd = 2; break;
        case 'u': nd = 4; break;
        case 'U': nd = 8; break;
        default: return perr(P, at, "unknown escape '\\%c'", e > 32 && e < 127 ? e : '?');
        }
        uint32_t v = 0;
        for (int i = 0; i < nd; i++) {
            int h = hexval(peek(P));
            if (h < 0) return perr(P, P->pos, "escape '\\%c' needs %d hex digits", e, nd);
            v = v * 16 + (uint32_t)h;
            P->pos++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return perr(P, at, "escape names U+%X, not a character", v);
        *cp = v;
        return 0;
    }
    const unsigned char *s = (const unsigned char *)P->s + P->pos;
    size_t left = P->len - P->pos;
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!n || (size_t)n > left) return perr(P, at, "invalid UTF-8 in the grammar");
    uint32_t v = n == 1 ? (uint32_t)c : (uint32_t)c & (0x7Fu >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return perr(P, at, "invalid UTF-8 in the grammar");
        v = v << 6 | (s[i] & 63);
    }
    static const uint32_t minv[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < minv[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return perr(P, at, "invalid UTF-8 in the grammar");
    P->pos += (size_t)n;
    *cp = v;
    return 0;
}

static int parse_alternates(gparser *P, int rule);

static void parse_literal(gparser *P, elvec *e) {
    size_t at = P->pos++;
    while (!P->rc) {
        if (peek(P) < 0) { perr(P, at, "unterminated string literal"); return; }
        if (peek(P) == '"') { P->pos++; return; }
        uint32_t cp;
        if (read_cp(P, &cp)) return;
        uint8_t b[4];
        int n = utf8_enc(cp, b);
        for (int i = 0; i < n; i++) el_push(P, e, GE_BSET, bset_range(P, b[i], b[i]));
    }
}

/* <[ID]>: the token's 5-byte code (grammar.h), which no text can spell. */
static void parse_token_ref(gparser *P, elvec *e) {
    size_t at = P->pos;
    if (P->pos + 2 > P->len || P->s[P->pos + 1] != '[') { perr(P, at, "token references by text (<...>) are not supported; name the token by id: <[ID]>"); return; }
    P->pos += 2;
    long id = 0;
    int nd = 0;
    while (peek(P) >= '0' && peek(P) <= '9' && nd < 10) { id = id * 10 + (peek(P) - '0'); P->pos++; nd++; }
    if (!nd || id > MOE_GRAMMAR_MAX_TOKEN_ID || peek(P) != ']' || P->pos + 1 >= P->len || P->s[P->pos + 1] != '>') {
        perr(P, at, "a token reference is <[ID]> with ID a token id 0..%d", MOE_GRAMMAR_MAX_TOKEN_ID);
        return;
    }
    P->pos += 2;
    uint8_t b[MOE_GRAMMAR_TOKEN_LEN];
    moe_grammar_token_code((int32_t)id, b);
    for (int i = 0; i < MOE_GRAMMAR_TOKEN_LEN; i++) el_push(P, e, GE_BSET, bset_range(P, b[i], b[i]));
}

static void parse_class(gparser *P, int rule, elvec *e) {
    size_t at = P->pos++;
    bool neg = peek(P) == '^';
    if (neg) P->pos++;
    int n = 0, cap = 16;
    cprange *r = malloc((size_t)cap * sizeof *r);
    if (!r) { oom(P); return; }
    while (!P->rc) {
        if (peek(P) < 0) { perr(P, at, "unterminated character class"); break; }
        if (peek(P) == ']') { P->pos++; break; }
        uint32_t lo, hi;
        if (read_cp(P, &lo)) break;
        hi = lo;
        if (peek(P) == '-' && P->pos + 1 < P->len && P->s[P->pos + 1] != ']') {
            size_t rat = P->pos++;
            if (read_cp(P, &hi)) break;
            if (hi < lo) { perr(P, rat, "range end U+%X is below its start U+%X", hi, lo); break; }
        }
        if (n == cap) {
            cap *= 2;
            cprange *nr = realloc(r, (size_t)cap * sizeof *nr);
            if (!nr) { oom(P); break; }
            r = nr;
        }
        r[n++] = (cprange){lo, hi};
    }
    if (!P->rc && !n) perr(P, at, "empty character class");
    if (!P->rc) class_emit(P, rule, e, r, n, neg);
    free(r);
}

/* Replaces e[start..) by `item{m,max}` (max < 0: unbounded), item being
 * those elements (wrapped in a rule when more than one). */
static void repeat(gparser *P, int rule, elvec *e, int start, long m, long max) {
    gelem item = e->v[start];
    if (e->n - start > 1) {
        int g = rule_gen(P, rule);
        elvec *a = g >= 0 ? alt_new(P, g) : NULL;
        if (!a) return;
        for (int i = start; i < e->n; i++) el_push(P, a, e->v[i].kind, e->v[i].arg);
        item = (gelem){GE_REF, (uint32_t)g};
    }
    e->n = start;
    for (long i = 0; i < m && !P->rc; i++) el_push(P, e, item.kind, item.arg);
    if (max == m || P->rc) return;
    int g = rule_gen(P, rule);
    if (g < 0) return;
    if (max < 0) { /* g ::= item g | (empty) */
        elvec *a = alt_new(P, g);
        if (a) { el_push(P, a, item.kind, item.arg); el_push(P, a, GE_REF, g); }
        alt_new(P, g);
    } else {       /* g1 ::= item | ; gk ::= item g(k-1) | */
        int prev = -1;
        for (long k = 0; k < max - m && !P->rc; k++) {
            int gk = k ? rule_gen(P, rule) : g;
            elvec *a = gk >= 0 ? alt_new(P, gk) : NULL;
            if (!a) return;
            el_push(P, a, item.kind, item.arg);
            if (prev >= 0) el_push(P, a, GE_REF, prev);
            alt_new(P, gk);
            prev = gk;
        }
        g = prev;
    }
    el_push(P, e, GE_REF, g);
}

static long parse_uint(gparser *P) {
    size_t at = P->pos;
    long v = 0;
    if (peek(P) < '0' || peek(P) > '9') return perr(P, at, "expected a number in {m,n}"), -1;
    while (peek(P) >= '0' && peek(P) <= '9') {
        v = v * 10 + (peek(P) - '0');
        if (v > 100000) return perr(P, at, "repetition count above 100000"), -1;
        P->pos++;
    }
    return v;
}

static void parse_braces(gparser *P, int rule, elvec *e, int start) {
    size_t at = P->pos++;
    skip_space(P, false);
    long m = parse_uint(P), max = m;
    if (P->rc) return;
    skip_space(P, false);
    if (peek(P) == ',') {
        P->pos++;
        skip_space(P, false);
        max = peek(P) == '}' ? -1 : parse_uint(P);
        if (P->rc) return;
        skip_space(P, false);
    }
    if (peek(P) != '}') { perr(P, P->pos, "expected '}' closing {m,n}"); return; }
    P->pos++;
    if (max >= 0 && max < m) { perr(P, at, "repetition {%ld,%ld}: max below min", m, max); return; }
    repeat(P, rule, e, start, m, max);
}

static void parse_sequence(gparser *P, int rule, elvec *e) {
    int last = -1;
    while (!P->rc) {
        skip_space(P, P->depth > 0);
        int c = peek(P);
        size_t at = P->pos;
        if (c == '"') { last = e->n; parse_literal(P, e); }
        else if (c == '[') { last = e->n; parse_class(P, rule, e); }
        else if (c == '<') { last = e->n; parse_token_ref(P, e); }
        else if (c == '.') {
            P->pos++;
            last = e->n;
            if (P->any_rule < 0) {
                cprange all = {0, 0x10FFFF};
                elvec tmp = {0};
                class_emit(P, -1, &tmp, &all, 1, false);
                if (tmp.n == 1) P->any_rule = (int)tmp.v[0].arg;
                free(tmp.v);
            }
            el_push(P, e, GE_REF, P->any_rule);
        } else if (c == '(') {
            P->pos++;
            P->depth++;
            int g = rule_gen(P, rule);
            if (g < 0) return;
            parse_alternates(P, g);
            skip_space(P, true);
            if (!P->rc && peek(P) != ')') { perr(P, P->pos, "expected ')' to close the group opened at %zu", at); return; }
            P->pos++;
            P->depth--;
            last = e->n;
            el_push(P, e, GE_REF, g);
        } else if (name_char(c)) {
            size_t b = P->pos;
            while (name_char(peek(P))) P->pos++;
            int r = rule_add(P, P->s + b, P->pos - b);
            if (r < 0) return;
            if (!P->r[r].defined && !P->r[r].ref_off) P->r[r].ref_off = b + 1;
            last = e->n;
            el_push(P, e, GE_REF, r);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0 || last == e->n) { perr(P, at, "'%c' has nothing before it to repeat", c); return; }
            if (c == '{') parse_braces(P, rule, e, last);
            else { P->pos++; repeat(P, rule, e, last, c == '+', c == '?' ? 1 : -1); }
            last = -1;
        } else {
            return;
        }
    }
}

static int parse_alternates(gparser *P, int rule) {
    for (;;) {
        elvec *e = alt_new(P, rule);
        if (!e) return P->rc;
        parse_sequence(P, rule, e);
        if (P->rc) return P->rc;
        size_t save = P->pos;
        skip_space(P, true);   /* a next line starting with '|' continues */
        if (peek(P) != '|') { if (P->depth == 0) P->pos = save; return 0; }
        P->pos++;
        skip_space(P, true);
    }
}

static void parse_rule(gparser *P) {
    size_t at = P->pos;
    while (name_char(peek(P))) P->pos++;
    if (P->pos == at) { perr(P, at, "expected a rule name"); return; }
    int r = rule_add(P, P->s + at, P->pos - at);
    if (r < 0) return;
    if (P->r[r].defined) { perr(P, at, "rule '%s' is defined twice", P->r[r].name); return; }
    P->r[r].defined = true;
    skip_space(P, false);
    if (P->len - P->pos < 3 || memcmp(P->s + P->pos, "::=", 3)) {
        perr(P, P->pos, "expected '::=' after the rule name '%s'", P->r[r].name);
        return;
    }
    P->pos += 3;
    skip_space(P, true);
    parse_alternates(P, r);
    if (P->rc) return;
    skip_space(P, false);
    int c = peek(P);
    if (c >= 0 && c != '\n' && c != '\r') {
        if (c == ')') perr(P, P->pos, "unmatched ')'");
        else perr(P, P->pos, "unexpected '%c'", c > 32 && c < 127 ? c : '?');
    }
}

/* ---- checks and lowering -------------------------------------------------------- */

static void parser_free(gparser *P) {
    for (int i = 0; i < P->n_rules; i++) {
        for (int a = 0; a < P->r[i].n_alt; a++) free(P->r[i].alts[a].v);
        free(P->r[i].alts);
        free(P->r[i].name);
    }
    free(P->r);
    free(P->bset);
    free(P->hix);
}

void moe_grammar_free(moe_grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n_rules; i++) free(g->names[i]);
    free(g->names);
    free(g->alt_first);
    free(g->alt_pos);
    free(g->elem);
    free(g->bset);
    free(g);
}

static int lower(gparser *P, moe_grammar *g) {
    int n_alt = 0;
    long n_el = 0;
    for (int i = 0; i < P->n_rules; i++) {
        n_alt += P->r[i].n_alt;
        for (int a = 0; a < P->r[i].n_alt; a++) n_el += P->r[i].alts[a].n + 1;
    }
    g->names = calloc((size_t)P->n_rules, sizeof *g->names);
    g->alt_first = malloc(((size_t)P->n_rules + 1) * sizeof *g->alt_first);
    g->alt_pos = malloc(((size_t)n_alt + 1) * sizeof *g->alt_pos);
    g->elem = malloc(((size_t)n_el + 1) * sizeof *g->elem);
    g->bset = malloc(((size_t)P->n_bset + 1) * sizeof *g->bset);
    if (!g->names || !g->alt_first || !g->alt_pos || !g->elem || !g->bset) return oom(P);
    g->n_rules = P->n_rules;
    memcpy(g->bset, P->bset, (size_t)P->n_bset * sizeof *g->bset);
    g->n_bset = P->n_bset;
    int ai = 0, ei = 0;
    for (int i = 0; i < P->n_rules; i++) {
        g->names[i] = P->r[i].name;
        P->r[i].name = NULL;
        g->alt_first[i] = ai;
        for (int a = 0; a < P->r[i].n_alt; a++) {
            g->alt_pos[ai++] = ei;
            for (int k = 0; k < P->r[i].alts[a].n; k++) g->elem[ei++] = P->r[i].alts[a].v[k];
            g->elem[ei++] = (gelem){GE_END, 0};
        }
    }
    g->alt_first[P->n_rules] = ai;
    g->n_alt = ai;
    g->n_elem = ei;
    return 0;
}

/* Rules that derive the empty string (fixpoint). */
static bool *nullable_rules(const moe_grammar *g) {
    bool *nl = calloc((size_t)g->n_rules + 1, 1);
    if (!nl) return NULL;
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < g->n_rules; r++) {
            if (nl[r]) continue;
            for (int a = g->alt_first[r]; a < g->alt_first[r + 1] && !nl[r]; a++) {
                const gelem *e = &g->elem[g->alt_pos[a]];
                while (e->kind == GE_REF && nl[e->arg]) e++;
                if (e->kind == GE_END) nl[r] = changed = true;
            }
        }
    }
    return nl;
}

/* Left recursion: a rule reachable from itself through leftmost positions
 * (every element before it nullable). The runtime's expansion would never
 * end on it, so it is refused. Iterative DFS: rules nest deeply. */
static int check_left_rec(gparser *P, const moe_grammar *g) {
    bool *nl = nullable_rules(g);
    unsigned char *color = calloc((size_t)g->n_rules + 1, 1);
    int *st = malloc(((size_t)g->n_rules + 1) * 2 * sizeof *st); /* (rule, next elem scan index) */
    if (!nl || !color || !st) { free(nl); free(color); free(st); return oom(P); }
    int rc = 0;
    for (int s = 0; s < g->n_rules && !rc; s++) {
        if (color[s]) continue;
        int sp = 0;
        st[0] = s; st[1] = g->alt_first[s]; /* alternative index being scanned */
        color[s] = 1;
        sp = 1;
        while (sp > 0 && !rc) {
            int r = st[2 * (sp - 1)], *ai = &st[2 * (sp - 1) + 1];
            if (*ai >= g->alt_first[r + 1]) { color[r] = 2; sp--; continue; }
            /* all leftmost references of alternative *ai, then the next one */
            int found = -1;
            for (const gelem *e = &g->elem[g->alt_pos[*ai]]; e->kind == GE_REF; e++) {
                if (color[e->arg] == 1) {
                    const char *nm = g->names[e->arg];
                    if (strchr(nm, '~'))
                        rc = moe_errf(P->err, P->errlen, MOE_EFORMAT,
                                      "grammar: left recursion: a group or repetition in rule '%.*s' can repeat "
                                      "without consuming input (like (x?)*)", (int)strcspn(nm, "~"), nm);
                    else
                        rc = moe_errf(P->err, P->errlen, MOE_EFORMAT,
                                      "grammar: left recursion: rule '%s' can reach itself without consuming input", nm);
                    break;
                }
                if (!color[e->arg]) { found = (int)e->arg; break; }
                if (!nl[e->arg]) break;
            }
            if (rc) break;
            if (found >= 0) { /* descend; this alternative is rescanned later (its scanned refs are black) */
                color[found] = 1;
                st[2 * sp] = found; st[2 * sp + 1] = g->alt_first[found];
                sp++;
            } else {
                (*ai)++;
            }
        }
    }
    free(nl); free(color); free(st);
    return rc;
}

int moe_grammar_parse(const char *src, size_t len, const char *root, moe_grammar **out, char *err, size_t errlen) {
    if (!out) return moe_errf(err, errlen, MOE_EINVAL, "grammar: out is NULL");
    *out = NULL;
    if (!src) return moe_errf(err, errlen, MOE_EINVAL, "grammar: text is NULL");
    gparser P = {.s = src, .len = len, .any_rule = -1, .err = err, .errlen = errlen};
    for (int i = 0; i < 256; i++) P.single[i] = -1;
    skip_space(&P, true);
    while (!P.rc && P.pos < P.len) {
        parse_rule(&P);
        skip_space(&P, true);
    }
    const char *rn = root ? root : "root";
    int ri = -1;
    for (int i = 0; !P.rc && i < P.n_rules; i++) {
        if (!P.r[i].defined) { perr(&P, P.r[i].ref_off - 1, "undefined rule '%s'", P.r[i].name); break; }
        if (!strcmp(P.r[i].name, rn)) ri = i;
    }
    if (!P.rc && ri < 0) moe_errf(err, errlen, P.rc = MOE_EFORMAT, "grammar: no rule named '%s'", rn);
    moe_grammar *g = NULL;
    if (!P.rc && !(g = calloc(1, sizeof *g))) oom(&P);
    if (!P.rc) lower(&P, g);
    if (!P.rc) { g->root = ri; P.rc = check_left_rec(&P, g); }
    int rc = P.rc;
    parser_free(&P);
    if (rc) { moe_grammar_free(g); return rc; }
    *out = g;
    return MOE_OK;
}
