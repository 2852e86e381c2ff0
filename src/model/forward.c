/* forward.c: the transformer forward pass over a batch of tokens at given positions.
 *
 * Structure (llama.cpp's llm_build_llama / qwen2 / qwen3 / gemma3_iswa, per token):
 *   x = embed(token)                        (gemma3: x *= sqrtf(n_embd))
 *   per layer:
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)
 *     q, k = rmsnorm per head * q_norm / k_norm          (qwen3, gemma3)
 *     q, k = rope(q, k, pos)                 (gemma3: local layers base 10000)
 *     q *= q_scale                                       (gemma3)
 *     cache[pos] = k, v;  a = attention(q, cache[0..pos], window on local layers)
 *     o = a Wo^T (+bo);  o = rmsnorm(o) * post_attn_norm (gemma3);  x += o
 *     h = rmsnorm(x) * ffn_norm
 *     f = (act(h Wgate^T) * (h Wup^T)) Wdown^T   act = SiLU (GELU-tanh for gemma3)
 *     f = rmsnorm(f) * post_ffn_norm (gemma3);  x += f
 *   logits = (rmsnorm(x) * output_norm) Wout^T (+ output bias, qwen2)
 *
 * Every step works on token rows independently with the kernels module's canonical
 * arithmetic, and threads only split output rows/columns (matmul outputs, attention
 * (query, head) pairs), so a token's bits do not depend on the batch, the chunking or
 * the thread count (docs/numerics.md). Buffers are allocated once in model_fwd_create. */
#include "model.h"

#include <stdlib.h>
#include <string.h>

struct model_fwd {
    const struct model *m;
    struct kern_pool *pool;
    int64_t max_tokens;
    struct kern_rope rope_global, rope_swa;
    float *x;     /* (T, E) residual stream */
    float *h;     /* (T, E) normed input of a block; later the output rows */
    float *o;     /* (T, E) block output */
    float *q;     /* (T, H*D) */
    float *k;     /* (T, Hkv*D) */
    float *v;     /* (T, Hkv*D) */
    float *a;     /* (T, H*D) attention output */
    float *g;     /* (T, F) gate, then the activation */
    float *u;     /* (T, F) up */
    float *tab_global, *tab_swa; /* (T, n_rot) RoPE tables */
    void *act_scratch[3];        /* per activation kind, for the largest K and T */
    void *block;                 /* the single allocation behind the float buffers */
    struct model_kv **kv_tok;    /* (T) each token's cache (model_forward: all the same) */
    struct kern_attn_args *runs; /* (T) attention of each run of same-cache tokens */
    int64_t *run_first;          /* (T + 1) first (query, head) item of each run */
};

/* ================================================================ setup */

static enum kn_status rope_for(struct kern_rope *r, const struct model *m, bool swa,
                               struct kn_err *err)
{
    const struct model_hparams *hp = &m->hp;
    struct kern_rope_params p = {
        .mode = hp->rope_mode == MODEL_ROPE_NEOX ? KERN_ROPE_NEOX : KERN_ROPE_NORM,
        .n_rot = (int32_t)hp->n_rot,
        .freq_base = swa ? hp->rope_freq_base_swa : hp->rope_freq_base,
        .freq_scale = swa ? hp->rope_freq_scale_swa : hp->rope_freq_scale,
        .freq_factors = m->rope_freqs,
        .ext_factor = hp->yarn_ext_factor,
        .attn_factor = hp->yarn_attn_factor,
        .beta_fast = hp->yarn_beta_fast,
        .beta_slow = hp->yarn_beta_slow,
        .n_ctx_orig = (int32_t)hp->n_ctx_orig_yarn,
    };
    if (swa) {
        /* gemma3's local layers: plain RoPE (llama.cpp: rope_freq_scale_train_swa = 1). */
        p.ext_factor = 0.0;
        p.attn_factor = 1.0;
    }
    return kern_rope_init(r, &p, err);
}

void model_fwd_free(struct model_fwd *f);

static size_t align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

