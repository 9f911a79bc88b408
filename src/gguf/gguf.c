/* gguf.c — GGUF v2/v3 reader (mmap, one bounds-checked cursor) and writer.
 *
 * Reader design: every byte of the header, metadata and tensor infos is read
 * through struct gcur, which checks bounds before each read and keeps the
 * FIRST error (later reads return zeros and do nothing), so the parser can be
 * written straight-line and a malformed file can never send it out of bounds.
 * Counts read from the file are checked against the bytes that remain before
 * anything is allocated from them, so an absurd count fails instead of
 * allocating. Strings (keys, values, the 150k-entry vocabularies) are views
 * into the mapping; only keys and tensor names are copied, into one pool,
 * after the parse succeeded. See docs/GGUF.md for the error classes. */
#include "gguf/gguf.h"
#include "base/util.h"
#include "base/meminfo.h"
#include "quant/types.h" /* ggml tensor types: ids, names, block sizes */

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian values with memcpy: little-endian hosts only"
#endif

#define GGUF_DEFAULT_ALIGNMENT 32
#define NAME_SHOW_MAX 64

/* Element size of scalar value types (0: STRING / ARRAY / unknown). */
static uint32_t vtype_size(uint32_t t) {
    static const uint8_t sz[GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < GGUF_VTYPE_COUNT ? sz[t] : 0;
}

const char *gguf_vtype_name(uint32_t t) {
    static const char *const names[GGUF_VTYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
    return t < GGUF_VTYPE_COUNT ? names[t] : "unknown";
}

static bool vtype_is_uint(uint32_t t) {
    return t == GGUF_U8 || t == GGUF_U16 || t == GGUF_U32 || t == GGUF_U64;
}
static bool vtype_is_sint(uint32_t t) {
    return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64;
}

/* Copies a name from the file into buf for messages: printable ASCII as is,
 * other bytes as \xNN (names may hold anything, including NUL and newlines),
 * cut at NAME_SHOW_MAX bytes. */
static const char *show(char *buf, size_t cap, const void *p, uint64_t len) {
    static const char hex[] = "0123456789abcdef";
    const uint8_t *s = p;
    size_t o = 0;
    uint64_t n = len < NAME_SHOW_MAX ? len : NAME_SHOW_MAX;
    for (uint64_t i = 0; i < n && o + 8 < cap; i++) {
        uint8_t ch = s[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\'' && ch != '\\') {
            buf[o++] = (char)ch;
        } else {
            buf[o++] = '\\'; buf[o++] = 'x';
            buf[o++] = hex[ch >> 4]; buf[o++] = hex[ch & 15];
        }
    }
    if (n < len && o + 4 < cap) { memcpy(buf + o, "...", 3); o += 3; }
    buf[o] = 0;
    return buf;
}

static uint64_t hash_bytes(const void *p, uint64_t n) {
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* ---- name set: open addressing over an array of views ------------------
 * Used for duplicate detection (reader and writer) and for lookups. Slots
 * hold index+1 into names[]; 0 is empty. */
typedef struct nameset { uint32_t *slot; uint64_t mask; } nameset;

static int nameset_init(nameset *s, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    s->slot = calloc(cap, sizeof *s->slot);
    s->mask = cap - 1;
    return s->slot ? 0 : -1;
}

/* Index of the name equal to (p, len), or -1. */
static int64_t nameset_find(const nameset *s, const gguf_str *names, const void *p, uint64_t len) {
    if (!s->slot) return -1;
    for (uint64_t h = hash_bytes(p, len) & s->mask;; h = (h + 1) & s->mask) {
        uint32_t v = s->slot[h];
        if (!v) return -1;
        const gguf_str *e = &names[v - 1];
        if (e->len == len && (len == 0 || memcmp(e->ptr, p, len) == 0)) return v - 1;
    }
}

/* Inserts names[idx]; returns -1, or the index of an equal name already in. */
static int64_t nameset_add(nameset *s, const gguf_str *names, uint32_t idx) {
    const gguf_str *n = &names[idx];
    for (uint64_t h = hash_bytes(n->ptr, n->len) & s->mask;; h = (h + 1) & s->mask) {
        uint32_t v = s->slot[h];
        if (!v) { s->slot[h] = idx + 1; return -1; }
        const gguf_str *e = &names[v - 1];
        if (e->len == n->len && (n->len == 0 || memcmp(e->ptr, n->ptr, n->len) == 0)) return v - 1;
    }
}

/* ---- the cursor --------------------------------------------------------- */

typedef struct gcur {
    const uint8_t *base;
    uint64_t size, pos;
    int err;                 /* 0, or the first error's code */
    char *msg; size_t msglen;
    const char *path;
    const char *section;     /* "header", "metadata", "tensor info" */
    const char *ctx_kind;    /* "key", "tensor" or NULL */
    int64_t ctx_index;       /* which kv / tensor (when the name is not read yet) */
    gguf_str ctx_name;       /* its name once read */
} gcur;

static void cur_fail(gcur *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cur_fail(gcur *c, int code, const char *fmt, ...) {
    if (c->err) return;
    c->err = code;
    char tail[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof tail, fmt, ap);
    va_end(ap);
    moe_errf(c->msg, c->msglen, code, "%s: %s", c->path, tail);
}

/* " in key 'name'" / " in tensor #3" / "" for messages. */
static const char *cur_ctx(const gcur *c, char *buf, size_t cap) {
    char nm[4 * NAME_SHOW_MAX + 8];
    if (!c->ctx_kind) { buf[0] = 0; return buf; }
    if (c->ctx_name.ptr)
        snprintf(buf, cap, " in %s '%s'", c->ctx_kind, show(nm, sizeof nm, c->ctx_name.ptr, c->ctx_name.len));
    else
        snprintf(buf, cap, " in %s #%lld", c->ctx_kind, (long long)c->ctx_index);
    return buf;
}

static const uint8_t *cur_take(gcur *c, uint64_t n) {
    if (c->err) return NULL;
    if (n > c->size - c->pos) {
        char ctx[320];
        cur_fail(c, MOE_EFORMAT, "truncated %s%s at offset %llu: need %llu bytes, %llu left",
                 c->section, cur_ctx(c, ctx, sizeof ctx), (unsigned long long)c->pos,
                 (unsigned long long)n, (unsigned long long)(c->size - c->pos));
        return NULL;
    }
    const uint8_t *p = c->base + c->pos;
    c->pos += n;
    return p;
}

static uint32_t cur_u32(gcur *c) {
    const uint8_t *p = cur_take(c, 4);
    uint32_t v = 0;
    if (p) memcpy(&v, p, 4);
    return v;
}
static uint64_t cur_u64(gcur *c) {
    const uint8_t *p = cur_take(c, 8);
    uint64_t v = 0;
    if (p) memcpy(&v, p, 8);
    return v;
}

/* A length-prefixed string. A length larger than the whole file is an
 * "absurd" length (garbage, not a short file); one that merely runs past the
 * end is a truncation. */
static gguf_str cur_str(gcur *c, const char *label) {
    gguf_str s = {NULL, 0};
    uint64_t at = c->pos;
    uint64_t len = cur_u64(c);
    if (c->err) return s;
    if (len > c->size) {
        char ctx[320];
        cur_fail(c, MOE_EFORMAT, "absurd %s length %llu at offset %llu%s (file has %llu bytes)",
                 label, (unsigned long long)len, (unsigned long long)at, cur_ctx(c, ctx, sizeof ctx),
                 (unsigned long long)c->size);
        return s;
    }
    const uint8_t *p = cur_take(c, len);
    if (p) { s.ptr = (const char *)p; s.len = len; }
    return s;
}

/* A count of items of at least min_sz bytes each must fit in what remains:
 * one that could not fit even in the whole file is "absurd" (garbage), one
 * that only runs past the end is a truncation. Checked before anything is
 * allocated from the count. */
static bool cur_count_fits(gcur *c, uint64_t n, uint64_t min_sz, const char *label, uint64_t at) {
    char ctx[320];
    if (c->err) return false;
    uint64_t left = c->size - c->pos;
    if (n <= left / min_sz) return true;
    if (n > c->size / min_sz)
        cur_fail(c, MOE_EFORMAT, "absurd %s %llu at offset %llu%s (items of >= %llu bytes; file has %llu bytes)",
                 label, (unsigned long long)n, (unsigned long long)at, cur_ctx(c, ctx, sizeof ctx),
                 (unsigned long long)min_sz, (unsigned long long)c->size);
    else
        cur_fail(c, MOE_EFORMAT, "truncated %s%s at offset %llu: %s %llu needs at least %llu bytes, %llu left",
                 c->section, cur_ctx(c, ctx, sizeof ctx), (unsigned long long)at, label,
                 (unsigned long long)n, (unsigned long long)(n * min_sz), (unsigned long long)left);
    return false;
}

/* ---- the reader ----------------------------------------------------------- */

typedef struct gguf_impl {
    gguf_file f;            /* first: a gguf_file * is a gguf_impl * */
    bool mapped;
    uint64_t map_len;
    char *pool;             /* NUL-terminated keys and tensor names */
    uint8_t *copies;        /* aligned copies of misaligned tensors (fix_misaligned) */
    gguf_str *kv_names, *t_names;
    nameset kv_set, t_set;
} gguf_impl;

void gguf_close(gguf_file *f) {
    if (!f) return;
    gguf_impl *g = (gguf_impl *)f;
    for (uint32_t i = 0; i < f->n_parts; i++) gguf_close(f->parts[i]);
    free(f->parts);
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++)
            if (f->kv[i].type == GGUF_ARRAY) free(f->kv[i].v.arr.strs);
    free(f->kv);
    free(f->tensors);
    free(g->pool);
    free(g->copies);
    free(g->kv_names);
    free(g->t_names);
    free(g->kv_set.slot);
    free(g->t_set.slot);
    if (g->mapped && g->map_len) munmap((void *)f->map, g->map_len);
    free(f->path);
    free(g);
}

static void decode_scalar(gguf_kv *kv, uint32_t t, const uint8_t *p) {
    switch (t) {
    case GGUF_U8: kv->v.u = p[0]; break;
    case GGUF_BOOL: kv->v.u = p[0] != 0; break;
    case GGUF_I8: kv->v.i = (int8_t)p[0]; break;
    case GGUF_U16: { uint16_t x; memcpy(&x, p, 2); kv->v.u = x; break; }
    case GGUF_I16: { int16_t x; memcpy(&x, p, 2); kv->v.i = x; break; }
    case GGUF_U32: { uint32_t x; memcpy(&x, p, 4); kv->v.u = x; break; }
    case GGUF_I32: { int32_t x; memcpy(&x, p, 4); kv->v.i = x; break; }
    case GGUF_U64: { uint64_t x; memcpy(&x, p, 8); kv->v.u = x; break; }
    case GGUF_I64: { int64_t x; memcpy(&x, p, 8); kv->v.i = x; break; }
    case GGUF_F32: { float x; memcpy(&x, p, 4); kv->v.f = x; break; }
    case GGUF_F64: { double x; memcpy(&x, p, 8); kv->v.f = x; break; }
    default: break;
    }
}

static void parse_value(gcur *c, gguf_kv *kv, uint64_t type_at) {
    char ctx[320];
    uint32_t t = kv->type;
    if (t == GGUF_STRING) {
        kv->v.s = cur_str(c, "string value");
        return;
    }
    if (t != GGUF_ARRAY) {
        uint32_t sz = vtype_size(t);
        if (!sz) {
            cur_fail(c, MOE_EFORMAT, "unknown value type %u at offset %llu%s", t,
                     (unsigned long long)type_at, cur_ctx(c, ctx, sizeof ctx));
            return;
        }
        const uint8_t *p = cur_take(c, sz);
        if (p) decode_scalar(kv, t, p);
        return;
    }
    uint64_t et_at = c->pos;
    uint32_t et = cur_u32(c);
    uint64_t n_at = c->pos;
    uint64_t n = cur_u64(c);
    if (c->err) return;
    if (et == GGUF_ARRAY) {
        cur_fail(c, MOE_EFORMAT, "nested array (array of arrays) at offset %llu%s",
                 (unsigned long long)et_at, cur_ctx(c, ctx, sizeof ctx));
        return;
    }
    if (et >= GGUF_VTYPE_COUNT) {
        cur_fail(c, MOE_EFORMAT, "unknown value type %u (array element) at offset %llu%s", et,
                 (unsigned long long)et_at, cur_ctx(c, ctx, sizeof ctx));
        return;
    }
    /* Each element needs at least min_sz bytes, so a count beyond what remains
     * cannot be real: reject before allocating anything from it. */
    uint64_t min_sz = et == GGUF_STRING ? 8 : vtype_size(et);
    if (!cur_count_fits(c, n, min_sz, "array length", n_at)) return;
    kv->v.arr.type = et;
    kv->v.arr.n = n;
    kv->v.arr.data = c->base + c->pos;
    if (et != GGUF_STRING) {
        cur_take(c, n * min_sz);
        return;
    }
    if (n == 0) return;
    gguf_str *strs = malloc(n * sizeof *strs);
    if (!strs) {
        cur_fail(c, MOE_ENOMEM, "out of memory for %llu strings%s", (unsigned long long)n,
                 cur_ctx(c, ctx, sizeof ctx));
        return;
    }
    kv->v.arr.strs = strs;
    for (uint64_t i = 0; i < n && !c->err; i++) strs[i] = cur_str(c, "string value");
}

typedef struct { uint64_t off; uint32_t idx; } tens_ord;
static int cmp_ord(const void *a, const void *b) {
    const tens_ord *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static void format_shape(char *buf, size_t cap, const gguf_tensor *t) {
    size_t o = 0;
    buf[o++] = '[';
    for (uint32_t d = 0; d < t->n_dims && o + 24 < cap; d++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    snprintf(buf + o, cap - o, "]");
}

/* Reads one tensor info into t (name view in *name) and checks its shape and
 * type; the data range is checked once all infos are read. */
static void parse_tensor_info(gcur *c, gguf_tensor *t, gguf_str *name) {
    char ctx[320];
    t->info_offset = c->pos;
    *name = cur_str(c, "tensor name");
    if (c->err) return;
    c->ctx_name = *name;
    if (name->len && memchr(name->ptr, 0, name->len)) {
        cur_fail(c, MOE_EFORMAT, "invalid tensor name at offset %llu%s: contains a NUL byte",
                 (unsigned long long)t->info_offset, cur_ctx(c, ctx, sizeof ctx));
        return;
    }
    uint64_t nd_at = c->pos;
    t->n_dims = cur_u32(c);
    if (c->err) return;
    if (t->n_dims > GGUF_MAX_DIMS) {
        cur_fail(c, MOE_EFORMAT, "too many dimensions: %u (max %d) at offset %llu%s", t->n_dims,
                 GGUF_MAX_DIMS, (unsigned long long)nd_at, cur_ctx(c, ctx, sizeof ctx));
        return;
    }
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) t->ne[d] = (int64_t)cur_u64(c);
    uint64_t type_at = c->pos;
    t->type = cur_u32(c);
    t->offset = cur_u64(c);
    if (c->err) return;
    char shp[128];
    format_shape(shp, sizeof shp, t);
    uint64_t nel = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        if (t->ne[d] <= 0) {
            cur_fail(c, MOE_EFORMAT, "invalid shape %s: dimension %u is %lld (must be >= 1) at offset %llu%s",
                     shp, d, (long long)t->ne[d], (unsigned long long)t->info_offset, cur_ctx(c, ctx, sizeof ctx));
            return;
        }
        if (!moe_mul_ok(nel, (uint64_t)t->ne[d], &nel) || nel > (uint64_t)INT64_MAX) {
            cur_fail(c, MOE_EFORMAT, "shape overflow: %s has more than 2^63 elements at offset %llu%s",
                     shp, (unsigned long long)t->info_offset, cur_ctx(c, ctx, sizeof ctx));
            return;
        }
    }
    const moe_type_info *gt = moe_type_get(t->type);
    if (!gt) {
        cur_fail(c, MOE_EFORMAT, "unknown tensor type %u at offset %llu%s", t->type,
                 (unsigned long long)type_at, cur_ctx(c, ctx, sizeof ctx));
        return;
    }
    if ((uint64_t)t->ne[0] % gt->block) {
        cur_fail(c, MOE_EFORMAT, "row length %lld is not a multiple of block size %u of type %s "
                 "(shape %s) at offset %llu%s", (long long)t->ne[0], gt->block, gt->name, shp,
                 (unsigned long long)t->info_offset, cur_ctx(c, ctx, sizeof ctx));
        return;
    }
    if (!moe_mul_ok(nel / gt->block, gt->block_bytes, &t->nbytes)) {
        cur_fail(c, MOE_EFORMAT, "shape overflow: %s of type %s needs more than 2^64 bytes at offset %llu%s",
                 shp, gt->name, (unsigned long long)t->info_offset, cur_ctx(c, ctx, sizeof ctx));
        return;
    }
}

/* Power-of-two alignment round-up with overflow check. */
static bool align_up(uint64_t x, uint64_t a, uint64_t *out) {
    uint64_t y;
    if (!moe_add_ok(x, a - 1, &y)) return false;
    *out = y & ~(a - 1);
    return true;
}

static void check_alignment_kv(gcur *c, const gguf_kv *kv) {
    char ctx[320];
    if (!vtype_is_uint(kv->type)) {
        cur_fail(c, MOE_EFORMAT, "bad alignment: general.alignment has type %s, expected u32 "
                 "(any unsigned integer accepted) at offset %llu%s", gguf_vtype_name(kv->type),
                 (unsigned long long)kv->offset, cur_ctx(c, ctx, sizeof ctx));
        return;
    }
    uint64_t a = kv->v.u;
    if (a == 0 || (a & (a - 1))) {
        cur_fail(c, MOE_EFORMAT, "bad alignment: general.alignment is %llu, not a non-zero power of two "
                 "at offset %llu%s", (unsigned long long)a, (unsigned long long)kv->offset,
                 cur_ctx(c, ctx, sizeof ctx));
        return;
    }
}

/* Checks each tensor's data range, then the layout: sorted by offset, each
 * tensor must start exactly where the previous one's data (padded to the
 * alignment) ends; starting earlier is an overlap, later means the sizes
 * implied by the types and shapes do not match the file's layout. */
static void check_tensor_data(gcur *c, gguf_impl *g) {
    gguf_file *f = &g->f;
    char nm[4 * NAME_SHOW_MAX + 8], nm2[4 * NAME_SHOW_MAX + 8];
    const uint64_t a = f->alignment;
    for (uint64_t i = 0; i < f->n_tensors && !c->err; i++) {
        gguf_tensor *t = &f->tensors[i];
        const gguf_str *n = &g->t_names[i];
        uint64_t start, end;
        if (t->offset % a) {
            cur_fail(c, MOE_EFORMAT, "misaligned data offset: tensor '%s' (info at offset %llu) has data "
                     "offset %llu, not a multiple of the alignment %llu", show(nm, sizeof nm, n->ptr, n->len),
                     (unsigned long long)t->info_offset, (unsigned long long)t->offset, (unsigned long long)a);
        } else if (!moe_add_ok(f->data_offset, t->offset, &start) || start > f->size) {
            cur_fail(c, MOE_EFORMAT, "data offset out of range: tensor '%s' (info at offset %llu) has data "
                     "offset %llu, past the end of the file (data section at %llu, file has %llu bytes)",
                     show(nm, sizeof nm, n->ptr, n->len), (unsigned long long)t->info_offset,
                     (unsigned long long)t->offset, (unsigned long long)f->data_offset,
                     (unsigned long long)f->size);
        } else if (!moe_add_ok(start, t->nbytes, &end) || end > f->size) {
            cur_fail(c, MOE_EFORMAT, "truncated tensor data: tensor '%s' (info at offset %llu) needs %llu "
                     "bytes at offset %llu, the file has %llu bytes", show(nm, sizeof nm, n->ptr, n->len),
                     (unsigned long long)t->info_offset, (unsigned long long)t->nbytes,
                     (unsigned long long)start, (unsigned long long)f->size);
        } else {
            t->data = f->map + start;
        }
    }
    if (c->err || f->n_tensors == 0) return;
    tens_ord *ord = malloc(f->n_tensors * sizeof *ord);
    if (!ord) { cur_fail(c, MOE_ENOMEM, "out of memory sorting %llu tensors", (unsigned long long)f->n_tensors); return; }
    for (uint64_t i = 0; i < f->n_tensors; i++) ord[i] = (tens_ord){f->tensors[i].offset, (uint32_t)i};
    qsort(ord, f->n_tensors, sizeof *ord, cmp_ord);
    uint64_t expect = 0;
    for (uint64_t k = 0; k < f->n_tensors; k++) {
        const gguf_tensor *t = &f->tensors[ord[k].idx];
        const gguf_str *n = &g->t_names[ord[k].idx];
        if (t->offset < expect) {
            const gguf_tensor *p = &f->tensors[ord[k - 1].idx];
            const gguf_str *pn = &g->t_names[ord[k - 1].idx];
            cur_fail(c, MOE_EFORMAT, "overlapping tensors: '%s' (data offset %llu, %llu bytes) and '%s' "
                     "(data offset %llu, info at offset %llu)", show(nm, sizeof nm, pn->ptr, pn->len),
                     (unsigned long long)p->offset, (unsigned long long)p->nbytes,
                     show(nm2, sizeof nm2, n->ptr, n->len), (unsigned long long)t->offset,
                     (unsigned long long)t->info_offset);
            break;
        }
        if (t->offset > expect) {
            if (k == 0) {
                cur_fail(c, MOE_EFORMAT, "size mismatch: the first tensor's data, '%s' (info at offset %llu), "
                         "starts at data offset %llu, expected 0", show(nm, sizeof nm, n->ptr, n->len),
                         (unsigned long long)t->info_offset, (unsigned long long)t->offset);
            } else {
                const gguf_tensor *p = &f->tensors[ord[k - 1].idx];
                const gguf_str *pn = &g->t_names[ord[k - 1].idx];
                char shp[128];
                format_shape(shp, sizeof shp, p);
                cur_fail(c, MOE_EFORMAT, "size mismatch: tensor '%s' (info at offset %llu, type %s, shape %s) "
                         "is %llu bytes but the next tensor '%s' starts %llu bytes after it",
                         show(nm, sizeof nm, pn->ptr, pn->len), (unsigned long long)p->info_offset,
                         moe_type_get(p->type)->name, shp, (unsigned long long)p->nbytes,
                         show(nm2, sizeof nm2, n->ptr, n->len), (unsigned long long)(t->offset - p->offset));
            }
            break;
        }
        /* start + nbytes <= size was checked above, so this cannot overflow
         * by more than the alignment; align_up reports it anyway. */
        if (!align_up(t->offset + t->nbytes, a, &expect)) expect = UINT64_MAX;
    }
    free(ord);
}

/* Byte alignment the readers of a tensor type need: F32/I32 4, F16/BF16/I16
 * 2, F64/I64 8; quantized blocks 1 (their sizes, e.g. Q8_0's 34 bytes, do
 * not keep even 2-byte alignment from block to block, so the kernels read
 * block scales with memcpy: quant_internal.h moe_rd16). */
static uint32_t type_align(uint32_t t) {
    switch (t) {
    case 0: case 26: return 4;                 /* F32, I32 */
    case 1: case 25: case 30: return 2;        /* F16, I16, BF16 */
    case 27: case 28: return 8;                /* I64, F64 */
    default: return 1;
    }
}

/* A GGUF with general.alignment 1 or 2 (or a buffer given to
 * gguf_open_memory at an odd address) can put a tensor's data at an address
 * its element type cannot be read from through a typed pointer (an F32 norm
 * at an odd offset: undefined behaviour, reported by UBSan in forward.c).
 * Such tensors are copied, once, into owned 64-byte aligned memory and
 * t->data points there; the values are the file's, bit for bit. Only the
 * misaligned tensors are copied (with alignment >= 8, as every writer we
 * know uses, none is). If the copies would not fit in the available memory
 * the file is refused with the first such tensor, its offset and alignment. */
static void fix_misaligned(gcur *c, gguf_impl *g) {
    gguf_file *f = &g->f;
    uint64_t total = 0, n = 0, first = UINT64_MAX;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if ((uintptr_t)t->data % type_align(t->type) == 0) continue;
        if (first == UINT64_MAX) first = i;
        n++;
        total += (t->nbytes + 63) & ~(uint64_t)63;    /* bounded by the file size: no overflow */
    }
    if (!n) return;
    const gguf_tensor *t0 = &f->tensors[first];
    uint64_t avail = 0;
    char nm[4 * NAME_SHOW_MAX + 8];
    const gguf_str *n0 = &g->t_names[first];
    if (!moe_mem_fits(total, &avail) || !(g->copies = aligned_alloc(64, (size_t)total))) {
        cur_fail(c, MOE_ENOMEM, "misaligned tensor data: tensor '%s' at file offset %llu is not %u-byte aligned "
                 "(general.alignment %llu); aligned copies of the %llu such tensors need %llu bytes, %llu available",
                 show(nm, sizeof nm, n0->ptr, n0->len), (unsigned long long)(t0->data - f->map),
                 type_align(t0->type), (unsigned long long)f->alignment, (unsigned long long)n,
                 (unsigned long long)total, (unsigned long long)avail);
        return;
    }
    uint8_t *dst = g->copies;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if ((uintptr_t)t->data % type_align(t->type) == 0) continue;
        memcpy(dst, t->data, t->nbytes);
        t->data = dst;
        dst += (t->nbytes + 63) & ~(uint64_t)63;
    }
    f->n_copied = n;
    f->copied_bytes = total;
}

static int parse(gguf_impl *g, char *err, size_t errlen) {
    gguf_file *f = &g->f;
    static const uint8_t empty[1];
    gcur cur = {
        .base = f->map ? f->map : empty, .size = f->size, .msg = err, .msglen = errlen,
        .path = f->path, .section = "header", .ctx_index = -1,
    };
    gcur *c = &cur;
    char ctx[320], nm[4 * NAME_SHOW_MAX + 8];

    const uint8_t *magic = cur_take(c, 4);
    if (!magic) return c->err;
    if (memcmp(magic, "GGUF", 4) != 0) {
        cur_fail(c, MOE_EFORMAT, "bad magic '%s' at offset 0 (expected 'GGUF'; not a GGUF file)",
                 show(nm, sizeof nm, magic, 4));
        return c->err;
    }
    f->version = cur_u32(c);
    if (c->err) return c->err;
    if (f->version != 2 && f->version != 3) {
        cur_fail(c, MOE_EUNSUPPORTED, "unsupported GGUF version %u at offset 4 (supported: 2 and 3%s)",
                 f->version, f->version == 1 ? "; version 1 used 32-bit counts"
                 : (f->version & 0xffff) == 0 ? "; a big-endian file?" : "");
        return c->err;
    }
    uint64_t nt_at = c->pos;
    f->n_tensors = cur_u64(c);
    uint64_t nkv_at = c->pos;
    f->n_kv = cur_u64(c);
    if (c->err) return c->err;
    /* Minimum sizes: a kv is key length (8) + >= 1 key byte + type (4) + >= 1
     * value byte; a tensor info is name length (8) + n_dims (4) + type (4) +
     * offset (8). Counts must also fit the 32-bit indices of the name sets. */
    c->section = "metadata";
    bool fits = cur_count_fits(c, f->n_kv, 14, "kv count", nkv_at);
    c->section = "tensor info";
    fits = fits && cur_count_fits(c, f->n_tensors, 24, "tensor count", nt_at);
    if (!fits || f->n_kv >= UINT32_MAX || f->n_tensors >= UINT32_MAX) {
        cur_fail(c, MOE_EFORMAT, "absurd %s count %llu at offset %llu", f->n_kv >= UINT32_MAX ? "kv" : "tensor",
                 (unsigned long long)(f->n_kv >= UINT32_MAX ? f->n_kv : f->n_tensors),
                 (unsigned long long)(f->n_kv >= UINT32_MAX ? nkv_at : nt_at));
        f->n_kv = f->n_tensors = 0; /* nothing allocated: gguf_close must not walk them */
        return c->err;
    }
    f->kv = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kv);
    g->kv_names = calloc(f->n_kv ? f->n_kv : 1, sizeof *g->kv_names);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    g->t_names = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *g->t_names);
    if (!f->kv || !g->kv_names || !f->tensors || !g->t_names ||
        nameset_init(&g->kv_set, f->n_kv) || nameset_init(&g->t_set, f->n_tensors)) {
        cur_fail(c, MOE_ENOMEM, "out of memory for %llu kvs and %llu tensors",
                 (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors);
        return c->err;
    }

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    c->section = "metadata";
    c->ctx_kind = "key";
    for (uint64_t i = 0; i < f->n_kv && !c->err; i++) {
        gguf_kv *kv = &f->kv[i];
        c->ctx_index = (int64_t)i;
        c->ctx_name.ptr = NULL;
        kv->offset = c->pos;
        gguf_str key = cur_str(c, "key");
        if (c->err) break;
        if (key.len == 0) {
            cur_fail(c, MOE_EFORMAT, "empty key at offset %llu%s", (unsigned long long)kv->offset,
                     cur_ctx(c, ctx, sizeof ctx));
            break;
        }
        c->ctx_name = key;
        if (memchr(key.ptr, 0, key.len)) {
            /* keys are used as C strings: an embedded NUL would make two
             * different keys look equal */
            cur_fail(c, MOE_EFORMAT, "invalid key '%s' at offset %llu: contains a NUL byte",
                     show(nm, sizeof nm, key.ptr, key.len), (unsigned long long)kv->offset);
            break;
        }
        g->kv_names[i] = key;
        int64_t dup = nameset_add(&g->kv_set, g->kv_names, (uint32_t)i);
        if (dup >= 0) {
            cur_fail(c, MOE_EFORMAT, "duplicate key '%s' at offset %llu (first at offset %llu)",
                     show(nm, sizeof nm, key.ptr, key.len), (unsigned long long)kv->offset,
                     (unsigned long long)f->kv[dup].offset);
            break;
        }
        uint64_t type_at = c->pos;
        kv->type = cur_u32(c);
        if (c->err) break;
        parse_value(c, kv, type_at);
        if (!c->err && key.len == 17 && memcmp(key.ptr, "general.alignment", 17) == 0) {
            check_alignment_kv(c, kv);
            if (!c->err) f->alignment = kv->v.u;
        }
    }
    if (c->err) return c->err;

    c->section = "tensor info";
    c->ctx_kind = "tensor";
    for (uint64_t i = 0; i < f->n_tensors && !c->err; i++) {
        c->ctx_index = (int64_t)i;
        c->ctx_name.ptr = NULL;
        parse_tensor_info(c, &f->tensors[i], &g->t_names[i]);
        if (c->err) break;
        int64_t dup = nameset_add(&g->t_set, g->t_names, (uint32_t)i);
        if (dup >= 0) {
            const gguf_str *n = &g->t_names[i];
            cur_fail(c, MOE_EFORMAT, "duplicate tensor name '%s' at offset %llu (first at offset %llu)",
                     show(nm, sizeof nm, n->ptr, n->len), (unsigned long long)f->tensors[i].info_offset,
                     (unsigned long long)f->tensors[dup].info_offset);
        }
    }
    if (c->err) return c->err;
    c->ctx_kind = NULL;

    if (!align_up(c->pos, f->alignment, &f->data_offset)) {
        cur_fail(c, MOE_EFORMAT, "bad alignment: header end %llu aligned to %llu overflows",
                 (unsigned long long)c->pos, (unsigned long long)f->alignment);
        return c->err;
    }
    /* A file without tensors may end right after its metadata (vocab-only
     * files do); one with tensors needs its data section. */
    if (f->n_tensors && f->data_offset > f->size) {
        const gguf_str *n = &g->t_names[0];
        cur_fail(c, MOE_EFORMAT, "truncated tensor data: the data section (for tensor '%s' and %llu more) "
                 "starts at offset %llu, the file has %llu bytes", show(nm, sizeof nm, n->ptr, n->len),
                 (unsigned long long)(f->n_tensors - 1), (unsigned long long)f->data_offset,
                 (unsigned long long)f->size);
        return c->err;
    }
    check_tensor_data(c, g);
    if (!c->err) fix_misaligned(c, g);
    if (c->err) return c->err;

    /* Success: copy keys and names into one NUL-terminated pool. Their total
     * length is bounded by the file size, so this cannot overflow. */
    uint64_t total = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) total += g->kv_names[i].len + 1;
    for (uint64_t i = 0; i < f->n_tensors; i++) total += g->t_names[i].len + 1;
    g->pool = malloc(total ? total : 1);
    if (!g->pool) {
        cur_fail(c, MOE_ENOMEM, "out of memory for %llu bytes of names", (unsigned long long)total);
        return c->err;
    }
    char *p = g->pool;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        memcpy(p, g->kv_names[i].ptr, g->kv_names[i].len);
        p[g->kv_names[i].len] = 0;
        f->kv[i].key = p;
        g->kv_names[i].ptr = p;
        p += g->kv_names[i].len + 1;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        uint64_t len = g->t_names[i].len;
        if (len) memcpy(p, g->t_names[i].ptr, len);
        p[len] = 0;
        f->tensors[i].name = p;
        g->t_names[i].ptr = p;
        p += len + 1;
    }
    return MOE_OK;
}

