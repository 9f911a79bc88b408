/* test_screen.c — the certified lm-head screen (src/model/screen.c,
 * docs/SCREEN.md).
 *  - the symbolic constants (gamma_d, the depths) against a long double
 *    recomputation and a count of the contract's roundings;
 *  - every covered head format (F32, F16, BF16, Q8_0) x every ISA level this
 *    CPU runs x layout (plain, x4): adversarial rows (residuals aligned with
 *    the activation's signs, codes at the range limits, zero and subnormal
 *    blocks, duplicated rows that tie exactly, rows one ulp apart) and
 *    adversarial activations; the screen's argmax and top-1/2/8 are the
 *    full head's ids and bits, and for every row and level the kernel's
 *    logit lies within screen value +- delta (the minimum slack printed);
 *  - the test-only flag that divides delta by 4 is caught at the exact row
 *    whose residual the activation follows (proof the check can fail);
 *  - uncovered heads (Q4_K), non-finite activations and non-finite weights
 *    fall back or build no screen. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "base/util.h"
#include "model/model.h"
#include "model/screen.h"
#include "moefast.h"
#include "quant/quant.h"

static moe_rng g_rng;
static double nrm(void) { return moe_rng_normal(&g_rng); }
static double min_slack = 1e300;

/* ---- heads ----------------------------------------------------------------- */

static size_t row_bytes(uint32_t type, int64_t n) {
    const moe_type_info *t = moe_type_get(type);
    return (size_t)(n / t->block) * t->block_bytes;
}

/* Writes float row f (already a value of the type for plain formats) as the type. */
static void put_row(uint32_t type, const float *f, uint8_t *dst, int64_t n) { moe_quantize_row(type, f, dst, n); }

/* Row kinds: 0 gaussian, 1 codes at the range limits, 2 a zero block and a
 * subnormal block, 3 huge dynamic range inside a block. */
static void gen_row(uint32_t type, int kind, float *f, int64_t n, double scale) {
    for (int64_t k = 0; k < n; k++) f[k] = (float)(nrm() * scale);
    if (kind == 1) {
        for (int64_t k = 0; k < n; k++) f[k] = (k % 3 ? 1 : -1) * (float)scale * (k % 32 == 0 ? 1.0f : 127.0f / 128);
    } else if (kind == 2) {
        for (int k = 0; k < 32 && k < n; k++) f[k] = 0;
        const float sub = type == MOE_T_F16 ? 0x1p-20f : type == MOE_T_Q8_0 ? 0x1p-30f : 0x1p-140f;
        for (int k = 32; k < 64 && k < n; k++) f[k] = sub * (float)(k - 40);
    } else if (kind == 3) {
        for (int64_t k = 0; k < n; k += 7) f[k] = (float)(scale * 200.0 * (k & 8 ? 1 : -1));
    }
}

/* Raw Q8_0 rows with codes -128 / 127 and f16 scales at the limits. */
static void q8_limits(uint8_t *dst, int64_t n, int variant) {
    static const uint16_t D[] = {0x0001, 0x03ff, 0x3c00, 0x7bff, 0x0000, 0x8400};
    for (int64_t b = 0; b < n / 32; b++) {
        uint8_t *blk = dst + b * 34;
        const uint16_t d = D[(b + variant) % 6];
        blk[0] = (uint8_t)(d & 255), blk[1] = (uint8_t)(d >> 8);
        for (int j = 0; j < 32; j++) blk[2 + j] = (uint8_t)(int8_t)((j + variant) % 3 == 0 ? -128 : (j % 2 ? 127 : -(j * 4)));
    }
}

typedef struct head {
    uint32_t type;
    int64_t V, n;
    size_t rb;
    uint8_t *plain, *x4;
    moe_screen *s;
} head;

