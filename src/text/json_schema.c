/* json_schema.c — JSON Schema to GBNF (docs/GRAMMAR.md lists the subset).
 *
 * Every keyword is either compiled into the grammar or refused with its
 * JSON path: a schema is never silently loosened. Annotations (title,
 * description, default, examples, $comment, $schema, $id) do not constrain
 * and are skipped. Objects list their properties in schema order (required
 * ones must appear, optional ones may be left out); oneOf is compiled as
 * anyOf (a grammar cannot count matches). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "moefast.h"
#include "base/util.h"

typedef struct { char *s; size_t n, cap; bool oom; } sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 1024;
        while (nc < b->n + n + 1) nc *= 2;
        char *ns = realloc(b->s, nc);
        if (!ns) { b->oom = true; return; }
        b->s = ns; b->cap = nc;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

static void sb_printf(sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { sb_add(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1);
    if (!big) { b->oom = true; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    sb_add(b, big, (size_t)n);
    free(big);
}

/* bytes as a GBNF string literal */
static void sb_lit(sbuf *b, const char *s, size_t n) {
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { sb_add(b, "\\", 1); sb_add(b, (const char *)&c, 1); }
        else if (c < 0x20 || c == 0x7F) sb_printf(b, "\\x%02X", c);
        else sb_add(b, (const char *)&c, 1);
    }
    sb_add(b, "\"", 1);
}

typedef struct {
    sbuf g;                 /* the rules */
    json_t *root;
    int n;                  /* rules made */
    const char **ref_key;   /* $ref targets already given a rule */
    int *ref_rule, n_ref, cap_ref;
    int depth;
    int rc;
    char *err;
    size_t errlen;
} jsc;

static int jerr(jsc *J, int code, const char *path, const char *fmt, ...) {
    if (J->rc) return J->rc;
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    J->rc = moe_errf(J->err, J->errlen, code, "json-schema: %s at %s", msg, path);
    return J->rc;
}

static const char *const ANNOT[] = {"title", "description", "default", "examples", "$comment", "$schema", "$id",
                                    "$defs", "definitions", NULL};
static const char *const KNOWN[] = {"type", "properties", "required", "additionalProperties", "enum", "const",
                                    "items", "minItems", "maxItems", "minimum", "maximum", "exclusiveMinimum",
                                    "exclusiveMaximum", "minLength", "maxLength", "anyOf", "oneOf", "$ref",
                                    "nullable", NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++) if (!strcmp(*l, k)) return true;
    return false;
}

static int gen(jsc *J, json_t *s, const char *path);

