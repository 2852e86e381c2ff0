#version 450
/* mm_mxfp4_f64.comp: the MXFP4 matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 39 /* QT_MXFP4 */
#include "mm_q.glsl"
