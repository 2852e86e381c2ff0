/* slots.c: the one generation step, over one sequence or many (see engine.h).
 *
 * Each step:
 *   1. store ended slots' sequences in the prompt cache, enter newly begun slots (keep
 *      what the slot holds of the prompt, restore more from the cache);
 *   2. build one batch: every generating slot's next token and its RAD-1 drafts
 *      (draft.c), then prompt chunks of slots still reading their prompt, requests'
 *      first, Zero Wait prefills' with what is left (a little while others work);
 *   3. one forward pass over the whole batch (struct engine_lm);
 *   4. per slot with logits: sample its rows in order, row r with token index n_out + r
 *      and the history up to it, applying the stop rule to each token; go on to row r+1
 *      only while the token equals draft r+1. Every token is sampled exactly once, in
 *      order, so stateful samplers (Mirostat, a grammar) advance as in plain decoding,
 *      and a rejected draft's KV entry is simply overwritten by the next feed.
 * A token's arithmetic depends only on its own sequence (docs/numerics.md rules 1, 2 and
 * 5), and sampling draws the random number of output index i from (seed, i) (rule 8):
 * what shares a step changes timing, never tokens. */
#include "engine.h"

#include "../grammar/grammar.h"
#include "../sample/sample.h"
#include "../text/text.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* A prefill's prompt tokens per step while other slots work: small, so the generating
 * slots' steps grow by little. */
enum { SLOTS_PREFILL_CHUNK_BUSY = 32 };

/* ---------------------------------------------------------------- set-up */

static void slot_free(struct engine_slot *sl)
{
    free(sl->history);
    free(sl->feed);
    if (sl->own)
        sample_ctx_free(sl->own);
    free(sl->own);
    if (sl->stop)
        text_stop_free(sl->stop);
    free(sl->stop);
    free(sl->text);
}

void engine_slots_free(struct engine_slots *es)
{
    if (es->slot)
        for (int s = 0; s < es->n_slots; s++)
            slot_free(&es->slot[s]);
    free(es->slot);
    free(es->tokens);
    free(es->pos);
    free(es->seq);
    free(es->out_rows);
    free(es->logits);
    memset(es, 0, sizeof *es);
}

enum kn_status engine_slots_init(struct engine_slots *es, const struct engine_lm *lm, int n_slots,
                                 const struct engine_slots_params *p, struct kn_err *err)
{
    memset(es, 0, sizeof *es);
    if (n_slots < 1 || n_slots > lm->n_seq || p->max_batch < n_slots || lm->n_ctx < 1 ||
        lm->n_ctx > INT32_MAX || lm->n_vocab < 1 || (lm->max_batch > 0 && p->max_batch > lm->max_batch))
        return kn_fail(err, KN_E_ARG,
                       "bad shape for the generation step (slots %d of %d, batch %lld, context %lld)",
                       n_slots, lm->n_seq, (long long)p->max_batch, (long long)lm->n_ctx);
    enum kn_status st = engine_draft_max(p->no_draft, p->draft_max, p->max_batch, &es->dmax, err);
    if (st != KN_OK)
        return st;
    es->lm = lm;
    es->n_slots = n_slots;
    es->max_batch = p->max_batch;
    es->warm = !p->no_warm_start;
    size_t ns = (size_t)n_slots, nb = (size_t)p->max_batch, nv = (size_t)lm->n_vocab;
    size_t D = (size_t)es->dmax + 1, logits_n;
    es->out_cap = (int64_t)(ns * D < nb ? ns * D : nb);
    if (!kn_mul_size((size_t)es->out_cap, nv, &logits_n) ||
        !kn_mul_size(logits_n, sizeof(float), &logits_n))
        return kn_fail(err, KN_E_LIMIT, "the step's logits buffer is too large");
    es->slot = kn_calloc(ns, sizeof *es->slot, err);
    es->tokens = kn_malloc(nb * sizeof *es->tokens, err);
    es->pos = kn_malloc(nb * sizeof *es->pos, err);
    es->seq = kn_malloc(nb * sizeof *es->seq, err);
    es->out_rows = kn_malloc((size_t)es->out_cap * sizeof *es->out_rows, err);
    es->logits = kn_malloc(logits_n, err);
    if (!es->slot || !es->tokens || !es->pos || !es->seq || !es->out_rows || !es->logits) {
        engine_slots_free(es);
        return KN_E_NOMEM;
    }
    for (int s = 0; s < n_slots; s++) {
        struct engine_slot *sl = &es->slot[s];
        sl->stop_matched = -1;
        sl->row0 = -1;
        /* +1: the token sampled when the context is full is recorded before stopping */
        sl->history = kn_malloc(((size_t)lm->n_ctx + 1) * sizeof *sl->history, err);
        sl->feed = kn_malloc(D * sizeof *sl->feed, err);
        if (!sl->history || !sl->feed) {
            engine_slots_free(es);
            return KN_E_NOMEM;
        }
    }
    return KN_OK;
}

