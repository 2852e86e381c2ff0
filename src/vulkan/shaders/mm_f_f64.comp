#version 450
/* mm_f_f64.comp: mm_f.glsl with fma computed exactly in double (kn_fma). */
#define KN_FMA64 1
#include "mm_f.glsl"
