/* vk_kern.c: records the compute shaders of src/vulkan/shaders (vk_kern.h). Each function
 * checks that the shapes fit its shader (32-bit element offsets, the dispatch limits),
 * fills the shader's push-constant block (the C structs below mirror the GLSL blocks:
 * 32-bit members, no padding) and dispatches. */
#include "vk_kern.h"
#include "../kernels/kern_hd.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most workgroups one dimension of a dispatch may have on every device. */
#define VKK_MAX_GROUPS 65535u

bool vkk_matmul_type(enum quant_type t)
{
    switch (t) {
    case QT_F32: case QT_F16: case QT_BF16:
    case QT_Q8_0: case QT_Q4_0: case QT_Q4_1: case QT_Q5_0: case QT_Q5_1:
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K:
    case QT_Q2_K: case QT_Q3_K: case QT_IQ4_NL: case QT_IQ4_XS: case QT_MXFP4:
        return true;
    default:
        return false;
    }
}

bool vkk_rows_type(enum quant_type t)
{
    return vkk_matmul_type(t);
}

/* ================================================================ fma mode */

/* The modes of each open device (a handful at most): how its shaders compute fmaf,
 * division and sqrt, and the double fma, each probed on first use unless set; and
 * whether the quantized products run their int8 dot product builds. */
#define VKK_MAX_DEVICES 16
struct vkk_modes {
    struct vkr *rt;
    bool fma_known, ds_known, dfma_known, dot_known;
    enum vkk_fma fma;
    struct vkk_divsqrt ds;
    bool soft_dfma;
    bool dot;
};
static struct vkk_modes modes[VKK_MAX_DEVICES];
static pthread_mutex_t fma_lock = PTHREAD_MUTEX_INITIALIZER;

/* Sets rt's fma mode (fma non-NULL), division mode (ds non-NULL), double fma mode
 * (dfma non-NULL) and/or dot product mode (dot non-NULL). */
static void mode_put(struct vkr *rt, const enum vkk_fma *fma, const struct vkk_divsqrt *ds,
                     const bool *dfma, const bool *dot)
{
    pthread_mutex_lock(&fma_lock);
    int slot = -1;
    for (int i = 0; i < VKK_MAX_DEVICES && slot < 0; i++)
        if (modes[i].rt == rt)
            slot = i;
    for (int i = 0; i < VKK_MAX_DEVICES && slot < 0; i++)
        if (!modes[i].rt) {
            slot = i;
            modes[i] = (struct vkk_modes){.rt = rt};
        }
    if (slot >= 0 && fma)
        modes[slot].fma = *fma, modes[slot].fma_known = true;
    if (slot >= 0 && ds)
        modes[slot].ds = *ds, modes[slot].ds_known = true;
    if (slot >= 0 && dfma)
        modes[slot].soft_dfma = *dfma, modes[slot].dfma_known = true;
    if (slot >= 0 && dot)
        modes[slot].dot = *dot, modes[slot].dot_known = true;
    pthread_mutex_unlock(&fma_lock);
}

/* rt's modes where known (each output NULL or filled only if known); true if all asked are. */
static bool mode_get(struct vkr *rt, enum vkk_fma *fma, struct vkk_divsqrt *ds, bool *dfma,
                     bool *dot)
{
    bool ok = false;
    pthread_mutex_lock(&fma_lock);
    for (int i = 0; i < VKK_MAX_DEVICES; i++)
        if (modes[i].rt == rt) {
            ok = (!fma || modes[i].fma_known) && (!ds || modes[i].ds_known) &&
                 (!dfma || modes[i].dfma_known) && (!dot || modes[i].dot_known);
            if (ok && fma)
                *fma = modes[i].fma;
            if (ok && ds)
                *ds = modes[i].ds;
            if (ok && dfma)
                *dfma = modes[i].soft_dfma;
            if (ok && dot)
                *dot = modes[i].dot;
        }
    pthread_mutex_unlock(&fma_lock);
    return ok;
}

void vkk_fma_set(struct vkr *rt, enum vkk_fma mode)
{
    mode_put(rt, &mode, NULL, NULL, NULL);
}

void vkk_divsqrt_set(struct vkr *rt, struct vkk_divsqrt mode)
{
    mode_put(rt, NULL, &mode, NULL, NULL);
}

void vkk_dfma_set(struct vkr *rt, bool soft)
{
    mode_put(rt, NULL, NULL, &soft, NULL);
}

bool vkk_dot_set(struct vkr *rt, bool on)
{
    on = on && vkr_device_info(rt)->int_dot;
    mode_put(rt, NULL, NULL, NULL, &on);
    return on;
}

bool vkk_dot(struct vkr *rt)
{
    bool on;
    if (mode_get(rt, NULL, NULL, NULL, &on))
        return on;
    const char *env = getenv(VKK_DOT_ENV);
    return vkk_dot_set(rt, !(env && strcmp(env, "0") == 0));
}

void vkk_fma_forget(struct vkr *rt)
{
    pthread_mutex_lock(&fma_lock);
    for (int i = 0; i < VKK_MAX_DEVICES; i++)
        if (modes[i].rt == rt)
            modes[i].rt = NULL;
    pthread_mutex_unlock(&fma_lock);
}

static bool fma_lookup(struct vkr *rt, enum vkk_fma *mode)
{
    return mode_get(rt, mode, NULL, NULL, NULL);
}

/* Crafted triples: random magnitudes over a wide range, products whose low half decides
 * the sum (c = -round(a * b)), ties of the final rounding, signed zeros, infinities and
 * overflow; no NaN results (a NaN's sign and payload are not part of canonical-1). */
static int probe_inputs(float *t, int n)
{
    uint64_t s = 0x243f6a8885a308d3ull;
    int k = 0;
    for (int i = 0; i < n - 8; i++, k++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(s >> 32);
        float a = ldexpf(1.0f + (float)(r & 0xffffff) * 0x1p-24f, (int)(r >> 27) - 16);
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        r = (uint32_t)(s >> 32);
        float b = ldexpf(1.0f + (float)(r & 0xffffff) * 0x1p-24f, (int)(r >> 27) - 16);
        if (r & 1)
            b = -b;
        volatile float ab = a * b;
        float c = (i % 3 == 0) ? -ab : (i % 3 == 1) ? ab * 0x1p-20f : ldexpf((float)(r >> 8), -40);
        t[3 * k] = a, t[3 * k + 1] = b, t[3 * k + 2] = c;
    }
    static const float fixed[8][3] = {
        {1.0f + 0x1p-12f, 1.0f + 0x1p-12f, -1.0f}, /* the fused result keeps 2^-24 */
        {1.0f + 0x1p-23f, 1.0f - 0x1p-23f, -1.0f}, /* -2^-46 exactly */
        {0x1p-70f, 0x1p-70f, 0x1p-149f},           /* a product below the subnormals */
        {-0.0f, 1.0f, 0.0f},                       /* +0 */
        {-0.0f, 1.0f, -0.0f},                      /* -0 */
        {INFINITY, 2.0f, 1.0f},
        {0x1p100f, 0x1p100f, 1.0f},                /* overflow (no NaN: its bits are free) */
        {3.0f, 0x1.555556p-2f, -1.0f},
    };
    for (int i = 0; i < 8; i++, k++)
        memcpy(&t[3 * k], fixed[i], sizeof fixed[i]);
    return k;
}

/* Runs the probe shader shader on n triples; *bad = outputs that differ from fmaf. */
static enum kn_status probe_run(struct vkr *rt, const char *shader, const float *t, int n,
                                int *bad, struct kn_err *err)
{
    enum kn_status st = KN_E_NOMEM;
    struct vkr_cmd *c = vkr_cmd_create(rt, err);
    struct vkr_buf *bi = vkr_buf_alloc(rt, (size_t)n * 12, VKR_MEM_DEVICE, false, err);
    struct vkr_buf *bo = vkr_buf_alloc(rt, (size_t)n * 4, VKR_MEM_DEVICE, false, err);
    float *out = malloc((size_t)n * 4);
    if (!c || !bi || !bo || !out)
        goto done;
    const struct vkr_pipe *p = vkr_pipe_get(rt, &(struct vkr_pipe_desc){
        .shader = shader, .n_bufs = 2, .push_bytes = 4}, err);
    if (!p) {
        st = KN_E_UNSUPPORTED;
        goto done;
    }
    uint32_t n32 = (uint32_t)n;
    vkr_cmd_begin(c);
    vkr_cmd_write(c, bi, 0, t, (size_t)n * 12);
    struct vkr_bind b[2] = {{.buf = bi}, {.buf = bo, .write = true}};
    vkr_cmd_dispatch(c, p, b, &n32, vkr_groups(n, 64), 1, 1);
    vkr_cmd_read(c, bo, 0, out, (size_t)n * 4);
    st = vkr_cmd_submit(c, err);
    if (st == KN_OK) {
        *bad = 0;
        for (int i = 0; i < n; i++) {
            float want = fmaf(t[3 * i], t[3 * i + 1], t[3 * i + 2]);
            *bad += memcmp(&want, &out[i], 4) != 0;
        }
    }
done:
    free(out);
    vkr_buf_free(rt, bo);
    vkr_buf_free(rt, bi);
    vkr_cmd_free(c);
    return st;
}

