/* kv_tq.c — the kv_tq codec and its scalar reference kernels (the contract
 * of kv_tq.h written out literally). */
#include <math.h>
#include <string.h>

#include "attention/attn.h"
#include "attention/kv_tq.h"
#include "base/util.h"

/* Lloyd-Max codebooks of N(0,1), ascending: Lloyd's iteration on the exact
 * Gaussian density in double precision (scripts/lloyd_max.c, which prints
 * these tables: thresholds at the midpoints, centroids the conditional
 * means (phi(a) - phi(b)) / (Phi(b) - Phi(a)), until no centroid moves by
 * 1e-13), rounded to float. MSE per coordinate: 3 bits 0.034547761, 4 bits
 * 0.009501008 (its upper half is the 0.128395 .. 2.732590), 5 bits
 * 0.002504668. tests/test_kv_tq.c checks the centroid and midpoint
 * conditions against the density again. */
static const float CB3[8] = {
    -2.151945705e+00f, -1.343909279e+00f, -7.560052812e-01f, -2.450941789e-01f,
    2.450941789e-01f, 7.560052812e-01f, 1.343909279e+00f, 2.151945705e+00f};
static const float CB4[16] = {
    -2.732589571e+00f, -2.069017227e+00f, -1.618046386e+00f, -1.256231197e+00f,
    -9.423404565e-01f, -6.567591185e-01f, -3.880482995e-01f, -1.283950299e-01f,
    1.283950299e-01f, 3.880482995e-01f, 6.567591185e-01f, 9.423404565e-01f,
    1.256231197e+00f, 1.618046386e+00f, 2.069017227e+00f, 2.732589571e+00f};
static const float CB5[32] = {
    -3.260732493e+00f, -2.691119577e+00f, -2.317739404e+00f, -2.028728399e+00f,
    -1.787233218e+00f, -1.576228079e+00f, -1.386340340e+00f, -1.211804381e+00f,
    -1.048783320e+00f, -8.945651174e-01f, -7.471357037e-01f, -6.049336240e-01f,
    -4.666995230e-01f, -3.313783058e-01f, -1.980518297e-01f, -6.588965977e-02f,
    6.588965977e-02f, 1.980518297e-01f, 3.313783058e-01f, 4.666995230e-01f,
    6.049336240e-01f, 7.471357037e-01f, 8.945651174e-01f, 1.048783320e+00f,
    1.211804381e+00f, 1.386340340e+00f, 1.576228079e+00f, 1.787233218e+00f,
    2.028728399e+00f, 2.317739404e+00f, 2.691119577e+00f, 3.260732493e+00f};

/* The same centroids as integers for scores_tq: lrint(cb[c] * 127 / cb[last]),
 * printed from the float tables above (tests/test_kv_tq.c recomputes them). */
static const int16_t CI3[8] = {-127, -79, -45, -14, 14, 45, 79, 127};
static const int16_t CI4[16] = {-127, -96, -75, -58, -44, -31, -18, -6, 6, 18, 31, 44, 58, 75, 96, 127};
static const int16_t CI5[32] = {-127, -105, -90, -79, -70, -61, -54, -47, -41, -35, -29, -24, -18, -13, -8, -3,
                                3,    8,    13,  18,  24,  29,  35,  41,  47,  54,  61,  70,  79,  90,  105, 127};

const int16_t *moe_tq_codebook_int(int bits) { return bits == 3 ? CI3 : bits == 4 ? CI4 : bits == 5 ? CI5 : NULL; }

float moe_tq_cscale(int bits) { return moe_tq_codebook(bits)[(1 << bits) - 1] / (float)MOE_TQ_CMAX; }

int moe_tq_qmax(int D) {
    (void)D;
    return MOE_TQ_QMAX;
}

float moe_tq_query_q(const float *qr, int D, int bits, int16_t *qi) {
    float amax = 0.0f;
    for (int d = 0; d < D; d++) {
        const float a = fabsf(qr[d]);
        amax = a > amax || a != a ? a : amax;        /* a NaN sticks */
    }
    memset(qi, 0, (size_t)D * sizeof *qi);
    if (!isfinite(amax)) return NAN;
    if (amax == 0.0f) return 0.0f;
    const int Q = moe_tq_qmax(D);
    const double inv = (double)Q / (double)amax;     /* double: no overflow for a tiny amax */
    for (int d = 0; d < D; d++) {
        const long v = lrint((double)qr[d] * inv);
        qi[d] = (int16_t)(v > Q ? Q : v < -Q ? -Q : v);
    }
    return (amax / (float)Q) * moe_tq_cscale(bits);
}

