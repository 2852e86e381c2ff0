/* fprobe.c: the arithmetic probes of the devices' self-tests (fprobe.h). */
#include "fprobe.h"
#include "backend.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { ST_N = KERN_FPROBE_N };

static uint64_t st_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float st_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t st_u(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* A float of random sign and mantissa with exponent e (unbiased, -126 .. 127). */
static float st_float(uint64_t *s, int e)
{
    uint64_t r = st_next(s);
    return st_bits((uint32_t)(r & 0x807fffffu) | (uint32_t)(e + 127) << 23);
}

/* A subnormal of random sign. */
static float st_subnormal(uint64_t *s)
{
    uint64_t r = st_next(s);
    uint32_t m = (uint32_t)(r & 0x7fffff);
    return st_bits((uint32_t)(r >> 32 & 0x80000000u) | (m ? m : 1));
}

static bool same(float a, float b)
{
    return st_u(a) == st_u(b) || (isnan(a) && isnan(b));
}

/* The probe triples: the first half normal numbers (fma, division and sqrt proper),
 * the second half with subnormal inputs or results (denormals). */
void kern_fprobe_inputs(uint32_t *v)
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
            b = st_bits(0x3f000000u + (uint32_t)(st_next(&s) % 0x800000)); /* [0.5, 1) */
            c = st_subnormal(&s);
        } else { /* normal inputs whose products and quotients are subnormal */
            a = fabsf(st_float(&s, -70 - (int)(st_next(&s) % 10)));
            b = st_float(&s, -60 - (int)(st_next(&s) % 10));
            c = st_subnormal(&s);
        }
        v[3 * i] = st_u(a);
        v[3 * i + 1] = st_u(b);
        v[3 * i + 2] = st_u(c);
    }
}

void kern_fprobe_judge(const uint32_t *in, const uint32_t *out, struct kern_fprobe *r)
{
    int fma_bad = 0, div_bad = 0, sqrt_bad = 0, den_bad = 0, arith_bad = 0;
    for (int i = 0; i < ST_N; i++) {
        float a = st_bits(in[3 * i]), b = st_bits(in[3 * i + 1]), c = st_bits(in[3 * i + 2]);
        const uint32_t *o = out + 5 * i;
        bool f = same(st_bits(o[0]), fmaf(a, b, c)), d = same(st_bits(o[1]), a / b),
             q = same(st_bits(o[2]), sqrtf(a)), m = same(st_bits(o[3]), a * b),
             p = same(st_bits(o[4]), a + c);
        if (i < ST_N / 2) {
            fma_bad += !f;
            div_bad += !d;
            sqrt_bad += !q;
            arith_bad += !m + !p;
        } else {
            den_bad += !f + !d + !q + !m + !p;
        }
    }
    r->fma_fused = fma_bad == 0;
    r->div_rounded = div_bad == 0;
    r->sqrt_rounded = sqrt_bad == 0;
    r->denormals_kept = den_bad == 0;
    r->arith_ok = arith_bad == 0;
    snprintf(r->report, sizeof r->report,
             "fma %s (%d of %d differ from fmaf); division %s; sqrt %s; add and "
             "multiply %s; denormals %s (%d of %d subnormal results differ)",
             r->fma_fused ? "fused" : "not fused", fma_bad, ST_N / 2,
             r->div_rounded ? "correctly rounded" : "NOT correctly rounded",
             r->sqrt_rounded ? "correctly rounded" : "NOT correctly rounded",
             r->arith_ok ? "IEEE" : "NOT IEEE",
             r->denormals_kept ? "kept" : "NOT kept", den_bad, 5 * (ST_N / 2));
}

bool kern_fprobe_ops(struct kern_backend *be, char *out, size_t cap)
{
    const char *miss = kern_backend_missing_op(be);
    if (miss) {
        snprintf(out, cap, "ops: not checked, the backend has no op '%s' yet", miss);
        return false;
    }
    struct kn_err err = {0};
    struct kern_pool *pool = NULL;
    if (kern_pool_create(1, &pool, &err) != KN_OK) {
        snprintf(out, cap, "ops: not checked: %.400s", err.msg);
        return false;
    }
    enum kn_status st = kern_backend_check(be, pool, &err);
    kern_pool_free(pool);
    if (st != KN_OK) {
        snprintf(out, cap, "ops differ from the CPU: %.440s", err.msg);
        return false;
    }
    char lack[640];
    if (kern_backend_missing_optional(be, lack, sizeof lack))
        snprintf(out, cap, "every op equals the CPU (kern_backend_check); no op %s yet: such "
                 "layers run only on the CPU (fewer --gpu-layers)", lack);
    else
        snprintf(out, cap, "every op equals the CPU (kern_backend_check), the optional ones included");
    return true;
}
