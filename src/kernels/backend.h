/* backend.h: the device seam. The forward pass (src/model/forward.c) reaches the kernels
 * only through this interface; the CPU kernels (backend_cpu.c) are its first
 * implementation; the GPU backends (src/vulkan, src/cuda) implement the same table.
 *
 * Level. One call per op per layer over buffers the backend owns (activations, KV caches,
 * uploaded weights), never a call per row or per scalar loop: RMSNorm over T rows, up to
 * four products sharing an input, attention over every sequence of the batch, ... A
 * forward pass is one pass on each backend it uses: begin, the ops in order, end. A GPU
 * backend records the ops of a pass into one command buffer and submits it at end; the
 * CPU backend runs each op when called (begin and end do nothing).
 *
 * Objects.
 *   struct kern_backend  an open device (a static singleton for the CPU): the op table,
 *                        its name and the numerics class it computes.
 *   struct kern_buf      memory of one backend: model data uploaded once (weights,
 *                        vectors, the embedding table), activations, a KV cache layer.
 *   struct kern_stream   what one forward context needs on the backend: scratch for
 *                        quantized activations, the thread pool (CPU), a command buffer
 *                        and descriptor pools (GPU). One pass at a time per stream;
 *                        streams that share a CPU thread pool must not run passes at
 *                        the same time (kern_pool_run is not reentrant).
 *
 * Who owns what memory.
 *   - Weights: the model owns the file's map and its struct kern_weight (with the CPU's
 *     repacked copy); upload_weight gives the backend's copy (a GPU repacks for itself).
 *     The CPU backend copies nothing: its buffer refers to the kern_weight. The host data
 *     must outlive the buffer either way.
 *   - Vectors (norm gains, biases) and the embedding table: upload / upload_rows; the
 *     CPU refers to the host memory, a device copies it.
 *   - Activations and KV caches: alloc; owned by whoever allocated them (model_fwd,
 *     model_kv), freed with kern_buf_free. A buffer's host pointer is non-NULL only when
 *     its bytes are addressable by the host (the CPU backend: always; a GPU: never); code
 *     above the backend may touch host memory only through that pointer or to_host /
 *     from_host.
 *   - Host arrays an op takes (token ids, positions, row lists, the attention run list)
 *     are read during the call: a backend that records copies what it needs.
 *   - Logits are the one result that leaves a pass in host memory: op logits writes
 *     (M, N) floats to caller memory, valid when end returns.
 *
 * Numerics. Every op computes the bits docs/numerics.md fixes for it (canonical-1): the
 * portable references in src/kernels are the specification. A backend reports the class
 * it meets with numerics(): KN_NUMERICS ("canonical-1") when its results equal the CPU
 * reference bit for bit (a GPU decides this with a self-test at start-up: its own probes
 * of fused fma, denormals kept, correctly rounded division and sqrt, then
 * kern_backend_check below, every op against the CPU on crafted inputs), otherwise its
 * own class string (e.g. "vulkan-<gpu>-<driver>"), which
 * then goes into receipts. A backend that meets canonical-1 can run any subset of the
 * layers (--gpu-layers) without changing a bit; results never depend on the batch size,
 * a row's place in the batch, the chunking of a prompt or the thread count.
 *
 * What a backend implements: every member of struct kern_backend_ops except the optional
 * ones, which the op table at the end (KERN_BACKEND_OPS) names.
 * Shapes: T tokens of the batch, n elements of a row, H query heads, Hkv key/value heads,
 * D head dimension; buffers hold f32 rows with stride n (row t at element t * n) unless
 * stated. Outputs may alias inputs only where "in place" is said. */
#ifndef KN_KERNELS_BACKEND_H
#define KN_KERNELS_BACKEND_H

#include "kernels.h"
#include "ops.h"

struct kern_backend;

/* Memory of one backend. Made by the backend's alloc/upload calls; the fields are for
 * the backend that made it, except host (see above) and bytes. */
struct kern_buf {
    struct kern_backend *be;       /* the backend that made it (frees it) */
    void *host;                    /* host address of the bytes, or NULL (device only) */
    void *dev;                     /* the backend's own handle, or NULL */
    size_t bytes;
    const struct kern_weight *w;   /* upload_weight / upload_rows: the host description */
};

/* A forward context on one backend. Backends embed it as their stream's first member. */
struct kern_stream {
    struct kern_backend *be;
    const struct kern_backend_ops *ops;
};

