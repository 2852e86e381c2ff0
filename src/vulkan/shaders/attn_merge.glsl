/* attn_merge.glsl: the second half of the split attention (attn.glsl, KN_ATTN_PART):
 * for one (head, query), the tiles' (m_t, l_t, o_t) merged in ascending order into the
 * running state (-inf, 0, 0) exactly as the single pass does,
 *   m' = max(m, m_t), a = exp(m - m'), b = exp(m_t - m'),
 *   l = fma(l_t, b, l * a), o[d] = fma(o_t[d], b, o[d] * a),
 * then with sinks (pc.sinks) the head's sink merged as attn.glsl does (kn_attn_sink), and
 * out[d] = o[d] / l. Every invocation follows the scalars (the same operations on the same
 * values); invocation d keeps o[d]. Grid: (H, n_q). */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer Part { float part_in[]; };
layout(std430, set = 0, binding = 1) writeonly buffer O { float outv[]; };
layout(std430, set = 0, binding = 2) readonly buffer Pos { int pos[]; };
layout(std430, set = 0, binding = 3) readonly buffer Sinks { float sinks[]; };

layout(push_constant) uniform P {
    uint out_off, pos_off;
    uint H, D;
    uint window;
    uint n_tiles;
    uint sinks;    /* 1: merge sinks[h] before the division */
} pc;

#include "kn_common.glsl"

#define TILE 32
#define MAXD 512u
#define NT 64u

void main()
{
    uint tid = gl_LocalInvocationID.x;
    uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y, D = pc.D;
    int p = pos[pc.pos_off + t];
    int lo = pc.window > 0u && p - int(pc.window) + 1 > 0 ? p - int(pc.window) + 1 : 0;
    uint n = uint(p / TILE - lo / TILE + 1);
    precise float o[MAXD / NT];
    [[unroll]] for (uint k = 0u; k < MAXD / NT; k++)
        o[k] = 0.0;
    precise float m = uintBitsToFloat(0xff800000u), l = 0.0;
    for (uint z = 0u; z < n; z++) {
        uint pb = ((t * pc.H + h) * pc.n_tiles + z) * (D + 2u);
        float mt = part_in[pb];
        float mn = mt > m ? mt : m;
        precise float da = m - mn, db = mt - mn;
        float sa = kn_expf(da), sb = kn_expf(db);
        precise float la = l * sa;
        l = kn_fma(part_in[pb + 1u], sb, la);
        m = mn;
        [[unroll]] for (uint k = 0u; k < MAXD / NT; k++) {
            uint d = tid + k * NT;
            if (d < D) {
                precise float oa = o[k] * sa;
                o[k] = kn_fma(part_in[pb + 2u + d], sb, oa);
            }
        }
    }
    if (pc.sinks != 0u) { /* kn_attn_sink */
        float sa = kn_attn_sink(sinks[h], m, l);
        [[unroll]] for (uint k = 0u; k < MAXD / NT; k++)
            o[k] = o[k] * sa;
    }
    uint ob = pc.out_off + t * pc.H * D + h * D;
    [[unroll]] for (uint k = 0u; k < MAXD / NT; k++) {
        uint d = tid + k * NT;
        if (d < D)
            outv[ob + d] = kn_div(o[k], l);
    }
}
