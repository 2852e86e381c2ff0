/* backend_cpu.c: the CPU backend of the device seam (backend.h): every op runs at once on
 * the calling thread and the stream's pool with the kernels of the active ISA. Buffers are
 * host memory; model data is referred to, not copied (weights keep their repacked copy
 * from kern_weight_init). */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

struct cpu_stream {
    struct kern_stream base;
    struct kern_pool *pool;
    int64_t max_tokens;
    void *act_scratch[3];          /* per activation kind, for the largest K and T */
    struct kern_attn_args *runs;   /* (T) one attention call per run */
    int64_t *run_first;            /* (T + 1) first (query, head) item of each run */
    void *block;                   /* the allocation behind act_scratch */
    struct cpu_moe *moe;           /* mixture-of-experts scratch, or NULL */
};

/* Scratch of moe_ffn for R = T * k (token, rank) rows, grouped by expert: expert e's rows
 * are R rows off[e] .. off[e+1]-1, in token order. */
struct cpu_moe {
    int64_t n_expert, k, E, F;
    int64_t *off;       /* (n_expert + 1) */
    int64_t *row_of;    /* (R) grouped row j holds (token, rank) pair row_of[j] = t * k + r */
    int64_t *slot;      /* (R) the grouped row of pair t * k + r */
    float *xg;          /* (R, E) the tokens' inputs, grouped */
    float *g, *u;       /* (R, F) gate and up outputs, then the activation in g */
    float *yg;          /* (R, E) down outputs, grouped */
    void *act[3];       /* per activation kind, for R rows of max(E, F) */
    void *block;
};

static float *F(const struct kern_buf *b)
{
    return (float *)b->host;
}

/* ================================================================ memory */

static const char *cpu_numerics(const struct kern_backend *be)
{
    (void)be;
    return KN_NUMERICS;
}

static struct kern_buf *buf_new(struct kern_backend *be, void *host, size_t bytes,
                                const struct kern_weight *w, struct kn_err *err)
{
    struct kern_buf *b = kn_malloc(sizeof *b, err);
    if (b)
        *b = (struct kern_buf){.be = be, .host = host, .bytes = bytes, .w = w};
    return b;
}

static struct kern_buf *cpu_alloc(struct kern_backend *be, size_t bytes, bool zero,
                                  struct kn_err *err)
{
    void *p = kn_aligned_alloc(bytes ? bytes : 64, err);
    if (!p)
        return NULL;
    if (zero)
        memset(p, 0, bytes);
    /* dev marks the memory as owned (freed with the buffer). */
    struct kern_buf *b = buf_new(be, p, bytes, NULL, err);
    if (!b)
        free(p);
    else
        b->dev = p;
    return b;
}

static struct kern_buf *cpu_upload(struct kern_backend *be, const float *host, int64_t n,
                                   struct kn_err *err)
{
    return buf_new(be, (void *)host, (size_t)n * sizeof(float), NULL, err);
}

static struct kern_buf *cpu_upload_weight(struct kern_backend *be, const struct kern_weight *w,
                                          struct kn_err *err)
{
    return buf_new(be, (void *)w->data, (size_t)w->N * w->row_bytes, w, err);
}

static struct kern_buf *cpu_upload_rows(struct kern_backend *be, const struct kern_weight *w,
                                        struct kn_err *err)
{
    if (!quant_can_dequantize(w->type)) {
        kn_fail(err, KN_E_UNSUPPORTED, "rows of type %s cannot be read", quant_type_name(w->type));
        return NULL;
    }
    return buf_new(be, (void *)w->data, (size_t)w->N * w->row_bytes, w, err);
}

static void cpu_free(struct kern_backend *be, struct kern_buf *b)
{
    (void)be;
    free(b->dev);
    free(b);
}

/* ================================================================ streams */

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static void moe_free(struct cpu_moe *m)
{
    if (m)
        free(m->block);
    free(m);
}

