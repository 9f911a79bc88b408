/* context.c — contexts: the worker pool, the KV caches of n_seq sequences,
 * the RoPE tables and every scratch buffer, allocated once in
 * moe_context_new so that a step allocates nothing; the sequence operations;
 * moe_context_decode, which checks a batch and runs it in steps of n_batch
 * tokens. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention/attn.h"
#include "attention/kv_tq.h"
#include "base/flags.h"
#include "model/blocks.h"
#include "base/util.h"
#include "base/meminfo.h"
#include "model/screen.h"

/* ggml's YaRN helpers, reproduced so positions rotate exactly as the
 * ecosystem's reference does (iterative theta in float). */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

static float yarn_ramp(float low, float high, int i0) {
    float y = (float)(i0 / 2 - low) / fmaxf(0.001f, high - low);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

/* table[p][i] = (cos, sin) for position p, rotation pair i < n_rot/2. */
static void rope_table(const moe_rope *r, int n_ctx, float *tab) {
    const int nd = r->n_rot;
    const float theta_scale = powf(r->base, -2.0f / (float)nd);
    const float freq_scale = r->yarn ? 1.0f / r->yarn_factor : 1.0f;
    const float ext = r->yarn ? r->yarn_ext_factor : 0.0f;
    float corr[2] = {0, 0};
    if (r->yarn) {
        float start = floorf(yarn_corr_dim(nd, r->yarn_orig_ctx, r->yarn_beta_fast, r->base));
        float end = ceilf(yarn_corr_dim(nd, r->yarn_orig_ctx, r->yarn_beta_slow, r->base));
        corr[0] = fmaxf(0.0f, start);
        corr[1] = fminf((float)(nd - 1), end);
    }
    for (int p = 0; p < n_ctx; p++) {
        float theta_extrap = (float)p;
        float *row = tab + (size_t)p * (size_t)nd;
        for (int i0 = 0; i0 < nd; i0 += 2) {
            float theta_interp = freq_scale * theta_extrap;
            float theta = theta_interp, mscale = r->attn_factor;
            if (ext != 0.0f) {
                float mix = yarn_ramp(corr[0], corr[1], i0) * ext;
                theta = theta_interp * (1 - mix) + theta_extrap * mix;
                mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
            }
            row[i0] = cosf(theta) * mscale;
            row[i0 + 1] = sinf(theta) * mscale;
            theta_extrap *= theta_scale;
        }
    }
}

/* A session's buffers: on a cache line, or 16 bytes past one with flag
 * aligned_buffers off (util.h says why it matters); the first failure sticks. */
typedef struct {
    bool ok;
    size_t offset;
    uint64_t bytes, budget; /* asked so far (also after a failure); what fits (meminfo.h) */
} buf_alloc;

static void *xcalloc(size_t n, size_t sz, buf_alloc *a) {
    if (n == 0) n = 1;
    uint64_t b;                      /* refuse what would not fit instead of growing until killed */
    a->bytes = moe_mul_ok(n, sz, &b) && moe_add_ok(a->bytes, b, &b) ? b : UINT64_MAX;
    if (a->bytes > a->budget) a->ok = false;
    if (!a->ok) return NULL;
    void *p = moe_calloc_aligned(n, sz, a->offset);
    if (!p) a->ok = false;
    return p;
}

static size_t max3(size_t a, size_t b, size_t c) { size_t m = a > b ? a : b; return m > c ? m : c; }

static void context_free(moe_context *c);

/* flags: the context's flag set; shadow: this is the differential twin
 * (numerics flags only, one thread, logits buffer for a whole step). */
static int context_create(moe_model *m, const moe_context_params *p, uint64_t flags, bool shadow, moe_pool *borrow,
                          moe_context **out, char *err, size_t errlen) {
    if (!out) return moe_errf(err, errlen, MOE_EINVAL, "moe_context_new: out is NULL");
    *out = NULL;
    if (!m) return moe_errf(err, errlen, MOE_EINVAL, "moe_context_new: model is NULL");
    if (m->vocab_only) return moe_errf(err, errlen, MOE_EINVAL, "%s: loaded vocabulary-only; cannot run", m->path);
    const moe_hparams *hp = &m->hp;
    if (p && (p->n_ctx < 0 || p->n_threads < 0 || p->n_batch < 0 || p->n_seq < 0))
        return moe_errf(err, errlen, MOE_EINVAL, "context: n_ctx, n_threads, n_batch and n_seq must be >= 0");
    int n_ctx = p && p->n_ctx > 0 ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    int n_threads = p && p->n_threads > 0 ? p->n_threads : moe_cpu_count();
    int n_batch = p && p->n_batch > 0 ? p->n_batch : 512;
    const int n_seq = p && p->n_seq > 0 ? p->n_seq : 1;
    if (n_ctx > (1 << 22)) return moe_errf(err, errlen, MOE_EINVAL, "context: n_ctx %d too large", n_ctx);
    if (n_threads > 1024) return moe_errf(err, errlen, MOE_EINVAL, "context: %d threads is too many (max 1024)", n_threads);
    if (n_batch > 65536) return moe_errf(err, errlen, MOE_EINVAL, "context: n_batch %d too large (max 65536)", n_batch);
    if (n_seq > 4096) return moe_errf(err, errlen, MOE_EINVAL, "context: n_seq %d too large (max 4096)", n_seq);
    if (n_batch > n_ctx * n_seq) n_batch = n_ctx * n_seq;
    if (!moe_flag_on(flags, MOE_FLAG_THREADS)) n_threads = 1;

    if (moe_flag_on(flags, MOE_FLAG_KV_Q8)) {
        if (moe_flag_on(flags, MOE_FLAG_KV_F16))
            return moe_errf(err, errlen, MOE_EINVAL, "%s: flags kv_f16 and kv_q8 both choose the KV cache format; use one",
                            m->path);
        if (hp->head_dim % 32 || hp->head_dim_v % 32)
            return moe_errf(err, errlen, MOE_EINVAL,
                            "%s: flag kv_q8 needs head sizes that are multiples of 32 (head_dim %d, head_dim_v %d)", m->path,
                            hp->head_dim, hp->head_dim_v);
    }
    /* kv_tq / kv_tq_small: one KV cache format among kv_f16, kv_q8, kv_tq,
     * kv_tq_small; the rotation needs power-of-two head sizes (kv_tq.h) */
    const bool tq = moe_flag_on(flags, MOE_FLAG_KV_TQ), tq_small = moe_flag_on(flags, MOE_FLAG_KV_TQ_SMALL);
    if (tq || tq_small) {
        const char *fl = tq ? "kv_tq" : "kv_tq_small";
        const int n_fmt = moe_flag_on(flags, MOE_FLAG_KV_F16) + moe_flag_on(flags, MOE_FLAG_KV_Q8) + tq + tq_small;
        if (n_fmt > 1)
            return moe_errf(err, errlen, MOE_EINVAL,
                            "%s: flags kv_f16, kv_q8, kv_tq and kv_tq_small each choose the KV cache format; use one", m->path);
        if (!moe_tq_dim_ok(hp->head_dim) || !moe_tq_dim_ok(hp->head_dim_v))
            return moe_errf(err, errlen, MOE_EINVAL,
                            "%s: flag %s needs power-of-two head sizes from %d to %d (head_dim %d, head_dim_v %d)", m->path,
                            fl, MOE_TQ_MIN_D, MOE_TQ_MAX_D, hp->head_dim, hp->head_dim_v);
        for (int il = 0; il < hp->n_layer; il++)
            if (m->layers[il].attn.v_from_k)
                return moe_errf(err, errlen, MOE_EINVAL, "%s: flag %s has no layout for the latent (MLA) cache; use kv_f16",
                                m->path, fl);
    }
    /* kv_tq_k / kv_tq_v: one half of kv_tq(_small) exact, to measure the other's share */
    const bool tq_k = moe_flag_on(flags, MOE_FLAG_KV_TQ_K), tq_v = moe_flag_on(flags, MOE_FLAG_KV_TQ_V);
    if ((tq_k || tq_v) && !(tq || tq_small))
        return moe_errf(err, errlen, MOE_EINVAL, "%s: flag %s only modifies kv_tq or kv_tq_small; add one", m->path,
                        tq_k ? "kv_tq_k" : "kv_tq_v");
    if (tq_k && tq_v)
        return moe_errf(err, errlen, MOE_EINVAL, "%s: flags kv_tq_k and kv_tq_v each keep one half exact; use one",
                        m->path);
    /* V rows: none when every layer reads its values from its keys (MLA's
     * latent cache: kv_lora + rope values per token and layer, F32 4 bytes
     * each, kv_f16 2), else for every layer */
    bool v_rows = false;
    for (int il = 0; il < hp->n_layer; il++) v_rows |= !m->layers[il].attn.v_from_k;
    if (!v_rows && moe_flag_on(flags, MOE_FLAG_KV_Q8))
        return moe_errf(err, errlen, MOE_EINVAL, "%s: flag kv_q8 has no layout for the latent (MLA) cache; use kv_f16",
                        m->path);
    moe_context *s = calloc(1, sizeof *s);
    if (!s) return moe_errf(err, errlen, MOE_ENOMEM, "out of memory");
    s->m = m;
    s->flags = flags;
    s->n_ctx = n_ctx;
    s->n_threads = n_threads;
    s->n_batch = n_batch;
    s->n_seq = n_seq;
    s->kern_simd = moe_kernels_active();
    const moe_isa_table *lvl = moe_isa_table_for(moe_flag_on(s->flags, MOE_FLAG_SIMD) ? s->kern_simd->isa : MOE_ISA_SCALAR);
    s->kern = lvl->quant, s->attn = lvl->attn; /* both from one level's descriptor */
    if (n_threads > 1 && borrow) {
        s->pool = borrow;
        s->pool_borrowed = true;
    } else if (n_threads > 1) {
        s->pool = moe_pool_new(n_threads, err, errlen);
        if (!s->pool) { free(s); return MOE_ENOMEM; }
    }
    const size_t B = (size_t)n_batch, E = (size_t)hp->n_embd, Hm = (size_t)hp->n_head_max;
    const size_t D = (size_t)hp->head_dim, Dv = (size_t)hp->head_dim_v, Hkv = (size_t)hp->n_head_kv;
    const size_t K = (size_t)hp->n_expert_used, NE = (size_t)hp->n_expert, L = (size_t)hp->n_layer * (size_t)n_seq;
    const size_t C = (size_t)n_ctx;
    const uint64_t avail = moe_mem_available();
    buf_alloc al = {true, moe_flag_on(flags, MOE_FLAG_ALIGNED_BUFFERS) ? 0 : 16, 0, avail / 10 * 9};
    s->seq_len = xcalloc((size_t)n_seq, sizeof(int), &al);
    s->tok_pos = xcalloc(B, sizeof(int32_t), &al);
    s->tok_seq = xcalloc(B, sizeof(int32_t), &al);
    s->out_rows = xcalloc(B, sizeof(int32_t), &al);
    s->kv_half = moe_flag_on(flags, MOE_FLAG_KV_F16);
    s->kv_q8 = moe_flag_on(flags, MOE_FLAG_KV_Q8);
    s->ctx_pad = (n_ctx + 15) / 16 * 16;
    s->sc_stride = (size_t)s->ctx_pad + 16;
    s->kv_tq = tq || tq_small;
    s->tq_kbits = !s->kv_tq || tq_v ? 0 : tq ? 5 : 4;
    s->tq_vbits = !s->kv_tq || tq_k ? 0 : tq ? 4 : 3;
    s->tq_krow = s->tq_kbits ? moe_tq_row_bytes((int)D, s->tq_kbits) : D * sizeof(float);
    s->tq_vrow = s->tq_vbits ? moe_tq_row_bytes((int)Dv, s->tq_vbits) : Dv * sizeof(float);
    if (s->kv_tq) {                                   /* rows of packed codes and a half scale (kv_tq.h) */
        const size_t Dm = D > Dv ? D : Dv;
        s->k_cache = xcalloc(L * Hkv * C, s->tq_krow, &al);
        s->v_cache = xcalloc(L * Hkv * C, s->tq_vrow, &al);
        s->tq_stride = (Hm + 1) * Dm;
        s->tq_buf = xcalloc((size_t)n_threads * s->tq_stride, sizeof(float), &al);
    } else if (s->kv_q8) {                            /* layouts: attn.h; L counts layers of every sequence */
        const size_t Cp = (size_t)s->ctx_pad, Dm = D > Dv ? D : Dv;
        s->a8_row = (size_t)moe_act8_row_bytes((int64_t)Dm);
        s->k_cache = xcalloc(L * Hkv * Cp, D, &al);
        s->v_cache = xcalloc(L * Hkv * Cp, Dv, &al);
        s->k_scale = xcalloc(L * Hkv * (D / 32) * Cp, sizeof(uint16_t), &al);
        s->v_scale = xcalloc(L * Hkv * (Dv / 32) * Cp, sizeof(uint16_t), &al);
        s->q_a8 = xcalloc((size_t)n_threads * Hm, s->a8_row, &al);
        s->kv_a8 = xcalloc((size_t)n_threads, s->a8_row, &al);
        s->attn_w = xcalloc((size_t)n_threads * Hm * (Dv / 32) * C, sizeof(float), &al);
    } else {
        const size_t kv_elem = s->kv_half ? sizeof(uint16_t) : sizeof(float);
        s->k_cache = xcalloc(L * C * Hkv * D, kv_elem, &al);
        s->v_cache = v_rows ? xcalloc(L * C * Hkv * Dv, kv_elem, &al) : NULL;   /* NULL: no V rows */
    }
    if (hp->blk_tok > 0) s->blk_tok = xcalloc(B * (size_t)hp->blk_tok, sizeof(float), &al);
    if (hp->blk_thr > 0) s->blk_thr = xcalloc((size_t)n_threads, ((size_t)hp->blk_thr + 63) / 64 * 64, &al);
    for (int i = 0; i < m->n_ropes; i++) s->rope_tab[i] = xcalloc(C * (size_t)m->ropes[i].n_rot, sizeof(float), &al);
    s->x = xcalloc(B * E, sizeof(float), &al);
    s->xn = xcalloc(B * E, sizeof(float), &al);
    s->proj = xcalloc(B * E, sizeof(float), &al);
    s->ffn_out = xcalloc(B * E, sizeof(float), &al);
    s->q = xcalloc(B * Hm * D, sizeof(float), &al);
    s->k = xcalloc(B * Hkv * D, sizeof(float), &al);
    s->v = xcalloc(B * Hkv * Dv, sizeof(float), &al);
    s->att = xcalloc(B * Hm * Dv, sizeof(float), &al);
    s->gate = xcalloc(B * Hm * Dv, sizeof(float), &al);
    s->router = xcalloc(B * NE, sizeof(float), &al);
    s->selw = xcalloc(B * K, sizeof(float), &al);
    s->sel = xcalloc(B * K, sizeof(int32_t), &al);
    s->ex_slot = xcalloc(B * K, sizeof(int32_t), &al);
    s->gather_src = xcalloc(B * K, sizeof(int32_t), &al);
    s->expert_rows = xcalloc(NE, sizeof(int32_t), &al);
    s->jobs = xcalloc(NE + 1, sizeof *s->jobs, &al);
    s->job_pre = xcalloc(2 * (NE + 2), sizeof *s->job_pre, &al);
    s->xg = xcalloc(B * K * E, sizeof(float), &al);
    s->eout = xcalloc(B * K * E, sizeof(float), &al);
    size_t hid = max3(B * K * (size_t)hp->n_ff_exp + B * (size_t)hp->n_ff_shexp, B * (size_t)hp->n_ff, 1);
    s->hg = xcalloc(hid, sizeof(float), &al);
    s->hu = xcalloc(hid, sizeof(float), &al);
    s->scores = xcalloc((size_t)n_threads * Hm * s->sc_stride, sizeof(float), &al);
    s->attn_sum = xcalloc((size_t)n_threads * 2 * Hm, sizeof(float), &al);   /* sums, then the sinks' terms */
    if (shadow) s->logits_tmp = xcalloc(B * (size_t)hp->n_vocab, sizeof(float), &al); /* the twin's logits */
    const size_t Vs = (size_t)hp->n_vocab;                /* top-k outputs: the screen's scratch */
    s->scr_s1 = xcalloc(Vs, sizeof(float), &al);
    /* a batch's top-k rows that fall back run the full head G rows at a
     * time (one pass over the head for G rows, as moe_context_decode's head) */
    s->scr_group = n_batch < n_seq ? n_batch : n_seq;
    if (s->scr_group > 16) s->scr_group = 16;
    s->scr_y = xcalloc(Vs * (size_t)s->scr_group, sizeof(float), &al);
    s->scr_rows = xcalloc(B, sizeof(int32_t), &al);
    if (shadow) s->twin_ids = xcalloc(B * 64, sizeof(int32_t), &al);
    if (shadow) s->twin_vals = xcalloc(B * 64, sizeof(float), &al);
    s->scr_ids = xcalloc(Vs, sizeof(int32_t), &al);
    s->scr_done = xcalloc(Vs, 1, &al);
    s->scr_xq = xcalloc(E, 1, &al);
    s->scr_q120 = xcalloc(E / 4 + 1, sizeof(int32_t), &al);
    s->scr_tv = xcalloc(E / 4 + 1, sizeof(float), &al);
    if (m->link) {                                    /* shard 0 of several: a request head per other shard */
        s->shard_head_bytes = sizeof(moe_shard_head) + NE * sizeof(moe_shard_group);
        s->shard_heads = xcalloc((size_t)m->n_shards, s->shard_head_bytes, &al);
    }
    if (moe_flag_on(flags, MOE_FLAG_ACT_Q8)) {
        const size_t in_max = E > Hm * Dv ? E : Hm * Dv;
        const size_t aE = (size_t)moe_act8_row_bytes((int64_t)E);
        const size_t aX = (size_t)moe_act8_row_bytes((int64_t)in_max);
        const size_t aFx = (size_t)moe_act8_row_bytes(hp->n_ff_exp), aFs = (size_t)moe_act8_row_bytes(hp->n_ff_shexp);
        const size_t aF = (size_t)moe_act8_row_bytes(hp->n_ff);
        s->xa = xcalloc(B, aX, &al);
        s->xga = xcalloc(B * K, aE, &al);
        s->ha = xcalloc(max3(B * K * aFx + B * aFs, B * aF, 1), 1, &al);
    }
    if (!al.ok) {
        context_free(s);
        if (al.bytes > al.budget)
            return moe_errf(err, errlen, MOE_ENOMEM, "context: n_ctx %d needs %llu bytes of KV cache and scratch, %llu "
                            "available; try a smaller --ctx%s", n_ctx, (unsigned long long)al.bytes,
                            (unsigned long long)avail, n_seq > 1 ? " or fewer sequences" : "");
        return moe_errf(err, errlen, MOE_ENOMEM, "context: out of memory for n_ctx %d, n_seq %d, n_batch %d", n_ctx, n_seq,
                        n_batch);
    }
    for (int i = 0; i < m->n_ropes; i++) rope_table(&m->ropes[i], n_ctx, s->rope_tab[i]);
    *out = s;
    return MOE_OK;
}

/* A context with flags (and its differential twin when the model asks for
 * one); borrow: the pool to use instead of a new one, or NULL. */
int moe_context_create(moe_model *m, const moe_context_params *p, uint64_t flags, moe_pool *borrow, moe_context **out,
                       char *err, size_t errlen) {
    int rc = context_create(m, p, flags, false, borrow, out, err, errlen);
    if (rc || !m->diff) return rc;
    moe_context_params sp = {(*out)->n_ctx, 1, (*out)->n_batch, (*out)->n_seq};
    rc = context_create(m, &sp, moe_flags_numerics(flags), true, NULL, &(*out)->shadow, err, errlen);
    if (rc) { context_free(*out); *out = NULL; }
    return rc;
}

/* A model loaded as shard s > 0 holds only its experts: it answers requests
 * (moe_shard_worker), it runs no steps. */
static int shard_refuses(const moe_model *m, char *err, size_t errlen) {
    if (!m || m->shard == 0) return MOE_OK;
    return moe_errf(err, errlen, MOE_EINVAL, "%s: loaded as expert shard %d of %d: it computes expert requests "
                    "(moe_shard_worker), not steps", m->path, m->shard, m->n_shards);
}

int moe_context_new(moe_model *m, const moe_context_params *p, moe_context **out, char *err, size_t errlen) {
    if (out) *out = NULL;
    if (shard_refuses(m, err, errlen)) return MOE_EINVAL;
    return moe_context_create(m, p, m ? m->flags : 0, NULL, out, err, errlen);
}

/* spec applied on top of c's flags, into *next. A flag it changes that is
 * fixed (at load, by the pool, or at creation unless per_context_ok and the
 * flag is per_session) is MOE_EINVAL naming the flag and why, then what to
 * do (tail). */
static int flags_next(const moe_context *c, const char *spec, bool per_context_ok, const char *tail, uint64_t *next,
                      char *err, size_t errlen) {
    int rc = moe_flags_parse(spec, c->flags, next, err, errlen);
    if (rc) return rc;
    const uint64_t changed = *next ^ c->flags;
    for (int i = 0; i < MOE_FLAG_COUNT; i++) {
        const moe_flag_info *f = moe_flag_get(i);
        if ((changed >> i) & 1u && f->fixed && !(per_context_ok && f->per_session))
            return moe_errf(err, errlen, MOE_EINVAL, "flags: '%s' %s; %s", f->name, f->fixed, tail);
    }
    return MOE_OK;
}

int moe_context_sibling_(moe_context *c, const char *spec, moe_context **out, char *err, size_t errlen) {
    uint64_t next;
    int rc = flags_next(c, spec, true, "a sibling session shares the model and the pool", &next, err, errlen);
    if (rc) return rc;
    moe_context_params p = {c->n_ctx, c->n_threads, c->n_batch, c->n_seq};
    return moe_context_create(c->m, &p, next, c->pool, out, err, errlen);
}

static void context_free(moe_context *c) {
    if (!c) return;
    if (!c->pool_borrowed) moe_pool_free(c->pool);
    /* every buffer context_create allocated (xcalloc) */
    void *bufs[] = {c->k_cache, c->v_cache, c->k_scale, c->v_scale, c->q_a8, c->kv_a8, c->attn_w, c->tq_buf, c->rope_tab[0],
                    c->rope_tab[1], c->x, c->xn, c->proj, c->ffn_out, c->q, c->k, c->v, c->att, c->gate, c->router,
                    c->selw, c->xg, c->eout, c->hg, c->hu, c->scores, c->attn_sum, c->logits_tmp, c->sel, c->ex_slot,
                    c->gather_src, c->expert_rows, c->jobs, c->job_pre, c->xa, c->xga, c->ha, c->seq_len, c->tok_pos,
                    c->tok_seq, c->out_rows, c->blk_tok, c->blk_thr, c->scr_s1, c->scr_y, c->scr_ids,
                    c->scr_done, c->scr_xq, c->scr_q120, c->scr_tv, c->scr_rows, c->twin_ids, c->twin_vals,
                    c->shard_heads};
    _Static_assert(MOE_MAX_ROPES == 2, "context_free lists every rope table");
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) moe_free_aligned(bufs[i]);
    context_free(c->shadow);
    free(c);
}

