/* iq3_ref.c — the specification of IQ3_XXS, IQ3_S, IQ1_S and IQ1_M: bit
 * layouts (ggml's, byte for byte), dequantization as exact float operations
 * (ggml's dequantize_row_iq3_xxs / iq3_s / iq1_s / iq1_m, value for value),
 * and a quantizer of our own. quant_ref.c's kernels call moe_iq3_dq_block
 * for these types, so the dot-product contract of quant.h applies unchanged
 * (the REF_KERNELS lines there); the SIMD files must form the same values.
 *
 * All multi-byte fields little-endian, f16 converted exactly. Grids:
 * iq3_tables.c. "±" is the sign bit flipped (an exact negation, as ggml's
 * multiplication by -1.f for every non-NaN value).
 *
 * IQ3_XXS (256 values, 98 bytes): f16 d | u8 qs[64] | u32 aux[8].
 *   Sub-block ib (32 values) has aux[ib]: bits 7l..7l+6 (l = 0..3) the sign
 *   code of values 8l..8l+7 (moe_iq_signs: 7 bits + even parity), bits
 *   28..31 the scale s. db = (d * (0.5f + s)) * 0.5f (moe_iq3xxs_db).
 *   Value 32ib + 8l + j: point qs[8ib + 2l + j/4] of iq3xxs_grid, byte j%4 = g;
 *   w = ±(db * (float)g), negated when bit j of the sign code is set.
 * IQ3_S (256 values, 110 bytes): f16 d | u8 qs[64] | u8 qh[8] | u8 signs[32] | u8 scales[4].
 *   Sub-block ib: db = d * (float)(1 + 2 s), s = nibble ib%2 of scales[ib/2].
 *   Value 32ib + 8l + j: point qs[8ib + 2l + j/4] | bit (2l + j/4) of qh[ib]
 *   << 8 (a 9-bit index) of iq3s_grid, byte j%4 = g; w = ±(db * (float)g),
 *   negated when bit j of signs[4ib + l] is set (8 free sign bits).
 * IQ1_S (256 values, 50 bytes): f16 d | u8 qs[32] | u16 qh[8].
 *   Sub-block ib: qh[ib] bits 3l..3l+2 the high bits of group l's index,
 *   bits 12..14 the scale s, bit 15 the sign of delta.
 *   dl = d * (float)(2 s + 1); delta = bit 15 ? -0.125f : 0.125f.
 *   Value 32ib + 8l + j: point qs[4ib + l] | (qh bits 3l..) << 8 of
 *   iq1s_grid, int8 byte j = g in {-1, 0, 1}; w = dl * ((float)g + delta)
 *   (the sum is exact, then one product).
 * IQ1_M (256 values, 56 bytes): u8 qs[32] | u8 qh[16] | u16 sc[4].
 *   d = the f16 whose bits are the top nibbles of sc[0..3] (moe_iq1m_d16).
 *   Sub-block ib: dl_h = d * (float)(2 s_h + 1), s_h = 3 bits at
 *   6 (ib%2) + 3h of sc[ib/2] (moe_iq1m_s); h = 0 for values 0-15, 1 for 16-31.
 *   Group l (8 values) of sub-block ib: byte q = qh[2ib + l/2], nibble
 *   u = l%2 ? q >> 4 : q & 15: index qs[4ib + l] | (u & 7) << 8, delta =
 *   u & 8 ? -0.125f : 0.125f; w = dl_h * ((float)g + delta). */
#include "quant/iq3.h"
#include "base/util.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

/* ---- dequantization ------------------------------------------------------- */

static void dq_iq3_xxs(const uint8_t *b, float *w) {
    const float d = moe_f16_to_f32(moe_rd16(b));
    const uint8_t *qs = b + 2;
    for (int ib = 0; ib < 8; ib++) {
        uint32_t aux;
        memcpy(&aux, b + 66 + 4 * ib, 4);
        const float db = moe_iq3xxs_db(d, aux);
        for (int l = 0; l < 4; l++) {
            const uint8_t sg = moe_iq_signs((aux >> (7 * l)) & 127);
            for (int j = 0; j < 8; j++) {
                const uint32_t pt = moe_iq3xxs_grid[qs[8 * ib + 2 * l + j / 4]];
                const float v = db * (float)((pt >> (8 * (j % 4))) & 255);
                w[32 * ib + 8 * l + j] = (sg >> j) & 1 ? -v : v;
            }
        }
    }
}

