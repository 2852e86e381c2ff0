/* convoy.c: Convoy, the continuous-batching scheduler.
 *
 * One thread owns the slots. Each step:
 *   1. under the lock: drop cancelled jobs, move queued jobs into free slots;
 *   2. build one batch: every generating slot's next token (decode), then prompt chunks of
 *      slots still reading their prompt, up to the backend's max_batch tokens;
 *   3. one backend forward over the whole batch;
 *   4. per slot with logits: log-probabilities (if asked) and the sampled token, both pure
 *      functions of the slot's own logits, settings, history and token index;
 *   5. under the lock: append results, apply stop rules, wake the waiting connections.
 * Why a job's output cannot depend on its companions: each token's arithmetic in the
 * forward pass depends only on its own sequence (docs/numerics.md rules 1, 2 and 5), and
 * sampling draws the random number of output index i from (seed, i) (rule 8). So joining,
 * leaving, chunking and slot numbers change only timing.
 *
 * The speed features (docs/speed.md), each in its own section below:
 *   RAD-1    a generating slot feeds its next token plus up to k draft tokens proposed
 *            from its own prompt and output (engine_draft_propose); every row gets
 *            logits; row j is sampled with token index i + j, strictly in order, and the
 *            next row is used only while the sample equals the draft, so the tokens and
 *            the sampler's state are plain decoding's. Rejected positions are simply
 *            overwritten by the next feed.
 *   Warm Start  a job entering a slot keeps the prefix the slot already holds and
 *            restores more from the backend's shared prompt cache; a finished job's
 *            sequence is stored there. A KV entry's bits do not depend on how it was made.
 *   Zero Wait   prefill jobs evaluate a prompt into the cache: they use only slots no
 *            waiting request needs, feed small chunks while others generate, and give
 *            their slot up to a waiting request. */
#include "server.h"
#include "grammar/grammar.h"
#include "engine/engine.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A FIFO of waiting jobs linked through srv_job.next; cap bounds len (checked by the
 * submitters, whose rules differ). */
struct jobq {
    struct srv_job *head, *tail;
    int len, cap;
};

static void jobq_push(struct jobq *q, struct srv_job *j)
{
    j->next = NULL;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    q->len++;
}

/* Unlinks j (which need not be in q); returns whether it was. */
static bool jobq_remove(struct jobq *q, struct srv_job *j)
{
    struct srv_job **pp = &q->head, *prev = NULL;
    while (*pp && *pp != j) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp)
        return false;
    *pp = j->next;
    if (q->tail == j)
        q->tail = prev;
    q->len--;
    j->next = NULL;
    return true;
}

struct convoy {
    struct srv_backend *b;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;       /* the scheduler waits here for jobs */
    pthread_t thread;
    bool thread_started, stopping;

    struct jobq q;                /* requests waiting for a slot */

    int n_slots;
    struct srv_job **slots;       /* (n_slots) running job or NULL */
    bool *fresh;                  /* (n_slots) slot needs a reset before its first batch */
    int32_t **history;            /* (n_slots, n_ctx) prompt then generated tokens */
    struct sample_ctx *samplers;  /* (n_slots) */

    /* batch scratch, sized once */
    int32_t *tokens, *pos, *slot_of;
    int64_t *out_rows;
    int *out_slot;
    float *logits;                /* (out_cap, n_vocab) */
    float *lp;                    /* (n_vocab) */
    int64_t out_cap;              /* most output rows of one step */

    /* speed features */
    struct convoy_speed speed;
    int dmax;                     /* most drafts per slot and step; 0: RAD-1 off */
    int32_t *draft_len;           /* (n_slots) adaptive draft length */
    int32_t *feed;                /* (n_slots, dmax + 1) this step's [token, d1..dk] */
    int *n_draft;                 /* (n_slots) k of this step */
    int64_t *row0;                /* (n_slots) the slot's first output row; -1: none */
    int64_t *held;                /* (n_slots) leading KV positions holding history[s] */
    bool *store_pending;          /* (n_slots) store the slot's sequence in the cache */
    enum srv_finish *finishing;   /* (n_slots) finish decided this step */
    int *n_samp;                  /* (n_slots) tokens sampled this step */
    int32_t *samp_id;             /* (n_slots, dmax + 1) */
    float *samp_lp;               /* (n_slots, dmax + 1) */
    int32_t *samp_top_id;         /* (n_slots, dmax + 1, SRV_MAX_TOP_LOGPROBS) */
    float *samp_top_lp;
    struct jobq pq;               /* Zero Wait jobs waiting for a free slot */

    struct convoy_stats stats;
};

/* As draft.c: look up suffixes of 4 down to 2 tokens; start at 4 drafts. */
enum { CONVOY_NGRAM_MAX = 4, CONVOY_NGRAM_MIN = 2, CONVOY_DRAFT_DEFAULT = 16,
       CONVOY_DRAFT_START = 4,
       /* a prefill's prompt tokens per step while other slots work: small, so the
        * generating slots' steps grow by little */
       CONVOY_PREFILL_CHUNK_BUSY = 32 };

const char *srv_finish_str(enum srv_finish f)
{
    switch (f) {
    case SRV_FINISH_STOP: return "stop";
    case SRV_FINISH_LENGTH: return "length";
    case SRV_FINISH_CANCELLED: return "cancelled";
    case SRV_FINISH_ERROR: return "error";
    default: return "none";
    }
}

