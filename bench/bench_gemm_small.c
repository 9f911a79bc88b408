/* bench_gemm_small.c — the kernel choice at a few tokens (prints, never asserts).
 *
 * A batched decode step multiplies each matrix by 2-8 tokens. Per format,
 * for ntok = 1..16 on a 2048x2048 matrix, one thread, this times
 *   - "gemv":  ntok gemv calls, one per token (the weights read ntok times),
 *   - "gemm":  the 4x4-tile gemm (x4 layout where the format has one),
 *   - "wide":  the gemm_wide kernel (x4 layout where the format has one),
 *   - "a8v"/"a8m": for formats with act_q8 kernels, ntok gemv_a8 calls vs
 *     one gemm_a8,
 * in two settings: "mem", the matrix one of enough copies to cycle through
 * 256 MB (rows stream from memory, as a decode step's do), and "l3", the
 * same matrix every call (4-8 MB of weights: from the last-level cache).
 * Each figure: microseconds per product of all ntok tokens, median of REPS
 * repetitions of this thread's CPU time (the machine is shared: CPU time
 * holds up better than wall time). The values are not checked here: every
 * kernel gives the same bits (tests/test_quant.c).
 * Arguments, if any, name the formats (e.g. `bench_gemm_small Q8_0 BF16`);
 * MOEFAST_ISA=avx2 times the AVX2 level. */
#include "moefast.h"
#include "quant/quant.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench_util.h"

#define REPS 5
#define ROWS 2048
#define NIN 2048
#define MAXTOK 16
#define CYCLE_BYTES ((size_t)256 << 20)

enum { K_GEMV, K_GEMM, K_WIDE, K_A8V, K_A8M, K_COUNT };
static const char *KNAME[K_COUNT] = {"gemv", "gemm", "wide", "a8v", "a8m"};

typedef struct {
    const moe_kernels *k;
    uint32_t type;
    bool x4;
    size_t rb, mat;
    const float *x;
    const uint8_t *xa;
    size_t xas;
    float *y;
} ctx;

static void run1(const ctx *c, int kind, const uint8_t *w, int ntok) {
    switch (kind) {
    case K_GEMV:
        for (int t = 0; t < ntok; t++)
            (c->x4 ? c->k->gemv_x4 : c->k->gemv)[c->type](w, c->rb, ROWS, c->x + (size_t)t * NIN, c->y + (size_t)t * ROWS, NIN);
        break;
    case K_GEMM:
        (c->x4 ? c->k->gemm_x4 : c->k->gemm)[c->type](w, c->rb, ROWS, c->x, NIN, ntok, c->y, ROWS, NIN);
        break;
    case K_WIDE:
        (c->x4 ? c->k->gemm_wide_x4 : c->k->gemm_wide)[c->type](w, c->rb, ROWS, c->x, NIN, ntok, c->y, ROWS, NIN);
        break;
    case K_A8V:
        for (int t = 0; t < ntok; t++)
            c->k->gemv_a8[c->type](w, c->rb, ROWS, c->xa + (size_t)t * c->xas, c->y + (size_t)t * ROWS, NIN);
        break;
    case K_A8M:
        c->k->gemm_a8[c->type](w, c->rb, ROWS, c->xa, c->xas, ntok, c->y, ROWS, NIN);
        break;
    }
}

/* microseconds per product, median over REPS; mem: cycle through copies */
static double time_kind(const ctx *c, int kind, const uint8_t *buf, int ntok, bool mem) {
    const int64_t copies = (int64_t)(CYCLE_BYTES / c->mat);
    const int iters = mem ? (int)(copies < 24 ? copies : 24) : 16; /* 24 x >= 4 MB: past the L3 */
    double t[REPS];
    run1(c, kind, buf, ntok);
    for (int r = 0; r < REPS; r++) {
        const double t0 = thread_cpu();
        for (int i = 0; i < iters; i++) run1(c, kind, mem ? buf + (size_t)i * c->mat : buf, ntok);
        t[r] = (thread_cpu() - t0) / iters;
    }
    qsort(t, REPS, sizeof t[0], cmp_double);
    return t[REPS / 2] * 1e6;
}

