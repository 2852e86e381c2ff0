/* matmul_neon.h: the aarch64 kernels for y = x . w^T, bit for bit the reference in
 * matmul.c (docs/numerics.md). Included by matmul_neon.c, matmul_dotprod.c and
 * matmul_i8mm.c, each compiled with its level's -march flags and defining KNEON_ROWS (the
 * exported function's name); the level changes only how an exact integer block sum is
 * formed:
 * - neon: SMULL/SMULL2 (s8 x s8 -> s16, exact: |p| <= 128 * 128) then pairwise widening
 *   adds (SADDLP) and ADDP, giving each 32-bit lane the sum of its 4 byte products;
 * - dotprod and i8mm: SDOT, the same 4-byte sums in one instruction.
 * Quantized types read the packed layout of repack.c with 4 rows per vector (four
 * sub-groups of each 16-row group); every packed weight value fits a signed byte (4/5/6-bit
 * values, or the Q8_0 quant itself after undoing repack's XOR 0x80), so no offset terms
 * are needed beyond the reference's own. */
#include "kern_internal.h"
#include "simd_neon.h"

#define KL 4
#define KMAXT 4
#define KMAXT32 8
#define KMAXT6 4
#define KQ8_BIAS 0
typedef int32x4_t VI;
typedef float32x4_t VF;

#define kn_s8(v) vreinterpretq_s8_s32(v)
#define kn_u16(v) vreinterpretq_u16_s32(v)
#define kn_i32u16(v) vreinterpretq_s32_u16(v)

static inline int32x4_t dp_neon(int32x4_t acc, int32x4_t u, int32x4_t s)
{
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, kn_s8(u), kn_s8(s));
#else
    int8x16_t a = kn_s8(u), b = kn_s8(s);
    int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    int16x8_t hi = vmull_high_s8(a, b);
    return vaddq_s32(acc, vpaddq_s32(vpaddlq_s16(lo), vpaddlq_s16(hi)));
#endif
}

static inline int32x4_t dp_q8_neon(int32x4_t acc, int32x4_t w, int32x4_t s)
{
    /* repack stores Q8_0 quants XOR 0x80: undo it to get the signed q. */
    return dp_neon(acc, veorq_s32(w, vdupq_n_s32((int32_t)0x80808080u)), s);
}

static inline int32x4_t madd16_neon(int32x4_t a, int32x4_t b)
{
    int16x8_t x = vreinterpretq_s16_s32(a), y = vreinterpretq_s16_s32(b);
    int32x4_t lo = vmull_s16(vget_low_s16(x), vget_low_s16(y));
    int32x4_t hi = vmull_high_s16(x, y);
    return vpaddq_s32(lo, hi);
}

static inline int32x4_t bcast_neon(const void *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return vdupq_n_s32(v);
}

#define vi_zero() vdupq_n_s32(0)
#define vi_set1(i) vdupq_n_s32((int32_t)(i))
#define vi_add(a, b) vaddq_s32(a, b)
#define vi_sub(a, b) vsubq_s32(a, b)
#define vi_mullo(a, b) vmulq_s32(a, b)
#define vi_and(a, b) vandq_s32(a, b)
#define vi_or(a, b) vorrq_s32(a, b)
#define vi_srli16(v, n) kn_i32u16(vshlq_u16(kn_u16(v), vdupq_n_s16((int16_t)-(n))))
#define vi_srl16v(v, n) kn_i32u16(vshlq_u16(kn_u16(v), vdupq_n_s16((int16_t)-(n))))
#define vi_slli16(v, n) kn_i32u16(vshlq_u16(kn_u16(v), vdupq_n_s16((int16_t)(n))))
#define vi_chunk(p, h) vld1q_s32((const int32_t *)(const void *)((p) + 16 * (h)))
#define vi_bcast(p) bcast_neon(p)
#define vi_dp(acc, u, s) dp_neon(acc, u, s)
#define vi_dp_q8(acc, w, s) dp_q8_neon(acc, w, s)
#define vi_u8_i32(p, h) vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8((const uint8_t *)(p) + 4 * (h))))))
#define vi_s8x2_i16(p, h) vreinterpretq_s32_s16(vmovl_s8(vld1_s8((const int8_t *)(const void *)((p) + 8 * (h)))))
#define vi_slli32(v, n) vshlq_s32(v, vdupq_n_s32(n))
#define vi_srai32(v, n) vshlq_s32(v, vdupq_n_s32(-(n)))
#define vi_u8x2_i16(p, h) vreinterpretq_s32_u16(vmovl_u8(vld1_u8((const uint8_t *)(p) + 8 * (h))))
#define vi_madd16(a, b) madd16_neon(a, b)
#define vf_zero() vdupq_n_f32(0.0f)
#define vf_set1(f) vdupq_n_f32(f)
#define vf_mul(a, b) vmulq_f32(a, b)
#define vf_fma(a, b, c) vfmaq_f32(c, a, b)
#define vf_neg(a) vnegq_f32(a)
#define vf_cvt(v) vcvtq_f32_s32(v)
#define vf_storeu(p, v) vst1q_f32(p, v)
#define vf_f16(p, h) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(const void *)((p) + 8 * (h)))))

