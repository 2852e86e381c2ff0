/* cpu.c: which ISA levels this CPU and OS can run, and the level in use (cpu.h). */
#include "cpu.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(KN_ARCH_X86)
#include <cpuid.h>
#elif defined(KN_ARCH_ARM) && defined(__linux__)
#include <sys/auxv.h>
#elif defined(KN_ARCH_ARM) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

static const char *const isa_names[KN_ISA_COUNT] = {
    [KN_ISA_SCALAR] = "scalar", [KN_ISA_AVX2] = "avx2",       [KN_ISA_AVX512] = "avx512",
    [KN_ISA_NEON] = "neon",     [KN_ISA_DOTPROD] = "dotprod", [KN_ISA_I8MM] = "i8mm",
};

const char *kn_isa_name(enum kn_isa isa)
{
    return (unsigned)isa < KN_ISA_COUNT ? isa_names[isa] : "unknown";
}

#if defined(KN_ARCH_X86)
/* XCR0: which register states the OS saves on a context switch. A CPU flag without the
 * OS saving the registers means the instructions fault or lose state. */
static uint64_t read_xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Bit of detect()'s mask beyond the levels: AVX-512 VBMI, with the avx512 level. */
#define KN_VBMI_BIT (1u << KN_ISA_COUNT)

/* Bit masks of the levels this CPU+OS supports (and KN_VBMI_BIT), computed once. */
static unsigned detect(void)
{
    unsigned a, b, c, d;
    unsigned out = 1u << KN_ISA_SCALAR;
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
        out |= 1u << KN_ISA_AVX2;
        if (os_zmm && f512 && dq && bw && vl && vnni) {
            out |= 1u << KN_ISA_AVX512;
            if (c & (1u << 1)) /* CPUID.(7,0):ECX.AVX512_VBMI */
                out |= KN_VBMI_BIT;
        }
    }
    return out;
}
#elif defined(KN_ARCH_ARM)
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
    unsigned out = 1u << KN_ISA_SCALAR | 1u << KN_ISA_NEON;
    bool dotprod, i8mm;
    arm_features(&dotprod, &i8mm);
    if (dotprod) {
        out |= 1u << KN_ISA_DOTPROD;
        if (i8mm)
            out |= 1u << KN_ISA_I8MM;
    }
    return out;
}
#else
static unsigned detect(void) { return 1u << KN_ISA_SCALAR; }
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

bool kn_cpu_has_vbmi(void)
{
#if defined(KN_ARCH_X86)
    return supported_mask() & KN_VBMI_BIT;
#else
    return false;
#endif
}

#if defined(KN_ARCH_X86)
unsigned kn_cpu_x86_family(bool *amd)
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
#else
unsigned kn_cpu_x86_family(bool *amd)
{
    *amd = false;
    return 0;
}
#endif

bool kn_isa_supported(enum kn_isa isa)
{
    if ((unsigned)isa >= KN_ISA_COUNT)
        return false;
    return (supported_mask() >> isa) & 1u;
}

enum kn_isa kn_isa_best(void)
{
    for (int i = KN_ISA_COUNT - 1; i > 0; i--)
        if (kn_isa_supported((enum kn_isa)i))
            return (enum kn_isa)i;
    return KN_ISA_SCALAR;
}

/* -1 = undecided; otherwise the level in use. */
static _Atomic int active_isa = -1;

enum kn_status kn_isa_set(enum kn_isa isa, struct kn_err *err)
{
    if ((unsigned)isa >= KN_ISA_COUNT)
        return kn_fail(err, KN_E_ARG, "ISA level %d does not exist", (int)isa);
    if (!kn_isa_supported(isa))
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "this CPU (or OS) cannot run the %s kernels; the best it supports is %s",
                       kn_isa_name(isa), kn_isa_name(kn_isa_best()));
    atomic_store(&active_isa, (int)isa);
    return KN_OK;
}

enum kn_status kn_isa_init(struct kn_err *err)
{
    const char *env = getenv("KINETIC_ISA");
    if (!env || !*env) {
        atomic_store(&active_isa, (int)kn_isa_best());
        return KN_OK;
    }
    for (int i = 0; i < KN_ISA_COUNT; i++) {
        if (strcmp(env, kn_isa_name((enum kn_isa)i)) == 0) {
            enum kn_status st = kn_isa_set((enum kn_isa)i, err);
            if (st != KN_OK)
                kn_err_prefix(err, "KINETIC_ISA");
            return st;
        }
    }
    return kn_fail(err, KN_E_ARG,
                   "KINETIC_ISA=%s is not a level; use scalar, avx2 or avx512 (x86-64) or neon, "
                   "dotprod or i8mm (aarch64), or unset it for the best this CPU supports, %s",
                   env, kn_isa_name(kn_isa_best()));
}

enum kn_isa kn_isa_active(void)
{
    int a = atomic_load_explicit(&active_isa, memory_order_relaxed);
    if (a >= 0)
        return (enum kn_isa)a;
    /* Undecided: a bad KINETIC_ISA falls back to scalar here (always correct bits);
     * programs call kn_isa_init() first to report the error. */
    struct kn_err err;
    if (kn_isa_init(&err) != KN_OK) {
        kn_log(KN_LOG_WARN, "%s; using the scalar kernels", err.msg);
        atomic_store(&active_isa, (int)KN_ISA_SCALAR);
    }
    return (enum kn_isa)atomic_load(&active_isa);
}
