/* kv_tq.h — the TurboQuant-style KV cache (flags kv_tq, kv_tq_small;
 * docs/KV_TQ.md): each key and value vector is rotated by a fast
 * Walsh-Hadamard transform times a random sign diagonal, which makes its
 * coordinates near-Gaussian whatever outlier channels the model has, and
 * every coordinate is coded with the Lloyd-Max codebook of N(0,1) at 3, 4
 * or 5 bits; one half scale per vector restores its norm. No calibration,
 * no per-block scales. kv_tq: keys 5 bits, values 4; kv_tq_small: 4 and 3.
 *
 * Rotation of a vector x of D values (D a power of two, >= 32), for the
 * (layer, KV head) of sign bits s (moe_tq_signs: computed, never stored):
 *   t = FWHT(s (.) x), the unnormalised transform: butterflies h = 1, 2, 4,
 *       ... D/2, within each h blocks i = 0, 2h, ... in order, pairs
 *       (a, b) = (t[j], t[j+h]) -> (a + b, a - b)  (moe_tq_fwht)
 *   R x = t * isd, isd = (float)(1 / sqrt(D)): an orthogonal map, so
 *   q . k = (R q) . (R k) and x = s (.) FWHT(R x) * isd.
 * Coding a vector (moe_tq_encode): non-finite -> marked (scale NaN, codes 0);
 * zero -> scale +0, codes 0 (decodes to exact zeros); else n = ||x|| (double),
 * u_d = t_d * (float)(1/n) (~N(0,1) per coordinate), code_d = the number of
 * thresholds (midpoints of adjacent centroids) below u_d, and the scale
 * sigma = half(n / ||cb[code]||): the norm correction (original norm over
 * the reconstruction's), so the decoded vector sigma * cb[code] has x's
 * length. A sigma above the half range is marked like a non-finite input.
 * A marked key's scores are NaN, as an FP32 cache holding a NaN gives, and a
 * marked value makes the head's output NaN: nothing is silently quantized.
 *
 * Row of one vector: the packed codes, then sigma (half, little endian).
 * Codes in groups of 32 dims (g = d / 32, i = d % 32):
 *   4 bits (4 and the low 4 of 5): byte 16g + i%16, low nibble if i < 16,
 *     else high: one 16-byte load gives 32 codes, 16 per nibble.
 *   2 bits (the low 2 of 3): byte 8g + i%8, bits 2*(i/8) .. +1.
 *   1 bit (the top bit of 5 and 3): after the above, uint32 little endian
 *     per group, bit i.
 * Bytes per row: D * bits / 8 + 2 (head dim 128: K5 82 + V4 66 = 148).
 *
 * Kernels (per ISA, bit-identical to the scalar reference):
 * scores_tq: an integer dot product of int8 values, so its sum has no
 *   order to keep and each ISA may put dims or keys in its lanes as suits it
 *   (AVX-512: 16 keys in the lanes of vpdpbusd). Per query head h (its
 *   rotated row qr_h; moe_tq_query_q):
 *     amax = max_d |qr_h[d]|, Q = moe_tq_qmax(D) = 127,
 *     qi_h[d] = lrint(qr_h[d] * (Q / amax)) (in double; |qi| <= Q),
 *     S_h = (amax / Q) * moe_tq_cscale(bits) (float; NaN when amax is not
 *     finite, qi = 0; 0 when amax is 0);
 *   per key j: isum = sum_d qi_h[d] * ck[c_jd] (int32, exact: |isum| <=
 *   D * 127 * 127 < 2^27), ck = moe_tq_codebook_int(bits), the centroids
 *   scaled to +-MOE_TQ_CMAX = 127 and rounded;
 *   sc[h][j] = (((float)isum * S_h) * sigma_j) * scale.
 *   Both roundings stay below the codes' own error: ck's is at most 1/254 of
 *   the largest centroid (5 bits: RMS 0.0074 against the code's 0.050 per
 *   coordinate of N(0,1)), qi's 1/254 of the largest coordinate; int8 is
 *   kv_q8's arithmetic too, at twice the products per instruction of int16.
 * accum_tq, per head h, rotated output o_h:
 *   o_h[d] = +0; for j = 0 .. nk-1 in order: w = p[h][j] * sigma_j,
 *   o_h[d] = fmaf(w, cb[c_jd], o_h[d])
 * then (the block) o_h = s (.) FWHT(o_h) * isd, once per head and step. */
#ifndef MOE_KV_TQ_H
#define MOE_KV_TQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MOE_TQ_MIN_D 32
#define MOE_TQ_MAX_D 4096

/* The Lloyd-Max codebook of N(0,1) at bits (3, 4, 5): 2^bits centroids,
 * ascending; NULL for other widths. Its MSE per coordinate (for tests). */
