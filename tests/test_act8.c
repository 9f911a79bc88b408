/* test_act8.c — the 8-bit activation path (flag act_q8; contract and
 * layouts in src/quant/act8_ref.c), for every weight format with it
 * (moe_type_has_a8: Q8_0, NVFP4, MXFP4, Q4_0, Q4_K, Q6_K).
 *  (a) every ISA level this CPU runs: gemv_a8 / gemm_a8 on a8-repacked rows
 *      give the same bits as moe_a8_dot_ref on the plain rows (a NaN must be
 *      matched by a NaN, whose payload is not part of the contract: see
 *      same_out), over row lengths with partial last groups of 1..15 blocks
 *      (NVFP4: 2..14; K-quants: 8, one super-block), whole groups and whole
 *      groups + a partial one, 1..8 rows, 1..5 tokens (the 4-bit formats and
 *      K-quants also the panel GEMMs' shapes: up to 9 rows, 130 tokens, n
 *      8448, partial last groups of 1, 7, 8, 9, 15 blocks), odd strides, with
 *      random weights from moe_quantize_row plus crafted blocks (Q8_0: qw =
 *      -128; 4-bit: all 16 codes, the extreme codes +-12 / 0 / 15
 *      everywhere, code 8 = "-0"; Q6_K: codes 0, 63, 32, all 64; zero
 *      blocks; scales: subnormal / Inf / NaN / -0 f16 (Q4_K: d and dmin),
 *      every UE4M3 and E8M0 byte including 0x00, 0x7F, 0x80, 0xFF, any
 *      Q4_K scale/min bytes, Q6_K scales -128 / 127 / 0 / any) and activations with
 *      zero, Inf, NaN, huge and tiny blocks and all-zero tokens (and A8 rows
 *      edited past what the quantizer writes: NaN / -Inf / negative /
 *      subnormal scales, q = -128); nothing written past nrows; every UE4M3
 *      and E8M0 scale byte on its own (a row whose scales are all that byte,
 *      so a wrong conversion of one byte cannot hide), every 6-bit Q4_K scale
 *      and min and every int8 Q6_K scale at every sub-block position (and on
 *      its own; through the tiles and the panel GEMMs); the largest products;
 *  (b) moe_a8_dot_ref itself: against a direct evaluation of the contract
 *      (this file's own decoding of the formats), and against the FP32 path
 *      (moe_dequant_row, then a double-precision dot with the dequantized
 *      activations q*da) within a rounding bound: the integer sums use the
 *      same weight values (Q4_K: the same d1 c - m1, up to the FP32 path's
 *      rounding of that difference);
 *  (c) moe_quantize_act8 against the specification recomputed here (its own
 *      code: fmaxf, rintf, _Float16), byte for byte, and its error bound;
 *  (d) moe_repack_a8: rows stay row_bytes apart, each row depends only on
 *      its source row, the layout as documented, and the scalar a8 kernel on
 *      repacked rows equals moe_a8_dot_ref on plain rows;
 *  (e) any row range [r0, r1) and token range [t0, t1) of a product gives
 *      the same bits as the same entries of the whole product (how rows or
 *      tokens are split across threads or batches cannot matter). */
#include "check.h"
#include "quant/quant.h"
#include "base/util.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define NMAX 8704  /* the longest row tested (8448, past the panel buffer) rounded up to whole groups of 512 */
#define GB A8_GROUP_BYTES

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
static long g_outputs[MOE_T_COUNT][3]; /* reference outputs compared, per format: finite, infinite, NaN */
static bool same_out(float got, float want) {
    if (same_bits(got, want)) return true;
    if (isnan(got) && isnan(want)) { g_nan_payload_diffs++; return true; }
    return false;
}

static const moe_kernels *g_isa[MOE_ISA_COUNT]; /* NULL: this CPU lacks the level */

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))
/* The formats of the act_q8 path. */
static const uint32_t FORMATS[] = {MOE_T_Q8_0, MOE_T_NVFP4, MOE_T_MXFP4, MOE_T_Q4_0, MOE_T_Q4_K, MOE_T_Q6_K};
static const char *tname(uint32_t type) { return moe_type_get(type)->name; }
static size_t rbytes(uint32_t type, int64_t n) { return (size_t)moe_row_bytes(type, (uint64_t)n); }

/* ---- this file's own reading of the formats (quant_ref.c's bit layouts) ---- */

