/* test_gguf.c — GGUF reader and writer: round trips, rewrite byte-equality on
 * the shared oracle files, every shared file opening, the malformed corpus
 * (tests/data/malformed, one file per error class), every truncation of a
 * small file, and random byte mutations (no crash, ASan-clean). */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "base/util.h"
#include "moefast.h"

static char tmpdir[256];

static size_t count_tmp_leftovers(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && strstr(e->d_name, ".tmp.")) n++;
    if (d) closedir(d);
    return n;
}

static void fill_bytes(uint8_t *p, size_t n, uint64_t seed) {
    moe_rng r;
    moe_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)moe_rng_next(&r);
}

/* ---- (a) writer -> reader round trip ------------------------------------ */

typedef struct { const char *name; uint32_t type, n_dims; int64_t ne[4]; uint64_t nbytes; } tspec;
static const tspec TENSORS[] = {
    {"t.f32", 0, 2, {8, 3, 1, 1}, 8 * 3 * 4},
    {"t.f16", 1, 1, {16, 1, 1, 1}, 32},
    {"t.bf16", 30, 3, {4, 2, 3, 1}, 48},
    {"t.q8_0", 8, 2, {64, 2, 1, 1}, 4 * 34},
    {"t.q4_k", 12, 2, {256, 2, 1, 1}, 2 * 144},
    {"t.nvfp4", 40, 2, {128, 3, 1, 1}, 6 * 36},
    {"t.mxfp4", 39, 4, {32, 1, 1, 2}, 2 * 17},
    {"t.i32", 26, 1, {5, 1, 1, 1}, 20},
    {"t.scalar", 0, 0, {1, 1, 1, 1}, 4},
};
#define N_TENSORS (sizeof TENSORS / sizeof TENSORS[0])

static const uint8_t A_U8[] = {0, 1, 255};
static const int8_t A_I8[] = {-128, 0, 127};
static const uint16_t A_U16[] = {0, 65535, 7};
static const int16_t A_I16[] = {-32768, 32767, -1};
static const uint32_t A_U32[] = {0, 4000000000u};
static const int32_t A_I32[] = {-2147483647 - 1, 2147483647, 4};
static const float A_F32[] = {1.5f, -0.0f, 1e-30f};
static const uint8_t A_BOOL[] = {1, 0, 1, 1};
static const uint64_t A_U64[] = {UINT64_MAX, 1};
static const int64_t A_I64[] = {INT64_MIN, INT64_MAX};
static const double A_F64[] = {3.141592653589793, -2.5e300};
static const struct { uint32_t type; const void *data; uint64_t n; } ARRS[] = {
    {GGUF_U8, A_U8, 3}, {GGUF_I8, A_I8, 3}, {GGUF_U16, A_U16, 3}, {GGUF_I16, A_I16, 3},
    {GGUF_U32, A_U32, 2}, {GGUF_I32, A_I32, 3}, {GGUF_F32, A_F32, 3}, {GGUF_BOOL, A_BOOL, 4},
    {GGUF_U64, A_U64, 2}, {GGUF_I64, A_I64, 2}, {GGUF_F64, A_F64, 2}, {GGUF_I32, A_I32, 0},
};
static const char *const STRS[] = {"", "hello", "\xff\xfe not utf-8 \xc0\xaf", "ünïcödé ✓", "with\nnewline"};

static uint32_t vsize(uint32_t t) {
    static const uint8_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < 13 ? sz[t] : 0;
}

static bool str_eq(gguf_str s, const char *c) {
    return s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0;
}

static void add_all_kvs(gguf_writer *w) {
    CHECK_EQ_INT(gguf_w_u32(w, "k.u32", 4000000000u), 0);
    CHECK_EQ_INT(gguf_w_i32(w, "k.i32", -12345), 0);
    CHECK_EQ_INT(gguf_w_u64(w, "k.u64", UINT64_MAX - 3), 0);
    CHECK_EQ_INT(gguf_w_f32(w, "k.f32", -1.25e-7f), 0);
    CHECK_EQ_INT(gguf_w_bool(w, "k.bool", true), 0);
    CHECK_EQ_INT(gguf_w_bool(w, "k.bool0", false), 0);
    CHECK_EQ_INT(gguf_w_str(w, "k.str", "a string"), 0);
    CHECK_EQ_INT(gguf_w_str(w, "k.empty_str", ""), 0);
    CHECK_EQ_INT(gguf_w_arr_i32(w, "k.arr_i32", A_I32, 3), 0);
    CHECK_EQ_INT(gguf_w_arr_f32(w, "k.arr_f32", A_F32, 3), 0);
    CHECK_EQ_INT(gguf_w_arr_str(w, "k.arr_str", STRS, 5), 0);
    /* the remaining scalar types through the generic path */
    gguf_kv kv;
    memset(&kv, 0, sizeof kv);
    kv.key = "g.u8"; kv.type = GGUF_U8; kv.v.u = 200; CHECK_EQ_INT(gguf_w_kv(w, &kv), 0);
    kv.key = "g.i8"; kv.type = GGUF_I8; kv.v.i = -100; CHECK_EQ_INT(gguf_w_kv(w, &kv), 0);
    kv.key = "g.u16"; kv.type = GGUF_U16; kv.v.u = 60000; CHECK_EQ_INT(gguf_w_kv(w, &kv), 0);
    kv.key = "g.i16"; kv.type = GGUF_I16; kv.v.i = -30000; CHECK_EQ_INT(gguf_w_kv(w, &kv), 0);
    kv.key = "g.i64"; kv.type = GGUF_I64; kv.v.i = INT64_MIN + 5; CHECK_EQ_INT(gguf_w_kv(w, &kv), 0);
    kv.key = "g.f64"; kv.type = GGUF_F64; kv.v.f = 1.0 / 3.0; CHECK_EQ_INT(gguf_w_kv(w, &kv), 0);
    for (size_t i = 0; i < sizeof ARRS / sizeof ARRS[0]; i++) {
        char key[32];
        snprintf(key, sizeof key, "g.arr%zu", i);
        memset(&kv, 0, sizeof kv);
        kv.key = key; kv.type = GGUF_ARRAY;
        kv.v.arr.type = ARRS[i].type; kv.v.arr.n = ARRS[i].n; kv.v.arr.data = ARRS[i].data;
        CHECK_EQ_INT(gguf_w_kv(w, &kv), 0);
    }
    gguf_str gs[5];
    for (int i = 0; i < 5; i++) gs[i] = (gguf_str){STRS[i], strlen(STRS[i])};
    memset(&kv, 0, sizeof kv);
    kv.key = "g.arr_str"; kv.type = GGUF_ARRAY; kv.v.arr.type = GGUF_STRING; kv.v.arr.n = 5; kv.v.arr.strs = gs;
    CHECK_EQ_INT(gguf_w_kv(w, &kv), 0);
}

