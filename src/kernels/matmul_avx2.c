/* matmul_avx2.c: the AVX2 (+FMA, F16C) kernels for y = x . w^T, bit for bit the reference
 * in matmul.c (docs/numerics.md). Quantized types read the packed layout of repack.c, 8
 * rows per vector (two halves of each 16-row group); u8 x s8 products go through
 * vpmaddubsw + vpmaddwd, whose int16 pair sums cannot saturate here: the unsigned operand
 * is a 4/5/6-bit weight, or |q| <= 128 for Q8_0 with the sign moved onto the activation
 * (|x| <= 127). */
#include "kern_internal.h"
#include "simd_avx2.h"

#define KL 8
#define KMAXT 2
#define KMAXT32 2
#define KMAXT6 2
/* Q3_K one token at a time: with two, its three chunks and eight sums do not fit the 16
 * registers beside the masks and the tile spills (docs/performance.md "Round 6") */
#define KMAXT3 1
#define KQ8_BIAS 0
#define KDP_U8 0 /* vpmaddubsw saturates its int16 pair sums past u = 128 */
typedef __m256i VI;
typedef __m256 VF;

static inline __m256i dp_avx2(__m256i acc, __m256i u, __m256i s)
{
    __m256i p16 = _mm256_maddubs_epi16(u, s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

static inline __m256i dp_q8_avx2(__m256i acc, __m256i w, __m256i s)
{
    __m256i q = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)); /* back to signed q */
    return dp_avx2(acc, _mm256_abs_epi8(q), _mm256_sign_epi8(s, q));
}

#define vi_zero() _mm256_setzero_si256()
#define vi_set1(i) _mm256_set1_epi32(i)
#define vi_add(a, b) _mm256_add_epi32(a, b)
#define vi_sub(a, b) _mm256_sub_epi32(a, b)
#define vi_mullo(a, b) _mm256_mullo_epi32(a, b)
#define vi_and(a, b) _mm256_and_si256(a, b)
#define vi_or(a, b) _mm256_or_si256(a, b)
#define vi_srli16(v, n) _mm256_srli_epi16(v, n)
#define vi_srl16v(v, n) _mm256_srl_epi16(v, _mm_cvtsi32_si128(n))
#define vi_slli16(v, n) _mm256_slli_epi16(v, n)
#define vi_chunk(p, h) _mm256_loadu_si256((const void *)((p) + 32 * (h)))
#define vi_bcast(p) _mm256_broadcastd_epi32(_mm_loadu_si32((const void *)(p)))
#define vi_dp(acc, u, s) dp_avx2(acc, u, s)
#define vi_dp_q8(acc, w, s) dp_q8_avx2(acc, w, s)
#define vi_u8_i32(p, h) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const void *)((p) + 8 * (h))))
#define vi_s8x2_i16(p, h) _mm256_cvtepi8_epi16(_mm_loadu_si128((const void *)((p) + 16 * (h))))
#define vi_slli32(v, n) _mm256_slli_epi32(v, n)
#define vi_srai32(v, n) _mm256_srai_epi32(v, n)
#define vi_u8x2_i16(p, h) _mm256_cvtepu8_epi16(_mm_loadu_si128((const void *)((p) + 16 * (h))))
#define vi_madd16(a, b) _mm256_madd_epi16(a, b)
#define vi_lut16(t, i) _mm256_shuffle_epi8(t, i)
/* kt_min_pairs with vectors, as matmul_avx512.c's: pairwise sums (vpmaddwd by ones),
 * packed to int16 (exact), dwords 0, 1, 4 and 5 broadcast. */
static inline void min_pairs256(const int16_t *bs, __m256i out[4])
{
    __m256i s = _mm256_madd_epi16(_mm256_loadu_si256((const void *)bs), _mm256_set1_epi16(1));
    __m256i p = _mm256_packs_epi32(s, s);
    out[0] = _mm256_permutevar8x32_epi32(p, _mm256_set1_epi32(0));
    out[1] = _mm256_permutevar8x32_epi32(p, _mm256_set1_epi32(1));
    out[2] = _mm256_permutevar8x32_epi32(p, _mm256_set1_epi32(4));
    out[3] = _mm256_permutevar8x32_epi32(p, _mm256_set1_epi32(5));
}
#define vi_min_pairs(bs, out) min_pairs256(bs, out)
#define vf_bf16(p, h) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const void *)((p) + 16 * (h)))), 16))
#define vf_zero() _mm256_setzero_ps()
#define vf_set1(f) _mm256_set1_ps(f)
#define vf_mul(a, b) _mm256_mul_ps(a, b)
#define vf_fma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vf_neg(a) _mm256_xor_ps(a, _mm256_set1_ps(-0.0f))
#define vf_cvt(v) _mm256_cvtepi32_ps(v)
#define vf_storeu(p, v) _mm256_storeu_ps(p, v)
#define vf_f16(p, h) _mm256_cvtph_ps(_mm_loadu_si128((const void *)((p) + 16 * (h))))