static void head_init(head *h, uint32_t type, int64_t V, int64_t n, int seed) {
    h->type = type, h->V = V, h->n = n, h->rb = row_bytes(type, n);
    h->plain = calloc((size_t)V, h->rb);
    float *f = malloc((size_t)n * sizeof(float));
    const double sc = type == MOE_T_F16 ? 0.05 : 0.02;
    for (int64_t i = 0; i < V; i++) {
        const int kind = i % 17 == 3 ? 1 : i % 17 == 5 ? 2 : i % 17 == 7 ? 3 : 0;
        gen_row(type, kind, f, n, sc);
        put_row(type, f, h->plain + (size_t)i * h->rb, n);
        if (type == MOE_T_Q8_0 && i % 23 == 11) q8_limits(h->plain + (size_t)i * h->rb, n, (int)i + seed);
    }
    /* exact ties: row 40 = row 9, row 41 = row 9; one ulp apart: row 60 = row 9
     * with its first value's last bit flipped (F32/F16/BF16: one ulp) */
    if (V > 61) {
        memcpy(h->plain + 40 * h->rb, h->plain + 9 * h->rb, h->rb);
        memcpy(h->plain + 41 * h->rb, h->plain + 9 * h->rb, h->rb);
        memcpy(h->plain + 60 * h->rb, h->plain + 9 * h->rb, h->rb);
        h->plain[60 * h->rb + (type == MOE_T_Q8_0 ? 2 : 0)] ^= 1;
    }
    /* row 77: values on the level-1 grid ((16h - 120)·2^-8, one 120·2^-8 per
     * block fixing the scale): a zero level-1 residual, so only the
     * activation's quantization separates screen and kernel */
    if (V > 77) {
        for (int64_t k = 0; k < n; k++) {
            const int hh = k % 32 == 0 ? 15 : (int)(moe_rng_next(&g_rng) % 16);
            f[k] = (float)(16 * hh - 120) * 0x1p-8f;
        }
        put_row(type, f, h->plain + 77 * h->rb, n);
        if (type == MOE_T_Q8_0) {               /* Q8_0: the codes themselves, d = 2^-8 */
            uint8_t *r = h->plain + 77 * h->rb;
            for (int64_t b = 0; b < n / 32; b++) {
                const uint16_t d = moe_f32_to_f16(0x1p-8f);
                r[b * 34] = (uint8_t)(d & 255), r[b * 34 + 1] = (uint8_t)(d >> 8);
                for (int j = 0; j < 32; j++) r[b * 34 + 2 + j] = (uint8_t)(int8_t)(int)(f[b * 32 + j] * 256.0f);
            }
        }
    }
    free(f);
    const char *why = NULL;
    h->s = moe_screen_build(type, h->plain, h->rb, V, n, &why);
    CHECK_MSG(h->s != NULL, "%s: %s", moe_type_get(type)->name, why ? why : "");
    h->x4 = NULL;
    if (moe_type_has_x4(type) && moe_x4_fits(type, n)) {
        h->x4 = malloc((size_t)V * h->rb);
        moe_repack_x4(type, h->plain, h->x4, V, n);
    }
}

static void head_free(head *h) {
    free(h->plain);
    free(h->x4);
    moe_screen_free(h->s);
}

/* ---- the checks ---------------------------------------------------------------- */

/* Every row, both levels: |kernel - screen value| <= delta. With shrink,
 * returns the first row where it fails (-1: none). */
static int64_t check_bounds(const head *h, const float *x, const float *y, bool shrink) {
    const double xn = moe_screen_xnorm(x, h->n);
    for (int64_t i = 0; i < h->V; i++)
        for (int lv = 1; lv <= h->s->levels; lv++) {
            const double v = moe_screen_value(h->s, lv, i, x), d = moe_screen_delta(h->s, lv, i, xn, shrink);
            const double err = fabs((double)y[i] - v);
            if (shrink) {
                if (err > d) return i;
                continue;
            }
            CHECK_MSG(err <= d, "%s row %lld level %d: |%.9g - %.9g| = %g > delta %g", moe_type_get(h->type)->name,
                      (long long)i, lv, (double)y[i], v, err, d);
            if (d > 0 && (d - err) / d < min_slack) min_slack = (d - err) / d;
        }
    return -1;
}

static int g_cases, g_screened, g_int_rows, g_int_caught;

