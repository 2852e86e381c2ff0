/* cuk.cu: the CUDA kernels of the CUDA backend (src/cuda/cu_backend.c launches them by
 * name through the driver API). Compiled by nvcc to PTX (CMakeLists.txt: --fmad=false,
 * IEEE division and sqrt, no flush to zero) and embedded in the binary.
 *
 * Every result is the CPU reference's (docs/numerics.md, canonical-1) by construction:
 * the per-element and per-block rules are the functions of src/kernels/kern_hd.h that the
 * CPU reference itself calls (kn_hd_expf, kn_hd_quantize_block, kn_hd_blk_<type>, ...),
 * and every float operation written here is an explicit __fmaf_rn / __fmul_rn / __fadd_rn
 * (KN_FMA / KN_MUL / KN_ADD), in the reference's order. No float sum is split or
 * reordered (rules 1 and 2 of docs/numerics.md): one thread runs each output's float
 * chain; only exact integer sums are spread over threads (the decode products' blocks).
 *
 * The bodies are cuk_hd.h's functions of the thread's indices (host-tested over whole
 * grids by tests/unit/test_cu_grid.c); the wrappers here compute the indices, hold the
 * shared memory and put the barriers between a body's phases. Kernels are extern "C"
 * (unmangled names for cuModuleGetFunction); sizes are int64 where a tensor can exceed
 * 2^31 elements. */
#include "cuda/kernels/cuk_hd.h"

#include <math.h>
#include <stdint.h>

typedef int64_t i64;

/* ================================================================ probes (self-test) */

/* out[5i..5i+4] = fma(a, b, c), a / b, sqrt(a), a * b, a + c for the triple in[3i..]. */
extern "C" __global__ void cuk_probe(const float *in, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    float a = in[3 * i], b = in[3 * i + 1], c = in[3 * i + 2];
    out[5 * i] = __fmaf_rn(a, b, c);
    out[5 * i + 1] = __fdiv_rn(a, b);
    out[5 * i + 2] = __fsqrt_rn(a);
    out[5 * i + 3] = __fmul_rn(a, b);
    out[5 * i + 4] = __fadd_rn(a, c);
}

/* ================================================================ activation quantization */

/* One thread per block of x (cuk_b_actq). */
#define CUK_TID ((i64)blockIdx.x * blockDim.x + threadIdx.x)

extern "C" __global__ void cuk_actq_q8f(const float *x, i64 M, i64 K, uint8_t *q)
{
    cuk_b_actq(CUK_TID, x, M, K, q, 32);
}

extern "C" __global__ void cuk_actq_q8k(const float *x, i64 M, i64 K, uint8_t *q)
{
    cuk_b_actq(CUK_TID, x, M, K, q, 256);
}

/* ================================================================ matrix products
 * y (M, ldy) columns 0..N-1 = x (M, K) . w^T, with wptr, ids, row_of non-NULL the grouped
 * rows of a mixture-of-experts layer, each against its expert's weight. Two kernels per
 * type, the same bits (cuk_hd.h): cuk_mmv_<type> (decode: block CUK_MMV_THREADS, grid
 * (ceil(N / CUK_MMV_ROWS), ceil(M / CUK_MMV_TOKS))), the warps splitting each row's blocks
 * for their integer parts; cuk_mmt_<type> (prefill: block CUK_MMT_THREADS, grid
 * (ceil(N / CUK_MMT_ROWS), ceil(M / CUK_MMT_TOKS))), tiles of rows x tokens through shared
 * memory. cu_ops.c picks by M. */

/* A phase of cuk_hd.h's lists, then the block's barrier. */
#define CUK_PHASE(call) call; __syncthreads();

#define CUK_MM_PARAMS                                                                         \
    const uint8_t *w, const uint64_t *wptr, const int32_t *ids, const i64 *row_of, i64 N,     \
        i64 K, size_t row_bytes, const uint8_t *xq, size_t x_row_bytes, i64 M, float *y,      \
        i64 ldy

