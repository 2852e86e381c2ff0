/* kern_hd.h: the per-element and per-block rules of canonical-1 (docs/numerics.md) that
 * the CPU reference and the CUDA kernels share, as inline functions that compile both as
 * C17 and as CUDA (KN_HD from quant_hd.h: __host__ __device__ under nvcc). Each rule is
 * written once here: kmath.c's kern_expf / kern_exp_f64 / kern_tanhf, actq.c's rounding
 * and matmul.c's reference products call these functions, and so do the kernels of
 * src/cuda/kernels, so a GPU computes the reference's operations by construction.
 *
 * Arithmetic is spelled with KN_FMA / KN_MUL / KN_ADD / KN_DIV (and the double KN_D*):
 * plain fmaf, *, +, / in C (compiled with -ffp-contract=off), and __fmaf_rn, __fmul_rn,
 * __fadd_rn, __fdiv_rn in device code, which nvcc never fuses or reorders. Blocks are
 * read as bytes (any alignment) through the offsets below; the activation blocks'
 * floats and ints are 4-byte aligned (their sizes and the scratch are multiples of 4). */
#ifndef KN_KERNELS_KERN_HD_H
#define KN_KERNELS_KERN_HD_H

#include "../quant/quant_hd.h"

#if defined(__CUDA_ARCH__)
#define KN_FMA(a, b, c) __fmaf_rn((a), (b), (c))
#define KN_MUL(a, b) __fmul_rn((a), (b))
#define KN_ADD(a, b) __fadd_rn((a), (b))
#define KN_SUB(a, b) __fsub_rn((a), (b))
#define KN_DIV(a, b) __fdiv_rn((a), (b))
#define KN_SQRT(a) __fsqrt_rn(a)
#define KN_DFMA(a, b, c) __fma_rn((a), (b), (c))
#define KN_DMUL(a, b) __dmul_rn((a), (b))
#define KN_DADD(a, b) __dadd_rn((a), (b))
#define KN_DSUB(a, b) __dsub_rn((a), (b))
#define KN_DDIV(a, b) __ddiv_rn((a), (b))
#else
#include <math.h>
#define KN_FMA(a, b, c) fmaf((a), (b), (c))
#define KN_MUL(a, b) ((a) * (b))
#define KN_ADD(a, b) ((a) + (b))
#define KN_SUB(a, b) ((a) - (b))
#define KN_DIV(a, b) ((a) / (b))
#define KN_SQRT(a) sqrtf(a)
#define KN_DFMA(a, b, c) fma((a), (b), (c))
#define KN_DMUL(a, b) ((a) * (b))
#define KN_DADD(a, b) ((a) + (b))
#define KN_DSUB(a, b) ((a) - (b))
#define KN_DDIV(a, b) ((a) / (b))
#endif

/* ================================================================ kern_expf's constants */
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

/* kern_geluf: 2z = x * (C0 + C1 * x^2), C0 = 2 sqrt(2/pi), C1 = C0 * 0.044715. */
#define KN_GELU_C0 0x1.988454p+0f
#define KN_GELU_C1 0x1.2444f2p-4f

/* ================================================================ float math */

/* kern_expf (docs/numerics.md "kern_expf"): clamp, k = round(x / ln2) by the magic
 * constant, r = x - k ln2 in two fma steps, degree-7 Taylor by Horner, 2^k in two steps. */
KN_HD float kn_hd_expf(float x)
{
    if (x != x)
        return x;
    float xc = x < KN_EXP_LO ? KN_EXP_LO : x;
    xc = xc > KN_EXP_HI ? KN_EXP_HI : xc;
    float t = KN_ADD(KN_MUL(xc, KN_EXP_LOG2E), KN_EXP_MAGIC);
    float kf = KN_SUB(t, KN_EXP_MAGIC);
    float r = KN_FMA(-kf, KN_EXP_LN2_HI, xc);
    r = KN_FMA(-kf, KN_EXP_LN2_LO, r);
    float p = KN_EXP_C7;
    p = KN_FMA(p, r, KN_EXP_C6);
    p = KN_FMA(p, r, KN_EXP_C5);
    p = KN_FMA(p, r, KN_EXP_C4);
    p = KN_FMA(p, r, KN_EXP_C3);
    p = KN_FMA(p, r, KN_EXP_C2);
    p = KN_FMA(p, r, 1.0f);
    p = KN_FMA(p, r, 1.0f);
    int32_t k = (int32_t)kf;
    int32_t k1 = k >> 1, k2 = k - k1;
    float s1 = kn_hd_bits_f32((uint32_t)(k1 + 127) << 23);
    float s2 = kn_hd_bits_f32((uint32_t)(k2 + 127) << 23);
    return KN_MUL(KN_MUL(p, s1), s2);
}

