/* kmath_avx2.h: kern_expf and the functions built on it, 8 lanes at a time, step for step
 * the reference in kmath.c (same constants, same operations, same rounding). Include only
 * from files compiled with the AVX2 flags (*_avx2.c). */
#ifndef KN_KERNELS_KMATH_AVX2_H
#define KN_KERNELS_KMATH_AVX2_H

#include <immintrin.h>

#include "ops_internal.h"

static inline __m256 kn_exp8(__m256 x)
{
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    __m256 xc = _mm256_max_ps(x, _mm256_set1_ps(KN_EXP_LO));
    xc = _mm256_min_ps(xc, _mm256_set1_ps(KN_EXP_HI));
    __m256 magic = _mm256_set1_ps(KN_EXP_MAGIC);
    __m256 t = _mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(KN_EXP_LOG2E)), magic);
    __m256 kf = _mm256_sub_ps(t, magic);
    __m256 r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(KN_EXP_LN2_HI), xc);
    r = _mm256_fnmadd_ps(kf, _mm256_set1_ps(KN_EXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(KN_EXP_C7);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KN_EXP_C6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KN_EXP_C5));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KN_EXP_C4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KN_EXP_C3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(KN_EXP_C2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i k = _mm256_cvttps_epi32(kf);
    __m256i k1 = _mm256_srai_epi32(k, 1);
    __m256i k2 = _mm256_sub_epi32(k, k1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_blendv_ps(y, x, nan);
}

static inline __m256 kn_neg8(__m256 x)
{
    return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f));
}

/* x / (1 + exp(-x)) */
static inline __m256 kn_silu8(__m256 x)
{
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), kn_exp8(kn_neg8(x))));
}

/* kern_swiglu_oaif: min_ps(a, b) is a < b ? a : b and max_ps(a, b) a > b ? a : b, the
 * reference's selections (a NaN g or u passes through as there). */
static inline __m256 kn_swiglu_oai8(__m256 g, __m256 u)
{
    __m256 lim = _mm256_set1_ps(KERN_OAI_LIMIT);
    __m256 x = _mm256_min_ps(lim, g);
    __m256 y = _mm256_max_ps(_mm256_set1_ps(-KERN_OAI_LIMIT), _mm256_min_ps(lim, u));
    __m256 sig = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f),
                                                kn_exp8(kn_neg8(_mm256_mul_ps(_mm256_set1_ps(KERN_OAI_ALPHA), x)))));
    return _mm256_mul_ps(sig, _mm256_add_ps(y, _mm256_set1_ps(1.0f)));
}

/* x / (1 + exp(-(x * fmaf(x * x, C1, C0)))) */
static inline __m256 kn_gelu8(__m256 x)
{
    __m256 z2 = _mm256_mul_ps(x, _mm256_fmadd_ps(_mm256_mul_ps(x, x), _mm256_set1_ps(KN_GELU_C1),
                                                 _mm256_set1_ps(KN_GELU_C0)));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), kn_exp8(kn_neg8(z2))));
}

