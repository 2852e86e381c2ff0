#version 450
/* mm_q6_k_f64.comp: the Q6_K matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 14 /* QT_Q6_K */
#include "mm_q.glsl"