const float *moe_tq_codebook(int bits) { return bits == 3 ? CB3 : bits == 4 ? CB4 : bits == 5 ? CB5 : NULL; }

double moe_tq_codebook_mse(int bits) {
    return bits == 3 ? 0.034547761 : bits == 4 ? 0.009501008 : bits == 5 ? 0.002504668 : 0.0;
}

bool moe_tq_dim_ok(int D) { return D >= MOE_TQ_MIN_D && D <= MOE_TQ_MAX_D && (D & (D - 1)) == 0; }

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

void moe_tq_signs(int layer, int head, int D, uint64_t *s) {
    const uint64_t seed = splitmix64(0x6b765f7471ull ^ ((uint64_t)(uint32_t)layer << 32) ^ (uint64_t)(uint32_t)head);
    for (int i = 0; i < (D + 63) / 64; i++) s[i] = splitmix64(seed + (uint64_t)i * 0x632BE59BD9B4E019ull);
}

static inline bool neg(const uint64_t *s, int d) { return (s[d >> 6] >> (d & 63)) & 1u; }

/* The butterflies of stage h with the pair (t[j], t[j + h]) for 16 j from j0:
 * through local copies, so the compiler knows the halves apart and runs the
 * 16 in vector lanes (the same operations, so the same bits). */
static inline void butterfly16(float *t, int j0, int h) {
    float a[16], b[16];
    memcpy(a, t + j0, sizeof a);
    memcpy(b, t + j0 + h, sizeof b);
    for (int k = 0; k < 16; k++) t[j0 + k] = a[k] + b[k];
    for (int k = 0; k < 16; k++) t[j0 + h + k] = a[k] - b[k];
}

/* Stages h = 1 .. 8 mix each 16-value block only within itself, so a block
 * runs them all before the next block; the larger stages run in 16-wide
 * strips. Every butterfly has the operands the plain stage-by-stage order
 * gives it (kv_tq.h), so the result is the same bits. */
void moe_tq_fwht(float *t, int D) {
    for (int i = 0; i < D; i += 16)
        for (int h = 1; h < 16; h *= 2)
            for (int k = i; k < i + 16; k += 2 * h)
                for (int j = k; j < k + h; j++) {
                    const float a = t[j], b = t[j + h];
                    t[j] = a + b;
                    t[j + h] = a - b;
                }
    for (int h = 16; h < D; h *= 2)
        for (int i = 0; i < D; i += 2 * h)
            for (int j = i; j < i + h; j += 16) butterfly16(t, j, h);
}

float moe_tq_isd(int D) { return (float)(1.0 / sqrt((double)D)); }
static float inv_sqrt_d(int D) { return moe_tq_isd(D); }

void moe_tq_rotate(const float *x, const uint64_t *s, int D, float *y) { moe_tq_rotate_k(&moe_tq_scalar, x, s, D, y); }

void moe_tq_rotate_k(const moe_tq_kernels *k, const float *x, const uint64_t *s, int D, float *y) { k->rotate(x, s, D, y); }

static void rotate_scalar(const float *x, const uint64_t *s, int D, float *y) {
    for (int d = 0; d < D; d++) y[d] = neg(s, d) ? -x[d] : x[d];
    moe_tq_fwht(y, D);
    const float isd = inv_sqrt_d(D);
    for (int d = 0; d < D; d++) y[d] *= isd;
}

void moe_tq_unrotate(float *y, const uint64_t *s, int D) { moe_tq_unrotate_k(&moe_tq_scalar, y, s, D); }

void moe_tq_unrotate_k(const moe_tq_kernels *k, float *y, const uint64_t *s, int D) { k->unrotate(y, s, D); }

static void unrotate_scalar(float *y, const uint64_t *s, int D) {
    moe_tq_fwht(y, D);
    const float isd = inv_sqrt_d(D);
    for (int d = 0; d < D; d++) {
        const float v = y[d] * isd;
        y[d] = neg(s, d) ? -v : v;
    }
}

/* Byte offsets of the parts of a row (kv_tq.h) */
static size_t hi_off(int D, int bits) { return bits == 3 ? (size_t)D / 4 : (size_t)D / 2; }
static size_t scale_off(int D, int bits) { return (size_t)D * (size_t)bits / 8; }