enum kn_status vkk_fma_probe(struct vkr *rt, enum vkk_fma *mode, struct kn_err *err)
{
    enum { N = 4096 };
    static float t[3 * N];
    static int n;
    /* the inputs are the same for every device: made once */
    pthread_mutex_lock(&fma_lock);
    if (!n)
        n = probe_inputs(t, N);
    pthread_mutex_unlock(&fma_lock);
    int bad_native = 0, bad_f64 = 0;
    enum kn_status st = probe_run(rt, "fma_probe", t, n, &bad_native, err);
    if (st != KN_OK)
        return st;
    if (bad_native == 0) {
        *mode = VKK_FMA_NATIVE;
        return KN_OK;
    }
    if (!vkr_device_info(rt)->float64)
        return kn_fail(err, KN_E_MISMATCH, "fma: the driver's fma is not fused (%d of %d "
                       "probes differ from fmaf) and the device has no shaderFloat64 to "
                       "compute it exactly", bad_native, n);
    st = probe_run(rt, "fma_probe_f64", t, n, &bad_f64, err);
    if (st != KN_OK)
        return st;
    if (bad_f64)
        return kn_fail(err, KN_E_MISMATCH, "fma: the driver's fma is not fused (%d of %d "
                       "probes differ) and the double-precision fma differs on %d",
                       bad_native, n, bad_f64);
    *mode = VKK_FMA_F64;
    return KN_OK;
}

/* ================================================================ division and sqrt */

static uint64_t ds_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

int vkk_divsqrt_cases(float *a, float *b, int n)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int k = 0;
    static const float fixed[][2] = {
        {1.0f, 3.0f}, {2.0f, 3.0f}, {-1.0f, 3.0f}, {0x1p-149f, 3.0f}, {0x1p-149f, 2.0f},
        {0x3p-149f, 2.0f}, {0x1p-126f, 0x1.000002p+0f}, {0x1.fffffep+127f, 0x1p-1f},
        {0x1.fffffep+127f, 0x1.fffffep-1f}, {0x1p-100f, 0x1p+100f}, {0x1p-20f, 0x1p+110f},
        {0.0f, 1.0f}, {-0.0f, 1.0f}, {1.0f, 0.0f}, {1.0f, -0.0f}, {0.0f, 0.0f},
        {INFINITY, 2.0f}, {2.0f, INFINITY}, {INFINITY, INFINITY}, {-INFINITY, 0.0f},
        {NAN, 1.0f}, {1.0f, NAN}, {-2.0f, 1.0f}, {0x1.fffffep-127f, 0x1p-23f},
        {0x1p-149f, 0x1p-149f}, {0x1.8p-149f, 0x1.fffffep+127f},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && k < n; i++, k++)
        a[k] = fixed[i][0], b[k] = fixed[i][1];
    /* quotients within 2^-44 (relative) of a tie: A 2^25 = X B + d for an odd 25-bit X (a
     * midpoint between 24-bit mantissas) and a small odd d, so a / b = (X + d / B) 2^-25 */
    for (int i = 0; k < n / 2 && i < 4 * n; i++) {
        uint32_t B = (uint32_t)(ds_next(&s) & 0x7fffff) | 0x800001u; /* odd, 24 bits */
        uint32_t inv = B; /* B^-1 mod 2^32 by Newton's iteration */
        for (int j = 0; j < 5; j++)
            inv *= 2u - B * inv;
        int32_t d = (int32_t)(ds_next(&s) % 7) * 2 - 7; /* -7, -5, .., 5 */
        uint32_t X = (uint32_t)(-(int64_t)d * (int64_t)inv) & 0x1ffffffu;
        if (X < 0x1000000u)
            continue;
        uint64_t num = (uint64_t)X * B + (uint64_t)(int64_t)d;
        if (num % (1u << 25))
            continue;
        uint32_t A = (uint32_t)(num >> 25);
        /* exponents: normal results, subnormal ones and near overflow */
        int ea = (int)(ds_next(&s) % 200) - 100, eb = (int)(ds_next(&s) % 200) - 100;
        if (i % 5 == 1)
            ea = -120 - (int)(ds_next(&s) % 10), eb = (int)(ds_next(&s) % 20); /* subnormal */
        if (i % 5 == 2)
            ea = 100 + (int)(ds_next(&s) % 4), eb = -(int)(ds_next(&s) % 30) - 2; /* huge */
        a[k] = ldexpf((float)A, ea) * ((ds_next(&s) & 1) ? -1.0f : 1.0f);
        b[k] = ldexpf((float)B, eb - 23);
        k++;
    }
    /* roots within 2^-44 (relative) of a tie: A 2^27 + r = x^2 for an odd 25-bit x and a
     * small r = 1 mod 8 (x from the 2-adic root of r), so sqrt(A 2^27) is just by x */
    for (int i = 0; k < n - n / 8 && i < 4 * n; i++) {
        static const int32_t rs[7] = {1, 9, 17, 25, -7, -15, -23};
        int32_t r = rs[ds_next(&s) % 7];
        uint32_t x = 1; /* x^2 = r mod 2^k, lifted one bit at a time */
        for (int j = 3; j < 27; j++)
            if ((((uint64_t)x * x - (uint64_t)(int64_t)r) >> j) & 1)
                x += 1u << (j - 1);
        uint32_t cand[2] = {x & 0x3ffffffu, (0x4000000u - x) & 0x3ffffffu};
        for (int c = 0; c < 2 && k < n - n / 8; c++) {
            uint32_t y = cand[c];
            if (y < 0x1000000u || y >= 0x2000000u)
                continue;
            uint64_t sq = (uint64_t)y * y - (uint64_t)(int64_t)r;
            uint32_t A = (uint32_t)(sq >> 27);
            int e2 = 2 * ((int)(ds_next(&s) % 60) - 30) + (i % 3 == 0 ? -96 : 0);
            a[k] = ldexpf((float)A, 27 + e2 - 50);
            b[k] = 1.0f + (float)(ds_next(&s) & 0xffff) * 0x1p-16f;
            k++;
        }
    }
    /* random finite pairs over the whole range, subnormals included */
    for (; k < n; k++) {
        a[k] = vkk_f32((uint32_t)ds_next(&s) & 0xff7fffffu);
        b[k] = vkk_f32((uint32_t)ds_next(&s) & 0xff7fffffu);
    }
    return k;
}

/* Runs a probe shader (d: two bindings, n in its push constants) over n items: in
 * (in_bytes, staged into the pass), its output (out_bytes) read into out. */
static enum kn_status probe_dispatch(struct vkr *rt, const struct vkr_pipe_desc *d, const void *in,
                                     size_t in_bytes, void *out, size_t out_bytes, int n,
                                     struct kn_err *err)
{
    enum kn_status st = KN_E_NOMEM;
    struct vkr_cmd *c = vkr_cmd_create(rt, err);
    struct vkr_buf *bo = vkr_buf_alloc(rt, out_bytes, VKR_MEM_DEVICE, false, err);
    const struct vkr_pipe *p = c && bo ? vkr_pipe_get(rt, d, err) : NULL;
    if (c && bo && !p)
        st = err ? err->status : KN_E_UNSUPPORTED;
    if (p) {
        uint32_t n32 = (uint32_t)n;
        vkr_cmd_begin(c);
        struct vkr_bind bind[2] = {vkr_cmd_stage(c, in, in_bytes), {.buf = bo, .write = true}};
        vkr_cmd_dispatch(c, p, bind, &n32, vkr_groups(n, 64), 1, 1);
        vkr_cmd_read(c, bo, 0, out, out_bytes);
        st = vkr_cmd_submit(c, err);
    }
    vkr_buf_free(rt, bo);
    vkr_cmd_free(c);
    return st;
}

