/* generate.c: the one generation loop (see engine.h). */
#include "engine.h"

#include "../sample/sample.h"
#include "../token/tok.h"

#include <string.h>

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
        if (on_token && !on_token(ctx, id, n - 1)) {
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
    return KN_OK;
}
