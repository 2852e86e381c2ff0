/* model.c: reading hyperparameters and weights of the supported architectures from
 * GGUF. Every tensor is found and checked (shape, type) before anything big is
 * allocated, so a file that cannot run fails early with a message naming the problem. */
#include "model_int.h"
#include "moe.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ names */

const char *model_pooling_name(enum model_pooling p)
{
    static const char *const names[] = {"none", "mean", "cls", "last"};
    return (unsigned)p < sizeof names / sizeof names[0] ? names[p] : "unknown";
}

static const char *const arch_names[MODEL_ARCH_COUNT] = {
    "llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "lfm2", "lfm2moe", "gemma2", "phi3",
    "granite", "smollm3", "olmo2", "gpt-oss", "bert", "nomic-bert"};

const char *model_arch_name(enum model_arch a)
{
    return (unsigned)a < MODEL_ARCH_COUNT && arch_names[a] ? arch_names[a] : "unknown";
}

static const struct {
    const char *name, *upper;
    uint32_t qtype;
} kv_types[] = {
    [MODEL_KV_F32] = {"f32", "F32", QT_F32},
    [MODEL_KV_F16] = {"f16", "F16", QT_F16},
    [MODEL_KV_Q8_0] = {"q8_0", "Q8_0", QT_Q8_0},
};

const char *model_kv_type_name(enum model_kv_type t)
{
    return (unsigned)t < (sizeof kv_types / sizeof kv_types[0]) ? kv_types[t].name : "unknown";
}

uint32_t model_kv_qtype(enum model_kv_type t)
{
    return (unsigned)t < (sizeof kv_types / sizeof kv_types[0]) ? kv_types[t].qtype : QT_COUNT;
}

bool model_kv_type_from_name(const char *name, enum model_kv_type *out)
{
    for (size_t i = 0; i < (sizeof kv_types / sizeof kv_types[0]); i++)
        if (strcmp(name, kv_types[i].name) == 0 || strcmp(name, kv_types[i].upper) == 0) {
            *out = (enum model_kv_type)i;
            return true;
        }
    return false;
}

/* ================================================================ hyperparameters */

/* Reads the unsigned integer key "<arch>.<suffix>". Absent: returns KN_OK with *found
 * false (when found is non-NULL) or an error naming the key (when it is required). */
static enum kn_status get_int(const struct gguf_file *g, const char *arch, const char *suffix,
                              int64_t *out, bool *found, struct kn_err *err)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv) {
        if (found) {
            *found = false;
            return KN_OK;
        }
        return kn_fail(err, KN_E_FORMAT, "required key %s is missing; the file is not a complete %s model",
                       key, arch);
    }
    if (kv->value.type == GGUF_T_ARRAY)
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "key %s is a per-layer array; models with per-layer %s are not supported",
                       key, suffix);
    int64_t v;
    if (!gguf_get_i64(g, key, &v) || v < 0 || v > ((int64_t)1 << 40))
        return kn_fail(err, KN_E_FORMAT, "key %s has type %s or an out-of-range value; expected a non-negative integer",
                       key, gguf_vtype_name(kv->value.type));
    *out = v;
    if (found)
        *found = true;
    return KN_OK;
}

static enum kn_status get_float(const struct gguf_file *g, const char *arch, const char *suffix,
                                float *out, bool *found, struct kn_err *err)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (!kv) {
        if (found) {
            *found = false;
            return KN_OK;
        }
        return kn_fail(err, KN_E_FORMAT, "required key %s is missing", key);
    }
    float v;
    if (!gguf_get_f32(g, key, &v) || !isfinite(v))
        return kn_fail(err, KN_E_FORMAT, "key %s has type %s or a non-finite value; expected a float",
                       key, gguf_vtype_name(kv->value.type));
    *out = v;
    if (found)
        *found = true;
    return KN_OK;
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        enum kn_status st_ = (expr);                                                               \
        if (st_ != KN_OK)                                                                          \
            return st_;                                                                            \
    } while (0)

/* Gemma 2 (llama.cpp's LLM_ARCH_GEMMA2): even layers attend to a sliding window (default
 * 4096 positions), odd layers to everything, one RoPE base for both; scores and logits
 * are soft-capped (defaults 50 and 30); queries are scaled after RoPE by
 * 1/sqrt(query_pre_attn_scalar), which the GGUF does not carry: llama.cpp derives it as
 * 1/sqrt(key_length), except for the 27B (46 layers): 1/sqrt(n_embd/n_head). */
static enum kn_status gemma2_hparams(const struct gguf_file *g, const char *arch,
                                     struct model_hparams *hp, struct kn_err *err)
{
    bool found;
    hp->n_swa = 4096;
    TRY(get_int(g, arch, "attention.sliding_window", &hp->n_swa, &found, err));
    if (hp->n_swa <= 0 || hp->n_swa > INT32_MAX)
        return kn_fail(err, KN_E_FORMAT, "gemma2.attention.sliding_window must be positive");
    for (int64_t il = 0; il < hp->n_layer; il++)
        hp->swa_layer[il] = il % 2 == 0;
    hp->attn_softcap = 50.0f;
    hp->final_softcap = 30.0f;
    TRY(get_float(g, arch, "attn_logit_softcapping", &hp->attn_softcap, &found, err));
    TRY(get_float(g, arch, "final_logit_softcapping", &hp->final_softcap, &found, err));
    if (!(hp->attn_softcap > 0.0f) || !(hp->final_softcap > 0.0f))
        return kn_fail(err, KN_E_FORMAT,
                       "gemma2 soft-capping values must be positive (attn_logit_softcapping %g, "
                       "final_logit_softcapping %g)",
                       (double)hp->attn_softcap, (double)hp->final_softcap);
    hp->q_scale = hp->n_layer == 46 ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
                                    : 1.0f / sqrtf((float)hp->head_dim_k);
    hp->kq_scale = 1.0f;
    hp->embd_scale = sqrtf((float)hp->n_embd);
    return KN_OK;
}

/* Granite 3.x (llama.cpp's LLM_ARCH_GRANITE, llm_build_granite): a llama block with four
 * scales, all required keys: embeddings times embedding_scale, attention and FFN outputs
 * times residual_scale before each residual add, scores times attention.scale (instead
 * of 1/sqrt(head size); 0 means that default), logits times 1/logit_scale. RoPE unless
 * rope.scaling.finetuned is false (Granite's switch, default on). */
static enum kn_status granite_hparams(const struct gguf_file *g, const char *arch,
                                      struct model_hparams *hp, struct kn_err *err)
{
    float attn_scale = 0.0f;
    TRY(get_float(g, arch, "embedding_scale", &hp->embd_scale, NULL, err));
    TRY(get_float(g, arch, "residual_scale", &hp->residual_scale, NULL, err));
    TRY(get_float(g, arch, "attention.scale", &attn_scale, NULL, err));
    TRY(get_float(g, arch, "logit_scale", &hp->logit_scale, NULL, err));
    if (hp->embd_scale == 0.0f || hp->residual_scale == 0.0f || !(hp->logit_scale != 0.0f) ||
        attn_scale < 0.0f)
        return kn_fail(err, KN_E_FORMAT,
                       "granite scales embedding_scale %g, residual_scale %g and logit_scale %g "
                       "must be non-zero, attention.scale %g not negative",
                       (double)hp->embd_scale, (double)hp->residual_scale,
                       (double)hp->logit_scale, (double)attn_scale);
    if (attn_scale > 0.0f)
        hp->kq_scale = attn_scale;
    char key[256];
    snprintf(key, sizeof key, "%s.rope.scaling.finetuned", arch);
    const struct gguf_kv *kv = gguf_find_kv(g, key);
    if (kv) {
        bool finetuned;
        if (!gguf_get_bool(g, key, &finetuned))
            return kn_fail(err, KN_E_FORMAT, "%s is not a boolean", key);
        for (int64_t il = 0; il < hp->n_layer; il++)
            hp->no_rope_layer[il] = !finetuned;
    }
    return KN_OK;
}

