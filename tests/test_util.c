/* test_util.c — the small pieces: moe_expf accuracy, half/bfloat conversion,
 * static partitioning, flag specs, the sampler, the aligned allocator. */
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "base/flags.h"
#include "moefast.h"
#include "base/threads.h"
#include "base/util.h"

static void test_expf(void) {
    double worst = 0;
    int n = 0;
    for (float x = -87.0f; x < 88.7f; x += 0.00173f, n++) {
        double ref = exp((double)x);
        float a = moe_expf(x);
        float fr = (float)ref;
        double ulp = fabs((double)a - ref) / (double)(nextafterf(fr, INFINITY) - fr);
        if (ulp > worst) worst = ulp;
    }
    CHECK_MSG(worst <= 2.0, "moe_expf: max error %.3f ulp over %d points", worst, n);
    CHECK(moe_expf(0.0f) == 1.0f);
    CHECK(moe_expf(-1000.0f) == 0.0f);
    CHECK(isinf(moe_expf(1000.0f)) && moe_expf(1000.0f) > 0);
    CHECK(isnan(moe_expf(NAN)));
    CHECK(moe_expf(-INFINITY) == 0.0f);
    CHECK(moe_expf(88.72f) > 3.3e38f);
}

static void test_half(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = moe_f16_to_f32((uint16_t)h);
        uint16_t back = moe_f32_to_f16(f);
        bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
        if (nan ? !isnan(f) : back != h) bad++;
    }
    CHECK_MSG(bad == 0, "%d half values do not round-trip", bad);
    CHECK(moe_f32_to_f16(65520.0f) == 0x7c00);                 /* rounds to inf */
    CHECK(moe_f32_to_f16(65519.0f) == 0x7bff);
    CHECK(moe_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);         /* tie -> even */
    CHECK(moe_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);
    CHECK(moe_f32_to_f16(0x1p-25f) == 0x0000);                /* half of the smallest subnormal: even -> 0 */
    CHECK(moe_f32_to_f16(0x1.8p-25f) == 0x0001);
    CHECK(moe_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(moe_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(moe_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);         /* tie -> even */
    CHECK(moe_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);
    CHECK(isnan(moe_bf16_to_f32(moe_f32_to_bf16(NAN))));
}

static void test_split(void) {
    for (int64_t n = 0; n < 70; n++)
        for (int nth = 1; nth <= 7; nth++)
            for (int64_t align = 1; align <= 16; align *= 4) {
                int64_t next = 0;
                for (int ith = 0; ith < nth; ith++) {
                    int64_t b, e;
                    moe_split(n, ith, nth, align, &b, &e);
                    CHECK(b == next && e >= b && e <= n);
                    next = e;
                }
                CHECK(next == n);
            }
}

static void test_flags(void) {
    char err[256];
    uint64_t m;
    CHECK(moe_flags_parse("none", moe_flags_default(), &m, err, sizeof err) == MOE_OK && m == 0);
    CHECK(moe_flags_parse(NULL, 5, &m, err, sizeof err) == MOE_OK && m == 5);
    CHECK(moe_flags_parse("-simd", moe_flags_default(), &m, err, sizeof err) == MOE_OK &&
          !moe_flag_on(m, MOE_FLAG_SIMD) && moe_flag_on(m, MOE_FLAG_THREADS));
    CHECK(moe_flags_parse("none,+gemm_batch", moe_flags_default(), &m, err, sizeof err) == MOE_OK &&
          m == (1ull << MOE_FLAG_GEMM_BATCH));
    CHECK(moe_flags_parse("all", 0, &m, err, sizeof err) == MOE_OK && !moe_flag_on(m, MOE_FLAG_TEST_PERTURB));
    CHECK(moe_flags_parse("+test_perturb", 0, &m, err, sizeof err) == MOE_OK && moe_flag_on(m, MOE_FLAG_TEST_PERTURB));
    CHECK(moe_flags_parse("+nosuch", 0, &m, err, sizeof err) == MOE_EINVAL);
    CHECK_STR_CONTAINS(err, "unknown flag 'nosuch'");
    char buf[256];
    moe_flags_format(0, buf, sizeof buf);
    CHECK(!strcmp(buf, "none"));
    moe_flags_format(moe_flags_default(), buf, sizeof buf);
    uint64_t back;
    CHECK(moe_flags_parse(buf, 0, &back, err, sizeof err) == MOE_OK && back == moe_flags_default());
}

static void test_sampler(void) {
    char err[256];
    float lg[6] = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f, 2.9f};
    CHECK(moe_argmax(lg, 6) == 1);                            /* ties -> lowest id */
    moe_sampler *s = NULL;
    moe_sampler_params p = {0};
    CHECK(moe_sampler_new(&p, 6, &s, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_sample(s, lg) == 1);
    moe_sampler_free(s);
    moe_sampler_params k1 = {.temp = 1.0f, .top_k = 1, .top_p = 1.0f, .seed = 3};
    CHECK(moe_sampler_new(&k1, 6, &s, err, sizeof err) == MOE_OK);
    for (int i = 0; i < 20; i++) CHECK(moe_sampler_sample(s, lg) == 1);
    moe_sampler_free(s);
    /* same seed -> same sequence; frequencies follow the softmax */
    moe_sampler_params t1 = {.temp = 1.0f, .top_p = 1.0f, .seed = 42};
    moe_sampler *a = NULL, *b = NULL;
    CHECK(moe_sampler_new(&t1, 6, &a, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_new(&t1, 6, &b, err, sizeof err) == MOE_OK);
    int counts[6] = {0}, same = 1;
    for (int i = 0; i < 20000; i++) {
        int x = moe_sampler_sample(a, lg), y = moe_sampler_sample(b, lg);
        same &= x == y;
        counts[x]++;
    }
    CHECK(same);
    double z = 0;
    for (int i = 0; i < 6; i++) z += exp(lg[i]);
    for (int i = 0; i < 6; i++) {
        double want = 20000 * exp(lg[i]) / z;
        CHECK_MSG(fabs(counts[i] - want) < 5 * sqrt(want + 1) + 5, "token %d drawn %d times, expected %.0f", i,
                  counts[i], want);
    }
    moe_sampler_free(a);
    moe_sampler_free(b);
    /* min_p keeps only tokens with p >= min_p * p_max; top_p keeps the nucleus */
    moe_sampler_params mp = {.temp = 1.0f, .top_p = 1.0f, .min_p = 0.5f, .seed = 1};
    CHECK(moe_sampler_new(&mp, 6, &s, err, sizeof err) == MOE_OK);
    for (int i = 0; i < 200; i++) {
        int x = moe_sampler_sample(s, lg);
        CHECK(x == 1 || x == 2 || x == 5);
    }
    moe_sampler_free(s);
    moe_sampler_params tp = {.temp = 1.0f, .top_p = 0.3f, .seed = 1};
    CHECK(moe_sampler_new(&tp, 6, &s, err, sizeof err) == MOE_OK);
    for (int i = 0; i < 200; i++) CHECK(moe_sampler_sample(s, lg) == 1);
    moe_sampler_free(s);
    moe_sampler_params bad = {.temp = 1.0f, .top_p = -0.5f};
    CHECK(moe_sampler_new(&bad, 6, &s, err, sizeof err) == MOE_EINVAL);
    moe_sampler_params badm = {.temp = 1.0f, .top_p = 1.0f, .min_p = 1.0f};
    CHECK(moe_sampler_new(&badm, 6, &s, err, sizeof err) == MOE_EINVAL);
    CHECK(moe_sampler_new(&p, 0, &s, err, sizeof err) == MOE_EINVAL);
}

/* Penalties and logit bias: OpenAI's formula on hand-computed logits, greedy
 * and seeded paths, the top-k path falling back to full logits, bad values. */
static void test_sampler_penalties(void) {
    char err[256];
    const float lg[6] = {0.0f, 3.0f, 2.5f, -1.0f, 0.5f, 2.9f};
    moe_sampler *s = NULL;
    moe_sampler_params g = {0};
    CHECK(moe_sampler_new(&g, 6, &s, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_topk_need(s) == 1);
    /* presence 0.2: token 1 (3.0) drops to 2.8 < 2.9 once it was generated */
    CHECK(moe_sampler_set_penalties(s, 0.2f, 0.0f, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_topk_need(s) == 0);
    CHECK(moe_sampler_sample(s, lg) == 1);
    moe_sampler_accept(s, 1);
    CHECK(moe_sampler_sample(s, lg) == 5);
    moe_sampler_accept(s, 5);                 /* 5: 2.7, 1: 2.8 -> 1 again */
    CHECK(moe_sampler_sample(s, lg) == 1);
    /* frequency 0.3 (presence 0): 1 after one use: 2.7 < 2.9 -> 5; after 5 once: 2.6 vs 2.7 -> 1 */
    CHECK(moe_sampler_set_penalties(s, 0.0f, 0.3f, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_sample(s, lg) == 1);   /* counts so far: 1 once, 5 once: 2.7 vs 2.6 */
    moe_sampler_accept(s, 1);                 /* 1 twice: 2.4; 5: 2.6; 2: 2.5 */
    CHECK(moe_sampler_sample(s, lg) == 5);
    /* the mask sees the adjusted logits too */
    const uint8_t allow[6] = {1, 1, 1, 0, 0, 0};
    CHECK(moe_sampler_sample_masked(s, lg, allow) == 2);
    /* the top-k path with the penalties set: the given candidates re-ranked */
    const int32_t ids[3] = {1, 5, 2};
    const float vals[3] = {3.0f, 2.9f, 2.5f};
    CHECK(moe_sampler_sample_topk(s, ids, vals, 3) == 5);
    /* a logit bias: -100 bans the best, +5 lifts the worst */
    const int32_t bi[2] = {5, 3};
    const float bv[2] = {-100.0f, 5.0f};
    CHECK(moe_sampler_set_logit_bias(s, bi, bv, 2, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_sample(s, lg) == 3);
    CHECK(moe_sampler_set_logit_bias(s, NULL, NULL, 0, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_set_penalties(s, 0.0f, 0.0f, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_topk_need(s) == 1 && moe_sampler_sample(s, lg) == 1);
    /* bad values: refused with the value named, nothing changed */
    CHECK(moe_sampler_set_penalties(s, 2.5f, 0.0f, err, sizeof err) == MOE_EINVAL && strstr(err, "2.5"));
    CHECK(moe_sampler_set_penalties(s, 0.0f, NAN, err, sizeof err) == MOE_EINVAL);
    const int32_t oob[1] = {6};
    const float one[1] = {1.0f}, big[1] = {101.0f};
    CHECK(moe_sampler_set_logit_bias(s, oob, one, 1, err, sizeof err) == MOE_EINVAL && strstr(err, "token id 6"));
    CHECK(moe_sampler_set_logit_bias(s, bi, big, 1, err, sizeof err) == MOE_EINVAL);
    CHECK(moe_sampler_topk_need(s) == 1);
    moe_sampler_free(s);
    /* seeded sampling: the same seed and the same accepted tokens draw the same */
    moe_sampler_params t1 = {.temp = 1.0f, .top_p = 1.0f, .seed = 9};
    moe_sampler *a = NULL, *b = NULL;
    CHECK(moe_sampler_new(&t1, 6, &a, err, sizeof err) == MOE_OK && moe_sampler_new(&t1, 6, &b, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_set_penalties(a, 1.5f, 0.5f, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_set_penalties(b, 1.5f, 0.5f, err, sizeof err) == MOE_OK);
    int seen[6] = {0};
    for (int i = 0; i < 50; i++) {
        const int x = moe_sampler_sample(a, lg), y = moe_sampler_sample(b, lg);
        CHECK(x == y && x >= 0 && x < 6);
        if (x >= 0 && x < 6) seen[x]++;
        moe_sampler_accept(a, x);
        moe_sampler_accept(b, y);
    }
    /* strong penalties spread the draws: the best logit cannot take them all */
    CHECK(seen[1] < 40);
    moe_sampler_free(a);
    moe_sampler_free(b);
}

/* llama.cpp's repeat penalty (engine.h): logit / p above 0, logit * p at or
 * below, for the tokens in the window of the last N; the window's boundary
 * (the context, then the accepted tokens, oldest out first); the order bias
 * -> repeat -> presence; the context counting for the window only. */
static void test_sampler_repeat(void) {
    char err[256];
    /*                 0     1 (A) 2 (B)  3      4     5 */
    const float lg[6] = {0.0f, 3.0f, 2.8f, -1.0f, 0.5f, -0.6f};
    moe_sampler *s = NULL;
    moe_sampler_params g = {0};
    CHECK(moe_sampler_new(&g, 6, &s, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_set_repeat_penalty(s, 2.0f, 3, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_topk_need(s) == 0);
    CHECK(moe_sampler_sample(s, lg) == 1);             /* an empty window */
    const int32_t ctx[3] = {1, 0, 0};
    moe_sampler_accept_context(s, ctx, 3);             /* window 1 0 0: A 1.5 < B 2.8 */
    CHECK(moe_sampler_sample(s, lg) == 2);
    moe_sampler_accept(s, 0);                          /* window 0 0 0: A has left */
    CHECK(moe_sampler_sample(s, lg) == 1);
    moe_sampler_accept(s, 1);                          /* window 0 0 1 */
    CHECK(moe_sampler_sample(s, lg) == 2);
    /* at or below 0 the logit is multiplied: 5 (-0.6) in the window is -1.2 < 3's -1.0 */
    const uint8_t neg[6] = {0, 0, 0, 1, 0, 1};
    CHECK(moe_sampler_sample_masked(s, lg, neg) == 5);
    moe_sampler_accept(s, 5);                          /* window 0 1 5 */
    CHECK(moe_sampler_sample_masked(s, lg, neg) == 3);
    /* the top-k path re-ranks the given candidates the same way */
    const int32_t ids[2] = {1, 2};
    const float vals[2] = {3.0f, 2.8f};
    CHECK(moe_sampler_sample_topk(s, ids, vals, 2) == 2);
    /* a longer context than the window: only its last N count */
    const int32_t ctx2[5] = {1, 1, 4, 4, 4};
    CHECK(moe_sampler_set_repeat_penalty(s, 2.0f, 3, err, sizeof err) == MOE_OK);   /* empties the window */
    CHECK(moe_sampler_sample(s, lg) == 1);
    moe_sampler_accept_context(s, ctx2, 5);
    CHECK(moe_sampler_sample(s, lg) == 1);
    /* off: 1 or a window of 0 */
    moe_sampler_accept(s, 1);
    CHECK(moe_sampler_sample(s, lg) == 2);
    CHECK(moe_sampler_set_repeat_penalty(s, 1.0f, 64, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_topk_need(s) == 1);
    moe_sampler_accept(s, 1);
    CHECK(moe_sampler_sample(s, lg) == 1);
    CHECK(moe_sampler_set_repeat_penalty(s, 2.0f, 0, err, sizeof err) == MOE_OK && moe_sampler_topk_need(s) == 1);
    /* bad values: refused, the value named */
    CHECK(moe_sampler_set_repeat_penalty(s, 0.0f, 64, err, sizeof err) == MOE_EINVAL && strstr(err, "repeat penalty 0"));
    CHECK(moe_sampler_set_repeat_penalty(s, -1.0f, 64, err, sizeof err) == MOE_EINVAL);
    CHECK(moe_sampler_set_repeat_penalty(s, NAN, 64, err, sizeof err) == MOE_EINVAL);
    CHECK(moe_sampler_set_repeat_penalty(s, INFINITY, 64, err, sizeof err) == MOE_EINVAL);
    CHECK(moe_sampler_set_repeat_penalty(s, 1.1f, -1, err, sizeof err) == MOE_EINVAL && strstr(err, "window -1"));
    CHECK(moe_sampler_set_repeat_penalty(s, 1.1f, MOE_SAMPLER_MAX_REPEAT_WINDOW + 1, err, sizeof err) == MOE_EINVAL);
    CHECK(moe_sampler_set_repeat_penalty(NULL, 1.1f, 4, err, sizeof err) == MOE_EINVAL);
    moe_sampler_free(s);

    /* the order: bias, then repeat, then presence. 3 (-1.0) biased +2.2 and
     * in the window: (-1 + 2.2) / 2 = 0.6, minus presence 0.15 = 0.45 < 4's
     * 0.5 (repeat first: 0.2; presence before repeat: 0.525) */
    CHECK(moe_sampler_new(&g, 6, &s, err, sizeof err) == MOE_OK);
    const int32_t b3[1] = {3};
    const float b22[1] = {2.2f};
    const uint8_t m34[6] = {0, 0, 0, 1, 1, 0};
    CHECK(moe_sampler_set_logit_bias(s, b3, b22, 1, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_set_repeat_penalty(s, 2.0f, 4, err, sizeof err) == MOE_OK);
    moe_sampler_accept(s, 3);
    CHECK(moe_sampler_sample_masked(s, lg, m34) == 3);   /* 0.6 > 0.5 */
    CHECK(moe_sampler_set_penalties(s, 0.15f, 0.0f, err, sizeof err) == MOE_OK);
    moe_sampler_accept(s, 3);                            /* counted now */
    CHECK(moe_sampler_sample_masked(s, lg, m34) == 4);
    moe_sampler_free(s);

    /* the context fills the window, not the presence counts: A (3.0) / 1.05
     * = 2.857 > B 2.8; once A is generated, presence 0.5 takes it to 2.357 */
    CHECK(moe_sampler_new(&g, 6, &s, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_set_penalties(s, 0.5f, 0.0f, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_set_repeat_penalty(s, 1.05f, 4, err, sizeof err) == MOE_OK);
    const int32_t a1[1] = {1};
    moe_sampler_accept_context(s, a1, 1);
    CHECK(moe_sampler_sample(s, lg) == 1);
    moe_sampler_accept(s, 1);
    CHECK(moe_sampler_sample(s, lg) == 2);
    moe_sampler_free(s);
}

/* Allocation: a neutral setting allocates nothing (no adjusted-logits
 * buffer for penalties of 0), and sampling and accepting never allocate
 * with every adjustment on (the decode hot path). Counted in the sanitizer
 * build only (check.h). */
static void test_sampler_allocs(void) {
    char err[256];
    enum { NV = 4096 };
    static float lg[NV];
    for (int i = 0; i < NV; i++) lg[i] = (float)((i * 7919) % 1000) / 100.0f - 5.0f;
    moe_sampler *s = NULL;
    moe_sampler_params p = {.temp = 0.8f, .top_k = 40, .top_p = 0.9f, .seed = 3};
    CHECK(moe_sampler_new(&p, NV, &s, err, sizeof err) == MOE_OK);
    long a0 = check_allocs();
    CHECK(moe_sampler_set_penalties(s, 0.0f, 0.0f, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_set_repeat_penalty(s, 1.0f, 64, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_set_repeat_penalty(s, 1.3f, 0, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_set_logit_bias(s, NULL, NULL, 0, err, sizeof err) == MOE_OK);
    CHECK_MSG(check_allocs() == a0, "neutral settings allocated %ld times", check_allocs() - a0);
    const int32_t bi[2] = {7, 9};
    const float bv[2] = {3.0f, -2.0f};
    CHECK(moe_sampler_set_penalties(s, 0.3f, 0.2f, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_set_repeat_penalty(s, 1.3f, 16, err, sizeof err) == MOE_OK);
    CHECK(moe_sampler_set_logit_bias(s, bi, bv, 2, err, sizeof err) == MOE_OK);
    static uint8_t allow[NV];
    for (int i = 0; i < NV; i++) allow[i] = i % 3 != 0;
    const int32_t ctx[4] = {1, 2, 3, 4};
    a0 = check_allocs();
    moe_sampler_accept_context(s, ctx, 4);
    for (int i = 0; i < 50; i++) {
        int32_t id = i % 2 ? moe_sampler_sample(s, lg) : moe_sampler_sample_masked(s, lg, allow);
        CHECK(id >= 0 && id < NV);
        moe_sampler_accept(s, id);
    }
    CHECK_MSG(check_allocs() == a0, "sampling with every adjustment allocated %ld times", check_allocs() - a0);
    moe_sampler_free(s);
}

/* moe_calloc_aligned: the asked placement past a 64-byte boundary, zeroed,
 * every byte writable (ASan checks the bounds), NULL on overflow. */
static void test_aligned_alloc(void) {
    static const size_t sizes[] = {1, 3, 64, 100, 4096, 1 << 20};
    for (size_t o = 0; o < 64; o += 16)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            unsigned char *p = moe_calloc_aligned(sizes[i], 1, o);
            CHECK_MSG(p != NULL, "%zu bytes at offset %zu: NULL", sizes[i], o);
            if (!p) continue;
            CHECK_MSG((uintptr_t)p % 64 == o, "%zu bytes at offset %zu: address %% 64 = %zu", sizes[i], o,
                      (size_t)((uintptr_t)p % 64));
            size_t nz = 0;
            for (size_t b = 0; b < sizes[i]; b++) nz += p[b] != 0;
            CHECK_MSG(nz == 0, "%zu bytes at offset %zu: %zu not zero", sizes[i], o, nz);
            memset(p, 0xA5, sizes[i]);
            moe_free_aligned(p);
        }
    float *f = moe_calloc_aligned(1000, sizeof(float), 0);
    CHECK(f != NULL && (uintptr_t)f % 64 == 0);
    moe_free_aligned(f);
    CHECK(moe_calloc_aligned(SIZE_MAX / 2, 4, 0) == NULL);
    CHECK(moe_calloc_aligned(SIZE_MAX - 64, 1, 0) == NULL);
    moe_free_aligned(NULL);
}

int main(void) {
    test_expf();
    test_aligned_alloc();
    test_half();
    test_split();
    test_flags();
    test_sampler();
    test_sampler_penalties();
    test_sampler_repeat();
    check_alloc_guard_install();
    test_sampler_allocs();
    return check_report("test_util");
}
