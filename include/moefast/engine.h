/* moefast/engine.h — the engine: models, the tokenizer, contexts and batches,
 * sessions, sampling, chat templates, the ISA level.
 *
 * Opaque handles, int return codes (MOE_OK == 0, negative on error) and a
 * caller-provided error buffer that receives one line naming the file, field
 * and byte offset when something is wrong. The library never exits or aborts
 * on bad input. */
#ifndef MOEFAST_ENGINE_H
#define MOEFAST_ENGINE_H

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
typedef struct moe_context moe_context;
typedef struct moe_sampler moe_sampler;

/* ---- models ---------------------------------------------------------- */

typedef struct moe_load_params {
    const char *flags;   /* optimisation flag spec ("none", "-name,+name"); NULL: defaults + MOEFAST_FLAGS */
    bool vocab_only;     /* load only the tokenizer (vocabulary-only GGUF files work too) */
    bool diff;           /* differential mode (also MOEFAST_DIFF=1): see moe_session_forward */
    /* Expert parallelism (moefast/shard.h): this process holds the routed
     * experts of shard `shard` of n_shards (n_shards 0 or 1: all of them). */
    int shard, n_shards;
    /* shard 0 of n_shards > 1: how the other shards' experts are computed */
    const struct moe_shard_link *link;
    /* RoPE scaling, as llama.cpp's --rope-scaling / --rope-scale /
     * --yarn-orig-ctx (a context past the trained one, e.g. Qwen3's YaRN
     * factor 4 over 32768 positions). rope_scaling NULL or "": the file's;
     * "none": off; "yarn": on, for the layers the file's own scaling applies
     * to. rope_scale: the YaRN factor (>= 1; 0: the file's, needed when the
     * file has no YaRN); yarn_orig_ctx: the original context (0: the file's
     * rope.scaling.original_context_length, else the trained context). Either
     * number on a model left without YaRN is refused (MOE_EINVAL). */
    const char *rope_scaling;
    float rope_scale;
    int yarn_orig_ctx;
} moe_load_params;

int  moe_model_load(const char *path, const moe_load_params *params,
                    moe_model **out, char *err, size_t errlen);
void moe_model_free(moe_model *m);

int  moe_model_n_vocab(const moe_model *m);
int  moe_model_n_ctx_train(const moe_model *m);
/* The trained context (as moe_model_n_ctx_train) and, in *yarn_ctx when not
 * NULL, the context YaRN rope scaling reaches (original context x factor;
 * 0 when the model has no YaRN). */
int  moe_model_ctx_limit(const moe_model *m, int *yarn_ctx);
const char *moe_model_arch(const moe_model *m);
const char *moe_model_path(const moe_model *m);
/* Weight bytes a single decoded token reads (dense weights + the selected experts). */
uint64_t moe_model_bytes_per_token(const moe_model *m);
/* Writes the `moefast info` report (hyperparameters, defaults used, tensor table). */
int  moe_model_print_info(const moe_model *m, void *file /* FILE* */);
/* sha256 of the whole file, hex; computed on first call and cached. A split
 * model (gguf-split's PREFIX-0000i-of-0000N.gguf files, opened by the first):
 * the sha256 of its files' hex digests joined in order. */
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

/* ---- contexts and batches: several sequences in one step ------------------
 *
 * A context owns one worker pool, scratch for n_batch tokens and the KV
 * caches of n_seq sequences (numbered 0 .. n_seq-1). moe_context_decode runs
 * one batch: any mix of prompt chunks and single decode tokens of any
 * sequences, every matrix streamed once for all of them (the routed experts:
 * the union of those the tokens selected), attention per sequence over its
 * own cache. CONTRACT: a sequence's logits are bit-identical whether it runs
 * alone or in any batch, in any order of arrival, at any thread count and ISA
 * level (docs/EXACTNESS.md). One thread uses a context at a time. */

typedef struct moe_context_params {
    int n_ctx;        /* positions per sequence; 0: min(model context, 4096) */
    int n_threads;    /* 0: available cores */
    int n_batch;      /* max tokens per step; larger batches run in steps of n_batch; 0: 512 */
    int n_seq;        /* sequences (KV caches); 0: 1 */
} moe_context_params;

