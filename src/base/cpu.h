/* cpu.h: what this CPU and OS can run, as instruction-set levels (x86: cpuid + xgetbv;
 * aarch64: the kernel's HWCAP bits on Linux, sysctl on macOS), and the level in use
 * (KINETIC_ISA, else the best). The CPU kernels (src/kernels/dispatch.c) and BLAKE3
 * (src/crypto/blake3.c) both read the level here, so one setting governs both. Every
 * level computes the same bits (docs/numerics.md); the level only changes speed. */
#ifndef KN_BASE_CPU_H
#define KN_BASE_CPU_H

#include "base.h"

/* The architecture whose SIMD files this build compiles (CMakeLists.txt compiles the
 * *_avx2.c / *_avx512.c files for x86-64 and the *_neon.c / *_dotprod.c / *_i8mm.c files
 * for aarch64; code that calls them is guarded by these). */
#if defined(__x86_64__) || defined(__i386__)
#define KN_ARCH_X86 1
#define KN_ARCH_NAME "x86_64"
#elif defined(__aarch64__)
#define KN_ARCH_ARM 1
#define KN_ARCH_NAME "aarch64"
#else
#define KN_ARCH_NAME "generic"
#endif

/* One list for both architectures: a level of the other architecture is simply never
 * supported (kn_isa_supported), so loops over every level run the same code anywhere. */
enum kn_isa {
    KN_ISA_SCALAR = 0,  /* the portable reference: the specification */
    KN_ISA_AVX2 = 1,    /* x86-64: AVX2 + FMA + F16C + BMI2 */
    KN_ISA_AVX512 = 2,  /* x86-64: AVX-512 F/BW/VL/DQ + VNNI */
    KN_ISA_NEON = 3,    /* aarch64: Advanced SIMD (every AArch64 CPU) */
    KN_ISA_DOTPROD = 4, /* aarch64: + SDOT/UDOT (Armv8.2 DotProd) */
    KN_ISA_I8MM = 5,    /* aarch64: + SMMLA/USDOT (Armv8.6 I8MM) */
    KN_ISA_COUNT,
};

/* "scalar", "avx2", "avx512", "neon", "dotprod", "i8mm" ("unknown" out of range). */
const char *kn_isa_name(enum kn_isa isa);
/* True if this CPU (and OS) can run isa. Detected once. */
bool kn_isa_supported(enum kn_isa isa);
/* The best level this CPU supports. */
enum kn_isa kn_isa_best(void);
/* The level in use: KINETIC_ISA from the environment if set (an unknown name or a level
 * the CPU lacks is an error), else kn_isa_best(). Decided once, at the first call or by
 * kn_isa_init(); an undecided level with a bad KINETIC_ISA is scalar (with a warning). */
enum kn_isa kn_isa_active(void);
KN_MUST_USE enum kn_status kn_isa_init(struct kn_err *err);
/* Forces a level (tests, verify-receipt); fails if the CPU lacks it. */
KN_MUST_USE enum kn_status kn_isa_set(enum kn_isa isa, struct kn_err *err);

/* Whether the CPU (and OS) has AVX-512 VBMI (vpermb) on top of the avx512 level. */
bool kn_cpu_has_vbmi(void);
/* x86's display family (CPUID leaf 1: the base family, plus the extended family where
 * the base is 0Fh), with *amd set for "AuthenticAMD"; 0 (and false) elsewhere. */
unsigned kn_cpu_x86_family(bool *amd);

#endif
