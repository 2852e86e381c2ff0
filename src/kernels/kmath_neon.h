/* kmath_neon.h: kern_expf and the functions built on it, 4 lanes at a time, step for step
 * the reference in kmath.c (same constants, same operations, same rounding): the clamps
 * by max/min (same values for every non-NaN x; NaN lanes return x at the end), separate
 * mul and add for t, FMLS for the r steps (a - b * c, one rounding: fmaf(-kf, c, r)),
 * FCVTZS for k (kf is integral), an arithmetic shift for k >> 1. */
#ifndef KN_KERNELS_KMATH_NEON_H
#define KN_KERNELS_KMATH_NEON_H

#include "ops_internal.h"
#include "simd_neon.h"

static inline float32x4_t kn_exp4(float32x4_t x)
{
    uint32x4_t num = vceqq_f32(x, x);
    float32x4_t xc = vmaxq_f32(x, vdupq_n_f32(KN_EXP_LO));
    xc = vminq_f32(xc, vdupq_n_f32(KN_EXP_HI));
    float32x4_t magic = vdupq_n_f32(KN_EXP_MAGIC);
    float32x4_t t = vaddq_f32(vmulq_f32(xc, vdupq_n_f32(KN_EXP_LOG2E)), magic);
    float32x4_t kf = vsubq_f32(t, magic);
    float32x4_t r = vfmsq_f32(xc, kf, vdupq_n_f32(KN_EXP_LN2_HI));
    r = vfmsq_f32(r, kf, vdupq_n_f32(KN_EXP_LN2_LO));
    float32x4_t p = vdupq_n_f32(KN_EXP_C7);
    p = vfmaq_f32(vdupq_n_f32(KN_EXP_C6), p, r);
    p = vfmaq_f32(vdupq_n_f32(KN_EXP_C5), p, r);
    p = vfmaq_f32(vdupq_n_f32(KN_EXP_C4), p, r);
    p = vfmaq_f32(vdupq_n_f32(KN_EXP_C3), p, r);
    p = vfmaq_f32(vdupq_n_f32(KN_EXP_C2), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    int32x4_t k = vcvtq_s32_f32(kf);
    int32x4_t k1 = vshrq_n_s32(k, 1);
    int32x4_t k2 = vsubq_s32(k, k1);
    int32x4_t bias = vdupq_n_s32(127);
    float32x4_t s1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k1, bias), 23));
    float32x4_t s2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k2, bias), 23));
    float32x4_t y = vmulq_f32(vmulq_f32(p, s1), s2);
    return vbslq_f32(num, y, x);
}

/* x / (1 + exp(-x)) */
static inline float32x4_t kn_silu4(float32x4_t x)
{
    return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), kn_exp4(vnegq_f32(x))));
}

/* kern_swiglu_oaif; the clamps are compare-and-select (vminq/vmaxq would turn a NaN
 * operand into another NaN than the reference passes through). */
static inline float32x4_t kn_swiglu_oai4(float32x4_t g, float32x4_t u)
{
    float32x4_t lim = vdupq_n_f32(KERN_OAI_LIMIT), nlim = vdupq_n_f32(-KERN_OAI_LIMIT);
    float32x4_t x = vbslq_f32(vcltq_f32(lim, g), lim, g);
    float32x4_t y = vbslq_f32(vcltq_f32(lim, u), lim, u);
    y = vbslq_f32(vcgtq_f32(nlim, y), nlim, y);
    float32x4_t sig = vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f),
                                             kn_exp4(vnegq_f32(vmulq_f32(vdupq_n_f32(KERN_OAI_ALPHA), x)))));
    return vmulq_f32(sig, vaddq_f32(y, vdupq_n_f32(1.0f)));
}

/* x / (1 + exp(-(x * fmaf(x * x, C1, C0)))) */
static inline float32x4_t kn_gelu4(float32x4_t x)
{
    float32x4_t z2 = vmulq_f32(x, vfmaq_f32(vdupq_n_f32(KN_GELU_C0), vmulq_f32(x, x),
                                            vdupq_n_f32(KN_GELU_C1)));
    return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), kn_exp4(vnegq_f32(z2))));
}

/* kern_sincos_f64 on 2 doubles, step for step (kmath.c). */
static inline void kn_sincos2(float64x2_t x, float64x2_t *s, float64x2_t *c)
{
    static const double sc[8] = KN_SIN_COEFFS, cc[8] = KN_COS_COEFFS;
    float64x2_t magic = vdupq_n_f64(KN_MAGIC_D);
    float64x2_t t = vaddq_f64(vmulq_f64(x, vdupq_n_f64(KN_TWO_OVER_PI)), magic);
    float64x2_t kd = vsubq_f64(t, magic);
    float64x2_t r = vfmsq_f64(x, kd, vdupq_n_f64(KN_PIO2_HI));
    r = vfmsq_f64(r, kd, vdupq_n_f64(KN_PIO2_MID));
    float64x2_t r2 = vmulq_f64(r, r);
    float64x2_t ps = vdupq_n_f64(sc[0]), pc = vdupq_n_f64(cc[0]);
    for (int i = 1; i < 8; i++) {
        ps = vfmaq_f64(vdupq_n_f64(sc[i]), ps, r2);
        pc = vfmaq_f64(vdupq_n_f64(cc[i]), pc, r2);
    }
    float64x2_t sv = vfmaq_f64(r, vmulq_f64(r, r2), ps);
    float64x2_t cv = vfmaq_f64(vdupq_n_f64(1.0), r2, pc);
    /* the quadrant k & 3 is in t's low mantissa bits (t = 1.5 * 2^52 + k exactly) */
    uint64x2_t q = vandq_u64(vreinterpretq_u64_f64(t), vdupq_n_u64(3));
    uint64x2_t one = vdupq_n_u64(1), two = vdupq_n_u64(2);
    uint64x2_t swap = vceqq_u64(vandq_u64(q, one), one);
    uint64x2_t neg_s = vceqq_u64(vandq_u64(q, two), two);
    uint64x2_t neg_c = vceqq_u64(vandq_u64(vaddq_u64(q, one), two), two);
    uint64x2_t sign = vdupq_n_u64(0x8000000000000000ull);
    /* quadrant 0: (sv, cv), 1: (cv, -sv), 2: (-sv, -cv), 3: (-cv, sv) */
    float64x2_t s0 = vbslq_f64(swap, cv, sv), c0 = vbslq_f64(swap, sv, cv);
    s0 = vreinterpretq_f64_u64(veorq_u64(vreinterpretq_u64_f64(s0), vandq_u64(neg_s, sign)));
    c0 = vreinterpretq_f64_u64(veorq_u64(vreinterpretq_u64_f64(c0), vandq_u64(neg_c, sign)));
    /* |x| >= 2^30 (or NaN) gives the reference's NaN */
    uint64x2_t ok = vcltq_f64(vabsq_f64(x), vdupq_n_f64(0x1p30));
    float64x2_t nan = vreinterpretq_f64_u64(vdupq_n_u64(0x7ff8000000000000ull));
    *s = vbslq_f64(ok, s0, nan);
    *c = vbslq_f64(ok, c0, nan);
}

/* x > m ? x : m per lane (the reference's max step: a NaN x never enters). */
static inline float32x4_t kn_max_step4(float32x4_t x, float32x4_t m)
{
    return vbslq_f32(vcgtq_f32(x, m), x, m);
}

#endif