enum kn_status model_read_hparams(const struct gguf_file *g, struct model_hparams *hp,
                                  struct kn_err *err)
{
    memset(hp, 0, sizeof *hp);
    struct gguf_str s;
    if (!gguf_get_str(g, "general.architecture", &s))
        return kn_fail(err, KN_E_FORMAT, "general.architecture is missing; not a model file");
    char arch[64];
    if (s.len >= sizeof arch)
        return kn_fail(err, KN_E_UNSUPPORTED, "architecture name is too long (%llu bytes)",
                       (unsigned long long)s.len);
    memcpy(arch, s.data, s.len);
    arch[s.len] = 0;
    int a = -1;
    for (int i = 0; i < MODEL_ARCH_COUNT; i++)
        if (arch_names[i] && strcmp(arch, arch_names[i]) == 0)
            a = i;
    if (a < 0)
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "architecture '%s' is not supported (supported: llama, qwen2, qwen3, gemma3, qwen3moe, "
                       "lfm2, lfm2moe, gemma2, phi3, granite, smollm3, olmo2, gpt-oss, bert, nomic-bert)",
                       arch);
    hp->arch = (enum model_arch)a;

    bool found;
    TRY(get_int(g, arch, "context_length", &hp->n_ctx_train, NULL, err));
    TRY(get_int(g, arch, "embedding_length", &hp->n_embd, NULL, err));
    TRY(get_int(g, arch, "block_count", &hp->n_layer, NULL, err));
    TRY(get_int(g, arch, "feed_forward_length", &hp->n_ff, NULL, err));
    TRY(get_int(g, arch, "attention.head_count", &hp->n_head, NULL, err));
    hp->n_head_kv = hp->n_head;
    if (model_arch_is_lfm2(hp->arch)) {
        if (hp->n_layer <= 0 || hp->n_layer > MODEL_MAX_LAYERS || hp->n_head <= 0)
            return kn_fail(err, KN_E_FORMAT, "bad block_count %lld or head_count %lld",
                           (long long)hp->n_layer, (long long)hp->n_head);
        TRY(model_lfm2_hparams(g, arch, hp, err));
    } else {
        TRY(get_int(g, arch, "attention.head_count_kv", &hp->n_head_kv, &found, err));
    }

    if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_ff <= 0 || hp->n_head <= 0 ||
        hp->n_head_kv <= 0 || hp->n_ctx_train <= 0)
        return kn_fail(err, KN_E_FORMAT,
                       "bad hyperparameters: embedding_length %lld, block_count %lld, feed_forward_length %lld, "
                       "head_count %lld, head_count_kv %lld, context_length %lld (all must be positive)",
                       (long long)hp->n_embd, (long long)hp->n_layer, (long long)hp->n_ff,
                       (long long)hp->n_head, (long long)hp->n_head_kv, (long long)hp->n_ctx_train);
    if (hp->n_layer > MODEL_MAX_LAYERS)
        return kn_fail(err, KN_E_UNSUPPORTED, "block_count %lld exceeds the supported %d layers",
                       (long long)hp->n_layer, MODEL_MAX_LAYERS);
    if (hp->n_head % hp->n_head_kv != 0)
        return kn_fail(err, KN_E_FORMAT, "head_count %lld is not a multiple of head_count_kv %lld",
                       (long long)hp->n_head, (long long)hp->n_head_kv);
    TRY(model_moe_read_hparams(g, arch, hp, err));
    int64_t pooling = MODEL_POOLING_NONE;
    TRY(get_int(g, arch, "pooling_type", &pooling, &found, err));
    if (pooling > MODEL_POOLING_LAST)
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "%s.pooling_type %lld is not supported (0 none, 1 mean, 2 cls, 3 last; "
                       "4 is a reranker's rank pooling)", arch, (long long)pooling);
    hp->pooling = (enum model_pooling)pooling;

    hp->head_dim_k = hp->n_embd / hp->n_head;
    hp->head_dim_v = hp->n_embd / hp->n_head;
    TRY(get_int(g, arch, "attention.key_length", &hp->head_dim_k, &found, err));
    TRY(get_int(g, arch, "attention.value_length", &hp->head_dim_v, &found, err));
    hp->n_rot = hp->head_dim_k;
    TRY(get_int(g, arch, "rope.dimension_count", &hp->n_rot, &found, err));
    if (hp->head_dim_k <= 0 || hp->head_dim_v <= 0 || hp->n_rot <= 0 || hp->n_rot > hp->head_dim_k ||
        hp->n_rot % 2 != 0)
        return kn_fail(err, KN_E_FORMAT, "bad head shape: key_length %lld, value_length %lld, rope.dimension_count %lld",
                       (long long)hp->head_dim_k, (long long)hp->head_dim_v, (long long)hp->n_rot);
    /* The supported architectures rotate whole heads (llama.cpp rejects llama files
     * where they differ, and qwen/gemma graphs assert it). */
    if (hp->n_rot != hp->head_dim_k && hp->arch != MODEL_ARCH_PHI3) /* Phi-4-mini: 96 of 128 */
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "%s.rope.dimension_count %lld differs from the head size %lld; partial rotary embeddings are not supported for %s",
                       arch, (long long)hp->n_rot, (long long)hp->head_dim_k, arch);
    if (model_arch_is_lfm2(hp->arch) && hp->n_head * hp->head_dim_k != hp->n_embd)
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "lfm2 needs head_count * key_length = embedding_length (%lld * %lld != %lld), "
                       "as llama.cpp's lfm2 does", (long long)hp->n_head, (long long)hp->head_dim_k,
                       (long long)hp->n_embd);
    if (hp->arch != MODEL_ARCH_GEMMA3 && hp->head_dim_k != hp->head_dim_v)
        return kn_fail(err, KN_E_UNSUPPORTED, "key_length %lld differs from value_length %lld",
                       (long long)hp->head_dim_k, (long long)hp->head_dim_v);
    TRY(get_float(g, arch, model_arch_is_bert(hp->arch) ? "attention.layer_norm_epsilon"
                                                         : "attention.layer_norm_rms_epsilon",
                  &hp->norm_eps, NULL, err));
    if (!(hp->norm_eps >= 0.0f))
        return kn_fail(err, KN_E_FORMAT, "the norm epsilon is negative");

    /* Vocabulary size: <arch>.vocab_size, else the tokenizer's token list. */
    int64_t n_vocab = 0;
    TRY(get_int(g, arch, "vocab_size", &n_vocab, &found, err));
    if (!found) {
        const struct gguf_value *toks = gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_T_STRING);
        if (toks)
            n_vocab = (int64_t)toks->v.arr.n;
    }
    hp->n_vocab = n_vocab; /* 0: taken from token_embd by the tensor check */

    /* RoPE. */
    hp->rope_mode = hp->arch == MODEL_ARCH_LLAMA || hp->arch == MODEL_ARCH_GRANITE ||
                            hp->arch == MODEL_ARCH_SMOLLM3
                        ? MODEL_ROPE_NORM
                        : MODEL_ROPE_NEOX;
    hp->rope_freq_base = 10000.0f;
    TRY(get_float(g, arch, "rope.freq_base", &hp->rope_freq_base, &found, err));
    if (!(hp->rope_freq_base > 0.0f))
        return kn_fail(err, KN_E_FORMAT, "%s.rope.freq_base must be positive", arch);
    hp->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
    char key[256];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_find_kv(g, key)) {
        if (!gguf_get_str(g, key, &s))
            return kn_fail(err, KN_E_FORMAT, "%s is not a string", key);
        if (s.len == 4 && memcmp(s.data, "none", 4) == 0)
            hp->rope_scaling = MODEL_ROPE_SCALING_NONE;
        else if (s.len == 6 && memcmp(s.data, "linear", 6) == 0)
            hp->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
        else if (s.len == 4 && memcmp(s.data, "yarn", 4) == 0)
            hp->rope_scaling = MODEL_ROPE_SCALING_YARN;
        else
            return kn_fail(err, KN_E_UNSUPPORTED, "%s = '%.*s' is not supported (none, linear, yarn)",
                           key, (int)(s.len > 40 ? 40 : s.len), s.data);
    }
    float factor = 0.0f;
    TRY(get_float(g, arch, "rope.scaling.factor", &factor, &found, err));
    if (!found)
        TRY(get_float(g, arch, "rope.scale_linear", &factor, &found, err));
    if (factor < 0.0f)
        return kn_fail(err, KN_E_FORMAT, "%s.rope.scaling.factor is negative", arch);
    hp->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    if (hp->rope_scaling == MODEL_ROPE_SCALING_NONE)
        hp->rope_freq_scale = 1.0f;
    hp->n_ctx_orig_yarn = hp->n_ctx_train;
    TRY(get_int(g, arch, "rope.scaling.original_context_length", &hp->n_ctx_orig_yarn, &found, err));
    hp->yarn_ext_factor = hp->rope_scaling == MODEL_ROPE_SCALING_YARN ? 1.0f : 0.0f;
    hp->yarn_attn_factor = 1.0f;
    TRY(get_float(g, arch, "rope.scaling.attn_factor", &hp->yarn_attn_factor, &found, err));
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    TRY(get_float(g, arch, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast, &found, err));
    TRY(get_float(g, arch, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow, &found, err));
    hp->rope_freq_base_swa = hp->rope_freq_base;
    hp->rope_freq_scale_swa = hp->rope_freq_scale;

    hp->q_scale = 1.0f;
    hp->kq_scale = 1.0f / sqrtf((float)hp->head_dim_k);
    hp->embd_scale = 1.0f;
    hp->residual_scale = 1.0f;
    hp->logit_scale = 1.0f;

    if (hp->arch == MODEL_ARCH_GEMMA3) {
        /* llama.cpp (llama-model.cpp, LLM_ARCH_GEMMA3): five sliding-window layers then
         * one global layer, repeating; local layers use RoPE base 10000 and no scaling;
         * a key at p0 is outside the window of a query at p1 when p1 - p0 >= n_swa. */
        TRY(get_int(g, arch, "attention.sliding_window", &hp->n_swa, NULL, err));
        if (hp->n_swa <= 0)
            return kn_fail(err, KN_E_FORMAT, "gemma3.attention.sliding_window must be positive");
        int64_t pattern = 6;
        TRY(get_int(g, arch, "attention.sliding_window_pattern", &pattern, &found, err));
        if (pattern <= 0)
            return kn_fail(err, KN_E_FORMAT, "gemma3.attention.sliding_window_pattern must be positive");
        for (int64_t il = 0; il < hp->n_layer; il++)
            hp->swa_layer[il] = il % pattern < pattern - 1;
        hp->rope_freq_base_swa = 10000.0f;
        hp->rope_freq_scale_swa = 1.0f;
        /* Gemma 3 scales queries by 1/sqrt(query_pre_attn_scalar); llama.cpp derives it
         * as 1/sqrt(key_length) except for the 27B (62 layers): 1/sqrt(n_embd/n_head).
         * Applied to q after RoPE; scores are then not scaled again. */
        float qs = hp->n_layer == 62 ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head))
                                     : 1.0f / sqrtf((float)hp->head_dim_k);
        hp->q_scale = qs;
        hp->kq_scale = 1.0f;
        /* Embeddings times sqrtf(n_embd) computed in f32, as llama.cpp's ggml_scale. */
        hp->embd_scale = sqrtf((float)hp->n_embd);
    }
    if (hp->arch == MODEL_ARCH_GEMMA2)
        TRY(gemma2_hparams(g, arch, hp, err));
    if (hp->arch == MODEL_ARCH_GRANITE)
        TRY(granite_hparams(g, arch, hp, err));
    if (hp->arch == MODEL_ARCH_SMOLLM3)
        /* llama.cpp (LLM_ARCH_SMOLLM3): layer il skips RoPE when (il + 1) % 4 == 0; the
         * interval is fixed there (n_no_rope_layer_step = 4, no GGUF key), so here too. */
        for (int64_t il = 0; il < hp->n_layer; il++)
            hp->no_rope_layer[il] = (il + 1) % 4 == 0;
    if (hp->arch == MODEL_ARCH_OLMO2) {
        /* llama.cpp (LLM_ARCH_OLMO2): a sliding window where the file has one (OLMo 3),
         * three windowed layers then one global, the windowed ones with plain RoPE. */
        TRY(get_int(g, arch, "attention.sliding_window", &hp->n_swa, &found, err));
        if (hp->n_swa > INT32_MAX)
            return kn_fail(err, KN_E_FORMAT, "olmo2.attention.sliding_window %lld is too large",
                           (long long)hp->n_swa);
        for (int64_t il = 0; il < hp->n_layer; il++)
            hp->swa_layer[il] = hp->n_swa > 0 && il % 4 < 3;
        hp->rope_freq_scale_swa = 1.0f;
    }
    if (hp->arch == MODEL_ARCH_GPTOSS) {
        /* llama.cpp (LLM_ARCH_OPENAI_MOE, set_swa_pattern(2)): even layers attend to a
         * sliding window (128 in the real models), odd ones to everything, one RoPE (YaRN
         * as the file gives it) for both; scores times 1/sqrt(head size). */
        TRY(get_int(g, arch, "attention.sliding_window", &hp->n_swa, NULL, err));
        if (hp->n_swa <= 0 || hp->n_swa > INT32_MAX)
            return kn_fail(err, KN_E_FORMAT, "gpt-oss.attention.sliding_window %lld must be positive",
                           (long long)hp->n_swa);
        for (int64_t il = 0; il < hp->n_layer; il++)
            hp->swa_layer[il] = il % 2 == 0;
        if (hp->n_expert == 0)
            return kn_fail(err, KN_E_FORMAT, "gpt-oss.expert_count is missing or 0; gpt-oss needs experts");
    }
    if (hp->arch == MODEL_ARCH_PHI3) {
        /* llama.cpp (llm_build_phi3): q times 1/sqrt(head size) after RoPE, scores not
         * scaled again. A sliding window, where the file has one, applies to every layer
         * (Phi-3-mini-4k: 2047); llama.cpp currently ignores it (its PR 13676), so the two
         * differ once a sequence is longer than the window. */
        hp->q_scale = 1.0f / sqrtf((float)hp->head_dim_k);
        hp->kq_scale = 1.0f;
        TRY(get_int(g, arch, "attention.sliding_window", &hp->n_swa, &found, err));
        if (hp->n_swa > INT32_MAX)
            return kn_fail(err, KN_E_FORMAT, "phi3.attention.sliding_window %lld is too large",
                           (long long)hp->n_swa);
        for (int64_t il = 0; il < hp->n_layer; il++)
            hp->swa_layer[il] = hp->n_swa > 0;
    }
    if (hp->arch == MODEL_ARCH_BERT) /* absolute position embeddings instead of RoPE */
        for (int64_t il = 0; il < hp->n_layer; il++)
            hp->no_rope_layer[il] = true;
    return KN_OK;
}

