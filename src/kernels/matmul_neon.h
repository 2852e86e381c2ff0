/* matmul_neon.h: the aarch64 kernels for y = x . w^T, bit for bit the reference in
 * matmul.c (docs/numerics.md). Included by matmul_neon.c, matmul_dotprod.c and
 * matmul_i8mm.c, each compiled with its level's -march flags and defining KNEON_ROWS (the
 * exported function's name); the level changes only how an exact integer block sum is
 * formed:
 * - neon: SMULL/SMULL2 (s8 x s8 -> s16, exact: |p| <= 128 * 128) then pairwise widening
 *   adds (SADDLP) and ADDP, giving each 32-bit lane the sum of its 4 byte products;
 * - dotprod and i8mm: SDOT, the same 4-byte sums in one instruction;
 * - i8mm, for the 32-block types and two or more tokens: SMMLA (tile_q32_mm below).
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
#define KDP_U8 0 /* sdot takes signed bytes: u <= 127 */
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

#if defined(__ARM_FEATURE_MATMUL_INT8)
/* ---------------------------------------------------------------- i8mm: SMMLA prefill */

/* The 32-block types for two or more tokens: SMMLA multiplies a 2x8 block of weight bytes
 * (two rows, 8 consecutive elements) by a 2x8 block of activation bytes (two tokens, the
 * same 8 elements) into a 2x2 block of int32 sums. Zipping the chunks of elements
 * [4c, 4c + 3] and [4c + 4, 4c + 7] gives rows (0, 1) and (2, 3) of a sub-group; after
 * the block's four pairs, unzipping the two accumulators gives each token's 4 row sums,
 * the same exact integers vi_dp forms, and the float steps are tile_q32's. An odd last
 * token is paired with itself and its duplicate dropped. */
KINL void tile_q32_mm(const enum quant_type t, const uint8_t *gp, int64_t nb, int h,
                      const struct kern_act *a, int64_t m0, const int nt, float *y, int64_t ldy,
                      int64_t row0, int64_t n0, int64_t n1, size_t pf)
{
    const bool has_min = t == QT_Q4_1 || t == QT_Q5_1;
    const bool has_hb = t == QT_Q5_0 || t == QT_Q5_1;
    const int off = t == QT_Q4_0 ? 8 : t == QT_Q5_0 ? 16 : 0;
    const size_t gbb = t == QT_Q8_0 ? 544 : t == QT_Q4_0 ? 288 : t == QT_Q4_1 ? 320
                     : t == QT_Q5_0 ? 352 : 384;
    const struct kern_block_q8f *xr[KMAXT32 + 1];
    VF acc[KMAXT32];
    KUNROLL
    for (int i = 0; i < nt; i++) {
        xr[i] = (const void *)((const uint8_t *)a->q + (size_t)(m0 + i) * a->row_bytes);
        acc[i] = vf_zero();
    }
    xr[nt] = xr[nt - 1];
    const VI m4 = vi_set1(0x0F0F0F0F), m10 = vi_set1(0x10101010);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = gp + (size_t)b * gbb;
        kt_prefetch(p, gbb, pf);
        VF dw = vf_f16(p, h), dm = vf_zero();
        const uint8_t *q = p + 32;
        if (has_min) {
            dm = vf_f16(q, h);
            q += 32;
        }
        VI v[8];
        if (t == QT_Q8_0) {
            KUNROLL
            for (int c = 0; c < 8; c++) /* back to the signed quant */
                v[c] = veorq_s32(vi_chunk(q + 64 * c, h), vdupq_n_s32((int32_t)0x80808080u));
        } else {
            KUNROLL
            for (int c = 0; c < 4; c++) {
                VI raw = vi_chunk(q + 64 * c, h);
                v[c] = vi_and(raw, m4);
                v[4 + c] = vi_and(vi_srli16(raw, 4), m4);
            }
            if (has_hb) {
                VI hb = vi_chunk(q + 256, h);
                v[0] = vi_or(v[0], vi_and(vi_slli16(hb, 4), m10));
                v[1] = vi_or(v[1], vi_and(vi_slli16(hb, 3), m10));
                v[2] = vi_or(v[2], vi_and(vi_slli16(hb, 2), m10));
                v[3] = vi_or(v[3], vi_and(vi_slli16(hb, 1), m10));
                v[4] = vi_or(v[4], vi_and(hb, m10));
                v[5] = vi_or(v[5], vi_and(vi_srli16(hb, 1), m10));
                v[6] = vi_or(v[6], vi_and(vi_srli16(hb, 2), m10));
                v[7] = vi_or(v[7], vi_and(vi_srli16(hb, 3), m10));
            }
        }
        /* Chunk c holds elements xo(c) .. xo(c) + 3, xo = 4c (c < 4) or 16 + 4(c - 4) for
         * the nibble types, 4c for Q8_0: pairs (c, c + 1), c even, are 8 consecutive. */
        int8x16_t wlo[4], whi[4];
        int xo[4];
        KUNROLL
        for (int pr = 0; pr < 4; pr++) {
            const int c = 2 * pr;
            wlo[pr] = vreinterpretq_s8_s32(vzip1q_s32(v[c], v[c + 1]));  /* rows 0, 1 */
            whi[pr] = vreinterpretq_s8_s32(vzip2q_s32(v[c], v[c + 1]));  /* rows 2, 3 */
            xo[pr] = t == QT_Q8_0 ? 4 * c : c < 4 ? 4 * c : 16 + 4 * (c - 4);
        }
        KUNROLL
        for (int i = 0; i < nt; i += 2) {
            const struct kern_block_q8f *xa = &xr[i][b], *xb2 = &xr[i + 1][b];
            int32x4_t a01 = vdupq_n_s32(0), a23 = vdupq_n_s32(0);
            KUNROLL
            for (int pr = 0; pr < 4; pr++) {
                int8x16_t xv = vcombine_s8(vld1_s8(xa->qs + xo[pr]), vld1_s8(xb2->qs + xo[pr]));
                a01 = vmmlaq_s32(a01, wlo[pr], xv);
                a23 = vmmlaq_s32(a23, whi[pr], xv);
            }
            /* a01 = [r0 t0, r0 t1, r1 t0, r1 t1], a23 the same for rows 2, 3 */
            VI is[2] = {vuzp1q_s32(a01, a23), vuzp2q_s32(a01, a23)};
            KUNROLL
            for (int u = 0; u < 2; u++) {
                if (i + u >= nt)
                    break;
                const struct kern_block_q8f *xk = u ? xb2 : xa;
                VI isum = is[u];
                if (off)
                    isum = vi_sub(isum, vi_set1(off * xk->s));
                VF dx = vf_set1(xk->d);
                acc[i + u] = vf_fma(vf_mul(dw, dx), vf_cvt(isum), acc[i + u]);
                if (has_min)
                    acc[i + u] = vf_fma(vf_mul(dm, dx), vf_set1((float)xk->s), acc[i + u]);
            }
        }
    }
    KUNROLL
    for (int i = 0; i < nt; i++)
        st_rows(y + (m0 + i) * ldy, row0, n0, n1, acc[i]);
}

