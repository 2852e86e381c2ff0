#version 450
/* attn_part_f64.comp: attn.glsl's tiles, one per workgroup, fma exact in double. */
#define KN_FMA64 1
#define KN_ATTN_PART 1
#include "attn.glsl"
