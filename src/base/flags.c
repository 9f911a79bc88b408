/* flags.c — the optimisation flag registry (see flags.h). */
#include "base/flags.h"
#include "base/util.h"

#include <ctype.h>
#include <stdio.h>

/* .name designated: clang warns of the fields a positional list leaves out */
static const moe_flag_info FLAGS[MOE_FLAG_COUNT] = {
    [MOE_FLAG_SIMD] = {.name = "simd", "SIMD matrix kernels (AVX2/AVX-512); off: the scalar reference kernels", true, false},
    [MOE_FLAG_THREADS] = {.name = "threads", "spread each operation over the worker pool; off: one thread", true, false, false,
                          "is fixed when the session is created (its worker pool)"},
    [MOE_FLAG_GEMM_BATCH] = {.name = "gemm_batch", "prefill: group tokens by expert and run one batched GEMM per expert", true, false},
    [MOE_FLAG_FUSED_GATE_UP] = {.name = "fused_gate_up", "experts: compute gate and up rows in one pass with SiLU fused", true, false},
    [MOE_FLAG_READAHEAD] = {.name = "readahead", "load: start reading all weights into the page cache at once (madvise WILLNEED)", true, false, false,
                            "is fixed when the model is loaded"},
    [MOE_FLAG_REPACK] = {.name = "repack", "load: copy matrices into the 4-row interleaved x4 layout (one memory stream per 4 rows): Q8_0, Q4_0, MXFP4, NVFP4, and F32/F16/BF16 rows of a multiple of 32 values; not the K-quants", true, false, false,
                         "is fixed when the model is loaded (the weight layout)"},
    [MOE_FLAG_PARALLEL_GLUE] = {.name = "parallel_glue", "the steps between matrix products run inside the parallel phases: QK-norm, RoPE and the KV-cache store with attention, the expert combine and residual with the down projections (decode) or as phases of their own (prefill); a one-token expert input is read in place, not gathered; off: on the calling thread", true, false},
    [MOE_FLAG_GEMM_WIDE] = {.name = "gemm_wide", "prefill GEMM over FP32 activations (block formats; F32 rows at AVX-512): dequantize each group of 4 rows once per block of up to 96 tokens into an L1 buffer and run 4-row x 6-token (AVX-512) or 2-row x 3-token (AVX2) tiles over it; the scalar level has no such kernel", true, false},
    [MOE_FLAG_KEY_STREAM] = {.name = "key_stream", "decode attention over the FP32 KV cache: score the keys one row at a time, front to back (one sequential stream from memory), instead of the tile's rows interleaved (kept for prefill, where the keys are in L2); at AVX2 also sum the values 2 heads x 32 dims per tile instead of 4 x 16 (fewer passes over each row from memory); AVX-512 and AVX2 (scalar has one order)", true, false},
    [MOE_FLAG_ALIGNED_BUFFERS] = {.name = "aligned_buffers", "a session's buffers (activation rows, A8 rows, the KV cache, scratch) start on a 64-byte cache line, so no 64-byte vector load from them straddles two lines; off: 16 bytes past a line, calloc's usual placement, where every such load does", true, false, false,
                                  "is fixed when the session is created (its buffers)", true},
    [MOE_FLAG_VALUE_PREFETCH] = {.name = "value_prefetch", "decode attention over the kv_q8 cache: the value-sum tiles prefetch the value rows 16 keys ahead (a decode step's values come from memory, and the sum waits on them about as long as it computes); AVX-512 and AVX2 (scalar has no prefetch)", true, false},
    [MOE_FLAG_KV_PREFETCH] = {.name = "kv_prefetch", "decode attention over the F16 cache (kv_f16): the score tiles prefetch the key rows 64 keys ahead, the value sums the value rows 32 ahead, and an item's first value rows are fetched while its softmax runs (a decode step's keys and values come from memory, one stream per item, which the hardware prefetcher restarts at every 4 KB page; the FP32 cache's kernels with the same prefetches measured within noise); AVX-512 and AVX2 (scalar has no prefetch)", true, false},
    [MOE_FLAG_LM_SCREEN] = {.name = "lm_screen", "where only the top-k or argmax of the logits is needed (greedy run, bench, price, trace record/gate, top-k sampling): screen the lm head with a low-bit proxy of every row and certified bounds (built at load; F32/F16/BF16/Q8_0 heads), and evaluate exactly only the rows whose bound reaches the k-th best exact logit; the full-logits API never prunes (docs/SCREEN.md)", true, false},
    [MOE_FLAG_ACT_Q8] = {.name = "act_q8", "NUMERICS: quantize matrix inputs to 8-bit blocks (llama.cpp's Q8_0 activations) for Q8_0, Q4_0, Q4_K, Q6_K, MXFP4 and NVFP4 weights and use integer dot products; changes the logits", false, false, true,
                         "is a numerics flag, fixed when the model is loaded (the a8 weight layout) and the session created"},
    [MOE_FLAG_KV_F16] = {.name = "kv_f16", "NUMERICS: store the KV cache as IEEE half (llama.cpp's default): half the cache memory and half the bytes attention reads; changes the logits", false, false, true,
                         "is a numerics flag, fixed when the session is created (the KV cache format)", true},
    [MOE_FLAG_KV_Q8] = {.name = "kv_q8", "NUMERICS: store the KV cache as 8-bit blocks (llama.cpp's q8_0 cache: int8 codes and a half scale per 32 values) and score keys with integer dot products against 8-bit query blocks: 0.53x the bytes of kv_f16; changes the logits; excludes kv_f16", false, false, true,
                        "is a numerics flag, fixed when the session is created (the KV cache format)", true},
    [MOE_FLAG_KV_TQ] = {.name = "kv_tq", "NUMERICS: store the KV cache TurboQuant-style (docs/KV_TQ.md): each key and value rotated by a Walsh-Hadamard transform with random signs, every coordinate a Lloyd-Max code of N(0,1), keys 5 bits and values 4, one half scale per vector (head dim 128: 148 bytes per key and value, 0.29x kv_f16); power-of-two head sizes; changes the logits; excludes kv_f16, kv_q8, kv_tq_small", false, false, true,
                        "is a numerics flag, fixed when the session is created (the KV cache format)", true},
    [MOE_FLAG_KV_TQ_SMALL] = {.name = "kv_tq_small", "NUMERICS: kv_tq with keys 4 bits and values 3 (head dim 128: 116 bytes per key and value, 0.23x kv_f16); changes the logits; excludes kv_f16, kv_q8, kv_tq", false, false, true,
                              "is a numerics flag, fixed when the session is created (the KV cache format)", true},
    [MOE_FLAG_KV_TQ_K] = {.name = "kv_tq_k", "MEASUREMENT, NUMERICS: with kv_tq or kv_tq_small, code only the keys and keep the values FP32 (to attribute the format's error to its keys; docs/KV_TQ.md); changes the logits", false, true, true,
                          "is a numerics flag, fixed when the session is created (the KV cache format)", true},
    [MOE_FLAG_KV_TQ_V] = {.name = "kv_tq_v", "MEASUREMENT, NUMERICS: with kv_tq or kv_tq_small, code only the values and keep the keys FP32 (to attribute the format's error to its values; docs/KV_TQ.md); changes the logits", false, true, true,
                          "is a numerics flag, fixed when the session is created (the KV cache format)", true},
    [MOE_FLAG_TEST_PERTURB] = {.name = "test_perturb", "TEST ONLY: from position 20 on, reverse the last layer's expert weights (changes results)", false, true},
    [MOE_FLAG_TEST_SLOW] = {.name = "test_slow", "TEST ONLY: sleep 2 ms for every token forwarded (changes timing)", false, true},
    [MOE_FLAG_TEST_SCREEN_SHRINK] = {.name = "test_screen_shrink", "TEST ONLY: divide the lm-head screen's bounds by 4 (unsound: may change a top-k)", false, true},
};

