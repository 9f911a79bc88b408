/* screen.h — the certified lm-head screen (flag lm_screen, docs/SCREEN.md).
 *
 * Built at load from the exact dequantized rows of the head: per row a
 * low-bit proxy with exact block scales, so proxy + residual = the row, and
 * per row the constants of a bound delta_i >= |kernel logit - screen value|
 * (the proxy's error, the screen's own float rounding and the rounding of
 * the FP32 dot-product kernel of quant.h). A step computes the screen value
 * of every row, evaluates with the normal kernel only the rows whose upper
 * bound reaches the k-th best exact logit of the screen's best rows, and
 * returns the top-k of those: the same ids and bits as the top-k of the full
 * logits. Anything the proof does not cover (a non-finite value, a risk of
 * overflow, too many survivors) makes the caller run the full head. */
#ifndef MOE_SCREEN_H
#define MOE_SCREEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"

struct moe_weight;
struct moe_context;

/* Levels: level 1 = the high nibble of an 8-bit code (value (16h+8)·s);
 * level 2 (F32/F16/BF16 heads) = the whole 8-bit code (value c·s). Q8_0
 * heads have level 1 only: their own codes' high nibbles, the exact row
 * next. */
typedef struct moe_screen {
    int64_t V, n, nb;        /* rows, row length, 32-value blocks per row */
    int levels;              /* 1 (Q8_0) or 2 (F32/F16/BF16) */
    uint32_t type;           /* the head's type */
    uint8_t *hi;             /* [V][n/2] high nibbles + 8 (0..15), value k in byte k/2, low nibble first */
    uint8_t *lo;             /* [V][n/2] low nibbles (0..15); levels == 2 only */
    uint8_t *sexp;           /* [V][nb] levels == 2: biased exponent e, block scale 2^(e-127) */
    uint16_t *sd;            /* [V][nb] levels == 1: the Q8_0 block's own f16 scale */
    float *d1, *d2;          /* [V] delta_i = ||x||_2 · d_i (+ the underflow term), per level */
    float *wnorm;            /* [V] upper bound of ||w_i||_2 (the overflow guard) */
    float *r1norm;           /* [V] upper bound of ||r_i||_2 at level 1 (the integer pass's bound) */
    int scale_emin, scale_emax; /* block scales lie in [2^emin, 2^emax] (the integer pass's range check) */
    float wnorm_max;
    double tiny;             /* the underflow term 2n·2^-149 (docs/SCREEN.md) */
} moe_screen;

/* The rounding constant gamma_d = d·u/(1 - d·u), u = 2^-24, for a reduction
 * in which each product passes through at most d roundings, rounded up. */
double moe_screen_gamma(int64_t d);
/* The depths: the kernel (quant.h: ceil(n/16) fmaf steps + 4 tree levels)
 * and the screen's own sum (one more: a product and an add, not fused). */
int64_t moe_screen_depth_kernel(int64_t n);
int64_t moe_screen_depth_screen(int64_t n);

/* Builds the screen of a head in the plain (file) layout; NULL (and *why
 * set) for a head it does not cover: its type, a second-level scale, a
 * non-finite weight, rows not a multiple of 32, out of memory. */
moe_screen *moe_screen_build(uint32_t type, const uint8_t *data, size_t row_bytes, int64_t V, int64_t n,
                             const char **why);
void moe_screen_free(moe_screen *s);
/* Bytes of the screen's arrays (memory). */
size_t moe_screen_bytes(const moe_screen *s);
/* Bytes the level-1 pass of one step reads (every row's level-1 arrays). */
double moe_screen_l1_bytes(const moe_screen *s);

/* Upper bound of ||x||_2 (docs/SCREEN.md); +inf when x is not finite. */
double moe_screen_xnorm(const float *x, int64_t n);
/* Screen value of row i at a level, and its delta for an activation of
 * norm bound xn (shrink: the test-only flag, delta / 4). */
