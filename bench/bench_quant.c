/* bench_quant.c — weight-kernel throughput (prints, never asserts).
 *
 * Per format, with the active ISA level (MOEFAST_ISA to force one) and 2
 * threads (rows split with moe_split, as the engine does):
 *   - decode-shaped matrix-vector products in GB/s of weight bytes read, for
 *     512x2048 and 2048x512 matrices (rows x row length) cycled through
 *     enough distinct copies to exceed the caches, and a 100352x2048 lm-head;
 *     the rows marked "x4" read the same shapes in the x4 layout the engine
 *     uses after its load-time repack (docs/KERNELS.md);
 *   - a 512-token batched GEMM on a 512x2048 matrix in GFLOP/s, by the 4x4
 *     tiles and (where the level has one) by the gemm_wide kernel;
 * next to the measured memory read bandwidth (moe_measure_read_bandwidth).
 * For the formats with an 8-bit-activation kernel (flag act_q8, act8_ref.c:
 * moe_type_has_a8), rows labelled "a8" time the same shapes with those kernels: weights
 * repacked by moe_repack_a8, activations quantized by moe_quantize_act8; the
 * GEMM in GOP/s (2*rows*n*tokens integer multiply-adds counted like flops).
 * The a8 GEMM also on 1 thread with its weights in L2 ("gemm 256x48", and
 * "gemm 128x4": a batched decode step's 4 tokens), GOP/s per CPU-second.
 * Also the lm-head on 1 thread (no pool) in GB/s per second of that thread's
 * CPU time: what one core sustains while it runs, a figure that holds up on
 * a machine shared with other jobs.
 * Median of 7 repetitions, with min..max, and "cpu": the CPU time the
 * process got over wall time x threads (well below 100% means other
 * processes took the cores and the figures understate the kernels).
 * Arguments, if any, name the formats to run (e.g. `bench_quant NVFP4 Q8_0`). */
#include "moefast.h"
#include "quant/quant.h"
#include "base/threads.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "bench_util.h"

#define REPS 7
#define THREADS 2
#define CYCLE_BYTES ((size_t)256 << 20) /* distinct matrices per decode rep: 8x a 32 MB L3 */
#define LMHEAD_ROWS 100352

typedef struct {
    const moe_kernels *k;
    uint32_t type;
    const uint8_t *w;
    size_t rb;
    int64_t nrows, n, ntok;
    const float *x;
    float *y;
    bool x4;        /* read the weights as the x4 layout (quant.h), as the engine does after `repack` */
    const uint8_t *xa; /* non-NULL: the act_q8 kernels, w in the a8 layout, xa = A8 rows (one per token) */
    bool wide;      /* the gemm_wide kernel (flag gemm_wide) instead of the 4x4 tiles */
} job;

static void gemv_task(void *ctx, int ith, int nth) {
    const job *j = ctx;
    int64_t b, e;
    moe_split(j->nrows, ith, nth, 4, &b, &e);
    if (e <= b) return;
    if (j->xa) j->k->gemv_a8[j->type](j->w + b * j->rb, j->rb, e - b, j->xa, j->y + b, j->n);
    else (j->x4 ? j->k->gemv_x4 : j->k->gemv)[j->type](j->w + b * j->rb, j->rb, e - b, j->x, j->y + b, j->n);
}

static void gemm_task(void *ctx, int ith, int nth) {
    const job *j = ctx;
    int64_t b, e;
    moe_split(j->nrows, ith, nth, 4, &b, &e);
    if (e <= b) return;
    if (j->xa)
        j->k->gemm_a8[j->type](j->w + b * j->rb, j->rb, e - b, j->xa, (size_t)moe_act8_row_bytes(j->n), j->ntok,
                               j->y + b, (size_t)j->nrows, j->n);
    else
        (j->wide ? j->k->gemm_wide : j->k->gemm)[j->type](j->w + b * j->rb, j->rb, e - b, j->x, (size_t)j->n,
                                                          j->ntok, j->y + b, (size_t)j->nrows, j->n);
}

/* Valid, ordinary data: random codes, scales that are normal numbers (no
 * subnormals: they would measure the CPU's microcode assists instead). */
