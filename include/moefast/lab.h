/* moefast/lab.h — the lab: the instruments of exactness and speed built on the
 * engine: optimisation flags, the phase profile, the compute ceiling and KV
 * bytes, golden traces and the gate, the model generator and quantizer, the
 * memory bandwidth probe. Tools that measure or prove use it; an application
 * that only runs models needs moefast/engine.h alone. */
#ifndef MOEFAST_LAB_H
#define MOEFAST_LAB_H

#include "moefast/engine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- per-session measurements ------------------------------------------------ */

/* Bytes of the KV cache that attention reads for one token at position pos
 * (0-based), summed over the layers: the keys and values of every position
 * the token sees (pos + 1, or a sliding layer's window), for every KV head,
 * in the session's cache format (FP32, half, or kv_q8's codes plus a half
 * scale per 32). The decode-step cost that moe_model_bytes_per_token leaves
 * out; the phase profile's attention kv_bytes is the same sum. 0 for a NULL
 * session or pos < 0. */
double moe_session_kv_bytes_at(const moe_session *s, int pos);
/* The compute side of a decode step's roofline. One kernel of the step's
 * matrix products: a weight format, layout and row length, the weight bytes
 * a decoded token multiplies with it, and how fast the session's kernels
 * (ISA, flags, all its threads, each on its own core's cache) multiply such
 * a matrix whose bytes are already in cache. */
typedef struct moe_ceiling_part {
    char kernel[48];          /* e.g. "Q8_0 a8, rows of 1024" */
    double bytes_per_token;
    double gb_per_s;          /* the session's threads together, the fastest of 7 timed runs */
} moe_ceiling_part;
/* Measures every kernel of a decode step's matrix products from cache (a
 * sample of one of its real matrices, up to 160 KB of rows, run by every
 * thread at once) and sets *seconds to the sum over kernels of bytes per
 * token / rate: the fastest a step's products can run when memory is no
 * limit. Attention, norms and the glue between phases are not in it, so a
 * step takes longer. parts: NULL or room for max entries (the first max are
 * written); *n_parts (may be NULL): how many kernels there are. The bytes of
 * the parts plus one embedding row are moe_model_bytes_per_token. Allocates
 * and takes ~0.1 s: call it between forward calls, not in a decode loop.
 * MOE_EINVAL on a bad argument, MOE_ENOMEM. */
int  moe_session_compute_ceiling(moe_session *s, moe_ceiling_part *parts, int max, int *n_parts, double *seconds,
                                 char *err, size_t errlen);
/* The attention side of the roofline: how fast the session's attention
 * kernels run a decode step's (layer, KV head) items at position pos
 * (scores, softmax and the weighted sum of values, as the forward pass runs
 * them) when each item's keys and values are already in cache, every thread
 * repeating an item of its own. part->bytes_per_token: the KV bytes of the
 * timed layers at pos; part->gb_per_s: those bytes over the time their items
 * take. *kv_bytes (may be NULL): the step's KV bytes over every layer, the
 * untimed ones included (latent attention, whose kernels are not timed: its
 * bytes count at the bandwidth). Positions 0..pos of sequence 0 must be
 * cached (MOE_EINVAL otherwise). Allocates and takes ~0.1 s: call it
 * between forward calls. */
int  moe_session_attention_ceiling(moe_session *s, int pos, moe_ceiling_part *part, double *kv_bytes, char *err,
                                   size_t errlen);

/* ---- optimisation flags (see `moefast flags`) --------------------------- */

int  moe_flag_count(void);
/* MOE_OK when spec is a valid flag spec (see `moefast flags`), else MOE_EINVAL
 * with a message naming the unknown flag. */
int  moe_flags_check(const char *spec, char *err, size_t errlen);
/* name/description of flag i; false when i is out of range */
bool moe_flag_describe(int i, const char **name, const char **desc, bool *default_on, bool *test_only);
/* The kernel level sessions of this model use: "scalar" when the simd flag
 * is off, else moe_isa_name(). */
const char *moe_model_kernels(const moe_model *m);
/* The model's active flag set, formatted "+a,+b" ("none" when empty). */
void moe_model_flags(const moe_model *m, char *buf, size_t len);
/* A session's current flag set, formatted as moe_model_flags does (it starts
 * as the model's and changes only through moe_session_set_flags). */
