#version 450
/* mm_q4_k.comp: the Q4_K matrix product (mm_q.glsl). */
#define KN_QT 12 /* QT_Q4_K */
#include "mm_q.glsl"