/* ---------------------------------------------------------------- jobs */

enum kn_status srv_job_new(struct srv_job **out, const int32_t *prompt, size_t n_prompt,
                           struct kn_err *err)
{
    *out = NULL;
    struct srv_job *j = kn_calloc(1, sizeof *j, err);
    if (!j)
        return KN_E_NOMEM;
    j->prompt = kn_malloc(n_prompt ? n_prompt * sizeof *prompt : 1, err);
    if (!j->prompt) {
        free(j);
        return KN_E_NOMEM;
    }
    if (n_prompt)
        memcpy(j->prompt, prompt, n_prompt * sizeof *prompt);
    j->n_prompt = n_prompt;
    j->max_tokens = 16;
    sample_params_default(&j->sampling);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->refs = 1;
    j->slot = -1;
    *out = j;
    return KN_OK;
}

enum kn_status srv_job_alloc_results(struct srv_job *j, size_t max_piece, struct kn_err *err)
{
    size_t n = (size_t)j->max_tokens, text = 0, tops = 0;
    assert(j->max_tokens >= 1 && j->n_top >= 0 && j->n_top <= SRV_MAX_TOP_LOGPROBS);
    if (!kn_mul_size(n, max_piece, &text) || !kn_add_size(text, 8, &text) ||
        !kn_mul_size(n, (size_t)j->n_top, &tops))
        return kn_fail(err, KN_E_LIMIT, "max_tokens %lld is too large", (long long)n);
    j->out_ids = kn_malloc(n * sizeof *j->out_ids, err);
    j->out_lp = kn_malloc(n * sizeof *j->out_lp, err);
    j->text_end = kn_malloc(n * sizeof *j->text_end, err);
    j->top_ids = kn_malloc((tops ? tops : 1) * sizeof *j->top_ids, err);
    j->top_lp = kn_malloc((tops ? tops : 1) * sizeof *j->top_lp, err);
    j->text = kn_malloc(text, err);
    if (!j->out_ids || !j->out_lp || !j->text_end || !j->top_ids || !j->top_lp || !j->text)
        return KN_E_NOMEM; /* freed with the job */
    j->text_cap = text;
    j->text[0] = '\0';
    j->out_cap = j->max_tokens;
    return KN_OK;
}

