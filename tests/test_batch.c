/* test_batch.c — the batch contract: every sequence's logits are
 * bit-identical whether it runs alone or in any batch of a context, in any
 * order of arrival, at any thread count and ISA level, in every KV cache
 * format and numerics.
 *
 * The reference runs each sequence alone in a session (one prefill with all
 * logits, then greedy decode steps). The batched runs put 1-8 sequences of
 * different lengths into one context on a seeded schedule: sequences arrive
 * at different steps, prompts are fed in random chunks beside other
 * sequences' decode tokens, steps are split by a small n_batch, a sequence is
 * removed in the middle and another prompt takes its place, and a sequence
 * starts from a copy of another's prompt prefix. Every logit of every token
 * is compared bit for bit. Then the error paths: a bad batch changes nothing.
 * Models are generated here; the later architectures' reference files of
 * ../shared are checked too when present. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "moefast.h"

#define MAX_SEQ 8
#define MAX_PROMPT 16
#define N_GEN 5
#define N_CTX 64

typedef struct {
    int32_t toks[MAX_PROMPT + N_GEN]; /* prompt, then the greedy continuation */
    int n_prompt;
    float *ref;                       /* [n_prompt + N_GEN][V]: logits after each token, run alone */
} seq_case;

static uint64_t rng_state;
static uint32_t rnd(uint32_t n) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

static moe_model *load(const char *path, const char *flags) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags};
    if (moe_model_load(path, &lp, &m, err, sizeof err)) { fprintf(stderr, "%s\n", err); return NULL; }
    return m;
}

/* Runs c alone in a session: prompt in one call (all logits), then N_GEN
 * greedy steps; fills c->toks' continuation and c->ref. */
static void run_alone(moe_model *m, seq_case *c, int V) {
    char err[MOE_ERR_LEN];
    moe_session_params sp = {.n_ctx = N_CTX, .n_threads = 1};
    moe_session *s = NULL;
    CHECK_MSG(moe_session_new(m, &sp, &s, err, sizeof err) == MOE_OK, "%s", err);
    if (!s) return;
    c->ref = calloc((size_t)(c->n_prompt + N_GEN) * V, sizeof(float));
    CHECK(moe_session_forward(s, c->toks, c->n_prompt, c->ref, true) == MOE_OK);
    for (int i = 0; i < N_GEN; i++) {
        const int p = c->n_prompt + i;
        c->toks[p] = moe_argmax(c->ref + (size_t)(p - 1) * V, V);
        CHECK(moe_session_forward(s, &c->toks[p], 1, c->ref + (size_t)p * V, false) == MOE_OK);
    }
    moe_session_free(s);
}

static int first_diff(const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float))) return i;
    return -1;
}

/* One batched run over cases[0..n): a seeded schedule of arrivals and
 * chunks; seq `victim` (if >= 0) is removed after a few steps and its slot
 * reused for case n (which then runs to the end); case n+1 (if copy) starts
 * from a copy of case 0's prompt prefix. Returns the number of tokens whose
 * logits differed from the reference. */
typedef struct {
    int threads, n_batch, victim;
    bool copy;
    uint64_t seed;
} schedule;