/* ---------------------------------------------------------------- slots */

int engine_slots_pick(const struct engine_slots *es, const int32_t *prompt, int64_t n)
{
    int best = -1;
    int64_t best_len = -1;
    for (int s = 0; s < es->n_slots; s++) {
        const struct engine_slot *sl = &es->slot[s];
        if (sl->busy)
            continue;
        int64_t l = es->warm ? engine_common_prefix(sl->history, sl->held, prompt, n) : 0;
        if (l > best_len) {
            best_len = l;
            best = s;
        }
    }
    return best;
}

int engine_slots_admit(struct engine_slots *es, const int32_t *prompt, int64_t n, bool prefill,
                       int *preempted)
{
    *preempted = -1;
    int s = engine_slots_pick(es, prompt, n);
    if (s >= 0 || prefill)
        return s;
    /* Zero Wait gives way: a running prefill ends, keeping what it evaluated (stored at
     * the next flush), and its slot takes the request. */
    for (int t = 0; t < es->n_slots; t++) {
        struct engine_slot *sl = &es->slot[t];
        if (sl->busy && sl->req.prefill) {
            engine_slot_end(es, t);
            *preempted = t;
            return engine_slots_pick(es, prompt, n);
        }
    }
    return -1;
}

enum kn_status engine_slots_check_prompt(const struct engine_slots *es, int64_t n, bool prefill,
                                         struct kn_err *err)
{
    /* A generating request needs a position for its first token's feed. */
    int64_t limit = prefill ? es->lm->n_ctx : es->lm->n_ctx - 1;
    if (n < 1)
        return kn_fail(err, KN_E_ARG, "the prompt is empty");
    if (n > limit)
        return kn_fail(err, KN_E_LIMIT, "the prompt has %lld tokens but a slot holds %lld",
                       (long long)n, (long long)es->lm->n_ctx);
    return KN_OK;
}

enum kn_status engine_slot_begin(struct engine_slots *es, int s, const struct engine_req *r,
                                 struct kn_err *err)
{
    const struct engine_lm *lm = es->lm;
    struct engine_slot *sl = &es->slot[s];
    assert(s >= 0 && s < es->n_slots && !sl->busy);
    enum kn_status st0 = r->logits ? KN_OK : engine_slots_check_prompt(es, r->n_prompt, r->prefill, err);
    if (st0 != KN_OK)
        return st0;
    if (r->n_prompt < 1 || r->n_prompt > lm->n_ctx)
        return kn_fail(err, KN_E_LIMIT, "the sequence has %lld tokens but a slot holds %lld",
                       (long long)r->n_prompt, (long long)lm->n_ctx);
    struct sample_ctx *sctx = r->sctx;
    if (!r->prefill) {
        if (!sctx) {
            if (!sl->own) {
                sl->own = kn_calloc(1, sizeof *sl->own, err);
                if (!sl->own)
                    return KN_E_NOMEM;
                enum kn_status st = sample_ctx_init(sl->own, lm->n_vocab, err);
                if (st != KN_OK) {
                    free(sl->own);
                    sl->own = NULL;
                    return st;
                }
            }
            sctx = sl->own;
            sample_ctx_set_grammar(sctx, NULL, NULL);
        }
        /* Per-request sampler state (DRY's token texts, Mirostat's mu) starts afresh, so a
         * rerun of the same request reproduces it. */
        enum kn_status st = sample_ctx_prepare(sctx, r->sp, lm->n_ctx, lm->sample_piece,
                                               lm->sample_pctx, err);
        if (st != KN_OK)
            return st;
        if (!r->sctx && r->grammar)
            sample_ctx_set_grammar(sctx, r->grammar, r->gvocab);
    }
    if (!sl->stop && !(sl->stop = kn_calloc(1, sizeof *sl->stop, err)))
        return KN_E_NOMEM;
    text_stop_free(sl->stop);
    enum kn_status st = text_stop_init(sl->stop, r->stop, r->n_stop, err);
    if (st != KN_OK)
        return st;
    /* A token's bytes with what was held back, then the released tail: sized once per
     * request, not per token. */
    size_t need = lm->max_piece + 2 * sl->stop->max_len + 8;
    if (need > sl->text_cap) {
        char *t = kn_malloc(need, err);
        if (!t)
            return KN_E_NOMEM;
        free(sl->text);
        sl->text = t;
        sl->text_cap = need;
    }
    sl->req = *r;
    sl->sctx = sctx;
    sl->busy = sl->fresh = true;
    sl->done = sl->stuck = sl->failed = false;
    sl->finish = ENGINE_FINISH_LENGTH;
    sl->stop_matched = -1;
    sl->n_fed = sl->n_out = sl->n_cached = 0;
    memset(&sl->draft, 0, sizeof sl->draft);
    sl->last_logits = NULL;
    sl->text_n = sl->tail_n = 0;
    return KN_OK;
}