enum kn_status vkk_divsqrt_run(struct vkr *rt, struct vkk_divsqrt mode, const float *a,
                               const float *b, int n, float *q, float *r, struct kn_err *err)
{
    float *in = malloc((size_t)n * 8), *out = malloc((size_t)n * 8);
    enum kn_status st = in && out ? KN_OK : kn_fail(err, KN_E_NOMEM, "Vulkan division probe: "
                                                    "out of memory");
    const uint32_t spec[2] = {mode.soft_div, mode.soft_sqrt};
    for (int i = 0; i < n && st == KN_OK; i++)
        in[2 * i] = a[i], in[2 * i + 1] = b[i];
    if (st == KN_OK)
        st = probe_dispatch(rt, &(struct vkr_pipe_desc){.shader = "divsqrt_probe", .n_bufs = 2,
                                                        .push_bytes = 4, .spec = spec, .n_spec = 2},
                            in, (size_t)n * 8, out, (size_t)n * 8, n, err);
    for (int i = 0; i < n && st == KN_OK; i++)
        q[i] = out[2 * i], r[i] = out[2 * i + 1];
    free(in);
    free(out);
    return st;
}

/* Whether got is the correctly rounded want (any NaN for a NaN: its bits are free). */
static bool ds_same(float got, float want)
{
    return vkk_u32(got) == vkk_u32(want) || (isnan(got) && isnan(want));
}

enum kn_status vkk_divsqrt_probe(struct vkr *rt, struct vkk_divsqrt *mode, int *bad_div,
                                 int *bad_sqrt, struct kn_err *err)
{
    enum { N = 2048 };
    float *a = malloc(4 * N * sizeof(float));
    if (!a)
        return kn_fail(err, KN_E_NOMEM, "Vulkan division probe: out of memory");
    float *b = a + N, *q = b + N, *r = q + N;
    int n = vkk_divsqrt_cases(a, b, N);
    struct vkk_divsqrt drv = {false, false}, soft = {true, true};
    int bd = 0, bs = 0, sd = 0, ss = 0;
    enum kn_status st = vkk_divsqrt_run(rt, drv, a, b, n, q, r, err);
    for (int i = 0; i < n && st == KN_OK; i++) {
        bd += !ds_same(q[i], a[i] / b[i]);
        bs += !ds_same(r[i], sqrtf(a[i]));
    }
    if (st == KN_OK && (bd || bs)) { /* the integer builds must then be exact here */
        st = vkk_divsqrt_run(rt, soft, a, b, n, q, r, err);
        for (int i = 0; i < n && st == KN_OK; i++) {
            sd += !ds_same(q[i], a[i] / b[i]);
            ss += !ds_same(r[i], sqrtf(a[i]));
        }
        if (st == KN_OK && ((bd && sd) || (bs && ss)))
            st = kn_fail(err, KN_E_MISMATCH, "division and sqrt: the driver's differ on %d and "
                         "%d of %d hard cases and the integer builds on %d and %d", bd, bs, n,
                         sd, ss);
    }
    free(a);
    if (bad_div)
        *bad_div = bd;
    if (bad_sqrt)
        *bad_sqrt = bs;
    if (st == KN_OK)
        *mode = (struct vkk_divsqrt){.soft_div = bd > 0, .soft_sqrt = bs > 0};
    return st;
}

/* c's device's division mode, probed on first use. */
static bool ds_mode(struct vkr_cmd *c, struct vkk_divsqrt *mode)
{
    struct vkr *rt = vkr_cmd_rt(c);
    if (mode_get(rt, NULL, mode, NULL, NULL))
        return true;
    struct kn_err err = {0};
    if (vkk_divsqrt_probe(rt, mode, NULL, NULL, &err) != KN_OK) {
        vkr_cmd_fail(c, KN_E_MISMATCH, "Vulkan: %s", err.msg);
        return false;
    }
    vkk_divsqrt_set(rt, *mode);
    return true;
}

/* The mode for c's device, probed on first use. */
static bool fma_mode(struct vkr_cmd *c, enum vkk_fma *mode)
{
    struct vkr *rt = vkr_cmd_rt(c);
    if (fma_lookup(rt, mode))
        return true;
    struct kn_err err = {0};
    if (vkk_fma_probe(rt, mode, &err) != KN_OK) {
        vkr_cmd_fail(c, KN_E_MISMATCH, "Vulkan: %s", err.msg);
        return false;
    }
    vkk_fma_set(rt, *mode);
    return true;
}

/* ================================================================ double fma */

static double dfma_f64(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* A double in [1, 2) with random low bits (bits of them: the mantissa's), times 2^e. */
static double dfma_mant(uint64_t *s, int bits, int e)
{
    uint64_t m = ds_next(s) & ((1ull << bits) - 1);
    return ldexp(1.0 + ldexp((double)m, -bits), e);
}

int vkk_dfma_cases(double *t, int n, uint64_t seed)
{
    static const double fixed[][3] = {
        {1.0 + 0x1p-26, 1.0 + 0x1p-27, 0.0},           /* a tie of the product, kept even */
        {1.0 + 0x1p-26, 1.0 + 0x1p-27, 0x1p-52},       /* a tie rounded up */
        {1.0 + 0x1p-26, 1.0 + 0x1p-27, -0x1p-53},      /* the tie cancelled: exact */
        {1.0 + 0x1p-52, 1.0 - 0x1p-52, -1.0},          /* -2^-104 exactly */
        {0x1.fffffffffffffp0, 0x1.fffffffffffffp0, 0x1p-50},   /* carry into the exponent */
        {0x1.fffffffffffffp0, 0x1.fffffffffffffp0, -4.0},      /* cancellation to 2^-50 */
        {0x1.fffffffffffffp-1, 0x1.0000000000001p0, -1.0},     /* -2^-106 exactly */
        {2.0, 3.0, -6.0}, {-2.0, 3.0, 6.0},            /* +0 from an exact cancellation */
        {0x1p-1074, 0.5, 0.0}, {0x1p-1074, 1.5, 0.0},  /* subnormal ties: 0 and 2^-1073 */
        {0x1p-1000, 0x1p-70, 0x1p-1074},               /* a subnormal sum */
        {0x1.8p-1060, 0x1p-10, -0x1p-1073},            /* a subnormal difference */
        {0x1p-537, 0x1p-537, 0x1p-1074},               /* a product below the subnormals */
        {0x1.fffffffffffffp1023, 1.0, 0x1p970},        /* the tie to overflow: inf */
        {0x1p1000, 0x1p100, 1.0},                      /* overflow */
        {0x1p1000, 0x1p100, -0x1.fffffffffffffp1023},  /* overflow beside a huge addend */
        {-0.0, 1.0, 0.0}, {0.0, -1.0, -0.0}, {1.0, 0.0, -2.5},
        {1.0, 1.0, 0x1p-600},                          /* an addend only sticky */
        {0x1p-600, 0x1p-600, 1.0},                     /* a product only sticky */
        {3.0, 0x1.5555555555555p-2, -1.0},             /* 3 * (1/3) - 1 */
    };
    uint64_t s = seed ? seed : 0x2545f4914f6cdd1dull;
    int k = 0;
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0] && k < n; i++, k++)
        memcpy(&t[3 * k], fixed[i], sizeof fixed[i]);
    for (int i = 0; k < n; i++, k++) {
        double a, b, c;
        int e1 = (int)(ds_next(&s) % 80) - 40, e2 = (int)(ds_next(&s) % 80) - 40;
        switch (i % 7) {
        case 0: /* products whose low half decides: c = -round(a b), nudged by ulps */
            a = dfma_mant(&s, 52, e1), b = dfma_mant(&s, 52, e2);
            c = -(a * b) * (1.0 + ldexp((double)((int)(ds_next(&s) % 5) - 2), -53));
            break;
        case 1: /* 27-bit factors: exact products of 54 bits, ties with a power of 2 */
            a = dfma_mant(&s, 26, 0), b = dfma_mant(&s, 26, 0);
            c = ldexp((ds_next(&s) & 1) ? 1.0 : -1.0, -(int)(ds_next(&s) % 110));
            break;
        case 2: /* subnormal factors and sums */
            a = ldexp((double)(ds_next(&s) >> 11), -1074 + (int)(ds_next(&s) % 60));
            b = dfma_mant(&s, 52, -(int)(ds_next(&s) % 40));
            c = (ds_next(&s) & 1) ? -(a * b) : ldexp((double)(ds_next(&s) >> 30), -1074);
            break;
        case 3: /* magnitudes far apart */
            a = dfma_mant(&s, 52, (int)(ds_next(&s) % 200) - 100);
            b = dfma_mant(&s, 52, (int)(ds_next(&s) % 200) - 100);
            c = dfma_mant(&s, 52, (int)(ds_next(&s) % 400) - 200);
            break;
        case 4: { /* tanh's steps: kern_exp_f64's reduction and its Horner steps */
            double x = ldexp(1.0 + (double)(ds_next(&s) & 0xffffff) * 0x1p-24,
                             (int)(ds_next(&s) % 17) - 11);
            double kd = nearbyint(x / 0x1.62e42fefa39efp-1);
            a = -kd;
            b = (i / 7) % 2 ? 0x1.62e42fefa39efp-1 : 0x1.abc9e3b39803fp-56;
            c = (i / 7) % 2 ? x : ldexp(dfma_mant(&s, 52, -2), -(int)(ds_next(&s) % 30));
            if ((i / 7) % 4 == 3) /* p = fma(p, r, 1/n!) */
                a = dfma_mant(&s, 52, -(int)(ds_next(&s) % 30)),
                b = ldexp(dfma_mant(&s, 52, -2), -(int)(ds_next(&s) % 20)),
                c = 1.0 / (double)(2 + ds_next(&s) % 12);
            break;
        }
        case 5: /* huge products beside the largest finite */
            a = dfma_mant(&s, 52, 1000 + (int)(ds_next(&s) % 30));
            b = dfma_mant(&s, 52, (int)(ds_next(&s) % 40) - 20);
            c = (ds_next(&s) & 1) ? -0x1.fffffffffffffp1023 : 0.0;
            break;
        default: /* random finite bit patterns */
            do
                a = dfma_f64(ds_next(&s) << 11 ^ ds_next(&s));
            while (!isfinite(a));
            do
                b = dfma_f64(ds_next(&s) << 11 ^ ds_next(&s));
            while (!isfinite(b));
            do
                c = dfma_f64(ds_next(&s) << 11 ^ ds_next(&s));
            while (!isfinite(c));
            break;
        }
        if (ds_next(&s) & 1)
            a = -a;
        t[3 * k] = a, t[3 * k + 1] = b, t[3 * k + 2] = c;
    }
    return k;
}

