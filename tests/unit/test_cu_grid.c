/* test_cu_grid.c: the CUDA backend's ops and kernel bodies on the host, on any machine.
 *
 * The CUDA backend's own op table (cu_backend_ops_fill: cu_backend.c's memory and
 * streams, cu_ops.c's ops) runs over a host stand-in for the driver: memory is host
 * memory, copies are memcpy, and a launch runs the kernel's body (src/cuda/kernels/
 * cuk_hd.h, the functions cuk.cu's __global__ wrappers call) over the whole grid, block
 * by block and thread by thread, a kernel's phases in order where it has barriers. The
 * results are compared bit for bit with the CPU backend:
 *   - kern_backend_check on the stand-in: every op against the CPU on its crafted inputs
 *     (every weight type, the caches, windows, soft-cap, sinks, short convolution,
 *     mixture-of-experts routing and products);
 *   - the products of every weight type on each path (cu_ops.c's choice by M, then the
 *     decode and the tiled kernel forced) over M 1 to 9, 16, 33, 65, N not a multiple of
 *     either kernel's rows, K of one block, several (a partial tiled step) and more than a
 *     decode round; the kernel launched is checked against cu_mm_decode;
 *   - sweeps of the ops this backend added: moe_route and moe_ffn / moe_ffn_oai over
 *     expert counts, top-k, gatings and batch sizes, on each product path (grouped rows
 *     of several experts in one tile); layernorm and rmsnorm over rows
 *     whose length is not a multiple of the lanes or the block; gelu, the gated
 *     activations over lengths not a multiple of the block (gpt-oss's SwiGLU runs in
 *     the moe_ffn_oai sweep).
 * This is not a GPU run: it proves the kernels' arithmetic and indexing and cu_ops.c's
 * grids, arguments and order of launches, not the driver, launch limits, the memory model
 * (a missing barrier, a race between threads) or the JIT's code (test_cu_host checks the
 * PTX's instructions; scripts/gpu_check.sh runs everything on a GPU). */
#include "check.h"

#include "cuda/cu_internal.h"
#include "kernels/backend.h"
#include "kernels/kernels.h"
#include "quant/quant.h"

#include <stdlib.h>
#include <string.h>

/* ================================================================ the driver stand-in */

static void *hp(CUdeviceptr p)
{
    return (void *)(uintptr_t)p;
}

static CUresult h_ok_ctx(CUcontext c)
{
    (void)c;
    return CU_OK;
}

/* Fresh memory is all-ones bytes (NaN floats): a kernel that reads what nobody wrote
 * shows in the comparison. */
static CUresult h_alloc(CUdeviceptr *p, size_t bytes)
{
    size_t n = (bytes + 63) / 64 * 64;
    void *m = aligned_alloc(64, n ? n : 64);
    if (!m)
        return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
    memset(m, 0xff, n ? n : 64);
    *p = (CUdeviceptr)(uintptr_t)m;
    return CU_OK;
}

static CUresult h_free(CUdeviceptr p)
{
    free(hp(p));
    return CU_OK;
}

static CUresult h_htod(CUdeviceptr dst, const void *src, size_t n)
{
    memcpy(hp(dst), src, n);
    return CU_OK;
}

static CUresult h_htod_async(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    (void)s;
    return h_htod(dst, src, n);
}

static CUresult h_dtoh_async(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    (void)s;
    memcpy(dst, hp(src), n);
    return CU_OK;
}

static CUresult h_memset(CUdeviceptr p, unsigned char v, size_t n)
{
    memset(hp(p), v, n);
    return CU_OK;
}

static CUresult h_stream_create(CUstream *s, unsigned flags)
{
    (void)flags;
    *s = (CUstream)(uintptr_t)1;
    return CU_OK;
}

static CUresult h_stream(CUstream s)
{
    (void)s;
    return CU_OK;
}

static CUresult h_errname(CUresult r, const char **name)
{
    *name = r == 1 ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR";
    return CU_OK;
}

static CUresult h_errstr(CUresult r, const char **str)
{
    *str = r == 1 ? "no host body for this kernel" : "host stand-in failure";
    return CU_OK;
}

/* ================================================================ launches */

/* Kernel parameter i as a value of type T, or as a pointer to T (a device address). */
#define PV(i, T) (*(T *)params[i])
#define PP(i, T) ((T *)hp(PV(i, CUdeviceptr)))

/* The kernels run, by name, to show that the sweeps reached them. */
static int64_t launched[CUK_COUNT];

/* A phase of cuk_hd.h's lists over the block's threads, one after the other. */
#define HOST_PHASE(call)                                                                    \
    for (int tid = 0; tid < nth; tid++) {                                                   \
        call;                                                                               \
    }

