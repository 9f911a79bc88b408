/* iq2_quant.c — a quantizer to IQ2_XXS, IQ2_XS and IQ2_S (layouts:
 * iq2_ref.c). Our own search, not llama-quantize's (which needs an
 * importance matrix for these types and differs in its neighbour maps): the
 * blocks are valid and the error is close to what 2-2.5 bits allow
 * (tests/test_iq2.c bounds it on Gaussian rows), not byte-identical to
 * llama.cpp's.
 *
 * Per group of 8 values x: the signs are x's own; for XXS and XS (whose
 * signs must have even parity) an odd count is fixed by flipping the sign
 * of the smallest |x|, whose target becomes -|x|. For a scale t (value per
 * codebook unit) the best entry minimises sum_j (y_j - t G_j)^2 over the
 * codebook, y the signed targets. That sum is separable over j on the cube
 * {8,25,43}^8, so rounding each y_j / t to its nearest level gives the
 * optimum over the cube; when that point is a codebook entry it is the
 * optimum over the codebook, otherwise the best of its IQ2_NB nearest
 * entries (precomputed once per codebook) is taken.
 * Per scale group (32 values for XXS, 16 for XS and S): trial scales
 * t = amax / v for v in IQ2_TRIAL_LIST, each refined IQ2_REFINE times by
 * least squares over the chosen entries, the smallest squared error kept.
 * Tuned on Gaussian rows (relative RMS error; Mvalues/s of one core, -O2):
 * 7 trials 0.334 / 0.288 / 0.241 (XXS / XS / S) at 7-8; these 4 trials
 * 0.335 / 0.288 / 0.241 at 10-11.5; an exhaustive search (IQ2_NB = the
 * whole codebook) 0.333 / 0.287 / 0.241 at 0.1; IQ2_NB 8 0.337 / 0.289 /
 * 0.243. Per block: d so that
 * the largest t is code 15, rounded to f16; then each group's code s (the
 * nearest and its two neighbours) and its entries chosen again against the
 * scale d * (0.5 + s) * 0.25 the decoder will use, smallest error kept. */
#include "quant/iq2.h"
#include "base/util.h"

#include <math.h>
#include <pthread.h>

#define IQ2_CUBE 6561  /* 3^8 points of {8,25,43}^8 */
#ifndef IQ2_NB
#define IQ2_NB 16      /* codebook entries tried for a point off the codebook */
#endif

static const float LEVELS[3] = {8.0f, 25.0f, 43.0f};

typedef struct {
    const uint64_t *grid;
    int n;
    int16_t map[IQ2_CUBE];              /* cube point -> entry, -1 if none */
    uint16_t nb[IQ2_CUBE][IQ2_NB];      /* nearest entries of each point off the codebook */
    float g[1024][8];                   /* the entries as floats */
    float gg[1024];                     /* their squared norms */
} iq2_book;

static iq2_book BOOKS[3];
static pthread_once_t ONCE[3] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

static int level_of(uint8_t m) { return m == 8 ? 0 : m == 25 ? 1 : 2; }

static void book_init(int which) {
    static const struct { const uint64_t *grid; int n; } SRC[3] = {
        {moe_iq2xxs_grid, 256}, {moe_iq2xs_grid, 512}, {moe_iq2s_grid, 1024}};
    iq2_book *B = &BOOKS[which];
    B->grid = SRC[which].grid;
    B->n = SRC[which].n;
    for (int c = 0; c < IQ2_CUBE; c++) B->map[c] = -1;
    for (int e = 0; e < B->n; e++) {
        int c = 0;
        for (int j = 7; j >= 0; j--) {
            const uint8_t m = (uint8_t)(B->grid[e] >> (8 * j));
            B->g[e][j] = (float)m;
            B->gg[e] += (float)m * (float)m;
            c = 3 * c + level_of(m);
        }
        B->map[c] = (int16_t)e;
    }
    for (int c = 0; c < IQ2_CUBE; c++) {
        if (B->map[c] >= 0) continue;
        float p[8], best[IQ2_NB];
        int cc = c;
        for (int j = 0; j < 8; j++, cc /= 3) p[j] = LEVELS[cc % 3];
        int cnt = 0;
        for (int e = 0; e < B->n; e++) {
            float dd = 0;
            for (int j = 0; j < 8; j++) dd += (p[j] - B->g[e][j]) * (p[j] - B->g[e][j]);
            if (cnt == IQ2_NB && dd >= best[IQ2_NB - 1]) continue;
            int k = cnt < IQ2_NB ? cnt++ : IQ2_NB - 1;   /* insertion into the sorted list */
            for (; k > 0 && best[k - 1] > dd; k--) { best[k] = best[k - 1]; B->nb[c][k] = B->nb[c][k - 1]; }
            best[k] = dd;
            B->nb[c][k] = (uint16_t)e;
        }
    }
}
static void init0(void) { book_init(0); }
static void init1(void) { book_init(1); }
static void init2(void) { book_init(2); }