static const gguf_kv *find_typed(const gguf_file *f, const char *name, uint32_t type) {
    const gguf_kv *kv = gguf_find_kv(f, name);
    CHECK_MSG(kv && kv->type == type, "%s: missing or type %u", name, kv ? kv->type : 99);
    return kv && kv->type == type ? kv : NULL;
}

static void check_all_kvs(const gguf_file *f) {
    const gguf_kv *kv;
    char err[MOE_ERR_LEN];
#define KV(name, t) (kv = find_typed(f, name, t)) != NULL
    if (KV("k.u32", GGUF_U32)) CHECK(kv->v.u == 4000000000u);
    if (KV("k.i32", GGUF_I32)) CHECK(kv->v.i == -12345);
    if (KV("k.u64", GGUF_U64)) CHECK(kv->v.u == UINT64_MAX - 3);
    if (KV("k.f32", GGUF_F32)) CHECK(kv->v.f == (double)-1.25e-7f);
    if (KV("k.bool", GGUF_BOOL)) CHECK(kv->v.u == 1);
    if (KV("k.bool0", GGUF_BOOL)) CHECK(kv->v.u == 0);
    if (KV("k.str", GGUF_STRING)) CHECK(str_eq(kv->v.s, "a string"));
    if (KV("k.empty_str", GGUF_STRING)) CHECK(kv->v.s.len == 0);
    if (KV("k.arr_i32", GGUF_ARRAY)) CHECK(kv->v.arr.type == GGUF_I32 && kv->v.arr.n == 3 && !memcmp(kv->v.arr.data, A_I32, 12));
    if (KV("k.arr_f32", GGUF_ARRAY)) CHECK(kv->v.arr.type == GGUF_F32 && kv->v.arr.n == 3 && !memcmp(kv->v.arr.data, A_F32, 12));
    const char *skeys[] = {"k.arr_str", "g.arr_str"};
    for (int k = 0; k < 2; k++)
        if (KV(skeys[k], GGUF_ARRAY) && kv->v.arr.type == GGUF_STRING && kv->v.arr.n == 5)
            for (int i = 0; i < 5; i++) CHECK_MSG(str_eq(kv->v.arr.strs[i], STRS[i]), "%s[%d]", skeys[k], i);
    if (KV("g.u8", GGUF_U8)) CHECK(kv->v.u == 200);
    if (KV("g.i8", GGUF_I8)) CHECK(kv->v.i == -100);
    if (KV("g.u16", GGUF_U16)) CHECK(kv->v.u == 60000);
    if (KV("g.i16", GGUF_I16)) CHECK(kv->v.i == -30000);
    if (KV("g.i64", GGUF_I64)) CHECK(kv->v.i == INT64_MIN + 5);
    if (KV("g.f64", GGUF_F64)) CHECK(kv->v.f == 1.0 / 3.0);
    for (size_t i = 0; i < sizeof ARRS / sizeof ARRS[0]; i++) {
        char key[32];
        snprintf(key, sizeof key, "g.arr%zu", i);
        if (KV(key, GGUF_ARRAY))
            CHECK_MSG(kv->v.arr.type == ARRS[i].type && kv->v.arr.n == ARRS[i].n &&
                      (ARRS[i].n == 0 || !memcmp(kv->v.arr.data, ARRS[i].data, ARRS[i].n * vsize(ARRS[i].type))), "%s", key);
    }
#undef KV

    /* typed getters */
    uint32_t u32 = 99; int64_t i64 = 99; float f32 = 0; bool b = false; gguf_str s = {0};
    int32_t arr[8]; size_t n = 0;
    CHECK_EQ_INT(gguf_get_u32(f, "k.u32", &u32, err, sizeof err), 0); CHECK(u32 == 4000000000u);
    CHECK_EQ_INT(gguf_get_u32(f, "g.u8", &u32, err, sizeof err), 0); CHECK(u32 == 200);
    CHECK_EQ_INT(gguf_get_u32(f, "absent.key", &u32, err, sizeof err), 1); CHECK(u32 == 200);
    err[0] = 0;
    CHECK_EQ_INT(gguf_get_u32(f, "k.i32", &u32, err, sizeof err), MOE_EFORMAT);
    CHECK_STR_CONTAINS(err, "k.i32");
    CHECK_EQ_INT(gguf_get_u32(f, "k.u64", &u32, err, sizeof err), MOE_EFORMAT);
    CHECK_EQ_INT(gguf_get_u32(f, "k.str", &u32, err, sizeof err), MOE_EFORMAT);
    CHECK_STR_CONTAINS(err, "'k.str'");
    CHECK_STR_CONTAINS(err, "has type string, expected u32");
    CHECK_EQ_INT(gguf_get_i64(f, "k.i32", &i64, err, sizeof err), 0); CHECK(i64 == -12345);
    CHECK_EQ_INT(gguf_get_i64(f, "g.i64", &i64, err, sizeof err), 0); CHECK(i64 == INT64_MIN + 5);
    CHECK_EQ_INT(gguf_get_i64(f, "k.u64", &i64, err, sizeof err), MOE_EFORMAT);
    CHECK_EQ_INT(gguf_get_i64(f, "k.f32", &i64, err, sizeof err), MOE_EFORMAT);
    CHECK_EQ_INT(gguf_get_f32(f, "k.f32", &f32, err, sizeof err), 0); CHECK(f32 == -1.25e-7f);
    CHECK_EQ_INT(gguf_get_f32(f, "g.f64", &f32, err, sizeof err), 0); CHECK(f32 == (float)(1.0 / 3.0));
    CHECK_EQ_INT(gguf_get_f32(f, "k.u32", &f32, err, sizeof err), MOE_EFORMAT);
    CHECK_STR_CONTAINS(err, "expected f32");
    CHECK_EQ_INT(gguf_get_bool(f, "k.bool", &b, err, sizeof err), 0); CHECK(b);
    CHECK_EQ_INT(gguf_get_bool(f, "k.u32", &b, err, sizeof err), MOE_EFORMAT);
    CHECK_EQ_INT(gguf_get_str(f, "k.str", &s, err, sizeof err), 0); CHECK(str_eq(s, "a string"));
    CHECK_EQ_INT(gguf_get_str(f, "k.arr_str", &s, err, sizeof err), MOE_EFORMAT);
    CHECK_STR_CONTAINS(err, "array of string");
    CHECK_EQ_INT(gguf_get_i32_array(f, "k.arr_i32", arr, 8, &n, err, sizeof err), 0);
    CHECK(n == 3 && arr[0] == A_I32[0] && arr[1] == A_I32[1] && arr[2] == 4);
    CHECK_EQ_INT(gguf_get_i32_array(f, "g.arr0", arr, 2, &n, err, sizeof err), 0); /* u8 elements */
    CHECK(n == 3 && arr[0] == 0 && arr[1] == 1);
    CHECK_EQ_INT(gguf_get_i32_array(f, "g.arr2", arr, 8, &n, err, sizeof err), 0); /* u16 */
    CHECK(n == 3 && arr[1] == 65535);
    CHECK_EQ_INT(gguf_get_i32_array(f, "g.arr4", arr, 8, &n, err, sizeof err), MOE_EFORMAT); /* 4e9 */
    CHECK_STR_CONTAINS(err, "does not fit i32");
    CHECK_EQ_INT(gguf_get_i32_array(f, "k.arr_f32", arr, 8, &n, err, sizeof err), MOE_EFORMAT);
    CHECK_EQ_INT(gguf_get_i32_array(f, "k.u32", arr, 8, &n, err, sizeof err), MOE_EFORMAT);
    CHECK_EQ_INT(gguf_get_i32_array(f, "g.arr11", arr, 8, &n, err, sizeof err), 0); /* empty */
    CHECK(n == 0);
    CHECK(strcmp(gguf_vtype_name(GGUF_F64), "f64") == 0 && strcmp(gguf_vtype_name(77), "unknown") == 0);
}