static const int KV[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
#ifdef __FLT16_MAX__ /* the compiler's _Float16: conversions independent of the library's */
static float f16(const uint8_t *p) { _Float16 h; memcpy(&h, p, 2); return (float)h; }
static float round_f16(float x) { return (float)(_Float16)x; }
#else /* clang < 15 has no _Float16 on x86: the library's conversions (less independent) */
static float f16(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return moe_f16_to_f32(h); }
static float round_f16(float x) { return moe_f16_to_f32(moe_f32_to_f16(x)); }
#endif
/* ggml_ue4m3_to_fp32 / 2: only the byte 0x7F is 0 besides e = m = 0; bit 7 ignored otherwise */
static float ue4m3_half(uint8_t b) {
    if (b == 0x7F) return 0.0f;
    const int e = (b >> 3) & 15, m = b & 7;
    return e == 0 ? ldexpf((float)m, -10) : ldexpf((float)(8 + m), e - 11);
}
static float e8m0_half(uint8_t e) { return ldexpf(1.0f, (int)e - 128); }

/* ggml's get_scale_min_k4: 6-bit scale and min of Q4_K sub-block j from the 12 packed bytes. */
static void k4_scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) { *sc = q[j] & 63; *m = q[j + 4] & 63; }
    else { *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4); *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
}
/* The inverse (ggml's packing in quantize_row_q4_K): sc[8], m[8] (0..63) -> 12 bytes. */
static void k4_pack(const int sc[8], const int m[8], uint8_t q[12]) {
    memset(q, 0, 12);
    for (int j = 0; j < 8; j++) {
        if (j < 4) { q[j] = (uint8_t)sc[j]; q[j + 4] = (uint8_t)m[j]; }
        else {
            q[j + 4] = (uint8_t)((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
            q[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            q[j] |= (uint8_t)((m[j] >> 4) << 6);
        }
    }
}

/* Q6_K: the 6-bit code (0..63) of value v (0..255) of a super-block, as
 * quant_ref.c documents the layout: half f = v / 128 uses ql[64f..], qh[32f..];
 * g = (v % 128) / 32, l = v % 32: low 4 bits from ql[64f + l] (g = 0 low
 * nibble, g = 2 high) or ql[64f + l + 32] (g = 1 low, g = 3 high), high 2
 * bits (qh[32f + l] >> 2g) & 3. */
static int k6_code(const uint8_t *sb, int v) {
    const int f = v / 128, g = (v % 128) / 32, l = v % 32;
    const uint8_t byte = sb[64 * f + l + (g % 2 ? 32 : 0)];
    const int lo = g < 2 ? byte & 15 : byte >> 4;
    return lo | ((sb[128 + 32 * f + l] >> (2 * g)) & 3) << 4;
}
/* ... and the inverse: sets value v's code to c in ql/qh. */
static void k6_set(uint8_t *sb, int v, int c) {
    const int f = v / 128, g = (v % 128) / 32, l = v % 32;
    uint8_t *byte = &sb[64 * f + l + (g % 2 ? 32 : 0)], *hb = &sb[128 + 32 * f + l];
    *byte = g < 2 ? (uint8_t)((*byte & 0xF0) | (c & 15)) : (uint8_t)((*byte & 0x0F) | (c & 15) << 4);
    *hb = (uint8_t)((*hb & ~(3 << (2 * g))) | ((c >> 4) & 3) << (2 * g));
}

/* Block b (32 values) of a plain row: integer weights wq[k] and the scale of
 * each part (NVFP4: 2 halves of 16 values; the others: 1 part). Q4_K: wq =
 * the codes 0..15, sc[0] = d1 = d * sc_j, *mn = m1 = dmin * m_j (the weight
 * is d1 * c - m1); *mn = 0 for the other formats. */
static int spec_block_m(uint32_t type, const uint8_t *row, int64_t b, int wq[32], float sc[2], float *mn) {
    *mn = 0.0f;
    switch (type) {
    case MOE_T_Q6_K: { /* halves h = sub-blocks 2j + h; w = (d * sc) * (code - 32) */
        const uint8_t *sb = row + (b / 8) * 210;
        const int j = (int)(b % 8);
        for (int k = 0; k < 32; k++) wq[k] = k6_code(sb, 32 * j + k) - 32;
        for (int h = 0; h < 2; h++) sc[h] = f16(sb + 208) * (float)(int8_t)sb[192 + 2 * j + h];
        return 2;
    }
    case MOE_T_Q4_K: {
        const uint8_t *sb = row + (b / 8) * 144;
        const int j = (int)(b % 8);
        int s6, m6;
        k4_scale_min(j, sb + 4, &s6, &m6);
        for (int k = 0; k < 32; k++) wq[k] = (sb[16 + 32 * (j / 2) + k] >> (4 * (j % 2))) & 15;
        sc[0] = f16(sb) * (float)s6;
        *mn = f16(sb + 2) * (float)m6;
        return 1;
    }
    case MOE_T_Q8_0: {
        const uint8_t *blk = row + b * 34;
        for (int k = 0; k < 32; k++) wq[k] = (int8_t)blk[2 + k];
        sc[0] = f16(blk);
        return 1;
    }
    case MOE_T_Q4_0: case MOE_T_MXFP4: {
        const uint8_t *blk = row + b * (type == MOE_T_Q4_0 ? 18 : 17), *qs = blk + (type == MOE_T_Q4_0 ? 2 : 1);
        for (int k = 0; k < 16; k++) {
            const int lo = qs[k] & 15, hi = qs[k] >> 4;
            wq[k] = type == MOE_T_Q4_0 ? lo - 8 : KV[lo];
            wq[k + 16] = type == MOE_T_Q4_0 ? hi - 8 : KV[hi];
        }
        sc[0] = type == MOE_T_Q4_0 ? f16(blk) : e8m0_half(blk[0]);
        return 1;
    }
    case MOE_T_NVFP4: { /* sub-block s of the 64-block: qs[8s + j] = values 16s + j (low), 16s + j + 8 (high) */
        const uint8_t *blk = row + (b / 2) * 36;
        for (int h = 0; h < 2; h++) {
            const int s = 2 * (int)(b % 2) + h;
            for (int j = 0; j < 8; j++) {
                wq[16 * h + j] = KV[blk[4 + 8 * s + j] & 15];
                wq[16 * h + j + 8] = KV[blk[4 + 8 * s + j] >> 4];
            }
            sc[h] = ue4m3_half(blk[s]);
        }
        return 2;
    }
    default: return 0;
    }
}

/* Edge cases that make a whole dot product Inf or NaN (an Inf or NaN scale,
 * an Inf or huge activation block) are drawn about once per five rows, so
 * that most outputs stay finite and the others still compare bits. */
static bool poison(int64_t nb) { return rnd32() % (uint32_t)(5 * nb) == 0; }

/* ---- inputs -------------------------------------------------------------------- */

/* An f16 scale the quantizer never writes: subnormal, max, -0, sometimes Inf / NaN. */
static bool edge_f16(uint8_t *p, uint32_t r, int64_t nb) {
    bool done = true;
    if (r < 5) put16(p, (uint16_t)((rnd32() & 0x8000) | (1 + rnd32() % 0x3FF))); /* subnormal */
    else if (r < 7) put16(p, 0x7BFF);                                      /* f16 max */
    else if (r < 9) put16(p, 0x8000);                                      /* -0 */
    else done = false;
    if (poison(nb)) {
        if (rnd32() % 2) put16(p, (uint16_t)(0x7C00 | (rnd32() & 0x8000))); /* +-Inf */
        else {                                                              /* NaN, several payloads */
            static const uint16_t nans[] = {0x7E00, 0xFE00, 0x7C01, 0x7F3A, 0xFD55};
            put16(p, nans[rnd32() % 5]);
        }
        done = true;
    }
    return done;
}

/* A scale byte for UE4M3 / E8M0: crafted values and any byte. */
static uint8_t edge_byte(uint32_t type) {
    static const uint8_t ue[] = {0x00, 0x7F, 0x80, 0xFF, 0x01, 0x07, 0x81, 0x87, 0x08, 0x7E, 0xFE, 0x38, 0x40};
    static const uint8_t e8[] = {0, 1, 2, 3, 126, 127, 128, 129, 200, 253, 254, 255};
    const uint32_t r = rnd32() % 3;
    if (r == 0) return (uint8_t)rnd32();
    return type == MOE_T_NVFP4 ? ue[rnd32() % COUNT(ue)] : e8[rnd32() % COUNT(e8)];
}

/* 4-bit codes of a block region (nbytes packed bytes): crafted patterns. */
static void edge_codes(uint8_t *qs, int nbytes, uint32_t r) {
    static const uint8_t fill[] = {0x77, 0xFF, 0x88, 0x00, 0x7F, 0xF7, 0x80}; /* +12, -12, code 8, code 0, ... */
    if (r < 3) for (int i = 0; i < nbytes; i++) qs[i] = (uint8_t)rnd32();       /* all 16 codes */
    else if (r < 5) memset(qs, fill[rnd32() % COUNT(fill)], (size_t)nbytes);
    else if (r < 6) for (int i = 0; i < nbytes; i++) qs[i] = (uint8_t)((i % 16) | ((15 - i % 16) << 4));
}

/* A plain (file-layout) row: moe_quantize_row of random values with a
 * per-block magnitude; with `edges`, some blocks get crafted codes and
 * scales the quantizer never writes. */
static void make_row(uint32_t type, uint8_t *row, int64_t n, bool edges) {
    static float x[NMAX];
    for (int64_t b = 0; b < n / 32; b++) {
        const float mag = powf(10.0f, (float)(int)(rnd32() % 5) - 2.0f);
        for (int k = 0; k < 32; k++) x[b * 32 + k] = rndf() * mag;
    }
    moe_quantize_row(type, x, row, n);
    if (!edges) return;
    const int64_t nb = n / 32;
    switch (type) {
    case MOE_T_Q8_0:
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = row + b * 34;
            const uint32_t r = rnd32() % 100;
            if (r < 4) memset(blk + 2, 0x80, 32);                                     /* every qw = -128 */
            else if (r < 8) for (int k = 0; k < 32; k++) blk[2 + k] = rnd32() % 3 ? (uint8_t)rnd32() : 0x80;
            else if (r < 11) memset(blk, 0, 34);                                      /* zero block */
            edge_f16(blk, rnd32() % 100, nb);
        }
        break;
    case MOE_T_Q4_0:
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = row + b * 18;
            edge_codes(blk + 2, 16, rnd32() % 10);
            if (rnd32() % 30 == 0) memset(blk, 0, 18);
            edge_f16(blk, rnd32() % 100, nb);
        }
        break;
    case MOE_T_MXFP4:
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = row + b * 17;
            edge_codes(blk + 1, 16, rnd32() % 10);
            if (rnd32() % 4 == 0) blk[0] = edge_byte(type);
            /* e >= 230: 2^(e-128) times isum * da overflows; rare, like the other poisons */
            if (blk[0] >= 230 && !poison(nb)) blk[0] = (uint8_t)(blk[0] - 100);
        }
        break;
    case MOE_T_NVFP4:
        for (int64_t b = 0; b < n / 64; b++) {
            uint8_t *blk = row + b * 36;
            for (int s = 0; s < 4; s++) {
                edge_codes(blk + 4 + 8 * s, 8, rnd32() % 10);
                if (rnd32() % 4 == 0) blk[s] = edge_byte(type);
            }
            if (rnd32() % 30 == 0) memset(blk, 0, 36);
        }
        break;
    case MOE_T_Q4_K:
        for (int64_t b = 0; b < n / 256; b++) {
            uint8_t *blk = row + b * 144;
            uint32_t r = rnd32() % 10;
            /* scale/min bytes: any 12 bytes (every 6-bit value of every sub-block
             * over the rows), all ones (sc = m = 63), zeros, one of sc / m 0 */
            if (r < 3) for (int i = 0; i < 12; i++) blk[4 + i] = (uint8_t)rnd32();
            else if (r < 4) memset(blk + 4, 0xFF, 12);
            else if (r < 5) memset(blk + 4, 0, 12);
            else if (r < 6) { int sc[8], m[8]; for (int j = 0; j < 8; j++) { sc[j] = rnd32() % 64; m[j] = j % 2 ? 0 : (int)(rnd32() % 64); } k4_pack(sc, m, blk + 4); }
            for (int c = 0; c < 4; c++) edge_codes(blk + 16 + 32 * c, 32, rnd32() % 10);
            if (rnd32() % 30 == 0) memset(blk, 0, 144);
            edge_f16(blk, rnd32() % 100, n / 32);       /* d */
            edge_f16(blk + 2, rnd32() % 100, n / 32);   /* dmin */
        }
        break;
    case MOE_T_Q6_K:
        for (int64_t b = 0; b < n / 256; b++) {
            uint8_t *blk = row + b * 210;
            uint32_t r = rnd32() % 10;
            /* codes: any (all 64), all 0 (-32), all 63 (+31), 32 (0), alternating extremes */
            if (r < 2) for (int i = 0; i < 192; i++) blk[i] = (uint8_t)rnd32();
            else if (r < 3) memset(blk, 0x00, 192);
            else if (r < 4) memset(blk, 0xFF, 192);
            else if (r < 5) for (int v = 0; v < 256; v++) k6_set(blk, v, 32);
            else if (r < 6) for (int v = 0; v < 256; v++) k6_set(blk, v, v % 3 ? 63 : 0);
            /* scales: any int8 (-128 included), the extremes, 0 */
            r = rnd32() % 10;
            if (r < 3) for (int i = 0; i < 16; i++) blk[192 + i] = (uint8_t)rnd32();
            else if (r < 4) for (int i = 0; i < 16; i++) blk[192 + i] = i % 2 ? 0x80 : 0x7F;
            else if (r < 5) blk[192 + rnd32() % 16] = 0;
            if (rnd32() % 30 == 0) memset(blk, 0, 210);
            edge_f16(blk + 208, rnd32() % 100, n / 32);
        }
        break;
    default: break;
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

/* Recomputes block j's derived fields (corr, hsum) from its q. */
static void rederive(uint8_t *g, int j) {
    int32_t hs[2] = {0, 0};
    for (int k = 0; k < 32; k++) hs[k / 16] += (int8_t)g[(k / 4) * 64 + j * 4 + k % 4];
    const int32_t corr = -128 * (hs[0] + hs[1]);
    memcpy(g + 512 + 4 * j, &corr, 4);
    memcpy(g + 640 + 4 * j, &hs[0], 4);
    memcpy(g + 704 + 4 * j, &hs[1], 4);
}

/* The A8 row edited beyond what moe_quantize_act8 writes, still a valid
 * kernel input: a block's scale set to NaN (several payloads), -Inf, a
 * negative or subnormal float, or some q set to -128 (corr and hsum
 * recomputed; moe_a8_dot_ref reads neither). */
static void edit_a8(uint8_t *xa, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        uint8_t *g = xa + (b / A8_G) * GB;
        const int j = (int)(b % A8_G);
        const uint32_t r = rnd32() % 100;
        float da;
        if (poison(n / 32)) {
            static const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7FC12345u, 0xFFD00001u};
            da = rnd32() % 3 ? from_bits(nans[rnd32() % 4]) : -INFINITY;
        } else if (r < 7) da = -0.37f;
        else if (r < 9) da = 1e-41f;
        else if (r < 12) {
            for (int k = 0; k < 32; k++)
                if (rnd32() % 4 == 0) g[(k / 4) * 64 + j * 4 + k % 4] = 0x80;
            rederive(g, j);
            continue;
        } else continue;
        memcpy(g + 576 + 4 * j, &da, 4);
    }
}

