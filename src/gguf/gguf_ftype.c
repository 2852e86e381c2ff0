/* gguf_ftype.c: general.file_type ids and the names llama.cpp prints for them, so
 * `kinetic info` describes a file the way llama.cpp users know it. */
#include "gguf.h"
#include "../quant/quant.h"

#include <stddef.h>

static const char *const ftype_names[] = {
    [GGUF_FTYPE_ALL_F32] = "all F32",
    [GGUF_FTYPE_MOSTLY_F16] = "F16",
    [GGUF_FTYPE_MOSTLY_Q4_0] = "Q4_0",
    [GGUF_FTYPE_MOSTLY_Q4_1] = "Q4_1",
    [GGUF_FTYPE_MOSTLY_Q8_0] = "Q8_0",
    [GGUF_FTYPE_MOSTLY_Q5_0] = "Q5_0",
    [GGUF_FTYPE_MOSTLY_Q5_1] = "Q5_1",
    [GGUF_FTYPE_MOSTLY_Q2_K] = "Q2_K - Medium",
    [GGUF_FTYPE_MOSTLY_Q3_K_S] = "Q3_K - Small",
    [GGUF_FTYPE_MOSTLY_Q3_K_M] = "Q3_K - Medium",
    [GGUF_FTYPE_MOSTLY_Q3_K_L] = "Q3_K - Large",
    [GGUF_FTYPE_MOSTLY_Q4_K_S] = "Q4_K - Small",
    [GGUF_FTYPE_MOSTLY_Q4_K_M] = "Q4_K - Medium",
    [GGUF_FTYPE_MOSTLY_Q5_K_S] = "Q5_K - Small",
    [GGUF_FTYPE_MOSTLY_Q5_K_M] = "Q5_K - Medium",
    [GGUF_FTYPE_MOSTLY_Q6_K] = "Q6_K",
    [GGUF_FTYPE_MOSTLY_IQ2_XXS] = "IQ2_XXS - 2.0625 bpw",
    [GGUF_FTYPE_MOSTLY_IQ2_XS] = "IQ2_XS - 2.3125 bpw",
    [GGUF_FTYPE_MOSTLY_Q2_K_S] = "Q2_K - Small",
    [GGUF_FTYPE_MOSTLY_IQ3_XS] = "IQ3_XS - 3.3 bpw",
    [GGUF_FTYPE_MOSTLY_IQ3_XXS] = "IQ3_XXS - 3.0625 bpw",
    [GGUF_FTYPE_MOSTLY_IQ1_S] = "IQ1_S - 1.5625 bpw",
    [GGUF_FTYPE_MOSTLY_IQ4_NL] = "IQ4_NL - 4.5 bpw",
    [GGUF_FTYPE_MOSTLY_IQ3_S] = "IQ3_S - 3.4375 bpw",
    [GGUF_FTYPE_MOSTLY_IQ3_M] = "IQ3_S mix - 3.66 bpw",
    [GGUF_FTYPE_MOSTLY_IQ2_S] = "IQ2_S - 2.5 bpw",
    [GGUF_FTYPE_MOSTLY_IQ2_M] = "IQ2_M - 2.7 bpw",
    [GGUF_FTYPE_MOSTLY_IQ4_XS] = "IQ4_XS - 4.25 bpw",
    [GGUF_FTYPE_MOSTLY_IQ1_M] = "IQ1_M - 1.75 bpw",
    [GGUF_FTYPE_MOSTLY_BF16] = "BF16",
    [GGUF_FTYPE_MOSTLY_TQ1_0] = "TQ1_0 - 1.69 bpw ternary",
    [GGUF_FTYPE_MOSTLY_TQ2_0] = "TQ2_0 - 2.06 bpw ternary",
    [GGUF_FTYPE_MOSTLY_MXFP4_MOE] = "MXFP4 MoE",
};

const char *gguf_file_type_name(uint32_t ftype)
{
    if (ftype < sizeof ftype_names / sizeof ftype_names[0] && ftype_names[ftype])
        return ftype_names[ftype];
    return NULL;
}

int64_t gguf_file_type_guess(uint32_t tensor_type)
{
    switch (tensor_type) {
    case QT_F32: return GGUF_FTYPE_ALL_F32;
    case QT_F16: return GGUF_FTYPE_MOSTLY_F16;
    case QT_BF16: return GGUF_FTYPE_MOSTLY_BF16;
    case QT_Q4_0: return GGUF_FTYPE_MOSTLY_Q4_0;
    case QT_Q4_1: return GGUF_FTYPE_MOSTLY_Q4_1;
    case QT_Q5_0: return GGUF_FTYPE_MOSTLY_Q5_0;
    case QT_Q5_1: return GGUF_FTYPE_MOSTLY_Q5_1;
    case QT_Q8_0: return GGUF_FTYPE_MOSTLY_Q8_0;
    case QT_Q2_K: return GGUF_FTYPE_MOSTLY_Q2_K;
    case QT_Q3_K: return GGUF_FTYPE_MOSTLY_Q3_K_M;
    case QT_Q4_K: return GGUF_FTYPE_MOSTLY_Q4_K_M;
    case QT_Q5_K: return GGUF_FTYPE_MOSTLY_Q5_K_M;
    case QT_Q6_K: return GGUF_FTYPE_MOSTLY_Q6_K;
    case QT_IQ2_XXS: return GGUF_FTYPE_MOSTLY_IQ2_XXS;
    case QT_IQ2_XS: return GGUF_FTYPE_MOSTLY_IQ2_XS;
    case QT_IQ2_S: return GGUF_FTYPE_MOSTLY_IQ2_S;
    case QT_IQ3_XXS: return GGUF_FTYPE_MOSTLY_IQ3_XXS;
    case QT_IQ3_S: return GGUF_FTYPE_MOSTLY_IQ3_S;
    case QT_IQ1_S: return GGUF_FTYPE_MOSTLY_IQ1_S;
    case QT_IQ1_M: return GGUF_FTYPE_MOSTLY_IQ1_M;
    case QT_IQ4_NL: return GGUF_FTYPE_MOSTLY_IQ4_NL;
    case QT_IQ4_XS: return GGUF_FTYPE_MOSTLY_IQ4_XS;
    case QT_TQ1_0: return GGUF_FTYPE_MOSTLY_TQ1_0;
    case QT_TQ2_0: return GGUF_FTYPE_MOSTLY_TQ2_0;
    case QT_MXFP4: return GGUF_FTYPE_MOSTLY_MXFP4_MOE;
    default: return -1;
    }
}
