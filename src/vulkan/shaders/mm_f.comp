#version 450
/* mm_f.comp: mm_f.glsl with the driver's fma. */
#include "mm_f.glsl"