static void job_free(struct srv_job *j)
{
    free(j->prompt);
    for (int i = 0; i < j->n_stop; i++)
        free(j->stop[i]);
    free(j->out_ids);
    free(j->out_lp);
    free(j->top_ids);
    free(j->top_lp);
    free(j->text_end);
    free(j->text);
    if (j->stopm)
        text_stop_free(j->stopm);
    free(j->stopm);
    grammar_state_free(j->gstate);
    grammar_free(j->grammar);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* ---------------------------------------------------------------- locking helpers */

void convoy_lock(struct convoy *c) { pthread_mutex_lock(&c->mu); }
void convoy_unlock(struct convoy *c) { pthread_mutex_unlock(&c->mu); }

static void release_locked(struct srv_job *j)
{
    assert(j->refs > 0);
    if (--j->refs == 0)
        job_free(j);
}

void convoy_release(struct convoy *c, struct srv_job *j)
{
    if (!j)
        return;
    if (!c) { /* never submitted: only the caller holds it */
        release_locked(j);
        return;
    }
    convoy_lock(c);
    release_locked(j);
    convoy_unlock(c);
}

/* Marks j done (under the lock), wakes its waiters, drops the convoy's reference. */
static void finish_locked(struct convoy *c, struct srv_job *j, enum srv_finish f)
{
    j->state = SRV_JOB_DONE;
    j->finish = f;
    j->t_done = kn_now();
    if (f == SRV_FINISH_CANCELLED)
        c->stats.jobs_cancelled++;
    else if (!j->prefill) /* prefills have their own counters */
        c->stats.jobs_done++;
    pthread_cond_broadcast(&j->cv);
    release_locked(j);
}

/* ---------------------------------------------------------------- results */

/* Appends sampled token id (and its log-probabilities) to j, under the lock; returns the
 * finish reason if the job is complete now. */
static enum srv_finish append_locked(struct convoy *c, struct srv_job *j, int32_t id, float lp,
                                     const int32_t *top_ids, const float *top_lp)
{
    struct srv_backend *b = c->b;
    int64_t k = j->n_out;
    j->out_ids[k] = id;
    j->out_lp[k] = lp;
    if (j->n_top > 0) {
        memcpy(j->top_ids + k * j->n_top, top_ids, (size_t)j->n_top * sizeof *top_ids);
        memcpy(j->top_lp + k * j->n_top, top_lp, (size_t)j->n_top * sizeof *top_lp);
    }
    if (k == 0)
        j->t_first = kn_now();
    c->stats.tokens_generated++;
    enum srv_finish f = SRV_FINISH_NONE;
    if (b->is_eog(b->ctx, id) && !j->ignore_eos) {
        f = SRV_FINISH_STOP;
    } else {
        size_t len = 0, n = 0;
        const char *p = b->piece(b->ctx, id, &len);
        size_t old = j->text_len;
        assert(len <= b->max_piece && old + len < j->text_cap);
        if (j->stopm) {
            /* engine_generate's rule, with the same matcher: the token whose bytes
             * complete a stop string is the last one; the text ends before the string. A
             * tail that may start one is held back (the text holds only what is safe to
             * show), so the bytes out never exceed the bytes in. */
            if (text_stop_feed(j->stopm, p, len, j->text + old, &n))
                f = SRV_FINISH_STOP;
        } else {
            memcpy(j->text + old, p, len);
            n = len;
        }
        j->text_len = old + n;
        j->text[j->text_len] = '\0';
    }
    j->n_out = k + 1;
    /* As engine_generate (what kinetic run and verify-receipt use): stop after max_tokens,
     * or when the token just sampled could not be fed (the context is full). */
    if (f == SRV_FINISH_NONE &&
        (j->n_out >= j->max_tokens || (int64_t)j->n_prompt + j->n_out > b->n_ctx))
        f = SRV_FINISH_LENGTH;
    if (f != SRV_FINISH_NONE && j->stopm && j->stopm->matched < 0) {
        size_t n = 0; /* no stop string: the held-back tail is text after all */
        text_stop_flush(j->stopm, j->text + j->text_len, &n);
        j->text_len += n;
        j->text[j->text_len] = '\0';
    }
    j->text_end[k] = j->text_len;
    pthread_cond_broadcast(&j->cv);
    return f;
}

/* ---------------------------------------------------------------- the scheduler */

static void fail_all_active(struct convoy *c, const char *msg)
{
    convoy_lock(c);
    for (int s = 0; s < c->n_slots; s++) {
        struct srv_job *j = c->slots[s];
        if (!j)
            continue;
        snprintf(j->error, sizeof j->error, "%.200s", msg);
        finish_locked(c, j, SRV_FINISH_ERROR);
        c->slots[s] = NULL;
    }
    convoy_unlock(c);
}

/* Sets slot s's sampler up for job j, as engine_generate sets up kinetic run's: the
 * per-request state (Mirostat's mu, DRY's breaker tokens from the backend's token texts)
 * starts afresh and j's grammar (or none) is attached. False (j->error set) if it cannot. */
static bool slot_sampling_setup(struct convoy *c, int s, struct srv_job *j)
{
    struct kn_err perr = {0};
    struct sample_ctx *sc = &c->samplers[s];
    sample_ctx_set_grammar(sc, NULL, NULL);
    if (sample_ctx_prepare(sc, &j->sampling, c->b->n_ctx, c->b->sample_piece, c->b->sample_pctx,
                           &perr) != KN_OK) {
        snprintf(j->error, sizeof j->error, "sampler setup: %.200s", perr.msg);
        return false;
    }
    if (j->gstate)
        sample_ctx_set_grammar(sc, j->gstate, j->gvocab);
    if (j->n_stop > 0 && !j->stopm) {
        j->stopm = kn_calloc(1, sizeof *j->stopm, &perr);
        if (!j->stopm || text_stop_init(j->stopm, (const char *const *)j->stop, j->n_stop,
                                          &perr) != KN_OK) {
            free(j->stopm);
            j->stopm = NULL;
            snprintf(j->error, sizeof j->error, "stop strings: %.200s", perr.msg);
            return false;
        }
    }
    return true;
}

/* ---------------------------------------------------------------- Warm Start */

static int64_t common_prefix(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    int64_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

static bool warm(const struct convoy *c)
{
    return !c->speed.no_warm_start;
}

/* The free slot that already holds the longest prefix of j's prompt (lowest index on a
 * tie); -1 when none is free. */
static int pick_slot_locked(struct convoy *c, const struct srv_job *j)
{
    int best = -1;
    int64_t best_len = -1;
    for (int s = 0; s < c->n_slots; s++) {
        if (c->slots[s])
            continue;
        int64_t l = warm(c) ? common_prefix(c->history[s], c->held[s], j->prompt,
                                            (int64_t)j->n_prompt)
                            : 0;
        if (l > best_len) {
            best_len = l;
            best = s;
        }
    }
    return best;
}

/* Makes slot s ready for job j (scheduler thread, unlocked): keeps what the slot holds
 * of j's prompt, restores more from the shared cache, and leaves the rest to be fed.
 * A generating job's last prompt token is always fed, for its logits. */
static void slot_enter(struct convoy *c, int s, struct srv_job *j, uint64_t *slot_reused,
                       uint64_t *cache_restored)
{
    struct srv_backend *b = c->b;
    int64_t n = (int64_t)j->n_prompt;
    int64_t max_n = j->prefill ? n : n - 1;
    int64_t keep = warm(c) ? common_prefix(c->history[s], c->held[s], j->prompt, max_n) : 0;
    if (keep == 0)
        b->slot_reset(b->ctx, s);
    int64_t len = keep;
    if (warm(c) && b->cache_restore && max_n > keep)
        len = b->cache_restore(b->ctx, s, j->prompt, keep, max_n);
    memcpy(c->history[s], j->prompt, (size_t)n * sizeof *j->prompt);
    c->held[s] = len;
    j->n_fed = len;
    j->n_cached = len;
    *slot_reused += (uint64_t)keep;
    *cache_restored += (uint64_t)(len - keep);
    c->draft_len[s] = CONVOY_DRAFT_START < c->dmax ? CONVOY_DRAFT_START : c->dmax;
}

/* Stores the sequences of slots whose jobs ended (scheduler thread, unlocked). */
static void flush_stores(struct convoy *c)
{
    struct srv_backend *b = c->b;
    for (int s = 0; s < c->n_slots; s++) {
        if (!c->store_pending[s])
            continue;
        c->store_pending[s] = false;
        if (!warm(c) || !b->cache_store || c->held[s] <= 0)
            continue;
        struct kn_err err = {0};
        if (b->cache_store(b->ctx, s, c->history[s], c->held[s], &err) != KN_OK)
            kn_log(KN_LOG_WARN, "serve: prompt cache: %s", err.msg);
    }
}

/* ---------------------------------------------------------------- Zero Wait */

/* Moves waiting jobs into free slots: requests first; prefill jobs only when no request
 * waits; a request that finds no free slot takes one from a prefill job (which ends,
 * its evaluated prefix stored). Under the lock. */
static void admit_locked(struct convoy *c)
{
    for (;;) {
        struct srv_job *j = c->q.head;
        bool prefill = false;
        if (!j) {
            j = c->pq.head;
            prefill = true;
        }
        if (!j)
            return;
        int s = pick_slot_locked(c, j);
        for (int t = 0; s < 0 && !prefill && t < c->n_slots; t++) {
            struct srv_job *pj = c->slots[t];
            if (pj && pj->prefill) {
                pj->preempted = true;
                c->held[t] = pj->n_fed;
                c->store_pending[t] = true;
                c->stats.prefills_preempted++;
                c->stats.prefill_tokens += (uint64_t)pj->n_fed;
                finish_locked(c, pj, SRV_FINISH_STOP);
                c->slots[t] = NULL;
                s = pick_slot_locked(c, j);
            }
        }
        if (s < 0)
            return;
        jobq_remove(prefill ? &c->pq : &c->q, j); /* the head: no walk */
        if (j->cancel) { /* left before it started */
            finish_locked(c, j, SRV_FINISH_CANCELLED);
            continue;
        }
        j->state = SRV_JOB_RUNNING;
        j->slot = s;
        j->t_start = kn_now();
        if (!j->prefill && !slot_sampling_setup(c, s, j)) {
            finish_locked(c, j, SRV_FINISH_ERROR);
            continue;
        }
        c->slots[s] = j;
        c->fresh[s] = true;
    }
}

/* ---------------------------------------------------------------- RAD-1 */

/* Proposes the drafts of generating slot s, whose next token goes to position p: at
 * most room tokens, fewer near max_tokens or the context's end. Writes
 * c->feed[s] = [token, d1..dk]; returns k. */
static int propose_drafts(struct convoy *c, int s, const struct srv_job *j, int64_t p,
                          int64_t room)
{
    int32_t *feed = c->feed + (size_t)s * (size_t)(c->dmax + 1);
    feed[0] = j->next_token;
    if (c->dmax == 0)
        return 0;
    int64_t lim = c->draft_len[s];
    if (lim > c->b->n_ctx - 1 - p)
        lim = c->b->n_ctx - 1 - p;
    if (lim > j->max_tokens - j->n_out - 1) /* row k samples token n_out + k */
        lim = j->max_tokens - j->n_out - 1;
    if (lim > room)
        lim = room;
    if (lim <= 0)
        return 0;
    return (int)engine_draft_propose(c->history[s], p + 1, CONVOY_NGRAM_MAX, CONVOY_NGRAM_MIN,
                                     feed + 1, lim);
}

/* As draft.c: double the length after a pass that accepted every draft, else one more
 * than were accepted; within 1..dmax. */
static void draft_adapt(struct convoy *c, int s, int accepted, int proposed)
{
    int64_t len = accepted == proposed ? (int64_t)c->draft_len[s] * 2 : accepted + 1;
    if (len > c->dmax)
        len = c->dmax;
    if (len < 1)
        len = 1;
    c->draft_len[s] = (int32_t)len;
}

/* Samples slot s's output rows row0.. in order (scheduler thread, unlocked): row r with
 * token index n_out + r and the history up to it; goes on to row r + 1 only while the
 * token equals draft r + 1 (and is not an end of generation that stops the job). Every
 * token is sampled exactly once, in order, so stateful samplers advance as in plain
 * decoding. Returns how many tokens were sampled (1 + accepted drafts). */
static int sample_rows(struct convoy *c, int s, struct srv_job *j, int64_t row0, int k)
{
    struct srv_backend *b = c->b;
    const size_t D = (size_t)c->dmax + 1;
    const int32_t *feed = c->feed + (size_t)s * D;
    int n = 0;
    for (int r = 0; r <= k; r++) {
        const float *lg = c->logits + (row0 + r) * (int64_t)b->n_vocab;
        int64_t idx = j->n_out + r;
        int64_t hist = (int64_t)j->n_prompt + idx;
        int32_t id = sample_token(&c->samplers[s], &j->sampling, lg, c->history[s], hist,
                                  (uint64_t)idx);
        size_t at = (size_t)s * D + (size_t)r;
        c->samp_id[at] = id;
        c->samp_lp[at] = 0.0f;
        if (id < 0) { /* a grammar no token can continue: the job ends here */
            n = r + 1;
            break;
        }
        if (j->want_logprobs || j->n_top > 0) {
            srv_logprobs(lg, b->n_vocab, c->lp, j->n_top,
                         c->samp_top_id + at * SRV_MAX_TOP_LOGPROBS,
                         c->samp_top_lp + at * SRV_MAX_TOP_LOGPROBS);
            c->samp_lp[at] = id >= 0 ? c->lp[id] : 0.0f;
        }
        c->history[s][hist] = id;
        n = r + 1;
        if (r == k || id != feed[r + 1] || (b->is_eog(b->ctx, id) && !j->ignore_eos))
            break;
    }
    return n;
}

/* ---------------------------------------------------------------- one step */

/* Runs one step; returns false when the convoy is stopping. */
static bool step(struct convoy *c)
{
    struct srv_backend *b = c->b;

    convoy_lock(c);
    for (;;) {
        if (c->stopping) {
            convoy_unlock(c);
            return false;
        }
        for (int s = 0; s < c->n_slots; s++) {
            struct srv_job *j = c->slots[s];
            if (j && j->cancel) {
                c->store_pending[s] = true;
                finish_locked(c, j, SRV_FINISH_CANCELLED);
                c->slots[s] = NULL;
            }
        }
        admit_locked(c);
        int busy = 0;
        for (int s = 0; s < c->n_slots; s++)
            busy += c->slots[s] != NULL;
        c->stats.slots_busy = busy;
        c->stats.queued = c->q.len;
        c->stats.prefill_queued = c->pq.len;
        if (busy)
            break;
        convoy_unlock(c);
        flush_stores(c); /* cancelled jobs' sequences, before waiting */
        convoy_lock(c);
        if (!c->stopping && !c->q.head && !c->pq.head)
            pthread_cond_wait(&c->work_cv, &c->mu);
    }
    /* Snapshot the slot table: only this thread changes it, so it stays valid unlocked;
     * the scheduler-private job fields (n_fed, next_token) are touched only here. */
    struct srv_job *active[c->n_slots];
    memcpy(active, c->slots, (size_t)c->n_slots * sizeof *active);
    convoy_unlock(c);

    double t0 = kn_now();
    flush_stores(c); /* before a new job overwrites the slot's history */
    uint64_t slot_reused = 0, cache_restored = 0, prompt_reused = 0;
    int n_gen = 0, n_real = 0;
    for (int s = 0; s < c->n_slots; s++) {
        struct srv_job *j = active[s];
        c->row0[s] = -1;
        c->n_draft[s] = 0;
        c->n_samp[s] = 0;
        c->finishing[s] = SRV_FINISH_NONE;
        if (!j)
            continue;
        if (c->fresh[s]) {
            slot_enter(c, s, j, &slot_reused, &cache_restored);
            prompt_reused += (uint64_t)j->n_cached;
            c->fresh[s] = false;
        }
        n_real += !j->prefill;
        n_gen += !j->prefill && j->n_fed == (int64_t)j->n_prompt;
    }

    /* Decode rows first: every generating slot's next token and its drafts. */
    int64_t n = 0, n_out = 0, n_prompt_tok = 0, room = b->max_batch - n_gen;
    uint64_t proposed = 0, passes = 0;
    for (int s = 0; s < c->n_slots; s++) {
        struct srv_job *j = active[s];
        if (!j || j->prefill || j->n_fed != (int64_t)j->n_prompt)
            continue;
        int64_t p = (int64_t)j->n_prompt + j->n_out - 1;
        int k = propose_drafts(c, s, j, p, room);
        room -= k;
        c->n_draft[s] = k;
        proposed += (uint64_t)k;
        passes += k > 0;
        const int32_t *feed = c->feed + (size_t)s * (size_t)(c->dmax + 1);
        c->row0[s] = n_out;
        for (int r = 0; r <= k; r++) {
            c->tokens[n] = feed[r];
            c->pos[n] = (int32_t)(p + r);
            c->slot_of[n] = s;
            c->out_rows[n_out] = n;
            c->out_slot[n_out++] = s;
            n++;
        }
        c->held[s] = p; /* until the rows are verified */
    }
    /* Then prompt chunks: requests' first, prefill jobs' with what is left (a little
     * while others work). */
    for (int pass = 0; pass < 2; pass++) {
        for (int s = 0; s < c->n_slots && n < b->max_batch; s++) {
            struct srv_job *j = active[s];
            if (!j || j->prefill != (pass == 1) || j->n_fed == (int64_t)j->n_prompt)
                continue;
            int64_t chunk = (int64_t)j->n_prompt - j->n_fed;
            if (chunk > b->max_batch - n)
                chunk = b->max_batch - n;
            if (j->prefill && n_real > 0 && chunk > CONVOY_PREFILL_CHUNK_BUSY)
                chunk = CONVOY_PREFILL_CHUNK_BUSY;
            for (int64_t i = 0; i < chunk; i++) {
                c->tokens[n] = j->prompt[j->n_fed + i];
                c->pos[n] = (int32_t)(j->n_fed + i);
                c->slot_of[n] = s;
                n++;
            }
            j->n_fed += chunk;
            c->held[s] = j->n_fed;
            n_prompt_tok += chunk;
            if (!j->prefill && j->n_fed == (int64_t)j->n_prompt) {
                c->row0[s] = n_out;
                c->out_rows[n_out] = n - 1;
                c->out_slot[n_out++] = s;
            }
        }
    }
    assert(n_out <= c->out_cap);

    if (n > 0) {
        struct srv_batch batch = {n, c->tokens, c->pos, c->slot_of, c->out_rows, n_out};
        struct kn_err err = {0};
        if (b->forward(b->ctx, &batch, c->logits, &err) != KN_OK) {
            kn_log(KN_LOG_ERROR, "serve: forward pass failed: %s", err.msg);
            for (int s = 0; s < c->n_slots; s++)
                if (active[s])
                    c->held[s] = 0; /* the slot's cache is in an unknown state */
            fail_all_active(c, err.msg);
            return true;
        }
    }

    /* Sample outside the lock: only this thread writes a running job's token arrays. */
    uint64_t accepted = 0;
    for (int s = 0; s < c->n_slots; s++) {
        struct srv_job *j = active[s];
        if (!j || c->row0[s] < 0)
            continue;
        int k = c->n_draft[s];
        int got = sample_rows(c, s, j, c->row0[s], k);
        c->n_samp[s] = got;
        if (j->n_out > 0)
            c->held[s] += got; /* the fed token and the accepted drafts */
        if (k > 0) {
            accepted += (uint64_t)(got - 1);
            j->draft_n += k;
            j->draft_n_accepted += got - 1;
            draft_adapt(c, s, got - 1, k);
        }
        j->next_token = c->samp_id[(size_t)s * (size_t)(c->dmax + 1) + (size_t)(got - 1)];
    }

    convoy_lock(c);
    c->stats.steps += n > 0;
    c->stats.tokens_prompt += (uint64_t)n_prompt_tok;
    c->stats.draft_proposed += proposed;
    c->stats.draft_accepted += accepted;
    c->stats.draft_passes += passes;
    c->stats.slot_reuse_tokens += slot_reused;
    c->stats.cache_restored_tokens += cache_restored;
    c->stats.prompt_tokens_reused += prompt_reused;
    bool any_finish = false;
    const size_t D = (size_t)c->dmax + 1;
    for (int s = 0; s < c->n_slots; s++) {
        struct srv_job *j = active[s];
        if (!j)
            continue;
        if (j->prefill) {
            if (j->n_fed == (int64_t)j->n_prompt)
                c->finishing[s] = SRV_FINISH_STOP;
        } else {
            for (int r = 0; r < c->n_samp[s]; r++) {
                size_t at = (size_t)s * D + (size_t)r;
                if (c->samp_id[at] < 0 && j->gstate && grammar_is_done(j->gstate)) {
                    /* ignore_eos went past the grammar's end-of-generation token */
                    c->finishing[s] = SRV_FINISH_STOP;
                    break;
                }
                if (c->samp_id[at] < 0) { /* a grammar no token of the vocabulary continues */
                    snprintf(j->error, sizeof j->error,
                             "the grammar cannot be continued: after %lld generated tokens no "
                             "token of the vocabulary continues the text and it is not "
                             "complete; the grammar needs characters this model cannot write",
                             (long long)j->n_out);
                    j->error_is_request = true;
                    c->finishing[s] = SRV_FINISH_ERROR;
                    break;
                }
                enum srv_finish f = append_locked(c, j, c->samp_id[at], c->samp_lp[at],
                                                  c->samp_top_id + at * SRV_MAX_TOP_LOGPROBS,
                                                  c->samp_top_lp + at * SRV_MAX_TOP_LOGPROBS);
                if (f != SRV_FINISH_NONE) {
                    c->finishing[s] = f;
                    break;
                }
            }
        }
        any_finish |= c->finishing[s] != SRV_FINISH_NONE;
    }
    c->stats.busy_seconds += kn_now() - t0;
    convoy_unlock(c);
    if (!any_finish)
        return true;

    /* Answer finished requests, then store their sequences: only this thread admits
     * jobs, so the slot keeps its history until the store, and the client's next
     * request (admitted at a later step) finds them. A prefill answers only once
     * stored: its answer means "in the cache". */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            for (int s = 0; s < c->n_slots; s++)
                c->store_pending[s] |= c->finishing[s] != SRV_FINISH_NONE;
            flush_stores(c);
        }
        convoy_lock(c);
        for (int s = 0; s < c->n_slots; s++) {
            struct srv_job *j = active[s];
            /* A job answered in pass 0 left its slot and may be freed already. */
            if (!j || c->slots[s] != j || c->finishing[s] == SRV_FINISH_NONE ||
                j->prefill != (pass == 1))
                continue;
            if (j->prefill) {
                c->stats.prefills_done++;
                c->stats.prefill_tokens += (uint64_t)j->n_fed;
            }
            finish_locked(c, j, c->finishing[s]);
            c->slots[s] = NULL;
        }
        convoy_unlock(c);
    }
    return true;
}

