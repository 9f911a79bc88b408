/* attn.h — attention inner kernels (and the two elementwise kernels that
 * share moe_expf with them) for one (token, KV head) pair and the G
 * query heads that share that KV head (grouped-query attention).
 *
 * scores: sc[h*sc_stride + j] = dot(q_h, k_j) * scale for h < G, j < n_keys,
 *         each dot under the 16-lane contract of quant.h (lane l sums
 *         d = l, l+16, ... with fmaf; tree a[l]+a[l+8], +4, +2, +1).
 * accum:  out_h[d] = sum_j p[h*p_stride + j] * v_j[d], for j = 0 .. n_keys-1
 *         in increasing order, each step one fmaf starting from +0.0f.
 * Processing the heads of a group together loads each key and value row
 * once instead of G times; the arithmetic per output is unchanged, so every
 * ISA level gives the same bits.
 * scores_h / accum_h: the same with keys / values stored as IEEE half (the
 * kv_f16 numerics): each element is converted to float exactly, then the
 * arithmetic is the one above. scores_q8 / accum_q8: the kv_q8 numerics, its
 * own contract (below). */
#ifndef MOE_ATTN_H
#define MOE_ATTN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "quant/quant.h"

typedef struct moe_attn_kernels {
    void (*scores)(const float *q, size_t q_stride, int G, const float *k, size_t k_stride, int n_keys,
                   int D, float scale, float *sc, size_t sc_stride);
    void (*accum)(const float *p, size_t p_stride, int G, const float *v, size_t v_stride, int n_keys,
                  int Dv, float *out, size_t out_stride);
    void (*scores_h)(const float *q, size_t q_stride, int G, const uint16_t *k, size_t k_stride, int n_keys,
                     int D, float scale, float *sc, size_t sc_stride);
    void (*accum_h)(const float *p, size_t p_stride, int G, const uint16_t *v, size_t v_stride, int n_keys,
                    int Dv, float *out, size_t out_stride);
    /* r[j] = moe_expf(r[j] - mx) for j < n: elementwise, the same bits as the
     * scalar moe_expf (src/util.h) on every ISA. */
    void (*exp_shift)(float *r, int n, float mx);
    /* g[i] = silu(g[i]) * u[i], silu(x) = x / (1 + moe_expf(-x)): elementwise,
     * the same bits on every ISA (SwiGLU of the FFN). */
    void (*silu_mul)(float *g, const float *u, int64_t n);
    /* y[i] = moe_f32_to_f16(x[i]) for i < n (round to nearest even; NaN
     * keeps its sign and top payload bits, made quiet): the kv_f16 store. */
    void (*to_half)(const float *x, uint16_t *y, int n);
    /* The MoE combine of one token, elementwise for i < n, with y_k = eout +
     * slot[k] * n: o[i] = y_0[i]*w[0], then o[i] = o[i] + y_k[i]*w[k] for
     * k = 1 .. K-1 (a multiply, then an add: never fused), then o[i] += sh[i]
     * when sh, then x[i] += o[i]. */
    void (*combine)(const float *eout, const int32_t *slot, const float *w, int K, const float *sh, float *o,
                    float *x, int n);
    /* kv_q8 (below): scores of keys j0 .. j0+nk-1 against the G query heads
     * whose A8 rows are qa + h*qa_stride; written to sc[h*sc_stride + j]
     * (j absolute). k8 / kd: the key tiles and scales of one (layer, KV head). */
    void (*scores_q8)(const uint8_t *qa, size_t qa_stride, int G, const int8_t *k8, const uint16_t *kd,
                      size_t kd_stride, int j0, int nk, int D, float scale, float *sc, size_t sc_stride);
    /* kv_q8: out_h = sum over keys j0 .. j0+nk-1 of p[h*p_stride + j] * v_j
     * (j absolute); wbuf: scratch of G * (Dv/32) * nk floats. */
    void (*accum_q8)(const float *p, size_t p_stride, int G, const int8_t *v8, const uint16_t *vd, size_t vd_stride,
                     int j0, int nk, int Dv, float *wbuf, float *out, size_t out_stride);
    /* kv_q8's softmax numerator and denominator over r[0 .. n-1]: mx = the
     * largest r[j] (NaN ignored; order-free), r[j] = moe_expf(r[j] - mx),
     * returns sum r[j] in 16 lanes (lane l takes j = l, l+16, ... in order,
     * from +0) reduced by the tree of quant.h. */
    float (*softmax_q8)(float *r, int n);
    /* The largest of r[0 .. n-1], NaN ignored, -INFINITY when there is none:
     * the softmax shift. Order-free, except that a maximum of zero may come
     * back as either sign; r[j] - mx is then a zero too, and moe_expf gives
     * exactly 1 for both signs, so the softmax does not depend on it. */
    float (*max_f32)(const float *r, int n);
    /* scores (FP32 cache) with the same bits, its loads ordered for keys that
     * come from memory (decode, flag key_stream): each key row is read front
     * to back before the next one, one sequential stream, where `scores` reads
     * the tile's rows interleaved (faster at AVX-512 once the rows are in L2,
     * as a prompt's are). The scalar level has one order for both.
     * Per output the FMAs are the same, in the same order. */
    void (*scores_stream)(const float *q, size_t q_stride, int G, const float *k, size_t k_stride, int n_keys,
                          int D, float scale, float *sc, size_t sc_stride);
    /* accum (FP32 cache) with the same bits, its tiles shaped for values that
     * come from memory (decode, flag key_stream). AVX2's accum reads a value
     * row in 8 passes of 16 dims (4 heads per tile: faster from L2, as a
     * prompt's values are, but a strided walk from memory); this one in 4
     * passes of 32 dims (2 heads per tile). The other levels have one shape. */
    void (*accum_stream)(const float *p, size_t p_stride, int G, const float *v, size_t v_stride, int n_keys,
                         int Dv, float *out, size_t out_stride);
    /* accum_q8 with the same bits, for values that come from memory (decode,
     * flag value_prefetch): each value-sum tile prefetches the rows it will
     * read MOE_VALUE_PREFETCH_KEYS keys later. The scalar level is accum_q8. */
    void (*accum_q8_stream)(const float *p, size_t p_stride, int G, const int8_t *v8, const uint16_t *vd,
                            size_t vd_stride, int j0, int nk, int Dv, float *wbuf, float *out, size_t out_stride);
    /* gpt-oss's clamped SwiGLU: x = min(g[i], 7) (NaN: 7), y = u[i] clamped
     * to [-7, 7] (NaN stays), g[i] = x / (1 + moe_expf(1.702 * -x)) * (y + 1):
     * elementwise, the same bits on every ISA (llama.cpp's swiglu_oai). */
    void (*swiglu_clamp)(float *g, const float *u, int64_t n);
    /* Decode over the F16 cache with software prefetch (flag kv_prefetch):
     * the same bits as scores_h / accum_h, in their load orders, plus
     * prefetches. A decode step's keys and values come from memory, one
     * stream per item, and the hardware prefetcher starts over at every 4 KB
     * page; so the score tiles prefetch the rows MOE_KV_PREFETCH_KEYS keys
     * ahead (the first ones at the start) and the value tiles theirs
     * MOE_KV_PREFETCH_VALUES ahead (AVX2: the value sum by chunks of
     * MOE_KV_CHUNK_KEYS keys instead, the next chunk read in address order
     * while one is summed; attn_avx2.c). The scalar level's are its plain
     * kernels. (The FP32 cache's decode kernels with the same prefetches
     * measured within noise: docs/PERFORMANCE.md.) */
    void (*scores_h_prefetch)(const float *q, size_t q_stride, int G, const uint16_t *k, size_t k_stride,
                              int n_keys, int D, float scale, float *sc, size_t sc_stride);
    void (*accum_h_prefetch)(const float *p, size_t p_stride, int G, const uint16_t *v, size_t v_stride,
                             int n_keys, int Dv, float *out, size_t out_stride);
} moe_attn_kernels;

