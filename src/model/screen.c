/* screen.c — the certified lm-head screen (screen.h; the proofs:
 * docs/SCREEN.md). Every bound below is an upper bound computed in double
 * precision with an explicit factor that covers double's own rounding; the
 * comments name the lemma of docs/SCREEN.md each step rests on. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moefast.h"
#include "base/util.h"
#include "model/model.h"
#include "model/screen.h"

/* (1 + 2^-30): covers the relative error of a double computation of at most
 * 2^20 terms (n·2^-53 < 2^-33; SCREEN.md, lemma D). */
#define UP 1.0000000009313225746

double moe_screen_gamma(int64_t d) {
    const double u = ldexp(1.0, -24), du = (double)d * u;  /* exact: d < 2^29 */
    return du / (1.0 - du) * UP;
}
int64_t moe_screen_depth_kernel(int64_t n) { return (n + 15) / 16 + 4; }
int64_t moe_screen_depth_screen(int64_t n) { return (n + 15) / 16 + 5; }

/* A double rounded to a float no smaller than it. */
static float up_f(double v) {
    float f = (float)v;
    if ((double)f < v) f = nextafterf(f, INFINITY);
    return f;
}

void moe_screen_free(moe_screen *s) {
    if (!s) return;
    free(s->hi); free(s->lo); free(s->sexp); free(s->sd);
    free(s->d1); free(s->d2); free(s->wnorm); free(s->r1norm);
    free(s);
}

size_t moe_screen_bytes(const moe_screen *s) {
    if (!s) return 0;
    const size_t V = (size_t)s->V, half = (size_t)s->n / 2, nb = (size_t)s->nb;
    return V * half * (s->levels == 2 ? 2 : 1) + V * nb * (s->levels == 2 ? 1 : 2) + V * 3 * sizeof(float);
}

double moe_screen_l1_bytes(const moe_screen *s) {
    return s ? (double)s->V * ((double)(s->n / 2) + (double)s->nb * (s->levels == 2 ? 1 : 2) + 4) : 0;
}

/* Smallest e with 127·2^e >= m (m > 0 finite), clamped to [-120, 100]. */
static int block_exp(double m) {
    int e = ilogb(m) - 6;
    while (ldexp(127.0, e) < m) e++;
    while (ldexp(127.0, e - 1) >= m) e--;
    return e < -120 ? -120 : e > 100 ? 100 : e;
}

static float scale_of(const moe_screen *s, int64_t i, int64_t b) {
    if (s->levels == 2) {
        uint32_t bits = (uint32_t)s->sexp[i * s->nb + b] << 23;
        float f;
        memcpy(&f, &bits, 4);
        return f;
    }
    return moe_f16_to_f32(s->sd[i * s->nb + b]);
}

/* The 8-bit codes u = c + 128 of one row (and the block scales); false
 * when the row holds a value the screen does not cover. */
static bool row_codes(moe_screen *s, int64_t i, const float *w, const uint8_t *raw, uint8_t *u) {
    for (int64_t b = 0; b < s->nb; b++) {
        const float *wb = w + b * 32;
        double m = 0;
        for (int j = 0; j < 32; j++) {
            if (!isfinite(wb[j])) return false;
            if (fabs(wb[j]) > m) m = fabs(wb[j]);
        }
        if (m > 0x1p100) return false;
        if (s->levels == 1) {               /* Q8_0: its own codes and scale */
            const uint8_t *blk = raw + b * 34;
            s->sd[i * s->nb + b] = (uint16_t)(blk[0] | blk[1] << 8);
            for (int j = 0; j < 32; j++) u[b * 32 + j] = (uint8_t)((int)(int8_t)blk[2 + j] + 128);
            continue;
        }
        const int e = m > 0 ? block_exp(m) : -120;
        s->sexp[i * s->nb + b] = (uint8_t)(e + 127);
        for (int j = 0; j < 32; j++) {
            double c = nearbyint((double)wb[j] * ldexp(1.0, -e));  /* exact scaling in double */
            if (c > 127) c = 127;
            if (c < -128) c = -128;
            u[b * 32 + j] = (uint8_t)((int)c + 128);
        }
    }
    return true;
}

/* Packs value j of a block in the low nibble of byte j, value j+16 in the
 * high nibble (the 16 lanes of the screen sum each take two). */
static void pack_nibbles(const uint8_t *v, uint8_t *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++)
        for (int j = 0; j < 16; j++) dst[b * 16 + j] = (uint8_t)((v[b * 32 + j] & 15) | (v[b * 32 + j + 16] & 15) << 4);
}

