/* h_native.c: llama-server's endpoints and Kinetic's own: POST /tokenize, /detokenize,
 * /apply-template, /prefill (Zero Wait) and /verify-receipt; GET /props and /slots. */
#include "srv_internal.h"
#include "receipt/receipt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- slots and props */

/* GET /slots in llama-server's shape (an array, one object per slot); ?fail_on_no_slot=1
 * answers 503 when every slot is busy. The prompt and generated text are not shown. */
enum MHD_Result srv_handle_slots(struct srv_call *c)
{
    struct srv *s = c->s;
    struct MHD_Connection *conn = c->conn;
    struct convoy_stats cs;
    convoy_get_stats(s->convoy, &cs);
    const int n = s->b->n_slots;
    struct convoy_slot_info *info = calloc((size_t)n, sizeof *info);
    if (!info)
        return MHD_NO;
    convoy_get_slots(s->convoy, info);
    int idle = 0;
    for (int i = 0; i < n; i++)
        idle += !info[i].busy;
    const char *fail_on = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "fail_on_no_slot");
    if (fail_on && *fail_on && strcmp(fail_on, "0") != 0 && strcmp(fail_on, "false") != 0 && idle == 0) {
        free(info);
        return srv_fail(c, 503, "unavailable_error", "no_slot_available",
                    "no slot available: all %d are busy", n);
    }
    struct json_value *arr = json_new_array();
    bool ok = arr != NULL;
    for (int i = 0; ok && i < n; i++) {
        const struct convoy_slot_info *in = &info[i];
        struct json_value *o = json_new_object();
        ok = o && json_array_push(arr, o, NULL) == KN_OK; /* the array owns o */
        if (!ok)
            break;
#define SET(obj, key, val) (ok = ok && json_object_set((obj), (key), (val), NULL) == KN_OK)
        SET(o, "id", json_new_int(i));
        SET(o, "id_task", json_new_int(in->has_job ? (int64_t)in->task : -1));
        SET(o, "n_ctx", json_new_int(s->b->n_ctx));
        SET(o, "speculative", json_new_bool(cs.draft_max > 0));
        SET(o, "is_processing", json_new_bool(in->busy));
        SET(o, "kv_positions", json_new_int(in->positions));
        if (!in->has_job)
            continue;
        const struct sample_params *sp = &in->sampling;
        struct json_value *params = json_new_object();
        SET(o, "params", params);
        if (!ok)
            break;
        /* The sampling settings as the settings table writes them (the receipt's rows and
         * the secondary ones that are on), max_tokens the job's own limit; then
         * llama-server's other fields. */
        struct sample_params shown = *sp;
        shown.n_predict = in->max_tokens;
        ok = ok && sample_params_json_write(&shown, params, SAMPLE_JSON_BASE | SAMPLE_JSON_EXTRA,
                                            NULL) == KN_OK;
        SET(params, "n_predict", json_new_int(in->max_tokens));
        SET(params, "ignore_eos", json_new_bool(in->ignore_eos));
        SET(params, "n_probs", json_new_int(in->n_top));
        SET(params, "prefill", json_new_bool(in->prefill));
        struct json_value *next = json_new_object();
        SET(o, "next_token", next);
        if (!ok)
            break;
        SET(next, "has_next_token", json_new_bool(in->busy));
        SET(next, "has_new_line", json_new_bool(false));
        SET(next, "n_remain", json_new_int(in->busy ? in->max_tokens - in->n_decoded : 0));
        SET(next, "n_decoded", json_new_int(in->n_decoded));
        SET(o, "n_prompt_tokens", json_new_int(in->n_prompt));
        SET(o, "n_prompt_tokens_cached", json_new_int(in->n_cached));
#undef SET
    }
    free(info);
    return srv_send_json(c, 200, api_json_finish(arr, ok));
}

/* A new empty object set into parent under key (parent owns it), or NULL when out of memory. */
static struct json_value *props_child(struct json_value *parent, const char *key)
{
    struct json_value *o = json_new_object();
    return o && json_object_set(parent, key, o, NULL) == KN_OK ? o : NULL;
}

