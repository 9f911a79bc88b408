/* membw_avx2.c — the AVX2 reader for moe_measure_read_bandwidth (membw.c),
 * compiled with -mavx2 and called only when the CPU reports AVX2. */
#include <stddef.h>
#include <stdint.h>
#if defined(__x86_64__)
#include <immintrin.h>

uint64_t moe_membw_sum_avx2(const void *p, size_t n);

/* Not instrumented in sanitizer builds (see membw.c). */
#if defined(__SANITIZE_ADDRESS__)
__attribute__((no_sanitize_address))
#endif
/* n is a multiple of 256 and p 32-byte aligned (membw.c guarantees both):
 * eight 256-bit loads (four cache lines) per iteration in four chains. */
uint64_t moe_membw_sum_avx2(const void *p, size_t n) {
    const __m256i *v = p;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n / 32; i += 8) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(v + i));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(v + i + 1));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(v + i + 2));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(v + i + 3));
        a0 = _mm256_add_epi64(a0, _mm256_load_si256(v + i + 4));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256(v + i + 5));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256(v + i + 6));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256(v + i + 7));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, s);
    return out[0] + out[1] + out[2] + out[3];
}
#endif
