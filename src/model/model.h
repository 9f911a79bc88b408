/* model.h — the internal representation of a loaded model and of a context.
 *
 * A moe_model owns the mapped GGUF, the tokenizer, the hyperparameters and
 * per-layer descriptors of the shared building blocks (blocks.h) with views
 * of their weights; it is read-only after load and shared by contexts. Which
 * blocks a layer runs, and with which parameters, is the architecture's
 * business (model/arch/): generic code reads only the descriptors.
 *
 * A moe_context owns one worker pool, the KV caches of up to n_seq
 * sequences and every scratch buffer, all allocated up front so that a
 * forward step allocates nothing. A moe_session (the public one-sequence
 * API) is a context with one sequence and its length. */
#ifndef MOE_MODEL_H
#define MOE_MODEL_H

#include <stdio.h>
#include "moefast.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "base/threads.h"
#include "text/tokenizer.h"
#include "model/profile.h"

/* A weight matrix (or a stack of n_mat expert matrices): n_out rows of n_in
 * values; row r of matrix e starts at data + e*mat_bytes + r*row_bytes. */
typedef struct moe_weight {
    const char *name;        /* tensor name (points into the gguf_file) */
    const uint8_t *data;
    uint32_t type;
    int64_t n_in, n_out, n_mat;
    size_t row_bytes, mat_bytes;
    bool x4;                 /* data is in the x4 layout (quant.h), repacked at load */
    bool a8;                 /* data is in the a8 layout (act8_ref.c): flag act_q8, 8-bit activations */
    const float *scale;      /* optional second-level scale: [1] or [n_mat]; NULL if none */
    int64_t n_scale;
} moe_weight;

/* How a decoded token reads a bound matrix: every row of it (dense
 * projections, routers, shared experts, the lm head), or n_expert_used of
 * its n_mat matrices (routed experts). */
typedef enum moe_weight_use { MOE_USE_ALL = 0, MOE_USE_TOPK = 1 } moe_weight_use;

/* The model's list of the matrices the forward pass multiplies with, in
 * binding order: filled by moe_bind_weight (bind.c) and read by everything
 * that needs "every matrix" — the load-time repack, the bytes per token, the
 * compute ceiling, `info`. The embedding is not in it (read row by row). */
typedef struct moe_weight_ref {
    moe_weight *w;
    moe_weight_use use;
} moe_weight_ref;

typedef struct moe_rope {
    int n_rot;               /* rotated dims per head; the rest pass through */
    bool adjacent;           /* pairs (2i, 2i+1) (llama.cpp's NORM mode); false: NEOX pairs (i, i + n_rot/2) */
    float base;
    bool yarn;               /* YaRN context extension */
    float yarn_factor;       /* context extension factor (freq_scale = 1/factor) */
    int yarn_orig_ctx;
    float yarn_beta_fast, yarn_beta_slow;
    float yarn_ext_factor;   /* 1.0 for YaRN */
    float attn_factor;       /* mscale before the YaRN correction (1.0) */
} moe_rope;

#define MOE_MAX_ROPES 2      /* distinct RoPE tables a model may use (laguna: full and sliding layers) */

struct moe_context;

/* ---- block descriptors (what the architectures fill in; blocks.h runs them) ---- */

/* Grouped-query attention with RoPE (blocks.h: moe_block_attention):
 *   h = RMSNorm(x) * norm;  q, k, v = Wq h + bq, Wk h + bk, Wv h + bv  (+ Wextra h)
 *   q, k = RoPE(RMSNorm_head(q) * q_norm), ... (each norm and bias optional;
 *          qk_norm_full: RMSNorm over the whole q row (all heads) instead)
 *   a = softmax(q k^T / sqrt(head_dim) + mask) v,  mask: causal, or the last
 *       `window` positions
 *   a = head_hook(a)  (optional, per query head, e.g. an output gate)
 *   x += Wo a + bo */
