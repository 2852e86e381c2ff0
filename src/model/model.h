/* model.h: transformer architectures (llama, qwen2, qwen3, gemma3, qwen3moe, lfm2, gemma2,
 * phi3, granite, smollm3, olmo2, gpt-oss; the encoders bert and nomic-bert, bert.c) loaded
 * from GGUF,
 * and their forward pass over a batch of tokens at given positions.
 *
 * Loading is two-phase: model_open reads every hyperparameter from the `<arch>.*` keys
 * and checks every tensor (present, shape, type has kernels) before committing memory,
 * so an unsupported file fails with a message naming the architecture, tensor or type.
 * Weights stay in the file's memory map; small vectors (norms, biases) are copied to f32.
 *
 * The forward pass obeys docs/numerics.md: every token's result depends only on the
 * model, its own token, its position and the KV cache entries it attends to, never on
 * the batch size, the chunking of a prompt or the thread count. Per-token work runs in
 * token order; threads only split outputs (kernels module). */
#ifndef KN_MODEL_H
#define KN_MODEL_H

#include "../base/base.h"
#include "../gguf/gguf.h"
#include "../kernels/backend.h"
#include "../kernels/kernels.h"

enum model_arch {
    MODEL_ARCH_LLAMA = 0,
    MODEL_ARCH_QWEN2 = 1,
    MODEL_ARCH_QWEN3 = 2,
    MODEL_ARCH_GEMMA3 = 3,
    MODEL_ARCH_QWEN3MOE = 4,
    MODEL_ARCH_LFM2 = 5,
    MODEL_ARCH_LFM2MOE = 6,
    MODEL_ARCH_GEMMA2 = 7,
    MODEL_ARCH_PHI3 = 8,
    MODEL_ARCH_GRANITE = 9,
    MODEL_ARCH_SMOLLM3 = 10,
    MODEL_ARCH_OLMO2 = 11,
    MODEL_ARCH_GPTOSS = 12, /* general.architecture "gpt-oss" */
    MODEL_ARCH_BERT = 13,       /* bert.c: encoders (bge), non-causal, post-norm LayerNorm */
    MODEL_ARCH_NOMIC_BERT = 14, /* bert.c: nomic-embed, rotary, SwiGLU */
    MODEL_ARCH_COUNT,
};

/* "llama", "qwen2", "qwen3", "gemma3", "qwen3moe", "lfm2", "lfm2moe", "gemma2", "phi3",
 * "granite", "smollm3", "olmo2", "gpt-oss", "bert", "nomic-bert". */
const char *model_arch_name(enum model_arch a);

/* lfm2 and lfm2moe (its dense layers first, then mixture-of-experts ones): the same
 * short-convolution and attention layers. */
static inline bool model_arch_is_lfm2(enum model_arch a)
{
    return a == MODEL_ARCH_LFM2 || a == MODEL_ARCH_LFM2MOE;
}

/* bert and nomic-bert (bert.c): encoders whose tokens attend to the whole sequence, so a
 * sequence is one forward call (model_embed) and there is nothing to generate. */
static inline bool model_arch_is_bert(enum model_arch a)
{
    return a == MODEL_ARCH_BERT || a == MODEL_ARCH_NOMIC_BERT;
}

/* How RoPE pairs dimensions: NORM rotates (x[2i], x[2i+1]) (llama), NEOX rotates
 * (x[i], x[i + n_rot/2]) (qwen2, qwen3, gemma3). */
enum model_rope_mode { MODEL_ROPE_NORM = 0, MODEL_ROPE_NEOX = 1 };

/* rope.scaling.type: none, linear (positions times freq_scale), yarn. */
enum model_rope_scaling { MODEL_ROPE_SCALING_NONE = 0, MODEL_ROPE_SCALING_LINEAR = 1,
                          MODEL_ROPE_SCALING_YARN = 2 };

#define MODEL_MAX_LAYERS 512