/* One step's tokens: token i belongs to sequence seq[i] at position pos[i].
 * A sequence's tokens appear in position order and continue it: the first
 * one at moe_context_seq_len(seq), the next at +1, ... (pos may be NULL:
 * then that is what they get). logits: NULL (only the batch's last token's
 * logits are wanted) or per token, whether its logits are wanted. */
typedef struct moe_batch {
    int n_tokens;
    const int32_t *token;
    const int32_t *pos;      /* may be NULL */
    const int32_t *seq;
    const bool *logits;      /* may be NULL */
} moe_batch;

int  moe_context_new(moe_model *m, const moe_context_params *p, moe_context **out, char *err, size_t errlen);
void moe_context_free(moe_context *c);
int  moe_context_n_seq(const moe_context *c);
int  moe_context_n_ctx(const moe_context *c);
int  moe_context_threads(const moe_context *c);
/* Positions cached for sequence seq (-1 for a bad seq). */
int  moe_context_seq_len(const moe_context *c, int seq);
/* Forgets the positions >= n_past of sequence seq (n_past <= its length;
 * 0 empties it). */
int  moe_context_seq_truncate(moe_context *c, int seq, int n_past);
/* Makes sequence dst hold the first n positions of sequence src (n <= its
 * length): a shared prompt prefix computed once. dst's old positions are
 * dropped. The copied cache is the same bits, so dst continues exactly as
 * if it had computed the prefix itself. */
int  moe_context_seq_copy(moe_context *c, int src, int dst, int n);
/* Runs one batch. logits: [n_wanted][n_vocab] floats, the wanted tokens in
 * batch order (NULL: compute none). On an error (MOE_EINVAL: a bad token,
 * sequence or position, naming the batch index; MOE_ERANGE: a sequence
 * would pass n_ctx) nothing has been run and no sequence changed. */
int  moe_context_decode(moe_context *c, const moe_batch *b, float *logits);
/* As moe_context_decode, but for each wanted token only its top k (1..64,
 * <= n_vocab) logits: ids and vals [n_wanted][k], the wanted tokens in
 * batch order, each row ordered as moe_topk orders the full logits (value
 * descending, equal values by ascending id; row[0] is the argmax). The same
 * ids and bits as the full logits give, whatever the batch holds; with flag
 * lm_screen each row's lm head is screened and only the rows that can reach
 * its top k are computed (docs/SCREEN.md). Entries past the count of
 * non-NaN logits get id -1 and a NaN value. Errors as moe_context_decode's,
 * and MOE_EINVAL for a bad k or NULL ids/vals. */
int  moe_context_decode_topk(moe_context *c, const moe_batch *b, int k, int32_t *ids, float *vals);
const char *moe_context_error(const moe_context *c);

/* ---- sessions (one sequence: a context with n_seq 1) --------------------- */

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
/* Drops cached positions >= n_past (n_past <= current). */
int  moe_session_truncate(moe_session *s, int n_past);

/* Runs n tokens through the model at positions n_past .. n_past+n-1 (split
 * internally into chunks of n_batch). logits: NULL, or n_vocab floats for
 * the last token, or n*n_vocab floats when all_logits is true. Results are
 * bit-identical for any chunking, thread count and ISA level. */
int  moe_session_forward(moe_session *s, const int32_t *tokens, int n,
                         float *logits, bool all_logits);
const char *moe_session_error(const moe_session *s);
/* As moe_session_forward, but returns only the top k (1..64, <= n_vocab)
 * logits of the last token: ids[k] and vals[k], ordered as moe_topk orders
 * the full logits (value descending, equal values by ascending id; ids[0] is
 * moe_argmax). The same ids and bits as the full logits give; with flag
 * lm_screen the lm head is screened and only the rows that can reach the
 * top k are computed (docs/SCREEN.md). Entries past the count of non-NaN
 * logits get id -1 and a NaN value. */
int  moe_session_forward_topk(moe_session *s, const int32_t *tokens, int n, int k, int32_t *ids, float *vals);

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
/* How many top logits the sampler needs (1 when greedy, top_k when it is
 * 1..64), or 0 when it needs them all. With k >= that many from
 * moe_session_forward_topk, moe_sampler_sample_topk draws the same token,
 * consuming the generator alike, as moe_sampler_sample on the full logits. */
