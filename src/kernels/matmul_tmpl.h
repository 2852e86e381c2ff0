/* matmul_tmpl.h: the SIMD matrix-product kernels, written once over a small set of vector
 * primitives that matmul_avx2.c and matmul_avx512.c define before including this file.
 * Every kernel computes the integers and float steps of docs/numerics.md "Matrix
 * products" for each output, in that order; lanes are output rows, so an output's
 * arithmetic is the same whatever M, its position in the batch, or the thread.
 *
 * The including file defines:
 *   KL            lanes per vector (16 or 8); a 16-row group is 16 / KL sub-groups
 *   KMAXT         tokens computed together (weights are unpacked once per tile), <= 4
 *   KMAXT4K       the same for Q4_K and Q5_K, <= 8 (defaults to KMAXT)
 *   KMAXTQ6       the same for Q6_K, <= 8 (defaults to KMAXT4K)
 *   KMAXT8G       tokens of a Q8_0 tile over two 16-row groups, <= 6 (0, the default: none;
 *                 only with KL == 16)
 *   KMAXT32       the same for the 32-block types (one accumulator each), <= 8
 *   KMAXT6        the same for Q2_K, Q3_K (four accumulators each), <= KMAXT
 *   KMAXT3        the same for Q3_K alone (defaults to KMAXT6)
 *   KFN(name)     the ISA-suffixed function name
 *   VI, VF        int32 and f32 vector types
 *   vi_zero() vi_set1(i) vi_add vi_sub vi_mullo vi_and vi_or vi_srli16(v,n) vi_slli16(v,n)
 *   vi_chunk(p, h)    KL dwords of a 64-byte chunk for sub-group h
 *   vi_bcast(p)       a dword at p in every lane
 *   vi_dp(acc, u, s)  acc + sum of 4 u8 x s8 products per lane (exact for u <= 128)
 *   vi_dp_q8(acc, w, s) for Q8_0 chunks (w = q XOR 0x80): acc + sum (q + KQ8_BIAS) * s
 *   KQ8_BIAS      128 if vi_dp_q8 works on q + 128, 0 if on q itself
 *   KDP_U8        1 if vi_dp is exact for every u8 (vpdpbusd), 0 if only for u <= 128
 *   vi_u8_i32(p, h)   KL bytes of a [16] u8 array for sub-group h, widened to int32
 *   vi_s8x2_i16(p, h) KL byte pairs of a [16][2] i8 array widened to int16 pairs
 *   vi_slli32(v, n) vi_srai32(v, n)  shifts of int32 lanes
 *   vi_srl16v(v, n)   int16 lanes shifted right by a run-time count
 *   vi_u8x2_i16(p, h) KL byte pairs of a [16][2] u8 array widened to int16 pairs
 *   vi_madd16(a, b)   pairwise int16 products summed to int32
 *   vi_dp16(acc, a, b) acc + vi_madd16(a, b) (vpdpwssd where there is one; not saturating)
 *   vf_zero() vf_set1(f) vf_mul vf_fma(a,b,c) vf_neg vf_cvt(VI) vf_storeu(p, v)
 *   vf_f16(p, h)      KL f16 values of a [16] f16 array, converted (exactly) to f32
 * and may define (the template has portable versions, the same integers, slower):
 *   vi_lut16(t, i)    bytes of t picked by the byte indices i (0..15) within each 16 bytes
 *                     (t holds one 16-byte table repeated): pshufb / tbl
 *   vf_bf16(p, h)     KL bf16 values of a [16] bf16 array, converted (exactly) to f32
 *   KLUT64 1 and vi_lut64(t, i): bytes of t (a 64-byte table) picked by bits 0-5 of the
 *                     byte indices i (vpermb), used where the caller of the tiles says so
 *                     (kern_isa_vbmi): a nibble's entry of the repeated 16-byte table
 *                     then needs no mask of its byte
 */

#include <stdalign.h>

#define KINL static inline __attribute__((always_inline))
/* Fully unrolls a short fixed loop, so vectors indexed by its counter stay in registers. */
#define KUNROLL _Pragma("GCC unroll 16")

/* Stores lane r of v to y[row0 + r] for the rows in [n0, n1). */
KINL void st_rows(float *y, int64_t row0, int64_t n0, int64_t n1, VF v)
{
    if (row0 >= n0 && row0 + KL <= n1) {
        vf_storeu(y + row0, v);
        return;
    }
    alignas(64) float tmp[KL];
    vf_storeu(tmp, v);
    for (int r = 0; r < KL; r++)
        if (row0 + r >= n0 && row0 + r < n1)
            y[row0 + r] = tmp[r];
}

#ifndef KMAXT4K
#define KMAXT4K KMAXT
#endif

#ifndef KMAXTQ6
#define KMAXTQ6 KMAXT4K
#endif

#ifndef KMAXT8G
#define KMAXT8G 0
#endif

#ifndef KMAXT3
#define KMAXT3 KMAXT6
#endif

#ifndef vi_dp_bc
#define vi_dp_bc(acc, u, p) vi_dp(acc, u, vi_bcast(p))
#endif

#ifndef vi_dp16
#define vi_dp16(acc, a, b) vi_add(acc, vi_madd16(a, b))
#endif

#ifndef vi_lut16
static inline VI kt_lut16(VI t, VI i)
{
    uint8_t tb[sizeof(VI)], ib[sizeof(VI)], ob[sizeof(VI)];
    memcpy(tb, &t, sizeof t);
    memcpy(ib, &i, sizeof i);
    for (size_t k = 0; k < sizeof(VI); k++)
        ob[k] = tb[(k & ~(size_t)15) + (ib[k] & 15)];
    VI o;
    memcpy(&o, ob, sizeof o);
    return o;
}
#define vi_lut16(t, i) kt_lut16(t, i)
#endif

#ifndef KLUT64
#define KLUT64 0
#endif

/* The table entries of the low (hi false) or high nibble of every byte of raw (t: a
 * 16-byte table repeated). With lut64 (where KLUT64 and the caller say so) vi_lut64
 * reads bits 0-5 of each index, which the repeats make the nibble's entry: no mask. */
