/* vk_ops_core.c: the Vulkan backend's ops (src/kernels/backend.h, each with the op's
 * signature), made of the recording functions of vk_kern.h on the stream's pass. Every op
 * gives the CPU backend's bits (tests/unit/test_vk_ops.c runs kern_backend_check on it).
 *
 * Scratch: the slots of vk_ops.h enum vk_slot. */
#include "vk_ops_core.h"

#include "vk_kern.h"

#include <stdlib.h>

/* Attention runs its tiles in workgroups of their own (vkk_attn.part) when the batch
 * gives fewer (head, query) pairs than this and a query reads at least ATTN_SPLIT_TILES
 * tiles: a decode step over a long cache. */
#define ATTN_SPLIT_PAIRS 128
#define ATTN_SPLIT_TILES 4

static struct vkk_ref at(const struct kern_buf *b, int64_t off)
{
    return vkk_at(b ? vk_buf(b) : NULL, (uint32_t)off);
}

void vk_op_embed(struct kern_stream *s, struct kern_buf *x, const struct kern_buf *table,
                        const int32_t *tokens, int64_t T, float scale)
{
    const struct kern_weight *w = table->w;
    vkk_embed(vk_stream_cmd(s), at(x, 0), vk_buf(table), w->type, w->K, w->row_bytes, tokens,
              T, scale);
}

/* The sin/cos table is computed on the host (kern_rope_table: double-precision sin and
 * cos, which many GPUs lack or run slowly) and written into the pass: T * n_rot floats. */
void vk_op_rope_table(struct kern_stream *s, struct kern_buf *tab,
                             const struct kern_rope *rope, const int32_t *pos, int64_t T)
{
    struct vkr_cmd *c = vk_stream_cmd(s);
    size_t bytes = (size_t)T * (size_t)rope->n_rot * sizeof(float);
    if (T <= 0 || vkr_cmd_failed(c))
        return;
    float *host = malloc(bytes);
    if (!host) {
        vkr_cmd_fail(c, KN_E_NOMEM, "Vulkan rope_table: out of memory for %zu bytes", bytes);
        return;
    }
    kern_rope_table(rope, pos, T, host);
    vkr_cmd_write(c, vk_buf(tab), 0, host, bytes);
    free(host);
}

void vk_op_rope(struct kern_stream *s, struct kern_buf *x, const struct kern_buf *tab,
                       const struct kern_rope *rope, int64_t T, int64_t H, int64_t D)
{
    vkk_rope(vk_stream_cmd(s), at(x, 0), at(tab, 0), rope, T, H, D);
}

void vk_op_rmsnorm(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *x,
                          const struct kern_buf *w, int64_t rows, int64_t n, float eps)
{
    vkk_rmsnorm(vk_stream_cmd(s), at(y, 0), at(x, 0), at(w, 0), rows, n, eps);
}

const struct vkr_buf *vk_act_prepare(struct kern_stream *s, enum kern_act_kind kind,
                                     const struct vkr_buf *x, uint32_t off, int64_t M, int64_t K)
{
    if (kind == KERN_ACT_F32)
        return NULL;
    size_t bytes = kern_act_bytes(kind, M, K);
    struct vkr_buf *q = vk_stream_scratch(s, kind == KERN_ACT_Q8_K ? VK_SLOT_ACT_Q8_K
                                                                   : VK_SLOT_ACT_Q8_32, bytes);
    if (q)
        vkk_act_quant(vk_stream_cmd(s), kind, vkk_at(x, off), M, K, vkk_at(q, 0));
    return q;
}

/* x quantized for kind (vk_act_prepare of a whole kern_buf). */
static const struct vkr_buf *act_prepare(struct kern_stream *s, enum kern_act_kind kind,
                                         const struct kern_buf *x, int64_t M, int64_t K)
{
    return vk_act_prepare(s, kind, vk_buf(x), 0, M, K);
}

