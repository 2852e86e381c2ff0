/* kn_types.glsl: GGML weight types (quant.h's enum quant_type values) and the exact
 * dequantization of one element (quant_dequantize_row, src/quant/dequant.c: the same
 * float steps in the same order). Needs KN_WORDS (kn_common.glsl) for the bytes. */

#define QT_F32 0u
#define QT_F16 1u
#define QT_Q4_0 2u
#define QT_Q4_1 3u
#define QT_Q5_0 6u
#define QT_Q5_1 7u
#define QT_Q8_0 8u
#define QT_Q2_K 10u
#define QT_Q3_K 11u
#define QT_Q4_K 12u
#define QT_Q5_K 13u
#define QT_Q6_K 14u
#define QT_IQ4_NL 20u
#define QT_IQ4_XS 23u
#define QT_BF16 30u
#define QT_MXFP4 39u

/* IQ4_NL / IQ4_XS's 16 levels (quant_iq4nl_levels). */
const int KN_IQ4_LEVELS[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53,
                                      69, 89, 113);

/* MXFP4's 16 E2M1 values doubled (quant_mxfp4_values). */
const int KN_MXFP4_VALUES[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);

/* Half the E8M0 scale, 2^(e - 128) exactly (quant_e8m0_half; subnormal for e < 2). */
float kn_e8m0_half(uint e)
{
    return uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23);
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block whose 12 scale
 * bytes start at byte address s (quant_k4_scale_min). */
void kn_k4_scale_min(uint s, uint j, out int sc, out int m)
{
    if (j < 4u) {
        sc = int(kn_ld8(s + j) & 63u);
        m = int(kn_ld8(s + j + 4u) & 63u);
    } else {
        uint b = kn_ld8(s + j + 4u);
        sc = int((b & 0x0fu) | ((kn_ld8(s + j - 4u) >> 6) << 4));
        m = int((b >> 4) | ((kn_ld8(s + j) >> 6) << 4));
    }
}

/* The sixteen 6-bit scales (offset 32) of a Q3_K block whose 12 scale bytes start at s,
 * scale j (quant_q3k_scales). */
int kn_q3k_scale(uint s, uint j)
{
    uint lo = j < 8u ? (kn_ld8(s + j) & 0x0fu) : (kn_ld8(s + j - 8u) >> 4);
    uint hi = (kn_ld8(s + 8u + j % 4u) >> (2u * (j / 4u))) & 3u;
    return int(lo | (hi << 4)) - 32;
}

/* The signed scale of sub-block j (0..7) of an IQ4_XS block at b (quant_iq4xs_scale). */
int kn_iq4xs_scale(uint b, uint j)
{
    uint sh = kn_ld16(b + 2u);
    uint lo = (kn_ld8(b + 4u + j / 2u) >> (4u * (j % 2u))) & 0x0fu;
    return int(lo | (((sh >> (2u * j)) & 3u) << 4)) - 32;
}

