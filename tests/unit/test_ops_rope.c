/* test_ops_rope.c: RoPE frequencies (plain, linear scaling, Llama 3.1 factors, YaRN)
 * against the formulas in float64 with libm, the sin/cos table, the rotation in both
 * layouts, bit equality of every ISA level with the reference, and per-token invariance. */
#include <math.h>

#include "check.h"
#include "kernels/ops.h"
#include "test_ops_common.h"

static struct kern_rope_params plain(enum kern_rope_mode mode, int n_rot, double base)
{
    return (struct kern_rope_params){
        .mode = mode, .n_rot = n_rot, .freq_base = base, .freq_scale = 1.0, .attn_factor = 1.0,
    };
}

static void test_init(void)
{
    struct kern_rope r;
    struct kn_err err = {0};
    struct kern_rope_params p = plain(KERN_ROPE_NORM, 63, 10000);
    CHECK(kern_rope_init(&r, &p, &err) == KN_E_FORMAT && strstr(err.msg, "even"));
    p = plain(KERN_ROPE_NORM, 64, 0);
    CHECK(kern_rope_init(&r, &p, &err) == KN_E_FORMAT && strstr(err.msg, "base"));
    p = plain(KERN_ROPE_NORM, 2 * KERN_ROPE_MAX_DIM, 10000);
    CHECK(kern_rope_init(&r, &p, &err) == KN_E_FORMAT);
    float bad[32];
    for (int i = 0; i < 32; i++)
        bad[i] = 1.0f;
    bad[7] = 0.0f;
    p = plain(KERN_ROPE_NORM, 64, 10000);
    p.freq_factors = bad;
    CHECK(kern_rope_init(&r, &p, &err) == KN_E_FORMAT && strstr(err.msg, "factor 7"));
    p = plain(KERN_ROPE_NEOX, 64, 10000);
    p.ext_factor = 1.0; /* YaRN without an original context */
    CHECK(kern_rope_init(&r, &p, &err) == KN_E_FORMAT && strstr(err.msg, "YaRN"));
}

/* Frequencies against libm double formulas (llama.cpp's definitions, in float64). */
static void test_freqs(void)
{
    struct kern_rope r;
    struct kn_err err = {0};
    double worst = 0;
    const double bases[] = {10000.0, 500000.0, 1000000.0};
    const int rots[] = {64, 128, 256, 80};
    static float ff[128];
    for (int i = 0; i < 128; i++)
        ff[i] = i < 20 ? 1.0f : i < 40 ? 1.0f + 0.35f * (float)(i - 20) : 8.0f;
    for (int bi = 0; bi < 3; bi++) {
        for (int ri = 0; ri < 4; ri++) {
            for (int variant = 0; variant < 4; variant++) {
                struct kern_rope_params p = plain(KERN_ROPE_NEOX, rots[ri], bases[bi]);
                if (variant == 1)
                    p.freq_scale = 0.25;
                if (variant == 2)
                    p.freq_factors = ff;
                if (variant == 3) { /* YaRN, e.g. qwen2 with a 4x context extension */
                    p.freq_scale = 0.25;
                    p.ext_factor = 1.0;
                    p.beta_fast = 32.0;
                    p.beta_slow = 1.0;
                    p.n_ctx_orig = 32768;
                }
                CHECK(kern_rope_init(&r, &p, &err) == KN_OK);
                int n = p.n_rot;
                double low = 0, high = 0, ms = 1.0;
                if (variant == 3) {
                    double cd_f = n * log(p.n_ctx_orig / (p.beta_fast * 2 * M_PI)) / (2 * log(p.freq_base));
                    double cd_s = n * log(p.n_ctx_orig / (p.beta_slow * 2 * M_PI)) / (2 * log(p.freq_base));
                    low = fmax(0, floor(cd_f));
                    high = fmin(n - 1, ceil(cd_s));
                    ms = 1.0 + 0.1 * log(1.0 / p.freq_scale);
                }
                CHECK(fabs(r.mscale - ms) < 1e-15);
                for (int i = 0; i < n / 2; i++) {
                    double f = pow(p.freq_base, -2.0 * i / n);
                    if (p.freq_factors)
                        f /= p.freq_factors[i];
                    double pos = 1000.0;
                    double extrap = pos * f, interp = p.freq_scale * extrap, theta = interp;
                    if (variant == 3) {
                        double y = (i - low) / fmax(0.001, high - low);
                        double mix = 1.0 - fmin(1.0, fmax(0.0, y));
                        theta = interp * (1 - mix) + extrap * mix;
                    }
                    worst = fmax(worst, fabs(r.freq[i] * pos - theta) / theta);
                }
            }
        }
    }
    printf("rope frequencies: max relative error %.3g against float64 libm\n", worst);
    CHECKF(worst < 1e-14, "freq error %.3g", worst);
}

