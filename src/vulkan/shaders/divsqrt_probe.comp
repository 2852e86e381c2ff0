#version 450
/* divsqrt_probe.comp: o[2i] = kn_div(a[2i], a[2i+1]), o[2i+1] = kn_sqrt(a[2i]) for n pairs:
 * the probe of the driver's division and sqrt (specialization constants off) and the test
 * of the integer builds (on), vkk_divsqrt_run. */
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
    if (i < pc.n) {
        o[2u * i] = kn_div(a[2u * i], a[2u * i + 1u]);
        o[2u * i + 1u] = kn_sqrt(a[2u * i]);
    }
}
