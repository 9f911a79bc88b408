/* act8_ref.c — the 8-bit activation path (flag `act_q8`): its specification.
 *
 * Why a second numerics: the FP32 contract of quant.h costs four vector
 * operations per 16 weights (widen, convert, scale, FMA), so on a 2-core
 * machine the matrix-vector products run at ~20 GB/s per core, below what
 * memory delivers. Quantizing the *activations* to 8-bit blocks, as llama.cpp
 * does for Q8_0 weights, turns a block's dot product into integer
 * multiply-adds (one VNNI vpdpbusd per 64 weights) whose sum is exact, so
 * the kernels become memory-bound. It changes the logits (by about as much as
 * llama.cpp's own Q8_0 runs differ from FP32), so it is a separate, opt-in
 * numerics, never a default; within it every guarantee holds: the same bits
 * for every ISA, thread count and prefill split.
 *
 * ---- Activation blocks (moe_quantize_act8): llama.cpp's x86 Q8_0 ---------
 * A row of n values (n % 32 == 0) is cut into blocks of 32. Per block b:
 *     amax = max |x_k|               (NaN ignored)
 *     id   = amax != 0 ? 127 / amax : 0
 *     q_k  = round_half_even(x_k * id), clamped to [-127, 127], NaN -> 0
 *     da_b = (float)(half)(amax / 127)   (rounded to IEEE half, as ggml stores it)
 * ---- The dot-product contract (Q8_0 weights, dw_b = the block's f16 scale) --
 *     isum_b = sum_{k in block b} qw_k * q_k     (exact, int32)
 *     S_b    = dw_b * da_b                        (one float rounding)
 * Blocks go to 16 lanes: lane j takes blocks j, j+16, j+32, ... in increasing
 * order, acc[j] = fmaf((float)isum_b, S_b, acc[j]) starting from +0; lanes
 * are reduced by quant.h's fixed tree; a second-level scale multiplies after.
 * Because isum_b is an exact integer, a kernel may sum a block's products in
 * any order; only the float steps above are fixed.
 *
 * ---- Memory layouts ---------------------------------------------------------
 * Both sides are cut into groups of G = 16 blocks (512 values; the last group
 * of a row may have nb < 16 blocks), and inside a group the bytes are
 * "slab-transposed": slab t (t = 0..7) holds, for each block j of the group,
 * its values 4t..4t+3. So one 64-byte slab feeds one vpdpbusd whose lane j
 * accumulates block j — exactly the lane assignment above.
 *   activations, per group (A8_GROUP_BYTES = 640):
 *     int8  q[8][16][4]   slab t, block j, value 4t+i (zeros for absent blocks)
 *     int32 corr[16]      -128 * sum of block j's q (0 for absent blocks)
 *     float da[16]        (0 for absent blocks)
 *   Q8_0 weights ("a8 layout", moe_repack_a8; the same bytes per row as the
 *   file, so rows stay row_bytes apart):
 *     uint16 d[nb]        the blocks' f16 scales
 *     uint8  u[8][nb][4]  qw ^ 0x80 (= qw + 128): unsigned, as vpdpbusd wants;
 *                         corr removes the 128 * sum q the bias adds. */
#include "quant/quant_internal.h"
#include "util.h"

#include <math.h>

int64_t moe_act8_row_bytes(int64_t n) {
    const int64_t nb = n / 32;
    return (nb + A8_G - 1) / A8_G * A8_GROUP_BYTES;
}

bool moe_type_has_a8(uint32_t type) { return type == MOE_T_Q8_0; }

/* ggml's nearest_int: round half to even via the 1.5*2^23 trick (|v| <= 127 here). */
static inline int a8_round(float v) {
    float f = v + 12582912.f;
    int i;
    memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}

void moe_quantize_act8(const float *x, void *dst, int64_t n) {
    const int64_t nb = n / 32, ng = (nb + A8_G - 1) / A8_G;
    uint8_t *D = dst;
    memset(D, 0, (size_t)(ng * A8_GROUP_BYTES));
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * 32;
        uint8_t *g = D + (b / A8_G) * A8_GROUP_BYTES;
        const int j = (int)(b % A8_G);
        float amax = 0.0f;
        for (int k = 0; k < 32; k++) {
            const float a = fabsf(xb[k]);
            if (a > amax) amax = a;
        }
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int k = 0; k < 32; k++) {
            const float v = xb[k] * id;
            int q = v >= 127.0f ? 127 : v <= -127.0f ? -127 : v == v ? a8_round(v) : 0;
            g[(k / 4) * 64 + j * 4 + (k % 4)] = (uint8_t)(int8_t)q;
            sum += q;
        }
        const int32_t corr = -128 * sum;
        const float da = moe_f16_to_f32(moe_f32_to_f16(amax / 127.0f));
        memcpy(g + 512 + 4 * j, &corr, 4);
        memcpy(g + 576 + 4 * j, &da, 4);
    }
}

