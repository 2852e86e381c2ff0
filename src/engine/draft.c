/* draft.c: RAD-1, speculative decoding without a draft model (see engine.h).
 *
 * After sampling token t at position p, RAD-1 looks the sequence's recent suffix up in
 * the earlier sequence (prompt and generated text) and proposes the tokens that followed
 * it: d1..dk. One forward pass evaluates [t, d1..dk] at positions p..p+k and returns the
 * logits of every position. Row j is exactly the logits plain decoding would see after
 * d_j, provided d1..dj are the tokens plain decoding samples (docs/numerics.md: a token's
 * result depends only on its own token, position and the KV entries it attends to). So
 * the loop samples row 0 with token index n, row 1 with index n+1, ... (each with its own
 * random number and the history up to that position) and moves on to row j+1 only while
 * the sampled token equals d_{j+1}. The first mismatch keeps the sampled token (plain
 * decoding's token) and drops the rest: n_past goes back to the last valid position and
 * the stale KV entries above it are overwritten by the next pass. */
#include "engine.h"

#include "../sample/sample.h"
#include "../token/tok.h"

#include <stdlib.h>
#include <string.h>

/* Lookup window: suffixes of 4 down to 2 tokens. A single-token match predicts badly on
 * ordinary text (every "the" would draft), and a rejected draft costs a wider pass. */
enum { DRAFT_NGRAM_MAX = 4, DRAFT_NGRAM_MIN = 2, DRAFT_MAX_DEFAULT = 16, DRAFT_LEN_START = 4 };

enum kn_status engine_draft_init(struct engine *e, const struct engine_params *p, struct kn_err *err)
{
    e->draft_rows = kn_calloc((size_t)e->n_batch, sizeof(int64_t), err);
    if (!e->draft_rows)
        return KN_E_NOMEM;
    for (int64_t i = 0; i < e->n_batch; i++)
        e->draft_rows[i] = i;
    if (p->draft_max < 0)
        return kn_fail(err, KN_E_ARG, "draft length %d must not be negative", p->draft_max);
    int64_t dmax = p->draft_max ? p->draft_max : DRAFT_MAX_DEFAULT;
    /* A pass holds the decoded token and its drafts. */
    if (dmax > e->n_batch - 1)
        dmax = e->n_batch - 1;
    e->draft = !p->no_draft && dmax > 0;
    e->draft_max = (int32_t)dmax;
    if (!e->draft)
        return KN_OK;
    size_t rows;
    if (!kn_mul_size((size_t)dmax + 1, (size_t)e->m->hp.n_vocab, &rows))
        return kn_fail(err, KN_E_LIMIT, "draft logits size overflows");
    e->draft_logits = kn_calloc(rows, sizeof(float), err);
    e->draft_tokens = kn_calloc((size_t)dmax + 1, sizeof(int32_t), err);
    if (!e->draft_logits || !e->draft_tokens)
        return KN_E_NOMEM;
    return KN_OK;
}

void engine_draft_free(struct engine *e)
{
    free(e->draft_logits);
    free(e->draft_rows);
    free(e->draft_tokens);
    e->draft_logits = NULL;
    e->draft_rows = NULL;
    e->draft_tokens = NULL;
}