/* The scratch of moe_ffn for batches of up to T tokens; NULL and err set on failure. */
static struct cpu_moe *moe_create(const struct kern_stream_shape *sh, struct kn_err *err)
{
    const int64_t k = sh->n_expert_used, E = sh->n_embd, F = sh->n_ff_exp;
    const int64_t R = sh->max_tokens * k;
    struct cpu_moe *m = kn_calloc(1, sizeof *m, err);
    if (!m)
        return NULL;
    *m = (struct cpu_moe){.n_expert = sh->n_expert, .k = k, .E = E, .F = F};
    size_t sizes[10] = {
        (size_t)(sh->n_expert + 1) * sizeof(int64_t), (size_t)R * sizeof(int64_t),
        (size_t)R * sizeof(int64_t), (size_t)(R * E) * sizeof(float),
        (size_t)(R * F) * sizeof(float), (size_t)(R * F) * sizeof(float),
        (size_t)(R * E) * sizeof(float)};
    for (int kind = 0; kind < 3; kind++) {
        int64_t blk = kind == KERN_ACT_Q8_K ? QK_K : kind == KERN_ACT_Q8_32 ? 32 : 1;
        size_t b = 0;
        for (int i = 0; i < 2; i++) {
            int64_t K = i ? F : E;
            size_t bi = K % blk ? 0 : kern_act_bytes((enum kern_act_kind)kind, R, K);
            if (bi > b)
                b = bi;
        }
        sizes[7 + kind] = b;
    }
    size_t total = 0;
    for (int i = 0; i < 10; i++) {
        if (sizes[i] == SIZE_MAX) {
            free(m);
            kn_fail(err, KN_E_LIMIT, "expert scratch overflows for batch %lld", (long long)sh->max_tokens);
            return NULL;
        }
        total += align64(sizes[i]);
    }
    m->block = kn_aligned_alloc(total ? total : 64, err);
    if (!m->block) {
        free(m);
        kn_fail(err, KN_E_NOMEM, "cannot allocate %zu MiB of expert scratch for batch %lld; use a smaller batch",
                total >> 20, (long long)sh->max_tokens);
        return NULL;
    }
    uint8_t *p = m->block;
    void **dst[10] = {(void **)&m->off, (void **)&m->row_of, (void **)&m->slot, (void **)&m->xg,
                      (void **)&m->g, (void **)&m->u, (void **)&m->yg, &m->act[0], &m->act[1],
                      &m->act[2]};
    for (int i = 0; i < 10; i++) {
        *dst[i] = sizes[i] ? p : NULL;
        p += align64(sizes[i]);
    }
    return m;
}

static void cpu_stream_free(struct kern_stream *s)
{
    struct cpu_stream *c = (struct cpu_stream *)s;
    if (!c)
        return;
    moe_free(c->moe);
    free(c->block);
    free(c->runs);
    free(c->run_first);
    free(c);
}

