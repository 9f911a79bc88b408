/* test_isa.c — the SIMD level descriptors (src/isa) and their choice:
 *  - each level's descriptor pairs its own quant and attention tables;
 *  - what a level needs covers its Makefile list (the flags its files were
 *    compiled with) and what those imply (avx2 -> avx, avx512f -> avx2);
 *  - with extensions cleared by MOEFAST_CPU_MASK (in a fresh child each:
 *    the choice is made once per process) a level needing one of them is
 *    not chosen, moe_set_isa names the missing one, MOEFAST_ISA warns with
 *    it, and a forward pass of a reference tiny model still gives the logits
 *    of the scalar level, bit for bit;
 *  - bad MOEFAST_CPU_MASK entries warn and change nothing. */
#include "check.h"
#include "isa/isa.h"
#include "quant/quant.h"
#include "attention/attn.h"
#include "moefast.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const LEVEL[MOE_ISA_COUNT] = {"scalar", "avx2", "avx512"};

static bool in_list(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return true;
    return false;
}

static void test_descriptors(void) {
    static const moe_attn_kernels *const ATTN[MOE_ISA_COUNT] = {&moe_attn_scalar, &moe_attn_avx2, &moe_attn_avx512};
    for (int i = 0; i < MOE_ISA_COUNT; i++) {
        const moe_isa_table *t = moe_isa_table_entry((moe_isa)i);
        CHECK(t != NULL);
        if (!t) continue;
        CHECK_EQ_INT(t->isa, i);
        CHECK(strcmp(t->name, LEVEL[i]) == 0);
        CHECK_EQ_INT(t->quant->isa, i);
        CHECK(strcmp(t->quant->name, LEVEL[i]) == 0);
        CHECK_MSG(t->attn == ATTN[i], "%s: attention table of another level", t->name);
        /* every extension of the Makefile's list is needed (need.h knows it) */
        const uint64_t need = moe_isa_need_bits(t);
        char name[64];
        for (const char *s = t->built_with; *s;) {
            const size_t n = strcspn(s, " ");
            snprintf(name, sizeof name, "%.*s", (int)n, s);
            const int f = moe_cpu_feature_by_name(name);
            CHECK_MSG(f >= 0 && (need & MOE_CPU_BIT(f)), "%s: built with -m%s, which it does not check", t->name, name);
            s += n + (s[n] == ' ');
        }
        /* and no AVX-512 extension it was not built with */
        for (int f = 0; f < MOE_CPU_COUNT; f++)
            if ((need & MOE_CPU_BIT(f)) && strncmp(moe_cpu_feature_name(f), "avx512", 6) == 0)
                CHECK_MSG(in_list(t->built_with, moe_cpu_feature_name(f)), "%s needs %s", t->name, moe_cpu_feature_name(f));
        char why[256];
        if (moe_isa_table_for((moe_isa)i)) CHECK_MSG(moe_isa_missing((moe_isa)i, why, sizeof why)[0] == 0, "%s", why);
    }
    const uint64_t n2 = moe_isa_need_bits(moe_isa_table_entry(MOE_ISA_AVX2));
    const uint64_t n5 = moe_isa_need_bits(moe_isa_table_entry(MOE_ISA_AVX512));
    CHECK(in_list(moe_isa_table_entry(MOE_ISA_AVX2)->built_with, "avx2"));
    CHECK(in_list(moe_isa_table_entry(MOE_ISA_AVX512)->built_with, "avx512f"));
    /* implied by the compiler: -mavx2 enables avx, -mavx512f avx2 */
    CHECK(n2 & MOE_CPU_BIT(MOE_CPU_AVX));
    CHECK(n5 & MOE_CPU_BIT(MOE_CPU_AVX2));
    CHECK_MSG((n2 & ~n5) == 0, "avx512 needs less than avx2");
    CHECK(moe_isa_table_entry(MOE_ISA_COUNT) == NULL);
    for (int f = 0; f < MOE_CPU_COUNT; f++) CHECK_EQ_INT(moe_cpu_feature_by_name(moe_cpu_feature_name(f)), f);
    CHECK_EQ_INT(moe_cpu_feature_by_name("AVX512VNNI"), MOE_CPU_AVX512VNNI);
    CHECK_EQ_INT(moe_cpu_feature_by_name("sse9"), -1);
    CHECK(moe_cpu_feature_name(MOE_CPU_COUNT) == NULL);
}

/* ---- in a child, with MOEFAST_CPU_MASK / MOEFAST_ISA set -------------------- */