static void fill(uint32_t type, uint8_t *buf, size_t bytes, moe_rng *rng) {
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        uint64_t r = moe_rng_next(rng);
        memcpy(buf + i, &r, 8);
    }
    const moe_type_info *ti = moe_type_get(type);
    const size_t bb = ti->block_bytes;
    const uint16_t h = 0x2A00; /* f16 ~0.047 */
    for (size_t off = 0; off + bb <= bytes; off += bb) {
        uint8_t *b = buf + off;
        switch (type) {
        case MOE_T_F32: { float f = (float)(b[0] - 128) / 128.0f; memcpy(b, &f, 4); break; }
        case MOE_T_F16: b[1] = (uint8_t)((b[1] & 0x83) | 0x34); break;
        case MOE_T_BF16: b[1] = (uint8_t)((b[1] & 0x80) | 0x3C); break;
        case MOE_T_Q8_0: case MOE_T_Q4_0: memcpy(b, &h, 2); break;
        case MOE_T_Q5_0: case MOE_T_IQ4_NL: memcpy(b, &h, 2); break;
        case MOE_T_Q4_1: case MOE_T_Q5_1: memcpy(b, &h, 2); memcpy(b + 2, &h, 2); break;
        case MOE_T_Q4_K: memcpy(b, &h, 2); memcpy(b + 2, &h, 2); break;
        case MOE_T_Q6_K: memcpy(b + 208, &h, 2); break;
        case MOE_T_Q5_K: memcpy(b, &h, 2); memcpy(b + 2, &h, 2); break;
        case MOE_T_Q3_K: memcpy(b + 108, &h, 2); break;
        case MOE_T_Q2_K: memcpy(b + 80, &h, 2); memcpy(b + 82, &h, 2); break;
        case MOE_T_IQ4_XS: memcpy(b, &h, 2); break;
        case MOE_T_IQ3_XXS: case MOE_T_IQ3_S: case MOE_T_IQ1_S: memcpy(b, &h, 2); break;
        case MOE_T_IQ1_M: for (int j = 0; j < 4; j++) b[49 + 2 * j] = (uint8_t)((b[49 + 2 * j] & 15) | ((h >> (4 * j)) & 15) << 4); break;
        case MOE_T_IQ2_XXS: case MOE_T_IQ2_XS: case MOE_T_IQ2_S: memcpy(b, &h, 2); break;
        case MOE_T_MXFP4: b[0] = 120; break;
        case MOE_T_NVFP4: for (int s = 0; s < 4; s++) b[s] = (uint8_t)(0x30 + (b[s] & 15)); break;
        default: break;
        }
    }
}

/* Runs fn REPS times (after one warm-up); returns the median seconds, min/max in lo/hi. */
typedef void (*rep_fn)(void *);
static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}
static double g_cpu_share; /* of the last time_reps() */
static double g_bw;        /* the measured read bandwidth, GB/s */
static double time_reps(rep_fn fn, void *arg, double *lo, double *hi) {
    double t[REPS], sum = 0;
    fn(arg);
    const double c0 = cpu_seconds();
    for (int r = 0; r < REPS; r++) {
        double t0 = moe_now();
        fn(arg);
        t[r] = moe_now() - t0;
        sum += t[r];
    }
    g_cpu_share = (cpu_seconds() - c0) / (sum * THREADS);
    qsort(t, REPS, sizeof t[0], cmp_double);
    *lo = t[0]; *hi = t[REPS - 1];
    return t[REPS / 2];
}

typedef struct { moe_pool *pool; job j; int64_t copies; size_t mat_bytes; } decode_arg;
static void decode_rep(void *p) {
    decode_arg *a = p;
    const uint8_t *base = a->j.w;
    for (int64_t c = 0; c < a->copies; c++) {
        a->j.w = base + (size_t)c * a->mat_bytes;
        moe_pool_run(a->pool, gemv_task, &a->j);
    }
    a->j.w = base;
}
static void gemm_rep(void *p) {
    decode_arg *a = p;
    moe_pool_run(a->pool, gemm_task, &a->j);
}

/* One thread's rate: job j whole on this thread (gemm when j->ntok, else
 * gemv), `iters` times per repetition, REPS repetitions timed in this
 * thread's CPU seconds; prints amount (bytes or operations per repetition)
 * per CPU-second, median and min..max, then `unit`. */
