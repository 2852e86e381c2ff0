/* cu_drv.h: the CUDA driver API, loaded at run time (dlopen of libcuda.so.1), so the
 * binary links against no CUDA library and runs on machines without one. Only the few
 * entry points the backend uses are declared here, with the driver's own ABI (cuda.h):
 * a build needs no CUDA headers. The environment variable KN_CUDA_DRIVER names another
 * library file (tests use a path that does not exist to see the "no driver" message). */
#ifndef KN_CUDA_CU_DRV_H
#define KN_CUDA_CU_DRV_H

#include "../base/base.h"

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;           /* 0: CUDA_SUCCESS */
typedef int CUdevice;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;

#define CU_OK 0
#define CU_ERROR_NO_DEVICE 100
#define CU_ATTR_CC_MAJOR 75    /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
#define CU_ATTR_CC_MINOR 76
#define CU_ATTR_SM_COUNT 16    /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */
#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6

/* The driver's entry points (NULL until cu_drv_load succeeds). */
struct cu_drv {
    CUresult (*Init)(unsigned flags);
    CUresult (*DriverGetVersion)(int *v);
    CUresult (*DeviceGetCount)(int *n);
    CUresult (*DeviceGet)(CUdevice *d, int ordinal);
    CUresult (*DeviceGetName)(char *name, int len, CUdevice d);
    CUresult (*DeviceGetAttribute)(int *v, int attr, CUdevice d);
    CUresult (*DeviceTotalMem)(size_t *bytes, CUdevice d);
    CUresult (*PrimaryCtxRetain)(CUcontext *c, CUdevice d);
    CUresult (*PrimaryCtxRelease)(CUdevice d);
    CUresult (*CtxSetCurrent)(CUcontext c);
    CUresult (*ModuleLoadDataEx)(CUmodule *m, const void *image, unsigned n, int *opts, void **vals);
    CUresult (*ModuleUnload)(CUmodule m);
    CUresult (*ModuleGetFunction)(CUfunction *f, CUmodule m, const char *name);
    CUresult (*MemAlloc)(CUdeviceptr *p, size_t bytes);
    CUresult (*MemFree)(CUdeviceptr p);
    CUresult (*MemcpyHtoD)(CUdeviceptr dst, const void *src, size_t bytes);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
    CUresult (*MemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t bytes, CUstream s);
    CUresult (*MemsetD8)(CUdeviceptr p, unsigned char v, size_t n);
    CUresult (*LaunchKernel)(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                             void **extra);
    CUresult (*StreamCreate)(CUstream *s, unsigned flags);
    CUresult (*StreamDestroy)(CUstream s);
    CUresult (*StreamSynchronize)(CUstream s);
    CUresult (*GetErrorName)(CUresult r, const char **name);
    CUresult (*GetErrorString)(CUresult r, const char **str);
};

/* Loads the driver and runs cuInit once per process; later calls return the first
 * outcome. Fails with KN_E_UNSUPPORTED: "no CUDA driver (libcuda.so.1: <dlerror>)", a
 * missing entry point, or cuInit's error ("no CUDA device present" for
 * CUDA_ERROR_NO_DEVICE). */
KN_MUST_USE enum kn_status cu_drv_load(const struct cu_drv **out, struct kn_err *err);
/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for r, written to buf. */
const char *cu_drv_errstr(CUresult r, char *buf, size_t cap);

#endif
