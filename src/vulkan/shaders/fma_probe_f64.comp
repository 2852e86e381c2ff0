#version 450
/* fma_probe_f64.comp: fma_probe.glsl with fma exact in double. */
#define KN_FMA64 1
#include "fma_probe.glsl"
