/* test_session_flags.c — moe_session_set_flags: switching forward-time flags
 * on a live session between forward calls leaves the logits bit-identical to
 * a session that never switched (what `moefast bench --ab` relies on); the
 * switch really reaches the forward pass (test_perturb changes exactly the
 * switched calls' logits, test_slow slows exactly those calls, simd re-picks
 * the kernel table); flags fixed at load or session creation, unknown flags
 * and a NULL spec are refused with MOE_EINVAL, the flag named, the set left
 * as it was; the differential twin keeps checking a session that switches. */
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "attention/attn.h"
#include "check.h"
#include "base/flags.h"
#include "model/model.h"
#include "moefast.h"


/* The token stream, in forward calls: two 8-token prefill chunks (so that
 * gemm_batch and the prefill glue are switched too), then single-token
 * decode steps. NTOK > 20 so test_perturb (positions >= 20) bites. */
#define NTOK 30
#define N_PRE 8
#define N_CALLS (2 + NTOK - 2 * N_PRE)
static int32_t toks[NTOK];

static int call_pos(int c) { return c < 2 ? c * N_PRE : 2 * N_PRE + (c - 2); }
static int call_len(int c) { return c < 2 ? N_PRE : 1; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs the stream on a fresh session of path loaded with flags. With b_spec,
 * odd calls run the session's flags changed by b_spec (B) and even calls the
 * original ones (A), switched before every call. lg: [NTOK][V] logits of every
 * position; secs: [N_CALLS] seconds per call, or NULL. Returns MOE_OK or the
 * first failing call's code (message in msg). */
static int run_stream(const char *path, const char *flags, bool diff, const char *b_spec, float *lg,
                      double *secs, char *msg, size_t msglen) {
    char err[MOE_ERR_LEN] = "";
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags, .diff = diff};
    int rc = moe_model_load(path, &lp, &m, err, sizeof err);
    if (rc) { snprintf(msg, msglen, "load: %s", err); return rc; }
    const size_t V = (size_t)moe_model_n_vocab(m);
    moe_session_params sp = {.n_ctx = 64, .n_threads = 2, .n_batch = 0};
    moe_session *s = NULL;
    rc = moe_session_new(m, &sp, &s, err, sizeof err);
    if (rc) { snprintf(msg, msglen, "session: %s", err); moe_model_free(m); return rc; }
    char a[256], b[256], a_abs[272], b_abs[272];
    moe_session_flags(s, a, sizeof a);
    if (b_spec) {
        rc = moe_session_set_flags(s, b_spec, err, sizeof err);
        if (rc) { snprintf(msg, msglen, "set_flags(%s): %s", b_spec, err); goto done; }
        moe_session_flags(s, b, sizeof b);
        snprintf(a_abs, sizeof a_abs, "none,%s", a);
        snprintf(b_abs, sizeof b_abs, "none,%s", b);
    }
    for (int c = 0; c < N_CALLS; c++) {
        if (b_spec) {
            long before = check_allocs();
            rc = moe_session_set_flags(s, c % 2 ? b_abs : a_abs, err, sizeof err);
            if (rc) { snprintf(msg, msglen, "call %d: set_flags: %s", c, err); goto done; }
            CHECK_MSG(check_allocs() == before, "set_flags allocated %ld times", check_allocs() - before);
        }
        const int p = call_pos(c), n = call_len(c);
        double t0 = now_s();
        rc = moe_session_forward(s, toks + p, n, lg + (size_t)p * V, true);
        if (secs) secs[c] = now_s() - t0;
        if (rc) { snprintf(msg, msglen, "call %d: %s", c, moe_session_error(s)); goto done; }
    }
done:
    moe_session_free(s);
    moe_model_free(m);
    return rc;
}

/* Number of positions in [p0, p1) whose logits differ in any bit. */
static int diff_positions(const float *x, const float *y, size_t V, int p0, int p1) {
    int d = 0;
    for (int p = p0; p < p1; p++) d += memcmp(x + (size_t)p * V, y + (size_t)p * V, V * sizeof(float)) != 0;
    return d;
}

