#version 450
/* layernorm_f64.comp: rmsnorm.glsl's layernorm build, fma exact in double (kn_fma). */
#define KN_FMA64 1
#define KN_LAYERNORM 1
#include "rmsnorm.glsl"