static int32_t g_toks[6] = {1, 17, 33, 2, 50, 9};

/* Logits of the last of g_toks at the level in use. */
static float *forward_logits(const char *path, int *nv) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    if (moe_model_load(path, NULL, &m, err, sizeof err)) { fprintf(stderr, "%s\n", err); return NULL; }
    *nv = moe_model_n_vocab(m);
    moe_session_params sp = {.n_ctx = 16, .n_threads = 1};
    moe_session *s = NULL;
    float *lg = NULL;
    if (moe_session_new(m, &sp, &s, err, sizeof err) == MOE_OK) {
        lg = malloc(sizeof(float) * (size_t)*nv);
        if (moe_session_forward(s, g_toks, 6, lg, false) != MOE_OK) { free(lg); lg = NULL; }
        moe_session_free(s);
    } else {
        fprintf(stderr, "%s\n", err);
    }
    moe_model_free(m);
    return lg;
}

/* The forward pass at the chosen level equals the scalar level's: laguna
 * (vendored too: never skipped in a clone), and gpt-oss's BF16 / MXFP4 file
 * (sinks, biases, MXFP4 experts) when ../shared has it. */
static void check_forward_file(const char *rel);
static void check_forward(void) {
    check_forward_file("oracle/laguna-tiny-q8_0.gguf");
    check_forward_file("oracle/gpt-oss-tiny-bf16-mxfp4.gguf");
}

static void check_forward_file(const char *rel) {
    char err[MOE_ERR_LEN];
    const char *p = check_ref(rel);
    if (!p) return;
    int nv = 0, nv0 = 0;
    float *a = forward_logits(p, &nv);
    const char *lvl = moe_isa_name();
    CHECK_EQ_INT(moe_set_isa("scalar", err, sizeof err), MOE_OK);
    float *b = forward_logits(p, &nv0);
    CHECK_MSG(a && b && nv == nv0, "forward at %s failed", lvl);
    if (a && b) CHECK_MSG(memcmp(a, b, sizeof(float) * (size_t)nv) == 0, "%s logits differ from scalar's", lvl);
    printf("MOEFAST_CPU_MASK=%s: %s forward at %s, %d logits compared with scalar's\n", getenv("MOEFAST_CPU_MASK"), rel, lvl,
           nv);
    CHECK_EQ_INT(moe_set_isa(lvl, err, sizeof err), MOE_OK);   /* the next file at the chosen level again */
    free(a);
    free(b);
}

/* Level choice with the features of `mask` (MOEFAST_CPU_MASK syntax) cleared:
 * f is one of them (-1: none known), raw the CPU's own features; fwd: also
 * a forward pass at the level chosen. */
static void child_checks(int f, uint64_t raw, bool fwd) {
    const uint64_t have = moe_cpu_features();
    if (f >= 0) CHECK_MSG(!(have & MOE_CPU_BIT(f)), "%s still reported", moe_cpu_feature_name(f));
    CHECK_MSG((have & ~raw) == 0, "masking added features");
    char err[MOE_ERR_LEN];
    for (int i = 1; i < MOE_ISA_COUNT; i++) {
        const moe_isa_table *t = moe_isa_table_entry((moe_isa)i);
        const bool needs = f >= 0 && (moe_isa_need_bits(t) & MOE_CPU_BIT(f));
        const bool could = (moe_isa_need_bits(t) & ~raw) == 0; /* this CPU runs it unmasked */
        if (!could) continue;
        CHECK_MSG((moe_isa_table_for((moe_isa)i) == NULL) == needs, "%s offered=%d with %s cleared", t->name,
                  moe_isa_table_for((moe_isa)i) != NULL, f >= 0 ? moe_cpu_feature_name(f) : "nothing");
        err[0] = 0;
        const int rc = moe_set_isa(t->name, err, sizeof err);
        if (needs) {
            CHECK_EQ_INT(rc, MOE_EUNSUPPORTED);
            CHECK_STR_CONTAINS(err, moe_cpu_feature_name(f));
            CHECK_STR_CONTAINS(err, "MOEFAST_CPU_MASK");
            CHECK_MSG((int)moe_isa_best() < i, "best %d", (int)moe_isa_best());
            CHECK_STR_CONTAINS(moe_isa_support(), moe_cpu_feature_name(f));
        } else {
            CHECK_EQ_INT(rc, MOE_OK);
        }
    }
    moe_set_isa("auto", err, sizeof err);
    if (fwd) check_forward();
}