int  moe_sampler_topk_need(const moe_sampler *s);
int32_t moe_sampler_sample_topk(moe_sampler *s, const int32_t *ids, const float *vals, int k);

/* Penalties and biases (OpenAI's presence_penalty, frequency_penalty and
 * logit_bias). Before each draw, token j's logit becomes
 *   logit[j] + bias[j] - c[j] * frequency - (c[j] > 0 ? presence : 0)
 * (in that order, in float; a repeat penalty, below, applies between the
 * bias and the penalties), where c[j] counts j among the tokens passed to
 * moe_sampler_accept — the caller accepts each generated token, so forced
 * or prompt tokens count only if the caller says so. Greedy then takes the
 * argmax of the adjusted logits. With either set, moe_sampler_topk_need
 * returns 0: a penalty or a bias can lift a token from outside any top k, so
 * the full logits are needed. presence and frequency: [-2, 2], both 0: off.
 * The bias (ids[i] gets bias[i], a later id's entry replacing an earlier
 * one's; each in [-100, 100]; n 0 clears it) replaces any earlier bias.
 * The buffers are allocated here, never while sampling. */
int  moe_sampler_set_penalties(moe_sampler *s, float presence, float frequency, char *err, size_t errlen);
int  moe_sampler_set_logit_bias(moe_sampler *s, const int32_t *ids, const float *bias, int n, char *err,
                                size_t errlen);
void moe_sampler_accept(moe_sampler *s, int32_t token);

/* llama.cpp's (and Ollama's) repeat_penalty over a window of repeat_last_n
 * tokens. Before each draw, a token that occurs among the last last_n
 * tokens of the window gets logit / penalty when its logit (after the bias)
 * is > 0, logit * penalty otherwise — after the logit bias, before the
 * presence and frequency penalties (the order of llama.cpp's chain). The
 * window holds the tokens passed to moe_sampler_accept_context (the prompt:
 * llama.cpp's server and CLI count it) and then to moe_sampler_accept (the
 * generated ones), oldest out first. penalty: finite, > 0 (1: off; > 1
 * discourages repeats); last_n: 0 (off) .. MOE_SAMPLER_MAX_REPEAT_WINDOW
 * (llama.cpp's -1, the whole context, is the caller's context size). Either
 * neutral value allocates nothing and switches the penalty off. Setting it
 * empties the window; with it on, moe_sampler_topk_need returns 0. */
#define MOE_SAMPLER_MAX_REPEAT_WINDOW (1 << 24)
int  moe_sampler_set_repeat_penalty(moe_sampler *s, float penalty, int last_n, char *err, size_t errlen);
/* Tokens before the generation (the prompt), in order: they enter the
 * repeat-penalty window only (the presence and frequency counts are the
 * generated tokens'). Ids outside the vocabulary are skipped. */
void moe_sampler_accept_context(moe_sampler *s, const int32_t *tokens, int n);

/* ---- runtime configuration -------------------------------------------- */

/* Name of the SIMD level in use ("scalar", "avx2", "avx512"). */
const char *moe_isa_name(void);
/* Force a SIMD level for sessions created afterwards ("scalar"|"avx2"|"avx512",
 * or "auto" for the best this CPU has); fails when the CPU lacks one of the
 * extensions it was built with, naming it. MOEFAST_ISA does the same from
 * the environment; MOEFAST_CPU_MASK="-avx512vnni,-bmi2" (tests, diagnosis)
 * makes the CPU's extensions named there count as absent. */
int moe_set_isa(const char *name, char *err, size_t errlen);
/* The levels this CPU runs, and what each other one lacks, on one line:
 * "scalar, avx2; avx512 lacks avx512vnni". */
const char *moe_isa_support(void);

/* ---- chat (src/text/chat.c) ---------------------------------------------------- */

typedef struct moe_chat_msg { const char *role; const char *content; } moe_chat_msg;
/* The model's tokenizer.chat_template, or NULL. */
const char *moe_model_chat_template(const moe_model *m);
/* Renders messages with the named format ("chatml", "laguna", ...) or, when
 * format is NULL, the one recognised from the model's template. *out is
 * malloc'd (caller frees). MOE_EUNSUPPORTED with a message listing the known
 * formats when the template is not recognised. */
