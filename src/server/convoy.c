/* convoy.c: Convoy, the continuous-batching scheduler: the server's threads and queues
 * around the engine's one generation step (engine_slots_step, src/engine/slots.c).
 *
 * One thread owns the slots. Each step:
 *   1. under the lock: drop cancelled jobs, move queued jobs into free slots (requests
 *      first; a Zero Wait prefill only when no request waits, and it gives its slot up to
 *      a waiting request);
 *   2. unlocked: one engine step over every running slot (decode tokens with their RAD-1
 *      drafts, prompt chunks, sampling, the stop rule: all in the engine, the same step
 *      kinetic run's engine_generate takes); each sampled token is recorded in its job
 *      (log-probabilities, text) and wakes the waiting connection;
 *   3. under the lock: answer finished jobs, then store their sequences in the prompt
 *      cache (a prefill answers only once stored: its answer means "in the cache").
 * A job's output cannot depend on its companions: see engine.h and docs/numerics.md. */
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
    struct jobq pq;               /* Zero Wait jobs waiting for a free slot */

    int n_slots;
    struct srv_job **slots;       /* (n_slots) running job or NULL; engine slot s runs it */
    struct engine_slots es;       /* the generation step (scheduler thread only) */
    enum srv_finish *finishing;   /* (n_slots) finish decided this step */
    float *lp;                    /* (n_vocab) log-probabilities of one row */

    struct convoy_speed speed;
    struct convoy_stats stats;
    struct convoy_slot_info *info; /* (n_slots) published under the lock */
    uint64_t n_tasks;             /* jobs numbered so far */
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

/* The step's callback (scheduler thread): records a sampled token in its job, with its
 * log-probabilities (computed before taking the lock) and the text it makes safe to
 * show, and wakes the job's connection. An end-of-generation token is recorded too. */
static bool on_token(void *ctx, const struct engine_tok *t)
{
    struct convoy *c = ctx;
    struct srv_job *j = c->slots[t->slot]; /* only this thread changes the slot table */
    float lp = 0.0f;
    int32_t top_ids[SRV_MAX_TOP_LOGPROBS];
    float top_lp[SRV_MAX_TOP_LOGPROBS];
    if (j->want_logprobs || j->n_top > 0) {
        srv_logprobs(t->logits, c->b->n_vocab, c->lp, j->n_top, top_ids, top_lp);
        lp = c->lp[t->id];
    }
    convoy_lock(c);
    int64_t k = j->n_out;
    assert(k < j->out_cap);
    j->out_ids[k] = t->id;
    j->out_lp[k] = lp;
    if (j->n_top > 0) {
        memcpy(j->top_ids + k * j->n_top, top_ids, (size_t)j->n_top * sizeof *top_ids);
        memcpy(j->top_lp + k * j->n_top, top_lp, (size_t)j->n_top * sizeof *top_lp);
    }
    if (k == 0)
        j->t_first = kn_now();
    c->stats.tokens_generated++;
    assert(j->text_len + t->text_len + t->tail_len < j->text_cap);
    memcpy(j->text + j->text_len, t->text, t->text_len);
    j->text_len += t->text_len;
    if (t->last) {
        memcpy(j->text + j->text_len, t->tail, t->tail_len);
        j->text_len += t->tail_len;
    }
    j->text[j->text_len] = '\0';
    j->text_end[k] = j->text_len;
    j->n_out = k + 1;
    pthread_cond_broadcast(&j->cv);
    convoy_unlock(c);
    return true;
}

/* ---------------------------------------------------------------- admission */

/* Frees slot s (its job answered or preempted): the engine stores what the slot holds
 * at its next flush. Under the lock. */
static void slot_free_locked(struct convoy *c, int s)
{
    engine_slot_end(&c->es, s);
    c->slots[s] = NULL;
}

