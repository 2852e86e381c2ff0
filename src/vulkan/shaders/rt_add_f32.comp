#version 450
// rt_add_f32: y[i] = y[i] + a[i] * s for i < n. The runtime's own test shader
// (tests/unit/test_vk_rt.c): a workgroup size from specialization constant 0, two
// storage buffers, a push-constant block. `precise` keeps the multiply and the add
// two correctly rounded operations (no contraction into an fma), as on the CPU.
layout(local_size_x_id = 0) in;
layout(set = 0, binding = 0) buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer A { float a[]; };
layout(push_constant) uniform P { uint n; float s; } pc;

void main()
{
    uint i = gl_GlobalInvocationID.x;
    if (i >= pc.n)
        return;
    precise float t = a[i] * pc.s;
    precise float r = y[i] + t;
    y[i] = r;
}