/* Norm bounds (lemma D) and the per-level constants d_L (theorem 1). */
static void row_bounds(moe_screen *s, int64_t i, const float *w, const uint8_t *u) {
    const double gk = moe_screen_gamma(moe_screen_depth_kernel(s->n));
    const double gs = moe_screen_gamma(moe_screen_depth_screen(s->n));
    double ww = 0, r1 = 0, r2 = 0;
    for (int64_t k = 0; k < s->n; k++) {
        const double sc = scale_of(s, i, k / 32), wk = w[k];
        const int hi = u[k] >> 4, lo = u[k] & 15;
        const double p1 = (16.0 * hi - 120.0) * sc, p2 = (16.0 * hi + lo - 128.0) * sc;
        ww += wk * wk;
        r1 += (wk - p1) * (wk - p1);
        r2 += (wk - p2) * (wk - p2);
    }
    const double W = sqrt(ww) * UP, R1 = sqrt(r1) * UP, R2 = sqrt(r2) * UP;
    s->wnorm[i] = up_f(W);
    s->r1norm[i] = up_f(R1);
    s->d1[i] = up_f((gk * W + R1 + gs * (W + R1)) * UP);
    if (s->levels == 2) s->d2[i] = up_f((gk * W + R2 + gs * (W + R2)) * UP);
}

moe_screen *moe_screen_build(uint32_t type, const uint8_t *data, size_t row_bytes, int64_t V, int64_t n,
                             const char **why) {
    *why = NULL;
    const int levels = type == MOE_T_Q8_0 ? 1 : (type == MOE_T_F32 || type == MOE_T_F16 || type == MOE_T_BF16) ? 2 : 0;
    if (!levels) { *why = "no screen for this head format (the full head runs)"; return NULL; }
    if (n % 32 || n <= 0 || V <= 0 || n > (1 << 20)) { *why = "head rows are not a multiple of 32 values"; return NULL; }
    moe_screen *s = calloc(1, sizeof *s);
    float *w = malloc((size_t)n * sizeof(float));
    uint8_t *u = malloc((size_t)n), *tmp = malloc((size_t)n);
    if (!s || !w || !u || !tmp) goto oom;
    s->V = V, s->n = n, s->nb = n / 32, s->levels = levels, s->type = type;
    s->tiny = (double)n * 0x1p-148;
    const size_t half = (size_t)(n / 2);
    s->hi = malloc((size_t)V * half);
    s->d1 = malloc((size_t)V * sizeof(float));
    s->wnorm = malloc((size_t)V * sizeof(float));
    s->r1norm = malloc((size_t)V * sizeof(float));
    s->scale_emin = 1000, s->scale_emax = -1000;
    if (levels == 2) {
        s->lo = malloc((size_t)V * half);
        s->sexp = malloc((size_t)V * (size_t)s->nb);
        s->d2 = malloc((size_t)V * sizeof(float));
    } else {
        s->sd = malloc((size_t)V * (size_t)s->nb * 2);
    }
    if (!s->hi || !s->d1 || !s->wnorm || !s->r1norm || (levels == 2 ? !s->lo || !s->sexp || !s->d2 : !s->sd)) goto oom;
    for (int64_t i = 0; i < V; i++) {
        const uint8_t *raw = data + (size_t)i * row_bytes;
        moe_dequant_row(type, raw, w, n);
        if (!row_codes(s, i, w, raw, u)) {
            *why = "the head holds a non-finite or huge (> 2^100) weight";
            goto fail;
        }
        for (int64_t k = 0; k < n; k++) tmp[k] = u[k] >> 4;
        pack_nibbles(tmp, s->hi + (size_t)i * half, s->nb);
        if (levels == 2) {
            for (int64_t k = 0; k < n; k++) tmp[k] = u[k] & 15;
            pack_nibbles(tmp, s->lo + (size_t)i * half, s->nb);
        }
        row_bounds(s, i, w, u);
        for (int64_t b = 0; b < s->nb; b++) {            /* the scales' range (|scale| in [2^emin, 2^emax]) */
            const float sc = fabsf(scale_of(s, i, b));
            if (sc == 0) continue;
            const int e = ilogbf(sc);
            if (e < s->scale_emin) s->scale_emin = e;
            if (e + 1 > s->scale_emax) s->scale_emax = e + 1;
        }
        if (s->wnorm[i] > s->wnorm_max) s->wnorm_max = s->wnorm[i];
    }
    free(w); free(u); free(tmp);
    return s;
oom:
    *why = "out of memory for the lm-head screen";
fail:
    free(w); free(u); free(tmp);
    moe_screen_free(s);
    return NULL;
}

