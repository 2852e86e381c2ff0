/* cpu.c: the kernels' CPU settings: the device class of each level, the VBMI look-up
 * choice within avx512, and the prefetch distance (isa.h). The CPU's features and the
 * level in use are base's (src/base/cpu.c). */
#include "isa.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static const char *const device_classes[KN_ISA_COUNT] = {
    [KN_ISA_SCALAR] = "cpu-" KN_ARCH_NAME "-scalar",
    [KN_ISA_AVX2] = "cpu-x86_64-avx2",
    [KN_ISA_AVX512] = "cpu-x86_64-avx512",
    [KN_ISA_NEON] = "cpu-aarch64-neon",
    [KN_ISA_DOTPROD] = "cpu-aarch64-dotprod",
    [KN_ISA_I8MM] = "cpu-aarch64-i8mm",
};

const char *kern_device_class(enum kn_isa isa)
{
    return (unsigned)isa < KN_ISA_COUNT ? device_classes[isa] : "cpu-unknown";
}

bool kern_device_class_is_cpu(const char *device_class)
{
    static const char *const archs[] = {"x86_64", "aarch64", "generic"};
    if (!device_class || strncmp(device_class, "cpu-", 4) != 0)
        return false;
    const char *rest = device_class + 4;
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
        size_t n = strlen(archs[a]);
        if (strncmp(rest, archs[a], n) != 0 || rest[n] != '-')
            continue;
        for (int i = 0; i < KN_ISA_COUNT; i++)
            if (strcmp(rest + n + 1, kn_isa_name((enum kn_isa)i)) == 0)
                return true;
    }
    return false;
}

/* 1: the look-ups use vpermb where the CPU has VBMI (the default); 0: vpshufb. */
static _Atomic int vbmi_on = 1;

bool kern_isa_vbmi(void)
{
    return kn_cpu_has_vbmi() && atomic_load_explicit(&vbmi_on, memory_order_relaxed);
}

bool kern_isa_vbmi_set(bool on)
{
    atomic_store(&vbmi_on, on ? 1 : 0);
    return kern_isa_vbmi();
}

size_t kern_prefetch_default(const char **why)
{
    bool amd;
    if (kn_cpu_x86_family(&amd) == 0x1A && amd) {
        *why = "AMD family 1Ah, Zen 5";
        return KERN_PREFETCH_ZEN5;
    }
    *why = "none measured for this CPU";
    return 0;
}

/* -1 = undecided; otherwise the prefetch distance in bytes. */
static _Atomic long long prefetch_bytes = -1;

enum kn_status kern_prefetch_init(struct kn_err *err)
{
    const char *why;
    size_t bytes = kern_prefetch_default(&why);
    enum kn_status st = KN_OK;
    const char *env = getenv("KINETIC_PREFETCH");
    if (env && *env) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end || errno || env[0] < '0' || env[0] > '9' || v > KERN_PREFETCH_MAX)
            st = kn_fail(err, KN_E_ARG,
                         "KINETIC_PREFETCH=%s is not a byte count from 0 (none) to %d; unset "
                         "it for this CPU's default, %zu",
                         env, KERN_PREFETCH_MAX, bytes);
        else
            bytes = (size_t)v;
    }
    atomic_store(&prefetch_bytes, (long long)bytes);
    return st;
}

size_t kern_prefetch_bytes(void)
{
    long long v = atomic_load_explicit(&prefetch_bytes, memory_order_relaxed);
    if (v >= 0)
        return (size_t)v;
    struct kn_err err;
    if (kern_prefetch_init(&err) != KN_OK)
        kn_log(KN_LOG_WARN, "%s; using the default", err.msg);
    return (size_t)atomic_load(&prefetch_bytes);
}

size_t kern_prefetch_set(size_t bytes)
{
    atomic_store(&prefetch_bytes, (long long)bytes);
    return bytes;
}
