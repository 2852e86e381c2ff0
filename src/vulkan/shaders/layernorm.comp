#version 450
/* layernorm.comp: rmsnorm.glsl's layernorm build with the driver's fma. */
#define KN_LAYERNORM 1
#include "rmsnorm.glsl"