enum kn_status vkk_dfma_run(struct vkr *rt, bool soft, const double *t, int n, double *fma,
                            double *quo, float *cvt, struct kn_err *err)
{
    if (!vkr_device_info(rt)->float64)
        return kn_fail(err, KN_E_UNSUPPORTED, "the device has no shaderFloat64");
    uint32_t *out = malloc((size_t)n * 20);
    if (!out)
        return kn_fail(err, KN_E_NOMEM, "Vulkan double fma probe: out of memory");
    const uint32_t spec[3] = {0, 0, soft}; /* kn_common.glsl's KN_SOFT_DFMA */
    enum kn_status st = probe_dispatch(
        rt, &(struct vkr_pipe_desc){.shader = "dfma_probe", .n_bufs = 2, .push_bytes = 4,
                                    .spec = spec, .n_spec = 3},
        t, (size_t)n * 24, out, (size_t)n * 20, n, err);
    for (int i = 0; i < n && st == KN_OK; i++) {
        if (fma)
            memcpy(&fma[i], &out[5 * i], 8);
        if (quo)
            memcpy(&quo[i], &out[5 * i + 2], 8);
        if (cvt)
            memcpy(&cvt[i], &out[5 * i + 4], 4);
    }
    free(out);
    return st;
}

/* Whether got is want's bits (any NaN for a NaN: its bits are free). */
static bool dfma_same(double got, double want)
{
    return memcmp(&got, &want, sizeof got) == 0 || (isnan(got) && isnan(want));
}

enum kn_status vkk_dfma_probe(struct vkr *rt, bool *soft, int *bad, struct kn_err *err)
{
    enum { N = 2048 };
    double *t = malloc((size_t)N * 5 * sizeof(double));
    float *cv = malloc((size_t)N * sizeof(float));
    if (!t || !cv) {
        free(t);
        free(cv);
        return kn_fail(err, KN_E_NOMEM, "Vulkan double fma probe: out of memory");
    }
    double *f = t + 3 * N, *q = t + 4 * N;
    int n = vkk_dfma_cases(t, N, 0);
    int bf = 0, bq = 0, bc = 0, sf = 0;
    enum kn_status st = vkk_dfma_run(rt, false, t, n, f, q, cv, err);
    for (int i = 0; i < n && st == KN_OK; i++) {
        bf += !dfma_same(f[i], fma(t[3 * i], t[3 * i + 1], t[3 * i + 2]));
        bq += !dfma_same(q[i], t[3 * i] / t[3 * i + 1]);
        float want = (float)t[3 * i];
        bc += !(vkk_u32(cv[i]) == vkk_u32(want) || (isnan(cv[i]) && isnan(want)));
    }
    if (st == KN_OK && bf) { /* the integer build must then be exact here */
        st = vkk_dfma_run(rt, true, t, n, f, NULL, NULL, err);
        for (int i = 0; i < n && st == KN_OK; i++)
            sf += !dfma_same(f[i], fma(t[3 * i], t[3 * i + 1], t[3 * i + 2]));
    }
    if (st == KN_OK && (sf || bq || bc))
        st = kn_fail(err, KN_E_MISMATCH, "double math: the driver's fma differs on %d of %d hard "
                     "cases and the integer build on %d; its division on %d, its conversion "
                     "to float on %d", bf, n, sf, bq, bc);
    free(t);
    free(cv);
    if (bad)
        *bad = bf;
    if (st == KN_OK)
        *soft = bf > 0;
    return st;
}

/* c's device's double fma mode, probed on first use. */
static bool dfma_mode(struct vkr_cmd *c, bool *soft)
{
    struct vkr *rt = vkr_cmd_rt(c);
    if (mode_get(rt, NULL, NULL, soft, NULL))
        return true;
    struct kn_err err = {0};
    if (vkk_dfma_probe(rt, soft, NULL, &err) != KN_OK) {
        vkr_cmd_fail(c, KN_E_MISMATCH, "Vulkan: %s", err.msg);
        return false;
    }
    vkk_dfma_set(rt, *soft);
    return true;
}

/* The pipeline of shader (its _f64 build when fused is set and c's device needs it; with
 * dbl, its double math's fma as the device needs it; its _dot build where there is one
 * and the device runs them, vkk_dot). */
static const struct vkr_pipe *pipe_x(struct vkr_cmd *c, const char *shader, bool fused, bool dbl,
                                     uint32_t n_bufs, uint32_t push_bytes)
{
    char name[64];
    enum vkk_fma mode = VKK_FMA_NATIVE;
    struct vkk_divsqrt ds;
    bool soft_dfma = false;
    if ((fused && !fma_mode(c, &mode)) || !ds_mode(c, &ds) || (dbl && !dfma_mode(c, &soft_dfma)))
        return NULL;
    snprintf(name, sizeof name, "%s%s", shader, mode == VKK_FMA_F64 ? "_f64" : "");
    size_t len = strlen(name);
    if (len + sizeof "_dot" <= sizeof name && vkk_dot(vkr_cmd_rt(c))) {
        memcpy(name + len, "_dot", sizeof "_dot");
        if (!vkr_shader_find(name))
            name[len] = '\0'; /* this shader has no dot product build */
    }
    /* kn_common.glsl's KN_SOFT_DIV, KN_SOFT_SQRT, KN_SOFT_DFMA */
    const uint32_t spec[3] = {ds.soft_div, ds.soft_sqrt, soft_dfma};
    return vkr_cmd_pipe(c, &(struct vkr_pipe_desc){.shader = name, .n_bufs = n_bufs,
                                                   .push_bytes = push_bytes, .spec = spec,
                                                   .n_spec = 3});
}

/* A shader without fma. */
static const struct vkr_pipe *pipe(struct vkr_cmd *c, const char *shader, uint32_t n_bufs,
                                   uint32_t push_bytes)
{
    return pipe_x(c, shader, false, false, n_bufs, push_bytes);
}

/* A shader with fma. */
static const struct vkr_pipe *pipe_f(struct vkr_cmd *c, const char *shader, uint32_t n_bufs,
                                     uint32_t push_bytes)
{
    return pipe_x(c, shader, true, false, n_bufs, push_bytes);
}

static struct vkr_bind ro(const struct vkr_buf *b)
{
    return (struct vkr_bind){.buf = b};
}

static struct vkr_bind rw(const struct vkr_buf *b)
{
    return (struct vkr_bind){.buf = b, .write = true};
}

/* False (and the pass failed) when v does not fit the shaders' 32-bit indices. */
static bool fits(struct vkr_cmd *c, const char *op, int64_t v)
{
    if (v >= 0 && v <= (int64_t)UINT32_MAX)
        return true;
    vkr_cmd_fail(c, KN_E_LIMIT, "Vulkan %s: a size of %lld is over the shaders' 32-bit "
                 "indices", op, (long long)v);
    return false;
}

/* False (and the pass failed) when elems 32-bit elements from r.off do not lie in r's
 * buffer: a shader never writes or reads past a buffer. */