/* The quantized products: block (bx, by) of the grid, its threads through cuk_hd.h's
 * CUK_MMV_PHASES / CUK_MMT_PHASES. Shared memory starts as all-ones bytes in every block,
 * so a phase that reads what the block did not write shows in the comparison. */
#define HOST_MM(A, name, NAME, xblock, bsize)                                                 \
    static void run_mmv_##name(unsigned gx, unsigned gy, const struct cuk_mm_args a)         \
    {                                                                                         \
        static struct cuk_mmv_sh sh;                                                          \
        float acc[CUK_MMV_THREADS];                                                           \
        const int nth = CUK_MMV_THREADS;                                                      \
        for (unsigned bx = 0; bx < gx; bx++)                                                  \
            for (unsigned by = 0; by < gy; by++) {                                            \
                const int64_t n0 = (int64_t)bx * CUK_MMV_ROWS, m0 = (int64_t)by * CUK_MMV_TOKS; \
                memset(&sh, 0xff, sizeof sh);                                                 \
                for (int t = 0; t < nth; t++)                                                 \
                    acc[t] = 0.0f;                                                            \
                CUK_MMV_PHASES(HOST_PHASE, acc[tid], name, bsize)                             \
            }                                                                                 \
    }                                                                                         \
    static void run_mmt_##name(unsigned gx, unsigned gy, const struct cuk_mm_args a)         \
    {                                                                                         \
        static struct cuk_mmt_sh sh;                                                          \
        static struct cuk_mmt_reg rg[CUK_MMT_THREADS];                                        \
        const int nth = CUK_MMT_THREADS;                                                      \
        for (unsigned bx = 0; bx < gx; bx++)                                                  \
            for (unsigned by = 0; by < gy; by++) {                                            \
                const int64_t n0 = (int64_t)bx * CUK_MMT_ROWS, m0 = (int64_t)by * CUK_MMT_TOKS; \
                memset(&sh, 0xff, sizeof sh);                                                 \
                memset(rg, 0, sizeof rg);                                                     \
                CUK_MMT_PHASES(HOST_PHASE, &rg[tid], name, bsize)                             \
            }                                                                                 \
    }
CUK_MM_TYPES(HOST_MM, 0)

typedef void (*mm_run)(unsigned gx, unsigned gy, const struct cuk_mm_args a);

/* The host run of a quantized product kernel and the block size it takes; NULL: not one. */
static mm_run mm_run_of(int k, unsigned *threads)
{
    switch (k) {
#define MM_CASE(A, name, NAME, xb, bs)                                                        \
    case CUK_mmv_##name: *threads = CUK_MMV_THREADS; return run_mmv_##name;                   \
    case CUK_mmt_##name: *threads = CUK_MMT_THREADS; return run_mmt_##name;
        CUK_MM_TYPES(MM_CASE, 0)
#undef MM_CASE
    default: return NULL;
    }
}

/* Attention: block (t, h) of 32 lanes, cuk_hd.h's CUK_ATTN_PHASES. */
static void run_attn(unsigned gx, unsigned gy, void **params)
{
    const struct cuk_attn_args a = {PP(0, const float), PP(1, float), PP(2, const uint8_t),
                                    PP(3, const uint8_t), PV(4, int), PP(5, const int32_t),
                                    PV(6, int64_t), PV(7, int), PV(8, int), PV(9, int),
                                    PV(10, int), PV(11, float), PV(12, float),
                                    PP(13, const float)};
    static struct cuk_attn_sh sh;
    static struct cuk_attn_lane st[32];
    const int nth = 32;
    for (int64_t t = 0; t < gx; t++)
        for (int h = 0; h < (int)gy; h++) {
            const int64_t p = a.pos[t], lo = cuk_attn_lo(&a, t);
            CUK_ATTN_PHASES(HOST_PHASE, &st[tid])
        }
}

/* RMSNorm and LayerNorm: a block per row, cuk_hd.h's phase lists. */
static void run_norm(int k, unsigned gx, unsigned bx, void **params)
{
    struct cuk_norm_sh sh;
    const int nth = (int)bx;
    float *y = PP(0, float);
    const float *x = PP(1, const float), *w = PP(2, const float);
    const float *b = k == CUK_layernorm ? PP(3, const float) : NULL;
    const int64_t n = k == CUK_layernorm ? PV(4, int64_t) : PV(3, int64_t);
    const float eps = k == CUK_layernorm ? PV(5, float) : PV(4, float);
    for (unsigned row = 0; row < gx; row++) {
        const float *xr = x + row * n;
        float *yr = y + row * n;
        if (k == CUK_rmsnorm) {
            CUK_RMSNORM_PHASES(HOST_PHASE)
        } else {
            CUK_LAYERNORM_PHASES(HOST_PHASE)
        }
    }
}

/* Runs kernel f (its index + 1, as test_backend sets cb.fn) over the grid: each wrapper's
 * index arithmetic (cuk.cu) around its body. */
