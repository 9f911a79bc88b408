/* test_shard.c — expert parallelism (include/moefast/shard.h) without a
 * network: shard 0 and shards 1..N-1 loaded in this process, joined by a
 * link that hands each request to the other shard's worker (through the
 * same request check a transport does). The logits of every step of a
 * batched schedule (two sequences, a prompt chunk beside decode tokens)
 * must be bit-identical to the unsharded model's, for 2 and 3 shards (3
 * does not divide the experts), threads 1 and 2, several architectures
 * (shared experts, expert biases, leading dense layers), two weight formats
 * and act_q8. Then the error paths: bad shard parameters, malformed
 * requests (each field), a link that fails (the step fails, naming it, and
 * changes no sequence). tests/cli_mpi.sh runs the same over MPI. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "moefast.h"

#define MAX_SHARDS 4
#define MAX_ROWS 64

typedef struct {
    moe_model *workers[MAX_SHARDS];
    moe_shard_worker *w[MAX_SHARDS];
    struct { int shard; const void *head, *rows; size_t head_bytes, rows_bytes, reply_bytes; void *reply; } q[MAX_SHARDS];
    int nq, posts, fail_wait;
} test_link;

static int link_post(void *user, int shard, const void *head, size_t head_bytes, const void *rows, size_t rows_bytes,
                     void *reply, size_t reply_bytes, char *err, size_t errlen) {
    test_link *l = user;
    if (l->nq >= MAX_SHARDS || shard < 1 || shard >= MAX_SHARDS || !l->w[shard]) {
        snprintf(err, errlen, "test link: bad post to shard %d", shard);
        return MOE_EINVAL;
    }
    l->q[l->nq++] = (__typeof__(l->q[0])){shard, head, rows, head_bytes, rows_bytes, reply_bytes, reply};
    l->posts++;
    return MOE_OK;
}

/* Runs the posted requests as the other shards would: check, then compute. */
static int link_wait(void *user, char *err, size_t errlen) {
    test_link *l = user;
    int rc = MOE_OK;
    for (int i = 0; i < l->nq && !rc; i++) {
        if (l->fail_wait) {
            snprintf(err, errlen, "test link: shard %d did not answer", l->q[i].shard);
            rc = MOE_EIO;
            break;
        }
        size_t rb = 0, pb = 0;
        rc = moe_shard_request_sizes(l->w[l->q[i].shard], l->q[i].head, l->q[i].head_bytes, &rb, &pb, err, errlen);
        if (!rc && (rb != l->q[i].rows_bytes || pb != l->q[i].reply_bytes)) {
            snprintf(err, errlen, "test link: sizes %zu/%zu, posted %zu/%zu", rb, pb, l->q[i].rows_bytes,
                     l->q[i].reply_bytes);
            rc = MOE_EFORMAT;
        }
        if (!rc) rc = moe_shard_worker_run(l->w[l->q[i].shard], l->q[i].head, l->q[i].rows, l->q[i].reply, err, errlen);
    }
    l->nq = 0;
    return rc;
}

static moe_model *load(const char *path, const char *flags, int shard, int n_shards, const moe_shard_link *link) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags, .shard = shard, .n_shards = n_shards, .link = link};
    if (moe_model_load(path, &lp, &m, err, sizeof err)) { fprintf(stderr, "%s\n", err); return NULL; }
    return m;
}

/* The schedule: seq 0's prompt (7 tokens, every logit); then seq 1's prompt
 * (5) beside seq 0's next token; then 4 steps of both sequences' next
 * tokens (greedy). Fills out[rows][V]; returns the rows, -1 on failure. */
