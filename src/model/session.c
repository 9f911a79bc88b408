/* session.c — sessions: KV cache, worker pool, RoPE tables and every scratch
 * buffer, allocated once in moe_session_new so that forward calls allocate
 * nothing. Also the public forward entry point, which splits a request into
 * chunks of n_batch tokens. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention/attn.h"
#include "base/flags.h"
#include "model/model.h"
#include "base/util.h"

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
} buf_alloc;

static void *xcalloc(size_t n, size_t sz, buf_alloc *a) {
    if (!a->ok) return NULL;
    if (n == 0) n = 1;
    void *p = moe_calloc_aligned(n, sz, a->offset);
    if (!p) a->ok = false;
    return p;
}

static size_t max3(size_t a, size_t b, size_t c) { size_t m = a > b ? a : b; return m > c ? m : c; }

/* flags: the session's flag set; shadow: this is the differential twin
 * (all flags off, one thread, logits buffer for a whole chunk). */
static int session_create(moe_model *m, const moe_session_params *p, uint64_t flags, bool shadow, moe_pool *borrow,
                          moe_session **out, char *err, size_t errlen) {
    if (!out) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_new: out is NULL");
    *out = NULL;
    if (!m) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_new: model is NULL");
    if (m->vocab_only) return moe_errf(err, errlen, MOE_EINVAL, "%s: loaded vocabulary-only; cannot run", m->path);
    const moe_hparams *hp = &m->hp;
    int n_ctx = p && p->n_ctx > 0 ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    int n_threads = p && p->n_threads > 0 ? p->n_threads : moe_cpu_count();
    int n_batch = p && p->n_batch > 0 ? p->n_batch : 512;
    if (p && (p->n_ctx < 0 || p->n_threads < 0 || p->n_batch < 0))
        return moe_errf(err, errlen, MOE_EINVAL, "session: n_ctx, n_threads and n_batch must be >= 0");
    if (n_ctx > (1 << 22)) return moe_errf(err, errlen, MOE_EINVAL, "session: n_ctx %d too large", n_ctx);
    if (n_threads > 1024) return moe_errf(err, errlen, MOE_EINVAL, "session: %d threads is too many (max 1024)", n_threads);
    if (n_batch > 65536) return moe_errf(err, errlen, MOE_EINVAL, "session: n_batch %d too large (max 65536)", n_batch);
    if (n_batch > n_ctx) n_batch = n_ctx;
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
    moe_session *s = calloc(1, sizeof *s);
    if (!s) return moe_errf(err, errlen, MOE_ENOMEM, "out of memory");
    s->m = m;
    s->flags = flags;
    s->n_ctx = n_ctx;
    s->n_threads = n_threads;
    s->n_batch = n_batch;
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
    const size_t K = (size_t)hp->n_expert_used, NE = (size_t)hp->n_expert, L = (size_t)hp->n_layer;
    const size_t C = (size_t)n_ctx;
    buf_alloc al = {true, moe_flag_on(flags, MOE_FLAG_ALIGNED_BUFFERS) ? 0 : 16};
    s->kv_half = moe_flag_on(flags, MOE_FLAG_KV_F16);
    s->kv_q8 = moe_flag_on(flags, MOE_FLAG_KV_Q8);
    s->ctx_pad = (n_ctx + 15) / 16 * 16;
    if (s->kv_q8) {                                   /* layouts: attn.h */
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
        s->v_cache = xcalloc(L * C * Hkv * Dv, kv_elem, &al);
    }
    s->rope_full = xcalloc(C * (size_t)hp->rope_full.n_rot, sizeof(float), &al);
    if (hp->swa_window > 0) s->rope_swa = xcalloc(C * (size_t)hp->rope_swa.n_rot, sizeof(float), &al);
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
    s->scores = xcalloc((size_t)n_threads * Hm * C, sizeof(float), &al);
    s->attn_sum = xcalloc((size_t)n_threads * Hm, sizeof(float), &al);
    if (shadow) s->logits_tmp = xcalloc(B * (size_t)hp->n_vocab, sizeof(float), &al); /* the twin's logits */
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
        moe_session_free(s);
        return moe_errf(err, errlen, MOE_ENOMEM, "session: out of memory for n_ctx %d, n_batch %d", n_ctx, n_batch);
    }
    rope_table(&hp->rope_full, n_ctx, s->rope_full);
    if (s->rope_swa) rope_table(&hp->rope_swa, n_ctx, s->rope_swa);
    *out = s;
    return MOE_OK;
}

/* A session with flags (and its differential twin when the model asks for
 * one); borrow: the pool to use instead of a new one, or NULL. */
static int session_new(moe_model *m, const moe_session_params *p, uint64_t flags, moe_pool *borrow,
                       moe_session **out, char *err, size_t errlen) {
    int rc = session_create(m, p, flags, false, borrow, out, err, errlen);
    if (rc || !m->diff) return rc;
    moe_session_params sp = {(*out)->n_ctx, 1, (*out)->n_batch};
    rc = session_create(m, &sp, moe_flags_numerics(flags), true, NULL, &(*out)->shadow, err, errlen);
    if (rc) { moe_session_free(*out); *out = NULL; }
    return rc;
}

int moe_session_new(moe_model *m, const moe_session_params *p, moe_session **out, char *err, size_t errlen) {
    return session_new(m, p, m ? m->flags : 0, NULL, out, err, errlen);
}

/* spec applied on top of s's flags, into *next. A flag it changes that is
 * fixed (at load, by the pool, or at session creation unless per_session_ok
 * and the flag is per_session) is MOE_EINVAL naming the flag and why, then
 * what to do (tail). */
