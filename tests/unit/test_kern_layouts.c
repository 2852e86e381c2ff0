/* test_kern_layouts.c: the kernels read every weight element where llama.cpp puts it.
 * tests/data/kern/layouts.bin holds random blocks of each type and their values as
 * dequantized by gguf-py (scripts/gen_kern_layouts.py). Probing one weight row with
 * one-hot tokens (token m = e_m) makes y[m] the m-th weight, to within a few roundings. */
#include "check.h"
#include "kern_testutil.h"

#include <stdio.h>

static uint8_t *read_all(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)n);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

int main(void)
{
    const char *src = getenv("KN_SOURCE");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/kern/layouts.bin", src ? src : ".");
    size_t size = 0;
    uint8_t *data = read_all(path, &size);
    CHECKF(data != NULL, "cannot read %s", path);
    if (!data)
        CHECK_DONE();
    CHECK(size > 8 && memcmp(data, "KNLAYOUT", 8) == 0);
    size_t pos = 8;
    int types_seen = 0;
    struct kn_err err;
    struct kern_pool *pool;
    CHECK(kern_pool_create(2, &pool, &err) == KN_OK);
    while (pos + 12 <= size) {
        uint32_t t, nb, bb;
        memcpy(&t, data + pos, 4);
        memcpy(&nb, data + pos + 4, 4);
        memcpy(&bb, data + pos + 8, 4);
        pos += 12;
        const struct quant_type_info *ti = quant_type_info(t);
        CHECK(ti && ti->type_size == bb);
        int64_t K = (int64_t)nb * ti->block_size;
        const uint8_t *blocks = data + pos;
        pos += (size_t)nb * bb;
        float *want = malloc(sizeof(float) * (size_t)K);
        memcpy(want, data + pos, sizeof(float) * (size_t)K);
        pos += sizeof(float) * (size_t)K;
        CHECK(pos <= size);
        types_seen++;

        /* The test's own dequantizer (used by the accuracy bounds) agrees with gguf-py. */
        double *wa = malloc(sizeof(double) * (size_t)K), *wb = malloc(sizeof(double) * (size_t)K);
        tu_dequant_row(t, blocks, K, wa, wb);
        int bad = 0;
        for (int64_t k = 0; k < K; k++) {
            double tol = 8 * 0x1p-24 * (fabs(wa[k]) + fabs(wb[k])) + 1e-30;
            if (!(fabs(wa[k] + wb[k] - want[k]) <= tol) && bad++ < 3)
                fprintf(stderr, "%s k=%lld: dequant %.9g, gguf-py %.9g\n", quant_type_name(t),
                        (long long)k, wa[k] + wb[k], (double)want[k]);
        }
        CHECKF(bad == 0, "%s: test dequantizer differs from gguf-py", quant_type_name(t));

        /* One-hot probes through kern_matmul on every ISA, packed and not. */
        float *x = calloc((size_t)(K * K), sizeof(float));
        for (int64_t m = 0; m < K; m++)
            x[m * K + m] = 1.0f;
        float *y = malloc(sizeof(float) * (size_t)K);
        float *yref = malloc(sizeof(float) * (size_t)K);
        for (int packed = 0; packed < 2; packed++) {
            struct kern_weight w;
            CHECK(kern_weight_init(&w, t, 1, K, blocks, (size_t)nb * bb, packed, &err) == KN_OK);
            void *scratch = kn_aligned_alloc(kern_matmul_scratch_bytes(&w, K), &err);
            for (int isa = 0; isa < KN_ISA_COUNT; isa++) {
                if (!kn_isa_supported((enum kn_isa)isa))
                    continue;
                CHECK(kn_isa_set((enum kn_isa)isa, &err) == KN_OK);
                kern_matmul(pool, &w, x, K, y, scratch);
                if (isa == 0 && packed == 0)
                    memcpy(yref, y, sizeof(float) * (size_t)K);
                CHECKF(memcmp(y, yref, sizeof(float) * (size_t)K) == 0, "%s isa=%s packed=%d",
                       quant_type_name(t), kn_isa_name((enum kn_isa)isa), packed);
                bad = 0;
                for (int64_t m = 0; m < K; m++) {
                    double tol = 8 * 0x1p-24 * (fabs(wa[m]) + fabs(wb[m])) + 1e-30;
                    if (!(fabs((double)y[m] - want[m]) <= tol) && bad++ < 3)
                        fprintf(stderr, "%s isa=%s element %lld: kernel %.9g, gguf-py %.9g\n",
                                quant_type_name(t), kn_isa_name((enum kn_isa)isa),
                                (long long)m, (double)y[m], (double)want[m]);
                }
                CHECKF(bad == 0, "%s isa=%s packed=%d: kernel reads elements elsewhere than llama.cpp",
                       quant_type_name(t), kn_isa_name((enum kn_isa)isa), packed);
            }
            free(scratch);
            kern_weight_free(&w);
        }
        CHECK(kn_isa_set(kn_isa_best(), &err) == KN_OK);
        free(x);
        free(y);
        free(yref);
        free(wa);
        free(wb);
        free(want);
    }
    CHECK_EQ_INT(types_seen, 13);
    kern_pool_free(pool);
    free(data);
    CHECK_DONE();
}
