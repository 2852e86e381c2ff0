/* test_kmath.c: accuracy of Kinetic's own math against libm in double (the oracle), over
 * the ranges the kernels use, and the exact values the kernels rely on (exp(0) = 1,
 * exp(-inf) = 0). Prints the measured maximum errors (docs/numerics.md quotes them). */
#include <math.h>
#include <float.h>

#include "check.h"
#include "kernels/ops.h"
#include "test_ops_common.h"

/* Error of float y against the true value t, in units of the float ulp at t. */
static double ulp_err(float y, double t)
{
    if (isinf(t) || isinf(y))
        return (double)y == t ? 0.0 : INFINITY;
    double at = fabs(t);
    int e;
    frexp(at, &e); /* at = f * 2^e, f in [0.5, 1) */
    double ulp = at < FLT_MIN ? 0x1p-149 : ldexp(1.0, e - 24);
    return fabs((double)y - t) / ulp;
}

static void test_expf(void)
{
    double worst = 0.0, worst_sub = 0.0;
    float worst_x = 0;
    /* The normal range, where softmax and attention live (arguments <= 0), and above. */
    for (int i = 0; i < 2000000; i++) {
        float x = (float)rng_uniform(-87.3, 88.7);
        double err = ulp_err(kern_expf(x), exp((double)x));
        if (err > worst) {
            worst = err;
            worst_x = x;
        }
    }
    /* Subnormal results. */
    for (int i = 0; i < 200000; i++) {
        float x = (float)rng_uniform(-103.9, -87.4);
        double err = ulp_err(kern_expf(x), exp((double)x));
        worst_sub = err > worst_sub ? err : worst_sub;
    }
    printf("kern_expf: max error %.3f ulp (at %a) on [-87.3, 88.7]; %.3f ulp of the "
           "subnormal grid on [-103.9, -87.4]\n", worst, (double)worst_x, worst_sub);
    CHECKF(worst <= 1.5, "expf error %.3f ulp", worst);
    CHECKF(worst_sub <= 1.0, "expf subnormal error %.3f ulp", worst_sub);
    /* Exact values the kernels rely on. */
    CHECK(kern_expf(0.0f) == 1.0f);
    CHECK(kern_expf(-0.0f) == 1.0f);
    CHECK(kern_expf(-INFINITY) == 0.0f);
    CHECK(kern_expf(-1000.0f) == 0.0f);
    CHECK(kern_expf(INFINITY) == INFINITY);
    CHECK(kern_expf(100.0f) == INFINITY);
    CHECK(kern_expf(88.72f) < INFINITY);
    CHECK(isnan(kern_expf(NAN)));
    CHECK(kern_expf(1.0f) == (float)exp(1.0));
}

static void test_f64(void)
{
    double we = 0, wl = 0, wp = 0;
    for (int i = 0; i < 200000; i++) {
        double x = rng_uniform(-700, 700);
        double r = fabs(kern_exp_f64(x) - exp(x)) / exp(x);
        we = r > we ? r : we;
        double y = exp(rng_uniform(-700, 700));
        double rl = fabs(kern_log_f64(y) - log(y)) / fmax(fabs(log(y)), 1e-300);
        wl = rl > wl ? rl : wl;
        double b = rng_uniform(1.5, 2e7), ee = rng_uniform(-1, 0);
        double rp = fabs(kern_pow_f64(b, ee) - pow(b, ee)) / pow(b, ee);
        wp = rp > wp ? rp : wp;
    }
    printf("kern_exp_f64 max rel error %.3g; kern_log_f64 %.3g; kern_pow_f64 (base up to 2e7, "
           "exponent in [-1, 0]) %.3g\n", we, wl, wp);
    CHECKF(we < 1e-15, "exp_f64 %.3g", we);
    CHECKF(wl < 1e-15, "log_f64 %.3g", wl);
    CHECKF(wp < 1e-14, "pow_f64 %.3g", wp);
    CHECK(kern_log_f64(1.0) == 0.0);
    CHECK(kern_exp_f64(0.0) == 1.0);
    CHECK(isinf(kern_log_f64(0.0)) && kern_log_f64(0.0) < 0);
    CHECK(isnan(kern_log_f64(-1.0)));
    CHECK(fabs(kern_log_f64(0x1p-1070) - log(0x1p-1070)) < 1e-12);
    CHECK(kern_exp_f64(-800.0) == 0.0);
    CHECK(isinf(kern_exp_f64(800.0)));
}

