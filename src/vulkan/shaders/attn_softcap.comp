#version 450
/* attn_softcap.comp: attn.glsl with soft-capped scores (Gemma 2), the driver's fma. */
#define KN_SOFTCAP 1
#include "attn.glsl"