/* ---- (a) SIMD == reference ------------------------------------------------------- */

/* partial last groups of 1, 2, 3, 8, 9 and 15 blocks, whole groups, and a whole group + 9 */
/* + gpt-oss's n_embd 2880 (90 blocks: 5 whole groups + 10) and 2912 (91) */
static const int64_t NS32[] = {32, 64, 96, 256, 288, 480, 512, 544, 800, 1024, 2048, 2880, 2912};
/* NVFP4 (n % 64 == 0): partial groups of 2, 4, 6, 8, 14 blocks, whole groups, whole + 2 / 8 / 14, 2880 */
static const int64_t NS64[] = {64, 128, 192, 256, 448, 512, 576, 768, 960, 1024, 2048, 2880};
static const int64_t ROWS[] = {1, 2, 3, 5, 8};
/* 4 and 8 tokens: the AVX2 Q8_0 2 x 4 tile where the words fit; 5, 7, 9: the 4x2 tile again */
static const int64_t TOKS[] = {1, 2, 3, 4, 5, 7, 8, 9};
/* Q4_K, Q6_K (n % 256 == 0): a partial group of 8 blocks alone, whole groups, whole + 8 */
static const int64_t NS256[] = {256, 512, 768, 1024, 1280, 1536, 1792, 2048};
static const int64_t *ns_for(uint32_t type, int *count) {
    if (type == MOE_T_Q4_K || type == MOE_T_Q6_K) { *count = COUNT(NS256); return NS256; }
    if (type == MOE_T_NVFP4) { *count = COUNT(NS64); return NS64; }
    *count = COUNT(NS32);
    return NS32;
}

static int g_mismatch_reports;
static void report(uint32_t type, const char *isa, const char *kind, int64_t n, int64_t nrows, int64_t ntok,
                   int mode, int64_t r, int64_t t, float got, float want) {
    if (g_mismatch_reports++ < 20)
        fprintf(stderr, "  %s %s %s n=%lld rows=%lld tokens=%lld mode=%d: row %lld token %lld: %a (0x%08x) != ref %a (0x%08x)\n",
                tname(type), isa, kind, (long long)n, (long long)nrows, (long long)ntok, mode, (long long)r,
                (long long)t, got, bits(got), want, bits(want));
}

/* Runs every ISA's gemm_a8 and gemv_a8 on the rows `plain` (repacked here)
 * against the A8 rows xa and compares with moe_a8_dot_ref; rb: the repacked
 * rows' stride (>= the row's bytes), xs: the A8 rows' stride. */
static void compare_all(uint32_t type, const uint8_t *plain, int64_t nrows, const uint8_t *xa, size_t xs,
                        int64_t ntok, int64_t n, size_t rb, int mode, const char *what) {
    const size_t rb0 = rbytes(type, n);
    const size_t ys = (size_t)nrows + 3;
    /* exactly as long as the data: a read past the last row is an ASan error */
    uint8_t *wa = malloc(rb * (size_t)(nrows - 1) + rb0);
    float *want = malloc(sizeof(float) * ys * (size_t)ntok), *got = malloc(sizeof(float) * ys * (size_t)ntok);
    float *yv = malloc(sizeof(float) * ((size_t)nrows + 1));
    if (rb == rb0) moe_repack_a8(type, plain, wa, nrows, n);
    else for (int64_t r = 0; r < nrows; r++) moe_repack_a8(type, plain + r * rb0, wa + r * rb, 1, n);
    const float sentinel = from_bits(0x7F812345u); /* a signalling NaN no kernel writes */
    for (size_t i = 0; i < ys * (size_t)ntok; i++) want[i] = sentinel;
    for (int64_t t = 0; t < ntok; t++)
        for (int64_t r = 0; r < nrows; r++) {
            const float v = moe_a8_dot_ref(type, plain + r * rb0, xa + t * xs, n);
            want[t * ys + r] = v;
            g_outputs[type][isfinite(v) ? 0 : isinf(v) ? 1 : 2]++;
        }
    for (int l = 0; l < MOE_ISA_COUNT; l++) {
        const moe_kernels *k = g_isa[l];
        if (!k) continue;
        /* gemm */
        for (size_t i = 0; i < ys * (size_t)ntok; i++) got[i] = sentinel;
        k->gemm_a8[type](wa, rb, nrows, xa, xs, ntok, got, ys, n);
        int bad = 0;
        for (int64_t t = 0; t < ntok; t++)
            for (int64_t r = 0; r < (int64_t)ys; r++)
                if (!(r < nrows ? same_out(got[t * ys + r], want[t * ys + r]) : same_bits(got[t * ys + r], want[t * ys + r]))) {
                    bad++;
                    report(type, k->name, r < nrows ? "gemm" : "gemm (wrote past nrows)", n, nrows, ntok, mode, r, t,
                           got[t * ys + r], want[t * ys + r]);
                }
        CHECK_MSG(bad == 0, "%s %s %s gemm_a8 n=%lld rows=%lld tokens=%lld mode=%d: %d outputs differ", what,
                  tname(type), k->name, (long long)n, (long long)nrows, (long long)ntok, mode, bad);
        /* gemv, token by token */
        bad = 0;
        for (int64_t t = 0; t < ntok; t++) {
            yv[nrows] = sentinel;
            k->gemv_a8[type](wa, rb, nrows, xa + t * xs, yv, n);
            for (int64_t r = 0; r <= nrows; r++)
                if (!(r < nrows ? same_out(yv[r], want[t * ys + r]) : same_bits(yv[r], sentinel))) {
                    bad++;
                    report(type, k->name, r < nrows ? "gemv" : "gemv (wrote past nrows)", n, nrows, ntok, mode, r, t,
                           yv[r], r < nrows ? want[t * ys + r] : sentinel);
                }
        }
        CHECK_MSG(bad == 0, "%s %s %s gemv_a8 n=%lld rows=%lld tokens=%lld mode=%d: %d outputs differ", what,
                  tname(type), k->name, (long long)n, (long long)nrows, (long long)ntok, mode, bad);
    }
    free(wa); free(want); free(got); free(yv);
}

/* mode bit 0: crafted weight blocks; bit 1: crafted activations; bit 2: the A8 rows edited. */
static void check_shape(uint32_t type, int64_t n, int64_t nrows, int64_t ntok, int mode, int variant) {
    const size_t rb0 = rbytes(type, n);
    const size_t rb = rb0 + (variant & 1 ? 7 : 0);               /* odd row stride */
    const size_t ab = (size_t)moe_act8_row_bytes(n);
    const size_t xs = ab + (variant & 2 ? 68 : 0);               /* A8 rows not 64-byte apart */
    uint8_t *plain = malloc(rb0 * (size_t)nrows);
    uint8_t *xa = malloc(xs * (size_t)(ntok - 1) + ab);          /* a read past the last token: an ASan error */
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t r = 0; r < nrows; r++) make_row(type, plain + r * rb0, n, mode & 1);
    for (int64_t t = 0; t < ntok; t++) {
        make_x(x, n, mode & 2);
        if ((mode & 2) && t == 1) memset(x, 0, sizeof(float) * (size_t)n); /* an all-zero token */
        moe_quantize_act8(x, xa + t * xs, n);
        if (mode & 4) edit_a8(xa + t * xs, n);
    }
    compare_all(type, plain, nrows, xa, xs, ntok, n, rb, mode, "shape");
    free(plain); free(xa); free(x);
}

