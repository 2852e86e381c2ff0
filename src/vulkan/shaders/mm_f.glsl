/* mm_f.comp: y (M, N) = x (M, K) . w^T for float weights (F32, F16, BF16 converted
 * exactly), each output the canonical dot (kern_dot_f32_ref / dot_f16_ref /
 * dot_bf16_ref): acc[k % 16] = kn_fma(x[k], w[k], acc[k % 16]) for k ascending, lanes past
 * K untouched, then the tree w = 8, 4, 2, 1.
 * A workgroup is 4 weight rows x 16 lanes; lane l runs the chains of k = l (mod 16) for
 * up to 4 tokens at once, so each weight element is read once per 4 tokens; the trees
 * run from shared memory. Grid: (ceil(N / 4), ceil(M / 4)). */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer W { uint wq[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };
/* Mixture of experts (moe_group.comp): with pc.expert != KN_ALL_ROWS the product is over
 * sel[pc.expert] rows, row m being row sel[pc.sel_off + m] of x and of y (one expert's
 * rows of a (token, rank) batch, in order); the other rows of y are not written. */
layout(std430, set = 0, binding = 3) readonly buffer Sel { int sel[]; };

layout(push_constant) uniform P {
    uint type;
    uint N, K, M;
    uint row_bytes;
    uint x_off, y_off, ldy;
    uint row0;       /* first weight row of this dispatch (grids over 65535 groups) */
    uint w_base;     /* byte of the weights where the binding starts (large tensors) */
    uint expert;     /* KN_ALL_ROWS, or where sel holds the row count of this dispatch */
    uint sel_off;    /* where sel holds its row list */
} pc;

#define KN_ALL_ROWS 0xffffffffu
uint n_rows()
{
    return pc.expert == KN_ALL_ROWS ? pc.M : uint(sel[pc.expert]);
}
uint row_of(uint m)
{
    return pc.expert == KN_ALL_ROWS ? m : uint(sel[pc.sel_off + m]);
}

#define KN_WORDS(i) wq[i]
#include "kn_common.glsl"
#include "kn_types.glsl"

#define TM 4u
shared float part[4][TM][16];

void main()
{
    uint tid = gl_LocalInvocationID.x, r = tid / 16u, lane = tid % 16u;
    uint n = (pc.row0 + gl_WorkGroupID.x * 4u) + r, m0 = gl_WorkGroupID.y * TM;
    uint M = n_rows();
    if (m0 >= M)
        return; /* the whole workgroup: past this expert's rows */
    uint tm = min(TM, M - m0);
    precise float acc[TM];
    [[unroll]] for (uint i = 0u; i < TM; i++)
        acc[i] = 0.0;
    if (n < pc.N) {
        uint row = n * pc.row_bytes - pc.w_base;
        for (uint k = lane; k < pc.K; k += 16u) {
            float wk;
            if (pc.type == QT_F32)
                wk = uintBitsToFloat(wq[(row >> 2) + k]);
            else if (pc.type == QT_F16)
                wk = kn_f16(kn_ld16(row + 2u * k));
            else
                wk = kn_bf16(kn_ld16(row + 2u * k));
            [[unroll]] for (uint i = 0u; i < TM; i++)
                if (i < tm)
                    acc[i] = kn_fma(x[pc.x_off + row_of(m0 + i) * pc.K + k], wk, acc[i]);
        }
    }
    [[unroll]] for (uint i = 0u; i < TM; i++)
        part[r][i][lane] = acc[i];
    barrier();
    /* one invocation per (row, token) folds its 16 lanes */
    uint rr = tid / TM, ii = tid % TM;
    uint nn = (pc.row0 + gl_WorkGroupID.x * 4u) + rr;
    if (rr < 4u && ii < tm && nn < pc.N) {
        precise float a[16];
        [[unroll]] for (int l = 0; l < 16; l++)
            a[l] = part[rr][ii][l];
        [[unroll]] for (int wd = 8; wd >= 1; wd /= 2)
            [[unroll]] for (int l = 0; l < wd; l++)
                a[l] = a[l] + a[l + wd];
        y[pc.y_off + row_of(m0 + ii) * pc.ldy + nn] = a[0];
    }
}