static int run_batched(moe_model *m, seq_case *cases, int n, const schedule *sc, int V, const char *what) {
    char err[MOE_ERR_LEN];
    moe_context_params cp = {.n_ctx = N_CTX, .n_threads = sc->threads, .n_batch = sc->n_batch, .n_seq = MAX_SEQ};
    moe_context *ctx = NULL;
    CHECK_MSG(moe_context_new(m, &cp, &ctx, err, sizeof err) == MOE_OK, "%s", err);
    if (!ctx) return -1;
    rng_state = sc->seed;
    const int n_cases = n + (sc->victim >= 0) + (sc->copy ? 1 : 0);
    int slot_case[MAX_SEQ], done_tok[MAX_SEQ + 2] = {0}, arrive[MAX_SEQ + 2];
    for (int i = 0; i < MAX_SEQ; i++) slot_case[i] = -1;
    for (int i = 0; i < n; i++) arrive[i] = (int)rnd(4);
    if (sc->victim >= 0) arrive[n] = 1000;              /* arrives in the victim's slot */
    int copy_case = sc->copy ? n + (sc->victim >= 0) : -1;
    if (copy_case >= 0) arrive[copy_case] = 1000;       /* arrives once case 0's prompt is in */
    int32_t tok[MAX_SEQ * MAX_PROMPT], seq[MAX_SEQ * MAX_PROMPT], who[MAX_SEQ * MAX_PROMPT], posn[MAX_SEQ * MAX_PROMPT];
    bool want[MAX_SEQ * MAX_PROMPT];
    float *lg = calloc((size_t)MAX_SEQ * MAX_PROMPT * V, sizeof(float));
    int bad = 0, alive = n_cases;
    for (int step = 0; alive > 0 && step < 400; step++) {
        /* arrivals into free slots */
        for (int ci = 0; ci < n_cases; ci++) {
            if (done_tok[ci] || arrive[ci] > step) continue;
            bool placed = false;
            for (int sl = 0; sl < MAX_SEQ && !placed; sl++) {
                bool busy = slot_case[sl] >= 0;
                if (busy || (ci < n && sl != ci)) continue;    /* case i < n lives in slot i */
                slot_case[sl] = ci;
                placed = true;
            }
        }
        int nt = 0;
        for (int sl = 0; sl < MAX_SEQ; sl++) {
            const int ci = slot_case[sl];
            if (ci < 0) continue;
            seq_case *c = &cases[ci];
            const int total = c->n_prompt + N_GEN;
            if (done_tok[ci] >= total) continue;
            const int left = c->n_prompt - done_tok[ci];
            const int take = left > 0 ? 1 + (int)rnd((uint32_t)(left < 5 ? left : 5)) : 1;
            for (int k = 0; k < take; k++) {
                const int p = done_tok[ci] + k;
                tok[nt] = c->toks[p];
                seq[nt] = sl;
                posn[nt] = p;
                who[nt] = ci;
                want[nt] = p >= c->n_prompt - 1 || rnd(2);   /* every decode step's, some prompt tokens' */
                nt++;
            }
            done_tok[ci] += take;
        }
        if (nt == 0) continue;
        moe_batch b = {.n_tokens = nt, .token = tok, .pos = rnd(2) ? posn : NULL, .seq = seq, .logits = want};
        int rc = moe_context_decode(ctx, &b, lg);
        CHECK_MSG(rc == MOE_OK, "%s: step %d: %s", what, step, moe_context_error(ctx));
        if (rc) break;
        for (int i = 0, o = 0; i < nt; i++) {
            if (!want[i]) continue;
            const seq_case *c = &cases[who[i]];
            const int d = first_diff(lg + (size_t)o * V, c->ref + (size_t)posn[i] * V, V);
            if (d >= 0) {
                if (!bad) fprintf(stderr, "%s: case %d position %d (slot %d, %d tokens in the step): logit %d differs\n",
                                  what, who[i], posn[i], seq[i], nt, d);
                bad++;
            }
            o++;
        }
        /* finished cases leave; the victim is removed in the middle of its run */
        for (int sl = 0; sl < MAX_SEQ; sl++) {
            const int ci = slot_case[sl];
            if (ci < 0) continue;
            const int total = cases[ci].n_prompt + N_GEN;
            bool remove = done_tok[ci] >= total;
            if (ci == sc->victim && done_tok[ci] >= cases[ci].n_prompt / 2 + 1 && done_tok[ci] < total) {
                remove = true;
                arrive[n] = step + 1;                   /* its replacement takes the slot next step */
                done_tok[ci] = total;
            }
            if (!remove) continue;
            CHECK(moe_context_seq_truncate(ctx, sl, 0) == MOE_OK);
            CHECK_EQ_INT(moe_context_seq_len(ctx, sl), 0);
            slot_case[sl] = -1;
            alive--;
        }
        /* the copy: once case 0 has its whole prompt, a free slot gets its
         * prefix (all but the last 3 prompt tokens) and the copy case
         * continues from there with its own tokens */
        if (copy_case >= 0 && arrive[copy_case] == 1000 && slot_case[0] == 0 && done_tok[0] >= cases[0].n_prompt) {
            for (int sl = MAX_SEQ - 1; sl >= 0; sl--) {
                if (slot_case[sl] >= 0) continue;
                const int pre = cases[0].n_prompt - 3;
                CHECK(moe_context_seq_copy(ctx, 0, sl, pre) == MOE_OK);
                CHECK_EQ_INT(moe_context_seq_len(ctx, sl), pre);
                slot_case[sl] = copy_case;
                done_tok[copy_case] = pre;
                arrive[copy_case] = step;
                break;
            }
        }
    }
    CHECK_MSG(alive == 0, "%s: %d sequences did not finish", what, alive);
    free(lg);
    moe_context_free(ctx);
    return bad;
}

