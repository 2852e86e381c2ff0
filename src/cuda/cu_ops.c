/* cu_ops.c: the CUDA backend's ops (backend.h), each launching the kernels of
 * src/cuda/kernels/cuk.cu in order on the stream. Shapes a kernel cannot take fail the
 * pass with a message naming them (never a wrong result). */
#include "cu_internal.h"
#include "../quant/quant.h"
#include "kernels/cuk_hd.h"

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
    cu_launch(s, CUK_rmsnorm, (uint64_t)(rows > 0 ? rows : 0), 1, CUK_NORM_THREADS, 1,
              ARGS(&py, &px, &pw, &n, &eps));
}

static void cu_layernorm(struct kern_stream *ks, struct kern_buf *y, const struct kern_buf *x,
                         const struct kern_buf *w, const struct kern_buf *b, int64_t rows,
                         int64_t n, float eps)
{
    struct cu_stream *s = cu_st(ks);
    CUdeviceptr py = cu_ptr(y), px = cu_ptr(x), pw = cu_ptr(w), pb = cu_ptr(b);
    cu_launch(s, CUK_layernorm, (uint64_t)(rows > 0 ? rows : 0), 1, CUK_NORM_THREADS, 1,
              ARGS(&py, &px, &pw, &pb, &n, &eps));
}

/* The kernel of a quantized weight type for the decode (cuk_mmv_<type>) or the tiled
 * (cuk_mmt_<type>) path; CUK_COUNT for none. */
static enum cuk_kernel mm_kernel(enum quant_type t, bool decode)
{
    switch (t) {
#define MM_CASE(A, name, NAME, xblock, bsize)                                                 \
    case QT_##NAME: return decode ? CUK_mmv_##name : CUK_mmt_##name;
        CUK_MM_TYPES(MM_CASE, 0)
#undef MM_CASE
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

/* A mixture-of-experts layer's grouped rows (cuk_hd.h cuk_wrow): row m is against expert
 * ids[row_of[m]]'s weight, whose address is tab[e]. All zero: a plain product. */
struct cu_experts {
    CUdeviceptr tab, ids, row_of;
};

/* y (M, ldy) columns 0..w->N-1 = x (M, K) . w^T; q[kind]: x quantized (0: not yet). With
 * ex, wb is expert 0's weight (every expert's has its type and shape). */
static void product(struct cu_stream *s, const struct kern_buf *wb, CUdeviceptr x, int64_t M,
                    CUdeviceptr y, CUdeviceptr q[3], const struct cu_experts *ex)
{
    const struct kern_weight *w = wb->w;
    CUdeviceptr pw = cu_ptr(wb);
    const struct cu_experts none = {0, 0, 0};
    if (!ex)
        ex = &none;
    CUdeviceptr tab = ex->tab, ids = ex->ids, row_of = ex->row_of;
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
                  ARGS(&pw, &tab, &ids, &row_of, &N, &K, &rb, &type, &x, &M, &y, &ldy));
        return;
    }
    const bool decode = cu_mm_decode(s->cb->mm_path, M);
    enum cuk_kernel k = mm_kernel(w->type, decode);
    if (k == CUK_COUNT) {
        cu_fail(s, KN_E_UNSUPPORTED, "matmul: no CUDA kernel for weight type %s",
                quant_type_name(w->type));
        return;
    }
    if (!q[kind])
        q[kind] = act_quant(s, kind, x, M, K);
    CUdeviceptr xq = q[kind];
    size_t xrb = kern_act_row_bytes(kind, K);
    if (decode)
        cu_launch(s, k, groups(N, CUK_MMV_ROWS), groups(M, CUK_MMV_TOKS), CUK_MMV_THREADS, 1,
                  ARGS(&pw, &tab, &ids, &row_of, &N, &K, &rb, &xq, &xrb, &M, &y, &ldy));
    else
        cu_launch(s, k, groups(N, CUK_MMT_ROWS), groups(M, CUK_MMT_TOKS), CUK_MMT_THREADS, 1,
                  ARGS(&pw, &tab, &ids, &row_of, &N, &K, &rb, &xq, &xrb, &M, &y, &ldy));
}

