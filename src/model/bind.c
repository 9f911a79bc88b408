/* bind.c — the binding helpers of bind.h: keys with defaults, tensors with
 * checked shapes, the standard tensor names of the shared blocks. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "model/bind.h"
#include "base/util.h"

void moe_note(moe_model *m, const char *fmt, ...) {
    if (m->n_notes >= MOE_MAX_NOTES) return;
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    m->notes[m->n_notes] = strdup(buf);
    if (m->notes[m->n_notes]) m->n_notes++;
}

void moe_shape_str(const int64_t *ne, int n, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

/* Enters w in the model's list of matrices. */
static int list_weight(moe_model *m, moe_weight *w, moe_weight_use use, char *err, size_t errlen) {
    if (m->n_weights == m->cap_weights) {
        const int cap = m->cap_weights ? 2 * m->cap_weights : 64;
        moe_weight_ref *nw = realloc(m->weights, (size_t)cap * sizeof *nw);
        if (!nw) return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", m->path);
        m->weights = nw;
        m->cap_weights = cap;
    }
    m->weights[m->n_weights++] = (moe_weight_ref){w, use};
    return MOE_OK;
}

/* The tensor's second-level scale "<base>.scale" next to "<base>.weight". */
static int bind_scale(moe_model *m, moe_weight *w, const char *name, char *err, size_t errlen) {
    const size_t nl = strlen(name);
    if (nl <= 7 || strcmp(name + nl - 7, ".weight")) return MOE_OK;
    char sname[256];
    snprintf(sname, sizeof sname, "%.*s.scale", (int)(nl - 7), name);
    const gguf_tensor *st = gguf_find_tensor(m->gf, sname);
    if (!st) return MOE_OK;
    const int64_t ns = st->ne[0] * st->ne[1] * st->ne[2] * st->ne[3];
    if (st->type != MOE_T_F32 || !(ns == 1 || ns == w->n_mat))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: tensor '%s' must be F32 with 1 or %lld values (has %lld values of type %u)",
                        m->path, sname, (long long)w->n_mat, (long long)ns, st->type);
    w->scale = (const float *)st->data;
    w->n_scale = ns;
    return MOE_OK;
}

int moe_bind_weight(moe_model *m, moe_weight *w, const char *name, int64_t n_in, int64_t n_out, int64_t n_mat,
                    moe_weight_use use, bool required, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gguf_find_tensor(m->gf, name);
    if (!t) {
        if (!required) return 1;
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing tensor '%s' (%s)", m->path, name, m->arch_name);
    }
    int64_t want[3] = {n_in, n_out, n_mat};
    int want_dims = n_mat > 0 ? 3 : 2;
    bool ok = true;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) {
        int64_t e = i < want_dims ? want[i] : 1;
        if (t->ne[i] != e) ok = false;
    }
    if (!ok) {
        char a[96], b[96];
        moe_shape_str(t->ne, (int)(t->n_dims ? t->n_dims : 1), a, sizeof a);
        moe_shape_str(want, want_dims, b, sizeof b);
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: tensor '%s' has shape %s, expected %s", m->path, name, a, b);
    }
    const moe_type_info *ti = moe_type_get(t->type);
    if (!ti || !ti->supported) {
        char can[400];
        moe_type_list_supported(can, sizeof can);
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: tensor '%s' has type %s (id %u), which moefast cannot run (it runs: %s)",
                        m->path, name, ti && ti->name ? ti->name : "unknown", t->type, can);
    }
    if (n_in % ti->block)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: tensor '%s' row length %lld is not a multiple of the %s block size %u",
                        m->path, name, (long long)n_in, ti->name, ti->block);
    w->name = t->name;
    w->data = t->data;
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->n_mat = n_mat > 0 ? n_mat : 1;
    w->row_bytes = (size_t)moe_row_bytes(t->type, (uint64_t)n_in);
    w->mat_bytes = w->row_bytes * (size_t)n_out;
    int rc = bind_scale(m, w, name, err, errlen);
    return rc ? rc : list_weight(m, w, use, err, errlen);
}