KINL VI lut_nibble(VI t, VI raw, const bool hi, const bool lut64)
{
    VI i = hi ? vi_srli16(raw, 4) : raw;
#if KLUT64
    if (lut64)
        return vi_lut64(t, i);
#else
    (void)lut64;
#endif
    return vi_lut16(t, vi_and(i, vi_set1(0x0F0F0F0F)));
}

/* Q4_K/Q5_K's mins: the sums of sub-blocks 2pp and 2pp + 1 of a Q8_K block (each <= 32 *
 * 127) as an int16 pair, (bs[4pp] + bs[4pp + 1]) | (bs[4pp + 2] + bs[4pp + 3]) << 16, in
 * every lane of out[pp]. */
#ifndef vi_min_pairs
KINL void kt_min_pairs(const int16_t *bs, VI out[4])
{
    alignas(16) uint32_t pair[4];
    KUNROLL
    for (int pp = 0; pp < 4; pp++) {
        int s0 = bs[4 * pp] + bs[4 * pp + 1];
        int s1 = bs[4 * pp + 2] + bs[4 * pp + 3];
        pair[pp] = (uint32_t)(uint16_t)s0 | (uint32_t)(uint16_t)s1 << 16;
    }
    KUNROLL
    for (int pp = 0; pp < 4; pp++)
        out[pp] = vi_bcast(&pair[pp]);
}
#define vi_min_pairs(bs, out) kt_min_pairs(bs, out)
#endif

#ifndef vf_bf16
static inline VF kt_bf16(const uint8_t *p, int h)
{
    uint32_t v[KL];
    for (int r = 0; r < KL; r++)
        v[r] = (uint32_t)(p[2 * (KL * h + r)] | p[2 * (KL * h + r) + 1] << 8) << 16;
    VF o;
    memcpy(&o, v, sizeof o);
    return o;
}
#define vf_bf16(p, h) kt_bf16(p, h)
#endif

/* A table of 16 signed values as the vi_dp_q8 operand wants it (value + 128 as a byte,
 * i.e. value XOR 0x80), repeated to 64 bytes so that vi_chunk of any sub-group loads it
 * and so that vi_lut64, which reads 6 bits of an index, finds a nibble's entry whatever
 * bits 4 and 5 hold. */
KINL VI s8_table(const int8_t v[16])
{
    alignas(64) uint8_t tb[64];
    for (int i = 0; i < 64; i++)
        tb[i] = (uint8_t)((uint8_t)v[i % 16] ^ 0x80);
    return vi_chunk(tb, 0);
}

/* The IQ4 level table. */
KINL VI iq4_table(void)
{
    return s8_table(quant_iq4nl_levels);
}

static inline uint32_t ld32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Software prefetch: every line of the group-block pf bytes past p, or nothing where pf
 * is 0 (packed_rows: kern_prefetch_bytes on a group's first pass, where its weights come
 * from memory). It changes when bytes arrive, never a value. */
KINL void kt_prefetch(const uint8_t *p, const size_t gbb, size_t pf)
{
    if (!pf)
        return;
    /* A loop, about one prefetch a cycle: unrolled, the burst of prefetches at the
     * block's start held up its loads (Zen 5, Q5_K from memory: 75-83% of the read
     * against 101-106%). */
    _Pragma("GCC unroll 1")
    for (size_t l = 0; l < gbb; l += 64)
        __builtin_prefetch(p + pf + l);
}

/* pf for a row group's next pass over its weights: on its first they come from memory,
 * after that from the caches (no prefetch). */
KINL size_t kt_pass_prefetch(bool *first_pass, size_t pf)
{
    size_t r = *first_pass ? pf : 0;
    *first_pass = false;
    return r;
}

/* ---------------------------------------------------------------- 32-blocks */

/* Bytes of a Q8_0 group-block (16 f16 scales, then 8 chunks of 64): repack.c's layout. */
#define KT_Q8_0_GBB 544

