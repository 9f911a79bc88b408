/* quant_avx512.c — AVX-512 kernels, bit-identical to quant_ref.c.
 *
 * One zmm accumulator holds the 16 lanes of the contract: lane l gets
 * k = l, l+16, ... so a 16-value chunk of weights times the matching 16
 * activations is one vfmadd231ps, and hsum16() is the fixed tree.
 *
 * Every format has a "part" dequantizer DQ(row, i, v) that produces values
 * [i*SUBV, (i+1)*SUBV) of a row as NV zmm registers, with the same float
 * operations as the reference (4-bit codes go through a 16-entry table
 * computed per scale with the reference formula, then vpermps: the table
 * entry IS the reference value, so the lookup is exact). One tile routine
 * then computes R rows x T tokens (R, T <= 4, compile-time constants), so
 * each dequantized part feeds up to 4 tokens and 4 independent rows hide the
 * FMA latency in decode. */
#include "quant/quant_internal.h"

#include <immintrin.h>

#include "quant/hsum_avx512.h"
#include "quant/kquant.h"
#include "quant/iq3.h"
#include "quant/iq2.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")


ALWAYS_INLINE __m128i ld128(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)p); }
ALWAYS_INLINE float f16s(const uint8_t *p) { return _cvtsh_ss(moe_rd16(p)); }

static const float K_M8[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
static const float K_0_15[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

/* ---- part dequantizers ---------------------------------------------------- */

/* Q8_0: part = block of 32. w = (float)q * d; d broadcast from moe_f16_f32_tab */
ALWAYS_INLINE void dq_q8_0(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + i * QB_Q8_0 * S;
    const __m512 d = _mm512_set1_ps(moe_f16_f32_tab[moe_rd16(b)]);
    v[0] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(ld128(b + 2))), d);
    v[1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(ld128(b + 18))), d);
}

/* Q4_0: table t[c] = (float)(c-8) * d; vpermps uses the low 4 bits of each index. */
ALWAYS_INLINE void dq_q4_0(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + i * QB_Q4_0 * S;
    const __m512 tab = _mm512_mul_ps(_mm512_loadu_ps(K_M8), _mm512_set1_ps(moe_f16_f32_tab[moe_rd16(b)]));
    const __m512i idx = _mm512_cvtepu8_epi32(ld128(b + 2));
    v[0] = _mm512_permutexvar_ps(idx, tab);
    v[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), tab);
}

/* Q4_1: t[c] = (float)c * d + m (the product, then the sum: two roundings). */
ALWAYS_INLINE void dq_q4_1(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + i * QB_Q4_1 * S;
    const __m512 tab = _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(K_0_15), _mm512_set1_ps(moe_f16_f32_tab[moe_rd16(b)])),
                                     _mm512_set1_ps(moe_f16_f32_tab[moe_rd16(b + 2)]));
    const __m512i idx = _mm512_cvtepu8_epi32(ld128(b + 4));
    v[0] = _mm512_permutexvar_ps(idx, tab);
    v[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), tab);
}

/* IQ4_NL: t[c] = (float)kv[c] * d. */
ALWAYS_INLINE void dq_iq4_nl(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + i * QB_IQ4_NL * S;
    const __m512 tab = _mm512_mul_ps(_mm512_loadu_ps(moe_kvalues_iq4nl_f), _mm512_set1_ps(moe_f16_f32_tab[moe_rd16(b)]));
    const __m512i idx = _mm512_cvtepu8_epi32(ld128(b + 2));
    v[0] = _mm512_permutexvar_ps(idx, tab);
    v[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), tab);
}

/* Q5_0 / Q5_1: a 32-entry table in two zmm (t[c] = (float)(c-16) * d, or
 * (float)c * d + m) and vpermt2ps on the 5-bit codes: the nibble, with bit
 * 4 set from qh through a mask register (bit j of qh: value j). */
static const float K_M16[32] = {-16, -15, -14, -13, -12, -11, -10, -9, -8, -7, -6, -5, -4, -3, -2, -1,
                                0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
ALWAYS_INLINE void dq_q5(const uint8_t *b, __m512 t0, __m512 t1, __m512 *v) {
    uint32_t qh;
    memcpy(&qh, b, 4);
    const __m512i q = _mm512_cvtepu8_epi32(ld128(b + 4)), m15 = _mm512_set1_epi32(15), c16 = _mm512_set1_epi32(16);
    const __m512i lo = _mm512_and_si512(q, m15), hi = _mm512_srli_epi32(q, 4);
    v[0] = _mm512_permutex2var_ps(t0, _mm512_mask_or_epi32(lo, (__mmask16)qh, lo, c16), t1);
    v[1] = _mm512_permutex2var_ps(t0, _mm512_mask_or_epi32(hi, (__mmask16)(qh >> 16), hi, c16), t1);
}
ALWAYS_INLINE void dq_q5_0(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + i * QB_Q5_0 * S;
    const __m512 d = _mm512_set1_ps(moe_f16_f32_tab[moe_rd16(b)]);
    dq_q5(b + 2, _mm512_mul_ps(_mm512_loadu_ps(K_M16), d), _mm512_mul_ps(_mm512_loadu_ps(K_M16 + 16), d), v);
}
ALWAYS_INLINE void dq_q5_1(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + i * QB_Q5_1 * S;
    const __m512 d = _mm512_set1_ps(moe_f16_f32_tab[moe_rd16(b)]), m = _mm512_set1_ps(moe_f16_f32_tab[moe_rd16(b + 2)]);
    dq_q5(b + 4, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(K_M16 + 16), d), m),
          _mm512_add_ps(_mm512_mul_ps(_mm512_add_ps(_mm512_loadu_ps(K_M16 + 16), _mm512_set1_ps(16.0f)), d), m), v);
}

/* MXFP4: t[c] = (float)kv[c] * 2^(e-128). */
ALWAYS_INLINE void dq_mxfp4(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + i * QB_MXFP4 * S;
    const __m512 tab = _mm512_mul_ps(_mm512_loadu_ps(moe_kvalues_fp4_f), _mm512_set1_ps(moe_e8m0_half_tab[b[0]]));
    const __m512i idx = _mm512_cvtepu8_epi32(ld128(b + 1));
    v[0] = _mm512_permutexvar_ps(idx, tab);
    v[1] = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), tab);
}

/* NVFP4: part = block of 64; sub-block s: t[c] = (float)kv[c] * ue4m3_half[d[s]],
 * one row of moe_nvfp4_wtab. Its 8 code bytes become the 16 bytes {b, b >> 4}
 * in an xmm register (cheap 128-bit ops), widened to 16 dword indices;
 * vpermps reads the low 4 bits. The contract's lane order: the wide fill's;
 * the gemv/gemm tiles use dq_nvfp4p below. */
