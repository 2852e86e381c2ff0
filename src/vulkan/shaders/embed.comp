#version 450
/* embed.comp: x (T, E) = rows tokens[t] of a table of any type kn_dequant reads, times
 * scale when scale != 1 (backend op embed; cpu_embed). One invocation per element. A
 * table over the device's largest storage binding is bound in parts, one dispatch each. */
layout(local_size_x = 64, local_size_y = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer Table { uint tab[]; };
layout(std430, set = 0, binding = 1) readonly buffer Tokens { int tok[]; };
layout(std430, set = 0, binding = 2) writeonly buffer X { float x[]; };

layout(push_constant) uniform P {
    uint type;      /* quant_type of the table */
    uint E;         /* elements per row */
    uint row_bytes;
    uint T;
    uint x_off;     /* first float of x */
    uint tok_off;   /* first token id */
    uint has_scale; /* scale != 1 */
    float scale;
    uint r0, r1;    /* this dispatch writes the tokens of rows r0 .. r1 - 1 */
    uint t_base;    /* byte of the table where the binding starts */
} pc;

#define KN_WORDS(i) tab[i]
#include "kn_common.glsl"
#include "kn_types.glsl"

void main()
{
    uint i = gl_GlobalInvocationID.x, t = gl_GlobalInvocationID.y;
    if (i >= pc.E || t >= pc.T)
        return;
    uint id = uint(tok[pc.tok_off + t]);
    if (id < pc.r0 || id >= pc.r1)
        return;
    uint row = id * pc.row_bytes - pc.t_base;
    precise float v = kn_dequant(pc.type, row, i);
    if (pc.has_scale != 0u)
        v = v * pc.scale;
    x[pc.x_off + t * pc.E + i] = v;
}
