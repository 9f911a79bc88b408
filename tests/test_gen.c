/* test_gen.c — the model generator and `quantize`:
 * determinism, strict GGUF v3 layout (checked by an independent parser here
 * and by gguf_open), read/re-emit round trip, key and tensor tables equal to
 * the shared oracle files, overrides and their errors, the vocabulary's
 * merges, weight statistics, and quantize F32 -> Q8_0 against the shared
 * Q8_0 file. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "base/util.h"

static char tmpdir[256];

static const char *tpath(const char *name) {
    static char buf[8][512];
    static int k = 0;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/%s", tmpdir, name);
    return p;
}

static bool exists(const char *p) { struct stat st; return stat(p, &st) == 0; }

static int gen(const char *arch, const char *preset, const char *const *ov, const char *out, char *err) {
    return moe_gen_model(arch, preset, ov, out, err, MOE_ERR_LEN);
}

/* ---- an independent strict GGUF v3 walk (what llama.cpp's gguf_init checks):
 * magic, version 3, kv types valid, no nested arrays, strings within the file,
 * tensor dims >= 1, known types, row sizes whole blocks, offsets aligned and
 * non-overlapping, data section aligned, file ends at the last tensor's end. */
typedef struct { const uint8_t *p, *end; bool ok; } cur;
static uint64_t rdn(cur *c, size_t n) {
    uint64_t v = 0;
    if (!c->ok || (size_t)(c->end - c->p) < n) { c->ok = false; return 0; }
    memcpy(&v, c->p, n);
    c->p += n;
    return v;
}
static void skip_str(cur *c) {
    uint64_t n = rdn(c, 8);
    if (!c->ok || n > (uint64_t)(c->end - c->p)) { c->ok = false; return; }
    c->p += n;
}
static const size_t VSIZE[13] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
static bool strict_gguf(const char *path, uint32_t *alignment_out) {
    size_t n;
    uint8_t *b = check_read_file(path, &n);
    if (!b) return false;
    cur c = {b, b + n, true};
    bool ok = rdn(&c, 4) == 0x46554747u && rdn(&c, 4) == 3;
    uint64_t nt = rdn(&c, 8), nkv = rdn(&c, 8);
    uint32_t align = 32;
    for (uint64_t i = 0; i < nkv && ok && c.ok; i++) {
        uint64_t kl = rdn(&c, 8);
        const uint8_t *key = c.p;
        if (!c.ok || kl > (uint64_t)(c.end - c.p)) { ok = false; break; }
        c.p += kl;
        uint32_t t = (uint32_t)rdn(&c, 4);
        if (t > 12) { ok = false; break; }
        if (t == 8) { skip_str(&c); continue; }
        if (t == 9) {
            uint32_t et = (uint32_t)rdn(&c, 4);
            uint64_t cnt = rdn(&c, 8);
            if (et > 12 || et == 9) { ok = false; break; }
            for (uint64_t j = 0; j < cnt && c.ok; j++) {
                if (et == 8) skip_str(&c);
                else rdn(&c, VSIZE[et]);
            }
            continue;
        }
        uint64_t v = rdn(&c, VSIZE[t]);
        if (kl == 17 && !memcmp(key, "general.alignment", 17)) {
            if (t != 4 || !v || (v & (v - 1))) ok = false;
            align = (uint32_t)v;
        }
        if (t == 7 && v > 1) ok = false;
    }
    uint64_t expect_off = 0;
    for (uint64_t i = 0; i < nt && ok && c.ok; i++) {
        skip_str(&c);
        uint32_t nd = (uint32_t)rdn(&c, 4);
        if (nd < 1 || nd > 4) { ok = false; break; }
        uint64_t ne[4] = {1, 1, 1, 1}, cnt = 1;
        for (uint32_t d = 0; d < nd; d++) { ne[d] = rdn(&c, 8); cnt *= ne[d]; }
        uint32_t t = (uint32_t)rdn(&c, 4);
        uint64_t off = rdn(&c, 8);
        const moe_type_info *ti = moe_type_get(t);
        if (!ti || ne[0] % ti->block || off % align || off != expect_off) { ok = false; break; }
        uint64_t nb = cnt / ti->block * ti->block_bytes;
        expect_off = (off + nb + align - 1) / align * align;
        if (i + 1 == nt) expect_off = off + nb;
    }
    uint64_t hdr = (uint64_t)(c.p - b), data = (hdr + align - 1) / align * align;
    ok = ok && c.ok && data + expect_off <= n && n - (data + expect_off) < align;
    free(b);
    if (alignment_out) *alignment_out = align;
    return ok;
}

/* ---- helpers over gguf_file ---------------------------------------------------- */

static uint64_t kv_u(const gguf_file *f, const char *key, uint32_t want_type) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    CHECK_MSG(kv != NULL, "missing key %s", key);
    if (!kv) return UINT64_MAX;
    CHECK_MSG(kv->type == want_type, "key %s has type %u, want %u", key, kv->type, want_type);
    return kv->v.u;
}

