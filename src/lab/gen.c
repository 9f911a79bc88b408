/* gen.c — `moefast gen`: writes GGUF files of every architecture moefast
 * runs (qwen3moe, laguna, llama/Mixtral, olmoe, qwen2moe, glm4moe) with
 * seeded random weights, in exactly the layout llama.cpp reads (key names,
 * tensor names, shapes and order copied from the shared oracle files). Each
 * architecture is one row of ARCHS: its presets, the options of its tensors
 * and its own keys; the writer and the plan are shared.
 *
 * How weights are drawn (docs/MODELS.md): each tensor has its own PRNG stream
 * (seed mixed with a hash of the tensor name), each matrix row a sub-stream
 * (so rows are drawn in parallel without changing a byte). Every 32-value
 * block of a row is an f16 scale d times int8 values q (triangular on
 * -127..127, one value forced to +-127). The values d*q are exact in FP32, so
 * the F32 and Q8_0 files of one seed hold identical weights, and Q8_0 blocks
 * are written directly (ggml's Q8_0 quantizer gives back exactly d and q).
 * Other types are produced with moe_quantize_row. No libm is used on values
 * (1/sqrt for the per-tensor std is correctly rounded by IEEE): the file is
 * byte-identical on every platform. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "base/threads.h"
#include "base/util.h"

/* gen_vocab.c */
typedef struct moe_gen_vocab {
    char **tokens;
    int32_t *types;
    char **merges;
    size_t n_tokens, n_merges;
} moe_gen_vocab;
int moe_gen_vocab_build(int64_t n_vocab, const char *const *special, int n_special, moe_gen_vocab *out,
                        char *err, size_t errlen);
/* gen_templates.c: chat_template choices 2.. (their text and special tokens) */
typedef struct gen_template {
    const char *name, *text;
    const char *const *special;
    int n_special, bos, eos;
} gen_template;
const gen_template *moe_gen_template(int64_t i);
void moe_gen_vocab_free(moe_gen_vocab *v);

/* architecture bits (a key applies to a mask of them) */
enum { ARCH_QWEN3MOE = 1, ARCH_LAGUNA = 2, ARCH_LLAMA = 4, ARCH_OLMOE = 8, ARCH_QWEN2MOE = 16, ARCH_GLM4MOE = 32,
       ARCH_GPTOSS = 64, ARCH_DEEPSEEK2 = 128, ARCH_ALL = 255, ARCH_BOTH = ARCH_ALL };

typedef struct gen_cfg {
    int arch;
    const char *preset;
    char name[128];
    uint64_t seed;
    int type, type_experts;
    int64_t n_layer, n_embd, n_head, n_head_swa, n_head_kv, head_dim, n_vocab, n_ctx, n_ff;
    int64_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    int64_t swa_window, swa_pattern, rope_dim, rope_dim_swa, yarn_orig_ctx, n_dense_lead;
    int64_t rope_scaling; /* 1 yarn, 0 none */
    int64_t gate_per_element, expert_weights_norm;
    int64_t n_expert_shared, n_nextn;   /* glm4moe: shared experts, trailing MTP blocks (in n_layer) */
    int64_t q_lora, kv_lora, qk_nope, v_head, n_group, n_group_used;   /* deepseek2 (MLA; rope_dim = qk_rope) */
    double yarn_log_mul;                                              /* deepseek2 */
    double rope_base, rope_base_swa, yarn_factor, yarn_beta_fast, yarn_beta_slow, yarn_attn_factor;
    double expert_weights_scale, rms_eps;
    int64_t chat_template;              /* 0 plain ChatML, 1 qwen3-tools (Qwen3's tool rendering), 2.. gen_templates.c */
    double embd_scale;    /* token_embd's std (1 unless set: a larger one makes the final hidden state carry its token's embedding) */
    double head_peak;     /* output.weight row v += head_peak x the std of the head x token_embd row v (0: off) */
    double key_outliers;  /* attn_k.weight: rows of the outlier channels of every KV head x this (0: off) */
} gen_cfg;

/* ---- hyperparameter keys --------------------------------------------------- */

enum { K_INT, K_FLOAT, K_TYPE, K_STR, K_ENUM, K_SEED };

typedef struct key_def {
    const char *name;
    int arch;                 /* ARCH_* mask */
    int kind;
    size_t off;               /* offsetof in gen_cfg */
    double lo, hi;
    const char *choices;      /* K_ENUM: "a|b", value = index */
    const char *help;
} key_def;

#define O(f) offsetof(gen_cfg, f)
static const key_def KEYS[] = {
    {"seed", ARCH_BOTH, K_SEED, O(seed), 0, 0, NULL, "PRNG seed (also --seed)"},
    {"type", ARCH_BOTH, K_TYPE, O(type), 0, 0, NULL, "weight type of the matrices (also --type)"},
    {"type_experts", ARCH_BOTH, K_TYPE, O(type_experts), 0, 0, NULL, "type of routed/shared expert matrices (also --type-experts)"},
    {"name", ARCH_BOTH, K_STR, O(name), 0, 0, NULL, "general.name"},
    {"n_layer", ARCH_BOTH, K_INT, O(n_layer), 1, 512, NULL, "block_count"},
    {"n_embd", ARCH_BOTH, K_INT, O(n_embd), 32, 65536, NULL, "embedding_length (multiple of 32)"},
    {"n_head", ARCH_BOTH, K_INT, O(n_head), 1, 1024, NULL, "query heads (laguna: sets n_head_full and n_head_swa)"},
    {"n_head_full", ARCH_LAGUNA, K_INT, O(n_head), 1, 1024, NULL, "query heads of full-attention layers"},
    {"n_head_swa", ARCH_LAGUNA, K_INT, O(n_head_swa), 1, 1024, NULL, "query heads of sliding-window layers"},
    {"n_head_kv", ARCH_BOTH, K_INT, O(n_head_kv), 1, 1024, NULL, "KV heads (divides every n_head)"},
    {"head_dim", ARCH_BOTH, K_INT, O(head_dim), 2, 1024, NULL, "key_length = value_length"},
    {"n_vocab", ARCH_BOTH, K_INT, O(n_vocab), 260, 1 << 20, NULL, "vocabulary size (BPE trained to fill it)"},
    {"n_ctx", ARCH_BOTH, K_INT, O(n_ctx), 16, 1 << 24, NULL, "context_length"},
    {"n_ff", ARCH_BOTH, K_INT, O(n_ff), 32, 1 << 20, NULL, "feed_forward_length (laguna, glm4moe: dense FFN of leading layers; llama, olmoe: use n_ff_exp)"},
    {"n_expert", ARCH_BOTH, K_INT, O(n_expert), 1, 4096, NULL, "expert_count"},
    {"n_expert_used", ARCH_BOTH, K_INT, O(n_expert_used), 1, 4096, NULL, "expert_used_count (top-k)"},
    {"n_ff_exp", ARCH_BOTH, K_INT, O(n_ff_exp), 32, 1 << 20, NULL, "expert_feed_forward_length"},
    {"n_ff_shexp", ARCH_LAGUNA | ARCH_QWEN2MOE, K_INT, O(n_ff_shexp), 32, 1 << 20, NULL, "expert_shared_feed_forward_length"},
    {"n_dense_lead", ARCH_LAGUNA | ARCH_GLM4MOE | ARCH_DEEPSEEK2, K_INT, O(n_dense_lead), 0, 512, NULL, "leading_dense_block_count"},
    {"n_expert_shared", ARCH_GLM4MOE | ARCH_DEEPSEEK2, K_INT, O(n_expert_shared), 1, 64, NULL, "expert_shared_count (shared width = count x n_ff_exp)"},
    {"n_nextn", ARCH_GLM4MOE, K_INT, O(n_nextn), 0, 16, NULL, "nextn_predict_layers: MTP blocks, the last of n_layer"},
    {"rope_base", ARCH_BOTH, K_FLOAT, O(rope_base), 1, 1e12, NULL, "rope.freq_base (laguna: full layers)"},
    {"rope_base_swa", ARCH_LAGUNA, K_FLOAT, O(rope_base_swa), 1, 1e12, NULL, "rope.freq_base_swa"},
    {"q_lora", ARCH_DEEPSEEK2, K_INT, O(q_lora), 32, 1 << 16, NULL, "attention.q_lora_rank (multiple of 32)"},
    {"kv_lora", ARCH_DEEPSEEK2, K_INT, O(kv_lora), 32, 1 << 16, NULL, "attention.kv_lora_rank (multiple of 32)"},
    {"qk_nope", ARCH_DEEPSEEK2, K_INT, O(qk_nope), 32, 4096, NULL, "qk_nope_head_dim (multiple of 32; rope_dim is qk_rope)"},
    {"v_head", ARCH_DEEPSEEK2, K_INT, O(v_head), 32, 4096, NULL, "v_head_dim (multiple of 32)"},
    {"n_group", ARCH_DEEPSEEK2, K_INT, O(n_group), 1, 4096, NULL, "expert_group_count (divides n_expert)"},
    {"n_group_used", ARCH_DEEPSEEK2, K_INT, O(n_group_used), 1, 4096, NULL, "expert_group_used_count"},
    {"rope_dim", ARCH_LAGUNA | ARCH_GLM4MOE | ARCH_DEEPSEEK2, K_INT, O(rope_dim), 2, 1024, NULL, "rope.dimension_count (laguna: full layers; even, <= head_dim)"},
    {"rope_dim_swa", ARCH_LAGUNA, K_INT, O(rope_dim_swa), 2, 1024, NULL, "rope.dimension_count_swa (even, <= head_dim)"},
    {"rope_scaling", ARCH_LAGUNA, K_ENUM, O(rope_scaling), 0, 0, "none|yarn", "rope.scaling.type of full layers (none omits the yarn keys)"},
    {"yarn_factor", ARCH_LAGUNA | ARCH_GPTOSS | ARCH_DEEPSEEK2, K_FLOAT, O(yarn_factor), 1, 1e6, NULL, "rope.scaling.factor"},
    {"yarn_orig_ctx", ARCH_LAGUNA | ARCH_GPTOSS | ARCH_DEEPSEEK2, K_INT, O(yarn_orig_ctx), 1, 1 << 24, NULL, "rope.scaling.original_context_length"},
    {"yarn_beta_fast", ARCH_LAGUNA, K_FLOAT, O(yarn_beta_fast), -1, 1e6, NULL, "rope.scaling.yarn_beta_fast (llama.cpp uses 32; < 0: key omitted)"},
    {"yarn_attn_factor", ARCH_LAGUNA, K_FLOAT, O(yarn_attn_factor), -1e6, 1e6, NULL, "rope.scaling.attn_factor (0: key omitted)"},
    {"yarn_beta_slow", ARCH_LAGUNA, K_FLOAT, O(yarn_beta_slow), 0, 1e6, NULL, "rope.scaling.yarn_beta_slow (llama.cpp uses 1)"},
    {"swa_window", ARCH_LAGUNA | ARCH_GPTOSS, K_INT, O(swa_window), 0, 1 << 24, NULL, "attention.sliding_window (0: all layers full)"},
    {"swa_pattern", ARCH_LAGUNA, K_INT, O(swa_pattern), 1, 512, NULL, "full attention at layers il % swa_pattern == 0 (key written when != 4)"},
    {"expert_weights_scale", ARCH_LAGUNA | ARCH_GLM4MOE | ARCH_DEEPSEEK2, K_FLOAT, O(expert_weights_scale), 0, 1e6, NULL, "expert_weights_scale"},
    {"expert_weights_norm", ARCH_LAGUNA | ARCH_GLM4MOE | ARCH_DEEPSEEK2, K_INT, O(expert_weights_norm), 0, 1, NULL, "expert_weights_norm (0/1)"},
    {"gate", ARCH_LAGUNA, K_ENUM, O(gate_per_element), 0, 0, "head|element", "attn_gate: one scalar per head or per element"},
    {"rms_eps", ARCH_BOTH, K_FLOAT, O(rms_eps), 1e-12, 0.1, NULL, "attention.layer_norm_rms_epsilon"},
    {"chat_template", ARCH_BOTH, K_ENUM, O(chat_template), 0, 0, "chatml|qwen3-tools|llama3-tools|mistral-tools|deepseek3-tools|glm4-tools|kimi-k2-tools", "tokenizer.chat_template: plain ChatML, or a family's with tools (and its special tokens)"},
    {"embd_scale", ARCH_BOTH, K_FLOAT, O(embd_scale), 0, 1000, NULL, "standard deviation of token_embd (0: 1, the default); with head_peak, a larger one makes the final hidden state carry its token's embedding, so the logits peak"},
    {"key_outliers", ARCH_BOTH, K_FLOAT, O(key_outliers), 0, 1000, NULL, "keys with outlier channels as trained models have: in every KV head, attn_k's rows of 4 channels (3, 17, head_dim/2+5, head_dim-7) scaled by this factor (0: off; docs/KV_TQ.md)"},
    {"head_peak", ARCH_BOTH, K_FLOAT, O(head_peak), 0, 1000, NULL, "peaked logits like a trained model's: output row v += head_peak x (the head's std) x token_embd row v, so the final hidden state (which carries its token's embedding) favours a few rows by a margin (0: off; docs/SCREEN.md)"},
};
#undef O
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])

