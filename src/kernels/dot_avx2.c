/* dot_avx2.c: the canonical f32 dot product with AVX2+FMA: lanes 0-7 and 8-15 of the
 * 16 accumulators are two ymm registers; the tail fma is blended in only for k < n, so
 * every lane sees exactly the reference's operations. */
#include "kern_internal.h"
#include "simd_avx2.h"

float kern_dot_f32_avx2(const float *a, const float *b, int64_t n)
{
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(b + k), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8), _mm256_loadu_ps(b + k + 8), hi);
    }
    if (k < n)
        kavx2_tail16(a + k, b + k, (int)(n - k), &lo, &hi);
    return kavx2_tree16(lo, hi);
}
