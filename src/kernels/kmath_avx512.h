/* kmath_avx512.h: kern_expf and the functions built on it, 16 lanes at a time, step for
 * step the reference in kmath.c. Include only from *_avx512.c files. */
#ifndef KN_KERNELS_KMATH_AVX512_H
#define KN_KERNELS_KMATH_AVX512_H

#include <immintrin.h>

#include "kmath_avx2.h" /* the AVX-512 flags include AVX2 */
#include "ops_internal.h"

static inline __m512 kn_exp16(__m512 x)
{
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    __m512 xc = _mm512_max_ps(x, _mm512_set1_ps(KN_EXP_LO));
    xc = _mm512_min_ps(xc, _mm512_set1_ps(KN_EXP_HI));
    __m512 magic = _mm512_set1_ps(KN_EXP_MAGIC);
    __m512 t = _mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(KN_EXP_LOG2E)), magic);
    __m512 kf = _mm512_sub_ps(t, magic);
    __m512 r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(KN_EXP_LN2_HI), xc);
    r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(KN_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(KN_EXP_C7);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KN_EXP_C6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KN_EXP_C5));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KN_EXP_C4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KN_EXP_C3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(KN_EXP_C2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i k = _mm512_cvttps_epi32(kf);
    __m512i k1 = _mm512_srai_epi32(k, 1);
    __m512i k2 = _mm512_sub_epi32(k, k1);
    __m512i bias = _mm512_set1_epi32(127);
    __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k1, bias), 23));
    __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k2, bias), 23));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
    return _mm512_mask_blend_ps(nan, y, x);
}

static inline __m512 kn_neg16(__m512 x)
{
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN)));
}

static inline __m512 kn_silu16(__m512 x)
{
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), kn_exp16(kn_neg16(x))));
}

/* kern_swiglu_oaif, as kn_swiglu_oai8 (kmath_avx2.h). */
static inline __m512 kn_swiglu_oai16(__m512 g, __m512 u)
{
    __m512 lim = _mm512_set1_ps(KERN_OAI_LIMIT);
    __m512 x = _mm512_min_ps(lim, g);
    __m512 y = _mm512_max_ps(_mm512_set1_ps(-KERN_OAI_LIMIT), _mm512_min_ps(lim, u));
    __m512 sig = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f),
                                                kn_exp16(kn_neg16(_mm512_mul_ps(_mm512_set1_ps(KERN_OAI_ALPHA), x)))));
    return _mm512_mul_ps(sig, _mm512_add_ps(y, _mm512_set1_ps(1.0f)));
}

static inline __m512 kn_gelu16(__m512 x)
{
    __m512 z2 = _mm512_mul_ps(x, _mm512_fmadd_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(KN_GELU_C1),
                                                 _mm512_set1_ps(KN_GELU_C0)));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), kn_exp16(kn_neg16(z2))));
}

/* The canonical tree over the 16 lanes of v. */
static inline float kn_tree16v(__m512 v)
{
    __m256 y = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); /* w = 8 */
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));  /* w = 4 */
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));                                         /* w = 2 */
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));                                     /* w = 1 */
    return _mm_cvtss_f32(x);
}

/* The canonical tree of four accumulators at once: step w = 8 here, then kn_tree8_x4. */
static inline void kn_tree16v_x4(__m512 a, __m512 b, __m512 c, __m512 d, float out[4])
{
    kn_tree8_x4(_mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)),
                _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1)),
                _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1)),
                _mm256_add_ps(_mm512_castps512_ps256(d), _mm512_extractf32x8_ps(d, 1)), out);
}

/* kern_sincos_f64 on 8 doubles, step for step (kmath.c; see kn_sincos4). */
static inline void kn_sincos8(__m512d x, __m512d *s, __m512d *c)
{
    static const double sc[8] = KN_SIN_COEFFS, cc[8] = KN_COS_COEFFS;
    __m512d magic = _mm512_set1_pd(KN_MAGIC_D);
    __m512d t = _mm512_add_pd(_mm512_mul_pd(x, _mm512_set1_pd(KN_TWO_OVER_PI)), magic);
    __m512d kd = _mm512_sub_pd(t, magic);
    __m512d r = _mm512_fnmadd_pd(kd, _mm512_set1_pd(KN_PIO2_HI), x);
    r = _mm512_fnmadd_pd(kd, _mm512_set1_pd(KN_PIO2_MID), r);
    __m512d r2 = _mm512_mul_pd(r, r);
    __m512d ps = _mm512_set1_pd(sc[0]), pc = _mm512_set1_pd(cc[0]);
    for (int i = 1; i < 8; i++) {
        ps = _mm512_fmadd_pd(ps, r2, _mm512_set1_pd(sc[i]));
        pc = _mm512_fmadd_pd(pc, r2, _mm512_set1_pd(cc[i]));
    }
    __m512d sv = _mm512_fmadd_pd(_mm512_mul_pd(r, r2), ps, r);
    __m512d cv = _mm512_fmadd_pd(r2, pc, _mm512_set1_pd(1.0));
    __m512i q = _mm512_castpd_si512(t);
    __mmask8 swap = _mm512_test_epi64_mask(q, _mm512_set1_epi64(1));
    __mmask8 neg_s = _mm512_test_epi64_mask(q, _mm512_set1_epi64(2));
    __mmask8 neg_c = _mm512_test_epi64_mask(_mm512_add_epi64(q, _mm512_set1_epi64(1)),
                                           _mm512_set1_epi64(2));
    __m512i sign = _mm512_set1_epi64(INT64_MIN);
    __m512d s0 = _mm512_mask_blend_pd(swap, sv, cv), c0 = _mm512_mask_blend_pd(swap, cv, sv);
    s0 = _mm512_castsi512_pd(_mm512_mask_xor_epi64(_mm512_castpd_si512(s0), neg_s,
                                                   _mm512_castpd_si512(s0), sign));
    c0 = _mm512_castsi512_pd(_mm512_mask_xor_epi64(_mm512_castpd_si512(c0), neg_c,
                                                   _mm512_castpd_si512(c0), sign));
    __m512d ax = _mm512_castsi512_pd(_mm512_andnot_si512(sign, _mm512_castpd_si512(x)));
    __mmask8 ok = _mm512_cmp_pd_mask(ax, _mm512_set1_pd(0x1p30), _CMP_LT_OQ);
    __m512d nan = _mm512_castsi512_pd(_mm512_set1_epi64(0x7ff8000000000000ll));
    *s = _mm512_mask_blend_pd(ok, nan, s0);
    *c = _mm512_mask_blend_pd(ok, nan, c0);
}

/* Lanes 0..n-1 (n <= 16). */
static inline __mmask16 kn_mask16(int64_t n)
{
    return (__mmask16)((1u << n) - 1u);
}

#endif
