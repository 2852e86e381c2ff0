/* vk_rt.h: the Vulkan runtime under the Vulkan backend (vk_backend.c) and its ops
 * (vk_ops_*.c): one open device, its buffers, pipelines made from the shaders embedded in
 * the binary, and the recording of a pass into one command buffer. No Vulkan type appears
 * here: every handle is opaque, so the ops compile in a build without Vulkan too, where
 * vkr_open fails with "this build has no Vulkan support ..." (vk_rt_absent.c).
 *
 * Objects.
 *   struct vkr       an open device: instance, physical device N, logical device, one
 *                    compute queue, the pipeline cache. vkr_open / vkr_close.
 *   struct vkr_buf   a storage buffer: VKR_MEM_DEVICE (device-local, for weights,
 *                    activations, KV caches) or VKR_MEM_HOST (host-visible and coherent,
 *                    mapped for the buffer's life: vkr_buf_map).
 *   struct vkr_pipe  a compute pipeline: an embedded shader, its specialization
 *                    constants, push-constant size and number of storage buffers. Made
 *                    once by vkr_pipe_get (cached by all four), valid until vkr_close.
 *   struct vkr_cmd   one pass: a command buffer, its descriptor pools, a host-visible
 *                    arena for the pass's small host arrays (token ids, positions) and
 *                    the list of reads to copy back. A backend stream owns one.
 *
 * Errors. Calls outside a pass return a status with err naming the Vulkan call and its
 * VkResult ("vkAllocateMemory: VK_ERROR_OUT_OF_DEVICE_MEMORY (256 MiB device-local)").
 * Recording calls (vkr_cmd_*) return nothing: the first failure is kept in the cmd, later
 * recording is skipped, and vkr_cmd_submit reports it. Op code records its own failures
 * (a shape its shader cannot take) with vkr_cmd_fail.
 *
 * Threads. vkr_pipe_get, buffer calls and vkr_cmd_submit may be called from any thread
 * (the queue and the cache are locked); one vkr_cmd is used by one thread at a time.
 *
 * ---- How to add an op (for src/vulkan/vk_ops_*.c) ------------------------------------
 * 1. Write src/vulkan/shaders/<name>.comp (GLSL 450; compiled by glslc
 *    --target-env=vulkan1.2 at build time, embedded under <name>). Storage buffers are
 *    set 0, bindings 0..n_bufs-1, in the order of the binds you pass; push constants one
 *    block (layout(push_constant)); specialization constants constant_id 0..n_spec-1,
 *    32-bit each (local_size_x_id = 0 for a workgroup size chosen at run time). Mark every
 *    float result `precise` (GLSL may otherwise contract a*b+c into an fma, which the CPU
 *    reference never does: docs/numerics.md), and write fma() only where the reference
 *    fuses.
 * 2. In the op function (the backend op's own signature, declared in vk_ops.h):
 *        struct vkr_cmd *c = vk_stream_cmd(s);          (vk_backend.h)
 *        static const uint32_t spec[] = {64};
 *        const struct vkr_pipe *p = vkr_cmd_pipe(c, &(struct vkr_pipe_desc){
 *            .shader = "add_f32", .n_bufs = 2, .push_bytes = 4, .spec = spec, .n_spec = 1});
 *        struct vkr_bind b[2] = {vk_bind_rw(y), vk_bind_ro(a)};   (whole kern_bufs)
 *        uint32_t n32 = (uint32_t)n;
 *        vkr_cmd_dispatch(c, p, b, &n32, vkr_groups(n, 64), 1, 1);
 *    vkr_cmd_pipe is vkr_pipe_get that records its failure in the cmd (NULL then, and
 *    vkr_cmd_dispatch with a NULL pipe does nothing). Host arrays the op takes go in with
 *    vkr_cmd_stage (copied now, valid for the pass).
 * 3. Barriers are automatic: vkr_cmd_dispatch (and copy/fill) puts a barrier before a
 *    command that reads or writes a buffer written since the last barrier, or writes one
 *    read since; independent commands (the q, k, v products) run without one. Mark
 *    every bind you write with .write = true, or the next reader may see stale data.
 * 4. Test it against the CPU op (tests/unit/test_vk_*.c; skip with exit code 77 and a
 *    printed reason when vkr_open fails: no device or no Vulkan in this build).
 * ---------------------------------------------------------------------------------------
 */
#ifndef KN_VULKAN_VK_RT_H
#define KN_VULKAN_VK_RT_H

#include "../base/base.h"

