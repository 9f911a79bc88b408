/* bench_attn.c — attention kernel times per (token, KV head) item (prints,
 * never asserts).
 *
 * One item is what a decode step does per KV head and layer: the scores of
 * the G query heads against every visible key, the softmax, the weighted sum
 * of the values. Per KV cache format (F32, kv_f16, kv_q8, kv_tq; "f32/ks": the F32
 * cache in decode's order, flag key_stream: scores_stream, accum_stream; "kv_f16/pf":
 * the F16 cache with decode's prefetches, flag kv_prefetch) and ISA level this
 * times the three parts separately (microseconds per item, one thread, the
 * median of 7 repetitions of 400 items) in two shapes: qwen3moe's (G = 4
 * heads, 576 keys: context 576) and laguna's sliding layers (G = 6, 512
 * keys), head size 128, with the K/V of one head (in L2) and cycled over 256
 * heads (from memory, like a decode step's 64 items). The kv_q8 rows include
 * quantizing the query heads (scores) as the forward pass does; the FP32 and
 * kv_f16 softmax is the forward pass's (max and exp by the kernels, the
 * key-order sums by moe_attn_row_sums), kv_q8's its softmax_q8 kernel.
 * The kv_tq rows (K5/V4) include rotating the query heads (scores) and
 * rotating each head's sum back (v sum) with the ISA's rotations, as
 * attn_item_tq does.
 * Arguments, if any: the ISA levels to run (scalar, avx2, avx512).
 * --keys N (first): instead, decode at depth N: qwen3moe-bench's items (G = 4,
 * head size 128) over N keys, cycled over 64 heads (its 16 layers x 4 KV
 * heads: one decode step's items, all from memory), 40 items a repetition.
 * --store (first): instead, the cache store of one item per ISA level: a key
 * and a value row of head size 128 coded (kv_tq: K5 + V4 in one encode2 call,
 * as attn_prep does, the sign words included) or kv_q8's (quantize_act8 and the block stores of
 * both), over 1024 random rows; ns per item, the median of 7 x 16 passes.
 * --prefill N (first): instead, a prefill's attention at depth N, as the
 * forward pass calls it on qwen3moe-bench (G = 4, head size 128): per block of
 * 4 tokens (positions N-4 .. N-1, one head's cache), kv_q8 runs each token's
 * item (quantize, scores_q8, softmax_q8, accum_q8), kv_tq one scores_tq call
 * for the block's 16 rows, each row's softmax, one accum_tq_rows and the
 * rotations; us per (token, KV head) item, the median of 7 x 40 blocks. */
#include "attention/attn.h"
#include "attention/kv_tq.h"
#include "quant/quant.h"
#include "base/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

#define REPS 7
#define D 128
static int ITEMS = 400;
static int CP = 640;      /* positions per head (a multiple of 16) */
static int NHEADS = 256;  /* heads cycled in the "memory" rows: 256 x 2 x 82..328 KB */

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* f32/ks: the FP32 cache by scores_stream and accum_stream (flag key_stream, decode) */
/* kv_f16/pf: the F16 cache by scores_h_prefetch and accum_h_prefetch (flag
 * kv_prefetch, decode), with the forward pass's prefetch of the first value
 * rows before the softmax */
enum { FMT_F32, FMT_F32S, FMT_F16, FMT_F16P, FMT_Q8, FMT_TQ, FMT_COUNT };
static const char *FMT_NAME[FMT_COUNT] = {"f32", "f32/ks", "kv_f16", "kv_f16/pf", "kv_q8", "kv_tq"};
#define IS_F16(fmt) ((fmt) == FMT_F16 || (fmt) == FMT_F16P)

typedef struct {
    void *k, *v;                 /* per head: f32/f16 [CP][D]; q8: key tiles / value rows */
    uint16_t *kd, *vd;           /* q8 scales [D/32][CP] per head */
    size_t kbytes, vbytes;       /* per head */
} cache;

