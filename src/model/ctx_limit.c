/* ctx_limit.c — how far a model's positions reach (moe_model_ctx_limit),
 * kept out of loader.c: the context it was trained for, and the one YaRN
 * rope scaling extends its original context to. */
#include "model/model.h"

int moe_model_ctx_limit(const moe_model *m, int *yarn_ctx) {
    if (yarn_ctx) *yarn_ctx = 0;
    if (!m) return 0;
    const moe_rope *r = &m->hp.rope_full;
    if (yarn_ctx && r->yarn) {
        double c = (double)r->yarn_orig_ctx * (double)r->yarn_factor;
        *yarn_ctx = c >= 2147483647.0 ? 2147483647 : (int)c;
    }
    return m->hp.n_ctx_train;
}
