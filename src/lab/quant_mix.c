/* quant_mix.c — llama-quantize's named mixes (Q2_K, Q3_K_M, Q4_K_M, Q5_K_M,
 * IQ4_XS): the per-tensor type choices of llama.cpp's
 * llama_tensor_get_type_impl + tensor_type_fallback (src/llama-quant.cpp,
 * no imatrix, no overrides) for the architectures moefast runs (no Falcon,
 * no 70B rule). The table is docs/QUANT_MIXES.md; test_quant_mix compares
 * the plan with llama.cpp's own files tensor by tensor.
 *
 * Which tensors: >= 2 dimensions, name ending in "weight", not a norm
 * ("_norm.weight") and not the router ("ffn_gate_inp.weight"). Counters
 * (i_attention_wv) advance in llama.cpp's order, its weights map sorted by
 * name; a layer is read from "blk.N." when the model has experts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gguf/gguf.h"
#include "lab/quant_mix.h"
#include "quant/quant.h"
#include "base/util.h"

static const struct { const char *name; int ftype; uint32_t base; } MIXES[] = {
    [MOE_MIX_Q2_K] = {"Q2_K", 10, MOE_T_Q2_K},      [MOE_MIX_Q3_K_M] = {"Q3_K_M", 12, MOE_T_Q3_K},
    [MOE_MIX_Q4_K_M] = {"Q4_K_M", 15, MOE_T_Q4_K},  [MOE_MIX_Q5_K_M] = {"Q5_K_M", 17, MOE_T_Q5_K},
    [MOE_MIX_IQ4_XS] = {"IQ4_XS", 30, MOE_T_IQ4_XS},
};

int moe_mix_by_name(const char *s) {
    for (int i = 0; s && i < MOE_MIX_COUNT; i++)
        if (!strcasecmp(s, MIXES[i].name)) return i;
    return -1;
}

const char *moe_mix_name(int mix) { return mix >= 0 && mix < MOE_MIX_COUNT ? MIXES[mix].name : "?"; }
int moe_mix_ftype(int mix) { return mix >= 0 && mix < MOE_MIX_COUNT ? MIXES[mix].ftype : -1; }

static bool ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && !memcmp(s + n - m, suf, m);
}

bool moe_mix_quantizable(const gguf_tensor *t) {
    return t->n_dims >= 2 && ends_with(t->name, "weight") && !strstr(t->name, "_norm.weight") &&
           !strstr(t->name, "ffn_gate_inp.weight");
}

enum { C_TOKEN_EMBD, C_ATTN_Q, C_ATTN_V, C_ATTN_K, C_ATTN_QKV, C_ATTN_KV_B, C_ATTN_OUT, C_FFN_UP, C_FFN_GATE,
       C_FFN_DOWN, C_OUTPUT, C_OTHER };

/* llama.cpp's tensor_get_category, in its order of tests */
static int category(const char *n) {
    if (!strcmp(n, "output.weight")) return C_OUTPUT;
    if (!strcmp(n, "token_embd.weight") || !strcmp(n, "per_layer_token_embd.weight")) return C_TOKEN_EMBD;
    if (strstr(n, "attn_qkv.weight")) return C_ATTN_QKV;
    if (strstr(n, "attn_kv_b.weight")) return C_ATTN_KV_B;
    if (strstr(n, "attn_v.weight")) return C_ATTN_V;
    if (strstr(n, "attn_k.weight")) return C_ATTN_K;
    if (strstr(n, "attn_q.weight")) return C_ATTN_Q;
    if (strstr(n, "attn_output.weight")) return C_ATTN_OUT;
    if (strstr(n, "ffn_up")) return C_FFN_UP;
    if (strstr(n, "ffn_gate")) return C_FFN_GATE;
    if (strstr(n, "ffn_down")) return C_FFN_DOWN;
    return C_OTHER;
}
static bool is_attn_v(int c) { return c == C_ATTN_V || c == C_ATTN_QKV || c == C_ATTN_KV_B; }

static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

typedef struct {
    int mix, n_expert, n_gqa, n_layer, n_attn_wv, i_attn_wv, i_ffn_down;
    bool tied;
} mix_state;

