/* qwen2moe.c — Qwen1.5-MoE / Qwen2-MoE (Qwen2 technical report, 2024).
 *
 * Per layer (x: [n_tok][n_embd]):
 *   h  = RMSNorm(x) * attn_norm
 *   q  = RoPE(Wq h + bq)   [n_tok][n_head][head_dim]      (NEOX pairs)
 *   k  = RoPE(Wk h + bk)   [n_tok][n_head_kv][head_dim]
 *   v  = Wv h + bv         [n_tok][n_head_kv][head_dim]
 *   x += Wo softmax(q k^T / sqrt(head_dim) + causal) v
 *   h  = RMSNorm(x) * ffn_norm
 *   p  = softmax(Wr h); e = top-k(p); w = p[e]        (not renormalised)
 *   x += sum_k w_k SwiGLU_{e_k}(h) + sigmoid(w_sg . h) * SwiGLU_shared(h)
 * As in llama.cpp: the experts' width defaults to feed_forward_length /
 * expert_used_count, the shared expert's to feed_forward_length. */
#include "model/arch/arch.h"
#include "model/bind.h"
#include "model/blocks.h"
#include "base/util.h"

static void qwen2moe_layer(moe_context *c, const moe_layer *L, int il) {
    moe_block_attention(c, &L->attn, il);
    moe_block_moe(c, &L->moe, il);
}

static int qwen2moe_bind(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    uint32_t u;
    int rc;
    if ((rc = moe_read_common_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_uniform_heads(m, err, errlen))) return rc;
    if ((rc = moe_get_u32_def(m, "expert_shared_feed_forward_length", (uint32_t)hp->n_ff, &u, false, err, errlen)))
        return rc;
    hp->n_ff_shexp = (int)u;
    if (hp->n_ff_exp == 0 && hp->n_expert_used > 0) {
        hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
        moe_note(m, "qwen2moe.expert_feed_forward_length absent: feed_forward_length / expert_used_count = %d used",
                 hp->n_ff_exp);
    }
    if (hp->n_ff_shexp < 1)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: qwen2moe.expert_shared_feed_forward_length missing or 0", m->path);
    if ((rc = moe_check_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_rope(m, 0, "rope.freq_base", 10000.0f, "rope.dimension_count", hp->head_dim, true, err, errlen)))
        return rc;
    if ((rc = moe_bind_io(m, err, errlen))) return rc;
    for (int il = 0; il < hp->n_layer; il++) {
        moe_layer *L = &m->layers[il];
        if ((rc = moe_bind_attention(m, il, &L->attn, err, errlen))) return rc;
        if ((rc = moe_bind_moe(m, il, &L->moe, err, errlen))) return rc;
        if (!L->moe.shared_gate.data)
            return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing tensor 'blk.%d.ffn_gate_inp_shexp.weight' (qwen2moe)", m->path,
                            il);
        L->moe.router.probs = moe_router_softmax;
        L->moe.router.renorm = false;
    }
    return MOE_OK;
}

const moe_arch moe_arch_qwen2moe = {"qwen2moe", qwen2moe_bind, qwen2moe_layer};
