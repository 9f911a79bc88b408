/* test_iq2.c — IQ2_XXS, IQ2_XS, IQ2_S (src/quant/iq2_*.c):
 *  - the codebooks: FNV-1a 64 of each table equal to the checksum a one-off
 *    script computed from ggml-common.h (MOE_IQ2*_FNV), every byte one of
 *    the levels {8, 25, 43}, entries strictly increasing (no duplicates),
 *    one entry per index value of the format (2^8, 2^9, 2^10);
 *  - moe_iq_signs (src/quant/iq_common.h) equal to ggml's ksigns_iq2xs,
 *    written out here from the public header;
 *  - dequantization: blocks with known bytes against values worked out by
 *    hand, and random blocks (every byte pattern is a valid block) with
 *    ordinary and extreme f16 scales (0, -0, subnormal, 65504, Inf, NaN)
 *    against a second dequantizer written here the way ggml's
 *    dequantize_row_iq2_* reads the bits, bit for bit;
 *  - the kernels: the scalar reference equal to the dot contract of quant.h
 *    formed here, every ISA level's gemv / gemm, plain and x4, equal to the
 *    reference bit for bit (1..9 rows, 1..5 blocks, 1..5 tokens);
 *  - quantize -> dequantize: relative RMS error on Gaussian rows under a
 *    bound (see test_quantize), an all-zero row exact;
 *  - a generated tiny qwen3moe of each type gives the same logits at every
 *    ISA level and thread count. */
#include "check.h"
#include "moefast.h"
#include "quant/iq2.h"
#include "base/util.h"
#include "gguf/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const uint32_t TYPES[3] = {MOE_T_IQ2_XXS, MOE_T_IQ2_XS, MOE_T_IQ2_S};
static const char *const NAMES[3] = {"IQ2_XXS", "IQ2_XS", "IQ2_S"};

/* ggml's ksigns_iq2xs (ggml/src/ggml-common.h), the public values. */
static const uint8_t KSIGNS[128] = {
    0,   129, 130, 3,   132, 5,   6,   135, 136, 9,   10,  139, 12,  141, 142, 15,
    144, 17,  18,  147, 20,  149, 150, 23,  24,  153, 154, 27,  156, 29,  30,  159,
    160, 33,  34,  163, 36,  165, 166, 39,  40,  169, 170, 43,  172, 45,  46,  175,
    48,  177, 178, 51,  180, 53,  54,  183, 184, 57,  58,  187, 60,  189, 190, 63,
    192, 65,  66,  195, 68,  197, 198, 71,  72,  201, 202, 75,  204, 77,  78,  207,
    80,  209, 210, 83,  212, 85,  86,  215, 216, 89,  90,  219, 92,  221, 222, 95,
    96,  225, 226, 99,  228, 101, 102, 231, 232, 105, 106, 235, 108, 237, 238, 111,
    240, 113, 114, 243, 116, 245, 246, 119, 120, 249, 250, 123, 252, 125, 126, 255,
};

static uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* ---- codebooks and signs ---------------------------------------------------- */

static uint64_t fnv(const uint64_t *t, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 8; j++) {
            h ^= (t[i] >> (8 * j)) & 255;
            h *= 0x100000001b3ull;
        }
    return h;
}

static void test_tables(void) {
    static const struct { const uint64_t *t; int n; uint64_t sum; } T[3] = {
        {moe_iq2xxs_grid, 256, MOE_IQ2XXS_FNV}, {moe_iq2xs_grid, 512, MOE_IQ2XS_FNV}, {moe_iq2s_grid, 1024, MOE_IQ2S_FNV}};
    for (int k = 0; k < 3; k++) {
        CHECK_MSG(fnv(T[k].t, T[k].n) == T[k].sum, "%s grid checksum %016llx", NAMES[k],
                  (unsigned long long)fnv(T[k].t, T[k].n));
        int bad = 0, order = 0;
        for (int i = 0; i < T[k].n; i++) {
            for (int j = 0; j < 8; j++) {
                const unsigned m = (unsigned)(T[k].t[i] >> (8 * j)) & 255;
                bad += m != 8 && m != 25 && m != 43;
            }
            order += i > 0 && T[k].t[i] <= T[k].t[i - 1];
        }
        CHECK_MSG(bad == 0, "%s: %d bytes off the levels", NAMES[k], bad);
        CHECK_MSG(order == 0, "%s: %d entries not strictly increasing", NAMES[k], order);
    }
    /* one entry per index value: 8 bits (XXS), 9 (XS), 10 (S) */
    CHECK_EQ_INT(sizeof moe_iq2xxs_grid / 8, 1 << 8);
    CHECK_EQ_INT(sizeof moe_iq2xs_grid / 8, 1 << 9);
    CHECK_EQ_INT(sizeof moe_iq2s_grid / 8, 1 << 10);
    /* the grids' first and last entries as printed in ggml-common.h */
    CHECK(moe_iq2xxs_grid[0] == 0x0808080808080808ull && moe_iq2xxs_grid[255] == 0x2b2b2b1908081908ull);
    CHECK(moe_iq2xs_grid[1] == 0x080808080808082bull && moe_iq2xs_grid[511] == 0x2b2b2b2b2b2b2b2bull);
    CHECK(moe_iq2s_grid[7] == 0x080808080819192bull && moe_iq2s_grid[1023] == 0x2b2b2b2b2b2b2b2bull);
}

