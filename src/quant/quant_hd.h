/* quant_hd.h: the per-element rules of the weight formats that the CPU and a GPU share,
 * as inline functions that compile both as C17 and as CUDA (KN_HD is __host__ __device__
 * under nvcc): the f16 / bf16 / E8M0 conversions, the packed sub-block scales of the
 * K-quants and IQ4_XS, and the level tables. quant.h and types.c call these, and the
 * CUDA kernels (src/cuda/kernels) call the same functions, so a rule is written once.
 * Only <stdint.h> and <string.h>: no struct of quant.h, blocks are read as bytes. */
#ifndef KN_QUANT_QUANT_HD_H
#define KN_QUANT_QUANT_HD_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define KN_HD static inline __host__ __device__
#else
#define KN_HD static inline
#endif

/* The bytes of one block of each weight format with a kernel (values per block: 32, or
 * QK_K = 256 for the K-quants and IQ4_XS): types.c's type table, quant.h's block structs
 * (static_assert) and the CUDA kernels' table (cuk_hd.h) all read these. */
#define KN_QB_Q4_0 18
#define KN_QB_Q4_1 20
#define KN_QB_Q5_0 22
#define KN_QB_Q5_1 24
#define KN_QB_Q8_0 34
#define KN_QB_IQ4_NL 18
#define KN_QB_MXFP4 17
#define KN_QB_Q2_K 84
#define KN_QB_Q3_K 110
#define KN_QB_Q4_K 144
#define KN_QB_Q5_K 176
#define KN_QB_Q6_K 210
#define KN_QB_IQ4_XS 136

/* The IQ4_NL / IQ4_XS levels and MXFP4's doubled E2M1 values (quant.h). */
#define KN_IQ4NL_LEVELS {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
#define KN_MXFP4_VALUES {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

KN_HD float kn_hd_bits_f32(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

KN_HD uint32_t kn_hd_f32_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

/* A little-endian u16 / u32 from bytes (blocks are byte-packed, any alignment). */
KN_HD uint32_t kn_hd_u16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}
KN_HD uint32_t kn_hd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* f16 -> f32, exact (subnormals normalised, inf and NaN kept). */
KN_HD float kn_hd_f16_to_f32(uint32_t h)
{
    uint32_t sign = (h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f)
        return kn_hd_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return kn_hd_bits_f32(sign);
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400));
        man &= 0x3ff;
        return kn_hd_bits_f32(sign | ((uint32_t)(112 - e) << 23) | (man << 13));
    }
    return kn_hd_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

/* f32 -> f16, round to nearest even, overflow to infinity, NaN stays NaN (as vcvtps2ph). */
KN_HD uint16_t kn_hd_f32_to_f16(float f)
{
    uint32_t x = kn_hd_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) /* NaN: keep it quiet, keep top payload bits */
        return (uint16_t)(sign | 0x7e00 | ((absx >> 13) & 0x3ff));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* below the smallest normal f16: subnormal or zero */
        if (absx < 0x33000000u) /* < 2^-25: rounds to zero */
            return (uint16_t)sign;
        uint32_t exp = absx >> 23;
        uint32_t man = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - exp; /* 14..24 */
        uint32_t half = 1u << (shift - 1);
        uint32_t rest = man & ((1u << shift) - 1);
        uint32_t q = man >> shift;
        if (rest > half || (rest == half && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = absx + 0xfff + ((absx >> 13) & 1) - (112u << 23);
    return (uint16_t)(sign | (r >> 13));
}

KN_HD float kn_hd_bf16_to_f32(uint32_t h)
{
    return kn_hd_bits_f32(h << 16);
}

/* Half the E8M0 scale, 2^(e - 128), exactly (a subnormal for e < 2). */
KN_HD float kn_hd_e8m0_half(uint32_t e)
{
    return kn_hd_bits_f32(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block's 12 scale bytes. */
KN_HD void kn_hd_k4_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* The signed scale (-32..31) of sub-block s (0..15) of a Q3_K block's 12 scale bytes. */
KN_HD int kn_hd_q3k_scale(const uint8_t *sc, int s)
{
    int lo = s < 8 ? (sc[s] & 0x0f) : (sc[s - 8] >> 4);
    int hi = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* The signed scale (-32..31) of sub-block s (0..7) of an IQ4_XS block. */
KN_HD int kn_hd_iq4xs_scale(uint32_t scales_h, const uint8_t *scales_l, int s)
{
    return (int)((((uint32_t)scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) |
                 (((scales_h >> (2 * s)) & 3) << 4)) - 32;
}

/* ---- Q8_0 blocks (34 bytes: f16 d, int8 qs[32]), the KV cache's q8_0 rows */

/* Rounds half away from zero for |x| < 2^22 (round-to-even by 1.5 * 2^23, then the half
 * case; the sign bit copied back). Plain f32 + and - (no contraction in either build). */
KN_HD float kn_hd_round_away(float x)
{
    float a = kn_hd_bits_f32(kn_hd_f32_bits(x) & 0x7fffffffu);
    float r = (a + 12582912.0f) - 12582912.0f;
    r = r + (a - r == 0.5f ? 1.0f : 0.0f);
    return kn_hd_bits_f32(kn_hd_f32_bits(r) | (kn_hd_f32_bits(x) & 0x80000000u));
}

/* llama.cpp's Q8_0 quantizer for one block of 32: d = max|x| / 127 (stored as f16), q =
 * round-half-away(x * (1 / d)) clamped to [-127, 127] (NaN -> 0). Writes 34 bytes. */
KN_HD void kn_hd_quantize_q8_0(const float *x, uint8_t *dst)
{
    float amax = 0;
    for (int j = 0; j < 32; j++) {
        float a = kn_hd_bits_f32(kn_hd_f32_bits(x[j]) & 0x7fffffffu);
        amax = a > amax ? a : amax;
    }
    float d = amax / 127.0f;
    float id = d != 0 ? 1.0f / d : 0.0f;
    uint16_t h = kn_hd_f32_to_f16(d);
    dst[0] = (uint8_t)h;
    dst[1] = (uint8_t)(h >> 8);
    for (int j = 0; j < 32; j++) {
        float v = x[j] * id;
        /* The clamps only matter for inf/NaN input, which must not reach a cast. */
        v = v == v ? v : 0.0f;
        v = v < 127.0f ? v : 127.0f;
        v = v > -127.0f ? v : -127.0f;
        dst[2 + j] = (uint8_t)(int8_t)(int)kn_hd_round_away(v);
    }
}

/* Element i of a row of Q8_0 blocks: (float)q * d, one rounding (d widened exactly). */
KN_HD float kn_hd_q8_0_elem(const uint8_t *blocks, int64_t i)
{
    const uint8_t *b = blocks + (i / 32) * 34;
    return (float)(int8_t)b[2 + i % 32] * kn_hd_f16_to_f32(kn_hd_u16(b));
}

#endif
