/* trace.c — golden traces: load, validate, record, save, and the gate that
 * replays them (format: docs/TRACE.md).
 *
 * The loader is strict on purpose: a trace is evidence that an optimisation
 * changed nothing, so an unknown field (a typo that silently disables a
 * setting), a wrong model or an inconsistent record is an error, never a
 * warning. Logits are written in the shortest decimal form that reads back to
 * the same float through the loader's own path (decimal -> double -> float),
 * so a saved trace round-trips bit for bit. */
#include "base/util.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TRACE_FORMAT "moefast-trace/1"
#define TRACE_MAX_TOPK 64

typedef struct trace_case {
    moe_trace_case c;   /* public view; its pointers alias the arrays below */
    char *name;
    int32_t *prompt, *expected, *topk_ids;
    float *topk_logits;
    char *recorded_with; /* optional free-form note (flags, ISA, threads) */
} trace_case;

struct moe_trace {
    char *path;         /* for messages: the file loaded, or "(new trace)" */
    char *file, *sha256, *arch;
    int steps;
    float tie;
    int n, cap;
    trace_case *cases;
};

/* ---- small helpers ------------------------------------------------------ */

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void case_free(trace_case *tc) {
    free(tc->name);
    free(tc->prompt);
    free(tc->expected);
    free(tc->topk_ids);
    free(tc->topk_logits);
    free(tc->recorded_with);
}

void moe_trace_free(moe_trace *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) case_free(&t->cases[i]);
    free(t->cases);
    free(t->path);
    free(t->file);
    free(t->sha256);
    free(t->arch);
    free(t);
}

int moe_trace_n_cases(const moe_trace *t) { return t ? t->n : 0; }
const moe_trace_case *moe_trace_case_at(const moe_trace *t, int i) {
    return t && i >= 0 && i < t->n ? &t->cases[i].c : NULL;
}
const char *moe_trace_recorded_with(const moe_trace *t, int i) {
    return t && i >= 0 && i < t->n ? t->cases[i].recorded_with : NULL;
}
int moe_trace_steps(const moe_trace *t) { return t ? t->steps : 0; }
float moe_trace_tie_tolerance(const moe_trace *t) { return t ? t->tie : 0.0f; }

void moe_trace_provenance(const moe_trace *t, const char **file, const char **sha256,
                          const char **arch) {
    if (file) *file = t ? t->file : NULL;
    if (sha256) *sha256 = t ? t->sha256 : NULL;
    if (arch) *arch = t ? t->arch : NULL;
}

static bool is_sha256_hex(const char *s) {
    if (strlen(s) != 64) return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
    return true;
}