static bool span(struct vkr_cmd *c, const char *op, struct vkk_ref r, int64_t elems)
{
    if (!fits(c, op, (int64_t)r.off + elems))
        return false;
    if (!r.buf || ((uint64_t)r.off + (uint64_t)elems) * 4 > vkr_buf_size(r.buf)) {
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan %s: %lld elements from %u are past the end of a "
                     "buffer of %zu bytes", op, (long long)elems, (unsigned)r.off,
                     r.buf ? vkr_buf_size(r.buf) : 0);
        return false;
    }
    return true;
}

/* ================================================================ large tensors */

/* Rows r0.. of a tensor of N rows of row_bytes in buf, as much as one storage binding of
 * the device holds (at most max_rows): the binding starts at the aligned byte at or below
 * row r0's (base), the shaders subtract base from their byte addresses (32-bit
 * arithmetic, so the difference is right even past 4 GiB). */
struct rows_part {
    int64_t r0, r1;
    struct vkr_bind bind;
    uint32_t base;
};

static _Atomic uint64_t binding_limit; /* vkk_limit_bindings; 0: the device's */

void vkk_limit_bindings(uint64_t bytes)
{
    binding_limit = bytes;
}

uint64_t vkk_binding_bytes(struct vkr *rt)
{
    uint64_t range = vkr_device_info(rt)->max_storage_range, lim = binding_limit;
    return lim && lim < range ? lim : range;
}

static bool rows_part(struct vkr_cmd *c, const struct vkr_buf *buf, int64_t N, size_t row_bytes,
                      int64_t max_rows, int64_t r0, struct rows_part *p)
{
    const struct vkr_info *in = vkr_device_info(vkr_cmd_rt(c));
    size_t align = in->storage_align > 4 ? in->storage_align : 4;
    uint64_t range = vkk_binding_bytes(vkr_cmd_rt(c));
    size_t off = (size_t)r0 * row_bytes / align * align;
    int64_t fit = range > align + 8 ? (int64_t)((range - align - 8) / row_bytes) : 0;
    fit = fit < max_rows ? fit : max_rows;
    if (fit < 1) {
        vkr_cmd_fail(c, KN_E_LIMIT, "Vulkan: a tensor row of %zu bytes is over %s's largest "
                     "storage binding (%llu bytes)", row_bytes, in->name,
                     (unsigned long long)range);
        return false;
    }
    int64_t r1 = N - r0 < fit ? N : r0 + fit;
    size_t end = ((size_t)r1 * row_bytes + 3) & ~(size_t)3, size = vkr_buf_size(buf);
    end = end < size ? end : size;
    *p = (struct rows_part){r0, r1, {.buf = buf, .off = off, .bytes = end - off}, (uint32_t)off};
    return true;
}

/* ================================================================ embed */

struct embed_pc {
    uint32_t type, E, row_bytes, T, x_off, tok_off, has_scale;
    float scale;
    uint32_t r0, r1, t_base;
};

void vkk_embed(struct vkr_cmd *c, struct vkk_ref x, const struct vkr_buf *table,
               enum quant_type type,
               int64_t E, size_t row_bytes, const int32_t *tokens, int64_t T, float scale)
{
    if (T <= 0 || E <= 0 || vkr_cmd_failed(c))
        return;
    if (!vkk_rows_type(type)) {
        vkr_cmd_fail(c, KN_E_UNSUPPORTED, "Vulkan embed: no shader reads rows of type %u",
                     (unsigned)type);
        return;
    }
    if (!span(c, "embed", x, T * E) || T > VKK_MAX_GROUPS)
        return;
    struct vkr_bind tok = vkr_cmd_stage(c, tokens, (size_t)T * sizeof *tokens);
    if (!tok.buf)
        return;
    struct embed_pc pc = {(uint32_t)type, (uint32_t)E, (uint32_t)row_bytes, (uint32_t)T, x.off, 0,
                          scale != 1.0f, scale, 0, 0, 0};
    /* the rows a binding holds, one dispatch per part (each writes its tokens' rows) */
    int64_t N = (int64_t)(vkr_buf_size(table) / row_bytes);
    struct rows_part rp;
    for (int64_t r0 = 0; r0 < N; r0 = rp.r1) {
        if (!rows_part(c, table, N, row_bytes, N, r0, &rp))
            return;
        pc.r0 = (uint32_t)rp.r0, pc.r1 = (uint32_t)rp.r1, pc.t_base = rp.base;
        struct vkr_bind b[3] = {rp.bind, tok, rw(x.buf)};
        vkr_cmd_dispatch(c, pipe(c, "embed", 3, sizeof pc), b, &pc, vkr_groups(E, 64),
                         (uint32_t)T, 1);
    }
}

/* ================================================================ RoPE */

struct rope_pc {
    uint32_t x_off, tab_off, T, H, D, n_rot, neox;
};

void vkk_rope(struct vkr_cmd *c, struct vkk_ref x, struct vkk_ref tab, const struct kern_rope *rope,
              int64_t T, int64_t H, int64_t D)
{
    if (T <= 0 || H <= 0 || vkr_cmd_failed(c))
        return;
    if (rope->n_rot > D) {
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan rope: %d rotated dims but head dim %lld",
                     (int)rope->n_rot, (long long)D);
        return;
    }
    if (!span(c, "rope", x, T * H * D) || !span(c, "rope", tab, T * rope->n_rot) ||
        T > VKK_MAX_GROUPS || H > VKK_MAX_GROUPS)
        return;
    struct rope_pc pc = {x.off, tab.off, (uint32_t)T, (uint32_t)H, (uint32_t)D,
                         (uint32_t)rope->n_rot, rope->mode == KERN_ROPE_NEOX};
    struct vkr_bind b[2] = {rw(x.buf), ro(tab.buf)};
    vkr_cmd_dispatch(c, pipe_f(c, "rope", 2, sizeof pc), b, &pc,
                     vkr_groups(rope->n_rot / 2, 64), (uint32_t)H, (uint32_t)T);
}

/* ================================================================ RMSNorm */

struct rmsnorm_pc {
    uint32_t x_off, y_off, w_off, rows, n, has_w;
    float eps;
};

void vkk_rmsnorm(struct vkr_cmd *c, struct vkk_ref y, struct vkk_ref x, struct vkk_ref w,
                 int64_t rows, int64_t n, float eps)
{
    if (rows <= 0 || n <= 0 || vkr_cmd_failed(c))
        return;
    if (!span(c, "rmsnorm", x, rows * n) || !span(c, "rmsnorm", y, rows * n) ||
        (w.buf && !span(c, "rmsnorm", w, n)) || rows > VKK_MAX_GROUPS ||
        n >= (1 << 24)) /* (float)n exact */
        return;
    struct rmsnorm_pc pc = {x.off, y.off, w.off, (uint32_t)rows, (uint32_t)n, w.buf != NULL, eps};
    struct vkr_bind b[3] = {ro(x.buf), rw(y.buf), ro(w.buf ? w.buf : x.buf)};
    vkr_cmd_dispatch(c, pipe_f(c, "rmsnorm", 3, sizeof pc), b, &pc, (uint32_t)rows, 1, 1);
}

struct layernorm_pc {
    uint32_t x_off, y_off, w_off, b_off, rows, n, has_w, has_b;
    float eps;
};

void vkk_layernorm(struct vkr_cmd *c, struct vkk_ref y, struct vkk_ref x, struct vkk_ref w,
                   struct vkk_ref b, int64_t rows, int64_t n, float eps)
{
    if (rows <= 0 || n <= 0 || vkr_cmd_failed(c))
        return;
    if (!span(c, "layernorm", x, rows * n) || !span(c, "layernorm", y, rows * n) ||
        (w.buf && !span(c, "layernorm", w, n)) || (b.buf && !span(c, "layernorm", b, n)))
        return;
    if (rows > VKK_MAX_GROUPS || n >= (1 << 24)) { /* one workgroup a row; (float)n exact */
        vkr_cmd_fail(c, KN_E_LIMIT, "Vulkan layernorm: %lld rows of %lld (at most %u rows of "
                     "under 2^24)", (long long)rows, (long long)n, VKK_MAX_GROUPS);
        return;
    }
    struct layernorm_pc pc = {x.off, y.off, w.off, b.off, (uint32_t)rows, (uint32_t)n,
                              w.buf != NULL, b.buf != NULL, eps};
    struct vkr_bind bd[4] = {ro(x.buf), rw(y.buf), ro(w.buf ? w.buf : x.buf),
                             ro(b.buf ? b.buf : x.buf)};
    vkr_cmd_dispatch(c, pipe_f(c, "layernorm", 4, sizeof pc), bd, &pc, (uint32_t)rows, 1, 1);
}

/* ================================================================ activations */

