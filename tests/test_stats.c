/* test_stats.c — the order statistics the CLI's instruments share
 * (tools/stats.h): medians, quantiles, and the decode windows' bandwidth
 * summary of `bench` (a window counts when the read bandwidth measured right
 * before and right after it agree). */
#include <math.h>

#include "check.h"
#include "../tools/stats.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(b) > 1 ? fabs(b) : 1); }

int main(void) {
    double v[] = {5, 1, 4, 2, 3};
    CHECK(stats_median_inplace(v, 5) == 3);
    double w[] = {4, 1, 3, 2};
    CHECK(stats_median_inplace(w, 4) == 2.5);
    const double s[] = {1, 2, 3, 4, 5};
    CHECK(near(stats_quantile_sorted(s, 5, 0.25), 2) && near(stats_quantile_sorted(s, 5, 0.1), 1.4));
    CHECK(stats_quantile_sorted(s, 5, 1.0) == 5);

    double bw[4], pct[4];
    int st[4];
    stats_bw_summary sum;
    {   /* window 1's state changed (30 -> 60): it takes no part in the summary */
        const double b0[] = {30, 30, 55}, b1[] = {31, 60, 56}, rate[] = {27, 27, 40};
        stats_bw_windows(b0, b1, rate, 3, bw, pct, st, &sum);
        CHECK(st[0] && !st[1] && st[2]);
        CHECK(near(bw[0], 30.5) && near(bw[1], 45) && near(bw[2], 55.5));
        CHECK(near(pct[0], 100.0 * 27 / 30.5) && near(pct[1], 60) && near(pct[2], 100.0 * 40 / 55.5));
        CHECK_EQ_INT(sum.measured, 3);
        CHECK_EQ_INT(sum.steady, 2);
        CHECK(near(sum.pct, (100.0 * 27 / 30.5 + 100.0 * 40 / 55.5) / 2));
        CHECK(near(sum.bw, 43) && near(sum.lo, 30.5) && near(sum.hi, 55.5));
    }
    {   /* none steady: every measured window counts; a failed measurement (0)
         * leaves the other one; two failures leave the window out */
        const double b0[] = {30, 0, 0, 40}, b1[] = {50, 33, 0, 20}, rate[] = {20, 30, 10, 15};
        stats_bw_windows(b0, b1, rate, 4, bw, pct, st, &sum);
        CHECK(!st[0] && !st[1] && !st[2] && !st[3]);
        CHECK(near(bw[1], 33) && bw[2] == 0 && pct[2] == 0);
        CHECK_EQ_INT(sum.measured, 3);
        CHECK_EQ_INT(sum.steady, 0);
        CHECK(near(sum.pct, 100.0 * 20 / 40));                  /* median of 50, 90.9.., 50 */
        CHECK(near(sum.lo, 30) && near(sum.hi, 40));
    }
    {   /* the steadiness bound is inclusive, either direction */
        const double b0[] = {20, 23.1}, b1[] = {23, 20}, rate[] = {10, 10};
        stats_bw_windows(b0, b1, rate, 2, bw, pct, st, &sum);
        CHECK(st[0] && !st[1]);
        CHECK_EQ_INT(sum.steady, 1);
    }
    {   /* nothing measured */
        const double z[] = {0}, rate[] = {10};
        stats_bw_windows(z, z, rate, 1, bw, pct, st, &sum);
        CHECK(sum.measured == 0 && sum.steady == 0 && sum.pct == 0 && sum.bw == 0);
    }
    return check_report("test_stats");
}
