/* laguna.c — poolside Laguna (XS 2.1 layout).
 *
 * Per layer l (x: [n_tok][n_embd]):
 *   h   = RMSNorm(x) * attn_norm                                  [n_tok][n_embd]
 *   q   = RoPE_l(RMSNorm_head(Wq h) * q_norm)                     [n_tok][n_head_l][head_dim]
 *   k   = RoPE_l(RMSNorm_head(Wk h) * k_norm)                     [n_tok][n_head_kv][head_dim]
 *   v   = Wv h                                                    [n_tok][n_head_kv][head_dim_v]
 *   a   = softmax(q k^T / sqrt(head_dim) + mask_l) v              [n_tok][n_head_l][head_dim_v]
 *         mask_l: causal; sliding-window layers see keys p-window+1 .. p
 *   a  *= softplus(Wgate h)      (one factor per head, or per element)
 *   x  += Wo a
 *   h   = RMSNorm(x) * ffn_norm
 *   x  += l < n_dense_lead ? SwiGLU_dense(h)
 *                          : sum_k w_k SwiGLU_{e_k}(h) + SwiGLU_shared(h)
 *         router: p = sigmoid(Wr h); e = top-k of (p + exp_probs_b);
 *                 w = p[e] / max(sum p[e], 6.1e-5) * expert_weights_scale
 * Layer types: full attention where l % pattern == 0 (YaRN RoPE over the
 * first n_rot dims), sliding-window attention elsewhere (plain RoPE). The
 * forward pass itself is the shared one in forward.c, driven by the layer
 * table built here. */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "base/util.h"

#define MAX_LAYERS 4096

int moe_bind_laguna(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    uint32_t u;
    int rc;
#define U32(key, def, req, dst) do { if ((rc = moe_get_u32_def(m, key, def, &u, req, err, errlen))) return rc; dst = (int)u; } while (0)
    if ((rc = moe_read_common_hparams(m, err, errlen))) return rc;
    U32("attention.head_count_kv", 0, true, hp->n_head_kv);
    U32("expert_shared_feed_forward_length", 0, false, hp->n_ff_shexp);
    U32("leading_dense_block_count", 0, false, hp->n_dense_lead);
    U32("attention.sliding_window", 0, false, hp->swa_window);
    U32("attention.sliding_window_pattern", 4, false, hp->swa_pattern);
    U32("expert_gating_func", 2, false, hp->gating_func);
    if (hp->n_layer < 1 || hp->n_layer > MAX_LAYERS)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: laguna.block_count %d out of range", m->path, hp->n_layer);
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", m->path);

    /* Query heads: an array (one per layer) or a single value. */
    int32_t heads[MAX_LAYERS];
    size_t nh = 0;
    rc = gguf_get_i32_array(m->gf, "laguna.attention.head_count", heads, MAX_LAYERS, &nh, err, errlen);
    if (rc < 0) {
        uint32_t h1;
        int rc2 = gguf_get_u32(m->gf, "laguna.attention.head_count", &h1, NULL, 0);
        if (rc2 != MOE_OK) return rc;
        for (int il = 0; il < hp->n_layer; il++) heads[il] = (int32_t)h1;
        nh = (size_t)hp->n_layer;
    } else if (rc == 1) {
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing required key 'laguna.attention.head_count'", m->path);
    }
    if (nh != (size_t)hp->n_layer)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: laguna.attention.head_count has %zu entries for %d layers",
                        m->path, nh, hp->n_layer);
    hp->n_head_max = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        m->layers[il].n_head = heads[il];
        if (heads[il] > hp->n_head_max) hp->n_head_max = heads[il];
    }
    if (hp->n_head_max < 1) return moe_errf(err, errlen, MOE_EFORMAT, "%s: laguna.attention.head_count must be >= 1", m->path);
    U32("attention.key_length", (uint32_t)(hp->n_embd / hp->n_head_max), false, hp->head_dim);
    U32("attention.value_length", (uint32_t)hp->head_dim, false, hp->head_dim_v);
    bool norm = true;
    char key[160];
    snprintf(key, sizeof key, "laguna.expert_weights_norm");
    if ((rc = gguf_get_bool(m->gf, key, &norm, err, errlen)) < 0) return rc;
    if (rc == 1) moe_note(m, "%s absent: default true used", key);
    hp->expert_weights_norm = norm;
    if ((rc = moe_get_f32_def(m, "expert_weights_scale", 1.0f, &hp->expert_weights_scale, err, errlen))) return rc;
    if (hp->gating_func != 1 && hp->gating_func != 2)
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: laguna.expert_gating_func %d not supported (1 softmax, 2 sigmoid)",
                        m->path, hp->gating_func);
    if (hp->swa_pattern < 1)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: laguna.attention.sliding_window_pattern must be >= 1", m->path);
    if ((rc = moe_check_hparams(m, err, errlen))) return rc;

    if ((rc = moe_read_rope(m, &hp->rope_full, "rope.freq_base", 10000.0f, "rope.dimension_count", hp->head_dim, true, err, errlen))) return rc;
    if (hp->swa_window > 0) {
        /* absent: the full layers' base, as llama.cpp defaults it */
        if ((rc = moe_read_rope(m, &hp->rope_swa, "rope.freq_base_swa", hp->rope_full.base, "rope.dimension_count_swa",
                                hp->head_dim, false, err, errlen))) return rc;
    }
    if (hp->n_dense_lead > hp->n_layer)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: laguna.leading_dense_block_count %d > block_count %d", m->path,
                        hp->n_dense_lead, hp->n_layer);
    if (hp->n_dense_lead > 0 && hp->n_ff < 1)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: laguna.feed_forward_length is needed for the leading dense layers", m->path);
#undef U32

    if ((rc = moe_bind_io(m, err, errlen))) return rc;
    char n[128];
    for (int il = 0; il < hp->n_layer; il++) {
        moe_layer *L = &m->layers[il];
        L->swa = hp->swa_window > 0 && il % hp->swa_pattern != 0;
        L->rope = L->swa ? &hp->rope_swa : &hp->rope_full;
        L->dense = il < hp->n_dense_lead;
        if ((rc = moe_bind_attention(m, il, err, errlen))) return rc;
        /* The gate's row count tells per-head from per-element gating. */
        snprintf(n, sizeof n, "blk.%d.attn_gate.weight", il);
        const gguf_tensor *gt = gguf_find_tensor(m->gf, n);
        if (gt) {
            int64_t rows = gt->ne[1];
            L->gate_per_elem = rows == (int64_t)L->n_head * hp->head_dim_v && rows != L->n_head;
            int64_t want = L->gate_per_elem ? (int64_t)L->n_head * hp->head_dim_v : L->n_head;
            if ((rc = moe_bind_weight(m, &L->wgate, n, hp->n_embd, want, 0, true, err, errlen))) return rc;
            L->has_gate = true;
        }
        if ((rc = moe_bind_ffn(m, il, err, errlen))) return rc;
    }
    return MOE_OK;
}