struct vkr;
struct vkr_buf;
struct vkr_pipe;
struct vkr_cmd;

/* ---- the embedded shaders (cmake/vk_embed.cmake writes the table) */
struct vkr_shader {
    const char *name;        /* the file name without .comp */
    const uint32_t *code;    /* SPIR-V words */
    size_t bytes;
};
extern const struct vkr_shader vkr_shaders[];
extern const int vkr_shader_count;
/* The embedded shader named name, or NULL. */
const struct vkr_shader *vkr_shader_find(const char *name);

/* ---- devices */
/* What a physical device is and has (queried before a logical device is made). */
struct vkr_info {
    int index;                      /* N of vulkan:N, in enumeration order */
    char name[256];                 /* deviceName: "llvmpipe (LLVM 15.0.6, 256 bits)" */
    char driver[256];               /* driverName: "llvmpipe" */
    char driver_info[256];          /* driverInfo: "Mesa 22.3.6 (LLVM 15.0.6)" */
    const char *type;               /* "cpu", "discrete", "integrated", "virtual", "other" */
    uint32_t api_version, driver_version, vendor_id, device_id, driver_id;
    uint8_t device_uuid[16], driver_uuid[16]; /* VkPhysicalDeviceIDProperties (VK_UUID_SIZE) */
    uint64_t device_local_bytes;    /* the largest device-local heap */
    /* features this runtime enables when the device has them */
    bool float64, float16, int8, int16, int64;
    bool storage8, storage16;       /* 8- and 16-bit storage buffer access */
    bool int_dot;                   /* shaderIntegerDotProduct (Vulkan 1.3, or the extension) */
    bool int_dot_ext;               /* ... from VK_KHR_shader_integer_dot_product on 1.2 */
    bool int_dot_4x8_signed_accel;  /* packed signed 4x8 dot product is accelerated */
    /* float controls (VkPhysicalDeviceFloatControlsProperties), 16/32/64 bits */
    bool denorm_preserve[3], denorm_flush[3], rte[3], rtz[3], signed_zero_inf_nan[3];
    /* subgroups */
    uint32_t subgroup_size, subgroup_min, subgroup_max;
    bool subgroup_arith, subgroup_shuffle, subgroup_ballot;  /* in compute shaders */
    /* limits */
    uint32_t max_group_count[3], max_group_size[3], max_group_invocations;
    uint32_t max_shared_bytes, max_push_bytes;
    uint64_t max_storage_range;     /* bytes one storage binding may span */
    uint64_t max_alloc_bytes;       /* maxMemoryAllocationSize */
    uint32_t storage_align;         /* minStorageBufferOffsetAlignment */
};

/* Whether this build has Vulkan (false: every vkr call below fails saying so). */
bool vkr_built(void);
/* The number of Vulkan devices (0 with err set when there is no loader, no driver or
 * no device: err says which). */
int vkr_device_count(struct kn_err *err);
/* Describes device index without opening it. */
KN_MUST_USE enum kn_status vkr_describe(int index, struct vkr_info *out, struct kn_err *err);
/* Opens device index with one compute queue and the features above enabled. */
KN_MUST_USE enum kn_status vkr_open(int index, struct vkr **out, struct kn_err *err);
void vkr_close(struct vkr *rt);
const struct vkr_info *vkr_device_info(const struct vkr *rt);

/* ---- buffers */
enum vkr_mem { VKR_MEM_DEVICE = 0, VKR_MEM_HOST = 1 };
/* A buffer of bytes (> 0), contents undefined (zero: cleared). NULL and err on failure. */
struct vkr_buf *vkr_buf_alloc(struct vkr *rt, size_t bytes, enum vkr_mem kind, bool zero,
                              struct kn_err *err);
void vkr_buf_free(struct vkr *rt, struct vkr_buf *b);
size_t vkr_buf_size(const struct vkr_buf *b);
/* The host address of a VKR_MEM_HOST buffer (NULL for device memory). Touch it only
 * between passes that use the buffer. */
void *vkr_buf_map(const struct vkr_buf *b);
/* Synchronous copies between host memory and a buffer (a staging buffer and one submit,
 * or a memcpy when the device's memory is host-visible), outside any pass using b. */
KN_MUST_USE enum kn_status vkr_buf_upload(struct vkr *rt, struct vkr_buf *b, size_t off,
                                          const void *src, size_t bytes, struct kn_err *err);
KN_MUST_USE enum kn_status vkr_buf_download(struct vkr *rt, const struct vkr_buf *b, size_t off,
                                            void *dst, size_t bytes, struct kn_err *err);

