/* quant_avx2.c — AVX2/FMA/F16C kernels, bit-identical to quant_ref.c.
 *
 * The 16 lanes of the contract are two ymm accumulators: "lo" holds lanes
 * 0..7 and "hi" lanes 8..15, so a 16-value chunk is two vfmadd231ps and the
 * tree starts with lo + hi. Dequantizers produce each 16-value chunk as a
 * (lo, hi) pair with the reference's float operations; 4-bit FP codes are
 * mapped to ggml's int8 kvalues with vpshufb, then converted and scaled
 * (int -> float is exact, so it is the same single product). */
#include "quant/quant_internal.h"
#include "quant/kquant.h"
#include "quant/iq3.h"
#include "quant/iq2.h"

#include <immintrin.h>

#include "quant/simd_avx2.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

ALWAYS_INLINE __m128i ld64(const uint8_t *p) { return _mm_loadl_epi64((const __m128i *)p); }
ALWAYS_INLINE __m128i ld128(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)p); }
ALWAYS_INLINE float f16s(const uint8_t *p) { return _cvtsh_ss(moe_rd16(p)); }
/* 8 bytes (low 64 bits of b) -> 8 floats */
ALWAYS_INLINE __m256 u8f(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)); }
ALWAYS_INLINE __m256 i8f(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)); }

/* ---- dequantizers, one vector at a time: dq_NAME(row, i, q, st, S) is
 * vector q of part i (q = 2c is lanes 0..7 and q = 2c + 1 lanes 8..15 of the
 * part's 16-value chunk c), with the reference's float operations. The tile
 * calls it for q = 0, 1, ... and feeds each vector to its FMAs at once, so
 * a row's part is never held whole (why: the tile, below). The loads and
 * nibble masks that vectors of one part share are computed once (common
 * subexpressions of the unrolled calls). A K-quant part (64 of a super-block's 256 values)
 * reads the per-row state st[] that vector 0 of the block's first part
 * fills.
 *
 * Codes are worked on as 16 bytes repeated in both 128-bit lanes
 * (ld128x2), and 8 of them become 8 int32 lanes by an in-lane byte
 * shuffle: vpmovzxbd / vpmovsxbd from a register is a lane-crossing
 * op that Zen 3 issues about once per 1.4 cycles, the shuffle twice per
 * cycle, and it was the FP32 K-quant gemv's bottleneck there. The integers
 * are the same, so are the floats. */

/* the low (nib = 0) or high nibbles of each byte */
ALWAYS_INLINE __m256i nibbles(__m256i q, const int nib) {
    return _mm256_and_si256(nib ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(15));
}
#define Z (-128) /* a vpshufb index that writes 0 */
/* bytes 8h..8h+7 of a both-lanes vector as 8 floats: unsigned (byte k to
 * the low byte of lane k) or signed (to the high byte, then an arithmetic
 * shift) */
ALWAYS_INLINE __m256 u8f2(__m256i b, const int h) {
    const __m256i lo = _mm256_setr_epi8(0, Z, Z, Z, 1, Z, Z, Z, 2, Z, Z, Z, 3, Z, Z, Z,
                                        4, Z, Z, Z, 5, Z, Z, Z, 6, Z, Z, Z, 7, Z, Z, Z);
    const __m256i hi = _mm256_setr_epi8(8, Z, Z, Z, 9, Z, Z, Z, 10, Z, Z, Z, 11, Z, Z, Z,
                                        12, Z, Z, Z, 13, Z, Z, Z, 14, Z, Z, Z, 15, Z, Z, Z);
    return _mm256_cvtepi32_ps(_mm256_shuffle_epi8(b, h ? hi : lo));
}
ALWAYS_INLINE __m256 i8f2(__m256i b, const int h) {
    const __m256i lo = _mm256_setr_epi8(Z, Z, Z, 0, Z, Z, Z, 1, Z, Z, Z, 2, Z, Z, Z, 3,
                                        Z, Z, Z, 4, Z, Z, Z, 5, Z, Z, Z, 6, Z, Z, Z, 7);
    const __m256i hi = _mm256_setr_epi8(Z, Z, Z, 8, Z, Z, Z, 9, Z, Z, Z, 10, Z, Z, Z, 11,
                                        Z, Z, Z, 12, Z, Z, Z, 13, Z, Z, Z, 14, Z, Z, Z, 15);
    return _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_shuffle_epi8(b, h ? hi : lo), 24));
}
#undef Z
/* a 16-entry int8 level table in both lanes, indexed by codes */
ALWAYS_INLINE __m256i levels(const int8_t *tab, __m256i codes) {
    return _mm256_shuffle_epi8(ld128x2(tab), codes);
}

/* Q8_0: vpmovsxbd from memory (a load op, not the slow register form) */
ALWAYS_INLINE __m256 dq_q8_0(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + i * QB_Q8_0 * S;
    const __m256 d = _mm256_set1_ps(moe_f16_f32_tab[moe_rd16(b)]);   /* a broadcast load (quant_internal.h) */
    return _mm256_mul_ps(i8f(ld64(b + 2 + 8 * q)), d);
}

/* 32-value blocks of nibbles: vectors 0, 1 from the low nibbles, 2, 3 from the high */
ALWAYS_INLINE __m256 dq_q4_0(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + i * QB_Q4_0 * S;
    const __m256 d = _mm256_set1_ps(moe_f16_f32_tab[moe_rd16(b)]);
    const __m256i c = _mm256_sub_epi8(nibbles(ld128x2(b + 2), q >> 1), _mm256_set1_epi8(8));
    return _mm256_mul_ps(i8f2(c, q & 1), d);
}

/* Q4_1: (float)c * d + m, the product then the sum. */
ALWAYS_INLINE __m256 dq_q4_1(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + i * QB_Q4_1 * S;
    const __m256 d = _mm256_set1_ps(moe_f16_f32_tab[moe_rd16(b)]), m = _mm256_set1_ps(moe_f16_f32_tab[moe_rd16(b + 2)]);
    const __m256i c = nibbles(ld128x2(b + 4), q >> 1);
    return _mm256_add_ps(_mm256_mul_ps(u8f2(c, q & 1), d), m);
}

/* IQ4_NL: the int8 level by vpshufb, then (float)kv * d. */
ALWAYS_INLINE __m256 dq_iq4_nl(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + i * QB_IQ4_NL * S;
    const __m256 d = _mm256_set1_ps(moe_f16_f32_tab[moe_rd16(b)]);
    const __m256i c = levels(moe_kvalues_iq4nl, nibbles(ld128x2(b + 2), q >> 1));
    return _mm256_mul_ps(i8f2(c, q & 1), d);
}