void moe_context_free(moe_context *c) { context_free(c); }

int moe_context_n_seq(const moe_context *c) { return c ? c->n_seq : 0; }
int moe_context_n_ctx(const moe_context *c) { return c ? c->n_ctx : 0; }
int moe_context_threads(const moe_context *c) { return c ? c->n_threads : 0; }
const char *moe_context_error(const moe_context *c) { return c ? c->err : "no context"; }

int moe_context_seq_len(const moe_context *c, int seq) {
    return c && seq >= 0 && seq < c->n_seq ? c->seq_len[seq] : -1;
}

/* Only flags that the blocks read on every step may change here (the
 * registry's `fixed` is NULL for them); everything else shaped the weights,
 * the pool or the buffers. The kernel tables are the one thing derived from a
 * step-time flag at creation, so simd re-picks them. Every step-time flag
 * keeps the logits bit-identical (docs/EXACTNESS.md), which is what lets a
 * caller alternate configurations inside one token stream. The differential
 * twin is left alone: it holds only the numerics flags, which cannot change,
 * so it keeps checking whatever the main context now runs. */
int moe_context_set_flags_(moe_context *c, const char *spec, char *err, size_t errlen) {
    uint64_t next;
    int rc = flags_next(c, spec, false, "set it when loading the model (--flags), not on a live session", &next, err,
                        errlen);
    if (rc) return rc;
    c->flags = next;
    const moe_isa_table *lvl = moe_isa_table_for(moe_flag_on(next, MOE_FLAG_SIMD) ? c->kern_simd->isa : MOE_ISA_SCALAR);
    c->kern = lvl->quant, c->attn = lvl->attn; /* both from one level's descriptor */
    return MOE_OK;
}