/* GET /props in llama-server's shape: default_generation_settings.params is what a request
 * that names no sampling setting gets, every row of the settings table (sample_params_default)
 * as sample_params_json_write writes it, with the server's own two rules on top: n_predict
 * and max_tokens the --max-tokens default (-1 and null: the rest of the context), and seed -1
 * (each request without one draws a fresh seed). Kinetic adds "receipts": whether
 * "receipt": true is answered. The web page fills its fields from here. */
enum MHD_Result srv_handle_props(struct srv_call *c)
{
    struct srv *s = c->s;
    struct convoy_stats cs;
    convoy_get_stats(s->convoy, &cs);
    struct sample_params dflt;
    sample_params_default(&dflt);
    dflt.n_predict = s->cfg.default_max_tokens ? s->cfg.default_max_tokens : -1;
    const struct chat_renderer *cr = s->b->renderer;
    struct json_value *root = json_new_object();
    struct json_value *gen = root ? props_child(root, "default_generation_settings") : NULL;
    struct json_value *params = gen ? props_child(gen, "params") : NULL;
    bool ok = params != NULL &&
              sample_params_json_write(&dflt, params, SAMPLE_JSON_ALL, NULL) == KN_OK;
    if (ok)
        json_free(json_object_take(params, "seed"));
#define SET(obj, key, val) (ok = ok && json_object_set((obj), (key), (val), NULL) == KN_OK)
    SET(params, "seed", json_new_int(-1));
    SET(params, "n_predict", json_new_int(dflt.n_predict));
    SET(gen, "id", json_new_int(0));
    SET(gen, "id_task", json_new_int(-1));
    SET(gen, "n_ctx", json_new_int(s->b->n_ctx));
    SET(gen, "speculative", json_new_bool(cs.draft_max > 0));
    SET(gen, "is_processing", json_new_bool(false));
    SET(root, "total_slots", json_new_int(s->b->n_slots));
    SET(root, "model_path", json_new_string(s->b->model_path ? s->b->model_path : s->b->name));
    SET(root, "model_alias", json_new_string(s->model_id));
    SET(root, "chat_template",
        json_new_string(cr && cr->engine == CHAT_ENGINE_JINJA && cr->src ? cr->src : ""));
    SET(root, "chat_format", json_new_string(s->b->chat_format ? s->b->chat_format : ""));
    struct json_value *modal = ok ? props_child(root, "modalities") : NULL;
    ok = ok && modal;
    SET(modal, "vision", json_new_bool(false));
    SET(modal, "audio", json_new_bool(false));
    SET(root, "build_info", json_new_string(s->cfg.build ? s->cfg.build : ""));
    SET(root, "receipts", json_new_bool(s->cfg.receipt != NULL)); /* Kinetic's own */
#undef SET
    return srv_send_json(c, 200, api_json_finish(root, ok));
}