/* What a stream must be able to run: the largest batch and the model's widths. */
struct kern_stream_shape {
    int64_t max_tokens;   /* T per pass */
    int64_t n_embd, n_ff; /* E, F */
    int64_t n_head, n_head_kv, head_dim;
    /* Mixture of experts (0: none): experts per layer, experts per token, the width of an
     * expert's products (n_ff counts it too). */
    int64_t n_expert, n_expert_used, n_ff_exp;
};

/* The products' gated activations: y = act(g) * u. */
enum kern_glu { KERN_GLU_SWIGLU = 0, KERN_GLU_GEGLU = 1,
                KERN_GLU_SWIGLU_OAI = 2 /* gpt-oss's clamped SwiGLU, kern_swiglu_oai */ };

/* One run of batch tokens sharing a KV cache (one sequence), for one layer. */
struct kern_kv_run {
    int64_t t0, n;             /* tokens t0 .. t0 + n - 1 of the batch */
    struct kern_buf *k, *v;    /* the layer's cache, head-major (Hkv, n_ctx, D) */
    int64_t n_ctx;
    int64_t n_kv;              /* 1 + the largest position of the run's tokens */
};

/* Storing a batch's keys and values, and attention over the caches (ops.h "attention";
 * docs/numerics.md "Attention"). */
struct kern_attn_batch {
    struct kern_buf *q;             /* (T, H*D), RoPE applied and scaled */
    struct kern_buf *k_new, *v_new; /* (T, Hkv*D) this batch's keys and values */
    struct kern_buf *out;           /* (T, H*D) */
    const int32_t *pos;             /* (T) host: each token's position = its cache slot */
    int64_t n_tok;                  /* T */
    const struct kern_kv_run *runs; /* host, in batch order, covering 0..T-1 */
    int64_t n_runs;
    uint32_t kv_type;               /* QT_F32, QT_F16 or QT_Q8_0 */
    int32_t n_head, n_head_kv, head_dim;
    float scale;                    /* score = canonical_dot(q, k) * scale */
    int32_t window;                 /* 0: causal; w > 0: sliding window of w positions */
    float softcap;                  /* 0 for attention; c > 0 (attention_softcap only):
                                     * score = kern_softcapf(score, c) */
    const struct kern_buf *sinks;   /* NULL for attention; (H) f32 (attention_sinks only):
                                     * gpt-oss's per-head sink logits (ops.h kern_attn_args) */
};

/* lfm2's short convolution over a batch (ops.h kern_shortconv; docs/numerics.md "Short
 * convolution"). A conv layer's cache holds bx (E f32) at slot p of each sequence. */
struct kern_conv_batch {
    const struct kern_buf *bcx;     /* (T, 3E): B, C, x of each token (in_proj's output) */
    struct kern_buf *out;           /* (T, E) */
    const struct kern_buf *w;       /* (E, L) taps, oldest position first */
    const int32_t *pos;             /* (T) host */
    int64_t n_tok;                  /* T */
    const struct kern_kv_run *runs; /* host; k: the layer's rows (n_ctx, E) f32; v unused */
    int64_t n_runs;
    int32_t n_embd, n_taps;         /* E, L (<= KERN_CONV_MAX_L) */
};

/* One mixture-of-experts layer's expert products (ops.h "mixture of experts";
 * docs/numerics.md "Mixture of experts"): n_expert uploaded weights of each product,
 * gate and up (F, E), down (E, F). */
struct kern_moe_ffn {
    int32_t n_expert, n_used;             /* k of n */
    enum kern_glu act;                    /* y = act(gate x) * up x; KERN_GLU_SWIGLU_OAI only
                                           * through moe_ffn_oai */
    const struct kern_buf *const *gate;   /* (n_expert) */
    const struct kern_buf *const *up;     /* (n_expert) */
    const struct kern_buf *const *down;   /* (n_expert) */
    /* gpt-oss (moe_ffn_oai only; NULL otherwise): per-expert biases added to each product's
     * output rows, gate and up (F) before the activation, down (E) before the weighting. */
    const struct kern_buf *const *gate_b, *const *up_b, *const *down_b; /* (n_expert) each */
};

struct kern_backend_ops {
    /* ---- the device */
    /* The numerics class this backend computes: KN_NUMERICS or its own (see above). */
    const char *(*numerics)(const struct kern_backend *be);

