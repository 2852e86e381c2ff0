#version 450
/* mm_q4_k_f64.comp: the Q4_K matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 12 /* QT_Q4_K */
#include "mm_q.glsl"
