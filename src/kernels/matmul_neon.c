/* matmul_neon.c: the matrix-product kernels of the neon level (matmul_neon.h, compiled with
 * this level's flags: CMakeLists.txt). */
#define KNEON_ROWS kern_matmul_rows_neon
#include "matmul_neon.h"
