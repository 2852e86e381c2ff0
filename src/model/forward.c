/* forward.c: the transformer forward pass over a batch of tokens at given positions.
 *
 * Structure (llama.cpp's llm_build_llama / qwen2 / qwen3 / gemma3_iswa / gemma2_iswa, per
 * token):
 *   x = embed(token)                        (gemma2, gemma3: x *= sqrtf(n_embd))
 *   per layer:
 *     h = rmsnorm(x) * attn_norm             (olmo2: h = x, no pre-norms)
 *     q, k, v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)
 *     q, k = rmsnorm per head * q_norm / k_norm          (qwen3, gemma3; olmo2: over
 *                                                         whole q and k rows)
 *     q, k = rope(q, k, pos)                 (gemma3: local layers base 10000; phi3:
 *                                             LongRoPE factors by context; smollm3:
 *                                             none every fourth layer; granite may have
 *                                             none)
 *     q *= q_scale                                       (gemma2, gemma3)
 *     cache[pos] = k, v;  a = attention(q, cache[0..pos], window on local layers;
 *                                       gemma2: scores soft-capped inside attention)
 *     o = a Wo^T (+bo);  o = rmsnorm(o) * post_attn_norm (gemma2, gemma3)
 *     o *= residual_scale (granite);  x += o
 *     h = rmsnorm(x) * ffn_norm
 *     f = (act(h Wgate^T) * (h Wup^T)) Wdown^T   act = SiLU (GELU-tanh for gemma2/3)
 *     qwen3moe: f = sum over the token's k experts e, in rank order, of
 *       w_e (act(h Wgate_e^T) * (h Wup_e^T)) Wdown_e^T,  e and w_e routed from h Wrouter^T
 *       (docs/numerics.md "Mixture of experts")
 *     gpt-oss: attention with q/k/v/o biases and per-head sinks in the softmax's
 *       denominator, the router's logits plus its bias, w = softmax of the k chosen
 *       logits, each expert's products plus its biases and the clamped SwiGLU
 *       (kern_swiglu_oai); its ffn_norm is the file's post_attention_norm
 *     f = rmsnorm(f) * post_ffn_norm (gemma2, gemma3);  f *= residual_scale (granite)
 *     x += f
 *   logits = (rmsnorm(x) * output_norm) Wout^T (+ output bias, qwen2)
 *   logits *= 1 / logit_scale (granite);  logits = softcap(logits) (gemma2)
 *
 * lfm2 (llama.cpp's llm_build_lfm2) replaces the attention block of its conv layers by
 *     B, C, xx = h Win^T (three n_embd slices);  cache[pos] = bx = B * xx
 *     c = C * depthwise causal conv of cache[pos-L+1 .. pos] (kern_shortconv);  o = c Wout^T
 * (its attention layers are qwen3's, q/k norms included; output_norm is token_embd_norm).
 *
 * Every step works on token rows independently with the kernels module's canonical
 * arithmetic, and threads only split output rows/columns (matmul outputs, attention
 * (query, head) pairs), so a token's bits do not depend on the batch, the chunking or
 * the thread count (docs/numerics.md).
 *
 * Every op goes through the device seam (kernels/backend.h): this file decides what is
 * computed, the backend of each layer computes it on its own buffers. A forward call is
 * one pass (begin .. end) on each backend it uses; with --gpu-layers the residual stream
 * is handed from the device's pass to the CPU's at the first CPU layer. Buffers are
 * allocated once in model_fwd_create. */
#include "model_int.h"

#include <stdlib.h>
#include <string.h>

/* ================================================================ setup */

