/* test_trace.c — golden-trace loader, writer, top-k, provenance check, and a
 * record -> gate round trip on an oracle model. */
#include "check.h"
#include "moefast.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <unistd.h>

static const char *SHA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

static char tmp_path[256];

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    fputs(text, f);
    fclose(f);
}

/* A valid trace with `extra` spliced in at marker positions by the caller. */
static void make_trace(char *buf, size_t len, const char *top_extra, const char *model_extra,
                       const char *gate_extra, const char *case_extra, const char *prompt,
                       const char *sha, int steps) {
    snprintf(buf, len,
             "{\"format\": \"moefast-trace/1\"%s,\n"
             " \"model\": {\"file\": \"m.gguf\", \"sha256\": \"%s\", \"arch\": \"qwen3moe\"%s},\n"
             " \"gate\": {\"steps\": %d, \"tie_tolerance\": 1e-06%s},\n"
             " \"cases\": [{\"name\": \"a\", \"prompt_tokens\": %s, \"expected_tokens\": [5, 7]%s,\n"
             "   \"topk\": [[[5, 2.5], [3, 1.25], [9, 1.25]], [[7, 0.5], [1, -1e-07], [2, -3.0]]]}]}\n",
             top_extra, sha, model_extra, steps, gate_extra, prompt, case_extra);
}

static int load_text(const char *text, moe_trace **t, char *err) {
    write_file(tmp_path, text);
    return moe_trace_load(tmp_path, t, err, MOE_ERR_LEN);
}

/* Loading must fail with a one-line message containing `needle`. */
static void expect_bad(const char *text, const char *needle, int line) {
    moe_trace *t = NULL;
    char err[MOE_ERR_LEN] = "";
    int rc = load_text(text, &t, err);
    CHECK_MSG(rc < 0 && t == NULL, "line %d: rc %d", line, rc);
    CHECK_MSG(strstr(err, needle) != NULL, "line %d: \"%s\" lacks \"%s\"", line, err, needle);
    CHECK_MSG(strchr(err, '\n') == NULL, "line %d: multi-line message", line);
    CHECK_MSG(strstr(err, tmp_path) != NULL, "line %d: message does not name the file: %s", line, err);
    moe_trace_free(t);
}

static void test_topk(void) {
    float v[10] = {1, 3, 3, -2, 7, NAN, 7, 0, 3, -INFINITY};
    int32_t ids[8];
    float vals[8];
    int n = moe_topk(v, 10, 5, ids, vals);
    CHECK_EQ_INT(n, 5);
    int32_t want[5] = {4, 6, 1, 2, 8};
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(ids[i], want[i]);
    CHECK(vals[0] == 7 && vals[2] == 3 && vals[4] == 3);
    n = moe_topk(v, 3, 8, ids, vals);
    CHECK_EQ_INT(n, 3);
    CHECK(ids[0] == 1 && ids[1] == 2 && ids[2] == 0);
    CHECK_EQ_INT(moe_topk(v, 10, 0, ids, vals), 0);
    /* the gate relies on ids[0] being moe_argmax's choice */
    float w[6] = {-1, 5, 2, 5, 5, 1};
    moe_topk(w, 6, 1, ids, vals);
    CHECK_EQ_INT(ids[0], moe_argmax(w, 6));
    CHECK_EQ_INT(ids[0], 1);
}

