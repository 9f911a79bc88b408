/* ffn.c — the feed-forward blocks (blocks.h): a dense SwiGLU FFN, and the
 * mixture of experts (router -> top-k -> the chosen experts' SwiGLU, the
 * shared expert (optionally gated by a sigmoid), the combine in the router's
 * rank order).
 *
 * Both are lists of SwiGLU jobs — out[row] = Wd (silu(Wg x[row]) * Wu x[row])
 * for the rows of one job (a routed expert with the step's tokens that chose
 * it, the shared expert over all tokens, or the dense FFN) — run in two pool
 * phases (gate+up with SiLU, then down) over the combined row space, so
 * every thread gets an equal, contiguous share and the shared expert is
 * scheduled with the routed ones. With gemm_batch an expert's weights stream
 * once per step for every token (of every sequence) that chose it; without
 * it, token by token. Either way every output row is the same dot products. */
#include <stdio.h>
#include <string.h>

#include "attention/attn.h"
#include "base/flags.h"
#include "model/blocks.h"

typedef struct {
    moe_context *c;
    const moe_ffn_job *jobs;
    int n_jobs;
    int phase;               /* 0: gate+up with SiLU fused, 1: gate, 2: up, 3: SiLU, 4: down */
    const int64_t *pre;      /* prefix sums of the rows of this phase (each padded to 8), [n_jobs + 1] */
    const int64_t *work;     /* prefix sums of rows x tokens, [n_jobs + 1] */
} jobs_task;

/* y[t][r] += b[r] for the nr rows of y (stride floats apart), r in [r0, r1). */
static void add_rows_bias(float *y, size_t stride, int nr, const float *b, int64_t r0, int64_t r1) {
    for (int t = 0; t < nr; t++)
        for (int64_t r = r0; r < r1; r++) y[(size_t)t * stride + (size_t)r] += b[r];
}

static void jobs_worker(void *arg, int ith, int nth) {
    jobs_task *jt = arg;
    /* Each thread gets an equal share of the work (rows x tokens), cut on
     * 8-row boundaries: in a prompt chunk one expert may have 100 tokens and
     * the next one, so equal row counts would be badly unbalanced. */
    const int64_t total = jt->work[jt->n_jobs];
    const int64_t w0 = total * ith / nth, w1 = total * (ith + 1) / nth;
    for (int ji = 0; ji < jt->n_jobs; ji++) {
        const moe_ffn_job *j = &jt->jobs[ji];
        const int64_t rows = jt->pre[ji + 1] - jt->pre[ji];      /* padded to 8 */
        /* rows of this job whose work starts in [w0, w1), in units of 8 rows */
        const int64_t unit = 8 * (int64_t)j->nr, jw = jt->work[ji];
        if (jw >= w1 || jw + rows * j->nr <= w0) continue;
        int64_t u0 = w0 > jw ? (w0 - jw + unit - 1) / unit : 0;
        int64_t u1 = w1 > jw ? (w1 - jw + unit - 1) / unit : 0;
        if (ith == nth - 1) u1 = rows / 8;
        int64_t r0 = u0 * 8, r1 = u1 * 8;
        if (r1 > rows) r1 = rows;
        const size_t F = (size_t)j->wg->n_out, En = (size_t)j->wg->n_in;
        const int ph = jt->phase;
        const int64_t real = ph == 4 ? j->wd->n_out : j->wg->n_out;
        if (r1 > real) r1 = real;                    /* padding rows do not exist */
        if (r0 >= r1) continue;
        const size_t aEn = (size_t)moe_act8_row_bytes((int64_t)En), aF = (size_t)moe_act8_row_bytes((int64_t)F);
        if (ph == 0 || ph == 1) {
            moe_matmul_rows(jt->c, j->wg, j->mat, j->x, En, j->xa, aEn, j->nr, j->hg, F, r0, r1);
            if (j->bg) add_rows_bias(j->hg, F, j->nr, j->bg, r0, r1);
        }
        if (ph == 0 || ph == 2) {
            moe_matmul_rows(jt->c, j->wu, j->mat, j->x, En, j->xa, aEn, j->nr, j->hu, F, r0, r1);
            if (j->bu) add_rows_bias(j->hu, F, j->nr, j->bu, r0, r1);
        }
        if (ph == 0 || ph == 3)
            for (int t = 0; t < j->nr; t++) {
                float *g = j->hg + (size_t)t * F + (size_t)r0;
                const float *u = j->hu + (size_t)t * F + (size_t)r0;
                if (j->act == MOE_ACT_SWIGLU_CLAMP) jt->c->attn->swiglu_clamp(g, u, r1 - r0);
                else jt->c->attn->silu_mul(g, u, r1 - r0);
            }
        if (ph == 4) {
            const size_t Eo = (size_t)j->wd->n_out;
            moe_matmul_rows(jt->c, j->wd, j->mat, j->hg, F, j->ha, aF, j->nr, j->out, Eo, r0, r1);
            if (j->bd) add_rows_bias(j->out, Eo, j->nr, j->bd, r0, r1);
        }
    }
}