static void one_thread_rate(const char *name, const char *label, job *j, int iters, double amount, const char *unit) {
    double c[REPS];
    for (int r = 0; r < REPS; r++) {
        const double c0 = thread_cpu();
        for (int i = 0; i < iters; i++) (j->ntok ? gemm_task : gemv_task)(j, 0, 1);
        c[r] = thread_cpu() - c0;
    }
    qsort(c, REPS, sizeof c[0], cmp_double);
    printf("%-8s %-14s %9.1f %8.1f..%-8.1f %s\n", name, label, amount / c[REPS / 2] * 1e-9, amount / c[REPS - 1] * 1e-9,
           amount / c[0] * 1e-9, unit);
}

/* The act_q8 rows of a format ("Q8_0 a8"), same shapes and methodology as
 * above. buf holds `filled` bytes of valid plain rows of the format (n =
 * 2048); they are repacked with moe_repack_a8 into the space after them (the
 * a8 layout keeps each row's bytes and size, and a group of 16 blocks is
 * self-contained, so rows of n = 2048 repacked once are also valid n = 512
 * rows, four per 2048-row: one repack serves all three shapes; for Q4_K and
 * Q6_K a group is two whole super-blocks, so the same holds). */
/* One core's compute limit: a matrix that stays in L2 (128x2048; and
 * 1024x256, the shape of the bench models' laguna expert down projections,
 * whose rows are one partial act_q8 group), 200 gemvs per repetition, GB/s of
 * weights per second of this thread's CPU time (median of REPS). a8: the
 * matrix and x are in the act_q8 layouts. */
#define L2_ITERS 200
static void bench_l2(const moe_kernels *k, uint32_t type, const uint8_t *w, const float *x, const uint8_t *xa,
                     float *y, const char *name, int64_t rows, int64_t n) {
    job j = {.k = k, .type = type, .w = w, .rb = (size_t)moe_row_bytes(type, (uint64_t)n), .nrows = rows, .n = n,
             .x = x, .y = y, .xa = xa};
    char label[32];
    snprintf(label, sizeof label, "%lldx%lld", (long long)rows, (long long)n);
    one_thread_rate(name, label, &j, L2_ITERS, (double)j.rb * (double)rows * L2_ITERS,
                    "GB/s per CPU-second, 1 thread, weights in L2");
}

/* One core's GEMM rate without memory in the way: a8 weights of `rows` x
 * 2048 in L2 (256 rows: 557 KB of Q8_0, less for the others) against ntok
 * tokens — 48: an expert's share of a prompt chunk; 4: a batched decode
 * step's shared matrices at four sequences —, GOP/s per second of this
 * thread's CPU time (median of REPS); the 2-thread "gemm 512tok" row above
 * also streams the weights and moves with the VM's state. */
#define L2_GEMM_ROWS 256
#define L2_GEMM_TOK 48
#define L2_GEMM_ITERS 50
#define L2_FEW_ROWS 128  /* "gemm 128x4" */
#define L2_FEW_TOK 4
#define L2_FEW_ITERS 600 /* half the operations per repetition of 256x48 */
static void bench_l2_gemm(const moe_kernels *k, uint32_t type, const uint8_t *wa, const uint8_t *xa, float *y,
                          const char *name, int64_t rows, int64_t ntok, int iters) {
    job j = {.k = k, .type = type, .w = wa, .rb = (size_t)moe_row_bytes(type, 2048), .nrows = rows, .n = 2048,
             .ntok = ntok, .y = y, .xa = xa};
    char label[32];
    snprintf(label, sizeof label, "gemm %lldx%lld", (long long)rows, (long long)ntok);
    one_thread_rate(name, label, &j, iters, 2.0 * (double)rows * 2048 * (double)ntok * iters,
                    "GOP/s per CPU-second, 1 thread, weights in L2");
}