static moe_screen_scratch scratch_new(int64_t V, int64_t n) {
    moe_screen_scratch scr = {malloc((size_t)V * 4), malloc((size_t)V * 4), malloc((size_t)V * 4), malloc((size_t)V),
                              malloc((size_t)n), malloc((size_t)n), malloc((size_t)n)};
    return scr;
}
static void scratch_free(moe_screen_scratch *scr) {
    free(scr->s1); free(scr->y); free(scr->ids); free(scr->done); free(scr->xq); free(scr->q120); free(scr->tv);
}

/* The integer level 1 (heads of rows of a multiple of 512): the AVX-512
 * kernel gives the specification's bits, and every row's kernel logit lies
 * within its value +- its delta. With shrink: 1 when row `only` fails
 * the shrunken delta, else 0. -2: the step is outside the integer pass's
 * range (the float pass runs). */
static int64_t check_int(const head *h, const float *x, const float *y, bool shrink, int64_t only) {
    if (!moe_screen_int_ok(h->s)) return -2;
    moe_screen_scratch scr = scratch_new(h->V, h->n);
    double en, xhn;
    int64_t caught = shrink ? 0 : -1;
    if (!moe_screen_int_prep(h->s, x, &scr, &en, &xhn)) caught = -2;
    else {
        const double xn = moe_screen_xnorm(x, h->n);
        if (moe_kernels_for(MOE_ISA_AVX512)) moe_screen_int_avx512(h->s, 0, h->V, &scr, scr.s1);
        for (int64_t i = 0; i < h->V; i++) {
            const float v = moe_screen_int_value(h->s, i, &scr);
            const double d = moe_screen_int_delta(h->s, i, xn, en, xhn, shrink), err = fabs((double)y[i] - v);
            if (shrink) { if (i == only) caught = err > d; continue; }
            g_int_rows++;
            if (moe_kernels_for(MOE_ISA_AVX512))
                CHECK_MSG(!memcmp(&v, &scr.s1[i], 4), "row %lld: integer pass %.9g vs its specification %.9g",
                          (long long)i, (double)scr.s1[i], (double)v);
            CHECK_MSG(err <= d, "%s row %lld integer level: |%.9g - %.9g| = %g > delta %g", moe_type_get(h->type)->name,
                      (long long)i, (double)y[i], (double)v, err, d);
            if (d > 0 && (d - err) / d < min_slack) min_slack = (d - err) / d;
        }
    }
    scratch_free(&scr);
    return caught;
}

static void check_topk(const head *h, const float *x, const char *what) {
    const moe_kernels *ref = moe_kernels_for(MOE_ISA_SCALAR);
    float *y = malloc((size_t)h->V * sizeof(float));
    ref->gemv[h->type](h->plain, h->rb, h->V, x, y, h->n);
    check_bounds(h, x, y, false);
    /* the level-1 pass of every ISA level: moe_screen_value's bits */
    for (int isa = 1; isa < MOE_ISA_COUNT; isa++) {
        if (!moe_kernels_for((moe_isa)isa)) continue;
        moe_screen_level1_rows(h->s, (moe_isa)isa, 0, h->V, x, y);
        for (int64_t i = 0; i < h->V; i++) {
            const float v = moe_screen_value(h->s, 1, i, x);
            CHECK_MSG(!memcmp(&v, &y[i], 4), "%s isa %d row %lld: level 1 %.9g vs scalar %.9g", what, isa,
                      (long long)i, (double)y[i], (double)v);
        }
    }
    ref->gemv[h->type](h->plain, h->rb, h->V, x, y, h->n);
    check_int(h, x, y, false, -1);
    moe_screen_scratch scr = scratch_new(h->V, h->n);
    for (int isa = 0; isa < MOE_ISA_COUNT; isa++) {
        const moe_kernels *k = moe_kernels_for((moe_isa)isa);
        if (!k) continue;
        for (int lay = 0; lay < 2; lay++) {
            if (lay && !h->x4) continue;
            moe_weight w = {.name = "output.weight", .data = lay ? h->x4 : h->plain, .type = h->type, .n_in = h->n,
                            .n_out = h->V, .n_mat = 1, .row_bytes = h->rb, .mat_bytes = h->rb * (size_t)h->V,
                            .x4 = lay == 1};
            static const int KS[] = {1, 2, 8};
            for (int ki = 0; ki < 3; ki++) {
                const int kk = KS[ki];
                int32_t ids[8], rid[8];
                float vals[8], rv[8];
                moe_screen_step st;
                const int got = moe_screen_topk(h->s, &w, k, NULL, x, kk, ids, vals, &scr, false, &st);
                const int rn = moe_topk(y, (int)h->V, kk, rid, rv);
                g_cases++;
                if (got == 0) { CHECK(st.fallback); continue; }
                g_screened++;
                CHECK_EQ_INT(got, rn);
                for (int j = 0; j < rn && j < got; j++)
                    CHECK_MSG(ids[j] == rid[j] && !memcmp(&vals[j], &rv[j], 4),
                              "%s %s isa %d x4 %d top-%d entry %d: id %d %.9g vs full head id %d %.9g",
                              moe_type_get(h->type)->name, what, isa, lay, kk, j, ids[j], (double)vals[j], rid[j],
                              (double)rv[j]);
                if (kk == 1) CHECK_EQ_INT(ids[0], moe_argmax(y, (int)h->V));
            }
        }
    }
    scratch_free(&scr);
    free(y);
}

