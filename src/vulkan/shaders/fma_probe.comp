#version 450
/* fma_probe.comp: fma_probe.glsl with the driver's fma. */
#include "fma_probe.glsl"