static void test_sincos(void)
{
    /* RoPE angles: position (up to 1e6) times a frequency (<= 1). Absolute error in double
     * and the error of the float rounding the table stores. */
    double wabs = 0, wulp = 0;
    for (int i = 0; i < 400000; i++) {
        double x = i % 2 ? rng_uniform(-10, 10) : rng_uniform(-1e6, 1e6);
        double s, c;
        kern_sincos_f64(x, &s, &c);
        double es = fabs(s - sin(x)), ec = fabs(c - cos(x));
        wabs = fmax(wabs, fmax(es, ec));
        /* float ulps, where the value is not tiny (tiny sin/cos carry the absolute bound) */
        if (fabs(sin(x)) > 1e-3)
            wulp = fmax(wulp, ulp_err((float)s, sin(x)));
        if (fabs(cos(x)) > 1e-3)
            wulp = fmax(wulp, ulp_err((float)c, cos(x)));
    }
    printf("kern_sincos_f64 on |x| <= 1e6: max abs error %.3g; rounded to float %.4f ulp\n",
           wabs, wulp);
    CHECKF(wabs < 4e-16, "sincos abs error %.3g", wabs);
    CHECKF(wulp <= 0.5001, "sincos float error %.4f ulp", wulp);
    double s, c;
    kern_sincos_f64(0.0, &s, &c);
    CHECK(s == 0.0 && c == 1.0);
    kern_sincos_f64(0x1p31, &s, &c);
    CHECK(isnan(s) && isnan(c));
    kern_sincos_f64(NAN, &s, &c);
    CHECK(isnan(s) && isnan(c));
}

static void test_float_helpers(void)
{
    double wt = 0, wl = 0, ws = 0, wg = 0;
    for (int i = 0; i < 400000; i++) {
        float x = (float)rng_uniform(-12, 12);
        if (i % 4 == 0)
            x = (float)rng_uniform(-0.01, 0.01);
        wt = fmax(wt, ulp_err(kern_tanhf(x), tanh((double)x)));
        float y = (float)exp(rng_uniform(-80, 80));
        wl = fmax(wl, ulp_err(kern_logf(y), log((double)y)));
        float z = (float)rng_uniform(-30, 30);
        double sil = (double)z / (1.0 + exp(-(double)z));
        double gel = 0.5 * z * (1.0 + tanh(sqrt(2.0 / M_PI) * (z + 0.044715 * (double)z * z * z)));
        /* SiLU and GELU are compared in absolute terms near their zero crossings and
         * negative tails (the relative error there is large for any float formula). */
        ws = fmax(ws, fabs(kern_siluf(z) - sil) / fmax(fabs(sil), 1.0));
        wg = fmax(wg, fabs(kern_geluf(z) - gel) / fmax(fabs(gel), 1.0));
    }
    printf("kern_tanhf %.3f ulp; kern_logf %.3f ulp; kern_siluf rel/abs %.3g; kern_geluf "
           "rel/abs %.3g\n", wt, wl, ws, wg);
    CHECKF(wt <= 0.5001, "tanhf %.3f ulp", wt);
    CHECKF(wl <= 0.5001, "logf %.3f ulp", wl);
    CHECKF(ws < 3e-7, "silu %.3g", ws);
    CHECKF(wg < 3e-7, "gelu %.3g", wg);
    CHECK(kern_tanhf(0.0f) == 0.0f);
    CHECK(kern_tanhf(30.0f) == 1.0f && kern_tanhf(-30.0f) == -1.0f);
    CHECK(kern_tanhf(1e-9f) == 1e-9f);
    CHECK(kern_logf(1.0f) == 0.0f);
    CHECK(kern_logf(0.0f) == -INFINITY);
    CHECK(isnan(kern_logf(-2.0f)));
    CHECK(kern_siluf(-200.0f) == 0.0f);
    CHECK(kern_siluf(200.0f) == 200.0f);
    CHECK(kern_geluf(0.0f) == 0.0f);
    CHECK(kern_geluf(50.0f) == 50.0f);
}

int main(void)
{
    test_expf();
    test_f64();
    test_sincos();
    test_float_helpers();
    CHECK_DONE();
}