static void preset_qwen3moe(gen_cfg *c, int which) {
    c->arch = ARCH_QWEN3MOE;
    c->rms_eps = 1e-6;
    c->rope_base = 1e6;
    c->rope_scaling = 0;
    if (which == 0) {        /* tiny: the shared oracle's qwen3moe-tiny */
        c->n_layer = 4; c->n_embd = 256; c->n_head = 8; c->n_head_kv = 2; c->head_dim = 64;
        c->n_vocab = 1000; c->n_ctx = 4096; c->n_ff = 256;
        c->n_expert = 8; c->n_expert_used = 2; c->n_ff_exp = 128;
    } else if (which == 1) { /* default: small, fast */
        c->n_layer = 8; c->n_embd = 512; c->n_head = 8; c->n_head_kv = 2; c->head_dim = 64;
        c->n_vocab = 2048; c->n_ctx = 8192; c->n_ff = 1536;
        c->n_expert = 32; c->n_expert_used = 4; c->n_ff_exp = 64;
    } else {                 /* bench */
        c->n_layer = 16; c->n_embd = 1024; c->n_head = 16; c->n_head_kv = 4; c->head_dim = 128;
        c->n_vocab = 32000; c->n_ctx = 32768; c->n_ff = 3072;
        c->n_expert = 64; c->n_expert_used = 8; c->n_ff_exp = 512;
    }
    c->n_head_swa = c->n_head;
}

static void preset_laguna(gen_cfg *c, int which) {
    c->arch = ARCH_LAGUNA;
    c->rms_eps = 1e-6;
    c->rope_base = 500000; c->rope_base_swa = 10000;
    c->rope_scaling = 1; c->yarn_factor = 32; c->yarn_beta_fast = 32; c->yarn_beta_slow = 1;
    c->swa_pattern = 4; c->n_dense_lead = 1;
    c->expert_weights_scale = 2.5; c->expert_weights_norm = 1; c->gate_per_element = 0;
    /* rotary dims: half the head on full layers, all of it on SWA layers
     * (resolved from head_dim after the overrides unless set) */
    c->rope_dim = -1; c->rope_dim_swa = -1;
    if (which == 0) {        /* tiny: the shared oracle's laguna-tiny */
        c->n_layer = 4; c->n_embd = 256; c->n_head = 4; c->n_head_swa = 6; c->n_head_kv = 2;
        c->head_dim = 64; c->n_vocab = 1000; c->n_ctx = 16384; c->n_ff = 512;
        c->n_expert = 16; c->n_expert_used = 4; c->n_ff_exp = 64; c->n_ff_shexp = 64;
        c->swa_window = 12; c->yarn_orig_ctx = 512;
    } else if (which == 1) { /* default: small, fast (`make run`) */
        c->n_layer = 8; c->n_embd = 512; c->n_head = 8; c->n_head_swa = 12; c->n_head_kv = 2;
        c->head_dim = 64; c->n_vocab = 2048; c->n_ctx = 16384; c->n_ff = 1536;
        c->n_expert = 32; c->n_expert_used = 4; c->n_ff_exp = 64; c->n_ff_shexp = 64;
        c->swa_window = 128; c->yarn_orig_ctx = 4096;
    } else {                 /* bench: the shape of a Laguna XS, shrunk to ~1.8 GB */
        c->n_layer = 16; c->n_embd = 1024; c->n_head = 16; c->n_head_swa = 24; c->n_head_kv = 4;
        c->head_dim = 128; c->n_vocab = 32000; c->n_ctx = 32768; c->n_ff = 4096;
        c->n_expert = 128; c->n_expert_used = 8; c->n_ff_exp = 256; c->n_ff_shexp = 256;
        c->swa_window = 512; c->yarn_orig_ctx = 4096;
    }
}

/* The shapes every later preset shares: tiny as the shared oracle's files
 * (README "Shapes"); default small; bench like qwen3moe's bench (16 layers,
 * n_embd 1024, 64 experts top-8 of 512, vocab 32000: about 1.8 GB in Q8_0,
 * so bytes per token compare across architectures). */
static void later_common(gen_cfg *c, int which) {
    c->n_vocab = 1000; c->n_layer = 4; c->n_embd = 256; c->n_expert = 8; c->n_expert_used = 2; c->n_ff_exp = 32;
    if (which == 1) {
        c->n_layer = 8; c->n_embd = 512; c->n_vocab = 2048; c->n_expert = 32; c->n_expert_used = 4; c->n_ff_exp = 64;
    } else if (which == 2) {
        c->n_layer = 16; c->n_embd = 1024; c->n_vocab = 32000; c->n_expert = 64; c->n_expert_used = 8; c->n_ff_exp = 512;
    }
}

