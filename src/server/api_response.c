/* api_response.c: the OpenAI API's answers: responses, streaming chunks, usage, logprobs,
 * tool calls and errors in OpenAI's shapes (the requests are read in api.c). */
#include "srv_internal.h"
#include "chat/chat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- response building */

/* Builder helpers: any failure (out of memory) sets *ok to false; the tree is freed by
 * the caller either way. */
static void set(struct json_value *o, const char *k, struct json_value *v, bool *ok)
{
    if (!*ok || !o || !v) {
        json_free(v);
        *ok = false;
        return;
    }
    if (json_object_set(o, k, v, NULL) != KN_OK) /* frees v */
        *ok = false;
}

static void push(struct json_value *a, struct json_value *v, bool *ok)
{
    if (!*ok || !a || !v) {
        json_free(v);
        *ok = false;
        return;
    }
    if (json_array_push(a, v, NULL) != KN_OK)
        *ok = false;
}

/* A string from bytes that may not be valid UTF-8 (token pieces, cut text). */
static struct json_value *text_value(const char *p, size_t len)
{
    size_t n = 0;
    char *t = json_utf8_sanitize(p, len, &n);
    if (!t)
        return NULL;
    struct json_value *v = json_new_stringn(t, n);
    free(t);
    return v;
}

/* A log-probability: finite (OpenAI writes -9999 for "impossible"). */
static struct json_value *lp_value(float lp)
{
    return json_new_double(isfinite(lp) ? (double)lp : -9999.0);
}

static const char *tok_bytes(struct srv *s, int32_t id, size_t *len)
{
    const char *p = s->b->piece(s->b->ctx, id, len);
    if (*len == 0)
        p = s->b->token_text(s->b->ctx, id, len);
    return p;
}

static struct json_value *bytes_value(const char *p, size_t len, bool *ok)
{
    struct json_value *a = json_new_array();
    for (size_t i = 0; i < len; i++)
        push(a, json_new_int((uint8_t)p[i]), ok);
    return a;
}

/* Chat logprobs entry of token k: {token, logprob, bytes, top_logprobs}. */
static struct json_value *chat_lp_entry(struct srv *s, const struct srv_job *j, int64_t k, bool *ok)
{
    struct json_value *o = json_new_object();
    size_t len;
    const char *p = tok_bytes(s, j->out_ids[k], &len);
    set(o, "token", text_value(p, len), ok);
    set(o, "logprob", lp_value(j->out_lp[k]), ok);
    set(o, "bytes", bytes_value(p, len, ok), ok);
    struct json_value *tops = json_new_array();
    for (int t = 0; t < j->n_top; t++) {
        int32_t id = j->top_ids[k * j->n_top + t];
        if (id < 0)
            continue;
        struct json_value *e = json_new_object();
        const char *q = tok_bytes(s, id, &len);
        set(e, "token", text_value(q, len), ok);
        set(e, "logprob", lp_value(j->top_lp[k * j->n_top + t]), ok);
        set(e, "bytes", bytes_value(q, len, ok), ok);
        push(tops, e, ok);
    }
    set(o, "top_logprobs", tops, ok);
    return o;
}

/* Whether token k is part of the answer: not an end-of-generation token, and not past a
 * stop-string cut. */
static bool token_shown(struct srv *s, const struct srv_job *j, int64_t k)
{
    if (s->b->is_eog(s->b->ctx, j->out_ids[k]))
        return false;
    size_t start = k > 0 ? j->text_end[k - 1] : 0;
    bool cut = j->state == SRV_JOB_DONE && j->finish == SRV_FINISH_STOP &&
               !s->b->is_eog(s->b->ctx, j->out_ids[j->n_out - 1]);
    return start < j->text_len || (start == j->text_len && !cut);
}

/* Logprobs object for tokens [k0, k1) in the endpoint's shape; text offsets are relative
 * to base (the prompt-independent start of the answer). */
