/* loader.c — moe_model_load: maps the GGUF, binds the architecture's
 * hyperparameters and tensors (checking every shape), loads the tokenizer,
 * and answers the public model queries (info, bytes per token, ...). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "attention/kv_tq.h"
#include "base/flags.h"
#include "model/arch/arch.h"
#include "model/bind.h"
#include "model/blocks.h"
#include "base/util.h"
#include "base/meminfo.h"
#include "model/screen.h"

/* Weight bytes one decoded token reads: every row of the matrices it reads
 * whole, n_expert_used of each expert stack, one embedding row (norm vectors
 * are negligible). From the weight list, as the ceiling counts them. */
static void compute_bytes_per_token(moe_model *m) {
    uint64_t b = m->tok_embd.row_bytes;
    for (int i = 0; i < m->n_weights; i++) {
        const moe_weight *w = m->weights[i].w;
        b += m->weights[i].use == MOE_USE_TOPK ? (uint64_t)m->hp.n_expert_used * (uint64_t)w->mat_bytes
                                               : (uint64_t)w->mat_bytes * (uint64_t)w->n_mat;
    }
    m->bytes_per_token = b;
}

/* Which formats are worth repacking: measured with bench_quant (2 threads,
 * 512x2048 / lm-head, GB/s plain -> x4): Q8_0 27 -> 35-38, MXFP4 15-22 -> 22,
 * NVFP4 19-21 -> 21-22, Q4_0 21-23 -> 22-23, but Q4_K 19-21 -> 15-17 and
 * Q6_K 17-19 -> 15-18: the K-quants' super-block state costs more there than
 * the single stream saves, so they keep the file's layout. F32/F16/BF16 (x4
 * in 32-value runs, rows with n % 32 == 0): BF16 41-43 -> 53-54, F16 40-42 ->
 * 54, F32 39-46 -> 52-56 in the VM's fast memory state, equal in its slow one
 * (the two builds alternating); AVX2 BF16 32-33 -> 36. */
static bool repack_helps(uint32_t type, int64_t n) {
    return moe_x4_fits(type, n) && type != MOE_T_Q4_K && type != MOE_T_Q6_K;
}

/* The layout weight w gets at load: 'a' (a8: flag act_q8 and a type with
 * 8-bit-activation kernels; required, since those kernels read only it),
 * 'x' (x4: flag repack, where it pays) or 0 (the file's). */
static char load_layout(const moe_model *m, const moe_weight *w) {
    if (moe_flag_on(m->flags, MOE_FLAG_ACT_Q8) && moe_type_has_a8(w->type) && w->n_in % 32 == 0) return 'a';
    if (moe_flag_on(m->flags, MOE_FLAG_REPACK) && repack_helps(w->type, w->n_in) && w->n_out >= 4) return 'x';
    return 0;
}

typedef struct {
    moe_weight **ws;
    int nw;
    uint8_t **dst;      /* per weight: destination in the arena, NULL if not repacked */
    char *layout;       /* per weight: load_layout() */
    int64_t n_units;    /* (weight, matrix) pairs to repack */
    uintptr_t page;
    bool *topk;         /* per weight: a routed-expert stack, of which only [ex_first, ex_end) is this process's */
    int64_t ex_first, ex_end;
} repack_job;

/* Drops the whole pages of [p, p + n) from this process (the page cache keeps
 * them): after a repack the file's copy is not read again. */
static void release_pages(const uint8_t *p, size_t n, uintptr_t page) {
    uintptr_t pb = ((uintptr_t)p + page - 1) & ~(page - 1);
    uintptr_t pe = ((uintptr_t)p + n) & ~(page - 1);
    if (pe > pb) (void)madvise((void *)pb, pe - pb, MADV_DONTNEED);
}

