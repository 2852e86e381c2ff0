/* http.c: the HTTP layer (libmicrohttpd, one thread per connection): routing, API keys,
 * size limits, request bodies, the completion endpoints (plain and SSE), and the small
 * endpoints (/health, /metrics, /v1/models, /tokenize, /detokenize).
 *
 * Connections reach libmicrohttpd through the gate (gate.c), which owns the listening
 * socket and hands a connection over once its request's head is complete and sound.
 * Every answer says "Connection: close": one request per connection, so every request
 * passes the gate.
 *
 * A connection thread may block: a plain completion waits for its job inside the request
 * handler and a stream waits inside the content reader, both in short slices so that a
 * client that hangs up is noticed (its job is cancelled and the slot freed). */
#include "srv_internal.h"
#include "receipt/receipt.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum endpoint { EP_CHAT = 0, EP_COMPLETIONS, EP_MODELS, EP_HEALTH, EP_METRICS, EP_TOKENIZE,
                EP_DETOKENIZE, EP_PREFILL, EP_STATS, EP_OTHER, EP_APPLY_TEMPLATE, EP_SLOTS,
                EP_UI, EP_VERIFY, EP_EMBEDDINGS, EP_PROPS };
static const char *const endpoint_names[SRV_N_ENDPOINTS] = {
    "chat_completions", "completions", "models", "health", "metrics", "tokenize", "detokenize",
    "prefill", "stats", "other", "apply_template", "slots", "ui", "verify_receipt", "embeddings",
    "props"};
static const int status_codes[SRV_N_STATUS] = {200, 204, 400, 401, 403, 404, 405, 413, 415, 429, 431, 500, 503, 0};

struct route {
    const char *path;
    const char *method;
    enum endpoint ep;
    bool open; /* no API key needed */
};

static const struct route routes[] = {
    {"/v1/chat/completions", "POST", EP_CHAT, false},
    {"/chat/completions", "POST", EP_CHAT, false},
    {"/v1/completions", "POST", EP_COMPLETIONS, false},
    {"/completions", "POST", EP_COMPLETIONS, false},
    {"/v1/models", "GET", EP_MODELS, false},
    {"/models", "GET", EP_MODELS, false},
    {"/health", "GET", EP_HEALTH, true},
    {"/metrics", "GET", EP_METRICS, false},
    {"/tokenize", "POST", EP_TOKENIZE, false},
    {"/detokenize", "POST", EP_DETOKENIZE, false},
    {"/prefill", "POST", EP_PREFILL, false},
    {"/v1/prefill", "POST", EP_PREFILL, false},
    {"/stats", "GET", EP_STATS, false},
    {"/apply-template", "POST", EP_APPLY_TEMPLATE, false},
    {"/slots", "GET", EP_SLOTS, false},
    {"/props", "GET", EP_PROPS, false},
    {"/", "GET", EP_UI, true},
    {"/vendor/marked.min.js", "GET", EP_UI, true},
    {"/vendor/purify.min.js", "GET", EP_UI, true},
    {"/verify-receipt", "POST", EP_VERIFY, false},
    {"/v1/embeddings", "POST", EP_EMBEDDINGS, false},
    {"/embeddings", "POST", EP_EMBEDDINGS, false},
};

/* Per-request state, from the first call of the access handler to the completion notice. */
struct req {
    const struct route *route;
    char *body;
    size_t len, cap;
    bool too_big;
    bool answered;
    struct srv_upload up; /* the body's progress, for the minimum rate */
    /* for its log line (log_request) */
    char method[12], path[96];
    double t0;
    int64_t n_in, n_out;  /* prompt and generated tokens, a completion's */
};

/* ---------------------------------------------------------------- counters */

static void count(struct srv *s, enum endpoint ep, int status)
{
    int k = SRV_N_STATUS - 1;
    for (int i = 0; i < SRV_N_STATUS - 1; i++)
        if (status_codes[i] == status)
            k = i;
    pthread_mutex_lock(&s->mmu);
    s->requests[ep][k]++;
    pthread_mutex_unlock(&s->mmu);
}

void srv_count_status(struct srv *s, int status)
{
    count(s, EP_OTHER, status);
}

/* ---------------------------------------------------------------- responses */

/* --cors ORIGIN: every answer names the origin browsers may read it from. */
static void add_cors(const struct srv *s, struct MHD_Response *r)
{
    if (!s->cfg.cors)
        return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", s->cfg.cors);
    if (strcmp(s->cfg.cors, "*") != 0)
        MHD_add_response_header(r, "Vary", "Origin");
}

static bool srv_ready(const struct srv *s);

/* What every answer carries: one request per connection (gate.c), the CORS origin, and
 * which replica answered with its build and device class (behind a load balancer a
 * retried request's answer is the same on any replica of one build and class, and this
 * header shows where it came from). */
static void add_common_headers(const struct srv *s, struct MHD_Response *r)
{
    MHD_add_response_header(r, "Connection", "close");
    add_cors(s, r);
    MHD_add_response_header(r, "X-Kinetic-Replica",
                            srv_ready(s) ? s->replica_ready : s->replica_loading);
}

static enum MHD_Result queue_text(struct srv *s, struct MHD_Connection *conn, enum endpoint ep,
                                  int status, char *body, const char *ctype,
                                  const char *const *headers)
{
    if (!body)
        return MHD_NO; /* out of memory: drop the connection */
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    add_common_headers(s, r);
    for (int i = 0; headers && headers[i]; i += 2)
        MHD_add_response_header(r, headers[i], headers[i + 1]);
    enum MHD_Result ok = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    count(s, ep, status);
    return ok;
}

static enum MHD_Result send_json(struct srv *s, struct MHD_Connection *conn, enum endpoint ep,
                                 int status, char *body)
{
    return queue_text(s, conn, ep, status, body, "application/json", NULL);
}

static enum MHD_Result send_error(struct srv *s, struct MHD_Connection *conn, enum endpoint ep,
                                  const struct srv_error *e)
{
    const char *hdrs[5] = {NULL};
    int h = 0;
    if (e->status == 401) {
        hdrs[h++] = "WWW-Authenticate";
        hdrs[h++] = "Bearer";
    } else if (e->status == 503) {
        hdrs[h++] = "Retry-After";
        hdrs[h++] = "1";
    } else if (e->status == 429) {
        hdrs[h++] = "Retry-After";
        hdrs[h++] = SRV_XSTR(SRV_VERIFY_INTERVAL_S);
    }
    return queue_text(s, conn, ep, e->status, api_error_json(e), "application/json", hdrs);
}

static enum MHD_Result fail(struct srv *s, struct MHD_Connection *conn, enum endpoint ep, int status,
                            const char *type, const char *code, const char *fmt, ...)
    KN_PRINTF(7, 8);
static enum MHD_Result fail(struct srv *s, struct MHD_Connection *conn, enum endpoint ep, int status,
                            const char *type, const char *code, const char *fmt, ...)
{
    struct srv_error e = {status, type, code, NULL, {0}};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof e.message, fmt, ap);
    va_end(ap);
    return send_error(s, conn, ep, &e);
}

/* ---------------------------------------------------------------- helpers */

/* True when the peer has closed its side (read end of file or a socket error). */
static bool client_gone(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return true;
    char c;
    ssize_t n = recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0)
        return true;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

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

/* Constant-time comparison of a presented key with the configured one. */
static bool key_matches(const char *given, const char *want)
{
    size_t gl = strlen(given), wl = strlen(want);
    unsigned diff = (unsigned)(gl ^ wl);
    for (size_t i = 0; i < wl; i++)
        diff |= (unsigned)(uint8_t)want[i] ^ (unsigned)(uint8_t)(i < gl ? given[i] : 0);
    return diff == 0;
}

static bool authorized(struct srv *s, struct MHD_Connection *conn)
{
    if (!s->cfg.api_key)
        return true;
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    return key_matches(h, s->cfg.api_key);
}