/* Q5_0 / Q5_1: the 5-bit codes as bytes: bit j of qh spread to byte j
 * (a byte shuffle of qh, an AND with the bit, a compare) as 0x10, ORed
 * into the nibbles; hi = 0: values 0..15, hi = 1: values 16..31. */
ALWAYS_INLINE __m256i q5_codes(const uint8_t *b, const int hi) {
    uint32_t qh;
    memcpy(&qh, b, 4);
    const __m256i h = _mm256_set1_epi32((int)qh);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i spread = hi ? _mm256_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
                                                 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3)
                              : _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m256i hb = _mm256_shuffle_epi8(h, spread);
    const __m256i b5 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bits), bits), _mm256_set1_epi8(16));
    return _mm256_or_si256(nibbles(ld128x2(b + 4), hi), b5);
}
ALWAYS_INLINE __m256 dq_q5_0(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + i * QB_Q5_0 * S;
    const __m256 d = _mm256_set1_ps(moe_f16_f32_tab[moe_rd16(b)]);
    const __m256i c = _mm256_sub_epi8(q5_codes(b + 2, q >> 1), _mm256_set1_epi8(16));
    return _mm256_mul_ps(i8f2(c, q & 1), d);
}
ALWAYS_INLINE __m256 dq_q5_1(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + i * QB_Q5_1 * S;
    const __m256 d = _mm256_set1_ps(moe_f16_f32_tab[moe_rd16(b)]), m = _mm256_set1_ps(moe_f16_f32_tab[moe_rd16(b + 2)]);
    const __m256i c = q5_codes(b + 4, q >> 1);
    return _mm256_add_ps(_mm256_mul_ps(u8f2(c, q & 1), d), m);
}

ALWAYS_INLINE __m256 dq_mxfp4(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + i * QB_MXFP4 * S;
    const __m256 d = _mm256_set1_ps(moe_e8m0_half_tab[b[0]]);
    const __m256i c = levels(moe_kvalues_fp4, nibbles(ld128x2(b + 1), q >> 1));
    return _mm256_mul_ps(i8f2(c, q & 1), d);
}

/* NVFP4: sub-block s (16 values, its own scale) is vectors 2s (low
 * nibbles of its 8 bytes) and 2s + 1 (high nibbles); 16 bytes = two
 * sub-blocks are loaded at once */
ALWAYS_INLINE __m256 dq_nvfp4(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + i * QB_NVFP4 * S;
    const int s = q >> 1;
    const __m256 d = _mm256_set1_ps(moe_ue4m3_half[b[s]]);
    const __m256i c = levels(moe_kvalues_fp4, nibbles(ld128x2(b + 4 + 16 * (s >> 1)), q & 1));
    return _mm256_mul_ps(i8f2(c, s & 1), d);
}

/* K-quant super-block state (see quant_avx512.c): Q4_K st[j] = d*sc_j,
 * st[8+j] = dmin*m_j; Q6_K st[j] = d*sc[j]. Every prep_* ends with
 * state_stored: the parts read st[] back by broadcast loads, where GCC
 * would otherwise keep the stored vectors in registers for the whole block
 * (4 rows x 2 vectors more than AVX2 holds beside the accumulators). */
ALWAYS_INLINE void state_stored(float *st) { __asm__("" : "+m"(*(float(*)[16])st)); }
/* moe_q4k_unpack16 in registers (the scalar one went through memory, a
 * store-forwarding stall per block and row): bytes 0..7 the scales, 8..15
 * the mins; scale/min j < 4 is s[j] / s[j+4] & 63, j >= 4 takes the low /
 * high nibble of s[j+4] and bits 6, 7 of s[j-4] / s[j] as bits 4, 5. */
ALWAYS_INLINE __m128i q4k_scales_mins(const uint8_t *s) {
    const __m128i q = ld128(s);
    const __m128i a = _mm_shuffle_epi8(q, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i b = _mm_shuffle_epi8(q, _mm_setr_epi8(-128, -128, -128, -128, 0, 1, 2, 3, -128, -128, -128, -128, 4, 5, 6, 7));
    const __m128i lo = _mm_or_si128(
        _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0)),
        _mm_and_si128(_mm_srli_epi16(a, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15)));
    return _mm_or_si128(lo, _mm_and_si128(_mm_srli_epi16(b, 2), _mm_set1_epi8(0x30)));
}
ALWAYS_INLINE void prep_q4_k(const uint8_t *b, float *st) {
    const __m128i v = q4k_scales_mins(b + 4);
    _mm256_storeu_ps(st, _mm256_mul_ps(_mm256_set1_ps(f16s(b)), u8f(v)));
    _mm256_storeu_ps(st + 8, _mm256_mul_ps(_mm256_set1_ps(f16s(b + 2)), u8f(_mm_unpackhi_epi64(v, v))));
    state_stored(st);
}
ALWAYS_INLINE void prep_q6_k(const uint8_t *b, float *st) {
    const __m256 d = _mm256_set1_ps(f16s(b + 208));
    const __m128i v = ld128(b + 192);
    _mm256_storeu_ps(st, _mm256_mul_ps(d, i8f(v)));
    _mm256_storeu_ps(st + 8, _mm256_mul_ps(d, i8f(_mm_unpackhi_epi64(v, v))));
    state_stored(st);
}

/* Q4_K part c = 32 bytes of codes: vectors 0..3 are the low nibbles of
 * bytes 0..15, 16..31 (sub-block 2c: d1, mm1), vectors 4..7 their high
 * nibbles (sub-block 2c + 1: d2, mm2). Q5_K is the same with a 5th bit. */
ALWAYS_INLINE __m256 dq_q4_k(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + (i >> 2) * QB_Q4_K * S;
    const int c = (int)(i & 3), hn = q >> 2, u = (q >> 1) & 1;
    if (q == 0 && c == 0) prep_q4_k(b, st);
    const __m256 d = _mm256_set1_ps(st[2 * c + hn]), m = _mm256_set1_ps(st[8 + 2 * c + hn]);
    const __m256i n = nibbles(ld128x2(b + 16 + 32 * c + 16 * u), hn);
    return _mm256_sub_ps(_mm256_mul_ps(d, u8f2(n, q & 1)), m);
}

/* Q6_K part p: half h = p/2 of the block; vectors 4gg + 2u + {0, 1} are 16
 * values of group g = 2(p&1) + gg, 16-byte run u, scale st[8h + 2g + u]. */