static int run_schedule(moe_model *m, int threads, float *out, int V) {
    char err[MOE_ERR_LEN];
    moe_context_params cp = {.n_ctx = 32, .n_threads = threads, .n_batch = 16, .n_seq = 2};
    moe_context *c = NULL;
    if (moe_context_new(m, &cp, &c, err, sizeof err)) { fprintf(stderr, "%s\n", err); return -1; }
    int32_t tok[8], seq[8];
    bool want[8];
    int rows = 0, next[2];
    const int32_t p0[7] = {5, 17, 33, 2, 9, 41, 12}, p1[5] = {3, 8, 21, 30, 7};
    moe_batch b = {7, p0, NULL, (int32_t[]){0, 0, 0, 0, 0, 0, 0}, (bool[]){1, 1, 1, 1, 1, 1, 1}};
    int rc = moe_context_decode(c, &b, out);
    rows += 7;
    next[0] = moe_argmax(out + (size_t)6 * V, V);
    for (int i = 0; i < 5; i++) tok[i] = p1[i], seq[i] = 1, want[i] = i == 4;
    tok[5] = next[0], seq[5] = 0, want[5] = true;
    b = (moe_batch){6, tok, NULL, seq, want};
    if (!rc) rc = moe_context_decode(c, &b, out + (size_t)rows * V);
    if (!rc) {
        next[1] = moe_argmax(out + (size_t)rows * V, V);
        next[0] = moe_argmax(out + (size_t)(rows + 1) * V, V);
        rows += 2;
    }
    for (int step = 0; step < 4 && !rc; step++) {
        tok[0] = next[1], seq[0] = 1, tok[1] = next[0], seq[1] = 0;
        b = (moe_batch){2, tok, NULL, seq, (bool[]){1, 1}};
        rc = moe_context_decode(c, &b, out + (size_t)rows * V);
        next[1] = moe_argmax(out + (size_t)rows * V, V);
        next[0] = moe_argmax(out + (size_t)(rows + 1) * V, V);
        rows += 2;
    }
    if (rc) fprintf(stderr, "decode: %s\n", moe_context_error(c));
    moe_context_free(c);
    return rc ? -1 : rows;
}