static void repack_worker(void *ctx, int ith, int nth) {
    repack_job *rj = ctx;
    int64_t b, e, u = 0;
    moe_split(rj->n_units, ith, nth, 1, &b, &e);
    for (int i = 0; i < rj->nw && u < e; i++) {
        const moe_weight *w = rj->ws[i];
        if (!rj->dst[i]) continue;
        for (int64_t m = 0; m < w->n_mat; m++, u++)
            if (u >= b && u < e && (!rj->topk[i] || (m >= rj->ex_first && m < rj->ex_end))) {
                const uint8_t *src = w->data + (size_t)m * w->mat_bytes;
                uint8_t *dst = rj->dst[i] + (size_t)m * w->mat_bytes;
                if (rj->layout[i] == 'a') {       /* a8 pairs rows across the matrix: whole */
                    moe_repack_a8(w->type, src, dst, w->n_out, w->n_in);
                    release_pages(src, w->mat_bytes, rj->page);
                    continue;
                }
                /* x4 groups are self-contained: ~1 MB of rows at a time, the
                 * source released after each, so a large matrix (the lm
                 * head) is never resident twice */
                int64_t step = ((int64_t)(1 << 20) / (int64_t)w->row_bytes) & ~(int64_t)3;
                if (step < 4) step = 4;
                size_t released = 0;   /* bytes of src from which the next release starts */
                for (int64_t r = 0; r < w->n_out; r += step) {
                    const int64_t nr = w->n_out - r < step ? w->n_out - r : step;
                    moe_repack_x4(w->type, src + (size_t)r * w->row_bytes, dst + (size_t)r * w->row_bytes, nr,
                                  w->n_in);
                    /* from where the last release stopped, so a page that
                     * straddles two chunks is released too */
                    const size_t end = (size_t)(r + nr) * w->row_bytes;
                    release_pages(src + released, end - released, rj->page);
                    const uintptr_t done = ((uintptr_t)src + end) & ~(rj->page - 1);  /* released up to here */
                    if (done > (uintptr_t)src) released = done - (uintptr_t)src;
                }
            }
    }
}

/* Load-time repack (flags repack and act_q8): one anonymous mapping for all
 * matrices that change layout; the file pages they came from are released.
 * x4 kernel results are identical to the plain layout's; a8 is the only
 * layout the act_q8 kernels read. */
