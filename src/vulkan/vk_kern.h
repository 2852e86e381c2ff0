/* vk_kern.h: the Vulkan kernels, one recording function per compute shader of
 * src/vulkan/shaders (the backend's ops in vk_ops.c are made of these). Each records its
 * dispatches into a pass (vk_rt.h) and gives the bits of the CPU reference it names
 * (docs/numerics.md, canonical-1); shapes it cannot take are recorded as the pass's error
 * (vkr_cmd_fail), never a wrong result.
 *
 * Buffers are whole runtime buffers; `off` arguments are element offsets (floats or
 * words) of the first element used, so any part of a buffer can be used without the
 * device's binding alignment. f32 rows have stride n unless stated. Host arrays (token
 * ids, positions, row lists) are staged into the pass when the call records. */
#ifndef KN_VULKAN_VK_KERN_H
#define KN_VULKAN_VK_KERN_H

#include "../kernels/kernels.h"
#include "vk_rt.h"

#include <string.h>

/* A float's bits and back (exact; for the probes' comparisons and crafted inputs). */
static inline uint32_t vkk_u32(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float vkk_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A part of a buffer: buf from element off (floats, or words for packed data). */
struct vkk_ref {
    const struct vkr_buf *buf;
    uint32_t off;
};

static inline struct vkk_ref vkk_at(const struct vkr_buf *b, uint32_t off)
{
    return (struct vkk_ref){b, off};
}

/* How the shaders compute fmaf. canonical-1 needs a fused multiply-add; Vulkan lets a
 * driver's fma() be a multiply and an add (lavapipe's is). VKK_FMA_NATIVE runs the
 * shaders as written; VKK_FMA_F64 runs their _f64 builds, whose kn_fma computes the fused
 * result exactly with double adds and multiplies (kn_common.glsl). */
enum vkk_fma { VKK_FMA_NATIVE = 0, VKK_FMA_F64 = 1 };

/* Probes rt's fma on crafted triples (products that round, exact cancellations, ties,
 * huge and tiny magnitudes) against the CPU's fmaf: *mode is VKK_FMA_NATIVE when the
 * driver's fma is fused, else VKK_FMA_F64 when the device has shaderFloat64 and the
 * double build is exact; otherwise KN_E_MISMATCH with err saying which check failed (the
 * device cannot compute canonical-1). */
KN_MUST_USE enum kn_status vkk_fma_probe(struct vkr *rt, enum vkk_fma *mode, struct kn_err *err);
/* The mode the recording functions use on rt: set by vkk_fma_set, else probed once on
 * first use (a failed probe records the pass's error). vkk_fma_forget drops rt's modes
 * (this one and the division mode below; call before vkr_close). */
void vkk_fma_set(struct vkr *rt, enum vkk_fma mode);
void vkk_fma_forget(struct vkr *rt);

/* How the shaders divide and take square roots (kn_common.glsl kn_div, kn_sqrt): the
 * driver's / and sqrt, or (soft_*) exact integer builds, correctly rounded on any device.
 * vkk_divsqrt_probe runs the driver's on vkk_divsqrt_cases against the CPU's a / b and
 * sqrtf: *mode has soft_div / soft_sqrt set for the one that differs (the counts in
 * *bad_div, *bad_sqrt, either may be NULL), after checking the integer builds on the same
 * cases; KN_E_MISMATCH when those differ too. The recording functions probe on first use
 * unless vkk_divsqrt_set set the mode (vkk_fma_forget drops it too). */
struct vkk_divsqrt {
    bool soft_div, soft_sqrt;
};
KN_MUST_USE enum kn_status vkk_divsqrt_probe(struct vkr *rt, struct vkk_divsqrt *mode,
                                             int *bad_div, int *bad_sqrt, struct kn_err *err);
void vkk_divsqrt_set(struct vkr *rt, struct vkk_divsqrt mode);
/* Fills up to n pairs (a, b): quotients and (of a) roots within 2^-44 of a rounding tie
 * at normal, subnormal and huge magnitudes, the special values, random pairs; returns
 * how many. */
int vkk_divsqrt_cases(float *a, float *b, int n);
/* q[i] = a[i] / b[i] and r[i] = sqrt(a[i]) on rt with mode's builds (the probe's shader). */
KN_MUST_USE enum kn_status vkk_divsqrt_run(struct vkr *rt, struct vkk_divsqrt mode,
                                           const float *a, const float *b, int n, float *q,
                                           float *r, struct kn_err *err);

/* How the soft-capped attention computes kern_tanhf's double fma (kn_common.glsl kn_dfma):
 * the driver's fma(double), or (soft) the integer build, exact on any device with
 * shaderFloat64. vkk_dfma_probe runs the driver's on vkk_dfma_cases against C's fma (and
 * its double division and double-to-float conversion against C's): *soft is set when the
 * fma differs (the count in *bad, may be NULL), after checking the integer build on the
 * same cases; KN_E_MISMATCH when that differs too, or the division or conversion does;
 * KN_E_UNSUPPORTED without shaderFloat64. The soft-capped attention probes on first use
 * unless vkk_dfma_set set the mode (vkk_fma_forget drops it too). */
KN_MUST_USE enum kn_status vkk_dfma_probe(struct vkr *rt, bool *soft, int *bad, struct kn_err *err);
void vkk_dfma_set(struct vkr *rt, bool soft);
/* Whether the quantized products run their int8 dot product builds (the mm_*_dot shaders,
 * KN_DOT4 in kn_common.glsl; the same bits as the scalar builds): by default where rt's
 * device enables shaderIntegerDotProduct, unless the environment sets VKK_DOT_ENV=0.
 * vkk_dot_set turns them on (only where the device has them) or off and returns the
 * mode now in force; vkk_fma_forget drops it too. */
#define VKK_DOT_ENV "KINETIC_VK_DOT"
bool vkk_dot(struct vkr *rt);
bool vkk_dot_set(struct vkr *rt, bool on);
/* Fills up to n triples (a, b, c) of doubles (t[3i], t[3i+1], t[3i+2]) with seed: ties of
 * the rounding, cancellations down to zero, carries, subnormal and huge magnitudes,
 * tanh's own steps and random bit patterns; returns how many. */
int vkk_dfma_cases(double *t, int n, uint64_t seed);
/* fma[i] = fma(a, b, c), quo[i] = a / b and cvt[i] = (float)a of triple i on rt, with the
 * integer fma when soft (the probe's shader); any output may be NULL. */
KN_MUST_USE enum kn_status vkk_dfma_run(struct vkr *rt, bool soft, const double *t, int n,
                                        double *fma, double *quo, float *cvt, struct kn_err *err);

/* Tensors larger than the device's largest storage binding (maxStorageBufferRange:
 * 128 MiB on lavapipe, less than Gemma 3's embedding) are bound in parts of whole rows,
 * one dispatch each. Tests lower the limit with this (0: the device's own). */
void vkk_limit_bindings(uint64_t bytes);
/* The most bytes one binding of a tensor may span on rt (the limit above or the device's). */
uint64_t vkk_binding_bytes(struct vkr *rt);

/* The weight types vkk_matmul and vkk_embed read: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,
 * q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, mxfp4 (a product also needs the CPU's
 * reference for the type: kern_type_supported). */
bool vkk_matmul_type(enum quant_type t);
bool vkk_rows_type(enum quant_type t);
/* The shader of weight type t's product: mm_<type> for the quantized types, else mm_f
 * (the pipelines take its _f64 and _dot builds as the device needs them). */
const char *vkk_matmul_shader(enum quant_type t);

/* x (T, E) = rows tokens[t] of table (N rows of row_bytes, type, E elements), times scale
 * if scale != 1 (cpu_embed: kern_row_to_f32 / quant_dequantize_row, kern_scale). */
void vkk_embed(struct vkr_cmd *c, struct vkk_ref x, const struct vkr_buf *table,
               enum quant_type type,
               int64_t E, size_t row_bytes, const int32_t *tokens, int64_t T, float scale);

/* Rotates x (T, H, D) in place by tab (T, rope->n_rot) (kern_rope). */
void vkk_rope(struct vkr_cmd *c, struct vkk_ref x, struct vkk_ref tab, const struct kern_rope *rope,
              int64_t T, int64_t H, int64_t D);

/* y (rows, n) = rmsnorm(x) * w (w.buf NULL: no gain); y may be x (kern_rmsnorm). */
void vkk_rmsnorm(struct vkr_cmd *c, struct vkk_ref y, struct vkk_ref x, struct vkk_ref w,
                 int64_t rows, int64_t n, float eps);

/* y (rows, n) = kern_layernorm of x with gain w and bias b (either .buf NULL: none); y may
 * be x. */
void vkk_layernorm(struct vkr_cmd *c, struct vkk_ref y, struct vkk_ref x, struct vkk_ref w,
                   struct vkk_ref b, int64_t rows, int64_t n, float eps);

/* q (words) = x (M, K) quantized per token in kind's CPU layout (kern_act_prepare):
 * kern_act_bytes(kind, M, K) bytes. kind is KERN_ACT_Q8_32 or KERN_ACT_Q8_K. */
void vkk_act_quant(struct vkr_cmd *c, enum kern_act_kind kind, struct vkk_ref x, int64_t M,
                   int64_t K, struct vkk_ref q);

/* y (M, ldy) columns 0..w->N-1 = x (M, K) . w^T (kern_matmul_rows_ref), w's rows in the
 * file's layout at wbuf. Float weights read x; quantized ones read q, x quantized
 * beforehand by vkk_act_quant with kern_act_kind_for(w->type). */
void vkk_matmul(struct vkr_cmd *c, const struct kern_weight *w, const struct vkr_buf *wbuf,
                struct vkk_ref x, struct vkk_ref q, int64_t M, struct vkk_ref y, int64_t ldy);
/* vkk_matmul over the rows of x and y that the grouping of M (token, rank) rows made by
 * vkk_moe_group gives expert (>= 0): its count of rows, each row in order; the other rows
 * of y are not written. One dispatch of ceil(max_rows / 4) row groups (max_rows: the
 * most rows an expert can have, the batch's tokens), those past the count returning at
 * once. */
void vkk_matmul_expert(struct vkr_cmd *c, const struct kern_weight *w, const struct vkr_buf *wbuf,
                       struct vkk_ref x, struct vkk_ref q, int64_t M, struct vkk_ref y,
                       int64_t ldy, const struct vkr_buf *groups, int32_t n_expert,
                       int32_t expert, int64_t max_rows);

/* The elementwise ops of eltwise.comp. */
enum vkk_elt {
    VKK_ADD = 0,      /* y (n) = y + a */
    VKK_ADD_ROWS = 1, /* y (rows, n) = y + a (n) on every row */
    VKK_SCALE = 2,    /* y (n) = y * v */
    VKK_SWIGLU = 3,   /* y (n) = silu(y) * a */
    VKK_GEGLU = 4,    /* y (n) = gelu(y) * a */
    VKK_GATHER = 5,   /* y row j (n) = a row rows[j], j < rows */
    VKK_SWIGLU_OAI = 6, /* y (n) = kern_swiglu_oaif(y, a) (gpt-oss) */
    VKK_GELU = 7,     /* y (n) = gelu(y) (kern_geluf; BERT's ungated activation) */
};
void vkk_eltwise(struct vkr_cmd *c, enum vkk_elt op, struct vkk_ref y, struct vkk_ref a,
                 const int64_t *rows_idx, int64_t rows, int64_t n, float v);

/* Stores rows t0..t0+n-1 of k_new, v_new (T, Hkv*D) at slots pos[t] of the head-major
 * caches (Hkv, n_ctx, D) of kv_type QT_F32, QT_F16 or QT_Q8_0 (kern_kv_store). pos is the whole
 * batch's (host, at least t0 + n entries). */
void vkk_kv_store(struct vkr_cmd *c, struct vkk_ref k_new, struct vkk_ref v_new,
                  const struct vkr_buf *k_cache, const struct vkr_buf *v_cache, uint32_t kv_type,
                  int64_t D, int64_t Hkv, int64_t n_ctx, const int32_t *pos, int64_t t0, int64_t n);

/* lfm2's short convolution of tokens t0..t0+n-1 of bcx (T, 3E: B, C, x) over one run's
 * rows (n_ctx, E) f32 (cpu_shortconv): op 0 stores B * x at slot pos[t] of rows, op 1
 * writes out (T, E) row t = kern_shortconv of C over the slots pos[t]-L+1..pos[t] (those
 * >= 0) with the taps w (E, L). Every run's op 0 goes before any op 1. pos is the whole
 * batch's (host, at least t0 + n entries). */
void vkk_shortconv(struct vkr_cmd *c, int op, struct vkk_ref bcx, const struct vkr_buf *rows,
                   struct vkk_ref w, struct vkk_ref out, const int32_t *pos, int64_t t0, int64_t n,
                   int64_t E, int64_t L, int64_t n_ctx);

/* ids (T, k) int32 and w (T, k) f32 = kern_moe_route of logits (T, n_expert) with the
 * selection bias (n_expert; bias.buf NULL: none). */
void vkk_moe_route(struct vkr_cmd *c, const struct kern_moe_gate *g, struct vkk_ref logits,
                   struct vkk_ref bias, int64_t T, struct vkk_ref ids, struct vkk_ref w);
/* groups (n_expert + n_expert R int32) = the R rows of ids (int32 experts) grouped by
 * expert in order (moe_group.comp): counts first, then each expert's list of R slots. */
void vkk_moe_group(struct vkr_cmd *c, struct vkk_ref ids, int64_t R, int32_t n_expert,
                   const struct vkr_buf *groups);
/* y (R, n) rows of expert (>= 0) in the grouping of vkk_moe_group plus that expert's bias
 * b (n) (gpt-oss's expert biases); max_rows as for vkk_matmul_expert. */
void vkk_moe_bias(struct vkr_cmd *c, struct vkk_ref y, int64_t R, int64_t n, struct vkk_ref b,
                  const struct vkr_buf *groups, int32_t n_expert, int32_t expert,
                  int64_t max_rows);
/* y (T, E) row t = yg row t k times w[t k], then + yg row t k + r times w[t k + r] for
 * r = 1 .. k-1 (cpu_moe_ffn's weighted sum in rank order). */
void vkk_moe_sum(struct vkr_cmd *c, struct vkk_ref yg, struct vkk_ref w, int64_t T, int64_t k,
                 int64_t E, struct vkk_ref y);

/* Attention of queries q (n_q, H*D) at positions pos[0..n_q-1] (host) over one run's
 * caches, into out (n_q, H*D) (kern_attn). With part set (at least
 * vkk_attention_part_bytes), each query's 32-position tiles are computed by workgroups of
 * their own and merged in order by a second dispatch: the same bits, more parallel work
 * for a decode step over a long cache. */
struct vkk_attn {
    struct vkk_ref q, out;
    const struct vkr_buf *k, *v;   /* head-major (Hkv, n_ctx, D) */
    uint32_t kv_type;              /* QT_F32, QT_F16 or QT_Q8_0 (D a multiple of 32) */
    const int32_t *pos;
    int64_t n_q, n_ctx;
    int32_t n_head, n_head_kv, head_dim, window;
    float scale;
    float softcap;                 /* 0: none; c > 0: scores soft-capped (Gemma 2; doubles) */
    const struct vkr_buf *sinks;   /* NULL, or (H) f32 sink logits (gpt-oss) */
    const struct vkr_buf *part;    /* NULL: one workgroup per (head, query) runs all tiles */
};
void vkk_attention(struct vkr_cmd *c, const struct vkk_attn *a);
/* The most tiles one query of a reads (its window clipped to 32-position tiles). */
int64_t vkk_attention_tiles(const struct vkk_attn *a);
/* The part buffer bytes the split attention of a needs. */
size_t vkk_attention_part_bytes(const struct vkk_attn *a);

#endif
