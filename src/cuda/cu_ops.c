/* cu_ops.c: the CUDA backend's ops (backend.h), each launching the kernels of
 * src/cuda/kernels/cuk.cu in order on the stream. Shapes a kernel cannot take fail the
 * pass with a message naming them (never a wrong result). */
#include "cu_internal.h"
#include "../quant/quant.h"

#include <string.h>

#define ARGS(...) ((void *[]){__VA_ARGS__})

static uint64_t groups(int64_t n, int64_t per)
{
    return n <= 0 ? 0 : (uint64_t)((n + per - 1) / per);
}

/* ================================================================ host-side steps */

/* The rows tokens[t] of the table, looked up and converted on the host by the CPU
 * backend's own embed op (the same bytes by construction), then uploaded. */
static void cu_embed(struct kern_stream *ks, struct kern_buf *x, const struct kern_buf *table,
                     const int32_t *tokens, int64_t T, float scale)
{
    struct cu_stream *s = cu_st(ks);
    size_t bytes = (size_t)T * (size_t)table->w->K * sizeof(float);
    void *h = cu_host(s, bytes);
    if (!h)
        return;
    struct kern_backend *cpu = kern_backend_cpu();
    struct kern_buf hx = {.be = cpu, .host = h, .bytes = bytes};
    struct kern_buf ht = {.be = cpu, .host = (void *)table->w->data, .bytes = table->bytes,
                          .w = table->w};
    cpu->ops->embed(s->cpu, &hx, &ht, tokens, T, scale);
    if (bytes)
        cu_check(s, s->cb->d->MemcpyHtoDAsync(cu_ptr(x), h, bytes, s->st), "cuMemcpyHtoDAsync");
}

/* The sin/cos table in double precision on the host (kern_rope_table), uploaded. */
static void cu_rope_table(struct kern_stream *ks, struct kern_buf *tab, const struct kern_rope *rope,
                          const int32_t *pos, int64_t T)
{
    struct cu_stream *s = cu_st(ks);
    size_t bytes = (size_t)T * (size_t)rope->n_rot * sizeof(float);
    float *h = cu_host(s, bytes);
    if (!h)
        return;
    kern_rope_table(rope, pos, T, h);
    if (bytes)
        cu_check(s, s->cb->d->MemcpyHtoDAsync(cu_ptr(tab), h, bytes, s->st), "cuMemcpyHtoDAsync");
}

/* ================================================================ device ops */

static void cu_rope(struct kern_stream *ks, struct kern_buf *x, const struct kern_buf *tab,
                    const struct kern_rope *rope, int64_t T, int64_t H, int64_t D)
{
    struct cu_stream *s = cu_st(ks);
    CUdeviceptr px = cu_ptr(x), pt = cu_ptr(tab);
    int neox = rope->mode == KERN_ROPE_NEOX, n_rot = rope->n_rot;
    if (n_rot > D) {
        cu_fail(s, KN_E_ARG, "rope: %d rotated dims of a head of %lld", n_rot, (long long)D);
        return;
    }
    cu_launch(s, CUK_rope, groups(T * H * (n_rot / 2), 256), 1, 256, 1,
              ARGS(&px, &pt, &neox, &n_rot, &T, &H, &D));
}

static void cu_rmsnorm(struct kern_stream *ks, struct kern_buf *y, const struct kern_buf *x,
                       const struct kern_buf *w, int64_t rows, int64_t n, float eps)
{
    struct cu_stream *s = cu_st(ks);
    CUdeviceptr py = cu_ptr(y), px = cu_ptr(x), pw = cu_ptr(w);
    cu_launch(s, CUK_rmsnorm, (uint64_t)(rows > 0 ? rows : 0), 1, 64, 1,
              ARGS(&py, &px, &pw, &n, &eps));
}

/* The kernel of a quantized weight type; CUK_COUNT for none. */
static enum cuk_kernel mm_kernel(enum quant_type t)
{
    switch (t) {
    case QT_Q8_0: return CUK_mm_q8_0;
    case QT_Q4_0: return CUK_mm_q4_0;
    case QT_Q4_1: return CUK_mm_q4_1;
    case QT_Q5_0: return CUK_mm_q5_0;
    case QT_Q5_1: return CUK_mm_q5_1;
    case QT_IQ4_NL: return CUK_mm_iq4_nl;
    case QT_MXFP4: return CUK_mm_mxfp4;
    case QT_Q2_K: return CUK_mm_q2_k;
    case QT_Q3_K: return CUK_mm_q3_k;
    case QT_Q4_K: return CUK_mm_q4_k;
    case QT_Q5_K: return CUK_mm_q5_k;
    case QT_Q6_K: return CUK_mm_q6_k;
    case QT_IQ4_XS: return CUK_mm_iq4_xs;
    default: return CUK_COUNT;
    }
}