KN_HD float kn_hd_siluf(float x)
{
    return KN_DIV(x, KN_ADD(1.0f, kn_hd_expf(-x)));
}

KN_HD float kn_hd_geluf(float x)
{
    float z2 = KN_MUL(x, KN_FMA(KN_MUL(x, x), KN_GELU_C1, KN_GELU_C0));
    return KN_DIV(x, KN_ADD(1.0f, kn_hd_expf(-z2)));
}

/* gpt-oss's clamped SwiGLU (ops.h kern_swiglu_oaif states the rule; these are its
 * constants, KERN_OAI_ALPHA and KERN_OAI_LIMIT there). */
#define KN_OAI_ALPHA 1.702f
#define KN_OAI_LIMIT 7.0f

KN_HD float kn_hd_swiglu_oaif(float g, float u)
{
    float x = KN_OAI_LIMIT < g ? KN_OAI_LIMIT : g;
    float y = KN_OAI_LIMIT < u ? KN_OAI_LIMIT : u;
    y = -KN_OAI_LIMIT > y ? -KN_OAI_LIMIT : y;
    float sig = KN_DIV(x, KN_ADD(1.0f, kn_hd_expf(-KN_MUL(KN_OAI_ALPHA, x))));
    return KN_MUL(sig, KN_ADD(y, 1.0f));
}

/* ================================================================ double math */

#define KN_LN2_D_HI 0x1.62e42fefa39efp-1
#define KN_LN2_D_LO 0x1.abc9e3b39803fp-56
#define KN_MAGIC_D 6755399441055744.0       /* 1.5 * 2^52: adding it rounds to an integer */

KN_HD double kn_hd_bits_f64(uint64_t u)
{
#if defined(__CUDA_ARCH__)
    return __longlong_as_double((long long)u);
#else
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
#endif
}

/* kern_exp_f64: k = round(x / ln2), r = x - k ln2 (two fma steps), Taylor to degree 13
 * (coefficients 1/n! as correctly rounded divisions, folded by the compiler), scaled by
 * 2^(k/2) then 2^(k - k/2). */
KN_HD double kn_hd_exp_f64(double x)
{
    if (x != x)
        return x;
    if (x > 710.0)
        return kn_hd_bits_f64(0x7ff0000000000000ull);
    if (x < -746.0)
        return 0.0;
    double kd = KN_DSUB(KN_DADD(KN_DMUL(x, 1.0 / KN_LN2_D_HI), KN_MAGIC_D), KN_MAGIC_D);
    double r = KN_DFMA(-kd, KN_LN2_D_HI, x);
    r = KN_DFMA(-kd, KN_LN2_D_LO, r);
    const double c[12] = {
        1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
        1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,
        1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,        1.0 / 2.0,
    };
    double p = c[0];
    for (int i = 1; i < 12; i++)
        p = KN_DFMA(p, r, c[i]);
    p = KN_DFMA(p, r, 1.0);
    p = KN_DFMA(p, r, 1.0);
    int64_t k = (int64_t)kd;
    int64_t k1 = k / 2, k2 = k - k1;
    return KN_DMUL(KN_DMUL(p, kn_hd_bits_f64((uint64_t)(k1 + 1023) << 52)),
                   kn_hd_bits_f64((uint64_t)(k2 + 1023) << 52));
}

/* kern_tanhf: x below 2^-12, +-1 above 20, else (e^2|x| - 1) / (e^2|x| + 1) in double,
 * sign restored, rounded to float once. */
KN_HD float kn_hd_tanhf(float x)
{
    if (x != x)
        return x;
    double ax = x < 0 ? -(double)x : (double)x;
    double t;
    if (ax < 0x1p-12)
        return x;
    if (ax > 20.0) {
        t = 1.0;
    } else {
        double e = kn_hd_exp_f64(KN_DMUL(2.0, ax));
        t = KN_DDIV(KN_DSUB(e, 1.0), KN_DADD(e, 1.0));
    }
    return (float)(x < 0 ? -t : t);
}

/* kern_softcapf: c * tanh(x * (1 / c)). */
KN_HD float kn_hd_softcapf(float x, float c)
{
    return KN_MUL(kn_hd_tanhf(KN_MUL(x, KN_DIV(1.0f, c))), c);
}

