/* matmul_avx512.c: the AVX-512 (F/BW/VL/DQ + VNNI) kernels for y = x . w^T, bit for bit
 * the reference in matmul.c (docs/numerics.md). Quantized types read the packed layout of
 * repack.c, 16 rows per vector, and use vpdpbusd; float types run the canonical dot with
 * the weights loaded once for several tokens. */
#include "kern_internal.h"
#include "simd_avx512.h"

#define KL 16
#define KMAXT 4
#ifndef KMAXT4K
#define KMAXT4K 8
#endif
#ifndef KMAXTQ6
#define KMAXTQ6 6
#endif
#ifndef KMAXT8G
#define KMAXT8G 6
#endif
#define KMAXT32 8
#define KMAXT6 4
#define KQ8_BIAS 128
#define KDP_U8 1 /* vpdpbusd: any u8 times s8, exact int32 sums */
typedef __m512i VI;
typedef __m512 VF;

#define vi_zero() _mm512_setzero_si512()
#define vi_set1(i) _mm512_set1_epi32(i)
#define vi_add(a, b) _mm512_add_epi32(a, b)
#define vi_sub(a, b) _mm512_sub_epi32(a, b)
#define vi_mullo(a, b) _mm512_mullo_epi32(a, b)
#define vi_and(a, b) _mm512_and_si512(a, b)
#define vi_or(a, b) _mm512_or_si512(a, b)
#define vi_srli16(v, n) _mm512_srli_epi16(v, n)
#define vi_srl16v(v, n) _mm512_srl_epi16(v, _mm_cvtsi32_si128(n))
#define vi_slli16(v, n) _mm512_slli_epi16(v, n)
#define vi_chunk(p, h) ((void)(h), _mm512_loadu_si512((const void *)(p)))
#define vi_bcast(p) _mm512_broadcastd_epi32(_mm_loadu_si32((const void *)(p)))
#define vi_dp(acc, u, s) _mm512_dpbusd_epi32(acc, u, s)
/* acc + vi_dp(acc, u, vi_bcast(p)) with the broadcast folded into the instruction's
 * memory operand ({1to16}), which the compiler does not do by itself. */
struct kq_dword { int8_t b[4]; };
static inline __m512i dp_bc512(__m512i acc, __m512i u, const void *p)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*(const struct kq_dword *)p));
    return acc;
}
#define vi_dp_bc(acc, u, p) dp_bc512(acc, u, p)
#define vi_dp_q8(acc, w, s) _mm512_dpbusd_epi32(acc, w, s)
#define vi_u8_i32(p, h) ((void)(h), _mm512_cvtepu8_epi32(_mm_loadu_si128((const void *)(p))))
#define vi_s8x2_i16(p, h) ((void)(h), _mm512_cvtepi8_epi16(_mm256_loadu_si256((const void *)(p))))
#define vi_slli32(v, n) _mm512_slli_epi32(v, n)
#define vi_srai32(v, n) _mm512_srai_epi32(v, n)
#define vi_u8x2_i16(p, h) ((void)(h), _mm512_cvtepu8_epi16(_mm256_loadu_si256((const void *)(p))))
#define vi_madd16(a, b) _mm512_madd_epi16(a, b)
#define vi_dp16(acc, a, b) _mm512_dpwssd_epi32(acc, a, b)
#define vi_lut16(t, i) _mm512_shuffle_epi8(t, i)
/* vpermb (AVX-512 VBMI), as inline assembly so that this file builds and runs on CPUs
 * without VBMI: the tiles run it only where kern_isa_vbmi() says the CPU has it. */
static inline __m512i lut64_vbmi(__m512i t, __m512i i)
{
    __m512i r;
    __asm__("vpermb %2, %1, %0" : "=v"(r) : "v"(i), "v"(t));
    return r;
}
#define KLUT64 1
#define vi_lut64(t, i) lut64_vbmi(t, i)
/* kt_min_pairs with vectors: the 16 sums of 16 pairwise (vpmaddwd by ones: 8 sums of 32,
 * exact in int32), packed to int16 (exact: |sum| <= 32 * 127), dwords 0, 1, 4 and 5 of
 * the pack (pairs 0-3) broadcast. */