/* Shards 1..n-1 of path as workers on link l. */
static bool open_workers(test_link *l, const char *path, const char *flags, int n, int threads) {
    char err[MOE_ERR_LEN];
    memset(l, 0, sizeof *l);
    for (int s = 1; s < n; s++) {
        l->workers[s] = load(path, flags, s, n, NULL);
        if (!l->workers[s]) return false;
        if (moe_shard_worker_new(l->workers[s], threads, &l->w[s], err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return false;
        }
    }
    return true;
}

static void close_workers(test_link *l) {
    for (int s = 1; s < MAX_SHARDS; s++) {
        moe_shard_worker_free(l->w[s]);
        moe_model_free(l->workers[s]);
    }
    memset(l, 0, sizeof *l);
}

static void check_model(const char *path, const char *name, const char *flags) {
    moe_model *ref = load(path, flags, 0, 0, NULL);
    CHECK_MSG(ref != NULL, "%s: load", name);
    if (!ref) return;
    const int V = moe_model_n_vocab(ref);
    float *want = calloc((size_t)MAX_ROWS * V, sizeof(float)), *got = calloc((size_t)MAX_ROWS * V, sizeof(float));
    const int rows = run_schedule(ref, 1, want, V);
    CHECK_MSG(rows > 0, "%s: the unsharded run", name);
    moe_model_free(ref);
    for (int n = 2; n <= 3 && rows > 0; n++)
        for (int threads = 1; threads <= 2; threads++) {
            test_link l;
            const bool ok = open_workers(&l, path, flags, n, threads);
            CHECK_MSG(ok, "%s: %d shards: workers", name, n);
            moe_shard_link link = {&l, n, link_post, link_wait};
            moe_model *m = ok ? load(path, flags, 0, n, &link) : NULL;
            CHECK_MSG(m != NULL, "%s: %d shards: shard 0", name, n);
            if (m) {
                memset(got, 0xff, (size_t)MAX_ROWS * V * sizeof(float));
                const int r = run_schedule(m, threads, got, V);
                CHECK_MSG(r == rows, "%s: %d shards, %d threads: %d rows", name, n, threads, r);
                CHECK_MSG(l.posts > 0, "%s: %d shards: no request was sent", name, n);
                CHECK_MSG(r == rows && !memcmp(want, got, (size_t)rows * V * sizeof(float)),
                          "%s (%s): %d shards, %d threads: logits differ from one process", name, flags ? flags : "-",
                          n, threads);
                moe_model_free(m);
            }
            close_workers(&l);
        }
    free(want);
    free(got);
}

/* A request head with groups, as shard 0 writes it, for malformed variants. */
typedef struct { moe_shard_head h; moe_shard_group g[4]; } request;

static void expect_bad(moe_shard_worker *w, const request *q, size_t bytes, const char *what, const char *field) {
    char err[MOE_ERR_LEN] = "";
    size_t rb = 0, pb = 0;
    const int rc = moe_shard_request_sizes(w, q, bytes, &rb, &pb, err, sizeof err);
    CHECK_MSG(rc == MOE_EFORMAT, "malformed request (%s) accepted", what);
    CHECK_MSG(strstr(err, field) != NULL, "malformed request (%s): '%s' does not name %s", what, err, field);
}

static void check_errors(const char *path) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    /* load parameters */
    moe_load_params lp = {.shard = 2, .n_shards = 2};
    CHECK(moe_model_load(path, &lp, &m, err, sizeof err) == MOE_EINVAL && strstr(err, "shard 2 of 2"));
    lp = (moe_load_params){.shard = 0, .n_shards = 2};
    CHECK(moe_model_load(path, &lp, &m, err, sizeof err) == MOE_EINVAL && strstr(err, "needs a link"));
    lp = (moe_load_params){.shard = 1, .n_shards = 999};
    CHECK(moe_model_load(path, &lp, &m, err, sizeof err) == MOE_EINVAL && strstr(err, "routed experts"));
    /* a shard > 0 answers requests, it runs no steps */
    moe_model *w1 = load(path, NULL, 1, 2, NULL);
    CHECK(w1 != NULL);
    if (!w1) return;
    moe_context *c = NULL;
    CHECK(moe_context_new(w1, NULL, &c, err, sizeof err) == MOE_EINVAL && strstr(err, "expert shard 1 of 2"));
    moe_session *s = NULL;
    CHECK(moe_session_new(w1, NULL, &s, err, sizeof err) == MOE_EINVAL);
    moe_shard_worker *w = NULL;
    CHECK(moe_shard_worker_new(w1, 1, &w, err, sizeof err) == MOE_OK);
    moe_model *ref = load(path, NULL, 0, 0, NULL);
    CHECK(moe_shard_worker_new(ref, 1, &(moe_shard_worker *){NULL}, err, sizeof err) == MOE_EINVAL);
    moe_model_free(ref);
    if (!w) { moe_model_free(w1); return; }
    int first, end;
    moe_shard_range(8, 1, 2, &first, &end);
    CHECK(first == 4 && end == 8);
    moe_shard_range(8, 2, 3, &first, &end);
    CHECK(first == 6 && end == 8);
    moe_shard_range(8, 0, 3, &first, &end);
    CHECK(first == 0 && end == 3);
    /* the qwen3moe tiny preset: n_embd 256, 8 experts (shard 1 of 2: 4..7) */
    request good = {{MOE_SHARD_MAGIC, MOE_SHARD_VERSION, 0, 2, 3, 256, 16, 0}, {{4, 1}, {6, 2}}};
    const size_t gb = sizeof good.h + 2 * sizeof good.g[0];
    size_t rb = 0, pb = 0;
    CHECK_MSG(moe_shard_request_sizes(w, &good, gb, &rb, &pb, err, sizeof err) == MOE_OK, "%s", err);
    CHECK(rb == 3 * (size_t)good.h.n_embd * sizeof(float) && pb == rb);
    request q = good;
    q.h.magic ^= 1;                      expect_bad(w, &q, gb, "magic", "'magic'");
    q = good; q.h.version = 99;          expect_bad(w, &q, gb, "version", "'version'");
    q = good; q.h.layer = 1000;          expect_bad(w, &q, gb, "layer", "'layer'");
    q = good; q.h.layer = -1;            expect_bad(w, &q, gb, "negative layer", "'layer'");
    q = good; q.h.n_embd += 32;          expect_bad(w, &q, gb, "n_embd", "'n_embd'");
    q = good; q.h.n_groups = 0;          expect_bad(w, &q, gb, "no groups", "'n_groups'");
    q = good; q.h.n_groups = 5;          expect_bad(w, &q, gb, "too many groups", "'n_groups'");
    q = good;                            expect_bad(w, &q, gb - 4, "short head", "head bytes");
    q = good;                            expect_bad(w, &q, 8, "shorter than the head", "shorter");
    q = good; q.g[0].expert = 3;         expect_bad(w, &q, gb, "another shard's expert", "expert 3");
    q = good; q.g[1].expert = 4;         expect_bad(w, &q, gb, "experts not ascending", "ascending");
    q = good; q.g[1].expert = 8;         expect_bad(w, &q, gb, "expert past the end", "expert 8");
    q = good; q.g[1].rows = 0;           expect_bad(w, &q, gb, "empty group", "0 rows");
    q = good; q.h.n_rows = 4;            expect_bad(w, &q, gb, "n_rows", "'n_rows'");
    q = good; q.h.capacity = 2;          expect_bad(w, &q, gb, "capacity", "'capacity'");
    moe_shard_worker_free(w);
    moe_model_free(w1);
}

