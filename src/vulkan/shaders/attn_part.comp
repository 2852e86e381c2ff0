#version 450
/* attn_part.comp: attn.glsl's tiles, one per workgroup, with the driver's fma. */
#define KN_ATTN_PART 1
#include "attn.glsl"
