/* cuk_hd.h: the bodies of the CUDA kernels of cuk.cu, as KN_HD functions of their
 * thread's indices: each __global__ wrapper in cuk.cu computes its block and thread
 * indices and calls the body; a kernel with barriers is split into phase functions that
 * the wrapper calls in order with __syncthreads() between them, over the shared-memory
 * struct the phases share. The same functions compile as C17, so a host test
 * (tests/unit/test_cu_grid.c) runs every body over the whole grid on the CPU, phases in
 * order, and compares with the CPU reference bit for bit. That proves the arithmetic and
 * the indexing (and cu_ops.c's grids and arguments, which the test drives through a
 * host stand-in for the driver); it does not prove the driver, launch limits or the
 * memory model, which only a run on a GPU does (scripts/gpu_check.sh). None of these
 * kernels has run on a GPU yet: no NVIDIA GPU was at hand when they were written; they
 * are compiled to PTX (checked by test_cu_host) and host-tested as above, nothing more.
 *
 * The quantized products have two kernels per weight type, chosen by cu_ops.c by the
 * number of tokens M (KN_CUDA_MM forces one), which give the same bits because both run
 * kern_hd.h's block rule for every (row, token, block) and each output's float chain in
 * ascending block order from +0:
 *   - decode (cuk_mmv_<type>, M <= CUK_MMV_TOKS): bandwidth-bound, a warp per weight row;
 *     its lanes take the row's blocks l, l + 32, ... (coalesced) and compute each block's
 *     exact integer part (kn_hd_int_<type>) against each token into shared memory; after
 *     a barrier one thread per (row, token) runs the float steps (kn_hd_flt_<type>) of
 *     those blocks in order into its accumulator, round after round of 32 blocks;
 *   - prefill (cuk_mmt_<type>): a tile of 32 rows x 32 tokens per block of 256 threads;
 *     per K-step (256 values) the weight blocks of the tile's rows and the activation
 *     blocks of its tokens are copied to shared memory once, then each thread runs the
 *     block rule (__dp4a int8 sums, kn_hd_dot_i8) for its 4 outputs, accumulators in
 *     registers across the steps. No tensor-core (IMMA) path yet.
 * Float weights (cuk_mm_float) keep one thread per output, and MoE grouping
 * (kn_hd_moe_group) runs on one thread.
 *
 * Every float operation is KN_FMA / KN_MUL / KN_ADD / ... (kern_hd.h), in the reference's
 * order (docs/numerics.md); the per-element rules are kern_hd.h's, which the CPU
 * reference calls too. Device addresses held in tables (an expert's weights) are
 * uint64_t. */
#ifndef KN_CUDA_CUK_HD_H
#define KN_CUDA_CUK_HD_H

#include "../../kernels/kern_hd.h"

#include <stdbool.h>

/* The phases of a kernel with barriers are listed once, as X-macros: CUK_<KERNEL>_PHASES
 * (PHASE, ...) writes PHASE(call) for each phase in order. cuk.cu's wrapper makes PHASE
 * "call; __syncthreads();" on every thread of the block; the host test makes it "for each
 * thread of the block: call", so both run the same sequence. The calls name the
 * wrapper's locals: tid (the thread), nth (the block's threads), sh (the shared struct)
 * and the kernel's own. */

/* An address in a table of device addresses. */
KN_HD const uint8_t *cuk_addr(uint64_t a)
{
    return (const uint8_t *)(uintptr_t)a;
}

/* ================================================================ activation quantization */

/* Thread i: block i of x (M, K), n = 32 (Q8_32: d, s, qs) or 256 (Q8_K: d, qs, bsums):
 * kern_quantize_row_q8f / kern_quantize_row_q8k's bytes. */
KN_HD void cuk_b_actq(int64_t i, const float *x, int64_t M, int64_t K, uint8_t *q, int n)
{
    int64_t nb = K / n;
    if (i >= M * nb)
        return;
    int64_t m = i / nb, b = i % nb;
    uint8_t *o = q + (size_t)i * (n == 32 ? KN_Q8F_BYTES : KN_Q8K_BYTES);
    int8_t *qs = (int8_t *)(o + (n == 32 ? KN_Q8F_QS : KN_Q8K_QS));
    kn_hd_st32(o, kn_hd_f32_bits(kn_hd_quantize_block(x + m * K + b * n, n, qs)));
    if (n == 32) {
        int32_t s = 0;
        for (int k = 0; k < 32; k++)
            s += qs[k];
        kn_hd_st32(o + KN_Q8F_S, (uint32_t)s);
        return;
    }
    for (int j = 0; j < 16; j++) {
        int s = 0;
        for (int k = 0; k < 16; k++)
            s += qs[16 * j + k];
        kn_hd_st16(o + KN_Q8K_BSUMS + 2 * j, (uint16_t)(int16_t)s);
    }
}

/* ================================================================ matrix products
 * y[m * ldy + n] = row m of the quantized activations . weight row n, for n < N, m < M:
 * per output the reference's chain over the blocks in ascending order from acc = +0
 * (docs/numerics.md "Quantized weights"), whichever path computes it. The weight is w,
 * or with an expert table (mixture of experts: wptr non-NULL) expert ids[row_of[m]]'s,
 * wptr[e] its address: row m is a grouped (token, rank) row (kn_hd_moe_group). */
struct cuk_mm_args {
    const uint8_t *w;
    const uint64_t *wptr;
    const int32_t *ids;
    const int64_t *row_of;
    int64_t N, K;
    size_t row_bytes;
    const uint8_t *xq;
    size_t x_row_bytes;
    int64_t M;
    float *y;
    int64_t ldy;
};

