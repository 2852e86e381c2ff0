/* test_server_speed.c: Convoy's speed features against the toy backend: RAD-1 drafting
 * and Warm Start (slot reuse and the shared cache, at many split points) give exactly the
 * tokens, log-probabilities, text and finish of plain decoding, alone and in a crowd;
 * drafts are all, partly or never accepted as designed; Zero Wait prefills fill the
 * cache and give their slot up to a waiting request. */
#include "check.h"
#include "server/server.h"

#include <string.h>
#include <time.h>

#define N_JOBS 24

struct result {
    int64_t n_out;
    int32_t ids[128];
    float lp[128];
    int32_t top[128 * 3];
    char text[512];
    enum srv_finish finish;
    int64_t n_cached, draft_n, draft_acc;
};

/* Prompts share prefixes (a cache hit at a different split point for each) and repeat
 * themselves (drafts). Bias 1 forces 'a' (every draft accepted), bias 2 lifts 'a' and
 * 'b' over every other token (a random a/b text: drafts partly accepted). */
static struct srv_job *make_job(int k, struct kn_err *err)
{
    static const char base[] = "the cat sat on the mat. the cat sat on the mat. the cat sat on "
                               "the hat. the dog sat on the log. the dog sat on the mat. ab ab";
    int len = 12 + (k * 7) % (int)(sizeof base - 13);
    int32_t ids[256];
    for (int i = 0; i < len; i++)
        ids[i] = (uint8_t)base[i];
    if (k % 5 == 4) /* a different ending: the cache holds only part of it */
        ids[len - 1] = 'q';
    struct srv_job *j;
    if (srv_job_new(&j, ids, (size_t)len, err) != KN_OK)
        return NULL;
    j->max_tokens = 20 + (k * 13) % 60;
    j->sampling.temperature = k % 4 == 0 ? 0.0f : k % 4 == 1 ? 0.8f : k % 4 == 2 ? 1.0f : 1.3f;
    j->sampling.seed = 77 + (uint64_t)k;
    j->sampling.repeat_penalty = k % 6 == 5 ? 1.1f : 1.0f;
    j->sampling.top_k = k % 4 == 1 ? 0 : 40;
    int bias = k % 3;
    if (bias >= 1) {
        j->sampling.logit_bias[0] = (struct sample_bias){'a', 20.0f};
        j->sampling.n_logit_bias = 1;
    }
    if (bias == 2) {
        j->sampling.logit_bias[0].bias = 9.0f;
        j->sampling.logit_bias[1] = (struct sample_bias){'b', 9.0f};
        j->sampling.n_logit_bias = 2;
    }
    if (k % 7 == 6) { /* Mirostat: sampler state that must advance by accepted tokens only */
        j->sampling.mirostat = 2;
        j->sampling.mirostat_tau = 3.0f;
        j->sampling.mirostat_eta = 0.2f;
    }
    /* Stop strings met inside a run of accepted drafts end the answer exactly there. */
    const char *stop = k % 6 == 4 ? "aaaaaaa" : k % 5 == 2 ? "e " : NULL;
    if (stop) {
        j->stop[0] = strdup(stop);
        j->stop_len[0] = strlen(stop);
        j->n_stop = 1;
    }
    j->want_logprobs = true;
    j->n_top = 3;
    if (srv_job_alloc_results(j, 4, err) != KN_OK)
        return NULL;
    return j;
}

static void collect(struct convoy *c, struct srv_job *j, struct result *r)
{
    while (!convoy_wait(c, j, INT64_MAX, 1000)) {
    }
    convoy_lock(c);
    memset(r, 0, sizeof *r);
    r->n_out = j->n_out;
    memcpy(r->ids, j->out_ids, (size_t)j->n_out * sizeof *r->ids);
    memcpy(r->lp, j->out_lp, (size_t)j->n_out * sizeof *r->lp);
    memcpy(r->top, j->top_ids, (size_t)j->n_out * 3 * sizeof *r->top);
    snprintf(r->text, sizeof r->text, "%s", j->text);
    r->finish = j->finish;
    r->n_cached = j->n_cached;
    r->draft_n = j->draft_n;
    r->draft_acc = j->draft_n_accepted;
    convoy_unlock(c);
}