void moe_repack_a8(uint32_t type, const void *src, void *dst, int64_t nrows, int64_t n) {
    (void)type; /* Q8_0 only (moe_type_has_a8) */
    const int64_t nb = n / 32;
    const size_t rb = (size_t)nb * QB_Q8_0;
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *S = (const uint8_t *)src + (size_t)r * rb;
        uint8_t *D = (uint8_t *)dst + (size_t)r * rb;
        for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
            const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
            uint8_t *G = D + (size_t)g0 * QB_Q8_0;
            for (int j = 0; j < gn; j++) {
                const uint8_t *blk = S + (size_t)(g0 + j) * QB_Q8_0;
                memcpy(G + 2 * j, blk, 2);
                for (int k = 0; k < 32; k++)
                    G[2 * gn + (k / 4) * gn * 4 + j * 4 + (k % 4)] = blk[2 + k] ^ 0x80;
            }
        }
    }
}

/* The fixed tree of quant.h. */
static float a8_reduce16(const float a[16]) {
    float b[8], c[4];
    for (int l = 0; l < 8; l++) b[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; l++) c[l] = b[l] + b[l + 4];
    const float e0 = c[0] + c[2], e1 = c[1] + c[3];
    return e0 + e1;
}

/* Block b's activation values and scale, read back from the A8 layout. */
static void a8_block(const uint8_t *xa, int64_t b, int8_t q[32], float *da) {
    const uint8_t *g = xa + (b / A8_G) * A8_GROUP_BYTES;
    const int j = (int)(b % A8_G);
    for (int k = 0; k < 32; k++) q[k] = (int8_t)g[(k / 4) * 64 + j * 4 + (k % 4)];
    memcpy(da, g + 576 + 4 * j, 4);
}

float moe_a8_dot_ref(uint32_t type, const void *row, const void *xa, int64_t n) {
    (void)type; /* Q8_0, plain ggml layout */
    const uint8_t *R = row;
    float acc[16] = {0};
    for (int64_t b = 0; b < n / 32; b++) {
        int8_t q[32];
        float da;
        a8_block(xa, b, q, &da);
        const uint8_t *blk = R + b * QB_Q8_0;
        int32_t isum = 0;
        for (int k = 0; k < 32; k++) isum += (int32_t)(int8_t)blk[2 + k] * q[k];
        const float S = moe_f16_to_f32(moe_rd16(blk)) * da;
        acc[b % 16] = fmaf((float)isum, S, acc[b % 16]);
    }
    return a8_reduce16(acc);
}

/* The same over one row in the a8 layout: the scalar kernel of every table
 * without a SIMD one. */
static float a8_row_dot(const uint8_t *row, const uint8_t *xa, int64_t n) {
    const int64_t nb = n / 32;
    float acc[16] = {0};
    for (int64_t g0 = 0; g0 < nb; g0 += A8_G) {
        const int gn = (int)(nb - g0 < A8_G ? nb - g0 : A8_G);
        const uint8_t *G = row + (size_t)g0 * QB_Q8_0;
        const uint8_t *A = xa + (g0 / A8_G) * A8_GROUP_BYTES;
        for (int j = 0; j < gn; j++) {
            int32_t isum;
            memcpy(&isum, A + 512 + 4 * j, 4);                 /* -128 * sum q */
            for (int t = 0; t < 8; t++)
                for (int i = 0; i < 4; i++)
                    isum += (int32_t)G[2 * gn + t * gn * 4 + j * 4 + i] * (int8_t)A[t * 64 + j * 4 + i];
            float da;
            memcpy(&da, A + 576 + 4 * j, 4);
            const float S = moe_f16_to_f32(moe_rd16(G + 2 * j)) * da;
            acc[j] = fmaf((float)isum, S, acc[j]);
        }
    }
    return a8_reduce16(acc);
}

void moe_gemv_a8_q8_0_ref(const void *w, size_t rb, int64_t nrows, const void *xa, float *y, int64_t n) {
    for (int64_t r = 0; r < nrows; r++) y[r] = a8_row_dot((const uint8_t *)w + (size_t)r * rb, xa, n);
}

void moe_gemm_a8_q8_0_ref(const void *w, size_t rb, int64_t nrows, const void *xa, size_t xs, int64_t ntok,
                          float *y, size_t ys, int64_t n) {
    for (int64_t t = 0; t < ntok; t++)
        moe_gemv_a8_q8_0_ref(w, rb, nrows, (const uint8_t *)xa + (size_t)t * xs, y + (size_t)t * ys, n);
}
