/* test_kern_dot.c: the canonical f32 dot product: the reference follows the written tree,
 * and every ISA level gives its bits for every length. */
#include "check.h"
#include "kern_testutil.h"

/* The contract's text, literally (docs/numerics.md "Float dot product"). */
static float spec_dot(const float *a, const float *b, int64_t n)
{
    float acc[16];
    for (int i = 0; i < 16; i++)
        acc[i] = 0.0f;
    for (int64_t k = 0; k < n; k++)
        acc[k % 16] = fmaf(a[k], b[k], acc[k % 16]);
    for (int i = 0; i < 8; i++)
        acc[i] = acc[i] + acc[i + 8];
    for (int i = 0; i < 4; i++)
        acc[i] = acc[i] + acc[i + 4];
    for (int i = 0; i < 2; i++)
        acc[i] = acc[i] + acc[i + 2];
    acc[0] = acc[0] + acc[1];
    return acc[0];
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0; }

int main(void)
{
    struct kn_err err;
    enum { MAXN = 4200 };
    float *a = malloc(sizeof(float) * MAXN), *b = malloc(sizeof(float) * MAXN);
    for (int rep = 0; rep < 3; rep++) {
        for (int i = 0; i < MAXN; i++) {
            /* Wide exponent range so that the order of additions shows in the bits. */
            a[i] = tu_uniform() * (float)(1 << (tu_next() % 20));
            b[i] = tu_uniform();
        }
        for (int64_t n = 0; n <= MAXN; n += (n < 100 ? 1 : 97)) {
            float want = spec_dot(a, b, n);
            CHECKF(same_bits(kern_dot_f32_ref(a, b, n), want), "n=%lld", (long long)n);
            for (int isa = 0; isa < KN_ISA_COUNT; isa++) {
                if (!kn_isa_supported((enum kn_isa)isa))
                    continue;
                CHECK(kn_isa_set((enum kn_isa)isa, &err) == KN_OK);
                /* Unaligned starts too. */
                float got = kern_dot_f32(a + rep, b + 2 * rep, n - 2 * rep > 0 ? n - 2 * rep : 0);
                float ref = kern_dot_f32_ref(a + rep, b + 2 * rep, n - 2 * rep > 0 ? n - 2 * rep : 0);
                CHECKF(same_bits(got, ref), "isa=%s n=%lld rep=%d: %.9g != %.9g",
                       kn_isa_name((enum kn_isa)isa), (long long)n, rep, got, ref);
            }
        }
    }
    /* Signed zeros: a product that rounds to -0 in lane 1 must stay -0 even when the
     * vector tail covers lanes past the end. The spec gives -0 + ... ; all ISAs agree. */
    for (int n = 1; n < 16; n++) {
        for (int i = 0; i < 16; i++) {
            a[i] = -0x1p-100f;
            b[i] = 0x1p-100f;
        }
        for (int isa = 0; isa < KN_ISA_COUNT; isa++) {
            if (!kn_isa_supported((enum kn_isa)isa))
                continue;
            CHECK(kn_isa_set((enum kn_isa)isa, &err) == KN_OK);
            float acc[16] = {0};
            for (int i = 0; i < n; i++)
                acc[i] = fmaf(a[i], b[i], acc[i]);
            float want = kern_dot_tree16(acc);
            CHECKF(same_bits(kern_dot_f32(a, b, n), want), "isa=%s signed zero n=%d",
                   kn_isa_name((enum kn_isa)isa), n);
        }
    }
    /* A lane of -0 meets the tree: (-0) + (-0) stays -0 only if every lane is -0. */
    {
        float z[16], o[16];
        for (int i = 0; i < 16; i++) {
            z[i] = -0x1p-100f;
            o[i] = 0x1p-100f;
        }
        CHECK(signbit(spec_dot(z, o, 16)));
        CHECK(!signbit(spec_dot(z, o, 15)));
        for (int isa = 0; isa < KN_ISA_COUNT; isa++) {
            if (!kn_isa_supported((enum kn_isa)isa))
                continue;
            CHECK(kn_isa_set((enum kn_isa)isa, &err) == KN_OK);
            CHECK(signbit(kern_dot_f32(z, o, 16)));
            CHECK(!signbit(kern_dot_f32(z, o, 15)));
        }
    }
    CHECK(kn_isa_set(kn_isa_best(), &err) == KN_OK);
    free(a);
    free(b);
    CHECK_DONE();
}
