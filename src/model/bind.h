/* bind.h — what an architecture's bind uses: GGUF keys under "<arch>." with
 * defaults recorded for `info`, tensors bound with their shapes checked, the
 * standard tensor names of the shared blocks. Every bound matrix is entered
 * in the model's weight list (model.h: moe_weight_ref). All return MOE_OK, a
 * negative status with a one-line error naming the file and the key or
 * tensor, or (the optional ones, required false) 1 when it is absent. */
#ifndef MOE_BIND_H
#define MOE_BIND_H

#include "model/model.h"

int moe_bind_weight(moe_model *m, moe_weight *w, const char *name, int64_t n_in, int64_t n_out, int64_t n_mat,
                    moe_weight_use use, bool required, char *err, size_t errlen);
int moe_bind_vector(moe_model *m, const float **out, const char *name, int64_t n, bool required, char *err,
                    size_t errlen);
int moe_get_u32_def(moe_model *m, const char *key, uint32_t def, uint32_t *out, bool required, char *err,
                    size_t errlen);
int moe_get_f32_def(moe_model *m, const char *key, float def, float *out, char *err, size_t errlen);
int moe_get_bool_def(moe_model *m, const char *key, bool def, bool *out, char *err, size_t errlen);

/* m->hp's block_count, embedding_length, context_length, vocab_size,
 * feed_forward_length, expert_count, expert_used_count,
 * layer_norm_rms_epsilon, and expert_feed_forward_length when present (else
 * n_ff_exp 0: the architecture decides, moe_check_hparams refuses 0);
 * allocates m->layers. */
int moe_read_common_hparams(moe_model *m, char *err, size_t errlen);
/* attention.key_length (default n_embd / the most query heads) and
 * attention.value_length (default key_length); hp.n_head_max must be set. */
int moe_read_head_dims(moe_model *m, char *err, size_t errlen);
/* The same query heads on every layer: attention.head_count (required, into
 * every layer's attn.n_head), attention.head_count_kv (default: the same),
 * then moe_read_head_dims. */
int moe_read_uniform_heads(moe_model *m, char *err, size_t errlen);
/* expert_group_count / expert_group_used_count (optional; group-limited
 * routing, DeepSeek-V3 style) into *n_group / *n_group_used (0 / 0 when
 * absent or 1), checked against the expert counts (needs n_expert and
 * n_expert_used read). */
int moe_read_expert_groups(moe_model *m, int *n_group, int *n_group_used, char *err, size_t errlen);
/* Range checks every architecture needs, once the layers' head counts are set. */
int moe_check_hparams(moe_model *m, char *err, size_t errlen);
/* rope.freq_base / rope.dimension_count style keys (base_key, dims_key under
 * "<arch>.") into m->ropes[i]; scaling: MOE_ROPE_FIXED (false) none;
 * MOE_ROPE_SCALED (true) rope.scaling.* (YaRN), then the load's override
 * (m->rope_override) on top; MOE_ROPE_SLIDING the file's YaRN, of which the
 * override changes only the ramp and the original context (a sliding-window
 * table under llama.cpp's options, bind.c read_rope_sliding). */
enum { MOE_ROPE_FIXED = 0, MOE_ROPE_SCALED = 1, MOE_ROPE_SLIDING = 2 };
int moe_read_rope(moe_model *m, int i, const char *base_key, float base_def, const char *dims_key, int dims_def,
                  int scaling, char *err, size_t errlen);

/* Standard tensors of layer il ("blk.<il>.attn_q.weight", ...). Optional:
 * attn_{q,k}_norm ([head_dim], or with d->qk_norm_full set before the call
 * the whole projection's width), attn_{q,k,v,output}.bias, attn_sinks
 * ([n_head]). */
int moe_bind_attention(moe_model *m, int il, moe_attn_desc *d, char *err, size_t errlen);
int moe_bind_dense_ffn(moe_model *m, int il, moe_ffn_desc *d, char *err, size_t errlen);
/* Router, experts and (when hp.n_ff_shexp > 0) the shared expert with its
 * optional sigmoid gate ffn_gate_inp_shexp; the router's function, bias
 * use, renorm and scale are the architecture's. Optional: ffn_gate_inp.bias
 * [n_expert], ffn_{gate,up}_exps.bias [n_ff_exp, n_expert],
 * ffn_down_exps.bias [n_embd, n_expert] (F32). The input norm is
 * ffn_norm unless d->norm is set before the call. */
int moe_bind_moe(moe_model *m, int il, moe_moe_desc *d, char *err, size_t errlen);
/* token_embd, output_norm, output (tied to token_embd when absent). */
int moe_bind_io(moe_model *m, char *err, size_t errlen);

/* "[a, b, c]" */
void moe_shape_str(const int64_t *ne, int n, char *buf, size_t len);

#endif