/* Quantizes x (M, K) for kind into its scratch slot (once per op and kind). */
static CUdeviceptr act_quant(struct cu_stream *s, enum kern_act_kind kind, CUdeviceptr x,
                             int64_t M, int64_t K)
{
    enum cu_slot slot = kind == KERN_ACT_Q8_32 ? CU_SLOT_ACT : CU_SLOT_ACT_K;
    CUdeviceptr q = cu_scratch(s, slot, kern_act_bytes(kind, M, K));
    if (!q)
        return 0;
    int64_t nb = M * (K / (kind == KERN_ACT_Q8_32 ? 32 : QK_K));
    cu_launch(s, kind == KERN_ACT_Q8_32 ? CUK_actq_q8f : CUK_actq_q8k, groups(nb, 128), 1, 128,
              1, ARGS(&x, &M, &K, &q));
    return q;
}

/* y (M, ldy) columns 0..w->N-1 = x (M, K) . w^T; q[kind]: x quantized (0: not yet). */
static void product(struct cu_stream *s, const struct kern_buf *wb, CUdeviceptr x, int64_t M,
                    CUdeviceptr y, CUdeviceptr q[3])
{
    const struct kern_weight *w = wb->w;
    CUdeviceptr pw = cu_ptr(wb);
    int64_t N = w->N, K = w->K, ldy = w->N;
    size_t rb = w->row_bytes;
    unsigned ty = M >= 4 ? 4 : (unsigned)M;
    if (M <= 0)
        return;
    enum kern_act_kind kind = kern_act_kind_for(w->type);
    if (kind == KERN_ACT_F32) {
        int type = w->type == QT_F32 ? 0 : w->type == QT_F16 ? 1 : w->type == QT_BF16 ? 2 : -1;
        if (type < 0) {
            cu_fail(s, KN_E_UNSUPPORTED, "matmul: no CUDA kernel for weight type %s",
                    quant_type_name(w->type));
            return;
        }
        cu_launch(s, CUK_mm_float, groups(N, 32), groups(M, ty), 32, ty,
                  ARGS(&pw, &N, &K, &rb, &type, &x, &M, &y, &ldy));
        return;
    }
    enum cuk_kernel k = mm_kernel(w->type);
    if (k == CUK_COUNT) {
        cu_fail(s, KN_E_UNSUPPORTED, "matmul: no CUDA kernel for weight type %s",
                quant_type_name(w->type));
        return;
    }
    if (!q[kind])
        q[kind] = act_quant(s, kind, x, M, K);
    CUdeviceptr xq = q[kind];
    size_t xrb = kern_act_row_bytes(kind, K);
    cu_launch(s, k, groups(N, 32), groups(M, ty), 32, ty,
              ARGS(&pw, &N, &K, &rb, &xq, &xrb, &M, &y, &ldy));
}

static void cu_matmul(struct kern_stream *ks, int n, const struct kern_buf *const *w,
                      const struct kern_buf *x, int64_t M, struct kern_buf *const *y)
{
    struct cu_stream *s = cu_st(ks);
    CUdeviceptr q[3] = {0, 0, 0};
    for (int i = 0; i < n; i++)
        product(s, w[i], cu_ptr(x), M, cu_ptr(y[i]), q);
}

/* The elementwise ops of cuk_eltwise (op numbers as there). */
static void eltwise(struct cu_stream *s, int op, struct kern_buf *y, CUdeviceptr a, int64_t total,
                    int64_t n, float v)
{
    CUdeviceptr py = cu_ptr(y);
    cu_launch(s, CUK_eltwise, groups(total, 256), 1, 256, 1, ARGS(&op, &py, &a, &total, &n, &v));
}

static void cu_add_rows(struct kern_stream *ks, struct kern_buf *y, const struct kern_buf *b,
                        int64_t M, int64_t n)
{
    eltwise(cu_st(ks), 1, y, cu_ptr(b), M * n, n, 0.0f);
}

static void cu_add(struct kern_stream *ks, struct kern_buf *y, const struct kern_buf *a, int64_t n)
{
    eltwise(cu_st(ks), 0, y, cu_ptr(a), n, n, 0.0f);
}

static void cu_scale(struct kern_stream *ks, struct kern_buf *y, float v, int64_t n)
{
    eltwise(cu_st(ks), 2, y, 0, n, n, v);
}

