/* ops.c: the reference (specification) of the elementwise kernels, softmax, RMSNorm and
 * RoPE, the RoPE frequency tables, row conversion, and the calls through the active
 * level's table (dispatch.c).
 * docs/numerics.md states each operation's order; the code here is that order, literally. */
#include "ops_internal.h"
#include "kern_internal.h"
#include "kernels.h"

/* ================================================================ elementwise */

static void exp_scalar(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = kern_expf(x[i]);
}

static void add_scalar(float *y, const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] + b[i];
}

static void mul_scalar(float *y, const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}

static void scale_scalar(float *y, const float *x, float s, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * s;
}

static void silu_scalar(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = kern_siluf(x[i]);
}

static void swiglu_oai_scalar(float *y, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = kern_swiglu_oaif(g[i], u[i]);
}

static void swiglu_scalar(float *y, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = kern_siluf(g[i]) * u[i];
}

static void gelu_scalar(float *y, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = kern_geluf(x[i]);
}

static void geglu_scalar(float *y, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = kern_geluf(g[i]) * u[i];
}

/* ================================================================ softmax */

/* The max, exp(x - max) into y, the canonical sum, y / sum: kern_hd.h's rule. */
static void softmax_scalar(float *y, const float *x, int64_t n)
{
    kn_hd_softmax(y, x, n);
}

static void log_softmax_scalar(float *y, const float *x, int64_t n)
{
    float m = kn_hd_softmax_max(x, n);
    float acc[KN_LANES] = {0};
    for (int64_t i = 0; i < n; i++)
        acc[i % KN_LANES] += kern_expf(x[i] - m);
    float ls = kern_logf(kn_tree16(acc));
    for (int64_t i = 0; i < n; i++)
        y[i] = (x[i] - m) - ls;
}

/* ================================================================ RMSNorm */

static void rmsnorm_scalar(float *y, int64_t y_stride, const float *x, int64_t x_stride,
                           const float *w, int64_t n_rows, int64_t n, float eps)
{
    for (int64_t row = 0; row < n_rows; row++) {
        const float *xr = x + row * x_stride;
        float *yr = y + row * y_stride;
        float mean = kn_dot_ref(xr, xr, n) / (float)n;
        float r = 1.0f / sqrtf(mean + eps);
        if (w) {
            for (int64_t i = 0; i < n; i++)
                yr[i] = (xr[i] * r) * w[i];
        } else {
            for (int64_t i = 0; i < n; i++)
                yr[i] = xr[i] * r;
        }
    }
}

/* ================================================================ RoPE */

/* floor and ceil of a double of modest size, without libm. */
static double floor_d(double x)
{
    double t = (x + 6755399441055744.0) - 6755399441055744.0; /* round to nearest */
    return t > x ? t - 1.0 : t;
}

static double ceil_d(double x)
{
    return -floor_d(-x);
}

/* YaRN's correction dim: the pair index whose wavelength fits n_rot_beta turns in the
 * original context: n_rot * log(n_ctx_orig / (beta * 2 pi)) / (2 log(base)). */
static double yarn_corr_dim(int32_t n_rot, int32_t n_ctx_orig, double beta, double base)
{
    return (double)n_rot * kern_log_f64((double)n_ctx_orig / (beta * 2.0 * 3.14159265358979323846)) /
           (2.0 * kern_log_f64(base));
}