static enum kn_status rope_for(struct kern_rope *r, const struct model *m, bool swa,
                               const float *factors, struct kn_err *err)
{
    const struct model_hparams *hp = &m->hp;
    struct kern_rope_params p = {
        .mode = hp->rope_mode == MODEL_ROPE_NEOX ? KERN_ROPE_NEOX : KERN_ROPE_NORM,
        .n_rot = (int32_t)hp->n_rot,
        .freq_base = swa ? hp->rope_freq_base_swa : hp->rope_freq_base,
        .freq_scale = swa ? hp->rope_freq_scale_swa : hp->rope_freq_scale,
        .freq_factors = factors,
        .ext_factor = hp->yarn_ext_factor,
        .attn_factor = hp->yarn_attn_factor,
        .beta_fast = hp->yarn_beta_fast,
        .beta_slow = hp->yarn_beta_slow,
        .n_ctx_orig = (int32_t)hp->n_ctx_orig_yarn,
    };
    if (swa && (hp->arch == MODEL_ARCH_GEMMA3 || hp->arch == MODEL_ARCH_OLMO2)) {
        /* gemma3's and olmo2's (OLMo 3) local layers: plain RoPE (llama.cpp:
         * rope_freq_scale_train_swa = 1 for gemma3, freq_scale 1 in llm_build_olmo2);
         * other architectures' windowed layers rotate as their global ones. */
        p.ext_factor = 0.0;
        p.attn_factor = 1.0;
    }
    return kern_rope_init(r, &p, err);
}

void model_fwd_free(struct model_fwd *f);

static void part_free(struct fwd_part *p)
{
    struct kern_buf **bufs[] = {&p->x, &p->h, &p->o, &p->q, &p->k, &p->v, &p->a, &p->g, &p->u,
                                &p->tab_global, &p->tab_swa, &p->router, &p->moe_ids, &p->moe_w};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        kern_buf_free(*bufs[i]);
        *bufs[i] = NULL;
    }
    if (p->s)
        p->s->ops->stream_free(p->s);
    p->s = NULL;
}

static enum kn_status part_create(struct fwd_part *p, struct kern_backend *be, const struct model *m,
                                  int64_t max_tokens, struct kern_pool *pool, struct kn_err *err)
{
    const struct model_hparams *hp = &m->hp;
    const size_t T = (size_t)max_tokens, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff;
    const size_t D = (size_t)hp->head_dim_k, H = (size_t)hp->n_head, Hkv = (size_t)hp->n_head_kv;
    p->be = be;
    const struct kern_stream_shape shape = {
        .max_tokens = max_tokens, .n_embd = hp->n_embd, .n_ff = hp->n_ff,
        .n_head = hp->n_head, .n_head_kv = hp->n_head_kv, .head_dim = hp->head_dim_k,
        .n_expert = hp->n_expert, .n_expert_used = hp->n_expert_used, .n_ff_exp = hp->n_ff_exp,
    };
    p->s = be->ops->stream_create(be, &shape, pool, err);
    if (!p->s)
        return err ? err->status : KN_E_NOMEM;
    const size_t X = (size_t)hp->n_expert, k = (size_t)hp->n_expert_used;
    const size_t G = hp->n_conv_l && 3 * E > F ? 3 * E : F; /* lfm2's in_proj output */
    const size_t sizes[] = {T * E, T * E, T * E, T * H * D, T * Hkv * D, T * Hkv * D, T * H * D,
                            T * G, T * F, T * (size_t)hp->n_rot, T * (size_t)hp->n_rot,
                            T * X, T * k, T * k};
    struct kern_buf **bufs[] = {&p->x, &p->h, &p->o, &p->q, &p->k, &p->v, &p->a, &p->g, &p->u,
                                &p->tab_global, &p->tab_swa, &p->router, &p->moe_ids, &p->moe_w};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        total += sizes[i] * sizeof(float);
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i] && /* the MoE buffers of a dense model: none */
            !(*bufs[i] = be->ops->alloc(be, sizes[i] * sizeof(float), true, err)))
            return kn_fail(err, KN_E_NOMEM, "cannot allocate %zu MiB of activations for batch %lld on %s; use a smaller batch",
                           total >> 20, (long long)max_tokens, be->name);
    return KN_OK;
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
    f->max_tokens = max_tokens;
    for (int64_t il = 0; il < hp->n_layer; il++)
        f->any_swa |= hp->swa_layer[il];
    f->n_rope_sets = m->rope_long ? 2 : 1;
    enum kn_status st = KN_OK;
    for (int i = 0; i < f->n_rope_sets && st == KN_OK; i++) {
        const float *factors = i == 1 ? m->rope_long : m->rope_short ? m->rope_short : m->rope_freqs;
        st = rope_for(&f->rope_global[i], m, false, factors, err);
        if (st == KN_OK)
            st = rope_for(&f->rope_swa[i], m, true, factors, err);
    }
    if (st != KN_OK) {
        free(f);
        return st;
    }
    /* One part per backend, in layer order: the device's layers first. */
    f->split = hp->n_layer;
    f->n_parts = 1;
    for (int64_t il = 1; il < hp->n_layer; il++)
        if (m->layers[il].be != m->layers[0].be) {
            f->split = il;
            f->n_parts = 2;
            break;
        }
    const size_t T = (size_t)max_tokens;
    for (int i = 0; i < f->n_parts && st == KN_OK; i++)
        st = part_create(&f->part[i], m->layers[i == 0 ? 0 : f->split].be, m, max_tokens, pool, err);
    if (st == KN_OK && f->n_parts == 2 &&
        !(f->handover = kn_malloc(T * (size_t)hp->n_embd * sizeof(float), err)))
        st = KN_E_NOMEM;
    if (st == KN_OK) {
        f->kv_tok = kn_malloc(T * sizeof *f->kv_tok, err);
        f->runs = kn_malloc(T * sizeof *f->runs, err);
        f->run_kv = kn_malloc(T * sizeof *f->run_kv, err);
        f->pos_all = kn_malloc(T * sizeof *f->pos_all, err);
        if (!f->kv_tok || !f->runs || !f->run_kv || !f->pos_all)
            st = KN_E_NOMEM;
    }
    if (st != KN_OK) {
        model_fwd_free(f);
        return st;
    }
    *out = f;
    return KN_OK;
}