/* The residual of row i at level 1 (w - proxy), in double. */
static void residual(const head *h, int64_t i, double *r) {
    float *w = malloc((size_t)h->n * sizeof(float));
    moe_dequant_row(h->type, h->plain + (size_t)i * h->rb, w, h->n);
    float *e = calloc((size_t)h->n, sizeof(float));
    /* proxy value of element k: the screen value of a unit activation */
    for (int64_t k = 0; k < h->n; k++) {
        e[k] = 1.0f;
        r[k] = (double)w[k] - (double)moe_screen_value(h->s, 1, i, e);
        e[k] = 0.0f;
    }
    free(e);
    free(w);
}

static void activations(const head *h) {
    const int64_t n = h->n;
    float *x = malloc((size_t)n * sizeof(float));
    double *r = malloc((size_t)n * sizeof(double));
    float *w = malloc((size_t)n * sizeof(float));
    /* a: gaussian; b: the signs of row 9's residual (the tied rows, ulp
     * neighbour: residual-aligned, proxy error at its maximum); c: row 9
     * itself scaled (a peaked step whose winner ties with rows 40, 41);
     * d: one huge element; e: subnormal activations; f: zeros (all tie) */
    for (int64_t k = 0; k < n; k++) x[k] = (float)nrm();
    check_topk(h, x, "gaussian");
    residual(h, 9, r);
    for (int64_t k = 0; k < n; k++) x[k] = r[k] > 0 ? 1.5f : r[k] < 0 ? -1.5f : 0.25f;
    check_topk(h, x, "residual signs");
    moe_dequant_row(h->type, h->plain + 9 * h->rb, w, n);
    for (int64_t k = 0; k < n; k++) x[k] = w[k] * 64.0f + (float)(nrm() * 1e-3);
    check_topk(h, x, "row 9 (ties)");
    /* the activation's quantization error aligned with row 77's signs: each
     * block's first value 126·2^-6 fixes its step at 2^-6, the others sit
     * 0.49 steps off the grid */
    moe_dequant_row(h->type, h->plain + 77 * h->rb, w, n);
    for (int64_t k = 0; k < n; k++) x[k] = k % 32 == 0 ? 126.0f * 0x1p-6f : (w[k] > 0 ? 0.49f : -0.49f) * 0x1p-6f;
    check_topk(h, x, "quantization-aligned");
    for (int64_t k = 0; k < n; k++) x[k] = (float)nrm() * 1e-3f;
    x[5] = 3e4f;
    check_topk(h, x, "one huge element");
    for (int64_t k = 0; k < n; k++) x[k] = (float)(nrm() * 0x1p-130);
    check_topk(h, x, "subnormal");
    memset(x, 0, (size_t)n * sizeof(float));
    check_topk(h, x, "zeros");
    free(x); free(r); free(w);
}

/* The shrunken delta (test_screen_shrink) fails exactly at the row whose
 * residual the activation follows: x = r_j / max|r_j| makes the proxy error
 * sum(r x) = ||r||^2 / max|r|, near the Cauchy-Schwarz bound. */