/* llama_tensor_get_type_impl for the five mixes */
static uint32_t choose(mix_state *q, const gguf_tensor *t, int cat, int *layer_err) {
    const int mix = q->mix;
    uint32_t ty = MIXES[mix].base;
    if (cat == C_OUTPUT || (q->tied && cat == C_TOKEN_EMBD)) {
        const moe_type_info *ti = moe_type_get(ty);
        return t->ne[0] % ti->block ? MOE_T_Q8_0 : MOE_T_Q6_K;
    }
    if (cat == C_TOKEN_EMBD) return ty;
    if (is_attn_v(cat)) {
        if (mix == MOE_MIX_Q2_K) ty = q->n_gqa >= 4 ? MOE_T_Q4_K : MOE_T_Q3_K;
        else if (mix == MOE_MIX_Q3_K_M) ty = q->i_attn_wv < 2 ? MOE_T_Q5_K : MOE_T_Q4_K;
        else if (mix == MOE_MIX_IQ4_XS && q->n_gqa >= 4) ty = MOE_T_Q5_K;
        else if ((mix == MOE_MIX_Q4_K_M || mix == MOE_MIX_Q5_K_M) && use_more_bits(q->i_attn_wv, q->n_attn_wv))
            ty = MOE_T_Q6_K;
        if (q->n_expert == 8) ty = MOE_T_Q8_0;
        q->i_attn_wv++;
        return ty;
    }
    if (cat == C_ATTN_K) return q->n_expert == 8 ? MOE_T_Q8_0 : ty;
    if (cat == C_FFN_DOWN) {
        int il = q->i_ffn_down;
        const int nl = q->n_layer;
        if (q->n_expert > 1 && (sscanf(t->name, "blk.%d.", &il) != 1 || il < 0 || il >= nl)) { *layer_err = 1; return ty; }
        if (mix == MOE_MIX_Q2_K) ty = MOE_T_Q3_K;
        else if (mix == MOE_MIX_Q3_K_M) ty = il < nl / 16 ? MOE_T_Q5_K : MOE_T_Q4_K;  /* (not Falcon) */
        else if (mix == MOE_MIX_Q4_K_M) { if (use_more_bits(il, nl)) ty = MOE_T_Q6_K; }
        else if (mix == MOE_MIX_IQ4_XS) { if (il < nl / 8) ty = MOE_T_Q5_K; }
        else if (mix == MOE_MIX_Q5_K_M && use_more_bits(il, nl)) ty = MOE_T_Q6_K;
        q->i_ffn_down++;
        return ty;
    }
    if (cat == C_ATTN_OUT) {
        if (q->n_expert == 8) return mix == MOE_MIX_Q5_K_M ? ty : MOE_T_Q5_K;
        if (mix == MOE_MIX_Q2_K) return MOE_T_Q3_K;
        if (mix == MOE_MIX_Q3_K_M) return MOE_T_Q4_K;
        return ty;
    }
    if (cat == C_ATTN_QKV) {
        if (mix == MOE_MIX_Q3_K_M) return MOE_T_Q4_K;
        if (mix == MOE_MIX_Q4_K_M) return MOE_T_Q5_K;
        if (mix == MOE_MIX_Q5_K_M) return MOE_T_Q6_K;
    }
    return ty;
}

/* tensor_type_fallback: a row that is not a multiple of the block */
static uint32_t fallback(uint32_t ty, int64_t ncols) {
    if (ncols % moe_type_get(ty)->block == 0) return ty;
    uint32_t r = ty == MOE_T_IQ4_XS ? MOE_T_IQ4_NL : ty == MOE_T_Q2_K || ty == MOE_T_Q3_K ? MOE_T_Q4_0
               : ty == MOE_T_Q4_K ? MOE_T_Q5_0 : ty == MOE_T_Q5_K ? MOE_T_Q5_1 : MOE_T_Q8_0;
    return ncols % moe_type_get(r)->block ? MOE_T_F16 : r;
}

static const gguf_tensor *g_sort_tensors;
static int by_name(const void *a, const void *b) {
    return strcmp(g_sort_tensors[*(const uint64_t *)a].name, g_sort_tensors[*(const uint64_t *)b].name);
}

static uint32_t arch_u32(const gguf_file *f, const char *arch, const char *key, uint32_t def) {
    char k[160];
    uint32_t v = def;
    snprintf(k, sizeof k, "%s.%s", arch, key);
    char e[8];
    (void)gguf_get_u32(f, k, &v, e, sizeof e);
    return v;
}

int moe_mix_plan(int mix, const gguf_file *f, int *target, char *err, size_t errlen) {
    if (mix < 0 || mix >= MOE_MIX_COUNT) return moe_errf(err, errlen, MOE_EINVAL, "unknown quantization mix %d", mix);
    gguf_str as = {0};
    char arch[64] = "";
    if (gguf_get_str(f, "general.architecture", &as, err, errlen) != MOE_OK || as.len == 0 || as.len >= sizeof arch)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: general.architecture missing (a mix needs the model's shape)", f->path);
    memcpy(arch, as.ptr, as.len);
    arch[as.len] = 0;
    mix_state q = {.mix = mix, .tied = true};
    q.n_layer = (int)arch_u32(f, arch, "block_count", 0);
    q.n_expert = (int)arch_u32(f, arch, "expert_count", 0);
    const uint32_t nh = arch_u32(f, arch, "attention.head_count", 0), nkv = arch_u32(f, arch, "attention.head_count_kv", nh);
    q.n_gqa = nkv ? (int)(nh / nkv) : 0;
    if (q.n_layer <= 0)
        return moe_errf(err, errlen, MOE_EFORMAT, "%s: %s.block_count missing or 0 (a mix needs the layer count)", f->path, arch);
    uint64_t *order = malloc(sizeof *order * (f->n_tensors ? f->n_tensors : 1));
    if (!order) return moe_errf(err, errlen, MOE_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        order[i] = i;
        const int c = category(f->tensors[i].name);
        if (is_attn_v(c)) q.n_attn_wv++;
        if (c == C_OUTPUT) q.tied = false;
    }
    g_sort_tensors = f->tensors;
    qsort(order, f->n_tensors, sizeof *order, by_name);
    int rc = MOE_OK;
    for (uint64_t k = 0; k < f->n_tensors && !rc; k++) {
        const gguf_tensor *t = &f->tensors[order[k]];
        target[order[k]] = -1;
        if (!moe_mix_quantizable(t)) continue;
        int layer_err = 0;
        const uint32_t ty = fallback(choose(&q, t, category(t->name), &layer_err), t->ne[0]);
        if (layer_err)
            rc = moe_errf(err, errlen, MOE_EFORMAT, "%s: tensor %s: no layer index blk.N in [0, %d)", f->path, t->name, q.n_layer);
        target[order[k]] = (int)ty;
    }
    free(order);
    return rc;
}