/* One sub-group (KL rows) of one 16-row group, tokens [m0, m0 + nt), every block. */
KINL void tile_q32(const enum quant_type t, const uint8_t *gp, int64_t nb, int h,
                   const struct kern_act *a, int64_t m0, const int nt, float *y, int64_t ldy,
                   int64_t row0, int64_t n0, int64_t n1, const bool lut64, size_t pf)
{
    const bool has_min = t == QT_Q4_1 || t == QT_Q5_1;
    const bool has_hb = t == QT_Q5_0 || t == QT_Q5_1;
    /* Q8_0, IQ4_NL and MXFP4 values are signed bytes (stored or looked up as value
     * XOR 0x80) */
    const bool lookup = t == QT_IQ4_NL || t == QT_MXFP4;
    const bool sbyte = t == QT_Q8_0 || lookup;
    const int off = sbyte ? KQ8_BIAS : t == QT_Q4_0 ? 8 : t == QT_Q5_0 ? 16 : 0;
    const size_t gbb = t == QT_Q8_0 ? KT_Q8_0_GBB : t == QT_Q4_0 || lookup ? 288
                     : t == QT_Q4_1 ? 320 : t == QT_Q5_0 ? 352 : 384;
    const VI lut = t == QT_IQ4_NL ? iq4_table() : t == QT_MXFP4 ? s8_table(quant_mxfp4_values)
                                                                 : vi_zero();
    const struct kern_block_q8f *xr[KMAXT32];
    VF acc[KMAXT32];
    /* With 4 or more tokens their chains overlap; fewer split each token's sum in two. */
    const bool one_chain = nt >= 4;
    KUNROLL
    for (int i = 0; i < nt; i++) {
        xr[i] = (const void *)((const uint8_t *)a->q + (size_t)(m0 + i) * a->row_bytes);
        acc[i] = vf_zero();
    }
    const VI m4 = vi_set1(0x0F0F0F0F), m10 = vi_set1(0x10101010);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = gp + (size_t)b * gbb;
        kt_prefetch(p, gbb, pf);
        VF dw = t == QT_MXFP4 ? vf_bf16(p, h) : vf_f16(p, h), dm = vf_zero();
        const uint8_t *q = p + 32;
        if (has_min) {
            dm = vf_f16(q, h);
            q += 32;
        }
        VI v[8];
        int xo[8];
        if (t == QT_Q8_0) {
            KUNROLL
            for (int c = 0; c < 8; c++) {
                v[c] = vi_chunk(q + 64 * c, h);
                xo[c] = 4 * c;
            }
        } else {
            KUNROLL
            for (int c = 0; c < 4; c++) {
                VI raw = vi_chunk(q + 64 * c, h);
                if (lookup) {
                    v[c] = lut_nibble(lut, raw, false, lut64);
                    v[4 + c] = lut_nibble(lut, raw, true, lut64);
                } else {
                    v[c] = vi_and(raw, m4);
                    v[4 + c] = vi_and(vi_srli16(raw, 4), m4);
                }
                xo[c] = 4 * c;
                xo[4 + c] = 16 + 4 * c;
            }
            if (has_hb) {
                VI hb = vi_chunk(q + 256, h);
                v[0] = vi_or(v[0], vi_and(vi_slli16(hb, 4), m10));
                v[1] = vi_or(v[1], vi_and(vi_slli16(hb, 3), m10));
                v[2] = vi_or(v[2], vi_and(vi_slli16(hb, 2), m10));
                v[3] = vi_or(v[3], vi_and(vi_slli16(hb, 1), m10));
                v[4] = vi_or(v[4], vi_and(hb, m10));
                v[5] = vi_or(v[5], vi_and(vi_srli16(hb, 1), m10));
                v[6] = vi_or(v[6], vi_and(vi_srli16(hb, 2), m10));
                v[7] = vi_or(v[7], vi_and(vi_srli16(hb, 3), m10));
            }
        }
        KUNROLL
        for (int i = 0; i < nt; i++) {
            const struct kern_block_q8f *xb = &xr[i][b];
            /* The offset's exact term starts the chain (the same int32 sum as
             * subtracting it at the end: no overflow, |off * s| <= 128 * 32 * 127). */
            VI d0 = off ? vi_set1(-off * xb->s) : vi_zero(), d1 = vi_zero();
            KUNROLL
            for (int c = 0; c < 8; c += 2) {
                if (sbyte) {
                    d0 = vi_dp_q8(d0, v[c], vi_bcast(xb->qs + xo[c]));
                    if (one_chain)
                        d0 = vi_dp_q8(d0, v[c + 1], vi_bcast(xb->qs + xo[c + 1]));
                    else
                        d1 = vi_dp_q8(d1, v[c + 1], vi_bcast(xb->qs + xo[c + 1]));
                } else {
                    d0 = vi_dp(d0, v[c], vi_bcast(xb->qs + xo[c]));
                    if (one_chain)
                        d0 = vi_dp(d0, v[c + 1], vi_bcast(xb->qs + xo[c + 1]));
                    else
                        d1 = vi_dp(d1, v[c + 1], vi_bcast(xb->qs + xo[c + 1]));
                }
            }
            VI isum = one_chain ? d0 : vi_add(d0, d1);
            VF dx = vf_set1(xb->d);
            acc[i] = vf_fma(vf_mul(dw, dx), vf_cvt(isum), acc[i]);
            if (has_min)
                acc[i] = vf_fma(vf_mul(dm, dx), vf_set1((float)xb->s), acc[i]);
        }
    }
    KUNROLL
    for (int i = 0; i < nt; i++)
        st_rows(y + (m0 + i) * ldy, row0, n0, n1, acc[i]);
}

#if KMAXT8G
/* Q8_0 over two 16-row groups at once (group-blocks gp0 and gp1, rows row0a and row0b),
 * tokens [m0, m0 + nt): each activation broadcast serves both groups' vi_dp_q8, which
 * halves the broadcasts per multiply-add. Per output the integers and float steps of
 * tile_q32 (the offset's term starts the chain). */
KINL void tile_q8_2g(const uint8_t *gp0, const uint8_t *gp1, int64_t nb,
                     const struct kern_act *a, int64_t m0, const int nt, float *y, int64_t ldy,
                     int64_t row0a, int64_t row0b, int64_t n0, int64_t n1, size_t pf)
{
    const size_t gbb = KT_Q8_0_GBB;
    const struct kern_block_q8f *xr[KMAXT8G];
    VF acc0[KMAXT8G], acc1[KMAXT8G];
    KUNROLL
    for (int i = 0; i < nt; i++) {
        xr[i] = (const void *)((const uint8_t *)a->q + (size_t)(m0 + i) * a->row_bytes);
        acc0[i] = acc1[i] = vf_zero();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p0 = gp0 + (size_t)b * gbb, *p1 = gp1 + (size_t)b * gbb;
        kt_prefetch(p0, gbb, pf);
        kt_prefetch(p1, gbb, pf);
        VI d0[KMAXT8G], d1[KMAXT8G];
        KUNROLL
        for (int i = 0; i < nt; i++)
            d0[i] = d1[i] = KQ8_BIAS ? vi_set1(-KQ8_BIAS * xr[i][b].s) : vi_zero();
        KUNROLL
        for (int c = 0; c < 8; c++) {
            VI w0 = vi_chunk(p0 + 32 + 64 * c, 0), w1 = vi_chunk(p1 + 32 + 64 * c, 0);
            KUNROLL
            for (int i = 0; i < nt; i++) {
                VI xv = vi_bcast(xr[i][b].qs + 4 * c);
                d0[i] = vi_dp_q8(d0[i], w0, xv);
                d1[i] = vi_dp_q8(d1[i], w1, xv);
            }
        }
        VF dw0 = vf_f16(p0, 0), dw1 = vf_f16(p1, 0);
        KUNROLL
        for (int i = 0; i < nt; i++) {
            VF dx = vf_set1(xr[i][b].d);
            acc0[i] = vf_fma(vf_mul(dw0, dx), vf_cvt(d0[i]), acc0[i]);
            acc1[i] = vf_fma(vf_mul(dw1, dx), vf_cvt(d1[i]), acc1[i]);
        }
    }
    KUNROLL
    for (int i = 0; i < nt; i++) {
        st_rows(y + (m0 + i) * ldy, row0a, n0, n1, acc0[i]);
        st_rows(y + (m0 + i) * ldy, row0b, n0, n1, acc1[i]);
    }
}
#endif

