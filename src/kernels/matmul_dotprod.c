/* matmul_dotprod.c: the matrix-product kernels of the dotprod level (matmul_neon.h, compiled with
 * this level's flags: CMakeLists.txt). */
#define KNEON_ROWS kern_matmul_rows_dotprod
#include "matmul_neon.h"