static void shrink_caught(const head *h, int64_t j) {
    const int64_t n = h->n;
    float *x = malloc((size_t)n * sizeof(float)), *y = malloc((size_t)h->V * sizeof(float));
    double *r = malloc((size_t)n * sizeof(double)), m = 0;
    residual(h, j, r);
    for (int64_t k = 0; k < n; k++) m = fabs(r[k]) > m ? fabs(r[k]) : m;
    for (int64_t k = 0; k < n; k++) x[k] = (float)(r[k] / m);
    moe_kernels_for(MOE_ISA_SCALAR)->gemv[h->type](h->plain, h->rb, h->V, x, y, n);
    const double xn = moe_screen_xnorm(x, n);
    const double err = fabs((double)y[j] - moe_screen_value(h->s, 1, j, x));
    CHECK_MSG(err <= moe_screen_delta(h->s, 1, j, xn, false), "row %lld: sound delta must hold", (long long)j);
    CHECK_MSG(err > moe_screen_delta(h->s, 1, j, xn, true), "%s row %lld: the shrunken delta %g is not caught (err %g)",
              moe_type_get(h->type)->name, (long long)j, moe_screen_delta(h->s, 1, j, xn, true), err);
    if (moe_screen_int_ok(h->s)) {                              /* and the integer level's */
        const int64_t ok = check_int(h, x, y, false, -1), caught = check_int(h, x, y, true, j);
        CHECK(ok == -1 || ok == -2);
        CHECK_MSG(caught == 1 || caught == -2, "%s row %lld: the shrunken integer delta is not caught",
                  moe_type_get(h->type)->name, (long long)j);
        g_int_caught += caught == 1;
    }
    free(x); free(y); free(r);
}

/* ---- the constants ----------------------------------------------------------------- */

static void constants(void) {
    /* gamma_d = d u / (1 - d u), u = 2^-24: never below the long double value,
     * at most 2^-29 above it (the factor covering double's rounding) */
    for (int64_t d = 1; d <= (1 << 20); d = d * 3 + 1) {
        const long double u = 1.0L / 16777216.0L, exact = (long double)d * u / (1.0L - (long double)d * u);
        const long double g = (long double)moe_screen_gamma(d);
        CHECK_MSG(g >= exact && g <= exact * (1.0L + 0x1p-29L), "gamma_%lld = %.20Lg vs %.20Lg", (long long)d, g, exact);
    }
    /* depths: the most roundings any product of the contract passes through,
     * counted: lane l gets ceil((n - l) / 16) fmaf steps, then the 4 tree
     * levels; the screen has one more (an unfused product) */
    for (int64_t n = 32; n <= 8192; n += 32) {
        int64_t most = 0;
        for (int l = 0; l < 16; l++) {
            int64_t c = 0;
            for (int64_t k = l; k < n; k += 16) c++;
            if (c > most) most = c;
        }
        CHECK_EQ_INT(moe_screen_depth_kernel(n), most + 4);
        CHECK_EQ_INT(moe_screen_depth_screen(n), most + 5);
    }
    /* the kernel bound holds against the exact sum (long double is exact
     * here: products of floats, 64-bit significand) on adversarial sums:
     * cancellation, then growth */
    const int64_t n = 8192;
    float *w = malloc(n * sizeof(float)), *x = malloc(n * sizeof(float));
    for (int t = 0; t < 4; t++) {
        long double ex = 0, ab = 0;
        for (int64_t k = 0; k < n; k++) {
            w[k] = (float)(t & 1 ? 1.0 + nrm() * 1e-3 : nrm());
            x[k] = (float)(t & 2 ? (k % 2 ? 1.0 : -1.0) : 1.0 + nrm() * 1e-7);
        }
        uint8_t *row = malloc(n * 4);
        moe_quantize_row(MOE_T_F32, w, row, n);
        float y;
        moe_kernels_for(MOE_ISA_SCALAR)->gemv[MOE_T_F32](row, n * 4, 1, x, &y, n);
        for (int64_t k = 0; k < n; k++) ex += (long double)w[k] * x[k], ab += fabsl((long double)w[k] * x[k]);
        const long double bound = (long double)moe_screen_gamma(moe_screen_depth_kernel(n)) * ab;
        CHECK_MSG(fabsl((long double)y - ex) <= bound, "kernel rounding %Lg > bound %Lg", fabsl(y - ex), bound);
        free(row);
    }
    free(w); free(x);
}

