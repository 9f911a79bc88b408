/* test_memory.c — files and sizes that used to crash or grow without bound:
 *  - a model whose F32 tensors lie at misaligned offsets (general.alignment 1
 *    or 2) loads and runs, under UBSan (this build halts on a misaligned
 *    load), with logits bit-identical to the same model with alignment 32;
 *  - moe_mem_available and its override MOEFAST_MEM_AVAILABLE;
 *  - with less memory than the repacked weights need: the load streams from
 *    the file mapping (a note says so) with bit-identical logits, act_q8 is
 *    refused with needed vs available bytes;
 *  - a session whose KV cache and scratch do not fit is refused (MOE_ENOMEM,
 *    n_ctx and the bytes named), not killed by the kernel later;
 *  - the bandwidth probe kept between measurements (moe_membw): its buffer
 *    stays mapped and resident while it lives, repeated measurements work,
 *    and the one-shot helpers still give a figure. */
#include <stdint.h>
#include <unistd.h>

#include "check.h"
#include "base/meminfo.h"
#include "gguf/gguf.h"
#include "moefast.h"

#define NTOK 6
static char tmpdir[] = "/tmp/moefast-test-memory-XXXXXX";
static const int32_t TOKS[NTOK] = {588, 418, 515, 478, 560, 429};

static const char *tpath(const char *name) {
    static char p[4][320];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

/* Logits of all NTOK positions (NULL on failure, with the error printed). */
static float *logits_of(const char *path, const char *flags, size_t *n) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags};
    int rc = moe_model_load(path, &lp, &m, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "load %s: %s", path, err);
    if (rc) return NULL;
    moe_session *s = NULL;
    moe_session_params sp = {.n_ctx = 32, .n_threads = 2};
    rc = moe_session_new(m, &sp, &s, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "session %s: %s", path, err);
    *n = (size_t)NTOK * (size_t)moe_model_n_vocab(m);
    float *lg = rc ? NULL : malloc(*n * sizeof *lg);
    if (lg && moe_session_forward(s, TOKS, NTOK, lg, true) != MOE_OK) {
        CHECK_MSG(0, "forward %s: %s", path, moe_session_error(s));
        free(lg);
        lg = NULL;
    }
    moe_session_free(s);
    moe_model_free(m);
    return lg;
}

static void same_logits(const char *a, const char *b, const char *flags, const char *what) {
    size_t na = 0, nb = 0;
    float *x = logits_of(a, flags, &na), *y = logits_of(b, flags, &nb);
    CHECK_MSG(x && y && na == nb && memcmp(x, y, na * sizeof *x) == 0, "%s (flags %s): logits differ", what, flags);
    free(x);
    free(y);
}

/* src rewritten with general.alignment `align`; a string key "test.pad" is
 * lengthened until the data section starts at `want` mod 4, so that the F32
 * tensors (multiples of 4 bytes) all land at misaligned addresses. */
static int rewrite_aligned(const char *src, const char *dst, uint32_t align, uint64_t want) {
    char err[MOE_ERR_LEN];
    gguf_file *f = NULL;
    if (gguf_open(src, &f, err, sizeof err)) { fprintf(stderr, "%s\n", err); return -1; }
    int rc = -1;
    for (int pad = 0; pad < 4 && rc; pad++) {
        gguf_writer *w = gguf_writer_new(align);
        int wrc = 0;
        for (uint64_t i = 0; i < f->n_kv && !wrc; i++)
            if (strcmp(f->kv[i].key, "general.alignment")) wrc = gguf_w_kv(w, &f->kv[i]);
        char padv[8] = "xxxxxxx";
        padv[pad] = 0;
        if (!wrc) wrc = gguf_w_str(w, "test.pad", padv);
        for (uint64_t i = 0; i < f->n_tensors && !wrc; i++) {
            const gguf_tensor *t = &f->tensors[i];
            int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
            wrc = gguf_w_tensor(w, t->name, t->type, t->n_dims, ne, t->data, t->nbytes);
        }
        if (!wrc) wrc = gguf_writer_write(w, dst, err, sizeof err);
        gguf_writer_free(w);
        if (wrc) { fprintf(stderr, "rewrite: %s\n", err); break; }
        gguf_file *g = NULL;
        if (gguf_open(dst, &g, err, sizeof err) == 0 && g->data_offset % 4 == want) rc = 0;
        gguf_close(g);
    }
    gguf_close(f);
    return rc;
}