static void child_path(char *out, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(out, cap, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

/* The literal of a JSON value (enum, const): its compact serialisation. */
static void sb_json_lit(jsc *J, json_t *v) {
    char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!d) { J->g.oom = true; return; }
    sb_lit(&J->g, d, strlen(d));
    free(d);
}

/* ---- integer ranges ------------------------------------------------------------ */

/* n-digit strings from a to b (a <= b, same length n, leading zeros counted). */
static void digits_range(sbuf *b, const char *lo, const char *hi, int n) {
    int p = 0;
    while (p < n && lo[p] == hi[p]) p++;
    if (p) sb_lit(b, lo, (size_t)p);
    if (p == n) return;
    int rest = n - p - 1;
    bool lo0 = true, hi9 = true;
    for (int i = p + 1; i < n; i++) { if (lo[i] != '0') lo0 = false; if (hi[i] != '9') hi9 = false; }
    sb_add(b, " (", 2);
    if (lo0 && hi9) {
        sb_printf(b, "[%c-%c]", lo[p], hi[p]);
        if (rest) sb_printf(b, " [0-9]{%d}", rest);
    } else {
        char nines[32], zeros[32];
        memset(nines, '9', sizeof nines); memset(zeros, '0', sizeof zeros);
        int first = lo0 ? lo[p] : lo[p] + 1, last = hi9 ? hi[p] : hi[p] - 1;
        const char *sep = "";
        if (!lo0) { sb_printf(b, "\"%c\"", lo[p]); digits_range(b, lo + p + 1, nines, rest); sep = " | "; }
        if (first <= last) {
            sb_printf(b, "%s[%c-%c]", sep, first, last);
            if (rest) sb_printf(b, " [0-9]{%d}", rest);
            sep = " | ";
        }
        if (!hi9) { sb_printf(b, "%s\"%c\"", sep, hi[p]); digits_range(b, zeros, hi + p + 1, rest); }
    }
    sb_add(b, " )", 2);
}

/* Decimal integers without leading zeros in [lo, hi] (hi < 0: unbounded),
 * as alternatives "a | b | ..." (appended; *sep tracks the first). */
static void nonneg_range(sbuf *b, uint64_t lo, int64_t hi, const char **sep) {
    char ls[24], hs[24], a[24], z[24];
    int ll = snprintf(ls, sizeof ls, "%" PRIu64, lo);
    int hl = hi >= 0 ? snprintf(hs, sizeof hs, "%" PRId64, hi) : 0;
    if (hi >= 0 && (uint64_t)hi < lo) return;
    int top = hi >= 0 ? hl : ll;
    for (int L = ll; L <= top; L++) {
        if (L == ll) memcpy(a, ls, (size_t)ll + 1);
        else { a[0] = '1'; memset(a + 1, '0', (size_t)L - 1); a[L] = 0; }
        if (hi >= 0 && L == hl) memcpy(z, hs, (size_t)hl + 1);
        else { memset(z, '9', (size_t)L); z[L] = 0; }
        sb_add(b, *sep, strlen(*sep));
        *sep = " | ";
        sb_add(b, "(", 1);
        digits_range(b, a, z, L);
        sb_add(b, " )", 2);
    }
    if (hi < 0) { sb_printf(b, "%s[1-9] [0-9]{%d,}", *sep, ll); *sep = " | "; }
}

/* ---- the schema's keywords ------------------------------------------------------- */

typedef struct { bool has_lo, has_hi, x_lo, x_hi; double lo, hi; } bounds;

static int read_bounds(jsc *J, json_t *s, const char *path, bounds *bd) {
    memset(bd, 0, sizeof *bd);
    static const char *const k[4] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (int i = 0; i < 4; i++) {
        json_t *v = json_object_get(s, k[i]);
        if (!v) continue;
        char p[512];
        child_path(p, sizeof p, path, k[i], NULL);
        if (json_is_boolean(v) && i >= 2) { /* draft 4: exclusive* are flags on minimum/maximum */
            if (i == 2) bd->x_lo = json_is_true(v); else bd->x_hi = json_is_true(v);
            continue;
        }
        if (!json_is_number(v)) return jerr(J, MOE_EUNSUPPORTED, p, "'%s' must be a number", k[i]);
        double d = json_number_value(v);
        if (d != floor(d) || fabs(d) > 1e15)
            return jerr(J, MOE_EUNSUPPORTED, p, "'%s' %g: only integer bounds up to 1e15 are compiled", k[i], d);
        if (i % 2 == 0) {
            if (!bd->has_lo || d > bd->lo || (d == bd->lo && i == 2)) { bd->lo = d; bd->x_lo = i == 2; }
            bd->has_lo = true;
        } else {
            if (!bd->has_hi || d < bd->hi || (d == bd->hi && i == 3)) { bd->hi = d; bd->x_hi = i == 3; }
            bd->has_hi = true;
        }
    }
    return 0;
}

static void int_rule(jsc *J, const bounds *b0) {
    bounds b = *b0;
    if (b.has_lo && b.x_lo) { b.lo += 1; b.x_lo = false; }
    if (b.has_hi && b.x_hi) { b.hi -= 1; b.x_hi = false; }
    const char *sep = "";
    sbuf *g = &J->g;
    /* negative values: "-" and magnitudes in [max(1, -hi), -lo] */
    if (!b.has_lo || b.lo < 0) {
        uint64_t mlo = b.has_hi && b.hi < 0 ? (uint64_t)-b.hi : 1;
        int64_t mhi = b.has_lo ? (int64_t)-b.lo : -1;
        if (mhi < 0 || (uint64_t)mhi >= mlo) {
            sb_printf(g, "%s\"-\" (", sep);
            const char *s2 = "";
            nonneg_range(g, mlo, mhi, &s2);
            sb_add(g, ")", 1);
            sep = " | ";
        }
    }
    if (!b.has_hi || b.hi >= 0) {
        uint64_t lo = b.has_lo && b.lo > 0 ? (uint64_t)b.lo : 0;
        nonneg_range(g, lo, b.has_hi ? (int64_t)b.hi : -1, &sep);
    }
    if (!*sep) sb_add(g, "[^\\x00-\\U0010FFFF]", 18); /* an empty range matches nothing */
}

/* One sign's form of a bounded number: magnitude u = k + 0.f must lie in
 * [L, H] (strictness per side): k in the range where any fraction fits,
 * and the edge values of k with a zero or a non-zero fraction. */
static void num_form(sbuf *g, const char *sign, bool has_l, double L, bool xl, bool has_h, double H, bool xh,
                     const char **sep) {
    if (has_h && (H < 0 || (H == 0 && xh))) return;
    double lo_any = !has_l || L < 0 ? 0 : xl ? L + 1 : L;
    if (!has_h || lo_any <= H - 1) {
        sb_printf(g, "%s%s(", *sep, sign);
        const char *s2 = "";
        nonneg_range(g, (uint64_t)lo_any, has_h ? (int64_t)(H - 1) : -1, &s2);
        sb_add(g, ") frac-any", 10);
        *sep = " | ";
    }
    if (has_h && !xh && (!has_l || L < 0 || H > L || (H == L && !xl))) {
        sb_printf(g, "%s%s\"%" PRId64 "\" frac-zero", *sep, sign, (int64_t)H);
        *sep = " | ";
    }
    if (has_l && xl && L >= 0 && (!has_h || L < H)) {
        sb_printf(g, "%s%s\"%" PRId64 "\" frac-nonzero", *sep, sign, (int64_t)L);
        *sep = " | ";
    }
}

static void num_rule(jsc *J, const bounds *b) {
    const char *sep = "";
    num_form(&J->g, "", b->has_lo, b->lo, b->x_lo, b->has_hi, b->hi, b->x_hi, &sep);
    num_form(&J->g, "\"-\" ", b->has_hi, -b->hi, b->x_hi, b->has_lo, -b->lo, b->x_lo, &sep);
    if (!*sep) sb_add(&J->g, "[^\\x00-\\U0010FFFF]", 18);
}

static int int_of(jsc *J, json_t *s, const char *key, const char *path, long *out) {
    json_t *v = json_object_get(s, key);
    if (!v) return 0;
    char p[512];
    child_path(p, sizeof p, path, key, NULL);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 10000)
        return jerr(J, MOE_EUNSUPPORTED, p, "'%s' must be an integer in 0..10000", key);
    *out = (long)json_integer_value(v);
    return 1;
}