int moe_bind_vector(moe_model *m, const float **out, const char *name, int64_t n, bool required, char *err,
                    size_t errlen) {
    *out = NULL;
    const gguf_tensor *t = gguf_find_tensor(m->gf, name);
    if (!t) {
        if (!required) return 1;
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing tensor '%s' (%s)", m->path, name, m->arch_name);
    }
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1) {
        char a[96];
        moe_shape_str(t->ne, (int)(t->n_dims ? t->n_dims : 1), a, sizeof a);
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: tensor '%s' has shape %s, expected [%lld]", m->path, name, a,
                        (long long)n);
    }
    if (t->type == MOE_T_F32) {
        *out = (const float *)t->data;
        return MOE_OK;
    }
    const moe_type_info *ti = moe_type_get(t->type);
    if (!ti || !ti->supported || n % ti->block)
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: vector tensor '%s' has unsupported type %s", m->path, name,
                        ti && ti->name ? ti->name : "unknown");
    if (m->owned_used + (size_t)n > m->owned_cap)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: too many non-F32 vector tensors ('%s')", m->path, name);
    float *dst = m->owned_vectors + m->owned_used;
    moe_dequant_row(t->type, t->data, dst, n);
    m->owned_used += (size_t)n;
    *out = dst;
    return MOE_OK;
}

int moe_get_u32_def(moe_model *m, const char *key, uint32_t def, uint32_t *out, bool required, char *err,
                    size_t errlen) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", m->arch_name, key);
    *out = def;
    int rc = gguf_get_u32(m->gf, full, out, err, errlen);
    if (rc < 0) return rc;
    if (rc == 1) {
        if (required) return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing required key '%s'", m->path, full);
        moe_note(m, "%s absent: default %u used", full, def);
    }
    return MOE_OK;
}

int moe_get_f32_def(moe_model *m, const char *key, float def, float *out, char *err, size_t errlen) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", m->arch_name, key);
    *out = def;
    int rc = gguf_get_f32(m->gf, full, out, err, errlen);
    if (rc < 0) return rc;
    if (rc == 1) moe_note(m, "%s absent: default %g used", full, (double)def);
    return MOE_OK;
}

int moe_get_bool_def(moe_model *m, const char *key, bool def, bool *out, char *err, size_t errlen) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", m->arch_name, key);
    *out = def;
    int rc = gguf_get_bool(m->gf, full, out, err, errlen);
    if (rc < 0) return rc;
    if (rc == 1) moe_note(m, "%s absent: default %s used", full, def ? "true" : "false");
    return MOE_OK;
}

int moe_read_common_hparams(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    struct { const char *key; uint32_t def; bool required; int *dst; } keys[] = {
        {"block_count", 0, true, &hp->n_layer},
        {"embedding_length", 0, true, &hp->n_embd},
        {"context_length", 4096, false, &hp->n_ctx_train},
        {"vocab_size", 0, false, &hp->n_vocab},
        {"feed_forward_length", 0, false, &hp->n_ff},
        {"expert_count", 0, true, &hp->n_expert},
        {"expert_used_count", 0, true, &hp->n_expert_used},
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        uint32_t u;
        int rc = moe_get_u32_def(m, keys[i].key, keys[i].def, &u, keys[i].required, err, errlen);
        if (rc) return rc;
        if (u > 0x7fffffffu)
            return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s.%s = %u is out of range", m->path, m->arch_name,
                            keys[i].key, u);
        *keys[i].dst = (int)u;
    }
    /* the routed experts' width: no default here (0 when absent), since
     * architectures differ (some take feed_forward_length); the check says
     * when it is still missing */
    char key[160];
    snprintf(key, sizeof key, "%s.expert_feed_forward_length", m->arch_name);
    uint32_t fx = 0;
    int rc = gguf_get_u32(m->gf, key, &fx, err, errlen);
    if (rc < 0) return rc;
    if (fx > 0x7fffffffu) return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s = %u is out of range", m->path, key, fx);
    hp->n_ff_exp = rc == 1 ? 0 : (int)fx;
    rc = moe_get_f32_def(m, "attention.layer_norm_rms_epsilon", 1e-6f, &hp->rms_eps, err, errlen);
    if (rc) return rc;
    if (hp->n_layer < 1 || hp->n_layer > 4096)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s.block_count %d out of range", m->path, m->arch_name, hp->n_layer);
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", m->path);
    return MOE_OK;
}

int moe_read_head_dims(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    uint32_t u;
    int rc = moe_get_u32_def(m, "attention.key_length", (uint32_t)(hp->n_embd / hp->n_head_max), &u, false, err, errlen);
    if (rc) return rc;
    hp->head_dim = (int)u;
    if ((rc = moe_get_u32_def(m, "attention.value_length", (uint32_t)hp->head_dim, &u, false, err, errlen))) return rc;
    hp->head_dim_v = (int)u;
    return MOE_OK;
}

