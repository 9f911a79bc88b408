/* test_act8.c — the 8-bit activation path (flag act_q8; contract and
 * layouts in src/quant/act8_ref.c).
 *  (a) every ISA level this CPU runs: gemv_a8 / gemm_a8 on a8-repacked rows
 *      give the same bits as moe_a8_dot_ref on the plain rows (a NaN must be
 *      matched by a NaN, whose payload is not part of the contract: see
 *      same_out), over n in {32 .. 2048} (partial last groups of 1..15 blocks),
 *      1..8 rows, 1..5 tokens, odd strides, with random weights from
 *      moe_quantize_row plus crafted blocks (qw = -128, zero blocks,
 *      subnormal / Inf / NaN / -0 f16 scales) and activations with zero,
 *      Inf, NaN, huge and tiny blocks and all-zero tokens (and A8 rows
 *      edited past what the quantizer writes: NaN / -Inf / negative /
 *      subnormal scales, q = -128); nothing written past nrows; and
 *      moe_a8_dot_ref itself against a direct evaluation of the contract;
 *  (b) moe_quantize_act8 against the specification recomputed here (its own
 *      code: fmaxf, rintf, _Float16), byte for byte, and its error bound;
 *  (c) moe_repack_a8: rows stay row_bytes apart, each row depends only on
 *      its source row, the layout as documented, and the scalar a8 kernel on
 *      repacked rows equals moe_a8_dot_ref on plain rows;
 *  (d) any row range [r0, r1) and token range [t0, t1) of a product gives
 *      the same bits as the same entries of the whole product (how rows or
 *      tokens are split across threads or batches cannot matter). */
#include "check.h"
#include "quant/quant.h"
#include "util.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define QB 34     /* bytes of a Q8_0 block */
#define NMAX 2048

static moe_rng g_rng;
static uint32_t rnd32(void) { return (uint32_t)(moe_rng_next(&g_rng) >> 32); }
static float rndf(void) { return (float)(moe_rng_uniform(&g_rng) * 2.0 - 1.0); }
static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static bool same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0; }
/* The kernels' comparison: the same bits, except that a NaN only has to be
 * matched by a NaN. The payload (and sign) of a NaN is not part of the
 * contract (docs/KERNELS.md): when two NaNs meet in one operation (a NaN
 * scale times a NaN da, an FMA of a NaN S into a NaN accumulator, the tree's
 * additions) x86 returns the one in the instruction's first source operand,
 * and which operand that is in the scalar reference is the compiler's choice
 * (it treats + and * as commutative), as it is for fmaf in libm. */
static int g_nan_payload_diffs; /* counted and printed, not failures */
static long g_outputs[3];       /* reference outputs compared: finite, infinite, NaN */
static bool same_out(float got, float want) {
    if (same_bits(got, want)) return true;
    if (isnan(got) && isnan(want)) { g_nan_payload_diffs++; return true; }
    return false;
}

static const moe_kernels *g_isa[MOE_ISA_COUNT]; /* NULL: this CPU lacks the level */

/* Edge cases that make a whole dot product Inf or NaN (an Inf or NaN scale,
 * an Inf or huge activation block) are drawn about once per five rows, so
 * that most outputs stay finite and the others still compare bits. */
static bool poison(int64_t nb) { return rnd32() % (uint32_t)(5 * nb) == 0; }

/* ---- inputs -------------------------------------------------------------------- */

/* A plain (file-layout) Q8_0 row: moe_quantize_row of random values with a
 * per-block magnitude; with `edges`, some blocks are replaced by crafted
 * ones the quantizer never writes. */
