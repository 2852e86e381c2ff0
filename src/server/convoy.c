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
 * leaving, chunking and slot numbers change only timing. */
#include "server.h"
#include "grammar/grammar.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct convoy {
    struct srv_backend *b;
    pthread_mutex_t mu;
    pthread_cond_t work_cv;       /* the scheduler waits here for jobs */
    pthread_t thread;
    bool thread_started, stopping;

    struct srv_job *q_head, *q_tail;
    int q_len, q_cap;

    int n_slots;
    struct srv_job **slots;       /* (n_slots) running job or NULL */
    bool *fresh;                  /* (n_slots) slot needs a reset before its first batch */
    int32_t **history;            /* (n_slots, n_ctx) prompt then generated tokens */
    struct sample_ctx *samplers;  /* (n_slots) */

    /* batch scratch, sized once */
    int32_t *tokens, *pos, *slot_of;
    int64_t *out_rows;
    int *out_slot;
    float *logits;                /* (n_slots, n_vocab) */
    float *lp;                    /* (n_vocab) */

    struct convoy_stats stats;
};

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
        sample_stop_free(j->stopm);
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
    else
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
            if (sample_stop_feed(j->stopm, p, len, j->text + old, &n))
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
        sample_stop_flush(j->stopm, j->text + j->text_len, &n);
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
        if (!j->stopm || sample_stop_init(j->stopm, (const char *const *)j->stop, j->n_stop,
                                          &perr) != KN_OK) {
            free(j->stopm);
            j->stopm = NULL;
            snprintf(j->error, sizeof j->error, "stop strings: %.200s", perr.msg);
            return false;
        }
    }
    return true;
}

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
                finish_locked(c, j, SRV_FINISH_CANCELLED);
                c->slots[s] = NULL;
            }
        }
        for (int s = 0; s < c->n_slots && c->q_head; s++) {
            if (c->slots[s])
                continue;
            struct srv_job *j = c->q_head;
            c->q_head = j->next;
            if (!c->q_head)
                c->q_tail = NULL;
            c->q_len--;
            j->next = NULL;
            if (j->cancel) { /* left before it started */
                finish_locked(c, j, SRV_FINISH_CANCELLED);
                s--;
                continue;
            }
            j->state = SRV_JOB_RUNNING;
            j->slot = s;
            j->t_start = kn_now();
            if (!slot_sampling_setup(c, s, j)) {
                finish_locked(c, j, SRV_FINISH_ERROR);
                s--;
                continue;
            }
            c->slots[s] = j;
            c->fresh[s] = true;
        }
        int busy = 0;
        for (int s = 0; s < c->n_slots; s++)
            busy += c->slots[s] != NULL;
        c->stats.slots_busy = busy;
        c->stats.queued = c->q_len;
        if (busy)
            break;
        pthread_cond_wait(&c->work_cv, &c->mu);
    }
    /* Snapshot the slot table: only this thread changes it, so it stays valid unlocked;
     * the scheduler-private job fields (n_fed, next_token) are touched only here. */
    struct srv_job *active[c->n_slots];
    memcpy(active, c->slots, (size_t)c->n_slots * sizeof *active);
    convoy_unlock(c);

    double t0 = kn_now();
    int64_t n = 0, n_out = 0, n_prompt_tok = 0;
    for (int s = 0; s < c->n_slots; s++) {
        struct srv_job *j = active[s];
        if (!j)
            continue;
        if (c->fresh[s]) {
            b->slot_reset(b->ctx, s);
            memcpy(c->history[s], j->prompt, j->n_prompt * sizeof *j->prompt);
            j->n_fed = 0;
            c->fresh[s] = false;
        }
        if (j->n_fed == (int64_t)j->n_prompt) { /* generating: feed the last sampled token */
            c->tokens[n] = j->next_token;
            c->pos[n] = (int32_t)(j->n_prompt + j->n_out - 1);
            c->slot_of[n] = s;
            c->out_rows[n_out] = n;
            c->out_slot[n_out++] = s;
            n++;
        }
    }
    for (int s = 0; s < c->n_slots && n < b->max_batch; s++) {
        struct srv_job *j = active[s];
        if (!j || j->n_fed == (int64_t)j->n_prompt)
            continue;
        int64_t chunk = (int64_t)j->n_prompt - j->n_fed;
        if (chunk > b->max_batch - n)
            chunk = b->max_batch - n;
        for (int64_t i = 0; i < chunk; i++) {
            c->tokens[n] = j->prompt[j->n_fed + i];
            c->pos[n] = (int32_t)(j->n_fed + i);
            c->slot_of[n] = s;
            n++;
        }
        j->n_fed += chunk;
        n_prompt_tok += chunk;
        if (j->n_fed == (int64_t)j->n_prompt) {
            c->out_rows[n_out] = n - 1;
            c->out_slot[n_out++] = s;
        }
    }
    assert(n > 0);

    struct srv_batch batch = {n, c->tokens, c->pos, c->slot_of, c->out_rows, n_out};
    struct kn_err err = {0};
    if (b->forward(b->ctx, &batch, c->logits, &err) != KN_OK) {
        kn_log(KN_LOG_ERROR, "serve: forward pass failed: %s", err.msg);
        fail_all_active(c, err.msg);
        return true;
    }

    /* Sample outside the lock: only this thread writes a running job's token arrays. */
    int32_t sampled[c->n_slots];
    float sampled_lp[c->n_slots];
    int32_t tops_id[c->n_slots][SRV_MAX_TOP_LOGPROBS];
    float tops_lp[c->n_slots][SRV_MAX_TOP_LOGPROBS];
    for (int64_t r = 0; r < n_out; r++) {
        int s = c->out_slot[r];
        struct srv_job *j = active[s];
        const float *lg = c->logits + r * (int64_t)b->n_vocab;
        int64_t hist = (int64_t)j->n_prompt + j->n_out;
        int32_t id = sample_token(&c->samplers[s], &j->sampling, lg, c->history[s], hist,
                                  (uint64_t)j->n_out);
        sampled[s] = id;
        sampled_lp[s] = 0.0f;
        if (id < 0)
            continue;
        if (j->want_logprobs || j->n_top > 0) {
            srv_logprobs(lg, b->n_vocab, c->lp, j->n_top, tops_id[s], tops_lp[s]);
            sampled_lp[s] = c->lp[id];
        }
        c->history[s][hist] = id;
        j->next_token = id;
    }

    convoy_lock(c);
    c->stats.steps++;
    c->stats.tokens_prompt += (uint64_t)n_prompt_tok;
    for (int64_t r = 0; r < n_out; r++) {
        int s = c->out_slot[r];
        struct srv_job *j = active[s];
        if (sampled[s] < 0) { /* a grammar that no token of the vocabulary can continue */
            snprintf(j->error, sizeof j->error,
                     "the grammar cannot be continued: after %lld generated tokens no token of "
                     "the vocabulary continues the text and it is not complete; the grammar "
                     "needs characters this model cannot write",
                     (long long)j->n_out);
            j->error_is_request = true;
            finish_locked(c, j, SRV_FINISH_ERROR);
            c->slots[s] = NULL;
            continue;
        }
        enum srv_finish f = append_locked(c, j, sampled[s], sampled_lp[s], tops_id[s], tops_lp[s]);
        if (f != SRV_FINISH_NONE) {
            finish_locked(c, j, f);
            c->slots[s] = NULL;
        }
    }
    c->stats.busy_seconds += kn_now() - t0;
    convoy_unlock(c);
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
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->work_cv);
    free(c);
}

