#version 450
/* rope.comp: rope.glsl with the driver's fma. */
#include "rope.glsl"