/* Every scale byte (UE4M3 for NVFP4, E8M0 for MXFP4) on its own: rows whose
 * scales are all that byte, positive codes and activations (every product
 * has the same sign: a wrong scale value changes the result), da = 1
 * (amax 127) and da = 2^-20 (an f16 subnormal; with it e = 255 stays finite),
 * in a whole group and a partial one (n = 576: 16 + 2 blocks). Q4_0's f16
 * scales are converted by vcvtph2ps, exact for every input, and take the
 * random and crafted values above. */
static void check_scale_bytes(uint32_t type) {
    if (type != MOE_T_NVFP4 && type != MOE_T_MXFP4) return;
    const int64_t n = 576, nrows = 256, ntok = 4; /* tokens 2, 3: as 0, 1 */
    const size_t rb = rbytes(type, n), ab = (size_t)moe_act8_row_bytes(n);
    uint8_t *plain = malloc(rb * nrows), *xa = malloc(ab * ntok);
    float x[576];
    for (int64_t r = 0; r < nrows; r++) {
        uint8_t *row = plain + r * rb;
        for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)(0x11 * (1 + rnd32() % 7)); /* codes 1..7: kv 1..12 */
        if (type == MOE_T_NVFP4) for (int64_t b = 0; b < n / 64; b++) memset(row + b * 36, (int)r, 4);
        else for (int64_t b = 0; b < n / 32; b++) row[b * 17] = (uint8_t)r;
    }
    for (int t = 0; t < ntok; t++) {
        for (int i = 0; i < n; i++) x[i] = (float)(1 + (i * 7 + t) % 127);
        for (int b = 0; b < n / 32; b++) x[b * 32 + b % 32] = 127.0f;             /* amax 127: da = 1 */
        if (t & 1) for (int i = 0; i < n; i++) x[i] *= 0x1p-20f;                   /* da = 2^-20 */
        moe_quantize_act8(x, xa + t * ab, n);
    }
    float da0, da1;
    memcpy(&da0, xa + 576, 4);
    memcpy(&da1, xa + ab + 576, 4);
    CHECK_MSG(da0 == 1.0f && da1 == 0x1p-20f, "scale-byte rows: da %a %a", da0, da1);
    compare_all(type, plain, nrows, xa, ab, 2, n, rb, 0, "every scale byte");            /* the tiles */
    compare_all(type, plain, nrows, xa, ab, ntok, n, rb, 0, "every scale byte (panel)"); /* the panel GEMM */
    /* and the reference's values: byte 0x7F and (NVFP4) 0x00 / 0x80 give 0, others not */
    for (int64_t r = 0; r < nrows; r++) {
        const float v = moe_a8_dot_ref(type, plain + r * rb, xa, n);
        const bool zero = type == MOE_T_NVFP4 && (r == 0x00 || r == 0x7F || r == 0x80);
        CHECK_MSG(zero ? v == 0.0f : v > 0.0f, "%s scale byte 0x%02x: %a", tname(type), (unsigned)r, v);
    }
    free(plain); free(xa);
}

/* Q4_K: every 6-bit scale and min value at every sub-block position, and
 * the packing's high bits. Rows 64v + r (r < 64): super-block s has sc_j =
 * (r + 9j + 17s) % 64 and m_j = (r + 5j + 11s) % 64; variant v = 0: d = 1,
 * dmin = 0 (the scales alone: with positive codes and activations every
 * block's term is positive, so a wrong scale shows), v = 1: d = 0, dmin = 1
 * (the mins alone, every term negative), v = 2: both (d = 1, dmin = 0.5).
 * n = 768: a whole group (two super-blocks in one vector) and a partial one;
 * da = 1 and 2^-20. */
static void check_q4k_scales(void) {
    const uint32_t type = MOE_T_Q4_K;
    const int64_t n = 768, nrows = 192, ntok = 2;
    const size_t rb = rbytes(type, n), ab = (size_t)moe_act8_row_bytes(n);
    uint8_t *plain = malloc(rb * nrows), *xa = malloc(ab * ntok);
    float x[768];
    for (int64_t r = 0; r < nrows; r++) {
        const int v = (int)(r / 64), rr = (int)(r % 64);
        for (int s8 = 0; s8 < 3; s8++) {
            uint8_t *blk = plain + r * rb + s8 * 144;
            int sc[8], m[8];
            for (int j = 0; j < 8; j++) { sc[j] = (rr + 9 * j + 17 * s8) % 64; m[j] = (rr + 5 * j + 11 * s8) % 64; }
            put16(blk, v == 1 ? 0x0000 : 0x3C00);
            put16(blk + 2, v == 0 ? 0x0000 : v == 1 ? 0x3C00 : 0x3800);
            k4_pack(sc, m, blk + 4);
            for (int i = 0; i < 128; i++) blk[16 + i] = (uint8_t)(0x11 * (1 + rnd32() % 15)); /* codes 1..15 */
            int s6, m6;                                                                       /* the packing round-trips */
            for (int j = 0; j < 8; j++) {
                k4_scale_min(j, blk + 4, &s6, &m6);
                CHECK_MSG(s6 == sc[j] && m6 == m[j], "k4_pack sub-block %d: %d %d != %d %d", j, s6, m6, sc[j], m[j]);
            }
        }
    }
    for (int t = 0; t < ntok; t++) {
        for (int i = 0; i < n; i++) x[i] = (float)(1 + (i * 7 + t) % 127);
        for (int b = 0; b < n / 32; b++) x[b * 32 + b % 32] = 127.0f;             /* amax 127: da = 1 */
        if (t & 1) for (int i = 0; i < n; i++) x[i] *= 0x1p-20f;                   /* da = 2^-20 */
        moe_quantize_act8(x, xa + t * ab, n);
    }
    compare_all(type, plain, nrows, xa, ab, ntok, n, rb, 0, "every Q4_K scale and min");
    for (int64_t r = 0; r < nrows; r++) {
        const float v = moe_a8_dot_ref(type, plain + r * rb, xa, n);
        CHECK_MSG(r < 64 ? v > 0.0f : r < 128 ? v < 0.0f : isfinite(v), "Q4_K scale row %lld: %a", (long long)r, v);
    }
    free(plain); free(xa);
}

/* Q6_K: every int8 scale, on its own (rows r < 256: every scale of the row
 * is the byte r, so the result has the sign of (int8)r, 0 for r = 0) and
 * at every sub-block position (rows 256 + r: sc_i of super-block s is
 * (r + 37 i + 101 s) & 255); codes 33..63 (values 1..31), d = 1, positive
 * activations with da = 1 and 2^-20; n = 768 (a whole group and a partial one). */
static void check_q6k_scales(void) {
    const uint32_t type = MOE_T_Q6_K;
    const int64_t n = 768, nrows = 512, ntok = 2;
    const size_t rb = rbytes(type, n), ab = (size_t)moe_act8_row_bytes(n);
    uint8_t *plain = malloc(rb * nrows), *xa = malloc(ab * ntok);
    float x[768];
    for (int64_t r = 0; r < nrows; r++)
        for (int s8 = 0; s8 < 3; s8++) {
            uint8_t *blk = plain + r * rb + s8 * 210;
            for (int v = 0; v < 256; v++) k6_set(blk, v, 33 + (int)(rnd32() % 31));
            for (int i = 0; i < 16; i++) blk[192 + i] = (uint8_t)(r < 256 ? r : (r + 37 * i + 101 * s8) & 255);
            put16(blk + 208, 0x3C00);
        }
    for (int t = 0; t < ntok; t++) {
        for (int i = 0; i < n; i++) x[i] = (float)(1 + (i * 7 + t) % 127);
        for (int b = 0; b < n / 32; b++) x[b * 32 + b % 32] = 127.0f;             /* amax 127: da = 1 */
        if (t & 1) for (int i = 0; i < n; i++) x[i] *= 0x1p-20f;                   /* da = 2^-20 */
        moe_quantize_act8(x, xa + t * ab, n);
    }
    compare_all(type, plain, nrows, xa, ab, ntok, n, rb, 0, "every Q6_K scale");
    for (int64_t r = 0; r < 256; r++) {
        const float v = moe_a8_dot_ref(type, plain + r * rb, xa, n);
        const int sc = (int8_t)r;
        CHECK_MSG(sc == 0 ? v == 0.0f : sc > 0 ? v > 0.0f : v < 0.0f, "Q6_K scale byte 0x%02x: %a", (unsigned)r, v);
    }
    free(plain); free(xa);
}