static void make_row(uint8_t *row, int64_t n, bool edges) {
    static float x[NMAX];
    for (int64_t b = 0; b < n / 32; b++) {
        const float mag = powf(10.0f, (float)(int)(rnd32() % 5) - 2.0f);
        for (int k = 0; k < 32; k++) x[b * 32 + k] = rndf() * mag;
    }
    moe_quantize_row(MOE_T_Q8_0, x, row, n);
    if (!edges) return;
    for (int64_t b = 0; b < n / 32; b++) {
        uint8_t *blk = row + b * QB;
        const uint32_t r = rnd32() % 100;
        if (r < 4) memset(blk + 2, 0x80, 32);                                     /* every qw = -128 */
        else if (r < 8) for (int k = 0; k < 32; k++) blk[2 + k] = rnd32() % 3 ? (uint8_t)rnd32() : 0x80;
        else if (r < 11) memset(blk, 0, QB);                                      /* zero block */
        else if (r < 16) put16(blk, (uint16_t)((rnd32() & 0x8000) | (1 + rnd32() % 0x3FF))); /* subnormal */
        else if (r < 18) put16(blk, 0x7BFF);                                      /* f16 max */
        else if (r < 20) put16(blk, 0x8000);                                      /* -0 */
        if (poison(n / 32)) {
            if (rnd32() % 2) put16(blk, (uint16_t)(0x7C00 | (rnd32() & 0x8000))); /* +-Inf */
            else {                                                                /* NaN, several payloads */
                static const uint16_t nans[] = {0x7E00, 0xFE00, 0x7C01, 0x7F3A, 0xFD55};
                put16(blk, nans[rnd32() % 5]);
            }
        }
    }
}

/* Activations: random values with a per-block magnitude; with `edges`,
 * blocks that are all zero, hold NaN or Inf, are huge (da rounds to an f16
 * Inf), tiny (da subnormal or 0, f32 subnormals) or -0. */
static void make_x(float *x, int64_t n, bool edges) {
    for (int64_t b = 0; b < n / 32; b++) {
        float *xb = x + b * 32;
        const float mag = powf(10.0f, (float)(int)(rnd32() % 5) - 2.0f);
        for (int k = 0; k < 32; k++) xb[k] = rndf() * mag;
        if (!edges) continue;
        const uint32_t r = rnd32() % 100;
        if (r < 4) memset(xb, 0, 32 * sizeof(float));
        else if (r < 8) xb[rnd32() % 32] = NAN;                         /* ignored: q = 0 */
        else if (r < 11) for (int k = 0; k < 32; k++) xb[k] *= 1e-5f;   /* da f16-subnormal or 0 */
        else if (r < 14) for (int k = 0; k < 32; k++) xb[k] *= 1e-39f;  /* f32 subnormals: id = Inf */
        else if (r < 16) for (int k = 0; k < 32; k++) xb[k] = -0.0f;
        else if (r < 19) for (int k = 0; k < 32; k++) xb[k] *= 8.3e6f;  /* da near the f16 maximum */
        if (poison(n / 32)) {
            if (rnd32() % 2) xb[rnd32() % 32] = rnd32() & 1 ? INFINITY : -INFINITY; /* da = Inf, q = 0 */
            else for (int k = 0; k < 32; k++) xb[k] *= 1e30f;          /* amax/127 > f16 max: da = Inf */
        }
    }
}

/* The A8 row edited beyond what moe_quantize_act8 writes, still a valid
 * kernel input: a block's scale set to NaN (several payloads), -Inf, a
 * negative or subnormal float, or some q set to -128 (corr recomputed, as
 * moe_a8_dot_ref does not read it). */
static void edit_a8(uint8_t *xa, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        uint8_t *g = xa + (b / A8_G) * A8_GROUP_BYTES;
        const int j = (int)(b % A8_G);
        const uint32_t r = rnd32() % 100;
        float da;
        if (poison(n / 32)) {
            static const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7FC12345u, 0xFFD00001u};
            da = rnd32() % 3 ? from_bits(nans[rnd32() % 4]) : -INFINITY;
        } else if (r < 7) da = -0.37f;
        else if (r < 9) da = 1e-41f;
        else if (r < 12) {
            int32_t sum = 0;
            for (int k = 0; k < 32; k++) {
                uint8_t *q = g + (k / 4) * 64 + j * 4 + k % 4;
                if (rnd32() % 4 == 0) *q = 0x80;
                sum += (int8_t)*q;
            }
            const int32_t corr = -128 * sum;
            memcpy(g + 512 + 4 * j, &corr, 4);
            continue;
        } else continue;
        memcpy(g + 576 + 4 * j, &da, 4);
    }
}

/* ---- (a) SIMD == reference ------------------------------------------------------- */

/* partial last groups of 1, 2, 3, 8, 9 and 15 blocks, whole groups, and a whole group + 9 */
static const int64_t NS[] = {32, 64, 96, 256, 288, 480, 512, 544, 800, 1024, 2048};
static const int64_t ROWS[] = {1, 2, 3, 5, 8};
static const int64_t TOKS[] = {1, 2, 3, 5};
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