static int open_common(gguf_impl *g, gguf_file **out, char *err, size_t errlen) {
    int rc = parse(g, err, errlen);
    if (rc != MOE_OK) {
        gguf_close(&g->f);
        *out = NULL;
        return rc;
    }
    *out = &g->f;
    return MOE_OK;
}

int gguf_open_memory(const void *data, size_t size, const char *name,
                     gguf_file **out, char *err, size_t errlen) {
    *out = NULL;
    if (!data && size) return moe_errf(err, errlen, MOE_EINVAL, "%s: NULL buffer", name ? name : "(memory)");
    gguf_impl *g = calloc(1, sizeof *g);
    if (!g || !(g->f.path = strdup(name ? name : "(memory)"))) {
        free(g);
        return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", name ? name : "(memory)");
    }
    g->f.map = data;
    g->f.size = size;
    return open_common(g, out, err, errlen);
}

static int open_one(const char *path, gguf_file **out, char *err, size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return moe_errf(err, errlen, MOE_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return moe_errf(err, errlen, MOE_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return moe_errf(err, errlen, MOE_EIO, "%s: not a regular file", path);
    }
    gguf_impl *g = calloc(1, sizeof *g);
    if (!g || !(g->f.path = strdup(path))) {
        free(g);
        close(fd);
        return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path);
    }
    g->f.size = (uint64_t)st.st_size;
    if (st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(g->f.path);
            free(g);
            return moe_errf(err, errlen, MOE_EIO, "%s: cannot map %lld bytes: %s", path,
                            (long long)st.st_size, strerror(e));
        }
        g->f.map = m;
        g->mapped = true;
        g->map_len = (uint64_t)st.st_size;
    }
    close(fd);
    return open_common(g, out, err, errlen);
}

