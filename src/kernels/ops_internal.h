/* ops_internal.h: what the ops files share and nothing else sees: the canonical f32
 * reduction tree (docs/numerics.md "canonical sum"), the constants of Kinetic's own
 * math, and the per-ISA kernel tables. */
#ifndef KN_KERNELS_OPS_INTERNAL_H
#define KN_KERNELS_OPS_INTERNAL_H

#include <math.h>
#include <string.h>

#include "kern_hd.h"
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
    return kn_hd_attn_sink(sink, m, l); /* kern_hd.h, shared with CUDA */
}

#define KERN_ATTN_GMAX 8 /* query heads of one kv head the SIMD attention computes together */

/* One query's running state (attn.c: m, l, o) for a block of heads. */
struct kern_attn_qstate {
    float o[KERN_ATTN_GMAX][KERN_ATTN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float m[KERN_ATTN_GMAX], l[KERN_ATTN_GMAX];
};

/* The SIMD attention's blocks of (query, head) pairs [begin, end) (pair idx = t * n_head +
 * h): up to KERN_ATTN_GMAX query heads that share a kv head, for up to qb consecutive
 * queries where the range holds those queries whole (prefill: each K and V tile then
 * serves them all); the heads of a query the range holds in part, one query at a time.
 * Each pair is in exactly one block; a pair's arithmetic does not depend on its block. */
struct kern_attn_iter {
    int64_t idx, end; /* the next pair not yet in a block, and the range's end */
    int64_t t, nq, h0; /* the whole queries [t, t + nq) being given out, their next head */
};

static inline bool kern_attn_next(const struct kern_attn_args *a, struct kern_attn_iter *it,
                                  int64_t qb, int64_t *t, int64_t *nq, int64_t *h0,
                                  int64_t *nh)
{
    const int64_t H = a->n_head, group = H / a->n_head_kv, gmax = KERN_ATTN_GMAX;
    if (it->nq == 0) {
        if (it->idx >= it->end)
            return false;
        int64_t tt = it->idx / H, hh = it->idx % H;
        if (hh != 0 || (tt + 1) * H > it->end) { /* part of one query */
            int64_t n = (hh / group + 1) * group - hh;
            n = n < it->end - it->idx ? n : it->end - it->idx;
            *t = tt, *nq = 1, *h0 = hh, *nh = n < gmax ? n : gmax;
            it->idx += *nh;
            return true;
        }
        it->t = tt, it->h0 = 0;
        it->nq = (it->end - it->idx) / H < qb ? (it->end - it->idx) / H : qb;
    }
    int64_t n = (it->h0 / group + 1) * group - it->h0;
    *t = it->t, *nq = it->nq, *h0 = it->h0, *nh = n < gmax ? n : gmax;
    it->h0 += *nh;
    if (it->h0 == H) {
        it->idx += it->nq * H;
        it->nq = 0;
    }
    return true;
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

/* ---- kern_expf's and kern_geluf's constants: kern_hd.h (shared with the CUDA kernels). */

/* ---- kern_sincos_f64's constants (kmath.c states the algorithm; SIMD files repeat it). */
#define KN_PIO2_HI 0x1.921fb54442d18p+0     /* pi/2 = KN_PIO2_HI + KN_PIO2_MID to 107 bits */
#define KN_PIO2_MID 0x1.1a62633145c07p-54
#define KN_TWO_OVER_PI 0x1.45f306dc9c883p-1
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
#if defined(KN_ARCH_X86)
extern const struct kern_ops kern_ops_avx2;
extern const struct kern_ops kern_ops_avx512;
#elif defined(KN_ARCH_ARM)
extern const struct kern_ops kern_ops_neon;
#endif

/* Scalar kernels the SIMD tables may reuse. */
void kern_rope_scalar(const struct kern_rope *rope, float *x, int64_t x_stride, int64_t n_tok,
                      int64_t n_head, int64_t head_dim, const float *table);
void kern_rope_table_scalar(const struct kern_rope *rope, const int32_t *pos, int64_t n_tok,
                            float *table);
void kern_attn_scalar(const struct kern_attn_args *a, int64_t begin, int64_t end);
#if defined(KN_ARCH_X86)
void kern_attn_avx2(const struct kern_attn_args *a, int64_t begin, int64_t end);
void kern_attn_avx512(const struct kern_attn_args *a, int64_t begin, int64_t end);
#elif defined(KN_ARCH_ARM)
void kern_attn_neon(const struct kern_attn_args *a, int64_t begin, int64_t end);
#endif

#endif