static int g_mismatch_reports;
static void report(const char *isa, const char *kind, int64_t n, int64_t nrows, int64_t ntok, int mode,
                   int64_t r, int64_t t, float got, float want) {
    if (g_mismatch_reports++ < 20)
        fprintf(stderr, "  %s %s n=%lld rows=%lld tokens=%lld mode=%d: row %lld token %lld: %a (0x%08x) != ref %a (0x%08x)\n",
                isa, kind, (long long)n, (long long)nrows, (long long)ntok, mode, (long long)r, (long long)t,
                got, bits(got), want, bits(want));
}

/* mode bit 0: crafted weight blocks; bit 1: crafted activations; bit 2: the A8 rows edited. */
static void check_shape(int64_t n, int64_t nrows, int64_t ntok, int mode, int variant) {
    const size_t rb0 = (size_t)moe_row_bytes(MOE_T_Q8_0, (uint64_t)n);
    const size_t rb = rb0 + (variant & 1 ? 7 : 0);               /* odd row stride */
    const size_t ab = (size_t)moe_act8_row_bytes(n);
    const size_t xs = ab + (variant & 2 ? 68 : 0);               /* A8 rows not 64-byte apart */
    const size_t ys = (size_t)nrows + 3;
    uint8_t *plain = malloc(rb0 * (size_t)nrows);
    /* exactly as long as the data: a read past the last row or token is an ASan error */
    uint8_t *wa = malloc(rb * (size_t)(nrows - 1) + rb0);
    uint8_t *xa = malloc(xs * (size_t)(ntok - 1) + ab);
    float *x = malloc(sizeof(float) * (size_t)n);
    float *want = malloc(sizeof(float) * ys * (size_t)ntok), *got = malloc(sizeof(float) * ys * (size_t)ntok);
    float *yv = malloc(sizeof(float) * ((size_t)nrows + 1));
    for (int64_t r = 0; r < nrows; r++) make_row(plain + r * rb0, n, mode & 1);
    if (rb == rb0) moe_repack_a8(MOE_T_Q8_0, plain, wa, nrows, n);
    else for (int64_t r = 0; r < nrows; r++) moe_repack_a8(MOE_T_Q8_0, plain + r * rb0, wa + r * rb, 1, n);
    for (int64_t t = 0; t < ntok; t++) {
        make_x(x, n, mode & 2);
        if ((mode & 2) && t == 1) memset(x, 0, sizeof(float) * (size_t)n); /* an all-zero token */
        moe_quantize_act8(x, xa + t * xs, n);
        if (mode & 4) edit_a8(xa + t * xs, n);
    }
    const float sentinel = from_bits(0x7F812345u); /* a signalling NaN no kernel writes */
    for (size_t i = 0; i < ys * (size_t)ntok; i++) want[i] = sentinel;
    for (int64_t t = 0; t < ntok; t++)
        for (int64_t r = 0; r < nrows; r++)
            want[t * ys + r] = moe_a8_dot_ref(MOE_T_Q8_0, plain + r * rb0, xa + t * xs, n);
    for (int64_t t = 0; t < ntok; t++)
        for (int64_t r = 0; r < nrows; r++) g_outputs[isfinite(want[t * ys + r]) ? 0 : isinf(want[t * ys + r]) ? 1 : 2]++;
    for (int l = 0; l < MOE_ISA_COUNT; l++) {
        const moe_kernels *k = g_isa[l];
        if (!k) continue;
        /* gemm */
        for (size_t i = 0; i < ys * (size_t)ntok; i++) got[i] = sentinel;
        k->gemm_a8[MOE_T_Q8_0](wa, rb, nrows, xa, xs, ntok, got, ys, n);
        int bad = 0;
        for (int64_t t = 0; t < ntok; t++)
            for (int64_t r = 0; r < (int64_t)ys; r++)
                if (!(r < nrows ? same_out(got[t * ys + r], want[t * ys + r]) : same_bits(got[t * ys + r], want[t * ys + r]))) {
                    bad++;
                    report(k->name, r < nrows ? "gemm" : "gemm (wrote past nrows)", n, nrows, ntok, mode, r, t,
                           got[t * ys + r], want[t * ys + r]);
                }
        CHECK_MSG(bad == 0, "%s gemm_a8 n=%lld rows=%lld tokens=%lld mode=%d: %d outputs differ", k->name,
                  (long long)n, (long long)nrows, (long long)ntok, mode, bad);
        /* gemv, token by token */
        bad = 0;
        for (int64_t t = 0; t < ntok; t++) {
            yv[nrows] = sentinel;
            k->gemv_a8[MOE_T_Q8_0](wa, rb, nrows, xa + t * xs, yv, n);
            for (int64_t r = 0; r <= nrows; r++)
                if (!(r < nrows ? same_out(yv[r], want[t * ys + r]) : same_bits(yv[r], sentinel))) {
                    bad++;
                    report(k->name, r < nrows ? "gemv" : "gemv (wrote past nrows)", n, nrows, ntok, mode, r, t,
                           yv[r], r < nrows ? want[t * ys + r] : sentinel);
                }
        }
        CHECK_MSG(bad == 0, "%s gemv_a8 n=%lld rows=%lld tokens=%lld mode=%d: %d outputs differ", k->name,
                  (long long)n, (long long)nrows, (long long)ntok, mode, bad);
    }
    free(plain); free(wa); free(xa); free(x); free(want); free(got); free(yv);
}