/* Validates a case and appends a deep copy. `where` prefixes messages. */
static int add_case(moe_trace *t, const moe_trace_case *c, const char *recorded_with,
                    const char *where, int idx, char *err, size_t errlen) {
    if (!c->name || !*c->name)
        return moe_errf(err, errlen, MOE_EINVAL, "%s: cases[%d].name: empty", where, idx);
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->cases[i].name, c->name))
            return moe_errf(err, errlen, MOE_EINVAL, "%s: cases[%d].name: duplicate case name \"%s\"",
                            where, idx, c->name);
    if (c->n_prompt < 1 || !c->prompt)
        return moe_errf(err, errlen, MOE_EINVAL, "%s: cases[%d].prompt_tokens: empty", where, idx);
    if (c->n_expected < t->steps || !c->expected)
        return moe_errf(err, errlen, MOE_EINVAL,
                        "%s: cases[%d].expected_tokens: %d tokens, fewer than gate.steps %d",
                        where, idx, c->n_expected, t->steps);
    if (c->top_k < 1 || c->top_k > TRACE_MAX_TOPK || !c->topk_ids || !c->topk_logits)
        return moe_errf(err, errlen, MOE_EINVAL, "%s: cases[%d].topk: k = %d, expected 1..%d",
                        where, idx, c->top_k, TRACE_MAX_TOPK);
    for (int i = 0; i < c->n_prompt; i++)
        if (c->prompt[i] < 0)
            return moe_errf(err, errlen, MOE_EINVAL, "%s: cases[%d].prompt_tokens[%d]: negative id %d",
                            where, idx, i, (int)c->prompt[i]);
    for (int s = 0; s < c->n_expected; s++) {
        if (c->expected[s] < 0)
            return moe_errf(err, errlen, MOE_EINVAL, "%s: cases[%d].expected_tokens[%d]: negative id %d",
                            where, idx, s, (int)c->expected[s]);
        const int32_t *ids = c->topk_ids + (size_t)s * c->top_k;
        const float *lg = c->topk_logits + (size_t)s * c->top_k;
        for (int j = 0; j < c->top_k; j++) {
            if (ids[j] < 0)
                return moe_errf(err, errlen, MOE_EINVAL, "%s: cases[%d].topk[%d][%d]: negative id %d",
                                where, idx, s, j, (int)ids[j]);
            if (!isfinite(lg[j]))
                return moe_errf(err, errlen, MOE_EINVAL, "%s: cases[%d].topk[%d][%d]: logit not finite",
                                where, idx, s, j);
            for (int q = 0; q < j; q++)
                if (ids[q] == ids[j])
                    return moe_errf(err, errlen, MOE_EINVAL, "%s: cases[%d].topk[%d]: id %d listed twice",
                                    where, idx, s, (int)ids[j]);
            /* A recorded top-k is sorted as moe_topk() sorts it; anything else
             * was edited by hand or corrupted. */
            if (j > 0 && (lg[j] > lg[j - 1] || (lg[j] == lg[j - 1] && ids[j] < ids[j - 1])))
                return moe_errf(err, errlen, MOE_EINVAL,
                                "%s: cases[%d].topk[%d][%d]: not in descending logit order (ties by ascending id)",
                                where, idx, s, j);
        }
        if (ids[0] != c->expected[s])
            return moe_errf(err, errlen, MOE_EINVAL,
                            "%s: cases[%d].expected_tokens[%d]: %d is not the top-1 id %d of topk[%d]",
                            where, idx, s, (int)c->expected[s], (int)ids[0], s);
    }
    if (t->n == t->cap) {
        int nc = t->cap ? t->cap * 2 : 4;
        trace_case *nv = realloc(t->cases, (size_t)nc * sizeof *nv);
        if (!nv) return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", where);
        t->cases = nv;
        t->cap = nc;
    }
    trace_case tc = {0};
    size_t nk = (size_t)c->n_expected * (size_t)c->top_k;
    tc.name = dup_str(c->name);
    tc.prompt = malloc((size_t)c->n_prompt * sizeof(int32_t));
    tc.expected = malloc((size_t)c->n_expected * sizeof(int32_t));
    tc.topk_ids = malloc(nk * sizeof(int32_t) + 1);
    tc.topk_logits = malloc(nk * sizeof(float) + 1);
    tc.recorded_with = recorded_with ? dup_str(recorded_with) : NULL;
    if (!tc.name || !tc.prompt || !tc.expected || !tc.topk_ids || !tc.topk_logits ||
        (recorded_with && !tc.recorded_with)) {
        case_free(&tc);
        return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", where);
    }
    memcpy(tc.prompt, c->prompt, (size_t)c->n_prompt * sizeof(int32_t));
    memcpy(tc.expected, c->expected, (size_t)c->n_expected * sizeof(int32_t));
    memcpy(tc.topk_ids, c->topk_ids, nk * sizeof(int32_t));
    memcpy(tc.topk_logits, c->topk_logits, nk * sizeof(float));
    tc.c = (moe_trace_case){tc.name, tc.prompt, c->n_prompt, tc.expected, c->n_expected,
                            c->top_k, tc.topk_ids, tc.topk_logits};
    t->cases[t->n++] = tc;
    return MOE_OK;
}

int moe_trace_add_case(moe_trace *t, const moe_trace_case *c, char *err, size_t errlen) {
    if (!t || !c) return moe_errf(err, errlen, MOE_EINVAL, "trace: NULL argument");
    return add_case(t, c, NULL, t->path, t->n, err, errlen);
}

/* ---- loading -------------------------------------------------------------- */

/* Fails on any key of obj not in the NULL-terminated list `allowed`. */
static int check_keys(json_t *obj, const char *const *allowed, const char *path, const char *field,
                      char *err, size_t errlen) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        bool ok = false;
        for (const char *const *a = allowed; *a; a++)
            if (!strcmp(*a, key)) { ok = true; break; }
        if (!ok)
            return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s%s\"%s\": unknown field", path,
                            field, *field ? "." : "", key);
    }
    return MOE_OK;
}

static int get_string(json_t *obj, const char *key, const char *path, const char *field,
                      const char **out, char *err, size_t errlen) {
    json_t *v = json_object_get(obj, key);
    if (!v) return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s.%s: missing", path, field, key);
    if (!json_is_string(v))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s.%s: expected a string", path, field, key);
    *out = json_string_value(v);
    return MOE_OK;
}

