#version 450
/* mm_q5_k_f64.comp: the Q5_K matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 13 /* QT_Q5_K */
#include "mm_q.glsl"
