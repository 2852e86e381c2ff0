#version 450
/* mm_q4_0.comp: the Q4_0 matrix product (mm_q.glsl). */
#define KN_QT 2 /* QT_Q4_0 */
#include "mm_q.glsl"
