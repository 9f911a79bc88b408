/* olmoe.c — OLMoE (Muennighoff et al., "OLMoE: Open Mixture-of-Experts
 * Language Models", 2024).
 *
 * Per layer (x: [n_tok][n_embd]):
 *   h  = RMSNorm(x) * attn_norm
 *   q  = RoPE(RMSNorm(Wq h) * q_norm)   the norm over the whole row (all
 *   k  = RoPE(RMSNorm(Wk h) * k_norm)   heads), then the split into heads;
 *   v  = Wv h                           NEOX pairs (i, i + head_dim/2)
 *   x += Wo softmax(q k^T / sqrt(head_dim) + causal) v
 *   h  = RMSNorm(x) * ffn_norm
 *   p  = softmax(Wr h); e = top-k(p); w = p[e]        (not renormalised)
 *   x += sum_k w_k * Wdown_{e_k} (SiLU(Wgate_{e_k} h) * Wup_{e_k} h)
 * As in llama.cpp, the experts' width is olmoe.feed_forward_length. */
#include "model/arch/arch.h"
#include "model/bind.h"
#include "model/blocks.h"
#include "base/util.h"

static void olmoe_layer(moe_context *c, const moe_layer *L, int il) {
    moe_block_attention(c, &L->attn, il);
    moe_block_moe(c, &L->moe, il);
}

static int olmoe_bind(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    int rc;
    if ((rc = moe_read_common_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_uniform_heads(m, err, errlen))) return rc;
    hp->n_ff_exp = hp->n_ff;
    if (hp->n_ff < 1)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: olmoe.feed_forward_length (the experts' width) is missing or 0", m->path);
    if ((rc = moe_check_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_rope(m, 0, "rope.freq_base", 10000.0f, "rope.dimension_count", hp->head_dim, true, err, errlen)))
        return rc;
    if ((rc = moe_bind_io(m, err, errlen))) return rc;
    for (int il = 0; il < hp->n_layer; il++) {
        moe_layer *L = &m->layers[il];
        L->attn.qk_norm_full = true;
        if ((rc = moe_bind_attention(m, il, &L->attn, err, errlen))) return rc;
        if (!L->attn.q_norm || !L->attn.k_norm)
            return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing tensor 'blk.%d.attn_%s_norm.weight' (olmoe)", m->path, il,
                            L->attn.q_norm ? "k" : "q");
        if ((rc = moe_bind_moe(m, il, &L->moe, err, errlen))) return rc;
        L->moe.router.probs = moe_router_softmax;
        L->moe.router.renorm = false;
    }
    return MOE_OK;
}

const moe_arch moe_arch_olmoe = {"olmoe", olmoe_bind, olmoe_layer};