void engine_slot_end(struct engine_slots *es, int s)
{
    struct engine_slot *sl = &es->slot[s];
    if (!sl->busy)
        return;
    sl->busy = false;
    if (sl->fresh) { /* never entered: the sequence is the previous request's */
        sl->fresh = false;
        return;
    }
    sl->store_pending = true;
}

int engine_slots_running(const struct engine_slots *es)
{
    int n = 0;
    for (int s = 0; s < es->n_slots; s++)
        n += es->slot[s].busy && !es->slot[s].done;
    return n;
}

/* ---------------------------------------------------------------- Warm Start */

/* Makes slot s ready for its request: keeps what the sequence holds of the prompt,
 * restores more from the shared cache, and leaves the rest to be fed. A generating
 * request's last prompt token is always fed, for its logits. */
static void slot_enter(struct engine_slots *es, int s)
{
    const struct engine_lm *lm = es->lm;
    struct engine_slot *sl = &es->slot[s];
    const struct engine_req *r = &sl->req;
    int64_t n = r->n_prompt;
    sl->fresh = false;
    sl->draft_len = engine_draft_start(es->dmax);
    if (r->logits) { /* evaluated by the caller */
        memcpy(sl->history, r->prompt, (size_t)n * sizeof *r->prompt);
        sl->held = sl->n_fed = n;
        return;
    }
    int64_t max_n = r->prefill ? n : n - 1;
    int64_t keep = es->warm ? engine_common_prefix(sl->history, sl->held, r->prompt, max_n) : 0;
    if (keep == 0 && lm->seq_reset)
        lm->seq_reset(lm->ctx, s);
    int64_t len = keep;
    if (es->warm && lm->cache_restore && max_n > keep)
        len = lm->cache_restore(lm->ctx, s, r->prompt, keep, max_n);
    memcpy(sl->history, r->prompt, (size_t)n * sizeof *r->prompt);
    sl->held = sl->n_fed = sl->n_cached = len;
    es->stats.slot_reuse_tokens += (uint64_t)keep;
    es->stats.cache_restored_tokens += (uint64_t)(len - keep);
    es->stats.prompt_tokens_reused += (uint64_t)len;
}

void engine_slots_flush(struct engine_slots *es)
{
    const struct engine_lm *lm = es->lm;
    for (int s = 0; s < es->n_slots; s++) {
        struct engine_slot *sl = &es->slot[s];
        if (!sl->store_pending)
            continue;
        sl->store_pending = false;
        if (!es->warm || !lm->cache_store || sl->held <= 0)
            continue;
        struct kn_err err = {0};
        if (lm->cache_store(lm->ctx, s, sl->history, sl->held, &err) != KN_OK)
            kn_log(KN_LOG_WARN, "prompt cache: %s", err.msg);
    }
}

/* ---------------------------------------------------------------- sampling and the stop rule */