int moe_read_uniform_heads(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    uint32_t u;
    int rc = moe_get_u32_def(m, "attention.head_count", 0, &u, true, err, errlen);
    if (rc) return rc;
    if (u < 1 || u > 4096)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s.attention.head_count must be 1..4096", m->path, m->arch_name);
    hp->n_head_max = (int)u;
    if ((rc = moe_get_u32_def(m, "attention.head_count_kv", u, &u, false, err, errlen))) return rc;
    hp->n_head_kv = (int)u;
    for (int il = 0; il < hp->n_layer; il++) m->layers[il].attn.n_head = hp->n_head_max;
    return moe_read_head_dims(m, err, errlen);
}

int moe_read_expert_groups(moe_model *m, int *n_group, int *n_group_used, char *err, size_t errlen) {
    const moe_hparams *hp = &m->hp;
    const int NE = hp->n_expert;
    uint32_t g, gu;
    int rc;
    *n_group = *n_group_used = 0;
    if ((rc = moe_get_u32_def(m, "expert_group_count", 0, &g, false, err, errlen)) ||
        (rc = moe_get_u32_def(m, "expert_group_used_count", 0, &gu, false, err, errlen)))
        return rc;
    if (g <= 1) return MOE_OK;
    const char *a = m->arch_name;
    if (NE < 1 || NE % (int)g)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s.expert_group_count %u does not divide expert_count %d", m->path, a, g, NE);
    if (gu < 1 || gu > g)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s.expert_group_used_count %u must be 1..expert_group_count %u", m->path, a,
                        gu, g);
    if (hp->n_expert_used > (int)gu * (NE / (int)g))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s: %u used groups of %d experts cannot supply expert_used_count %d", m->path,
                        a, gu, NE / (int)g, hp->n_expert_used);
    *n_group = (int)g;
    *n_group_used = (int)gu;
    return MOE_OK;
}

int moe_check_hparams(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
#define NEED(cond, what) do { if (!(cond)) return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s: %s", m->path, m->arch_name, what); } while (0)
    NEED(hp->n_layer >= 1 && hp->n_layer <= 4096, "block_count out of range 1..4096");
    NEED(hp->n_embd >= 1 && hp->n_embd <= (1 << 20), "embedding_length out of range");
    NEED(hp->n_head_kv >= 1 && hp->n_head_kv <= 4096, "attention.head_count_kv out of range");
    NEED(hp->head_dim >= 2 && hp->head_dim <= 4096 && hp->head_dim % 2 == 0, "attention.key_length must be even, 2..4096");
    NEED(hp->head_dim_v >= 1 && hp->head_dim_v <= 4096, "attention.value_length out of range");
    NEED(hp->rms_eps > 0 && hp->rms_eps < 1, "attention.layer_norm_rms_epsilon out of range");
    NEED(hp->n_expert >= 1 && hp->n_expert <= 4096, "expert_count out of range 1..4096");
    NEED(hp->n_expert_used >= 1 && hp->n_expert_used <= hp->n_expert, "expert_used_count must be 1..expert_count");
    NEED(hp->n_ff_exp >= 1, "expert_feed_forward_length missing or < 1");
    NEED(hp->n_ctx_train >= 1, "context_length must be >= 1");
#undef NEED
    hp->n_head_max = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const int h = m->layers[il].attn.n_head;
        if (h < 1 || h > 4096 || h % hp->n_head_kv)
            return moe_errf(err, errlen, MOE_EFORMAT, "%s: layer %d has %d query heads, not a positive multiple of %d KV heads",
                            m->path, il, h, hp->n_head_kv);
        if (h > hp->n_head_max) hp->n_head_max = h;
    }
    return MOE_OK;
}

/* The file's YaRN keys into r (rope.scaling.type is yarn). */
static int read_yarn_keys(moe_model *m, moe_rope *r, uint32_t *orig, char *err, size_t errlen) {
    r->yarn = true;
    r->yarn_ext_factor = 1.0f;
    int rc = moe_get_f32_def(m, "rope.scaling.factor", 1.0f, &r->yarn_factor, err, errlen);
    if (!rc) rc = moe_get_u32_def(m, "rope.scaling.original_context_length", (uint32_t)m->hp.n_ctx_train, orig, false, err, errlen);
    if (!rc) rc = moe_get_f32_def(m, "rope.scaling.yarn_beta_fast", 32.0f, &r->yarn_beta_fast, err, errlen);
    if (!rc) rc = moe_get_f32_def(m, "rope.scaling.yarn_beta_slow", 1.0f, &r->yarn_beta_slow, err, errlen);
    return rc;
}