static struct json_value *logprobs_value(struct srv *s, const struct srv_request *r,
                                         const struct srv_job *j, int64_t k0, int64_t k1, bool *ok)
{
    if (!r->logprobs)
        return json_new_null();
    struct json_value *o = json_new_object();
    if (r->kind == SRV_KIND_CHAT) {
        struct json_value *content = json_new_array();
        for (int64_t k = k0; k < k1; k++)
            if (token_shown(s, j, k))
                push(content, chat_lp_entry(s, j, k, ok), ok);
        set(o, "content", content, ok);
        return o;
    }
    struct json_value *tokens = json_new_array(), *lps = json_new_array(),
                      *tops = json_new_array(), *offs = json_new_array();
    for (int64_t k = k0; k < k1; k++) {
        if (!token_shown(s, j, k))
            continue;
        size_t len;
        const char *p = tok_bytes(s, j->out_ids[k], &len);
        push(tokens, text_value(p, len), ok);
        push(lps, lp_value(j->out_lp[k]), ok);
        push(offs, json_new_int((int64_t)(k > 0 ? j->text_end[k - 1] : 0)), ok);
        struct json_value *t = json_new_object();
        for (int i = 0; i < j->n_top; i++) {
            int32_t id = j->top_ids[k * j->n_top + i];
            if (id < 0)
                continue;
            const char *q = tok_bytes(s, id, &len);
            size_t n = 0;
            char *key = json_utf8_sanitize(q, len, &n);
            if (!key || memchr(key, 0, n)) {
                free(key);
                continue;
            }
            /* Two tokens with the same text: the first (more likely) one keeps the key. */
            if (!json_get(t, key))
                set(t, key, lp_value(j->top_lp[k * j->n_top + i]), ok);
            free(key);
        }
        push(tops, t, ok);
    }
    set(o, "tokens", tokens, ok);
    set(o, "token_logprobs", lps, ok);
    set(o, "top_logprobs", tops, ok);
    set(o, "text_offset", offs, ok);
    return o;
}

/* Feeds [text, text + len) through splitter t (flushing it at the end when final) and
 * returns the content and reasoning bytes in one buffer: content at *content (n_c
 * bytes), reasoning at *reasoning (n_r bytes). NULL when out of memory; free() it. */
static char *think_split(struct text_think *t, const char *text, size_t len, bool final,
                         const char **content, size_t *n_c, const char **reasoning, size_t *n_r)
{
    size_t cap = len + 2 * TEXT_MAX_MARKER + 2;
    char *buf = malloc(2 * cap);
    if (!buf)
        return NULL;
    char *c = buf, *rs = buf + cap;
    size_t a = 0, b = 0, fa = 0, fb = 0;
    text_think_feed(t, text, len, c, &a, rs, &b);
    if (final)
        text_think_flush(t, c + a, &fa, rs + b, &fb);
    *content = c;
    *n_c = a + fa;
    *reasoning = rs;
    *n_r = b + fb;
    return buf;
}

size_t api_answer_content(const struct srv_request *r, const struct srv_job *j, char **out)
{
    *out = NULL;
    if (!r->think_open)
        return 0;
    struct text_think t;
    if (text_think_init(&t, r->think_open, r->think_close, r->think_inside, NULL) != KN_OK)
        return 0;
    const char *c, *rs;
    size_t nc, nr;
    char *buf = think_split(&t, j->text, j->text_len, true, &c, &nc, &rs, &nr);
    if (buf) {
        memmove(buf, c, nc);
        buf[nc] = '\0';
    }
    *out = buf;
    return nc;
}

static char *finish_json(struct json_value *root, bool ok)
{
    char *out = NULL;
    if (ok && json_write(root, JSON_COMPACT, &out, NULL, NULL) != KN_OK)
        out = NULL;
    json_free(root);
    return out;
}

static struct json_value *usage_value(struct srv_job *const *jobs, int n, bool *ok)
{
    int64_t out = 0;
    for (int i = 0; i < n; i++)
        out += jobs[i]->n_out;
    struct json_value *u = json_new_object();
    set(u, "prompt_tokens", json_new_int((int64_t)jobs[0]->n_prompt), ok);
    set(u, "completion_tokens", json_new_int(out), ok);
    set(u, "total_tokens", json_new_int((int64_t)jobs[0]->n_prompt + out), ok);
    return u;
}

uint64_t api_choice_seed(const struct srv_request *r, int i)
{
    return (r->sampling.seed + (uint64_t)i) & (uint64_t)SAMPLE_SEED_MAX;
}

/* llama-server's "timings" object: prompt positions computed (prompt_n) and reused
 * (cache_n: held by the slot or restored by Warm Start), generated tokens, their times,
 * and RAD-1's draft tokens verified (draft_n) and accepted (draft_n_accepted). */
