/* dot_neon.c: the canonical f32 dot product with NEON: the 16 accumulators are four
 * float32x4_t; the tail fma is selected in only for k < n, so every lane sees exactly the
 * reference's operations. */
#include "kern_internal.h"
#include "simd_neon.h"

float kern_dot_f32_neon(const float *a, const float *b, int64_t n)
{
    float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                          vdupq_n_f32(0.0f)};
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int j = 0; j < 4; j++)
            acc[j] = vfmaq_f32(acc[j], vld1q_f32(a + k + 4 * j), vld1q_f32(b + k + 4 * j));
    if (k < n)
        kneon_tail16(a + k, b + k, (int)(n - k), acc);
    return kneon_tree16(acc);
}
