/* test_kern_isa.c: ISA names, detection, and the KINETIC_ISA override with its errors. */
#include "check.h"
#include "kernels/kernels.h"

#include <stdlib.h>

int main(void)
{
    struct kn_err err;
    /* A bad KINETIC_PREFETCH seen first by kern_prefetch_bytes (no kern_prefetch_init
     * call) is a warning, and the CPU's default. */
    const char *why = NULL;
    const size_t pf_default = kern_prefetch_default(&why);
    setenv("KINETIC_PREFETCH", "lots", 1);
    const size_t pf_lazy = kern_prefetch_bytes();
    unsetenv("KINETIC_PREFETCH");
    /* A bad KINETIC_ISA seen first by kn_isa_active (no kn_isa_init call) falls back
     * to the scalar kernels, whose bits are the specification. */
    setenv("KINETIC_ISA", "avx9000", 1);
    CHECK(kn_isa_active() == KN_ISA_SCALAR);
    unsetenv("KINETIC_ISA");
    CHECK_STR(kn_isa_name(KN_ISA_SCALAR), "scalar");
    CHECK_STR(kn_isa_name(KN_ISA_AVX2), "avx2");
    CHECK_STR(kn_isa_name(KN_ISA_AVX512), "avx512");
    CHECK_STR(kern_device_class(KN_ISA_AVX512), "cpu-x86_64-avx512");
    CHECK_STR(kn_isa_name(KN_ISA_NEON), "neon");
    CHECK_STR(kn_isa_name(KN_ISA_DOTPROD), "dotprod");
    CHECK_STR(kn_isa_name(KN_ISA_I8MM), "i8mm");
    CHECK_STR(kern_device_class(KN_ISA_NEON), "cpu-aarch64-neon");
    CHECK_STR(kern_device_class(KN_ISA_DOTPROD), "cpu-aarch64-dotprod");
    CHECK_STR(kern_device_class(KN_ISA_I8MM), "cpu-aarch64-i8mm");
    /* The scalar class names the architecture this build runs on. */
#if defined(__x86_64__)
    CHECK_STR(kern_device_class(KN_ISA_SCALAR), "cpu-x86_64-scalar");
#elif defined(__aarch64__)
    CHECK_STR(kern_device_class(KN_ISA_SCALAR), "cpu-aarch64-scalar");
#endif
    /* Every CPU class of either architecture is canonical-1's; others are not. */
    for (int i = 0; i < KN_ISA_COUNT; i++)
        CHECK(kern_device_class_is_cpu(kern_device_class((enum kn_isa)i)));
    CHECK(kern_device_class_is_cpu("cpu-x86_64-scalar") && kern_device_class_is_cpu("cpu-aarch64-scalar"));
    CHECK(!kern_device_class_is_cpu("cpu-aarch64-sve") && !kern_device_class_is_cpu("vulkan-x-y"));
    CHECK(!kern_device_class_is_cpu("cpu-x86_64-") && !kern_device_class_is_cpu("cpu-avx2"));
    CHECK(!kern_device_class_is_cpu(NULL) && !kern_device_class_is_cpu("toy"));
    CHECK(kn_isa_supported(KN_ISA_SCALAR));
    CHECK(!kn_isa_supported(KN_ISA_COUNT));
    enum kn_isa best = kn_isa_best();
    CHECK(kn_isa_supported(best));
    if (kn_isa_supported(KN_ISA_AVX512))
        CHECK(kn_isa_supported(KN_ISA_AVX2));
    /* One architecture's levels only; on ARM each level includes the one below. */
    bool x86 = kn_isa_supported(KN_ISA_AVX2), arm = kn_isa_supported(KN_ISA_NEON);
    CHECK(!(x86 && arm));
    if (kn_isa_supported(KN_ISA_I8MM))
        CHECK(kn_isa_supported(KN_ISA_DOTPROD));
    if (kn_isa_supported(KN_ISA_DOTPROD))
        CHECK(kn_isa_supported(KN_ISA_NEON));
#if defined(__aarch64__)
    CHECK(arm); /* Advanced SIMD is part of every AArch64 CPU */
#endif
    printf("best ISA here: %s\n", kn_isa_name(best));

    setenv("KINETIC_ISA", "scalar", 1);
    CHECK(kn_isa_init(&err) == KN_OK);
    CHECK(kn_isa_active() == KN_ISA_SCALAR);
    setenv("KINETIC_ISA", "sse9", 1);
    CHECK(kn_isa_init(&err) == KN_E_ARG);
    CHECK(strstr(err.msg, "KINETIC_ISA=sse9") != NULL && strstr(err.msg, "avx512") != NULL);
    CHECK(strstr(err.msg, "i8mm") != NULL);
    for (int i = 0; i < KN_ISA_COUNT; i++) {
        setenv("KINETIC_ISA", kn_isa_name((enum kn_isa)i), 1);
        enum kn_status st = kn_isa_init(&err);
        if (kn_isa_supported((enum kn_isa)i)) {
            CHECK(st == KN_OK && kn_isa_active() == (enum kn_isa)i);
        } else {
            CHECK(st == KN_E_UNSUPPORTED);
            CHECK(strstr(err.msg, "KINETIC_ISA") != NULL);
        }
    }
    unsetenv("KINETIC_ISA");
    CHECK(kn_isa_init(&err) == KN_OK);
    CHECK(kn_isa_active() == best);
    CHECK(kn_isa_set(KN_ISA_COUNT, &err) == KN_E_ARG);
    CHECK(kn_isa_set(KN_ISA_SCALAR, &err) == KN_OK && kn_isa_active() == KN_ISA_SCALAR);

    /* The products' software prefetch: KINETIC_PREFETCH's byte count, else this CPU's
     * default; a bad value is an error naming it and leaves the default. */
    CHECK(pf_lazy == pf_default);
    CHECK(pf_default == 0 || pf_default == KERN_PREFETCH_ZEN5);
    CHECK(why && *why);
    printf("prefetch default here: %zu (%s)\n", pf_default, why);
    static const char *const bad[] = {"abc", "-64", "4096x", " 64", "1048577", "99999999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kern_prefetch_set(123);
        setenv("KINETIC_PREFETCH", bad[i], 1);
        CHECK(kern_prefetch_init(&err) == KN_E_ARG);
        CHECKF(strstr(err.msg, "KINETIC_PREFETCH=") != NULL && strstr(err.msg, bad[i]) != NULL,
               "%s: %s", bad[i], err.msg);
        CHECK(kern_prefetch_bytes() == pf_default);
    }
    static const struct { const char *env; size_t bytes; } good[] = {
        {"0", 0}, {"4096", 4096}, {"1048576", KERN_PREFETCH_MAX}, {"", 0}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("KINETIC_PREFETCH", good[i].env, 1);
        CHECK(kern_prefetch_init(&err) == KN_OK);
        size_t want = *good[i].env ? good[i].bytes : pf_default; /* empty: unset */
        CHECKF(kern_prefetch_bytes() == want, "KINETIC_PREFETCH=%s: %zu", good[i].env,
               kern_prefetch_bytes());
    }
    unsetenv("KINETIC_PREFETCH");
    CHECK(kern_prefetch_init(&err) == KN_OK && kern_prefetch_bytes() == pf_default);
    CHECK(kern_prefetch_set(64) == 64 && kern_prefetch_bytes() == 64);
    CHECK_DONE();
}
