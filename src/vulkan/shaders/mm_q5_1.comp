#version 450
/* mm_q5_1.comp: the Q5_1 matrix product (mm_q.glsl). */
#define KN_QT 7 /* QT_Q5_1 */
#include "mm_q.glsl"