/* An object with properties: in schema order, required ones mandatory.
 * T(i): the members from i on after one was written (each with its ","),
 * F(i): the same before any. */
static void object_rule(jsc *J, json_t *s, const char *path, int self) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    char p[512];
    if (props && !json_is_object(props)) { child_path(p, sizeof p, path, "properties", NULL); jerr(J, MOE_EUNSUPPORTED, p, "'properties' must be an object"); return; }
    if (req && !json_is_array(req)) { child_path(p, sizeof p, path, "required", NULL); jerr(J, MOE_EUNSUPPORTED, p, "'required' must be an array"); return; }
    size_t i;
    json_t *r;
    json_array_foreach(req, i, r) {
        if (!json_is_string(r) || !json_object_get(props, json_string_value(r))) {
            snprintf(p, sizeof p, "%s/required/%zu", path, i);
            jerr(J, MOE_EUNSUPPORTED, p, "a required property must be a name listed in 'properties'");
            return;
        }
    }
    int extra = -1;   /* the rule of additional members' values */
    if (addl && !json_is_false(addl)) {
        child_path(p, sizeof p, path, "additionalProperties", NULL);
        extra = json_is_true(addl) ? -2 : gen(J, addl, p);
        if (J->rc) return;
    }
    int n = (int)json_object_size(props), k = 0;
    int *vr = malloc(((size_t)n + 1) * sizeof *vr);
    const char **key = malloc(((size_t)n + 1) * sizeof *key);
    bool *rq = calloc((size_t)n + 1, 1);
    if (!vr || !key || !rq) { free(vr); free(key); free(rq); J->g.oom = true; return; }
    const char *name;
    json_t *ps;
    json_object_foreach(props, name, ps) {
        child_path(p, sizeof p, path, "properties", name);
        key[k] = name;
        vr[k] = gen(J, ps, p);
        json_array_foreach(req, i, r) if (!strcmp(json_string_value(r), name)) rq[k] = true;
        k++;
        if (J->rc) break;
    }
    int base = J->n;
    J->n += 2 * (n + 1);
    sbuf *g = &J->g;
    for (int j = 0; j <= n && !J->rc; j++) {
        int T = base + 2 * j, F = T + 1;
        if (j == n) {
            const char *vname = extra == -2 ? "value" : NULL;
            char vb[32];
            if (extra >= 0) { snprintf(vb, sizeof vb, "s%d", extra); vname = vb; }
            if (vname) {
                sb_printf(g, "s%d ::= (\",\" ws string \":\" ws %s)*\n", T, vname);
                sb_printf(g, "s%d ::= (string \":\" ws %s (\",\" ws string \":\" ws %s)*)?\n", F, vname, vname);
            } else {
                sb_printf(g, "s%d ::= \"\"\ns%d ::= \"\"\n", T, F);
            }
            continue;
        }
        json_t *ks = json_string(key[j]);
        char *kd = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
        json_decref(ks);
        if (!kd) { g->oom = true; break; }
        sb_printf(g, "s%d ::= \",\" ws ", T); sb_lit(g, kd, strlen(kd));
        sb_printf(g, " ws \":\" ws s%d s%d%s", vr[j], T + 2, rq[j] ? "" : " | ");
        if (!rq[j]) sb_printf(g, "s%d", T + 2);
        sb_printf(g, "\ns%d ::= ", F); sb_lit(g, kd, strlen(kd));
        sb_printf(g, " ws \":\" ws s%d s%d%s", vr[j], T + 2, rq[j] ? "" : " | ");
        if (!rq[j]) sb_printf(g, "s%d", F + 2);
        sb_add(g, "\n", 1);
        free(kd);
    }
    sb_printf(g, "s%d ::= \"{\" ws s%d ws \"}\"\n", self, base + 1);
    free(vr); free(key); free(rq);
}