static void preset_llama(gen_cfg *c, int which) {   /* Mixtral: expert width = feed_forward_length */
    later_common(c, which);
    c->rms_eps = 1e-5; c->rope_base = 1e6; c->n_ctx = 32768;
    c->n_head = 8; c->n_head_kv = 2; c->head_dim = c->n_embd / 8;
}

static void preset_olmoe(gen_cfg *c, int which) {   /* q/k norm over the whole row: n_head_kv = n_head */
    later_common(c, which);
    c->rms_eps = 1e-5; c->rope_base = 10000; c->n_ctx = 4096;
    c->n_head = which == 0 ? 4 : 8; c->n_head_kv = c->n_head; c->head_dim = c->n_embd / c->n_head;
}

static void preset_qwen2moe(gen_cfg *c, int which) {
    later_common(c, which);
    c->rms_eps = 1e-6; c->rope_base = 1e6; c->n_ctx = 8192;
    c->n_head = which == 0 ? 4 : 8; c->n_head_kv = c->n_head; c->head_dim = c->n_embd / c->n_head;
    c->n_ff = c->n_ff_exp; c->n_ff_shexp = 4 * c->n_ff_exp;   /* tiny: 32 / 64 as the oracle file */
    if (which == 0) c->n_ff_shexp = 64;
}

static void preset_glm4moe(gen_cfg *c, int which) {
    later_common(c, which);
    c->n_layer += 1;                 /* + the MTP block */
    c->rms_eps = 1e-5; c->rope_base = 1e6; c->n_ctx = 131072;
    c->n_head = which == 0 ? 6 : 16; c->n_head_kv = which == 0 ? 2 : 4; c->head_dim = which == 2 ? 128 : 64;
    c->rope_dim = -1;                /* half the head */
    c->n_ff = which == 0 ? 256 : 4 * c->n_embd;
    c->n_dense_lead = 1; c->n_expert_shared = 1; c->n_nextn = 1;
    c->expert_weights_scale = 2.5; c->expert_weights_norm = 1;
}

static void preset_gptoss(gen_cfg *c, int which) {   /* sliding window on even layers; sinks; biases everywhere */
    later_common(c, which);
    c->rms_eps = 1e-5; c->rope_base = 150000; c->n_ctx = 131072;
    c->n_head = which == 2 ? 16 : 6; c->n_head_kv = which == 2 ? 4 : 2; c->head_dim = which == 2 ? 128 : 64;
    c->n_ff = c->n_ff_exp;           /* written, unused by llama.cpp */
    c->swa_window = which == 0 ? 12 : 128;
    c->rope_scaling = 1; c->yarn_factor = 32; c->yarn_orig_ctx = 4096; c->yarn_beta_fast = 32; c->yarn_beta_slow = 1;
}

static void preset_deepseek2(gen_cfg *c, int which) {   /* MLA attention, group-limited sigmoid routing */
    later_common(c, which);
    c->rms_eps = 1e-6; c->rope_base = 10000; c->n_ctx = 163840;
    c->n_head = which == 2 ? 16 : 4; c->n_head_kv = 1;
    c->q_lora = which == 2 ? 512 : 64; c->kv_lora = which == 2 ? 256 : 96;
    c->qk_nope = which == 2 ? 128 : 64; c->rope_dim = which == 2 ? 64 : 32; c->v_head = which == 2 ? 128 : 64;
    c->head_dim = c->qk_nope + c->rope_dim;
    c->n_ff = which == 0 ? 256 : 4 * c->n_embd;
    if (which == 0) { c->n_expert = 12; c->n_expert_used = 4; }
    c->n_group = which == 2 ? 8 : 3; c->n_group_used = which == 2 ? 4 : 2;
    c->n_dense_lead = 1; c->n_expert_shared = 1;
    c->expert_weights_scale = 2.5; c->expert_weights_norm = 1;
    c->rope_scaling = 1; c->yarn_factor = 40; c->yarn_orig_ctx = 4096; c->yarn_beta_fast = 32; c->yarn_beta_slow = 1;
    c->yarn_log_mul = 0.1;           /* the converter's 0.1 * mscale_all_dim (1) */
}

/* ---- the architectures ---------------------------------------------------- */

enum { QK_NONE, QK_HEAD_BEFORE_O, QK_HEAD_AFTER_O, QK_ROW_AFTER_O };   /* q/k norms and their place */
enum { SH_NONE, SH_PLAIN, SH_GATED };                                   /* shared expert */

struct arch_def;
struct plan;
typedef int (*keys_fn)(gguf_writer *w, const gen_cfg *c, const struct arch_def *d);
typedef int (*plan_fn)(struct plan *p, const gen_cfg *c, const struct arch_def *d, int64_t il);

/* What differs between the architectures' files (the tensor table of the
 * shared README): their options, in the order llama.cpp's converters write. */
typedef struct arch_def {
    const char *name, *pre;  /* general.architecture, tokenizer.ggml.pre */
    int id;                  /* ARCH_* bit */
    void (*preset)(gen_cfg *c, int which);
    bool vocab_size_key;     /* A.vocab_size is written */
    bool biases;             /* attn_{q,k,v}.bias */
    int qk_norm;             /* QK_* */
    bool post_attn_norm;     /* the FFN input norm is post_attention_norm (else ffn_norm) */
    bool sel_bias;           /* exp_probs_b.bias */
    int shared;              /* SH_* */
    bool ff_is_expert;       /* feed_forward_length is the experts' width (llama, olmoe) */
    bool expert_ff_key;      /* A.expert_feed_forward_length */
    keys_fn keys_rope;       /* after A.rope.freq_base, or NULL */
    keys_fn keys_moe;        /* after A.expert_feed_forward_length, or NULL */
    keys_fn keys_heads;      /* instead of A.attention.key_length / value_length (deepseek2), or NULL */
    bool out_bias, sinks;    /* attn_output.bias, attn_sinks (gpt-oss) */
    bool router_bias, exp_biases;   /* ffn_gate_inp.bias, ffn_{gate,up,down}_exps.bias (gpt-oss) */
    plan_fn plan_attn;       /* a block's attention tensors when not the generic ones (deepseek2's MLA), or NULL */
} arch_def;

static const char *akey(char *buf, size_t len, const arch_def *d, const char *s) {
    snprintf(buf, len, "%s.%s", d->name, s);
    return buf;
}
#define KEY(s) akey(k, sizeof k, d, s)

static int keys_rope_laguna(gguf_writer *w, const gen_cfg *c, const arch_def *d) {
    char k[128];
    int r = 0;
    r |= gguf_w_u32(w, KEY("attention.sliding_window"), (uint32_t)c->swa_window);
    r |= gguf_w_f32(w, KEY("rope.freq_base_swa"), (float)c->rope_base_swa);
    r |= gguf_w_u32(w, KEY("rope.dimension_count_swa"), (uint32_t)c->rope_dim_swa);
    r |= gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)c->rope_dim);
    if (c->rope_scaling) {
        r |= gguf_w_str(w, KEY("rope.scaling.type"), "yarn");
        r |= gguf_w_f32(w, KEY("rope.scaling.factor"), (float)c->yarn_factor);
        r |= gguf_w_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)c->yarn_orig_ctx);
        if (c->yarn_beta_fast >= 0) r |= gguf_w_f32(w, KEY("rope.scaling.yarn_beta_fast"), (float)c->yarn_beta_fast);
        r |= gguf_w_f32(w, KEY("rope.scaling.yarn_beta_slow"), (float)c->yarn_beta_slow);
        if (c->yarn_attn_factor != 0) r |= gguf_w_f32(w, KEY("rope.scaling.attn_factor"), (float)c->yarn_attn_factor);
    }
    return r;
}

/* llama: the whole head (moefast refuses anything else); glm4moe: rope_dim */
static int keys_rope_dims(gguf_writer *w, const gen_cfg *c, const arch_def *d) {
    char k[128];
    return gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)(d->id == ARCH_LLAMA ? c->head_dim : c->rope_dim));
}

static int keys_moe_laguna(gguf_writer *w, const gen_cfg *c, const arch_def *d) {
    char k[128];
    int r = 0;
    r |= gguf_w_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)c->n_ff_shexp);
    r |= gguf_w_bool(w, KEY("expert_weights_norm"), c->expert_weights_norm != 0);
    r |= gguf_w_f32(w, KEY("expert_weights_scale"), (float)c->expert_weights_scale);
    r |= gguf_w_u32(w, KEY("expert_gating_func"), 2); /* sigmoid */
    r |= gguf_w_u32(w, KEY("leading_dense_block_count"), (uint32_t)c->n_dense_lead);
    /* llama.cpp's default is 4; the oracle files omit the key */
    if (c->swa_pattern != 4)
        r |= gguf_w_u32(w, KEY("attention.sliding_window_pattern"), (uint32_t)c->swa_pattern);
    return r;
}

static int keys_moe_qwen2moe(gguf_writer *w, const gen_cfg *c, const arch_def *d) {
    char k[128];
    return gguf_w_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)c->n_ff_shexp);
}