struct actq_pc {
    uint32_t x_off, q_off, K, M, bs, row_words;
};

void vkk_act_quant(struct vkr_cmd *c, enum kern_act_kind kind, struct vkk_ref x, int64_t M,
                   int64_t K, struct vkk_ref q)
{
    if (M <= 0 || vkr_cmd_failed(c))
        return;
    uint32_t bs = kind == KERN_ACT_Q8_K ? QK_K : 32;
    if (kind == KERN_ACT_F32 || K <= 0 || K % bs) {
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan activation quantization: kind %d cannot take K = %lld",
                     (int)kind, (long long)K);
        return;
    }
    size_t row_bytes = kern_act_row_bytes(kind, K);
    if (!span(c, "actq", x, M * K) || !span(c, "actq", q, M * (int64_t)(row_bytes / 4)) ||
        M > VKK_MAX_GROUPS)
        return;
    struct actq_pc pc = {x.off, q.off, (uint32_t)K, (uint32_t)M, bs, (uint32_t)(row_bytes / 4)};
    struct vkr_bind b[2] = {ro(x.buf), rw(q.buf)};
    vkr_cmd_dispatch(c, pipe(c, "actq", 2, sizeof pc), b, &pc, vkr_groups(K, 256),
                     (uint32_t)M, 1);
}

/* ================================================================ products */

struct mm_f_pc {
    uint32_t type, N, K, M, row_bytes, x_off, y_off, ldy, row0, w_base, expert, sel_off;
};
struct mm_q_pc {
    uint32_t N, K, M, row_bytes, x_off, x_row, y_off, ldy, row0, w_base, expert, sel_off;
};
#define MM_ALL_ROWS 0xffffffffu /* mm_*.glsl KN_ALL_ROWS */

const char *vkk_matmul_shader(enum quant_type t)
{
    switch (t) {
    case QT_Q8_0: return "mm_q8_0";
    case QT_Q4_0: return "mm_q4_0";
    case QT_Q4_1: return "mm_q4_1";
    case QT_Q5_0: return "mm_q5_0";
    case QT_Q5_1: return "mm_q5_1";
    case QT_Q4_K: return "mm_q4_k";
    case QT_Q5_K: return "mm_q5_k";
    case QT_Q6_K: return "mm_q6_k";
    case QT_Q2_K: return "mm_q2_k";
    case QT_Q3_K: return "mm_q3_k";
    case QT_IQ4_NL: return "mm_iq4_nl";
    case QT_MXFP4: return "mm_mxfp4";
    case QT_IQ4_XS: return "mm_iq4_xs";
    default: return "mm_f";
    }
}

/* Rows per workgroup and tokens per workgroup of the mm shaders. */
#define MM_ROWS 4
#define MM_TOKENS 4

void vkk_matmul(struct vkr_cmd *c, const struct kern_weight *w, const struct vkr_buf *wbuf,
                struct vkk_ref x, struct vkk_ref q, int64_t M, struct vkk_ref y, int64_t ldy)
{
    vkk_matmul_expert(c, w, wbuf, x, q, M, y, ldy, NULL, 0, -1, M);
}

void vkk_matmul_expert(struct vkr_cmd *c, const struct kern_weight *w, const struct vkr_buf *wbuf,
                       struct vkk_ref x, struct vkk_ref q, int64_t M, struct vkk_ref y,
                       int64_t ldy, const struct vkr_buf *groups, int32_t n_expert,
                       int32_t expert, int64_t max_rows)
{
    if (M <= 0 || vkr_cmd_failed(c))
        return;
    struct vkk_ref sel = vkk_at(groups, 0);
    if (expert >= 0 && !span(c, "matmul", sel, n_expert + (int64_t)n_expert * M))
        return;
    if (!vkk_matmul_type(w->type)) {
        vkr_cmd_fail(c, KN_E_UNSUPPORTED, "Vulkan matmul: no shader for weight type %u",
                     (unsigned)w->type);
        return;
    }
    enum kern_act_kind kind = kern_act_kind_for(w->type);
    if (!span(c, "matmul", y, (M - 1) * ldy + w->N) || ldy < w->N ||
        vkr_groups(M, MM_TOKENS) > VKK_MAX_GROUPS)
        return;
    const struct vkr_pipe *p;
    /* without a row selection the weights stand in for the unread sel binding */
    struct vkr_bind b[4] = {ro(wbuf), ro(kind == KERN_ACT_F32 ? x.buf : q.buf), rw(y.buf),
                            ro(expert >= 0 ? sel.buf : wbuf)};
    const uint32_t ex = expert >= 0 ? (uint32_t)expert : MM_ALL_ROWS;
    const uint32_t so = expert >= 0 ? (uint32_t)(n_expert + (int64_t)expert * M) : 0;
    struct mm_f_pc pf = {(uint32_t)w->type, (uint32_t)w->N, (uint32_t)w->K, (uint32_t)M,
                         (uint32_t)w->row_bytes, x.off, y.off, (uint32_t)ldy, 0, 0, ex, so};
    struct mm_q_pc pq = {(uint32_t)w->N, (uint32_t)w->K, (uint32_t)M, (uint32_t)w->row_bytes,
                         q.off, (uint32_t)(kern_act_row_bytes(kind, w->K) / 4), y.off,
                         (uint32_t)ldy, 0, 0, ex, so};
    if (kind == KERN_ACT_F32) {
        if (!span(c, "matmul", x, M * w->K))
            return;
        p = pipe_f(c, "mm_f", 4, sizeof pf);
    } else {
        if (!span(c, "matmul", q, M * (int64_t)pq.x_row))
            return;
        p = pipe_f(c, vkk_matmul_shader(w->type), 4, sizeof pq);
    }
    /* More row groups than one dispatch takes, or more rows than one binding holds:
     * consecutive dispatches from row0, each binding its part of the weights. */
    struct rows_part rp;
    for (int64_t r0 = 0; r0 < w->N; r0 = rp.r1) {
        if (!rows_part(c, wbuf, w->N, w->row_bytes, (int64_t)VKK_MAX_GROUPS * MM_ROWS, r0, &rp))
            return;
        pf.row0 = pq.row0 = (uint32_t)r0;
        pf.N = pq.N = (uint32_t)rp.r1; /* the shaders' row bound: no row past the binding */
        pf.w_base = pq.w_base = rp.base;
        b[0] = rp.bind;
        if (expert < 0)
            b[3] = rp.bind; /* within the binding limit, unlike the whole weights */
        vkr_cmd_dispatch(c, p, b, kind == KERN_ACT_F32 ? (const void *)&pf : (const void *)&pq,
                         vkr_groups(rp.r1 - r0, MM_ROWS), vkr_groups(max_rows, MM_TOKENS), 1);
    }
}

/* ================================================================ elementwise */

struct elt_pc {
    uint32_t op, n, rows, y_off, a_off, idx_off;
    float v;
};

void vkk_eltwise(struct vkr_cmd *c, enum vkk_elt op, struct vkk_ref y, struct vkk_ref a,
                 const int64_t *rows_idx, int64_t rows, int64_t n, float v)
{
    if (n <= 0 || rows <= 0 || vkr_cmd_failed(c))
        return;
    bool per_row = op == VKK_ADD_ROWS || op == VKK_GATHER;
    if (!per_row)
        rows = 1;
    if (!span(c, "eltwise", y, rows * n) || rows > VKK_MAX_GROUPS)
        return;
    int64_t a_elems = op == VKK_ADD_ROWS ? n : op == VKK_GATHER ? 0 : rows * n;
    if (op == VKK_GATHER)
        for (int64_t j = 0; j < rows; j++)
            a_elems = (rows_idx[j] + 1) * n > a_elems ? (rows_idx[j] + 1) * n : a_elems;
    if (op != VKK_SCALE && op != VKK_GELU && !span(c, "eltwise", a, a_elems))
        return;
    struct vkr_bind idx = ro(y.buf);
    if (op == VKK_GATHER) {
        uint32_t *r32 = malloc((size_t)rows * sizeof *r32);
        if (!r32) {
            vkr_cmd_fail(c, KN_E_NOMEM, "Vulkan gather: out of memory for %lld rows",
                         (long long)rows);
            return;
        }
        for (int64_t j = 0; j < rows; j++)
            r32[j] = (uint32_t)rows_idx[j];
        idx = vkr_cmd_stage(c, r32, (size_t)rows * sizeof *r32);
        free(r32);
        if (!idx.buf)
            return;
    }
    struct elt_pc pc = {(uint32_t)op, (uint32_t)n, (uint32_t)rows, y.off,
                        a.buf ? a.off : 0, 0, v};
    struct vkr_bind b[3] = {rw(y.buf), ro(a.buf ? a.buf : y.buf), idx};
    uint32_t gx = vkr_groups(n, 64);
    vkr_cmd_dispatch(c, pipe_f(c, "eltwise", 3, sizeof pc), b, &pc,
                     gx < VKK_MAX_GROUPS ? gx : VKK_MAX_GROUPS, (uint32_t)rows, 1);
}

