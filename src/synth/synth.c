/* synth.c: random-weight models with real shapes. See synth.h.
 *
 * Determinism: every weight is a function of (seed, tensor name, element index) only
 * (synth_noise), quantization is the deterministic reference code, rows are quantized
 * independently, and threads split rows, so neither the thread count nor the machine
 * changes a byte. */
#include "synth.h"

#include "../base/progress.h"
#include "../gguf/gguf.h"
#include "../quant/quant.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* ---------------------------------------------------------------- names */

static const char *const arch_names[SYNTH_ARCH_COUNT] = {"llama", "qwen2", "qwen3", "gemma3",
                                                         "qwen3moe", "lfm2", "lfm2moe", "gemma2",
                                                         "phi3", "granite", "smollm3", "olmo2",
                                                         "gpt-oss", "bert", "nomic-bert"};

/* llama.cpp's mixes (llama_tensor_get_type in src/llama-quant.cpp, dense models, no
 * importance matrix): which tensors get other types than the mix's default. */
enum mix { MIX_NONE, MIX_Q2_K, MIX_Q3_K_S, MIX_Q3_K_M, MIX_Q3_K_L, MIX_Q4_K_M, MIX_Q5_K_M, MIX_IQ4,
           MIX_MXFP4_MOE };

static const struct {
    const char *name;
    uint32_t type; /* the GGML type of every matrix (a mix: its default type) */
    uint32_t file_type;
    enum mix mix;
} ftypes[SYNTH_FTYPE_COUNT] = {
    [SYNTH_F32] = {"f32", QT_F32, 0, MIX_NONE},
    [SYNTH_F16] = {"f16", QT_F16, 1, MIX_NONE},
    [SYNTH_BF16] = {"bf16", QT_BF16, 32, MIX_NONE},
    [SYNTH_Q8_0] = {"q8_0", QT_Q8_0, 7, MIX_NONE},
    [SYNTH_Q4_0] = {"q4_0", QT_Q4_0, 2, MIX_NONE},
    [SYNTH_Q4_1] = {"q4_1", QT_Q4_1, 3, MIX_NONE},
    [SYNTH_Q5_0] = {"q5_0", QT_Q5_0, 8, MIX_NONE},
    [SYNTH_Q5_1] = {"q5_1", QT_Q5_1, 9, MIX_NONE},
    [SYNTH_Q4_K] = {"q4_k", QT_Q4_K, 14, MIX_NONE},
    [SYNTH_Q5_K] = {"q5_k", QT_Q5_K, 16, MIX_NONE},
    [SYNTH_Q6_K] = {"q6_k", QT_Q6_K, 18, MIX_NONE},
    [SYNTH_Q4_K_M] = {"q4_k_m", QT_Q4_K, 15, MIX_Q4_K_M},
    [SYNTH_Q3_K] = {"q3_k", QT_Q3_K, 11, MIX_NONE},
    [SYNTH_Q2_K_MIX] = {"q2_k", QT_Q2_K, 10, MIX_Q2_K},
    [SYNTH_Q3_K_S] = {"q3_k_s", QT_Q3_K, 11, MIX_Q3_K_S},
    [SYNTH_Q3_K_M] = {"q3_k_m", QT_Q3_K, 12, MIX_Q3_K_M},
    [SYNTH_Q3_K_L] = {"q3_k_l", QT_Q3_K, 13, MIX_Q3_K_L},
    [SYNTH_Q5_K_M] = {"q5_k_m", QT_Q5_K, 17, MIX_Q5_K_M},
    [SYNTH_IQ4_NL] = {"iq4_nl", QT_IQ4_NL, 25, MIX_IQ4},
    [SYNTH_IQ4_XS] = {"iq4_xs", QT_IQ4_XS, 30, MIX_IQ4},
    [SYNTH_MXFP4_MOE] = {"mxfp4_moe", QT_Q8_0, 38, MIX_MXFP4_MOE},
    [SYNTH_MXFP4] = {"mxfp4", QT_MXFP4, 38, MIX_NONE},
};

/* lfm2 and lfm2moe share the conv and attention layers. */
static bool synth_arch_is_lfm2(enum synth_arch a)
{
    return a == SYNTH_LFM2 || a == SYNTH_LFM2MOE;
}

const char *synth_arch_name(enum synth_arch a)
{
    return a < SYNTH_ARCH_COUNT ? arch_names[a] : "unknown";
}

const char *synth_ftype_name(enum synth_ftype t)
{
    return t < SYNTH_FTYPE_COUNT ? ftypes[t].name : "unknown";
}

enum kn_status synth_parse_arch(const char *s, enum synth_arch *out, struct kn_err *err)
{
    for (int a = 0; a < SYNTH_ARCH_COUNT; a++) {
        if (strcasecmp(s, arch_names[a]) == 0) {
            *out = (enum synth_arch)a;
            return KN_OK;
        }
    }
    return kn_fail(err, KN_E_ARG, "unknown architecture '%s'; choose one of " SYNTH_ARCH_LIST, s);
}

enum kn_status synth_parse_ftype(const char *s, enum synth_ftype *out, struct kn_err *err)
{
    for (int t = 0; t < SYNTH_FTYPE_COUNT; t++) {
        if (strcasecmp(s, ftypes[t].name) == 0) {
            *out = (enum synth_ftype)t;
            return KN_OK;
        }
    }
    char names[256];
    size_t len = 0;
    for (int t = 0; t < SYNTH_FTYPE_COUNT && len < sizeof names; t++)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", t ? ", " : "", ftypes[t].name);
    return kn_fail(err, KN_E_ARG, "unknown type '%s'; choose one of %s", s, names);
}

uint32_t synth_file_type(enum synth_ftype ftype)
{
    return ftype < SYNTH_FTYPE_COUNT ? ftypes[ftype].file_type : 0;
}

/* ---------------------------------------------------------------- presets */

struct preset {
    const char *name;
    enum synth_arch arch; /* SYNTH_ARCH_COUNT: any architecture (tiny) */
    struct synth_dims d;
};

/* The real models' published shapes. tiny is a few MB, with widths that are multiples
 * of 256 so every K-quant type applies without fallbacks. */
