/* bench_util.h — the clock and the sort order the bench programs share
 * (header-only; each bench program includes it after its system headers). */
#ifndef MOE_BENCH_UTIL_H
#define MOE_BENCH_UTIL_H

#include <time.h>

/* CLOCK_MONOTONIC seconds */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* qsort's ascending order of doubles */
static inline int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
