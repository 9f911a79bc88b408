/* forward.c — one step of the model over a batch of tokens:
 *
 *   x = embedding rows of the tokens                      [n_tok][n_embd]
 *   for each layer: the architecture's layer function (model/arch/), built
 *                   from the shared blocks (blocks.h)
 *   logits = Wout RMSNorm(x) for the tokens whose logits are wanted
 *
 * The step's tokens may belong to several sequences (c->tok_seq) at any
 * positions (c->tok_pos); every block treats each token on its own, so the
 * bits a token gets do not depend on the others (blocks.h). Differential
 * mode runs each block on the reference twin too and compares. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "base/flags.h"
#include "model/arch/arch.h"
#include "model/blocks.h"
#include "model/screen.h"
#include "moefast.h"

static void embed(moe_context *c, const int32_t *tokens, int n) {
    const moe_model *m = c->m;
    const int E = m->hp.n_embd;
    for (int t = 0; t < n; t++)                                   /* x = embedding rows  [n][E] */
        moe_dequant_row(m->tok_embd.type, m->tok_embd.data + (size_t)tokens[t] * m->tok_embd.row_bytes,
                        c->x + (size_t)t * E, E);
    PROF_MARK(c, MOE_PH_EMBED, (double)n * (double)m->tok_embd.row_bytes, 0);
}

/* logits [n_out][n_vocab] of the tokens c->out_rows[0 .. n_out-1]. */
static void head(moe_context *c, int n_out, float *logits) {
    const moe_model *m = c->m;
    const int E = m->hp.n_embd;
    for (int i = 0; i < n_out; i++)                               /* final RMSNorm of the rows we need */
        moe_rms_norm(c->x + (size_t)c->out_rows[i] * E, m->output_norm, c->xn + (size_t)i * E, E, m->hp.rms_eps);
    moe_matmul(c, &m->output, c->xn, n_out, logits);
    PROF_MARK(c, MOE_PH_LM_HEAD, (double)m->output.mat_bytes, 0);
}

/* Row i of the step's wanted tokens (its normed activation at c->xn + i·E)
 * through the screen: true when the screen certified it (its top k are in
 * c->topk_ids/vals + i·k), false when the full head must run for it. */
static bool screen_row(moe_context *c, int i) {
    const moe_model *m = c->m;
    const int E = m->hp.n_embd, k = c->topk_k;
    /* the governor (speed only, the bits are the same either way): a row the
     * screen could not certify (flat logits: too many rows reach the bound),
     * or certified slower than the full head computes a row (its time
     * measured on the context's first row and on every full-head row since:
     * where the screen's kernels are compute-bound it can read fewer bytes
     * and still lose), is a miss;
     * after SCREEN_MISSES misses in a row the next rows run the full head
     * without the screen pass — SCREEN_SKIP of them, twice as many after each
     * further run of misses (up to SCREEN_SKIP_MAX: a model whose logits stay
     * flat pays the screen on ~1 % of its steps), back to SCREEN_SKIP once a
     * row's screen pays for itself */
    enum { SCREEN_MISSES = 2, SCREEN_SKIP = 16, SCREEN_SKIP_MAX = 1024 };
    if (c->scr_skip > 0 || c->scr_t_full <= 0) { c->scr_skip -= c->scr_skip > 0; return false; }
    int32_t *ids = c->topk_ids + (size_t)i * (size_t)k;
    float *vals = c->topk_vals + (size_t)i * (size_t)k;
    moe_screen_step st = {0};
    const moe_screen_scratch scr = {c->scr_s1, c->scr_y, c->scr_ids, c->scr_done, c->scr_xq, c->scr_q120, c->scr_tv};
    const double t0 = moe_now();
    const int got = moe_screen_topk(m->screen, &m->output, c->kern, c, c->xn + (size_t)i * E, k, ids, vals, &scr,
                                    moe_flag_on(c->flags, MOE_FLAG_TEST_SCREEN_SHRINK), &st);
    const double dt = moe_now() - t0;
    c->scr_bytes += st.bytes;                              /* the screen's bytes (and the kernel rows') */
    const bool paid = got > 0 && dt < 0.9 * c->scr_t_full;
    if (!paid && ++c->scr_miss >= SCREEN_MISSES) {
        c->scr_miss = 0;
        c->scr_skip = c->scr_backoff > SCREEN_SKIP ? c->scr_backoff : SCREEN_SKIP;
        c->scr_backoff = c->scr_skip * 2 < SCREEN_SKIP_MAX ? c->scr_skip * 2 : SCREEN_SKIP_MAX;
    }
    if (paid) c->scr_miss = 0, c->scr_backoff = 0;
    if (got == 0) return false;
    for (int j = got; j < k; j++) ids[j] = -1, vals[j] = NAN;
    c->scr_screened++;
    c->scr_level2 += st.level2_rows;
    c->scr_exact += st.exact_rows;
    c->scr_last_exact = st.exact_rows;
    return true;
}