static const struct preset presets[] = {
    {"tiny", SYNTH_ARCH_COUNT,
     {.n_embd = 256, .n_layer = 2, .n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_ff = 512,
      .n_vocab = 512, .n_ctx = 2048, .n_swa = 128, .rope_base = 10000.0f, .norm_eps = 1e-5f,
      .tied = false}},
    {"tinyllama-1.1b", SYNTH_LLAMA,
     {.n_embd = 2048, .n_layer = 22, .n_head = 32, .n_head_kv = 4, .head_dim = 64, .n_ff = 5632,
      .n_vocab = 32000, .n_ctx = 2048, .rope_base = 10000.0f, .norm_eps = 1e-5f, .tied = false}},
    {"llama-3.2-1b", SYNTH_LLAMA,
     {.n_embd = 2048, .n_layer = 16, .n_head = 32, .n_head_kv = 8, .head_dim = 64, .n_ff = 8192,
      .n_vocab = 128256, .n_ctx = 131072, .rope_base = 500000.0f, .norm_eps = 1e-5f,
      .tied = true}},
    {"qwen2.5-0.5b", SYNTH_QWEN2,
     {.n_embd = 896, .n_layer = 24, .n_head = 14, .n_head_kv = 2, .head_dim = 64, .n_ff = 4864,
      .n_vocab = 151936, .n_ctx = 32768, .rope_base = 1000000.0f, .norm_eps = 1e-6f,
      .tied = true}},
    /* Qwen3-Embedding-0.6B: Qwen3-0.6B's shape with last-token pooling */
    {"qwen3-embedding-0.6b", SYNTH_QWEN3,
     {.n_embd = 1024, .n_layer = 28, .n_head = 16, .n_head_kv = 8, .head_dim = 128, .n_ff = 3072,
      .n_vocab = 151669, .n_ctx = 32768, .rope_base = 1000000.0f, .norm_eps = 1e-6f,
      .tied = true, .pooling = 3}},
    /* bge-small-en-v1.5 (BAAI's config.json): 12 layers of 384, cls pooling */
    {"bge-small", SYNTH_BERT,
     {.n_embd = 384, .n_layer = 12, .n_head = 12, .n_head_kv = 12, .head_dim = 32, .n_ff = 1536,
      .n_vocab = 30522, .n_ctx = 512, .rope_base = 10000.0f, .norm_eps = 1e-12f, .pooling = 2}},
    /* nomic-embed-text-v1.5: 12 layers of 768, rotary base 1000, SwiGLU, mean pooling */
    {"nomic-embed-v1.5", SYNTH_NOMIC_BERT,
     {.n_embd = 768, .n_layer = 12, .n_head = 12, .n_head_kv = 12, .head_dim = 64, .n_ff = 3072,
      .n_vocab = 30522, .n_ctx = 2048, .rope_base = 1000.0f, .norm_eps = 1e-12f, .pooling = 1}},
    {"qwen3-0.6b", SYNTH_QWEN3,
     {.n_embd = 1024, .n_layer = 28, .n_head = 16, .n_head_kv = 8, .head_dim = 128, .n_ff = 3072,
      .n_vocab = 151936, .n_ctx = 40960, .rope_base = 1000000.0f, .norm_eps = 1e-6f,
      .tied = true}},
    /* LFM2 (Liquid AI's config.json; feed_forward_length as convert_hf_to_gguf.py derives
     * it from block_ff_dim): 10 conv + 6 attention layers, 2.6B 22 + 8. The attention
     * layers are config.json's full_attn_idxs (later configs: the "full_attention" entries
     * of layer_types): [2, 5, 8, 10, 12, 14] in LiquidAI/LFM2-350M's and LFM2-1.2B's
     * (checked in issue 17 against copies of both configs in public repositories; 700M has
     * the same 16-block layout, Hugging Face's LFM2 model page); 2.6B's 22 + 8 split is its
     * model card's, the positions below were not found in a reachable copy of its config. */
    {"lfm2-350m", SYNTH_LFM2,
     {.n_embd = 1024, .n_layer = 16, .n_head = 16, .n_head_kv = 8, .head_dim = 64, .n_ff = 4608,
      .n_vocab = 65536, .n_ctx = 128000, .rope_base = 1000000.0f, .norm_eps = 1e-5f, .tied = true,
      .attn_layers = {2, 5, 8, 10, 12, 14}, .n_attn_layers = 6, .conv_l = 3}},
    {"lfm2-700m", SYNTH_LFM2,
     {.n_embd = 1536, .n_layer = 16, .n_head = 24, .n_head_kv = 8, .head_dim = 64, .n_ff = 6912,
      .n_vocab = 65536, .n_ctx = 128000, .rope_base = 1000000.0f, .norm_eps = 1e-5f, .tied = true,
      .attn_layers = {2, 5, 8, 10, 12, 14}, .n_attn_layers = 6, .conv_l = 3}},
    {"lfm2-1.2b", SYNTH_LFM2,
     {.n_embd = 2048, .n_layer = 16, .n_head = 32, .n_head_kv = 8, .head_dim = 64, .n_ff = 8192,
      .n_vocab = 65536, .n_ctx = 128000, .rope_base = 1000000.0f, .norm_eps = 1e-5f, .tied = true,
      .attn_layers = {2, 5, 8, 10, 12, 14}, .n_attn_layers = 6, .conv_l = 3}},
    {"lfm2-2.6b", SYNTH_LFM2,
     {.n_embd = 2048, .n_layer = 30, .n_head = 32, .n_head_kv = 8, .head_dim = 64, .n_ff = 10752,
      .n_vocab = 65536, .n_ctx = 128000, .rope_base = 1000000.0f, .norm_eps = 1e-5f, .tied = true,
      .attn_layers = {2, 6, 10, 14, 18, 21, 24, 27}, .n_attn_layers = 8, .conv_l = 3}},
    /* LFM2-8B-A1B: 24 layers, the first two dense, 32 experts of 1792, 4 per token;
     * 6 attention layers, [2, 6, 10, 14, 18, 21] (its config.json's layer_types, checked
     * in issue 17 against a public copy). */
    {"lfm2-8b-a1b", SYNTH_LFM2MOE,
     {.n_embd = 2048, .n_layer = 24, .n_head = 32, .n_head_kv = 8, .head_dim = 64, .n_ff = 7168,
      .n_vocab = 65536, .n_ctx = 128000, .rope_base = 1000000.0f, .norm_eps = 1e-5f, .tied = true,
      .attn_layers = {2, 6, 10, 14, 18, 21}, .n_attn_layers = 6, .conv_l = 3, .n_expert = 32,
      .n_expert_used = 4, .n_ff_exp = 1792, .n_dense_lead = 2}},
    {"gemma3-270m", SYNTH_GEMMA3,
     {.n_embd = 640, .n_layer = 18, .n_head = 4, .n_head_kv = 1, .head_dim = 256, .n_ff = 2048,
      .n_vocab = 262144, .n_ctx = 32768, .n_swa = 512, .rope_base = 1000000.0f,
      .norm_eps = 1e-6f, .tied = true}},
    /* A small MoE: Granite 3.1 3B-A800M's shape (40 experts, 8 per token) in qwen3moe's
     * layout (per-head q/k norms, no shared expert). */
    {"moe-3b-a800m", SYNTH_QWEN3MOE,
     {.n_embd = 1536, .n_layer = 32, .n_head = 24, .n_head_kv = 8, .head_dim = 64, .n_ff = 4096,
      .n_vocab = 49155, .n_ctx = 4096, .rope_base = 10000000.0f, .norm_eps = 1e-6f,
      .tied = true, .n_expert = 40, .n_expert_used = 8, .n_ff_exp = 512}},
    {"qwen3-30b-a3b", SYNTH_QWEN3MOE,
     {.n_embd = 2048, .n_layer = 48, .n_head = 32, .n_head_kv = 4, .head_dim = 128, .n_ff = 6144,
      .n_vocab = 151936, .n_ctx = 40960, .rope_base = 1000000.0f, .norm_eps = 1e-6f,
      .tied = false, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768}},
    /* Gemma 2: 2B, 9B and 27B (query_pre_attn_scalar 144 = dim / heads, which the loader
     * derives from the 46 layers). */
    {"gemma2-2b", SYNTH_GEMMA2,
     {.n_embd = 2304, .n_layer = 26, .n_head = 8, .n_head_kv = 4, .head_dim = 256, .n_ff = 9216,
      .n_vocab = 256000, .n_ctx = 8192, .n_swa = 4096, .rope_base = 10000.0f,
      .norm_eps = 1e-6f, .tied = true}},
    {"gemma2-9b", SYNTH_GEMMA2,
     {.n_embd = 3584, .n_layer = 42, .n_head = 16, .n_head_kv = 8, .head_dim = 256, .n_ff = 14336,
      .n_vocab = 256000, .n_ctx = 8192, .n_swa = 4096, .rope_base = 10000.0f,
      .norm_eps = 1e-6f, .tied = true}},
    {"gemma2-27b", SYNTH_GEMMA2,
     {.n_embd = 4608, .n_layer = 46, .n_head = 32, .n_head_kv = 16, .head_dim = 128, .n_ff = 36864,
      .n_vocab = 256000, .n_ctx = 8192, .n_swa = 4096, .rope_base = 10000.0f,
      .norm_eps = 1e-6f, .tied = true}},
    /* Phi-3 / 3.5 / 4-mini (all general.architecture phi3): fused attn_qkv and ffn_up;
     * 3.5 and 4 with LongRoPE over an original context of 4096; 4-mini rotates 96 of
     * its 128 head dims. */
    {"phi3-mini-4k", SYNTH_PHI3,
     {.n_embd = 3072, .n_layer = 32, .n_head = 32, .n_head_kv = 32, .head_dim = 96, .n_ff = 8192,
      .n_vocab = 32064, .n_ctx = 4096, .n_swa = 2047, .rope_base = 10000.0f, .norm_eps = 1e-5f,
      .tied = false}},
    {"phi3.5-mini", SYNTH_PHI3,
     {.n_embd = 3072, .n_layer = 32, .n_head = 32, .n_head_kv = 32, .head_dim = 96, .n_ff = 8192,
      .n_vocab = 32064, .n_ctx = 131072, .n_swa = 262144, .rope_base = 10000.0f,
      .norm_eps = 1e-5f, .tied = false, .rope_orig_ctx = 4096}},
    {"phi4-mini", SYNTH_PHI3,
     {.n_embd = 3072, .n_layer = 32, .n_head = 24, .n_head_kv = 8, .head_dim = 128, .n_ff = 8192,
      .n_vocab = 200064, .n_ctx = 131072, .n_swa = 262144, .rope_base = 10000.0f,
      .norm_eps = 1e-5f, .tied = true, .n_rot = 96, .rope_orig_ctx = 4096}},
    /* Granite 3.x dense (3.3 2B, 3.x 8B): llama blocks with four scales, tied output. */
    {"granite-3-2b", SYNTH_GRANITE,
     {.n_embd = 2048, .n_layer = 40, .n_head = 32, .n_head_kv = 8, .head_dim = 64, .n_ff = 8192,
      .n_vocab = 49159, .n_ctx = 131072, .rope_base = 10000000.0f, .norm_eps = 1e-5f,
      .tied = true, .embd_scale = 12.0f, .residual_scale = 0.22f, .attn_scale = 0.015625f,
      .logit_scale = 8.0f}},
    {"granite-3-8b", SYNTH_GRANITE,
     {.n_embd = 4096, .n_layer = 40, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_ff = 12800,
      .n_vocab = 49155, .n_ctx = 131072, .rope_base = 10000000.0f, .norm_eps = 1e-5f,
      .tied = true, .embd_scale = 12.0f, .residual_scale = 0.22f, .attn_scale = 0.0078125f,
      .logit_scale = 16.0f}},
    /* SmolLM3 3B: llama blocks, every fourth layer without RoPE. */
    {"smollm3-3b", SYNTH_SMOLLM3,
     {.n_embd = 2048, .n_layer = 36, .n_head = 16, .n_head_kv = 4, .head_dim = 128, .n_ff = 11008,
      .n_vocab = 128256, .n_ctx = 65536, .rope_base = 5000000.0f, .norm_eps = 1e-6f,
      .tied = true}},
    /* OLMo 2 1B and 7B: no pre-norms, q/k norms over whole rows, post norms. */
    {"olmo2-1b", SYNTH_OLMO2,
     {.n_embd = 2048, .n_layer = 16, .n_head = 16, .n_head_kv = 16, .head_dim = 128, .n_ff = 8192,
      .n_vocab = 100352, .n_ctx = 4096, .rope_base = 500000.0f, .norm_eps = 1e-6f, .tied = false}},
    {"olmo2-7b", SYNTH_OLMO2,
     {.n_embd = 4096, .n_layer = 32, .n_head = 32, .n_head_kv = 32, .head_dim = 128, .n_ff = 11008,
      .n_vocab = 100352, .n_ctx = 4096, .rope_base = 500000.0f, .norm_eps = 1e-6f, .tied = false}},
    /* gpt-oss 20B and 120B (OpenAI's config.json): 24 / 36 layers alternating a window of
     * 128 and full attention, 64 query heads of 64 over 8 KV heads (q is wider than the
     * model), 32 / 128 experts of 2880, 4 per token, YaRN x32 over 4096 positions. */
    {"gpt-oss-20b", SYNTH_GPTOSS,
     {.n_embd = 2880, .n_layer = 24, .n_head = 64, .n_head_kv = 8, .head_dim = 64, .n_ff = 2880,
      .n_vocab = 201088, .n_ctx = 131072, .n_swa = 128, .rope_base = 150000.0f, .norm_eps = 1e-5f,
      .tied = false, .n_expert = 32, .n_expert_used = 4, .n_ff_exp = 2880, .rope_orig_ctx = 4096}},
    {"gpt-oss-120b", SYNTH_GPTOSS,
     {.n_embd = 2880, .n_layer = 36, .n_head = 64, .n_head_kv = 8, .head_dim = 64, .n_ff = 2880,
      .n_vocab = 201088, .n_ctx = 131072, .n_swa = 128, .rope_base = 150000.0f, .norm_eps = 1e-5f,
      .tied = false, .n_expert = 128, .n_expert_used = 4, .n_ff_exp = 2880, .rope_orig_ctx = 4096}},
};

