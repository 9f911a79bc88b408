/* test_iq_wide.c — the i-quants' wide FP32 GEMM (flag gemm_wide; the AVX2
 * table fills its buffer with the reference dequantizer): at every level
 * that has one, plain and x4 layout, the same bits as the scalar
 * reference's gemm, over rows past a dequantized chunk (1024 values: the
 * sums parked between chunks), token counts past a token block (96) and
 * every tile remainder, row counts that leave a partial group of 1-3 rows
 * (plain rows after an x4 matrix's groups), with quantized blocks and
 * blocks of random bytes (any grid index, sign and scale, any f16 d). */
#include "check.h"
#include "quant/quant.h"
#include "base/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const uint32_t TYPES[] = {MOE_T_IQ2_XXS, MOE_T_IQ2_XS, MOE_T_IQ2_S, MOE_T_IQ3_XXS,
                                 MOE_T_IQ3_S,   MOE_T_IQ1_S,  MOE_T_IQ1_M};
#define NT (sizeof TYPES / sizeof TYPES[0])

static bool same_f32(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0; }

/* nrows rows of n values: quantized Gaussian rows, every third block
 * overwritten by random bytes. */
static void make_rows(uint32_t ty, moe_rng *r, uint8_t *W, size_t rb, int64_t nrows, int64_t n) {
    const size_t bb = moe_type_get(ty)->block_bytes;
    float *src = malloc(sizeof(float) * (size_t)n);
    for (int64_t row = 0; row < nrows; row++) {
        for (int64_t k = 0; k < n; k++) src[k] = (float)moe_rng_normal(r);
        moe_quantize_row(ty, src, W + (size_t)row * rb, n);
        for (int64_t b = row % 3; b < n / 256; b += 3)
            for (size_t i = 0; i < bb; i++) W[(size_t)row * rb + (size_t)b * bb + i] = (uint8_t)moe_rng_next(r);
    }
    free(src);
}

static int compare(const float *y0, const float *y1, int64_t nrows, size_t ys, int64_t nt) {
    int diff = 0;
    for (int64_t t = 0; t < nt; t++)
        for (int64_t row = 0; row < nrows; row++) diff += !same_f32(y0[t * (int64_t)ys + row], y1[t * (int64_t)ys + row]);
    return diff;
}

int main(void) {
    moe_rng r;
    moe_rng_seed(&r, 0x1e1de);
    const moe_kernels *ref = moe_kernels_for(MOE_ISA_SCALAR);
    static const int64_t NB[] = {1, 5, 9}, NROWS[] = {1, 3, 4, 7}, NTOK[] = {2, 5, 7, 97};
    int tested = 0;
    for (size_t f = 0; f < NT; f++) {
        const uint32_t ty = TYPES[f];
        const char *name = moe_type_get(ty)->name;
        for (size_t a = 0; a < sizeof NB / sizeof NB[0]; a++)
            for (size_t c = 0; c < sizeof NROWS / sizeof NROWS[0]; c++) {
                const int64_t n = 256 * NB[a], nrows = NROWS[c];
                const size_t rb = moe_type_get(ty)->block_bytes * (size_t)NB[a];
                uint8_t *W = malloc(rb * (size_t)nrows), *W4 = malloc(rb * (size_t)nrows);
                make_rows(ty, &r, W, rb, nrows, n);
                moe_repack_x4(ty, W, W4, nrows, n);
                for (size_t t = 0; t < sizeof NTOK / sizeof NTOK[0]; t++) {
                    const int64_t nt = NTOK[t];
                    if (n > 1280 && nt > 40) continue;    /* the scalar reference is slow */
                    const size_t xs = (size_t)n + 5, ys = (size_t)nrows + 2;
                    float *x = malloc(sizeof(float) * xs * (size_t)nt);
                    float *y0 = malloc(sizeof(float) * ys * (size_t)nt), *y1 = malloc(sizeof(float) * ys * (size_t)nt);
                    for (size_t i = 0; i < xs * (size_t)nt; i++) x[i] = (float)moe_rng_normal(&r);
                    ref->gemm[ty](W, rb, nrows, x, xs, nt, y0, ys, n);
                    for (int l = 0; l < MOE_ISA_COUNT; l++) {
                        const moe_kernels *K = moe_kernels_for((moe_isa)l);
                        if (!K || !K->gemm_wide[ty]) continue;
                        for (int x4 = 0; x4 < 2; x4++) {
                            memset(y1, 0, sizeof(float) * ys * (size_t)nt);
                            if (x4) K->gemm_wide_x4[ty](W4, rb, nrows, x, xs, nt, y1, ys, n);
                            else K->gemm_wide[ty](W, rb, nrows, x, xs, nt, y1, ys, n);
                            const int diff = compare(y0, y1, nrows, ys, nt);
                            CHECK_MSG(diff == 0, "%s %s gemm_wide%s: %lld rows x %lld values, %lld tokens: %d outputs differ",
                                      K->name, name, x4 ? "_x4" : "", (long long)nrows, (long long)n, (long long)nt, diff);
                            tested++;
                        }
                    }
                    free(x); free(y0); free(y1);
                }
                free(W); free(W4);
            }
    }
    if (!tested) printf("test_iq_wide: no level of this CPU has an i-quant wide kernel; nothing compared\n");
    return check_report("test_iq_wide");
}