static void test_alignment(void) {
    char err[MOE_ERR_LEN], base[320], odd[320];
    snprintf(base, sizeof base, "%s", tpath("base.gguf"));
    snprintf(odd, sizeof odd, "%s", tpath("odd.gguf"));
    /* F32 everywhere (the reference kernels read rows through float *), and
     * a Q8_0 variant (F32 norms and router between odd-sized blocks) */
    static const char *const types[] = {"type=F32", "type=Q8_0"};
    for (int ty = 0; ty < 2; ty++) {
        const char *ov[] = {"n_layer=2", types[ty], NULL};
        int rc = moe_gen_model("qwen3moe", "tiny", ov, base, err, sizeof err);
        CHECK_MSG(rc == MOE_OK, "gen: %s", err);
        if (rc) return;
        static const struct { uint32_t align; uint64_t want; } A[] = {{1, 1}, {2, 2}};
        for (int a = 0; a < 2; a++) {
            CHECK_EQ_INT(rewrite_aligned(base, odd, A[a].align, A[a].want), 0);
            gguf_file *g = NULL;
            CHECK_EQ_INT(gguf_open(odd, &g, err, sizeof err), MOE_OK);
            if (g) {
                CHECK_EQ_INT(g->alignment, A[a].align);
                CHECK_MSG(g->n_copied > 0, "alignment %u, %s: no tensor needed a copy (vacuous)", A[a].align, types[ty]);
            }
            gguf_close(g);
            char what[64];
            snprintf(what, sizeof what, "alignment %u, %s", A[a].align, types[ty]);
            same_logits(base, odd, "default", what);
            same_logits(base, odd, "none", what);        /* the scalar reference kernels */
            unlink(odd);
        }
        unlink(base);
    }
}

static void test_mem_available(void) {
    unsetenv("MOEFAST_MEM_AVAILABLE");
    uint64_t a = moe_mem_available();
    CHECK_MSG(a > (1u << 20), "moe_mem_available() = %llu", (unsigned long long)a);
    setenv("MOEFAST_MEM_AVAILABLE", "123456", 1);
    CHECK_EQ_INT(moe_mem_available(), 123456);
    uint64_t got = 0;
    CHECK(moe_mem_fits(100000, &got) && got == 123456);
    CHECK(!moe_mem_fits(120000, NULL));              /* within 90 % only */
    setenv("MOEFAST_MEM_AVAILABLE", "12x", 1);        /* not a number: ignored */
    /* the system's reading again: above the 120 KiB set before and not 12.
     * Not equal to a second reading: MemAvailable moves while the other
     * tests run beside this one (it did: 24502894592 != 24502743040). */
    const uint64_t v = moe_mem_available();
    CHECK_MSG(v > (1u << 20) && v != 12, "moe_mem_available() with a malformed override = %llu", (unsigned long long)v);
    unsetenv("MOEFAST_MEM_AVAILABLE");
}

/* The model's notes (moefast info prints them through moe_model_print_info). */
static bool has_note(moe_model *m, const char *needle) {
    FILE *f = tmpfile();
    if (!f) return false;
    moe_model_print_info(m, f);
    long n = ftell(f);
    char *b = n > 0 ? malloc((size_t)n + 1) : NULL;
    bool found = false;
    if (b && fseek(f, 0, SEEK_SET) == 0 && fread(b, 1, (size_t)n, f) == (size_t)n) {
        b[n] = 0;
        found = strstr(b, needle) != NULL;
    }
    free(b);
    fclose(f);
    return found;
}

