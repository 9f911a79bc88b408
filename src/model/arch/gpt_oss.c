/* gpt_oss.c — OpenAI gpt-oss (gpt-oss-20b / gpt-oss-120b model card, 2025;
 * llama.cpp's LLM_ARCH_OPENAI_MOE).
 *
 * Per layer l (x: [n_tok][n_embd]):
 *   h   = RMSNorm(x) * attn_norm
 *   q   = RoPE(Wq h + bq)    [n_tok][n_head][head_dim]   (n_head*head_dim need not be n_embd)
 *   k   = RoPE(Wk h + bk)    [n_tok][n_head_kv][head_dim]
 *   v   = Wv h + bv          [n_tok][n_head_kv][head_dim]
 *   a   = per head: w_j = exp(s_j - m) / (sum_i exp(s_i - m) + exp(sink_h - m)),
 *         s_j = q.k_j / sqrt(head_dim), m = max(max_j s_j, sink_h); a = sum_j w_j v_j
 *         keys: causal; sliding layers (l % pattern < pattern - 1, pattern 2:
 *         the even layers) see keys p-window+1 .. p
 *   x  += Wo a + bo
 *   h   = RMSNorm(x) * post_attention_norm
 *   l   = Wr h + br;  e = top-k(l);  w = softmax(l[e])   (over the k chosen)
 *   x  += sum_k w_k (Wd_e y_e + bd_e),
 *         y_e = min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1),
 *         g = Wg_e h + bg_e, u = Wu_e h + bu_e
 * RoPE: NEOX pairs over the whole head, YaRN on every layer (llama.cpp's
 * floored/ceiled correction range, cos/sin times 1 + 0.1 ln(factor)); the
 * sliding layers use rope.freq_base_swa (default: rope.freq_base). */
#include "model/arch/arch.h"
#include "model/bind.h"
#include "model/blocks.h"
#include "base/util.h"

enum { ROPE_FULL = 0, ROPE_SWA = 1 };

static void gpt_oss_layer(moe_context *c, const moe_layer *L, int il) {
    moe_block_attention(c, &L->attn, il);
    moe_block_moe(c, &L->moe, il);
}

/* llama.cpp loads every bias and the sinks as required tensors. */
static int need(const moe_model *m, const void *p, int il, const char *what, char *err, size_t errlen) {
    if (p) return MOE_OK;
    return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing tensor 'blk.%d.%s' (gpt-oss)", m->path, il, what);
}

/* RoPE: YaRN with llama.cpp's fixed beta_fast 32 / beta_slow 1 (the file's
 * yarn_beta_* keys are not read for gpt-oss). */
static void fix_betas(moe_model *m, moe_rope *r) {
    if (!r->yarn) return;
    if (r->yarn_beta_fast != 32.0f || r->yarn_beta_slow != 1.0f)
        moe_note(m, "gpt-oss: rope.scaling.yarn_beta_fast/slow %g/%g ignored: 32/1 used, as llama.cpp does",
                 (double)r->yarn_beta_fast, (double)r->yarn_beta_slow);
    r->yarn_beta_fast = 32.0f;
    r->yarn_beta_slow = 1.0f;
}

static int read_ropes(moe_model *m, char *err, size_t errlen) {
    const int hd = m->hp.head_dim;
    int rc = moe_read_rope(m, ROPE_FULL, "rope.freq_base", 10000.0f, "rope.dimension_count", hd, true, err, errlen);
    if (rc) return rc;
    fix_betas(m, &m->ropes[ROPE_FULL]);
    float base_swa;
    if ((rc = moe_get_f32_def(m, "rope.freq_base_swa", m->ropes[ROPE_FULL].base, &base_swa, err, errlen))) return rc;
    /* one table serves both layer types, unless their bases differ or the
     * load changed the scaling: the sliding layers keep the file's
     * frequency scale then (MOE_ROPE_SLIDING, as llama.cpp) */
    const bool override = m->rope_override.mode != MOE_ROPE_FILE || m->rope_override.factor > 0;
    if (base_swa == m->ropes[ROPE_FULL].base && !override) return MOE_OK;
    if ((rc = moe_read_rope(m, ROPE_SWA, "rope.freq_base_swa", base_swa, "rope.dimension_count", hd, MOE_ROPE_SLIDING,
                            err, errlen)))
        return rc;
    fix_betas(m, &m->ropes[ROPE_SWA]);
    return MOE_OK;
}

