/* test_kern_isa.c: ISA names, detection, and the KINETIC_ISA override with its errors. */
#include "check.h"
#include "kernels/kernels.h"

#include <stdlib.h>

int main(void)
{
    struct kn_err err;
    /* A bad KINETIC_ISA seen first by kern_isa_active (no kern_isa_init call) falls back
     * to the scalar kernels, whose bits are the specification. */
    setenv("KINETIC_ISA", "avx9000", 1);
    CHECK(kern_isa_active() == KERN_ISA_SCALAR);
    unsetenv("KINETIC_ISA");
    CHECK_STR(kern_isa_name(KERN_ISA_SCALAR), "scalar");
    CHECK_STR(kern_isa_name(KERN_ISA_AVX2), "avx2");
    CHECK_STR(kern_isa_name(KERN_ISA_AVX512), "avx512");
    CHECK_STR(kern_device_class(KERN_ISA_AVX512), "cpu-x86_64-avx512");
    CHECK(kern_isa_supported(KERN_ISA_SCALAR));
    CHECK(!kern_isa_supported(KERN_ISA_COUNT));
    enum kern_isa best = kern_isa_best();
    CHECK(kern_isa_supported(best));
    if (kern_isa_supported(KERN_ISA_AVX512))
        CHECK(kern_isa_supported(KERN_ISA_AVX2));
    printf("best ISA here: %s\n", kern_isa_name(best));

    setenv("KINETIC_ISA", "scalar", 1);
    CHECK(kern_isa_init(&err) == KN_OK);
    CHECK(kern_isa_active() == KERN_ISA_SCALAR);
    setenv("KINETIC_ISA", "sse9", 1);
    CHECK(kern_isa_init(&err) == KN_E_ARG);
    CHECK(strstr(err.msg, "KINETIC_ISA=sse9") != NULL && strstr(err.msg, "avx512") != NULL);
    for (int i = 0; i < KERN_ISA_COUNT; i++) {
        setenv("KINETIC_ISA", kern_isa_name((enum kern_isa)i), 1);
        enum kn_status st = kern_isa_init(&err);
        if (kern_isa_supported((enum kern_isa)i)) {
            CHECK(st == KN_OK && kern_isa_active() == (enum kern_isa)i);
        } else {
            CHECK(st == KN_E_UNSUPPORTED);
            CHECK(strstr(err.msg, "KINETIC_ISA") != NULL);
        }
    }
    unsetenv("KINETIC_ISA");
    CHECK(kern_isa_init(&err) == KN_OK);
    CHECK(kern_isa_active() == best);
    CHECK(kern_isa_set(KERN_ISA_COUNT, &err) == KN_E_ARG);
    CHECK(kern_isa_set(KERN_ISA_SCALAR, &err) == KN_OK && kern_isa_active() == KERN_ISA_SCALAR);
    CHECK_DONE();
}
