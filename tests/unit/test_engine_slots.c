/* test_engine_slots.c: the engine's generation step and its one stop rule, without a
 * model: the server's toy (srv_toy_backend) implements the forward-pass interface
 * (struct engine_lm), and its hash-chain "KV cache" fails or changes every later logit
 * when a position is skipped or a slot mixed up.
 *
 * Checked: a request's tokens and text are the same alone in one slot as among others
 * in four (chunked prompts, drafting on and off); max_tokens ends with "length", the
 * context with "context" (the token that could not be fed is the last); a stop string
 * across token boundaries ends at the token completing it with the text cut before it;
 * a callback that refuses a token ends there with the held-back tail released; an
 * end-of-generation token ends the output without joining it unless ignore_eos. */
#include "check.h"

#include "engine/engine.h"
#include "sample/sample.h"
#include "server/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NCTX = 48, MAXT = 64, NREQ = 8, TOY_EOS = 257 };

struct out {
    int32_t ids[MAXT];
    int64_t n;
    bool saw_eog;
    char text[512];
    size_t tn;
    enum engine_finish finish;
    int stop_matched;
    int64_t veto_at;   /* the callback refuses this index (-1: never) */
};

struct run {
    struct out *of_slot[4];
};

static bool on_tok(void *ctx, const struct engine_tok *t)
{
    struct run *r = ctx;
    struct out *o = r->of_slot[t->slot];
    if (t->eog) {
        o->saw_eog = true;
        CHECK(t->last && t->text_len == 0);
    } else {
        CHECK(t->index == o->n && o->n < MAXT);
        o->ids[o->n++] = t->id;
    }
    memcpy(o->text + o->tn, t->text, t->text_len);
    o->tn += t->text_len;
    if (t->last) {
        memcpy(o->text + o->tn, t->tail, t->tail_len);
        o->tn += t->tail_len;
    }
    return t->index != o->veto_at;
}

struct req {
    int32_t prompt[24];
    int64_t n_prompt;
    struct sample_params sp;
    int64_t max_tokens;
    const char *stop[1];
    int n_stop;
    bool ignore_eos;
};

/* Runs the requests through one step object of n_slots slots; out[k] for request k. */
static void run_all(const struct engine_lm *lm, int n_slots, int64_t max_batch, bool no_draft,
                    struct req *rq, int n, struct out *out)
{
    struct kn_err err = {0};
    struct engine_slots es;
    struct engine_slots_params p = {.max_batch = max_batch, .no_draft = no_draft};
    CHECK(engine_slots_init(&es, lm, n_slots, &p, &err) == KN_OK);
    struct run r = {{0}};
    int next = 0, left = n;
    while (left > 0) {
        while (next < n) {
            int pre;
            int s = engine_slots_admit(&es, rq[next].prompt, rq[next].n_prompt, false, &pre);
            CHECK(pre < 0);
            if (s < 0)
                break;
            struct engine_req q = {.prompt = rq[next].prompt, .n_prompt = rq[next].n_prompt,
                                   .sp = &rq[next].sp, .max_tokens = rq[next].max_tokens,
                                   .stop = rq[next].stop, .n_stop = rq[next].n_stop,
                                   .ignore_eos = rq[next].ignore_eos};
            CHECK(engine_slot_begin(&es, s, &q, &err) == KN_OK);
            r.of_slot[s] = &out[next++];
        }
        CHECK(engine_slots_step(&es, on_tok, &r, &err) == KN_OK);
        for (int s = 0; s < n_slots; s++) {
            struct engine_slot *sl = &es.slot[s];
            if (!sl->busy || !sl->done)
                continue;
            r.of_slot[s]->finish = sl->finish;
            r.of_slot[s]->stop_matched = sl->stop_matched;
            CHECK(!sl->stuck && !sl->failed);
            engine_slot_end(&es, s);
            left--;
        }
    }
    engine_slots_free(&es);
}

static void make_req(struct req *r, int k)
{
    memset(r, 0, sizeof *r);
    r->prompt[0] = 256; /* BOS */
    r->n_prompt = 4 + 3 * k % 17;
    for (int64_t i = 1; i < r->n_prompt; i++)
        r->prompt[i] = "the sun and the moon"[(i + k) % 20];
    sample_params_default(&r->sp);
    r->sp.temperature = k % 3 == 0 ? 0.0f : 0.9f;
    r->sp.seed = 77 + (uint64_t)k;
    r->max_tokens = k % 4 == 3 ? -1 : 6 + 3 * k;
}