/* ---------------------------------------------------------------- Q4_K, Q5_K */

/* The mins: (m_2p, m_2p+1) times the pair of sub-block sums of the activation (each
 * <= 32 * 127, an int16) in one vi_dp16, the pairs built by vi_min_pairs. */
KINL void tile_q45k(const enum quant_type t, const uint8_t *gp, int64_t nb, int h,
                    const struct kern_act *a, int64_t m0, const int nt, float *y, int64_t ldy,
                    int64_t row0, int64_t n0, int64_t n1, size_t pf)
{
    const bool five = t == QT_Q5_K;
    const size_t gbb = five ? 2880 : 2368;
    const struct block_q8_K *xr[KMAXT4K];
    VF acc[KMAXT4K];
    KUNROLL
    for (int i = 0; i < nt; i++) {
        xr[i] = (const void *)((const uint8_t *)a->q + (size_t)(m0 + i) * a->row_bytes);
        acc[i] = vf_zero();
    }
    const VI m4 = vi_set1(0x0F0F0F0F), m10 = vi_set1(0x10101010);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = gp + (size_t)b * gbb;
        kt_prefetch(p, gbb, pf);
        const uint8_t *scp = p + 64, *mp = p + 192, *qh = p + 320, *qs = p + 320 + (five ? 512 : 0);
        VI isum[KMAXT4K];
        KUNROLL
        for (int i = 0; i < nt; i++)
            isum[i] = vi_zero();
        /* Not unrolled: each pass's accumulators then stay in registers. */
        for (int c = 0; c < 4; c++) {
            VI dlo[KMAXT4K], dhi[KMAXT4K];
            KUNROLL
            for (int i = 0; i < nt; i++)
                dlo[i] = dhi[i] = vi_zero();
            KUNROLL
            for (int tq = 0; tq < 8; tq++) {
                VI raw = vi_chunk(qs + 64 * (8 * c + tq), h);
                VI lo = vi_and(raw, m4), hi = vi_and(vi_srli16(raw, 4), m4);
                if (five) {
                    /* Bit 2c of each qh byte -> bit 4 of the low value, bit 2c+1 -> high. */
                    VI hb = vi_srl16v(vi_chunk(qh + 64 * tq, h), 2 * c);
                    lo = vi_or(lo, vi_and(vi_slli16(hb, 4), m10));
                    hi = vi_or(hi, vi_and(vi_slli16(hb, 3), m10));
                }
                KUNROLL
                for (int i = 0; i < nt; i++) {
                    const int8_t *xq = xr[i][b].qs + 64 * c + 4 * tq;
                    dlo[i] = vi_dp_bc(dlo[i], lo, xq);
                    dhi[i] = vi_dp_bc(dhi[i], hi, xq + 32);
                }
            }
            VI sl = vi_u8_i32(scp + 16 * (2 * c), h), sh = vi_u8_i32(scp + 16 * (2 * c + 1), h);
            KUNROLL
            for (int i = 0; i < nt; i++)
                isum[i] = vi_add(isum[i], vi_add(vi_mullo(dlo[i], sl), vi_mullo(dhi[i], sh)));
        }
        VF dw = vf_f16(p, h), dmin = vf_f16(p + 32, h);
        VI mins[4];
        KUNROLL
        for (int pp = 0; pp < 4; pp++)
            mins[pp] = vi_u8x2_i16(mp + 32 * pp, h);
        KUNROLL
        for (int i = 0; i < nt; i++) {
            const struct block_q8_K *xb = &xr[i][b];
            VI pairs[4];
            vi_min_pairs(xb->bsums, pairs);
            VI imin = vi_zero();
            KUNROLL
            for (int pp = 0; pp < 4; pp++)
                imin = vi_dp16(imin, mins[pp], pairs[pp]);
            VF dx = vf_set1(xb->d);
            acc[i] = vf_fma(vf_mul(dw, dx), vf_cvt(isum[i]), acc[i]);
            acc[i] = vf_fma(vf_neg(vf_mul(dmin, dx)), vf_cvt(imin), acc[i]);
        }
    }
    KUNROLL
    for (int i = 0; i < nt; i++)
        st_rows(y + (m0 + i) * ldy, row0, n0, n1, acc[i]);
}

/* The four fields t = 0..3 of a chunk (values v0..v3) times one token's activations
 * xq + 32 t, into its four sums (Q2_K, Q3_K: elements 32 t apart in the block). */
KINL void dp_fields(VI *d0, VI *d1, VI *d2, VI *d3, VI v0, VI v1, VI v2, VI v3, const int8_t *xq)
{
    *d0 = vi_dp_bc(*d0, v0, xq);
    *d1 = vi_dp_bc(*d1, v1, xq + 32);
    *d2 = vi_dp_bc(*d2, v2, xq + 64);
    *d3 = vi_dp_bc(*d3, v3, xq + 96);
}

/* ---------------------------------------------------------------- Q6_K */

/* A sub-block at a time: triple j (repack.c) holds its 16 elements as four values of 4,
 * read once, in memory order, and unpacked once for every token of the tile; a token's
 * four products go to one sum, times the sub-block's scale. The -32 offset is one exact
 * term per scale pair: isum = sum_j sc_j dp_j - sum_p (32 sc_2p, 32 sc_2p+1) . (bsum_2p,
 * bsum_2p+1), each 32 sc an int16 (<= 4096). */
