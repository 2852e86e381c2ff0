/* cuk.cu: the CUDA kernels of the CUDA backend (src/cuda/cu_backend.c launches them by
 * name through the driver API). Compiled by nvcc to PTX (CMakeLists.txt: --fmad=false,
 * IEEE division and sqrt, no flush to zero) and embedded in the binary.
 *
 * Every result is the CPU reference's (docs/numerics.md, canonical-1) by construction:
 * the per-element and per-block rules are the functions of src/kernels/kern_hd.h that the
 * CPU reference itself calls (kn_hd_expf, kn_hd_quantize_block, kn_hd_blk_<type>, ...),
 * and every float operation written here is an explicit __fmaf_rn / __fmul_rn / __fadd_rn
 * (KN_FMA / KN_MUL / KN_ADD), in the reference's order. The parallelism is over outputs
 * only (rules 1 and 2 of docs/numerics.md): a thread owns an output and runs its whole
 * chain; no float sum is split or reordered.
 *
 * Kernels are extern "C" (unmangled names for cuModuleGetFunction); sizes are int64
 * where a tensor can exceed 2^31 elements. */
#include "kernels/kern_hd.h"

#include <math.h>
#include <stdint.h>

typedef int64_t i64;

#define KN_INF __int_as_float(0x7f800000)

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

/* One thread per block of x (M, K), n = 32 (Q8_32: d, s, qs) or 256 (Q8_K: d, qs, bsums):
 * kern_quantize_row_q8f / kern_quantize_row_q8k's bytes. */
__device__ __forceinline__ void cuk_actq(const float *x, i64 M, i64 K, uint8_t *q, int n)
{
    i64 nb = K / n, i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= M * nb)
        return;
    i64 m = i / nb, b = i % nb;
    uint8_t *o = q + (size_t)i * (n == 32 ? KN_Q8F_BYTES : KN_Q8K_BYTES);
    int8_t *qs = (int8_t *)(o + (n == 32 ? KN_Q8F_QS : KN_Q8K_QS));
    *(float *)o = kn_hd_quantize_block(x + m * K + b * n, n, qs);
    if (n == 32) {
        int32_t s = 0;
        for (int k = 0; k < 32; k++)
            s += qs[k];
        *(int32_t *)(o + KN_Q8F_S) = s;
        return;
    }
    int16_t *bs = (int16_t *)(o + KN_Q8K_BSUMS);
    for (int j = 0; j < 16; j++) {
        int s = 0;
        for (int k = 0; k < 16; k++)
            s += qs[16 * j + k];
        bs[j] = (int16_t)s;
    }
}

extern "C" __global__ void cuk_actq_q8f(const float *x, i64 M, i64 K, uint8_t *q)
{
    cuk_actq(x, M, K, q, 32);
}

extern "C" __global__ void cuk_actq_q8k(const float *x, i64 M, i64 K, uint8_t *q)
{
    cuk_actq(x, M, K, q, 256);
}

/* ================================================================ matrix products
 * y (M, ldy) columns 0..N-1 = x (M, K) . w^T. Launch: block (32, TY), grid (ceil(N / 32),
 * ceil(M / TY)); lane x owns weight row n, warp y token m: the 32 lanes of a warp read
 * one activation row (one broadcast load per word) and the warps of a block share the
 * weight rows through L1. Each thread runs the reference's chain of its output over the
 * blocks in ascending order. */

#define CUK_MM_QUANT(name, fn, wblock, xblock, bsize)                                        \
    extern "C" __global__ void cuk_mm_##name(const uint8_t *w, i64 N, i64 K, size_t row_bytes, \
                                             const uint8_t *xq, size_t x_row_bytes, i64 M,    \
                                             float *y, i64 ldy)                               \
    {                                                                                         \
        i64 n = (i64)blockIdx.x * 32 + threadIdx.x;                                           \
        i64 m = (i64)blockIdx.y * blockDim.y + threadIdx.y;                                   \
        if (n >= N || m >= M)                                                                 \
            return;                                                                           \
        const uint8_t *wr = w + (size_t)n * row_bytes;                                        \
        const uint8_t *xr = xq + (size_t)m * x_row_bytes;                                     \
        i64 nb = K / (bsize);                                                                 \
        float acc = 0.0f;                                                                     \
        for (i64 b = 0; b < nb; b++)                                                          \
            acc = fn(wr + (size_t)b * (wblock), xr + (size_t)b * (xblock), acc);              \
        y[m * ldy + n] = acc;                                                                 \
    }

