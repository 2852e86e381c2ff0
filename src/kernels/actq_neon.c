/* actq_neon.c: per-token activation quantization with NEON, bit for bit the rule of
 * actq.c. Why each step matches:
 * - amax: a lane takes |x| only where |x| > amax (vcgtq + select), the reference's test,
 *   so a NaN never enters (NEON's vmaxq would propagate it); the lanes hold values >= +0
 *   with no NaN, so their largest is the reference's whatever the order.
 * - d and id are the reference's scalar IEEE divisions.
 * - v = x * id is one rounding; clamped to [-127, 127] by min/max (NaN lanes are zeroed
 *   afterwards by the v == v mask); FCVTNS (vcvtnq_s32_f32) rounds to nearest, ties to
 *   even, as the reference's (v + 1.5 * 2^23) - 1.5 * 2^23 does for |v| <= 127.
 * - the narrowing to int8 is exact (values in [-127, 127]); sums are exact int32. */
#include "kern_internal.h"
#include "simd_neon.h"

static inline int32x4_t quant4(float32x4_t x, float32x4_t vid)
{
    float32x4_t v = vmulq_f32(x, vid);
    uint32x4_t ok = vceqq_f32(v, v);
    v = vminq_f32(v, vdupq_n_f32(127.0f));
    v = vmaxq_f32(v, vdupq_n_f32(-127.0f));
    return vandq_s32(vcvtnq_s32_f32(v), vreinterpretq_s32_u32(ok));
}

/* n = 32 or 256 values; sums16[j] = sum of q[16j .. 16j+15] (at most 16 x 127, an int16),
 * written straight to the block (see actq_avx512.c). */
static inline float quant_block(const float *x, int n, int8_t *q, int16_t *sums16)
{
    float32x4_t amax = vdupq_n_f32(0.0f);
    for (int i = 0; i < n; i += 4) {
        float32x4_t a = vabsq_f32(vld1q_f32(x + i));
        amax = vbslq_f32(vcgtq_f32(a, amax), a, amax);
    }
    float am = vmaxvq_f32(amax);
    float d = am / 127.0f;
    float id = am > 0.0f ? 127.0f / am : 0.0f;
    float32x4_t vid = vdupq_n_f32(id);
    for (int i = 0; i < n; i += 16) {
        int32x4_t q0 = quant4(vld1q_f32(x + i), vid), q1 = quant4(vld1q_f32(x + i + 4), vid);
        int32x4_t q2 = quant4(vld1q_f32(x + i + 8), vid), q3 = quant4(vld1q_f32(x + i + 12), vid);
        sums16[i / 16] = (int16_t)vaddvq_s32(vaddq_s32(vaddq_s32(q0, q1), vaddq_s32(q2, q3)));
        int16x8_t lo = vcombine_s16(vmovn_s32(q0), vmovn_s32(q1));
        int16x8_t hi = vcombine_s16(vmovn_s32(q2), vmovn_s32(q3));
        vst1q_s8(q + i, vcombine_s8(vmovn_s16(lo), vmovn_s16(hi)));
    }
    return d;
}

void kern_quantize_row_q8f_neon(const float *x, int64_t K, struct kern_block_q8f *dst)
{
    for (int64_t b = 0; b < K / 32; b++) {
        int16_t s[2];
        dst[b].d = quant_block(x + 32 * b, 32, dst[b].qs, s);
        dst[b].s = s[0] + s[1];
    }
}

void kern_quantize_row_q8k_neon(const float *x, int64_t K, struct block_q8_K *dst)
{
    for (int64_t b = 0; b < K / QK_K; b++) {
        dst[b].d = quant_block(x + QK_K * b, QK_K, dst[b].qs, dst[b].bsums);
    }
}
