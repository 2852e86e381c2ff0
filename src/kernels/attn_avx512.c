/* attn_avx512.c: attention over the KV cache with AVX-512, bit for bit the reference in
 * attn.c. Organised as attn_avx2.c (blocks of heads sharing a kv head, four dots at a
 * time, value sums with heads and dim chunks in registers). The canonical dot's 16
 * accumulators are one zmm register; a short tail uses a masked fma, so lanes past the
 * end keep their value exactly as in the reference. */
#if defined(__x86_64__)
#include "kmath_avx512.h"

/* Q8_0 elements off.. (off % 32 is 0 or 16, so the 16 share a block): (float)q * d, one
 * rounding as in the reference (the f16 scale converts exactly); lanes outside k are 0. */
static inline __m512 load16_q8(__mmask16 k, const void *base, int64_t off)
{
    const struct block_q8_0 *b = (const struct block_q8_0 *)base + (off >> 5);
    __m128i q = _mm_maskz_loadu_epi8(k, b->qs + (off & 31));
    return _mm512_maskz_mul_ps(k, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)),
                               _mm512_set1_ps(_cvtsh_ss(b->d)));
}

static inline __m512 load16(const void *base, uint32_t type, int64_t off)
{
    if (type == QT_F32)
        return _mm512_loadu_ps((const float *)base + off);
    if (type == QT_Q8_0)
        return load16_q8((__mmask16)0xffff, base, off);
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const kn_f16 *)base + off)));
}

static inline __m512 load16z(__mmask16 k, const void *base, uint32_t type, int64_t off)
{
    if (type == QT_F32)
        return _mm512_maskz_loadu_ps(k, (const float *)base + off);
    if (type == QT_Q8_0)
        return load16_q8(k, base, off);
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, (const kn_f16 *)base + off));
}

/* Four canonical dots at once (independent chains hide the fma latency): q[c] with the
 * cache row at element offset off[c]. Each chain is exactly the reference's. */
static inline __attribute__((always_inline)) void dot4(const float *const q[4], const void *k,
                                                       uint32_t type, const int64_t off[4],
                                                       int64_t D, float out[4])
{
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    const float *q0 = q[0], *q1 = q[1], *q2 = q[2], *q3 = q[3];
    int64_t d = 0;
    for (; d + 16 <= D; d += 16) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + d), load16(k, type, off[0] + d), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q1 + d), load16(k, type, off[1] + d), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q2 + d), load16(k, type, off[2] + d), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q3 + d), load16(k, type, off[3] + d), a3);
    }
    if (d < D) {
        __mmask16 m = kn_mask16(D - d);
        a0 = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, q0 + d), load16z(m, k, type, off[0] + d), a0, m);
        a1 = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, q1 + d), load16z(m, k, type, off[1] + d), a1, m);
        a2 = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, q2 + d), load16z(m, k, type, off[2] + d), a2, m);
        a3 = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, q3 + d), load16z(m, k, type, off[3] + d), a3, m);
    }
    kn_tree16v_x4(a0, a1, a2, a3, out);
}

#define GMAX KERN_ATTN_GMAX
_Static_assert(GMAX <= 8, "the merge factors of a block of heads fill one 16-lane exp");

/* The value sums of one tile for NH heads, NC chunks of 16 dims per pass (a V row chunk is
 * loaded once for all heads), merged into o: o[i][d] = fmaf(ot, b[i], o[i][d] * a[i]). */
static inline __attribute__((always_inline)) void vsum(
    int NH, int NC, const void *v, uint32_t type, int64_t v_stride, int64_t vbase, int64_t D,
    int64_t j0, int64_t j1, int64_t t0, float e[GMAX][KERN_ATTN_TILE],
    float o[GMAX][KERN_ATTN_MAX_HEAD_DIM], const float *sa, const float *sb)
{
    int64_t d = 0;
    for (; d + 16 * NC <= D; d += 16 * NC) {
        __m512 acc[GMAX][8];
#pragma GCC unroll 8
        for (int i = 0; i < NH; i++)
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++)
                acc[i][c] = _mm512_setzero_ps();
        for (int64_t j = j0; j <= j1; j++) {
            int64_t off = j * v_stride + vbase + d;
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) {
                __m512 vv = load16(v, type, off + 16 * c);
#pragma GCC unroll 8
                for (int i = 0; i < NH; i++)
                    acc[i][c] = _mm512_fmadd_ps(_mm512_set1_ps(e[i][j - t0]), vv, acc[i][c]);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < NH; i++)
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) {
                float *op = o[i] + d + 16 * c;
                _mm512_store_ps(op, _mm512_fmadd_ps(acc[i][c], _mm512_set1_ps(sb[i]),
                                                    _mm512_mul_ps(_mm512_load_ps(op), _mm512_set1_ps(sa[i]))));
            }
    }
    for (; d < D; d += 16) {
        __mmask16 k = kn_mask16(D - d < 16 ? D - d : 16);
        __m512 acc[GMAX];
#pragma GCC unroll 8
        for (int i = 0; i < NH; i++)
            acc[i] = _mm512_setzero_ps();
        for (int64_t j = j0; j <= j1; j++) {
            __m512 vv = load16z(k, v, type, j * v_stride + vbase + d);
#pragma GCC unroll 8
            for (int i = 0; i < NH; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(e[i][j - t0]), vv, acc[i]);
        }
#pragma GCC unroll 8
        for (int i = 0; i < NH; i++) {
            __m512 prev = _mm512_maskz_load_ps(k, o[i] + d);
            _mm512_mask_store_ps(o[i] + d, k, _mm512_fmadd_ps(acc[i], _mm512_set1_ps(sb[i]),
                                                              _mm512_mul_ps(prev, _mm512_set1_ps(sa[i]))));
        }
    }
}

