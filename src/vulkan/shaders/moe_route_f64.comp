#version 450
/* moe_route_f64.comp: moe_route.glsl with fma computed exactly in double (kn_fma). */
#define KN_FMA64 1
#include "moe_route.glsl"
