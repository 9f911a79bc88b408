/* profile.c — the public side of the phase profile (profile.h): names, reset,
 * read. The marks themselves are inline in forward.c. */
#include <string.h>

#include "model/model.h"
#include "base/util.h"

/* Index = moe_phase_id; these are the names `moefast bench --phases` prints
 * and docs/MEASUREMENT.md describes. */
static const char *const phase_names[MOE_PH_COUNT] = {
    [MOE_PH_EMBED] = "embed",         [MOE_PH_ATTN_NORM] = "attn_norm", [MOE_PH_QKV] = "qkv",
    [MOE_PH_ATTN_PREP] = "attn_prep", [MOE_PH_ATTENTION] = "attention", [MOE_PH_WO] = "wo",
    [MOE_PH_FFN_NORM] = "ffn_norm",   [MOE_PH_ROUTER] = "router",       [MOE_PH_ROUTE] = "route",
    [MOE_PH_GATE_UP] = "gate_up",     [MOE_PH_HIDDEN_Q8] = "hidden_q8", [MOE_PH_DOWN] = "down",
    [MOE_PH_EXPERT_WAIT] = "shard_wait",
    [MOE_PH_COMBINE] = "combine",     [MOE_PH_DENSE_FFN] = "dense_ffn", [MOE_PH_LM_HEAD] = "lm_head",
};

int moe_context_profile_enable_(moe_context *s, bool on) {
    if (!s) return MOE_EINVAL;
    memset(s->prof.e, 0, sizeof s->prof.e);
    s->prof.t = 0;
    s->prof.on = on;
    return MOE_OK;
}

int moe_context_profile_read_(const moe_context *s, moe_phase_stat *out, int max) {
    if (!s || max < 0 || (max > 0 && !out)) return MOE_EINVAL;
    for (int i = 0; i < MOE_PH_COUNT && i < max; i++) {
        const moe_prof_entry *e = &s->prof.e[i];
        out[i] = (moe_phase_stat){phase_names[i], e->calls, e->seconds, e->weight_bytes, e->kv_bytes};
    }
    return MOE_PH_COUNT;
}