/* ---- split models ----------------------------------------------------------- */

#define SPLIT_MAX 9999   /* llama.cpp names parts with %05d; no real model comes near */

/* A split part's split.no and split.count: MOE_OK, 1 when the file has no
 * split.count, else an error naming the file and the key. */
static int split_keys(const gguf_file *f, uint32_t *no, uint32_t *count, char *err, size_t errlen) {
    int rc = gguf_get_u32(f, "split.count", count, err, errlen);
    if (rc) return rc;
    if (*count == 0 || *count > SPLIT_MAX)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: split.count %u is not in 1..%d", f->path, *count, SPLIT_MAX);
    rc = gguf_get_u32(f, "split.no", no, err, errlen);
    if (rc == 1) return moe_errf(err, errlen, MOE_EFORMAT, "%s: split.count %u without split.no", f->path, *count);
    if (rc) return rc;
    if (*no >= *count)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: split.no %u is not below split.count %u", f->path, *no, *count);
    return MOE_OK;
}

/* The parts' tensors joined into f's table (names and data stay in the
 * parts' memory); a name in two files is an error naming both. */
static int split_join(gguf_file *f, char *err, size_t errlen) {
    gguf_impl *g = (gguf_impl *)f;
    uint64_t total = f->n_tensors;
    for (uint32_t i = 0; i < f->n_parts; i++) total += f->parts[i]->n_tensors;
    if (total > UINT32_MAX - 1) return moe_errf(err, errlen, MOE_EFORMAT, "%s: %llu tensors over the split", f->path, (unsigned long long)total);
    int rc;
    gguf_tensor *ts = calloc(total ? total : 1, sizeof *ts);
    gguf_str *names = calloc(total ? total : 1, sizeof *names);
    const char **from = calloc(total ? total : 1, sizeof *from);
    nameset set = {0};
    if (!ts || !names || !from || nameset_init(&set, total)) {
        free(ts); free(names); free(from); free(set.slot);
        return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory joining the split", f->path);
    }
    uint64_t k = 0;
    for (uint32_t p = 0; p <= f->n_parts; p++) {
        const gguf_file *pf = p == 0 ? f : f->parts[p - 1];
        for (uint64_t i = 0; i < pf->n_tensors; i++, k++) {
            ts[k] = pf->tensors[i];
            names[k] = (gguf_str){ts[k].name, strlen(ts[k].name)};
            from[k] = pf->path;
            const int64_t dup = nameset_add(&set, names, (uint32_t)k);
            if (dup >= 0) {
                rc = moe_errf(err, errlen, MOE_EFORMAT, "tensor '%s' is in two files of the split: %s and %s", ts[k].name,
                              from[dup], pf->path);
                free(ts); free(names); free(from); free(set.slot);
                return rc;
            }
        }
    }
    free(from);
    int64_t want = -1;
    rc = gguf_get_i64(f, "split.tensors.count", &want, err, errlen);
    if (rc == 0 && (uint64_t)want != total)
        rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: split.tensors.count is %lld, the %u files hold %llu tensors", f->path,
                      (long long)want, f->n_parts + 1, (unsigned long long)total);
    if (rc < 0) {
        free(ts); free(names); free(set.slot);
        return rc;
    }
    free(f->tensors);
    free(g->t_names);
    free(g->t_set.slot);
    f->tensors = ts;
    f->n_tensors = total;
    g->t_names = names;
    g->t_set = set;
    return MOE_OK;
}