static void dq_iq3_s(const uint8_t *b, float *w) {
    const float d = moe_f16_to_f32(moe_rd16(b));
    const uint8_t *qs = b + 2, *qh = b + 66, *sg = b + 74;
    for (int ib = 0; ib < 8; ib++) {
        const float db = moe_iq3s_db(d, b, ib);
        for (int l = 0; l < 4; l++) {
            for (int j = 0; j < 8; j++) {
                const int k = 2 * l + j / 4;
                const uint32_t pt = moe_iq3s_grid[qs[8 * ib + k] | ((qh[ib] >> k) & 1) << 8];
                const float v = db * (float)((pt >> (8 * (j % 4))) & 255);
                w[32 * ib + 8 * l + j] = (sg[4 * ib + l] >> j) & 1 ? -v : v;
            }
        }
    }
}

/* One IQ1 group of 8: dl * ((float)g + delta). */
static void dq_iq1_group(uint64_t pt, float dl, float delta, float *w) {
    for (int j = 0; j < 8; j++) w[j] = dl * ((float)(int8_t)(pt >> (8 * j)) + delta);
}

static void dq_iq1_s(const uint8_t *b, float *w) {
    const float d = moe_f16_to_f32(moe_rd16(b));
    const uint8_t *qs = b + 2;
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t qh = moe_rd16(b + 34 + 2 * ib);
        const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
        const float delta = qh & 0x8000 ? -MOE_IQ1_DELTA : MOE_IQ1_DELTA;
        for (int l = 0; l < 4; l++)
            dq_iq1_group(moe_iq1s_grid[qs[4 * ib + l] | ((qh >> (3 * l)) & 7) << 8], dl, delta, w + 32 * ib + 8 * l);
    }
}

static void dq_iq1_m(const uint8_t *b, float *w) {
    const float d = moe_f16_to_f32(moe_iq1m_d16(b));
    const uint8_t *qs = b, *qh = b + 32;
    for (int ib = 0; ib < 8; ib++) {
        for (int l = 0; l < 4; l++) {
            const float dl = d * (float)(2 * moe_iq1m_s(b, ib, l / 2) + 1);
            const int u = l % 2 ? qh[2 * ib + l / 2] >> 4 : qh[2 * ib + l / 2] & 15;
            const float delta = u & 8 ? -MOE_IQ1_DELTA : MOE_IQ1_DELTA;
            dq_iq1_group(moe_iq1s_grid[qs[4 * ib + l] | (u & 7) << 8], dl, delta, w + 32 * ib + 8 * l);
        }
    }
}

void moe_iq3_dq_block(uint32_t type, const uint8_t *b, float *w) {
    switch (type) {
    case MOE_T_IQ3_XXS: dq_iq3_xxs(b, w); break;
    case MOE_T_IQ3_S: dq_iq3_s(b, w); break;
    case MOE_T_IQ1_S: dq_iq1_s(b, w); break;
    case MOE_T_IQ1_M: dq_iq1_m(b, w); break;
    default: break;
    }
}

/* ---- quantization ----------------------------------------------------------
 * Our own search (not llama-quantize's, which needs its neighbour tables
 * and, for IQ1, an importance matrix); valid blocks with a small error:
 *  1. per sub-block (IQ1_M: per half), trial scales: the largest magnitude
 *     put on each of a few grid levels; every group of 4 (IQ3) or 8 (IQ1)
 *     values rounded per coordinate to the nearest level, then to a grid
 *     point (IQ3: the grid point nearest that lattice point, a map built
 *     once; IQ1: the point itself if on the grid, else the best grid point
 *     one coordinate away, else two away); the trial whose
 *     least-squares scale explains most of the sub-block's energy wins, and
 *     its refitted scale is the sub-block's;
 *  2. the block scale d = the largest sub-block scale over the largest
 *     multiplier (f16), every sub-block scale rounded to its 3- or 4-bit
 *     code, and the groups assigned again against the scale the decoder
 *     will use (IQ3: also trying each coordinate's second-nearest level).
 * Signs (IQ3): from x; IQ3_XXS stores 7 per group of 8 and the 8th is the
 * parity, so a group with an odd number of negative values stores the
 * smallest one with the wrong sign, and the search aims it at -|x|.
 * IQ1 delta (+-1/8): both tried, per sub-block (IQ1_S) or group (IQ1_M).
 * Non-finite inputs give valid blocks (no float -> int conversion of a
 * non-finite value anywhere). */