#include "matmul_tmpl.h"

/* ---------------------------------------------------------------- float weights */

/* 8 weights of row w from k as f32 (exact conversion); r lanes valid (others zero). */
static inline __m256 load_w8(enum quant_type t, const void *w, int64_t k, int r)
{
    if (t == QT_F32)
        return r >= 8 ? _mm256_loadu_ps((const float *)w + k) : kavx2_loadn((const float *)w + k, r);
    uint16_t tmp[8] = {0};
    const uint16_t *src = (const uint16_t *)w + k;
    __m128i h;
    if (r >= 8) {
        h = _mm_loadu_si128((const void *)src);
    } else {
        memcpy(tmp, src, sizeof(uint16_t) * (size_t)(r > 0 ? r : 0));
        h = _mm_loadu_si128((const void *)tmp);
    }
    if (t == QT_F16)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

KINL void float_tile(const enum quant_type t, const void *wr, const float *x, int64_t K,
                     const int nt, float *out, int64_t ldo)
{
    __m256 lo[2], hi[2];
    KUNROLL
    for (int i = 0; i < nt; i++)
        lo[i] = hi[i] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m256 w0 = load_w8(t, wr, k, 8), w1 = load_w8(t, wr, k + 8, 8);
        KUNROLL
        for (int i = 0; i < nt; i++) {
            lo[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * K + k), w0, lo[i]);
            hi[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * K + k + 8), w1, hi[i]);
        }
    }
    if (k < K) {
        int r = (int)(K - k), rl = r < 8 ? r : 8, rh = r - rl;
        __m256 w0 = load_w8(t, wr, k, rl), w1 = load_w8(t, wr, k + 8, rh);
        KUNROLL
        for (int i = 0; i < nt; i++)
            kavx2_fma_tail(kavx2_loadn(x + i * K + k, rl), w0, kavx2_loadn(x + i * K + k + 8, rh),
                           w1, r, &lo[i], &hi[i]);
    }
    KUNROLL
    for (int i = 0; i < nt; i++)
        out[i * ldo] = kavx2_tree16(lo[i], hi[i]);
}

static void float_rows(const struct kern_weight *w, const struct kern_act *a, float *y,
                       int64_t ldy, int64_t n0, int64_t n1)
{
    const int64_t K = w->K;
    for (int64_t n = n0; n < n1; n++) {
        const void *wr = (const uint8_t *)w->data + (size_t)n * w->row_bytes;
        for (int64_t m0 = 0; m0 < a->M; m0 += 2) {
            int nt = a->M - m0 < 2 ? 1 : 2;
            const float *x = a->x + m0 * K;
            float *o = y + m0 * ldy + n;
            switch (w->type) {
            case QT_F32:
                if (nt == 2) float_tile(QT_F32, wr, x, K, 2, o, ldy);
                else float_tile(QT_F32, wr, x, K, 1, o, ldy);
                break;
            case QT_F16:
                if (nt == 2) float_tile(QT_F16, wr, x, K, 2, o, ldy);
                else float_tile(QT_F16, wr, x, K, 1, o, ldy);
                break;
            default:
                if (nt == 2) float_tile(QT_BF16, wr, x, K, 2, o, ldy);
                else float_tile(QT_BF16, wr, x, K, 1, o, ldy);
                break;
            }
        }
    }
}

bool kern_matmul_rows_avx2(const struct kern_weight *w, const struct kern_act *a, float *y,
                           int64_t ldy, int64_t n0, int64_t n1)
{
    switch (w->type) {
    case QT_F32: case QT_F16: case QT_BF16:
        float_rows(w, a, y, ldy, n0, n1);
        return true;
    default:
        if (!w->packed)
            return false;
        packed_rows(w, a, y, ldy, n0, n1);
        return true;
    }
}