enum kn_status model_fwd_create(struct model_fwd **out, const struct model *m, int64_t max_tokens,
                                struct kern_pool *pool, struct kn_err *err)
{
    *out = NULL;
    const struct model_hparams *hp = &m->hp;
    if (max_tokens <= 0 || max_tokens > (1 << 20))
        return kn_fail(err, KN_E_ARG, "batch size %lld must be in 1..1048576", (long long)max_tokens);
    if (hp->head_dim_k != hp->head_dim_v)
        return kn_fail(err, KN_E_UNSUPPORTED, "key length %lld differs from value length %lld",
                       (long long)hp->head_dim_k, (long long)hp->head_dim_v);
    if (hp->head_dim_k > KERN_ATTN_MAX_HEAD_DIM || hp->n_rot > KERN_ROPE_MAX_DIM)
        return kn_fail(err, KN_E_UNSUPPORTED, "head size %lld exceeds the supported %d",
                       (long long)hp->head_dim_k, KERN_ATTN_MAX_HEAD_DIM);
    struct model_fwd *f = kn_calloc(1, sizeof *f, err);
    if (!f)
        return KN_E_NOMEM;
    f->m = m;
    f->pool = pool;
    f->max_tokens = max_tokens;
    enum kn_status st = rope_for(&f->rope_global, m, false, err);
    if (st == KN_OK)
        st = rope_for(&f->rope_swa, m, true, err);
    if (st != KN_OK) {
        free(f);
        return st;
    }

    const size_t T = (size_t)max_tokens, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff;
    const size_t D = (size_t)hp->head_dim_k, H = (size_t)hp->n_head, Hkv = (size_t)hp->n_head_kv;
    size_t sizes[] = {T * E, T * E, T * E, T * H * D, T * Hkv * D, T * Hkv * D, T * H * D,
                      T * F, T * F, T * (size_t)hp->n_rot, T * (size_t)hp->n_rot};
    float **ptrs[] = {&f->x, &f->h, &f->o, &f->q, &f->k, &f->v, &f->a, &f->g, &f->u,
                      &f->tab_global, &f->tab_swa};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += align64(sizes[i] * sizeof(float));
    /* Activation scratch: the largest K a product takes is max(E, F, H*D). */
    int64_t ks[3] = {hp->n_embd, hp->n_ff, hp->n_head * hp->head_dim_v};
    size_t act_bytes[3] = {0, 0, 0};
    for (int kind = 0; kind < 3; kind++)
        for (int i = 0; i < 3; i++) {
            /* Quantized kinds need K to be a multiple of their block; weights with
             * other K never use that kind (kern_weight_init checked the block size). */
            int64_t blk = kind == KERN_ACT_Q8_K ? QK_K : kind == KERN_ACT_Q8_32 ? 32 : 1;
            if (ks[i] % blk)
                continue;
            size_t b = kern_act_bytes((enum kern_act_kind)kind, max_tokens, ks[i]);
            if (b == SIZE_MAX) {
                free(f);
                return kn_fail(err, KN_E_LIMIT, "activation scratch overflows for batch %lld",
                               (long long)max_tokens);
            }
            if (b > act_bytes[kind])
                act_bytes[kind] = b;
        }
    for (int kind = 0; kind < 3; kind++)
        total += align64(act_bytes[kind]);
    f->block = kn_aligned_alloc(total ? total : 64, err);
    if (!f->block) {
        free(f);
        return kn_fail(err, KN_E_NOMEM, "cannot allocate %zu MiB of activations for batch %lld; use a smaller batch",
                       total >> 20, (long long)max_tokens);
    }
    memset(f->block, 0, total);
    f->kv_tok = kn_malloc(T * sizeof *f->kv_tok, err);
    f->runs = kn_malloc(T * sizeof *f->runs, err);
    f->run_first = kn_malloc((T + 1) * sizeof *f->run_first, err);
    if (!f->kv_tok || !f->runs || !f->run_first) {
        model_fwd_free(f);
        return KN_E_NOMEM;
    }
    uint8_t *p = f->block;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *ptrs[i] = (float *)p;
        p += align64(sizes[i] * sizeof(float));
    }
    for (int kind = 0; kind < 3; kind++) {
        f->act_scratch[kind] = act_bytes[kind] ? p : NULL;
        p += align64(act_bytes[kind]);
    }
    *out = f;
    return KN_OK;
}

void model_fwd_free(struct model_fwd *f)
{
    if (!f)
        return;
    free(f->block);
    free(f->kv_tok);
    free(f->runs);
    free(f->run_first);
    free(f);
}

int64_t model_fwd_max_tokens(const struct model_fwd *f)
{
    return f->max_tokens;
}

/* ================================================================ parallel pieces */

/* Up to four products sharing one input x: (M, K), each prepared once per activation
 * kind, computed in one pool job where every thread takes its rows of every product. */
struct mm_job {
    const struct kern_weight *w;
    const struct kern_act *a;
    float *y;
};
struct mm_task {
    struct mm_job jobs[4];
    int n;
};