static struct kern_stream *cpu_stream_create(struct kern_backend *be,
                                             const struct kern_stream_shape *sh,
                                             struct kern_pool *pool, struct kn_err *err)
{
    /* Attention's shape rules, checked once (positions are checked per batch above). */
    struct kern_attn_args probe = {
        .q_stride = sh->n_head * sh->head_dim, .out_stride = sh->n_head * sh->head_dim,
        .k_stride = sh->head_dim, .v_stride = sh->head_dim, .kv_type = QT_F32,
        .k_head_stride = sh->head_dim, .v_head_stride = sh->head_dim, /* head-major */
        .n_head = (int32_t)sh->n_head, .n_head_kv = (int32_t)sh->n_head_kv,
        .head_dim = (int32_t)sh->head_dim,
    };
    if (kern_attn_check(&probe, err) != KN_OK)
        return NULL;
    struct cpu_stream *c = kn_calloc(1, sizeof *c, err);
    if (!c)
        return NULL;
    c->base = (struct kern_stream){be, be->ops};
    c->pool = pool;
    c->max_tokens = sh->max_tokens;
    const size_t T = (size_t)sh->max_tokens;
    /* Activation scratch: the largest K a product takes is max(E, F, H*D). */
    int64_t ks[3] = {sh->n_embd, sh->n_ff, sh->n_head * sh->head_dim};
    size_t act_bytes[3] = {0, 0, 0}, total = 0;
    for (int kind = 0; kind < 3; kind++) {
        for (int i = 0; i < 3; i++) {
            /* Quantized kinds need K to be a multiple of their block; weights with
             * other K never use that kind (kern_weight_init checked the block size). */
            int64_t blk = kind == KERN_ACT_Q8_K ? QK_K : kind == KERN_ACT_Q8_32 ? 32 : 1;
            if (ks[i] % blk)
                continue;
            size_t b = kern_act_bytes((enum kern_act_kind)kind, sh->max_tokens, ks[i]);
            if (b == SIZE_MAX) {
                free(c);
                kn_fail(err, KN_E_LIMIT, "activation scratch overflows for batch %lld",
                        (long long)sh->max_tokens);
                return NULL;
            }
            if (b > act_bytes[kind])
                act_bytes[kind] = b;
        }
        total += align64(act_bytes[kind]);
    }
    c->block = kn_aligned_alloc(total ? total : 64, err);
    c->runs = kn_malloc(T * sizeof *c->runs, err);
    c->run_first = kn_malloc((T + 1) * sizeof *c->run_first, err);
    if (!c->block || !c->runs || !c->run_first) {
        cpu_stream_free(&c->base);
        kn_fail(err, KN_E_NOMEM, "cannot allocate %zu MiB of scratch for batch %lld; use a smaller batch",
                total >> 20, (long long)sh->max_tokens);
        return NULL;
    }
    if (sh->n_expert_used > 0 && !(c->moe = moe_create(sh, err))) {
        cpu_stream_free(&c->base);
        return NULL;
    }
    memset(c->block, 0, total);
    uint8_t *p = c->block;
    for (int kind = 0; kind < 3; kind++) {
        c->act_scratch[kind] = act_bytes[kind] ? p : NULL;
        p += align64(act_bytes[kind]);
    }
    return &c->base;
}

static void cpu_begin(struct kern_stream *s)
{
    (void)s;
}

static enum kn_status cpu_end(struct kern_stream *s, struct kn_err *err)
{
    (void)s;
    (void)err;
    return KN_OK;
}

/* ================================================================ ops */

static void cpu_embed(struct kern_stream *s, struct kern_buf *x, const struct kern_buf *table,
                      const int32_t *tokens, int64_t T, float scale)
{
    (void)s;
    const struct kern_weight *w = table->w;
    const int64_t E = w->K;
    for (int64_t t = 0; t < T; t++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)tokens[t] * w->row_bytes;
        float *xt = F(x) + t * E;
        /* upload_rows checked that one of the two reads the type */
        if (!kern_row_to_f32(w->type, row, xt, E) && !quant_dequantize_row(w->type, row, xt, E))
            memset(xt, 0, (size_t)E * sizeof(float)); /* unreachable: upload_rows checked */
    }
    if (scale != 1.0f)
        kern_scale(F(x), F(x), scale, T * E);
}

static void cpu_rope_table(struct kern_stream *s, struct kern_buf *tab, const struct kern_rope *rope,
                           const int32_t *pos, int64_t T)
{
    (void)s;
    kern_rope_table(rope, pos, T, F(tab));
}

static void cpu_rope(struct kern_stream *s, struct kern_buf *x, const struct kern_buf *tab,
                     const struct kern_rope *rope, int64_t T, int64_t H, int64_t D)
{
    (void)s;
    kern_rope(rope, F(x), H * D, T, H, D, F(tab));
}


