/* glm4moe.c — GLM-4.5 / GLM-4.6 / GLM-4.5-Air (GLM-4.5 Team, "GLM-4.5:
 * Agentic, Reasoning, and Coding (ARC) Foundation Models", 2025).
 *
 * Per layer l < n_layer (x: [n_tok][n_embd]):
 *   h   = RMSNorm(x) * attn_norm
 *   q   = RoPE(RMSNorm_head(Wq h + bq) * q_norm)   [n_tok][n_head][head_dim]
 *   k   = RoPE(RMSNorm_head(Wk h + bk) * k_norm)   [n_tok][n_head_kv][head_dim]
 *   v   = Wv h + bv                                 (q/k norms optional)
 *         RoPE: NEOX pairs (i, i + n_rot/2) over the first n_rot dims of a
 *         head (GLM: half of them); the other dims pass unrotated
 *   x  += Wo softmax(q k^T / sqrt(head_dim) + causal) v
 *   h   = RMSNorm(x) * post_attention_norm
 *   x  += l < n_dense_lead ? SwiGLU_dense(h)
 *                          : sum_k w_k SwiGLU_{e_k}(h) + SwiGLU_shared(h)
 *         router: p = sigmoid(Wr h); e = top-k of (p + exp_probs_b);
 *                 w = p[e] (/ max(sum p[e], 6.1e-5) if expert_weights_norm)
 *                     * expert_weights_scale
 *         shared: n_expert_shared experts as one SwiGLU of their total width
 * block_count counts nextn_predict_layers multi-token-prediction blocks
 * appended after the decoder: their tensors are checked as llama.cpp
 * requires them (the file is refused without them) but they never run and
 * are not part of the bytes read per token. */
#include <string.h>

#include "model/arch/arch.h"
#include "model/bind.h"
#include "model/blocks.h"
#include "base/util.h"

static void glm4moe_layer(moe_context *c, const moe_layer *L, int il) {
    moe_block_attention(c, &L->attn, il);
    if (L->dense) moe_block_ffn(c, &L->ffn, il);
    else moe_block_moe(c, &L->moe, il);
}

/* One block's tensors: attention, post_attention_norm (the FFN's input
 * norm, bound before the FFN helpers so they keep it), then the dense FFN or
 * the MoE with its required selection bias. */
static int bind_block(moe_model *m, int il, moe_layer *L, char *err, size_t errlen) {
    char n[128];
    int rc;
    if ((rc = moe_bind_attention(m, il, &L->attn, err, errlen))) return rc;
    snprintf(n, sizeof n, "blk.%d.post_attention_norm.weight", il);
    if ((rc = moe_bind_vector(m, L->dense ? &L->ffn.norm : &L->moe.norm, n, m->hp.n_embd, true, err, errlen))) return rc;
    if (L->dense) return moe_bind_dense_ffn(m, il, &L->ffn, err, errlen);
    if ((rc = moe_bind_moe(m, il, &L->moe, err, errlen))) return rc;
    if (!L->moe.router.select_bias)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing tensor 'blk.%d.exp_probs_b.bias' (glm4moe)", m->path, il);
    return MOE_OK;
}

/* The multi-token-prediction block's own tensors (besides a block's). */
static int check_nextn(moe_model *m, int il, char *err, size_t errlen) {
    const int64_t E = m->hp.n_embd, V = m->hp.n_vocab;
    static const struct { const char *name; int kind; bool required; } T[] = {
        {"nextn.eh_proj.weight", 2, true},       {"nextn.enorm.weight", 1, true},
        {"nextn.hnorm.weight", 1, true},         {"nextn.shared_head_norm.weight", 1, false},
        {"nextn.shared_head_head.weight", 3, false}, {"nextn.embed_tokens.weight", 3, false},
    };
    char n[128];
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        snprintf(n, sizeof n, "blk.%d.%s", il, T[i].name);
        moe_weight w;
        const float *v;
        int rc = T[i].kind == 1 ? moe_bind_vector(m, &v, n, E, T[i].required, err, errlen)
                 : moe_bind_weight(m, &w, n, T[i].kind == 2 ? 2 * E : E, T[i].kind == 2 ? E : V, 0, MOE_USE_ALL,
                                   T[i].required, err, errlen);
        if (rc < 0) return rc;
    }
    return MOE_OK;
}

