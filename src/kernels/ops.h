/* ops.h: the non-matmul kernels (Kinetic's own math, RMSNorm, RoPE, softmax, gated
 * activations, elementwise ops, embedding rows, KV stores, attention over the KV cache).
 *
 * Every function here computes bits fixed by docs/numerics.md (sections "Kinetic's own
 * math" to "What is scalar on every ISA"): the portable reference (ops.c, attn.c, kmath.c)
 * is the specification, and the AVX2 and AVX-512 versions produce the same bits on every
 * input. No result depends on the batch size, a row's place in the batch, the thread count
 * or how work was split.
 *
 * Shapes use fixed letters: n = elements of a row, T = tokens, H = query heads,
 * Hkv = key/value heads, D = head dimension, P = positions in a KV cache. A "stride" is in
 * elements of the array's type, never bytes. Outputs may alias inputs (y == x) where a
 * comment says "in place allowed"; no other overlap is allowed. */
#ifndef KN_KERNELS_OPS_H
#define KN_KERNELS_OPS_H

#include "../base/base.h"
#include "../quant/quant.h"
#include "isa.h"
#include "kern_hd.h"

/* ---------------------------------------------------------------- Kinetic's own math
 * Built from +, -, *, fma, exactly rounded / and sqrt only (no libm), so no library or
 * compiler version changes a bit. Accuracy (measured, tests/unit/test_kmath.c) is in
 * docs/numerics.md. */

/* e^x in float. exp(-inf) = 0, exp(+inf) = +inf, NaN in gives NaN out, results below
 * 2^-149 flush to 0 by ordinary rounding; max error about 1 ulp. */
float kern_expf(float x);
/* Natural logarithm in float (computed in double, rounded once): log(0) = -inf,
 * log(x < 0) = NaN. */
float kern_logf(float x);
/* tanh in float (computed in double, rounded once). */
float kern_tanhf(float x);
/* Logit soft-capping (Gemma 2): kern_tanhf(x * (1.0f / c)) * c, the reciprocal one f32
 * division, then one product, the tanh, one product (docs/numerics.md "Soft-capping").
 * Scalar on every ISA. c must be positive. */
float kern_softcapf(float x, float c);
/* y = kern_softcapf(x, c) elementwise; in place allowed. */
void kern_softcap(float *y, const float *x, float c, int64_t n);
/* SiLU x / (1 + e^-x), with kern_expf. */
float kern_siluf(float x);
/* gpt-oss's clamped SwiGLU (llama.cpp's ggml_swiglu_oai), with its constants:
 *   x = KERN_OAI_LIMIT < g ? KERN_OAI_LIMIT : g          (clamped above; NaN stays)
 *   y = KERN_OAI_LIMIT < u ? KERN_OAI_LIMIT : u;  y = -KERN_OAI_LIMIT > y ? -KERN_OAI_LIMIT : y
 *   out = (x / (1 + kern_expf(-(KERN_OAI_ALPHA * x)))) * (y + 1)
 * each step one f32 operation (docs/numerics.md "gpt-oss"). */
#define KERN_OAI_ALPHA KN_OAI_ALPHA /* 1.702f (kern_hd.h: shared with CUDA) */
#define KERN_OAI_LIMIT KN_OAI_LIMIT /* 7.0f */
float kern_swiglu_oaif(float g, float u);
/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated through the
 * identity 0.5 (1 + tanh(z)) = 1 / (1 + e^(-2z)) as x / (1 + kern_expf(-x * (C0 + C1 x^2))). */
float kern_geluf(float x);

/* Double-precision helpers for tables built once (RoPE frequencies and angles). */
double kern_exp_f64(double x);
double kern_log_f64(double x);          /* x > 0 */
double kern_pow_f64(double b, double e); /* b > 0: exp(e * log(b)) */
/* sin and cos of x, |x| < 2^30 (larger |x| gives NaN). Cody-Waite reduction by pi/2 in
 * double with fma, then Taylor polynomials: about 1e-16 absolute error for |x| <= 1e6. */
