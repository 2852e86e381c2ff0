#version 450
/* mm_q2_k_f64.comp: the Q2_K matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 10 /* QT_Q2_K */
#include "mm_q.glsl"
