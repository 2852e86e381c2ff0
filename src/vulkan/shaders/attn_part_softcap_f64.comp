#version 450
/* attn_part_softcap_f64.comp: attn.glsl's tiles with soft-capped scores, fma exact in double. */
#define KN_FMA64 1
#define KN_ATTN_PART 1
#define KN_SOFTCAP 1
#include "attn.glsl"
