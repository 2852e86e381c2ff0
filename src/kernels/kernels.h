/* kernels.h: the kernels module: thread pool, the canonical float dot product, per-token
 * activation quantization, and weights x tokens matrix products for every weight type.
 *
 * Every function here computes bits fixed by docs/numerics.md (canonical-1): the ISA level
 * (src/base/cpu.h), the thread count, the batch size M and a row's position in the batch
 * change speed, never a result. Shapes use fixed letters: N outputs, K inputs, M tokens. */
#ifndef KN_KERNELS_H
#define KN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../quant/quant.h"
#include "isa.h"
#if defined(__has_include)
#if __has_include("ops.h")
#include "ops.h"
#endif
#endif

/* ================================================================ thread pool */

/* A fixed set of worker threads created once (--threads N). The caller of
 * kern_pool_run works too; workers spin briefly on a new job, then sleep. */
struct kern_pool;

/* A unit of parallel work: share ith of nth. A job calls it once for every ith in
 * [0, nth), on whichever thread takes that share (the caller does them all if the
 * workers are late), so it may use ith only to choose its part of the work. */
typedef void (*kern_task_fn)(void *ctx, int ith, int nth);

/* The most threads a pool has (every --threads flag's upper bound). */
#define KERN_POOL_MAX_THREADS 256
/* Creates a pool of n_threads threads in all (the caller counts as one;
 * 1 <= n <= KERN_POOL_MAX_THREADS). */
KN_MUST_USE enum kn_status kern_pool_create(int n_threads, struct kern_pool **out,
                                            struct kn_err *err);
/* Stops and joins the workers; NULL is allowed. */
void kern_pool_free(struct kern_pool *pool);
/* Threads in the pool (1 for a NULL pool). */
int kern_pool_threads(const struct kern_pool *pool);
/* Runs fn(ctx, ith, nth) for ith in [0, nth), nth = the pool's thread count, spread
 * over the threads, and returns when all have returned. A NULL pool runs fn(ctx, 0, 1).
 * Not reentrant: one job at a time. */
void kern_pool_run(struct kern_pool *pool, kern_task_fn fn, void *ctx);
/* The same with n_shares >= 1 shares: more shares than threads balance the load when a
 * thread runs slower (other work on its core) at the cost of a counter step per share. */
void kern_pool_run_shares(struct kern_pool *pool, kern_task_fn fn, void *ctx, int n_shares);
/* A unit range of a range job: fn(ctx, u0, u1) does units [u0, u1). */
typedef void (*kern_range_fn)(void *ctx, int64_t u0, int64_t u1);
/* Runs fn over units [0, n_units) (0 <= n_units < 2^31) and returns when all are done:
 * each thread starts on its own contiguous part (kern_split's order) and takes it front
 * to back in shrinking chunks; one that runs out steals the back half of the largest
 * part left. A memory-bound product then streams long runs of its weights on every
 * thread, and a slow thread's work still moves to the others. Every unit is done
 * exactly once, by whichever thread, so fn's results may depend on the units alone. */
void kern_pool_run_range(struct kern_pool *pool, kern_range_fn fn, void *ctx, int64_t n_units);
/* The deterministic share [*lo, *hi) of [0, n) for thread ith of nth: contiguous chunks
 * whose boundaries are multiples of align (except n itself), earlier threads first. */
void kern_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi);

/* ================================================================ streaming read */

/* The machine's streaming-read rate with a pool's threads: a plain read of mib MiB
 * (written once, huge pages where allowed), each thread summing its contiguous share.
 * The ceiling of a memory-bound product (decode reads each weight once per token). */
struct kern_memread;
#define KERN_MEMREAD_MAX_MIB 65536 /* the largest buffer, 1 <= mib <= this */
KN_MUST_USE enum kn_status kern_memread_create(int64_t mib, struct kern_memread **out,
                                               struct kn_err *err);
void kern_memread_free(struct kern_memread *r); /* NULL is allowed */
/* One read of the whole buffer on pool's threads; returns GB/s (10^9 bytes/s). */
double kern_memread_run(struct kern_memread *r, struct kern_pool *pool);

/* ================================================================ float dot product */