double moe_screen_xnorm(const float *x, int64_t n) {
    double ss = 0;
    for (int64_t k = 0; k < n; k++) {
        if (!isfinite(x[k])) return INFINITY;
        ss += (double)x[k] * (double)x[k];
    }
    return sqrt(ss) * UP;
}

/* The screen sum: 16 lanes, lane j adds the products of values j and j+16
 * of each block, a product and an add each (not fused: -ffp-contract=off),
 * then quant.h's tree. Depth ceil(n/16) + 5 (theorem 1, part b). */
float moe_screen_value(const moe_screen *s, int level, int64_t i, const float *x) {
    const size_t half = (size_t)s->n / 2;
    const uint8_t *hp = s->hi + (size_t)i * half, *lp = level == 2 ? s->lo + (size_t)i * half : NULL;
    float acc[16] = {0};
    for (int64_t b = 0; b < s->nb; b++) {
        const float sc = scale_of(s, i, b);
        const uint8_t *hb = hp + b * 16;
        const float *xb = x + b * 32;
        if (lp) {
            const uint8_t *lb = lp + b * 16;
            for (int j = 0; j < 16; j++) {
                const float p0 = (float)(16 * (hb[j] & 15) + (lb[j] & 15) - 128) * sc;
                const float p1 = (float)(16 * (hb[j] >> 4) + (lb[j] >> 4) - 128) * sc;
                acc[j] = acc[j] + p0 * xb[j];
                acc[j] = acc[j] + p1 * xb[j + 16];
            }
        } else {
            for (int j = 0; j < 16; j++) {
                const float p0 = (float)(16 * (hb[j] & 15) - 120) * sc;
                const float p1 = (float)(16 * (hb[j] >> 4) - 120) * sc;
                acc[j] = acc[j] + p0 * xb[j];
                acc[j] = acc[j] + p1 * xb[j + 16];
            }
        }
    }
    return moe_screen_reduce16(acc);
}

void moe_screen_level1_rows(const moe_screen *s, moe_isa isa, int64_t r0, int64_t r1, const float *x, float *out) {
    if (isa == MOE_ISA_AVX512) moe_screen_l1_avx512(s, r0, r1, x, out);
    else if (isa == MOE_ISA_AVX2) moe_screen_l1_avx2(s, r0, r1, x, out);
    else
        for (int64_t i = r0; i < r1; i++) out[i] = moe_screen_value(s, 1, i, x);
}

double moe_screen_delta(const moe_screen *s, int level, int64_t i, double xn, bool shrink) {
    const double d = (double)(level == 2 ? s->d2[i] : s->d1[i]);
    const double delta = xn * d * UP + s->tiny;
    return shrink ? delta / 4 : delta;
}

/* Whether the exact logit of a row with screen value v and bound delta may
 * reach tau: v + delta in double, plus a margin for that sum's rounding. */
static bool may_reach(float v, double delta, float tau) {
    const double up = (double)v + delta;
    return up + (fabs((double)v) + delta) * 0x1p-50 >= (double)tau;
}

/* ---- the integer level 1 (Theorem 1') ----------------------------------------- */

bool moe_screen_int_ok(const moe_screen *s) { return s->n % 512 == 0 && s->scale_emin <= s->scale_emax; }