static CUresult h_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                         void **extra)
{
    (void)s;
    (void)shmem;
    (void)extra;
    const int k = (int)((uintptr_t)f - 1);
    if (gz != 1 || bz != 1 || k < 0 || k >= CUK_COUNT)
        return 1;
    launched[k]++;
    const int64_t nt = (int64_t)gx * bx; /* a 1-D kernel's threads */
    unsigned mm_threads = 0;
    mm_run mm = mm_run_of(k, &mm_threads);
    if (mm) {
        if (bx != mm_threads || by != 1)
            return 1;
        const struct cuk_mm_args a = {PP(0, const uint8_t), PP(1, const uint64_t),
                                      PP(2, const int32_t), PP(3, const int64_t),
                                      PV(4, int64_t), PV(5, int64_t), PV(6, size_t),
                                      PP(7, const uint8_t), PV(8, size_t), PV(9, int64_t),
                                      PP(10, float), PV(11, int64_t)};
        mm(gx, gy, a);
        return CU_OK;
    }
    if (k == CUK_mm_float) {
        for (unsigned bi = 0; bi < gx; bi++)
            for (unsigned bj = 0; bj < gy; bj++)
                for (unsigned ty = 0; ty < by; ty++)
                    for (unsigned tx = 0; tx < bx; tx++)
                        cuk_b_mm_float((int64_t)bi * 32 + tx, (int64_t)bj * by + ty,
                                       PP(0, const uint8_t), PP(1, const uint64_t),
                                       PP(2, const int32_t), PP(3, const int64_t),
                                       PV(4, int64_t), PV(5, int64_t), PV(6, size_t),
                                       PV(7, int), PP(8, const float), PV(9, int64_t),
                                       PP(10, float), PV(11, int64_t));
        return CU_OK;
    }
    if (gy != 1 && k != CUK_attn)
        return 1;
    switch (k) {
    case CUK_actq_q8f:
    case CUK_actq_q8k:
        for (int64_t i = 0; i < nt; i++)
            cuk_b_actq(i, PP(0, const float), PV(1, int64_t), PV(2, int64_t), PP(3, uint8_t),
                       k == CUK_actq_q8f ? 32 : 256);
        return CU_OK;
    case CUK_rmsnorm:
    case CUK_layernorm:
        run_norm(k, gx, bx, params);
        return CU_OK;
    case CUK_rope:
        for (int64_t i = 0; i < nt; i++)
            cuk_b_rope(i, PP(0, float), PP(1, const float), PV(2, int), PV(3, int),
                       PV(4, int64_t), PV(5, int64_t), PV(6, int64_t));
        return CU_OK;
    case CUK_eltwise:
        for (int64_t i = 0; i < nt; i++)
            cuk_b_eltwise(i, PV(0, int), PP(1, float), PP(2, const float), PV(3, int64_t),
                          PV(4, int64_t), PV(5, float));
        return CU_OK;
    case CUK_gather:
        for (int64_t i = 0; i < nt; i++)
            cuk_b_gather(i, PP(0, float), PP(1, const float), PP(2, const int64_t),
                         PV(3, int64_t), PV(4, int64_t));
        return CU_OK;
    case CUK_kv_store:
        for (int64_t i = 0; i < nt; i++)
            cuk_b_kv_store(i, PP(0, const float), PP(1, const float), PP(2, uint8_t),
                           PP(3, uint8_t), PV(4, int), PV(5, int64_t), PV(6, int64_t),
                           PV(7, int64_t), PP(8, const int32_t), PV(9, int64_t), PV(10, int64_t));
        return CU_OK;
    case CUK_attn:
        if (bx != 32 || by != 1)
            return 1;
        run_attn(gx, gy, params);
        return CU_OK;
    case CUK_conv_store:
        for (int64_t i = 0; i < nt; i++)
            cuk_b_conv_store(i, PP(0, const float), PP(1, float), PP(2, const int32_t),
                             PV(3, int64_t), PV(4, int64_t), PV(5, int64_t));
        return CU_OK;
    case CUK_conv:
        for (int64_t i = 0; i < nt; i++)
            cuk_b_conv(i, PP(0, const float), PP(1, float), PP(2, const float),
                       PP(3, const float), PP(4, const int32_t), PV(5, int64_t), PV(6, int64_t),
                       PV(7, int64_t), PV(8, int));
        return CU_OK;
    case CUK_moe_route:
        for (int64_t i = 0; i < nt; i++)
            cuk_b_moe_route(i, PV(0, int64_t), PV(1, int), PV(2, int), PV(3, int), PV(4, int),
                            PV(5, float), PP(6, const float), PP(7, const float),
                            PP(8, int32_t), PP(9, float));
        return CU_OK;
    case CUK_moe_group:
        if (nt != 1)
            return 1;
        kn_hd_moe_group(PP(0, const int32_t), PV(1, int64_t), PV(2, int64_t), PP(3, int64_t),
                        PP(4, int64_t), PP(5, int64_t));
        return CU_OK;
    case CUK_moe_gather:
        for (int64_t i = 0; i < nt; i++)
            cuk_b_moe_gather(i, PV(0, int64_t), PV(1, int64_t), PV(2, int64_t),
                             PP(3, const int64_t), PP(4, const float), PP(5, float));
        return CU_OK;
    case CUK_moe_bias:
        for (int64_t i = 0; i < nt; i++)
            cuk_b_moe_bias(i, PV(0, int64_t), PV(1, int64_t), PP(2, const int64_t),
                           PP(3, const int32_t), PP(4, const uint64_t), PP(5, float));
        return CU_OK;
    case CUK_moe_sum:
        for (int64_t i = 0; i < nt; i++)
            cuk_b_moe_sum(i, PV(0, int64_t), PV(1, int64_t), PV(2, int64_t),
                          PP(3, const int64_t), PP(4, const float), PP(5, const float),
                          PP(6, float));
        return CU_OK;
    default:
        return 1; /* cuk_probe: the self-test's, which needs a GPU */
    }
}

