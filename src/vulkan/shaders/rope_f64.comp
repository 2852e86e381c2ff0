#version 450
/* rope_f64.comp: rope.glsl with fma computed exactly in double (kn_fma). */
#define KN_FMA64 1
#include "rope.glsl"