/* The canonical tree over 16 lanes: for w = 8, 4, 2, 1: acc[i] = acc[i] + acc[i + w]. */
KN_HD float kn_hd_tree16(float *acc)
{
    for (int w = 8; w >= 1; w /= 2)
        for (int i = 0; i < w; i++)
            acc[i] = KN_ADD(acc[i], acc[i + w]);
    return acc[0];
}

/* ================================================================ softmax, attention sinks */

/* The largest x (NaN skipped), with a zero made +0 so that no order of comparisons can
 * change a bit of what follows. */
KN_HD float kn_hd_softmax_max(const float *x, int64_t n)
{
    float m = -kn_hd_bits_f32(0x7f800000u);
    for (int64_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return KN_ADD(m, 0.0f);
}

/* The max, then e[i] = exp(x[i] - max) stored in y, and their canonical sum (lane i % 16,
 * then the tree). In place allowed. */
KN_HD float kn_hd_softmax_exp_sum(float *y, const float *x, int64_t n)
{
    float m = kn_hd_softmax_max(x, n);
    float acc[16] = {0};
    for (int64_t i = 0; i < n; i++) {
        y[i] = kn_hd_expf(KN_SUB(x[i], m));
        acc[i % 16] = KN_ADD(acc[i % 16], y[i]);
    }
    return kn_hd_tree16(acc);
}

/* kern_softmax: y = e / s. In place allowed. */
KN_HD void kn_hd_softmax(float *y, const float *x, int64_t n)
{
    float s = kn_hd_softmax_exp_sum(y, x, n);
    for (int64_t i = 0; i < n; i++)
        y[i] = KN_DIV(y[i], s);
}

/* The first key position a query at position p reads (ops.h kern_attn_args.window): 0,
 * or with a window w > 0, max(0, p - w + 1) (llama.cpp's SWA "standard"). */
KN_HD int64_t kn_hd_attn_first_key(int64_t p, int64_t window)
{
    return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

/* The attention sink's merge (ops.h kern_attn_args.sinks) into the running (m, l) of a
 * (query, head) pair: m' = max(m, sink), a = exp(m - m'), l = l * a + exp(sink - m');
 * returns a, which the caller multiplies every o[d] by. */
KN_HD float kn_hd_attn_sink(float sink, float *m, float *l)
{
    float mn = sink > *m ? sink : *m;
    float a = kn_hd_expf(KN_SUB(*m, mn)), b = kn_hd_expf(KN_SUB(sink, mn));
    *l = KN_ADD(KN_MUL(*l, a), b);
    *m = mn;
    return a;
}

/* ================================================================ mixture-of-experts routing
 * (ops.h kern_moe_route states the rule; these are its limits and gating codes, which
 * ops.h's KERN_MOE_* names are). */
#define KN_MOE_MAX_EXPERTS 512
#define KN_MOE_NORM_MIN 6.103515625e-5f
#define KN_MOE_SOFTMAX 0
#define KN_MOE_SIGMOID 1
#define KN_MOE_SOFTMAX_WEIGHT 2

/* One token's routing: l (n) router logits, bias (n) or NULL -> id (k), wt (k). */
KN_HD void kn_hd_moe_route_row(int gating, int32_t n, int32_t k, int norm, float scale,
                               const float *l, const float *bias, int32_t *id, float *wt)
{
    float p[KN_MOE_MAX_EXPERTS], sel[KN_MOE_MAX_EXPERTS];
    unsigned char taken[KN_MOE_MAX_EXPERTS];
    if (gating == KN_MOE_SOFTMAX)
        kn_hd_softmax(p, l, n);
    else if (gating == KN_MOE_SOFTMAX_WEIGHT)
        for (int32_t i = 0; i < n; i++)
            p[i] = l[i];
    else
        for (int32_t i = 0; i < n; i++)
            p[i] = KN_DIV(1.0f, KN_ADD(1.0f, kn_hd_expf(-l[i])));
    for (int32_t i = 0; i < n; i++) {
        sel[i] = bias ? KN_ADD(p[i], bias[i]) : p[i];
        taken[i] = 0;
    }
    for (int32_t r = 0; r < k; r++) {
        int32_t best = -1;
        /* strictly greater: an equal score later in the scan keeps the lower index; a NaN
         * score is never chosen over a number */
        for (int32_t i = 0; i < n; i++)
            if (!taken[i] && (best < 0 || sel[i] > sel[best] || (sel[best] != sel[best] && sel[i] == sel[i])))
                best = i;
        taken[best] = 1;
        id[r] = best;
        wt[r] = p[best];
    }
    if (gating == KN_MOE_SOFTMAX_WEIGHT) /* gpt-oss: over the chosen logits */
        kn_hd_softmax(wt, wt, k);
    if (norm) {
        float sum = wt[0];
        for (int32_t r = 1; r < k; r++)
            sum = KN_ADD(sum, wt[r]);
        if (!(sum >= KN_MOE_NORM_MIN))
            sum = KN_MOE_NORM_MIN;
        for (int32_t r = 0; r < k; r++)
            wt[r] = KN_DIV(wt[r], sum);
    }
    if (scale != 1.0f)
        for (int32_t r = 0; r < k; r++)
            wt[r] = KN_MUL(wt[r], scale);
}

/* Groups the R = T * k (token, rank) pairs of ids (R) by expert, tokens in order (a
 * counting sort): expert e's grouped rows are off[e] .. off[e + 1] - 1 (off: n_expert + 1),
 * grouped row j holds pair row_of[j] (= t * k + r), pair i sits at grouped row slot[i]. */
KN_HD void kn_hd_moe_group(const int32_t *ids, int64_t R, int64_t n_expert, int64_t *off,
                           int64_t *row_of, int64_t *slot)
{
    for (int64_t e = 0; e <= n_expert; e++)
        off[e] = 0;
    for (int64_t i = 0; i < R; i++)
        off[ids[i] + 1]++;
    for (int64_t e = 0; e < n_expert; e++)
        off[e + 1] += off[e];
    for (int64_t i = 0; i < R; i++) {
        int64_t j = off[ids[i]]++;
        row_of[j] = i;
        slot[i] = j;
    }
    for (int64_t e = n_expert; e > 0; e--)
        off[e] = off[e - 1];
    off[0] = 0;
}

/* ================================================================ activation quantization */

/* |x| by clearing the sign bit. */
KN_HD float kn_hd_absf(float x)
{
    return kn_hd_bits_f32(kn_hd_f32_bits(x) & 0x7fffffffu);
}

/* v rounded to the nearest integer, ties to even, clamped to [-127, 127]; NaN -> 0. */
KN_HD int kn_hd_round_q(float v)
{
    if (v != v)
        return 0;
    if (v > 127.0f)
        v = 127.0f;
    if (v < -127.0f)
        v = -127.0f;
    float r = KN_SUB(KN_ADD(v, 12582912.0f), 12582912.0f);
    return (int)r;
}

/* Quantizes n values with one scale (docs/numerics.md "Activation quantization"): amax
 * over the bits of |x| (NaN never compares greater), d = amax / 127, q = round(x * (127 /
 * amax)). Returns d. */
KN_HD float kn_hd_quantize_block(const float *x, int n, int8_t *q)
{
    float amax = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = kn_hd_absf(x[i]);
        if (a > amax)
            amax = a;
    }
    float d = KN_DIV(amax, 127.0f);
    float id = amax > 0.0f ? KN_DIV(127.0f, amax) : 0.0f;
    for (int i = 0; i < n; i++)
        q[i] = (int8_t)kn_hd_round_q(KN_MUL(x[i], id));
    return d;
}

/* The two activation block layouts (kernels.h struct kern_block_q8f, quant.h block_q8_K). */
#define KN_Q8F_BYTES 40   /* float d; int32 s; int8 qs[32] */
#define KN_Q8F_S 4
#define KN_Q8F_QS 8
#define KN_Q8K_BYTES 292  /* float d; int8 qs[256]; int16 bsums[16] */
#define KN_Q8K_QS 4
#define KN_Q8K_BSUMS 260

/* The 4-byte word at p, 4-byte aligned (an activation block's float or int32): one load
 * on the GPU, where quant_hd.h's kn_hd_u32 (any alignment) takes four; the float is its
 * bits (kn_hd_bits_f32), the int32 its cast. */
KN_HD uint32_t kn_hd_ld32(const uint8_t *p)
{
#if defined(__CUDA_ARCH__)
    return *(const uint32_t *)p;
#else
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return u;
#endif
}
/* Stores the 4-byte word u at p, 4-byte aligned (one store on the GPU). */
KN_HD void kn_hd_st32(uint8_t *p, uint32_t u)
{
#if defined(__CUDA_ARCH__)
    *(uint32_t *)p = u;
#else
    memcpy(p, &u, sizeof u);
#endif
}
/* Stores the 2-byte u at p, 2-byte aligned (a Q8_K block's bsums). */
KN_HD void kn_hd_st16(uint8_t *p, uint16_t u)
{
#if defined(__CUDA_ARCH__)
    *(uint16_t *)p = u;
#else
    memcpy(p, &u, sizeof u);
#endif
}
KN_HD float kn_hd_ld_f32(const uint8_t *p)
{
    return kn_hd_bits_f32(kn_hd_ld32(p));
}
KN_HD int32_t kn_hd_bsum(const uint8_t *xb, int i)
{
    return (int16_t)kn_hd_u16(xb + KN_Q8K_BSUMS + 2 * i);
}

/* ================================================================ exact integer sums */

/* sum_i a[i] * b[i] over n signed bytes (n a multiple of 4; a and b 4-byte aligned): a
 * plain loop on the host (the compiler vectorizes it), __dp4a on words on the GPU. The
 * sum is exact either way. */
KN_HD int32_t kn_hd_dot_i8(const int8_t *a, const int8_t *b, int n)
{
    int32_t s = 0;
#if defined(__CUDA_ARCH__)
    for (int j = 0; j < n / 4; j++)
        s = __dp4a(((const int *)a)[j], ((const int *)b)[j], s);
#else
    for (int i = 0; i < n; i++)
        s += (int32_t)a[i] * b[i];
#endif
    return s;
}

/* A block's weight values, unpacked, 4-byte aligned for kn_hd_dot_i8. */
typedef union {
    uint32_t w[8];
    int8_t v[32];
} kn_hd_v32;

/* ================================================================ one weight block
 * Each weight type's step for one weight block at w (the file's layout, any alignment)
 * against its activation block at x (Q8_32 or Q8_K, 4-byte aligned) is two parts
 * (docs/numerics.md "Quantized weights"):
 *   kn_hd_int_<type>(w, x): the exact integer part (the weights unpacked to integers and
 *     their sums against x.qs): isum, and imin for the formats whose minimum is an
 *     integer sum over x.bsums (Q2_K, Q4_K, Q5_K);
 *   kn_hd_flt_<type>(w, x, ip, acc): the float steps in their order, from the block's
 *     scales, x's and the integer part.
 * kn_hd_blk_<type>(w, x, acc) = kn_hd_flt_<type>(w, x, kn_hd_int_<type>(w, x), acc) is
 * the reference's step; the CPU reference calls it, the CUDA kernels call it or its two
 * parts apart (the integer parts of a row on many threads, then the float chain in block
 * order on one), so every path computes the same operations. */

/* The integer part of one block's product. */
struct kn_hd_ip {
    int32_t isum, imin;
};

/* The 32-blocks' float steps: acc = fma(dw * dx, isum, acc) (dw the block's scale), and
 * for Q4_1 / Q5_1 (f16 d and m at w) then acc = fma(m * dx, (float)x.s, acc): x.s is the
 * activation's integer sum. */
KN_HD float kn_hd_step_d(float dw, const uint8_t *x, int32_t isum, float acc)
{
    return KN_FMA(KN_MUL(dw, kn_hd_ld_f32(x)), (float)isum, acc);
}
KN_HD float kn_hd_step_dm(const uint8_t *w, const uint8_t *x, int32_t isum, float acc)
{
    float dx = kn_hd_ld_f32(x);
    acc = KN_FMA(KN_MUL(kn_hd_f16_to_f32(kn_hd_u16(w)), dx), (float)isum, acc);
    return KN_FMA(KN_MUL(kn_hd_f16_to_f32(kn_hd_u16(w + 2)), dx),
                  (float)(int32_t)kn_hd_ld32(x + KN_Q8F_S), acc);
}
/* The K-quants with a minimum (f16 d at dp, dmin at dp + 2): acc = fma(d * dx, isum, acc),
 * then acc = fma(-(dmin * dx), imin, acc). */
KN_HD float kn_hd_step_dmin(const uint8_t *dp, const uint8_t *x, struct kn_hd_ip ip, float acc)
{
    float dx = kn_hd_ld_f32(x);
    acc = KN_FMA(KN_MUL(kn_hd_f16_to_f32(kn_hd_u16(dp)), dx), (float)ip.isum, acc);
    return KN_FMA(-KN_MUL(kn_hd_f16_to_f32(kn_hd_u16(dp + 2)), dx), (float)ip.imin, acc);
}

/* An integer part of isum alone. */
KN_HD struct kn_hd_ip kn_hd_ip1(int32_t isum)
{
    struct kn_hd_ip ip = {isum, 0};
    return ip;
}

/* Nibbles of 16 bytes: v[i] = low nibble of qs[i], v[i + 16] = high nibble (plus bit
 * i / i + 16 of qh as bit 4 for the 5-bit formats), minus off. */
KN_HD void kn_hd_nib32(kn_hd_v32 *u, const uint8_t *qs, uint32_t qh, int off)
{
    for (int i = 0; i < 16; i++) {
        u->v[i] = (int8_t)((int)((qs[i] & 15) | ((qh >> i) & 1) << 4) - off);
        u->v[i + 16] = (int8_t)((int)((qs[i] >> 4) | ((qh >> (i + 16)) & 1) << 4) - off);
    }
}

/* The 32 unpacked values against the activation block's 32. */
KN_HD struct kn_hd_ip kn_hd_ip32(const kn_hd_v32 *u, const uint8_t *x)
{
    return kn_hd_ip1(kn_hd_dot_i8(u->v, (const int8_t *)(x + KN_Q8F_QS), 32));
}

KN_HD struct kn_hd_ip kn_hd_int_q8_0(const uint8_t *w, const uint8_t *x)
{
    kn_hd_v32 u;
    for (int i = 0; i < 32; i++)
        u.v[i] = (int8_t)w[2 + i];
    return kn_hd_ip32(&u, x);
}
KN_HD float kn_hd_flt_q8_0(const uint8_t *w, const uint8_t *x, struct kn_hd_ip ip, float acc)
{
    return kn_hd_step_d(kn_hd_f16_to_f32(kn_hd_u16(w)), x, ip.isum, acc);
}

KN_HD struct kn_hd_ip kn_hd_int_q4_0(const uint8_t *w, const uint8_t *x)
{
    kn_hd_v32 u;
    kn_hd_nib32(&u, w + 2, 0, 8);
    return kn_hd_ip32(&u, x);
}
#define kn_hd_flt_q4_0 kn_hd_flt_q8_0 /* f16 d @0, then isum */

KN_HD struct kn_hd_ip kn_hd_int_q4_1(const uint8_t *w, const uint8_t *x)
{
    kn_hd_v32 u;
    kn_hd_nib32(&u, w + 4, 0, 0);
    return kn_hd_ip32(&u, x);
}
KN_HD float kn_hd_flt_q4_1(const uint8_t *w, const uint8_t *x, struct kn_hd_ip ip, float acc)
{
    return kn_hd_step_dm(w, x, ip.isum, acc);
}

KN_HD struct kn_hd_ip kn_hd_int_q5_0(const uint8_t *w, const uint8_t *x)
{
    kn_hd_v32 u;
    kn_hd_nib32(&u, w + 6, kn_hd_u32(w + 2), 16);
    return kn_hd_ip32(&u, x);
}
#define kn_hd_flt_q5_0 kn_hd_flt_q8_0

KN_HD struct kn_hd_ip kn_hd_int_q5_1(const uint8_t *w, const uint8_t *x)
{
    kn_hd_v32 u;
    kn_hd_nib32(&u, w + 8, kn_hd_u32(w + 4), 0);
    return kn_hd_ip32(&u, x);
}
#define kn_hd_flt_q5_1 kn_hd_flt_q4_1

/* 32 nibbles of 16 bytes through a level table (IQ4_NL, MXFP4, IQ4_XS): low nibbles
 * first, then the high ones. */
KN_HD void kn_hd_lut32(kn_hd_v32 *u, const int8_t *lut, const uint8_t *qs)
{
    for (int i = 0; i < 16; i++) {
        u->v[i] = lut[qs[i] & 15];
        u->v[i + 16] = lut[qs[i] >> 4];
    }
}

KN_HD struct kn_hd_ip kn_hd_int_iq4_nl(const uint8_t *w, const uint8_t *x)
{
    const int8_t lut[16] = KN_IQ4NL_LEVELS;
    kn_hd_v32 u;
    kn_hd_lut32(&u, lut, w + 2);
    return kn_hd_ip32(&u, x);
}
#define kn_hd_flt_iq4_nl kn_hd_flt_q8_0

KN_HD struct kn_hd_ip kn_hd_int_mxfp4(const uint8_t *w, const uint8_t *x)
{
    const int8_t lut[16] = KN_MXFP4_VALUES;
    kn_hd_v32 u;
    kn_hd_lut32(&u, lut, w + 1);
    return kn_hd_ip32(&u, x);
}
KN_HD float kn_hd_flt_mxfp4(const uint8_t *w, const uint8_t *x, struct kn_hd_ip ip, float acc)
{
    return kn_hd_step_d(kn_hd_e8m0_half(w[0]), x, ip.isum, acc);
}

/* ---- K-quants: 256-blocks against Q8_K; x's qs of sub-block i at x + KN_Q8K_QS + 16i */

/* Q4_K / Q5_K: d, dmin @0, scales[12] @4, (Q5_K: qh[32] @16), qs[128] @16 or @48;
 * sub-block j (32 values) is nibble j % 2 of qs[32 (j / 2) + l] (+ bit j of qh[l]). */
KN_HD struct kn_hd_ip kn_hd_int_k45(const uint8_t *w, const uint8_t *x, int q5)
{
    const uint8_t *sc = w + 4, *qh = w + 16, *qs = w + (q5 ? 48 : 16);
    const int8_t *xq = (const int8_t *)(x + KN_Q8K_QS);
    struct kn_hd_ip ip = {0, 0};
    for (int j = 0; j < 8; j++) {
        int s, m;
        kn_hd_k4_scale_min(sc, j, &s, &m);
        const uint8_t *q = qs + 32 * (j / 2);
        int shift = (j & 1) * 4;
        kn_hd_v32 u;
        for (int l = 0; l < 32; l++)
            u.v[l] = (int8_t)(((q[l] >> shift) & 15) | (q5 ? ((qh[l] >> j) & 1) << 4 : 0));
        ip.isum += s * kn_hd_dot_i8(u.v, xq + 32 * j, 32);
        ip.imin += m * (kn_hd_bsum(x, 2 * j) + kn_hd_bsum(x, 2 * j + 1));
    }
    return ip;
}
KN_HD struct kn_hd_ip kn_hd_int_q4_k(const uint8_t *w, const uint8_t *x)
{
    return kn_hd_int_k45(w, x, 0);
}
KN_HD struct kn_hd_ip kn_hd_int_q5_k(const uint8_t *w, const uint8_t *x)
{
    return kn_hd_int_k45(w, x, 1);
}
KN_HD float kn_hd_flt_q4_k(const uint8_t *w, const uint8_t *x, struct kn_hd_ip ip, float acc)
{
    return kn_hd_step_dmin(w, x, ip, acc);
}
#define kn_hd_flt_q5_k kn_hd_flt_q4_k

/* Q6_K: ql[128] @0, qh[64] @128, scales[16] (int8) @192, d @208. Element e = 128h + 32t
 * + l: ((ql[64h + 32(t & 1) + l] >> 4(t >> 1)) & 15) | ((qh[32h + l] >> 2t) & 3) << 4,
 * minus 32; sub-block i = e / 16. */
KN_HD struct kn_hd_ip kn_hd_int_q6_k(const uint8_t *w, const uint8_t *x)
{
    const uint8_t *ql = w, *qh = w + 128;
    const int8_t *xq = (const int8_t *)(x + KN_Q8K_QS);
    int32_t isum = 0;
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < 4; t++) {
            kn_hd_v32 u;
            for (int l = 0; l < 32; l++)
                u.v[l] = (int8_t)((int)(((ql[64 * h + 32 * (t & 1) + l] >> (4 * (t >> 1))) & 15) |
                                        ((qh[32 * h + l] >> (2 * t)) & 3) << 4) - 32);
            int i = 8 * h + 2 * t; /* sub-blocks i and i + 1 */
            isum += (int8_t)w[192 + i] * kn_hd_dot_i8(u.v, xq + 16 * i, 16);
            isum += (int8_t)w[193 + i] * kn_hd_dot_i8(u.v + 16, xq + 16 * i + 16, 16);
        }
    return kn_hd_ip1(isum);
}
KN_HD float kn_hd_flt_q6_k(const uint8_t *w, const uint8_t *x, struct kn_hd_ip ip, float acc)
{
    return kn_hd_step_d(kn_hd_f16_to_f32(kn_hd_u16(w + 208)), x, ip.isum, acc);
}

