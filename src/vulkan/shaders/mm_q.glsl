/* mm_q.glsl: y (M, N) = x (M, K) . w^T for quantized weights, the body of mm_<type>.comp
 * (each defines KN_QT to one of the QT_ values of kn_types.glsl before including this).
 * Activations are the CPU's quantized rows (actq.comp): Q8_32 blocks of 10 words for the
 * 32-blocks, Q8_K blocks of 73 words for the K-quants.
 *
 * Per output, docs/numerics.md "Quantized weights": blocks b ascending, acc = +0,
 *   acc = fma(dw * dx, float(isum_b), acc)              (every type)
 *   acc = fma(m * dx, float(x.s), acc)                   (Q4_1, Q5_1)
 *   acc = fma(-(dmin * dx), float(imin_b), acc)          (Q2_K, Q4_K, Q5_K)
 * where the integer sums are exact, so they may be formed in any order and place.
 *
 * A workgroup computes 4 weight rows x 4 tokens. Blocks go in chunks: for each chunk all
 * 64 invocations form the integer sums of every (row, token, block, part) item in
 * parallel (a part is a whole 32-block, or one 32-element sub-block of a K-quant block:
 * 8 parts), into shared memory; then one invocation per (row, token) runs the float
 * chain over the chunk's blocks in order, adding its parts' integers exactly. The float
 * steps are those of the reference, the integer work is spread over the workgroup.
 * Grid: (ceil(N / 4), ceil(M / 4)). */
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer W { uint wq[]; };
layout(std430, set = 0, binding = 1) readonly buffer X { uint xq[]; };
layout(std430, set = 0, binding = 2) writeonly buffer Y { float y[]; };
/* Mixture of experts (moe_group.comp): with pc.expert != KN_ALL_ROWS the product is over
 * sel[pc.expert] rows, row m being row sel[pc.sel_off + m] of x and of y (one expert's
 * rows of a (token, rank) batch, in order); the other rows of y are not written. */
layout(std430, set = 0, binding = 3) readonly buffer Sel { int sel[]; };