static void bench_a8(moe_pool *pool, const moe_kernels *k, uint32_t type, uint8_t *buf, size_t filled, size_t cap,
                     const float *x, float *y, int64_t ntok) {
    char name[16];
    snprintf(name, sizeof name, "%s a8", moe_type_get(type)->name);
    const size_t rb2048 = (size_t)moe_row_bytes(type, 2048);
    const int64_t rows = (int64_t)(filled / rb2048);
    uint8_t *wa = buf + (filled + 4095) / 4096 * 4096;
    if (wa + (size_t)rows * rb2048 > buf + cap) { printf("%-8s (no room to repack)\n", name); return; }
    moe_repack_a8(type, buf, wa, rows, 2048);
    /* Activations are quantized once, outside the timed region: in the engine
     * it is one pass over each token's n floats per matrix input (not per
     * matrix row), a small cost next to reading the weights. */
    const size_t ab512 = (size_t)moe_act8_row_bytes(512), ab2048 = (size_t)moe_act8_row_bytes(2048);
    uint8_t *xa512 = moe_calloc_aligned(ab512, 1, 0), *xa = moe_calloc_aligned(ab2048, (size_t)ntok, 0);   /* on cache lines, as a session's */
    moe_quantize_act8(x, xa512, 512);
    for (int64_t t = 0; t < ntok; t++) moe_quantize_act8(x + t * 2048, xa + (size_t)t * ab2048, 2048);
    static const struct { int64_t rows, n; const char *label; } shapes[] = {
        {512, 2048, "512x2048"}, {2048, 512, "2048x512"}, {LMHEAD_ROWS, 2048, "100352x2048"}};
    for (int sh = 0; sh < 3; sh++) {
        decode_arg a = {.pool = pool};
        a.j = (job){.k = k, .type = type, .w = wa, .rb = (size_t)moe_row_bytes(type, (uint64_t)shapes[sh].n),
                    .nrows = shapes[sh].rows, .n = shapes[sh].n, .y = y, .xa = shapes[sh].n == 512 ? xa512 : xa};
        a.mat_bytes = a.j.rb * (size_t)a.j.nrows;
        a.copies = sh == 2 ? 1 : (int64_t)(CYCLE_BYTES / a.mat_bytes);
        double lo, hi, med = time_reps(decode_rep, &a, &lo, &hi);
        const double bytes = (double)a.mat_bytes * (double)a.copies;
        printf("%-8s %-14s %9.1f %8.1f..%-8.1f %5.0f%% %4.0f%%\n", name, shapes[sh].label, bytes / med * 1e-9,
               bytes / hi * 1e-9, bytes / lo * 1e-9, 100.0 * bytes / med * 1e-9 / g_bw, 100 * g_cpu_share);
    }
    {
        job j = {.k = k, .type = type, .w = wa, .rb = rb2048, .nrows = LMHEAD_ROWS, .n = 2048, .y = y, .xa = xa};
        one_thread_rate(name, "100352x2048", &j, 1, (double)rb2048 * LMHEAD_ROWS, "GB/s per CPU-second, 1 thread");
    }
    {
        decode_arg a = {.pool = pool};
        a.j = (job){.k = k, .type = type, .w = wa, .rb = rb2048, .nrows = 512, .n = 2048, .ntok = ntok, .y = y,
                    .xa = xa};
        double lo, hi, med = time_reps(gemm_rep, &a, &lo, &hi);
        const double op = 2.0 * 512 * 2048 * (double)ntok;
        printf("%-8s %-14s %9.1f %8.1f..%-8.1f GOP/s   %4.0f%%\n", name, "gemm 512tok", op / med * 1e-9,
               op / hi * 1e-9, op / lo * 1e-9, 100 * g_cpu_share);
    }
    bench_l2(k, type, wa, NULL, xa, y, name, 128, 2048);
    if (ntok >= L2_GEMM_TOK && rows >= L2_GEMM_ROWS)
        bench_l2_gemm(k, type, wa, xa, y, name, L2_GEMM_ROWS, L2_GEMM_TOK, L2_GEMM_ITERS);
    if (ntok >= L2_FEW_TOK && rows >= L2_FEW_ROWS)
        bench_l2_gemm(k, type, wa, xa, y, name, L2_FEW_ROWS, L2_FEW_TOK, L2_FEW_ITERS);
    /* n = 256: a partial group has its own a8 layout, so its own repack (the
     * plain rows of n = 2048 are also valid rows of n = 256) */
    const size_t rb256 = (size_t)moe_row_bytes(type, 256);
    uint8_t *wa256 = malloc(rb256 * 1024), *xa256 = moe_calloc_aligned((size_t)moe_act8_row_bytes(256), 1, 0);
    if (wa256 && xa256) {
        moe_repack_a8(type, buf, wa256, 1024, 256);
        moe_quantize_act8(x, xa256, 256);
        bench_l2(k, type, wa256, NULL, xa256, y, name, 1024, 256);
    }
    free(wa256);
    moe_free_aligned(xa256);
    moe_free_aligned(xa512);
    moe_free_aligned(xa);
}

