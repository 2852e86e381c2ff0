/* simd_neon.h: Advanced SIMD (NEON) helpers shared by the aarch64 kernel files
 * (*_neon.c, *_dotprod.c, *_i8mm.c). The 16 canonical accumulators of a float dot product
 * are four float32x4_t: lanes 0-3, 4-7, 8-11, 12-15. vfmaq_f32 is one fused multiply-add
 * (fmaf), vaddq_f32 one IEEE add, and AArch64 keeps subnormals unless FPCR.FZ is set,
 * which no program of ours does. */
#ifndef KN_SIMD_NEON_H
#define KN_SIMD_NEON_H

#include <arm_neon.h>
#include <stdint.h>

/* The canonical tree over 16 lanes a[0..3] (lanes 4i .. 4i+3): w = 8, 4, 2, 1. */
static inline float kneon_tree16(const float32x4_t a[4])
{
    float32x4_t s8a = vaddq_f32(a[0], a[2]);  /* acc[i] += acc[i+8], i = 0..3 */
    float32x4_t s8b = vaddq_f32(a[1], a[3]);  /* i = 4..7 */
    float32x4_t s4 = vaddq_f32(s8a, s8b);     /* acc[i] += acc[i+4] */
    float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4)); /* acc[i] += acc[i+2] */
    return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);             /* acc[0] += acc[1] */
}

/* A mask of the lanes i < r of a 4-lane vector (r may be <= 0 or >= 4). */
static inline uint32x4_t kneon_lanes(int r)
{
    const int32_t idx[4] = {0, 1, 2, 3};
    return vcgtq_s32(vdupq_n_s32(r), vld1q_s32(idx));
}

/* The first r (0..4) floats of p, zeros elsewhere (never reading p[r..]). */
static inline float32x4_t kneon_loadn(const float *p, int r)
{
    float tmp[4] = {0, 0, 0, 0};
    for (int i = 0; i < r && i < 4; i++)
        tmp[i] = p[i];
    return vld1q_f32(tmp);
}

/* acc[j] lane i = fmaf(a, b, acc) for lane 4j + i < r only (r in 1..15): lanes past the
 * end keep their value exactly (an fma with zeros could turn -0 into +0). */
static inline void kneon_fma_tail(const float32x4_t va[4], const float32x4_t vb[4], int r,
                                  float32x4_t acc[4])
{
    for (int j = 0; j < 4; j++)
        acc[j] = vbslq_f32(kneon_lanes(r - 4 * j), vfmaq_f32(acc[j], va[j], vb[j]), acc[j]);
}

/* The tail of a canonical dot: the r (1..15) remaining products of a and b. */
static inline void kneon_tail16(const float *a, const float *b, int r, float32x4_t acc[4])
{
    float32x4_t va[4], vb[4];
    for (int j = 0; j < 4; j++) {
        int rj = r - 4 * j;
        rj = rj < 0 ? 0 : rj > 4 ? 4 : rj;
        va[j] = kneon_loadn(a + 4 * j, rj);
        vb[j] = kneon_loadn(b + 4 * j, rj);
    }
    kneon_fma_tail(va, vb, r, acc);
}

#endif