static int cache_fill(cache *c, int fmt, int nheads, moe_rng *r) {
    const size_t el = fmt == FMT_F32 || fmt == FMT_F32S ? 4 : IS_F16(fmt) ? 2 : 1;
    c->kbytes = c->vbytes = (size_t)CP * D * el;
    if (fmt == FMT_TQ) c->kbytes = CP * moe_tq_row_bytes(D, 5), c->vbytes = CP * moe_tq_row_bytes(D, 4);
    /* on cache lines, as a session's buffers */
    c->k = moe_calloc_aligned(c->kbytes, (size_t)nheads, 0);
    c->v = moe_calloc_aligned(c->vbytes, (size_t)nheads, 0);
    uint64_t sg[D / 64];
    float tmp[D];
    moe_tq_signs(0, 0, D, sg);
    c->kd = fmt == FMT_Q8 ? moe_calloc_aligned(sizeof(uint16_t) * (D / 32) * CP, (size_t)nheads, 0) : NULL;
    c->vd = fmt == FMT_Q8 ? moe_calloc_aligned(sizeof(uint16_t) * (D / 32) * CP, (size_t)nheads, 0) : NULL;
    if (!c->k || !c->v || (fmt == FMT_Q8 && (!c->kd || !c->vd))) return -1;
    uint8_t a8[A8_GROUP_BYTES];
    float x[D];
    for (int h = 0; h < nheads; h++)
        for (int j = 0; j < CP; j++)
            for (int kv = 0; kv < 2; kv++) {
                for (int d = 0; d < D; d++) x[d] = (float)moe_rng_normal(r);
                uint8_t *base = (uint8_t *)(kv ? c->v : c->k) + (size_t)h * (kv ? c->vbytes : c->kbytes);
                if (fmt == FMT_F32 || fmt == FMT_F32S) memcpy((float *)base + (size_t)j * D, x, sizeof x);
                else if (fmt == FMT_TQ)
                    moe_tq_encode(x, sg, D, 5 - kv, tmp, base + (size_t)j * moe_tq_row_bytes(D, 5 - kv));
                else if (IS_F16(fmt))
                    for (int d = 0; d < D; d++) ((uint16_t *)base)[(size_t)j * D + d] = moe_f32_to_f16(x[d]);
                else {
                    moe_quantize_act8(x, a8, D);
                    uint16_t *sc = (kv ? c->vd : c->kd) + (size_t)h * (D / 32) * CP;
                    if (kv) moe_kv8_store_value(a8, D, (int8_t *)base, sc, CP, j);
                    else moe_kv8_store_key(a8, D, (int8_t *)base, sc, CP, j);
                }
            }
    return 0;
}

static void cache_free(cache *c) {
    moe_free_aligned(c->k);
    moe_free_aligned(c->v);
    moe_free_aligned(c->kd);
    moe_free_aligned(c->vd);
}

/* The FP32 / kv_f16 softmax of the forward pass over G heads: max and exp
 * by the kernels, key-order sums by moe_attn_row_sums. */
static float softmax_fwd(const moe_attn_kernels *a, float *sc, size_t stride, int G, int n) {
    float sums[16], s = 0.0f;
    for (int g = 0; g < G; g++) {
        float *r = sc + (size_t)g * stride;
        a->exp_shift(r, n, a->max_f32(r, n));
    }
    moe_attn_row_sums(sc, stride, G, n, sums);
    for (int g = 0; g < G; g++) s += sums[g];
    return s;
}