enum kn_status engine_eval_all(struct engine *e, const int32_t *tokens, int64_t n, float *logits_out,
                               struct kn_err *err)
{
    if (n <= 0 || n > e->n_batch)
        return kn_fail(err, KN_E_ARG, "engine_eval_all takes 1..%lld tokens, not %lld",
                       (long long)e->n_batch, (long long)n);
    if (n > e->n_ctx - e->n_past)
        return kn_fail(err, KN_E_LIMIT,
                       "%lld tokens do not fit: %lld of the context's %lld positions are used; use a larger --ctx-size",
                       (long long)n, (long long)e->n_past, (long long)e->n_ctx);
    for (int64_t i = 0; i < n; i++)
        e->pos[i] = (int32_t)(e->n_past + i);
    enum kn_status st = model_forward(e->fwd, &e->kv, tokens, e->pos, n, e->draft_rows, n,
                                      logits_out, err);
    if (st != KN_OK) {
        e->have_logits = false;
        return st;
    }
    memcpy(e->history + e->n_past, tokens, (size_t)n * sizeof(int32_t));
    e->n_past += n;
    const size_t V = (size_t)e->m->hp.n_vocab;
    memcpy(e->logits, logits_out + (size_t)(n - 1) * V, V * sizeof(float));
    e->have_logits = true;
    return KN_OK;
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

int64_t engine_draft_propose(const int32_t *seq, int64_t n, int32_t n_max, int32_t n_min,
                             int32_t *out, int64_t max_out)
{
    if (max_out <= 0 || n_min < 1)
        return 0;
    for (int64_t L = n_max; L >= n_min; L--) {
        if (L >= n)
            continue;
        const int32_t *suf = seq + n - L;
        /* Occurrences start at i, most recent first, with a token after them. */
        for (int64_t i = n - L - 1; i >= 0; i--) {
            if (seq[i] != suf[0] || memcmp(seq + i, suf, (size_t)L * sizeof(int32_t)) != 0)
                continue;
            /* The continuation may run into the proposal itself (periodic text):
             * seq followed by out is the predicted sequence. */
            int64_t k = 0;
            for (; k < max_out; k++) {
                int64_t idx = i + L + k;
                out[k] = idx < n ? seq[idx] : out[idx - n];
            }
            return k;
        }
    }
    return 0;
}

static void draft_adapt(struct engine *e, int64_t accepted, int64_t proposed)
{
    e->draft_stats.full += accepted == proposed;
    e->draft_stats.none += accepted == 0;
    e->draft_stats.partial += accepted > 0 && accepted < proposed;
    int64_t len = e->draft_len;
    if (accepted == proposed)
        len = len * 2;
    else
        len = accepted + 1;
    if (len > e->draft_max)
        len = e->draft_max;
    if (len < 1)
        len = 1;
    e->draft_len = (int32_t)len;
}

enum kn_status engine_generate_draft(struct engine *e, const struct tok *tk, struct sample_ctx *sctx,
                                     const struct sample_params *sp, int64_t max_tokens,
                                     engine_token_fn on_token, void *ctx, int32_t *ids,
                                     int64_t *n_ids, enum engine_finish *finish, struct kn_err *err)
{
    memset(&e->draft_stats, 0, sizeof e->draft_stats);
    *n_ids = 0;
    *finish = ENGINE_FINISH_LENGTH;
    if (!e->have_logits)
        return kn_fail(err, KN_E_INTERNAL, "generation needs an evaluated prompt");
    /* Per-request sampler state starts afresh, as in the plain loop. Every token is
     * sampled exactly once, in order (a rejected draft is never sampled: the sampled token
     * replaces it), so stateful samplers (Mirostat, a grammar) advance exactly as there. */
    enum kn_status st0 = sample_ctx_prepare(sctx, sp, e->n_ctx, sample_tok_piece, tk, err);
    if (st0 == KN_OK)
        st0 = engine_text_begin(e, tk, err);
    if (st0 != KN_OK)
        return st0;
    const size_t V = (size_t)e->m->hp.n_vocab;
    const int64_t start = e->n_past;
    int32_t *batch = e->draft_tokens; /* [token, d1..dk] of the pass in flight */
    const float *cur = e->logits;     /* the logits token n is sampled from */
    bool in_pass = false;             /* cur is row vj of a pass with vk drafts at base.. */
    int64_t base = 0, vk = 0, vj = 0;
    int64_t n = 0;
    e->draft_len = DRAFT_LEN_START < e->draft_max ? DRAFT_LEN_START : e->draft_max;
    for (;;) {
        if (max_tokens >= 0 && n >= max_tokens) {
            *finish = ENGINE_FINISH_LENGTH;
            break;
        }
        /* The history up to token n's position: prompt, then tokens 0..n-1 (accepted
         * drafts are those tokens). */
        int32_t id = sample_token(sctx, sp, cur, e->history, start + n, (uint64_t)n);
        /* Callers read e->logits as the logits of the token just sampled. */
        if (cur != e->logits)
            memcpy(e->logits, cur, V * sizeof(float));
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
        const int64_t p = start + n - 1; /* id's position */
        if (p >= e->n_ctx) {
            *finish = ENGINE_FINISH_CONTEXT;
            break;
        }
        if (in_pass && vj < vk && id == batch[vj + 1]) {
            /* id's KV entry and the logits after it are already computed. */
            vj++;
            e->draft_stats.accepted++;
            cur = e->draft_logits + (size_t)vj * V;
            continue;
        }
        if (in_pass) {
            draft_adapt(e, vj, vk);
            in_pass = false;
        }
        /* Positions below p hold the sequence; the rest of the last pass is dropped. */
        e->n_past = p;
        e->history[p] = id;
        int64_t lim = e->draft_len;
        if (lim > e->n_ctx - 1 - p)
            lim = e->n_ctx - 1 - p;
        if (max_tokens >= 0 && lim > max_tokens - n - 1)
            lim = max_tokens - n - 1;
        int64_t k = lim > 0 ? engine_draft_propose(e->history, p + 1, DRAFT_NGRAM_MAX,
                                                   DRAFT_NGRAM_MIN, batch + 1, lim)
                            : 0;
        enum kn_status st;
        e->draft_stats.steps++;
        if (k == 0) {
            st = engine_eval(e, &id, 1, err);
            cur = e->logits;
        } else {
            batch[0] = id;
            st = engine_eval_all(e, batch, k + 1, e->draft_logits, err);
            cur = e->draft_logits;
            in_pass = true;
            base = p;
            vk = k;
            vj = 0;
            e->draft_stats.proposed += k;
            e->draft_stats.passes++;
        }
        if (st != KN_OK)
            return st;
    }
    /* Leave the state plain decoding leaves: every position up to the last sampled
     * token's evaluated, that token not, e->logits its logits (copied above). */
    if (in_pass)
        e->n_past = base + vj + 1;
    e->have_logits = true;
    engine_text_end(e);
    return KN_OK;
}