layout(push_constant) uniform P {
    uint N, K, M;
    uint row_bytes;  /* weight row */
    uint x_off;      /* first word of the quantized activations */
    uint x_row;      /* words of one quantized row */
    uint y_off, ldy;
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

/* GGML ids of the types, for the preprocessor */
#define T_Q8_0 8
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_Q2_K 10
#define T_Q3_K 11
#define T_IQ4_NL 20
#define T_IQ4_XS 23
#define T_MXFP4 39

#define KN_WORDS(i) wq[i]
#include "kn_common.glsl"
#include "kn_types.glsl"

#if KN_QT == T_Q4_K || KN_QT == T_Q5_K || KN_QT == T_Q6_K || KN_QT == T_Q2_K || \
    KN_QT == T_Q3_K || KN_QT == T_IQ4_XS
#define KQ 1
#define QB 256u   /* elements per block */
#define XBW 73u   /* words per activation block */
#define PARTS 8u
#define CB 8u     /* blocks per chunk */
#else
#define KQ 0
#define QB 32u
#define XBW 10u
#define PARTS 1u
#define CB 64u
#endif

#if KN_QT == T_Q8_0
#define WBS 34u
#elif KN_QT == T_Q4_0
#define WBS 18u
#elif KN_QT == T_Q4_1
#define WBS 20u
#elif KN_QT == T_Q5_0
#define WBS 22u
#elif KN_QT == T_Q5_1
#define WBS 24u
#elif KN_QT == T_Q4_K
#define WBS 144u
#elif KN_QT == T_Q5_K
#define WBS 176u
#elif KN_QT == T_Q2_K
#define WBS 84u
#elif KN_QT == T_Q3_K
#define WBS 110u
#elif KN_QT == T_IQ4_NL
#define WBS 18u
#elif KN_QT == T_IQ4_XS
#define WBS 136u
#elif KN_QT == T_MXFP4
#define WBS 17u
#else
#define WBS 210u
#endif

#define R 4u
#define TM 4u
#define ITEMS (R * TM * CB * PARTS)
shared int si[ITEMS];
#if KN_QT == T_Q4_K || KN_QT == T_Q5_K || KN_QT == T_Q2_K
#define HAS_MIN 1
shared int sm[ITEMS];
#endif

/* bits 0..3 of h spread to bit 4 of bytes 0..3 */
uint spread4(uint h)
{
    return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}

/* The four nibbles at bits 0..3 of each byte of raw as their signed IQ4 levels. */
uint iq4_levels(uint raw)
{
    uint r = 0u;
    [[unroll]] for (uint i = 0u; i < 4u; i++)
        r |= (uint(KN_IQ4_LEVELS[(raw >> (8u * i)) & 0x0fu]) & 0xffu) << (8u * i);
    return r;
}

/* The four nibbles at bits 0..3 of each byte of raw as their MXFP4 values (doubled). */
uint mxfp4_values(uint raw)
{
    uint r = 0u;
    [[unroll]] for (uint i = 0u; i < 4u; i++)
        r |= (uint(KN_MXFP4_VALUES[(raw >> (8u * i)) & 0x0fu]) & 0xffu) << (8u * i);
    return r;
}

/* The exact integer sums of one item: weight block at byte wb, activation block at word
 * xa, part p. */
void item(uint wb, uint xa, uint p, out int isum, out int imin)
{
    isum = 0;
    imin = 0;
#if KN_QT == T_Q8_0
    [[unroll]] for (uint w = 0u; w < 8u; w++)
        isum += kn_dot4_ss(kn_ld32(wb + 2u + 4u * w), xq[xa + 2u + w]);
#elif KN_QT == T_IQ4_NL
    [[unroll]] for (uint w = 0u; w < 4u; w++) {
        uint raw = kn_ld32(wb + 2u + 4u * w);
        isum += kn_dot4_ss(iq4_levels(raw), xq[xa + 2u + w]) +
                kn_dot4_ss(iq4_levels(raw >> 4), xq[xa + 6u + w]);
    }
#elif KN_QT == T_MXFP4
    [[unroll]] for (uint w = 0u; w < 4u; w++) {
        uint raw = kn_ld32(wb + 1u + 4u * w);
        isum += kn_dot4_ss(mxfp4_values(raw), xq[xa + 2u + w]) +
                kn_dot4_ss(mxfp4_values(raw >> 4), xq[xa + 6u + w]);
    }
#elif KN_QT == T_IQ4_XS
    uint qs = wb + 8u + 16u * p;
    int s = 0;
    [[unroll]] for (uint w = 0u; w < 4u; w++) {
        uint raw = kn_ld32(qs + 4u * w);
        s += kn_dot4_ss(iq4_levels(raw), xq[xa + 1u + 8u * p + w]) +
             kn_dot4_ss(iq4_levels(raw >> 4), xq[xa + 5u + 8u * p + w]);
    }
    isum = kn_iq4xs_scale(wb, p) * s;
#elif KN_QT == T_Q2_K || KN_QT == T_Q3_K
    /* part p: elements 32p + l, l < 32: bits 2t of qs[32h + l] (h = p / 4, t = p % 4);
     * Q3_K adds bit p of hmask[l] as bit 2, value q - 4 */
    uint h = p / 4u, t = p % 4u;
    uint qb = wb + (KN_QT == T_Q2_K ? 16u : 32u) + 32u * h;
    int s0 = 0, s1 = 0;
    [[unroll]] for (uint w = 0u; w < 8u; w++) {
        uint q = (kn_ld32(qb + 4u * w) >> (2u * t)) & 0x03030303u;
#if KN_QT == T_Q3_K
        q |= ((kn_ld32(wb + 4u * w) >> p) & 0x01010101u) << 2;
#endif
        int d4 = kn_dot4_us(q, xq[xa + 1u + 8u * p + w]);
        if (w < 4u)
            s0 += d4;
        else
            s1 += d4;
    }
    uint bw = xq[xa + 65u + p]; /* bsums 2p and 2p + 1 */
    int bs0 = bitfieldExtract(int(bw), 0, 16), bs1 = bitfieldExtract(int(bw), 16, 16);
#if KN_QT == T_Q2_K
    uint sc0 = kn_ld8(wb + 2u * p), sc1 = kn_ld8(wb + 2u * p + 1u);
    isum = int(sc0 & 0x0fu) * s0 + int(sc1 & 0x0fu) * s1;
    imin = int(sc0 >> 4) * bs0 + int(sc1 >> 4) * bs1;
#else
    isum = kn_q3k_scale(wb + 96u, 2u * p) * (s0 - 4 * bs0) +
           kn_q3k_scale(wb + 96u, 2u * p + 1u) * (s1 - 4 * bs1);
#endif
#elif KN_QT == T_Q4_0 || KN_QT == T_Q4_1 || KN_QT == T_Q5_0 || KN_QT == T_Q5_1
    const bool has_m = KN_QT == QT_Q4_1 || KN_QT == QT_Q5_1;
    const bool has_h = KN_QT == QT_Q5_0 || KN_QT == QT_Q5_1;
    uint qs = wb + (has_m ? 4u : 2u) + (has_h ? 4u : 0u);
    uint qh = has_h ? kn_ld32(wb + (has_m ? 4u : 2u)) : 0u;
    [[unroll]] for (uint w = 0u; w < 4u; w++) {
        uint raw = kn_ld32(qs + 4u * w);
        uint lo = raw & 0x0f0f0f0fu, hi = (raw >> 4) & 0x0f0f0f0fu;
        if (has_h) {
            lo |= spread4(qh >> (4u * w));
            hi |= spread4(qh >> (16u + 4u * w));
        }
        isum += kn_dot4_us(lo, xq[xa + 2u + w]) + kn_dot4_us(hi, xq[xa + 6u + w]);
    }
    /* the offsets -8 / -16 as one exact term: sum (q - o) x = sum q x - o s */
    if (!has_m)
        isum -= (has_h ? 16 : 8) * int(xq[xa + 1u]);
#elif KN_QT == T_Q4_K || KN_QT == T_Q5_K
    int sc, m;
    kn_k4_scale_min(wb + 4u, p, sc, m);
    uint qs = wb + (KN_QT == QT_Q4_K ? 16u : 48u) + 32u * (p / 2u);
    uint sh = 4u * (p & 1u);
    int s = 0;
    [[unroll]] for (uint w = 0u; w < 8u; w++) {
        uint q = (kn_ld32(qs + 4u * w) >> sh) & 0x0f0f0f0fu;
#if KN_QT == T_Q5_K
        q |= ((kn_ld32(wb + 16u + 4u * w) >> p) & 0x01010101u) << 4;
#endif
        s += kn_dot4_us(q, xq[xa + 1u + 8u * p + w]);
    }
    uint bw = xq[xa + 65u + p]; /* bsums 2p and 2p + 1 */
    isum = sc * s;
    imin = m * (bitfieldExtract(int(bw), 0, 16) + bitfieldExtract(int(bw), 16, 16));
#else /* Q6_K */
    uint h = p / 4u, t = p % 4u;
    uint ql = wb + 64u * h + 32u * (t & 1u), qh = wb + 128u + 32u * h;
    uint shl = 4u * (t >> 1), shh = 2u * t;
    int s0 = 0, s1 = 0;
    [[unroll]] for (uint w = 0u; w < 8u; w++) {
        uint q = ((kn_ld32(ql + 4u * w) >> shl) & 0x0f0f0f0fu) |
                 (((kn_ld32(qh + 4u * w) >> shh) & 0x03030303u) << 4);
        int d4 = kn_dot4_us(q, xq[xa + 1u + 8u * p + w]);
        if (w < 4u)
            s0 += d4;
        else
            s1 += d4;
    }
    uint bw = xq[xa + 65u + p];
    s0 -= 32 * bitfieldExtract(int(bw), 0, 16);
    s1 -= 32 * bitfieldExtract(int(bw), 16, 16);
    int sc0 = bitfieldExtract(int(kn_ld8(wb + 192u + 2u * p)), 0, 8);
    int sc1 = bitfieldExtract(int(kn_ld8(wb + 193u + 2u * p)), 0, 8);
    isum = sc0 * s0 + sc1 * s1;
#endif
}

void main()
{
    uint tid = gl_LocalInvocationID.x;
    uint n0 = (pc.row0 + gl_WorkGroupID.x * R), m0 = gl_WorkGroupID.y * TM;
    uint M = n_rows();
    if (m0 >= M)
        return; /* the whole workgroup: past this expert's rows */
    uint tm = min(TM, M - m0);
    uint nb = pc.K / QB;
    /* the chain of (row cr, token ci) */
    uint cr = tid / TM, ci = tid % TM;
    bool chain = tid < R * TM && ci < tm && n0 + cr < pc.N;
    precise float acc = 0.0;
    for (uint b0 = 0u; b0 < nb; b0 += CB) {
        uint cb = min(CB, nb - b0);
        for (uint it = tid; it < ITEMS; it += 64u) {
            uint p = it % PARTS, bb = (it / PARTS) % CB, i = (it / (PARTS * CB)) % TM;
            uint r = it / (PARTS * CB * TM);
            if (bb >= cb || i >= tm || n0 + r >= pc.N)
                continue;
            uint b = b0 + bb;
            uint wb = (n0 + r) * pc.row_bytes - pc.w_base + b * WBS;
            uint xa = pc.x_off + row_of(m0 + i) * pc.x_row + b * XBW;
            int is, im;
            item(wb, xa, p, is, im);
            si[it] = is;
#ifdef HAS_MIN
            sm[it] = im;
#endif
        }
        barrier();
        if (chain) {
            for (uint bb = 0u; bb < cb; bb++) {
                uint b = b0 + bb;
                uint wb = (n0 + cr) * pc.row_bytes - pc.w_base + b * WBS;
                uint xa = pc.x_off + row_of(m0 + ci) * pc.x_row + b * XBW;
                uint first = ((cr * TM + ci) * CB + bb) * PARTS;
                int isum = 0;
                [[unroll]] for (uint p = 0u; p < PARTS; p++)
                    isum += si[first + p];
                float dx = uintBitsToFloat(xq[xa]);
#if KN_QT == T_Q6_K
                float dw = kn_f16(kn_ld16(wb + 208u));
#elif KN_QT == T_Q2_K
                float dw = kn_f16(kn_ld16(wb + 80u));
#elif KN_QT == T_Q3_K
                float dw = kn_f16(kn_ld16(wb + 108u));
#elif KN_QT == T_MXFP4
                float dw = kn_e8m0_half(kn_ld8(wb));
#else
                float dw = kn_f16(kn_ld16(wb));
#endif
                precise float s = dw * dx;
                acc = kn_fma(s, float(isum), acc);
#if KN_QT == T_Q4_1 || KN_QT == T_Q5_1
                precise float sm1 = kn_f16(kn_ld16(wb + 2u)) * dx;
                acc = kn_fma(sm1, float(int(xq[xa + 1u])), acc);
#elif defined(HAS_MIN)
                int imin = 0;
                [[unroll]] for (uint p = 0u; p < PARTS; p++)
                    imin += sm[first + p];
                precise float dm = kn_f16(kn_ld16(wb + (KN_QT == T_Q2_K ? 82u : 2u))) * dx;
                acc = kn_fma(-dm, float(imin), acc);
#endif
            }
        }
        barrier();
    }
    if (chain)
        y[pc.y_off + row_of(m0 + ci) * pc.ldy + n0 + cr] = acc;
}
