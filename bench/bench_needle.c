/* bench_needle.c — the kernel-level needle test of issue #26 (prints, never
 * asserts): can attention still find one key among 16,384 once the cache is
 * quantized? Per trial: 16,384 random keys (N(0,1) per dim; "outliers":
 * channels 5 and 17 at 8x, kurtosis ~50, as real keys have) and a query;
 * one needle key planted so that its exact score exceeds the best other
 * key's by m standard deviations of the scores (the needle = a random key
 * with its component along the query set to reach that score). Each cache
 * format stores every key with the engine's own code (FP32; kv_f16: half;
 * kv_q8: act8 blocks, scores_q8; kv_tq, kv_tq_small: kv_tq.h, the query
 * rotated) and scores them with the scalar kernels (every ISA gives the
 * same bits). Printed per format and head size: the smallest m (grid 0.02)
 * at which the needle is the argmax in >= 99 % of the trials, and at that
 * m the mean relative error of the needle's softmax weight (scale 1/sqrt(D))
 * against the exact (double) weight.
 * Usage: bench_needle [trials] (default 100; ~0.75 s of CPU per trial at
 * both head sizes, mostly drawing and coding the 16,384 keys). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/attn.h"
#include "attention/kv_tq.h"
#include "base/util.h"
#include "quant/quant.h"

#define NK 16384
#define NM 201          /* m = 0, 0.02, ... 4.0 */
#define NF 5
static const char *const FMT[NF] = {"FP32", "kv_f16", "kv_q8", "kv_tq", "kv_tq_small"};

typedef struct {
    int D;
    float *keys, *sc;           /* [NK + 1][D] (the needle last), scores [NK + 1] */
    uint16_t *kh;               /* kv_f16 */
    int8_t *k8;                 /* kv_q8 tiles */
    uint16_t *kd;
    uint8_t *xa, *qa;           /* A8 rows */
    uint8_t *tq[2];             /* kv_tq (5 bits), kv_tq_small (4 bits) rows */
    uint64_t s[MOE_TQ_MAX_D / 64];
} bufs;

static const int CP = (NK + 1 + 15) / 16 * 16;

/* Stores key j in every format. */
static void store(bufs *b, int j) {
    const int D = b->D;
    const float *k = b->keys + (size_t)j * D;
    for (int d = 0; d < D; d++) b->kh[(size_t)j * D + d] = moe_f32_to_f16(k[d]);
    moe_quantize_act8(k, b->xa, D);
    moe_kv8_store_key(b->xa, D, b->k8, b->kd, (size_t)CP, j);
    float tmp[MOE_TQ_MAX_D];
    for (int f = 0; f < 2; f++)
        moe_tq_encode(k, b->s, D, f ? 4 : 5, tmp, b->tq[f] + (size_t)j * moe_tq_row_bytes(D, f ? 4 : 5));
}

/* Scores of keys j0 .. j0+n-1 in format f into sc[j0 ..]. */
static void score(bufs *b, int f, const float *q, const float *qr, int j0, int n) {
    const int D = b->D;
    const float scale = 1.0f / sqrtf((float)D);
    const moe_attn_kernels *a = &moe_attn_scalar;
    if (f == 0) a->scores(q, (size_t)D, 1, b->keys + (size_t)j0 * D, (size_t)D, n, D, scale, b->sc + j0, 1);
    if (f == 1) a->scores_h(q, (size_t)D, 1, b->kh + (size_t)j0 * D, (size_t)D, n, D, scale, b->sc + j0, 1);
    if (f == 2) a->scores_q8(b->qa, 0, 1, b->k8, b->kd, (size_t)CP, j0, n, D, scale, b->sc, 1);
    if (f >= 3) {
        const int bits = f == 3 ? 5 : 4;
        moe_tq_scalar.scores_tq(qr, (size_t)D, 1, b->tq[f - 3] + (size_t)j0 * moe_tq_row_bytes(D, bits), n, D, bits, scale,
                                b->sc + j0, 1);
    }
}