/* A bad batch is refused with a message and changes no sequence. */
static void check_errors(moe_model *m, int V) {
    char err[MOE_ERR_LEN];
    moe_context_params cp = {.n_ctx = 8, .n_threads = 2, .n_seq = 2};
    moe_context *c = NULL;
    CHECK(moe_context_new(m, &cp, &c, err, sizeof err) == MOE_OK);
    if (!c) return;
    int32_t t3[3] = {1, 2, 3}, s0[3] = {0, 0, 0}, s1[3] = {0, 1, 2}, bad_tok[2] = {5, V};
    moe_batch ok = {.n_tokens = 3, .token = t3, .seq = s0};
    CHECK(moe_context_decode(c, &ok, NULL) == MOE_OK);
    CHECK_EQ_INT(moe_context_seq_len(c, 0), 3);
    moe_batch b1 = {.n_tokens = 3, .token = t3, .seq = s1};                  /* sequence 2 of 2 */
    CHECK_EQ_INT(moe_context_decode(c, &b1, NULL), MOE_EINVAL);
    CHECK_STR_CONTAINS(moe_context_error(c), "sequence 2 at batch index 2 is outside 0..1");
    moe_batch b2 = {.n_tokens = 2, .token = bad_tok, .seq = s0};
    CHECK_EQ_INT(moe_context_decode(c, &b2, NULL), MOE_EINVAL);
    CHECK_STR_CONTAINS(moe_context_error(c), "at batch index 1 is outside");
    int32_t pos[3] = {3, 5, 0};                                               /* a gap */
    moe_batch b3 = {.n_tokens = 2, .token = t3, .seq = s0, .pos = pos};
    CHECK_EQ_INT(moe_context_decode(c, &b3, NULL), MOE_EINVAL);
    CHECK_STR_CONTAINS(moe_context_error(c), "position 5 at batch index 1 does not continue sequence 0 (next position 4)");
    int32_t t6[6] = {1, 2, 3, 4, 5, 6}, s6[6] = {0};
    moe_batch b4 = {.n_tokens = 6, .token = t6, .seq = s6};                   /* 3 + 6 > 8 */
    CHECK_EQ_INT(moe_context_decode(c, &b4, NULL), MOE_ERANGE);
    CHECK_STR_CONTAINS(moe_context_error(c), "past the context of 8");
    moe_batch b5 = {.n_tokens = 0, .token = t3, .seq = s0};
    CHECK_EQ_INT(moe_context_decode(c, &b5, NULL), MOE_EINVAL);
    CHECK_EQ_INT(moe_context_decode(c, NULL, NULL), MOE_EINVAL);
    CHECK_EQ_INT(moe_context_seq_len(c, 0), 3);                               /* nothing changed */
    CHECK_EQ_INT(moe_context_seq_len(c, 1), 0);
    CHECK_EQ_INT(moe_context_seq_len(c, 2), -1);
    CHECK_EQ_INT(moe_context_seq_truncate(c, 0, 4), MOE_EINVAL);
    CHECK_EQ_INT(moe_context_seq_truncate(c, 5, 0), MOE_EINVAL);
    CHECK_EQ_INT(moe_context_seq_copy(c, 0, 1, 4), MOE_EINVAL);
    CHECK_STR_CONTAINS(moe_context_error(c), "copy: 4 positions of sequence 0, which has 3");
    CHECK_EQ_INT(moe_context_seq_copy(c, 0, -1, 1), MOE_EINVAL);
    CHECK_EQ_INT(moe_context_seq_copy(c, 0, 0, 2), MOE_OK);                   /* onto itself: a truncate */
    CHECK_EQ_INT(moe_context_seq_len(c, 0), 2);
    moe_context_free(c);
    moe_context_params bad = {.n_seq = -1};
    CHECK_EQ_INT(moe_context_new(m, &bad, &c, err, sizeof err), MOE_EINVAL);
    CHECK(c == NULL);
    CHECK_EQ_INT(moe_context_new(NULL, NULL, &c, err, sizeof err), MOE_EINVAL);
}