/* kv_prefetch's distances, in key rows: far enough that a row of 256-512
 * bytes arrives from memory before its tile needs it (16 rows, as kv_q8's
 * value_prefetch uses, hid too little of a step's attention time; docs/PERFORMANCE.md) */
#define MOE_KV_PREFETCH_KEYS 64
#define MOE_KV_PREFETCH_VALUES 32
/* kv_prefetch's value sum, in chunks of this many keys (accum_h_prefetch) */
#define MOE_KV_CHUNK_KEYS 16

/* A hint to bring bytes [p, p + n) into L1, a 64-byte line at a time: never
 * a fault, never a change to any result. */
static inline void moe_prefetch_bytes(const void *p, size_t n) {
    for (size_t o = 0; o < n; o += 64) __builtin_prefetch((const char *)p + o, 0, 3);
}

/* Reads bytes [p, p + n) a 64-byte line at a time, in address order, and
 * drops what it read: brings them toward the core as one sequential stream
 * the hardware prefetcher follows. Never a change to any result. */
static inline void moe_touch_bytes(const void *p, size_t n) {
    unsigned acc = 0;
    for (size_t o = 0; o < n; o += 64) acc += *((const volatile unsigned char *)p + o);
    __asm__ volatile("" : : "r"(acc));
}

/* How far ahead accum_q8_stream prefetches, in keys (rows of Dv bytes):
 * 16 keys gave 1-2.5 % of a kv_q8 decode step on the bench models (`bench
 * --ab -value_prefetch`, context 513-640); 32 and 64 were no better in a
 * throwaway build (docs/PERFORMANCE.md). */
#define MOE_VALUE_PREFETCH_KEYS 16

