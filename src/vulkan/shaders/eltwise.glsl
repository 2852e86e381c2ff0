/* eltwise.comp: the elementwise backend ops (ops.c's scalar loops, the same single
 * IEEE step per element):
 *   0 add       y[i] = y[i] + a[i]                       (i < n)
 *   1 add_rows  y[r n + i] = y[r n + i] + a[i]           (r < rows)
 *   2 scale     y[i] = y[i] * v
 *   3 swiglu    y[i] = silu(y[i]) * a[i]
 *   4 geglu     y[i] = gelu(y[i]) * a[i]
 *   5 gather    y[r n + i] = a[idx[r] n + i]             (a bit copy)
 *   6 swiglu_oai y[i] = swiglu_oai(y[i], a[i])            (gpt-oss's clamped SwiGLU)
 *   7 gelu      y[i] = gelu(y[i])                        (BERT's ungated activation)
 * Grid: x over i (64 per workgroup, striding over the grid when n is larger), y over r. */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) buffer Y { float y[]; };
layout(std430, set = 0, binding = 1) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 2) readonly buffer I { uint idx[]; };

layout(push_constant) uniform P {
    uint op;
    uint n, rows;
    uint y_off, a_off, idx_off;
    float v;
} pc;

#include "kn_common.glsl"

void one(uint i, uint r);

void main()
{
    uint r = gl_GlobalInvocationID.y;
    if (r >= pc.rows)
        return;
    for (uint i = gl_GlobalInvocationID.x; i < pc.n; i += gl_NumWorkGroups.x * 64u)
        one(i, r);
}

void one(uint i, uint r)
{
    uint yi = pc.y_off + r * pc.n + i;
    if (pc.op == 5u) {
        y[yi] = a[pc.a_off + idx[pc.idx_off + r] * pc.n + i];
        return;
    }
    precise float out_v;
    if (pc.op == 0u || pc.op == 1u) {
        out_v = y[yi] + a[pc.a_off + (pc.op == 1u ? i : r * pc.n + i)];
    } else if (pc.op == 2u) {
        out_v = y[yi] * pc.v;
    } else if (pc.op == 6u) {
        out_v = kn_swiglu_oai(y[yi], a[pc.a_off + r * pc.n + i]);
    } else if (pc.op == 7u) {
        out_v = kn_gelu(y[yi]);
    } else {
        precise float g = pc.op == 3u ? kn_silu(y[yi]) : kn_gelu(y[yi]);
        out_v = g * a[pc.a_off + r * pc.n + i];
    }
    y[yi] = out_v;
}