/* <arch>.pooling_type, llama.cpp's numbering (enum llama_pooling_type): how an embedding
 * model turns its per-position hidden states into one vector (model_embed). */
enum model_pooling { MODEL_POOLING_NONE = 0, MODEL_POOLING_MEAN = 1, MODEL_POOLING_CLS = 2,
                     MODEL_POOLING_LAST = 3 };
/* "none", "mean", "cls", "last". */
const char *model_pooling_name(enum model_pooling p);

struct model_hparams {
    enum model_arch arch;
    int64_t n_vocab;
    int64_t n_ctx_train;   /* <arch>.context_length */
    int64_t n_embd;        /* <arch>.embedding_length */
    int64_t n_layer;       /* <arch>.block_count */
    int64_t n_ff;          /* <arch>.feed_forward_length */
    int64_t n_head;        /* <arch>.attention.head_count */
    int64_t n_head_kv;     /* <arch>.attention.head_count_kv (default n_head) */
    int64_t head_dim_k;    /* <arch>.attention.key_length (default n_embd / n_head) */
    int64_t head_dim_v;    /* <arch>.attention.value_length (default n_embd / n_head) */
    int64_t n_rot;         /* <arch>.rope.dimension_count (default head_dim_k) */
    float norm_eps;        /* <arch>.attention.layer_norm_rms_epsilon (bert, nomic-bert:
                            * layer_norm_epsilon, the LayerNorms') */

    enum model_rope_mode rope_mode;
    enum model_rope_scaling rope_scaling;
    float rope_freq_base;      /* global layers; <arch>.rope.freq_base (default 10000) */
    float rope_freq_scale;     /* 1 / rope.scaling.factor (1 when absent or type none) */
    float rope_freq_base_swa;  /* sliding-window layers (gemma3: 10000) */
    float rope_freq_scale_swa; /* sliding-window layers (gemma3: 1) */
    int64_t n_ctx_orig_yarn;   /* rope.scaling.original_context_length (default n_ctx_train) */
    float yarn_ext_factor;     /* 1 for yarn, else 0 */
    float yarn_attn_factor;    /* rope.scaling.attn_factor (default 1) */
    float yarn_beta_fast, yarn_beta_slow;

    int64_t n_swa;                          /* sliding window in tokens; 0 = none */
    bool swa_layer[MODEL_MAX_LAYERS];       /* true: the layer attends to a window */

    /* lfm2: a layer whose lfm2.attention.head_count_kv entry is 0 is a short-convolution
     * layer (lfm2.c); n_conv_l = lfm2.shortconv.l_cache, the taps of its causal conv. */
    bool conv_layer[MODEL_MAX_LAYERS];
    int64_t n_conv_l;                       /* 0 when no layer is a conv layer */

    /* Attention: softmax(scale_scores * q.k). gemma3 instead multiplies q by
     * q_scale after RoPE (as llama.cpp does) and uses scale_scores = 1. */
    float q_scale;         /* 1 = none */
    float kq_scale;
    float embd_scale;      /* gemma2, gemma3: sqrtf(n_embd) in f32; else 1 */
    /* Soft-capping (gemma2): score = kern_softcapf(score, attn_softcap) inside attention,
     * logits = kern_softcapf(logits, final_softcap); 0 = none. */
    float attn_softcap;    /* <arch>.attn_logit_softcapping (gemma2 default 50) */
    float final_softcap;   /* <arch>.final_logit_softcapping (gemma2 default 30) */
    /* granite: block outputs times residual_scale before they join the residual stream
     * (1 = none), logits times 1/logit_scale (1 = none). */
    float residual_scale;  /* <arch>.residual_scale */
    float logit_scale;     /* <arch>.logit_scale */
    /* true: the layer rotates nothing (smollm3: every fourth layer; granite with
     * rope.scaling.finetuned = false: all) */
    bool no_rope_layer[MODEL_MAX_LAYERS];