static void uncovered(void) {
    const char *why = NULL;
    uint8_t raw[144 * 2] = {0};
    CHECK(moe_screen_build(MOE_T_Q4_K, raw, 144, 2, 256, &why) == NULL && why != NULL);
    /* a non-finite weight: no screen */
    float f[64] = {0};
    f[7] = INFINITY;
    uint8_t r32[256];
    moe_quantize_row(MOE_T_F32, f, r32, 64);
    CHECK(moe_screen_build(MOE_T_F32, r32, 256, 1, 64, &why) == NULL && why && strstr(why, "non-finite"));
    /* a non-finite activation: the full head runs */
    head h;
    head_init(&h, MOE_T_BF16, 64, 64, 0);
    float x[64];
    for (int k = 0; k < 64; k++) x[k] = (float)nrm();
    x[3] = NAN;
    moe_weight w = {.data = h.plain, .type = h.type, .n_in = 64, .n_out = 64, .n_mat = 1, .row_bytes = h.rb};
    moe_screen_scratch scr = scratch_new(64, 64);
    int32_t id;
    float v;
    moe_screen_step st;
    CHECK(moe_screen_topk(h.s, &w, moe_kernels_for(MOE_ISA_SCALAR), NULL, x, 1, &id, &v, &scr, false, &st) == 0 &&
          st.fallback);
    scratch_free(&scr);
    head_free(&h);
}

/* ---- through the model: moe_session_forward_topk against the full logits ---- */

/* Greedy steps on one model with flags: every step's top 8 from
 * forward_topk equals moe_topk of moe_session_forward's logits (ids and
 * bits), in a twin session fed the same tokens. Returns the steps the
 * screen answered. */
static int64_t model_steps(const char *path, const char *flags, bool diff, int steps) {
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_session *a = NULL, *b = NULL;
    moe_load_params lp = {.flags = flags, .diff = diff};
    if (moe_model_load(path, &lp, &m, err, sizeof err)) { CHECK_MSG(0, "%s", err); return 0; }
    moe_session_params sp = {.n_ctx = steps + 8, .n_threads = 2};
    CHECK(moe_session_new(m, &sp, &a, err, sizeof err) == MOE_OK);
    if (!diff) CHECK(moe_session_new(m, &sp, &b, err, sizeof err) == MOE_OK);   /* diff: the twin is the reference */
    const int V = moe_model_n_vocab(m);
    float *lg = malloc((size_t)V * sizeof(float));
    int32_t tok[3] = {5, 77, 140}, ids[8], rid[8];
    float vals[8], rv[8];
    int n = 3;
    for (int st = 0; st < steps; st++) {
        const int k = st % 3 == 0 ? 8 : st % 3 == 1 ? 1 : 2;
        CHECK_MSG(moe_session_forward_topk(a, tok, n, k, ids, vals) == MOE_OK, "%s", moe_session_error(a));
        if (diff) { tok[0] = ids[0], n = 1; continue; }
        CHECK(moe_session_forward(b, tok, n, lg, false) == MOE_OK);
        const int got = moe_topk(lg, V, k, rid, rv);
        for (int j = 0; j < got; j++)
            CHECK_MSG(ids[j] == rid[j] && !memcmp(&vals[j], &rv[j], 4), "%s flags %s step %d top-%d entry %d: %d %.9g vs %d %.9g",
                      path, flags, st, k, j, ids[j], (double)vals[j], rid[j], (double)rv[j]);
        float le;
        CHECK(moe_session_last_logit(a, rid[got - 1], &le) == MOE_OK && !memcmp(&le, &rv[got - 1], 4));
        tok[0] = ids[0];
        n = 1;
    }
    moe_screen_stats ss;
    moe_session_screen_stats(a, &ss);
    CHECK_EQ_INT(ss.steps, steps);
    free(lg);
    moe_session_free(a);
    moe_session_free(b);
    moe_model_free(m);
    return ss.screened;
}

