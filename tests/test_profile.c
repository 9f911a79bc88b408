/* test_profile.c — the phase profile (moe_session_profile_*, `bench --phases`):
 * a profiled decode step records each phase the expected number of times
 * (per layer of the right kind), with time, and with the weight and KV bytes
 * the model's tensors imply (summing to moe_model_bytes_per_token); a
 * prefill chunk too; profiling leaves the logits
 * bit-identical and allocates nothing; enabling and disabling reset the
 * counters, a session never enabled records nothing; the phases' sum fits
 * inside the forward call; the differential twin is not profiled; the read
 * API's arguments are checked. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "check.h"
#include "model/model.h"
#include "moefast.h"


#define NPRE 8   /* prefill chunk */
#define NDEC 6   /* decode steps after it */
#define MAXP 64

static int32_t toks[NPRE + NDEC];

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    int n;
    moe_phase_stat st[MAXP];
} prof_t;

static void read_prof(const moe_session *s, prof_t *p) {
    p->n = moe_session_profile_read(s, p->st, MAXP);
    CHECK_MSG(p->n > 0 && p->n <= MAXP, "profile_read returned %d", p->n);
    if (p->n < 0) p->n = 0;
}

static const moe_phase_stat *ph(const prof_t *p, const char *name) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->st[i].name, name)) return &p->st[i];
    CHECK_MSG(0, "no phase named %s", name);
    return NULL;
}

static bool all_zero(const prof_t *p) {
    for (int i = 0; i < p->n; i++)
        if (p->st[i].calls || p->st[i].seconds != 0 || p->st[i].weight_bytes != 0 || p->st[i].kv_bytes != 0) return false;
    return p->n > 0;
}

/* What the model's tensors say one forward of n tokens at position pos reads. */
typedef struct {
    int n_layer, n_moe, n_dense, n_a8;     /* layers; MoE ones; dense ones; MoE ones with an a8 down matrix */
    double qkv, wo, router, dense, lm_head, embed_row;
    double gu_routed, gu_shared;           /* gate+up bytes: one token's selected experts; the shared expert */
    double dn_routed, dn_shared;           /* the same for down */
} expect_t;

static expect_t expect_of(const moe_model *m) {
    expect_t x = {0};
    const moe_hparams *hp = &m->hp;
    x.n_layer = hp->n_layer;
    x.embed_row = (double)m->tok_embd.row_bytes;
    x.lm_head = (double)m->output.mat_bytes;
    for (int il = 0; il < hp->n_layer; il++) {
        const moe_layer *L = &m->layers[il];
        x.qkv += (double)L->attn.wq.mat_bytes + (double)L->attn.wk.mat_bytes + (double)L->attn.wv.mat_bytes;
        if (L->attn.wextra.data) x.qkv += (double)L->attn.wextra.mat_bytes;
        x.wo += (double)L->attn.wo.mat_bytes;
        if (L->dense) {
            x.n_dense++;
            x.dense += (double)L->ffn.gate.mat_bytes + (double)L->ffn.up.mat_bytes + (double)L->ffn.down.mat_bytes;
            continue;
        }
        x.n_moe++;
        x.router += (double)L->moe.router.w.mat_bytes;
        const double K = hp->n_expert_used;
        x.gu_routed += K * ((double)L->moe.gate_exps.mat_bytes + (double)L->moe.up_exps.mat_bytes);
        x.dn_routed += K * (double)L->moe.down_exps.mat_bytes;
        bool a8 = L->moe.down_exps.a8;
        if (L->moe.has_shared) {
            x.gu_shared += (double)L->moe.gate_sh.mat_bytes + (double)L->moe.up_sh.mat_bytes;
            x.dn_shared += (double)L->moe.down_sh.mat_bytes;
            a8 |= L->moe.down_sh.a8;
        }
        x.n_a8 += a8;
    }
    return x;
}