static int keys_moe_glm4moe(gguf_writer *w, const gen_cfg *c, const arch_def *d) {
    char k[128];
    int r = 0;
    r |= gguf_w_u32(w, KEY("expert_shared_count"), (uint32_t)c->n_expert_shared);
    r |= gguf_w_u32(w, KEY("leading_dense_block_count"), (uint32_t)c->n_dense_lead);
    r |= gguf_w_u32(w, KEY("expert_gating_func"), 2); /* sigmoid */
    r |= gguf_w_f32(w, KEY("expert_weights_scale"), (float)c->expert_weights_scale);
    r |= gguf_w_bool(w, KEY("expert_weights_norm"), c->expert_weights_norm != 0);
    r |= gguf_w_u32(w, KEY("nextn_predict_layers"), (uint32_t)c->n_nextn);
    return r;
}

static int keys_rope_gptoss(gguf_writer *w, const gen_cfg *c, const arch_def *d) {
    char k[128];
    int r = 0;
    r |= gguf_w_u32(w, KEY("attention.sliding_window"), (uint32_t)c->swa_window);
    r |= gguf_w_str(w, KEY("rope.scaling.type"), "yarn");
    r |= gguf_w_f32(w, KEY("rope.scaling.factor"), (float)c->yarn_factor);
    r |= gguf_w_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)c->yarn_orig_ctx);
    r |= gguf_w_f32(w, KEY("rope.scaling.yarn_beta_fast"), (float)c->yarn_beta_fast);
    r |= gguf_w_f32(w, KEY("rope.scaling.yarn_beta_slow"), (float)c->yarn_beta_slow);
    return r;
}

/* deepseek2 MLA: the cache's shapes (key = kv_lora + rope, value = kv_lora)
 * and the per-head ones (_mla), after the LoRA ranks */
static int keys_heads_deepseek2(gguf_writer *w, const gen_cfg *c, const arch_def *d) {
    char k[128];
    int r = 0;
    r |= gguf_w_u32(w, KEY("leading_dense_block_count"), (uint32_t)c->n_dense_lead);
    r |= gguf_w_u32(w, KEY("attention.q_lora_rank"), (uint32_t)c->q_lora);
    r |= gguf_w_u32(w, KEY("attention.kv_lora_rank"), (uint32_t)c->kv_lora);
    r |= gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)(c->kv_lora + c->rope_dim));
    r |= gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)c->kv_lora);
    r |= gguf_w_u32(w, KEY("attention.key_length_mla"), (uint32_t)(c->qk_nope + c->rope_dim));
    r |= gguf_w_u32(w, KEY("attention.value_length_mla"), (uint32_t)c->v_head);
    return r;
}

static int keys_rope_deepseek2(gguf_writer *w, const gen_cfg *c, const arch_def *d) {
    char k[128];
    int r = keys_rope_dims(w, c, d);
    r |= gguf_w_str(w, KEY("rope.scaling.type"), "yarn");
    r |= gguf_w_f32(w, KEY("rope.scaling.factor"), (float)c->yarn_factor);
    r |= gguf_w_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)c->yarn_orig_ctx);
    r |= gguf_w_f32(w, KEY("rope.scaling.yarn_beta_fast"), (float)c->yarn_beta_fast);
    r |= gguf_w_f32(w, KEY("rope.scaling.yarn_beta_slow"), (float)c->yarn_beta_slow);
    r |= gguf_w_f32(w, KEY("rope.scaling.yarn_log_multiplier"), (float)c->yarn_log_mul);
    return r;
}

static int keys_moe_deepseek2(gguf_writer *w, const gen_cfg *c, const arch_def *d) {
    char k[128];
    int r = 0;
    r |= gguf_w_u32(w, KEY("expert_shared_count"), (uint32_t)c->n_expert_shared);
    r |= gguf_w_f32(w, KEY("expert_weights_scale"), (float)c->expert_weights_scale);
    r |= gguf_w_bool(w, KEY("expert_weights_norm"), c->expert_weights_norm != 0);
    r |= gguf_w_u32(w, KEY("expert_gating_func"), 2); /* sigmoid */
    r |= gguf_w_u32(w, KEY("expert_group_count"), (uint32_t)c->n_group);
    r |= gguf_w_u32(w, KEY("expert_group_used_count"), (uint32_t)c->n_group_used);
    return r;
}

static int plan_attn_mla(struct plan *p, const gen_cfg *c, const arch_def *d, int64_t il);

static const arch_def ARCHS[] = {
    {.name = "laguna", .pre = "laguna", .id = ARCH_LAGUNA, .preset = preset_laguna, .vocab_size_key = true,
     .qk_norm = QK_HEAD_BEFORE_O, .sel_bias = true, .shared = SH_PLAIN, .expert_ff_key = true,
     .keys_rope = keys_rope_laguna, .keys_moe = keys_moe_laguna},
    {.name = "qwen3moe", .pre = "qwen2", .id = ARCH_QWEN3MOE, .preset = preset_qwen3moe, .qk_norm = QK_HEAD_BEFORE_O,
     .expert_ff_key = true},
    {.name = "llama", .pre = "llama-bpe", .id = ARCH_LLAMA, .preset = preset_llama, .vocab_size_key = true,
     .ff_is_expert = true, .keys_rope = keys_rope_dims},
    {.name = "olmoe", .pre = "olmo", .id = ARCH_OLMOE, .preset = preset_olmoe, .qk_norm = QK_ROW_AFTER_O,
     .ff_is_expert = true},
    {.name = "qwen2moe", .pre = "qwen2", .id = ARCH_QWEN2MOE, .preset = preset_qwen2moe, .biases = true,
     .shared = SH_GATED, .expert_ff_key = true, .keys_moe = keys_moe_qwen2moe},
    {.name = "glm4moe", .pre = "glm4", .id = ARCH_GLM4MOE, .preset = preset_glm4moe, .vocab_size_key = true,
     .biases = true, .qk_norm = QK_HEAD_AFTER_O, .post_attn_norm = true, .sel_bias = true, .shared = SH_PLAIN,
     .expert_ff_key = true, .keys_rope = keys_rope_dims, .keys_moe = keys_moe_glm4moe},
    {.name = "gpt-oss", .pre = "gpt-4o", .id = ARCH_GPTOSS, .preset = preset_gptoss, .biases = true,
     .post_attn_norm = true, .ff_is_expert = true, .expert_ff_key = true, .keys_rope = keys_rope_gptoss,
     .out_bias = true, .sinks = true, .router_bias = true, .exp_biases = true},
    {.name = "deepseek2", .pre = "deepseek-v3", .id = ARCH_DEEPSEEK2, .preset = preset_deepseek2,
     .vocab_size_key = true, .sel_bias = true, .shared = SH_PLAIN, .expert_ff_key = true,
     .keys_rope = keys_rope_deepseek2, .keys_moe = keys_moe_deepseek2, .keys_heads = keys_heads_deepseek2,
     .plan_attn = plan_attn_mla},
};
#define N_ARCHS (sizeof ARCHS / sizeof ARCHS[0])

static const arch_def *arch_of(const gen_cfg *c) {
    for (size_t i = 0; i < N_ARCHS; i++)
        if (ARCHS[i].id == c->arch) return &ARCHS[i];
    return &ARCHS[0];
}

static int set_key(gen_cfg *c, const char *kv, char *err, size_t errlen) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return moe_errf(err, errlen, MOE_EINVAL, "bad override '%s' (expected key=value)", kv);
    size_t kl = (size_t)(eq - kv);
    const char *val = eq + 1;
    const key_def *k = NULL;
    for (size_t i = 0; i < N_KEYS; i++)
        if (strlen(KEYS[i].name) == kl && !memcmp(KEYS[i].name, kv, kl)) { k = &KEYS[i]; break; }
    if (!k)
        return moe_errf(err, errlen, MOE_EINVAL, "unknown key '%.*s' (see moefast gen --help)",
                        (int)kl, kv);
    if (!(k->arch & c->arch))
        return moe_errf(err, errlen, MOE_EINVAL, "key '%s' does not apply to arch %s", k->name, arch_of(c)->name);
    char *p = (char *)c + k->off, *end;
    errno = 0;
    switch (k->kind) {
    case K_SEED: {
        if (*val == '-' || !*val) goto bad;
        unsigned long long v = strtoull(val, &end, 0);
        if (errno || *end) goto bad;
        memcpy(p, &(uint64_t){v}, sizeof(uint64_t));
        return MOE_OK;
    }
    case K_INT: {
        long long v = strtoll(val, &end, 10);
        if (errno || end == val || *end || v < k->lo || v > k->hi) goto bad;
        memcpy(p, &(int64_t){v}, sizeof(int64_t));
        if (!strcmp(k->name, "n_head")) c->n_head_swa = v; /* laguna shorthand: both */
        return MOE_OK;
    }
    case K_FLOAT: {
        double v = strtod(val, &end);
        if (errno || end == val || *end || !(v >= k->lo && v <= k->hi)) goto bad;
        memcpy(p, &v, sizeof v);
        return MOE_OK;
    }
    case K_TYPE: {
        int t = moe_type_by_name(val);
        const moe_type_info *ti = t >= 0 ? moe_type_get((uint32_t)t) : NULL;
        if (!ti || !ti->name)
            return moe_errf(err, errlen, MOE_EINVAL, "unknown type '%s' for key '%s'", val, k->name);
        if (!ti->supported)
            return moe_errf(err, errlen, MOE_EUNSUPPORTED, "type %s (key '%s') is not supported",
                            ti->name, k->name);
        memcpy(p, &t, sizeof t);
        return MOE_OK;
    }
    case K_STR:
        if (strlen(val) >= sizeof c->name || !*val) goto bad;
        strcpy(p, val);
        return MOE_OK;
    case K_ENUM: {
        const char *s = k->choices;
        for (int64_t idx = 0; *s; idx++) {
            const char *bar = strchr(s, '|');
            size_t n = bar ? (size_t)(bar - s) : strlen(s);
            if (strlen(val) == n && !memcmp(val, s, n)) {
                memcpy(p, &idx, sizeof idx);
                return MOE_OK;
            }
            s += n + (bar ? 1 : 0);
        }
        return moe_errf(err, errlen, MOE_EINVAL, "bad value '%s' for key '%s' (expected %s)", val,
                        k->name, k->choices);
    }
    }