/* A tile's softmax step for nh heads: from the scores s (-inf outside the visible keys)
 * the exps e, and the merge of the tile's (m_t, l_t) into st: the factors sa (old state)
 * and sb (the tile) that vsum applies to o. */
static inline __attribute__((always_inline)) void attn_softmax(int64_t nh, float s[GMAX][KERN_ATTN_TILE],
                                                               float e[GMAX][KERN_ATTN_TILE],
                                                               struct kern_attn_qstate *st, float *sa,
                                                               float *sb)
{
    float lt[GMAX], mt_[GMAX];
    float ex[16] __attribute__((aligned(64))); /* m - m' of each head, then m_t - m' */
    for (int64_t i = 0; i < nh; i++) {
        /* the tile max over all 32 slots (hidden ones hold -inf; max_ps(x, m) skips a NaN
         * x as the reference does). Only a zero's sign could differ from the reference's
         * sequential max, and mt reaches nothing but exp's argument, where -0 and +0 give
         * the same result. */
        __m512 vx = _mm512_max_ps(_mm512_load_ps(s[i] + 16), _mm512_set1_ps(-INFINITY));
        float mt = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_load_ps(s[i]), vx));
        __m512 vmt = _mm512_set1_ps(mt);
        __m512 e0 = kn_exp16(_mm512_sub_ps(_mm512_load_ps(s[i]), vmt));
        __m512 e1 = kn_exp16(_mm512_sub_ps(_mm512_load_ps(s[i] + 16), vmt));
        _mm512_store_ps(e[i], e0);
        _mm512_store_ps(e[i] + 16, e1);
        /* slot i and i + 16 share accumulator i: (+0 + e[i]) + e[i + 16] */
        lt[i] = kn_tree16v(_mm512_add_ps(_mm512_add_ps(_mm512_setzero_ps(), e0), e1));
        mt_[i] = mt;
    }
    /* the merge factors of every head in one kn_exp16 (kern_expf lane by lane) */
    for (int64_t i = 0; i < 8; i++)
        ex[i] = ex[8 + i] = 0.0f;
    for (int64_t i = 0; i < nh; i++) {
        float mn = mt_[i] > st->m[i] ? mt_[i] : st->m[i];
        ex[i] = st->m[i] - mn;
        ex[8 + i] = mt_[i] - mn;
        st->m[i] = mn;
    }
    _mm512_store_ps(ex, kn_exp16(_mm512_load_ps(ex)));
    for (int64_t i = 0; i < nh; i++) {
        sa[i] = ex[i];
        sb[i] = ex[8 + i];
        st->l[i] = fmaf(lt[i], sb[i], st->l[i] * sa[i]);
    }
}

static inline void attn_out(float *out, const float *o, float l, int64_t D)
{
    __m512 vl = _mm512_set1_ps(l);
    for (int64_t d = 0; d < D; d += 16) {
        __mmask16 m = kn_mask16(D - d < 16 ? D - d : 16);
        _mm512_mask_storeu_ps(out + d, m, _mm512_div_ps(_mm512_maskz_load_ps(m, o + d), vl));
    }
}

#include "attn_tmpl.h"

/* The cache type is a constant inside each copy, so no load tests it. */
void kern_attn_avx512(const struct kern_attn_args *a, int64_t begin, int64_t end)
{
    if (a->kv_type == QT_F32)
        attn_body(a, begin, end, QT_F32);
    else if (a->kv_type == QT_Q8_0)
        attn_body(a, begin, end, QT_Q8_0);
    else
        attn_body(a, begin, end, QT_F16);
}
#endif