/* Moves waiting jobs into free slots: requests first; prefill jobs only when no request
 * waits. The engine chooses the slot (engine_slots_admit: the free one holding the
 * longest prefix of the prompt, else a prefill's, which ends, its evaluated prefix
 * stored). Under the lock. */
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
        int pre;
        int s = engine_slots_admit(&c->es, j->prompt, (int64_t)j->n_prompt, prefill, &pre);
        if (pre >= 0) { /* the engine ended the prefill in slot pre: answer it */
            struct srv_job *pj = c->slots[pre];
            pj->preempted = true;
            c->stats.prefills_preempted++;
            c->stats.prefill_tokens += (uint64_t)pj->n_fed;
            finish_locked(c, pj, SRV_FINISH_STOP);
            c->slots[pre] = NULL;
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
        struct engine_req r = {.prompt = j->prompt, .n_prompt = (int64_t)j->n_prompt,
                               .sp = &j->sampling, .grammar = j->gstate, .gvocab = j->gvocab,
                               .max_tokens = j->max_tokens,
                               .stop = (const char *const *)j->stop, .n_stop = j->n_stop,
                               .ignore_eos = j->ignore_eos, .prefill = j->prefill};
        struct kn_err err = {0};
        if (engine_slot_begin(&c->es, s, &r, &err) != KN_OK) {
            snprintf(j->error, sizeof j->error, "%.200s", err.msg);
            finish_locked(c, j, SRV_FINISH_ERROR);
            continue;
        }
        c->slots[s] = j;
    }
}

/* ---------------------------------------------------------------- slot table */

/* Publishes the slots for /slots and /metrics (under the lock, scheduler thread: the
 * only writer of the engine's slots). */
static void publish_locked(struct convoy *c)
{
    for (int s = 0; s < c->n_slots; s++) {
        struct convoy_slot_info *in = &c->info[s];
        const struct srv_job *j = c->slots[s];
        const struct engine_slot *sl = &c->es.slot[s];
        in->busy = j != NULL;
        in->positions = sl->held;
        if (!j)
            continue;
        in->has_job = true;
        in->prefill = j->prefill;
        in->task = j->task;
        in->n_prompt = (int64_t)j->n_prompt;
        in->n_decoded = j->n_out;
        in->max_tokens = j->max_tokens;
        in->n_cached = j->n_cached;
        in->sampling = j->sampling;
        in->ignore_eos = j->ignore_eos;
        in->n_top = j->n_top;
    }
}

void convoy_get_slots(struct convoy *c, struct convoy_slot_info *out)
{
    convoy_lock(c);
    memcpy(out, c->info, (size_t)c->n_slots * sizeof *out);
    convoy_unlock(c);
}

void convoy_kv_usage(struct convoy *c, int64_t *used, int64_t *total)
{
    convoy_lock(c);
    *used = 0;
    for (int s = 0; s < c->n_slots; s++)
        if (c->info[s].busy)
            *used += c->info[s].positions;
    *total = (int64_t)c->n_slots * c->b->n_ctx;
    convoy_unlock(c);
}

/* ---------------------------------------------------------------- one step */