CUK_MM_QUANT(q8_0, kn_hd_blk_q8_0, 34, KN_Q8F_BYTES, 32)
CUK_MM_QUANT(q4_0, kn_hd_blk_q4_0, 18, KN_Q8F_BYTES, 32)
CUK_MM_QUANT(q4_1, kn_hd_blk_q4_1, 20, KN_Q8F_BYTES, 32)
CUK_MM_QUANT(q5_0, kn_hd_blk_q5_0, 22, KN_Q8F_BYTES, 32)
CUK_MM_QUANT(q5_1, kn_hd_blk_q5_1, 24, KN_Q8F_BYTES, 32)
CUK_MM_QUANT(iq4_nl, kn_hd_blk_iq4_nl, 18, KN_Q8F_BYTES, 32)
CUK_MM_QUANT(mxfp4, kn_hd_blk_mxfp4, 17, KN_Q8F_BYTES, 32)
CUK_MM_QUANT(q2_k, kn_hd_blk_q2_k, 84, KN_Q8K_BYTES, 256)
CUK_MM_QUANT(q3_k, kn_hd_blk_q3_k, 110, KN_Q8K_BYTES, 256)
CUK_MM_QUANT(q4_k, kn_hd_blk_q4_k, 144, KN_Q8K_BYTES, 256)
CUK_MM_QUANT(q5_k, kn_hd_blk_q5_k, 176, KN_Q8K_BYTES, 256)
CUK_MM_QUANT(q6_k, kn_hd_blk_q6_k, 210, KN_Q8K_BYTES, 256)
CUK_MM_QUANT(iq4_xs, kn_hd_blk_iq4_xs, 136, KN_Q8K_BYTES, 256)

/* Float weights: the canonical 16-lane chain over K (acc[k % 16] = fma(x[k], w[k], ...)),
 * then the tree; f16 and bf16 widened exactly. */
__device__ __forceinline__ float cuk_wf(const uint8_t *wr, i64 k, int type)
{
    if (type == 0)
        return ((const float *)wr)[k];
    uint32_t h = ((const uint16_t *)wr)[k];
    return type == 1 ? kn_hd_f16_to_f32(h) : kn_hd_bf16_to_f32(h);
}

/* type: 0 f32, 1 f16, 2 bf16. */
extern "C" __global__ void cuk_mm_float(const uint8_t *w, i64 N, i64 K, size_t row_bytes,
                                        int type, const float *x, i64 M, float *y, i64 ldy)
{
    i64 n = (i64)blockIdx.x * 32 + threadIdx.x;
    i64 m = (i64)blockIdx.y * blockDim.y + threadIdx.y;
    if (n >= N || m >= M)
        return;
    const uint8_t *wr = w + (size_t)n * row_bytes;
    const float *xr = x + m * K;
    float acc[16];
#pragma unroll
    for (int l = 0; l < 16; l++)
        acc[l] = 0.0f;
    i64 k = 0;
    for (; k + 16 <= K; k += 16) {
#pragma unroll
        for (int l = 0; l < 16; l++)
            acc[l] = KN_FMA(xr[k + l], cuk_wf(wr, k + l, type), acc[l]);
    }
    for (int l = 0; k + l < K; l++)
        acc[l] = KN_FMA(xr[k + l], cuk_wf(wr, k + l, type), acc[l]);
    y[m * ldy + n] = kn_hd_tree16(acc);
}

/* ================================================================ norms, RoPE, elementwise */

/* One block (64 threads) per row: lanes 0..15 run the canonical chains of x . x, thread 0
 * the tree and r = 1 / sqrt(ss / n + eps), then every thread scales its elements. */
extern "C" __global__ void cuk_rmsnorm(float *y, const float *x, const float *w, i64 n, float eps)
{
    __shared__ float lanes[16];
    __shared__ float rs;
    const float *xr = x + (i64)blockIdx.x * n;
    float *yr = y + (i64)blockIdx.x * n;
    int tid = threadIdx.x;
    if (tid < 16) {
        float acc = 0.0f;
        for (i64 k = tid; k < n; k += 16)
            acc = KN_FMA(xr[k], xr[k], acc);
        lanes[tid] = acc;
    }
    __syncthreads();
    if (tid == 0) {
        float acc[16];
        for (int l = 0; l < 16; l++)
            acc[l] = lanes[l];
        float mean = KN_DIV(kn_hd_tree16(acc), (float)n);
        rs = KN_DIV(1.0f, KN_SQRT(KN_ADD(mean, eps)));
    }
    __syncthreads();
    float r = rs;
    for (i64 k = tid; k < n; k += blockDim.x)
        yr[k] = w ? KN_MUL(KN_MUL(xr[k], r), w[k]) : KN_MUL(xr[k], r);
}

/* One thread per (token, head, pair): y0 = fma(x0, c, -(x1 s)), y1 = fma(x0, s, x1 c).
 * neox: pairs (i, i + n_rot/2), else (2i, 2i + 1); tab row t holds cos then sin. */