static void cpu_layernorm(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *x,
                          const struct kern_buf *w, const struct kern_buf *b, int64_t rows,
                          int64_t n, float eps)
{
    (void)s;
    kern_layernorm(F(y), n, F(x), n, w ? F(w) : NULL, b ? F(b) : NULL, rows, n, eps);
}

static void cpu_gelu(struct kern_stream *s, struct kern_buf *x, int64_t n)
{
    (void)s;
    kern_gelu(F(x), F(x), n);
}

/* Shares of a product job: several per thread, so a thread slowed by other work on its
 * core hands its remaining rows to the others (rows are computed the same anywhere). */
static int mm_shares(const struct kern_pool *pool)
{
    int n = kern_pool_threads(pool);
    return n == 1 ? 1 : 4 * n;
}

/* The element-wise steps of a large batch (prefill), split over the pool: every element
 * (every row for RMSNorm) is computed as on one thread, wherever the split falls
 * (multiples of 16 elements), so the bits do not depend on the split. Below
 * CPU_EW_POOL_MIN elements (a decode step) they stay on the caller. */
#define CPU_EW_POOL_MIN (1 << 16)
enum cpu_ew { CPU_EW_SWIGLU, CPU_EW_GEGLU, CPU_EW_ADD, CPU_EW_RMSNORM };
struct cpu_ew_task {
    enum cpu_ew kind;
    float *y;
    const float *a, *w; /* a: u, the addend or the RMSNorm input; w: RMSNorm weights */
    int64_t n, cols;    /* elements, or RMSNorm rows of cols */
    float eps;
};

static void cpu_ew_fn(void *ctx, int ith, int nth)
{
    const struct cpu_ew_task *t = ctx;
    int64_t lo, hi;
    kern_split(t->n, t->kind == CPU_EW_RMSNORM ? 1 : 16, ith, nth, &lo, &hi);
    if (lo >= hi)
        return;
    switch (t->kind) {
    case CPU_EW_SWIGLU: kern_swiglu(t->y + lo, t->y + lo, t->a + lo, hi - lo); break;
    case CPU_EW_GEGLU: kern_geglu(t->y + lo, t->y + lo, t->a + lo, hi - lo); break;
    case CPU_EW_ADD: kern_add(t->y + lo, t->y + lo, t->a + lo, hi - lo); break;
    default:
        kern_rmsnorm(t->y + lo * t->cols, t->cols, t->a + lo * t->cols, t->cols, t->w, hi - lo,
                     t->cols, t->eps);
        break;
    }
}

/* Runs t on the pool when it is large and there are workers, else on the caller. */
static void cpu_ew(struct cpu_stream *c, const struct cpu_ew_task *t, int64_t elems)
{
    if (kern_pool_threads(c->pool) > 1 && elems >= CPU_EW_POOL_MIN)
        kern_pool_run_shares(c->pool, cpu_ew_fn, (void *)t, mm_shares(c->pool));
    else
        cpu_ew_fn((void *)t, 0, 1);
}

/* Up to KERN_MM_MAX products sharing one input x: (M, K), prepared once per activation kind,
 * in one pool job. */
static void matmuls(struct cpu_stream *c, int n, const struct kern_weight *const *w,
                    const float *x, int64_t M, float *const *y)
{
    struct kern_act acts[3];
    bool ready[3] = {false, false, false};
    struct kern_mm mm[KERN_MM_MAX];
    for (int i = 0; i < n; i++) {
        enum kern_act_kind kind = kern_act_kind_for(w[i]->type);
        if (!ready[kind]) {
            kern_act_prepare(c->pool, kind, x, M, w[i]->K, c->act_scratch[kind], &acts[kind]);
            ready[kind] = true;
        }
        mm[i] = (struct kern_mm){w[i], &acts[kind], y[i]};
    }
    kern_matmul_many(c->pool, mm, n);
}

