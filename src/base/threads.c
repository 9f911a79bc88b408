/* threads.c — persistent pthread pool.
 *
 * A job is nth "slots" (fn(ctx, ith, nth) for ith < nth). Slots are claimed
 * from one atomic word that holds (job generation, next slot), so any thread
 * may run any slot: the caller runs slots too and, when a worker has not been
 * scheduled yet (an oversubscribed machine), runs that worker's slot itself
 * instead of waiting for it. Results do not depend on who runs a slot — the
 * slot index alone decides the work (static partitioning) — so this changes
 * timing only, never a bit of output.
 *
 * Workers spin briefly on the generation (a decode step launches many short
 * jobs, so sleeping between them would dominate) and then block on a
 * condition variable. */
#include "base/threads.h"
#include "base/util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS 20000

struct moe_pool {
    int n;
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Atomic uint64_t state;  /* generation << 32 | next unclaimed slot */
    atomic_int done;         /* slots finished in the current job */
    atomic_int sleepers;
    atomic_int started;      /* workers that reached their loop */
    atomic_bool stop;
    moe_task_fn fn;
    void *ctx;
};

typedef struct { moe_pool *p; } worker_arg;

/* Claims and runs slots of generation gen until none is left. */
static void run_slots(moe_pool *p, uint32_t gen) {
    uint64_t v = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(v >> 32) != gen || (int)(uint32_t)v >= p->n) return;
        if (!atomic_compare_exchange_weak_explicit(&p->state, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        p->fn(p->ctx, (int)(uint32_t)v, p->n);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_acq_rel);
        v = atomic_load_explicit(&p->state, memory_order_acquire);
    }
}

static void *worker_main(void *arg) {
    moe_pool *p = ((worker_arg *)arg)->p;
    free(arg);
    uint32_t seen = 0;
    atomic_fetch_add(&p->started, 1);
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = (uint32_t)(atomic_load_explicit(&p->state, memory_order_acquire) >> 32)) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins < SPIN_ITERS) {
                CPU_RELAX();
                if (spins % 1024 == 0) sched_yield();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((uint32_t)(atomic_load(&p->state) >> 32) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        run_slots(p, g);
    }
}

moe_pool *moe_pool_new(int n_threads, char *err, size_t errlen) {
    if (n_threads < 1 || n_threads > 1024) {
        moe_errf(err, errlen, MOE_EINVAL, "thread count %d out of range 1..1024", n_threads);
        return NULL;
    }
    moe_pool *p = calloc(1, sizeof *p);
    if (!p) { moe_errf(err, errlen, MOE_ENOMEM, "out of memory creating thread pool"); return NULL; }
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->tids = calloc((size_t)n_threads, sizeof *p->tids);
    if (!p->tids) { moe_pool_free(p); moe_errf(err, errlen, MOE_ENOMEM, "out of memory"); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) { p->n = i; moe_pool_free(p); moe_errf(err, errlen, MOE_ENOMEM, "out of memory"); return NULL; }
        wa->p = p;
        if (pthread_create(&p->tids[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n = i;
            moe_pool_free(p);
            moe_errf(err, errlen, MOE_ENOMEM, "cannot create worker thread %d", i);
            return NULL;
        }
    }
    /* Return only once every worker runs, so thread start-up (and whatever the
     * runtime allocates for it) never lands inside a forward call. */
    while (atomic_load(&p->started) < n_threads - 1) sched_yield();
    return p;
}

void moe_pool_free(moe_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, true);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->tids[i], NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->tids);
    free(p);
}

int moe_pool_size(const moe_pool *p) { return p ? p->n : 1; }

void moe_pool_run(moe_pool *p, moe_task_fn fn, void *ctx) {
    if (!p || p->n == 1) { fn(ctx, 0, 1); return; }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    uint32_t gen = (uint32_t)(atomic_load_explicit(&p->state, memory_order_relaxed) >> 32) + 1;
    atomic_store_explicit(&p->state, (uint64_t)gen << 32, memory_order_release);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_slots(p, gen);
    /* Slots claimed by workers may still be running: spin briefly (the usual
     * case), then yield so an oversubscribed machine can run them. */
    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) < p->n) {
        if (++spins < 2000) CPU_RELAX();
        else sched_yield();
    }
}

int moe_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int c = CPU_COUNT(&set);
        if (c > 0) return c;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