/* KV-cache bytes of n tokens at positions pos.. (every layer, every KV head). */
static double kv_of(const moe_session *s, int pos, int n) {
    const moe_context *c = s->c;
    const moe_hparams *hp = &c->m->hp;
    double b = 0;
    for (int il = 0; il < hp->n_layer; il++)
        for (int t = 0; t < n; t++) {
            const int p = pos + t;
            const int window = c->m->layers[il].attn.window;
            int j0 = window > 0 ? p - window + 1 : 0;
            if (j0 < 0) j0 = 0;
            if (c->kv_tq)                                     /* kv_tq: a packed row per key and value */
                b += (double)(p - j0 + 1) * hp->n_head_kv * (double)(c->tq_krow + c->tq_vrow);
            else
                b += (double)(p - j0 + 1) * hp->n_head_kv * (hp->head_dim + hp->head_dim_v) *
                     (c->kv_q8 ? 34.0 / 32.0 : c->kv_half ? 2 : 4);   /* kv_q8: a code and 1/32 of a half */
        }
    return b;
}

#define EXPECT_PHASE(p, name, calls_, wbytes_, what)                                                       \
    do {                                                                                                   \
        const moe_phase_stat *e_ = ph(p, name);                                                            \
        if (!e_) break;                                                                                    \
        CHECK_MSG(e_->calls == (calls_), "%s: %s: %lld calls, expected %lld", what, name, e_->calls,       \
                  (long long)(calls_));                                                                    \
        if ((wbytes_) >= 0)                                                                                \
            CHECK_MSG(e_->weight_bytes == (double)(wbytes_), "%s: %s: %.0f weight bytes, expected %.0f",   \
                      what, name, e_->weight_bytes, (double)(wbytes_));                                    \
    } while (0)

/* Every phase that ran has time and every phase that did not has nothing;
 * the phases sum to no more than the forward calls' wall time. */
static void check_times(const prof_t *p, double wall, const char *what) {
    double sum = 0;
    for (int i = 0; i < p->n; i++) {
        const moe_phase_stat *e = &p->st[i];
        if (e->calls > 0) CHECK_MSG(e->seconds > 0, "%s: %s ran %lld times in %g s", what, e->name, e->calls, e->seconds);
        else CHECK_MSG(e->seconds == 0 && e->weight_bytes == 0 && e->kv_bytes == 0, "%s: %s did not run but has figures",
                       what, e->name);
        if (strcmp(e->name, "attention")) CHECK_MSG(e->kv_bytes == 0, "%s: %s has KV bytes", what, e->name);
        sum += e->seconds;
    }
    CHECK_MSG(sum > 0 && sum <= wall, "%s: phases sum to %g s, the forward calls took %g s", what, sum, wall);
}

