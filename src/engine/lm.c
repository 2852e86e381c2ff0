/* lm.c: the generation step's forward-pass interface (struct engine_lm) over a real
 * model: one KV cache per sequence, one model_forward_multi call per step (the weights
 * are read once for every sequence's tokens), the tokenizer's pieces and
 * end-of-generation ids, and Warm Start's shared prompt cache (pcache.c). A token's
 * arithmetic depends only on its own sequence (docs/numerics.md), so batching changes
 * speed, never bits. */
#include "engine.h"

#include "../sample/sample.h"
#include "../token/tok.h"

#include <stdlib.h>
#include <string.h>

struct engine_lm_model {
    const struct model *m;
    const struct tok *tk;
    struct model_fwd *fwd;
    struct model_kv *kvs;       /* (n_seq) */
    bool own;                   /* fwd, kvs and cache are this object's */
    int n_seq;
    struct model_kv **kv_tok;   /* (max_batch) each batch token's cache */
    int64_t max_batch;
    struct pcache *cache;       /* NULL: none */
};

static enum kn_status lm_forward(void *ctx, const struct engine_batch *b, float *logits,
                                 struct kn_err *err)
{
    struct engine_lm_model *lm = ctx;
    if (b->n > lm->max_batch)
        return kn_fail(err, KN_E_INTERNAL, "a batch of %lld tokens exceeds %lld", (long long)b->n,
                       (long long)lm->max_batch);
    for (int64_t i = 0; i < b->n; i++) {
        if (b->seq[i] < 0 || b->seq[i] >= lm->n_seq)
            return kn_fail(err, KN_E_INTERNAL, "a batch names sequence %d of %d", b->seq[i],
                           lm->n_seq);
        lm->kv_tok[i] = &lm->kvs[b->seq[i]];
    }
    return model_forward_multi(lm->fwd, lm->kv_tok, b->tokens, b->pos, b->n, b->out_rows,
                               b->n_out, logits, err);
}

static bool lm_is_eog(void *ctx, int32_t id)
{
    struct engine_lm_model *lm = ctx;
    return tok_is_eog(lm->tk, id);
}

static const char *lm_piece(void *ctx, int32_t id, size_t *len)
{
    struct engine_lm_model *lm = ctx;
    return tok_piece(lm->tk, id, false, len);
}

static int64_t lm_cache_restore(void *ctx, int seq, const int32_t *tokens, int64_t keep,
                                int64_t max_n)
{
    struct engine_lm_model *lm = ctx;
    return pcache_restore_kv(lm->cache, &lm->kvs[seq], tokens, keep, max_n);
}

static enum kn_status lm_cache_store(void *ctx, int seq, const int32_t *tokens, int64_t n,
                                     struct kn_err *err)
{
    struct engine_lm_model *lm = ctx;
    return pcache_store_kv(lm->cache, &lm->kvs[seq], tokens, n, err);
}

void engine_lm_model_bind(struct engine_lm *out, struct model_kv *kvs, const struct tok *tk)
{
    struct engine_lm_model *lm = out->ctx;
    if (kvs)
        lm->kvs = kvs;
    lm->tk = tk;
    out->sample_pctx = tk;
    out->max_piece = tk ? tok_max_piece(tk) : 0;
}

enum kn_status engine_lm_model_wrap(struct engine_lm *out, const struct model *m,
                                    struct model_fwd *fwd, struct model_kv *kvs, int n_seq,
                                    int64_t max_batch, struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    struct engine_lm_model *lm = kn_calloc(1, sizeof *lm, err);
    if (!lm)
        return KN_E_NOMEM;
    lm->kv_tok = kn_malloc((size_t)max_batch * sizeof *lm->kv_tok, err);
    if (!lm->kv_tok) {
        free(lm);
        return KN_E_NOMEM;
    }
    lm->m = m;
    lm->fwd = fwd;
    lm->kvs = kvs;
    lm->n_seq = n_seq;
    lm->max_batch = max_batch;
    *out = (struct engine_lm){
        .ctx = lm,
        .n_vocab = (int32_t)m->hp.n_vocab,
        .n_seq = n_seq,
        .n_ctx = kvs[0].n_ctx,
        .max_batch = max_batch,
        .forward = lm_forward,
        .is_eog = lm_is_eog,
        .piece = lm_piece,
        .sample_piece = sample_tok_piece,
    };
    return KN_OK;
}

void engine_lm_model_close(struct engine_lm *out)
{
    struct engine_lm_model *lm = out->ctx;
    if (!lm)
        return;
    if (lm->own) {
        pcache_free(lm->cache);
        if (lm->kvs)
            for (int s = 0; s < lm->n_seq; s++)
                model_kv_free(&lm->kvs[s]);
        free(lm->kvs);
        model_fwd_free(lm->fwd);
    }
    free(lm->kv_tok);
    free(lm);
    memset(out, 0, sizeof *out);
}

enum kn_status engine_lm_model_open(struct engine_lm *out, const struct model *m,
                                    const struct tok *tk, struct kern_pool *pool,
                                    const struct engine_lm_model_params *p, struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    if (p->n_seq < 1 || p->n_ctx < 2 || p->n_ctx > INT32_MAX || p->max_batch < 1)
        return kn_fail(err, KN_E_ARG, "bad model shape (%d sequences of %lld positions, batch %lld)",
                       p->n_seq, (long long)p->n_ctx, (long long)p->max_batch);
    struct model_kv *kvs = kn_calloc((size_t)p->n_seq, sizeof *kvs, err);
    struct model_fwd *fwd = NULL;
    struct pcache *cache = NULL;
    enum kn_status st = kvs ? KN_OK : KN_E_NOMEM;
    int made = 0;
    for (; st == KN_OK && made < p->n_seq; made++)
        if ((st = model_kv_init(&kvs[made], m, p->n_ctx, p->kv_type, err)) != KN_OK)
            break;
    if (st == KN_OK)
        st = model_fwd_create(&fwd, m, p->max_batch, pool, err);
    if (st == KN_OK && p->cache_bytes > 0)
        st = pcache_create(&cache, m, p->kv_type, p->cache_bytes, err);
    if (st == KN_OK)
        st = engine_lm_model_wrap(out, m, fwd, kvs, p->n_seq, p->max_batch, err);
    if (st != KN_OK) {
        pcache_free(cache);
        model_fwd_free(fwd);
        for (int s = 0; kvs && s < made; s++)
            model_kv_free(&kvs[s]);
        free(kvs);
        return st;
    }
    struct engine_lm_model *lm = out->ctx;
    lm->own = true;
    lm->cache = cache;
    engine_lm_model_bind(out, NULL, tk);
    if (cache) {
        out->cache_restore = lm_cache_restore;
        out->cache_store = lm_cache_store;
    }
    return KN_OK;
}

struct pcache *engine_lm_model_cache(const struct engine_lm *out)
{
    const struct engine_lm_model *lm = out->ctx;
    return lm ? lm->cache : NULL;
}