/* ================================================================ KV cache */

struct kv_pc {
    uint32_t type, D, Hkv, n_ctx, t0, n, pos_off;
};

/* The shaders' code of a KV cache type (kv_store.comp, attn.glsl): 0 f32, 1 f16, 2 q8_0
 * (whole blocks of 32 per head row, as kern_attn_check requires); -1: not one. */
static int kv_code(uint32_t type, int64_t D)
{
    return type == QT_F32 ? 0 : type == QT_F16 ? 1 : type == QT_Q8_0 && D % QK8_0 == 0 ? 2 : -1;
}

/* The words of a cache of rows head rows of D elements of type (a valid kv_code). */
static int64_t kv_words(uint32_t type, int64_t rows, int64_t D)
{
    uint64_t rb = 0;
    if (!quant_row_size((enum quant_type)type, D, &rb))
        return INT64_MAX;
    return (rows * (int64_t)rb + 3) / 4;
}

void vkk_kv_store(struct vkr_cmd *c, struct vkk_ref k_new, struct vkk_ref v_new,
                  const struct vkr_buf *k_cache, const struct vkr_buf *v_cache, uint32_t kv_type,
                  int64_t D, int64_t Hkv, int64_t n_ctx, const int32_t *pos, int64_t t0, int64_t n)
{
    if (n <= 0 || vkr_cmd_failed(c))
        return;
    int code = kv_code(kv_type, D);
    if (code < 0) {
        vkr_cmd_fail(c, KN_E_UNSUPPORTED, "Vulkan kv_store: cache type %s with head dim %lld "
                     "(f32, f16, or q8_0 with a multiple of 32)", quant_type_name(kv_type),
                     (long long)D);
        return;
    }
    if (k_new.off || v_new.off) { /* the shader indexes rows from element 0 */
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan kv_store: new rows must start their buffers");
        return;
    }
    int64_t words = kv_words(kv_type, Hkv * n_ctx, D);
    if (!span(c, "kv_store", k_new, (t0 + n) * Hkv * D) ||
        !span(c, "kv_store", v_new, (t0 + n) * Hkv * D) ||
        !span(c, "kv_store", vkk_at(k_cache, 0), words) ||
        !span(c, "kv_store", vkk_at(v_cache, 0), words) ||
        n > VKK_MAX_GROUPS || Hkv > VKK_MAX_GROUPS)
        return;
    for (int64_t t = t0; t < t0 + n; t++)
        if (pos[t] < 0 || pos[t] >= n_ctx) {
            vkr_cmd_fail(c, KN_E_ARG, "Vulkan kv_store: token %lld at position %d is outside "
                         "the cache (%lld slots)", (long long)t, (int)pos[t], (long long)n_ctx);
            return;
        }
    struct vkr_bind pb = vkr_cmd_stage(c, pos, (size_t)(t0 + n) * sizeof *pos);
    if (!pb.buf)
        return;
    struct kv_pc pc = {(uint32_t)code, (uint32_t)D, (uint32_t)Hkv, (uint32_t)n_ctx,
                       (uint32_t)t0, (uint32_t)n, 0};
    struct vkr_bind b[5] = {ro(k_new.buf), ro(v_new.buf), rw(k_cache), rw(v_cache), pb};
    vkr_cmd_dispatch(c, pipe(c, "kv_store", 5, sizeof pc), b, &pc,
                     vkr_groups((D + 1) / 2, 64), (uint32_t)Hkv, (uint32_t)n);
}

/* ================================================================ short convolution */

struct conv_pc {
    uint32_t op, E, L, t0, n, n_ctx;
};

void vkk_shortconv(struct vkr_cmd *c, int op, struct vkk_ref bcx, const struct vkr_buf *rows,
                   struct vkk_ref w, struct vkk_ref out, const int32_t *pos, int64_t t0, int64_t n,
                   int64_t E, int64_t L, int64_t n_ctx)
{
    if (n <= 0 || vkr_cmd_failed(c))
        return;
    if (bcx.off || out.off || w.off) { /* the shader indexes rows from element 0 */
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan shortconv: rows must start their buffers");
        return;
    }
    if (L < 1 || L > KERN_CONV_MAX_L) {
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan shortconv: %lld taps (1..%d)", (long long)L,
                     KERN_CONV_MAX_L);
        return;
    }
    if (!span(c, "shortconv", bcx, (t0 + n) * 3 * E) || !span(c, "shortconv", w, E * L) ||
        !span(c, "shortconv", out, (t0 + n) * E) ||
        !span(c, "shortconv", vkk_at(rows, 0), n_ctx * E) || n > VKK_MAX_GROUPS)
        return;
    for (int64_t t = t0; t < t0 + n; t++)
        if (pos[t] < 0 || pos[t] >= n_ctx) {
            vkr_cmd_fail(c, KN_E_ARG, "Vulkan shortconv: token %lld at position %d is outside "
                         "the cache (%lld slots)", (long long)t, (int)pos[t], (long long)n_ctx);
            return;
        }
    struct vkr_bind pb = vkr_cmd_stage(c, pos, (size_t)(t0 + n) * sizeof *pos);
    if (!pb.buf)
        return;
    struct conv_pc pc = {(uint32_t)op, (uint32_t)E, (uint32_t)L, (uint32_t)t0, (uint32_t)n,
                         (uint32_t)n_ctx};
    struct vkr_bind b[5] = {ro(bcx.buf), op == 0 ? rw(rows) : ro(rows), ro(w.buf),
                            op == 1 ? rw(out.buf) : ro(out.buf), pb};
    uint32_t gx = vkr_groups(E, 64);
    vkr_cmd_dispatch(c, pipe_f(c, "conv", 5, sizeof pc), b, &pc,
                     gx < VKK_MAX_GROUPS ? gx : VKK_MAX_GROUPS, (uint32_t)n, 1);
}

/* ================================================================ mixture of experts */

struct moe_route_pc {
    uint32_t T, n, k, gating, has_bias, norm;
    float scale;
};
struct moe_sum_pc {
    uint32_t T, E, k;
};

void vkk_moe_route(struct vkr_cmd *c, const struct kern_moe_gate *g, struct vkk_ref logits,
                   struct vkk_ref bias, int64_t T, struct vkk_ref ids, struct vkk_ref w)
{
    if (T <= 0 || vkr_cmd_failed(c))
        return;
    if (g->n_expert < 1 || g->n_expert > KERN_MOE_MAX_EXPERTS || g->n_used < 1 ||
        g->n_used > g->n_expert || g->n_used > KERN_MOE_MAX_USED) {
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan moe_route: %d of %d experts (at most %d of %d)",
                     (int)g->n_used, (int)g->n_expert, KERN_MOE_MAX_USED, KERN_MOE_MAX_EXPERTS);
        return;
    }
    if (logits.off || ids.off || w.off || (bias.buf && bias.off)) {
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan moe_route: buffers must start at element 0");
        return;
    }
    if (!span(c, "moe_route", logits, T * g->n_expert) || !span(c, "moe_route", ids, T * g->n_used) ||
        !span(c, "moe_route", w, T * g->n_used) ||
        (bias.buf && !span(c, "moe_route", bias, g->n_expert)) ||
        vkr_groups(T, 64) > VKK_MAX_GROUPS)
        return;
    struct moe_route_pc pc = {(uint32_t)T, (uint32_t)g->n_expert, (uint32_t)g->n_used,
                              (uint32_t)g->gating, bias.buf != NULL, g->norm, g->scale};
    struct vkr_bind b[4] = {ro(logits.buf), ro(bias.buf ? bias.buf : logits.buf), rw(ids.buf),
                            rw(w.buf)};
    vkr_cmd_dispatch(c, pipe_f(c, "moe_route", 4, sizeof pc), b, &pc, vkr_groups(T, 64), 1, 1);
}

struct moe_group_pc {
    uint32_t R, n_expert;
};

struct moe_bias_pc {
    uint32_t R, n_expert, expert, n;
};

