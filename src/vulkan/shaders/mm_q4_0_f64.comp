#version 450
/* mm_q4_0_f64.comp: the Q4_0 matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 2 /* QT_Q4_0 */
#include "mm_q.glsl"