static int repack_weights(moe_model *m, char *err, size_t errlen) {
    int nw = 0;
    moe_weight **ws = malloc((size_t)(m->n_weights ? m->n_weights : 1) * sizeof *ws);
    char *layout = malloc((size_t)(m->n_weights ? m->n_weights : 1));
    if (!ws || !layout) { free(ws); free(layout); return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", m->path); }
    /* the lm head tied to the embedding keeps its layout: embed() reads its rows */
    bool *topk = calloc((size_t)(m->n_weights ? m->n_weights : 1), sizeof *topk);
    if (!topk) { free(ws); free(layout); return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", m->path); }
    /* a shard > 0 only ever reads its routed experts: nothing else is repacked (or touched) */
    for (int i = 0; i < m->n_weights; i++)
        if (m->weights[i].w->data != m->tok_embd.data && (m->shard == 0 || m->weights[i].use == MOE_USE_TOPK)) {
            topk[nw] = m->n_shards > 1 && m->weights[i].use == MOE_USE_TOPK;
            ws[nw++] = m->weights[i].w;
        }
    size_t total = 0, owned = 0;  /* owned: the bytes this process writes (the check against memory) */
    for (int i = 0; i < nw; i++) {
        layout[i] = load_layout(m, ws[i]);
        if (!layout[i]) continue;
        total += (ws[i]->mat_bytes * (size_t)ws[i]->n_mat + 63) & ~(size_t)63;
        owned += ws[i]->mat_bytes * (size_t)(topk[i] ? m->ex_end - m->ex_first : ws[i]->n_mat);
    }
    if (total == 0) { free(ws); free(layout); free(topk); return MOE_OK; }
    /* More than memory holds: x4 is a layout of the same values, so keep
     * streaming from the file mapping (bit-identical results); a8 is the only
     * layout the act_q8 kernels read, so act_q8 is refused. Never copy what
     * does not fit (the process would grow until it is killed). */
    uint64_t avail = 0;
    if (!moe_mem_fits(owned, &avail)) {
        bool a8 = memchr(layout, 'a', (size_t)nw) != NULL;
        free(ws); free(layout); free(topk);
        if (a8)
            return moe_errf(err, errlen, MOE_ENOMEM, "%s: flag act_q8 needs %zu bytes of repacked weights, %llu "
                            "available (try --flags=-act_q8)", m->path, total, (unsigned long long)avail);
        moe_note(m, "not repacked: the repacked weights need %zu bytes, %llu available; streaming from the "
                 "file mapping", total, (unsigned long long)avail);
        return MOE_OK;
    }
    void *arena = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED) {
        free(ws); free(layout); free(topk);
        return moe_errf(err, errlen, MOE_ENOMEM, "%s: cannot map %zu bytes for repacked weights (try --flags=-repack)",
                        m->path, total);
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(arena, total, MADV_HUGEPAGE); /* fewer TLB misses while streaming; advisory */
#endif
    /* assign destinations, then repack all (weight, matrix) units in parallel */
    /* (the arena keeps every expert's place: another shard's are never
     * written, so their pages are never made resident) */
    repack_job rj = {ws, nw, NULL, layout, 0, (uintptr_t)sysconf(_SC_PAGESIZE), topk, m->ex_first, m->ex_end};
    rj.dst = malloc((size_t)nw * sizeof *rj.dst);
    if (!rj.dst) {
        munmap(arena, total); free(ws); free(layout); free(topk);
        return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", m->path);
    }
    uint8_t *dst = arena;
    for (int i = 0; i < nw; i++) {
        rj.dst[i] = NULL;
        if (!layout[i]) continue;
        rj.dst[i] = dst;
        rj.n_units += ws[i]->n_mat;
        dst += (ws[i]->mat_bytes * (size_t)ws[i]->n_mat + 63) & ~(size_t)63;
    }
    moe_pool *pool = moe_pool_new(moe_cpu_count(), NULL, 0);
    if (pool) moe_pool_run(pool, repack_worker, &rj);
    else repack_worker(&rj, 0, 1);
    moe_pool_free(pool);
    for (int i = 0; i < nw; i++) {
        moe_weight *w = ws[i];
        if (!rj.dst[i]) continue;
        w->data = rj.dst[i];
        w->x4 = layout[i] == 'x';
        w->a8 = layout[i] == 'a';
    }
    free(rj.dst);
    free(ws);
    free(layout);
    free(topk);
    m->repacked = arena;
    m->repacked_bytes = total;
    return MOE_OK;
}

/* Expert parallelism (moefast/shard.h): which routed experts this process
 * holds. Shards > 0 never run a step (no link, no contexts of their own:
 * moe_shard_worker), so only shard 0 gets the link. */
static int shard_setup(moe_model *m, const moe_load_params *p, char *err, size_t errlen) {
    const int n = p && p->n_shards > 1 ? p->n_shards : 1, s = p ? p->shard : 0;
    m->n_shards = n, m->shard = 0, m->ex_first = 0, m->ex_end = m->hp.n_expert;
    if (n == 1 && s == 0) return MOE_OK;
    if (n > 4096 || s < 0 || s >= n)
        return moe_errf(err, errlen, MOE_EINVAL, "%s: shard %d of %d: shard must be in [0, n_shards), n_shards <= 4096",
                        m->path, s, n);
    if (m->hp.n_expert < n)
        return moe_errf(err, errlen, MOE_EINVAL, "%s: %d shards but the model has %d routed experts per layer (one "
                        "expert at least per shard)", m->path, n, m->hp.n_expert);
    if (s == 0 && (!p->link || !p->link->post || !p->link->wait || p->link->n_shards != n))
        return moe_errf(err, errlen, MOE_EINVAL, "%s: shard 0 of %d needs a link to the other shards (moe_load_params"
                        ".link with n_shards %d)", m->path, n, n);
    m->shard = s;
    m->link = s == 0 ? p->link : NULL;
    moe_shard_range(m->hp.n_expert, s, n, &m->ex_first, &m->ex_end);
    return MOE_OK;
}

static int count_vector_capacity(const gguf_file *gf) {
    /* Upper bound for norm vectors that need conversion to F32. */
    uint64_t n = 0;
    for (uint64_t i = 0; i < gf->n_tensors; i++)
        if (gf->tensors[i].type != MOE_T_F32 && gf->tensors[i].n_dims == 1) n += (uint64_t)gf->tensors[i].ne[0];
    return n > (1u << 30) ? -1 : (int)n;
}

/* moe_load_params' RoPE scaling into m->rope_override (moe_read_rope
 * applies it while the architecture binds). */
static int rope_override_set(moe_model *m, const moe_load_params *p, char *err, size_t errlen) {
    if (!p) return MOE_OK;
    const char *s = p->rope_scaling;
    if (s && *s && strcmp(s, "none") && strcmp(s, "yarn"))
        return moe_errf(err, errlen, MOE_EINVAL, "%s: rope_scaling '%.32s' is not supported (none, yarn)", m->path, s);
    m->rope_override.mode = !s || !*s ? MOE_ROPE_FILE : !strcmp(s, "none") ? MOE_ROPE_NONE : MOE_ROPE_YARN;
    if (p->rope_scale != 0.0f && !(p->rope_scale >= 1.0f && p->rope_scale <= 1e6f))
        return moe_errf(err, errlen, MOE_EINVAL, "%s: rope_scale %g must be in [1, 1e6] (0: the file's)", m->path,
                        (double)p->rope_scale);
    if (p->yarn_orig_ctx < 0)
        return moe_errf(err, errlen, MOE_EINVAL, "%s: yarn_orig_ctx %d must be > 0 (0: the file's)", m->path,
                        p->yarn_orig_ctx);
    if (m->rope_override.mode == MOE_ROPE_NONE && (p->rope_scale != 0.0f || p->yarn_orig_ctx))
        return moe_errf(err, errlen, MOE_EINVAL, "%s: rope_scale / yarn_orig_ctx given with rope_scaling none", m->path);
    m->rope_override.factor = p->rope_scale;
    m->rope_override.orig_ctx = p->yarn_orig_ctx;
    return MOE_OK;
}

static bool rope_override_asked(const moe_model *m) {
    return m->rope_override.mode != MOE_ROPE_FILE || m->rope_override.factor > 0 || m->rope_override.orig_ctx > 0;
}

int moe_model_load(const char *path, const moe_load_params *params, moe_model **out,
                   char *err, size_t errlen) {
    if (!out) return moe_errf(err, errlen, MOE_EINVAL, "moe_model_load: out is NULL");
    *out = NULL;
    if (!path) return moe_errf(err, errlen, MOE_EINVAL, "moe_model_load: path is NULL");
    moe_model *m = calloc(1, sizeof *m);
    if (!m) return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path);
    int rc;
    m->path = strdup(path);
    if (!m->path) { rc = moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path); goto fail; }
    m->vocab_only = params && params->vocab_only;
    const char *spec = params && params->flags ? params->flags : getenv("MOEFAST_FLAGS");
    rc = moe_flags_parse(spec, moe_flags_default(), &m->flags, err, errlen);
    if (rc) goto fail;
    const char *de = getenv("MOEFAST_DIFF");
    m->diff = (params && params->diff) || (de && *de && strcmp(de, "0") != 0);

    rc = gguf_open(path, &m->gf, err, errlen);
    if (rc) goto fail;

    gguf_str arch = {0};
    rc = gguf_get_str(m->gf, "general.architecture", &arch, err, errlen);
    if (rc < 0) goto fail;
    if (rc == 1 && !m->vocab_only) {
        rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: missing key 'general.architecture'", path);
        goto fail;
    }
    const gguf_kv *tk = gguf_find_kv(m->gf, "tokenizer.ggml.tokens");
    if (tk || m->vocab_only) {
        rc = moe_tokenizer_load(m->gf, &m->tok, err, errlen);
        if (rc) goto fail;
    }
    const gguf_kv *ct = gguf_find_kv(m->gf, "tokenizer.chat_template");
    if (ct && ct->type == GGUF_STRING) {
        m->chat_template = strndup(ct->v.s.ptr, (size_t)ct->v.s.len);
        if (!m->chat_template) { rc = moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path); goto fail; }
    }
    if (m->vocab_only) {
        m->arch_name = "vocab";
        *out = m;
        return MOE_OK;
    }
    m->arch = moe_arch_find(arch.ptr, (size_t)arch.len);
    if (!m->arch) {
        char list[256];
        moe_arch_list(list, sizeof list);
        rc = moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: general.architecture '%.*s' is not supported (supported: %s)",
                      path, (int)(arch.len > 64 ? 64 : arch.len), arch.ptr, list);
        goto fail;
    }
    m->arch_name = m->arch->name;
    int cap = count_vector_capacity(m->gf);
    if (cap < 0) { rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: absurd vector tensor sizes", path); goto fail; }
    if (cap > 0) {
        m->owned_vectors = malloc((size_t)cap * sizeof(float));
        if (!m->owned_vectors) { rc = moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path); goto fail; }
        m->owned_cap = (size_t)cap;
    }
    if ((rc = rope_override_set(m, params, err, errlen))) goto fail;
    rc = m->arch->bind(m, err, errlen);
    if (rc) goto fail;
    if (rope_override_asked(m) && !m->rope_override.applied) {
        rc = moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: %s takes no RoPE scaling (rope_scaling / rope_scale asked at load)",
                      path, m->arch_name);
        goto fail;
    }
    if (m->tok && moe_tokenizer_n_vocab(m->tok) > m->hp.n_vocab) {
        rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: tokenizer has %d tokens but the embedding has %d rows",
                      path, moe_tokenizer_n_vocab(m->tok), m->hp.n_vocab);
        goto fail;
    }
    compute_bytes_per_token(m);
    rc = shard_setup(m, params, err, errlen);
    if (rc) goto fail;
    if (moe_flag_on(m->flags, MOE_FLAG_LM_SCREEN) && m->shard == 0) {   /* from the file's (plain) rows, before any repack */
        const char *why = NULL;
        m->screen = moe_screen_build(m->output.type, m->output.data, m->output.row_bytes, m->output.n_out,
                                     m->output.n_in, &why);
        if (!m->screen && m->output.scale == NULL) moe_note(m, "lm_screen: %s", why);
        if (m->screen && m->output.scale) { moe_screen_free(m->screen); m->screen = NULL; }
    }
    if ((moe_flag_on(m->flags, MOE_FLAG_REPACK) || moe_flag_on(m->flags, MOE_FLAG_ACT_Q8)) &&
        (rc = repack_weights(m, err, errlen)))
        goto fail;
    if (moe_flag_on(m->flags, MOE_FLAG_READAHEAD) && !m->repacked && m->n_shards == 1) {
        /* Start paging the weights in now (asynchronously) instead of one
         * fault at a time during the first forward; advisory only. Every
         * file of a split model. */
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        for (uint32_t p = 0; p <= m->gf->n_parts; p++) {
            const gguf_file *pf = p == 0 ? m->gf : m->gf->parts[p - 1];
            if (!pf->map || pf->size <= pf->data_offset) continue;
            uintptr_t b = ((uintptr_t)pf->map + pf->data_offset) & ~(page - 1);
            uintptr_t e = (uintptr_t)pf->map + pf->size;
            (void)madvise((void *)b, e - b, MADV_WILLNEED);
        }
    }
    *out = m;
    return MOE_OK;
