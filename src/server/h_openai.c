/* h_openai.c: OpenAI's endpoints: POST /v1/chat/completions and /v1/completions (plain
 * answers here, streams in sse.c), GET /v1/models and POST /v1/embeddings (embeddings.c).
 * The request bodies are parsed in api.c and the answers written in api_response.c.
 *
 * A plain completion waits for its jobs inside the handler, in short slices, so that a
 * client that hangs up is noticed (its jobs are cancelled and their slots freed). */
#include "srv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

/* ---------------------------------------------------------------- receipts */

struct json_value *srv_make_receipt(struct srv *s, const struct srv_request *r,
                                    const struct srv_job *j, struct srv_error *e)
{
    if (!r->want_receipt || !s->cfg.receipt)
        return NULL;
    /* What engine_generate returns for the same request: it stops before an
     * end-of-generation token, so that token is not an output. */
    int64_t n_out = j->n_out;
    if (n_out > 0 && j->finish == SRV_FINISH_STOP && s->b->is_eog(s->b->ctx, j->out_ids[n_out - 1]))
        n_out--;
    int64_t max_tokens = r->max_tokens ? r->max_tokens
                                       : (s->cfg.default_max_tokens ? s->cfg.default_max_tokens : -1);
    struct srv_receipt_input in = {
        .renderer = r->kind == SRV_KIND_CHAT ? s->b->renderer : NULL,
        .tools = r->tools,
        .kwargs = r->tmpl_kwargs,
        .render_now = r->render_now,
        .chat = r->kind == SRV_KIND_CHAT,
        .prompt_is_text = r->prompt_text != NULL,
        .think_open = r->think_open,
        .think_close = r->think_close,
        .think_inside = r->think_inside,
        .model_path = s->b->model_path,
        .device_class = s->b->device_class,
        .device_name = s->b->device_name,
        .numerics = s->b->numerics,
        .gpu_layers = s->b->gpu_layers,
        .n_ctx = s->b->n_ctx,
        .cache_type = s->b->cache_type,
        .input = r->input,
        .prompt = j->prompt,
        .n_prompt = j->n_prompt,
        .sampling = &j->sampling,
        .seed_given = j->seed_given,
        .max_tokens = max_tokens,
        .stop = (const char *const *)r->stop,
        .n_stop = r->n_stop,
        .grammar = r->grammar_text,
        .response_format = r->response_format,
        .finish = srv_finish_str(j->finish),
        .text = j->text,
        .text_len = j->text_len,
        .out_ids = j->out_ids,
        .n_out = n_out,
    };
    /* output.text is the answer without its reasoning, as the client's content. */
    char *content = NULL;
    size_t content_len = api_answer_content(r, j, &content);
    if (r->think_open && !content) {
        srv_error_set(e, 500, "server_error", NULL, "receipt", "out of memory");
        return NULL;
    }
    if (content) {
        in.text = content;
        in.text_len = content_len;
    }
    struct json_value *out = NULL;
    struct kn_err err = {0};
    enum kn_status rst = s->cfg.receipt(s->cfg.receipt_ctx, &in, &out, &err);
    free(content);
    if (rst != KN_OK) {
        srv_error_set(e, 500, "server_error", "receipt_failed", "receipt",
                      "the receipt could not be made: %.400s", err.msg);
        return NULL;
    }
    return out;
}

/* ---------------------------------------------------------------- completions */

static void random_id(char *out, size_t cap, const char *prefix)
{
    uint8_t r[12];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        uint64_t t = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)out;
        memcpy(r, &t, sizeof t);
        memset(r + 8, 0x5a, 4);
    }
    int k = snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && (size_t)k + 2 < cap; i++)
        k += snprintf(out + k, cap - (size_t)k, "%02x", r[i]);
}


/* Cancels and releases the jobs of a request (those not submitted: released only). */
static void jobs_drop(struct srv *s, struct srv_job **jobs, int n, int n_submitted)
{
    for (int i = 0; i < n; i++) {
        if (!jobs[i])
            continue;
        if (i < n_submitted)
            convoy_cancel(s->convoy, jobs[i]);
        convoy_release(i < n_submitted ? s->convoy : NULL, jobs[i]);
        jobs[i] = NULL;
    }
}

