/* simd_avx2.h: AVX2 helpers shared by the *_avx2.c files (and reused by the AVX-512 files,
 * which are compiled with AVX2 too). Include only from files compiled with -mavx2 -mfma. */
#ifndef KN_SIMD_AVX2_H
#define KN_SIMD_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* The canonical tree over 16 lanes held as lo (0-7) and hi (8-15): w = 8, 4, 2, 1. */
static inline float kavx2_tree16(__m256 lo, __m256 hi)
{
    __m256 s8 = _mm256_add_ps(lo, hi);                                  /* acc[i] += acc[i+8] */
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1)); /* +4 */
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                 /* acc[i] += acc[i+2] */
    __m128 s1 = _mm_add_ss(s2, _mm_movehdup_ps(s2));                   /* acc[0] += acc[1] */
    return _mm_cvtss_f32(s1);
}

/* A mask of the first r (0..8) lanes. */
static inline __m256i kavx2_lanes(int r)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), idx);
}

/* Loads the first r (0..8) floats of p, zeros elsewhere (never touching p[r..]). */
static inline __m256 kavx2_loadn(const float *p, int r)
{
    return _mm256_maskload_ps(p, kavx2_lanes(r));
}

/* acc lane i = fmaf(a[i], b[i], acc) for i < r only (r in 1..15): lanes past the end keep
 * their value exactly (an fma with zeros could turn -0 into +0). */
static inline void kavx2_fma_tail(__m256 va_lo, __m256 vb_lo, __m256 va_hi, __m256 vb_hi, int r,
                                  __m256 *lo, __m256 *hi)
{
    __m256 nlo = _mm256_fmadd_ps(va_lo, vb_lo, *lo);
    __m256 nhi = _mm256_fmadd_ps(va_hi, vb_hi, *hi);
    *lo = _mm256_blendv_ps(*lo, nlo, _mm256_castsi256_ps(kavx2_lanes(r)));
    *hi = _mm256_blendv_ps(*hi, nhi, _mm256_castsi256_ps(kavx2_lanes(r - 8)));
}

static inline void kavx2_tail16(const float *a, const float *b, int r, __m256 *lo, __m256 *hi)
{
    int rl = r < 8 ? r : 8, rh = r - rl;
    kavx2_fma_tail(kavx2_loadn(a, rl), kavx2_loadn(b, rl), kavx2_loadn(a + 8, rh),
                   kavx2_loadn(b + 8, rh), r, lo, hi);
}

#endif