/* tiny's experts for qwen3moe: 16 of width 256, 4 per token (more than 8 experts, so
 * that llama.cpp's quantize rules for 8-expert models do not apply). */
#define TINY_EXPERTS 16
#define TINY_EXPERTS_USED 4
#define TINY_EXPERT_FFN 256

const char *synth_preset_list(void)
{
    return "tiny (any architecture: dim 256, 2 layers, 6 for gemma3, 4 for lfm2 and smollm3), "
           "tinyllama-1.1b (llama), "
           "llama-3.2-1b (llama), qwen2.5-0.5b (qwen2), qwen3-0.6b, qwen3-embedding-0.6b (qwen3), bge-small (bert), nomic-embed-v1.5 "
           "(nomic-bert), gemma3-270m (gemma3), "
           "moe-3b-a800m (qwen3moe: Granite 3.1 3B-A800M's shape), qwen3-30b-a3b (qwen3moe), "
           "lfm2-350m, lfm2-700m, lfm2-1.2b, lfm2-2.6b (lfm2), lfm2-8b-a1b (lfm2moe), "
           "gemma2-2b, gemma2-9b, gemma2-27b (gemma2), phi3-mini-4k, phi3.5-mini, phi4-mini (phi3), "
           "granite-3-2b, granite-3-8b (granite), smollm3-3b (smollm3), olmo2-1b, olmo2-7b "
           "(olmo2), gpt-oss-20b, gpt-oss-120b (gpt-oss)";
}

enum kn_status synth_preset(const char *name, enum synth_arch *arch, struct synth_dims *out,
                            struct kn_err *err)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        const struct preset *p = &presets[i];
        if (strcasecmp(name, p->name) != 0)
            continue;
        if (p->arch != SYNTH_ARCH_COUNT) {
            if (*arch != SYNTH_ARCH_COUNT && *arch != p->arch)
                return kn_fail(err, KN_E_ARG,
                               "preset '%s' is a %s model, not %s; drop --arch or use --arch %s",
                               name, arch_names[p->arch], arch_names[*arch], arch_names[p->arch]);
            *arch = p->arch;
        } else if (*arch == SYNTH_ARCH_COUNT) {
            *arch = SYNTH_LLAMA;
        }
        *out = p->d;
        if (*arch == SYNTH_GEMMA2 && p->arch == SYNTH_ARCH_COUNT) {
            out->norm_eps = 1e-6f;
            out->tied = true; /* see synth_check_dims */
        }
        if ((*arch == SYNTH_BERT || *arch == SYNTH_NOMIC_BERT) && p->arch == SYNTH_ARCH_COUNT) {
            out->n_ctx = 512;         /* bert's position rows */
            out->n_head_kv = out->n_head; /* encoders' plain multi-head attention */
        }
        if (*arch == SYNTH_SMOLLM3 && p->arch == SYNTH_ARCH_COUNT)
            out->n_layer = 4; /* layer 3 is the first without RoPE */
        if ((*arch == SYNTH_PHI3 || *arch == SYNTH_OLMO2) && p->arch == SYNTH_ARCH_COUNT)
            out->n_swa = 0; /* a window only where asked for (window=N) */
        if (*arch == SYNTH_GEMMA3 && p->arch == SYNTH_ARCH_COUNT) {
            out->norm_eps = 1e-6f;
            out->n_layer = 6; /* gemma3 needs a global-attention layer (see synth_check_dims) */
        }
        if ((*arch == SYNTH_QWEN3MOE || *arch == SYNTH_LFM2MOE) && p->arch == SYNTH_ARCH_COUNT) {
            out->n_expert = TINY_EXPERTS;
            out->n_expert_used = TINY_EXPERTS_USED;
            out->n_ff_exp = TINY_EXPERT_FFN;
            out->norm_eps = 1e-6f;
        }
        if (*arch == SYNTH_GPTOSS && p->arch == SYNTH_ARCH_COUNT) {
            /* 16 experts of 256, 4 per token; a window of 32 (tests' prompts cross it);
             * YaRN x32 over 256 positions (the real models' factor) */
            out->n_expert = TINY_EXPERTS;
            out->n_expert_used = TINY_EXPERTS_USED;
            out->n_ff_exp = TINY_EXPERT_FFN;
            out->n_swa = 32;
            out->n_ctx = 8192;
            out->rope_orig_ctx = 256;
        }
        if ((*arch == SYNTH_LFM2 || *arch == SYNTH_LFM2MOE) && p->arch == SYNTH_ARCH_COUNT) {
            out->n_layer = 4; /* conv, conv, attention, conv: a conv layer first and last */
            out->norm_eps = 1e-5f;
            out->n_dense_lead = *arch == SYNTH_LFM2MOE; /* one dense layer, three MoE ones */
            if (*arch == SYNTH_LFM2MOE)
                out->tied = true; /* llama.cpp's lfm2moe has no output.weight */
        }
        return KN_OK;
    }
    return kn_fail(err, KN_E_ARG, "unknown preset '%s'; choose one of %s", name, synth_preset_list());
}

/* ---------------------------------------------------------------- dimensions */

static bool parse_u32(const char *s, size_t len, uint32_t *out)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    for (size_t i = 0; i < len; i++)
        if (buf[i] < '0' || buf[i] > '9')
            return false;
    errno = 0;
    unsigned long long v = strtoull(buf, NULL, 10);
    if (errno || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

static bool parse_f32(const char *s, size_t len, float *out)
{
    char buf[64], *end;
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = 0;
    errno = 0;
    double v = strtod(buf, &end);
    if (errno || *end || !(v > 0) || v > 1e30)
        return false;
    *out = (float)v;
    return true;
}

enum kn_status synth_parse_dims(const char *spec, struct synth_dims *d, struct kn_err *err)
{
    static const struct {
        const char *key;
        size_t off;
        int kind; /* 0 u32, 1 f32, 2 bool */
    } keys[] = {
        {"dim", offsetof(struct synth_dims, n_embd), 0},
        {"layers", offsetof(struct synth_dims, n_layer), 0},
        {"heads", offsetof(struct synth_dims, n_head), 0},
        {"kv_heads", offsetof(struct synth_dims, n_head_kv), 0},
        {"head_dim", offsetof(struct synth_dims, head_dim), 0},
        {"ffn", offsetof(struct synth_dims, n_ff), 0},
        {"vocab", offsetof(struct synth_dims, n_vocab), 0},
        {"ctx", offsetof(struct synth_dims, n_ctx), 0},
        {"window", offsetof(struct synth_dims, n_swa), 0},
        {"rope_base", offsetof(struct synth_dims, rope_base), 1},
        {"eps", offsetof(struct synth_dims, norm_eps), 1},
        {"tied", offsetof(struct synth_dims, tied), 2},
        {"experts", offsetof(struct synth_dims, n_expert), 0},
        {"experts_used", offsetof(struct synth_dims, n_expert_used), 0},
        {"expert_ffn", offsetof(struct synth_dims, n_ff_exp), 0},
        {"conv_l", offsetof(struct synth_dims, conv_l), 0},
        {"attn", offsetof(struct synth_dims, n_attn_layers), 3},
        {"dense_lead", offsetof(struct synth_dims, n_dense_lead), 4},
        {"attn_softcap", offsetof(struct synth_dims, attn_softcap), 1},
        {"final_softcap", offsetof(struct synth_dims, final_softcap), 1},
        {"rot", offsetof(struct synth_dims, n_rot), 0},
        {"rope_orig_ctx", offsetof(struct synth_dims, rope_orig_ctx), 0},
        {"embd_scale", offsetof(struct synth_dims, embd_scale), 1},
        {"residual_scale", offsetof(struct synth_dims, residual_scale), 1},
        {"attn_scale", offsetof(struct synth_dims, attn_scale), 1},
        {"logit_scale", offsetof(struct synth_dims, logit_scale), 1},
        {"pooling", offsetof(struct synth_dims, pooling), 4},
    };
    const char *p = spec;
    if (!*p)
        return kn_fail(err, KN_E_ARG, "--dims is empty; give key=value pairs such as dim=2048,layers=22");
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq)
            return kn_fail(err, KN_E_ARG, "--dims: '%.*s' is not key=value", (int)len, p);
        size_t klen = (size_t)(eq - p);
        const char *val = eq + 1;
        size_t vlen = len - klen - 1;
        size_t k = 0;
        for (; k < sizeof keys / sizeof keys[0]; k++)
            if (strlen(keys[k].key) == klen && strncmp(keys[k].key, p, klen) == 0)
                break;
        if (k == sizeof keys / sizeof keys[0])
            return kn_fail(err, KN_E_ARG,
                           "--dims: unknown key '%.*s'; keys are dim, layers, heads, kv_heads, "
                           "head_dim, ffn, vocab, ctx, window, rope_base, eps, tied, experts, experts_used, "
                           "expert_ffn, conv_l, attn, dense_lead, attn_softcap, final_softcap, rot, "
                           "rope_orig_ctx, embd_scale, residual_scale, attn_scale, logit_scale, pooling",
                           (int)klen, p);
        bool ok;
        char *field = (char *)d + keys[k].off;
        if (keys[k].kind == 0) {
            uint32_t v;
            ok = parse_u32(val, vlen, &v) && v > 0;
            if (ok)
                memcpy(field, &v, sizeof v);
        } else if (keys[k].kind == 1) {
            float v;
            ok = parse_f32(val, vlen, &v);
            if (ok)
                memcpy(field, &v, sizeof v);
        } else if (keys[k].kind == 4) {
            uint32_t v; /* 0 allowed */
            ok = parse_u32(val, vlen, &v);
            if (ok)
                memcpy(field, &v, sizeof v);
        } else if (keys[k].kind == 2) {
            ok = vlen == 1 && (val[0] == '0' || val[0] == '1');
            if (ok)
                *(bool *)field = val[0] == '1';
        } else {
            /* attn=2:5:8: layer numbers separated by ':' */
            ok = true;
            d->n_attn_layers = 0;
            for (size_t i = 0; ok && i < vlen;) {
                size_t j = i;
                while (j < vlen && val[j] != ':')
                    j++;
                uint32_t v;
                ok = parse_u32(val + i, j - i, &v) && v < 65536 && d->n_attn_layers < SYNTH_MAX_ATTN_LAYERS;
                if (ok)
                    d->attn_layers[d->n_attn_layers++] = (uint16_t)v;
                i = j + 1;
            }
            ok = ok && d->n_attn_layers > 0;
        }
        if (!ok)
            return kn_fail(err, KN_E_ARG, "--dims: bad value '%.*s' for %s (%s)", (int)vlen, val,
                           keys[k].key,
                           keys[k].kind == 0   ? "a positive integer"
                           : keys[k].kind == 1 ? "a positive number"
                           : keys[k].kind == 2 ? "0 or 1"
                           : keys[k].kind == 4 ? "a non-negative integer"
                                               : "layer numbers separated by ':'");
        p += len;
        if (*p == ',')
            p++;
    }
    return KN_OK;
}