/* The files after the first: PREFIX-0000i-of-0000N.gguf beside it, each
 * checked to be part i of N. */
static int split_open(gguf_file *f, char *err, size_t errlen) {
    uint32_t no = 0, count = 1;
    int rc = split_keys(f, &no, &count, err, errlen);
    if (rc == 1 || (rc == MOE_OK && count == 1)) return MOE_OK;
    if (rc) return rc;
    char tail[40];
    snprintf(tail, sizeof tail, "-%05u-of-%05u.gguf", no + 1, count);
    const size_t pl = strlen(f->path), tl = strlen(tail);
    if (pl < tl || strcmp(f->path + pl - tl, tail))
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: split %u of %u, but its name does not end in %s (gguf-split's naming)",
                        f->path, no + 1, count, tail);
    if (no != 0)
        return moe_errf(err, errlen, MOE_EINVAL, "%s: is split %u of %u; open the first, %.*s-00001-of-%05u.gguf", f->path,
                        no + 1, count, (int)(pl - tl), f->path, count);
    if (!(f->parts = calloc(count - 1, sizeof *f->parts)))
        return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", f->path);
    char *name = malloc(pl + 1);
    if (!name) return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", f->path);
    for (uint32_t i = 1; i < count && rc == MOE_OK; i++) {
        snprintf(name, pl + 1, "%.*s-%05u-of-%05u.gguf", (int)(pl - tl), f->path, i + 1, count);
        char why[MOE_ERR_LEN];
        rc = open_one(name, &f->parts[i - 1], why, sizeof why);
        if (rc) { moe_errf(err, errlen, rc, "%s: split %u of %u: %s", f->path, i + 1, count, why); break; }
        f->n_parts = i;
        uint32_t pno = 0, pcount = 0;
        rc = split_keys(f->parts[i - 1], &pno, &pcount, err, errlen);
        if (rc == 1) rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: no split.count: not a part of %s", name, f->path);
        else if (rc == MOE_OK && (pno != i || pcount != count))
            rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: split.no %u, split.count %u: expected part %u of %u (split.no %u)", name,
                          pno, pcount, i + 1, count, i);
    }
    free(name);
    return rc ? rc : split_join(f, err, errlen);
}