/* The table against libm sin/cos of the double angle, up to position 10^6. */
static void test_table(void)
{
    struct kern_rope r;
    struct kn_err err = {0};
    struct kern_rope_params p = plain(KERN_ROPE_NEOX, 128, 1000000.0);
    CHECK(kern_rope_init(&r, &p, &err) == KN_OK);
    int32_t pos[6] = {0, 1, 17, 4095, 131071, 1000000};
    static float tab[6 * 128];
    kern_rope_table(&r, pos, 6, tab);
    double worst = 0;
    for (int t = 0; t < 6; t++) {
        for (int i = 0; i < 64; i++) {
            double a = pos[t] * r.freq[i];
            worst = fmax(worst, fabs(tab[t * 128 + i] - cos(a)));
            worst = fmax(worst, fabs(tab[t * 128 + 64 + i] - sin(a)));
        }
    }
    printf("rope table: max abs error %.3g (float rounding of exact sin/cos)\n", worst);
    CHECKF(worst <= 0x1p-25, "table error %.3g", worst);
    CHECK(tab[0] == 1.0f && tab[64] == 0.0f);
    /* a position's row does not depend on its neighbours in the batch */
    static float one[128];
    kern_rope_table(&r, &pos[4], 1, one);
    CHECK(memcmp(one, tab + 4 * 128, sizeof one) == 0);
}

/* Rotation: the reference against float64 rotation, in both layouts with partial n_rot;
 * every ISA level against the reference; each token alone equals it in a batch. */
static void test_rotate(void)
{
    const struct kern_ops *lv[KN_ISA_COUNT + 1];
    int nl = simd_levels(lv);
    lv[nl++] = kern_ops_get(KN_ISA_SCALAR);
    const struct kern_ops *ref = kern_ops_get(KN_ISA_SCALAR);
    const int dims[][2] = {{64, 64}, {128, 128}, {256, 256}, {64, 32}, {80, 80}, {96, 64},
                           {6, 6}, {2, 2}, {34, 18}, {256, 128}};
    enum { T = 9, H = 3 };
    static float x[T * (H * 256 + 5)], x1[T * (H * 256 + 5)], x2[T * (H * 256 + 5)], tab[T * 256];
    static float solo[H * 256 + 5];
    int32_t pos[T] = {0, 1, 2, 31, 32, 1000, 5000, 70000, 131000};
    double worst = 0;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        for (int mode = 0; mode < 2; mode++) {
            int D = dims[di][0], n_rot = dims[di][1];
            int64_t stride = H * D + 5;
            struct kern_rope r;
            struct kn_err err = {0};
            struct kern_rope_params p = plain((enum kern_rope_mode)mode, n_rot, 10000.0);
            CHECK(kern_rope_init(&r, &p, &err) == KN_OK);
            kern_rope_table(&r, pos, T, tab);
            for (int64_t i = 0; i < T * stride; i++)
                x[i] = rng_f(-3, 3);
            memcpy(x1, x, sizeof(float) * (size_t)(T * stride));
            ref->rope(&r, x1, stride, T, H, D, tab);
            /* float64 check */
            for (int t = 0; t < T; t++) {
                for (int h = 0; h < H; h++) {
                    const float *xi = x + t * stride + h * D;
                    const float *yo = x1 + t * stride + h * D;
                    for (int i = 0; i < n_rot / 2; i++) {
                        int a = mode == KERN_ROPE_NEOX ? i : 2 * i;
                        int b = mode == KERN_ROPE_NEOX ? i + n_rot / 2 : 2 * i + 1;
                        double ang = pos[t] * pow(10000.0, -2.0 * i / n_rot);
                        double y0 = xi[a] * cos(ang) - xi[b] * sin(ang);
                        double y1 = xi[a] * sin(ang) + xi[b] * cos(ang);
                        worst = fmax(worst, fmax(fabs(yo[a] - y0), fabs(yo[b] - y1)));
                    }
                    for (int d = n_rot; d < D; d++)
                        CHECK(yo[d] == xi[d]);
                }
                for (int d = H * D; d < stride; d++) /* padding untouched */
                    CHECK(x1[t * stride + d] == x[t * stride + d]);
            }
            for (int l = 0; l < nl; l++) {
                memcpy(x2, x, sizeof(float) * (size_t)(T * stride));
                lv[l]->rope(&r, x2, stride, T, H, D, tab);
                CHECKF(memcmp(x1, x2, sizeof(float) * (size_t)(T * stride)) == 0,
                       "isa %d rope D=%d n_rot=%d mode=%d", (int)lv[l]->isa, D, n_rot, mode);
                /* token 5 alone */
                memcpy(solo, x + 5 * stride, sizeof(float) * (size_t)stride);
                lv[l]->rope(&r, solo, stride, 1, H, D, tab + 5 * n_rot);
                CHECK(memcmp(solo, x1 + 5 * stride, sizeof(float) * (size_t)stride) == 0);
            }
        }
    }
    printf("rope rotation: max abs error %.3g against float64 (|x| <= 3)\n", worst);
    CHECKF(worst < 1e-5, "rope error %.3g", worst);
}