void vk_op_matmul(struct kern_stream *s, int n, const struct kern_buf *const *w,
                         const struct kern_buf *x, int64_t M, struct kern_buf *const *y)
{
    struct vkr_cmd *c = vk_stream_cmd(s);
    const struct vkr_buf *q[3] = {NULL, NULL, NULL};
    bool ready[3] = {false, false, false};
    for (int i = 0; i < n; i++) {
        const struct kern_weight *wi = w[i]->w;
        enum kern_act_kind kind = kern_act_kind_for(wi->type);
        if (!ready[kind]) {
            q[kind] = act_prepare(s, kind, x, M, wi->K);
            ready[kind] = true;
        }
        vkk_matmul(c, wi, vk_buf(w[i]), at(x, 0), vkk_at(q[kind], 0), M, at(y[i], 0), wi->N);
    }
}

void vk_op_add_rows(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *b,
                           int64_t M, int64_t n)
{
    vkk_eltwise(vk_stream_cmd(s), VKK_ADD_ROWS, at(y, 0), at(b, 0), NULL, M, n, 0.0f);
}

void vk_op_add(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *a, int64_t n)
{
    vkk_eltwise(vk_stream_cmd(s), VKK_ADD, at(y, 0), at(a, 0), NULL, 1, n, 0.0f);
}

void vk_op_scale(struct kern_stream *s, struct kern_buf *y, float v, int64_t n)
{
    vkk_eltwise(vk_stream_cmd(s), VKK_SCALE, at(y, 0), at(NULL, 0), NULL, 1, n, v);
}

void vk_op_glu(struct kern_stream *s, enum kern_glu kind, struct kern_buf *g,
                      const struct kern_buf *u, int64_t n)
{
    vkk_eltwise(vk_stream_cmd(s), vk_glu_op(kind), at(g, 0), at(u, 0), NULL, 1, n, 0.0f);
}

enum vkk_elt vk_glu_op(enum kern_glu kind)
{
    return kind == KERN_GLU_GEGLU ? VKK_GEGLU : kind == KERN_GLU_SWIGLU_OAI ? VKK_SWIGLU_OAI
                                                                            : VKK_SWIGLU;
}

void vk_op_layernorm(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *x,
                     const struct kern_buf *w, const struct kern_buf *b, int64_t rows, int64_t n,
                     float eps)
{
    vkk_layernorm(vk_stream_cmd(s), at(y, 0), at(x, 0), at(w, 0), at(b, 0), rows, n, eps);
}

void vk_op_gelu(struct kern_stream *s, struct kern_buf *x, int64_t n)
{
    vkk_eltwise(vk_stream_cmd(s), VKK_GELU, at(x, 0), at(NULL, 0), NULL, 1, n, 0.0f);
}

void vk_op_gather(struct kern_stream *s, struct kern_buf *dst, const struct kern_buf *src,
                         const int64_t *rows, int64_t n_rows, int64_t n)
{
    vkk_eltwise(vk_stream_cmd(s), VKK_GATHER, at(dst, 0), at(src, 0), rows, n_rows, n, 0.0f);
}

void vk_op_kv_store(struct kern_stream *s, const struct kern_attn_batch *b)
{
    struct vkr_cmd *c = vk_stream_cmd(s);
    for (int64_t r = 0; r < b->n_runs; r++) {
        const struct kern_kv_run *run = &b->runs[r];
        vkk_kv_store(c, at(b->k_new, 0), at(b->v_new, 0), vk_buf(run->k), vk_buf(run->v),
                     b->kv_type, b->head_dim, b->n_head_kv, run->n_ctx, b->pos, run->t0, run->n);
    }
}

