#version 450
/* actq.comp: per-token activation quantization (kern_quantize_row_q8f_ref / _q8k_ref),
 * in the CPU's layouts: KERN_ACT_Q8_32 blocks {float d; int s; int8 qs[32]} (10 words),
 * KERN_ACT_Q8_K blocks {float d; int8 qs[256]; int16 bsums[16]} (73 words).
 *   amax = largest |x| (NaN skipped; as bits: the order of non-negative floats)
 *   d = amax / 127, id = amax > 0 ? 127 / amax : 0
 *   q = round-half-even(clamp(x * id, -127, 127)), NaN -> 0
 * Integer sums are exact in any order. 256 invocations: one Q8_K block or eight Q8_32
 * blocks per workgroup; grid (K / 256 rounded up, M). */
layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Q { uint q[]; };

layout(push_constant) uniform P {
    uint x_off, q_off;
    uint K, M;
    uint bs;        /* block: 32 (Q8_32) or 256 (Q8_K) */
    uint row_words; /* words of one quantized row */
} pc;

#include "kn_common.glsl"

shared uint red[256];
shared int qs[256];
shared float d_sh[8], id_sh[8];

void main()
{
    uint tid = gl_LocalInvocationID.x, m = gl_WorkGroupID.y;
    uint e = gl_WorkGroupID.x * 256u + tid; /* element of the row */
    bool live = e < pc.K;
    float v = live ? x[pc.x_off + m * pc.K + e] : 0.0;
    uint a = floatBitsToUint(v) & 0x7fffffffu;
    red[tid] = a > 0x7f800000u ? 0u : a;
    barrier();
    /* max within each block of bs invocations (bs a power of two) */
    for (uint w = pc.bs / 2u; w >= 1u; w /= 2u) {
        if ((tid % pc.bs) < w)
            red[tid] = max(red[tid], red[tid + w]);
        barrier();
    }
    uint blk = tid / pc.bs;
    if (tid % pc.bs == 0u) {
        float amax = uintBitsToFloat(red[tid]);
        d_sh[blk] = kn_div(amax, 127.0);
        id_sh[blk] = amax > 0.0 ? kn_div(127.0, amax) : 0.0;
    }
    barrier();
    precise float vq = v * id_sh[blk];
    int qi = 0;
    if (!kn_isnan(vq)) {
        precise float c = vq > 127.0 ? 127.0 : vq;
        c = c < -127.0 ? -127.0 : c;
        precise float r = c + 12582912.0;
        r = r - 12582912.0;
        qi = int(r);
    }
    qs[tid] = live ? qi : 0;
    barrier();
    /* write the blocks: word w of block blk */
    uint nblk = 256u / pc.bs;
    uint bw = pc.bs == 32u ? 10u : 73u;
    uint b0 = gl_WorkGroupID.x * nblk; /* first block of this workgroup in the row */
    uint bl = tid / bw, w = tid % bw;
    if (tid < nblk * bw && (b0 + bl) * pc.bs < pc.K) {
        uint base = bl * pc.bs;
        uint out_w;
        if (w == 0u) {
            out_w = floatBitsToUint(d_sh[bl]);
        } else if (pc.bs == 32u && w == 1u) {
            int s = 0;
            for (uint i = 0u; i < 32u; i++)
                s += qs[base + i];
            out_w = uint(s);
        } else if (pc.bs == 32u || w < 65u) {
            uint j = base + 4u * (w - (pc.bs == 32u ? 2u : 1u));
            out_w = (uint(qs[j]) & 0xffu) | ((uint(qs[j + 1u]) & 0xffu) << 8) |
                    ((uint(qs[j + 2u]) & 0xffu) << 16) | ((uint(qs[j + 3u]) & 0xffu) << 24);
        } else {
            uint j = 2u * (w - 65u); /* bsums j, j + 1 */
            int s0 = 0, s1 = 0;
            for (uint i = 0u; i < 16u; i++) {
                s0 += qs[base + 16u * j + i];
                s1 += qs[base + 16u * (j + 1u) + i];
            }
            out_w = (uint(s0) & 0xffffu) | (uint(s1) << 16);
        }
        q[pc.q_off + m * pc.row_words + (b0 + bl) * bw + w] = out_w;
    }
}
