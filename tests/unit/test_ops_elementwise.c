/* test_ops_elementwise.c: the elementwise kernels, softmax and RMSNorm. Every ISA level
 * this CPU runs must give the reference's bits on random inputs of many lengths (not
 * multiples of the vector width too), rows must not depend on their neighbours, and the
 * reference must be accurate against float64. */
#include <math.h>

#include "check.h"
#include "kernels/ops.h"
#include "test_ops_common.h"

static void fill(float *x, int64_t n, float lo, float hi)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_f(lo, hi);
}

static bool same_bits(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

#define NMAX 5000

static float xa[NMAX], xb[NMAX], ya[NMAX], yb[NMAX], yc[NMAX];

static const int64_t lengths[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127,
                                  128, 129, 255, 257, 511, 1000, 1023, 1025, 2048, 4999};
#define N_LENGTHS (int)(sizeof lengths / sizeof lengths[0])

static void test_isa_equality(void)
{
    const struct kern_ops *lv[KN_ISA_COUNT];
    int nl = simd_levels(lv);
    const struct kern_ops *ref = kern_ops_get(KN_ISA_SCALAR);
    printf("comparing %d SIMD level(s) with the reference:", nl);
    for (int l = 0; l < nl; l++)
        printf(" %s", isa_label(lv[l]->isa));
    printf("\n");
    for (int l = 0; l < nl; l++) {
        const struct kern_ops *o = lv[l];
        const char *name = isa_label(o->isa);
        for (int li = 0; li < N_LENGTHS; li++) {
            int64_t n = lengths[li];
            for (int rep = 0; rep < 3; rep++) {
                float span = rep == 0 ? 5.0f : rep == 1 ? 30.0f : 120.0f;
                fill(xa, n, -span, span);
                fill(xb, n, -span, span);
                /* some special values among the inputs */
                if (n > 4 && rep == 2) {
                    xa[0] = -INFINITY;
                    xa[1] = INFINITY;
                    xa[2] = -0.0f;
                    xa[3] = 1e-40f;
                }
                ref->exp(ya, xa, n);
                o->exp(yb, xa, n);
                CHECKF(same_bits(ya, yb, n), "%s exp n=%lld", name, (long long)n);
                ref->add(ya, xa, xb, n);
                o->add(yb, xa, xb, n);
                CHECKF(same_bits(ya, yb, n), "%s add n=%lld", name, (long long)n);
                ref->mul(ya, xa, xb, n);
                o->mul(yb, xa, xb, n);
                CHECKF(same_bits(ya, yb, n), "%s mul n=%lld", name, (long long)n);
                ref->scale(ya, xa, 0.37f, n);
                o->scale(yb, xa, 0.37f, n);
                CHECKF(same_bits(ya, yb, n), "%s scale n=%lld", name, (long long)n);
                ref->silu(ya, xa, n);
                o->silu(yb, xa, n);
                CHECKF(same_bits(ya, yb, n), "%s silu n=%lld", name, (long long)n);
                ref->swiglu(ya, xa, xb, n);
                o->swiglu(yb, xa, xb, n);
                CHECKF(same_bits(ya, yb, n), "%s swiglu n=%lld", name, (long long)n);
                ref->gelu(ya, xa, n);
                o->gelu(yb, xa, n);
                CHECKF(same_bits(ya, yb, n), "%s gelu n=%lld", name, (long long)n);
                ref->geglu(ya, xa, xb, n);
                o->geglu(yb, xa, xb, n);
                CHECKF(same_bits(ya, yb, n), "%s geglu n=%lld", name, (long long)n);
                /* gpt-oss: spans 30 and 120 cross both clamps (+-7) */
                ref->swiglu_oai(ya, xa, xb, n);
                o->swiglu_oai(yb, xa, xb, n);
                CHECKF(same_bits(ya, yb, n), "%s swiglu_oai n=%lld", name, (long long)n);
                memcpy(yc, xa, (size_t)n * sizeof(float));
                o->swiglu_oai(yc, yc, xb, n);
                CHECKF(same_bits(ya, yc, n), "%s swiglu_oai in place n=%lld", name, (long long)n);
                /* softmax: finite logits, and logits with -inf (masked tokens) */
                fill(xa, n, -span, span);
                if (rep == 2)
                    for (int64_t i = 0; i < n; i += 3)
                        xa[i] = -INFINITY;
                xa[n - 1] = span; /* at least one finite */
                ref->softmax(ya, xa, n);
                o->softmax(yb, xa, n);
                CHECKF(same_bits(ya, yb, n), "%s softmax n=%lld", name, (long long)n);
                ref->log_softmax(ya, xa, n);
                o->log_softmax(yb, xa, n);
                CHECKF(same_bits(ya, yb, n), "%s log_softmax n=%lld", name, (long long)n);
                /* in place gives the same bits */
                memcpy(yc, xa, (size_t)n * sizeof(float));
                o->softmax(yc, yc, n);
                ref->softmax(ya, xa, n);
                CHECKF(same_bits(ya, yc, n), "%s softmax in place n=%lld", name, (long long)n);
            }
        }
    }
}

/* RMSNorm: ISA equality over row counts and strides, weight on and off, and each row of a
 * batch equal to that row normalized alone. */
static void test_rmsnorm(void)
{
    const struct kern_ops *lv[KN_ISA_COUNT + 1];
    int nl = simd_levels(lv);
    lv[nl++] = kern_ops_get(KN_ISA_SCALAR);
    const struct kern_ops *ref = kern_ops_get(KN_ISA_SCALAR);
    static float x[8 * 1100], w[1100], y1[8 * 1100], y2[8 * 1100], one[1100];
    const int64_t ns[] = {1, 5, 16, 17, 64, 100, 255, 256, 640, 1024, 1099};
    for (int l = 0; l < nl; l++) {
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            int64_t n = ns[ni], stride = n + 3, rows = 7;
            fill(x, rows * stride, -4, 4);
            fill(w, n, -2, 2);
            for (int wi = 0; wi < 2; wi++) {
                const float *wp = wi ? w : NULL;
                ref->rmsnorm(y1, stride, x, stride, wp, rows, n, 1e-6f);
                lv[l]->rmsnorm(y2, stride, x, stride, wp, rows, n, 1e-6f);
                bool eq = true;
                for (int64_t r = 0; r < rows; r++)
                    eq = eq && same_bits(y1 + r * stride, y2 + r * stride, n);
                CHECKF(eq, "%s rmsnorm n=%lld w=%d", isa_label(lv[l]->isa), (long long)n, wi);
                /* row 4 alone, written to a different place */
                lv[l]->rmsnorm(one, n, x + 4 * stride, n, wp, 1, n, 1e-6f);
                CHECKF(same_bits(one, y1 + 4 * stride, n), "%s rmsnorm row alone n=%lld",
                       isa_label(lv[l]->isa), (long long)n);
            }
            /* in place */
            memcpy(y2, x, (size_t)(rows * stride) * sizeof(float));
            lv[l]->rmsnorm(y2, stride, y2, stride, w, rows, n, 1e-6f);
            ref->rmsnorm(y1, stride, x, stride, w, rows, n, 1e-6f);
            bool eq = true;
            for (int64_t r = 0; r < rows; r++)
                eq = eq && same_bits(y1 + r * stride, y2 + r * stride, n);
            CHECKF(eq, "%s rmsnorm in place n=%lld", isa_label(lv[l]->isa), (long long)n);
        }
    }
    /* accuracy of the reference against float64 */
    double worst = 0;
    for (int rep = 0; rep < 50; rep++) {
        int64_t n = 1 + (int64_t)(rng_next() % 1099);
        fill(x, n, -10, 10);
        fill(w, n, -2, 2);
        ref->rmsnorm(y1, n, x, n, w, 1, n, 1e-5f);
        double ss = 0;
        for (int64_t i = 0; i < n; i++)
            ss += (double)x[i] * x[i];
        double r = 1.0 / sqrt(ss / (double)n + 1e-5);
        for (int64_t i = 0; i < n; i++) {
            double t = (double)x[i] * r * w[i];
            worst = fmax(worst, fabs(y1[i] - t) / fmax(fabs(t), 1e-30));
        }
    }
    printf("rmsnorm: max relative error %.3g against float64\n", worst);
    CHECKF(worst < 1e-6, "rmsnorm error %.3g", worst);
}

