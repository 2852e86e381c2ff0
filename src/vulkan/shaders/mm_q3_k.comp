#version 450
/* mm_q3_k.comp: the Q3_K matrix product (mm_q.glsl). */
#define KN_QT 11 /* QT_Q3_K */
#include "mm_q.glsl"
