#version 450
/* mm_q2_k.comp: the Q2_K matrix product (mm_q.glsl). */
#define KN_QT 10 /* QT_Q2_K */
#include "mm_q.glsl"
