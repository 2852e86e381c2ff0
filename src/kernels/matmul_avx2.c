/* matmul_avx2.c: the avx2 kernels for y = x . w^T (docs/numerics.md), bit for bit the
 * reference in matmul.c. */
#include "kern_internal.h"

bool kern_matmul_rows_avx2(const struct kern_weight *w, const struct kern_act *a, float *y,
                           int64_t ldy, int64_t n0, int64_t n1)
{
    (void)w; (void)a; (void)y; (void)ldy; (void)n0; (void)n1;
    return false;
}