void vkk_moe_bias(struct vkr_cmd *c, struct vkk_ref y, int64_t R, int64_t n, struct vkk_ref b,
                  const struct vkr_buf *groups, int32_t n_expert, int32_t expert,
                  int64_t max_rows)
{
    if (R <= 0 || n <= 0 || vkr_cmd_failed(c))
        return;
    if (y.off || b.off) {
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan moe_ffn_oai: buffers must start at element 0");
        return;
    }
    if (expert < 0 || expert >= n_expert || max_rows > VKK_MAX_GROUPS) {
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan moe_ffn_oai: expert %d of %d, %lld rows (at most %u)",
                     (int)expert, (int)n_expert, (long long)max_rows, VKK_MAX_GROUPS);
        return;
    }
    if (!span(c, "moe_ffn_oai", y, R * n) || !span(c, "moe_ffn_oai", b, n) ||
        !span(c, "moe_ffn_oai", vkk_at(groups, 0), n_expert + (int64_t)n_expert * R))
        return;
    struct moe_bias_pc pc = {(uint32_t)R, (uint32_t)n_expert, (uint32_t)expert, (uint32_t)n};
    struct vkr_bind bd[3] = {rw(y.buf), ro(b.buf), ro(groups)};
    uint32_t gx = vkr_groups(n, 64);
    vkr_cmd_dispatch(c, pipe(c, "moe_bias", 3, sizeof pc), bd, &pc,
                     gx < VKK_MAX_GROUPS ? gx : VKK_MAX_GROUPS, (uint32_t)max_rows, 1);
}

void vkk_moe_group(struct vkr_cmd *c, struct vkk_ref ids, int64_t R, int32_t n_expert,
                   const struct vkr_buf *groups)
{
    if (R <= 0 || vkr_cmd_failed(c))
        return;
    if (ids.off) {
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan moe_ffn: buffers must start at element 0");
        return;
    }
    if (!span(c, "moe_ffn", ids, R) ||
        !span(c, "moe_ffn", vkk_at(groups, 0), n_expert + (int64_t)n_expert * R))
        return;
    struct moe_group_pc pc = {(uint32_t)R, (uint32_t)n_expert};
    struct vkr_bind b[2] = {ro(ids.buf), rw(groups)};
    vkr_cmd_dispatch(c, pipe(c, "moe_group", 2, sizeof pc), b, &pc, vkr_groups(n_expert, 64), 1, 1);
}

void vkk_moe_sum(struct vkr_cmd *c, struct vkk_ref yg, struct vkk_ref w, int64_t T, int64_t k,
                 int64_t E, struct vkk_ref y)
{
    if (T <= 0 || vkr_cmd_failed(c))
        return;
    if (yg.off || w.off || y.off) {
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan moe_ffn: buffers must start at element 0");
        return;
    }
    if (!span(c, "moe_ffn", yg, T * k * E) || !span(c, "moe_ffn", w, T * k) ||
        !span(c, "moe_ffn", y, T * E) || T > VKK_MAX_GROUPS)
        return;
    struct moe_sum_pc pc = {(uint32_t)T, (uint32_t)E, (uint32_t)k};
    struct vkr_bind b[3] = {ro(yg.buf), ro(w.buf), rw(y.buf)};
    uint32_t gx = vkr_groups(E, 64);
    vkr_cmd_dispatch(c, pipe(c, "moe_sum", 3, sizeof pc), b, &pc,
                     gx < VKK_MAX_GROUPS ? gx : VKK_MAX_GROUPS, (uint32_t)T, 1);
}

/* ================================================================ attention */

struct attn_pc {
    uint32_t q_off, out_off, pos_off, H, Hkv, D, n_ctx, f16, window;
    float scale;
    uint32_t n_tiles;
    float softcap;
    uint32_t sinks;
};
struct attn_merge_pc {
    uint32_t out_off, pos_off, H, D, window, n_tiles, sinks;
};

int64_t vkk_attention_tiles(const struct vkk_attn *a)
{
    int64_t most = 0;
    for (int64_t t = 0; t < a->n_q; t++) {
        int64_t p = a->pos[t];
        int64_t lo = kn_hd_attn_first_key(p, a->window);
        int64_t n = p / KERN_ATTN_TILE - lo / KERN_ATTN_TILE + 1;
        most = n > most ? n : most;
    }
    return most;
}

size_t vkk_attention_part_bytes(const struct vkk_attn *a)
{
    return (size_t)a->n_q * (size_t)a->n_head * (size_t)vkk_attention_tiles(a) *
           ((size_t)a->head_dim + 2) * sizeof(float);
}

void vkk_attention(struct vkr_cmd *c, const struct vkk_attn *a)
{
    if (a->n_q <= 0 || vkr_cmd_failed(c))
        return;
    if (a->head_dim < 1 || a->head_dim > KERN_ATTN_MAX_HEAD_DIM || a->n_head_kv < 1 ||
        a->n_head % a->n_head_kv != 0 || a->window < 0 || kv_code(a->kv_type, a->head_dim) < 0 ||
        !(a->softcap >= 0.0f) || a->softcap == INFINITY) {
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan attention: unsupported shape (heads %d/%d, head dim "
                     "%d, window %d, cache type %u, soft-cap %g)", (int)a->n_head,
                     (int)a->n_head_kv, (int)a->head_dim, (int)a->window, (unsigned)a->kv_type,
                     (double)a->softcap);
        return;
    }
    if (a->sinks && !span(c, "attention", vkk_at(a->sinks, 0), a->n_head))
        return;
    for (int64_t t = 0; t < a->n_q; t++)
        if (a->pos[t] < 0 || a->pos[t] >= a->n_ctx) {
            vkr_cmd_fail(c, KN_E_ARG, "Vulkan attention: query %lld at position %d is outside "
                         "the cache (%lld slots)", (long long)t, (int)a->pos[t],
                                     (long long)a->n_ctx);
            return;
        }
    int64_t QD = (int64_t)a->n_head * a->head_dim;
    int64_t words = kv_words(a->kv_type, (int64_t)a->n_ctx * a->n_head_kv, a->head_dim);
    if (!span(c, "attention", a->q, a->n_q * QD) || !span(c, "attention", a->out, a->n_q * QD) ||
        !span(c, "attention", vkk_at(a->k, 0), words) ||
        !span(c, "attention", vkk_at(a->v, 0), words) ||
        a->n_q > VKK_MAX_GROUPS || a->n_head > (int32_t)VKK_MAX_GROUPS)
        return;
    struct vkr_bind pb = vkr_cmd_stage(c, a->pos, (size_t)a->n_q * sizeof *a->pos);
    if (!pb.buf)
        return;
    struct attn_pc pc = {a->q.off, a->out.off, 0, (uint32_t)a->n_head, (uint32_t)a->n_head_kv,
                         (uint32_t)a->head_dim, (uint32_t)a->n_ctx,
                         (uint32_t)kv_code(a->kv_type, a->head_dim),
                         (uint32_t)a->window, a->scale, 0, a->softcap, a->sinks != NULL};
    const bool capped = a->softcap > 0.0f;
    /* the sinks binding: the query buffer stands in when there are none */
    struct vkr_bind sk = ro(a->sinks ? a->sinks : a->q.buf);
    if (!a->part) {
        struct vkr_bind b[6] = {ro(a->q.buf), ro(a->k), ro(a->v), rw(a->out.buf), pb, sk};
        vkr_cmd_dispatch(c, pipe_x(c, capped ? "attn_softcap" : "attn", true, capped, 6, sizeof pc),
                         b, &pc, (uint32_t)a->n_head, (uint32_t)a->n_q, 1);
        return;
    }
    int64_t tiles = vkk_attention_tiles(a);
    if (vkr_buf_size(a->part) < vkk_attention_part_bytes(a) ||
        !fits(c, "attention", (int64_t)(vkk_attention_part_bytes(a) / 4)) ||
        tiles > VKK_MAX_GROUPS) {
        vkr_cmd_fail(c, KN_E_ARG, "Vulkan attention: the part buffer is too small");
        return;
    }
    pc.n_tiles = (uint32_t)tiles;
    /* out is bound but not written by the tile pass */
    struct vkr_bind b[6] = {ro(a->q.buf), ro(a->k), ro(a->v), ro(a->out.buf), pb, rw(a->part)};
    vkr_cmd_dispatch(c, pipe_x(c, capped ? "attn_part_softcap" : "attn_part", true, capped, 6,
                               sizeof pc),
                     b, &pc, (uint32_t)a->n_head, (uint32_t)a->n_q, (uint32_t)tiles);
    struct attn_merge_pc mc = {a->out.off, 0, (uint32_t)a->n_head, (uint32_t)a->head_dim,
                               (uint32_t)a->window, (uint32_t)tiles, a->sinks != NULL};
    struct vkr_bind bm[4] = {ro(a->part), rw(a->out.buf), pb, sk};
    vkr_cmd_dispatch(c, pipe_f(c, "attn_merge", 4, sizeof mc), bm, &mc, (uint32_t)a->n_head,
                     (uint32_t)a->n_q, 1);
}