    /* Mixture of experts (moe.c; docs/numerics.md "Mixture of experts"); n_expert 0: a
     * dense model. Layers from n_layer_dense_lead on replace the feed-forward block by
     * n_expert experts of width n_ff_exp, n_expert_used of them per token. */
    int64_t n_expert;          /* <arch>.expert_count */
    int64_t n_expert_used;     /* <arch>.expert_used_count */
    int64_t n_ff_exp;          /* <arch>.expert_feed_forward_length */
    int64_t n_layer_dense_lead;/* <arch>.leading_dense_block_count (default 0) */
    struct kern_moe_gate moe_gate; /* the routing rule (gating, k, norm, scale) */

    /* <arch>.pooling_type (default none: not an embedding model) */
    enum model_pooling pooling;
};

/* True when layer il of a model with hyperparameters hp is a mixture of experts. */
static inline bool model_layer_is_moe(const struct model_hparams *hp, int64_t il)
{
    return hp->n_expert > 0 && il >= hp->n_layer_dense_lead;
}

/* A mixture-of-experts layer's tensors (moe.c), owned by the model. Expert e's gate, up
 * and down products are exps[e], exps[n_expert + e], exps[2 n_expert + e]: slices of the
 * file's 3-D tensors ffn_{gate,up,down}_exps, each repacked like a 2-D weight. */
struct model_moe {
    struct kern_weight router;       /* ffn_gate_inp: (n_expert, n_embd) */
    struct kern_weight *exps;        /* (3 n_expert): gate, up (n_ff_exp, n_embd); down (n_embd, n_ff_exp) */
    const float *bias;               /* exp_probs_b (n_expert): selection bias, or NULL */
    /* gpt-oss (else NULL): the router's bias (n_expert), added to its logits; the experts'
     * biases, expert e's at gate_b + e F, up_b + e F (F = n_ff_exp), down_b + e E. */
    const float *router_b, *gate_b, *up_b, *down_b;
    struct kern_buf *d_router, *d_bias, *d_router_b;
    struct kern_buf **d_exps;        /* (3 n_expert) the experts on the layer's backend */
    struct kern_buf **d_exp_b;       /* (3 n_expert) their biases (gate, up, down), or NULL */
};

/* A layer's tensors as the backend that runs it holds them (kernels/backend.h): uploaded
 * once by model_open, freed by model_close. NULL where the host pointer is NULL. */
struct model_layer_bufs {
    struct kern_buf *wq, *wk, *wv, *wo, *ffn_gate, *ffn_up, *ffn_down;
    struct kern_buf *attn_norm, *ffn_norm, *attn_q_norm, *attn_k_norm;
    struct kern_buf *post_attn_norm, *post_ffn_norm;
    struct kern_buf *bq, *bk, *bv, *bo;
    struct kern_buf *conv_in, *conv_out, *conv_w;
    struct kern_buf *attn_sinks;
    struct kern_buf *post_attn_norm_b, *post_ffn_norm_b, *ffn_up_b, *ffn_down_b;
};

/* A weight vector (norm gain, bias) as f32, owned by the model. */
struct model_layer {
    struct kern_weight wq, wk, wv, wo;          /* wq: (n_head*hd_k, n_embd) ... */
    struct kern_weight ffn_gate, ffn_up, ffn_down;
    const float *attn_norm, *ffn_norm;          /* (n_embd); NULL for olmo2 (none) */
    const float *attn_q_norm, *attn_k_norm;     /* (head_dim_k), qwen3 and gemma3; olmo2:
                                                 * (n_head * hd_k), (n_head_kv * hd_k) */
    const float *post_attn_norm, *post_ffn_norm;/* (n_embd), gemma2/3, olmo2 */
    const float *bq, *bk, *bv, *bo;             /* biases or NULL (qwen2: q, k, v) */
    struct model_moe *moe;                      /* mixture of experts, or NULL (dense) */
    /* lfm2 conv layers (no attention tensors): in_proj (3*n_embd, n_embd) gives B, C, x;
     * conv_w (n_embd, n_conv_l) the taps, oldest position first; out_proj (n_embd, n_embd). */
    struct kern_weight conv_in, conv_out;
    const float *conv_w;
    const float *attn_sinks;                    /* gpt-oss: (n_head) sink logits, else NULL */
    /* bert (post-norm): post_attn_norm, post_ffn_norm are attn_output_norm and
     * layer_output_norm, whose LayerNorm biases these are; the FFN's biases (or NULL) */
    const float *post_attn_norm_b, *post_ffn_norm_b, *ffn_up_b, *ffn_down_b;
    struct kern_backend *be;                    /* the backend that runs the layer */
    struct model_layer_bufs d;                  /* the tensors on be */
};