/* One decode step at position pos (profile reset before it). */
static void check_decode_step(moe_session *s, const expect_t *x, bool glue, float *lg, const char *what) {
    const int pos = moe_session_n_past(s);
    moe_session_profile_enable(s, true);
    double t0 = now_s();
    int rc = moe_session_forward(s, &toks[pos], 1, lg, false);
    double wall = now_s() - t0;
    CHECK_MSG(rc == MOE_OK, "%s: %s", what, moe_session_error(s));
    prof_t p;
    read_prof(s, &p);
    EXPECT_PHASE(&p, "embed", 1, x->embed_row, what);
    EXPECT_PHASE(&p, "attn_norm", x->n_layer, 0, what);
    EXPECT_PHASE(&p, "qkv", x->n_layer, x->qkv, what);
    EXPECT_PHASE(&p, "attn_prep", glue ? 0 : x->n_layer, 0, what);  /* with parallel_glue: inside attention */
    EXPECT_PHASE(&p, "attention", x->n_layer, 0, what);
    EXPECT_PHASE(&p, "wo", x->n_layer, x->wo, what);
    EXPECT_PHASE(&p, "ffn_norm", x->n_layer, 0, what);
    EXPECT_PHASE(&p, "router", x->n_moe, x->router, what);
    EXPECT_PHASE(&p, "route", x->n_moe, 0, what);
    EXPECT_PHASE(&p, "gate_up", x->n_moe, x->gu_routed + x->gu_shared, what);
    EXPECT_PHASE(&p, "hidden_q8", x->n_a8, 0, what);
    EXPECT_PHASE(&p, "down", x->n_moe, x->dn_routed + x->dn_shared, what);
    EXPECT_PHASE(&p, "combine", x->n_moe, 0, what);
    EXPECT_PHASE(&p, "dense_ffn", x->n_dense, x->dense, what);
    EXPECT_PHASE(&p, "lm_head", 1, x->lm_head, what);
    /* one decode step streams what moe_model_bytes_per_token says, no more, no less */
    double wsum = 0;
    for (int i = 0; i < p.n; i++) wsum += p.st[i].weight_bytes;
    CHECK_MSG(wsum == (double)moe_model_bytes_per_token(s->c->m), "%s: the phases' weight bytes sum to %.0f, "
              "moe_model_bytes_per_token is %llu", what, wsum, (unsigned long long)moe_model_bytes_per_token(s->c->m));
    const moe_phase_stat *a = ph(&p, "attention");
    if (a) {
        double kv = kv_of(s, pos, 1);
        CHECK_MSG(a->kv_bytes == kv, "%s: attention read %.0f KV bytes, expected %.0f", what, a->kv_bytes, kv);
        /* the public figure `bench` reports per step is the same sum */
        CHECK_MSG(moe_session_kv_bytes_at(s, pos) == kv, "%s: moe_session_kv_bytes_at(%d) = %.0f, expected %.0f", what,
                  pos, moe_session_kv_bytes_at(s, pos), kv);
        CHECK_MSG(moe_session_kv_bytes_at(s, -1) == 0, "%s: a negative position has KV bytes", what);
    }
    check_times(&p, wall, what);
}

/* moe_session_compute_ceiling: its kernels cover the step's weight bytes
 * exactly (with one embedding row), once per kind, largest first, each with
 * a rate; the total is the sum of their times; the a8 kernels exactly when
 * act_q8 is on; max < count writes max entries. */
