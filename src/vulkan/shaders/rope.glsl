/* rope.comp: rotates x (T, H, D) in place by the sin/cos table (T, n_rot: the cos of
 * the n_rot/2 pairs, then their sin), kern_rope_scalar's steps:
 *   y0 = kn_fma(x0, c, -(x1 * s)),  y1 = kn_fma(x0, s, x1 * c)
 * pairs (2i, 2i+1) (NORM) or (i, i + n_rot/2) (NEOX). One invocation per (pair, head,
 * token); dims past n_rot are not touched. */
layout(local_size_x = 64, local_size_y = 1, local_size_z = 1) in;

layout(std430, set = 0, binding = 0) buffer X { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Tab { float tab[]; };

layout(push_constant) uniform P {
    uint x_off, tab_off;
    uint T, H, D, n_rot;
    uint neox;
} pc;

#include "kn_common.glsl"

void main()
{
    uint i = gl_GlobalInvocationID.x, h = gl_GlobalInvocationID.y, t = gl_GlobalInvocationID.z;
    uint half_ = pc.n_rot / 2u;
    if (i >= half_ || h >= pc.H || t >= pc.T)
        return;
    uint base = pc.x_off + (t * pc.H + h) * pc.D;
    uint i0 = pc.neox != 0u ? i : 2u * i;
    uint i1 = pc.neox != 0u ? i + half_ : 2u * i + 1u;
    float c = tab[pc.tab_off + t * pc.n_rot + i];
    float s = tab[pc.tab_off + t * pc.n_rot + half_ + i];
    float x0 = x[base + i0], x1 = x[base + i1];
    precise float x1s = x1 * s;
    precise float y0 = kn_fma(x0, c, -x1s);
    precise float x1c = x1 * c;
    precise float y1 = kn_fma(x0, s, x1c);
    x[base + i0] = y0;
    x[base + i1] = y1;
}