KINL void tile_q6k(const uint8_t *gp, int64_t nb, int h, const struct kern_act *a, int64_t m0,
                   const int nt, float *y, int64_t ldy, int64_t row0, int64_t n0, int64_t n1,
                   size_t pf)
{
    const size_t gbb = 3360;
    const struct block_q8_K *xr[KMAXTQ6];
    VF acc[KMAXTQ6];
    /* With 4 or more tokens their chains overlap; fewer split each token's sum in two. */
    const bool one_chain = nt >= 4;
    KUNROLL
    for (int i = 0; i < nt; i++) {
        xr[i] = (const void *)((const uint8_t *)a->q + (size_t)(m0 + i) * a->row_bytes);
        acc[i] = vf_zero();
    }
    const VI m3f = vi_set1(0x3F3F3F3F), m03 = vi_set1(0x03030303), m0c = vi_set1(0x0C0C0C0C),
             m30 = vi_set1(0x30303030);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = gp + (size_t)b * gbb;
        kt_prefetch(p, gbb, pf);
        const uint8_t *scp = p + 32, *qv = p + 288;
        VI isum[KMAXTQ6];
        KUNROLL
        for (int i = 0; i < nt; i++)
            isum[i] = vi_zero();
        /* Not unrolled: each pass's sums then stay in registers. */
        for (int pr = 0; pr < 8; pr++) {
            const VI sp = vi_s8x2_i16(scp + 32 * pr, h); /* (sc_2p, sc_2p+1) per row */
            KUNROLL
            for (int e = 0; e < 2; e++) {
                const uint8_t *c = qv + 192 * (2 * pr + e);
                VI ca = vi_chunk(c, h), cb = vi_chunk(c + 64, h), cc = vi_chunk(c + 128, h);
                VI v0 = vi_and(ca, m3f), v1 = vi_and(cb, m3f), v2 = vi_and(cc, m3f);
                VI v3 = vi_or(vi_or(vi_and(vi_srli16(ca, 6), m03), vi_and(vi_srli16(cb, 4), m0c)),
                              vi_and(vi_srli16(cc, 2), m30));
                VI sc = e ? vi_srai32(sp, 16) : vi_srai32(vi_slli32(sp, 16), 16);
                KUNROLL
                for (int i = 0; i < nt; i++) {
                    const int8_t *xq = xr[i][b].qs + 16 * (2 * pr + e);
                    VI d0 = vi_dp_bc(vi_zero(), v0, xq);
                    if (one_chain) {
                        d0 = vi_dp_bc(d0, v1, xq + 4);
                        d0 = vi_dp_bc(d0, v2, xq + 8);
                        d0 = vi_dp_bc(d0, v3, xq + 12);
                    } else {
                        VI d1 = vi_dp_bc(vi_zero(), v1, xq + 4);
                        d0 = vi_dp_bc(d0, v2, xq + 8);
                        d1 = vi_dp_bc(d1, v3, xq + 12);
                        d0 = vi_add(d0, d1);
                    }
                    isum[i] = vi_add(isum[i], vi_mullo(d0, sc));
                }
            }
            const VI sp32 = vi_slli16(sp, 5);
            KUNROLL
            for (int i = 0; i < nt; i++)
                isum[i] = vi_sub(isum[i], vi_madd16(sp32, vi_bcast(xr[i][b].bsums + 2 * pr)));
        }
        VF dw = vf_f16(p, h);
        KUNROLL
        for (int i = 0; i < nt; i++)
            acc[i] = vf_fma(vf_mul(dw, vf_set1(xr[i][b].d)), vf_cvt(isum[i]), acc[i]);
    }
    KUNROLL
    for (int i = 0; i < nt; i++)
        st_rows(y + (m0 + i) * ldy, row0, n0, n1, acc[i]);
}

/* ---------------------------------------------------------------- Q2_K, Q3_K */

/* Value t of the even (e = 0) or odd (e = 1) chunk of a Q3_K triple (repack.c): t = 1 and
 * 3 as 8 times the value, masked in place (the sums are shifted back once per half);
 * the odd chunk's t = 2 and 3 built from the top bits of all three. At most 56: exact in
 * every ISA's vi_dp. */
KINL VI q3k_value(VI ca, VI cb, VI cc, int e, int t)
{
    if (t < 2 || e == 0)
        return vi_and(e ? cc : t < 2 ? ca : cb, vi_set1(t & 1 ? 0x38383838 : 0x07070707));
    if (t == 2)
        return vi_or(vi_and(vi_srli16(ca, 6), vi_set1(0x03030303)),
                     vi_and(vi_srli16(cc, 4), vi_set1(0x04040404)));
    return vi_or(vi_and(vi_srli16(cb, 3), vi_set1(0x18181818)),
                 vi_and(vi_srli16(cc, 2), vi_set1(0x20202020)));
}

/* Chunk (h2, g) = qs[32 h2 + 4 g .. + 3] holds in bits 2t of byte i element
 * 128 h2 + 32 t + 4 g + i, in sub-block 8 h2 + 2 t + (g >= 4): the even (g < 4) or odd
 * member of scale pair 4 h2 + t. Each chunk is read once, in memory order; each token
 * keeps four partial sums (t = 0..3) per half. Q3_K's chunks come in triples (A, B, C)
 * holding the 3-bit values of the chunk pair 2q, 2q + 1 (repack.c): the sums of t = 1
 * and 3 are of 8 times the values, shifted back once per half, and the -4 offset is an
 * exact term: isum = sum_i sc_i dp_i - 4 sum_i sc_i bsum_i. Q2_K's mins go through the
 * 16-element bsums, pair by pair. */