bad:
    if (k->kind == K_INT)
        return moe_errf(err, errlen, MOE_EINVAL, "bad value '%s' for key '%s' (expected an integer in %.0f..%.0f)",
                        val, k->name, k->lo, k->hi);
    if (k->kind == K_FLOAT)
        return moe_errf(err, errlen, MOE_EINVAL, "bad value '%s' for key '%s' (expected a number in %g..%g)",
                        val, k->name, k->lo, k->hi);
    return moe_errf(err, errlen, MOE_EINVAL, "bad value '%s' for key '%s'", val, k->name);
}

static bool layer_is_swa(const gen_cfg *c, int64_t il) {
    return c->arch == ARCH_LAGUNA && c->swa_window > 0 && il % c->swa_pattern != 0;
}
static int64_t layer_heads(const gen_cfg *c, int64_t il) {
    return layer_is_swa(c, il) ? c->n_head_swa : c->n_head;
}
static bool layer_is_dense(const gen_cfg *c, int64_t il) {
    return (c->arch & (ARCH_LAGUNA | ARCH_GLM4MOE | ARCH_DEEPSEEK2)) && il < c->n_dense_lead;
}
/* the shared expert's width */
static int64_t shexp_width(const gen_cfg *c) {
    return (c->arch & (ARCH_GLM4MOE | ARCH_DEEPSEEK2)) ? c->n_ff_exp * c->n_expert_shared : c->n_ff_shexp;
}

static int validate(const gen_cfg *c, char *err, size_t errlen) {
#define BAD(...) return moe_errf(err, errlen, MOE_EINVAL, __VA_ARGS__)
    if (c->n_head % c->n_head_kv || c->n_head_swa % c->n_head_kv)
        BAD("n_head_kv=%lld must divide the query head counts (%lld, %lld)", (long long)c->n_head_kv,
            (long long)c->n_head, (long long)c->n_head_swa);
    if (c->n_expert_used > c->n_expert)
        BAD("n_expert_used=%lld exceeds n_expert=%lld", (long long)c->n_expert_used, (long long)c->n_expert);
    if (c->head_dim % 2) BAD("head_dim=%lld must be even", (long long)c->head_dim);
    /* weights are drawn in 32-value blocks along rows */
    const struct { const char *k; int64_t v; } rows[] = {
        {"n_embd", c->n_embd}, {"n_ff", c->n_ff}, {"n_ff_exp", c->n_ff_exp},
        {"n_ff_shexp", arch_of(c)->shared != SH_NONE ? shexp_width(c) : 32}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].v % 32) BAD("%s=%lld must be a multiple of 32", rows[i].k, (long long)rows[i].v);
    if (c->arch == ARCH_LAGUNA) {
        if (c->rope_dim % 2 || c->rope_dim > c->head_dim)
            BAD("rope_dim=%lld must be even and <= head_dim=%lld", (long long)c->rope_dim, (long long)c->head_dim);
        if (c->rope_dim_swa % 2 || c->rope_dim_swa > c->head_dim)
            BAD("rope_dim_swa=%lld must be even and <= head_dim=%lld", (long long)c->rope_dim_swa,
                (long long)c->head_dim);
        if (c->n_dense_lead > c->n_layer)
            BAD("n_dense_lead=%lld exceeds n_layer=%lld", (long long)c->n_dense_lead, (long long)c->n_layer);
    }
    /* the architectures' own constraints (what their binds refuse) */
    if ((c->arch & (ARCH_OLMOE | ARCH_QWEN2MOE)) && c->n_head * c->head_dim != c->n_embd)
        BAD("n_head x head_dim = %lld must equal n_embd=%lld for %s", (long long)(c->n_head * c->head_dim),
            (long long)c->n_embd, arch_of(c)->name);
    if (c->arch == ARCH_OLMOE && c->n_head_kv != c->n_head)
        BAD("olmoe needs n_head_kv = n_head (its q/k norms span the whole row)");
    if (c->arch == ARCH_GLM4MOE) {
        if (c->rope_dim % 2 || c->rope_dim > c->head_dim)
            BAD("rope_dim=%lld must be even and <= head_dim=%lld", (long long)c->rope_dim, (long long)c->head_dim);
        if (c->n_nextn >= c->n_layer || c->n_dense_lead > c->n_layer - c->n_nextn)
            BAD("n_nextn=%lld and n_dense_lead=%lld must leave decoder blocks of n_layer=%lld", (long long)c->n_nextn,
                (long long)c->n_dense_lead, (long long)c->n_layer);
        if (c->n_expert_shared < 1) BAD("glm4moe needs n_expert_shared >= 1");
    }
    if (c->arch == ARCH_DEEPSEEK2) {
        if (c->q_lora % 32 || c->kv_lora % 32 || c->qk_nope % 32 || c->v_head % 32)
            BAD("q_lora, kv_lora, qk_nope and v_head must be multiples of 32 (rows of the MLA matrices)");
        if (c->rope_dim % 2 || c->rope_dim < 2) BAD("rope_dim=%lld must be even", (long long)c->rope_dim);
        if (c->n_expert % c->n_group || c->n_group_used > c->n_group ||
            c->n_expert_used > c->n_group_used * (c->n_expert / c->n_group))
            BAD("n_group=%lld must divide n_expert=%lld and its n_group_used=%lld groups hold n_expert_used=%lld",
                (long long)c->n_group, (long long)c->n_expert, (long long)c->n_group_used, (long long)c->n_expert_used);
        if (c->n_dense_lead > c->n_layer)
            BAD("n_dense_lead=%lld exceeds n_layer=%lld", (long long)c->n_dense_lead, (long long)c->n_layer);
    }
    return MOE_OK;
#undef BAD
}

/* ---- the tensor plan ------------------------------------------------------ */

enum { W_MATRIX, W_NORM, W_BIAS };

typedef struct tplan {
    char name[64];
    uint32_t n_dims;
    int64_t ne[3];
    int type;
    int kind;
    float std;        /* W_MATRIX: target standard deviation */
} tplan;

typedef struct plan {
    tplan *t;
    size_t n, cap;
} plan;

static int plan_add(plan *p, int kind, int type, float std, uint32_t n_dims, int64_t ne0, int64_t ne1,
                    int64_t ne2, const char *fmt, int64_t il) {
    if (p->n == p->cap) {
        size_t nc = p->cap ? 2 * p->cap : 64;
        tplan *nt = realloc(p->t, nc * sizeof *nt);
        if (!nt) return -1;
        p->t = nt;
        p->cap = nc;
    }
    tplan *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, fmt, (long long)il);
    t->n_dims = n_dims;
    t->ne[0] = ne0; t->ne[1] = ne1; t->ne[2] = ne2;
    t->type = kind == W_MATRIX ? type : MOE_T_F32;
    t->kind = kind;
    t->std = std;
    return 0;
}

/* Scales: every projection keeps the RMS of a unit input (std 1/sqrt(fan_in));
 * the embedding has std 1; the lm head has gain 1.6 so logits have RMS ~1.6
 * (like the shared oracle models); norms are 1 +- 0.1. */
static float inv_sqrt(int64_t n) { return (float)(1.0 / sqrt((double)n)); }

/* q/k norms: per head [head_dim], or (olmoe) over the whole projection */
static int plan_qk_norm(plan *p, const gen_cfg *c, int qk, int64_t q, int64_t il) {
    const int64_t hd = c->head_dim, kv = c->n_head_kv * hd;
    int r = plan_add(p, W_NORM, 0, 0, 1, qk == QK_ROW_AFTER_O ? q : hd, 1, 1, "blk.%lld.attn_q_norm.weight", il);
    return r | plan_add(p, W_NORM, 0, 0, 1, qk == QK_ROW_AFTER_O ? kv : hd, 1, 1, "blk.%lld.attn_k_norm.weight", il);
}