/* ================================================================ tensors */

/* One tensor the architecture needs, found during planning. */
struct plan_item {
    const struct gguf_tensor *t;
    int64_t ne0, ne1; /* expected; ne1 = 0 for vectors */
};

static enum kn_status find_tensor(const struct gguf_file *g, const char *name, int64_t ne0,
                                  int64_t ne1, bool required, const struct gguf_tensor **out,
                                  struct kn_err *err)
{
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    *out = NULL;
    if (!t) {
        if (!required)
            return KN_OK;
        return kn_fail(err, KN_E_FORMAT, "tensor %s is missing; the file is incomplete or not this architecture",
                       name);
    }
    int64_t want_dims = ne1 ? 2 : 1;
    bool ok = t->ne[0] == ne0 && (ne1 ? t->ne[1] == ne1 : t->ne[1] == 1) && t->ne[2] == 1 &&
              t->ne[3] == 1;
    if (!ok || (int64_t)t->n_dims > want_dims)
        return kn_fail(err, KN_E_FORMAT,
                       "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld] from the hyperparameters",
                       name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)ne0, (long long)(ne1 ? ne1 : 1));
    if (ne1) {
        if (!kern_type_supported((enum quant_type)t->type))
            return kn_fail(err, KN_E_UNSUPPORTED, "tensor %s has type %s, which this build cannot compute with",
                           name, quant_type_name(t->type));
    } else if (t->type != QT_F32 && t->type != QT_F16 && t->type != QT_BF16) {
        return kn_fail(err, KN_E_UNSUPPORTED, "vector tensor %s has type %s; expected f32, f16 or bf16",
                       name, quant_type_name(t->type));
    }
    *out = t;
    return KN_OK;
}