static void test_round_trip(void) {
    char path[300], err[MOE_ERR_LEN];
    uint8_t *data[N_TENSORS];
    for (uint32_t align = 32; align <= 64; align *= 2) {
        gguf_writer *w = gguf_writer_new(align == 32 ? 0 : align);
        CHECK(w != NULL);
        if (!w) return;
        add_all_kvs(w);
        for (size_t i = 0; i < N_TENSORS; i++) {
            data[i] = malloc(TENSORS[i].nbytes);
            fill_bytes(data[i], TENSORS[i].nbytes, 1000 + i);
            CHECK_EQ_INT(gguf_w_tensor(w, TENSORS[i].name, TENSORS[i].type, TENSORS[i].n_dims, TENSORS[i].ne,
                                       data[i], TENSORS[i].nbytes), 0);
        }
        snprintf(path, sizeof path, "%s/rt%u.gguf", tmpdir, align);
        int rc = gguf_writer_write(w, path, err, sizeof err);
        CHECK_MSG(rc == 0, "%s", err);
        gguf_writer_free(w);
        CHECK_EQ_INT(count_tmp_leftovers(tmpdir, "rt"), 0);
        gguf_file *f = NULL;
        rc = gguf_open(path, &f, err, sizeof err);
        CHECK_MSG(rc == 0, "%s", err);
        if (f) {
            CHECK_EQ_INT(f->version, 3);
            CHECK_EQ_INT(f->alignment, align);
            CHECK_EQ_INT(f->data_offset % align, 0);
            /* the writer adds general.alignment only when it is not the default */
            const gguf_kv *ak = gguf_find_kv(f, "general.alignment");
            CHECK(align == 32 ? ak == NULL : (ak && ak->type == GGUF_U32 && ak->v.u == align));
            CHECK_EQ_INT(f->n_kv, 30 + (align != 32));
            CHECK(strcmp(f->kv[0].key, "k.u32") == 0 && strcmp(f->kv[29].key, "g.arr_str") == 0);
            check_all_kvs(f);
            CHECK_EQ_INT(f->n_tensors, N_TENSORS);
            for (size_t i = 0; i < N_TENSORS && i < f->n_tensors; i++) {
                const gguf_tensor *t = &f->tensors[i];
                CHECK(strcmp(t->name, TENSORS[i].name) == 0);
                CHECK(gguf_find_tensor(f, TENSORS[i].name) == t);
                CHECK_EQ_INT(t->type, TENSORS[i].type);
                CHECK_EQ_INT(t->n_dims, TENSORS[i].n_dims);
                for (int d = 0; d < 4; d++) CHECK_EQ_INT(t->ne[d], TENSORS[i].ne[d]);
                CHECK_EQ_INT(t->nbytes, TENSORS[i].nbytes);
                CHECK_EQ_INT(t->offset % align, 0);
                CHECK(t->data == f->map + f->data_offset + t->offset);
                CHECK_MSG(memcmp(t->data, data[i], t->nbytes) == 0, "tensor %s bytes", t->name);
            }
            CHECK(gguf_find_tensor(f, "nope") == NULL && gguf_find_kv(f, "nope") == NULL);
            CHECK_EQ_INT(f->size % align, 0);
            gguf_close(f);
        }
        for (size_t i = 0; i < N_TENSORS; i++) free(data[i]);
    }
}

/* Writer failures: reported at write, temp removed, target untouched. */
static void test_writer_errors(void) {
    char path[300], err[MOE_ERR_LEN];
    snprintf(path, sizeof path, "%s/target.gguf", tmpdir);
    gguf_writer *w = gguf_writer_new(0);
    gguf_w_str(w, "general.name", "first");
    CHECK_EQ_INT(gguf_writer_write(w, path, err, sizeof err), 0);
    gguf_writer_free(w);
    size_t n0;
    uint8_t *before = check_read_file(path, &n0);
    CHECK(before != NULL);

    /* duplicate key */
    w = gguf_writer_new(0);
    gguf_w_str(w, "general.name", "second");
    gguf_w_u32(w, "a.b", 1);
    gguf_w_u32(w, "a.b", 2);
    err[0] = 0;
    CHECK(gguf_writer_write(w, path, err, sizeof err) < 0);
    CHECK_STR_CONTAINS(err, "duplicate key 'a.b'");
    CHECK_STR_CONTAINS(err, path);
    gguf_writer_free(w);

    /* duplicate tensor */
    float v[32] = {0};
    int64_t ne[1] = {32};
    w = gguf_writer_new(0);
    CHECK_EQ_INT(gguf_w_tensor(w, "x", 0, 1, ne, v, sizeof v), 0);
    CHECK_EQ_INT(gguf_w_tensor(w, "x", 0, 1, ne, v, sizeof v), 0);
    CHECK(gguf_writer_write(w, path, err, sizeof err) < 0);
    CHECK_STR_CONTAINS(err, "duplicate tensor name 'x'");
    gguf_writer_free(w);

    /* size mismatch / bad shapes: the add fails and so does the write */
    w = gguf_writer_new(0);
    CHECK(gguf_w_tensor(w, "y", 0, 1, ne, v, sizeof v - 4) < 0);
    CHECK(gguf_writer_write(w, path, err, sizeof err) < 0);
    CHECK_STR_CONTAINS(err, "size mismatch");
    CHECK_STR_CONTAINS(err, "'y'");
    gguf_writer_free(w);
    w = gguf_writer_new(0);
    int64_t bad[2] = {16, 2};
    CHECK(gguf_w_tensor(w, "q", 8, 2, bad, v, 34) < 0); /* Q8_0 row of 16 */
    CHECK(gguf_w_tensor(w, "u", 5, 1, ne, v, 4) < 0);   /* type 5 does not exist */
    CHECK(gguf_writer_write(w, path, err, sizeof err) < 0);
    CHECK_STR_CONTAINS(err, "not a multiple of block size");
    gguf_writer_free(w);

    /* general.alignment that disagrees with the writer; empty key */
    w = gguf_writer_new(64);
    gguf_w_u32(w, "general.alignment", 32);
    CHECK(gguf_writer_write(w, path, err, sizeof err) < 0);
    CHECK_STR_CONTAINS(err, "general.alignment");
    gguf_writer_free(w);
    w = gguf_writer_new(0);
    CHECK(gguf_w_u32(w, "", 1) < 0);
    CHECK(gguf_writer_write(w, path, err, sizeof err) < 0);
    gguf_writer_free(w);
    w = gguf_writer_new(48);
    CHECK(gguf_writer_write(w, path, err, sizeof err) < 0);
    CHECK_STR_CONTAINS(err, "power of two");
    gguf_writer_free(w);

    size_t n1;
    uint8_t *after = check_read_file(path, &n1);
    CHECK(after && n0 == n1 && memcmp(before, after, n0) == 0);
    CHECK_EQ_INT(count_tmp_leftovers(tmpdir, "target"), 0);
    free(before);
    free(after);

    /* unwritable location */
    w = gguf_writer_new(0);
    CHECK_EQ_INT(gguf_writer_write(w, "/nonexistent-dir-moefast/x.gguf", err, sizeof err), MOE_EIO);
    CHECK_STR_CONTAINS(err, "/nonexistent-dir-moefast/x.gguf");
    gguf_writer_free(w);
}

