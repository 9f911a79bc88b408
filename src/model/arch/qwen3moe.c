/* qwen3moe.c — Qwen3 mixture-of-experts (Qwen3 technical report, 2025).
 *
 * Per layer (x: [n_tok][n_embd]):
 *   h  = RMSNorm(x) * attn_norm
 *   q  = RoPE(RMSNorm_head(Wq h) * q_norm)        [n_tok][n_head][head_dim]   (NEOX pairs)
 *   k  = RoPE(RMSNorm_head(Wk h) * k_norm)        [n_tok][n_head_kv][head_dim]
 *   v  = Wv h                                     [n_tok][n_head_kv][head_dim]
 *   x += Wo softmax(q k^T / sqrt(head_dim) + causal) v
 *   h  = RMSNorm(x) * ffn_norm
 *   p  = softmax(Wr h); e = top-k(p); w = p[e] / sum p[e]
 *   x += sum_k w_k * Wdown_{e_k} (SiLU(Wgate_{e_k} h) * Wup_{e_k} h) */
#include "model/arch/arch.h"
#include "model/bind.h"
#include "model/blocks.h"
#include "base/util.h"

static void qwen3moe_layer(moe_context *c, const moe_layer *L, int il) {
    moe_block_attention(c, &L->attn, il);
    moe_block_moe(c, &L->moe, il);
}

static int qwen3moe_bind(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    int rc;
    if ((rc = moe_read_common_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_uniform_heads(m, err, errlen))) return rc;
    if ((rc = moe_check_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_rope(m, 0, "rope.freq_base", 10000.0f, "rope.dimension_count", hp->head_dim, true, err, errlen)))
        return rc;
    if ((rc = moe_bind_io(m, err, errlen))) return rc;
    for (int il = 0; il < hp->n_layer; il++) {
        moe_layer *L = &m->layers[il];
        if ((rc = moe_bind_attention(m, il, &L->attn, err, errlen))) return rc;
        if ((rc = moe_bind_moe(m, il, &L->moe, err, errlen))) return rc;
        L->moe.router.probs = moe_router_softmax;
        L->moe.router.renorm = true;   /* Qwen3-MoE renormalises the top-k weights (norm_topk_prob) */
    }
    return MOE_OK;
}

const moe_arch moe_arch_qwen3moe = {"qwen3moe", qwen3moe_bind, qwen3moe_layer};