static bool same(const struct result *a, const struct result *b)
{
    return a->n_out == b->n_out && !memcmp(a->ids, b->ids, (size_t)a->n_out * sizeof(int32_t)) &&
           !memcmp(a->lp, b->lp, (size_t)a->n_out * sizeof(float)) &&
           !memcmp(a->top, b->top, (size_t)a->n_out * 3 * sizeof(int32_t)) &&
           strcmp(a->text, b->text) == 0 && a->finish == b->finish;
}

/* Runs every job on a fresh convoy: one at a time (crowd false) or all at once. */
static void run_all(int n_slots, bool crowd, const struct convoy_speed *sp, struct result *out,
                    struct convoy_stats *stats)
{
    struct kn_err err = {0};
    struct srv_backend b;
    CHECK(srv_toy_backend(&b, n_slots, 160, crowd ? 100 : 0, &err) == KN_OK);
    struct convoy *c;
    CHECK(convoy_start_speed(&c, &b, N_JOBS, sp, &err) == KN_OK);
    struct srv_job *jobs[N_JOBS];
    for (int k = 0; k < N_JOBS; k++) {
        jobs[k] = make_job(k, &err);
        CHECK(jobs[k] != NULL);
        if (!crowd) {
            CHECK(convoy_submit(c, jobs[k], &err) == KN_OK);
            collect(c, jobs[k], &out[k]);
        }
    }
    if (crowd) {
        for (int k = 0; k < N_JOBS; k++)
            CHECK(convoy_submit(c, jobs[k], &err) == KN_OK);
        for (int k = 0; k < N_JOBS; k++)
            collect(c, jobs[k], &out[k]);
    }
    convoy_get_stats(c, stats);
    convoy_stop(c);
    convoy_free(c);
    for (int k = 0; k < N_JOBS; k++)
        convoy_release(NULL, jobs[k]);
    b.free(b.ctx);
}

static void test_invariance(void)
{
    static struct result ref[N_JOBS], got[N_JOBS];
    struct convoy_stats st;
    const struct convoy_speed plain = {.no_draft = true, .no_warm_start = true};
    run_all(1, false, &plain, ref, &st);
    CHECK(st.draft_proposed == 0 && st.prompt_tokens_reused == 0);
    int distinct = 0, stopped = 0;
    for (int k = 1; k < N_JOBS; k++) {
        distinct += strcmp(ref[k].text, ref[k - 1].text) != 0;
        stopped += (k % 6 == 4 || k % 5 == 2) && ref[k].finish == SRV_FINISH_STOP;
    }
    CHECK(distinct > N_JOBS / 2);
    CHECK(stopped >= 4); /* the stop strings were met */
    /* job 4 writes only a: the stop string (cut from the text) ends it at token 7 */
    CHECK(ref[4].n_out == 7 && ref[4].text[0] == 0 && ref[4].finish == SRV_FINISH_STOP);

    const struct convoy_speed configs[] = {
        {0},                                  /* everything on */
        {.no_warm_start = true},              /* RAD-1 only */
        {.no_draft = true},                   /* Warm Start only */
        {.draft_max = 2},                     /* short drafts */
    };
    for (size_t ci = 0; ci < sizeof configs / sizeof configs[0]; ci++) {
        for (int crowd = 0; crowd < 2; crowd++) {
            run_all(crowd ? 4 : 1, crowd, &configs[ci], got, &st);
            int all = 0, some = 0, none = 0, hits = 0;
            for (int k = 0; k < N_JOBS; k++) {
                CHECKF(same(&ref[k], &got[k]), "config %zu crowd %d job %d differs", ci, crowd, k);
                all += got[k].draft_n > 0 && got[k].draft_acc == got[k].draft_n;
                some += got[k].draft_acc > 0 && got[k].draft_acc < got[k].draft_n;
                none += got[k].draft_n > 0 && got[k].draft_acc == 0;
                hits += got[k].n_cached > 0;
            }
            if (!configs[ci].no_draft) {
                /* Every kind of verification outcome happened, and was counted. */
                CHECKF(all > 0 && some > 0 && none > 0, "config %zu: all %d some %d none %d", ci,
                       all, some, none);
                CHECK(st.draft_accepted > 0 && st.draft_accepted < st.draft_proposed);
            } else {
                CHECK(st.draft_proposed == 0);
            }
            if (!configs[ci].no_warm_start && !crowd)
                CHECKF(hits > N_JOBS / 2, "config %zu: %d cache hits", ci, hits);
            if (configs[ci].no_warm_start)
                CHECK(hits == 0 && st.prompt_tokens_reused == 0);
        }
    }
}