/* The largest products: the extreme weights against every q = -127 / +127
 * (and the edited -128), n = 544 / 576 / 768 (a whole group and a partial
 * one). */
static void check_extremes(uint32_t type) {
    const int64_t n = type == MOE_T_Q4_K || type == MOE_T_Q6_K ? 768 : type == MOE_T_NVFP4 ? 576 : 544;
    const size_t rb = rbytes(type, n), ab = (size_t)moe_act8_row_bytes(n);
    uint8_t *row = malloc(rb), *xa = malloc(ab);
    float x[768];
    for (int variant = 0; variant < 2; variant++) {
        /* variant 0: the weight of largest magnitude; 1: the most negative */
        switch (type) {
        case MOE_T_Q8_0:
            for (int64_t b = 0; b < n / 32; b++) { put16(row + b * 34, 0x3C00); memset(row + b * 34 + 2, 0x80, 32); }
            break;
        case MOE_T_Q4_0:
            for (int64_t b = 0; b < n / 32; b++) { put16(row + b * 18, 0x3C00); memset(row + b * 18 + 2, 0x00, 16); }
            break;
        case MOE_T_MXFP4:
            for (int64_t b = 0; b < n / 32; b++) { row[b * 17] = 127; memset(row + b * 17 + 1, variant ? 0xFF : 0x77, 16); }
            break;
        case MOE_T_Q4_K: /* d = dmin = 1, sc = m = 63; codes 15 (the largest isum), or 0 (the min term alone) */
            for (int64_t b = 0; b < n / 256; b++) {
                put16(row + b * 144, 0x3C00);
                put16(row + b * 144 + 2, 0x3C00);
                memset(row + b * 144 + 4, 0xFF, 12);
                memset(row + b * 144 + 16, variant ? 0x00 : 0xFF, 128);
            }
            break;
        case MOE_T_Q6_K: /* d = 1, sc = -128; codes 0 (-32) or 63 (+31, the largest u = 63 of the kernels) */
            for (int64_t b = 0; b < n / 256; b++) {
                memset(row + b * 210, variant ? 0xFF : 0x00, 192);
                memset(row + b * 210 + 192, 0x80, 16);
                put16(row + b * 210 + 208, 0x3C00);
            }
            break;
        default:
            for (int64_t b = 0; b < n / 64; b++) { memset(row + b * 36, 0x38, 4); memset(row + b * 36 + 4, variant ? 0xFF : 0x77, 32); }
            break;
        }
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            for (int i = 0; i < n; i++) x[i] = (float)sgn;
            moe_quantize_act8(x, xa, n);
            for (int e = 0; e < 2; e++) {
                if (e) {                                    /* every q = -128 (edited) */
                    for (int64_t b = 0; b < n / 32; b++) {
                        uint8_t *g = xa + (b / 16) * GB;
                        for (int k = 0; k < 32; k++) g[(k / 4) * 64 + (b % 16) * 4 + k % 4] = 0x80;
                        rederive(g, (int)(b % 16));
                    }
                }
                const float want = moe_a8_dot_ref(type, row, xa, n);
                CHECK_MSG(want != 0 && isfinite(want), "%s extremes: %a", tname(type), want);
                compare_all(type, row, 1, xa, ab, 1, n, rb, 0, "extremes");
                compare_all(type, row, 1, xa, 0, 4, n, rb, 0, "extremes (panel)"); /* 4 tokens, the same row */
            }
        }
    }
    free(row); free(xa);
}

static void test_kernels_match(void) {
    int shapes = 0;
    for (int fi = 0; fi < COUNT(FORMATS); fi++) {
        const uint32_t type = FORMATS[fi];
        if (!moe_type_has_a8(type)) continue;
        int nns;
        const int64_t *NS = ns_for(type, &nns);
        for (int ni = 0; ni < nns; ni++)
            for (int ri = 0; ri < COUNT(ROWS); ri++)
                for (int ti = 0; ti < COUNT(TOKS); ti++)
                    for (int mode = 0; mode < 8; mode++) {
                        check_shape(type, NS[ni], ROWS[ri], TOKS[ti], mode, ni + ri + ti + mode);
                        shapes++;
                    }
        /* the panel GEMM (act8_avx512.c, act8_avx2.c; ntok >= 4): panels of 4
         * rows and their tails of 1, 2, 3 rows, token tiles of 3 (AVX2: 2)
         * and their tails inside blocks of 64 tokens, a block's tail, rows'
         * last groups (K-quants: one super-block; MXFP4, Q4_0: 1, 7, 8, 9,
         * 15 blocks; NVFP4: 2, 8, 10, 14), whole groups only, the longest
         * rows the panel buffer holds and rows past it (n > 8192: the tiled
         * driver) */
        static const struct { int64_t n, rows, tok; } PANEL_K[] = {
            {768, 4, 6}, {2048, 7, 7}, {512, 6, 67}, {1280, 9, 130}, {256, 3, 64}, {8192, 5, 4}, {8448, 5, 5}};
        static const struct { int64_t n, rows, tok; } PANEL_32[] = {
            {224, 6, 4}, {544, 7, 8}, {768, 5, 67}, {800, 9, 130}, {1504, 6, 6}, {2048, 4, 65},
            {2880, 7, 66}, {8192, 5, 4}, {8160, 2, 7}, {8448, 5, 5}};
        static const struct { int64_t n, rows, tok; } PANEL_64[] = {
            {256, 6, 4}, {576, 7, 8}, {768, 5, 67}, {960, 9, 130}, {448, 6, 6}, {2048, 4, 65},
            {2880, 7, 66}, {8192, 5, 4}, {8128, 2, 7}, {8448, 5, 5}};
        const bool kq = type == MOE_T_Q4_K || type == MOE_T_Q6_K;
        const int np = type == MOE_T_Q8_0 ? 0 : kq ? COUNT(PANEL_K) : type == MOE_T_NVFP4 ? COUNT(PANEL_64) : COUNT(PANEL_32);
        for (int i = 0; i < np; i++) {
            const int64_t pn = kq ? PANEL_K[i].n : type == MOE_T_NVFP4 ? PANEL_64[i].n : PANEL_32[i].n;
            const int64_t prows = kq ? PANEL_K[i].rows : type == MOE_T_NVFP4 ? PANEL_64[i].rows : PANEL_32[i].rows;
            const int64_t ptok = kq ? PANEL_K[i].tok : type == MOE_T_NVFP4 ? PANEL_64[i].tok : PANEL_32[i].tok;
            for (int mode = 0; mode < 8; mode += 3) {
                check_shape(type, pn, prows, ptok, mode, i + mode);
                shapes++;
            }
        }
        check_scale_bytes(type);
        if (type == MOE_T_Q4_K) check_q4k_scales();
        if (type == MOE_T_Q6_K) check_q6k_scales();
        check_extremes(type);
    }
    printf("act8 kernels: %d shape/mode combinations; reference outputs finite / infinite / NaN:", shapes);
    for (int fi = 0; fi < COUNT(FORMATS); fi++) {
        const long *o = g_outputs[FORMATS[fi]];
        printf(" %s %ld / %ld / %ld%s", tname(FORMATS[fi]), o[0], o[1], o[2], fi + 1 < COUNT(FORMATS) ? "," : ";");
    }
    printf(" %d NaN outputs of a kernel with another payload than the reference (not part of the contract)\n",
           g_nan_payload_diffs);
}

/* ---- (b) the reference: its contract, and the FP32 path's weights ------------------ */

/* The dot product evaluated directly from the plain row (this file's
 * decoding) and the A8 row's q and da, lanes as quant.h. */
static float direct_contract(uint32_t type, const uint8_t *row, const uint8_t *xa, int64_t n) {
    float acc[16] = {0};
    for (int64_t b = 0; b < n / 32; b++) {
        const uint8_t *g = xa + (b / 16) * GB;
        const int j = (int)(b % 16);
        int wq[32];
        float sc[2], mn, da;
        const int parts = spec_block_m(type, row, b, wq, sc, &mn);
        memcpy(&da, g + 576 + 4 * j, 4);
        for (int p = 0; p < parts; p++) {
            int32_t isum = 0;
            for (int k = 32 / parts * p; k < 32 / parts * (p + 1); k++) isum += wq[k] * (int8_t)g[(k / 4) * 64 + j * 4 + k % 4];
            const float S = sc[p] * da;
            acc[j] = fmaf((float)isum, S, acc[j]);
        }
        if (type == MOE_T_Q4_K) { /* then the min term: fmaf(-qsum, m1 * da, acc) */
            int32_t qsum = 0;
            for (int k = 0; k < 32; k++) qsum += (int8_t)g[(k / 4) * 64 + j * 4 + k % 4];
            acc[j] = fmaf(-(float)qsum, mn * da, acc[j]);
        }
    }
    for (int l = 0; l < 8; l++) acc[l] += acc[l + 8];
    for (int l = 0; l < 4; l++) acc[l] += acc[l + 4];
    for (int l = 0; l < 2; l++) acc[l] += acc[l + 2];
    return acc[0] + acc[1];
}