KN_HD const uint8_t *cuk_wrow(const uint8_t *w, const uint64_t *wptr, const int32_t *ids,
                              const int64_t *row_of, int64_t m, int64_t n, size_t row_bytes)
{
    const uint8_t *base = wptr ? cuk_addr(wptr[ids[row_of[m]]]) : w;
    return base + (size_t)n * row_bytes;
}

/* Weight row n as token m reads it. */
KN_HD const uint8_t *cuk_mm_wrow(const struct cuk_mm_args *a, int64_t m, int64_t n)
{
    return cuk_wrow(a->w, a->wptr, a->ids, a->row_of, m, n, a->row_bytes);
}

/* The quantized types with kernels: X(A, name, NAME, activation block bytes, values per
 * block), A passed through. The rules are kern_hd.h's kn_hd_int_<name>, kn_hd_flt_<name>
 * and kn_hd_blk_<name>, the weight block bytes quant_hd.h's KN_QB_<NAME>. */
#define CUK_MM_TYPES(X, A)                                                                    \
    X(A, q8_0, Q8_0, KN_Q8F_BYTES, 32)                                                        \
    X(A, q4_0, Q4_0, KN_Q8F_BYTES, 32)                                                        \
    X(A, q4_1, Q4_1, KN_Q8F_BYTES, 32)                                                        \
    X(A, q5_0, Q5_0, KN_Q8F_BYTES, 32)                                                        \
    X(A, q5_1, Q5_1, KN_Q8F_BYTES, 32)                                                        \
    X(A, iq4_nl, IQ4_NL, KN_Q8F_BYTES, 32)                                                    \
    X(A, mxfp4, MXFP4, KN_Q8F_BYTES, 32)                                                      \
    X(A, q2_k, Q2_K, KN_Q8K_BYTES, 256)                                                       \
    X(A, q3_k, Q3_K, KN_Q8K_BYTES, 256)                                                       \
    X(A, q4_k, Q4_K, KN_Q8K_BYTES, 256)                                                       \
    X(A, q5_k, Q5_K, KN_Q8K_BYTES, 256)                                                       \
    X(A, q6_k, Q6_K, KN_Q8K_BYTES, 256)                                                       \
    X(A, iq4_xs, IQ4_XS, KN_Q8K_BYTES, 256)

#if defined(__cplusplus)
#define CUK_ASSERT(c, msg) static_assert(c, msg)
#else
#define CUK_ASSERT(c, msg) _Static_assert(c, msg)
#endif

/* ---- the decode path (cuk_mmv_<type>: M small)
 * A block of CUK_MMV_THREADS threads owns CUK_MMV_ROWS weight rows (a warp each) and
 * CUK_MMV_TOKS tokens; grid (ceil(N / ROWS), ceil(M / TOKS)). Per round of CUK_MMV_CHUNK
 * blocks of K: lane l of warp r computes the integer part of block c0 + l of row n0 + r
 * against each token (consecutive lanes read consecutive weight blocks) into shared
 * memory; after the barrier, thread (r, j) = tid / TOKS, tid % TOKS, one per output, runs
 * the float steps of the round's blocks in ascending order into its accumulator, kept in a
 * register across rounds; a barrier before the next round rewrites the shared parts. */
#define CUK_MMV_ROWS 4
#define CUK_MMV_TOKS 8
#define CUK_MMV_THREADS (32 * CUK_MMV_ROWS)
#define CUK_MMV_CHUNK 32
CUK_ASSERT(CUK_MMV_ROWS * CUK_MMV_TOKS <= CUK_MMV_THREADS, "a thread per decode output");

struct cuk_mmv_sh {
    struct kn_hd_ip ip[CUK_MMV_ROWS][CUK_MMV_TOKS][CUK_MMV_CHUNK];
};

/* Thread tid's output (n, m) of the block at (n0, m0); false when it has none. */
KN_HD bool cuk_mmv_out(int tid, int64_t n0, int64_t m0, const struct cuk_mm_args *a,
                       int64_t *n, int64_t *m)
{
    *n = n0 + tid / CUK_MMV_TOKS;
    *m = m0 + tid % CUK_MMV_TOKS;
    return tid < CUK_MMV_ROWS * CUK_MMV_TOKS && *n < a->N && *m < a->M;
}

KN_HD void cuk_b_mmv_end(int tid, int64_t n0, int64_t m0, const struct cuk_mm_args *a, float acc)
{
    int64_t n, m;
    if (cuk_mmv_out(tid, n0, m0, a, &n, &m))
        a->y[m * a->ldy + n] = acc;
}

/* Locals: tid, n0, m0, a (struct cuk_mm_args), sh (struct cuk_mmv_sh); ACC the thread's
 * accumulator (+0 before the first phase). */