static void cu_glu(struct kern_stream *ks, enum kern_glu kind, struct kern_buf *g,
                   const struct kern_buf *u, int64_t n)
{
    eltwise(cu_st(ks), kind == KERN_GLU_GEGLU ? 4 : 3, g, cu_ptr(u), n, n, 0.0f);
}

static void cu_gather(struct kern_stream *ks, struct kern_buf *dst, const struct kern_buf *src,
                      const int64_t *rows, int64_t n_rows, int64_t n)
{
    struct cu_stream *s = cu_st(ks);
    CUdeviceptr pr = cu_stage(s, CU_SLOT_IDX, rows, (size_t)n_rows * sizeof *rows);
    CUdeviceptr pd = cu_ptr(dst), ps = cu_ptr(src);
    if (pr)
        cu_launch(s, CUK_gather, groups(n_rows * n, 256), 1, 256, 1, ARGS(&pd, &ps, &pr, &n_rows, &n));
}

/* The cache type code of the kernels (0 f32, 1 f16, 2 q8_0), or -1 with the pass failed. */
static int kv_code(struct cu_stream *s, uint32_t t, int64_t D, const char *op)
{
    if (t == QT_F32 || t == QT_F16)
        return t == QT_F16;
    if (t == QT_Q8_0 && D % QK8_0 == 0)
        return 2;
    cu_fail(s, KN_E_UNSUPPORTED, "%s: a %s KV cache of head dim %lld is not supported (f32, "
            "f16, or q8_0 with a head dim that is a multiple of 32)", op, quant_type_name(t),
            (long long)D);
    return -1;
}

static void cu_kv_store(struct kern_stream *ks, const struct kern_attn_batch *b)
{
    struct cu_stream *s = cu_st(ks);
    int kvt = kv_code(s, b->kv_type, b->head_dim, "kv_store");
    if (kvt < 0)
        return;
    CUdeviceptr pos = cu_stage(s, CU_SLOT_IDX, b->pos, (size_t)b->n_tok * sizeof *b->pos);
    CUdeviceptr kn = cu_ptr(b->k_new), vn = cu_ptr(b->v_new);
    int64_t D = b->head_dim, Hkv = b->n_head_kv, per = kvt == 2 ? D / QK8_0 : D;
    for (int64_t r = 0; r < b->n_runs && pos; r++) {
        const struct kern_kv_run *run = &b->runs[r];
        CUdeviceptr kc = cu_ptr(run->k), vc = cu_ptr(run->v);
        int64_t n_ctx = run->n_ctx, t0 = run->t0, n = run->n;
        cu_launch(s, CUK_kv_store, groups(n * Hkv * per, 256), 1, 256, 1,
                  ARGS(&kn, &vn, &kc, &vc, &kvt, &D, &Hkv, &n_ctx, &pos, &t0, &n));
    }
}

static void attention(struct cu_stream *s, const struct kern_attn_batch *b)
{
    int kvt = kv_code(s, b->kv_type, b->head_dim, "attention");
    if (kvt < 0)
        return;
    int H = b->n_head, Hkv = b->n_head_kv, D = b->head_dim, window = b->window;
    if (D < 1 || D > CU_ATTN_MAX_D || Hkv < 1 || H % Hkv != 0) {
        cu_fail(s, KN_E_UNSUPPORTED, "attention: %d heads of %d dims over %d kv heads is not "
                "a shape the CUDA kernel takes (head dim 1..%d, heads a multiple of kv heads)",
                H, D, Hkv, CU_ATTN_MAX_D);
        return;
    }
    CUdeviceptr pos = cu_stage(s, CU_SLOT_IDX, b->pos, (size_t)b->n_tok * sizeof *b->pos);
    float scale = b->scale, softcap = b->softcap;
    size_t row = (size_t)H * (size_t)D * sizeof(float);
    for (int64_t r = 0; r < b->n_runs && pos; r++) {
        const struct kern_kv_run *run = &b->runs[r];
        CUdeviceptr q = cu_ptr(b->q) + (size_t)run->t0 * row;
        CUdeviceptr out = cu_ptr(b->out) + (size_t)run->t0 * row;
        CUdeviceptr kc = cu_ptr(run->k), vc = cu_ptr(run->v);
        CUdeviceptr rp = pos + (size_t)run->t0 * sizeof(int32_t);
        int64_t n_ctx = run->n_ctx;
        cu_launch(s, CUK_attn, (uint64_t)run->n, (uint64_t)H, 32, 1,
                  ARGS(&q, &out, &kc, &vc, &kvt, &rp, &n_ctx, &H, &Hkv, &D, &window, &scale,
                       &softcap));
    }
}