/* An array of ids (non-negative integers that fit int32). */
static int get_ids(json_t *arr, const char *path, int ci, const char *field, int32_t **out,
                   int *n, char *err, size_t errlen) {
    if (!arr) return moe_errf(err, errlen, MOE_EFORMAT, "%s: cases[%d].%s: missing", path, ci, field);
    if (!json_is_array(arr))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: cases[%d].%s: expected an array of token ids",
                        path, ci, field);
    size_t len = json_array_size(arr);
    if (len == 0) return moe_errf(err, errlen, MOE_EFORMAT, "%s: cases[%d].%s: empty", path, ci, field);
    if (len > 0x7fffffff) return moe_errf(err, errlen, MOE_EFORMAT, "%s: cases[%d].%s: too long", path, ci, field);
    int32_t *v = malloc(len * sizeof *v);
    if (!v) return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < len; i++) {
        json_t *e = json_array_get(arr, i);
        json_int_t x;
        if (!json_is_integer(e) || (x = json_integer_value(e)) < 0 || x > 0x7fffffff) {
            free(v);
            if (json_is_integer(e) && json_integer_value(e) < 0)
                return moe_errf(err, errlen, MOE_EFORMAT, "%s: cases[%d].%s[%zu]: negative token id %lld",
                                path, ci, field, i, (long long)json_integer_value(e));
            return moe_errf(err, errlen, MOE_EFORMAT,
                            "%s: cases[%d].%s[%zu]: expected a token id (integer 0..2147483647)",
                            path, ci, field, i);
        }
        v[i] = (int32_t)x;
    }
    *out = v;
    *n = (int)len;
    return MOE_OK;
}

static int load_case(moe_trace *t, json_t *jc, int ci, char *err, size_t errlen) {
    const char *path = t->path;
    if (!json_is_object(jc))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: cases[%d]: expected an object", path, ci);
    char field[32];
    snprintf(field, sizeof field, "cases[%d]", ci);
    static const char *const keys[] = {"name", "prompt_tokens", "expected_tokens", "topk",
                                       "recorded_with", NULL};
    int rc = check_keys(jc, keys, path, field, err, errlen);
    if (rc) return rc;
    const char *name = NULL, *rec = NULL;
    if ((rc = get_string(jc, "name", path, field, &name, err, errlen))) return rc;
    if (json_object_get(jc, "recorded_with") &&
        (rc = get_string(jc, "recorded_with", path, field, &rec, err, errlen)))
        return rc;

    int32_t *prompt = NULL, *expected = NULL, *ids = NULL;
    float *lg = NULL;
    int np = 0, ne = 0, k = 0;
    if ((rc = get_ids(json_object_get(jc, "prompt_tokens"), path, ci, "prompt_tokens", &prompt, &np,
                      err, errlen)))
        goto out;
    if ((rc = get_ids(json_object_get(jc, "expected_tokens"), path, ci, "expected_tokens", &expected,
                      &ne, err, errlen)))
        goto out;
    json_t *tk = json_object_get(jc, "topk");
    if (!tk) { rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: cases[%d].topk: missing", path, ci); goto out; }
    if (!json_is_array(tk) || json_array_size(tk) != (size_t)ne) {
        rc = moe_errf(err, errlen, MOE_EFORMAT,
                      "%s: cases[%d].topk: expected an array of %d steps (one per expected token)",
                      path, ci, ne);
        goto out;
    }
    json_t *s0 = json_array_get(tk, 0);
    k = json_is_array(s0) ? (int)json_array_size(s0) : 0;
    if (k < 1 || k > TRACE_MAX_TOPK) {
        rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: cases[%d].topk[0]: expected 1..%d [id, logit] pairs",
                      path, ci, TRACE_MAX_TOPK);
        goto out;
    }
    ids = malloc((size_t)ne * (size_t)k * sizeof *ids);
    lg = malloc((size_t)ne * (size_t)k * sizeof *lg);
    if (!ids || !lg) { rc = moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path); goto out; }
    for (int s = 0; s < ne; s++) {
        json_t *st = json_array_get(tk, (size_t)s);
        if (!json_is_array(st) || json_array_size(st) != (size_t)k) {
            rc = moe_errf(err, errlen, MOE_EFORMAT,
                          "%s: cases[%d].topk[%d]: expected %d [id, logit] pairs like step 0", path, ci, s, k);
            goto out;
        }
        for (int j = 0; j < k; j++) {
            json_t *pr = json_array_get(st, (size_t)j);
            json_t *ji = json_array_get(pr, 0), *jl = json_array_get(pr, 1);
            if (!json_is_array(pr) || json_array_size(pr) != 2 || !json_is_integer(ji) || !json_is_number(jl)) {
                rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: cases[%d].topk[%d][%d]: expected [id, logit]",
                              path, ci, s, j);
                goto out;
            }
            json_int_t x = json_integer_value(ji);
            if (x < 0 || x > 0x7fffffff) {
                rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: cases[%d].topk[%d][%d]: bad token id %lld",
                              path, ci, s, j, (long long)x);
                goto out;
            }
            ids[(size_t)s * k + j] = (int32_t)x;
            /* decimal -> double -> float: the path the writer verifies */
            lg[(size_t)s * k + j] = (float)json_number_value(jl);
        }
    }
    moe_trace_case c = {name, prompt, np, expected, ne, k, ids, lg};
    rc = add_case(t, &c, rec, path, ci, err, errlen);
    if (rc == MOE_EINVAL) rc = MOE_EFORMAT; /* in a file, a bad value is a format error */
