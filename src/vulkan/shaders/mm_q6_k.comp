#version 450
/* mm_q6_k.comp: the Q6_K matrix product (mm_q.glsl). */
#define KN_QT 14 /* QT_Q6_K */
#include "mm_q.glsl"