#define QCLAMP(v, lo, hi) fminf(fmaxf((v), (lo)), (hi))  /* NaN -> lo */

typedef struct {
    const uint32_t *grid;
    int ngrid;
    float lv[8];            /* the levels, ascending */
    float off, inv_step;    /* level k ~ off + k / inv_step */
    float t[9];             /* trial positions of the largest magnitude */
    uint16_t map[4096];     /* lattice point (3 bits per coordinate) -> nearest grid point */
} iq3_code;

static iq3_code code_xxs = {moe_iq3xxs_grid, 256, {4, 12, 20, 28, 36, 44, 52, 62}, 4, 0.125f,
                            {62, 58, 54, 50, 46, 42, 38, 34, 30}, {0}};
static iq3_code code_s = {moe_iq3s_grid, 512, {1, 3, 5, 7, 9, 11, 13, 15}, 1, 0.5f,
                          {15, 14, 13, 12, 11, 10, 9, 8, 7}, {0}};
static int16_t iq1_tern[6561];   /* ternary point (digits g+1, base 3) -> grid index or -1 */
static pthread_once_t iq_once = PTHREAD_ONCE_INIT;

static void build_map(iq3_code *c) {
    for (int a = 0; a < 4096; a++) {
        float best = INFINITY;
        for (int g = 0; g < c->ngrid; g++) {
            float e = 0;
            for (int j = 0; j < 4; j++) {
                const float dv = c->lv[(a >> (3 * j)) & 7] - (float)((c->grid[g] >> (8 * j)) & 255);
                e += dv * dv;
            }
            if (e < best) { best = e; c->map[a] = (uint16_t)g; }
        }
    }
}

static void init_tables(void) {
    build_map(&code_xxs);
    build_map(&code_s);
    for (int i = 0; i < 6561; i++) iq1_tern[i] = -1;
    for (int g = 0; g < 2048; g++) {
        int code = 0;
        for (int j = 7; j >= 0; j--) code = 3 * code + (int8_t)(moe_iq1s_grid[g] >> (8 * j)) + 1;
        iq1_tern[code] = (int16_t)g;
    }
}

/* Level index of target v (in grid units). */
static int iq3_level(const iq3_code *c, float v) {
    int k = moe_nearest_int(QCLAMP((v - c->off) * c->inv_step, 0.f, 7.f));
    if (k > 0 && v < 0.5f * (c->lv[k - 1] + c->lv[k])) k--;   /* 52 / 62: uneven gap */
    else if (k < 7 && v > 0.5f * (c->lv[k] + c->lv[k + 1])) k++;
    return k;
}

static float iq3_err(const iq3_code *c, const float *v, int g) {
    float e = 0;
    for (int j = 0; j < 4; j++) {
        const float dv = v[j] - (float)((c->grid[g] >> (8 * j)) & 255);
        e += dv * dv;
    }
    return e;
}

/* The grid point for 4 targets v (grid units); refine: also the points
 * mapped from each coordinate's second-nearest level, by the real error. */
static int iq3_point(const iq3_code *c, const float *v, bool refine) {
    int a = 0, k[4];
    for (int j = 0; j < 4; j++) { k[j] = iq3_level(c, v[j]); a |= k[j] << (3 * j); }
    int best = c->map[a];
    if (!refine) return best;
    float be = iq3_err(c, v, best);
    for (int j = 0; j < 4; j++) {
        const int k2 = v[j] > c->lv[k[j]] ? k[j] + 1 : k[j] - 1;
        if (k2 < 0 || k2 > 7) continue;
        const int g = c->map[(a & ~(7 << (3 * j))) | k2 << (3 * j)];
        const float e = iq3_err(c, v, g);
        if (e < be) { be = e; best = g; }
    }
    return best;
}

/* Assign the 8 groups of a sub-block (magnitudes a[32]) at scale s; the
 * grid points into idx[8]; returns sum a*g, *gg = sum g*g. */
static float iq3_assign(const iq3_code *c, const float *a, float s, bool refine, int *idx, float *gg) {
    const float inv = s > 0 ? 1.f / s : 0.f;
    float ag = 0, g2 = 0;
    for (int gi = 0; gi < 8; gi++) {
        float v[4];
        for (int j = 0; j < 4; j++) v[j] = a[4 * gi + j] * inv;
        idx[gi] = iq3_point(c, v, refine);
        for (int j = 0; j < 4; j++) {
            const float g = (float)((c->grid[idx[gi]] >> (8 * j)) & 255);
            ag += a[4 * gi + j] * g;
            g2 += g * g;
        }
    }
    *gg = g2;
    return ag;
}

