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

/* Monotonic clock in seconds. */
double moe_now(void);

/* SHA-256 of a memory range (used for trace provenance). hex must hold 65 bytes. */
void moe_sha256_hex(const void *data, size_t len, char hex[65]);

/* 64-bit seeded PRNG (splitmix64 seeding xoshiro256**): deterministic across
 * platforms; used by the sampler and the model generator. */
typedef struct { uint64_t s[4]; } moe_rng;
void moe_rng_seed(moe_rng *r, uint64_t seed);
uint64_t moe_rng_next(moe_rng *r);
double moe_rng_uniform(moe_rng *r);          /* [0, 1) with 53 bits */
double moe_rng_normal(moe_rng *r);           /* N(0,1), Box-Muller, deterministic */

#endif
