/* test_cu_ops.c: the CUDA backend's ops against the CPU backend through the device seam
 * on a real NVIDIA GPU: the start-up self-test (the arithmetic probes and
 * kern_backend_check) must find the device canonical-1, the table must have every op but
 * the MoE pair, and kern_backend_check must pass again with a two-thread CPU pool (every
 * op on crafted inputs with negative zeros, denormals and large values, every weight
 * type, both RoPE modes with YaRN, f32 and f16 caches, causal, windowed and soft-capped
 * attention over two sequences and two passes); then a shape sweep of the products (every
 * weight type the CPU computes, output counts that are not multiples of the kernels' row
 * tiles, batch sizes 1 to 67 on both sides of the decode / tiled choice, K of 512 and of
 * 8448: many decode rounds and tiled steps) and of RMSNorm (rows of 1 to 4099) against
 * the CPU backend, byte for byte. KN_CUDA_MM=decode or tiled forces one product path for
 * every batch size (scripts/gpu_check.sh runs all three). Skips (exit 77) with the reason
 * where there is no CUDA device or the build has no kernels. */
#include <stddef.h>

#include "check.h"
#include "cuda/cu_backend.h"
#include "device/device.h"
#include "kernels/backend.h"
#include "quant/quant.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;
static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int64_t)(rng >> 40) - (1 << 23)) / (float)(1 << 23);
}

/* y (M, N) = x . w^T on backend be, copied to out. */
static enum kn_status run_matmul(struct kern_backend *be, struct kern_pool *pool,
                                 const struct kern_weight *w, const float *x, int64_t M,
                                 float *out, struct kn_err *err)
{
    struct kern_stream_shape sh = {.max_tokens = M, .n_embd = w->K, .n_ff = w->K, .n_head = 1,
                                   .n_head_kv = 1, .head_dim = 64};
    struct kern_buf *wb = be->ops->upload_weight(be, w, err);
    struct kern_buf *xb = be->ops->alloc(be, (size_t)(M * w->K) * 4, false, err);
    struct kern_buf *yb = be->ops->alloc(be, (size_t)(M * w->N) * 4, false, err);
    struct kern_stream *s = be->ops->stream_create(be, &sh, pool, err);
    enum kn_status st = KN_E_NOMEM;
    if (wb && xb && yb && s) {
        s->ops->begin(s);
        s->ops->from_host(s, xb, 0, x, (size_t)(M * w->K) * 4);
        s->ops->matmul(s, 1, (const struct kern_buf *const *)&wb, xb, M, &yb);
        s->ops->to_host(s, yb, 0, out, (size_t)(M * w->N) * 4);
        st = s->ops->end(s, err);
    }
    if (s)
        s->ops->stream_free(s);
    kern_buf_free(wb);
    kern_buf_free(xb);
    kern_buf_free(yb);
    return st;
}

/* Every weight type at (N, K) over the batch sizes Ms, GPU = CPU byte for byte. */
static int sweep_matmul_k(struct kern_backend *be, struct kern_pool *pool, int64_t N,
                          int64_t K, const int64_t *Ms, size_t n_ms)
{
    int64_t MM = 0;
    for (size_t i = 0; i < n_ms; i++)
        MM = Ms[i] > MM ? Ms[i] : MM;
    float *wf = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(MM * K) * 4);
    float *y0 = malloc((size_t)(MM * N) * 4), *y1 = malloc((size_t)(MM * N) * 4);
    for (int64_t i = 0; i < N * K; i++)
        wf[i] = frand() * 0.1f;
    for (int64_t i = 0; i < MM * K; i++)
        x[i] = frand() * (i % 97 == 0 ? 40.0f : 1.0f);
    int types = 0;
    for (uint32_t t = 0; t < QT_COUNT; t++) {
        uint64_t rb;
        if (!kern_type_supported((enum quant_type)t) || !quant_can_quantize(t) ||
            !quant_row_size(t, (uint64_t)K, &rb))
            continue;
        uint8_t *data = malloc((size_t)(N * (int64_t)rb));
        for (int64_t n = 0; n < N; n++)
            CHECK(quant_quantize_row(t, wf + n * K, data + n * rb, K));
        struct kern_weight w;
        struct kn_err err = {0};
        CHECK(kern_weight_init(&w, (enum quant_type)t, N, K, data, (size_t)(N * (int64_t)rb), true,
                               &err) == KN_OK);
        for (size_t i = 0; i < n_ms; i++) {
            int64_t M = Ms[i];
            CHECKF(run_matmul(kern_backend_cpu(), pool, &w, x, M, y0, &err) == KN_OK, "%s", err.msg);
            CHECKF(run_matmul(be, pool, &w, x, M, y1, &err) == KN_OK, "%s", err.msg);
            CHECKF(memcmp(y0, y1, (size_t)(M * N) * 4) == 0, "matmul %s K=%lld M=%lld differs "
                   "from the CPU", quant_type_name(t), (long long)K, (long long)M);
        }
        kern_weight_free(&w);
        free(data);
        types++;
    }
    free(wf);
    free(x);
    free(y0);
    free(y1);
    return types;
}

