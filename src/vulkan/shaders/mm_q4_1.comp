#version 450
/* mm_q4_1.comp: the Q4_1 matrix product (mm_q.glsl). */
#define KN_QT 3 /* QT_Q4_1 */
#include "mm_q.glsl"