fail:
    moe_model_free(m);
    return rc ? rc : MOE_EFORMAT;
}

void moe_model_free(moe_model *m) {
    if (!m) return;
    moe_tokenizer_free(m->tok);
    gguf_close(m->gf);
    free(m->layers);
    free(m->weights);
    free(m->owned_vectors);
    free(m->chat_template);
    moe_screen_free(m->screen);
    if (m->repacked) munmap(m->repacked, m->repacked_bytes);
    for (int i = 0; i < m->n_notes; i++) free(m->notes[i]);
    free(m->path);
    free(m);
}

int moe_model_n_vocab(const moe_model *m) {
    if (!m) return 0;
    if (m->vocab_only) return m->tok ? moe_tokenizer_n_vocab(m->tok) : 0;
    return m->hp.n_vocab;
}
int moe_model_n_ctx_train(const moe_model *m) { return m ? m->hp.n_ctx_train : 0; }
const char *moe_model_arch(const moe_model *m) { return m ? m->arch_name : NULL; }
const char *moe_model_path(const moe_model *m) { return m ? m->path : NULL; }
uint64_t moe_model_bytes_per_token(const moe_model *m) { return m ? m->bytes_per_token : 0; }

const char *moe_model_sha256(moe_model *m) {
    if (!m) return NULL;
    /* read with stdio rather than through the mapping: hashing a mapped 2 GB
     * file would leave all of it resident (and counted in this process) */
    if (m->sha256[0]) return m->sha256;
    if (moe_sha256_file(m->path, m->sha256) != MOE_OK) moe_sha256_hex(m->gf->map, (size_t)m->gf->size, m->sha256);
    if (m->gf->n_parts) {
        /* a split model: the sha256 of its files' hex digests, in order */
        const size_t hl = strlen(m->sha256);
        char *all = malloc(hl * (m->gf->n_parts + 1) + 1);
        if (!all) return m->sha256;
        memcpy(all, m->sha256, hl);
        for (uint32_t p = 0; p < m->gf->n_parts; p++) {
            const gguf_file *pf = m->gf->parts[p];
            char h[sizeof m->sha256];
            if (moe_sha256_file(pf->path, h) != MOE_OK) moe_sha256_hex(pf->map, (size_t)pf->size, h);
            memcpy(all + hl * (p + 1), h, hl);
        }
        moe_sha256_hex(all, hl * (m->gf->n_parts + 1), m->sha256);
        free(all);
    }
    return m->sha256;
}