ALWAYS_INLINE void dq_nvfp4(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + i * QB_NVFP4 * S;
    UNROLL for (int s = 0; s < 4; s++) {
        const __m512 tab = _mm512_load_ps(moe_nvfp4_wtab[b[s]]);
        const __m128i q = _mm_loadl_epi64((const __m128i *)(b + 4 + 8 * s));
        const __m512i idx = _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(q, _mm_srli_epi16(q, 4)));
        v[s] = _mm512_permutexvar_ps(idx, tab);
    }
}

/* The same values in permuted lanes, for the gemv/gemm tiles (not the wide
 * fill, which stores the contract's order): physical lane p holds weight
 * NV_PERM[p] of the sub-block. A 64-bit broadcast of the 8 code bytes and one
 * variable shift put every code in the low bits of a dword (lanes 2m and
 * 2m+1 of qword m: byte m%4 and byte m%4+4, nibble m/4), so a sub-block costs
 * one shuffle (the lookup) where widening bytes to dwords took two and two
 * 128-bit ops. The tiles load x through the same permutation (one shuffle
 * per 16 values, shared by the tile's rows) and undo it on the accumulators
 * before the tree, so every lane sums what the contract says, in its order.
 * bench_quant, one core, weights in L2: 12.8-12.9 -> 14.2-14.3 GB/s (a
 * contract-order variant, two masked 32-bit broadcasts and a 32-bit shift,
 * read 12.0 in a throwaway harness where the old code read 12.5). */
static const int32_t NV_PERM[16] __attribute__((aligned(64))) = {0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15};
static const int32_t NV_UNPERM[16] __attribute__((aligned(64))) = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
static const int64_t NV_SHIFT[8] __attribute__((aligned(64))) = {0, 8, 16, 24, 4, 12, 20, 28};
ALWAYS_INLINE void dq_nvfp4p(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + i * QB_NVFP4 * S;
    const __m512i sh = _mm512_load_si512(NV_SHIFT);
    UNROLL for (int s = 0; s < 4; s++) {
        const __m512 tab = _mm512_load_ps(moe_nvfp4_wtab[b[s]]);
        const __m512i idx = _mm512_srlv_epi64(_mm512_set1_epi64((long long)moe_rd64(b + 4 + 8 * s)), sh);
        v[s] = _mm512_permutexvar_ps(idx, tab);
    }
}

/* K-quant super-block state, computed when a row enters a new super-block
 * (part i % 4 == 0) and then read by broadcast loads. Q4_K: st[j] = d*sc_j,
 * st[8+j] = dmin*m_j (the reference's d1 and m1). Q6_K: st[j] = d*sc[j]. */
ALWAYS_INLINE void prep_q4_k(const uint8_t *b, float *st) {
    uint8_t u[16];
    moe_q4k_unpack16(b + 4, u);
    const __m512 dd = _mm512_insertf32x8(_mm512_set1_ps(f16s(b)), _mm256_set1_ps(f16s(b + 2)), 1);
    _mm512_storeu_ps(st, _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(ld128(u)))));
}
ALWAYS_INLINE void prep_q6_k(const uint8_t *b, float *st) {
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(ld128(b + 192)));
    _mm512_storeu_ps(st, _mm512_mul_ps(_mm512_set1_ps(f16s(b + 208)), sc));
}

/* Q4_K: part c = 64 values (sub-blocks 2c, 2c+1) of super-block i/4.
 * t[k] = d1*k - m1: the reference's product and subtraction, per table entry. */
ALWAYS_INLINE void dq_q4_k(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + (i >> 2) * QB_Q4_K * S;
    const int c = (int)(i & 3);
    if (c == 0) prep_q4_k(b, st);
    const __m512 k = _mm512_loadu_ps(K_0_15);
    const __m512 t1 = _mm512_sub_ps(_mm512_mul_ps(k, _mm512_set1_ps(st[2 * c])), _mm512_set1_ps(st[8 + 2 * c]));
    const __m512 t2 = _mm512_sub_ps(_mm512_mul_ps(k, _mm512_set1_ps(st[2 * c + 1])), _mm512_set1_ps(st[9 + 2 * c]));
    const uint8_t *q = b + 16 + 32 * c;
    const __m512i ia = _mm512_cvtepu8_epi32(ld128(q)), ib = _mm512_cvtepu8_epi32(ld128(q + 16));
    v[0] = _mm512_permutexvar_ps(ia, t1);
    v[1] = _mm512_permutexvar_ps(ib, t1);
    v[2] = _mm512_permutexvar_ps(_mm512_srli_epi32(ia, 4), t2);
    v[3] = _mm512_permutexvar_ps(_mm512_srli_epi32(ib, 4), t2);
}

/* Q6_K: part p = 64 values of super-block i/4: half h = p/2, groups
 * g = 2*(p&1), 2*(p&1)+1. w = (d*sc[k/16]) * (float)(q-32). */
ALWAYS_INLINE void dq_q6_k(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + (i >> 2) * QB_Q6_K * S;
    const int p = (int)(i & 3), h = p >> 1, hi = p & 1;
    if (p == 0) prep_q6_k(b, st);
    const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
    /* the 6-bit codes are assembled as bytes in xmm registers (cheap), then
     * sign-extended to 16 dwords */
    const __m128i m15 = _mm_set1_epi8(15), m3 = _mm_set1_epi8(3), c32 = _mm_set1_epi8(32);
    UNROLL for (int gg = 0; gg < 2; gg++) {
        const int g = 2 * hi + gg;
        UNROLL for (int u = 0; u < 2; u++) {
            const __m128i l8 = ld128(ql + 32 * gg + 16 * u), h8 = ld128(qh + 16 * u);
            const __m128i lo = hi ? _mm_and_si128(_mm_srli_epi16(l8, 4), m15) : _mm_and_si128(l8, m15);
            const __m128i hb = _mm_slli_epi16(_mm_and_si128(_mm_srli_epi16(h8, 2 * g), m3), 4);
            const __m128i q = _mm_sub_epi8(_mm_or_si128(lo, hb), c32);
            v[2 * gg + u] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(st[8 * h + 2 * g + u]));
        }
    }
}

/* ---- Q5_K, Q3_K, Q2_K, IQ4_XS (specification: kquant_ref.c) ------------
 * Parts of 64 values, 4 per super-block; the super-block state is set up
 * at part 0 as for Q4_K / Q6_K. */
static const float K_16_31[16] = {16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};

/* Q5_K: the Q4_K header (prep_q4_k: st[j] = d*sc_j, st[8+j] = dmin*m_j);
 * 5-bit codes index two 16-entry tables t[k] = d1*k - m1 (k < 16, k >= 16)
 * through vpermt2ps: each entry is the reference's product and subtraction. */