bool moe_screen_int_prep(const moe_screen *s, const float *x, const moe_screen_scratch *scr, double *en, double *xhn) {
    double ee = 0, hh = 0;
    int tmin = 1000, tmax = -1000;
    for (int64_t b = 0; b < s->nb; b++) {
        const float *xb = x + b * 32;
        double m = 0;
        for (int j = 0; j < 32; j++) m = fabs(xb[j]) > m ? fabs(xb[j]) : m;
        if (m > 0x1p100) return false;
        const int e = m > 0 ? block_exp(m) : 0;
        if (m > 0) tmin = e < tmin ? e : tmin, tmax = e > tmax ? e : tmax;
        const int64_t p = b / 2, half = b % 2;
        for (int j = 0; j < 32; j++) {
            double q = nearbyint((double)xb[j] * ldexp(1.0, -e));    /* exact scaling in double */
            q = q > 127 ? 127 : q < -127 ? -127 : q;
            const double xh = q * ldexp(1.0, e), d = (double)xb[j] - xh;
            ee += d * d, hh += xh * xh;
            /* pair order: [b0 0..15 | b1 0..15 | b0 16..31 | b1 16..31] */
            scr->xq[p * 64 + (j < 16 ? 0 : 32) + half * 16 + (j & 15)] = (int8_t)q;
        }
    }
    /* every product scale x 2^e must be a normal float (then exact) and far from overflow */
    if (tmin <= tmax && (s->scale_emin + tmin < -125 || s->scale_emax + tmax > 100)) return false;
    for (int64_t p = 0; p < s->nb / 2; p++)
        for (int l = 0; l < 16; l++) {
            int sum = 0;
            for (int j = 0; j < 4; j++) sum += scr->xq[p * 64 + 4 * l + j];
            scr->q120[p * 16 + l] = 120 * sum;
            const int64_t b = 2 * p + ((l >> 2) & 1);
            const float *xb = x + b * 32;
            double m = 0;
            for (int j = 0; j < 32; j++) m = fabs(xb[j]) > m ? fabs(xb[j]) : m;
            scr->tv[p * 16 + l] = ldexpf(1.0f, m > 0 ? block_exp(m) : 0);
        }
    *en = sqrt(ee) * UP;
    *xhn = sqrt(hh) * UP;
    return true;
}

/* The specification: per pair p and lane l, L = sum of 4 (16h - 120)·q (an
 * exact int32: |L| <= 4·120·127), times the block's scale x 2^e (exact: the
 * range check), added to lane l; then the tree. */
float moe_screen_int_value(const moe_screen *s, int64_t i, const moe_screen_scratch *scr) {
    const uint8_t *hp = s->hi + (size_t)i * ((size_t)s->n / 2);
    float acc[16] = {0};
    for (int64_t p = 0; p < s->nb / 2; p++)
        for (int l = 0; l < 16; l++) {
            int D = 0;
            for (int j = 0; j < 4; j++) {
                const int pos = 4 * l + j;                      /* byte 32p + pos % 32, nibble pos < 32 ? low : high */
                const int nib = (hp[p * 32 + (pos & 31)] >> (pos < 32 ? 0 : 4)) & 15;
                D += nib * scr->xq[p * 64 + pos];
            }
            const int L = 16 * D - scr->q120[p * 16 + l];
            const float sv = scale_of(s, i, 2 * p + ((l >> 2) & 1)) * scr->tv[p * 16 + l];
            acc[l] = acc[l] + (float)L * sv;
        }
    return moe_screen_reduce16(acc);
}

double moe_screen_int_delta(const moe_screen *s, int64_t i, double xn, double en, double xhn, bool shrink) {
    const double gk = moe_screen_gamma(moe_screen_depth_kernel(s->n)), gi = moe_screen_gamma(s->n / 64 + 5);
    const double W = s->wnorm[i], R = s->r1norm[i];
    const double delta = (xn * (gk * W + R) + (W + R) * (en + gi * xhn)) * UP + s->tiny;
    return shrink ? delta / 4 : delta;
}

typedef struct {
    const moe_screen *s;
    moe_isa isa;
    const float *x;
    float *s1;
    const moe_screen_scratch *iscr;   /* the integer pass (AVX-512), or NULL */
} pass_task;

static void pass_worker(void *arg, int ith, int nth) {
    pass_task *t = arg;
    int64_t b, e;
    moe_split(t->s->V, ith, nth, 1, &b, &e);
    if (t->iscr) moe_screen_int_avx512(t->s, b, e, t->iscr, t->s1);
    else moe_screen_level1_rows(t->s, t->isa, b, e, t->x, t->s1);
}

/* Runs the kernel on the rows around i (a whole x4 group, or the trailing
 * plain rows, or row i alone); returns the rows it evaluated. */
static int64_t eval_rows(const moe_weight *w, const moe_kernels *k, const float *x, int64_t i,
                         const moe_screen_scratch *scr) {
    const int64_t V = w->n_out, full = V - V % 4;
    int64_t r0 = i, r1 = i + 1;
    if (w->x4) {
        r0 = i < full ? i & ~(int64_t)3 : full;
        r1 = i < full ? r0 + 4 : V;
    }
    if (scr->done[i]) return 0;
    (w->x4 ? k->gemv_x4 : k->gemv)[w->type](w->data + (size_t)r0 * w->row_bytes, w->row_bytes, r1 - r0, x,
                                             scr->y + r0, w->n_in);
    for (int64_t r = r0; r < r1; r++) scr->done[r] = 1;
    return r1 - r0;
}

