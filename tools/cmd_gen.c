/* cmd_gen.c — `moefast gen`: write a GGUF with seeded random weights. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/stat.h>

#include "cli.h"
#include "moefast.h"

static const char GEN_HELP[] =
    "usage: moefast gen --arch laguna|qwen3moe|llama|olmoe|qwen2moe|glm4moe|gpt-oss|deepseek2 --preset tiny|default|bench -o FILE\n"
    "                   [--seed N] [--type T] [--type-experts T] [key=value ...]\n"
    "\n"
    "Writes a GGUF v3 model with seeded random weights (same arguments give a\n"
    "byte-identical file) and a byte-level BPE vocabulary. Presets:\n"
    "  tiny     the shapes of the shared oracle tiny models (F32)\n"
    "  default  a small model for `make run` (Q8_0, ~35 MB)\n"
    "  bench    ~1.8 GB (Q8_0): 16 layers, n_embd 1024, see docs/MODELS.md\n"
    "Options:\n"
    "  --seed N            PRNG seed (default 42)              (= seed=N)\n"
    "  --type T            weight type of the matrices: F32, F16, BF16, Q8_0, Q4_0,\n"
    "                      Q4_1, Q5_0, Q5_1, IQ4_NL, Q4_K, NVFP4, ... (default F32 for tiny, Q8_0 otherwise)\n"
    "  --type-experts T    type of routed and shared expert matrices (default: --type)\n"
    "  --chat-template chatml|qwen3-tools|llama3-tools|mistral-tools|deepseek3-tools|glm4-tools|kimi-k2-tools\n"
    "                      tokenizer.chat_template: plain ChatML (default), or a family's\n"
    "                      tool-aware one with its special tokens  (= chat_template=...)\n"
    "  --type Q3_K_M|Q4_K_M|Q5_K_M   the F32 model quantized with llama-quantize's\n"
    "                      mix of that name (as `moefast quantize`; docs/QUANT_MIXES.md)\n"
    "Norms, the router (ffn_gate_inp) and exp_probs_b are always F32.\n"
    "\n"
    "Hyperparameter overrides (key=value; unknown keys and bad values are errors):\n"
    "  every architecture:\n"
    "    n_layer            block_count\n"
    "    n_embd             embedding_length (multiple of 32)\n"
    "    n_head             query heads (laguna: sets n_head_full and n_head_swa)\n"
    "    n_head_kv          KV heads (must divide the query head counts)\n"
    "    head_dim           key_length = value_length (even)\n"
    "    n_vocab            vocabulary size (the BPE is trained to fill it)\n"
    "    n_ctx              context_length\n"
    "    n_ff               feed_forward_length (laguna: FFN of the dense lead layers)\n"
    "    n_expert           expert_count\n"
    "    n_expert_used      expert_used_count (top-k)\n"
    "    n_ff_exp           expert_feed_forward_length\n"
    "    rope_base          rope.freq_base (laguna: full-attention layers)\n"
    "    rms_eps            attention.layer_norm_rms_epsilon\n"
    "    name               general.name\n"
    "    seed, type, type_experts, chat_template   as the options above\n"
    "  laguna only:\n"
    "    n_head_full        query heads of full-attention layers\n"
    "    n_head_swa         query heads of sliding-window layers\n"
    "    n_ff_shexp         expert_shared_feed_forward_length\n"
    "    n_dense_lead       leading_dense_block_count\n"
    "    swa_window         attention.sliding_window (0: every layer full attention)\n"
    "    swa_pattern        full attention at layers il % swa_pattern == 0 (default 4;\n"
    "                       attention.sliding_window_pattern is written when != 4)\n"
    "    rope_base_swa      rope.freq_base_swa\n"
    "    rope_dim           rope.dimension_count (full layers; even, <= head_dim;\n"
    "                       default head_dim/2)\n"
    "    rope_dim_swa       rope.dimension_count_swa (default head_dim)\n"
    "    rope_scaling       none|yarn (rope.scaling.type of full layers)\n"
    "    yarn_factor        rope.scaling.factor\n"
    "    yarn_orig_ctx      rope.scaling.original_context_length\n"
    "    yarn_beta_fast     rope.scaling.yarn_beta_fast\n"
    "    yarn_beta_slow     rope.scaling.yarn_beta_slow\n"
    "    expert_weights_scale  expert_weights_scale\n"
    "    expert_weights_norm   expert_weights_norm (0|1)\n"
    "    gate               head|element (attn_gate rows: n_head or n_head*head_dim)\n";

static const char *opt_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) return NULL;
    return argv[++*i];
}

/* --type Q3_K_M / Q4_K_M / Q5_K_M: a llama-quantize mix (not a single type
 * the generator can draw), made by quantizing the F32 model. */
