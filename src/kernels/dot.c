/* dot.c: the canonical f32 dot product (docs/numerics.md "Float dot product"), the
 * reference every float reduction in Kinetic follows, and its run-time dispatch. */
#include "kern_internal.h"

#include <math.h>

float kern_dot_tree16(float acc[KERN_DOT_LANES])
{
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++)
            acc[i] = acc[i] + acc[i + w];
    return acc[0];
}

float kern_dot_f32_ref(const float *a, const float *b, int64_t n)
{
    float acc[KERN_DOT_LANES] = {0};
    for (int64_t k = 0; k < n; k++)
        acc[k % 16] = fmaf(a[k], b[k], acc[k % 16]);
    return kern_dot_tree16(acc);
}

float kern_dot_f32(const float *a, const float *b, int64_t n)
{
    switch (kern_isa_active()) {
#if defined(KERN_ARCH_X86)
    case KERN_ISA_AVX512: return kern_dot_f32_avx512(a, b, n);
    case KERN_ISA_AVX2: return kern_dot_f32_avx2(a, b, n);
#elif defined(KERN_ARCH_ARM)
    case KERN_ISA_NEON: case KERN_ISA_DOTPROD: case KERN_ISA_I8MM:
        return kern_dot_f32_neon(a, b, n);
#endif
    default: return kern_dot_f32_ref(a, b, n);
    }
}