static void test_signs(void) {
    CHECK_EQ_INT(moe_iq_signs(1), 129);
    CHECK_EQ_INT(moe_iq_signs(3), 3);
    CHECK_EQ_INT(moe_iq_signs(127), 255);
    CHECK_EQ_INT(moe_iq_signs(100), 228);
    int bad = 0;
    for (unsigned i = 0; i < 128; i++) bad += moe_iq_signs(i) != KSIGNS[i];
    CHECK_MSG(bad == 0, "%d sign codes differ from ksigns_iq2xs", bad);
}

/* ---- dequantization --------------------------------------------------------- */

/* ggml's dequantize_row_iq2_{xxs,xs,s}, one block, transcribed: the codebook
 * entry read as bytes, the sign table KSIGNS, db * grid[j] * (+-1.f). */
static void ggml_block(uint32_t type, const uint8_t *x, float *y) {
    const float d = moe_f16_to_f32(rd16(x));
    for (int ib32 = 0; ib32 < 8; ++ib32) {
        float db[2];
        uint32_t aux32[2];
        memcpy(aux32, x + 2 + 8 * ib32, 8);
        if (type == MOE_T_IQ2_XXS) {
            db[0] = db[1] = d * (0.5f + (aux32[1] >> 28)) * 0.25f;
        } else {
            const uint8_t sc = x[type == MOE_T_IQ2_XS ? 66 + ib32 : 74 + ib32];
            db[0] = d * (0.5f + (sc & 0xf)) * 0.25f;
            db[1] = d * (0.5f + (sc >> 4)) * 0.25f;
        }
        for (int l = 0; l < 4; ++l) {
            uint64_t e;
            uint8_t signs;
            if (type == MOE_T_IQ2_XXS) {
                e = moe_iq2xxs_grid[((const uint8_t *)aux32)[l]];
                signs = KSIGNS[(aux32[1] >> 7 * l) & 127];
            } else if (type == MOE_T_IQ2_XS) {
                const uint16_t q = rd16(x + 2 + 2 * (4 * ib32 + l));
                e = moe_iq2xs_grid[q & 511];
                signs = KSIGNS[q >> 9];
            } else {
                const uint8_t *qs = x + 2 + 4 * ib32, *qh = x + 66;
                e = moe_iq2s_grid[qs[l] | (qh[ib32] << (8 - 2 * l) & 0x300)];
                signs = x[34 + 4 * ib32 + l];
            }
            const uint8_t *grid = (const uint8_t *)&e;
            for (int j = 0; j < 8; ++j) y[32 * ib32 + 8 * l + j] = db[l / 2] * grid[j] * (signs & (1u << j) ? -1.f : 1.f);
        }
    }
}