void model_fwd_free(struct model_fwd *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n_parts; i++)
        part_free(&f->part[i]);
    free(f->handover);
    free(f->kv_tok);
    free(f->runs);
    free(f->run_kv);
    free(f->pos_all);
    free(f);
}

int64_t model_fwd_max_tokens(const struct model_fwd *f)
{
    return f->max_tokens;
}

const struct model *model_fwd_model(const struct model_fwd *f)
{
    return f->m;
}

/* ================================================================ forward */

/* Starts part p's pass: the RoPE tables (set rs) of this batch's positions first. */
void model_fwd_part_begin(const struct model_fwd *f, const struct fwd_part *p, const int32_t *pos,
                          int64_t T, int rs)
{
    struct kern_stream *s = p->s;
    s->ops->begin(s);
    s->ops->rope_table(s, p->tab_global, &f->rope_global[rs], pos, T);
    if (f->any_swa)
        s->ops->rope_table(s, p->tab_swa, &f->rope_swa[rs], pos, T);
}

enum kn_status model_fwd_handover(struct model_fwd *f, const struct fwd_part **P,
                                  const int32_t *pos, int64_t T, int rs, struct kn_err *err)
{
    const struct fwd_part *p = *P;
    const size_t bytes = (size_t)(T * f->m->hp.n_embd) * sizeof(float);
    p->s->ops->to_host(p->s, p->x, 0, f->handover, bytes);
    enum kn_status st = p->s->ops->end(p->s, err);
    if (st != KN_OK)
        return st;
    p = *P = &f->part[1];
    model_fwd_part_begin(f, p, pos, T, rs);
    p->s->ops->from_host(p->s, p->x, 0, f->handover, bytes);
    return KN_OK;
}

/* The attention block of layer il on part P: q, k, v of P->h, stored into each run's
 * cache; with attend, the attention output into ab (T, H*D). */
/* hin: the block's input rows (normed, or x itself for olmo2); rs: the RoPE set (phi3's
 * LongRoPE: 1 for the long factors). */
