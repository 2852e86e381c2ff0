#version 450
/* mm_q4_1_f64.comp: the Q4_1 matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 3 /* QT_Q4_1 */
#include "mm_q.glsl"