/* Decode steps of a full batch of decode tokens allocate nothing. */
static void check_no_alloc(moe_model *m) {
    char err[MOE_ERR_LEN];
    moe_context_params cp = {.n_ctx = 16, .n_threads = 2, .n_seq = 4};
    moe_context *c = NULL;
    CHECK(moe_context_new(m, &cp, &c, err, sizeof err) == MOE_OK);
    if (!c) return;
    int32_t tok[4] = {1, 2, 3, 4}, seq[4] = {0, 1, 2, 3};
    float *lg = calloc((size_t)4 * moe_model_n_vocab(m), sizeof(float));
    bool want[4] = {true, true, true, true};
    moe_batch b = {.n_tokens = 4, .token = tok, .seq = seq, .logits = want};
    CHECK(moe_context_decode(c, &b, lg) == MOE_OK);
    for (int i = 0; i < 4; i++) {
        long before = check_allocs();
        CHECK(moe_context_decode(c, &b, lg) == MOE_OK);
        CHECK_MSG(check_allocs() == before, "batched decode step %d allocated %ld times", i, check_allocs() - before);
    }
    free(lg);
    moe_context_free(c);
}

/* n_numerics: the first so many of the numerics below */
static void check_model(const char *path, const char *name, size_t n_numerics) {
    static const char *const numerics[] = {"", "+kv_f16", "+kv_q8", "+act_q8,+kv_q8", "+kv_tq"};
    static const char *const isas[] = {"scalar", "avx2", "avx512"};
    char err[MOE_ERR_LEN];
    for (size_t nu = 0; nu < n_numerics && nu < sizeof numerics / sizeof numerics[0]; nu++) {
        moe_model *m = load(path, *numerics[nu] ? numerics[nu] : NULL);
        CHECK_MSG(m != NULL, "%s %s: load", name, numerics[nu]);
        if (!m) continue;
        const int V = moe_model_n_vocab(m);
        seq_case cases[MAX_SEQ + 2];
        memset(cases, 0, sizeof cases);
        rng_state = 1234 + nu;
        for (int i = 0; i < MAX_SEQ + 2; i++) {             /* prompts of 1..MAX_PROMPT tokens */
            cases[i].n_prompt = i == 0 ? MAX_PROMPT : 1 + (int)rnd(MAX_PROMPT);
            for (int k = 0; k < cases[i].n_prompt; k++) cases[i].toks[k] = (int32_t)rnd((uint32_t)V);
        }
        /* the copy case shares case 0's prompt but the last 3 tokens */
        seq_case *cc = &cases[MAX_SEQ + 1];
        cc->n_prompt = cases[0].n_prompt;
        memcpy(cc->toks, cases[0].toks, sizeof(int32_t) * (size_t)cases[0].n_prompt);
        for (int k = cc->n_prompt - 3; k < cc->n_prompt; k++) cc->toks[k] = (int32_t)rnd((uint32_t)V);
        for (int i = 0; i < MAX_SEQ + 2; i++) run_alone(m, &cases[i], V);
        /* case MAX_SEQ replaces a removed one; MAX_SEQ+1 is the copy: keep
         * them at those indices for the schedules below */
        const schedule scheds[] = {
            {1, 512, -1, false, 11}, {2, 512, 3, false, 12}, {3, 5, -1, false, 13}, {2, 7, 2, false, 14},
        };
        /* every schedule in FP32; under the other numerics the two with a
         * removal (the suite's time: each is ~4x a schedule in FP32 under ASan) */
        for (size_t k = nu ? 1 : 0; k < sizeof scheds / sizeof scheds[0]; k += nu ? 2 : 1) {
            const int n = k == 0 ? 1 : k == 1 ? MAX_SEQ - 1 : k == 2 ? 3 : MAX_SEQ - 1;
            /* the replacement must sit right after the n cases, the copy after it */
            seq_case tmp[MAX_SEQ + 2];
            memcpy(tmp, cases, sizeof(seq_case) * (size_t)n);
            int at = n;
            if (scheds[k].victim >= 0) tmp[at++] = cases[MAX_SEQ];
            tmp[at] = cases[MAX_SEQ + 1];
            schedule s = scheds[k];
            s.copy = true;
            char what[160];
            snprintf(what, sizeof what, "%s %s: %d sequences, threads %d, n_batch %d%s", name,
                     *numerics[nu] ? numerics[nu] : "fp32", n, s.threads, s.n_batch, s.victim >= 0 ? ", removal" : "");
            const int bad = run_batched(m, tmp, n, &s, V, what);
            CHECK_MSG(bad == 0, "%s: %d tokens' logits differ from the sequence run alone", what, bad);
        }
        /* every ISA this CPU has: one mixed schedule (FP32 and kv_q8, whose
         * kernels differ most between ISAs) */
        for (size_t i = 0; i < 3 && (nu == 0 || nu == 2 || nu == 4); i++) {   /* and kv_tq */
            if (moe_set_isa(isas[i], err, sizeof err) != MOE_OK) continue;
            seq_case tmp[MAX_SEQ + 2];
            memcpy(tmp, cases, sizeof(seq_case) * 4);
            tmp[4] = cases[MAX_SEQ + 1];
            schedule s = {2, 6, -1, true, 20 + i};
            char what[160];
            snprintf(what, sizeof what, "%s %s: isa %s", name, *numerics[nu] ? numerics[nu] : "fp32", isas[i]);
            CHECK_MSG(run_batched(m, tmp, 4, &s, V, what) == 0, "%s: logits differ", what);
        }
        moe_set_isa("auto", err, sizeof err);
        if (nu == 0) { check_errors(m, V); check_no_alloc(m); }
        for (int i = 0; i < MAX_SEQ + 2; i++) free(cases[i].ref);
        moe_model_free(m);
    }
}

