#version 450
/* attn_merge_f64.comp: attn_merge.glsl with fma exact in double. */
#define KN_FMA64 1
#include "attn_merge.glsl"