void kern_sincos_f64(double x, double *s, double *c);

/* ---------------------------------------------------------------- elementwise
 * Flat arrays of n floats; in place allowed (y may equal any input). */

void kern_exp(float *y, const float *x, int64_t n);                     /* y = kern_expf(x) */
void kern_add(float *y, const float *a, const float *b, int64_t n);     /* y = a + b */
void kern_mul(float *y, const float *a, const float *b, int64_t n);     /* y = a * b */
void kern_scale(float *y, const float *x, float s, int64_t n);          /* y = x * s */
void kern_silu(float *y, const float *x, int64_t n);                    /* y = silu(x) */
void kern_swiglu(float *y, const float *g, const float *u, int64_t n);  /* y = silu(g) * u */
void kern_gelu(float *y, const float *x, int64_t n);                    /* y = gelu(x) */
void kern_geglu(float *y, const float *g, const float *u, int64_t n);   /* y = gelu(g) * u */
void kern_swiglu_oai(float *y, const float *g, const float *u, int64_t n); /* kern_swiglu_oaif */

/* Softmax of one row: m = max x, e = exp(x - m), s = canonical sum of e, y = e / s.
 * At least one x must be finite (> -inf). In place allowed. */
void kern_softmax(float *y, const float *x, int64_t n);
/* Log-softmax of one row: y = (x - m) - kern_logf(s), m and s as in kern_softmax. */
void kern_log_softmax(float *y, const float *x, int64_t n);

/* RMSNorm of n_rows rows of n: ss = canonical sum of x*x (fma), mean = ss / n,
 * r = 1 / sqrt(mean + eps), y = (x * r) * w (w == NULL: y = x * r).
 * x row i at x + i*x_stride, y row i at y + i*y_stride; in place allowed. */
void kern_rmsnorm(float *y, int64_t y_stride, const float *x, int64_t x_stride, const float *w,
                  int64_t n_rows, int64_t n, float eps);

/* LayerNorm of n_rows rows of n (BERT; docs/numerics.md "LayerNorm"): s = sum of x in
 * the canonical reduction's 16 lanes and tree, mean = s / n; d = x - mean;
 * var = canonical dot of d with itself / n; r = 1 / sqrt(var + eps);
 * y = (d * r) * w + b (w, b NULL: none). Scalar sums, then the dispatched dot: one result
 * on every ISA. Rows as kern_rmsnorm's; in place allowed. */
void kern_layernorm(float *y, int64_t y_stride, const float *x, int64_t x_stride, const float *w,
                    const float *b, int64_t n_rows, int64_t n, float eps);

/* ---------------------------------------------------------------- mixture of experts
 * Routing (docs/numerics.md "Mixture of experts"): scalar on every ISA except the
 * softmax, whose bits every level shares. A token's experts and weights are a function of
 * its own router logits only. */

#define KERN_MOE_MAX_EXPERTS KN_MOE_MAX_EXPERTS /* 512 */  /* n_expert of a layer (llama.cpp: LLAMA_MAX_EXPERTS) */
#define KERN_MOE_MAX_USED 64       /* experts per token */
/* The smallest sum the chosen weights are divided by (llama.cpp clamps to the smallest
 * normal f16 so that a row of zero weights does not divide by zero). */
#define KERN_MOE_NORM_MIN KN_MOE_NORM_MIN /* 6.103515625e-5f (kern_hd.h) */

/* p = softmax(logits) or sigmoid(logits) = 1 / (1 + kern_expf(-logit)); SOFTMAX_WEIGHT
 * (gpt-oss, llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT): p = the logits
 * themselves for the choice, the chosen k weights then kern_softmax of their logits in
 * rank order. */
enum kern_moe_gating { KERN_MOE_SOFTMAX = KN_MOE_SOFTMAX, KERN_MOE_SIGMOID = KN_MOE_SIGMOID,
                       KERN_MOE_SOFTMAX_WEIGHT = KN_MOE_SOFTMAX_WEIGHT };

