/* test_server_convoy.c: Convoy's scheduling against the toy backend: a job gives the same
 * tokens, log-probabilities and text alone as in a crowd (joining mid-way, queued, chunked
 * prompts), the queue bound holds, cancellation frees the slot, stop strings cut the text,
 * a grammar constrains a job and one that no token can continue ends it with an error. */
#include "check.h"
#include "server/server.h"
#include "grammar/grammar.h"

#include <math.h>
#include <string.h>

#define N_JOBS 10

struct result {
    int64_t n_out;
    int32_t ids[256];
    float lp[256];
    int32_t top[256 * 3];
    char text[1024];
    enum srv_finish finish;
};

static struct srv_job *make_job(int k, int64_t max_tokens, struct kn_err *err)
{
    char prompt[200];
    int len = snprintf(prompt, sizeof prompt, "job %d: %.*s", k, 20 + 9 * k,
                       "the quick brown fox jumps over the lazy dog and keeps running far away "
                       "into the hills where nobody");
    int32_t ids[256];
    for (int i = 0; i < len; i++)
        ids[i] = (uint8_t)prompt[i];
    struct srv_job *j;
    if (srv_job_new(&j, ids, (size_t)len, err) != KN_OK)
        return NULL;
    j->max_tokens = max_tokens ? max_tokens : 20 + 7 * k;
    j->sampling.temperature = k % 3 == 0 ? 0.0f : 0.8f;
    j->sampling.seed = 1000 + (uint64_t)k;
    j->sampling.repeat_penalty = k % 2 ? 1.1f : 1.0f;
    j->sampling.top_k = k % 4 == 1 ? 0 : 50;
    j->want_logprobs = true;
    j->n_top = 3;
    if (srv_job_alloc_results(j, 4, err) != KN_OK)
        return NULL;
    return j;
}

static void collect(struct convoy *c, struct srv_job *j, struct result *r)
{
    while (!convoy_wait(c, j, j->n_out, 1000)) {
    }
    convoy_lock(c);
    r->n_out = j->n_out;
    memcpy(r->ids, j->out_ids, (size_t)j->n_out * sizeof *r->ids);
    memcpy(r->lp, j->out_lp, (size_t)j->n_out * sizeof *r->lp);
    memset(r->top, 0, sizeof r->top);
    memcpy(r->top, j->top_ids, (size_t)j->n_out * (size_t)j->n_top * sizeof *r->top);
    snprintf(r->text, sizeof r->text, "%s", j->text);
    r->finish = j->finish;
    convoy_unlock(c);
}

static bool same(const struct result *a, const struct result *b)
{
    return a->n_out == b->n_out && !memcmp(a->ids, b->ids, (size_t)a->n_out * sizeof(int32_t)) &&
           !memcmp(a->lp, b->lp, (size_t)a->n_out * sizeof(float)) &&
           !memcmp(a->top, b->top, (size_t)a->n_out * 3 * sizeof(int32_t)) &&
           strcmp(a->text, b->text) == 0 && a->finish == b->finish;
}

static void test_alone_vs_crowd(void)
{
    struct kn_err err = {0};
    static struct result alone[N_JOBS], crowd[N_JOBS];

    /* Alone: one slot, one job at a time. */
    struct srv_backend b1;
    CHECK(srv_toy_backend(&b1, 1, 256, 0, &err) == KN_OK);
    struct convoy *c1;
    CHECK(convoy_start(&c1, &b1, 4, &err) == KN_OK);
    for (int k = 0; k < N_JOBS; k++) {
        struct srv_job *j = make_job(k, 0, &err);
        CHECK(j != NULL);
        CHECK(convoy_submit(c1, j, &err) == KN_OK);
        collect(c1, j, &alone[k]);
        convoy_release(c1, j);
        CHECKF(alone[k].n_out > 0, "job %d", k);
    }
    convoy_stop(c1);
    convoy_free(c1);
    b1.free(b1.ctx);

    /* Crowd: 4 slots, small batches (so prompts are chunked), all jobs at once. */
    struct srv_backend b4;
    CHECK(srv_toy_backend(&b4, 4, 256, 200, &err) == KN_OK);
    b4.max_batch = 11;
    struct convoy *c4;
    CHECK(convoy_start(&c4, &b4, N_JOBS, &err) == KN_OK);
    struct srv_job *jobs[N_JOBS];
    for (int k = 0; k < N_JOBS; k++) {
        jobs[k] = make_job(N_JOBS - 1 - k, 0, &err); /* reverse order: different slots */
        CHECK(convoy_submit(c4, jobs[k], &err) == KN_OK);
    }
    for (int k = 0; k < N_JOBS; k++) {
        collect(c4, jobs[k], &crowd[N_JOBS - 1 - k]);
        convoy_release(c4, jobs[k]);
    }
    struct convoy_stats st;
    convoy_get_stats(c4, &st);
    CHECK_EQ_INT(st.jobs_done, N_JOBS);
    CHECK(st.steps > 0);
    convoy_stop(c4);
    convoy_free(c4);
    b4.free(b4.ctx);

    int distinct_texts = 0;
    for (int k = 0; k < N_JOBS; k++) {
        CHECKF(same(&alone[k], &crowd[k]), "job %d differs alone (%lld tokens, \"%s\") and in a crowd (%lld, \"%s\")",
               k, (long long)alone[k].n_out, alone[k].text, (long long)crowd[k].n_out, crowd[k].text);
        CHECK(alone[k].lp[0] <= 0.0f && isfinite(alone[k].lp[0]));
        if (k > 0 && strcmp(alone[k].text, alone[k - 1].text) != 0)
            distinct_texts++;
    }
    CHECK(distinct_texts > 0); /* the jobs really differ, so a mix-up would show */
}

