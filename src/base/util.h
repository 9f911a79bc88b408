/* util.h — small shared helpers: error reporting into caller buffers, checked
 * arithmetic, half/bfloat conversions. Internal to the library. */
#ifndef MOE_UTIL_H
#define MOE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <string.h>
#include "moefast.h"

/* Formats "msg" into err (if non-NULL) and returns code. All library errors go
 * through here so every message is one line (newlines are replaced by spaces). */
int moe_errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Overflow-checked size arithmetic: return false on overflow. */
static inline bool moe_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool moe_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* IEEE half <-> float, exact (software; no F16C needed for the reference). */
float moe_f16_to_f32(uint16_t h);
uint16_t moe_f32_to_f16(float f); /* round to nearest even */
static inline float moe_bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f;
}
uint16_t moe_f32_to_bf16(float f); /* round to nearest even, NaN kept quiet */

/* moe_expf's constants, shared with its SIMD copies (attn_avx2.c expf8,
 * attn_avx512.c expf16), which must repeat its operations exactly. */
#define MOE_EXP_LO (-87.33654f)
#define MOE_EXP_HI 88.72283f
#define MOE_EXP_MAGIC 12582912.0f
#define MOE_EXP_LOG2E 1.44269504088896341f
#define MOE_EXP_LN2_HI 0.693359375f
#define MOE_EXP_LN2_LO (-2.12194440e-4f)
#define MOE_EXP_P0 1.9875691500e-4f
#define MOE_EXP_P1 1.3981999507e-3f
#define MOE_EXP_P2 8.3334519073e-3f
#define MOE_EXP_P3 4.1665795894e-2f
#define MOE_EXP_P4 1.6666665459e-1f
#define MOE_EXP_P5 5.0000001201e-1f

/* exp(x) for the forward pass: Cody-Waite range reduction and Cephes' degree-6
 * polynomial, within 2 ulp of the true value for normal results; results below
 * FLT_MIN flush to 0, above FLT_MAX give +inf, NaN stays NaN. Written with
 * plain IEEE operations only (no libm, no fma: the build sets
 * -ffp-contract=off), so it gives the same bits on every machine, compiler
 * vectorisation or not — and it is several times faster than libm's expf,
 * which matters for attention softmax. */
static inline float moe_expf(float x) {
    float xc = x < MOE_EXP_LO ? MOE_EXP_LO : (x > MOE_EXP_HI ? MOE_EXP_HI : x);
    if (xc != xc) xc = 0.0f;                             /* NaN handled at the end */
    float t = xc * MOE_EXP_LOG2E + MOE_EXP_MAGIC;   /* round(x / ln2) via 1.5 * 2^23 */
    float n = t - MOE_EXP_MAGIC;
    float r = xc - n * MOE_EXP_LN2_HI;                     /* ln2 split in two parts */
    r = r - n * MOE_EXP_LN2_LO;
    float p = MOE_EXP_P0;
    p = p * r + MOE_EXP_P1;
    p = p * r + MOE_EXP_P2;
    p = p * r + MOE_EXP_P3;
    p = p * r + MOE_EXP_P4;
    p = p * r + MOE_EXP_P5;
    float y = p * (r * r) + r + 1.0f;
    int32_t ni = (int32_t)n;                             /* n in [-126, 128] */
    if (ni > 127) { y = y * 2.0f; ni = 127; }
    int32_t e = ni + 127;
    uint32_t bits = (uint32_t)e << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    y = y * scale;
    if (x < MOE_EXP_LO) y = 0.0f;
    if (x > MOE_EXP_HI) y = __builtin_inff();
    return x != x ? x : y;
}

/* Monotonic clock in seconds. */
double moe_now(void);

/* n * size zeroed bytes starting `offset` bytes (0..63) past a 64-byte
 * boundary, NULL on overflow or out of memory; release with
 * moe_free_aligned. Why: the SIMD kernels read activation rows, KV rows and
 * scratch in 64-byte pieces, and with calloc's 16-byte alignment every such
 * piece straddles two cache lines (two loads each); offset 16 reproduces
 * that placement on purpose (flag aligned_buffers off). Built on calloc, so
 * large blocks stay lazily zero-filled and count in the resident set only
 * once touched. */
void *moe_calloc_aligned(size_t n, size_t size, size_t offset);
void moe_free_aligned(void *p);

/* SHA-256 of a memory range (used for trace provenance). hex must hold 65 bytes. */
void moe_sha256_hex(const void *data, size_t len, char hex[65]);
/* sha256 of a file read in chunks (does not keep the file resident). */
int moe_sha256_file(const char *path, char hex[65]);

/* 64-bit seeded PRNG (splitmix64 seeding xoshiro256**): deterministic across
 * platforms; used by the sampler and the model generator. */
typedef struct { uint64_t s[4]; } moe_rng;
void moe_rng_seed(moe_rng *r, uint64_t seed);
uint64_t moe_rng_next(moe_rng *r);
double moe_rng_uniform(moe_rng *r);          /* [0, 1) with 53 bits */
double moe_rng_normal(moe_rng *r);           /* N(0,1), Box-Muller, deterministic */

#endif
