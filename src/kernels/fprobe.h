/* fprobe.h: the arithmetic probes of a device's start-up self-test (docs/numerics.md
 * "Devices"): crafted f32 triples (a, b, c) that a device runs through its own fma, /,
 * sqrt, * and +, and the judgement of its results against the CPU's bits. The Vulkan
 * (src/vulkan/vk_selftest.c) and CUDA (src/cuda/cu_selftest.c) self-tests share them. */
#ifndef KN_KERNELS_FPROBE_H
#define KN_KERNELS_FPROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kern_backend;

/* Triples: the first half normal numbers with c close to -a*b (where a fused and an
 * unfused fma differ), the second half with subnormal inputs or results. */
#define KERN_FPROBE_N 4096

struct kern_fprobe {
    bool fma_fused;                 /* every fma equals fmaf */
    bool div_rounded, sqrt_rounded; /* / and sqrt correctly rounded */
    bool arith_ok;                  /* * and + IEEE */
    bool denormals_kept;            /* no subnormal input or result flushed */
    char report[384];               /* the findings, with counts */
};

/* Writes the 3 * KERN_FPROBE_N words of the triples (a, b, c) to v (the same every time). */
void kern_fprobe_inputs(uint32_t *v);
/* Judges a device's results out (5 words per triple: fma(a, b, c), a / b, sqrt(a), a * b,
 * a + c) for the triples in, filling *r. */
void kern_fprobe_judge(const uint32_t *in, const uint32_t *out, struct kern_fprobe *r);

/* The self-test's decisive check: kern_backend_check on be (a one-thread CPU pool), its
 * outcome described in out ("every op equals the CPU (kern_backend_check)" and the
 * optional ops be lacks, or the first op and byte that differ). True when every op
 * equals the CPU's. */
bool kern_fprobe_ops(struct kern_backend *be, char *out, size_t cap);

#endif
