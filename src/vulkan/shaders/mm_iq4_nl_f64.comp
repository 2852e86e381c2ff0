#version 450
/* mm_iq4_nl_f64.comp: the IQ4_NL matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 20 /* QT_IQ4_NL */
#include "mm_q.glsl"