static void *convoy_main(void *arg)
{
    struct convoy *c = arg;
    while (step(c)) {
    }
    return NULL;
}

/* ---------------------------------------------------------------- public API */

void convoy_free(struct convoy *c)
{
    if (!c)
        return;
    for (int s = 0; s < c->n_slots; s++) {
        if (c->history)
            free(c->history[s]);
        if (c->samplers)
            sample_ctx_free(&c->samplers[s]);
    }
    free(c->history);
    free(c->samplers);
    free(c->slots);
    free(c->fresh);
    free(c->tokens);
    free(c->pos);
    free(c->slot_of);
    free(c->out_rows);
    free(c->out_slot);
    free(c->logits);
    free(c->lp);
    free(c->draft_len);
    free(c->feed);
    free(c->n_draft);
    free(c->row0);
    free(c->held);
    free(c->store_pending);
    free(c->finishing);
    free(c->n_samp);
    free(c->samp_id);
    free(c->samp_lp);
    free(c->samp_top_id);
    free(c->samp_top_lp);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->work_cv);
    free(c);
}

enum kn_status convoy_start(struct convoy **out, struct srv_backend *b, int queue_cap,
                            struct kn_err *err)
{
    return convoy_start_speed(out, b, queue_cap, NULL, err);
}

enum kn_status convoy_start_speed(struct convoy **out, struct srv_backend *b, int queue_cap,
                                  const struct convoy_speed *speed, struct kn_err *err)
{
    *out = NULL;
    struct convoy_speed sp = {0};
    if (speed)
        sp = *speed;
    if (sp.draft_max < 0 || sp.draft_max > 256 || sp.prefill_queue < 0)
        return kn_fail(err, KN_E_ARG, "serve: --draft-max must be in 0..256");
    if (b->n_slots < 1 || b->max_batch < b->n_slots || b->n_ctx < 2 || b->n_vocab < 1)
        return kn_fail(err, KN_E_ARG,
                       "serve: bad backend shape (slots %d, batch %lld, context %lld)",
                       b->n_slots, (long long)b->max_batch, (long long)b->n_ctx);
    struct convoy *c = kn_calloc(1, sizeof *c, err);
    if (!c)
        return KN_E_NOMEM;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->work_cv, NULL);
    c->b = b;
    c->n_slots = b->n_slots;
    c->q.cap = queue_cap < 0 ? 0 : queue_cap;
    c->speed = sp;
    c->pq.cap = sp.prefill_queue ? sp.prefill_queue : 2 * c->n_slots;
    /* A slot's pass holds its token and its drafts, within one batch. */
    int64_t dmax = sp.no_draft ? 0 : sp.draft_max ? sp.draft_max : CONVOY_DRAFT_DEFAULT;
    if (dmax > b->max_batch - 1)
        dmax = b->max_batch - 1;
    c->dmax = (int)dmax;
    size_t ns = (size_t)c->n_slots, nb = (size_t)b->max_batch, nv = (size_t)b->n_vocab;
    size_t D = (size_t)dmax + 1;
    c->out_cap = (int64_t)(ns * D < nb ? ns * D : nb);
    size_t logits_n, tops_n;
    if (!kn_mul_size((size_t)c->out_cap, nv, &logits_n) ||
        !kn_mul_size(logits_n, sizeof(float), &logits_n) ||
        !kn_mul_size(ns * D, SRV_MAX_TOP_LOGPROBS, &tops_n)) {
        convoy_free(c);
        return kn_fail(err, KN_E_LIMIT, "serve: logits buffer too large");
    }
    c->slots = kn_calloc(ns, sizeof *c->slots, err);
    c->fresh = kn_calloc(ns, sizeof *c->fresh, err);
    c->history = kn_calloc(ns, sizeof *c->history, err);
    c->samplers = kn_calloc(ns, sizeof *c->samplers, err);
    c->tokens = kn_malloc(nb * sizeof *c->tokens, err);
    c->pos = kn_malloc(nb * sizeof *c->pos, err);
    c->slot_of = kn_malloc(nb * sizeof *c->slot_of, err);
    c->out_rows = kn_malloc((size_t)c->out_cap * sizeof *c->out_rows, err);
    c->out_slot = kn_malloc((size_t)c->out_cap * sizeof *c->out_slot, err);
    c->logits = kn_malloc(logits_n, err);
    c->lp = kn_malloc(nv * sizeof *c->lp, err);
    c->draft_len = kn_calloc(ns, sizeof *c->draft_len, err);
    c->feed = kn_calloc(ns * D, sizeof *c->feed, err);
    c->n_draft = kn_calloc(ns, sizeof *c->n_draft, err);
    c->row0 = kn_calloc(ns, sizeof *c->row0, err);
    c->held = kn_calloc(ns, sizeof *c->held, err);
    c->store_pending = kn_calloc(ns, sizeof *c->store_pending, err);
    c->finishing = kn_calloc(ns, sizeof *c->finishing, err);
    c->n_samp = kn_calloc(ns, sizeof *c->n_samp, err);
    c->samp_id = kn_calloc(ns * D, sizeof *c->samp_id, err);
    c->samp_lp = kn_calloc(ns * D, sizeof *c->samp_lp, err);
    c->samp_top_id = kn_calloc(tops_n, sizeof *c->samp_top_id, err);
    c->samp_top_lp = kn_calloc(tops_n, sizeof *c->samp_top_lp, err);
    if (!c->slots || !c->fresh || !c->history || !c->samplers || !c->tokens || !c->pos ||
        !c->slot_of || !c->out_rows || !c->out_slot || !c->logits || !c->lp || !c->draft_len ||
        !c->feed || !c->n_draft || !c->row0 || !c->held || !c->store_pending || !c->finishing ||
        !c->n_samp || !c->samp_id || !c->samp_lp || !c->samp_top_id || !c->samp_top_lp) {
        convoy_free(c);
        return KN_E_NOMEM;
    }
    for (int s = 0; s < c->n_slots; s++) {
        /* +1: the token sampled when the context is full is recorded before stopping */
        c->history[s] = kn_malloc(((size_t)b->n_ctx + 1) * sizeof(int32_t), err);
        if (!c->history[s] || sample_ctx_init(&c->samplers[s], b->n_vocab, err) != KN_OK) {
            convoy_free(c);
            return err ? err->status : KN_E_NOMEM;
        }
    }
    c->stats.n_slots = c->n_slots;
    c->stats.queue_cap = c->q.cap;
    c->stats.prefill_queue_cap = c->pq.cap;
    c->stats.draft_max = c->dmax;
    if (pthread_create(&c->thread, NULL, convoy_main, c) != 0) {
        convoy_free(c);
        return kn_fail(err, KN_E_INTERNAL, "serve: cannot start the scheduler thread");
    }
    c->thread_started = true;
    *out = c;
    return KN_OK;
}