static void mm_task_fn(void *ctx, int ith, int nth)
{
    const struct mm_task *t = ctx;
    for (int j = 0; j < t->n; j++) {
        const struct mm_job *jb = &t->jobs[j];
        int64_t lo, hi;
        kern_split(jb->w->N, KERN_ROW_ALIGN, ith, nth, &lo, &hi);
        if (lo < hi)
            kern_matmul_rows(jb->w, jb->a, jb->y, jb->w->N, lo, hi);
    }
}

/* Shares of a product job: several per thread, so a thread slowed by other work on its
 * core hands its remaining rows to the others (rows are computed the same anywhere). */
static int mm_shares(const struct kern_pool *pool)
{
    int n = kern_pool_threads(pool);
    return n == 1 ? 1 : 4 * n;
}

/* y_i = x . w_i^T for i < n (n <= 4); every w_i has K columns; x: (M, K). */
static void matmuls(struct model_fwd *f, const float *x, int64_t M, int n,
                    const struct kern_weight *const *w, float *const *y)
{
    struct kern_act acts[3];
    bool ready[3] = {false, false, false};
    struct mm_task task = {.n = n};
    for (int i = 0; i < n; i++) {
        enum kern_act_kind kind = kern_act_kind_for(w[i]->type);
        if (!ready[kind]) {
            kern_act_prepare(f->pool, kind, x, M, w[i]->K, f->act_scratch[kind], &acts[kind]);
            ready[kind] = true;
        }
        task.jobs[i] = (struct mm_job){w[i], &acts[kind], y[i]};
    }
    kern_pool_run_shares(f->pool, mm_task_fn, &task, mm_shares(f->pool));
}

static void matmul1(struct model_fwd *f, const struct kern_weight *w, const float *x, int64_t M,
                    float *y)
{
    matmuls(f, x, M, 1, &w, &y);
}

/* Attention over several runs (one KV cache each) in one pool job: the (query, head)
 * items of all runs are numbered in batch order and threads take disjoint ranges. */
struct attn_runs {
    const struct kern_attn_args *runs;
    const int64_t *first; /* (n_runs + 1) */
    int64_t n_runs;
};

static void attn_runs_fn(void *ctx, int ith, int nth)
{
    const struct attn_runs *ar = ctx;
    int64_t lo, hi;
    kern_split(ar->first[ar->n_runs], 1, ith, nth, &lo, &hi);
    for (int64_t r = 0; r < ar->n_runs && lo < hi; r++) {
        int64_t a = ar->first[r], b = ar->first[r + 1];
        if (b <= lo || a >= hi)
            continue;
        kern_attn(&ar->runs[r], (lo > a ? lo : a) - a, (hi < b ? hi : b) - a);
    }
}

/* Adds bias b (n) to each of M rows of y (M, n). */
static void add_bias(float *y, const float *b, int64_t M, int64_t n)
{
    for (int64_t t = 0; t < M; t++)
        kern_add(y + t * n, y + t * n, b, n);
}

/* ================================================================ forward */

enum kn_status model_forward(struct model_fwd *f, struct model_kv *kv, const int32_t *tokens,
                             const int32_t *pos, int64_t n, const int64_t *out_rows, int64_t n_out,
                             float *logits, struct kn_err *err)
{
    if (n <= 0 || n > f->max_tokens)
        return kn_fail(err, KN_E_ARG, "batch of %lld tokens; this context takes 1..%lld", (long long)n,
                       (long long)f->max_tokens);
    for (int64_t t = 0; t < n; t++)
        f->kv_tok[t] = kv;
    return model_forward_multi(f, f->kv_tok, tokens, pos, n, out_rows, n_out, logits, err);
}

enum kn_status model_forward_multi(struct model_fwd *f, struct model_kv *const *kvs,
                                   const int32_t *tokens, const int32_t *pos, int64_t n,
                                   const int64_t *out_rows, int64_t n_out, float *logits,
                                   struct kn_err *err)
{
    const struct model *m = f->m;
    const struct model_hparams *hp = &m->hp;
    const int64_t T = n, E = hp->n_embd, F = hp->n_ff, D = hp->head_dim_k;
    const int64_t H = hp->n_head, Hkv = hp->n_head_kv;
    const int64_t QD = H * D, KD = Hkv * D;

