/* vk_backend.c: the Vulkan backend's device, memory, streams and passes (backend.h's
 * struct kern_backend_ops); the ops are vk_ops_*.c, set by vk_ops_fill. One pass is one
 * command buffer: begin starts recording, the ops record dispatches, end submits it and
 * waits; only what to_host and logits asked for comes back to host memory. */
#include "vk_backend.h"
#include "vk_ops.h"
#include "../quant/quant.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct vk_backend *VB(const struct kern_backend *be)
{
    return (struct vk_backend *)be;
}

/* ================================================================ memory */

static struct kern_buf *buf_wrap(struct kern_backend *be, struct vkr_buf *vb, size_t bytes,
                                 const struct kern_weight *w, struct kn_err *err)
{
    struct kern_buf *b = kn_malloc(sizeof *b, err);
    if (!b) {
        vkr_buf_free(VB(be)->rt, vb);
        return NULL;
    }
    *b = (struct kern_buf){.be = be, .host = NULL, .dev = vb, .bytes = bytes, .w = w};
    return b;
}

static struct kern_buf *vk_alloc(struct kern_backend *be, size_t bytes, bool zero,
                                 struct kn_err *err)
{
    struct vkr_buf *vb = vkr_buf_alloc(VB(be)->rt, bytes, VKR_MEM_DEVICE, zero, err);
    return vb ? buf_wrap(be, vb, bytes, NULL, err) : NULL;
}

/* A device copy of bytes of host data (model data: uploaded once, at load). */
static struct kern_buf *upload_bytes(struct kern_backend *be, const void *host, size_t bytes,
                                     const struct kern_weight *w, struct kn_err *err)
{
    struct vkr *rt = VB(be)->rt;
    struct vkr_buf *vb = vkr_buf_alloc(rt, bytes, VKR_MEM_DEVICE, false, err);
    if (!vb)
        return NULL;
    if (vkr_buf_upload(rt, vb, 0, host, bytes, err) != KN_OK) {
        vkr_buf_free(rt, vb);
        return NULL;
    }
    return buf_wrap(be, vb, bytes, w, err);
}

static struct kern_buf *vk_upload(struct kern_backend *be, const float *host, int64_t n,
                                  struct kn_err *err)
{
    return upload_bytes(be, host, (size_t)n * sizeof(float), NULL, err);
}

static struct kern_buf *vk_upload_weight(struct kern_backend *be, const struct kern_weight *w,
                                         struct kn_err *err)
{
    return upload_bytes(be, w->data, (size_t)w->N * w->row_bytes, w, err);
}

static struct kern_buf *vk_upload_rows(struct kern_backend *be, const struct kern_weight *w,
                                       struct kn_err *err)
{
    if (!quant_can_dequantize(w->type)) {
        kn_fail(err, KN_E_UNSUPPORTED, "rows of type %s cannot be read", quant_type_name(w->type));
        return NULL;
    }
    return upload_bytes(be, w->data, (size_t)w->N * w->row_bytes, w, err);
}

static void vk_free(struct kern_backend *be, struct kern_buf *b)
{
    vkr_buf_free(VB(be)->rt, vk_buf(b));
    free(b);
}

/* ================================================================ streams */

static void vk_stream_free(struct kern_stream *s)
{
    struct vk_stream *vs = vk_stream(s);
    if (!vs)
        return;
    struct vkr *rt = vs->vb->rt;
    vkr_cmd_free(vs->cmd);
    for (int i = 0; i < VK_SCRATCH_SLOTS; i++)
        vkr_buf_free(rt, vs->scratch[i]);
    for (int i = 0; i < vs->n_retired; i++)
        vkr_buf_free(rt, vs->retired[i]);
    free(vs);
}

static struct kern_stream *vk_stream_create(struct kern_backend *be,
                                            const struct kern_stream_shape *shape,
                                            struct kern_pool *pool, struct kn_err *err)
{
    (void)pool; /* the device runs the ops; the CPU only records them */
    struct vk_stream *vs = kn_calloc(1, sizeof *vs, err);
    if (!vs)
        return NULL;
    vs->base = (struct kern_stream){be, be->ops};
    vs->vb = VB(be);
    vs->shape = *shape;
    vs->cmd = vkr_cmd_create(vs->vb->rt, err);
    if (!vs->cmd) {
        free(vs);
        return NULL;
    }
    return &vs->base;
}

struct vkr_buf *vk_stream_scratch(struct kern_stream *s, int slot, size_t bytes)
{
    struct vk_stream *vs = vk_stream(s);
    if (slot < 0 || slot >= VK_SCRATCH_SLOTS) {
        vkr_cmd_fail(vs->cmd, KN_E_INTERNAL, "Vulkan: scratch slot %d of %d", slot,
                     VK_SCRATCH_SLOTS);
        return NULL;
    }
    struct vkr_buf *b = vs->scratch[slot];
    if (b && vkr_buf_size(b) >= bytes)
        return b;
    if (b) {
        if (vs->n_retired == VK_SCRATCH_SLOTS) {
            vkr_cmd_fail(vs->cmd, KN_E_INTERNAL, "Vulkan: scratch regrown too often in a pass");
            return NULL;
        }
        vs->retired[vs->n_retired++] = b; /* recorded commands may still use it */
        vs->scratch[slot] = NULL;
    }
    struct kn_err err;
    b = vkr_buf_alloc(vs->vb->rt, bytes, VKR_MEM_DEVICE, false, &err);
    if (!b) {
        vkr_cmd_fail(vs->cmd, err.status, "%s", err.msg);
        return NULL;
    }
    vs->scratch[slot] = b;
    return b;
}