const float *moe_tq_codebook(int bits);
double moe_tq_codebook_mse(int bits);
/* The integer centroids of scores_tq: ck[c] = lrint(cb[c] * MOE_TQ_CMAX / cb[last])
 * (int8 values held as int16, 2^bits entries); their scale cb[last] / MOE_TQ_CMAX
 * (float). */
#define MOE_TQ_CMAX 127
#define MOE_TQ_QMAX 127
const int16_t *moe_tq_codebook_int(int bits);
float moe_tq_cscale(int bits);
/* The query's integer bound: MOE_TQ_QMAX at every head size (int8). */
int moe_tq_qmax(int D);
/* qi = the rotated query row qr as integers (scores_tq above); returns S. */
float moe_tq_query_q(const float *qr, int D, int bits, int16_t *qi);
/* Whether D is a head size the codec takes (a power of two in 32 .. 4096). */
bool moe_tq_dim_ok(int D);
/* Bytes of one coded vector: the codes and the half scale. */
static inline size_t moe_tq_row_bytes(int D, int bits) { return (size_t)D * (size_t)bits / 8 + 2; }
/* The sign bits of (layer, KV head): bit d of the words (D/64 rounded up)
 * set = coordinate d negated. splitmix64 of a seed mixed from both. */
void moe_tq_signs(int layer, int head, int D, uint64_t *s);
/* In place: t = FWHT(t) in the fixed butterfly order above. */
void moe_tq_fwht(float *t, int D);
/* y = R x (s from moe_tq_signs); y may be x. */
void moe_tq_rotate(const float *x, const uint64_t *s, int D, float *y);
/* x = R^T y, in place. */
void moe_tq_unrotate(float *y, const uint64_t *s, int D);
/* Codes x (D values, finite or not) into row (moe_tq_row_bytes(D, bits));
 * tmp: scratch of D floats. */
void moe_tq_encode(const float *x, const uint64_t *s, int D, int bits, float *tmp, uint8_t *row);
/* The code of dim d, and the row's scale (as float; NaN when marked). */
int moe_tq_code(const uint8_t *row, int D, int bits, int d);
float moe_tq_sigma(const uint8_t *row, int D, int bits);
/* x = R^T (sigma * cb[code]): the decoded vector (tests; attention never
 * decodes keys). */
void moe_tq_decode(const uint8_t *row, const uint64_t *s, int D, int bits, float *x);

typedef struct moe_tq_kernels {
    /* keys: nk rows of row_bytes (moe_tq_row_bytes(D, bits)) from k */
    void (*scores_tq)(const float *qr, size_t q_stride, int G, const uint8_t *k, int nk, int D, int bits, float scale,
                      float *sc, size_t sc_stride);
    void (*accum_tq)(const float *p, size_t p_stride, int G, const uint8_t *v, int nk, int Dv, int bits, float *out,
                     size_t out_stride);
    /* accum_tq of R rows, row r over its own first nkr[r] keys (the tokens
     * of a prefill block: each row's bits are accum_tq's for that row) */
    void (*accum_tq_rows)(const float *p, size_t p_stride, int R, const int *nkr, const uint8_t *v, int Dv, int bits,
                          float *out, size_t out_stride);
    /* moe_tq_fwht: every butterfly with its operands, so the same bits */
    void (*fwht)(float *t, int D);
    /* moe_tq_encode: the same bytes for every input (the norm's and the
     * reconstruction's double sums stay sequential, in dim order) */
    void (*encode)(const float *x, const uint64_t *s, int D, int bits, float *tmp, uint8_t *row);
    /* encode of x0 (bits0, into row0) and x1 (bits1, into row1), two rows
     * of D values under the same signs (a key and a value of one KV head),
     * the same bytes as two encodes; tmp: 2 D floats. x1 NULL: x0 alone. */
    void (*encode2)(const float *x0, const float *x1, const uint64_t *s, int D, int bits0, int bits1, float *tmp,
                    uint8_t *row0, uint8_t *row1);
    /* moe_tq_rotate and moe_tq_unrotate: per coordinate the same sign flip
     * and product, and this table's fwht, so the same bits */
    void (*rotate)(const float *x, const uint64_t *s, int D, float *y);
    void (*unrotate)(float *y, const uint64_t *s, int D);
} moe_tq_kernels;

extern const moe_tq_kernels moe_tq_scalar, moe_tq_avx2, moe_tq_avx512;
/* accum_tq_rows by k's accum_tq over each run of consecutive rows with the
 * same key count (the scalar and AVX-512 tables' accum_tq_rows; AVX2 stages
 * centroids for all rows instead, and its accum_tq is that). */
void moe_tq_accum_runs(const moe_tq_kernels *k, const float *p, size_t ps, int R, const int *nkr, const uint8_t *v,
                       int Dv, int bits, float *out, size_t os);
/* moe_tq_rotate, moe_tq_unrotate and moe_tq_encode with k's kernels (the
 * same bits as those, which use the scalar ones) */
