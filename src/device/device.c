/* device.c: the device registry (device.h). */
#include "device.h"
#include "../base/progress.h"
#include "../kernels/isa.h"
#include "../cuda/cu_backend.h"
#include "../vulkan/vk_backend.h"

#include <stdlib.h>
#include <string.h>

void device_cpu_name(char *out, size_t cap)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    snprintf(out, cap, "unknown CPU");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0)
            continue;
        char *v = strchr(line, ':');
        if (!v)
            break;
        v++;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t n = strcspn(v, "\n");
        while (n && v[n - 1] == ' ')
            n--;
        v[n] = 0;
        snprintf(out, cap, "%s", v);
        break;
    }
    if (f)
        fclose(f);
}

const char *device_backends_built(void)
{
    if (vkr_built())
        return cu_built() ? "cpu vulkan cuda" : "cpu vulkan";
    return cu_built() ? "cpu cuda" : "cpu";
}

/* "<kind>" or "<kind>:N" -> N (0 for the bare name); -1 when spec is not one. */
static int spec_index(const char *spec, const char *kind)
{
    size_t k = strlen(kind);
    if (strcmp(spec, kind) == 0)
        return 0;
    if (strncmp(spec, kind, k) != 0 || spec[k] != ':')
        return -1;
    const char *p = spec + k + 1;
    if (*p < '0' || *p > '9' || strlen(p) > 3)
        return -1;
    char *end;
    long n = strtol(p, &end, 10);
    return *end ? -1 : (int)n;
}

bool device_spec_valid(const char *spec)
{
    return strcmp(spec, "cpu") == 0 || spec_index(spec, "vulkan") >= 0 ||
           spec_index(spec, "cuda") >= 0;
}

/* A CUDA device: opened (its self-test runs at the first open) and described. */
static enum kn_status open_cuda(int index, struct device *out, struct kn_err *err)
{
    struct kern_backend *be = cu_backend_open(index, err);
    if (!be) {
        kn_err_prefix(err, "--device cuda");
        return err ? err->status : KN_E_UNSUPPORTED;
    }
    snprintf(out->spec, sizeof out->spec, "cuda:%d", index);
    out->be = be;
    snprintf(out->cls, sizeof out->cls, "%s", cu_backend_class(be));
    snprintf(out->name, sizeof out->name, "%s", cu_backend_info(be)->name);
    out->numerics = be->ops->numerics(be);
    snprintf(out->report, sizeof out->report, "%s", cu_backend_selftest(be)->report);
    return KN_OK;
}

enum kn_status device_open(const char *spec, struct device *out, struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    if (strcmp(spec, "cpu") == 0) {
        snprintf(out->spec, sizeof out->spec, "cpu");
        snprintf(out->cls, sizeof out->cls, "%s", kern_device_class(kn_isa_active()));
        device_cpu_name(out->name, sizeof out->name);
        out->numerics = KN_NUMERICS;
        return KN_OK;
    }
    int ci = spec_index(spec, "cuda");
    if (ci >= 0)
        return open_cuda(ci, out, err);
    int vi = spec_index(spec, "vulkan");
    if (vi < 0)
        return kn_fail(err, KN_E_ARG, "unknown --device '%s' (%s)", spec, DEVICE_HELP);
    struct kern_backend *be = vk_backend_open(vi, VK_CHECK_RECORDED, err);
    if (!be) {
        kn_err_prefix(err, "--device vulkan");
        return err ? err->status : KN_E_UNSUPPORTED;
    }
    const struct vk_selftest *t = vk_backend_selftest(be);
    snprintf(out->spec, sizeof out->spec, "vulkan:%d", vi);
    out->be = be;
    snprintf(out->cls, sizeof out->cls, "%s", vk_backend_class(be));
    snprintf(out->name, sizeof out->name, "%s", vk_backend_info(be)->name);
    out->numerics = be->ops->numerics(be);
    snprintf(out->report, sizeof out->report, "%s", t->report);
    return KN_OK;
}

bool device_find_class(const char *cls, char *spec, size_t cap)
{
    for (int i = 0; i < KN_ISA_COUNT; i++)
        if (strcmp(cls, kern_device_class((enum kn_isa)i)) == 0) {
            snprintf(spec, cap, "cpu");
            return true;
        }
    struct kn_err err = {0};
    int nc = strncmp(cls, "cuda-", 5) == 0 ? cu_device_count(&err) : 0;
    for (int i = 0; i < nc; i++) {
        struct cu_info in;
        char c[64];
        if (cu_describe(i, &in, &err) != KN_OK)
            continue;
        cu_class_of(&in, c, sizeof c);
        if (strcmp(c, cls) == 0) {
            snprintf(spec, cap, "cuda:%d", i);
            return true;
        }
    }
    int n = strncmp(cls, "vulkan-", 7) == 0 && vkr_built() ? vkr_device_count(&err) : 0;
    for (int i = 0; i < n; i++) {
        struct vkr_info in;
        char c[128];
        if (vkr_describe(i, &in, &err) != KN_OK)
            continue;
        vk_class_of(&in, c, sizeof c);
        if (strcmp(c, cls) == 0) {
            snprintf(spec, cap, "vulkan:%d", i);
            return true;
        }
    }
    return false;
}

void device_close(struct device *d)
{
    if (cu_backend_is(d->be))
        cu_backend_close(d->be);
    else if (d->be)
        vk_backend_close(d->be);
    d->be = NULL;
}

/* Around a self-test that device_list runs: the notice before it (the results so far
 * flushed first, so a terminal shows them in order), then the test's steps as the
 * progress of spec (kn_progress_stage reaches it from inside the backend's open). */