static void attn_block(struct model_fwd *f, const struct fwd_part *P, const struct model_layer_bufs *d,
                       int64_t il, const struct kern_buf *hin, int rs, enum model_kv_type kv_type,
                       const int32_t *pos, int64_t T, int64_t n_runs, struct kern_buf *ab,
                       bool attend)
{
    const struct model_hparams *hp = &f->m->hp;
    const int64_t D = hp->head_dim_k, H = hp->n_head, Hkv = hp->n_head_kv;
    const int64_t QD = H * D, KD = Hkv * D;
    const bool swa = hp->swa_layer[il];
    struct kern_stream *s = P->s;
    const struct kern_backend_ops *op = s->ops;
    {
        const struct kern_buf *w[3] = {d->wq, d->wk, d->wv};
        struct kern_buf *y[3] = {P->q, P->k, P->v};
        op->matmul(s, 3, w, hin, T, y);
    }
    if (d->bq) op->add_rows(s, P->q, d->bq, T, QD);
    if (d->bk) op->add_rows(s, P->k, d->bk, T, KD);
    if (d->bv) op->add_rows(s, P->v, d->bv, T, KD);
    if (d->attn_q_norm && hp->arch == MODEL_ARCH_OLMO2) { /* over whole rows */
        op->rmsnorm(s, P->q, P->q, d->attn_q_norm, T, QD, hp->norm_eps);
        op->rmsnorm(s, P->k, P->k, d->attn_k_norm, T, KD, hp->norm_eps);
    } else if (d->attn_q_norm) { /* per head */
        op->rmsnorm(s, P->q, P->q, d->attn_q_norm, T * H, D, hp->norm_eps);
        op->rmsnorm(s, P->k, P->k, d->attn_k_norm, T * Hkv, D, hp->norm_eps);
    }
    const struct kern_rope *rope = swa ? &f->rope_swa[rs] : &f->rope_global[rs];
    const struct kern_buf *tab = swa ? P->tab_swa : P->tab_global;
    if (!hp->no_rope_layer[il]) {
        op->rope(s, P->q, tab, rope, T, H, D);
        op->rope(s, P->k, tab, rope, T, Hkv, D);
    }
    if (hp->q_scale != 1.0f)
        op->scale(s, P->q, hp->q_scale, T * QD);
    for (int64_t r = 0; r < n_runs; r++) {
        f->runs[r].k = f->run_kv[r]->kb[il];
        f->runs[r].v = f->run_kv[r]->vb[il];
    }
    const struct kern_attn_batch batch = {
        .q = P->q, .k_new = P->k, .v_new = P->v, .out = ab, .pos = pos, .n_tok = T,
        .runs = f->runs, .n_runs = n_runs,
        .kv_type = model_kv_qtype(kv_type),
        .n_head = (int32_t)H, .n_head_kv = (int32_t)Hkv, .head_dim = (int32_t)D,
        .scale = hp->kq_scale, .window = swa ? (int32_t)hp->n_swa : 0,
        .softcap = hp->attn_softcap, .sinks = d->attn_sinks,
    };
    op->kv_store(s, &batch);
    if (attend && batch.softcap > 0.0f)
        op->attention_softcap(s, &batch); /* model_open placed the layer where it exists */
    else if (attend && batch.sinks)
        op->attention_sinks(s, &batch);   /* likewise */
    else if (attend)
        op->attention(s, &batch);
}

/* lfm2's short-convolution block of conv layer il on part P: B, C, x = P->h Win^T into
 * P->g, bx stored into each run's rows, C * conv into ab (T, E). */
static void conv_block(struct model_fwd *f, const struct fwd_part *P, const struct model_layer_bufs *d,
                       int64_t il, const int32_t *pos, int64_t T, int64_t n_runs, struct kern_buf *ab)
{
    const struct model_hparams *hp = &f->m->hp;
    struct kern_stream *s = P->s;
    const struct kern_buf *win = d->conv_in;
    s->ops->matmul(s, 1, &win, P->h, T, &P->g);
    for (int64_t r = 0; r < n_runs; r++) {
        f->runs[r].k = f->run_kv[r]->kb[il];
        f->runs[r].v = NULL;
    }
    const struct kern_conv_batch batch = {
        .bcx = P->g, .out = ab, .w = d->conv_w, .pos = pos, .n_tok = T, .runs = f->runs,
        .n_runs = n_runs, .n_embd = (int32_t)hp->n_embd, .n_taps = (int32_t)hp->n_conv_l,
    };
    s->ops->shortconv(s, &batch);
}

