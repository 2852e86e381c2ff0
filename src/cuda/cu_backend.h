/* cu_backend.h: the CUDA backend, the public face of src/cuda: an open CUDA device as a
 * struct kern_backend (src/kernels/backend.h), and what the device registry shows of the
 * devices. The driver is loaded at run time (cu_drv.h); a build without nvcc has no
 * kernels and every open says so. */
#ifndef KN_CUDA_CU_BACKEND_H
#define KN_CUDA_CU_BACKEND_H

#include "../kernels/backend.h"
#include "../kernels/fprobe.h"

/* A CUDA device as the driver describes it. */
struct cu_info {
    char name[256];          /* "NVIDIA GeForce RTX 3060 Laptop GPU" */
    int cc_major, cc_minor;  /* compute capability: 8, 6 */
    int sm_count;
    size_t total_mem;
    int driver_version;      /* cuDriverGetVersion: 12040 = 12.4 */
};

/* What the start-up self-test found (cu_selftest.c, docs/numerics.md "Devices"). */
struct cu_selftest {
    bool canonical;        /* everything below holds: the device computes canonical-1 */
    bool probed;           /* the arithmetic probes ran */
    struct kern_fprobe probe; /* what they found (fprobe.h) */
    bool ops_equal;        /* kern_backend_check: every op gives the CPU's bytes */
    double seconds;
    char report[1024];     /* each finding, and the failed check named */
};

/* Whether this build has the CUDA kernels (it was built with nvcc). */
bool cu_built(void);
/* The CUDA devices present: 0 with err saying why when there is none (no driver, no
 * device, no kernels in this build). */
int cu_device_count(struct kn_err *err);
KN_MUST_USE enum kn_status cu_describe(int index, struct cu_info *out, struct kn_err *err);
/* The receipt's device class of a device: "cuda-sm<major><minor>", e.g. cuda-sm86. */
void cu_class_of(const struct cu_info *in, char *out, size_t cap);

/* Opens CUDA device index as a backend (name "cuda:<index>"), running the self-test at
 * the first open in the process; each open is paired with a cu_backend_close. NULL with
 * err set on failure ("this build has no CUDA backend", "no CUDA device present", no
 * such device, the driver refused the kernels). */
struct kern_backend *cu_backend_open(int index, struct kn_err *err);
void cu_backend_close(struct kern_backend *be);
const struct cu_selftest *cu_backend_selftest(const struct kern_backend *be);
const char *cu_backend_class(const struct kern_backend *be);
const struct cu_info *cu_backend_info(const struct kern_backend *be);
bool cu_backend_is(const struct kern_backend *be);

#endif