    /* ---- memory (outside a pass). NULL and err set on failure. */
    /* bytes of activations or cache; zero: cleared, else the contents are undefined
     * (a large KV cache then costs no memory until written). */
    struct kern_buf *(*alloc)(struct kern_backend *be, size_t bytes, bool zero,
                              struct kn_err *err);
    /* Read-only model floats (n of them), valid as long as the buffer lives. */
    struct kern_buf *(*upload)(struct kern_backend *be, const float *host, int64_t n,
                               struct kn_err *err);
    /* A weight matrix for matmul/logits (w initialised by kern_weight_init). */
    struct kern_buf *(*upload_weight)(struct kern_backend *be, const struct kern_weight *w,
                                      struct kn_err *err);
    /* A table read by rows (the embedding): w->N rows of w->K elements of w->type, any
     * type quant_dequantize_row reads (w need not come from kern_weight_init). */
    struct kern_buf *(*upload_rows)(struct kern_backend *be, const struct kern_weight *w,
                                    struct kn_err *err);
    void (*free)(struct kern_backend *be, struct kern_buf *b);

    /* ---- streams */
    struct kern_stream *(*stream_create)(struct kern_backend *be,
                                         const struct kern_stream_shape *shape,
                                         struct kern_pool *pool, struct kn_err *err);
    void (*stream_free)(struct kern_stream *s);
    /* A pass: begin, ops, end. end submits (GPU), waits, and reports a device error. */
    void (*begin)(struct kern_stream *s);
    enum kn_status (*end)(struct kern_stream *s, struct kn_err *err);

    /* ---- ops (inside a pass, in order; T <= the stream's max_tokens) */
    /* x (T, E) = rows tokens[t] of table, times scale (exactly x * scale; 1: none). */
    void (*embed)(struct kern_stream *s, struct kern_buf *x, const struct kern_buf *table,
                  const int32_t *tokens, int64_t T, float scale);
    /* The RoPE sin/cos table (T, n_rot) of positions pos (kern_rope_table). */
    void (*rope_table)(struct kern_stream *s, struct kern_buf *tab, const struct kern_rope *rope,
                       const int32_t *pos, int64_t T);
    /* Rotates x (T, H, D) in place by tab (kern_rope). */
    void (*rope)(struct kern_stream *s, struct kern_buf *x, const struct kern_buf *tab,
                 const struct kern_rope *rope, int64_t T, int64_t H, int64_t D);
    /* y (rows, n) = rmsnorm(x) * w (w NULL: no gain); in place allowed. */
    void (*rmsnorm)(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *x,
                    const struct kern_buf *w, int64_t rows, int64_t n, float eps);
    /* y_i (M, w_i->N) = x (M, K) . w_i^T for i < n (1..KERN_MM_MAX weights, one K). */
    void (*matmul)(struct kern_stream *s, int n, const struct kern_buf *const *w,
                   const struct kern_buf *x, int64_t M, struct kern_buf *const *y);
    /* y (M, n) += b (n) on every row. */
    void (*add_rows)(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *b,
                     int64_t M, int64_t n);
    /* y (n) += a (n). */
    void (*add)(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *a, int64_t n);
    /* y (n) *= v. */
    void (*scale)(struct kern_stream *s, struct kern_buf *y, float v, int64_t n);
    /* g (n) = act(g) * u. */
    void (*glu)(struct kern_stream *s, enum kern_glu kind, struct kern_buf *g,
                const struct kern_buf *u, int64_t n);
    /* dst row j (n) = src row rows[j] for j < n_rows (dst and src distinct). */
    void (*gather)(struct kern_stream *s, struct kern_buf *dst, const struct kern_buf *src,
                   const int64_t *rows, int64_t n_rows, int64_t n);
    /* Writes k_new, v_new row t into its run's cache at slot pos[t] (kern_kv_store). */
    void (*kv_store)(struct kern_stream *s, const struct kern_attn_batch *b);
    /* out = attention of q over each run's cache (slots 0..n_kv-1, stored before). */
    void (*attention)(struct kern_stream *s, const struct kern_attn_batch *b);
    /* logits (M, w->N) in host memory = x (M, K) . w^T (+ bias b (w->N) if non-NULL);
     * valid when end returns. */
    void (*logits)(struct kern_stream *s, const struct kern_buf *w, const struct kern_buf *b,
                   const struct kern_buf *x, int64_t M, float *logits);
    /* lfm2: first, for every token t, bx = B * x (one f32 multiply) into its run's rows
     * at slot pos[t]; then out[t] = kern_shortconv of C over the slots pos[t]-L+1..pos[t]
     * (those >= 0). A device backend may leave it NULL: model_open then keeps conv
     * layers off that device. */
    void (*shortconv)(struct kern_stream *s, const struct kern_conv_batch *b);
    /* Copies bytes between a buffer (from byte off) and host memory: to_host's dst is
     * valid when end returns; from_host reads src during the call. For the hand-over of
     * the residual stream between backends (--gpu-layers). */
    void (*to_host)(struct kern_stream *s, const struct kern_buf *b, size_t off, void *dst,
                    size_t bytes);
    void (*from_host)(struct kern_stream *s, struct kern_buf *b, size_t off, const void *src,
                      size_t bytes);

