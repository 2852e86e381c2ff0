/* vk_selftest.c: the start-up self-test of a Vulkan device (docs/numerics.md "Devices").
 * canonical-1 needs IEEE add and multiply (Vulkan's are correctly rounded), a fused
 * fmaf, correctly rounded division and sqrt and denormals kept. The probes run the
 * driver's own fma, /, sqrt, * and + (shaders/selftest.comp) on crafted triples and
 * compare every result with the CPU's; division and sqrt also on vkk_divsqrt_probe's hard
 * cases, and where the driver's differ the shaders switch to their integer builds
 * (kn_common.glsl); then kern_backend_check runs every op of the
 * backend against the CPU on crafted inputs, which decides: a device whose ops give the
 * CPU's bytes computes canonical-1 (the shaders work around what the probes find, e.g.
 * an unfused fma), one that does not gets its own class. The probes' findings go into
 * the report either way, so a failed check is named. */
#include "vk_backend.h"
#include "vk_kern.h"
#include "vk_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ST_N = 4096 };

static uint64_t st_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A float of random sign and mantissa with exponent e (unbiased, -126 .. 127). */
static float st_float(uint64_t *s, int e)
{
    uint64_t r = st_next(s);
    return vkk_f32((uint32_t)(r & 0x807fffffu) | (uint32_t)(e + 127) << 23);
}

/* A subnormal of random sign. */
static float st_subnormal(uint64_t *s)
{
    uint64_t r = st_next(s);
    uint32_t m = (uint32_t)(r & 0x7fffff);
    return vkk_f32((uint32_t)(r >> 32 & 0x80000000u) | (m ? m : 1));
}

static bool same(float a, float b)
{
    return vkk_u32(a) == vkk_u32(b) || (isnan(a) && isnan(b));
}

/* The probe triples: the first half normal numbers (fma, division and sqrt proper),
 * the second half with subnormal inputs or results (denormals). */
static void st_inputs(uint32_t *v)
{
    uint64_t s = 0x5e1f7e57ull;
    for (int i = 0; i < ST_N; i++) {
        float a, b, c;
        if (i < ST_N / 2) {
            int ea = (int)(st_next(&s) % 40) - 20, eb = (int)(st_next(&s) % 40) - 20;
            a = fabsf(st_float(&s, ea));
            b = st_float(&s, eb);
            /* c near a*b in magnitude, so the fused and unfused results often differ */
            c = -(a * b) * (1.0f + (float)(st_next(&s) % 64) / 1048576.0f);
            if (i % 4 == 1)
                c = st_float(&s, ea + eb);
        } else if (i % 2) {
            a = fabsf(st_subnormal(&s)); /* subnormal inputs */
            b = vkk_f32(0x3f000000u + (uint32_t)(st_next(&s) % 0x800000)); /* [0.5, 1) */
            c = st_subnormal(&s);
        } else { /* normal inputs whose products and quotients are subnormal */
            a = fabsf(st_float(&s, -70 - (int)(st_next(&s) % 10)));
            b = st_float(&s, -60 - (int)(st_next(&s) % 10));
            c = st_subnormal(&s);
        }
        v[3 * i] = vkk_u32(a);
        v[3 * i + 1] = vkk_u32(b);
        v[3 * i + 2] = vkk_u32(c);
    }
}

static enum kn_status st_probe(struct vkr *rt, const uint32_t *in, uint32_t *out,
                               struct kn_err *err)
{
    struct vkr_cmd *c = vkr_cmd_create(rt, err);
    if (!c)
        return err ? err->status : KN_E_NOMEM;
    const struct vkr_pipe *p = vkr_pipe_get(
        rt, &(struct vkr_pipe_desc){.shader = "selftest", .n_bufs = 2, .push_bytes = 4}, err);
    enum kn_status st = p ? KN_OK : (err ? err->status : KN_E_INTERNAL);
    struct vkr_buf *b = p ? vkr_buf_alloc(rt, 5 * ST_N * 4, VKR_MEM_DEVICE, false, err) : NULL;
    if (p && !b)
        st = err ? err->status : KN_E_NOMEM;
    if (b) {
        uint32_t n = ST_N;
        vkr_cmd_begin(c);
        struct vkr_bind bind[2] = {vkr_cmd_stage(c, in, 3 * ST_N * 4), {.buf = b, .write = true}};
        vkr_cmd_dispatch(c, p, bind, &n, vkr_groups(ST_N, 64), 1, 1);
        vkr_cmd_read(c, b, 0, out, 5 * ST_N * 4);
        st = vkr_cmd_submit(c, err);
    }
    vkr_buf_free(rt, b);
    vkr_cmd_free(c);
    return st;
}