/* Step 1 for IQ3: the least-squares scale of the best trial (0 if none). */
static float iq3_subblock_scale(const iq3_code *c, const float *a) {
    float amax = 0;
    for (int i = 0; i < 32; i++)
        if (fabsf(a[i]) > amax) amax = fabsf(a[i]);
    if (!(amax > 0) || !(amax < INFINITY)) return amax < INFINITY ? 0.f : 65504.f;
    int idx[8];
    float best = 0, scale = 0, gg;
    for (int t = 0; t < 9; t++) {
        const float ag = iq3_assign(c, a, amax / c->t[t], false, idx, &gg);
        if (ag > 0 && ag * ag > best * gg) { best = ag * ag / gg; scale = ag / gg; }
    }
    if (scale > 0) {   /* one more round at the refitted scale */
        const float ag = iq3_assign(c, a, scale, true, idx, &gg);
        if (ag > 0 && ag * ag > best * gg) scale = ag / gg;
    }
    return scale;
}

/* The block scale d (f16, stored at y) from the sub-block scales and the
 * largest multiplier; returns it as the decoder reads it. */
static float block_d(const float *sc, int n, float mult, uint8_t *y) {
    float m = 0;
    for (int i = 0; i < n; i++)
        if (sc[i] > m) m = sc[i];
    const uint16_t h = moe_f32_to_f16(fminf(m / mult, 65504.f));
    if (y) moe_st16(y, h);
    return moe_f16_to_f32(h);
}

static void q_iq3_xxs(const float *x, uint8_t *y) {
    float a[256], sc[8];
    uint8_t sg[32];
    for (int gi = 0; gi < 32; gi++) {   /* signs: even parity per group of 8 */
        const float *xg = x + 8 * gi;
        int neg = 0, imin = 0;
        for (int j = 0; j < 8; j++) {
            a[8 * gi + j] = fabsf(xg[j]);
            if (xg[j] < 0) neg |= 1 << j;
            if (a[8 * gi + j] < a[8 * gi + imin]) imin = j;
        }
        if (__builtin_popcount((unsigned)neg) & 1) { neg ^= 1 << imin; a[8 * gi + imin] = -a[8 * gi + imin]; }
        sg[gi] = (uint8_t)neg;
    }
    for (int ib = 0; ib < 8; ib++) sc[ib] = iq3_subblock_scale(&code_xxs, a + 32 * ib);
    const float d = block_d(sc, 8, 7.75f, y);
    for (int ib = 0; ib < 8; ib++) {
        const int s = d > 0 ? moe_nearest_int(QCLAMP(2.f * sc[ib] / d - 0.5f, 0.f, 15.f)) : 0;
        uint32_t aux = (uint32_t)s << 28;
        for (int l = 0; l < 4; l++) aux |= (uint32_t)(sg[4 * ib + l] & 127) << (7 * l);
        int idx[8];
        float gg;
        iq3_assign(&code_xxs, a + 32 * ib, moe_iq3xxs_db(d, aux), true, idx, &gg);
        for (int k = 0; k < 8; k++) y[2 + 8 * ib + k] = (uint8_t)idx[k];
        memcpy(y + 66 + 4 * ib, &aux, 4);
    }
}

static void q_iq3_s(const float *x, uint8_t *y) {
    float a[256], sc[8];
    memset(y + 66, 0, 44);
    for (int i = 0; i < 256; i++) {
        a[i] = fabsf(x[i]);
        if (x[i] < 0) y[74 + i / 8] |= (uint8_t)(1 << (i % 8));
    }
    for (int ib = 0; ib < 8; ib++) sc[ib] = iq3_subblock_scale(&code_s, a + 32 * ib);
    const float d = block_d(sc, 8, 31.f, y);
    for (int ib = 0; ib < 8; ib++) {
        const int s = d > 0 ? moe_nearest_int(QCLAMP(0.5f * (sc[ib] / d - 1.f), 0.f, 15.f)) : 0;
        y[106 + ib / 2] |= (uint8_t)(s << (4 * (ib & 1)));
        int idx[8];
        float gg;
        iq3_assign(&code_s, a + 32 * ib, moe_iq3s_db(d, y, ib), true, idx, &gg);
        for (int k = 0; k < 8; k++) {
            y[2 + 8 * ib + k] = (uint8_t)(idx[k] & 255);
            y[66 + ib] |= (uint8_t)((idx[k] >> 8) << k);
        }
    }
}

