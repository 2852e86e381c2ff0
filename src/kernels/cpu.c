/* cpu.c: which ISA levels this CPU and OS can run (x86: cpuid + xgetbv; aarch64: the
 * kernel's HWCAP bits on Linux, sysctl on macOS), and the level in use (KINETIC_ISA
 * override, else the best). */
#include "isa.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(KERN_ARCH_X86)
#include <cpuid.h>
#elif defined(KERN_ARCH_ARM) && defined(__linux__)
#include <sys/auxv.h>
#elif defined(KERN_ARCH_ARM) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

const char *kern_isa_name(enum kern_isa isa)
{
    switch (isa) {
    case KERN_ISA_SCALAR: return "scalar";
    case KERN_ISA_AVX2: return "avx2";
    case KERN_ISA_AVX512: return "avx512";
    case KERN_ISA_NEON: return "neon";
    case KERN_ISA_DOTPROD: return "dotprod";
    case KERN_ISA_I8MM: return "i8mm";
    case KERN_ISA_COUNT: break;
    }
    return "unknown";
}

const char *kern_device_class(enum kern_isa isa)
{
    switch (isa) {
    case KERN_ISA_SCALAR: return "cpu-" KERN_ARCH_NAME "-scalar";
    case KERN_ISA_AVX2: return "cpu-x86_64-avx2";
    case KERN_ISA_AVX512: return "cpu-x86_64-avx512";
    case KERN_ISA_NEON: return "cpu-aarch64-neon";
    case KERN_ISA_DOTPROD: return "cpu-aarch64-dotprod";
    case KERN_ISA_I8MM: return "cpu-aarch64-i8mm";
    case KERN_ISA_COUNT: break;
    }
    return "cpu-unknown";
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
        for (int i = 0; i < KERN_ISA_COUNT; i++)
            if (strcmp(rest + n + 1, kern_isa_name((enum kern_isa)i)) == 0)
                return true;
    }
    return false;
}

#if defined(KERN_ARCH_X86)
/* XCR0: which register states the OS saves on a context switch. A CPU flag without the
 * OS saving the registers means the instructions fault or lose state. */
static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Bit of detect()'s mask beyond the levels: AVX-512 VBMI, with the avx512 level. */
#define KERN_VBMI_BIT (1u << KERN_ISA_COUNT)

/* Bit masks of the levels this CPU+OS supports (and KERN_VBMI_BIT), computed once. */
static unsigned detect(void)
{
    unsigned a, b, c, d;
    unsigned out = 1u << KERN_ISA_SCALAR;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return out;
    bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12),
         f16c = c & (1u << 29);
    if (!osxsave || !avx)
        return out;
    uint64_t xcr0 = read_xcr0();
    bool os_ymm = (xcr0 & 0x6) == 0x6;            /* SSE + AVX state */
    bool os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return out;
    bool avx2 = b & (1u << 5), bmi2 = b & (1u << 8);
    bool f512 = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
    bool vnni = c & (1u << 11);
    if (os_ymm && avx2 && fma && f16c && bmi2) {
        out |= 1u << KERN_ISA_AVX2;
        if (os_zmm && f512 && dq && bw && vl && vnni) {
            out |= 1u << KERN_ISA_AVX512;
            if (c & (1u << 1)) /* CPUID.(7,0):ECX.AVX512_VBMI */
                out |= KERN_VBMI_BIT;
        }
    }
    return out;
}
#elif defined(KERN_ARCH_ARM)
/* Advanced SIMD is part of every AArch64 CPU (and of the base ABI); dotprod and i8mm are
 * optional. Each level includes the one below it (an i8mm CPU without dotprod does not
 * exist in practice, and would run the neon kernels). */
static void arm_features(bool *dotprod, bool *i8mm)
{
    *dotprod = *i8mm = false;
#if defined(__linux__)
    /* Linux's arm64 hwcap bits (asm/hwcap.h): HWCAP_ASIMDDP = 1 << 20, HWCAP2_I8MM = 1 << 13. */
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    *dotprod = (hw >> 20) & 1ul;
    *i8mm = (hw2 >> 13) & 1ul;
#elif defined(__APPLE__)
    int v = 0;
    size_t len = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &len, NULL, 0) == 0)
        *dotprod = v != 0;
    v = 0;
    len = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_I8MM", &v, &len, NULL, 0) == 0)
        *i8mm = v != 0;
#endif
    /* Other systems: the neon level only (always correct, just slower). */
}

static unsigned detect(void)
{
    unsigned out = 1u << KERN_ISA_SCALAR | 1u << KERN_ISA_NEON;
    bool dotprod, i8mm;
    arm_features(&dotprod, &i8mm);
    if (dotprod) {
        out |= 1u << KERN_ISA_DOTPROD;
        if (i8mm)
            out |= 1u << KERN_ISA_I8MM;
    }
    return out;
}
#else
static unsigned detect(void) { return 1u << KERN_ISA_SCALAR; }
#endif

