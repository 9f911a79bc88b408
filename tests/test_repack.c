/* test_repack.c — the x4 layout: repacked weights give the same products as
 * the plain layout, bit for bit, for every block format, F32, F16 and BF16
 * (32-value runs) and every ISA level, also when the call starts at a later
 * group and when rows do not fill a group. */
#include <stdint.h>

#include "check.h"
#include "quant/quant.h"
#include "base/util.h"

int main(void) {
    const uint32_t types[] = {MOE_T_Q8_0, MOE_T_Q4_0, MOE_T_Q4_1, MOE_T_Q5_0, MOE_T_Q5_1, MOE_T_IQ4_NL,
                              MOE_T_Q4_K,  MOE_T_Q6_K, MOE_T_MXFP4,
                              MOE_T_NVFP4, MOE_T_F32, MOE_T_F16, MOE_T_BF16,
                              MOE_T_Q5_K, MOE_T_Q3_K, MOE_T_Q2_K, MOE_T_IQ4_XS};
    const int64_t rows_list[] = {4, 8, 13, 16};
    const int64_t ntoks[] = {1, 5, 7, 16};   /* 7: a 4-token tile, then one of 3 */
    moe_rng r;
    moe_rng_seed(&r, 11);
    const moe_kernels *ref = moe_kernels_for(MOE_ISA_SCALAR);
    int compared = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        CHECK(moe_type_has_x4(type));
        const bool flt = moe_type_get(type)->block == 1;   /* F32, F16, BF16 */
        const int64_t blk = flt ? MOE_X4_PLAIN_RUN : moe_type_get(type)->block;
        /* 2880, 2912: gpt-oss's n_embd (90 blocks of 32, not a multiple of
         * 256 or 512) and 91 blocks, where the format's block allows */
        const int64_t ns[] = {blk, 2 * blk, 1024, 2304, 2880, 2912};
        CHECK(moe_x4_fits(type, blk) && moe_x4_fits(type, 2304));
        if (flt) CHECK(!moe_x4_fits(type, 48) && !moe_x4_fits(type, 2047));
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (size_t ri = 0; ri < 4; ri++) {
                const int64_t n = ns[ni] < blk ? blk : ns[ni], nrows = rows_list[ri];
                if (n % blk || !moe_x4_fits(type, n)) continue;
                const size_t rb = (size_t)moe_row_bytes(type, (uint64_t)n);
                float *src = malloc(sizeof(float) * (size_t)n);
                uint8_t *plain = malloc(rb * (size_t)nrows), *x4 = malloc(rb * (size_t)nrows);
                for (int64_t row = 0; row < nrows; row++) {
                    for (int64_t k = 0; k < n; k++) src[k] = (float)moe_rng_normal(&r) * 0.05f;
                    if (flt) {                         /* -0, and subnormals (F16 rounds these to 0) */
                        src[(row * 7) % n] = -0.0f;
                        src[(row * 13 + 5) % n] = row % 2 ? 1e-40f : -3e-39f;
                    }
                    moe_quantize_row(type, src, plain + (size_t)row * rb, n);
                }
                moe_repack_x4(type, plain, x4, nrows, n);
                const int64_t T = 16;
                float *x = malloc(sizeof(float) * (size_t)(n * T));
                for (int64_t k = 0; k < n * T; k++) x[k] = (float)moe_rng_normal(&r);
                float *y0 = calloc((size_t)(nrows * T), sizeof(float)), *y1 = calloc((size_t)(nrows * T), sizeof(float));
                for (int isa = 0; isa < MOE_ISA_COUNT; isa++) {
                    const moe_kernels *k = moe_kernels_for((moe_isa)isa);
                    if (!k) continue;
                    for (size_t tk = 0; tk < sizeof ntoks / sizeof ntoks[0]; tk++) {
                        const int64_t nt = ntoks[tk];
                        ref->gemm[type](plain, rb, nrows, x, (size_t)n, nt, y0, (size_t)nrows, n);
                        if (nt == 1) k->gemv_x4[type](x4, rb, nrows, x, y1, n);
                        else k->gemm_x4[type](x4, rb, nrows, x, (size_t)n, nt, y1, (size_t)nrows, n);
                        CHECK_MSG(!memcmp(y0, y1, sizeof(float) * (size_t)(nrows * nt)),
                                  "type %u isa %s n %lld rows %lld ntok %lld", type, k->name, (long long)n,
                                  (long long)nrows, (long long)nt);
                        compared++;
                        if (k->gemm_wide_x4[type]) {           /* flag gemm_wide on the x4 layout */
                            memset(y1, 0, sizeof(float) * (size_t)(nrows * T));
                            k->gemm_wide_x4[type](x4, rb, nrows, x, (size_t)n, nt, y1, (size_t)nrows, n);
                            CHECK_MSG(!memcmp(y0, y1, sizeof(float) * (size_t)(nrows * nt)),
                                      "gemm_wide_x4 type %u isa %s n %lld rows %lld ntok %lld", type, k->name,
                                      (long long)n, (long long)nrows, (long long)nt);
                            compared++;
                        }
                    }
                    /* a call starting at the second group (rows 4..) */
                    if (nrows >= 8) {
                        ref->gemv[type](plain + 4 * rb, rb, nrows - 4, x, y0, n);
                        k->gemv_x4[type](x4 + 4 * rb, rb, nrows - 4, x, y1, n);
                        CHECK_MSG(!memcmp(y0, y1, sizeof(float) * (size_t)(nrows - 4)), "offset call, type %u isa %s", type, k->name);
                    }
                }
                /* the layout itself: unit b of row 1 sits right after unit b of row 0 */
                const size_t bb = moe_x4_unit_bytes(type);
                CHECK(bb == (flt ? (size_t)MOE_X4_PLAIN_RUN : 1) * moe_type_get(type)->block_bytes);
                CHECK(!memcmp(x4 + bb, plain + rb, bb));
                CHECK(rb == bb || !memcmp(x4 + 4 * bb, plain + bb, bb));
                free(src); free(plain); free(x4); free(x); free(y0); free(y1);
            }
    }
    CHECK(!moe_type_has_x4(MOE_T_I8) && !moe_type_has_x4(MOE_T_F64));
    /* a wide x4 kernel exists wherever a wide plain one does */
    for (int isa = 0; isa < MOE_ISA_COUNT; isa++) {
        const moe_kernels *k = moe_kernels_for((moe_isa)isa);
        for (size_t ti = 0; k && ti < sizeof types / sizeof types[0]; ti++)
            CHECK(!k->gemm_wide[types[ti]] == !k->gemm_wide_x4[types[ti]]);
    }
    CHECK(compared > 0);
    return check_report("test_repack");
}