ALWAYS_INLINE void dq_q5_k(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + (i >> 2) * QB_Q5_K * S;
    const int c = (int)(i & 3);
    if (c == 0) prep_q4_k(b, st);
    const __m512 k0 = _mm512_loadu_ps(K_0_15), k1 = _mm512_loadu_ps(K_16_31);
    const __m512 d1 = _mm512_set1_ps(st[2 * c]), m1 = _mm512_set1_ps(st[8 + 2 * c]);
    const __m512 d2 = _mm512_set1_ps(st[2 * c + 1]), m2 = _mm512_set1_ps(st[9 + 2 * c]);
    const __m512 t1a = _mm512_sub_ps(_mm512_mul_ps(k0, d1), m1), t1b = _mm512_sub_ps(_mm512_mul_ps(k1, d1), m1);
    const __m512 t2a = _mm512_sub_ps(_mm512_mul_ps(k0, d2), m2), t2b = _mm512_sub_ps(_mm512_mul_ps(k1, d2), m2);
    const uint8_t *qs = b + 48 + 32 * c, *qh = b + 16;
    /* 5-bit indices built in dword lanes: vpermt2ps reads bits 0..4 only, so
     * a bit select (vpternlogd) of the nibble and the qh bit moved to bit 4
     * is the whole index */
    const __m512i m15 = _mm512_set1_epi32(15);
    UNROLL for (int u = 0; u < 2; u++) {
        const __m512i ia = _mm512_cvtepu8_epi32(ld128(qs + 16 * u));
        const __m512i ha = _mm512_srli_epi32(_mm512_cvtepu8_epi32(ld128(qh + 16 * u)), 2 * c);
        const __m512i lo = _mm512_ternarylogic_epi32(m15, ia, _mm512_slli_epi32(ha, 4), 0xCA);
        const __m512i hi = _mm512_ternarylogic_epi32(m15, _mm512_srli_epi32(ia, 4), _mm512_slli_epi32(ha, 3), 0xCA);
        v[u] = _mm512_permutex2var_ps(t1a, lo, t1b);
        v[2 + u] = _mm512_permutex2var_ps(t2a, hi, t2b);
    }
}

/* Q3_K: st[j] = d * (s_j - 32). Part p = sub-blocks 4p .. 4p+3 (half h =
 * p/2, shifts j = 2(p&1) + jj); codes u = c | hbit << 2 (0..7, value u - 4:
 * the reference's c - (hbit ? 0 : 4)). Two 16-entry tables per part, lane
 * 8e + u = st[4p + 2t + e] * (u - 4) (table t, sub-block 2t + e of the
 * part): the reference's exact product; a chunk is then one vpermps. */
static const float K_Q3[16] = {-4, -3, -2, -1, 0, 1, 2, 3, -4, -3, -2, -1, 0, 1, 2, 3};
static const int32_t K_SHR2[16] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
static const float K_Q2[16] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
/* Q3_K: the 16 scales minus 32 as int8 (moe_q3k_scales, vectorized): low
 * nibbles of bytes 0..7 then their high nibbles, or'ed with bits 2(j/4),
 * 2(j/4)+1 of byte 8 + j%4 put at bits 4, 5. */
ALWAYS_INLINE __m128i q3k_scales16(const uint8_t *s) {
    const __m128i q = _mm_loadl_epi64((const __m128i *)s), m15 = _mm_set1_epi8(15);
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(q, m15), _mm_and_si128(_mm_srli_epi16(q, 4), m15));
    const __m128i w = _mm_srlv_epi32(_mm_set1_epi32((int)moe_kq_rd32(s + 8)), _mm_setr_epi32(0, 2, 4, 6));
    const __m128i hi = _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi8(3)), 4);
    return _mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32));
}
ALWAYS_INLINE void prep_q3_k(const uint8_t *b, float *st) {
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q3k_scales16(b + 96)));
    _mm512_storeu_ps(st, _mm512_mul_ps(_mm512_set1_ps(f16s(b + 108)), sc));
}
ALWAYS_INLINE void dq_q3_k(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + (i >> 2) * QB_Q3_K * S;
    const int p = (int)(i & 3), h = p >> 1, j0 = 2 * (p & 1);
    if (p == 0) prep_q3_k(b, st);
    const __m512 k = _mm512_loadu_ps(K_Q3);
    const float *dl = st + 4 * p;
    const __m512 t0 = _mm512_mul_ps(_mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(dl[0]), _mm512_set1_ps(dl[1])), k);
    const __m512 t1 = _mm512_mul_ps(_mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(dl[2]), _mm512_set1_ps(dl[3])), k);
    const uint8_t *qs = b + 32 + 32 * h;
    const __m128i m3 = _mm_set1_epi8(3), m4 = _mm_set1_epi8(4), c8 = _mm_set1_epi8(8);
    UNROLL for (int u = 0; u < 2; u++) {
        const __m128i q8 = _mm_srli_epi16(ld128(qs + 16 * u), 2 * j0);    /* shifts j0, j0 + 1 = 0, 2 below */
        const __m128i h8 = _mm_srli_epi16(ld128(b + 16 * u), 4 * h + j0);
        UNROLL for (int jj = 0; jj < 2; jj++) {
            const __m128i c = _mm_and_si128(jj ? _mm_srli_epi16(q8, 2) : q8, m3);
            const __m128i hb = _mm_and_si128(_mm_slli_epi16(h8, 2 - jj), m4);      /* hbit << 2 */
            __m128i x = _mm_or_si128(c, hb);
            if (u) x = _mm_or_si128(x, c8);                                         /* sub-block 2jj + 1 */
            v[2 * jj + u] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(x), jj ? t1 : t0);
        }
    }
}

/* Q2_K: per part one 16-entry table, lane 4q + c = (d*sc)*c - dmin*m of
 * sub-block 4p + q (the reference's two exact products and one rounded
 * subtraction); a chunk is one vpermps. No state. */
ALWAYS_INLINE void dq_q2_k(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    (void)st;
    const uint8_t *b = row + (i >> 2) * QB_Q2_K * S;
    const int p = (int)(i & 3), h = p >> 1, j0 = 2 * (p & 1);
    const __m512i sc = _mm512_permutexvar_epi32(_mm512_loadu_si512(K_SHR2), _mm512_cvtepu8_epi32(ld128(b + 4 * p)));
    const __m512 D = _mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(15)));
    const __m512 M = _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4));
    const __m512 dl = _mm512_mul_ps(_mm512_set1_ps(moe_f16_f32_tab[moe_rd16(b + 80)]), D);
    const __m512 ml = _mm512_mul_ps(_mm512_set1_ps(moe_f16_f32_tab[moe_rd16(b + 82)]), M);
    const __m512 t = _mm512_sub_ps(_mm512_mul_ps(dl, _mm512_loadu_ps(K_Q2)), ml);
    const uint8_t *qs = b + 16 + 32 * h;
    const __m128i m3 = _mm_set1_epi8(3);
    UNROLL for (int u = 0; u < 2; u++) {
        const __m128i q8 = _mm_srli_epi16(ld128(qs + 16 * u), 2 * j0);
        UNROLL for (int jj = 0; jj < 2; jj++) {
            const __m128i c = _mm_and_si128(jj ? _mm_srli_epi16(q8, 2) : q8, m3);
            const __m128i x = _mm_or_si128(c, _mm_set1_epi8((char)(4 * (2 * jj + u))));
            v[2 * jj + u] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(x), t);
        }
    }
}

