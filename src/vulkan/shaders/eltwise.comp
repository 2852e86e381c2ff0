#version 450
/* eltwise.comp: eltwise.glsl with the driver's fma. */
#include "eltwise.glsl"