/* The softmax denominators of the FP32 and F16 caches: sums[h] = r_h[0] +
 * r_h[1] + ... + r_h[n-1] in key order from +0.0f, r_h = r + h*stride, for
 * h < G. Scalar on every ISA (the order is the contract); four heads run as
 * interleaved chains so the adds do not wait on each other's latency. */
void moe_attn_row_sums(const float *r, size_t stride, int G, int n, float *sums);

/* ---- kv_q8: the 8-bit KV cache (flag kv_q8) ------------------------------
 * Why: at context 576 a qwen3moe-bench decode step reads 18.9 MB of half
 * keys and values, and attention takes ~10 % of the step at half the speed
 * of the weight streams (bench --phases). Eight-bit codes halve the bytes
 * and let the scores use integer multiply-adds (one VNNI vpdpbusd per 4
 * dims of 16 keys), as llama.cpp's q8_0 KV cache does with q8_0 queries.
 * It is a numerics of its own (changes the logits), never a default.
 *
 * Quantization: every key, value and query head row (n % 32 == 0) is
 * quantized by moe_quantize_act8 (act8_ref.c: per block of 32, codes
 * q = round_half_even(x * 127 / amax) in [-127, 127], scale d = (half)(amax
 * / 127)); d is stored as its half bits (exact).
 * Storage per (layer, KV head), positions padded to a multiple of 16 (Cp):
 *   keys   int8 k8[Cp/16][D/4][16][4]: tile T = positions 16T .. 16T+15;
 *          slab s holds dims 4s .. 4s+3 of each of the tile's 16 keys
 *          (byte (s*16 + lane)*4 + i = dim 4s+i of key 16T+lane), so one
 *          64-byte load feeds 16 keys' 4-dim products
 *   kd     half [D/32][Cp]: block b of key j at b*Cp + j
 *   values int8 v8[C][Dv]: one row per position, dims in order
 *   vd     half [Dv/32][Cp]
 * scores_q8, per head h and key j (D % 32 == 0):
 *   isum_b = sum_{k < 32} qk_j[32b+k] * qq_h[32b+k]     (exact int32)
 *   S_b    = dk_{j,b} * dq_{h,b}                        (one rounding)
 *   acc = +0; for b = 0 .. D/32-1 in order: acc = fmaf((float)isum_b, S_b, acc)
 *   sc = acc * scale
 * softmax: FP32 (softmax_q8 above), its sum in 16 lanes, then o *= 1 / sum.
 * accum_q8, per head h (Dv % 32 == 0):
 *   w_{h,j,b} = p_{h,j} * dv_{j,b}                      (one rounding)
 *   out_h[d] = +0, then for j = j0 .. j0+nk-1 in order:
 *     out_h[d] = fmaf(w_{h,j,d/32}, (float)qv_j[d], out_h[d]) */
/* Byte offset, in an A8 row, of code k (< 32) of block b; of its scale da_b
 * (float) and of corr_b = -128 * the block's code sum (int32): act8_ref.c. */
static inline size_t moe_a8_code_off(int b, int k) {
    return (size_t)(b / A8_G) * A8_GROUP_BYTES + (size_t)(k / 4) * 64 + (size_t)(b % A8_G) * 4 + (size_t)(k % 4);
}
static inline size_t moe_a8_da_off(int b) { return (size_t)(b / A8_G) * A8_GROUP_BYTES + 576 + 4 * (size_t)(b % A8_G); }
static inline size_t moe_a8_corr_off(int b) { return (size_t)(b / A8_G) * A8_GROUP_BYTES + 512 + 4 * (size_t)(b % A8_G); }
/* An int32 / float field of an A8 row (unaligned-safe) */
static inline int32_t moe_a8_i32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline float moe_a8_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}
/* Byte of key j, dim d in a (layer, KV head)'s key tiles */
static inline size_t moe_kv8_key_off(int j, int d, int D) {
    return (size_t)(j / 16) * 16 * (size_t)D + (size_t)(d / 4) * 64 + (size_t)(j % 16) * 4 + (size_t)(d % 4);
}
/* Moves one quantized key (A8 row xa of D values) into position j of a
 * (layer, KV head)'s key tiles k8 and scales kd (stride Cp). */
void moe_kv8_store_key(const uint8_t *xa, int D, int8_t *k8, uint16_t *kd, size_t kd_stride, int j);
/* The same for a value row: row j of v8 and its scales in vd. */
void moe_kv8_store_value(const uint8_t *xa, int Dv, int8_t *v8, uint16_t *vd, size_t vd_stride, int j);

/* per-ISA tables (attn.c, attn_avx2.c, attn_avx512.c); a session takes its
 * table from its level's descriptor (isa/isa.h: moe_isa_table.attn) */
extern const moe_attn_kernels moe_attn_scalar, moe_attn_avx2, moe_attn_avx512;

#endif
