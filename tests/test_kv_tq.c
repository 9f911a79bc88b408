/* test_kv_tq.c — the kv_tq codec (attention/kv_tq.h): the codebooks are the
 * true Lloyd-Max ones of N(0,1) (the 4-bit numbers, the centroid and
 * midpoint conditions against the exact density, their MSE); the distortion
 * on Gaussian and on heavy-tailed vectors with outlier channels (kurtosis
 * ~50 before the rotation, ~3 after); zero, NaN, Inf and overflowing vectors;
 * the packed bytes per vector; the kernels of every ISA level bit-identical
 * to the scalar reference and equal to decoding then the FP32 arithmetic. */
#include <math.h>
#include <stdint.h>

#include "attention/attn.h"
#include "attention/kv_tq.h"
#include "base/util.h"
#include "check.h"
#include "model/model.h"
#include "quant/quant.h"
#include "moefast.h"
#include <unistd.h>

static double Phi(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }
static double phi(double x) { return isinf(x) ? 0.0 : exp(-0.5 * x * x) / sqrt(2.0 * M_PI); }

/* The codebook at bits: ascending, symmetric, each centroid the conditional
 * mean of its cell between the midpoints (Lloyd's fixed point; equal-
 * probability bin means fail it), and the MSE the exact integral gives. */
static void check_codebook(int bits) {
    const float *cb = moe_tq_codebook(bits);
    const int L = 1 << bits;
    double mse = 1.0, worst = 0;
    for (int i = 0; i < L; i++) {
        if (i) CHECK(cb[i] > cb[i - 1]);
        CHECK(cb[i] == -cb[L - 1 - i]);
        const double a = i ? 0.5 * ((double)cb[i - 1] + cb[i]) : -INFINITY;
        const double b = i < L - 1 ? 0.5 * ((double)cb[i] + cb[i + 1]) : INFINITY;
        const double m = (phi(a) - phi(b)) / (Phi(b) - Phi(a));
        if (fabs(m - cb[i]) > worst) worst = fabs(m - cb[i]);
        mse -= (Phi(b) - Phi(a)) * (double)cb[i] * cb[i];
    }
    CHECK_MSG(worst < 2e-6, "%d bits: a centroid is %g from its cell's mean", bits, worst);
    CHECK_MSG(fabs(mse - moe_tq_codebook_mse(bits)) < 1e-7, "%d bits: MSE %.9f, stated %.9f", bits, mse,
              moe_tq_codebook_mse(bits));
}

static void test_codebooks(void) {
    /* the 4-bit upper half and MSE (Lloyd-Max of N(0,1)) */
    static const double up4[8] = {0.128395, 0.388048, 0.656759, 0.942340, 1.256231, 1.618046, 2.069017, 2.732590};
    const float *cb4 = moe_tq_codebook(4);
    for (int i = 0; i < 8; i++) CHECK_MSG(fabs(cb4[8 + i] - up4[i]) < 1e-6, "4-bit centroid %d: %.7f", i, cb4[8 + i]);
    CHECK(fabs(moe_tq_codebook_mse(4) - 0.009501) < 1e-6);
    for (int b = 3; b <= 5; b++) check_codebook(b);
    CHECK(moe_tq_codebook(2) == NULL && moe_tq_codebook(6) == NULL);
    /* scores_tq's integer centroids: the float ones scaled to +-CMAX, rounded */
    for (int b = 3; b <= 5; b++) {
        const float *cb = moe_tq_codebook(b);
        const int16_t *ck = moe_tq_codebook_int(b);
        const int L = 1 << b;
        for (int i = 0; i < L; i++)
            CHECK_MSG(ck[i] == (int16_t)lrint((double)cb[i] * MOE_TQ_CMAX / (double)cb[L - 1]), "%d bits: ck[%d] = %d", b,
                      i, ck[i]);
        CHECK(moe_tq_cscale(b) == cb[L - 1] / (float)MOE_TQ_CMAX);
    }
    /* the bounds that keep the products int8 and isum in int32 */
    for (int D = 32; D <= MOE_TQ_MAX_D; D *= 2)
        CHECK_MSG((long long)D * moe_tq_qmax(D) * MOE_TQ_CMAX <= (1LL << 30) && moe_tq_qmax(D) <= 127, "qmax(%d)", D);
}

/* The query's integers: the largest coordinate at +-Q, zero -> S 0, a NaN
 * or an Inf -> S NaN, a tiny amax does not overflow. */
static void test_query_q(void) {
    float q[64];
    int16_t qi[64];
    for (int d = 0; d < 64; d++) q[d] = (float)(d - 20) * 0.01f;
    const float S = moe_tq_query_q(q, 64, 5, qi);
    CHECK(qi[63] == moe_tq_qmax(64) && qi[20] == 0 && qi[0] < 0);
    CHECK(S == (q[63] / (float)moe_tq_qmax(64)) * moe_tq_cscale(5));
    for (int d = 0; d < 64; d++) q[d] = 0.0f;
    CHECK(moe_tq_query_q(q, 64, 5, qi) == 0.0f && qi[5] == 0);
    q[3] = 1e-45f;                                   /* S underflows to 0: scores 0, as near as float gets */
    CHECK(moe_tq_query_q(q, 64, 4, qi) == 0.0f && qi[3] == moe_tq_qmax(64));
    q[7] = NAN;
    CHECK(isnan(moe_tq_query_q(q, 64, 4, qi)) && qi[3] == 0);
    q[7] = -INFINITY;
    CHECK(isnan(moe_tq_query_q(q, 64, 3, qi)));
}

static void gauss(moe_rng *r, float *x, int n) {
    for (int i = 0; i < n; i++) x[i] = (float)moe_rng_normal(r);
}

/* Mean over n vectors of ||x - dec(enc(x))||^2 / ||x||^2: the distortion per
 * coordinate of unit variance. make(r, x) draws a vector. */
