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
 * first n_rot dims), sliding-window attention elsewhere (plain RoPE). */
#include <stdlib.h>
#include <string.h>

#include "model/arch/arch.h"
#include "model/bind.h"
#include "model/blocks.h"
#include "base/util.h"

#define MAX_LAYERS 4096
enum { ROPE_FULL = 0, ROPE_SWA = 1 };

/* The softplus output gate, applied to query heads [h0, h1) of token t: one
 * factor per head, or (hook_arg) one per element. */
static void laguna_gate(const moe_context *c, const moe_attn_desc *d, int t, int h0, int h1) {
    const int H = d->n_head, Dv = c->m->hp.head_dim_v;
    for (int h = h0; h < h1; h++) {
        float *o = c->att + ((size_t)t * H + h) * Dv;
        if (d->hook_arg) {
            const float *gp = c->gate + ((size_t)t * H + h) * Dv;
            for (int i = 0; i < Dv; i++) o[i] *= moe_softplus(gp[i]);
        } else {
            const float gv = moe_softplus(c->gate[(size_t)t * H + h]);
            for (int i = 0; i < Dv; i++) o[i] *= gv;
        }
    }
}

static void laguna_layer(moe_context *c, const moe_layer *L, int il) {
    moe_block_attention(c, &L->attn, il);
    if (L->dense) moe_block_ffn(c, &L->ffn, il);
    else moe_block_moe(c, &L->moe, il);
}

/* Query heads: an array (one per layer) or a single value. */
static int read_heads(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    int32_t heads[MAX_LAYERS];
    size_t nh = 0;
    int rc = gguf_get_i32_array(m->gf, "laguna.attention.head_count", heads, MAX_LAYERS, &nh, err, errlen);
    if (rc < 0) {
        uint32_t h1;
        if (gguf_get_u32(m->gf, "laguna.attention.head_count", &h1, NULL, 0) != MOE_OK) return rc;
        for (int il = 0; il < hp->n_layer; il++) heads[il] = (int32_t)h1;
        nh = (size_t)hp->n_layer;
    } else if (rc == 1) {
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing required key 'laguna.attention.head_count'", m->path);
    }
    if (nh != (size_t)hp->n_layer)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: laguna.attention.head_count has %zu entries for %d layers", m->path,
                        nh, hp->n_layer);
    hp->n_head_max = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        m->layers[il].attn.n_head = heads[il];
        if (heads[il] > hp->n_head_max) hp->n_head_max = heads[il];
    }
    if (hp->n_head_max < 1) return moe_errf(err, errlen, MOE_EFORMAT, "%s: laguna.attention.head_count must be >= 1", m->path);
    return MOE_OK;
}

/* The output gate's row count tells per-head from per-element gating. */
static int bind_gate(moe_model *m, int il, moe_attn_desc *d, char *err, size_t errlen) {
    char n[128];
    snprintf(n, sizeof n, "blk.%d.attn_gate.weight", il);
    const gguf_tensor *gt = gguf_find_tensor(m->gf, n);
    if (!gt) return MOE_OK;
    const int64_t rows = gt->ne[1], Dv = m->hp.head_dim_v;
    d->hook_arg = rows == (int64_t)d->n_head * Dv && rows != d->n_head;
    const int64_t want = d->hook_arg ? (int64_t)d->n_head * Dv : d->n_head;
    d->head_hook = laguna_gate;
    return moe_bind_weight(m, &d->wextra, n, m->hp.n_embd, want, 0, MOE_USE_ALL, true, err, errlen);
}

/* YaRN of the full layers beyond moe_read_rope's generic keys.
 * - rope.scaling.yarn_beta_fast absent: 64, not the generic YaRN default 32
 *   that llama.cpp falls back to. Every Laguna checkpoint is trained with
 *   beta_fast 64 and its converter writes the key, so a file without it lost
 *   the key, not the value; 64 keeps such a file running as trained (llama.cpp
 *   would run it with 32: the one place an absent key makes us differ).
 * - rope.scaling.attn_factor (optional, default 1): llama.cpp multiplies it
 *   into the YaRN attn_factor, i.e. cos and sin are scaled by
 *   attn_factor * (1 + 0.1 ln factor) on the YaRN layers; moe_rope.attn_factor
 *   is that same pre-correction magnitude. */
