#version 450
/* attn_merge.comp: attn_merge.glsl with the driver's fma. */
#include "attn_merge.glsl"