static const struct cu_drv host_drv = {
    .CtxSetCurrent = h_ok_ctx,
    .MemAlloc = h_alloc,
    .MemFree = h_free,
    .MemcpyHtoD = h_htod,
    .MemcpyHtoDAsync = h_htod_async,
    .MemcpyDtoHAsync = h_dtoh_async,
    .MemsetD8 = h_memset,
    .LaunchKernel = h_launch,
    .StreamCreate = h_stream_create,
    .StreamDestroy = h_stream,
    .StreamSynchronize = h_stream,
    .GetErrorName = h_errname,
    .GetErrorString = h_errstr,
};

/* The CUDA backend with the stand-in for a driver. */
static struct cu_backend host_cb;

static struct kern_backend *host_backend(void)
{
    host_cb.d = &host_drv;
    for (int k = 0; k < CUK_COUNT; k++)
        host_cb.fn[k] = (CUfunction)(uintptr_t)(k + 1);
    snprintf(host_cb.name, sizeof host_cb.name, "cuda-host");
    snprintf(host_cb.numerics, sizeof host_cb.numerics, "%s", KN_NUMERICS);
    cu_backend_ops_fill(&host_cb.ops);
    host_cb.base = (struct kern_backend){.ops = &host_cb.ops, .name = host_cb.name};
    return &host_cb.base;
}

/* ================================================================ the sweeps */

static uint64_t rng = 0x243f6a8885a308d3ull;

static float frand(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int32_t)(rng >> 32)) * 0x1p-31f;
}

/* n values in [-scale, scale), with ties and a negative zero mixed in. */
static void fill(float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = frand() * scale;
    if (n > 3) {
        x[n / 3] = -0.0f;
        x[n - 1] = x[0];
    }
}

/* One backend's buffers and stream for a sweep case. */
struct side {
    struct kern_backend *be;
    struct kern_stream *s;
    struct kern_buf *bufs[6 * KERN_MOE_MAX_EXPERTS];
    int n;
};

static struct kern_buf *keep(struct side *sd, struct kern_buf *b)
{
    const int cap = (int)(sizeof sd->bufs / sizeof sd->bufs[0]);
    CHECK(b != NULL && sd->n < cap);
    if (b && sd->n < cap)
        sd->bufs[sd->n++] = b;
    return b;
}

static struct kern_buf *up(struct side *sd, const float *x, int64_t n)
{
    struct kn_err err = {0};
    struct kern_buf *b = sd->be->ops->upload(sd->be, x, n, &err);
    CHECKF(b != NULL, "%s", err.msg);
    return keep(sd, b);
}

static struct kern_buf *alloc(struct side *sd, size_t bytes)
{
    struct kn_err err = {0};
    struct kern_buf *b = sd->be->ops->alloc(sd->be, bytes, false, &err);
    CHECKF(b != NULL, "%s", err.msg);
    return keep(sd, b);
}

static void side_open(struct side *sd, struct kern_backend *be, const struct kern_stream_shape *sh,
                      struct kern_pool *pool)
{
    struct kn_err err = {0};
    *sd = (struct side){.be = be};
    sd->s = be->ops->stream_create(be, sh, pool, &err);
    CHECKF(sd->s != NULL, "%s: %s", be->name, err.msg);
}

static void side_close(struct side *sd)
{
    for (int i = 0; i < sd->n; i++)
        kern_buf_free(sd->bufs[i]);
    if (sd->s)
        sd->be->ops->stream_free(sd->s);
}

