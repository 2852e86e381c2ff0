#version 450
/* moe_bias.comp: gpt-oss's expert biases (cpu_moe_ffn): every row routed to expert e (the
 * grouping of moe_group.comp: g[e] rows, listed at g[n_expert + e R]) plus the expert's
 * bias, y[row][i] = y[row][i] + b[i]. Grid: (ceil(n / 64) capped, the most rows an
 * expert can have); slots past the expert's count return at once. */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) readonly buffer G { int g[]; };

layout(push_constant) uniform P {
    uint R, n_expert, expert, n;
} pc;

void main()
{
    uint j = gl_GlobalInvocationID.y;
    if (j >= uint(g[pc.expert]))
        return;
    uint row = uint(g[pc.n_expert + pc.expert * pc.R + j]);
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * 64u) {
        precise float v = y[row * pc.n + i] + b[i];
        y[row * pc.n + i] = v;
    }
}