static void test_kernels_match(void) {
    int shapes = 0;
    for (int ni = 0; ni < COUNT(NS); ni++)
        for (int ri = 0; ri < COUNT(ROWS); ri++)
            for (int ti = 0; ti < COUNT(TOKS); ti++)
                for (int mode = 0; mode < 8; mode++) {
                    check_shape(NS[ni], ROWS[ri], TOKS[ti], mode, ni + ri + ti + mode);
                    shapes++;
                }
    /* the largest products: every qw = -128 against every q = -127 / +127 */
    {
        const int64_t n = 544;
        uint8_t row[17 * QB], wa[17 * QB], xa[2 * A8_GROUP_BYTES];
        float x[544];
        for (int b = 0; b < 17; b++) { put16(row + b * QB, 0x3C00); memset(row + b * QB + 2, 0x80, 32); }
        moe_repack_a8(MOE_T_Q8_0, row, wa, 1, n);
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            for (int i = 0; i < n; i++) x[i] = (float)sgn;
            moe_quantize_act8(x, xa, n);
            const float want = moe_a8_dot_ref(MOE_T_Q8_0, row, xa, n);
            /* 17 blocks of 32 * (-128) * (+-127) * (1/127 rounded to f16) */
            CHECK_MSG(want != 0 && isfinite(want) && (want < 0) == (sgn > 0), "%a", want);
            for (int l = 0; l < MOE_ISA_COUNT; l++) {
                if (!g_isa[l]) continue;
                float y = 0;
                g_isa[l]->gemv_a8[MOE_T_Q8_0](wa, sizeof wa, 1, xa, &y, n);
                CHECK_MSG(same_bits(y, want), "%s extreme sgn %d: %a != %a", g_isa[l]->name, sgn, y, want);
            }
        }
    }
    printf("act8 kernels: %d shape/mode combinations, reference outputs %ld finite, %ld infinite, %ld NaN; "
           "%d NaN outputs of a kernel with another payload than the reference (not part of the contract)\n",
           shapes, g_outputs[0], g_outputs[1], g_outputs[2], g_nan_payload_diffs);
}

/* The reference itself follows the contract: the dot product evaluated
 * directly from the plain row and the A8 row's q and da, lanes as quant.h. */