/* ---- IQ1_S / IQ1_M ---- */

/* The grid point for 8 targets y (units of dl, delta removed): returns the
 * index; *e = sum (y - g)^2. */
static int iq1_point(const float *y, float *e) {
    int r[8], code = 0, p3 = 1;
    for (int j = 0; j < 8; j++) {
        r[j] = y[j] > 0.5f ? 1 : y[j] < -0.5f ? -1 : 0;
        code += (r[j] + 1) * p3;
        p3 *= 3;
    }
    float base = 0;
    for (int j = 0; j < 8; j++) base += (y[j] - (float)r[j]) * (y[j] - (float)r[j]);
    if (iq1_tern[code] >= 0) { *e = base; return iq1_tern[code]; }
    int best = -1, dc[8];
    float be = INFINITY, c[8];
    p3 = 1;
    for (int j = 0; j < 8; j++, p3 *= 3) {   /* one coordinate to its second-nearest value */
        const int alt = r[j] != 0 ? 0 : y[j] >= 0 ? 1 : -1;
        dc[j] = (alt - r[j]) * p3;
        c[j] = (y[j] - (float)alt) * (y[j] - (float)alt) - (y[j] - (float)r[j]) * (y[j] - (float)r[j]);
        const int g = iq1_tern[code + dc[j]];
        if (g >= 0 && c[j] < be) { be = c[j]; best = g; }
    }
    for (int i = 0; i < 8 && best < 0; i++)  /* else two of them (the grid holds 31 % of the points) */
        for (int j = i + 1; j < 8; j++) {
            const int g = iq1_tern[code + dc[i] + dc[j]];
            if (g >= 0 && c[i] + c[j] < be) { be = c[i] + c[j]; best = g; }
        }
    if (best >= 0) { *e = base + be; return best; }
    for (int g = 0; g < 2048; g++) {         /* never seen: the nearest of all */
        float s = 0;
        for (int j = 0; j < 8; j++) {
            const float dv = y[j] - (float)(int8_t)(moe_iq1s_grid[g] >> (8 * j));
            s += dv * dv;
        }
        if (s < be) { be = s; best = g; }
    }
    *e = be;
    return best < 0 ? 0 : best;
}

/* A group of 8 values x at scale dl with delta sign ds (0: +, 1: -): the
 * point, and sum x*q, sum q*q (q = g + delta) for the scale refit. */
static int iq1_group(const float *x, float dl, int ds, float *xq, float *qq, float *e) {
    const float inv = dl > 0 ? 1.f / dl : 0.f, delta = ds ? -MOE_IQ1_DELTA : MOE_IQ1_DELTA;
    float yv[8];
    for (int j = 0; j < 8; j++) yv[j] = x[j] * inv - delta;
    const int g = iq1_point(yv, e);
    for (int j = 0; j < 8; j++) {
        const float q = (float)(int8_t)(moe_iq1s_grid[g] >> (8 * j)) + delta;
        *xq += x[j] * q;
        *qq += q * q;
    }
    return g;
}

/* Groups [0, ng) of x at scale dl; per_group: each group its own delta
 * (IQ1_M), else one for all (IQ1_S, chosen by the total error). Points into
 * idx, delta signs into ds; returns the energy explained, (sum xq)^2 / sum q^2,
 * and the refitted scale in *fit. */
static float iq1_assign(const float *x, int ng, float dl, bool per_group, int *idx, int *ds, float *fit) {
    float xq = 0, qq = 0;
    if (per_group) {
        for (int gi = 0; gi < ng; gi++) {
            float xq0 = 0, qq0 = 0, e0, xq1 = 0, qq1 = 0, e1;
            const int g0 = iq1_group(x + 8 * gi, dl, 0, &xq0, &qq0, &e0);
            const int g1 = iq1_group(x + 8 * gi, dl, 1, &xq1, &qq1, &e1);
            const int one = e1 < e0;
            idx[gi] = one ? g1 : g0; ds[gi] = one;
            xq += one ? xq1 : xq0; qq += one ? qq1 : qq0;
        }
    } else {
        int id2[2][8];
        float xs[2] = {0, 0}, qs[2] = {0, 0}, es[2] = {0, 0};
        for (int s = 0; s < 2; s++)
            for (int gi = 0; gi < ng; gi++) {
                float e;
                id2[s][gi] = iq1_group(x + 8 * gi, dl, s, &xs[s], &qs[s], &e);
                es[s] += e;
            }
        const int one = es[1] < es[0];
        for (int gi = 0; gi < ng; gi++) { idx[gi] = id2[one][gi]; ds[gi] = one; }
        xq = xs[one]; qq = qs[one];
    }
    *fit = qq > 0 && xq > 0 ? xq / qq : 0.f;
    return qq > 0 && xq > 0 ? xq * xq / qq : 0.f;
}

