/* attn_avx512.c: attention over the KV cache with AVX-512, bit for bit the reference in
 * attn.c. The canonical dot's 16 accumulators are one zmm register; a short tail uses a
 * masked fma, so lanes past the end keep their value exactly as in the reference. */
#if defined(__x86_64__)
#include "kmath_avx512.h"

static inline __m512 load16(const void *base, uint32_t type, int64_t off)
{
    if (type == QT_F32)
        return _mm512_loadu_ps((const float *)base + off);
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const kn_f16 *)base + off)));
}

static inline __m512 load16z(__mmask16 k, const void *base, uint32_t type, int64_t off)
{
    if (type == QT_F32)
        return _mm512_maskz_loadu_ps(k, (const float *)base + off);
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const kn_f16 *)base + off));
}

static inline float dot_row(const float *q, const void *k, uint32_t type, int64_t off, int64_t D)
{
    __m512 acc = _mm512_setzero_ps();
    int64_t d = 0;
    for (; d + 16 <= D; d += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), load16(k, type, off + d), acc);
    if (d < D) {
        __mmask16 m = kn_mask16(D - d);
        acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d), load16z(m, k, type, off + d),
                                    acc, m);
    }
    return kn_tree16v(acc);
}

void kern_attn_avx512(const struct kern_attn_args *a, int64_t begin, int64_t end)
{
    const int64_t D = a->head_dim, T = KERN_ATTN_TILE;
    const int64_t group = a->n_head / a->n_head_kv;
    const uint32_t type = a->kv_type;
    float s[KERN_ATTN_TILE] __attribute__((aligned(64)));
    float e[KERN_ATTN_TILE] __attribute__((aligned(64)));
    float o[KERN_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    for (int64_t idx = begin; idx < end; idx++) {
        int64_t t = idx / a->n_head, h = idx % a->n_head, g = h / group;
        const float *q = a->q + t * a->q_stride + h * D;
        int64_t p = a->q_pos[t];
        int64_t lo = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
        float m = -INFINITY, l = 0.0f;
        for (int64_t d = 0; d < D; d++)
            o[d] = 0.0f;
        for (int64_t t0 = lo / T * T; t0 <= p; t0 += T) {
            int64_t j0 = t0 > lo ? t0 : lo, j1 = t0 + T - 1 < p ? t0 + T - 1 : p;
            float mt = -INFINITY;
            _mm512_store_ps(s, _mm512_set1_ps(-INFINITY));
            _mm512_store_ps(s + 16, _mm512_set1_ps(-INFINITY));
            for (int64_t j = j0; j <= j1; j++) {
                float sc = dot_row(q, a->k, type, j * a->k_stride + g * D, D) * a->scale;
                s[j - t0] = sc;
                mt = sc > mt ? sc : mt;
            }
            __m512 vmt = _mm512_set1_ps(mt);
            __m512 e0 = kn_exp16(_mm512_sub_ps(_mm512_load_ps(s), vmt));
            __m512 e1 = kn_exp16(_mm512_sub_ps(_mm512_load_ps(s + 16), vmt));
            _mm512_store_ps(e, e0);
            _mm512_store_ps(e + 16, e1);
            /* slot i and i + 16 share accumulator i: (+0 + e[i]) + e[i + 16] */
            float lt = kn_tree16v(_mm512_add_ps(_mm512_add_ps(_mm512_setzero_ps(), e0), e1));
            float mn = mt > m ? mt : m;
            float sa = kern_expf(m - mn), sb = kern_expf(mt - mn);
            l = fmaf(lt, sb, l * sa);
            __m512 va = _mm512_set1_ps(sa), vb = _mm512_set1_ps(sb);
            const int64_t vbase = g * D;
            int64_t d = 0;
            for (; d + 64 <= D; d += 64) {
                __m512 o0 = _mm512_setzero_ps(), o1 = _mm512_setzero_ps();
                __m512 o2 = _mm512_setzero_ps(), o3 = _mm512_setzero_ps();
                for (int64_t j = j0; j <= j1; j++) {
                    __m512 ev = _mm512_set1_ps(e[j - t0]);
                    int64_t off = j * a->v_stride + vbase + d;
                    o0 = _mm512_fmadd_ps(ev, load16(a->v, type, off), o0);
                    o1 = _mm512_fmadd_ps(ev, load16(a->v, type, off + 16), o1);
                    o2 = _mm512_fmadd_ps(ev, load16(a->v, type, off + 32), o2);
                    o3 = _mm512_fmadd_ps(ev, load16(a->v, type, off + 48), o3);
                }
                _mm512_store_ps(o + d, _mm512_fmadd_ps(o0, vb, _mm512_mul_ps(_mm512_load_ps(o + d), va)));
                _mm512_store_ps(o + d + 16, _mm512_fmadd_ps(o1, vb, _mm512_mul_ps(_mm512_load_ps(o + d + 16), va)));
                _mm512_store_ps(o + d + 32, _mm512_fmadd_ps(o2, vb, _mm512_mul_ps(_mm512_load_ps(o + d + 32), va)));
                _mm512_store_ps(o + d + 48, _mm512_fmadd_ps(o3, vb, _mm512_mul_ps(_mm512_load_ps(o + d + 48), va)));
            }
            for (; d < D; d += 16) {
                __mmask16 k = kn_mask16(D - d < 16 ? D - d : 16);
                __m512 o0 = _mm512_setzero_ps();
                for (int64_t j = j0; j <= j1; j++)
                    o0 = _mm512_fmadd_ps(_mm512_set1_ps(e[j - t0]),
                                         load16z(k, a->v, type, j * a->v_stride + vbase + d), o0);
                __m512 prev = _mm512_maskz_load_ps(k, o + d);
                _mm512_mask_store_ps(o + d, k, _mm512_fmadd_ps(o0, vb, _mm512_mul_ps(prev, va)));
            }
            m = mn;
        }
        float *out = a->out + t * a->out_stride + h * D;
        __m512 vl = _mm512_set1_ps(l);
        for (int64_t d = 0; d < D; d += 16) {
            __mmask16 k = kn_mask16(D - d < 16 ? D - d : 16);
            _mm512_mask_storeu_ps(out + d, k, _mm512_div_ps(_mm512_maskz_load_ps(k, o + d), vl));
        }
    }
}
#endif
