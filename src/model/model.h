/* model.h — internal representation of a loaded model and of a session.
 *
 * A moe_model owns the mapped GGUF, the tokenizer and per-layer views of the
 * weights; it is read-only after load and can be shared by sessions. A
 * moe_session owns the KV cache, the worker pool and every scratch buffer,
 * all allocated up front so that a forward call allocates nothing. */
#ifndef MOE_MODEL_H
#define MOE_MODEL_H

#include <stdio.h>
#include "moefast.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "base/threads.h"
#include "text/tokenizer.h"
#include "model/profile.h"

typedef enum moe_arch { MOE_ARCH_LAGUNA = 0, MOE_ARCH_QWEN3MOE = 1 } moe_arch;

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

typedef struct moe_rope {
    int n_rot;               /* rotated dims per head (NEOX pairs i, i + n_rot/2) */
    float base;
    bool yarn;               /* YaRN (full-attention laguna layers) */
    float yarn_factor;       /* context extension factor (freq_scale = 1/factor) */
    int yarn_orig_ctx;
    float yarn_beta_fast, yarn_beta_slow;
    float yarn_ext_factor;   /* 1.0 for YaRN */
    float attn_factor;       /* mscale before the YaRN correction (1.0) */
} moe_rope;

typedef struct moe_layer {
    int n_head;              /* query heads of this layer */
    bool swa;                /* sliding-window attention layer */
    bool dense;              /* dense SwiGLU FFN instead of MoE */
    const moe_rope *rope;
    const float *attn_norm, *q_norm, *k_norm, *ffn_norm; /* F32 vectors */
    moe_weight wq, wk, wv, wo;
    moe_weight wgate;        /* laguna: softplus output gate (n_out = n_head or n_head*head_dim) */
    bool has_gate, gate_per_elem;
    moe_weight ffn_gate, ffn_up, ffn_down;         /* dense FFN */
    moe_weight router;                             /* ffn_gate_inp: n_in E, n_out n_expert */
    const float *exp_bias;                         /* laguna exp_probs_b [n_expert] or NULL */
    moe_weight gate_exps, up_exps, down_exps;      /* n_mat = n_expert */
    moe_weight gate_sh, up_sh, down_sh;            /* shared expert */
    bool has_shexp;
} moe_layer;

typedef struct moe_hparams {
    int n_layer, n_embd, n_vocab, n_ctx_train;
    int n_head_max, n_head_kv, head_dim, head_dim_v;
    float rms_eps;
    int swa_window, swa_pattern;
    int n_expert, n_expert_used, n_ff, n_ff_exp, n_ff_shexp, n_dense_lead;
    bool expert_weights_norm;
    float expert_weights_scale;
    int gating_func;         /* 1 softmax, 2 sigmoid (llama.cpp's numbering) */
    moe_rope rope_full, rope_swa;
} moe_hparams;

#define MOE_MAX_NOTES 32

struct moe_model {
    char *path;
    gguf_file *gf;
    moe_arch arch;
    const char *arch_name;
    bool vocab_only;
    moe_hparams hp;
    moe_layer *layers;
    const uint8_t *tok_embd_data;
    moe_weight tok_embd;     /* n_in = n_embd, n_out = n_vocab */
    moe_weight output;       /* lm head (tied to tok_embd when absent) */
    const float *output_norm;
    float *owned_vectors;    /* norm vectors converted to F32 at load */
    uint8_t *repacked;       /* anonymous mapping holding x4-repacked weights, or NULL */
    size_t repacked_bytes;
    double load_seconds;
    size_t owned_used, owned_cap;
    moe_tokenizer *tok;
    char *chat_template;     /* NUL-terminated copy of tokenizer.chat_template, or NULL */
    uint64_t flags;
    bool diff;
    uint64_t bytes_per_token;
    char sha256[65];
    char *notes[MOE_MAX_NOTES]; /* "key absent: default X used" lines for info */
    int n_notes;
};

/* ---- session ---------------------------------------------------------------- */

/* One SwiGLU job of an FFN block (forward.c). */
typedef struct moe_ffn_job {
    const moe_weight *wg, *wu, *wd;
    int64_t mat;             /* expert index (0 for dense / shared) */
    const float *x;          /* [nr][n_in] inputs */
    const uint8_t *xa;       /* act_q8: the inputs as A8 rows (moe_act8_row_bytes(n_in) apart), or NULL */
    int nr;                  /* rows (tokens) */
    uint8_t *ha;             /* act_q8: room for the hidden rows as A8 rows (input of wd), or NULL */
    float *hg, *hu;          /* [nr][F] hidden */
    float *out;              /* [nr][n_out] */
} moe_ffn_job;