/* IQ4_XS: st[ib] = d * (ls_ib - 32); sub-block ib: t[c] = kv[c] * st[ib]. */
ALWAYS_INLINE void prep_iq4_xs(const uint8_t *b, float *st) {
    const float d = f16s(b);
    for (int ib = 0; ib < 8; ib++) st[ib] = d * (float)moe_iq4xs_scale(b, ib);
}
ALWAYS_INLINE void dq_iq4_xs(const uint8_t *row, int64_t i, __m512 *v, float *st, const int S) {
    const uint8_t *b = row + (i >> 2) * QB_IQ4_XS * S;
    const int p = (int)(i & 3);
    if (p == 0) prep_iq4_xs(b, st);
    const __m512 kv = _mm512_loadu_ps(moe_kq_iq4nl_f);
    UNROLL for (int s = 0; s < 2; s++) {
        const int ib = 2 * p + s;
        const __m512 tab = _mm512_mul_ps(kv, _mm512_set1_ps(st[ib]));
        const __m512i idx = _mm512_cvtepu8_epi32(ld128(b + 8 + 16 * ib));
        v[2 * s] = _mm512_permutexvar_ps(idx, tab);
        v[2 * s + 1] = _mm512_permutexvar_ps(_mm512_srli_epi32(idx, 4), tab);
    }
}

/* ---- the R x T tile for block formats ------------------------------------ */

/* Software prefetch distance in bytes ahead of each row's read position.
 * Decode streams weights from DRAM; the hardware prefetchers alone left one
 * core at about half its in-cache speed (measured 4-6 vs 10-11 GB/s for
 * Q4_0/Q4_K/NVFP4 lm-head rows); 8 KB ahead closes the gap (2-4 KB: partly,
 * 16 KB: no better). Prefetches never fault, so running past the matrix end
 * is harmless (it wastes at most 8 KB of bandwidth per call). */
#define PF_DIST 8192

/* PERM: DQ gives NV_PERM's lane order (dq_nvfp4p); x is permuted alike and
 * the accumulators put back before hsum16. */
#define DEF_BLOCK_KERNELS(NAME, SUBV, NV, DQ, PB, QBYTES) DEF_BLOCK_KERNELS_P(NAME, SUBV, NV, DQ, PB, QBYTES, 0)
#define DEF_BLOCK_KERNELS_P(NAME, SUBV, NV, DQ, PB, QBYTES, PERM)                                       \
    ALWAYS_INLINE void tile_##NAME(const uint8_t *w, size_t rb, const float *x, size_t xs,         \
                                   float *y, size_t ys, int64_t n, const int R, const int T,      \
                                   const int S) {                                                  \
        __m512 acc[4][4];                                                                          \
        UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            acc[rr][tt] = _mm512_setzero_ps();                                                     \
        float st[4][16]; /* per-row state of a K-quant super-block */                          \
        const int64_t ns = n / (SUBV);                                                             \
        for (int64_t i = 0; i < ns; i++) {                                                         \
            __m512 v[4][NV];                                                                       \
            UNROLL for (int rr = 0; rr < R; rr++)                                                  \
                _mm_prefetch((const char *)w + rr * rb + i * (PB) * S + PF_DIST, _MM_HINT_T0);         \
            UNROLL for (int rr = 0; rr < R; rr++) DQ(w + rr * rb, i, v[rr], st[rr], S);                       \
            UNROLL for (int q = 0; q < NV; q++) UNROLL for (int tt = 0; tt < T; tt++) {            \
                __m512 xv = _mm512_loadu_ps(x + tt * xs + i * (SUBV) + 16 * q);                   \
                if (PERM) xv = _mm512_permutexvar_ps(_mm512_load_si512(NV_PERM), xv);              \
                UNROLL for (int rr = 0; rr < R; rr++)                                              \
                    acc[rr][tt] = _mm512_fmadd_ps(v[rr][q], xv, acc[rr][tt]);                      \
            }                                                                                      \
        }                                                                                          \
        UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            y[tt * ys + rr] = hsum16(PERM ? _mm512_permutexvar_ps(_mm512_load_si512(NV_UNPERM), acc[rr][tt]) \
                                          : acc[rr][tt]);                                          \
    }                                                                                              \
    DEF_GEMM_BODY(NAME)                                                                            \
    DEF_BLOCK_DRIVERS(NAME, QBYTES)

/* gemv (F32/F16/BF16 rows): 4 rows per tile, but rows r, r+q, r+2q, r+3q
 * (q = nrows/4), not 4 adjacent ones: on this machine adjacent rows (streams
 * a few KB apart) defeat the hardware prefetcher, far-apart ones do not.
 * Measured (bench_quant, 2 threads, BF16): 2048x512 18.5 -> 33 GB/s, the
 * other shapes +10 %; priced on the laguna BF16+NVFP4 bench model: decode
 * window x1.13 [1.07, 1.17]. A row's value does not depend on its tile mates.
 * gemm: tokens in blocks of 32 (their activations stay in L2 while the rows
 * stream by), 4 rows x 4 tokens per tile. */