/* The canonical f32 reduction (docs/numerics.md "Float dot product"): 16 accumulators,
 * acc[k % 16] = fmaf(a[k], b[k], acc[k % 16]) for k ascending, then the tree
 * w = 8, 4, 2, 1: acc[i] += acc[i + w]. Every float sum of products in Kinetic uses it. */
#define KERN_DOT_LANES 16

/* a: (n); b: (n) -> the canonical dot product, dispatched to the active ISA. */
float kern_dot_f32(const float *a, const float *b, int64_t n);
/* The portable reference (the specification), whatever the active ISA. */
float kern_dot_f32_ref(const float *a, const float *b, int64_t n);
/* The canonical reduction's final step: folds acc[16] with the tree above. */
float kern_dot_tree16(float acc[KERN_DOT_LANES]);

/* ================================================================ activations */

/* The formats activations take before a product with a weight type (docs/numerics.md
 * "Activation quantization"). Quantization is per token row, never across the batch. */
enum kern_act_kind {
    KERN_ACT_F32 = 0,   /* plain f32 rows: F32, F16, BF16 weights */
    KERN_ACT_Q8_32 = 1, /* 32-blocks of struct kern_block_q8f: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 */
    KERN_ACT_Q8_K = 2,  /* 256-blocks of struct block_q8_K: Q4_K, Q5_K, Q6_K */
};

/* One 32-element activation block: x[i] ~= d * qs[i]; s = sum of qs (exact). A float
 * scale rather than f16: it costs 2 bytes per block and keeps d exactly amax / 127. */
struct kern_block_q8f {
    float d;
    int32_t s;
    int8_t qs[32];
};
static_assert(sizeof(struct kern_block_q8f) == 40, "kern_block_q8f size");

/* Activations ready for a product: x: (M, K) as floats, and for the quantized kinds
 * q: M rows of row_bytes bytes (kern_act_row_bytes). */
struct kern_act {
    enum kern_act_kind kind;
    int64_t M, K;
    const float *x;    /* (M, K), row stride K */
    const void *q;     /* (M, row_bytes) quantized rows; NULL for KERN_ACT_F32 */
    size_t row_bytes;  /* bytes of one quantized row; 0 for KERN_ACT_F32 */
};

/* Bytes of one quantized row of K elements (K a multiple of the block size), 0 for F32. */
size_t kern_act_row_bytes(enum kern_act_kind kind, int64_t K);
/* x: (K) -> dst: one quantized row (32-blocks of struct kern_block_q8f). K % 32 == 0.
 * Dispatched to the active ISA; every level gives the reference's bits (actq.c). */
void kern_quantize_row_q8f(const float *x, int64_t K, struct kern_block_q8f *dst);
/* x: (K) -> dst: one quantized row (256-blocks of struct block_q8_K). K % 256 == 0. */
void kern_quantize_row_q8k(const float *x, int64_t K, struct block_q8_K *dst);
/* x: (M, K) -> scratch (at least kern_act_bytes(kind, M, K) bytes, 64-aligned), fills *out.
 * Rows are split over the pool's threads; each row's bits depend on that row alone. */
void kern_act_prepare(struct kern_pool *pool, enum kern_act_kind kind, const float *x,
                      int64_t M, int64_t K, void *scratch, struct kern_act *out);
/* Scratch bytes kern_act_prepare needs (0 for F32); SIZE_MAX if the size overflows. */
size_t kern_act_bytes(enum kern_act_kind kind, int64_t M, int64_t K);

/* ================================================================ weights */

/* A weight matrix w: (N, K), row n = output n, in the file's block layout (quant.h),
 * plus an optional copy repacked at load time for SIMD (same bits, other order). */
struct kern_weight {
    enum quant_type type;
    int64_t N, K;          /* w: (N, K) */
    const void *data;      /* N rows of row_bytes, GGML layout; not owned (e.g. mmap'd) */
    size_t row_bytes;
    void *packed;          /* owned repacked copy, or NULL (float types read data;
                              quantized types then run the portable reference) */
    size_t packed_bytes;
    bool packed_borrowed;  /* packed belongs to the caller (e.g. a mapped repack cache,
                              which must outlive w): kern_weight_free leaves it */
};

