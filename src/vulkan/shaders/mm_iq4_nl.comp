#version 450
/* mm_iq4_nl.comp: the IQ4_NL matrix product (mm_q.glsl). */
#define KN_QT 20 /* QT_IQ4_NL */
#include "mm_q.glsl"