/* Every property within one numerics (num: "" or e.g. "+act_q8,+kv_f16"). */
static void check_model(const char *path, const char *name, const char *num, size_t V) {
    char spec[64], msg[MOE_ERR_LEN] = "", what[160];
    const char *load = num[0] ? num : NULL; /* NULL: the default flags */
    float *ref = calloc((size_t)NTOK * V, sizeof(float)), *x = calloc((size_t)NTOK * V, sizeof(float));
    if (!ref || !x) { CHECK_MSG(0, "out of memory"); free(ref); free(x); return; }
    int rc = run_stream(path, load, false, NULL, ref, NULL, msg, sizeof msg);
    CHECK_MSG(rc == MOE_OK, "%s%s reference: %s", name, num, msg);
    if (rc) { free(ref); free(x); return; }

    /* each forward-time speed flag switched alone, then all of them at once */
    char all[256] = "";
    for (int i = 0; i < MOE_FLAG_COUNT; i++) {
        const moe_flag_info *f = moe_flag_get(i);
        if (f->fixed || f->test_only) continue;
        snprintf(spec, sizeof spec, "%c%s", f->default_on ? '-' : '+', f->name);
        size_t o = strlen(all);
        snprintf(all + o, sizeof all - o, "%s%s", o ? "," : "", spec);
        rc = run_stream(path, load, false, spec, x, NULL, msg, sizeof msg);
        snprintf(what, sizeof what, "%s%s%s switched every call", name, num[0] ? " " : "", num);
        CHECK_MSG(rc == MOE_OK, "%s: %s: %s", what, spec, msg);
        if (!rc) CHECK_MSG(diff_positions(ref, x, V, 0, NTOK) == 0, "%s: %s: logits differ", what, spec);
    }
    rc = run_stream(path, load, false, all, x, NULL, msg, sizeof msg);
    CHECK_MSG(rc == MOE_OK, "%s%s %s: %s", name, num, all, msg);
    if (!rc) CHECK_MSG(diff_positions(ref, x, V, 0, NTOK) == 0, "%s%s %s switched every call: logits differ", name, num, all);

    /* The switch reaches the forward pass, call by call: test_perturb
     * reverses the expert weighting of the last layer, whose FFN feeds only
     * the logits (nothing that later positions read from the KV cache), so
     * exactly the B calls' positions >= 20 differ and the A calls between
     * them are the reference again. */
    rc = run_stream(path, load, false, "+test_perturb", x, NULL, msg, sizeof msg);
    CHECK_MSG(rc == MOE_OK, "%s%s +test_perturb: %s", name, num, msg);
    if (!rc)
        for (int c = 0; c < N_CALLS; c++) {
            const int p = call_pos(c), n = call_len(c);
            int d = diff_positions(ref, x, V, p, p + n), want = 0;
            for (int q = p; q < p + n; q++) want += c % 2 && q >= 20;
            CHECK_MSG(d == want, "%s%s +test_perturb on odd calls: call %d (positions %d..%d): %d positions differ, expected %d",
                      name, num, c, p, p + n - 1, d, want);
        }
    free(ref);
    free(x);
}