/* gpt-oss's clamped SwiGLU against float64 (min(g, 7) sigmoid(1.702 min(g, 7)) *
 * (clamp(u, -7, 7) + 1), llama.cpp's ggml_swiglu_oai), and its clamps exactly. */
static void test_swiglu_oai(void)
{
    const struct kern_ops *ref = kern_ops_get(KN_ISA_SCALAR);
    int64_t n = 4000;
    fill(xa, n, -12, 12);
    fill(xb, n, -12, 12);
    ref->swiglu_oai(ya, xa, xb, n);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = fmin((double)xa[i], 7.0), u = fmax(fmin((double)xb[i], 7.0), -7.0);
        double t = g / (1.0 + exp(-1.702 * g)) * (u + 1.0);
        worst = fmax(worst, fabs(ya[i] - t) / fmax(fabs(t), 1e-3));
    }
    printf("swiglu_oai: max relative error %.3g against float64 (|x| <= 12)\n", worst);
    CHECKF(worst < 2e-6, "swiglu_oai error %.3g", worst);
    /* above the limit the gate is 7 and the up 7 or -7: the same value whatever the excess */
    CHECK(kern_swiglu_oaif(9.0f, 100.0f) == kern_swiglu_oaif(7.0f, 7.0f));
    CHECK(kern_swiglu_oaif(1e30f, -1e30f) == kern_swiglu_oaif(7.0f, -7.0f));
    CHECK(kern_swiglu_oaif(7.0f, -7.0f) < 0.0f && kern_swiglu_oaif(2.0f, -1.0f) == 0.0f);
    /* the gate is not clamped below: -20 gives about -20 sigmoid(-34), near 0 */
    CHECK(fabsf(kern_swiglu_oaif(-20.0f, 3.0f)) < 1e-12f);
}

