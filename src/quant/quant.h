/* quant.h: GGML tensor types, their block layouts (byte-compatible with llama.cpp),
 * fp16/bf16 conversion, and the reference quantize/dequantize code.
 * The reference code here is part of the numerics spec (docs/numerics.md). */
#ifndef KN_QUANT_H
#define KN_QUANT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <string.h>

#include "quant_hd.h"

/* GGML type ids as stored in GGUF files. Gaps are ids that llama.cpp retired. */
enum quant_type {
    QT_F32 = 0,
    QT_F16 = 1,
    QT_Q4_0 = 2,
    QT_Q4_1 = 3,
    QT_Q5_0 = 6,
    QT_Q5_1 = 7,
    QT_Q8_0 = 8,
    QT_Q8_1 = 9,
    QT_Q2_K = 10,
    QT_Q3_K = 11,
    QT_Q4_K = 12,
    QT_Q5_K = 13,
    QT_Q6_K = 14,
    QT_Q8_K = 15,
    QT_IQ2_XXS = 16,
    QT_IQ2_XS = 17,
    QT_IQ3_XXS = 18,
    QT_IQ1_S = 19,
    QT_IQ4_NL = 20,
    QT_IQ3_S = 21,
    QT_IQ2_S = 22,
    QT_IQ4_XS = 23,
    QT_I8 = 24,
    QT_I16 = 25,
    QT_I32 = 26,
    QT_I64 = 27,
    QT_F64 = 28,
    QT_IQ1_M = 29,
    QT_BF16 = 30,
    QT_TQ1_0 = 34,
    QT_TQ2_0 = 35,
    QT_MXFP4 = 39,
    QT_COUNT = 40, /* one past the largest id */
};

struct quant_type_info {
    const char *name;     /* llama.cpp's name, e.g. "q4_K" */
    uint32_t block_size;  /* elements per block */
    uint32_t type_size;   /* bytes per block */
    bool computable;      /* Kinetic has kernels for it */
};

/* Returns the traits of type t, or NULL for an id that is not a GGML type. */
const struct quant_type_info *quant_type_info(uint32_t t);
/* Name of type t ("f32", "q4_K", ...), or "unknown". */
const char *quant_type_name(uint32_t t);
/* Parses a name (case-insensitive), returns false when unknown. */
bool quant_type_from_name(const char *name, enum quant_type *out);
/* Bytes of a row of n elements of type t; false if n is not a multiple of the
 * block size or the size overflows. */
bool quant_row_size(uint32_t t, uint64_t n, uint64_t *bytes);

/* ---------------------------------------------------------------- half floats */

typedef uint16_t kn_f16;
typedef uint16_t kn_bf16;

float quant_f16_to_f32(kn_f16 h);
kn_f16 quant_f32_to_f16(float f);   /* round to nearest even, like F16C */
float quant_bf16_to_f32(kn_bf16 h);
kn_bf16 quant_f32_to_bf16(float f); /* round to nearest even, NaN kept quiet */

/* ---------------------------------------------------------------- block layouts */

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12