/* deepseek2's multi-head latent attention (q LoRA, the shared latent KV,
 * split k_b / v_b per head: the tensor table of the shared README). */
static int plan_attn_mla(struct plan *p, const gen_cfg *c, const arch_def *d, int64_t il) {
    const int T = c->type;
    const int64_t E = c->n_embd, H = c->n_head, R = c->q_lora, C = c->kv_lora, n = c->qk_nope, rr = c->rope_dim;
    int r = plan_add(p, W_NORM, 0, 0, 1, E, 1, 1, "blk.%lld.attn_norm.weight", il);
    r |= plan_add(p, W_NORM, 0, 0, 1, R, 1, 1, "blk.%lld.attn_q_a_norm.weight", il);
    r |= plan_add(p, W_MATRIX, T, inv_sqrt(E), 2, E, R, 1, "blk.%lld.attn_q_a.weight", il);
    r |= plan_add(p, W_MATRIX, T, inv_sqrt(R), 2, R, H * (n + rr), 1, "blk.%lld.attn_q_b.weight", il);
    r |= plan_add(p, W_NORM, 0, 0, 1, C, 1, 1, "blk.%lld.attn_kv_a_norm.weight", il);
    r |= plan_add(p, W_MATRIX, T, inv_sqrt(E), 2, E, C + rr, 1, "blk.%lld.attn_kv_a_mqa.weight", il);
    r |= plan_add(p, W_MATRIX, T, inv_sqrt(n), 3, n, C, H, "blk.%lld.attn_k_b.weight", il);
    r |= plan_add(p, W_MATRIX, T, inv_sqrt(C), 3, C, c->v_head, H, "blk.%lld.attn_v_b.weight", il);
    return r | plan_add(p, W_MATRIX, T, inv_sqrt(H * c->v_head), 2, H * c->v_head, E, 1, "blk.%lld.attn_output.weight", il);
}

/* One block's attention tensors. */
static int plan_attention(plan *p, const gen_cfg *c, const arch_def *d, int64_t il) {
    if (d->plan_attn) return d->plan_attn(p, c, d, il);
    const int T = c->type;
    const int64_t E = c->n_embd, kv = c->n_head_kv * c->head_dim, q = layer_heads(c, il) * c->head_dim;
    const float se = inv_sqrt(E);
    int r = plan_add(p, W_NORM, 0, 0, 1, E, 1, 1, "blk.%lld.attn_norm.weight", il);
    r |= plan_add(p, W_MATRIX, T, se, 2, E, q, 1, "blk.%lld.attn_q.weight", il);
    if (d->biases) r |= plan_add(p, W_BIAS, 0, 0, 1, q, 1, 1, "blk.%lld.attn_q.bias", il);
    r |= plan_add(p, W_MATRIX, T, se, 2, E, kv, 1, "blk.%lld.attn_k.weight", il);
    if (d->biases) r |= plan_add(p, W_BIAS, 0, 0, 1, kv, 1, 1, "blk.%lld.attn_k.bias", il);
    r |= plan_add(p, W_MATRIX, T, se, 2, E, kv, 1, "blk.%lld.attn_v.weight", il);
    if (d->biases) r |= plan_add(p, W_BIAS, 0, 0, 1, kv, 1, 1, "blk.%lld.attn_v.bias", il);
    if (d->qk_norm == QK_HEAD_BEFORE_O) r |= plan_qk_norm(p, c, d->qk_norm, q, il);
    r |= plan_add(p, W_MATRIX, T, inv_sqrt(q), 2, q, E, 1, "blk.%lld.attn_output.weight", il);
    if (d->out_bias) r |= plan_add(p, W_BIAS, 0, 0, 1, E, 1, 1, "blk.%lld.attn_output.bias", il);
    if (d->sinks) r |= plan_add(p, W_BIAS, 0, 0, 1, layer_heads(c, il), 1, 1, "blk.%lld.attn_sinks.weight", il);
    if (d->qk_norm == QK_HEAD_AFTER_O || d->qk_norm == QK_ROW_AFTER_O) r |= plan_qk_norm(p, c, d->qk_norm, q, il);
    if (d->id == ARCH_LAGUNA)
        r |= plan_add(p, W_MATRIX, T, se, 2, E, c->gate_per_element ? q : layer_heads(c, il), 1,
                      "blk.%lld.attn_gate.weight", il);
    return r;
}

/* One block's FFN: dense SwiGLU, or router (+ selection bias), experts and
 * the shared expert (+ its gate); glm4moe's MTP blocks add their own. */
static int plan_ffn(plan *p, const gen_cfg *c, const arch_def *d, int64_t il) {
    const int T = c->type, TE = c->type_experts;
    const int64_t E = c->n_embd, X = c->n_expert, F = c->n_ff_exp;
    const float se = inv_sqrt(E);
    int r = plan_add(p, W_NORM, 0, 0, 1, E, 1, 1, d->post_attn_norm ? "blk.%lld.post_attention_norm.weight" : "blk.%lld.ffn_norm.weight", il);
    if (layer_is_dense(c, il)) {
        r |= plan_add(p, W_MATRIX, T, se, 2, E, c->n_ff, 1, "blk.%lld.ffn_gate.weight", il);
        r |= plan_add(p, W_MATRIX, T, se, 2, E, c->n_ff, 1, "blk.%lld.ffn_up.weight", il);
        return r | plan_add(p, W_MATRIX, T, inv_sqrt(c->n_ff), 2, c->n_ff, E, 1, "blk.%lld.ffn_down.weight", il);
    }
    /* router: F32 always (std 1/sqrt(E): sigmoid/softmax inputs of RMS ~1) */
    r |= plan_add(p, W_MATRIX, MOE_T_F32, se, 2, E, X, 1, "blk.%lld.ffn_gate_inp.weight", il);
    if (d->router_bias) r |= plan_add(p, W_BIAS, 0, 0, 1, X, 1, 1, "blk.%lld.ffn_gate_inp.bias", il);
    if (d->sel_bias) r |= plan_add(p, W_BIAS, 0, 0, 1, X, 1, 1, "blk.%lld.exp_probs_b.bias", il);
    r |= plan_add(p, W_MATRIX, TE, se, 3, E, F, X, "blk.%lld.ffn_gate_exps.weight", il);
    r |= plan_add(p, W_MATRIX, TE, se, 3, E, F, X, "blk.%lld.ffn_up_exps.weight", il);
    r |= plan_add(p, W_MATRIX, TE, inv_sqrt(F), 3, F, E, X, "blk.%lld.ffn_down_exps.weight", il);
    if (d->exp_biases) {   /* one bias row per expert */
        r |= plan_add(p, W_BIAS, 0, 0, 2, F, X, 1, "blk.%lld.ffn_gate_exps.bias", il);
        r |= plan_add(p, W_BIAS, 0, 0, 2, F, X, 1, "blk.%lld.ffn_up_exps.bias", il);
        r |= plan_add(p, W_BIAS, 0, 0, 2, E, X, 1, "blk.%lld.ffn_down_exps.bias", il);
    }
    /* qwen2moe's shared-expert gate: one F32 row, stored 1-D [E] */
    if (d->shared == SH_GATED) r |= plan_add(p, W_MATRIX, MOE_T_F32, se, 1, E, 1, 1, "blk.%lld.ffn_gate_inp_shexp.weight", il);
    if (d->shared != SH_NONE) {
        const int64_t S = shexp_width(c);
        r |= plan_add(p, W_MATRIX, TE, se, 2, E, S, 1, "blk.%lld.ffn_gate_shexp.weight", il);
        r |= plan_add(p, W_MATRIX, TE, se, 2, E, S, 1, "blk.%lld.ffn_up_shexp.weight", il);
        r |= plan_add(p, W_MATRIX, TE, inv_sqrt(S), 2, S, E, 1, "blk.%lld.ffn_down_shexp.weight", il);
    }
    if (d->id == ARCH_GLM4MOE && il >= c->n_layer - c->n_nextn) {
        r |= plan_add(p, W_MATRIX, T, inv_sqrt(2 * E), 2, 2 * E, E, 1, "blk.%lld.nextn.eh_proj.weight", il);
        r |= plan_add(p, W_NORM, 0, 0, 1, E, 1, 1, "blk.%lld.nextn.enorm.weight", il);
        r |= plan_add(p, W_NORM, 0, 0, 1, E, 1, 1, "blk.%lld.nextn.hnorm.weight", il);
        r |= plan_add(p, W_NORM, 0, 0, 1, E, 1, 1, "blk.%lld.nextn.shared_head_norm.weight", il);
    }
    return r;
}

