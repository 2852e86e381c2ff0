#version 450
/* mm_iq4_xs.comp: the IQ4_XS matrix product (mm_q.glsl). */
#define KN_QT 23 /* QT_IQ4_XS */
#include "mm_q.glsl"