/* Runs one step; returns false when the convoy is stopping. */
static bool step(struct convoy *c)
{
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
                slot_free_locked(c, s);
            }
        }
        admit_locked(c);
        int busy = 0;
        for (int s = 0; s < c->n_slots; s++)
            busy += c->slots[s] != NULL;
        c->stats.slots_busy = busy;
        c->stats.queued = c->q.len;
        c->stats.prefill_queued = c->pq.len;
        publish_locked(c);
        if (busy)
            break;
        convoy_unlock(c);
        engine_slots_flush(&c->es); /* cancelled jobs' sequences, before waiting */
        convoy_lock(c);
        if (!c->stopping && !c->q.head && !c->pq.head)
            pthread_cond_wait(&c->work_cv, &c->mu);
    }
    /* Snapshot the slot table: only this thread changes it, so it stays valid unlocked. */
    struct srv_job *active[c->n_slots];
    memcpy(active, c->slots, (size_t)c->n_slots * sizeof *active);
    convoy_unlock(c);

    double t0 = kn_now();
    struct kn_err err = {0};
    enum kn_status st = engine_slots_step(&c->es, on_token, c, &err);
    if (st != KN_OK)
        kn_log(KN_LOG_ERROR, "serve: forward pass failed: %s", err.msg);

    convoy_lock(c);
    const struct engine_slots_stats *es = &c->es.stats;
    c->stats.steps = es->steps;
    c->stats.tokens_prompt = es->tokens_prompt;
    c->stats.draft_proposed = es->draft_proposed;
    c->stats.draft_accepted = es->draft_accepted;
    c->stats.draft_passes = es->draft_passes;
    c->stats.slot_reuse_tokens = es->slot_reuse_tokens;
    c->stats.cache_restored_tokens = es->cache_restored_tokens;
    c->stats.prompt_tokens_reused = es->prompt_tokens_reused;
    bool any_finish = false;
    for (int s = 0; s < c->n_slots; s++) {
        struct srv_job *j = active[s];
        const struct engine_slot *sl = &c->es.slot[s];
        c->finishing[s] = SRV_FINISH_NONE;
        if (!j)
            continue;
        j->n_fed = sl->n_fed;
        j->n_cached = sl->n_cached;
        j->draft_n = sl->draft.proposed;
        j->draft_n_accepted = sl->draft.accepted;
        if (!sl->done)
            continue;
        if (sl->failed) {
            snprintf(j->error, sizeof j->error, "%.200s", err.msg);
            c->finishing[s] = SRV_FINISH_ERROR;
        } else if (sl->stuck && sl->sctx && sl->sctx->grammar &&
                   grammar_state_error(sl->sctx->grammar)) { /* a bound of grammar.h */
            snprintf(j->error, sizeof j->error, "the grammar was stopped after %lld generated "
                     "tokens: %s", (long long)j->n_out, grammar_state_error(sl->sctx->grammar));
            j->error_is_request = true;
            c->finishing[s] = SRV_FINISH_ERROR;
        } else if (sl->stuck) {
            snprintf(j->error, sizeof j->error,
                     "the grammar cannot be continued: after %lld generated tokens no "
                     "token of the vocabulary continues the text and it is not "
                     "complete; the grammar needs characters this model cannot write",
                     (long long)j->n_out);
            j->error_is_request = true;
            c->finishing[s] = SRV_FINISH_ERROR;
        } else {
            c->finishing[s] = sl->finish == ENGINE_FINISH_STOP ? SRV_FINISH_STOP : SRV_FINISH_LENGTH;
        }
        any_finish = true;
    }
    c->stats.busy_seconds += kn_now() - t0;
    publish_locked(c);
    if (!any_finish) {
        convoy_unlock(c);
        return true;
    }

    /* Answer finished requests, then store the sequences: only this thread admits jobs,
     * so a slot keeps its sequence until the store, and the client's next request
     * (admitted at a later step) finds it. A prefill answers only once stored. */
    bool prefill_done = false;
    for (int s = 0; s < c->n_slots; s++) {
        struct srv_job *j = active[s];
        if (c->finishing[s] == SRV_FINISH_NONE)
            continue;
        slot_free_locked(c, s);
        if (j->prefill) {
            prefill_done = true;
            continue;
        }
        finish_locked(c, j, c->finishing[s]); /* it may be freed from here on */
        active[s] = NULL;
    }
    publish_locked(c);
    convoy_unlock(c);
    engine_slots_flush(&c->es);
    if (!prefill_done)
        return true;
    convoy_lock(c);
    for (int s = 0; s < c->n_slots; s++) {
        struct srv_job *j = active[s];
        if (!j || c->finishing[s] == SRV_FINISH_NONE)
            continue;
        c->stats.prefills_done++;
        c->stats.prefill_tokens += (uint64_t)j->n_fed;
        finish_locked(c, j, c->finishing[s]);
    }
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
    engine_slots_free(&c->es);
    free(c->slots);
    free(c->finishing);
    free(c->lp);
    free(c->info);
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
    if (sp.prefill_queue < 0)
        return kn_fail(err, KN_E_ARG, "serve: the prefill queue must not be negative");
    if (b->n_slots < 1 || b->max_batch < b->n_slots || b->n_ctx < 2 || b->n_vocab < 1 ||
        b->lm.n_seq < b->n_slots || b->lm.n_ctx != b->n_ctx || b->lm.n_vocab != b->n_vocab)
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
    struct engine_slots_params ep = {.max_batch = b->max_batch, .no_draft = sp.no_draft,
                                     .draft_max = sp.draft_max, .no_warm_start = sp.no_warm_start};
    enum kn_status st = engine_slots_init(&c->es, &b->lm, c->n_slots, &ep, err);
    if (st != KN_OK) {
        kn_err_prefix(err, "serve");
        convoy_free(c);
        return st;
    }
    c->slots = kn_calloc((size_t)c->n_slots, sizeof *c->slots, err);
    c->finishing = kn_calloc((size_t)c->n_slots, sizeof *c->finishing, err);
    c->lp = kn_malloc((size_t)b->n_vocab * sizeof *c->lp, err);
    c->info = kn_calloc((size_t)c->n_slots, sizeof *c->info, err);
    if (!c->slots || !c->finishing || !c->lp || !c->info) {
        convoy_free(c);
        return KN_E_NOMEM;
    }
    c->stats.n_slots = c->n_slots;
    c->stats.queue_cap = c->q.cap;
    c->stats.prefill_queue_cap = c->pq.cap;
    c->stats.draft_max = c->es.dmax;
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
            slot_free_locked(c, s);
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