int gguf_open(const char *path, gguf_file **out, char *err, size_t errlen) {
    int rc = open_one(path, out, err, errlen);
    if (rc) return rc;
    if ((rc = split_open(*out, err, errlen))) {
        gguf_close(*out);
        *out = NULL;
    }
    return rc;
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
    if (!f || !key) return NULL;
    const gguf_impl *g = (const gguf_impl *)f;
    int64_t i = nameset_find(&g->kv_set, g->kv_names, key, strlen(key));
    return i < 0 ? NULL : &f->kv[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name) return NULL;
    const gguf_impl *g = (const gguf_impl *)f;
    int64_t i = nameset_find(&g->t_set, g->t_names, name, strlen(name));
    return i < 0 ? NULL : &f->tensors[i];
}

/* ---- typed getters ------------------------------------------------------- */

static int type_error(const gguf_file *f, const gguf_kv *kv, const char *expected, char *err, size_t errlen) {
    if (kv->type == GGUF_ARRAY)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: key '%s' at offset %llu has type array of %s, expected %s",
                        f->path, kv->key, (unsigned long long)kv->offset, gguf_vtype_name(kv->v.arr.type), expected);
    return moe_errf(err, errlen, MOE_EFORMAT, "%s: key '%s' at offset %llu has type %s, expected %s",
                    f->path, kv->key, (unsigned long long)kv->offset, gguf_vtype_name(kv->type), expected);
}