static bool kv_equal(const gguf_kv *a, const gguf_kv *b) {
    if (a->type != b->type) return false;
    switch (a->type) {
    case GGUF_STRING: return a->v.s.len == b->v.s.len && !memcmp(a->v.s.ptr, b->v.s.ptr, a->v.s.len);
    case GGUF_F32: case GGUF_F64: return a->v.f == b->v.f;
    case GGUF_ARRAY:
        if (a->v.arr.type != b->v.arr.type || a->v.arr.n != b->v.arr.n) return false;
        if (a->v.arr.type == GGUF_STRING) {
            for (uint64_t i = 0; i < a->v.arr.n; i++)
                if (a->v.arr.strs[i].len != b->v.arr.strs[i].len ||
                    memcmp(a->v.arr.strs[i].ptr, b->v.arr.strs[i].ptr, a->v.arr.strs[i].len))
                    return false;
            return true;
        }
        return !memcmp(a->v.arr.data, b->v.arr.data, a->v.arr.n * VSIZE[a->v.arr.type]);
    default: return a->v.u == b->v.u;
    }
}

/* Our tiny file vs the oracle's: same keys in the same order with the same
 * types; equal values except general.name and the tokenizer arrays; same
 * tensors (names, order, shapes, types). */
static void compare_with_oracle(const char *ours, const char *oracle) {
    char err[MOE_ERR_LEN];
    gguf_file *a = NULL, *b = NULL;
    int ra = gguf_open(ours, &a, err, sizeof err);
    CHECK_MSG(ra == 0, "%s", err);
    int rb = gguf_open(oracle, &b, err, sizeof err);
    CHECK_MSG(rb == 0, "%s", err);
    if (ra || rb) { gguf_close(a); gguf_close(b); return; }
    CHECK_EQ_INT(a->n_kv, b->n_kv);
    for (uint64_t i = 0; i < a->n_kv && i < b->n_kv; i++) {
        const gguf_kv *x = &a->kv[i], *y = &b->kv[i];
        CHECK_MSG(!strcmp(x->key, y->key), "kv %llu: %s vs oracle %s", (unsigned long long)i, x->key, y->key);
        CHECK_MSG(x->type == y->type, "key %s: type %u vs oracle %u", x->key, x->type, y->type);
        bool vocab_dep = !strcmp(x->key, "tokenizer.ggml.tokens") || !strcmp(x->key, "tokenizer.ggml.merges") ||
                         !strcmp(x->key, "tokenizer.ggml.token_type") || !strcmp(x->key, "general.name");
        if (!vocab_dep) CHECK_MSG(kv_equal(x, y), "key %s: value differs from the oracle", x->key);
    }
    CHECK_EQ_INT(a->n_tensors, b->n_tensors);
    for (uint64_t i = 0; i < a->n_tensors && i < b->n_tensors; i++) {
        const gguf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        CHECK_MSG(!strcmp(x->name, y->name), "tensor %llu: %s vs oracle %s", (unsigned long long)i, x->name, y->name);
        CHECK_MSG(x->n_dims == y->n_dims && !memcmp(x->ne, y->ne, sizeof x->ne) && x->type == y->type,
                  "tensor %s: shape/type differ from the oracle", x->name);
        CHECK_EQ_INT(x->offset, y->offset);
    }
    CHECK_EQ_INT(a->data_offset + a->tensors[a->n_tensors - 1].offset, a->size - a->tensors[a->n_tensors - 1].nbytes);
    gguf_close(a);
    gguf_close(b);
}

/* Read a file and re-emit every kv and tensor: the bytes must be identical. */
static void round_trip(const char *path, const char *copy) {
    char err[MOE_ERR_LEN];
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f, err, sizeof err);
    CHECK_MSG(rc == 0, "%s", err);
    if (rc) return;
    gguf_writer *w = gguf_writer_new((uint32_t)f->alignment);
    for (uint64_t i = 0; i < f->n_kv; i++) CHECK_EQ_INT(gguf_w_kv(w, &f->kv[i]), 0);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        CHECK_EQ_INT(gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), 0);
    }
    rc = gguf_writer_write(w, copy, err, sizeof err);
    CHECK_MSG(rc == 0, "%s", err);
    gguf_writer_free(w);
    gguf_close(f);
    CHECK_MSG(check_same_file(path, copy), "re-emitted %s differs", path);
    unlink(copy);
}

static double tensor_rms(const gguf_tensor *t) {
    int64_t n = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    float *row = malloc((size_t)n * sizeof *row);
    double s = 0;
    uint64_t rb = moe_row_bytes(t->type, (uint64_t)n);
    for (int64_t r = 0; r < rows; r++) {
        moe_dequant_row(t->type, t->data + (uint64_t)r * rb, row, n);
        for (int64_t i = 0; i < n; i++) s += (double)row[i] * row[i];
    }
    free(row);
    return sqrt(s / (double)(n * rows));
}

