/* ops_avx2.c: the elementwise kernels, softmax, RMSNorm and RoPE with AVX2 + FMA, bit for
 * bit the reference in ops.c (docs/numerics.md). Element i of every result goes through
 * the same operations as in the reference; vector tails run the reference's scalar code. */
#if defined(__x86_64__)
#include "kmath_avx2.h"

static void exp_avx2(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, kn_exp8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        y[i] = kern_expf(x[i]);
}

static void add_avx2(float *y, const float *a, const float *b, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++)
        y[i] = a[i] + b[i];
}

static void mul_avx2(float *y, const float *a, const float *b, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    for (; i < n; i++)
        y[i] = a[i] * b[i];
}

static void scale_avx2(float *y, const float *x, float s, int64_t n)
{
    __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
    for (; i < n; i++)
        y[i] = x[i] * s;
}

static void silu_avx2(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, kn_silu8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        y[i] = kern_siluf(x[i]);
}

static void swiglu_avx2(float *y, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(kn_silu8(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
    for (; i < n; i++)
        y[i] = kern_siluf(g[i]) * u[i];
}

static void swiglu_oai_avx2(float *y, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, kn_swiglu_oai8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    for (; i < n; i++)
        y[i] = kern_swiglu_oaif(g[i], u[i]);
}

static void gelu_avx2(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, kn_gelu8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++)
        y[i] = kern_geluf(x[i]);
}

static void geglu_avx2(float *y, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(kn_gelu8(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
    for (; i < n; i++)
        y[i] = kern_geluf(g[i]) * u[i];
}

/* ---------------------------------------------------------------- softmax */

static float max_avx2(const float *x, int64_t n)
{
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        vm = _mm256_max_ps(_mm256_loadu_ps(x + i), vm); /* x > m ? x : m: NaN skipped */
    float m = kn_hmax8(vm);
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m + 0.0f;
}

/* Canonical sum of exp(x - m); the exps are stored in y when y is not NULL. */
static float exp_sum_avx2(float *y, const float *x, float m, int64_t n)
{
    __m256 vm = _mm256_set1_ps(m), lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 e0 = kn_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        __m256 e1 = kn_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm));
        if (y) {
            _mm256_storeu_ps(y + i, e0);
            _mm256_storeu_ps(y + i + 8, e1);
        }
        lo = _mm256_add_ps(lo, e0);
        hi = _mm256_add_ps(hi, e1);
    }
    float acc[KN_LANES];
    _mm256_storeu_ps(acc, lo);
    _mm256_storeu_ps(acc + 8, hi);
    for (; i < n; i++) {
        float e = kern_expf(x[i] - m);
        if (y)
            y[i] = e;
        acc[i % KN_LANES] += e;
    }
    return kn_tree16(acc);
}

static void softmax_avx2(float *y, const float *x, int64_t n)
{
    float s = exp_sum_avx2(y, x, max_avx2(x, n), n);
    __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_div_ps(_mm256_loadu_ps(y + i), vs));
    for (; i < n; i++)
        y[i] = y[i] / s;
}

static void log_softmax_avx2(float *y, const float *x, int64_t n)
{
    float m = max_avx2(x, n);
    float ls = kern_logf(exp_sum_avx2(NULL, x, m, n));
    __m256 vm = _mm256_set1_ps(m), vl = _mm256_set1_ps(ls);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vl));
    for (; i < n; i++)
        y[i] = (x[i] - m) - ls;
}

/* ---------------------------------------------------------------- RMSNorm */

static void rmsnorm_avx2(float *y, int64_t y_stride, const float *x, int64_t x_stride,
                         const float *w, int64_t n_rows, int64_t n, float eps)
{
    for (int64_t row = 0; row < n_rows; row++) {
        const float *xr = x + row * x_stride;
        float *yr = y + row * y_stride;
        __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            __m256 a = _mm256_loadu_ps(xr + i), b = _mm256_loadu_ps(xr + i + 8);
            lo = _mm256_fmadd_ps(a, a, lo);
            hi = _mm256_fmadd_ps(b, b, hi);
        }
        float acc[KN_LANES];
        _mm256_storeu_ps(acc, lo);
        _mm256_storeu_ps(acc + 8, hi);
        for (; i < n; i++)
            acc[i % KN_LANES] = fmaf(xr[i], xr[i], acc[i % KN_LANES]);
        float mean = kn_tree16(acc) / (float)n;
        float r = 1.0f / sqrtf(mean + eps);
        __m256 vr = _mm256_set1_ps(r);
        i = 0;
        if (w) {
            for (; i + 8 <= n; i += 8)
                _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + i), vr),
                                                       _mm256_loadu_ps(w + i)));
            for (; i < n; i++)
                yr[i] = (xr[i] * r) * w[i];
        } else {
            for (; i + 8 <= n; i += 8)
                _mm256_storeu_ps(yr + i, _mm256_mul_ps(_mm256_loadu_ps(xr + i), vr));
            for (; i < n; i++)
                yr[i] = xr[i] * r;
        }
    }
}