static void check_ceiling(moe_session *s, const expect_t *x, bool act_q8, const char *what) {
    char err[MOE_ERR_LEN];
    moe_ceiling_part parts[32];
    int n = -1;
    double sec = -1;
    if (moe_session_compute_ceiling(s, parts, 32, &n, &sec, err, sizeof err) != MOE_OK) {
        CHECK_MSG(0, "%s: compute ceiling: %s", what, err);
        return;
    }
    CHECK_MSG(n >= 1 && n <= 32, "%s: %d ceiling kernels", what, n);
    if (n < 1 || n > 32) return;
    double bytes = x->embed_row, t = 0;
    bool any_a8 = false;
    for (int i = 0; i < n; i++) {
        CHECK_MSG(parts[i].kernel[0], "%s: ceiling kernel %d has no name", what, i);
        for (int j = 0; j < i; j++) CHECK_MSG(strcmp(parts[i].kernel, parts[j].kernel), "%s: kernel %s twice", what, parts[i].kernel);
        CHECK_MSG(parts[i].bytes_per_token > 0 && (i == 0 || parts[i].bytes_per_token <= parts[i - 1].bytes_per_token),
                  "%s: kernel %s: %.0f bytes, not in descending order", what, parts[i].kernel, parts[i].bytes_per_token);
        CHECK_MSG(parts[i].gb_per_s > 0 && parts[i].gb_per_s < 1e5, "%s: kernel %s at %g GB/s", what, parts[i].kernel,
                  parts[i].gb_per_s);
        any_a8 |= strstr(parts[i].kernel, " a8,") != NULL;
        bytes += parts[i].bytes_per_token;
        t += parts[i].gb_per_s > 0 ? parts[i].bytes_per_token / (parts[i].gb_per_s * 1e9) : 0;
    }
    CHECK_MSG(bytes == (double)moe_model_bytes_per_token(s->c->m), "%s: the ceiling's kernels read %.0f bytes with the "
              "embedding row, moe_model_bytes_per_token is %llu", what, bytes,
              (unsigned long long)moe_model_bytes_per_token(s->c->m));
    CHECK_MSG(sec > 0 && fabs(sec - t) <= 1e-9 * t, "%s: ceiling %g s, its kernels' times sum to %g", what, sec, t);
    CHECK_MSG(any_a8 == act_q8, "%s: a8 kernels %s in the ceiling with act_q8 %s", what, any_a8 ? "present" : "absent",
              act_q8 ? "on" : "off");
    /* max < count: only max written, the count still n; no parts at all */
    moe_ceiling_part two[2];
    memset(two, 0xab, sizeof two);
    int n1 = -1;
    CHECK_EQ_INT(moe_session_compute_ceiling(s, two, 1, &n1, NULL, err, sizeof err), MOE_OK);
    CHECK_EQ_INT(n1, n);
    const unsigned char *b = (const unsigned char *)&two[1];
    CHECK_MSG(b[0] == 0xab && b[sizeof two[1] - 1] == 0xab, "%s: compute_ceiling wrote past max", what);
    CHECK_MSG(!strcmp(two[0].kernel, parts[0].kernel), "%s: the first kernel changed: %s, %s", what, two[0].kernel,
              parts[0].kernel);
    CHECK_EQ_INT(moe_session_compute_ceiling(s, NULL, 0, NULL, &sec, err, sizeof err), MOE_OK);
    CHECK_MSG(sec > 0, "%s: ceiling without parts: %g s", what, sec);
}

/* moe_session_attention_ceiling at the last cached position: the timed
 * layers' KV bytes are the step's (every layer is grouped-query here), at a
 * rate, named by the cache format; a position not cached or a NULL part is
 * MOE_EINVAL naming it. */
static void check_attention_ceiling(moe_session *s, const char *format, const char *what) {
    char err[MOE_ERR_LEN], want[64];
    moe_ceiling_part part;
    double kv = -1;
    const int pos = moe_session_n_past(s) - 1;
    if (moe_session_attention_ceiling(s, pos, &part, &kv, err, sizeof err) != MOE_OK) {
        CHECK_MSG(0, "%s: attention ceiling: %s", what, err);
        return;
    }
    CHECK_MSG(kv > 0 && kv == moe_session_kv_bytes_at(s, pos), "%s: attention ceiling KV %.0f bytes, the step's %.0f", what,
              kv, moe_session_kv_bytes_at(s, pos));
    CHECK_MSG(part.bytes_per_token == kv, "%s: %.0f of %.0f KV bytes timed", what, part.bytes_per_token, kv);
    CHECK_MSG(part.gb_per_s > 0 && part.gb_per_s < 1e5, "%s: attention at %g GB/s", what, part.gb_per_s);
    snprintf(want, sizeof want, "attention, %s cache, %d keys", format, pos + 1);
    CHECK_MSG(!strcmp(part.kernel, want), "%s: attention kernel '%s', expected '%s'", what, part.kernel, want);
    CHECK_EQ_INT(moe_session_attention_ceiling(s, pos + 1, &part, &kv, err, sizeof err), MOE_EINVAL);
    CHECK_MSG(strstr(err, "position") && kv == 0, "%s: uncached position: '%s', kv %g", what, err, kv);
    CHECK_EQ_INT(moe_session_attention_ceiling(s, -1, &part, NULL, err, sizeof err), MOE_EINVAL);
    CHECK_EQ_INT(moe_session_attention_ceiling(s, pos, NULL, NULL, err, sizeof err), MOE_EINVAL);
    CHECK_EQ_INT(moe_session_attention_ceiling(NULL, pos, &part, NULL, err, sizeof err), MOE_EINVAL);
}

