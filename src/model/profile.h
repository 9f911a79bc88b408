/* profile.h — the optional per-session phase profile (moe_session_profile_*).
 *
 * forward.c marks the end of every phase of the forward pass on the calling
 * thread: the interval since the previous mark is added to that phase, so the
 * phases of one chunk are contiguous (the caller's set-up of a pool phase, e.g.
 * the job list, belongs to the phase it prepares) and their sum is the whole
 * chunk from the first mark on. Worker threads never touch the table.
 *
 * Off (the default), a mark is one load and one predictable branch: the
 * byte-count expressions are arguments of a macro, evaluated only when the
 * profile is on, and no clock is read. The table is a fixed array inside the
 * session, so a profiled forward allocates nothing either. */
#ifndef MOE_PROFILE_H
#define MOE_PROFILE_H

#include <stdbool.h>
#include <time.h>

/* Data-flow order; profile.c names them (moe_phase_stat.name). */
typedef enum moe_phase_id {
    MOE_PH_EMBED,        /* embedding rows dequantized */
    MOE_PH_ATTN_NORM,    /* RMSNorm + the act_q8 quantization of the Q/K/V input */
    MOE_PH_QKV,          /* the Q/K/V(/gate) matmul_multi phase */
    MOE_PH_ATTN_PREP,    /* QK-norm, RoPE, KV store when not inside the attention phase */
    MOE_PH_ATTENTION,    /* scores, softmax, V sum, output gate (+ prep in decode with parallel_glue) */
    MOE_PH_WO,           /* act_q8 quantization of the attention output, output projection, residual */
    MOE_PH_FFN_NORM,     /* RMSNorm + the act_q8 quantization of the FFN input */
    MOE_PH_ROUTER,       /* router logits (a matmul) */
    MOE_PH_ROUTE,        /* softmax/sigmoid, top-k, weights; the gather of expert inputs */
    MOE_PH_GATE_UP,      /* expert (+ shared) gate+up+SiLU: phase 0, or 1..3 without fused_gate_up */
    MOE_PH_HIDDEN_Q8,    /* act_q8: hidden rows -> A8 */
    MOE_PH_DOWN,         /* expert (+ shared) down projections */
    MOE_PH_EXPERT_WAIT,  /* expert parallelism: waiting for the other shards' expert rows (shard.h) */
    MOE_PH_COMBINE,      /* rank-order combine + shared expert + residual */
    MOE_PH_DENSE_FFN,    /* a dense-FFN layer's jobs: gate+up, SiLU, hidden q8, down, residual */
    MOE_PH_LM_HEAD,      /* final RMSNorm + the output matmul */
    MOE_PH_COUNT
} moe_phase_id;

typedef struct moe_prof_entry {
    long long calls;
    double seconds;
    double weight_bytes;     /* weight rows streamed */
    double kv_bytes;         /* KV-cache bytes read (attention) */
} moe_prof_entry;

typedef struct moe_prof {
    bool on;
    double t;                /* the previous mark (CLOCK_MONOTONIC seconds) */
    moe_prof_entry e[MOE_PH_COUNT];
} moe_prof;

static inline double moe_prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Ends phase ph now: one call, the interval since the previous mark. */
static inline void moe_prof_mark_(moe_prof *p, int ph, double weight_bytes, double kv_bytes) {
    const double t = moe_prof_now();
    moe_prof_entry *e = &p->e[ph];
    e->calls++;
    e->seconds += t - p->t;
    e->weight_bytes += weight_bytes;
    e->kv_bytes += kv_bytes;
    p->t = t;
}

/* Adds the interval since the previous mark to phase ph without counting a
 * call: a phase whose caller-side work is split by another phase's (the FFN
 * input quantization sits between routing and the gather). */
static inline void moe_prof_extend_(moe_prof *p, int ph) {
    const double t = moe_prof_now();
    p->e[ph].seconds += t - p->t;
    p->t = t;
}

/* s: a moe_session *. Byte expressions are evaluated only when on. */
#define PROF_MARK(s, ph, wbytes, kvbytes)                                                       \
    do {                                                                                       \
        if (__builtin_expect((s)->prof.on, 0)) moe_prof_mark_(&(s)->prof, (ph), (wbytes), (kvbytes)); \
    } while (0)
#define PROF_EXTEND(s, ph)                                                                     \
    do {                                                                                       \
        if (__builtin_expect((s)->prof.on, 0)) moe_prof_extend_(&(s)->prof, (ph));             \
    } while (0)
/* Starts the chain: the next mark measures from here. */
#define PROF_START(s)                                                                          \
    do {                                                                                       \
        if (__builtin_expect((s)->prof.on, 0)) (s)->prof.t = moe_prof_now();                   \
    } while (0)

#endif