/* The job of choice i: the request's prompt and settings with the choice's seed
 * (api_choice_seed), its own grammar state. Choice 0 takes the request's compiled
 * grammar; the others compile the same GBNF text again (a job owns its grammar). */
static enum kn_status job_for_choice(struct srv *s, struct srv_request *r, int i,
                                     struct srv_job **out, struct kn_err *err)
{
    struct srv_job *j = NULL;
    *out = NULL;
    enum kn_status st = srv_job_new(&j, r->ids, r->n_ids, err);
    if (st != KN_OK)
        return st;
    int64_t room = s->b->n_ctx - (int64_t)r->n_ids + 1; /* the last token is never fed */
    int64_t want = r->max_tokens ? r->max_tokens
                                 : (s->cfg.default_max_tokens ? s->cfg.default_max_tokens : room);
    j->max_tokens = want < room ? want : room;
    j->sampling = r->sampling;
    j->sampling.seed = api_choice_seed(r, i);
    j->seed_given = r->seed_given;
    j->ignore_eos = r->ignore_eos;
    j->want_logprobs = r->logprobs;
    j->n_top = r->top_logprobs;
    for (int k = 0; k < r->n_stop; k++) {
        j->stop[k] = strdup(r->stop[k]);
        j->stop_len[k] = r->stop_len[k];
        j->n_stop = k + 1;
        if (!j->stop[k])
            break;
    }
    if (r->grammar) { /* the job takes a grammar, with a state at its start */
        if (i == 0) {
            j->grammar = r->grammar;
            r->grammar = NULL;
        } else if ((st = grammar_parse(r->grammar_text, strlen(r->grammar_text), "root",
                                       &j->grammar, err)) != KN_OK) {
            convoy_release(NULL, j);
            return st;
        }
    }
    if (j->grammar) {
        j->gvocab = s->gvocab;
        if ((st = grammar_state_init(&j->gstate, j->grammar, err)) != KN_OK) {
            convoy_release(NULL, j);
            return st;
        }
    }
    if (j->n_stop != r->n_stop || srv_job_alloc_results(j, s->b->max_piece, err) != KN_OK) {
        convoy_release(NULL, j);
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    }
    *out = j;
    return KN_OK;
}

/* POST /v1/chat/completions and /v1/completions: one job per choice; the answer when
 * they are all done, or a stream (sse.c). */
static enum MHD_Result completion(struct srv_call *c, enum srv_kind kind)
{
    struct srv *s = c->s;
    struct MHD_Connection *conn = c->conn;
    struct srv_request r;
    struct srv_error e;
    if (api_parse_completion(s, kind, c->body, &r, &e) || api_prepare_prompt(s, &r, &e)) {
        srv_request_free(&r);
        return srv_send_error(c, &e);
    }

    /* One job per choice ("n"), each in its own slot, submitted together. */
    struct kn_err err = {0};
    struct srv_job *jobs[SRV_MAX_CHOICES] = {0};
    const int n = r.n_choices;
    for (int i = 0; i < n; i++) {
        enum kn_status st = job_for_choice(s, &r, i, &jobs[i], &err);
        if (st != KN_OK) {
            jobs_drop(s, jobs, n, 0);
            srv_request_free(&r);
            if (st == KN_E_LIMIT) /* the grammar is past the matcher's bounds (grammar.h) */
                return srv_fail(c, 400, "invalid_request_error", "grammar_too_complex",
                            "%s", err.msg);
            return srv_fail(c, 500, "server_error", NULL, "%s", err.msg);
        }
    }
    for (int i = 0; i < n; i++) {
        enum kn_status st = convoy_submit(s->convoy, jobs[i], &err);
        if (st != KN_OK) {
            jobs_drop(s, jobs, n, i);
            srv_request_free(&r);
            if (st == KN_E_LIMIT)
                return srv_fail(c, 503, "server_error", "server_busy",
                            "the server is busy: %s; retry in a moment", err.msg);
            return srv_fail(c, 503, "server_error", "shutting_down", "%s", err.msg);
        }
    }