static const iq2_book *book_for(uint32_t type) {
    static void (*const FN[3])(void) = {init0, init1, init2};
    const int w = type == MOE_T_IQ2_XXS ? 0 : type == MOE_T_IQ2_XS ? 1 : 2;
    pthread_once(&ONCE[w], FN[w]);
    return &BOOKS[w];
}

/* The best entry for targets y at scale t > 0; *err its squared error
 * sum (y - t G)^2 = yy - t (2 yG - t GG). */
static int pick(const iq2_book *B, const float *y, float t, float *err) {
    const float it = 1.0f / t;
    float yy = 0;
    int c = 0;
    for (int j = 7; j >= 0; j--) {
        const float u = y[j] * it;
        c = 3 * c + (u < 16.5f ? 0 : u < 34.0f ? 1 : 2);
        yy += y[j] * y[j];
    }
    const int on = B->map[c];
    const uint16_t *cand = on >= 0 ? NULL : B->nb[c];
    const int nc = on >= 0 ? 1 : IQ2_NB;
    int best = on >= 0 ? on : cand[0];
    float bs = -INFINITY;
    for (int k = 0; k < nc; k++) {
        const int e = on >= 0 ? on : cand[k];
        float yg = 0;
        for (int j = 0; j < 8; j++) yg += y[j] * B->g[e][j];
        const float sc = t * (2.0f * yg - t * B->gg[e]);   /* the larger, the smaller the error */
        if (sc > bs) { bs = sc; best = e; }
    }
    *err = yy - bs;
    return best;
}

/* Entries of ng groups at scale t: the summed squared error. */
static float pick_all(const iq2_book *B, const float *y, int ng, float t, int *idx) {
    float tot = 0;
    for (int q = 0; q < ng; q++) {
        float e;
        idx[q] = pick(B, y + 8 * q, t, &e);
        tot += e;
    }
    return tot;
}

/* The scale of a scale group of ng groups (targets y, max |x| amax) and
 * its entries; 0 for an all-zero group. */
static float group_scale(const iq2_book *B, const float *y, int ng, float amax, int *idx) {
#ifndef IQ2_TRIAL_LIST
#define IQ2_TRIAL_LIST 24, 31, 38, 45
#endif
#ifndef IQ2_REFINE
#define IQ2_REFINE 1
#endif
    static const float IQ2_TRIALS[] = {IQ2_TRIAL_LIST};
    float bt = 0, be = INFINITY;
    int tmp[4];
    for (int q = 0; q < ng; q++) idx[q] = 0;
    if (!(amax > 0)) return 0;
    for (size_t k = 0; k < sizeof IQ2_TRIALS / sizeof IQ2_TRIALS[0]; k++) {
        float t = amax / IQ2_TRIALS[k];
        float e = pick_all(B, y, ng, t, tmp);
        for (int it = 0; it < IQ2_REFINE; it++) {   /* least squares over the chosen entries, then again */
            float yg = 0, gg = 0;
            for (int q = 0; q < ng; q++) {
                for (int j = 0; j < 8; j++) yg += y[8 * q + j] * B->g[tmp[q]][j];
                gg += B->gg[tmp[q]];
            }
            if (!(yg > 0)) break;
            t = yg / gg;
            e = pick_all(B, y, ng, t, tmp);
        }
        if (e < be) { be = e; bt = t; memcpy(idx, tmp, sizeof(int) * (size_t)ng); }
    }
    return bt;
}