static void check_contents(const char *path, bool laguna) {
    char err[MOE_ERR_LEN];
    gguf_file *f = NULL;
    int rc = gguf_open(path, &f, err, sizeof err);
    CHECK_MSG(rc == 0, "%s", err);
    if (rc) return;
    const char *a = laguna ? "laguna" : "qwen3moe";
    char k[128];
    const gguf_kv *arch = gguf_find_kv(f, "general.architecture");
    CHECK(arch && arch->type == GGUF_STRING && arch->v.s.len == strlen(a) && !memcmp(arch->v.s.ptr, a, strlen(a)));
#define KU(s) (snprintf(k, sizeof k, "%s.%s", a, s), kv_u(f, k, GGUF_U32))
    CHECK_EQ_INT(KU("block_count"), 4);
    CHECK_EQ_INT(KU("embedding_length"), 256);
    CHECK_EQ_INT(KU("attention.head_count_kv"), 2);
    CHECK_EQ_INT(KU("attention.key_length"), 64);
    CHECK_EQ_INT(KU("expert_count"), laguna ? 16 : 8);
    CHECK_EQ_INT(KU("expert_used_count"), laguna ? 4 : 2);
    CHECK_EQ_INT(KU("expert_feed_forward_length"), laguna ? 64 : 128);
    if (laguna) {
        CHECK_EQ_INT(KU("attention.sliding_window"), 12);
        CHECK_EQ_INT(KU("leading_dense_block_count"), 1);
        CHECK_EQ_INT(KU("rope.dimension_count"), 32);
        CHECK_EQ_INT(KU("expert_gating_func"), 2);
        int32_t hc[8];
        size_t n = 0;
        CHECK_EQ_INT(gguf_get_i32_array(f, "laguna.attention.head_count", hc, 8, &n, err, sizeof err), 0);
        CHECK(n == 4 && hc[0] == 4 && hc[1] == 6 && hc[2] == 6 && hc[3] == 6);
        float sc = 0;
        CHECK_EQ_INT(gguf_get_f32(f, "laguna.expert_weights_scale", &sc, err, sizeof err), 0);
        CHECK(sc == 2.5f);
    } else {
        CHECK_EQ_INT(KU("attention.head_count"), 8);
    }
#undef KU
    CHECK_EQ_INT(kv_u(f, "tokenizer.ggml.bos_token_id", GGUF_U32), 997);
    CHECK_EQ_INT(kv_u(f, "tokenizer.ggml.eos_token_id", GGUF_U32), 999);
    CHECK_EQ_INT(kv_u(f, "tokenizer.ggml.add_bos_token", GGUF_BOOL), 0);

    /* vocabulary: 1000 unique tokens; every merge joins two tokens into one
     * that exists with a higher id; specials are CONTROL */
    const gguf_kv *tk = gguf_find_kv(f, "tokenizer.ggml.tokens"), *mg = gguf_find_kv(f, "tokenizer.ggml.merges");
    const gguf_kv *tt = gguf_find_kv(f, "tokenizer.ggml.token_type");
    CHECK(tk && mg && tt && tk->v.arr.n == 1000 && tt->v.arr.n == 1000 && mg->v.arr.n == 741);
    if (tk && mg && tt && tk->v.arr.n == 1000 && tt->v.arr.n == 1000) {
        int32_t ty[4]; /* (array data in the mapping need not be 4-aligned) */
        memcpy(ty, (const uint8_t *)tt->v.arr.data + 4 * 996, sizeof ty);
        CHECK(ty[0] == 1 && ty[1] == 3 && ty[2] == 3 && ty[3] == 3);
        CHECK(tk->v.arr.strs[999].len == 10 && !memcmp(tk->v.arr.strs[999].ptr, "<|im_end|>", 10));
        CHECK(tk->v.arr.strs[0].len == 1 && tk->v.arr.strs[0].ptr[0] == '!');
        int bad = 0;
        for (uint64_t m = 0; m < mg->v.arr.n; m++) {
            const gguf_str *s = &mg->v.arr.strs[m];
            const char *sp = memchr(s->ptr, ' ', s->len);
            if (!sp) { bad++; continue; }
            size_t ll = (size_t)(sp - s->ptr), lr = s->len - ll - 1;
            int il = -1, ir = -1, ic = -1;
            for (int i = 0; i < 997; i++) {
                const gguf_str *t = &tk->v.arr.strs[i];
                if (t->len == ll && !memcmp(t->ptr, s->ptr, ll)) il = i;
                if (t->len == lr && !memcmp(t->ptr, sp + 1, lr)) ir = i;
                if (t->len == ll + lr && !memcmp(t->ptr, s->ptr, ll) && !memcmp(t->ptr + ll, sp + 1, lr)) ic = i;
            }
            if (il < 0 || ir < 0 || ic != 256 + (int)m || il >= ic || ir >= ic) bad++;
        }
        CHECK_EQ_INT(bad, 0);
    }

    /* weight statistics: projections std ~1/sqrt(fan_in), lm head 1.6/sqrt(n_embd), norms 1 +- 0.1 */
    const gguf_tensor *q = gguf_find_tensor(f, "blk.1.attn_q.weight");
    const gguf_tensor *dn = gguf_find_tensor(f, "blk.1.ffn_down_exps.weight");
    const gguf_tensor *o = gguf_find_tensor(f, "output.weight");
    const gguf_tensor *nrm = gguf_find_tensor(f, "blk.1.attn_norm.weight");
    CHECK(q && dn && o && nrm);
    if (q && dn && o && nrm) {
        double rq = tensor_rms(q), rd = tensor_rms(dn), ro = tensor_rms(o);
        CHECK_MSG(fabs(rq * 16.0 - 1.0) < 0.1, "attn_q rms %g", rq);
        CHECK_MSG(fabs(rd * sqrt((double)dn->ne[0]) - 1.0) < 0.1, "ffn_down_exps rms %g", rd);
        CHECK_MSG(fabs(ro * 16.0 / 1.6 - 1.0) < 0.1, "output rms %g", ro);
        const float *nv = (const float *)(const void *)nrm->data;
        int out = 0;
        for (int i = 0; i < 256; i++) out += !(nv[i] >= 0.9f && nv[i] <= 1.1f);
        CHECK_EQ_INT(out, 0);
        CHECK_EQ_INT(nrm->type, MOE_T_F32);
    }
    gguf_close(f);
}