static struct json_value *timings_value(const struct srv_job *j, bool *ok)
{
    struct json_value *t = json_new_object();
    double t_first = j->n_out > 0 ? j->t_first : j->t_done;
    double prompt_ms = j->t_start > 0 && t_first >= j->t_start ? (t_first - j->t_start) * 1e3 : 0;
    double gen_ms = j->n_out > 0 && j->t_done >= j->t_first ? (j->t_done - j->t_first) * 1e3 : 0;
    int64_t prompt_n = (int64_t)j->n_prompt - j->n_cached;
    set(t, "cache_n", json_new_int(j->n_cached), ok);
    set(t, "prompt_n", json_new_int(prompt_n), ok);
    set(t, "prompt_ms", json_new_double(prompt_ms), ok);
    set(t, "predicted_n", json_new_int(j->n_out), ok);
    set(t, "predicted_ms", json_new_double(gen_ms), ok);
    set(t, "predicted_per_second",
        json_new_double(gen_ms > 0 && j->n_out > 1 ? (double)(j->n_out - 1) * 1e3 / gen_ms : 0), ok);
    set(t, "draft_n", json_new_int(j->draft_n), ok);
    set(t, "draft_n_accepted", json_new_int(j->draft_n_accepted), ok);
    return t;
}

static void head(struct srv *s, struct json_value *root, const char *id, const char *object,
                 int64_t created, bool *ok)
{
    set(root, "id", json_new_string(id), ok);
    set(root, "object", json_new_string(object), ok);
    set(root, "created", json_new_int(created), ok);
    set(root, "model", json_new_string(s->model_id), ok);
    set(root, "system_fingerprint", json_new_string("kinetic-" KN_VERSION "-" KN_NUMERICS), ok);
}

void api_tool_call_id(const char *id, int index, int k, char *out, size_t cap)
{
    const char *dash = strchr(id, '-');
    snprintf(out, cap, "call_%s_%d_%d", dash ? dash + 1 : id, index, k);
}

/* message.tool_calls (OpenAI's shape) of choice `index`. */
static struct json_value *tool_calls_value(const struct chat_tool_calls *tc, const char *id,
                                           int index, bool *ok)
{
    struct json_value *arr = json_new_array();
    for (int k = 0; k < tc->n; k++) {
        char cid[96];
        api_tool_call_id(id, index, k, cid, sizeof cid);
        struct json_value *c = json_new_object(), *f = json_new_object();
        set(c, "id", json_new_string(cid), ok);
        set(c, "type", json_new_string("function"), ok);
        set(f, "name", text_value(tc->call[k].name, strlen(tc->call[k].name)), ok);
        set(f, "arguments", text_value(tc->call[k].arguments, strlen(tc->call[k].arguments)), ok);
        set(c, "function", f, ok);
        push(arr, c, ok);
    }
    return arr;
}

char *api_tool_chunk(struct srv *s, const struct srv_request *r, int index, const char *id,
                     int64_t created, const char *content, size_t content_len,
                     const struct chat_tool_calls *tc, int k, bool head_part)
{
    (void)r;
    bool ok = true;
    struct json_value *root = json_new_object();
    head(s, root, id, "chat.completion.chunk", created, &ok);
    struct json_value *choice = json_new_object(), *delta = json_new_object();
    set(choice, "index", json_new_int(index), &ok);
    if (content)
        set(delta, "content", text_value(content, content_len), &ok);
    if (tc) {
        /* OpenAI's order: the call's id, type and name with empty arguments, then the
         * arguments (clients append the pieces by index) */
        struct json_value *arr = json_new_array(), *c = json_new_object(), *f = json_new_object();
        set(c, "index", json_new_int(k), &ok);
        if (head_part) {
            char cid[96];
            api_tool_call_id(id, index, k, cid, sizeof cid);
            set(c, "id", json_new_string(cid), &ok);
            set(c, "type", json_new_string("function"), &ok);
            set(f, "name", text_value(tc->call[k].name, strlen(tc->call[k].name)), &ok);
            set(f, "arguments", json_new_string(""), &ok);
        } else {
            set(f, "arguments", text_value(tc->call[k].arguments, strlen(tc->call[k].arguments)), &ok);
        }
        set(c, "function", f, &ok);
        push(arr, c, &ok);
        set(delta, "tool_calls", arr, &ok);
    }
    set(choice, "delta", delta, &ok);
    set(choice, "logprobs", json_new_null(), &ok);
    set(choice, "finish_reason", json_new_null(), &ok);
    struct json_value *choices = json_new_array();
    push(choices, choice, &ok);
    set(root, "choices", choices, &ok);
    return finish_json(root, ok);
}

