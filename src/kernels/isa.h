/* isa.h: the kernels' side of the instruction-set levels. The levels, the CPU's features
 * and the level in use (KINETIC_ISA, else the best) are base's (src/base/cpu.h);
 * dispatch.c maps a level to its kernels. */
#ifndef KN_KERNELS_ISA_H
#define KN_KERNELS_ISA_H

#include "../base/base.h"
#include "../base/cpu.h"

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
 * many bytes ahead is prefetched as the block is read; 0 is none. It keeps decode at the
 * memory's rate where the hardware prefetchers lose a type's stream (docs/performance.md
 * "Round 8" has the measurements). A prefetch changes when bytes arrive, never a value:
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
const char *kern_device_class(enum kn_isa isa);
/* True if class names a CPU level of any architecture ("cpu-x86_64-avx2",
 * "cpu-aarch64-neon", ...): one whose bits are canonical-1's on every CPU. */
bool kern_device_class_is_cpu(const char *device_class);

#endif