/* Integer value of kv as a (negative flag, magnitude) pair; false if not an integer type. */
static bool kv_int(const gguf_kv *kv, bool *neg, uint64_t *mag) {
    if (vtype_is_uint(kv->type)) { *neg = false; *mag = kv->v.u; return true; }
    if (vtype_is_sint(kv->type)) {
        *neg = kv->v.i < 0;
        *mag = *neg ? (uint64_t)0 - (uint64_t)kv->v.i : (uint64_t)kv->v.i;
        return true;
    }
    return false;
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    bool neg; uint64_t mag;
    if (!kv_int(kv, &neg, &mag)) return type_error(f, kv, "u32 (any integer type)", err, errlen);
    if (neg || mag > UINT32_MAX)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: key '%s' at offset %llu: value %s%llu (%s) does not fit u32",
                        f->path, key, (unsigned long long)kv->offset, neg ? "-" : "", (unsigned long long)mag,
                        gguf_vtype_name(kv->type));
    *out = (uint32_t)mag;
    return MOE_OK;
}

int gguf_get_i64(const gguf_file *f, const char *key, int64_t *out, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    bool neg; uint64_t mag;
    if (!kv_int(kv, &neg, &mag)) return type_error(f, kv, "i64 (any integer type)", err, errlen);
    if (!neg && mag > (uint64_t)INT64_MAX)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: key '%s' at offset %llu: value %llu (%s) does not fit i64",
                        f->path, key, (unsigned long long)kv->offset, (unsigned long long)mag,
                        gguf_vtype_name(kv->type));
    *out = vtype_is_sint(kv->type) ? kv->v.i : (int64_t)mag;
    return MOE_OK;
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_F32 && kv->type != GGUF_F64) return type_error(f, kv, "f32 or f64", err, errlen);
    *out = (float)kv->v.f;
    return MOE_OK;
}

int gguf_get_bool(const gguf_file *f, const char *key, bool *out, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_BOOL) return type_error(f, kv, "bool", err, errlen);
    *out = kv->v.u != 0;
    return MOE_OK;
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_STRING) return type_error(f, kv, "string", err, errlen);
    *out = kv->v.s;
    return MOE_OK;
}

int gguf_get_i32_array(const gguf_file *f, const char *key, int32_t *out, size_t cap,
                       size_t *n, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 1;
    uint32_t et = kv->v.arr.type;
    if (kv->type != GGUF_ARRAY || !(vtype_is_uint(et) || vtype_is_sint(et)))
        return type_error(f, kv, "array of integers", err, errlen);
    uint32_t sz = vtype_size(et);
    const uint8_t *p = kv->v.arr.data;
    for (uint64_t i = 0; i < kv->v.arr.n; i++) {
        gguf_kv e = {.type = et};
        decode_scalar(&e, et, p + i * sz);
        bool neg = false; uint64_t mag = 0;
        kv_int(&e, &neg, &mag);
        if (neg ? mag > (uint64_t)INT32_MAX + 1 : mag > INT32_MAX)
            return moe_errf(err, errlen, MOE_EFORMAT, "%s: key '%s' at offset %llu: element %llu = %s%llu "
                            "(%s) does not fit i32", f->path, key, (unsigned long long)kv->offset,
                            (unsigned long long)i, neg ? "-" : "", (unsigned long long)mag, gguf_vtype_name(et));
        if (i < cap) out[i] = neg ? (int32_t)(0 - (int64_t)mag) : (int32_t)mag;
    }
    *n = (size_t)kv->v.arr.n;
    return MOE_OK;
}

/* ---- the writer ----------------------------------------------------------- */

typedef struct wbuf { uint8_t *p; size_t len, cap; bool oom; } wbuf;

static void wb_put(wbuf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (n > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) { b->oom = true; return; }
            cap *= 2;
        }
        uint8_t *np = realloc(b->p, cap);
        if (!np) { b->oom = true; return; }
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
}
static void wb_u32(wbuf *b, uint32_t v) { wb_put(b, &v, 4); }
static void wb_u64(wbuf *b, uint64_t v) { wb_put(b, &v, 8); }
static void wb_str(wbuf *b, const void *s, uint64_t len) { wb_u64(b, len); wb_put(b, s, (size_t)len); }

typedef struct wkv { char *key; uint32_t type; uint8_t *val; size_t vlen; } wkv;
typedef struct wtensor {
    char *name; uint32_t type, n_dims; int64_t ne[GGUF_MAX_DIMS];
    uint8_t *data; uint64_t nbytes;
} wtensor;

struct gguf_writer {
    uint32_t alignment;
    wkv *kv; size_t n_kv, cap_kv;
    wtensor *t; size_t n_t, cap_t;
    int err;                   /* first error from an add call, reported by write */
    char msg[MOE_ERR_LEN];
};