/* Hand-built blocks, values worked out from the layouts (iq2_ref.c). */
static void test_known_values(void) {
    uint8_t b[82];
    float w[256];
    /* XXS: d = 1; sub-block 0: idx {1, 0, 0, 0}, sign codes {1, 0, 0, 0},
     * s = 3: db = 1 * 3.5 * 0.25 = 0.875. Entry 1 = 0x080808080808082b
     * (value 0 is 43); ksigns[1] = 129: values 0 and 7 negative. The other
     * sub-blocks are zeros: entry 0 (all 8), s = 0, db = 0.125: 1.0 */
    memset(b, 0, sizeof b);
    put16(b, 0x3C00);
    b[2] = 1;
    const uint32_t aux = 1u | 3u << 28;
    memcpy(b + 6, &aux, 4);
    moe_dequant_row(MOE_T_IQ2_XXS, b, w, 256);
    CHECK(w[0] == -37.625f && w[1] == 7.0f && w[6] == 7.0f && w[7] == -7.0f);
    CHECK(w[8] == 7.0f && w[31] == 7.0f && w[32] == 1.0f && w[255] == 1.0f);
    /* XS: d = 2; group 0: index 511 (all 43), sign code 3 (ksigns 3:
     * values 0, 1 negative); scales[0] = 0x21: groups 0, 1 s = 1 (db 0.75),
     * groups 2, 3 s = 2 (db 1.25) with entry 0 (all 8): 10; the next
     * sub-blocks s = 0 (db 0.25): 2 */
    memset(b, 0, sizeof b);
    put16(b, 0x4000);
    put16(b + 2, (uint16_t)(511 | 3 << 9));
    b[66] = 0x21;
    moe_dequant_row(MOE_T_IQ2_XS, b, w, 256);
    CHECK(w[0] == -32.25f && w[1] == -32.25f && w[2] == 32.25f && w[7] == 32.25f);
    CHECK(w[8] == 6.0f && w[16] == 10.0f && w[31] == 10.0f && w[32] == 2.0f);
    /* S: d = 0.5; group 0: lo 0xFF, qh[0] bits 0-1 = 3: index 1023 (all
     * 43), sign byte 0x80 (value 7 negative); group 1: index 7 =
     * 0x080808080819192b (43, 25, 25, 8, ...); scales[0] = 0x0F: s = 15
     * (db 0.5 * 15.5 * 0.25 = 1.9375) for groups 0, 1, s = 0 (db 0.0625)
     * for groups 2, 3. Group 6 (sub-block 1, l = 2): lo 0, qh[1] bits 4-5
     * = 1: index 256 = 0x0819081919191919 (25 25 25 25 25 8 25 8), sign
     * byte 0x01, scales[1] = 0x30: s = 3, db = 0.5 * 3.5 * 0.25 = 0.4375 */
    memset(b, 0, sizeof b);
    put16(b, 0x3800);
    b[2] = 0xFF; b[3] = 7; b[66] = 3; b[34] = 0x80; b[74] = 0x0F;
    b[67] = 1 << 4; b[34 + 6] = 0x01; b[75] = 0x30;
    moe_dequant_row(MOE_T_IQ2_S, b, w, 256);
    CHECK(w[0] == 83.3125f && w[6] == 83.3125f && w[7] == -83.3125f);
    CHECK(w[8] == 83.3125f && w[9] == 48.4375f && w[10] == 48.4375f && w[11] == 15.5f);
    CHECK(w[16] == 0.5f && w[32] == 0.5f);
    CHECK(w[48] == -10.9375f && w[49] == 10.9375f && w[53] == 3.5f && w[55] == 3.5f && w[54] == 10.9375f);
}

/* The f16 scales blocks get: ordinary, and the extremes. */
static const uint16_t DS[] = {0x3C00, 0x2E66, 0xB800, 0x1400, 0x0000, 0x8000, 0x0001, 0x83FF,
                              0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE00};
#define NDS (sizeof DS / sizeof DS[0])

static void random_block(uint32_t type, moe_rng *r, uint8_t *b, int extreme) {
    const size_t bb = moe_type_get(type)->block_bytes;
    for (size_t i = 0; i < bb; i++) b[i] = (uint8_t)moe_rng_next(r);
    put16(b, extreme ? DS[moe_rng_next(r) % NDS] : DS[moe_rng_next(r) % 4]);
}

static void test_dequant_vs_ggml(void) {
    moe_rng r;
    moe_rng_seed(&r, 7);
    for (int k = 0; k < 3; k++) {
        int bad = 0;
        for (int it = 0; it < 600; it++) {
            uint8_t b[82];
            float w[256], g[256];
            random_block(TYPES[k], &r, b, 1);
            if (it < (int)NDS) put16(b, DS[it]);
            moe_dequant_row(TYPES[k], b, w, 256);
            ggml_block(TYPES[k], b, g);
            if (isnan(moe_f16_to_f32(rd16(b)))) {
                /* a NaN d: every value NaN; its sign is not ggml's to give
                 * (how the compiler forms db * G * -1.f decides it) */
                for (int j = 0; j < 256; j++) bad += !isnan(w[j]) || !isnan(g[j]);
                continue;
            }
            bad += memcmp(w, g, sizeof w) != 0;
        }
        CHECK_MSG(bad == 0, "%s: %d of 600 blocks dequantize differently from ggml's loop", NAMES[k], bad);
    }
}

