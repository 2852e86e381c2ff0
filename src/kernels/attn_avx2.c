/* attn_avx2.c: attention over the KV cache with AVX2 + FMA + F16C, bit for bit the
 * reference in attn.c (which states the order of operations). Scores use the canonical
 * 16-lane dot (two ymm accumulators); the tile's exps are computed 8 slots at a time with
 * slots outside the visible range set to -inf (exp gives +0, which leaves the canonical
 * sum's lanes as the reference leaves them); the value sums run over keys in ascending
 * order for 32 dims at a time in registers. */
#if defined(__x86_64__)
#include "kmath_avx2.h"

static inline __m256 load8(const void *base, uint32_t type, int64_t off)
{
    if (type == QT_F32)
        return _mm256_loadu_ps((const float *)base + off);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const kn_f16 *)base + off)));
}

static inline float load1(const void *base, uint32_t type, int64_t off)
{
    if (type == QT_F32)
        return ((const float *)base)[off];
    return quant_f16_to_f32(((const kn_f16 *)base)[off]);
}

/* Canonical dot of q with the cache row at element offset off. */
static inline float dot_row(const float *q, const void *k, uint32_t type, int64_t off, int64_t D)
{
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int64_t d = 0;
    for (; d + 16 <= D; d += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), load8(k, type, off + d), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), load8(k, type, off + d + 8), hi);
    }
    if (d == D)
        return kn_tree8x2(lo, hi);
    float acc[KN_LANES];
    _mm256_storeu_ps(acc, lo);
    _mm256_storeu_ps(acc + 8, hi);
    for (; d < D; d++)
        acc[d % KN_LANES] = fmaf(q[d], load1(k, type, off + d), acc[d % KN_LANES]);
    return kn_tree16(acc);
}

void kern_attn_avx2(const struct kern_attn_args *a, int64_t begin, int64_t end)
{
    const int64_t D = a->head_dim, T = KERN_ATTN_TILE;
    const int64_t group = a->n_head / a->n_head_kv;
    const uint32_t type = a->kv_type;
    float s[KERN_ATTN_TILE] __attribute__((aligned(32)));
    float e[KERN_ATTN_TILE] __attribute__((aligned(32)));
    float o[KERN_ATTN_MAX_HEAD_DIM] __attribute__((aligned(32)));
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
            for (int64_t i = 0; i < T; i++)
                s[i] = -INFINITY;
            for (int64_t j = j0; j <= j1; j++) {
                float sc = dot_row(q, a->k, type, j * a->k_stride + g * D, D) * a->scale;
                s[j - t0] = sc;
                mt = sc > mt ? sc : mt;
            }
            __m256 vmt = _mm256_set1_ps(mt);
            __m256 e0 = kn_exp8(_mm256_sub_ps(_mm256_load_ps(s), vmt));
            __m256 e1 = kn_exp8(_mm256_sub_ps(_mm256_load_ps(s + 8), vmt));
            __m256 e2 = kn_exp8(_mm256_sub_ps(_mm256_load_ps(s + 16), vmt));
            __m256 e3 = kn_exp8(_mm256_sub_ps(_mm256_load_ps(s + 24), vmt));
            _mm256_store_ps(e, e0);
            _mm256_store_ps(e + 8, e1);
            _mm256_store_ps(e + 16, e2);
            _mm256_store_ps(e + 24, e3);
            /* lanes: slot i and i + 16 share accumulator i; (+0 + e[i]) + e[i + 16] */
            float lt = kn_tree8x2(_mm256_add_ps(_mm256_add_ps(_mm256_setzero_ps(), e0), e2),
                                  _mm256_add_ps(_mm256_add_ps(_mm256_setzero_ps(), e1), e3));
            float mn = mt > m ? mt : m;
            float sa = kern_expf(m - mn), sb = kern_expf(mt - mn);
            l = fmaf(lt, sb, l * sa);
            __m256 va = _mm256_set1_ps(sa), vb = _mm256_set1_ps(sb);
            const int64_t vbase = g * D;
            int64_t d = 0;
            for (; d + 32 <= D; d += 32) {
                __m256 o0 = _mm256_setzero_ps(), o1 = _mm256_setzero_ps();
                __m256 o2 = _mm256_setzero_ps(), o3 = _mm256_setzero_ps();
                for (int64_t j = j0; j <= j1; j++) {
                    __m256 ev = _mm256_set1_ps(e[j - t0]);
                    int64_t off = j * a->v_stride + vbase + d;
                    o0 = _mm256_fmadd_ps(ev, load8(a->v, type, off), o0);
                    o1 = _mm256_fmadd_ps(ev, load8(a->v, type, off + 8), o1);
                    o2 = _mm256_fmadd_ps(ev, load8(a->v, type, off + 16), o2);
                    o3 = _mm256_fmadd_ps(ev, load8(a->v, type, off + 24), o3);
                }
                _mm256_store_ps(o + d, _mm256_fmadd_ps(o0, vb, _mm256_mul_ps(_mm256_load_ps(o + d), va)));
                _mm256_store_ps(o + d + 8, _mm256_fmadd_ps(o1, vb, _mm256_mul_ps(_mm256_load_ps(o + d + 8), va)));
                _mm256_store_ps(o + d + 16, _mm256_fmadd_ps(o2, vb, _mm256_mul_ps(_mm256_load_ps(o + d + 16), va)));
                _mm256_store_ps(o + d + 24, _mm256_fmadd_ps(o3, vb, _mm256_mul_ps(_mm256_load_ps(o + d + 24), va)));
            }
            for (; d + 8 <= D; d += 8) {
                __m256 o0 = _mm256_setzero_ps();
                for (int64_t j = j0; j <= j1; j++)
                    o0 = _mm256_fmadd_ps(_mm256_set1_ps(e[j - t0]),
                                         load8(a->v, type, j * a->v_stride + vbase + d), o0);
                _mm256_store_ps(o + d, _mm256_fmadd_ps(o0, vb, _mm256_mul_ps(_mm256_load_ps(o + d), va)));
            }
            for (; d < D; d++) {
                float ot = 0.0f;
                for (int64_t j = j0; j <= j1; j++)
                    ot = fmaf(e[j - t0], load1(a->v, type, j * a->v_stride + vbase + d), ot);
                o[d] = fmaf(ot, sb, o[d] * sa);
            }
            m = mn;
        }
        float *out = a->out + t * a->out_stride + h * D;
        __m256 vl = _mm256_set1_ps(l);
        int64_t d = 0;
        for (; d + 8 <= D; d += 8)
            _mm256_storeu_ps(out + d, _mm256_div_ps(_mm256_load_ps(o + d), vl));
        for (; d < D; d++)
            out[d] = o[d] / l;
    }
}
#endif
