/* iq3_avx2.c — IQ3_XXS, IQ3_S, IQ1_S, IQ1_M at AVX2, bit-identical to
 * iq3_ref.c (the layouts and float operations are written out there).
 *
 * A sub-block of 32 values is dequantized into 4 ymm (values 0-7, 8-15,
 * 16-23, 24-31); the 16 lanes of quant.h's contract are two accumulators,
 * lanes 0..7 and 8..15, so chunk q goes to accumulator q & 1. Grid points
 * come from the codebooks by vpgatherdd (IQ3: 8 points of 4 bytes = the 32
 * values) or 4 loads (IQ1: 4 points of 8 bytes); bytes -> int32 -> float
 * is exact, so each value is the reference's single product (IQ1: the exact
 * sum g + delta first). Signs are the float's sign bit flipped (xor), the
 * reference's negation. IQ3_XXS's sign code (7 bits + parity) for the 4
 * groups at once: pdep spreads the 28 bits into 4 bytes, and the parity of
 * each byte lands in its bit 0 after three shift-xors (bit 8k gathers bits
 * 8k..8k+7 only). */
#include "quant/iq3.h"

#include <immintrin.h>

#include "quant/simd_avx2.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
#define PF_DIST 8192 /* bytes ahead of each row (quant_avx512.c: the measurement) */

ALWAYS_INLINE __m128i ld64(const uint8_t *p) { return _mm_loadl_epi64((const __m128i *)p); }
ALWAYS_INLINE uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* 32 unsigned bytes (a gathered sub-block) times db, signs from bit k of sg. */
ALWAYS_INLINE void iq3_values(__m256i g, __m256 db, uint32_t sg, __m256 *v) {
    const __m128i lo = _mm256_castsi256_si128(g), hi = _mm256_extracti128_si256(g, 1);
    const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    const __m256i s = _mm256_set1_epi32((int)sg), sb = _mm256_set1_epi32((int)0x80000000u);
    UNROLL for (int q = 0; q < 4; q++) {
        /* bit 8q + j of sg to bit 31 of lane j */
        const __m256i sh = _mm256_setr_epi32(31 - 8 * q, 30 - 8 * q, 29 - 8 * q, 28 - 8 * q, 27 - 8 * q, 26 - 8 * q,
                                             25 - 8 * q, 24 - 8 * q);
        const __m256i neg = _mm256_and_si256(_mm256_sllv_epi32(s, sh), sb);
        const __m256 m = _mm256_mul_ps(db, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(part[q])));
        v[q] = _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(m), neg));
    }
}

ALWAYS_INLINE void dq_iq3_xxs(const uint8_t *b, int ib, __m256 *v) {
    const uint32_t aux = rd32(b + 66 + 4 * ib);
    const __m256 db = _mm256_set1_ps(moe_iq3xxs_db(moe_f16_f32_tab[moe_rd16(b)], aux));
    const __m256i idx = _mm256_cvtepu8_epi32(ld64(b + 2 + 8 * ib));
    const __m256i g = _mm256_i32gather_epi32((const int *)moe_iq3xxs_grid, idx, 4);
    const uint32_t p = _pdep_u32(aux, 0x7f7f7f7fu);
    uint32_t q = p ^ (p >> 4);
    q ^= q >> 2;
    q ^= q >> 1;
    iq3_values(g, db, p | (q & 0x01010101u) << 7, v);
}

ALWAYS_INLINE void dq_iq3_s(const uint8_t *b, int ib, __m256 *v) {
    const __m256 db = _mm256_set1_ps(moe_iq3s_db(moe_f16_f32_tab[moe_rd16(b)], b, ib));
    const __m256i hb = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b[66 + ib]), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                                        _mm256_set1_epi32(1));
    const __m256i idx = _mm256_or_si256(_mm256_cvtepu8_epi32(ld64(b + 2 + 8 * ib)), _mm256_slli_epi32(hb, 8));
    const __m256i g = _mm256_i32gather_epi32((const int *)moe_iq3s_grid, idx, 4);
    iq3_values(g, db, rd32(b + 74 + 4 * ib), v);
}

/* IQ1: 4 grid points (8 int8 each), group l scaled by dl[l] with delta[l]. */
ALWAYS_INLINE void iq1_values(const int *idx, const float *dl, const float *delta, __m256 *v) {
    UNROLL for (int l = 0; l < 4; l++) {
        const __m128i p = _mm_cvtsi64_si128((long long)moe_iq1s_grid[idx[l]]);
        const __m256 t = _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(p)), _mm256_set1_ps(delta[l]));
        v[l] = _mm256_mul_ps(_mm256_set1_ps(dl[l]), t);
    }
}