extern "C" __global__ void cuk_rope(float *x, const float *tab, int neox, int n_rot, i64 T, i64 H,
                                    i64 D)
{
    i64 half = n_rot / 2, idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * H * half)
        return;
    i64 i = idx % half, h = (idx / half) % H, t = idx / (half * H);
    float *xh = x + t * H * D + h * D;
    i64 a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    float c = tab[t * 2 * half + i], s = tab[t * 2 * half + half + i];
    float x0 = xh[a], x1 = xh[b];
    xh[a] = KN_FMA(x0, c, -KN_MUL(x1, s));
    xh[b] = KN_FMA(x0, s, KN_MUL(x1, c));
}

/* op: 0 y += a, 1 y (rows, n) += a (n) on every row, 2 y *= v, 3 y = silu(y) * a,
 * 4 y = gelu(y) * a. total = the elements of y. */
extern "C" __global__ void cuk_eltwise(int op, float *y, const float *a, i64 total, i64 n, float v)
{
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total)
        return;
    switch (op) {
    case 0: y[i] = KN_ADD(y[i], a[i]); break;
    case 1: y[i] = KN_ADD(y[i], a[i % n]); break;
    case 2: y[i] = KN_MUL(y[i], v); break;
    case 3: y[i] = KN_MUL(kn_hd_siluf(y[i]), a[i]); break;
    default: y[i] = KN_MUL(kn_hd_geluf(y[i]), a[i]); break;
    }
}

/* dst row j (n) = src row rows[j]. */
extern "C" __global__ void cuk_gather(float *dst, const float *src, const i64 *rows, i64 n_rows, i64 n)
{
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_rows * n)
        return;
    dst[i] = src[rows[i / n] * n + i % n];
}

/* ================================================================ KV cache and attention */

/* Tokens t0 .. t0 + n - 1 of k_new, v_new (T, Hkv * D) into the head-major caches at
 * slots pos[t] (pos: the whole batch's). kvt 0: f32 copied; 1: f16 rounded to nearest
 * even; one thread per element. kvt 2: q8_0, one thread per block of 32 (D a multiple of
 * 32), each block quantized alone by the Q8_0 reference rule. */
extern "C" __global__ void cuk_kv_store(const float *k_new, const float *v_new, uint8_t *kc,
                                        uint8_t *vc, int kvt, i64 D, i64 Hkv, i64 n_ctx,
                                        const int32_t *pos, i64 t0, i64 n)
{
    i64 per = kvt == 2 ? D / 32 : D; /* threads per head row */
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * Hkv * per)
        return;
    i64 d = i % per, g = (i / per) % Hkv, t = t0 + i / (per * Hkv);
    i64 row = g * n_ctx + pos[t];
    if (kvt == 2) {
        i64 src = t * Hkv * D + g * D + 32 * d;
        size_t dst = ((size_t)row * (size_t)per + (size_t)d) * 34;
        kn_hd_quantize_q8_0(k_new + src, kc + dst);
        kn_hd_quantize_q8_0(v_new + src, vc + dst);
        return;
    }
    i64 src = t * Hkv * D + g * D + d, dst = row * D + d;
    if (kvt == 1) {
        ((uint16_t *)kc)[dst] = kn_hd_f32_to_f16(k_new[src]);
        ((uint16_t *)vc)[dst] = kn_hd_f32_to_f16(v_new[src]);
    } else {
        ((float *)kc)[dst] = k_new[src];
        ((float *)vc)[dst] = v_new[src];
    }
}

/* Element i of a head-major cache of type kvt (as cuk_kv_store's): f16 widened exactly,
 * a q8_0 element (float)q * d. */