static void run(const moe_kernels *k, const moe_attn_kernels *a, int fmt, const cache *c, int nheads, int G, int nk,
                int items, const float *q, float *sc, float *wb, float *o, uint8_t *qa, double med[3]) {
    const size_t ab = (size_t)moe_act8_row_bytes(D);
    const moe_tq_kernels *tk = moe_tq_for(a);
    float qr[8 * D];
    double t[3][REPS];
    volatile float sink = 0;
    for (int rep = 0; rep < REPS; rep++) {
        double part[3] = {0, 0, 0};
        for (int it = 0; it < items; it++) {
            const int h = it % nheads;
            const uint8_t *kb = (const uint8_t *)c->k + (size_t)h * c->kbytes, *vb = (const uint8_t *)c->v + (size_t)h * c->vbytes;
            double t0 = now_s();
            if (fmt == FMT_TQ) {
                uint64_t sg[D / 64];
                moe_tq_signs(0, 0, D, sg);
                for (int g = 0; g < G; g++) moe_tq_rotate_k(tk, q + (size_t)g * D, sg, D, qr + (size_t)g * D);
                tk->scores_tq(qr, D, G, kb, nk, D, 5, 0.088f, sc, CP);
            } else if (fmt == FMT_Q8) {
                for (int g = 0; g < G; g++) k->quantize_act8(q + (size_t)g * D, qa + (size_t)g * ab, D);
                a->scores_q8(qa, ab, G, (const int8_t *)kb, c->kd + (size_t)h * (D / 32) * CP, CP, 0, nk, D, 0.088f, sc, CP);
            } else if (IS_F16(fmt)) {
                (fmt == FMT_F16P ? a->scores_h_prefetch : a->scores_h)(q, D, G, (const uint16_t *)kb, D, nk, D, 0.088f,
                                                                      sc, CP);
                if (fmt == FMT_F16P)
                    moe_prefetch_bytes(vb, (size_t)(nk < MOE_KV_PREFETCH_VALUES ? nk : MOE_KV_PREFETCH_VALUES) * D * 2);
            } else {
                (fmt == FMT_F32S ? a->scores_stream : a->scores)(q, D, G, (const float *)kb, D, nk, D, 0.088f, sc, CP);
            }
            double t1 = now_s();
            float s = 0;
            if (fmt == FMT_Q8)
                for (int g = 0; g < G; g++) s += a->softmax_q8(sc + (size_t)g * CP, nk);
            else
                s = softmax_fwd(a, sc, CP, G, nk);
            double t2 = now_s();
            if (fmt == FMT_TQ) {
                uint64_t sg[D / 64];
                moe_tq_signs(0, 0, D, sg);
                tk->accum_tq(sc, CP, G, vb, nk, D, 4, o, D);
                for (int g = 0; g < G; g++) moe_tq_unrotate_k(tk, o + (size_t)g * D, sg, D);
            } else if (fmt == FMT_Q8)
                a->accum_q8(sc, CP, G, (const int8_t *)vb, c->vd + (size_t)h * (D / 32) * CP, CP, 0, nk, D, wb, o, D);
            else if (IS_F16(fmt))
                (fmt == FMT_F16P ? a->accum_h_prefetch : a->accum_h)(sc, CP, G, (const uint16_t *)vb, D, nk, D, o, D);
            else
                (fmt == FMT_F32S ? a->accum_stream : a->accum)(sc, CP, G, (const float *)vb, D, nk, D, o, D);
            double t3 = now_s();
            sink += s + o[0];
            part[0] += t1 - t0;
            part[1] += t2 - t1;
            part[2] += t3 - t2;
        }
        for (int p = 0; p < 3; p++) t[p][rep] = part[p] / items * 1e6;
    }
    for (int p = 0; p < 3; p++) {
        qsort(t[p], REPS, sizeof(double), cmp_d);
        med[p] = t[p][REPS / 2];
    }
    (void)sink;
}