static int w_fail(gguf_writer *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int w_fail(gguf_writer *w, int code, const char *fmt, ...) {
    if (!w->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->msg, sizeof w->msg, fmt, ap);
        va_end(ap);
        w->err = code;
    }
    return code;
}

gguf_writer *gguf_writer_new(uint32_t alignment) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = alignment ? alignment : GGUF_DEFAULT_ALIGNMENT;
    if (w->alignment & (w->alignment - 1))
        w_fail(w, MOE_EINVAL, "writer alignment %u is not a power of two", alignment);
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) { free(w->kv[i].key); free(w->kv[i].val); }
    for (size_t i = 0; i < w->n_t; i++) { free(w->t[i].name); free(w->t[i].data); }
    free(w->kv);
    free(w->t);
    free(w);
}

/* Takes ownership of the serialized value in b (freed on failure). */
static int w_add(gguf_writer *w, const char *key, uint32_t type, wbuf *b) {
    if (!w) { free(b->p); return MOE_EINVAL; }
    if (!key || !*key) { free(b->p); return w_fail(w, MOE_EINVAL, "empty key"); }
    if (b->oom) { free(b->p); return w_fail(w, MOE_ENOMEM, "out of memory for key '%s'", key); }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        wkv *nk = realloc(w->kv, cap * sizeof *nk);
        if (!nk) { free(b->p); return w_fail(w, MOE_ENOMEM, "out of memory for key '%s'", key); }
        w->kv = nk;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) { free(b->p); return w_fail(w, MOE_ENOMEM, "out of memory for key '%s'", key); }
    w->kv[w->n_kv++] = (wkv){k, type, b->p, b->len};
    return MOE_OK;
}

static int w_scalar(gguf_writer *w, const char *key, uint32_t type, const void *v) {
    wbuf b = {0};
    wb_put(&b, v, vtype_size(type));
    return w_add(w, key, type, &b);
}

int gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) { return w_scalar(w, key, GGUF_U32, &v); }
int gguf_w_i32(gguf_writer *w, const char *key, int32_t v) { return w_scalar(w, key, GGUF_I32, &v); }
int gguf_w_u64(gguf_writer *w, const char *key, uint64_t v) { return w_scalar(w, key, GGUF_U64, &v); }
int gguf_w_f32(gguf_writer *w, const char *key, float v) { return w_scalar(w, key, GGUF_F32, &v); }
int gguf_w_bool(gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return w_scalar(w, key, GGUF_BOOL, &b);
}

int gguf_w_str(gguf_writer *w, const char *key, const char *v) {
    wbuf b = {0};
    if (!v) return w ? w_fail(w, MOE_EINVAL, "NULL string for key '%s'", key ? key : "") : MOE_EINVAL;
    wb_str(&b, v, strlen(v));
    return w_add(w, key, GGUF_STRING, &b);
}

static int w_array(gguf_writer *w, const char *key, uint32_t et, const void *v, size_t n) {
    wbuf b = {0};
    if (n && !v) return w ? w_fail(w, MOE_EINVAL, "NULL array for key '%s'", key ? key : "") : MOE_EINVAL;
    wb_u32(&b, et);
    wb_u64(&b, n);
    wb_put(&b, v, n * vtype_size(et));
    return w_add(w, key, GGUF_ARRAY, &b);
}

int gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, size_t n) {
    return w_array(w, key, GGUF_I32, v, n);
}
int gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, size_t n) {
    return w_array(w, key, GGUF_F32, v, n);
}

int gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, size_t n) {
    wbuf b = {0};
    if (n && !v) return w ? w_fail(w, MOE_EINVAL, "NULL array for key '%s'", key ? key : "") : MOE_EINVAL;
    wb_u32(&b, GGUF_STRING);
    wb_u64(&b, n);
    for (size_t i = 0; i < n; i++) {
        if (!v[i]) { free(b.p); return w ? w_fail(w, MOE_EINVAL, "NULL string %zu in key '%s'", i, key ? key : "") : MOE_EINVAL; }
        wb_str(&b, v[i], strlen(v[i]));
    }
    return w_add(w, key, GGUF_ARRAY, &b);
}

/* Serializes a scalar of type t from a reader kv (values were widened on read). */
static void wb_scalar_from_kv(wbuf *b, uint32_t t, const gguf_kv *kv) {
    uint8_t u8; uint16_t u16; uint32_t u32; float f32;
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: u8 = (uint8_t)kv->v.u; wb_put(b, &u8, 1); break;
    case GGUF_U16: case GGUF_I16: u16 = (uint16_t)kv->v.u; wb_put(b, &u16, 2); break;
    case GGUF_U32: case GGUF_I32: u32 = (uint32_t)kv->v.u; wb_put(b, &u32, 4); break;
    case GGUF_U64: case GGUF_I64: wb_put(b, &kv->v.u, 8); break;
    case GGUF_F32: f32 = (float)kv->v.f; wb_put(b, &f32, 4); break;
    case GGUF_F64: wb_put(b, &kv->v.f, 8); break;
    default: break;
    }
}

int gguf_w_kv(gguf_writer *w, const gguf_kv *kv) {
    if (!w || !kv) return MOE_EINVAL;
    const char *key = kv->key ? kv->key : "";
    wbuf b = {0};
    if (kv->type == GGUF_STRING) {
        if (kv->v.s.len && !kv->v.s.ptr) return w_fail(w, MOE_EINVAL, "NULL string for key '%s'", key);
        wb_str(&b, kv->v.s.ptr, kv->v.s.len);
    } else if (kv->type == GGUF_ARRAY) {
        uint32_t et = kv->v.arr.type;
        uint64_t n = kv->v.arr.n;
        if (et == GGUF_ARRAY || et >= GGUF_VTYPE_COUNT)
            return w_fail(w, MOE_EINVAL, "key '%s': bad array element type %u", key, et);
        wb_u32(&b, et);
        wb_u64(&b, n);
        if (et == GGUF_STRING) {
            if (n && !kv->v.arr.strs) { free(b.p); return w_fail(w, MOE_EINVAL, "key '%s': NULL string array", key); }
            for (uint64_t i = 0; i < n; i++) wb_str(&b, kv->v.arr.strs[i].ptr, kv->v.arr.strs[i].len);
        } else {
            uint64_t bytes;
            if (!moe_mul_ok(n, vtype_size(et), &bytes) || bytes > SIZE_MAX || (n && !kv->v.arr.data)) {
                free(b.p);
                return w_fail(w, MOE_EINVAL, "key '%s': bad array of %llu %s", key,
                              (unsigned long long)n, gguf_vtype_name(et));
            }
            wb_put(&b, kv->v.arr.data, (size_t)bytes);
        }
    } else if (vtype_size(kv->type)) {
        wb_scalar_from_kv(&b, kv->type, kv);
    } else {
        return w_fail(w, MOE_EINVAL, "key '%s': unknown value type %u", key, kv->type);
    }
    return w_add(w, kv->key, kv->type, &b);
}