/* act_q8: the hidden rows of all jobs (hg after SiLU*up) quantized for the
 * down projections; rows numbered across jobs, split evenly over threads. */
typedef struct {
    const moe_kernels *k;
    const moe_ffn_job *jobs;
    int n_jobs, rows;
} hidden_q8_task;

static void hidden_q8_worker(void *arg, int ith, int nth) {
    const hidden_q8_task *t = arg;
    int64_t b, e, r = 0;
    moe_split(t->rows, ith, nth, 1, &b, &e);
    for (int i = 0; i < t->n_jobs && r < e; i++) {
        const moe_ffn_job *j = &t->jobs[i];
        if (!j->wd->a8) { r += j->nr; continue; }
        const int64_t F = j->wd->n_in;
        const size_t aF = (size_t)moe_act8_row_bytes(F);
        for (int q = 0; q < j->nr; q++, r++)
            if (r >= b && r < e) t->k->quantize_act8(j->hg + (size_t)q * (size_t)F, j->ha + (size_t)q * aF, F);
    }
}

/* Weight bytes the jobs' gate+up (down: the down) matrices stream, for the profile. */
static double jobs_bytes(const moe_ffn_job *jobs, int n_jobs, bool down) {
    double b = 0;
    for (int i = 0; i < n_jobs; i++)
        b += down ? (double)jobs[i].wd->mat_bytes : (double)jobs[i].wg->mat_bytes + (double)jobs[i].wu->mat_bytes;
    return b;
}

/* prof: mark the gate_up / hidden_q8 / down phases (MoE layers; a dense
 * layer's jobs are profiled as one dense_ffn entry by the caller). */
static void run_ffn_jobs(moe_context *c, const moe_ffn_job *jobs, int n_jobs, bool prof) {
    int64_t *pre = c->job_pre, *work = c->job_pre + (n_jobs + 1);
    jobs_task jt = {c, jobs, n_jobs, 0, pre, work};
    pre[0] = work[0] = 0;
    /* rows padded to 8 (thread cuts fall on 8-row boundaries, as the x4 layout needs) */
    for (int i = 0; i < n_jobs; i++) {
        pre[i + 1] = pre[i] + ((jobs[i].wg->n_out + 7) & ~(int64_t)7);
        work[i + 1] = work[i] + (pre[i + 1] - pre[i]) * jobs[i].nr;
    }
    if (moe_flag_on(c->flags, MOE_FLAG_FUSED_GATE_UP)) {
        moe_ctx_par(c, jobs_worker, &jt);
    } else {
        for (jt.phase = 1; jt.phase <= 3; jt.phase++) moe_ctx_par(c, jobs_worker, &jt);
    }
    if (prof) PROF_MARK(c, MOE_PH_GATE_UP, jobs_bytes(jobs, n_jobs, false), 0);
    bool any_a8 = false;
    for (int i = 0; i < n_jobs; i++) any_a8 |= jobs[i].wd->a8;
    if (any_a8) {                                    /* act_q8: hidden rows -> A8, in parallel */
        hidden_q8_task hq = {c->kern, jobs, n_jobs, 0};
        for (int i = 0; i < n_jobs; i++) hq.rows += jobs[i].nr;
        if (hq.rows == 1 || c->n_threads == 1) hidden_q8_worker(&hq, 0, 1);
        else moe_pool_run(c->pool, hidden_q8_worker, &hq);
        if (prof) PROF_MARK(c, MOE_PH_HIDDEN_Q8, 0, 0);
    }
    for (int i = 0; i < n_jobs; i++) {
        pre[i + 1] = pre[i] + ((jobs[i].wd->n_out + 7) & ~(int64_t)7);
        work[i + 1] = work[i] + (pre[i + 1] - pre[i]) * jobs[i].nr;
    }
    jt.phase = 4;
    moe_ctx_par(c, jobs_worker, &jt);
    if (prof) PROF_MARK(c, MOE_PH_DOWN, jobs_bytes(jobs, n_jobs, true), 0);
}

