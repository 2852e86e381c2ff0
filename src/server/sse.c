/* sse.c: a completion answered as a stream of server-sent events (OpenAI's chunks, then
 * the usage chunk, then "data: [DONE]"). The stream waits for its jobs inside
 * libmicrohttpd's content reader, in short slices so that a client that hangs up is
 * noticed (its jobs are cancelled and the slots freed when the stream is freed). */
#include "srv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int64_t *n_out;       /* its request's generated tokens (srv_call), for its log line */
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
    struct json_value *receipt = srv_make_receipt(s, &st->req, j, &e);
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
            if (s->stopping || srv_client_gone(st->conn))
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
        *st->n_out = 0;
        for (int i = 0; i < st->n; i++)
            *st->n_out += st->ch[i].seen;
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

enum MHD_Result srv_stream_answer(const struct srv_call *c, struct srv_request *r,
                                  struct srv_job *const *jobs, int n, const char *id,
                                  int64_t created, bool *taken)
{
    *taken = false;
    struct stream *stc = calloc(1, sizeof *stc);
    if (!stc)
        return MHD_NO;
    stc->s = c->s;
    stc->conn = c->conn;
    stc->n_out = c->n_out;
    stc->req = *r;
    stc->n = n;
    for (int i = 0; i < n; i++) {
        stc->ch[i].job = stc->jobs[i] = jobs[i];
        if (r->think)
            stc->ch[i].think = *r->think; /* nothing fed yet: each choice its own */
    }
    snprintf(stc->id, sizeof stc->id, "%s", id);
    stc->created = created;
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
                                                                  stream_reader, stc, stream_free);
    if (!resp) {
        free(stc);
        return MHD_NO;
    }
    *taken = true; /* stream_free releases r and the jobs */
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    srv_add_common_headers(c->s, resp);
    enum MHD_Result ok = MHD_queue_response(c->conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    srv_count(c->s, c->ep, 200);
    return ok;
}