ALWAYS_INLINE void dq_iq1_s(const uint8_t *b, int ib, __m256 *v) {
    const uint16_t qh = moe_rd16(b + 34 + 2 * ib);
    const float dl = moe_f16_f32_tab[moe_rd16(b)] * (float)(2 * ((qh >> 12) & 7) + 1);
    const float delta = moe_iq1_delta(qh >> 15);
    const uint8_t *qs = b + 2 + 4 * ib;
    const int idx[4] = {qs[0] | (qh & 7) << 8, qs[1] | ((qh >> 3) & 7) << 8, qs[2] | ((qh >> 6) & 7) << 8,
                        qs[3] | ((qh >> 9) & 7) << 8};
    const float dls[4] = {dl, dl, dl, dl}, ds[4] = {delta, delta, delta, delta};
    iq1_values(idx, dls, ds, v);
}

ALWAYS_INLINE void dq_iq1_m(const uint8_t *b, int ib, __m256 *v) {
    const float d = moe_f16_f32_tab[moe_iq1m_d16(b)];
    const float dl1 = d * (float)(2 * moe_iq1m_s(b, ib, 0) + 1), dl2 = d * (float)(2 * moe_iq1m_s(b, ib, 1) + 1);
    const uint8_t *qs = b + 4 * ib, h0 = b[32 + 2 * ib], h1 = b[33 + 2 * ib];
    const int u[4] = {h0 & 15, h0 >> 4, h1 & 15, h1 >> 4};
    int idx[4];
    float ds[4];
    UNROLL for (int l = 0; l < 4; l++) {
        idx[l] = qs[l] | (u[l] & 7) << 8;
        ds[l] = moe_iq1_delta((unsigned)u[l] >> 3);
    }
    const float dls[4] = {dl1, dl1, dl2, dl2};
    iq1_values(idx, dls, ds, v);
}

/* The R x T tile (iq3.h's drivers): each row's sub-block dequantized and
 * used at once. */
#define DEF_TILE(NAME, QB)                                                                          \
    ALWAYS_INLINE void tile_##NAME(const uint8_t *w, size_t rb, const float *x, size_t xs, float *y, \
                                   size_t ys, int64_t n, const int R, const int T, const int S) {  \
        __m256 acc[4][2][2];                                                                       \
        UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            acc[rr][tt][0] = acc[rr][tt][1] = _mm256_setzero_ps();                                 \
        for (int64_t bi = 0; bi < n / 256; bi++) {                                                 \
            UNROLL for (int rr = 0; rr < R; rr++)                                                  \
                _mm_prefetch((const char *)w + rr * rb + bi * (QB) * S + PF_DIST, _MM_HINT_T0);    \
            for (int ib = 0; ib < 8; ib++) {                                                       \
                UNROLL for (int rr = 0; rr < R; rr++) {                                            \
                    __m256 v[4];                                                                   \
                    dq_##NAME(w + rr * rb + bi * (QB) * S, ib, v);                                 \
                    UNROLL for (int q = 0; q < 4; q++) UNROLL for (int tt = 0; tt < T; tt++)       \
                        acc[rr][tt][q & 1] = _mm256_fmadd_ps(                                      \
                            v[q], _mm256_loadu_ps(x + tt * xs + bi * 256 + 32 * ib + 8 * q), acc[rr][tt][q & 1]); \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            y[tt * ys + rr] = hsum16(acc[rr][tt][0], acc[rr][tt][1]);                              \
    }                                                                                              \
    MOE_IQ3_DRIVERS(NAME, avx2, QB)                                                                \
    void moe_wide_block_##NAME##_avx2(const uint8_t *b, float *o) { /* iq3.h */                     \
        for (int ib = 0; ib < 8; ib++) {                                                           \
            __m256 v[4];                                                                           \
            dq_##NAME(b, ib, v);                                                                   \
            wide_store32(o, ib, v);  /* simd_avx2.h */                                             \
        }                                                                                          \
    }

DEF_TILE(iq3_xxs, QB_IQ3_XXS)
DEF_TILE(iq3_s, QB_IQ3_S)
DEF_TILE(iq1_s, QB_IQ1_S)
DEF_TILE(iq1_m, QB_IQ1_M)