static void selftest_begin(struct kn_progress *p, enum kn_progress_mode mode, FILE *out,
                           const char *spec)
{
    fflush(out);
    char what[64];
    snprintf(what, sizeof what, "%s self-test", spec);
    kn_progress_begin(p, mode, stderr, what, NULL, 0);
    kn_progress_note(p, "kinetic devices: running %s's self-test, every op against the CPU "
                        "(seconds; --no-selftest skips it)", spec);
    kn_progress_attach(p);
}

static void selftest_end(struct kn_progress *p)
{
    kn_progress_attach(NULL);
    kn_progress_end(p);
}

static void print_bytes(FILE *out, uint64_t b)
{
    if (b >= (1ull << 30))
        fprintf(out, "%.1f GiB", (double)b / (1ull << 30));
    else
        fprintf(out, "%.0f MiB", (double)b / (1ull << 20));
}

/* The CUDA devices of device_list. */
static int list_cuda(FILE *out, bool selftest, enum kn_progress_mode progress)
{
    struct kn_err err = {0};
    int n = cu_device_count(&err);
    if (n == 0) {
        fprintf(out, "cuda       %s\n", err.msg);
        return 0;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        struct cu_info in;
        if (cu_describe(i, &in, &err) != KN_OK) {
            fprintf(out, "cuda:%-5d %s\n", i, err.msg);
            rc = 1;
            continue;
        }
        char cls[64];
        cu_class_of(&in, cls, sizeof cls);
        fprintf(out, "cuda:%-5d %s (compute capability %d.%d, %d SMs)\n", i, in.name,
                in.cc_major, in.cc_minor, in.sm_count);
        fprintf(out, "           driver CUDA %d.%d; ", in.driver_version / 1000,
                in.driver_version % 1000 / 10);
        print_bytes(out, in.total_mem);
        fprintf(out, "\n");
        if (!selftest) {
            fprintf(out, "           class %s\n", cls);
            continue;
        }
        struct kn_progress prog;
        char spec[32];
        snprintf(spec, sizeof spec, "cuda:%d", i);
        selftest_begin(&prog, progress, out, spec);
        struct kern_backend *be = cu_backend_open(i, &err);
        selftest_end(&prog);
        if (!be) {
            fprintf(out, "           cannot open: %s\n", err.msg);
            rc = 1;
            continue;
        }
        const struct cu_selftest *t = cu_backend_selftest(be);
        fprintf(out, "           class %s, numerics %s%s\n", cls, be->ops->numerics(be),
                t->canonical ? " (self-test passed: a receipt made here verifies on a CPU)"
                             : " (self-test failed: bits promised only for this driver)");
        fprintf(out, "           self-test: %s\n", t->report);
        cu_backend_close(be);
    }
    return rc;
}

/* The Vulkan devices of device_list. */
static int list_vulkan(FILE *out, bool selftest, enum kn_progress_mode progress)
{
    if (!vkr_built()) {
        fprintf(out, "vulkan     not in this build (install libvulkan-dev and glslc, see "
                     "scripts/deps.sh)\n");
        return 0;
    }
    struct kn_err err = {0};
    int n = vkr_device_count(&err);
    if (n == 0) {
        fprintf(out, "vulkan     no device: %s\n", err.msg);
        return 0;
    }
    int rc = 0;
    for (int i = 0; i < n; i++) {
        struct vkr_info in;
        if (vkr_describe(i, &in, &err) != KN_OK) {
            fprintf(out, "vulkan:%-3d %s\n", i, err.msg);
            rc = 1;
            continue;
        }
        fprintf(out, "vulkan:%-3d %s (%s)\n", i, in.name, in.type);
        fprintf(out, "           driver %s, %s; Vulkan %u.%u; ", in.driver, in.driver_info,
                in.api_version >> 22, (in.api_version >> 12) & 0x3ff);
        print_bytes(out, in.device_local_bytes);
        fprintf(out, "; int8 dot: %s\n", !in.int_dot ? "no"
                                         : in.int_dot_4x8_signed_accel ? "yes (accelerated)"
                                                                       : "yes");
        if (!selftest)
            continue;
        struct kn_progress prog;
        char spec[32];
        snprintf(spec, sizeof spec, "vulkan:%d", i);
        selftest_begin(&prog, progress, out, spec);
        struct kern_backend *be = vk_backend_open(i, VK_CHECK_FULL, &err);
        selftest_end(&prog);
        if (!be) {
            fprintf(out, "           cannot open: %s\n", err.msg);
            rc = 1;
            continue;
        }
        const struct vk_selftest *t = vk_backend_selftest(be);
        fprintf(out, "           class %s, numerics %s%s\n", vk_backend_class(be),
                be->ops->numerics(be),
                t->canonical ? " (self-test passed: a receipt made here verifies on a CPU)"
                             : " (self-test failed: bits promised only for this driver)");
        fprintf(out, "           self-test: %s\n", t->report);
        vk_backend_close(be);
    }
    return rc;
}

int device_list(FILE *out, bool selftest, enum kn_progress_mode progress)
{
    char cpu[256];
    device_cpu_name(cpu, sizeof cpu);
    fprintf(out, "cpu        %s\n", cpu);
    fprintf(out, "           class %s, numerics %s (the reference)\n",
            kern_device_class(kn_isa_active()), KN_NUMERICS);
    int rc = list_vulkan(out, selftest, progress);
    return list_cuda(out, selftest, progress) | rc;
}