/* Samples slot s's rows (k drafts after the first) in order and decides, token by token,
 * whether the request ends: before an end-of-generation token (or a grammar no token
 * continues), after the token whose bytes complete a stop string or that fn refuses,
 * after max_tokens tokens, or when the token just sampled could not be fed (the context
 * is full). This is the one place that rule is written. */
static void slot_sample(struct engine_slots *es, int s, const float *rows, int k, engine_tok_fn fn,
                        void *ctx)
{
    const struct engine_lm *lm = es->lm;
    struct engine_slot *sl = &es->slot[s];
    const struct engine_req *r = &sl->req;
    const size_t V = (size_t)lm->n_vocab;
    int got = 0;
    int64_t accepted = 0;
    bool end = false;
    int32_t id = -1;
    for (int row = 0; row <= k; row++) {
        const float *lg = rows + (size_t)row * V;
        int64_t idx = sl->n_out;
        int64_t hist = r->n_prompt + idx;
        id = sample_token(sl->sctx, r->sp, lg, sl->history, hist, (uint64_t)idx);
        sl->last_logits = lg;
        got = row + 1;
        sl->text_n = sl->tail_n = 0;
        if (id < 0) { /* a grammar that no token of the vocabulary continues */
            sl->stuck = !(sl->sctx->grammar && grammar_is_done(sl->sctx->grammar));
            sl->finish = ENGINE_FINISH_STOP;
            end = true;
            break;
        }
        sl->history[hist] = id;
        bool eog = lm->is_eog(lm->ctx, id) && !r->ignore_eos;
        bool last = eog;
        enum engine_finish f = ENGINE_FINISH_STOP;
        if (!eog) {
            size_t len = 0;
            const char *p = lm->piece(lm->ctx, id, &len);
            last = text_stop_feed(sl->stop, p ? p : "", p ? len : 0, sl->text, &sl->text_n);
            sl->n_out++;
            if (!last && r->max_tokens >= 0 && sl->n_out >= r->max_tokens) {
                last = true;
                f = ENGINE_FINISH_LENGTH;
            } else if (!last && r->n_prompt + sl->n_out > lm->n_ctx) {
                last = true;
                f = ENGINE_FINISH_CONTEXT;
            }
        }
        if (last) /* no stop string matched: the held-back tail is text after all */
            text_stop_flush(sl->stop, sl->text + sl->text_n, &sl->tail_n);
        struct engine_tok t = {s, id, idx, lg, eog, last, sl->text, sl->text_n,
                               sl->text + sl->text_n, sl->tail_n};
        if (fn && !fn(ctx, &t)) {
            if (!last)
                text_stop_flush(sl->stop, sl->text + sl->text_n, &sl->tail_n);
            last = true;
            f = ENGINE_FINISH_STOP;
        }
        if (last) {
            sl->finish = f;
            end = true;
            break;
        }
        if (row == k || id != sl->feed[row + 1])
            break;
        accepted++;
    }
    sl->stop_matched = sl->stop->matched;
    sl->req.logits = NULL;
    if (sl->decoding)
        sl->held += got; /* the fed token and the accepted drafts */
    if (k > 0) {
        sl->draft.accepted += accepted;
        es->stats.draft_accepted += (uint64_t)accepted;
        if (!end)
            sl->draft_len = engine_draft_adapt(sl->draft_len, es->dmax, accepted, k, &sl->draft);
    }
    if (end)
        sl->done = true;
    else
        sl->next_token = id;
}

/* ---------------------------------------------------------------- one step */

static bool running(const struct engine_slot *sl)
{
    return sl->busy && !sl->done;
}

static bool generating(const struct engine_slot *sl)
{
    return running(sl) && !sl->req.prefill && sl->n_fed == sl->req.n_prompt && !sl->req.logits;
}

enum kn_status engine_slots_step(struct engine_slots *es, engine_tok_fn fn, void *ctx,
                                 struct kn_err *err)
{
    const struct engine_lm *lm = es->lm;
    engine_slots_flush(es); /* before a new request overwrites a slot's history */
    int n_gen = 0, n_real = 0;
    for (int s = 0; s < es->n_slots; s++) {
        struct engine_slot *sl = &es->slot[s];
        sl->row0 = -1;
        sl->n_draft = 0;
        sl->decoding = false;
        if (!running(sl))
            continue;
        if (sl->fresh)
            slot_enter(es, s);
        n_real += !sl->req.prefill;
        n_gen += generating(sl);
    }