enum kn_status convoy_start(struct convoy **out, struct srv_backend *b, int queue_cap,
                            struct kn_err *err)
{
    *out = NULL;
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
    c->q_cap = queue_cap < 0 ? 0 : queue_cap;
    size_t ns = (size_t)c->n_slots, nb = (size_t)b->max_batch, nv = (size_t)b->n_vocab;
    size_t logits_n;
    if (!kn_mul_size(ns, nv, &logits_n) || !kn_mul_size(logits_n, sizeof(float), &logits_n)) {
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
    c->out_rows = kn_malloc(ns * sizeof *c->out_rows, err);
    c->out_slot = kn_malloc(ns * sizeof *c->out_slot, err);
    c->logits = kn_malloc(logits_n, err);
    c->lp = kn_malloc(nv * sizeof *c->lp, err);
    if (!c->slots || !c->fresh || !c->history || !c->samplers || !c->tokens || !c->pos ||
        !c->slot_of || !c->out_rows || !c->out_slot || !c->logits || !c->lp) {
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
    c->stats.queue_cap = c->q_cap;
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
    while (c->q_head) {
        struct srv_job *j = c->q_head;
        c->q_head = j->next;
        finish_locked(c, j, SRV_FINISH_CANCELLED);
    }
    c->q_tail = NULL;
    c->q_len = 0;
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
        busy += c->slots[s] != NULL;
    /* Free slots absorb queued jobs at the next step, so they count as room too. */
    if (c->q_len >= c->q_cap + (c->n_slots - busy)) {
        convoy_unlock(c);
        return kn_fail(err, KN_E_LIMIT, "all %d slots are busy and %d requests are waiting",
                       c->n_slots, c->q_len);
    }
    j->refs++;
    j->state = SRV_JOB_QUEUED;
    j->t_submit = kn_now();
    j->next = NULL;
    if (c->q_tail)
        c->q_tail->next = j;
    else
        c->q_head = j;
    c->q_tail = j;
    c->q_len++;
    c->stats.queued = c->q_len;
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
        struct srv_job **pp = &c->q_head, *prev = NULL;
        while (*pp && *pp != j) {
            prev = *pp;
            pp = &(*pp)->next;
        }
        if (*pp) {
            *pp = j->next;
            if (c->q_tail == j)
                c->q_tail = prev;
            c->q_len--;
            c->stats.queued = c->q_len;
            j->next = NULL;
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