void moe_session_flags(const moe_session *s, char *buf, size_t len);
/* Changes a live session's flags between forward calls: spec (the --flags
 * grammar) is applied on top of the session's CURRENT flags, so "-name"
 * switches one flag off and "none,+a,+b" names a whole set. Only flags read
 * while forwarding may change (simd, gemm_batch, gemm_wide, key_stream,
 * fused_gate_up, parallel_glue and the test flags); every one keeps the logits bit-identical
 * (except the test flags, by design), so a caller may alternate two
 * configurations step by step in one token stream (`moefast bench --ab`).
 * Changing a flag fixed at load or session creation (threads, readahead,
 * repack, act_q8, kv_f16, kv_q8), or naming an unknown flag, is MOE_EINVAL with a
 * one-line message naming the flag, and leaves the flags unchanged. In
 * differential mode the all-flags-off twin is not touched: it keeps checking
 * the main session whatever its flags. Allocates nothing. */
int  moe_session_set_flags(moe_session *s, const char *spec, char *err, size_t errlen);
/* A second session on s's model with s's context, batch size, thread count
 * and worker pool, and s's flags changed by spec (applied at creation, so it
 * may differ from s also in the KV cache format: kv_f16, kv_q8, besides the
 * flags moe_session_set_flags may switch). A flag fixed at model load or by
 * the pool (readahead, repack, act_q8, threads) must stay as it is:
 * MOE_EINVAL naming it. The two sessions share one pool, so they must never
 * forward at the same time; free the sibling before s. What it is for: two
 * KV cache formats timed step by step in one process (`moefast bench --ab`),
 * without a second pool's idle workers spinning on the same cores. */
int  moe_session_new_sibling(moe_session *s, const char *spec, moe_session **out, char *err, size_t errlen);
/* The numerics flags (act_q8, kv_f16, kv_q8: a different arithmetic, docs/EXACTNESS.md)
 * of a flag set written as moe_model_flags writes it (relative to "none"),
 * formatted the same way ("none" when there are none). MOE_EINVAL when the
 * spec names an unknown flag. */
int  moe_flags_numerics_of(const char *spec, char *buf, size_t len, char *err, size_t errlen);

/* ---- phase profile (`moefast bench --phases`, docs/MEASUREMENT.md) ---------- */

/* One phase of the forward pass, summed over the forward calls since the
 * profile was enabled. Phases are contiguous intervals on the calling thread
 * (each runs from the previous phase's end to its own), so their sum is the
 * forward calls' time less the entry checks. weight_bytes: weight rows the
 * phase streams (each matrix once per pool phase; experts: the selected
 * ones); kv_bytes: KV-cache bytes attention reads (keys and values of every
 * visible position of each (token, KV head) item). */
typedef struct moe_phase_stat {
    const char *name;        /* static: "embed", "attn_norm", "qkv", ... "lm_head" */
    long long calls;
    double seconds;
    double weight_bytes;
    double kv_bytes;
} moe_phase_stat;

/* Switches the session's profile on or off; either way the counters are
 * reset to zero. Off (the default) costs one branch per phase and no clock
 * reads; on, one clock read per phase (two more per MoE layer). Allocates
 * nothing. In differential mode only the main session is profiled, not its
 * twin. */
int  moe_session_profile_enable(moe_session *s, bool on);
/* Copies min(max, count) phases, in data-flow order, to out (NULL allowed
 * when max is 0) and returns count, the number of phases (every phase, also
 * those that did not run: calls == 0); MOE_EINVAL on a bad argument. */
int  moe_session_profile_read(const moe_session *s, moe_phase_stat *out, int max);
/* The same for a context (all its sequences' steps together): what a
 * server uses to report the weight bytes its batched steps stream. */
int  moe_context_profile_enable(moe_context *c, bool on);
int  moe_context_profile_read(const moe_context *c, moe_phase_stat *out, int max);

/* ---- model generator (src/lab/gen.c) ------------------------------------------ */