#define DEF_DRIVERS(NAME)                                                                          \
    static void gemv_##NAME(const void *w, size_t rb, int64_t nrows, const float *x, float *y,     \
                            int64_t n) {                                                           \
        const uint8_t *W = w;                                                                      \
        int64_t r = 0;                                                                             \
        const int64_t q = nrows / 4;                                                               \
        for (; r < q; r++) tile_##NAME(W + r * rb, (size_t)q * rb, x, 0, y + r, 0, (size_t)q, n, 4, 1); \
        for (r = 4 * q; r < nrows; r++) tile_##NAME(W + r * rb, rb, x, 0, y + r, 0, 1, n, 1, 1);  \
    }                                                                                              \
    ALWAYS_INLINE void group_##NAME(const uint8_t *W, int64_t r, size_t rb, const float *x, size_t xs, \
                                    float *y, size_t ys, int64_t n, const int T) {                 \
        tile_##NAME(W + r * rb, rb, x, xs, y, ys, 1, n, 4, T);                                     \
    }                                                                                              \
    MOE_DEF_PLAIN_GEMM(gemm_##NAME, group_##NAME, tile_##NAME, 4, 4)

/* gemm over plain rows (x4 = 0) or x4-interleaved groups (x4 = 1): 4 rows x
 * 4 tokens per tile, tokens in blocks of 32; the last 1-3 tokens of a block
 * in one 4-row tile of that many tokens (GEMM_REM_TILE), so the rows are
 * dequantized once for them too: a batched decode step has 2-8 tokens per
 * product, and one 4x1 tile per left-over token nearly doubled its cost at
 * 2, 3, 5 and 6 tokens. Each output's sum is the same whatever the tile. */
#define GEMM_REM_TILE(NAME, WR, RS, REM, S)                                                        \
    do {                                                                                           \
        if ((REM) == 3) tile_##NAME(WR, RS, x + t * xs, xs, y + t * ys + r, ys, n, 4, 3, S);       \
        else if ((REM) == 2) tile_##NAME(WR, RS, x + t * xs, xs, y + t * ys + r, ys, n, 4, 2, S);  \
        else if ((REM) == 1) tile_##NAME(WR, RS, x + t * xs, xs, y + t * ys + r, ys, n, 4, 1, S);  \
    } while (0)
#define DEF_GEMM_BODY(NAME)                                                                        \
    ALWAYS_INLINE void gemm_body_##NAME(const void *w, size_t rb, int64_t nrows, const float *x,   \
                                        size_t xs, int64_t ntok, float *y, size_t ys, int64_t n,   \
                                        const int x4, const size_t qbytes) {                       \
        const uint8_t *W = w;                                                                      \
        const size_t rs = x4 ? qbytes : rb;                                                        \
        for (int64_t t0 = 0; t0 < ntok; t0 += 32) {                                                \
            const int64_t t1 = t0 + 32 < ntok ? t0 + 32 : ntok;                                    \
            int64_t r = 0;                                                                         \
            for (; r + 4 <= nrows; r += 4) {                                                       \
                int64_t t = t0;                                                                    \
                if (x4) {                                                                          \
                    for (; t + 4 <= t1; t += 4)                                                    \
                        tile_##NAME(W + r * rb, rs, x + t * xs, xs, y + t * ys + r, ys, n, 4, 4, 4); \
                    GEMM_REM_TILE(NAME, W + r * rb, rs, t1 - t, 4);                                \
                } else {                                                                           \
                    for (; t + 4 <= t1; t += 4)                                                    \
                        tile_##NAME(W + r * rb, rb, x + t * xs, xs, y + t * ys + r, ys, n, 4, 4, 1); \
                    GEMM_REM_TILE(NAME, W + r * rb, rb, t1 - t, 1);                                \
                }                                                                                  \
            }                                                                                      \
            for (; r < nrows; r++) {                                                               \
                int64_t t = t0;                                                                    \
                for (; t + 4 <= t1; t += 4)                                                        \
                    tile_##NAME(W + r * rb, rb, x + t * xs, xs, y + t * ys + r, ys, n, 1, 4, 1);   \
                for (; t < t1; t++)                                                                \
                    tile_##NAME(W + r * rb, rb, x + t * xs, xs, y + t * ys + r, ys, n, 1, 1, 1);   \
            }                                                                                      \
        }                                                                                          \
    }

DEF_BLOCK_KERNELS(q8_0, 32, 2, dq_q8_0, QB_Q8_0, QB_Q8_0)
DEF_BLOCK_KERNELS(q4_0, 32, 2, dq_q4_0, QB_Q4_0, QB_Q4_0)
DEF_BLOCK_KERNELS(q4_1, 32, 2, dq_q4_1, QB_Q4_1, QB_Q4_1)
DEF_BLOCK_KERNELS(q5_0, 32, 2, dq_q5_0, QB_Q5_0, QB_Q5_0)
DEF_BLOCK_KERNELS(q5_1, 32, 2, dq_q5_1, QB_Q5_1, QB_Q5_1)
DEF_BLOCK_KERNELS(iq4_nl, 32, 2, dq_iq4_nl, QB_IQ4_NL, QB_IQ4_NL)
DEF_BLOCK_KERNELS(mxfp4, 32, 2, dq_mxfp4, QB_MXFP4, QB_MXFP4)
DEF_BLOCK_KERNELS_P(nvfp4, 64, 4, dq_nvfp4p, QB_NVFP4, QB_NVFP4, 1)
DEF_BLOCK_KERNELS(q4_k, 64, 4, dq_q4_k, QB_Q4_K / 4, QB_Q4_K)
DEF_BLOCK_KERNELS(q6_k, 64, 4, dq_q6_k, QB_Q6_K / 4, QB_Q6_K)
DEF_BLOCK_KERNELS(q5_k, 64, 4, dq_q5_k, QB_Q5_K / 4, QB_Q5_K)
DEF_BLOCK_KERNELS(q3_k, 64, 4, dq_q3_k, QB_Q3_K / 4, QB_Q3_K)
DEF_BLOCK_KERNELS(q2_k, 64, 4, dq_q2_k, QB_Q2_K / 4, QB_Q2_K)
DEF_BLOCK_KERNELS(iq4_xs, 64, 4, dq_iq4_xs, QB_IQ4_XS / 4, QB_IQ4_XS)

/* ---- F32 / F16 / BF16: any n; the tail uses masked FMAs so that lanes past
 * n keep their accumulator untouched (an FMA with zeros would turn -0 into +0). */

ALWAYS_INLINE __m512 ld_f32(const uint8_t *row, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, (const float *)row + k);
}
ALWAYS_INLINE __m512 ld_f16(const uint8_t *row, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
}
ALWAYS_INLINE __m512 ld_bf16(const uint8_t *row, int64_t k, __mmask16 m) {
    const __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
}

#define DEF_PLAIN_KERNELS(NAME, LD, ES)                                                            \
    ALWAYS_INLINE void tile_##NAME(const uint8_t *w, size_t rb, const float *x, size_t xs,         \
                                   float *y, size_t ys, size_t yr, int64_t n, const int R,         \
                                   const int T) {                                                  \
        __m512 acc[4][4];                                                                          \
        UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            acc[rr][tt] = _mm512_setzero_ps();                                                     \
        int64_t k = 0;                                                                             \
        for (; k + 16 <= n; k += 16) {                                                             \
            __m512 v[4];                                                                           \
            UNROLL for (int rr = 0; rr < R; rr++)                                                  \
                _mm_prefetch((const char *)w + rr * rb + k * (ES) + PF_DIST, _MM_HINT_T0);         \
            UNROLL for (int rr = 0; rr < R; rr++) v[rr] = LD(w + rr * rb, k, 0xFFFF);              \
            UNROLL for (int tt = 0; tt < T; tt++) {                                                \
                const __m512 xv = _mm512_loadu_ps(x + tt * xs + k);                                \
                UNROLL for (int rr = 0; rr < R; rr++)                                              \
                    acc[rr][tt] = _mm512_fmadd_ps(v[rr], xv, acc[rr][tt]);                         \
            }                                                                                      \
        }                                                                                          \
        if (k < n) {                                                                               \
            const __mmask16 m = (__mmask16)((1u << (n - k)) - 1);                                  \
            __m512 v[4];                                                                           \
            UNROLL for (int rr = 0; rr < R; rr++) v[rr] = LD(w + rr * rb, k, m);                   \
            UNROLL for (int tt = 0; tt < T; tt++) {                                                \
                const __m512 xv = _mm512_maskz_loadu_ps(m, x + tt * xs + k);                       \
                UNROLL for (int rr = 0; rr < R; rr++)                                              \
                    acc[rr][tt] = _mm512_mask3_fmadd_ps(v[rr], xv, acc[rr][tt], m);                \
            }                                                                                      \
        }                                                                                          \
        UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            y[tt * ys + rr * yr] = hsum16(acc[rr][tt]);                                            \
    }                                                                                              \
    DEF_DRIVERS(NAME)

