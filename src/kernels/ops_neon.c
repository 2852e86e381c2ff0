/* ops_neon.c: the elementwise kernels, softmax, RMSNorm and RoPE with NEON, bit for bit the
 * reference in ops.c (docs/numerics.md). Element i of every result goes through the same
 * operations as in the reference; vector tails run the reference's scalar code. The
 * dotprod and i8mm levels use this table too (they add integer instructions only). */
#include "kmath_neon.h"

static void exp_neon(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, kn_exp4(vld1q_f32(x + i)));
    for (; i < n; i++)
        y[i] = kern_expf(x[i]);
}

static void add_neon(float *y, const float *a, const float *b, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vaddq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
    for (; i < n; i++)
        y[i] = a[i] + b[i];
}

static void mul_neon(float *y, const float *a, const float *b, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vmulq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
    for (; i < n; i++)
        y[i] = a[i] * b[i];
}

static void scale_neon(float *y, const float *x, float s, int64_t n)
{
    float32x4_t vs = vdupq_n_f32(s);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vmulq_f32(vld1q_f32(x + i), vs));
    for (; i < n; i++)
        y[i] = x[i] * s;
}

static void silu_neon(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, kn_silu4(vld1q_f32(x + i)));
    for (; i < n; i++)
        y[i] = kern_siluf(x[i]);
}

static void swiglu_neon(float *y, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vmulq_f32(kn_silu4(vld1q_f32(g + i)), vld1q_f32(u + i)));
    for (; i < n; i++)
        y[i] = kern_siluf(g[i]) * u[i];
}

static void swiglu_oai_neon(float *y, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, kn_swiglu_oai4(vld1q_f32(g + i), vld1q_f32(u + i)));
    for (; i < n; i++)
        y[i] = kern_swiglu_oaif(g[i], u[i]);
}

static void gelu_neon(float *y, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, kn_gelu4(vld1q_f32(x + i)));
    for (; i < n; i++)
        y[i] = kern_geluf(x[i]);
}

static void geglu_neon(float *y, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vmulq_f32(kn_gelu4(vld1q_f32(g + i)), vld1q_f32(u + i)));
    for (; i < n; i++)
        y[i] = kern_geluf(g[i]) * u[i];
}

/* ---------------------------------------------------------------- softmax */

static float max_neon(const float *x, int64_t n)
{
    float32x4_t vm = vdupq_n_f32(-INFINITY);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vm = kn_max_step4(vld1q_f32(x + i), vm);
    float m = vmaxvq_f32(vm); /* no NaN in the lanes; zero signs are fixed below */
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m + 0.0f;
}

/* Canonical sum of exp(x - m); the exps are stored in y when y is not NULL. */
static float exp_sum_neon(float *y, const float *x, float m, int64_t n)
{
    float32x4_t vm = vdupq_n_f32(m);
    float32x4_t acc4[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                           vdupq_n_f32(0.0f)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int j = 0; j < 4; j++) {
            float32x4_t e = kn_exp4(vsubq_f32(vld1q_f32(x + i + 4 * j), vm));
            if (y)
                vst1q_f32(y + i + 4 * j, e);
            acc4[j] = vaddq_f32(acc4[j], e);
        }
    }
    float acc[KN_LANES];
    for (int j = 0; j < 4; j++)
        vst1q_f32(acc + 4 * j, acc4[j]);
    for (; i < n; i++) {
        float e = kern_expf(x[i] - m);
        if (y)
            y[i] = e;
        acc[i % KN_LANES] += e;
    }
    return kn_tree16(acc);
}

static void softmax_neon(float *y, const float *x, int64_t n)
{
    float s = exp_sum_neon(y, x, max_neon(x, n), n);
    float32x4_t vs = vdupq_n_f32(s);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vdivq_f32(vld1q_f32(y + i), vs));
    for (; i < n; i++)
        y[i] = y[i] / s;
}

static void log_softmax_neon(float *y, const float *x, int64_t n)
{
    float m = max_neon(x, n);
    float ls = kern_logf(exp_sum_neon(NULL, x, m, n));
    float32x4_t vm = vdupq_n_f32(m), vl = vdupq_n_f32(ls);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, vsubq_f32(vsubq_f32(vld1q_f32(x + i), vm), vl));
    for (; i < n; i++)
        y[i] = (x[i] - m) - ls;
}

/* ---------------------------------------------------------------- RMSNorm */