static bool is_mix(const char *t) {
    return !strcasecmp(t, "Q3_K_M") || !strcasecmp(t, "Q4_K_M") || !strcasecmp(t, "Q5_K_M");
}

int cmd_gen(int argc, char **argv) {
    const char *arch = NULL, *preset = NULL, *out = NULL, *mix = NULL;
    const char **ov = calloc((size_t)argc * 2 + 1, sizeof *ov);
    char **owned = calloc((size_t)argc + 1, sizeof *owned);
    int n_ov = 0, n_owned = 0, rc = 2;
    if (!ov || !owned) { free(ov); free(owned); return cli_fail("gen", "out of memory"); }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(GEN_HELP, stdout);
            rc = 0;
            goto done;
        }
        const char *map = !strcmp(a, "--seed") ? "seed" : !strcmp(a, "--type") ? "type"
                        : !strcmp(a, "--type-experts") ? "type_experts"
                        : !strcmp(a, "--chat-template") ? "chat_template" : NULL;
        if (map) {
            const char *v = opt_value(argc, argv, &i);
            if (!v) { cli_fail("gen", "%s needs a value", a); goto done; }
            if (map[0] == 't' && map[4] == 0 && is_mix(v)) { mix = v; v = "F32"; }
            size_t n = strlen(map) + strlen(v) + 2;
            char *s = malloc(n);
            if (!s) { cli_fail("gen", "out of memory"); goto done; }
            snprintf(s, n, "%s=%s", map, v);
            owned[n_owned++] = s;
            ov[n_ov++] = s;
        } else if (!strcmp(a, "--arch") || !strcmp(a, "--preset") || !strcmp(a, "-o")) {
            const char *v = opt_value(argc, argv, &i);
            if (!v) { cli_fail("gen", "%s needs a value", a); goto done; }
            if (a[2] == 'a') arch = v;
            else if (a[2] == 'p') preset = v;
            else out = v;
        } else if (a[0] != '-' && strchr(a, '=')) {
            ov[n_ov++] = a;
        } else {
            cli_fail("gen", "unknown argument '%s' (see moefast gen --help)", a);
            goto done;
        }
    }
    if (!arch) { cli_fail("gen", "--arch is required (laguna|qwen3moe|llama|olmoe|qwen2moe|glm4moe|gpt-oss|deepseek2)"); goto done; }
    if (!preset) { cli_fail("gen", "--preset is required (tiny|default|bench)"); goto done; }
    if (!out) { cli_fail("gen", "-o FILE is required"); goto done; }
    char err[MOE_ERR_LEN], tmp[4096];
    if (mix) {
        for (int k = 0; k < n_ov; k++)
            if (!strncmp(ov[k], "type_experts=", 13)) { cli_fail("gen", "--type %s is a mix: no --type-experts", mix); goto done; }
        snprintf(tmp, sizeof tmp, "%s.f32.tmp", out);
    }
    if (moe_gen_model(arch, preset, ov, mix ? tmp : out, err, sizeof err) != 0) {
        cli_fail("gen", "%s", err);
        goto done;
    }
    if (mix) {
        const int qrc = moe_quantize_file(tmp, out, mix, NULL, err, sizeof err);
        unlink(tmp);
        if (qrc != 0) { cli_fail("gen", "%s", err); goto done; }
    }
    struct stat st;
    if (stat(out, &st) == 0)
        printf("wrote %s (%lld bytes)\n", out, (long long)st.st_size);
    rc = 0;
done:
    for (int i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(ov);
    return rc;
}
