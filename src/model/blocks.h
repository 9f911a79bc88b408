/* blocks.h — the shared, exact building blocks an architecture's layer is
 * made of, and the helpers the blocks share.
 *
 * Each block reads its descriptor (model.h) and the context's rows x
 * [n_tok][n_embd] and adds its output into them. Every value a token
 * produces is computed by the same sequence of operations whatever the other
 * tokens of the step are, whichever thread computes it and whichever speed
 * flag is on: matrix products follow the kernels' dot-product contract
 * (quant.h), attention processes each (token, KV head) alone over its
 * sequence's visible keys in increasing position order, expert outputs are
 * combined in the router's rank order. That is what makes prefill equal
 * decode and a sequence's logits independent of the batch it runs in.
 *
 * In differential mode each block also runs on the context's reference twin
 * and compares its tensors bit for bit (forward.c: moe_diff_check); after a
 * difference the remaining blocks do nothing and the step fails. */
#ifndef MOE_BLOCKS_H
#define MOE_BLOCKS_H

#include <math.h>
#include <stdatomic.h>

#include "base/util.h"
#include "model/model.h"

/* ---- the blocks (model/blocks/: attention.c, ffn.c) -------------------------------------------- */

/* x += Wo attention(RMSNorm(x)) for layer il (its KV cache rows). */
void moe_block_attention(moe_context *c, const moe_attn_desc *d, int il);
/* x += Wo MLA(RMSNorm(x)) for layer il (mla.c: latent attention, its cache rows [c | k_pe]). */
void moe_block_mla(moe_context *c, const moe_mla_desc *d, const moe_attn_desc *a, int il);
/* x += SwiGLU(RMSNorm(x)) (a dense FFN). */
void moe_block_ffn(moe_context *c, const moe_ffn_desc *d, int il);
/* x += the routed experts' SwiGLU outputs in rank order (+ the shared expert). */
void moe_block_moe(moe_context *c, const moe_moe_desc *d, int il);

/* Expert parallelism, a shard's side (moefast/shard.h): out[n_rows][n_embd]
 * = the experts g[i].expert of layer il on their g[i].rows consecutive rows
 * of rows[n_rows][n_embd], as moe_block_moe computes them. */
int moe_shard_experts(moe_context *c, int il, const moe_shard_group *g, int n_groups, const float *rows,
                      float *out);

/* Router score functions (moe_router_desc.probs): ggml's soft_max (max
 * subtracted, double sum) and the logistic sigmoid, in place. */
void moe_router_softmax(float *p, int n);
void moe_router_sigmoid(float *p, int n);
const char *moe_router_name(moe_router_probs_fn f);   /* "softmax", "sigmoid" */

/* Thread slot ith's attention scores: n_head_max rows, c->sc_stride floats
 * apart (model.h: why not n_ctx). */
static inline float *moe_score_rows(const moe_context *c, int ith) {
    return c->scores + (size_t)ith * (size_t)c->m->hp.n_head_max * c->sc_stride;
}

/* The next of count attention items a thread takes, -1 when none is left:
 * claimed one at a time from the step's shared counter, the deepest first
 * (items go by token, and in a prompt later tokens see more keys), so a
 * thread that runs slower than the other takes fewer items instead of
 * holding up the step. Which thread runs an item never changes its result:
 * items write their own outputs, and a thread's scratch is its slot's. */
static inline int64_t moe_next_item(atomic_llong *claimed, int64_t count) {
    const int64_t k = atomic_fetch_add_explicit(claimed, 1, memory_order_relaxed);
    return k < count ? count - 1 - k : -1;
}

/* ---- elementwise math shared by blocks and hooks (fixed order, plain libm) ---- */

static inline float moe_softplus(float x) { return x > 20.0f ? x : log1pf(moe_expf(x)); }

/* Rotation of the first n_rot dims with a precomputed (cos, sin) row, pair
 * i at angle i: NEOX pairs (i, i + n_rot/2), or (adjacent, llama.cpp's NORM
 * mode) pairs (2i, 2i+1). The same table serves both. */
static inline void moe_rope_apply(float *x, const float *cs, int n_rot, bool adjacent) {
    const int half = n_rot / 2;
    const int stride = adjacent ? 2 : 1, off = adjacent ? 1 : half;
    for (int i = 0; i < half; i++) {
        const float c = cs[2 * i], sn = cs[2 * i + 1];
        float *p = x + (size_t)i * stride;
        const float x0 = p[0], x1 = p[off];
        p[0] = x0 * c - x1 * sn;
        p[off] = x0 * sn + x1 * c;
    }
}

/* y = RMSNorm(x) * w (w may be NULL): ggml's, the sum of squares in double. */
void moe_rms_norm(const float *x, const float *w, float *y, int n, float eps);
/* moe_rms_norm in place on `count` rows of n values, stride floats apart. */
void moe_rms_norm_rows(float *x, const float *w, int n, int count, size_t stride, float eps);
/* xn[t] = RMSNorm(x[t]) * w for the step's tokens (over the pool with parallel_glue). */
void moe_norm_tokens(moe_context *c, const float *w);

/* ---- products (matmul.c) -------------------------------------------------------- */

/* When w reads A8 rows (act_q8), quantizes `rows` rows of x (xs floats
 * apart) into dst and returns it; NULL when w reads floats. */
const uint8_t *moe_act_rows(moe_context *c, const moe_weight *w, const float *x, size_t xs, int rows, uint8_t *dst);
/* Y[n][n_out] = X[n][n_in] W^T over the pool. */
void moe_matmul(moe_context *c, const moe_weight *w, const float *x, int n, float *y);
/* Several products of one input in one pool phase (xa: the input as A8
 * rows when some w[i] reads them, see moe_act_rows_multi). */
void moe_matmul_multi(moe_context *c, const moe_weight *const *w, float *const *y, int count, const float *x,
                      const uint8_t *xa, int n);
const uint8_t *moe_act_rows_multi(moe_context *c, const moe_weight *const *w, int count, const float *x, int n);

/* ---- differential mode (forward.c) -------------------------------------------------- */

/* True when c and its twin agree bit for bit on rows x cols floats at a and
 * b; else sets c's error (layer il, or "final" when il < 0) and c->diverged. */
bool moe_diff_check(moe_context *c, const float *a, const float *b, size_t rows, size_t cols, const char *what, int il);

#endif
