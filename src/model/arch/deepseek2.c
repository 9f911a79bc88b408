/* deepseek2.c — DeepSeek-V2 / V2.5 / V3 / R1, Kimi-K2 (DeepSeek-V2 paper,
 * arXiv:2405.04434; DeepSeek-V3 technical report, arXiv:2412.19437).
 *
 * Per layer l (x: [n_tok][n_embd]):
 *   h   = RMSNorm(x) * attn_norm
 *   x  += MLA(h)          multi-head latent attention (blocks/mla.c):
 *         c_Q = RMSNorm(W_DQ h) * q_a_norm;  q = W_UQ c_Q  (q_lora_rank 0: q = W_Q h)
 *         [c_KV | k_R] = W_DKV h;  c_KV = RMSNorm(c_KV) * kv_a_norm;  k_R = RoPE(k_R)
 *         per head i: q_i = [q_i^C | RoPE(q_i^R)];  key_j = [W_UK,i c_j | k_R,j];
 *                     value_j = W_UV,i c_j
 *         computed absorbed: score = (W_UK,i^T q_i^C) . c_j + RoPE(q_i^R) . k_R,j,
 *         o_i = W_UV,i (sum_j softmax_j c_j); the cache holds only [c_KV | k_R]
 *         softmax scale mscale^2 / sqrt(nope + rope), mscale = 1 + 0.1 m ln(factor)
 *   h   = RMSNorm(x) * ffn_norm
 *   x  += l < n_dense_lead ? SwiGLU_dense(h)
 *                          : sum_k g_k SwiGLU_{e_k}(h) + SwiGLU_shared(h)
 *         router: s = sigmoid(W_r h) (V3) or softmax(W_r h) (V2);
 *                 experts in n_group groups, keep the n_group_used groups
 *                 whose two best (s + exp_probs_b) sum highest, then top-k of
 *                 s + exp_probs_b among them; g = s[e] (/ sum if
 *                 expert_weights_norm) * expert_weights_scale
 * RoPE: adjacent pairs (llama.cpp's NORM), YaRN frequencies without the
 * magnitude factor when yarn_log_multiplier is present (the factor moves
 * into the softmax scale). Files with attn_kv_b (before key_length_mla
 * existed) are bound and refused: reconvert them. */
#include <math.h>
#include <string.h>

#include "model/arch/arch.h"
#include "model/bind.h"
#include "model/blocks.h"
#include "base/util.h"

static void deepseek2_layer(moe_context *c, const moe_layer *L, int il) {
    moe_block_mla(c, &L->mla, &L->attn, il);
    if (L->dense) moe_block_ffn(c, &L->ffn, il);
    else moe_block_moe(c, &L->moe, il);
}

typedef struct {
    int n_dense_lead, gating, n_shared, n_group, n_group_used, q_lora, kv_lora, rope, nope, v_dim;
    bool renorm, mla;
    float scale, yarn_log_mul;
} ds2_keys;

/* The keys llama.cpp reads for deepseek2, with its defaults. */
static int read_keys(moe_model *m, ds2_keys *k, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    uint32_t u;
    int rc;
#define U32(key, def, req, dst) do { if ((rc = moe_get_u32_def(m, key, def, &u, req, err, errlen))) return rc; dst = (int)u; } while (0)
    U32("leading_dense_block_count", 0, false, k->n_dense_lead);
    /* llama.cpp's "lite" models (26/27 layers, or 48 with a 128256 vocab) have no q LoRA */
    const bool lite = hp->n_layer == 26 || hp->n_layer == 27 || (hp->n_layer == 48 && hp->n_vocab == 128256);
    U32("attention.q_lora_rank", 0, !lite, k->q_lora);
    U32("attention.kv_lora_rank", 0, true, k->kv_lora);
    U32("expert_shared_count", 0, true, k->n_shared);
    U32("expert_gating_func", 1, false, k->gating);
    U32("rope.dimension_count", 0, true, k->rope);
    if ((rc = moe_read_expert_groups(m, &k->n_group, &k->n_group_used, err, errlen))) return rc;
    char key[160];
    snprintf(key, sizeof key, "%s.attention.key_length_mla", m->arch_name);
    uint32_t kmla = 0, vmla = 0;
    k->mla = (rc = gguf_get_u32(m->gf, key, &kmla, err, errlen)) == 0;
    if (rc < 0) return rc;
    if (k->mla) U32("attention.value_length_mla", 0, true, vmla);
#undef U32
    if ((rc = moe_get_bool_def(m, "expert_weights_norm", false, &k->renorm, err, errlen))) return rc;
    if ((rc = moe_get_f32_def(m, "expert_weights_scale", 0.0f, &k->scale, err, errlen))) return rc;
    if ((rc = moe_get_f32_def(m, "rope.scaling.yarn_log_multiplier", 0.0f, &k->yarn_log_mul, err, errlen))) return rc;
    /* MLA files: key_length = C + rope (the latent row), value_length = C;
     * the per-head sizes are the *_mla keys. Legacy: the per-head sizes. */
    const int kd = k->mla ? (int)kmla : hp->head_dim, vd = k->mla ? (int)vmla : hp->head_dim_v;
    k->nope = kd - k->rope;
    k->v_dim = vd;
    return MOE_OK;
}

