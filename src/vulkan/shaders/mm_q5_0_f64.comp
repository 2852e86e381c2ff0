#version 450
/* mm_q5_0_f64.comp: the Q5_0 matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 6 /* QT_Q5_0 */
#include "mm_q.glsl"