out:
    free(prompt);
    free(expected);
    free(ids);
    free(lg);
    return rc;
}

static int load_json(moe_trace *t, json_t *root, char *err, size_t errlen) {
    const char *path = t->path;
    if (!json_is_object(root))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: expected a JSON object at the top level", path);
    static const char *const top_keys[] = {"format", "model", "gate", "cases", NULL};
    int rc = check_keys(root, top_keys, path, "", err, errlen);
    if (rc) return rc;
    const char *fmt;
    if ((rc = get_string(root, "format", path, "(top)", &fmt, err, errlen))) return rc;
    if (strcmp(fmt, TRACE_FORMAT) != 0)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: format: \"%s\" is not \"" TRACE_FORMAT "\"", path, fmt);

    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: model: %s", path, model ? "expected an object" : "missing");
    static const char *const model_keys[] = {"file", "sha256", "arch", NULL};
    if ((rc = check_keys(model, model_keys, path, "model", err, errlen))) return rc;
    const char *file, *sha, *arch;
    if ((rc = get_string(model, "file", path, "model", &file, err, errlen)) ||
        (rc = get_string(model, "sha256", path, "model", &sha, err, errlen)) ||
        (rc = get_string(model, "arch", path, "model", &arch, err, errlen)))
        return rc;
    if (!*file || strchr(file, '/'))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: model.file: \"%s\" is not a file name", path, file);
    if (!is_sha256_hex(sha))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: model.sha256: \"%s\" is not 64 lowercase hex digits",
                        path, sha);
    if (!*arch) return moe_errf(err, errlen, MOE_EFORMAT, "%s: model.arch: empty", path);

    json_t *gate = json_object_get(root, "gate");
    if (!json_is_object(gate))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: gate: %s", path, gate ? "expected an object" : "missing");
    static const char *const gate_keys[] = {"steps", "tie_tolerance", NULL};
    if ((rc = check_keys(gate, gate_keys, path, "gate", err, errlen))) return rc;
    json_t *js = json_object_get(gate, "steps"), *jt = json_object_get(gate, "tie_tolerance");
    if (!js || !json_is_integer(js) || json_integer_value(js) < 1 || json_integer_value(js) > 1000000)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: gate.steps: %s", path,
                        js ? "expected an integer 1..1000000" : "missing");
    if (!jt || !json_is_number(jt) || !(json_number_value(jt) >= 0) || !isfinite(json_number_value(jt)))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: gate.tie_tolerance: %s", path,
                        jt ? "expected a non-negative number" : "missing");

    json_t *cases = json_object_get(root, "cases");
    if (!cases) return moe_errf(err, errlen, MOE_EFORMAT, "%s: cases: missing", path);
    if (!json_is_array(cases) || json_array_size(cases) == 0)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: cases: expected a non-empty array", path);

    if (!(t->file = dup_str(file)) || !(t->sha256 = dup_str(sha)) || !(t->arch = dup_str(arch)))
        return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path);
    t->steps = (int)json_integer_value(js);
    t->tie = (float)json_number_value(jt);
    for (size_t i = 0; i < json_array_size(cases); i++)
        if ((rc = load_case(t, json_array_get(cases, i), (int)i, err, errlen))) return rc;
    return MOE_OK;
}

