/* engine.c: the single-sequence engine: its KV cache, history and prompt evaluation in
 * chunks (see engine.h). */
#include "engine.h"

#include <stdlib.h>
#include <string.h>

enum kn_status engine_init(struct engine *e, const struct model *m, struct kern_pool *pool,
                           const struct engine_params *p, struct kn_err *err)
{
    memset(e, 0, sizeof *e);
    if (p->n_ctx <= 0 || p->n_ctx > INT32_MAX)
        return kn_fail(err, KN_E_ARG, "context size %lld is out of range", (long long)p->n_ctx);
    if (p->n_batch <= 0)
        return kn_fail(err, KN_E_ARG, "batch size %lld must be positive", (long long)p->n_batch);
    e->m = m;
    e->pool = pool;
    e->n_ctx = p->n_ctx;
    e->n_batch = p->n_batch < p->n_ctx ? p->n_batch : p->n_ctx;
    enum kn_status st = model_kv_init(&e->kv, m, e->n_ctx, p->kv_type, err);
    if (st != KN_OK)
        return st;
    st = model_fwd_create(&e->fwd, m, e->n_batch, pool, err);
    if (st != KN_OK) {
        engine_free(e);
        return st;
    }
    /* +1: the token sampled when the context is full */
    e->history = kn_calloc((size_t)e->n_ctx + 1, sizeof(int32_t), err);
    e->pos = kn_calloc((size_t)e->n_batch, sizeof(int32_t), err);
    e->logits = kn_calloc((size_t)m->hp.n_vocab, sizeof(float), err);
    if (!e->history || !e->pos || !e->logits) {
        engine_free(e);
        return KN_E_NOMEM;
    }
    /* Generation is one slot of the multi-sequence step over this engine's cache. */
    struct engine_slots_params sp = {.max_batch = e->n_batch, .no_draft = p->no_draft,
                                     .draft_max = p->draft_max, .no_warm_start = true};
    if ((st = engine_lm_model_wrap(&e->lm, m, e->fwd, &e->kv, 1, e->n_batch, err)) != KN_OK ||
        !(e->slots = kn_calloc(1, sizeof *e->slots, err)) ||
        (st = engine_slots_init(e->slots, &e->lm, 1, &sp, err)) != KN_OK) {
        engine_free(e);
        return st != KN_OK ? st : KN_E_NOMEM;
    }
    e->draft_max = e->slots->dmax;
    e->draft = e->draft_max > 0;
    return KN_OK;
}

void engine_free(struct engine *e)
{
    model_fwd_free(e->fwd);
    model_kv_free(&e->kv);
    free(e->history);
    free(e->pos);
    free(e->logits);
    if (e->slots)
        engine_slots_free(e->slots);
    free(e->slots);
    engine_lm_model_close(&e->lm);
    engine_stop_free(e);
    memset(e, 0, sizeof *e);
}

void engine_truncate(struct engine *e, int64_t n_past)
{
    if (n_past < 0)
        n_past = 0;
    if (n_past < e->n_past) {
        e->n_past = n_past;
        e->have_logits = false;
    }
}

void engine_reset(struct engine *e)
{
    e->n_past = 0;
    e->have_logits = false;
}

/* engine_eval's loop; with out, also the logits of tokens first..n-1 into out, through
 * rows (n_batch scratch indices). */
static enum kn_status eval_chunks(struct engine *e, const int32_t *tokens, int64_t n, int64_t first,
                                  float *out, int64_t *rows, struct kn_err *err)
{
    if (n <= 0)
        return kn_fail(err, KN_E_ARG, "nothing to evaluate");
    if (n > e->n_ctx - e->n_past)
        return kn_fail(err, KN_E_LIMIT,
                       "%lld tokens do not fit: %lld of the context's %lld positions are used; use a larger --ctx-size",
                       (long long)n, (long long)e->n_past, (long long)e->n_ctx);
    size_t nv = (size_t)e->m->hp.n_vocab;
    for (int64_t done = 0; done < n;) {
        int64_t c = n - done < e->n_batch ? n - done : e->n_batch;
        for (int64_t i = 0; i < c; i++)
            e->pos[i] = (int32_t)(e->n_past + i);
        bool last = done + c == n;
        int64_t row = c - 1, n_rows = last ? 1 : 0, r0 = 0;
        const int64_t *rp = &row;
        float *dst = e->logits;
        if (out) {
            r0 = first > done ? first - done : 0;
            n_rows = r0 < c ? c - r0 : 0;
            for (int64_t i = 0; i < n_rows; i++)
                rows[i] = r0 + i;
            rp = rows;
            dst = out + (size_t)(done + r0 - first) * nv;
        }
        enum kn_status st = model_forward(e->fwd, &e->kv, tokens + done, e->pos, c, rp, n_rows,
                                          dst, err);
        if (st != KN_OK) {
            e->have_logits = false;
            return st;
        }
        memcpy(e->history + e->n_past, tokens + done, (size_t)c * sizeof(int32_t));
        e->n_past += c;
        done += c;
    }
    if (out) /* the last token's row is the one engine_eval leaves */
        memcpy(e->logits, out + (size_t)(n - 1 - first) * nv, nv * sizeof(float));
    e->have_logits = true;
    return KN_OK;
}

enum kn_status engine_eval(struct engine *e, const int32_t *tokens, int64_t n, struct kn_err *err)
{
    return eval_chunks(e, tokens, n, 0, NULL, NULL, err);
}

enum kn_status engine_eval_rows(struct engine *e, const int32_t *tokens, int64_t n, int64_t first,
                                float *out, struct kn_err *err)
{
    if (first < 0 || first >= n)
        return kn_fail(err, KN_E_ARG, "the first logits row %lld is outside the %lld tokens",
                       (long long)first, (long long)n);
    int64_t *rows = kn_malloc((size_t)e->n_batch * sizeof *rows, err);
    if (!rows)
        return KN_E_NOMEM;
    enum kn_status st = eval_chunks(e, tokens, n, first, out, rows, err);
    free(rows);
    return st;
}
