/* test_ops_common.h: what the ops tests share: a seeded generator (splitmix64) and the
 * list of ISA tables this CPU can run, found with cpuid independently of the dispatcher
 * under test. */
#ifndef KN_TEST_OPS_COMMON_H
#define KN_TEST_OPS_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "kernels/ops.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static inline uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi) with 24 random bits. */
static inline float rng_f(float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(rng_next() >> 40) * 0x1p-24);
}

static inline double rng_uniform(double lo, double hi)
{
    return lo + (hi - lo) * ((double)(rng_next() >> 11) * 0x1p-53);
}

static inline const char *isa_label(enum kn_isa isa)
{
    return kn_isa_name(isa);
}

/* Fills out with the SIMD tables (beyond the reference) that this build has and this CPU
 * (and OS) can run; returns how many. */
static inline int simd_levels(const struct kern_ops **out)
{
    int n = 0;
#if defined(__x86_64__)
    unsigned a, b, c, d;
    bool avx2 = false, avx512 = false;
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
             f16c = c & (1u << 29);
        unsigned xcr0_lo = 0, xcr0_hi = 0;
        if (osxsave)
            __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
        bool ymm = (xcr0_lo & 6) == 6, zmm = (xcr0_lo & 0xe6) == 0xe6;
        if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
            avx2 = fma && avx && f16c && ymm && (b & (1u << 5));
            /* F (16), DQ (17), BW (30), VL (31) */
            avx512 = avx2 && zmm && (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) &&
                     (b & (1u << 31));
        }
    }
    if (avx2 && kern_ops_get(KN_ISA_AVX2)->isa == KN_ISA_AVX2)
        out[n++] = kern_ops_get(KN_ISA_AVX2);
    if (avx512 && kern_ops_get(KN_ISA_AVX512)->isa == KN_ISA_AVX512)
        out[n++] = kern_ops_get(KN_ISA_AVX512);
#elif defined(__aarch64__)
    /* Advanced SIMD is in every AArch64 CPU; dotprod and i8mm share its float table. */
    if (kern_ops_get(KN_ISA_NEON)->isa == KN_ISA_NEON)
        out[n++] = kern_ops_get(KN_ISA_NEON);
#else
    (void)out;
#endif
    return n;
}

#endif
