/* kmath.c: Kinetic's own transcendental functions, the reference (docs/numerics.md
 * "own math"). Only +, -, *, fma, exactly rounded / and sqrt, and bit manipulation: no
 * libm approximation can change a result. The SIMD files repeat kern_expf step by step. */
#include "ops_internal.h"

/* kern_expf's scale step shifts a negative int right; C17 leaves that to the compiler. */
_Static_assert((-3 >> 1) == -2, "arithmetic right shift of negative ints");

/* ================================================================ float exp
 * 1. NaN -> NaN. Clamp x to [-104, 89] (exp is 0 below, +inf above after rounding).
 * 2. k = (x * LOG2E + MAGIC) - MAGIC: x / ln2 rounded to an integer (ties to even).
 * 3. r = fmaf(-k, LN2_HI, x); r = fmaf(-k, LN2_LO, r)      (|r| <= ~0.35)
 * 4. p = C7; p = fmaf(p, r, C6) ... fmaf(p, r, C2); p = fmaf(p, r, 1); p = fmaf(p, r, 1)
 * 5. k1 = k >> 1 (floor), k2 = k - k1; y = (p * 2^k1) * 2^k2 (the first product is exact,
 *    the second rounds once, also into the subnormal range). */
float kern_expf(float x)
{
    return kn_hd_expf(x); /* kern_hd.h: the one statement of the rule, shared with CUDA */
}

float kern_siluf(float x)
{
    return kn_hd_siluf(x);
}

float kern_swiglu_oaif(float g, float u)
{
    return kn_hd_swiglu_oaif(g, u); /* kern_hd.h, shared with CUDA */
}

float kern_geluf(float x)
{
    return kn_hd_geluf(x);
}

/* ================================================================ double helpers */

static double bits_f64(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

#define LN2_D_HI KN_LN2_D_HI
#define LN2_D_LO KN_LN2_D_LO
#define MAGIC_D KN_MAGIC_D

/* e^x: kern_hd.h's kn_hd_exp_f64 (Taylor to degree 13 around k ln2). */
double kern_exp_f64(double x)
{
    return kn_hd_exp_f64(x);
}

/* log x: x = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m-1)/(m+1),
 * |s| <= 0.172: the odd series to s^25 leaves < 1e-19. log x = e ln2 + log m. */
double kern_log_f64(double x)
{
    if (x != x)
        return x;
    if (x < 0.0)
        return bits_f64(0x7ff8000000000000ull);
    if (x == 0.0)
        return -bits_f64(0x7ff0000000000000ull);
    if (x == bits_f64(0x7ff0000000000000ull))
        return x;
    int64_t e = 0;
    if (x < 0x1p-1022) { /* subnormal: scale into the normal range first */
        x *= 0x1p64;
        e = -64;
    }
    uint64_t u = f64_bits(x);
    e += (int64_t)((u >> 52) & 0x7ff) - 1023;
    double m = bits_f64((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
    if (m > 0x1.6a09e667f3bcdp+0) { /* sqrt(2) */
        m *= 0.5;
        e += 1;
    }
    double s = (m - 1.0) / (m + 1.0);
    double s2 = s * s;
    double p = 1.0 / 25.0;
    for (int n = 23; n >= 3; n -= 2)
        p = fma(p, s2, 1.0 / (double)n);
    /* log m = 2s + 2s * s2 * p */
    double lm = fma(2.0 * s * s2, p, 2.0 * s);
    double ed = (double)e;
    return fma(ed, LN2_D_HI, fma(ed, LN2_D_LO, lm));
}

double kern_pow_f64(double b, double e)
{
    return kern_exp_f64(e * kern_log_f64(b));
}

float kern_logf(float x)
{
    return (float)kern_log_f64((double)x);
}

/* tanh x = (e^2x - 1) / (e^2x + 1) in double (kern_hd.h's kn_hd_tanhf). */
float kern_tanhf(float x)
{
    return kn_hd_tanhf(x);
}

float kern_softcapf(float x, float c)
{
    return kn_hd_softcapf(x, c);
}

void kern_softcap(float *y, const float *x, float c, int64_t n)
{
    const float inv = 1.0f / c;
    for (int64_t i = 0; i < n; i++)
        y[i] = kern_tanhf(x[i] * inv) * c;
}

/* ================================================================ sin / cos
 * Reduce by pi/2: k = round(x * 2/pi), r = fma(-k, PIO2_HI, x), r = fma(-k, PIO2_MID, r)
 * (PIO2_HI + PIO2_MID = pi/2 to 107 bits); |r| <= pi/4 + tiny. Then Taylor series in
 * r^2 to r^17 (sin) and r^16 (cos), Horner with fma, and the quadrant k mod 4 picks and
 * signs the pair. */
void kern_sincos_f64(double x, double *s, double *c)
{
    double ax = x < 0 ? -x : x;
    if (!(ax < 0x1p30)) { /* also NaN */
        *s = *c = bits_f64(0x7ff8000000000000ull);
        return;
    }
    double kd = (x * KN_TWO_OVER_PI + MAGIC_D) - MAGIC_D;
    double r = fma(-kd, KN_PIO2_HI, x);
    r = fma(-kd, KN_PIO2_MID, r);
    double r2 = r * r;
    static const double sc[8] = KN_SIN_COEFFS, cc[8] = KN_COS_COEFFS;
    double ps = sc[0], pc = cc[0];
    for (int i = 1; i < 8; i++) {
        ps = fma(ps, r2, sc[i]);
        pc = fma(pc, r2, cc[i]);
    }
    double sv = fma(r * r2, ps, r);
    double cv = fma(r2, pc, 1.0);
    int64_t q = (int64_t)kd & 3;
    switch (q) {
    case 0: *s = sv; *c = cv; break;
    case 1: *s = cv; *c = -sv; break;
    case 2: *s = -sv; *c = -cv; break;
    default: *s = -cv; *c = sv; break;
    }
}