/* ---- sequences ------------------------------------------------------------------ */

static int bad_seq(moe_context *c, const char *what, int seq) {
    return moe_errf(c->err, sizeof c->err, MOE_EINVAL, "%s: sequence %d is outside 0..%d", what, seq, c->n_seq - 1);
}

static void set_len(moe_context *c, int seq, int n) {
    c->seq_len[seq] = n;
    if (c->shadow) c->shadow->seq_len[seq] = n;
}

int moe_context_seq_truncate(moe_context *c, int seq, int n_past) {
    if (!c) return MOE_EINVAL;
    if (seq < 0 || seq >= c->n_seq) return bad_seq(c, "truncate", seq);
    if (n_past < 0 || n_past > c->seq_len[seq])
        return moe_errf(c->err, sizeof c->err, MOE_EINVAL, "truncate: %d is outside 0..%d", n_past, c->seq_len[seq]);
    set_len(c, seq, n_past);
    return MOE_OK;
}

/* The first n positions of every (layer, KV head) block of sequence src
 * into dst's: rows are contiguous per block, so one copy each; kv_q8 copies
 * whole 16-key tiles (a tile's bytes interleave its keys) and the scales'
 * positions per 32-dim block. Positions >= n of dst are never read before
 * they are written again. */
static void copy_cache(moe_context *c, int src, int dst, int n) {
    const moe_hparams *hp = &c->m->hp;
    const size_t D = (size_t)hp->head_dim, Dv = (size_t)hp->head_dim_v;
    const size_t blocks = (size_t)hp->n_layer * (size_t)hp->n_head_kv;   /* per sequence */
    const size_t s0 = (size_t)src * blocks, d0 = (size_t)dst * blocks;
    if (c->kv_tq) {                                   /* kv_tq: n rows of each block */
        const size_t rk = c->tq_krow, rv = c->tq_vrow;
        const size_t C = (size_t)c->n_ctx;
        for (size_t b = 0; b < blocks; b++) {
            memcpy((uint8_t *)c->k_cache + (d0 + b) * C * rk, (uint8_t *)c->k_cache + (s0 + b) * C * rk, (size_t)n * rk);
            memcpy((uint8_t *)c->v_cache + (d0 + b) * C * rv, (uint8_t *)c->v_cache + (s0 + b) * C * rv, (size_t)n * rv);
        }
        return;
    }
    if (c->kv_q8) {
        const size_t Cp = (size_t)c->ctx_pad, rows = ((size_t)n + 15) / 16 * 16;
        for (size_t b = 0; b < blocks; b++) {
            memcpy((int8_t *)c->k_cache + (d0 + b) * Cp * D, (int8_t *)c->k_cache + (s0 + b) * Cp * D, rows * D);
            memcpy((int8_t *)c->v_cache + (d0 + b) * Cp * Dv, (int8_t *)c->v_cache + (s0 + b) * Cp * Dv, rows * Dv);
            for (size_t j = 0; j < D / 32; j++)
                memcpy(c->k_scale + ((d0 + b) * (D / 32) + j) * Cp, c->k_scale + ((s0 + b) * (D / 32) + j) * Cp,
                       (size_t)n * sizeof(uint16_t));
            for (size_t j = 0; j < Dv / 32; j++)
                memcpy(c->v_scale + ((d0 + b) * (Dv / 32) + j) * Cp, c->v_scale + ((s0 + b) * (Dv / 32) + j) * Cp,
                       (size_t)n * sizeof(uint16_t));
        }
        return;
    }
    const size_t C = (size_t)c->n_ctx, el = c->kv_half ? sizeof(uint16_t) : sizeof(float);
    for (size_t b = 0; b < blocks; b++) {
        memcpy((char *)c->k_cache + (d0 + b) * C * D * el, (char *)c->k_cache + (s0 + b) * C * D * el, (size_t)n * D * el);
        if (c->v_cache)
            memcpy((char *)c->v_cache + (d0 + b) * C * Dv * el, (char *)c->v_cache + (s0 + b) * C * Dv * el,
                   (size_t)n * Dv * el);
    }
}