/* r's original context from orig (the file's or the override's), after the
 * range checks both kinds of table need. */
static int set_yarn_orig(moe_model *m, moe_rope *r, uint32_t orig, char *err, size_t errlen) {
    if (!(r->yarn_factor >= 1.0f) || orig == 0)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: YaRN needs rope.scaling.factor >= 1 and original_context_length > 0", m->path);
    r->yarn_orig_ctx = (int)orig;
    return MOE_OK;
}

/* A sliding-window table (MOE_ROPE_SLIDING) as llama.cpp treats one under
 * its --rope-scaling options: the frequency scale stays the file's
 * (get_rope_freq_scale: the training value on SWA layers), while the YaRN
 * ramp (ext factor: 0 for "none") and the original context are the load's,
 * shared by every layer. Without YaRN in the file the scale is 1, where the
 * ramp moves nothing: the table stays plain. */
static int read_rope_sliding(moe_model *m, moe_rope *r, bool file_yarn, char *err, size_t errlen) {
    if (!file_yarn) return MOE_OK;
    uint32_t orig;
    int rc = read_yarn_keys(m, r, &orig, err, errlen);
    if (rc) return rc;
    if (m->rope_override.orig_ctx > 0) orig = (uint32_t)m->rope_override.orig_ctx;
    if (m->rope_override.mode == MOE_ROPE_NONE) r->yarn_ext_factor = 0.0f;   /* interpolation at the file's scale */
    return set_yarn_orig(m, r, orig, err, errlen);
}

/* rope.scaling.* of table i (the file's, then the load's override) */
static int read_rope_scaling(moe_model *m, int i, int scaling, char *err, size_t errlen) {
    moe_rope *r = &m->ropes[i];
    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    gguf_str st = {0};
    int rc = gguf_get_str(m->gf, key, &st, err, errlen);
    if (rc < 0) return rc;
    const bool file_none = rc == 1 || (st.len == 4 && !memcmp(st.ptr, "none", 4));
    const bool file_yarn = !file_none && st.len == 4 && !memcmp(st.ptr, "yarn", 4);
    const int mode = m->rope_override.mode;
    const float factor = m->rope_override.factor;
    const int orig_ctx = m->rope_override.orig_ctx;
    if (!file_none && !file_yarn && mode == MOE_ROPE_FILE)  /* an override replaces what the file says */
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: %s = '%.*s' is not supported (none, yarn)", m->path, key,
                        (int)(st.len > 32 ? 32 : st.len), st.ptr);
    m->rope_override.applied = true;
    if (scaling == MOE_ROPE_SLIDING) return read_rope_sliding(m, r, file_yarn, err, errlen);
    if (mode == MOE_ROPE_NONE) return MOE_OK;
    if (mode == MOE_ROPE_FILE && !file_yarn) {
        if (factor > 0 || orig_ctx > 0)
            return moe_errf(err, errlen, MOE_EINVAL, "%s: rope_scale / yarn_orig_ctx given, but the file has no YaRN "
                            "(%s): ask for rope_scaling yarn", m->path, key);
        return MOE_OK;
    }
    uint32_t orig;
    if ((rc = read_yarn_keys(m, r, &orig, err, errlen))) return rc;
    if (!file_yarn && !(factor > 0))   /* a factor the file never gave is not guessed */
        return moe_errf(err, errlen, MOE_EINVAL, "%s: rope_scaling yarn on a file without YaRN (%s) needs rope_scale, "
                        "the factor", m->path, key);
    if (factor > 0) r->yarn_factor = factor;
    if (orig_ctx > 0) orig = (uint32_t)orig_ctx;
    if ((rc = set_yarn_orig(m, r, orig, err, errlen))) return rc;
    if (mode != MOE_ROPE_FILE || factor > 0 || orig_ctx > 0)
        moe_note(m, "rope scaling set at load: RoPE table %d: YaRN factor %g over %d positions (the file: %s)", i,
                 (double)r->yarn_factor, r->yarn_orig_ctx, file_yarn ? "YaRN" : "none");
    return MOE_OK;
}

