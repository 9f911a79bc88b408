/* bench.h — `moefast bench`'s shared state. tools/cmd_bench.c parses the
 * options, runs the windows and summarizes them into a bench_run;
 * tools/bench_report.c prints it, as text or as the moefast.bench/1 JSON
 * (docs/MEASUREMENT.md). */
#ifndef MOE_BENCH_H
#define MOE_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "moefast.h"
#include "stats.h"

#define CMD "bench"
#define BENCH_SCHEMA "moefast.bench/1"
#define AB_SEED 20260101ull /* --ab bootstrap: fixed, so the same steps give the same interval */
#define AB_RESAMPLES 2000
#define MAX_CEIL_PARTS 32
#define MAX_PHASES 64

enum { WIN_PREFILL = 1, WIN_DECODE = 2 };

typedef struct {
    const char *model, *flags, *trace;
    const char *ab;      /* --ab SPEC: B = A changed by SPEC; NULL: no A/B */
    bool ab_sibling;     /* --ab-sibling: B on a sibling session even when SPEC could switch the live one */
    int threads, windows, repeat, prompt_len, decode_steps;
    bool json, bandwidth;
    bool cold;           /* --cold: no warm-up forward; the prefill window is the process's first forward */
    bool phases;         /* --phases: profile the last repeat's windows */
    moe_load_params rope; /* --rope-scaling, --rope-scale, --yarn-orig-ctx */
} bench_opts;

/* One token-check failure (or the first tolerated tie, for the record). */
typedef struct {
    bool ok;
    int checked, ties;
    int step;            /* first failing step (-1: none); 0 = token after the prompt */
    const char *window;  /* where it failed */
    char config;         /* --ab: 'A' or 'B', the flags that ran the failing step; 0 otherwise */
    int32_t expected, actual;
} token_check;

typedef struct {
    int pairs;
    double a_med, b_med;  /* median seconds per step */
    double speedup;       /* a_med / b_med: > 1, B is faster */
    double lo, hi;        /* bootstrap 95% interval of the speedup */
} ab_stats;

typedef struct {
    double *prefill;              /* [repeat] window seconds */
    double *decode, *seed, *steps; /* [repeat] */
    double *bw0;                  /* [repeat] read bandwidth measured right before decode window r, GB/s */
    double *bw1;                  /* [repeat] ... and right after it */
    double *bw;                   /* [repeat] the window's bandwidth (stats_bw_windows) */
    double *pct;                  /* [repeat] that window's decode steps as % of its bandwidth limit */
    int *steady;                  /* [repeat] the two measurements agreed (stats_bw_windows) */
    double *ceil;                 /* [repeat] the compute ceiling measured right after window r, s per step */
    moe_ceiling_part *parts;      /* [repeat][MAX_CEIL_PARTS] its kernels */
    int *n_parts;                 /* [repeat] */
    moe_ceiling_part *attn;       /* [repeat] the attention items from cache at the steps' mean position,
                                   * bytes_per_token: the timed layers' share of kvpt (0: none timed) */
    double *roof;                 /* [repeat] the window's steps as % of its roofline (0: not computed) */
    double *roof_w;               /* [repeat] ... of the roofline without attention (the weights' kernels only) */
} timings;

/* One window's profile: the library's phases (summed over the window's
 * forward calls), the number of steps to divide by (decode: D; prefill: 1,
 * the whole P-token forward) and the window's measured seconds (the same
 * run), which also contain what lies outside the phases. */
typedef struct {
    bool have;
    int n;
    moe_phase_stat st[MAX_PHASES];
    int steps;
    double measured_s;
} phase_profile;

/* The figures over the repeats (medians, bandwidth limit, roofline) that
 * both reports print. */
typedef struct {
    bool have_p, have_d, have_bw, have_ceil;
    double bw, bw_lo, bw_hi, pct, pct_kv;
    stats_bw_summary bws;
    double p_s, d_s, seed_s, steps_s, steps_tps, achieved;
    double ceil_s, pct_roof, roof_tps;
    double pct_roof_w;                  /* the steps against the roofline of the weights' kernels alone */
    const moe_ceiling_part *ceil_parts; /* the last measured window's kernels */
    const moe_ceiling_part *attn_part;  /* ... and its attention items (gb_per_s 0: none timed) */
    int n_ceil_parts;
    double ceil_bw;                     /* that window's bandwidth (0: none) */
} bench_summary;

/* Everything one `moefast bench` run holds, from the options to the summary. */
typedef struct {
    bench_opts o;
    int P, D;                 /* prompt length and decode steps (a trace may shorten them) */
    char note[512];           /* why P and D differ from the options, or "" */
    moe_model *m;
    moe_session *s;
    moe_session *sb;          /* --ab with a KV cache format change: B's sibling session */
    moe_session *s_fail;      /* the session whose forward failed, when not s */
    moe_trace *tr;
    int n_vocab;
    int32_t *ids;             /* the P prompt ids, then the D teacher-forced inputs */
    int32_t *argmax_ids;      /* [D + 1] */
    float *logits;            /* [n_vocab] */
    int32_t top_ids[8];       /* the step's top 8 (moe_session_forward_topk: the lm-head screen) */
    float top_vals[8];
    const int32_t *expected;  /* --trace: the golden tokens, else NULL */
    int n_expected;
    float tol;                /* the trace's tie tolerance */
    token_check tc;
    timings tm;
    double t_load;
    long long hwm;            /* peak RSS after the warm-up */
    moe_membw *probe;         /* the windows' bandwidth probe, kept mapped (lab.h says why) */
    uint64_t bpt;             /* weight bytes per token */
    double kvpt;              /* KV-cache bytes the decode steps read, per step */
    /* --ab: every decode step's seconds [repeat][D], the paired A and B steps,
     * and the two flag sets as absolute specs ("none,+a,+b") so that each
     * switch is one call whatever the step before ran. */
    double *step_s, *step_sb, *pair_a, *pair_b;
    char a_flags[256], b_flags[256], a_abs[272], b_abs[272];
    bool b_check;             /* --ab: B's steps are checked against the trace (same numerics as A) */
    bool b_sibling;           /* --ab: B ran on a sibling session */
    ab_stats ab;
    phase_profile prof_prefill, prof_decode; /* --phases: the last repeat's */
    /* the model and session as they were, kept for the report after both are freed */
    char flags_buf[256], arch_buf[64];
    const char *kern_name;    /* a static string: outlives the model */
    int threads_used;
    bench_summary sum;
} bench_run;

/* tools/bench_report.c: the report on stdout. bench_report_json returns 2
 * after printing the error when out of memory, else 0. */
int bench_report_json(const bench_run *b);
void bench_report_text(const bench_run *b);

#endif
