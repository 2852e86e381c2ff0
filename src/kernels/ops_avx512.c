/* ops_avx512.c: the elementwise kernels, softmax, RMSNorm and RoPE with AVX-512 (F, BW,
 * VL, DQ), bit for bit the reference in ops.c (docs/numerics.md). Tails use masked loads
 * and stores; a masked-off lane is never stored and never added into a kept sum. */
#if defined(__x86_64__)
#include "kmath_avx512.h"

/* y = f(x) over n floats, 16 at a time, with a masked tail. */
#define KN_MAP1(name, expr)                                                    \
    static void name(float *y, const float *x, int64_t n)                      \
    {                                                                          \
        int64_t i = 0;                                                         \
        for (; i + 16 <= n; i += 16) {                                         \
            __m512 v = _mm512_loadu_ps(x + i);                                 \
            _mm512_storeu_ps(y + i, (expr));                                   \
        }                                                                      \
        if (i < n) {                                                           \
            __mmask16 k = kn_mask16(n - i);                                    \
            __m512 v = _mm512_maskz_loadu_ps(k, x + i);                        \
            _mm512_mask_storeu_ps(y + i, k, (expr));                           \
        }                                                                      \
    }

/* y = f(a, b) over n floats. */
#define KN_MAP2(name, expr)                                                    \
    static void name(float *y, const float *a, const float *b, int64_t n)      \
    {                                                                          \
        int64_t i = 0;                                                         \
        for (; i + 16 <= n; i += 16) {                                         \
            __m512 va = _mm512_loadu_ps(a + i), vb = _mm512_loadu_ps(b + i);   \
            _mm512_storeu_ps(y + i, (expr));                                   \
        }                                                                      \
        if (i < n) {                                                           \
            __mmask16 k = kn_mask16(n - i);                                    \
            __m512 va = _mm512_maskz_loadu_ps(k, a + i);                       \
            __m512 vb = _mm512_maskz_loadu_ps(k, b + i);                       \
            _mm512_mask_storeu_ps(y + i, k, (expr));                           \
        }                                                                      \
    }

KN_MAP1(exp_avx512, kn_exp16(v))
KN_MAP1(silu_avx512, kn_silu16(v))
KN_MAP1(gelu_avx512, kn_gelu16(v))
KN_MAP2(add_avx512, _mm512_add_ps(va, vb))
KN_MAP2(mul_avx512, _mm512_mul_ps(va, vb))
KN_MAP2(swiglu_avx512, _mm512_mul_ps(kn_silu16(va), vb))
KN_MAP2(geglu_avx512, _mm512_mul_ps(kn_gelu16(va), vb))
KN_MAP2(swiglu_oai_avx512, kn_swiglu_oai16(va, vb))

static void scale_avx512(float *y, const float *x, float s, int64_t n)
{
    __m512 vs = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), vs));
    if (i < n) {
        __mmask16 k = kn_mask16(n - i);
        _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), vs));
    }
}

/* ---------------------------------------------------------------- softmax */

static float max_avx512(const float *x, int64_t n)
{
    __m512 vm = _mm512_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        vm = _mm512_max_ps(_mm512_loadu_ps(x + i), vm); /* x > m ? x : m: NaN skipped */
    if (i < n) {
        __mmask16 k = kn_mask16(n - i);
        vm = _mm512_mask_max_ps(vm, k, _mm512_maskz_loadu_ps(k, x + i), vm);
    }
    return _mm512_reduce_max_ps(vm) + 0.0f;
}

static float exp_sum_avx512(float *y, const float *x, float m, int64_t n)
{
    __m512 vm = _mm512_set1_ps(m), acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 e = kn_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        if (y)
            _mm512_storeu_ps(y + i, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (i < n) {
        __mmask16 k = kn_mask16(n - i);
        __m512 e = kn_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
        if (y)
            _mm512_mask_storeu_ps(y + i, k, e);
        acc = _mm512_mask_add_ps(acc, k, acc, e);
    }
    return kn_tree16v(acc);
}

static void softmax_avx512(float *y, const float *x, int64_t n)
{
    __m512 vs = _mm512_set1_ps(exp_sum_avx512(y, x, max_avx512(x, n), n));
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_div_ps(_mm512_loadu_ps(y + i), vs));
    if (i < n) {
        __mmask16 k = kn_mask16(n - i);
        _mm512_mask_storeu_ps(y + i, k, _mm512_div_ps(_mm512_maskz_loadu_ps(k, y + i), vs));
    }
}

static void log_softmax_avx512(float *y, const float *x, int64_t n)
{
    float m = max_avx512(x, n);
    float ls = kern_logf(exp_sum_avx512(NULL, x, m, n));
    __m512 vm = _mm512_set1_ps(m), vl = _mm512_set1_ps(ls);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_sub_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm), vl));
    if (i < n) {
        __mmask16 k = kn_mask16(n - i);
        _mm512_mask_storeu_ps(y + i, k,
                              _mm512_sub_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm), vl));
    }
}

/* ---------------------------------------------------------------- RMSNorm */

