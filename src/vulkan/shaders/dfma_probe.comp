#version 450
/* dfma_probe.comp: the double steps of kn_tanhf (kn_common.glsl) on triples (a, b, c) of
 * doubles: out = kn_dfma(a, b, c) (the driver's fma, or the integer build with
 * KN_SOFT_DFMA), a / b, and float(a). vkk_dfma_probe compares them with C's fma, / and
 * conversion. */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer In { uvec2 t[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Out { uint o[]; };

layout(push_constant) uniform P {
    uint n;
} pc;

#define KN_F64MATH 1
#include "kn_common.glsl"

void main()
{
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.n)
        return;
    double a = packDouble2x32(t[3u * i]), b = packDouble2x32(t[3u * i + 1u]);
    double c = packDouble2x32(t[3u * i + 2u]);
    uvec2 f = unpackDouble2x32(kn_dfma(a, b, c));
    precise double q = a / b;
    uvec2 d = unpackDouble2x32(q);
    o[5u * i] = f.x;
    o[5u * i + 1u] = f.y;
    o[5u * i + 2u] = d.x;
    o[5u * i + 3u] = d.y;
    o[5u * i + 4u] = floatBitsToUint(float(a));
}
