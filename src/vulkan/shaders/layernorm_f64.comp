#version 450
/* layernorm_f64.comp: layernorm.glsl with fma computed exactly in double (kn_fma). */
#define KN_FMA64 1
#include "layernorm.glsl"
