/* dispatch.c: which kernels each ISA level runs: the one table from a level to its
 * function pointers (BLAKE3's dispatcher, libsodium's pick_best_implementation). The
 * level itself is base's (src/base/cpu.h); every entry computes the reference's bits
 * (docs/numerics.md), so the table changes only speed. */
#include "kern_internal.h"
#include "ops_internal.h"

#define KERN_IMPL_SCALAR                                                                    \
    {                                                                                       \
        .ops = &kern_ops_scalar, .dot_f32 = kern_dot_f32_ref,                               \
        .quantize_row_q8f = kern_quantize_row_q8f_ref,                                      \
        .quantize_row_q8k = kern_quantize_row_q8k_ref, .matmul_rows = NULL,                 \
    }

const struct kern_impl kern_impls[KN_ISA_COUNT] = {
    [KN_ISA_SCALAR] = KERN_IMPL_SCALAR,
#if defined(KN_ARCH_X86)
    [KN_ISA_AVX2] = {.ops = &kern_ops_avx2, .dot_f32 = kern_dot_f32_avx2,
                     .quantize_row_q8f = kern_quantize_row_q8f_avx2,
                     .quantize_row_q8k = kern_quantize_row_q8k_avx2,
                     .matmul_rows = kern_matmul_rows_avx2},
    [KN_ISA_AVX512] = {.ops = &kern_ops_avx512, .dot_f32 = kern_dot_f32_avx512,
                       .quantize_row_q8f = kern_quantize_row_q8f_avx512,
                       .quantize_row_q8k = kern_quantize_row_q8k_avx512,
                       .matmul_rows = kern_matmul_rows_avx512},
#else
    [KN_ISA_AVX2] = KERN_IMPL_SCALAR,
    [KN_ISA_AVX512] = KERN_IMPL_SCALAR,
#endif
#if defined(KN_ARCH_ARM)
    /* dotprod and i8mm add integer instructions only: the float kernels and the
     * activation quantization are NEON's; the matrix products differ. */
    [KN_ISA_NEON] = {.ops = &kern_ops_neon, .dot_f32 = kern_dot_f32_neon,
                     .quantize_row_q8f = kern_quantize_row_q8f_neon,
                     .quantize_row_q8k = kern_quantize_row_q8k_neon,
                     .matmul_rows = kern_matmul_rows_neon},
    [KN_ISA_DOTPROD] = {.ops = &kern_ops_neon, .dot_f32 = kern_dot_f32_neon,
                        .quantize_row_q8f = kern_quantize_row_q8f_neon,
                        .quantize_row_q8k = kern_quantize_row_q8k_neon,
                        .matmul_rows = kern_matmul_rows_dotprod},
    [KN_ISA_I8MM] = {.ops = &kern_ops_neon, .dot_f32 = kern_dot_f32_neon,
                     .quantize_row_q8f = kern_quantize_row_q8f_neon,
                     .quantize_row_q8k = kern_quantize_row_q8k_neon,
                     .matmul_rows = kern_matmul_rows_i8mm},
#else
    [KN_ISA_NEON] = KERN_IMPL_SCALAR,
    [KN_ISA_DOTPROD] = KERN_IMPL_SCALAR,
    [KN_ISA_I8MM] = KERN_IMPL_SCALAR,
#endif
};

const struct kern_ops *kern_ops_get(enum kn_isa isa)
{
    return kern_impls[(unsigned)isa < KN_ISA_COUNT ? isa : KN_ISA_SCALAR].ops;
}

/* Follows kn_isa_active() on every call (an atomic load), so kn_isa_set() switches
 * these kernels together with the matrix products. */
const struct kern_ops *kern_ops_active(void)
{
    return kern_impl_active()->ops;
}
