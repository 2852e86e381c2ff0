/* cu_backend.c: the CUDA backend's device, memory, streams and passes (backend.h's
 * struct kern_backend_ops); the ops are cu_ops.c. The kernels are the PTX embedded at
 * build time (src/cuda/kernels/cuk.cu), loaded into the device's primary context when it
 * is first opened; the driver compiles the PTX for the GPU (JIT). */
#include "cu_internal.h"
#include "../base/progress.h"
#include "../quant/quant.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cu_built(void)
{
    return cuk_ptx_len > 0;
}

static const char *no_build_msg =
    "this build has no CUDA backend (it was built without nvcc: install the CUDA toolkit, "
    "or put its bin/ on PATH, and rebuild; scripts/deps.sh)";

int cu_device_count(struct kn_err *err)
{
    if (!cu_built()) {
        kn_fail(err, KN_E_UNSUPPORTED, "%s", no_build_msg);
        return 0;
    }
    const struct cu_drv *d;
    if (cu_drv_load(&d, err) != KN_OK)
        return 0;
    int n = 0;
    if (d->DeviceGetCount(&n) != CU_OK || n <= 0) {
        kn_fail(err, KN_E_UNSUPPORTED, "no CUDA device present (the driver lists none)");
        return 0;
    }
    return n;
}

enum kn_status cu_describe(int index, struct cu_info *out, struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    int n = cu_device_count(err);
    if (n == 0)
        return err ? err->status : KN_E_UNSUPPORTED;
    if (index < 0 || index >= n)
        return kn_fail(err, KN_E_ARG, "there is no device cuda:%d (this machine has %d CUDA "
                       "device%s: cuda:0%s)", index, n, n == 1 ? "" : "s",
                       n > 1 ? " .. cuda:N-1" : "");
    const struct cu_drv *d;
    if (cu_drv_load(&d, err) != KN_OK)
        return err->status;
    CUdevice dev;
    char e[160];
    CUresult r = d->DeviceGet(&dev, index);
    if (r == CU_OK)
        r = d->DeviceGetName(out->name, (int)sizeof out->name, dev);
    if (r == CU_OK)
        r = d->DeviceGetAttribute(&out->cc_major, CU_ATTR_CC_MAJOR, dev);
    if (r == CU_OK)
        r = d->DeviceGetAttribute(&out->cc_minor, CU_ATTR_CC_MINOR, dev);
    if (r == CU_OK)
        r = d->DeviceGetAttribute(&out->sm_count, CU_ATTR_SM_COUNT, dev);
    if (r == CU_OK)
        r = d->DeviceTotalMem(&out->total_mem, dev);
    if (r == CU_OK)
        r = d->DriverGetVersion(&out->driver_version);
    if (r != CU_OK)
        return kn_fail(err, KN_E_UNSUPPORTED, "cuda:%d: the driver cannot describe it: %s",
                       index, cu_drv_errstr(r, e, sizeof e));
    return KN_OK;
}

void cu_class_of(const struct cu_info *in, char *out, size_t cap)
{
    snprintf(out, cap, "cuda-sm%d%d", in->cc_major, in->cc_minor);
}

bool cu_ctx(struct cu_backend *cb, struct kn_err *err)
{
    CUresult r = cb->d->CtxSetCurrent(cb->ctx);
    if (r == CU_OK)
        return true;
    char e[160];
    kn_fail(err, KN_E_INTERNAL, "%s: cannot make its context current: %s", cb->name,
            cu_drv_errstr(r, e, sizeof e));
    return false;
}

/* ================================================================ memory */

static struct kern_buf *mem_new(struct kern_backend *be, size_t bytes, const struct kern_weight *w,
                                struct kn_err *err)
{
    struct cu_backend *cb = cu_be(be);
    if (!cu_ctx(cb, err))
        return NULL;
    struct cu_mem *m = kn_malloc(sizeof *m, err);
    struct kern_buf *b = m ? kn_malloc(sizeof *b, err) : NULL;
    if (!b) {
        free(m);
        return NULL;
    }
    m->bytes = bytes;
    CUresult r = cb->d->MemAlloc(&m->p, bytes ? bytes : 256);
    if (r != CU_OK) {
        char e[160];
        kn_fail(err, KN_E_NOMEM, "%s: cannot allocate %zu bytes of device memory: %s", cb->name,
                bytes, cu_drv_errstr(r, e, sizeof e));
        free(m);
        free(b);
        return NULL;
    }
    *b = (struct kern_buf){.be = be, .host = NULL, .dev = m, .bytes = bytes, .w = w};
    return b;
}