KINL void tile_q23k(const enum quant_type t, const uint8_t *gp, int64_t nb, int h,
                    const struct kern_act *a, int64_t m0, const int nt, float *y, int64_t ldy,
                    int64_t row0, int64_t n0, int64_t n1, size_t pf)
{
    const bool two = t == QT_Q2_K;
    const size_t gbb = two ? 1344 : 1824;
    const struct block_q8_K *xr[KMAXT6];
    VF acc[KMAXT6];
    KUNROLL
    for (int i = 0; i < nt; i++) {
        xr[i] = (const void *)((const uint8_t *)a->q + (size_t)(m0 + i) * a->row_bytes);
        acc[i] = vf_zero();
    }
    const VI m3 = vi_set1(0x03030303), mf = vi_set1(0x0F);
    /* With one or two tokens (decode) Q2_K's fields stay in place where vi_dp takes any
     * unsigned byte (KDP_U8): byte & 0x0C, 0x30, 0xC0 are 4, 16 and 64 times the value,
     * and each sum of four chunks is shifted back once, exactly (one shift per token and
     * four chunks instead of three per chunk: M = 1 about 10% faster; with more tokens
     * the shifts back cost more than they save). */
    const bool in_place = KDP_U8 && two && nt <= 2;
    const VI m0c = vi_set1(0x0C0C0C0C), m30 = vi_set1(0x30303030), mc0 = vi_set1((int)0xC0C0C0C0u);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = gp + (size_t)b * gbb;
        kt_prefetch(p, gbb, pf);
        const uint8_t *scp = p + (two ? 64 : 32), *qv = scp + 256;
        VI isum[KMAXT6], corr[KMAXT6];
        KUNROLL
        for (int i = 0; i < nt; i++)
            isum[i] = corr[i] = vi_zero();
        for (int h2 = 0; h2 < 2; h2++) {
            for (int half = 0; half < 2; half++) {
                VI d[4][KMAXT6];
                KUNROLL
                for (int tt = 0; tt < 4; tt++) {
                    KUNROLL
                    for (int i = 0; i < nt; i++)
                        d[tt][i] = vi_zero();
                }
                if (two) {
                    KUNROLL
                    for (int gg = 0; gg < 4; gg++) {
                        const int g = 4 * half + gg;
                        VI raw = vi_chunk(qv + 64 * (8 * h2 + g), h);
                        VI v0 = vi_and(raw, m3);
                        VI v1 = in_place ? vi_and(raw, m0c) : vi_and(vi_srli16(raw, 2), m3);
                        VI v2 = in_place ? vi_and(raw, m30) : vi_and(vi_srli16(raw, 4), m3);
                        VI v3 = in_place ? vi_and(raw, mc0) : vi_and(vi_srli16(raw, 6), m3);
                        KUNROLL
                        for (int i = 0; i < nt; i++) {
                            const int8_t *xq = xr[i][b].qs + 128 * h2 + 4 * g;
                            dp_fields(&d[0][i], &d[1][i], &d[2][i], &d[3][i], v0, v1, v2, v3, xq);
                        }
                    }
                } else {
                    KUNROLL
                    for (int pp = 0; pp < 2; pp++) {
                        const int g = 4 * half + 2 * pp; /* the pair g, g + 1 */
                        const uint8_t *tri = qv + 192 * (4 * h2 + g / 2);
                        VI ca = vi_chunk(tri, h), cb = vi_chunk(tri + 64, h), cc = vi_chunk(tri + 128, h);
                        /* each value used at once, in the order that ends the chunks'
                         * lives soonest (the odd chunk's t = 2, 3 need all three, then C,
                         * A, B alone), so that fewer vectors are live at a time */
                        KUNROLL
                        for (int k = 0; k < 8; k++) {
                            const int e = k < 4 ? 1 : 0, tt = k < 4 ? (k + 2) & 3 : k - 4;
                            VI v = q3k_value(ca, cb, cc, e, tt);
                            KUNROLL
                            for (int i = 0; i < nt; i++)
                                d[tt][i] = vi_dp_bc(d[tt][i], v,
                                                    xr[i][b].qs + 128 * h2 + 4 * (g + e) + 32 * tt);
                        }
                    }
                }
                KUNROLL
                for (int tt = 0; tt < 4; tt++) {
                    const int pr = 4 * h2 + tt;
                    VI sc;
                    if (two) {
                        VI sp = vi_u8x2_i16(scp + 32 * pr, h); /* file bytes 2pr, 2pr+1 */
                        sc = vi_and(half ? vi_srai32(sp, 16) : sp, mf);
                    } else {
                        VI sp = vi_s8x2_i16(scp + 32 * pr, h); /* (sc_2pr, sc_2pr+1) */
                        sc = half ? vi_srai32(sp, 16) : vi_srai32(vi_slli32(sp, 16), 16);
                        if (!half) {
                            KUNROLL
                            for (int i = 0; i < nt; i++)
                                corr[i] = vi_add(corr[i], vi_madd16(sp, vi_bcast(xr[i][b].bsums + 2 * pr)));
                        }
                    }
                    KUNROLL
                    for (int i = 0; i < nt; i++) {
                        VI dv = in_place && tt ? vi_srai32(d[tt][i], 2 * tt)
                                : !two && (tt & 1) ? vi_srai32(d[tt][i], 3) : d[tt][i];
                        isum[i] = vi_add(isum[i], vi_mullo(dv, sc));
                    }
                }
            }
        }
        VF dw = vf_f16(p, h);
        if (two) {
            VF dmin = vf_f16(p + 32, h);
            VI mins[8];
            KUNROLL
            for (int pr = 0; pr < 8; pr++)
                mins[pr] = vi_srli16(vi_u8x2_i16(scp + 32 * pr, h), 4); /* (m_2pr, m_2pr+1) */
            KUNROLL
            for (int i = 0; i < nt; i++) {
                VI imin = vi_zero();
                KUNROLL
                for (int pr = 0; pr < 8; pr++)
                    imin = vi_add(imin, vi_madd16(mins[pr], vi_bcast(xr[i][b].bsums + 2 * pr)));
                VF dx = vf_set1(xr[i][b].d);
                acc[i] = vf_fma(vf_mul(dw, dx), vf_cvt(isum[i]), acc[i]);
                acc[i] = vf_fma(vf_neg(vf_mul(dmin, dx)), vf_cvt(imin), acc[i]);
            }
        } else {
            KUNROLL
            for (int i = 0; i < nt; i++) {
                isum[i] = vi_sub(isum[i], vi_slli32(corr[i], 2));
                acc[i] = vf_fma(vf_mul(dw, vf_set1(xr[i][b].d)), vf_cvt(isum[i]), acc[i]);
            }
        }
    }
    KUNROLL
    for (int i = 0; i < nt; i++)
        st_rows(y + (m0 + i) * ldy, row0, n0, n1, acc[i]);
}