static void cpu_matmul(struct kern_stream *s, int n, const struct kern_buf *const *w,
                       const struct kern_buf *x, int64_t M, struct kern_buf *const *y)
{
    const struct kern_weight *ws[KERN_MM_MAX];
    float *ys[KERN_MM_MAX];
    for (int i = 0; i < n; i++) {
        ws[i] = w[i]->w;
        ys[i] = F(y[i]);
    }
    matmuls((struct cpu_stream *)s, n, ws, F(x), M, ys);
}

static void cpu_add_rows(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *b,
                         int64_t M, int64_t n)
{
    (void)s;
    for (int64_t t = 0; t < M; t++)
        kern_add(F(y) + t * n, F(y) + t * n, F(b), n);
}

static void cpu_add(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *a, int64_t n)
{
    const struct cpu_ew_task t = {.kind = CPU_EW_ADD, .y = F(y), .a = F(a), .n = n};
    cpu_ew((struct cpu_stream *)s, &t, n);
}

static void cpu_rmsnorm(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *x,
                        const struct kern_buf *w, int64_t rows, int64_t n, float eps)
{
    const struct cpu_ew_task t = {.kind = CPU_EW_RMSNORM, .y = F(y), .a = F(x),
                                  .w = w ? F(w) : NULL, .n = rows, .cols = n, .eps = eps};
    cpu_ew((struct cpu_stream *)s, &t, rows * n);
}

static void cpu_scale(struct kern_stream *s, struct kern_buf *y, float v, int64_t n)
{
    (void)s;
    kern_scale(F(y), F(y), v, n);
}

static void cpu_glu(struct kern_stream *s, enum kern_glu kind, struct kern_buf *g,
                    const struct kern_buf *u, int64_t n)
{
    const struct cpu_ew_task t = {.kind = kind == KERN_GLU_GEGLU ? CPU_EW_GEGLU : CPU_EW_SWIGLU,
                                  .y = F(g), .a = F(u), .n = n};
    cpu_ew((struct cpu_stream *)s, &t, n);
}

static void cpu_gather(struct kern_stream *s, struct kern_buf *dst, const struct kern_buf *src,
                       const int64_t *rows, int64_t n_rows, int64_t n)
{
    (void)s;
    for (int64_t j = 0; j < n_rows; j++)
        memcpy(F(dst) + j * n, F(src) + rows[j] * n, (size_t)n * sizeof(float));
}

static void cpu_kv_store(struct kern_stream *s, const struct kern_attn_batch *b)
{
    (void)s;
    /* Head-major caches: head g of position p at (g * n_ctx + p) * D. */
    const int64_t D = b->head_dim, Hkv = b->n_head_kv, KD = Hkv * D;
    const size_t row = kern_kv_row_bytes(b->kv_type, D); /* one head's row */
    for (int64_t r = 0; r < b->n_runs; r++) {
        const struct kern_kv_run *run = &b->runs[r];
        uint8_t *k = run->k->host, *v = run->v->host;
        for (int64_t t = run->t0; t < run->t0 + run->n; t++)
            for (int64_t g = 0; g < Hkv; g++) {
                size_t off = ((size_t)g * (size_t)run->n_ctx + (size_t)b->pos[t]) * row;
                /* the type is one model_kv_init accepted for this head dim, which stores */
                bool ok = kern_kv_store(b->kv_type, k + off, F(b->k_new) + t * KD + g * D, D);
                ok &= kern_kv_store(b->kv_type, v + off, F(b->v_new) + t * KD + g * D, D);
                (void)ok;
            }
    }
}

/* Attention over several runs (one KV cache each) in one pool job: the (query, head)
 * pairs of all runs are numbered in batch order and threads take the disjoint ranges of
 * kern_attn_share. */
struct attn_runs {
    const struct kern_attn_args *runs;
    const int64_t *first; /* (n_runs + 1) */
    int64_t n_runs;
};