/* True if kern_matmul handles weights of type t. */
bool kern_type_supported(enum quant_type t);
/* The activation format a product with type t uses. */
enum kern_act_kind kern_act_kind_for(enum quant_type t);
/* Describes w: (N, K) at data (data_bytes must be N * row size; K a multiple of the
 * block size; data 4-byte aligned for F32) and, if repack is true, the active ISA is not
 * scalar and type's SIMD kernels read a repacked layout, builds that copy (owned by *w).
 * Without it the SIMD levels run the reference for quantized types (same bits, slower).
 * Fails with KN_E_UNSUPPORTED for a type without kernels, KN_E_FORMAT for bad shapes. */
KN_MUST_USE enum kn_status kern_weight_init(struct kern_weight *w, enum quant_type type,
                                            int64_t N, int64_t K, const void *data,
                                            size_t data_bytes, bool repack,
                                            struct kn_err *err);
/* Builds the repacked copy kern_weight_init(..., repack = true) would of each of the n
 * weights that has none yet (initialised with repack = false), splitting the work over
 * pool (NULL: this thread). Same bits as one at a time; model_open uses it so a cold
 * start repacks on every thread. On failure no weight keeps a partial copy. */
KN_MUST_USE enum kn_status kern_weight_repack(struct kern_pool *pool, struct kern_weight *const *ws,
                                              size_t n, struct kn_err *err);
/* Bytes of the repacked copy kern_weight_repack would build for w: 0 when it builds none
 * (w has a copy, the type has no packed layout, or the active ISA is scalar). A caller
 * that keeps copies elsewhere (the repack cache) sizes them with this, treats the bytes
 * as opaque, and points w->packed at them with packed_borrowed set. */
size_t kern_weight_packed_bytes(const struct kern_weight *w);
/* Frees the repacked copy (unless borrowed); the struct may be initialised again. */
void kern_weight_free(struct kern_weight *w);

/* ================================================================ matrix products */

/* Scratch bytes kern_matmul needs for M tokens with w (the quantized activations);
 * allocate once for the largest M (64-byte aligned, e.g. kn_aligned_alloc). */
size_t kern_matmul_scratch_bytes(const struct kern_weight *w, int64_t M);

/* w: (N, K); x: (M, K); y: (M, N), row stride N. y = x . w^T.
 * Quantizes x into scratch (kern_matmul_scratch_bytes(w, M) bytes), then runs
 * kern_matmul_many. No allocation. Bits depend on neither M, threads nor ISA. */
void kern_matmul(struct kern_pool *pool, const struct kern_weight *w, const float *x,
                 int64_t M, float *y, void *scratch);

/* One product of kern_matmul_many: w: (N, K); a: (M, K) prepared with kind
 * kern_act_kind_for(w->type); y: (M, N), row stride N. */
struct kern_mm {
    const struct kern_weight *w;
    const struct kern_act *a;
    float *y;
};
#define KERN_MM_MAX 4
/* 1..KERN_MM_MAX products in one pool job, e.g. Q, K and V of one prepared x: their
 * row groups of KERN_ROW_ALIGN, numbered one product after another, are the units of a
 * range job (kern_pool_run_range), so every thread streams one contiguous run of
 * weights. A small job (M < 4, under 64 KiB of weights) runs on the caller alone. The
 * bits are those of separate kern_matmul calls, whatever the split. */
void kern_matmul_many(struct kern_pool *pool, const struct kern_mm *mm, int n);

/* Computes y[m][n] for n in [n0, n1), every m, of one kern_mm product (y with row
 * stride ldy), on the calling thread: the unit of kern_matmul_many. Any n0 <= n1 works;
 * multiples of KERN_ROW_ALIGN avoid recomputing a partial row group. */
void kern_matmul_rows(const struct kern_weight *w, const struct kern_act *a, float *y,
                      int64_t ldy, int64_t n0, int64_t n1);
#define KERN_ROW_ALIGN 16

/* The same product computed by the portable reference, ignoring the active ISA and any
 * repacked copy (tests; verify-receipt uses KINETIC_ISA=scalar instead). */
void kern_matmul_rows_ref(const struct kern_weight *w, const struct kern_act *a, float *y,
                          int64_t ldy, int64_t n0, int64_t n1);

#endif
