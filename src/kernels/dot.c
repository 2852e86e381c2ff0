/* dot.c: the canonical f32 dot product (docs/numerics.md "Float dot product"), the
 * reference every float reduction in Kinetic follows; kern_dot_f32 runs the active
 * level's (dispatch.c). */
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
    return kern_impl_active()->dot_f32(a, b, n);
}
