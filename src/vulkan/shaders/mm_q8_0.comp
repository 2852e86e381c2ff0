#version 450
/* mm_q8_0.comp: the Q8_0 matrix product (mm_q.glsl). */
#define KN_QT 8 /* QT_Q8_0 */
#include "mm_q.glsl"