/* kern_sincos_f64 on 4 doubles, step for step (kmath.c). */
static inline void kn_sincos4(__m256d x, __m256d *s, __m256d *c)
{
    static const double sc[8] = KN_SIN_COEFFS, cc[8] = KN_COS_COEFFS;
    __m256d magic = _mm256_set1_pd(KN_MAGIC_D);
    __m256d t = _mm256_add_pd(_mm256_mul_pd(x, _mm256_set1_pd(KN_TWO_OVER_PI)), magic);
    __m256d kd = _mm256_sub_pd(t, magic);
    __m256d r = _mm256_fnmadd_pd(kd, _mm256_set1_pd(KN_PIO2_HI), x);
    r = _mm256_fnmadd_pd(kd, _mm256_set1_pd(KN_PIO2_MID), r);
    __m256d r2 = _mm256_mul_pd(r, r);
    __m256d ps = _mm256_set1_pd(sc[0]), pc = _mm256_set1_pd(cc[0]);
    for (int i = 1; i < 8; i++) {
        ps = _mm256_fmadd_pd(ps, r2, _mm256_set1_pd(sc[i]));
        pc = _mm256_fmadd_pd(pc, r2, _mm256_set1_pd(cc[i]));
    }
    __m256d sv = _mm256_fmadd_pd(_mm256_mul_pd(r, r2), ps, r);
    __m256d cv = _mm256_fmadd_pd(r2, pc, _mm256_set1_pd(1.0));
    /* the quadrant k & 3 is in t's low mantissa bits (t = 1.5 * 2^52 + k exactly) */
    __m256i q = _mm256_and_si256(_mm256_castpd_si256(t), _mm256_set1_epi64x(3));
    __m256i one = _mm256_set1_epi64x(1), two = _mm256_set1_epi64x(2);
    __m256d swap = _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(q, one), one));
    __m256d neg_s = _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(q, two), two));
    __m256d neg_c = _mm256_castsi256_pd(
        _mm256_cmpeq_epi64(_mm256_and_si256(_mm256_add_epi64(q, one), two), two));
    __m256d sign = _mm256_set1_pd(-0.0);
    /* quadrant 0: (sv, cv), 1: (cv, -sv), 2: (-sv, -cv), 3: (-cv, sv) */
    __m256d s0 = _mm256_blendv_pd(sv, cv, swap), c0 = _mm256_blendv_pd(cv, sv, swap);
    s0 = _mm256_xor_pd(s0, _mm256_and_pd(neg_s, sign));
    c0 = _mm256_xor_pd(c0, _mm256_and_pd(neg_c, sign));
    /* |x| >= 2^30 (or NaN) gives the reference's NaN */
    __m256d ok = _mm256_cmp_pd(_mm256_andnot_pd(sign, x), _mm256_set1_pd(0x1p30), _CMP_LT_OQ);
    __m256d nan = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7ff8000000000000ll));
    *s = _mm256_blendv_pd(nan, s0, ok);
    *c = _mm256_blendv_pd(nan, c0, ok);
}

/* The canonical tree over 16 lanes held as lo (0-7) and hi (8-15). */
static inline float kn_tree8x2(__m256 lo, __m256 hi)
{
    __m256 v = _mm256_add_ps(lo, hi);                                          /* w = 8 */
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* w = 4 */
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));                                    /* w = 2 */
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));                                /* w = 1 */
    return _mm_cvtss_f32(x);
}

/* The canonical tree's steps w = 4, 2, 1 for four dots at once, from their 8-lane sums
 * after step w = 8: every add pairs the same lanes as kn_tree8x2, four sums per op. */
static inline void kn_tree8_x4(__m256 ya, __m256 yb, __m256 yc, __m256 yd, float out[4])
{
    /* w = 4: [a0-3 | b0-3] + [a4-7 | b4-7] */
    __m256 ab = _mm256_add_ps(_mm256_permute2f128_ps(ya, yb, 0x20), _mm256_permute2f128_ps(ya, yb, 0x31));
    __m256 cd = _mm256_add_ps(_mm256_permute2f128_ps(yc, yd, 0x20), _mm256_permute2f128_ps(yc, yd, 0x31));
    /* w = 2: [a0 a1 c0 c1 | b0 b1 d0 d1] + [a2 a3 c2 c3 | b2 b3 d2 d3] */
    __m256 w2 = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, 0x44), _mm256_shuffle_ps(ab, cd, 0xee));
    /* w = 1: lane 0 + lane 1, giving [a c a c | b d b d] */
    __m256 w1 = _mm256_add_ps(_mm256_shuffle_ps(w2, w2, 0x88), _mm256_shuffle_ps(w2, w2, 0xdd));
    __m128 lo = _mm256_castps256_ps128(w1), hi = _mm256_extractf128_ps(w1, 1);
    out[0] = _mm_cvtss_f32(lo);
    out[1] = _mm_cvtss_f32(hi);
    out[2] = _mm_cvtss_f32(_mm_shuffle_ps(lo, lo, 1));
    out[3] = _mm_cvtss_f32(_mm_shuffle_ps(hi, hi, 1));
}

/* The largest of 8 lanes (any order: max is exact; zero signs are fixed by the caller). */
static inline float kn_hmax8(__m256 v)
{
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

#endif
