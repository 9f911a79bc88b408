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

/* this thread's CPU seconds (CLOCK_THREAD_CPUTIME_ID): a kernel's own time,
 * not the other jobs' on a shared machine */
static inline double thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* qsort's ascending order of doubles */
static inline int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
