#version 450
/* moe_route.comp: moe_route.glsl with the driver's fma. */
#include "moe_route.glsl"