/* Element i of the row starting at byte address row (type t). */
float kn_dequant(uint t, uint row, uint i)
{
    if (t == QT_F32)
        return uintBitsToFloat(kn_ld32(row + 4u * i));
    if (t == QT_F16)
        return kn_f16(kn_ld16(row + 2u * i));
    if (t == QT_BF16)
        return kn_bf16(kn_ld16(row + 2u * i));
    if (t == QT_Q8_0) {
        uint b = row + (i / 32u) * 34u;
        precise float y = float(bitfieldExtract(int(kn_ld8(b + 2u + i % 32u)), 0,
                                8)) * kn_f16(kn_ld16(b));
        return y;
    }
    if (t == QT_Q4_0 || t == QT_Q4_1 || t == QT_Q5_0 || t == QT_Q5_1) {
        uint bs = t == QT_Q4_0 ? 18u : t == QT_Q4_1 ? 20u : t == QT_Q5_0 ? 22u : 24u;
        uint b = row + (i / 32u) * bs, l = i % 32u;
        bool has_m = t == QT_Q4_1 || t == QT_Q5_1, has_h = t == QT_Q5_0 || t == QT_Q5_1;
        uint qs = b + (has_m ? 4u : 2u) + (has_h ? 4u : 0u);
        uint q = (kn_ld8(qs + l % 16u) >> (l < 16u ? 0u : 4u)) & 0x0fu;
        if (has_h)
            q |= ((kn_ld32(b + (has_m ? 4u : 2u)) >> l) & 1u) << 4;
        float d = kn_f16(kn_ld16(b));
        if (has_m) {
            precise float y = d * float(q);
            y = y + kn_f16(kn_ld16(b + 2u));
            return y;
        }
        precise float y = d * float(int(q) - (has_h ? 16 : 8));
        return y;
    }
    if (t == QT_Q4_K || t == QT_Q5_K) {
        uint bs = t == QT_Q4_K ? 144u : 176u;
        uint b = row + (i / 256u) * bs, v = i % 256u, j = v / 32u, l = v % 32u;
        int sc, m;
        kn_k4_scale_min(b + 4u, j, sc, m);
        uint qs = b + (t == QT_Q4_K ? 16u : 48u);
        uint q = (kn_ld8(qs + (v / 64u) * 32u + l) >> (4u * (j & 1u))) & 0x0fu;
        if (t == QT_Q5_K)
            q |= ((kn_ld8(b + 16u + l) >> j) & 1u) << 4;
        precise float dl = kn_f16(kn_ld16(b)) * float(sc);
        precise float ml = kn_f16(kn_ld16(b + 2u)) * float(m);
        precise float y = dl * float(q);
        y = y - ml;
        return y;
    }
    if (t == QT_Q6_K) {
        uint b = row + (i / 256u) * 210u, v = i % 256u, h = v / 128u, r = v % 128u;
        uint lo = (kn_ld8(b + h * 64u + r % 64u) >> (4u * (r / 64u))) & 0x0fu;
        uint hi = (kn_ld8(b + 128u + h * 32u + r % 32u) >> (2u * (r / 32u))) & 3u;
        int sc = bitfieldExtract(int(kn_ld8(b + 192u + v / 16u)), 0, 8);
        precise float dl = kn_f16(kn_ld16(b + 208u)) * float(sc);
        precise float y = dl * float(int(lo | (hi << 4)) - 32);
        return y;
    }
    if (t == QT_Q2_K) {
        uint b = row + (i / 256u) * 84u, v = i % 256u;
        uint sc = kn_ld8(b + v / 16u);
        precise float dl = kn_f16(kn_ld16(b + 80u)) * float(sc & 0x0fu);
        precise float ml = kn_f16(kn_ld16(b + 82u)) * float(sc >> 4);
        uint q = (kn_ld8(b + 16u + (v / 128u) * 32u + v % 32u) >> (2u * ((v % 128u) / 32u))) & 3u;
        precise float y = dl * float(q);
        y = y - ml;
        return y;
    }
    if (t == QT_Q3_K) {
        uint b = row + (i / 256u) * 110u, v = i % 256u;
        precise float dl = kn_f16(kn_ld16(b + 108u)) * float(kn_q3k_scale(b + 96u, v / 16u));
        uint q = (kn_ld8(b + 32u + (v / 128u) * 32u + v % 32u) >> (2u * ((v % 128u) / 32u))) & 3u;
        uint h = (kn_ld8(b + v % 32u) >> (v / 32u)) & 1u;
        precise float y = dl * float(int(q) - (h != 0u ? 0 : 4));
        return y;
    }
    if (t == QT_IQ4_NL) {
        uint b = row + (i / 32u) * 18u, l = i % 32u;
        uint q = (kn_ld8(b + 2u + l % 16u) >> (l < 16u ? 0u : 4u)) & 0x0fu;
        precise float y = kn_f16(kn_ld16(b)) * float(KN_IQ4_LEVELS[q]);
        return y;
    }
    if (t == QT_MXFP4) {
        uint b = row + (i / 32u) * 17u, l = i % 32u;
        uint q = (kn_ld8(b + 1u + l % 16u) >> (l < 16u ? 0u : 4u)) & 0x0fu;
        precise float y = float(KN_MXFP4_VALUES[q]) * kn_e8m0_half(kn_ld8(b));
        return y;
    }
    if (t == QT_IQ4_XS) {
        uint b = row + (i / 256u) * 136u, v = i % 256u, s = v / 32u, l = v % 32u;
        precise float dl = kn_f16(kn_ld16(b)) * float(kn_iq4xs_scale(b, s));
        uint q = (kn_ld8(b + 8u + 16u * s + l % 16u) >> (l < 16u ? 0u : 4u)) & 0x0fu;
        precise float y = dl * float(KN_IQ4_LEVELS[q]);
        return y;
    }
    return 0.0;
}