/* ---- the dense FFN ------------------------------------------------------------------- */

static void ffn_run(moe_context *c, const moe_ffn_desc *d) {
    const int n = c->n_tok, E = c->m->hp.n_embd;
    moe_norm_tokens(c, d->norm);                                  /* h = RMSNorm(x) * norm  [n][E] */
    const uint8_t *xa = moe_act_rows(c, &d->gate, c->xn, (size_t)E, n, c->xa);
    if (!xa) xa = moe_act_rows(c, &d->up, c->xn, (size_t)E, n, c->xa);
    c->jobs[0] = (moe_ffn_job){.wg = &d->gate, .wu = &d->up, .wd = &d->down, .mat = 0, .x = c->xn,
                               .xa = xa, .nr = n, .ha = c->ha, .hg = c->hg, .hu = c->hu, .out = c->ffn_out};
    PROF_MARK(c, MOE_PH_FFN_NORM, 0, 0);
    run_ffn_jobs(c, c->jobs, 1, false);
    for (size_t i = 0; i < (size_t)n * E; i++) c->x[i] += c->ffn_out[i];
    PROF_MARK(c, MOE_PH_DENSE_FFN, jobs_bytes(c->jobs, 1, false) + jobs_bytes(c->jobs, 1, true), 0);
}

/* ---- routing -------------------------------------------------------------------------- */

void moe_router_softmax(float *p, int n) {                       /* ggml soft_max: double sum */
    float mx = -INFINITY;
    for (int e = 0; e < n; e++) if (p[e] > mx) mx = p[e];
    double sum = 0.0;
    for (int e = 0; e < n; e++) { p[e] = moe_expf(p[e] - mx); sum += (double)p[e]; }
    const float inv = (float)(1.0 / sum);
    for (int e = 0; e < n; e++) p[e] *= inv;
}

void moe_router_sigmoid(float *p, int n) {
    for (int e = 0; e < n; e++) p[e] = 1.0f / (1.0f + moe_expf(-p[e]));
}

const char *moe_router_name(moe_router_probs_fn f) {
    return !f ? "none" : f == moe_router_sigmoid ? "sigmoid" : f == moe_router_softmax ? "softmax" : "custom";
}

/* Group-limited routing (DeepSeek-V3, llama.cpp's for every deepseek2):
 * the NE experts form n_group consecutive groups; a group's score is the
 * sum of its two best selection scores (p + bias), the best first (a float
 * add, as ggml's sum of the top-2 rows); the n_group_used best groups (ties
 * to the lower group) stay, every expert of the others is marked taken so
 * top-k cannot choose it (bind checks that enough remain). */
