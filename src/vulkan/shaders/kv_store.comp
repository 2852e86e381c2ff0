#version 450
/* kv_store.comp: writes rows of this batch's keys and values into one run's head-major
 * caches (cpu_kv_store): head g of token t goes to slot pos[t], element
 * (g * n_ctx + pos[t]) * D + d, as f32 (a bit copy) or f16 (kn_f32_to_f16, round to
 * nearest even) or q8_0 (kv_q8_0 below: the CPU's quant_quantize_row, block by block).
 * f32 and f16: one invocation per pair of elements (d, d + 1); with an odd D a pair's
 * halves of f16 can share a word with a neighbour row, so then each half is written on
 * its own with atomics on disjoint bits. q8_0: one invocation per 32-element block (34
 * bytes: f16 scale, 32 int8), whose words shared with a neighbour block (16-bit halves)
 * are written with atomics. Grid: (ceil(D / 2) / 64, Hkv, n). */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer KN { float k_new[]; };
layout(std430, set = 0, binding = 1) readonly buffer VN { float v_new[]; };
layout(std430, set = 0, binding = 2) buffer KC { uint kc[]; };
layout(std430, set = 0, binding = 3) buffer VC { uint vc[]; };
layout(std430, set = 0, binding = 4) readonly buffer Pos { int pos[]; };

layout(push_constant) uniform P {
    uint f16;        /* 0: f32 cache, 1: f16, 2: q8_0 */
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

/* Block blk (of 32 elements from src) of a q8_0 row, at byte b0 (even) of the cache, as
 * qz_q8_0 (src/quant/quantize.c): amax = the largest |x| (NaN skipped), d = amax / 127,
 * id = d != 0 ? 1 / d : 0, the scale stored as f16(d), q = round-half-away(clamp(x * id,
 * -127, 127)), NaN -> 0. */
void kv_q8_0(bool is_k, uint src, uint b0)
{
    uint am = 0u; /* as bits: the order of non-negative floats */
    for (uint j = 0u; j < 32u; j++) {
        uint a = floatBitsToUint(is_k ? k_new[src + j] : v_new[src + j]) & 0x7fffffffu;
        am = a > 0x7f800000u ? am : max(am, a);
    }
    float amax = uintBitsToFloat(am);
    float d = kn_div(amax, 127.0);
    float id = d != 0.0 ? kn_div(1.0, d) : 0.0;
    uint q[8];
    [[unroll]] for (uint w = 0u; w < 8u; w++)
        q[w] = 0u;
    for (uint j = 0u; j < 32u; j++) {
        precise float v = (is_k ? k_new[src + j] : v_new[src + j]) * id;
        v = kn_isnan(v) ? 0.0 : v;
        v = v < 127.0 ? v : 127.0;
        v = v > -127.0 ? v : -127.0;
        precise float a = uintBitsToFloat(floatBitsToUint(v) & 0x7fffffffu);
        precise float r = a + 12582912.0;
        r = r - 12582912.0;
        precise float dif = a - r;
        r = r + (dif == 0.5 ? 1.0 : 0.0);
        int qi = int(r) * (floatBitsToUint(v) >> 31 != 0u ? -1 : 1);
        q[j / 4u] |= (uint(qi) & 0xffu) << (8u * (j % 4u));
    }
    uint dh = kn_f32_to_f16(d);
    /* bytes: d (2), then q (32); b0 even */
    if ((b0 & 3u) == 0u) {
        uint w0 = b0 >> 2;
        /* word w0: d, q0 q1; words w0+1..w0+7: q2..q29; word w0+8 low half: q30 q31 */
        uint words[9];
        words[0] = dh | (q[0] << 16);
        [[unroll]] for (uint w = 1u; w < 8u; w++)
            words[w] = (q[w - 1u] >> 16) | (q[w] << 16);
        words[8] = q[7] >> 16;
        for (uint w = 0u; w < 8u; w++) {
            if (is_k)
                kc[w0 + w] = words[w];
            else
                vc[w0 + w] = words[w];
        }
        put16(is_k, (w0 + 8u) * 2u, words[8]);
    } else {
        uint w0 = (b0 + 2u) >> 2; /* d is the high half of word w0 - 1 */
        put16(is_k, b0 >> 1, dh);
        for (uint w = 0u; w < 8u; w++) {
            if (is_k)
                kc[w0 + w] = q[w];
            else
                vc[w0 + w] = q[w];
        }
    }
}

void main()
{
    uint d = 2u * gl_GlobalInvocationID.x, g = gl_GlobalInvocationID.y;
    uint t = pc.t0 + gl_GlobalInvocationID.z;
    if (d >= pc.D || g >= pc.Hkv || gl_GlobalInvocationID.z >= pc.n)
        return;
    if (pc.f16 == 2u) { /* q8_0: invocation x is block x of the head's row */
        uint blk = gl_GlobalInvocationID.x, nb = pc.D / 32u;
        if (blk >= nb)
            return;
        uint src = (t * pc.Hkv + g) * pc.D + blk * 32u;
        uint b0 = ((g * pc.n_ctx + uint(pos[pc.pos_off + t])) * nb + blk) * 34u;
        kv_q8_0(true, src, b0);
        kv_q8_0(false, src, b0);
        return;
    }
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
