#version 450
/* mm_q5_k.comp: the Q5_K matrix product (mm_q.glsl). */
#define KN_QT 13 /* QT_Q5_K */
#include "mm_q.glsl"