static void array_rule(jsc *J, json_t *s, const char *path, int self) {
    char p[512];
    json_t *items = json_object_get(s, "items");
    int item = -1;
    if (items) {
        child_path(p, sizeof p, path, "items", NULL);
        if (json_is_array(items)) { jerr(J, MOE_EUNSUPPORTED, p, "tuple 'items' (an array of schemas)"); return; }
        item = gen(J, items, p);
        if (J->rc) return;
    }
    long mn = 0, mx = -1;
    if (int_of(J, s, "minItems", path, &mn) < 0 || int_of(J, s, "maxItems", path, &mx) < 0) return;
    if (J->rc) return;
    if (mx >= 0 && mx < mn) { jerr(J, MOE_EUNSUPPORTED, path, "maxItems %ld below minItems %ld", mx, mn); return; }
    char it[32];
    if (item >= 0) snprintf(it, sizeof it, "s%d", item); else snprintf(it, sizeof it, "value");
    sbuf *g = &J->g;
    sb_printf(g, "s%d ::= \"[\" ws ", self);
    if (mx == 0) { sb_add(g, "\"]\"\n", 4); return; }
    long rmin = mn > 0 ? mn - 1 : 0;
    sb_printf(g, "(%s (\",\" ws %s){%ld,", it, it, rmin);
    if (mx > 0) sb_printf(g, "%ld", mx - 1);
    sb_printf(g, "})%s ws \"]\"\n", mn > 0 ? "" : "?");
}