static void rmsnorm_neon(float *y, int64_t y_stride, const float *x, int64_t x_stride,
                         const float *w, int64_t n_rows, int64_t n, float eps)
{
    for (int64_t row = 0; row < n_rows; row++) {
        const float *xr = x + row * x_stride;
        float *yr = y + row * y_stride;
        float32x4_t acc4[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                               vdupq_n_f32(0.0f)};
        int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            for (int j = 0; j < 4; j++) {
                float32x4_t a = vld1q_f32(xr + i + 4 * j);
                acc4[j] = vfmaq_f32(acc4[j], a, a);
            }
        float acc[KN_LANES];
        for (int j = 0; j < 4; j++)
            vst1q_f32(acc + 4 * j, acc4[j]);
        for (; i < n; i++)
            acc[i % KN_LANES] = fmaf(xr[i], xr[i], acc[i % KN_LANES]);
        float mean = kn_tree16(acc) / (float)n;
        float r = 1.0f / sqrtf(mean + eps);
        float32x4_t vr = vdupq_n_f32(r);
        i = 0;
        if (w) {
            for (; i + 4 <= n; i += 4)
                vst1q_f32(yr + i, vmulq_f32(vmulq_f32(vld1q_f32(xr + i), vr), vld1q_f32(w + i)));
            for (; i < n; i++)
                yr[i] = (xr[i] * r) * w[i];
        } else {
            for (; i + 4 <= n; i += 4)
                vst1q_f32(yr + i, vmulq_f32(vld1q_f32(xr + i), vr));
            for (; i < n; i++)
                yr[i] = xr[i] * r;
        }
    }
}

/* ---------------------------------------------------------------- RoPE */

/* y0 = fmaf(x0, c, -(x1 * s)), y1 = fmaf(x0, s, x1 * c), lane by lane. */
static inline void rot4(float32x4_t x0, float32x4_t x1, float32x4_t c, float32x4_t s,
                        float32x4_t *y0, float32x4_t *y1)
{
    *y0 = vfmaq_f32(vnegq_f32(vmulq_f32(x1, s)), x0, c);
    *y1 = vfmaq_f32(vmulq_f32(x1, c), x0, s);
}

static void rope_neon(const struct kern_rope *rope, float *x, int64_t x_stride, int64_t n_tok,
                      int64_t n_head, int64_t head_dim, const float *table)
{
    int64_t half = rope->n_rot / 2;
    for (int64_t t = 0; t < n_tok; t++) {
        const float *ct = table + t * 2 * half, *st = ct + half;
        for (int64_t h = 0; h < n_head; h++) {
            float *xh = x + t * x_stride + h * head_dim;
            int64_t i = 0;
            if (rope->mode == KERN_ROPE_NEOX) {
                for (; i + 4 <= half; i += 4) {
                    float32x4_t y0, y1;
                    rot4(vld1q_f32(xh + i), vld1q_f32(xh + i + half), vld1q_f32(ct + i),
                         vld1q_f32(st + i), &y0, &y1);
                    vst1q_f32(xh + i, y0);
                    vst1q_f32(xh + i + half, y1);
                }
                for (; i < half; i++) {
                    float x0 = xh[i], x1 = xh[i + half], c = ct[i], s = st[i];
                    xh[i] = fmaf(x0, c, -(x1 * s));
                    xh[i + half] = fmaf(x0, s, x1 * c);
                }
            } else {
                /* 4 adjacent pairs: LD2 splits them into the evens x0 and the odds x1. */
                for (; i + 4 <= half; i += 4) {
                    float32x4x2_t v = vld2q_f32(xh + 2 * i), o;
                    rot4(v.val[0], v.val[1], vld1q_f32(ct + i), vld1q_f32(st + i), &o.val[0],
                         &o.val[1]);
                    vst2q_f32(xh + 2 * i, o);
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

static void rope_table_neon(const struct kern_rope *rope, const int32_t *pos, int64_t n_tok,
                            float *table)
{
    int64_t half = rope->n_rot / 2;
    float64x2_t ms = vdupq_n_f64(rope->mscale);
    for (int64_t t = 0; t < n_tok; t++) {
        assert(pos[t] >= 0);
        float *ct = table + t * 2 * half, *st = ct + half;
        double pd = (double)pos[t];
        int64_t i = 0;
        for (; i + 2 <= half; i += 2) {
            float64x2_t s, c;
            kn_sincos2(vmulq_f64(vdupq_n_f64(pd), vld1q_f64(rope->freq + i)), &s, &c);
            vst1_f32(ct + i, vcvt_f32_f64(vmulq_f64(c, ms)));
            vst1_f32(st + i, vcvt_f32_f64(vmulq_f64(s, ms)));
        }
        for (; i < half; i++) {
            double s, c;
            kern_sincos_f64(pd * rope->freq[i], &s, &c);
            ct[i] = (float)(c * rope->mscale);
            st[i] = (float)(s * rope->mscale);
        }
    }
}

const struct kern_ops kern_ops_neon = {
    .isa = KN_ISA_NEON,
    .exp = exp_neon,
    .add = add_neon,
    .mul = mul_neon,
    .scale = scale_neon,
    .silu = silu_neon,
    .swiglu = swiglu_neon,
    .swiglu_oai = swiglu_oai_neon,
    .gelu = gelu_neon,
    .geglu = geglu_neon,
    .softmax = softmax_neon,
    .log_softmax = log_softmax_neon,
    .rmsnorm = rmsnorm_neon,
    .rope = rope_neon,
    .rope_table = rope_table_neon,
    .attn = kern_attn_neon,
};