/* Where each layer tensor goes. */
enum {
    LT_ATTN_NORM, LT_WQ, LT_WK, LT_WV, LT_WO, LT_BQ, LT_BK, LT_BV, LT_BO, LT_Q_NORM, LT_K_NORM,
    LT_POST_ATTN_NORM, LT_FFN_NORM, LT_GATE, LT_UP, LT_DOWN, LT_POST_FFN_NORM,
    LT_CONV_IN, LT_CONV, LT_CONV_OUT,
    LT_QKV,       /* phi3, nomic-bert: q, k and v in one matrix (LT_WQ/WK/WV are then NULL) */
    LT_SINKS,     /* gpt-oss: attn_sinks (n_head) */
    LT_POST_ATTN_NORM_B, LT_POST_FFN_NORM_B, LT_UP_B, LT_DOWN_B, /* bert's biases */
    LT_COUNT
};

struct layer_plan {
    const struct gguf_tensor *t[LT_COUNT];
    const struct gguf_tensor *moe[MOE_TENSORS]; /* MoE layers (moe.h) */
    bool fused_up; /* phi3: LT_UP holds the gate rows (first n_ff) then the up rows */
};

static enum kn_status plan_layer(const struct gguf_file *g, const struct model_hparams *hp, int64_t il,
                                 struct layer_plan *lp, struct kn_err *err)
{
    const int64_t E = hp->n_embd, F = hp->n_ff;
    const int64_t q_out = hp->n_head * hp->head_dim_k;
    const int64_t k_out = hp->n_head_kv * hp->head_dim_k;
    const int64_t v_out = hp->n_head_kv * hp->head_dim_v;
    const int64_t o_in = hp->n_head * hp->head_dim_v;
    const bool qk_norm = hp->arch == MODEL_ARCH_QWEN3 || hp->arch == MODEL_ARCH_QWEN3MOE ||
                         hp->arch == MODEL_ARCH_GEMMA3 || model_arch_is_lfm2(hp->arch);
    /* olmo2: no pre-norms; q and k normed over their whole rows; post norms */
    const bool olmo2 = hp->arch == MODEL_ARCH_OLMO2;
    const bool gemma = hp->arch == MODEL_ARCH_GEMMA3 || hp->arch == MODEL_ARCH_GEMMA2;
    const bool gptoss = hp->arch == MODEL_ARCH_GPTOSS;
    const bool qkv_bias_required = hp->arch == MODEL_ARCH_QWEN2 || gptoss;
    const bool bias_optional = hp->arch == MODEL_ARCH_LLAMA || hp->arch == MODEL_ARCH_GRANITE;
    const bool phi3 = hp->arch == MODEL_ARCH_PHI3;
    char n[128];
#define T(slot, suffix, ne0, ne1, req)                                                             \
    do {                                                                                           \
        snprintf(n, sizeof n, "blk.%lld." suffix, (long long)il);                                  \
        TRY(find_tensor(g, n, ne0, ne1, req, &lp->t[slot], err));                                  \
    } while (0)
    memset(lp, 0, sizeof *lp);
    if (model_arch_is_bert(hp->arch)) {
        /* llama.cpp's llm_build_bert: post-norm LayerNorms with biases after attention
         * (attn_output_norm) and after the FFN (layer_output_norm); bert: separate q, k, v
         * and every product with a bias, GELU FFN; nomic-bert: one qkv matrix, no biases,
         * SwiGLU FFN. */
        const bool nomic = hp->arch == MODEL_ARCH_NOMIC_BERT;
        if (nomic) {
            T(LT_QKV, "attn_qkv.weight", E, q_out + k_out + v_out, true);
        } else {
            T(LT_WQ, "attn_q.weight", E, q_out, true);
            T(LT_WK, "attn_k.weight", E, k_out, true);
            T(LT_WV, "attn_v.weight", E, v_out, true);
            T(LT_BQ, "attn_q.bias", q_out, 0, true);
            T(LT_BK, "attn_k.bias", k_out, 0, true);
            T(LT_BV, "attn_v.bias", v_out, 0, true);
            T(LT_BO, "attn_output.bias", E, 0, true);
            T(LT_UP_B, "ffn_up.bias", F, 0, true);
            T(LT_DOWN_B, "ffn_down.bias", E, 0, true);
        }
        T(LT_WO, "attn_output.weight", o_in, E, true);
        T(LT_POST_ATTN_NORM, "attn_output_norm.weight", E, 0, true);
        T(LT_POST_ATTN_NORM_B, "attn_output_norm.bias", E, 0, true);
        if (nomic)
            T(LT_GATE, "ffn_gate.weight", E, F, true);
        T(LT_UP, "ffn_up.weight", E, F, true);
        T(LT_DOWN, "ffn_down.weight", F, E, true);
        T(LT_POST_FFN_NORM, "layer_output_norm.weight", E, 0, true);
        T(LT_POST_FFN_NORM_B, "layer_output_norm.bias", E, 0, true);
        return KN_OK;
    }
    if (!olmo2)
        T(LT_ATTN_NORM, "attn_norm.weight", E, 0, true);
    if (hp->conv_layer[il]) {
        /* lfm2's short-convolution block instead of attention. The taps are read as a
         * float table (llama.cpp's quantizer leaves shortconv.conv.weight unquantized). */
        T(LT_CONV_IN, "shortconv.in_proj.weight", E, 3 * E, true);
        snprintf(n, sizeof n, "blk.%lld.shortconv.conv.weight", (long long)il);
        const struct gguf_tensor *c = gguf_find_tensor(g, n);
        if (!c)
            return kn_fail(err, KN_E_FORMAT, "tensor %s is missing; the file is incomplete or not this architecture", n);
        if (c->ne[0] != hp->n_conv_l || c->ne[1] != E || c->ne[2] != 1 || c->ne[3] != 1)
            return kn_fail(err, KN_E_FORMAT, "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld] (l_cache, n_embd)",
                           n, (long long)c->ne[0], (long long)c->ne[1], (long long)c->ne[2],
                           (long long)c->ne[3], (long long)hp->n_conv_l, (long long)E);
        if (c->type != QT_F32 && c->type != QT_F16 && c->type != QT_BF16)
            return kn_fail(err, KN_E_UNSUPPORTED, "tensor %s has type %s; expected f32, f16 or bf16", n,
                           quant_type_name(c->type));
        lp->t[LT_CONV] = c;
        T(LT_CONV_OUT, "shortconv.out_proj.weight", E, E, true);
        goto ffn;
    }
    if (phi3)
        T(LT_QKV, "attn_qkv.weight", E, q_out + k_out + v_out, false);
    if (!lp->t[LT_QKV]) {
        T(LT_WQ, "attn_q.weight", E, q_out, true);
        T(LT_WK, "attn_k.weight", E, k_out, true);
        T(LT_WV, "attn_v.weight", E, v_out, true);
    }
    T(LT_WO, "attn_output.weight", o_in, E, true);
    if (qkv_bias_required || bias_optional) {
        T(LT_BQ, "attn_q.bias", q_out, 0, qkv_bias_required);
        T(LT_BK, "attn_k.bias", k_out, 0, qkv_bias_required);
        T(LT_BV, "attn_v.bias", v_out, 0, qkv_bias_required);
    }
    if (bias_optional || gptoss)
        T(LT_BO, "attn_output.bias", E, 0, gptoss);
    if (gptoss)
        T(LT_SINKS, "attn_sinks.weight", hp->n_head, 0, true);
    if (qk_norm) {
        T(LT_Q_NORM, "attn_q_norm.weight", hp->head_dim_k, 0, true);
        T(LT_K_NORM, "attn_k_norm.weight", hp->head_dim_k, 0, true);
    }
    if (olmo2) {
        T(LT_Q_NORM, "attn_q_norm.weight", q_out, 0, true);
        T(LT_K_NORM, "attn_k_norm.weight", k_out, 0, true);
    }
    if (gemma || olmo2) {
        T(LT_POST_ATTN_NORM, "post_attention_norm.weight", E, 0, true);
        T(LT_POST_FFN_NORM, "post_ffw_norm.weight", E, 0, true);
    }
ffn:
    if (gptoss) /* llama.cpp's attn_post_norm: the norm before the experts */
        T(LT_FFN_NORM, "post_attention_norm.weight", E, 0, true);
    else if (!olmo2)
        T(LT_FFN_NORM, "ffn_norm.weight", E, 0, true);
    if (model_layer_is_moe(hp, il))
        return model_moe_plan(g, hp, il, lp->moe, err);
    if (phi3) { /* gate and up in one matrix, as llama.cpp's phi3 loader wants it */
        T(LT_UP, "ffn_up.weight", E, 2 * F, true);
        lp->fused_up = true;
    } else {
        T(LT_GATE, "ffn_gate.weight", E, F, true);
        T(LT_UP, "ffn_up.weight", E, F, true);
    }
    T(LT_DOWN, "ffn_down.weight", F, E, true);
#undef T
    if (hp->arch == MODEL_ARCH_LLAMA || hp->arch == MODEL_ARCH_GRANITE) {
        /* Optional MLP biases exist in a few llama-arch files; refuse rather than ignore. */
        const char *extra[] = {"ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"};
        for (int i = 0; i < 3; i++) {
            snprintf(n, sizeof n, "blk.%lld.%s", (long long)il, extra[i]);
            if (gguf_find_tensor(g, n))
                return kn_fail(err, KN_E_UNSUPPORTED, "tensor %s (an MLP bias) is not supported", n);
        }
    }
    return KN_OK;
}