__device__ __forceinline__ float cuk_kv(const uint8_t *c, i64 i, int kvt)
{
    if (kvt == 2)
        return kn_hd_q8_0_elem(c, i);
    return kvt ? kn_hd_f16_to_f32(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

#define CUK_TILE 32
#define CUK_MAXD 512

/* Attention of one run: block (32) per (query q of the run, head h); grid (n_q, H).
 * q, out: the run's first row, stride H * D; pos: the run's positions. Per 32-position
 * tile in ascending order (docs/numerics.md "Attention"): lane j computes slot j's score
 * (its canonical 16-lane chain over D, * scale, soft-capped when softcap > 0), lane 0 the
 * tile maximum and the canonical sum of e_j = exp(s_j - m_t) over the slots in order,
 * and each lane the value chains and the merge of dims d = lane, lane + 32, ... */
extern "C" __global__ void cuk_attn(const float *q, float *out, const uint8_t *kc, const uint8_t *vc,
                                    int kvt, const int32_t *pos, i64 n_ctx, int H, int Hkv, int D,
                                    int window, float scale, float softcap)
{
    __shared__ float qs[CUK_MAXD];
    __shared__ float s[CUK_TILE], e[CUK_TILE];
    __shared__ float mt_s, lt_s;
    const int lane = threadIdx.x;
    const i64 t = blockIdx.x;
    const int h = blockIdx.y, g = h / (H / Hkv);
    const float *qv = q + t * (i64)H * D + (i64)h * D;
    for (int d = lane; d < D; d += 32)
        qs[d] = qv[d];
    __syncthreads();
    const i64 p = pos[t];
    const i64 lo = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
    const uint8_t *kb = kc, *vb = vc;
    const i64 head = (i64)g * n_ctx * D;
    float o[CUK_MAXD / 32];
#pragma unroll
    for (int r = 0; r < CUK_MAXD / 32; r++)
        o[r] = 0.0f;
    float m = -KN_INF, l = 0.0f;
    for (i64 t0 = lo / CUK_TILE * CUK_TILE; t0 <= p; t0 += CUK_TILE) {
        i64 j0 = t0 > lo ? t0 : lo, j1 = t0 + CUK_TILE - 1 < p ? t0 + CUK_TILE - 1 : p;
        i64 j = t0 + lane;
        if (j >= j0 && j <= j1) {
            float acc[16];
#pragma unroll
            for (int r = 0; r < 16; r++)
                acc[r] = 0.0f;
            const i64 kr = head + j * D;
            for (int d = 0; d < D; d++)
                acc[d % 16] = KN_FMA(qs[d], cuk_kv(kb, kr + d, kvt), acc[d % 16]);
            float sc = KN_MUL(kn_hd_tree16(acc), scale);
            if (softcap > 0.0f)
                sc = kn_hd_softcapf(sc, softcap);
            s[lane] = sc;
        }
        __syncthreads();
        if (lane == 0) {
            float mt = -KN_INF;
            for (i64 jj = j0; jj <= j1; jj++)
                mt = s[jj - t0] > mt ? s[jj - t0] : mt;
            mt_s = mt;
        }
        __syncthreads();
        const float mt = mt_s;
        if (j >= j0 && j <= j1)
            e[lane] = kn_hd_expf(KN_SUB(s[lane], mt));
        __syncthreads();
        if (lane == 0) {
            float acc[16];
            for (int r = 0; r < 16; r++)
                acc[r] = 0.0f;
            for (i64 jj = j0; jj <= j1; jj++)
                acc[(jj - t0) % 16] = KN_ADD(acc[(jj - t0) % 16], e[jj - t0]);
            lt_s = kn_hd_tree16(acc);
        }
        __syncthreads();
        const float lt = lt_s;
        const float mn = mt > m ? mt : m;
        const float sa = kn_hd_expf(KN_SUB(m, mn)), sb = kn_hd_expf(KN_SUB(mt, mn));
#pragma unroll
        for (int r = 0; r < CUK_MAXD / 32; r++) {
            int d = lane + 32 * r;
            if (d < D) {
                float ot = 0.0f;
                for (i64 jj = j0; jj <= j1; jj++)
                    ot = KN_FMA(e[jj - t0], cuk_kv(vb, head + jj * D + d, kvt), ot);
                o[r] = KN_FMA(ot, sb, KN_MUL(o[r], sa));
            }
        }
        l = KN_FMA(lt, sb, KN_MUL(l, sa));
        m = mn;
        __syncthreads(); /* s and e are rewritten by the next tile */
    }
    float *ov = out + t * (i64)H * D + (i64)h * D;
#pragma unroll
    for (int r = 0; r < CUK_MAXD / 32; r++) {
        int d = lane + 32 * r;
        if (d < D)
            ov[d] = KN_DIV(o[r], l);
    }
}

/* ================================================================ lfm2's short convolution */

/* Tokens t0 .. t0 + n - 1: cache row pos[t] (E) = B * x (bcx rows hold B, C, x). */
extern "C" __global__ void cuk_conv_store(const float *bcx, float *rows, const int32_t *pos,
                                          i64 t0, i64 n, i64 E)
{
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * E)
        return;
    i64 t = t0 + i / E, c = i % E;
    rows[(i64)pos[t] * E + c] = KN_MUL(bcx[t * 3 * E + c], bcx[t * 3 * E + 2 * E + c]);
}

/* out[t][c] = C[c] * (fma chain over the taps of the rows pos[t]-L+1 .. pos[t], >= 0). */
extern "C" __global__ void cuk_conv(const float *bcx, float *out, const float *w, const float *rows,
                                    const int32_t *pos, i64 t0, i64 n, i64 E, int L)
{
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * E)
        return;
    i64 t = t0 + i / E, c = i % E;
    float acc = 0.0f;
    for (int k = 0; k < L; k++) {
        i64 p = (i64)pos[t] - (L - 1) + k;
        if (p >= 0)
            acc = KN_FMA(rows[p * E + c], w[c * L + k], acc);
    }
    out[t * E + c] = KN_MUL(bcx[t * 3 * E + E + c], acc);
}