typedef struct moe_attn_desc {
    int n_head;              /* query heads of this layer (a multiple of the KV heads) */
    int window;              /* 0: every earlier position; > 0: the last `window` positions */
    int rope;                /* index into moe_model.ropes (and the context's RoPE tables) */
    const float *norm, *q_norm, *k_norm;   /* F32 vectors; q_norm / k_norm may be NULL */
    /* q_norm / k_norm span the whole projection (n_head*head_dim, n_head_kv*head_dim
     * values: one RMSNorm per token row, before the split into heads), not one head */
    bool qk_norm_full;
    moe_weight wq, wk, wv, wo;
    const float *bq, *bk, *bv, *bo;        /* biases added to the projections' outputs, or NULL */
    /* attention sinks: one learned logit per query head that joins each
     * softmax denominator and takes no value (not scaled, not masked), or NULL */
    const float *sinks;
    /* An extra projection of the attention input, computed in the same pool
     * phase as Q/K/V into the context's `gate` rows (n_out per token), and a
     * hook applied to query heads [h0, h1) of token t's attention output
     * before Wo; both absent (wextra.data NULL, head_hook NULL) when unused. */
    moe_weight wextra;
    void (*head_hook)(const struct moe_context *c, const struct moe_attn_desc *d, int t, int h0, int h1);
    int hook_arg;            /* free for the hook (laguna: gate values per element, not per head) */
    /* The layer's values are the first head_dim_v dims of its cached keys
     * (MLA's latent c, mla.c): it has no V cache rows of its own. When every
     * layer says so the context allocates no V cache (FP32 / F16 caches). */
    bool v_from_k;
} moe_attn_desc;

/* Multi-head latent attention (DeepSeek-V2, blocks.h: moe_block_mla), per token:
 *   h = RMSNorm(x) * norm
 *   q = Wq_b (RMSNorm(Wq_a h) * q_a_norm)  (or Wq h)     [n_head][nope | rope]
 *   [c | k_pe] = Wkv_a h;  c = RMSNorm(c) * kv_a_norm;  k_pe = RoPE(k_pe)
 *   per head: q~ = [Wk_b_h q_nope | RoPE(q_pe)], key = [c | k_pe] (one row
 *   shared by all heads: the cache), value = c, o_h = Wv_b_h softmax(q~ . key * kq_scale) c
 *   x += Wo [o_0 .. o_{H-1}] */
typedef struct moe_mla_desc {
    int nope, rope_dim, kv_lora, v_dim, q_lora;   /* q_lora 0: wq instead of wq_a / q_a_norm / wq_b */
    float kq_scale;
    const float *norm, *q_a_norm, *kv_a_norm;
    moe_weight wq, wq_a, wq_b, wkv_a, wo;
    moe_weight wk_b, wv_b;   /* stacks of n_head: [kv_lora rows of nope], [v_dim rows of kv_lora] */
} moe_mla_desc;

/* Router scores: logits -> probabilities in place (blocks.h provides the
 * softmax and the sigmoid). */
typedef void (*moe_router_probs_fn)(float *p, int n);

typedef struct moe_router_desc {
    moe_weight w;                  /* ffn_gate_inp: n_in n_embd, n_out n_expert */
    moe_router_probs_fn probs;
    const float *select_bias;      /* added to the probabilities for the top-k choice only, or NULL */
    bool renorm;                   /* chosen weights divided by their sum (clamped >= 2^-14) */
    float scale;                   /* chosen weights multiplied by it (1: none) */
    /* Group-limited routing (0: none): the experts form n_group consecutive
     * groups; a group scores the sum of its two best selection scores and
     * only the n_group_used best groups' experts may be chosen. */
    int n_group, n_group_used;
    const float *bias;             /* added to the router logits before everything else, or NULL */
    /* the weights are the softmax over the k chosen scores (probs then
     * usually NULL: the top-k is taken on the raw logits) */
    bool softmax_topk;
} moe_router_desc;

/* SwiGLU FFN: Wd (silu(Wg h) * Wu h) with h = RMSNorm(x) * norm. */
typedef struct moe_ffn_desc {
    const float *norm;
    moe_weight gate, up, down;
} moe_ffn_desc;

/* The routed experts' gated activation y(g, u) of gate g = Wg h + bg and up
 * u = Wu h + bu: SwiGLU silu(g) * u, or the clamped SwiGLU of OpenAI's
 * gpt-oss, g' = min(g, 7): g' * sigmoid(1.702 g') * (clamp(u, -7, 7) + 1). */
typedef enum moe_ffn_act { MOE_ACT_SWIGLU = 0, MOE_ACT_SWIGLU_CLAMP = 1 } moe_ffn_act;

/* Mixture of experts: x += sum_k w_k SwiGLU_{e_k}(h) (+ g * SwiGLU_shared(h)),
 * g = sigmoid(shared_gate . h) with a shared gate, else 1. */
typedef struct moe_moe_desc {
    const float *norm;
    moe_router_desc router;
    moe_weight gate_exps, up_exps, down_exps;   /* n_mat = n_expert */
    moe_ffn_act act;                            /* the routed experts' activation */
    /* per-expert biases of the routed experts, or NULL: gate / up
     * [n_expert][n_ff_exp], down [n_expert][n_embd] */
    const float *b_gate_exps, *b_up_exps, *b_down_exps;
    bool has_shared;
    moe_weight gate_sh, up_sh, down_sh;         /* the always-on shared expert */
    moe_weight shared_gate;                     /* n_in n_embd, n_out 1; data NULL when absent */
} moe_moe_desc;