/* Copies vector tensor t (ne[0] * ne[1] elements) to dst as f32. */
static enum kn_status copy_vec(const struct gguf_tensor *t, float *dst, struct kn_err *err)
{
    const int64_t n = t->ne[0] * t->ne[1]; /* a vector, or lfm2's (n_embd, L) conv taps */
    if (!quant_dequantize_row(t->type, t->data, dst, n))
        return kn_fail(err, KN_E_UNSUPPORTED, "tensor %s: cannot convert type %s to f32", t->name,
                       quant_type_name(t->type));
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(dst[i]))
            return kn_fail(err, KN_E_FORMAT, "tensor %s holds a non-finite value at %lld", t->name,
                           (long long)i);
    return KN_OK;
}

static enum kn_status init_weight(struct kern_weight *w, const struct gguf_tensor *t, bool repack,
                                  struct kn_err *err)
{
    enum kn_status st = kern_weight_init(w, (enum quant_type)t->type, t->ne[1], t->ne[0], t->data,
                                         (size_t)t->size, repack, err);
    if (st != KN_OK)
        kn_err_prefix(err, t->name);
    return st;
}

/* Rows [row0, row0 + n) of matrix t as a weight of its own: a view of the same mapped
 * bytes (phi3's fused q/k/v and gate/up matrices; nothing is copied but the kernels'
 * repacked copy, which every weight gets). */
static enum kn_status init_weight_rows(struct kern_weight *w, const struct gguf_tensor *t,
                                       int64_t row0, int64_t n, bool repack, struct kn_err *err)
{
    const size_t row_bytes = (size_t)(t->size / (uint64_t)t->ne[1]);
    enum kn_status st = kern_weight_init(w, (enum quant_type)t->type, n, t->ne[0],
                                         (const uint8_t *)t->data + (size_t)row0 * row_bytes,
                                         (size_t)n * row_bytes, repack, err);
    if (st != KN_OK)
        kn_err_prefix(err, t->name);
    return st;
}

/* Builds the CPU's repacked copies (only where the CPU runs the layer) of every weight
 * at once, on the pool's threads: at load time this is most of a cold start. */
static enum kn_status repack_weights(struct model *m, struct kern_pool *pool, struct kn_err *err)
{
    const struct model_hparams *hp = &m->hp;
    size_t n = 0, cap = 1;
    for (int64_t il = m->n_dev_layers; il < hp->n_layer; il++)
        cap += 9 + (m->layers[il].moe ? 1 + 3 * (size_t)hp->n_expert : 0);
    struct kern_weight **ws = kn_malloc(cap * sizeof *ws, err);
    if (!ws)
        return KN_E_NOMEM;
    for (int64_t il = m->n_dev_layers; il < hp->n_layer; il++) {
        struct model_layer *L = &m->layers[il];
        struct kern_weight *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate,
                                      &L->ffn_up, &L->ffn_down, &L->conv_in, &L->conv_out};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            if (mats[i]->N) /* absent matrices are all zero */
                ws[n++] = mats[i];
        if (L->moe) {
            ws[n++] = &L->moe->router;
            for (int64_t e = 0; e < 3 * hp->n_expert; e++)
                ws[n++] = &L->moe->exps[e];
        }
    }
    if (m->n_dev_layers < hp->n_layer)
        ws[n++] = &m->output;
    enum kn_status st = kern_weight_repack(pool, ws, n, err);
    free(ws);
    return st;
}

/* ---------------------------------------------------------------- placement */

/* One tensor of a layer as a backend buffer: a weight matrix or a vector of n floats. */
struct layer_tensor {
    struct kern_buf **dst;
    const struct kern_weight *w;
    const float *v;
    int64_t n;
};

enum { LAYER_TENSORS = 25 }; /* the members of struct model_layer_bufs */
static_assert(sizeof(struct model_layer_bufs) == LAYER_TENSORS * sizeof(struct kern_buf *),
              "layer_tensors lists every buffer of a layer");

/* Every tensor of layer L (vectors that are NULL included); returns the count. */
static int layer_tensors(const struct model_hparams *hp, struct model_layer *L,
                         struct layer_tensor out[LAYER_TENSORS])
{
    const int64_t E = hp->n_embd, D = hp->head_dim_k;
    const int64_t QD = hp->n_head * D, KD = hp->n_head_kv * D;
    const bool row_norm = hp->arch == MODEL_ARCH_OLMO2; /* q/k norms over whole rows */
    struct model_layer_bufs *d = &L->d;
    const struct layer_tensor t[LAYER_TENSORS] = {
        {&d->wq, &L->wq, NULL, 0},           {&d->wk, &L->wk, NULL, 0},
        {&d->wv, &L->wv, NULL, 0},           {&d->wo, &L->wo, NULL, 0},
        {&d->ffn_gate, &L->ffn_gate, NULL, 0}, {&d->ffn_up, &L->ffn_up, NULL, 0},
        {&d->ffn_down, &L->ffn_down, NULL, 0},
        {&d->attn_norm, NULL, L->attn_norm, E}, {&d->ffn_norm, NULL, L->ffn_norm, E},
        {&d->attn_q_norm, NULL, L->attn_q_norm, row_norm ? QD : D},
        {&d->attn_k_norm, NULL, L->attn_k_norm, row_norm ? KD : D},
        {&d->post_attn_norm, NULL, L->post_attn_norm, E},
        {&d->post_ffn_norm, NULL, L->post_ffn_norm, E},
        {&d->bq, NULL, L->bq, QD}, {&d->bk, NULL, L->bk, KD}, {&d->bv, NULL, L->bv, KD},
        {&d->bo, NULL, L->bo, E},
        {&d->conv_in, &L->conv_in, NULL, 0}, {&d->conv_out, &L->conv_out, NULL, 0},
        {&d->conv_w, NULL, L->conv_w, E * hp->n_conv_l},
        {&d->attn_sinks, NULL, L->attn_sinks, hp->n_head},
        {&d->post_attn_norm_b, NULL, L->post_attn_norm_b, E},
        {&d->post_ffn_norm_b, NULL, L->post_ffn_norm_b, E},
        {&d->ffn_up_b, NULL, L->ffn_up_b, hp->n_ff}, {&d->ffn_down_b, NULL, L->ffn_down_b, E},
    };
    memcpy(out, t, sizeof t);
    return LAYER_TENSORS;
}

/* The ops layer il needs, from the hyperparameters alone: every required op and the
 * optional ones its blocks call (forward.c, bert.c). This is the one place a layer asks for
 * an optional op: a new one gets its line here, and place_layers refuses a backend that
 * lacks it, by name. */
static kern_op_set layer_ops(const struct model_hparams *hp, int64_t il)
{
    kern_op_set need = kern_backend_required_ops;
    const bool gptoss = hp->arch == MODEL_ARCH_GPTOSS;
    if (model_arch_is_bert(hp->arch)) /* nomic-bert's feed-forward is a SwiGLU, not gelu */
        return need | KERN_OP_BIT(layernorm) | (hp->arch == MODEL_ARCH_BERT ? KERN_OP_BIT(gelu) : 0);
    if (hp->conv_layer[il])
        need |= KERN_OP_BIT(shortconv);
    else if (hp->attn_softcap > 0.0f) /* attn_block's order: soft cap, then sinks */
        need |= KERN_OP_BIT(attention_softcap);
    else if (gptoss)
        need |= KERN_OP_BIT(attention_sinks);
    if (model_layer_is_moe(hp, il))
        need |= KERN_OP_BIT(moe_route) | (gptoss ? KERN_OP_BIT(moe_ffn_oai) : KERN_OP_BIT(moe_ffn));
    return need;
}