/* Signed targets and sign bits of one group of 8. */
static uint8_t group_signs(const float *x, float *y, bool even) {
    uint8_t s = 0;
    int jmin = 0;
    for (int j = 0; j < 8; j++) {
        y[j] = fabsf(x[j]);
        if (x[j] < 0) s |= (uint8_t)(1u << j);
        if (y[j] < y[jmin]) jmin = j;
    }
    if (even && (__builtin_popcount(s) & 1)) {
        s ^= (uint8_t)(1u << jmin);
        y[jmin] = -y[jmin];
    }
    return s;
}

static void pack(uint32_t type, uint8_t *b, int g, int e, uint8_t signs, unsigned sc) {
    const int ib = g / 4, l = g % 4;
    if (type == MOE_T_IQ2_XXS) {
        uint32_t a1;
        b[2 + 8 * ib + l] = (uint8_t)e;
        memcpy(&a1, b + 2 + 8 * ib + 4, 4);
        a1 |= (uint32_t)(signs & 127) << (7 * l) | (uint32_t)sc << 28;
        memcpy(b + 2 + 8 * ib + 4, &a1, 4);
    } else if (type == MOE_T_IQ2_XS) {
        moe_st16(b + 2 + 2 * g, (uint16_t)(e | (signs & 127) << 9));
        b[66 + ib] |= (uint8_t)(sc << (4 * (l / 2)));
    } else {
        b[2 + g] = (uint8_t)(e & 255);
        b[34 + g] = signs;
        b[66 + ib] |= (uint8_t)((e >> 8) << (2 * l));
        b[74 + ib] |= (uint8_t)(sc << (4 * (l / 2)));
    }
}

void moe_iq2_quantize_block(uint32_t type, const float *x, uint8_t *y) {
    const iq2_book *B = book_for(type);
    const int ng = type == MOE_T_IQ2_XXS ? 4 : 2, nsg = 32 / ng;   /* groups per scale group, scale groups */
    float tg[256], t[16], tmax = 0;
    uint8_t signs[32];
    int idx[32];
    memset(y, 0, moe_type_get(type)->block_bytes);
    for (int g = 0; g < 32; g++) signs[g] = group_signs(x + 8 * g, tg + 8 * g, type != MOE_T_IQ2_S);
    for (int s = 0; s < nsg; s++) {
        float amax = 0;
        for (int k = 0; k < 8 * ng; k++) amax = fmaxf(amax, fabsf(x[8 * ng * s + k]));
        t[s] = group_scale(B, tg + 8 * ng * s, ng, amax, idx + ng * s);
        tmax = fmaxf(tmax, t[s]);
    }
    moe_st16(y, moe_f32_to_f16(tmax / 3.875f));   /* (0.5 + 15) * 0.25 */
    const float d = moe_f16_to_f32(moe_rd16(y));
    for (int s = 0; s < nsg; s++) {
        int bs = 0;
        if (d > 0 && t[s] > 0) {
            const int s0 = moe_nearest_int(4.0f * t[s] / d - 0.5f);
            float be = INFINITY;
            int tmp[4];
            for (int c = s0 - 1; c <= s0 + 1; c++) {
                if (c < 0 || c > 15) continue;
                const float e = pick_all(B, tg + 8 * ng * s, ng, moe_iq2_db(d, (unsigned)c), tmp);
                if (e < be) { be = e; bs = c; memcpy(idx + ng * s, tmp, sizeof(int) * (size_t)ng); }
            }
        }
        for (int q = 0; q < ng; q++) {
            const int g = ng * s + q;
            pack(type, y, g, idx[g], signs[g], (unsigned)bs);
        }
    }
}
