#version 450
/* rmsnorm.comp: rmsnorm.glsl with the driver's fma. */
#include "rmsnorm.glsl"