float moe_screen_value(const moe_screen *s, int level, int64_t i, const float *x);
double moe_screen_delta(const moe_screen *s, int level, int64_t i, double xn, bool shrink);

/* Level 1 of rows [r0, r1) into out[r0 ..]: moe_screen_value's bits, by
 * the kernels of a level (scalar, screen_avx2.c, screen_avx512.c; the
 * caller's level must run on this CPU). */
void moe_screen_level1_rows(const moe_screen *s, moe_isa isa, int64_t r0, int64_t r1, const float *x, float *out);
void moe_screen_l1_avx2(const moe_screen *s, int64_t r0, int64_t r1, const float *x, float *out);
void moe_screen_l1_avx512(const moe_screen *s, int64_t r0, int64_t r1, const float *x, float *out);
/* quant.h's reduction tree over 16 lanes */
static inline float moe_screen_reduce16(const float a[16]) {
    float b8[8], c4[4];
    for (int l = 0; l < 8; l++) b8[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; l++) c4[l] = b8[l] + b8[l + 4];
    return (c4[0] + c4[2]) + (c4[1] + c4[3]);
}

/* One step's figures (lab.h moe_screen_stats reads their sums). */
typedef struct moe_screen_step {
    int64_t level2_rows;     /* rows that reached level 2 */
    int64_t exact_rows;      /* rows evaluated by the kernel (x4: whole 4-row groups) */
    double bytes;            /* lm-head bytes read: the screen's and the kernel rows' */
    bool fallback;           /* the full head ran */
} moe_screen_step;

/* Scratch for a step: V floats, V floats, V int32, V bytes; for the
 * integer level 1 (AVX-512): n int8, n/4 int32, n/4 floats (NULL: none). */
typedef struct moe_screen_scratch {
    float *s1, *y;
    int32_t *ids;
    uint8_t *done;
    int8_t *xq;              /* the activation's 8-bit codes, in the pass's pair order */
    int32_t *q120;           /* per pair and lane: 120 x the sum of the lane's 4 codes */
    float *tv;               /* per pair and lane: the block's activation scale 2^e */
} moe_screen_scratch;

/* The integer level 1 (docs/SCREEN.md, Theorem 1'): x quantized per
 * 32-value block to q·2^e (|q| <= 127); per lane of a pair of blocks the
 * exact int32 sum of 4 nibble x code products, times the block scales.
 * moe_screen_int_prep fills xq/q120/tv and returns false when the step is
 * outside the range the proof covers (then the float pass runs); *en: an
 * upper bound of ||x - x_hat||_2, *xhn of ||x_hat||_2. */
bool moe_screen_int_ok(const moe_screen *s);
bool moe_screen_int_prep(const moe_screen *s, const float *x, const moe_screen_scratch *scr, double *en, double *xhn);
float moe_screen_int_value(const moe_screen *s, int64_t i, const moe_screen_scratch *scr);   /* the specification */
void moe_screen_int_avx512(const moe_screen *s, int64_t r0, int64_t r1, const moe_screen_scratch *scr, float *out);
double moe_screen_int_delta(const moe_screen *s, int64_t i, double xn, double en, double xhn, bool shrink);

/* The top kk (1..64) rows of W·x: ids and the kernel's bits, ordered as
 * moe_topk orders the full logits. w is the head as bound (x4 or plain;
 * a8 or scaled heads have no screen), k the kernel table, c the context
 * whose pool runs the screen pass (NULL: this thread). Returns the count
 * written, or 0 when the caller must run the full head (st->fallback). */
int moe_screen_topk(const moe_screen *s, const struct moe_weight *w, const moe_kernels *k, struct moe_context *c,
                    const float *x, int kk, int32_t *ids, float *vals, const moe_screen_scratch *scr, bool shrink,
                    moe_screen_step *st);

/* The kernel's logit of row i (a plain or x4 head, not a8), computed into
 * y[0 .. V) around i (its x4 group). */
float moe_screen_row_logit(const struct moe_weight *w, const moe_kernels *k, const float *x, int64_t i, float *y);

#endif
