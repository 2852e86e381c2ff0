/* dequant.c: reference dequantization of every weight format Kinetic reads.
 *
 * Each function turns blocks into floats with exactly the float operations llama.cpp's
 * reference code performs, in the same order, so the results match it bit for bit:
 * a block's scale is widened from f16, multiplied by the sub-block's integer scale
 * (K-quants), then by the integer quant, and the minimum is subtracted last.
 * Blocks are copied out with memcpy because a row inside a file need not be aligned
 * for the block struct. */
#include "quant.h"

#include <string.h>

const int8_t quant_iq4nl_levels[16] = KN_IQ4NL_LEVELS;
const int8_t quant_mxfp4_values[16] = KN_MXFP4_VALUES;

static void deq_f32(const uint8_t *src, float *y, int64_t n)
{
    memcpy(y, src, (size_t)n * sizeof(float));
}

static void deq_f16(const uint8_t *src, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        kn_f16 h;
        memcpy(&h, src + 2 * i, 2);
        y[i] = quant_f16_to_f32(h);
    }
}

static void deq_bf16(const uint8_t *src, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        kn_bf16 h;
        memcpy(&h, src + 2 * i, 2);
        y[i] = quant_bf16_to_f32(h);
    }
}

/* Q4_0: 32 values, q in 0..15 stored as nibbles (low nibbles are values 0..15, high
 * nibbles values 16..31), x = d * (q - 8). */
static void deq_q4_0(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK4_0) {
        struct block_q4_0 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_f16_to_f32(b.d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = d * (float)((b.qs[j] & 0x0f) - 8);
            y[j + QK4_0 / 2] = d * (float)((b.qs[j] >> 4) - 8);
        }
    }
}

/* Q4_1: x = d * q + m with q in 0..15. */
static void deq_q4_1(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK4_1) {
        struct block_q4_1 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_f16_to_f32(b.d), m = quant_f16_to_f32(b.m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[j] = d * (float)(b.qs[j] & 0x0f) + m;
            y[j + QK4_1 / 2] = d * (float)(b.qs[j] >> 4) + m;
        }
    }
}

/* Q5_0/Q5_1: like Q4_0/Q4_1 with a fifth bit per value; bit j of the little-endian
 * 32-bit qh belongs to value j. */
static void deq_q5_0(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK5_0) {
        struct block_q5_0 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_f16_to_f32(b.d);
        uint32_t qh = (uint32_t)b.qh[0] | (uint32_t)b.qh[1] << 8 | (uint32_t)b.qh[2] << 16 |
                      (uint32_t)b.qh[3] << 24;
        for (int j = 0; j < QK5_0 / 2; j++) {
            int q0 = (b.qs[j] & 0x0f) | (int)(((qh >> j) & 1) << 4);
            int q1 = (b.qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)(q0 - 16);
            y[j + QK5_0 / 2] = d * (float)(q1 - 16);
        }
    }
}

static void deq_q5_1(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK5_1) {
        struct block_q5_1 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_f16_to_f32(b.d), m = quant_f16_to_f32(b.m);
        uint32_t qh = (uint32_t)b.qh[0] | (uint32_t)b.qh[1] << 8 | (uint32_t)b.qh[2] << 16 |
                      (uint32_t)b.qh[3] << 24;
        for (int j = 0; j < QK5_1 / 2; j++) {
            int q0 = (b.qs[j] & 0x0f) | (int)(((qh >> j) & 1) << 4);
            int q1 = (b.qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = d * (float)q0 + m;
            y[j + QK5_1 / 2] = d * (float)q1 + m;
        }
    }
}

static void deq_q8_0(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK8_0) {
        struct block_q8_0 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_f16_to_f32(b.d);
        for (int j = 0; j < QK8_0; j++)
            y[j] = (float)b.qs[j] * d;
    }
}

/* Q2_K: 16 sub-blocks of 16. Value v uses bits 2*((v%128)/32) of qs[(v/128)*32 + v%32];
 * sub-block s = v/16 has a 4-bit scale (low nibble) and 4-bit min (high nibble):
 * x = (d * sc) * q - (dmin * m). */
static void deq_q2_K(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        struct block_q2_K b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_f16_to_f32(b.d), dmin = quant_f16_to_f32(b.dmin);
        for (int v = 0; v < QK_K; v++) {
            int s = v / 16;
            float dl = d * (float)(b.scales[s] & 0x0f);
            float ml = dmin * (float)(b.scales[s] >> 4);
            int q = (b.qs[(v / 128) * 32 + v % 32] >> (2 * ((v % 128) / 32))) & 3;
            y[v] = dl * (float)q - ml;
        }
    }
}

/* Q3_K: 2 low bits as in Q2_K, the third bit is bit v/32 of hmask[v%32]; a clear bit
 * subtracts 4: x = (d * sc) * (q - (h ? 0 : 4)). */
static void deq_q3_K(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        struct block_q3_K b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_f16_to_f32(b.d);
        int sc[16];
        quant_q3k_scales(b.scales, sc);
        for (int v = 0; v < QK_K; v++) {
            float dl = d * (float)sc[v / 16];
            int q = (b.qs[(v / 128) * 32 + v % 32] >> (2 * ((v % 128) / 32))) & 3;
            int h = (b.hmask[v % 32] >> (v / 32)) & 1;
            y[v] = dl * (float)(q - (h ? 0 : 4));
        }
    }
}

/* Q4_K: 8 sub-blocks of 32; value v is nibble (v%64)/32 of qs[(v/64)*32 + v%32];
 * x = (d * sc) * q - (dmin * m). */