const char *moe_model_chat_template(const moe_model *m) {
    if (!m || !m->gf) return NULL;
    return m->chat_template;
}

const char *moe_model_kernels(const moe_model *m) {
    return m && !moe_flag_on(m->flags, MOE_FLAG_SIMD) ? "scalar" : moe_isa_name();
}

void moe_model_flags(const moe_model *m, char *buf, size_t len) { moe_flags_format(m ? m->flags : 0, buf, len); }

int moe_flag_count(void) { return MOE_FLAG_COUNT; }

int moe_flags_numerics_of(const char *spec, char *buf, size_t len, char *err, size_t errlen) {
    uint64_t mask;
    int rc = moe_flags_parse(spec, 0, &mask, err, errlen);
    if (rc) return rc;
    moe_flags_format(moe_flags_numerics(mask), buf, len);
    return MOE_OK;
}

int moe_flags_check(const char *spec, char *err, size_t errlen) {
    uint64_t m;
    return moe_flags_parse(spec, moe_flags_default(), &m, err, errlen);
}

bool moe_flag_describe(int i, const char **name, const char **desc, bool *default_on, bool *test_only) {
    const moe_flag_info *f = moe_flag_get(i);
    if (!f) return false;
    if (name) *name = f->name;
    if (desc) *desc = f->desc;
    if (default_on) *default_on = f->default_on;
    if (test_only) *test_only = f->test_only;
    return true;
}

