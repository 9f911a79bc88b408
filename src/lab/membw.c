/* membw.c — measured memory read bandwidth (moe_measure_read_bandwidth; a
 * probe kept between repeated measurements: moe_membw_new, lab.h says why).
 *
 * Why measure instead of trusting a datasheet: `moefast bench` reports decode
 * speed as a fraction of what this machine can actually stream, so the
 * reference must come from the same machine, threads and access pattern
 * (sequential wide loads, as the weight kernels do).
 *
 * Method: one buffer of max(512 MB, 8 x LLC) bytes, first touched by the
 * thread that will later read each share (so pages live near that thread);
 * then MEMBW_PASSES (5) timed passes in which every thread sums its static share
 * (moe_split) with 128-bit SSE2 loads, or 256-bit AVX2 loads when the CPU has
 * them (membw_avx2.c). The result is the median pass. Prints nothing. */
#include "moefast.h"
#include "base/threads.h"
#include "base/util.h"
#include "isa/isa.h"

#include <stdlib.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#define MEMBW_MIN_BYTES ((size_t)512 << 20)
#define MEMBW_PASSES 5
/* Each thread's share is a multiple of this many bytes, so the unrolled
 * readers need no tail loop. */
#define MEMBW_CHUNK 256

#if defined(__x86_64__)
uint64_t moe_membw_sum_avx2(const void *p, size_t n); /* membw_avx2.c */
#endif

/* The readers are not instrumented in sanitizer builds: a check per load
 * would make the figure measure ASan, not memory. */
#if defined(__SANITIZE_ADDRESS__)
#define MEMBW_NO_ASAN __attribute__((no_sanitize_address))
#else
#define MEMBW_NO_ASAN
#endif

/* Defeats dead-code elimination of the sums. */
static volatile uint64_t membw_sink;

typedef uint64_t (*sum_fn)(const void *p, size_t n);

#if !defined(__x86_64__)
/* Portable fallback: four independent 64-bit accumulators per 32 bytes. */
MEMBW_NO_ASAN static uint64_t sum_plain(const void *p, size_t n) {
    const uint64_t *v = p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i < n / 8; i += 4) {
        a0 += v[i]; a1 += v[i + 1]; a2 += v[i + 2]; a3 += v[i + 3];
    }
    return a0 + a1 + a2 + a3;
}
#else
/* SSE2 is part of x86-64, so this needs no dispatch. Four accumulators keep
 * four loads in flight per iteration (64 bytes = one cache line). */
MEMBW_NO_ASAN static uint64_t sum_sse2(const void *p, size_t n) {
    const __m128i *v = p;
    __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n / 16; i += 4) {
        a0 = _mm_add_epi64(a0, _mm_load_si128(v + i));
        a1 = _mm_add_epi64(a1, _mm_load_si128(v + i + 1));
        a2 = _mm_add_epi64(a2, _mm_load_si128(v + i + 2));
        a3 = _mm_add_epi64(a3, _mm_load_si128(v + i + 3));
    }
    __m128i s = _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3));
    uint64_t out[2];
    _mm_storeu_si128((__m128i *)out, s);
    return out[0] + out[1];
}
#endif

static sum_fn pick_reader(void) {
#if defined(__x86_64__)
    /* membw_avx2.c is built with the AVX2 level's flags: the level's check */
    if (moe_isa_table_for(MOE_ISA_AVX2)) return moe_membw_sum_avx2;
    return sum_sse2;
#else
    return sum_plain;
#endif
}

typedef struct {
    unsigned char *buf;
    size_t n;          /* bytes, a multiple of MEMBW_CHUNK */
    sum_fn sum;
    uint64_t *partial; /* one per thread, spaced a cache line apart */
} membw_job;

static void touch_task(void *ctx, int ith, int nth) {
    membw_job *j = ctx;
    int64_t b, e;
    moe_split((int64_t)(j->n / MEMBW_CHUNK), ith, nth, 1, &b, &e);
    /* Non-zero bytes: a zero page could be the shared zero page, not RAM. */
    memset(j->buf + (size_t)b * MEMBW_CHUNK, 0x5a, (size_t)(e - b) * MEMBW_CHUNK);
}

static void sum_task(void *ctx, int ith, int nth) {
    membw_job *j = ctx;
    int64_t b, e;
    moe_split((int64_t)(j->n / MEMBW_CHUNK), ith, nth, 1, &b, &e);
    j->partial[(size_t)ith * 8] = j->sum(j->buf + (size_t)b * MEMBW_CHUNK, (size_t)(e - b) * MEMBW_CHUNK);
}