static double distortion(moe_rng *r, int D, int bits, int n, void (*make)(moe_rng *, float *, int)) {
    float x[256], y[256], tmp[256];
    uint8_t row[256 * 5 / 8 + 2];
    uint64_t s[4];
    double sum = 0;
    for (int i = 0; i < n; i++) {
        moe_tq_signs(i % 7, i % 3, D, s);
        make(r, x, D);
        moe_tq_encode(x, s, D, bits, tmp, row);
        moe_tq_decode(row, s, D, bits, y);
        double e = 0, nx = 0, ny = 0;
        for (int d = 0; d < D; d++) {
            e += ((double)x[d] - y[d]) * ((double)x[d] - y[d]);
            nx += (double)x[d] * x[d];
            ny += (double)y[d] * y[d];
        }
        CHECK_MSG(fabs(sqrt(ny) / sqrt(nx) - 1) < 1e-3, "norm correction: decoded norm %g, original %g", sqrt(ny), sqrt(nx));
        sum += e / nx;
    }
    return sum / n;
}

/* Outlier channels, as real models' keys have: channels 5 and 77 at 8x the
 * others (pooled kurtosis 3 (126 + 2 * 8^4) / 128 / ((126 + 2 * 8^2) / 128)^2
 * = 49.5). */
static void heavy(moe_rng *r, float *x, int n) {
    gauss(r, x, n);
    x[5] *= 8.0f;
    x[77 % n] *= 8.0f;
}

/* m: count, sum of squares, sum of fourth powers */
static double kurtosis(const double *m) { return m[2] / m[0] / ((m[1] / m[0]) * (m[1] / m[0])); }

static void test_distortion(void) {
    moe_rng r;
    moe_rng_seed(&r, 26);
    /* the figures: ~0.0024 / 0.0092 / 0.034 at 5 / 4 / 3 bits, D = 128, +-5 % */
    static const double want[6] = {0, 0, 0, 0.034, 0.0092, 0.0024};
    for (int b = 3; b <= 5; b++) {
        const double g = distortion(&r, 128, b, 3000, gauss);
        printf("  D 128, %d bits: Gaussian MSE %.5f (codebook %.5f)", b, g, moe_tq_codebook_mse(b));
        CHECK_MSG(fabs(g / want[b] - 1) < 0.05, "%d bits: Gaussian MSE %.5f, want %.4f +-5%%", b, g, want[b]);
        const double hv = distortion(&r, 128, b, 3000, heavy);
        printf(", outlier channels %.5f\n", hv);
        /* the rotation spreads the outliers: no worse than Gaussian vectors */
        CHECK_MSG(hv < want[b] * 1.05, "%d bits: heavy-tailed MSE %.5f, want <= %.4f +5%%", b, hv, want[b]);
    }
    /* kurtosis of the pooled coordinates before and after the rotation */
    double mx[3] = {0}, my[3] = {0};
    float x[128], y[128];
    uint64_t s[2];
    for (int i = 0; i < 4000; i++) {
        moe_tq_signs(3, i % 8, 128, s);
        heavy(&r, x, 128);
        moe_tq_rotate(x, s, 128, y);
        for (int d = 0; d < 128; d++) {
            mx[0]++, my[0]++;
            mx[1] += (double)x[d] * x[d]; mx[2] += pow(x[d], 4);
            my[1] += (double)y[d] * y[d]; my[2] += pow(y[d], 4);
        }
    }
    printf("  outlier channels: kurtosis %.1f before the rotation, %.2f after\n", kurtosis(mx), kurtosis(my));
    CHECK_MSG(kurtosis(mx) > 40 && kurtosis(mx) < 60, "kurtosis before %.1f", kurtosis(mx));
    CHECK_MSG(fabs(kurtosis(my) - 3) < 0.2, "kurtosis after %.2f", kurtosis(my));
}

/* Rotation: orthogonal (norm kept, R^T R x = x), signs per (layer, head). */
static void test_rotation(void) {
    moe_rng r;
    moe_rng_seed(&r, 3);
    for (int D = 32; D <= 1024; D *= 2) {
        float x[1024], y[1024];
        uint64_t s[16], s2[16];
        gauss(&r, x, D);
        moe_tq_signs(1, 2, D, s);
        moe_tq_rotate(x, s, D, y);
        double nx = 0, ny = 0, e = 0;
        for (int d = 0; d < D; d++) { nx += (double)x[d] * x[d]; ny += (double)y[d] * y[d]; }
        moe_tq_unrotate(y, s, D);
        for (int d = 0; d < D; d++) e = fmax(e, fabs(y[d] - x[d]));
        CHECK_MSG(fabs(ny / nx - 1) < 1e-5 && e < 1e-5, "D %d: norm ratio %g, round trip %g", D, ny / nx, e);
        moe_tq_signs(1, 3, D, s2);
        CHECK(memcmp(s, s2, (size_t)(D + 63) / 64 * 8) != 0);
        moe_tq_signs(2, 2, D, s2);
        CHECK(memcmp(s, s2, (size_t)(D + 63) / 64 * 8) != 0);
        moe_tq_signs(1, 2, D, s2);
        CHECK(memcmp(s, s2, (size_t)(D + 63) / 64 * 8) == 0);
    }
    CHECK(moe_tq_dim_ok(32) && moe_tq_dim_ok(64) && moe_tq_dim_ok(128) && moe_tq_dim_ok(4096));
    CHECK(!moe_tq_dim_ok(16) && !moe_tq_dim_ok(96) && !moe_tq_dim_ok(100) && !moe_tq_dim_ok(192) && !moe_tq_dim_ok(0) &&
          !moe_tq_dim_ok(8192));
}