ALWAYS_INLINE __m256 dq_q6_k(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + (i >> 2) * QB_Q6_K * S;
    const int p = (int)(i & 3), h = p >> 1, hi = p & 1, gg = q >> 2, u = (q >> 1) & 1, g = 2 * hi + gg;
    if (q == 0 && p == 0) prep_q6_k(b, st);
    const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
    const __m256i lo = nibbles(ld128x2(ql + 32 * gg + 16 * u), hi);
    const __m256i h8 = ld128x2(qh + 16 * u);
    const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h8, 2 * g), _mm256_set1_epi8(3)), 4);
    const __m256i c = _mm256_sub_epi8(_mm256_or_si256(lo, hb), _mm256_set1_epi8(32));
    return _mm256_mul_ps(i8f2(c, q & 1), _mm256_set1_ps(st[8 * h + 2 * g + u]));
}

/* ---- Q5_K, Q3_K, Q2_K, IQ4_XS (specification: kquant_ref.c; state as in
 * quant_avx512.c) ---------------------------------------------------------- */

/* Q5_K: the Q4_K header and state (prep_q4_k); codes get their 5th bit from
 * qh: bits 2c, 2c+1 moved to bit 4 (one variable shift per 16 bytes). */
ALWAYS_INLINE __m256 dq_q5_k(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + (i >> 2) * QB_Q5_K * S;
    const int c = (int)(i & 3), hn = q >> 2, u = (q >> 1) & 1;
    if (q == 0 && c == 0) prep_q4_k(b, st);
    const __m256 d = _mm256_set1_ps(st[2 * c + hn]), m = _mm256_set1_ps(st[8 + 2 * c + hn]);
    const uint8_t *qs = b + 48 + 32 * c, *qh = b + 16;
    const __m256i h8 = _mm256_srli_epi16(ld128x2(qh + 16 * u), 2 * c);
    const __m256i b5 = _mm256_and_si256(hn ? _mm256_slli_epi16(h8, 3) : _mm256_slli_epi16(h8, 4), _mm256_set1_epi8(16));
    const __m256i n = _mm256_or_si256(nibbles(ld128x2(qs + 16 * u), hn), b5);
    return _mm256_sub_ps(_mm256_mul_ps(d, u8f2(n, q & 1)), m);
}

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
    const __m256 d = _mm256_set1_ps(f16s(b + 108));
    const __m128i v = q3k_scales16(b + 96);
    _mm256_storeu_ps(st, _mm256_mul_ps(d, i8f(v)));
    _mm256_storeu_ps(st + 8, _mm256_mul_ps(d, i8f(_mm_unpackhi_epi64(v, v))));
    state_stored(st);
}
/* Q3_K and Q2_K part p: vectors 4jj + 2u + {0, 1} are 16 values of the
 * 2-bit field j = 2(p&1) + jj of 16-byte run u in half h = p/2, scale
 * index 4p + 2jj + u. */
ALWAYS_INLINE __m256 dq_q3_k(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + (i >> 2) * QB_Q3_K * S;
    const int p = (int)(i & 3), h = p >> 1, jj = q >> 2, u = (q >> 1) & 1, j = 2 * (p & 1) + jj;
    if (q == 0 && p == 0) prep_q3_k(b, st);
    const uint8_t *qs = b + 32 + 32 * h;
    const __m256i c = _mm256_and_si256(_mm256_srli_epi16(ld128x2(qs + 16 * u), 2 * j), _mm256_set1_epi8(3));
    const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(ld128x2(b + 16 * u), 4 * h + j), _mm256_set1_epi8(1));
    const __m256i v = _mm256_sub_epi8(_mm256_or_si256(c, _mm256_slli_epi16(hb, 2)), _mm256_set1_epi8(4));
    return _mm256_mul_ps(i8f2(v, q & 1), _mm256_set1_ps(st[4 * p + 2 * jj + u]));
}

ALWAYS_INLINE void prep_q2_k(const uint8_t *b, float *st) {
    const __m256 d = _mm256_set1_ps(f16s(b + 80));
    const __m128i sc = _mm_and_si128(ld128(b), _mm_set1_epi8(15));
    _mm256_storeu_ps(st, _mm256_mul_ps(d, u8f(sc)));
    _mm256_storeu_ps(st + 8, _mm256_mul_ps(d, u8f(_mm_unpackhi_epi64(sc, sc))));
    state_stored(st);
}
ALWAYS_INLINE __m256 dq_q2_k(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + (i >> 2) * QB_Q2_K * S;
    const int p = (int)(i & 3), h = p >> 1, jj = q >> 2, u = (q >> 1) & 1, j = 2 * (p & 1) + jj;
    const int sb = 4 * p + 2 * jj + u;
    if (q == 0 && p == 0) prep_q2_k(b, st);
    const float dmin = moe_f16_f32_tab[moe_rd16(b + 82)];
    const __m256i c = _mm256_and_si256(_mm256_srli_epi16(ld128x2(b + 16 + 32 * h + 16 * u), 2 * j), _mm256_set1_epi8(3));
    const __m256 dl = _mm256_set1_ps(st[sb]), ml = _mm256_set1_ps(dmin * (float)(b[sb] >> 4));
    return _mm256_sub_ps(_mm256_mul_ps(dl, u8f2(c, q & 1)), ml);
}

ALWAYS_INLINE void prep_iq4_xs(const uint8_t *b, float *st) {
    const float d = f16s(b);
    for (int ib = 0; ib < 8; ib++) st[ib] = d * (float)moe_iq4xs_scale(b, ib);
    state_stored(st);
}
/* IQ4_XS part p: sub-blocks ib = 2p + s of 32 values, vectors 4s + {0, 1}
 * from the low nibbles of its 16 bytes, 4s + {2, 3} from the high ones;
 * codes -> the int8 levels by vpshufb, then (float)kv * dl. */
ALWAYS_INLINE __m256 dq_iq4_xs(const uint8_t *row, int64_t i, const int q, float *st, const int S) {
    const uint8_t *b = row + (i >> 2) * QB_IQ4_XS * S;
    const int p = (int)(i & 3), ib = 2 * p + (q >> 2);
    if (q == 0 && p == 0) prep_iq4_xs(b, st);
    const __m256i c = levels(moe_kq_iq4nl, nibbles(ld128x2(b + 8 + 16 * ib), (q >> 1) & 1));
    return _mm256_mul_ps(i8f2(c, q & 1), _mm256_set1_ps(st[ib]));
}

/* ---- tiles ---------------------------------------------------------------- */

/* Software prefetch distance (bytes ahead of each row's read position); see
 * quant_avx512.c for the measurement behind 8 KB. */
#define PF_DIST 8192

/* The R x T tile: each row's part is dequantized a vector at a time and
 * each vector used at once, the activations as memory operands, so a gemv
 * tile holds its 8 accumulators, the part's scales and one vector.
 * Dequantizing all R rows first, or one row's whole part (8 vectors for 64
 * values), held more than AVX2's 16 registers, and so did the part's
 * activation vectors once GCC loaded them a single time for all R rows:
 * either way it spilled the accumulators to the stack in the loop. For the
 * 64-value parts the empty asm hides that the rows read the same
 * activations, so each FMA loads its own (from L1, where they are); a
 * 32-value part's 4 activation vectors fit beside the accumulators. */
