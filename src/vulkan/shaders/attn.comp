#version 450
/* attn.comp: attn.glsl with the driver's fma. */
#include "attn.glsl"