static void test_queue_limit_and_cancel(void)
{
    struct kn_err err = {0};
    struct srv_backend b;
    CHECK(srv_toy_backend(&b, 2, 256, 3000, &err) == KN_OK);
    struct convoy *c;
    CHECK(convoy_start(&c, &b, 1, &err) == KN_OK);
    struct srv_job *j[4];
    for (int k = 0; k < 4; k++) {
        j[k] = make_job(k, 100, &err);
        j[k]->sampling.temperature = 0.0f;
    }
    CHECK(convoy_submit(c, j[0], &err) == KN_OK);
    CHECK(convoy_submit(c, j[1], &err) == KN_OK);
    /* wait until both run; then the queue takes one more and refuses the next */
    for (int tries = 0; tries < 500; tries++) {
        convoy_lock(c);
        bool running = j[0]->state == SRV_JOB_RUNNING && j[1]->state == SRV_JOB_RUNNING;
        convoy_unlock(c);
        if (running)
            break;
        convoy_wait(c, j[1], 0, 10);
    }
    CHECK(convoy_submit(c, j[2], &err) == KN_OK);
    CHECK(convoy_submit(c, j[3], &err) == KN_E_LIMIT);
    CHECK(strstr(err.msg, "slots are busy") != NULL);
    /* cancel a running job: it finishes as cancelled and the queued job gets its slot */
    convoy_cancel(c, j[0]);
    CHECK(convoy_wait(c, j[0], 1000, 5000));
    CHECK_EQ_INT(j[0]->finish, SRV_FINISH_CANCELLED);
    convoy_wait(c, j[2], 0, 5000);
    CHECK(j[2]->state != SRV_JOB_QUEUED);
    /* a queued job cancelled leaves the queue at once */
    CHECK(convoy_submit(c, j[3], &err) == KN_OK);
    convoy_cancel(c, j[3]);
    CHECK(j[3]->state == SRV_JOB_DONE && j[3]->finish == SRV_FINISH_CANCELLED);
    convoy_cancel(c, j[1]);
    convoy_cancel(c, j[2]);
    convoy_stop(c);
    convoy_free(c); /* joins with nothing pending */
    for (int k = 0; k < 4; k++)
        convoy_release(NULL, j[k]);
    b.free(b.ctx);
}

static void test_stop_and_length(void)
{
    struct kn_err err = {0};
    struct srv_backend b;
    CHECK(srv_toy_backend(&b, 1, 64, 0, &err) == KN_OK);
    struct convoy *c;
    CHECK(convoy_start(&c, &b, 2, &err) == KN_OK);
    /* learn the greedy text, then stop on a piece of it */
    struct srv_job *j = make_job(0, 30, &err);
    CHECK(convoy_submit(c, j, &err) == KN_OK);
    struct result r;
    collect(c, j, &r);
    convoy_release(c, j);
    CHECK(strlen(r.text) >= 10);
    struct srv_job *k = make_job(0, 30, &err);
    k->stop[0] = strndup(r.text + 5, 3);
    k->stop_len[0] = 3;
    k->n_stop = 1;
    CHECK(convoy_submit(c, k, &err) == KN_OK);
    struct result r2;
    collect(c, k, &r2);
    CHECK_EQ_INT(r2.finish, SRV_FINISH_STOP);
    char *first = strstr(r.text, k->stop[0]);
    CHECK(first != NULL && strlen(r2.text) == (size_t)(first - r.text));
    convoy_release(c, k);
    /* the context bound: a 60-token prompt in a 64-position slot */
    int32_t ids[60];
    for (int i = 0; i < 60; i++)
        ids[i] = 'a' + i % 26;
    struct srv_job *l;
    CHECK(srv_job_new(&l, ids, 60, &err) == KN_OK);
    l->max_tokens = 50;
    l->sampling.temperature = 0.0f;
    l->sampling.min_p = 0;
    CHECK(srv_job_alloc_results(l, 4, &err) == KN_OK);
    CHECK(convoy_submit(c, l, &err) == KN_OK);
    collect(c, l, &r);
    CHECK(r.n_out <= 5);
    CHECK(r.finish == SRV_FINISH_LENGTH || r.finish == SRV_FINISH_STOP);
    convoy_release(c, l);
    convoy_stop(c);
    convoy_free(c);
    b.free(b.ctx);
}