/* ---- (b) rewrite round trip on the shared files --------------------------- */

static void rewrite_compare(const char *src) {
    char out[300], err[MOE_ERR_LEN];
    gguf_file *f = NULL;
    int rc = gguf_open(src, &f, err, sizeof err);
    CHECK_MSG(rc == 0, "%s", err);
    if (!f) return;
    gguf_writer *w = gguf_writer_new((uint32_t)f->alignment);
    for (uint64_t i = 0; i < f->n_kv; i++) CHECK_EQ_INT(gguf_w_kv(w, &f->kv[i]), 0);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        CHECK_EQ_INT(gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes), 0);
    }
    const char *base = strrchr(src, '/');
    snprintf(out, sizeof out, "%s/rewrite-%s", tmpdir, base ? base + 1 : src);
    rc = gguf_writer_write(w, out, err, sizeof err);
    CHECK_MSG(rc == 0, "%s", err);
    gguf_writer_free(w);
    gguf_close(f);
    CHECK_MSG(check_same_file(src, out), "rewrite of %s is not byte-identical", src);
    unlink(out);
}

/* ---- (c) every shared GGUF opens ------------------------------------------ */

static int open_all_in(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    char path[600], err[MOE_ERR_LEN];
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".gguf") != 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        gguf_file *f = NULL;
        double t0 = moe_now();
        int rc = gguf_open(path, &f, err, sizeof err);
        double ms = (moe_now() - t0) * 1e3;
        CHECK_MSG(rc == 0, "%s", err);
        if (f) {
            printf("  %-40s v%u %4llu kvs %4llu tensors  %.2f ms\n", e->d_name, f->version,
                   (unsigned long long)f->n_kv, (unsigned long long)f->n_tensors, ms);
            const gguf_kv *tok = gguf_find_kv(f, "tokenizer.ggml.tokens");
            CHECK_MSG(tok && tok->type == GGUF_ARRAY && tok->v.arr.type == GGUF_STRING && tok->v.arr.n >= 1000,
                      "%s: tokens", path);
            gguf_str arch = {0};
            CHECK_EQ_INT(gguf_get_str(f, "general.architecture", &arch, err, sizeof err), 0);
            for (uint64_t i = 0; i < f->n_tensors; i++)
                CHECK(f->tensors[i].data + f->tensors[i].nbytes <= f->map + f->size);
            gguf_close(f);
        }
        n++;
    }
    closedir(d);
    return n;
}

static void test_shared(void) {
    /* every GGUF of the reference directories (../shared's, else the
     * vendored copy: 4 models, 3 vocabularies) */
    const char *od = check_ref("oracle"), *vd = check_ref("vocab");
    if (!od || !vd) return;
    int n = open_all_in(od);
    n += open_all_in(vd);
    CHECK(n >= 7);

    /* known facts */
    char err[MOE_ERR_LEN];
    gguf_file *f = NULL;
    const char *p = check_ref("oracle/laguna-tiny-bf16-nvfp4.gguf");
    if (p && gguf_open(p, &f, err, sizeof err) == 0) {
        int32_t hc[8]; size_t n_hc = 0;
        CHECK_EQ_INT(gguf_get_i32_array(f, "laguna.attention.head_count", hc, 8, &n_hc, err, sizeof err), 0);
        CHECK(n_hc == 4 && hc[0] == 4 && hc[1] == 6 && hc[3] == 6);
        uint32_t u = 0;
        CHECK_EQ_INT(gguf_get_u32(f, "laguna.expert_count", &u, err, sizeof err), 0);
        CHECK_EQ_INT(u, 16);
        const gguf_tensor *t = gguf_find_tensor(f, "blk.3.ffn_down_shexp.weight");
        CHECK(t && t->type == 40 && t->ne[0] == 64 && t->ne[1] == 256 && t->nbytes == 256 * 36);
        gguf_close(f);
    }
    p = check_ref("vocab/qwen3-vocab.gguf");
    double t0 = moe_now();
    if (p && gguf_open(p, &f, err, sizeof err) == 0) {
        printf("  qwen3-vocab.gguf (151936 tokens, 151387 merges) parsed in %.2f ms\n", (moe_now() - t0) * 1e3);
        const gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
        CHECK(kv && kv->v.arr.n == 151936);
        CHECK(kv && str_eq(kv->v.arr.strs[151643], "<|endoftext|>"));
        gguf_close(f);
    }

    if ((p = check_ref("oracle/laguna-tiny-bf16-nvfp4.gguf"))) rewrite_compare(p);
    if ((p = check_ref("oracle/qwen3moe-tiny-q8_0-nvfp4-scale2.gguf"))) rewrite_compare(p);
    if ((p = check_ref("vocab/ggml-vocab-gpt-2.gguf"))) rewrite_compare(p); /* no tensors, unpadded end */
}

/* ---- (d) malformed corpus --------------------------------------------------- */

