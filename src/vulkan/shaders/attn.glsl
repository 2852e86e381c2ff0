/* attn.comp: attention of one run's queries over its KV cache (kern_attn_scalar, the
 * reference; docs/numerics.md "Attention"). One workgroup per (head, query). The keys
 * [lo, p] are cut into 32-position tiles aligned to position 0; per tile, ascending:
 *   s_j  = canonical_dot(q, k_j) * scale   (512 (key, lane) chains over the workgroup,
 *                                            then one tree per key)
 *   m_t  = max of s_j (sequential, j ascending: NaN and zero signs as the reference)
 *   e_j  = exp(s_j - m_t);  l_t = the 16-slot sum of the e_j, then the tree
 *   o_t[d] = fma chain over j ascending (one invocation per d)
 *   m' = max(m, m_t), a = exp(m - m'), b = exp(m_t - m'),
 *   l = kn_fma(l_t, b, l * a), o[d] = kn_fma(o_t[d], b, o[d] * a)
 * then, with sinks (gpt-oss; pc.sinks), the head's sink merged as a tile (sink, 1, 0):
 *   m' = max(m, sink), a = exp(m - m'), l = l * a + exp(sink - m'), o[d] = o[d] * a,
 * and out[d] = o[d] / l. Built with KN_SOFTCAP (attn_softcap*.comp: Gemma 2; doubles) each
 * score is kern_softcapf(s_j, pc.softcap) before the max. The caches are head-major
 * (Hkv, n_ctx, D), f32 or f16 (widened exactly) or q8_0 (f16 = 2). Grid: (H, n_q).
 *
 * Built with KN_ATTN_PART (attn_part.comp) a workgroup computes one tile only, (head,
 * query, tile z of the query's tiles), and writes its (m_t, l_t, o_t) to the part buffer;
 * attn_merge.comp then merges each query's tiles in ascending order with the steps
 * above. The tiles of a decode step over a long cache run in parallel that way, and every
 * value is the one the single pass computes. Grid: (H, n_q, the most tiles of a query). */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer Q { float q[]; };
layout(std430, set = 0, binding = 1) readonly buffer KC { uint kc[]; };
layout(std430, set = 0, binding = 2) readonly buffer VC { uint vc[]; };
layout(std430, set = 0, binding = 3) writeonly buffer O { float outv[]; };
layout(std430, set = 0, binding = 4) readonly buffer Pos { int pos[]; };
#ifdef KN_ATTN_PART
layout(std430, set = 0, binding = 5) writeonly buffer Part { float part_out[]; };
#else
layout(std430, set = 0, binding = 5) readonly buffer Sinks { float sinks[]; };
#endif
#ifdef KN_SOFTCAP
#define KN_F64MATH 1
#endif

layout(push_constant) uniform P {
    uint q_off, out_off, pos_off;  /* the run's first query row, output row, position */
    uint H, Hkv, D, n_ctx;
    uint f16;      /* the cache type: 0 f32, 1 f16, 2 q8_0 */
    uint window;
    float scale;
    uint n_tiles;  /* KN_ATTN_PART: tiles per (query, head) in the part buffer */
    float softcap; /* KN_SOFTCAP: the cap c > 0 */
    uint sinks;    /* 1: merge sinks[h] (binding 5) before the division */
} pc;

#include "kn_common.glsl"

#define TILE 32u
#define MAXD 512u
#define NT 64u

shared float qv[MAXD];
shared float part[TILE][16];
shared float s_sh[TILE], e_sh[TILE];
shared float mt_sh, lt_sh, sa_sh, sb_sh, l_sh;

uint kv_word(bool is_k, uint i)
{
    return is_k ? kc[i] : vc[i];
}

/* Element e of a cache: f32, f16 (widened exactly) or q8_0 (kern_kv_q8_0_row: the int8
 * times the block's f16 scale, one exact product; blocks of 34 bytes, the scale at an
 * even byte). */
float kv(bool is_k, uint e)
{
    if (pc.f16 == 2u) {
        uint b0 = (e >> 5) * 34u, qa = b0 + 2u + (e & 31u);
        uint dw = kv_word(is_k, b0 >> 2) >> ((b0 & 2u) * 8u);
        int q = bitfieldExtract(int(kv_word(is_k, qa >> 2)), int((qa & 3u) * 8u), 8);
        precise float x = float(q) * kn_f16(dw & 0xffffu);
        return x;
    }
    uint w = kv_word(is_k, pc.f16 != 0u ? e >> 1 : e);
    if (pc.f16 == 0u)
        return uintBitsToFloat(w);
    return kn_f16((e & 1u) != 0u ? w >> 16 : w & 0xffffu);
}

/* One tile [t0, t0 + 31] clipped to [j0, j1]: leaves its scores' max in mt_sh, the
 * e_j in e_sh and l_t in lt_sh (the whole workgroup calls it). */
