/* device.h: the device registry: the devices this build can run on, as the user names
 * them (--device cpu | vulkan[:N] | cuda[:N]), opened as backends of the device seam
 * (kernels/backend.h) with what a receipt records of them. `kinetic devices` lists them,
 * `kinetic --version` names the backends built in. */
#ifndef KN_DEVICE_DEVICE_H
#define KN_DEVICE_DEVICE_H

#include "../base/progress.h"
#include "../kernels/backend.h"

#include <stdio.h>

/* The --device values, for help texts. */
#define DEVICE_HELP "cpu, vulkan or vulkan:N, cuda or cuda:N (kinetic devices lists them)"

/* An open device. */
struct device {
    char spec[32];            /* as the registry names it: "cpu", "vulkan:0", "cuda:0" */
    struct kern_backend *be;  /* NULL for the CPU: the model runs on kern_backend_cpu() */
    char cls[128];            /* the receipt's device.class: cpu-x86_64-avx2, vulkan-<gpu>,
                               * cuda-smXY */
    char name[256];           /* the receipt's device.name: the CPU's or GPU's model name */
    const char *numerics;     /* the numerics class it computes: KN_NUMERICS, or the
                                 device's own (its self-test failed: see report) */
    char report[2048];        /* the self-test's findings ("" for the CPU) */
};

/* Whether spec is a device name the registry knows the form of (cpu, vulkan[:N], cuda[:N]). */
bool device_spec_valid(const char *spec);
/* Opens spec ("cpu", "vulkan" = "vulkan:0", "vulkan:N", "cuda" = "cuda:0", "cuda:N"); a
 * GPU runs its start-up self-test here. Errors say why: an unknown name (with the list),
 * no Vulkan or CUDA in this build (what to install), no driver, no such device. */
KN_MUST_USE enum kn_status device_open(const char *spec, struct device *out, struct kn_err *err);
void device_close(struct device *d);
/* The registry's name ("cpu", "vulkan:N", "cuda:N") of a device of class cls (a receipt's
 * device.class) on this machine, written to spec; false when there is none or cls is no
 * class (a CPU class of this build is "cpu": its ISA is chosen separately). */
bool device_find_class(const char *cls, char *spec, size_t cap);
/* Whether d runs layers off the CPU. */
static inline bool device_is_gpu(const struct device *d)
{
    return d->be != NULL;
}

/* The CPU's model name (/proc/cpuinfo), "unknown CPU" if not found. */
void device_cpu_name(char *out, size_t cap);
/* The backends this build has, e.g. "cpu vulkan" (for --version). */
const char *device_backends_built(void);
/* Prints every device (kinetic devices): name, driver, memory, the numerics class it
 * meets and, where it does not meet canonical-1, why. With selftest false the Vulkan
 * devices are described without running their self-test. Before each self-test a notice,
 * then its steps as progress, go to standard error (progress: their mode; with
 * KN_PROGRESS_OFF neither). Returns 0, or 1 when a device could not be listed (the
 * reason printed). */
int device_list(FILE *out, bool selftest, enum kn_progress_mode progress);

#endif