const moe_flag_info *moe_flag_get(int id) {
    return id >= 0 && id < MOE_FLAG_COUNT ? &FLAGS[id] : NULL;
}

uint64_t moe_flags_numerics(uint64_t mask) {
    uint64_t m = 0;
    for (int i = 0; i < MOE_FLAG_COUNT; i++)
        if (FLAGS[i].numerics) m |= 1ull << i;
    return mask & m;
}

uint64_t moe_flags_default(void) {
    uint64_t m = 0;
    for (int i = 0; i < MOE_FLAG_COUNT; i++)
        if (FLAGS[i].default_on) m |= 1ull << i;
    return m;
}

static int flag_by_name(const char *s, size_t n) {
    for (int i = 0; i < MOE_FLAG_COUNT; i++)
        if (strlen(FLAGS[i].name) == n && strncmp(FLAGS[i].name, s, n) == 0) return i;
    return -1;
}

int moe_flags_parse(const char *spec, uint64_t base, uint64_t *out, char *err, size_t errlen) {
    uint64_t m = base;
    if (!spec) { *out = m; return MOE_OK; }
    const char *p = spec;
    while (*p) {
        while (*p == ',' || isspace((unsigned char)*p)) p++;
        if (!*p) break;
        const char *s = p;
        while (*p && *p != ',') p++;
        const char *e = p;
        while (e > s && isspace((unsigned char)e[-1])) e--;
        size_t n = (size_t)(e - s);
        if (n == 4 && !strncmp(s, "none", 4)) { m = 0; continue; }
        if (n == 7 && !strncmp(s, "default", 7)) { m = moe_flags_default(); continue; }
        if (n == 3 && !strncmp(s, "all", 3)) {
            m = 0;
            for (int i = 0; i < MOE_FLAG_COUNT; i++) if (!FLAGS[i].test_only && !FLAGS[i].numerics) m |= 1ull << i;
            continue;
        }
        int on = 1;
        if (*s == '+' || *s == '-') { on = *s == '+'; s++; n--; }
        int id = flag_by_name(s, n);
        if (id < 0)
            return moe_errf(err, errlen, MOE_EINVAL,
                            "flags: unknown flag '%.*s' in \"%s\" (see `moefast flags`)", (int)n, s, spec);
        if (on) m |= 1ull << id; else m &= ~(1ull << id);
    }
    *out = m;
    return MOE_OK;
}

void moe_flags_format(uint64_t mask, char *buf, size_t len) {
    size_t o = 0;
    if (len) buf[0] = 0;
    if (!mask) { snprintf(buf, len, "none"); return; }
    for (int i = 0; i < MOE_FLAG_COUNT && o < len; i++) {
        if (!((mask >> i) & 1)) continue;
        int w = snprintf(buf + o, len - o, "%s+%s", o ? "," : "", FLAGS[i].name);
        if (w < 0) break;
        o += (size_t)w;
    }
}