/* The top c->topk_k logits of each wanted token c->out_rows[0 .. n_out)
 * into c->topk_ids / c->topk_vals (n_out rows of k), as moe_topk orders the
 * full logits: by the screen (flag lm_screen) for the rows it certifies,
 * from the full head for the others. Either way the same ids and bits: a
 * row's kernel logits do not depend on the rows computed with it. The
 * screen reads its level-1 arrays once per row, a batched full head its
 * rows once for all: the screen is tried only while the step's rows read
 * fewer bytes that way (speed only). */
static void head_topk(moe_context *c, int n_out) {
    const moe_model *m = c->m;
    const int E = m->hp.n_embd, V = m->hp.n_vocab, k = c->topk_k, G = c->scr_group;
    for (int i = 0; i < n_out; i++)
        moe_rms_norm(c->x + (size_t)c->out_rows[i] * E, m->output_norm, c->xn + (size_t)i * E, E, m->hp.rms_eps);
    const double head_bytes = (double)m->output.mat_bytes;
    c->scr_steps += n_out;
    c->scr_full_bytes += head_bytes * (double)((n_out + G - 1) / G);
    const bool try_screen = m->screen && moe_flag_on(c->flags, MOE_FLAG_LM_SCREEN) &&
                            (double)n_out * moe_screen_l1_bytes(m->screen) < head_bytes;
    int nf = 0;                                            /* rows left for the full head, compacted in xn */
    for (int i = 0; i < n_out; i++) {
        if (try_screen && screen_row(c, i)) continue;
        if (nf != i) memmove(c->xn + (size_t)nf * E, c->xn + (size_t)i * E, sizeof(float) * (size_t)E);
        c->scr_rows[nf++] = i;
    }
    for (int g0 = 0; g0 < nf; g0 += G) {
        const int gn = nf - g0 < G ? nf - g0 : G;
        const double t0 = moe_now();
        moe_matmul(c, &m->output, c->xn + (size_t)g0 * E, gn, c->scr_y);
        c->scr_bytes += head_bytes;
        for (int r = 0; r < gn; r++) {
            const size_t o = (size_t)c->scr_rows[g0 + r] * (size_t)k;
            const int got = moe_topk(c->scr_y + (size_t)r * V, V, k, c->topk_ids + o, c->topk_vals + o);
            for (int j = got; j < k; j++) c->topk_ids[o + j] = -1, c->topk_vals[o + j] = NAN;
        }
        c->scr_last_exact = -1;
        /* the governor's yardstick: a full-head row's time, smoothed */
        const double per_row = (moe_now() - t0) / gn;
        c->scr_t_full = c->scr_t_full > 0 ? 0.75 * c->scr_t_full + 0.25 * per_row : per_row;
    }
    /* the profile keeps the weight list's figure (bytes per token); the
     * bytes really read are in moe_session_screen_stats */
    PROF_MARK(c, MOE_PH_LM_HEAD, head_bytes, 0);
}

/* Differential mode, top-k outputs: the twin's top-k (full head, every
 * speed flag off) must be the same ids and bits, row by row. */
