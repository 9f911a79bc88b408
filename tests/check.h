/* check.h — minimal test harness: CHECK* macros count failures and keep going;
 * main returns check_report(). Each failure prints file:line and the values. */
#ifndef MOE_CHECK_H
#define MOE_CHECK_H
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

static int check_failures_ = 0, check_count_ = 0;

#define CHECK(cond) do { check_count_++; if (!(cond)) { check_failures_++; \
    fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { check_count_++; if (!(cond)) { check_failures_++; \
    fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_EQ_INT(a, b) do { long long a_ = (long long)(a), b_ = (long long)(b); check_count_++; \
    if (a_ != b_) { check_failures_++; fprintf(stderr, "FAIL %s:%d: %s == %s: %lld != %lld\n", \
    __FILE__, __LINE__, #a, #b, a_, b_); } } while (0)
#define CHECK_STR_CONTAINS(hay, needle) do { const char *h_ = (hay), *n_ = (needle); check_count_++; \
    if (!h_ || !strstr(h_, n_)) { check_failures_++; fprintf(stderr, \
    "FAIL %s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__, h_ ? h_ : "(null)", n_); } } while (0)

static inline int check_report(const char *name) {
    printf("%s: %d checks, %d failed\n", name, check_count_, check_failures_);
    return check_failures_ ? 1 : 0;
}

/* Path of ../shared relative to the repository root (tests run from the root).
 * MOEFAST_SHARED overrides. */
static inline const char *check_shared_dir(void) {
    const char *e = getenv("MOEFAST_SHARED");
    return e && *e ? e : "../shared";
}
#endif