int moe_context_seq_copy(moe_context *c, int src, int dst, int n) {
    if (!c) return MOE_EINVAL;
    if (src < 0 || src >= c->n_seq) return bad_seq(c, "copy", src);
    if (dst < 0 || dst >= c->n_seq) return bad_seq(c, "copy", dst);
    if (n < 0 || n > c->seq_len[src])
        return moe_errf(c->err, sizeof c->err, MOE_EINVAL, "copy: %d positions of sequence %d, which has %d", n, src,
                        c->seq_len[src]);
    if (src != dst) {
        copy_cache(c, src, dst, n);
        if (c->shadow) copy_cache(c->shadow, src, dst, n);
    }
    set_len(c, dst, n);
    return MOE_OK;
}

/* ---- steps -------------------------------------------------------------------------- */

/* Checks every token of b before anything runs: ids, sequences, positions
 * continuing each sequence, the context's room. The sequences' lengths
 * count the batch's tokens as they go and are restored at the end. */
static int check_batch(moe_context *c, const moe_batch *b) {
    const int V = c->m->hp.n_vocab;
    if (!b || b->n_tokens <= 0 || !b->token || !b->seq)
        return moe_errf(c->err, sizeof c->err, MOE_EINVAL, "decode: the batch needs n_tokens > 0, token and seq");
    int rc = MOE_OK, counted = 0;
    for (int i = 0; i < b->n_tokens && !rc; i++) {
        const int32_t tok = b->token[i], seq = b->seq[i];
        if (tok < 0 || tok >= V)
            rc = moe_errf(c->err, sizeof c->err, MOE_EINVAL, "decode: token %d at batch index %d is outside 0..%d", tok, i,
                          V - 1);
        else if (seq < 0 || seq >= c->n_seq)
            rc = moe_errf(c->err, sizeof c->err, MOE_EINVAL, "decode: sequence %d at batch index %d is outside 0..%d", seq,
                          i, c->n_seq - 1);
        else if (b->pos && b->pos[i] != c->seq_len[seq])
            rc = moe_errf(c->err, sizeof c->err, MOE_EINVAL,
                          "decode: position %d at batch index %d does not continue sequence %d (next position %d)",
                          b->pos[i], i, seq, c->seq_len[seq]);
        else if (c->seq_len[seq] >= c->n_ctx)
            rc = moe_errf(c->err, sizeof c->err, MOE_ERANGE,
                          "decode: batch index %d would put sequence %d past the context of %d", i, seq, c->n_ctx);
        else
            c->seq_len[seq]++, counted++;
    }
    for (int j = 0; j < counted; j++) c->seq_len[b->seq[j]]--;
    return rc;
}