/* The grammar of one type name for schema s, into rule `self`. */
static void type_rule(jsc *J, const char *t, json_t *s, const char *path, int self) {
    sbuf *g = &J->g;
    if (!strcmp(t, "object")) {
        if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") || json_object_get(s, "required"))
            object_rule(J, s, path, self);
        else sb_printf(g, "s%d ::= object\n", self);
    } else if (!strcmp(t, "array")) {
        array_rule(J, s, path, self);
    } else if (!strcmp(t, "string")) {
        long mn = 0, mx = -1;
        if (int_of(J, s, "minLength", path, &mn) < 0 || int_of(J, s, "maxLength", path, &mx) < 0) return;
        if (mx >= 0 && mx < mn) { jerr(J, MOE_EUNSUPPORTED, path, "maxLength %ld below minLength %ld", mx, mn); return; }
        if (mn == 0 && mx < 0) { sb_printf(g, "s%d ::= string\n", self); return; }
        sb_printf(g, "s%d ::= \"\\\"\" char{%ld,", self, mn);
        if (mx >= 0) sb_printf(g, "%ld", mx);
        sb_add(g, "} \"\\\"\"\n", 7);
    } else if (!strcmp(t, "integer") || !strcmp(t, "number")) {
        bounds b;
        if (read_bounds(J, s, path, &b)) return;
        bool isint = t[0] == 'i';
        if (!b.has_lo && !b.has_hi) { sb_printf(g, "s%d ::= %s\n", self, isint ? "integer" : "number"); return; }
        sb_printf(g, "s%d ::= ", self);
        if (isint) int_rule(J, &b); else num_rule(J, &b);
        sb_add(g, "\n", 1);
    } else if (!strcmp(t, "boolean")) {
        sb_printf(g, "s%d ::= \"true\" | \"false\"\n", self);
    } else if (!strcmp(t, "null")) {
        sb_printf(g, "s%d ::= \"null\"\n", self);
    } else {
        char p[512];
        child_path(p, sizeof p, path, "type", NULL);
        jerr(J, MOE_EUNSUPPORTED, p, "unknown type '%s'", t);
    }
}

/* A rule for $ref: "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion
 * allowed: the rule is named before its schema is compiled). */
static int ref_rule(jsc *J, const char *ref, const char *path) {
    for (int i = 0; i < J->n_ref; i++) if (!strcmp(J->ref_key[i], ref)) return J->ref_rule[i];
    json_t *t = NULL;
    if (!strcmp(ref, "#")) t = J->root;
    else if (!strncmp(ref, "#/$defs/", 8)) t = json_object_get(json_object_get(J->root, "$defs"), ref + 8);
    else if (!strncmp(ref, "#/definitions/", 14)) t = json_object_get(json_object_get(J->root, "definitions"), ref + 14);
    char p[512];
    child_path(p, sizeof p, path, "$ref", NULL);
    if (!t) return jerr(J, MOE_EUNSUPPORTED, p, "$ref '%s' does not name a local definition (#/$defs/NAME)", ref), -1;
    if (J->n_ref == J->cap_ref) {
        int nc = J->cap_ref ? 2 * J->cap_ref : 8;
        const char **nk = realloc(J->ref_key, (size_t)nc * sizeof *nk);
        if (nk) J->ref_key = nk;
        int *nr = realloc(J->ref_rule, (size_t)nc * sizeof *nr);
        if (nr) J->ref_rule = nr;
        if (!nk || !nr) { J->g.oom = true; return -1; }
        J->cap_ref = nc;
    }
    int self = J->n++;
    J->ref_key[J->n_ref] = ref;
    J->ref_rule[J->n_ref++] = self;
    char tp[512];
    snprintf(tp, sizeof tp, "%s", ref);
    int body = gen(J, t, tp);
    if (!J->rc) sb_printf(&J->g, "s%d ::= s%d\n", self, body);
    return self;
}