static void attn_runs_fn(void *ctx, int ith, int nth)
{
    const struct attn_runs *ar = ctx;
    int64_t lo, hi;
    kern_attn_share(ar->runs, ar->n_runs, ith, nth, &lo, &hi);
    for (int64_t r = 0; r < ar->n_runs && lo < hi; r++) {
        int64_t a = ar->first[r], b = ar->first[r + 1];
        if (b <= lo || a >= hi)
            continue;
        kern_attn(&ar->runs[r], (lo > a ? lo : a) - a, (hi < b ? hi : b) - a);
    }
}

static void cpu_attention(struct kern_stream *s, const struct kern_attn_batch *b)
{
    struct cpu_stream *c = (struct cpu_stream *)s;
    const int64_t H = b->n_head, D = b->head_dim, QD = H * D;
    c->run_first[0] = 0;
    for (int64_t r = 0; r < b->n_runs; r++) {
        const struct kern_kv_run *run = &b->runs[r];
        c->runs[r] = (struct kern_attn_args){
            .q = F(b->q) + run->t0 * QD, .q_stride = QD, .q_pos = b->pos + run->t0, .n_q = run->n,
            .k = run->k->host, .v = run->v->host, .k_stride = D, .v_stride = D,
            .k_head_stride = run->n_ctx * D, .v_head_stride = run->n_ctx * D,
            .kv_type = b->kv_type, .n_kv = run->n_kv,
            .n_head = b->n_head, .n_head_kv = b->n_head_kv, .head_dim = b->head_dim,
            .scale = b->scale, .softcap = b->softcap, .window = b->window,
            .sinks = b->sinks ? F(b->sinks) : NULL,
            .out = F(b->out) + run->t0 * QD, .out_stride = QD,
        };
        c->run_first[r + 1] = c->run_first[r] + run->n * H;
    }
    struct attn_runs ar = {c->runs, c->run_first, b->n_runs};
    kern_pool_run(c->pool, attn_runs_fn, &ar);
}

static void cpu_logits(struct kern_stream *s, const struct kern_buf *w, const struct kern_buf *b,
                       const struct kern_buf *x, int64_t M, float *logits)
{
    const struct kern_weight *ws = w->w;
    matmuls((struct cpu_stream *)s, 1, &ws, F(x), M, &logits);
    if (b)
        for (int64_t t = 0; t < M; t++)
            kern_add(logits + t * ws->N, logits + t * ws->N, F(b), ws->N);
}

static void cpu_shortconv(struct kern_stream *s, const struct kern_conv_batch *b)
{
    (void)s;
    const int64_t E = b->n_embd, L = b->n_taps;
    const float *bcx = F(b->bcx);
    /* Every row of the batch first: a token reads the rows of the tokens before it. */
    for (int64_t r = 0; r < b->n_runs; r++) {
        const struct kern_kv_run *run = &b->runs[r];
        for (int64_t t = run->t0; t < run->t0 + run->n; t++)
            kern_mul(F(run->k) + (int64_t)b->pos[t] * E, bcx + t * 3 * E, bcx + t * 3 * E + 2 * E, E);
    }
    const float *rows[KERN_CONV_MAX_L];
    for (int64_t r = 0; r < b->n_runs; r++) {
        const struct kern_kv_run *run = &b->runs[r];
        for (int64_t t = run->t0; t < run->t0 + run->n; t++) {
            for (int64_t i = 0; i < L; i++) {
                int64_t p = (int64_t)b->pos[t] - (L - 1) + i;
                rows[i] = p >= 0 ? F(run->k) + p * E : NULL;
            }
            kern_shortconv(F(b->out) + t * E, bcx + t * 3 * E + E, rows, F(b->w), L, E);
        }
    }
}

static void cpu_to_host(struct kern_stream *s, const struct kern_buf *b, size_t off, void *dst,
                        size_t bytes)
{
    (void)s;
    memcpy(dst, (const uint8_t *)b->host + off, bytes);
}