static void cu_matmul(struct kern_stream *ks, int n, const struct kern_buf *const *w,
                      const struct kern_buf *x, int64_t M, struct kern_buf *const *y)
{
    struct cu_stream *s = cu_st(ks);
    CUdeviceptr q[3] = {0, 0, 0};
    for (int i = 0; i < n; i++)
        product(s, w[i], cu_ptr(x), M, cu_ptr(y[i]), q, NULL);
}

/* The elementwise ops of cuk_eltwise (enum cuk_elt) on y. */
static void eltwise_at(struct cu_stream *s, enum cuk_elt elt, CUdeviceptr py, CUdeviceptr a,
                       int64_t total, int64_t n, float v)
{
    int op = (int)elt;
    cu_launch(s, CUK_eltwise, groups(total, 256), 1, 256, 1, ARGS(&op, &py, &a, &total, &n, &v));
}

static void eltwise(struct cu_stream *s, enum cuk_elt elt, struct kern_buf *y, CUdeviceptr a,
                    int64_t total, int64_t n, float v)
{
    eltwise_at(s, elt, cu_ptr(y), a, total, n, v);
}

static void cu_add_rows(struct kern_stream *ks, struct kern_buf *y, const struct kern_buf *b,
                        int64_t M, int64_t n)
{
    eltwise(cu_st(ks), CUK_ELT_ADD_ROWS, y, cu_ptr(b), M * n, n, 0.0f);
}

static void cu_add(struct kern_stream *ks, struct kern_buf *y, const struct kern_buf *a, int64_t n)
{
    eltwise(cu_st(ks), CUK_ELT_ADD, y, cu_ptr(a), n, n, 0.0f);
}

static void cu_scale(struct kern_stream *ks, struct kern_buf *y, float v, int64_t n)
{
    eltwise(cu_st(ks), CUK_ELT_SCALE, y, 0, n, n, v);
}

/* The cuk_eltwise op of a gated activation. */
static enum cuk_elt glu_elt(enum kern_glu kind)
{
    return kind == KERN_GLU_GEGLU ? CUK_ELT_GEGLU
         : kind == KERN_GLU_SWIGLU_OAI ? CUK_ELT_SWIGLU_OAI : CUK_ELT_SWIGLU;
}

static void cu_glu(struct kern_stream *ks, enum kern_glu kind, struct kern_buf *g,
                   const struct kern_buf *u, int64_t n)
{
    /* as the CPU's glu: gpt-oss's SwiGLU only inside moe_ffn_oai (backend.h) */
    eltwise(cu_st(ks), kind == KERN_GLU_GEGLU ? CUK_ELT_GEGLU : CUK_ELT_SWIGLU, g, cu_ptr(u), n,
            n, 0.0f);
}

static void cu_gelu(struct kern_stream *ks, struct kern_buf *x, int64_t n)
{
    eltwise(cu_st(ks), CUK_ELT_GELU, x, 0, n, n, 0.0f);
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
    CUdeviceptr sinks = cu_ptr(b->sinks);
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
                       &softcap, &sinks));
    }
}

static void cu_attention(struct kern_stream *ks, const struct kern_attn_batch *b)
{
    struct cu_stream *s = cu_st(ks);
    if (b->softcap != 0.0f || b->sinks) {
        cu_fail(s, KN_E_INTERNAL, "attention: called with %s (attention_%s's)",
                b->sinks ? "sinks" : "a soft-cap", b->sinks ? "sinks" : "softcap");
        return;
    }
    attention(s, b);
}