/* Runs child_checks(f, raw, fwd) in a fresh process with MOEFAST_CPU_MASK=mask
 * and MOEFAST_ISA=isa (NULL: unset); returns its exit status, its stderr in buf. */
static int in_child(const char *mask, const char *isa, int f, uint64_t raw, bool fwd, char *buf, size_t cap) {
    int pfd[2];
    buf[0] = 0;
    if (pipe(pfd) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        dup2(pfd[1], 2);
        setenv("MOEFAST_CPU_MASK", mask, 1);
        if (isa) setenv("MOEFAST_ISA", isa, 1);
        else unsetenv("MOEFAST_ISA");
        child_checks(f, raw, fwd);
        fflush(stdout);
        fflush(stderr);
        _exit(check_failures_ ? 1 : 0);
    }
    close(pfd[1]);
    return check_child_result(pfd[0], pid, buf, cap);
}

static void test_masks(uint64_t raw) {
    char out[4096], mask[64];
    /* each extension some level needs, cleared alone */
    const uint64_t need = moe_isa_need_bits(moe_isa_table_entry(MOE_ISA_AVX512)) |
                          moe_isa_need_bits(moe_isa_table_entry(MOE_ISA_AVX2));
    int tried = 0;
    for (int f = 0; f < MOE_CPU_COUNT; f++) {
        if (!(need & raw & MOE_CPU_BIT(f))) continue;
        snprintf(mask, sizeof mask, "-%s", moe_cpu_feature_name(f));
        const int rc = in_child(mask, NULL, f, raw, f == MOE_CPU_AVX512VNNI || f == MOE_CPU_BMI2, out, sizeof out);
        CHECK_MSG(rc == 0, "MOEFAST_CPU_MASK=%s: child failed (%d): %s", mask, rc, out);
        CHECK_MSG(out[0] == 0, "MOEFAST_CPU_MASK=%s: unexpected output: %s", mask, out);
        tried++;
    }
    printf("extensions cleared one at a time: %d\n", tried);
    /* VBMI and BF16 are in no level's build: clearing them keeps every level */
    int rc = in_child("-avx512vbmi,-avx512bf16", NULL, MOE_CPU_AVX512VBMI, raw, true, out, sizeof out);
    CHECK_MSG(rc == 0, "vbmi/bf16 cleared: %s", out);
    /* a forced level the mask removed: one warning naming what it lacks */
    if (raw & MOE_CPU_BIT(MOE_CPU_AVX512VNNI)) {
        rc = in_child("-avx512vnni", "avx512", MOE_CPU_AVX512VNNI, raw, false, out, sizeof out);
        CHECK_MSG(rc == 0, "forced avx512 without vnni: %s", out);
        CHECK_STR_CONTAINS(out, "MOEFAST_ISA=avx512");
        CHECK_STR_CONTAINS(out, "avx512vnni");
        CHECK_MSG(strchr(out, '\n') == strrchr(out, '\n'), "more than one line: %s", out);
    }
    /* bad entries: a warning each, nothing cleared */
    rc = in_child("-sse9,avx2,,-", NULL, -1, raw, false, out, sizeof out);
    CHECK_MSG(rc == 0, "bad mask: %s", out);
    CHECK_STR_CONTAINS(out, "'-sse9'");
    CHECK_STR_CONTAINS(out, "'avx2'");
    CHECK_STR_CONTAINS(out, "'-'");
}

int main(void) {
    /* the CPU's own features, from a child without a mask */
    int pfd[2];
    uint64_t raw = 0;
    if (pipe(pfd) == 0) {
        pid_t pid = fork();
        if (pid == 0) {
            unsetenv("MOEFAST_CPU_MASK");
            const uint64_t have = moe_cpu_features();
            ssize_t w = write(pfd[1], &have, sizeof have);
            _exit(w == (ssize_t)sizeof have ? 0 : 1);
        }
        close(pfd[1]);
        CHECK(read(pfd[0], &raw, sizeof raw) == (ssize_t)sizeof raw);
        close(pfd[0]);
        waitpid(pid, NULL, 0);
    }
    printf("this CPU:");
    for (int f = 0; f < MOE_CPU_COUNT; f++)
        if (raw & MOE_CPU_BIT(f)) printf(" %s", moe_cpu_feature_name(f));
    printf("\n");
    test_masks(raw);
    test_descriptors();
    printf("levels: %s\n", moe_isa_support());
    return check_report("test_isa");
}
