#version 450
/* rmsnorm_f64.comp: rmsnorm.glsl with fma computed exactly in double (kn_fma). */
#define KN_FMA64 1
#include "rmsnorm.glsl"