static void cu_free(struct kern_backend *be, struct kern_buf *b)
{
    struct cu_mem *m = b->dev;
    if (m) {
        struct kn_err err;
        if (cu_ctx(cu_be(be), &err))
            cu_be(be)->d->MemFree(m->p);
        free(m);
    }
    free(b);
}

static struct kern_buf *cu_alloc(struct kern_backend *be, size_t bytes, bool zero,
                                 struct kn_err *err)
{
    struct kern_buf *b = mem_new(be, bytes, NULL, err);
    if (b && zero) {
        CUresult r = cu_be(be)->d->MemsetD8(cu_ptr(b), 0, bytes);
        if (r != CU_OK) {
            char e[160];
            kn_fail(err, KN_E_INTERNAL, "%s: cannot clear %zu bytes: %s", cu_be(be)->name, bytes,
                    cu_drv_errstr(r, e, sizeof e));
            cu_free(be, b);
            return NULL;
        }
    }
    return b;
}

static struct kern_buf *upload_bytes(struct kern_backend *be, const void *host, size_t bytes,
                                     const struct kern_weight *w, struct kn_err *err)
{
    struct kern_buf *b = mem_new(be, bytes, w, err);
    if (!b || !bytes)
        return b;
    CUresult r = cu_be(be)->d->MemcpyHtoD(cu_ptr(b), host, bytes);
    if (r != CU_OK) {
        char e[160];
        kn_fail(err, KN_E_INTERNAL, "%s: cannot upload %zu bytes: %s", cu_be(be)->name, bytes,
                cu_drv_errstr(r, e, sizeof e));
        cu_free(be, b);
        return NULL;
    }
    return b;
}

static struct kern_buf *cu_upload(struct kern_backend *be, const float *host, int64_t n,
                                  struct kn_err *err)
{
    return upload_bytes(be, host, (size_t)n * sizeof(float), NULL, err);
}

/* Weights in the file's block layout (the kernels read it through kern_hd.h's offsets). */
static struct kern_buf *cu_upload_weight(struct kern_backend *be, const struct kern_weight *w,
                                         struct kn_err *err)
{
    return upload_bytes(be, w->data, (size_t)w->N * w->row_bytes, w, err);
}

/* The embedding stays in host memory (cu_internal.h): only its description is kept. */
static struct kern_buf *cu_upload_rows(struct kern_backend *be, const struct kern_weight *w,
                                       struct kn_err *err)
{
    if (!quant_can_dequantize(w->type)) {
        kn_fail(err, KN_E_UNSUPPORTED, "rows of type %s cannot be read", quant_type_name(w->type));
        return NULL;
    }
    struct kern_buf *b = kn_malloc(sizeof *b, err);
    if (b)
        *b = (struct kern_buf){.be = be, .bytes = (size_t)w->N * w->row_bytes, .w = w};
    return b;
}

/* ================================================================ streams */

void cu_fail(struct cu_stream *s, enum kn_status st, const char *fmt, ...)
{
    if (s->err.status != KN_OK)
        return;
    va_list ap;
    va_start(ap, fmt);
    kn_vfail(&s->err, st, fmt, ap);
    va_end(ap);
}

bool cu_check(struct cu_stream *s, CUresult r, const char *what)
{
    if (r == CU_OK)
        return true;
    char e[160];
    cu_fail(s, KN_E_INTERNAL, "%s: %s", what, cu_drv_errstr(r, e, sizeof e));
    return false;
}

static const char *const kernel_names[CUK_COUNT] = {
#define CUK_NAME(n) "cuk_" #n,
    CUK_KERNELS(CUK_NAME)
#undef CUK_NAME
};

const char *cu_kernel_name(enum cuk_kernel k)
{
    return k >= 0 && k < CUK_COUNT ? kernel_names[k] : "?";
}

