/* test_cu_host.c: the host side of the CUDA backend, on any machine (no GPU needed).
 *   - The embedded PTX (a build with nvcc) holds every kernel the backend launches
 *     (cu_internal.h's table) and was compiled as canonical-1 needs: every f32 add, sub,
 *     mul and fma explicitly rounded-to-nearest (.rn, which ptxas never contracts), no
 *     flush to zero (.ftz), no approximate division, sqrt or exp (.approx); each
 *     quantized product kernel sums its int8 values with dp4a.
 *   - With the driver absent (KN_CUDA_DRIVER names a file that does not exist), the
 *     registry says "no CUDA device present" (or, in a build without nvcc, that the
 *     build has no CUDA backend) on --device cuda, cuda:N and in `kinetic devices`, and
 *     finds no device of a cuda-smXY class; the spec syntax is checked.
 *   - The f32 <-> f16 rules of quant_hd.h, which the CUDA kv_store and the CPU share,
 *     against the CPU's F16C instructions where the CPU has them (all 2^32 f32 inputs
 *     would take too long: every f16, and 2^22 f32 patterns). */
#include "check.h"

#include "cuda/cu_internal.h"
#include "device/device.h"
#include "quant/quant_hd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

static void test_ptx(void)
{
    if (!cu_built()) {
        printf("no PTX: this build has no nvcc (the CUDA kernels were not compiled)\n");
        return;
    }
    const char *ptx = (const char *)cuk_ptx;
    CHECK(strlen(ptx) == cuk_ptx_len);
    for (int k = 0; k < CUK_COUNT; k++) {
        char entry[96];
        snprintf(entry, sizeof entry, ".entry %s(", cu_kernel_name((enum cuk_kernel)k));
        CHECKF(strstr(ptx, entry) != NULL, "the PTX has no kernel %s", cu_kernel_name((enum cuk_kernel)k));
    }
    static const char *const banned[] = {".ftz", ".approx", "mad.f32", "mad.rn.f32",
                                         "\tmul.f32", "\tadd.f32", "\tsub.f32", "\tfma.f32"};
    for (size_t i = 0; i < sizeof banned / sizeof banned[0]; i++)
        CHECKF(strstr(ptx, banned[i]) == NULL, "the PTX has '%s': a float operation the "
               "JIT may contract, flush or approximate", banned[i]);
    /* the quantized products' int8 sums are __dp4a (kern_hd.h kn_hd_dot_i8) in each of
     * their kernels */
    int n_mm = 0;
    for (int k = 0; k < CUK_COUNT; k++) {
        const char *name = cu_kernel_name((enum cuk_kernel)k);
        if (strncmp(name, "cuk_mmv_", 8) != 0 && strncmp(name, "cuk_mmt_", 8) != 0)
            continue;
        char entry[96];
        snprintf(entry, sizeof entry, ".entry %s(", name);
        const char *at = strstr(ptx, entry), *next = at ? strstr(at + 1, ".entry ") : NULL;
        const char *dp = at ? strstr(at, "dp4a.s32.s32") : NULL;
        CHECKF(dp && (!next || dp < next), "%s has no dp4a.s32.s32: its int8 sums are not "
               "__dp4a", name);
        n_mm++;
    }
    CHECKF(n_mm > 0, "no quantized product kernels in the table");
    size_t n_fma = 0;
    for (const char *p = ptx; (p = strstr(p, "fma.rn.f32")); p++)
        n_fma++;
    CHECKF(n_fma > 0, "no fma.rn.f32 in the PTX");
    printf("PTX: %zu bytes, %d kernels, %zu fma.rn.f32\n", cuk_ptx_len, CUK_COUNT, n_fma);
}

static void test_absent(void)
{
    const char *want = cu_built() ? "no CUDA device present" : "this build has no CUDA backend";
    struct kn_err err = {0};
    CHECK(cu_device_count(&err) == 0);
    CHECKF(strstr(err.msg, want) != NULL, "cu_device_count: %s", err.msg);
    const char *specs[] = {"cuda", "cuda:0", "cuda:3"};
    for (int i = 0; i < 3; i++) {
        struct device d;
        err = (struct kn_err){0};
        CHECK(device_spec_valid(specs[i]));
        CHECK(device_open(specs[i], &d, &err) == KN_E_UNSUPPORTED);
        CHECKF(strstr(err.msg, want) != NULL && strncmp(err.msg, "--device cuda", 13) == 0,
               "--device %s: %s", specs[i], err.msg);
        printf("--device %s: %s\n", specs[i], err.msg);
    }
    CHECK(!device_spec_valid("cuda:x"));
    CHECK(!device_spec_valid("cudax"));
    CHECK(!device_spec_valid("cuda:"));
    char spec[32];
    CHECK(!device_find_class("cuda-sm86", spec, sizeof spec));
    CHECK((strstr(device_backends_built(), "cuda") != NULL) == cu_built());
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL);
    device_list(f, false, KN_PROGRESS_OFF);
    fclose(f);
    CHECKF(strstr(text, "\ncuda       ") && strstr(text, want), "kinetic devices:\n%s", text);
    free(text);
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h)
{
    return _cvtsh_ss(h);
}
#endif

static void test_f16(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_F16C)) {
        printf("f16: no F16C on this CPU, not compared\n");
        return;
    }
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float a = kn_hd_f16_to_f32(h), b = hw_f16_to_f32((uint16_t)h);
        bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        bad += nan ? !(a != a && b != b) : kn_hd_f32_bits(a) != kn_hd_f32_bits(b);
    }
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < (1 << 22); i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(s >> 32);
        if (i & 1) /* near the f16 range: exponents 102..143 */
            u = (u & 0x807fffffu) | ((102u + (u >> 23) % 42) << 23);
        float f = kn_hd_bits_f32(u);
        if (f != f)
            continue;
        bad += kn_hd_f32_to_f16(f) != hw_f32_to_f16(f);
    }
    CHECKF(bad == 0, "%d f16 conversions differ from F16C", bad);
    printf("f16: every f16 and 2^22 f32 patterns equal F16C\n");
#else
    printf("f16: not an x86 CPU, not compared\n");
#endif
}

int main(void)
{
    setenv("KN_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
    test_ptx();
    test_absent();
    test_f16();
    CHECK_DONE();
}