static int glm4moe_bind(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    uint32_t u;
    int rc, n_shared, n_dense_lead, n_nextn, gating, groups, groups_used;
    bool renorm;
    float scale;
#define U32(key, def, req, dst) do { if ((rc = moe_get_u32_def(m, key, def, &u, req, err, errlen))) return rc; dst = (int)u; } while (0)
    if ((rc = moe_read_common_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_uniform_heads(m, err, errlen))) return rc;
    U32("expert_shared_count", 0, true, n_shared);
    U32("leading_dense_block_count", 0, false, n_dense_lead);
    U32("nextn_predict_layers", 0, false, n_nextn);
    U32("expert_gating_func", 2, false, gating);   /* llama.cpp: absent (0) means sigmoid for GLM */
#undef U32
    if ((rc = moe_get_bool_def(m, "expert_weights_norm", false, &renorm, err, errlen))) return rc;
    if ((rc = moe_get_f32_def(m, "expert_weights_scale", 1.0f, &scale, err, errlen))) return rc;
    if (scale == 0.0f) scale = 1.0f;   /* llama.cpp: 0 means no scaling */
    if (gating == 0) gating = 2;
    if (gating != 1 && gating != 2)
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: glm4moe.expert_gating_func %d not supported (1 softmax, 2 sigmoid)",
                        m->path, gating);
    if ((rc = moe_read_expert_groups(m, &groups, &groups_used, err, errlen))) return rc;
    if (n_nextn < 0 || n_nextn >= hp->n_layer)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: glm4moe.nextn_predict_layers %d must be < block_count %d", m->path,
                        n_nextn, hp->n_layer);
    const int n_run = hp->n_layer - n_nextn;
    if (n_dense_lead > n_run)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: glm4moe.leading_dense_block_count %d > the %d decoder blocks", m->path,
                        n_dense_lead, n_run);
    if (n_dense_lead > 0 && hp->n_ff < 1)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: glm4moe.feed_forward_length is needed for the leading dense blocks",
                        m->path);
    if (hp->n_ff_exp < 1)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing required key 'glm4moe.expert_feed_forward_length'", m->path);
    hp->n_ff_shexp = hp->n_ff_exp * n_shared;   /* as llama.cpp: the shared experts side by side */
    if ((rc = moe_check_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_rope(m, 0, "rope.freq_base", 10000.0f, "rope.dimension_count", hp->head_dim, true, err, errlen)))
        return rc;
    if ((rc = moe_bind_io(m, err, errlen))) return rc;
    int n_weights_run = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        moe_layer *L = &m->layers[il];
        /* the MTP blocks' matrices leave the weight list: never multiplied */
        if (il == n_run) n_weights_run = m->n_weights;
        L->dense = il < n_dense_lead;
        if ((rc = bind_block(m, il, L, err, errlen))) return rc;
        if (il >= n_run && (rc = check_nextn(m, il, err, errlen))) return rc;
        if (L->dense) continue;
        L->moe.router.probs = gating == 2 ? moe_router_sigmoid : moe_router_softmax;
        L->moe.router.renorm = renorm;
        L->moe.router.scale = scale;
        L->moe.router.n_group = groups;
        L->moe.router.n_group_used = groups_used;
    }
    if (n_nextn > 0) {
        m->n_weights = n_weights_run;
        hp->n_layer = n_run;
        moe_note(m, "glm4moe: %d multi-token-prediction block(s) checked, not run", n_nextn);
    }
    return MOE_OK;
}

const moe_arch moe_arch_glm4moe = {"glm4moe", glm4moe_bind, glm4moe_layer};
