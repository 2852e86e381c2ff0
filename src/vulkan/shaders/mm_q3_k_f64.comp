#version 450
/* mm_q3_k_f64.comp: the Q3_K matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 11 /* QT_Q3_K */
#include "mm_q.glsl"