/* ---- kernels ---------------------------------------------------------------- */

/* quant.h's contract on dequantized values, formed here. */
static float contract_dot(const float *w, const float *x, int64_t n) {
    float a[16] = {0};
    for (int64_t k = 0; k < n; k++) a[k & 15] = fmaf(w[k], x[k], a[k & 15]);
    for (int l = 0; l < 8; l++) a[l] += a[l + 8];
    for (int l = 0; l < 4; l++) a[l] += a[l + 4];
    for (int l = 0; l < 2; l++) a[l] += a[l + 2];
    return a[0] + a[1];
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static void test_kernels(void) {
    static const int64_t NROWS[] = {1, 3, 4, 5, 8, 9}, NBLK[] = {1, 2, 5}, NTOK[] = {1, 2, 3, 5};
    const moe_kernels *ref = moe_kernels_for(MOE_ISA_SCALAR);
    moe_rng r;
    moe_rng_seed(&r, 99);
    int levels = 0;
    for (int l = 0; l < MOE_ISA_COUNT; l++) levels += moe_kernels_for((moe_isa)l) != NULL;
    fprintf(stderr, "test_iq2: kernels at %d ISA levels\n", levels);
    for (int k = 0; k < 3; k++) {
        const uint32_t type = TYPES[k];
        const size_t bb = moe_type_get(type)->block_bytes;
        for (size_t a = 0; a < sizeof NBLK / sizeof NBLK[0]; a++)
            for (size_t c = 0; c < sizeof NROWS / sizeof NROWS[0]; c++) {
                const int64_t n = 256 * NBLK[a], nrows = NROWS[c], T = 5;
                const size_t rb = bb * (size_t)NBLK[a], xs = (size_t)n + 16, ys = (size_t)nrows + 3;
                uint8_t *W = malloc(rb * (size_t)nrows), *W4 = malloc(rb * (size_t)nrows);
                float *x = malloc(sizeof(float) * xs * (size_t)T), *w = malloc(sizeof(float) * (size_t)n);
                float *y0 = calloc(ys * (size_t)T, sizeof(float)), *y1 = calloc(ys * (size_t)T, sizeof(float));
                for (int64_t b = 0; b < NBLK[a] * nrows; b++) random_block(type, &r, W + (size_t)b * bb, (b % 5) == 4);
                for (size_t i = 0; i < xs * (size_t)T; i++) x[i] = (float)moe_rng_normal(&r);
                moe_repack_x4(type, W, W4, nrows, n);
                /* the reference is the contract */
                ref->gemv[type](W, rb, nrows, x, y0, n);
                int bad = 0;
                for (int64_t row = 0; row < nrows; row++) {
                    moe_dequant_row(type, W + (size_t)row * rb, w, n);
                    const float e = contract_dot(w, x, n);
                    bad += memcmp(&e, &y0[row], 4) != 0;
                }
                CHECK_MSG(bad == 0, "%s: reference gemv vs the contract, %d rows differ", NAMES[k], bad);
                for (int l = 0; l < MOE_ISA_COUNT; l++) {
                    const moe_kernels *K = moe_kernels_for((moe_isa)l);
                    if (!K) continue;
                    for (size_t t = 0; t < sizeof NTOK / sizeof NTOK[0]; t++) {
                        const int64_t nt = NTOK[t];
                        ref->gemm[type](W, rb, nrows, x, xs, nt, y0, ys, n);
                        for (int x4 = 0; x4 < 2; x4++) {
                            memset(y1, 0, sizeof(float) * ys * (size_t)T);
                            if (nt == 1 && x4) K->gemv_x4[type](W4, rb, nrows, x, y1, n);
                            else if (nt == 1) K->gemv[type](W, rb, nrows, x, y1, n);
                            else if (x4) K->gemm_x4[type](W4, rb, nrows, x, xs, nt, y1, ys, n);
                            else K->gemm[type](W, rb, nrows, x, xs, nt, y1, ys, n);
                            int diff = 0;
                            for (int64_t tt = 0; tt < nt; tt++)
                                diff += !same_bits(y0 + tt * (int64_t)ys, y1 + tt * (int64_t)(nt == 1 ? 0 : ys), (size_t)nrows);
                            CHECK_MSG(diff == 0, "%s %s %s%s: %lld rows x %lld blocks, %lld tokens differ from the reference",
                                      NAMES[k], K->name, nt == 1 ? "gemv" : "gemm", x4 ? "_x4" : "", (long long)nrows,
                                      (long long)NBLK[a], (long long)nt);
                        }
                    }
                }
                free(W); free(W4); free(x); free(w); free(y0); free(y1);
            }
    }
}

/* ---- quantization ------------------------------------------------------------ */

/* Relative RMS error of quantize -> dequantize on Gaussian rows.
 * What to expect: rate-distortion theory puts the best any code of R bits
 * per value can do on a Gaussian at 2^-R relative RMS: 0.240 / 0.202 /
 * 0.170 for the 2.0625 / 2.3125 / 2.5625 bits of XXS / XS / S (scales
 * included). A fixed-rate quantizer pays a gap on top (1.53 dB, x1.19, for
 * a scalar one; E8 codebooks recover part, the 4-bit scales and the sign
 * parity cost some). Measured (src/quant/iq2_quant.c, this data): 0.335 /
 * 0.289 / 0.242, x1.40-1.43 the bound; an exhaustive search over every
 * codebook entry gives 0.333 / 0.287 / 0.241, so the neighbour lists and
 * the 4 trial scales lose < 1 %. For scale: our Q2_K (ggml's quantizer, 2.625 bits) gives 0.297
 * on the same rows. The bounds are the measured figures + 1 % (the
 * quantizer is plain float arithmetic without libm, so the figures are the
 * same on any machine); a worse search fails: without the least-squares
 * refinement XXS gives 0.339, without the neighbour lists 0.504, without
 * the parity fix 0.572. */
static void test_quantize(void) {
    static const double BOUND[3] = {0.338, 0.292, 0.244};
    const int64_t n = 4096, rows = 16;
    moe_rng r;
    moe_rng_seed(&r, 5);
    float *x = malloc(sizeof(float) * (size_t)n), *w = malloc(sizeof(float) * (size_t)n);
    uint8_t *q = malloc((size_t)moe_row_bytes(MOE_T_IQ2_S, (uint64_t)n));
    for (int k = 0; k < 3; k++) {
        double se = 0, sx = 0;
        for (int64_t row = 0; row < rows; row++) {
            const double sigma = row % 2 ? 0.02 : 3.0;   /* the error is relative: any scale */
            for (int64_t i = 0; i < n; i++) x[i] = (float)(moe_rng_normal(&r) * sigma);
            moe_quantize_row(TYPES[k], x, q, n);
            moe_dequant_row(TYPES[k], q, w, n);
            double e = 0, s = 0;
            for (int64_t i = 0; i < n; i++) { e += (double)(w[i] - x[i]) * (w[i] - x[i]); s += (double)x[i] * x[i]; }
            se += e / s;
            sx += 1;
        }
        const double rel = sqrt(se / sx);
        fprintf(stderr, "test_iq2: %s relative RMS error %.4f (bound %.3f)\n", NAMES[k], rel, BOUND[k]);
        CHECK_MSG(rel < BOUND[k], "%s: relative RMS error %.4f >= %.3f", NAMES[k], rel, BOUND[k]);
        /* an all-zero row: d = 0, every value exactly 0 */
        memset(x, 0, sizeof(float) * (size_t)n);
        moe_quantize_row(TYPES[k], x, q, n);
        moe_dequant_row(TYPES[k], q, w, n);
        int nz = 0;
        for (int64_t i = 0; i < n; i++) nz += w[i] != 0.0f;
        CHECK_MSG(nz == 0, "%s: zero row gives %d non-zero values", NAMES[k], nz);
    }
    free(x); free(w); free(q);
}

/* ---- a generated model -------------------------------------------------------- */

#define NT 12

/* Logits of NT tokens: a prefill of 8, then 4 single-token steps. */
static float *model_logits(const char *path, const char *isa, int threads, int *V) {
    char err[MOE_ERR_LEN];
    if (moe_set_isa(isa, err, sizeof err) != MOE_OK) return NULL;
    moe_model *m = NULL;
    moe_session *s = NULL;
    float *lg = NULL;
    if (moe_model_load(path, NULL, &m, err, sizeof err)) { fprintf(stderr, "%s\n", err); goto out; }
    *V = moe_model_n_vocab(m);
    moe_session_params sp = {.n_ctx = 32, .n_threads = threads, .n_batch = 8};
    if (moe_session_new(m, &sp, &s, err, sizeof err)) { fprintf(stderr, "%s\n", err); goto out; }
    lg = calloc((size_t)NT * (size_t)*V, sizeof(float));
    int32_t toks[NT];
    for (int i = 0; i < NT; i++) toks[i] = (int32_t)((i * 37 + 11) % *V);
    int rc = moe_session_forward(s, toks, 8, lg, true);
    for (int i = 8; i < NT && rc == MOE_OK; i++) rc = moe_session_forward(s, &toks[i], 1, lg + (size_t)i * (size_t)*V, false);
    CHECK_MSG(rc == MOE_OK, "%s", moe_session_error(s));
out:
    moe_session_free(s);
    moe_model_free(m);
    moe_set_isa("auto", err, sizeof err);
    return lg;
}

static void test_model(void) {
    char dir[] = "/tmp/moefast-test-iq2-XXXXXX", f32[64], path[64], err[MOE_ERR_LEN];
    if (!mkdtemp(dir)) { CHECK_MSG(0, "mkdtemp"); return; }
    snprintf(f32, sizeof f32, "%s/f32.gguf", dir);
    snprintf(path, sizeof path, "%s/m.gguf", dir);
    /* tiny with rows of whole 256-blocks, 2 layers, 4 experts, 512 tokens
     * (2.2 M weights), then `quantize` to each type (~1 s under ASan) */
    const char *ov[] = {"n_ff_exp=256", "n_layer=2", "n_expert=4", "n_vocab=512", NULL};
    int rc = moe_gen_model("qwen3moe", "tiny", ov, f32, err, sizeof err);
    CHECK_MSG(rc == 0, "gen: %s", err);
    for (int k = 0; k < 3 && rc == 0; k++) {
        const int qrc = moe_quantize_file(f32, path, NAMES[k], NULL, err, sizeof err);
        CHECK_MSG(qrc == 0, "%s: quantize: %s", NAMES[k], err);
        if (qrc) continue;
        gguf_file *gf = NULL;
        int of_type = 0;
        if (gguf_open(path, &gf, err, sizeof err) == 0) {
            for (uint64_t i = 0; i < gf->n_tensors; i++) of_type += gf->tensors[i].type == TYPES[k];
            gguf_close(gf);
        }
        CHECK_MSG(of_type >= 2 * 7 + 2, "%s: %d tensors of the type", NAMES[k], of_type); /* 7 per layer, embd, output */
        int V = 0;
        float *ref = model_logits(path, "scalar", 1, &V);
        CHECK_MSG(ref != NULL, "%s: scalar run failed", NAMES[k]);
        static const struct { const char *isa; int threads; } RUNS[] = {
            {"scalar", 3}, {"avx2", 1}, {"avx2", 2}, {"avx512", 1}, {"avx512", 3}};
        for (size_t i = 0; ref && i < sizeof RUNS / sizeof RUNS[0]; i++) {
            if (moe_set_isa(RUNS[i].isa, err, sizeof err) != MOE_OK) {
                fprintf(stderr, "test_iq2: skip ISA %s: %s\n", RUNS[i].isa, err);
                continue;
            }
            int V2 = 0;
            float *lg = model_logits(path, RUNS[i].isa, RUNS[i].threads, &V2);
            CHECK_MSG(lg && V2 == V && same_bits(ref, lg, (size_t)NT * (size_t)V), "%s: %s with %d threads: logits differ",
                      NAMES[k], RUNS[i].isa, RUNS[i].threads);
            free(lg);
        }
        /* not vacuous: the logits depend on the weights' values */
        double spread = 0;
        for (int i = 1; ref && i < V; i++) spread += fabs((double)ref[i] - ref[0]);
        CHECK_MSG(spread > 0, "%s: constant logits", NAMES[k]);
        free(ref);
        unlink(path);
    }
    unlink(f32);
    rmdir(dir);
}

int main(void) {
    test_tables();
    test_signs();
    test_known_values();
    test_dequant_vs_ggml();
    test_kernels();
    test_quantize();
    test_model();
    return check_report("test_iq2");
}