static void limit_groups(const moe_router_desc *r, const float *p, int NE, uint64_t *taken) {
    const int G = r->n_group, per = NE / G;
    float gs[4096];
    bool kept[4096] = {false};
    for (int g = 0; g < G; g++) {
        float b1 = -INFINITY, b2 = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++) {
            const float v = r->select_bias ? p[e] + r->select_bias[e] : p[e];
            if (v > b1) { b2 = b1; b1 = v; }
            else if (v > b2) b2 = v;
        }
        gs[g] = per > 1 ? b1 + b2 : b1;
    }
    for (int u = 0; u < r->n_group_used; u++) {
        int best = -1;
        for (int g = 0; g < G; g++)
            if (!kept[g] && (best < 0 || gs[g] > gs[best])) best = g;
        kept[best] = true;
    }
    for (int g = 0; g < G; g++)
        if (!kept[g])
            for (int e = g * per; e < (g + 1) * per; e++) taken[e >> 6] |= 1ull << (e & 63);
}

/* Chooses experts and weights for token t (rank order = descending score,
 * ties to the lowest id). */
static void route_token(const moe_context *c, const moe_router_desc *r, int t, bool perturb) {
    const moe_hparams *hp = &c->m->hp;
    const int NE = hp->n_expert, K = hp->n_expert_used;
    float *p = c->router + (size_t)t * NE;                       /* logits -> probabilities in place */
    if (r->bias)
        for (int e = 0; e < NE; e++) p[e] += r->bias[e];
    if (r->probs) r->probs(p, NE);
    int32_t *sel = c->sel + (size_t)t * K;
    float *w = c->selw + (size_t)t * K;
    uint64_t taken[64] = {0};                                     /* n_expert <= 4096 */
    if (r->n_group > 1) limit_groups(r, p, NE, taken);            /* the other groups' experts: out */
    for (int k = 0; k < K; k++) {                                 /* top-k on p (+ bias) */
        int best = -1;
        float bv = -INFINITY;
        for (int e = 0; e < NE; e++) {
            if ((taken[e >> 6] >> (e & 63)) & 1) continue;
            float v = r->select_bias ? p[e] + r->select_bias[e] : p[e];
            if (best < 0 || v > bv) { best = e; bv = v; }
        }
        taken[best >> 6] |= 1ull << (best & 63);
        sel[k] = best;
        w[k] = p[best];
    }
    if (r->softmax_topk) moe_router_softmax(w, K);               /* over the chosen scores, rank order */
    if (r->renorm) {
        double sum = 0.0;
        for (int k = 0; k < K; k++) sum += (double)w[k];
        float fs = (float)sum;
        if (fs < 6.103515625e-5f) fs = 6.103515625e-5f;
        for (int k = 0; k < K; k++) w[k] /= fs;
    }
    if (r->scale != 1.0f)
        for (int k = 0; k < K; k++) w[k] *= r->scale;
    if (perturb)                                                  /* TEST ONLY: reversed weighting */
        for (int k = 0; k < K / 2; k++) { float tmp = w[k]; w[k] = w[K - 1 - k]; w[K - 1 - k] = tmp; }
}

/* Routing of a prompt's tokens, spread over the pool (each token's choice
 * is its own: ~3 us of sigmoids and top-k per token). */
typedef struct {
    moe_context *c;
    const moe_router_desc *r;
    bool perturb;
} route_task;

static void route_worker(void *arg, int ith, int nth) {
    const route_task *rt = arg;
    int64_t b, e;
    moe_split(rt->c->n_tok, ith, nth, 1, &b, &e);
    for (int64_t t = b; t < e; t++) route_token(rt->c, rt->r, (int)t, rt->perturb && rt->c->tok_pos[t] >= 20);
}

/* Gathered rows [r0, r1): row r gets token gather_src[r]'s normed row (and
 * its A8 row, when xa), unless it is -1 (the row is read in place). */
typedef struct {
    moe_context *c;
    const uint8_t *xa;
    int r0, r1;
} gather_task;

