/* rmsnorm.comp: y (rows, n) = rmsnorm(x) * w (rmsnorm_scalar): ss = the canonical dot of
 * the row with itself (lane k % 16 runs its fma chain, then the tree), mean = ss / n,
 * r = 1 / sqrt(mean + eps), y = (x * r) * w. One workgroup per row; in place allowed
 * (every element is read in both phases by the invocation that writes it, after the
 * barrier).
 *
 * Built with KN_LAYERNORM (layernorm.comp): y = kern_layernorm of x with gain w and bias b
 * (either may be absent): mean = (the 16-slot sum of the row: slot k % 16 adds x[k] in
 * order, then the tree) / n; d = x - mean; var = the canonical dot of d with itself / n;
 * r = 1 / sqrt(var + eps); y = ((d * r) * w) + b. */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) readonly buffer W { float w[]; };
#ifdef KN_LAYERNORM
layout(std430, set = 0, binding = 3) readonly buffer B { float bias[]; };
#endif

layout(push_constant) uniform P {
    uint x_off, y_off, w_off;
#ifdef KN_LAYERNORM
    uint b_off;
#endif
    uint rows, n;
    uint has_w;
#ifdef KN_LAYERNORM
    uint has_b;
#endif
    float eps;
} pc;

#include "kn_common.glsl"

shared float part[16];
shared float mean_sh, r_sh;

void main()
{
    uint row = gl_WorkGroupID.x, tid = gl_LocalInvocationID.x;
    if (row >= pc.rows)
        return;
    uint xb = pc.x_off + row * pc.n, yb = pc.y_off + row * pc.n;
#ifdef KN_LAYERNORM
    if (tid < 16u) {
        precise float acc = 0.0;
        for (uint k = tid; k < pc.n; k += 16u)
            acc = acc + x[xb + k];
        part[tid] = acc;
    }
    barrier();
    if (tid == 0u)
        mean_sh = kn_div(kn_tree16(part), float(pc.n));
    barrier();
    float mean = mean_sh;
#define KN_DEV(v) ((v) - mean) /* the deviation from the mean */
#else
#define KN_DEV(v) (v)
#endif
    if (tid < 16u) {
        precise float acc = 0.0;
        for (uint k = tid; k < pc.n; k += 16u) {
            precise float d = KN_DEV(x[xb + k]);
            acc = kn_fma(d, d, acc);
        }
        part[tid] = acc;
    }
    barrier();
    if (tid == 0u)
        r_sh = kn_rnorm(part, pc.n, pc.eps);
    barrier();
    float r = r_sh;
    for (uint k = tid; k < pc.n; k += 64u) {
        precise float v = KN_DEV(x[xb + k]);
        v = v * r;
        if (pc.has_w != 0u)
            v = v * w[pc.w_off + k];
#ifdef KN_LAYERNORM
        if (pc.has_b != 0u)
            v = v + bias[pc.b_off + k];
#endif
        y[yb + k] = v;
    }
}