/* --store: ns per item of the cache store (the header) */
static int store_bench(void) {
    enum { NR = 1024, PASSES = 16 };
    moe_rng r;
    moe_rng_seed(&r, 5);
    float *x = malloc(sizeof(float) * NR * D), tmp[2 * D];
    uint8_t *rows = malloc((size_t)NR * 2 * moe_tq_row_bytes(D, 5)), *xa = malloc((size_t)moe_act8_row_bytes(D));
    int8_t *k8 = malloc((size_t)NR * D);
    uint16_t *kd = malloc(sizeof(uint16_t) * (D / 32) * NR);
    if (!x || !rows || !xa || !k8 || !kd) return 1;
    for (int i = 0; i < NR * D; i++) x[i] = (float)moe_rng_normal(&r) * (i % 37 == 0 ? 8.0f : 1.0f);
    const char *isa_names[MOE_ISA_COUNT] = {"scalar", "avx2", "avx512"};
    printf("cache store per item (a key and a value row, head size %d), ns, median of %d x %d x %d\n", D, REPS, PASSES, NR / 2);
    for (int isa = MOE_ISA_COUNT - 1; isa >= 0; isa--) {
        const moe_kernels *k = moe_kernels_for((moe_isa)isa);
        if (!k) continue;
        const moe_tq_kernels *tk = moe_tq_for(moe_isa_table_for((moe_isa)isa)->attn);
        for (int fmt = 0; fmt < 2; fmt++) {
            double t[REPS];
            for (int rep = 0; rep < REPS; rep++) {
                const double t0 = now_s();
                for (int p = 0; p < PASSES; p++)
                    for (int j = 0; j < NR; j += 2) {
                        const float *kx = x + (size_t)j * D, *vx = kx + D;
                        if (fmt == 0) {
                            uint64_t sg[D / 64];
                            moe_tq_signs(0, j & 3, D, sg);
                            tk->encode2(kx, vx, sg, D, 5, 4, tmp, rows + (size_t)j * moe_tq_row_bytes(D, 5),
                                        rows + (size_t)(j + 1) * moe_tq_row_bytes(D, 5));
                        } else {
                            k->quantize_act8(kx, xa, D);
                            moe_kv8_store_key(xa, D, k8, kd, NR, j);
                            k->quantize_act8(vx, xa, D);
                            moe_kv8_store_value(xa, D, k8, kd, NR, j + 1);
                        }
                    }
                t[rep] = (now_s() - t0) * 1e9 / (PASSES * NR / 2);
            }
            qsort(t, REPS, sizeof t[0], cmp_d);
            printf("%-7s %-6s %8.1f\n", isa_names[isa], fmt ? "kv_q8" : "kv_tq", t[REPS / 2]);
        }
    }
    free(x), free(rows), free(xa), free(k8), free(kd);
    return 0;
}

