/* kernels.c — choosing the kernel table: cpuid once (pthread_once), the
 * MOEFAST_ISA environment variable, and moe_set_isa(). */
#include "quant/quant_internal.h"
#include "base/util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

static const char *const ISA_NAMES[MOE_ISA_COUNT] = {"scalar", "avx2", "avx512"};

static bool cpu_has(moe_isa isa) {
    switch (isa) {
    case MOE_ISA_SCALAR: return true;
#if defined(__x86_64__) || defined(__i386__)
    case MOE_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    case MOE_ISA_AVX512:
        /* quant_avx512.c and attn_avx512.c use F/BW/VL/DQ plus F16C and FMA;
         * act8_avx512.c also VNNI (vpdpbusd). No VBMI or BF16 instructions,
         * although the Makefile's AVX-512 flags would allow them. */
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
#endif
    default: return false;
    }
}

static const moe_kernels *const TABLES[MOE_ISA_COUNT] = {
    &moe_kernels_scalar_tab, &moe_kernels_avx2_tab, &moe_kernels_avx512_tab,
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static bool g_has[MOE_ISA_COUNT];
static moe_isa g_best = MOE_ISA_SCALAR;
static _Atomic int g_active = MOE_ISA_SCALAR;

static int isa_by_name(const char *name) {
    for (int i = 0; i < MOE_ISA_COUNT; i++)
        if (name && strcasecmp(name, ISA_NAMES[i]) == 0) return i;
    return -1;
}

float moe_f16_f32_tab[65536] __attribute__((aligned(64)));
float moe_e8m0_half_tab[256] __attribute__((aligned(64)));

static void init_once(void) {
    for (uint32_t h = 0; h < 65536; h++) moe_f16_f32_tab[h] = moe_f16_to_f32((uint16_t)h);
    for (int e = 0; e < 256; e++) moe_e8m0_half_tab[e] = moe_e8m0_half((uint8_t)e);
    for (int i = 0; i < MOE_ISA_COUNT; i++) {
        g_has[i] = cpu_has((moe_isa)i);
        if (g_has[i]) g_best = (moe_isa)i;
    }
    moe_isa act = g_best;
    const char *env = getenv("MOEFAST_ISA");
    if (env && *env && strcasecmp(env, "auto") != 0) {
        int want = isa_by_name(env);
        if (want < 0)
            fprintf(stderr, "moefast: warning: MOEFAST_ISA=%s is not one of scalar|avx2|avx512|auto; using %s\n",
                    env, ISA_NAMES[g_best]);
        else if (!g_has[want])
            fprintf(stderr, "moefast: warning: MOEFAST_ISA=%s is not supported by this CPU; using %s\n",
                    env, ISA_NAMES[g_best]);
        else
            act = (moe_isa)want;
    }
    atomic_store(&g_active, (int)act);
}

const moe_kernels *moe_kernels_for(moe_isa isa) {
    pthread_once(&g_once, init_once);
    if ((int)isa < 0 || isa >= MOE_ISA_COUNT || !g_has[isa]) return NULL;
    return TABLES[isa];
}

const moe_kernels *moe_kernels_active(void) {
    pthread_once(&g_once, init_once);
    return TABLES[atomic_load(&g_active)];
}

moe_isa moe_isa_best(void) {
    pthread_once(&g_once, init_once);
    return g_best;
}

const char *moe_isa_name(void) {
    return moe_kernels_active()->name;
}

int moe_set_isa(const char *name, char *err, size_t errlen) {
    pthread_once(&g_once, init_once);
    if (name && strcasecmp(name, "auto") == 0) { /* back to the best level */
        atomic_store(&g_active, (int)g_best);
        return MOE_OK;
    }
    int want = isa_by_name(name);
    if (want < 0)
        return moe_errf(err, errlen, MOE_EINVAL, "unknown ISA level '%s' (expected scalar, avx2, avx512 or auto)",
                        name ? name : "(null)");
    if (!g_has[want])
        return moe_errf(err, errlen, MOE_EUNSUPPORTED, "ISA level '%s' is not supported by this CPU (best: %s)",
                        ISA_NAMES[want], ISA_NAMES[g_best]);
    atomic_store(&g_active, want);
    return MOE_OK;
}
