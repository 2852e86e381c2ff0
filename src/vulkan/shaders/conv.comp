#version 450
/* conv.comp: conv.glsl with the driver's fma. */
#include "conv.glsl"