    /* Decode rows first: every generating slot's next token and its drafts. */
    int64_t n = 0, n_out = 0, n_prompt_tok = 0, room = es->max_batch - n_gen;
    for (int s = 0; s < es->n_slots; s++) {
        struct engine_slot *sl = &es->slot[s];
        if (!generating(sl))
            continue;
        int64_t p = sl->req.n_prompt + sl->n_out - 1; /* next_token's position */
        sl->feed[0] = sl->next_token;
        int64_t k = es->dmax ? engine_draft_next(sl->history, p, sl->draft_len, room, lm->n_ctx,
                                                 sl->n_out, sl->req.max_tokens, sl->feed + 1)
                             : 0;
        room -= k;
        sl->n_draft = (int)k;
        sl->draft.steps++;
        sl->draft.proposed += k;
        sl->draft.passes += k > 0;
        es->stats.draft_proposed += (uint64_t)k;
        es->stats.draft_passes += k > 0;
        sl->row0 = n_out;
        for (int64_t r = 0; r <= k; r++) {
            es->tokens[n] = sl->feed[r];
            es->pos[n] = (int32_t)(p + r);
            es->seq[n] = s;
            es->out_rows[n_out++] = n;
            n++;
        }
        sl->held = p; /* until the rows are verified */
        sl->decoding = true;
    }
    /* Then prompt chunks: requests' first, prefills' with what is left (a little while
     * others work). */
    for (int pass = 0; pass < 2; pass++) {
        for (int s = 0; s < es->n_slots && n < es->max_batch; s++) {
            struct engine_slot *sl = &es->slot[s];
            if (!running(sl) || sl->req.prefill != (pass == 1) || sl->n_fed == sl->req.n_prompt)
                continue;
            int64_t chunk = sl->req.n_prompt - sl->n_fed;
            if (chunk > es->max_batch - n)
                chunk = es->max_batch - n;
            if (sl->req.prefill && n_real > 0 && chunk > SLOTS_PREFILL_CHUNK_BUSY)
                chunk = SLOTS_PREFILL_CHUNK_BUSY;
            for (int64_t i = 0; i < chunk; i++) {
                es->tokens[n] = sl->history[sl->n_fed + i];
                es->pos[n] = (int32_t)(sl->n_fed + i);
                es->seq[n] = s;
                n++;
            }
            sl->n_fed += chunk;
            sl->held = sl->n_fed;
            n_prompt_tok += chunk;
            if (!sl->req.prefill && sl->n_fed == sl->req.n_prompt) {
                sl->row0 = n_out;
                es->out_rows[n_out++] = n - 1;
            }
        }
    }
    assert(n_out <= es->out_cap);
    es->stats.tokens_prompt += (uint64_t)n_prompt_tok;

    if (n > 0) {
        struct engine_batch b = {n, es->tokens, es->pos, es->seq, es->out_rows, n_out};
        enum kn_status st = lm->forward(lm->ctx, &b, es->logits, err);
        if (st != KN_OK) {
            for (int s = 0; s < es->n_slots; s++) {
                struct engine_slot *sl = &es->slot[s];
                if (!running(sl))
                    continue;
                sl->held = 0; /* the sequence is in an unknown state */
                sl->done = sl->failed = true;
                sl->finish = ENGINE_FINISH_STOP;
            }
            return st;
        }
        es->stats.steps++;
    }

    const size_t V = (size_t)lm->n_vocab;
    for (int s = 0; s < es->n_slots; s++) {
        struct engine_slot *sl = &es->slot[s];
        if (!running(sl))
            continue;
        if (sl->req.prefill) {
            if (sl->n_fed == sl->req.n_prompt) {
                sl->done = true;
                sl->finish = ENGINE_FINISH_STOP;
            }
        } else if (sl->req.logits) {
            slot_sample(es, s, sl->req.logits, 0, fn, ctx);
        } else if (sl->row0 >= 0) {
            slot_sample(es, s, es->logits + (size_t)sl->row0 * V, sl->n_draft, fn, ctx);
        }
    }
    return KN_OK;
}