/* Queues j on q (under the lock; the caller checked the room) and wakes the scheduler. */
static void queue_locked(struct convoy *c, struct jobq *q, struct srv_job *j)
{
    j->refs++;
    j->task = ++c->n_tasks;
    j->state = SRV_JOB_QUEUED;
    j->t_submit = kn_now();
    jobq_push(q, j);
    c->stats.queued = c->q.len;
    c->stats.prefill_queued = c->pq.len;
    pthread_cond_signal(&c->work_cv);
}

/* Takes the lock for a submission: fails when the prompt does not fit a slot (the
 * engine's rule) or the convoy is stopping; else returns holding the lock. */
static enum kn_status submit_lock(struct convoy *c, const struct srv_job *j, struct kn_err *err)
{
    enum kn_status st = engine_slots_check_prompt(&c->es, (int64_t)j->n_prompt, j->prefill, err);
    if (st != KN_OK)
        return st;
    convoy_lock(c);
    if (c->stopping) {
        convoy_unlock(c);
        return kn_fail(err, KN_E_CANCELLED, "the server is shutting down");
    }
    return KN_OK;
}

enum kn_status convoy_submit(struct convoy *c, struct srv_job *j, struct kn_err *err)
{
    assert(j->out_ids && j->max_tokens >= 1 && j->max_tokens <= j->out_cap);
    enum kn_status st = submit_lock(c, j, err);
    if (st != KN_OK)
        return st;
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
    queue_locked(c, &c->q, j);
    convoy_unlock(c);
    return KN_OK;
}

enum kn_status convoy_submit_prefill(struct convoy *c, struct srv_job *j, struct kn_err *err)
{
    assert(j->prefill);
    enum kn_status st = submit_lock(c, j, err);
    if (st != KN_OK)
        return st;
    if (c->pq.len >= c->pq.cap) {
        convoy_unlock(c);
        return kn_fail(err, KN_E_LIMIT, "%d prefill requests are waiting already", c->pq.len);
    }
    queue_locked(c, &c->pq, j);
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