static void test_ref_contract(void) {
    for (int ni = 0; ni < COUNT(NS); ni++) {
        const int64_t n = NS[ni];
        uint8_t row[NMAX / 32 * QB], xa[NMAX / 512 * A8_GROUP_BYTES];
        float x[NMAX];
        for (int rep = 0; rep < 4; rep++) {
            make_row(row, n, rep & 1);
            make_x(x, n, rep & 2);
            moe_quantize_act8(x, xa, n);
            float acc[16] = {0};
            for (int64_t b = 0; b < n / 32; b++) {
                const uint8_t *g = xa + (b / 16) * A8_GROUP_BYTES;
                const int j = (int)(b % 16);
                int32_t isum = 0;
                for (int k = 0; k < 32; k++) isum += (int8_t)row[b * QB + 2 + k] * (int8_t)g[(k / 4) * 64 + j * 4 + k % 4];
                _Float16 dh;
                memcpy(&dh, row + b * QB, 2);
                float da;
                memcpy(&da, g + 576 + 4 * j, 4);
                const float S = (float)dh * da;
                acc[b % 16] = fmaf((float)isum, S, acc[b % 16]);
            }
            for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
            for (int l = 0; l < 4; l++) acc[l] += acc[l + 4];
            for (int l = 0; l < 2; l++) acc[l] += acc[l + 2];
            const float want = acc[0] + acc[1], got = moe_a8_dot_ref(MOE_T_Q8_0, row, xa, n);
            /* NaN payloads: the contract leaves them open (docs/KERNELS.md), and
             * this direct evaluation converts f16 NaNs differently */
            CHECK_MSG(same_bits(got, want) || (isnan(got) && isnan(want)), "ref contract n=%lld rep %d: %a != %a",
                      (long long)n, rep, got, want);
        }
    }
}

/* ---- (b) moe_quantize_act8 follows its specification ------------------------------ */

/* The specification of act8_ref.c, written again: amax ignores NaN (fmaxf),
 * id = 127/amax or 0, q = round-half-even(x*id) clamped to [-127, 127]
 * (rintf in the default rounding mode), NaN -> 0, corr = -128 * sum q,
 * da = amax/127 rounded to IEEE half; absent blocks of the last group are
 * zeros; q of block j, value k at slab k/4, byte 4j + k%4. */
static void spec_act8(const float *x, uint8_t *out, int64_t n) {
    const int64_t nb = n / 32, ng = (nb + 15) / 16;
    memset(out, 0, (size_t)ng * 640);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *g = out + (b / 16) * 640;
        const int j = (int)(b % 16);
        float amax = 0.0f;
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(x[b * 32 + k]));
        const float id = amax == 0.0f ? 0.0f : 127.0f / amax;
        int32_t sum = 0;
        for (int k = 0; k < 32; k++) {
            const float v = x[b * 32 + k] * id;
            const int q = isnan(v) ? 0 : (int)rintf(fminf(fmaxf(v, -127.0f), 127.0f));
            g[(k / 4) * 64 + 4 * j + k % 4] = (uint8_t)(int8_t)q;
            sum += q;
        }
        const int32_t corr = -128 * sum;
        const float da = (float)(_Float16)(amax / 127.0f);
        memcpy(g + 512 + 4 * j, &corr, 4);
        memcpy(g + 576 + 4 * j, &da, 4);
    }
}

/* Error bound checked for every finite x in a block whose da is finite:
 *     |x - q*da| <= da/2 * (1 + 1e-3) + 127 * |da - amax/127|
 * (in double). The first term is half a quantization step (the 1e-3 covers
 * the float roundings of id and x*id); the second is the f16 rounding of da,
 * which |q| <= 127 multiplies (it also covers the clamp at +-127, blocks whose
 * da rounds to 0 and f32-subnormal blocks where id overflows to Inf). Blocks
 * with da = Inf (amax > 65504*127 or an Inf value) are only byte-compared. */
static int check_bound(const float *x, const uint8_t *xa, int64_t n, double *worst) {
    int bad = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *g = xa + (b / 16) * 640;
        const int j = (int)(b % 16);
        float da, amax = 0;
        memcpy(&da, g + 576 + 4 * j, 4);
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(x[b * 32 + k]));
        if (!isfinite(da)) continue;
        const double bound = da / 2.0 * (1 + 1e-3) + 127.0 * fabs((double)da - (double)amax / 127.0);
        for (int k = 0; k < 32; k++) {
            const float xv = x[b * 32 + k];
            if (!isfinite(xv)) continue;
            const int q = (int8_t)g[(k / 4) * 64 + 4 * j + k % 4];
            const double err = fabs((double)xv - (double)q * (double)da);
            /* the ratio where da > 0 (where da rounds to 0, err = |x| reaches the bound at x = amax) */
            if (da > 0 && err / bound > *worst) *worst = err / bound;
            if (!(err <= bound)) {
                if (bad++ < 3)
                    fprintf(stderr, "  act8 bound: block %lld value %d: x=%a q=%d da=%a err=%g bound=%g\n",
                            (long long)b, k, xv, q, da, err, bound);
            }
        }
    }
    return bad;
}

