/* matmul_i8mm.c: the matrix-product kernels of the i8mm level (matmul_neon.h, compiled with
 * this level's flags: CMakeLists.txt). */
#define KNEON_ROWS kern_matmul_rows_i8mm
#include "matmul_neon.h"
