/* vk_rt_absent.c: the runtime of a build without Vulkan (CMake found no Vulkan loader or
 * no glslc). Opening a device fails saying what to install; nothing else can be reached,
 * since every other call needs an open device, a buffer or a cmd. */
#include "vk_rt.h"

#include <stdlib.h>

#define VKR_ABSENT "this build has no Vulkan support (install libvulkan-dev and glslc, see " \
                   "scripts/deps.sh, and build again)"

const struct vkr_shader vkr_shaders[] = {{0, 0, 0}};
const int vkr_shader_count = 0;

const struct vkr_shader *vkr_shader_find(const char *name)
{
    (void)name;
    return NULL;
}

bool vkr_built(void)
{
    return false;
}

int vkr_device_count(struct kn_err *err)
{
    kn_fail(err, KN_E_UNSUPPORTED, VKR_ABSENT);
    return 0;
}

enum kn_status vkr_describe(int index, struct vkr_info *out, struct kn_err *err)
{
    (void)index;
    (void)out;
    return kn_fail(err, KN_E_UNSUPPORTED, VKR_ABSENT);
}

enum kn_status vkr_open(int index, struct vkr **out, struct kn_err *err)
{
    (void)index;
    *out = NULL;
    return kn_fail(err, KN_E_UNSUPPORTED, VKR_ABSENT);
}

/* The rest cannot be called without an open device; they abort if they are. */
#define UNREACHABLE() abort()
void vkr_close(struct vkr *rt) { if (rt) UNREACHABLE(); }
const struct vkr_info *vkr_device_info(const struct vkr *rt) { (void)rt; UNREACHABLE(); }
struct vkr_buf *vkr_buf_alloc(struct vkr *rt, size_t bytes, enum vkr_mem kind, bool zero,
                              struct kn_err *err)
{ (void)rt; (void)bytes; (void)kind; (void)zero; (void)err; UNREACHABLE(); }
void vkr_buf_free(struct vkr *rt, struct vkr_buf *b) { (void)rt; if (b) UNREACHABLE(); }
size_t vkr_buf_size(const struct vkr_buf *b) { (void)b; UNREACHABLE(); }
void *vkr_buf_map(const struct vkr_buf *b) { (void)b; UNREACHABLE(); }
enum kn_status vkr_buf_upload(struct vkr *rt, struct vkr_buf *b, size_t off, const void *src,
                              size_t bytes, struct kn_err *err)
{ (void)rt; (void)b; (void)off; (void)src; (void)bytes; (void)err; UNREACHABLE(); }
enum kn_status vkr_buf_download(struct vkr *rt, const struct vkr_buf *b, size_t off, void *dst,
                                size_t bytes, struct kn_err *err)
{ (void)rt; (void)b; (void)off; (void)dst; (void)bytes; (void)err; UNREACHABLE(); }
const struct vkr_pipe *vkr_pipe_get(struct vkr *rt, const struct vkr_pipe_desc *d,
                                    struct kn_err *err)
{ (void)rt; (void)d; (void)err; UNREACHABLE(); }
struct vkr_cmd *vkr_cmd_create(struct vkr *rt, struct kn_err *err) { (void)rt; (void)err; UNREACHABLE(); }
void vkr_cmd_free(struct vkr_cmd *c) { if (c) UNREACHABLE(); }
struct vkr *vkr_cmd_rt(struct vkr_cmd *c) { (void)c; UNREACHABLE(); }
void vkr_cmd_begin(struct vkr_cmd *c) { (void)c; UNREACHABLE(); }
const struct vkr_pipe *vkr_cmd_pipe(struct vkr_cmd *c, const struct vkr_pipe_desc *d)
{ (void)c; (void)d; UNREACHABLE(); }
void vkr_cmd_dispatch(struct vkr_cmd *c, const struct vkr_pipe *p, const struct vkr_bind *binds,
                      const void *push, uint32_t gx, uint32_t gy, uint32_t gz)
{ (void)c; (void)p; (void)binds; (void)push; (void)gx; (void)gy; (void)gz; UNREACHABLE(); }
void vkr_cmd_copy(struct vkr_cmd *c, const struct vkr_buf *dst, size_t doff,
                  const struct vkr_buf *src, size_t soff, size_t bytes)
{ (void)c; (void)dst; (void)doff; (void)src; (void)soff; (void)bytes; UNREACHABLE(); }
void vkr_cmd_fill(struct vkr_cmd *c, const struct vkr_buf *dst, size_t off, size_t bytes,
                  uint32_t v)
{ (void)c; (void)dst; (void)off; (void)bytes; (void)v; UNREACHABLE(); }
void vkr_cmd_write(struct vkr_cmd *c, const struct vkr_buf *dst, size_t off, const void *src,
                   size_t bytes)
{ (void)c; (void)dst; (void)off; (void)src; (void)bytes; UNREACHABLE(); }
struct vkr_bind vkr_cmd_stage(struct vkr_cmd *c, const void *src, size_t bytes)
{ (void)c; (void)src; (void)bytes; UNREACHABLE(); }
void vkr_cmd_read(struct vkr_cmd *c, const struct vkr_buf *b, size_t off, void *dst,
                  size_t bytes)
{ (void)c; (void)b; (void)off; (void)dst; (void)bytes; UNREACHABLE(); }
void vkr_cmd_barrier(struct vkr_cmd *c) { (void)c; UNREACHABLE(); }
void vkr_cmd_fail(struct vkr_cmd *c, enum kn_status status, const char *fmt, ...)
{ (void)c; (void)status; (void)fmt; UNREACHABLE(); }
bool vkr_cmd_failed(const struct vkr_cmd *c) { (void)c; UNREACHABLE(); }
enum kn_status vkr_cmd_submit(struct vkr_cmd *c, struct kn_err *err) { (void)c; (void)err; UNREACHABLE(); }
