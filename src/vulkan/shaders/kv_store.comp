#version 450
/* kv_store.comp: writes rows of this batch's keys and values into one run's head-major
 * caches (cpu_kv_store): head g of token t goes to slot pos[t], element
 * (g * n_ctx + pos[t]) * D + d, as f32 (a bit copy) or f16 (kn_f32_to_f16, round to
 * nearest even). One invocation per pair of elements (d, d + 1); with an odd D a pair's
 * halves of f16 can share a word with a neighbour row, so then each half is written on
 * its own with atomics on disjoint bits. Grid: (ceil(D / 2) / 64, Hkv, n). */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer KN { float k_new[]; };
layout(std430, set = 0, binding = 1) readonly buffer VN { float v_new[]; };
layout(std430, set = 0, binding = 2) buffer KC { uint kc[]; };
layout(std430, set = 0, binding = 3) buffer VC { uint vc[]; };
layout(std430, set = 0, binding = 4) readonly buffer Pos { int pos[]; };

layout(push_constant) uniform P {
    uint f16;        /* 0: f32 cache, 1: f16 */
    uint D, Hkv, n_ctx;
    uint t0, n;      /* tokens t0 .. t0 + n - 1 of the batch */
    uint pos_off;
} pc;

#include "kn_common.glsl"

void put16(bool is_k, uint e, uint h)
{
    uint sh = (e & 1u) * 16u;
    if (is_k) {
        atomicAnd(kc[e >> 1], ~(0xffffu << sh));
        atomicOr(kc[e >> 1], h << sh);
    } else {
        atomicAnd(vc[e >> 1], ~(0xffffu << sh));
        atomicOr(vc[e >> 1], h << sh);
    }
}

void main()
{
    uint d = 2u * gl_GlobalInvocationID.x, g = gl_GlobalInvocationID.y;
    uint t = pc.t0 + gl_GlobalInvocationID.z;
    if (d >= pc.D || g >= pc.Hkv || gl_GlobalInvocationID.z >= pc.n)
        return;
    uint src = (t * pc.Hkv + g) * pc.D + d;
    uint dst = (g * pc.n_ctx + uint(pos[pc.pos_off + t])) * pc.D + d;
    bool two = d + 1u < pc.D;
    if (pc.f16 == 0u) {
        kc[dst] = floatBitsToUint(k_new[src]);
        vc[dst] = floatBitsToUint(v_new[src]);
        if (two) {
            kc[dst + 1u] = floatBitsToUint(k_new[src + 1u]);
            vc[dst + 1u] = floatBitsToUint(v_new[src + 1u]);
        }
        return;
    }
    uint k0 = kn_f32_to_f16(k_new[src]), v0 = kn_f32_to_f16(v_new[src]);
    uint k1 = two ? kn_f32_to_f16(k_new[src + 1u]) : 0u;
    uint v1 = two ? kn_f32_to_f16(v_new[src + 1u]) : 0u;
    if ((pc.D & 1u) == 0u) { /* even D: the pair is one whole word */
        kc[dst >> 1] = k0 | (k1 << 16);
        vc[dst >> 1] = v0 | (v1 << 16);
        return;
    }
    put16(true, dst, k0);
    put16(false, dst, v0);
    if (two) {
        put16(true, dst + 1u, k1);
        put16(false, dst + 1u, v1);
    }
}