static void sweep_matmul(struct kern_backend *be, struct kern_pool *pool)
{
    static const int64_t Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33, 65, 67};
    static const int64_t Ms_k[] = {1, 9, 33};
    const char *mm = getenv("KN_CUDA_MM");
    const int64_t N = 70;
    int types = sweep_matmul_k(be, pool, N, 512, Ms, sizeof Ms / sizeof Ms[0]);
    sweep_matmul_k(be, pool, 37, 8448, Ms_k, sizeof Ms_k / sizeof Ms_k[0]);
    printf("matmul sweep (%s path): %d weight types x %zu batch sizes, N=%lld, K=512; and "
           "x %zu at N=37, K=8448\n", mm ? mm : "auto", types, sizeof Ms / sizeof Ms[0],
           (long long)N, sizeof Ms_k / sizeof Ms_k[0]);
}

/* rmsnorm of rows of n on be, copied to out. */
static void run_rmsnorm(struct kern_backend *be, struct kern_pool *pool, const float *x,
                        const float *g, int64_t rows, int64_t n, float *out)
{
    struct kn_err err = {0};
    struct kern_stream_shape sh = {.max_tokens = rows, .n_embd = n, .n_ff = n, .n_head = 1,
                                   .n_head_kv = 1, .head_dim = 64};
    struct kern_buf *xb = be->ops->alloc(be, (size_t)(rows * n) * 4, false, &err);
    struct kern_buf *gb = be->ops->upload(be, g, n, &err);
    struct kern_stream *s = be->ops->stream_create(be, &sh, pool, &err);
    CHECKF(xb && gb && s, "%s", err.msg);
    if (xb && gb && s) {
        s->ops->begin(s);
        s->ops->from_host(s, xb, 0, x, (size_t)(rows * n) * 4);
        s->ops->rmsnorm(s, xb, xb, gb, rows, n, 1e-6f);
        s->ops->to_host(s, xb, 0, out, (size_t)(rows * n) * 4);
        CHECKF(s->ops->end(s, &err) == KN_OK, "%s", err.msg);
    }
    if (s)
        s->ops->stream_free(s);
    kern_buf_free(xb);
    kern_buf_free(gb);
}

static void sweep_rmsnorm(struct kern_backend *be, struct kern_pool *pool)
{
    static const int64_t ns[] = {1, 15, 16, 17, 640, 4099};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        int64_t n = ns[i], rows = 3;
        float *x = malloc((size_t)(rows * n) * 4), *g = malloc((size_t)n * 4);
        float *a = malloc((size_t)(rows * n) * 4), *b = malloc((size_t)(rows * n) * 4);
        for (int64_t k = 0; k < rows * n; k++)
            x[k] = frand() * 3.0f;
        for (int64_t k = 0; k < n; k++)
            g[k] = 1.0f + frand();
        run_rmsnorm(kern_backend_cpu(), pool, x, g, rows, n, a);
        run_rmsnorm(be, pool, x, g, rows, n, b);
        CHECKF(memcmp(a, b, (size_t)(rows * n) * 4) == 0, "rmsnorm n=%lld differs", (long long)n);
        free(x);
        free(g);
        free(a);
        free(b);
    }
    printf("rmsnorm sweep: rows of 1 to 4099\n");
}

/* KN_TEST_DEVICE=vulkan:0 runs the check and the sweeps on another device of the registry
 * (which shows the sweeps themselves work where no NVIDIA GPU is). */
int main(void)
{
    struct kn_err err = {0};
    const char *spec = getenv("KN_TEST_DEVICE");
    struct kern_backend *be = NULL;
    struct device dev = {0};
    if (spec && strncmp(spec, "cuda", 4) != 0) {
        if (device_open(spec, &dev, &err) != KN_OK || !device_is_gpu(&dev)) {
            printf("skipped: no device %s: %s\n", spec, err.msg);
            return 77;
        }
        be = dev.be;
        printf("device %s (%s), numerics %s\n", dev.spec, dev.name, dev.numerics);
    } else {
        if (cu_device_count(&err) == 0) {
            printf("skipped: %s\n", err.msg);
            return 77;
        }
        be = cu_backend_open(0, &err);
        CHECKF(be != NULL, "cuda:0: %s", err.msg);
        if (!be)
            CHECK_DONE();
        const struct cu_info *in = cu_backend_info(be);
        const struct cu_selftest *t = cu_backend_selftest(be);
        printf("device: %s (sm%d%d, %d SMs), class %s, numerics %s\nself-test: %s\n", in->name,
               in->cc_major, in->cc_minor, in->sm_count, cu_backend_class(be),
               be->ops->numerics(be), t->report);
        CHECKF(t->canonical, "the self-test did not find canonical-1: %s", t->report);
        CHECK(kern_backend_missing_op(be) == NULL);
        CHECK(kern_backend_has_ops(be, KERN_OP_BIT(attention_softcap) | KERN_OP_BIT(shortconv)));
    }
    struct kern_pool *pool = NULL;
    CHECK(kern_pool_create(2, &pool, &err) == KN_OK);
    enum kn_status st = kern_backend_check(be, pool, &err);
    CHECKF(st == KN_OK, "kern_backend_check: %s", err.msg);
    sweep_matmul(be, pool);
    sweep_rmsnorm(be, pool);
    kern_pool_free(pool);
    if (dev.be)
        device_close(&dev);
    else
        cu_backend_close(be);
    CHECK_DONE();
}
