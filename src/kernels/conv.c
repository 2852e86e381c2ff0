/* conv.c: lfm2's short convolution (ops.h kern_shortconv), the same scalar code on every
 * ISA level; docs/numerics.md "Short convolution" is its specification. */
#include "ops.h"

#include <math.h>

void kern_shortconv(float *y, const float *C, const float *const *rows, const float *w,
                    int64_t L, int64_t n)
{
    for (int64_t c = 0; c < n; c++) {
        const float *wc = w + c * L;
        float acc = 0.0f;
        for (int64_t i = 0; i < L; i++)
            if (rows[i])
                acc = fmaf(rows[i][c], wc[i], acc);
        y[c] = C[c] * acc;
    }
}