int moe_chat_render(const moe_model *m, const char *format, const moe_chat_msg *msgs, size_t n,
                    bool add_generation_prompt, char **out, char *err, size_t errlen);

/* ---- streaming UTF-8 output (implemented in src/text/tokenizer.c) ------------------
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


/* ---- grammars: constrained generation (src/text/grammar*.c, docs/GRAMMAR.md) ----
 * A grammar (llama.cpp's GBNF, or a JSON Schema compiled to one) is immutable
 * and may be shared. A grammar vocabulary holds a model's token bytes in a
 * trie, built once per model and shared by every constraint. A constraint is
 * one generation's position in the grammar: ask it which tokens are allowed
 * (those whose bytes keep the output a valid prefix; an end-of-generation
 * token only where the grammar may end; control tokens never), then advance
 * it by the token chosen. */
typedef struct moe_grammar moe_grammar;
typedef struct moe_grammar_vocab moe_grammar_vocab;
typedef struct moe_constraint moe_constraint;

/* Parses GBNF text (len bytes). root: the start rule's name (NULL: "root").
 * Errors (MOE_EFORMAT) name line:column; undefined rules, left recursion and
 * grammars past the size limits are refused. */
int  moe_grammar_parse(const char *gbnf, size_t len, const char *root, moe_grammar **out,
                       char *err, size_t errlen);
/* Compiles a JSON Schema (JSON text) to GBNF (*gbnf malloc'd, caller frees).
 * An unsupported keyword or value is MOE_EUNSUPPORTED naming it and its JSON
 * path ("#/properties/x"); bad JSON is MOE_EFORMAT. */
int  moe_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, char *err, size_t errlen);
/* moe_json_schema_to_gbnf then moe_grammar_parse. schema NULL: any JSON value. */
int  moe_grammar_from_json_schema(const char *schema, size_t len, moe_grammar **out,
                                  char *err, size_t errlen);
void moe_grammar_free(moe_grammar *g);

int  moe_grammar_vocab_new(const moe_model *m, moe_grammar_vocab **out, char *err, size_t errlen);
void moe_grammar_vocab_free(moe_grammar_vocab *v);
int  moe_grammar_vocab_n(const moe_grammar_vocab *v);

/* The constraint keeps pointers to g and v: both must outlive it. All its
 * memory is allocated here; mask and accept never allocate. */
int  moe_constraint_new(const moe_grammar *g, const moe_grammar_vocab *v, moe_constraint **out,
                        char *err, size_t errlen);
void moe_constraint_free(moe_constraint *c);
/* Back to the start of the grammar (the cached transitions are kept: a
 * constraint reused under the same grammar starts warm). */
void moe_constraint_reset(moe_constraint *c);
/* allowed[0..n_vocab): 1 for the tokens allowed now, else 0. *n_allowed (may
 * be NULL) gets their count. MOE_ERANGE (message in moe_constraint_error)
 * when the grammar passes a runtime limit (stack depth, ambiguity). */
int  moe_constraint_mask(moe_constraint *c, uint8_t *allowed, int *n_allowed);
/* Advances by one token. MOE_EINVAL when the token is not allowed (nothing
 * changes); an end-of-generation token is accepted only where the grammar
 * may end and leaves the constraint finished. */
int  moe_constraint_accept(moe_constraint *c, int32_t token);
/* Advances by raw bytes (text forced into the output). */
int  moe_constraint_accept_bytes(moe_constraint *c, const char *bytes, size_t len);
/* The output so far is a complete sentence of the grammar (it may end). */
bool moe_constraint_accepting(const moe_constraint *c);
/* Nothing but the end can follow (complete, and no byte continues it). */
bool moe_constraint_finished(const moe_constraint *c);
const char *moe_constraint_error(const moe_constraint *c);

/* Sampling restricted to allowed[] (NULL: every token): greedy is the argmax
 * over the allowed tokens (ties to the lowest id), sampling renormalises over
 * them; the logits themselves are never changed. -1 when none is allowed. */
int32_t moe_sampler_sample_masked(moe_sampler *s, const float *logits, const uint8_t *allowed);

#ifdef __cplusplus
}
#endif
#endif