/* The whole check on one model and flag set. */
static void check_model(const char *path, const char *flags, bool diff) {
    char err[MOE_ERR_LEN], what[256];
    snprintf(what, sizeof what, "%s [%s]%s", strrchr(path, '/') ? strrchr(path, '/') + 1 : path, flags,
             diff ? " diff" : "");
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags, .diff = diff};
    if (moe_model_load(path, &lp, &m, err, sizeof err)) { CHECK_MSG(0, "%s: %s", what, err); return; }
    const int V = moe_model_n_vocab(m);
    const bool glue = strstr(flags, "-parallel_glue") == NULL;
    const bool batch = strstr(flags, "-gemm_batch") == NULL;
    const expect_t x = expect_of(m);
    moe_session_params sp = {.n_ctx = 64, .n_threads = 2, .n_batch = 0};
    moe_session *s = NULL, *ref = NULL;
    if (moe_session_new(m, &sp, &s, err, sizeof err) || moe_session_new(m, &sp, &ref, err, sizeof err)) {
        CHECK_MSG(0, "%s: %s", what, err);
        moe_session_free(s);
        moe_model_free(m);
        return;
    }
    float *lg = malloc((size_t)V * sizeof *lg), *lr = malloc((size_t)V * sizeof *lr);
    prof_t p;

    /* never enabled: a prefill and a decode step record nothing */
    CHECK(moe_session_forward(ref, toks, NPRE, lr, false) == MOE_OK);
    CHECK(moe_session_forward(ref, &toks[NPRE], 1, lr, false) == MOE_OK);
    read_prof(ref, &p);
    CHECK_MSG(all_zero(&p), "%s: a session never profiled recorded something", what);
    moe_session_truncate(ref, 0);

    /* prefill chunk, profiled; logits bit-identical to the unprofiled session */
    moe_session_profile_enable(s, true);
    double t0 = now_s();
    CHECK(moe_session_forward(s, toks, NPRE, lg, false) == MOE_OK);
    double wall = now_s() - t0;
    CHECK(moe_session_forward(ref, toks, NPRE, lr, false) == MOE_OK);
    CHECK_MSG(!memcmp(lg, lr, (size_t)V * sizeof *lg), "%s: profiled prefill logits differ", what);
    read_prof(s, &p);
    char w2[300];
    snprintf(w2, sizeof w2, "%s prefill", what);
    EXPECT_PHASE(&p, "embed", 1, NPRE * x.embed_row, w2);
    EXPECT_PHASE(&p, "qkv", x.n_layer, x.qkv, w2);
    EXPECT_PHASE(&p, "attn_prep", x.n_layer, 0, w2);              /* a phase of its own in prefill */
    EXPECT_PHASE(&p, "attention", x.n_layer, 0, w2);
    EXPECT_PHASE(&p, "router", x.n_moe, x.router, w2);
    EXPECT_PHASE(&p, "route", x.n_moe, 0, w2);
    /* gemm_batch: one gate_up phase per layer, the distinct experts' bytes
     * (at most every token's); without it one per token, every token's */
    const moe_phase_stat *gu = ph(&p, "gate_up");
    if (batch) {
        EXPECT_PHASE(&p, "gate_up", x.n_moe, -1, w2);
        EXPECT_PHASE(&p, "down", x.n_moe, -1, w2);
        if (gu) CHECK_MSG(gu->weight_bytes > 0 && gu->weight_bytes <= NPRE * x.gu_routed + x.gu_shared,
                          "%s: gate_up bytes %.0f", w2, gu->weight_bytes);
    } else {                                  /* the shared expert runs once, with all tokens, at the last one */
        EXPECT_PHASE(&p, "gate_up", NPRE * x.n_moe, NPRE * x.gu_routed + x.gu_shared, w2);
        EXPECT_PHASE(&p, "down", NPRE * x.n_moe, NPRE * x.dn_routed + x.dn_shared, w2);
    }
    EXPECT_PHASE(&p, "dense_ffn", x.n_dense, x.dense, w2);
    EXPECT_PHASE(&p, "lm_head", 1, x.lm_head, w2);
    const moe_phase_stat *a = ph(&p, "attention");
    if (a) CHECK_MSG(a->kv_bytes == kv_of(s, 0, NPRE), "%s: attention KV bytes %.0f, expected %.0f", w2, a->kv_bytes,
                     kv_of(s, 0, NPRE));
    check_times(&p, wall, w2);

    /* decode steps: each one's phases; logits identical; no allocation */
    for (int i = 0; i < NDEC; i++) {
        char w3[300];
        snprintf(w3, sizeof w3, "%s decode step %d", what, i);
        long before = check_allocs();
        check_decode_step(s, &x, glue, lg, w3);
        CHECK_MSG(check_allocs() == before, "%s: a profiled decode step allocated %ld times", w3, check_allocs() - before);
    }
    /* the compute ceiling, between steps: the steps below still give the
     * unprofiled session's logits */
    check_ceiling(s, &x, strstr(flags, "+act_q8") != NULL, what);
    check_attention_ceiling(s,
                            strstr(flags, "+kv_tq") ? "kv_tq" : strstr(flags, "+kv_q8") ? "kv_q8"
                            : strstr(flags, "+kv_f16")  ? "F16"
                                                        : "F32",
                            what);
    /* the same steps again, logits compared with the unprofiled session's */
    moe_session_truncate(s, NPRE);
    moe_session_profile_enable(s, true);
    for (int i = 0; i < NDEC; i++) {
        long before = check_allocs();
        CHECK(moe_session_forward(s, &toks[NPRE + i], 1, lg, false) == MOE_OK);
        CHECK_MSG(check_allocs() == before, "%s: profiled decode step %d allocated %ld times", what, i, check_allocs() - before);
        CHECK(moe_session_forward(ref, &toks[NPRE + i], 1, lr, false) == MOE_OK);
        CHECK_MSG(!memcmp(lg, lr, (size_t)V * sizeof *lg), "%s: profiled decode step %d logits differ", what, i);
    }
    read_prof(s, &p);
    EXPECT_PHASE(&p, "qkv", NDEC * x.n_layer, NDEC * x.qkv, what);   /* accumulates over calls */
    EXPECT_PHASE(&p, "lm_head", NDEC, NDEC * x.lm_head, what);

    /* enabling resets; disabling resets and stops recording */
    moe_session_profile_enable(s, true);
    read_prof(s, &p);
    CHECK_MSG(all_zero(&p), "%s: enable did not reset", what);
    moe_session_truncate(s, NPRE);
    CHECK(moe_session_forward(s, &toks[NPRE], 1, lg, false) == MOE_OK);
    moe_session_profile_enable(s, false);
    read_prof(s, &p);
    CHECK_MSG(all_zero(&p), "%s: disable did not reset", what);
    CHECK(moe_session_forward(s, &toks[NPRE + 1], 1, lg, false) == MOE_OK);
    read_prof(s, &p);
    CHECK_MSG(all_zero(&p), "%s: a disabled profile recorded", what);

    free(lg);
    free(lr);
    moe_session_free(ref);
    moe_session_free(s);
    moe_model_free(m);
}