#define CUK_MM_KERNELS(A, name, NAME, xblock, bsize)                                          \
    extern "C" __global__ void cuk_mmv_##name(CUK_MM_PARAMS)                                  \
    {                                                                                         \
        __shared__ struct cuk_mmv_sh sh;                                                      \
        const struct cuk_mm_args a = {w, wptr, ids, row_of, N, K, row_bytes, xq, x_row_bytes, \
                                      M, y, ldy};                                             \
        const int tid = threadIdx.x;                                                          \
        const i64 n0 = (i64)blockIdx.x * CUK_MMV_ROWS, m0 = (i64)blockIdx.y * CUK_MMV_TOKS;   \
        float acc = 0.0f;                                                                     \
        CUK_MMV_PHASES(CUK_PHASE, acc, name, bsize)                                           \
    }                                                                                         \
    extern "C" __global__ void cuk_mmt_##name(CUK_MM_PARAMS)                                  \
    {                                                                                         \
        __shared__ struct cuk_mmt_sh sh;                                                      \
        const struct cuk_mm_args a = {w, wptr, ids, row_of, N, K, row_bytes, xq, x_row_bytes, \
                                      M, y, ldy};                                             \
        const int tid = threadIdx.x;                                                          \
        const i64 n0 = (i64)blockIdx.x * CUK_MMT_ROWS, m0 = (i64)blockIdx.y * CUK_MMT_TOKS;   \
        struct cuk_mmt_reg rg = {{0.0f}};                                                     \
        CUK_MMT_PHASES(CUK_PHASE, &rg, name, bsize)                                           \
    }

CUK_MM_TYPES(CUK_MM_KERNELS, 0)

/* Float weights (one thread per output, block (32, TY), grid (ceil(N / 32), ceil(M / TY)):
 * lane x owns weight row n, warp y row m; type: 0 f32, 1 f16, 2 bf16). */
extern "C" __global__ void cuk_mm_float(const uint8_t *w, const uint64_t *wptr, const int32_t *ids,
                                        const i64 *row_of, i64 N, i64 K, size_t row_bytes,
                                        int type, const float *x, i64 M, float *y, i64 ldy)
{
    cuk_b_mm_float((i64)blockIdx.x * 32 + threadIdx.x, (i64)blockIdx.y * blockDim.y + threadIdx.y,
                   w, wptr, ids, row_of, N, K, row_bytes, type, x, M, y, ldy);
}

/* ================================================================ norms, RoPE, elementwise */

/* One block (CUK_NORM_THREADS) per row: cuk_hd.h's phases. */
extern "C" __global__ void cuk_rmsnorm(float *y, const float *x, const float *w, i64 n, float eps)
{
    __shared__ struct cuk_norm_sh sh;
    const float *xr = x + (i64)blockIdx.x * n;
    float *yr = y + (i64)blockIdx.x * n;
    const int tid = threadIdx.x, nth = blockDim.x;
    CUK_RMSNORM_PHASES(CUK_PHASE)
}

extern "C" __global__ void cuk_layernorm(float *y, const float *x, const float *w, const float *b,
                                         i64 n, float eps)
{
    __shared__ struct cuk_norm_sh sh;
    const float *xr = x + (i64)blockIdx.x * n;
    float *yr = y + (i64)blockIdx.x * n;
    const int tid = threadIdx.x, nth = blockDim.x;
    CUK_LAYERNORM_PHASES(CUK_PHASE)
}

extern "C" __global__ void cuk_rope(float *x, const float *tab, int neox, int n_rot, i64 T, i64 H,
                                    i64 D)
{
    cuk_b_rope(CUK_TID, x, tab, neox, n_rot, T, H, D);
}

/* op: enum cuk_elt (cuk_hd.h); total = the elements of y. */
extern "C" __global__ void cuk_eltwise(int op, float *y, const float *a, i64 total, i64 n, float v)
{
    cuk_b_eltwise(CUK_TID, op, y, a, total, n, v);
}