int moe_read_rope(moe_model *m, int i, const char *base_key, float base_def, const char *dims_key, int dims_def,
                  int scaling, char *err, size_t errlen) {
    moe_rope *r = &m->ropes[i];
    memset(r, 0, sizeof *r);
    if (i >= m->n_ropes) m->n_ropes = i + 1;
    uint32_t nrot;
    int rc = moe_get_f32_def(m, base_key, base_def, &r->base, err, errlen);
    if (!rc) rc = moe_get_u32_def(m, dims_key, (uint32_t)dims_def, &nrot, false, err, errlen);
    if (rc) return rc;
    if (nrot == 0 || nrot > (uint32_t)m->hp.head_dim || nrot % 2)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s.%s = %u must be even and in 2..%d", m->path, m->arch_name,
                        dims_key, nrot, m->hp.head_dim);
    if (!(r->base > 0)) return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s.%s must be > 0", m->path, m->arch_name, base_key);
    r->n_rot = (int)nrot;
    r->attn_factor = 1.0f;
    return scaling == MOE_ROPE_FIXED ? MOE_OK : read_rope_scaling(m, i, scaling, err, errlen);
}

#define T(suffix) (snprintf(n, sizeof n, "blk.%d.%s", il, suffix), n)

int moe_bind_attention(moe_model *m, int il, moe_attn_desc *d, char *err, size_t errlen) {
    const moe_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, H = d->n_head, D = hp->head_dim, Dv = hp->head_dim_v, Hkv = hp->n_head_kv;
    char n[128];
    int rc;
    if ((rc = moe_bind_vector(m, &d->norm, T("attn_norm.weight"), E, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->wq, T("attn_q.weight"), E, H * D, 0, MOE_USE_ALL, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->wk, T("attn_k.weight"), E, Hkv * D, 0, MOE_USE_ALL, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->wv, T("attn_v.weight"), E, Hkv * Dv, 0, MOE_USE_ALL, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->wo, T("attn_output.weight"), H * Dv, E, 0, MOE_USE_ALL, true, err, errlen))) return rc;
    /* per head [head_dim], or (qk_norm_full, set by the architecture) the whole projection */
    const int64_t qn = d->qk_norm_full ? H * D : D, kn = d->qk_norm_full ? Hkv * D : D;
    if ((rc = moe_bind_vector(m, &d->q_norm, T("attn_q_norm.weight"), qn, false, err, errlen)) < 0) return rc;
    if ((rc = moe_bind_vector(m, &d->k_norm, T("attn_k_norm.weight"), kn, false, err, errlen)) < 0) return rc;
    /* optional biases of the projections */
    if ((rc = moe_bind_vector(m, &d->bq, T("attn_q.bias"), H * D, false, err, errlen)) < 0) return rc;
    if ((rc = moe_bind_vector(m, &d->bk, T("attn_k.bias"), Hkv * D, false, err, errlen)) < 0) return rc;
    if ((rc = moe_bind_vector(m, &d->bv, T("attn_v.bias"), Hkv * Dv, false, err, errlen)) < 0) return rc;
    if ((rc = moe_bind_vector(m, &d->bo, T("attn_output.bias"), E, false, err, errlen)) < 0) return rc;
    /* optional attention sinks: one logit per query head */
    if ((rc = moe_bind_vector(m, &d->sinks, T("attn_sinks.weight"), H, false, err, errlen)) < 0) return rc;
    return MOE_OK;
}

int moe_bind_dense_ffn(moe_model *m, int il, moe_ffn_desc *d, char *err, size_t errlen) {
    const moe_hparams *hp = &m->hp;
    char n[128];
    int rc;
    /* the input norm is ffn_norm unless the architecture bound another (glm4moe: post_attention_norm) */
    if (!d->norm && (rc = moe_bind_vector(m, &d->norm, T("ffn_norm.weight"), hp->n_embd, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->gate, T("ffn_gate.weight"), hp->n_embd, hp->n_ff, 0, MOE_USE_ALL, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->up, T("ffn_up.weight"), hp->n_embd, hp->n_ff, 0, MOE_USE_ALL, true, err, errlen))) return rc;
    return moe_bind_weight(m, &d->down, T("ffn_down.weight"), hp->n_ff, hp->n_embd, 0, MOE_USE_ALL, true, err, errlen);
}