/* How a token's experts are chosen. */
struct kern_moe_gate {
    enum kern_moe_gating gating;
    int32_t n_expert;   /* 1..KERN_MOE_MAX_EXPERTS */
    int32_t n_used;     /* k: 1..min(n_expert, KERN_MOE_MAX_USED) */
    bool norm;          /* divide the chosen weights by their sum */
    float scale;        /* then multiply them by scale (1: none) */
};

/* logits: (T, n_expert) router outputs; bias: (n_expert) added to p for the choice only,
 * or NULL -> ids: (T, k) experts by rank, w: (T, k) their weights. Per token:
 * p = gating(logits); s = p + bias; rank r takes the largest s not taken yet, ties to the
 * lower expert index; w_r = p[id_r] (SOFTMAX_WEIGHT: w = kern_softmax(w) over the k ranks); if norm: sum = ((w_0 + w_1) + ...) in rank order,
 * clamped below at KERN_MOE_NORM_MIN, w_r = w_r / sum; then w_r *= scale. */
void kern_moe_route(const struct kern_moe_gate *g, const float *logits, const float *bias,
                    int64_t T, int32_t *ids, float *w);

/* ---------------------------------------------------------------- RoPE */

enum kern_rope_mode {
    KERN_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): llama */
    KERN_ROPE_NEOX = 1, /* rotate halves (x[i], x[i + n_rot/2]): qwen2, gemma, ... */
};

#define KERN_ROPE_MAX_DIM 1024

/* What a model's metadata says about its rotary embedding. */
struct kern_rope_params {
    enum kern_rope_mode mode;
    int32_t n_rot;             /* rotated dims per head: even, <= KERN_ROPE_MAX_DIM */
    double freq_base;          /* theta, e.g. 10000 or 1e6 (> 0) */
    double freq_scale;         /* linear scaling: angle *= freq_scale (1 = none; > 0) */
    const float *freq_factors; /* NULL or n_rot/2 divisors of each frequency (Llama 3.1) */
    /* YaRN (ext_factor = 0 turns it off; then attn_factor still scales sin and cos). */
    double ext_factor;
    double attn_factor;        /* 1 = none */
    double beta_fast, beta_slow;
    int32_t n_ctx_orig;        /* training context, for YaRN's correction dims */
};

/* Frequencies derived once from the params (double precision, scalar on every ISA). */
struct kern_rope {
    enum kern_rope_mode mode;
    int32_t n_rot;
    double mscale;                        /* sin and cos are multiplied by this */
    double freq[KERN_ROPE_MAX_DIM / 2];   /* angle of pair i at position p = p * freq[i] */
};

/* Fills rope from params; fails on impossible params (n_rot odd or too big, base <= 0,
 * a frequency factor <= 0 ...) with a message naming the field. */
KN_MUST_USE enum kn_status kern_rope_init(struct kern_rope *rope,
                                          const struct kern_rope_params *params,
                                          struct kn_err *err);
/* Sin/cos table for T positions: table (T, 2, n_rot/2): row t holds cos of pairs
 * 0..n_rot/2-1 then sin of them, each (float)(mscale * cos(pos[t] * freq[i])) computed in
 * double by kern_sincos_f64 (the SIMD levels run its steps on 4 or 8 doubles at a time).
 * Positions must be in [0, 2^30). */
void kern_rope_table(const struct kern_rope *rope, const int32_t *pos, int64_t n_tok,
                     float *table);
/* Rotates x in place: x (T, H, D) with token t's heads at x + t*x_stride, head h at
 * + h*head_dim; the first n_rot dims of each head are rotated by the table row of t
 * (from kern_rope_table), the rest stay. For a pair (x0, x1), cos c, sin s:
 *   y0 = fmaf(x0, c, -(x1 * s)),  y1 = fmaf(x0, s, x1 * c). */
void kern_rope(const struct kern_rope *rope, float *x, int64_t x_stride, int64_t n_tok,
               int64_t n_head, int64_t head_dim, const float *table);