/* The toy's byte pieces, except that no token writes 'Z'. */
static const char *no_z_piece(const void *ctx, int32_t id, size_t *len)
{
    static char bytes[256][2];
    (void)ctx;
    if (id < 0 || id >= 256 || id == 'Z') {
        *len = 0;
        return "";
    }
    bytes[id][0] = (char)id;
    *len = 1;
    return bytes[id];
}

static struct srv_job *grammar_job(const char *gbnf, const struct grammar_vocab *gv,
                                   struct kn_err *err)
{
    struct srv_job *j = make_job(1, 40, err);
    CHECK(j != NULL);
    CHECK(grammar_parse(gbnf, strlen(gbnf), NULL, &j->grammar, err) == KN_OK);
    CHECK(grammar_state_init(&j->gstate, j->grammar, err) == KN_OK);
    j->gvocab = gv;
    return j;
}

static void test_grammar(void)
{
    struct kn_err err = {0};
    struct srv_backend b;
    CHECK(srv_toy_backend(&b, 2, 128, 0, &err) == KN_OK);
    struct grammar_vocab *gv = NULL, *no_z = NULL;
    CHECK(b.grammar_vocab(b.ctx, &gv, &err) == KN_OK);
    const int32_t eos[1] = {257};
    CHECK(grammar_vocab_init(&no_z, b.n_vocab, no_z_piece, NULL, eos, 1, &err) == KN_OK);
    struct convoy *c;
    CHECK(convoy_start(&c, &b, 4, &err) == KN_OK);

    struct srv_job *ok = grammar_job("root ::= \"ab\" [0-9] \"!\"", gv, &err);
    struct srv_job *dead = grammar_job("root ::= \"ab\" \"Z\" [a-z]*", no_z, &err);
    CHECK(convoy_submit(c, ok, &err) == KN_OK);
    CHECK(convoy_submit(c, dead, &err) == KN_OK);
    struct result r;
    collect(c, ok, &r);
    CHECK_EQ_INT(r.finish, SRV_FINISH_STOP);
    CHECK(strlen(r.text) == 4 && memcmp(r.text, "ab", 2) == 0 && r.text[2] >= '0' &&
          r.text[2] <= '9' && r.text[3] == '!');
    CHECK_EQ_INT(r.n_out, 5); /* four characters, then the end-of-generation token */
    CHECK_EQ_INT(r.ids[4], 257);
    collect(c, dead, &r);
    CHECK_EQ_INT(r.finish, SRV_FINISH_ERROR);
    CHECK(dead->error_is_request && strstr(dead->error, "grammar cannot be continued"));
    CHECKF(r.n_out == 2 && strcmp(r.text, "ab") == 0, "%lld '%s'", (long long)r.n_out, r.text);
    convoy_release(c, ok);
    convoy_release(c, dead);
    /* the convoy serves on: a plain job afterwards runs to its end */
    struct srv_job *plain = make_job(2, 20, &err);
    CHECK(convoy_submit(c, plain, &err) == KN_OK);
    collect(c, plain, &r);
    CHECK(r.finish == SRV_FINISH_STOP || r.finish == SRV_FINISH_LENGTH);
    convoy_release(c, plain);
    convoy_stop(c);
    convoy_free(c);
    grammar_vocab_free(gv);
    grammar_vocab_free(no_z);
    b.free(b.ctx);
}

int main(void)
{
    test_alone_vs_crowd();
    test_queue_limit_and_cancel();
    test_stop_and_length();
    test_grammar();
    CHECK_DONE();
}
