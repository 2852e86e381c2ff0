/* cu_drv.c: loads the CUDA driver at run time (cu_drv.h). */
#include "cu_drv.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct cu_drv drv;
static enum kn_status drv_status = KN_OK;
static char drv_msg[512];
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

const char *cu_drv_errstr(CUresult r, char *buf, size_t cap)
{
    const char *name = NULL, *str = NULL;
    if (drv.GetErrorName)
        drv.GetErrorName(r, &name);
    if (drv.GetErrorString)
        drv.GetErrorString(r, &str);
    snprintf(buf, cap, "%s (%s)", name ? name : "CUDA error", str ? str : "no description");
    if (!name)
        snprintf(buf, cap, "CUDA error %d", r);
    return buf;
}

static void drv_load(void)
{
    const char *path = getenv("KN_CUDA_DRIVER");
    if (!path || !*path)
        path = "libcuda.so.1";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        drv_status = KN_E_UNSUPPORTED;
        snprintf(drv_msg, sizeof drv_msg, "no CUDA device present: the NVIDIA driver library "
                 "could not be loaded (%.400s)", e ? e : path);
        return;
    }
    struct {
        void **slot;
        const char *name;
    } syms[] = {
        {(void **)&drv.Init, "cuInit"},
        {(void **)&drv.DriverGetVersion, "cuDriverGetVersion"},
        {(void **)&drv.DeviceGetCount, "cuDeviceGetCount"},
        {(void **)&drv.DeviceGet, "cuDeviceGet"},
        {(void **)&drv.DeviceGetName, "cuDeviceGetName"},
        {(void **)&drv.DeviceGetAttribute, "cuDeviceGetAttribute"},
        {(void **)&drv.DeviceTotalMem, "cuDeviceTotalMem_v2"},
        {(void **)&drv.PrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
        {(void **)&drv.PrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"},
        {(void **)&drv.CtxSetCurrent, "cuCtxSetCurrent"},
        {(void **)&drv.ModuleLoadDataEx, "cuModuleLoadDataEx"},
        {(void **)&drv.ModuleUnload, "cuModuleUnload"},
        {(void **)&drv.ModuleGetFunction, "cuModuleGetFunction"},
        {(void **)&drv.MemAlloc, "cuMemAlloc_v2"},
        {(void **)&drv.MemFree, "cuMemFree_v2"},
        {(void **)&drv.MemcpyHtoD, "cuMemcpyHtoD_v2"},
        {(void **)&drv.MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
        {(void **)&drv.MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
        {(void **)&drv.MemsetD8, "cuMemsetD8_v2"},
        {(void **)&drv.LaunchKernel, "cuLaunchKernel"},
        {(void **)&drv.StreamCreate, "cuStreamCreate"},
        {(void **)&drv.StreamDestroy, "cuStreamDestroy_v2"},
        {(void **)&drv.StreamSynchronize, "cuStreamSynchronize"},
        {(void **)&drv.GetErrorName, "cuGetErrorName"},
        {(void **)&drv.GetErrorString, "cuGetErrorString"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (!*syms[i].slot) {
            drv_status = KN_E_UNSUPPORTED;
            snprintf(drv_msg, sizeof drv_msg, "the CUDA driver %s has no %s (a driver older "
                     "than CUDA 11?)", path, syms[i].name);
            memset(&drv, 0, sizeof drv);
            return;
        }
    }
    CUresult r = drv.Init(0);
    if (r != CU_OK) {
        char e[160];
        drv_status = KN_E_UNSUPPORTED;
        if (r == CU_ERROR_NO_DEVICE)
            snprintf(drv_msg, sizeof drv_msg, "no CUDA device present (the NVIDIA driver "
                     "is installed but cuInit found no GPU)");
        else
            snprintf(drv_msg, sizeof drv_msg, "no CUDA device usable: cuInit failed: %s",
                     cu_drv_errstr(r, e, sizeof e));
    }
}

enum kn_status cu_drv_load(const struct cu_drv **out, struct kn_err *err)
{
    pthread_once(&drv_once, drv_load);
    if (drv_status != KN_OK)
        return kn_fail(err, drv_status, "%s", drv_msg);
    *out = &drv;
    return KN_OK;
}