enum MHD_Result srv_handle_tokenize(struct srv_call *c)
{
    struct srv *s = c->s;
    const struct json_value *body = c->body;
    const struct json_value *content = json_get(body, "content");
    if (!json_is(content, JSON_STRING))
        return srv_fail(c, 400, "invalid_request_error", "invalid_value",
                    "'content' must be a string");
    bool add_special = false, parse_special = true;
    const struct json_value *v;
    if ((v = json_get(body, "add_special")) && !json_is(v, JSON_NULL)) {
        if (!json_is(v, JSON_BOOL))
            return srv_fail(c, 400, "invalid_request_error", "invalid_value",
                        "'add_special' must be true or false");
        add_special = v->u.boolean;
    }
    if ((v = json_get(body, "parse_special")) && !json_is(v, JSON_NULL)) {
        if (!json_is(v, JSON_BOOL))
            return srv_fail(c, 400, "invalid_request_error", "invalid_value",
                        "'parse_special' must be true or false");
        parse_special = v->u.boolean;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    struct kn_err err = {0};
    if (s->b->tokenize(s->b->ctx, content->u.string.s, content->u.string.len, add_special, parse_special, &ids,
                       &n, &err) != KN_OK)
        return srv_fail(c, 400, "invalid_request_error", "invalid_value", "%s",
                    err.msg);
    struct json_value *root = json_new_object(), *arr = json_new_array();
    bool ok = root && arr;
    for (size_t i = 0; ok && i < n; i++)
        ok = json_array_push(arr, json_new_int(ids[i]), NULL) == KN_OK;
    free(ids);
    if (ok)
        ok = json_object_set(root, "tokens", arr, NULL) == KN_OK;
    else
        json_free(arr);
    return srv_send_json(c, 200, api_json_finish(root, ok));
}

enum MHD_Result srv_handle_detokenize(struct srv_call *c)
{
    struct srv *s = c->s;
    const struct json_value *body = c->body;
    const struct json_value *t = json_get(body, "tokens");
    if (!json_is(t, JSON_ARRAY))
        return srv_fail(c, 400, "invalid_request_error", "invalid_value",
                    "'tokens' must be an array of token ids");
    size_t n = json_len(t), cap = 0;
    if (!kn_mul_size(n, s->b->max_piece, &cap) || !kn_add_size(cap, 1, &cap))
        return srv_fail(c, 400, "invalid_request_error", "invalid_value",
                    "too many tokens");
    char *text = malloc(cap);
    if (!text)
        return MHD_NO;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t id;
        if (!json_int(json_at(t, i), &id) || id < 0 || id >= s->b->n_vocab) {
            free(text);
            return srv_fail(c, 400, "invalid_request_error", "invalid_value",
                        "tokens[%zu] must be a token id between 0 and %d", i,
                        (int)s->b->n_vocab - 1);
        }
        size_t len;
        const char *p = s->b->piece(s->b->ctx, (int32_t)id, &len);
        memcpy(text + k, p, len);
        k += len;
    }
    size_t m = 0;
    char *clean = json_utf8_sanitize(text, k, &m);
    free(text);
    struct json_value *root = json_new_object();
    bool ok = clean != NULL;
    api_json_set(root, "content", clean ? json_new_stringn(clean, m) : NULL, &ok);
    free(clean);
    return srv_send_json(c, 200, api_json_finish(root, ok));
}

/* POST /apply-template: the prompt a chat completion with this body would get (as
 * llama-server's endpoint of the same name). */
enum MHD_Result srv_handle_apply_template(struct srv_call *c)
{
    struct srv *s = c->s;
    const struct json_value *body = c->body;
    struct srv_error e = {0};
    char *out = NULL;
    int st = api_apply_template(s, body, &out, &e);
    if (st)
        return srv_send_error(c, &e);
    return srv_send_json(c, 200, out);
}

/* ---------------------------------------------------------------- speed features */

/* POST /prefill (Zero Wait): a chat completions or completions body ("messages" or
 * "prompt"); evaluates its prompt into the prompt cache at low priority and answers when
 * that is done: {"tokens": positions now cached, "prompt_tokens", "cache_n": positions
 * that were cached already, "preempted": gave its slot up to a request first}. */