static void vk_begin(struct kern_stream *s)
{
    vkr_cmd_begin(vk_stream(s)->cmd);
}

static enum kn_status vk_end(struct kern_stream *s, struct kn_err *err)
{
    struct vk_stream *vs = vk_stream(s);
    enum kn_status st = vkr_cmd_submit(vs->cmd, err);
    for (int i = 0; i < vs->n_retired; i++)
        vkr_buf_free(vs->vb->rt, vs->retired[i]);
    vs->n_retired = 0;
    if (st != KN_OK)
        kn_err_prefix(err, vs->vb->name);
    return st;
}

/* The residual stream's hand-over between backends (--gpu-layers), and Warm Start's
 * cache records: copies recorded into the pass. */
static void vk_to_host(struct kern_stream *s, const struct kern_buf *b, size_t off, void *dst,
                       size_t bytes)
{
    vkr_cmd_read(vk_stream(s)->cmd, vk_buf(b), off, dst, bytes);
}

static void vk_from_host(struct kern_stream *s, struct kern_buf *b, size_t off, const void *src,
                         size_t bytes)
{
    vkr_cmd_write(vk_stream(s)->cmd, vk_buf(b), off, src, bytes);
}

/* ================================================================ the device */

static const char *vk_numerics(const struct kern_backend *be)
{
    return VB(be)->numerics;
}

/* Appends s to out as a class word: lower case letters, digits and '.', runs of anything
 * else as one '-'. */
static void class_word(char *out, size_t cap, const char *s)
{
    size_t n = strlen(out);
    bool dash = n > 0 && out[n - 1] == '-';
    for (; *s && n + 1 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (isalnum(ch) || ch == '.') {
            out[n++] = (char)tolower(ch);
            dash = false;
        } else if (!dash) {
            out[n++] = '-';
            dash = true;
        }
    }
    while (n > 0 && out[n - 1] == '-')
        n--;
    out[n] = 0;
}

void vk_class_of(const struct vkr_info *in, char *out, size_t cap)
{
    snprintf(out, cap, "vulkan-");
    class_word(out, cap, in->name);
}

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
#define VK_MAX_DEVICES 16
static struct vk_backend *opened[VK_MAX_DEVICES];

struct kern_backend *vk_backend_open(int index, enum vk_check check, struct kn_err *err)
{
    if (index < 0 || index >= VK_MAX_DEVICES) {
        kn_fail(err, KN_E_ARG, "there is no device vulkan:%d", index);
        return NULL;
    }
    pthread_mutex_lock(&open_lock);
    struct vk_backend *vb = opened[index];
    if (vb) {
        vb->refs++;
        pthread_mutex_unlock(&open_lock);
        return &vb->base;
    }
    vb = kn_calloc(1, sizeof *vb, err);
    if (!vb || vkr_open(index, &vb->rt, err) != KN_OK) {
        free(vb);
        pthread_mutex_unlock(&open_lock);
        return NULL;
    }
    vb->index = index;
    vb->refs = 1;
    snprintf(vb->name, sizeof vb->name, "vulkan:%d", index);
    vb->ops = (struct kern_backend_ops){
        .numerics = vk_numerics,
        .alloc = vk_alloc,
        .upload = vk_upload,
        .upload_weight = vk_upload_weight,
        .upload_rows = vk_upload_rows,
        .free = vk_free,
        .stream_create = vk_stream_create,
        .stream_free = vk_stream_free,
        .begin = vk_begin,
        .end = vk_end,
        .to_host = vk_to_host,
        .from_host = vk_from_host,
    };
    vk_ops_fill(&vb->ops, vkr_device_info(vb->rt));
    vb->base = (struct kern_backend){.ops = &vb->ops, .name = vb->name};
    const struct vkr_info *in = vkr_device_info(vb->rt);
    vk_class_of(in, vb->cls, sizeof vb->cls);
    /* The self-test decides the numerics: canonical-1, or bits promised only for this
     * GPU and driver. A device already open keeps its verdict whatever check says. */
    vk_selftest_run(vb, check, &vb->selftest);
    if (vb->selftest.canonical) {
        snprintf(vb->numerics, sizeof vb->numerics, "%s", KN_NUMERICS);
    } else {
        snprintf(vb->numerics, sizeof vb->numerics, "%s-", vb->cls);
        class_word(vb->numerics, sizeof vb->numerics,
                   in->driver_info[0] ? in->driver_info : in->driver);
    }
    opened[index] = vb;
    pthread_mutex_unlock(&open_lock);
    return &vb->base;
}

void vk_backend_close(struct kern_backend *be)
{
    if (!be)
        return;
    struct vk_backend *vb = VB(be);
    pthread_mutex_lock(&open_lock);
    if (--vb->refs == 0) {
        opened[vb->index] = NULL;
        vkr_close(vb->rt);
        free(vb);
    }
    pthread_mutex_unlock(&open_lock);
}

bool vk_backend_is(const struct kern_backend *be)
{
    return be && be->ops && be->ops->numerics == vk_numerics;
}

const struct vkr_info *vk_backend_info(const struct kern_backend *be)
{
    return vkr_device_info(VB(be)->rt);
}

const struct vk_selftest *vk_backend_selftest(const struct kern_backend *be)
{
    return &VB(be)->selftest;
}

const char *vk_backend_class(const struct kern_backend *be)
{
    return VB(be)->cls;
}