/* Zero Wait: a prefill fills the cache, so the real job computes only its last prompt
 * token and still gives the cold answer; a prefill gives its slot up to a waiting job. */
static void test_prefill(void)
{
    struct kn_err err = {0};
    static struct result cold, warm;
    const struct convoy_speed plain = {.no_draft = true, .no_warm_start = true};
    struct srv_backend b;
    CHECK(srv_toy_backend(&b, 1, 160, 0, &err) == KN_OK);
    struct convoy *c;
    CHECK(convoy_start_speed(&c, &b, 4, &plain, &err) == KN_OK);
    struct srv_job *j = make_job(20, &err);
    CHECK(convoy_submit(c, j, &err) == KN_OK);
    collect(c, j, &cold);
    convoy_stop(c);
    convoy_free(c);
    convoy_release(NULL, j);
    b.free(b.ctx);

    /* Two slots: the prefill runs in one, the job lands in the other (cache restore). */
    CHECK(srv_toy_backend(&b, 2, 160, 0, &err) == KN_OK);
    CHECK(convoy_start_speed(&c, &b, 4, NULL, &err) == KN_OK);
    j = make_job(20, &err);
    struct srv_job *pj;
    CHECK(srv_job_new(&pj, j->prompt, j->n_prompt, &err) == KN_OK);
    pj->prefill = true;
    CHECK(convoy_submit_prefill(c, pj, &err) == KN_OK);
    CHECK(convoy_wait(c, pj, INT64_MAX, 10000));
    CHECK(pj->finish == SRV_FINISH_STOP && !pj->preempted && pj->n_fed == (int64_t)pj->n_prompt);
    /* occupy the slot that holds the prefill, so the job must use the shared cache */
    struct srv_job *other = make_job(3, &err);
    other->prompt[0] = 'X';
    CHECK(convoy_submit(c, other, &err) == KN_OK);
    CHECK(convoy_submit(c, j, &err) == KN_OK);
    collect(c, j, &warm);
    CHECK(same(&cold, &warm));
    CHECK_EQ_INT(warm.n_cached, (int64_t)j->n_prompt - 1);
    struct convoy_stats st;
    convoy_get_stats(c, &st);
    CHECK(st.prefills_done == 1 && st.prefill_tokens == pj->n_prompt);
    struct srv_cache_stats ks;
    b.cache_stats(b.ctx, &ks);
    CHECK(ks.hits >= 1 && ks.stores >= 1);
    convoy_wait(c, other, INT64_MAX, 10000);
    convoy_stop(c);
    convoy_free(c);
    convoy_release(NULL, j);
    convoy_release(NULL, pj);
    convoy_release(NULL, other);
    b.free(b.ctx);

    /* One slow slot: a long prefill is running when a job arrives; the prefill stops,
     * keeps what it evaluated, and the job gets the cold answer. */
    CHECK(srv_toy_backend(&b, 1, 160, 50000, &err) == KN_OK);
    b.max_batch = 8;
    CHECK(convoy_start_speed(&c, &b, 4, NULL, &err) == KN_OK);
    int32_t longp[150];
    for (int i = 0; i < 150; i++)
        longp[i] = 'a' + i % 26;
    CHECK(srv_job_new(&pj, longp, 150, &err) == KN_OK);
    pj->prefill = true;
    CHECK(convoy_submit_prefill(c, pj, &err) == KN_OK);
    /* Submit the job as soon as the prefill has begun (not after a fixed sleep: on a
     * loaded machine a sleeping test thread woke after the whole prefill had finished).
     * The prefill needs 19 steps of at least 50 ms, so the job arrives mid-way. */
    for (;;) {
        convoy_lock(c);
        bool begun = pj->n_fed > 0 || pj->state == SRV_JOB_DONE;
        convoy_unlock(c);
        if (begun)
            break;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    j = make_job(20, &err);
    CHECK(convoy_submit(c, j, &err) == KN_OK);
    collect(c, j, &warm);
    CHECK(same(&cold, &warm));
    CHECK(convoy_wait(c, pj, INT64_MAX, 10000));
    CHECK(pj->preempted && pj->n_fed < 150);
    convoy_get_stats(c, &st);
    CHECK(st.prefills_preempted == 1);
    convoy_stop(c);
    convoy_free(c);
    convoy_release(NULL, j);
    convoy_release(NULL, pj);
    b.free(b.ctx);
}

int main(void)
{
    test_invariance();
    test_prefill();
    CHECK_DONE();
}