/* dst row j (n) = src row rows[j]. */
extern "C" __global__ void cuk_gather(float *dst, const float *src, const i64 *rows, i64 n_rows, i64 n)
{
    cuk_b_gather(CUK_TID, dst, src, rows, n_rows, n);
}

/* ================================================================ mixture of experts
 * moe_ffn (cu_ops.c): route (one thread per token), group (one thread: the counting sort
 * of kn_hd_moe_group over the T * k pairs), gather the grouped inputs, the grouped
 * products (cuk_mmv_<type> or cuk_mmt_<type> with the experts' table), the biases and
 * the activation (cuk_eltwise), the down products, then the weighted sum in rank order
 * per token. */

extern "C" __global__ void cuk_moe_route(i64 T, int gating, int n, int k, int norm, float scale,
                                         const float *logits, const float *bias, int32_t *ids,
                                         float *w)
{
    cuk_b_moe_route(CUK_TID, T, gating, n, k, norm, scale, logits, bias, ids, w);
}

extern "C" __global__ void cuk_moe_group(const int32_t *ids, i64 R, i64 n_expert, i64 *off,
                                         i64 *row_of, i64 *slot)
{
    if (CUK_TID == 0)
        kn_hd_moe_group(ids, R, n_expert, off, row_of, slot);
}

extern "C" __global__ void cuk_moe_gather(i64 R, i64 k, i64 E, const i64 *row_of, const float *x,
                                          float *xg)
{
    cuk_b_moe_gather(CUK_TID, R, k, E, row_of, x, xg);
}

extern "C" __global__ void cuk_moe_bias(i64 R, i64 N, const i64 *row_of, const int32_t *ids,
                                        const uint64_t *bptr, float *y)
{
    cuk_b_moe_bias(CUK_TID, R, N, row_of, ids, bptr, y);
}

extern "C" __global__ void cuk_moe_sum(i64 T, i64 k, i64 E, const i64 *slot, const float *yg,
                                       const float *w, float *y)
{
    cuk_b_moe_sum(CUK_TID, T, k, E, slot, yg, w, y);
}

/* ================================================================ KV cache and attention */

extern "C" __global__ void cuk_kv_store(const float *k_new, const float *v_new, uint8_t *kc,
                                        uint8_t *vc, int kvt, i64 D, i64 Hkv, i64 n_ctx,
                                        const int32_t *pos, i64 t0, i64 n)
{
    cuk_b_kv_store(CUK_TID, k_new, v_new, kc, vc, kvt, D, Hkv, n_ctx, pos, t0, n);
}

/* Attention of one run: block (32) per (query t of the run, head h); grid (n_q, H);
 * cuk_hd.h's phases per 32-position tile, the lanes' registers in st. */
extern "C" __global__ void cuk_attn(const float *q, float *out, const uint8_t *kc, const uint8_t *vc,
                                    int kvt, const int32_t *pos, i64 n_ctx, int H, int Hkv, int D,
                                    int window, float scale, float softcap, const float *sinks)
{
    __shared__ struct cuk_attn_sh sh;
    const struct cuk_attn_args a = {q, out, kc, vc, kvt, pos, n_ctx, H, Hkv, D, window, scale,
                                    softcap, sinks};
    const int tid = threadIdx.x, h = blockIdx.y;
    const i64 t = blockIdx.x, p = pos[t], lo = cuk_attn_lo(&a, t);
    struct cuk_attn_lane st;
    CUK_ATTN_PHASES(CUK_PHASE, &st)
}

/* ================================================================ lfm2's short convolution */

extern "C" __global__ void cuk_conv_store(const float *bcx, float *rows, const int32_t *pos,
                                          i64 t0, i64 n, i64 E)
{
    cuk_b_conv_store(CUK_TID, bcx, rows, pos, t0, n, E);
}

extern "C" __global__ void cuk_conv(const float *bcx, float *out, const float *w, const float *rows,
                                    const int32_t *pos, i64 t0, i64 n, i64 E, int L)
{
    cuk_b_conv(CUK_TID, bcx, out, w, rows, pos, t0, n, E, L);
}