void vk_selftest_run(struct vk_backend *vb, struct vk_selftest *t)
{
    memset(t, 0, sizeof *t);
    double t0 = kn_now();
    struct kn_err err = {0};
    uint32_t *in = malloc(3 * ST_N * 4), *out = malloc(5 * ST_N * 4);
    char probes[500] = "";
    bool probed = false;
    if (!in || !out) {
        snprintf(probes, sizeof probes, "probes: out of memory");
    } else {
        st_inputs(in);
        if (st_probe(vb->rt, in, out, &err) != KN_OK) {
            snprintf(probes, sizeof probes, "probes did not run: %.300s", err.msg);
        } else {
            probed = true;
            int fma_bad = 0, div_bad = 0, sqrt_bad = 0, den_bad = 0, arith_bad = 0;
            for (int i = 0; i < ST_N; i++) {
                float a = vkk_f32(in[3 * i]), b = vkk_f32(in[3 * i + 1]), c = vkk_f32(in[3 * i + 2]);
                const uint32_t *o = out + 5 * i;
                bool f = same(vkk_f32(o[0]), fmaf(a, b, c)), d = same(vkk_f32(o[1]), a / b),
                     q = same(vkk_f32(o[2]), sqrtf(a)), m = same(vkk_f32(o[3]), a * b),
                     p = same(vkk_f32(o[4]), a + c);
                if (i < ST_N / 2) {
                    fma_bad += !f;
                    div_bad += !d;
                    sqrt_bad += !q;
                    arith_bad += !m + !p;
                } else {
                    den_bad += !f + !d + !q + !m + !p;
                }
            }
            t->fma_fused = fma_bad == 0;
            t->div_rounded = div_bad == 0;
            t->sqrt_rounded = sqrt_bad == 0;
            t->denormals_kept = den_bad == 0;
            t->arith_ok = arith_bad == 0;
            /* division and sqrt on the hard cases too (within 2^-44 of a tie); where the
             * driver's differ anywhere, the shaders use the integer builds */
            struct vkk_divsqrt ds = {0};
            int hd = 0, hs = 0;
            char dsr[72] = "";
            if (vkk_divsqrt_probe(vb->rt, &ds, &hd, &hs, &err) == KN_OK) {
                t->div_rounded = t->div_rounded && hd == 0;
                t->sqrt_rounded = t->sqrt_rounded && hs == 0;
                ds.soft_div = !t->div_rounded;
                ds.soft_sqrt = !t->sqrt_rounded;
                vkk_divsqrt_set(vb->rt, ds);
                t->div_soft = ds.soft_div;
                t->sqrt_soft = ds.soft_sqrt;
                t->divsqrt_ok = true;
            } else {
                snprintf(dsr, sizeof dsr, " (%.60s)", err.msg);
            }
            const char *fix = t->divsqrt_ok ? ", the shaders use the integer build" : "";
            snprintf(probes, sizeof probes,
                     "fma %s (%d of %d differ from fmaf); division %s%s%s; sqrt %s%s%s; add and "
                     "multiply %s; denormals %s (%d of %d subnormal results differ)",
                     t->fma_fused ? "fused" : "not fused", fma_bad, ST_N / 2,
                     t->div_rounded ? "correctly rounded" : "NOT correctly rounded",
                     t->div_rounded ? "" : fix, dsr,
                     t->sqrt_rounded ? "correctly rounded" : "NOT correctly rounded",
                     t->sqrt_rounded ? "" : fix, dsr,
                     t->arith_ok ? "IEEE" : "NOT IEEE",
                     t->denormals_kept ? "kept" : "NOT kept", den_bad, 5 * (ST_N / 2));
        }
    }
    free(in);
    free(out);

    /* The ops against the CPU: the check that decides. */
    char ops[1024];
    const char *miss = kern_backend_missing_op(&vb->base);
    if (miss) {
        snprintf(ops, sizeof ops, "ops: not checked, the backend has no op '%s' yet", miss);
    } else {
        struct kern_pool *pool = NULL;
        if (kern_pool_create(1, &pool, &err) != KN_OK) {
            snprintf(ops, sizeof ops, "ops: not checked: %.400s", err.msg);
        } else {
            enum kn_status st = kern_backend_check(&vb->base, pool, &err);
            kern_pool_free(pool);
            t->ops_equal = st == KN_OK;
            char lack[640];
            if (t->ops_equal && kern_backend_missing_optional(&vb->base, lack, sizeof lack))
                snprintf(ops, sizeof ops, "every op equals the CPU (kern_backend_check); no op "
                         "%.640s yet: such layers run only on the CPU (fewer --gpu-layers)", lack);
            else if (t->ops_equal)
                snprintf(ops, sizeof ops, "every op equals the CPU (kern_backend_check), the "
                         "optional ones included");
            else
                snprintf(ops, sizeof ops, "ops differ from the CPU: %.440s", err.msg);
        }
    }
    t->canonical = probed && t->ops_equal && t->divsqrt_ok && t->denormals_kept && t->arith_ok;
    t->seconds = kn_now() - t0;
    snprintf(t->report, sizeof t->report, "%.490s; %.490s (%.2f s)", probes, ops, t->seconds);
}
