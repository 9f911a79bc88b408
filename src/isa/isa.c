/* isa.c — choosing the SIMD level, once (pthread_once): the CPU's
 * extensions from cpuid and XGETBV, MOEFAST_CPU_MASK (clears some, for
 * tests and diagnosis), then the best level whose needs are all there,
 * unless MOEFAST_ISA or moe_set_isa() picks another. The scalar level's
 * descriptor lives here (compiled with the base flags, like the rest). */
#include "isa/need.h"
#include "isa/isa.h"
#include "quant/quant_internal.h"
#include "attention/attn.h"
#include "base/util.h"
#include "moefast.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static const moe_isa_table ISA_SCALAR = {MOE_ISA_SCALAR, "scalar", moe_isa_need_, "", &moe_kernels_scalar_tab,
                                         &moe_attn_scalar};
extern const moe_isa_table moe_isa_avx2_desc, moe_isa_avx512_desc; /* isa_avx2.c, isa_avx512.c */
static const moe_isa_table *const LEVELS[MOE_ISA_COUNT] = {&ISA_SCALAR, &moe_isa_avx2_desc, &moe_isa_avx512_desc};

typedef struct { const char *name; unsigned leaf, sub, reg, bit, state; } feature;
#define MOE_CPU_ROW_(ID, name, leaf, sub, reg, bit, state) {name, leaf, sub, reg, bit, state},
static const feature FEATURES[MOE_CPU_COUNT] = {MOE_CPU_FEATURES(MOE_CPU_ROW_)};
#undef MOE_CPU_ROW_

const char *moe_cpu_feature_name(int f) { return f >= 0 && f < MOE_CPU_COUNT ? FEATURES[f].name : NULL; }

int moe_cpu_feature_by_name(const char *name) {
    for (int f = 0; name && f < MOE_CPU_COUNT; f++)
        if (strcasecmp(name, FEATURES[f].name) == 0) return f;
    return -1;
}