/* Q2_K: scales[16] @0, qs[64] @16, d @80, dmin @82; element e = 128h + 32t + l is
 * (qs[32h + l] >> 2t) & 3. */
KN_HD struct kn_hd_ip kn_hd_int_q2_k(const uint8_t *w, const uint8_t *x)
{
    const uint8_t *qs = w + 16;
    const int8_t *xq = (const int8_t *)(x + KN_Q8K_QS);
    struct kn_hd_ip ip = {0, 0};
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < 4; t++) {
            kn_hd_v32 u;
            for (int l = 0; l < 32; l++)
                u.v[l] = (int8_t)((qs[32 * h + l] >> (2 * t)) & 3);
            int i = 8 * h + 2 * t;
            ip.isum += (w[i] & 15) * kn_hd_dot_i8(u.v, xq + 16 * i, 16);
            ip.isum += (w[i + 1] & 15) * kn_hd_dot_i8(u.v + 16, xq + 16 * i + 16, 16);
        }
    for (int i = 0; i < 16; i++)
        ip.imin += (w[i] >> 4) * kn_hd_bsum(x, i);
    return ip;
}
KN_HD float kn_hd_flt_q2_k(const uint8_t *w, const uint8_t *x, struct kn_hd_ip ip, float acc)
{
    return kn_hd_step_dmin(w + 80, x, ip, acc);
}