static void test_quantize_spec(void) {
    static const int64_t QN[] = {32, 64, 480, 512, 544, 2048};
    static float x[NMAX];
    static uint8_t got[NMAX / 512 * 640 + 640], want[NMAX / 512 * 640 + 640];
    double worst = 0;
    int rows = 0;
    for (int ni = 0; ni < COUNT(QN); ni++) {
        const int64_t n = QN[ni];
        const size_t ab = (size_t)moe_act8_row_bytes(n);
        CHECK_EQ_INT(ab, (size_t)(n / 32 + 15) / 16 * 640);
        CHECK_EQ_INT(ab % 64, 0);
        for (int dist = 0; dist < 6; dist++) {
            if (dist < 2) make_x(x, n, dist == 1);
            else if (dist == 2) for (int64_t i = 0; i < n; i++) x[i] = (float)moe_rng_normal(&g_rng) * 0.02f;
            else if (dist == 3) for (int64_t i = 0; i < n; i++) x[i] = rndf() * (float)(1 + i % 7) + 0.3f;
            else make_x(x, n, true);
            if (dist == 5 || n == 32) {
                /* hand-made blocks: ties at amax = 127 (id = 1: x = k + 0.5 rounds to even),
                 * the clamp, NaN next to the maximum, -0 */
                static const float ties[32] = {127, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, 126.5f, -126.5f, -127,
                                               -0.0f, 0, 4.5f, -5.5f, 100.5f, 0.49999997f, NAN, 64.5f, -64.5f,
                                               1e-30f, -1e-38f, 6.5f, 7.5f, -7.5f, 8.5f, 9.5f, 10.5f, -11.5f,
                                               12.5f, 13.5f, 14.5f, -15.5f};
                memcpy(x, ties, sizeof ties);
            }
            memset(got, 0xCD, ab + 640);                 /* every byte must be written, none past ab */
            moe_quantize_act8(x, got, n);
            spec_act8(x, want, n);
            size_t first = ab;
            for (size_t i = 0; i < ab; i++) if (got[i] != want[i]) { first = i; break; }
            CHECK_MSG(first == ab, "quantize_act8 n=%lld dist %d: byte %zu (group %zu, offset %zu) = 0x%02x, spec 0x%02x",
                      (long long)n, dist, first, first / 640, first % 640, got[first < ab ? first : 0],
                      want[first < ab ? first : 0]);
            int past = 0;
            for (size_t i = ab; i < ab + 640; i++) past += got[i] != 0xCD;
            CHECK_MSG(past == 0, "quantize_act8 n=%lld wrote %d bytes past its row", (long long)n, past);
            const int bad = check_bound(x, got, n, &worst);
            CHECK_MSG(bad == 0, "quantize_act8 n=%lld dist %d: %d values outside the bound", (long long)n, dist, bad);
            rows++;
        }
    }
    /* spot values of the tie block (n = 32, dist 5 above used it last): worked by hand */
    {
        float v[32] = {127, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f};
        for (int k = 7; k < 32; k++) v[k] = 0;
        v[31] = NAN;
        moe_quantize_act8(v, got, 32);
        static const int8_t q[7] = {127, 2, 4, -2, 0, 0, 2};
        for (int k = 0; k < 7; k++) CHECK_MSG((int8_t)got[(k / 4) * 64 + k % 4] == q[k], "tie value %d: q=%d, want %d", k,
                                              (int8_t)got[(k / 4) * 64 + k % 4], q[k]);
        CHECK_EQ_INT((int8_t)got[7 * 64 + 3], 0); /* NaN -> 0 */
        int32_t corr;
        float da;
        memcpy(&corr, got + 512, 4);
        memcpy(&da, got + 576, 4);
        CHECK_EQ_INT(corr, -128 * (127 + 2 + 4 - 2 + 2));
        CHECK_MSG(da == 1.0f, "da = %a", da);                   /* 127/127 */
        for (int j = 1; j < 16; j++) {
            memcpy(&corr, got + 512 + 4 * j, 4);
            memcpy(&da, got + 576 + 4 * j, 4);
            CHECK_MSG(corr == 0 && bits(da) == 0, "absent block %d: corr %d da %a", j, corr, da);
        }
    }
    printf("act8 quantize: %d rows byte-equal to the spec, worst error / bound %.3f (blocks with da > 0)\n", rows, worst);
}