static void test_ref_contract(void) {
    int fp32_rows = 0;
    double worst_of[MOE_T_COUNT] = {0};
    for (int fi = 0; fi < COUNT(FORMATS); fi++) {
        const uint32_t type = FORMATS[fi];
        if (!moe_type_has_a8(type)) continue;
        int nns;
        const int64_t *NS = ns_for(type, &nns);
        for (int ni = 0; ni < nns; ni++) {
            const int64_t n = NS[ni], nb = n / 32;
            static uint8_t row[NMAX / 32 * 34], xa[NMAX / 512 * GB];
            static float x[NMAX], w[NMAX];
            for (int rep = 0; rep < 8; rep++) {
                make_row(type, row, n, rep & 1);
                make_x(x, n, rep & 2);
                moe_quantize_act8(x, xa, n);
                const float want = direct_contract(type, row, xa, n), got = moe_a8_dot_ref(type, row, xa, n);
                /* NaN payloads: the contract leaves them open (docs/KERNELS.md), and
                 * this direct evaluation converts f16 NaNs differently */
                CHECK_MSG(same_bits(got, want) || (isnan(got) && isnan(want)), "%s ref contract n=%lld rep %d: %a != %a",
                          tname(type), (long long)n, rep, got, want);
                /* the FP32 path's weights: sum_k w_k * (q_k * da_b) in double, where
                 * w = moe_dequant_row (exact weight values). Error bound of the
                 * contract's float steps, u = 2^-24: per block part one rounding of
                 * S (u |isum S|) and one of the FMA (u |lane sum so far|), then 4
                 * tree additions: |got - exact| <= u (F + 6) sum |w q da| with F the
                 * FMAs per lane, plus absolute terms where S or a sum is subnormal.
                 * Q4_K: the terms are d1 c q da and -m1 q da (two FMAs per block,
                 * so mag sums (|d1 c| + |m1|) |q| da, which cancellation between
                 * them can make much larger than |w q da|), and the FP32 weight
                 * w = fl(d1 c - m1) is itself rounded: + u sum |w q da|. */
                moe_dequant_row(type, row, w, n);
                double exact = 0, mag = 0, wmag = 0, iabs = 0;
                int parts = 1;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *g = xa + (b / 16) * GB;
                    const int j = (int)(b % 16);
                    int wq[32];
                    float da, sc[2], mn;
                    parts = spec_block_m(type, row, b, wq, sc, &mn);
                    memcpy(&da, g + 576 + 4 * j, 4);
                    for (int k = 0; k < 32; k++) {
                        const int q = (int8_t)g[(k / 4) * 64 + j * 4 + k % 4];
                        const double t = (double)w[b * 32 + k] * ((double)q * da);
                        exact += t;
                        wmag += fabs(t);
                        if (type == MOE_T_Q4_K) {
                            mag += (fabs((double)sc[0] * wq[k]) + fabs((double)mn)) * fabs((double)q * da);
                            iabs += abs(wq[k] * q) + abs(q);
                        } else {
                            mag += fabs(t);
                            iabs += abs(wq[k] * q);
                        }
                    }
                }
                if (type == MOE_T_Q4_K) parts = 2;  /* FMAs per block */
                if (!isfinite(mag) || !isfinite(got)) continue;
                const double F = (double)((nb + 15) / 16 * parts);
                /* absolute: a subnormal S is rounded to 2^-150, which |isum| multiplies */
                const double bound = 0x1p-24 * (F + 6) * mag + (type == MOE_T_Q4_K ? 0x1p-24 * wmag : 0.0) +
                                     0x1p-149 * (iabs + 4.0 * (double)nb * parts);
                const double err = fabs((double)got - exact);
                CHECK_MSG(err <= bound, "%s a8 ref vs FP32 weights n=%lld rep %d: %a vs %a (err %g, bound %g)",
                          tname(type), (long long)n, rep, got, exact, err, bound);
                if (bound > 0 && err / bound > worst_of[type]) worst_of[type] = err / bound;
                fp32_rows++;
            }
        }
    }
    printf("act8 reference: = the contract evaluated directly; = the FP32 weights' dot within the bound "
           "(%d rows; worst error / bound:", fp32_rows);
    for (int fi = 0; fi < COUNT(FORMATS); fi++) printf(" %s %.3f", tname(FORMATS[fi]), worst_of[FORMATS[fi]]);
    printf(")\n");
}

/* ---- (c) moe_quantize_act8 follows its specification ------------------------------ */

/* The specification of act8_ref.c, written again: amax ignores NaN (fmaxf),
 * id = 127/amax or 0, q = round-half-even(x*id) clamped to [-127, 127]
 * (rintf in the default rounding mode), NaN -> 0, corr = -128 * sum q,
 * da = amax/127 rounded to IEEE half, hsum = the sums of values 0..15 and
 * 16..31; absent blocks of the last group are zeros; q of block j, value k
 * at slab k/4, byte 4j + k%4. */
static void spec_act8(const float *x, uint8_t *out, int64_t n) {
    const int64_t nb = n / 32, ng = (nb + 15) / 16;
    memset(out, 0, (size_t)ng * 768);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *g = out + (b / 16) * 768;
        const int j = (int)(b % 16);
        float amax = 0.0f;
        for (int k = 0; k < 32; k++) amax = fmaxf(amax, fabsf(x[b * 32 + k]));
        const float id = amax == 0.0f ? 0.0f : 127.0f / amax;
        int32_t sum = 0, lo = 0;
        for (int k = 0; k < 32; k++) {
            const float v = x[b * 32 + k] * id;
            const int q = isnan(v) ? 0 : (int)rintf(fminf(fmaxf(v, -127.0f), 127.0f));
            g[(k / 4) * 64 + 4 * j + k % 4] = (uint8_t)(int8_t)q;
            sum += q;
            if (k < 16) lo += q;
        }
        const int32_t corr = -128 * sum, hi = sum - lo;
        const float da = round_f16(amax / 127.0f);
        memcpy(g + 512 + 4 * j, &corr, 4);
        memcpy(g + 576 + 4 * j, &da, 4);
        memcpy(g + 640 + 4 * j, &lo, 4);
        memcpy(g + 704 + 4 * j, &hi, 4);
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
        const uint8_t *g = xa + (b / 16) * GB;
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
    static uint8_t got[NMAX / 512 * 768 + 768], want[NMAX / 512 * 768 + 768];
    double worst = 0;
    int rows = 0;
    CHECK_EQ_INT(GB, 768);
    for (int ni = 0; ni < COUNT(QN); ni++) {
        const int64_t n = QN[ni];
        const size_t ab = (size_t)moe_act8_row_bytes(n);
        CHECK_EQ_INT(ab, (size_t)(n / 32 + 15) / 16 * 768);
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
            memset(got, 0xCD, ab + 768);                 /* every byte must be written, none past ab */
            moe_quantize_act8(x, got, n);
            spec_act8(x, want, n);
            size_t first = ab;
            for (size_t i = 0; i < ab; i++) if (got[i] != want[i]) { first = i; break; }
            CHECK_MSG(first == ab, "quantize_act8 n=%lld dist %d: byte %zu (group %zu, offset %zu) = 0x%02x, spec 0x%02x",
                      (long long)n, dist, first, first / 768, first % 768, got[first < ab ? first : 0],
                      want[first < ab ? first : 0]);
            int past = 0;
            for (size_t i = ab; i < ab + 768; i++) past += got[i] != 0xCD;
            CHECK_MSG(past == 0, "quantize_act8 n=%lld wrote %d bytes past its row", (long long)n, past);
            /* every level's quantize_act8: the same bytes, none past the row */
            for (int l = 0; l < MOE_ISA_COUNT; l++) {
                const moe_kernels *k = moe_kernels_for((moe_isa)l);
                if (!k) continue;
                uint8_t *g2 = malloc(ab + 768);
                memset(g2, 0xCD, ab + 768);
                k->quantize_act8(x, g2, n);
                size_t d = ab;
                for (size_t i = 0; i < ab; i++) if (g2[i] != got[i]) { d = i; break; }
                CHECK_MSG(d == ab, "%s quantize_act8 n=%lld dist %d: byte %zu = 0x%02x, spec 0x%02x", k->name,
                          (long long)n, dist, d, g2[d < ab ? d : 0], got[d < ab ? d : 0]);
                int over = 0;
                for (size_t i = ab; i < ab + 768; i++) over += g2[i] != 0xCD;
                CHECK_MSG(over == 0, "%s quantize_act8 n=%lld wrote %d bytes past its row", k->name, (long long)n, over);
                free(g2);
            }
            const int bad = check_bound(x, got, n, &worst);
            CHECK_MSG(bad == 0, "quantize_act8 n=%lld dist %d: %d values outside the bound", (long long)n, dist, bad);
            rows++;
        }
    }
    /* bulk: 64k random blocks over many magnitudes, every level byte for byte
     * (a last-ulp difference in id only shows where x*id lands near .5) */
    {
        const int64_t bn = 2048;
        const size_t bab = (size_t)moe_act8_row_bytes(bn);
        float *bx = malloc(sizeof(float) * (size_t)bn);
        uint8_t *ref = malloc(bab), *alt = malloc(bab);
        int diffs = 0;
        for (int row = 0; row < 1024; row++) {
            for (int64_t i = 0; i < bn; i++)
                bx[i] = (float)moe_rng_normal(&g_rng) * ldexpf(1.0f, (int)(rnd32() % 60) - 30);
            moe_quantize_act8(bx, ref, bn);
            for (int l = 1; l < MOE_ISA_COUNT; l++) {
                const moe_kernels *k = moe_kernels_for((moe_isa)l);
                if (!k) continue;
                k->quantize_act8(bx, alt, bn);
                diffs += memcmp(ref, alt, bab) != 0;
            }
        }
        CHECK_MSG(diffs == 0, "quantize_act8: %d random rows differ from the spec at some level", diffs);
        free(bx); free(ref); free(alt);
    }
    /* spot values of a tie block: worked by hand */
    {
        float v[32] = {127, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f};
        for (int k = 7; k < 32; k++) v[k] = 0;
        v[20] = -3.5f;
        v[31] = NAN;
        moe_quantize_act8(v, got, 32);
        static const int8_t q[7] = {127, 2, 4, -2, 0, 0, 2};
        for (int k = 0; k < 7; k++) CHECK_MSG((int8_t)got[(k / 4) * 64 + k % 4] == q[k], "tie value %d: q=%d, want %d", k,
                                              (int8_t)got[(k / 4) * 64 + k % 4], q[k]);
        CHECK_EQ_INT((int8_t)got[5 * 64 + 0], -4); /* value 20: -3.5 -> -4 */
        CHECK_EQ_INT((int8_t)got[7 * 64 + 3], 0);  /* NaN -> 0 */
        int32_t corr, lo, hi;
        float da;
        memcpy(&corr, got + 512, 4);
        memcpy(&da, got + 576, 4);
        memcpy(&lo, got + 640, 4);
        memcpy(&hi, got + 704, 4);
        CHECK_EQ_INT(corr, -128 * (127 + 2 + 4 - 2 + 2 - 4));
        CHECK_EQ_INT(lo, 127 + 2 + 4 - 2 + 2);
        CHECK_EQ_INT(hi, -4);
        CHECK_MSG(da == 1.0f, "da = %a", da);                   /* 127/127 */
        for (int j = 1; j < 16; j++) {
            memcpy(&corr, got + 512 + 4 * j, 4);
            memcpy(&da, got + 576 + 4 * j, 4);
            memcpy(&lo, got + 640 + 4 * j, 4);
            memcpy(&hi, got + 704 + 4 * j, 4);
            CHECK_MSG(corr == 0 && bits(da) == 0 && lo == 0 && hi == 0, "absent block %d: corr %d da %a hsum %d %d", j,
                      corr, da, lo, hi);
        }
    }
    printf("act8 quantize: %d rows byte-equal to the spec, worst error / bound %.3f (blocks with da > 0)\n", rows, worst);
}

