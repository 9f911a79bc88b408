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
    int   top_k;     /* <= 0: off */
    float top_p;     /* >= 1: off */
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
/* Force a SIMD level before any model is loaded ("scalar"|"avx2"|"avx512");
 * fails when the CPU lacks it. MOEFAST_ISA does the same from the environment. */
int moe_set_isa(const char *name, char *err, size_t errlen);

/* ---- optimisation flags (see `moefast flags`) --------------------------- */

int  moe_flag_count(void);
/* name/description of flag i; false when i is out of range */
bool moe_flag_describe(int i, const char **name, const char **desc, bool *default_on, bool *test_only);
/* The model's active flag set, formatted "+a,+b" ("none" when empty). */
void moe_model_flags(const moe_model *m, char *buf, size_t len);

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
int   moe_trace_steps(const moe_trace *t);          /* gate setting: steps to check */
float moe_trace_tie_tolerance(const moe_trace *t);  /* gate setting */
/* MOE_OK when the trace's provenance (file name, sha256, architecture) matches m. */
int  moe_trace_check_model(const moe_trace *t, moe_model *m, char *err, size_t errlen);

/* ---- measurement helpers ----------------------------------------------------- */

/* Measured memory read bandwidth in GB/s (1e9 bytes/s) with n_threads threads,
 * median of several passes over a buffer far larger than the caches. */
double moe_measure_read_bandwidth(int n_threads);

#ifdef __cplusplus
}
#endif
#endif
