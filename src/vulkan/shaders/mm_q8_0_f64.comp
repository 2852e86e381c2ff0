#version 450
/* mm_q8_0_f64.comp: the Q8_0 matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 8 /* QT_Q8_0 */
#include "mm_q.glsl"
