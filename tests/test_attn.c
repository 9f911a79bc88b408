/* test_attn.c — the attention kernels of every ISA level equal the scalar
 * reference bit for bit, for head sizes that are and are not multiples of 16
 * and group sizes 1..7. */
#include <stdint.h>

#include "attn.h"
#include "check.h"
#include "util.h"

int main(void) {
    moe_rng r;
    moe_rng_seed(&r, 7);
    const int dims[] = {1, 8, 15, 16, 17, 40, 64, 100, 128, 130, 256};
    const moe_isa isas[] = {MOE_ISA_AVX2, MOE_ISA_AVX512};
    int compared = 0;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (int G = 1; G <= 7; G++)
            for (int nk = 1; nk <= 37; nk += 9) {
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
                    const moe_attn_kernels *a = moe_attn_for(isas[ii]);
                    memset(s1, 0, sizeof(float) * scs * G);
                    a->scores(q, qs, G, k, ks, nk, D, 0.125f, s1, scs);
                    a->accum(p, scs, G, v, vs, nk, Dv, o1, (size_t)Dv);
                    CHECK_MSG(!memcmp(s0, s1, sizeof(float) * scs * G), "scores differ: isa %d D %d G %d nk %d", (int)isas[ii], D, G, nk);
                    CHECK_MSG(!memcmp(o0, o1, sizeof(float) * (size_t)Dv * G), "accum differs: isa %d Dv %d G %d nk %d", (int)isas[ii], Dv, G, nk);
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
                    const moe_attn_kernels *a = moe_attn_for(all[ii]);
                    memset(s1, 0, sizeof(float) * scs * G);
                    a->scores_h(q, qs, G, kh, ks, nk, D, 0.125f, s1, scs);
                    a->accum_h(p, scs, G, vh, vs, nk, Dv, o1, (size_t)Dv);
                    CHECK_MSG(!memcmp(s0, s1, sizeof(float) * scs * G), "half scores differ: isa %d D %d G %d nk %d", (int)all[ii], D, G, nk);
                    CHECK_MSG(!memcmp(o0, o1, sizeof(float) * (size_t)Dv * G), "half accum differs: isa %d Dv %d G %d nk %d", (int)all[ii], Dv, G, nk);
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
                    moe_attn_for(isas[ii])->exp_shift(c, n, mxs[mi]);
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
                moe_attn_for(isas[ii])->silu_mul(g1, a + 7, len);
                int bad = 0;
                for (int i = 0; i < N; i++)
                    if (!(g0[i] != g0[i] && g1[i] != g1[i]) && memcmp(&g0[i], &g1[i], 4)) bad++;
                CHECK_MSG(bad == 0, "silu_mul isa %d n %d: %d values differ", (int)isas[ii], len, bad);
                free(g0);
                free(g1);
            }
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
                moe_attn_for(isas[ii])->to_half(x + 3 * (size_t)n, h1, n);
                bad = 0;
                for (int i = 0; i < n; i++) bad += h1[i] != h0[3 * (size_t)n + (size_t)i];
                for (int i = n; i < 48; i++) bad += h1[i] != 0xABAB;   /* nothing written past n */
                CHECK_MSG(bad == 0, "to_half isa %d n %d: %d values differ", (int)isas[ii], n, bad);
            }
            moe_attn_for(isas[ii])->to_half(x, h1, (int)nv);
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
                        moe_attn_for(isas[ii])->combine(eout, slot, w, K, with_sh ? sh : NULL, o1, x1, n);
                        CHECK_MSG(!memcmp(o0, o1, sizeof(float) * (size_t)n) && !memcmp(xr, x1, sizeof(float) * (size_t)n) &&
                                      !memcmp(x1 + n, x0 + n, sizeof(float) * (size_t)(NMAX - n)),
                                  "combine isa %d n %d K %d sh %d differs", (int)isas[ii], n, K, with_sh);
                    }
                }
        free(eout);
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
