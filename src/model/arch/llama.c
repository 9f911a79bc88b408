/* llama.c — the Llama architecture with experts: Mixtral (Jiang et al.,
 * "Mixtral of Experts", 2024) and other `llama` GGUFs with expert_count > 0.
 *
 * Per layer (x: [n_tok][n_embd]):
 *   h  = RMSNorm(x) * attn_norm
 *   q  = RoPE(Wq h)   [n_tok][n_head][head_dim]      adjacent pairs (2i, 2i+1):
 *   k  = RoPE(Wk h)   [n_tok][n_head_kv][head_dim]   llama.cpp's NORM mode
 *   v  = Wv h         [n_tok][n_head_kv][head_dim]   (q/k/v/output biases when present)
 *   x += Wo softmax(q k^T / sqrt(head_dim) + causal) v
 *   h  = RMSNorm(x) * ffn_norm
 *   p  = softmax(Wr h); e = top-k(p); w = p[e] / sum p[e]
 *   x += sum_k w_k * Wdown_{e_k} (SiLU(Wgate_{e_k} h) * Wup_{e_k} h)
 * As in llama.cpp, the experts' width is llama.feed_forward_length
 * (expert_feed_forward_length is not read) and the RoPE covers the whole head.
 * A llama file without experts is a dense model: refused. */
#include "model/arch/arch.h"
#include "model/bind.h"
#include "model/blocks.h"
#include "base/util.h"

static void llama_layer(moe_context *c, const moe_layer *L, int il) {
    moe_block_attention(c, &L->attn, il);
    moe_block_moe(c, &L->moe, il);
}

static int llama_bind(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    uint32_t u = 0;
    int rc = gguf_get_u32(m->gf, "llama.expert_count", &u, err, errlen);
    if (rc < 0) return rc;
    if (rc == 1 || u == 0)
        return moe_errf(err, errlen, MOE_EUNSUPPORTED,
                        "%s: llama without experts (llama.expert_count absent or 0) is not a MoE model moefast runs", m->path);
    if (gguf_find_tensor(m->gf, "rope_freqs.weight"))
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: tensor 'rope_freqs.weight' (Llama-3 RoPE factors) is not supported",
                        m->path);
    if ((rc = moe_read_common_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_uniform_heads(m, err, errlen))) return rc;
    float scale = 0.0f;   /* llama.cpp's kq scale override (Granite): not supported */
    if ((rc = gguf_get_f32(m->gf, "llama.attention.scale", &scale, err, errlen)) < 0) return rc;
    if (scale != 0.0f)
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: llama.attention.scale %g is not supported (1/sqrt(head_dim) only)",
                        m->path, (double)scale);
    hp->n_ff_exp = hp->n_ff;
    if (hp->n_ff < 1)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: llama.feed_forward_length (the experts' width) is missing or 0", m->path);
    if ((rc = moe_check_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_rope(m, 0, "rope.freq_base", 10000.0f, "rope.dimension_count", hp->head_dim, true, err, errlen)))
        return rc;
    if (m->ropes[0].n_rot != hp->head_dim)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: llama.rope.dimension_count %d must equal the head size %d", m->path,
                        m->ropes[0].n_rot, hp->head_dim);
    m->ropes[0].adjacent = true;
    if ((rc = moe_bind_io(m, err, errlen))) return rc;
    for (int il = 0; il < hp->n_layer; il++) {
        moe_layer *L = &m->layers[il];
        if ((rc = moe_bind_attention(m, il, &L->attn, err, errlen))) return rc;
        if ((rc = moe_bind_moe(m, il, &L->moe, err, errlen))) return rc;
        L->moe.router.probs = moe_router_softmax;
        L->moe.router.renorm = true;   /* Mixtral renormalises its top-k weights */
    }
    return MOE_OK;
}

const moe_arch moe_arch_llama = {"llama", llama_bind, llama_layer};