static void test_load_valid(void) {
    char buf[4096];
    make_trace(buf, sizeof buf, "", "", "", "", "[1, 2, 3]", SHA, 2);
    moe_trace *t = NULL;
    char err[MOE_ERR_LEN] = "";
    int rc = load_text(buf, &t, err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (rc) return;
    CHECK_EQ_INT(moe_trace_n_cases(t), 1);
    CHECK_EQ_INT(moe_trace_steps(t), 2);
    CHECK(moe_trace_tie_tolerance(t) == 1e-6f);
    const moe_trace_case *c = moe_trace_case_at(t, 0);
    CHECK(c && !strcmp(c->name, "a") && c->n_prompt == 3 && c->n_expected == 2 && c->top_k == 3);
    CHECK(c && c->prompt[2] == 3 && c->expected[1] == 7 && c->topk_ids[4] == 1);
    CHECK(c && c->topk_logits[4] == -1e-7f && c->topk_logits[1] == 1.25f);
    CHECK(moe_trace_case_at(t, 1) == NULL && moe_trace_case_at(t, -1) == NULL);
    const char *f, *s, *a;
    moe_trace_provenance(t, &f, &s, &a);
    CHECK(!strcmp(f, "m.gguf") && !strcmp(s, SHA) && !strcmp(a, "qwen3moe"));

    /* save -> load is the identity, including the recorded_with note */
    char out[300];
    snprintf(out, sizeof out, "%s.saved", tmp_path);
    CHECK_EQ_INT(moe_trace_save(t, out, err, sizeof err), MOE_OK);
    moe_trace *t2 = NULL;
    rc = moe_trace_load(out, &t2, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (!rc) {
        const moe_trace_case *d = moe_trace_case_at(t2, 0);
        CHECK(d->n_expected == 2 && d->top_k == 3 && !memcmp(d->topk_logits, c->topk_logits, 6 * sizeof(float)));
        CHECK(moe_trace_tie_tolerance(t2) == moe_trace_tie_tolerance(t));
    }
    moe_trace_free(t2);
    unlink(out);
    moe_trace_free(t);
}

/* Random finite floats (every exponent, subnormals, -0) survive save -> load bit-exactly. */
static void test_roundtrip_bits(void) {
    char buf[4096], err[MOE_ERR_LEN] = "";
    make_trace(buf, sizeof buf, "", "", "", "", "[1]", SHA, 1);
    moe_trace *t = NULL;
    if (load_text(buf, &t, err) != MOE_OK) { CHECK_MSG(0, "%s", err); return; }
    enum { STEPS = 200, K = 8 };
    int32_t exp[STEPS], ids[STEPS * K];
    float lg[STEPS * K];
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int s = 0; s < STEPS; s++) {
        float row[K];
        for (int j = 0; j < K; j++) {
            float f;
            do {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                uint32_t u = (uint32_t)(x >> 20);
                memcpy(&f, &u, 4);
            } while (!isfinite(f));
            row[j] = f;
        }
        if (s == 0) { row[0] = -0.0f; row[1] = FLT_MAX; row[2] = -FLT_MAX; row[3] = FLT_TRUE_MIN; row[4] = 1e-6f; }
        /* sort descending (insertion), ids 0..K-1 in that order */
        for (int a = 1; a < K; a++)
            for (int b = a; b > 0 && row[b] > row[b - 1]; b--) { float tt = row[b]; row[b] = row[b - 1]; row[b - 1] = tt; }
        for (int j = 0; j < K; j++) {
            /* equal values (e.g. 0 and -0) need ascending ids: id j is ascending */
            ids[s * K + j] = j;
            lg[s * K + j] = row[j];
        }
        exp[s] = 0;
    }
    int32_t prompt[2] = {4, 0};
    moe_trace_case c = {"bits", prompt, 2, exp, STEPS, K, ids, lg};
    int rc = moe_trace_add_case(t, &c, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    c.name = "a";
    CHECK_EQ_INT(moe_trace_add_case(t, &c, err, sizeof err), MOE_EINVAL); /* duplicate name */
    CHECK_STR_CONTAINS(err, "duplicate");
    char out[300];
    snprintf(out, sizeof out, "%s.bits", tmp_path);
    CHECK_EQ_INT(moe_trace_save(t, out, err, sizeof err), MOE_OK);
    moe_trace *t2 = NULL;
    rc = moe_trace_load(out, &t2, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (!rc) {
        const moe_trace_case *d = moe_trace_case_at(t2, 1);
        CHECK(d && !strcmp(d->name, "bits") && d->n_expected == STEPS);
        int diff = 0;
        for (int i = 0; d && i < STEPS * K; i++) diff += memcmp(&d->topk_logits[i], &lg[i], 4) != 0;
        CHECK_EQ_INT(diff, 0);
        int nz = 0;
        for (int i = 0; d && i < STEPS * K; i++)
            if (lg[i] == 0.0f && signbit(lg[i])) { nz++; CHECK(signbit(d->topk_logits[i])); }
        CHECK(nz >= 1);
    }
    moe_trace_free(t2);
    unlink(out);
    /* a failed save leaves nothing behind */
    CHECK(moe_trace_save(t, "/nonexistent-dir/x.json", err, sizeof err) == MOE_EIO);
    CHECK_STR_CONTAINS(err, "/nonexistent-dir/x.json");
    moe_trace_free(t);
}

static void test_malformed(void) {
    char b[4096];
    make_trace(b, sizeof b, ", \"extra\": 1", "", "", "", "[1]", SHA, 2);
    expect_bad(b, "\"extra\": unknown field", __LINE__);
    make_trace(b, sizeof b, "", ", \"size\": 3", "", "", "[1]", SHA, 2);
    expect_bad(b, "model.\"size\": unknown field", __LINE__);
    make_trace(b, sizeof b, "", "", ", \"stepz\": 3", "", "[1]", SHA, 2);
    expect_bad(b, "gate.\"stepz\": unknown field", __LINE__);
    make_trace(b, sizeof b, "", "", "", ", \"note\": \"x\"", "[1]", SHA, 2);
    expect_bad(b, "cases[0].\"note\": unknown field", __LINE__);
    make_trace(b, sizeof b, "", "", "", "", "[1, -4]", SHA, 2);
    expect_bad(b, "cases[0].prompt_tokens[1]: negative token id -4", __LINE__);
    make_trace(b, sizeof b, "", "", "", "", "[1, 2.5]", SHA, 2);
    expect_bad(b, "cases[0].prompt_tokens[1]", __LINE__);
    make_trace(b, sizeof b, "", "", "", "", "[]", SHA, 2);
    expect_bad(b, "cases[0].prompt_tokens: empty", __LINE__);
    make_trace(b, sizeof b, "", "", "", "", "[1]", "0123", 2);
    expect_bad(b, "model.sha256", __LINE__);
    make_trace(b, sizeof b, "", "", "", "", "[1]", SHA, 3);
    expect_bad(b, "fewer than gate.steps 3", __LINE__);
    make_trace(b, sizeof b, "", "", "", "", "[1]", SHA, 0);
    expect_bad(b, "gate.steps", __LINE__);
    expect_bad("{\"format\": \"moefast-trace/1\", ", "invalid JSON at line 1", __LINE__);
    expect_bad("[1, 2]", "top level", __LINE__);
    expect_bad("", "invalid JSON", __LINE__);
    /* the remaining cases edit a valid trace textually */
    char base[4096];
    make_trace(base, sizeof base, "", "", "", "", "[1]", SHA, 2);
    struct { const char *from, *to, *needle; } edits[] = {
        {"moefast-trace/1", "moefast-trace/2", "format: \"moefast-trace/2\""},
        {"\"arch\": \"qwen3moe\"", "\"arch\": 7", "model.arch: expected a string"},
        {"\"file\": \"m.gguf\"", "\"file\": \"x/m.gguf\"", "model.file"},
        {"\"expected_tokens\": [5, 7]", "\"expected_tokens\": [5, -7]", "expected_tokens[1]: negative token id -7"},
        {"\"expected_tokens\": [5, 7]", "\"expected_tokens\": [5, 1]", "expected_tokens[1]: 1 is not the top-1 id 7"},
        {"[[5, 2.5], [3, 1.25], [9, 1.25]]", "[[5, 2.5], [9, 1.25], [3, 1.25]]", "topk[0][2]: not in descending"},
        {"[[5, 2.5], [3, 1.25], [9, 1.25]]", "[[5, 2.5], [3, 1.25], [-9, 1.25]]", "topk[0][2]: bad token id -9"},
        {"[[7, 0.5], [1, -1e-07], [2, -3.0]]", "[[7, 0.5], [1, -1e-07]]", "topk[1]: expected 3 [id, logit] pairs"},
        {"[[5, 2.5], [3, 1.25], [9, 1.25]]", "[[5, 2.5], [3, 1.25], [3, 1.25]]", "id 3 listed twice"},
        {"[[5, 2.5], [3, 1.25], [9, 1.25]]", "[[5, 2.5], [3, \"x\"], [9, 1.25]]", "topk[0][1]: expected [id, logit]"},
        {"\"tie_tolerance\": 1e-06", "\"tie_tolerance\": -1", "gate.tie_tolerance"},
        {"\"name\": \"a\"", "\"name\": \"a\", \"name\": \"b\"", "duplicate"},
        {"\"cases\": [{", "\"cases\": 3, \"x\": [{", "unknown field"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        const char *p = strstr(base, edits[i].from);
        CHECK_MSG(p != NULL, "edit %zu: pattern not found", i);
        if (!p) continue;
        char e[4096];
        snprintf(e, sizeof e, "%.*s%s%s", (int)(p - base), base, edits[i].to, p + strlen(edits[i].from));
        expect_bad(e, edits[i].needle, (int)(1000 + i));
    }
    moe_trace *t = (moe_trace *)1;
    char err[MOE_ERR_LEN];
    CHECK_EQ_INT(moe_trace_load("/nonexistent/trace.json", &t, err, sizeof err), MOE_EIO);
    CHECK(t == NULL);
    CHECK_STR_CONTAINS(err, "/nonexistent/trace.json");
}

/* Provenance check, record and gate on a real model (skipped when the
 * model file is absent: check_ref). */
static void test_with_model(void) {
    char err[MOE_ERR_LEN] = "";
    const char *path = check_ref("oracle/qwen3moe-tiny-f32.gguf");
    if (!path) return;
    /* recorded on the reference path, gated on the default (optimised) one */
    moe_model *m = NULL, *ref = NULL;
    moe_load_params lp = {.flags = "none"}, dp = {.flags = "default"};
    int rc = moe_model_load(path, &lp, &ref, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (rc) return;
    rc = moe_model_load(path, &dp, &m, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (rc) { moe_model_free(ref); return; }
    moe_trace *t = NULL;
    CHECK_EQ_INT(moe_trace_new(m, 6, 1e-6f, &t, err, sizeof err), MOE_OK);
    int32_t p1[] = {588, 418, 515, 478, 560, 429, 258, 462, 489, 13, 573, 552, 259, 377};
    int32_t p2[] = {997};
    rc = moe_trace_record(t, ref, "fox", p1, 14, 8, 1, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    rc = moe_trace_record(t, ref, "bos", p2, 1, 6, 1, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    CHECK_EQ_INT(moe_trace_record(t, ref, "big", (int32_t[]){1000}, 1, 6, 1, err, sizeof err), MOE_ERANGE);
    if (moe_trace_n_cases(t) == 2) {
        /* llama.cpp's greedy tokens for this prompt start 132, 525 (top-2 margins 0.8 and 0.026) */
        const moe_trace_case *c = moe_trace_case_at(t, 0);
        CHECK_EQ_INT(c->expected[0], 132);
        CHECK_EQ_INT(c->top_k, MOE_TRACE_TOPK);
        char out[300];
        snprintf(out, sizeof out, "%s.rec", tmp_path);
        CHECK_EQ_INT(moe_trace_save(t, out, err, sizeof err), MOE_OK);
        moe_trace *g = NULL;
        rc = moe_trace_load(out, &g, err, sizeof err);
        CHECK_MSG(rc == MOE_OK, "%s", err);
        unlink(out);
        for (int mode = 0; g && mode < 2; mode++)
            for (int th = 1; th <= 2 - mode; th++) {
                moe_gate_params gp = {.free_run = mode == 1, .steps = 0, .n_threads = th};
                moe_gate_result r;
                rc = moe_trace_gate(m, g, &gp, &r, err, sizeof err);
                CHECK_MSG(rc == MOE_OK && r.pass, "mode %d threads %d: rc %d %s", mode, th, rc, err);
                CHECK_EQ_INT(r.n_cases, 2);
                CHECK_EQ_INT(r.n_steps, 12);
                CHECK_EQ_INT(r.n_fail, 0);
            }
        moe_gate_params one = {.only_case = "bos", .stop_at_first = true};
        moe_gate_result r1;
        rc = moe_trace_gate(m, g, &one, &r1, err, sizeof err);
        CHECK_MSG(rc == MOE_OK && r1.pass && r1.n_cases == 1 && r1.n_steps == 6, "rc %d %s", rc, err);
        one.only_case = "nope";
        CHECK_EQ_INT(moe_trace_gate(m, g, &one, &r1, err, sizeof err), MOE_EINVAL);
        CHECK_STR_CONTAINS(err, "no case named \"nope\"");
        /* --steps beyond what a case recorded is an error, not a pass */
        moe_gate_params gp = {.steps = 7};
        moe_gate_result r;
        CHECK_EQ_INT(moe_trace_gate(m, g, &gp, &r, err, sizeof err), MOE_EINVAL);
        CHECK_STR_CONTAINS(err, "\"bos\"");
        moe_trace_free(g);
    }
    CHECK_EQ_INT(moe_trace_check_model(t, m, err, sizeof err), MOE_OK);
    moe_trace_free(t);

    /* provenance mismatches name the field and both values */
    char buf[4096];
    make_trace(buf, sizeof buf, "", "", "", "", "[1]", SHA, 2);
    char *q = strstr(buf, "m.gguf");
    memmove(q + strlen("qwen3moe-tiny-f32.gguf"), q + 6, strlen(q + 6) + 1);
    memcpy(q, "qwen3moe-tiny-f32.gguf", strlen("qwen3moe-tiny-f32.gguf"));
    rc = load_text(buf, &t, err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (!rc) {
        CHECK_EQ_INT(moe_trace_check_model(t, m, err, sizeof err), MOE_EINVAL);
        CHECK_STR_CONTAINS(err, "model.sha256");
        CHECK_STR_CONTAINS(err, SHA);
        CHECK_STR_CONTAINS(err, moe_model_sha256(m));
        moe_trace_free(t);
    }
    make_trace(buf, sizeof buf, "", "", "", "", "[1]", moe_model_sha256(m), 2);
    rc = load_text(buf, &t, err);
    if (!rc) {
        CHECK_EQ_INT(moe_trace_check_model(t, m, err, sizeof err), MOE_EINVAL);
        CHECK_STR_CONTAINS(err, "model.file");
        CHECK_STR_CONTAINS(err, "qwen3moe-tiny-f32.gguf");
        moe_trace_free(t);
    }
    moe_model_free(m);
    moe_model_free(ref);
}

int main(void) {
    snprintf(tmp_path, sizeof tmp_path, "/tmp/moefast-test-trace-%d.json", (int)getpid());
    test_topk();
    test_load_valid();
    test_roundtrip_bits();
    test_malformed();
    test_with_model();
    unlink(tmp_path);
    return check_report("test_trace");
}