enum kn_status synth_check_dims(enum synth_arch arch, struct synth_dims *d, struct kn_err *err)
{
    if (!d->n_embd || !d->n_layer || !d->n_head || !d->n_ff || !d->n_vocab)
        return kn_fail(err, KN_E_ARG, "dimensions need dim, layers, heads, ffn and vocab (all > 0)");
    if (!d->n_head_kv)
        d->n_head_kv = d->n_head;
    if (!d->head_dim)
        d->head_dim = d->n_embd / d->n_head;
    if (!d->n_ctx)
        d->n_ctx = 2048;
    if (!(d->rope_base > 0))
        d->rope_base = 10000.0f;
    if (!(d->norm_eps > 0))
        d->norm_eps = arch == SYNTH_GEMMA3 || arch == SYNTH_GEMMA2 ? 1e-6f : 1e-5f;
    if (arch == SYNTH_GEMMA3 && !d->n_swa)
        d->n_swa = 512;
    if (arch == SYNTH_GEMMA2) {
        if (!d->n_swa)
            d->n_swa = 4096;
        if (!(d->attn_softcap > 0))
            d->attn_softcap = 50.0f;
        if (!(d->final_softcap > 0))
            d->final_softcap = 30.0f;
    }
    /* Limits that keep every size product far from overflow and catch typos. */
    if (d->n_embd > 65536 || d->n_ff > 262144 || d->n_layer > 512 || d->n_head > 1024 ||
        d->head_dim > 1024 || d->n_vocab > (1u << 22) || d->n_ctx > (1u << 24))
        return kn_fail(err, KN_E_ARG,
                       "dimensions too large (limits: dim 65536, ffn 262144, layers 512, heads 1024, "
                       "head_dim 1024, vocab 4194304, ctx 16777216)");
    if (d->n_head % d->n_head_kv != 0)
        return kn_fail(err, KN_E_ARG, "heads (%u) must be a multiple of kv_heads (%u)", d->n_head,
                       d->n_head_kv);
    if (d->head_dim % 2 != 0)
        return kn_fail(err, KN_E_ARG, "head_dim (%u) must be even (RoPE rotates pairs)", d->head_dim);
    if (arch == SYNTH_GEMMA3 && d->n_layer < 6)
        return kn_fail(err, KN_E_ARG,
                       "gemma3 needs at least 6 layers (layers=%u): every sixth layer is the "
                       "global-attention one, and llama.cpp cannot run a model without one",
                       d->n_layer);
    if (synth_arch_is_lfm2(arch)) {
        if (!d->conv_l)
            d->conv_l = 3;
        if (d->head_dim * d->n_head != d->n_embd)
            return kn_fail(err, KN_E_ARG,
                           "lfm2 needs heads * head_dim = dim (%u * %u != %u): llama.cpp's lfm2 "
                           "has square attention matrices", d->n_head, d->head_dim, d->n_embd);
        for (uint32_t i = 0; i < d->n_attn_layers; i++)
            if (d->attn_layers[i] >= d->n_layer || (i && d->attn_layers[i] <= d->attn_layers[i - 1]))
                return kn_fail(err, KN_E_ARG,
                               "attn: layer %u is not below layers=%u or the list is not ascending",
                               d->attn_layers[i], d->n_layer);
    } else if (d->n_attn_layers || d->conv_l) {
        return kn_fail(err, KN_E_ARG, "attn and conv_l are lfm2's (short-convolution layers); %s has none",
                       arch_names[arch]);
    }
    if (d->pooling > 3)
        return kn_fail(err, KN_E_ARG, "pooling=%u: 0 none, 1 mean, 2 cls or 3 last", d->pooling);
    if (arch == SYNTH_BERT && !d->pooling)
        d->pooling = 2; /* bge's cls */
    if (arch == SYNTH_NOMIC_BERT && !d->pooling)
        d->pooling = 1; /* nomic-embed's mean */
    if ((arch == SYNTH_BERT || arch == SYNTH_NOMIC_BERT) && d->tied)
        return kn_fail(err, KN_E_ARG, "tied: %s has no output head", arch_names[arch]);
    if (arch == SYNTH_GRANITE) {
        if (!(d->embd_scale > 0))
            d->embd_scale = 12.0f;
        if (!(d->residual_scale > 0))
            d->residual_scale = 0.22f;
        if (!(d->attn_scale > 0))
            d->attn_scale = 0.015625f;
        if (!(d->logit_scale > 0))
            d->logit_scale = 8.0f;
    }
    if (!d->n_rot)
        d->n_rot = d->head_dim;
    if (d->n_rot > d->head_dim || d->n_rot % 2 != 0 || (arch != SYNTH_PHI3 && d->n_rot != d->head_dim))
        return kn_fail(err, KN_E_ARG,
                       "rot (%u) must be even and at most head_dim (%u); only phi3 rotates part "
                       "of a head", d->n_rot, d->head_dim);
    if (d->rope_orig_ctx && ((arch != SYNTH_PHI3 && arch != SYNTH_GPTOSS) || d->rope_orig_ctx >= d->n_ctx))
        return kn_fail(err, KN_E_ARG,
                       "rope_orig_ctx (%u) is phi3's LongRoPE or gpt-oss's YaRN original context: it "
                       "must be below ctx (%u)", d->rope_orig_ctx, d->n_ctx);
    if (arch == SYNTH_GPTOSS && !d->n_swa)
        d->n_swa = 128;
    if (arch == SYNTH_OLMO2 && (d->tied || d->head_dim * d->n_head != d->n_embd))
        return kn_fail(err, KN_E_ARG,
                       "olmo2 needs heads * head_dim = dim (%u * %u, dim %u) and an output.weight "
                       "(tied=0): llama.cpp's olmo2 loader wants both",
                       d->n_head, d->head_dim, d->n_embd);
    if (arch == SYNTH_GEMMA2 && !d->tied)
        return kn_fail(err, KN_E_ARG,
                       "gemma2 ties its output to the embedding (tied=1): llama.cpp's gemma2 "
                       "loader refuses a file with output.weight");
    if (arch == SYNTH_QWEN3MOE || arch == SYNTH_LFM2MOE || arch == SYNTH_GPTOSS) {
        if (!d->n_expert || !d->n_expert_used || !d->n_ff_exp)
            return kn_fail(err, KN_E_ARG, "%s needs experts, experts_used and expert_ffn (all > 0)",
                           arch_names[arch]);
        if (d->n_dense_lead >= d->n_layer || (arch == SYNTH_QWEN3MOE && d->n_dense_lead))
            return kn_fail(err, KN_E_ARG, "dense_lead (%u) must be below layers (%u), and 0 for qwen3moe",
                           d->n_dense_lead, d->n_layer);
        if (d->n_expert > 512 || d->n_expert_used > d->n_expert || d->n_expert_used > 64 ||
            d->n_ff_exp > 262144)
            return kn_fail(err, KN_E_ARG,
                           "experts (%u) must be at most 512, experts_used (%u) at most experts and 64, "
                           "expert_ffn at most 262144", d->n_expert, d->n_expert_used);
    } else if (d->n_expert) {
        return kn_fail(err, KN_E_ARG, "experts are for --arch qwen3moe, lfm2moe and gpt-oss only");
    }
    if (arch == SYNTH_QWEN2 && d->head_dim * d->n_head != d->n_embd)
        return kn_fail(err, KN_E_ARG,
                       "qwen2 needs heads * head_dim = dim (%u * %u != %u): llama.cpp's qwen2 "
                       "has square attention matrices",
                       d->n_head, d->head_dim, d->n_embd);
    return KN_OK;
}

