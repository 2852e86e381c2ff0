/* synth.h: random-weight models with real shapes (kinetic synth).
 *
 * A synthetic model has the tensors, shapes and metadata llama.cpp (and Kinetic) need to
 * load an architecture, weights drawn from N(0, 0.02)-like noise by a counter-based
 * generator, norms of 1.0, and a vocabulary copied from a vocabulary-only GGUF or built
 * in. Quantization uses Kinetic's reference quantizers (src/quant). The output is a
 * pure function of the parameters: the same parameters give the same bytes on every
 * machine and with any thread count. */
#ifndef KN_SYNTH_H
#define KN_SYNTH_H

#include "../base/base.h"
#include "../base/progress.h"

enum synth_arch {
    SYNTH_LLAMA, SYNTH_QWEN2, SYNTH_QWEN3, SYNTH_GEMMA3, SYNTH_QWEN3MOE, SYNTH_LFM2, SYNTH_LFM2MOE,
    SYNTH_GEMMA2, SYNTH_PHI3, SYNTH_GRANITE, SYNTH_SMOLLM3, SYNTH_OLMO2, SYNTH_GPTOSS, SYNTH_BERT,
    SYNTH_NOMIC_BERT,
    SYNTH_ARCH_COUNT
};

/* The weight type of a file: one GGML type for every matrix (f32 .. q6_k, q3_k, mxfp4), or one of
 * llama.cpp's mixes (q4_k_m, q2_k, q3_k_s/m/l, q5_k_m, iq4_nl, iq4_xs, mxfp4_moe: its
 * llama_ftype of that name, laid out as llama-quantize does without an importance
 * matrix). */
enum synth_ftype {
    SYNTH_F32,
    SYNTH_F16,
    SYNTH_BF16,
    SYNTH_Q8_0,
    SYNTH_Q4_0,
    SYNTH_Q4_1,
    SYNTH_Q5_0,
    SYNTH_Q5_1,
    SYNTH_Q4_K,
    SYNTH_Q5_K,
    SYNTH_Q6_K,
    SYNTH_Q4_K_M,
    SYNTH_Q3_K,
    SYNTH_Q2_K_MIX,
    SYNTH_Q3_K_S,
    SYNTH_Q3_K_M,
    SYNTH_Q3_K_L,
    SYNTH_Q5_K_M,
    SYNTH_IQ4_NL,
    SYNTH_IQ4_XS,
    SYNTH_MXFP4_MOE,
    SYNTH_MXFP4,
    SYNTH_FTYPE_COUNT,
};

#define SYNTH_MAX_ATTN_LAYERS 64

struct synth_dims {
    uint32_t n_embd;     /* model width */
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim;   /* per head; q is n_head * head_dim wide */
    uint32_t n_ff;       /* feed-forward width */
    uint32_t n_vocab;    /* replaced by the vocabulary file's size when one is given */
    uint32_t n_ctx;      /* training context length (metadata only) */
    uint32_t n_swa;      /* gemma2, gemma3: sliding-window size */
    float attn_softcap;  /* gemma2: attn_logit_softcapping (0: the model's 50) */
    float final_softcap; /* gemma2: final_logit_softcapping (0: the model's 30) */
    uint32_t n_rot;      /* rotated dims per head (0: head_dim; phi3 may rotate fewer) */
    uint32_t rope_orig_ctx; /* phi3 LongRoPE: the original context (0: none); writes the
                             * long and short factor tensors and their attn_factor.
                             * gpt-oss: YaRN's original context (factor ctx / it) */
    /* granite's four scales (0: Granite 3.3 2B's 12, 0.22, 1/64 and 8) */
    float embd_scale, residual_scale, attn_scale, logit_scale;
    float rope_base;
    float norm_eps;
    bool tied;           /* no output.weight: the embedding is the output matrix too */
    uint32_t n_expert;      /* qwen3moe, lfm2moe, gpt-oss: experts per layer */
    uint32_t n_expert_used; /* experts per token */
    uint32_t n_ff_exp;      /* width of an expert */
    /* lfm2: the attention layers (the rest are short-convolution layers), ascending; none
     * given: every third layer from layer 2 (2, 5, 8, ...). conv_l: the conv length (3). */
    uint16_t attn_layers[SYNTH_MAX_ATTN_LAYERS];
    uint32_t n_attn_layers;
    uint32_t conv_l;
    uint32_t n_dense_lead;  /* lfm2moe: dense layers before the MoE ones */
    uint32_t pooling;       /* <arch>.pooling_type (0 none: not written; 1 mean, 2 cls,
                             * 3 last): an embedding model */
};