/* One layer: the architecture's layer function reads its descriptors. */
typedef struct moe_layer {
    moe_attn_desc attn;
    moe_mla_desc mla;        /* latent attention (deepseek2): attn then holds n_head, rope, v_from_k */
    bool dense;              /* the FFN is `ffn` (dense), not `moe` */
    moe_ffn_desc ffn;
    moe_moe_desc moe;
} moe_layer;

typedef struct moe_hparams {
    int n_layer, n_embd, n_vocab, n_ctx_train;
    int n_head_max, n_head_kv, head_dim, head_dim_v;
    float rms_eps;
    int n_expert, n_expert_used, n_ff, n_ff_exp, n_ff_shexp;
    /* block-private scratch the context allocates (0: none): floats per
     * token of the step (c->blk_tok) and bytes per thread (c->blk_thr) */
    int blk_tok, blk_thr;
} moe_hparams;

#define MOE_MAX_NOTES 32

struct moe_arch;

struct moe_model {
    char *path;
    gguf_file *gf;
    const struct moe_arch *arch;
    const char *arch_name;
    bool vocab_only;
    moe_hparams hp;
    moe_rope ropes[MOE_MAX_ROPES];
    int n_ropes;
    moe_layer *layers;
    moe_weight_ref *weights; /* every bound matrix (bind.c), n_weights of them */
    int n_weights, cap_weights;
    moe_weight tok_embd;     /* n_in = n_embd, n_out = n_vocab */
    moe_weight output;       /* lm head (tied to tok_embd when absent) */
    const float *output_norm;
    struct moe_screen *screen; /* the lm head's certified screen (flag lm_screen at load), or NULL */
    float *owned_vectors;    /* norm vectors converted to F32 at load */
    uint8_t *repacked;       /* anonymous mapping holding x4-repacked weights, or NULL */
    size_t repacked_bytes;
    size_t owned_used, owned_cap;
    moe_tokenizer *tok;
    char *chat_template;     /* NUL-terminated copy of tokenizer.chat_template, or NULL */
    uint64_t flags;
    bool diff;
    /* RoPE scaling asked for at load (moe_load_params: rope_scaling, ...),
     * applied by moe_read_rope to the tables that take the file's scaling */
    struct {
        enum { MOE_ROPE_FILE = 0, MOE_ROPE_NONE, MOE_ROPE_YARN } mode;
        float factor;        /* 0: the file's */
        int orig_ctx;        /* 0: the file's */
        bool applied;        /* a table took it (else the load refuses it) */
    } rope_override;
    uint64_t bytes_per_token;
    /* expert parallelism (moefast/shard.h): this process holds routed experts
     * [ex_first, ex_end) of shard `shard` of n_shards (1: all); shard 0 of
     * several reaches the others through link */
    int shard, n_shards, ex_first, ex_end;
    const moe_shard_link *link;
    char sha256[65];
    char *notes[MOE_MAX_NOTES]; /* "key absent: default X used" lines for info */
    int n_notes;
};

/* ---- context ------------------------------------------------------------------ */

/* One SwiGLU job of an FFN block (ffn.c). */
typedef struct moe_ffn_job {
    const moe_weight *wg, *wu, *wd;
    int64_t mat;             /* expert index (0 for dense / shared) */
    const float *x;          /* [nr][n_in] inputs */
    const uint8_t *xa;       /* act_q8: the inputs as A8 rows (moe_act8_row_bytes(n_in) apart), or NULL */
    int nr;                  /* rows (tokens) */
    uint8_t *ha;             /* act_q8: room for the hidden rows as A8 rows (input of wd), or NULL */
    float *hg, *hu;          /* [nr][F] hidden */
    float *out;              /* [nr][n_out] */
    const float *bg, *bu, *bd; /* biases of this matrix (rows of wg / wu / wd), or NULL */
    moe_ffn_act act;
} moe_ffn_job;

