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

/* x / (1 + exp(-(x * fmaf(x * x, C1, C0)))) */
static inline __m256 kn_gelu8(__m256 x)
{
    __m256 z2 = _mm256_mul_ps(x, _mm256_fmadd_ps(_mm256_mul_ps(x, x), _mm256_set1_ps(KN_GELU_C1),
                                                 _mm256_set1_ps(KN_GELU_C0)));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), kn_exp8(kn_neg8(z2))));
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

/* The largest of 8 lanes (any order: max is exact; zero signs are fixed by the caller). */
static inline float kn_hmax8(__m256 v)
{
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

#endif