/* LayerNorm (BERT): the same bits at every ISA level (its sums are the scalar lanes and
 * the dispatched canonical dot), each row alone as in a batch, in place, and accurate
 * against float64 (inputs with a large mean, where a one-pass variance would lose it). */
static void test_layernorm(void)
{
    static float x[7 * 1103], w[1100], b[1100], y1[7 * 1103], y2[7 * 1103], one[1100];
    const int64_t ns[] = {1, 5, 16, 17, 64, 100, 255, 256, 384, 768, 1099};
    struct kn_err err = {0};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        int64_t n = ns[ni], stride = n + 3, rows = 7;
        fill(x, rows * stride, -4, 4);
        for (int64_t i = 0; i < rows * stride; i += 3)
            x[i] += 50.0f;
        fill(w, n, -2, 2);
        fill(b, n, -1, 1);
        CHECK(kn_isa_set(KN_ISA_SCALAR, &err) == KN_OK);
        kern_layernorm(y1, stride, x, stride, w, b, rows, n, 1e-12f);
        for (int isa = 0; isa < KN_ISA_COUNT; isa++) {
            if (!kn_isa_supported((enum kn_isa)isa))
                continue;
            CHECK(kn_isa_set((enum kn_isa)isa, &err) == KN_OK);
            kern_layernorm(y2, stride, x, stride, w, b, rows, n, 1e-12f);
            bool eq = true;
            for (int64_t r = 0; r < rows; r++)
                eq = eq && same_bits(y1 + r * stride, y2 + r * stride, n);
            CHECKF(eq, "%s layernorm n=%lld", kn_isa_name((enum kn_isa)isa), (long long)n);
            kern_layernorm(one, n, x + 4 * stride, n, w, b, 1, n, 1e-12f);
            CHECKF(same_bits(one, y1 + 4 * stride, n), "layernorm row alone n=%lld", (long long)n);
            memcpy(y2, x, (size_t)(rows * stride) * sizeof(float));
            kern_layernorm(y2, stride, y2, stride, w, b, rows, n, 1e-12f);
            CHECKF(same_bits(y2 + 4 * stride, y1 + 4 * stride, n), "layernorm in place n=%lld",
                   (long long)n);
        }
        double worst = 0;
        for (int64_t r = 0; r < rows && n > 1; r++) {
            const float *xr = x + r * stride;
            double mean = 0, var = 0;
            for (int64_t i = 0; i < n; i++)
                mean += xr[i];
            mean /= (double)n;
            for (int64_t i = 0; i < n; i++)
                var += (xr[i] - mean) * (xr[i] - mean);
            const double rs = 1.0 / sqrt(var / (double)n + 1e-12);
            for (int64_t i = 0; i < n; i++) {
                double t = (xr[i] - mean) * rs * w[i] + b[i];
                worst = fmax(worst, fabs(y1[r * stride + i] - t));
            }
        }
        CHECKF(worst < 2e-5, "layernorm n=%lld: error %.3g against float64", (long long)n, worst);
    }
    CHECK(kn_isa_set(kn_isa_best(), &err) == KN_OK);
}