/* Codes: each the nearest centroid of its rotated, normalised coordinate
 * (ties aside), read back from the packed row; bytes per row. */
static void test_packing(void) {
    CHECK_EQ_INT(moe_tq_row_bytes(128, 5) + moe_tq_row_bytes(128, 4), 148);   /* kv_tq at head dim 128 */
    CHECK_EQ_INT(moe_tq_row_bytes(128, 4) + moe_tq_row_bytes(128, 3), 116);   /* kv_tq_small */
    CHECK_EQ_INT(moe_tq_row_bytes(64, 5), 42);
    CHECK_EQ_INT(moe_tq_row_bytes(32, 3), 14);
    moe_rng r;
    moe_rng_seed(&r, 5);
    for (int b = 3; b <= 5; b++)
        for (int D = 32; D <= 256; D *= 2) {
            float x[256], t[256], tmp[256];
            uint8_t row[256 * 5 / 8 + 2 + 1];
            uint64_t s[4];
            moe_tq_signs(0, b, D, s);
            gauss(&r, x, D);
            const size_t rb = moe_tq_row_bytes(D, b);
            row[rb] = 0xA5;                                          /* a guard byte past the row */
            moe_tq_encode(x, s, D, b, tmp, row);
            CHECK(row[rb] == 0xA5);
            double n = 0;
            for (int d = 0; d < D; d++) n += (double)x[d] * x[d];
            moe_tq_rotate(x, s, D, t);
            const float *cb = moe_tq_codebook(b);
            int bad = 0;
            for (int d = 0; d < D; d++) {
                const double u = t[d] * sqrt((double)D) / sqrt(n);
                int best = 0;
                for (int c = 1; c < 1 << b; c++) if (fabs(u - cb[c]) < fabs(u - cb[best])) best = c;
                const int got = moe_tq_code(row, D, b, d);
                if (got != best && fabs(fabs(u - cb[got]) - fabs(u - cb[best])) > 1e-5) bad++;
            }
            CHECK_MSG(bad == 0, "bits %d D %d: %d codes are not the nearest centroid", b, D, bad);
        }
}

/* Zero -> exact zeros; NaN / Inf / a norm past the half range -> marked (NaN
 * scale): the scores and the weighted sum become NaN, as an FP32 cache
 * holding the NaN gives. */
static void test_edges(void) {
    float x[128] = {0}, y[128], tmp[128], q[128], sc[1], o[128];
    uint8_t row[82];
    uint64_t s[2];
    moe_tq_signs(0, 0, 128, s);
    for (int b = 3; b <= 5; b++) {
        memset(x, 0, sizeof x);
        moe_tq_encode(x, s, 128, b, tmp, row);
        moe_tq_decode(row, s, 128, b, y);
        int nz = 0;
        for (int d = 0; d < 128; d++) nz += y[d] != 0.0f;
        CHECK_MSG(nz == 0 && moe_tq_sigma(row, 128, b) == 0.0f, "%d bits: the zero vector decodes to %d nonzeros", b, nz);
        for (int d = 0; d < 128; d++) q[d] = 1.0f + (float)d;
        moe_tq_scalar.scores_tq(q, 128, 1, row, 1, 128, b, 0.125f, sc, 1);
        CHECK(sc[0] == 0.0f);
        const float bad[3] = {NAN, INFINITY, -INFINITY};
        for (int i = 0; i < 3; i++) {
            memset(x, 0, sizeof x);
            x[17] = bad[i];
            moe_tq_encode(x, s, 128, b, tmp, row);
            CHECK_MSG(isnan(moe_tq_sigma(row, 128, b)), "%d bits: %g not marked", b, bad[i]);
            moe_tq_scalar.scores_tq(q, 128, 1, row, 1, 128, b, 0.125f, sc, 1);
            CHECK(isnan(sc[0]));
            const float p = 0.5f;
            moe_tq_scalar.accum_tq(&p, 1, 1, row, 1, 128, b, o, 128);
            CHECK(isnan(o[0]) && isnan(o[127]));
        }
        for (int d = 0; d < 128; d++) x[d] = 1e30f;                 /* finite, norm past the half range */
        moe_tq_encode(x, s, 128, b, tmp, row);
        CHECK(isnan(moe_tq_sigma(row, 128, b)));
        for (int d = 0; d < 128; d++) x[d] = 3e3f * (d % 2 ? 1.0f : -1.0f);   /* large but within */
        moe_tq_encode(x, s, 128, b, tmp, row);
        CHECK(isfinite(moe_tq_sigma(row, 128, b)) && moe_tq_sigma(row, 128, b) > 1000.0f);
    }
}

/* The kernels: scalar == decoding then FP32 arithmetic (near), every ISA ==
 * scalar (bits), over head sizes, group sizes, key counts and code widths. */
/* accum_tq_rows (a prefill block's rows, each over its own first nkr[r]
 * keys) == accum_tq of each row alone, bit for bit, at every ISA: runs of
 * four equal counts, lone rows, a row with no key, counts on both sides of
 * the 64-key blocks, more rows than a prefill block has. */