static unsigned supported_mask(void)
{
    static _Atomic unsigned cached; /* 0 = not yet detected (scalar bit is always set) */
    unsigned m = atomic_load_explicit(&cached, memory_order_relaxed);
    if (!m) {
        m = detect();
        atomic_store_explicit(&cached, m, memory_order_relaxed);
    }
    return m;
}

/* 1: the look-ups use vpermb where the CPU has VBMI (the default); 0: vpshufb. */
static _Atomic int vbmi_on = 1;

bool kern_isa_vbmi(void)
{
#if defined(KERN_ARCH_X86)
    return (supported_mask() & KERN_VBMI_BIT) && atomic_load_explicit(&vbmi_on, memory_order_relaxed);
#else
    return false;
#endif
}

bool kern_isa_vbmi_set(bool on)
{
    atomic_store(&vbmi_on, on ? 1 : 0);
    return kern_isa_vbmi();
}

#if defined(KERN_ARCH_X86)
/* x86's display family (CPUID leaf 1: base family, plus the extended family where the
 * base is 0Fh) and whether the vendor is AMD. */
static unsigned x86_family(bool *amd)
{
    unsigned a, b, c, d;
    *amd = false;
    if (!__get_cpuid(0, &a, &b, &c, &d))
        return 0;
    *amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u; /* "AuthenticAMD" */
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    unsigned fam = (a >> 8) & 0xF;
    return fam == 0xF ? fam + ((a >> 20) & 0xFF) : fam;
}
#endif

size_t kern_prefetch_default(const char **why)
{
#if defined(KERN_ARCH_X86)
    bool amd;
    if (x86_family(&amd) == 0x1A && amd) {
        *why = "AMD family 1Ah, Zen 5";
        return KERN_PREFETCH_ZEN5;
    }
#endif
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

bool kern_isa_supported(enum kern_isa isa)
{
    if ((unsigned)isa >= KERN_ISA_COUNT)
        return false;
    return (supported_mask() >> isa) & 1u;
}

enum kern_isa kern_isa_best(void)
{
    for (int i = KERN_ISA_COUNT - 1; i > 0; i--)
        if (kern_isa_supported((enum kern_isa)i))
            return (enum kern_isa)i;
    return KERN_ISA_SCALAR;
}

/* -1 = undecided; otherwise the level in use. */
static _Atomic int active_isa = -1;

enum kn_status kern_isa_set(enum kern_isa isa, struct kn_err *err)
{
    if ((unsigned)isa >= KERN_ISA_COUNT)
        return kn_fail(err, KN_E_ARG, "ISA level %d does not exist", (int)isa);
    if (!kern_isa_supported(isa))
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "this CPU (or OS) cannot run the %s kernels; the best it supports is %s",
                       kern_isa_name(isa), kern_isa_name(kern_isa_best()));
    atomic_store(&active_isa, (int)isa);
    return KN_OK;
}

enum kn_status kern_isa_init(struct kn_err *err)
{
    const char *env = getenv("KINETIC_ISA");
    if (!env || !*env) {
        atomic_store(&active_isa, (int)kern_isa_best());
        return KN_OK;
    }
    for (int i = 0; i < KERN_ISA_COUNT; i++) {
        if (strcmp(env, kern_isa_name((enum kern_isa)i)) == 0) {
            enum kn_status st = kern_isa_set((enum kern_isa)i, err);
            if (st != KN_OK)
                kn_err_prefix(err, "KINETIC_ISA");
            return st;
        }
    }
    return kn_fail(err, KN_E_ARG,
                   "KINETIC_ISA=%s is not a level; use scalar, avx2 or avx512 (x86-64) or neon, "
                   "dotprod or i8mm (aarch64), or unset it for the best this CPU supports, %s",
                   env, kern_isa_name(kern_isa_best()));
}

enum kern_isa kern_isa_active(void)
{
    int a = atomic_load_explicit(&active_isa, memory_order_relaxed);
    if (a >= 0)
        return (enum kern_isa)a;
    /* Undecided: a bad KINETIC_ISA falls back to scalar here (always correct bits);
     * programs call kern_isa_init() first to report the error. */
    struct kn_err err;
    if (kern_isa_init(&err) != KN_OK) {
        kn_log(KN_LOG_WARN, "%s; using the scalar kernels", err.msg);
        atomic_store(&active_isa, (int)KERN_ISA_SCALAR);
    }
    return (enum kern_isa)atomic_load(&active_isa);
}
