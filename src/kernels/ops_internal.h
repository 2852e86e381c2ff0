/* ops_internal.h: what the ops files share and nothing else sees: the canonical f32
 * reduction tree (docs/numerics.md "canonical sum"), the constants of Kinetic's own
 * math, and the per-ISA kernel tables. */
#ifndef KN_KERNELS_OPS_INTERNAL_H
#define KN_KERNELS_OPS_INTERNAL_H

#include <math.h>
#include <string.h>

#include "ops.h"

/* The canonical tree: 16 accumulators, element k goes to acc[k % 16], then
 * for w = 8, 4, 2, 1: acc[i] = acc[i] + acc[i + w]; the result is acc[0]. */
#define KN_LANES 16

static inline float kn_tree16(float acc[KN_LANES])
{
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++)
            acc[i] = acc[i] + acc[i + w];
    return acc[0];
}

/* sum_k a[k] * b[k], canonical order with fmaf. */
static inline float kn_dot_ref(const float *a, const float *b, int64_t n)
{
    float acc[KN_LANES] = {0};
    for (int64_t k = 0; k < n; k++)
        acc[k % KN_LANES] = fmaf(a[k], b[k], acc[k % KN_LANES]);
    return kn_tree16(acc);
}

/* sum_k a[k], canonical order. */
static inline float kn_sum_ref(const float *a, int64_t n)
{
    float acc[KN_LANES] = {0};
    for (int64_t k = 0; k < n; k++)
        acc[k % KN_LANES] += a[k];
    return kn_tree16(acc);
}

/* The attention sink's merge (ops.h kern_attn_args.sinks) into the running (m, l) of a
 * (query, head) pair; returns the factor a the caller multiplies every o[d] by. */
static inline float kn_attn_sink(float sink, float *m, float *l)
{
    float mn = sink > *m ? sink : *m;
    float a = kern_expf(*m - mn), b = kern_expf(sink - mn);
    *l = *l * a + b;
    *m = mn;
    return a;
}

static inline float kn_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t kn_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* ---- kern_expf's constants (kmath.c states the algorithm; SIMD files repeat it). */
#define KN_EXP_LO (-104.0f)                 /* exp below this rounds to 0 */
#define KN_EXP_HI 89.0f                     /* exp above this is +inf */
#define KN_EXP_LOG2E 0x1.715476p+0f         /* nearest float to 1/ln 2 */
#define KN_EXP_MAGIC 12582912.0f            /* 1.5 * 2^23: adding it rounds to an integer */
#define KN_EXP_LN2_HI 0x1.62e430p-1f        /* nearest float to ln 2 */
#define KN_EXP_LN2_LO (-0x1.05c610p-29f)    /* nearest float to ln 2 - KN_EXP_LN2_HI */
/* Taylor coefficients 1/k!, k = 7 down to 2, each rounded to nearest float. */
#define KN_EXP_C7 0x1.a01a02p-13f
#define KN_EXP_C6 0x1.6c16c2p-10f
#define KN_EXP_C5 0x1.111112p-7f
#define KN_EXP_C4 0x1.555556p-5f
#define KN_EXP_C3 0x1.555556p-3f
#define KN_EXP_C2 0x1.000000p-1f

/* ---- kern_geluf: 2z = x * (C0 + C1 * x^2), C0 = 2 sqrt(2/pi), C1 = C0 * 0.044715. */
#define KN_GELU_C0 0x1.988454p+0f
#define KN_GELU_C1 0x1.2444f2p-4f

/* ---- kern_sincos_f64's constants (kmath.c states the algorithm; SIMD files repeat it). */
#define KN_PIO2_HI 0x1.921fb54442d18p+0     /* pi/2 = KN_PIO2_HI + KN_PIO2_MID to 107 bits */
#define KN_PIO2_MID 0x1.1a62633145c07p-54
#define KN_TWO_OVER_PI 0x1.45f306dc9c883p-1
#define KN_MAGIC_D 6755399441055744.0       /* 1.5 * 2^52: adding it rounds to an integer */
/* (-1)^n / (2n+1)! for n = 8 down to 1 (sin), (-1)^n / (2n)! for n = 8 down to 1 (cos),
 * as correctly rounded double divisions of exact integers. */
#define KN_SIN_COEFFS                                                                       \
    {1.0 / 355687428096000.0, -1.0 / 1307674368000.0, 1.0 / 6227020800.0, -1.0 / 39916800.0, \
     1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0}
#define KN_COS_COEFFS                                                                      \
    {1.0 / 20922789888000.0, -1.0 / 87178291200.0, 1.0 / 479001600.0, -1.0 / 3628800.0,    \
     1.0 / 40320.0, -1.0 / 720.0, 1.0 / 24.0, -1.0 / 2.0}

/* ---- the per-ISA tables (each defined in its own file). */
extern const struct kern_ops kern_ops_scalar;
#if defined(KERN_ARCH_X86)
extern const struct kern_ops kern_ops_avx2;
extern const struct kern_ops kern_ops_avx512;
#elif defined(KERN_ARCH_ARM)
extern const struct kern_ops kern_ops_neon;
#endif

/* Scalar kernels the SIMD tables may reuse. */
void kern_rope_scalar(const struct kern_rope *rope, float *x, int64_t x_stride, int64_t n_tok,
                      int64_t n_head, int64_t head_dim, const float *table);
void kern_rope_table_scalar(const struct kern_rope *rope, const int32_t *pos, int64_t n_tok,
                            float *table);
void kern_attn_scalar(const struct kern_attn_args *a, int64_t begin, int64_t end);
#if defined(KERN_ARCH_X86)
void kern_attn_avx2(const struct kern_attn_args *a, int64_t begin, int64_t end);
void kern_attn_avx512(const struct kern_attn_args *a, int64_t begin, int64_t end);
#elif defined(KERN_ARCH_ARM)
void kern_attn_neon(const struct kern_attn_args *a, int64_t begin, int64_t end);
#endif

#endif