/* Compiles schema s (at JSON path `path`) into a new rule; its number. */
static int gen(jsc *J, json_t *s, const char *path) {
    if (J->rc) return -1;
    if (++J->depth > 64) return jerr(J, MOE_EUNSUPPORTED, path, "schema nested deeper than 64"), -1;
    int self = J->n++;
    sbuf *g = &J->g;
    char p[512];
    if (json_is_true(s)) { sb_printf(g, "s%d ::= value\n", self); J->depth--; return self; }
    if (!json_is_object(s)) { jerr(J, MOE_EUNSUPPORTED, path, "a schema must be an object or true"); return -1; }
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (in_list(ANNOT, k) || in_list(KNOWN, k)) continue;
        child_path(p, sizeof p, path, k, NULL);
        jerr(J, MOE_EUNSUPPORTED, path, "unsupported keyword '%s'", k);
        return -1;
    }
    json_t *nl = json_object_get(s, "nullable");
    bool nullable = json_is_true(nl);
    if (nl && !json_is_boolean(nl)) { child_path(p, sizeof p, path, "nullable", NULL); jerr(J, MOE_EUNSUPPORTED, p, "'nullable' must be true or false"); return -1; }
    int inner = nullable ? J->n++ : self;
    json_t *ref = json_object_get(s, "$ref"), *any = json_object_get(s, "anyOf");
    const char *anyk = "anyOf";
    if (!any) { any = json_object_get(s, "oneOf"); anyk = "oneOf"; }
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const"), *ty = json_object_get(s, "type");
    /* $ref, anyOf/oneOf, enum/const decide alone: a constraining keyword
     * beside them would be dropped, so it is refused */
    const char *lead = ref ? "$ref" : any ? anyk : en ? "enum" : cn ? "const" : NULL;
    if (en && cn) { jerr(J, MOE_EUNSUPPORTED, path, "'enum' and 'const' together"); return -1; }
    if (lead) {
        json_object_foreach(s, k, v) {
            if (in_list(ANNOT, k) || !strcmp(k, lead) || !strcmp(k, "nullable")) continue;
            if ((en || cn) && !ref && !any && (!strcmp(k, "type") || !strcmp(k, "enum") || !strcmp(k, "const"))) continue;
            jerr(J, MOE_EUNSUPPORTED, path, "keyword '%s' beside '%s' is not supported", k, lead);
            return -1;
        }
    }
    if (ref) {
        if (!json_is_string(ref)) { child_path(p, sizeof p, path, "$ref", NULL); jerr(J, MOE_EUNSUPPORTED, p, "'$ref' must be a string"); return -1; }
        int r = ref_rule(J, json_string_value(ref), path);
        if (r >= 0) sb_printf(g, "s%d ::= s%d\n", inner, r);
    } else if (any) {
        child_path(p, sizeof p, path, anyk, NULL);
        if (!json_is_array(any) || !json_array_size(any)) { jerr(J, MOE_EUNSUPPORTED, p, "'%s' must be a non-empty array", anyk); return -1; }
        if (ty) { jerr(J, MOE_EUNSUPPORTED, path, "'type' beside '%s' (put the type in each alternative)", anyk); return -1; }
        int *alt = malloc(json_array_size(any) * sizeof *alt);
        if (!alt) { g->oom = true; return -1; }
        size_t i;
        json_array_foreach(any, i, v) {
            char ap[560];
            snprintf(ap, sizeof ap, "%s/%zu", p, i);
            alt[i] = gen(J, v, ap);
        }
        sb_printf(g, "s%d ::= ", inner);
        for (i = 0; i < json_array_size(any); i++) sb_printf(g, "%ss%d", i ? " | " : "", alt[i]);
        sb_add(g, "\n", 1);
        free(alt);
    } else if (en || cn) {
        if (en && (!json_is_array(en) || !json_array_size(en))) { child_path(p, sizeof p, path, "enum", NULL); jerr(J, MOE_EUNSUPPORTED, p, "'enum' must be a non-empty array"); return -1; }
        sb_printf(g, "s%d ::= ", inner);
        if (cn) sb_json_lit(J, cn);
        size_t i;
        json_array_foreach(en, i, v) {
            if (i || cn) sb_add(g, " | ", 3);
            sb_json_lit(J, v);
        }
        sb_add(g, "\n", 1);
    } else if (ty) {
        if (json_is_string(ty)) {
            type_rule(J, json_string_value(ty), s, path, inner);
        } else if (json_is_array(ty) && json_array_size(ty)) {
            int first = J->n;
            J->n += (int)json_array_size(ty);
            size_t i;
            json_array_foreach(ty, i, v) {
                child_path(p, sizeof p, path, "type", NULL);
                if (!json_is_string(v)) { jerr(J, MOE_EUNSUPPORTED, p, "'type' entries must be strings"); return -1; }
                type_rule(J, json_string_value(v), s, path, first + (int)i);
            }
            sb_printf(g, "s%d ::= ", inner);
            for (i = 0; i < json_array_size(ty); i++) sb_printf(g, "%ss%d", i ? " | " : "", first + (int)i);
            sb_add(g, "\n", 1);
        } else {
            child_path(p, sizeof p, path, "type", NULL);
            jerr(J, MOE_EUNSUPPORTED, p, "'type' must be a string or a non-empty array of strings");
            return -1;
        }
    } else if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") || json_object_get(s, "required")) {
        type_rule(J, "object", s, path, inner);
    } else if (json_object_get(s, "items") || json_object_get(s, "minItems") || json_object_get(s, "maxItems")) {
        type_rule(J, "array", s, path, inner);
    } else {
        sb_printf(g, "s%d ::= value\n", inner);
    }
    if (nullable) sb_printf(g, "s%d ::= s%d | \"null\"\n", self, inner);
    J->depth--;
    return J->rc ? -1 : self;
}