static void test_accum_rows(void) {
    moe_rng r;
    moe_rng_seed(&r, 17);
    /* 45 rows: more than a prefill block of 4 tokens x 8 heads */
    static const int nk13[13] = {141, 141, 141, 141, 70, 70, 70, 70, 1, 0, 65, 64, 141};
    enum { R = 45 };
    int nkr[R];
    for (int i = 0; i < R; i++) nkr[i] = nk13[i % 13];
    const int nk = 141;
    const moe_tq_kernels *ks[3] = {&moe_tq_scalar, NULL, NULL};
    if (moe_kernels_for(MOE_ISA_AVX2)) ks[1] = moe_tq_for(moe_isa_table_for(MOE_ISA_AVX2)->attn);
    if (moe_kernels_for(MOE_ISA_AVX512)) ks[2] = moe_tq_for(moe_isa_table_for(MOE_ISA_AVX512)->attn);
    int compared = 0;
    for (int b = 3; b <= 5; b++)
        for (int D = 32; D <= 256; D *= 2) {
            const size_t rb = moe_tq_row_bytes(D, b), ps = (size_t)nk + 3, os = (size_t)D + 16;
            uint8_t *rows = malloc(rb * (size_t)nk);
            float *x = malloc(sizeof(float) * (size_t)D * 2), *p = malloc(sizeof(float) * ps * (size_t)R);
            float *o0 = malloc(sizeof(float) * os * (size_t)R), *o1 = malloc(sizeof(float) * os * (size_t)R);
            uint64_t s[4];
            moe_tq_signs(1, b, D, s);
            for (int j = 0; j < nk; j++) {
                gauss(&r, x, D);
                moe_tq_encode(x, s, D, b, x + D, rows + (size_t)j * rb);
            }
            for (size_t i = 0; i < ps * (size_t)R; i++) p[i] = (float)moe_rng_uniform(&r);
            for (int i = 0; i < R; i++)
                moe_tq_scalar.accum_tq(p + (size_t)i * ps, ps, 1, rows, nkr[i], D, b, o0 + (size_t)i * os, os);
            for (int k = 0; k < 3; k++) {
                if (!ks[k]) continue;
                for (size_t i = 0; i < os * (size_t)R; i++) o1[i] = -1.0f;
                ks[k]->accum_tq_rows(p, ps, R, nkr, rows, D, b, o1, os);
                for (int i = 0; i < R; i++)
                    CHECK_MSG(!memcmp(o0 + (size_t)i * os, o1 + (size_t)i * os, sizeof(float) * (size_t)D),
                              "accum_tq_rows differs: table %d bits %d D %d row %d (keys %d)", k, b, D, i, nkr[i]);
                compared++;
            }
            free(rows); free(x); free(p); free(o0); free(o1);
        }
    printf("  accum_tq_rows: %d comparisons\n", compared);
}

static void test_kernels(void) {
    moe_rng r;
    moe_rng_seed(&r, 11);
    const moe_isa isas[] = {MOE_ISA_AVX2, MOE_ISA_AVX512};
    int compared = 0;
    for (int b = 3; b <= 5; b++)
        /* 2048: fewer rows and keys per chunk; 4096: tiles of fewer than 8 keys */
        for (int D = 32; D <= MOE_TQ_MAX_D; D = D < 256 || D >= 2048 ? 2 * D : 8 * D)
            /* 3: a last pass of 3 rows; 17: past AVX-512's chunk of 16; 41: past
             * AVX2's chunk of 32 weight rows (at the smaller head sizes) */
            for (int G = 1; G <= (D <= 128 ? 41 : 17); G += (G < 3 ? 1 : G < 5 ? 2 : 12))
                for (int nk = 1; nk <= 141; nk += nk < 41 ? 20 : 100)   /* 141: past accum's blocks of 64 */ {
                    const size_t rb = moe_tq_row_bytes(D, b), qs = (size_t)D + 3, ps = (size_t)nk + 5;
                    uint8_t *rows = malloc(rb * (size_t)nk);
                    float *x = malloc(sizeof(float) * (size_t)D * 3), *q = malloc(sizeof(float) * qs * (size_t)G);
                    float *p = malloc(sizeof(float) * ps * (size_t)G), *s0 = calloc(ps * (size_t)G, sizeof(float));
                    float *s1 = calloc(ps * (size_t)G, sizeof(float)), *o0 = malloc(sizeof(float) * (size_t)D * G);
                    float *o1 = malloc(sizeof(float) * (size_t)D * G);
                    uint64_t s[MOE_TQ_MAX_D / 64];
                    moe_tq_signs(2, G, D, s);
                    for (int j = 0; j < nk; j++) {
                        gauss(&r, x, D);
                        if (j == nk / 2) memset(x, 0, sizeof(float) * (size_t)D);   /* a zero row among them */
                        moe_tq_encode(x, s, D, b, x + D, rows + (size_t)j * rb);
                    }
                    gauss(&r, q, (int)qs * G);
                    for (size_t i = 0; i < ps * (size_t)G; i++) p[i] = (float)moe_rng_uniform(&r);
                    moe_tq_scalar.scores_tq(q, qs, G, rows, nk, D, b, 0.125f, s0, ps);
                    moe_tq_scalar.accum_tq(p, ps, G, rows, nk, D, b, o0, (size_t)D);
                    /* against the decoded rows (rotated domain), in double */
                    /* the integer scores' error relative to |q| |k|: the centroids'
                     * rounding, 0.5/127 of the largest (3.26) over an RMS centroid
                     * >= 0.98, bounds it by 1.31e-2 (Cauchy-Schwarz); the query's,
                     * at most 0.5 sqrt(D) / 127 if every coordinate's error lined
                     * up, is ~1/sqrt(D) of that for random ones (kv_tq.h). Seen:
                     * <= 6.0e-3 (int16 contract: 6e-4); checked: 1e-2 */
                    double worst = 0;
                    for (int j = 0; j < nk; j++) {
                        const float sig = moe_tq_sigma(rows + (size_t)j * rb, D, b);
                        for (int h = 0; h < G; h++) {
                            double ref = 0, qq = 0, kk = 0;
                            for (int d = 0; d < D; d++) {
                                const double kd = (double)sig * moe_tq_codebook(b)[moe_tq_code(rows + (size_t)j * rb, D, b, d)];
                                ref += (double)q[(size_t)h * qs + d] * kd;
                                qq += (double)q[(size_t)h * qs + d] * q[(size_t)h * qs + d];
                                kk += kd * kd;
                            }
                            if (qq * kk > 0) worst = fmax(worst, fabs(ref * 0.125 - s0[(size_t)h * ps + j]) / (0.125 * sqrt(qq * kk)));
                        }
                    }
                    CHECK_MSG(worst < 1e-2, "bits %d D %d G %d nk %d: scores %g of |q||k| from the decoded rows", b, D, G, nk,
                              worst);
                    for (size_t ii = 0; ii < 2; ii++) {
                        if (!moe_kernels_for(isas[ii])) continue;
                        const moe_tq_kernels *k = moe_tq_for(moe_isa_table_for(isas[ii])->attn);
                        memset(s1, 0, sizeof(float) * ps * (size_t)G);
                        k->scores_tq(q, qs, G, rows, nk, D, b, 0.125f, s1, ps);
                        k->accum_tq(p, ps, G, rows, nk, D, b, o1, (size_t)D);
                        CHECK_MSG(!memcmp(s0, s1, sizeof(float) * ps * (size_t)G), "scores_tq differ: isa %d bits %d D %d G %d nk %d",
                                  (int)isas[ii], b, D, G, nk);
                        CHECK_MSG(!memcmp(o0, o1, sizeof(float) * (size_t)D * G), "accum_tq differs: isa %d bits %d D %d G %d nk %d",
                                  (int)isas[ii], b, D, G, nk);
                        compared++;
                    }
                    free(rows); free(x); free(q); free(p); free(s0); free(s1); free(o0); free(o1);
                }
    /* fwht: every head size, random and special values (a NaN, infinities, -0) */
    for (int D = 32; D <= MOE_TQ_MAX_D; D *= 2) {
        float *t0 = malloc(sizeof(float) * (size_t)D), *t1 = malloc(sizeof(float) * (size_t)D);
        for (int d = 0; d < D; d++) t0[d] = (float)moe_rng_normal(&r) * (d % 7 == 0 ? 1e30f : 1.0f);
        if (D == 64) t0[3] = NAN, t0[17] = INFINITY, t0[40] = -0.0f;
        for (size_t ii = 0; ii < 2; ii++) {
            if (!moe_kernels_for(isas[ii])) continue;
            const moe_tq_kernels *k = moe_tq_for(moe_isa_table_for(isas[ii])->attn);
            memcpy(t1, t0, sizeof(float) * (size_t)D);
            k->fwht(t1, D);
            float *ref = malloc(sizeof(float) * (size_t)D);
            memcpy(ref, t0, sizeof(float) * (size_t)D);
            moe_tq_fwht(ref, D);
            CHECK_MSG(!memcmp(ref, t1, sizeof(float) * (size_t)D), "fwht differs: isa %d D %d", (int)isas[ii], D);
            free(ref);
            compared++;
        }
        free(t0), free(t1);
    }
    printf("  kernels: %d ISA comparisons\n", compared);
    CHECK(compared > 0);
}