static void cu_attention_sinks(struct kern_stream *ks, const struct kern_attn_batch *b)
{
    struct cu_stream *s = cu_st(ks);
    if (!b->sinks) {
        cu_fail(s, KN_E_ARG, "attention_sinks: the batch has no sinks");
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
    product(s, w, cu_ptr(x), M, y, q, NULL);
    if (b)
        eltwise_at(s, CUK_ELT_ADD_ROWS, y, cu_ptr(b), M * N, N, 0.0f);
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

/* ================================================================ mixture of experts */

static void cu_moe_route(struct kern_stream *ks, const struct kern_moe_gate *g,
                         const struct kern_buf *logits, const struct kern_buf *bias, int64_t T,
                         struct kern_buf *ids, struct kern_buf *w)
{
    struct cu_stream *s = cu_st(ks);
    int gating = (int)g->gating, n = g->n_expert, k = g->n_used, norm = g->norm;
    if (gating < KERN_MOE_SOFTMAX || gating > KERN_MOE_SOFTMAX_WEIGHT || n < 1 ||
        n > KERN_MOE_MAX_EXPERTS || k < 1 || k > n || k > KERN_MOE_MAX_USED) {
        cu_fail(s, KN_E_ARG, "moe_route: gating %d with %d of %d experts (1..%d experts, "
                "1..%d used)", gating, k, n, KERN_MOE_MAX_EXPERTS, KERN_MOE_MAX_USED);
        return;
    }
    float scale = g->scale;
    CUdeviceptr pl = cu_ptr(logits), pb = cu_ptr(bias), pi = cu_ptr(ids), pw = cu_ptr(w);
    cu_launch(s, CUK_moe_route, groups(T, 64), 1, 64, 1,
              ARGS(&T, &gating, &n, &k, &norm, &scale, &pl, &pb, &pi, &pw));
}

/* Whether every expert's weight in ws (n) has the type and shape of expert 0's (the
 * grouped products launch one kernel for them all); fails the pass naming the first that
 * differs. */
static bool experts_alike(struct cu_stream *s, const struct kern_buf *const *ws, int n,
                          const char *what)
{
    const struct kern_weight *w0 = ws[0]->w;
    for (int e = 1; e < n; e++) {
        const struct kern_weight *w = ws[e]->w;
        if (w->type != w0->type || w->N != w0->N || w->K != w0->K || w->row_bytes != w0->row_bytes) {
            cu_fail(s, KN_E_UNSUPPORTED, "moe_ffn: expert %d's %s weight (%s, %lld x %lld) differs "
                    "from expert 0's (%s, %lld x %lld); the CUDA backend needs experts alike", e,
                    what, quant_type_name(w->type), (long long)w->N, (long long)w->K,
                    quant_type_name(w0->type), (long long)w0->N, (long long)w0->K);
            return false;
        }
    }
    return true;
}

/* moe_ffn and moe_ffn_oai (the activation and the biases as f says): group the T * k
 * (token, rank) pairs by expert on the device, the grouped products against each row's
 * expert, then each token's weighted sum in rank order (cuk.cu "mixture of experts";
 * the CPU's steps, backend_cpu.c, row for row). */
static void cu_moe_ffn(struct kern_stream *ks, const struct kern_moe_ffn *f,
                       const struct kern_buf *x, const struct kern_buf *ids,
                       const struct kern_buf *w, int64_t T, struct kern_buf *y)
{
    struct cu_stream *s = cu_st(ks);
    const int X = f->n_expert;
    if (T <= 0)
        return;
    if (X < 1 || X > KERN_MOE_MAX_EXPERTS || f->n_used < 1 || f->n_used > X) {
        cu_fail(s, KN_E_ARG, "moe_ffn: %d of %d experts (1..%d experts)", f->n_used, X,
                KERN_MOE_MAX_EXPERTS);
        return;
    }
    const struct kern_weight *g0 = f->gate[0]->w, *d0 = f->down[0]->w;
    int64_t k = f->n_used, E = g0->K, FF = g0->N, R = T * k, X1 = X; /* kernel arguments */
    if (!experts_alike(s, f->gate, X, "gate") || !experts_alike(s, f->up, X, "up") ||
        !experts_alike(s, f->down, X, "down"))
        return;
    if (f->up[0]->w->N != FF || f->up[0]->w->K != E || d0->N != E || d0->K != FF) {
        cu_fail(s, KN_E_ARG, "moe_ffn: gate %lld x %lld, up %lld x %lld and down %lld x %lld "
                "do not chain", (long long)FF, (long long)E, (long long)f->up[0]->w->N,
                (long long)f->up[0]->w->K, (long long)d0->N, (long long)d0->K);
        return;
    }
    /* the experts' addresses: gate, up, down, then the biases of gate, up and down */
    const struct kern_buf *const *lists[6] = {f->gate, f->up, f->down, f->gate_b, f->up_b, f->down_b};
    uint64_t tab[6 * KERN_MOE_MAX_EXPERTS];
    for (int l = 0; l < 6; l++)
        for (int e = 0; e < X; e++)
            tab[l * X + e] = lists[l] ? cu_ptr(lists[l][e]) : 0;
    CUdeviceptr pt = cu_stage(s, CU_SLOT_MOE_TAB, tab, (size_t)(6 * X) * sizeof *tab);
    CUdeviceptr idx = cu_scratch(s, CU_SLOT_MOE_IDX, (size_t)(X1 + 1 + 2 * R) * sizeof(int64_t));
    CUdeviceptr xg = cu_scratch(s, CU_SLOT_MOE_X, (size_t)(R * E) * sizeof(float));
    CUdeviceptr gu = cu_scratch(s, CU_SLOT_MOE_GU, (size_t)(2 * R * FF) * sizeof(float));
    CUdeviceptr yg = cu_scratch(s, CU_SLOT_MOE_Y, (size_t)(R * E) * sizeof(float));
    if (!pt || !idx || !xg || !gu || !yg)
        return;
    CUdeviceptr off = idx, row_of = idx + (size_t)(X1 + 1) * sizeof(int64_t);
    CUdeviceptr slot = row_of + (size_t)R * sizeof(int64_t);
    CUdeviceptr pi = cu_ptr(ids), px = cu_ptr(x), pw = cu_ptr(w), py = cu_ptr(y);
    CUdeviceptr g = gu, u = gu + (size_t)(R * FF) * sizeof(float);
    cu_launch(s, CUK_moe_group, 1, 1, 1, 1, ARGS(&pi, &R, &X1, &off, &row_of, &slot));
    cu_launch(s, CUK_moe_gather, groups(R * E, 256), 1, 256, 1,
              ARGS(&R, &k, &E, &row_of, &px, &xg));
    const size_t tsz = (size_t)X * sizeof(uint64_t);
    struct cu_experts eg = {pt, pi, row_of}, eu = {pt + tsz, pi, row_of}, ed = {pt + 2 * tsz, pi, row_of};
    CUdeviceptr q[3] = {0, 0, 0};
    product(s, f->gate[0], xg, R, g, q, &eg);
    product(s, f->up[0], xg, R, u, q, &eu);
    CUdeviceptr bt[3] = {pt + 3 * tsz, pt + 4 * tsz, pt + 5 * tsz}, bo[3] = {g, u, yg};
    int64_t bn[3] = {FF, FF, E};
    for (int l = 0; l < 2; l++) /* gpt-oss: each grouped row plus its expert's biases */
        if (lists[3 + l])
            cu_launch(s, CUK_moe_bias, groups(R * bn[l], 256), 1, 256, 1,
                      ARGS(&R, &bn[l], &row_of, &pi, &bt[l], &bo[l]));
    eltwise_at(s, glu_elt(f->act), g, u, R * FF, R * FF, 0.0f);
    CUdeviceptr q2[3] = {0, 0, 0};
    product(s, f->down[0], g, R, yg, q2, &ed);
    if (lists[5])
        cu_launch(s, CUK_moe_bias, groups(R * E, 256), 1, 256, 1,
                  ARGS(&R, &bn[2], &row_of, &pi, &bt[2], &bo[2]));
    cu_launch(s, CUK_moe_sum, groups(T * E, 256), 1, 256, 1,
              ARGS(&T, &k, &E, &slot, &yg, &pw, &py));
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
    ops->moe_route = cu_moe_route;
    ops->moe_ffn = cu_moe_ffn;
    ops->attention_sinks = cu_attention_sinks;
    ops->moe_ffn_oai = cu_moe_ffn; /* the activation and the biases as f says (as the CPU) */
    ops->layernorm = cu_layernorm;
    ops->gelu = cu_gelu;
}