/* A Q8_0 file's blocks equal what moe_quantize_row makes of the F32 file of
 * the same seed (the generator writes Q8_0 blocks directly). */
static void check_q8_matches_quantizer(const char *f32path, const char *q8path) {
    char err[MOE_ERR_LEN];
    gguf_file *a = NULL, *b = NULL;
    CHECK_EQ_INT(gguf_open(f32path, &a, err, sizeof err), 0);
    CHECK_EQ_INT(gguf_open(q8path, &b, err, sizeof err), 0);
    if (!a || !b) { gguf_close(a); gguf_close(b); return; }
    CHECK_EQ_INT(a->n_tensors, b->n_tensors);
    int n_q8 = 0, mism = 0;
    for (uint64_t i = 0; i < a->n_tensors && i < b->n_tensors; i++) {
        const gguf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        if (y->type != MOE_T_Q8_0) {
            CHECK_MSG(y->nbytes == x->nbytes && !memcmp(x->data, y->data, x->nbytes), "%s differs", x->name);
            continue;
        }
        n_q8++;
        uint8_t *buf = malloc(y->nbytes);
        int64_t n = x->ne[0], rows = x->ne[1] * x->ne[2];
        for (int64_t r = 0; r < rows; r++)
            moe_quantize_row(MOE_T_Q8_0, (const float *)(const void *)x->data + r * n, buf + r * (n / 32 * 34), n);
        if (memcmp(buf, y->data, y->nbytes)) { mism++; fprintf(stderr, "q8 mismatch in %s\n", x->name); }
        free(buf);
    }
    CHECK(n_q8 > 10);
    CHECK_EQ_INT(mism, 0);
    gguf_close(a);
    gguf_close(b);
}

static void check_quantize_vs_shared(void) {
    char err[MOE_ERR_LEN];
    const char *in = check_ref("oracle/qwen3moe-tiny-f32.gguf"), *ref = check_ref("oracle/qwen3moe-tiny-q8_0.gguf");
    if (!in || !ref) return;
    const char *out = tpath("q8.gguf");
    int rc = moe_quantize_file(in, out, "q8_0", NULL, err, sizeof err);
    CHECK_MSG(rc == 0, "%s", err);
    if (rc) return;
    CHECK(strict_gguf(out, NULL));
    gguf_file *a = NULL, *b = NULL;
    CHECK_EQ_INT(gguf_open(out, &a, err, sizeof err), 0);
    CHECK_EQ_INT(gguf_open(ref, &b, err, sizeof err), 0);
    if (a && b) {
        CHECK_EQ_INT(a->n_kv, b->n_kv);
        for (uint64_t i = 0; i < a->n_kv && i < b->n_kv; i++)
            CHECK_MSG(!strcmp(a->kv[i].key, b->kv[i].key) && kv_equal(&a->kv[i], &b->kv[i]),
                      "kv %s differs from the shared Q8_0 file", a->kv[i].key);
        CHECK_EQ_INT(a->n_tensors, b->n_tensors);
        int64_t diff = 0, q8 = 0;
        for (uint64_t i = 0; i < a->n_tensors && i < b->n_tensors; i++) {
            const gguf_tensor *x = &a->tensors[i], *y = &b->tensors[i];
            CHECK_MSG(!strcmp(x->name, y->name) && x->type == y->type && !memcmp(x->ne, y->ne, sizeof x->ne),
                      "tensor %s differs in name/type/shape", x->name);
            if (x->type != y->type || x->nbytes != y->nbytes) continue;
            q8 += x->type == MOE_T_Q8_0;
            int64_t n = x->ne[0], rows = x->ne[1] * x->ne[2] * x->ne[3];
            uint64_t rb = moe_row_bytes(x->type, (uint64_t)n);
            float *u = malloc((size_t)n * 4), *v = malloc((size_t)n * 4);
            for (int64_t r = 0; r < rows; r++) {
                moe_dequant_row(x->type, x->data + (uint64_t)r * rb, u, n);
                moe_dequant_row(y->type, y->data + (uint64_t)r * rb, v, n);
                diff += memcmp(u, v, (size_t)n * 4) != 0;
            }
            free(u);
            free(v);
        }
        CHECK(q8 >= 4 * 7 + 2);
        CHECK_EQ_INT(diff, 0);
    }
    gguf_close(a);
    gguf_close(b);

    /* errors: unknown type; rows not a multiple of the block (Q4_K: 256, ffn_down_exps rows are 128) */
    rc = moe_quantize_file(in, tpath("bad.gguf"), "q9_9", NULL, err, sizeof err);
    CHECK(rc == MOE_EINVAL);
    CHECK_STR_CONTAINS(err, "q9_9");
    rc = moe_quantize_file(in, tpath("bad.gguf"), "q4_k", NULL, err, sizeof err);
    CHECK(rc == MOE_EINVAL);
    CHECK_STR_CONTAINS(err, "ffn_down_exps");
    CHECK(!exists(tpath("bad.gguf")));
    /* --type-experts: Q8_0 with NVFP4 experts; file_type follows the experts */
    rc = moe_quantize_file(in, out, "q8_0", "nvfp4", err, sizeof err);
    CHECK_MSG(rc == 0, "%s", err);
    if (rc == 0 && gguf_open(out, &a, err, sizeof err) == 0) {
        CHECK_EQ_INT(kv_u(a, "general.file_type", GGUF_U32), 39);
        const gguf_tensor *e = gguf_find_tensor(a, "blk.0.ffn_up_exps.weight");
        const gguf_tensor *r = gguf_find_tensor(a, "blk.0.ffn_gate_inp.weight");
        const gguf_tensor *qq = gguf_find_tensor(a, "blk.0.attn_q.weight");
        CHECK(e && e->type == MOE_T_NVFP4 && r && r->type == MOE_T_F32 && qq && qq->type == MOE_T_Q8_0);
        gguf_close(a);
    }
    unlink(out);
}