static void run(int D, bool outliers, int trials) {
    bufs b = {.D = D};
    b.keys = malloc(sizeof(float) * (size_t)(NK + 1) * D);
    b.sc = malloc(sizeof(float) * (NK + 1));
    b.kh = malloc(sizeof(uint16_t) * (size_t)(NK + 1) * D);
    b.k8 = calloc((size_t)CP, (size_t)D);
    b.kd = calloc((size_t)CP * (size_t)(D / 32), sizeof(uint16_t));
    b.xa = malloc((size_t)moe_act8_row_bytes(D));
    b.qa = malloc((size_t)moe_act8_row_bytes(D));
    for (int f = 0; f < 2; f++) b.tq[f] = malloc(moe_tq_row_bytes(D, f ? 4 : 5) * (NK + 1));
    double *ex = malloc(sizeof(double) * NK);
    static int hits[NF][NM];
    static double werr[NF][NM];
    memset(hits, 0, sizeof hits);
    memset(werr, 0, sizeof werr);
    moe_rng r;
    moe_rng_seed(&r, (uint64_t)D * 1000 + outliers);
    float q[MOE_TQ_MAX_D], qr[MOE_TQ_MAX_D], u[MOE_TQ_MAX_D];
    float hay_max[NF];
    double hay_sum[NF];         /* sum over the haystack of exp(score - hay_max) */
    for (int t = 0; t < trials; t++) {
        moe_tq_signs(t, 0, D, b.s);
        for (size_t i = 0; i < (size_t)NK * D; i++) b.keys[i] = (float)moe_rng_normal(&r);
        if (outliers)
            for (int j = 0; j < NK; j++) b.keys[(size_t)j * D + 5] *= 8.0f, b.keys[(size_t)j * D + 17] *= 8.0f;
        for (int d = 0; d < D; d++) q[d] = (float)moe_rng_normal(&r);
        for (int j = 0; j < NK; j++) store(&b, j);
        moe_quantize_act8(q, b.qa, D);
        moe_tq_rotate(q, b.s, D, qr);
        /* exact scores: mean, sd, best; then each format's best of the haystack */
        double qq = 0, mu = 0, m2 = 0, best = -INFINITY;
        for (int d = 0; d < D; d++) qq += (double)q[d] * q[d];
        for (int j = 0; j < NK; j++) {
            double s = 0;
            for (int d = 0; d < D; d++) s += (double)q[d] * b.keys[(size_t)j * D + d];
            ex[j] = s / sqrt((double)D);
            mu += ex[j];
            m2 += ex[j] * ex[j];
            if (ex[j] > best) best = ex[j];
        }
        mu /= NK;
        const double sd = sqrt(m2 / NK - mu * mu);
        for (int f = 0; f < NF; f++) {
            score(&b, f, q, qr, 0, NK);
            float mx = -INFINITY;
            for (int j = 0; j < NK; j++) mx = b.sc[j] > mx ? b.sc[j] : mx;
            hay_max[f] = mx;
            hay_sum[f] = 0;
            for (int j = 0; j < NK; j++) hay_sum[f] += exp((double)b.sc[j] - mx);
        }
        /* the needle's direction off the query: a random key, its q part removed */
        double uq = 0;
        for (int d = 0; d < D; d++) u[d] = outliers && (d == 5 || d == 17) ? 8.0f * (float)moe_rng_normal(&r) : (float)moe_rng_normal(&r);
        for (int d = 0; d < D; d++) uq += (double)u[d] * q[d];
        for (int mi = 0; mi < NM; mi++) {
            const double target = best + 0.02 * mi * sd;               /* the needle's exact score */
            const double beta = (target * sqrt((double)D) - 0.0) / qq;
            float *k = b.keys + (size_t)NK * D;
            for (int d = 0; d < D; d++) k[d] = (float)(u[d] - uq / qq * q[d] + beta * q[d]);
            store(&b, NK);
            /* the exact needle weight: exp(target) / (sum exp(hay) + exp(target)), shifted */
            double z = 1.0;
            for (int j = 0; j < NK; j++) z += exp(ex[j] - target);
            const double w_ex = 1.0 / z;
            for (int f = 0; f < NF; f++) {
                score(&b, f, q, qr, NK, 1);
                const float sn = b.sc[NK];
                hits[f][mi] += sn > hay_max[f];
                const double zf = 1.0 + hay_sum[f] * exp((double)hay_max[f] - sn);
                werr[f][mi] += fabs(1.0 / zf - w_ex) / w_ex;
            }
        }
    }
    printf("D %d, %s keys, %d trials of %d keys + a needle:\n", D, outliers ? "outlier-channel" : "Gaussian", trials, NK);
    for (int f = 0; f < NF; f++) {
        int mi = 0;
        while (mi < NM && hits[f][mi] * 100 < 99 * trials) mi++;
        if (mi < NM)
            printf("  %-12s needle is the argmax in >= 99 %% from m = %.2f sd; softmax weight error there %.2f %%\n",
                   FMT[f], 0.02 * mi, 100 * werr[f][mi] / trials);
        else printf("  %-12s needle not the argmax in 99 %% even at m = 4\n", FMT[f]);
    }
    free(b.keys); free(b.sc); free(b.kh); free(b.k8); free(b.kd); free(b.xa); free(b.qa);
    free(b.tq[0]); free(b.tq[1]); free(ex);
}

int main(int argc, char **argv) {
    const int trials = argc > 1 ? atoi(argv[1]) : 100;
    for (int D = 64; D <= 128; D *= 2) {
        run(D, false, trials > 0 ? trials : 100);
        run(D, true, trials > 0 ? trials : 100);
    }
    return 0;
}
