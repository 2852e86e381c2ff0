#version 450
/* mm_q5_0.comp: the Q5_0 matrix product (mm_q.glsl). */
#define KN_QT 6 /* QT_Q5_0 */
#include "mm_q.glsl"
