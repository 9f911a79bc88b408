/* util.c — error formatting, half/bfloat conversion, clock, sha256, PRNG. */
#include "base/util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <openssl/evp.h>

int moe_errf(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        for (char *p = err; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
    }
    return code;
}

float moe_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            man &= 0x3ff;
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t moe_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u) return (uint16_t)(sign | 0x7e00 | ((absu >> 13) & 0x3ff)); /* NaN */
    if (absu >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow (rounds to inf) */
    if (absu < 0x38800000u) { /* result is subnormal or zero */
        if (absu < 0x33000000u) return (uint16_t)sign; /* < half of smallest subnormal */
        uint32_t e = absu >> 23, man = (absu & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = absu - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t q = r >> 13, rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (q & 1))) q++;
    return (uint16_t)(sign | q);
}

uint16_t moe_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

double moe_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *moe_calloc_aligned(size_t n, size_t size, size_t offset) {
    offset &= 63;
    if (size && n > (SIZE_MAX - 128) / size) return NULL;
    unsigned char *raw = calloc(1, n * size + 128);
    if (!raw) return NULL;
    /* the first boundary at least 16 bytes in (malloc aligns to 16, so 16..64
     * bytes): room before p for the pointer free needs */
    unsigned char *p = raw + 64 - ((uintptr_t)raw & 63) + offset;
    memcpy(p - sizeof raw, &raw, sizeof raw);
    return p;
}

void moe_free_aligned(void *p) {
    if (!p) return;
    unsigned char *raw;
    memcpy(&raw, (unsigned char *)p - sizeof raw, sizeof raw);
    free(raw);
}

void moe_sha256_hex(const void *data, size_t len, char hex[65]) {
    unsigned char md[32];
    unsigned int n = 0;
    EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    hex[64] = 0;
}

int moe_sha256_file(const char *path, char hex[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return MOE_EIO;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    const size_t cap = (size_t)1 << 20;
    unsigned char *buf = malloc(cap);
    int rc = c && buf && EVP_DigestInit_ex(c, EVP_sha256(), NULL) ? MOE_OK : MOE_ENOMEM;
    size_t n;
    while (rc == MOE_OK && (n = fread(buf, 1, cap, f)) > 0)
        if (!EVP_DigestUpdate(c, buf, n)) rc = MOE_ENOMEM;
    if (rc == MOE_OK && ferror(f)) rc = MOE_EIO;
    unsigned char md[32];
    unsigned int len = 0;
    if (rc == MOE_OK && !EVP_DigestFinal_ex(c, md, &len)) rc = MOE_ENOMEM;
    if (rc == MOE_OK) {
        for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
        hex[64] = 0;
    }
    EVP_MD_CTX_free(c);
    free(buf);
    fclose(f);
    return rc;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void moe_rng_seed(moe_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t moe_rng_next(moe_rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl64(s[3], 45);
    return result;
}

double moe_rng_uniform(moe_rng *r) { return (double)(moe_rng_next(r) >> 11) * 0x1.0p-53; }

double moe_rng_normal(moe_rng *r) {
    double u1 = moe_rng_uniform(r), u2 = moe_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