struct moe_context {
    moe_model *m;
    const moe_kernels *kern;
    const struct moe_attn_kernels *attn;
    /* The level the simd flag selects, taken at creation (moe_set_isa affects
     * contexts created afterwards), so set_flags can switch simd back on
     * without picking up a later moe_set_isa. */
    const moe_kernels *kern_simd;
    moe_pool *pool;
    bool pool_borrowed;         /* a sibling's: the pool belongs to the context it was made from */
    int n_threads, n_ctx, n_batch, n_seq;
    uint64_t flags;
    int *seq_len;               /* [n_seq]: positions cached per sequence */
    /* The tokens of the step being run (forward.c): position and sequence of
     * each of its n_tok tokens. */
    int n_tok;
    int32_t *tok_pos, *tok_seq; /* [n_batch] */
    int32_t *out_rows;          /* [n_batch]: the tokens whose logits are wanted */
    /* KV cache, a block per sequence, [n_seq][n_layer][n_head_kv] then: F32 or
     * IEEE half (kv_half) [n_ctx][head_dim]; kv_q8: int8 key tiles
     * [ctx_pad][head_dim] and value rows [ctx_pad][head_dim_v] (layouts: attn.h) */
    void *k_cache, *v_cache;
    bool kv_half;               /* flag kv_f16 */
    bool kv_q8;                 /* flag kv_q8 */
    int ctx_pad;                /* n_ctx rounded up to 16 (the kv_q8 key tiles) */
    uint16_t *k_scale, *v_scale;/* kv_q8: half [n_seq][n_layer][n_head_kv][head_dim(_v)/32][ctx_pad] */
    uint8_t *q_a8;              /* kv_q8: [n_threads][n_head_max] A8 rows of the query heads, a8_row apart */
    uint8_t *kv_a8;             /* kv_q8: [n_threads] one A8 row: the key or value being stored */
    size_t a8_row;              /* kv_q8: moe_act8_row_bytes(max(head_dim, head_dim_v)) */
    float *attn_w;              /* kv_q8: [n_threads][n_head_max * head_dim_v/32 * n_ctx] accum_q8 scratch */
    /* kv_tq / kv_tq_small (kv_tq.h): code bits of keys and values; the
     * caches hold rows of moe_tq_row_bytes, [seq][layer][kv head][n_ctx].
     * kv_tq_k / kv_tq_v (measurement): the other half's bits are 0 and its
     * rows FP32 (D floats), scored or summed by the FP32 cache's kernels */
    bool kv_tq;                 /* kv_tq or kv_tq_small: attn_item_tq's path */
    int tq_kbits, tq_vbits;     /* 0: that half FP32 */
    size_t tq_krow, tq_vrow;    /* bytes of one cached key / value row */
    float *tq_buf;              /* kv_tq: [n_threads][tq_stride]: rotated query heads, then D encode scratch */
    size_t tq_stride;           /* kv_tq: (n_head_max + 1) * max(head_dim, head_dim_v) */
    float *rope_tab[MOE_MAX_ROPES]; /* [n_ctx][n_rot/2][2] cos, sin per model rope */
    /* scratch, sized for n_batch tokens */
    float *x, *xn, *q, *k, *v, *att, *gate, *proj, *ffn_out;   /* gate: also the MoE block's shared-gate logits */
    float *router, *selw, *eout, *hg, *hu, *xg;
    int32_t *sel, *ex_slot;
    int32_t *gather_src;        /* [n_batch * n_expert_used]: token of each gathered row, -1: read in place */
    int32_t *expert_rows;       /* [n_expert]: a chunk's rows per expert, then its next free row */
    moe_ffn_job *jobs;          /* [n_expert + 1] */
    int64_t *job_pre;           /* [2][n_expert + 2]: row and work prefix sums */
    float *scores;              /* [n_threads][n_head_max][sc_stride] */
    size_t sc_stride;           /* floats between score rows: ctx_pad + 16, so the rows of a
                                 * tile are not a multiple of 4 KiB apart (one L1 set) */
    float *attn_sum;            /* [n_threads][2][n_head_max]: softmax sums, the sinks' terms */
    float *logits_tmp;          /* differential twin only: [n_batch][n_vocab] */
    float *blk_tok;             /* [n_batch][hp.blk_tok]: scratch of blocks that need their own (mla.c) */
    uint8_t *blk_thr;           /* [n_threads][hp.blk_thr] bytes, 64-aligned rows */
    /* flag act_q8 only (NULL otherwise): 8-bit activation rows (act8_ref.c) */
    uint8_t *xa;                /* [n_batch] rows of max(n_embd, n_head_max*head_dim_v) */
    uint8_t *xga;               /* [n_batch*n_expert_used] rows of n_embd: gathered expert inputs */
    uint8_t *ha;                /* hidden rows of the FFN jobs (input of the down projections) */
    struct moe_context *shadow; /* differential mode: the reference twin (numerics flags only) */
    bool diverged;              /* differential mode: a block's tensors differed (err says where) */
    int step_rc;                /* a step's failure other than a difference (the shard link's), or 0 */
    /* expert parallelism, shard 0: per other shard one request head
     * (moe_shard_head + n_expert groups), shard_head_bytes apart */
    uint8_t *shard_heads;
    size_t shard_head_bytes;
    moe_prof prof;              /* phase profile (profile.h); off unless enabled */
    /* top-k outputs (moe_session_forward_topk, forward.c head_topk): the
     * request, scratch [n_vocab] and the screen's running figures */
    int topk_k;
    int32_t *topk_ids;
    float *topk_vals;
    float *scr_s1, *scr_y;
    int32_t *scr_ids;
    uint8_t *scr_done;
    int8_t *scr_xq;             /* the integer level 1: [n_embd] codes, [n_embd/4] lane sums and scales */
    int32_t *scr_q120;
    float *scr_tv;
    int64_t scr_steps, scr_screened, scr_level2, scr_exact, scr_last_exact;
    int scr_miss, scr_skip;     /* the governor: misses in a row, steps left to run the full head directly */
    int scr_backoff;            /* the governor: the next skip after a run of misses (0: SCREEN_SKIP) */
    double scr_t_full;          /* the governor: seconds per row of the full head (smoothed; 0: not yet measured) */
    int scr_group;              /* rows of scr_y: the full head's rows per pass when top-k rows fall back */
    int32_t *scr_rows;          /* [n_batch] the wanted rows that fall back to the full head */
    int32_t *twin_ids;          /* differential twin only: [n_batch][64] its top-k of a step */
    float *twin_vals;
    double scr_bytes, scr_full_bytes;
    char err[MOE_ERR_LEN];
};