#include "matmul_tmpl.h"

/* ---------------------------------------------------------------- float weights */

/* 4 weights of row w from k as f32 (exact conversion); r lanes valid (others zero). */
static inline float32x4_t load_w4(enum quant_type t, const void *w, int64_t k, int r)
{
    if (t == QT_F32)
        return r >= 4 ? vld1q_f32((const float *)w + k) : kneon_loadn((const float *)w + k, r);
    uint16_t tmp[4] = {0, 0, 0, 0};
    const uint16_t *src = (const uint16_t *)w + k;
    uint16x4_t h;
    if (r >= 4) {
        h = vld1_u16(src);
    } else {
        memcpy(tmp, src, sizeof(uint16_t) * (size_t)(r > 0 ? r : 0));
        h = vld1_u16(tmp);
    }
    if (t == QT_F16)
        return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); /* bf16: the high half of an f32 */
}

KINL void float_tile(const enum quant_type t, const void *wr, const float *x, int64_t K,
                     const int nt, float *out, int64_t ldo)
{
    float32x4_t acc[4][4];
    KUNROLL
    for (int i = 0; i < nt; i++)
        for (int j = 0; j < 4; j++)
            acc[i][j] = vdupq_n_f32(0.0f);
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        float32x4_t wv[4];
        for (int j = 0; j < 4; j++)
            wv[j] = load_w4(t, wr, k + 4 * j, 4);
        KUNROLL
        for (int i = 0; i < nt; i++)
            for (int j = 0; j < 4; j++)
                acc[i][j] = vfmaq_f32(acc[i][j], vld1q_f32(x + i * K + k + 4 * j), wv[j]);
    }
    if (k < K) {
        int r = (int)(K - k);
        float32x4_t wv[4];
        for (int j = 0; j < 4; j++) {
            int rj = r - 4 * j;
            wv[j] = load_w4(t, wr, k + 4 * j, rj < 0 ? 0 : rj > 4 ? 4 : rj);
        }
        KUNROLL
        for (int i = 0; i < nt; i++) {
            float32x4_t xv[4];
            for (int j = 0; j < 4; j++) {
                int rj = r - 4 * j;
                xv[j] = kneon_loadn(x + i * K + k + 4 * j, rj < 0 ? 0 : rj > 4 ? 4 : rj);
            }
            kneon_fma_tail(xv, wv, r, acc[i]);
        }
    }
    KUNROLL
    for (int i = 0; i < nt; i++)
        out[i * ldo] = kneon_tree16(acc[i]);
}

/* Up to 4 tokens share each weight vector; each keeps its own 16 accumulators. */
static void float_rows(const struct kern_weight *w, const struct kern_act *a, float *y,
                       int64_t ldy, int64_t n0, int64_t n1)
{
    const int64_t K = w->K;
    for (int64_t n = n0; n < n1; n++) {
        const void *wr = (const uint8_t *)w->data + (size_t)n * w->row_bytes;
        for (int64_t m0 = 0; m0 < a->M; m0 += 4) {
            int nt = a->M - m0 < 4 ? (int)(a->M - m0) : 4;
            const float *x = a->x + m0 * K;
            float *o = y + m0 * ldy + n;
#define KN_FLOAT_NT(T)                                                                      \
    switch (nt) {                                                                          \
    case 1: float_tile(T, wr, x, K, 1, o, ldy); break;                                     \
    case 2: float_tile(T, wr, x, K, 2, o, ldy); break;                                     \
    case 3: float_tile(T, wr, x, K, 3, o, ldy); break;                                     \
    default: float_tile(T, wr, x, K, 4, o, ldy); break;                                    \
    }
            switch (w->type) {
            case QT_F32: KN_FLOAT_NT(QT_F32); break;
            case QT_F16: KN_FLOAT_NT(QT_F16); break;
            default: KN_FLOAT_NT(QT_BF16); break;
            }
#undef KN_FLOAT_NT
        }
    }
}

bool KNEON_ROWS(const struct kern_weight *w, const struct kern_act *a, float *y, int64_t ldy,
                int64_t n0, int64_t n1)
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
