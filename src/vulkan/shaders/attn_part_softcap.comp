#version 450
/* attn_part_softcap.comp: attn.glsl's tiles with soft-capped scores, the driver's fma. */
#define KN_ATTN_PART 1
#define KN_SOFTCAP 1
#include "attn.glsl"
