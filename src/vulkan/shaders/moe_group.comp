#version 450
/* moe_group.comp: the (token, rank) rows of a mixture-of-experts batch grouped by expert,
 * in order (cpu_moe_ffn's counting sort): for expert e, g[e] = how many rows j < R have
 * ids[j] == e, and g[n_expert + e R + i] is the i-th of them. One invocation per expert.
 * The products (mm_*.glsl with pc.expert = e) then run over exactly those rows. */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer I { int ids[]; };
layout(std430, set = 0, binding = 1) writeonly buffer G { int g[]; };

layout(push_constant) uniform P {
    uint R, n_expert;
} pc;

void main()
{
    uint e = gl_GlobalInvocationID.x;
    if (e >= pc.n_expert)
        return;
    uint n = 0u, base = pc.n_expert + e * pc.R;
    for (uint j = 0u; j < pc.R; j++)
        if (ids[j] == int(e))
            g[base + n++] = int(j);
    g[e] = int(n);
}
