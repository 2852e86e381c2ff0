#version 450
/* moe_sum.comp: each token's expert outputs weighted and summed in rank order (cpu_moe_ffn):
 * y[t][i] = yg[t k][i] * w[t k], then y[t][i] = y[t][i] + yg[t k + r][i] * w[t k + r] for
 * r = 1 .. k-1 (one multiply and one add each). Grid: (ceil(E / 64) capped, T). */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer YG { float yg[]; };
layout(std430, set = 0, binding = 1) readonly buffer W { float w[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };

layout(push_constant) uniform P {
    uint T, E, k;
} pc;

void main()
{
    uint t = gl_GlobalInvocationID.y;
    if (t >= pc.T)
        return;
    for (uint i = gl_GlobalInvocationID.x; i < pc.E; i += gl_NumWorkGroups.x * 64u) {
        precise float acc = yg[(t * pc.k) * pc.E + i] * w[t * pc.k];
        for (uint r = 1u; r < pc.k; r++) {
            precise float e = yg[(t * pc.k + r) * pc.E + i] * w[t * pc.k + r];
            acc = acc + e;
        }
        y[t * pc.E + i] = acc;
    }
}