static void check_api(const char *path) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    if (moe_model_load(path, NULL, &m, err, sizeof err)) { CHECK_MSG(0, "%s", err); return; }
    moe_session_params sp = {.n_ctx = 16, .n_threads = 1, .n_batch = 0};
    moe_session *s = NULL;
    if (moe_session_new(m, &sp, &s, err, sizeof err)) { CHECK_MSG(0, "%s", err); moe_model_free(m); return; }
    CHECK_EQ_INT(moe_session_profile_enable(NULL, true), MOE_EINVAL);
    CHECK_EQ_INT(moe_session_profile_read(NULL, NULL, 0), MOE_EINVAL);
    moe_phase_stat st[MAXP];
    CHECK_EQ_INT(moe_session_profile_read(s, NULL, 1), MOE_EINVAL);
    CHECK_EQ_INT(moe_session_profile_read(s, st, -1), MOE_EINVAL);
    CHECK_EQ_INT(moe_session_compute_ceiling(s, NULL, 1, NULL, NULL, err, sizeof err), MOE_EINVAL);
    CHECK_EQ_INT(moe_session_compute_ceiling(s, NULL, -1, NULL, NULL, err, sizeof err), MOE_EINVAL);
    const int n = moe_session_profile_read(s, NULL, 0);
    CHECK_MSG(n >= 15 && n <= MAXP, "%d phases", n);
    if (n < 3 || n > MAXP) goto done;
    /* max < count: only max entries written */
    memset(st, 0xab, sizeof st);
    CHECK_EQ_INT(moe_session_profile_read(s, st, 3), n);
    const unsigned char *b = (const unsigned char *)&st[3];
    CHECK_MSG(b[0] == 0xab && b[sizeof st[3] - 1] == 0xab, "profile_read wrote past max");
    CHECK_EQ_INT(moe_session_profile_read(s, st, MAXP), n);
    CHECK(!strcmp(st[0].name, "embed"));
    CHECK(!strcmp(st[n - 1].name, "lm_head"));
    for (int i = 0; i < n; i++) {
        CHECK_MSG(st[i].name && st[i].name[0], "phase %d has no name", i);
        for (int j = 0; j < i; j++) CHECK_MSG(strcmp(st[i].name, st[j].name), "phase name %s twice", st[i].name);
    }