static void check_overrides(void) {
    char err[MOE_ERR_LEN];
    const char *p = tpath("ov.gguf");
    const char *ov[] = {"n_layer=3", "swa_pattern=2", "n_head_swa=4", "n_vocab=600", "gate=element",
                        "rope_scaling=none", "seed=7", "type=BF16", "type_experts=Q4_0", NULL};
    int rc = gen("laguna", "tiny", ov, p, err);
    CHECK_MSG(rc == 0, "%s", err);
    gguf_file *f = NULL;
    if (rc == 0 && gguf_open(p, &f, err, sizeof err) == 0) {
        CHECK_EQ_INT(kv_u(f, "laguna.block_count", GGUF_U32), 3);
        CHECK_EQ_INT(kv_u(f, "laguna.attention.sliding_window_pattern", GGUF_U32), 2);
        CHECK_EQ_INT(kv_u(f, "general.file_type", GGUF_U32), 2);
        CHECK_EQ_INT(kv_u(f, "general.quantization_version", GGUF_U32), 2);
        CHECK(gguf_find_kv(f, "laguna.rope.scaling.type") == NULL);
        int32_t hc[8];
        size_t n = 0;
        gguf_get_i32_array(f, "laguna.attention.head_count", hc, 8, &n, err, sizeof err);
        CHECK(n == 3 && hc[0] == 4 && hc[1] == 4 && hc[2] == 4);
        const gguf_tensor *g = gguf_find_tensor(f, "blk.1.attn_gate.weight");
        CHECK(g && g->ne[1] == 4 * 64 && g->type == MOE_T_BF16);
        const gguf_tensor *e = gguf_find_tensor(f, "blk.2.ffn_gate_shexp.weight");
        CHECK(e && e->type == MOE_T_Q4_0);
        const gguf_tensor *emb = gguf_find_tensor(f, "token_embd.weight");
        CHECK(emb && emb->ne[1] == 600);
        CHECK(gguf_find_tensor(f, "blk.3.attn_q.weight") == NULL);
        gguf_close(f);
    }
    CHECK(strict_gguf(p, NULL));
    unlink(p);
    /* rotary dims follow head_dim unless set */
    rc = gen("laguna", "tiny", (const char *const[]){"head_dim=128", "n_layer=2", NULL}, p, err);
    CHECK_MSG(rc == 0, "%s", err);
    if (rc == 0 && gguf_open(p, &f, err, sizeof err) == 0) {
        CHECK_EQ_INT(kv_u(f, "laguna.rope.dimension_count", GGUF_U32), 64);
        CHECK_EQ_INT(kv_u(f, "laguna.rope.dimension_count_swa", GGUF_U32), 128);
        CHECK_EQ_INT(kv_u(f, "laguna.attention.key_length", GGUF_U32), 128);
        gguf_close(f);
    }
    unlink(p);

    /* float rows need not be whole 32-value draw blocks (5 heads x 18 dims:
     * 90-value output-projection rows): written, strict, the same bytes
     * twice, and a BF16 file of them is quantize(F32) as for whole rows */
    const char *odd[] = {"head_dim=18", "n_head=5", "n_head_kv=1", "n_layer=2", NULL};
    const char *p2 = tpath("ov2.gguf"), *p3 = tpath("ov3.gguf");
    rc = gen("laguna", "tiny", odd, p, err);
    CHECK_MSG(rc == 0, "%s", err);
    CHECK(gen("laguna", "tiny", odd, p2, err) == 0 && check_same_file(p, p2));
    CHECK(strict_gguf(p, NULL));
    if (rc == 0 && gguf_open(p, &f, err, sizeof err) == 0) {
        const gguf_tensor *o = gguf_find_tensor(f, "blk.1.attn_output.weight");
        CHECK(o && o->ne[0] == 90 && o->type == MOE_T_F32);
        /* each row's last 26 values are drawn for that row: not zero, and
         * not another row's (a tail left undrawn keeps the scratch row) */
        if (o && o->ne[0] == 90 && o->type == MOE_T_F32) {
            const float *w = (const float *)(const void *)o->data;
            int bad_tail = 0;
            for (int64_t r = 0; r < o->ne[1]; r++) {
                const float *t = w + r * 90 + 64;
                bool nz = false, same = r > 0;
                for (int i = 0; i < 26; i++) {
                    nz |= t[i] != 0.0f;
                    same &= r > 0 && t[i] == t[i - 90];
                }
                bad_tail += !nz || same;
            }
            CHECK_MSG(bad_tail == 0, "%d rows of 90 with an undrawn tail", bad_tail);
        }
        gguf_close(f);
    }
    const char *odd16[] = {"head_dim=18", "n_head=5", "n_head_kv=1", "n_layer=2", "type=BF16", NULL};
    CHECK(gen("laguna", "tiny", odd16, p2, err) == 0);
    CHECK_MSG(moe_quantize_file(p, p3, "bf16", NULL, err, sizeof err) == 0, "%s", err);
    CHECK_MSG(check_same_file(p2, p3), "odd rows: quantize F32->BF16 differs from gen --type BF16");
    unlink(p);
    unlink(p2);
    unlink(p3);

    struct { const char *arch, *preset, *ov, *msg; } bad[] = {
        {"laguna", "tiny", "n_layers=3", "n_layers"},
        {"laguna", "tiny", "n_layer=0", "n_layer"},
        {"laguna", "tiny", "n_layer=3x", "n_layer"},
        {"laguna", "tiny", "rms_eps=abc", "rms_eps"},
        {"laguna", "tiny", "type=Q9_9", "Q9_9"},
        {"laguna", "tiny", "type=Q8_1", "Q8_1"},
        {"laguna", "tiny", "gate=both", "gate"},
        {"laguna", "tiny", "n_expert_used=17", "n_expert_used"},
        {"laguna", "tiny", "n_head_kv=4", "n_head_kv"},
        {"laguna", "tiny", "rope_dim=66", "rope_dim"},
        {"laguna", "tiny", "n_embd=100", "n_embd=100 must be a multiple of 32"},
        {"laguna", "default", "head_dim=4", "attn_output"},   /* Q8_0 rows of 48 (F32 ones may be any length) */
        {"laguna", "tiny", "type_experts=Q4_K", "ffn_down_exps"},
        {"laguna", "tiny", "novalue", "novalue"},
        {"qwen3moe", "tiny", "swa_window=4", "swa_window"},
        {"mistral", "tiny", NULL, "mistral"},
        {"laguna", "huge", NULL, "huge"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *o[] = {bad[i].ov, NULL};
        err[0] = 0;
        rc = gen(bad[i].arch, bad[i].preset, o, p, err);
        CHECK_MSG(rc < 0, "override %s accepted", bad[i].ov ? bad[i].ov : bad[i].arch);
        CHECK_STR_CONTAINS(err, bad[i].msg);
        CHECK(strchr(err, '\n') == NULL);
        CHECK(!exists(p));
    }
    /* an unwritable path fails and leaves nothing */
    rc = gen("qwen3moe", "tiny", NULL, tpath("no/such/dir/x.gguf"), err);
    CHECK(rc < 0);
}

/* The vocabulary works with the project's tokenizer: text with special
 * tokens round-trips, and a full 32000-token vocab (mostly filler merges)
 * loads. */
static void check_tokenizer(void) {
    char err[MOE_ERR_LEN];
    const char *p = tpath("voc.gguf");
    const char *ov[] = {"n_vocab=32000", "n_embd=32", "n_layer=1", "type=q8_0", NULL};
    double t0 = moe_now();
    int rc = gen("qwen3moe", "tiny", ov, p, err);
    CHECK_MSG(rc == 0, "%s", err);
    printf("gen with a 32000-token vocab: %.2f s\n", moe_now() - t0);
    moe_model *m = NULL;
    moe_load_params lp = {0};
    lp.vocab_only = true;
    rc = moe_model_load(p, &lp, &m, err, sizeof err);
    CHECK_MSG(rc == 0, "%s", err);
    if (rc == 0) {
        CHECK_EQ_INT(moe_model_n_vocab(m), 32000);
        CHECK_EQ_INT(moe_token_eos(m), 31999);
        CHECK_EQ_INT(moe_token_bos(m), 31997);
        const char *text = "<|im_start|>user\nThe quick brown fox jumps over the lazy dog. 12345 \xc3\xa9t\xc3\xa9!<|im_end|>\n";
        int32_t ids[256];
        size_t n = 0;
        rc = moe_tokenize(m, text, strlen(text), false, true, ids, 256, &n, err, sizeof err);
        CHECK_MSG(rc == 0, "%s", err);
        CHECK(n > 5 && n < 40 && ids[0] == 31998);
        char back[512] = "";
        size_t bl = 0;
        for (size_t i = 0; i < n && i < 256; i++) {
            const char *b;
            size_t l;
            if (moe_token_piece(m, ids[i], true, &b, &l) == 0 && bl + l < sizeof back) {
                memcpy(back + bl, b, l);
                bl += l;
            }
        }
        back[bl] = 0;
        CHECK_MSG(!strcmp(back, text), "round trip gave '%s'", back);
        moe_model_free(m);
    }
    unlink(p);
}

/* Last-token logits of toks[0..n) run as one prefill (step 0) or one token
 * at a time (step 1), with flags; NULL (and a failed check) on error. */
static float *run_logits(const char *path, const char *flags, const int32_t *toks, int n, int step) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags};
    int rc = moe_model_load(path, &lp, &m, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s: %s", path, err);
    if (rc) return NULL;
    moe_session_params sp = {.n_ctx = 64, .n_threads = 2};
    moe_session *s = NULL;
    rc = moe_session_new(m, &sp, &s, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    const int V = moe_model_n_vocab(m);
    float *lg = malloc((size_t)V * sizeof *lg);
    for (int i = 0; rc == MOE_OK && i < n; i += step ? 1 : n)
        rc = moe_session_forward(s, toks + i, step ? 1 : n, lg, false);
    CHECK_MSG(rc == MOE_OK, "%s: forward failed", path);
    moe_session_free(s);
    moe_model_free(m);
    if (rc) { free(lg); return NULL; }
    return lg;
}

static bool same_logits(const float *a, const float *b, int V) { return a && b && !memcmp(a, b, (size_t)V * sizeof *a); }

/* Each later architecture's tiny preset: the oracle file's keys and tensors
 * (when ../shared is there), it loads and runs, prefill equals decode, and a
 * few greedy tokens come out (the logits are finite). */
static void check_later_presets(void) {
    static const struct { const char *arch, *oracle; } L[] = {
        {"llama", "oracle/mixtral-tiny-q8_0.gguf"}, {"olmoe", "oracle/olmoe-tiny-q8_0.gguf"},
        {"qwen2moe", "oracle/qwen2moe-tiny-q8_0.gguf"}, {"glm4moe", "oracle/glm4moe-tiny-q8_0.gguf"},
        {"gpt-oss", "oracle/gpt-oss-tiny-q8_0.gguf"}, {"deepseek2", "oracle/deepseek2-tiny-q8_0.gguf"},
    };
    char err[MOE_ERR_LEN];
    int32_t toks[12];
    for (int i = 0; i < 8; i++) toks[i] = (int32_t)((i * 7919 + 13) % 997);
    for (size_t a = 0; a < sizeof L / sizeof L[0]; a++) {
        const char *p = tpath("later.gguf");
        int rc = gen(L[a].arch, "tiny", (const char *const[]){"type=Q8_0", NULL}, p, err);
        CHECK_MSG(rc == 0, "%s: %s", L[a].arch, err);
        if (rc) continue;
        CHECK(strict_gguf(p, NULL));
        const char *op = check_ref(L[a].oracle);
        if (op) compare_with_oracle(p, op);
        moe_model *probe = NULL;
        rc = moe_model_load(p, NULL, &probe, err, sizeof err);
        moe_model_free(probe);
        CHECK_MSG(rc == MOE_OK, "gen %s: the file does not load: %s", L[a].arch, err);
        if (rc) { unlink(p); continue; }
        float *pre = run_logits(p, NULL, toks, 8, 0), *dec = run_logits(p, NULL, toks, 8, 1);
        CHECK_MSG(same_logits(pre, dec, 1000), "%s: prefill != decode", L[a].arch);
        /* greedy: 4 more tokens, each from the previous step's argmax */
        int n = 8;
        for (int g = 0; g < 4 && pre; g++) {
            int best = 0;
            for (int v = 1; v < 1000; v++) if (pre[v] > pre[best]) best = v;
            CHECK_MSG(isfinite(pre[best]), "%s: logits not finite", L[a].arch);
            toks[n++] = best;
            free(pre);
            pre = run_logits(p, NULL, toks, n, 0);
        }
        free(pre);
        free(dec);
        for (int i = 0; i < 8; i++) toks[i] = (int32_t)((i * 7919 + 13) % 997);
        unlink(p);
    }
}

/* Laguna's YaRN keys: an absent yarn_beta_fast means 64 (not 32), and
 * rope.scaling.attn_factor multiplies the rotation's magnitude (1 = no
 * change); a non-positive one is refused. */
static void check_laguna_yarn_keys(void) {
    char err[MOE_ERR_LEN];
    int32_t toks[10];
    for (int i = 0; i < 10; i++) toks[i] = (int32_t)((i * 7919 + 13) % 997);
    static const char *const ov[][2] = {{"yarn_beta_fast=-1", NULL}, {"yarn_beta_fast=64", NULL}, {"yarn_beta_fast=32", NULL},
                                        {"yarn_attn_factor=1", NULL}, {"yarn_attn_factor=1.5", NULL}};
    float *lg[5] = {0};
    for (int i = 0; i < 5; i++) {
        int rc = gen("laguna", "tiny", ov[i], tpath("yarn.gguf"), err);
        CHECK_MSG(rc == 0, "%s", err);
        if (!rc) lg[i] = run_logits(tpath("yarn.gguf"), NULL, toks, 10, 0);
    }
    CHECK_MSG(same_logits(lg[0], lg[1], 1000), "laguna: absent yarn_beta_fast is not 64");
    CHECK_MSG(lg[0] && lg[2] && !same_logits(lg[0], lg[2], 1000), "laguna: yarn_beta_fast 32 vs 64 changed nothing");
    CHECK_MSG(same_logits(lg[3], lg[2], 1000), "laguna: attn_factor 1 changed the logits");
    CHECK_MSG(lg[4] && lg[2] && !same_logits(lg[4], lg[2], 1000), "laguna: attn_factor 1.5 changed nothing");
    for (int i = 0; i < 5; i++) free(lg[i]);
    int rc = gen("laguna", "tiny", (const char *const[]){"yarn_attn_factor=-2", NULL}, tpath("yarn.gguf"), err);
    CHECK_MSG(rc == 0, "%s", err);
    moe_model *m = NULL;
    rc = moe_model_load(tpath("yarn.gguf"), NULL, &m, err, sizeof err);
    CHECK_MSG(rc == MOE_EFORMAT && strstr(err, "laguna.rope.scaling.attn_factor = -2"), "attn_factor -2: %d %s", rc, err);
    moe_model_free(m);
    unlink(tpath("yarn.gguf"));
}

/* key_outliers=F: in every KV head the rows of attn_k for channels 3, 17,
 * head_dim/2+5, head_dim-7 are F times the plain file's, every other byte
 * of the file is the same (F32: exact products). */
static void check_key_outliers(void) {
    char err[MOE_ERR_LEN];
    const char *pa = tpath("ko-a.gguf"), *pb = tpath("ko-b.gguf");
    int rc = gen("qwen3moe", "tiny", (const char *const[]){"type=F32", NULL}, pa, err);
    CHECK_MSG(rc == 0, "%s", err);
    rc = gen("qwen3moe", "tiny", (const char *const[]){"type=F32", "key_outliers=8", NULL}, pb, err);
    CHECK_MSG(rc == 0, "%s", err);
    gguf_file *a = NULL, *b = NULL;
    if (gguf_open(pa, &a, err, sizeof err) || gguf_open(pb, &b, err, sizeof err)) {
        CHECK_MSG(0, "%s", err);
        gguf_close(a);
        return;
    }
    const int hd = (int)kv_u(a, "qwen3moe.attention.key_length", GGUF_U32);
    CHECK(hd == 64);
    int scaled = 0, other_diff = 0;
    for (uint64_t i = 0; i < a->n_tensors; i++) {
        const gguf_tensor *ta = &a->tensors[i], *tb = gguf_find_tensor(b, ta->name);
        if (!tb || ta->nbytes != tb->nbytes) { other_diff++; continue; }
        const bool k = strstr(ta->name, ".attn_k.weight") != NULL;
        const float *fa = (const float *)(const void *)ta->data, *fb = (const float *)(const void *)tb->data;
        for (int64_t r = 0; r < (k ? ta->ne[1] : 0); r++) {
            const int ch = (int)(r % hd);
            const bool out = ch == 3 || ch == 17 || ch == hd / 2 + 5 || ch == hd - 7;
            for (int64_t c = 0; c < ta->ne[0]; c++) {
                const float x = fa[r * ta->ne[0] + c], y = fb[r * ta->ne[0] + c];
                if (out ? y != 8.0f * x : y != x) other_diff++;
            }
            scaled += out;
        }
        if (!k && memcmp(ta->data, tb->data, ta->nbytes)) other_diff++;
    }
    CHECK_MSG(scaled == 4 * 4 * 2, "key_outliers: %d rows scaled, expected 4 channels x 2 KV heads x 4 layers", scaled);
    CHECK_MSG(other_diff == 0, "key_outliers: %d other values differ", other_diff);
    gguf_close(a);
    gguf_close(b);
    unlink(pa);
    unlink(pb);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/moefast-test-gen-XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    char err[MOE_ERR_LEN], oracle[512];
    check_key_outliers();
    const char *arches[2] = {"laguna", "qwen3moe"};
    for (int a = 0; a < 2; a++) {
        const char *p1 = tpath("a.gguf"), *p2 = tpath("b.gguf"), *pq = tpath("q.gguf");
        int rc = gen(arches[a], "tiny", NULL, p1, err);
        CHECK_MSG(rc == 0, "%s", err);
        rc = gen(arches[a], "tiny", (const char *const[]){"type=F32", NULL}, p2, err);
        CHECK_MSG(rc == 0, "%s", err);
        CHECK_MSG(check_same_file(p1, p2), "%s: two generations differ", arches[a]);
        /* a different seed changes the weights */
        rc = gen(arches[a], "tiny", (const char *const[]){"seed=43", NULL}, p2, err);
        CHECK(rc == 0 && !check_same_file(p1, p2));
        uint32_t align = 0;
        CHECK_MSG(strict_gguf(p1, &align), "%s: not a strict GGUF v3 file", p1);
        CHECK_EQ_INT(align, 32);
        snprintf(oracle, sizeof oracle, "oracle/%s-tiny-f32.gguf", arches[a]);
        const char *op = check_ref(oracle);
        if (op) compare_with_oracle(p1, op);
        round_trip(p1, p2);
        check_contents(p1, a == 0);
        rc = gen(arches[a], "tiny", (const char *const[]){"type=q8_0", NULL}, pq, err);
        CHECK_MSG(rc == 0, "%s", err);
        CHECK(strict_gguf(pq, NULL));
        check_q8_matches_quantizer(p1, pq);
        /* gen --type T is the same file as quantize(gen F32, T) */
        rc = moe_quantize_file(p1, p2, "Q8_0", NULL, err, sizeof err);
        CHECK_MSG(rc == 0, "%s", err);
        CHECK_MSG(check_same_file(pq, p2), "%s: quantize F32->Q8_0 differs from gen --type Q8_0", arches[a]);
        rc = gen(arches[a], "tiny", (const char *const[]){"type=BF16", "type_experts=NVFP4", NULL}, pq, err);
        CHECK_MSG(rc == 0, "%s", err);
        rc = moe_quantize_file(p1, p2, "bf16", "nvfp4", err, sizeof err);
        CHECK_MSG(rc == 0, "%s", err);
        CHECK_MSG(check_same_file(pq, p2), "%s: quantize F32->BF16/NVFP4 differs from gen", arches[a]);
        unlink(p1);
        unlink(p2);
        unlink(pq);
    }
    check_overrides();
    check_later_presets();
    check_laguna_yarn_keys();
    check_quantize_vs_shared();
    check_tokenizer();
    rmdir(tmpdir);
    return check_report("test_gen");
}