void tile(uint tid, int t0, int j0, int j1, uint kbase, uint D)
{
    /* scores: (key, lane) chains */
    for (uint pi = tid; pi < TILE * 16u; pi += NT) {
        uint jj = pi / 16u, lane = pi % 16u;
        int j = t0 + int(jj);
        if (j < j0 || j > j1)
            continue;
        uint kr = kbase + uint(j) * D;
        precise float acc = 0.0;
        for (uint d = lane; d < D; d += 16u)
            acc = kn_fma(qv[d], kv(true, kr + d), acc);
        part[jj][lane] = acc;
    }
    barrier();
    if (tid < TILE && t0 + int(tid) >= j0 && t0 + int(tid) <= j1) {
        precise float a[16];
        [[unroll]] for (int i = 0; i < 16; i++)
            a[i] = part[tid][i];
        [[unroll]] for (int wd = 8; wd >= 1; wd /= 2)
            [[unroll]] for (int i = 0; i < wd; i++)
                a[i] = a[i] + a[i + wd];
        precise float sc = a[0] * pc.scale;
#ifdef KN_SOFTCAP
        sc = kn_softcapf(sc, pc.softcap);
#endif
        s_sh[tid] = sc;
    }
    barrier();
    if (tid == 0u) {
        float mt = uintBitsToFloat(0xff800000u);
        for (int j = j0; j <= j1; j++)
            mt = s_sh[j - t0] > mt ? s_sh[j - t0] : mt;
        mt_sh = mt;
    }
    barrier();
    if (tid < TILE && t0 + int(tid) >= j0 && t0 + int(tid) <= j1) {
        precise float dif = s_sh[tid] - mt_sh;
        e_sh[tid] = kn_expf(dif);
    }
    barrier();
    if (tid == 0u) {
        precise float acc[16];
        [[unroll]] for (int i = 0; i < 16; i++)
            acc[i] = 0.0;
        for (int j = j0; j <= j1; j++)
            acc[(j - t0) % 16] = acc[(j - t0) % 16] + e_sh[j - t0];
        [[unroll]] for (int wd = 8; wd >= 1; wd /= 2)
            [[unroll]] for (int i = 0; i < wd; i++)
                acc[i] = acc[i] + acc[i + wd];
        lt_sh = acc[0];
    }
    barrier();
}

/* o_t[d] of the tile: the fma chain over its keys, ascending. */
float tile_o(int t0, int j0, int j1, uint kbase, uint D, uint d)
{
    precise float ot = 0.0;
    for (int j = j0; j <= j1; j++)
        ot = kn_fma(e_sh[j - t0], kv(false, kbase + uint(j) * D + d), ot);
    return ot;
}

void main()
{
    uint tid = gl_LocalInvocationID.x;
    uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
    uint g = h / (pc.H / pc.Hkv), D = pc.D;
    int p = pos[pc.pos_off + t];
    int lo = pc.window > 0u && p - int(pc.window) + 1 > 0 ? p - int(pc.window) + 1 : 0;
    uint kbase = g * pc.n_ctx * D; /* element of (g, position 0, 0) */
#ifdef KN_ATTN_PART
    int t0 = lo / int(TILE) * int(TILE) + int(gl_WorkGroupID.z * TILE);
    if (t0 > p)
        return; /* the query has fewer tiles (the whole workgroup) */
#endif
    uint qb = pc.q_off + t * pc.H * D + h * D;
    for (uint d = tid; d < D; d += NT)
        qv[d] = q[qb + d];
    barrier();
#ifdef KN_ATTN_PART
    int j0 = max(t0, lo), j1 = min(t0 + int(TILE) - 1, p);
    tile(tid, t0, j0, j1, kbase, D);
    uint pb = ((t * pc.H + h) * pc.n_tiles + gl_WorkGroupID.z) * (D + 2u);
    if (tid == 0u) {
        part_out[pb] = mt_sh;
        part_out[pb + 1u] = lt_sh;
    }
    for (uint d = tid; d < D; d += NT)
        part_out[pb + 2u + d] = tile_o(t0, j0, j1, kbase, D, d);
#else
    precise float o[MAXD / NT];
    [[unroll]] for (uint k = 0u; k < MAXD / NT; k++)
        o[k] = 0.0;
    precise float m = uintBitsToFloat(0xff800000u), l = 0.0; /* kept by invocation 0 */
    for (int t0 = lo / int(TILE) * int(TILE); t0 <= p; t0 += int(TILE)) {
        int j0 = max(t0, lo), j1 = min(t0 + int(TILE) - 1, p);
        tile(tid, t0, j0, j1, kbase, D);
        if (tid == 0u) {
            float mt = mt_sh;
            float mn = mt > m ? mt : m;
            precise float da = m - mn, db = mt - mn;
            float sa = kn_expf(da), sb = kn_expf(db);
            precise float la = l * sa;
            l = kn_fma(lt_sh, sb, la);
            m = mn;
            sa_sh = sa;
            sb_sh = sb;
        }
        barrier();
        float sa = sa_sh, sb = sb_sh;
        [[unroll]] for (uint k = 0u; k < MAXD / NT; k++) {
            uint d = tid + k * NT;
            if (d < D) {
                precise float ot = tile_o(t0, j0, j1, kbase, D, d);
                precise float oa = o[k] * sa;
                o[k] = kn_fma(ot, sb, oa);
            }
        }
        barrier();
    }
    if (pc.sinks != 0u) { /* kn_attn_sink */
        if (tid == 0u)
            sa_sh = kn_attn_sink(sinks[h], m, l);
        barrier();
        float sa = sa_sh;
        [[unroll]] for (uint k = 0u; k < MAXD / NT; k++)
            o[k] = o[k] * sa;
    }
    if (tid == 0u)
        l_sh = l;
    barrier();
    uint ob = pc.out_off + t * pc.H * D + h * D;
    [[unroll]] for (uint k = 0u; k < MAXD / NT; k++) {
        uint d = tid + k * NT;
        if (d < D)
            outv[ob + d] = kn_div(o[k], l_sh);
    }
#endif
}