/* ---- (c) moe_repack_a8 --------------------------------------------------------------- */

static void test_repack(void) {
    static const int64_t RN[] = {32, 96, 512, 544, 1056};
    for (int ni = 0; ni < COUNT(RN); ni++) {
        const int64_t n = RN[ni], nb = n / 32, nrows = 5;
        const size_t rb = (size_t)moe_row_bytes(MOE_T_Q8_0, (uint64_t)n);
        uint8_t *plain = malloc(rb * nrows), *all = malloc(rb * nrows + 64), *one = malloc(rb);
        uint8_t *xa = malloc((size_t)moe_act8_row_bytes(n));
        float *x = malloc(sizeof(float) * (size_t)n), y[5];
        for (int64_t r = 0; r < nrows; r++) make_row(plain + r * rb, n, r & 1);
        memset(all, 0xEE, rb * nrows + 64);
        moe_repack_a8(MOE_T_Q8_0, plain, all, nrows, n);
        int past = 0;
        for (size_t i = rb * nrows; i < rb * nrows + 64; i++) past += all[i] != 0xEE;
        CHECK_MSG(past == 0, "repack n=%lld wrote %d bytes past nrows*row_bytes", (long long)n, past);
        int layout_bad = 0, row_bad = 0;
        for (int64_t r = 0; r < nrows; r++) {
            /* row r alone lands where it does in the whole matrix */
            moe_repack_a8(MOE_T_Q8_0, plain + r * rb, one, 1, n);
            row_bad += memcmp(one, all + r * rb, rb) != 0;
            /* the documented layout: per group d[gn], then u[8][gn][4] = qw ^ 0x80 */
            const uint8_t *R = all + r * rb;
            for (int64_t b = 0; b < nb; b++) {
                const int64_t g0 = b / 16 * 16;
                const int gn = (int)(nb - g0 < 16 ? nb - g0 : 16), j = (int)(b - g0);
                const uint8_t *G = R + g0 * QB, *blk = plain + r * rb + b * QB;
                layout_bad += G[2 * j] != blk[0] || G[2 * j + 1] != blk[1];
                for (int k = 0; k < 32; k++)
                    layout_bad += G[2 * gn + (k / 4) * gn * 4 + j * 4 + k % 4] != (uint8_t)(blk[2 + k] ^ 0x80);
            }
        }
        CHECK_MSG(row_bad == 0, "repack n=%lld: %d rows differ when repacked alone", (long long)n, row_bad);
        CHECK_MSG(layout_bad == 0, "repack n=%lld: %d bytes not where the layout puts them", (long long)n, layout_bad);
        /* the scalar a8 kernel on repacked rows = the contract on plain rows */
        for (int rep = 0; rep < 3; rep++) {
            make_x(x, n, rep > 0);
            moe_quantize_act8(x, xa, n);
            if (rep == 2) edit_a8(xa, n);
            g_isa[MOE_ISA_SCALAR]->gemv_a8[MOE_T_Q8_0](all, rb, nrows, xa, y, n);
            for (int64_t r = 0; r < nrows; r++) {
                const float want = moe_a8_dot_ref(MOE_T_Q8_0, plain + r * rb, xa, n);
                CHECK_MSG(same_out(y[r], want), "scalar a8 kernel n=%lld row %lld rep %d: %a != ref %a",
                          (long long)n, (long long)r, rep, y[r], want);
            }
        }
        free(plain); free(all); free(one); free(xa); free(x);
    }
}

/* ---- (d) row and token splits ------------------------------------------------------------ */

static bool same_run(const float *a, const float *b, int64_t len) {
    bool ok = true;
    for (int64_t i = 0; i < len; i++) ok &= same_out(a[i], b[i]);
    return ok;
}