/* --prefill N: the header's prefill shape, per ISA level asked (all if none) */
static int prefill_bench(int nk, int argc, char **argv) {
    enum { G = 4, T = 4, R = G * T, BLOCKS = 40 };
    CP = (nk + 15) / 16 * 16;
    moe_rng r;
    moe_rng_seed(&r, 13);
    const size_t ab = (size_t)moe_act8_row_bytes(D);
    float *q = moe_calloc_aligned(sizeof(float), (size_t)R * D, 0), *sc = moe_calloc_aligned(sizeof(float), (size_t)R * CP, 0);
    float *wb = moe_calloc_aligned(sizeof(float), (size_t)G * (D / 32) * CP, 0), *o = moe_calloc_aligned(sizeof(float), (size_t)R * D, 0);
    float *qr = moe_calloc_aligned(sizeof(float), (size_t)R * D, 0);
    uint8_t *qa = moe_calloc_aligned(ab, G, 0);
    cache cq = {0}, ct = {0};
    if (!q || !sc || !wb || !o || !qr || !qa || cache_fill(&cq, FMT_Q8, 1, &r) || cache_fill(&ct, FMT_TQ, 1, &r)) {
        fprintf(stderr, "bench_attn: out of memory\n");
        return 1;
    }
    for (int i = 0; i < R * D; i++) q[i] = (float)moe_rng_normal(&r);
    const char *isa_names[MOE_ISA_COUNT] = {"scalar", "avx2", "avx512"};
    printf("prefill attention at depth %d: blocks of %d tokens x G = %d heads, head size %d, one head's cache, 1 thread;\n"
           "us per (token, KV head) item, median of %d x %d blocks\n", nk, T, G, D, REPS, BLOCKS);
    printf("%-7s %-7s %8s %8s %8s %8s\n", "isa", "cache", "scores", "softmax", "v sum", "total");
    uint64_t sg[D / 64];
    moe_tq_signs(0, 0, D, sg);
    volatile float sink = 0;
    for (int isa = MOE_ISA_COUNT - 1; isa >= 0; isa--) {
        const moe_kernels *k = moe_kernels_for((moe_isa)isa);
        if (!k || isa == MOE_ISA_SCALAR) continue;
        bool want = argc <= 1;
        for (int i = 1; i < argc; i++) want |= !strcmp(argv[i], isa_names[isa]);
        if (!want) continue;
        const moe_attn_kernels *a = moe_isa_table_for((moe_isa)isa)->attn;
        const moe_tq_kernels *tk = moe_tq_for(a);
        for (int fmt = FMT_Q8; fmt <= FMT_TQ; fmt++) {
            double t[3][REPS];
            for (int rep = 0; rep < REPS; rep++) {
                double part[3] = {0, 0, 0};
                for (int b = 0; b < BLOCKS; b++) {
                    if (fmt == FMT_Q8) {                       /* each token's item */
                        for (int tok = 0; tok < T; tok++) {
                            const int n = nk - T + 1 + tok;
                            const double s0 = now_s();
                            for (int h = 0; h < G; h++) k->quantize_act8(q + (size_t)(tok * G + h) * D, qa + (size_t)h * ab, D);
                            a->scores_q8(qa, ab, G, (const int8_t *)cq.k, cq.kd, CP, 0, n, D, 0.088f, sc, CP);
                            const double s1 = now_s();
                            float s = 0;
                            for (int h = 0; h < G; h++) s += a->softmax_q8(sc + (size_t)h * CP, n);
                            const double s2 = now_s();
                            a->accum_q8(sc, CP, G, (const int8_t *)cq.v, cq.vd, CP, 0, n, D, wb, o, D);
                            const double s3 = now_s();
                            sink += s + o[0];
                            part[0] += s1 - s0, part[1] += s2 - s1, part[2] += s3 - s2;
                        }
                        continue;
                    }
                    const double t0 = now_s();                 /* kv_tq: the block's calls */
                    for (int i = 0; i < R; i++) moe_tq_rotate_k(tk, q + (size_t)i * D, sg, D, qr + (size_t)i * D);
                    tk->scores_tq(qr, D, R, ct.k, nk, D, 5, 0.088f, sc, CP);
                    const double t1 = now_s();
                    int nkr[R];
                    float sums[R];
                    for (int tok = 0; tok < T; tok++) {             /* tq_softmax: the FP32 cache's */
                        const int n = nk - T + 1 + tok;
                        for (int h = 0; h < G; h++) {
                            float *row = sc + (size_t)(tok * G + h) * CP;
                            nkr[tok * G + h] = n;
                            a->exp_shift(row, n, a->max_f32(row, n));
                        }
                        moe_attn_row_sums(sc + (size_t)tok * G * CP, CP, G, n, sums + tok * G);
                    }
                    const double t2 = now_s();
                    tk->accum_tq_rows(sc, CP, R, nkr, ct.v, D, 4, o, D);
                    for (int i = 0; i < R; i++) moe_tq_unrotate_k(tk, o + (size_t)i * D, sg, D);
                    const double t3 = now_s();
                    sink += sums[0] + o[0];
                    part[0] += t1 - t0, part[1] += t2 - t1, part[2] += t3 - t2;
                }
                for (int p = 0; p < 3; p++) t[p][rep] = part[p] / (BLOCKS * T) * 1e6;
            }
            double med[3];
            for (int p = 0; p < 3; p++) {
                qsort(t[p], REPS, sizeof(double), cmp_d);
                med[p] = t[p][REPS / 2];
            }
            printf("%-7s %-7s %8.2f %8.2f %8.2f %8.2f\n", isa_names[isa], FMT_NAME[fmt], med[0], med[1], med[2],
                   med[0] + med[1] + med[2]);
        }
    }
    (void)sink;
    cache_free(&cq);
    cache_free(&ct);
    moe_free_aligned(q), moe_free_aligned(sc), moe_free_aligned(wb), moe_free_aligned(o), moe_free_aligned(qr);
    moe_free_aligned(qa);
    return 0;
}