/* ---------------------------------------------------------------- RoPE */

static void rope_avx2(const struct kern_rope *rope, float *x, int64_t x_stride, int64_t n_tok,
                      int64_t n_head, int64_t head_dim, const float *table)
{
    int64_t half = rope->n_rot / 2;
    for (int64_t t = 0; t < n_tok; t++) {
        const float *ct = table + t * 2 * half, *st = ct + half;
        for (int64_t h = 0; h < n_head; h++) {
            float *xh = x + t * x_stride + h * head_dim;
            int64_t i = 0;
            if (rope->mode == KERN_ROPE_NEOX) {
                for (; i + 8 <= half; i += 8) {
                    __m256 x0 = _mm256_loadu_ps(xh + i), x1 = _mm256_loadu_ps(xh + i + half);
                    __m256 c = _mm256_loadu_ps(ct + i), s = _mm256_loadu_ps(st + i);
                    _mm256_storeu_ps(xh + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
                    _mm256_storeu_ps(xh + i + half, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
                }
                for (; i < half; i++) {
                    float x0 = xh[i], x1 = xh[i + half], c = ct[i], s = st[i];
                    xh[i] = fmaf(x0, c, -(x1 * s));
                    xh[i + half] = fmaf(x0, s, x1 * c);
                }
            } else {
                /* 4 adjacent pairs per vector: y = fma(dup_even(x), [c s ..], dup_odd(x) *
                 * [-s c ..]): lane 2i is fmaf(x0, c, -(x1 s)), lane 2i+1 fmaf(x0, s, x1 c). */
                __m128 sign = _mm_set1_ps(-0.0f);
                for (; i + 4 <= half; i += 4) {
                    __m128 c = _mm_loadu_ps(ct + i), s = _mm_loadu_ps(st + i);
                    __m128 ns = _mm_xor_ps(s, sign);
                    __m256 cs = _mm256_set_m128(_mm_unpackhi_ps(c, s), _mm_unpacklo_ps(c, s));
                    __m256 nsc = _mm256_set_m128(_mm_unpackhi_ps(ns, c), _mm_unpacklo_ps(ns, c));
                    __m256 v = _mm256_loadu_ps(xh + 2 * i);
                    __m256 even = _mm256_moveldup_ps(v), odd = _mm256_movehdup_ps(v);
                    _mm256_storeu_ps(xh + 2 * i, _mm256_fmadd_ps(even, cs, _mm256_mul_ps(odd, nsc)));
                }
                for (; i < half; i++) {
                    float x0 = xh[2 * i], x1 = xh[2 * i + 1], c = ct[i], s = st[i];
                    xh[2 * i] = fmaf(x0, c, -(x1 * s));
                    xh[2 * i + 1] = fmaf(x0, s, x1 * c);
                }
            }
        }
    }
}

static void rope_table_avx2(const struct kern_rope *rope, const int32_t *pos, int64_t n_tok,
                            float *table)
{
    int64_t half = rope->n_rot / 2;
    __m256d ms = _mm256_set1_pd(rope->mscale);
    for (int64_t t = 0; t < n_tok; t++) {
        assert(pos[t] >= 0);
        float *ct = table + t * 2 * half, *st = ct + half;
        double pd = (double)pos[t];
        int64_t i = 0;
        for (; i + 4 <= half; i += 4) {
            __m256d s, c;
            kn_sincos4(_mm256_mul_pd(_mm256_set1_pd(pd), _mm256_loadu_pd(rope->freq + i)), &s, &c);
            _mm_storeu_ps(ct + i, _mm256_cvtpd_ps(_mm256_mul_pd(c, ms)));
            _mm_storeu_ps(st + i, _mm256_cvtpd_ps(_mm256_mul_pd(s, ms)));
        }
        for (; i < half; i++) {
            double s, c;
            kern_sincos_f64(pd * rope->freq[i], &s, &c);
            ct[i] = (float)(c * rope->mscale);
            st[i] = (float)(s * rope->mscale);
        }
    }
}

const struct kern_ops kern_ops_avx2 = {
    .isa = KN_ISA_AVX2,
    .exp = exp_avx2,
    .add = add_avx2,
    .mul = mul_avx2,
    .scale = scale_avx2,
    .silu = silu_avx2,
    .swiglu = swiglu_avx2,
    .swiglu_oai = swiglu_oai_avx2,
    .gelu = gelu_avx2,
    .geglu = geglu_avx2,
    .softmax = softmax_avx2,
    .log_softmax = log_softmax_avx2,
    .rmsnorm = rmsnorm_avx2,
    .rope = rope_avx2,
    .rope_table = rope_table_avx2,
    .attn = kern_attn_avx2,
};
#endif
