#version 450
// selftest: the device's own arithmetic for the start-up self-test (vk_selftest.c). For
// each triple (a, b, c) of in[], writes five results to out[]: fma(a, b, c), a / b,
// sqrt(a), a * b and a + c, each one operation (`precise`: nothing fused or reordered).
// The host compares them with the CPU's fmaf, /, sqrtf, * and + bit for bit.
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer In { uint v[]; } src;
layout(set = 0, binding = 1) writeonly buffer Out { uint v[]; } dst;
layout(push_constant) uniform P { uint n; } pc;

void main()
{
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.n)
        return;
    float a = uintBitsToFloat(src.v[3 * i + 0]);
    float b = uintBitsToFloat(src.v[3 * i + 1]);
    float c = uintBitsToFloat(src.v[3 * i + 2]);
    precise float f = fma(a, b, c);
    precise float d = a / b;
    precise float s = sqrt(a);
    precise float m = a * b;
    precise float p = a + c;
    dst.v[5 * i + 0] = floatBitsToUint(f);
    dst.v[5 * i + 1] = floatBitsToUint(d);
    dst.v[5 * i + 2] = floatBitsToUint(s);
    dst.v[5 * i + 3] = floatBitsToUint(m);
    dst.v[5 * i + 4] = floatBitsToUint(p);
}