/* ---- end to end: generated tiny models under the flags ---- */

#define NTOK 30   /* past laguna-tiny's sliding window (12) */
static int32_t toks[NTOK];

/* Logits of every position: one forward call (chunked by n_batch) or, with
 * single, one call per token; isa: MOEFAST_ISA's level (NULL: auto). */
static float *run(const char *path, const char *flags, int threads, int n_batch, bool single, const char *isa,
                  char *err, size_t errlen) {
    if (isa && moe_set_isa(isa, err, errlen) != MOE_OK) return NULL;
    moe_model *m = NULL;
    moe_load_params lp = {.flags = flags};
    moe_session *s = NULL;
    float *lg = NULL;
    if (moe_model_load(path, &lp, &m, err, errlen) == MOE_OK) {
        moe_session_params sp = {.n_ctx = 64, .n_threads = threads, .n_batch = n_batch};
        if (moe_session_new(m, &sp, &s, err, errlen) == MOE_OK) {
            const int V = moe_model_n_vocab(m);
            lg = calloc((size_t)NTOK * V, sizeof(float));
            int rc = MOE_OK;
            if (single)
                for (int i = 0; i < NTOK && rc == MOE_OK; i++) {
                    const long before = check_allocs();
                    rc = moe_session_forward(s, &toks[i], 1, lg + (size_t)i * V, false);
                    CHECK_MSG(i == 0 || check_allocs() == before, "%s: decode step %d allocated", flags, i);
                }
            else rc = moe_session_forward(s, toks, NTOK, lg, true);
            CHECK_MSG(rc == MOE_OK, "%s", moe_session_error(s));
            moe_session_free(s);
        }
        moe_model_free(m);
    }
    if (isa) moe_set_isa("auto", err, errlen);
    return lg;
}

static size_t n_differ(const float *a, const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], 4) != 0;
    return bad;
}

/* prefill == decode, chunk sizes, threads 1/2/3/5, every ISA: the same bits
 * under num ("+kv_tq" ...); and the flag really changes the logits. */