/* Reads bytes of b after the pass: the bytes, or NULL (the pass failed). */
static void *read_back(struct side *sd, const struct kern_buf *b, size_t bytes)
{
    void *h = malloc(bytes);
    CHECK(h != NULL);
    sd->be->ops->to_host(sd->s, b, 0, h, bytes);
    return h;
}

static bool pass_end(struct side *sd, const char *what)
{
    struct kn_err err = {0};
    enum kn_status st = sd->be->ops->end(sd->s, &err);
    CHECKF(st == KN_OK, "%s on %s: %s", what, sd->be->name, err.msg);
    return st == KN_OK;
}

/* Compares n bytes; says where they first differ. */
static void same(const void *a, const void *b, size_t n, const char *what)
{
    const uint8_t *p = a, *q = b;
    size_t i = 0;
    while (i < n && p[i] == q[i])
        i++;
    CHECKF(i == n, "%s: the host grid differs from the CPU at byte %zu of %zu", what, i, n);
}

/* Quantized rows (N, K) of random values: the weight (owned by the caller, with data). */
static void make_weight(struct kern_weight *w, void **data, enum quant_type t, int64_t N, int64_t K)
{
    uint64_t rb = 0;
    CHECK(quant_row_size(t, K, &rb));
    uint8_t *p = aligned_alloc(64, ((size_t)N * rb + 63) / 64 * 64);
    float *row = malloc((size_t)K * sizeof *row);
    for (int64_t r = 0; r < N; r++) {
        fill(row, K, 1.0f);
        CHECK(quant_quantize_row(t, row, p + r * rb, K));
    }
    free(row);
    struct kn_err err = {0};
    CHECKF(kern_weight_init(w, t, N, K, p, (size_t)N * rb, true, &err) == KN_OK, "%s", err.msg);
    *data = p;
}

/* moe_route then moe_ffn (or moe_ffn_oai with biases) of T tokens over X experts, k
 * each, on both backends. */
static void moe_case(struct kern_pool *pool, struct kern_backend *dev, int X, int k, int64_t T,
                     enum kern_moe_gating gating, bool oai, const enum quant_type types[3])
{
    /* the down product's K is F: whole 256-blocks for a K-quant */
    const int64_t E = 256, F = quant_type_info(types[2])->block_size == 256 ? 256 : 96;
    char what[160];
    snprintf(what, sizeof what, "moe (%d experts, top %d, %lld tokens, gating %d, %s %s/%s/%s)",
             X, k, (long long)T, (int)gating, oai ? "oai" : "swiglu", quant_type_name(types[0]),
             quant_type_name(types[1]), quant_type_name(types[2]));
    struct kern_weight *ws = calloc((size_t)(3 * X), sizeof *ws);
    void **data = calloc((size_t)(3 * X), sizeof *data);
    float *logits = malloc((size_t)(T * X) * sizeof(float)), *x = malloc((size_t)(T * E) * sizeof(float));
    float *bias = malloc((size_t)(2 * F + E) * (size_t)X * sizeof(float)), *sel = malloc((size_t)X * sizeof(float));
    fill(logits, T * X, 4.0f);
    for (int64_t i = 1; i < T * X; i += 7)
        logits[i] = logits[i - 1]; /* ties between experts */
    fill(x, T * E, 2.0f);
    fill(bias, (2 * F + E) * X, 0.5f);
    fill(sel, X, 0.1f);
    for (int i = 0; i < 3 * X; i++)
        make_weight(&ws[i], &data[i], types[i / X], i / X == 2 ? E : F, i / X == 2 ? F : E);
    const struct kern_stream_shape sh = {.max_tokens = T, .n_embd = E, .n_ff = F, .n_head = 1,
                                         .n_head_kv = 1, .head_dim = 64, .n_expert = X,
                                         .n_expert_used = k, .n_ff_exp = F};
    const struct kern_moe_gate g = {.gating = gating, .n_expert = X, .n_used = k,
                                    .norm = gating != KERN_MOE_SOFTMAX_WEIGHT, .scale = k > 2 ? 1.5f : 1.0f};
    struct side sd[2];
    void *got[2][3] = {{0}};
    for (int b = 0; b < 2; b++) {
        struct side *d = &sd[b];
        side_open(d, b ? dev : kern_backend_cpu(), &sh, pool);
        if (!d->s)
            return;
        struct kern_buf *ex[3 * KERN_MOE_MAX_EXPERTS], *eb[3 * KERN_MOE_MAX_EXPERTS];
        struct kn_err err = {0};
        for (int i = 0; i < 3 * X; i++) {
            ex[i] = keep(d, d->be->ops->upload_weight(d->be, &ws[i], &err));
            eb[i] = up(d, bias + (i / X) * F * X + (i % X) * (i / X == 2 ? E : F), i / X == 2 ? E : F);
        }
        struct kern_buf *bl = up(d, logits, T * X), *bx = up(d, x, T * E), *bs = up(d, sel, X);
        struct kern_buf *ids = alloc(d, (size_t)(T * k) * sizeof(int32_t));
        struct kern_buf *w = alloc(d, (size_t)(T * k) * sizeof(float));
        struct kern_buf *y = alloc(d, (size_t)(T * E) * sizeof(float));
        struct kern_moe_ffn f = {.n_expert = X, .n_used = k,
                                 .act = oai ? KERN_GLU_SWIGLU_OAI : KERN_GLU_SWIGLU,
                                 .gate = (const struct kern_buf *const *)ex,
                                 .up = (const struct kern_buf *const *)ex + X,
                                 .down = (const struct kern_buf *const *)ex + 2 * X};
        if (oai) {
            f.gate_b = (const struct kern_buf *const *)eb;
            f.up_b = NULL; /* one of the biases absent */
            f.down_b = (const struct kern_buf *const *)eb + 2 * X;
        }
        d->be->ops->begin(d->s);
        d->be->ops->moe_route(d->s, &g, bl, gating == KERN_MOE_SIGMOID ? bs : NULL, T, ids, w);
        (oai ? d->be->ops->moe_ffn_oai : d->be->ops->moe_ffn)(d->s, &f, bx, ids, w, T, y);
        got[b][0] = read_back(d, ids, (size_t)(T * k) * sizeof(int32_t));
        got[b][1] = read_back(d, w, (size_t)(T * k) * sizeof(float));
        got[b][2] = read_back(d, y, (size_t)(T * E) * sizeof(float));
        pass_end(d, what);
    }
    char w2[200];
    snprintf(w2, sizeof w2, "%s: experts", what);
    same(got[0][0], got[1][0], (size_t)(T * k) * sizeof(int32_t), w2);
    snprintf(w2, sizeof w2, "%s: weights", what);
    same(got[0][1], got[1][1], (size_t)(T * k) * sizeof(float), w2);
    snprintf(w2, sizeof w2, "%s: output", what);
    same(got[0][2], got[1][2], (size_t)(T * E) * sizeof(float), w2);
    for (int b = 0; b < 2; b++) {
        for (int i = 0; i < 3; i++)
            free(got[b][i]);
        side_close(&sd[b]);
    }
    for (int i = 0; i < 3 * X; i++) {
        kern_weight_free(&ws[i]);
        free(data[i]);
    }
    free(ws);
    free(data);
    free(logits);
    free(x);
    free(bias);
    free(sel);
}

