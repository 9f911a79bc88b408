/* lloyd_max.c — computes the Lloyd-Max codebooks of N(0,1) at 3, 4 and 5
 * bits that src/attention/kv_tq.c stores as constants (flags kv_tq,
 * kv_tq_small; docs/KV_TQ.md). Not part of the build; run it by hand:
 *   cc -O2 -std=c11 scripts/lloyd_max.c -lm -o /tmp/lloyd_max && /tmp/lloyd_max
 * Lloyd's iteration on the exact Gaussian density, in double precision:
 *   thresholds t_i = (c_i + c_{i+1}) / 2 (t_0 = -inf, t_L = +inf)
 *   c_i = E[X | t_i < X < t_{i+1}] = (phi(t_i) - phi(t_{i+1})) / (Phi(t_{i+1}) - Phi(t_i))
 * from centroids at the levels' quantile midpoints, until no centroid moves
 * by more than 1e-15; MSE = 1 - sum_i P_i c_i^2 (the centroid condition).
 * The codebooks are symmetric; the run prints the full tables as C floats. */
#include <math.h>
#include <stdio.h>

static double phi(double x) { return isinf(x) ? 0.0 : exp(-0.5 * x * x) / sqrt(2.0 * M_PI); }
static double Phi(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

/* Fills c[0..L-1] (ascending); returns the MSE. */
double lloyd_max_gauss(int L, double *c) {
    for (int i = 0; i < L; i++) c[i] = -3.0 + 6.0 * (i + 0.5) / L;
    for (int it = 0; it < 4000000; it++) {
        double move = 0;
        for (int i = 0; i < L; i++) {
            const double a = i == 0 ? -INFINITY : 0.5 * (c[i - 1] + c[i]);
            const double b = i == L - 1 ? INFINITY : 0.5 * (c[i] + c[i + 1]);
            const double n = (phi(a) - phi(b)) / (Phi(b) - Phi(a));
            if (fabs(n - c[i]) > move) move = fabs(n - c[i]);
            c[i] = n;
        }
        if (move < 1e-13) break;   /* 5 bits: erfc's rounding stalls it near 1e-13 */
    }
    double mse = 1.0;
    for (int i = 0; i < L; i++) {
        const double a = i == 0 ? -INFINITY : 0.5 * (c[i - 1] + c[i]);
        const double b = i == L - 1 ? INFINITY : 0.5 * (c[i] + c[i + 1]);
        mse -= (Phi(b) - Phi(a)) * c[i] * c[i];
    }
    return mse;
}

#ifndef LLOYD_MAX_NO_MAIN
int main(void) {
    for (int bits = 3; bits <= 5; bits++) {
        double c[32];
        const int L = 1 << bits;
        const double mse = lloyd_max_gauss(L, c);
        printf("/* %d bits: MSE %.9f */\n{", bits, mse);
        for (int i = 0; i < L; i++) printf("%s%.9ef%s", i % 4 ? " " : "\n    ", c[i], i < L - 1 ? "," : "");
        printf("},\n");
    }
    return 0;
}
#endif