static void deq_q4_K(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        struct block_q4_K b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_f16_to_f32(b.d), dmin = quant_f16_to_f32(b.dmin);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            quant_k4_scale_min(b.scales, j, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int v = j * 32 + l;
                int q = (b.qs[(v / 64) * 32 + l] >> (4 * (j & 1))) & 0x0f;
                y[v] = dl * (float)q - ml;
            }
        }
    }
}

/* Q5_K: Q4_K plus a fifth bit: bit v/32 of qh[v%32]. */
static void deq_q5_K(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        struct block_q5_K b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_f16_to_f32(b.d), dmin = quant_f16_to_f32(b.dmin);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            quant_k4_scale_min(b.scales, j, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int v = j * 32 + l;
                int q = ((b.qs[(v / 64) * 32 + l] >> (4 * (j & 1))) & 0x0f) |
                        (((b.qh[l] >> j) & 1) << 4);
                y[v] = dl * (float)q - ml;
            }
        }
    }
}

/* Q6_K: 16 sub-blocks of 16 with int8 scales. The low nibble of value v is nibble
 * (v%128)/64 of ql[(v/128)*64 + v%64]; its two high bits are bits 2*((v%128)/32) of
 * qh[(v/128)*32 + v%32]; x = (d * sc) * (q - 32). */
static void deq_q6_K(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        struct block_q6_K b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_f16_to_f32(b.d);
        for (int v = 0; v < QK_K; v++) {
            int h = v / 128, r = v % 128;
            int lo = (b.ql[h * 64 + r % 64] >> (4 * (r / 64))) & 0x0f;
            int hi = (b.qh[h * 32 + r % 32] >> (2 * (r / 32))) & 3;
            float dl = d * (float)b.scales[v / 16];
            y[v] = dl * (float)((lo | hi << 4) - 32);
        }
    }
}

static void deq_q8_K(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        struct block_q8_K b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        for (int j = 0; j < QK_K; j++)
            y[j] = b.d * (float)b.qs[j];
    }
}

static void deq_iq4_nl(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += 32) {
        struct block_iq4_nl b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_f16_to_f32(b.d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)quant_iq4nl_levels[b.qs[j] & 0x0f];
            y[j + 16] = d * (float)quant_iq4nl_levels[b.qs[j] >> 4];
        }
    }
}

/* IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (offset 32, quant_iq4xs_scale). */
static void deq_iq4_xs(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK_K) {
        struct block_iq4_xs b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_f16_to_f32(b.d);
        for (int s = 0; s < 8; s++) {
            float dl = d * (float)quant_iq4xs_scale(b.scales_h, b.scales_l, s);
            const uint8_t *qs = b.qs + 16 * s;
            for (int j = 0; j < 16; j++) {
                y[32 * s + j] = dl * (float)quant_iq4nl_levels[qs[j] & 0x0f];
                y[32 * s + j + 16] = dl * (float)quant_iq4nl_levels[qs[j] >> 4];
            }
        }
    }
}

/* MXFP4: x = value * d, d = 2^(e - 128) (the values are doubled). */
static void deq_mxfp4(const uint8_t *src, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += QK_MXFP4) {
        struct block_mxfp4 b;
        memcpy(&b, src + i * (int64_t)sizeof b, sizeof b);
        float d = quant_e8m0_half(b.e);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)quant_mxfp4_values[b.qs[j] & 0x0f] * d;
            y[j + 16] = (float)quant_mxfp4_values[b.qs[j] >> 4] * d;
        }
    }
}

bool quant_can_dequantize(uint32_t t)
{
    switch (t) {
    case QT_F32: case QT_F16: case QT_BF16: case QT_Q4_0: case QT_Q4_1: case QT_Q5_0:
    case QT_Q5_1: case QT_Q8_0: case QT_Q2_K: case QT_Q3_K: case QT_Q4_K: case QT_Q5_K:
    case QT_Q6_K: case QT_Q8_K: case QT_IQ4_NL: case QT_IQ4_XS: case QT_MXFP4:
        return true;
    default:
        return false;
    }
}

bool quant_dequantize_row(uint32_t t, const void *src, float *dst, int64_t n)
{
    const struct quant_type_info *info = quant_type_info(t);
    if (!info || !quant_can_dequantize(t) || n < 0 || n % info->block_size != 0)
        return false;
    const uint8_t *s = src;
    int64_t nb = n / info->block_size;
    switch (t) {
    case QT_F32: deq_f32(s, dst, n); break;
    case QT_F16: deq_f16(s, dst, n); break;
    case QT_BF16: deq_bf16(s, dst, n); break;
    case QT_Q4_0: deq_q4_0(s, dst, nb); break;
    case QT_Q4_1: deq_q4_1(s, dst, nb); break;
    case QT_Q5_0: deq_q5_0(s, dst, nb); break;
    case QT_Q5_1: deq_q5_1(s, dst, nb); break;
    case QT_Q8_0: deq_q8_0(s, dst, nb); break;
    case QT_Q2_K: deq_q2_K(s, dst, nb); break;
    case QT_Q3_K: deq_q3_K(s, dst, nb); break;
    case QT_Q4_K: deq_q4_K(s, dst, nb); break;
    case QT_Q5_K: deq_q5_K(s, dst, nb); break;
    case QT_Q6_K: deq_q6_K(s, dst, nb); break;
    case QT_Q8_K: deq_q8_K(s, dst, nb); break;
    case QT_IQ4_NL: deq_iq4_nl(s, dst, nb); break;
    case QT_IQ4_XS: deq_iq4_xs(s, dst, nb); break;
    case QT_MXFP4: deq_mxfp4(s, dst, nb); break;
    default: return false;
    }
    return true;
}
