/* test_kern_actq.c: per-token activation quantization follows its written rule exactly
 * (scale, round half to even, clamp, sums) and each row depends on itself alone. */
#include "check.h"
#include "kern_testutil.h"
#include "kernels/kern_internal.h"

static bool same_bits(float a, float b) { return memcmp(&a, &b, 4) == 0; }

/* The rule of docs/numerics.md, written a second time with doubles where they are exact. */
static void spec_block(const float *x, int n, float *d_out, int8_t *q)
{
    float amax = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax)
            amax = fabsf(x[i]);
    float d = amax / 127.0f, id = amax > 0 ? 127.0f / amax : 0.0f;
    for (int i = 0; i < n; i++) {
        float v = x[i] * id;
        double r = nearbyint((double)v); /* ties to even in the default mode */
        if (r > 127) r = 127;
        if (r < -127) r = -127;
        q[i] = (int8_t)r;
    }
    *d_out = d;
}

int main(void)
{
    enum { K = 1024 };
    static float x[4 * K];
    static struct kern_block_q8f qf[4 * K / 32];
    static struct block_q8_K qk[4 * K / 256];
    for (int i = 0; i < 4 * K; i++)
        x[i] = tu_uniform() * (float)(1 << (i % 11));
    /* Exact ties: amax 127 makes id = 1, so x*id = x and halves must round to even. */
    float ties[32] = {127.0f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, -126.5f, 3.49999976f};
    struct kern_block_q8f tb;
    kern_quantize_row_q8f(ties, 32, &tb);
    CHECK(tb.qs[0] == 127 && tb.qs[1] == 0 && tb.qs[2] == 2 && tb.qs[3] == 2);
    CHECK(tb.qs[4] == 0 && tb.qs[5] == -2 && tb.qs[6] == -2 && tb.qs[7] == 126 && tb.qs[8] == -126);
    CHECK(tb.qs[9] == 3);
    CHECK(same_bits(tb.d, 1.0f));
    CHECK_EQ_INT(tb.s, 127 + 2 + 2 - 2 - 2 + 126 - 126 + 3);
    /* Zeros: d = 0 and every q 0. */
    float zeros[256] = {0};
    struct block_q8_K zb;
    kern_quantize_row_q8k(zeros, 256, &zb);
    CHECK(zb.d == 0.0f && zb.qs[7] == 0 && zb.bsums[3] == 0);
    /* NaN is skipped for the scale and quantizes to 0. */
    float withnan[32] = {1.0f, NAN, -2.0f};
    kern_quantize_row_q8f(withnan, 32, &tb);
    CHECK(tb.qs[1] == 0 && tb.qs[2] == -127 && tb.qs[0] == 64);
    CHECK(same_bits(tb.d, 2.0f / 127.0f));

    kern_quantize_row_q8f(x, 4 * K, qf);
    kern_quantize_row_q8k(x, 4 * K, qk);
    bool ok = true;
    for (int b = 0; b < 4 * K / 32; b++) {
        float d;
        int8_t q[32];
        spec_block(x + 32 * b, 32, &d, q);
        int s = 0;
        for (int i = 0; i < 32; i++)
            s += q[i];
        if (!same_bits(d, qf[b].d) || memcmp(q, qf[b].qs, 32) != 0 || s != qf[b].s)
            ok = false;
    }
    CHECK(ok);
    ok = true;
    for (int b = 0; b < 4 * K / 256; b++) {
        float d;
        int8_t q[256];
        spec_block(x + 256 * b, 256, &d, q);
        if (!same_bits(d, qk[b].d) || memcmp(q, qk[b].qs, 256) != 0)
            ok = false;
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++)
                s += q[16 * j + i];
            if (s != qk[b].bsums[j])
                ok = false;
        }
    }
    CHECK(ok);

    /* kern_act_prepare: each row equals the row quantized alone, at any thread count. */
    struct kn_err err;
    for (int th = 1; th <= 3; th++) {
        struct kern_pool *pool;
        CHECK(kern_pool_create(th, &pool, &err) == KN_OK);
        for (int kind = 1; kind <= 2; kind++) {
            size_t bytes = kern_act_bytes(kind, 4, K);
            void *s = kn_aligned_alloc(bytes, &err);
            struct kern_act a;
            kern_act_prepare(pool, kind, x, 4, K, s, &a);
            CHECK(a.q == s && a.M == 4 && a.K == K && a.row_bytes == kern_act_row_bytes(kind, K));
            for (int m = 0; m < 4; m++) {
                uint8_t row[K / 32 * 40 + 4 * 292];
                if (kind == KERN_ACT_Q8_32)
                    kern_quantize_row_q8f(x + m * K, K, (void *)row);
                else
                    kern_quantize_row_q8k(x + m * K, K, (void *)row);
                CHECK(memcmp(row, (uint8_t *)s + m * a.row_bytes, a.row_bytes) == 0);
            }
            free(s);
        }
        kern_pool_free(pool);
    }
    /* Every ISA level quantizes like the reference, special values included. */
    static float sx[8 * 256];
    for (int i = 0; i < 8 * 256; i++)
        sx[i] = tu_uniform() * (float)(1 << (i % 13)) * 0.01f;
    sx[5] = NAN;
    sx[40] = INFINITY;                 /* block 1 of 32: amax = inf */
    sx[300] = -INFINITY;
    sx[70] = 0x1p-140f;                /* block 2 of 32: denormal amax, id = inf */
    for (int i = 64; i < 96; i++)
        if (i != 70)
            sx[i] = (i & 1) ? -0.0f : 0.0f;
    for (int i = 96; i < 128; i++)
        sx[i] = (float)(i - 112) + 0.5f; /* exact halves once scaled by 127 / amax = 1 */
    sx[127] = 127.0f;
    for (int i = 512; i < 768; i++)
        sx[i] = 0.0f;                  /* an all-zero 256-block */
    sx[1000] = 3e38f;
    for (int isa = 0; isa < KN_ISA_COUNT; isa++) {
        if (!kn_isa_supported((enum kn_isa)isa))
            continue;
        CHECK(kn_isa_set((enum kn_isa)isa, &err) == KN_OK);
        static struct kern_block_q8f f1[8 * 256 / 32], f2[8 * 256 / 32];
        static struct block_q8_K k1[8], k2[8];
        for (int rep = 0; rep < 2; rep++) {
            const float *src = rep ? x : sx;
            memset(f1, 0x55, sizeof f1);
            memset(f2, 0x55, sizeof f2);
            memset(k1, 0x55, sizeof k1);
            memset(k2, 0x55, sizeof k2);
            kern_quantize_row_q8f(src, 8 * 256, f1);
            kern_quantize_row_q8f_ref(src, 8 * 256, f2);
            kern_quantize_row_q8k(src, 8 * 256, k1);
            kern_quantize_row_q8k_ref(src, 8 * 256, k2);
            CHECKF(memcmp(f1, f2, sizeof f1) == 0, "q8f isa=%s rep=%d", kn_isa_name((enum kn_isa)isa), rep);
            CHECKF(memcmp(k1, k2, sizeof k1) == 0, "q8k isa=%s rep=%d", kn_isa_name((enum kn_isa)isa), rep);
        }
    }
    CHECK(kn_isa_set(kn_isa_best(), &err) == KN_OK);
    CHECK(kern_act_bytes(KERN_ACT_F32, 10, 64) == 0);
    CHECK(kern_act_bytes(KERN_ACT_Q8_K, INT64_MAX / 2, 256) == SIZE_MAX);
    CHECK_DONE();
}