int gguf_w_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                  const int64_t *ne, const void *data, uint64_t nbytes) {
    if (!w) return MOE_EINVAL;
    if (!name) return w_fail(w, MOE_EINVAL, "NULL tensor name");
    const moe_type_info *gt = moe_type_get(type);
    if (!gt) return w_fail(w, MOE_EINVAL, "tensor '%s': unknown tensor type %u", name, type);
    if (n_dims > GGUF_MAX_DIMS || (n_dims && !ne))
        return w_fail(w, MOE_EINVAL, "tensor '%s': %u dimensions (max %d)", name, n_dims, GGUF_MAX_DIMS);
    uint64_t nel = 1, want;
    for (uint32_t d = 0; d < n_dims; d++)
        if (ne[d] <= 0 || !moe_mul_ok(nel, (uint64_t)ne[d], &nel) || nel > (uint64_t)INT64_MAX)
            return w_fail(w, MOE_EINVAL, "tensor '%s': invalid shape (dimension %u is %lld)", name, d, (long long)ne[d]);
    if ((n_dims ? (uint64_t)ne[0] : 1) % gt->block)
        return w_fail(w, MOE_EINVAL, "tensor '%s': row length %lld is not a multiple of block size %u of type %s",
                      name, (long long)(n_dims ? ne[0] : 1), gt->block, gt->name);
    if (!moe_mul_ok(nel / gt->block, gt->block_bytes, &want) || want != nbytes)
        return w_fail(w, MOE_EINVAL, "tensor '%s': size mismatch: %llu bytes given, type %s and its shape imply %llu",
                      name, (unsigned long long)nbytes, gt->name, (unsigned long long)want);
    if (nbytes > SIZE_MAX || (nbytes && !data))
        return w_fail(w, MOE_EINVAL, "tensor '%s': no data", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return w_fail(w, MOE_ENOMEM, "out of memory for tensor '%s'", name);
        w->t = nt;
        w->cap_t = cap;
    }
    wtensor t = {.name = strdup(name), .type = type, .n_dims = n_dims, .nbytes = nbytes};
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = (uint32_t)d < n_dims ? ne[d] : 1;
    t.data = malloc(nbytes ? (size_t)nbytes : 1);
    if (!t.name || !t.data) {
        free(t.name);
        free(t.data);
        return w_fail(w, MOE_ENOMEM, "out of memory for tensor '%s' (%llu bytes)", name, (unsigned long long)nbytes);
    }
    if (nbytes) memcpy(t.data, data, (size_t)nbytes);
    w->t[w->n_t++] = t;
    return MOE_OK;
}

/* Full write with EINTR / short-write handling. */
static int write_all(int fd, const void *p, size_t n) {
    const uint8_t *s = p;
    while (n) {
        ssize_t k = write(fd, s, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        s += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Checks uniqueness and general.alignment, then builds everything before the
 * tensor data (header, metadata, tensor infos, padding) into hb. */
static int build_header(gguf_writer *w, const char *path, wbuf *hb, char *err, size_t errlen) {
    int rc = MOE_OK;
    nameset ks = {0}, ts = {0};
    gguf_str *kn = calloc(w->n_kv ? w->n_kv : 1, sizeof *kn);
    gguf_str *tn = calloc(w->n_t ? w->n_t : 1, sizeof *tn);
    if (!kn || !tn || nameset_init(&ks, w->n_kv) || nameset_init(&ts, w->n_t)) {
        rc = moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    bool has_align = false;
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *kv = &w->kv[i];
        kn[i] = (gguf_str){kv->key, strlen(kv->key)};
        if (nameset_add(&ks, kn, (uint32_t)i) >= 0) {
            rc = moe_errf(err, errlen, MOE_EINVAL, "%s: duplicate key '%s' (added twice)", path, kv->key);
            goto out;
        }
        if (strcmp(kv->key, "general.alignment") == 0) {
            uint64_t a = 0;
            if (vtype_is_uint(kv->type)) memcpy(&a, kv->val, vtype_size(kv->type));
            if (a != w->alignment) {
                rc = moe_errf(err, errlen, MOE_EINVAL, "%s: key general.alignment (%s %llu) does not match "
                              "the writer's alignment %u", path, gguf_vtype_name(kv->type),
                              (unsigned long long)a, w->alignment);
                goto out;
            }
            has_align = true;
        }
    }
    for (size_t i = 0; i < w->n_t; i++) {
        tn[i] = (gguf_str){w->t[i].name, strlen(w->t[i].name)};
        if (nameset_add(&ts, tn, (uint32_t)i) >= 0) {
            rc = moe_errf(err, errlen, MOE_EINVAL, "%s: duplicate tensor name '%s' (added twice)", path, w->t[i].name);
            goto out;
        }
    }
    /* A non-default alignment must be in the file for readers to find the
     * data; it goes after the caller's keys. */
    bool add_align = !has_align && w->alignment != GGUF_DEFAULT_ALIGNMENT;
    wb_put(hb, "GGUF", 4);
    wb_u32(hb, 3);
    wb_u64(hb, w->n_t);
    wb_u64(hb, w->n_kv + (add_align ? 1 : 0));
    for (size_t i = 0; i < w->n_kv; i++) {
        wb_str(hb, w->kv[i].key, kn[i].len);
        wb_u32(hb, w->kv[i].type);
        wb_put(hb, w->kv[i].val, w->kv[i].vlen);
    }
    if (add_align) {
        wb_str(hb, "general.alignment", 17);
        wb_u32(hb, GGUF_U32);
        wb_u32(hb, w->alignment);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        wb_str(hb, t->name, tn[i].len);
        wb_u32(hb, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) wb_u64(hb, (uint64_t)t->ne[d]);
        wb_u32(hb, t->type);
        wb_u64(hb, off);
        if (!align_up(off + t->nbytes, w->alignment, &off)) {
            rc = moe_errf(err, errlen, MOE_EINVAL, "%s: tensor data too large", path);
            goto out;
        }
    }
    /* The data section starts aligned; a file without tensors ends here. */
    if (w->n_t) {
        static const uint8_t zeros[64];
        size_t pad = (w->alignment - hb->len % w->alignment) % w->alignment;
        while (pad) { size_t k = pad < sizeof zeros ? pad : sizeof zeros; wb_put(hb, zeros, k); pad -= k; }
    }
    if (hb->oom) rc = moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory for the header", path);
out:
    free(kn);
    free(tn);
    free(ks.slot);
    free(ts.slot);
    return rc;
}

static int write_padding(int fd, uint64_t n) {
    static const uint8_t zeros[4096];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (write_all(fd, zeros, k)) return -1;
        n -= k;
    }
    return 0;
}

int gguf_writer_write(gguf_writer *w, const char *path, char *err, size_t errlen) {
    if (!w || !path) return moe_errf(err, errlen, MOE_EINVAL, "gguf writer: NULL argument");
    if (w->err) return moe_errf(err, errlen, w->err, "%s: %s", path, w->msg);
    wbuf hb = {0};
    int rc = build_header(w, path, &hb, err, errlen);
    if (rc != MOE_OK) { free(hb.p); return rc; }

    /* Same directory as the target, so the rename is atomic. */
    size_t tl = strlen(path) + 32;
    char *tmp = malloc(tl);
    if (!tmp) { free(hb.p); return moe_errf(err, errlen, MOE_ENOMEM, "%s: out of memory", path); }
    snprintf(tmp, tl, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = moe_errf(err, errlen, MOE_EIO, "%s: cannot create %s: %s", path, tmp, strerror(errno));
        free(tmp);
        free(hb.p);
        return rc;
    }
    const char *step = "write";
    bool ok = write_all(fd, hb.p, hb.len) == 0;
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        ok = write_all(fd, t->data, (size_t)t->nbytes) == 0 &&
             write_padding(fd, (w->alignment - t->nbytes % w->alignment) % w->alignment) == 0;
    }
    if (ok && fsync(fd) != 0) { ok = false; step = "fsync"; }
    int e = errno;
    if (close(fd) != 0 && ok) { ok = false; step = "close"; e = errno; }
    if (ok && rename(tmp, path) != 0) { ok = false; step = "rename"; e = errno; }
    if (!ok) {
        unlink(tmp);
        rc = moe_errf(err, errlen, MOE_EIO, "%s: %s of %s failed: %s", path, step, tmp, strerror(e));
    } else {
        /* Make the rename itself durable; failure here loses nothing written. */
        char *dir = strdup(path);
        if (dir) {
            char *slash = strrchr(dir, '/');
            const char *d = slash ? (slash == dir ? "/" : (*slash = 0, dir)) : ".";
            int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dfd >= 0) { (void)fsync(dfd); close(dfd); }
            free(dir);
        }
    }
    free(tmp);
    free(hb.p);
    return rc;
}