int moe_tq_code(const uint8_t *row, int D, int bits, int d) {
    const int g = d / 32, i = d % 32;
    if (bits == 3) {
        const int lo = (row[8 * g + i % 8] >> (2 * (i / 8))) & 3;
        return lo | (((row[hi_off(D, 3) + 4 * (size_t)g + (size_t)(i / 8)] >> (i % 8)) & 1) << 2);
    }
    const int lo = (row[16 * g + i % 16] >> (i < 16 ? 0 : 4)) & 15;
    if (bits == 4) return lo;
    return lo | (((row[hi_off(D, 5) + 4 * (size_t)g + (size_t)(i / 8)] >> (i % 8)) & 1) << 4);
}

static void put_code(uint8_t *row, int D, int bits, int d, int c) {
    const int g = d / 32, i = d % 32;
    if (bits == 3) {
        row[8 * g + i % 8] |= (uint8_t)((c & 3) << (2 * (i / 8)));
        row[hi_off(D, 3) + 4 * (size_t)g + (size_t)(i / 8)] |= (uint8_t)(((c >> 2) & 1) << (i % 8));
        return;
    }
    row[16 * g + i % 16] |= (uint8_t)((c & 15) << (i < 16 ? 0 : 4));
    if (bits == 5) row[hi_off(D, 5) + 4 * (size_t)g + (size_t)(i / 8)] |= (uint8_t)(((c >> 4) & 1) << (i % 8));
}

float moe_tq_sigma(const uint8_t *row, int D, int bits) {
    const size_t o = scale_off(D, bits);
    return moe_f16_to_f32((uint16_t)(row[o] | row[o + 1] << 8));
}

static void put_sigma(uint8_t *row, int D, int bits, uint16_t h) {
    const size_t o = scale_off(D, bits);
    row[o] = (uint8_t)(h & 0xff);
    row[o + 1] = (uint8_t)(h >> 8);
}

#define TQ_MARK 0x7E00u   /* a quiet half NaN: the row held a non-finite value */

/* The number of thresholds (midpoints of adjacent centroids) below u: the
 * nearest centroid, ties to the lower one; a NaN gives 0. A search without
 * branches (2^bits - 1 thresholds: bits halving steps, each a compare and a
 * select), as data-dependent branches on near-Gaussian u mispredict about
 * every other step; the same count as any search, so the same codes. */
static inline int nearest(const float *cb, int bits, float u) {
    int lo = 0;
    for (int s = 1 << (bits - 1); s > 0; s >>= 1) {
        const int i = lo + s - 1;                   /* threshold i lies between centroids i and i + 1 */
        lo += u > (cb[i] + cb[i + 1]) * 0.5f ? s : 0;
    }
    return lo;
}

void moe_tq_encode(const float *x, const uint64_t *s, int D, int bits, float *tmp, uint8_t *row) {
    memset(row, 0, moe_tq_row_bytes(D, bits));
    double n2 = 0;
    for (int d = 0; d < D; d++) {
        if (!isfinite(x[d])) { put_sigma(row, D, bits, TQ_MARK); return; }
        n2 += (double)x[d] * (double)x[d];
    }
    if (n2 == 0) return;                            /* exact zeros: sigma +0 */
    const double n = sqrt(n2);
    for (int d = 0; d < D; d++) tmp[d] = neg(s, d) ? -x[d] : x[d];
    moe_tq_fwht(tmp, D);                            /* ||t|| = sqrt(D) n: t_d / n ~ N(0, 1) */
    const float inv = (float)(1.0 / n), *cb = moe_tq_codebook(bits);
    double r2 = 0;
    for (int d = 0; d < D; d++) {
        const int c = nearest(cb, bits, tmp[d] * inv);
        put_code(row, D, bits, d, c);
        r2 += (double)cb[c] * (double)cb[c];
    }
    moe_tq_put_scale(row, D, bits, n, r2);
}

void moe_tq_put_scale(uint8_t *row, int D, int bits, double n, double r2) {
    const uint16_t h = moe_f32_to_f16((float)(n / sqrt(r2)));   /* the norm correction */
    put_sigma(row, D, bits, (h & 0x7C00u) == 0x7C00u ? TQ_MARK : h);
}

void moe_tq_mark(uint8_t *row, int D, int bits) { put_sigma(row, D, bits, TQ_MARK); }

