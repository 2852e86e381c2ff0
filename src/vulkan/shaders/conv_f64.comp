#version 450
/* conv_f64.comp: conv.glsl with fma computed exactly in double (kn_fma). */
#define KN_FMA64 1
#include "conv.glsl"