static void packed_q32_mm(const enum quant_type t, const uint8_t *gp, int64_t nb, int h,
                          const struct kern_act *a, int64_t m0, int nt, float *y, int64_t ldy,
                          int64_t row0, int64_t n0, int64_t n1, size_t pf)
{
#define CALL_MM(T, NT) tile_q32_mm(T, gp, nb, h, a, m0, NT, y, ldy, row0, n0, n1, pf)
#define CALL_MM_Q8_0(NT) CALL_MM(QT_Q8_0, NT)
#define CALL_MM_Q4_0(NT) CALL_MM(QT_Q4_0, NT)
#define CALL_MM_Q4_1(NT) CALL_MM(QT_Q4_1, NT)
#define CALL_MM_Q5_0(NT) CALL_MM(QT_Q5_0, NT)
#define CALL_MM_Q5_1(NT) CALL_MM(QT_Q5_1, NT)
    switch (t) {
    case QT_Q8_0: KTILE_CASES32(CALL_MM_Q8_0); break;
    case QT_Q4_0: KTILE_CASES32(CALL_MM_Q4_0); break;
    case QT_Q4_1: KTILE_CASES32(CALL_MM_Q4_1); break;
    case QT_Q5_0: KTILE_CASES32(CALL_MM_Q5_0); break;
    default: KTILE_CASES32(CALL_MM_Q5_1); break;
    }
}

/* Rows [n0, n1) of a packed 32-block weight, two or more tokens. */
static void packed_rows_mm(const struct kern_weight *w, const struct kern_act *a, float *y,
                           int64_t ldy, int64_t n0, int64_t n1)
{
    const int64_t nb = w->K / 32;
    const size_t gstride = (size_t)nb * kern_repack_group_block_bytes(w->type);
    const size_t pf = kern_prefetch_bytes();
    for (int64_t g = n0 / 16; g * 16 < n1; g++) {
        const uint8_t *gp = (const uint8_t *)w->packed + (size_t)g * gstride;
        bool first_pass = true;
        for (int h = 0; h < 16 / KL; h++) {
            int64_t row0 = 16 * g + KL * h;
            if (row0 >= n1 || row0 + KL <= n0)
                continue;
            for (int64_t m0 = 0; m0 < a->M; m0 += KMAXT32) {
                int nt = (int)(a->M - m0 < KMAXT32 ? a->M - m0 : KMAXT32);
                const size_t pfg = kt_pass_prefetch(&first_pass, pf);
                if (nt == 1) /* one token: a pair would do twice the work (no look-ups: is_q32) */
                    packed_q32(w->type, gp, nb, h, a, m0, nt, y, ldy, row0, n0, n1, false, pfg);
                else
                    packed_q32_mm(w->type, gp, nb, h, a, m0, nt, y, ldy, row0, n0, n1, pfg);
            }
        }
    }
}

static bool is_q32(enum quant_type t)
{
    return t == QT_Q8_0 || t == QT_Q4_0 || t == QT_Q4_1 || t == QT_Q5_0 || t == QT_Q5_1;
}
#endif

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
#if defined(__ARM_FEATURE_MATMUL_INT8)
        if (is_q32(w->type) && a->M >= 2) {
            packed_rows_mm(w, a, y, ldy, n0, n1);
            return true;
        }
#endif
        packed_rows(w, a, y, ldy, n0, n1);
        return true;
    }
}