/* Largest data/unified cache reported by the OS, 0 when unknown. */
static size_t llc_bytes(void) {
    long best = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (l3 > best) best = l3;
    if (l2 > best) best = l2;
#endif
    for (int i = 0; i < 8; i++) {
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        long v = 0;
        char unit = 0;
        if (fscanf(f, "%ld%c", &v, &unit) >= 1) {
            if (unit == 'K') v <<= 10;
            else if (unit == 'M') v <<= 20;
            if (v > best) best = v;
        }
        fclose(f);
    }
    return best > 0 ? (size_t)best : 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A probe: its buffer, first touched by the threads that read it, and
 * their pool; kept between measurements (lab.h says why). */
struct moe_membw {
    membw_job job;
    void *map;
    moe_pool *pool;
    int n_threads;
};

void moe_membw_free(moe_membw *b) {
    if (!b) return;
    moe_pool_free(b->pool);
    free(b->job.partial);
    if (b->map) munmap(b->map, b->job.n);
    free(b);
}

static moe_membw *membw_new(int n_threads, size_t n) {
    if (n_threads <= 0) n_threads = moe_cpu_count();
    if (n_threads > 1024) n_threads = 1024;
    n = (n + MEMBW_CHUNK - 1) / MEMBW_CHUNK * MEMBW_CHUNK;
    moe_membw *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->n_threads = n_threads;
    b->job.n = n;
    b->job.sum = pick_reader();
    /* mmap (page aligned) with transparent huge pages where allowed: 4 KiB
     * page faults on a 512 MB buffer cost seconds of system time in a VM. */
    void *map = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    b->map = map == MAP_FAILED ? NULL : map;
    b->job.buf = b->map;
#ifdef MADV_HUGEPAGE
    if (b->map) madvise(b->map, n, MADV_HUGEPAGE);
#endif
    b->job.partial = calloc((size_t)n_threads * 8, sizeof *b->job.partial);
    b->pool = moe_pool_new(n_threads, NULL, 0);
    if (!b->map || !b->job.partial || !b->pool) {
        moe_membw_free(b);
        return NULL;
    }
    moe_pool_run(b->pool, touch_task, &b->job);
    return b;
}

/* The median of `passes` (<= MEMBW_PASSES) timed passes over the buffer. */
static double membw_measure(moe_membw *b, int passes) {
    /* One untimed pass settles TLBs and clocks. */
    moe_pool_run(b->pool, sum_task, &b->job);
    double secs[MEMBW_PASSES];
    for (int p = 0; p < passes; p++) {
        double t0 = moe_now();
        moe_pool_run(b->pool, sum_task, &b->job);
        secs[p] = moe_now() - t0;
        uint64_t sum = 0;
        for (int t = 0; t < b->n_threads; t++) sum += b->job.partial[(size_t)t * 8];
        membw_sink += sum;
    }
    qsort(secs, (size_t)passes, sizeof secs[0], cmp_double);
    const double med = secs[passes / 2];
    return med > 0 ? (double)b->job.n / med / 1e9 : 0.0;
}

static size_t full_bytes(void) {
    size_t n = MEMBW_MIN_BYTES, llc8 = llc_bytes() * 8;
    return llc8 > n ? llc8 : n;
}

moe_membw *moe_membw_new(int n_threads) { return membw_new(n_threads, full_bytes()); }

double moe_membw_measure(moe_membw *b) { return b ? membw_measure(b, MEMBW_PASSES) : 0.0; }

size_t moe_membw_bytes(const moe_membw *b) { return b ? b->job.n : 0; }

static double measure_once(int n_threads, size_t n, int passes) {
    moe_membw *b = membw_new(n_threads, n);
    const double r = b ? membw_measure(b, passes) : 0.0;
    moe_membw_free(b);
    return r;
}

double moe_measure_read_bandwidth(int n_threads) { return measure_once(n_threads, full_bytes(), MEMBW_PASSES); }

/* The quick probe: a fixed buffer (a VM may report a host-wide L3 of
 * hundreds of MB, which would make 8 x LLC gigabytes), 3 passes. */
double moe_probe_read_bandwidth(int n_threads, size_t bytes) {
    if (bytes < ((size_t)1 << 20)) bytes = (size_t)1 << 20;
    if (bytes > MEMBW_MIN_BYTES) bytes = MEMBW_MIN_BYTES;
    return measure_once(n_threads, bytes, 3);
}