    /* ---- mixture of experts (docs/numerics.md "Mixture of experts"). A device may leave
     * these NULL: model_open then refuses to place an MoE layer on it. */
    /* ids (T, k) int32 and w (T, k) f32 = kern_moe_route of logits (T, n_expert) with the
     * selection bias (n_expert) or NULL. */
    void (*moe_route)(struct kern_stream *s, const struct kern_moe_gate *g,
                      const struct kern_buf *logits, const struct kern_buf *bias, int64_t T,
                      struct kern_buf *ids, struct kern_buf *w);
    /* y (T, E) = for each token t, over its ranks r in order: y_t = sum of
     * w[t,r] * down_e(act(gate_e x_t) * up_e x_t), e = ids[t,r], every product and the
     * activation exactly as for the token alone (x and y distinct). A backend may group
     * the tokens by expert; the bits do not depend on it. */
    void (*moe_ffn)(struct kern_stream *s, const struct kern_moe_ffn *f, const struct kern_buf *x,
                    const struct kern_buf *ids, const struct kern_buf *w, int64_t T,
                    struct kern_buf *y);

    /* ---- soft-capped attention (Gemma 2; docs/numerics.md "Soft-capping"). A device may
     * leave it NULL: model_open then refuses to place a layer of a soft-capped model on it,
     * and kern_backend_check leaves it out. */
    /* As attention, for a batch with softcap > 0 (attention is called with softcap 0). */
    void (*attention_softcap)(struct kern_stream *s, const struct kern_attn_batch *b);

    /* ---- gpt-oss (docs/numerics.md "gpt-oss"). A device may leave these NULL: model_open
     * then refuses to place a gpt-oss layer on it, naming the op, and kern_backend_check
     * leaves them out. */
    /* As attention, for a batch with sinks (attention is called with sinks NULL). */
    void (*attention_sinks)(struct kern_stream *s, const struct kern_attn_batch *b);
    /* As moe_ffn, with act KERN_GLU_SWIGLU_OAI (gate and up first plus their biases) and
     * the expert biases of f (any of them may be NULL). */
    void (*moe_ffn_oai)(struct kern_stream *s, const struct kern_moe_ffn *f, const struct kern_buf *x,
                        const struct kern_buf *ids, const struct kern_buf *w, int64_t T,
                        struct kern_buf *y);

    /* ---- the BERT family's blocks (model/bert.c). A device may leave them NULL: model_open
     * then keeps a bert or nomic-bert layer off it. */
    /* y (rows, n) = kern_layernorm of x with gain w and bias b; in place allowed. */
    void (*layernorm)(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *x,
                      const struct kern_buf *w, const struct kern_buf *b, int64_t rows,
                      int64_t n, float eps);
    /* x (n) = gelu(x) (kern_gelu: BERT's feed-forward activation, ungated). */
    void (*gelu)(struct kern_stream *s, struct kern_buf *x, int64_t n);
};

struct kern_backend {
    const struct kern_backend_ops *ops;
    const char *name; /* "cpu", later "vulkan:0", "cuda:0" */
};

/* The CPU backend: the kernels of the active ISA (dispatch.c) on the stream's thread pool. */
struct kern_backend *kern_backend_cpu(void);

/* Conformance to canonical-1, op by op (backend_check.c): runs every op of be and of the
 * CPU backend on the same crafted inputs (seeded values with negative zeros, denormals
 * and large magnitudes mixed in; every weight type; embedding tables; both RoPE modes with
 * YaRN; f32, f16 and q8_0 caches; causal and windowed attention over two sequences and across
 * two passes) and compares every output byte. KN_OK: be gave the CPU's bits on all of
 * them; KN_E_MISMATCH with err naming the first op and byte that differ. A device's
 * start-up self-test (numerics()) runs this after its own probes of fused fma, denormals,
 * division and sqrt. Takes milliseconds on the CPU. */
KN_MUST_USE enum kn_status kern_backend_check(struct kern_backend *be, struct kern_pool *pool,
                                              struct kn_err *err);