void moe_tq_enc_tables(int bits, float *thr, double *sq) {
    const float *cb = moe_tq_codebook(bits);
    for (int i = 0; i + 1 < 1 << bits; i++) thr[i] = (cb[i] + cb[i + 1]) * 0.5f;
    for (int c = 0; c < 1 << bits; c++) sq[c] = (double)cb[c] * (double)cb[c];
}

void moe_tq_encode_k(const moe_tq_kernels *k, const float *x, const uint64_t *s, int D, int bits, float *tmp,
                     uint8_t *row) {
    k->encode(x, s, D, bits, tmp, row);
}

void moe_tq_decode(const uint8_t *row, const uint64_t *s, int D, int bits, float *x) {
    const float sig = moe_tq_sigma(row, D, bits), *cb = moe_tq_codebook(bits);
    for (int d = 0; d < D; d++) x[d] = sig * cb[moe_tq_code(row, D, bits, d)];
    moe_tq_unrotate(x, s, D);
}

/* ---- the scalar reference kernels ---- */

static void scores_tq_scalar(const float *qr, size_t qs, int G, const uint8_t *k, int nk, int D, int bits, float scale,
                             float *sc, size_t scs) {
    const int16_t *ck = moe_tq_codebook_int(bits);
    const size_t rb = moe_tq_row_bytes(D, bits);
    int16_t qi[MOE_TQ_MAX_D];
    for (int h = 0; h < G; h++) {
        const float S = moe_tq_query_q(qr + (size_t)h * qs, D, bits, qi);
        for (int j = 0; j < nk; j++) {
            const uint8_t *kj = k + (size_t)j * rb;
            int32_t isum = 0;
            for (int d = 0; d < D; d++) isum += (int32_t)qi[d] * ck[moe_tq_code(kj, D, bits, d)];
            sc[(size_t)h * scs + (size_t)j] = (((float)isum * S) * moe_tq_sigma(kj, D, bits)) * scale;
        }
    }
}

static void accum_tq_scalar(const float *p, size_t ps, int G, const uint8_t *v, int nk, int Dv, int bits, float *out,
                            size_t os) {
    const float *cb = moe_tq_codebook(bits);
    const size_t rb = moe_tq_row_bytes(Dv, bits);
    for (int h = 0; h < G; h++) {
        float *o = out + (size_t)h * os;
        memset(o, 0, (size_t)Dv * sizeof *o);
        for (int j = 0; j < nk; j++) {
            const uint8_t *vj = v + (size_t)j * rb;
            const float w = p[(size_t)h * ps + (size_t)j] * moe_tq_sigma(vj, Dv, bits);
            for (int d = 0; d < Dv; d++) o[d] = fmaf(w, cb[moe_tq_code(vj, Dv, bits, d)], o[d]);
        }
    }
}

static void encode2_scalar(const float *x0, const float *x1, const uint64_t *s, int D, int bits0, int bits1,
                           float *tmp, uint8_t *row0, uint8_t *row1) {
    moe_tq_encode(x0, s, D, bits0, tmp, row0);
    if (x1) moe_tq_encode(x1, s, D, bits1, tmp, row1);
}

void moe_tq_accum_runs(const moe_tq_kernels *k, const float *p, size_t ps, int R, const int *nkr, const uint8_t *v,
                       int Dv, int bits, float *out, size_t os) {
    for (int r = 0, e; r < R; r = e) {
        for (e = r + 1; e < R && nkr[e] == nkr[r]; e++) {}
        k->accum_tq(p + (size_t)r * ps, ps, e - r, v, nkr[r], Dv, bits, out + (size_t)r * os, os);
    }
}

static void accum_tq_rows_scalar(const float *p, size_t ps, int R, const int *nkr, const uint8_t *v, int Dv, int bits,
                                 float *out, size_t os) {
    moe_tq_accum_runs(&moe_tq_scalar, p, ps, R, nkr, v, Dv, bits, out, os);
}

const moe_tq_kernels moe_tq_scalar = {scores_tq_scalar, accum_tq_scalar, accum_tq_rows_scalar, moe_tq_fwht,
                                      moe_tq_encode,    encode2_scalar,  rotate_scalar,        unrotate_scalar};

const moe_tq_kernels *moe_tq_for(const struct moe_attn_kernels *a) {
    return a == &moe_attn_avx512 ? &moe_tq_avx512 : a == &moe_attn_avx2 ? &moe_tq_avx2 : &moe_tq_scalar;
}