/* One step over tokens [0, n) of sequences c->tok_seq (set), at the next
 * positions of each; the sequences keep the positions only if it ran. */
static int run_step(moe_context *c, const int32_t *tokens, int n, float *logits, int n_out) {
    for (int t = 0; t < n; t++) c->tok_pos[t] = c->seq_len[c->tok_seq[t]]++;
    int rc = moe_forward_step(c, tokens, n, logits, n_out);
    for (int t = 0; t < n; t++) {
        const int seq = c->tok_seq[t];
        if (rc) c->seq_len[seq]--;
        if (c->shadow) c->shadow->seq_len[seq] = c->seq_len[seq];
    }
    return rc;
}

/* moe_context_decode's steps: the wanted tokens' logits (logits) or their
 * top k (k > 0: ids, vals; forward.c head_topk), n_batch tokens a step. */
static int decode_steps(moe_context *c, const moe_batch *b, float *logits, int k, int32_t *ids, float *vals) {
    int rc = check_batch(c, b);
    if (rc) return rc;
    const size_t V = (size_t)c->m->hp.n_vocab;
    for (int done = 0; done < b->n_tokens;) {
        const int n = b->n_tokens - done < c->n_batch ? b->n_tokens - done : c->n_batch;
        int n_out = 0;
        for (int t = 0; t < n; t++) {
            const int i = done + t;
            c->tok_seq[t] = b->seq[i];
            if ((logits || k > 0) && (b->logits ? b->logits[i] : i == b->n_tokens - 1)) c->out_rows[n_out++] = t;
        }
        c->topk_k = k, c->topk_ids = ids, c->topk_vals = vals;
        rc = run_step(c, b->token + done, n, logits, n_out);
        c->topk_k = 0, c->topk_ids = NULL, c->topk_vals = NULL;
        if (rc) return rc;
        if (logits) logits += (size_t)n_out * V;
        if (k > 0) ids += (size_t)n_out * (size_t)k, vals += (size_t)n_out * (size_t)k;
        done += n;
    }
    return MOE_OK;
}