#define MDIR "tests/data/malformed"
static const struct { const char *file; int code; const char *msg, *msg2; } MALFORMED[] = {
    {"empty.gguf", MOE_EFORMAT, "truncated header at offset 0", "need 4 bytes, 0 left"},
    {"bad_magic.gguf", MOE_EFORMAT, "bad magic 'GGUX' at offset 0", "not a GGUF file"},
    {"version1.gguf", MOE_EUNSUPPORTED, "unsupported GGUF version 1 at offset 4", "32-bit counts"},
    {"version4.gguf", MOE_EUNSUPPORTED, "unsupported GGUF version 4 at offset 4", "supported: 2 and 3"},
    {"trunc_header.gguf", MOE_EFORMAT, "truncated header at offset 8", "need 8 bytes, 6 left"},
    {"trunc_metadata.gguf", MOE_EFORMAT, "truncated metadata in key 'tiny.names' at offset", "need 3 bytes, 1 left"},
    {"trunc_tensor_info.gguf", MOE_EFORMAT, "truncated tensor info in tensor 'w.q8' at offset", "left"},
    {"trunc_tensor_data.gguf", MOE_EFORMAT, "truncated tensor data: tensor 'w.f16'", "needs 8 bytes at offset"},
    {"trunc_data_section.gguf", MOE_EFORMAT, "truncated tensor data: the data section", "'w.f32'"},
    {"absurd_kv_count.gguf", MOE_EFORMAT, "absurd kv count 1152921504606846976 at offset 16", "file has 576 bytes"},
    {"absurd_tensor_count.gguf", MOE_EFORMAT, "absurd tensor count 1099511627776 at offset 8", "file has 576 bytes"},
    {"absurd_key_length.gguf", MOE_EFORMAT, "absurd key length 1099511627776 at offset", "in key #2"},
    {"absurd_string_length.gguf", MOE_EFORMAT, "absurd string value length 18446744073709551600", "in key 'general.architecture'"},
    {"absurd_tensor_name_length.gguf", MOE_EFORMAT, "absurd tensor name length 1125899906842624", "in tensor #1"},
    {"absurd_array_length.gguf", MOE_EFORMAT, "absurd array length 1125899906842624", "in key 'tiny.vals'"},
    {"unknown_value_type.gguf", MOE_EFORMAT, "unknown value type 13 at offset", "in key 'tiny.count'"},
    {"unknown_array_type.gguf", MOE_EFORMAT, "unknown value type 99 (array element)", "in key 'tiny.vals'"},
    {"nested_array.gguf", MOE_EFORMAT, "nested array", "in key 'tiny.vals'"},
    {"empty_key.gguf", MOE_EFORMAT, "empty key at offset", "in key #2"},
    {"nul_in_key.gguf", MOE_EFORMAT, "invalid key 'tiny\\x00count' at offset", "contains a NUL byte"},
    {"duplicate_key.gguf", MOE_EFORMAT, "duplicate key 'tiny.count' at offset", "(first at offset"},
    {"alignment_not_pow2.gguf", MOE_EFORMAT, "bad alignment: general.alignment is 48", "power of two"},
    {"alignment_zero.gguf", MOE_EFORMAT, "bad alignment: general.alignment is 0", "at offset"},
    {"alignment_type.gguf", MOE_EFORMAT, "bad alignment: general.alignment has type i32, expected u32", "at offset"},
    {"unknown_tensor_type.gguf", MOE_EFORMAT, "unknown tensor type 4 at offset", "in tensor 'w.q8'"},
    {"too_many_dims.gguf", MOE_EFORMAT, "too many dimensions: 5 (max 4)", "in tensor 'w.f16'"},
    {"zero_dim.gguf", MOE_EFORMAT, "invalid shape [8, 0]: dimension 1 is 0", "in tensor 'w.f32'"},
    {"negative_dim.gguf", MOE_EFORMAT, "invalid shape [-8, 2]: dimension 0 is -8", "in tensor 'w.f32'"},
    {"shape_overflow.gguf", MOE_EFORMAT, "shape overflow: [4294967296, 4294967296]", "in tensor 'w.f32'"},
    {"bad_row_length.gguf", MOE_EFORMAT, "row length 16 is not a multiple of block size 32 of type Q8_0", "in tensor 'w.q8'"},
    {"misaligned_offset.gguf", MOE_EFORMAT, "misaligned data offset: tensor 'w.q8'", "offset 80, not a multiple of the alignment 32"},
    {"offset_out_of_range.gguf", MOE_EFORMAT, "data offset out of range: tensor 'w.f16'", "1099511627776"},
    {"duplicate_tensor.gguf", MOE_EFORMAT, "duplicate tensor name 'w.f32' at offset", "(first at offset"},
    {"nul_in_tensor_name.gguf", MOE_EFORMAT, "invalid tensor name at offset", "in tensor 'w\\x00q8': contains a NUL byte"},
    {"size_mismatch.gguf", MOE_EFORMAT, "size mismatch: tensor 'w.f32'", "is 32 bytes but the next tensor 'w.q8' starts 64 bytes after it"},
    {"overlap.gguf", MOE_EFORMAT, "overlapping tensors: 'w.f32' (data offset 0, 128 bytes) and 'w.q8'", "data offset 64"},
};
#define N_MALFORMED (sizeof MALFORMED / sizeof MALFORMED[0])

static void build_base_with_writer(const char *path) {
    gguf_writer *w = gguf_writer_new(0);
    const char *names[] = {"a", "bc", "def"};
    const int32_t vals[] = {1, 2, 3};
    gguf_w_str(w, "general.architecture", "tiny");
    gguf_w_u32(w, "general.alignment", 32);
    gguf_w_u32(w, "tiny.count", 7);
    gguf_w_arr_str(w, "tiny.names", names, 3);
    gguf_w_arr_i32(w, "tiny.vals", vals, 3);
    static const struct { const char *name; uint32_t type, nd; int64_t ne[2]; uint64_t nbytes; } T[] = {
        {"w.f32", 0, 2, {8, 2}, 64}, {"w.q8", 8, 2, {32, 2}, 68}, {"w.f16", 1, 1, {4, 1}, 8}};
    for (int t = 0; t < 3; t++) {
        uint8_t d[128];
        for (uint64_t i = 0; i < T[t].nbytes; i++) d[i] = (uint8_t)((t * 37 + i * 11) & 0xff);
        CHECK_EQ_INT(gguf_w_tensor(w, T[t].name, T[t].type, T[t].nd, T[t].ne, d, T[t].nbytes), 0);
    }
    char err[MOE_ERR_LEN];
    CHECK_EQ_INT(gguf_writer_write(w, path, err, sizeof err), 0);
    gguf_writer_free(w);
}