void convoy_stop(struct convoy *c)
{
    if (!c)
        return;
    convoy_lock(c);
    c->stopping = true;
    pthread_cond_broadcast(&c->work_cv);
    convoy_unlock(c);
    if (c->thread_started)
        pthread_join(c->thread, NULL);
    c->thread_started = false;
    convoy_lock(c);
    for (int s = 0; s < c->n_slots; s++)
        if (c->slots[s]) {
            finish_locked(c, c->slots[s], SRV_FINISH_CANCELLED);
            c->slots[s] = NULL;
        }
    struct jobq *queues[] = {&c->q, &c->pq};
    for (int i = 0; i < 2; i++)
        while (queues[i]->head) {
            struct srv_job *j = queues[i]->head;
            jobq_remove(queues[i], j);
            finish_locked(c, j, SRV_FINISH_CANCELLED);
        }
    convoy_unlock(c);
}

enum kn_status convoy_submit(struct convoy *c, struct srv_job *j, struct kn_err *err)
{
    assert(j->out_ids && j->max_tokens >= 1 && j->max_tokens <= j->out_cap && j->n_prompt >= 1);
    if ((int64_t)j->n_prompt >= c->b->n_ctx)
        return kn_fail(err, KN_E_LIMIT, "the prompt has %zu tokens but a slot holds %lld",
                       j->n_prompt, (long long)c->b->n_ctx);
    convoy_lock(c);
    if (c->stopping) {
        convoy_unlock(c);
        return kn_fail(err, KN_E_CANCELLED, "the server is shutting down");
    }
    int busy = 0;
    for (int s = 0; s < c->n_slots; s++)
        busy += c->slots[s] != NULL && !c->slots[s]->prefill;
    /* Free slots (and slots a prefill would give up) absorb queued jobs at the next
     * step, so they count as room too. */
    if (c->q.len >= c->q.cap + (c->n_slots - busy)) {
        convoy_unlock(c);
        return kn_fail(err, KN_E_LIMIT, "all %d slots are busy and %d requests are waiting",
                       c->n_slots, c->q.len);
    }
    j->refs++;
    j->state = SRV_JOB_QUEUED;
    j->t_submit = kn_now();
    jobq_push(&c->q, j);
    c->stats.queued = c->q.len;
    pthread_cond_signal(&c->work_cv);
    convoy_unlock(c);
    return KN_OK;
}