static struct json_value *choice_value(struct srv *s, const struct srv_request *r,
                                       const struct srv_job *j, int index, const char *id, bool *ok)
{
    bool chat = r->kind == SRV_KIND_CHAT;
    struct json_value *choice = json_new_object();
    set(choice, "index", json_new_int(index), ok);
    if (chat) {
        struct json_value *msg = json_new_object();
        set(msg, "role", json_new_string("assistant"), ok);
        struct text_think t;
        if (r->think_open &&
            text_think_init(&t, r->think_open, r->think_close, r->think_inside, NULL) == KN_OK) {
            const char *c, *rs;
            size_t nc, nr;
            char *buf = think_split(&t, j->text, j->text_len, true, &c, &nc, &rs, &nr);
            *ok = *ok && buf;
            if (buf) {
                set(msg, "content", text_value(c, nc), ok);
                if (nr > 0)
                    set(msg, "reasoning_content", text_value(rs, nr), ok);
            }
            free(buf);
        } else {
            set(msg, "content", text_value(j->text, j->text_len), ok);
        }
        const char *finish = srv_finish_str(j->finish);
        if (r->tools_parse) { /* calls in the answer's content become message.tool_calls */
            struct json_value *cv = json_object_take(msg, "content");
            const char *c = json_str(cv);
            struct chat_tool_calls tc;
            if (c && chat_tool_calls_parse(r->tool_syntax, c, cv->u.string.len, &tc, NULL) == KN_OK) {
                if (!r->parallel_tools)
                    chat_tool_calls_keep(&tc, 1);
                if (tc.n > 0) {
                    set(msg, "content", tc.content ? text_value(tc.content, tc.content_len)
                                                   : json_new_null(), ok);
                    set(msg, "tool_calls", tool_calls_value(&tc, id, index, ok), ok);
                    if (j->finish == SRV_FINISH_STOP)
                        finish = "tool_calls";
                    json_free(cv);
                    cv = NULL;
                } else if (tc.content_len != cv->u.string.len) {
                    /* functionary's "all\n", or a call cut short that is not content */
                    set(msg, "content", text_value(tc.content ? tc.content : "", tc.content_len), ok);
                    json_free(cv);
                    cv = NULL;
                }
                chat_tool_calls_free(&tc);
            }
            if (cv)
                set(msg, "content", cv, ok);
        }
        set(choice, "message", msg, ok);
        set(choice, "logprobs", logprobs_value(s, r, j, 0, j->n_out, ok), ok);
        set(choice, "finish_reason", json_new_string(finish), ok);
        return choice;
    } else {
        set(choice, "text", text_value(j->text, j->text_len), ok);
    }
    set(choice, "logprobs", logprobs_value(s, r, j, 0, j->n_out, ok), ok);
    set(choice, "finish_reason", json_new_string(srv_finish_str(j->finish)), ok);
    return choice;
}

char *api_completion_response(struct srv *s, const struct srv_request *r,
                              struct srv_job *const *jobs, int n, const char *id,
                              int64_t created, struct json_value **receipts)
{
    bool ok = true;
    struct json_value *root = json_new_object();
    bool chat = r->kind == SRV_KIND_CHAT;
    head(s, root, id, chat ? "chat.completion" : "text_completion", created, &ok);
    struct json_value *choices = json_new_array();
    for (int i = 0; i < n; i++) {
        struct json_value *choice = choice_value(s, r, jobs[i], i, id, &ok);
        if (n > 1) { /* each choice's own seed and receipt */
            set(choice, "seed", json_new_int((int64_t)jobs[i]->sampling.seed), &ok);
            if (receipts[i])
                set(choice, "receipt", receipts[i], &ok);
            receipts[i] = NULL;
        }
        push(choices, choice, &ok);
    }
    set(root, "choices", choices, &ok);
    set(root, "usage", usage_value(jobs, n, &ok), &ok);
    set(root, "timings", timings_value(jobs[0], &ok), &ok);
    set(root, "seed", json_new_int((int64_t)jobs[0]->sampling.seed), &ok);
    if (n == 1 && receipts[0]) {
        set(root, "receipt", receipts[0], &ok);
        receipts[0] = NULL;
    }
    return finish_json(root, ok);
}