static int check_keys(moe_model *m, const ds2_keys *k, char *err, size_t errlen) {
    const moe_hparams *hp = &m->hp;
#define NEED(cond, ...) do { if (!(cond)) return moe_errf(err, errlen, MOE_EFORMAT, __VA_ARGS__); } while (0)
    NEED(k->gating == 1 || k->gating == 2, "%s: deepseek2.expert_gating_func %d not supported (1 softmax, 2 sigmoid)",
         m->path, k->gating);
    NEED(k->kv_lora >= 1 && k->kv_lora <= 65536, "%s: deepseek2.attention.kv_lora_rank %d out of range", m->path, k->kv_lora);
    NEED(k->rope >= 2 && k->rope % 2 == 0 && k->nope >= 1 && k->v_dim >= 1,
         "%s: deepseek2 head sizes: rope %d (even, >= 2), nope %d and v %d (>= 1) do not fit", m->path, k->rope, k->nope,
         k->v_dim);
    NEED(k->n_shared >= 1, "%s: deepseek2.expert_shared_count must be >= 1", m->path);
    NEED(k->n_dense_lead <= hp->n_layer, "%s: deepseek2.leading_dense_block_count %d > block_count %d", m->path,
         k->n_dense_lead, hp->n_layer);
    NEED(k->n_dense_lead == 0 || hp->n_ff >= 1, "%s: deepseek2.feed_forward_length is needed for the dense layers", m->path);
    /* the projections' inputs share the context's act_q8 rows (width max(n_embd, H*C)) */
    const int64_t wide = hp->n_embd > (int64_t)hp->n_head_max * k->kv_lora ? hp->n_embd : (int64_t)hp->n_head_max * k->kv_lora;
    NEED(k->q_lora <= wide && (int64_t)hp->n_head_max * k->v_dim <= wide,
         "%s: deepseek2: q_lora_rank %d or n_head x v %d exceeds max(n_embd, n_head x kv_lora_rank)", m->path, k->q_lora,
         hp->n_head_max * k->v_dim);
#undef NEED
    return MOE_OK;
}

/* YaRN as llama.cpp applies it to deepseek2 (llama-context.cpp, deepseek2.cpp):
 * the rotation's magnitude attn_factor = get_mscale(F, m') / get_mscale(F, L) /
 * (1 + 0.1 ln F) (with ggml's own 1 + 0.1 ln F it cancels to ~1 when L != 0),
 * and the softmax scale mscale^2 / sqrt(nope + rope). */
static float get_mscale(float scale, float ms) { return scale <= 1.0f ? 1.0f : 0.1f * ms * logf(scale) + 1.0f; }

static float yarn_setup(moe_model *m, const ds2_keys *k) {
    moe_rope *r = &m->ropes[0];
    const float L = k->yarn_log_mul / 0.1f;    /* the converter writes 0.1 * mscale_all_dim */
    float freq_scale = 1.0f, attn = 1.0f;
    if (r->yarn) {
        freq_scale = 1.0f / r->yarn_factor;
        const float F = 1.0f / freq_scale;
        if (L != 0.0f) attn = get_mscale(F, L != 1.0f ? L : 1.0f) / get_mscale(F, L);
        else attn = get_mscale(F, 1.0f);
        attn *= 1.0f / (1.0f + 0.1f * logf(F));
        r->attn_factor = attn;
    }
    const float attn_org = attn * (1.0f + 0.1f * logf(1.0f / freq_scale));
    const float mscale = attn_org * (1.0f + 0.1f * L * logf(1.0f / freq_scale));
    return 1.0f * mscale * mscale / sqrtf((float)(k->nope + k->rope));
}

#define T(suffix) (snprintf(n, sizeof n, "blk.%d.%s", il, suffix), n)

