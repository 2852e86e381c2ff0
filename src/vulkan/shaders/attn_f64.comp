#version 450
/* attn_f64.comp: attn.glsl with fma computed exactly in double (kn_fma). */
#define KN_FMA64 1
#include "attn.glsl"
