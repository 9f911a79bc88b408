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

/* Decode windows against the read bandwidth measured right before (b0[i])
 * and right after (b1[i]) window i, GB/s, 0 where a measurement failed.
 * Why both: this VM's bandwidth can change state within a window, and a
 * single measurement after it then belongs to another state (one window read
 * "120 %" of its limit so). A window's bandwidth bw[i] is the mean of its
 * measurements that worked; it is steady when both worked and the larger is
 * at most STATS_BW_STEADY times the smaller. pct[i] = 100 * rate[i] / bw[i]
 * (rate: the window's achieved GB/s). The summary's bw and pct are medians
 * over the steady windows, or over every measured window when none was
 * steady; lo..hi spans the measured windows' bw. */
#define STATS_BW_STEADY 1.15
typedef struct {
    double bw, pct, lo, hi;
    int measured, steady;     /* windows with a bandwidth; of those, steady ones */
} stats_bw_summary;

static inline void stats_bw_windows(const double *b0, const double *b1, const double *rate, int n, double *bw,
                                    double *pct, int *steady, stats_bw_summary *sum) {
    double vb[n > 0 ? n : 1], vp[n > 0 ? n : 1], sb[n > 0 ? n : 1], sp[n > 0 ? n : 1];
    int nm = 0, ns = 0;
    *sum = (stats_bw_summary){0, 0, 0, 0, 0, 0};
    for (int i = 0; i < n; i++) {
        const int k = (b0[i] > 0) + (b1[i] > 0);
        bw[i] = k ? ((b0[i] > 0 ? b0[i] : 0) + (b1[i] > 0 ? b1[i] : 0)) / k : 0;
        pct[i] = bw[i] > 0 ? 100.0 * rate[i] / bw[i] : 0;
        steady[i] = k == 2 && (b0[i] > b1[i] ? b0[i] / b1[i] : b1[i] / b0[i]) <= STATS_BW_STEADY;
        if (!k) continue;
        if (!nm || bw[i] < sum->lo) sum->lo = bw[i];
        if (!nm || bw[i] > sum->hi) sum->hi = bw[i];
        vb[nm] = bw[i];
        vp[nm++] = pct[i];
        if (steady[i]) {
            sb[ns] = bw[i];
            sp[ns++] = pct[i];
        }
    }
    sum->measured = nm;
    sum->steady = ns;
    if (ns) {
        sum->bw = stats_median_inplace(sb, ns);
        sum->pct = stats_median_inplace(sp, ns);
    } else if (nm) {
        sum->bw = stats_median_inplace(vb, nm);
        sum->pct = stats_median_inplace(vp, nm);
    }
}

/* splitmix64: the seed expander of both bootstraps (fixed seeds, so reports repeat) */
static inline uint64_t stats_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