/* Every ISA's table equals the reference's, over many positions (up to 2^31 - 1: angles
 * of 2^30 and more give NaN on every level), table widths with and without a vector tail,
 * and YaRN's mscale. */
static void test_table_isa(void)
{
    const struct kern_ops *lv[KN_ISA_COUNT];
    int nl = simd_levels(lv);
    const struct kern_ops *ref = kern_ops_get(KN_ISA_SCALAR);
    enum { T = 64 };
    int32_t pos[T];
    for (int t = 0; t < T; t++)
        pos[t] = t < 40 ? t * 37 : t < 60 ? (int32_t)(rng_next() % 2000000) : INT32_MAX - t;
    const int rots[] = {2, 6, 8, 16, 34, 64, 80, 128, 256, 1024};
    static float a[T * 1024], b[T * 1024];
    int n_nan = 0;
    for (int l = 0; l < nl; l++) {
        for (size_t ri = 0; ri < sizeof rots / sizeof rots[0]; ri++) {
            for (int variant = 0; variant < 2; variant++) {
                struct kern_rope r;
                struct kn_err err = {0};
                struct kern_rope_params p = plain(KERN_ROPE_NEOX, rots[ri], 500000.0);
                if (variant) {
                    p.freq_scale = 0.125;
                    p.ext_factor = 1.0;
                    p.beta_fast = 32;
                    p.beta_slow = 1;
                    p.n_ctx_orig = 8192;
                }
                CHECK(kern_rope_init(&r, &p, &err) == KN_OK);
                ref->rope_table(&r, pos, T, a);
                lv[l]->rope_table(&r, pos, T, b);
                CHECKF(memcmp(a, b, sizeof(float) * (size_t)(T * rots[ri])) == 0,
                       "%s rope table n_rot=%d variant %d", isa_label(lv[l]->isa), rots[ri], variant);
                for (int i = 0; i < T * rots[ri]; i++)
                    n_nan += a[i] != a[i];
            }
        }
    }
    CHECK(nl == 0 || n_nan > 0); /* the out-of-range angles were exercised */
    printf("rope table: %d SIMD level(s) compared with the reference\n", nl);
}

int main(void)
{
    test_table_isa();
    test_init();
    test_freqs();
    test_table();
    test_rotate();
    CHECK_DONE();
}
