/* attn_avx2.c: attention over the KV cache with AVX2 + FMA + F16C, bit for bit the
 * reference in attn.c (which states the order of operations).
 *
 * Work is done in the blocks of attn_tmpl.h (up to GMAX query heads that share a kv head,
 * for up to QMAX queries), so each K and V row is loaded once per block. Scores: (key, head) pairs four at a time, each
 * the canonical 16-lane dot in two ymm accumulators, trees packed four per op. A tile's
 * exps are computed 8 slots at a time with slots outside the visible range at -inf (exp
 * gives +0, which leaves the canonical sum's lanes as the reference leaves them). Value
 * sums walk the tile's keys in ascending order with several heads and dim chunks in
 * registers. */
#if defined(__x86_64__)
#include "kmath_avx2.h"

/* Q8_0 elements off.. (off % 32 <= 24, so the 8 share a block): (float)q * d, one
 * rounding as in the reference (the f16 scale converts exactly). */
static inline __m256 load8_q8(const void *base, int64_t off)
{
    const struct block_q8_0 *b = (const struct block_q8_0 *)base + (off >> 5);
    __m128i q = _mm_loadl_epi64((const __m128i *)(b->qs + (off & 31)));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(_cvtsh_ss(b->d)));
}

static inline __m256 load8(const void *base, uint32_t type, int64_t off)
{
    if (type == QT_F32)
        return _mm256_loadu_ps((const float *)base + off);
    if (type == QT_Q8_0)
        return load8_q8(base, off);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const kn_f16 *)base + off)));
}

static inline float load1(const void *base, uint32_t type, int64_t off)
{
    if (type == QT_F32)
        return ((const float *)base)[off];
    if (type == QT_Q8_0) {
        const struct block_q8_0 *b = (const struct block_q8_0 *)base + (off >> 5);
        return (float)b->qs[off & 31] * quant_f16_to_f32(b->d);
    }
    return quant_f16_to_f32(((const kn_f16 *)base)[off]);
}

/* Four canonical dots: q[c] with the cache row at element offset off[c]. */
static inline __attribute__((always_inline)) void dot4(const float *const q[4], const void *k,
                                                       uint32_t type, const int64_t off[4],
                                                       int64_t D, float out[4])
{
    __m256 a0 = _mm256_setzero_ps(), b0 = _mm256_setzero_ps();
    __m256 a1 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps();
    __m256 a3 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
    const float *q0 = q[0], *q1 = q[1], *q2 = q[2], *q3 = q[3];
    int64_t d = 0;
    for (; d + 16 <= D; d += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d), load8(k, type, off[0] + d), a0);
        b0 = _mm256_fmadd_ps(_mm256_loadu_ps(q0 + d + 8), load8(k, type, off[0] + d + 8), b0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + d), load8(k, type, off[1] + d), a1);
        b1 = _mm256_fmadd_ps(_mm256_loadu_ps(q1 + d + 8), load8(k, type, off[1] + d + 8), b1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + d), load8(k, type, off[2] + d), a2);
        b2 = _mm256_fmadd_ps(_mm256_loadu_ps(q2 + d + 8), load8(k, type, off[2] + d + 8), b2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q3 + d), load8(k, type, off[3] + d), a3);
        b3 = _mm256_fmadd_ps(_mm256_loadu_ps(q3 + d + 8), load8(k, type, off[3] + d + 8), b3);
    }
    if (d == D) {
        kn_tree8_x4(_mm256_add_ps(a0, b0), _mm256_add_ps(a1, b1), _mm256_add_ps(a2, b2),
                    _mm256_add_ps(a3, b3), out);
        return;
    }
    /* a head dim that is not a multiple of 16: finish each dot as the reference does */
    __m256 lo[4] = {a0, a1, a2, a3}, hi[4] = {b0, b1, b2, b3};
    for (int c = 0; c < 4; c++) {
        float acc[KN_LANES];
        _mm256_storeu_ps(acc, lo[c]);
        _mm256_storeu_ps(acc + 8, hi[c]);
        for (int64_t i = d; i < D; i++)
            acc[i % KN_LANES] = fmaf(q[c][i], load1(k, type, off[c] + i), acc[i % KN_LANES]);
        out[c] = kn_tree16(acc);
    }
}

#define GMAX KERN_ATTN_GMAX

/* The value sums of one tile for NH heads, NC chunks of 8 dims per pass, merged into o:
 * o[i][d] = fmaf(ot, sb[i], o[i][d] * sa[i]). */