#define DEF_BLOCK_KERNELS(NAME, SUBV, NV, DQ, PB, QBYTES)                                                 \
    ALWAYS_INLINE void tile_##NAME(const uint8_t *w, size_t rb, const float *x, size_t xs,         \
                                   float *y, size_t ys, int64_t n, const int R, const int T,      \
                                   const int S) {                                                  \
        __m256 acc[4][4][2];                                                                       \
        UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            acc[rr][tt][0] = acc[rr][tt][1] = _mm256_setzero_ps();                                 \
        float st[4][16]; /* per-row state of a K-quant super-block */                          \
        const int64_t ns = n / (SUBV);                                                             \
        for (int64_t i = 0; i < ns; i++) {                                                         \
            UNROLL for (int rr = 0; rr < R; rr++)                                                  \
                _mm_prefetch((const char *)w + rr * rb + i * (PB) * S + PF_DIST, _MM_HINT_T0);         \
            UNROLL for (int rr = 0; rr < R; rr++) {                                                \
                const float *xr = x + i * (SUBV);                                                  \
                if ((NV) == 4) __asm__("" : "+r"(xr)); /* one load per use (above) */            \
                UNROLL for (int q = 0; q < 2 * (NV); q++) {                                        \
                    const __m256 v = DQ(w + rr * rb, i, q, st[rr], S);                             \
                    UNROLL for (int tt = 0; tt < T; tt++)                                          \
                        acc[rr][tt][q & 1] = _mm256_fmadd_ps(v, _mm256_loadu_ps(xr + tt * xs + 8 * q), \
                                                             acc[rr][tt][q & 1]);                  \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            y[tt * ys + rr] = hsum16(acc[rr][tt][0], acc[rr][tt][1]);                              \
    }                                                                                              \
    DEF_GEMM_BODY(NAME)                                                                            \
    DEF_BLOCK_DRIVERS(NAME, QBYTES)

/* gemv: 4 rows at a time; gemm: 32-token blocks, 2 rows x 2 tokens per tile
 * (16 ymm registers do not hold more accumulators), the last nrows % 4
 * rows alone. */
#define DEF_DRIVERS(NAME)                                                                          \
    static void gemv_##NAME(const void *w, size_t rb, int64_t nrows, const float *x, float *y,     \
                            int64_t n) {                                                           \
        const uint8_t *W = w;                                                                      \
        int64_t r = 0;                                                                             \
        const int64_t q = nrows / 4;     /* far-apart rows per tile: see quant_avx512.c */       \
        for (; r < q; r++) tile_##NAME(W + r * rb, (size_t)q * rb, x, 0, y + r, 0, (size_t)q, n, 4, 1); \
        for (r = 4 * q; r < nrows; r++) tile_##NAME(W + r * rb, rb, x, 0, y + r, 0, 1, n, 1, 1);  \
    }                                                                                              \
    ALWAYS_INLINE void group_##NAME(const uint8_t *W, int64_t r, size_t rb, const float *x, size_t xs, \
                                    float *y, size_t ys, int64_t n, const int T) {                 \
        tile_##NAME(W + r * rb, rb, x, xs, y, ys, 1, n, 2, T);                                     \
    }                                                                                              \
    MOE_DEF_PLAIN_GEMM(gemm_##NAME, group_##NAME, tile_##NAME, 2, 2)

/* gemm over plain rows (x4 = 0) or x4-interleaved groups (x4 = 1): 2 rows x
 * 2 tokens per tile (a group of 4 is two such row pairs), tokens in blocks of 32. */
#define DEF_GEMM_BODY(NAME)                                                                        \
    ALWAYS_INLINE void gemm_body_##NAME(const void *w, size_t rb, int64_t nrows, const float *x,   \
                                        size_t xs, int64_t ntok, float *y, size_t ys, int64_t n,   \
                                        const int x4, const size_t qbytes) {                       \
        const uint8_t *W = w;                                                                      \
        for (int64_t t0 = 0; t0 < ntok; t0 += 32) {                                                \
            const int64_t t1 = t0 + 32 < ntok ? t0 + 32 : ntok;                                    \
            int64_t r = 0;                                                                         \
            if (x4) {                                                                              \
                for (; r + 4 <= nrows; r += 4)                                                     \
                    for (int h = 0; h < 4; h += 2) {                                               \
                        const uint8_t *g = W + r * rb + h * qbytes;                                \
                        int64_t t = t0;                                                            \
                        for (; t + 2 <= t1; t += 2)                                                \
                            tile_##NAME(g, qbytes, x + t * xs, xs, y + t * ys + r + h, ys, n, 2, 2, 4); \
                        for (; t < t1; t++)                                                        \
                            tile_##NAME(g, qbytes, x + t * xs, xs, y + t * ys + r + h, ys, n, 2, 1, 4); \
                    }                                                                              \
            } else {                                                                               \
                for (; r + 2 <= nrows; r += 2) {                                                   \
                    int64_t t = t0;                                                                \
                    for (; t + 2 <= t1; t += 2)                                                    \
                        tile_##NAME(W + r * rb, rb, x + t * xs, xs, y + t * ys + r, ys, n, 2, 2, 1); \
                    for (; t < t1; t++)                                                            \
                        tile_##NAME(W + r * rb, rb, x + t * xs, xs, y + t * ys + r, ys, n, 2, 1, 1); \
                }                                                                                  \
            }                                                                                      \
            for (; r < nrows; r++) {                                                               \
                int64_t t = t0;                                                                    \
                for (; t + 2 <= t1; t += 2)                                                        \
                    tile_##NAME(W + r * rb, rb, x + t * xs, xs, y + t * ys + r, ys, n, 1, 2, 1);   \
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
DEF_BLOCK_KERNELS(nvfp4, 64, 4, dq_nvfp4, QB_NVFP4, QB_NVFP4)
DEF_BLOCK_KERNELS(q4_k, 64, 4, dq_q4_k, QB_Q4_K / 4, QB_Q4_K)
DEF_BLOCK_KERNELS(q6_k, 64, 4, dq_q6_k, QB_Q6_K / 4, QB_Q6_K)
DEF_BLOCK_KERNELS(q5_k, 64, 4, dq_q5_k, QB_Q5_K / 4, QB_Q5_K)
DEF_BLOCK_KERNELS(q3_k, 64, 4, dq_q3_k, QB_Q3_K / 4, QB_Q3_K)
DEF_BLOCK_KERNELS(q2_k, 64, 4, dq_q2_k, QB_Q2_K / 4, QB_Q2_K)
DEF_BLOCK_KERNELS(iq4_xs, 64, 4, dq_iq4_xs, QB_IQ4_XS / 4, QB_IQ4_XS)

/* ---- the Q4_K gemv (decode under the FP32 contract) ------------------------
 * Two rows, r and r + nrows/2 (far apart, as the plain gemvs pair them), a
 * super-block at a time: for each part c and nibble half hn (32 values of
 * one sub-block, one d and m), the row's d and m are broadcast once and its
 * 4 vectors of 8 take their codes from one 16-byte load per 16 values (the
 * nibbles split once for 2 vectors) and their activations as FMA memory
 * operands. Each row's 16 lanes see the same FMAs in the same order as in
 * tile_q4_k (a part's values 8q.. go to lanes 8(q & 1)..), so the bits are
 * the same. The empty asm statements make the code and state loads opaque:
 * without them GCC keeps every shuffled code vector and broadcast scale of
 * the block in registers for reuse and spills the accumulators to the stack
 * in the loop instead (docs/PERFORMANCE.md, "What moved the numbers"). With
 * 4 rows the same loop was no faster than with 2. */
static void tile2_q4_k(const uint8_t *w, size_t rs, const float *x, float *y, size_t yr, int64_t n) {
    __m256 acc[2][2];
    UNROLL for (int r = 0; r < 2; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    float st[2][16];
    for (int64_t b = 0; b < n / 256; b++) {
        const uint8_t *B0 = w + (size_t)b * QB_Q4_K;
        UNROLL for (int r = 0; r < 2; r++) {
            const uint8_t *B = B0 + r * rs;
            UNROLL for (int o = 0; o < QB_Q4_K; o += 48) _mm_prefetch((const char *)B + PF_DIST + o, _MM_HINT_T0);
            _mm_prefetch((const char *)B + PF_DIST + QB_Q4_K - 1, _MM_HINT_T0);
            prep_q4_k(B, st[r]);
        }
        const float *xb = x + (size_t)b * 256;
        for (int c = 0; c < 4; c++) UNROLL for (int hn = 0; hn < 2; hn++) UNROLL for (int r = 0; r < 2; r++) {
            const float *sp = &st[r][2 * c + hn];
            __asm__ volatile("" : "+r"(sp));
            const __m256 d = _mm256_broadcast_ss(sp), m = _mm256_broadcast_ss(sp + 8);
            UNROLL for (int u = 0; u < 2; u++) {
                const uint8_t *cp = B0 + r * rs + 16 + 32 * c + 16 * u;
                __asm__ volatile("" : "+r"(cp));
                const __m256i codes = nibbles(ld128x2(cp), hn);
                UNROLL for (int h = 0; h < 2; h++) {
                    const __m256 v = _mm256_sub_ps(_mm256_mul_ps(d, u8f2(codes, h)), m);
                    acc[r][h] = _mm256_fmadd_ps(v, _mm256_loadu_ps(xb + 64 * c + 32 * hn + 16 * u + 8 * h), acc[r][h]);
                }
            }
        }
    }
    UNROLL for (int r = 0; r < 2; r++) y[(size_t)r * yr] = hsum16(acc[r][0], acc[r][1]);
}
static void gemv2_q4_k(const void *w, size_t rb, int64_t nrows, const float *x, float *y, int64_t n) {
    const uint8_t *W = w;
    const int64_t h = nrows / 2;
    for (int64_t r = 0; r < h; r++) tile2_q4_k(W + (size_t)r * rb, (size_t)h * rb, x, y + r, (size_t)h, n);
    if (nrows & 1) gemv_q4_k(W + (size_t)(nrows - 1) * rb, rb, 1, x, y + nrows - 1, n);
}

/* ---- F32 / F16 / BF16 (any n). 8 values at a time; in the tail, lanes past n
 * keep their accumulator (blend), never an FMA with padding. */

ALWAYS_INLINE __m256 ld8_f32(const uint8_t *row, int64_t k) { return _mm256_loadu_ps((const float *)row + k); }
ALWAYS_INLINE __m256 ld8_f16(const uint8_t *row, int64_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + k)));
}
ALWAYS_INLINE __m256 ld8_bf16(const uint8_t *row, int64_t k) {
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
/* Tail: values [k, n) (n - k < 16) of one row, zero-padded into 16 floats. */
ALWAYS_INLINE void tail_plain(uint32_t type, const uint8_t *row, int64_t k, int64_t n, float *out) {
    for (int j = 0; j < 16; j++) {
        float f = 0.0f;
        if (k + j < n) {
            const uint8_t *p = row + (k + j) * (type == MOE_T_F32 ? 4 : 2);
            if (type == MOE_T_F32) memcpy(&f, p, 4);
            else if (type == MOE_T_F16) f = _cvtsh_ss(moe_rd16(p));
            else { uint32_t u = (uint32_t)moe_rd16(p) << 16; memcpy(&f, &u, 4); }
        }
        out[j] = f;
    }
}
ALWAYS_INLINE __m256 lane_mask(int64_t cnt /* lanes < cnt are on */) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)cnt), idx));
}