DEF_PLAIN_KERNELS(f32, ld_f32, 4)
DEF_PLAIN_KERNELS(f16, ld_f16, 2)
DEF_PLAIN_KERNELS(bf16, ld_bf16, 2)

/* The x4 layout of F32/F16/BF16 (quant.h): in a group of 4 rows, the 32-value
 * run c of row rr sits at (4c + rr) * 32 * ES bytes, so a 4-row tile reads one
 * sequential stream. The far-apart rows of gemv above read four, and this
 * VM's bandwidth falls with the number of streams (docs/PERFORMANCE.md).
 * Each accumulator gets the FMAs of tile_NAME in its order (k, then k + 16),
 * so the bits are the plain layout's. n % 32 == 0 (moe_x4_fits). */
#define DEF_PLAIN_X4(NAME, LD, ES)                                                                 \
    ALWAYS_INLINE void tile_x4_##NAME(const uint8_t *g, const float *x, size_t xs, float *y,       \
                                      size_t ys, int64_t n, const int T) {                         \
        __m512 acc[4][4];                                                                          \
        UNROLL for (int rr = 0; rr < 4; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            acc[rr][tt] = _mm512_setzero_ps();                                                     \
        for (int64_t k = 0; k < n; k += 32) {                                                      \
            const uint8_t *p = g + k * 4 * (ES);              /* run k/32 of the group */          \
            UNROLL for (int o = 0; o < 128 * (ES); o += 64)                                        \
                _mm_prefetch((const char *)p + PF_DIST + o, _MM_HINT_T0);                          \
            UNROLL for (int h = 0; h < 2; h++) {                                                   \
                __m512 v[4];                                                                       \
                UNROLL for (int rr = 0; rr < 4; rr++) v[rr] = LD(p + rr * 32 * (ES), 16 * h, 0xFFFF); \
                UNROLL for (int tt = 0; tt < T; tt++) {                                            \
                    const __m512 xv = _mm512_loadu_ps(x + tt * xs + k + 16 * h);                   \
                    UNROLL for (int rr = 0; rr < 4; rr++)                                          \
                        acc[rr][tt] = _mm512_fmadd_ps(v[rr], xv, acc[rr][tt]);                     \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        UNROLL for (int rr = 0; rr < 4; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            y[tt * ys + rr] = hsum16(acc[rr][tt]);                                                 \
    }                                                                                              \
    static void gemv_x4_##NAME(const void *w, size_t rb, int64_t nrows, const float *x, float *y,  \
                               int64_t n) {                                                        \
        const uint8_t *W = w;                                                                      \
        int64_t r = 0;                                                                             \
        for (; r + 4 <= nrows; r += 4) tile_x4_##NAME(W + r * rb, x, 0, y + r, 0, n, 1);           \
        for (; r < nrows; r++) tile_##NAME(W + r * rb, rb, x, 0, y + r, 0, 1, n, 1, 1);            \
    }                                                                                              \
    ALWAYS_INLINE void group_x4_##NAME(const uint8_t *W, int64_t r, size_t rb, const float *x,     \
                                       size_t xs, float *y, size_t ys, int64_t n, const int T) {   \
        tile_x4_##NAME(W + r * rb, x, xs, y, ys, n, T);                                            \
    }                                                                                              \
    MOE_DEF_PLAIN_GEMM(gemm_x4_##NAME, group_x4_##NAME, tile_##NAME, 4, 4)

DEF_PLAIN_X4(f32, ld_f32, 4)
DEF_PLAIN_X4(f16, ld_f16, 2)
DEF_PLAIN_X4(bf16, ld_bf16, 2)

static float dot_f32_512(const float *a, const float *b, int64_t n) {
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
    if (k < n) {
        const __mmask16 m = (__mmask16)((1u << (n - k)) - 1);
        acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), acc, m);
    }
    return hsum16(acc);
}

static void axpy_f32_512(float a, const float *x, float *y, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        _mm512_storeu_ps(y + k, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + k), _mm512_loadu_ps(y + k)));
    if (k < n) {
        const __mmask16 m = (__mmask16)((1u << (n - k)) - 1);
        _mm512_mask_storeu_ps(y + k, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + k), _mm512_maskz_loadu_ps(m, y + k)));
    }
}

/* ---- gemm_wide (flag gemm_wide): the prefill GEMM over FP32 activations ----
 * The 4x4 tile above dequantizes its 4 rows again for every 4 tokens (for
 * Q8_0 a multiply per 16 weights next to 4 FMAs, on the same two pipes), and
 * its 16 horizontal sums cost about as much as 8 k-steps: the expert GEMMs
 * of a prompt ran at 65-75 % of the FMA peak. Here each group of 4 rows is
 * dequantized once per block of up to WIDE_TB tokens, WIDE_KC values at a
 * time, into a buffer of exact FP32 weights laid out [k/16][row][16] (16 KB,
 * L1), and 4-row x 6-token tiles (24 accumulators, 4 weight and 1 activation
 * register) stream it; their horizontal sums are taken 16 at a time by one
 * shuffle tree (hsum16x16, hsum_avx512.h). A row longer than WIDE_KC is
 * done in chunks, the accumulators parked in memory between them (exact).
 * Same bits as every other kernel: the buffer holds the DQ/LD values, each
 * lane accumulates its k in increasing order with one FMA, and hsum16x16
 * adds exactly the pairs of quant.h's tree, lower lane first. */
/* 4 rows x T tokens over nk 16-value steps of the buffer wb. first: start
 * from zero (else from the accumulators parked at sp); last: reduce and
 * store y[t*ys + r] for r < R (else park the accumulators at sp). */