static inline __attribute__((always_inline)) void vsum(
    int NH, int NC, const void *v, uint32_t type, int64_t v_stride, int64_t vbase, int64_t D,
    int64_t j0, int64_t j1, int64_t t0, float e[GMAX][KERN_ATTN_TILE],
    float o[GMAX][KERN_ATTN_MAX_HEAD_DIM], const float *sa, const float *sb)
{
    int64_t d = 0;
    for (; d + 8 * NC <= D; d += 8 * NC) {
        __m256 acc[GMAX][8];
#pragma GCC unroll 8
        for (int i = 0; i < NH; i++)
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++)
                acc[i][c] = _mm256_setzero_ps();
        for (int64_t j = j0; j <= j1; j++) {
            int64_t off = j * v_stride + vbase + d;
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) {
                __m256 vv = load8(v, type, off + 8 * c);
#pragma GCC unroll 8
                for (int i = 0; i < NH; i++)
                    acc[i][c] = _mm256_fmadd_ps(_mm256_set1_ps(e[i][j - t0]), vv, acc[i][c]);
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < NH; i++)
#pragma GCC unroll 8
            for (int c = 0; c < NC; c++) {
                float *op = o[i] + d + 8 * c;
                _mm256_store_ps(op, _mm256_fmadd_ps(acc[i][c], _mm256_set1_ps(sb[i]),
                                                    _mm256_mul_ps(_mm256_load_ps(op), _mm256_set1_ps(sa[i]))));
            }
    }
    for (; d + 8 <= D; d += 8) {
        __m256 acc[GMAX];
#pragma GCC unroll 8
        for (int i = 0; i < NH; i++)
            acc[i] = _mm256_setzero_ps();
        for (int64_t j = j0; j <= j1; j++) {
            __m256 vv = load8(v, type, j * v_stride + vbase + d);
#pragma GCC unroll 8
            for (int i = 0; i < NH; i++)
                acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(e[i][j - t0]), vv, acc[i]);
        }
#pragma GCC unroll 8
        for (int i = 0; i < NH; i++)
            _mm256_store_ps(o[i] + d, _mm256_fmadd_ps(acc[i], _mm256_set1_ps(sb[i]),
                                                      _mm256_mul_ps(_mm256_load_ps(o[i] + d), _mm256_set1_ps(sa[i]))));
    }
    for (; d < D; d++) {
        for (int i = 0; i < NH; i++) {
            float ot = 0.0f;
            for (int64_t j = j0; j <= j1; j++)
                ot = fmaf(e[i][j - t0], load1(v, type, j * v_stride + vbase + d), ot);
            o[i][d] = fmaf(ot, sb[i], o[i][d] * sa[i]);
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
    for (int64_t i = 0; i < nh; i++) {
        /* the tile max over all 32 slots (hidden ones hold -inf; max_ps(x, m) skips a NaN
         * x as the reference does). Only a zero's sign could differ from the reference's
         * sequential max, and mt reaches nothing but exp's argument, where -0 and +0 give
         * the same result. */
        __m256 vx = _mm256_max_ps(_mm256_load_ps(s[i] + 24), _mm256_set1_ps(-INFINITY));
        vx = _mm256_max_ps(_mm256_load_ps(s[i] + 16), vx);
        vx = _mm256_max_ps(_mm256_load_ps(s[i] + 8), vx);
        float mt = kn_hmax8(_mm256_max_ps(_mm256_load_ps(s[i]), vx));
        __m256 vmt = _mm256_set1_ps(mt);
        __m256 e0 = kn_exp8(_mm256_sub_ps(_mm256_load_ps(s[i]), vmt));
        __m256 e1 = kn_exp8(_mm256_sub_ps(_mm256_load_ps(s[i] + 8), vmt));
        __m256 e2 = kn_exp8(_mm256_sub_ps(_mm256_load_ps(s[i] + 16), vmt));
        __m256 e3 = kn_exp8(_mm256_sub_ps(_mm256_load_ps(s[i] + 24), vmt));
        _mm256_store_ps(e[i], e0);
        _mm256_store_ps(e[i] + 8, e1);
        _mm256_store_ps(e[i] + 16, e2);
        _mm256_store_ps(e[i] + 24, e3);
        /* slot i and i + 16 share accumulator i: (+0 + e[i]) + e[i + 16] */
        float lt = kn_tree8x2(_mm256_add_ps(_mm256_add_ps(_mm256_setzero_ps(), e0), e2),
                              _mm256_add_ps(_mm256_add_ps(_mm256_setzero_ps(), e1), e3));
        float mn = mt > st->m[i] ? mt : st->m[i];
        sa[i] = kern_expf(st->m[i] - mn);
        sb[i] = kern_expf(mt - mn);
        st->l[i] = fmaf(lt, sb[i], st->l[i] * sa[i]);
        st->m[i] = mn;
    }
}

static inline void attn_out(float *out, const float *o, float l, int64_t D)
{
    __m256 vl = _mm256_set1_ps(l);
    int64_t d = 0;
    for (; d + 8 <= D; d += 8)
        _mm256_storeu_ps(out + d, _mm256_div_ps(_mm256_load_ps(o + d), vl));
    for (; d < D; d++)
        out[d] = o[d] / l;
}

#include "attn_tmpl.h"

/* The cache type is a constant inside each copy, so no load tests it. */
void kern_attn_avx2(const struct kern_attn_args *a, int64_t begin, int64_t end)
{
    if (a->kv_type == QT_F32)
        attn_body(a, begin, end, QT_F32);
    else if (a->kv_type == QT_Q8_0)
        attn_body(a, begin, end, QT_Q8_0);
    else
        attn_body(a, begin, end, QT_F16);
}
#endif