/* A link that fails: the step fails with the link's message and code, and
 * the sequence keeps its length (the step is undone), so a later step with a
 * working link continues exactly. */
static void check_link_failure(const char *path) {
    test_link l;
    CHECK(open_workers(&l, path, NULL, 2, 1));
    moe_shard_link link = {&l, 2, link_post, link_wait};
    moe_model *m = load(path, NULL, 0, 2, &link);
    CHECK(m != NULL);
    if (!m) { close_workers(&l); return; }
    char err[MOE_ERR_LEN];
    moe_session *s = NULL;
    CHECK(moe_session_new(m, &(moe_session_params){.n_ctx = 16, .n_threads = 1}, &s, err, sizeof err) == MOE_OK);
    const int32_t toks[3] = {5, 6, 7};
    const int V = moe_model_n_vocab(m);
    float *a = calloc((size_t)V, sizeof(float)), *b = calloc((size_t)V, sizeof(float));
    if (s) {
        CHECK(moe_session_forward(s, toks, 2, NULL, false) == MOE_OK);
        l.fail_wait = 1;
        CHECK(moe_session_forward(s, toks + 2, 1, a, false) == MOE_EIO);
        CHECK_STR_CONTAINS(moe_session_error(s), "shard 1 did not answer");
        CHECK_EQ_INT(moe_session_n_past(s), 2);
        l.fail_wait = 0;
        CHECK(moe_session_forward(s, toks + 2, 1, a, false) == MOE_OK);
    }
    moe_session_free(s);
    moe_model_free(m);
    close_workers(&l);
    moe_model *ref = load(path, NULL, 0, 0, NULL);
    if (ref && moe_session_new(ref, &(moe_session_params){.n_ctx = 16, .n_threads = 1}, &s, err, sizeof err) == MOE_OK) {
        CHECK(moe_session_forward(s, toks, 3, b, false) == MOE_OK);
        CHECK_MSG(!memcmp(a, b, (size_t)V * sizeof(float)), "after a failed step the sharded run differs");
        moe_session_free(s);
    }
    moe_model_free(ref);
    free(a);
    free(b);
}

int main(void) {
    char dir[] = "/tmp/moefast-test-shard.XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    char err[MOE_ERR_LEN];
    static const struct { const char *arch, *type, *name, *flags; const char *const ov[4]; } models[] = {
        {"qwen3moe", "Q8_0", "qwen3moe-q8_0", NULL, {NULL}},
        {"qwen3moe", "Q8_0", "qwen3moe-q8_0", "+act_q8", {NULL}},
        {"laguna", "Q4_0", "laguna-q4_0", NULL, {"n_dense_lead=1", "n_ff=256", NULL}},
        {"qwen3moe", "Q4_K", "qwen3moe-q4_k", NULL, {"n_ff_exp=256", NULL}},
        {"gpt-oss", "Q8_0", "gpt-oss-q8_0", NULL, {NULL}},
        {"deepseek2", "Q8_0", "deepseek2-q8_0", NULL, {NULL}},
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[256], ty[64];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, models[i].name);
        snprintf(ty, sizeof ty, "type=%s", models[i].type);
        const char *ov[6] = {ty};
        for (int k = 0; models[i].ov[k]; k++) ov[k + 1] = models[i].ov[k];
        int rc = access(path, R_OK) == 0 ? MOE_OK : moe_gen_model(models[i].arch, "tiny", ov, path, err, sizeof err);
        CHECK_MSG(rc == MOE_OK, "gen %s: %s", models[i].name, err);
        if (rc == MOE_OK) check_model(path, models[i].name, models[i].flags);
        if (i == 0) {
            check_errors(path);
            check_link_failure(path);
        }
    }
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, models[i].name);
        unlink(path);
    }
    rmdir(dir);
    return check_report("test_shard");
}