/* ---- (d) moe_repack_a8 --------------------------------------------------------------- */

/* Where the documented a8 layout puts block j's value k (group of gn blocks,
 * G = the group's start): Q8_0 byte (qw ^ 0x80); 4-bit: byte and nibble. */
static size_t layout_code(uint32_t type, int gn, int j, int k, int *hi) {
    if (type == MOE_T_Q8_0) { *hi = 0; return (size_t)(2 * gn + (k / 4) * gn * 4 + j * 4 + k % 4); }
    const size_t scales = (size_t)((type == MOE_T_MXFP4 ? 1 : 2) * gn);   /* Q4_K: gn/8 headers of 16 bytes */
    *hi = k % 8 >= 4;             /* pair k/8 (4 gn bytes), byte 4j + k%4; values 8p+4.. high */
    return scales + (size_t)(4 * gn * (k / 8) + 4 * j + k % 4);
}

/* The codes of block b of a plain 4-bit row, value order (this file's decoding). */
static void plain_codes(uint32_t type, const uint8_t *row, int64_t b, int c[32]) {
    if (type == MOE_T_NVFP4) {
        const uint8_t *blk = row + (b / 2) * 36;
        for (int h = 0; h < 2; h++)
            for (int j = 0; j < 8; j++) {
                const uint8_t v = blk[4 + 8 * (2 * (b % 2) + h) + j];
                c[16 * h + j] = v & 15;
                c[16 * h + j + 8] = v >> 4;
            }
        return;
    }
    if (type == MOE_T_Q4_K) {
        float sc[2], mn;
        spec_block_m(type, row, b, c, sc, &mn);
        return;
    }
    const uint8_t *qs = type == MOE_T_Q4_0 ? row + b * 18 + 2 : row + b * 17 + 1;
    for (int k = 0; k < 16; k++) { c[k] = qs[k] & 15; c[k + 16] = qs[k] >> 4; }
}

/* Layout bytes of block b (j in a group of gn at G) that differ from the documentation. */
static int layout_diffs(uint32_t type, const uint8_t *G, int gn, int j, const uint8_t *plain, int64_t b) {
    int bad = 0;
    if (type == MOE_T_Q8_0) {
        const uint8_t *blk = plain + b * 34;
        bad += G[2 * j] != blk[0] || G[2 * j + 1] != blk[1];
        for (int k = 0; k < 32; k++) {
            int hi;
            bad += G[layout_code(type, gn, j, k, &hi)] != (uint8_t)(blk[2 + k] ^ 0x80);
        }
        return bad;
    }
    if (type == MOE_T_Q6_K) {
        /* d[gn/8], sc[2][gn], then the nibbles where the 4-bit layout puts
         * them, then hi chunk h (4 gn bytes), byte 4j + k%4, bits 2 ((k%16)/4) */
        const uint8_t *sb = plain + (b / 8) * 210;
        const int nsb = gn / 8;
        bad += memcmp(G + 2 * (j / 8), sb + 208, 2) != 0;
        bad += G[2 * nsb + j] != sb[192 + 2 * (j % 8)] || G[2 * nsb + gn + j] != sb[192 + 2 * (j % 8) + 1];
        for (int k = 0; k < 32; k++) {
            const int code = k6_code(sb, 32 * (j % 8) + k);
            int hi;
            const size_t pos = layout_code(MOE_T_Q4_0, gn, j, k, &hi) - 2 * (size_t)gn + 18 * (size_t)nsb;
            bad += ((hi ? G[pos] >> 4 : G[pos] & 15)) != (code & 15);
            const uint8_t hb = G[18 * nsb + 16 * gn + 4 * gn * (k / 16) + 4 * j + k % 4];
            bad += ((hb >> (2 * ((k % 16) / 4))) & 3) != code >> 4;
        }
        return bad;
    }
    switch (type) {
    case MOE_T_NVFP4: { /* sc[h][j]: half h's UE4M3 byte, canonical (bit 7 clear, 0 as 0x00, 480 as 0x7F) */
        const uint8_t *blk = plain + (b / 2) * 36;
        for (int h = 0; h < 2; h++) {
            const uint8_t f = blk[2 * (b % 2) + h], want = f == 0x7F ? 0x00 : f == 0xFF ? 0x7F : (uint8_t)(f & 0x7F);
            bad += G[gn * h + j] != want;
        }
        break;
    }
    case MOE_T_MXFP4: bad += G[j] != plain[b * 17]; break;
    case MOE_T_Q4_K: /* the super-block's 16-byte header, at 16 * (j / 8) */
        bad += memcmp(G + 16 * (j / 8), plain + (b / 8) * 144, 16) != 0;
        break;
    default: bad += G[2 * j] != plain[b * 18] || G[2 * j + 1] != plain[b * 18 + 1]; break;
    }
    int c[32];
    plain_codes(type, plain, b, c);
    for (int k = 0; k < 32; k++) {
        int hi;
        const uint8_t v = G[layout_code(type, gn, j, k, &hi)];
        bad += (hi ? v >> 4 : v & 15) != c[k];
    }
    return bad;
}