/* Also attention_softcap and attention_sinks: the batch's softcap and sinks say which. */
void vk_op_attention(struct kern_stream *s, const struct kern_attn_batch *b)
{
    struct vkr_cmd *c = vk_stream_cmd(s);
    const int64_t QD = (int64_t)b->n_head * b->head_dim;
    for (int64_t r = 0; r < b->n_runs; r++) {
        const struct kern_kv_run *run = &b->runs[r];
        /* kern_attn_check's rule: a query sees only stored rows */
        for (int64_t t = run->t0; t < run->t0 + run->n; t++)
            if (b->pos[t] < 0 || b->pos[t] >= run->n_kv) {
                vkr_cmd_fail(c, KN_E_ARG, "attention: query %lld has position %d but the cache "
                             "holds positions 0..%lld; store the batch's keys before attention",
                             (long long)t, (int)b->pos[t], (long long)run->n_kv - 1);
                return;
            }
        struct vkk_attn a = {
            .q = at(b->q, run->t0 * QD), .out = at(b->out, run->t0 * QD),
            .k = vk_buf(run->k), .v = vk_buf(run->v), .kv_type = b->kv_type,
            .pos = b->pos + run->t0, .n_q = run->n, .n_ctx = run->n_ctx,
            .n_head = b->n_head, .n_head_kv = b->n_head_kv, .head_dim = b->head_dim,
            .window = b->window, .scale = b->scale, .softcap = b->softcap,
            .sinks = b->sinks ? vk_buf(b->sinks) : NULL};
        if (run->n * b->n_head < ATTN_SPLIT_PAIRS && vkk_attention_tiles(&a) >= ATTN_SPLIT_TILES) {
            a.part = vk_stream_scratch(s, VK_SLOT_ATTN_PART, vkk_attention_part_bytes(&a));
            if (!a.part)
                return;
        }
        vkk_attention(c, &a);
    }
}

/* Every run's stores, then every run's convolutions (a token reads the rows of the tokens
 * before it, stored in this pass or an earlier one). */
void vk_op_shortconv(struct kern_stream *s, const struct kern_conv_batch *b)
{
    struct vkr_cmd *c = vk_stream_cmd(s);
    for (int op = 0; op < 2; op++)
        for (int64_t r = 0; r < b->n_runs; r++) {
            const struct kern_kv_run *run = &b->runs[r];
            vkk_shortconv(c, op, at(b->bcx, 0), vk_buf(run->k), at(b->w, 0), at(b->out, 0),
                          b->pos, run->t0, run->n, b->n_embd, b->n_taps, run->n_ctx);
        }
}

/* The product into the logits scratch, the bias on every row, and the read into host
 * memory at the end of the pass; in groups of rows when M rows of logits would be over the
 * device's largest storage binding (a prompt with every row out). */
void vk_op_logits(struct kern_stream *s, const struct kern_buf *w, const struct kern_buf *b,
                  const struct kern_buf *x, int64_t M, float *logits)
{
    struct vkr_cmd *c = vk_stream_cmd(s);
    const struct kern_weight *wt = w->w;
    if (M <= 0 || vkr_cmd_failed(c))
        return;
    enum kern_act_kind kind = kern_act_kind_for(wt->type);
    const struct vkr_buf *q = act_prepare(s, kind, x, M, wt->K);
    const size_t row = (size_t)wt->N * sizeof(float);
    uint64_t range = vkk_binding_bytes(vk_stream_rt(s));
    int64_t per = (int64_t)(range / row) < M ? (int64_t)(range / row) : M;
    if (per < 1) {
        vkr_cmd_fail(c, KN_E_LIMIT, "Vulkan logits: a row of %lld logits is over the device's "
                     "largest storage binding", (long long)wt->N);
        return;
    }
    struct vkr_buf *y = vk_stream_scratch(s, VK_SLOT_LOGITS, (size_t)per * row);
    if (!y)
        return;
    size_t q_row = kern_act_row_bytes(kind, wt->K) / 4;
    for (int64_t m0 = 0; m0 < M; m0 += per) {
        int64_t n = M - m0 < per ? M - m0 : per;
        vkk_matmul(c, wt, vk_buf(w), at(x, m0 * wt->K), vkk_at(q, (uint32_t)((size_t)m0 * q_row)),
                   n, vkk_at(y, 0), wt->N);
        if (b)
            vkk_eltwise(c, VKK_ADD_ROWS, vkk_at(y, 0), at(b, 0), NULL, n, wt->N, 0.0f);
        vkr_cmd_read(c, y, 0, logits + m0 * wt->N, (size_t)n * row);
    }
}