int moe_context_decode(moe_context *c, const moe_batch *b, float *logits) {
    if (!c) return MOE_EINVAL;
    c->err[0] = 0;
    return decode_steps(c, b, logits, 0, NULL, NULL);
}

int moe_context_decode_topk(moe_context *c, const moe_batch *b, int k, int32_t *ids, float *vals) {
    if (!c) return MOE_EINVAL;
    c->err[0] = 0;
    if (!ids || !vals || k < 1 || k > 64 || k > c->m->hp.n_vocab)
        return moe_errf(c->err, sizeof c->err, MOE_EINVAL, "decode_topk: k %d must be in 1..min(64, n_vocab) with ids "
                        "and vals", k);
    return decode_steps(c, b, NULL, k, ids, vals);
}

/* ---- the one-sequence session (engine.h): a context with n_seq 1 ------------------- */

int moe_session_new(moe_model *m, const moe_session_params *p, moe_session **out, char *err, size_t errlen) {
    if (!out) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_new: out is NULL");
    *out = NULL;
    if (shard_refuses(m, err, errlen)) return MOE_EINVAL;
    moe_session *s = calloc(1, sizeof *s);
    if (!s) return moe_errf(err, errlen, MOE_ENOMEM, "out of memory");
    moe_context_params cp = {p ? p->n_ctx : 0, p ? p->n_threads : 0, p ? p->n_batch : 0, 1};
    int rc = moe_context_create(m, &cp, m ? m->flags : 0, NULL, &s->c, err, errlen);
    if (rc) { free(s); return rc; }
    *out = s;
    return MOE_OK;
}