static void cpu_from_host(struct kern_stream *s, struct kern_buf *b, size_t off, const void *src,
                          size_t bytes)
{
    (void)s;
    memcpy((uint8_t *)b->host + off, src, bytes);
}

/* ================================================================ mixture of experts */

static void cpu_moe_route(struct kern_stream *s, const struct kern_moe_gate *g,
                          const struct kern_buf *logits, const struct kern_buf *bias, int64_t T,
                          struct kern_buf *ids, struct kern_buf *w)
{
    (void)s;
    kern_moe_route(g, F(logits), bias ? F(bias) : NULL, T, (int32_t *)ids->host, F(w));
}

/* One product of every expert over its grouped rows in one pool job: each thread takes
 * its share of the output rows of every expert (so each expert's weights are read once
 * per pass whatever the number of its tokens). Up to two products share the input. */
struct moe_task {
    const struct cpu_moe *m;
    int n;                                  /* products: 1 or 2 */
    const struct kern_buf *const *w[2];     /* (n_expert) weights of each product */
    const struct kern_act *a[2];            /* all R grouped rows, prepared */
    float *y[2];                            /* (R, N) */
};

static void moe_task_fn(void *ctx, int ith, int nth)
{
    const struct moe_task *t = ctx;
    const struct cpu_moe *m = t->m;
    for (int64_t e = 0; e < m->n_expert; e++) {
        const int64_t r0 = m->off[e], n = m->off[e + 1] - r0;
        if (n == 0)
            continue;
        for (int j = 0; j < t->n; j++) {
            const struct kern_weight *w = t->w[j][e]->w;
            const struct kern_act *a = t->a[j];
            struct kern_act sub = {.kind = a->kind, .M = n, .K = a->K, .x = a->x + r0 * a->K,
                                   .q = a->q ? (const uint8_t *)a->q + r0 * a->row_bytes : NULL,
                                   .row_bytes = a->row_bytes};
            int64_t lo, hi;
            kern_split(w->N, KERN_ROW_ALIGN, ith, nth, &lo, &hi);
            if (lo < hi)
                kern_matmul_rows(w, &sub, t->y[j] + r0 * w->N, w->N, lo, hi);
        }
    }
}

/* Prepares the R rows x (R, K) for products with w's type into the kind's scratch. */
static const struct kern_act *moe_prepare(struct cpu_stream *c, const struct kern_weight *w,
                                          const float *x, int64_t R, int64_t K,
                                          struct kern_act acts[3], bool ready[3])
{
    enum kern_act_kind kind = kern_act_kind_for(w->type);
    if (!ready[kind]) {
        kern_act_prepare(c->pool, kind, x, R, K, c->moe->act[kind], &acts[kind]);
        ready[kind] = true;
    }
    return &acts[kind];
}

static void cpu_moe_ffn(struct kern_stream *s, const struct kern_moe_ffn *f, const struct kern_buf *x,
                        const struct kern_buf *ids, const struct kern_buf *w, int64_t T,
                        struct kern_buf *y)
{
    struct cpu_stream *c = (struct cpu_stream *)s;
    struct cpu_moe *m = c->moe;
    const int64_t k = f->n_used, E = m->E, FF = m->F, R = T * k;
    const int32_t *id = ids->host;
    const float *wt = F(w);
    /* Group the (token, rank) pairs by expert, tokens in order (kern_hd.h, as on CUDA). */
    kn_hd_moe_group(id, R, f->n_expert, m->off, m->row_of, m->slot);
    for (int64_t j = 0; j < R; j++)
        memcpy(m->xg + j * E, F(x) + (m->row_of[j] / k) * E, (size_t)E * sizeof(float));