static void test_malformed(void) {
    char path[400], err[MOE_ERR_LEN];
    CHECK(N_MALFORMED >= 20);
    for (size_t i = 0; i < N_MALFORMED; i++) {
        snprintf(path, sizeof path, MDIR "/%s", MALFORMED[i].file);
        gguf_file *f = (gguf_file *)1;
        snprintf(err, sizeof err, "(no message)");
        int rc = gguf_open(path, &f, err, sizeof err);
        CHECK_MSG(rc == MALFORMED[i].code, "%s: got %d, want %d: %s", MALFORMED[i].file, rc, MALFORMED[i].code, err);
        CHECK(f == NULL);
        CHECK_STR_CONTAINS(err, MALFORMED[i].msg);
        CHECK_STR_CONTAINS(err, MALFORMED[i].msg2);
        CHECK_STR_CONTAINS(err, path);
        CHECK(strchr(err, '\n') == NULL);
        /* same verdict from memory (exact-size buffer: ASan sees any over-read) */
        size_t n;
        uint8_t *buf = check_read_file(path, &n);
        if (buf) {
            char err2[MOE_ERR_LEN];
            int rc2 = gguf_open_memory(buf, n, MALFORMED[i].file, &f, err2, sizeof err2);
            CHECK_EQ_INT(rc2, rc);
            CHECK(f == NULL);
            free(buf);
        }
    }
    /* every corpus file has an expectation */
    DIR *d = opendir(MDIR);
    CHECK_MSG(d != NULL, "cannot open " MDIR " (run from the repository root)");
    struct dirent *e;
    int seen = 0;
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".gguf") != 0) continue;
        if (strncmp(e->d_name, "odd_", 4) == 0) continue;   /* valid files: test_odd_alignment */
        bool known = false;
        for (size_t i = 0; i < N_MALFORMED; i++) known |= strcmp(MALFORMED[i].file, e->d_name) == 0;
        CHECK_MSG(known, "%s has no expectation in test_gguf.c", e->d_name);
        seen++;
    }
    if (d) closedir(d);
    CHECK_EQ_INT(seen, N_MALFORMED);

    /* The undamaged base: valid, and byte-identical to what our writer
     * makes of the same content (the corpus generator is independent code). */
    char mine[300];
    snprintf(mine, sizeof mine, "%s/base.gguf", tmpdir);
    build_base_with_writer(mine);
    CHECK(check_same_file(MDIR "/base.valid", mine));
    gguf_file *f = NULL;
    CHECK_EQ_INT(gguf_open(MDIR "/base.valid", &f, err, sizeof err), 0);
    gguf_close(f);
}

/* general.alignment 1 and 2 (make_malformed.py's odd_*.gguf): the files are
 * valid and open; a tensor whose data lies where its type cannot be read
 * directly (F32 at an odd offset) comes back in aligned memory holding the
 * file's bytes, so reading it through a typed pointer is defined (UBSan in
 * this build halts on a misaligned load). Refused, with the tensor, offset
 * and alignment, when the copies would not fit in memory. */
static void test_odd_alignment(void) {
    static const struct { const char *file; uint64_t align, n_copied; } ODD[] = {
        {"odd_align1.gguf", 1, 2}, {"odd_align2.gguf", 2, 1},
    };
    char path[400], err[MOE_ERR_LEN];
    for (size_t i = 0; i < sizeof ODD / sizeof ODD[0]; i++) {
        snprintf(path, sizeof path, MDIR "/%s", ODD[i].file);
        size_t n;
        uint8_t *raw = check_read_file(path, &n);
        gguf_file *f = NULL;
        int rc = gguf_open(path, &f, err, sizeof err);
        CHECK_MSG(rc == MOE_OK, "%s", err);
        if (rc || !raw) { gguf_close(f); free(raw); continue; }
        CHECK_EQ_INT(f->alignment, ODD[i].align);
        CHECK_EQ_INT(f->n_copied, ODD[i].n_copied);
        int misplaced = 0;                      /* the file really puts F32 data at a misaligned offset */
        for (uint64_t t = 0; t < f->n_tensors; t++) {
            const gguf_tensor *x = &f->tensors[t];
            const uint64_t at = f->data_offset + x->offset;
            const uintptr_t need = x->type == MOE_T_F32 ? 4 : x->type == MOE_T_F16 ? 2 : 1;
            misplaced += x->type == MOE_T_F32 && at % 4 != 0;
            CHECK_MSG((uintptr_t)x->data % need == 0, "%s: %s data not %zu-byte aligned", ODD[i].file, x->name,
                      (size_t)need);
            CHECK_MSG(at + x->nbytes <= n && memcmp(x->data, raw + at, x->nbytes) == 0, "%s: %s bytes differ",
                      ODD[i].file, x->name);
            if (x->type == MOE_T_F32) {         /* a typed read, as forward.c does */
                const float *v = (const float *)(const void *)x->data;
                float sum = 0;
                for (int64_t k = 0; k < x->ne[0] * x->ne[1]; k++) sum += v[k];
                volatile float sink = sum;      /* the typed read itself is the check (UBSan) */
                (void)sink;
            }
        }
        CHECK_MSG(misplaced == 1, "%s: no F32 tensor at a misaligned offset (the test would be vacuous)", ODD[i].file);
        gguf_close(f);
        /* from memory at an odd address: the same copies */
        uint8_t *buf = malloc(n + 1);
        if (buf) {
            memcpy(buf + 1, raw, n);
            CHECK_EQ_INT(gguf_open_memory(buf + 1, n, ODD[i].file, &f, err, sizeof err), MOE_OK);
            if (f) for (uint64_t t = 0; t < f->n_tensors; t++)
                CHECK((uintptr_t)f->tensors[t].data % (f->tensors[t].type == MOE_T_F32 ? 4 : 1) == 0);
            gguf_close(f);
            free(buf);
        }
        /* no room for the copies: refused with the tensor, offset and alignment */
        setenv("MOEFAST_MEM_AVAILABLE", "16", 1);
        f = (gguf_file *)1;
        rc = gguf_open(path, &f, err, sizeof err);
        unsetenv("MOEFAST_MEM_AVAILABLE");
        CHECK_EQ_INT(rc, MOE_ENOMEM);
        CHECK(f == NULL);
        CHECK_STR_CONTAINS(err, path);
        CHECK_STR_CONTAINS(err, "misaligned tensor data: tensor 'w.");
        CHECK_STR_CONTAINS(err, "-byte aligned");
        CHECK_STR_CONTAINS(err, ODD[i].align == 1 ? "general.alignment 1)" : "general.alignment 2)");
        CHECK_STR_CONTAINS(err, "16 available");
        free(raw);
    }
}

/* Every prefix of a valid file fails cleanly, unless it still holds all the
 * tensor data (only trailing padding cut). Then random byte mutations. */
