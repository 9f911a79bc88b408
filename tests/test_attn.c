/* test_attn.c — the attention kernels of every ISA level equal the scalar
 * reference bit for bit, for head sizes that are and are not multiples of 16
 * and group sizes 1..7 (the FP32 cache also in decode's order: scores_stream,
 * accum_stream; the F16 cache also with kv_prefetch's prefetches). */
#include <math.h>
#include <stdint.h>

#include "attention/attn.h"
#include "check.h"
#include "base/util.h"

/* A level's attention table, from its descriptor (the one a session takes). */
static const moe_attn_kernels *attn_for(moe_isa isa) { return moe_isa_table_for(isa)->attn; }

int main(void) {
    moe_rng r;
    moe_rng_seed(&r, 7);
    const int dims[] = {1, 8, 15, 16, 17, 40, 64, 100, 128, 130, 256};
    const moe_isa isas[] = {MOE_ISA_AVX2, MOE_ISA_AVX512};
    /* 150 keys: past kv_prefetch's distances (64 keys, 32 values), so the
     * F16 kernels' in-loop prefetches run too; 32: a whole number of the
     * AVX2 value sum's chunks (MOE_KV_CHUNK_KEYS), the others a part chunk last */
    const int nks[] = {1, 10, 19, 28, 32, 37, 150};
    int compared = 0;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int G = 1; G <= 7; G++)
            for (size_t ni = 0; ni < sizeof nks / sizeof nks[0]; ni++) {
                const int nk = nks[ni];
                const int D = dims[di], Dv = dims[(di + 3) % (sizeof dims / sizeof dims[0])];
                const size_t qs = (size_t)D + 3, ks = (size_t)D + 5, vs = (size_t)Dv + 7, scs = (size_t)nk + 2;
                float *q = malloc(sizeof(float) * qs * G), *k = malloc(sizeof(float) * ks * nk);
                float *v = malloc(sizeof(float) * vs * nk), *p = malloc(sizeof(float) * scs * G);
                float *s0 = calloc(scs * G, sizeof(float)), *s1 = calloc(scs * G, sizeof(float));
                float *o0 = calloc((size_t)Dv * G, sizeof(float)), *o1 = calloc((size_t)Dv * G, sizeof(float));
                for (size_t i = 0; i < qs * G; i++) q[i] = (float)moe_rng_normal(&r);
                for (size_t i = 0; i < ks * nk; i++) k[i] = (float)moe_rng_normal(&r);
                for (size_t i = 0; i < vs * nk; i++) v[i] = (float)moe_rng_normal(&r);
                for (size_t i = 0; i < scs * G; i++) p[i] = (float)moe_rng_uniform(&r);
                moe_attn_scalar.scores(q, qs, G, k, ks, nk, D, 0.125f, s0, scs);
                moe_attn_scalar.accum(p, scs, G, v, vs, nk, Dv, o0, (size_t)Dv);
                for (size_t ii = 0; ii < 2; ii++) {
                    if (!moe_kernels_for(isas[ii])) continue;
                    const moe_attn_kernels *a = attn_for(isas[ii]);
                    memset(s1, 0, sizeof(float) * scs * G);
                    a->scores(q, qs, G, k, ks, nk, D, 0.125f, s1, scs);
                    a->accum(p, scs, G, v, vs, nk, Dv, o1, (size_t)Dv);
                    CHECK_MSG(!memcmp(s0, s1, sizeof(float) * scs * G), "scores differ: isa %d D %d G %d nk %d", (int)isas[ii], D, G, nk);
                    memset(s1, 0, sizeof(float) * scs * G);           /* key_stream: the decode order */
                    a->scores_stream(q, qs, G, k, ks, nk, D, 0.125f, s1, scs);
                    CHECK_MSG(!memcmp(s0, s1, sizeof(float) * scs * G), "scores_stream differs: isa %d D %d G %d nk %d", (int)isas[ii], D, G, nk);
                    CHECK_MSG(!memcmp(o0, o1, sizeof(float) * (size_t)Dv * G), "accum differs: isa %d Dv %d G %d nk %d", (int)isas[ii], Dv, G, nk);
                    memset(o1, 0, sizeof(float) * (size_t)Dv * G);       /* and its value order */
                    a->accum_stream(p, scs, G, v, vs, nk, Dv, o1, (size_t)Dv);
                    CHECK_MSG(!memcmp(o0, o1, sizeof(float) * (size_t)Dv * G), "accum_stream differs: isa %d Dv %d G %d nk %d", (int)isas[ii], Dv, G, nk);
                    compared++;
                }
                /* kv_f16: half keys/values; every level equals the scalar
                 * float kernels fed with the exactly converted values */
                uint16_t *kh = malloc(sizeof(uint16_t) * ks * nk), *vh = malloc(sizeof(uint16_t) * vs * nk);
                for (size_t i = 0; i < ks * nk; i++) { kh[i] = moe_f32_to_f16(k[i]); k[i] = moe_f16_to_f32(kh[i]); }
                for (size_t i = 0; i < vs * nk; i++) { vh[i] = moe_f32_to_f16(v[i]); v[i] = moe_f16_to_f32(vh[i]); }
                moe_attn_scalar.scores(q, qs, G, k, ks, nk, D, 0.125f, s0, scs);
                moe_attn_scalar.accum(p, scs, G, v, vs, nk, Dv, o0, (size_t)Dv);
                const moe_isa all[] = {MOE_ISA_SCALAR, MOE_ISA_AVX2, MOE_ISA_AVX512};
                for (size_t ii = 0; ii < 3; ii++) {
                    if (!moe_kernels_for(all[ii])) continue;
                    const moe_attn_kernels *a = attn_for(all[ii]);
                    memset(s1, 0, sizeof(float) * scs * G);
                    a->scores_h(q, qs, G, kh, ks, nk, D, 0.125f, s1, scs);
                    a->accum_h(p, scs, G, vh, vs, nk, Dv, o1, (size_t)Dv);
                    CHECK_MSG(!memcmp(s0, s1, sizeof(float) * scs * G), "half scores differ: isa %d D %d G %d nk %d", (int)all[ii], D, G, nk);
                    CHECK_MSG(!memcmp(o0, o1, sizeof(float) * (size_t)Dv * G), "half accum differs: isa %d Dv %d G %d nk %d", (int)all[ii], Dv, G, nk);
                    memset(s1, 0, sizeof(float) * scs * G);           /* kv_prefetch */
                    memset(o1, 0, sizeof(float) * (size_t)Dv * G);
                    a->scores_h_prefetch(q, qs, G, kh, ks, nk, D, 0.125f, s1, scs);
                    a->accum_h_prefetch(p, scs, G, vh, vs, nk, Dv, o1, (size_t)Dv);
                    CHECK_MSG(!memcmp(s0, s1, sizeof(float) * scs * G), "half scores_prefetch differ: isa %d D %d G %d nk %d", (int)all[ii], D, G, nk);
                    CHECK_MSG(!memcmp(o0, o1, sizeof(float) * (size_t)Dv * G), "half accum_prefetch differs: isa %d Dv %d G %d nk %d", (int)all[ii], Dv, G, nk);
                }
                free(kh); free(vh);
                free(q); free(k); free(v); free(p); free(s0); free(s1); free(o0); free(o1);
            }
    /* exp_shift: every ISA equals the scalar moe_expf bit for bit, edge values included */
    {
        enum { N = 4099 };
        float *a = malloc(sizeof(float) * N), *b = malloc(sizeof(float) * N);
        const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, 88.72f, 88.7228f, 88.73f, 89.0f, 1000.0f,
                                 -87.3f, -87.3366f, -87.34f, -100.0f, -1e30f, 1e30f, __builtin_inff(), -__builtin_inff(),
                                 __builtin_nanf(""), 0.5f, -0.5f, 1.0f, -1.0f, 0x1p-149f};
        const int ns = (int)(sizeof special / sizeof special[0]);
        for (int i = 0; i < N; i++)
            a[i] = i < ns ? special[i] : (float)(moe_rng_uniform(&r) * 200.0 - 100.0);
        const float mxs[] = {0.0f, 3.5f, -2.0f};
        for (int mi = 0; mi < 3; mi++)
            for (size_t ii = 0; ii < 2; ii++) {
                if (!moe_kernels_for(isas[ii])) continue;
                for (int n = 0; n <= N; n += (n < 40 ? 1 : 997)) {
                    memcpy(b, a, sizeof(float) * N);
                    float *c = malloc(sizeof(float) * N);
                    memcpy(c, a, sizeof(float) * N);
                    moe_attn_scalar.exp_shift(b, n, mxs[mi]);
                    attn_for(isas[ii])->exp_shift(c, n, mxs[mi]);
                    int bad = 0;
                    for (int i = 0; i < N; i++) {
                        bool both_nan = b[i] != b[i] && c[i] != c[i];
                        if (!both_nan && memcmp(&b[i], &c[i], 4)) bad++;
                    }
                    CHECK_MSG(bad == 0, "exp_shift isa %d n %d mx %g: %d values differ", (int)isas[ii], n, (double)mxs[mi], bad);
                    free(c);
                }
            }
        /* silu_mul likewise */
        for (size_t ii = 0; ii < 2; ii++) {
            if (!moe_kernels_for(isas[ii])) continue;
            for (int n = 0; n <= 70; n++) {
                float *g0 = malloc(sizeof(float) * N), *g1 = malloc(sizeof(float) * N);
                memcpy(g0, a, sizeof(float) * N);
                memcpy(g1, a, sizeof(float) * N);
                const int len = n < 70 ? n : N - 7;
                moe_attn_scalar.silu_mul(g0, a + 7, len);
                attn_for(isas[ii])->silu_mul(g1, a + 7, len);
                int bad = 0;
                for (int i = 0; i < N; i++)
                    if (!(g0[i] != g0[i] && g1[i] != g1[i]) && memcmp(&g0[i], &g1[i], 4)) bad++;
                CHECK_MSG(bad == 0, "silu_mul isa %d n %d: %d values differ", (int)isas[ii], len, bad);
                free(g0);
                free(g1);
            }
        }
        /* swiglu_clamp likewise (inputs scaled past the +-7 clamps, NaN among them) */
        for (size_t ii = 0; ii < 2; ii++) {
            if (!moe_kernels_for(isas[ii])) continue;
            for (int n = 0; n <= 70; n++) {
                float *g0 = malloc(sizeof(float) * N), *g1 = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
                for (int i = 0; i < N; i++) g0[i] = g1[i] = a[i] * 9.0f, u[i] = a[(i + 7) % N] * 9.0f;
                const int len = n < 70 ? n : N;
                moe_attn_scalar.swiglu_clamp(g0, u, len);
                attn_for(isas[ii])->swiglu_clamp(g1, u, len);
                int bad = 0;
                for (int i = 0; i < N; i++)
                    if (!(g0[i] != g0[i] && g1[i] != g1[i]) && memcmp(&g0[i], &g1[i], 4)) bad++;
                CHECK_MSG(bad == 0, "swiglu_clamp isa %d n %d: %d values differ", (int)isas[ii], len, bad);
                free(g0);
                free(g1);
                free(u);
            }
        }
        /* max_f32: every ISA returns the scalar maximum (a zero maximum may
         * differ in sign only), NaN ignored, -inf for none; and the zero sign
         * cannot matter: moe_expf gives exactly 1 for +0 and -0 */
        {
            const float one = 1.0f, e0 = moe_expf(0.0f), e1 = moe_expf(-0.0f);
            CHECK(!memcmp(&e0, &one, 4) && !memcmp(&e1, &one, 4));
        }
        for (size_t ii = 0; ii < 2; ii++) {
            if (!moe_kernels_for(isas[ii])) continue;
            const moe_attn_kernels *ak = attn_for(isas[ii]);
            for (int n = 0; n <= 70; n++)
                for (int off = 0; off < 3 * ns; off += 5) {  /* windows over the special values */
                    const float m0 = moe_attn_scalar.max_f32(a + off, n), m1 = ak->max_f32(a + off, n);
                    CHECK_MSG(m0 == m1 && m0 == m0, "max_f32 isa %d n %d off %d: %g vs %g", (int)isas[ii], n, off,
                              (double)m1, (double)m0);
                }
            float nn[40], zz[33];
            for (int i = 0; i < 40; i++) nn[i] = __builtin_nanf("");
            nn[17] = -3.0f;
            CHECK(ak->max_f32(nn, 40) == -3.0f && ak->max_f32(nn, 17) == -__builtin_inff());
            for (int i = 0; i < 33; i++) zz[i] = (i % 3) ? -0.0f : -5.0f;
            CHECK(ak->max_f32(zz, 33) == 0.0f && ak->max_f32(a + 1000, N - 1000) == moe_attn_scalar.max_f32(a + 1000, N - 1000));
        }
        /* moe_attn_row_sums: per head, the plain key-order sum */
        for (int G = 1; G <= 9; G++)
            for (int n = 0; n <= 600; n += (n < 20 ? 1 : 97)) {
                const size_t st = (size_t)n + 3;
                float *rr = malloc(sizeof(float) * st * (size_t)G + 4), sums[9];
                for (size_t i = 0; i < st * (size_t)G; i++) rr[i] = (float)moe_rng_uniform(&r) * (i % 7 ? 1.0f : 1e6f);
                moe_attn_row_sums(rr, st, G, n, sums);
                for (int h = 0; h < G; h++) {
                    float want = 0.0f;
                    for (int j = 0; j < n; j++) want += rr[(size_t)h * st + (size_t)j];
                    CHECK_MSG(!memcmp(&want, &sums[h], 4), "row_sums G %d n %d head %d", G, n, h);
                }
                free(rr);
            }
        /* and the scalar one is moe_expf */
        memcpy(b, a, sizeof(float) * N);
        moe_attn_scalar.exp_shift(b, 64, 1.0f);
        for (int i = 0; i < 64; i++) {
            float want = moe_expf(a[i] - 1.0f);
            CHECK(!memcmp(&want, &b[i], 4) || (want != want && b[i] != b[i]));
        }
        free(a);
        free(b);
    }

    /* to_half (the kv_f16 store): every ISA gives moe_f32_to_f16's bits. The
     * inputs: every sign/exponent/top-10-mantissa pattern with the low 13
     * bits at the rounding points (0, 1, half-1, half, half+1, max), which
     * covers every normal result's ties, overflow to inf, inf and NaN; plus
     * every low-bit pattern of a stride through the subnormal-result range
     * (exponents 102..112, where the rounding point moves up to bit 23). */
    {
        const uint32_t lows[] = {0, 1, 0xfff, 0x1000, 0x1001, 0x1fff};
        const size_t NV = (size_t)(1u << 19) * 6 + 11 * 2 * 4096;
        float *x = malloc(sizeof(float) * NV);
        uint16_t *h0 = malloc(sizeof(uint16_t) * NV), *h1 = malloc(sizeof(uint16_t) * NV);
        size_t nv = 0;
        for (uint32_t hi = 0; hi < (1u << 19); hi++)
            for (int l = 0; l < 6; l++) {
                uint32_t u = hi << 13 | lows[l];
                memcpy(&x[nv++], &u, 4);
            }
        for (uint32_t e = 102; e <= 112; e++)
            for (uint32_t sg = 0; sg < 2; sg++)
                for (uint32_t m = 0; m < 4096; m++) {
                    uint32_t man = (m * 2053u) & 0x7fffffu;  /* spread over the mantissa */
                    if (m < 64) man = (1u << (m % 24)) + (m / 24) - 1;  /* exact ties and their neighbours */
                    uint32_t u = sg << 31 | e << 23 | (man & 0x7fffffu);
                    memcpy(&x[nv++], &u, 4);
                }
        moe_attn_scalar.to_half(x, h0, (int)nv);
        int bad = 0;
        for (size_t i = 0; i < nv; i++) bad += h0[i] != moe_f32_to_f16(x[i]);
        CHECK_MSG(bad == 0, "scalar to_half: %d values differ from moe_f32_to_f16", bad);
        CHECK(moe_f32_to_f16(65504.0f) == 0x7bff && moe_f32_to_f16(65520.0f) == 0x7c00 &&
              moe_f32_to_f16(0x1p-25f) == 0 && moe_f32_to_f16(0x1.8p-25f) == 1 && moe_f32_to_f16(-0x1p-24f) == 0x8001);
        for (size_t ii = 0; ii < 2; ii++) {
            if (!moe_kernels_for(isas[ii])) continue;
            for (int n = 0; n <= 40; n++) {                   /* every tail length */
                memset(h1, 0xAB, sizeof(uint16_t) * 48);
                attn_for(isas[ii])->to_half(x + 3 * (size_t)n, h1, n);
                bad = 0;
                for (int i = 0; i < n; i++) bad += h1[i] != h0[3 * (size_t)n + (size_t)i];
                for (int i = n; i < 48; i++) bad += h1[i] != 0xABAB;   /* nothing written past n */
                CHECK_MSG(bad == 0, "to_half isa %d n %d: %d values differ", (int)isas[ii], n, bad);
            }
            attn_for(isas[ii])->to_half(x, h1, (int)nv);
            bad = 0;
            for (size_t i = 0; i < nv; i++) bad += h1[i] != h0[i];
            CHECK_MSG(bad == 0, "to_half isa %d: %d of %zu values differ", (int)isas[ii], bad, nv);
        }
        free(x);
        free(h0);
        free(h1);
    }

    /* combine: every ISA gives the scalar kernel's bits (K experts, with and
     * without a shared expert, every tail length), and the scalar kernel is
     * the multiply-then-add sequence of attn.h (a fused multiply-add would
     * round once and differ) */
    {
        enum { NMAX = 70, KMAX = 9 };
        float *eout = malloc(sizeof(float) * NMAX * (KMAX + 3)), sh[NMAX], x0[NMAX], o0[NMAX], x1[NMAX], o1[NMAX], w[KMAX];
        for (int i = 0; i < NMAX * (KMAX + 3); i++) eout[i] = (float)moe_rng_normal(&r);
        for (int i = 0; i < NMAX; i++) { sh[i] = (float)moe_rng_normal(&r); x0[i] = (float)moe_rng_normal(&r); }
        for (int k = 0; k < KMAX; k++) w[k] = (float)moe_rng_uniform(&r);
        const int32_t slot[KMAX] = {3, 0, 7, 1, 11, 2, 9, 4, 5};
        for (int n = 1; n <= NMAX; n += (n < 20 ? 1 : 7))
            for (int K = 1; K <= KMAX; K++)
                for (int with_sh = 0; with_sh < 2; with_sh++) {
                    float xr[NMAX];
                    memcpy(xr, x0, sizeof xr);
                    moe_attn_scalar.combine(eout, slot, w, K, with_sh ? sh : NULL, o0, xr, n);
                    int bad = 0;
                    for (int i = 0; i < n; i++) {                  /* the contract, written out */
                        float a = eout[(size_t)slot[0] * n + i] * w[0];
                        for (int k = 1; k < K; k++) {
                            volatile float p = eout[(size_t)slot[k] * n + i] * w[k];
                            a = a + p;
                        }
                        if (with_sh) a += sh[i];
                        bad += memcmp(&a, &o0[i], 4) != 0;
                        float xv = x0[i] + a;
                        bad += memcmp(&xv, &xr[i], 4) != 0;
                    }
                    CHECK_MSG(bad == 0, "scalar combine n %d K %d sh %d: %d values differ", n, K, with_sh, bad);
                    for (size_t ii = 0; ii < 2; ii++) {
                        if (!moe_kernels_for(isas[ii])) continue;
                        memcpy(x1, x0, sizeof x1);
                        memset(o1, 0xAB, sizeof o1);
                        attn_for(isas[ii])->combine(eout, slot, w, K, with_sh ? sh : NULL, o1, x1, n);
                        CHECK_MSG(!memcmp(o0, o1, sizeof(float) * (size_t)n) && !memcmp(xr, x1, sizeof(float) * (size_t)n) &&
                                      !memcmp(x1 + n, x0 + n, sizeof(float) * (size_t)(NMAX - n)),
                                  "combine isa %d n %d K %d sh %d differs", (int)isas[ii], n, K, with_sh);
                    }
                }
        free(eout);
    }

    /* kv_q8: keys and values quantized by moe_quantize_act8 and moved into
     * the cache layout; every level equals the scalar contract bit for bit
     * for every key range (tiles cut at both ends), and the contract itself
     * stays within quantization error of the float attention it replaces */
    {
        const int qdims[] = {32, 64, 128, 256, 544};
        const int ranges[][2] = {{0, 1}, {0, 16}, {3, 9}, {5, 40}, {16, 33}, {17, 70}, {0, 77}};
        enum { CP = 96 };                                        /* positions, a multiple of 16 */
        for (size_t di = 0; di < sizeof qdims / sizeof qdims[0]; di++)
            for (int G = 1; G <= 7; G++) {
                const int D = qdims[di], Dv = qdims[(di + 2) % (sizeof qdims / sizeof qdims[0])];
                const size_t ab = (size_t)moe_act8_row_bytes(D), abv = (size_t)moe_act8_row_bytes(Dv);
                float *qf = malloc(sizeof(float) * (size_t)G * D), *kf = malloc(sizeof(float) * CP * (size_t)D);
                float *vf = malloc(sizeof(float) * CP * (size_t)Dv), *p = malloc(sizeof(float) * (size_t)G * CP);
                uint8_t *qa = malloc(ab * (size_t)G), *tmp = malloc(ab > abv ? ab : abv);
                int8_t *k8 = calloc(CP, (size_t)D), *v8 = calloc(CP, (size_t)Dv);
                uint16_t *kd = calloc((size_t)CP * (size_t)(D / 32), 2), *vd = calloc((size_t)CP * (size_t)(Dv / 32), 2);
                float *s0 = malloc(sizeof(float) * (size_t)G * CP), *s1 = malloc(sizeof(float) * (size_t)G * CP);
                float *o0 = malloc(sizeof(float) * (size_t)G * Dv), *o1 = malloc(sizeof(float) * (size_t)G * Dv);
                float *wb = malloc(sizeof(float) * (size_t)G * (size_t)(Dv / 32) * CP);
                for (int i = 0; i < G * D; i++) qf[i] = (float)moe_rng_normal(&r);
                for (int i = 0; i < CP * D; i++) kf[i] = (float)moe_rng_normal(&r) * (i % 7 == 0 ? 4.0f : 1.0f);
                for (int i = 0; i < CP * Dv; i++) vf[i] = (float)moe_rng_normal(&r);
                for (int i = 0; i < G * CP; i++) p[i] = (float)moe_rng_uniform(&r);
                for (int h = 0; h < G; h++) moe_quantize_act8(qf + (size_t)h * D, qa + (size_t)h * ab, D);
                for (int j = 0; j < CP; j++) {
                    moe_quantize_act8(kf + (size_t)j * D, tmp, D);
                    moe_kv8_store_key(tmp, D, k8, kd, CP, j);
                    moe_quantize_act8(vf + (size_t)j * Dv, tmp, Dv);
                    moe_kv8_store_value(tmp, Dv, v8, vd, CP, j);
                }
                for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++) {
                    const int j0 = ranges[ri][0], nk = ranges[ri][1];
                    for (int i = 0; i < G * CP; i++) s0[i] = s1[i] = -1.0f;  /* outside the range: untouched */
                    moe_attn_scalar.scores_q8(qa, ab, G, k8, kd, CP, j0, nk, D, 0.125f, s0, CP);
                    moe_attn_scalar.accum_q8(p, CP, G, v8, vd, CP, j0, nk, Dv, wb, o0, (size_t)Dv);
                    CHECK(moe_attn_scalar.accum_q8_stream == moe_attn_scalar.accum_q8);
                    double err = 0, mag = 0, verr = 0, vmag = 0;  /* against the float attention */
                    for (int h = 0; h < G; h++) {
                        for (int j = j0; j < j0 + nk; j++) {
                            double e = 0, qq = 0, kk = 0;
                            for (int d = 0; d < D; d++) {
                                e += (double)qf[h * D + d] * kf[(size_t)j * D + d];
                                qq += (double)qf[h * D + d] * qf[h * D + d];
                                kk += (double)kf[(size_t)j * D + d] * kf[(size_t)j * D + d];
                            }
                            err += fabs(e * 0.125 - s0[h * CP + j]);
                            mag += sqrt(qq * kk) * 0.125;         /* the scale of the error: |q| |k| */
                        }
                        for (int d = 0; d < Dv; d++) {
                            double e = 0, a = 0;
                            for (int j = j0; j < j0 + nk; j++) {
                                e += (double)p[h * CP + j] * vf[(size_t)j * Dv + d];
                                a += fabs((double)p[h * CP + j] * vf[(size_t)j * Dv + d]);
                            }
                            verr += fabs(e - o0[h * Dv + d]);
                            vmag += a;
                        }
                    }
                    CHECK_MSG(err < 0.01 * mag && verr < 0.01 * vmag, "kv_q8 contract far from float: D %d G %d err %g/%g, %g/%g",
                              D, G, err, mag, verr, vmag);
                    int outside = 0;
                    for (int h = 0; h < G; h++)
                        for (int j = 0; j < CP; j++) outside += (j < j0 || j >= j0 + nk) && s0[h * CP + j] != -1.0f;
                    CHECK_MSG(outside == 0, "scalar scores_q8 wrote %d scores outside keys %d..%d", outside, j0, j0 + nk - 1);
                    for (size_t ii = 0; ii < 2; ii++) {
                        if (!moe_kernels_for(isas[ii])) continue;
                        const moe_attn_kernels *a = attn_for(isas[ii]);
                        for (int i = 0; i < G * CP; i++) s1[i] = -1.0f;
                        memset(o1, 0xAB, sizeof(float) * (size_t)G * Dv);
                        a->scores_q8(qa, ab, G, k8, kd, CP, j0, nk, D, 0.125f, s1, CP);
                        a->accum_q8(p, CP, G, v8, vd, CP, j0, nk, Dv, wb, o1, (size_t)Dv);
                        CHECK_MSG(!memcmp(s0, s1, sizeof(float) * (size_t)G * CP), "scores_q8 differ: isa %d D %d G %d keys %d+%d",
                                  (int)isas[ii], D, G, j0, nk);
                        CHECK_MSG(!memcmp(o0, o1, sizeof(float) * (size_t)G * Dv), "accum_q8 differs: isa %d Dv %d G %d keys %d+%d",
                                  (int)isas[ii], Dv, G, j0, nk);
                        /* the decode variant (flag value_prefetch) only adds prefetches */
                        memset(o1, 0xAB, sizeof(float) * (size_t)G * Dv);
                        a->accum_q8_stream(p, CP, G, v8, vd, CP, j0, nk, Dv, wb, o1, (size_t)Dv);
                        CHECK_MSG(!memcmp(o0, o1, sizeof(float) * (size_t)G * Dv),
                                  "accum_q8_stream differs: isa %d Dv %d G %d keys %d+%d", (int)isas[ii], Dv, G, j0, nk);
                        compared++;
                    }
                }
                free(qf); free(kf); free(vf); free(p); free(qa); free(tmp); free(k8); free(v8); free(kd); free(vd);
                free(s0); free(s1); free(o0); free(o1); free(wb);
            }
        /* softmax_q8: every level equals the scalar one (values and sum), NaN,
         * infinities and signed zeros included; the sum is the 16-lane one */
        enum { NS = 1200 };
        float *r0 = malloc(sizeof(float) * NS), *r1 = malloc(sizeof(float) * NS), *src = malloc(sizeof(float) * NS);
        const float spec[] = {__builtin_nanf(""), -__builtin_inff(), 0.0f, -0.0f, 3.0f, -3.0f, 40.0f, -90.0f};
        for (int pass = 0; pass < 3; pass++)
            for (int n = 0; n <= NS; n += (n < 40 ? 1 : 389)) {
                for (int i = 0; i < NS; i++) src[i] = (float)(moe_rng_normal(&r) * 4.0);
                if (pass == 1) for (int i = 0; i < n; i += 5) src[i] = spec[(i / 5) % 8];
                if (pass == 2) for (int i = 0; i < n; i++) src[i] = i % 3 ? -0.0f : 0.0f;
                memcpy(r0, src, sizeof(float) * NS);
                const float sum0 = moe_attn_scalar.softmax_q8(r0, n);
                if (pass == 0 && n > 0) {
                    double mx = -1e30, e = 0;
                    for (int i = 0; i < n; i++) if (src[i] > mx) mx = src[i];
                    for (int i = 0; i < n; i++) e += exp((double)src[i] - mx);
                    CHECK_MSG(fabs(e - sum0) <= 1e-5 * e, "softmax_q8 sum %g, expected %g (n %d)", sum0, e, n);
                }
                for (size_t ii = 0; ii < 2; ii++) {
                    if (!moe_kernels_for(isas[ii])) continue;
                    memcpy(r1, src, sizeof(float) * NS);
                    const float sum1 = attn_for(isas[ii])->softmax_q8(r1, n);
                    CHECK_MSG(!memcmp(&sum0, &sum1, 4) && !memcmp(r0, r1, sizeof(float) * NS),
                              "softmax_q8 differs: isa %d pass %d n %d (sum %g vs %g)", (int)isas[ii], pass, n, sum0, sum1);
                }
            }
        free(r0); free(r1); free(src);

        /* the layout: a key's dim d is byte (d/4)*64 + lane*4 + d%4 of its tile */
        float x[32];
        uint8_t xa[A8_GROUP_BYTES];
        int8_t kt[2 * 16 * 32] = {0};
        uint16_t kdd[32] = {0};
        for (int i = 0; i < 32; i++) x[i] = (float)(i - 16);
        moe_quantize_act8(x, xa, 32);
        moe_kv8_store_key(xa, 32, kt, kdd, 32, 17);              /* tile 1, lane 1 */
        CHECK(kt[16 * 32 + 0 * 64 + 1 * 4 + 0] == -127 && kt[16 * 32 + 4 * 64 + 1 * 4 + 0] == 0);
        CHECK(kt[16 * 32 + 7 * 64 + 1 * 4 + 3] == (int8_t)lrintf(15.0f * 127.0f / 16.0f));
        CHECK(moe_f16_to_f32(kdd[17]) == moe_f16_to_f32(moe_f32_to_f16(16.0f / 127.0f)));
    }

    /* half keys for G = 8 and 12 (the main loop stops at 7): the AVX2 tiles
     * of 4 heads x 1 key for G % 4 == 0, with and without kv_prefetch, equal
     * the scalar float kernel fed the converted keys (own generator: the
     * loops above keep their data) */
    {
        moe_rng r8;
        moe_rng_seed(&r8, 8);
        const int d8[] = {16, 64, 128, 136}, n8[] = {1, 19, 150};
        for (size_t di = 0; di < 4; di++)
            for (int G = 8; G <= 12; G += 4)
                for (size_t ni = 0; ni < 3; ni++) {
                    const int D = d8[di], nk = n8[ni];
                    const size_t qs = (size_t)D + 3, ks = (size_t)D + 5, scs = (size_t)nk + 2;
                    float *q = malloc(sizeof(float) * qs * G), *k = malloc(sizeof(float) * ks * nk);
                    float *s0 = calloc(scs * G, sizeof(float)), *s1 = calloc(scs * G, sizeof(float));
                    uint16_t *kh = malloc(sizeof(uint16_t) * ks * nk);
                    for (size_t i = 0; i < qs * G; i++) q[i] = (float)moe_rng_normal(&r8);
                    for (size_t i = 0; i < ks * nk; i++) {
                        kh[i] = moe_f32_to_f16((float)moe_rng_normal(&r8));
                        k[i] = moe_f16_to_f32(kh[i]);
                    }
                    moe_attn_scalar.scores(q, qs, G, k, ks, nk, D, 0.125f, s0, scs);
                    for (size_t ii = 0; ii < 2; ii++) {
                        if (!moe_kernels_for(isas[ii])) continue;
                        const moe_attn_kernels *a = attn_for(isas[ii]);
                        for (int pf = 0; pf < 2; pf++) {
                            memset(s1, 0, sizeof(float) * scs * G);
                            (pf ? a->scores_h_prefetch : a->scores_h)(q, qs, G, kh, ks, nk, D, 0.125f, s1, scs);
                            CHECK_MSG(!memcmp(s0, s1, sizeof(float) * scs * G),
                                      "half scores differ: isa %d D %d G %d nk %d prefetch %d", (int)isas[ii], D, G, nk, pf);
                        }
                        compared++;
                    }
                    free(q); free(k); free(s0); free(s1); free(kh);
                }
    }

    /* the reference itself: a hand-computed case */
    float q1[17], k1[17];
    for (int i = 0; i < 17; i++) { q1[i] = 1.0f; k1[i] = (float)i; }
    float sc;
    moe_attn_scalar.scores(q1, 17, 1, k1, 17, 1, 17, 0.5f, &sc, 1);
    CHECK(sc == 68.0f); /* (0+...+16) / 2 */
    CHECK_MSG(compared > 0 || !moe_kernels_for(MOE_ISA_AVX2), "no SIMD level compared");
    return check_report("test_attn");
}