/* ---------------------------------------------------------------- rows of a tensor */

/* Converts one embedding (or any) row of n elements of type t (QT_F32, QT_F16, QT_BF16;
 * exact) to f32. Returns false for other types: quantized rows go through
 * quant_dequantize_row. */
KN_MUST_USE bool kern_row_to_f32(uint32_t t, const void *row, float *y, int64_t n);
/* Stores n floats into a KV cache row of type t (QT_F32: copy; QT_F16: round to nearest
 * even with quant_f32_to_f16; QT_Q8_0: n a multiple of 32, each block of 32 quantized on
 * its own by quant's reference Q8_0 rule, so a row depends on its own values only).
 * Returns false for other types or a Q8_0 row that is not whole blocks. */
KN_MUST_USE bool kern_kv_store(uint32_t t, void *dst, const float *x, int64_t n);
/* Bytes of a KV cache row of n elements of type t (the types kern_kv_store writes); 0 for
 * another type or a Q8_0 row that is not whole blocks. The one size rule of every cache. */
size_t kern_kv_row_bytes(uint32_t t, int64_t n);

/* ---------------------------------------------------------------- short convolution
 * lfm2's conv layers: a depthwise causal convolution of L taps over the rows bx(p) of one
 * sequence (docs/numerics.md "Short convolution"). Scalar on every ISA: it costs T*n*L
 * fmas per layer, nothing next to the products around it. */

#define KERN_CONV_MAX_L 16

/* One token, n channels: rows[i] (i < L) is bx at position p - L + 1 + i (the token's own
 * row last), NULL for a position before 0; w (n, L) the taps, channel c at w + c*L. Per
 * channel c:
 *   acc = +0.0f; for i = 0..L-1 with rows[i] != NULL: acc = fmaf(rows[i][c], w[c*L+i], acc)
 *   y[c] = C[c] * acc
 * y may alias C. */
void kern_shortconv(float *y, const float *C, const float *const *rows, const float *w,
                    int64_t L, int64_t n);

/* ---------------------------------------------------------------- attention
 * Causal (optionally sliding-window) GQA attention of T queries over the KV cache of one
 * sequence. Keys are split into tiles of KERN_ATTN_TILE positions aligned to position 0;
 * each tile gives (max, sum of exp, exp-weighted sum of V), merged into the running state
 * in tile order (docs/numerics.md "attention"). A query's result depends only on its
 * vector, its position and the cache rows it can see, so prefill, decode, chunked prefill
 * and draft verification give the same bits. */

#define KERN_ATTN_TILE 32
#define KERN_ATTN_MAX_HEAD_DIM 512

struct kern_attn_args {
    /* Queries (T, H, D) f32: query t, head h at q + t*q_stride + h*head_dim. */
    const float *q;
    int64_t q_stride;
    const int32_t *q_pos;  /* (T) position of each query, >= 0 and < n_kv */
    int64_t n_q;           /* T */
    /* KV cache of type kv_type (QT_F32 or QT_F16), read only at rows of positions
     * 0..n_kv-1: position p of kv head g starts at element p*k_stride + g*k_head_stride.
     * A head stride of 0 means head_dim: the heads of a position side by side, (P, Hkv, D).
     * Head-major (Hkv, P_max, D), i.e. k_stride = D and k_head_stride = P_max*D, reads each
     * head's rows contiguously: 2.3x faster decode at 4096 positions (fewer pages touched). */
    const void *k, *v;
    int64_t k_stride, v_stride;
    int64_t k_head_stride, v_head_stride;
    uint32_t kv_type;
    int64_t n_kv;          /* rows 0..n_kv-1 are written */
    int32_t n_head;        /* H, a multiple of n_head_kv */
    int32_t n_head_kv;     /* Hkv; query head h reads kv head h / (H / Hkv) */
    int32_t head_dim;      /* D, 1..KERN_ATTN_MAX_HEAD_DIM */
    float scale;           /* score = canonical_dot(q, k) * scale */
    float softcap;         /* 0: none; c > 0: score = kern_softcapf(score, c) (Gemma 2) */
    /* gpt-oss's attention sinks: NULL, or one logit per query head (H floats, finite) that
     * joins the softmax's denominator and not its numerator: after the last tile,
     *   m' = max(m, sink), a = kern_expf(m - m'), b = kern_expf(sink - m'),
     *   l = l * a + b, o[d] = o[d] * a   (then out = o / l as always). */
    const float *sinks;
    int32_t window;        /* 0: full causal; w > 0: a query at p sees keys k with
                            * p - w < k <= p (llama.cpp's SWA "standard": masked when
                            * p - k >= w) */
    /* Output (T, H, D) f32: query t, head h at out + t*out_stride + h*head_dim. */
    float *out;
    int64_t out_stride;
};

