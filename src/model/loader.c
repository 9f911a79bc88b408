/* loader.c — moe_model_load: maps the GGUF, binds the architecture's
 * hyperparameters and tensors (checking every shape), loads the tokenizer,
 * and answers the public model queries (info, bytes per token, ...). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/flags.h"
#include "model/model.h"
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

static void shape_str(const int64_t *ne, int n, char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    o += (size_t)snprintf(buf + o, len - o, "[");
    for (int i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (o < len) snprintf(buf + o, len - o, "]");
}

int moe_bind_weight(moe_model *m, moe_weight *w, const char *name, int64_t n_in, int64_t n_out,
                    int64_t n_mat, bool required, char *err, size_t errlen) {
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
        shape_str(t->ne, (int)(t->n_dims ? t->n_dims : 1), a, sizeof a);
        shape_str(want, want_dims, b, sizeof b);
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: tensor '%s' has shape %s, expected %s",
                        m->path, name, a, b);
    }
    const moe_type_info *ti = moe_type_get(t->type);
    if (!ti || !ti->supported)
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: tensor '%s' has type %s, which moefast cannot compute with",
                        m->path, name, ti && ti->name ? ti->name : "unknown");
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
    /* Second-level scale: "<base>.scale" next to "<base>.weight". */
    size_t nl = strlen(name);
    if (nl > 7 && !strcmp(name + nl - 7, ".weight")) {
        char sname[256];
        snprintf(sname, sizeof sname, "%.*s.scale", (int)(nl - 7), name);
        const gguf_tensor *st = gguf_find_tensor(m->gf, sname);
        if (st) {
            int64_t ns = st->ne[0] * st->ne[1] * st->ne[2] * st->ne[3];
            if (st->type != MOE_T_F32 || !(ns == 1 || ns == w->n_mat))
                return moe_errf(err, errlen, MOE_EFORMAT,
                                "%s: tensor '%s' must be F32 with 1 or %lld values (has %lld values of type %u)",
                                m->path, sname, (long long)w->n_mat, (long long)ns, st->type);
            w->scale = (const float *)st->data;
            w->n_scale = ns;
        }
    }
    return MOE_OK;
}

int moe_bind_vector(moe_model *m, const float **out, const char *name, int64_t n, bool required,
                    char *err, size_t errlen) {
    *out = NULL;
    const gguf_tensor *t = gguf_find_tensor(m->gf, name);
    if (!t) {
        if (!required) return 1;
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing tensor '%s' (%s)", m->path, name, m->arch_name);
    }
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1) {
        char a[96];
        shape_str(t->ne, (int)(t->n_dims ? t->n_dims : 1), a, sizeof a);
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: tensor '%s' has shape %s, expected [%lld]",
                        m->path, name, a, (long long)n);
    }
    if (t->type == MOE_T_F32) {
        *out = (const float *)t->data;
        return MOE_OK;
    }
    const moe_type_info *ti = moe_type_get(t->type);
    if (!ti || !ti->supported || n % ti->block)
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: vector tensor '%s' has unsupported type %s",
                        m->path, name, ti && ti->name ? ti->name : "unknown");
    if (m->owned_used + (size_t)n > m->owned_cap)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: too many non-F32 vector tensors ('%s')", m->path, name);
    float *dst = m->owned_vectors + m->owned_used;
    moe_dequant_row(t->type, t->data, dst, n);
    m->owned_used += (size_t)n;
    *out = dst;
    return MOE_OK;
}