static void test_softmax_accuracy(void)
{
    const struct kern_ops *ref = kern_ops_get(KN_ISA_SCALAR);
    double worst = 0, worst_log = 0;
    for (int rep = 0; rep < 40; rep++) {
        int64_t n = 1 + (int64_t)(rng_next() % 4999);
        fill(xa, n, -20, 20);
        ref->softmax(ya, xa, n);
        ref->log_softmax(yb, xa, n);
        double m = -INFINITY, s = 0, sum_y = 0;
        for (int64_t i = 0; i < n; i++)
            m = fmax(m, xa[i]);
        for (int64_t i = 0; i < n; i++)
            s += exp((double)xa[i] - m);
        for (int64_t i = 0; i < n; i++) {
            double t = exp((double)xa[i] - m) / s;
            worst = fmax(worst, fabs(ya[i] - t) / t);
            double lt = (double)xa[i] - m - log(s);
            worst_log = fmax(worst_log, fabs(yb[i] - lt) / fmax(fabs(lt), 1.0));
            sum_y += ya[i];
        }
        CHECKF(fabs(sum_y - 1.0) < 1e-5, "softmax sums to %.9f", sum_y);
    }
    printf("softmax: max relative error %.3g; log_softmax max error %.3g (relative, or "
           "absolute below 1)\n", worst, worst_log);
    /* x - m rounds to the float grid near |x - m| <= 40: 2^-24 * 40 relative, plus exp and
     * the division. */
    CHECKF(worst < 4e-6, "softmax error %.3g", worst);
    CHECKF(worst_log < 1e-6, "log_softmax error %.3g", worst_log);
    /* masked entries give exactly 0 (and -inf in log space) */
    float x[5] = {-INFINITY, 1.0f, -INFINITY, 2.0f, 0.5f}, y[5];
    ref->softmax(y, x, 5);
    CHECK(y[0] == 0.0f && y[2] == 0.0f && y[3] > y[1]);
    ref->log_softmax(y, x, 5);
    CHECK(y[0] == -INFINITY && y[2] == -INFINITY);
    float one = 3.0f;
    ref->softmax(y, &one, 1);
    CHECK(y[0] == 1.0f);
}

