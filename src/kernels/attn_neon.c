/* attn_neon.c: attention over the KV cache with NEON, bit for bit the reference in attn.c
 * (docs/numerics.md "attention"). Per (query, head) pair the steps are the reference's:
 * each score is the canonical 16-lane dot (kern_dot_f32_neon: four float32x4_t
 * accumulators, masked tail), the tile's max, exps and lane sums are the reference's
 * scalar code, and the value sums and the merge run 4 head dims per vector (each dim its
 * own fmaf chain, as in the reference). F16 rows are widened exactly by FCVTL, Q8_0 rows
 * as the reference widens them; a soft-cap (Gemma 2) is the reference's scalar call. */
#include "kern_internal.h"
#include "kmath_neon.h"

/* Row p of kv head g as f32 (a pointer into the cache, or widened into buf). */
static const float *kv_row_neon(const void *base, int64_t stride, int64_t head_stride,
                                uint32_t type, int64_t p, int64_t g, int64_t d, float *buf)
{
    int64_t off = p * stride + g * (head_stride ? head_stride : d);
    if (type == QT_F32)
        return (const float *)base + off;
    if (type == QT_Q8_0) {
        /* off is a multiple of 32 (kern_attn_check): q * d, one exact product, as attn.c */
        kern_kv_q8_0_row((const struct block_q8_0 *)base + off / QK8_0, d, buf);
        return buf;
    }
    const uint16_t *h = (const uint16_t *)base + off;
    int64_t i = 0;
    for (; i + 4 <= d; i += 4)
        vst1q_f32(buf + i, vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h + i))));
    for (; i < d; i++) {
        kn_f16 v;
        memcpy(&v, h + i, sizeof v);
        buf[i] = quant_f16_to_f32(v);
    }
    return buf;
}

void kern_attn_neon(const struct kern_attn_args *a, int64_t begin, int64_t end)
{
    const int64_t D = a->head_dim, T = KERN_ATTN_TILE;
    const int64_t group = a->n_head / a->n_head_kv;
    float s[KERN_ATTN_TILE], e[KERN_ATTN_TILE];
    float o[KERN_ATTN_MAX_HEAD_DIM], ot[KERN_ATTN_MAX_HEAD_DIM], buf[KERN_ATTN_MAX_HEAD_DIM];
    for (int64_t idx = begin; idx < end; idx++) {
        int64_t t = idx / a->n_head, h = idx % a->n_head, g = h / group;
        const float *q = a->q + t * a->q_stride + h * D;
        int64_t p = a->q_pos[t];
        int64_t lo = kn_hd_attn_first_key(p, a->window);
        float m = -INFINITY, l = 0.0f;
        for (int64_t d = 0; d < D; d++)
            o[d] = 0.0f;
        for (int64_t t0 = lo / T * T; t0 <= p; t0 += T) {
            int64_t j0 = t0 > lo ? t0 : lo, j1 = t0 + T - 1 < p ? t0 + T - 1 : p;
            float mt = -INFINITY;
            for (int64_t j = j0; j <= j1; j++) {
                const float *k = kv_row_neon(a->k, a->k_stride, a->k_head_stride, a->kv_type, j,
                                             g, D, buf);
                s[j - t0] = kern_dot_f32_neon(q, k, D) * a->scale;
                if (a->softcap > 0.0f) /* Gemma 2: scalar, as the reference */
                    s[j - t0] = kern_softcapf(s[j - t0], a->softcap);
                mt = s[j - t0] > mt ? s[j - t0] : mt;
            }
            float acc[KN_LANES] = {0};
            for (int64_t j = j0; j <= j1; j++) {
                e[j - t0] = kern_expf(s[j - t0] - mt);
                acc[(j - t0) % KN_LANES] += e[j - t0];
            }
            float lt = kn_tree16(acc);
            for (int64_t d = 0; d < D; d++)
                ot[d] = 0.0f;
            for (int64_t j = j0; j <= j1; j++) {
                const float *v = kv_row_neon(a->v, a->v_stride, a->v_head_stride, a->kv_type, j,
                                             g, D, buf);
                float32x4_t ve = vdupq_n_f32(e[j - t0]);
                int64_t d = 0;
                for (; d + 4 <= D; d += 4)
                    vst1q_f32(ot + d, vfmaq_f32(vld1q_f32(ot + d), ve, vld1q_f32(v + d)));
                for (; d < D; d++)
                    ot[d] = fmaf(e[j - t0], v[d], ot[d]);
            }
            float mn = mt > m ? mt : m;
            float sa = kern_expf(m - mn), sb = kern_expf(mt - mn);
            l = fmaf(lt, sb, l * sa);
            float32x4_t va = vdupq_n_f32(sa), vb = vdupq_n_f32(sb);
            int64_t d = 0;
            for (; d + 4 <= D; d += 4)
                vst1q_f32(o + d, vfmaq_f32(vmulq_f32(vld1q_f32(o + d), va), vld1q_f32(ot + d), vb));
            for (; d < D; d++)
                o[d] = fmaf(ot[d], sb, o[d] * sa);
            m = mn;
        }
        if (a->sinks) { /* gpt-oss: as the reference */
            float sa = kn_attn_sink(a->sinks[h], &m, &l);
            for (int64_t d = 0; d < D; d++)
                o[d] = o[d] * sa;
        }
        float *out = a->out + t * a->out_stride + h * D;
        float32x4_t vl = vdupq_n_f32(l);
        int64_t d = 0;
        for (; d + 4 <= D; d += 4)
            vst1q_f32(out + d, vdivq_f32(vld1q_f32(o + d), vl));
        for (; d < D; d++)
            out[d] = o[d] / l;
    }
}