void moe_session_free(moe_session *s) {
    if (!s) return;
    context_free(s->c);
    free(s);
}

int moe_session_n_past(const moe_session *s) { return s ? s->c->seq_len[0] : 0; }
int moe_session_threads(const moe_session *s) { return s ? s->c->n_threads : 0; }
const char *moe_session_error(const moe_session *s) { return s ? s->c->err : "no session"; }
void moe_session_flags(const moe_session *s, char *buf, size_t len) { moe_flags_format(s ? s->c->flags : 0, buf, len); }

int moe_session_truncate(moe_session *s, int n_past) { return s ? moe_context_seq_truncate(s->c, 0, n_past) : MOE_EINVAL; }

int moe_session_set_flags(moe_session *s, const char *spec, char *err, size_t errlen) {
    if (!s) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_set_flags: session is NULL");
    if (!spec) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_set_flags: spec is NULL");
    return moe_context_set_flags_(s->c, spec, err, errlen);
}

int moe_session_new_sibling(moe_session *s, const char *spec, moe_session **out, char *err, size_t errlen) {
    if (!out) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_new_sibling: out is NULL");
    *out = NULL;
    if (!s || !spec) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_new_sibling: session or spec is NULL");
    moe_session *sb = calloc(1, sizeof *sb);
    if (!sb) return moe_errf(err, errlen, MOE_ENOMEM, "out of memory");
    int rc = moe_context_sibling_(s->c, spec, &sb->c, err, errlen);
    if (rc) { free(sb); return rc; }
    *out = sb;
    return MOE_OK;
}

/* Runs n tokens at positions n_past .. in steps of n_batch: the logits of
 * the last token, or of every token (all_logits). */