static void gather_worker(void *arg, int ith, int nth) {
    const gather_task *g = arg;
    moe_context *c = g->c;
    const size_t E = (size_t)c->m->hp.n_embd, aE = (size_t)moe_act8_row_bytes((int64_t)E);
    int64_t b, e;
    moe_split(g->r1 - g->r0, ith, nth, 1, &b, &e);
    for (int64_t r = g->r0 + b; r < g->r0 + e; r++) {
        const int t = c->gather_src[r];
        if (t < 0) continue;
        memcpy(c->xg + (size_t)r * E, c->xn + (size_t)t * E, E * sizeof(float));
        if (g->xa) memcpy(c->xga + (size_t)r * aE, g->xa + (size_t)t * aE, aE);
    }
}

/* ffn_out[t] = sum over ranks k of eout[slot(t, k)] * w[t][k] (+ the shared
 * expert's proj[t], first multiplied by sigmoid(its gate logit) when gated),
 * then x[t] += ffn_out[t]: the router's rank order for
 * every element (the combine kernel, attn.h: the same bits at every ISA). */
typedef struct {
    moe_context *c;
    bool shared;
    const float *sh_gate;    /* [n_tok] logits of the shared expert's gate, or NULL */
} combine_task;

static void combine_worker(void *arg, int ith, int nth) {
    const combine_task *ct = arg;
    moe_context *c = ct->c;
    const size_t E = (size_t)c->m->hp.n_embd;
    const int K = c->m->hp.n_expert_used;
    int64_t b, e;
    moe_split(c->n_tok, ith, nth, 1, &b, &e);
    for (int64_t t = b; t < e; t++) {
        float *sh = ct->shared ? c->proj + (size_t)t * E : NULL;
        if (sh && ct->sh_gate) {                 /* the shared output times its gate, then added (llama.cpp's order) */
            const float g = 1.0f / (1.0f + moe_expf(-ct->sh_gate[t]));
            for (size_t i = 0; i < E; i++) sh[i] *= g;
        }
        c->attn->combine(c->eout, c->ex_slot + (size_t)t * K, c->selw + (size_t)t * K, K, sh, c->ffn_out + (size_t)t * E,
                         c->x + (size_t)t * E, (int)E);
    }
}

/* The jobs of tokens [t_begin, t_end): rows by expert (ascending id), each
 * expert's in token order (a counting sort of the tokens' (token, rank)
 * choices), gathered from xn after `rows`; returns the job count and
 * advances *rows. */
static int expert_jobs(moe_context *c, const moe_moe_desc *d, const uint8_t *xa, int t_begin, int t_end, int *rows) {
    const moe_hparams *hp = &c->m->hp;
    const int E = hp->n_embd, NE = hp->n_expert, K = hp->n_expert_used;
    const size_t Fx = (size_t)hp->n_ff_exp;
    const size_t aE = (size_t)moe_act8_row_bytes(E), aFx = (size_t)moe_act8_row_bytes((int64_t)Fx);
    const bool glue = moe_flag_on(c->flags, MOE_FLAG_PARALLEL_GLUE);
    int32_t *cnt = c->expert_rows;
    int n_jobs = 0;
    memset(cnt, 0, sizeof(int32_t) * (size_t)NE);
    for (int t = t_begin; t < t_end; t++)
        for (int k = 0; k < K; k++) cnt[c->sel[(size_t)t * K + k]]++;
    const int rows0 = *rows;
    for (int e = 0; e < NE; e++) {
        const int n_e = cnt[e];
        cnt[e] = *rows;                                           /* its first row, then the next free one */
        *rows += n_e;
    }
    for (int t = t_begin; t < t_end; t++)
        for (int k = 0; k < K; k++) {
            const int r = cnt[c->sel[(size_t)t * K + k]]++;
            c->ex_slot[(size_t)t * K + k] = r;
            c->gather_src[r] = t;
        }
    for (int e = 0, start = rows0; e < NE; start = cnt[e], e++) {
        if (cnt[e] == start) continue;                            /* not chosen by these tokens */
        const int t_first = c->gather_src[start];
        /* with parallel_glue an expert with one token reads its row where it
         * is; another shard's expert needs its rows gathered (they are sent) */
        const bool in_place = glue && cnt[e] - start == 1 && e < c->m->ex_end;
        if (in_place) c->gather_src[start] = -1;
        c->jobs[n_jobs++] = (moe_ffn_job){.wg = &d->gate_exps, .wu = &d->up_exps, .wd = &d->down_exps, .mat = e,
                                          .x = in_place ? c->xn + (size_t)t_first * E : c->xg + (size_t)start * E,
                                          .xa = !xa        ? NULL
                                                : in_place ? xa + (size_t)t_first * aE
                                                           : c->xga + (size_t)start * aE,
                                          .nr = cnt[e] - start,
                                          .ha = c->ha ? c->ha + (size_t)start * aFx : NULL,
                                          .hg = c->hg + (size_t)start * Fx, .hu = c->hu + (size_t)start * Fx,
                                          .out = c->eout + (size_t)start * E,
                                          .bg = d->b_gate_exps ? d->b_gate_exps + (size_t)e * Fx : NULL,
                                          .bu = d->b_up_exps ? d->b_up_exps + (size_t)e * Fx : NULL,
                                          .bd = d->b_down_exps ? d->b_down_exps + (size_t)e * E : NULL,
                                          .act = d->act};
    }
    gather_task gt = {c, xa, rows0, *rows};                       /* the copies, [n*K][E] */
    if (glue && *rows - rows0 > K) moe_ctx_par(c, gather_worker, &gt);
    else gather_worker(&gt, 0, 1);
    return n_jobs;
}

