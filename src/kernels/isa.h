/* isa.h: the instruction-set levels Kinetic's kernels come in, and run-time selection.
 * Every level computes the same bits (docs/numerics.md); the level only changes speed. */
#ifndef KN_KERNELS_ISA_H
#define KN_KERNELS_ISA_H

#include "../base/base.h"

enum kern_isa {
    KERN_ISA_SCALAR = 0, /* the portable reference: the specification */
    KERN_ISA_AVX2 = 1,   /* AVX2 + FMA + F16C */
    KERN_ISA_AVX512 = 2, /* AVX-512 F/BW/VL/DQ + VNNI */
    KERN_ISA_COUNT,
};

/* "scalar", "avx2", "avx512". */
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
/* The device class recorded in receipts: "cpu-x86_64-avx2" etc. */
const char *kern_device_class(enum kern_isa isa);

#endif
