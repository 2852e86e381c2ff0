#version 450
/* layernorm.comp: layernorm.glsl with the driver's fma. */
#include "layernorm.glsl"