struct model {
    char *path;
    struct gguf_file *gguf;
    struct model_hparams hp;
    /* token_embd: (n_vocab, n_embd) rows in the file's type; read row by row. */
    uint32_t tok_embd_type;
    const uint8_t *tok_embd;
    size_t tok_embd_row_bytes;
    struct kern_weight output;        /* (n_vocab, n_embd); token_embd when tied */
    bool output_tied;
    const float *output_norm;         /* (n_embd); lfm2: token_embd_norm */
    const float *output_b;            /* (n_vocab) or NULL */
    const float *rope_freqs;          /* (n_rot/2) factors (Llama 3.1+) or NULL */
    /* phi3's LongRoPE factors (n_rot/2 each) or NULL: long when the KV cache's context
     * exceeds rope.scaling.original_context_length, else short (model_rope_long). */
    const float *rope_long, *rope_short;
    struct model_layer *layers;       /* n_layer */
    float *vecs;                      /* the storage behind every const float * above */
    size_t weight_bytes;              /* bytes of all weight tensors in the file */
    /* Placement: layers 0..n_dev_layers-1 run on dev, the rest on the CPU backend; the
     * embedding runs on layer 0's backend, the output head on the last layer's. */
    struct kern_backend *dev;         /* NULL: everything on the CPU */
    int64_t n_dev_layers;
    struct kern_weight tok_embd_rows; /* token_embd described for upload_rows */
    struct kern_buf *d_tok_embd, *d_output, *d_output_norm, *d_output_b; /* on their backends */
    /* bert, nomic-bert (bert.c): token type 0's row of token_types (n_embd); the embedding
     * LayerNorm (token_embd_norm weight and bias, n_embd); bert's absolute positions
     * position_embd (n_ctx_train rows of n_embd, read by rows). No output head. */
    const float *type_embd0, *embd_norm, *embd_norm_b;
    struct kern_weight pos_embd_rows;
    struct kern_buf *d_type_embd0, *d_embd_norm, *d_embd_norm_b, *d_pos_embd;
};

struct model_load_opts {
    bool repack; /* let the kernels build SIMD-friendly copies of the weights */
    /* A device backend (kernels/backend.h) for the first device_layers layers (--gpu-layers;
     * more than n_layer means all); NULL or 0 layers: the CPU runs everything. */
    struct kern_backend *device;
    int64_t device_layers;
    /* The threads that build the repacked copies (NULL: the caller's thread alone). */
    struct kern_pool *pool;
    /* Gives the n weights the CPU runs their repacked copies in place of
     * kern_weight_repack (NULL: that), e.g. the engine's repack cache, which maps them from
     * disk. Called once, with the weights in a fixed order (layers in order, each layer's
     * matrices, then the output head); on failure no weight may keep a partial copy. */
    enum kn_status (*repack_fn)(void *ctx, struct kern_pool *pool, struct kern_weight *const *ws,
                                size_t n, struct kn_err *err);
    void *repack_ctx;
};