void cu_launch(struct cu_stream *s, enum cuk_kernel k, uint64_t gx, uint64_t gy, unsigned bx,
               unsigned by, void **params)
{
    if (s->err.status != KN_OK || gx == 0 || gy == 0)
        return;
    if (gx > 0x7fffffffu || gy > 65535u) {
        cu_fail(s, KN_E_LIMIT, "%s: a grid of %llu x %llu blocks is over the device's limits",
                kernel_names[k], (unsigned long long)gx, (unsigned long long)gy);
        return;
    }
    CUresult r = s->cb->d->LaunchKernel(s->cb->fn[k], (unsigned)gx, (unsigned)gy, 1, bx, by, 1, 0,
                                        s->st, params, NULL);
    cu_check(s, r, kernel_names[k]);
}

CUdeviceptr cu_scratch(struct cu_stream *s, enum cu_slot slot, size_t bytes)
{
    struct cu_mem *m = &s->scratch[slot];
    if (s->err.status != KN_OK)
        return 0;
    if (m->p && m->bytes >= bytes)
        return m->p;
    const struct cu_drv *d = s->cb->d;
    /* the old buffer may still be read by launched kernels: drain the stream first */
    if (m->p) {
        if (!cu_check(s, d->StreamSynchronize(s->st), "cuStreamSynchronize"))
            return 0;
        d->MemFree(m->p);
        m->p = 0;
        m->bytes = 0;
    }
    size_t want = bytes < 4096 ? 4096 : bytes + bytes / 4;
    if (!cu_check(s, d->MemAlloc(&m->p, want), "cuMemAlloc (scratch)")) {
        m->p = 0;
        return 0;
    }
    m->bytes = want;
    return m->p;
}

void *cu_host(struct cu_stream *s, size_t bytes)
{
    if (s->err.status != KN_OK)
        return NULL;
    if (s->host_bytes >= bytes)
        return s->host;
    void *p = realloc(s->host, bytes);
    if (!p) {
        cu_fail(s, KN_E_NOMEM, "out of memory staging %zu bytes for the device", bytes);
        return NULL;
    }
    s->host = p;
    s->host_bytes = bytes;
    return p;
}

/* From pageable memory the driver copies src to its own staging before it returns, so
 * the caller's array may change as soon as this returns; the copy runs in stream order. */
CUdeviceptr cu_stage(struct cu_stream *s, enum cu_slot slot, const void *src, size_t n)
{
    CUdeviceptr p = cu_scratch(s, slot, n);
    if (p && n && !cu_check(s, s->cb->d->MemcpyHtoDAsync(p, src, n, s->st), "cuMemcpyHtoDAsync"))
        return 0;
    return p;
}

static void cu_stream_free(struct kern_stream *ks)
{
    struct cu_stream *s = cu_st(ks);
    if (!s)
        return;
    struct kn_err err;
    if (cu_ctx(s->cb, &err)) {
        if (s->st)
            s->cb->d->StreamSynchronize(s->st);
        for (int i = 0; i < CU_SLOTS; i++)
            if (s->scratch[i].p)
                s->cb->d->MemFree(s->scratch[i].p);
        if (s->st)
            s->cb->d->StreamDestroy(s->st);
    }
    if (s->cpu)
        s->cpu->ops->stream_free(s->cpu);
    free(s->host);
    free(s);
}

static struct kern_stream *cu_stream_create(struct kern_backend *be,
                                            const struct kern_stream_shape *shape,
                                            struct kern_pool *pool, struct kn_err *err)
{
    struct cu_backend *cb = cu_be(be);
    if (!cu_ctx(cb, err))
        return NULL;
    struct cu_stream *s = kn_calloc(1, sizeof *s, err);
    if (!s)
        return NULL;
    s->base = (struct kern_stream){be, be->ops};
    s->cb = cb;
    s->shape = *shape;
    CUresult r = cb->d->StreamCreate(&s->st, 0);
    if (r != CU_OK) {
        char e[160];
        kn_fail(err, KN_E_INTERNAL, "%s: cannot create a stream: %s", cb->name,
                cu_drv_errstr(r, e, sizeof e));
        free(s);
        return NULL;
    }
    struct kern_backend *cpu = kern_backend_cpu();
    s->cpu = cpu->ops->stream_create(cpu, shape, pool, err);
    if (!s->cpu) {
        cu_stream_free(&s->base);
        return NULL;
    }
    return &s->base;
}