int moe_trace_load(const char *path, moe_trace **out, char *err, size_t errlen) {
    *out = NULL;
    if (!path) return moe_errf(err, errlen, MOE_EINVAL, "trace: NULL path");
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        FILE *f = fopen(path, "rb");
        if (!f) return moe_errf(err, errlen, MOE_EIO, "%s: cannot open: %s", path, strerror(errno));
        fclose(f);
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: invalid JSON at line %d column %d (byte %d): %s",
                        path, je.line, je.column, je.position, je.text);
    }
    moe_trace *t = calloc(1, sizeof *t);
    if (!t || !(t->path = dup_str(path))) {
        free(t);
        json_decref(root);
        return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path);
    }
    int rc = load_json(t, root, err, errlen);
    json_decref(root);
    if (rc) { moe_trace_free(t); return rc; }
    *out = t;
    return MOE_OK;
}

int moe_trace_check_model(const moe_trace *t, moe_model *m, char *err, size_t errlen) {
    if (!t || !m) return moe_errf(err, errlen, MOE_EINVAL, "trace: NULL argument");
    const char *mpath = moe_model_path(m);
    const char *mfile = mpath ? base_name(mpath) : "";
    const char *arch = moe_model_arch(m);
    if (strcmp(t->file, mfile) != 0)
        return moe_errf(err, errlen, MOE_EINVAL, "%s: model.file: trace was recorded on \"%s\", not \"%s\"",
                        t->path, t->file, mfile);
    if (!arch || strcmp(t->arch, arch) != 0)
        return moe_errf(err, errlen, MOE_EINVAL, "%s: model.arch: trace has \"%s\" but %s is \"%s\"",
                        t->path, t->arch, mpath ? mpath : "the model", arch ? arch : "(none)");
    const char *sha = moe_model_sha256(m);
    if (!sha || strcmp(t->sha256, sha) != 0)
        return moe_errf(err, errlen, MOE_EINVAL,
                        "%s: model.sha256: trace has %s but %s has %s (a different file with the same name)",
                        t->path, t->sha256, mpath ? mpath : "the model", sha ? sha : "(none)");
    int nv = moe_model_n_vocab(m);
    for (int i = 0; i < t->n; i++) {
        const moe_trace_case *c = &t->cases[i].c;
        for (int j = 0; j < c->n_prompt; j++)
            if (c->prompt[j] >= nv)
                return moe_errf(err, errlen, MOE_ERANGE, "%s: cases[%d].prompt_tokens[%d]: id %d >= n_vocab %d",
                                t->path, i, j, (int)c->prompt[j], nv);
        for (int j = 0; j < c->n_expected * c->top_k; j++)
            if (c->topk_ids[j] >= nv)
                return moe_errf(err, errlen, MOE_ERANGE, "%s: cases[%d].topk[%d][%d]: id %d >= n_vocab %d",
                                t->path, i, j / c->top_k, j % c->top_k, (int)c->topk_ids[j], nv);
    }
    return MOE_OK;
}

/* ---- creating and saving ---------------------------------------------------- */

int moe_trace_new(moe_model *m, int steps, float tie_tolerance, moe_trace **out, char *err,
                  size_t errlen) {
    *out = NULL;
    if (!m) return moe_errf(err, errlen, MOE_EINVAL, "trace: NULL model");
    if (steps < 1 || steps > 1000000)
        return moe_errf(err, errlen, MOE_EINVAL, "trace: steps %d out of range 1..1000000", steps);
    if (!(tie_tolerance >= 0) || !isfinite(tie_tolerance))
        return moe_errf(err, errlen, MOE_EINVAL, "trace: tie tolerance must be a non-negative number");
    const char *p = moe_model_path(m), *sha = moe_model_sha256(m), *arch = moe_model_arch(m);
    if (!p || !sha || !arch)
        return moe_errf(err, errlen, MOE_EINVAL, "trace: the model has no path, sha256 or architecture");
    moe_trace *t = calloc(1, sizeof *t);
    if (!t) return moe_errf(err, errlen, MOE_ENOMEM, "trace: out of memory");
    t->path = dup_str("(new trace)");
    t->file = dup_str(base_name(p));
    t->sha256 = dup_str(sha);
    t->arch = dup_str(arch);
    t->steps = steps;
    t->tie = tie_tolerance;
    if (!t->path || !t->file || !t->sha256 || !t->arch) {
        moe_trace_free(t);
        return moe_errf(err, errlen, MOE_ENOMEM, "trace: out of memory");
    }
    *out = t;
    return MOE_OK;
}

/* Shortest %.Ng that reads back (through strtod then a float cast, like the
 * loader) as exactly v; -0 gets a decimal point so JSON keeps it a real. */
static void fmt_float(char *buf, size_t len, float v) {
    if (v == 0.0f) { snprintf(buf, len, signbit(v) ? "-0.0" : "0"); return; }
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, len, "%.*g", prec, (double)v);
        float back = (float)strtod(buf, NULL);
        if (memcmp(&back, &v, sizeof v) == 0) return;
    }
    snprintf(buf, len, "%.9g", (double)v); /* 9 digits always identify a float */
}