bool synth_attn_layer(const struct synth_dims *d, uint32_t il)
{
    if (d->n_attn_layers == 0)
        return il % 3 == 2;
    for (uint32_t i = 0; i < d->n_attn_layers; i++)
        if (d->attn_layers[i] == il)
            return true;
    return false;
}

/* ---------------------------------------------------------------- tensor types */

/* llama.cpp gives some layers more bits: the first and last eighth and every third
 * layer in between. */
static bool use_more_bits(int il, int n)
{
    return il < n / 8 || il >= 7 * n / 8 || (il - n / 8) % 3 == 2;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The type llama.cpp's mix gives a matrix that is neither the output nor the embedding
 * (t: the mix's default type). */
static uint32_t mix_type(enum mix mix, uint32_t t, const char *name, int il, int n_layer, int n_gqa)
{
    const bool more = il >= 0 && use_more_bits(il, n_layer);
    if (ends_with(name, "attn_v.weight")) {
        switch (mix) {
        case MIX_Q2_K: return n_gqa >= 4 ? QT_Q4_K : QT_Q3_K;
        case MIX_Q3_K_M: return il >= 0 && il < 2 ? QT_Q5_K : QT_Q4_K;
        case MIX_Q3_K_L: return QT_Q5_K;
        case MIX_IQ4: return n_gqa >= 4 ? QT_Q5_K : t;
        case MIX_Q4_K_M: case MIX_Q5_K_M: return more ? QT_Q6_K : t;
        default: return t;
        }
    }
    if (strstr(name, "ffn_down")) {
        switch (mix) {
        case MIX_Q2_K: return QT_Q3_K;
        case MIX_Q3_K_M: return il >= 0 && il < n_layer / 16 ? QT_Q5_K : QT_Q4_K;
        case MIX_Q3_K_L: return QT_Q5_K;
        case MIX_Q4_K_M: case MIX_Q5_K_M: return more ? QT_Q6_K : t;
        case MIX_IQ4: return il >= 0 && il < n_layer / 8 ? QT_Q5_K : t;
        default: return t;
        }
    }
    if (ends_with(name, "attn_output.weight")) {
        switch (mix) {
        case MIX_Q2_K: return QT_Q3_K;
        case MIX_Q3_K_M: return QT_Q4_K;
        case MIX_Q3_K_L: return QT_Q5_K;
        default: return t;
        }
    }
    if (ends_with(name, "attn_qkv.weight")) {
        switch (mix) {
        case MIX_Q3_K_M: case MIX_Q3_K_L: return QT_Q4_K;
        case MIX_Q4_K_M: return QT_Q5_K;
        case MIX_Q5_K_M: return QT_Q6_K;
        default: return t;
        }
    }
    return t;
}

uint32_t synth_tensor_type(enum synth_ftype ftype, const char *name, int il, int n_layer,
                           int64_t ne0, uint32_t n_dims, bool tied, int n_gqa)
{
    /* llama.cpp's quantizer leaves biases (gpt-oss's 2-D expert biases too) as they are,
     * and BERT's position and token type rows */
    if (n_dims < 2 || ftype >= SYNTH_FTYPE_COUNT || ends_with(name, "ffn_gate_inp.weight") ||
        ends_with(name, ".bias") || strcmp(name, "position_embd.weight") == 0 ||
        strcmp(name, "token_types.weight") == 0)
        return QT_F32;
    uint32_t t = ftypes[ftype].type;
    if (ftypes[ftype].mix == MIX_MXFP4_MOE) {
        /* expert tensors (3-D: one matrix per expert) MXFP4, everything else Q8_0 */
        t = n_dims == 3 ? QT_MXFP4 : QT_Q8_0;
    } else if (ftypes[ftype].mix != MIX_NONE) {
        bool is_output = strcmp(name, "output.weight") == 0 ||
                         (tied && strcmp(name, "token_embd.weight") == 0);
        if (is_output)
            t = ne0 % quant_type_info(t)->block_size != 0 ? QT_Q8_0 : QT_Q6_K;
        else if (ends_with(name, "attn_qkv.weight") && ftype == SYNTH_Q4_K_M)
            t = QT_Q5_K; /* llama.cpp: fused q/k/v get Q5_K in Q4_K_M */
        else if (strcmp(name, "token_embd.weight") != 0)
            t = mix_type(ftypes[ftype].mix, t, name, il, n_layer, n_gqa);
    }
    const struct quant_type_info *info = quant_type_info(t);
    if (ne0 % info->block_size != 0) {
        /* llama.cpp's fallbacks for rows that are not whole blocks */
        switch (t) {
        case QT_Q2_K: case QT_Q3_K: case QT_IQ4_XS: t = QT_IQ4_NL; break;
        case QT_Q4_K: t = QT_Q5_0; break;
        case QT_Q5_K: t = QT_Q5_1; break;
        case QT_Q6_K: t = QT_Q8_0; break;
        default: t = QT_F16; break;
        }
        if (ne0 % quant_type_info(t)->block_size != 0)
            t = QT_F16;
    }
    return t;
}

/* ---------------------------------------------------------------- noise */

/* A 64-bit mixing function (the splitmix64 finaliser): a bijection whose output bits
 * each depend on every input bit. */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

float synth_noise(uint64_t key, uint64_t i)
{
    uint64_t h = mix64(key + (i + 1) * 0x9e3779b97f4a7c15ull);
    /* four 16-bit uniforms; their sum minus its mean, scaled to unit variance:
     * var(sum) = 4 * (65536^2 - 1) / 12, so scale by sqrt(3) / 65536 */
    int32_t s = (int32_t)(h & 0xffff) + (int32_t)((h >> 16) & 0xffff) +
                (int32_t)((h >> 32) & 0xffff) + (int32_t)(h >> 48);
    return (float)(s - 131070) * (1.7320508f / 65536.0f);
}

uint64_t synth_tensor_key(uint64_t seed, const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    return mix64(mix64(seed) ^ h);
}

/* ---------------------------------------------------------------- built-in vocabulary */

/* A SentencePiece-style ("llama") vocabulary that llama.cpp accepts: <unk>, <s>, </s>,
 * the 256 byte tokens <0x00>..<0xFF> (so any text can be encoded), then pieces: "▁",
 * the printable ASCII characters, "▁" + each of them, then "▁" + two lowercase letters,
 * two lowercase letters, and so on with three and four letters, until n tokens. Every
 * piece's prefixes come before it, so the tokenizer can build it by merges. */
#define VOCAB_FIXED 3u
#define VOCAB_MIN (VOCAB_FIXED + 256u + 1u + 94u + 94u)
#define SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's word-boundary mark */

static size_t vocab_piece(uint32_t k, char *buf)
{
    size_t n = 0;
    if (k == 0)
        return (size_t)sprintf(buf, "<unk>");
    if (k == 1)
        return (size_t)sprintf(buf, "<s>");
    if (k == 2)
        return (size_t)sprintf(buf, "</s>");
    k -= VOCAB_FIXED;
    if (k < 256)
        return (size_t)sprintf(buf, "<0x%02X>", k);
    k -= 256;
    if (k == 0) {
        memcpy(buf, SPM_SPACE, 3);
        return 3;
    }
    k -= 1;
    if (k < 94) {
        buf[0] = (char)(0x21 + k);
        return 1;
    }
    k -= 94;
    if (k < 94) {
        memcpy(buf, SPM_SPACE, 3);
        buf[3] = (char)(0x21 + k);
        return 4;
    }
    k -= 94;
    uint32_t count = 26 * 26;
    for (int len = 2; len <= 4; len++, count *= 26) {
        for (int space = 1; space >= 0; space--) {
            if (k < count) {
                if (space) {
                    memcpy(buf, SPM_SPACE, 3);
                    n = 3;
                }
                for (int j = len - 1; j >= 0; j--) {
                    buf[n + (size_t)j] = (char)('a' + k % 26);
                    k /= 26;
                }
                return n + (size_t)len;
            }
            k -= count;
        }
    }
    return 0; /* beyond the largest size synth_check_dims allows */
}

/* phi3: the last piece is the control token <|endoftext|>, which llama.cpp's vocabulary
 * loader looks up in any model named like Phi-3 (as the real files have it). */
static enum kn_status builtin_vocab(struct gguf_writer *w, uint32_t n, enum synth_arch arch,
                                    struct kn_err *err)
{
    if (n < VOCAB_MIN)
        return kn_fail(err, KN_E_ARG,
                       "the built-in vocabulary needs at least %u tokens (vocab=%u); raise vocab or "
                       "give --vocab FILE.gguf", VOCAB_MIN, n);
    enum kn_status st = KN_E_NOMEM;
    char *text = kn_malloc((size_t)n * 8, err);
    struct gguf_str *strs = kn_calloc(n, sizeof *strs, err);
    float *scores = kn_calloc(n, sizeof *scores, err);
    int32_t *types = kn_calloc(n, sizeof *types, err);
    if (!text || !strs || !scores || !types)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        char *p = text + (size_t)i * 8;
        size_t len = vocab_piece(i, p);
        if (len == 0) {
            st = kn_fail(err, KN_E_ARG, "the built-in vocabulary has no more than %u tokens", i);
            goto out;
        }
        strs[i].data = p;
        strs[i].len = len;
        /* llama.cpp's token types: 1 normal, 2 unknown, 3 control, 6 byte */
        types[i] = i == 0 ? 2 : i < VOCAB_FIXED ? 3 : i < VOCAB_FIXED + 256 ? 6 : 1;
        if (arch == SYNTH_PHI3 && i == n - 1) {
            static const char eot[] = "<|endoftext|>";
            strs[i].data = eot;
            strs[i].len = sizeof eot - 1;
            types[i] = 3;
        }
        /* SentencePiece scores are log-probabilities: earlier (shorter) pieces likelier */
        scores[i] = i < VOCAB_FIXED + 256 ? 0.0f : -(float)(i - VOCAB_FIXED - 256);
    }
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, n);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_T_F32, scores, n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_T_I32, types, n);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    st = KN_OK;
out:
    /* the writer copies arrays when they are set */
    free(text);
    free(strs);
    free(scores);
    free(types);
    return st;
}

