/* a8_harness.h — what the act_q8 tests of the later formats share
 * (tests/test_act8_legacy.c, tests/test_act8_kquant.c): given a format's rows
 * and their act_q8 layout, the check that the reference is the test's own
 * reading of the contract and that every ISA level's kernels give its bits.
 * Header-only: each test includes it once, after check.h. */
#ifndef MOE_TEST_A8_HARNESS_H
#define MOE_TEST_A8_HARNESS_H

#include <math.h>
#include <string.h>

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static bool same(float a, float b) { return bits(a) == bits(b) || (isnan(a) && isnan(b)); }

/* The test's own reading of the format's act_q8 contract (one row, one token). */
typedef float (*a8_contract_fn)(uint32_t t, const uint8_t *row, const uint8_t *xa, int64_t n);
typedef void (*a8_make_x_fn)(float *x, int64_t n, bool edges);

/* nrows plain rows (stride rb0) and their repacked copies wa (stride rb);
 * ntok activations made by make_x and quantized into xa (stride xs); x, w:
 * n floats of scratch; want, got: nrows * ntok (+1 for got's guard). For each
 * token and row: moe_a8_dot_ref == contract bit for bit, and without edges
 * within tol * sum|w x| of the FP32 dot; then every level's gemm_a8 and
 * gemv_a8 equal the reference bit for bit and write nothing past the end. */
static void a8_check_levels(uint32_t t, const uint8_t *plain, size_t rb0, const uint8_t *wa, size_t rb,
                            uint8_t *xa, size_t xs, float *x, float *w, float *want, float *got,
                            int64_t n, int64_t nrows, int64_t ntok, bool edges, double tol,
                            a8_contract_fn contract, a8_make_x_fn make_x) {
    for (int64_t k = 0; k < ntok; k++) {
        make_x(x, n, edges);
        moe_quantize_act8(x, xa + k * xs, n);
        for (int64_t r = 0; r < nrows; r++) {
            const float v = moe_a8_dot_ref(t, plain + r * rb0, xa + k * xs, n), c = contract(t, plain + r * rb0, xa + k * xs, n);
            want[k * nrows + r] = v;
            CHECK_MSG(same(v, c), "%s contract n=%lld: %a != %a", moe_type_get(t)->name, (long long)n, v, c);
            if (!edges) { /* near the FP32 path */
                moe_dequant_row(t, plain + r * rb0, w, n);
                double e = 0, mag = 0;
                for (int64_t i = 0; i < n; i++) { e += (double)w[i] * x[i]; mag += fabs((double)w[i] * x[i]); }
                CHECK_MSG(fabs(v - e) <= tol * mag + 1e-6, "%s a8 %g vs fp32 %g (mag %g)", moe_type_get(t)->name, v, e, mag);
            }
        }
    }
    for (int l = 0; l < MOE_ISA_COUNT; l++) {
        const moe_kernels *K = moe_kernels_for((moe_isa)l);
        if (!K) continue;
        got[nrows * ntok] = 12345.0f;
        K->gemm_a8[t](wa, rb, nrows, xa, xs, ntok, got, (size_t)nrows, n);
        int bad = 0;
        for (int64_t i = 0; i < nrows * ntok; i++) bad += !same(got[i], want[i]);
        CHECK_MSG(bad == 0 && got[nrows * ntok] == 12345.0f, "%s %s gemm_a8 n=%lld rows=%lld tok=%lld: %d differ",
                  moe_type_get(t)->name, K->name, (long long)n, (long long)nrows, (long long)ntok, bad);
        for (int64_t k = 0; k < ntok; k++) {
            got[nrows] = 12345.0f;
            K->gemv_a8[t](wa, rb, nrows, xa + k * xs, got, n);
            bad = 0;
            for (int64_t r = 0; r < nrows; r++) bad += !same(got[r], want[k * nrows + r]);
            CHECK_MSG(bad == 0 && got[nrows] == 12345.0f, "%s %s gemv_a8 n=%lld rows=%lld: %d differ",
                      moe_type_get(t)->name, K->name, (long long)n, (long long)nrows, bad);
        }
    }
}

#endif