/* The refusals, relative flags, simd's kernel table and the timing flag, on one model. */
static void check_api(const char *path) {
    char err[MOE_ERR_LEN], before[256], after[256], want[256];
    moe_model *m = NULL;
    {   /* two KV cache formats at once: refused at session creation, naming both */
        moe_load_params lq = {.flags = "+kv_f16,+kv_q8"};
        moe_session_params sq = {.n_ctx = 64, .n_threads = 1, .n_batch = 0};
        moe_session *sb = NULL;
        if (moe_model_load(path, &lq, &m, err, sizeof err)) { CHECK_MSG(0, "%s", err); return; }
        err[0] = 0;
        CHECK_EQ_INT(moe_session_new(m, &sq, &sb, err, sizeof err), MOE_EINVAL);
        CHECK(sb == NULL);
        CHECK_STR_CONTAINS(err, "kv_f16 and kv_q8");
        moe_model_free(m);
        m = NULL;
    }
    moe_load_params lp = {.flags = "+act_q8,+kv_f16"};
    if (moe_model_load(path, &lp, &m, err, sizeof err)) { CHECK_MSG(0, "%s", err); return; }
    moe_session_params sp = {.n_ctx = 64, .n_threads = 2, .n_batch = 0};
    moe_session *s = NULL;
    if (moe_session_new(m, &sp, &s, err, sizeof err)) { CHECK_MSG(0, "%s", err); moe_model_free(m); return; }
    moe_session_flags(s, before, sizeof before);
    moe_model_flags(m, after, sizeof after);
    CHECK_MSG(!strcmp(before, after), "a new session's flags %s are not the model's %s", before, after);

    /* every flag fixed at load or creation is refused, named, and nothing changes */
    for (int i = 0; i < MOE_FLAG_COUNT; i++) {
        const moe_flag_info *f = moe_flag_get(i);
        if (!f->fixed) continue;
        char spec[64], name[64];
        snprintf(spec, sizeof spec, "%c%s", moe_flag_on(s->c->flags, (moe_flag)i) ? '-' : '+', f->name);
        snprintf(name, sizeof name, "'%s'", f->name);
        err[0] = 0;
        CHECK_EQ_INT(moe_session_set_flags(s, spec, err, sizeof err), MOE_EINVAL);
        CHECK_STR_CONTAINS(err, name);
        CHECK_MSG(!strchr(err, '\n'), "message is not one line: %s", err);
        moe_session_flags(s, after, sizeof after);
        CHECK_MSG(!strcmp(before, after), "refused %s changed the flags: %s -> %s", spec, before, after);
    }
    /* a refused flag next to an allowed one: the allowed one does not happen either */
    CHECK_EQ_INT(moe_session_set_flags(s, "-parallel_glue,-repack", err, sizeof err), MOE_EINVAL);
    CHECK_STR_CONTAINS(err, "'repack'");
    moe_session_flags(s, after, sizeof after);
    CHECK_MSG(!strcmp(before, after), "a refused spec changed the flags: %s -> %s", before, after);
    /* "default" would drop the numerics flags this session was made with */
    CHECK_EQ_INT(moe_session_set_flags(s, "default", err, sizeof err), MOE_EINVAL);
    CHECK_STR_CONTAINS(err, "'act_q8'");
    /* unknown flags and a NULL spec */
    CHECK_EQ_INT(moe_session_set_flags(s, "+no_such_flag", err, sizeof err), MOE_EINVAL);
    CHECK_STR_CONTAINS(err, "no_such_flag");
    CHECK_EQ_INT(moe_session_set_flags(s, "-parallel_glue,+bogus", err, sizeof err), MOE_EINVAL);
    CHECK_STR_CONTAINS(err, "bogus");
    CHECK_EQ_INT(moe_session_set_flags(s, NULL, err, sizeof err), MOE_EINVAL);
    CHECK_EQ_INT(moe_session_set_flags(NULL, "-simd", err, sizeof err), MOE_EINVAL);
    moe_session_flags(s, after, sizeof after);
    CHECK_MSG(!strcmp(before, after), "a refused spec changed the flags: %s -> %s", before, after);

    /* relative to the current flags: two calls switch two flags off; an
     * empty spec changes nothing (the A/A control of bench --ab) */
    CHECK_EQ_INT(moe_session_set_flags(s, "-parallel_glue", err, sizeof err), MOE_OK);
    CHECK_EQ_INT(moe_session_set_flags(s, "-fused_gate_up", err, sizeof err), MOE_OK);
    CHECK_EQ_INT(moe_session_set_flags(s, "", err, sizeof err), MOE_OK);
    uint64_t w;
    CHECK_EQ_INT(moe_flags_parse("+act_q8,+kv_f16,-parallel_glue,-fused_gate_up", moe_flags_default(), &w, err, sizeof err), MOE_OK);
    moe_flags_format(w, want, sizeof want);
    moe_session_flags(s, after, sizeof after);
    CHECK_MSG(!strcmp(after, want), "after -parallel_glue then -fused_gate_up: %s, expected %s", after, want);

    /* simd: the scalar table when off, and when back on the level the session
     * was created with, even after moe_set_isa (which is for later sessions) */
    const moe_kernels *k0 = s->c->kern;
    CHECK_EQ_INT(moe_session_set_flags(s, "-simd", err, sizeof err), MOE_OK);
    CHECK_EQ_INT(s->c->kern->isa, MOE_ISA_SCALAR);
    CHECK(s->c->attn == moe_isa_table_for(MOE_ISA_SCALAR)->attn);
    if (moe_set_isa("scalar", err, sizeof err) == MOE_OK) {
        CHECK_EQ_INT(moe_session_set_flags(s, "+simd", err, sizeof err), MOE_OK);
        CHECK(s->c->kern == k0);
        CHECK(s->c->attn == moe_isa_table_for(k0->isa)->attn);
        moe_set_isa("auto", err, sizeof err);
    }

    /* test_slow: its 2 ms sleep per token happens exactly while it is on */
    int32_t t = 5;
    float *lg = malloc(sizeof(float) * (size_t)moe_model_n_vocab(m));
    for (int i = 0; i < 4 && lg; i++) {
        CHECK_EQ_INT(moe_session_set_flags(s, i % 2 ? "+test_slow" : "-test_slow", err, sizeof err), MOE_OK);
        double t0 = now_s();
        CHECK_EQ_INT(moe_session_forward(s, &t, 1, lg, false), MOE_OK);
        double dt = now_s() - t0;
        if (i % 2) CHECK_MSG(dt >= 0.002, "a +test_slow step took %.6f s, less than its 2 ms sleep", dt);
    }
    free(lg);
    moe_session_free(s);
    moe_model_free(m);
}