static void test_moe(struct kern_pool *pool, struct kern_backend *dev)
{
    static const enum quant_type mix[][3] = {
        {QT_Q4_K, QT_Q8_0, QT_Q6_K}, /* gate and up of different activation kinds */
        {QT_MXFP4, QT_MXFP4, QT_MXFP4}, /* gpt-oss's experts */
        {QT_F16, QT_Q5_0, QT_F32},
    };
    static const struct {
        int X, k;
        int64_t T;
        enum kern_moe_gating gating;
        bool oai;
        int mix;
    } cases[] = {
        {1, 1, 3, KERN_MOE_SOFTMAX, false, 0},
        {4, 2, 1, KERN_MOE_SOFTMAX, false, 0},
        {8, 2, 5, KERN_MOE_SIGMOID, false, 2},
        {16, 4, 37, KERN_MOE_SOFTMAX, false, 0},
        {32, 4, 9, KERN_MOE_SOFTMAX_WEIGHT, true, 1},
        {60, 8, 70, KERN_MOE_SIGMOID, false, 2},
        {128, 4, 2, KERN_MOE_SOFTMAX_WEIGHT, true, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        moe_case(pool, dev, cases[i].X, cases[i].k, cases[i].T, cases[i].gating, cases[i].oai,
                 mix[cases[i].mix]);
    printf("moe: %zu shapes, route and products bit for bit\n", sizeof cases / sizeof cases[0]);
}

/* layernorm, rmsnorm, gelu and the gated activations on both backends. */
static void test_rowwise(struct kern_pool *pool, struct kern_backend *dev)
{
    static const int64_t lens[] = {1, 17, 100, 768, 1031};
    static const int64_t rows[] = {1, 3, 7};
    int cases = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            const int64_t n = lens[li], R = rows[ri], total = n * R;
            const struct kern_stream_shape sh = {.max_tokens = R, .n_embd = n, .n_ff = n,
                                                 .n_head = 1, .n_head_kv = 1, .head_dim = 64};
            float *x = malloc((size_t)total * sizeof(float)), *u = malloc((size_t)total * sizeof(float));
            float *gw = malloc((size_t)n * sizeof(float)), *gb = malloc((size_t)n * sizeof(float));
            fill(x, total, 9.0f);
            fill(u, total, 3.0f);
            fill(gw, n, 2.0f);
            fill(gb, n, 1.0f);
            enum { N_OUT = 8 };
            void *got[2][N_OUT];
            struct side sd[2];
            for (int b = 0; b < 2; b++) {
                struct side *d = &sd[b];
                const struct kern_backend_ops *op;
                side_open(d, b ? dev : kern_backend_cpu(), &sh, pool);
                if (!d->s)
                    return;
                op = d->be->ops;
                struct kern_buf *bx = up(d, x, total), *bu = up(d, u, total);
                struct kern_buf *bw = up(d, gw, n), *bb = up(d, gb, n);
                struct kern_buf *o[N_OUT];
                op->begin(d->s);
                for (int i = 0; i < N_OUT; i++) { /* each op in place on a copy of x */
                    o[i] = alloc(d, (size_t)total * sizeof(float));
                    op->from_host(d->s, o[i], 0, x, (size_t)total * sizeof(float));
                }
                op->layernorm(d->s, o[0], o[0], bw, bb, R, n, 1e-5f);
                op->layernorm(d->s, o[1], bx, NULL, NULL, R, n, 1e-12f);
                op->layernorm(d->s, o[2], bx, bw, NULL, R, n, 1e-6f);
                op->rmsnorm(d->s, o[3], o[3], bw, R, n, 1e-6f);
                op->rmsnorm(d->s, o[4], bx, NULL, R, n, 1e-5f);
                op->gelu(d->s, o[5], total);
                op->glu(d->s, KERN_GLU_SWIGLU, o[6], bu, total);
                op->glu(d->s, KERN_GLU_GEGLU, o[7], bu, total);
                for (int i = 0; i < N_OUT; i++)
                    got[b][i] = read_back(d, o[i], (size_t)total * sizeof(float));
                pass_end(d, "rowwise");
            }
            static const char *const names[N_OUT] = {
                "layernorm (gain, bias, in place)", "layernorm", "layernorm (gain)",
                "rmsnorm (gain, in place)", "rmsnorm", "gelu", "swiglu", "geglu"};
            for (int i = 0; i < N_OUT; i++) {
                char what[160];
                snprintf(what, sizeof what, "%s (%lld rows of %lld)", names[i], (long long)R,
                         (long long)n);
                same(got[0][i], got[1][i], (size_t)total * sizeof(float), what);
                free(got[0][i]);
                free(got[1][i]);
            }
            side_close(&sd[0]);
            side_close(&sd[1]);
            free(x);
            free(u);
            free(gw);
            free(gb);
            cases++;
        }
    printf("rowwise: %d shapes of layernorm, rmsnorm, gelu, swiglu, geglu bit for bit\n",
           cases);
}

/* The products' paths a sweep runs (enum cu_mm_path): cu_ops.c's choice by M, then each
 * forced. */
#define N_PATHS ((size_t)CU_MM_PATHS)

/* y (M, N) of x . w^T on be (the host grid with host_cb.mm_path as set), or NULL. */
static float *matmul_on(struct kern_backend *be, struct kern_pool *pool,
                        const struct kern_weight *w, const float *x, int64_t M, const char *what)
{
    const int64_t N = w->N, K = w->K;
    const struct kern_stream_shape sh = {.max_tokens = M, .n_embd = K, .n_ff = N,
                                         .n_head = 1, .n_head_kv = 1, .head_dim = 64};
    struct side d;
    struct kn_err err = {0};
    side_open(&d, be, &sh, pool);
    if (!d.s)
        return NULL;
    const struct kern_buf *bw = keep(&d, be->ops->upload_weight(be, w, &err));
    struct kern_buf *bx = up(&d, x, M * K), *by = alloc(&d, (size_t)(M * N) * sizeof(float));
    be->ops->begin(d.s);
    be->ops->matmul(d.s, 1, &bw, bx, M, &by);
    float *got = read_back(&d, by, (size_t)(M * N) * sizeof(float));
    if (!pass_end(&d, what)) {
        free(got);
        got = NULL;
    }
    side_close(&d);
    return got;
}

/* The launches so far of a quantized type's decode or tiled kernel. */
static int64_t mm_launches(enum quant_type t, bool decode)
{
    switch (t) {
#define MM_CASE(A, name, NAME, xb, bs)                                                        \
    case QT_##NAME: return launched[decode ? CUK_mmv_##name : CUK_mmt_##name];
        CUK_MM_TYPES(MM_CASE, 0)
#undef MM_CASE
    default: return -1;
    }
}

/* One weight (type, N, K) against every M of Ms on each path, bit for bit with the CPU. */
static int matmul_case(struct kern_pool *pool, struct kern_backend *dev, enum quant_type t,
                       int64_t N, int64_t K, const int64_t *Ms, size_t n_ms)
{
    struct kern_weight w;
    void *data = NULL;
    int cases = 0;
    make_weight(&w, &data, t, N, K);
    const bool quantized = kern_act_kind_for(t) != KERN_ACT_F32;
    for (size_t mi = 0; mi < n_ms; mi++) {
        const int64_t M = Ms[mi];
        float *x = malloc((size_t)(M * K) * sizeof(float));
        fill(x, M * K, 3.0f);
        char what[128];
        snprintf(what, sizeof what, "matmul %s (%lld x %lld, %lld rows)", quant_type_name(t),
                 (long long)N, (long long)K, (long long)M);
        float *want = matmul_on(kern_backend_cpu(), pool, &w, x, M, what);
        for (size_t p = 0; p < (quantized ? N_PATHS : 1) && want; p++) {
            host_cb.mm_path = (enum cu_mm_path)p;
            const bool decode = cu_mm_decode((enum cu_mm_path)p, M);
            const int64_t before = mm_launches(t, decode);
            float *got = matmul_on(dev, pool, &w, x, M, what);
            char w2[160];
            snprintf(w2, sizeof w2, "%s, %s path", what, cu_mm_path_name((enum cu_mm_path)p));
            if (got)
                same(want, got, (size_t)(M * N) * sizeof(float), w2);
            if (quantized)
                CHECKF(mm_launches(t, decode) == before + 1, "%s: not the %s kernel", w2,
                       decode ? "decode" : "tiled");
            free(got);
            cases++;
        }
        host_cb.mm_path = CU_MM_AUTO;
        free(want);
        free(x);
    }
    kern_weight_free(&w);
    free(data);
    return cases;
}

/* matmul of every weight type with a kernel on both paths (and cu_ops.c's choice): M from
 * 1 to 9 (the decode path's tokens and one past), 16, 33, 65 (tiles of tokens, partial);
 * N not a multiple of either path's rows; K of several blocks with a partial tiled step,
 * one block, and more blocks than a decode round holds. */
static void test_matmul(struct kern_pool *pool, struct kern_backend *dev)
{
    static const enum quant_type types[] = {QT_F32, QT_F16, QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q4_1,
                                            QT_Q5_0, QT_Q5_1, QT_IQ4_NL, QT_MXFP4, QT_Q2_K,
                                            QT_Q3_K, QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_IQ4_XS};
    static const int64_t Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33, 65};
    static const int64_t Ms_k[] = {1, 9, 33};
    const size_t n_ms = sizeof Ms / sizeof Ms[0], n_ms_k = sizeof Ms_k / sizeof Ms_k[0];
    int cases = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int64_t bs = quant_type_info(types[ti])->block_size == QK_K ? QK_K : 32;
        const int64_t several = bs == QK_K ? 3 : 10; /* 32-blocks: a step of 8, then 2 */
        const int64_t many = CUK_MMV_CHUNK + 9;      /* two decode rounds */
        cases += matmul_case(pool, dev, types[ti], 70, several * bs, Ms, n_ms);
        cases += matmul_case(pool, dev, types[ti], 37, bs, Ms_k, n_ms_k);
        cases += matmul_case(pool, dev, types[ti], 37, many * bs, Ms_k, n_ms_k);
    }
    printf("matmul: %d cases (every weight type, both paths) bit for bit\n", cases);
}