int moe_get_u32_def(moe_model *m, const char *key, uint32_t def, uint32_t *out, bool required,
                    char *err, size_t errlen) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", m->arch_name, key);
    *out = def;
    int rc = gguf_get_u32(m->gf, full, out, err, errlen);
    if (rc < 0) return rc;
    if (rc == 1) {
        if (required)
            return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing required key '%s'", m->path, full);
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

/* Weight bytes one decoded token reads: every dense matrix, the selected
 * experts' matrices, one embedding row, norm vectors are negligible. */
static uint64_t weight_bytes(const moe_weight *w) { return w->data ? (uint64_t)w->mat_bytes * (uint64_t)w->n_mat : 0; }
static uint64_t expert_bytes(const moe_weight *w) { return w->data ? (uint64_t)w->mat_bytes : 0; }

static void compute_bytes_per_token(moe_model *m) {
    const moe_hparams *hp = &m->hp;
    uint64_t b = m->tok_embd.row_bytes + weight_bytes(&m->output);
    for (int il = 0; il < hp->n_layer; il++) {
        const moe_layer *L = &m->layers[il];
        b += weight_bytes(&L->wq) + weight_bytes(&L->wk) + weight_bytes(&L->wv) + weight_bytes(&L->wo);
        b += weight_bytes(&L->wgate);
        if (L->dense) {
            b += weight_bytes(&L->ffn_gate) + weight_bytes(&L->ffn_up) + weight_bytes(&L->ffn_down);
        } else {
            b += weight_bytes(&L->router);
            b += (uint64_t)hp->n_expert_used *
                 (expert_bytes(&L->gate_exps) + expert_bytes(&L->up_exps) + expert_bytes(&L->down_exps));
            b += weight_bytes(&L->gate_sh) + weight_bytes(&L->up_sh) + weight_bytes(&L->down_sh);
        }
    }
    m->bytes_per_token = b;
}

/* Every matrix the forward pass multiplies with (not the embedding, which is
 * read row by row; not the lm head when it is tied to the embedding). */
static int collect_weights(moe_model *m, moe_weight **out) {
    int n = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        moe_layer *L = &m->layers[il];
        moe_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wgate, &L->ffn_gate, &L->ffn_up, &L->ffn_down,
                            &L->router, &L->gate_exps, &L->up_exps, &L->down_exps, &L->gate_sh, &L->up_sh, &L->down_sh};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            if (ws[i]->data) { if (out) out[n] = ws[i]; n++; }
    }
    if (m->output.data != m->tok_embd.data) { if (out) out[n] = &m->output; n++; }
    return n;
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
            if (u >= b && u < e) {
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
    int nw = collect_weights(m, NULL);
    moe_weight **ws = malloc((size_t)(nw ? nw : 1) * sizeof *ws);
    char *layout = malloc((size_t)(nw ? nw : 1));
    if (!ws || !layout) { free(ws); free(layout); return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", m->path); }
    collect_weights(m, ws);
    size_t total = 0;
    for (int i = 0; i < nw; i++) {
        layout[i] = load_layout(m, ws[i]);
        if (layout[i]) total += (ws[i]->mat_bytes * (size_t)ws[i]->n_mat + 63) & ~(size_t)63;
    }
    if (total == 0) { free(ws); free(layout); return MOE_OK; }
    void *arena = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (arena == MAP_FAILED) {
        free(ws); free(layout);
        return moe_errf(err, errlen, MOE_ENOMEM, "%s: cannot map %zu bytes for repacked weights (try --flags=-repack)",
                        m->path, total);
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(arena, total, MADV_HUGEPAGE); /* fewer TLB misses while streaming; advisory */
#endif
    /* assign destinations, then repack all (weight, matrix) units in parallel */
    repack_job rj = {ws, nw, NULL, layout, 0, (uintptr_t)sysconf(_SC_PAGESIZE)};
    rj.dst = malloc((size_t)nw * sizeof *rj.dst);
    if (!rj.dst) {
        munmap(arena, total); free(ws); free(layout);
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
    m->repacked = arena;
    m->repacked_bytes = total;
    return MOE_OK;
}

static int count_vector_capacity(const gguf_file *gf) {
    /* Upper bound for norm vectors that need conversion to F32. */
    uint64_t n = 0;
    for (uint64_t i = 0; i < gf->n_tensors; i++)
        if (gf->tensors[i].type != MOE_T_F32 && gf->tensors[i].n_dims == 1) n += (uint64_t)gf->tensors[i].ne[0];
    return n > (1u << 30) ? -1 : (int)n;
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
    if (arch.len == 6 && !memcmp(arch.ptr, "laguna", 6)) {
        m->arch = MOE_ARCH_LAGUNA;
        m->arch_name = "laguna";
    } else if (arch.len == 8 && !memcmp(arch.ptr, "qwen3moe", 8)) {
        m->arch = MOE_ARCH_QWEN3MOE;
        m->arch_name = "qwen3moe";
    } else {
        rc = moe_errf(err, errlen, MOE_EUNSUPPORTED,
                      "%s: general.architecture '%.*s' is not supported (supported: laguna, qwen3moe)",
                      path, (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
        goto fail;
    }
    int cap = count_vector_capacity(m->gf);
    if (cap < 0) { rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: absurd vector tensor sizes", path); goto fail; }
    if (cap > 0) {
        m->owned_vectors = malloc((size_t)cap * sizeof(float));
        if (!m->owned_vectors) { rc = moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path); goto fail; }
        m->owned_cap = (size_t)cap;
    }
    rc = m->arch == MOE_ARCH_LAGUNA ? moe_bind_laguna(m, err, errlen) : moe_bind_qwen3moe(m, err, errlen);
    if (rc) goto fail;
    if (m->tok && moe_tokenizer_n_vocab(m->tok) > m->hp.n_vocab) {
        rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: tokenizer has %d tokens but the embedding has %d rows",
                      path, moe_tokenizer_n_vocab(m->tok), m->hp.n_vocab);
        goto fail;
    }
    compute_bytes_per_token(m);
    if ((moe_flag_on(m->flags, MOE_FLAG_REPACK) || moe_flag_on(m->flags, MOE_FLAG_ACT_Q8)) &&
        (rc = repack_weights(m, err, errlen)))
        goto fail;
    if (moe_flag_on(m->flags, MOE_FLAG_READAHEAD) && !m->repacked && m->gf->size > m->gf->data_offset) {
        /* Start paging the weights in now (asynchronously) instead of one
         * fault at a time during the first forward; advisory only. */
        uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        uintptr_t b = ((uintptr_t)m->gf->map + m->gf->data_offset) & ~(page - 1);
        uintptr_t e = (uintptr_t)m->gf->map + m->gf->size;
        (void)madvise((void *)b, e - b, MADV_WILLNEED);
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
    free(m->owned_vectors);
    free(m->chat_template);
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
    if (!m->sha256[0] && moe_sha256_file(m->path, m->sha256) != MOE_OK)
        moe_sha256_hex(m->gf->map, (size_t)m->gf->size, m->sha256);
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

int moe_model_print_info(const moe_model *m, void *file) {
    FILE *f = file ? (FILE *)file : stdout;
    if (!m) return MOE_EINVAL;
    const gguf_file *gf = m->gf;
    fprintf(f, "file:          %s\n", m->path);
    fprintf(f, "gguf:          version %u, %llu tensors, %llu metadata keys, alignment %llu, %llu bytes\n",
            gf->version, (unsigned long long)gf->n_tensors, (unsigned long long)gf->n_kv,
            (unsigned long long)gf->alignment, (unsigned long long)gf->size);
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
        fprintf(f, "  query heads per layer:");
        for (int il = 0; il < hp->n_layer; il++) fprintf(f, " %d%s", m->layers[il].n_head, m->layers[il].swa ? "s" : "");
        fprintf(f, "  (s = sliding window)\n");
        fprintf(f, "  kv heads %d, head dim %d (v %d), rms eps %g\n", hp->n_head_kv, hp->head_dim, hp->head_dim_v,
                (double)hp->rms_eps);
        if (hp->swa_window > 0)
            fprintf(f, "  sliding window %d, full attention every %d layers from 0\n", hp->swa_window, hp->swa_pattern);
        const moe_rope *r = &hp->rope_full;
        fprintf(f, "  rope (full layers): base %g, %d rotated dims%s", (double)r->base, r->n_rot, r->yarn ? ", YaRN" : "");
        if (r->yarn)
            fprintf(f, " factor %g, original context %d, beta_fast %g, beta_slow %g", (double)r->yarn_factor,
                    r->yarn_orig_ctx, (double)r->yarn_beta_fast, (double)r->yarn_beta_slow);
        fprintf(f, "\n");
        if (hp->swa_window > 0)
            fprintf(f, "  rope (sliding layers): base %g, %d rotated dims\n", (double)hp->rope_swa.base, hp->rope_swa.n_rot);
        fprintf(f, "  experts %d, used %d, expert FFN %d, shared expert FFN %d, dense FFN %d, leading dense layers %d\n",
                hp->n_expert, hp->n_expert_used, hp->n_ff_exp, hp->n_ff_shexp, hp->n_ff, hp->n_dense_lead);
        fprintf(f, "  router: %s, weights %s, scale %g\n", hp->gating_func == 2 ? "sigmoid" : "softmax",
                hp->expert_weights_norm ? "renormalised" : "not renormalised", (double)hp->expert_weights_scale);
        fprintf(f, "  weight bytes read per decoded token: %llu (%.2f MB)\n", (unsigned long long)m->bytes_per_token,
                (double)m->bytes_per_token / 1e6);
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
        shape_str(t->ne, (int)(t->n_dims ? t->n_dims : 1), sh, sizeof sh);
        const moe_type_info *ti = moe_type_get(t->type);
        fprintf(f, "  %-36s %-6s %-24s %12llu\n", t->name, ti && ti->name ? ti->name : "?", sh,
                (unsigned long long)t->nbytes);
        total += t->nbytes;
    }
    fprintf(f, "  total tensor bytes: %llu (%.2f MB)\n", (unsigned long long)total, (double)total / 1e6);
    return MOE_OK;
}

/* ---- binding helpers shared by the architectures ----------------------------- */

int moe_read_rope(moe_model *m, moe_rope *r, const char *base_key, float base_def, const char *dims_key,
                  int dims_def, bool allow_scaling, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    uint32_t nrot;
    int rc = moe_get_f32_def(m, base_key, base_def, &r->base, err, errlen);
    if (!rc) rc = moe_get_u32_def(m, dims_key, (uint32_t)dims_def, &nrot, false, err, errlen);
    if (rc) return rc;
    if (nrot == 0 || nrot > (uint32_t)m->hp.head_dim || nrot % 2)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s.%s = %u must be even and in 2..%d", m->path,
                        m->arch_name, dims_key, nrot, m->hp.head_dim);
    if (!(r->base > 0)) return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s.%s must be > 0", m->path, m->arch_name, base_key);
    r->n_rot = (int)nrot;
    r->attn_factor = 1.0f;
    if (!allow_scaling) return MOE_OK;
    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    gguf_str st = {0};
    rc = gguf_get_str(m->gf, key, &st, err, errlen);
    if (rc < 0) return rc;
    if (rc == 1 || (st.len == 4 && !memcmp(st.ptr, "none", 4))) return MOE_OK;
    if (!(st.len == 4 && !memcmp(st.ptr, "yarn", 4)))
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "%s: %s = '%.*s' is not supported (none, yarn)", m->path, key,
                        (int)(st.len > 32 ? 32 : st.len), st.ptr);
    r->yarn = true;
    r->yarn_ext_factor = 1.0f;
    uint32_t orig;
    rc = moe_get_f32_def(m, "rope.scaling.factor", 1.0f, &r->yarn_factor, err, errlen);
    if (!rc) rc = moe_get_u32_def(m, "rope.scaling.original_context_length", (uint32_t)m->hp.n_ctx_train, &orig, false, err, errlen);
    if (!rc) rc = moe_get_f32_def(m, "rope.scaling.yarn_beta_fast", 32.0f, &r->yarn_beta_fast, err, errlen);
    if (!rc) rc = moe_get_f32_def(m, "rope.scaling.yarn_beta_slow", 1.0f, &r->yarn_beta_slow, err, errlen);
    if (rc) return rc;
    if (!(r->yarn_factor >= 1.0f) || orig == 0)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: YaRN needs rope.scaling.factor >= 1 and original_context_length > 0", m->path);
    r->yarn_orig_ctx = (int)orig;
    return MOE_OK;
}

int moe_bind_attention(moe_model *m, int il, char *err, size_t errlen) {
    moe_layer *L = &m->layers[il];
    const moe_hparams *hp = &m->hp;
    char n[128];
    int rc;
#define T(suffix) (snprintf(n, sizeof n, "blk.%d.%s", il, suffix), n)
    if ((rc = moe_bind_vector(m, &L->attn_norm, T("attn_norm.weight"), hp->n_embd, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &L->wq, T("attn_q.weight"), hp->n_embd, (int64_t)L->n_head * hp->head_dim, 0, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &L->wk, T("attn_k.weight"), hp->n_embd, (int64_t)hp->n_head_kv * hp->head_dim, 0, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &L->wv, T("attn_v.weight"), hp->n_embd, (int64_t)hp->n_head_kv * hp->head_dim_v, 0, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &L->wo, T("attn_output.weight"), (int64_t)L->n_head * hp->head_dim_v, hp->n_embd, 0, true, err, errlen))) return rc;
    if ((rc = moe_bind_vector(m, &L->q_norm, T("attn_q_norm.weight"), hp->head_dim, false, err, errlen)) < 0) return rc;
    if ((rc = moe_bind_vector(m, &L->k_norm, T("attn_k_norm.weight"), hp->head_dim, false, err, errlen)) < 0) return rc;
    if ((rc = moe_bind_vector(m, &L->ffn_norm, T("ffn_norm.weight"), hp->n_embd, true, err, errlen))) return rc;
#undef T
    return MOE_OK;
}

int moe_bind_ffn(moe_model *m, int il, char *err, size_t errlen) {
    moe_layer *L = &m->layers[il];
    const moe_hparams *hp = &m->hp;
    char n[128];
    int rc;
#define T(suffix) (snprintf(n, sizeof n, "blk.%d.%s", il, suffix), n)
    if (L->dense) {
        if ((rc = moe_bind_weight(m, &L->ffn_gate, T("ffn_gate.weight"), hp->n_embd, hp->n_ff, 0, true, err, errlen))) return rc;
        if ((rc = moe_bind_weight(m, &L->ffn_up, T("ffn_up.weight"), hp->n_embd, hp->n_ff, 0, true, err, errlen))) return rc;
        if ((rc = moe_bind_weight(m, &L->ffn_down, T("ffn_down.weight"), hp->n_ff, hp->n_embd, 0, true, err, errlen))) return rc;
        return MOE_OK;
    }
    if ((rc = moe_bind_weight(m, &L->router, T("ffn_gate_inp.weight"), hp->n_embd, hp->n_expert, 0, true, err, errlen))) return rc;
    if ((rc = moe_bind_vector(m, &L->exp_bias, T("exp_probs_b.bias"), hp->n_expert, false, err, errlen)) < 0) return rc;
    if ((rc = moe_bind_weight(m, &L->gate_exps, T("ffn_gate_exps.weight"), hp->n_embd, hp->n_ff_exp, hp->n_expert, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &L->up_exps, T("ffn_up_exps.weight"), hp->n_embd, hp->n_ff_exp, hp->n_expert, true, err, errlen))) return rc;
    if ((rc = moe_bind_weight(m, &L->down_exps, T("ffn_down_exps.weight"), hp->n_ff_exp, hp->n_embd, hp->n_expert, true, err, errlen))) return rc;
    if (hp->n_ff_shexp > 0) {
        L->has_shexp = true;
        if ((rc = moe_bind_weight(m, &L->gate_sh, T("ffn_gate_shexp.weight"), hp->n_embd, hp->n_ff_shexp, 0, true, err, errlen))) return rc;
        if ((rc = moe_bind_weight(m, &L->up_sh, T("ffn_up_shexp.weight"), hp->n_embd, hp->n_ff_shexp, 0, true, err, errlen))) return rc;
        if ((rc = moe_bind_weight(m, &L->down_sh, T("ffn_down_shexp.weight"), hp->n_ff_shexp, hp->n_embd, 0, true, err, errlen))) return rc;
    }
#undef T
    return MOE_OK;
}

/* Embedding, final norm and lm head (tied to the embedding when output.weight is absent). */
int moe_bind_io(moe_model *m, char *err, size_t errlen) {
    moe_hparams *hp = &m->hp;
    const gguf_tensor *te = gguf_find_tensor(m->gf, "token_embd.weight");
    if (!te) return moe_errf(err, errlen, MOE_EFORMAT, "%s: missing tensor 'token_embd.weight'", m->path);
    if (hp->n_vocab <= 0) hp->n_vocab = (int)te->ne[1];
    int rc = moe_bind_weight(m, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, 0, true, err, errlen);
    if (rc) return rc;
    if ((rc = moe_bind_vector(m, &m->output_norm, "output_norm.weight", hp->n_embd, true, err, errlen))) return rc;
    rc = moe_bind_weight(m, &m->output, "output.weight", hp->n_embd, hp->n_vocab, 0, false, err, errlen);
    if (rc < 0) return rc;
    if (rc == 1) {
        m->output = m->tok_embd;
        moe_note(m, "output.weight absent: lm head tied to token_embd.weight");
    }
    return MOE_OK;
}

/* The keys every MoE architecture here carries, under "<arch>.". */
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
        {"expert_feed_forward_length", 0, true, &hp->n_ff_exp},
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
    return moe_get_f32_def(m, "attention.layer_norm_rms_epsilon", 1e-6f, &hp->rms_eps, err, errlen);
}

/* Checks common to every architecture once the hyperparameters are read. */
int moe_check_hparams(moe_model *m, char *err, size_t errlen) {
    const moe_hparams *hp = &m->hp;
#define NEED(cond, what) do { if (!(cond)) return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s: %s", m->path, m->arch_name, what); } while (0)
    NEED(hp->n_layer >= 1 && hp->n_layer <= 4096, "block_count out of range 1..4096");
    NEED(hp->n_embd >= 1 && hp->n_embd <= (1 << 20), "embedding_length out of range");
    NEED(hp->n_head_kv >= 1 && hp->n_head_kv <= 4096, "attention.head_count_kv out of range");
    NEED(hp->head_dim >= 2 && hp->head_dim <= 4096 && hp->head_dim % 2 == 0, "attention.key_length must be even, 2..4096");
    NEED(hp->head_dim_v >= 1 && hp->head_dim_v <= 4096, "attention.value_length out of range");
    NEED(hp->rms_eps > 0 && hp->rms_eps < 1, "attention.layer_norm_rms_epsilon out of range");
    NEED(hp->n_expert >= 1 && hp->n_expert <= 4096, "expert_count out of range 1..4096");
    NEED(hp->n_expert_used >= 1 && hp->n_expert_used <= hp->n_expert, "expert_used_count must be 1..expert_count");
    NEED(hp->n_ff_exp >= 1, "expert_feed_forward_length must be >= 1");
    NEED(hp->n_ctx_train >= 1, "context_length must be >= 1");
    for (int il = 0; il < hp->n_layer; il++) {
        int h = m->layers[il].n_head;
        if (h < 1 || h > 4096 || h % hp->n_head_kv)
            return moe_errf(err, errlen, MOE_EFORMAT, "%s: layer %d has %d query heads, not a positive multiple of %d KV heads",
                            m->path, il, h, hp->n_head_kv);
    }
#undef NEED
    return MOE_OK;
}
