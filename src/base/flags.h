/* flags.h — the registry of named speed optimisations.
 *
 * Every optimisation that has a plain reference path sits behind one flag
 * here, so it can be switched off, bisected and checked (`moefast flags`).
 * A flag set is a bit mask. Spec syntax (CLI --flags, MOEFAST_FLAGS):
 *   "none"            all flags off: the plain reference path
 *   "default"         the default set
 *   "all"             every non-test flag on
 *   "+name,-name,..." start from the default set (or from the set already
 *                     named earlier in the spec: "none,+gemm_batch") and toggle.
 * Test-only flags (perturb, slow) deliberately change results or timing;
 * they exist to prove the instruments can fail and are never on by default.
 * kv_tq_k and kv_tq_v are test-only and numerics: they split kv_tq's error
 * into its keys' and its values' part for a measurement (docs/KV_TQ.md).
 * Numerics flags (act_q8, kv_f16, kv_q8, kv_tq, kv_tq_small) select a different arithmetic, so they change the
 * logits on purpose: never on by default, not part of "all", and kept by the
 * differential twin (which checks the speed flags *within* a numerics). A
 * trace records the flags it was made with; gate a numerics flag's run
 * against a trace recorded with it. */
#ifndef MOE_FLAGS_H
#define MOE_FLAGS_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef enum moe_flag {
    MOE_FLAG_SIMD = 0,        /* SIMD kernels (off: scalar reference kernels) */
    MOE_FLAG_THREADS,         /* use the worker pool (off: one thread) */
    MOE_FLAG_GEMM_BATCH,      /* prefill: group tokens per expert, one GEMM per expert */
    MOE_FLAG_FUSED_GATE_UP,   /* experts: gate and up rows in one pass, SiLU fused */
    MOE_FLAG_READAHEAD,       /* load: ask the kernel to read the weights ahead (madvise WILLNEED) */
    MOE_FLAG_REPACK,          /* load: repack block-format matrices into the x4 layout */
    MOE_FLAG_PARALLEL_GLUE,   /* the small steps between matrix products run in the parallel phases */
    MOE_FLAG_GEMM_WIDE,       /* prefill GEMM: dequantize a 4-row group once per token block (quant_internal.h) */
    MOE_FLAG_KEY_STREAM,      /* decode scores over the FP32 cache read key row by key row (attn.h scores_stream) */
    MOE_FLAG_ALIGNED_BUFFERS, /* session buffers start on a 64-byte cache line (off: 16 bytes past one) */
    MOE_FLAG_VALUE_PREFETCH,  /* decode over the kv_q8 cache: value rows prefetched ahead (attn.h accum_q8_stream) */
    MOE_FLAG_KV_PREFETCH,     /* decode over the F16 cache: key and value rows prefetched ahead (attn.h) */
    MOE_FLAG_LM_SCREEN,       /* top-k / argmax outputs: the certified lm-head screen (model/screen.h) */
    MOE_FLAG_ACT_Q8,          /* NUMERICS: 8-bit activation blocks, integer dot products (act8_ref.c) */
    MOE_FLAG_KV_F16,          /* NUMERICS: KV cache stored as IEEE half */
    MOE_FLAG_KV_Q8,           /* NUMERICS: KV cache stored as 8-bit blocks, integer scores (attn.h) */
    MOE_FLAG_KV_TQ,           /* NUMERICS: KV cache rotated, Lloyd-Max coded: keys 5 bits, values 4 (kv_tq.h) */
    MOE_FLAG_KV_TQ_SMALL,     /* NUMERICS: the same, keys 4 bits, values 3 */
    MOE_FLAG_KV_TQ_K,         /* MEASUREMENT, NUMERICS: with kv_tq(_small), only the keys coded, values FP32 */
    MOE_FLAG_KV_TQ_V,         /* MEASUREMENT, NUMERICS: with kv_tq(_small), only the values coded, keys FP32 */
    MOE_FLAG_TEST_PERTURB,    /* TEST ONLY: from position 20 on, reverse the last layer's expert weights */
    MOE_FLAG_TEST_SLOW,       /* TEST ONLY: sleep 2 ms per token forwarded */
    MOE_FLAG_TEST_SCREEN_SHRINK, /* TEST ONLY: the lm-head screen's bounds divided by 4 (unsound) */
    MOE_FLAG_COUNT
} moe_flag;

typedef struct moe_flag_info {
    const char *name;
    const char *desc;
    bool default_on;
    bool test_only;
    bool numerics;           /* changes the arithmetic (see above) */
    /* NULL: the flag is read only while forwarding, so a live session may
     * switch it between forward calls (moe_session_set_flags). Otherwise why
     * it cannot change (it shaped something built at load or at session
     * creation); whoever adds a flag must decide which it is. */
    const char *fixed;
    /* Fixed only when a session is created (the KV cache format): a sibling
     * session (moe_session_new_sibling) may differ in it. */
    bool per_session;
} moe_flag_info;

const moe_flag_info *moe_flag_get(int id); /* NULL when out of range */
uint64_t moe_flags_default(void);
/* The numerics flags of a mask (what the differential twin keeps). */
uint64_t moe_flags_numerics(uint64_t mask);
/* Parses spec on top of base; MOE_OK or MOE_EINVAL naming the unknown flag. */
int moe_flags_parse(const char *spec, uint64_t base, uint64_t *out, char *err, size_t errlen);
/* "+a,+b,-c" style description of a mask relative to "none" (all on flags listed). */
void moe_flags_format(uint64_t mask, char *buf, size_t len);
static inline bool moe_flag_on(uint64_t mask, moe_flag f) { return (mask >> f) & 1u; }

#endif