/* Copies every tokenizer.* key of a vocabulary GGUF and returns its token count. */
static enum kn_status copy_vocab(struct gguf_writer *w, const struct gguf_file *vf, const char *path,
                                 uint32_t *n_vocab, struct kn_err *err)
{
    const struct gguf_value *tokens = gguf_get_arr(vf, "tokenizer.ggml.tokens", GGUF_T_STRING);
    if (!tokens)
        return kn_fail(err, KN_E_FORMAT,
                       "%s has no tokenizer.ggml.tokens array: not a vocabulary file (try one of "
                       "the ggml-vocab-*.gguf files)", path);
    if (tokens->v.arr.n == 0 || tokens->v.arr.n > (1u << 22))
        return kn_fail(err, KN_E_FORMAT, "%s: vocabulary of %llu tokens (1 to 4194304 supported)",
                       path, (unsigned long long)tokens->v.arr.n);
    for (int64_t i = 0; i < gguf_n_kv(vf); i++) {
        const struct gguf_kv *kv = gguf_kv_at(vf, i);
        if (strncmp(kv->key, "tokenizer.", 10) == 0)
            gguf_writer_copy_kv(w, kv);
    }
    *n_vocab = (uint32_t)tokens->v.arr.n;
    return KN_OK;
}

/* ---------------------------------------------------------------- tensors */

/* FILL_ROUTER: noise of ROUTER_STD, for the expert router (ffn_gate_inp). FILL_CONV: lfm2's
 * conv taps, noise of a trained conv's scale (about 0.3) so that the conv matters in tests.
 * FILL_ROPE_*: phi3's LongRoPE factors, ramps over the pairs (short 1 to 2, long 1 to 40:
 * the real models' ranges), the same for every seed. */
/* FILL_SINK: gpt-oss's attention sinks, noise of SINK_STD (a sink then weighs about as much
 * as one key); FILL_EXP_BIAS: its gate and up expert biases, noise of EXP_BIAS_STD, so
 * that some products cross the clamped SwiGLU's limits (+-7). */
enum fill { FILL_NOISE, FILL_ONES, FILL_ROUTER, FILL_CONV, FILL_ROPE_SHORT, FILL_ROPE_LONG,
            FILL_SINK, FILL_EXP_BIAS };

struct tensor_spec {
    char name[64];
    uint32_t n_dims;
    int64_t ne[3];      /* ne[2]: experts of a 3-D tensor, else 1 */
    enum fill fill;
    int layer;     /* -1 outside the blocks */
    uint32_t type; /* GGML type in the file */
};

#define MAX_PER_LAYER 24

static void add_spec(struct tensor_spec *s, int *n, const char *name, int layer, uint32_t n_dims,
                     int64_t ne0, int64_t ne1, enum fill fill)
{
    struct tensor_spec *t = &s[(*n)++];
    if (layer >= 0)
        snprintf(t->name, sizeof t->name, "blk.%d.%s", layer, name);
    else
        snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = n_dims > 1 ? ne1 : 1;
    t->ne[2] = 1;
    t->fill = fill;
    t->layer = layer;
}

/* The tensors of an architecture in file order (llama.cpp's names and shapes; ne[0] is
 * the input width of a matrix). */
static int list_tensors(enum synth_arch arch, const struct synth_dims *d, struct tensor_spec *s)
{
    int n = 0;
    int64_t E = d->n_embd, Q = (int64_t)d->n_head * d->head_dim, KV = (int64_t)d->n_head_kv * d->head_dim;
    add_spec(s, &n, "token_embd.weight", -1, 2, E, d->n_vocab, FILL_NOISE);
    if (arch == SYNTH_BERT || arch == SYNTH_NOMIC_BERT) {
        /* llama.cpp's LLM_ARCH_BERT / NOMIC_BERT tensors: two token types, bert's absolute
         * positions, the embedding LayerNorm; post-norm layers; no output head */
        const int64_t F = d->n_ff;
        const bool nomic = arch == SYNTH_NOMIC_BERT;
        add_spec(s, &n, "token_types.weight", -1, 2, E, 2, FILL_NOISE);
        if (!nomic)
            add_spec(s, &n, "position_embd.weight", -1, 2, E, d->n_ctx, FILL_NOISE);
        add_spec(s, &n, "token_embd_norm.weight", -1, 1, E, 1, FILL_ONES);
        add_spec(s, &n, "token_embd_norm.bias", -1, 1, E, 1, FILL_NOISE);
        for (int il = 0; il < (int)d->n_layer; il++) {
            if (nomic) {
                add_spec(s, &n, "attn_qkv.weight", il, 2, E, Q + 2 * KV, FILL_NOISE);
            } else {
                add_spec(s, &n, "attn_q.weight", il, 2, E, Q, FILL_NOISE);
                add_spec(s, &n, "attn_q.bias", il, 1, Q, 1, FILL_NOISE);
                add_spec(s, &n, "attn_k.weight", il, 2, E, KV, FILL_NOISE);
                add_spec(s, &n, "attn_k.bias", il, 1, KV, 1, FILL_NOISE);
                add_spec(s, &n, "attn_v.weight", il, 2, E, KV, FILL_NOISE);
                add_spec(s, &n, "attn_v.bias", il, 1, KV, 1, FILL_NOISE);
            }
            add_spec(s, &n, "attn_output.weight", il, 2, Q, E, FILL_NOISE);
            if (!nomic)
                add_spec(s, &n, "attn_output.bias", il, 1, E, 1, FILL_NOISE);
            add_spec(s, &n, "attn_output_norm.weight", il, 1, E, 1, FILL_ONES);
            add_spec(s, &n, "attn_output_norm.bias", il, 1, E, 1, FILL_NOISE);
            if (nomic)
                add_spec(s, &n, "ffn_gate.weight", il, 2, E, F, FILL_NOISE);
            add_spec(s, &n, "ffn_up.weight", il, 2, E, F, FILL_NOISE);
            if (!nomic)
                add_spec(s, &n, "ffn_up.bias", il, 1, F, 1, FILL_NOISE);
            add_spec(s, &n, "ffn_down.weight", il, 2, F, E, FILL_NOISE);
            if (!nomic)
                add_spec(s, &n, "ffn_down.bias", il, 1, E, 1, FILL_NOISE);
            add_spec(s, &n, "layer_output_norm.weight", il, 1, E, 1, FILL_ONES);
            add_spec(s, &n, "layer_output_norm.bias", il, 1, E, 1, FILL_NOISE);
        }
        return n;
    }
    if (arch == SYNTH_PHI3 && d->rope_orig_ctx) {
        add_spec(s, &n, "rope_factors_long.weight", -1, 1, d->n_rot / 2, 1, FILL_ROPE_LONG);
        add_spec(s, &n, "rope_factors_short.weight", -1, 1, d->n_rot / 2, 1, FILL_ROPE_SHORT);
    }
    for (int il = 0; il < (int)d->n_layer && arch == SYNTH_PHI3; il++) {
        add_spec(s, &n, "attn_norm.weight", il, 1, E, 1, FILL_ONES);
        add_spec(s, &n, "attn_qkv.weight", il, 2, E, Q + 2 * KV, FILL_NOISE);
        add_spec(s, &n, "attn_output.weight", il, 2, Q, E, FILL_NOISE);
        add_spec(s, &n, "ffn_norm.weight", il, 1, E, 1, FILL_ONES);
        add_spec(s, &n, "ffn_up.weight", il, 2, E, 2 * (int64_t)d->n_ff, FILL_NOISE);
        add_spec(s, &n, "ffn_down.weight", il, 2, d->n_ff, E, FILL_NOISE);
    }
    for (int il = 0; il < (int)d->n_layer && arch != SYNTH_PHI3; il++) {
        if (arch != SYNTH_OLMO2) /* olmo2 has no pre-norms */
            add_spec(s, &n, "attn_norm.weight", il, 1, E, 1, FILL_ONES);
        if (synth_arch_is_lfm2(arch) && !synth_attn_layer(d, (uint32_t)il)) {
            /* llama.cpp's order: in_proj (B, C, x), the taps (L per channel), out_proj */
            add_spec(s, &n, "shortconv.in_proj.weight", il, 2, E, 3 * E, FILL_NOISE);
            add_spec(s, &n, "shortconv.conv.weight", il, 2, d->conv_l, E, FILL_CONV);
            add_spec(s, &n, "shortconv.out_proj.weight", il, 2, E, E, FILL_NOISE);
            goto ffn;
        }
        const bool qkv_b = arch == SYNTH_QWEN2 || arch == SYNTH_GPTOSS;
        add_spec(s, &n, "attn_q.weight", il, 2, E, Q, FILL_NOISE);
        if (qkv_b)
            add_spec(s, &n, "attn_q.bias", il, 1, Q, 1, FILL_NOISE);
        add_spec(s, &n, "attn_k.weight", il, 2, E, KV, FILL_NOISE);
        if (qkv_b)
            add_spec(s, &n, "attn_k.bias", il, 1, KV, 1, FILL_NOISE);
        add_spec(s, &n, "attn_v.weight", il, 2, E, KV, FILL_NOISE);
        if (qkv_b)
            add_spec(s, &n, "attn_v.bias", il, 1, KV, 1, FILL_NOISE);
        add_spec(s, &n, "attn_output.weight", il, 2, Q, E, FILL_NOISE);
        if (arch == SYNTH_GPTOSS) {
            const int64_t X = d->n_expert, F = d->n_ff_exp;
            add_spec(s, &n, "attn_output.bias", il, 1, E, 1, FILL_NOISE);
            add_spec(s, &n, "attn_sinks.weight", il, 1, d->n_head, 1, FILL_SINK);
            /* llama.cpp's attn_post_norm: the norm before the experts */
            add_spec(s, &n, "post_attention_norm.weight", il, 1, E, 1, FILL_ONES);
            add_spec(s, &n, "ffn_gate_inp.weight", il, 2, E, X, FILL_ROUTER);
            add_spec(s, &n, "ffn_gate_inp.bias", il, 1, X, 1, FILL_ROUTER);
            add_spec(s, &n, "ffn_gate_exps.weight", il, 3, E, F, FILL_NOISE);
            s[n - 1].ne[2] = X;
            add_spec(s, &n, "ffn_gate_exps.bias", il, 2, F, X, FILL_EXP_BIAS);
            add_spec(s, &n, "ffn_up_exps.weight", il, 3, E, F, FILL_NOISE);
            s[n - 1].ne[2] = X;
            add_spec(s, &n, "ffn_up_exps.bias", il, 2, F, X, FILL_EXP_BIAS);
            add_spec(s, &n, "ffn_down_exps.weight", il, 3, F, E, FILL_NOISE);
            s[n - 1].ne[2] = X;
            add_spec(s, &n, "ffn_down_exps.bias", il, 2, E, X, FILL_NOISE);
            continue;
        }
        if (arch == SYNTH_QWEN3 || arch == SYNTH_QWEN3MOE || arch == SYNTH_GEMMA3 ||
            synth_arch_is_lfm2(arch)) {
            add_spec(s, &n, "attn_q_norm.weight", il, 1, d->head_dim, 1, FILL_ONES);
            add_spec(s, &n, "attn_k_norm.weight", il, 1, d->head_dim, 1, FILL_ONES);
        }
        if (arch == SYNTH_OLMO2) { /* whole-row q/k norms */
            add_spec(s, &n, "attn_q_norm.weight", il, 1, Q, 1, FILL_ONES);
            add_spec(s, &n, "attn_k_norm.weight", il, 1, KV, 1, FILL_ONES);
        }
        if (arch == SYNTH_GEMMA3 || arch == SYNTH_GEMMA2 || arch == SYNTH_OLMO2)
            add_spec(s, &n, "post_attention_norm.weight", il, 1, E, 1, FILL_ONES);
    ffn:
        if (arch != SYNTH_OLMO2)
            add_spec(s, &n, "ffn_norm.weight", il, 1, E, 1, FILL_ONES);
        if (arch == SYNTH_QWEN3MOE || (arch == SYNTH_LFM2MOE && (uint32_t)il >= d->n_dense_lead)) {
            const int64_t X = d->n_expert, F = d->n_ff_exp;
            add_spec(s, &n, "ffn_gate_inp.weight", il, 2, E, X, FILL_ROUTER);
            add_spec(s, &n, "ffn_gate_exps.weight", il, 3, E, F, FILL_NOISE);
            s[n - 1].ne[2] = X;
            add_spec(s, &n, "ffn_up_exps.weight", il, 3, E, F, FILL_NOISE);
            s[n - 1].ne[2] = X;
            add_spec(s, &n, "ffn_down_exps.weight", il, 3, F, E, FILL_NOISE);
            s[n - 1].ne[2] = X;
            if (arch == SYNTH_LFM2MOE) /* the selection bias of sigmoid routing */
                add_spec(s, &n, "exp_probs_b.bias", il, 1, X, 1, FILL_NOISE);
            continue;
        }
        add_spec(s, &n, "ffn_gate.weight", il, 2, E, d->n_ff, FILL_NOISE);
        add_spec(s, &n, "ffn_up.weight", il, 2, E, d->n_ff, FILL_NOISE);
        add_spec(s, &n, "ffn_down.weight", il, 2, d->n_ff, E, FILL_NOISE);
        if (arch == SYNTH_GEMMA3 || arch == SYNTH_GEMMA2 || arch == SYNTH_OLMO2)
            add_spec(s, &n, "post_ffw_norm.weight", il, 1, E, 1, FILL_ONES);
    }
    /* lfm2's final norm is token_embd_norm (llama.cpp's name; there is no output_norm) */
    add_spec(s, &n, synth_arch_is_lfm2(arch) ? "token_embd_norm.weight" : "output_norm.weight", -1, 1, E, 1,
             FILL_ONES);
    if (!d->tied)
        add_spec(s, &n, "output.weight", -1, 2, E, d->n_vocab, FILL_NOISE);
    return n;
}