static bool same_out(const struct out *a, const struct out *b)
{
    return a->n == b->n && memcmp(a->ids, b->ids, (size_t)a->n * sizeof *a->ids) == 0 &&
           a->tn == b->tn && memcmp(a->text, b->text, a->tn) == 0 && a->finish == b->finish &&
           a->saw_eog == b->saw_eog && a->stop_matched == b->stop_matched;
}

int main(void)
{
    struct kn_err err = {0};
    struct srv_backend b;
    CHECK(srv_toy_backend(&b, 4, NCTX, 0, &err) == KN_OK);
    struct req rq[NREQ];
    static struct out alone[NREQ], crowd[NREQ], nodraft[NREQ];
    for (int k = 0; k < NREQ; k++) {
        make_req(&rq[k], k);
        alone[k].veto_at = crowd[k].veto_at = nodraft[k].veto_at = -1;
    }
    /* A stop string from request 1's own text: two bytes starting at its third token. */
    struct out probe = {.veto_at = -1};
    run_all(&b.lm, 1, 16, true, &rq[1], 1, &probe);
    static char stop[3];
    CHECK(probe.n > 5);
    stop[0] = (char)probe.ids[2];
    stop[1] = (char)probe.ids[3];
    rq[1].stop[0] = stop;
    rq[1].n_stop = 1;
    rq[2].ignore_eos = true;
    rq[2].max_tokens = 30;
    alone[5].veto_at = crowd[5].veto_at = nodraft[5].veto_at = 2;

    for (int k = 0; k < NREQ; k++)
        run_all(&b.lm, 1, 16, false, &rq[k], 1, &alone[k]);
    run_all(&b.lm, 4, 7, false, rq, NREQ, crowd);   /* 7 tokens a step: prompts chunked */
    run_all(&b.lm, 4, 64, true, rq, NREQ, nodraft);
    for (int k = 0; k < NREQ; k++) {
        CHECKF(same_out(&alone[k], &crowd[k]), "request %d alone vs crowd", k);
        CHECKF(same_out(&alone[k], &nodraft[k]), "request %d drafting on vs off", k);
    }
    /* The stop rule, token by token. */
    for (int k = 0; k < NREQ; k++) {
        const struct out *o = &alone[k];
        if (k == 1) {
            /* ends with the token that completes the stop string; the text stops before it */
            CHECK(o->finish == ENGINE_FINISH_STOP && o->stop_matched == 0 && !o->saw_eog);
            CHECK(strstr(o->text, stop) == NULL && o->n <= 4 && o->tn < (size_t)o->n);
            for (size_t i = 0; i < o->tn; i++)
                CHECK(o->text[i] == (char)probe.ids[i]);
        } else if (k == 5) {
            CHECK(o->n == 3 && o->finish == ENGINE_FINISH_STOP && !o->saw_eog);
        } else if (o->saw_eog) {
            CHECK(o->finish == ENGINE_FINISH_STOP && !rq[k].ignore_eos);
        } else if (rq[k].max_tokens < 0) {
            /* the context: the token sampled when every position is used is the last */
            CHECK(o->finish == ENGINE_FINISH_CONTEXT && rq[k].n_prompt + o->n == NCTX + 1);
        } else {
            CHECK(o->finish == ENGINE_FINISH_LENGTH && o->n == rq[k].max_tokens);
        }
        bool eos_inside = false;
        for (int64_t i = 0; i < o->n; i++)
            eos_inside |= o->ids[i] == TOY_EOS;
        CHECK(!eos_inside || rq[k].ignore_eos);
        /* without a stop string the text is the tokens' bytes */
        if (rq[k].n_stop == 0) {
            size_t n = 0;
            for (int64_t i = 0; i < o->n; i++)
                n += o->ids[i] < 256;
            CHECK(n == o->tn);
        }
    }
    bool some_context = false;
    for (int k = 0; k < NREQ; k++)
        some_context |= alone[k].finish == ENGINE_FINISH_CONTEXT;
    CHECK(some_context);
    b.free(b.ctx);
    CHECK_DONE();
}
