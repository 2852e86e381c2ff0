/* actq_avx2.c: per-token activation quantization with AVX2, bit for bit the rule of
 * actq.c (see actq_avx512.c for why each step matches). */
#include "kern_internal.h"
#include "simd_avx2.h"

static inline __m256 abs8(__m256 v)
{
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

static inline __m256i quant8(__m256 x, __m256 vid)
{
    __m256 v = _mm256_mul_ps(x, vid);
    __m256 ok = _mm256_cmp_ps(v, v, _CMP_ORD_Q);
    v = _mm256_min_ps(v, _mm256_set1_ps(127.0f));
    v = _mm256_max_ps(v, _mm256_set1_ps(-127.0f));
    return _mm256_and_si256(_mm256_cvtps_epi32(v), _mm256_castps_si256(ok));
}

static inline int32_t hsum8(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static inline float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* n = 32 or 256 values; sums16[j] = sum of q[16j .. 16j+15] (at most 16 x 127, an int16),
 * written straight to the block (see actq_avx512.c). */
static inline float quant_block(const float *x, int n, int8_t *q, int16_t *sums16)
{
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8)
        amax = _mm256_max_ps(abs8(_mm256_loadu_ps(x + i)), amax);
    float am = hmax8(amax);
    float d = am / 127.0f;
    float id = am > 0.0f ? 127.0f / am : 0.0f;
    __m256 vid = _mm256_set1_ps(id);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int i = 0; i < n; i += 32) {
        __m256i q0 = quant8(_mm256_loadu_ps(x + i), vid);
        __m256i q1 = quant8(_mm256_loadu_ps(x + i + 8), vid);
        __m256i q2 = quant8(_mm256_loadu_ps(x + i + 16), vid);
        __m256i q3 = quant8(_mm256_loadu_ps(x + i + 24), vid);
        sums16[i / 16] = (int16_t)hsum8(_mm256_add_epi32(q0, q1));
        sums16[i / 16 + 1] = (int16_t)hsum8(_mm256_add_epi32(q2, q3));
        /* Values are in [-127, 127]: the saturating packs only narrow them. */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
        _mm256_storeu_si256((void *)(q + i), _mm256_permutevar8x32_epi32(p, perm));
    }
    return d;
}

void kern_quantize_row_q8f_avx2(const float *x, int64_t K, struct kern_block_q8f *dst)
{
    for (int64_t b = 0; b < K / 32; b++) {
        int16_t s[2];
        dst[b].d = quant_block(x + 32 * b, 32, dst[b].qs, s);
        dst[b].s = s[0] + s[1];
    }
}

void kern_quantize_row_q8k_avx2(const float *x, int64_t K, struct block_q8_K *dst)
{
    for (int64_t b = 0; b < K / QK_K; b++) {
        dst[b].d = quant_block(x + QK_K * b, QK_K, dst[b].qs, dst[b].bsums);
    }
}