    char id[64];
    random_id(id, sizeof id, kind == SRV_KIND_CHAT ? "chatcmpl-" : "cmpl-");
    int64_t created = (int64_t)time(NULL);

    if (r.stream) {
        *c->n_in = (int64_t)r.n_ids;
        bool taken = false;
        enum MHD_Result ok = srv_stream_answer(c, &r, jobs, n, id, created, &taken);
        if (!taken) {
            jobs_drop(s, jobs, n, n);
            srv_request_free(&r);
        }
        return ok;
    }

    /* Plain: wait for every choice, watching for a client that hangs up. */
    for (int i = 0; i < n; i++)
        while (!convoy_wait(s->convoy, jobs[i], INT64_MAX, 100)) {
            if (srv_client_gone(conn)) {
                jobs_drop(s, jobs, n, n);
                srv_request_free(&r);
                return MHD_NO;
            }
        }
    enum MHD_Result res = MHD_NO;
    const struct srv_job *bad = NULL;
    convoy_lock(s->convoy);
    for (int i = 0; i < n && !bad; i++)
        if (jobs[i]->finish == SRV_FINISH_ERROR || jobs[i]->finish == SRV_FINISH_CANCELLED)
            bad = jobs[i];
    convoy_unlock(s->convoy);
    if (bad) {
        if (bad->finish == SRV_FINISH_ERROR && bad->error_is_request)
            res = srv_fail(c, 400, "invalid_request_error", "grammar_dead_end", "%s",
                       bad->error);
        else if (bad->finish == SRV_FINISH_ERROR)
            res = srv_fail(c, 500, "server_error", "generation_failed", "%s", bad->error);
        else
            res = srv_fail(c, 503, "server_error", "shutting_down",
                       "the server is shutting down");
    } else {
        /* Done: the results are final, read them without holding up the scheduler. */
        struct json_value *receipts[SRV_MAX_CHOICES] = {0};
        e.status = 0;
        for (int i = 0; i < n && !e.status; i++)
            receipts[i] = srv_make_receipt(s, &r, jobs[i], &e);
        char *body_out = e.status ? NULL
                                  : api_completion_response(s, &r, jobs, n, id, created, receipts);
        for (int i = 0; i < n; i++)
            json_free(receipts[i]); /* those not taken */
        res = e.status ? srv_send_error(c, &e) : srv_send_json(c, 200, body_out);
        *c->n_in = (int64_t)r.n_ids;
        for (int i = 0; i < n; i++)
            *c->n_out += jobs[i]->n_out;
    }
    jobs_drop(s, jobs, n, n);
    srv_request_free(&r);
    return res;
}

enum MHD_Result srv_handle_chat(struct srv_call *c)
{
    return completion(c, SRV_KIND_CHAT);
}

enum MHD_Result srv_handle_completions(struct srv_call *c)
{
    return completion(c, SRV_KIND_COMPLETION);
}

/* ---------------------------------------------------------------- models, embeddings */

enum MHD_Result srv_handle_models(struct srv_call *c)
{
    const struct srv *s = c->s;
    char *out = NULL;
    if (asprintf(&out,
                 "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\",\"created\":0,"
                 "\"owned_by\":\"kinetic\",\"meta\":{\"n_ctx\":%lld,\"n_vocab\":%d,\"slots\":%d}}]}",
                 s->model_id, (long long)s->b->n_ctx, (int)s->b->n_vocab, s->b->n_slots) < 0)
        out = NULL;
    return srv_send_json(c, 200, out);
}

/* POST /v1/embeddings (embeddings.c). */
enum MHD_Result srv_handle_embeddings(struct srv_call *c)
{
    struct srv_error e = {0};
    char *out = NULL;
    if (api_embeddings(c->s, c->body, &out, &e))
        return srv_send_error(c, &e);
    return srv_send_json(c, 200, out);
}