ALWAYS_INLINE void wide_tile(const float *wb, int64_t nk, const float *x, size_t xs, float *sp, const int first,
                             const int last, float *y, size_t ys, const int R, const int T) {
    __m512 acc[4][6];
    UNROLL for (int rr = 0; rr < 4; rr++) UNROLL for (int tt = 0; tt < T; tt++)
        acc[rr][tt] = first ? _mm512_setzero_ps() : _mm512_load_ps(sp + (rr * 6 + tt) * 16);
    for (int64_t j = 0; j < nk; j++) {
        const float *wj = wb + j * 64;
        const __m512 w0 = _mm512_load_ps(wj), w1 = _mm512_load_ps(wj + 16);
        const __m512 w2 = _mm512_load_ps(wj + 32), w3 = _mm512_load_ps(wj + 48);
        UNROLL for (int tt = 0; tt < T; tt++) {
            const __m512 xv = _mm512_loadu_ps(x + tt * xs + j * 16);
            acc[0][tt] = _mm512_fmadd_ps(w0, xv, acc[0][tt]);
            acc[1][tt] = _mm512_fmadd_ps(w1, xv, acc[1][tt]);
            acc[2][tt] = _mm512_fmadd_ps(w2, xv, acc[2][tt]);
            acc[3][tt] = _mm512_fmadd_ps(w3, xv, acc[3][tt]);
        }
    }
    if (!last) {
        UNROLL for (int rr = 0; rr < 4; rr++) UNROLL for (int tt = 0; tt < T; tt++)
            _mm512_store_ps(sp + (rr * 6 + tt) * 16, acc[rr][tt]);
        return;
    }
    const __mmask8 m = (__mmask8)((1u << R) - 1);
    UNROLL for (int t0 = 0; t0 < T; t0 += 4) {   /* tokens t0..t0+3: slot 4*i + row */
        __m512 a[16];
        UNROLL for (int i = 0; i < 4; i++) UNROLL for (int rr = 0; rr < 4; rr++)
            a[4 * i + rr] = t0 + i < T ? acc[rr][t0 + i] : _mm512_setzero_ps();
        const __m512 s = hsum16x16(a);
        float *yt = y + (size_t)t0 * ys;
        if (R == 4) {
            _mm_storeu_ps(yt, _mm512_castps512_ps128(s));
            if (t0 + 1 < T) _mm_storeu_ps(yt + ys, _mm512_extractf32x4_ps(s, 1));
            if (t0 + 2 < T) _mm_storeu_ps(yt + 2 * ys, _mm512_extractf32x4_ps(s, 2));
            if (t0 + 3 < T) _mm_storeu_ps(yt + 3 * ys, _mm512_extractf32x4_ps(s, 3));
        } else {
            _mm_mask_storeu_ps(yt, m, _mm512_castps512_ps128(s));
            if (t0 + 1 < T) _mm_mask_storeu_ps(yt + ys, m, _mm512_extractf32x4_ps(s, 1));
            if (t0 + 2 < T) _mm_mask_storeu_ps(yt + 2 * ys, m, _mm512_extractf32x4_ps(s, 2));
            if (t0 + 3 < T) _mm_mask_storeu_ps(yt + 3 * ys, m, _mm512_extractf32x4_ps(s, 3));
        }
    }
}

/* All nt tokens of a block against one dequantized chunk: 6-token tiles,
 * then one tile of the 1-5 left over (R: 4 for the stores, or fewer). */
ALWAYS_INLINE void wide_tiles_r(const float *wb, int64_t nk, const float *x, size_t xs, int64_t nt, float *sp,
                                int first, int last, float *y, size_t ys, const int R) {
    int64_t t = 0;
    for (; t + 6 <= nt; t += 6, sp += 24 * 16) wide_tile(wb, nk, x + t * xs, xs, sp, first, last, y + t * ys, ys, R, 6);
    switch (nt - t) {
    case 5: wide_tile(wb, nk, x + t * xs, xs, sp, first, last, y + t * ys, ys, R, 5); break;
    case 4: wide_tile(wb, nk, x + t * xs, xs, sp, first, last, y + t * ys, ys, R, 4); break;
    case 3: wide_tile(wb, nk, x + t * xs, xs, sp, first, last, y + t * ys, ys, R, 3); break;
    case 2: wide_tile(wb, nk, x + t * xs, xs, sp, first, last, y + t * ys, ys, R, 2); break;
    case 1: wide_tile(wb, nk, x + t * xs, xs, sp, first, last, y + t * ys, ys, R, 1); break;
    default: break;
    }
}
MOE_DEF_WIDE_TILES

/* one part of one row into the buffer (quant_internal.h: DEF_WIDE_FILL) */
#define WIDE_PART(NAME, NV, row, i, st, S, o)                                                      \
    do {                                                                                           \
        __m512 v_[NV];                                                                             \
        dq_##NAME(row, i, v_, st, S);                                                              \
        UNROLL for (int q_ = 0; q_ < (NV); q_++) _mm512_store_ps((o) + q_ * 64, v_[q_]);           \
    } while (0)
MOE_WIDE_FORMATS(DEF_WIDE_BLOCK)
MOE_KQ_WIDE_FORMATS(DEF_WIDE_BLOCK)

/* F32 rows (the routers): a row length that is not a multiple of 16 takes
 * the 4x4 kernel (its masked tail keeps -0 accumulators intact; zero-padded
 * buffer lanes would not). BF16 (gpt-oss's attention): the 4x4 tile spends
 * two conversion uops per weight vector (a zero-extend on port 5, a shift
 * on port 0: the FMA ports at this level) for 4 FMAs; the fill pass converts
 * a chunk once for up to WIDE_TB tokens. F16 keeps the 4x4 kernel (it
 * measured 5-20 % faster than a fill pass in bench_quant's GEMM rows). */
#define DEF_WIDE_PLAIN(NAME, LD, ES)                                                               \
    ALWAYS_INLINE void fill_##NAME(const uint8_t *g, size_t rs, int S, int R, int64_t k0,          \
                                   int64_t kc, float *wb, float (*st)[16]) {                       \
        (void)st;                                                                                  \
        for (int64_t k = k0; k < k0 + kc; k += 16)                                                 \
            UNROLL for (int rr = 0; rr < 4; rr++) {                                                \
                if (rr >= R) break;                                                                \
                /* an x4 group (S == 4): value k of row rr is in run k/32, 4 runs apart */         \
                const uint8_t *row = g + rr * rs + (S == 4 ? (size_t)(k & ~(int64_t)31) * 3 * (ES) : 0); \
                _mm512_store_ps(wb + ((k - k0) / 16 * 4 + rr) * 16, LD(row, k, 0xFFFF));           \
            }                                                                                      \
    }                                                                                              \
    DEF_WIDE_BODY(NAME, fill_##NAME, 32 * (ES))                                                    \
    static void gemm_wide_##NAME(const void *w, size_t rb, int64_t nrows, const float *x, size_t xs, \
                                 int64_t ntok, float *y, size_t ys, int64_t n) {                   \
        if (n % 16) gemm_##NAME(w, rb, nrows, x, xs, ntok, y, ys, n);                              \
        else gemm_wide_body_##NAME(w, rb, nrows, x, xs, ntok, y, ys, n, 0);                        \
    }                                                                                              \
    static void gemm_wide_x4_##NAME(const void *w, size_t rb, int64_t nrows, const float *x,       \
                                    size_t xs, int64_t ntok, float *y, size_t ys, int64_t n) {     \
        gemm_wide_body_##NAME(w, rb, nrows, x, xs, ntok, y, ys, n, 1);   /* n % 32 == 0 */        \
    }