/* Step 1 for IQ1: the refitted scale of the best trial over ng groups. */
static float iq1_scale(const float *x, int ng, bool per_group) {
    static const float T[8] = {1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.25f, 2.5f, 3.0f};
    float amax = 0;
    for (int i = 0; i < 8 * ng; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    if (!(amax > 0) || !(amax < INFINITY)) return amax < INFINITY ? 0.f : 65504.f;
    int idx[8], ds[8];
    float best = 0, scale = 0, fit;
    for (int t = 0; t < 8; t++) {
        const float en = iq1_assign(x, ng, amax / T[t], per_group, idx, ds, &fit);
        if (en > best) { best = en; scale = fit; }
    }
    if (scale > 0 && iq1_assign(x, ng, scale, per_group, idx, ds, &fit) > best) scale = fit;
    return scale;
}

static void q_iq1_s(const float *x, uint8_t *y) {
    float sc[8];
    for (int ib = 0; ib < 8; ib++) sc[ib] = iq1_scale(x + 32 * ib, 4, false);
    const float d = block_d(sc, 8, 15.f, y);
    for (int ib = 0; ib < 8; ib++) {
        const int s = d > 0 ? moe_nearest_int(QCLAMP(0.5f * (sc[ib] / d - 1.f), 0.f, 7.f)) : 0;
        int idx[8], ds[8];
        float fit;
        iq1_assign(x + 32 * ib, 4, d * (float)(2 * s + 1), false, idx, ds, &fit);
        uint16_t qh = (uint16_t)(s << 12 | ds[0] << 15);
        for (int l = 0; l < 4; l++) {
            y[2 + 4 * ib + l] = (uint8_t)(idx[l] & 255);
            qh |= (uint16_t)((idx[l] >> 8) << (3 * l));
        }
        moe_st16(y + 34 + 2 * ib, qh);
    }
}

static void q_iq1_m(const float *x, uint8_t *y) {
    float sc[16];
    for (int h = 0; h < 16; h++) sc[h] = iq1_scale(x + 16 * h, 2, true);
    const float d = block_d(sc, 16, 15.f, NULL);
    const uint16_t d16 = moe_f32_to_f16(d);   /* d is already an f16 value: the same bits */
    uint16_t sw[4] = {0, 0, 0, 0};
    for (int h = 0; h < 16; h++) {
        const int s = d > 0 ? moe_nearest_int(QCLAMP(0.5f * (sc[h] / d - 1.f), 0.f, 7.f)) : 0;
        const int ib = h / 2;
        sw[ib / 2] |= (uint16_t)(s << (6 * (ib % 2) + 3 * (h % 2)));
        int idx[2], ds[2];
        float fit;
        iq1_assign(x + 16 * h, 2, d * (float)(2 * s + 1), true, idx, ds, &fit);
        /* groups 2 (h % 2) + l of sub-block ib; qh[2 ib + h % 2] = qh[h] */
        for (int l = 0; l < 2; l++) y[4 * ib + 2 * (h % 2) + l] = (uint8_t)(idx[l] & 255);
        y[32 + h] = (uint8_t)(((idx[0] >> 8) | ds[0] << 3) | ((idx[1] >> 8) | ds[1] << 3) << 4);
    }
    for (int k = 0; k < 4; k++) sw[k] |= (uint16_t)(((d16 >> (4 * k)) & 15) << 12);
    for (int k = 0; k < 4; k++) moe_st16(y + 48 + 2 * k, sw[k]);
}

void moe_iq3_quantize_block(uint32_t type, const float *x, uint8_t *y) {
    pthread_once(&iq_once, init_tables);
    switch (type) {
    case MOE_T_IQ3_XXS: q_iq3_xxs(x, y); break;
    case MOE_T_IQ3_S: q_iq3_s(x, y); break;
    case MOE_T_IQ1_S: q_iq1_s(x, y); break;
    case MOE_T_IQ1_M: q_iq1_m(x, y); break;
    default: break;
    }
}
