/* threads.h — persistent worker pool with static, deterministic partitioning.
 *
 * moe_pool_run(pool, fn, ctx) calls fn(ctx, ith, nth) once for every
 * ith in [0, nth) — thread 0 is the caller — and returns when all are done.
 * Work is split statically (moe_split) so which thread computes an output
 * never changes its value: every output element is produced by exactly one
 * thread in a fixed order, making results independent of the thread count. */
#ifndef MOE_THREADS_H
#define MOE_THREADS_H

#include <stddef.h>
#include <stdint.h>

typedef struct moe_pool moe_pool;
typedef void (*moe_task_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1. Returns NULL on failure (err filled). */
moe_pool *moe_pool_new(int n_threads, char *err, size_t errlen);
void moe_pool_free(moe_pool *p);
int  moe_pool_size(const moe_pool *p);
void moe_pool_run(moe_pool *p, moe_task_fn fn, void *ctx);

/* [*begin, *end) of n items for thread ith of nth, in contiguous chunks that
 * are multiples of `align` items where possible. */
static inline void moe_split(int64_t n, int ith, int nth, int64_t align,
                             int64_t *begin, int64_t *end) {
    if (align < 1) align = 1;
    int64_t units = (n + align - 1) / align;
    int64_t per = units / nth, rem = units % nth;
    int64_t ub = ith * per + (ith < rem ? ith : rem);
    int64_t ue = ub + per + (ith < rem ? 1 : 0);
    int64_t b = ub * align, e = ue * align;
    *begin = b < n ? b : n;
    *end = e < n ? e : n;
}

/* Number of online CPUs (>= 1). */
int moe_cpu_count(void);

#endif