/* The pass model_forward_multi and model_forward_hidden share: logits (n_out, n_vocab)
 * when hidden is NULL, else the final-normed hidden states (n_out, E) into hidden. */
static enum kn_status fwd_run(struct model_fwd *f, struct model_kv *const *kvs,
                              const int32_t *tokens, const int32_t *pos, int64_t n,
                              const int64_t *out_rows, int64_t n_out, float *logits,
                              float *hidden, struct kn_err *err)
{
    const struct model *m = f->m;
    const struct model_hparams *hp = &m->hp;
    const int64_t T = n, E = hp->n_embd, F = hp->n_ff, D = hp->head_dim_k;
    const int64_t H = hp->n_head, Hkv = hp->n_head_kv;
    const int64_t QD = H * D;

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
                kv->k_row_bytes != kern_kv_row_bytes(model_kv_qtype(kv->type), D) * (size_t)Hkv ||
                kv->conv_row_bytes != (hp->n_conv_l ? (size_t)E * sizeof(float) : 0))
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
    /* phi3's LongRoPE: the caches' context decides the factors, one set per batch. */
    const int rs = model_rope_long(m, kvs[0]->n_ctx) ? 1 : 0;
    for (int64_t t = 1; t < T; t++)
        if (kvs[t] != kvs[t - 1] && model_rope_long(m, kvs[t]->n_ctx) != (rs == 1))
            return kn_fail(err, KN_E_ARG, "caches of %lld and %lld positions select different RoPE "
                           "factors (original context %lld); one batch cannot mix them",
                           (long long)kvs[0]->n_ctx, (long long)kvs[t]->n_ctx,
                           (long long)hp->n_ctx_orig_yarn);
    for (int64_t j = 0; j < n_out; j++)
        if (out_rows[j] < 0 || out_rows[j] >= n)
            return kn_fail(err, KN_E_ARG, "output row %lld is outside the batch of %lld",
                           (long long)out_rows[j], (long long)n);

    /* ---- the runs of tokens sharing a cache: one attention call each. */
    int64_t n_runs = 0;
    for (int64_t t0 = 0; t0 < T;) {
        int64_t t1 = t0 + 1;
        int32_t max_pos = pos[t0];
        while (t1 < T && kvs[t1] == kvs[t0]) {
            if (pos[t1] > max_pos)
                max_pos = pos[t1];
            t1++;
        }
        f->runs[n_runs] = (struct kern_kv_run){
            .t0 = t0, .n = t1 - t0, .n_ctx = kvs[t0]->n_ctx, .n_kv = (int64_t)max_pos + 1};
        f->run_kv[n_runs++] = kvs[t0];
        t0 = t1;
    }

    if (model_arch_is_bert(hp->arch)) {
        for (int64_t t = 1; t < T; t++)
            if (kvs[t] != kvs[0])
                return kn_fail(err, KN_E_ARG, "%s embeds one sequence per forward call",
                               model_arch_name(hp->arch));
        return model_bert_pass(f, kvs[0], tokens, pos, T, out_rows, n_out, hidden, err);
    }

    /* ---- embeddings, on the first layer's backend. */
    const struct fwd_part *P = &f->part[0];
    model_fwd_part_begin(f, P, pos, T, rs);
    P->s->ops->embed(P->s, P->x, m->d_tok_embd, tokens, T, hp->embd_scale);

    struct kern_buf *xb = P->x, *ab = P->a, *ob = P->o; /* the last layer swaps them */
    bool compacted = false; /* the last layer ran on the output rows only, in order */
    for (int64_t il = 0; il < hp->n_layer; il++) {
        const struct model_layer *L = &m->layers[il];
        const struct model_layer_bufs *d = &L->d;
        if (il == f->split) {
            enum kn_status st = model_fwd_handover(f, &P, pos, T, rs, err);
            if (st != KN_OK)
                return st;
            xb = P->x, ab = P->a, ob = P->o;
        }
        struct kern_stream *s = P->s;
        const struct kern_backend_ops *op = s->ops;

        /* Attention block (lfm2's conv layers: the short-convolution block; olmo2 has no
         * pre-norm: the block reads x itself). */
        const struct kern_buf *hin = xb;
        if (d->attn_norm) {
            op->rmsnorm(s, P->h, xb, d->attn_norm, T, E, hp->norm_eps);
            hin = P->h;
        }
        const bool last = il == hp->n_layer - 1;
        const bool conv = hp->conv_layer[il];
        if (conv)
            conv_block(f, P, d, il, pos, T, n_runs, ab);
        else
            attn_block(f, P, d, il, hin, rs, kvs[0]->type, pos, T, n_runs, ab, !(last && n_out == 0));
        if (last && n_out == 0)
            break;
        /* After the last layer's keys and values (conv rows) are stored, only the output
         * rows matter: the rest of the layer runs on them alone, gathered to the front
         * (row-wise work, so their bits do not change). The block's output ab is
         * (T, QD), or (T, E) for a conv layer. */
        const int64_t AD = conv ? E : QD;
        int64_t R = T;
        if (last && n_out < T) {
            op->gather(s, ob, xb, out_rows, n_out, E);
            op->gather(s, P->q, ab, out_rows, n_out, AD);
            struct kern_buf *t = xb;
            xb = ob, ob = t;
            ab = P->q;
            R = n_out;
            compacted = true;
        }
        const struct kern_buf *wo = conv ? d->conv_out : d->wo, *wdown = d->ffn_down;
        op->matmul(s, 1, &wo, ab, R, &ob);
        if (d->bo) op->add_rows(s, ob, d->bo, R, E);
        if (d->post_attn_norm)
            op->rmsnorm(s, ob, ob, d->post_attn_norm, R, E, hp->norm_eps);
        if (hp->residual_scale != 1.0f)
            op->scale(s, ob, hp->residual_scale, R * E);
        op->add(s, xb, ob, R * E);

        /* Feed-forward block. */
        hin = xb;
        if (d->ffn_norm) {
            op->rmsnorm(s, P->h, xb, d->ffn_norm, R, E, hp->norm_eps);
            hin = P->h;
        }
        if (L->moe) {
            const struct model_moe *mo = L->moe;
            const struct kern_buf *router = mo->d_router;
            const int64_t X = hp->n_expert;
            const struct kern_buf *const *eb = (const struct kern_buf *const *)mo->d_exp_b;
            const struct kern_moe_ffn ffn = {
                .n_expert = (int32_t)X, .n_used = (int32_t)hp->n_expert_used,
                .act = eb ? KERN_GLU_SWIGLU_OAI : KERN_GLU_SWIGLU,
                .gate = (const struct kern_buf *const *)mo->d_exps,
                .up = (const struct kern_buf *const *)mo->d_exps + X,
                .down = (const struct kern_buf *const *)mo->d_exps + 2 * X,
                .gate_b = eb, .up_b = eb ? eb + X : NULL, .down_b = eb ? eb + 2 * X : NULL,
            };
            op->matmul(s, 1, &router, hin, R, &P->router);
            if (mo->d_router_b)
                op->add_rows(s, P->router, mo->d_router_b, R, X);
            op->moe_route(s, &hp->moe_gate, P->router, mo->d_bias, R, P->moe_ids, P->moe_w);
            if (eb) /* gpt-oss: model_open placed the layer where the op exists */
                op->moe_ffn_oai(s, &ffn, hin, P->moe_ids, P->moe_w, R, ob);
            else
                op->moe_ffn(s, &ffn, hin, P->moe_ids, P->moe_w, R, ob);
            op->add(s, xb, ob, R * E);
            continue;
        }
        {
            const struct kern_buf *w[2] = {d->ffn_gate, d->ffn_up};
            struct kern_buf *y[2] = {P->g, P->u};
            op->matmul(s, 2, w, hin, R, y);
        }
        const bool gelu = hp->arch == MODEL_ARCH_GEMMA3 || hp->arch == MODEL_ARCH_GEMMA2;
        op->glu(s, gelu ? KERN_GLU_GEGLU : KERN_GLU_SWIGLU, P->g, P->u, R * F);
        op->matmul(s, 1, &wdown, P->g, R, &ob);
        if (d->post_ffn_norm)
            op->rmsnorm(s, ob, ob, d->post_ffn_norm, R, E, hp->norm_eps);
        if (hp->residual_scale != 1.0f)
            op->scale(s, ob, hp->residual_scale, R * E);
        op->add(s, xb, ob, R * E);
    }

    /* ---- output rows only, on the last layer's backend. */
    struct kern_stream *s = P->s;
    if (n_out > 0) {
        bool in_order = compacted; /* rows 0..n_out-1 of xb are the output rows */
        if (!in_order) {
            in_order = true;
            for (int64_t j = 0; j < n_out && in_order; j++)
                in_order = out_rows[j] == j;
        }
        if (in_order) {
            s->ops->rmsnorm(s, P->h, xb, m->d_output_norm, n_out, E, hp->norm_eps);
        } else {
            s->ops->gather(s, P->h, xb, out_rows, n_out, E);
            s->ops->rmsnorm(s, P->h, P->h, m->d_output_norm, n_out, E, hp->norm_eps);
        }
        if (hidden)
            s->ops->to_host(s, P->h, 0, hidden, (size_t)(n_out * E) * sizeof(float));
        else
            s->ops->logits(s, m->d_output, m->d_output_b, P->h, n_out, logits);
    }
    enum kn_status st = s->ops->end(s, err);
    if (hidden)
        return st;
    /* On the host logits, whatever backend made them: granite's logits times
     * 1/logit_scale (one f32 division, then a product each), gemma2's final soft-cap. */
    if (st == KN_OK && hp->logit_scale != 1.0f && n_out > 0)
        kern_scale(logits, logits, 1.0f / hp->logit_scale, n_out * hp->n_vocab);
    if (st == KN_OK && hp->final_softcap > 0.0f && n_out > 0)
        kern_softcap(logits, logits, hp->final_softcap, n_out * hp->n_vocab);
    return st;
}