/* ---- detection -------------------------------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
/* XCR0: which register state the OS saves (bit 1 SSE, 2 YMM upper halves,
 * 5-7 opmasks and ZMM). Read only when the CPU says OSXSAVE. */
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static uint64_t cpu_detect(void) {
    unsigned r1[4] = {0}, r70[4] = {0}, r71[4] = {0}, re1[4] = {0};
    __get_cpuid(1, &r1[0], &r1[1], &r1[2], &r1[3]);
    __get_cpuid_count(7, 0, &r70[0], &r70[1], &r70[2], &r70[3]);
    __get_cpuid_count(7, 1, &r71[0], &r71[1], &r71[2], &r71[3]);
    __get_cpuid(0x80000001u, &re1[0], &re1[1], &re1[2], &re1[3]);
    const uint64_t xcr0 = (r1[2] >> 27 & 1) ? xgetbv0() : 0;
    const bool ymm = (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0;
    uint64_t have = 0;
    for (int f = 0; f < MOE_CPU_COUNT; f++) {
        const feature *x = &FEATURES[f];
        const unsigned *r = x->leaf == 1 ? r1 : x->leaf == 7 ? (x->sub ? r71 : r70) : re1;
        const bool os = x->state == 0 || (x->state == 1 ? ymm : zmm);
        if ((r[x->reg] >> x->bit & 1) && os) have |= MOE_CPU_BIT(f);
    }
    return have;
}
#else
static uint64_t cpu_detect(void) { return 0; }
#endif

/* ---- the choice -------------------------------------------------------- */

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static uint64_t g_raw, g_cleared, g_have; /* cpuid; MOEFAST_CPU_MASK; raw minus cleared */
static bool g_has[MOE_ISA_COUNT];
static moe_isa g_best = MOE_ISA_SCALAR;
static _Atomic int g_active = MOE_ISA_SCALAR;
static char g_support[512];

uint64_t moe_isa_need_bits(const moe_isa_table *t) {
    uint64_t b = 0;
    for (const unsigned char *p = t ? t->need : NULL; p && *p < MOE_CPU_COUNT; p++) b |= MOE_CPU_BIT(*p);
    return b;
}

/* The first name in the level's build list that is not a known feature, or
 * not among its needs (then the compiler enabled it under a macro need.h
 * does not map): the level cannot be checked, so it is not run. */
static bool unknown_built_with(const moe_isa_table *t, char *name, size_t len) {
    const char *s = t->built_with;
    const uint64_t need = moe_isa_need_bits(t);
    while (s && *s) {
        const size_t n = strcspn(s, " ");
        if (n) {
            snprintf(name, len, "%.*s", (int)n, s);
            const int f = moe_cpu_feature_by_name(name);
            if (f < 0 || !(need & MOE_CPU_BIT(f))) return true;
        }
        s += n + (s[n] == ' ');
    }
    return false;
}

/* moe_isa_missing once g_have is known (init_once calls it) */
static char *missing(moe_isa isa, char *buf, size_t len) {
    if (!len) return buf;
    buf[0] = 0;
    const moe_isa_table *t = moe_isa_table_entry(isa);
    if (!t) return buf;
    char name[64];
    if (unknown_built_with(t, name, sizeof name)) {
        snprintf(buf, len, "a run-time check for '%s' (in its Makefile list; need.h does not map it)", name);
        return buf;
    }
    const uint64_t lack = moe_isa_need_bits(t) & ~g_have;
    size_t o = 0;
    for (int f = 0; f < MOE_CPU_COUNT && o < len; f++)
        if (lack & MOE_CPU_BIT(f))
            o += (size_t)snprintf(buf + o, len - o, "%s%s%s", o ? ", " : "", FEATURES[f].name,
                                  g_cleared & MOE_CPU_BIT(f) ? " (cleared by MOEFAST_CPU_MASK)" : "");
    return buf;
}

/* MOEFAST_CPU_MASK="-avx512vbmi,-bmi2": features to treat as absent. */
static uint64_t parse_mask(const char *s) {
    uint64_t m = 0;
    while (s && *s) {
        const size_t n = strcspn(s, ",");
        char tok[64];
        snprintf(tok, sizeof tok, "%.*s", (int)(n < sizeof tok ? n : sizeof tok - 1), s);
        const int f = tok[0] == '-' ? moe_cpu_feature_by_name(tok + 1) : -1;
        if (f >= 0) m |= MOE_CPU_BIT(f);
        else if (n)
            fprintf(stderr, "moefast: warning: MOEFAST_CPU_MASK: '%s' is not -FEATURE, FEATURE a name "
                    "the compiler takes as -mFEATURE (avx2, bmi2, avx512vnni, ...); ignored\n", tok);
        s += n + (s[n] == ',');
    }
    return m;
}

static void init_once(void);
char *moe_isa_missing(moe_isa isa, char *buf, size_t len) {
    pthread_once(&g_once, init_once);
    return missing(isa, buf, len);
}

static int isa_by_name(const char *name) {
    for (int i = 0; i < MOE_ISA_COUNT; i++)
        if (name && strcasecmp(name, LEVELS[i]->name) == 0) return i;
    return -1;
}

static void init_once(void) {
    moe_quant_init_tables();
    g_raw = cpu_detect();
    g_cleared = parse_mask(getenv("MOEFAST_CPU_MASK")) & g_raw;
    g_have = g_raw & ~g_cleared;
    char why[256];
    for (int i = 0; i < MOE_ISA_COUNT; i++) {
        g_has[i] = missing((moe_isa)i, why, sizeof why)[0] == 0;
        if (g_has[i]) g_best = (moe_isa)i;
    }
    if (!g_has[MOE_ISA_SCALAR]) /* the whole binary was built for more than this CPU has */
        fprintf(stderr, "moefast: warning: this build needs %s\n", missing(MOE_ISA_SCALAR, why, sizeof why));
    g_has[MOE_ISA_SCALAR] = true;
    size_t o = 0;
    for (int i = 0; i < MOE_ISA_COUNT && o < sizeof g_support; i++)
        o += (size_t)snprintf(g_support + o, sizeof g_support - o, "%s%s%s%s", i ? (g_has[i] ? ", " : "; ") : "",
                              LEVELS[i]->name, g_has[i] ? "" : " lacks ",
                              g_has[i] ? "" : missing((moe_isa)i, why, sizeof why));
    moe_isa act = g_best;
    const char *env = getenv("MOEFAST_ISA");
    if (env && *env && strcasecmp(env, "auto") != 0) {
        const int want = isa_by_name(env);
        if (want < 0)
            fprintf(stderr, "moefast: warning: MOEFAST_ISA=%s is not one of scalar|avx2|avx512|auto; using %s\n", env,
                    LEVELS[g_best]->name);
        else if (!g_has[want])
            fprintf(stderr, "moefast: warning: MOEFAST_ISA=%s is not supported by this CPU: it lacks %s; using %s\n",
                    env, missing((moe_isa)want, why, sizeof why), LEVELS[g_best]->name);
        else
            act = (moe_isa)want;
    }
    atomic_store(&g_active, (int)act);
}

#define INIT() pthread_once(&g_once, init_once)

const moe_isa_table *moe_isa_table_entry(moe_isa isa) {
    return (int)isa >= 0 && isa < MOE_ISA_COUNT ? LEVELS[isa] : NULL;
}

const moe_isa_table *moe_isa_table_for(moe_isa isa) {
    INIT();
    return (int)isa >= 0 && isa < MOE_ISA_COUNT && g_has[isa] ? LEVELS[isa] : NULL;
}

const moe_isa_table *moe_isa_table_active(void) {
    INIT();
    return LEVELS[atomic_load(&g_active)];
}

moe_isa moe_isa_best(void) {
    INIT();
    return g_best;
}

uint64_t moe_cpu_features(void) {
    INIT();
    return g_have;
}

const moe_kernels *moe_kernels_for(moe_isa isa) {
    const moe_isa_table *t = moe_isa_table_for(isa);
    return t ? t->quant : NULL;
}

const moe_kernels *moe_kernels_active(void) { return moe_isa_table_active()->quant; }

const char *moe_isa_name(void) { return moe_isa_table_active()->name; }

const char *moe_isa_support(void) {
    INIT();
    return g_support;
}

int moe_set_isa(const char *name, char *err, size_t errlen) {
    INIT();
    if (name && strcasecmp(name, "auto") == 0) { /* back to the best level */
        atomic_store(&g_active, (int)g_best);
        return MOE_OK;
    }
    const int want = isa_by_name(name);
    if (want < 0)
        return moe_errf(err, errlen, MOE_EINVAL, "unknown ISA level '%s' (expected scalar, avx2, avx512 or auto)",
                        name ? name : "(null)");
    if (!g_has[want]) {
        char why[256];
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "ISA level '%s' is not supported by this CPU: it lacks %s (best: %s)",
                        LEVELS[want]->name, missing((moe_isa)want, why, sizeof why), LEVELS[g_best]->name);
    }
    atomic_store(&g_active, want);
    return MOE_OK;
}