static void check_e2e(const char *path, const char *name, const char *num, const float *fp32, size_t n) {
    char err[MOE_ERR_LEN], spec[64];
    snprintf(spec, sizeof spec, "none,%s", num);
    float *ref = run(path, spec, 1, 512, true, NULL, err, sizeof err);   /* plain path, token by token */
    CHECK_MSG(ref != NULL, "%s %s: %s", name, num, err);
    if (!ref) return;
    CHECK_MSG(n_differ(ref, fp32, n) > n / 2, "%s %s: the logits are the FP32 cache's", name, num);
    static const struct { int threads, n_batch; bool single; const char *isa; } runs[] = {
        {2, 512, false, NULL}, {2, 1, false, NULL}, {2, 7, false, NULL}, {3, 512, true, NULL}, {5, 5, false, NULL},
        {1, 64, false, NULL}, {2, 7, false, "scalar"}, {2, 7, false, "avx2"}, {3, 7, true, "avx512"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        if (runs[i].isa && moe_set_isa(runs[i].isa, err, sizeof err) != MOE_OK) continue;   /* CPU lacks it */
        moe_set_isa("auto", err, sizeof err);
        float *x = run(path, num, runs[i].threads, runs[i].n_batch, runs[i].single, runs[i].isa, err, sizeof err);
        CHECK_MSG(x != NULL, "%s %s: %s", name, num, err);
        if (!x) continue;
        const size_t bad = n_differ(ref, x, n);
        CHECK_MSG(bad == 0, "%s %s: threads %d n_batch %d %s isa %s: %zu logits differ from decode", name, num,
                  runs[i].threads, runs[i].n_batch, runs[i].single ? "decode" : "prefill",
                  runs[i].isa ? runs[i].isa : "auto", bad);
        free(x);
    }
    free(ref);
}

/* kv_tq_k / kv_tq_v (one half coded, the other FP32): each differs from the
 * full format of its bits (the exact half is really exact) and from the
 * other half's run (the coded half is really coded). At position 0 the one
 * key has weight exactly 1 whatever its score, so there the logits are the
 * values' alone: kv_tq_k's are the FP32 cache's bits, kv_tq_v's the full
 * format's. */
static void check_halves(const char *path, const char *name, const float *fp32, const float *tq, const float *small,
                         size_t n) {
    const size_t V = n / NTOK;
    static const char *const nums[] = {"none,+kv_tq,+kv_tq_k", "none,+kv_tq,+kv_tq_v", "none,+kv_tq_small,+kv_tq_k",
                                       "none,+kv_tq_small,+kv_tq_v"};
    char err[MOE_ERR_LEN];
    float *x[4];
    for (int i = 0; i < 4; i++) {
        x[i] = run(path, nums[i], 1, 512, false, NULL, err, sizeof err);
        CHECK_MSG(x[i] != NULL, "%s %s: %s", name, nums[i], err);
    }
    for (int i = 0; i < 4 && tq && small; i++)
        if (x[i]) CHECK_MSG(n_differ(x[i], i < 2 ? tq : small, n) > n / 2, "%s %s: the full format's logits", name, nums[i]);
    for (int i = 0; i < 4; i += 2)
        if (x[i] && x[i + 1]) CHECK_MSG(n_differ(x[i], x[i + 1], n) > n / 2, "%s %s = %s", name, nums[i], nums[i + 1]);
    for (int i = 0; i < 4 && tq && small; i++) {
        const float *want = i % 2 ? (i < 2 ? tq : small) : fp32;    /* _v: the full format's values; _k: FP32's */
        if (x[i]) CHECK_MSG(n_differ(x[i], want, V) == 0, "%s %s: position 0 is not the %s values'", name, nums[i],
                            i % 2 ? "coded" : "FP32");
    }
    for (int i = 0; i < 4; i++) free(x[i]);
}

/* kv_tq_v scores with the FP32 cache's kernels (exact keys). On a one-layer
 * model, whose queries and keys depend on no attention output, every decode
 * step's softmax numerators exp(s - max) and sums (the step's last item's,
 * left in thread 0's scratch) are the FP32 cache's bits, and its key rows are
 * the FP32 cache's bytes; kv_tq_k's numerators are kv_tq's (both code the
 * keys), and kv_tq's differ from FP32's (so the check sees the scores). */
static void check_tq_v_scores(const char *path) {
    static const char *const specs[4] = {"none", "none,+kv_tq,+kv_tq_v", "none,+kv_tq", "none,+kv_tq,+kv_tq_k"};
    char err[MOE_ERR_LEN];
    moe_model *m[4] = {0};
    moe_session *s[4] = {0};
    bool ok = true;
    for (int i = 0; i < 4 && ok; i++) {
        moe_load_params lp = {.flags = specs[i]};
        moe_session_params sp = {.n_ctx = 64, .n_threads = 1, .n_batch = 512};
        ok = moe_model_load(path, &lp, &m[i], err, sizeof err) == MOE_OK &&
             moe_session_new(m[i], &sp, &s[i], err, sizeof err) == MOE_OK;
        CHECK_MSG(ok, "%s: %s", specs[i], err);
    }
    if (ok) {
        const moe_hparams *hp = &m[0]->hp;
        const int G = hp->n_head_max / hp->n_head_kv, V = moe_model_n_vocab(m[0]);
        const size_t C = (size_t)s[0]->c->n_ctx, SC = s[0]->c->sc_stride;   /* cache rows, score rows */
        CHECK(hp->n_layer == 1 && s[1]->c->n_ctx == s[0]->c->n_ctx && s[1]->c->sc_stride == SC);
        float *lg = malloc(sizeof(float) * (size_t)V);
        int same_v = 0, same_k = 0, tq_differs = 0;
        for (int t = 0; t < NTOK; t++) {
            for (int i = 0; i < 4; i++) CHECK(moe_session_forward(s[i], &toks[t], 1, lg, false) == MOE_OK);
            const size_t nk = (size_t)t + 1;
            bool v_eq = !memcmp(s[0]->c->attn_sum, s[1]->c->attn_sum, sizeof(float) * (size_t)G);
            bool k_eq = !memcmp(s[2]->c->attn_sum, s[3]->c->attn_sum, sizeof(float) * (size_t)G);
            bool d = false;
            for (int h = 0; h < G; h++) {
                const size_t o = (size_t)h * SC;
                v_eq = v_eq && !memcmp(s[0]->c->scores + o, s[1]->c->scores + o, sizeof(float) * nk);
                k_eq = k_eq && !memcmp(s[2]->c->scores + o, s[3]->c->scores + o, sizeof(float) * nk);
                d = d || memcmp(s[0]->c->scores + o, s[2]->c->scores + o, sizeof(float) * nk);
            }
            CHECK_MSG(v_eq, "kv_tq_v: step %d's softmax differs from the FP32 cache's", t);
            CHECK_MSG(k_eq, "kv_tq_k: step %d's softmax differs from kv_tq's", t);
            same_v += v_eq, same_k += k_eq, tq_differs += d;
        }
        CHECK_MSG(tq_differs >= NTOK / 2, "kv_tq's softmax is the FP32 cache's at %d of %d steps", NTOK - tq_differs, NTOK);
        const size_t kb = (size_t)hp->n_head_kv * C * (size_t)hp->head_dim * sizeof(float);
        CHECK(s[1]->c->tq_krow == (size_t)hp->head_dim * sizeof(float));
        CHECK_MSG(!memcmp(s[0]->c->k_cache, s[1]->c->k_cache, kb), "kv_tq_v: the key rows differ from the FP32 cache's");
        printf("  kv_tq_v softmax = FP32's at %d/%d steps, kv_tq_k's = kv_tq's at %d/%d, kv_tq's differs at %d\n", same_v,
               NTOK, same_k, NTOK, tq_differs);
        free(lg);
    }
    for (int i = 0; i < 4; i++) {
        if (s[i]) moe_session_free(s[i]);
        if (m[i]) moe_model_free(m[i]);
    }
}

static void test_e2e(void) {
    char dir[] = "/tmp/moefast-test-kv-tq-XXXXXX", path[512], err[MOE_ERR_LEN];
    CHECK_MSG(mkdtemp(dir) != NULL, "mkdtemp");
    for (int i = 0; i < NTOK; i++) toks[i] = (int32_t)((i * 7919 + 13) % 997);
    /* qwen3moe tiny: head 64, G 4; laguna tiny: sliding-window layers, the attention gate */
    static const struct { const char *arch, *file; const char *ov[4]; } gens[] = {
        {"qwen3moe", "q.gguf", {"n_layer=1", NULL}},
        {"laguna", "l.gguf", {"n_layer=3", NULL}},
    };
    for (size_t g = 0; g < 2; g++) {
        snprintf(path, sizeof path, "%s/%s", dir, gens[g].file);
        CHECK_MSG(moe_gen_model(gens[g].arch, "tiny", gens[g].ov, path, err, sizeof err) == MOE_OK, "gen: %s", err);
        moe_model *m = NULL;
        if (moe_model_load(path, NULL, &m, err, sizeof err) != MOE_OK) { CHECK_MSG(0, "%s", err); continue; }
        const size_t n = (size_t)NTOK * (size_t)moe_model_n_vocab(m);
        moe_model_free(m);
        float *fp32 = run(path, "none", 1, 512, false, NULL, err, sizeof err);
        CHECK_MSG(fp32 != NULL, "%s", err);
        if (!fp32) continue;
        float *tq = run(path, "none,+kv_tq", 1, 512, false, NULL, err, sizeof err);
        float *small = run(path, "none,+kv_tq_small", 1, 512, false, NULL, err, sizeof err);
        if (tq && small) CHECK_MSG(n_differ(tq, small, n) > n / 2, "%s: kv_tq and kv_tq_small agree", gens[g].arch);
        check_halves(path, gens[g].arch, fp32, tq, small, n);
        if (g == 0) check_tq_v_scores(path);                        /* one layer */
        free(tq);
        free(small);
        check_e2e(path, gens[g].arch, "+kv_tq", fp32, n);
        check_e2e(path, gens[g].arch, "+kv_tq_small", fp32, n);
        check_e2e(path, gens[g].arch, "+kv_tq,+kv_tq_k", fp32, n);
        check_e2e(path, gens[g].arch, "+kv_tq_small,+kv_tq_v", fp32, n);
        free(fp32);
        remove(path);
    }
    /* refusals: a head size that is not a power of two, two cache formats */
    snprintf(path, sizeof path, "%s/odd.gguf", dir);
    static const char *const odd[] = {"head_dim=48", "n_layer=1", NULL};
    CHECK_MSG(moe_gen_model("qwen3moe", "tiny", odd, path, err, sizeof err) == MOE_OK, "gen: %s", err);
    float *x = run(path, "+kv_tq", 1, 512, false, NULL, err, sizeof err);
    CHECK_MSG(x == NULL && strstr(err, "kv_tq") && strstr(err, "head_dim 48"), "head_dim 48 not refused: %s", err);
    free(x);
    remove(path);
    snprintf(path, sizeof path, "%s/q.gguf", dir);
    static const char *const q[] = {"n_layer=1", NULL};
    CHECK(moe_gen_model("qwen3moe", "tiny", q, path, err, sizeof err) == MOE_OK);
    static const char *const pairs[] = {"+kv_tq,+kv_tq_small", "+kv_tq,+kv_q8", "+kv_f16,+kv_tq_small"};
    for (int i = 0; i < 3; i++) {
        x = run(path, pairs[i], 1, 512, false, NULL, err, sizeof err);
        CHECK_MSG(x == NULL && strstr(err, "choose the KV cache format"), "%s not refused: %s", pairs[i], err);
        free(x);
    }
    static const struct { const char *spec, *msg; } halves[] = {
        {"+kv_tq_k", "only modifies kv_tq"}, {"+kv_q8,+kv_tq_v", "only modifies kv_tq"},
        {"+kv_tq,+kv_tq_k,+kv_tq_v", "keep one half exact"},
    };
    for (int i = 0; i < 3; i++) {
        x = run(path, halves[i].spec, 1, 512, false, NULL, err, sizeof err);
        CHECK_MSG(x == NULL && strstr(err, halves[i].msg), "%s not refused: %s", halves[i].spec, err);
        free(x);
    }
    remove(path);
    rmdir(dir);
}

/* The vector encodes (one row, and encode2's two rows: a key and a value of
 * other widths) give the scalar encode's bytes, and the vector rotations
 * the scalar ones' bits (a NaN's payload aside, same_bits): every head size and
 * width, Gaussian rows at scales from subnormal to near overflow (where the
 * rotation itself overflows to Inf or gives Inf - Inf), arbitrary bit
 * patterns (subnormals, NaNs, infinities anywhere), zero and -0 rows, a
 * single non-finite value at the first, a middle or the last dim, rows
 * with one huge coordinate among tiny ones. */
/* The same bits, where a NaN may carry another payload: when a butterfly adds
 * two NaNs, x86 keeps the first operand's, and a compiler may order a
 * commutative add either way (the arbitrary bit patterns below hold many). */
static bool same_bits(const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) && !(isnan(a[i]) && isnan(b[i]))) return false;
    return true;
}