enum kn_status kern_rope_init(struct kern_rope *rope, const struct kern_rope_params *p,
                              struct kn_err *err)
{
    if (p->mode != KERN_ROPE_NORM && p->mode != KERN_ROPE_NEOX)
        return kn_fail(err, KN_E_UNSUPPORTED, "rope: unknown mode %d", (int)p->mode);
    if (p->n_rot <= 0 || p->n_rot % 2 != 0 || p->n_rot > KERN_ROPE_MAX_DIM)
        return kn_fail(err, KN_E_FORMAT,
                       "rope: rotated dims %d must be even and in 2..%d; the model's "
                       "rope.dimension_count is wrong",
                       (int)p->n_rot, KERN_ROPE_MAX_DIM);
    if (!(p->freq_base > 0.0) || !(p->freq_base < 1e300))
        return kn_fail(err, KN_E_FORMAT, "rope: frequency base %g must be positive and finite",
                       p->freq_base);
    if (!(p->freq_scale > 0.0) || !(p->freq_scale < 1e300))
        return kn_fail(err, KN_E_FORMAT, "rope: frequency scale %g must be positive and finite",
                       p->freq_scale);
    if (!(p->attn_factor > 0.0) || !(p->attn_factor < 1e300))
        return kn_fail(err, KN_E_FORMAT, "rope: attention factor %g must be positive and finite",
                       p->attn_factor);
    if (!(p->ext_factor >= 0.0) || !(p->ext_factor <= 1.0))
        return kn_fail(err, KN_E_FORMAT, "rope: YaRN ext_factor %g must be in [0, 1]",
                       p->ext_factor);
    int32_t half = p->n_rot / 2;
    if (p->freq_factors) {
        for (int32_t i = 0; i < half; i++)
            if (!(p->freq_factors[i] > 0.0f) || !(p->freq_factors[i] < INFINITY))
                return kn_fail(err, KN_E_FORMAT,
                               "rope: frequency factor %d is %g; factors must be positive "
                               "and finite (tensor rope_freqs)",
                               (int)i, (double)p->freq_factors[i]);
    }
    double low = 0.0, high = 0.0;
    if (p->ext_factor != 0.0) {
        if (p->n_ctx_orig <= 0 || !(p->beta_fast > 0.0) || !(p->beta_slow > 0.0))
            return kn_fail(err, KN_E_FORMAT,
                           "rope: YaRN needs a positive original context (%d) and betas "
                           "(fast %g, slow %g)",
                           (int)p->n_ctx_orig, p->beta_fast, p->beta_slow);
        low = floor_d(yarn_corr_dim(p->n_rot, p->n_ctx_orig, p->beta_fast, p->freq_base));
        high = ceil_d(yarn_corr_dim(p->n_rot, p->n_ctx_orig, p->beta_slow, p->freq_base));
        low = low < 0.0 ? 0.0 : low;
        high = high > (double)(p->n_rot - 1) ? (double)(p->n_rot - 1) : high;
    }
    rope->mode = p->mode;
    rope->n_rot = p->n_rot;
    rope->mscale = p->attn_factor;
    if (p->ext_factor != 0.0)
        rope->mscale *= 1.0 + 0.1 * kern_log_f64(1.0 / p->freq_scale);
    double lb = kern_log_f64(p->freq_base);
    for (int32_t i = 0; i < half; i++) {
        /* base^(-2i/n_rot) */
        double f = kern_exp_f64(-(2.0 * (double)i / (double)p->n_rot) * lb);
        if (p->freq_factors)
            f /= (double)p->freq_factors[i];
        double mix = 0.0;
        if (p->ext_factor != 0.0) {
            double span = high - low < 0.001 ? 0.001 : high - low;
            double y = ((double)i - low) / span;
            y = y < 0.0 ? 0.0 : (y > 1.0 ? 1.0 : y);
            mix = (1.0 - y) * p->ext_factor;
        }
        /* interpolated angle (scaled) blended with the extrapolated one by YaRN's ramp */
        rope->freq[i] = f * (p->freq_scale * (1.0 - mix) + mix);
    }
    for (int32_t i = half; i < KERN_ROPE_MAX_DIM / 2; i++)
        rope->freq[i] = 0.0;
    return KN_OK;
}

void kern_rope_table_scalar(const struct kern_rope *rope, const int32_t *pos, int64_t n_tok,
                            float *table)
{
    int32_t half = rope->n_rot / 2;
    for (int64_t t = 0; t < n_tok; t++) {
        assert(pos[t] >= 0);
        float *ct = table + t * 2 * half;
        float *st = ct + half;
        for (int32_t i = 0; i < half; i++) {
            double s, c;
            kern_sincos_f64((double)pos[t] * rope->freq[i], &s, &c);
            ct[i] = (float)(c * rope->mscale);
            st[i] = (float)(s * rope->mscale);
        }
    }
}

void kern_rope_scalar(const struct kern_rope *rope, float *x, int64_t x_stride, int64_t n_tok,
                      int64_t n_head, int64_t head_dim, const float *table)
{
    int64_t half = rope->n_rot / 2;
    assert(rope->n_rot <= head_dim);
    /* NORM pairs (2i, 2i+1); NEOX pairs (i, i + half). */
    int64_t step = rope->mode == KERN_ROPE_NEOX ? 1 : 2;
    int64_t off = rope->mode == KERN_ROPE_NEOX ? half : 1;
    for (int64_t t = 0; t < n_tok; t++) {
        const float *ct = table + t * 2 * half, *st = ct + half;
        for (int64_t h = 0; h < n_head; h++) {
            float *xh = x + t * x_stride + h * head_dim;
            for (int64_t i = 0; i < half; i++) {
                float x0 = xh[i * step], x1 = xh[i * step + off];
                float c = ct[i], s = st[i];
                xh[i * step] = fmaf(x0, c, -(x1 * s));
                xh[i * step + off] = fmaf(x0, s, x1 * c);
            }
        }
    }
}

/* ================================================================ rows */

bool kern_row_to_f32(uint32_t t, const void *row, float *y, int64_t n)
{
    switch (t) {
    case QT_F32:
        memmove(y, row, (size_t)n * sizeof(float));
        return true;
    case QT_F16:
        for (int64_t i = 0; i < n; i++)
            y[i] = quant_f16_to_f32(((const kn_f16 *)row)[i]);
        return true;
    case QT_BF16:
        for (int64_t i = 0; i < n; i++)
            y[i] = quant_bf16_to_f32(((const kn_bf16 *)row)[i]);
        return true;
    default:
        return false;
    }
}

