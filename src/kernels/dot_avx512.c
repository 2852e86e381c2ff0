/* dot_avx512.c: the canonical f32 dot product with AVX-512: the 16 accumulators are one
 * zmm register; the tail is a masked fma that leaves lanes past the end untouched. */
#include "kern_internal.h"
#include "simd_avx512.h"

float kern_dot_f32_avx512(const float *a, const float *b, int64_t n)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
    if (k < n) {
        __mmask16 m = (__mmask16)((1u << (n - k)) - 1);
        acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k),
                                    acc, m);
    }
    return k512_tree16(acc);
}