char *api_stream_chunk(struct srv *s, const struct srv_request *r, const struct srv_job *j,
                       int index, struct text_think *think, const char *id, int64_t created,
                       bool role, int64_t tok0, int64_t tok1, size_t text0, size_t text1,
                       bool final, const char *finish, struct json_value *receipt)
{
    bool ok = true;
    bool chat = r->kind == SRV_KIND_CHAT;
    struct json_value *root = json_new_object();
    head(s, root, id, chat ? "chat.completion.chunk" : "text_completion", created, &ok);
    struct json_value *choice = json_new_object();
    set(choice, "index", json_new_int(index), &ok);
    if (chat) {
        struct json_value *delta = json_new_object();
        if (role) {
            set(delta, "role", json_new_string("assistant"), &ok);
            set(delta, "content", json_new_string(""), &ok);
        } else if (think) {
            /* The reasoning goes out as delta.reasoning_content, the rest as content. */
            const char *c, *rs;
            size_t nc, nr;
            char *buf = think_split(think, j->text + text0, text1 - text0, final, &c, &nc, &rs,
                                    &nr);
            ok = ok && buf;
            if (buf && (nc > 0 || (!final && nr == 0)))
                set(delta, "content", text_value(c, nc), &ok);
            if (buf && nr > 0)
                set(delta, "reasoning_content", text_value(rs, nr), &ok);
            free(buf);
        } else if (text1 > text0 || !final) {
            set(delta, "content", text_value(j->text + text0, text1 - text0), &ok);
        }
        set(choice, "delta", delta, &ok);
    } else {
        set(choice, "text", text_value(j->text + text0, text1 - text0), &ok);
    }
    set(choice, "logprobs", tok1 > tok0 ? logprobs_value(s, r, j, tok0, tok1, &ok) : json_new_null(),
        &ok);
    set(choice, "finish_reason",
        final ? json_new_string(finish ? finish : srv_finish_str(j->finish)) : json_new_null(), &ok);
    if (final && r->n_choices > 1) { /* each choice's own seed and receipt */
        set(choice, "seed", json_new_int((int64_t)j->sampling.seed), &ok);
        if (receipt)
            set(choice, "receipt", receipt, &ok);
        receipt = NULL;
    }
    struct json_value *choices = json_new_array();
    push(choices, choice, &ok);
    set(root, "choices", choices, &ok);
    if (final) {
        set(root, "timings", timings_value(j, &ok), &ok);
        set(root, "seed", json_new_int((int64_t)j->sampling.seed), &ok);
        if (receipt)
            set(root, "receipt", receipt, &ok);
    } else if (receipt) {
        json_free(receipt);
    }
    return finish_json(root, ok);
}

char *api_usage_chunk(struct srv *s, const struct srv_request *r, struct srv_job *const *jobs,
                      int n, const char *id, int64_t created)
{
    bool ok = true;
    struct json_value *root = json_new_object();
    head(s, root, id, r->kind == SRV_KIND_CHAT ? "chat.completion.chunk" : "text_completion",
         created, &ok);
    set(root, "choices", json_new_array(), &ok);
    set(root, "usage", usage_value(jobs, n, &ok), &ok);
    return finish_json(root, ok);
}

void api_json_set(struct json_value *o, const char *k, struct json_value *v, bool *ok)
{
    set(o, k, v, ok);
}

char *api_json_finish(struct json_value *root, bool ok)
{
    return finish_json(root, ok);
}

char *api_error_json(const struct srv_error *e)
{
    bool ok = true;
    struct json_value *root = json_new_object(), *err = json_new_object();
    set(err, "message", text_value(e->message, strlen(e->message)), &ok);
    set(err, "type", json_new_string(e->type ? e->type : "invalid_request_error"), &ok);
    set(err, "param", e->param ? json_new_string(e->param) : json_new_null(), &ok);
    set(err, "code", e->code ? json_new_string(e->code) : json_new_null(), &ok);
    set(root, "error", err, &ok);
    return finish_json(root, ok);
}