static void cu_begin(struct kern_stream *ks)
{
    struct cu_stream *s = cu_st(ks);
    s->err = (struct kn_err){0};
    cu_ctx(s->cb, &s->err);
}

static enum kn_status cu_end(struct kern_stream *ks, struct kn_err *err)
{
    struct cu_stream *s = cu_st(ks);
    CUresult r = s->cb->d->StreamSynchronize(s->st);
    if (s->err.status == KN_OK)
        cu_check(s, r, "the pass (cuStreamSynchronize)");
    if (s->err.status == KN_OK)
        return KN_OK;
    if (err)
        *err = s->err;
    kn_err_prefix(err, s->cb->name);
    return s->err.status;
}

/* The residual stream's hand-over between backends (--gpu-layers) and Warm Start's
 * cache records. To pageable memory the copy returns when it is done. */
static void cu_to_host(struct kern_stream *ks, const struct kern_buf *b, size_t off, void *dst,
                       size_t bytes)
{
    struct cu_stream *s = cu_st(ks);
    if (s->err.status == KN_OK && bytes)
        cu_check(s, s->cb->d->MemcpyDtoHAsync(dst, cu_ptr(b) + off, bytes, s->st),
                 "cuMemcpyDtoHAsync");
}

static void cu_from_host(struct kern_stream *ks, struct kern_buf *b, size_t off, const void *src,
                         size_t bytes)
{
    struct cu_stream *s = cu_st(ks);
    if (s->err.status == KN_OK && bytes)
        cu_check(s, s->cb->d->MemcpyHtoDAsync(cu_ptr(b) + off, src, bytes, s->st),
                 "cuMemcpyHtoDAsync");
}

/* ================================================================ the device */

static const char *cu_numerics(const struct kern_backend *be)
{
    return cu_be(be)->numerics;
}

void cu_backend_ops_fill(struct kern_backend_ops *ops)
{
    *ops = (struct kern_backend_ops){
        .numerics = cu_numerics,
        .alloc = cu_alloc,
        .upload = cu_upload,
        .upload_weight = cu_upload_weight,
        .upload_rows = cu_upload_rows,
        .free = cu_free,
        .stream_create = cu_stream_create,
        .stream_free = cu_stream_free,
        .begin = cu_begin,
        .end = cu_end,
        .to_host = cu_to_host,
        .from_host = cu_from_host,
    };
    cu_ops_fill(ops);
}

static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
#define CU_MAX_DEVICES 16
static struct cu_backend *opened[CU_MAX_DEVICES];

static void backend_free(struct cu_backend *cb)
{
    if (cb->mod)
        cb->d->ModuleUnload(cb->mod);
    if (cb->ctx)
        cb->d->PrimaryCtxRelease(cb->dev);
    free(cb);
}

/* The device's context and the kernels, JIT-compiled from the embedded PTX. */
static enum kn_status backend_init(struct cu_backend *cb, int index, struct kn_err *err)
{
    const struct cu_drv *d = cb->d;
    char e[160];
    CUresult r = d->DeviceGet(&cb->dev, index);
    if (r == CU_OK)
        r = d->PrimaryCtxRetain(&cb->ctx, cb->dev);
    if (r != CU_OK) {
        cb->ctx = NULL;
        return kn_fail(err, KN_E_UNSUPPORTED, "cuda:%d: cannot open a context: %s", index,
                       cu_drv_errstr(r, e, sizeof e));
    }
    if (!cu_ctx(cb, err))
        return err->status;
    static char log[4096];
    int opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[2] = {log, (void *)(uintptr_t)sizeof log};
    log[0] = 0;
    kn_progress_stage("cuda:%d: compiling the kernels", index);
    r = d->ModuleLoadDataEx(&cb->mod, cuk_ptx, 2, opts, vals);
    if (r != CU_OK) {
        cb->mod = NULL;
        return kn_fail(err, KN_E_UNSUPPORTED, "cuda:%d: the driver refused the kernels (PTX "
                       "for compute_75 or later; a driver older than the toolkit?): %s %.400s",
                       index, cu_drv_errstr(r, e, sizeof e), log);
    }
    for (int k = 0; k < CUK_COUNT; k++) {
        r = d->ModuleGetFunction(&cb->fn[k], cb->mod, kernel_names[k]);
        if (r != CU_OK)
            return kn_fail(err, KN_E_INTERNAL, "cuda:%d: the PTX has no kernel %s: %s", index,
                           kernel_names[k], cu_drv_errstr(r, e, sizeof e));
    }
    return KN_OK;
}