/* Opens path, validates hyperparameters and tensors, maps the weights. */
KN_MUST_USE enum kn_status model_open(struct model **out, const char *path,
                                      const struct model_load_opts *opts, struct kn_err *err);
/* Same, for an already opened GGUF file, whose ownership passes to the model (closed by
 * model_close, also when this fails). */
KN_MUST_USE enum kn_status model_open_gguf(struct model **out, struct gguf_file *g,
                                           const char *path, const struct model_load_opts *opts,
                                           struct kn_err *err);
void model_close(struct model *m);

/* Whether a KV cache of n_ctx positions runs m with the long RoPE factors (phi3's
 * LongRoPE: n_ctx > rope.scaling.original_context_length, as llama.cpp decides it from its
 * context size); false for models without them. The context size is then part of what
 * decides the output (a receipt's ctx-size setting). */
bool model_rope_long(const struct model *m, int64_t n_ctx);

/* Reads only the hyperparameters (no tensors): used by model_open and by tests. */
KN_MUST_USE enum kn_status model_read_hparams(const struct gguf_file *g, struct model_hparams *hp,
                                              struct kn_err *err);

/* ---------------------------------------------------------------- KV cache */

/* The KV cache element types (docs/numerics.md "Attention over the KV cache"): q8_0 keeps
 * each head's row of a position as blocks of 32 quantized on their own, so a token's
 * entries never depend on its neighbours in a batch. */
enum model_kv_type { MODEL_KV_F32 = 0, MODEL_KV_F16 = 1, MODEL_KV_Q8_0 = 2 };
#define MODEL_KV_TYPE_NAMES "f32, f16 or q8_0" /* for help texts and messages */
const char *model_kv_type_name(enum model_kv_type t);
bool model_kv_type_from_name(const char *name, enum model_kv_type *out);
/* The kernels' tensor type (QT_F32, QT_F16, QT_Q8_0) a cache of type t stores. */
uint32_t model_kv_qtype(enum model_kv_type t);

/* The largest context (KV cache positions) Kinetic accepts: `kinetic run --ctx-size`,
 * serve, model_kv_init and a receipt's device.settings.ctx-size share it. */
#define MODEL_MAX_CTX ((int64_t)1 << 20)

/* Keys and values of one sequence, slot = position, head-major: attention layer l keeps
 * k[l]: (n_head_kv, n_ctx, head_dim_k), v[l]: (n_head_kv, n_ctx, head_dim_v), so one
 * head's rows are contiguous for attention. k_row_bytes: one position, all heads.
 * Layer l's buffers kb[l], vb[l] live on the backend that runs layer l; k[l], v[l] are
 * their host addresses (NULL for a layer on a device: host code such as the prompt cache
 * then has to copy through the backend; planned with the GPU backends, issue 18). */
struct model_kv {
    enum model_kv_type type;
    int64_t n_ctx;
    int64_t n_layer;
    size_t k_row_bytes, v_row_bytes;
    /* lfm2's conv layers keep, instead of keys and values, the row bx(p) (n_embd f32,
     * whatever the type) at slot p in k[l]; v[l] is NULL. conv_row_bytes is 0 for a
     * model without conv layers; conv[l] tells the conv layers (docs/models.md). */
    size_t conv_row_bytes;
    const bool *conv;
    void **k, **v;                /* per layer, host addresses or NULL */
    struct kern_buf **kb, **vb;   /* per layer */
    size_t bytes;
};

KN_MUST_USE enum kn_status model_kv_init(struct model_kv *kv, const struct model *m, int64_t n_ctx,
                                         enum model_kv_type type, struct kn_err *err);
/* The bytes model_kv_init allocates for n_ctx positions of type t (0: it would refuse). */
size_t model_kv_bytes(const struct model *m, int64_t n_ctx, enum model_kv_type type);
void model_kv_free(struct model_kv *kv);

/* ---------------------------------------------------------------- forward pass */

/* Activations sized once for at most max_tokens tokens per call. */
struct model_fwd;