/* Checks shapes and positions (every q_pos in [0, n_kv)); call once per batch before
 * kern_attn. */
KN_MUST_USE enum kn_status kern_attn_check(const struct kern_attn_args *a, struct kn_err *err);
/* Computes the (query, head) pairs with index t*H + h in [begin, end): threads take
 * disjoint ranges. No allocation. */
void kern_attn(const struct kern_attn_args *a, int64_t begin, int64_t end);
/* The pairs [*lo, *hi) of thread ith of nth over the pairs of n_runs batches (one KV cache
 * each, the same heads), numbered one run after the other: contiguous ranges of about equal
 * work, a pair's work being the keys its query reads (causal: a prompt's last queries read
 * the most, so equal counts of pairs would leave the first thread idle), cut between whole
 * groups of query heads that share a kv head unless there are fewer groups than threads. */
void kern_attn_share(const struct kern_attn_args *runs, int64_t n_runs, int ith, int nth,
                     int64_t *lo, int64_t *hi);
/* Computes every pair on the threads of pool (NULL: the calling thread), each thread the
 * range kern_attn_share gives it. Same bits as kern_attn(a, 0, T*H). */
struct kern_pool;
void kern_attn_run(struct kern_pool *pool, const struct kern_attn_args *a);

/* ---------------------------------------------------------------- dispatch
 * One table of kernels per ISA level. The public functions above call the table of
 * kn_isa_active() (src/base/cpu.h): KINETIC_ISA or the best level, switched by
 * kn_isa_set(); src/kernels/dispatch.c maps each level to its table. */
struct kern_ops {
    enum kn_isa isa;
    void (*exp)(float *y, const float *x, int64_t n);
    void (*add)(float *y, const float *a, const float *b, int64_t n);
    void (*mul)(float *y, const float *a, const float *b, int64_t n);
    void (*scale)(float *y, const float *x, float s, int64_t n);
    void (*silu)(float *y, const float *x, int64_t n);
    void (*swiglu)(float *y, const float *g, const float *u, int64_t n);
    void (*gelu)(float *y, const float *x, int64_t n);
    void (*geglu)(float *y, const float *g, const float *u, int64_t n);
    void (*swiglu_oai)(float *y, const float *g, const float *u, int64_t n);
    void (*softmax)(float *y, const float *x, int64_t n);
    void (*log_softmax)(float *y, const float *x, int64_t n);
    void (*rmsnorm)(float *y, int64_t y_stride, const float *x, int64_t x_stride, const float *w,
                    int64_t n_rows, int64_t n, float eps);
    void (*rope)(const struct kern_rope *rope, float *x, int64_t x_stride, int64_t n_tok,
                 int64_t n_head, int64_t head_dim, const float *table);
    void (*rope_table)(const struct kern_rope *rope, const int32_t *pos, int64_t n_tok,
                       float *table);
    void (*attn)(const struct kern_attn_args *a, int64_t begin, int64_t end);
};

/* The table of an ISA level compiled into this build (the scalar table for a level this
 * build lacks); it does not check that the CPU can run it. */
const struct kern_ops *kern_ops_get(enum kn_isa isa);
/* The table of kn_isa_active(). */
const struct kern_ops *kern_ops_active(void);

#endif
