/* vk_backend.h: the Vulkan backend, the public face of src/vulkan: an open Vulkan device
 * as a struct kern_backend (src/kernels/backend.h), and what the device registry shows of
 * the devices. In a build without Vulkan every open fails saying what to install. */
#ifndef KN_VULKAN_VK_BACKEND_H
#define KN_VULKAN_VK_BACKEND_H

#include "../kernels/backend.h"
#include "../kernels/fprobe.h"
#include "vk_rt.h"

/* What the start-up self-test found (vk_selftest.c, docs/numerics.md "Devices"). */
struct vk_selftest {
    bool canonical;        /* everything below holds: the device computes canonical-1 */
    /* The driver's arithmetic (fprobe.h); its / and sqrt count as correctly rounded only
     * when the hard cases (vkk_divsqrt_probe) are too. A driver fma that is not fused the
     * shaders work around. */
    struct kern_fprobe probe;
    bool div_soft, sqrt_soft; /* else the shaders use kn_common.glsl's integer builds */
    bool divsqrt_ok;       /* the shaders' division and sqrt (either way) are correctly rounded */
    bool dfma_soft;        /* the driver's double fma is not fused: kern_tanhf's is the integer build */
    bool ops_equal;        /* kern_backend_check: every op gives the CPU's bytes */
    bool recorded;         /* ops_equal is the verdict cache's record (vk_verdict.c), not a
                            * check run by this start */
    double seconds;
    char report[2048];     /* each finding, and the failed check named */
};

/* The setting of the device verdict cache: a folder, or "off" (default
 * kn_cache_dir()/devices). */
#define VK_VERDICT_ENV "KINETIC_DEVICE_CACHE"
/* The length of the ops check's report text (vk_selftest.report quotes it). */
#define VK_VERDICT_OPS_LEN 1024

/* Whether an open runs the self-test's ops check or may take its recorded verdict. */
enum vk_check {
    VK_CHECK_RECORDED, /* the record of this build, device and probe results, if valid */
    VK_CHECK_FULL,     /* run the check (and refresh the record): `kinetic devices` */
};

/* Opens Vulkan device index as a backend (name "vulkan:<index>"); check says how its
 * first open decides the numerics. A device is opened once per process; each open is
 * paired with a vk_backend_close. NULL with err set on failure (no Vulkan in this build,
 * no such device, the driver refused). */
struct kern_backend *vk_backend_open(int index, enum vk_check check, struct kn_err *err);
void vk_backend_close(struct kern_backend *be);
/* The self-test's findings (run once per device, at its first open). */
const struct vk_selftest *vk_backend_selftest(const struct kern_backend *be);
/* The receipt's device class of be: "vulkan-<gpu>", e.g. vulkan-llvmpipe-llvm-15.0.6-256-bits. */
const char *vk_backend_class(const struct kern_backend *be);
/* Writes the device class of a device described by in ("vulkan-<gpu>") to out. */
void vk_class_of(const struct vkr_info *in, char *out, size_t cap);
/* Whether be is a Vulkan backend. */
bool vk_backend_is(const struct kern_backend *be);
/* The device behind a Vulkan backend. */
const struct vkr_info *vk_backend_info(const struct kern_backend *be);

#endif