struct block_q4_0 { kn_f16 d; uint8_t qs[QK4_0 / 2]; };
struct block_q4_1 { kn_f16 d, m; uint8_t qs[QK4_1 / 2]; };
struct block_q5_0 { kn_f16 d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
struct block_q5_1 { kn_f16 d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct block_q8_0 { kn_f16 d; int8_t qs[QK8_0]; };
struct block_q8_1 { kn_f16 d, s; int8_t qs[QK8_1]; };
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; kn_f16 d, dmin; };
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; kn_f16 d; };
struct block_q4_K { kn_f16 d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct block_q5_K {
    kn_f16 d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; kn_f16 d; };
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };
struct block_iq4_nl { kn_f16 d; uint8_t qs[16]; };
struct block_iq4_xs { kn_f16 d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
#define QK_MXFP4 32
/* MXFP4 (OCP microscaling): e an E8M0 exponent, 32 E2M1 values as 4-bit codes. */
struct block_mxfp4 { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; };

static_assert(sizeof(struct block_q4_0) == KN_QB_Q4_0, "q4_0 block size");
static_assert(sizeof(struct block_q4_1) == KN_QB_Q4_1, "q4_1 block size");
static_assert(sizeof(struct block_q5_0) == KN_QB_Q5_0, "q5_0 block size");
static_assert(sizeof(struct block_q5_1) == KN_QB_Q5_1, "q5_1 block size");
static_assert(sizeof(struct block_q8_0) == KN_QB_Q8_0, "q8_0 block size");
static_assert(sizeof(struct block_q8_1) == 36, "q8_1 block size");
static_assert(sizeof(struct block_q2_K) == KN_QB_Q2_K, "q2_K block size");
static_assert(sizeof(struct block_q3_K) == KN_QB_Q3_K, "q3_K block size");
static_assert(sizeof(struct block_q4_K) == KN_QB_Q4_K, "q4_K block size");
static_assert(sizeof(struct block_q5_K) == KN_QB_Q5_K, "q5_K block size");
static_assert(sizeof(struct block_q6_K) == KN_QB_Q6_K, "q6_K block size");
static_assert(sizeof(struct block_q8_K) == 292, "q8_K block size");
static_assert(sizeof(struct block_iq4_nl) == KN_QB_IQ4_NL, "iq4_nl block size");
static_assert(sizeof(struct block_iq4_xs) == KN_QB_IQ4_XS, "iq4_xs block size");
static_assert(sizeof(struct block_mxfp4) == KN_QB_MXFP4, "mxfp4 block size");

/* ---------------------------------------------------------------- reference code */

/* The 16 non-linear levels of IQ4_NL and IQ4_XS (fixed by the format): a 4-bit quant q
 * stands for quant_iq4nl_levels[q] times the (sub-)block scale. */
extern const int8_t quant_iq4nl_levels[16];
/* The 16 E2M1 values of MXFP4, doubled so they are integers (0, 0.5, 1, 1.5, 2, 3, 4, 6
 * and their negatives, times 2): code q stands for quant_mxfp4_values[q] times
 * quant_e8m0_half(e). */
extern const int8_t quant_mxfp4_values[16];

/* Half the E8M0 scale 2^(e - 127), i.e. 2^(e - 128), exactly (a subnormal for e < 2),
 * as ggml's ggml_e8m0_to_fp32_half. e = 255 (NaN in the OCP format) gives 2^127. */
static inline float quant_e8m0_half(uint8_t e)
{
    return kn_hd_e8m0_half(e);
}

/* Dequantizes n elements (a multiple of the block size) of type t from src to dst.
 * src need not be aligned. The float operations and their order are llama.cpp's, so
 * the result equals its dequantization bit for bit. Handles F32, F16, BF16, Q4_0,
 * Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4.
 * Returns false if t cannot be dequantized by this build or n is not whole blocks. */
bool quant_dequantize_row(uint32_t t, const void *src, float *dst, int64_t n);
bool quant_can_dequantize(uint32_t t);
/* Quantizes n elements of x into dst with Kinetic's reference quantizer for t: F32,
 * F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (the same bytes as llama.cpp's reference
 * quantizers), Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS (Kinetic's own scale
 * search), MXFP4 (the block maximum's exponent, nearest value). Deterministic and
 * libm-free: the same input gives the same bytes on every machine. dst need not be
 * aligned. Returns false if t cannot be produced by this build or n is not whole
 * blocks. */
bool quant_quantize_row(uint32_t t, const float *x, void *dst, int64_t n);
bool quant_can_quantize(uint32_t t);
/* The 6-bit scale and min of sub-block j (0..7) from the 12 packed scale bytes of a
 * Q4_K or Q5_K block: bytes 0..3 hold scales 0..3 and bytes 4..7 mins 0..3 in their low
 * 6 bits; sub-blocks 4..7 take their low nibbles from bytes 8..11 and their top two bits
 * from the top of bytes 0..7. Inline: the kernels call it per sub-block. */
static inline void quant_k4_scale_min(const uint8_t s[K_SCALE_SIZE], int j, int *sc, int *m)
{
    kn_hd_k4_scale_min(s, j, sc, m);
}

/* The sixteen signed sub-block scales (6 bits, offset 32: -32..31) of a Q3_K block from
 * its 12 packed bytes: the low nibbles come from bytes 0..7 (low nibble for s < 8, high
 * for s >= 8), the two high bits from byte 8 + s % 4 at bit 2 * (s / 4). */
static inline void quant_q3k_scales(const uint8_t sc[12], int out[16])
{
    for (int s = 0; s < 16; s++)
        out[s] = kn_hd_q3k_scale(sc, s);
}

/* The signed scale (6 bits, offset 32: -32..31) of sub-block s (0..7, 32 values) of an
 * IQ4_XS block: low nibble from scales_l[s / 2] (nibble s % 2), high two bits from
 * scales_h at bit 2 * s. */
static inline int quant_iq4xs_scale(uint16_t scales_h, const uint8_t scales_l[4], int s)
{
    return kn_hd_iq4xs_scale(scales_h, scales_l, s);
}

#endif