static int put_json_string(FILE *f, const char *s) {
    json_t *js = json_string(s);
    char *d = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
    json_decref(js);
    if (!d) return -1;
    fputs(d, f);
    free(d);
    return 0;
}

static int write_trace(FILE *f, const moe_trace *t) {
    char b[48];
    int bad = 0;
    fprintf(f, "{\n  \"format\": \"" TRACE_FORMAT "\",\n  \"model\": {\"file\": ");
    bad |= put_json_string(f, t->file);
    fprintf(f, ", \"sha256\": ");
    bad |= put_json_string(f, t->sha256);
    fprintf(f, ", \"arch\": ");
    bad |= put_json_string(f, t->arch);
    fmt_float(b, sizeof b, t->tie);
    fprintf(f, "},\n  \"gate\": {\"steps\": %d, \"tie_tolerance\": %s},\n  \"cases\": [", t->steps, b);
    for (int i = 0; i < t->n; i++) {
        const trace_case *tc = &t->cases[i];
        const moe_trace_case *c = &tc->c;
        fprintf(f, "%s\n    {\n      \"name\": ", i ? "," : "");
        bad |= put_json_string(f, c->name);
        if (tc->recorded_with) {
            fprintf(f, ",\n      \"recorded_with\": ");
            bad |= put_json_string(f, tc->recorded_with);
        }
        fprintf(f, ",\n      \"prompt_tokens\": [");
        for (int j = 0; j < c->n_prompt; j++) fprintf(f, "%s%d", j ? ", " : "", (int)c->prompt[j]);
        fprintf(f, "],\n      \"expected_tokens\": [");
        for (int j = 0; j < c->n_expected; j++) fprintf(f, "%s%d", j ? ", " : "", (int)c->expected[j]);
        fprintf(f, "],\n      \"topk\": [");
        for (int s = 0; s < c->n_expected; s++) {
            fprintf(f, "%s\n        [", s ? "," : "");
            for (int j = 0; j < c->top_k; j++) {
                fmt_float(b, sizeof b, c->topk_logits[(size_t)s * c->top_k + j]);
                fprintf(f, "%s[%d, %s]", j ? ", " : "", (int)c->topk_ids[(size_t)s * c->top_k + j], b);
            }
            fprintf(f, "]");
        }
        fprintf(f, "\n      ]\n    }");
    }
    fprintf(f, "\n  ]\n}\n");
    return bad;
}

int moe_trace_save(const moe_trace *t, const char *path, char *err, size_t errlen) {
    if (!t || !path) return moe_errf(err, errlen, MOE_EINVAL, "trace: NULL argument");
    if (t->n == 0) return moe_errf(err, errlen, MOE_EINVAL, "%s: a trace needs at least one case", path);
    size_t n = strlen(path);
    char *tmp = malloc(n + 32);
    if (!tmp) return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path);
    /* O_EXCL on a per-process name instead of mkstemp: the file gets the
     * usual 0666 & ~umask permissions, not mkstemp's 0600 */
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        snprintf(tmp, n + 32, "%s.tmp.%d.%d", path, (int)getpid(), tries);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        int e = errno;
        free(tmp);
        return moe_errf(err, errlen, MOE_EIO, "%s: cannot create a temporary file: %s", path, strerror(e));
    }
    FILE *f = fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        free(tmp);
        return moe_errf(err, errlen, MOE_EIO, "%s: %s", path, strerror(e));
    }
    int bad = write_trace(f, t);
    bad |= fflush(f) != 0 || ferror(f);
    bad |= fsync(fileno(f)) != 0;
    int e = errno;
    bad |= fclose(f) != 0;
    if (!bad && rename(tmp, path) != 0) { e = errno; bad = 1; }
    if (bad) {
        unlink(tmp);
        free(tmp);
        return moe_errf(err, errlen, MOE_EIO, "%s: write failed: %s", path, strerror(e));
    }
    free(tmp);
    return MOE_OK;
}

/* ---- top-k, recording, gate ------------------------------------------------- */