static int build_plan(const gen_cfg *c, plan *p) {
    const arch_def *d = arch_of(c);
    const int64_t E = c->n_embd;
    const float es = c->embd_scale > 0 ? (float)c->embd_scale : 1.0f;
    int r = plan_add(p, W_MATRIX, c->type, es, 2, E, c->n_vocab, 1, "token_embd.weight", 0);
    for (int64_t il = 0; il < c->n_layer && !r; il++) r |= plan_attention(p, c, d, il) | plan_ffn(p, c, d, il);
    r |= plan_add(p, W_NORM, 0, 0, 1, E, 1, 1, "output_norm.weight", 0);
    r |= plan_add(p, W_MATRIX, c->type, 1.6f * inv_sqrt(E), 2, E, c->n_vocab, 1, "output.weight", 0);
    return r ? -1 : 0;
}

/* ---- weight drawing ---------------------------------------------------------- */

static uint64_t name_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) { h ^= (unsigned char)*s; h *= 0x100000001b3ull; }
    return h;
}

/* RMS of the int8 values draw_block makes: a triangular sum of two 7-bit
 * uniforms, (a & 127) + (b & 127) - 127 (variance 2*(128^2-1)/12 = 2730.5),
 * with one value per 32 forced to +-127: sqrt((31*2730.5 + 127^2)/32). */
#define Q_RMS 56.12f

/* One 32-value block: *d16 = f16 scale, q = int8 values. */
static inline void draw_block(moe_rng *r, float d_base, uint16_t *d16, int8_t q[32]) {
    uint64_t h = moe_rng_next(r);
    /* per-block scale jitter 0.75..1.24 so blocks differ like real weights */
    float d = d_base * (0.75f + (float)(h & 63) * (1.0f / 128.0f));
    *d16 = moe_f32_to_f16(d);
    for (int i = 0; i < 32; i += 4) {
        uint64_t v = moe_rng_next(r);
        for (int j = 0; j < 4; j++, v >>= 16)
            q[i + j] = (int8_t)((int)(v & 127) + (int)((v >> 8) & 127) - 127);
    }
    /* one value at +-127 makes amax = 127*d, so ggml's Q8_0 quantizer
     * recovers exactly this d and q from the FP32 values */
    q[(h >> 6) & 31] = (h >> 11) & 1 ? -127 : 127;
}

typedef struct draw_job {
    const tplan *t;
    uint64_t seed;      /* the tensor's stream: run seed mixed with its name */
    uint8_t *dst;
    float *scratch;     /* nth rows of ne[0] floats */
    uint64_t row_bytes;
    float peak;         /* output.weight with head_peak: the multiple of token_embd's row added, else 0 */
    uint64_t peak_seed; /* token_embd.weight's stream */
    float outlier;      /* attn_k.weight with key_outliers: the factor of the outlier channels' rows, else 0 */
    int64_t head_dim;
} draw_job;

/* key_outliers: is row ir of attn_k (channel ir % head_dim of its KV head)
 * one of the four outlier channels? */
static bool outlier_row(const draw_job *j, int64_t ir) {
    if (j->outlier <= 0 || j->head_dim <= 0) return false;
    const int64_t hd = j->head_dim, ch = ir % hd;
    const int64_t pick[4] = {3 % hd, 17 % hd, (hd / 2 + 5) % hd, (hd - 7 + hd) % hd};
    for (int i = 0; i < 4; i++)
        if (ch == pick[i]) return true;
    return false;
}

/* head_peak: row += peak x token_embd's row ir, drawn again from its own
 * stream (its std is 1: d_base 1/Q_RMS). A Q8_0 head is then quantized
 * like the other types. */
static void add_embd_row(const struct draw_job *j, int64_t ir, int64_t n, float *row) {
    moe_rng r;
    moe_rng_seed(&r, j->peak_seed + 0x9e3779b97f4a7c15ull * (uint64_t)(ir + 1));
    for (int64_t b = 0; b < (n + 31) / 32; b++) {
        uint16_t d16;
        int8_t q[32];
        draw_block(&r, 1.0f / Q_RMS, &d16, q);
        const float d = moe_f16_to_f32(d16);
        const int m = n - 32 * b < 32 ? (int)(n - 32 * b) : 32;
        for (int i = 0; i < m; i++) row[32 * b + i] += j->peak * (d * (float)q[i]);
    }
}

/* Rows [r0, r1) of a matrix. Every row has its own PRNG stream, so the file
 * does not depend on how rows are split across threads. */
static void draw_rows(const draw_job *j, int64_t r0, int64_t r1, float *row) {
    const tplan *t = j->t;
    const int64_t n = t->ne[0];
    const float d_base = t->std / Q_RMS;
    for (int64_t ir = r0; ir < r1; ir++) {
        moe_rng r;
        moe_rng_seed(&r, j->seed + 0x9e3779b97f4a7c15ull * (uint64_t)(ir + 1));
        uint8_t *out = j->dst + (uint64_t)ir * j->row_bytes;
        const bool scaled = outlier_row(j, ir);
        const bool via_float = j->peak > 0 || scaled;   /* the row changes before it is quantized */
        for (int64_t b = 0; b < (n + 31) / 32; b++) {
            uint16_t d16;
            int8_t q[32];
            draw_block(&r, d_base, &d16, q);
            if (t->type == MOE_T_Q8_0 && via_float) {     /* head_peak / key_outliers: the float row, quantized below */
                for (int i = 0; i < 32; i++) row[32 * b + i] = moe_f16_to_f32(d16) * (float)q[i];
                continue;
            }
            if (t->type == MOE_T_Q8_0) { /* exactly what the quantizer would give */
                memcpy(out + 34 * b, &d16, 2);
                memcpy(out + 34 * b + 2, q, 32);
                continue;
            }
            /* a float row's last block may be partial: its first n % 32 values */
            const float d = moe_f16_to_f32(d16);
            const int m = n - 32 * b < 32 ? (int)(n - 32 * b) : 32;
            for (int i = 0; i < m; i++) row[32 * b + i] = d * (float)q[i];
        }
        if (j->peak > 0) add_embd_row(j, ir, n, row);
        if (scaled)
            for (int64_t i = 0; i < n; i++) row[i] *= j->outlier;
        if (t->type != MOE_T_Q8_0 || via_float) moe_quantize_row((uint32_t)t->type, row, out, n);
    }
}

static void draw_task(void *ctx, int ith, int nth) {
    const draw_job *j = ctx;
    int64_t r0, r1;
    moe_split(j->t->ne[1] * j->t->ne[2], ith, nth, 1, &r0, &r1);
    draw_rows(j, r0, r1, j->scratch + (size_t)ith * (size_t)j->t->ne[0]);
}

static void draw_tensor(const gen_cfg *c, const tplan *t, uint8_t *dst, float *scratch, moe_pool *pool) {
    const uint64_t seed = c->seed ^ name_hash(t->name);
    if (t->kind != W_MATRIX) {
        moe_rng r;
        moe_rng_seed(&r, seed);
        float *o = (float *)(void *)dst;
        for (int64_t i = 0; i < t->ne[0] * t->ne[1] * t->ne[2]; i++) {   /* gpt-oss: 2-D expert biases */
            int v = (int)(moe_rng_next(&r) % 2001) - 1000; /* -1000..1000 */
            o[i] = t->kind == W_NORM ? 1.0f + (float)v * 1e-4f : (float)v * 5e-5f;
        }
        return;
    }
    draw_job j = {t, seed, dst, scratch, moe_row_bytes((uint32_t)t->type, (uint64_t)t->ne[0]), 0, 0, 0, 0};
    const size_t nl = strlen(t->name), kl = strlen(".attn_k.weight");
    if (c->key_outliers > 0 && nl > kl && !strcmp(t->name + nl - kl, ".attn_k.weight")) {
        j.outlier = (float)c->key_outliers;
        j.head_dim = c->head_dim;
    }
    if (c->head_peak > 0 && !strcmp(t->name, "output.weight")) {
        j.peak = (float)c->head_peak * t->std;
        j.peak_seed = c->seed ^ name_hash("token_embd.weight");
    }
    if (pool && t->ne[1] * t->ne[2] >= 64) moe_pool_run(pool, draw_task, &j);
    else draw_rows(&j, 0, t->ne[1] * t->ne[2], scratch);
}

/* ---- metadata --------------------------------------------------------------- */

/* llama_ftype for general.file_type, named by the type of most weights (the
 * expert type), as llama.cpp's converters do. */
int moe_gen_ftype(int type_experts);
int moe_gen_ftype(int te) {
    const moe_type_info *ti = moe_type_get((uint32_t)te); /* the ftype column of types.h */
    return ti && ti->ftype >= 0 ? ti->ftype : 0;
}

static bool is_float_type(int t) {
    const moe_type_info *ti = moe_type_get((uint32_t)t);
    return ti && ti->plain;
}

static const char CHAT_TEMPLATE[] =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/* Qwen3's chat template's tool parts (tools in the system prompt, calls in
 * <tool_call> tags, results as <tool_response> in a user turn), without its
 * <think> handling: what `moefast serve` writes for chatml models, so a
 * random-weight model can be served with tools (tests/cli_serve_tools.sh). */