static void diff_topk(moe_context *c, int n_out) {
    moe_context *r = c->shadow;
    const int k = c->topk_k;
    r->topk_k = k, r->topk_ids = r->twin_ids, r->topk_vals = r->twin_vals;
    head_topk(r, n_out);
    for (int j = 0; j < n_out * k; j++) {
        if (r->twin_ids[j] == c->topk_ids[j] && !memcmp(&r->twin_vals[j], &c->topk_vals[j], 4)) continue;
        const int t = c->out_rows[j / k];
        char seq[32] = "";
        if (c->n_seq > 1) snprintf(seq, sizeof seq, " of sequence %d", c->tok_seq[t]);
        moe_errf(c->err, sizeof c->err, MOE_EDIVERGE,
                 "differential mode: final top-%d entry %d differs at position %d%s: id %d logit %.9g vs the twin's id "
                 "%d logit %.9g", k, j % k, c->tok_pos[t], seq, c->topk_ids[j], (double)c->topk_vals[j], r->twin_ids[j],
                 (double)r->twin_vals[j]);
        c->diverged = true;
        return;
    }
}

bool moe_diff_check(moe_context *c, const float *a, const float *b, size_t rows, size_t cols, const char *what, int il) {
    for (size_t i = 0; i < rows * cols; i++) {
        if (!memcmp(&a[i], &b[i], sizeof(float))) continue;
        uint32_t ua, ub;
        memcpy(&ua, &a[i], 4);
        memcpy(&ub, &b[i], 4);
        char fl[128], tw[64];
        moe_flags_format(c->flags, fl, sizeof fl);
        moe_flags_format(c->shadow ? c->shadow->flags : 0, tw, sizeof tw);  /* "none" or the numerics kept */
        char where[32] = "final";
        if (il >= 0) snprintf(where, sizeof where, "layer %d", il);
        /* row i / cols is a token of the step, or (logits) its i-th wanted token */
        const size_t row = i / cols;
        const int t = il >= 0 ? (int)row : c->out_rows[row];
        char seq[32] = "";
        if (c->n_seq > 1) snprintf(seq, sizeof seq, " of sequence %d", c->tok_seq[t]);
        moe_errf(c->err, sizeof c->err, MOE_EDIVERGE,
                 "differential mode: %s %s differs at position %d%s, element %zu: %.9g (0x%08x) with flags %s "
                 "vs %.9g (0x%08x) with flags %s",
                 where, what, c->tok_pos[t], seq, i % cols, (double)a[i], ua, fl, (double)b[i], ub, tw);
        c->diverged = true;
        return false;
    }
    return true;
}

/* The reference twin runs the step's tokens at the same positions and
 * sequences. */
static void twin_share_step(moe_context *c) {
    moe_context *r = c->shadow;
    r->n_tok = c->n_tok;
    memcpy(r->tok_pos, c->tok_pos, sizeof(int32_t) * (size_t)c->n_tok);
    memcpy(r->tok_seq, c->tok_seq, sizeof(int32_t) * (size_t)c->n_tok);
    memcpy(r->out_rows, c->out_rows, sizeof(int32_t) * (size_t)c->n_tok);
    r->diverged = false;
    r->step_rc = 0;
}

int moe_forward_step(moe_context *c, const int32_t *tokens, int n, float *logits, int n_out) {
    const moe_model *m = c->m;
    c->n_tok = n;
    c->diverged = false;
    c->step_rc = 0;
    PROF_START(c);                                                /* the profile's phases chain from here */
    embed(c, tokens, n);
    if (c->shadow) {
        twin_share_step(c);
        embed(c->shadow, tokens, n);
        PROF_START(c);
    }
    for (int il = 0; il < m->hp.n_layer; il++) m->arch->layer(c, &m->layers[il], il);
    if (!logits && n_out > 0 && c->topk_k > 0 && !c->diverged) {
        head_topk(c, n_out);
        if (c->shadow) diff_topk(c, n_out);
    }
    if (logits && n_out > 0 && !c->diverged) {
        head(c, n_out, logits);
        if (c->shadow) {
            head(c->shadow, n_out, c->shadow->logits_tmp);
            moe_diff_check(c, logits, c->shadow->logits_tmp, (size_t)n_out, (size_t)m->hp.n_vocab, "logits", -1);
        }
    }
    if (c->diverged) return c->step_rc ? c->step_rc : MOE_EDIVERGE;
    if (moe_flag_on(c->flags, MOE_FLAG_TEST_SLOW)) {
        struct timespec ts = {0, 2000000L * n};
        while (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        nanosleep(&ts, NULL);
    }
    return MOE_OK;
}