int moe_topk(const float *logits, int n, int k, int32_t *ids, float *vals) {
    int cnt = 0;
    if (k <= 0 || n <= 0) return 0;
    for (int i = 0; i < n; i++) {
        float v = logits[i];
        if (v != v) continue; /* NaN never ranks */
        /* ids arrive ascending, so an equal value never displaces an earlier id */
        if (cnt == k && !(v > vals[cnt - 1])) continue;
        int j = cnt < k ? cnt++ : cnt - 1;
        while (j > 0 && v > vals[j - 1]) {
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = v;
        ids[j] = i;
    }
    return cnt;
}

/* Adds the recorded case with its "recorded_with" note, sized to fit: the
 * flag list grows with every flag added (it was cut at 96 characters). */
static int record_note(moe_trace *t, const moe_model *m, int n_threads, const char *name, const int32_t *prompt,
                       int n_prompt, int32_t *exp, int steps, int k, int32_t *ids, float *lg, char *err, size_t errlen) {
    size_t cap = 256;
    char *fl = NULL;
    for (;;) { /* moe_model_flags truncates silently: grow until the text leaves room */
        char *nf = realloc(fl, cap);
        if (!nf) { free(fl); return moe_errf(err, errlen, MOE_ENOMEM, "trace record: out of memory"); }
        fl = nf;
        moe_model_flags(m, fl, cap);
        if (strlen(fl) + 1 < cap) break;
        cap *= 2;
    }
    char th[16] = "default";
    if (n_threads > 0) snprintf(th, sizeof th, "%d", n_threads);
    const char *isa = moe_isa_name();
    size_t need = strlen(fl) + strlen(isa) + strlen(th) + 32;
    char *rec = malloc(need);
    if (!rec) { free(fl); return moe_errf(err, errlen, MOE_ENOMEM, "trace record: out of memory"); }
    snprintf(rec, need, "flags=%s isa=%s threads=%s", fl, isa, th);
    moe_trace_case c = {name, prompt, n_prompt, exp, steps, k, ids, lg};
    int rc = add_case(t, &c, rec, t->path, t->n, err, errlen);
    free(rec);
    free(fl);
    return rc;
}

int moe_trace_record(moe_trace *t, moe_model *m, const char *name, const int32_t *prompt,
                     int n_prompt, int steps, int n_threads, char *err, size_t errlen) {
    if (!t || !m || !name || !prompt || n_prompt < 1 || steps < 1)
        return moe_errf(err, errlen, MOE_EINVAL, "trace record: bad argument");
    int rc = moe_trace_check_model(t, m, err, errlen);
    if (rc) return rc;
    int nv = moe_model_n_vocab(m);
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= nv)
            return moe_errf(err, errlen, MOE_ERANGE, "trace record: prompt token %d: id %d out of range 0..%d",
                            i, (int)prompt[i], nv - 1);
    const int k = MOE_TRACE_TOPK;
    float *logits = malloc((size_t)nv * sizeof *logits);
    int32_t *exp = malloc((size_t)steps * sizeof *exp);
    int32_t *ids = malloc((size_t)steps * k * sizeof *ids);
    float *lg = malloc((size_t)steps * k * sizeof *lg);
    moe_session *s = NULL;
    if (!logits || !exp || !ids || !lg) { rc = moe_errf(err, errlen, MOE_ENOMEM, "trace record: out of memory"); goto out; }
    moe_session_params sp = {.n_ctx = n_prompt + steps, .n_threads = n_threads, .n_batch = 0};
    if ((rc = moe_session_new(m, &sp, &s, err, errlen))) goto out;
    /* top-k outputs: with lm_screen only the rows that can reach the top k
     * are computed; the same ids and bits as the full logits */
    if ((rc = moe_session_forward_topk(s, prompt, n_prompt, k, ids, lg))) {
        rc = moe_errf(err, errlen, rc, "trace record: %s", moe_session_error(s));
        goto out;
    }
    for (int st = 0; st < steps; st++) {
        int32_t tok = ids[(size_t)st * k];
        if (ids[(size_t)st * k + k - 1] < 0) {
            rc = moe_errf(err, errlen, MOE_EINVAL,
                          "trace record: step %d: logits contain NaN or the vocabulary is smaller than %d", st, k);
            goto out;
        }
        exp[st] = tok;
        if (st + 1 < steps &&
            (rc = moe_session_forward_topk(s, &tok, 1, k, ids + (size_t)(st + 1) * k, lg + (size_t)(st + 1) * k))) {
            rc = moe_errf(err, errlen, rc, "trace record: step %d: %s", st + 1, moe_session_error(s));
            goto out;
        }
    }
    rc = record_note(t, m, n_threads, name, prompt, n_prompt, exp, steps, k, ids, lg, err, errlen);
out:
    moe_session_free(s);
    free(logits);
    free(exp);
    free(ids);
    free(lg);
    return rc;
}

/* Checks one step; returns true when it passes. Fills the divergence fields
 * of r when it does not (and r has none yet). */
