/* bench_scales.c — does a kernel's speed depend on the weights' size?
 * (prints, never asserts).
 *
 * bench_quant fills its matrices with synthetic blocks whose scales are
 * ordinary numbers. Real files' weights are small (|w| ~ 0.01-0.05), and so
 * are their scales: NVFP4's UE4M3 scales of such weights are all UE4M3
 * subnormals, which once made its act_q8 kernels build subnormal floats and
 * run 10x slower on Intel cores (a multiply with a subnormal input takes a
 * microcode assist) while bench_quant showed nothing. This program times
 * every weight format's decode kernel (FP32 and, where it exists, a8) at the
 * active ISA level on the same 128 x 2048 matrix quantized from values of
 * two sizes, |w| < 0.01 ("small", a real model's) and |w| < 1 ("large"),
 * one thread, weights in L2, the best of 5 runs; a ratio far from 1 marks a
 * slow path that depends on the data. MOEFAST_ISA=avx2 runs the AVX2 table. */
#include "quant/quant.h"
#include "quant/types.h"
#include "base/util.h"

#include <stdio.h>
#include <stdlib.h>
#include "bench_util.h"

#define ROWS 128
#define N 2048
#define RUNS 5

typedef struct {
    uint8_t *w, *wa, *xa;
    float *x, *y;
    size_t rb;
} mats;

/* The matrix of values uniform in [-mag, mag) (a fixed seed), quantized to
 * type, and its a8 repack when a8. */
static void fill(mats *m, uint32_t type, float mag, bool a8, moe_rng *rng) {
    float f[N];
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < N; i++) f[i] = (float)((2.0 * moe_rng_uniform(rng) - 1.0) * mag);
        moe_quantize_row(type, f, m->w + (size_t)r * m->rb, N);
    }
    if (a8) moe_repack_a8(type, m->w, m->wa, ROWS, N);
}

/* GB/s of weights, one thread, the best of RUNS runs of ~2 ms. */
static double rate(const moe_kernels *k, uint32_t type, bool a8, const mats *m) {
    int reps = 1;
    double best = 0;
    for (int run = -1; run < RUNS; run++) {
        const double t0 = now_s();
        for (int i = 0; i < reps; i++) {
            if (a8) k->gemv_a8[type](m->wa, m->rb, ROWS, m->xa, m->y, N);
            else k->gemv[type](m->w, m->rb, ROWS, m->x, m->y, N);
        }
        const double t = now_s() - t0;
        if (run < 0) {                          /* the sizing run */
            reps = t > 0 ? (int)(2e-3 / (t / reps)) + 1 : 1000;
            continue;
        }
        if (run == 0 || t < best) best = t;
    }
    return best > 0 ? (double)ROWS * (double)m->rb * reps / best / 1e9 : 0;
}

int main(void) {
    const moe_kernels *k = moe_kernels_active();
    mats m = {0};
    for (uint32_t t = 0; t < MOE_T_COUNT; t++) {        /* the widest row of any format */
        const moe_type_info *ti = moe_type_get(t);
        if (ti && ti->supported && moe_row_bytes(t, N) > m.rb) m.rb = (size_t)moe_row_bytes(t, N);
    }
    m.w = moe_calloc_aligned((size_t)ROWS * m.rb, 1, 0);
    m.wa = moe_calloc_aligned((size_t)ROWS * m.rb, 1, 0);
    m.x = moe_calloc_aligned(N, sizeof(float), 0);
    m.xa = moe_calloc_aligned((size_t)moe_act8_row_bytes(N), 1, 0);
    m.y = moe_calloc_aligned(ROWS, sizeof(float), 0);
    if (!m.w || !m.wa || !m.x || !m.xa || !m.y) {
        fprintf(stderr, "bench_scales: out of memory\n");
        return 1;
    }
    moe_rng rng;
    moe_rng_seed(&rng, 7);
    for (int i = 0; i < N; i++) m.x[i] = (float)(moe_rng_uniform(&rng) - 0.5);
    moe_quantize_act8(m.x, m.xa, N);
    printf("bench_scales: ISA %s, 1 thread, %d x %d in L2, GB/s of weights (best of %d)\n", k->name, ROWS, N, RUNS);
    printf("%-8s %-4s %8s %8s %7s\n", "format", "", "small", "large", "ratio");
    for (uint32_t type = 0; type < MOE_T_COUNT; type++) {
        const moe_type_info *ti = moe_type_get(type);
        if (!ti || !ti->name || !ti->supported || !k->gemv[type]) continue;
        m.rb = (size_t)moe_row_bytes(type, N);
        for (int a8 = 0; a8 < 2; a8++) {
            if (a8 && (!ti->has_a8 || !k->gemv_a8[type])) continue;
            double r[2];
            for (int s = 0; s < 2; s++) {
                fill(&m, type, s ? 1.0f : 0.01f, a8, &rng);
                r[s] = rate(k, type, a8, &m);
            }
            const double ratio = r[0] > 0 ? r[1] / r[0] : 0;
            printf("%-8s %-4s %8.2f %8.2f %7.2f%s\n", ti->name, a8 ? "a8" : "", r[0], r[1], ratio,
                   ratio > 1.5 || ratio < 0.67 ? "  <- depends on the data" : "");
        }
    }
    moe_free_aligned(m.w);
    moe_free_aligned(m.wa);
    moe_free_aligned(m.x);
    moe_free_aligned(m.xa);
    moe_free_aligned(m.y);
    return 0;
}