/* ---- expert parallelism (moefast/shard.h) ------------------------------------------------ */

static void shard_fail(moe_context *c, int rc) {
    c->step_rc = rc;
    c->diverged = true;                           /* the remaining blocks do nothing; the step fails */
}

/* Shard 0: sends the jobs of other shards' experts — jobs [n_local, n_jobs)
 * of expert_jobs' ascending list, so each shard's jobs follow one another
 * with their rows consecutive in xg and eout — to their shards, whose
 * replies land in eout; returns n_local, the jobs computed here. */
static int post_remote(moe_context *c, int il, int n_jobs) {
    const moe_model *m = c->m;
    const moe_shard_link *link = m->link;
    const int NE = m->hp.n_expert, E = m->hp.n_embd;
    int n_local = 0;
    while (n_local < n_jobs && c->jobs[n_local].mat < m->ex_end) n_local++;
    for (int j = n_local, s = 1; j < n_jobs; s++) {
        int first, end;
        moe_shard_range(NE, s, m->n_shards, &first, &end);
        if (c->jobs[j].mat >= end) continue;      /* no token chose this shard's experts */
        moe_shard_head *h = (moe_shard_head *)(void *)(c->shard_heads + (size_t)s * c->shard_head_bytes);
        moe_shard_group *g = (moe_shard_group *)(h + 1);
        const int j0 = j;
        int ng = 0, rows = 0;
        for (; j < n_jobs && c->jobs[j].mat < end; j++, ng++) {
            g[ng] = (moe_shard_group){(int32_t)c->jobs[j].mat, c->jobs[j].nr};
            rows += c->jobs[j].nr;
        }
        *h = (moe_shard_head){MOE_SHARD_MAGIC, MOE_SHARD_VERSION, il, ng, rows, E,
                              c->n_batch * m->hp.n_expert_used, 0};
        const size_t bytes = (size_t)rows * (size_t)E * sizeof(float);
        const int rc = link->post(link->user, s, h, sizeof *h + (size_t)ng * sizeof *g, c->jobs[j0].x, bytes,
                                  c->jobs[j0].out, bytes, c->err, sizeof c->err);
        if (rc) { shard_fail(c, rc); break; }
    }
    return n_local;
}

static void wait_remote(moe_context *c) {
    char err[MOE_ERR_LEN];
    const int rc = c->m->link->wait(c->m->link->user, err, sizeof err);
    if (rc && !c->step_rc) {
        snprintf(c->err, sizeof c->err, "%s", err);
        shard_fail(c, rc);
    }
}