    /* gate and up of every expert, the activation, then down: rows are independent. */
    struct kern_act acts[3];
    bool ready[3] = {false, false, false};
    struct moe_task t = {.m = m, .n = 2, .w = {f->gate, f->up}, .y = {m->g, m->u}};
    t.a[0] = moe_prepare(c, f->gate[0]->w, m->xg, R, E, acts, ready);
    t.a[1] = moe_prepare(c, f->up[0]->w, m->xg, R, E, acts, ready);
    kern_pool_run_shares(c->pool, moe_task_fn, &t, mm_shares(c->pool));
    if (f->gate_b || f->up_b) /* gpt-oss: each grouped row plus its expert's biases */
        for (int64_t e = 0; e < f->n_expert; e++)
            for (int64_t j = m->off[e]; j < m->off[e + 1]; j++) {
                if (f->gate_b)
                    kern_add(m->g + j * FF, m->g + j * FF, F(f->gate_b[e]), FF);
                if (f->up_b)
                    kern_add(m->u + j * FF, m->u + j * FF, F(f->up_b[e]), FF);
            }
    if (f->act == KERN_GLU_GEGLU)
        kern_geglu(m->g, m->g, m->u, R * FF);
    else if (f->act == KERN_GLU_SWIGLU_OAI)
        kern_swiglu_oai(m->g, m->g, m->u, R * FF);
    else
        kern_swiglu(m->g, m->g, m->u, R * FF);
    bool ready2[3] = {false, false, false};
    t = (struct moe_task){.m = m, .n = 1, .w = {f->down}, .y = {m->yg}};
    t.a[0] = moe_prepare(c, f->down[0]->w, m->g, R, FF, acts, ready2);
    kern_pool_run_shares(c->pool, moe_task_fn, &t, mm_shares(c->pool));
    for (int64_t e = 0; f->down_b && e < f->n_expert; e++)
        for (int64_t j = m->off[e]; j < m->off[e + 1]; j++)
            kern_add(m->yg + j * E, m->yg + j * E, F(f->down_b[e]), E);

    /* Each token's weighted outputs summed in rank order: y = w0 e0, then y += w_r e_r. */
    for (int64_t tk = 0; tk < T; tk++) {
        float *yt = F(y) + tk * E;
        for (int64_t r = 0; r < k; r++) {
            float *er = m->yg + m->slot[tk * k + r] * E;
            kern_scale(r == 0 ? yt : er, er, wt[tk * k + r], E);
            if (r > 0)
                kern_add(yt, yt, er, E);
        }
    }
}

static const struct kern_backend_ops cpu_ops = {
    .numerics = cpu_numerics,
    .alloc = cpu_alloc,
    .upload = cpu_upload,
    .upload_weight = cpu_upload_weight,
    .upload_rows = cpu_upload_rows,
    .free = cpu_free,
    .stream_create = cpu_stream_create,
    .stream_free = cpu_stream_free,
    .begin = cpu_begin,
    .end = cpu_end,
    .embed = cpu_embed,
    .rope_table = cpu_rope_table,
    .rope = cpu_rope,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .add_rows = cpu_add_rows,
    .add = cpu_add,
    .scale = cpu_scale,
    .glu = cpu_glu,
    .gather = cpu_gather,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .attention_softcap = cpu_attention, /* kern_attn caps when the batch's softcap > 0 */
    .attention_sinks = cpu_attention,   /* and merges the sinks when the batch has them */
    .logits = cpu_logits,
    .shortconv = cpu_shortconv,
    .to_host = cpu_to_host,
    .from_host = cpu_from_host,
    .moe_route = cpu_moe_route,
    .moe_ffn = cpu_moe_ffn,
    .moe_ffn_oai = cpu_moe_ffn, /* the activation and the biases as f says */
    .layernorm = cpu_layernorm,
    .gelu = cpu_gelu,
};

static struct kern_backend cpu_backend = {.ops = &cpu_ops, .name = "cpu"};

struct kern_backend *kern_backend_cpu(void)
{
    return &cpu_backend;
}