/* ---- pipelines */
struct vkr_pipe_desc {
    const char *shader;      /* an embedded shader's name */
    uint32_t n_bufs;         /* storage buffers: set 0, bindings 0..n_bufs-1 (<= 16) */
    uint32_t push_bytes;     /* the push-constant block (multiple of 4, <= max_push_bytes) */
    const uint32_t *spec;    /* specialization constants 0..n_spec-1 (<= 16), 32-bit */
    uint32_t n_spec;
};
/* The pipeline for d, made on first use and cached (same shader, sizes and constants:
 * the same pipeline). NULL with err naming the shader on failure. */
const struct vkr_pipe *vkr_pipe_get(struct vkr *rt, const struct vkr_pipe_desc *d,
                                    struct kn_err *err);

/* ---- a pass */
/* A range of a buffer bound to one storage binding; bytes 0: to the buffer's end. */
struct vkr_bind {
    const struct vkr_buf *buf;
    size_t off, bytes;
    bool write;              /* the shader writes it (for the automatic barriers) */
};

struct vkr_cmd *vkr_cmd_create(struct vkr *rt, struct kn_err *err);
void vkr_cmd_free(struct vkr_cmd *c);
struct vkr *vkr_cmd_rt(struct vkr_cmd *c);
/* Starts recording a pass (clears the kept error, the arena and the reads). */
void vkr_cmd_begin(struct vkr_cmd *c);
/* vkr_pipe_get, its failure recorded in c (NULL then). */
const struct vkr_pipe *vkr_cmd_pipe(struct vkr_cmd *c, const struct vkr_pipe_desc *d);
/* Records a dispatch of (gx, gy, gz) workgroups with binds[0..n_bufs-1] and push
 * (push_bytes of it; NULL when 0). A group count over the device's limit, a bind past
 * its buffer or over max_storage_range, or a NULL pipe (failed before) records an error. */
void vkr_cmd_dispatch(struct vkr_cmd *c, const struct vkr_pipe *p, const struct vkr_bind *binds,
                      const void *push, uint32_t gx, uint32_t gy, uint32_t gz);
/* Records a copy of bytes from src at soff to dst at doff (buffers distinct). */
void vkr_cmd_copy(struct vkr_cmd *c, const struct vkr_buf *dst, size_t doff,
                  const struct vkr_buf *src, size_t soff, size_t bytes);
/* Records filling bytes of dst at off (both multiples of 4) with the word v. */
void vkr_cmd_fill(struct vkr_cmd *c, const struct vkr_buf *dst, size_t off, size_t bytes,
                  uint32_t v);
/* Records a copy of host bytes into dst at off (copied from src now, through the arena). */
void vkr_cmd_write(struct vkr_cmd *c, const struct vkr_buf *dst, size_t off, const void *src,
                   size_t bytes);
/* Copies host bytes into the pass's arena now and returns them as a read-only bind,
 * aligned for any storage binding (for an op's host arrays). On failure the returned
 * bind has buf NULL and the error is recorded. */
struct vkr_bind vkr_cmd_stage(struct vkr_cmd *c, const void *src, size_t bytes);
/* Records a read of bytes of b at off into host dst, which is written when
 * vkr_cmd_submit returns KN_OK. */
void vkr_cmd_read(struct vkr_cmd *c, const struct vkr_buf *b, size_t off, void *dst,
                  size_t bytes);
/* Records a full barrier (every earlier command's writes visible to every later one);
 * the automatic barriers make this rarely needed. */
void vkr_cmd_barrier(struct vkr_cmd *c);
/* Records the failure of an op (kept if it is the pass's first). */
void vkr_cmd_fail(struct vkr_cmd *c, enum kn_status status, const char *fmt, ...) KN_PRINTF(3, 4);
/* Whether c has failed this pass (an op may stop recording early). */
bool vkr_cmd_failed(const struct vkr_cmd *c);
/* Ends the pass: submits it, waits for its fence, copies the reads to host memory. The
 * pass's first recording error, or the device's, is returned (err says which); the cmd
 * is ready for the next vkr_cmd_begin either way. */
KN_MUST_USE enum kn_status vkr_cmd_submit(struct vkr_cmd *c, struct kn_err *err);

/* ceil(n / per_group) for a dispatch (n >= 0). */
static inline uint32_t vkr_groups(int64_t n, uint32_t per_group)
{
    return (uint32_t)((n + per_group - 1) / per_group);
}

#endif
