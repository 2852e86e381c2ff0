#version 450
/* eltwise_f64.comp: eltwise.glsl with fma computed exactly in double (kn_fma). */
#define KN_FMA64 1
#include "eltwise.glsl"
