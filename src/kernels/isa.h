/* isa.h: the instruction-set levels Kinetic's kernels come in, and run-time selection.
 * Every level computes the same bits (docs/numerics.md); the level only changes speed. */
#ifndef KN_KERNELS_ISA_H
#define KN_KERNELS_ISA_H

#include "../base/base.h"

/* The architecture whose SIMD files this build compiles (CMakeLists.txt compiles the
 * *_avx2.c / *_avx512.c files for x86-64 and the *_neon.c / *_dotprod.c / *_i8mm.c files
 * for aarch64; code that calls them is guarded by these). */
#if defined(__x86_64__) || defined(__i386__)
#define KERN_ARCH_X86 1
#define KERN_ARCH_NAME "x86_64"
#elif defined(__aarch64__)
#define KERN_ARCH_ARM 1
#define KERN_ARCH_NAME "aarch64"
#else
#define KERN_ARCH_NAME "generic"
#endif

/* One list for both architectures: a level of the other architecture is simply never
 * supported (kern_isa_supported), so loops over every level run the same code anywhere. */
enum kern_isa {
    KERN_ISA_SCALAR = 0,  /* the portable reference: the specification */
    KERN_ISA_AVX2 = 1,    /* x86-64: AVX2 + FMA + F16C */
    KERN_ISA_AVX512 = 2,  /* x86-64: AVX-512 F/BW/VL/DQ + VNNI */
    KERN_ISA_NEON = 3,    /* aarch64: Advanced SIMD (every AArch64 CPU) */
    KERN_ISA_DOTPROD = 4, /* aarch64: + SDOT/UDOT (Armv8.2 DotProd) */
    KERN_ISA_I8MM = 5,    /* aarch64: + SMMLA/USDOT (Armv8.6 I8MM) */
    KERN_ISA_COUNT,
};

/* "scalar", "avx2", "avx512", "neon", "dotprod", "i8mm". */
const char *kern_isa_name(enum kern_isa isa);
/* True if this CPU (and OS) can run isa. */
bool kern_isa_supported(enum kern_isa isa);
/* The best level this CPU supports. */
enum kern_isa kern_isa_best(void);
/* The level in use: KINETIC_ISA from the environment if set (an unknown name or a level
 * the CPU lacks is an error), else kern_isa_best(). Decided once, at the first call or
 * by kern_isa_init(). */
enum kern_isa kern_isa_active(void);
KN_MUST_USE enum kn_status kern_isa_init(struct kn_err *err);
/* Forces a level (tests, verify-receipt); fails if the CPU lacks it. */
KN_MUST_USE enum kn_status kern_isa_set(enum kern_isa isa, struct kn_err *err);
/* Whether the AVX-512 kernels look up IQ4_NL, IQ4_XS and MXFP4 values with vpermb (AVX-512
 * VBMI), where the CPU has it, instead of vpshufb: the same table and the same bytes, but
 * vpermb reads bits 0-5 of an index and the table repeats every 16 bytes, so a nibble
 * needs no mask. A choice within the avx512 level (the bits and the device class are
 * the same either way): on by default where the CPU has VBMI. kern_isa_vbmi_set turns
 * it off or back on (tests, benchmarks) and returns the state it leaves, which stays off
 * where the CPU lacks VBMI. */
bool kern_isa_vbmi(void);
bool kern_isa_vbmi_set(bool on);
/* Software prefetch in the packed matrix products: on a row group's first pass over its
 * weights (decode and the first token tile of a batch) every line of the group-block this
 * many bytes ahead is prefetched as the block is read; 0 is none. Where the hardware
 * prefetchers lose a type's stream this keeps decode at the memory's rate (AMD Zen 5, two
 * threads: Q5_K from 68% to 101% of the streaming read, MXFP4 from 83% to 98%;
 * docs/performance.md "Round 8"). A prefetch changes when bytes arrive, never a value:
 * the bits are the same at any setting.
 * The default is KERN_PREFETCH_ZEN5 on the CPUs it was measured on (AMD family 1Ah), 0
 * elsewhere; KINETIC_PREFETCH=BYTES (0 to KERN_PREFETCH_MAX) overrides it.
 * kern_prefetch_init decides it (a bad KINETIC_PREFETCH is KN_E_ARG, naming it, and
 * leaves the default); kern_prefetch_bytes decides it at its first call where nothing
 * did (a bad value is then a warning). kern_prefetch_set sets it (benchmarks, tests) and
 * returns it. */
#define KERN_PREFETCH_ZEN5 4096
#define KERN_PREFETCH_MAX (1 << 20)
KN_MUST_USE enum kn_status kern_prefetch_init(struct kn_err *err);
size_t kern_prefetch_bytes(void);
size_t kern_prefetch_set(size_t bytes);
/* The default this CPU gets without KINETIC_PREFETCH, and in *why the CPU it was
 * measured on ("AMD family 1Ah, Zen 5"), or "none measured for this CPU" where it is 0. */
size_t kern_prefetch_default(const char **why);
/* The device class recorded in receipts: "cpu-x86_64-avx2", "cpu-aarch64-dotprod" etc.
 * (the scalar level names this build's architecture: "cpu-aarch64-scalar"). Every CPU
 * class computes the same canonical-1 bits; the class says where a receipt was made. */
const char *kern_device_class(enum kern_isa isa);
/* True if class names a CPU level of any architecture ("cpu-x86_64-avx2",
 * "cpu-aarch64-neon", ...): one whose bits are canonical-1's on every CPU. */
bool kern_device_class_is_cpu(const char *device_class);

#endif