/* ---- tokenizer wrappers ------------------------------------------------------ */

int moe_tokenize(const moe_model *m, const char *text, size_t len, bool add_bos, bool parse_special,
                 int32_t *ids, size_t cap, size_t *n_out, char *err, size_t errlen) {
    if (!m || !m->tok) return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: the file has no tokenizer",
                                       m ? m->path : "(null)");
    return moe_tokenizer_encode(m->tok, text, len, add_bos, parse_special, ids, cap, n_out, err, errlen);
}

int moe_token_piece(const moe_model *m, int32_t id, bool show_special, const char **bytes, size_t *len) {
    if (!m || !m->tok) return MOE_EUNSUPPORTED;
    return moe_tokenizer_piece(m->tok, id, show_special, bytes, len);
}

int32_t moe_token_eos(const moe_model *m) { return m && m->tok ? moe_tokenizer_eos(m->tok) : -1; }
int32_t moe_token_bos(const moe_model *m) { return m && m->tok ? moe_tokenizer_bos(m->tok) : -1; }
bool moe_token_add_bos(const moe_model *m) { return m && m->tok && moe_tokenizer_add_bos(m->tok); }
bool moe_token_is_eog(const moe_model *m, int32_t id) { return m && m->tok && moe_tokenizer_is_eog(m->tok, id); }

/* ---- info --------------------------------------------------------------------- */

static const char *vtype_value(const gguf_kv *kv, char *buf, size_t len) {
    switch (kv->type) {
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_U64:
        snprintf(buf, len, "%llu", (unsigned long long)kv->v.u); break;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64:
        snprintf(buf, len, "%lld", (long long)kv->v.i); break;
    case GGUF_F32: case GGUF_F64: snprintf(buf, len, "%g", kv->v.f); break;
    case GGUF_BOOL: snprintf(buf, len, "%s", kv->v.u ? "true" : "false"); break;
    case GGUF_STRING: {
        size_t n = kv->v.s.len > 60 ? 60 : (size_t)kv->v.s.len;
        size_t o = 0;
        buf[o++] = '"';
        for (size_t i = 0; i < n && o + 5 < len; i++) {
            unsigned char c = (unsigned char)kv->v.s.ptr[i];
            if (c == '\n') { buf[o++] = '\\'; buf[o++] = 'n'; }
            else if (c < 32) buf[o++] = '?';
            else buf[o++] = (char)c;
        }
        if (kv->v.s.len > n && o + 4 < len) { memcpy(buf + o, "...", 3); o += 3; }
        buf[o++] = '"';
        buf[o] = 0;
        break;
    }
    case GGUF_ARRAY:
        snprintf(buf, len, "[%llu x %s]", (unsigned long long)kv->v.arr.n, gguf_vtype_name(kv->v.arr.type));
        break;
    default: snprintf(buf, len, "?");
    }
    return buf;
}