int moe_shard_experts(moe_context *c, int il, const moe_shard_group *g, int n_groups, const float *rows,
                      float *out) {
    const moe_hparams *hp = &c->m->hp;
    const moe_moe_desc *d = &c->m->layers[il].moe;
    const size_t E = (size_t)hp->n_embd, Fx = (size_t)hp->n_ff_exp;
    const size_t aE = (size_t)moe_act8_row_bytes((int64_t)E), aFx = (size_t)moe_act8_row_bytes((int64_t)Fx);
    int n_rows = 0;
    for (int i = 0; i < n_groups; i++) n_rows += g[i].rows;
    /* the same A8 rows shard 0 gathers: one row's quantization reads that row alone */
    const uint8_t *xa = moe_act_rows(c, &d->gate_exps, rows, E, n_rows, c->xga);
    if (!xa) xa = moe_act_rows(c, &d->up_exps, rows, E, n_rows, c->xga);
    for (int i = 0, r = 0; i < n_groups; r += g[i].rows, i++) {
        const size_t e = (size_t)g[i].expert, o = (size_t)r;
        c->jobs[i] = (moe_ffn_job){.wg = &d->gate_exps, .wu = &d->up_exps, .wd = &d->down_exps, .mat = (int64_t)e,
                                   .x = rows + o * E, .xa = xa ? xa + o * aE : NULL, .nr = g[i].rows,
                                   .ha = c->ha ? c->ha + o * aFx : NULL, .hg = c->hg + o * Fx, .hu = c->hu + o * Fx,
                                   .out = out + o * E,
                                   .bg = d->b_gate_exps ? d->b_gate_exps + e * Fx : NULL,
                                   .bu = d->b_up_exps ? d->b_up_exps + e * Fx : NULL,
                                   .bd = d->b_down_exps ? d->b_down_exps + e * E : NULL, .act = d->act};
    }
    run_ffn_jobs(c, c->jobs, n_groups, false);
    return MOE_OK;
}