/* The quantized products' path from KN_CUDA_MM (unset or "auto": by M; "decode" or
 * "tiled": that one for every M, as scripts/gpu_check.sh runs the CUDA tests). The bits
 * are the same on every path. */
static const char *const mm_path_names[CU_MM_PATHS] = {"auto", "decode", "tiled"};

const char *cu_mm_path_name(enum cu_mm_path p)
{
    return p >= 0 && p < CU_MM_PATHS ? mm_path_names[p] : "?";
}

static enum kn_status mm_path_env(enum cu_mm_path *path, struct kn_err *err)
{
    const char *v = getenv("KN_CUDA_MM");
    for (int i = 0; i < CU_MM_PATHS; i++)
        if (!v || strcmp(v, mm_path_names[i]) == 0) {
            *path = v ? (enum cu_mm_path)i : CU_MM_AUTO;
            return KN_OK;
        }
    return kn_fail(err, KN_E_ARG, "KN_CUDA_MM=%s: the CUDA products' path is auto, decode or "
                   "tiled", v);
}

struct kern_backend *cu_backend_open(int index, struct kn_err *err)
{
    enum cu_mm_path mm_path = CU_MM_AUTO;
    if (mm_path_env(&mm_path, err) != KN_OK)
        return NULL;
    struct cu_info in;
    if (cu_describe(index, &in, err) != KN_OK)
        return NULL;
    if (index >= CU_MAX_DEVICES) {
        kn_fail(err, KN_E_LIMIT, "cuda:%d: at most %d CUDA devices are supported", index,
                CU_MAX_DEVICES);
        return NULL;
    }
    pthread_mutex_lock(&open_lock);
    struct cu_backend *cb = opened[index];
    if (cb) {
        cb->refs++;
        pthread_mutex_unlock(&open_lock);
        return &cb->base;
    }
    cb = kn_calloc(1, sizeof *cb, err);
    if (!cb || cu_drv_load(&cb->d, err) != KN_OK) {
        free(cb);
        pthread_mutex_unlock(&open_lock);
        return NULL;
    }
    cb->index = index;
    cb->refs = 1;
    cb->mm_path = mm_path;
    cb->info = in;
    snprintf(cb->name, sizeof cb->name, "cuda:%d", index);
    cu_class_of(&in, cb->cls, sizeof cb->cls);
    if (backend_init(cb, index, err) != KN_OK) {
        backend_free(cb);
        pthread_mutex_unlock(&open_lock);
        return NULL;
    }
    cu_backend_ops_fill(&cb->ops);
    cb->base = (struct kern_backend){.ops = &cb->ops, .name = cb->name};
    /* The self-test decides the numerics: canonical-1, or bits promised only for this
     * GPU and driver. */
    cu_selftest_run(cb, &cb->selftest);
    if (cb->selftest.canonical)
        snprintf(cb->numerics, sizeof cb->numerics, "%s", KN_NUMERICS);
    else
        snprintf(cb->numerics, sizeof cb->numerics, "%s-driver-%d", cb->cls,
                 in.driver_version);
    opened[index] = cb;
    pthread_mutex_unlock(&open_lock);
    return &cb->base;
}

void cu_backend_close(struct kern_backend *be)
{
    if (!be)
        return;
    struct cu_backend *cb = cu_be(be);
    pthread_mutex_lock(&open_lock);
    if (--cb->refs == 0) {
        opened[cb->index] = NULL;
        backend_free(cb);
    }
    pthread_mutex_unlock(&open_lock);
}

bool cu_backend_is(const struct kern_backend *be)
{
    return be && be->ops && be->ops->numerics == cu_numerics;
}

const struct cu_selftest *cu_backend_selftest(const struct kern_backend *be)
{
    return &cu_be(be)->selftest;
}

const char *cu_backend_class(const struct kern_backend *be)
{
    return cu_be(be)->cls;
}

const struct cu_info *cu_backend_info(const struct kern_backend *be)
{
    return &cu_be(be)->info;
}