int main(int argc, char **argv) {
    static struct { const char *name; int G, nk; } shapes[] = {{"qwen3moe G=4 576 keys", 4, 576},
                                                                  {"laguna SWA G=6 512 keys", 6, 512}};
    size_t n_shapes = 2;
    char deep[48];
    if (argc > 1 && !strcmp(argv[1], "--store")) return store_bench();
    if (argc > 2 && !strcmp(argv[1], "--prefill")) {
        const int nk = atoi(argv[2]);
        if (nk < 16 || nk > 1 << 16) { fprintf(stderr, "bench_attn: --prefill N: 16 .. 65536\n"); return 2; }
        return prefill_bench(nk, argc - 2, argv + 2);
    }
    const bool keys_mode = argc > 2 && !strcmp(argv[1], "--keys");
    if (keys_mode) {                                       /* one decode step's items at depth N */
        const int nk = atoi(argv[2]);
        if (nk < 16 || nk > 1 << 20) { fprintf(stderr, "bench_attn: --keys N: 16 .. 1048576\n"); return 2; }
        snprintf(deep, sizeof deep, "qwen3moe G=4 %d keys", nk);
        shapes[0].name = deep, shapes[0].nk = nk, n_shapes = 1;
        CP = (nk + 15) / 16 * 16, NHEADS = 64, ITEMS = 40;
        argc -= 2, argv += 2;
    }
    const char *isa_names[MOE_ISA_COUNT] = {"scalar", "avx2", "avx512"};
    moe_rng r;
    moe_rng_seed(&r, 11);
    float *q = moe_calloc_aligned(sizeof(float), 8 * D, 0), *sc = moe_calloc_aligned(8 * (size_t)CP, sizeof(float), 0);
    float *wb = moe_calloc_aligned(sizeof(float), 8 * (D / 32) * (size_t)CP, 0), *o = moe_calloc_aligned(sizeof(float), 8 * D, 0);
    uint8_t *qa = moe_calloc_aligned((size_t)moe_act8_row_bytes(D), 8, 0);
    if (!q || !sc || !wb || !o || !qa) { fprintf(stderr, "bench_attn: out of memory\n"); return 1; }
    for (int i = 0; i < 8 * D; i++) q[i] = (float)moe_rng_normal(&r);
    printf("attention per (token, KV head) item, head size %d, 1 thread, us (median of %d x %d items, scalar %d);\n"
           "L2: one head's K/V; mem: %d heads cycled\n", D, REPS, ITEMS, ITEMS / 20, NHEADS);
    printf("%-7s %-24s %-7s %-4s %8s %8s %8s %8s\n", "isa", "shape", "cache", "data", "scores", "softmax", "v sum",
           "total");
    for (int fmt = 0; fmt < FMT_COUNT; fmt++) {
        cache c1 = {0}, cm = {0};
        if ((!keys_mode && cache_fill(&c1, fmt, 1, &r)) || cache_fill(&cm, fmt, NHEADS, &r)) {
            fprintf(stderr, "bench_attn: out of memory\n");
            return 1;
        }
        for (int isa = MOE_ISA_COUNT - 1; isa >= 0; isa--) {
            const moe_kernels *k = moe_kernels_for((moe_isa)isa);
            if (!k) continue;
            if (argc > 1) {
                int want = 0;
                for (int i = 1; i < argc; i++) want |= !strcmp(argv[i], isa_names[isa]);
                if (!want) continue;
            }
            const moe_attn_kernels *a = moe_isa_table_for((moe_isa)isa)->attn; /* the level's pair */
            for (size_t si = 0; si < n_shapes; si++)
                for (int mem = keys_mode; mem < 2; mem++) {
                    double med[3];
                    /* the scalar kernels are ~50x slower: fewer items, the same medians */
                    run(k, a, fmt, mem ? &cm : &c1, mem ? NHEADS : 1, shapes[si].G, shapes[si].nk,
                        isa == MOE_ISA_SCALAR ? ITEMS / 20 : ITEMS, q, sc, wb, o, qa, med);
                    printf("%-7s %-24s %-7s %-4s %8.2f %8.2f %8.2f %8.2f\n", isa_names[isa], shapes[si].name,
                           FMT_NAME[fmt], mem ? "mem" : "L2", med[0], med[1], med[2], med[0] + med[1] + med[2]);
                }
        }
        cache_free(&c1);
        cache_free(&cm);
    }
    moe_free_aligned(q);
    moe_free_aligned(sc);
    moe_free_aligned(wb);
    moe_free_aligned(o);
    moe_free_aligned(qa);
    return 0;
}