/* ================================================================ the op table
 * Every member of struct kern_backend_ops, in member order, once: its name and whether a
 * device may lack it. This one list drives model_open's refusals (a layer says the set of
 * ops it needs; kern_backend_first_missing names the first its backend lacks),
 * kern_backend_check (a check whose ops the backend lacks is left out), the tests' op
 * lists and a device self-test's report. Adding an op:
 * its member above and one line here (REQ(name) or OPT(name, "what needs it"));
 * backend_ops.c asserts at compile time that the list and the struct agree.
 *   REQ(name)          every backend has it
 *   OPT(name, needs)   a device may leave it NULL; needs says which layers then stay off
 *                      the device (model_open refuses to place them there, naming the op) */
#define KERN_BACKEND_OPS(REQ, OPT)                                                              \
    REQ(numerics) REQ(alloc) REQ(upload) REQ(upload_weight) REQ(upload_rows) REQ(free)          \
    REQ(stream_create) REQ(stream_free) REQ(begin) REQ(end)                                     \
    REQ(embed) REQ(rope_table) REQ(rope) REQ(rmsnorm) REQ(matmul) REQ(add_rows) REQ(add)        \
    REQ(scale) REQ(glu) REQ(gather) REQ(kv_store) REQ(attention) REQ(logits)                    \
    OPT(shortconv, "lfm2's short-convolution layers")                                           \
    REQ(to_host) REQ(from_host)                                                                 \
    OPT(moe_route, "mixture-of-experts layers")                                                 \
    OPT(moe_ffn, "mixture-of-experts layers")                                                   \
    OPT(attention_softcap, "gemma2's soft-capped attention layers")                             \
    OPT(attention_sinks, "gpt-oss's attention layers")                                          \
    OPT(moe_ffn_oai, "gpt-oss's expert layers")                                                \
    OPT(layernorm, "bert's and nomic-bert's layers")                                            \
    OPT(gelu, "bert's feed-forward layers")

/* KERN_OP_<name>: an op's index in the table (and its slot in struct kern_backend_ops). */
#define KERN_OP_ENUM_REQ_(name) KERN_OP_##name,
#define KERN_OP_ENUM_OPT_(name, needs) KERN_OP_##name,
enum kern_op { KERN_BACKEND_OPS(KERN_OP_ENUM_REQ_, KERN_OP_ENUM_OPT_) KERN_OP_COUNT };

struct kern_op_desc {
    const char *name;   /* the member's name: "attention_softcap" */
    size_t offset;      /* offsetof(struct kern_backend_ops, name) */
    bool optional;      /* a device may lack it */
    const char *needs;  /* optional ops: the layers that need it; else NULL */
};
/* The table, indexed by enum kern_op (backend_ops.c). */
extern const struct kern_op_desc kern_backend_op_table[KERN_OP_COUNT];

/* A set of ops: bit KERN_OP_<name> is set for each op in it. */
typedef uint64_t kern_op_set;
_Static_assert(KERN_OP_COUNT <= 64, "kern_op_set holds 64 ops");
#define KERN_OP_BIT(name) ((kern_op_set)1 << KERN_OP_##name)
/* The required ops (REQ lines): what every layer needs. */
extern const kern_op_set kern_backend_required_ops;

/* Whether be's table has op (its member is not NULL). */
bool kern_backend_has_op(const struct kern_backend *be, enum kern_op op);
/* The first op of need (in table order) that be lacks, or KERN_OP_COUNT when it has them
 * all: the one loop behind every refusal and every skipped check. */
enum kern_op kern_backend_first_missing(const struct kern_backend *be, kern_op_set need);
/* Whether be has every op of need. */
static inline bool kern_backend_has_ops(const struct kern_backend *be, kern_op_set need)
{
    return kern_backend_first_missing(be, need) == KERN_OP_COUNT;
}
/* The name of the first required op of be's table that is NULL ("attention"), or NULL
 * when be has every required op: model_open refuses to place a layer on a device that
 * lacks one, naming it. */
const char *kern_backend_missing_op(const struct kern_backend *be);
/* Writes to out the optional ops be lacks with what needs each ("moe_route, moe_ffn
 * (mixture-of-experts layers); ..."), or "" when it has them all; returns the count. */
int kern_backend_missing_optional(const struct kern_backend *be, char *out, size_t cap);

/* Frees b through its backend; NULL is allowed. */
static inline void kern_buf_free(struct kern_buf *b)
{
    if (b)
        b->be->ops->free(b->be, b);
}

#endif
