/* bench_experts.c — the decode expert phase alone (prints, never asserts).
 *
 * A decode step's gate/up phase reads, per MoE layer, the gate and up
 * matrices of the selected experts: the laguna bench model's shape here, 9
 * experts (8 routed + the shared one) of 256 rows x 1024 values, out of 128
 * per layer, 15 layers, from a pool as large as the model's expert tensors
 * (NVFP4: 570 MB), so every read comes from memory. The pool is laid out as
 * the engine's tensors are (a layer's gate matrices together, its up
 * matrices 19 MB further on), repacked into the act_q8 (a8) layout, and each
 * layer is one pool phase whose threads take contiguous shares of the 18
 * matrices' rows (8-aligned), as jobs_worker does. Per format: the median
 * GB/s over 300 steps of 15 phases (and the 10th / 90th percentiles), next to
 * the read bandwidth measured right before.
 *
 * Why: in `moefast bench --phases` the BF16+NVFP4 model's q8kv gate/up phase
 * read 20-28 GB/s in the VM's slow memory state, while this loop reads it at
 * about the measured bandwidth with the old and the new NVFP4 kernels alike
 * (docs/PERFORMANCE.md), so what the engine loses there is not the kernel.
 * Arguments, if any: the formats (default NVFP4 Q8_0), each with act_q8. */
#include "moefast.h"
#include "quant/quant.h"
#include "base/threads.h"
#include "base/util.h"
#include "../tools/stats.h"   /* the order statistics bench --ab and price use */

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define THREADS 2
#define LAYERS 15
#define EXPERTS 128
#define USED 9
#define ROWS 256
#define N_IN 1024
#define STEPS 300

typedef struct {
    const moe_kernels *k;
    uint32_t type;
    const uint8_t *gate, *up;   /* this layer's gate and up tensors (EXPERTS matrices each) */
    size_t rb, mb;              /* row bytes, matrix bytes */
    const int *ex;              /* the USED experts */
    const uint8_t *xa;          /* the input as an A8 row */
    float *y;                   /* [2 USED][ROWS] */
} phase_job;

/* Matrix m = 2 e + (0: gate, 1: up) of the layer's selected experts; the
 * thread's share is rows [b, e) of their concatenation. */
static void phase_worker(void *ctx, int ith, int nth) {
    const phase_job *j = ctx;
    int64_t b, e;
    moe_split(2 * USED * ROWS, ith, nth, 8, &b, &e);
    for (int m = 0; m < 2 * USED; m++) {
        const int64_t r0 = (int64_t)m * ROWS, r1 = r0 + ROWS;
        if (r1 <= b || r0 >= e) continue;
        const int64_t s0 = b > r0 ? b - r0 : 0, s1 = (e < r1 ? e : r1) - r0;
        const uint8_t *w = (m % 2 ? j->up : j->gate) + (size_t)j->ex[m / 2] * j->mb;
        j->k->gemv_a8[j->type](w + (size_t)s0 * j->rb, j->rb, s1 - s0, j->xa, j->y + r0 + s0, N_IN);
    }
}

static void run(moe_pool *pool, const moe_kernels *k, uint32_t type) {
    const char *name = moe_type_get(type)->name;
    if (!moe_type_has_a8(type)) { printf("%-6s (no act_q8 kernels)\n", name); return; }
    const size_t rb = (size_t)moe_row_bytes(type, N_IN), mb = rb * ROWS;
    const size_t tensor = mb * EXPERTS, total = 2 * tensor * LAYERS;
    uint8_t *pool_mem = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *plain = malloc(mb), *xa = moe_calloc_aligned((size_t)moe_act8_row_bytes(N_IN), 1, 0);   /* on cache lines, as a session's */
    float *x = moe_calloc_aligned(sizeof(float), N_IN, 0), *y = moe_calloc_aligned(sizeof(float), 2 * USED * ROWS, 0);
    if (pool_mem == MAP_FAILED || !plain || !xa || !x || !y) {
        printf("%-6s (cannot allocate %zu MB)\n", name, total >> 20);
        if (pool_mem != MAP_FAILED) munmap(pool_mem, total);
        free(plain); moe_free_aligned(xa); moe_free_aligned(x); moe_free_aligned(y);
        return;
    }
#ifdef MADV_HUGEPAGE
    madvise(pool_mem, total, MADV_HUGEPAGE);   /* as the engine's repack mapping */
#endif
    moe_rng rng;
    moe_rng_seed(&rng, 7);
    for (int i = 0; i < N_IN; i++) x[i] = (float)(moe_rng_uniform(&rng) - 0.5);
    for (int r = 0; r < ROWS; r++) moe_quantize_row(type, x, plain + (size_t)r * rb, N_IN);
    for (size_t m = 0; m < 2 * (size_t)EXPERTS * LAYERS; m++) moe_repack_a8(type, plain, pool_mem + m * mb, ROWS, N_IN);
    k->quantize_act8(x, xa, N_IN);

    const double bw = moe_measure_read_bandwidth(THREADS);
    double t[STEPS];
    uint32_t lcg = 12345;
    for (int s = 0; s < STEPS; s++) {
        double sum = 0;
        for (int l = 0; l < LAYERS; l++) {
            int ex[USED];
            for (int i = 0; i < USED; i++) {
                lcg = lcg * 1103515245u + 12345u;
                ex[i] = (int)((lcg >> 8) % EXPERTS);
            }
            const uint8_t *base = pool_mem + 2 * tensor * (size_t)l;
            phase_job j = {k, type, base, base + tensor, rb, mb, ex, xa, y};
            const double t0 = moe_now();
            moe_pool_run(pool, phase_worker, &j);
            sum += moe_now() - t0;
        }
        t[s] = sum;
    }
    qsort(t, STEPS, sizeof t[0], stats_cmp_double);
    const double bytes = (double)LAYERS * 2 * USED * (double)mb;
    printf("%-6s a8  %5.1f GB/s (p10 %5.1f, p90 %5.1f) over %d steps of %d phases of %.2f MB; read bandwidth before: %.1f GB/s\n",
           name, bytes / stats_quantile_sorted(t, STEPS, 0.5) * 1e-9, bytes / stats_quantile_sorted(t, STEPS, 0.9) * 1e-9,
           bytes / stats_quantile_sorted(t, STEPS, 0.1) * 1e-9, STEPS, LAYERS, 2 * USED * (double)mb / 1e6, bw);
    munmap(pool_mem, total);
    free(plain); moe_free_aligned(xa); moe_free_aligned(x); moe_free_aligned(y);
}

int main(int argc, char **argv) {
    char err[MOE_ERR_LEN];
    moe_pool *pool = moe_pool_new(THREADS, err, sizeof err);
    if (!pool) { fprintf(stderr, "bench_experts: %s\n", err); return 1; }
    const moe_kernels *k = moe_kernels_active();
    printf("bench_experts: ISA %s, %d threads; per step %d layers x %d experts' gate and up (%dx%d) of %d per layer\n",
           k->name, THREADS, LAYERS, USED, ROWS, N_IN, EXPERTS);
    static const char *const def[] = {"NVFP4", "Q8_0"};
    const int nf = argc > 1 ? argc - 1 : 2;
    for (int i = 0; i < nf; i++) {
        const char *f = argc > 1 ? argv[i + 1] : def[i];
        const int type = moe_type_by_name(f);
        if (type < 0) { fprintf(stderr, "bench_experts: unknown format '%s'\n", f); moe_pool_free(pool); return 1; }
        run(pool, k, (uint32_t)type);
    }
    moe_pool_free(pool);
    return 0;
}