enum MHD_Result srv_handle_prefill(struct srv_call *c)
{
    struct srv *s = c->s;
    struct MHD_Connection *conn = c->conn;
    const struct json_value *body = c->body;
    struct srv_request r;
    struct srv_error e;
    enum srv_kind kind = json_get(body, "messages") ? SRV_KIND_CHAT : SRV_KIND_COMPLETION;
    if (api_parse_completion(s, kind, body, &r, &e) || api_prepare_prompt(s, &r, &e)) {
        srv_request_free(&r);
        return srv_send_error(c, &e);
    }
    char *out = NULL;
    if (s->cfg.no_zero_wait || s->cfg.speed.no_warm_start) {
        if (asprintf(&out, "{\"object\":\"prefill\",\"tokens\":0,\"prompt_tokens\":%zu,"
                           "\"cache_n\":0,\"preempted\":false,\"enabled\":false}",
                     r.n_ids) < 0)
            out = NULL;
        srv_request_free(&r);
        return srv_send_json(c, 200, out);
    }
    struct kn_err err = {0};
    struct srv_job *j = NULL;
    if (srv_job_new(&j, r.ids, r.n_ids, &err) != KN_OK) {
        srv_request_free(&r);
        return srv_fail(c, 500, "server_error", NULL, "%s", err.msg);
    }
    srv_request_free(&r);
    j->prefill = true;
    j->max_tokens = 1;
    enum kn_status st = convoy_submit_prefill(s->convoy, j, &err);
    if (st != KN_OK) {
        convoy_release(NULL, j);
        if (st == KN_E_LIMIT)
            return srv_fail(c, 503, "server_error", "server_busy",
                        "the server is busy: %s; retry in a moment", err.msg);
        return srv_fail(c, 503, "server_error", "shutting_down", "%s", err.msg);
    }
    while (!convoy_wait(s->convoy, j, INT64_MAX, 100)) {
        if (srv_client_gone(conn)) {
            convoy_cancel(s->convoy, j);
            convoy_release(s->convoy, j);
            return MHD_NO;
        }
    }
    enum MHD_Result res;
    if (j->finish == SRV_FINISH_ERROR)
        res = srv_fail(c, 500, "server_error", "generation_failed", "%s", j->error);
    else if (j->finish == SRV_FINISH_CANCELLED)
        res = srv_fail(c, 503, "server_error", "shutting_down",
                   "the server is shutting down");
    else {
        /* Done: the scheduler no longer writes the job. */
        if (asprintf(&out, "{\"object\":\"prefill\",\"tokens\":%lld,\"prompt_tokens\":%zu,"
                           "\"cache_n\":%lld,\"preempted\":%s,\"enabled\":true}",
                     (long long)j->n_fed, j->n_prompt, (long long)j->n_cached,
                     j->preempted ? "true" : "false") < 0)
            out = NULL;
        res = srv_send_json(c, 200, out);
    }
    convoy_release(s->convoy, j);
    return res;
}

/* POST /verify-receipt: reruns a receipt (the body, as sent) as `kinetic verify-receipt`
 * does, with this server's model file, and answers {"verified", "exit_code", "report"}.
 * One at a time and SRV_VERIFY_INTERVAL_S apart (429 otherwise: a rerun costs a whole
 * generation); --no-verify turns it off. */
enum MHD_Result srv_handle_verify(struct srv_call *c)
{
    struct srv *s = c->s;
    if (s->cfg.no_verify)
        return srv_fail(c, 403, "permission_error", "verify_disabled",
                    "receipt verification is turned off on this server (--no-verify)");
    if (!s->b->model_path || !s->cfg.receipt)
        return srv_fail(c, 400, "invalid_request_error", "unsupported_value",
                    "this server makes no receipts (the toy model), so it verifies none");
    if (pthread_mutex_trylock(&s->vmu) != 0)
        return srv_fail(c, 429, "rate_limit_error", "verify_busy",
                    "a receipt is being verified; retry in a few seconds");
    double wait = s->verify_last + SRV_VERIFY_INTERVAL_S - kn_now();
    if (s->verify_last > 0 && wait > 0) {
        pthread_mutex_unlock(&s->vmu);
        return srv_fail(c, 429, "rate_limit_error", "verify_rate",
                    "one verification per %d seconds; retry in %.1f s", SRV_VERIFY_INTERVAL_S, wait);
    }
    char *report = NULL;
    size_t report_len = 0;
    FILE *out = open_memstream(&report, &report_len);
    int rc = -1;
    if (out) {
        struct receipt_verify_opts o = {.model = s->b->model_path, .threads = 2};
        rc = receipt_verify_text(c->raw, c->raw_len, NULL, &o, out);
        fclose(out);
    }
    s->verify_last = kn_now();
    pthread_mutex_unlock(&s->vmu);
    if (rc < 0) {
        free(report);
        return srv_fail(c, 500, "server_error", NULL,
                    "out of memory starting the verification");
    }
    struct json_value *root = json_new_object();
    bool ok = root && json_object_set(root, "verified", json_new_bool(rc == 0), NULL) == KN_OK &&
              json_object_set(root, "exit_code", json_new_int(rc), NULL) == KN_OK &&
              json_object_set(root, "report", json_new_stringn(report, report_len), NULL) == KN_OK;
    free(report);
    return srv_send_json(c, 200, api_json_finish(root, ok));
}