DEF_WIDE_PLAIN(f32, ld_f32, 4)
DEF_WIDE_PLAIN(bf16, ld_bf16, 2)

#define ENTRY(id, name) .gemv[id] = gemv_##name, .gemm[id] = gemm_##name
#define ENTRY_X4(id, name) .gemv_x4[id] = gemv_x4_##name, .gemm_x4[id] = gemm_x4_##name
/* min: the fewest tokens for which the wide kernel beats the 4-token tile
 * (moe_kernels.wide_min_tokens): F32 16 (the tile reads F32 with no
 * dequantization to save), the 64-value-part formats Q4_K / Q6_K / NVFP4 5
 * (a costly dequantization), the other formats 10; bench/bench_gemm_small */
#define ENTRY_WIDE_X4(id, name, min) \
    .gemm_wide[id] = gemm_wide_##name, .gemm_wide_x4[id] = gemm_wide_x4_##name, .wide_min_tokens[id] = (min)
const moe_kernels moe_kernels_avx512_tab = {
    .isa = MOE_ISA_AVX512, .name = "avx512",
    ENTRY(MOE_T_F32, f32), ENTRY(MOE_T_F16, f16), ENTRY(MOE_T_BF16, bf16),
    ENTRY(MOE_T_Q8_0, q8_0), ENTRY(MOE_T_Q4_0, q4_0), ENTRY(MOE_T_Q4_K, q4_k),
    ENTRY(MOE_T_Q4_1, q4_1), ENTRY(MOE_T_Q5_0, q5_0), ENTRY(MOE_T_Q5_1, q5_1), ENTRY(MOE_T_IQ4_NL, iq4_nl),
    ENTRY(MOE_T_Q6_K, q6_k), ENTRY(MOE_T_MXFP4, mxfp4), ENTRY(MOE_T_NVFP4, nvfp4),
    ENTRY_X4(MOE_T_F32, f32), ENTRY_X4(MOE_T_F16, f16), ENTRY_X4(MOE_T_BF16, bf16),
    ENTRY_X4(MOE_T_Q8_0, q8_0), ENTRY_X4(MOE_T_Q4_0, q4_0), ENTRY_X4(MOE_T_Q4_K, q4_k),
    ENTRY_X4(MOE_T_Q4_1, q4_1), ENTRY_X4(MOE_T_Q5_0, q5_0), ENTRY_X4(MOE_T_Q5_1, q5_1), ENTRY_X4(MOE_T_IQ4_NL, iq4_nl),
    ENTRY_X4(MOE_T_Q6_K, q6_k), ENTRY_X4(MOE_T_MXFP4, mxfp4), ENTRY_X4(MOE_T_NVFP4, nvfp4),
    ENTRY_WIDE_X4(MOE_T_F32, f32, 16), ENTRY_WIDE_X4(MOE_T_BF16, bf16, 10),
    ENTRY_WIDE_X4(MOE_T_Q8_0, q8_0, 10), ENTRY_WIDE_X4(MOE_T_Q4_0, q4_0, 10), ENTRY_WIDE_X4(MOE_T_Q4_K, q4_k, 5),
    ENTRY_WIDE_X4(MOE_T_Q4_1, q4_1, 10), ENTRY_WIDE_X4(MOE_T_Q5_0, q5_0, 10), ENTRY_WIDE_X4(MOE_T_Q5_1, q5_1, 10),
    ENTRY_WIDE_X4(MOE_T_IQ4_NL, iq4_nl, 10),
    ENTRY_WIDE_X4(MOE_T_Q6_K, q6_k, 5), ENTRY_WIDE_X4(MOE_T_MXFP4, mxfp4, 10), ENTRY_WIDE_X4(MOE_T_NVFP4, nvfp4, 5),
    .dot_f32 = dot_f32_512, .axpy_f32 = axpy_f32_512,
    A8_ENTRY(MOE_T_Q8_0, q8_0, avx512), A8_ENTRY(MOE_T_NVFP4, nvfp4, avx512),
    A8_ENTRY(MOE_T_MXFP4, mxfp4, avx512), A8_ENTRY(MOE_T_Q4_0, q4_0, avx512), A8_ENTRY(MOE_T_Q4_K, q4_k, avx512),
    A8_ENTRY(MOE_T_Q6_K, q6_k, avx512),
    A8_ENTRY(MOE_T_Q4_1, q4_1, avx512), A8_ENTRY(MOE_T_Q5_0, q5_0, avx512), A8_ENTRY(MOE_T_Q5_1, q5_1, avx512),
    A8_ENTRY(MOE_T_IQ4_NL, iq4_nl, avx512),
    A8_ENTRY(MOE_T_Q5_K, q5_k, avx512), A8_ENTRY(MOE_T_Q3_K, q3_k, avx512), A8_ENTRY(MOE_T_Q2_K, q2_k, avx512),
    A8_ENTRY(MOE_T_IQ4_XS, iq4_xs, avx512),
    A8IQ_ENTRIES(avx512),  /* the i-quants: act8_iq_*.c */
    ENTRY(MOE_T_Q5_K, q5_k), ENTRY_X4(MOE_T_Q5_K, q5_k), ENTRY_WIDE_X4(MOE_T_Q5_K, q5_k, 10),
    ENTRY(MOE_T_Q3_K, q3_k), ENTRY_X4(MOE_T_Q3_K, q3_k), ENTRY_WIDE_X4(MOE_T_Q3_K, q3_k, 10),
    ENTRY(MOE_T_Q2_K, q2_k), ENTRY_X4(MOE_T_Q2_K, q2_k), ENTRY_WIDE_X4(MOE_T_Q2_K, q2_k, 10),
    ENTRY(MOE_T_IQ4_XS, iq4_xs), ENTRY_X4(MOE_T_IQ4_XS, iq4_xs), ENTRY_WIDE_X4(MOE_T_IQ4_XS, iq4_xs, 10),
    MOE_IQ3_ENTRY(MOE_T_IQ3_XXS, iq3_xxs, avx512), MOE_IQ3_ENTRY(MOE_T_IQ3_S, iq3_s, avx512),  /* iq3_avx512.c */
    MOE_IQ3_ENTRY(MOE_T_IQ1_S, iq1_s, avx512), MOE_IQ3_ENTRY(MOE_T_IQ1_M, iq1_m, avx512),
    .quantize_act8 = moe_quantize_act8_avx512,
    IQ2_ENTRIES(avx512),  /* IQ2_XXS, IQ2_XS, IQ2_S: iq2_avx512.c */
};