enum kn_status model_forward_multi(struct model_fwd *f, struct model_kv *const *kvs,
                                   const int32_t *tokens, const int32_t *pos, int64_t n,
                                   const int64_t *out_rows, int64_t n_out, float *logits,
                                   struct kn_err *err)
{
    return fwd_run(f, kvs, tokens, pos, n, out_rows, n_out, logits, NULL, err);
}

/* One sequence's batch: every token reads and writes kv. */
static enum kn_status fwd_one(struct model_fwd *f, struct model_kv *kv, const int32_t *tokens,
                              const int32_t *pos, int64_t n, const int64_t *out_rows,
                              int64_t n_out, float *logits, float *hidden, struct kn_err *err)
{
    if (n <= 0 || n > f->max_tokens)
        return kn_fail(err, KN_E_ARG, "batch of %lld tokens; this context takes 1..%lld", (long long)n,
                       (long long)f->max_tokens);
    for (int64_t t = 0; t < n; t++)
        f->kv_tok[t] = kv;
    return fwd_run(f, f->kv_tok, tokens, pos, n, out_rows, n_out, logits, hidden, err);
}

enum kn_status model_forward(struct model_fwd *f, struct model_kv *kv, const int32_t *tokens,
                             const int32_t *pos, int64_t n, const int64_t *out_rows, int64_t n_out,
                             float *logits, struct kn_err *err)
{
    return fwd_one(f, kv, tokens, pos, n, out_rows, n_out, logits, NULL, err);
}

enum kn_status model_forward_hidden(struct model_fwd *f, struct model_kv *kv,
                                    const int32_t *tokens, const int32_t *pos, int64_t n,
                                    const int64_t *out_rows, int64_t n_out, float *hidden,
                                    struct kn_err *err)
{
    return fwd_one(f, kv, tokens, pos, n, out_rows, n_out, NULL, hidden, err);
}
