/* types.c: the GGML type table and fp16/bf16 conversion. */
#include "quant.h"

#include <string.h>
#include <strings.h>

static const struct quant_type_info type_table[QT_COUNT] = {
    [QT_F32] = {"f32", 1, 4, true},
    [QT_F16] = {"f16", 1, 2, true},
    [QT_Q4_0] = {"q4_0", 32, KN_QB_Q4_0, true},
    [QT_Q4_1] = {"q4_1", 32, KN_QB_Q4_1, true},
    [QT_Q5_0] = {"q5_0", 32, KN_QB_Q5_0, true},
    [QT_Q5_1] = {"q5_1", 32, KN_QB_Q5_1, true},
    [QT_Q8_0] = {"q8_0", 32, KN_QB_Q8_0, true},
    [QT_Q8_1] = {"q8_1", 32, 36, false},
    [QT_Q2_K] = {"q2_K", 256, KN_QB_Q2_K, true},
    [QT_Q3_K] = {"q3_K", 256, KN_QB_Q3_K, true},
    [QT_Q4_K] = {"q4_K", 256, KN_QB_Q4_K, true},
    [QT_Q5_K] = {"q5_K", 256, KN_QB_Q5_K, true},
    [QT_Q6_K] = {"q6_K", 256, KN_QB_Q6_K, true},
    [QT_Q8_K] = {"q8_K", 256, 292, false},
    [QT_IQ2_XXS] = {"iq2_xxs", 256, 66, false},
    [QT_IQ2_XS] = {"iq2_xs", 256, 74, false},
    [QT_IQ3_XXS] = {"iq3_xxs", 256, 98, false},
    [QT_IQ1_S] = {"iq1_s", 256, 50, false},
    [QT_IQ4_NL] = {"iq4_nl", 32, KN_QB_IQ4_NL, true},
    [QT_IQ3_S] = {"iq3_s", 256, 110, false},
    [QT_IQ2_S] = {"iq2_s", 256, 82, false},
    [QT_IQ4_XS] = {"iq4_xs", 256, KN_QB_IQ4_XS, true},
    [QT_I8] = {"i8", 1, 1, false},
    [QT_I16] = {"i16", 1, 2, false},
    [QT_I32] = {"i32", 1, 4, false},
    [QT_I64] = {"i64", 1, 8, false},
    [QT_F64] = {"f64", 1, 8, false},
    [QT_IQ1_M] = {"iq1_m", 256, 56, false},
    [QT_BF16] = {"bf16", 1, 2, true},
    [QT_TQ1_0] = {"tq1_0", 256, 54, false},
    [QT_TQ2_0] = {"tq2_0", 256, 66, false},
    [QT_MXFP4] = {"mxfp4", 32, KN_QB_MXFP4, true},
};

const struct quant_type_info *quant_type_info(uint32_t t)
{
    if (t >= QT_COUNT || type_table[t].name == NULL)
        return NULL;
    return &type_table[t];
}

const char *quant_type_name(uint32_t t)
{
    const struct quant_type_info *info = quant_type_info(t);
    return info ? info->name : "unknown";
}

bool quant_type_from_name(const char *name, enum quant_type *out)
{
    for (uint32_t t = 0; t < QT_COUNT; t++) {
        if (type_table[t].name && strcasecmp(type_table[t].name, name) == 0) {
            *out = (enum quant_type)t;
            return true;
        }
    }
    return false;
}

bool quant_row_size(uint32_t t, uint64_t n, uint64_t *bytes)
{
    const struct quant_type_info *info = quant_type_info(t);
    if (!info || n % info->block_size != 0)
        return false;
    uint64_t blocks = n / info->block_size;
    return !__builtin_mul_overflow(blocks, (uint64_t)info->type_size, bytes);
}

/* ---------------------------------------------------------------- half floats */

/* Exact conversion by bit manipulation (every f16 is representable in f32); the rule is
 * quant_hd.h's, which the CUDA kernels share. */
float quant_f16_to_f32(kn_f16 h)
{
    return kn_hd_f16_to_f32(h);
}

/* Round to nearest even, overflow to infinity, NaN stays NaN (as vcvtps2ph does). */
kn_f16 quant_f32_to_f16(float f)
{
    return kn_hd_f32_to_f16(f);
}

float quant_bf16_to_f32(kn_bf16 h)
{
    return kn_hd_bf16_to_f32(h);
}

kn_bf16 quant_f32_to_bf16(float f)
{
    uint32_t u = kn_hd_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (kn_bf16)((u >> 16) | 64); /* quiet NaN */
    return (kn_bf16)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}