static void test_truncations_and_mutations(const char *path) {
    size_t n;
    uint8_t *full = check_read_file(path, &n);
    CHECK(full != NULL);
    if (!full) return;
    char err[MOE_ERR_LEN];
    gguf_file *f = NULL;
    CHECK_EQ_INT(gguf_open_memory(full, n, "full", &f, err, sizeof err), 0);
    uint64_t data_end = 0;
    for (uint64_t i = 0; f && i < f->n_tensors; i++) {
        uint64_t e = f->data_offset + f->tensors[i].offset + f->tensors[i].nbytes;
        if (e > data_end) data_end = e;
    }
    gguf_close(f);
    int failures = 0;
    for (size_t len = 0; len < n; len++) {
        uint8_t *buf = malloc(len ? len : 1);
        memcpy(buf, full, len);
        f = (gguf_file *)1;
        err[0] = 0;
        int rc = gguf_open_memory(len ? buf : NULL, len, "prefix", &f, err, sizeof err);
        if (len < data_end) {
            if (rc >= 0 || f != NULL || strstr(err, "prefix: ") != err) failures++;
        } else if (rc != 0) {
            failures++;
        }
        if (rc == 0) gguf_close(f);
        free(buf);
    }
    CHECK_MSG(failures == 0, "%d of %zu prefixes misbehaved", failures, n);

    moe_rng r;
    moe_rng_seed(&r, 42);
    int ok = 0;
    for (int it = 0; it < 3000; it++) {
        uint8_t *buf = malloc(n);
        memcpy(buf, full, n);
        int k = 1 + (int)(moe_rng_next(&r) % 4);
        for (int j = 0; j < k; j++) {
            size_t at = (size_t)(moe_rng_next(&r) % n);
            uint64_t v = moe_rng_next(&r);
            buf[at] = (v & 3) == 0 ? 0xff : (v & 3) == 1 ? 0 : (uint8_t)(v >> 8);
        }
        f = NULL;
        int rc = gguf_open_memory(buf, n, "mutant", &f, err, sizeof err);
        if (rc == 0) {
            ok++;
            for (uint64_t i = 0; i < f->n_tensors; i++)
                CHECK(f->tensors[i].data >= buf && f->tensors[i].data + f->tensors[i].nbytes <= buf + n);
            for (uint64_t i = 0; i < f->n_kv; i++) CHECK(f->kv[i].key[0] != 0);
            gguf_close(f);
        } else {
            CHECK(f == NULL && strstr(err, "mutant: ") == err);
        }
        free(buf);
    }
    printf("  mutations: %d of 3000 still valid\n", ok);
    free(full);
}

/* A 150k-entry string array parses fast and allocates once per array. */
static void test_big_vocab(void) {
    enum { N = 150000 };
    char **s = malloc(N * sizeof *s);
    for (int i = 0; i < N; i++) {
        s[i] = malloc(16);
        snprintf(s[i], 16, "tok%d", i);
    }
    gguf_writer *w = gguf_writer_new(0);
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)s, N);
    char path[300], err[MOE_ERR_LEN];
    snprintf(path, sizeof path, "%s/vocab.gguf", tmpdir);
    CHECK_EQ_INT(gguf_writer_write(w, path, err, sizeof err), 0);
    gguf_writer_free(w);
    gguf_file *f = NULL;
    double t0 = moe_now();
    CHECK_EQ_INT(gguf_open(path, &f, err, sizeof err), 0);
    printf("  150k-string array parsed in %.2f ms\n", (moe_now() - t0) * 1e3);
    if (f) {
        const gguf_kv *kv = gguf_find_kv(f, "tokenizer.ggml.tokens");
        CHECK(kv && kv->v.arr.n == N && str_eq(kv->v.arr.strs[N - 1], "tok149999"));
        gguf_close(f);
    }
    for (int i = 0; i < N; i++) free(s[i]);
    free(s);
    unlink(path);
}

static void test_misc(void) {
    char err[MOE_ERR_LEN];
    gguf_file *f = (gguf_file *)1;
    CHECK_EQ_INT(gguf_open("/nonexistent/file.gguf", &f, err, sizeof err), MOE_EIO);
    CHECK(f == NULL);
    CHECK_STR_CONTAINS(err, "/nonexistent/file.gguf");
    CHECK_EQ_INT(gguf_open(tmpdir, &f, err, sizeof err), MOE_EIO); /* a directory */
    CHECK_STR_CONTAINS(err, "not a regular file");
    gguf_close(NULL);
    gguf_writer_free(NULL);
}

/* gguf.c keeps its own type-size table (so the reader does not depend on
 * the quant module); it must agree with quant.h's moe_type_get for every id:
 * a 2-block tensor is accepted exactly for the ids that exist, with the
 * quant module's block size and bytes, and rejected with one byte more. */
static void test_types_agree_with_quant(void) {
    uint8_t buf[2 * 300] = {0};
    for (uint32_t id = 0; id < 64; id++) {
        const moe_type_info *ti = moe_type_get(id);
        uint32_t block = ti ? ti->block : 1, bytes = ti ? ti->block_bytes : 1;
        int64_t ne[2] = {2 * (int64_t)block, 1};
        gguf_writer *w = gguf_writer_new(0);
        int rc = gguf_w_tensor(w, "t", id, 2, ne, buf, 2 * (uint64_t)bytes);
        CHECK_MSG((rc == 0) == (ti != NULL), "type %u: writer says %d, moe_type_get %s", id, rc, ti ? ti->name : "NULL");
        if (ti) CHECK_MSG(gguf_w_tensor(w, "u", id, 2, ne, buf, 2 * (uint64_t)bytes + 1) < 0, "type %u", id);
        gguf_writer_free(w);
    }
}

static void remove_tmpdir(void) {
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char p[600];
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(tmpdir);
}

/* ---- split models (llama.cpp's gguf-split naming and keys) --------------- */

static int w_u16(gguf_writer *w, const char *key, uint32_t v) {
    gguf_kv kv = {.key = (char *)key, .type = GGUF_U16};
    kv.v.u = v;
    return gguf_w_kv(w, &kv);
}

/* Writes in's tensors into n files PREFIX-0000i-of-0000n.gguf as gguf-split
 * does (the metadata and split.tensors.count in the first, split.no and
 * split.count in each). bad: 0 right; 1 part 2 says split.no 2; 2 part 3
 * repeats the first tensor; 3 split.tensors.count one too many. */