    /* ---- check the request before touching any state. */
    if (n <= 0 || n > f->max_tokens)
        return kn_fail(err, KN_E_ARG, "batch of %lld tokens; this context takes 1..%lld", (long long)n,
                       (long long)f->max_tokens);
    if (n_out < 0 || n_out > n)
        return kn_fail(err, KN_E_ARG, "%lld output rows requested for %lld tokens", (long long)n_out,
                       (long long)n);
    for (int64_t t = 0; t < T; t++) {
        const struct model_kv *kv = kvs[t];
        if (t == 0 || kv != kvs[t - 1]) {
            if (kv->n_layer != hp->n_layer ||
                kv->k_row_bytes != (size_t)KD * (kv->type == MODEL_KV_F16 ? 2 : 4))
                return kn_fail(err, KN_E_INTERNAL, "KV cache was made for another model");
            if (kv->type != kvs[0]->type)
                return kn_fail(err, KN_E_ARG, "the caches of one batch must share a type");
        }
        if (tokens[t] < 0 || tokens[t] >= hp->n_vocab)
            return kn_fail(err, KN_E_ARG, "token id %d is outside the vocabulary (0..%lld)", tokens[t],
                           (long long)hp->n_vocab - 1);
        if (pos[t] < 0 || pos[t] >= kv->n_ctx)
            return kn_fail(err, KN_E_LIMIT, "position %d is outside the context of %lld tokens", pos[t],
                           (long long)kv->n_ctx);
    }
    for (int64_t j = 0; j < n_out; j++)
        if (out_rows[j] < 0 || out_rows[j] >= n)
            return kn_fail(err, KN_E_ARG, "output row %lld is outside the batch of %lld",
                           (long long)out_rows[j], (long long)n);
    const uint32_t kv_qt = kvs[0]->type == MODEL_KV_F16 ? QT_F16 : QT_F32;

    /* ---- embeddings. */
    for (int64_t t = 0; t < T; t++) {
        const uint8_t *row = m->tok_embd + (size_t)tokens[t] * m->tok_embd_row_bytes;
        float *xt = f->x + t * E;
        if (!kern_row_to_f32(m->tok_embd_type, row, xt, E) &&
            !quant_dequantize_row(m->tok_embd_type, row, xt, E))
            return kn_fail(err, KN_E_UNSUPPORTED, "cannot read embedding rows of type %s",
                           quant_type_name(m->tok_embd_type));
    }
    if (hp->embd_scale != 1.0f)
        kern_scale(f->x, f->x, hp->embd_scale, T * E);

    /* ---- RoPE tables for this batch's positions. */
    kern_rope_table(&f->rope_global, pos, T, f->tab_global);
    bool any_swa = false;
    for (int64_t il = 0; il < hp->n_layer; il++)
        any_swa |= hp->swa_layer[il];
    if (any_swa)
        kern_rope_table(&f->rope_swa, pos, T, f->tab_swa);

    bool compacted = false; /* the last layer ran on the output rows only, in order */
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        const bool swa = hp->swa_layer[il];