/* ---------------------------------------------------------------- IQ4_XS */

/* Sub-block j (32 values): chunks 4j + t, the low nibbles elements 32j + 4t + (0..3),
 * the high ones 32j + 16 + 4t + (0..3), looked up as level XOR 0x80 and multiplied as
 * Q8_0's values are; with an unsigned offset (KQ8_BIAS) the exact term
 * KQ8_BIAS * (bsums[2j] + bsums[2j+1]) comes off each sub-block's sum before its scale. */
KINL void tile_iq4xs(const uint8_t *gp, int64_t nb, int h, const struct kern_act *a,
                     int64_t m0, const int nt, float *y, int64_t ldy, int64_t row0, int64_t n0,
                     int64_t n1, const bool lut64, size_t pf)
{
    const size_t gbb = 2208;
    const struct block_q8_K *xr[KMAXT];
    VF acc[KMAXT];
    KUNROLL
    for (int i = 0; i < nt; i++) {
        xr[i] = (const void *)((const uint8_t *)a->q + (size_t)(m0 + i) * a->row_bytes);
        acc[i] = vf_zero();
    }
    const VI lut = iq4_table();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = gp + (size_t)b * gbb;
        kt_prefetch(p, gbb, pf);
        const uint8_t *scp = p + 32, *qv = p + 160;
        VI isum[KMAXT];
        KUNROLL
        for (int i = 0; i < nt; i++)
            isum[i] = vi_zero();
        for (int j = 0; j < 8; j++) {
            VI dd[KMAXT];
            KUNROLL
            for (int i = 0; i < nt; i++)
                dd[i] = vi_zero();
            KUNROLL
            for (int tq = 0; tq < 4; tq++) {
                VI raw = vi_chunk(qv + 64 * (4 * j + tq), h);
                VI lo = lut_nibble(lut, raw, false, lut64), hi = lut_nibble(lut, raw, true, lut64);
                KUNROLL
                for (int i = 0; i < nt; i++) {
                    const int8_t *xq = xr[i][b].qs + 32 * j + 4 * tq;
                    dd[i] = vi_dp_q8(dd[i], lo, vi_bcast(xq));
                    dd[i] = vi_dp_q8(dd[i], hi, vi_bcast(xq + 16));
                }
            }
            VI sp = vi_s8x2_i16(scp + 32 * (j / 2), h);
            VI sc = j & 1 ? vi_srai32(sp, 16) : vi_srai32(vi_slli32(sp, 16), 16);
            KUNROLL
            for (int i = 0; i < nt; i++) {
                VI di = dd[i];
                if (KQ8_BIAS)
                    di = vi_sub(di, vi_set1(KQ8_BIAS * (xr[i][b].bsums[2 * j] + xr[i][b].bsums[2 * j + 1])));
                isum[i] = vi_add(isum[i], vi_mullo(di, sc));
            }
        }
        VF dw = vf_f16(p, h);
        KUNROLL
        for (int i = 0; i < nt; i++)
            acc[i] = vf_fma(vf_mul(dw, vf_set1(xr[i][b].d)), vf_cvt(isum[i]), acc[i]);
    }
    KUNROLL
    for (int i = 0; i < nt; i++)
        st_rows(y + (m0 + i) * ldy, row0, n0, n1, acc[i]);
}

/* ---------------------------------------------------------------- dispatch */

/* Runs the tile kernel of type t with a compile-time token count, so the accumulators
 * stay in registers. */
#define KTILE_CASES(CALL)                                                                  \
    switch (nt) {                                                                          \
    case 1: CALL(1); break;                                                                \
    case 2: if (KMAXT >= 2) { CALL(2); } break;                                            \
    case 3: if (KMAXT >= 3) { CALL(3); } break;                                            \
    default: if (KMAXT >= 4) { CALL(4); } break;                                           \
    }
#define KTILE_CASES6(CALL)                                                                 \
    switch (nt) {                                                                          \
    case 1: CALL(1); break;                                                                \
    case 2: if (KMAXT6 >= 2) { CALL(2); } break;                                           \
    case 3: if (KMAXT6 >= 3) { CALL(3); } break;                                           \
    default: if (KMAXT6 >= 4) { CALL(4); } break;                                          \
    }
/* The same for tiles of up to 8 tokens, at most KMAXV. */
#define KTILE_CASES8(CALL, KMAXV)                                                          \
    switch (nt) {                                                                          \
    case 1: CALL(1); break;                                                                \
    case 2: if ((KMAXV) >= 2) { CALL(2); } break;                                          \
    case 3: if ((KMAXV) >= 3) { CALL(3); } break;                                          \
    case 4: if ((KMAXV) >= 4) { CALL(4); } break;                                          \
    case 5: if ((KMAXV) >= 5) { CALL(5); } break;                                          \
    case 6: if ((KMAXV) >= 6) { CALL(6); } break;                                          \
    case 7: if ((KMAXV) >= 7) { CALL(7); } break;                                          \
    default: if ((KMAXV) >= 8) { CALL(8); } break;                                         \
    }
#define KTILE_CASES4K(CALL) KTILE_CASES8(CALL, KMAXT4K)
#define KTILE_CASESQ6(CALL) KTILE_CASES8(CALL, KMAXTQ6)
#define KTILE_CASES32(CALL) KTILE_CASES8(CALL, KMAXT32)

