/* cu_ptx_absent.c: a build without nvcc has no CUDA kernels (CMakeLists.txt builds this
 * file instead of the embedded PTX); cu_built() is then false and every CUDA device open
 * says so. */
#include <stddef.h>

extern const unsigned char cuk_ptx[];
extern const size_t cuk_ptx_len;
const unsigned char cuk_ptx[] = {0};
const size_t cuk_ptx_len = 0;
