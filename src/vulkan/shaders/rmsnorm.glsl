/* rmsnorm.comp: y (rows, n) = rmsnorm(x) * w (rmsnorm_scalar): ss = the canonical dot of
 * the row with itself (lane k % 16 runs its fma chain, then the tree), mean = ss / n,
 * r = 1 / sqrt(mean + eps), y = (x * r) * w. One workgroup per row; in place allowed
 * (every element is read in both phases by the invocation that writes it, after the
 * barrier). */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) readonly buffer W { float w[]; };

layout(push_constant) uniform P {
    uint x_off, y_off, w_off;
    uint rows, n;
    uint has_w;
    float eps;
} pc;

#include "kn_common.glsl"

shared float part[16];
shared float r_sh;

void main()
{
    uint row = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
    if (row >= pc.rows)
        return;
    uint xb = pc.x_off + row * pc.n, yb = pc.y_off + row * pc.n;
    if (tid < 16u) {
        precise float acc = 0.0;
        for (uint k = tid; k < pc.n; k += 16u)
            acc = kn_fma(x[xb + k], x[xb + k], acc);
        part[tid] = acc;
    }
    barrier();
    if (tid == 0u)
        r_sh = kn_rnorm(part, pc.n, pc.eps);
    barrier();
    float r = r_sh;
    for (uint k = tid; k < pc.n; k += 64u) {
        precise float v = x[xb + k] * r;
        if (pc.has_w != 0u)
            v = v * w[pc.w_off + k];
        y[yb + k] = v;
    }
}
