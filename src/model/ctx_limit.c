/* ctx_limit.c — how far a model's positions reach (moe_model_ctx_limit),
 * kept out of loader.c: the context it was trained for, and the one YaRN
 * rope scaling extends its original context to (the largest over the
 * model's RoPE tables that use YaRN). */
#include "model/model.h"

int moe_model_ctx_limit(const moe_model *m, int *yarn_ctx) {
    if (yarn_ctx) *yarn_ctx = 0;
    if (!m) return 0;
    for (int i = 0; i < m->n_ropes && yarn_ctx; i++) {
        const moe_rope *r = &m->ropes[i];
        if (!r->yarn) continue;
        const double c = (double)r->yarn_orig_ctx * (double)r->yarn_factor;
        const int ci = c >= 2147483647.0 ? 2147483647 : (int)c;
        if (ci > *yarn_ctx) *yarn_ctx = ci;
    }
    return m->hp.n_ctx_train;
}