/* The scale of trained weights: N(0, 0.02), the usual initialisation of these models. */
#define WEIGHT_STD 0.02f
/* A router's: trained routers are peaked (a few experts stand out), where N(0, 0.02)
 * would give every expert nearly the same probability and make the choice a near-tie
 * that any rounding flips. 0.25 gives router logits of about unit spread. */
#define ROUTER_STD 0.25f
#define CONV_STD 0.3f
#define SINK_STD 1.0f
#define EXP_BIAS_STD 3.0f

struct fill_job {
    const struct tensor_spec *t;
    uint32_t type;
    uint64_t key;
    uint64_t row_bytes;
    uint8_t *out;
    int64_t r0, r1; /* rows of this job */
    bool nomem;     /* the row buffer could not be allocated */
    bool bad_type;  /* the quantizer refused the type (a bug: types are chosen above) */
};

static void *fill_rows(void *arg)
{
    struct fill_job *j = arg;
    const struct tensor_spec *t = j->t;
    int64_t ne0 = t->ne[0];
    float *x = malloc((size_t)ne0 * sizeof(float));
    j->nomem = x == NULL;
    for (int64_t r = j->r0; x && r < j->r1; r++) {
        for (int64_t c = 0; c < ne0; c++) {
            float ramp = ne0 > 1 ? (float)c / (float)(ne0 - 1) : 0.0f;
            x[c] = t->fill == FILL_ONES         ? 1.0f
                   : t->fill == FILL_ROPE_SHORT ? 1.0f + ramp
                   : t->fill == FILL_ROPE_LONG  ? 1.0f + 39.0f * ramp
                   : (t->fill == FILL_ROUTER     ? ROUTER_STD
                      : t->fill == FILL_CONV       ? CONV_STD
                      : t->fill == FILL_SINK       ? SINK_STD
                      : t->fill == FILL_EXP_BIAS   ? EXP_BIAS_STD
                                                   : WEIGHT_STD) *
                         synth_noise(j->key, (uint64_t)(r * ne0 + c));
        }
        if (!quant_quantize_row(j->type, x, j->out + (uint64_t)r * j->row_bytes, ne0))
            j->bad_type = true;
    }
    free(x);
    return NULL;
}

#define MAX_THREADS 64

/* Fills a tensor's bytes, rows split evenly over threads. */
static enum kn_status make_tensor(const struct tensor_spec *t, uint32_t type, uint64_t seed,
                                  int threads, uint8_t *out, uint64_t row_bytes, struct kn_err *err)
{
    struct fill_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int64_t rows = t->ne[1] * t->ne[2];
    int nt = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    if (rows < nt)
        nt = (int)rows;
    /* small tensors are not worth a thread */
    if ((uint64_t)rows * (uint64_t)t->ne[0] < 65536)
        nt = 1;
    uint64_t key = synth_tensor_key(seed, t->name);
    bool started[MAX_THREADS] = {false};
    for (int i = 0; i < nt; i++) {
        jobs[i] = (struct fill_job){t, type, key, row_bytes, out, rows * i / nt, rows * (i + 1) / nt,
                                    false, false};
        if (i > 0)
            started[i] = pthread_create(&tid[i], NULL, fill_rows, &jobs[i]) == 0;
    }
    fill_rows(&jobs[0]);
    for (int i = 1; i < nt; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            fill_rows(&jobs[i]); /* no thread: do its share here */
    }
    for (int i = 0; i < nt; i++) {
        if (jobs[i].nomem)
            return kn_fail(err, KN_E_NOMEM, "out of memory while making tensor %s", t->name);
        if (jobs[i].bad_type)
            return kn_fail(err, KN_E_INTERNAL, "tensor %s: no quantizer for type %s", t->name,
                           quant_type_name(type));
    }
    return KN_OK;
}

/* ---------------------------------------------------------------- the file */

struct fill_ctx {
    struct tensor_spec *specs;
    int n;
    int next; /* where the name search starts: the writer asks in order */
    uint64_t seed;
    int threads;
    struct kn_progress progress; /* bytes of tensors made, of all */
    int n_made;
};

static enum kn_status fill_tensor(void *ctx, const char *name, void *dst, uint64_t size,
                                  struct kn_err *err)
{
    struct fill_ctx *fc = ctx;
    for (int k = 0; k < fc->n; k++) {
        int i = (fc->next + k) % fc->n;
        const struct tensor_spec *t = &fc->specs[i];
        if (strcmp(t->name, name) != 0)
            continue;
        fc->next = i + 1;
        uint64_t row_bytes;
        if (!quant_row_size(t->type, (uint64_t)t->ne[0], &row_bytes) ||
            row_bytes * (uint64_t)(t->ne[1] * t->ne[2]) != size)
            return kn_fail(err, KN_E_INTERNAL, "tensor %s: the writer asks for %llu bytes", name,
                           (unsigned long long)size);
        char step[128];
        snprintf(step, sizeof step, "tensor %d/%d %s", fc->n_made + 1, fc->n, name);
        kn_progress_update(&fc->progress, fc->progress.done, step);
        enum kn_status st = make_tensor(t, t->type, fc->seed, fc->threads, dst, row_bytes, err);
        fc->n_made++;
        kn_progress_update(&fc->progress, fc->progress.done + size, NULL);
        return st;
    }
    return kn_fail(err, KN_E_INTERNAL, "the writer asks for unknown tensor %s", name);
}

