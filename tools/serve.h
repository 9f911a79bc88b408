/* serve.h — `moefast serve`: an OpenAI-compatible HTTP server (docs/SERVE.md).
 *
 * Three parts, one file each:
 *   serve_engine.c  the engine thread: owns the moe_context, runs the
 *                   continuous-batching loop over the slots (one sequence
 *                   each), the bounded queue, the prompt cache;
 *   serve_api.c     the OpenAI request bodies parsed and checked, the
 *                   response bodies and stream chunks written (jansson);
 *   serve_http.c    libmicrohttpd: routing, auth, body limits, streaming,
 *                   disconnects, /health and /metrics, the log line.
 * cmd_serve.c reads the options, starts them and shuts them down on a signal.
 *
 * Locking: one mutex (srv.mu) guards the queue, every request's shared part
 * (its text, counters, flags) and the metrics. The engine holds it only to
 * admit requests and to hand over a step's results, never during a step. */
#ifndef MOE_SERVE_H
#define MOE_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "moefast.h"

typedef struct json_t json_t;

enum { SRV_CHAT = 1, SRV_COMPLETION = 2 };
#define SRV_MAX_STOP 4
#define SRV_MAX_CHOICES 8              /* OpenAI's n: choices per request */

/* One request, from the HTTP thread that parsed it to the last reference
 * (the HTTP side's and, while queued or in a slot, the engine's). */
typedef struct srv_req {
    /* set by the HTTP thread before submission, then read-only */
    uint64_t id;
    int kind;
    int choice, n_choices;          /* n > 1: choice i of n, each its own request (seed + i) */
    uint64_t answer_id;             /* the id the answer's chunks carry: choice 0's (its own id for n = 1) */
    /* streamed n > 1: choice 0, whose cv is signalled too when this choice
     * changes (the stream waits on that one); a reference of this choice's */
    struct srv_req *notify;
    bool stream, include_usage, return_tokens;
    bool cache_prompt;              /* false: a cold prefill even when a slot holds the prefix */
    int32_t *prompt;
    int n_prompt;
    int max_tokens;
    char *stop[SRV_MAX_STOP];
    int n_stop;
    size_t max_stop_len;
    int n_top;                      /* -1: no logprobs; else alternatives per token (chat 0..20, completions 0..5) */
    moe_sampler *smp;               /* used by the engine thread only */
    /* `grammar` / `response_format` (docs/GRAMMAR.md): the constraint and
     * its mask buffer, engine thread only after submission; NULL: free text */
    moe_grammar *gram;
    moe_constraint *con;
    char *gkey;                     /* the grammar's cache key (serve_gcache.c): con/gram go back there */
    size_t gkey_len;
    struct srv_gcache *gcache;
    uint8_t *allowed;
    struct srv_tools *tools;        /* `tools` (serve_tools.c): NULL without, or under tool_choice none */
    bool reason;                    /* chat: <think> reasoning returned as reasoning_content (serve_reason.c) */
    bool think_open;                /* the prompt ends inside a think block (the reasoning starts at once) */
    bool harmony;                   /* gpt-oss chat: control tokens spelled in the text, channels split */
    moe_utf8_stream *utf8;          /* engine thread only */
    double t_arrive;
    char *model_name;               /* echoed in the response */
    long created;                   /* unix time, echoed */

    /* shared, under srv.mu */
    pthread_cond_t cv;              /* signalled when text, done or error change */
    int refs;
    int slot;                       /* -1 until admitted */
    int n_cached;                   /* prompt tokens reused from the slot's cache */
    int n_gen;
    int32_t *gen;                   /* max_tokens ids */
    /* with logprobs (n_top >= 0), per generated token i < n_gen: its
     * log-probability, its n_top best alternatives, and the text length
     * once its bytes were added (which stream chunk carries its entry) */
    float *lp;                      /* [max_tokens] */
    int32_t *top_id;                /* [max_tokens * n_top] */
    float *top_lp;
    size_t *tok_end;                /* [max_tokens] */
    char *text;                     /* generated text, valid UTF-8 */
    size_t len, cap;
    size_t emit;                    /* text[0..emit) can be sent (no stop string can start there) */
    bool done, cancelled;
    const char *finish;             /* "stop" | "length" once done without error */
    int err_status;                 /* != 0: failed (503 on shutdown, 500 engine error) */
    char errmsg[160];
    double t_first, t_done;
} srv_req;

typedef struct srv_slot {
    srv_req *req;                   /* NULL: free */
    int32_t *cache;                 /* the tokens in this sequence's KV (n_ctx) */
    int n_cache;
    uint64_t last_used;
} srv_slot;

enum { SRV_N_STATUS = 10 };
extern const int SRV_STATUS_CODES[SRV_N_STATUS]; /* the statuses counted; the last bucket is "other" */

