#version 450
/* attn_softcap_f64.comp: attn.glsl with soft-capped scores, fma exact in double. */
#define KN_FMA64 1
#define KN_SOFTCAP 1
#include "attn.glsl"
