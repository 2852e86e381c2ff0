#version 450
/* mm_iq4_xs_f64.comp: the IQ4_XS matrix product (mm_q.glsl), fma exact in double. */
#define KN_FMA64 1
#define KN_QT 23 /* QT_IQ4_XS */
#include "mm_q.glsl"