static void moe_run(moe_context *c, const moe_moe_desc *d, int il) {
    const moe_hparams *hp = &c->m->hp;
    const int n = c->n_tok, E = hp->n_embd, K = hp->n_expert_used;
    const size_t Fx = (size_t)hp->n_ff_exp;
    moe_norm_tokens(c, d->norm);                                  /* h = RMSNorm(x) * norm  [n][E] */
    PROF_MARK(c, MOE_PH_FFN_NORM, 0, 0);
    /* router logits [n][NE] (and the shared gate's [n][1] in the same phase) */
    const moe_weight *rw[2] = {&d->router.w, &d->shared_gate};
    float *ry[2] = {c->router, c->gate};
    const int nrw = d->has_shared && d->shared_gate.data ? 2 : 1;
    moe_matmul_multi(c, rw, ry, nrw, c->xn, moe_act_rows_multi(c, rw, nrw, c->xn, n), n);
    PROF_MARK(c, MOE_PH_ROUTER, (double)d->router.w.mat_bytes + (nrw > 1 ? (double)d->shared_gate.mat_bytes : 0), 0);
    const bool glue = moe_flag_on(c->flags, MOE_FLAG_PARALLEL_GLUE);
    route_task rt = {c, &d->router, moe_flag_on(c->flags, MOE_FLAG_TEST_PERTURB) && il == hp->n_layer - 1};
    if (glue && n > 1) moe_ctx_par(c, route_worker, &rt);
    else route_worker(&rt, 0, 1);
    PROF_MARK(c, MOE_PH_ROUTE, 0, 0);

    /* act_q8: xn as A8 rows, once; expert jobs gather these rows like xg */
    const uint8_t *xa = moe_act_rows(c, &d->gate_exps, c->xn, (size_t)E, n, c->xa);
    if (!xa) xa = moe_act_rows(c, &d->up_exps, c->xn, (size_t)E, n, c->xa);
    if (!xa && d->has_shared) xa = moe_act_rows(c, &d->gate_sh, c->xn, (size_t)E, n, c->xa);
    if (!xa && d->has_shared) xa = moe_act_rows(c, &d->up_sh, c->xn, (size_t)E, n, c->xa);
    PROF_EXTEND(c, MOE_PH_FFN_NORM);                              /* the input quantization: with the norm */
    const size_t aFx = (size_t)moe_act8_row_bytes((int64_t)Fx);
    const bool batch = moe_flag_on(c->flags, MOE_FLAG_GEMM_BATCH);
    int rows = 0;                                                 /* gathered rows [n*K][E] in xg */
    for (int t_begin = 0; t_begin < n;) {
        const int t_end = batch ? n : t_begin + 1;
        int n_jobs = expert_jobs(c, d, xa, t_begin, t_end, &rows);
        if (c->m->link) n_jobs = post_remote(c, il, n_jobs);    /* other shards' experts computed there meanwhile */
        if (d->has_shared && t_end == n) {                        /* shared expert: all n tokens, same phases */
            const size_t off = (size_t)n * K * Fx;
            c->jobs[n_jobs++] = (moe_ffn_job){.wg = &d->gate_sh, .wu = &d->up_sh, .wd = &d->down_sh, .mat = 0,
                                              .x = c->xn, .xa = xa, .nr = n,
                                              .ha = c->ha ? c->ha + (size_t)n * K * aFx : NULL,
                                              .hg = c->hg + off, .hu = c->hu + off, .out = c->proj};
        }
        PROF_EXTEND(c, MOE_PH_ROUTE);                             /* the gather (and job list) */
        run_ffn_jobs(c, c->jobs, n_jobs, true);
        if (c->m->link) {
            wait_remote(c);
            PROF_MARK(c, MOE_PH_EXPERT_WAIT, 0, 0);
        }
        t_begin = t_end;
    }
    if (c->step_rc) return;
    /* rank order, + shared; x += ffn_out. With parallel_glue the step's
     * tokens are spread over the pool; one token stays here (~1 us per
     * layer). Cutting the down phase by output rows to combine inside it was
     * tried: the short per-expert row ranges streamed at 50-80 % of the
     * work-split phase's speed. */
    combine_task ct = {c, d->has_shared, nrw > 1 ? c->gate : NULL};
    if (glue && n > 1) moe_ctx_par(c, combine_worker, &ct);
    else combine_worker(&ct, 0, 1);
    PROF_MARK(c, MOE_PH_COMBINE, 0, 0);
}

/* ---- the blocks, with the differential twin in lockstep -------------------------------- */

static void ffn_check(moe_context *c, const moe_context *r, int il) {
    const size_t N = (size_t)c->n_tok, E = (size_t)c->m->hp.n_embd;
    (void)(moe_diff_check(c, c->ffn_out, r->ffn_out, N, E, "ffn output", il) &&
           moe_diff_check(c, c->x, r->x, N, E, "residual after ffn", il));
}

void moe_block_ffn(moe_context *c, const moe_ffn_desc *d, int il) {
    if (c->diverged) return;
    ffn_run(c, d);
    if (!c->shadow) return;
    ffn_run(c->shadow, d);
    ffn_check(c, c->shadow, il);
    PROF_START(c);
}

void moe_block_moe(moe_context *c, const moe_moe_desc *d, int il) {
    if (c->diverged) return;
    moe_run(c, d, il);
    moe_context *r = c->shadow;
    if (!r || c->step_rc) return;
    moe_run(r, d, il);
    if (r->step_rc) {                             /* the twin's link failed: the step fails */
        snprintf(c->err, sizeof c->err, "%s", r->err);
        shard_fail(c, r->step_rc);
        return;
    }
    if (moe_diff_check(c, c->router, r->router, (size_t)c->n_tok, (size_t)c->m->hp.n_expert, "router probabilities", il))
        ffn_check(c, r, il);
    PROF_START(c);
}