int main(void)
{
    struct kn_err err = {0};
    struct kern_pool *pool = NULL;
    CHECK(kern_pool_create(2, &pool, &err) == KN_OK);
    struct kern_backend *dev = host_backend();
    /* every op the CUDA backend has, the optional ones included */
    CHECKF(kern_backend_missing_op(dev) == NULL, "missing %s", kern_backend_missing_op(dev));
    char missing[256];
    CHECKF(kern_backend_missing_optional(dev, missing, sizeof missing) == 0, "lacks %s", missing);
    err = (struct kn_err){0};
    CHECKF(kern_backend_check(dev, pool, &err) == KN_OK, "%s", err.msg);
    printf("kern_backend_check: every op of the CUDA backend over the host grid equals the CPU\n");
    test_matmul(pool, dev);
    for (size_t p = 0; p < N_PATHS; p++) { /* the grouped rows on each product path */
        host_cb.mm_path = (enum cu_mm_path)p;
        test_moe(pool, dev);
    }
    host_cb.mm_path = CU_MM_AUTO;
    test_rowwise(pool, dev);
    /* each kernel but the self-test's probe ran */
    for (int k = 0; k < CUK_COUNT; k++)
        CHECKF(launched[k] > 0 || k == CUK_probe, "kernel %s never ran", cu_kernel_name((enum cuk_kernel)k));
    printf("host grid: not a GPU run (the arithmetic and indexing, not the driver or memory model)\n");
    kern_pool_free(pool);
    CHECK_DONE();
}