/* decode-only steps by their number of tokens: 1..16, the last bucket 17 and more */
enum { SRV_SIZE_BUCKETS = 17 };

typedef struct srv_metrics {
    uint64_t requests[SRV_N_STATUS];
    uint64_t prompt_tokens, completion_tokens, cache_hits, cache_tokens;
    uint64_t cache_copies;          /* hits served by copying another slot's prefix (moe_context_seq_copy) */
    uint64_t steps, step_tokens;
    double step_seconds;
    /* steps with no prompt chunk: every token one running request's next */
    uint64_t decode_steps, decode_tokens;
    double decode_seconds;
    /* with --profile: weight bytes the steps streamed (shared matrices
     * once, the union of the selected experts once per step) */
    double weight_bytes, decode_weight_bytes;
    /* the decode-only steps again, by tokens in the step (bucket n - 1): what
     * a step of n running requests costs, apart from the steps of fewer */
    uint64_t size_steps[SRV_SIZE_BUCKETS];
    double size_seconds[SRV_SIZE_BUCKETS], size_weight_bytes[SRV_SIZE_BUCKETS];
    uint64_t cancelled;
} srv_metrics;

typedef struct srv {
    moe_model *m;
    moe_context *ctx;
    int n_vocab, n_ctx, n_slots, chunk, queue_cap;
    const char *model_name, *api_key, *chat_format;
    bool reason_extract;            /* --reasoning-format deepseek (the default): requests split reasoning off */
    bool harmony;                   /* the chat format is harmony (reason_harmony, at start) */
    moe_grammar_vocab *gvoc;        /* the token trie of constrained requests (built at init) */
    struct srv_gcache *gcache;      /* compiled grammars reused across requests (serve_gcache.c) */
    size_t max_body;
    unsigned step_delay_us;         /* test hook (MOEFAST_SERVE_STEP_DELAY_MS): a pause after each step */
    bool profile;                   /* --profile: the context's phase profile on (weight bytes per step) */
    double read_bw;                 /* --profile: memory read bandwidth measured at start, bytes/s */

    pthread_mutex_t mu;
    pthread_cond_t wake;            /* the engine waits here for work */
    srv_req **queue;                /* ring of q_size = queue_cap + n_slots */
    int q_head, q_len, q_size;
    srv_slot *slots;
    bool stopping;                  /* no new requests; queued ones refused */
    bool quit;                      /* the engine exits once idle (set with stopping) */
    double deadline;                /* after it, running requests are cancelled (503) */
    int busy;                       /* slots in use */
    uint64_t next_id, step_no;
    srv_metrics met;

    /* engine-thread scratch, allocated once */
    int32_t *tok, *seq;
    bool *want;
    int *row_slot;
    int32_t *ids;
    float *logits;
    int32_t *top_ids;          /* [n_slots][64]: a step's top k rows (every row greedy or top-k sampling) */
    float *top_vals;
    moe_phase_stat *phases;         /* --profile: the profile read after each step */
    int n_phases;
    double prof_bytes;              /* weight bytes of the profile so far */
    pthread_t engine;
    bool engine_started;
} srv;

double srv_now(void);

/* serve_engine.c */
int  srv_init(srv *s, moe_model *m, const moe_context_params *cp, int chunk, int queue_cap, char *err, size_t errlen);
/* Turns the phase profile on (weight bytes per step in /metrics), with the
 * memory read bandwidth (GB/s) measured before the model was loaded; before
 * srv_start. */
int  srv_enable_profile(srv *s, double read_gbs);
int  srv_start(srv *s);
/* Stops accepting, refuses the queued requests, lets running ones finish
 * until now + grace seconds, then cancels them; returns once the engine
 * thread has exited. */
void srv_shutdown(srv *s, double grace);
void srv_free(srv *s);
srv_req *srv_req_new(srv *s);        /* refs 1 (the caller's), id assigned */
void srv_req_unref(srv *s, srv_req *r);
/* Hands r to the engine: 0, or 503 (queue full / shutting down). */
int  srv_submit(srv *s, srv_req *r, const char **why);
/* Marks r cancelled (its client went away); the engine drops it at its next step. */
void srv_cancel(srv *s, srv_req *r);
/* Streamed n > 1: choice r's changes also signal first->cv (r takes a
 * reference to first); before r is submitted. */
void srv_req_notify(srv *s, srv_req *r, srv_req *first);

