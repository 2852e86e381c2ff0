/* kern_testutil.h: random weights in every block layout and a float64 dequantizer written
 * independently of the kernels, for the kernel tests. */
#ifndef KN_KERN_TESTUTIL_H
#define KN_KERN_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static uint64_t tu_state = 0x9e3779b97f4a7c15ull;

static inline uint64_t tu_next(void)
{
    uint64_t z = (tu_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static inline float tu_uniform(void)
{
    return (float)((double)(tu_next() >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static inline void tu_bytes(void *p, size_t n)
{
    uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)tu_next();
}

/* A sane f16 scale: magnitude in [lo, 2 lo), random sign if signed_ok. */
static inline kn_f16 tu_scale(float lo, int signed_ok)
{
    float v = lo * (1.0f + 0.5f * (tu_uniform() + 1.0f));
    if (signed_ok && (tu_next() & 1))
        v = -v;
    return quant_f32_to_f16(v);
}

static inline void tu_put_f16(void *p, kn_f16 h) { memcpy(p, &h, 2); }

/* Fills N rows of K elements of type t with random valid data (buf: N * row bytes). */
static inline void tu_random_weights(enum quant_type t, int64_t N, int64_t K, void *buf)
{
    uint64_t rb;
    quant_row_size(t, (uint64_t)K, &rb);
    uint8_t *p = buf;
    size_t total = (size_t)N * rb;
    switch (t) {
    case QT_F32:
        for (size_t i = 0; i < total / 4; i++) {
            float v = tu_uniform();
            memcpy(p + 4 * i, &v, 4);
        }
        return;
    case QT_F16:
        for (size_t i = 0; i < total / 2; i++)
            tu_put_f16(p + 2 * i, quant_f32_to_f16(tu_uniform()));
        return;
    case QT_BF16:
        for (size_t i = 0; i < total / 2; i++) {
            kn_bf16 h = quant_f32_to_bf16(tu_uniform());
            memcpy(p + 2 * i, &h, 2);
        }
        return;
    default: break;
    }
    tu_bytes(p, total);
    const struct quant_type_info *ti = quant_type_info(t);
    size_t nblocks = total / ti->type_size;
    for (size_t b = 0; b < nblocks; b++) {
        uint8_t *blk = p + b * ti->type_size;
        switch (t) {
        case QT_Q8_0: case QT_Q4_0: case QT_Q5_0:
            tu_put_f16(blk, tu_scale(0.01f, 1));
            break;
        case QT_Q4_1: case QT_Q5_1:
            tu_put_f16(blk, tu_scale(0.01f, 1));
            tu_put_f16(blk + 2, tu_scale(0.05f, 1));
            break;
        case QT_Q4_K: case QT_Q5_K:
            tu_put_f16(blk, tu_scale(0.001f, 1));
            tu_put_f16(blk + 2, tu_scale(0.001f, 1));
            break;
        case QT_Q6_K:
            tu_put_f16(blk + offsetof(struct block_q6_K, d), tu_scale(0.001f, 1));
            break;
        case QT_Q2_K:
            tu_put_f16(blk + offsetof(struct block_q2_K, d), tu_scale(0.001f, 1));
            tu_put_f16(blk + offsetof(struct block_q2_K, dmin), tu_scale(0.001f, 1));
            break;
        case QT_Q3_K:
            tu_put_f16(blk + offsetof(struct block_q3_K, d), tu_scale(0.001f, 1));
            break;
        case QT_IQ4_NL:
            tu_put_f16(blk, tu_scale(0.0001f, 1));
            break;
        case QT_IQ4_XS:
            tu_put_f16(blk, tu_scale(0.0001f, 1));
            break;
        case QT_MXFP4:
            blk[0] = (uint8_t)(118 + tu_next() % 8); /* 2^-10 .. 2^-3 */
            break;
        default: break;
        }
    }
}

static inline double tu_h(const kn_f16 *p)
{
    kn_f16 h;
    memcpy(&h, p, 2);
    return (double)quant_f16_to_f32(h);
}

/* The IQ4_NL / IQ4_XS levels, written out again here (the format's table). */
static const int tu_iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

static const int tu_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* Dequantizes one row: w[k] = wa[k] + wb[k], wb the min/offset part (0 for types without
 * one); the parts are kept apart for the error bound. */
static inline void tu_dequant_row(enum quant_type t, const void *row, int64_t K, double *wa, double *wb)
{
    const uint8_t *p = row;
    for (int64_t k = 0; k < K; k++)
        wb[k] = 0.0;
    switch (t) {
    case QT_F32:
        for (int64_t k = 0; k < K; k++) {
            float v;
            memcpy(&v, p + 4 * k, 4);
            wa[k] = v;
        }
        return;
    case QT_F16:
        for (int64_t k = 0; k < K; k++)
            wa[k] = tu_h((const kn_f16 *)(p + 2 * k));
        return;
    case QT_BF16:
        for (int64_t k = 0; k < K; k++) {
            kn_bf16 h;
            memcpy(&h, p + 2 * k, 2);
            wa[k] = quant_bf16_to_f32(h);
        }
        return;
    default: break;
    }
    for (int64_t b = 0; b < K / 32 && quant_type_info(t)->block_size == 32; b++) {
        double *o = wa + 32 * b, *om = wb + 32 * b;
        if (t == QT_Q8_0) {
            const struct block_q8_0 *x = (const void *)(p + b * 34);
            for (int i = 0; i < 32; i++)
                o[i] = tu_h(&x->d) * x->qs[i];
        } else if (t == QT_Q4_0 || t == QT_Q4_1) {
            const uint8_t *qs = p + b * (t == QT_Q4_0 ? 18 : 20) + (t == QT_Q4_0 ? 2 : 4);
            const kn_f16 *d = (const void *)(p + b * (t == QT_Q4_0 ? 18 : 20));
            for (int i = 0; i < 32; i++) {
                int q = i < 16 ? (qs[i] & 15) : (qs[i - 16] >> 4);
                if (t == QT_Q4_0) {
                    o[i] = tu_h(d) * (q - 8);
                } else {
                    o[i] = tu_h(d) * q;
                    om[i] = tu_h(d + 1);
                }
            }
        } else if (t == QT_Q5_0 || t == QT_Q5_1) {
            size_t bs = t == QT_Q5_0 ? 22 : 24, hoff = t == QT_Q5_0 ? 2 : 4;
            const uint8_t *blk = p + b * bs;
            const uint8_t *qh = blk + hoff, *qs = blk + hoff + 4;
            uint32_t h = qh[0] | qh[1] << 8 | qh[2] << 16 | (uint32_t)qh[3] << 24;
            for (int i = 0; i < 32; i++) {
                int q = (i < 16 ? (qs[i] & 15) : (qs[i - 16] >> 4)) | (int)((h >> i) & 1) << 4;
                if (t == QT_Q5_0) {
                    o[i] = tu_h((const void *)blk) * (q - 16);
                } else {
                    o[i] = tu_h((const void *)blk) * q;
                    om[i] = tu_h((const void *)(blk + 2));
                }
            }
        } else if (t == QT_MXFP4) {
            /* e (E8M0) | qs[16]; the values are doubled, so the scale is 2^(e - 128) */
            const uint8_t *blk = p + b * 17;
            double d = ldexp(1.0, blk[0] - 128);
            for (int i = 0; i < 32; i++) {
                int q = i < 16 ? (blk[1 + i] & 15) : (blk[1 + i - 16] >> 4);
                o[i] = d * tu_mxfp4_values[q];
            }
        } else if (t == QT_IQ4_NL) {
            const uint8_t *blk = p + b * 18;
            for (int i = 0; i < 32; i++) {
                int q = i < 16 ? (blk[2 + i] & 15) : (blk[2 + i - 16] >> 4);
                o[i] = tu_h((const void *)blk) * tu_iq4_levels[q];
            }
        }
    }
    for (int64_t b = 0; b < K / 256 && quant_type_info(t)->block_size == 256; b++) {
        double *o = wa + 256 * b, *om = wb + 256 * b;
        if (t == QT_Q4_K || t == QT_Q5_K) {
            const uint8_t *blk = p + b * (t == QT_Q4_K ? 144 : 176);
            double d = tu_h((const void *)blk), dmin = tu_h((const void *)(blk + 2));
            const uint8_t *sc = blk + 4;
            const uint8_t *qh = blk + 16, *qs = blk + (t == QT_Q4_K ? 16 : 48);
            for (int i = 0; i < 256; i++) {
                int j = i / 32, l = i % 32;
                int s, m;
                if (j < 4) {
                    s = sc[j] & 63;
                    m = sc[j + 4] & 63;
                } else {
                    s = (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
                    m = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
                }
                int q = (qs[(j / 2) * 32 + l] >> (4 * (j % 2))) & 15;
                if (t == QT_Q5_K)
                    q |= ((qh[l] >> j) & 1) << 4;
                o[i] = d * s * q;
                om[i] = -dmin * m;
            }
        } else if (t == QT_Q6_K) {
            const struct block_q6_K *x = (const void *)(p + b * 210);
            double d = tu_h(&x->d);
            for (int i = 0; i < 256; i++) {
                int half = i / 128, r = i % 128, quarter = r / 32, l = r % 32;
                int lo = quarter & 1 ? x->ql[64 * half + 32 + l] : x->ql[64 * half + l];
                lo = quarter >= 2 ? lo >> 4 : lo & 15;
                int hi = (x->qh[32 * half + l] >> (2 * quarter)) & 3;
                o[i] = d * x->scales[i / 16] * ((lo | hi << 4) - 32);
            }
        } else if (t == QT_Q2_K) {
            /* scales[16] | qs[64] | d | dmin; element 128h + 32t + l: bits 2t of qs[32h + l] */
            const uint8_t *blk = p + b * 84;
            double d = tu_h((const void *)(blk + 80)), dmin = tu_h((const void *)(blk + 82));
            for (int i = 0; i < 256; i++) {
                int h = i / 128, tt = (i % 128) / 32, l = i % 32;
                int q = (blk[16 + 32 * h + l] >> (2 * tt)) & 3;
                o[i] = d * (blk[i / 16] & 15) * q;
                om[i] = -dmin * (blk[i / 16] >> 4);
            }
        } else if (t == QT_Q3_K) {
            /* hmask[32] | qs[64] | scales[12] | d; high bit set means no -4 */
            const uint8_t *blk = p + b * 110;
            const uint8_t *hm = blk, *qs = blk + 32, *sc = blk + 96;
            double d = tu_h((const void *)(blk + 108));
            for (int i = 0; i < 256; i++) {
                int h = i / 128, tt = (i % 128) / 32, l = i % 32, s = i / 16;
                int lo = s < 8 ? sc[s] & 15 : sc[s - 8] >> 4;
                int scale = (lo | ((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4) - 32;
                int q = (qs[32 * h + l] >> (2 * tt)) & 3;
                if (!((hm[l] >> (i / 32)) & 1))
                    q -= 4;
                o[i] = d * scale * q;
            }
        } else if (t == QT_IQ4_XS) {
            /* d | scales_h (u16) | scales_l[4] | qs[128] */
            const uint8_t *blk = p + b * 136;
            double d = tu_h((const void *)blk);
            unsigned sh = blk[2] | (unsigned)blk[3] << 8;
            for (int i = 0; i < 256; i++) {
                int s = i / 32, j = i % 32;
                int ls = (((blk[4 + s / 2] >> (4 * (s % 2))) & 15) | ((sh >> (2 * s)) & 3) << 4) - 32;
                int q = j < 16 ? blk[8 + 16 * s + j] & 15 : blk[8 + 16 * s + j - 16] >> 4;
                o[i] = d * ls * tu_iq4_levels[q];
            }
        }
    }
}

#endif