static int write_split(const char *in, const char *prefix, uint32_t n, int bad) {
    char err[MOE_ERR_LEN], path[400];
    gguf_file *f = NULL;
    if (gguf_open(in, &f, err, sizeof err)) { fprintf(stderr, "%s\n", err); return -1; }
    int rc = 0;
    for (uint32_t p = 0; p < n && rc == 0; p++) {
        gguf_writer *w = gguf_writer_new((uint32_t)f->alignment);
        rc |= w_u16(w, "split.no", bad == 1 && p == 1 ? 2 : p);
        rc |= w_u16(w, "split.count", n);
        if (p == 0) {
            rc |= gguf_w_i32(w, "split.tensors.count", (int32_t)f->n_tensors + (bad == 3));
            for (uint64_t i = 0; i < f->n_kv; i++)
                if (strcmp(f->kv[i].key, "general.alignment")) rc |= gguf_w_kv(w, &f->kv[i]);
        }
        for (uint64_t i = p; i < f->n_tensors; i += n) {
            const gguf_tensor *t = &f->tensors[i];
            rc |= gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
        }
        if (bad == 2 && p == 2) {
            const gguf_tensor *t = &f->tensors[0];
            rc |= gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
        }
        snprintf(path, sizeof path, "%s-%05u-of-%05u.gguf", prefix, p + 1, n);
        if (rc == 0 && gguf_writer_write(w, path, err, sizeof err)) { fprintf(stderr, "%s\n", err); rc = -1; }
        gguf_writer_free(w);
    }
    gguf_close(f);
    return rc;
}

static void expect_open_error(const char *path, int code, const char *sub1, const char *sub2) {
    char err[MOE_ERR_LEN] = "";
    gguf_file *f = (gguf_file *)1;
    CHECK_EQ_INT(gguf_open(path, &f, err, sizeof err), code);
    CHECK(f == NULL);
    CHECK_MSG(strstr(err, sub1) && (!sub2 || strstr(err, sub2)), "%s: '%s' lacks '%s' / '%s'", path, err, sub1, sub2 ? sub2 : "");
    CHECK(!strchr(err, '\n'));
}

/* Logits of tokens 1..8 (all positions) of the model at path, or NULL. */
static float *model_logits(const char *path, int *n_vocab) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_session *s = NULL;
    if (moe_model_load(path, NULL, &m, err, sizeof err)) { CHECK_MSG(0, "%s", err); return NULL; }
    *n_vocab = moe_model_n_vocab(m);
    float *l = malloc((size_t)8 * (size_t)*n_vocab * sizeof *l);
    const int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const moe_session_params sp = {.n_ctx = 16, .n_threads = 2};
    if (!l || moe_session_new(m, &sp, &s, err, sizeof err) || moe_session_forward(s, toks, 8, l, true)) {
        CHECK_MSG(0, "%s", s ? moe_session_error(s) : err);
        free(l);
        l = NULL;
    }
    moe_session_free(s);
    moe_model_free(m);
    return l;
}

static void test_split(void) {
    char src[300], prefix[300], first[400], second[400], third[400], moved[400], err[MOE_ERR_LEN];
    snprintf(src, sizeof src, "%s/rt64.gguf", tmpdir);
    snprintf(prefix, sizeof prefix, "%s/sp", tmpdir);
    snprintf(first, sizeof first, "%s-00001-of-00003.gguf", prefix);
    snprintf(second, sizeof second, "%s-00002-of-00003.gguf", prefix);
    snprintf(third, sizeof third, "%s-00003-of-00003.gguf", prefix);
    CHECK(write_split(src, prefix, 3, 0) == 0);
    gguf_file *a = NULL, *b = NULL;
    CHECK(gguf_open(src, &a, err, sizeof err) == MOE_OK);
    CHECK_MSG(gguf_open(first, &b, err, sizeof err) == MOE_OK, "%s", err);
    if (a && b) {
        /* one table: every tensor, its bytes, found by name; the first file's metadata */
        CHECK_EQ_INT(b->n_parts, 2);
        CHECK_EQ_INT(b->n_tensors, a->n_tensors);
        for (uint64_t i = 0; i < a->n_tensors; i++) {
            const gguf_tensor *t = gguf_find_tensor(b, a->tensors[i].name);
            CHECK_MSG(t && t->type == a->tensors[i].type && t->nbytes == a->tensors[i].nbytes &&
                      !memcmp(t->data, a->tensors[i].data, t->nbytes), "tensor %s", a->tensors[i].name);
        }
        check_all_kvs(b);
        CHECK(gguf_find_kv(b, "split.count") && gguf_find_tensor(b, "nope") == NULL);
    }
    gguf_close(a);
    gguf_close(b);
    /* a later part: refused, naming the first */
    expect_open_error(second, MOE_EINVAL, "is split 2 of 3", "sp-00001-of-00003.gguf");
    /* a missing part: names it */
    snprintf(moved, sizeof moved, "%s/moved.gguf", tmpdir);
    CHECK(rename(third, moved) == 0);
    expect_open_error(first, MOE_EIO, "split 3 of 3", "sp-00003-of-00003.gguf: cannot open");
    CHECK(rename(moved, third) == 0);
    /* the first part under another name */
    snprintf(moved, sizeof moved, "%s/renamed.gguf", tmpdir);
    CHECK(rename(first, moved) == 0);
    expect_open_error(moved, MOE_EFORMAT, "does not end in -00001-of-00003.gguf", NULL);
    CHECK(rename(moved, first) == 0);
    /* inconsistent parts */
    CHECK(write_split(src, prefix, 3, 1) == 0);
    expect_open_error(first, MOE_EFORMAT, "sp-00002-of-00003.gguf: split.no 2", "expected part 2 of 3");
    CHECK(write_split(src, prefix, 3, 2) == 0);
    expect_open_error(first, MOE_EFORMAT, "in two files of the split", "sp-00003-of-00003.gguf");
    CHECK(write_split(src, prefix, 3, 3) == 0);
    expect_open_error(first, MOE_EFORMAT, "split.tensors.count", "hold");
    /* a model split in 3 runs bit-identically to the whole file */
    char model[300];
    snprintf(model, sizeof model, "%s/model.gguf", tmpdir);
    snprintf(prefix, sizeof prefix, "%s/msp", tmpdir);
    snprintf(first, sizeof first, "%s-00001-of-00003.gguf", prefix);
    CHECK_MSG(moe_gen_model("qwen3moe", "tiny", NULL, model, err, sizeof err) == MOE_OK, "%s", err);
    CHECK(write_split(model, prefix, 3, 0) == 0);
    int va = 0, vb = 0;
    float *la = model_logits(model, &va), *lb = model_logits(first, &vb);
    CHECK(la && lb && va == vb && va > 0);
    if (la && lb && va == vb) CHECK(memcmp(la, lb, (size_t)8 * (size_t)va * sizeof *la) == 0);
    free(la);
    free(lb);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/moefast-test-gguf-XXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_misc();
    test_types_agree_with_quant();
    test_round_trip();
    test_writer_errors();
    test_malformed();
    test_odd_alignment();
    test_truncations_and_mutations(MDIR "/base.valid");
    char rt[300];
    snprintf(rt, sizeof rt, "%s/rt64.gguf", tmpdir);
    test_truncations_and_mutations(rt);
    test_big_vocab();
    test_shared();
    test_split();
    remove_tmpdir();
    return check_report("test_gguf");
}