#define DEF_PLAIN_KERNELS(NAME, TYPE, LD)                                                          \
    ALWAYS_INLINE void tile_##NAME(const uint8_t *w, size_t rb, const float *x, size_t xs,         \
                                   float *y, size_t ys, size_t yr, int64_t n, const int R,         \
                                   const int T) {                                                  \
        __m256 acc[4][4][2];                                                                       \
        UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            acc[rr][tt][0] = acc[rr][tt][1] = _mm256_setzero_ps();                                 \
        int64_t k = 0;                                                                             \
        for (; k + 16 <= n; k += 16) {                                                             \
            UNROLL for (int rr = 0; rr < R; rr++)                                                  \
                _mm_prefetch((const char *)w + rr * rb + k * (TYPE == MOE_T_F32 ? 4 : 2) + PF_DIST,  \
                             _MM_HINT_T0);                                                         \
            UNROLL for (int h = 0; h < 2; h++) {                                                   \
                __m256 v[4];                                                                       \
                UNROLL for (int rr = 0; rr < R; rr++) v[rr] = LD(w + rr * rb, k + 8 * h);          \
                UNROLL for (int tt = 0; tt < T; tt++) {                                            \
                    const __m256 xv = _mm256_loadu_ps(x + tt * xs + k + 8 * h);                    \
                    UNROLL for (int rr = 0; rr < R; rr++)                                          \
                        acc[rr][tt][h] = _mm256_fmadd_ps(v[rr], xv, acc[rr][tt][h]);               \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        if (k < n) {                                                                               \
            float wt[4][16], xt[16];                                                               \
            UNROLL for (int rr = 0; rr < R; rr++) tail_plain(TYPE, w + rr * rb, k, n, wt[rr]);     \
            UNROLL for (int tt = 0; tt < T; tt++) {                                                \
                for (int j = 0; j < 16; j++) xt[j] = k + j < n ? x[tt * xs + k + j] : 0.0f;        \
                UNROLL for (int h = 0; h < 2; h++) {                                               \
                    const __m256 m = lane_mask(n - k - 8 * h), xv = _mm256_loadu_ps(xt + 8 * h);   \
                    UNROLL for (int rr = 0; rr < R; rr++) {                                        \
                        const __m256 f = _mm256_fmadd_ps(_mm256_loadu_ps(wt[rr] + 8 * h), xv,      \
                                                         acc[rr][tt][h]);                          \
                        acc[rr][tt][h] = _mm256_blendv_ps(acc[rr][tt][h], f, m);                   \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            y[tt * ys + rr * yr] = hsum16(acc[rr][tt][0], acc[rr][tt][1]);                              \
    }                                                                                              \
    DEF_DRIVERS(NAME)

DEF_PLAIN_KERNELS(f32, MOE_T_F32, ld8_f32)
DEF_PLAIN_KERNELS(f16, MOE_T_F16, ld8_f16)
DEF_PLAIN_KERNELS(bf16, MOE_T_BF16, ld8_bf16)

/* The x4 layout of F32/F16/BF16 (quant.h; see quant_avx512.c): rows rr0 ..
 * rr0+R-1 of a group, the 32-value run c of row rr at (4c + rr) * 32 * ES
 * bytes. gemv takes the 4 rows (one stream), gemm 2 rows x 2 tokens (16
 * ymm accumulators would not fit). Each accumulator gets tile_NAME's FMAs in
 * its order. n % 32 == 0 (moe_x4_fits). */
#define DEF_PLAIN_X4(NAME, LD, ES)                                                                 \
    ALWAYS_INLINE void tile_x4_##NAME(const uint8_t *g, const int rr0, const float *x, size_t xs,  \
                                      float *y, size_t ys, int64_t n, const int R, const int T) {  \
        __m256 acc[4][2][2];                                                                       \
        UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            acc[rr][tt][0] = acc[rr][tt][1] = _mm256_setzero_ps();                                 \
        for (int64_t k = 0; k < n; k += 32) {                                                      \
            const uint8_t *p = g + k * 4 * (ES) + rr0 * 32 * (ES);                                 \
            if (R == 4)                                                                            \
                UNROLL for (int o = 0; o < 128 * (ES); o += 64)                                    \
                    _mm_prefetch((const char *)p + PF_DIST + o, _MM_HINT_T0);                      \
            UNROLL for (int q = 0; q < 4; q++) {               /* 8 values: 16-lane half q & 1 */ \
                __m256 v[4];                                                                       \
                UNROLL for (int rr = 0; rr < R; rr++) v[rr] = LD(p + rr * 32 * (ES), 8 * q);       \
                UNROLL for (int tt = 0; tt < T; tt++) {                                            \
                    const __m256 xv = _mm256_loadu_ps(x + tt * xs + k + 8 * q);                    \
                    UNROLL for (int rr = 0; rr < R; rr++)                                          \
                        acc[rr][tt][q & 1] = _mm256_fmadd_ps(v[rr], xv, acc[rr][tt][q & 1]);       \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        UNROLL for (int rr = 0; rr < R; rr++) UNROLL for (int tt = 0; tt < T; tt++)                \
            y[tt * ys + rr] = hsum16(acc[rr][tt][0], acc[rr][tt][1]);                              \
    }                                                                                              \
    static void gemv_x4_##NAME(const void *w, size_t rb, int64_t nrows, const float *x, float *y,  \
                               int64_t n) {                                                        \
        const uint8_t *W = w;                                                                      \
        int64_t r = 0;                                                                             \
        for (; r + 4 <= nrows; r += 4) tile_x4_##NAME(W + r * rb, 0, x, 0, y + r, 0, n, 4, 1);     \
        for (; r < nrows; r++) tile_##NAME(W + r * rb, rb, x, 0, y + r, 0, 1, n, 1, 1);            \
    }                                                                                              \
    ALWAYS_INLINE void group_x4_##NAME(const uint8_t *W, int64_t r, size_t rb, const float *x,     \
                                       size_t xs, float *y, size_t ys, int64_t n, const int T) {   \
        tile_x4_##NAME(W + (r & ~(int64_t)3) * rb, (int)(r & 3), x, xs, y, ys, n, 2, T);           \
    }                                                                                              \
    MOE_DEF_PLAIN_GEMM(gemm_x4_##NAME, group_x4_##NAME, tile_##NAME, 2, 2)

DEF_PLAIN_X4(f32, ld8_f32, 4)
DEF_PLAIN_X4(f16, ld8_f16, 2)
DEF_PLAIN_X4(bf16, ld8_bf16, 2)

static float dot_f32_avx2(const float *a, const float *b, int64_t n) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), hi);
    }
    if (k < n) {
        float at[16], bt[16];
        for (int j = 0; j < 16; j++) {
            at[j] = k + j < n ? a[k + j] : 0.0f;
            bt[j] = k + j < n ? b[k + j] : 0.0f;
        }
        const __m256 m0 = lane_mask(n - k), m1 = lane_mask(n - k - 8);
        lo = _mm256_blendv_ps(lo, _mm256_fmadd_ps(_mm256_loadu_ps(at), _mm256_loadu_ps(bt), lo), m0);
        hi = _mm256_blendv_ps(hi, _mm256_fmadd_ps(_mm256_loadu_ps(at + 8), _mm256_loadu_ps(bt + 8), hi), m1);
    }
    return hsum16(lo, hi);
}

static void axpy_f32_avx2(float a, const float *x, float *y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        _mm256_storeu_ps(y + k, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + k), _mm256_loadu_ps(y + k)));
    for (; k < n; k++) {
        /* the single-lane FMA instruction: same rounding as fmaf */
        const __m128 r = _mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(x[k]), _mm_set_ss(y[k]));
        y[k] = _mm_cvtss_f32(r);
    }
}

/* ---- gemm_wide (flag gemm_wide; driver and why: quant_internal.h,
 * quant_avx512.c). The 2x2 tile above spends 1.5 dequantizing operations per
 * FMA on Q8_0 (45 GFLOP/s per core against ~90 for the FMAs alone). Here
 * a tile is one pair of the group's rows x 3 tokens: 12 ymm accumulators
 * (lanes 0-7 and 8-15 of each sum), 2 weight and 1 activation register.
 * The activation must really be a register: left to itself GCC 12 folds its
 * load into both FMAs that use it (a memory operand each), 16 loads per 12
 * FMAs instead of 10, and the tile was load-bound (perf annotate); the empty
 * asm below pins it. Measured by a throwaway harness (1 thread, Q8_0 x4,
 * laguna prefill shapes): 55-70 -> 77-84 GFLOP/s. */
ALWAYS_INLINE void wide_tile(const float *wb, int64_t nk, const int p, const float *x, size_t xs, float *sp,
                             const int first, const int last, float *y, size_t ys, const int R, const int T) {
    __m256 acc[2][3][2];
    UNROLL for (int rr = 0; rr < 2; rr++) UNROLL for (int tt = 0; tt < T; tt++) UNROLL for (int h = 0; h < 2; h++)
        acc[rr][tt][h] = first ? _mm256_setzero_ps() : _mm256_load_ps(sp + (rr * 3 + tt) * 16 + h * 8);
    for (int64_t j = 0; j < nk; j++) {
        const float *wj = wb + j * 64 + p * 32;
        UNROLL for (int h = 0; h < 2; h++) {
            const __m256 w0 = _mm256_load_ps(wj + h * 8), w1 = _mm256_load_ps(wj + 16 + h * 8);
            UNROLL for (int tt = 0; tt < T; tt++) {
                __m256 xv = _mm256_loadu_ps(x + tt * xs + j * 16 + h * 8);
                __asm__("" : "+x"(xv)); /* one load, in a register (above) */
                acc[0][tt][h] = _mm256_fmadd_ps(w0, xv, acc[0][tt][h]);
                acc[1][tt][h] = _mm256_fmadd_ps(w1, xv, acc[1][tt][h]);
            }
        }
    }
    if (!last) {
        UNROLL for (int rr = 0; rr < 2; rr++) UNROLL for (int tt = 0; tt < T; tt++) UNROLL for (int h = 0; h < 2; h++)
            _mm256_store_ps(sp + (rr * 3 + tt) * 16 + h * 8, acc[rr][tt][h]);
        return;
    }
    UNROLL for (int rr = 0; rr < 2; rr++) {
        if (rr >= R) break;
        UNROLL for (int tt = 0; tt < T; tt++) y[tt * ys + rr] = hsum16(acc[rr][tt][0], acc[rr][tt][1]);
    }
}

/* A group's 4 rows (R of them real) against nt tokens: per 3-token tile the
 * row pair (0,1), then (2,3), so the second pair reads the tile's 12 KB of
 * activations from L1 (pair by pair over all tokens read them from L2 twice:
 * harness above, a further 70-80 -> 75-86 GFLOP/s). Tile i of pair p parks
 * its sums at sp + i*192 + p*96. */
ALWAYS_INLINE void wide_tok(const float *wb, int64_t nk, const float *x, size_t xs, float *sp, int first, int last,
                            float *y, size_t ys, const int R, const int T) {
    wide_tile(wb, nk, 0, x, xs, sp, first, last, y, ys, R >= 2 ? 2 : 1, T);
    if (R == 4) wide_tile(wb, nk, 1, x, xs, sp + 96, first, last, y + 2, ys, 2, T);
    else if (R == 3) wide_tile(wb, nk, 1, x, xs, sp + 96, first, last, y + 2, ys, 1, T);
}
ALWAYS_INLINE void wide_tiles_r(const float *wb, int64_t nk, const float *x, size_t xs, int64_t nt, float *sp,
                                int first, int last, float *y, size_t ys, const int R) {
    int64_t t = 0;
    for (; t + 3 <= nt; t += 3, sp += 192) wide_tok(wb, nk, x + t * xs, xs, sp, first, last, y + t * ys, ys, R, 3);
    if (nt - t == 2) wide_tok(wb, nk, x + t * xs, xs, sp, first, last, y + t * ys, ys, R, 2);
    else if (nt - t == 1) wide_tok(wb, nk, x + t * xs, xs, sp, first, last, y + t * ys, ys, R, 1);
}
MOE_DEF_WIDE_TILES

/* one part of one row into the buffer (quant_internal.h: DEF_WIDE_FILL);
 * vectors 2c and 2c+1 are lanes 0-7 and 8-15 of the part's chunk c */
#define WIDE_PART(NAME, NV, row, i, st, S, o)                                                      \
    do {                                                                                           \
        UNROLL for (int q_ = 0; q_ < 2 * (NV); q_++)                                               \
            _mm256_store_ps((o) + (q_ >> 1) * 64 + (q_ & 1) * 8, dq_##NAME(row, i, q_, st, S));    \
    } while (0)
MOE_WIDE_FORMATS(DEF_WIDE_BLOCK)
MOE_KQ_WIDE_FORMATS(DEF_WIDE_BLOCK)

/* The i-quants' wide kernel (prefill): each 256-value block of a row
 * dequantized by its AVX2 kernel file's dequantizer (iq2_avx2.c,
 * iq3_avx2.c: the FP32 contract's exact weights) into the buffer's
 * [k/16][row][16]. Their gemm decodes the codebooks again for every 2
 * tokens; here once per block of up to WIDE_TB tokens, which the FP32
 * tiles then share. Block i of row rr at g + rr * rs + i * S * QBYTES (S =
 * 4: an x4 group, rs = QBYTES). */
#define DEF_WIDE_IQ(NAME, QBYTES)                                                                  \
    static inline __attribute__((always_inline)) void fill_##NAME(                                 \
        const uint8_t *g, size_t rs, const int S, int R, int64_t k0, int64_t kc, float *wb, float (*st)[16]) { \
        (void)st;                                                                                  \
        for (int64_t i = k0 / 256; i < (k0 + kc) / 256; i++)                                       \
            for (int rr = 0; rr < R; rr++)                                                         \
                moe_wide_block_##NAME##_avx2(g + rr * rs + (size_t)i * (size_t)(S) * (QBYTES),     \
                                             wb + ((i - k0 / 256) * 64 + rr) * 16);                \
    }                                                                                              \
    DEF_WIDE_ENTRIES(NAME, QBYTES)