float moe_screen_row_logit(const moe_weight *w, const moe_kernels *k, const float *x, int64_t i, float *y) {
    const int64_t V = w->n_out, full = V - V % 4;
    const int64_t r0 = !w->x4 ? i : i < full ? i & ~(int64_t)3 : full, r1 = !w->x4 ? i + 1 : i < full ? r0 + 4 : V;
    (w->x4 ? k->gemv_x4 : k->gemv)[w->type](w->data + (size_t)r0 * w->row_bytes, w->row_bytes, r1 - r0, x, y + r0,
                                             w->n_in);
    return y[i];
}

int moe_screen_topk(const moe_screen *s, const moe_weight *w, const moe_kernels *k, moe_context *c, const float *x,
                    int kk, int32_t *ids, float *vals, const moe_screen_scratch *scr, bool shrink, moe_screen_step *st) {
    memset(st, 0, sizeof *st);
    st->fallback = true;
    const int64_t V = s->V, n = s->n, budget = V / 8 > 64 ? V / 8 : 64;
    if (kk < 1 || kk > 64 || kk > V || w->a8 || w->scale || w->n_out != V || w->n_in != n) return 0;
    const double xn = moe_screen_xnorm(x, n);
    if (!(xn * (double)s->wnorm_max <= 0x1p100)) return 0;   /* non-finite x, or a risk of overflow */
    double en = 0, xhn = 0;
    const bool integer = k->isa == MOE_ISA_AVX512 && scr->xq && moe_screen_int_ok(s) &&
                         moe_screen_int_prep(s, x, scr, &en, &xhn);
    pass_task t = {s, k->isa, x, scr->s1, integer ? scr : NULL};
    if (c) moe_ctx_par(c, pass_worker, &t);
    else pass_worker(&t, 0, 1);
    const double half = (double)(n / 2);
    st->bytes = moe_screen_l1_bytes(s);
    /* seeds: the kk best screen values; tau = the worst of their exact logits */
    int32_t seed[64];
    float sv[64];
    if (moe_topk(scr->s1, (int)V, kk, seed, sv) != kk) return 0;
    memset(scr->done, 0, (size_t)V);
    int64_t exact = 0;
    for (int j = 0; j < kk; j++) exact += eval_rows(w, k, x, seed[j], scr);
    float tau = INFINITY;
    for (int j = 0; j < kk; j++) {
        const float y = scr->y[seed[j]];
        if (!isfinite(y)) return 0;
        if (y < tau) tau = y;
    }
    /* every row whose bound reaches tau is evaluated (theorem 2) */
    for (int64_t i = 0; i < V && exact <= budget; i++) {
        if (scr->done[i]) continue;
        if (!isfinite(scr->s1[i])) return 0;
        const double d1 = integer ? moe_screen_int_delta(s, i, xn, en, xhn, shrink) : moe_screen_delta(s, 1, i, xn, shrink);
        if (!may_reach(scr->s1[i], d1, tau)) continue;
        if (s->levels == 2) {
            st->level2_rows++;
            const float v2 = moe_screen_value(s, 2, i, x);
            if (!isfinite(v2)) return 0;
            if (!may_reach(v2, moe_screen_delta(s, 2, i, xn, shrink), tau)) continue;
        }
        exact += eval_rows(w, k, x, i, scr);
    }
    if (exact > budget) return 0;                             /* the governor: speed only */
    int64_t cnt = 0;
    for (int64_t i = 0; i < V; i++) {
        if (!scr->done[i]) continue;
        if (!isfinite(scr->y[i])) return 0;
        scr->ids[cnt] = (int32_t)i;
        scr->s1[cnt++] = scr->y[i];                           /* s1 is no longer needed: the compact logits */
    }
    int32_t pos[64];
    const int got = moe_topk(scr->s1, (int)cnt, kk, pos, vals);
    for (int j = 0; j < got; j++) ids[j] = scr->ids[pos[j]];
    st->level2_rows = s->levels == 2 ? st->level2_rows : 0;
    st->exact_rows = exact;
    st->bytes += (double)st->level2_rows * (half + 4) + (double)exact * (double)w->row_bytes;
    st->fallback = false;
    return got;
}