static struct json_value *make_receipt(struct srv *s, const struct srv_request *r,
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

/* ---------------------------------------------------------------- streaming */

enum stream_phase { PH_ROLE, PH_TOKENS, PH_USAGE, PH_DONE, PH_END };

/* One choice of a stream: what of its job went out. */
struct stream_choice {
    struct srv_job *job;
    int64_t seen;         /* job->n_out at the last look */
    int64_t sent_tok;     /* tokens whose logprobs went out */
    size_t sent_text;     /* bytes of job->text that went out */
    bool final;           /* its last chunk (finish_reason) went out */
    struct text_think think; /* its reasoning splitter (the request's, copied) */
    /* tool calls found in the finished answer: 0 not looked, 1 none, 2 being sent */
    int tc_state;
    struct chat_tool_calls tc;
    bool tc_content_sent;
    int tc_next;          /* the next call event: 2k call k's head, 2k+1 its arguments */
};

struct stream {
    struct srv *s;
    struct MHD_Connection *conn;
    struct srv_request req;
    struct stream_choice ch[SRV_MAX_CHOICES];
    struct srv_job *jobs[SRV_MAX_CHOICES];
    int n;
    int role_sent;        /* choices whose role chunk went out */
    int next;             /* the choice looked at first (round robin) */
    char id[64];
    int64_t created;
    enum stream_phase phase;
    struct req *q;        /* its request, alive while the stream is read: token counts */
    char *out;            /* the event being written */
    size_t out_len, out_off;
};

/* How much of the text can go out now: not a suffix that may grow into a stop string,
 * and not an incomplete UTF-8 sequence. */
static size_t safe_end(const struct srv_job *j)
{
    size_t end = j->text_len;
    for (int i = 0; i < j->n_stop; i++) {
        size_t sl = j->stop_len[i];
        for (size_t k = sl - 1 < j->text_len ? sl - 1 : j->text_len; k > 0; k--)
            if (memcmp(j->text + j->text_len - k, j->stop[i], k) == 0) {
                if (j->text_len - k < end)
                    end = j->text_len - k;
                break;
            }
    }
    size_t i = end;
    int cont = 0;
    while (i > 0 && cont < 3 && ((uint8_t)j->text[i - 1] & 0xC0) == 0x80) {
        i--;
        cont++;
    }
    if (i > 0) {
        uint8_t c = (uint8_t)j->text[i - 1];
        int need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (need > 1 && need > cont + 1)
            end = i - 1;
    }
    return end;
}

static bool set_event(struct stream *st, char *json)
{
    if (!json)
        return false;
    size_t n = strlen(json);
    st->out = malloc(n + 9);
    if (!st->out) {
        free(json);
        return false;
    }
    memcpy(st->out, "data: ", 6);
    memcpy(st->out + 6, json, n);
    memcpy(st->out + 6 + n, "\n\n", 3);
    st->out_len = n + 8;
    st->out_off = 0;
    free(json);
    return true;
}

/* The error event of a job that ended in error or was cancelled. */
static char *job_error_event(const struct srv_job *j)
{
    struct srv_error e;
    if (j->finish == SRV_FINISH_ERROR && j->error_is_request)
        srv_error_set(&e, 400, "invalid_request_error", "grammar_dead_end", NULL, "%s", j->error);
    else if (j->finish == SRV_FINISH_ERROR)
        srv_error_set(&e, 500, "server_error", "generation_failed", NULL, "%s", j->error);
    else
        srv_error_set(&e, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
    return api_error_json(&e);
}

static bool choice_final(struct stream *st, int i, const char *finish, char **chunk);

/* A finished answer of a request with tools: its calls, if it has some, go out as
 * OpenAI streams them (the content not sent yet, then per call a chunk with its id,
 * type and name and one with its arguments, then finish_reason "tool_calls"); without
 * calls the rest of the text goes out as usual. The job is done: no lock needed. */
static bool choice_tool_event(struct stream *st, int i, char **chunk)
{
    struct stream_choice *ch = &st->ch[i];
    struct srv_job *j = ch->job;
    struct srv *s = st->s;
    if (ch->tc_state == 0) {
        ch->tc_state = 1;
        if (chat_tool_calls_parse(st->req.tool_syntax, j->text, j->text_len, &ch->tc, NULL) == KN_OK) {
            if (!st->req.parallel_tools)
                chat_tool_calls_keep(&ch->tc, 1);
            /* calls, or content that is not the text (functionary's recipient lines, a
             * call cut short) */
            if (ch->tc.n > 0 || ch->tc.content_len != j->text_len)
                ch->tc_state = 2;
            else
                chat_tool_calls_free(&ch->tc);
        }
    }
    if (ch->tc_state == 1) { /* no calls: the rest as text, then the final chunk */
        struct text_think *think = st->req.think ? &ch->think : NULL;
        if (j->text_len > ch->sent_text) {
            *chunk = api_stream_chunk(s, &st->req, j, i, think, st->id, st->created, false,
                                      ch->sent_tok, j->n_out, ch->sent_text, j->text_len, false,
                                      NULL, NULL);
            ch->sent_text = j->text_len;
            ch->sent_tok = j->n_out;
            return *chunk != NULL;
        }
        return choice_final(st, i, NULL, chunk);
    }
    if (!ch->tc_content_sent) {
        ch->tc_content_sent = true;
        /* the content before the first call began with what went out already (the text
         * from its content start: choice_event skipped a recipient line) */
        size_t sent = ch->sent_text - chat_tool_calls_content_start(st->req.tool_syntax, j->text,
                                                                    ch->sent_text);
        if (ch->tc.content && ch->tc.content_len > sent) {
            *chunk = api_tool_chunk(s, &st->req, i, st->id, st->created, ch->tc.content + sent,
                                    ch->tc.content_len - sent, NULL, 0, false);
            return *chunk != NULL;
        }
    }
    if (ch->tc_next < 2 * ch->tc.n) {
        int k = ch->tc_next / 2;
        bool head_part = ch->tc_next % 2 == 0;
        ch->tc_next++;
        *chunk = api_tool_chunk(s, &st->req, i, st->id, st->created, NULL, 0, &ch->tc, k, head_part);
        return *chunk != NULL;
    }
    const bool calls = ch->tc.n > 0;
    chat_tool_calls_free(&ch->tc);
    ch->tc_state = 1;
    ch->sent_text = j->text_len;
    ch->sent_tok = j->n_out;
    return choice_final(st, i, calls && j->finish == SRV_FINISH_STOP ? "tool_calls" : NULL, chunk);
}

/* The final chunk of choice i (finish_reason, seed, receipt). */
static bool choice_final(struct stream *st, int i, const char *finish, char **chunk)
{
    struct stream_choice *ch = &st->ch[i];
    struct srv_job *j = ch->job;
    struct srv *s = st->s;
    struct srv_error e = {0};
    struct json_value *receipt = make_receipt(s, &st->req, j, &e);
    ch->final = true;
    if (e.status) {
        *chunk = api_error_json(&e);
        return false;
    }
    *chunk = api_stream_chunk(s, &st->req, j, i, st->req.think ? &ch->think : NULL, st->id,
                              st->created, false, 0, 0, j->text_len, j->text_len, true, finish,
                              receipt);
    return *chunk != NULL;
}

/* The next chunk of choice i, if it has one: new text or logprobs, or its final chunk
 * (finish_reason, seed, receipt) once its job is done. *chunk stays NULL when there is
 * nothing to send yet; false on an error that ends the stream (*chunk: its event). */
static bool choice_event(struct stream *st, int i, char **chunk)
{
    struct srv *s = st->s;
    struct convoy *c = s->convoy;
    struct stream_choice *ch = &st->ch[i];
    struct srv_job *j = ch->job;
    struct text_think *think = st->req.think ? &ch->think : NULL;
    *chunk = NULL;
    convoy_lock(c);
    bool done = j->state == SRV_JOB_DONE;
    ch->seen = j->n_out;
    if (done && (j->finish == SRV_FINISH_ERROR || j->finish == SRV_FINISH_CANCELLED)) {
        convoy_unlock(c);
        *chunk = job_error_event(j);
        return false;
    }
    size_t end = done ? j->text_len : safe_end(j);
    if (!done && st->req.tools_parse) { /* hold back what may be the start of a call */
        end = chat_tool_calls_safe_end(st->req.tool_syntax, j->text, end);
        if (ch->sent_text == 0) /* and a recipient line before the content */
            ch->sent_text = chat_tool_calls_content_start(st->req.tool_syntax, j->text, end);
    }
    if (done && st->req.tools_parse) {
        convoy_unlock(c);
        return choice_tool_event(st, i, chunk);
    }
    int64_t tok1 = ch->sent_tok;
    while (tok1 < j->n_out && (done || j->text_end[tok1] <= end))
        tok1++;
    bool any = end > ch->sent_text || (st->req.logprobs && tok1 > ch->sent_tok);
    if (any)
        *chunk = api_stream_chunk(s, &st->req, j, i, think, st->id, st->created, false,
                                  ch->sent_tok, tok1, ch->sent_text, end, false, NULL, NULL);
    convoy_unlock(c);
    if (any) {
        ch->sent_text = end;
        ch->sent_tok = tok1;
        return *chunk != NULL; /* NULL: out of memory */
    }
    if (!done)
        return true;
    /* The job is done: the scheduler no longer writes it, so no lock is needed (and a
     * receipt, which reads the model-hash cache, must not stall the scheduler). */
    return choice_final(st, i, NULL, chunk);
}

/* Produces the next event into st->out; false on an error that ends the stream. The
 * choices' chunks interleave as their tokens come (each chunk names its index). */
static bool next_event(struct stream *st)
{
    struct srv *s = st->s;
    struct convoy *c = s->convoy;
    switch (st->phase) {
    case PH_ROLE:
        if (st->req.kind == SRV_KIND_CHAT && st->role_sent < st->n) {
            int i = st->role_sent++;
            return set_event(st, api_stream_chunk(s, &st->req, st->ch[i].job, i, NULL, st->id,
                                                  st->created, true, 0, 0, 0, 0, false, NULL,
                                                  NULL));
        }
        st->phase = PH_TOKENS;
        return next_event(st);
    case PH_TOKENS:
        for (;;) {
            int open = -1;
            for (int k = 0; k < st->n; k++) {
                int i = (st->next + k) % st->n;
                if (st->ch[i].final)
                    continue;
                if (open < 0)
                    open = i;
                char *chunk = NULL;
                bool ok = choice_event(st, i, &chunk);
                if (!ok) {
                    st->phase = PH_DONE;
                    return chunk ? set_event(st, chunk) : false;
                }
                if (chunk) {
                    st->next = (i + 1) % st->n;
                    return set_event(st, chunk);
                }
            }
            if (open < 0) { /* every choice sent its final chunk */
                st->phase = st->req.include_usage ? PH_USAGE : PH_DONE;
                return next_event(st);
            }
            /* nothing new: wait for the first open choice's next token (short slices) */
            convoy_wait(c, st->ch[open].job, st->ch[open].seen, st->n > 1 ? 20 : 100);
            if (s->stopping || client_gone(st->conn))
                return false;
        }
    case PH_USAGE: {
        convoy_lock(c);
        char *chunk = api_usage_chunk(s, &st->req, st->jobs, st->n, st->id, st->created);
        convoy_unlock(c);
        st->phase = PH_DONE;
        return set_event(st, chunk);
    }
    case PH_DONE: {
        st->phase = PH_END;
        char *d = strdup("[DONE]");
        return set_event(st, d);
    }
    case PH_END:
        break;
    }
    return false;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct stream *st = cls;
    if (st->out_off >= st->out_len) {
        free(st->out);
        st->out = NULL;
        st->out_len = st->out_off = 0;
        if (st->phase == PH_END)
            return MHD_CONTENT_READER_END_OF_STREAM;
        bool more = next_event(st);
        st->q->n_out = 0;
        for (int i = 0; i < st->n; i++)
            st->q->n_out += st->ch[i].seen;
        if (!more)
            return st->phase == PH_END ? MHD_CONTENT_READER_END_OF_STREAM
                                       : MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = st->out_len - st->out_off;
    if (n > max)
        n = max;
    memcpy(buf, st->out + st->out_off, n);
    st->out_off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    struct stream *st = cls;
    for (int i = 0; i < st->n; i++) {
        convoy_cancel(st->s->convoy, st->ch[i].job); /* no-op when it finished */
        convoy_release(st->s->convoy, st->ch[i].job);
        if (st->ch[i].tc_state == 2)
            chat_tool_calls_free(&st->ch[i].tc);
    }
    srv_request_free(&st->req);
    free(st->out);
    free(st);
}

/* ---------------------------------------------------------------- completions */

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

static enum MHD_Result handle_completion(struct srv *s, struct MHD_Connection *conn, enum endpoint ep,
                                         const struct json_value *body, struct req *q)
{
    struct srv_request r;
    struct srv_error e;
    enum srv_kind kind = ep == EP_CHAT ? SRV_KIND_CHAT : SRV_KIND_COMPLETION;
    if (api_parse_completion(s, kind, body, &r, &e) || api_prepare_prompt(s, &r, &e)) {
        srv_request_free(&r);
        return send_error(s, conn, ep, &e);
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
                return fail(s, conn, ep, 400, "invalid_request_error", "grammar_too_complex",
                            "%s", err.msg);
            return fail(s, conn, ep, 500, "server_error", NULL, "%s", err.msg);
        }
    }
    for (int i = 0; i < n; i++) {
        enum kn_status st = convoy_submit(s->convoy, jobs[i], &err);
        if (st != KN_OK) {
            jobs_drop(s, jobs, n, i);
            srv_request_free(&r);
            if (st == KN_E_LIMIT)
                return fail(s, conn, ep, 503, "server_error", "server_busy",
                            "the server is busy: %s; retry in a moment", err.msg);
            return fail(s, conn, ep, 503, "server_error", "shutting_down", "%s", err.msg);
        }
    }

    char id[64];
    random_id(id, sizeof id, kind == SRV_KIND_CHAT ? "chatcmpl-" : "cmpl-");
    int64_t created = (int64_t)time(NULL);

    if (r.stream) {
        struct stream *stc = calloc(1, sizeof *stc);
        struct MHD_Response *resp = NULL;
        if (stc) {
            stc->s = s;
            stc->conn = conn;
            stc->q = q;
            q->n_in = (int64_t)r.n_ids;
            stc->req = r;
            stc->n = n;
            for (int i = 0; i < n; i++) {
                stc->ch[i].job = stc->jobs[i] = jobs[i];
                if (r.think)
                    stc->ch[i].think = *r.think; /* nothing fed yet: each choice its own */
            }
            snprintf(stc->id, sizeof stc->id, "%s", id);
            stc->created = created;
            resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, stc,
                                                     stream_free);
        }
        if (!resp) {
            if (stc)
                free(stc);
            jobs_drop(s, jobs, n, n);
            srv_request_free(&r);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        add_common_headers(s, resp);
        enum MHD_Result ok = MHD_queue_response(conn, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        count(s, ep, 200);
        return ok;
    }

    /* Plain: wait for every choice, watching for a client that hangs up. */
    for (int i = 0; i < n; i++)
        while (!convoy_wait(s->convoy, jobs[i], INT64_MAX, 100)) {
            if (client_gone(conn)) {
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
            res = fail(s, conn, ep, 400, "invalid_request_error", "grammar_dead_end", "%s",
                       bad->error);
        else if (bad->finish == SRV_FINISH_ERROR)
            res = fail(s, conn, ep, 500, "server_error", "generation_failed", "%s", bad->error);
        else
            res = fail(s, conn, ep, 503, "server_error", "shutting_down",
                       "the server is shutting down");
    } else {
        /* Done: the results are final, read them without holding up the scheduler. */
        struct json_value *receipts[SRV_MAX_CHOICES] = {0};
        e.status = 0;
        for (int i = 0; i < n && !e.status; i++)
            receipts[i] = make_receipt(s, &r, jobs[i], &e);
        char *body_out = e.status ? NULL
                                  : api_completion_response(s, &r, jobs, n, id, created, receipts);
        for (int i = 0; i < n; i++)
            json_free(receipts[i]); /* those not taken */
        res = e.status ? send_error(s, conn, ep, &e) : send_json(s, conn, ep, 200, body_out);
        q->n_in = (int64_t)r.n_ids;
        for (int i = 0; i < n; i++)
            q->n_out += jobs[i]->n_out;
    }
    jobs_drop(s, jobs, n, n);
    srv_request_free(&r);
    return res;
}

/* ---------------------------------------------------------------- small endpoints */

static enum MHD_Result handle_models(struct srv *s, struct MHD_Connection *conn)
{
    char *out = NULL;
    if (asprintf(&out,
                 "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\",\"created\":0,"
                 "\"owned_by\":\"kinetic\",\"meta\":{\"n_ctx\":%lld,\"n_vocab\":%d,\"slots\":%d}}]}",
                 s->model_id, (long long)s->b->n_ctx, (int)s->b->n_vocab, s->b->n_slots) < 0)
        out = NULL;
    return send_json(s, conn, EP_MODELS, 200, out);
}

static bool srv_ready(const struct srv *s)
{
    return __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != 0;
}

/* 200 when the model is loaded and the server accepts work; 503 while it loads, drains
 * or shuts down (a load balancer's readiness probe). */
static enum MHD_Result handle_health(struct srv *s, struct MHD_Connection *conn)
{
    char *out = NULL;
    if (!srv_ready(s)) {
        if (asprintf(&out, "{\"status\":\"%s\"}", s->stopping ? "shutting down" : "loading model") < 0)
            out = NULL;
        return send_json(s, conn, EP_HEALTH, 503, out);
    }
    struct convoy_stats cs;
    convoy_get_stats(s->convoy, &cs);
    const bool draining = __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE) != 0;
    int status = s->stopping || draining ? 503 : 200;
    if (asprintf(&out, "{\"status\":\"%s\",\"slots_idle\":%d,\"slots_processing\":%d,"
                       "\"requests_waiting\":%d}",
                 s->stopping ? "shutting down" : draining ? "draining" : "ok",
                 cs.n_slots - cs.slots_busy, cs.slots_busy, cs.queued) < 0)
        out = NULL;
    return send_json(s, conn, EP_HEALTH, status, out);
}

/* GET /slots in llama-server's shape (an array, one object per slot); ?fail_on_no_slot=1
 * answers 503 when every slot is busy. The prompt and generated text are not shown. */
static enum MHD_Result handle_slots(struct srv *s, struct MHD_Connection *conn)
{
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
        return fail(s, conn, EP_SLOTS, 503, "unavailable_error", "no_slot_available",
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
    char *out = NULL;
    if (!ok || json_write(arr, JSON_COMPACT, &out, NULL, NULL) != KN_OK)
        out = NULL;
    json_free(arr);
    return send_json(s, conn, EP_SLOTS, 200, out);
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
static enum MHD_Result handle_props(struct srv *s, struct MHD_Connection *conn)
{
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
    char *out = NULL;
    if (!ok || json_write(root, JSON_COMPACT, &out, NULL, NULL) != KN_OK)
        out = NULL;
    json_free(root);
    return send_json(s, conn, EP_PROPS, 200, out);
}

static enum MHD_Result handle_metrics(struct srv *s, struct MHD_Connection *conn)
{
    struct convoy_stats cs;
    convoy_get_stats(s->convoy, &cs);
    size_t cap = 32768, k = 0; /* every endpoint x status pair fits */
    char *out = malloc(cap);
    if (!out)
        return MHD_NO;
#define EMIT(...) k += (size_t)snprintf(out + k, k < cap ? cap - k : 0, __VA_ARGS__)
    EMIT("# HELP kinetic_requests_total HTTP requests answered, by endpoint and status.\n"
         "# TYPE kinetic_requests_total counter\n");
    pthread_mutex_lock(&s->mmu);
    for (int e = 0; e < SRV_N_ENDPOINTS; e++)
        for (int i = 0; i < SRV_N_STATUS; i++)
            if (s->requests[e][i])
                EMIT("kinetic_requests_total{endpoint=\"%s\",status=\"%s%d\"} %" PRIu64 "\n",
                     endpoint_names[e], status_codes[i] ? "" : "other", status_codes[i] ? status_codes[i] : 0,
                     s->requests[e][i]);
    pthread_mutex_unlock(&s->mmu);
    double tps = cs.busy_seconds > 0 ? (double)cs.tokens_generated / cs.busy_seconds : 0.0;
    EMIT("# HELP kinetic_prompt_tokens_total Prompt tokens processed.\n"
         "# TYPE kinetic_prompt_tokens_total counter\nkinetic_prompt_tokens_total %" PRIu64 "\n"
         "# HELP kinetic_generated_tokens_total Tokens generated.\n"
         "# TYPE kinetic_generated_tokens_total counter\nkinetic_generated_tokens_total %" PRIu64 "\n"
         "# HELP kinetic_completions_total Completions finished (stop or length).\n"
         "# TYPE kinetic_completions_total counter\nkinetic_completions_total %" PRIu64 "\n"
         "# HELP kinetic_completions_cancelled_total Completions cancelled (client gone).\n"
         "# TYPE kinetic_completions_cancelled_total counter\nkinetic_completions_cancelled_total %" PRIu64 "\n"
         "# HELP kinetic_scheduler_steps_total Convoy steps (one forward pass each).\n"
         "# TYPE kinetic_scheduler_steps_total counter\nkinetic_scheduler_steps_total %" PRIu64 "\n"
         "# HELP kinetic_queue_length Requests waiting for a slot.\n"
         "# TYPE kinetic_queue_length gauge\nkinetic_queue_length %d\n"
         "# HELP kinetic_queue_capacity Requests that may wait for a slot.\n"
         "# TYPE kinetic_queue_capacity gauge\nkinetic_queue_capacity %d\n"
         "# HELP kinetic_slots_busy Slots generating or reading a prompt.\n"
         "# TYPE kinetic_slots_busy gauge\nkinetic_slots_busy %d\n"
         "# HELP kinetic_slots_total Slots (--parallel).\n"
         "# TYPE kinetic_slots_total gauge\nkinetic_slots_total %d\n"
         "# HELP kinetic_tokens_per_second Generated tokens per second of scheduler work.\n"
         "# TYPE kinetic_tokens_per_second gauge\nkinetic_tokens_per_second %.3f\n",
         cs.tokens_prompt, cs.tokens_generated, cs.jobs_done, cs.jobs_cancelled, cs.steps, cs.queued,
         cs.queue_cap, cs.slots_busy, cs.n_slots, tps);
    EMIT("# HELP kinetic_draft_tokens_total RAD-1 draft tokens verified and accepted.\n"
         "# TYPE kinetic_draft_tokens_total counter\n"
         "kinetic_draft_tokens_total{result=\"proposed\"} %" PRIu64 "\n"
         "kinetic_draft_tokens_total{result=\"accepted\"} %" PRIu64 "\n"
         "# HELP kinetic_prompt_tokens_reused_total Prompt positions not recomputed (Warm Start).\n"
         "# TYPE kinetic_prompt_tokens_reused_total counter\nkinetic_prompt_tokens_reused_total %" PRIu64 "\n"
         "# HELP kinetic_prefills_total Zero Wait prefills done.\n"
         "# TYPE kinetic_prefills_total counter\nkinetic_prefills_total %" PRIu64 "\n",
         cs.draft_proposed, cs.draft_accepted, cs.prompt_tokens_reused, cs.prefills_done);
    /* llama-server's names (llamacpp:*) for what it also reports, and the gauges the
     * Gateway API Inference Extension's endpoint picker reads: the queue and the KV
     * cache's utilization (positions held by busy slots over slots x context). */
    int64_t kv_used = 0, kv_total = 0;
    convoy_kv_usage(s->convoy, &kv_used, &kv_total);
    EMIT("# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
         "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total %" PRIu64 "\n"
         "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n"
         "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total %" PRIu64 "\n"
         "# HELP llamacpp:n_decode_total Total number of forward passes (Convoy steps).\n"
         "# TYPE llamacpp:n_decode_total counter\nllamacpp:n_decode_total %" PRIu64 "\n"
         "# HELP llamacpp:requests_processing Number of requests processing.\n"
         "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing %d\n"
         "# HELP llamacpp:requests_deferred Number of requests deferred (waiting for a slot).\n"
         "# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred %d\n"
         "# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.\n"
         "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio %.6f\n"
         "# HELP llamacpp:kv_cache_tokens KV-cache positions in use by busy slots.\n"
         "# TYPE llamacpp:kv_cache_tokens gauge\nllamacpp:kv_cache_tokens %lld\n"
         "# HELP kinetic_kv_cache_positions KV-cache positions of all slots (slots x context).\n"
         "# TYPE kinetic_kv_cache_positions gauge\nkinetic_kv_cache_positions %lld\n",
         cs.tokens_prompt, cs.tokens_generated, cs.steps, cs.slots_busy, cs.queued,
         kv_total > 0 ? (double)kv_used / (double)kv_total : 0.0, (long long)kv_used,
         (long long)kv_total);
    int waiting = 0, active = 0;
    gate_counts(s->gate, &waiting, &active);
    EMIT("# HELP kinetic_http_connections Open connections: waiting for their request's head "
         "(in the gate) or with libmicrohttpd.\n"
         "# TYPE kinetic_http_connections gauge\n"
         "kinetic_http_connections{state=\"headers\"} %d\n"
         "kinetic_http_connections{state=\"active\"} %d\n",
         waiting, active);
#undef EMIT
    if (k >= cap) {
        free(out);
        return fail(s, conn, EP_METRICS, 500, "server_error", NULL, "metrics text too long");
    }
    return queue_text(s, conn, EP_METRICS, 200, out, "text/plain; version=0.0.4", NULL);
}

static enum MHD_Result handle_tokenize(struct srv *s, struct MHD_Connection *conn,
                                       const struct json_value *body)
{
    const struct json_value *c = json_get(body, "content");
    if (!json_is(c, JSON_STRING))
        return fail(s, conn, EP_TOKENIZE, 400, "invalid_request_error", "invalid_value",
                    "'content' must be a string");
    bool add_special = false, parse_special = true;
    const struct json_value *v;
    if ((v = json_get(body, "add_special")) && !json_is(v, JSON_NULL)) {
        if (!json_is(v, JSON_BOOL))
            return fail(s, conn, EP_TOKENIZE, 400, "invalid_request_error", "invalid_value",
                        "'add_special' must be true or false");
        add_special = v->u.boolean;
    }
    if ((v = json_get(body, "parse_special")) && !json_is(v, JSON_NULL)) {
        if (!json_is(v, JSON_BOOL))
            return fail(s, conn, EP_TOKENIZE, 400, "invalid_request_error", "invalid_value",
                        "'parse_special' must be true or false");
        parse_special = v->u.boolean;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    struct kn_err err = {0};
    if (s->b->tokenize(s->b->ctx, c->u.string.s, c->u.string.len, add_special, parse_special, &ids,
                       &n, &err) != KN_OK)
        return fail(s, conn, EP_TOKENIZE, 400, "invalid_request_error", "invalid_value", "%s",
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
    char *out = NULL;
    if (!ok || json_write(root, JSON_COMPACT, &out, NULL, NULL) != KN_OK)
        out = NULL;
    json_free(root);
    return send_json(s, conn, EP_TOKENIZE, 200, out);
}

static enum MHD_Result handle_detokenize(struct srv *s, struct MHD_Connection *conn,
                                         const struct json_value *body)
{
    const struct json_value *t = json_get(body, "tokens");
    if (!json_is(t, JSON_ARRAY))
        return fail(s, conn, EP_DETOKENIZE, 400, "invalid_request_error", "invalid_value",
                    "'tokens' must be an array of token ids");
    size_t n = json_len(t), cap = 0;
    if (!kn_mul_size(n, s->b->max_piece, &cap) || !kn_add_size(cap, 1, &cap))
        return fail(s, conn, EP_DETOKENIZE, 400, "invalid_request_error", "invalid_value",
                    "too many tokens");
    char *text = malloc(cap);
    if (!text)
        return MHD_NO;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t id;
        if (!json_int(json_at(t, i), &id) || id < 0 || id >= s->b->n_vocab) {
            free(text);
            return fail(s, conn, EP_DETOKENIZE, 400, "invalid_request_error", "invalid_value",
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
    char *out = NULL;
    if (clean && root && json_object_set(root, "content", json_new_stringn(clean, m), NULL) == KN_OK &&
        json_write(root, JSON_COMPACT, &out, NULL, NULL) != KN_OK)
        out = NULL;
    free(clean);
    json_free(root);
    return send_json(s, conn, EP_DETOKENIZE, 200, out);
}

/* POST /apply-template: the prompt a chat completion with this body would get (as
 * llama-server's endpoint of the same name). */
static enum MHD_Result handle_apply_template(struct srv *s, struct MHD_Connection *conn,
                                             const struct json_value *body)
{
    struct srv_error e = {0};
    char *out = NULL;
    int st = api_apply_template(s, body, &out, &e);
    if (st)
        return send_error(s, conn, EP_APPLY_TEMPLATE, &e);
    return send_json(s, conn, EP_APPLY_TEMPLATE, 200, out);
}

/* POST /v1/embeddings (embeddings.c). */
static enum MHD_Result handle_embeddings(struct srv *s, struct MHD_Connection *conn,
                                         const struct json_value *body)
{
    struct srv_error e = {0};
    char *out = NULL;
    if (api_embeddings(s, body, &out, &e))
        return send_error(s, conn, EP_EMBEDDINGS, &e);
    return send_json(s, conn, EP_EMBEDDINGS, 200, out);
}

/* ---------------------------------------------------------------- speed features */

/* POST /prefill (Zero Wait): a chat completions or completions body ("messages" or
 * "prompt"); evaluates its prompt into the prompt cache at low priority and answers when
 * that is done: {"tokens": positions now cached, "prompt_tokens", "cache_n": positions
 * that were cached already, "preempted": gave its slot up to a request first}. */
static enum MHD_Result handle_prefill(struct srv *s, struct MHD_Connection *conn,
                                      const struct json_value *body)
{
    struct srv_request r;
    struct srv_error e;
    enum srv_kind kind = json_get(body, "messages") ? SRV_KIND_CHAT : SRV_KIND_COMPLETION;
    if (api_parse_completion(s, kind, body, &r, &e) || api_prepare_prompt(s, &r, &e)) {
        srv_request_free(&r);
        return send_error(s, conn, EP_PREFILL, &e);
    }
    char *out = NULL;
    if (s->cfg.no_zero_wait || s->cfg.speed.no_warm_start) {
        if (asprintf(&out, "{\"object\":\"prefill\",\"tokens\":0,\"prompt_tokens\":%zu,"
                           "\"cache_n\":0,\"preempted\":false,\"enabled\":false}",
                     r.n_ids) < 0)
            out = NULL;
        srv_request_free(&r);
        return send_json(s, conn, EP_PREFILL, 200, out);
    }
    struct kn_err err = {0};
    struct srv_job *j = NULL;
    if (srv_job_new(&j, r.ids, r.n_ids, &err) != KN_OK) {
        srv_request_free(&r);
        return fail(s, conn, EP_PREFILL, 500, "server_error", NULL, "%s", err.msg);
    }
    srv_request_free(&r);
    j->prefill = true;
    j->max_tokens = 1;
    enum kn_status st = convoy_submit_prefill(s->convoy, j, &err);
    if (st != KN_OK) {
        convoy_release(NULL, j);
        if (st == KN_E_LIMIT)
            return fail(s, conn, EP_PREFILL, 503, "server_error", "server_busy",
                        "the server is busy: %s; retry in a moment", err.msg);
        return fail(s, conn, EP_PREFILL, 503, "server_error", "shutting_down", "%s", err.msg);
    }
    while (!convoy_wait(s->convoy, j, INT64_MAX, 100)) {
        if (client_gone(conn)) {
            convoy_cancel(s->convoy, j);
            convoy_release(s->convoy, j);
            return MHD_NO;
        }
    }
    enum MHD_Result res;
    if (j->finish == SRV_FINISH_ERROR)
        res = fail(s, conn, EP_PREFILL, 500, "server_error", "generation_failed", "%s", j->error);
    else if (j->finish == SRV_FINISH_CANCELLED)
        res = fail(s, conn, EP_PREFILL, 503, "server_error", "shutting_down",
                   "the server is shutting down");
    else {
        /* Done: the scheduler no longer writes the job. */
        if (asprintf(&out, "{\"object\":\"prefill\",\"tokens\":%lld,\"prompt_tokens\":%zu,"
                           "\"cache_n\":%lld,\"preempted\":%s,\"enabled\":true}",
                     (long long)j->n_fed, j->n_prompt, (long long)j->n_cached,
                     j->preempted ? "true" : "false") < 0)
            out = NULL;
        res = send_json(s, conn, EP_PREFILL, 200, out);
    }
    convoy_release(s->convoy, j);
    return res;
}

/* GET /stats: the scheduler's counters and the speed features' (docs/speed.md). */
static enum MHD_Result handle_stats(struct srv *s, struct MHD_Connection *conn)
{
    struct convoy_stats cs;
    convoy_get_stats(s->convoy, &cs);
    struct srv_cache_stats ks = {0};
    bool cache = s->b->cache_stats && !s->cfg.speed.no_warm_start;
    if (cache)
        s->b->cache_stats(s->b->ctx, &ks);
    char cache_json[512] = "null";
    if (cache)
        snprintf(cache_json, sizeof cache_json,
                 "{\"hits\":%lld,\"misses\":%lld,\"tokens_restored\":%lld,\"stores\":%lld,"
                 "\"evictions\":%lld,\"records\":%lld,\"bytes\":%zu,\"max_bytes\":%zu}",
                 (long long)ks.hits, (long long)ks.misses, (long long)ks.tokens_restored,
                 (long long)ks.stores, (long long)ks.evictions, (long long)ks.records, ks.bytes,
                 ks.max_bytes);
    char *out = NULL;
    if (asprintf(&out,
                 "{\"slots\":%d,\"slots_busy\":%d,\"requests_waiting\":%d,\"queue_capacity\":%d,"
                 "\"completions\":%" PRIu64 ",\"cancelled\":%" PRIu64 ",\"prompt_tokens\":%" PRIu64
                 ",\"generated_tokens\":%" PRIu64 ",\"steps\":%" PRIu64 ",\"busy_seconds\":%.3f,"
                 "\"draft\":{\"enabled\":%s,\"max\":%d,\"proposed\":%" PRIu64 ",\"accepted\":%" PRIu64
                 ",\"passes\":%" PRIu64 "},"
                 "\"warm_start\":{\"enabled\":%s,\"prompt_tokens_reused\":%" PRIu64
                 ",\"slot_reuse_tokens\":%" PRIu64 ",\"cache_restored_tokens\":%" PRIu64
                 ",\"cache\":%s},"
                 "\"zero_wait\":{\"enabled\":%s,\"prefills\":%" PRIu64 ",\"preempted\":%" PRIu64
                 ",\"tokens\":%" PRIu64 ",\"queued\":%d,\"queue_capacity\":%d}}",
                 cs.n_slots, cs.slots_busy, cs.queued, cs.queue_cap, cs.jobs_done, cs.jobs_cancelled,
                 cs.tokens_prompt, cs.tokens_generated, cs.steps, cs.busy_seconds,
                 cs.draft_max > 0 ? "true" : "false", cs.draft_max, cs.draft_proposed,
                 cs.draft_accepted, cs.draft_passes, s->cfg.speed.no_warm_start ? "false" : "true",
                 cs.prompt_tokens_reused, cs.slot_reuse_tokens, cs.cache_restored_tokens, cache_json,
                 s->cfg.no_zero_wait || s->cfg.speed.no_warm_start ? "false" : "true",
                 cs.prefills_done, cs.prefills_preempted, cs.prefill_tokens, cs.prefill_queued,
                 cs.prefill_queue_cap) < 0)
        out = NULL;
    return send_json(s, conn, EP_STATS, 200, out);
}

/* ---------------------------------------------------------------- the web page */

/* The page and the scripts it renders Markdown with (src/server/vendor), embedded by
 * cmake/embed_text.cmake, each answered at its route's path. */
extern const unsigned char srv_webui_html[], srv_webui_marked[], srv_webui_purify[];
extern const size_t srv_webui_html_len, srv_webui_marked_len, srv_webui_purify_len;

static enum MHD_Result handle_ui(struct srv *s, struct MHD_Connection *conn, const char *path)
{
    static const struct {
        const char *path, *ctype;
        const unsigned char *data;
        const size_t *len;
    } files[] = {
        {"/", "text/html; charset=utf-8", srv_webui_html, &srv_webui_html_len},
        {"/vendor/marked.min.js", "text/javascript; charset=utf-8", srv_webui_marked,
         &srv_webui_marked_len},
        {"/vendor/purify.min.js", "text/javascript; charset=utf-8", srv_webui_purify,
         &srv_webui_purify_len},
    };
    const size_t n = sizeof files / sizeof files[0];
    size_t i = 0;
    while (i < n && strcmp(files[i].path, path) != 0)
        i++;
    assert(i < n && "every EP_UI route has its file");
    char *body = malloc(*files[i].len + 1);
    if (!body)
        return MHD_NO;
    memcpy(body, files[i].data, *files[i].len + 1);
    const char *hdrs[] = {"Cache-Control", "no-cache", NULL};
    return queue_text(s, conn, EP_UI, 200, body, files[i].ctype, hdrs);
}

/* POST /verify-receipt: reruns a receipt (the body, as sent) as `kinetic verify-receipt`
 * does, with this server's model file, and answers {"verified", "exit_code", "report"}.
 * One at a time and SRV_VERIFY_INTERVAL_S apart (429 otherwise: a rerun costs a whole
 * generation); --no-verify turns it off. */
static enum MHD_Result handle_verify(struct srv *s, struct MHD_Connection *conn, const char *body,
                                     size_t len)
{
    if (s->cfg.no_verify)
        return fail(s, conn, EP_VERIFY, 403, "permission_error", "verify_disabled",
                    "receipt verification is turned off on this server (--no-verify)");
    if (!s->b->model_path || !s->cfg.receipt)
        return fail(s, conn, EP_VERIFY, 400, "invalid_request_error", "unsupported_value",
                    "this server makes no receipts (the toy model), so it verifies none");
    if (pthread_mutex_trylock(&s->vmu) != 0)
        return fail(s, conn, EP_VERIFY, 429, "rate_limit_error", "verify_busy",
                    "a receipt is being verified; retry in a few seconds");
    double wait = s->verify_last + SRV_VERIFY_INTERVAL_S - kn_now();
    if (s->verify_last > 0 && wait > 0) {
        pthread_mutex_unlock(&s->vmu);
        return fail(s, conn, EP_VERIFY, 429, "rate_limit_error", "verify_rate",
                    "one verification per %d seconds; retry in %.1f s", SRV_VERIFY_INTERVAL_S, wait);
    }
    char *report = NULL;
    size_t report_len = 0;
    FILE *out = open_memstream(&report, &report_len);
    int rc = -1;
    if (out) {
        struct receipt_verify_opts o = {.model = s->b->model_path, .threads = 2};
        rc = receipt_verify_text(body, len, NULL, &o, out);
        fclose(out);
    }
    s->verify_last = kn_now();
    pthread_mutex_unlock(&s->vmu);
    if (rc < 0) {
        free(report);
        return fail(s, conn, EP_VERIFY, 500, "server_error", NULL,
                    "out of memory starting the verification");
    }
    struct json_value *root = json_new_object();
    bool ok = root && json_object_set(root, "verified", json_new_bool(rc == 0), NULL) == KN_OK &&
              json_object_set(root, "exit_code", json_new_int(rc), NULL) == KN_OK &&
              json_object_set(root, "report", json_new_stringn(report, report_len), NULL) == KN_OK;
    free(report);
    char *text = NULL;
    if (!ok || json_write(root, JSON_COMPACT, &text, NULL, NULL) != KN_OK)
        text = NULL;
    json_free(root);
    return send_json(s, conn, EP_VERIFY, 200, text);
}

/* ---------------------------------------------------------------- dispatch */

static bool json_content_type(struct MHD_Connection *conn)
{
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    if (!ct)
        return true; /* simple clients send none; the body still has to be JSON */
    while (*ct == ' ')
        ct++;
    return strncasecmp(ct, "application/json", 16) == 0 &&
           (ct[16] == '\0' || ct[16] == ';' || ct[16] == ' ');
}

static enum MHD_Result dispatch(struct srv *s, struct MHD_Connection *conn, struct req *q)
{
    enum endpoint ep = q->route->ep;
    switch (ep) {
    case EP_MODELS: return handle_models(s, conn);
    case EP_HEALTH: return handle_health(s, conn);
    case EP_METRICS: return handle_metrics(s, conn);
    case EP_STATS: return handle_stats(s, conn);
    case EP_SLOTS: return handle_slots(s, conn);
    case EP_PROPS: return handle_props(s, conn);
    case EP_UI: return handle_ui(s, conn, q->route->path);
    default: break;
    }
    if (q->too_big)
        return fail(s, conn, ep, 413, "invalid_request_error", "request_too_large",
                    "the request body is larger than %zu bytes (--max-body)", s->cfg.max_body);
    if (q->len == 0)
        return fail(s, conn, ep, 400, "invalid_request_error", "invalid_json",
                    "the request body is empty; send a JSON object");
    struct json_limits lim = {s->cfg.max_body, (size_t)s->cfg.max_depth, s->cfg.max_body, 0};
    struct json_value *body = NULL;
    struct kn_err err = {0};
    if (json_parse(q->body, q->len, &lim, &body, &err) != KN_OK)
        return fail(s, conn, ep, 400, "invalid_request_error", "invalid_json",
                    "the request body is not valid JSON: %.500s", err.msg);
    enum MHD_Result res;
    if (!json_is(body, JSON_OBJECT))
        res = fail(s, conn, ep, 400, "invalid_request_error", "invalid_json",
                   "the request body must be a JSON object");
    else if (ep == EP_VERIFY)
        res = handle_verify(s, conn, q->body, q->len);
    else if (!json_is(body, JSON_OBJECT))
        res = fail(s, conn, ep, 400, "invalid_request_error", "invalid_json",
                   "the request body must be a JSON object");
    else if (ep == EP_TOKENIZE)
        res = handle_tokenize(s, conn, body);
    else if (ep == EP_DETOKENIZE)
        res = handle_detokenize(s, conn, body);
    else if (ep == EP_PREFILL)
        res = handle_prefill(s, conn, body);
    else if (ep == EP_APPLY_TEMPLATE)
        res = handle_apply_template(s, conn, body);
    else if (ep == EP_EMBEDDINGS)
        res = handle_embeddings(s, conn, body);
    else
        res = handle_completion(s, conn, ep, body, q);
    json_free(body);
    return res;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    struct srv *s = cls;
    struct req *q = *con_cls;
    if (!q) {
        /* First call: headers only. Refuse what needs no body as early as possible. */
        q = calloc(1, sizeof *q);
        if (!q)
            return MHD_NO;
        *con_cls = q;
        q->t0 = kn_now();
        snprintf(q->method, sizeof q->method, "%s", method);
        snprintf(q->path, sizeof q->path, "%s", url);
        for (char *c = q->path; *c; c++) /* no line breaks or escapes into the log */
            if ((unsigned char)*c < 0x20 || *c == 0x7f)
                *c = '?';
        pthread_mutex_lock(&s->mmu);
        s->active++;
        pthread_mutex_unlock(&s->mmu);
        const struct route *path_match = NULL;
        for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
            if (strcmp(url, routes[i].path) != 0)
                continue;
            path_match = &routes[i];
            if (strcmp(method, routes[i].method) == 0)
                q->route = &routes[i];
        }
        q->answered = true;
        if (!path_match)
            return fail(s, conn, EP_OTHER, 404, "invalid_request_error", "unknown_url",
                        "unknown endpoint: %s %.200s; see /v1/models, /v1/chat/completions, "
                        "/v1/completions, /v1/embeddings, /health, /metrics, /slots, /props, /tokenize, /detokenize, "
                        "/prefill, /stats, /apply-template, /verify-receipt, /",
                        method, url);
        if (!q->route && s->cfg.cors && strcmp(method, "OPTIONS") == 0) {
            /* a browser's CORS preflight: what the route allows */
            char allow[32];
            snprintf(allow, sizeof allow, "%s, OPTIONS", path_match->method);
            const char *hdrs[] = {"Access-Control-Allow-Methods", allow,
                                  "Access-Control-Allow-Headers", "Authorization, Content-Type",
                                  "Access-Control-Max-Age", "86400", NULL};
            return queue_text(s, conn, path_match->ep, 204, strdup(""), "text/plain", hdrs);
        }
        if (!q->route) {
            const char *hdrs[] = {"Allow", path_match->method, NULL};
            struct srv_error e = {405, "invalid_request_error", "method_not_allowed", NULL, {0}};
            snprintf(e.message, sizeof e.message, "%s is not allowed on %s; use %s", method,
                     path_match->path, path_match->method);
            return queue_text(s, conn, path_match->ep, 405, api_error_json(&e), "application/json",
                              hdrs);
        }
        if (!q->route->open && !authorized(s, conn))
            return fail(s, conn, q->route->ep, 401, "invalid_request_error", "invalid_api_key",
                        "a valid API key is required: send 'Authorization: Bearer <key>'");
        if (!srv_ready(s) && q->route->ep != EP_HEALTH)
            return fail(s, conn, q->route->ep, 503, "unavailable_error", "model_loading",
                        "the model is loading; retry when /health answers 200");
        if (strcmp(method, "POST") == 0 && __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE))
            return fail(s, conn, q->route->ep, 503, "unavailable_error", "draining",
                        "this replica is draining for a restart; retry the request (another "
                        "replica of the same build and device class gives the same answer)");
        if (strcmp(method, "POST") == 0) {
            if (!json_content_type(conn))
                return fail(s, conn, q->route->ep, 415, "invalid_request_error",
                            "unsupported_media_type",
                            "the request body must be JSON (Content-Type: application/json)");
            const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
            if (cl) {
                char *end;
                errno = 0;
                unsigned long long n = strtoull(cl, &end, 10);
                if (errno || *end || n > s->cfg.max_body)
                    return fail(s, conn, q->route->ep, 413, "invalid_request_error",
                                "request_too_large",
                                "the request body (%s bytes) is larger than %zu bytes (--max-body)",
                                cl, s->cfg.max_body);
            }
        }
        q->answered = false;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci)
            return MHD_NO;
        gate_upload_begin(s->gate, &q->up, ci->connect_fd);
        return MHD_YES;
    }
    if (q->answered) { /* an early answer was queued: discard any body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        gate_upload_add(s->gate, &q->up, n);
        if (q->too_big || q->len + n > s->cfg.max_body) {
            q->too_big = true;
            return MHD_YES;
        }
        if (q->len + n + 1 > q->cap) {
            size_t cap = q->cap ? q->cap : 4096;
            while (cap < q->len + n + 1)
                cap *= 2;
            char *b = realloc(q->body, cap);
            if (!b)
                return MHD_NO;
            q->body = b;
            q->cap = cap;
        }
        memcpy(q->body + q->len, upload, n);
        q->len += n;
        return MHD_YES;
    }
    q->answered = true;
    gate_upload_end(s->gate, &q->up); /* the body is in: generating may take its time */
    return dispatch(s, conn, q);
}

/* One line per request at the default level (docs/server.md "Logs"): method, path,
 * status (0: no answer went out), tokens in and out, seconds; --log-format json writes
 * the same as fields. */
static void log_request(struct MHD_Connection *conn, const struct req *q)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
    int status = ci ? (int)ci->http_status : 0;
    double sec = kn_now() - q->t0;
    char msg[256];
    snprintf(msg, sizeof msg, "%s %s %d, %lld tokens in, %lld out, %.3f s", q->method, q->path,
             status, (long long)q->n_in, (long long)q->n_out, sec);
    struct json_value *f = json_new_object();
    if (f && json_object_set(f, "method", json_new_string(q->method), NULL) == KN_OK &&
        json_object_set(f, "path", json_utf8_valid(q->path, strlen(q->path))
                                       ? json_new_string(q->path) : json_new_string("?"), NULL) == KN_OK &&
        json_object_set(f, "status", json_new_int(status), NULL) == KN_OK &&
        json_object_set(f, "tokens_in", json_new_int(q->n_in), NULL) == KN_OK &&
        json_object_set(f, "tokens_out", json_new_int(q->n_out), NULL) == KN_OK &&
        json_object_set(f, "seconds", json_new_double(round(sec * 1e3) / 1e3), NULL) == KN_OK)
        kn_log_event(KN_LOG_INFO, msg, f);
    else
        kn_log_event(KN_LOG_INFO, msg, NULL);
    json_free(f);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)toe;
    struct srv *s = cls;
    struct req *q = *con_cls;
    if (q) {
        log_request(conn, q);
        gate_upload_end(s->gate, &q->up);
        free(q->body);
        free(q);
        *con_cls = NULL;
        pthread_mutex_lock(&s->mmu);
        if (--s->active == 0)
            pthread_cond_broadcast(&s->idle_cv);
        pthread_mutex_unlock(&s->mmu);
    }
}

/* libmicrohttpd's connection notices: the gate counts the connections it holds. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct srv *s = cls;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr)
        return;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        gate_conn_count(s->gate, ci->client_addr, 1);
        *socket_context = s;
    } else if (*socket_context) {
        gate_conn_count(s->gate, ci->client_addr, -1);
        *socket_context = NULL;
    }
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    kn_log(KN_LOG_DEBUG, "http: %s", msg);
}

/* ---------------------------------------------------------------- start and stop */

/* The X-Kinetic-Replica values: NAME (--replica, else HOST:PORT; control characters and
 * ';' become '_' so the header stays one field) and the build, then the device class once
 * the backend is known. */
static void replica_header(struct srv *s)
{
    char name[96];
    if (s->cfg.replica && s->cfg.replica[0])
        snprintf(name, sizeof name, "%s", s->cfg.replica);
    else
        snprintf(name, sizeof name, "%s:%d", s->cfg.host, s->port);
    for (char *p = name; *p; p++)
        if ((uint8_t)*p < 0x20 || *p == 0x7f || *p == ';')
            *p = '_';
    snprintf(s->replica_loading, sizeof s->replica_loading, "%s; build=%s", name,
             s->cfg.build && s->cfg.build[0] ? s->cfg.build : "unknown");
    if (s->b)
        snprintf(s->replica_ready, sizeof s->replica_ready, "%s; device=%s", s->replica_loading,
                 s->b->device_class);
}

/* Gives the server its backend and starts the scheduler; the endpoints answer from then
 * on (ready is published last). */
static enum kn_status attach(struct srv *s, struct srv_backend *b, struct kn_err *err)
{
    s->b = b;
    replica_header(s);
    snprintf(s->model_id, sizeof s->model_id, "%s", s->cfg.alias ? s->cfg.alias : b->name);
    for (char *p = s->model_id; *p; p++)
        if (*p == '"' || *p == '\\' || (uint8_t)*p < 0x20)
            *p = '_'; /* the id is written into JSON by hand in /v1/models */
    int queue = s->cfg.queue > 0 ? s->cfg.queue : 4 * b->n_slots;
    enum kn_status st = convoy_start_speed(&s->convoy, b, queue, &s->cfg.speed, err);
    if (st != KN_OK) {
        s->b = NULL;
        return st;
    }
    __atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
    return KN_OK;
}

enum kn_status srv_attach(struct srv *s, struct srv_backend *b, struct kn_err *err)
{
    if (srv_ready(s))
        return kn_fail(err, KN_E_INTERNAL, "serve: the server has a backend already");
    return attach(s, b, err);
}

enum kn_status srv_start(struct srv **out, const struct srv_config *cfg, struct srv_backend *b,
                         struct kn_err *err)
{
    *out = NULL;
    struct srv *s = kn_calloc(1, sizeof *s, err);
    if (!s)
        return KN_E_NOMEM;
    s->cfg = *cfg;
    if (!s->cfg.host)
        s->cfg.host = "127.0.0.1";
    if (!s->cfg.max_body)
        s->cfg.max_body = 1u << 20;
    if (!s->cfg.max_depth)
        s->cfg.max_depth = 32;
    if (s->cfg.timeout_s <= 0)
        s->cfg.timeout_s = SRV_DEFAULT_TIMEOUT_S;
    if (s->cfg.header_timeout_s <= 0)
        s->cfg.header_timeout_s = SRV_DEFAULT_HEADER_TIMEOUT_S;
    if (s->cfg.max_connections <= 0)
        s->cfg.max_connections = SRV_DEFAULT_MAX_CONNECTIONS;
    if (s->cfg.max_connections_per_ip <= 0)
        s->cfg.max_connections_per_ip = SRV_DEFAULT_MAX_CONNECTIONS_PER_IP;
    pthread_mutex_init(&s->mmu, NULL);
    pthread_mutex_init(&s->gmu, NULL);
    pthread_mutex_init(&s->vmu, NULL);
    pthread_cond_init(&s->idle_cv, NULL);

    struct sockaddr_in a4;
    struct sockaddr_in6 a6;
    const struct sockaddr *addr;
    socklen_t addr_len;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG | MHD_USE_ITC | MHD_USE_NO_LISTEN_SOCKET;
    memset(&a4, 0, sizeof a4);
    memset(&a6, 0, sizeof a6);
    if (inet_pton(AF_INET, s->cfg.host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)s->cfg.port);
        addr = (const struct sockaddr *)&a4;
        addr_len = sizeof a4;
    } else if (inet_pton(AF_INET6, s->cfg.host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)s->cfg.port);
        addr = (const struct sockaddr *)&a6;
        addr_len = sizeof a6;
        flags |= MHD_USE_IPv6;
    } else {
        pthread_mutex_destroy(&s->mmu);
        free(s);
        return kn_fail(err, KN_E_ARG, "serve: --host '%s' is not an IPv4 or IPv6 address",
                       cfg->host);
    }
    if (s->cfg.port < 0 || s->cfg.port > 65535) {
        pthread_mutex_destroy(&s->mmu);
        free(s);
        return kn_fail(err, KN_E_ARG, "serve: --port %d is out of range (0..65535)", cfg->port);
    }

    struct kn_err gerr = {0};
    enum kn_status st = gate_open(&s->gate, s, addr, addr_len, &s->port, &gerr);
    if (st != KN_OK) {
        int e = errno;
        pthread_mutex_destroy(&s->mmu);
        free(s);
        if (st != KN_E_IO)
            return kn_fail(err, st, "%s", gerr.msg);
        return kn_fail(err, KN_E_IO, "serve: cannot listen on %s:%d (%s); is the port in use?",
                       cfg->host ? cfg->host : "127.0.0.1", cfg->port, strerror(e));
    }
    replica_header(s);
    st = b ? attach(s, b, err) : KN_OK;
    if (st != KN_OK) {
        gate_free(s->gate);
        pthread_mutex_destroy(&s->mmu);
        free(s);
        return st;
    }
    /* libmicrohttpd's own limits stay as a backstop; the gate counts first. */
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.timeout_s,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)s->cfg.max_connections_per_ip,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_END);
    if (!s->d || gate_run(s->gate, err) != KN_OK) {
        if (!s->d)
            kn_fail(err, KN_E_IO, "serve: cannot start the HTTP daemon");
        if (s->d)
            MHD_stop_daemon(s->d);
        convoy_stop(s->convoy);
        convoy_free(s->convoy);
        gate_free(s->gate);
        pthread_mutex_destroy(&s->mmu);
        free(s);
        return KN_E_IO;
    }
    *out = s;
    return KN_OK;
}

int srv_port(const struct srv *s)
{
    return s->port;
}

void srv_drain(struct srv *s)
{
    __atomic_store_n(&s->draining, 1, __ATOMIC_RELEASE);
}

bool srv_busy(struct srv *s)
{
    if (!srv_ready(s))
        return false;
    struct convoy_stats cs;
    convoy_get_stats(s->convoy, &cs);
    return cs.slots_busy > 0 || cs.queued > 0;
}

void srv_stop(struct srv *s)
{
    if (!s)
        return;
    s->stopping = 1;
    /* Stop accepting, end every job (waiting handlers answer 503 or end their streams),
     * then join the connection threads; only then may the convoy go. */
    gate_stop(s->gate);
    convoy_stop(s->convoy);
    /* Let the answers to cancelled requests go out (bounded: 5 s). */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 5;
    pthread_mutex_lock(&s->mmu);
    while (s->active > 0)
        if (pthread_cond_timedwait(&s->idle_cv, &s->mmu, &dl) != 0)
            break;
    pthread_mutex_unlock(&s->mmu);
    MHD_stop_daemon(s->d);
    gate_free(s->gate);
    convoy_free(s->convoy);
    api_free(s);
    pthread_mutex_destroy(&s->mmu);
    pthread_mutex_destroy(&s->gmu);
    pthread_mutex_destroy(&s->vmu);
    pthread_cond_destroy(&s->idle_cv);
    free(s);
}