/* moe_context_decode_topk over n_seq 3: prompts of different lengths in
 * one batch, then decode steps of one token per sequence, then a batch that
 * wants every token of one sequence's chunk (more rows than the fallback's
 * group); each row's top k must be the ids and bits of moe_topk over the
 * full logits of a twin context fed the same batches. diff: differential
 * mode checks the top k itself (no twin). Returns the rows the screen
 * answered. */
static int64_t batch_steps(const char *path, const char *flags, bool diff, int steps) {
    enum { NS = 3, K = 8 };
    char err[MOE_ERR_LEN];
    moe_model *m = NULL;
    moe_context *a = NULL, *b = NULL;
    moe_load_params lp = {.flags = flags, .diff = diff};
    if (moe_model_load(path, &lp, &m, err, sizeof err)) { CHECK_MSG(0, "%s", err); return 0; }
    moe_context_params cp = {.n_ctx = steps + 16, .n_threads = 2, .n_batch = 32, .n_seq = NS};
    CHECK(moe_context_new(m, &cp, &a, err, sizeof err) == MOE_OK);
    if (!diff) CHECK(moe_context_new(m, &cp, &b, err, sizeof err) == MOE_OK);
    const int V = moe_model_n_vocab(m);
    float *lg = malloc((size_t)8 * V * sizeof(float)), vals[8 * K], rv[K];
    int32_t tok[16], seq[16], ids[8 * K], rid[K];
    bool want[16];
    int nt = 0, n_rows = NS + 6, seq_row[16] = {0, 1, 2}, next[NS];
    for (int sq = 0; sq < NS; sq++)                               /* prompts of 1, 3 and 5 tokens */
        for (int j = 0; j < 1 + 2 * sq; j++) tok[nt] = (int32_t)(7 + 31 * sq + 13 * j), seq[nt] = sq, want[nt] = j == 2 * sq, nt++;
    {                                                             /* bad requests: refused, nothing run */
        moe_batch bt = {.n_tokens = nt, .token = tok, .seq = seq, .logits = want};
        CHECK_EQ_INT(moe_context_decode_topk(a, &bt, 0, ids, vals), MOE_EINVAL);
        CHECK(strstr(moe_context_error(a), "k 0 must be in 1..") != NULL);
        CHECK_EQ_INT(moe_context_decode_topk(a, &bt, 65, ids, vals), MOE_EINVAL);
        CHECK_EQ_INT(moe_context_decode_topk(a, &bt, 2, NULL, vals), MOE_EINVAL);
        CHECK_EQ_INT(moe_context_seq_len(a, 0), 0);
    }
    for (int st = 0; st <= steps; st++) {
        const bool all = st == steps;                             /* the last batch: every token of sequence 1's chunk */
        if (all) {
            nt = 0;
            for (int j = 0; j < 6; j++) tok[nt] = (int32_t)(3 + 17 * j), seq[nt] = 1, want[nt] = true, nt++;
        }
        int rows = 0;
        for (int i = 0; i < nt; i++) rows += want[i];
        const int k = st % 2 ? 1 + st / 4 % 2 : st % 4 ? 2 : K;   /* one row alone: k 1 or 2; 3 rows: 8 or 2 */
        moe_batch bt = {.n_tokens = nt, .token = tok, .seq = seq, .logits = want};
        int rc = moe_context_decode_topk(a, &bt, k, ids, vals);
        CHECK_MSG(rc == MOE_OK, "%s: %s", flags, moe_context_error(a));
        if (rc) break;
        if (!diff) {
            CHECK(moe_context_decode(b, &bt, lg) == MOE_OK);
            for (int r = 0; r < rows; r++) {
                const int got = moe_topk(lg + (size_t)r * V, V, k, rid, rv);
                for (int j = 0; j < k; j++) {
                    const int32_t ei = j < got ? rid[j] : -1;
                    CHECK_MSG(ids[r * k + j] == ei && (ei < 0 || !memcmp(&vals[r * k + j], &rv[j], 4)),
                              "%s flags %s batch %d row %d top-%d entry %d: %d %.9g vs %d %.9g", path, flags, st, r, k,
                              j, ids[r * k + j], (double)vals[r * k + j], ei, (double)rv[j]);
                }
            }
        }
        if (all) break;
        for (int r = 0; r < rows; r++) next[seq_row[r]] = ids[r * k];
        /* next: every sequence its argmax, or (odd steps) one sequence alone,
         * a row the screen takes whatever the head's format */
        nt = 0;
        for (int sq = 0; sq < NS; sq++)
            if ((st + 1) % 2 == 0 || sq == (st + 1) % NS) tok[nt] = next[sq], seq[nt] = sq, want[nt] = true, seq_row[nt] = sq, nt++;
        if (st + 1 < steps) n_rows += nt;
    }
    moe_screen_stats ss;
    CHECK(moe_context_screen_stats(a, &ss) == MOE_OK);
    CHECK_EQ_INT(ss.steps, n_rows);
    free(lg);
    moe_context_free(a);
    moe_context_free(b);
    moe_model_free(m);
    return ss.screened;
}

