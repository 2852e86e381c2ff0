/* cu_internal.h: what the CUDA backend's files share: the open device (cu_backend.c), the
 * kernel table of src/cuda/kernels/cuk.cu, streams and passes (cu_backend.c), the ops
 * (cu_ops.c) and the self-test (cu_selftest.c).
 *
 * Buffers. Every struct kern_buf of this backend has host = NULL and dev = a struct
 * cu_mem (device memory), except upload_rows' tables (the embedding), which stay in host
 * memory (dev = NULL, w = the host description): the embed op looks rows up on the host
 * with the CPU's own code and uploads the T rows, the only bytes it needs.
 *
 * Passes. A pass is the ops launched in order on the stream's CUDA stream; begin makes the
 * device's context current on the calling thread, end waits for the stream. The first
 * failure of a pass (a shape a kernel cannot take, a launch or copy the driver refused)
 * is kept and reported by end; the ops after it do nothing. */
#ifndef KN_CUDA_CU_INTERNAL_H
#define KN_CUDA_CU_INTERNAL_H

#include "cu_backend.h"
#include "cu_drv.h"
#include "kernels/cuk_hd.h"

/* The kernels of cuk.cu, by name. */
#define CUK_MM_KNAMES(X, name, NAME, xblock, bsize) X(mmv_##name) X(mmt_##name)
#define CUK_KERNELS(X)                                                                    \
    X(probe) X(actq_q8f) X(actq_q8k) CUK_MM_TYPES(CUK_MM_KNAMES, X)                       \
    X(mm_float) X(rmsnorm) X(rope) X(eltwise) X(gather)                                   \
    X(kv_store) X(attn) X(conv_store) X(conv) X(layernorm) X(moe_route) X(moe_group)        \
    X(moe_gather) X(moe_bias) X(moe_sum)
#define CUK_ENUM(n) CUK_##n,
enum cuk_kernel { CUK_KERNELS(CUK_ENUM) CUK_COUNT };
#undef CUK_ENUM

/* The kernel's name in the PTX ("cuk_attn"). */
const char *cu_kernel_name(enum cuk_kernel k);
/* The embedded PTX (NUL-terminated) and its length (0: a build without nvcc). */
extern const unsigned char cuk_ptx[];
extern const size_t cuk_ptx_len;

/* The most dims of a head the attention kernel takes (cuk_hd.h). */
#define CU_ATTN_MAX_D CUK_MAXD

/* The quantized products' kernels (cu_ops.c): by M (auto: cuk_mmv_<type> for M <=
 * CUK_MMV_TOKS, else cuk_mmt_<type>), or one path forced (tests compare both). */
enum cu_mm_path { CU_MM_AUTO = 0, CU_MM_DECODE = 1, CU_MM_TILED = 2, CU_MM_PATHS = 3 };

/* "auto", "decode", "tiled" (KN_CUDA_MM's values, cu_backend.c). */
const char *cu_mm_path_name(enum cu_mm_path p);

/* Whether a product of M tokens takes the decode path. */
static inline bool cu_mm_decode(enum cu_mm_path path, int64_t M)
{
    return path == CU_MM_AUTO ? M <= CUK_MMV_TOKS : path == CU_MM_DECODE;
}

struct cu_backend {
    struct kern_backend base;
    struct kern_backend_ops ops;
    const struct cu_drv *d;
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn[CUK_COUNT];
    int index, refs;
    char name[32];          /* "cuda:N" */
    char cls[64];           /* cuda-smXY */
    char numerics[160];     /* KN_NUMERICS, or cuda-smXY-driver-N (self-test failed) */
    struct cu_info info;
    struct cu_selftest selftest;
    enum cu_mm_path mm_path;  /* CU_MM_AUTO; a test forces one path */
};

/* Device memory of one buffer. */
struct cu_mem {
    CUdeviceptr p;
    size_t bytes;
};

/* Per-stream device scratch, grown when needed (the stream is drained first). */
enum cu_slot {
    CU_SLOT_ACT = 0, CU_SLOT_ACT_K = 1, CU_SLOT_IDX = 2, CU_SLOT_OUT = 3,
    /* moe_ffn: the experts' address tables; off, row_of and slot (kn_hd_moe_group); the
     * grouped inputs; gate and up outputs; the grouped down outputs */
    CU_SLOT_MOE_TAB = 4, CU_SLOT_MOE_IDX = 5, CU_SLOT_MOE_X = 6, CU_SLOT_MOE_GU = 7,
    CU_SLOT_MOE_Y = 8,
    CU_SLOTS = 9
};

struct cu_stream {
    struct kern_stream base;
    struct cu_backend *cb;
    CUstream st;
    struct kern_stream_shape shape;
    struct cu_mem scratch[CU_SLOTS];
    struct kern_stream *cpu;     /* the CPU backend's stream: host-side steps (embed) */
    void *host;                  /* host staging (embed rows, the RoPE table) */
    size_t host_bytes;
    struct kn_err err;           /* the pass's first failure (status KN_OK: none) */
};

static inline struct cu_backend *cu_be(const struct kern_backend *be)
{
    return (struct cu_backend *)be;
}
static inline struct cu_stream *cu_st(struct kern_stream *s)
{
    return (struct cu_stream *)s;
}
/* The device address of a buffer of this backend (0 for a host table or NULL). */
static inline CUdeviceptr cu_ptr(const struct kern_buf *b)
{
    return b && b->dev ? ((const struct cu_mem *)b->dev)->p : 0;
}

/* Records the pass's first failure: "cuda:N: <what>". */
void cu_fail(struct cu_stream *s, enum kn_status st, const char *fmt, ...) KN_PRINTF(3, 4);
/* Records r as the failure of what (a driver call) unless it is CU_OK; true on CU_OK. */
bool cu_check(struct cu_stream *s, CUresult r, const char *what);
/* Launches kernel k (grid gx * gy, block bx * by) with params; nothing after a failure. */
void cu_launch(struct cu_stream *s, enum cuk_kernel k, uint64_t gx, uint64_t gy, unsigned bx,
               unsigned by, void **params);
/* Scratch slot of at least bytes on the stream; 0 with the failure recorded. */
CUdeviceptr cu_scratch(struct cu_stream *s, enum cu_slot slot, size_t bytes);
/* Host staging of at least bytes; NULL with the failure recorded. */
void *cu_host(struct cu_stream *s, size_t bytes);
/* Copies n host bytes into scratch slot and returns its device address (0: failed). */
CUdeviceptr cu_stage(struct cu_stream *s, enum cu_slot slot, const void *src, size_t n);
/* Makes the device's context current on this thread. */
bool cu_ctx(struct cu_backend *cb, struct kn_err *err);

/* Sets the op entries (cu_ops.c). */
void cu_ops_fill(struct kern_backend_ops *ops);
/* Sets every entry of the backend's table: memory, streams and passes (cu_backend.c),
 * then cu_ops_fill. They reach the GPU only through cb->d and cb->fn, so a test can run
 * them over a host stand-in for the driver (tests/unit/test_cu_grid.c). */
void cu_backend_ops_fill(struct kern_backend_ops *ops);
/* Runs the start-up self-test (cu_selftest.c). */
void cu_selftest_run(struct cu_backend *cb, struct cu_selftest *t);

#endif