static int bind_mla(moe_model *m, int il, const ds2_keys *k, moe_mla_desc *d, char *err, size_t errlen) {
    const moe_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, H = hp->n_head_max, C = k->kv_lora, R = k->rope, Dq = k->nope + k->rope;
    char n[128];
    int rc;
    if ((rc = moe_bind_vector(m, &d->norm, T("attn_norm.weight"), E, true, err, errlen))) return rc;
    if (k->q_lora) {
        if ((rc = moe_bind_weight(m, &d->wq_a, T("attn_q_a.weight"), E, k->q_lora, 0, MOE_USE_ALL, true, err, errlen))) return rc;
        if ((rc = moe_bind_vector(m, &d->q_a_norm, T("attn_q_a_norm.weight"), k->q_lora, true, err, errlen))) return rc;
        if ((rc = moe_bind_weight(m, &d->wq_b, T("attn_q_b.weight"), k->q_lora, H * Dq, 0, MOE_USE_ALL, true, err, errlen)))
            return rc;
    } else if ((rc = moe_bind_weight(m, &d->wq, T("attn_q.weight"), E, H * Dq, 0, MOE_USE_ALL, true, err, errlen))) {
        return rc;
    }
    if ((rc = moe_bind_weight(m, &d->wkv_a, T("attn_kv_a_mqa.weight"), E, C + R, 0, MOE_USE_ALL, true, err, errlen))) return rc;
    if ((rc = moe_bind_vector(m, &d->kv_a_norm, T("attn_kv_a_norm.weight"), C, true, err, errlen))) return rc;
    if (!k->mla) {
        if ((rc = moe_bind_weight(m, &d->wk_b, T("attn_kv_b.weight"), C, H * (k->nope + k->v_dim), 0, MOE_USE_ALL, true, err,
                                  errlen)))
            return rc;
        return moe_errf(err, errlen, MOE_EUNSUPPORTED,
                        "%s: 'blk.%d.attn_kv_b.weight' without deepseek2.attention.key_length_mla is the legacy layout; "
                        "reconvert the model (attn_k_b / attn_v_b)", m->path, il);
    }
    if ((rc = moe_bind_weight(m, &d->wk_b, T("attn_k_b.weight"), k->nope, C, H, MOE_USE_ALL, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->wv_b, T("attn_v_b.weight"), C, k->v_dim, H, MOE_USE_ALL, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->wo, T("attn_output.weight"), H * k->v_dim, E, 0, MOE_USE_ALL, true, err, errlen)))
        return rc;
    d->nope = k->nope, d->rope_dim = k->rope, d->kv_lora = k->kv_lora, d->v_dim = k->v_dim, d->q_lora = k->q_lora;
    return MOE_OK;
}

#undef T

static int deepseek2_bind(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    ds2_keys k = {0};
    int rc;
    if ((rc = moe_read_common_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_uniform_heads(m, err, errlen))) return rc;
    if ((rc = read_keys(m, &k, err, errlen))) return rc;
    if ((rc = check_keys(m, &k, err, errlen))) return rc;
    /* the cache: one "KV head" of [c | k_pe] per token; values = its first C dims */
    hp->n_head_kv = 1;
    hp->head_dim = k.kv_lora + k.rope;
    hp->head_dim_v = k.kv_lora;
    hp->n_ff_shexp = hp->n_ff_exp * k.n_shared;
    const int H = hp->n_head_max;
    /* per token (mla.c): qa, q, the heads' outputs, then the heads' act_q8
     * rows of q_nope and o (bytes, in floats) */
    const int64_t a8 = (int64_t)H * (moe_act8_row_bytes(k.nope) + moe_act8_row_bytes(k.kv_lora));
    hp->blk_tok = k.q_lora + H * (k.nope + k.rope) + H * k.v_dim + (int)((a8 + 3) / 4);
    if ((rc = moe_check_hparams(m, err, errlen))) return rc;
    if ((rc = moe_read_rope(m, 0, "rope.freq_base", 10000.0f, "rope.dimension_count", k.rope, true, err, errlen))) return rc;
    m->ropes[0].adjacent = true;
    const float kq_scale = yarn_setup(m, &k);
    moe_note(m, "MLA cache: %d values (kv_lora_rank %d + rope %d) per token and layer: %d bytes F32, %d kv_f16",
             hp->head_dim, k.kv_lora, k.rope, 4 * hp->head_dim, 2 * hp->head_dim);
    if ((rc = moe_bind_io(m, err, errlen))) return rc;
    for (int il = 0; il < hp->n_layer; il++) {
        moe_layer *L = &m->layers[il];
        L->attn.rope = 0;
        L->attn.v_from_k = true;
        if ((rc = bind_mla(m, il, &k, &L->mla, err, errlen))) return rc;
        L->mla.kq_scale = kq_scale;
        L->dense = il < k.n_dense_lead;
        if (L->dense) {
            if ((rc = moe_bind_dense_ffn(m, il, &L->ffn, err, errlen))) return rc;
            continue;
        }
        if ((rc = moe_bind_moe(m, il, &L->moe, err, errlen))) return rc;
        moe_router_desc *r = &L->moe.router;
        r->probs = k.gating == 2 ? moe_router_sigmoid : moe_router_softmax;
        r->renorm = k.renorm;
        r->scale = k.scale != 0.0f ? k.scale : 1.0f;
        if (k.n_group > 1) r->n_group = k.n_group, r->n_group_used = k.n_group_used;
    }
    return MOE_OK;
}

const moe_arch moe_arch_deepseek2 = {"deepseek2", deepseek2_bind, deepseek2_layer};