struct moe_session {
    moe_model *m;
    const moe_kernels *kern;
    const struct moe_attn_kernels *attn;
    /* The level the simd flag selects, taken at creation (moe_set_isa affects
     * sessions created afterwards), so moe_session_set_flags can switch simd
     * back on without picking up a later moe_set_isa. */
    const moe_kernels *kern_simd;
    moe_pool *pool;
    bool pool_borrowed;         /* a sibling's: the pool belongs to the session it was made from */
    int n_threads, n_ctx, n_batch, n_past;
    uint64_t flags;
    void *k_cache, *v_cache;    /* [n_layer][n_head_kv][n_ctx][head_dim]: float, or IEEE half (kv_half);
                                 * kv_q8: int8 key tiles [n_layer][n_head_kv][ctx_pad][head_dim] and
                                 * value rows [n_layer][n_head_kv][ctx_pad][head_dim_v] (layouts: attn.h) */
    bool kv_half;               /* flag kv_f16 */
    bool kv_q8;                 /* flag kv_q8 */
    int ctx_pad;                /* n_ctx rounded up to 16 (the kv_q8 key tiles) */
    uint16_t *k_scale, *v_scale;/* kv_q8: half [n_layer][n_head_kv][head_dim(_v)/32][ctx_pad] */
    uint8_t *q_a8;              /* kv_q8: [n_threads][n_head_max] A8 rows of the query heads, a8_row apart */
    uint8_t *kv_a8;             /* kv_q8: [n_threads] one A8 row: the key or value being stored */
    size_t a8_row;              /* kv_q8: moe_act8_row_bytes(max(head_dim, head_dim_v)) */
    float *attn_w;              /* kv_q8: [n_threads][n_head_max * head_dim_v/32 * n_ctx] accum_q8 scratch */
    float *rope_full, *rope_swa;/* [n_ctx][n_rot/2][2] cos, sin */
    /* scratch, sized for n_batch tokens */
    float *x, *xn, *q, *k, *v, *att, *gate, *proj, *ffn_out;
    float *router, *selw, *eout, *hg, *hu, *xg;
    int32_t *sel, *ex_slot;
    int32_t *gather_src;        /* [n_batch * n_expert_used]: token of each gathered row, -1: read in place */
    int32_t *expert_rows;       /* [n_expert]: a chunk's rows per expert, then its next free row */
    moe_ffn_job *jobs;          /* [n_expert + 1] */
    int64_t *job_pre;           /* [2][n_expert + 2]: row and work prefix sums */
    float *scores;              /* [n_threads][n_head_max][n_ctx] */
    float *attn_sum;            /* [n_threads][n_head_max] */
    float *logits_tmp;          /* differential twin only: [n_batch][n_vocab] */
    /* flag act_q8 only (NULL otherwise): 8-bit activation rows (act8_ref.c) */
    uint8_t *xa;                /* [n_batch] rows of max(n_embd, n_head_max*head_dim_v) */
    uint8_t *xga;               /* [n_batch*n_expert_used] rows of n_embd: gathered expert inputs */
    uint8_t *ha;                /* hidden rows of the FFN jobs (input of the down projections) */
    struct moe_session *shadow; /* differential mode: the all-flags-off twin */
    moe_prof prof;              /* phase profile (profile.h); off unless moe_session_profile_enable */
    char err[MOE_ERR_LEN];
};

/* forward.c: one chunk of n <= n_batch tokens at positions n_past.. */
int moe_forward_chunk(moe_session *s, const int32_t *tokens, int n, float *logits, bool all_logits);
/* fn on every thread of the session's pool (ith 0 is the caller), or on the
 * caller alone with one thread. */
static inline void moe_session_par(const moe_session *s, moe_task_fn fn, void *ctx) {
    if (s->n_threads > 1) moe_pool_run(s->pool, fn, ctx);
    else fn(ctx, 0, 1);
}
/* forward.c: rows [r0, r1) of Y[t][r] = W_mat . X[t] with the session's
 * kernels, as every matrix product of the forward pass is computed (a8
 * weights read the A8 rows xa, every other weight the float rows x); r0 a
 * multiple of 8, r1 one too or the matrix end. ceiling.c times it. */
void moe_matmul_rows(const moe_session *s, const moe_weight *w, int64_t mat, const float *x, size_t x_stride,
                     const uint8_t *xa, size_t xa_stride, int n, float *y, size_t y_stride, int64_t r0, int64_t r1);

/* Per-architecture binding (laguna.c, qwen3moe.c). */
int moe_bind_laguna(moe_model *m, char *err, size_t errlen);
int moe_bind_qwen3moe(moe_model *m, char *err, size_t errlen);

/* loader.c helpers shared by the binders. */
int moe_bind_weight(moe_model *m, moe_weight *w, const char *name, int64_t n_in, int64_t n_out,
                    int64_t n_mat, bool required, char *err, size_t errlen);
int moe_bind_vector(moe_model *m, const float **out, const char *name, int64_t n, bool required,
                    char *err, size_t errlen);
int moe_get_u32_def(moe_model *m, const char *key, uint32_t def, uint32_t *out, bool required,
                    char *err, size_t errlen);
int moe_get_f32_def(moe_model *m, const char *key, float def, float *out, char *err, size_t errlen);
void moe_note(moe_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));



int moe_read_rope(moe_model *m, moe_rope *r, const char *base_key, float base_def, const char *dims_key,
                  int dims_def, bool allow_scaling, char *err, size_t errlen);
int moe_bind_attention(moe_model *m, int il, char *err, size_t errlen);
int moe_bind_ffn(moe_model *m, int il, char *err, size_t errlen);
int moe_bind_io(moe_model *m, char *err, size_t errlen);
int moe_check_hparams(moe_model *m, char *err, size_t errlen);
int moe_read_common_hparams(moe_model *m, char *err, size_t errlen);
#endif
