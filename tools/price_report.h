/* price_report.h — shared between tools/cmd_price.c (specs, running the paired
 * bench processes) and tools/price_report.c (statistics and the reports). */
#ifndef MOE_PRICE_REPORT_H
#define MOE_PRICE_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* The windows price reports. PW_STEPS (the decode window's D steps alone,
 * without the seed prefill) is informational: the score and the rejection rule
 * use only the first PW_SCORED windows. */
enum { PW_PREFILL = 0, PW_DECODE = 1, PW_STEPS = 2, PW_COUNT = 3, PW_SCORED = 2 };

/* One side of the comparison, parsed from a SPEC (docs/MEASUREMENT.md):
 *   item (';' item)*;  item = flags:SPEC | threads:N | env:NAME=VALUE[,NAME=VALUE] | bin:PATH | default */
typedef struct price_side {
    const char *text;   /* the SPEC as given */
    char *bin;          /* NULL: the default binary */
    char *flags;        /* NULL: not given (the binary's defaults) */
    int threads;        /* 0: not given */
    int n_env;
    char **env;         /* "NAME=VALUE" */
} price_side;

/* What one bench process reported. */
typedef struct price_run {
    double s_per_tok[PW_COUNT];   /* steps: decode.steps_seconds / decode.steps */
    int prompt_len, decode_steps; /* what the run used (a trace may set them) */
    bool tc_present, tc_ok;
    int tc_step, tc_expected, tc_actual;
    char tc_window[16];
} price_run;

/* A run that changed a token. */
typedef struct price_fail {
    int pair;           /* -1: warm-up run */
    char side;          /* 'A' or 'B' */
    char window[16];
    int step, expected, actual;
} price_fail;

/* The environment of one pair (price's validity gate, price_env.c):
 * sampled around the pair's two runs; a pair whose memory bandwidth changed
 * or whose CPU time was stolen is run again (bounded). */
typedef struct price_env {
    double load1;           /* 1-minute load average before the pair (/proc/loadavg); -1: unknown */
    double steal;           /* stolen share of the CPU time during the pair (/proc/stat); -1: unknown */
    double bw0, bw1;        /* the probe before and after the pair, GB/s (0: not measured) */
    int attempts;           /* runs of the pair (1 + reruns) */
    bool gate_ok;           /* the kept attempt passed the gate */
} price_env;

typedef struct price_cpu { unsigned long long steal, total; bool ok; } price_cpu;
void price_cpu_read(price_cpu *c);
double price_load1(void);
/* Why a pair fails the gate (NULL: it passes): the probe before and after
 * differing by more than bw_pct % of the larger, or steal above STEAL_MAX. */
const char *price_gate_why(const price_env *e, double bw_pct);
#define PRICE_STEAL_MAX 0.10

typedef struct price_window {
    double a_med, b_med;    /* median seconds per token */
    double *speedup;        /* [n_pairs]: A time / B time (> 1: B is faster) */
    double med, lo, hi;     /* median speedup and its bootstrap 95% interval */
    const char *verdict;
} price_window;

typedef struct price_report {
    const char *model, *trace, *default_bin;
    bool token_check, noise;
    int n_pairs, threads, resamples, prompt_len, decode_steps;
    uint64_t seed;
    const price_side *a, *b;
    price_run *ra, *rb;     /* [n_pairs] timed runs */
    bool *b_first;          /* [n_pairs] order of pair i */
    price_fail *fails;
    int n_fails;
    price_window win[PW_COUNT];
    double score, score_lo, score_hi;
    const char *score_verdict, *verdict;
    bool rejected;
    char reasons[512];
    /* the environment gate and --cold */
    bool cold;
    price_env *env;         /* [n_pairs] */
    double gate_bw_pct;     /* 0: no bandwidth probe */
    int gate_retries, rerun_bw, rerun_steal, kept_failing;
} price_report;

/* Fills win[], score and the verdicts from the runs (bootstrap, seeded).
 * Returns -1 on allocation failure. */
int price_analyse(price_report *r);
void price_print_text(const price_report *r, FILE *f);
void price_print_json(const price_report *r, FILE *f);
void price_print_csv(const price_report *r, FILE *f);
/* Writes the per-pair speedup plot to f and closes it; -1 (errno set) when
 * writing failed. */
int price_write_svg(const price_report *r, FILE *f);
/* The gate's part of the text report, and of the JSON one (root: a json_t *). */
void price_env_text(const price_report *r, FILE *f);
void price_env_json(const price_report *r, void *root);

#endif
