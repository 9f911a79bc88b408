/* stats.h — the small order statistics `bench --ab` and `price` share
 * (header-only: two users, a few lines each). */
#ifndef MOE_TOOLS_STATS_H
#define MOE_TOOLS_STATS_H

#include <stdint.h>
#include <stdlib.h>

static inline int stats_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (v is reordered). */
static inline double stats_median_inplace(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, stats_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* q-quantile of sorted v, linear interpolation between order statistics. */
static inline double stats_quantile_sorted(const double *v, int n, double q) {
    double pos = q * (n - 1);
    int i = (int)pos;
    if (i >= n - 1) return v[n - 1];
    return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

/* splitmix64: the seed expander of both bootstraps (fixed seeds, so reports repeat) */
static inline uint64_t stats_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
