/* check.h — minimal test harness: CHECK* macros count failures and keep going;
 * main returns check_report(). Each failure prints file:line and the values. */
#ifndef MOE_CHECK_H
#define MOE_CHECK_H
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

static int check_failures_ = 0, check_count_ = 0, check_skips_ = 0;

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

/* Allocation guard: in the sanitizer test build (MOE_TEST_BUILD) the
 * sanitizer runtime calls a hook on every malloc, and check_allocs() counts
 * them, so a test can show that a code path (a decode step) allocates
 * nothing. gcc ships no header for the hook interface. In other builds the
 * count stays 0 and such checks prove nothing; `make test` uses the
 * sanitizer build. */
#ifdef MOE_TEST_BUILD
#include <stddef.h>
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
static volatile long check_n_allocs_ = 0;
static inline void check_on_malloc_(const volatile void *p, size_t sz) { (void)p; (void)sz; check_n_allocs_++; }
static inline void check_on_free_(const volatile void *p) { (void)p; }
static inline void check_alloc_guard_install(void) {
    __sanitizer_install_malloc_and_free_hooks(check_on_malloc_, check_on_free_);
}
static inline long check_allocs(void) { return check_n_allocs_; }
#else
static inline void check_alloc_guard_install(void) {}
static inline long check_allocs(void) { return 0; }
#endif

static inline int check_report(const char *name) {
    if (check_skips_) printf("%s: %d checks, %d failed, %d skipped (reference files absent)\n", name, check_count_,
                             check_failures_, check_skips_);
    else printf("%s: %d checks, %d failed\n", name, check_count_, check_failures_);
    return check_failures_ ? 1 : 0;
}

/* The whole file, NUL-terminated (len excludes the NUL); NULL if it cannot be read. */
static inline void *check_read_file(const char *path, size_t *len) {
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)n + 1)) != NULL) {
        if (fread(b, 1, (size_t)n, f) == (size_t)n) { b[n] = 0; *len = (size_t)n; }
        else { free(b); b = NULL; }
    }
    fclose(f);
    return b;
}

/* Byte-compare two files; on a difference prints where it starts. */
static inline int check_same_file(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *pa = check_read_file(a, &na), *pb = check_read_file(b, &nb);
    int same = pa && pb && na == nb && memcmp(pa, pb, na) == 0;
    if (!same && pa && pb) {
        size_t i = 0;
        while (i < na && i < nb && pa[i] == pb[i]) i++;
        fprintf(stderr, "  %s (%zu bytes) and %s (%zu bytes) differ first at byte %zu\n", a, na, b, nb, i);
    }
    free(pa);
    free(pb);
    return same;
}

/* Path of ../shared relative to the repository root (tests run from the root).
 * MOEFAST_SHARED overrides. */
static inline const char *check_shared_dir(void) {
    const char *e = getenv("MOEFAST_SHARED");
    return e && *e ? e : "../shared";
}

/* The copy of the core reference files kept in the repository (see
 * tests/data/shared/PROVENANCE.md), for a clone with no ../shared beside it. */
#define CHECK_VENDORED_DIR "tests/data/shared"

/* Where the reference file REL ("oracle/x.gguf", "vocab/y.json") is:
 * $MOEFAST_SHARED/REL (default ../shared) if it exists, else
 * tests/data/shared/REL; else NULL after printing one "skip:" line (run.sh
 * counts and shows them), so a missing reference is visible, never a silent
 * pass. REL may name a directory. The path lives in one of 16 static slots:
 * good until 16 more calls. */
static inline const char *check_ref(const char *rel) {
    static char slot[16][1024];
    static int next = 0;
    char *p = slot[next];
    next = (next + 1) % 16;
    const char *dirs[2] = {check_shared_dir(), CHECK_VENDORED_DIR};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof slot[0], "%s/%s", dirs[i], rel);
        FILE *f = fopen(p, "rb");
        if (f) { fclose(f); return p; }
    }
    check_skips_++;
    FILE *d = fopen(dirs[0], "rb");             /* a directory opens for reading on Linux */
    if (d) fclose(d);
    printf("skip: %s/%s absent (%s %s, not vendored in %s)\n", dirs[0], rel, d ? "not in" : "no", dirs[0],
           CHECK_VENDORED_DIR);
    fflush(stdout);
    return NULL;
}

/* The parent's side of a child whose stderr goes to the pipe read end fd:
 * its output (at most cap-1 bytes, NUL-terminated) into buf, then its exit
 * status (-1 if it did not exit normally). Closes fd. */
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
static inline int check_child_result(int fd, pid_t pid, char *buf, size_t cap) {
    size_t got = 0;
    ssize_t r;
    while (got < cap - 1 && (r = read(fd, buf + got, cap - 1 - got)) > 0) got += (size_t)r;
    buf[got] = 0;
    close(fd);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