static void fill(uint32_t type, uint8_t *buf, size_t bytes) {
    moe_rng rng;
    moe_rng_seed(&rng, 7);
    /* valid rows: quantize random floats, one row at a time, then copy */
    float *row = malloc(sizeof(float) * NIN);
    const size_t rb = (size_t)moe_row_bytes(type, NIN);
    for (int i = 0; i < NIN; i++) row[i] = (float)(moe_rng_uniform(&rng) - 0.5);
    moe_quantize_row(type, row, buf, NIN);
    for (size_t o = rb; o + rb <= bytes; o += rb) {
        memcpy(buf + o, buf, rb);
        /* vary each row a little so no two are alike byte for byte */
        buf[o + rb / 2] ^= (uint8_t)(o >> 7);
    }
    free(row);
}

int main(int argc, char **argv) {
    static const uint32_t types[] = {MOE_T_Q8_0, MOE_T_Q4_K, MOE_T_Q6_K, MOE_T_MXFP4, MOE_T_BF16, MOE_T_F32};
    const moe_kernels *k = moe_kernels_active();
    uint8_t *buf = mmap(NULL, CYCLE_BYTES + ((size_t)64 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *wa = mmap(NULL, CYCLE_BYTES + ((size_t)64 << 20), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED || wa == MAP_FAILED) return 1;
    float *x = moe_calloc_aligned(sizeof(float) * NIN, MAXTOK, 0), *y = moe_calloc_aligned(sizeof(float) * ROWS, MAXTOK, 0);
    const size_t xas = (size_t)moe_act8_row_bytes(NIN);
    uint8_t *xa = moe_calloc_aligned(xas, MAXTOK, 0);
    moe_rng rng;
    moe_rng_seed(&rng, 1);
    for (int i = 0; i < NIN * MAXTOK; i++) x[i] = (float)(moe_rng_uniform(&rng) - 0.5);
    for (int t = 0; t < MAXTOK; t++) moe_quantize_act8(x + t * NIN, xa + t * xas, NIN);
    printf("bench_gemm_small: ISA %s, 1 thread, %dx%d, us per product of ntok tokens (CPU time, median of %d)\n",
           k->name, ROWS, NIN, REPS);
    static const int toks[] = {1, 2, 3, 4, 5, 6, 8, 12, 16};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        bool wanted = argc < 2;
        for (int a = 1; a < argc; a++) wanted |= moe_type_by_name(argv[a]) == (int)type;
        if (!wanted || !k->gemv[type]) continue;
        ctx c = {.k = k, .type = type, .x4 = k->gemv_x4[type] != NULL && moe_x4_fits(type, NIN),
                 .rb = (size_t)moe_row_bytes(type, NIN), .x = x, .xa = xa, .xas = xas, .y = y};
        c.mat = c.rb * ROWS;
        fill(type, buf, CYCLE_BYTES);
        const bool a8 = moe_type_has_a8(type) && k->gemv_a8[type];
        if (a8) moe_repack_a8(type, buf, wa, (int64_t)(CYCLE_BYTES / c.rb), NIN);
        for (int mem = 1; mem >= 0; mem--) {
            printf("%-6s %s %s\n", moe_type_get(type)->name, mem ? "mem" : "l3 ", c.x4 ? "(x4)" : "");
            printf("  ntok");
            for (int kd = 0; kd < K_COUNT; kd++)
                if ((kd != K_WIDE || (c.x4 ? k->gemm_wide_x4 : k->gemm_wide)[type]) && (kd < K_A8V || a8))
                    printf(" %9s", KNAME[kd]);
            printf("\n");
            for (size_t i = 0; i < sizeof toks / sizeof toks[0]; i++) {
                printf("  %4d", toks[i]);
                for (int kd = 0; kd < K_COUNT; kd++) {
                    if (kd == K_WIDE && !(c.x4 ? k->gemm_wide_x4 : k->gemm_wide)[type]) continue;
                    if (kd >= K_A8V && !a8) continue;
                    printf(" %9.0f", time_kind(&c, kd, kd >= K_A8V ? wa : buf, toks[i], mem));
                }
                printf("\n");
                fflush(stdout);
            }
        }
    }
    return 0;
}