/* moe_session_new_sibling: a sibling with another KV cache format gives the
 * logits of a session created with those flags, on the shared pool, with
 * either session forwarding in between; load-time flags and the pool's
 * thread flag are refused, naming the flag. */
static void check_sibling(const char *path, size_t V) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL, *mq = NULL;
    moe_load_params lq = {.flags = "+kv_q8,-parallel_glue"};
    if (moe_model_load(path, NULL, &m, err, sizeof err) || moe_model_load(path, &lq, &mq, err, sizeof err)) {
        CHECK_MSG(0, "%s", err);
        moe_model_free(m);
        return;
    }
    moe_session_params sp = {.n_ctx = 64, .n_threads = 2, .n_batch = 0};
    moe_session *s = NULL, *sb = NULL, *ref = NULL;
    float *a = calloc(V, sizeof(float)), *b = calloc(V, sizeof(float)), *r = calloc(V, sizeof(float));
    if (!a || !b || !r || moe_session_new(m, &sp, &s, err, sizeof err) || moe_session_new(mq, &sp, &ref, err, sizeof err)) {
        CHECK_MSG(0, "setup: %s", err);
        goto done;
    }
    /* bad arguments: one line, nothing created */
    CHECK_EQ_INT(moe_session_new_sibling(NULL, "+kv_q8", &sb, err, sizeof err), MOE_EINVAL);
    CHECK(sb == NULL);
    CHECK_EQ_INT(moe_session_new_sibling(s, NULL, &sb, err, sizeof err), MOE_EINVAL);
    CHECK(sb == NULL);
    CHECK_EQ_INT(moe_session_new_sibling(s, "+kv_q8", NULL, err, sizeof err), MOE_EINVAL);
    CHECK_EQ_INT(moe_session_new_sibling(s, "+no_such_flag", &sb, err, sizeof err), MOE_EINVAL);
    CHECK_STR_CONTAINS(err, "no_such_flag");
    CHECK_EQ_INT(moe_session_new_sibling(s, "+kv_f16,+kv_q8", &sb, err, sizeof err), MOE_EINVAL);
    CHECK_STR_CONTAINS(err, "kv_f16 and kv_q8");
    CHECK(sb == NULL);
    const char *refused[] = {"-repack", "+act_q8", "-threads", "-readahead"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "'%s'", refused[i] + 1);
        CHECK_EQ_INT(moe_session_new_sibling(s, refused[i], &sb, err, sizeof err), MOE_EINVAL);
        CHECK(sb == NULL);
        CHECK_STR_CONTAINS(err, want);
    }
    CHECK_EQ_INT(moe_session_new_sibling(s, "+kv_q8,-parallel_glue", &sb, err, sizeof err), MOE_OK);
    if (!sb) goto done;
    CHECK_EQ_INT(moe_session_threads(sb), moe_session_threads(s));
    char fb[256], fr[256];
    moe_session_flags(sb, fb, sizeof fb);
    moe_session_flags(ref, fr, sizeof fr);
    CHECK_MSG(!strcmp(fb, fr), "sibling flags %s, expected %s", fb, fr);
    int rc = 0;
    for (int c = 0; c < N_CALLS && !rc; c++) {
        const int p = call_pos(c), n = call_len(c);
        rc = moe_session_forward(s, toks + p, n, a, false) || moe_session_forward(sb, toks + p, n, b, false) ||
             moe_session_forward(ref, toks + p, n, r, false);
        CHECK_MSG(!rc, "forward call %d failed", c);
        CHECK_MSG(!memcmp(b, r, V * sizeof(float)), "sibling logits differ from a kv_q8 session's at call %d", c);
        CHECK_MSG(memcmp(a, b, V * sizeof(float)), "kv_q8 sibling logits equal the FP32 session's at call %d", c);
    }
    /* aligned_buffers is per session: a sibling without it has its buffers 16
     * bytes past a cache line (the reference placement), the session's are on one */
    moe_session *sm = NULL;
    CHECK_EQ_INT(moe_session_new_sibling(s, "-aligned_buffers", &sm, err, sizeof err), MOE_OK);
    if (sm) {
        const void *on[] = {s->c->x, s->c->xn, s->c->q, s->c->att, s->c->k_cache, s->c->v_cache, s->c->hg, s->c->scores};
        const void *off[] = {sm->c->x, sm->c->xn, sm->c->q, sm->c->att, sm->c->k_cache, sm->c->v_cache, sm->c->hg, sm->c->scores};
        for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
            CHECK_MSG((uintptr_t)on[i] % 64 == 0, "buffer %zu at %zu past a line with aligned_buffers", i,
                      (size_t)((uintptr_t)on[i] % 64));
            CHECK_MSG((uintptr_t)off[i] % 64 == 16, "buffer %zu at %zu past a line without aligned_buffers", i,
                      (size_t)((uintptr_t)off[i] % 64));
        }
        moe_session_free(sm);
    }