static void rmsnorm_avx512(float *y, int64_t y_stride, const float *x, int64_t x_stride,
                           const float *w, int64_t n_rows, int64_t n, float eps)
{
    for (int64_t row = 0; row < n_rows; row++) {
        const float *xr = x + row * x_stride;
        float *yr = y + row * y_stride;
        __m512 acc = _mm512_setzero_ps();
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            __m512 v = _mm512_loadu_ps(xr + i);
            acc = _mm512_fmadd_ps(v, v, acc);
        }
        if (i < n) {
            __mmask16 k = kn_mask16(n - i);
            __m512 v = _mm512_maskz_loadu_ps(k, xr + i);
            acc = _mm512_mask3_fmadd_ps(v, v, acc, k); /* masked-off lanes keep acc */
        }
        float mean = kn_tree16v(acc) / (float)n;
        float r = 1.0f / sqrtf(mean + eps);
        __m512 vr = _mm512_set1_ps(r);
        for (i = 0; i < n; i += 16) {
            __mmask16 k = kn_mask16(n - i < 16 ? n - i : 16);
            __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, xr + i), vr);
            if (w)
                v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(k, w + i));
            _mm512_mask_storeu_ps(yr + i, k, v);
        }
    }
}

/* ---------------------------------------------------------------- RoPE */

static void rope_avx512(const struct kern_rope *rope, float *x, int64_t x_stride, int64_t n_tok,
                        int64_t n_head, int64_t head_dim, const float *table)
{
    int64_t half = rope->n_rot / 2;
    /* interleaves a (lanes 0-7) and b (lanes 16-23 of the pair): a0 b0 a1 b1 ... */
    const __m512i inter = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int64_t t = 0; t < n_tok; t++) {
        const float *ct = table + t * 2 * half, *st = ct + half;
        for (int64_t h = 0; h < n_head; h++) {
            float *xh = x + t * x_stride + h * head_dim;
            if (rope->mode == KERN_ROPE_NEOX) {
                for (int64_t i = 0; i < half; i += 16) {
                    __mmask16 k = kn_mask16(half - i < 16 ? half - i : 16);
                    __m512 x0 = _mm512_maskz_loadu_ps(k, xh + i);
                    __m512 x1 = _mm512_maskz_loadu_ps(k, xh + i + half);
                    __m512 c = _mm512_maskz_loadu_ps(k, ct + i), s = _mm512_maskz_loadu_ps(k, st + i);
                    _mm512_mask_storeu_ps(xh + i, k, _mm512_fmsub_ps(x0, c, _mm512_mul_ps(x1, s)));
                    _mm512_mask_storeu_ps(xh + i + half, k, _mm512_fmadd_ps(x0, s, _mm512_mul_ps(x1, c)));
                }
            } else {
                /* as in ops_avx2.c: lane 2i fmaf(x0, c, x1 * -s), lane 2i+1 fmaf(x0, s, x1 * c) */
                for (int64_t i = 0; i < half; i += 8) {
                    int64_t np = half - i < 8 ? half - i : 8;
                    __mmask8 k8 = (__mmask8)((1u << np) - 1u);
                    __mmask16 k16 = kn_mask16(2 * np);
                    __m512 c = _mm512_castps256_ps512(_mm256_maskz_loadu_ps(k8, ct + i));
                    __m512 s = _mm512_castps256_ps512(_mm256_maskz_loadu_ps(k8, st + i));
                    __m512 cs = _mm512_permutex2var_ps(c, inter, s);
                    __m512 nsc = _mm512_permutex2var_ps(kn_neg16(s), inter, c);
                    __m512 v = _mm512_maskz_loadu_ps(k16, xh + 2 * i);
                    __m512 even = _mm512_moveldup_ps(v), odd = _mm512_movehdup_ps(v);
                    _mm512_mask_storeu_ps(xh + 2 * i, k16, _mm512_fmadd_ps(even, cs, _mm512_mul_ps(odd, nsc)));
                }
            }
        }
    }
}

static void rope_table_avx512(const struct kern_rope *rope, const int32_t *pos, int64_t n_tok,
                              float *table)
{
    int64_t half = rope->n_rot / 2;
    __m512d ms = _mm512_set1_pd(rope->mscale);
    for (int64_t t = 0; t < n_tok; t++) {
        assert(pos[t] >= 0);
        float *ct = table + t * 2 * half, *st = ct + half;
        __m512d pd = _mm512_set1_pd((double)pos[t]);
        for (int64_t i = 0; i < half; i += 8) {
            __mmask8 k = (__mmask8)((1u << (half - i < 8 ? half - i : 8)) - 1u);
            __m512d s, c;
            kn_sincos8(_mm512_mul_pd(pd, _mm512_maskz_loadu_pd(k, rope->freq + i)), &s, &c);
            _mm256_mask_storeu_ps(ct + i, k, _mm512_cvtpd_ps(_mm512_mul_pd(c, ms)));
            _mm256_mask_storeu_ps(st + i, k, _mm512_cvtpd_ps(_mm512_mul_pd(s, ms)));
        }
    }
}

const struct kern_ops kern_ops_avx512 = {
    .isa = KN_ISA_AVX512,
    .exp = exp_avx512,
    .add = add_avx512,
    .mul = mul_avx512,
    .scale = scale_avx512,
    .silu = silu_avx512,
    .swiglu = swiglu_avx512,
    .swiglu_oai = swiglu_oai_avx512,
    .gelu = gelu_avx512,
    .geglu = geglu_avx512,
    .softmax = softmax_avx512,
    .log_softmax = log_softmax_avx512,
    .rmsnorm = rmsnorm_avx512,
    .rope = rope_avx512,
    .rope_table = rope_table_avx512,
    .attn = kern_attn_avx512,
};
#endif