/* serve_api.c — an error names the HTTP status, message, param and code. */
typedef struct api_err {
    int status;
    char message[400];
    const char *type, *param, *code;
} api_err;
int  api_fail(api_err *e, int status, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
char *api_error_json(const api_err *e);                       /* malloc'd */
/* Parses a chat or completion body into a new request (submitted by the caller). */
/* choice: which of the body's n choices this request is (0 for the first;
 * a seeded request's choice i samples with seed + i). */
int  api_parse(srv *s, int kind, const char *body, size_t n, int choice, srv_req **out, api_err *e);
/* The final answer of a request's n choices (rs[0..n)): choice i's answer
 * as choices[i], usage summed over them (the prompt once). */
char *api_final_json_n(srv *s, srv_req *const *rs, int n, int *status);
/* The whole (non-streamed) answer of a done request; *status gets its HTTP status. */
char *api_final_json(srv *s, srv_req *r, int *status);
/* Stream events: "data: {...}\n\n" strings, malloc'd. */
/* The generated tokens [from, to) whose logprobs a stream chunk carries,
 * and the answer's text length when they were taken (under srv.mu). */
typedef struct api_lp_span { int from, to; size_t text_len; } api_lp_span;
/* lp: NULL or an empty span for "logprobs": null. */
char *api_chunk(srv *s, srv_req *r, const char *text, size_t len, bool role, const char *finish, const api_lp_span *lp);
/* The same with the text in delta.FIELD ("content" or "reasoning_content"). */
char *api_chunk_field(srv *s, srv_req *r, const char *field, const char *text, size_t len, bool role, const char *finish,
                      const api_lp_span *lp);
char *api_usage_chunk(srv *s, srv_req *r);
/* The usage chunk of n choices (rs[0..n)): the prompt once, the completions summed. */
char *api_usage_chunk_n(srv *s, srv_req *const *rs, int n);
/* A chunk with the given delta (taken over) and no finish_reason. */
char *api_delta_chunk(srv *s, srv_req *r, json_t *delta);
char *api_error_chunk(srv *s, srv_req *r);                   /* r failed (err_status, errmsg) */
char *api_models_json(srv *s, bool one);
/* llama.cpp server's POST /tokenize and /detokenize bodies (the answer's
 * JSON, or NULL after api_fail). */
char *api_tokenize_json(srv *s, const char *body, size_t n, api_err *e);
char *api_detokenize_json(srv *s, const char *body, size_t n, api_err *e);   /* the list, or the one model object */

/* serve_tools.c — tool calls (docs/SERVE.md, "Tool calls"). The call
 * syntax is the chat template family's; the grammar compiled from the
 * tools' parameter schemas engages at the first token (required, a named
 * function: the trigger is put after the prompt) or once the model writes
 * the trigger (auto). */
typedef struct srv_tool_call {
    char *id, *name, *args;         /* args: the text so far (complete once `complete`) */
    size_t args_len;
    bool complete;
} srv_tool_call;
typedef struct srv_tools {
    const struct tool_syntax *syn;
    bool engaged;                   /* the grammar is on: the calls have begun */
    char *raw;                      /* every generated token's bytes, special tokens spelled (the log) */
    size_t raw_len, raw_cap;
    size_t call_at;                 /* where in raw the calls begin (the trigger), once engaged */
    size_t *raw_at, *txt_at;        /* [max_tokens]: raw and text lengths before generated token i */
    /* the calls as they are written (tools_progress): a stream sends each
     * call's name once known and its arguments as they grow */
    srv_tool_call *calls;
    int n_calls;
    int phase;                      /* where parse_at is: before a call's opening, its name, its arguments */
    size_t parse_at, args_at;
    uint64_t version;               /* bumped when calls change (wakes a stream) */
    /* test hook (MOEFAST_SERVE_TEST_TOOL_TEXT, tool_choice auto only): the
     * first generated tokens are this text's, not sampled, so a
     * random-weight model can be made to write the trigger */
    int32_t *force;
    int n_force;
    json_t *kv_raw;                 /* glm45: {tool: {key: true}} for the arguments written raw (strings) */
} srv_tools;
/* Reads tools, tool_choice and parallel_tool_calls (before the prompt is
 * rendered): *rt gets NULL when there are no tools or tool_choice is none.
 * *tools_json: the tools array to render (NULL: none), borrowed from o. */
/* serve_gcache.c: r->gram and r->con for grammar text (kind 'G' GBNF, 'S'
 * JSON Schema), from the cache or built; gcache_give returns them (reset)
 * when the request ends. */
typedef struct srv_gcache srv_gcache;
int  gcache_new(srv *s);
void gcache_free(srv *s);
int  gcache_build(srv *s, srv_req *r, char kind, const char *text, size_t len, char *err, size_t errlen);
void gcache_give(srv_req *r);
void gcache_stats(srv *s, uint64_t *hits, uint64_t *misses);
/* A growing string (serve_tools.c): appends after an allocation failure are
 * dropped and oom stays set, so a caller checks once at the end. */
typedef struct tbuf { char *p; size_t n, cap; bool oom; } tbuf;
void tb_addn(tbuf *b, const char *s, size_t l);
void tb_add(tbuf *b, const char *s);
int  tools_parse(srv *s, json_t *o, srv_req *r, bool *forced, json_t **tools_json, api_err *e);
/* The chat messages (n, already checked: roles and contents) rewritten for
 * the template: tools rendered into the system prompt, assistant tool_calls
 * written in the template's call syntax, tool results as the template gives
 * them. *out and every string in *owned (count *n_owned) are malloc'd. */
int  tools_messages(srv *s, json_t *ms, const moe_chat_msg *msgs, size_t n, json_t *tools,
                    moe_chat_msg **out, size_t *n_out, char ***owned, size_t *n_owned, api_err *e);
/* serve_harmony.c: tools_messages for gpt-oss (harmony): the tools'
 * namespace in the developer message, calls and results in chat.c's
 * harmony pseudo-roles. *out (n + 2 entries) may be reallocated. */
int  harmony_messages(json_t *ms, const moe_chat_msg *msgs, size_t n, json_t *tools, moe_chat_msg **out, size_t *n_out,
                      char ***owned, size_t *n_owned, api_err *e);
/* serve_kimi.c: tools_messages for Kimi-K2: the tool_declare turn, calls
 * and results as Kimi-K2-Instruct's template writes them, a message's
 * `name` in place of its role (chat.c's kimi-k2 pseudo-roles tool_declare
 * and name). *out (2n + 1 entries) may be reallocated. */
int  kimi_messages(json_t *ms, const moe_chat_msg *msgs, size_t n, json_t *tools, moe_chat_msg **out, size_t *n_out,
                   char ***owned, size_t *n_owned, api_err *e);
/* The trigger text to put after the prompt (required / named), or NULL. */
const char *tools_forced_text(const srv_req *r);
/* Engine side (under srv.mu): token id of r was generated with raw bytes
 * (special tokens spelled); before its text was added. */
void tools_before_token(srv_req *r);
/* After the token's text was added: its bytes go to the raw text; under
 * auto, the trigger is watched for (then the grammar engages and the text
 * is cut back to before it). Returns the length of text that may be
 * emitted (a possible start of the trigger is held back). */
size_t tools_after_token(srv *s, srv_req *r, int32_t id);
/* After an engaged token: the calls written so far (names, growing
 * arguments) into r->tools->calls. */
void tools_progress(srv_req *r);
/* The request ended with an end token while the calls were on: every call
 * complete? (false: the message says why). */
bool tools_finish(srv_req *r, char *why, size_t whylen);
void tools_free(srv_tools *t);
/* The tool_calls array of the answer / the stream's tool-call chunks. */
json_t *tools_calls_json(const srv_req *r);
/* Stream chunks for the calls' progress since *call / *args_sent (under
 * srv.mu); advances them. "" when nothing is new; NULL: out of memory. */
char *api_tool_chunks(srv *s, srv_req *r, int *call, bool *head_sent, size_t *args_sent);
/* The raw generated text as a JSON string (invalid UTF-8 repaired), malloc'd. */
char *tools_raw_json(const srv_req *r);

/* serve_reason.c — <think>R</think>C split into reasoning R and content C.
 * Spans of t[0..n): the reasoning [r_from, r_to) (trimmed), the content
 * [c_from, c_to). Before `final`, a tail that may still become a marker or
 * trimmed space is in neither span (held), so the spans of a prefix are
 * prefixes of the spans of the whole. has: a think block began; open: it
 * has not ended; close_end: just after </think> (has && !open). held: the
 * text may still open a think block (nothing to send yet). */
typedef struct reason_span { size_t r_from, r_to, c_from, c_to, close_end; bool has, open, held; } reason_span;
void reason_split(const char *t, size_t n, bool open_at_start, bool final, reason_span *o);
/* The rendered prompt ends with <think> (and space): the template opened the block. */
bool reason_prompt_open(const char *prompt);
/* r's split: harmony's channels (r->harmony) or the think block. */
void reason_split_req(const srv_req *r, const char *t, size_t n, bool final, reason_span *o);
/* The chat format is harmony (gpt-oss): the answer's control tokens are spelled. */
bool reason_harmony(const srv *s);
/* The chat format is GLM-4.5's (glm45). */
bool reason_glm45(const srv *s);
/* The template writes an assistant turn's reasoning from <think>R</think> in
 * its content (Qwen3, GLM-4.5): reasoning_content sent back is folded there. */
bool reason_history_folds(const srv *s);
/* The chat format is Qwen3's template (qwen3: ChatML with its think handling). */
bool reason_qwen3(const srv *s);
/* What such a template keeps as the content: after the last </think>, '\n's stripped ahead. */
const char *reason_visible(const char *content);

/* serve_http.c */
struct MHD_Daemon;
struct MHD_Daemon *http_start(srv *s, const char *host, int port, int *bound_port, char *err, size_t errlen);
/* Requests whose answer is still being produced or sent. */
int  http_active(void);

#endif