/* Q3_K: hmask[32] @0, qs[64] @32, scales[12] @96, d @108; element e = 128h + 32t + l is
 * ((qs[32h + l] >> 2t) & 3) | ((hmask[l] >> (4h + t)) & 1) << 2, minus 4. */
KN_HD struct kn_hd_ip kn_hd_int_q3_k(const uint8_t *w, const uint8_t *x)
{
    const uint8_t *hm = w, *qs = w + 32, *sc = w + 96;
    const int8_t *xq = (const int8_t *)(x + KN_Q8K_QS);
    int32_t isum = 0;
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < 4; t++) {
            kn_hd_v32 u;
            for (int l = 0; l < 32; l++)
                u.v[l] = (int8_t)((int)(((qs[32 * h + l] >> (2 * t)) & 3) |
                                        ((hm[l] >> (4 * h + t)) & 1) << 2) - 4);
            int i = 8 * h + 2 * t;
            isum += kn_hd_q3k_scale(sc, i) * kn_hd_dot_i8(u.v, xq + 16 * i, 16);
            isum += kn_hd_q3k_scale(sc, i + 1) * kn_hd_dot_i8(u.v + 16, xq + 16 * i + 16, 16);
        }
    return kn_hd_ip1(isum);
}
KN_HD float kn_hd_flt_q3_k(const uint8_t *w, const uint8_t *x, struct kn_hd_ip ip, float acc)
{
    return kn_hd_step_d(kn_hd_f16_to_f32(kn_hd_u16(w + 108)), x, ip.isum, acc);
}