int main(void) {
    check_alloc_guard_install();
    char dir[] = "/tmp/moefast-test-batch.XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    char err[MOE_ERR_LEN];
    static const struct { const char *arch, *type, *name; const char *const ov[4]; } models[] = {
        {"qwen3moe", "Q8_0", "qwen3moe-tiny-q8_0", {NULL}},
        {"laguna", "Q8_0", "laguna-tiny-q8_0", {"n_dense_lead=1", "n_ff=256", NULL}},
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[256], ty[64];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, models[i].name);
        snprintf(ty, sizeof ty, "type=%s", models[i].type);
        const char *ov[6] = {ty};
        for (int k = 0; models[i].ov[k]; k++) ov[k + 1] = models[i].ov[k];
        int rc = moe_gen_model(models[i].arch, "tiny", ov, path, err, sizeof err);
        CHECK_MSG(rc == MOE_OK, "gen %s: %s", models[i].name, err);
        if (rc == MOE_OK) check_model(path, models[i].name, 5);
        unlink(path);
    }
    /* the later architectures' per-token steps between the projections and
     * the attention items (olmoe's whole-row q/k norm, qwen2moe's biases,
     * glm4moe's per-head q/k norm after biases and partial RoPE), qwen2moe's
     * gated shared expert, deepseek2's latent attention (MLA items per
     * (token, head) over the shared latent cache), gpt-oss's sinks and expert
     * biases, on their reference files when ../shared is there; FP32 only
     * (the numerics do not touch those steps, and each model costs minutes
     * under ASan) */
    static const char *const shared[] = {"olmoe-tiny-q8_0", "qwen2moe-tiny-q8_0", "deepseek2-tiny-q8_0",
                                         "glm4moe-tiny-q8_0", "gpt-oss-tiny-q8_0"};
    for (size_t i = 0; i < sizeof shared / sizeof shared[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/oracle/%s.gguf", check_shared_dir(), shared[i]);
        if (access(path, R_OK) != 0) { printf("skip %s: not found (../shared absent?)\n", path); continue; }
        check_model(path, shared[i], 1);
    }
    rmdir(dir);
    return check_report("test_batch");
}