/* Writes a GGUF with seeded random weights. arch: "laguna" | "qwen3moe";
 * preset: "tiny" | "default" | "bench"; overrides: NULL-terminated list of
 * "key=value" hyperparameter overrides (names as `moefast gen --help` lists),
 * may be NULL. Same arguments -> byte-identical file. Atomic write. */
int moe_gen_model(const char *arch, const char *preset, const char *const *overrides,
                  const char *path, char *err, size_t errlen);
/* Re-encodes a GGUF's weight matrices to `type` (expert tensors to
 * `type_experts`, NULL: same as type). Norms, router and biases stay F32. */
int moe_quantize_file(const char *in, const char *out, const char *type,
                      const char *type_experts, char *err, size_t errlen);

/* ---- golden traces (src/lab/trace.c, format in docs/TRACE.md) -------------- */

typedef struct moe_trace moe_trace;
typedef struct moe_trace_case {
    const char *name;
    const int32_t *prompt; int n_prompt;      /* prompt token ids */
    const int32_t *expected; int n_expected;  /* golden greedy continuation */
    int top_k;                                /* per-step top-k recorded (k entries per step) */
    const int32_t *topk_ids;                  /* [n_expected][top_k] */
    const float *topk_logits;                 /* [n_expected][top_k] */
} moe_trace_case;

int  moe_trace_load(const char *path, moe_trace **out, char *err, size_t errlen);
void moe_trace_free(moe_trace *t);
int  moe_trace_n_cases(const moe_trace *t);
const moe_trace_case *moe_trace_case_at(const moe_trace *t, int i);
/* Case i's free-form "recorded_with" note ("flags=... isa=... threads=..."
 * when moe_trace_record wrote it), or NULL. */
const char *moe_trace_recorded_with(const moe_trace *t, int i);
int   moe_trace_steps(const moe_trace *t);          /* gate setting: steps to check */
float moe_trace_tie_tolerance(const moe_trace *t);  /* gate setting */
/* MOE_OK when the trace's provenance (file name, sha256, architecture) matches m. */
int  moe_trace_check_model(const moe_trace *t, moe_model *m, char *err, size_t errlen);

/* Provenance of a trace (pointers owned by t). */
void moe_trace_provenance(const moe_trace *t, const char **file, const char **sha256,
                          const char **arch);
/* An empty trace whose provenance is m (basename, sha256, architecture). */
int  moe_trace_new(moe_model *m, int steps, float tie_tolerance, moe_trace **out,
                   char *err, size_t errlen);
/* Appends a copy of c (names must be unique, ids >= 0, logits finite). */
int  moe_trace_add_case(moe_trace *t, const moe_trace_case *c, char *err, size_t errlen);
/* Greedy free run (moe_argmax) of `steps` tokens after the prompt on m, with the
 * top MOE_TRACE_TOPK logits of every step, appended to t as case `name`. The
 * model must match t's provenance. n_threads: 0 = default. */
#define MOE_TRACE_TOPK 8
int  moe_trace_record(moe_trace *t, moe_model *m, const char *name, const int32_t *prompt,
                      int n_prompt, int steps, int n_threads, char *err, size_t errlen);
/* Writes t as JSON (docs/TRACE.md) to a temporary file and renames it over path. */
int  moe_trace_save(const moe_trace *t, const char *path, char *err, size_t errlen);
/* The k largest of logits[0..n) in descending order, equal values by ascending
 * id (so ids[0] == moe_argmax). Returns the count written (min(k, n)). */
int  moe_topk(const float *logits, int n, int k, int32_t *ids, float *vals);

/* The lm-head screen's figures of a session's top-k steps
 * (moe_session_forward_topk; docs/SCREEN.md). */
typedef struct moe_screen_stats {
    int64_t steps;           /* top-k steps run */
    int64_t screened;        /* of them, answered by the screen (the rest ran the full head) */
    int64_t level2_rows;     /* sums over the screened steps: rows that reached level 2 */
    int64_t exact_rows;      /* ... rows the kernel evaluated */
    double bytes;            /* lm-head bytes read by all top-k steps */
    double full_bytes;       /* what the full head reads in as many steps */
    int64_t last_exact_rows; /* the last step's exact rows; -1: it ran the full head */
    bool available;          /* the model has a screen (flag lm_screen at load, a covered head format) */
} moe_screen_stats;
int  moe_session_screen_stats(const moe_session *s, moe_screen_stats *out);
/* The same figures of a context's moe_context_decode_topk steps (steps:
 * wanted tokens; full_bytes: one pass of the head per step's group of up to
 * 16 wanted tokens, as a batched full head reads it). */