done:
    moe_session_free(s);
    moe_model_free(m);
}

int main(void) {
    check_alloc_guard_install();
    for (int i = 0; i < NPRE + NDEC; i++) toks[i] = (int32_t)((i * 7919 + 13) % 997);
    /* qwen3moe: plain MoE layers; under act_q8 the hidden_q8 phase, with
     * kv_f16 half-size KV bytes. laguna: a dense lead layer, sliding-window
     * layers, the attention gate and a shared expert; kv_q8's KV bytes. */
    static const struct { const char *file; const char *flags[5]; } cases[] = {
        {"qwen3moe-tiny-q8_0.gguf",
         {"default", "+act_q8,+kv_f16", "-parallel_glue,-fused_gate_up", "-gemm_batch,+act_q8", "+kv_tq"}},
        {"laguna-tiny-f32.gguf", {"default", "-parallel_glue", "-gemm_batch", "+kv_q8"}},
    };
    char path[512];
    int ran = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char rel[128];
        snprintf(rel, sizeof rel, "oracle/%s", cases[c].file);
        const char *p = check_ref(rel);
        if (!p) continue;
        snprintf(path, sizeof path, "%s", p);
        ran++;
        for (int k = 0; k < 5 && cases[c].flags[k]; k++) check_model(path, cases[c].flags[k], false);
        check_model(path, "default", true);   /* differential mode: the twin adds nothing */
        if (c == 0) check_api(path);
    }
    CHECK(moe_session_kv_bytes_at(NULL, 5) == 0);
    {
        char err[MOE_ERR_LEN];
        moe_ceiling_part part;
        int n = 7;
        double sec = 7;
        CHECK_EQ_INT(moe_session_compute_ceiling(NULL, &part, 1, &n, &sec, err, sizeof err), MOE_EINVAL);
        CHECK_MSG(n == 0 && sec == 0, "compute_ceiling(NULL) left n %d, seconds %g", n, sec);
    }
    CHECK_MSG(ran > 0, "no reference models found (check_ref)");
    return check_report("test_profile");
}
