/* simd_avx512.h: AVX-512 helpers shared by the *_avx512.c files. */
#ifndef KN_SIMD_AVX512_H
#define KN_SIMD_AVX512_H

#include "simd_avx2.h"

/* The canonical tree over the 16 lanes of acc: w = 8, 4, 2, 1. */
static inline float k512_tree16(__m512 acc)
{
    return kavx2_tree16(_mm512_castps512_ps256(acc),
                        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}

#endif
