/* fma_probe.glsl: o[i] = kn_fma(a[3i], a[3i+1], a[3i+2]) for n triples: the probe that
 * tells whether the driver's fma() is fused (fma_probe) and that the double-precision
 * one (fma_probe_f64) is exact on this device (vkk_fma_probe). */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) writeonly buffer O { float o[]; };

layout(push_constant) uniform P {
    uint n;
} pc;

#include "kn_common.glsl"

void main()
{
    uint i = gl_GlobalInvocationID.x;
    if (i < pc.n)
        o[i] = kn_fma(a[3u * i], a[3u * i + 1u], a[3u * i + 2u]);
}