static int bind_layer(moe_model *m, int il, moe_layer *L, char *err, size_t errlen) {
    char n[128];
    int rc;
    if ((rc = moe_bind_attention(m, il, &L->attn, err, errlen))) return rc;
    const moe_attn_desc *a = &L->attn;
    if ((rc = need(m, a->bq, il, "attn_q.bias", err, errlen)) || (rc = need(m, a->bk, il, "attn_k.bias", err, errlen)) ||
        (rc = need(m, a->bv, il, "attn_v.bias", err, errlen)) ||
        (rc = need(m, a->bo, il, "attn_output.bias", err, errlen)) ||
        (rc = need(m, a->sinks, il, "attn_sinks.weight", err, errlen)))
        return rc;
    snprintf(n, sizeof n, "blk.%d.post_attention_norm.weight", il);
    if ((rc = moe_bind_vector(m, &L->moe.norm, n, m->hp.n_embd, true, err, errlen))) return rc;
    if ((rc = moe_bind_moe(m, il, &L->moe, err, errlen))) return rc;
    const moe_moe_desc *x = &L->moe;
    if ((rc = need(m, x->router.bias, il, "ffn_gate_inp.bias", err, errlen)) ||
        (rc = need(m, x->b_gate_exps, il, "ffn_gate_exps.bias", err, errlen)) ||
        (rc = need(m, x->b_up_exps, il, "ffn_up_exps.bias", err, errlen)) ||
        (rc = need(m, x->b_down_exps, il, "ffn_down_exps.bias", err, errlen)))
        return rc;
    L->moe.router.probs = NULL;               /* top-k on the raw logits */
    L->moe.router.softmax_topk = true;
    L->moe.router.renorm = false;
    L->moe.act = MOE_ACT_SWIGLU_CLAMP;
    return MOE_OK;
}

static int gpt_oss_bind(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    uint32_t window, pattern;
    int rc;
    if ((rc = moe_read_common_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_uniform_heads(m, err, errlen))) return rc;
    if (hp->n_ff_exp == 0)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing required key 'gpt-oss.expert_feed_forward_length'", m->path);
    if ((rc = moe_get_u32_def(m, "attention.sliding_window", 0, &window, true, err, errlen))) return rc;
    if ((rc = moe_get_u32_def(m, "attention.sliding_window_pattern", 2, &pattern, false, err, errlen))) return rc;
    if (window < 1 || window > 0x7fffffffu)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: gpt-oss.attention.sliding_window must be > 0", m->path);
    if (pattern < 1 || pattern > 4096)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: gpt-oss.attention.sliding_window_pattern must be 1..4096", m->path);
    if ((rc = moe_check_hparams(m, err, errlen))) return rc;
    if ((rc = read_ropes(m, err, errlen))) return rc;
    if ((rc = moe_bind_io(m, err, errlen))) return rc;
    for (int il = 0; il < hp->n_layer; il++) {
        moe_layer *L = &m->layers[il];
        const bool swa = (uint32_t)il % pattern < pattern - 1;
        L->attn.window = swa ? (int)window : 0;
        L->attn.rope = swa && m->n_ropes > ROPE_SWA ? ROPE_SWA : ROPE_FULL;
        if ((rc = bind_layer(m, il, L, err, errlen))) return rc;
    }
    return MOE_OK;
}

const moe_arch moe_arch_gpt_oss = {"gpt-oss", gpt_oss_bind, gpt_oss_layer};