#define CUK_MMV_PHASES(PHASE, ACC, name, bsize)                                              \
    for (int64_t c0 = 0; c0 < a.K / (bsize); c0 += CUK_MMV_CHUNK) {                           \
        PHASE(cuk_b_mmv_int_##name(tid, n0, m0, c0, &a, &sh))                                 \
        PHASE(cuk_b_mmv_flt_##name(tid, n0, m0, c0, &a, &sh, &(ACC)))                         \
    }                                                                                         \
    PHASE(cuk_b_mmv_end(tid, n0, m0, &a, ACC))

/* ---- the tiled path (cuk_mmt_<type>: M larger)
 * A block of CUK_MMT_THREADS threads owns a tile of CUK_MMT_ROWS weight rows x
 * CUK_MMT_TOKS tokens; grid (ceil(N / ROWS), ceil(M / TOKS)). Per K-step of CUK_MMT_VALS
 * values (8 32-blocks or one 256-block; the last step may be shorter): the threads copy
 * the step's weight blocks of the tile's rows and activation blocks of its tokens into
 * shared memory (each read from memory once for the whole tile), then after the barrier
 * thread tid computes its CUK_MMT_OUTS outputs (row tid % ROWS, tokens tid / ROWS + 8o)
 * with the blocks' rule (the int8 sums by __dp4a, kern_hd.h kn_hd_dot_i8) in ascending
 * order, the accumulators in registers across steps. With an expert table the tile's
 * weight rows are those of its first token's expert; a token of another expert (a tile
 * across two experts' grouped rows) reads its own rows from memory, the same bytes. */
#define CUK_MMT_ROWS 32
#define CUK_MMT_TOKS 32
#define CUK_MMT_THREADS 256
#define CUK_MMT_OUTS (CUK_MMT_ROWS * CUK_MMT_TOKS / CUK_MMT_THREADS)
#define CUK_MMT_VALS 256
/* The most weight bytes of a row's step (Q8_0's 8 blocks; each type asserts it fits),
 * and a row's pitch in shared memory: an odd number of words, so the 32 lanes of a warp
 * (32 rows) read 32 different banks. */
#define CUK_MMT_WSTEP (CUK_MMT_VALS / 32 * KN_QB_Q8_0)
#define CUK_MMT_WPITCH ((CUK_MMT_WSTEP / 8 * 2 + 1) * 4)
/* The most activation bytes of a token's step (8 Q8_32 blocks, or one Q8_K). */
#define CUK_MMT_XSTEP (CUK_MMT_VALS / 32 * KN_Q8F_BYTES)
CUK_ASSERT(CUK_MMT_ROWS * CUK_MMT_TOKS % CUK_MMT_THREADS == 0 &&
           CUK_MMT_THREADS % CUK_MMT_ROWS == 0, "the tile's outputs split evenly");
CUK_ASSERT(KN_Q8K_BYTES <= CUK_MMT_XSTEP && CUK_MMT_XSTEP % 4 == 0, "a token's step fits");
CUK_ASSERT(CUK_MMT_WPITCH >= CUK_MMT_WSTEP && CUK_MMT_WPITCH / 4 % 2 == 1, "odd words a row");

struct cuk_mmt_sh {
    uint32_t x[CUK_MMT_TOKS][CUK_MMT_XSTEP / 4]; /* words: the blocks' floats 4-aligned */
    uint8_t w[CUK_MMT_ROWS][CUK_MMT_WPITCH];
};

/* A thread's registers: its outputs' accumulators. */
struct cuk_mmt_reg {
    float acc[CUK_MMT_OUTS];
};

/* The blocks of the step at block b0: per (bsize) blocks of a step, nb in the row. */
KN_HD int cuk_mmt_nbs(int64_t b0, int64_t nb, int per)
{
    return nb - b0 < per ? (int)(nb - b0) : per;
}

/* Thread tid's output o: (n, m) and its token's slot j in the tile; false when none. */
KN_HD bool cuk_mmt_out(int tid, int o, int64_t n0, int64_t m0, const struct cuk_mm_args *a,
                       int64_t *n, int64_t *m, int *j)
{
    *j = tid / CUK_MMT_ROWS + o * (CUK_MMT_THREADS / CUK_MMT_ROWS);
    *n = n0 + tid % CUK_MMT_ROWS;
    *m = m0 + *j;
    return *n < a->N && *m < a->M;
}

KN_HD void cuk_b_mmt_end(int tid, int64_t n0, int64_t m0, const struct cuk_mm_args *a,
                         const struct cuk_mmt_reg *rg)
{
    for (int o = 0; o < CUK_MMT_OUTS; o++) {
        int64_t n, m;
        int j;
        if (cuk_mmt_out(tid, o, n0, m0, a, &n, &m, &j))
            a->y[m * a->ldy + n] = rg->acc[o];
    }
}

/* Locals: tid, n0, m0, a, sh (struct cuk_mmt_sh); REG the thread's struct cuk_mmt_reg *
 * (accumulators +0 before the first phase). */
#define CUK_MMT_PHASES(PHASE, REG, name, bsize)                                              \
    for (int64_t b0 = 0; b0 < a.K / (bsize); b0 += CUK_MMT_VALS / (bsize)) {                  \
        PHASE(cuk_b_mmt_load_##name(tid, n0, m0, b0, &a, &sh))                                \
        PHASE(cuk_b_mmt_dot_##name(tid, n0, m0, b0, &a, &sh, REG)) /* sh rewritten next */    \
    }                                                                                         \
    PHASE(cuk_b_mmt_end(tid, n0, m0, &a, REG))

/* Each type's phase bodies. */
#define CUK_MM_BODIES(A, name, NAME, xblock, bsize)                                           \
    CUK_ASSERT(CUK_MMT_VALS % (bsize) == 0 &&                                                 \
               CUK_MMT_VALS / (bsize) * KN_QB_##NAME <= CUK_MMT_WSTEP, "a row's step fits");  \
                                                                                              \
    /* Lane l of warp r: block c0 + l of row n0 + r against tokens m0 .. m0 + TOKS - 1. */    \
    KN_HD void cuk_b_mmv_int_##name(int tid, int64_t n0, int64_t m0, int64_t c0,              \
                                    const struct cuk_mm_args *a, struct cuk_mmv_sh *sh)       \
    {                                                                                         \
        const int r = tid / 32, l = tid % 32;                                                 \
        const int64_t n = n0 + r, b = c0 + l;                                                 \
        if (n >= a->N || b >= a->K / (bsize))                                                 \
            return;                                                                           \
        for (int j = 0; j < CUK_MMV_TOKS && m0 + j < a->M; j++) {                             \
            const int64_t m = m0 + j;                                                         \
            sh->ip[r][j][l] = kn_hd_int_##name(                                               \
                cuk_mm_wrow(a, m, n) + (size_t)b * KN_QB_##NAME,                              \
                a->xq + (size_t)m * a->x_row_bytes + (size_t)b * (xblock));                   \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    /* Output (n, m): the float steps of the round's blocks, ascending. */                    \
    KN_HD void cuk_b_mmv_flt_##name(int tid, int64_t n0, int64_t m0, int64_t c0,              \
                                    const struct cuk_mm_args *a, const struct cuk_mmv_sh *sh, \
                                    float *acc)                                               \
    {                                                                                         \
        int64_t n, m;                                                                         \
        if (!cuk_mmv_out(tid, n0, m0, a, &n, &m))                                             \
            return;                                                                           \
        const uint8_t *wr = cuk_mm_wrow(a, m, n);                                             \
        const uint8_t *xr = a->xq + (size_t)m * a->x_row_bytes;                               \
        const int64_t nb = a->K / (bsize);                                                    \
        for (int64_t b = c0; b < c0 + CUK_MMV_CHUNK && b < nb; b++)                           \
            *acc = kn_hd_flt_##name(wr + (size_t)b * KN_QB_##NAME, xr + (size_t)b * (xblock), \
                                    sh->ip[n - n0][m - m0][b - c0], *acc);                    \
    }                                                                                         \
                                                                                              \
    /* The step's weight blocks of the tile's rows (its first token's) and activation        \
     * blocks of its tokens into shared memory. */                                           \
    KN_HD void cuk_b_mmt_load_##name(int tid, int64_t n0, int64_t m0, int64_t b0,             \
                                     const struct cuk_mm_args *a, struct cuk_mmt_sh *sh)      \
    {                                                                                         \
        const int nbs = cuk_mmt_nbs(b0, a->K / (bsize), CUK_MMT_VALS / (bsize));              \
        const int wbytes = nbs * KN_QB_##NAME, xwords = nbs * (xblock) / 4;                   \
        for (int i = tid; i < CUK_MMT_ROWS * wbytes; i += CUK_MMT_THREADS) {                  \
            const int r = i / wbytes, o = i % wbytes;                                         \
            if (n0 + r < a->N)                                                                \
                sh->w[r][o] = cuk_mm_wrow(a, m0, n0 + r)[(size_t)b0 * KN_QB_##NAME + o];      \
        }                                                                                     \
        for (int i = tid; i < CUK_MMT_TOKS * xwords; i += CUK_MMT_THREADS) {                  \
            const int j = i / xwords, o = i % xwords;                                         \
            if (m0 + j < a->M)                                                                \
                sh->x[j][o] = kn_hd_ld32(a->xq + (size_t)(m0 + j) * a->x_row_bytes +          \
                                         (size_t)b0 * (xblock) + 4 * (size_t)o);              \
        }                                                                                     \
    }                                                                                         \
                                                                                              \
    /* The thread's outputs over the step's blocks, ascending. */                            \
    KN_HD void cuk_b_mmt_dot_##name(int tid, int64_t n0, int64_t m0, int64_t b0,              \
                                    const struct cuk_mm_args *a, const struct cuk_mmt_sh *sh, \
                                    struct cuk_mmt_reg *rg)                                   \
    {                                                                                         \
        const int nbs = cuk_mmt_nbs(b0, a->K / (bsize), CUK_MMT_VALS / (bsize));              \
        for (int o = 0; o < CUK_MMT_OUTS; o++) {                                              \
            int64_t n, m;                                                                     \
            int j;                                                                            \
            if (!cuk_mmt_out(tid, o, n0, m0, a, &n, &m, &j))                                  \
                continue;                                                                     \
            const uint8_t *wr = cuk_mm_wrow(a, m, n);                                         \
            const uint8_t *wb = wr == cuk_mm_wrow(a, m0, n) ? sh->w[n - n0]                   \
                                                            : wr + (size_t)b0 * KN_QB_##NAME; \
            const uint8_t *xb = (const uint8_t *)sh->x[j];                                    \
            float acc = rg->acc[o];                                                           \
            for (int s = 0; s < nbs; s++)                                                     \
                acc = kn_hd_blk_##name(wb + s * KN_QB_##NAME, xb + s * (xblock), acc);        \
            rg->acc[o] = acc;                                                                 \
        }                                                                                     \
    }

CUK_MM_TYPES(CUK_MM_BODIES, 0)

/* Float weights (type 0 f32, 1 f16, 2 bf16, widened exactly): the canonical 16-lane chain
 * over K (acc[k % 16] = fma(x[k], w[k], ...)), then the tree. */
KN_HD float cuk_wf(const uint8_t *wr, int64_t k, int type)
{
    if (type == 0) /* rows of f32 and f16 / bf16 are 4- and 2-byte aligned: one load */
        return ((const float *)wr)[k];
    uint32_t h = ((const uint16_t *)wr)[k];
    return type == 1 ? kn_hd_f16_to_f32(h) : kn_hd_bf16_to_f32(h);
}

KN_HD void cuk_b_mm_float(int64_t n, int64_t m, const uint8_t *w, const uint64_t *wptr,
                          const int32_t *ids, const int64_t *row_of, int64_t N, int64_t K,
                          size_t row_bytes, int type, const float *x, int64_t M, float *y,
                          int64_t ldy)
{
    if (n >= N || m >= M)
        return;
    const uint8_t *wr = cuk_wrow(w, wptr, ids, row_of, m, n, row_bytes);
    const float *xr = x + m * K;
    float acc[16];
    for (int l = 0; l < 16; l++)
        acc[l] = 0.0f;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16)
        for (int l = 0; l < 16; l++)
            acc[l] = KN_FMA(xr[k + l], cuk_wf(wr, k + l, type), acc[l]);
    for (int l = 0; k + l < K; l++)
        acc[l] = KN_FMA(xr[k + l], cuk_wf(wr, k + l, type), acc[l]);
    y[m * ldy + n] = kn_hd_tree16(acc);
}

/* ================================================================ elementwise */

/* The ops of cuk_eltwise. */
enum cuk_elt {
    CUK_ELT_ADD = 0,        /* y += a */
    CUK_ELT_ADD_ROWS = 1,   /* y (rows, n) += a (n) on every row */
    CUK_ELT_SCALE = 2,      /* y *= v */
    CUK_ELT_SWIGLU = 3,     /* y = silu(y) * a */
    CUK_ELT_GEGLU = 4,      /* y = gelu(y) * a */
    CUK_ELT_SWIGLU_OAI = 5, /* y = kern_swiglu_oaif(y, a) */
    CUK_ELT_GELU = 6,       /* y = gelu(y) */
};

/* Thread i of total = the elements of y. */
KN_HD void cuk_b_eltwise(int64_t i, int op, float *y, const float *a, int64_t total, int64_t n,
                         float v)
{
    if (i >= total)
        return;
    switch (op) {
    case CUK_ELT_ADD: y[i] = KN_ADD(y[i], a[i]); break;
    case CUK_ELT_ADD_ROWS: y[i] = KN_ADD(y[i], a[i % n]); break;
    case CUK_ELT_SCALE: y[i] = KN_MUL(y[i], v); break;
    case CUK_ELT_SWIGLU: y[i] = KN_MUL(kn_hd_siluf(y[i]), a[i]); break;
    case CUK_ELT_GEGLU: y[i] = KN_MUL(kn_hd_geluf(y[i]), a[i]); break;
    case CUK_ELT_SWIGLU_OAI: y[i] = kn_hd_swiglu_oaif(y[i], a[i]); break;
    default: y[i] = kn_hd_geluf(y[i]); break;
    }
}

/* Thread i: dst row j (n) = src row rows[j]. */
KN_HD void cuk_b_gather(int64_t i, float *dst, const float *src, const int64_t *rows,
                        int64_t n_rows, int64_t n)
{
    if (i < n_rows * n)
        dst[i] = src[rows[i / n] * n + i % n];
}

/* ================================================================ RMSNorm and LayerNorm
 * One block per row, CUK_NORM_THREADS threads. The phases (barriers between them):
 *   RMSNorm:   sq(x), rs, rms_out
 *   LayerNorm: sum(x), mean, center (y = x - mean), sq(y), rs, ln_out
 * sq and sum run the canonical 16 lanes (threads 0..15), mean and rs the tree on thread 0,
 * the others every thread over its elements (k = tid, tid + threads, ...). */
#define CUK_NORM_THREADS 64

struct cuk_norm_sh {
    float lanes[16];
    float mean, rs;
};

/* Lane tid < 16: the chain of x[k] * x[k] (fma) over k = tid mod 16. */
KN_HD void cuk_b_norm_sq(int tid, struct cuk_norm_sh *sh, const float *xr, int64_t n)
{
    if (tid >= 16)
        return;
    float acc = 0.0f;
    for (int64_t k = tid; k < n; k += 16)
        acc = KN_FMA(xr[k], xr[k], acc);
    sh->lanes[tid] = acc;
}

/* Lane tid < 16: the chain of x[k] (add) over k = tid mod 16. */
KN_HD void cuk_b_norm_sum(int tid, struct cuk_norm_sh *sh, const float *xr, int64_t n)
{
    if (tid >= 16)
        return;
    float acc = 0.0f;
    for (int64_t k = tid; k < n; k += 16)
        acc = KN_ADD(acc, xr[k]);
    sh->lanes[tid] = acc;
}

/* Thread 0: the tree of the lanes over n. */
KN_HD float cuk_norm_tree_mean(struct cuk_norm_sh *sh, int64_t n)
{
    float acc[16];
    for (int l = 0; l < 16; l++)
        acc[l] = sh->lanes[l];
    return KN_DIV(kn_hd_tree16(acc), (float)n);
}

KN_HD void cuk_b_norm_mean(int tid, struct cuk_norm_sh *sh, int64_t n)
{
    if (tid == 0)
        sh->mean = cuk_norm_tree_mean(sh, n);
}

/* Thread 0: rs = 1 / sqrt(tree / n + eps). */
KN_HD void cuk_b_norm_rs(int tid, struct cuk_norm_sh *sh, int64_t n, float eps)
{
    if (tid == 0)
        sh->rs = KN_DIV(1.0f, KN_SQRT(KN_ADD(cuk_norm_tree_mean(sh, n), eps)));
}

#define CUK_RMSNORM_PHASES(PHASE)                                                            \
    PHASE(cuk_b_norm_sq(tid, &sh, xr, n))                                                    \
    PHASE(cuk_b_norm_rs(tid, &sh, n, eps))                                                   \
    PHASE(cuk_b_rms_out(tid, nth, &sh, yr, xr, w, n))

#define CUK_LAYERNORM_PHASES(PHASE)                                                          \
    PHASE(cuk_b_norm_sum(tid, &sh, xr, n))                                                   \
    PHASE(cuk_b_norm_mean(tid, &sh, n))                                                      \
    PHASE(cuk_b_ln_center(tid, nth, &sh, yr, xr, n))                                         \
    PHASE(cuk_b_norm_sq(tid, &sh, yr, n))                                                    \
    PHASE(cuk_b_norm_rs(tid, &sh, n, eps))                                                   \
    PHASE(cuk_b_ln_out(tid, nth, &sh, yr, w, b, n))

/* y = (x * rs) * w (w NULL: x * rs). */
KN_HD void cuk_b_rms_out(int tid, int nth, const struct cuk_norm_sh *sh, float *yr,
                         const float *xr, const float *w, int64_t n)
{
    float r = sh->rs;
    for (int64_t k = tid; k < n; k += nth)
        yr[k] = w ? KN_MUL(KN_MUL(xr[k], r), w[k]) : KN_MUL(xr[k], r);
}

/* y = x - mean (in place allowed: each thread reads and writes its own elements). */
KN_HD void cuk_b_ln_center(int tid, int nth, const struct cuk_norm_sh *sh, float *yr,
                           const float *xr, int64_t n)
{
    for (int64_t k = tid; k < n; k += nth)
        yr[k] = KN_SUB(xr[k], sh->mean);
}

/* y = (y * rs) * w + b (w, b NULL: none). */
KN_HD void cuk_b_ln_out(int tid, int nth, const struct cuk_norm_sh *sh, float *yr,
                        const float *w, const float *b, int64_t n)
{
    for (int64_t k = tid; k < n; k += nth) {
        float v = KN_MUL(yr[k], sh->rs);
        if (w)
            v = KN_MUL(v, w[k]);
        if (b)
            v = KN_ADD(v, b[k]);
        yr[k] = v;
    }
}

/* ================================================================ mixture of experts */

/* Thread t: token t's routing (kern_moe_route) of logits (T, n) into ids, w (T, k). */
KN_HD void cuk_b_moe_route(int64_t t, int64_t T, int gating, int32_t n, int32_t k, int norm,
                           float scale, const float *logits, const float *bias, int32_t *ids,
                           float *w)
{
    if (t < T)
        kn_hd_moe_route_row(gating, n, k, norm, scale, logits + t * n, bias, ids + t * k,
                            w + t * k);
}

/* Thread i of R * E: grouped row j = i / E is token row_of[j] / k's input. */
KN_HD void cuk_b_moe_gather(int64_t i, int64_t R, int64_t k, int64_t E, const int64_t *row_of,
                            const float *x, float *xg)
{
    if (i < R * E)
        xg[i] = x[(row_of[i / E] / k) * E + i % E];
}

/* Thread i of R * N: grouped row j = i / N plus its expert's bias (bptr: the experts'
 * bias addresses, each N floats). */
KN_HD void cuk_b_moe_bias(int64_t i, int64_t R, int64_t N, const int64_t *row_of,
                          const int32_t *ids, const uint64_t *bptr, float *y)
{
    if (i >= R * N)
        return;
    const float *b = (const float *)cuk_addr(bptr[ids[row_of[i / N]]]);
    y[i] = KN_ADD(y[i], b[i % N]);
}

/* Thread i of T * E: y[t] = w[t,0] e_0, then y += w[t,r] e_r in rank order, e_r the grouped
 * down output of pair t * k + r (row slot[t * k + r] of yg (R, E)). */
KN_HD void cuk_b_moe_sum(int64_t i, int64_t T, int64_t k, int64_t E, const int64_t *slot,
                         const float *yg, const float *w, float *y)
{
    if (i >= T * E)
        return;
    int64_t t = i / E, c = i % E;
    float acc = KN_MUL(yg[slot[t * k] * E + c], w[t * k]);
    for (int64_t r = 1; r < k; r++)
        acc = KN_ADD(acc, KN_MUL(yg[slot[t * k + r] * E + c], w[t * k + r]));
    y[i] = acc;
}

/* ================================================================ RoPE */

/* Thread idx of (token, head, pair): y0 = fma(x0, c, -(x1 s)), y1 = fma(x0, s, x1 c).
 * neox: pairs (i, i + n_rot/2), else (2i, 2i + 1); tab row t holds cos then sin. */
KN_HD void cuk_b_rope(int64_t idx, float *x, const float *tab, int neox, int n_rot, int64_t T,
                      int64_t H, int64_t D)
{
    int64_t half = n_rot / 2;
    if (idx >= T * H * half)
        return;
    int64_t i = idx % half, h = (idx / half) % H, t = idx / (half * H);
    float *xh = x + t * H * D + h * D;
    int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    float c = tab[t * 2 * half + i], s = tab[t * 2 * half + half + i];
    float x0 = xh[a], x1 = xh[b];
    xh[a] = KN_FMA(x0, c, -KN_MUL(x1, s));
    xh[b] = KN_FMA(x0, s, KN_MUL(x1, c));
}

/* ================================================================ KV cache and attention */

/* Thread i: tokens t0 .. t0 + n - 1 of k_new, v_new (T, Hkv * D) into the head-major caches
 * at slots pos[t] (pos: the whole batch's). kvt 0: f32 copied; 1: f16 rounded to nearest
 * even; one thread per element. kvt 2: q8_0, one thread per block of 32 (D a multiple of
 * 32), each block quantized alone by the Q8_0 reference rule. */
KN_HD void cuk_b_kv_store(int64_t i, const float *k_new, const float *v_new, uint8_t *kc,
                          uint8_t *vc, int kvt, int64_t D, int64_t Hkv, int64_t n_ctx,
                          const int32_t *pos, int64_t t0, int64_t n)
{
    int64_t per = kvt == 2 ? D / 32 : D; /* threads per head row */
    if (i >= n * Hkv * per)
        return;
    int64_t d = i % per, g = (i / per) % Hkv, t = t0 + i / (per * Hkv);
    int64_t row = g * n_ctx + pos[t];
    if (kvt == 2) {
        int64_t src = t * Hkv * D + g * D + 32 * d;
        size_t dst = ((size_t)row * (size_t)per + (size_t)d) * 34;
        kn_hd_quantize_q8_0(k_new + src, kc + dst);
        kn_hd_quantize_q8_0(v_new + src, vc + dst);
        return;
    }
    int64_t src = t * Hkv * D + g * D + d, dst = row * D + d;
    if (kvt == 1) {
        ((uint16_t *)kc)[dst] = kn_hd_f32_to_f16(k_new[src]);
        ((uint16_t *)vc)[dst] = kn_hd_f32_to_f16(v_new[src]);
    } else {
        ((float *)kc)[dst] = k_new[src];
        ((float *)vc)[dst] = v_new[src];
    }
}

/* Element i of a head-major cache of type kvt (as cuk_b_kv_store's): f16 widened exactly,
 * a q8_0 element (float)q * d. */
KN_HD float cuk_kv(const uint8_t *c, int64_t i, int kvt)
{
    if (kvt == 2)
        return kn_hd_q8_0_elem(c, i);
    return kvt ? kn_hd_f16_to_f32(((const uint16_t *)c)[i]) : ((const float *)c)[i];
}

#if defined(__CUDACC__)
#define CUK_UNROLL _Pragma("unroll")
#else
#define CUK_UNROLL
#endif

#define CUK_TILE 32
#define CUK_MAXD 512 /* the most dims of a head (cu_internal.h CU_ATTN_MAX_D) */

/* Attention of one run (docs/numerics.md "Attention"): block (32 lanes) per (query t of
 * the run, head h). q, out: the run's first row, stride H * D; pos: the run's positions.
 * Per 32-position tile in ascending order: lane j computes slot j's score (its canonical
 * 16-lane chain over D, * scale, soft-capped when softcap > 0), lane 0 the tile maximum
 * and the canonical sum of e_j = exp(s_j - m_t) over the slots in order, and each lane
 * the value chains and the merge of dims d = lane, lane + 32, ...; with sinks (gpt-oss),
 * every lane merges the head's sink (kn_hd_attn_sink) before out. */
struct cuk_attn_args {
    const float *q;
    float *out;
    const uint8_t *kc, *vc;
    int kvt;
    const int32_t *pos;
    int64_t n_ctx;
    int H, Hkv, D, window;
    float scale, softcap;
    const float *sinks;
};

struct cuk_attn_sh {
    float qs[CUK_MAXD];
    float s[CUK_TILE], e[CUK_TILE];
    float mt, lt;
};

/* A lane's registers: its dims of o and the running (m, l). */
struct cuk_attn_lane {
    float o[CUK_MAXD / 32];
    float m, l;
};

/* The first visible position of query t. */
KN_HD int64_t cuk_attn_lo(const struct cuk_attn_args *a, int64_t t)
{
    int64_t p = a->pos[t];
    return kn_hd_attn_first_key(p, a->window);
}

/* Tile t0's slots j0..j1 of query t. */
KN_HD void cuk_attn_tile(const struct cuk_attn_args *a, int64_t t, int64_t t0, int64_t *j0,
                         int64_t *j1)
{
    int64_t p = a->pos[t], lo = cuk_attn_lo(a, t);
    *j0 = t0 > lo ? t0 : lo;
    *j1 = t0 + CUK_TILE - 1 < p ? t0 + CUK_TILE - 1 : p;
}

KN_HD void cuk_b_attn_begin(int lane, int64_t t, int h, const struct cuk_attn_args *a,
                            struct cuk_attn_sh *sh, struct cuk_attn_lane *st)
{
    const float *qv = a->q + t * (int64_t)a->H * a->D + (int64_t)h * a->D;
    for (int d = lane; d < a->D; d += 32)
        sh->qs[d] = qv[d];
    CUK_UNROLL
    for (int r = 0; r < CUK_MAXD / 32; r++)
        st->o[r] = 0.0f;
    st->m = -kn_hd_bits_f32(0x7f800000u);
    st->l = 0.0f;
}

KN_HD void cuk_b_attn_score(int lane, int64_t t, int h, int64_t t0,
                            const struct cuk_attn_args *a, struct cuk_attn_sh *sh)
{
    int64_t j0, j1, j = t0 + lane;
    cuk_attn_tile(a, t, t0, &j0, &j1);
    if (j < j0 || j > j1)
        return;
    const int g = h / (a->H / a->Hkv);
    float acc[16];
    CUK_UNROLL
    for (int r = 0; r < 16; r++)
        acc[r] = 0.0f;
    const int64_t kr = (int64_t)g * a->n_ctx * a->D + j * a->D;
    for (int d = 0; d < a->D; d++)
        acc[d % 16] = KN_FMA(sh->qs[d], cuk_kv(a->kc, kr + d, a->kvt), acc[d % 16]);
    float sc = KN_MUL(kn_hd_tree16(acc), a->scale);
    if (a->softcap > 0.0f)
        sc = kn_hd_softcapf(sc, a->softcap);
    sh->s[lane] = sc;
}

/* Lane 0's phases (the tile's maximum and sum): whether this is lane 0, and the tile. */
KN_HD int cuk_attn_lane0(int lane, const struct cuk_attn_args *a, int64_t t, int64_t t0,
                         int64_t *j0, int64_t *j1)
{
    if (lane != 0)
        return 0;
    cuk_attn_tile(a, t, t0, j0, j1);
    return 1;
}

KN_HD void cuk_b_attn_max(int lane, int64_t t, int64_t t0, const struct cuk_attn_args *a,
                          struct cuk_attn_sh *sh)
{
    int64_t j0, j1;
    if (!cuk_attn_lane0(lane, a, t, t0, &j0, &j1))
        return;
    float mt = -kn_hd_bits_f32(0x7f800000u);
    for (int64_t jj = j0; jj <= j1; jj++)
        mt = sh->s[jj - t0] > mt ? sh->s[jj - t0] : mt;
    sh->mt = mt;
}

KN_HD void cuk_b_attn_exp(int lane, int64_t t, int64_t t0, const struct cuk_attn_args *a,
                          struct cuk_attn_sh *sh)
{
    int64_t j0, j1, j = t0 + lane;
    cuk_attn_tile(a, t, t0, &j0, &j1);
    if (j >= j0 && j <= j1)
        sh->e[lane] = kn_hd_expf(KN_SUB(sh->s[lane], sh->mt));
}

KN_HD void cuk_b_attn_sum(int lane, int64_t t, int64_t t0, const struct cuk_attn_args *a,
                          struct cuk_attn_sh *sh)
{
    int64_t j0, j1;
    if (!cuk_attn_lane0(lane, a, t, t0, &j0, &j1))
        return;
    float acc[16];
    for (int r = 0; r < 16; r++)
        acc[r] = 0.0f;
    for (int64_t jj = j0; jj <= j1; jj++)
        acc[(jj - t0) % 16] = KN_ADD(acc[(jj - t0) % 16], sh->e[jj - t0]);
    sh->lt = kn_hd_tree16(acc);
}

KN_HD void cuk_b_attn_merge(int lane, int64_t t, int h, int64_t t0,
                            const struct cuk_attn_args *a, const struct cuk_attn_sh *sh,
                            struct cuk_attn_lane *st)
{
    int64_t j0, j1;
    cuk_attn_tile(a, t, t0, &j0, &j1);
    const int g = h / (a->H / a->Hkv);
    const int64_t head = (int64_t)g * a->n_ctx * a->D;
    const float mt = sh->mt, lt = sh->lt;
    const float mn = mt > st->m ? mt : st->m;
    const float sa = kn_hd_expf(KN_SUB(st->m, mn)), sb = kn_hd_expf(KN_SUB(mt, mn));
    CUK_UNROLL
    for (int r = 0; r < CUK_MAXD / 32; r++) {
        int d = lane + 32 * r;
        if (d < a->D) {
            float ot = 0.0f;
            for (int64_t jj = j0; jj <= j1; jj++)
                ot = KN_FMA(sh->e[jj - t0], cuk_kv(a->vc, head + jj * a->D + d, a->kvt), ot);
            st->o[r] = KN_FMA(ot, sb, KN_MUL(st->o[r], sa));
        }
    }
    st->l = KN_FMA(lt, sb, KN_MUL(st->l, sa));
    st->m = mn;
}

KN_HD void cuk_b_attn_end(int lane, int64_t t, int h, const struct cuk_attn_args *a,
                          struct cuk_attn_lane *st)
{
    if (a->sinks) {
        const float sa = kn_hd_attn_sink(a->sinks[h], &st->m, &st->l);
        CUK_UNROLL
        for (int r = 0; r < CUK_MAXD / 32; r++)
            st->o[r] = KN_MUL(st->o[r], sa);
    }
    float *ov = a->out + t * (int64_t)a->H * a->D + (int64_t)h * a->D;
    CUK_UNROLL
    for (int r = 0; r < CUK_MAXD / 32; r++) {
        int d = lane + 32 * r;
        if (d < a->D)
            ov[d] = KN_DIV(st->o[r], st->l);
    }
}

/* Block (t, h): begin, per tile (t0 from the tile of lo to p) score, max, exp, sum and
 * merge, then end; LANE is the thread's struct cuk_attn_lane (its registers). Locals: a,
 * t, h, p = pos[t], lo = cuk_attn_lo(&a, t). */
#define CUK_ATTN_PHASES(PHASE, LANE)                                                         \
    PHASE(cuk_b_attn_begin(tid, t, h, &a, &sh, LANE))                                        \
    for (int64_t t0 = lo / CUK_TILE * CUK_TILE; t0 <= p; t0 += CUK_TILE) {                   \
        PHASE(cuk_b_attn_score(tid, t, h, t0, &a, &sh))                                      \
        PHASE(cuk_b_attn_max(tid, t, t0, &a, &sh))                                           \
        PHASE(cuk_b_attn_exp(tid, t, t0, &a, &sh))                                           \
        PHASE(cuk_b_attn_sum(tid, t, t0, &a, &sh))                                           \
        PHASE(cuk_b_attn_merge(tid, t, h, t0, &a, &sh, LANE)) /* s, e rewritten next */      \
    }                                                                                        \
    PHASE(cuk_b_attn_end(tid, t, h, &a, LANE))

/* ================================================================ lfm2's short convolution */

/* Thread i: tokens t0 .. t0 + n - 1: cache row pos[t] (E) = B * x (bcx rows hold B, C, x). */
KN_HD void cuk_b_conv_store(int64_t i, const float *bcx, float *rows, const int32_t *pos,
                            int64_t t0, int64_t n, int64_t E)
{
    if (i >= n * E)
        return;
    int64_t t = t0 + i / E, c = i % E;
    rows[(int64_t)pos[t] * E + c] = KN_MUL(bcx[t * 3 * E + c], bcx[t * 3 * E + 2 * E + c]);
}

/* Thread i: out[t][c] = C[c] * (fma chain over the taps of the rows pos[t]-L+1 .. pos[t],
 * those >= 0). */
KN_HD void cuk_b_conv(int64_t i, const float *bcx, float *out, const float *w, const float *rows,
                      const int32_t *pos, int64_t t0, int64_t n, int64_t E, int L)
{
    if (i >= n * E)
        return;
    int64_t t = t0 + i / E, c = i % E;
    float acc = 0.0f;
    for (int k = 0; k < L; k++) {
        int64_t p = (int64_t)pos[t] - (L - 1) + k;
        if (p >= 0)
            acc = KN_FMA(rows[p * E + c], w[c * L + k], acc);
    }
    out[t * E + c] = KN_MUL(bcx[t * 3 * E + E + c], acc);
}

#endif