struct moe_session {
    moe_context *c;             /* one sequence: seq 0 */
};

/* fn on every thread of the context's pool (ith 0 is the caller), or on the
 * caller alone with one thread. */
static inline void moe_ctx_par(const moe_context *c, moe_task_fn fn, void *arg) {
    if (c->n_threads > 1) moe_pool_run(c->pool, fn, arg);
    else fn(arg, 0, 1);
}

/* forward.c: one step over n <= n_batch tokens whose positions and sequences
 * are in c->tok_pos / c->tok_seq (validated by the caller); logits of the
 * n_out tokens listed in c->out_rows go to logits [n_out][n_vocab]. */
int moe_forward_step(moe_context *c, const int32_t *tokens, int n, float *logits, int n_out);

/* context.c: creation with an explicit flag set (sessions, siblings, the
 * differential twin), flag changes, the per-context measurements. */
int moe_context_create(moe_model *m, const moe_context_params *p, uint64_t flags, moe_pool *borrow,
                       moe_context **out, char *err, size_t errlen);
int moe_context_set_flags_(moe_context *c, const char *spec, char *err, size_t errlen);
int moe_context_sibling_(moe_context *c, const char *spec, moe_context **out, char *err, size_t errlen);
int moe_context_profile_enable_(moe_context *c, bool on);
int moe_context_profile_read_(const moe_context *c, moe_phase_stat *out, int max);
int moe_context_compute_ceiling_(moe_context *c, moe_ceiling_part *parts, int max, int *n_parts, double *seconds,
                                 char *err, size_t errlen);
/* KV-cache bytes one layer's attention reads for a token at position pos. */
double moe_attn_kv_bytes(const moe_context *c, const moe_attn_desc *d, int pos);
/* attention.c: the item (layer il, KV head g) of a decode step of sequence 0
 * at position pos, as the forward pass runs it (the same kernels, scratch of
 * thread ith), with query heads q and output o (G heads each): for
 * ceiling.c, which times it. Positions 0..pos must be cached; the layer a
 * grouped-query one (not v_from_k). */
void moe_attn_decode_item(moe_context *c, int il, int pos, int g, const float *q, float *o, int ith);
int moe_context_attention_ceiling_(moe_context *c, int pos, moe_ceiling_part *part, double *kv_bytes, char *err,
                                   size_t errlen);

/* matmul.c: rows [r0, r1) of Y[t][r] = W_mat . X[t] with the context's
 * kernels, as every matrix product of the forward pass is computed (a8
 * weights read the A8 rows xa, every other weight the float rows x); r0 a
 * multiple of 8, r1 one too or the matrix end. ceiling.c times it. */
void moe_matmul_rows(const moe_context *c, const moe_weight *w, int64_t mat, const float *x, size_t x_stride,
                     const uint8_t *xa, size_t xa_stride, int n, float *y, size_t y_stride, int64_t r0, int64_t r1);

/* loader.c */
void moe_note(moe_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#endif