static void models(void) {
    char dir[] = "/tmp/moefast-test-screen-XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0); return; }
    static const char *TYPES[] = {"type=F32", "type=F16", "type=BF16", "type=Q8_0"};
    char err[MOE_ERR_LEN];
    for (int t = 0; t < 4; t++) {
        char path[128];
        snprintf(path, sizeof path, "%s/m%d.gguf", dir, t);
        /* BF16 and Q8_0 with rows of 512: the integer level 1 at AVX-512 */
        const char *ov[] = {TYPES[t], "head_peak=1", "embd_scale=4", t >= 2 ? "n_embd=512" : NULL, NULL};
        if (moe_gen_model("qwen3moe", "tiny", ov, path, err, sizeof err)) { CHECK_MSG(0, "%s", err); continue; }
        int64_t screened = 0;
        static const char *FL[] = {"default", "+act_q8", "+kv_f16", "-repack"};
        /* every ISA with the default flags; the numerics and -repack (the
         * plain layout) at the best level */
        for (int isa = 0; isa < MOE_ISA_COUNT; isa++) {
            static const char *IN[] = {"scalar", "avx2", "avx512"};
            if (moe_set_isa(IN[isa], err, sizeof err) != MOE_OK) continue;
            screened += model_steps(path, FL[0], false, 4);
        }
        moe_set_isa("auto", err, sizeof err);
        for (int f = 1; f < 4; f++) screened += model_steps(path, FL[f], false, 4);
        if (t == 2) screened += model_steps(path, "default", true, 3); /* differential mode compares the top k (slow: once) */
        CHECK_EQ_INT(model_steps(path, "-lm_screen", false, 3), 0);
        /* batches (moe_context_decode_topk): three sequences at a time */
        const int64_t bs = batch_steps(path, "default", false, 6);
        CHECK_MSG(bs > 0, "%s: the screen answered no row of a batch", TYPES[t]);
        if (t == 2) CHECK(batch_steps(path, "default", true, 2) > 0);   /* differential mode: once */
        CHECK_EQ_INT(batch_steps(path, "-lm_screen", false, 2), 0);
        CHECK_MSG(screened > 0, "%s: the screen answered no step", TYPES[t]);
        unlink(path);
    }
    rmdir(dir);
}

int main(void) {
    moe_rng_seed(&g_rng, 28);
    constants();
    uncovered();
    static const uint32_t TYPES[] = {MOE_T_F32, MOE_T_F16, MOE_T_BF16, MOE_T_Q8_0};
    for (size_t t = 0; t < 4; t++) {
        head h;
        head_init(&h, TYPES[t], 203, 512, (int)t);
        if (!h.s) { head_free(&h); continue; }
        activations(&h);
        shrink_caught(&h, 9);
        shrink_caught(&h, 3 + 17);
        head_free(&h);
    }
    models();
    printf("test_screen: %d top-k cases, %d answered by the screen, %d rows through the integer level, min slack %.3g "
           "of delta\n", g_cases, g_screened, g_int_rows, min_slack);
    CHECK(g_int_rows > 0 && g_int_caught > 0);
    CHECK(g_screened > g_cases / 3);
    return check_report("test_screen");
}