bool kern_kv_store(uint32_t t, void *dst, const float *x, int64_t n)
{
    switch (t) {
    case QT_F32:
        memmove(dst, x, (size_t)n * sizeof(float));
        return true;
    case QT_F16:
        for (int64_t i = 0; i < n; i++)
            ((kn_f16 *)dst)[i] = quant_f32_to_f16(x[i]);
        return true;
    case QT_Q8_0:
        return n % QK8_0 == 0 && quant_quantize_row(QT_Q8_0, x, dst, n);
    default:
        return false;
    }
}

size_t kern_kv_row_bytes(uint32_t t, int64_t n)
{
    switch (t) {
    case QT_F32: return (size_t)n * sizeof(float);
    case QT_F16: return (size_t)n * sizeof(kn_f16);
    case QT_Q8_0: return n % QK8_0 == 0 ? (size_t)(n / QK8_0) * sizeof(struct block_q8_0) : 0;
    default: return 0;
    }
}

/* ================================================================ the scalar table
 * (dispatch.c maps the levels to the tables) */

const struct kern_ops kern_ops_scalar = {
    .isa = KN_ISA_SCALAR,
    .exp = exp_scalar,
    .add = add_scalar,
    .mul = mul_scalar,
    .scale = scale_scalar,
    .silu = silu_scalar,
    .swiglu = swiglu_scalar,
    .gelu = gelu_scalar,
    .geglu = geglu_scalar,
    .swiglu_oai = swiglu_oai_scalar,
    .softmax = softmax_scalar,
    .log_softmax = log_softmax_scalar,
    .rmsnorm = rmsnorm_scalar,
    .rope = kern_rope_scalar,
    .rope_table = kern_rope_table_scalar,
    .attn = kern_attn_scalar,
};

/* The active level's table, inline here (kern_ops_active is the same, for other files). */
static inline const struct kern_ops *ops_active(void)
{
    return kern_impl_active()->ops;
}

void kern_exp(float *y, const float *x, int64_t n) { ops_active()->exp(y, x, n); }
void kern_add(float *y, const float *a, const float *b, int64_t n) { ops_active()->add(y, a, b, n); }
void kern_mul(float *y, const float *a, const float *b, int64_t n) { ops_active()->mul(y, a, b, n); }
void kern_scale(float *y, const float *x, float s, int64_t n) { ops_active()->scale(y, x, s, n); }
void kern_silu(float *y, const float *x, int64_t n) { ops_active()->silu(y, x, n); }
void kern_swiglu(float *y, const float *g, const float *u, int64_t n) { ops_active()->swiglu(y, g, u, n); }
void kern_gelu(float *y, const float *x, int64_t n) { ops_active()->gelu(y, x, n); }
void kern_geglu(float *y, const float *g, const float *u, int64_t n) { ops_active()->geglu(y, g, u, n); }
void kern_swiglu_oai(float *y, const float *g, const float *u, int64_t n) { ops_active()->swiglu_oai(y, g, u, n); }
void kern_softmax(float *y, const float *x, int64_t n) { ops_active()->softmax(y, x, n); }
void kern_log_softmax(float *y, const float *x, int64_t n) { ops_active()->log_softmax(y, x, n); }

void kern_rmsnorm(float *y, int64_t y_stride, const float *x, int64_t x_stride, const float *w,
                  int64_t n_rows, int64_t n, float eps)
{
    ops_active()->rmsnorm(y, y_stride, x, x_stride, w, n_rows, n, eps);
}

void kern_layernorm(float *y, int64_t y_stride, const float *x, int64_t x_stride, const float *w,
                    const float *b, int64_t n_rows, int64_t n, float eps)
{
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * x_stride;
        float *yr = y + r * y_stride;
        float acc[KERN_DOT_LANES] = {0};
        for (int64_t k = 0; k < n; k++)
            acc[k % KERN_DOT_LANES] += xr[k];
        const float mean = kern_dot_tree16(acc) / (float)n;
        for (int64_t k = 0; k < n; k++)
            yr[k] = xr[k] - mean;
        const float var = kern_dot_f32(yr, yr, n) / (float)n;
        const float rs = 1.0f / sqrtf(var + eps);
        for (int64_t k = 0; k < n; k++) {
            float v = yr[k] * rs;
            if (w)
                v = v * w[k];
            if (b)
                v = v + b[k];
            yr[k] = v;
        }
    }
}

void kern_rope(const struct kern_rope *rope, float *x, int64_t x_stride, int64_t n_tok,
               int64_t n_head, int64_t head_dim, const float *table)
{
    ops_active()->rope(rope, x, x_stride, n_tok, n_head, head_dim, table);
}

void kern_rope_table(const struct kern_rope *rope, const int32_t *pos, int64_t n_tok, float *table)
{
    ops_active()->rope_table(rope, pos, n_tok, table);
}

void kern_attn(const struct kern_attn_args *a, int64_t begin, int64_t end)
{
    ops_active()->attn(a, begin, end);
}