/* The public entry points follow kn_isa_set(). */
static void test_dispatch(void)
{
    int64_t n = 777;
    struct kn_err err = {0};
    fill(xa, n, -10, 10);
    fill(xb, n, -10, 10);
    CHECK(kn_isa_set(KN_ISA_SCALAR, &err) == KN_OK);
    CHECK(kern_ops_active() == kern_ops_get(KN_ISA_SCALAR));
    kern_swiglu(ya, xa, xb, n);
    for (int l = KN_ISA_SCALAR + 1; l < KN_ISA_COUNT; l++) {
        if (!kn_isa_supported((enum kn_isa)l))
            continue;
        CHECK(kn_isa_set((enum kn_isa)l, &err) == KN_OK);
        CHECK(kern_ops_active() == kern_ops_get((enum kn_isa)l));
        CHECK(kern_ops_active()->isa != KN_ISA_SCALAR);
        kern_swiglu(yb, xa, xb, n);
        CHECK(same_bits(ya, yb, n));
    }
    CHECK(kn_isa_set(KN_ISA_SCALAR, &err) == KN_OK);
    float a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, c[3];
    kern_add(c, a, b, 3);
    CHECK(c[0] == 5 && c[1] == 7 && c[2] == 9);
    kern_mul(c, a, b, 3);
    CHECK(c[0] == 4 && c[1] == 10 && c[2] == 18);
    kern_scale(c, a, 0.5f, 3);
    CHECK(c[0] == 0.5f && c[1] == 1.0f && c[2] == 1.5f);
}

static void test_rows(void)
{
    float src[5] = {1.5f, -2.25f, 0.0f, 65504.0f, 1e-3f}, y[5];
    kn_f16 h[5], hb[5];
    kn_bf16 b[5];
    for (int i = 0; i < 5; i++) {
        h[i] = quant_f32_to_f16(src[i]);
        b[i] = quant_f32_to_bf16(src[i]);
    }
    CHECK(kern_row_to_f32(QT_F32, src, y, 5) && same_bits(src, y, 5));
    CHECK(kern_row_to_f32(QT_F16, h, y, 5));
    for (int i = 0; i < 5; i++)
        CHECK(y[i] == quant_f16_to_f32(h[i]));
    CHECK(y[0] == 1.5f && y[1] == -2.25f && y[3] == 65504.0f);
    CHECK(kern_row_to_f32(QT_BF16, b, y, 5));
    for (int i = 0; i < 5; i++)
        CHECK(y[i] == quant_bf16_to_f32(b[i]));
    CHECK(!kern_row_to_f32(QT_Q4_0, src, y, 5));
    CHECK(kern_kv_store(QT_F16, hb, src, 5) && memcmp(h, hb, sizeof h) == 0);
    CHECK(kern_kv_store(QT_F32, y, src, 5) && same_bits(src, y, 5));
    CHECK(!kern_kv_store(QT_BF16, hb, src, 5));
    /* q8_0: whole blocks only, each the reference quantizer's bytes, sized by
     * kern_kv_row_bytes */
    float row[64];
    for (int i = 0; i < 64; i++)
        row[i] = (float)(i * 37 % 29) * 0.25f - 3.0f;
    uint8_t qa[2 * sizeof(struct block_q8_0)], qb[sizeof qa];
    CHECK(kern_kv_row_bytes(QT_Q8_0, 64) == sizeof qa && kern_kv_row_bytes(QT_Q8_0, 40) == 0);
    CHECK(kern_kv_row_bytes(QT_F16, 5) == 10 && kern_kv_row_bytes(QT_F32, 5) == 20);
    CHECK(kern_kv_row_bytes(QT_BF16, 5) == 0);
    CHECK(kern_kv_store(QT_Q8_0, qa, row, 64) && quant_quantize_row(QT_Q8_0, row, qb, 64));
    CHECK(memcmp(qa, qb, sizeof qa) == 0);
    /* the second block alone gives the same bytes: a block depends on its own values */
    CHECK(kern_kv_store(QT_Q8_0, qb, row + 32, 32) && memcmp(qa + sizeof(struct block_q8_0), qb, sizeof(struct block_q8_0)) == 0);
    CHECK(!kern_kv_store(QT_Q8_0, qa, row, 40));
}

int main(void)
{
    test_isa_equality();
    test_rmsnorm();
    test_swiglu_oai();
    test_layernorm();
    test_softmax_accuracy();
    test_dispatch();
    test_rows();
    CHECK_DONE();
}
