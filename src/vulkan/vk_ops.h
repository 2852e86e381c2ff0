/* vk_ops.h: what the Vulkan backend (vk_backend.c, the memory, streams and passes) and its
 * ops (vk_ops_*.c, one function per backend op with the op's exact signature from
 * src/kernels/backend.h, recording dispatches on the runtime vk_rt.h) share.
 *
 * Buffers. Every struct kern_buf of this backend has dev = its struct vkr_buf (device
 * memory) and host = NULL. Layouts:
 *   alloc          bytes as the op defines them (f32 rows; a KV cache layer
 *                  (Hkv, n_ctx, D) of kv_type, head-major, as on the CPU).
 *   upload         n f32.
 *   upload_weight  the weight's rows as in the file (w->N rows of w->row_bytes, GGML block
 *                  layout), not the CPU's repacked copy; b->w is the host description.
 *   upload_rows    the same for an embedding table (any type quant_dequantize_row reads).
 *
 * Ops. vk_ops_fill (vk_ops_table.c, vkops' file) sets the op entries that have shaders;
 * the rest stay NULL, and model_open refuses to place a layer that needs a NULL op on
 * the device, naming it. */
#ifndef KN_VULKAN_VK_OPS_H
#define KN_VULKAN_VK_OPS_H

#include "../kernels/backend.h"
#include "vk_backend.h"
#include "vk_rt.h"

#include <limits.h>

/* An open Vulkan device as a backend. */
struct vk_backend {
    struct kern_backend base;
    struct kern_backend_ops ops;
    struct vkr *rt;
    int index;
    char name[32];                /* "vulkan:N" */
    char cls[128];                /* the device class: vulkan-<gpu> */
    char numerics[256];           /* KN_NUMERICS or vulkan-<gpu>-<driver> (self-test) */
    struct vk_selftest selftest;
    int refs;                     /* vk_backend_open / vk_backend_close pairs */
};

/* The scratch slots of a stream (vk_stream_scratch), one per use: the quantized
 * activations of a product (one slot per kind), the logits before they are read back,
 * the tiles of a split attention, and the mixture-of-experts rows. */
enum vk_slot {
    VK_SLOT_ACT_Q8_32, VK_SLOT_ACT_Q8_K, VK_SLOT_LOGITS, VK_SLOT_ATTN_PART,
    VK_SLOT_MOE_X, VK_SLOT_MOE_G, VK_SLOT_MOE_U, VK_SLOT_MOE_Y, VK_SLOT_MOE_GROUPS,
    VK_SCRATCH_SLOTS
};

/* x (M, K) quantized for kind into its scratch slot, recorded in s's pass (vk_ops_core.c);
 * NULL for KERN_ACT_F32 or on failure (recorded in the pass). */
const struct vkr_buf *vk_act_prepare(struct kern_stream *s, enum kern_act_kind kind,
                                     const struct vkr_buf *x, uint32_t off, int64_t M, int64_t K);

/* A forward context: one command buffer per pass and the op's scratch buffers. */
struct vk_stream {
    struct kern_stream base;
    struct vk_backend *vb;
    struct vkr_cmd *cmd;
    struct kern_stream_shape shape;
    struct vkr_buf *scratch[VK_SCRATCH_SLOTS];
    struct vkr_buf *retired[VK_SCRATCH_SLOTS]; /* replaced during a pass, freed at its end */
    int n_retired;
};

static inline struct vk_stream *vk_stream(struct kern_stream *s)
{
    return (struct vk_stream *)s;
}
/* The command buffer of the stream's current pass. */
static inline struct vkr_cmd *vk_stream_cmd(struct kern_stream *s)
{
    return ((struct vk_stream *)s)->cmd;
}
static inline struct vkr *vk_stream_rt(struct kern_stream *s)
{
    return ((struct vk_stream *)s)->vb->rt;
}
/* The device buffer behind a kern_buf of this backend. */
static inline struct vkr_buf *vk_buf(const struct kern_buf *b)
{
    return (struct vkr_buf *)b->dev;
}
/* Whole-buffer binds: read-only, and written (for the automatic barriers). */
static inline struct vkr_bind vk_bind_ro(const struct kern_buf *b)
{
    return (struct vkr_bind){.buf = vk_buf(b)};
}
static inline struct vkr_bind vk_bind_rw(const struct kern_buf *b)
{
    return (struct vkr_bind){.buf = vk_buf(b), .write = true};
}

/* Device scratch slot (0 .. VK_SCRATCH_SLOTS-1) of at least bytes for this pass (e.g. the
 * quantized activations), kept between passes and grown when needed (a grown buffer's
 * old one is freed when the pass ends). NULL with the failure recorded in the cmd. */
struct vkr_buf *vk_stream_scratch(struct kern_stream *s, int slot, size_t bytes);

/* Runs the start-up self-test on an open backend (vk_selftest.c). */
void vk_selftest_run(struct vk_backend *vb, enum vk_check check, struct vk_selftest *t);

/* The device verdict cache (vk_verdict.c, docs/numerics.md "Devices"): kern_backend_check's
 * verdict on a device, recorded for later starts of the same build on the same device and
 * driver whose probes find the same. */
struct vk_verdict_plan {
    uint8_t key[32];     /* BLAKE3 of the build id, device, driver and findings */
    uint8_t mac_key[32];
    char path[PATH_MAX]; /* the record's file */
};
enum vk_verdict_load {
    VK_VERDICT_HIT,  /* a valid record: its verdict holds */
    VK_VERDICT_MISS, /* no record: run the check and record it */
    VK_VERDICT_BAD,  /* a record that fails a check (why): ignored, run and rewrite */
};
/* The record for device in, build id build and this start's findings (every probe result
 * and mode that decides which shaders run, as text); false when the cache is off
 * (VK_VERDICT_ENV=off, why empty) or no folder or build id is known (why says which). */
bool vk_verdict_plan(const struct vkr_info *in, const char *build, const char *findings,
                     struct vk_verdict_plan *p, struct kn_err *why);
enum vk_verdict_load vk_verdict_load(const struct vk_verdict_plan *p, bool *ops_equal,
                                     char ops[VK_VERDICT_OPS_LEN], struct kn_err *why);
/* Writes the record (best effort: a failure is a debug line). */
void vk_verdict_store(const struct vk_verdict_plan *p, bool ops_equal, const char *ops);

/* Sets the op entries of ops that the Vulkan ops implement on a device like dev
 * (vk_ops_table.c). */
void vk_ops_fill(struct kern_backend_ops *ops, const struct vkr_info *dev);

#endif