int  moe_context_screen_stats(const moe_context *c, moe_screen_stats *out);
/* After moe_session_forward_topk: the last token's logit of id (the same
 * bits as the full logits give), for reports on ids outside the top k. */
int  moe_session_last_logit(moe_session *s, int32_t id, float *out);

/* Replays a trace on m (see `moefast gate`). Teacher mode prefills each case's
 * prompt in one call and then feeds the golden tokens whatever the model
 * predicts, checking every step; free mode feeds the model's own argmax and
 * stops at the first step where it differs from the golden token (failing
 * unless that is a tolerated tie, which ends the case early). A step passes
 * when the argmax equals the golden token, or when the golden token is in the
 * top MOE_TRACE_TOPK and its logit is within the trace's tie tolerance of the
 * top logit. Returns MOE_OK whether or not the gate passed (see r->pass);
 * negative on errors (provenance mismatch, ids out of range, ...). */
typedef struct moe_gate_params {
    bool free_run;   /* false: teacher-forced */
    int steps;       /* steps per case; 0: the trace's gate.steps */
    int n_threads;   /* 0: default */
    const char *only_case; /* NULL: every case; else the case of that name */
    bool stop_at_first;    /* teacher mode too stops at the first failing step */
} moe_gate_params;
typedef struct moe_gate_result {
    bool pass;
    int n_cases, n_steps;   /* cases and steps checked */
    int n_ties;             /* steps passed only through the tie tolerance */
    int n_fail;             /* failing steps (teacher mode checks every step) */
    /* the first divergence (when !pass): */
    int case_index, step;   /* step 0 = the token after the prompt */
    int32_t expected, actual;
    float margin;           /* logit[actual] - logit[expected] */
    bool expected_in_topk;
    int n_top;              /* top entries at that step (<= MOE_TRACE_TOPK) */
    int32_t top_ids[MOE_TRACE_TOPK];
    float top_logits[MOE_TRACE_TOPK];
} moe_gate_result;
int  moe_trace_gate(moe_model *m, const moe_trace *t, const moe_gate_params *p,
                    moe_gate_result *r, char *err, size_t errlen);

/* ---- measurement helpers ----------------------------------------------------- */

/* A field of this process's /proc/self/status that Linux gives in kB (VmRSS,
 * VmHWM, VmSize, ...), in bytes; -1 when it cannot be read (no /proc, no such
 * field). The instruments' one reader of it (bench's peak RSS, the MPI
 * report, kv_mem, the tests). */
long long moe_proc_status_bytes(const char *field);
/* Measured memory read bandwidth in GB/s (1e9 bytes/s) with n_threads threads,
 * median of several passes over a buffer far larger than the caches. */
double moe_measure_read_bandwidth(int n_threads);
/* The same measurement, repeatable: moe_membw_new maps the buffer (n_threads
 * as above) and first-touches it once, and each moe_membw_measure reads it
 * again; the buffer stays mapped until moe_membw_free (moe_membw_bytes is its
 * size, which resident memory then includes). A process that measures
 * around work it times should hold one: a probe that unmaps its hundreds of
 * MB hands those pages back to the kernel, which gives them to whatever is
 * first touched next — the KV cache of a session created before — and the
 * decode steps measured after it ran slower on those pages (the paired
 * figures: docs/MEASUREMENT.md). NULL when out of memory. */
typedef struct moe_membw moe_membw;
moe_membw *moe_membw_new(int n_threads);
double moe_membw_measure(moe_membw *b);
size_t moe_membw_bytes(const moe_membw *b);
void moe_membw_free(moe_membw *b);
/* A quicker figure of the same kind: the median of 3 passes over a buffer of
 * `bytes` (1 MB .. 512 MB). Not a machine's peak (the buffer may fit a large
 * last-level cache): price compares it before and after a pair of runs to
 * see the memory's state change (docs/MEASUREMENT.md). 0 on failure. */
double moe_probe_read_bandwidth(int n_threads, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