/* The layers as their descriptors say: heads and windows, RoPE tables, the
 * FFN kinds and the router. */
static void print_layers(const moe_model *m, FILE *f) {
    const moe_hparams *hp = &m->hp;
    int window = 0, n_dense = 0;
    const moe_router_desc *router = NULL;
    fprintf(f, "  query heads per layer:");
    for (int il = 0; il < hp->n_layer; il++) {
        const moe_layer *L = &m->layers[il];
        fprintf(f, " %d%s", L->attn.n_head, L->attn.window > 0 ? "s" : "");
        if (L->attn.window > window) window = L->attn.window;
        if (L->dense) n_dense++;
        else if (!router) router = &L->moe.router;
    }
    fprintf(f, "  (s = sliding window)\n");
    fprintf(f, "  kv heads %d, head dim %d (v %d), rms eps %g\n", hp->n_head_kv, hp->head_dim, hp->head_dim_v,
            (double)hp->rms_eps);
    if (window > 0) fprintf(f, "  sliding window %d on the layers marked s, full attention elsewhere\n", window);
    for (int i = 0; i < m->n_ropes; i++) {
        const moe_rope *r = &m->ropes[i];
        fprintf(f, "  rope %d%s: base %g, %d rotated dims%s%s", i, window > 0 ? (i ? " (sliding layers)" : " (full layers)") : "",
                (double)r->base, r->n_rot, r->adjacent ? " in adjacent pairs" : "", r->yarn ? ", YaRN" : "");
        if (r->yarn)
            fprintf(f, " factor %g, original context %d, beta_fast %g, beta_slow %g", (double)r->yarn_factor,
                    r->yarn_orig_ctx, (double)r->yarn_beta_fast, (double)r->yarn_beta_slow);
        fprintf(f, "\n");
    }
    fprintf(f, "  experts %d, used %d, expert FFN %d, shared expert FFN %d, dense FFN %d, dense layers %d\n",
            hp->n_expert, hp->n_expert_used, hp->n_ff_exp, hp->n_ff_shexp, hp->n_ff, n_dense);
    if (router)
        fprintf(f, "  router: %s%s, weights %s, scale %g\n", moe_router_name(router->probs),
                router->select_bias ? " + selection bias" : "", router->renorm ? "renormalised" : "not renormalised",
                (double)router->scale);
    if (router && (router->bias || router->softmax_topk))
        fprintf(f, "  router logits%s%s\n", router->bias ? " + bias" : "",
                router->softmax_topk ? "; weights: softmax over the chosen experts' logits" : "");
    const moe_attn_desc *a = &m->layers[0].attn;   /* the attention's options, as layer 0 has them */
    if (a->q_norm || a->bq || a->bk || a->bv || a->bo)
        fprintf(f, "  attention (layer 0): q/k norm %s, biases%s%s%s%s\n",
                !a->q_norm ? "none" : a->qk_norm_full ? "over the whole row" : "per head", a->bq ? " q" : "",
                a->bk ? " k" : "", a->bv ? " v" : "", a->bo ? " output" : (a->bq || a->bk || a->bv) ? "" : " none");
    if (a->sinks) fprintf(f, "  attention sinks: one learned logit per query head in the softmax denominator\n");
    for (int il = 0; il < hp->n_layer; il++)
        if (!m->layers[il].dense) {
            const moe_moe_desc *x = &m->layers[il].moe;
            if (x->act == MOE_ACT_SWIGLU_CLAMP || x->b_gate_exps || x->b_up_exps || x->b_down_exps)
                fprintf(f, "  experts: %s%s\n", x->act == MOE_ACT_SWIGLU_CLAMP ? "clamped SwiGLU (limit 7, alpha 1.702)" : "SwiGLU",
                        x->b_gate_exps || x->b_up_exps || x->b_down_exps ? ", with biases" : "");
            break;
        }
    for (int il = 0; il < hp->n_layer; il++)
        if (!m->layers[il].dense && m->layers[il].moe.shared_gate.data) {
            fprintf(f, "  shared expert gated by sigmoid(ffn_gate_inp_shexp . h)\n");
            break;
        }
}

/* KV cache bytes per cached position (all layers, as a session allocates
 * them) in each cache format; the ones the head sizes or the latent cache
 * rule out say n/a (context.c refuses them). */