enum kn_status convoy_submit_prefill(struct convoy *c, struct srv_job *j, struct kn_err *err)
{
    assert(j->prefill && j->n_prompt >= 1);
    if ((int64_t)j->n_prompt > c->b->n_ctx)
        return kn_fail(err, KN_E_LIMIT, "the prompt has %zu tokens but a slot holds %lld",
                       j->n_prompt, (long long)c->b->n_ctx);
    convoy_lock(c);
    if (c->stopping) {
        convoy_unlock(c);
        return kn_fail(err, KN_E_CANCELLED, "the server is shutting down");
    }
    if (c->pq.len >= c->pq.cap) {
        convoy_unlock(c);
        return kn_fail(err, KN_E_LIMIT, "%d prefill requests are waiting already", c->pq.len);
    }
    j->refs++;
    j->state = SRV_JOB_QUEUED;
    j->t_submit = kn_now();
    jobq_push(&c->pq, j);
    c->stats.prefill_queued = c->pq.len;
    pthread_cond_signal(&c->work_cv);
    convoy_unlock(c);
    return KN_OK;
}

bool convoy_wait(struct convoy *c, struct srv_job *j, int64_t seen, int timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    convoy_lock(c);
    while (j->state != SRV_JOB_DONE && j->n_out <= seen)
        if (pthread_cond_timedwait(&j->cv, &c->mu, &dl) == ETIMEDOUT)
            break;
    bool done = j->state == SRV_JOB_DONE;
    convoy_unlock(c);
    return done;
}

void convoy_cancel(struct convoy *c, struct srv_job *j)
{
    convoy_lock(c);
    if (j->state == SRV_JOB_QUEUED && j->refs > 1) {
        /* Still waiting: take it out now so it stops counting against the queue. */
        if (jobq_remove(j->prefill ? &c->pq : &c->q, j)) {
            c->stats.queued = c->q.len;
            c->stats.prefill_queued = c->pq.len;
            finish_locked(c, j, SRV_FINISH_CANCELLED);
        }
    } else if (j->state == SRV_JOB_RUNNING) {
        j->cancel = true;
        pthread_cond_signal(&c->work_cv);
    }
    convoy_unlock(c);
}

void convoy_get_stats(struct convoy *c, struct convoy_stats *out)
{
    convoy_lock(c);
    *out = c->stats;
    convoy_unlock(c);
}
