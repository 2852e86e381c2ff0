/* conv.comp: lfm2's short convolution over one run of the batch (cpu_shortconv, the
 * reference kern_shortconv; docs/numerics.md "Short convolution"). Two ops, dispatched
 * for every run of the batch in turn, all stores before any convolution (a token reads
 * the rows of the tokens before it):
 *   0 store  rows[pos[t] E + c] = B[t][c] * x[t][c]                  (one f32 multiply)
 *   1 conv   out[t][c] = C[t][c] * acc, acc = fma chain over the taps i = 0 .. L-1 of the
 *            slots p = pos[t] - (L-1) + i >= 0: acc = kn_fma(rows[p E + c], w[c L + i], acc)
 * where bcx row t is B, C, x (3E floats) and rows is the run's cache (n_ctx, E) f32.
 * Grid: x over c (64 per workgroup, striding over the grid when E is larger), y over the
 * run's tokens t0 .. t0 + n - 1. */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer BCX { float bcx[]; };
layout(std430, set = 0, binding = 1) buffer Rows { float rows[]; };
layout(std430, set = 0, binding = 2) readonly buffer W { float w[]; };
layout(std430, set = 0, binding = 3) buffer Out { float outv[]; };
layout(std430, set = 0, binding = 4) readonly buffer Pos { int pos[]; };

layout(push_constant) uniform P {
    uint op;
    uint E, L;
    uint t0, n;      /* tokens t0 .. t0 + n - 1 of the batch */
    uint n_ctx;
} pc;

#include "kn_common.glsl"

void main()
{
    uint t = pc.t0 + gl_GlobalInvocationID.y;
    if (gl_GlobalInvocationID.y >= pc.n)
        return;
    int p = pos[t];
    for (uint c = gl_GlobalInvocationID.x; c < pc.E; c += gl_NumWorkGroups.x * 64u) {
        uint b = t * 3u * pc.E;
        if (pc.op == 0u) {
            precise float bx = bcx[b + c] * bcx[b + 2u * pc.E + c];
            rows[uint(p) * pc.E + c] = bx;
            continue;
        }
        precise float acc = 0.0;
        for (uint i = 0u; i < pc.L; i++) {
            int q = p - int(pc.L - 1u) + int(i);
            if (q >= 0)
                acc = kn_fma(rows[uint(q) * pc.E + c], w[c * pc.L + i], acc);
        }
        precise float y = bcx[b + pc.E + c] * acc;
        outv[t * pc.E + c] = y;
    }
}