static int flags_next(const moe_session *s, const char *spec, bool per_session_ok, const char *tail, uint64_t *next,
                      char *err, size_t errlen) {
    int rc = moe_flags_parse(spec, s->flags, next, err, errlen);
    if (rc) return rc;
    const uint64_t changed = *next ^ s->flags;
    for (int i = 0; i < MOE_FLAG_COUNT; i++) {
        const moe_flag_info *f = moe_flag_get(i);
        if ((changed >> i) & 1u && f->fixed && !(per_session_ok && f->per_session))
            return moe_errf(err, errlen, MOE_EINVAL, "flags: '%s' %s; %s", f->name, f->fixed, tail);
    }
    return MOE_OK;
}

int moe_session_new_sibling(moe_session *s, const char *spec, moe_session **out, char *err, size_t errlen) {
    if (!out) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_new_sibling: out is NULL");
    *out = NULL;
    if (!s || !spec) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_new_sibling: session or spec is NULL");
    uint64_t next;
    int rc = flags_next(s, spec, true, "a sibling session shares the model and the pool", &next, err, errlen);
    if (rc) return rc;
    moe_session_params sp = {s->n_ctx, s->n_threads, s->n_batch};
    return session_new(s->m, &sp, next, s->pool, out, err, errlen);
}

void moe_session_free(moe_session *s) {
    if (!s) return;
    if (!s->pool_borrowed) moe_pool_free(s->pool);
    /* every buffer session_create allocated (xcalloc) */
    void *bufs[] = {s->k_cache, s->v_cache, s->k_scale, s->v_scale, s->q_a8, s->kv_a8, s->attn_w, s->rope_full,
                    s->rope_swa, s->x, s->xn, s->proj, s->ffn_out, s->q, s->k, s->v, s->att, s->gate, s->router,
                    s->selw, s->xg, s->eout, s->hg, s->hu, s->scores, s->attn_sum, s->logits_tmp, s->sel, s->ex_slot,
                    s->gather_src, s->expert_rows, s->jobs, s->job_pre, s->xa, s->xga, s->ha};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) moe_free_aligned(bufs[i]);
    moe_session_free(s->shadow);
    free(s);
}

int moe_session_n_past(const moe_session *s) { return s ? s->n_past : 0; }
int moe_session_threads(const moe_session *s) { return s ? s->n_threads : 0; }

int moe_session_truncate(moe_session *s, int n_past) {
    if (!s) return MOE_EINVAL;
    if (n_past < 0 || n_past > s->n_past)
        return moe_errf(s->err, sizeof s->err, MOE_EINVAL, "truncate: %d is outside 0..%d", n_past, s->n_past);
    s->n_past = n_past;
    if (s->shadow) s->shadow->n_past = n_past;
    return MOE_OK;
}

const char *moe_session_error(const moe_session *s) { return s ? s->err : "no session"; }

void moe_session_flags(const moe_session *s, char *buf, size_t len) { moe_flags_format(s ? s->flags : 0, buf, len); }

/* Only flags that forward.c reads on every call may change here (the
 * registry's `fixed` is NULL for them); everything else shaped the weights,
 * the pool or the buffers. The kernel tables are the one thing derived from a
 * forward-time flag at creation, so simd re-picks them. Every forward-time
 * flag keeps the logits bit-identical (docs/EXACTNESS.md), which is what lets
 * a caller alternate configurations inside one token stream. The
 * differential twin is left alone: it holds only the numerics flags, which
 * cannot change, so it keeps checking whatever the main session now runs. */
int moe_session_set_flags(moe_session *s, const char *spec, char *err, size_t errlen) {
    if (!s) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_set_flags: session is NULL");
    if (!spec) return moe_errf(err, errlen, MOE_EINVAL, "moe_session_set_flags: spec is NULL");
    uint64_t next;
    int rc = flags_next(s, spec, false, "set it when loading the model (--flags), not on a live session", &next, err,
                        errlen);
    if (rc) return rc;
    s->flags = next;
    const moe_isa_table *lvl = moe_isa_table_for(moe_flag_on(next, MOE_FLAG_SIMD) ? s->kern_simd->isa : MOE_ISA_SCALAR);
    s->kern = lvl->quant, s->attn = lvl->attn; /* both from one level's descriptor */
    return MOE_OK;
}

int moe_session_forward(moe_session *s, const int32_t *tokens, int n, float *logits, bool all_logits) {
    if (!s) return MOE_EINVAL;
    s->err[0] = 0;
    if (!tokens || n <= 0) return moe_errf(s->err, sizeof s->err, MOE_EINVAL, "forward: need at least one token");
    if (n > s->n_ctx - s->n_past)
        return moe_errf(s->err, sizeof s->err, MOE_ERANGE, "forward: %d tokens at position %d exceed the context of %d",
                        n, s->n_past, s->n_ctx);
    const int V = s->m->hp.n_vocab;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return moe_errf(s->err, sizeof s->err, MOE_ERANGE, "forward: token %d at index %d is outside 0..%d",
                            tokens[i], i, V - 1);
    for (int done = 0; done < n;) {
        int c = n - done < s->n_batch ? n - done : s->n_batch;
        bool last = done + c == n;
        float *lg = NULL;
        if (logits && all_logits) lg = logits + (size_t)done * (size_t)V;
        else if (logits && last) lg = logits;
        int rc = moe_forward_chunk(s, tokens + done, c, lg, all_logits);
        if (rc) return rc;
        done += c;
    }
    return MOE_OK;
}
