/* a8_harness.h — what the act_q8 tests of the later formats share
 * (tests/test_act8_legacy.c, test_act8_kquant.c, test_act8_iq.c): their
 * random draws and edge values, the activations, and given a format's rows
 * and their act_q8 layout, the check that the reference is the test's own
 * reading of the contract and that every ISA level's kernels give its bits.
 * Header-only: each test includes it once, after check.h and base/util.h,
 * and seeds g_rng in main. */
#ifndef MOE_TEST_A8_HARNESS_H
#define MOE_TEST_A8_HARNESS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

static moe_rng g_rng;
static uint32_t rnd32(void) { return (uint32_t)(moe_rng_next(&g_rng) >> 32); }
static float rndf(void) { return (float)(moe_rng_uniform(&g_rng) * 2.0 - 1.0); }

/* Half scales at the edges: +-0, subnormals, +-max, the smallest normal, +-Inf, NaN. */
static uint16_t edge_f16(void) {
    static const uint16_t e[] = {0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x0400, 0x7C00, 0xFC00, 0x7E00};
    return e[rnd32() % 10];
}

/* Activations: a magnitude per 32-value block; with `edges` some blocks all
 * zero, with da subnormal or near the f16 max, every q at +-127, or an Inf. */
static void a8_make_x(float *x, int64_t n, bool edges) {
    for (int64_t b = 0; b < n / 32; b++) {
        float *xb = x + b * 32;
        const float mag = powf(10.0f, (float)(int)(rnd32() % 5) - 2.0f);
        for (int k = 0; k < 32; k++) xb[k] = rndf() * mag;
        if (!edges) continue;
        const uint32_t r = rnd32() % 100;
        if (r < 4) memset(xb, 0, 32 * sizeof(float));
        else if (r < 7) for (int k = 0; k < 32; k++) xb[k] *= 1e-5f;   /* da subnormal */
        else if (r < 10) for (int k = 0; k < 32; k++) xb[k] *= 8.3e6f; /* da near the f16 max */
        else if (r < 13) for (int k = 0; k < 32; k++) xb[k] = k % 2 ? -mag : mag; /* every q at +-127 */
        else if (r < 14) xb[rnd32() % 32] = INFINITY;                  /* da = Inf */
    }
}

/* A plain row of format t: n random values (a magnitude per 32, and with
 * `offset` a random offset in half the blocks) quantized by the format's own
 * quantizer; the tests then craft their edges into it. */
static void a8_random_row(uint32_t t, uint8_t *row, int64_t n, bool offset) {
    static float x[16384];   /* n <= 16384 (test_act8_kquant.c: past the panel buffer) */
    for (int64_t b = 0; b < n / 32; b++) {
        const float mag = powf(10.0f, (float)(int)(rnd32() % 5) - 2.0f);
        const float off = offset && rnd32() % 2 ? rndf() * mag : 0.0f;
        for (int k = 0; k < 32; k++) x[b * 32 + k] = rndf() * mag + off;
    }
    moe_quantize_row(t, x, row, n);
}

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

/* A plain row of format t (n values), made by the test. */
typedef void (*a8_make_row_fn)(uint32_t t, uint8_t *row, int64_t n, bool edges);
/* Extra checks of one row and its repacked copy (the layout), or NULL. */
typedef void (*a8_row_check_fn)(uint32_t t, const uint8_t *plain, const uint8_t *rep, int64_t n);

/* One shape: nrows rows of n values, ntok tokens; variant bit 0 pads the
 * repacked rows' stride, bit 1 the activations'. */
static void a8_check_shape(uint32_t t, int64_t n, int64_t nrows, int64_t ntok, bool edges, int variant, double tol,
                           a8_make_row_fn make_row, a8_row_check_fn row_check, a8_contract_fn contract) {
    const size_t rb0 = (size_t)moe_row_bytes(t, (uint64_t)n), rb = rb0 + (variant & 1 ? 5 : 0);
    const size_t ab = (size_t)moe_act8_row_bytes(n), xs = ab + (variant & 2 ? 68 : 0);
    uint8_t *plain = malloc(rb0 * (size_t)nrows), *wa = malloc(rb * (size_t)(nrows - 1) + rb0);
    uint8_t *xa = malloc(xs * (size_t)(ntok - 1) + ab);
    float *x = malloc(sizeof(float) * (size_t)n), *want = malloc(sizeof(float) * (size_t)(nrows * ntok));
    float *got = malloc(sizeof(float) * (size_t)(nrows * ntok + 1)), *w = malloc(sizeof(float) * (size_t)n);
    for (int64_t r = 0; r < nrows; r++) {
        make_row(t, plain + r * rb0, n, edges);
        moe_repack_a8(t, plain + r * rb0, wa + r * rb, 1, n);
        if (row_check) row_check(t, plain + r * rb0, wa + r * rb, n);
    }
    a8_check_levels(t, plain, rb0, wa, rb, xa, xs, x, w, want, got, n, nrows, ntok, edges, tol, contract, a8_make_x);
    free(plain); free(wa); free(xa); free(x); free(want); free(got); free(w);
}

/* Every shape of NS x ROWS x TOKS (row lengths past big_n only on a third
 * of the row/token pairs: the scalar reference is slow) for format t, after
 * checking that it has act_q8 kernels at every level; prints one line. */
static void a8_check_format(uint32_t t, const int64_t *NS, int n_ns, int64_t big_n, double tol, a8_make_row_fn make_row,
                            a8_row_check_fn row_check, a8_contract_fn contract) {
    static const int64_t ROWS[] = {1, 2, 3, 5, 8};
    static const int64_t TOKS[] = {1, 2, 3, 5};
    int levels = 0, shapes = 0;
    CHECK(moe_type_has_a8(t));
    for (int l = 0; l < MOE_ISA_COUNT; l++) {
        const moe_kernels *K = moe_kernels_for((moe_isa)l);
        levels += K != NULL;
        if (K) CHECK_MSG(K->gemv_a8[t] && K->gemm_a8[t], "%s %s: no a8 kernel", moe_type_get(t)->name, K->name);
    }
    for (int ni = 0; ni < n_ns; ni++)
        for (int ri = 0; ri < (int)(sizeof ROWS / sizeof ROWS[0]); ri++)
            for (int ti = 0; ti < (int)(sizeof TOKS / sizeof TOKS[0]); ti++) {
                if (NS[ni] > big_n && (ri + ti) % 3) continue;
                a8_check_shape(t, NS[ni], ROWS[ri], TOKS[ti], (ri + ti) % 2, ni + ri, tol, make_row, row_check, contract);
                shapes++;
            }
    printf("%s: a8 kernels at %d levels equal the reference on %d shapes\n", moe_type_get(t)->name, levels, shapes);
}

#endif