DEF_WIDE_IQ(iq2_xxs, QB_IQ2_XXS)
DEF_WIDE_IQ(iq2_xs, QB_IQ2_XS)
DEF_WIDE_IQ(iq2_s, QB_IQ2_S)
DEF_WIDE_IQ(iq3_xxs, QB_IQ3_XXS)
DEF_WIDE_IQ(iq3_s, QB_IQ3_S)
DEF_WIDE_IQ(iq1_s, QB_IQ1_S)
DEF_WIDE_IQ(iq1_m, QB_IQ1_M)

#define ENTRY(id, name) .gemv[id] = gemv_##name, .gemm[id] = gemm_##name
#define ENTRY_X4(id, name) .gemv_x4[id] = gemv_x4_##name, .gemm_x4[id] = gemm_x4_##name
/* the wide kernel from 2 tokens (moe_kernels.wide_min_tokens): AVX2's 2x2
 * gemm tiles against the 2x3 wide ones were not measured at a decode
 * batch's few tokens, so the wide kernel keeps every multi-token product */
#define ENTRY_WIDE_X4(id, name) \
    .gemm_wide[id] = gemm_wide_##name, .gemm_wide_x4[id] = gemm_wide_x4_##name, .wide_min_tokens[id] = 2
const moe_kernels moe_kernels_avx2_tab = {
    .isa = MOE_ISA_AVX2, .name = "avx2",
    ENTRY(MOE_T_F32, f32), ENTRY(MOE_T_F16, f16), ENTRY(MOE_T_BF16, bf16),
    ENTRY(MOE_T_Q8_0, q8_0), ENTRY(MOE_T_Q4_0, q4_0), .gemv[MOE_T_Q4_K] = gemv2_q4_k, .gemm[MOE_T_Q4_K] = gemm_q4_k,
    ENTRY(MOE_T_Q4_1, q4_1), ENTRY(MOE_T_Q5_0, q5_0), ENTRY(MOE_T_Q5_1, q5_1), ENTRY(MOE_T_IQ4_NL, iq4_nl),
    ENTRY(MOE_T_Q6_K, q6_k), ENTRY(MOE_T_MXFP4, mxfp4), ENTRY(MOE_T_NVFP4, nvfp4),
    ENTRY_X4(MOE_T_F32, f32), ENTRY_X4(MOE_T_F16, f16), ENTRY_X4(MOE_T_BF16, bf16),
    ENTRY_X4(MOE_T_Q8_0, q8_0), ENTRY_X4(MOE_T_Q4_0, q4_0), ENTRY_X4(MOE_T_Q4_K, q4_k),
    ENTRY_X4(MOE_T_Q4_1, q4_1), ENTRY_X4(MOE_T_Q5_0, q5_0), ENTRY_X4(MOE_T_Q5_1, q5_1), ENTRY_X4(MOE_T_IQ4_NL, iq4_nl),
    ENTRY_X4(MOE_T_Q6_K, q6_k), ENTRY_X4(MOE_T_MXFP4, mxfp4), ENTRY_X4(MOE_T_NVFP4, nvfp4),
    ENTRY_WIDE_X4(MOE_T_Q8_0, q8_0), ENTRY_WIDE_X4(MOE_T_Q4_0, q4_0), ENTRY_WIDE_X4(MOE_T_Q4_K, q4_k),
    ENTRY_WIDE_X4(MOE_T_Q4_1, q4_1), ENTRY_WIDE_X4(MOE_T_Q5_0, q5_0), ENTRY_WIDE_X4(MOE_T_Q5_1, q5_1),
    ENTRY_WIDE_X4(MOE_T_IQ4_NL, iq4_nl),
    ENTRY_WIDE_X4(MOE_T_Q6_K, q6_k), ENTRY_WIDE_X4(MOE_T_MXFP4, mxfp4), ENTRY_WIDE_X4(MOE_T_NVFP4, nvfp4),
    .dot_f32 = dot_f32_avx2, .axpy_f32 = axpy_f32_avx2,
    A8_ENTRY(MOE_T_Q8_0, q8_0, avx2), A8_ENTRY(MOE_T_NVFP4, nvfp4, avx2),
    A8_ENTRY(MOE_T_MXFP4, mxfp4, avx2), A8_ENTRY(MOE_T_Q4_0, q4_0, avx2), A8_ENTRY(MOE_T_Q4_K, q4_k, avx2),
    A8_ENTRY(MOE_T_Q6_K, q6_k, avx2),
    A8_ENTRY(MOE_T_Q4_1, q4_1, avx2), A8_ENTRY(MOE_T_Q5_0, q5_0, avx2), A8_ENTRY(MOE_T_Q5_1, q5_1, avx2),
    A8_ENTRY(MOE_T_IQ4_NL, iq4_nl, avx2),
    A8_ENTRY(MOE_T_Q5_K, q5_k, avx2), A8_ENTRY(MOE_T_Q3_K, q3_k, avx2), A8_ENTRY(MOE_T_Q2_K, q2_k, avx2),
    A8_ENTRY(MOE_T_IQ4_XS, iq4_xs, avx2),
    A8IQ_ENTRIES(avx2),  /* the i-quants: act8_iq_*.c */
    ENTRY(MOE_T_Q5_K, q5_k), ENTRY_X4(MOE_T_Q5_K, q5_k), ENTRY_WIDE_X4(MOE_T_Q5_K, q5_k),
    ENTRY(MOE_T_Q3_K, q3_k), ENTRY_X4(MOE_T_Q3_K, q3_k), ENTRY_WIDE_X4(MOE_T_Q3_K, q3_k),
    ENTRY(MOE_T_Q2_K, q2_k), ENTRY_X4(MOE_T_Q2_K, q2_k), ENTRY_WIDE_X4(MOE_T_Q2_K, q2_k),
    ENTRY(MOE_T_IQ4_XS, iq4_xs), ENTRY_X4(MOE_T_IQ4_XS, iq4_xs), ENTRY_WIDE_X4(MOE_T_IQ4_XS, iq4_xs),
    MOE_IQ3_ENTRY(MOE_T_IQ3_XXS, iq3_xxs, avx2), MOE_IQ3_ENTRY(MOE_T_IQ3_S, iq3_s, avx2),  /* iq3_avx2.c */
    MOE_IQ3_ENTRY(MOE_T_IQ1_S, iq1_s, avx2), MOE_IQ3_ENTRY(MOE_T_IQ1_M, iq1_m, avx2),
    .quantize_act8 = moe_quantize_act8_avx2,
    IQ2_ENTRIES(avx2),  /* IQ2_XXS, IQ2_XS, IQ2_S: iq2_avx2.c */
    ENTRY_WIDE_X4(MOE_T_IQ2_XXS, iq2_xxs), ENTRY_WIDE_X4(MOE_T_IQ2_XS, iq2_xs), ENTRY_WIDE_X4(MOE_T_IQ2_S, iq2_s),
    ENTRY_WIDE_X4(MOE_T_IQ3_XXS, iq3_xxs), ENTRY_WIDE_X4(MOE_T_IQ3_S, iq3_s),
    ENTRY_WIDE_X4(MOE_T_IQ1_S, iq1_s), ENTRY_WIDE_X4(MOE_T_IQ1_M, iq1_m),
};