/* Puts each layer on its backend (the first n_dev_layers on the device, the rest on the
 * CPU), refusing before anything is uploaded a layer whose backend lacks an op it needs:
 * the message names the layer, the op and what uses it. */
static enum kn_status place_layers(struct model *m, struct kn_err *err)
{
    const struct model_hparams *hp = &m->hp;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        struct model_layer *L = &m->layers[il];
        L->be = il < m->n_dev_layers ? m->dev : kern_backend_cpu();
        const enum kern_op op = kern_backend_first_missing(L->be, layer_ops(hp, il));
        if (op == KERN_OP_COUNT)
            continue;
        const struct kern_op_desc *d = &kern_backend_op_table[op];
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "layer %lld needs the %s op, which %s lacks (used by %s); give the device "
                       "only the layers before it (--gpu-layers %lld) or use --device cpu",
                       (long long)il, d->name, L->be->name, d->needs ? d->needs : "every layer",
                       (long long)il);
    }
    return KN_OK;
}

/* Hands every tensor to the backend that runs it: weights are uploaded once, here. */
static enum kn_status upload_tensors(struct model *m, struct kn_err *err)
{
    const struct model_hparams *hp = &m->hp;
    char name[64];
    enum kn_status st = place_layers(m, err);
    if (st != KN_OK)
        return st;
    for (int64_t il = 0; il < hp->n_layer; il++) {
        struct model_layer *L = &m->layers[il];
        struct layer_tensor t[LAYER_TENSORS];
        int n = layer_tensors(hp, L, t);
        for (int i = 0; i < n; i++) {
            if (t[i].w && t[i].w->data)
                *t[i].dst = L->be->ops->upload_weight(L->be, t[i].w, err);
            else if (t[i].v)
                *t[i].dst = L->be->ops->upload(L->be, t[i].v, t[i].n, err);
            else
                continue;
            if (!*t[i].dst) {
                snprintf(name, sizeof name, "layer %lld on %s", (long long)il, L->be->name);
                kn_err_prefix(err, name);
                return err ? err->status : KN_E_NOMEM;
            }
        }
        if (L->moe && model_moe_upload(L, hp, err) != KN_OK) {
            snprintf(name, sizeof name, "layer %lld on %s", (long long)il, L->be->name);
            kn_err_prefix(err, name);
            return err ? err->status : KN_E_NOMEM;
        }
    }
    struct kern_backend *first = m->layers[0].be, *last = m->layers[hp->n_layer - 1].be;
    m->tok_embd_rows = (struct kern_weight){
        .type = (enum quant_type)m->tok_embd_type, .N = hp->n_vocab, .K = hp->n_embd,
        .data = m->tok_embd, .row_bytes = m->tok_embd_row_bytes,
    };
    const int64_t E = hp->n_embd;
    if (!(m->d_tok_embd = first->ops->upload_rows(first, &m->tok_embd_rows, err)) ||
        !(m->d_output = last->ops->upload_weight(last, &m->output, err)) ||
        (m->output_norm && !(m->d_output_norm = last->ops->upload(last, m->output_norm, E, err))) ||
        (m->type_embd0 && !(m->d_type_embd0 = first->ops->upload(first, m->type_embd0, E, err))) ||
        (m->embd_norm && !(m->d_embd_norm = first->ops->upload(first, m->embd_norm, E, err))) ||
        (m->embd_norm_b && !(m->d_embd_norm_b = first->ops->upload(first, m->embd_norm_b, E, err))) ||
        (m->pos_embd_rows.data &&
         !(m->d_pos_embd = first->ops->upload_rows(first, &m->pos_embd_rows, err))) ||
        (m->output_b && !(m->d_output_b = last->ops->upload(last, m->output_b, hp->n_vocab, err)))) {
        kn_err_prefix(err, "embedding or output head");
        return err ? err->status : KN_E_NOMEM;
    }
    return KN_OK;
}

static void free_tensors(struct model *m)
{
    if (m->layers)
        for (int64_t il = 0; il < m->hp.n_layer; il++) {
            struct layer_tensor t[LAYER_TENSORS];
            int n = layer_tensors(&m->hp, &m->layers[il], t);
            for (int i = 0; i < n; i++) {
                kern_buf_free(*t[i].dst);
                *t[i].dst = NULL;
            }
            model_moe_free(&m->layers[il], &m->hp, true);
        }
    kern_buf_free(m->d_tok_embd);
    kern_buf_free(m->d_output);
    kern_buf_free(m->d_output_norm);
    kern_buf_free(m->d_output_b);
    kern_buf_free(m->d_type_embd0);
    kern_buf_free(m->d_embd_norm);
    kern_buf_free(m->d_embd_norm_b);
    kern_buf_free(m->d_pos_embd);
}

void model_close(struct model *m)
{
    if (!m)
        return;
    free_tensors(m);
    if (m->layers) {
        for (int64_t il = 0; il < m->hp.n_layer; il++) {
            struct model_layer *L = &m->layers[il];
            kern_weight_free(&L->wq);
            kern_weight_free(&L->wk);
            kern_weight_free(&L->wv);
            kern_weight_free(&L->wo);
            kern_weight_free(&L->ffn_gate);
            kern_weight_free(&L->ffn_up);
            kern_weight_free(&L->ffn_down);
            kern_weight_free(&L->conv_in);
            kern_weight_free(&L->conv_out);
            model_moe_free(L, &m->hp, false);
        }
    }
    kern_weight_free(&m->output);
    free(m->layers);
    free(m->vecs);
    gguf_close(m->gguf);
    free(m->path);
    free(m);
}