static void test_larger_than_memory(void) {
    char err[MOE_ERR_LEN];
    const char *path = tpath("q8.gguf");
    int rc = moe_gen_model("qwen3moe", "tiny", (const char *const[]){"type=Q8_0", NULL}, path, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "gen: %s", err);
    if (rc) return;
    /* (a) the repack arena (~5 MB) does not fit in 1 MB: streamed from the
     * mapping, noted, logits bit-identical to the repacked load's */
    size_t n1 = 0, n2 = 0;
    float *full = logits_of(path, "default", &n1);
    setenv("MOEFAST_MEM_AVAILABLE", "1000000", 1);
    moe_model *m = NULL;
    rc = moe_model_load(path, NULL, &m, err, sizeof err);
    unsetenv("MOEFAST_MEM_AVAILABLE");
    CHECK_MSG(rc == MOE_OK, "load with 1 MB: %s", err);
    if (m) {
        CHECK_MSG(has_note(m, "not repacked: the repacked weights need"), "no note about the skipped repack");
        CHECK_MSG(has_note(m, "1000000 available; streaming from the file mapping"), "note lacks the bytes");
        moe_session *s = NULL;
        moe_session_params sp = {.n_ctx = 32, .n_threads = 2};
        CHECK_EQ_INT(moe_session_new(m, &sp, &s, err, sizeof err), MOE_OK);
        n2 = (size_t)NTOK * (size_t)moe_model_n_vocab(m);
        float *lg = malloc(n2 * sizeof *lg);
        CHECK(s && lg && moe_session_forward(s, TOKS, NTOK, lg, true) == MOE_OK);
        CHECK_MSG(full && lg && n1 == n2 && memcmp(full, lg, n1 * sizeof *lg) == 0,
                  "streamed logits differ from the repacked load's");
        free(lg);
        moe_session_free(s);
        moe_model_free(m);
    }
    /* with room: repacked, no note (the check above is not vacuous) */
    m = NULL;
    if (moe_model_load(path, NULL, &m, err, sizeof err) == MOE_OK) {
        CHECK_MSG(!has_note(m, "not repacked"), "note without memory pressure");
        moe_model_free(m);
    }
    free(full);

    /* (b) act_q8 needs its a8 layout: refused with needed vs available */
    setenv("MOEFAST_MEM_AVAILABLE", "1000000", 1);
    m = (moe_model *)1;
    moe_load_params lp = {.flags = "+act_q8"};
    rc = moe_model_load(path, &lp, &m, err, sizeof err);
    unsetenv("MOEFAST_MEM_AVAILABLE");
    CHECK_EQ_INT(rc, MOE_ENOMEM);
    CHECK(m == NULL);
    CHECK_STR_CONTAINS(err, path);
    CHECK_STR_CONTAINS(err, "flag act_q8 needs ");
    CHECK_STR_CONTAINS(err, "bytes of repacked weights, 1000000 available");
    CHECK(strchr(err, '\n') == NULL);

    /* (c) a session whose KV cache does not fit: refused up front */
    m = NULL;
    rc = moe_model_load(path, NULL, &m, err, sizeof err);
    CHECK_MSG(rc == MOE_OK, "%s", err);
    if (m) {
        setenv("MOEFAST_MEM_AVAILABLE", "64000000", 1);
        moe_session *s = (moe_session *)1;
        moe_session_params sp = {.n_ctx = 1 << 20, .n_threads = 1};
        rc = moe_session_new(m, &sp, &s, err, sizeof err);
        CHECK_EQ_INT(rc, MOE_ENOMEM);
        CHECK(s == NULL);
        CHECK_STR_CONTAINS(err, "n_ctx 1048576 needs ");
        CHECK_STR_CONTAINS(err, "bytes of KV cache and scratch, 64000000 available; try a smaller --ctx");
        /* a small context still fits in the same budget */
        sp.n_ctx = 64;
        s = NULL;
        CHECK_EQ_INT(moe_session_new(m, &sp, &s, err, sizeof err), MOE_OK);
        moe_session_free(s);
        unsetenv("MOEFAST_MEM_AVAILABLE");
        moe_model_free(m);
    }
    unlink(path);
}

/* moe_proc_status_bytes: a field that exists, and names that do not. */
static void test_proc_status(void) {
    const long long rss = moe_proc_status_bytes("VmRSS"), hwm = moe_proc_status_bytes("VmHWM");
    CHECK_MSG(rss > (1 << 20) && hwm >= rss, "VmRSS %lld, VmHWM %lld", rss, hwm);
    CHECK(moe_proc_status_bytes(NULL) == -1);
    CHECK(moe_proc_status_bytes("") == -1);
    CHECK(moe_proc_status_bytes("VmNoSuchField") == -1);
    CHECK(moe_proc_status_bytes("VmRS") == -1);      /* a prefix of a field is not the field */
    CHECK(moe_proc_status_bytes("Name") == -1);      /* a field that is not a number */
}

static void test_membw(void) {
    const long long before = moe_proc_status_bytes("VmRSS");
    moe_membw *b = moe_membw_new(2);
    CHECK(b != NULL);
    if (!b) return;
    const size_t n = moe_membw_bytes(b);
    CHECK_MSG(n >= ((size_t)512 << 20), "probe buffer %zu bytes", n);
    const double g1 = moe_membw_measure(b), g2 = moe_membw_measure(b);
    CHECK_MSG(g1 > 0.01 && g2 > 0.01 && g1 < 1e5 && g2 < 1e5, "GB/s %.3f %.3f", g1, g2);
    const long long held = moe_proc_status_bytes("VmRSS");   /* touched once and kept: resident between measurements */
    if (before >= 0 && held >= 0)
        CHECK_MSG(held - before >= (long long)(n / 2), "RSS grew %lld bytes for a %zu-byte probe", held - before, n);
    moe_membw_free(b);
    moe_membw *c = moe_membw_new(-3);               /* out of range: every CPU, as moe_measure_read_bandwidth */
    CHECK(c != NULL && moe_membw_measure(c) > 0.01);
    moe_membw_free(c);
    moe_membw_free(NULL);
    CHECK(moe_membw_measure(NULL) == 0.0 && moe_membw_bytes(NULL) == 0);
    CHECK(moe_probe_read_bandwidth(1, (size_t)4 << 20) > 0.01);
}

int main(void) {
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 1; }
    test_proc_status();
    test_membw();
    test_mem_available();
    test_alignment();
    test_larger_than_memory();
    rmdir(tmpdir);
    return check_report("test_memory");
}