        /* Attention block. */
        kern_rmsnorm(f->h, E, f->x, E, L->attn_norm, T, E, hp->norm_eps);
        {
            const struct kern_weight *w[3] = {&L->wq, &L->wk, &L->wv};
            float *y[3] = {f->q, f->k, f->v};
            matmuls(f, f->h, T, 3, w, y);
        }
        if (L->bq) add_bias(f->q, L->bq, T, QD);
        if (L->bk) add_bias(f->k, L->bk, T, KD);
        if (L->bv) add_bias(f->v, L->bv, T, KD);
        if (L->attn_q_norm) {
            kern_rmsnorm(f->q, D, f->q, D, L->attn_q_norm, T * H, D, hp->norm_eps);
            kern_rmsnorm(f->k, D, f->k, D, L->attn_k_norm, T * Hkv, D, hp->norm_eps);
        }
        const struct kern_rope *rope = swa ? &f->rope_swa : &f->rope_global;
        const float *tab = swa ? f->tab_swa : f->tab_global;
        kern_rope(rope, f->q, QD, T, H, D, tab);
        kern_rope(rope, f->k, KD, T, Hkv, D, tab);
        if (hp->q_scale != 1.0f)
            kern_scale(f->q, f->q, hp->q_scale, T * QD);
        /* Head-major caches (model.h): head g of position p at (g * n_ctx + p) * D. */
        const size_t elt = kv_qt == QT_F16 ? 2 : 4;
        for (int64_t t = 0; t < T; t++) {
            const struct model_kv *kv = kvs[t];
            for (int64_t g = 0; g < Hkv; g++) {
                size_t off = ((size_t)g * (size_t)kv->n_ctx + (size_t)pos[t]) * (size_t)D * elt;
                if (!kern_kv_store(kv_qt, (uint8_t *)kv->k[il] + off, f->k + t * KD + g * D, D) ||
                    !kern_kv_store(kv_qt, (uint8_t *)kv->v[il] + off, f->v + t * KD + g * D, D))
                    return kn_fail(err, KN_E_INTERNAL, "KV cache type %s not supported by the kernels",
                                   model_kv_type_name(kv->type));
            }
        }
        /* One attention call per run of tokens sharing a cache, all in one pool job. */
        int64_t r = 0;
        f->run_first[0] = 0;
        for (int64_t t0 = 0; t0 < T;) {
            int64_t t1 = t0 + 1;
            int32_t max_pos = pos[t0];
            while (t1 < T && kvs[t1] == kvs[t0]) {
                if (pos[t1] > max_pos)
                    max_pos = pos[t1];
                t1++;
            }
            f->runs[r] = (struct kern_attn_args){
                .q = f->q + t0 * QD, .q_stride = QD, .q_pos = pos + t0, .n_q = t1 - t0,
                .k = kvs[t0]->k[il], .v = kvs[t0]->v[il], .k_stride = D, .v_stride = D,
                .k_head_stride = kvs[t0]->n_ctx * D, .v_head_stride = kvs[t0]->n_ctx * D,
                .kv_type = kv_qt, .n_kv = (int64_t)max_pos + 1,
                .n_head = (int32_t)H, .n_head_kv = (int32_t)Hkv, .head_dim = (int32_t)D,
                .scale = hp->kq_scale, .window = swa ? (int32_t)hp->n_swa : 0,
                .out = f->a + t0 * QD, .out_stride = QD,
            };
            if (il == 0) {
                enum kn_status st = kern_attn_check(&f->runs[r], err);
                if (st != KN_OK)
                    return st;
            }
            f->run_first[r + 1] = f->run_first[r] + (t1 - t0) * H;
            r++;
            t0 = t1;
        }
        /* After the last layer's keys and values are stored, only the output rows
         * matter: the rest of the layer runs on them alone, gathered to the front
         * (row-wise work, so their bits do not change). */
        const bool last = il == hp->n_layer - 1;
        int64_t R = T;
        if (last && n_out == 0)
            break;
        struct attn_runs ar = {f->runs, f->run_first, r};
        kern_pool_run(f->pool, attn_runs_fn, &ar);
        if (last && n_out < T) {
            for (int64_t j = 0; j < n_out; j++) {
                memcpy(f->o + j * E, f->x + out_rows[j] * E, (size_t)E * sizeof(float));
                memcpy(f->q + j * QD, f->a + out_rows[j] * QD, (size_t)QD * sizeof(float));
            }
            memcpy(f->x, f->o, (size_t)(n_out * E) * sizeof(float));
            memcpy(f->a, f->q, (size_t)(n_out * QD) * sizeof(float));
            R = n_out;
            compacted = true;
        }
        matmul1(f, &L->wo, f->a, R, f->o);
        if (L->bo) add_bias(f->o, L->bo, R, E);
        if (L->post_attn_norm)
            kern_rmsnorm(f->o, E, f->o, E, L->post_attn_norm, R, E, hp->norm_eps);
        kern_add(f->x, f->x, f->o, R * E);

        /* Feed-forward block. */
        kern_rmsnorm(f->h, E, f->x, E, L->ffn_norm, R, E, hp->norm_eps);
        {
            const struct kern_weight *w[2] = {&L->ffn_gate, &L->ffn_up};
            float *y[2] = {f->g, f->u};
            matmuls(f, f->h, R, 2, w, y);
        }
        if (hp->arch == MODEL_ARCH_GEMMA3)
            kern_geglu(f->g, f->g, f->u, R * F);
        else
            kern_swiglu(f->g, f->g, f->u, R * F);
        matmul1(f, &L->ffn_down, f->g, R, f->o);
        if (L->post_ffn_norm)
            kern_rmsnorm(f->o, E, f->o, E, L->post_ffn_norm, R, E, hp->norm_eps);
        kern_add(f->x, f->x, f->o, R * E);
    }

    /* ---- output rows only. */
    if (n_out == 0)
        return KN_OK;
    for (int64_t j = 0; j < n_out; j++) {
        const float *xr = f->x + (compacted ? j : out_rows[j]) * E;
        kern_rmsnorm(f->h + j * E, E, xr, E, m->output_norm, 1, E, hp->norm_eps);
    }
    matmul1(f, &m->output, f->h, n_out, logits);
    if (m->output_b)
        add_bias(logits, m->output_b, n_out, hp->n_vocab);
    return KN_OK;
}