int main(int argc, char **argv) {
    static const uint32_t types[] = {MOE_T_Q8_0, MOE_T_Q4_0, MOE_T_Q4_1, MOE_T_Q5_0, MOE_T_Q5_1, MOE_T_IQ4_NL,
                                     MOE_T_Q4_K, MOE_T_NVFP4, MOE_T_MXFP4,
                                     MOE_T_Q6_K, MOE_T_BF16, MOE_T_F16, MOE_T_F32,
                                     MOE_T_Q5_K, MOE_T_Q3_K, MOE_T_Q2_K, MOE_T_IQ4_XS,
                                     MOE_T_IQ3_XXS, MOE_T_IQ3_S, MOE_T_IQ1_S, MOE_T_IQ1_M,
                                     MOE_T_IQ2_XXS, MOE_T_IQ2_XS, MOE_T_IQ2_S};
    char err[MOE_ERR_LEN];
    moe_pool *pool = moe_pool_new(THREADS, err, sizeof err);
    if (!pool) { fprintf(stderr, "bench_quant: %s\n", err); return 1; }
    const moe_kernels *k = moe_kernels_active();
    /* the probe's buffer stays mapped until the end, so the matrices below
     * are not placed on its pages (include/moefast/lab.h, moe_membw_new) */
    moe_membw *probe = moe_membw_new(THREADS);
    const double bw = g_bw = moe_membw_measure(probe);
    printf("bench_quant: ISA %s, %d threads, measured read bandwidth %.1f GB/s\n", k->name, THREADS, bw);
    printf("%-8s %-14s %9s %17s %6s %5s\n", "format", "shape", "GB/s", "min..max", "%bw", "cpu");

    const size_t cap = (size_t)LMHEAD_ROWS * 2048 * 4; /* F32 lm-head, the largest */
    uint8_t *buf = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) { fprintf(stderr, "bench_quant: cannot map %zu bytes\n", cap); moe_membw_free(probe); return 1; }
#ifdef MADV_HUGEPAGE
    madvise(buf, cap, MADV_HUGEPAGE);