int moe_session_forward(moe_session *s, const int32_t *tokens, int n, float *logits, bool all_logits) {
    if (!s) return MOE_EINVAL;
    moe_context *c = s->c;
    c->err[0] = 0;
    if (!tokens || n <= 0) return moe_errf(c->err, sizeof c->err, MOE_EINVAL, "forward: need at least one token");
    if (n > c->n_ctx - c->seq_len[0])
        return moe_errf(c->err, sizeof c->err, MOE_ERANGE, "forward: %d tokens at position %d exceed the context of %d", n,
                        c->seq_len[0], c->n_ctx);
    const int V = c->m->hp.n_vocab;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return moe_errf(c->err, sizeof c->err, MOE_ERANGE, "forward: token %d at index %d is outside 0..%d", tokens[i],
                            i, V - 1);
    for (int done = 0; done < n;) {
        const int m = n - done < c->n_batch ? n - done : c->n_batch;
        const bool last = done + m == n;
        int n_out = 0;
        for (int t = 0; t < m; t++) {
            c->tok_seq[t] = 0;
            if ((logits || (c->topk_k > 0 && last)) && (all_logits || (last && t == m - 1))) c->out_rows[n_out++] = t;
        }
        float *lg = logits && all_logits ? logits + (size_t)done * (size_t)V : logits;
        int rc = run_step(c, tokens + done, m, lg, n_out);
        if (rc) return rc;
        done += m;
    }
    return MOE_OK;
}

/* As moe_session_forward, but the output is the top k logits of the last
 * token (ids and values as moe_topk orders the full logits): with flag
 * lm_screen, computed through the certified screen (docs/SCREEN.md). */
int moe_session_forward_topk(moe_session *s, const int32_t *tokens, int n, int k, int32_t *ids, float *vals) {
    if (!s) return MOE_EINVAL;
    moe_context *c = s->c;
    c->err[0] = 0;
    if (!ids || !vals || k < 1 || k > 64 || k > c->m->hp.n_vocab)
        return moe_errf(c->err, sizeof c->err, MOE_EINVAL, "forward_topk: k %d must be in 1..min(64, n_vocab) with ids "
                        "and vals", k);
    int rc = MOE_OK;
    c->topk_k = k, c->topk_ids = ids, c->topk_vals = vals;   /* read by the step of the last chunk only */
    rc = moe_session_forward(s, tokens, n, NULL, false);
    c->topk_k = 0, c->topk_ids = NULL, c->topk_vals = NULL;
    return rc;
}

int moe_session_last_logit(moe_session *s, int32_t id, float *out) {
    if (!s || !out) return MOE_EINVAL;
    moe_context *c = s->c;
    if (id < 0 || id >= c->m->hp.n_vocab || c->scr_steps == 0) return MOE_EINVAL;
    if (c->scr_last_exact < 0) { *out = c->scr_y[id]; return MOE_OK; }   /* the full head ran */
    *out = moe_screen_row_logit(&c->m->output, c->kern, c->xn, id, c->scr_y);
    return MOE_OK;
}

int moe_session_screen_stats(const moe_session *s, moe_screen_stats *out) {
    return s ? moe_context_screen_stats(s->c, out) : MOE_EINVAL;
}

int moe_context_screen_stats(const moe_context *c, moe_screen_stats *out) {
    if (!c || !out) return MOE_EINVAL;
    moe_screen_stats r = {c->scr_steps, c->scr_screened, c->scr_level2, c->scr_exact, c->scr_bytes, c->scr_full_bytes,
                          c->scr_last_exact, c->m->screen != NULL};
    *out = r;
    return MOE_OK;
}

/* ---- the lab's per-session measurements (lab.h) ---------------------------------------- */

int moe_context_profile_enable(moe_context *c, bool on) { return c ? moe_context_profile_enable_(c, on) : MOE_EINVAL; }
int moe_context_profile_read(const moe_context *c, moe_phase_stat *out, int max) {
    return c ? moe_context_profile_read_(c, out, max) : MOE_EINVAL;
}
int moe_session_profile_enable(moe_session *s, bool on) { return s ? moe_context_profile_enable_(s->c, on) : MOE_EINVAL; }
int moe_session_profile_read(const moe_session *s, moe_phase_stat *out, int max) {
    return s ? moe_context_profile_read_(s->c, out, max) : MOE_EINVAL;
}

int moe_session_compute_ceiling(moe_session *s, moe_ceiling_part *parts, int max, int *n_parts, double *seconds,
                                char *err, size_t errlen) {
    if (n_parts) *n_parts = 0;
    if (seconds) *seconds = 0;
    if (!s) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_compute_ceiling: session is NULL");
    return moe_context_compute_ceiling_(s->c, parts, max, n_parts, seconds, err, errlen);
}

int moe_session_attention_ceiling(moe_session *s, int pos, moe_ceiling_part *part, double *kv_bytes, char *err,
                                  size_t errlen) {
    if (kv_bytes) *kv_bytes = 0;
    if (!s) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_attention_ceiling: session is NULL");
    return moe_context_attention_ceiling_(s->c, pos, part, kv_bytes, err, errlen);
}

double moe_session_kv_bytes_at(const moe_session *s, int pos) {
    if (!s || pos < 0) return 0;
    const moe_model *m = s->c->m;
    double b = 0;
    for (int il = 0; il < m->hp.n_layer; il++) b += moe_attn_kv_bytes(s->c, &m->layers[il].attn, pos);
    return b;
}