void moe_tq_rotate_k(const moe_tq_kernels *k, const float *x, const uint64_t *s, int D, float *y);
void moe_tq_unrotate_k(const moe_tq_kernels *k, float *y, const uint64_t *s, int D);
void moe_tq_encode_k(const moe_tq_kernels *k, const float *x, const uint64_t *s, int D, int bits, float *tmp,
                     uint8_t *row);
/* Pieces of moe_tq_encode for the vector encodes (the same operations):
 * thr = the 2^bits - 1 thresholds (cb[i] + cb[i + 1]) * 0.5f, in float;
 * sq = cb[c]^2 in double (exact), 2^bits entries. */
void moe_tq_enc_tables(int bits, float *thr, double *sq);
/* The row's scale from n = ||x|| and r2 = sum cb[code]^2 (the norm
 * correction, marked when out of the half range); moe_tq_mark: a
 * non-finite row's mark. */
void moe_tq_put_scale(uint8_t *row, int D, int bits, double n, double r2);
void moe_tq_mark(uint8_t *row, int D, int bits);
/* The rotation's factor (float)(1 / sqrt(D)). */
float moe_tq_isd(int D);
/* The table of the ISA level whose attention table is a (attn.h). */
struct moe_attn_kernels;
const moe_tq_kernels *moe_tq_for(const struct moe_attn_kernels *a);

/* encode2_ISA(x0, x1, s, D, bits0, bits1, tmp, row0, row1): the encode of
 * rows x0 (bits0) and x1 (bits1) of D values under the same signs (x1 NULL:
 * x0 alone; tmp: 2 D floats), shared by the SIMD files. Each defines
 * nonfinite(x, D), enc_codes(x, s, D, bits, thr, n, tmp, row) and
 * code_at(tmp, d); the two rows' double sums (the scalar reference's
 * sequential chains in dim order, the encode's critical path) run side by
 * side in one loop when both rows are live. Needs <math.h> and <string.h>. */
#define MOE_TQ_DEF_ENCODE2(ISA) \
static void encode2_##ISA(const float *x0, const float *x1, const uint64_t *s, int D, int bits0, int bits1, float *tmp, \
    uint8_t *row0, uint8_t *row1) {                                                                                     \
    const float *x[2] = {x0, x1};                                                                                       \
    const int bits[2] = {bits0, bits1}, nr = x1 ? 2 : 1;                                                                \
    uint8_t *row[2] = {row0, row1};                                                                                     \
    bool live[2] = {false, false};                                                                                      \
    for (int i = 0; i < nr; i++) {                                                                                      \
        memset(row[i], 0, moe_tq_row_bytes(D, bits[i]));                                                                \
        if (nonfinite(x[i], D)) moe_tq_mark(row[i], D, bits[i]);                                                        \
        else live[i] = true;                                                                                            \
    }                                                                                                                   \
    double n2[2] = {0, 0};                                                                                              \
    if (live[0] && live[1])                                                                                             \
        for (int d = 0; d < D; d++) {                                                                                   \
            n2[0] += (double)x0[d] * (double)x0[d];                                                                     \
            n2[1] += (double)x1[d] * (double)x1[d];                                                                     \
        }                                                                                                               \
    else                                                                                                                \
        for (int i = 0; i < nr; i++)                                                                                    \
            if (live[i])                                                                                                \
                for (int d = 0; d < D; d++) n2[i] += (double)x[i][d] * (double)x[i][d];                                 \
    double n[2], r2[2] = {0, 0}, sq[2][32];                                                                             \
    float thr[32];                                                                                                      \
    for (int i = 0; i < nr; i++) {                                                                                      \
        live[i] = live[i] && n2[i] != 0;                           /* exact zeros: sigma +0 */                          \
        if (!live[i]) continue;                                                                                         \
        n[i] = sqrt(n2[i]);                                                                                             \
        moe_tq_enc_tables(bits[i], thr, sq[i]);                                                                         \
        enc_codes(x[i], s, D, bits[i], thr, n[i], tmp + (size_t)i * D, row[i]);                                         \
    }                                                                                                                   \
    const float *c0 = tmp, *c1 = tmp + D;                                                                               \
    if (live[0] && live[1])                                                                                             \
        for (int d = 0; d < D; d++) {                                                                                   \
            r2[0] += sq[0][code_at(c0, d)];                                                                             \
            r2[1] += sq[1][code_at(c1, d)];                                                                             \
        }                                                                                                               \
    else                                                                                                                \
        for (int i = 0; i < nr; i++)                                                                                    \
            if (live[i])                                                                                                \
                for (int d = 0; d < D; d++) r2[i] += sq[i][code_at(tmp + (size_t)i * D, d)];                            \
    for (int i = 0; i < nr; i++)                                                                                        \
        if (live[i]) moe_tq_put_scale(row[i], D, bits[i], n[i], r2[i]);                                                 \
}

#endif