#endif
    const int64_t ntok = 512;
    float *x = moe_calloc_aligned(sizeof(float) * 2048, (size_t)ntok, 0), *y = moe_calloc_aligned(sizeof(float), LMHEAD_ROWS * 4 + 2048 * (size_t)ntok, 0);
    moe_rng rng;
    moe_rng_seed(&rng, 1);
    for (int64_t i = 0; i < 2048 * ntok; i++) x[i] = (float)(moe_rng_uniform(&rng) - 0.5);

    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        const char *name = moe_type_get(type)->name;
        bool wanted = argc < 2;
        for (int a = 1; a < argc; a++) wanted |= moe_type_by_name(argv[a]) == (int)type;
        if (!wanted) continue;
        static const struct { int64_t rows, n; const char *label; } shapes[] = {
            {512, 2048, "512x2048"}, {2048, 512, "2048x512"}, {LMHEAD_ROWS, 2048, "100352x2048"}};
        const size_t lm_bytes = (size_t)moe_row_bytes(type, 2048) * LMHEAD_ROWS;
        const size_t filled = lm_bytes > CYCLE_BYTES ? lm_bytes : CYCLE_BYTES;
        fill(type, buf, filled < cap ? filled : cap, &rng);
        /* shapes 3 and 4: the same matrices read as the x4 layout (any block
         * order of valid blocks is valid data, so no repack is needed to time it) */
        for (int s = 0; s < 5; s++) {
            const int sh = s < 3 ? s : (s == 3 ? 0 : 2);
            if (s >= 3 && !k->gemv_x4[type]) continue;
            decode_arg a = {.pool = pool};
            a.j = (job){.k = k, .type = type, .w = buf, .rb = (size_t)moe_row_bytes(type, (uint64_t)shapes[sh].n),
                        .nrows = shapes[sh].rows, .n = shapes[sh].n, .x = x, .y = y, .x4 = s >= 3};
            a.mat_bytes = a.j.rb * (size_t)a.j.nrows;
            a.copies = sh == 2 ? 1 : (int64_t)(CYCLE_BYTES / a.mat_bytes);
            double lo, hi, med = time_reps(decode_rep, &a, &lo, &hi);
            const double bytes = (double)a.mat_bytes * (double)a.copies;
            char label[32];
            snprintf(label, sizeof label, "%s%s", shapes[sh].label, s >= 3 ? " x4" : "");
            printf("%-8s %-14s %9.1f %8.1f..%-8.1f %5.0f%% %4.0f%%\n", name, label, bytes / med * 1e-9,
                   bytes / hi * 1e-9, bytes / lo * 1e-9, 100.0 * bytes / med * 1e-9 / bw, 100 * g_cpu_share);
        }
        {
            job j = {.k = k, .type = type, .w = buf, .rb = (size_t)moe_row_bytes(type, 2048), .nrows = LMHEAD_ROWS,
                     .n = 2048, .x = x, .y = y};
            one_thread_rate(name, "100352x2048", &j, 1, (double)j.rb * LMHEAD_ROWS, "GB/s per CPU-second, 1 thread");
        }
        bench_l2(k, type, buf, x, NULL, y, name, 128, 2048);
        bench_l2(k, type, buf, x, NULL, y, name, 1024, 256);
        {
            decode_arg a = {.pool = pool};
            a.j = (job){.k = k, .type = type, .w = buf, .rb = (size_t)moe_row_bytes(type, 2048),
                        .nrows = 512, .n = 2048, .ntok = ntok, .x = x, .y = y};
            double lo, hi, med = time_reps(gemm_rep, &a, &lo, &hi);
            const double flop = 2.0 * 512 * 2048 * (double)ntok;
            printf("%-8s %-14s %9.1f %8.1f..%-8.1f GFLOP/s %4.0f%%\n", name, "gemm 512tok", flop / med * 1e-9,
                   flop / hi * 1e-9, flop / lo * 1e-9, 100 * g_cpu_share);
            if (k->gemm_wide[type]) {                  /* the same product by the gemm_wide kernel */
                a.j.wide = true;
                med = time_reps(gemm_rep, &a, &lo, &hi);
                printf("%-8s %-14s %9.1f %8.1f..%-8.1f GFLOP/s %4.0f%%\n", name, "gemm 512 wide", flop / med * 1e-9,
                       flop / hi * 1e-9, flop / lo * 1e-9, 100 * g_cpu_share);
            }
        }
        if (moe_type_has_a8(type) && k->gemv_a8[type]) bench_a8(pool, k, type, buf, filled < cap ? filled : cap, cap, x, y, ntok);
        fflush(stdout);
    }
    /* act_q8's activation quantizer (one pass per matrix input per token):
     * the scalar specification and the active level, ns per value */
    if (argc < 2) {
        uint8_t *qa = moe_calloc_aligned((size_t)moe_act8_row_bytes(2048), 1, 0);
        for (int lvl = 0; lvl < 2; lvl++) {
            double c[REPS];
            for (int r = 0; r < REPS; r++) {
                const double c0 = thread_cpu();
                for (int64_t t = 0; t < ntok; t++) {
                    if (lvl) k->quantize_act8(x + t * 2048, qa, 2048);
                    else moe_quantize_act8(x + t * 2048, qa, 2048);
                }
                c[r] = thread_cpu() - c0;
            }
            qsort(c, REPS, sizeof c[0], cmp_double);
            const double v = 2048.0 * (double)ntok;
            printf("%-8s %-14s %9.2f %8.2f..%-8.2f ns per value, 1 thread CPU time\n", "act8 q",
                   lvl ? k->name : "spec", c[REPS / 2] / v * 1e9, c[0] / v * 1e9, c[REPS - 1] / v * 1e9);
        }
        moe_free_aligned(qa);
    }
    munmap(buf, cap);
    moe_free_aligned(x); moe_free_aligned(y);
    moe_membw_free(probe);
    moe_pool_free(pool);
    return 0;
}