/* IQ4_XS: d @0, scales_h @2, scales_l[4] @4, qs[128] @8; sub-block j is 16 bytes of qs. */
KN_HD struct kn_hd_ip kn_hd_int_iq4_xs(const uint8_t *w, const uint8_t *x)
{
    const int8_t lut[16] = KN_IQ4NL_LEVELS;
    uint32_t sh = kn_hd_u16(w + 2);
    const int8_t *xq = (const int8_t *)(x + KN_Q8K_QS);
    int32_t isum = 0;
    for (int j = 0; j < 8; j++) {
        kn_hd_v32 u;
        kn_hd_lut32(&u, lut, w + 8 + 16 * j);
        isum += kn_hd_iq4xs_scale(sh, w + 4, j) * kn_hd_dot_i8(u.v, xq + 32 * j, 32);
    }
    return kn_hd_ip1(isum);
}
#define kn_hd_flt_iq4_xs kn_hd_flt_q8_0 /* f16 d @0, then isum */

/* The reference's step of each type: its integer part, then its float steps. */
#define KN_HD_BLK(name)                                                                      \
    KN_HD float kn_hd_blk_##name(const uint8_t *w, const uint8_t *x, float acc)              \
    {                                                                                        \
        return kn_hd_flt_##name(w, x, kn_hd_int_##name(w, x), acc);                          \
    }
KN_HD_BLK(q8_0)
KN_HD_BLK(q4_0)
KN_HD_BLK(q4_1)
KN_HD_BLK(q5_0)
KN_HD_BLK(q5_1)
KN_HD_BLK(iq4_nl)
KN_HD_BLK(mxfp4)
KN_HD_BLK(q2_k)
KN_HD_BLK(q3_k)
KN_HD_BLK(q4_k)
KN_HD_BLK(q5_k)
KN_HD_BLK(q6_k)
KN_HD_BLK(iq4_xs)
#undef KN_HD_BLK

#endif