/* An optional F32 stack of per-expert vectors [n, count] (count rows of n). */
static int bind_vectors(moe_model *m, const float **out, const char *name, int64_t n, int64_t count, char *err,
                        size_t errlen) {
    *out = NULL;
    const gguf_tensor *t = gguf_find_tensor(m->gf, name);
    if (!t) return 1;
    if (t->ne[0] != n || t->ne[1] != count || t->ne[2] != 1 || t->ne[3] != 1 || t->type != MOE_T_F32) {
        char a[96];
        moe_shape_str(t->ne, (int)(t->n_dims ? t->n_dims : 1), a, sizeof a);
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: tensor '%s' has shape %s (type %u), expected F32 [%lld, %lld]", m->path,
                        name, a, t->type, (long long)n, (long long)count);
    }
    *out = (const float *)t->data;
    return MOE_OK;
}

int moe_bind_moe(moe_model *m, int il, moe_moe_desc *d, char *err, size_t errlen) {
    const moe_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, NE = hp->n_expert, F = hp->n_ff_exp, Fs = hp->n_ff_shexp;
    char n[128];
    int rc;
    /* as for the dense FFN: ffn_norm unless the architecture bound the
     * input norm under another name first */
    if (!d->norm && (rc = moe_bind_vector(m, &d->norm, T("ffn_norm.weight"), E, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->router.w, T("ffn_gate_inp.weight"), E, NE, 0, MOE_USE_ALL, true, err, errlen))) return rc;
    if ((rc = moe_bind_vector(m, &d->router.select_bias, T("exp_probs_b.bias"), NE, false, err, errlen)) < 0) return rc;
    if ((rc = moe_bind_vector(m, &d->router.bias, T("ffn_gate_inp.bias"), NE, false, err, errlen)) < 0) return rc;
    if ((rc = moe_bind_weight(m, &d->gate_exps, T("ffn_gate_exps.weight"), E, F, NE, MOE_USE_TOPK, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->up_exps, T("ffn_up_exps.weight"), E, F, NE, MOE_USE_TOPK, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->down_exps, T("ffn_down_exps.weight"), F, E, NE, MOE_USE_TOPK, true, err, errlen))) return rc;
    /* optional per-expert biases */
    if ((rc = bind_vectors(m, &d->b_gate_exps, T("ffn_gate_exps.bias"), F, NE, err, errlen)) < 0) return rc;
    if ((rc = bind_vectors(m, &d->b_up_exps, T("ffn_up_exps.bias"), F, NE, err, errlen)) < 0) return rc;
    if ((rc = bind_vectors(m, &d->b_down_exps, T("ffn_down_exps.bias"), E, NE, err, errlen)) < 0) return rc;
    d->router.scale = 1.0f;
    if (Fs <= 0) return MOE_OK;
    d->has_shared = true;
    if ((rc = moe_bind_weight(m, &d->gate_sh, T("ffn_gate_shexp.weight"), E, Fs, 0, MOE_USE_ALL, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->up_sh, T("ffn_up_shexp.weight"), E, Fs, 0, MOE_USE_ALL, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &d->down_sh, T("ffn_down_shexp.weight"), Fs, E, 0, MOE_USE_ALL, true, err, errlen))) return rc;
    /* optional sigmoid gate of the shared expert: one row of n_embd */
    rc = moe_bind_weight(m, &d->shared_gate, T("ffn_gate_inp_shexp.weight"), E, 1, 0, MOE_USE_ALL, false, err, errlen);
    return rc < 0 ? rc : MOE_OK;
}

#undef T

int moe_bind_io(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    const gguf_tensor *te = gguf_find_tensor(m->gf, "token_embd.weight");
    if (!te) return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing tensor 'token_embd.weight'", m->path);
    if (hp->n_vocab <= 0) hp->n_vocab = (int)te->ne[1];
    /* the embedding is read row by row, not multiplied: not in the weight list */
    int rc = moe_bind_weight(m, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, 0, MOE_USE_ALL, true, err,
                             errlen);
    if (rc) return rc;
    m->n_weights--;
    if ((rc = moe_bind_vector(m, &m->output_norm, "output_norm.weight", hp->n_embd, true, err, errlen))) return rc;
    rc = moe_bind_weight(m, &m->output, "output.weight", hp->n_embd, hp->n_vocab, 0, MOE_USE_ALL, false, err, errlen);
    if (rc < 0) return rc;
    if (rc == 1) {
        m->output = m->tok_embd;
        moe_note(m, "output.weight absent: lm head tied to token_embd.weight");
        return list_weight(m, &m->output, MOE_USE_ALL, err, errlen);
    }
    return MOE_OK;
}