KN_MUST_USE enum kn_status model_fwd_create(struct model_fwd **out, const struct model *m,
                                            int64_t max_tokens, struct kern_pool *pool,
                                            struct kn_err *err);
void model_fwd_free(struct model_fwd *f);
int64_t model_fwd_max_tokens(const struct model_fwd *f);

/* Runs n tokens (n <= max_tokens) at positions pos[i] through the model, writing their
 * keys and values into kv at slot pos[i], then attending, for token i, to every slot
 * p <= pos[i] (within the window on sliding-window layers). The caller guarantees that
 * slots below each pos[i] hold this sequence's entries (earlier calls or earlier tokens
 * of this call). Writes logits (n_out, n_vocab) for the tokens out_rows[0..n_out-1]
 * (indices into the batch, any order). Allocates nothing. */
KN_MUST_USE enum kn_status model_forward(struct model_fwd *f, struct model_kv *kv,
                                         const int32_t *tokens, const int32_t *pos, int64_t n,
                                         const int64_t *out_rows, int64_t n_out, float *logits,
                                         struct kn_err *err);
/* The same over tokens of several sequences at once (Convoy): token i writes and reads
 * the cache kvs[i] (all of one type). Tokens of one sequence should be adjacent: each run
 * of equal kvs[i] is one attention call. Each token's bits are those model_forward gives
 * it alone, since every step is per token except attention, which reads only the token's
 * own cache (docs/numerics.md). */
KN_MUST_USE enum kn_status model_forward_multi(struct model_fwd *f, struct model_kv *const *kvs,
                                               const int32_t *tokens, const int32_t *pos,
                                               int64_t n, const int64_t *out_rows, int64_t n_out,
                                               float *logits, struct kn_err *err);
/* model_forward's twin for embeddings: the same pass, but writes the output rows'
 * final-normed hidden states (n_out, n_embd) (rmsnorm(x) * output_norm, the rows the
 * output head would multiply) to hidden instead of logits. The logits path is untouched:
 * both share every step up to that norm. */
KN_MUST_USE enum kn_status model_forward_hidden(struct model_fwd *f, struct model_kv *kv,
                                                const int32_t *tokens, const int32_t *pos,
                                                int64_t n, const int64_t *out_rows, int64_t n_out,
                                                float *hidden, struct kn_err *err);

/* ---------------------------------------------------------------- embeddings (embed.c) */

/* The embedding of tokens[0..n-1] (one sequence, positions 0..n-1, evaluated into kv
 * from slot 0 in chunks of the forward's batch size, which changes no bit): the hidden
 * states pooled by m->hp.pooling (mean: the f32 sum in position order divided by n; cls:
 * position 0; last: position n-1), truncated to the first dims values (1..n_embd;
 * Matryoshka), then L2-normalised (docs/numerics.md "Embeddings"); out: (dims). A model
 * with pooling none is refused (KN_E_UNSUPPORTED), as is dims outside 1..n_embd
 * (KN_E_ARG). Allocates one chunk of hidden states per call. */
/* Whether the architecture's embedding models are trained for Matryoshka truncation
 * (a prefix of the vector is itself an embedding), so dims below n_embd is meaningful:
 * qwen3 (Qwen3-Embedding), nomic-bert (nomic-embed-text v1.5). The GGUF says nothing
 * about it; this table does. */
bool model_embed_matryoshka(const struct model_hparams *hp);
/* The batch size of the forward context model_embed needs: n_batch (prompt chunks), or
 * for an encoder (bert, nomic-bert: a sequence is one pass) the context n_ctx. */
int64_t model_embed_batch(const struct model_hparams *hp, int64_t n_batch, int64_t n_ctx);
KN_MUST_USE enum kn_status model_embed(struct model_fwd *f, struct model_kv *kv,
                                       const int32_t *tokens, int64_t n, int64_t dims,
                                       float *out, struct kn_err *err);

#endif
