#version 450
/* mm_q5_1_f64.comp: the Q5_1 matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 7 /* QT_Q5_1 */
#include "mm_q.glsl"