static void test_encode(void) {
    moe_rng r;
    moe_rng_seed(&r, 23);
    const moe_isa isas[] = {MOE_ISA_AVX2, MOE_ISA_AVX512};
    static const float scales[] = {1.0f, 1e-3f, 3e-39f, 1e-44f, 1e18f, 1e37f, 3e38f, 1e30f};
    int compared = 0;
    for (int b = 3; b <= 5; b++)
        for (int D = 32; D <= MOE_TQ_MAX_D; D *= 2) {
            const size_t rb = moe_tq_row_bytes(D, b);
            float *x = malloc(sizeof(float) * (size_t)D), *tmp = malloc(sizeof(float) * (size_t)D);
            float *y = malloc(sizeof(float) * (size_t)D), *tmp2 = malloc(sizeof(float) * 2 * (size_t)D);
            float *rot0 = malloc(sizeof(float) * 4 * (size_t)D), *rot1 = rot0 + D, *unr0 = rot0 + 2 * D, *unr1 = rot0 + 3 * D;
            uint8_t *r0 = malloc(rb), *r1 = malloc(rb), *q0 = malloc(moe_tq_row_bytes(D, 5)), *q1 = malloc(moe_tq_row_bytes(D, 5));
            uint64_t s[MOE_TQ_MAX_D / 64];
            const int nv = D <= 256 ? 120 : 12;
            for (int v = 0; v < nv; v++) {
                moe_tq_signs(v % 5, v % 3, D, s);
                const int kind = v % 12;
                for (int d = 0; d < D; d++) {
                    if (kind == 8) {                                     /* arbitrary bits */
                        const uint32_t u = (uint32_t)moe_rng_next(&r);
                        memcpy(&x[d], &u, 4);
                    } else x[d] = (float)moe_rng_normal(&r) * scales[kind % 8];
                }
                if (kind == 9) for (int d = 0; d < D; d++) x[d] = (d & 1) ? -0.0f : 0.0f;
                if (kind == 10) {                                        /* one non-finite value */
                    const float bad[3] = {NAN, INFINITY, -INFINITY};
                    x[(v / 12) % 3 == 0 ? 0 : (v / 12) % 3 == 1 ? D / 2 + 1 : D - 1] = bad[(v / 36) % 3];
                }
                if (kind == 11) {                                        /* one spike among tiny values */
                    for (int d = 0; d < D; d++) x[d] *= 1e-30f;
                    x[(v * 7) % D] = 1e4f;
                }
                /* y: a second row for encode2 (another width, a permutation of x, zero at times) */
                const int b2 = 3 + (b + v) % 3;
                const size_t rb2 = moe_tq_row_bytes(D, b2);
                for (int d = 0; d < D; d++) y[d] = v % 7 == 3 ? 0.0f : x[(d * 5 + 1) % D];
                moe_tq_encode(x, s, D, b, tmp, r0);
                moe_tq_encode(y, s, D, b2, tmp, q0);
                moe_tq_rotate(x, s, D, rot0);
                memcpy(unr0, x, sizeof(float) * (size_t)D);
                moe_tq_unrotate(unr0, s, D);
                for (size_t ii = 0; ii < 2; ii++) {
                    if (!moe_kernels_for(isas[ii])) continue;
                    const moe_tq_kernels *k = moe_tq_for(moe_isa_table_for(isas[ii])->attn);
                    memset(r1, 0xA5, rb);
                    moe_tq_encode_k(k, x, s, D, b, tmp, r1);
                    CHECK_MSG(!memcmp(r0, r1, rb), "encode differs: isa %d bits %d D %d vector %d (kind %d)", (int)isas[ii],
                              b, D, v, kind);
                    memset(r1, 0x5A, rb);
                    memset(q1, 0x5A, rb2);
                    k->encode2(x, y, s, D, b, b2, tmp2, r1, q1);
                    CHECK_MSG(!memcmp(r0, r1, rb) && !memcmp(q0, q1, rb2), "encode2 differs: isa %d bits %d/%d D %d vector %d",
                              (int)isas[ii], b, b2, D, v);
                    moe_tq_rotate_k(k, x, s, D, rot1);
                    memcpy(unr1, x, sizeof(float) * (size_t)D);
                    moe_tq_unrotate_k(k, unr1, s, D);
                    CHECK_MSG(same_bits(rot0, rot1, D) && same_bits(unr0, unr1, D), "rotate or unrotate differs: isa %d D %d vector %d",
                              (int)isas[ii], D, v);
                    compared++;
                }
            }
            free(x), free(tmp), free(y), free(tmp2), free(rot0), free(r0), free(r1), free(q0), free(q1);
        }
    printf("  encode: %d ISA comparisons\n", compared);
    CHECK(compared > 0);
}

int main(void) {
    check_alloc_guard_install();
    test_codebooks();
    test_query_q();
    test_rotation();
    test_packing();
    test_edges();
    test_distortion();
    test_kernels();
    test_accum_rows();
    test_encode();
    test_e2e();
    return check_report("test_kv_tq");
}