/* The JSON building blocks every schema grammar shares. Whitespace is one
 * space or one newline and indentation: bounded, so a model cannot loop on
 * it forever, yet pretty-printed output still fits. */
static const char JSON_CORE[] =
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws (string \":\" ws value ws (\",\" ws string \":\" ws value ws)*)? \"}\"\n"
    "array ::= \"[\" ws (value ws (\",\" ws value ws)*)? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "number ::= integer (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)?\n"
    "frac-any ::= (\".\" [0-9]+)?\n"
    "frac-zero ::= (\".\" \"0\"+)?\n"
    "frac-nonzero ::= \".\" [0-9]* [1-9] [0-9]*\n"
    "ws ::= (\" \" | \"\\n\" [ \\t]{0,20})?\n";

int moe_json_schema_to_gbnf(const char *schema, size_t len, char **out, char *err, size_t errlen) {
    if (!out) return moe_errf(err, errlen, MOE_EINVAL, "json-schema: out is NULL");
    *out = NULL;
    json_t *root = NULL;
    if (schema) {
        json_error_t je;
        root = json_loadb(schema, len, JSON_DECODE_ANY, &je);
        if (!root) return moe_errf(err, errlen, MOE_EFORMAT, "json-schema: bad JSON at line %d column %d: %s", je.line, je.column, je.text);
    }
    jsc J = {.root = root, .err = err, .errlen = errlen};
    sb_add(&J.g, "root ::= ws s0 ws\n", 18);
    if (root) gen(&J, root, "#");
    else { J.n = 1; sb_add(&J.g, "s0 ::= value\n", 13); }
    sb_add(&J.g, JSON_CORE, sizeof JSON_CORE - 1);
    json_decref(root);
    free(J.ref_key);
    free(J.ref_rule);
    if (!J.rc && J.g.oom) J.rc = moe_errf(err, errlen, MOE_ENOMEM, "json-schema: out of memory");
    if (J.rc) { free(J.g.s); return J.rc; }
    *out = J.g.s;
    return MOE_OK;
}

int moe_grammar_from_json_schema(const char *schema, size_t len, moe_grammar **out, char *err, size_t errlen) {
    char *g = NULL;
    int rc = moe_json_schema_to_gbnf(schema, len, &g, err, errlen);
    if (rc) return rc;
    rc = moe_grammar_parse(g, strlen(g), "root", out, err, errlen);
    free(g);
    return rc;
}
