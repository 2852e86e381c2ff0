/* generate.c: engine_generate, the single-sequence client of the one generation step
 * (slots.c), and its stop strings and text (see engine.h). */
#include "engine.h"

#include "../text/text.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- stop strings and text */

static void stop_clear(struct engine *e)
{
    for (int i = 0; i < e->n_stop; i++)
        free(e->stop_strs[i]);
    free(e->stop_strs);
    e->stop_strs = NULL;
    e->n_stop = 0;
}

void engine_stop_free(struct engine *e)
{
    stop_clear(e);
    e->text = NULL;
    e->text_n = 0;
}

enum kn_status engine_set_stop(struct engine *e, const char *const *stops, int n,
                               struct kn_err *err)
{
    stop_clear(e);
    if (n < 0 || n > TEXT_MAX_STOPS)
        return kn_fail(err, KN_E_ARG, "at most %d stop strings, not %d", TEXT_MAX_STOPS, n);
    if (!(e->stop_strs = kn_calloc((size_t)n + 1, sizeof *e->stop_strs, err)))
        return KN_E_NOMEM;
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) {
            stop_clear(e);
            return kn_fail(err, KN_E_ARG, "stop string %d is empty; stop strings need at least one byte", i + 1);
        }
        if (!(e->stop_strs[i] = kn_strdup(stops[i], err))) {
            stop_clear(e);
            return KN_E_NOMEM;
        }
        e->n_stop = i + 1;
    }
    return KN_OK;
}

const char *engine_text(const struct engine *e, size_t *len)
{
    *len = e->text ? e->text_n : 0;
    return e->text ? e->text : "";
}

int engine_stop_matched(const struct engine *e)
{
    return e->stop_matched;
}

/* ---------------------------------------------------------------- generation */

const char *engine_finish_name(enum engine_finish f)
{
    return f == ENGINE_FINISH_STOP ? "stop" : "length";
}

struct gen {
    struct engine *e;
    engine_token_fn on_token;
    void *ctx;
    int32_t *ids;
    int64_t n;
};

/* The step's callback: an end-of-generation token ends the output without joining it. */
static bool gen_on_token(void *ctx, const struct engine_tok *t)
{
    struct gen *g = ctx;
    /* Callers read e->logits as the logits of the token just sampled. */
    if (t->logits != g->e->logits)
        memcpy(g->e->logits, t->logits, (size_t)g->e->lm.n_vocab * sizeof *t->logits);
    if (t->eog)
        return true;
    g->ids[g->n++] = t->id;
    g->e->text = t->text;
    g->e->text_n = t->text_len;
    return !g->on_token || g->on_token(g->ctx, t->id, t->index);
}

enum kn_status engine_generate(struct engine *e, const struct tok *tk, struct sample_ctx *sctx,
                               const struct sample_params *sp, int64_t max_tokens,
                               engine_token_fn on_token, void *ctx, int32_t *ids, int64_t *n_ids,
                               enum engine_finish *finish, struct kn_err *err)
{
    memset(&e->draft_stats, 0, sizeof e->draft_stats);
    *n_ids = 0;
    *finish = ENGINE_FINISH_LENGTH;
    e->text = NULL;
    e->text_n = 0;
    e->stop_matched = -1;
    if (!e->have_logits)
        return kn_fail(err, KN_E_INTERNAL, "generation needs an evaluated prompt");
    if (e->n_past < 1)
        return kn_fail(err, KN_E_INTERNAL, "generation needs a prompt of at least one token");
    /* One slot over this engine's cache, entering with the prompt evaluated: the same
     * step, stop rule and RAD-1 verification as every server slot. */
    struct engine_slots *es = e->slots;
    struct engine_slot *sl = &es->slot[0];
    es->lm = &e->lm;
    engine_lm_model_bind(&e->lm, &e->kv, tk);
    struct engine_req req = {.prompt = e->history, .n_prompt = e->n_past, .sp = sp, .sctx = sctx,
                             .max_tokens = max_tokens, .stop = (const char *const *)e->stop_strs,
                             .n_stop = e->n_stop, .logits = e->logits};
    enum kn_status st = engine_slot_begin(es, 0, &req, err);
    if (st != KN_OK)
        return st;
    struct gen g = {e, on_token, ctx, ids, 0};
    const int64_t start = e->n_past;
    while (max_tokens != 0 && !sl->done) {
        st = engine_slots_step(es, gen_on_token, &g, err);
        *n_ids = g.n;
        if (st != KN_OK)
            break;
    }
    if (st == KN_OK && sl->done) {
        /* Leave the state plain decoding leaves: every position up to the last sampled
         * token's evaluated, that token not, e->logits the logits it was sampled from. */
        memcpy(e->history + start, sl->history + start, (size_t)(sl->held - start) * sizeof *ids);
        e->n_past = sl->held;
        if (sl->last_logits && sl->last_logits != e->logits)
            memcpy(e->logits, sl->last_logits, (size_t)e->lm.n_vocab * sizeof *e->logits);
        e->have_logits = true;
        *finish = sl->finish;
        e->stop_matched = sl->stop_matched;
        e->text = sl->text + sl->text_n; /* the tail released at the end */
        e->text_n = sl->tail_n;
    } else if (st != KN_OK) {
        e->have_logits = false;
    }
    e->draft_stats = sl->draft;
    engine_slot_end(es, 0);
    return st;
}
