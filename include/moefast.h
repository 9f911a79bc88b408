/* moefast.h — the public API of the moefast inference engine.
 *
 * Opaque handles, int return codes (MOE_OK == 0, negative on error) and a
 * caller-provided error buffer that receives one line naming the file, field
 * and byte offset when something is wrong. The library never exits or aborts
 * on bad input. */
#ifndef MOEFAST_H
#define MOEFAST_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

enum moe_status {
    MOE_OK = 0,
    MOE_EIO = -1,          /* cannot open / map / write a file */
    MOE_EFORMAT = -2,      /* malformed file contents */
    MOE_EUNSUPPORTED = -3, /* valid file, feature not supported */
    MOE_EINVAL = -4,       /* bad argument */
    MOE_ENOMEM = -5,       /* allocation failed */
    MOE_ERANGE = -6,       /* context full, token id out of range, ... */
    MOE_EDIVERGE = -7,     /* differential mode found a mismatch */
};

#define MOE_ERR_LEN 512

typedef struct moe_model moe_model;
typedef struct moe_session moe_session;
typedef struct moe_sampler moe_sampler;

/* ---- models ---------------------------------------------------------- */

typedef struct moe_load_params {
    const char *flags;   /* optimisation flag spec ("none", "-name,+name"); NULL: defaults + MOEFAST_FLAGS */
    bool vocab_only;     /* load only the tokenizer (vocabulary-only GGUF files work too) */
    bool diff;           /* differential mode (also MOEFAST_DIFF=1): see moe_session_forward */
} moe_load_params;

int  moe_model_load(const char *path, const moe_load_params *params,
                    moe_model **out, char *err, size_t errlen);
void moe_model_free(moe_model *m);

int  moe_model_n_vocab(const moe_model *m);
int  moe_model_n_ctx_train(const moe_model *m);
const char *moe_model_arch(const moe_model *m);
const char *moe_model_path(const moe_model *m);
/* Weight bytes a single decoded token reads (dense weights + the selected experts). */
uint64_t moe_model_bytes_per_token(const moe_model *m);
/* Writes the `moefast info` report (hyperparameters, defaults used, tensor table). */
int  moe_model_print_info(const moe_model *m, void *file /* FILE* */);
/* sha256 of the whole file, hex; computed on first call and cached. */
const char *moe_model_sha256(moe_model *m);

/* ---- tokenizer (text <-> ids, from the GGUF vocabulary) ---------------- */

/* Encodes UTF-8 text (len bytes, any bytes accepted). Special tokens written
 * in the text are matched when parse_special is true. Writes at most cap ids
 * and stores the total count in *n_out (may exceed cap: call again). */
int moe_tokenize(const moe_model *m, const char *text, size_t len, bool add_bos,
                 bool parse_special, int32_t *ids, size_t cap, size_t *n_out,
                 char *err, size_t errlen);
/* The bytes of one token (control tokens give "" unless show_special). */
int moe_token_piece(const moe_model *m, int32_t id, bool show_special,
                    const char **bytes, size_t *len);
int32_t moe_token_eos(const moe_model *m);
int32_t moe_token_bos(const moe_model *m);
/* tokenizer.ggml.add_bos_token (false when the file has no tokenizer) */
bool moe_token_add_bos(const moe_model *m);
/* true for tokens that end a turn (eos, eot, <|im_end|>, ...) */
bool moe_token_is_eog(const moe_model *m, int32_t id);

/* ---- sessions (a KV cache plus scratch; one thread uses a session) ---- */

typedef struct moe_session_params {
    int n_ctx;        /* 0: min(model context, 4096) */
    int n_threads;    /* 0: available cores */
    int n_batch;      /* max tokens per forward call chunk; 0: 512 */
} moe_session_params;

int  moe_session_new(moe_model *m, const moe_session_params *p,
                     moe_session **out, char *err, size_t errlen);
void moe_session_free(moe_session *s);
int  moe_session_n_past(const moe_session *s);
/* Threads the session really uses (1 when the threads flag is off). */
int  moe_session_threads(const moe_session *s);
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
/* Drops cached positions >= n_past (n_past <= current). */
int  moe_session_truncate(moe_session *s, int n_past);

/* Runs n tokens through the model at positions n_past .. n_past+n-1 (split
 * internally into chunks of n_batch). logits: NULL, or n_vocab floats for
 * the last token, or n*n_vocab floats when all_logits is true. Results are
 * bit-identical for any chunking, thread count and ISA level. */
int  moe_session_forward(moe_session *s, const int32_t *tokens, int n,
                         float *logits, bool all_logits);
const char *moe_session_error(const moe_session *s);

/* ---- sampling ---------------------------------------------------------- */

typedef struct moe_sampler_params {
    float temp;      /* <= 0: greedy (argmax, ties to the lowest id) */
    int   top_k;     /* 0: off */
    float top_p;     /* 0 or 1: off */
    float min_p;     /* <= 0: off */
    uint64_t seed;
} moe_sampler_params;

int  moe_sampler_new(const moe_sampler_params *p, int n_vocab, moe_sampler **out,
                     char *err, size_t errlen);
void moe_sampler_free(moe_sampler *s);
int32_t moe_sampler_sample(moe_sampler *s, const float *logits);
/* argmax with ties to the lowest id */
int32_t moe_argmax(const float *logits, int n);

/* ---- runtime configuration -------------------------------------------- */

/* Name of the SIMD level in use ("scalar", "avx2", "avx512"). */
const char *moe_isa_name(void);
/* Force a SIMD level for sessions created afterwards ("scalar"|"avx2"|"avx512",
 * or "auto" for the best this CPU has); fails when the CPU lacks it.
 * MOEFAST_ISA does the same from the environment. */
int moe_set_isa(const char *name, char *err, size_t errlen);

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

/* ---- chat (src/chat.c) ---------------------------------------------------- */

typedef struct moe_chat_msg { const char *role; const char *content; } moe_chat_msg;
/* The model's tokenizer.chat_template, or NULL. */
const char *moe_model_chat_template(const moe_model *m);
/* Renders messages with the named format ("chatml", "laguna", ...) or, when
 * format is NULL, the one recognised from the model's template. *out is
 * malloc'd (caller frees). MOE_EUNSUPPORTED with a message listing the known
 * formats when the template is not recognised. */
int moe_chat_render(const moe_model *m, const char *format, const moe_chat_msg *msgs, size_t n,
                    bool add_generation_prompt, char **out, char *err, size_t errlen);

/* ---- model generator (src/gen.c) ------------------------------------------ */

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

/* ---- golden traces (src/trace.c, format in docs/TRACE.md) -------------- */

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

/* Measured memory read bandwidth in GB/s (1e9 bytes/s) with n_threads threads,
 * median of several passes over a buffer far larger than the caches. */
double moe_measure_read_bandwidth(int n_threads);

/* ---- streaming UTF-8 output (implemented in src/tokenizer.c) ------------------
 * Token pieces are raw bytes; a character may be split across tokens. The
 * stream holds back an incomplete sequence until it completes, and turns a
 * sequence known to be invalid into U+FFFD, so printed text is always valid
 * UTF-8. push/flush write at most cap bytes to out and return the count
 * (cap >= 4 * len + 4 is always enough). */
typedef struct moe_utf8_stream moe_utf8_stream;
moe_utf8_stream *moe_utf8_stream_new(void);
void   moe_utf8_stream_free(moe_utf8_stream *u);
size_t moe_utf8_stream_push(moe_utf8_stream *u, const char *bytes, size_t len, char *out, size_t cap);
size_t moe_utf8_stream_flush(moe_utf8_stream *u, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