static void cu_attention(struct kern_stream *ks, const struct kern_attn_batch *b)
{
    struct cu_stream *s = cu_st(ks);
    if (b->softcap != 0.0f) {
        cu_fail(s, KN_E_INTERNAL, "attention: called with soft-cap %g (attention_softcap's)",
                (double)b->softcap);
        return;
    }
    attention(s, b);
}

static void cu_attention_softcap(struct kern_stream *ks, const struct kern_attn_batch *b)
{
    struct cu_stream *s = cu_st(ks);
    if (!(b->softcap > 0.0f)) {
        cu_fail(s, KN_E_ARG, "attention_softcap: soft-cap %g must be positive", (double)b->softcap);
        return;
    }
    attention(s, b);
}

/* The logits on the device (scratch), the bias added, then copied to the caller's memory
 * (a copy to pageable memory returns when done, so they are valid when end returns). */
static void cu_logits(struct kern_stream *ks, const struct kern_buf *w, const struct kern_buf *b,
                      const struct kern_buf *x, int64_t M, float *logits)
{
    struct cu_stream *s = cu_st(ks);
    int64_t N = w->w->N;
    size_t bytes = (size_t)M * (size_t)N * sizeof(float);
    CUdeviceptr y = cu_scratch(s, CU_SLOT_OUT, bytes);
    if (!y)
        return;
    CUdeviceptr q[3] = {0, 0, 0};
    product(s, w, cu_ptr(x), M, y, q);
    if (b) {
        int op = 1;
        int64_t total = M * N;
        CUdeviceptr pb = cu_ptr(b);
        float v = 0.0f;
        cu_launch(s, CUK_eltwise, groups(total, 256), 1, 256, 1, ARGS(&op, &y, &pb, &total, &N, &v));
    }
    if (s->err.status == KN_OK && bytes)
        cu_check(s, s->cb->d->MemcpyDtoHAsync(logits, y, bytes, s->st), "cuMemcpyDtoHAsync");
}

static void cu_shortconv(struct kern_stream *ks, const struct kern_conv_batch *b)
{
    struct cu_stream *s = cu_st(ks);
    if (b->n_taps < 1 || b->n_taps > KERN_CONV_MAX_L) {
        cu_fail(s, KN_E_UNSUPPORTED, "shortconv: %d taps (1..%d)", b->n_taps, KERN_CONV_MAX_L);
        return;
    }
    CUdeviceptr pos = cu_stage(s, CU_SLOT_IDX, b->pos, (size_t)b->n_tok * sizeof *b->pos);
    CUdeviceptr bcx = cu_ptr(b->bcx), out = cu_ptr(b->out), w = cu_ptr(b->w);
    int64_t E = b->n_embd;
    int L = b->n_taps;
    /* every token's row first: a token reads the rows of the tokens before it */
    for (int64_t r = 0; r < b->n_runs && pos; r++) {
        CUdeviceptr rows = cu_ptr(b->runs[r].k);
        int64_t t0 = b->runs[r].t0, n = b->runs[r].n;
        cu_launch(s, CUK_conv_store, groups(n * E, 256), 1, 256, 1, ARGS(&bcx, &rows, &pos, &t0, &n, &E));
    }
    for (int64_t r = 0; r < b->n_runs && pos; r++) {
        CUdeviceptr rows = cu_ptr(b->runs[r].k);
        int64_t t0 = b->runs[r].t0, n = b->runs[r].n;
        cu_launch(s, CUK_conv, groups(n * E, 256), 1, 256, 1,
                  ARGS(&bcx, &out, &w, &rows, &pos, &t0, &n, &E, &L));
    }
}

void cu_ops_fill(struct kern_backend_ops *ops)
{
    ops->embed = cu_embed;
    ops->rope_table = cu_rope_table;
    ops->rope = cu_rope;
    ops->rmsnorm = cu_rmsnorm;
    ops->matmul = cu_matmul;
    ops->add_rows = cu_add_rows;
    ops->add = cu_add;
    ops->scale = cu_scale;
    ops->glu = cu_glu;
    ops->gather = cu_gather;
    ops->kv_store = cu_kv_store;
    ops->attention = cu_attention;
    ops->attention_softcap = cu_attention_softcap;
    ops->logits = cu_logits;
    ops->shortconv = cu_shortconv;
    /* moe_route and moe_ffn: not yet (model_open keeps MoE layers on the CPU) */
}