enum kn_status model_open_gguf(struct model **out, struct gguf_file *g, const char *path,
                               const struct model_load_opts *opts, struct kn_err *err)
{
    *out = NULL;
    bool repack = opts ? opts->repack : true;
    struct kern_backend *dev = opts ? opts->device : NULL;
    int64_t n_dev = dev ? opts->device_layers : 0;
    if (n_dev < 0) {
        gguf_close(g);
        return kn_fail(err, KN_E_ARG, "device layers %lld must not be negative", (long long)n_dev);
    }
    struct model_hparams hp;
    struct layer_plan *plan = NULL;
    struct model *m = NULL;
    enum kn_status st = model_read_hparams(g, &hp, err);
    if (st != KN_OK)
        goto fail;

    /* ---- plan: find and check every tensor; nothing big allocated yet. */
    const struct gguf_tensor *t_embd, *t_out, *t_out_norm, *t_out_b = NULL, *t_rope = NULL;
    t_embd = gguf_find_tensor(g, "token_embd.weight");
    if (!t_embd) {
        st = kn_fail(err, KN_E_FORMAT, "tensor token_embd.weight is missing");
        goto fail;
    }
    if (hp.n_vocab == 0)
        hp.n_vocab = t_embd->ne[1];
    st = find_tensor(g, "token_embd.weight", hp.n_embd, hp.n_vocab, true, &t_embd, err);
    if (st != KN_OK)
        goto fail;
    /* lfm2's final norm is token_embd_norm (llama.cpp: tok_norm); it has no output_norm.
     * bert and nomic-bert have none (their last LayerNorm ends the layers). */
    const bool bert = model_arch_is_bert(hp.arch);
    t_out_norm = NULL;
    if (!bert)
        st = find_tensor(g, model_arch_is_lfm2(hp.arch) ? "token_embd_norm.weight" : "output_norm.weight",
                         hp.n_embd, 0, true, &t_out_norm, err);
    if (st != KN_OK)
        goto fail;
    const struct gguf_tensor *t_types = NULL, *t_pos = NULL, *t_enorm = NULL, *t_enorm_b = NULL;
    if (bert) {
        /* token type 0's row is added to every token (llama.cpp: "Sentence A") */
        t_types = gguf_find_tensor(g, "token_types.weight");
        if (t_types && (t_types->ne[0] != hp.n_embd || t_types->ne[2] != 1 || t_types->ne[3] != 1 ||
                        (t_types->type != QT_F32 && t_types->type != QT_F16))) {
            st = kn_fail(err, KN_E_FORMAT, "tensor token_types.weight must be f32 or f16 rows of %lld",
                         (long long)hp.n_embd);
            goto fail;
        }
        st = find_tensor(g, "token_embd_norm.weight", hp.n_embd, 0, true, &t_enorm, err);
        if (st == KN_OK)
            st = find_tensor(g, "token_embd_norm.bias", hp.n_embd, 0, true, &t_enorm_b, err);
        if (st == KN_OK && hp.arch == MODEL_ARCH_BERT)
            st = find_tensor(g, "position_embd.weight", hp.n_embd, hp.n_ctx_train, true, &t_pos, err);
        if (st != KN_OK)
            goto fail;
    }
    st = find_tensor(g, "output.weight", hp.n_embd, hp.n_vocab, false, &t_out, err);
    if (st != KN_OK)
        goto fail;
    if (hp.arch == MODEL_ARCH_QWEN2) {
        st = find_tensor(g, "output.bias", hp.n_vocab, 0, false, &t_out_b, err);
        if (st != KN_OK)
            goto fail;
    }
    if (hp.arch == MODEL_ARCH_LLAMA) {
        st = find_tensor(g, "rope_freqs.weight", hp.n_rot / 2, 0, false, &t_rope, err);
        if (st != KN_OK)
            goto fail;
    }
    const struct gguf_tensor *t_rope_long = NULL, *t_rope_short = NULL;
    if (hp.arch == MODEL_ARCH_PHI3) {
        st = find_tensor(g, "rope_factors_long.weight", hp.n_rot / 2, 0, false, &t_rope_long, err);
        if (st == KN_OK)
            st = find_tensor(g, "rope_factors_short.weight", hp.n_rot / 2, 0, false, &t_rope_short, err);
        if (st == KN_OK && !t_rope_long != !t_rope_short)
            st = kn_fail(err, KN_E_FORMAT, "tensor rope_factors_%s.weight is missing: LongRoPE needs "
                         "both the long and the short factors", t_rope_long ? "short" : "long");
        if (st != KN_OK)
            goto fail;
    }
    plan = kn_calloc((size_t)hp.n_layer, sizeof *plan, err);
    if (!plan) {
        st = KN_E_NOMEM;
        goto fail;
    }
    size_t n_vec = 0; /* floats of every vector, one allocation */
    n_vec += (size_t)hp.n_embd + (t_out_b ? (size_t)hp.n_vocab : 0) + (t_rope ? (size_t)hp.n_rot / 2 : 0);
    n_vec += t_rope_long ? (size_t)hp.n_rot : 0; /* long and short */
    n_vec += t_types ? (size_t)(t_types->ne[0] * t_types->ne[1]) : 0;
    n_vec += bert ? 2 * (size_t)hp.n_embd : 0;
    for (int64_t il = 0; il < hp.n_layer; il++) {
        st = plan_layer(g, &hp, il, &plan[il], err);
        if (st != KN_OK)
            goto fail;
        for (int k = 0; k < LT_COUNT; k++) {
            const struct gguf_tensor *t = plan[il].t[k];
            if (t && (t->ne[1] == 1 || k == LT_CONV))
                n_vec += (size_t)(t->ne[0] * t->ne[1]);
        }
        for (int k = MOE_FIRST_VEC; k < MOE_TENSORS; k++)
            if (plan[il].moe[k])
                n_vec += (size_t)(plan[il].moe[k]->ne[0] * plan[il].moe[k]->ne[1]);
    }
    /* The embedding rows are read with quant_dequantize_row: check it knows the type. */
    {
        float probe[QK_K];
        const struct quant_type_info *ti = quant_type_info(t_embd->type);
        if (!ti || ti->block_size > QK_K ||
            !quant_dequantize_row(t_embd->type, t_embd->data, probe, ti->block_size)) {
            st = kn_fail(err, KN_E_UNSUPPORTED, "token_embd.weight has type %s, which cannot be dequantized",
                         quant_type_name(t_embd->type));
            goto fail;
        }
    }

    /* ---- commit. */
    m = kn_calloc(1, sizeof *m, err);
    if (!m) {
        st = KN_E_NOMEM;
        goto fail;
    }
    m->gguf = g;
    g = NULL;
    m->hp = hp;
    m->dev = n_dev > 0 ? dev : NULL;
    m->n_dev_layers = n_dev > hp.n_layer ? hp.n_layer : n_dev;
    m->path = kn_strdup(path ? path : "", err);
    m->vecs = kn_malloc(n_vec * sizeof(float), err);
    m->layers = kn_calloc((size_t)hp.n_layer, sizeof *m->layers, err);
    if (!m->path || !m->vecs || !m->layers) {
        st = KN_E_NOMEM;
        goto fail;
    }
    float *vp = m->vecs;
#define VEC(dst, t)                                                                                \
    do {                                                                                           \
        if (t) {                                                                                   \
            st = copy_vec(t, vp, err);                                                             \
            if (st != KN_OK)                                                                       \
                goto fail;                                                                         \
            (dst) = vp;                                                                            \
            vp += (t)->ne[0] * (t)->ne[1];                                                         \
        }                                                                                          \
    } while (0)
    VEC(m->output_norm, t_out_norm);
    VEC(m->output_b, t_out_b);
    VEC(m->rope_freqs, t_rope);
    VEC(m->rope_long, t_rope_long);
    VEC(m->rope_short, t_rope_short);
    VEC(m->type_embd0, t_types);
    VEC(m->embd_norm, t_enorm);
    VEC(m->embd_norm_b, t_enorm_b);
    if (t_pos)
        m->pos_embd_rows = (struct kern_weight){
            .type = (enum quant_type)t_pos->type, .N = hp.n_ctx_train, .K = hp.n_embd,
            .data = t_pos->data, .row_bytes = (size_t)(t_pos->size / (uint64_t)hp.n_ctx_train)};
    m->tok_embd_type = t_embd->type;
    m->tok_embd = t_embd->data;
    m->tok_embd_row_bytes = (size_t)(t_embd->size / (uint64_t)hp.n_vocab);
    m->weight_bytes = 0;
    for (int64_t il = 0; il < hp.n_layer; il++) {
        struct model_layer *L = &m->layers[il];
        const struct gguf_tensor *const *t = plan[il].t;
        VEC(L->attn_norm, t[LT_ATTN_NORM]);
        VEC(L->ffn_norm, t[LT_FFN_NORM]);
        VEC(L->attn_q_norm, t[LT_Q_NORM]);
        VEC(L->attn_k_norm, t[LT_K_NORM]);
        VEC(L->post_attn_norm, t[LT_POST_ATTN_NORM]);
        VEC(L->post_ffn_norm, t[LT_POST_FFN_NORM]);
        VEC(L->bq, t[LT_BQ]);
        VEC(L->bk, t[LT_BK]);
        VEC(L->bv, t[LT_BV]);
        VEC(L->bo, t[LT_BO]);
        VEC(L->conv_w, t[LT_CONV]);
        VEC(L->attn_sinks, t[LT_SINKS]);
        VEC(L->post_attn_norm_b, t[LT_POST_ATTN_NORM_B]);
        VEC(L->post_ffn_norm_b, t[LT_POST_FFN_NORM_B]);
        VEC(L->ffn_up_b, t[LT_UP_B]);
        VEC(L->ffn_down_b, t[LT_DOWN_B]);
        struct {
            struct kern_weight *w;
            int slot;
        } mats[] = {{&L->wq, LT_WQ},         {&L->wk, LT_WK},     {&L->wv, LT_WV},
                    {&L->wo, LT_WO},         {&L->ffn_gate, LT_GATE}, {&L->ffn_up, LT_UP},
                    {&L->ffn_down, LT_DOWN}, {&L->conv_in, LT_CONV_IN},
                    {&L->conv_out, LT_CONV_OUT}};
        /* No repacked copies yet: repack_weights builds them all at once, below. */
        if (model_layer_is_moe(&hp, il)) {
            const float *vec[MOE_TENSORS] = {NULL};
            for (int k = MOE_FIRST_VEC; k < MOE_TENSORS; k++)
                VEC(vec[k], plan[il].moe[k]);
            st = model_moe_init(L, &hp, plan[il].moe, vec, false, &m->weight_bytes, err);
            if (st != KN_OK)
                goto fail;
        }
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) {
            const struct gguf_tensor *tm = t[mats[i].slot];
            /* absent: the dense FFN of an MoE layer; lfm2's attention matrices in a conv
             * layer and its conv ones in an attention layer; q/k/v in phi3's fused matrix.
             * A fused matrix's parts are views, below */
            if (!tm || (plan[il].fused_up && (mats[i].slot == LT_GATE || mats[i].slot == LT_UP)))
                continue;
            st = init_weight(mats[i].w, tm, false, err);
            if (st != KN_OK)
                goto fail;
            m->weight_bytes += (size_t)tm->size;
        }
        if (t[LT_QKV]) {
            const int64_t QO = hp.n_head * hp.head_dim_k, KO = hp.n_head_kv * hp.head_dim_k;
            const int64_t VO = hp.n_head_kv * hp.head_dim_v;
            if ((st = init_weight_rows(&L->wq, t[LT_QKV], 0, QO, false, err)) != KN_OK ||
                (st = init_weight_rows(&L->wk, t[LT_QKV], QO, KO, false, err)) != KN_OK ||
                (st = init_weight_rows(&L->wv, t[LT_QKV], QO + KO, VO, false, err)) != KN_OK)
                goto fail;
            m->weight_bytes += (size_t)t[LT_QKV]->size;
        }
        if (plan[il].fused_up) {
            if ((st = init_weight_rows(&L->ffn_gate, t[LT_UP], 0, hp.n_ff, false, err)) != KN_OK ||
                (st = init_weight_rows(&L->ffn_up, t[LT_UP], hp.n_ff, hp.n_ff, false, err)) != KN_OK)
                goto fail;
            m->weight_bytes += (size_t)t[LT_UP]->size;
        }
    }
