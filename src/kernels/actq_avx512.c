/* actq_avx512.c: per-token activation quantization with AVX-512, bit for bit the rule of
 * actq.c (docs/numerics.md): max_ps(|x|, amax) keeps amax when |x| is NaN exactly like
 * the reference's comparison; cvtps2dq rounds half to even like the reference's
 * 1.5 * 2^23 trick on the clamped value; NaN lanes are zeroed by mask. */
#include "kern_internal.h"
#include "simd_avx512.h"

static inline __m512 abs16(__m512 v)
{
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
}

/* q (int32) for 16 values, given id. */
static inline __m512i quant16(__m512 x, __m512 vid)
{
    __m512 v = _mm512_mul_ps(x, vid);
    __mmask16 ok = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
    v = _mm512_min_ps(v, _mm512_set1_ps(127.0f));
    v = _mm512_max_ps(v, _mm512_set1_ps(-127.0f));
    return _mm512_maskz_cvtps_epi32(ok, v);
}

/* n = 32 or 256 values; sums16[j] = sum of q[16j .. 16j+15] (at most 16 x 127, an int16).
 * Returns the scale. The sums go straight to their int16 home: a copy through an int32
 * array made the compiler read eight just-stored ints back as one vector, which stalls
 * store forwarding (76% of this function's time in a decode profile). */
static inline float quant_block(const float *x, int n, int8_t *q, int16_t *sums16)
{
    __m512 amax = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16)
        amax = _mm512_max_ps(abs16(_mm512_loadu_ps(x + i)), amax);
    float am = _mm512_reduce_max_ps(amax);
    float d = am / 127.0f;
    float id = am > 0.0f ? 127.0f / am : 0.0f;
    __m512 vid = _mm512_set1_ps(id);
    for (int i = 0; i < n; i += 16) {
        __m512i qi = quant16(_mm512_loadu_ps(x + i), vid);
        _mm_storeu_si128((void *)(q + i), _mm512_cvtepi32_epi8(qi));
        sums16[i / 16] = (int16_t)_mm512_reduce_add_epi32(qi);
    }
    return d;
}

void kern_quantize_row_q8f_avx512(const float *x, int64_t K, struct kern_block_q8f *dst)
{
    for (int64_t b = 0; b < K / 32; b++) {
        int16_t s[2];
        dst[b].d = quant_block(x + 32 * b, 32, dst[b].qs, s);
        dst[b].s = s[0] + s[1];
    }
}

void kern_quantize_row_q8k_avx512(const float *x, int64_t K, struct block_q8_K *dst)
{
    for (int64_t b = 0; b < K / QK_K; b++) {
        dst[b].d = quant_block(x + QK_K * b, QK_K, dst[b].qs, dst[b].bsums);
    }
}