static void print_kv_bytes(const moe_model *m, FILE *f) {
    const moe_hparams *hp = &m->hp;
    bool v_rows = false;
    for (int il = 0; il < hp->n_layer; il++) v_rows |= !m->layers[il].attn.v_from_k;
    const double heads = (double)hp->n_layer * hp->n_head_kv, D = hp->head_dim, Dv = v_rows ? hp->head_dim_v : 0;
    fprintf(f, "  KV cache bytes per token: FP32 %.0f, kv_f16 %.0f", heads * (D + Dv) * 4, heads * (D + Dv) * 2);
    if (v_rows && hp->head_dim % 32 == 0 && hp->head_dim_v % 32 == 0) fprintf(f, ", kv_q8 %.0f", heads * (D + Dv) * 34 / 32);
    else fprintf(f, ", kv_q8 n/a");
    for (int kb = 5; kb >= 4; kb--) {
        const char *name = kb == 5 ? "kv_tq" : "kv_tq_small";
        if (v_rows && moe_tq_dim_ok(hp->head_dim) && moe_tq_dim_ok(hp->head_dim_v))
            fprintf(f, ", %s %.0f", name,
                    heads * (double)(moe_tq_row_bytes(hp->head_dim, kb) + moe_tq_row_bytes(hp->head_dim_v, kb - 1)));
        else fprintf(f, ", %s n/a", name);
    }
    fprintf(f, "\n");
}

int moe_model_print_info(const moe_model *m, void *file) {
    FILE *f = file ? (FILE *)file : stdout;
    if (!m) return MOE_EINVAL;
    const gguf_file *gf = m->gf;
    fprintf(f, "file:          %s\n", m->path);
    fprintf(f, "gguf:          version %u, %llu tensors, %llu metadata keys, alignment %llu, %llu bytes\n",
            gf->version, (unsigned long long)gf->n_tensors, (unsigned long long)gf->n_kv,
            (unsigned long long)gf->alignment, (unsigned long long)gf->size);
    if (gf->n_parts) {
        uint64_t all = gf->size;
        for (uint32_t p = 0; p < gf->n_parts; p++) all += gf->parts[p]->size;
        fprintf(f, "split:         %u files (gguf-split), %llu bytes in all; tensors above are all files'\n", gf->n_parts + 1,
                (unsigned long long)all);
    }
    fprintf(f, "architecture:  %s\n", m->arch_name);
    fprintf(f, "kernels:       %s\n", moe_model_kernels(m));
    fprintf(f, "isa levels:    %s\n", moe_isa_support());
    char fl[256];
    moe_model_flags(m, fl, sizeof fl);
    fprintf(f, "flags:         %s\n", fl);
    if (!m->vocab_only) {
        const moe_hparams *hp = &m->hp;
        fprintf(f, "\nhyperparameters:\n");
        fprintf(f, "  layers %d, embedding %d, vocab %d, context (trained) %d\n", hp->n_layer, hp->n_embd,
                hp->n_vocab, hp->n_ctx_train);
        print_layers(m, f);
        fprintf(f, "  weight bytes read per decoded token: %llu (%.2f MB)\n", (unsigned long long)m->bytes_per_token,
                (double)m->bytes_per_token / 1e6);
        print_kv_bytes(m, f);
        for (int i = 0; i < m->n_notes; i++) fprintf(f, "  note: %s\n", m->notes[i]);
    }
    fprintf(f, "\nmetadata:\n");
    char vb[128];
    for (uint64_t i = 0; i < gf->n_kv; i++)
        fprintf(f, "  %-48s %-7s %s\n", gf->kv[i].key, gguf_vtype_name(gf->kv[i].type), vtype_value(&gf->kv[i], vb, sizeof vb));
    fprintf(f, "\ntensors:\n  %-36s %-6s %-24s %12s\n", "name", "type", "shape", "bytes");
    uint64_t total = 0;
    for (uint64_t i = 0; i < gf->n_tensors; i++) {
        const gguf_tensor *t = &gf->tensors[i];
        char sh[96];
        moe_shape_str(t->ne, (int)(t->n_dims ? t->n_dims : 1), sh, sizeof sh);
        const moe_type_info *ti = moe_type_get(t->type);
        fprintf(f, "  %-36s %-6s %-24s %12llu\n", t->name, ti && ti->name ? ti->name : "?", sh,
                (unsigned long long)t->nbytes);
        total += t->nbytes;
    }
    fprintf(f, "  total tensor bytes: %llu (%.2f MB)\n", (unsigned long long)total, (double)total / 1e6);
    return MOE_OK;
}