#undef VEC
    m->output_tied = t_out == NULL;
    st = init_weight(&m->output, t_out ? t_out : t_embd, false, err);
    if (st == KN_OK && repack)
        st = repack_weights(m, opts ? opts->pool : NULL, err);
    if (st != KN_OK)
        goto fail;
    m->weight_bytes += (size_t)t_embd->size + (t_out ? (size_t)t_out->size : 0);
    st = upload_tensors(m, err);
    if (st != KN_OK)
        goto fail;
    free(plan);
    *out = m;
    return KN_OK;

fail:
    free(plan);
    if (m)
        model_close(m);
    else
        gguf_close(g);
    return st;
}

enum kn_status model_open(struct model **out, const char *path, const struct model_load_opts *opts,
                          struct kn_err *err)
{
    *out = NULL;
    struct gguf_file *g = NULL;
    enum kn_status st = gguf_open(&g, path, err);
    if (st != KN_OK)
        return st;
    st = model_open_gguf(out, g, path, opts, err);
    if (st != KN_OK)
        kn_err_prefix(err, path);
    return st;
}

bool model_rope_long(const struct model *m, int64_t n_ctx)
{
    return m->rope_long && n_ctx > m->hp.n_ctx_orig_yarn;
}

/* ================================================================ KV cache */

/* One position's key and value rows (all heads) and the whole cache's bytes, or the
 * reason a cache of this type and context cannot be made. */
/* One position's key and value rows (all heads) of an attention layer, a conv layer's
 * state row (lfm2, f32), and the whole cache's bytes, or the reason a cache of this type
 * and context cannot be made. */
static enum kn_status kv_shape(const struct model_hparams *hp, int64_t n_ctx, enum model_kv_type type,
                               size_t *k_row, size_t *v_row, size_t *conv_row_bytes, size_t *total,
                               struct kn_err *err)
{
    if (n_ctx <= 0)
        return kn_fail(err, KN_E_ARG, "context size %lld must be positive", (long long)n_ctx);
    if (n_ctx > MODEL_MAX_CTX)
        return kn_fail(err, KN_E_ARG, "context size %lld is too large (at most %lld)",
                       (long long)n_ctx, (long long)MODEL_MAX_CTX);
    const uint32_t qt = model_kv_qtype(type);
    size_t k_head = kern_kv_row_bytes(qt, hp->head_dim_k), v_head = kern_kv_row_bytes(qt, hp->head_dim_v);
    if (k_head == 0 || v_head == 0)
        return kn_fail(err, KN_E_UNSUPPORTED, "a %s KV cache needs head dims that are multiples "
                       "of %u; this model's are %lld (keys) and %lld (values): use --kv-type f16",
                       model_kv_type_name(type), quant_type_info(qt) ? quant_type_info(qt)->block_size : 1u,
                       (long long)hp->head_dim_k, (long long)hp->head_dim_v);
    *k_row = k_head * (size_t)hp->n_head_kv;
    *v_row = v_head * (size_t)hp->n_head_kv;
    int64_t n_conv = 0;
    for (int64_t il = 0; il < hp->n_layer; il++)
        n_conv += hp->conv_layer[il];
    *conv_row_bytes = n_conv ? (size_t)hp->n_embd * sizeof(float) : 0;
    size_t attn_row, conv_row;
    if (!kn_add_size(*k_row, *v_row, &attn_row) ||
        !kn_mul_size(attn_row, (size_t)(hp->n_layer - n_conv), &attn_row) ||
        !kn_mul_size(*conv_row_bytes, (size_t)n_conv, &conv_row) ||
        !kn_add_size(attn_row, conv_row, total) || !kn_mul_size(*total, (size_t)n_ctx, total))
        return kn_fail(err, KN_E_LIMIT, "KV cache size overflows for context %lld", (long long)n_ctx);
    return KN_OK;
}

enum kn_status model_kv_init(struct model_kv *kv, const struct model *m, int64_t n_ctx,
                             enum model_kv_type type, struct kn_err *err)
{
    memset(kv, 0, sizeof *kv);
    const struct model_hparams *hp = &m->hp;
    size_t total;
    enum kn_status st = kv_shape(hp, n_ctx, type, &kv->k_row_bytes, &kv->v_row_bytes,
                                 &kv->conv_row_bytes, &total, err);
    if (st != KN_OK)
        return st;
    kv->type = type;
    kv->n_ctx = n_ctx;
    kv->n_layer = hp->n_layer;
    kv->conv = hp->conv_layer;
    kv->bytes = total;
    const size_t n = (size_t)hp->n_layer;
    kv->k = kn_calloc(n, sizeof(void *), err);
    kv->v = kn_calloc(n, sizeof(void *), err);
    kv->kb = kn_calloc(n, sizeof(struct kern_buf *), err);
    kv->vb = kn_calloc(n, sizeof(struct kern_buf *), err);
    if (!kv->k || !kv->v || !kv->kb || !kv->vb) {
        model_kv_free(kv);
        return KN_E_NOMEM;
    }
    /* Each layer's cache on the backend that runs the layer. Not cleared: a query only
     * reads slots its own sequence wrote (positions up to its own), and untouched pages
     * of a large cache then cost no memory. */
    for (int64_t il = 0; il < hp->n_layer; il++) {
        struct kern_backend *be = m->layers[il].be;
        const bool conv = hp->conv_layer[il];
        kv->kb[il] = be->ops->alloc(be, (conv ? kv->conv_row_bytes : kv->k_row_bytes) * (size_t)n_ctx,
                                    false, err);
        kv->vb[il] = kv->kb[il] && !conv ? be->ops->alloc(be, kv->v_row_bytes * (size_t)n_ctx, false, err)
                                         : NULL;
        if (!kv->kb[il] || (!conv && !kv->vb[il])) {
            model_kv_free(kv);
            return kn_fail(err, KN_E_NOMEM, "cannot allocate the KV cache (%zu MiB for context %lld); use a smaller --ctx-size",
                           total >> 20, (long long)n_ctx);
        }
        kv->k[il] = kv->kb[il]->host;
        kv->v[il] = conv ? NULL : kv->vb[il]->host;
    }
    return KN_OK;
}

size_t model_kv_bytes(const struct model *m, int64_t n_ctx, enum model_kv_type type)
{
    size_t k_row, v_row, conv_row, total;
    struct kn_err err = {0};
    return kv_shape(&m->hp, n_ctx, type, &k_row, &v_row, &conv_row, &total, &err) == KN_OK ? total : 0;
}

void model_kv_free(struct model_kv *kv)
{
    for (int64_t il = 0; il < kv->n_layer; il++) {
        kern_buf_free(kv->kb ? kv->kb[il] : NULL);
        kern_buf_free(kv->vb ? kv->vb[il] : NULL);
    }
    free(kv->k);
    free(kv->v);
    free(kv->kb);
    free(kv->vb);
    memset(kv, 0, sizeof *kv);
}