static int read_yarn_extras(moe_model *m, bool beta_fast_absent, char *err, size_t errlen) {
    moe_rope *r = &m->ropes[ROPE_FULL];
    if (!r->yarn) return MOE_OK;
    if (beta_fast_absent) {
        r->yarn_beta_fast = 64.0f;
        for (int i = m->n_notes - 1; i >= 0; i--) {  /* the generic note said 32 */
            if (!strstr(m->notes[i], "yarn_beta_fast absent")) continue;
            char *n = strdup("laguna.rope.scaling.yarn_beta_fast absent: Laguna's 64 used");
            if (n) { free(m->notes[i]); m->notes[i] = n; }
            break;
        }
    }
    int rc = moe_get_f32_def(m, "rope.scaling.attn_factor", 1.0f, &r->attn_factor, err, errlen);
    if (rc) return rc;
    if (!(r->attn_factor > 0.0f && r->attn_factor < 1e6f))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: laguna.rope.scaling.attn_factor = %g must be in (0, 1e6)", m->path,
                        (double)r->attn_factor);
    return MOE_OK;
}

static int laguna_bind(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    uint32_t u;
    int rc, swa_window, swa_pattern, n_dense_lead, gating;
    bool renorm;
    float scale;
#define U32(key, def, req, dst) do { if ((rc = moe_get_u32_def(m, key, def, &u, req, err, errlen))) return rc; dst = (int)u; } while (0)
    if ((rc = moe_read_common_hparams(m, err, errlen))) return rc;
    U32("attention.head_count_kv", 0, true, hp->n_head_kv);
    U32("expert_shared_feed_forward_length", 0, false, hp->n_ff_shexp);
    U32("leading_dense_block_count", 0, false, n_dense_lead);
    U32("attention.sliding_window", 0, false, swa_window);
    U32("attention.sliding_window_pattern", 4, false, swa_pattern);
    U32("expert_gating_func", 2, false, gating);
#undef U32
    if ((rc = read_heads(m, err, errlen)) || (rc = moe_read_head_dims(m, err, errlen))) return rc;
    if ((rc = moe_get_bool_def(m, "expert_weights_norm", true, &renorm, err, errlen))) return rc;
    if ((rc = moe_get_f32_def(m, "expert_weights_scale", 1.0f, &scale, err, errlen))) return rc;
    if (gating != 1 && gating != 2)
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: laguna.expert_gating_func %d not supported (1 softmax, 2 sigmoid)",
                        m->path, gating);
    if (swa_pattern < 1)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: laguna.attention.sliding_window_pattern must be >= 1", m->path);
    if ((rc = moe_check_hparams(m, err, errlen))) return rc;
    float beta;
    const bool beta_absent = gguf_get_f32(m->gf, "laguna.rope.scaling.yarn_beta_fast", &beta, NULL, 0) == 1;
    if ((rc = moe_read_rope(m, ROPE_FULL, "rope.freq_base", 10000.0f, "rope.dimension_count", hp->head_dim, true, err,
                            errlen)) ||
        (rc = read_yarn_extras(m, beta_absent, err, errlen)))
        return rc;
    /* absent: the full layers' base, as llama.cpp defaults it */
    if (swa_window > 0 && (rc = moe_read_rope(m, ROPE_SWA, "rope.freq_base_swa", m->ropes[ROPE_FULL].base,
                                              "rope.dimension_count_swa", hp->head_dim, false, err, errlen)))
        return rc;
    if (n_dense_lead > hp->n_layer)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: laguna.leading_dense_block_count %d > block_count %d", m->path,
                        n_dense_lead, hp->n_layer);
    if (n_dense_lead > 0 && hp->n_ff < 1)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: laguna.feed_forward_length is needed for the leading dense layers",
                        m->path);
    if ((rc = moe_bind_io(m, err, errlen))) return rc;
    for (int il = 0; il < hp->n_layer; il++) {
        moe_layer *L = &m->layers[il];
        const bool swa = swa_window > 0 && il % swa_pattern != 0;
        L->attn.window = swa ? swa_window : 0;
        L->attn.rope = swa ? ROPE_SWA : ROPE_FULL;
        L->dense = il < n_dense_lead;
        if ((rc = moe_bind_attention(m, il, &L->attn, err, errlen))) return rc;
        if ((rc = bind_gate(m, il, &L->attn, err, errlen))) return rc;
        if (L->dense) {
            if ((rc = moe_bind_dense_ffn(m, il, &L->ffn, err, errlen))) return rc;
            continue;
        }
        if ((rc = moe_bind_moe(m, il, &L->moe, err, errlen))) return rc;
        L->moe.router.probs = gating == 2 ? moe_router_sigmoid : moe_router_softmax;
        L->moe.router.renorm = renorm;
        L->moe.router.scale = scale;
    }
    return MOE_OK;
}

const moe_arch moe_arch_laguna = {"laguna", laguna_bind, laguna_layer};