static bool gate_step(const moe_trace *t, moe_session *s, const int32_t *ids, const float *vals, int n, int ci,
                      int st, int32_t expected, int32_t *actual_out, moe_gate_result *r) {
    int32_t actual = ids[0];
    *actual_out = actual;
    if (actual == expected) return true;
    bool in_top = false;
    for (int j = 0; j < n; j++) in_top |= ids[j] == expected;
    float le = NAN;
    moe_session_last_logit(s, expected, &le);
    float margin = vals[0] - le;
    if (in_top && margin <= t->tie) { r->n_ties++; return true; }
    if (r->n_fail++ == 0) {
        r->case_index = ci;
        r->step = st;
        r->expected = expected;
        r->actual = actual;
        r->margin = margin;
        r->expected_in_topk = in_top;
        r->n_top = n;
        memcpy(r->top_ids, ids, (size_t)n * sizeof *ids);
        memcpy(r->top_logits, vals, (size_t)n * sizeof *vals);
    }
    return false;
}

int moe_trace_gate(moe_model *m, const moe_trace *t, const moe_gate_params *p, moe_gate_result *r,
                   char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->case_index = r->step = -1;
    if (!m || !t) return moe_errf(err, errlen, MOE_EINVAL, "gate: NULL argument");
    moe_gate_params dp = {0};
    if (!p) p = &dp;
    int rc = moe_trace_check_model(t, m, err, errlen);
    if (rc) return rc;
    int steps = p->steps > 0 ? p->steps : t->steps;
    int need = 0, found = 0;
    for (int i = 0; i < t->n; i++) {
        const moe_trace_case *c = &t->cases[i].c;
        if (p->only_case && strcmp(p->only_case, c->name) != 0) continue;
        found++;
        if (steps > c->n_expected)
            return moe_errf(err, errlen, MOE_EINVAL, "%s: cases[%d] (\"%s\") records %d steps, %d requested",
                            t->path, i, c->name, c->n_expected, steps);
        if (c->n_prompt + steps > need) need = c->n_prompt + steps;
    }
    if (!found)
        return moe_errf(err, errlen, MOE_EINVAL, "%s: no case named \"%s\"", t->path, p->only_case);
    int32_t ids[MOE_TRACE_TOPK];
    float vals[MOE_TRACE_TOPK];
    const int kt = MOE_TRACE_TOPK < moe_model_n_vocab(m) ? MOE_TRACE_TOPK : moe_model_n_vocab(m);
    moe_session *s = NULL;
    moe_session_params sp = {.n_ctx = need, .n_threads = p->n_threads, .n_batch = 0};
    if ((rc = moe_session_new(m, &sp, &s, err, errlen))) return rc;
    bool stop = p->free_run || p->stop_at_first;
    for (int ci = 0; ci < t->n && !(stop && r->n_fail); ci++) {
        const moe_trace_case *c = &t->cases[ci].c;
        if (p->only_case && strcmp(p->only_case, c->name) != 0) continue;
        if ((rc = moe_session_truncate(s, 0))) {
            rc = moe_errf(err, errlen, rc, "%s: %s", t->path, moe_session_error(s));
            break;
        }
        /* the whole prompt in one call: prefill must equal decode */
        if ((rc = moe_session_forward_topk(s, c->prompt, c->n_prompt, kt, ids, vals))) {
            rc = moe_errf(err, errlen, rc, "%s: case \"%s\": prompt: %s", t->path, c->name, moe_session_error(s));
            break;
        }
        r->n_cases++;
        for (int st = 0; st < steps; st++) {
            int32_t actual;
            r->n_steps++;
            int nt = 0;
            while (nt < kt && ids[nt] >= 0) nt++;
            bool ok = gate_step(t, s, ids, vals, nt, ci, st, c->expected[st], &actual, r);
            /* free run: the model's own token; past a tolerated tie its
             * continuation is no longer comparable with the golden one */
            if (p->free_run && (!ok || actual != c->expected[st])) break;
            if (!ok && p->stop_at_first) break;
            if (st + 1 == steps) break;
            int32_t next = c->expected[st]; /* == actual in free mode here */
            if ((rc = moe_session_forward_topk(s, &next, 1, kt, ids, vals))) {
                rc = moe_errf(err, errlen, rc, "%s: case \"%s\": step %d: %s", t->path, c->name, st + 1,
                              moe_session_error(s));
                break;
            }
        }
        if (rc) break;
    }
    moe_session_free(s);
    r->pass = rc == MOE_OK && r->n_fail == 0;
    return rc;
}