static inline void min_pairs512(const int16_t *bs, __m512i out[4])
{
    __m256i s = _mm256_madd_epi16(_mm256_loadu_si256((const void *)bs), _mm256_set1_epi16(1));
    __m512i p = _mm512_castsi256_si512(_mm256_packs_epi32(s, s));
    out[0] = _mm512_permutexvar_epi32(_mm512_set1_epi32(0), p);
    out[1] = _mm512_permutexvar_epi32(_mm512_set1_epi32(1), p);
    out[2] = _mm512_permutexvar_epi32(_mm512_set1_epi32(4), p);
    out[3] = _mm512_permutexvar_epi32(_mm512_set1_epi32(5), p);
}
#define vi_min_pairs(bs, out) min_pairs512(bs, out)
#define vf_bf16(p, h) ((void)(h), _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const void *)(p))), 16)))
#define vf_zero() _mm512_setzero_ps()
#define vf_set1(f) _mm512_set1_ps(f)
#define vf_mul(a, b) _mm512_mul_ps(a, b)
#define vf_fma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vf_neg(a) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0x80000000u)))
#define vf_cvt(v) _mm512_cvtepi32_ps(v)
#define vf_storeu(p, v) _mm512_storeu_ps(p, v)
#define vf_f16(p, h) ((void)(h), _mm512_cvtph_ps(_mm256_loadu_si256((const void *)(p))))

#include "matmul_tmpl.h"

/* ---------------------------------------------------------------- float weights */

/* 16 weights of row w from k, as f32 (exact conversion), lanes >= r zero. */
static inline __m512 load_w(enum quant_type t, const void *w, int64_t k, __mmask16 m)
{
    switch (t) {
    case QT_F32: return _mm512_maskz_loadu_ps(m, (const float *)w + k);
    case QT_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + k));
    default:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)w + k)), 16));
    }
}

/* nr (1 or 2) weight rows from wr (row stride rb) times nt (1..4) tokens: each (row,
 * token) pair has its own 16 canonical accumulators; loads are shared. */
KINL void float_tile(const enum quant_type t, const uint8_t *wr, size_t rb, const int nr,
                     const float *x, int64_t K, const int nt, float *out, int64_t ldo)
{
    __m512 acc[2][4];
    KUNROLL
    for (int r = 0; r < nr; r++) {
        KUNROLL
        for (int i = 0; i < nt; i++)
            acc[r][i] = _mm512_setzero_ps();
    }
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 wv[2];
        KUNROLL
        for (int r = 0; r < nr; r++)
            wv[r] = load_w(t, wr + r * rb, k, 0xFFFF);
        KUNROLL
        for (int i = 0; i < nt; i++) {
            __m512 xv = _mm512_loadu_ps(x + i * K + k);
            KUNROLL
            for (int r = 0; r < nr; r++)
                acc[r][i] = _mm512_fmadd_ps(xv, wv[r], acc[r][i]);
        }
    }
    if (k < K) {
        __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
        __m512 wv[2];
        KUNROLL
        for (int r = 0; r < nr; r++)
            wv[r] = load_w(t, wr + r * rb, k, m);
        KUNROLL
        for (int i = 0; i < nt; i++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + i * K + k);
            KUNROLL
            for (int r = 0; r < nr; r++)
                acc[r][i] = _mm512_mask3_fmadd_ps(xv, wv[r], acc[r][i], m);
        }
    }
    KUNROLL
    for (int r = 0; r < nr; r++) {
        KUNROLL
        for (int i = 0; i < nt; i++)
            out[i * ldo + r] = k512_tree16(acc[r][i]);
    }
}

/* Dispatches to a tile with compile-time type, row and token counts. */
KINL void float_tile_t(const enum quant_type t, const uint8_t *wr, size_t rb, int nr,
                       const float *x, int64_t K, int nt, float *out, int64_t ldo)
{
#define FT(NR, NT) float_tile(t, wr, rb, NR, x, K, NT, out, ldo)
    if (nr == 2) {
        if (nt == 4) FT(2, 4); else if (nt == 3) FT(2, 3); else if (nt == 2) FT(2, 2); else FT(2, 1);
    } else {
        if (nt == 4) FT(1, 4); else if (nt == 3) FT(1, 3); else if (nt == 2) FT(1, 2); else FT(1, 1);
    }
#undef FT
}

static void float_rows(const struct kern_weight *w, const struct kern_act *a, float *y,
                       int64_t ldy, int64_t n0, int64_t n1)
{
    const int64_t K = w->K;
    for (int64_t n = n0; n < n1; n += 2) {
        const int nr = n + 1 < n1 ? 2 : 1;
        const uint8_t *wr = (const uint8_t *)w->data + (size_t)n * w->row_bytes;
        for (int64_t m0 = 0; m0 < a->M; m0 += 4) {
            int nt = (int)(a->M - m0 < 4 ? a->M - m0 : 4);
            const float *x = a->x + m0 * K;
            float *o = y + m0 * ldy + n;
            switch (w->type) {
            case QT_F32: float_tile_t(QT_F32, wr, w->row_bytes, nr, x, K, nt, o, ldy); break;
            case QT_F16: float_tile_t(QT_F16, wr, w->row_bytes, nr, x, K, nt, o, ldy); break;
            default: float_tile_t(QT_BF16, wr, w->row_bytes, nr, x, K, nt, o, ldy); break;
            }
        }
    }
}

bool kern_matmul_rows_avx512(const struct kern_weight *w, const struct kern_act *a, float *y,
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
