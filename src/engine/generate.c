/* generate.c: the one generation loop (see engine.h). */
#include "engine.h"

#include "../sample/sample.h"
#include "../text/text.h"
#include "../token/tok.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- stop strings and text */

static void stop_clear(struct engine *e)
{
    if (e->stop) {
        for (int i = 0; i < e->stop->n; i++)
            free(e->stop_strs[i]);
        text_stop_free(e->stop);
    }
    free(e->stop);
    free(e->stop_strs);
    e->stop = NULL;
    e->stop_strs = NULL;
}

void engine_stop_free(struct engine *e)
{
    stop_clear(e);
    free(e->text);
    e->text = NULL;
    e->text_n = e->text_cap = 0;
}

enum kn_status engine_set_stop(struct engine *e, const char *const *stops, int n,
                               struct kn_err *err)
{
    stop_clear(e);
    if (n < 0 || n > TEXT_MAX_STOPS)
        return kn_fail(err, KN_E_ARG, "at most %d stop strings, not %d", TEXT_MAX_STOPS, n);
    e->stop = kn_calloc(1, sizeof *e->stop, err);
    e->stop_strs = kn_calloc((size_t)n + 1, sizeof *e->stop_strs, err);
    if (!e->stop || !e->stop_strs) {
        free(e->stop);
        free(e->stop_strs);
        e->stop = NULL;
        e->stop_strs = NULL;
        return KN_E_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) {
            stop_clear(e);
            return kn_fail(err, KN_E_ARG, "stop string %d is empty; stop strings need at least one byte", i + 1);
        }
        if (!(e->stop_strs[i] = kn_strdup(stops[i], err))) {
            for (int j = 0; j < i; j++)
                free(e->stop_strs[j]);
            free(e->stop);
            free(e->stop_strs);
            e->stop = NULL;
            e->stop_strs = NULL;
            return KN_E_NOMEM;
        }
    }
    enum kn_status st = text_stop_init(e->stop, (const char *const *)e->stop_strs, n, err);
    if (st != KN_OK) {
        for (int i = 0; i < n; i++)
            free(e->stop_strs[i]);
        free(e->stop);
        free(e->stop_strs);
        e->stop = NULL;
        e->stop_strs = NULL;
    }
    return st;
}

const char *engine_text(const struct engine *e, size_t *len)
{
    *len = e->text_n;
    return e->text ? e->text : "";
}

int engine_stop_matched(const struct engine *e)
{
    return e->stop ? e->stop->matched : -1;
}

enum kn_status engine_text_begin(struct engine *e, const struct tok *tk, struct kn_err *err)
{
    if (!e->stop) {
        enum kn_status st = engine_set_stop(e, NULL, 0, err);
        if (st != KN_OK)
            return st;
    }
    e->stop->n_held = 0;
    e->stop->matched = -1;
    e->text_n = 0;
    /* One token's piece plus what was held back: sized once, not per token. */
    size_t need = tok_max_piece(tk) + e->stop->max_len + 8;
    if (need > e->text_cap) {
        char *t = kn_malloc(need, err);
        if (!t)
            return KN_E_NOMEM;
        free(e->text);
        e->text = t;
        e->text_cap = need;
    }
    return KN_OK;
}

bool engine_text_push(struct engine *e, const struct tok *tk, int32_t id)
{
    size_t len = 0;
    const char *p = tok_piece(tk, id, false, &len);
    return text_stop_feed(e->stop, p ? p : "", p ? len : 0, e->text, &e->text_n);
}

void engine_text_end(struct engine *e)
{
    text_stop_flush(e->stop, e->text, &e->text_n);
}

/* ---------------------------------------------------------------- generation */

const char *engine_finish_name(enum engine_finish f)
{
    return f == ENGINE_FINISH_STOP ? "stop" : "length";
}

enum kn_status engine_generate(struct engine *e, const struct tok *tk, struct sample_ctx *sctx,
                               const struct sample_params *sp, int64_t max_tokens,
                               engine_token_fn on_token, void *ctx, int32_t *ids, int64_t *n_ids,
                               enum engine_finish *finish, struct kn_err *err)
{
    if (e->draft)
        return engine_generate_draft(e, tk, sctx, sp, max_tokens, on_token, ctx, ids, n_ids, finish,
                                     err);
    memset(&e->draft_stats, 0, sizeof e->draft_stats);
    int64_t n = 0;
    *n_ids = 0;
    *finish = ENGINE_FINISH_LENGTH;
    if (!e->have_logits)
        return kn_fail(err, KN_E_INTERNAL, "generation needs an evaluated prompt");
    /* Per-request sampler state (DRY's token texts, Mirostat's mu) starts afresh, so a
     * rerun of the same request reproduces it. */
    enum kn_status st = sample_ctx_prepare(sctx, sp, e->n_ctx, sample_tok_piece, tk, err);
    if (st == KN_OK)
        st = engine_text_begin(e, tk, err);
    if (st != KN_OK)
        return st;
    for (;;) {
        if (max_tokens >= 0 && n >= max_tokens) {
            *finish = ENGINE_FINISH_LENGTH;
            break;
        }
        int32_t id = sample_token(sctx, sp, e->logits, e->history, e->n_past, (uint64_t)n);
        if (id < 0 || tok_is_eog(tk, id)) { /* < 0: a grammar that no token can continue */
            *finish = ENGINE_FINISH_STOP;
            break;
        }
        ids[n++] = id;
        *n_ids = n;
        bool stopped = engine_text_push(e, tk, id);
        if ((on_token && !on_token(ctx, id, n - 1)) || stopped) {
            *finish = ENGINE_FINISH_STOP;
            break;
        }
        if (max_tokens >= 0 && n >= max_tokens) {
            *finish = ENGINE_FINISH_LENGTH;
            break;
        }
        if (e->n_past >= e->n_ctx) {
            *finish = ENGINE_FINISH_CONTEXT;
            break;
        }
        e->draft_stats.steps++;
        st = engine_eval(e, &id, 1, err);
        if (st != KN_OK)
            return st;
    }
    engine_text_end(e);
    return KN_OK;
}