static const char CHAT_TEMPLATE_QWEN3_TOOLS[] =
    "{%- if tools %}{{- '<|im_start|>system\\n' }}{%- if messages[0].role == 'system' %}"
    "{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}"
    "{%- for tool in tools %}{{- \"\\n\" }}{{- tool | tojson }}{%- endfor %}"
    "{{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}"
    "{%- elif messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') }}"
    "{%- for tool_call in message.tool_calls or [] %}{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{%- if (loop.first and message.content) or (not loop.first) %}{{- '\\n' }}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' }}{{- tool_call.name }}{{- '\", \"arguments\": ' }}"
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or (messages[loop.index0 - 1].role != 'tool') %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}"
    "{%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

static int write_metadata(gguf_writer *w, const gen_cfg *c, const moe_gen_vocab *v) {
    const arch_def *d = arch_of(c);
    char k[128];
    int r = 0;
    r |= gguf_w_str(w, "general.architecture", d->name);
    r |= gguf_w_str(w, "general.name", c->name);
    r |= gguf_w_u32(w, "general.file_type", (uint32_t)moe_gen_ftype(c->type_experts));
    if (!is_float_type(c->type) || !is_float_type(c->type_experts))
        r |= gguf_w_u32(w, "general.quantization_version", 2);
    r |= gguf_w_u32(w, "general.alignment", 32);
    r |= gguf_w_u32(w, KEY("block_count"), (uint32_t)c->n_layer);
    r |= gguf_w_u32(w, KEY("context_length"), (uint32_t)c->n_ctx);
    r |= gguf_w_u32(w, KEY("embedding_length"), (uint32_t)c->n_embd);
    if (d->vocab_size_key) r |= gguf_w_u32(w, KEY("vocab_size"), (uint32_t)c->n_vocab);
    r |= gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)(d->ff_is_expert ? c->n_ff_exp : c->n_ff));
    if (d->id == ARCH_LAGUNA) {
        int32_t *hc = malloc((size_t)c->n_layer * sizeof *hc);
        if (!hc) return -1;
        for (int64_t il = 0; il < c->n_layer; il++) hc[il] = (int32_t)layer_heads(c, il);
        r |= gguf_w_arr_i32(w, KEY("attention.head_count"), hc, (size_t)c->n_layer);
        free(hc);
    } else {
        r |= gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)c->n_head);
    }
    r |= gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->n_head_kv);
    if (d->keys_heads) {
        r |= d->keys_heads(w, c, d);
    } else {
        r |= gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim);
        r |= gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim);
    }
    r |= gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)c->rms_eps);
    r |= gguf_w_f32(w, KEY("rope.freq_base"), (float)c->rope_base);
    if (d->keys_rope) r |= d->keys_rope(w, c, d);
    r |= gguf_w_u32(w, KEY("expert_count"), (uint32_t)c->n_expert);
    r |= gguf_w_u32(w, KEY("expert_used_count"), (uint32_t)c->n_expert_used);
    if (d->expert_ff_key) r |= gguf_w_u32(w, KEY("expert_feed_forward_length"), (uint32_t)c->n_ff_exp);
    if (d->keys_moe) r |= d->keys_moe(w, c, d);
    r |= gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    r |= gguf_w_str(w, "tokenizer.ggml.pre", d->pre);
    r |= gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, v->n_tokens);
    r |= gguf_w_arr_i32(w, "tokenizer.ggml.token_type", v->types, v->n_tokens);
    r |= gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, v->n_merges);
    const gen_template *gt = moe_gen_template(c->chat_template);
    const size_t first_sp = v->n_tokens - (gt ? (size_t)gt->n_special : 3);
    r |= gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)(first_sp + (gt ? (size_t)gt->bos : 0)));
    r |= gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(gt ? first_sp + (size_t)gt->eos : v->n_tokens - 1));
    r |= gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)(first_sp + (gt ? (size_t)gt->bos : 0)));
    r |= gguf_w_bool(w, "tokenizer.ggml.add_bos_token", false);
    r |= gguf_w_str(w, "tokenizer.chat_template", gt ? gt->text : c->chat_template ? CHAT_TEMPLATE_QWEN3_TOOLS : CHAT_TEMPLATE);
    return r ? -1 : 0;
}
#undef KEY

/* ---- entry point ------------------------------------------------------------- */

int moe_gen_model(const char *arch, const char *preset, const char *const *overrides,
                  const char *path, char *err, size_t errlen) {
    if (!arch || !preset || !path)
        return moe_errf(err, errlen, MOE_EINVAL, "arch, preset and output path are required");
    gen_cfg c;
    memset(&c, 0, sizeof c);
    int which = !strcmp(preset, "tiny") ? 0 : !strcmp(preset, "default") ? 1 : !strcmp(preset, "bench") ? 2 : -1;
    if (which < 0)
        return moe_errf(err, errlen, MOE_EINVAL, "unknown preset '%s' (expected tiny|default|bench)", preset);
    const arch_def *d = NULL;
    for (size_t i = 0; i < N_ARCHS; i++)
        if (!strcmp(arch, ARCHS[i].name)) d = &ARCHS[i];
    if (!d)
        return moe_errf(err, errlen, MOE_EINVAL, "unknown arch '%s' (expected laguna|qwen3moe|llama|olmoe|qwen2moe|glm4moe|gpt-oss|deepseek2)",
                        arch);
    c.arch = d->id;
    d->preset(&c, which);
    c.preset = preset;
    c.seed = 42;
    c.type = which == 0 ? MOE_T_F32 : MOE_T_Q8_0;
    c.type_experts = -1;
    snprintf(c.name, sizeof c.name, "moefast-%s-%s", arch, preset);
    for (size_t i = 0; overrides && overrides[i]; i++) {
        int rc = set_key(&c, overrides[i], err, errlen);
        if (rc) return rc;
    }
    if (c.type_experts < 0) c.type_experts = c.type;
    if (c.rope_dim < 0) c.rope_dim = c.head_dim / 2 + (c.head_dim / 2) % 2;   /* laguna, glm4moe: half the head */
    if (c.arch == ARCH_LAGUNA && c.rope_dim_swa < 0) c.rope_dim_swa = c.head_dim;
    int rc = validate(&c, err, errlen);
    if (rc) return rc;

    plan p = {0};
    if (build_plan(&c, &p)) { free(p.t); return moe_errf(err, errlen, MOE_ENOMEM, "out of memory"); }
    /* shape checks before any drawing: every row is whole blocks of its type,
     * and a quantized row whole 32-value draw blocks (a float row's last
     * draw block may be partial: real files have such rows, e.g. an output
     * projection of 5 heads x 20 dims, and the engine must take them) */
    int64_t max_row = 0;
    uint64_t max_bytes = 0;
    for (size_t i = 0; i < p.n; i++) {
        const tplan *t = &p.t[i];
        const moe_type_info *ti = moe_type_get((uint32_t)t->type);
        if (t->kind == W_MATRIX && ((ti->block > 1 && t->ne[0] % 32) || t->ne[0] % ti->block)) {
            rc = moe_errf(err, errlen, MOE_EINVAL,
                          "tensor %s: row length %lld is not a multiple of %u (block of %s; quantized weights are drawn in blocks of 32)",
                          t->name, (long long)t->ne[0], t->ne[0] % 32 ? 32 : ti->block, ti->name);
            free(p.t);
            return rc;
        }
        uint64_t nb = moe_row_bytes((uint32_t)t->type, (uint64_t)t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2]);
        if (nb > max_bytes) max_bytes = nb;
        if (t->ne[0] > max_row) max_row = t->ne[0];
    }

    moe_gen_vocab v;
    const gen_template *gt = moe_gen_template(c.chat_template);
    rc = moe_gen_vocab_build(c.n_vocab, gt ? gt->special : NULL, gt ? gt->n_special : 0, &v, err, errlen);
    if (rc) { free(p.t); return rc; }
    /* rows are drawn in parallel (the bytes do not depend on the thread count) */
    int nth = moe_cpu_count();
    if (nth > 16) nth = 16;
    moe_pool *pool = nth > 1 ? moe_pool_new(nth, NULL, 0) : NULL;
    if (!pool) nth = 1;
    gguf_writer *w = gguf_writer_new(32);
    uint8_t *buf = malloc(max_bytes ? max_bytes : 1);
    float *row = malloc((size_t)nth * (size_t)max_row * sizeof(float));
    if (!w || !buf || !row || write_metadata(w, &c, &v)) {
        rc = moe_errf(err, errlen, MOE_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < p.n; i++) {
        const tplan *t = &p.t[i];
        uint64_t nb = moe_row_bytes((uint32_t)t->type, (uint64_t)t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2]);
        draw_tensor(&c, t, buf, row, pool);
        int wr = gguf_w_tensor(w, t->name, (uint32_t)t->type, t->n_dims, t->ne, buf, nb);
        if (wr) {
            rc = moe_errf(err, errlen, wr < 0 ? wr : MOE_ENOMEM, "cannot add tensor %s", t->name);
            goto done;
        }
    }
    rc = gguf_writer_write(w, path, err, errlen);
done:
    moe_pool_free(pool);
    gguf_writer_free(w);
    free(buf);
    free(row);
    free(p.t);
    moe_gen_vocab_free(&v);
    return rc;
}