static void test_splits(void) {
    const int64_t n = 544, nrows = 11, ntok = 5;
    const size_t rb = (size_t)moe_row_bytes(MOE_T_Q8_0, n), xs = (size_t)moe_act8_row_bytes(n);
    uint8_t *plain = malloc(rb * nrows), *wa = malloc(rb * nrows), *xa = malloc(xs * ntok);
    float x[544], yall[5 * 11], ypart[5 * 11], yv[11];
    for (int64_t r = 0; r < nrows; r++) make_row(plain + r * rb, n, r % 3 == 0);
    moe_repack_a8(MOE_T_Q8_0, plain, wa, nrows, n);
    for (int64_t t = 0; t < ntok; t++) { make_x(x, n, t & 1); moe_quantize_act8(x, xa + t * xs, n); }
    for (int l = 0; l < MOE_ISA_COUNT; l++) {
        const moe_kernels *k = g_isa[l];
        if (!k) continue;
        int bad = 0;
        k->gemm_a8[MOE_T_Q8_0](wa, rb, nrows, xa, xs, ntok, yall, nrows, n);
        for (int64_t t = 0; t < ntok; t++) {
            /* whole-matrix gemv = the gemm's column */
            k->gemv_a8[MOE_T_Q8_0](wa, rb, nrows, xa + t * xs, yv, n);
            for (int64_t r = 0; r < nrows; r++) bad += !same_out(yv[r], yall[t * nrows + r]);
            for (int64_t r0 = 0; r0 < nrows; r0++)
                for (int64_t r1 = r0 + 1; r1 <= nrows; r1++) {
                    k->gemv_a8[MOE_T_Q8_0](wa + r0 * rb, rb, r1 - r0, xa + t * xs, ypart, n);
                    if (!same_run(ypart, yv + r0, r1 - r0)) {
                        if (bad++ < 3) fprintf(stderr, "  %s gemv rows [%lld, %lld) token %lld differ\n", k->name,
                                               (long long)r0, (long long)r1, (long long)t);
                    }
                }
        }
        /* gemm over a sub-rectangle [r0, r1) x [t0, t1) */
        for (int64_t r0 = 0; r0 < nrows; r0 += 3)
            for (int64_t r1 = r0 + 1; r1 <= nrows; r1 += 2)
                for (int64_t t0 = 0; t0 < ntok; t0++)
                    for (int64_t t1 = t0 + 1; t1 <= ntok; t1++) {
                        k->gemm_a8[MOE_T_Q8_0](wa + r0 * rb, rb, r1 - r0, xa + t0 * xs, xs, t1 - t0, ypart,
                                               (size_t)nrows, n);
                        for (int64_t t = t0; t < t1; t++)
                            if (!same_run(ypart + (t - t0) * nrows, yall + t * nrows + r0, r1 - r0)) {
                                if (bad++ < 3) fprintf(stderr, "  %s gemm rows [%lld, %lld) tokens [%lld, %lld) differ\n",
                                                       k->name, (long long)r0, (long long)r1, (long long)t0,
                                                       (long long)t1);
                            }
                    }
        CHECK_MSG(bad == 0, "%s: %d row/token splits give other bits than the whole product", k->name, bad);
    }
    free(plain); free(wa); free(xa);
}

int main(void) {
    moe_rng_seed(&g_rng, 0xac78);
    int levels = 0;
    printf("act8 levels:");
    for (int l = 0; l < MOE_ISA_COUNT; l++) {
        g_isa[l] = moe_kernels_for((moe_isa)l);
        if (!g_isa[l]) continue;
        CHECK_MSG(g_isa[l]->gemv_a8[MOE_T_Q8_0] && g_isa[l]->gemm_a8[MOE_T_Q8_0], "%s lacks the a8 kernels",
                  g_isa[l]->name);
        if (!g_isa[l]->gemv_a8[MOE_T_Q8_0] || !g_isa[l]->gemm_a8[MOE_T_Q8_0]) { g_isa[l] = NULL; continue; }
        printf(" %s", g_isa[l]->name);
        levels++;
    }
    printf("\n");
    CHECK(g_isa[MOE_ISA_SCALAR] != NULL);
    if (!g_isa[MOE_ISA_SCALAR]) return check_report("test_act8");
    CHECK(moe_type_has_a8(MOE_T_Q8_0) && !moe_type_has_a8(MOE_T_Q4_0));
    test_ref_contract();
    test_quantize_spec();
    test_repack();
    test_kernels_match();
    test_splits();
    return check_report("test_act8");
}
