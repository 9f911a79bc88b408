/* bench_dq_floor.c — the instruction floor of FP32-contract dequantization
 * at AVX2 (prints, never asserts).
 *
 * Under the FP32 contract (docs/KERNELS.md) a Q4_K value becomes a float by
 * fixed single-precision steps, w = d1 * (float)c - m1, before its FMA with
 * the activation. Per 8 values that is six vector instructions: widen 8 code
 * bytes to int32 (vpshufb), isolate the nibble (vpand), convert (vcvtdq2ps),
 * multiply by the sub-block scale, subtract the min, and the FMA. This runs
 * that sequence in an asm loop with no cache misses and no dependence but
 * the accumulators' (4 independent chains), so its time per 8 values is
 * what the core's execution ports allow, with nothing else in the way (the
 * gemv splits the nibbles once per 16 values, so it issues a little less
 * than the six per 8 counted here):
 *   "registers": the codes already in a register (the op mix alone);
 *   "loads":     the codes from a 16-byte broadcast load per 2 vectors and
 *                the activations as FMA memory operands, as the AVX2 gemv
 *                tile (src/quant/quant_avx2.c, tile2_q4_k) issues them.
 * The clock is estimated from a chain of dependent integer adds (one per
 * cycle). Compare "Q4_K 128x2048" of bench_quant (one thread, weights in
 * L2) with the GB/s printed here to see how far the kernel is from its
 * floor, and with the read bandwidth to see whether the FP32 contract can
 * keep up with memory on this core (docs/PERFORMANCE.md, "The contract sets
 * the ceiling"). */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#if defined(__x86_64__)
/* cycles per second: 4 dependent adds per iteration, one per cycle */
static double clock_hz(void) {
    const long iters = 200000000L;
    unsigned long v = 0;
    const double t0 = now();
    for (long i = 0; i < iters; i++) __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(v));
    return 4.0 * (double)iters / (now() - t0);
}

/* One vector of 8 values: codes in ymm A (register form) or loaded at OFF
 * (load form), the FMA into accumulator ACC; ymm12/13/14/15 hold the shuffle
 * control, the min, the scale and the nibble mask. */
#define DQ_REG(A, ACC, OFF)                                                                             \
    "vpshufb %%ymm12, %%ymm" #A ", %%ymm" #A "\n\tvpand %%ymm15, %%ymm" #A ", %%ymm" #A "\n\t"           \
    "vcvtdq2ps %%ymm" #A ", %%ymm" #A "\n\tvmulps %%ymm14, %%ymm" #A ", %%ymm" #A "\n\t"                \
    "vsubps %%ymm13, %%ymm" #A ", %%ymm" #A "\n\tvfmadd231ps " #OFF "(%[x]), %%ymm" #A ", %%ymm" #ACC "\n\t"
#define COPY(A) "vmovdqa %%ymm11, %%ymm" #A "\n\t"
#define LOAD(A, OFF) "vbroadcasti128 " #OFF "(%[c]), %%ymm" #A "\n\t"

static double run(int loads, long nvec, const uint8_t *codes, const float *x) {
    const double t0 = now();
    if (loads)
        __asm__ volatile(
            "vpxor %%ymm0, %%ymm0, %%ymm0\n\tvpxor %%ymm1, %%ymm1, %%ymm1\n\t"
            "vpxor %%ymm2, %%ymm2, %%ymm2\n\tvpxor %%ymm3, %%ymm3, %%ymm3\n\t"
            "vmovdqu (%[c]), %%ymm12\n\tvbroadcastss (%[x]), %%ymm13\n\tvbroadcastss 4(%[x]), %%ymm14\n\t"
            "vpcmpeqd %%ymm15, %%ymm15, %%ymm15\n\tvpsrld $28, %%ymm15, %%ymm15\n\t"
            "1:\n\t"
            LOAD(4, 0) "vmovdqa %%ymm4, %%ymm5\n\t" DQ_REG(4, 0, 0) DQ_REG(5, 1, 32)
            LOAD(6, 16) "vmovdqa %%ymm6, %%ymm7\n\t" DQ_REG(6, 2, 64) DQ_REG(7, 3, 96)
            LOAD(8, 32) "vmovdqa %%ymm8, %%ymm9\n\t" DQ_REG(8, 0, 128) DQ_REG(9, 1, 160)
            LOAD(10, 48) "vmovdqa %%ymm10, %%ymm11\n\t" DQ_REG(10, 2, 192) DQ_REG(11, 3, 224)
            "sub $8, %[n]\n\tjnz 1b\n\t"
            : [n] "+r"(nvec)
            : [c] "r"(codes), [x] "r"(x)
            : "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
              "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    else
        __asm__ volatile(
            "vpxor %%ymm0, %%ymm0, %%ymm0\n\tvpxor %%ymm1, %%ymm1, %%ymm1\n\t"
            "vpxor %%ymm2, %%ymm2, %%ymm2\n\tvpxor %%ymm3, %%ymm3, %%ymm3\n\t"
            "vmovdqu (%[c]), %%ymm12\n\tvbroadcastss (%[x]), %%ymm13\n\tvbroadcastss 4(%[x]), %%ymm14\n\t"
            "vpcmpeqd %%ymm15, %%ymm15, %%ymm15\n\tvpsrld $28, %%ymm15, %%ymm15\n\t"
            "vbroadcasti128 (%[c]), %%ymm11\n\t"
            "1:\n\t"
            COPY(4) COPY(5) DQ_REG(4, 0, 0) DQ_REG(5, 1, 32) COPY(6) COPY(7) DQ_REG(6, 2, 64) DQ_REG(7, 3, 96)
            COPY(8) COPY(9) DQ_REG(8, 0, 128) DQ_REG(9, 1, 160) COPY(4) COPY(5) DQ_REG(4, 2, 192) DQ_REG(5, 3, 224)
            "sub $8, %[n]\n\tjnz 1b\n\t"
            : [n] "+r"(nvec)
            : [c] "r"(codes), [x] "r"(x)
            : "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
              "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    return now() - t0;
}

int main(void) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("bench_dq_floor: skipped (this CPU has no AVX2 + FMA)\n");
        return 0;
    }
    _Alignas(64) static uint8_t codes[256];
    _Alignas(64) static float x[256];
    for (int i = 0; i < 256; i++) {
        codes[i] = (uint8_t)(i * 37 + 11);
        x[i] = (float)(i % 17) * 0.01f;
    }
    const double hz = clock_hz();
    const long nvec = 200000000L; /* a multiple of 8 */
    printf("FP32-contract dequantization floor at AVX2, 1 thread, clock ~%.2f GHz (dependent adds)\n", hz * 1e-9);
    printf("%-10s %12s %14s %16s %20s\n", "codes", "ns / 8 vals", "cycles / 8", "G values / s", "Q4_K GB/s (4.5 bit)");
    for (int loads = 0; loads < 2; loads++) {
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            const double t = run(loads, nvec, codes, x);
            if (t < best) best = t;
        }
        const double per = best / (double)nvec;
        printf("%-10s %12.3f %14.2f %16.2f %20.2f\n", loads ? "loads" : "registers", per * 1e9, per * hz,
               8.0 / per * 1e-9, 8.0 / per * 4.5 / 8.0 * 1e-9);
    }
    return 0;
}
#else
int main(void) {
    printf("bench_dq_floor: skipped (x86-64 only)\n");
    return 0;
}
#endif