done:
    moe_session_free(sb);
    moe_session_free(s);
    moe_session_free(ref);
    moe_model_free(m);
    moe_model_free(mq);
    free(a);
    free(b);
    free(r);
}

/* Differential mode: the twin is left alone and keeps checking the switched
 * session; a switched-on perturbation is caught there. */
static void check_diff(const char *path, size_t V) {
    char msg[MOE_ERR_LEN] = "";
    float *x = calloc((size_t)NTOK * V, sizeof(float));
    if (!x) return;
    int rc = run_stream(path, NULL, true, "-parallel_glue,-fused_gate_up,-gemm_batch,-simd", x, NULL, msg, sizeof msg);
    CHECK_MSG(rc == MOE_OK, "differential mode with switched flags: %s", msg);
    rc = run_stream(path, NULL, true, "+test_perturb", x, NULL, msg, sizeof msg);
    CHECK_MSG(rc == MOE_EDIVERGE, "differential mode missed a switched-on test_perturb (rc %d: %s)", rc, msg);
    free(x);
}

int main(void) {
    check_alloc_guard_install();
    /* q8_0: the x4 and a8 layouts under both kernel tables; laguna f32:
     * sliding-window layers, the shared expert, the FP32 path */
    static const struct { const char *file; const char *num[2]; } models[] = {
        {"qwen3moe-tiny-q8_0.gguf", {"", "+act_q8,+kv_f16"}},
        {"laguna-tiny-f32.gguf", {"", "+kv_q8"}},
    };
    for (int i = 0; i < NTOK; i++) toks[i] = (int32_t)((i * 7919 + 13) % 997);
    char path[512];
    int ran = 0;
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        char rel[128], err[MOE_ERR_LEN];
        snprintf(rel, sizeof rel, "oracle/%s", models[mi].file);
        const char *p = check_ref(rel);
        if (!p) continue;
        snprintf(path, sizeof path, "%s", p);
        moe_model *m = NULL;
        int lrc = moe_model_load(path, NULL, &m, err, sizeof err);
        CHECK_MSG(lrc == MOE_OK, "%s", err);
        if (lrc != MOE_OK) continue;
        const size_t V = (size_t)moe_model_n_vocab(m);
        moe_model_free(m);
        ran++;
        for (int k = 0; k < 2; k++) check_model(path, models[mi].file, models[mi].num[k], V);
        if (mi == 0) {
            check_api(path);
            check_diff(path, V);
            check_sibling(path, V);
        }
    }
    CHECK_MSG(ran > 0, "no reference models found (check_ref)");
    return check_report("test_session_flags");
}