static void test_repack(void) {
    static const int64_t RN32[] = {32, 96, 512, 544, 1056}, RN64[] = {64, 448, 512, 576, 1088};
    static const int64_t RN256[] = {256, 512, 768, 1280, 2048};
    for (int fi = 0; fi < COUNT(FORMATS); fi++) {
        const uint32_t type = FORMATS[fi];
        if (!moe_type_has_a8(type)) continue;
        for (int ni = 0; ni < 5; ni++) {
            const int64_t n = type == MOE_T_Q4_K || type == MOE_T_Q6_K ? RN256[ni] : type == MOE_T_NVFP4 ? RN64[ni] : RN32[ni];
            const int64_t nb = n / 32, nrows = 5;
            const size_t rb = rbytes(type, n);
            uint8_t *plain = malloc(rb * nrows), *all = malloc(rb * nrows + 64), *one = malloc(rb);
            uint8_t *xa = malloc((size_t)moe_act8_row_bytes(n));
            float *x = malloc(sizeof(float) * (size_t)n), y[5];
            for (int64_t r = 0; r < nrows; r++) make_row(type, plain + r * rb, n, r & 1);
            memset(all, 0xEE, rb * nrows + 64);
            moe_repack_a8(type, plain, all, nrows, n);
            int past = 0;
            for (size_t i = rb * nrows; i < rb * nrows + 64; i++) past += all[i] != 0xEE;
            CHECK_MSG(past == 0, "%s repack n=%lld wrote %d bytes past nrows*row_bytes", tname(type), (long long)n, past);
            int layout_bad = 0, row_bad = 0;
            for (int64_t r = 0; r < nrows; r++) {
                /* row r alone lands where it does in the whole matrix */
                memset(one, 0xEE, rb);
                moe_repack_a8(type, plain + r * rb, one, 1, n);
                row_bad += memcmp(one, all + r * rb, rb) != 0;
                const uint8_t *R = all + r * rb;
                for (int64_t b = 0; b < nb; b++) {
                    const int64_t g0 = b / 16 * 16;
                    const int gn = (int)(nb - g0 < 16 ? nb - g0 : 16), j = (int)(b - g0);
                    /* a group of 16 blocks at rb * g0 / nb (Q6_K: 210 bytes per 8 blocks) */
                    layout_bad += layout_diffs(type, R + rb * (size_t)g0 / (size_t)nb, gn, j, plain + r * rb, b);
                }
            }
            CHECK_MSG(row_bad == 0, "%s repack n=%lld: %d rows differ when repacked alone", tname(type), (long long)n, row_bad);
            CHECK_MSG(layout_bad == 0, "%s repack n=%lld: %d bytes not where the layout puts them", tname(type),
                      (long long)n, layout_bad);
            /* the scalar a8 kernel on repacked rows = the contract on plain rows */
            for (int rep = 0; rep < 3; rep++) {
                make_x(x, n, rep > 0);
                moe_quantize_act8(x, xa, n);
                if (rep == 2) edit_a8(xa, n);
                g_isa[MOE_ISA_SCALAR]->gemv_a8[type](all, rb, nrows, xa, y, n);
                for (int64_t r = 0; r < nrows; r++) {
                    const float want = moe_a8_dot_ref(type, plain + r * rb, xa, n);
                    CHECK_MSG(same_out(y[r], want), "%s scalar a8 kernel n=%lld row %lld rep %d: %a != ref %a",
                              tname(type), (long long)n, (long long)r, rep, y[r], want);
                }
            }
            free(plain); free(all); free(one); free(xa); free(x);
        }
    }
}

/* ---- (e) row and token splits ------------------------------------------------------------ */

static bool same_run(const float *a, const float *b, int64_t len) {
    bool ok = true;
    for (int64_t i = 0; i < len; i++) ok &= same_out(a[i], b[i]);
    return ok;
}

static void test_splits(uint32_t type) {
    const int64_t n = type == MOE_T_Q4_K || type == MOE_T_Q6_K ? 768 : type == MOE_T_NVFP4 ? 576 : 544, nrows = 11, ntok = 5;
    const size_t rb = rbytes(type, n), xs = (size_t)moe_act8_row_bytes(n);
    uint8_t *plain = malloc(rb * nrows), *wa = malloc(rb * nrows), *xa = malloc(xs * ntok);
    float x[768], yall[5 * 11], ypart[5 * 11], yv[11];
    for (int64_t r = 0; r < nrows; r++) make_row(type, plain + r * rb, n, r % 3 == 0);
    moe_repack_a8(type, plain, wa, nrows, n);
    for (int64_t t = 0; t < ntok; t++) { make_x(x, n, t & 1); moe_quantize_act8(x, xa + t * xs, n); }
    for (int l = 0; l < MOE_ISA_COUNT; l++) {
        const moe_kernels *k = g_isa[l];
        if (!k) continue;
        int bad = 0;
        k->gemm_a8[type](wa, rb, nrows, xa, xs, ntok, yall, nrows, n);
        for (int64_t t = 0; t < ntok; t++) {
            /* whole-matrix gemv = the gemm's column */
            k->gemv_a8[type](wa, rb, nrows, xa + t * xs, yv, n);
            for (int64_t r = 0; r < nrows; r++) bad += !same_out(yv[r], yall[t * nrows + r]);
            for (int64_t r0 = 0; r0 < nrows; r0++)
                for (int64_t r1 = r0 + 1; r1 <= nrows; r1++) {
                    k->gemv_a8[type](wa + r0 * rb, rb, r1 - r0, xa + t * xs, ypart, n);
                    if (!same_run(ypart, yv + r0, r1 - r0)) {
                        if (bad++ < 3) fprintf(stderr, "  %s %s gemv rows [%lld, %lld) token %lld differ\n", tname(type),
                                               k->name, (long long)r0, (long long)r1, (long long)t);
                    }
                }
        }
        /* gemm over a sub-rectangle [r0, r1) x [t0, t1) */
        for (int64_t r0 = 0; r0 < nrows; r0 += 3)
            for (int64_t r1 = r0 + 1; r1 <= nrows; r1 += 2)
                for (int64_t t0 = 0; t0 < ntok; t0++)
                    for (int64_t t1 = t0 + 1; t1 <= ntok; t1++) {
                        k->gemm_a8[type](wa + r0 * rb, rb, r1 - r0, xa + t0 * xs, xs, t1 - t0, ypart, (size_t)nrows, n);
                        for (int64_t t = t0; t < t1; t++)
                            if (!same_run(ypart + (t - t0) * nrows, yall + t * nrows + r0, r1 - r0)) {
                                if (bad++ < 3) fprintf(stderr, "  %s %s gemm rows [%lld, %lld) tokens [%lld, %lld) differ\n",
                                                       tname(type), k->name, (long long)r0, (long long)r1,
                                                       (long long)t0, (long long)t1);
                            }
                    }
        CHECK_MSG(bad == 0, "%s %s: %d row/token splits give other bits than the whole product", tname(type), k->name, bad);
    }
    free(plain); free(wa); free(xa);
}

int main(void) {
    moe_rng_seed(&g_rng, 0xac78);
    /* the formats with the path; every table has their kernels */
    static const uint32_t WITH[] = {MOE_T_Q8_0, MOE_T_NVFP4, MOE_T_MXFP4, MOE_T_Q4_0, MOE_T_Q4_K, MOE_T_Q6_K};
    for (int i = 0; i < COUNT(WITH); i++) CHECK_MSG(moe_type_has_a8(WITH[i]), "%s lacks act_q8", tname(WITH[i]));
    for (uint32_t t = 0; t < MOE_T_COUNT; t++) {
        bool listed = false;
        for (int i = 0; i < COUNT(FORMATS); i++) listed |= FORMATS[i] == t;
        /* tested in test_act8_legacy.c (their own layouts and contract) */
        listed |= t == MOE_T_Q4_1 || t == MOE_T_Q5_0 || t == MOE_T_Q5_1 || t == MOE_T_IQ4_NL;
        /* tested in test_act8_kquant.c */
        listed |= t == MOE_T_Q5_K || t == MOE_T_Q3_K || t == MOE_T_Q2_K || t == MOE_T_IQ4_XS;
        /* tested in test_act8_iq.c */
        listed |= t == MOE_T_IQ2_XXS || t == MOE_T_IQ2_XS || t == MOE_T_IQ2_S || t == MOE_T_IQ3_XXS ||
                  t == MOE_T_IQ3_S || t == MOE_T_IQ1_S || t == MOE_T_IQ1_M;
        if (!listed) CHECK_MSG(!moe_type_has_a8(t), "type %u has act_q8 but is not tested here", t);
    }
    printf("act8 formats:");
    for (int i = 0; i < COUNT(FORMATS); i++) if (moe_type_has_a8(FORMATS[i])) printf(" %s", tname(FORMATS[i]));
    printf("\nact8 levels:");
    for (int l = 0; l < MOE_ISA_COUNT; l++) {
        g_isa[l] = moe_kernels_for((moe_isa)l);
        if (!g_isa[l]) continue;
        bool all = true;
        for (uint32_t t = 0; t < MOE_T_COUNT; t++)
            if (moe_type_has_a8(t)) {
                const bool has = g_isa[l]->gemv_a8[t] && g_isa[l]->gemm_a8[t];
                CHECK_MSG(has, "%s lacks the %s a8 kernels", g_isa[l]->name, tname(t));
                all &= has;
            }
        if (!all) { g_isa[l] = NULL; continue; }
        printf(" %s", g_isa[l]->name);
    }
    printf("\n");
    CHECK(g_isa[MOE_ISA_SCALAR] != NULL);
    if (!g_isa[MOE_ISA_SCALAR]) return check_report("test_act8");
    test_ref_contract();
    test_quantize_spec();
    test_repack();
    test_kernels_match();
    for (int i = 0; i < COUNT(FORMATS); i++) if (moe_type_has_a8(FORMATS[i])) test_splits(FORMATS[i]);
    return check_report("test_act8");
}