static void packed_q32(const enum quant_type t, const uint8_t *gp, int64_t nb, int h,
                       const struct kern_act *a, int64_t m0, int nt, float *y, int64_t ldy,
                       int64_t row0, int64_t n0, int64_t n1, bool lut64, size_t pf)
{
#define CALL_Q32(T, NT) tile_q32(T, gp, nb, h, a, m0, NT, y, ldy, row0, n0, n1, lut64, pf)
#define CALL_Q8_0(NT) CALL_Q32(QT_Q8_0, NT)
#define CALL_Q4_0(NT) CALL_Q32(QT_Q4_0, NT)
#define CALL_Q4_1(NT) CALL_Q32(QT_Q4_1, NT)
#define CALL_Q5_0(NT) CALL_Q32(QT_Q5_0, NT)
#define CALL_Q5_1(NT) CALL_Q32(QT_Q5_1, NT)
#define CALL_IQ4NL(NT) CALL_Q32(QT_IQ4_NL, NT)
#define CALL_MXFP4(NT) CALL_Q32(QT_MXFP4, NT)
    switch (t) {
    case QT_IQ4_NL: KTILE_CASES32(CALL_IQ4NL); break;
    case QT_MXFP4: KTILE_CASES32(CALL_MXFP4); break;
    case QT_Q8_0: KTILE_CASES32(CALL_Q8_0); break;
    case QT_Q4_0: KTILE_CASES32(CALL_Q4_0); break;
    case QT_Q4_1: KTILE_CASES32(CALL_Q4_1); break;
    case QT_Q5_0: KTILE_CASES32(CALL_Q5_0); break;
    default: KTILE_CASES32(CALL_Q5_1); break;
    }
}

static void packed_k(const enum quant_type t, const uint8_t *gp, int64_t nb, int h,
                     const struct kern_act *a, int64_t m0, int nt, float *y, int64_t ldy,
                     int64_t row0, int64_t n0, int64_t n1, bool lut64, size_t pf)
{
#define CALL_Q4K(NT) tile_q45k(QT_Q4_K, gp, nb, h, a, m0, NT, y, ldy, row0, n0, n1, pf)
#define CALL_Q5K(NT) tile_q45k(QT_Q5_K, gp, nb, h, a, m0, NT, y, ldy, row0, n0, n1, pf)
#define CALL_Q6K(NT) tile_q6k(gp, nb, h, a, m0, NT, y, ldy, row0, n0, n1, pf)
#define CALL_Q2K(NT) tile_q23k(QT_Q2_K, gp, nb, h, a, m0, NT, y, ldy, row0, n0, n1, pf)
#define CALL_Q3K(NT) tile_q23k(QT_Q3_K, gp, nb, h, a, m0, NT, y, ldy, row0, n0, n1, pf)
#define CALL_IQ4XS(NT) tile_iq4xs(gp, nb, h, a, m0, NT, y, ldy, row0, n0, n1, lut64, pf)
    switch (t) {
    case QT_Q4_K: KTILE_CASES4K(CALL_Q4K); break;
    case QT_Q5_K: KTILE_CASES4K(CALL_Q5K); break;
    case QT_Q6_K: KTILE_CASESQ6(CALL_Q6K); break;
    case QT_Q2_K: KTILE_CASES6(CALL_Q2K); break;
    case QT_Q3_K: KTILE_CASES6(CALL_Q3K); break;
    default: KTILE_CASES(CALL_IQ4XS); break;
    }
}

/* Rows [n0, n1) of a packed weight, every token. */
static void packed_rows(const struct kern_weight *w, const struct kern_act *a, float *y,
                        int64_t ldy, int64_t n0, int64_t n1)
{
    const struct quant_type_info *ti = quant_type_info(w->type);
    const int64_t nb = w->K / ti->block_size;
    const size_t gstride = (size_t)nb * kern_repack_group_block_bytes(w->type);
    const bool lut64 = KLUT64 && kern_isa_vbmi();
    /* A group's weights come from memory on its first pass (its first token tile, in
     * its first sub-group where there are two); later passes find them in the caches. */
    const size_t pf = kern_prefetch_bytes();
    for (int64_t g = n0 / 16; g * 16 < n1; g++) {
        const uint8_t *gp = (const uint8_t *)w->packed + (size_t)g * gstride;
        bool first_pass = true;
#if KMAXT8G
        /* Several tokens: Q8_0 groups in pairs (one token, decode, keeps one stream). */
        if (KL == 16 && w->type == QT_Q8_0 && a->M >= 4 && (g + 1) * 16 < n1) {
            for (int64_t m0 = 0; m0 < a->M; m0 += KMAXT8G) {
                const int nt = (int)(a->M - m0 < KMAXT8G ? a->M - m0 : KMAXT8G);
                const size_t pfg = kt_pass_prefetch(&first_pass, pf);
#define CALL_Q8_2G(NT) tile_q8_2g(gp, gp + gstride, nb, a, m0, NT, y, ldy, 16 * g, 16 * (g + 1), n0, n1, \
                                  pfg)
                switch (nt) {
                case 1: CALL_Q8_2G(1); break;
                case 2: if (KMAXT8G >= 2) { CALL_Q8_2G(2); } break;
                case 3: if (KMAXT8G >= 3) { CALL_Q8_2G(3); } break;
                case 4: if (KMAXT8G >= 4) { CALL_Q8_2G(4); } break;
                case 5: if (KMAXT8G >= 5) { CALL_Q8_2G(5); } break;
                default: if (KMAXT8G >= 6) { CALL_Q8_2G(6); } break;
                }
#undef CALL_Q8_2G
            }
            g++;
            continue;
        }
#endif
        for (int h = 0; h < 16 / KL; h++) {
            int64_t row0 = 16 * g + KL * h;
            if (row0 >= n1 || row0 + KL <= n0)
                continue;
            const bool q45 = w->type == QT_Q4_K || w->type == QT_Q5_K;
            const int64_t tile = ti->block_size == 32 ? KMAXT32 : w->type == QT_Q2_K ? KMAXT6
                               : w->type == QT_Q3_K ? KMAXT3 : w->type == QT_Q6_K ? KMAXTQ6
                               : q45 ? KMAXT4K : KMAXT;
            for (int64_t m0 = 0; m0 < a->M; m0 += tile) {
                int nt = (int)(a->M - m0 < tile ? a->M - m0 : tile);
                const size_t pfg = kt_pass_prefetch(&first_pass, pf);
                if (ti->block_size == 32)
                    packed_q32(w->type, gp, nb, h, a, m0, nt, y, ldy, row0, n0, n1, lut64, pfg);
                else
                    packed_k(w->type, gp, nb, h, a, m0, nt, y, ldy, row0, n0, n1, lut64, pfg);
            }
        }
    }
}