struct synth_params {
    enum synth_arch arch;
    struct synth_dims dims;
    enum synth_ftype ftype;
    const char *vocab_path; /* NULL: the built-in vocabulary */
    uint64_t seed;
    int threads;            /* 0: one per CPU (the output does not depend on it) */
    const char *name;       /* general.name */
    enum kn_progress_mode progress; /* the bytes of tensors made, on standard error
                                     * (KN_PROGRESS_OFF, the zero value: none) */
};

/* The architecture names, for messages and help text (one list: synth_arch_name's). */
#define SYNTH_ARCH_LIST \
    "llama, qwen2, qwen3, gemma3, qwen3moe, lfm2, lfm2moe, gemma2, phi3, granite, smollm3, olmo2, " \
    "gpt-oss, bert, nomic-bert"

const char *synth_arch_name(enum synth_arch a);
const char *synth_ftype_name(enum synth_ftype t);
/* Parse names; return KN_E_ARG with a message listing the valid names. */
KN_MUST_USE enum kn_status synth_parse_arch(const char *s, enum synth_arch *out, struct kn_err *err);
KN_MUST_USE enum kn_status synth_parse_ftype(const char *s, enum synth_ftype *out, struct kn_err *err);

/* Looks up a preset. *arch is in/out: on input the architecture the user asked for
 * (or SYNTH_ARCH_COUNT for none); a preset of another architecture is an error; on
 * output the preset's architecture. "tiny" exists for every architecture. */
KN_MUST_USE enum kn_status synth_preset(const char *name, enum synth_arch *arch,
                                        struct synth_dims *out, struct kn_err *err);
/* A comma-separated list of preset names, for help text. */
const char *synth_preset_list(void);

/* Applies "key=value,key=value" (keys: dim layers heads kv_heads head_dim ffn vocab ctx
 * rope_base eps window tied experts experts_used expert_ffn conv_l attn attn_softcap
 * final_softcap rot rope_orig_ctx embd_scale residual_scale attn_scale logit_scale pooling;
 * attn=2:5:8 lists lfm2's attention layers) to *d. Fails on an unknown key, a malformed or
 * out-of-range value. */
KN_MUST_USE enum kn_status synth_parse_dims(const char *spec, struct synth_dims *d,
                                            struct kn_err *err);
/* Fills the defaults an architecture implies (head_dim, kv heads, ...) and checks that the
 * dimensions are usable. */
KN_MUST_USE enum kn_status synth_check_dims(enum synth_arch arch, struct synth_dims *d,
                                            struct kn_err *err);
/* lfm2: whether layer il is an attention layer (after synth_check_dims). */
bool synth_attn_layer(const struct synth_dims *d, uint32_t il);

/* The GGML type tensor `name` (row length ne0; layer il of n_layer, -1 for none) gets
 * under ftype: llama.cpp's choices for a mix (llama_tensor_get_type; n_gqa = query heads
 * per KV head, which some mixes look at), the single type otherwise, with llama.cpp's
 * fallbacks when ne0 is not a multiple of the block size; 1-D tensors F32. */
uint32_t synth_tensor_type(enum synth_ftype ftype, const char *name, int il, int n_layer,
                           int64_t ne0, uint32_t n_dims, bool tied, int n_gqa);
/* general.file_type for ftype (llama.cpp's llama_ftype numbering). */
uint32_t synth_file_type(enum synth_ftype ftype);

/* Element i of the noise stream `key`: approximately N(0, 1) (a sum of four uniforms,
 * so within +-3.47), computed with integer arithmetic and one float multiply. */
float synth_noise(uint64_t key, uint64_t i);
/* The stream key of a tensor: a hash of the seed and the tensor's name. */
uint64_t synth_tensor_key(uint64_t seed, const char *name);

/* Writes the model to path (atomically). */
KN_MUST_USE enum kn_status synth_write(const struct synth_params *p, const char *path,
                                       struct kn_err *err);

#endif
