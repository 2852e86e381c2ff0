/* prefill.c: Zero Wait (pre-evaluating a prompt while it is typed) and prompt evaluation
 * with every reuse (see engine.h). Both rest on one fact: the KV entries of positions
 * 0..k-1 depend only on tokens 0..k-1 (docs/numerics.md rules 1 and 5), so whatever
 * computed them (an earlier partial prompt, a previous chat turn, the prompt cache), a
 * prompt that starts with the same k tokens may keep them. */
#include "engine.h"

enum kn_status engine_prefill(struct engine *e, const int32_t *tokens, int64_t n, struct kn_err *err)
{
    if (n < 0)
        return kn_fail(err, KN_E_ARG, "negative prompt length");
    if (n > e->n_ctx)
        return kn_fail(err, KN_E_LIMIT, "a prompt of %lld tokens does not fit the context of %lld",
                       (long long)n, (long long)e->n_ctx);
    int64_t keep = pcache_restore(NULL, e, tokens, n, n);
    if (keep == n)
        return KN_OK;
    return engine_eval(e, tokens + keep, n - keep, err);
}

enum kn_status engine_eval_prompt(struct engine *e, struct pcache *c, const int32_t *tokens,
                                  int64_t n, int64_t *n_reused, struct kn_err *err)
{
    if (n_reused)
        *n_reused = 0;
    if (n <= 0)
        return kn_fail(err, KN_E_ARG, "the prompt is empty");
    if (n > e->n_ctx)
        return kn_fail(err, KN_E_LIMIT,
                       "the prompt has %lld tokens; the context holds %lld; use a larger --ctx-size",
                       (long long)n, (long long)e->n_ctx);
    /* The last token is always evaluated: its logits start generation. */
    int64_t keep = pcache_restore(c, e, tokens, n, n - 1);
    enum kn_status st = engine_eval(e, tokens + keep, n - keep, err);
    if (st != KN_OK)
        return st;
    if (n_reused)
        *n_reused = keep;
    if (c)
        st = pcache_store(c, e, n, err);
    return st;
}