static void set_arch_kv(struct gguf_writer *w, enum synth_arch arch, const struct synth_dims *d)
{
    const char *a = arch_names[arch];
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    gguf_writer_set_u32(w, KEY("context_length"), d->n_ctx);
    gguf_writer_set_u32(w, KEY("embedding_length"), d->n_embd);
    gguf_writer_set_u32(w, KEY("block_count"), d->n_layer);
    gguf_writer_set_u32(w, KEY("feed_forward_length"), d->n_ff);
    gguf_writer_set_u32(w, KEY("attention.head_count"), d->n_head);
    if (synth_arch_is_lfm2(arch)) {
        /* one entry per layer, 0 for a conv layer (int32, as gguf-py writes a list) */
        int32_t kv[512];
        for (uint32_t il = 0; il < d->n_layer; il++)
            kv[il] = synth_attn_layer(d, il) ? (int32_t)d->n_head_kv : 0;
        gguf_writer_set_arr(w, KEY("attention.head_count_kv"), GGUF_T_I32, kv, d->n_layer);
        gguf_writer_set_u32(w, KEY("shortconv.l_cache"), d->conv_l);
    } else {
        gguf_writer_set_u32(w, KEY("attention.head_count_kv"), d->n_head_kv);
    }
    gguf_writer_set_u32(w, KEY("attention.key_length"), d->head_dim);
    gguf_writer_set_u32(w, KEY("attention.value_length"), d->head_dim);
    if (arch == SYNTH_BERT || arch == SYNTH_NOMIC_BERT) {
        gguf_writer_set_f32(w, KEY("attention.layer_norm_epsilon"), d->norm_eps);
        gguf_writer_set_bool(w, KEY("attention.causal"), false);
    } else {
        gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), d->norm_eps);
    }
    gguf_writer_set_f32(w, KEY("rope.freq_base"), d->rope_base);
    gguf_writer_set_u32(w, KEY("rope.dimension_count"), d->n_rot ? d->n_rot : d->head_dim);
    gguf_writer_set_u32(w, KEY("vocab_size"), d->n_vocab);
    if (arch == SYNTH_GEMMA3 || arch == SYNTH_GEMMA2)
        gguf_writer_set_u32(w, KEY("attention.sliding_window"), d->n_swa);
    if (arch == SYNTH_GPTOSS) {
        gguf_writer_set_u32(w, KEY("attention.sliding_window"), d->n_swa);
        if (d->rope_orig_ctx) { /* as the real models' files: YaRN over the original context */
            gguf_writer_set_str(w, KEY("rope.scaling.type"), "yarn");
            gguf_writer_set_f32(w, KEY("rope.scaling.factor"), (float)d->n_ctx / (float)d->rope_orig_ctx);
            gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), d->rope_orig_ctx);
        }
    }
    if (arch == SYNTH_QWEN3MOE || arch == SYNTH_LFM2MOE || arch == SYNTH_GPTOSS) {
        gguf_writer_set_u32(w, KEY("expert_count"), d->n_expert);
        gguf_writer_set_u32(w, KEY("expert_used_count"), d->n_expert_used);
        gguf_writer_set_u32(w, KEY("expert_feed_forward_length"), d->n_ff_exp);
    }
    if (arch == SYNTH_GRANITE) {
        gguf_writer_set_f32(w, KEY("embedding_scale"), d->embd_scale);
        gguf_writer_set_f32(w, KEY("residual_scale"), d->residual_scale);
        gguf_writer_set_f32(w, KEY("attention.scale"), d->attn_scale);
        gguf_writer_set_f32(w, KEY("logit_scale"), d->logit_scale);
    }
    if (d->pooling)
        gguf_writer_set_u32(w, KEY("pooling_type"), d->pooling);
    if ((arch == SYNTH_PHI3 || arch == SYNTH_OLMO2) && d->n_swa)
        gguf_writer_set_u32(w, KEY("attention.sliding_window"), d->n_swa);
    if (arch == SYNTH_PHI3 && d->rope_orig_ctx) {
        /* as llama.cpp's converter writes Phi-3.5: sqrt(1 + ln(ctx / orig) / ln(orig)) */
        double sc = (double)d->n_ctx / (double)d->rope_orig_ctx;
        gguf_writer_set_u32(w, KEY("rope.scaling.original_context_length"), d->rope_orig_ctx);
        gguf_writer_set_f32(w, KEY("rope.scaling.attn_factor"),
                            (float)sqrt(1.0 + log(sc) / log((double)d->rope_orig_ctx)));
    }
    if (arch == SYNTH_GEMMA2) {
        gguf_writer_set_f32(w, KEY("attn_logit_softcapping"), d->attn_softcap);
        gguf_writer_set_f32(w, KEY("final_logit_softcapping"), d->final_softcap);
    }
    if (arch == SYNTH_LFM2MOE) {
        /* llama.cpp's LLM_ARCH_LFM2MOE keys: sigmoid gating (2) over a selection bias */
        gguf_writer_set_u32(w, KEY("leading_dense_block_count"), d->n_dense_lead);
        gguf_writer_set_u32(w, KEY("expert_gating_func"), 2);
    }
#undef KEY
}

static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

enum kn_status synth_write(const struct synth_params *p, const char *path, struct kn_err *err)
{
    struct synth_dims d = p->dims;
    enum kn_status st = synth_check_dims(p->arch, &d, err);
    if (st != KN_OK)
        return st;
    if (p->ftype >= SYNTH_FTYPE_COUNT)
        return kn_fail(err, KN_E_ARG, "unknown weight type");

    struct gguf_file *vf = NULL;
    struct tensor_spec *specs = NULL;
    struct gguf_writer *w = gguf_writer_new();
    if (!w)
        return kn_fail(err, KN_E_NOMEM, "out of memory");

    /* Vocabulary first: it can change n_vocab, which sizes the embedding. */
    uint32_t n_vocab_file = 0;
    if (p->vocab_path) {
        st = gguf_open(&vf, p->vocab_path, err);
        if (st != KN_OK) {
            kn_err_prefix(err, "--vocab");
            goto out;
        }
    }

    gguf_writer_set_str(w, "general.architecture", arch_names[p->arch]);
    gguf_writer_set_str(w, "general.type", "model");
    gguf_writer_set_str(w, "general.name", p->name ? p->name : "kinetic-synth");
    char desc[160];
    snprintf(desc, sizeof desc,
             "random weights made by kinetic synth (seed %llu, %s): real shapes, writes noise",
             (unsigned long long)p->seed, ftypes[p->ftype].name);
    gguf_writer_set_str(w, "general.description", desc);
    gguf_writer_set_u32(w, "general.file_type", ftypes[p->ftype].file_type);
    if (p->ftype != SYNTH_F32 && p->ftype != SYNTH_F16 && p->ftype != SYNTH_BF16)
        gguf_writer_set_u32(w, "general.quantization_version", 2);

    if (vf) {
        st = copy_vocab(w, vf, p->vocab_path, &n_vocab_file, err);
        if (st != KN_OK)
            goto out;
        d.n_vocab = n_vocab_file;
    } else {
        st = builtin_vocab(w, d.n_vocab, p->arch, err);
        if (st != KN_OK)
            goto out;
    }
    /* BERT's two token types (token_types.weight), as llama.cpp's loader reads them */
    if ((p->arch == SYNTH_BERT || p->arch == SYNTH_NOMIC_BERT) &&
        !(vf && gguf_find_kv(vf, "tokenizer.ggml.token_type_count")))
        gguf_writer_set_u32(w, "tokenizer.ggml.token_type_count", 2);
    set_arch_kv(w, p->arch, &d);

    specs = kn_calloc((size_t)d.n_layer * MAX_PER_LAYER + 8, sizeof *specs, err);
    if (!specs) {
        st = KN_E_NOMEM;
        goto out;
    }
    struct fill_ctx fc = {specs, list_tensors(p->arch, &d, specs), 0, p->seed,
                          p->threads > 0 ? p->threads : default_threads(), {0}, 0};
    uint64_t total = 0;
    /* llama.cpp's quantizer counts attn_v tensors, not layers, for its more-bits rule
     * (lfm2 has them in its attention layers only). */
    int n_attn = 0, i_attn = 0;
    const int n_gqa = d.n_head_kv ? (int)(d.n_head / d.n_head_kv) : 1;
    for (uint32_t il = 0; il < d.n_layer; il++)
        n_attn += !synth_arch_is_lfm2(p->arch) || synth_attn_layer(&d, il);
    for (int i = 0; i < fc.n; i++) {
        struct tensor_spec *t = &specs[i];
        bool is_v = ends_with(t->name, "attn_v.weight");
        t->type = synth_tensor_type(p->ftype, t->name, is_v ? i_attn : t->layer,
                                    is_v ? n_attn : (int)d.n_layer, t->ne[0], t->n_dims, d.tied,
                                    n_gqa);
        i_attn += is_v;
        if (t->fill == FILL_CONV)
            t->type = QT_F32; /* llama.cpp's quantizer leaves shortconv.conv.weight as it is */
        /* The writer calls fill_tensor for each tensor while it streams the file, so only
         * the largest tensor is ever in memory. */
        gguf_writer_add_tensor_fill(w, t->name, t->type, t->n_dims, t->ne, fill_tensor, &fc);
        uint64_t row_bytes;
        if (quant_row_size(t->type, (uint64_t)t->ne[0], &row_bytes))
            total += row_bytes * (uint64_t)(t->ne[1] * t->ne[2]);
    }
    kn_progress_begin(&fc.progress, p->progress, stderr, "synth", "bytes", total);
    st = gguf_writer_write(w, path, err);
    kn_progress_end(&fc.progress);
out:
    free(specs);
    gguf_writer_free(w);
    if (vf)
        gguf_close(vf);
    return st;
}
