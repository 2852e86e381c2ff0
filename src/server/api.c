/* api.c: the OpenAI API's requests: validating /v1/chat/completions and /v1/completions
 * bodies (and /apply-template's), structured output and tool calls as grammars, and the
 * prompt's tokens. The responses are written in api_response.c.
 *
 * Validation refuses bad values with 400 and a message naming the field and the range;
 * unknown fields are ignored (as OpenAI's clients send many); null means "not given". */
#include "srv_internal.h"
#include "chat/chat.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv_error_set(struct srv_error *e, int status, const char *type, const char *code,
                  const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    e->param = param;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return status;
}

#define BAD(e, param, ...) \
    srv_error_set((e), 400, "invalid_request_error", "invalid_value", (param), __VA_ARGS__)

void srv_request_free(struct srv_request *r)
{
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    for (size_t i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].role);
        free(r->msgs[i].content);
    }
    free(r->msgs);
    free(r->prompt_text);
    free(r->ids);
    free(r->rendered);
    json_free(r->input);
    json_free(r->tools);
    json_free(r->tmpl_kwargs);
    grammar_free(r->grammar);
    free(r->grammar_text);
    json_free(r->response_format);
    free(r->think);
    free(r->tool_name);
    memset(r, 0, sizeof *r);
}

void api_free(struct srv *s)
{
    grammar_vocab_free(s->gvocab);
    s->gvocab = NULL;
}

/* ---------------------------------------------------------------- field readers */

static int get_int(const struct json_value *body, const char *key, int64_t lo, int64_t hi,
                   int64_t *out, bool *given, struct srv_error *e)
{
    const struct json_value *v = json_get(body, key);
    if (!v || json_is(v, JSON_NULL))
        return 0;
    int64_t i;
    if (!json_int(v, &i)) {
        double d;
        if (json_double(v, &d))
            return BAD(e, key, "'%s' must be an integer between %lld and %lld", key,
                       (long long)lo, (long long)hi);
        return BAD(e, key, "'%s' must be an integer", key);
    }
    if (i < lo || i > hi)
        return BAD(e, key, "'%s' is %lld; it must be between %lld and %lld", key, (long long)i,
                   (long long)lo, (long long)hi);
    *out = i;
    if (given)
        *given = true;
    return 0;
}

static int get_bool(const struct json_value *body, const char *key, bool *out,
                    struct srv_error *e)
{
    const struct json_value *v = json_get(body, key);
    if (!v || json_is(v, JSON_NULL))
        return 0;
    if (!json_is(v, JSON_BOOL))
        return BAD(e, key, "'%s' must be true or false", key);
    *out = v->u.boolean;
    return 0;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* A message's content: a string, or an array of {"type":"text","text":...} parts. */
static int read_content(const struct json_value *c, size_t idx, char **out, struct srv_error *e)
{
    if (json_is(c, JSON_STRING)) {
        if (memchr(c->u.string.s, 0, c->u.string.len))
            return BAD(e, "messages", "messages[%zu].content contains a NUL character", idx);
        *out = dup_n(c->u.string.s, c->u.string.len);
        return *out ? 0 : srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    if (!json_is(c, JSON_ARRAY))
        return BAD(e, "messages", "messages[%zu].content must be a string or an array of text parts",
                   idx);
    size_t total = 0;
    for (size_t i = 0; i < json_len(c); i++) {
        const struct json_value *p = json_at(c, i);
        const char *type = json_str(json_get(p, "type"));
        if (!type || strcmp(type, "text") != 0)
            return srv_error_set(e, 400, "invalid_request_error", "unsupported_content", "messages",
                                 "messages[%zu].content[%zu]: only text parts are supported "
                                 "(type \"text\"), not \"%s\"", idx, i, type ? type : "?");
        const struct json_value *t = json_get(p, "text");
        if (!json_is(t, JSON_STRING) || memchr(t->u.string.s, 0, t->u.string.len))
            return BAD(e, "messages", "messages[%zu].content[%zu].text must be a string", idx, i);
        total += t->u.string.len;
    }
    char *s = malloc(total + 1);
    if (!s)
        return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < json_len(c); i++) {
        const struct json_value *t = json_get(json_at(c, i), "text");
        memcpy(s + k, t->u.string.s, t->u.string.len);
        k += t->u.string.len;
    }
    s[k] = '\0';
    *out = s;
    return 0;
}

static int read_messages(const struct json_value *body, struct srv_request *r, struct srv_error *e,
                         bool s_chat_json)
{
    const struct json_value *m = json_get(body, "messages");
    if (!m || json_is(m, JSON_NULL))
        return srv_error_set(e, 400, "invalid_request_error", "missing_required_parameter",
                             "messages", "'messages' is required: an array of {\"role\", \"content\"}");
    if (!json_is(m, JSON_ARRAY))
        return BAD(e, "messages", "'messages' must be an array");
    size_t n = json_len(m);
    if (n == 0)
        return BAD(e, "messages", "'messages' is empty; it needs at least one message");
    if (n > 4096)
        return BAD(e, "messages", "'messages' has %zu entries; at most 4096 are accepted", n);
    r->msgs = calloc(n, sizeof *r->msgs);
    if (!r->msgs)
        return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const struct json_value *msg = json_at(m, i);
        if (!json_is(msg, JSON_OBJECT))
            return BAD(e, "messages", "messages[%zu] must be an object", i);
        const char *role = json_str(json_get(msg, "role"));
        if (!role)
            return BAD(e, "messages", "messages[%zu].role must be a string", i);
        if (strcmp(role, "developer") == 0)
            role = "system"; /* OpenAI's newer name for the system role */
        /* tool: a tool's result, for templates that take tools (chat_json backends) */
        bool tool_ok = s_chat_json && strcmp(role, "tool") == 0;
        if (strcmp(role, "system") != 0 && strcmp(role, "user") != 0 &&
            strcmp(role, "assistant") != 0 && !tool_ok)
            return BAD(e, "messages",
                       "messages[%zu].role is \"%.40s\"; it must be system, user or assistant%s", i,
                       role, s_chat_json ? " (or tool)" : "");
        const struct json_value *c = json_get(msg, "content");
        /* An assistant turn that only calls tools has content null. */
        static const struct json_value empty = {.type = JSON_STRING, .u.string = {"", 0}};
        if (s_chat_json && chat_msg_only_calls(msg))
            c = &empty;
        if (!c || json_is(c, JSON_NULL))
            return BAD(e, "messages", "messages[%zu].content is required", i);
        r->msgs[r->n_msgs].role = dup_n(role, strlen(role));
        if (!r->msgs[r->n_msgs].role)
            return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        r->n_msgs++;
        int st = read_content(c, i, &r->msgs[r->n_msgs - 1].content, e);
        if (st)
            return st;
    }
    r->input = json_clone(m);
    return r->input ? 0 : srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

static int read_prompt(struct srv *s, const struct json_value *body, struct srv_request *r,
                       struct srv_error *e)
{
    const struct json_value *p = json_get(body, "prompt");
    if (!p || json_is(p, JSON_NULL))
        return srv_error_set(e, 400, "invalid_request_error", "missing_required_parameter",
                             "prompt", "'prompt' is required: a string or an array of token ids");
    if (json_is(p, JSON_ARRAY) && json_len(p) == 1 && json_is(json_at(p, 0), JSON_STRING))
        p = json_at(p, 0); /* ["text"]: one prompt */
    if (json_is(p, JSON_STRING)) {
        /* As for messages: a receipt's input must re-tokenize to its prompt, and the
         * verifier refuses text with a NUL byte (docs/receipts.md). */
        if (memchr(p->u.string.s, 0, p->u.string.len))
            return BAD(e, "prompt", "'prompt' contains a NUL character");
        r->prompt_text = dup_n(p->u.string.s, p->u.string.len);
        r->prompt_len = p->u.string.len;
        if (!r->prompt_text)
            return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    } else if (json_is(p, JSON_ARRAY)) {
        size_t n = json_len(p);
        if (n == 0)
            return BAD(e, "prompt", "'prompt' is an empty array");
        if (json_is(json_at(p, 0), JSON_STRING))
            return BAD(e, "prompt", "'prompt' holds %zu strings; only one prompt per request is "
                       "supported (send one request per prompt)", n);
        if ((int64_t)n >= s->b->n_ctx)
            return srv_error_set(e, 400, "invalid_request_error", "context_length_exceeded",
                                 "prompt", "the prompt has %zu tokens but the slot context holds "
                                 "%lld (--ctx-size)", n, (long long)s->b->n_ctx);
        r->ids = malloc(n * sizeof *r->ids);
        if (!r->ids)
            return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            int64_t id;
            if (!json_int(json_at(p, i), &id) || id < 0 || id >= s->b->n_vocab)
                return BAD(e, "prompt", "prompt[%zu] must be a token id between 0 and %d", i,
                           (int)s->b->n_vocab - 1);
            r->ids[i] = (int32_t)id;
        }
        r->n_ids = n;
    } else {
        return BAD(e, "prompt", "'prompt' must be a string or an array of token ids");
    }
    r->input = json_clone(p);
    return r->input ? 0 : srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

static int read_stop_field(const struct json_value *body, struct srv_request *r,
                           struct srv_error *e)
{
    const struct json_value *v = json_get(body, "stop");
    if (!v || json_is(v, JSON_NULL))
        return 0;
    const struct json_value *one[1] = {v};
    size_t n = 1;
    if (json_is(v, JSON_ARRAY)) {
        n = json_len(v);
        if (n > SRV_MAX_STOP)
            return BAD(e, "stop", "'stop' has %zu strings; at most %d are accepted", n,
                       SRV_MAX_STOP);
    } else if (!json_is(v, JSON_STRING)) {
        return BAD(e, "stop", "'stop' must be a string or an array of strings");
    }
    for (size_t i = 0; i < n; i++) {
        const struct json_value *s = json_is(v, JSON_ARRAY) ? json_at(v, i) : one[0];
        if (!json_is(s, JSON_STRING))
            return BAD(e, "stop", "'stop' must be a string or an array of strings");
        if (s->u.string.len == 0)
            continue; /* an empty stop string would end every answer at once */
        if (memchr(s->u.string.s, 0, s->u.string.len))
            return BAD(e, "stop", "a stop string contains a NUL character");
        if (s->u.string.len > 256)
            return BAD(e, "stop", "a stop string is %zu bytes; at most 256 are accepted",
                       s->u.string.len);
        r->stop[r->n_stop] = dup_n(s->u.string.s, s->u.string.len);
        if (!r->stop[r->n_stop])
            return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        r->stop_len[r->n_stop++] = s->u.string.len;
    }
    return 0;
}

/* "stop", and the template's turn ends (ends, n_ends: the plain format's next role line),
 * which end every answer of a chat as the model's end-of-turn token would. */
static int read_stop(const struct json_value *body, struct srv_request *r, struct srv_error *e,
                     const char *const *ends, int n_ends)
{
    int st = read_stop_field(body, r, e);
    for (int k = 0; !st && k < n_ends; k++) {
        bool have = false;
        for (int i = 0; i < r->n_stop && !have; i++)
            have = strcmp(r->stop[i], ends[k]) == 0;
        if (have)
            continue;
        if (r->n_stop == SRV_MAX_STOP)
            return BAD(e, "stop", "'stop' has too many strings: this model's plain chat format "
                       "ends its turns with %d more, and at most %d are accepted in all", n_ends,
                       SRV_MAX_STOP);
        if (!(r->stop[r->n_stop] = dup_n(ends[k], strlen(ends[k]))))
            return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        r->stop_len[r->n_stop++] = strlen(ends[k]);
    }
    return st;
}

/* tools and chat_template_kwargs: passed to the chat template (chat_json backends). The
 * answer is plain text: tool calls in it are not parsed into tool_calls. */
static int read_template_args(struct srv *s, enum srv_kind kind, const struct json_value *body,
                              struct srv_request *r, struct srv_error *e)
{
    const struct json_value *v = json_get(body, "tools");
    if (v && !json_is(v, JSON_NULL) && !(json_is(v, JSON_ARRAY) && json_len(v) == 0)) {
        if (kind != SRV_KIND_CHAT || !s->b->chat_json)
            return srv_error_set(e, 400, "invalid_request_error", "unsupported_parameter", "tools",
                                 "'tools' needs a chat completion and a model whose Jinja chat "
                                 "template is in use");
        if (!json_is(v, JSON_ARRAY))
            return BAD(e, "tools", "'tools' must be an array of tool definitions");
        if (!(r->tools = json_clone(v)))
            return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    v = json_get(body, "chat_template_kwargs");
    if (v && !json_is(v, JSON_NULL)) {
        if (!json_is(v, JSON_OBJECT))
            return BAD(e, "chat_template_kwargs",
                       "'chat_template_kwargs' must be a JSON object, e.g. {\"enable_thinking\": false}");
        if (kind != SRV_KIND_CHAT)
            return BAD(e, "chat_template_kwargs", "'chat_template_kwargs' applies to chat completions only");
        if (!(r->tmpl_kwargs = json_clone(v)))
            return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    return 0;
}

/* ---------------------------------------------------------------- structured output */

#define OOM(e) srv_error_set((e), 500, "server_error", NULL, NULL, "out of memory")

/* The server's grammar vocabulary, built by the first request that needs one (a walk
 * over the whole vocabulary) and shared read-only by every job afterwards. */
static int shared_vocab(struct srv *s, struct srv_error *e)
{
    struct kn_err err = {0};
    enum kn_status st = KN_OK;
    pthread_mutex_lock(&s->gmu);
    if (!s->gvocab)
        st = s->b->grammar_vocab(s->b->ctx, &s->gvocab, &err);
    pthread_mutex_unlock(&s->gmu);
    if (st != KN_OK)
        return srv_error_set(e, 500, "server_error", NULL, "grammar",
                             "the grammar vocabulary could not be built: %.400s", err.msg);
    return 0;
}

/* Reads "grammar" (GBNF text, llama-server's field), "json_schema" (a schema, llama-server's
 * field) and "response_format" (OpenAI's {"type": "text" | "json_object" | "json_schema"})
 * into r->grammar, compiled. At most one of them may constrain the output. */
static int read_structured(struct srv *s, const struct json_value *body, struct srv_request *r,
                           struct srv_error *e)
{
    const struct json_value *g = json_get(body, "grammar"), *js = json_get(body, "json_schema"),
                            *rf = json_get(body, "response_format");
    if (g && (json_is(g, JSON_NULL) || (json_is(g, JSON_STRING) && g->u.string.len == 0)))
        g = NULL; /* llama-server's clients send "" for "no grammar" */
    if (js && json_is(js, JSON_NULL))
        js = NULL;
    const char *rf_type = NULL;
    if (rf && !json_is(rf, JSON_NULL)) {
        if (!json_is(rf, JSON_OBJECT) || !(rf_type = json_str(json_get(rf, "type"))))
            return BAD(e, "response_format", "'response_format' must be an object with a \"type\": "
                       "\"text\", \"json_object\" or \"json_schema\"");
        if (strcmp(rf_type, "text") == 0)
            rf = NULL;
        else if (strcmp(rf_type, "json_object") != 0 && strcmp(rf_type, "json_schema") != 0)
            return BAD(e, "response_format", "'response_format' type \"%.60s\" is not supported; "
                       "use \"text\", \"json_object\" or \"json_schema\"", rf_type);
    } else {
        rf = NULL;
    }
    if ((g != NULL) + (js != NULL) + (rf != NULL) > 1)
        return BAD(e, g ? "grammar" : "json_schema", "'grammar', 'json_schema' and "
                   "'response_format' each constrain the output; send only one of them");
    if (!g && !js && !rf)
        return 0;
    const char *param = g ? "grammar" : js ? "json_schema" : "response_format";
    if (!s->b->grammar_vocab)
        return srv_error_set(e, 400, "invalid_request_error", "unsupported_parameter", param,
                             "'%s' is not supported by this server's model", param);
    char *text = NULL;
    struct kn_err err = {0};
    if (g) {
        if (!json_is(g, JSON_STRING))
            return BAD(e, "grammar", "'grammar' must be a string of GBNF rules");
        if (memchr(g->u.string.s, 0, g->u.string.len))
            return BAD(e, "grammar", "'grammar' contains a NUL character");
        if (!(text = dup_n(g->u.string.s, g->u.string.len)))
            return OOM(e);
    } else {
        /* llama-server's json_schema is response_format {"type": "json_schema"} by another
         * name: record it so, and convert both with grammar_from_response_format, the one
         * converter verify-receipt checks a receipt's grammar with. */
        if (js) {
            struct json_value *o = json_new_object(), *w = json_new_object(),
                              *sc = json_clone(js), *ty = json_new_string("json_schema");
            if (!o || !w || !sc || !ty) {
                json_free(o);
                json_free(w);
                json_free(sc);
                json_free(ty);
                return OOM(e);
            }
            /* json_object_set takes the value, also when it fails */
            bool ok = json_object_set(w, "schema", sc, NULL) == KN_OK;
            ok = json_object_set(o, "type", ty, NULL) == KN_OK && ok;
            ok = json_object_set(o, "json_schema", w, NULL) == KN_OK && ok;
            r->response_format = o; /* freed with the request */
            if (!ok)
                return OOM(e);
        } else if (!(r->response_format = json_clone(rf))) {
            return OOM(e);
        }
        enum kn_status cs = grammar_from_response_format(r->response_format, &text, &err);
        if (cs == KN_E_NOMEM)
            return OOM(e);
        if (cs != KN_OK) {
            const char *m = err.msg, *pre = "response_format: ";
            if (strncmp(m, pre, strlen(pre)) == 0)
                m += strlen(pre); /* the message names the field itself */
            const char *param = js ? "json_schema" : "response_format";
            return srv_error_set(e, 400, "invalid_request_error", "invalid_json_schema", param,
                                 "'%s' cannot be used: %.450s", param, m);
        }
    }
    enum kn_status gs = grammar_parse(text, strlen(text), NULL, &r->grammar, &err);
    if (gs != KN_OK) {
        free(text);
        if (gs == KN_E_NOMEM)
            return OOM(e);
        const char *m = err.msg;
        if (strncmp(m, "grammar: ", 9) == 0)
            m += 9; /* the field name says it already */
        return srv_error_set(e, 400, "invalid_request_error", "invalid_grammar", param,
                             g ? "'grammar' is not a valid GBNF grammar: %.450s"
                               : "the grammar made from '%s' does not compile: %.400s",
                             g ? m : param, m);
    }
    r->grammar_text = text;
    return shared_vocab(s, e);
}

/* A GBNF literal of s (a JSON string's escapes, which GBNF reads alike); NULL: no memory. */
static char *gbnf_literal(const char *s)
{
    char *out = NULL;
    struct json_value *v = json_new_string(s);
    if (v && json_write(v, JSON_COMPACT, &out, NULL, NULL) != KN_OK)
        out = NULL;
    json_free(v);
    return out;
}

/* Appends the NUL-terminated pieces (a NULL piece: out of memory before) to b. */
static bool buf_cat(struct kn_buf *b, bool ok, const char *const *pieces, int n)
{
    for (int i = 0; ok && i < n; i++)
        ok = pieces[i] && kn_buf_add(b, pieces[i], strlen(pieces[i]));
    return ok;
}
#define BUF_CAT(b, ok, ...) \
    buf_cat((b), (ok), (const char *const[]){__VA_ARGS__}, \
            (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)))

/* The grammar of forced calls (*text, malloc'd), from the syntax's frame fr:
 *   root ::= OPEN kn-tool-call (SEP kn-tool-call)* CLOSE
 *   kn-tool-call ::= kn-call-0 | kn-call-1 | ...        (one per tool, or the named one)
 *   kn-call-K ::= CALL_OPEN NAME CALL_MID kn-args-K CALL_CLOSE
 * kn-args-K the tool's parameters schema (any object without one). Returns 0 or the
 * error's status. */
static int tool_call_grammar(const struct srv_request *r, const struct chat_tool_frame *fr,
                             char **text, struct srv_error *e)
{
    *text = NULL;
    const struct json_value *tools = r->tools;
    size_t n_tools = tools->u.array.len;
    const struct json_value **schemas = calloc(n_tools + 1, sizeof *schemas);
    char (*names)[32] = calloc(n_tools + 1, sizeof *names);
    const char **name_ptrs = calloc(n_tools + 1, sizeof *name_ptrs);
    struct json_value *any_object = NULL;
    struct kn_buf g = {0}, calls = {0};
    char *args = NULL;
    char *open = gbnf_literal(fr->open), *sep = fr->sep ? gbnf_literal(fr->sep) : NULL,
         *close = gbnf_literal(fr->close), *copen = gbnf_literal(fr->call_open),
         *cmid = gbnf_literal(fr->call_mid), *cclose = gbnf_literal(fr->call_close);
    int rc = 0, n = 0;
    bool ok = schemas && names && name_ptrs && (!fr->sep || sep) &&
              json_parse("{\"type\":\"object\"}", 17, NULL, &any_object, NULL) == KN_OK;
    ok = BUF_CAT(&g, ok, "root ::= ", open, " kn-tool-call ");
    if (fr->sep)
        ok = BUF_CAT(&g, ok, "( ", sep, " kn-tool-call )* ");
    ok = BUF_CAT(&g, ok, close, "\nkn-tool-call ::=");
    for (size_t i = 0; ok && i < n_tools; i++) {
        const struct json_value *f = json_get(tools->u.array.items[i], "function");
        const char *name = json_str(json_get(f, "name"));
        if (r->tool_name && strcmp(name, r->tool_name) != 0)
            continue;
        if (!chat_tool_name_ok(fr, name)) {
            rc = srv_error_set(e, 400, "invalid_request_error", "invalid_value", "tools",
                               "tools[%zu].function.name '%.100s' cannot be forced in the %s "
                               "tool-call syntax, which writes the name bare: use letters, "
                               "digits, '_', '-' and '.'", i, name,
                               chat_tool_syntax_name(r->tool_syntax));
            break;
        }
        const struct json_value *params = json_get(f, "parameters");
        schemas[n] = params && !json_is(params, JSON_NULL) ? params : any_object;
        snprintf(names[n], sizeof names[n], "kn-args-%d", n);
        name_ptrs[n] = names[n];
        char *jname = fr->name_json ? gbnf_literal(name) : NULL; /* the JSON string */
        char *lit = fr->name_json ? (jname ? gbnf_literal(jname) : NULL) : gbnf_literal(name);
        char call[48];
        snprintf(call, sizeof call, "kn-call-%d", n);
        ok = BUF_CAT(&g, ok, n ? " | " : " ", call);
        ok = BUF_CAT(&calls, ok, call, " ::= ", copen, " ", lit, " ", cmid, " ", names[n], " ",
                     cclose, "\n");
        free(lit);
        free(jname);
        n++;
    }
    if (!rc && ok && n == 0)
        rc = r->tool_name ? BAD(e, "tool_choice", "'tool_choice' names '%.200s', which is not "
                                "among 'tools'", r->tool_name)
                          : BAD(e, "tool_choice", "'tool_choice' \"required\" needs a tool to call");
    if (!rc && ok) {
        struct kn_err err = {0};
        enum kn_status cs = grammar_from_json_schemas(schemas, name_ptrs, n, &args, &err);
        if (cs != KN_OK && cs != KN_E_NOMEM)
            rc = srv_error_set(e, 400, "invalid_request_error", "invalid_json_schema", "tools",
                               "a tool's parameters cannot be enforced: %.450s", err.msg);
        ok = cs != KN_E_NOMEM;
    }
    if (!rc) {
        ok = BUF_CAT(&g, ok, "\n", calls.p, args);
        if (!ok)
            rc = OOM(e);
    }
    if (!rc) {
        *text = g.p;
        g.p = NULL;
    }
    free(g.p);
    free(calls.p);
    free(args);
    free(open);
    free(sep);
    free(close);
    free(copen);
    free(cmid);
    free(cclose);
    json_free(any_object);
    free(schemas);
    free(names);
    free(name_ptrs);
    return rc;
}

/* "tool_choice" ("none", "auto" (the default with tools), "required", or
 * {"type": "function", "function": {"name": N}}) and "parallel_tool_calls" (default false,
 * as llama-server: an answer makes one call, the first; true: as many as it writes).
 * With tools and any choice but "none" the answer is searched for calls in the template's
 * syntax; "required" and a named function are enforced by a grammar made from the tools'
 * parameter schemas (the call's payload schema framed by the syntax's markers), so the
 * answer is a call whose arguments parse and validate. */
static int read_tool_choice(struct srv *s, const struct json_value *body, struct srv_request *r,
                            struct srv_error *e)
{
    const struct json_value *tc = json_get(body, "tool_choice");
    const struct json_value *pt = json_get(body, "parallel_tool_calls");
    if (tc && json_is(tc, JSON_NULL))
        tc = NULL;
    r->parallel_tools = false;
    if (pt && !json_is(pt, JSON_NULL)) {
        if (!json_is(pt, JSON_BOOL))
            return BAD(e, "parallel_tool_calls", "'parallel_tool_calls' must be true or false");
        r->parallel_tools = pt->u.boolean;
    }
    if (!r->tools) {
        if (tc && !(json_is(tc, JSON_STRING) && strcmp(tc->u.string.s, "none") == 0))
            return BAD(e, "tool_choice", "'tool_choice' needs 'tools'");
        return 0;
    }
    for (size_t i = 0; i < r->tools->u.array.len; i++) {
        const struct json_value *t = r->tools->u.array.items[i];
        const struct json_value *f = json_get(t, "function");
        const char *type = json_str(json_get(t, "type"));
        const struct json_value *params = json_get(f, "parameters");
        if (!json_is(t, JSON_OBJECT) || !type || strcmp(type, "function") != 0 ||
            !json_is(f, JSON_OBJECT) || !json_str(json_get(f, "name")) ||
            !*json_str(json_get(f, "name")))
            return srv_error_set(e, 400, "invalid_request_error", "invalid_value", "tools",
                                 "tools[%zu] must be {\"type\": \"function\", \"function\": "
                                 "{\"name\": ..., \"parameters\": {...}}}", i);
        if (params && !json_is(params, JSON_NULL) && !json_is(params, JSON_OBJECT))
            return srv_error_set(e, 400, "invalid_request_error", "invalid_value", "tools",
                                 "tools[%zu].function.parameters must be a JSON schema object", i);
    }
    r->tool_choice = SRV_TOOLS_AUTO;
    if (json_is(tc, JSON_STRING)) {
        const char *c = tc->u.string.s;
        if (strcmp(c, "none") == 0)
            r->tool_choice = SRV_TOOLS_NONE;
        else if (strcmp(c, "required") == 0)
            r->tool_choice = SRV_TOOLS_REQUIRED;
        else if (strcmp(c, "auto") != 0)
            return BAD(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" "
                       "or {\"type\": \"function\", \"function\": {\"name\": ...}}, not \"%.100s\"", c);
    } else if (tc) {
        const char *name = json_str(json_get(json_get(tc, "function"), "name"));
        const char *type = json_str(json_get(tc, "type"));
        if (!json_is(tc, JSON_OBJECT) || !name || !type || strcmp(type, "function") != 0)
            return BAD(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" "
                       "or {\"type\": \"function\", \"function\": {\"name\": ...}}");
        if (!(r->tool_name = strdup(name)))
            return OOM(e);
        r->tool_choice = SRV_TOOLS_NAMED;
    }
    r->tool_syntax = chat_tool_syntax_of(s->b->renderer);
    r->tools_parse = r->tool_choice != SRV_TOOLS_NONE;
    if (r->tool_choice != SRV_TOOLS_REQUIRED && r->tool_choice != SRV_TOOLS_NAMED)
        return 0;
    if (r->grammar)
        return BAD(e, "tool_choice", "'tool_choice' %s forces a tool call with its own grammar: it "
                   "cannot be combined with 'grammar', 'json_schema' or 'response_format'",
                   r->tool_name ? "naming a function" : "\"required\"");
    struct chat_tool_frame fr;
    chat_tool_call_frame(r->tool_syntax, r->parallel_tools, &fr);
    char *text = NULL;
    int rc = tool_call_grammar(r, &fr, &text, e);
    if (rc)
        return rc;
    struct kn_err err = {0};
    enum kn_status gs = grammar_parse(text, strlen(text), NULL, &r->grammar, &err);
    if (gs != KN_OK) {
        free(text);
        return gs == KN_E_NOMEM ? OOM(e)
                                : srv_error_set(e, 500, "server_error", NULL, "tools",
                                                "the tool grammar does not compile: %.400s", err.msg);
    }
    r->grammar_text = text;
    return shared_vocab(s, e);
}

/* "reasoning_format" (llama-server's field): "auto" (the default) splits the reasoning off
 * when the model's vocabulary has its family's markers, "deepseek" always splits (at
 * <think> ... </think> when the model names no markers of its own), "none" never does. */
static int read_reasoning(struct srv *s, const struct json_value *body, struct srv_request *r,
                          struct srv_error *e)
{
    const struct json_value *v = json_get(body, "reasoning_format");
    const char *fmt = "auto";
    if (v && !json_is(v, JSON_NULL) && !(fmt = json_str(v)))
        return BAD(e, "reasoning_format", "'reasoning_format' must be \"auto\", \"deepseek\" or "
                   "\"none\"");
    bool force = strcmp(fmt, "deepseek") == 0 || strcmp(fmt, "deepseek-legacy") == 0;
    if (!force && strcmp(fmt, "auto") != 0 && strcmp(fmt, "none") != 0)
        return BAD(e, "reasoning_format", "'reasoning_format' is \"%.40s\"; it must be \"auto\", "
                   "\"deepseek\" or \"none\"", fmt);
    if (r->kind != SRV_KIND_CHAT || strcmp(fmt, "none") == 0)
        return 0;
    if (s->b->think_open && s->b->think_close) {
        r->think_open = s->b->think_open;
        r->think_close = s->b->think_close;
    } else if (force) {
        r->think_open = "<think>";
        r->think_close = "</think>";
    } else {
        return 0;
    }
    if (r->stream) { /* the streaming splitter, fed chunk by chunk */
        struct kn_err err = {0};
        r->think = malloc(sizeof *r->think);
        if (!r->think)
            return OOM(e);
        if (text_think_init(r->think, r->think_open, r->think_close, r->think_inside, &err) !=
            KN_OK)
            return srv_error_set(e, 500, "server_error", NULL, NULL, "%s", err.msg);
    }
    return 0;
}

int api_apply_template(struct srv *s, const struct json_value *body, char **out,
                       struct srv_error *e)
{
    *out = NULL;
    struct srv_request r = {0};
    r.kind = SRV_KIND_CHAT;
    bool add_gen = true;
    int st = get_bool(body, "add_generation_prompt", &add_gen, e);
    if (!st)
        st = read_template_args(s, SRV_KIND_CHAT, body, &r, e);
    if (!st)
        st = read_messages(body, &r, e, s->b->chat_json != NULL);
    char *text = NULL;
    struct kn_err err = {0};
    if (!st) {
        struct srv_backend *b = s->b;
        enum kn_status ks;
        if (b->chat_json) {
            ks = b->chat_json(b->ctx, r.input, r.tools, r.tmpl_kwargs, add_gen, NULL, NULL, NULL,
                              &text, &err);
        } else {
            int32_t *ids = NULL;
            size_t n = 0;
            ks = b->chat(b->ctx, r.msgs, r.n_msgs, &ids, &n, &text, &err);
            free(ids);
        }
        if (ks != KN_OK)
            st = ks == KN_E_NOMEM ? srv_error_set(e, 500, "server_error", NULL, NULL, "%s", err.msg)
                                  : BAD(e, "messages", "%s", err.msg);
    }
    if (!st) {
        struct json_value *root = json_new_object();
        if (!root || json_object_set(root, "prompt", json_new_string(text), NULL) != KN_OK ||
            json_write(root, JSON_COMPACT, out, NULL, NULL) != KN_OK)
            st = srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        json_free(root);
    }
    free(text);
    srv_request_free(&r);
    return st;
}

int api_parse_completion(struct srv *s, enum srv_kind kind, const struct json_value *body,
                         struct srv_request *r, struct srv_error *e)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    sample_params_default(&r->sampling);
    if (!json_is(body, JSON_OBJECT))
        return BAD(e, NULL, "the request body must be a JSON object");
    if (s->b->encoder_only)
        return srv_error_set(e, 400, "invalid_request_error", "model_not_generative", NULL,
                             "the model %s is an encoder (embeddings only): use "
                             "/v1/embeddings", s->model_id);

    int st;
    int64_t n = 1;
    if ((st = get_int(body, "n", 1, SRV_MAX_CHOICES, &n, NULL, e)))
        return st;
    r->n_choices = (int)n;
    int64_t best_of = 1;
    if ((st = get_int(body, "best_of", 1, 1, &best_of, NULL, e)))
        return st;

    /* The sampling settings through the table (sample.h): OpenAI's and llama.cpp's keys
     * (max_tokens, max_completion_tokens or n_predict...), the same ranges and messages as
     * run, chat, /set and receipts. A limit beyond the context just ends with "length". */
    for (size_t i = 0; i < sample_n_settings; i++) {
        const struct sample_setting *ss = &sample_settings[i];
        const char *key = NULL;
        const struct json_value *v = sample_setting_lookup(ss, body, SAMPLE_READ_ALIASES, &key);
        struct kn_err serr = {0};
        if (v && sample_setting_read(ss, v, &r->sampling, &serr) != KN_OK)
            return serr.status == KN_E_NOMEM ? OOM(e) : BAD(e, key, "%s", serr.msg);
        if (v && ss->type == SAMPLE_T_SEED)
            r->seed_given = true;
    }
    /* 0: the server's default (--n-predict, else the rest of the context) */
    r->max_tokens = r->sampling.n_predict < 0 ? 0 : r->sampling.n_predict;
    r->sampling.n_predict = -1;
    if (!r->seed_given)
        r->sampling.seed = sample_fresh_seed();
    if (r->sampling.dry_multiplier != 0 && !s->b->sample_piece)
        return srv_error_set(e, 400, "invalid_request_error", "unsupported_parameter",
                             "dry_multiplier", "DRY ('dry_multiplier') is not supported by this "
                             "server's model: it has no token texts");
    struct kn_err verr = {0};
    if (sample_params_check_vocab(&r->sampling, s->b->n_vocab, &verr) != KN_OK)
        return BAD(e, "logit_bias", "%s", verr.msg);

    if ((st = get_bool(body, "stream", &r->stream, e)) ||
        (st = get_bool(body, "receipt", &r->want_receipt, e)) ||
        (st = get_bool(body, "ignore_eos", &r->ignore_eos, e)))
        return st;
    if (r->ignore_eos && r->want_receipt)
        return BAD(e, "ignore_eos", "'ignore_eos' (for benchmarks) cannot be combined with "
                   "'receipt': a receipt's rerun stops at the end-of-generation token");
    const struct json_value *so = json_get(body, "stream_options");
    if (so && !json_is(so, JSON_NULL)) {
        if (!json_is(so, JSON_OBJECT))
            return BAD(e, "stream_options", "'stream_options' must be an object");
        if ((st = get_bool(so, "include_usage", &r->include_usage, e)))
            return st;
    }
    if (r->want_receipt && !s->cfg.receipt)
        return srv_error_set(e, 400, "invalid_request_error", "unsupported_parameter", "receipt",
                             "receipts are not available on this server: it serves the "
                             "built-in toy model, which has no model file to name");

    if (kind == SRV_KIND_CHAT) {
        if ((st = get_bool(body, "logprobs", &r->logprobs, e)))
            return st;
        int64_t k = 0;
        bool k_given = false;
        if ((st = get_int(body, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &k, &k_given, e)))
            return st;
        if (k_given && k > 0 && !r->logprobs)
            return BAD(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r->top_logprobs = (int)k;
    } else {
        int64_t k = 0;
        bool k_given = false;
        if ((st = get_int(body, "logprobs", 0, 5, &k, &k_given, e)))
            return st;
        r->logprobs = k_given;
        r->top_logprobs = (int)k;
    }
    /* Known OpenAI features this server does not implement: refuse rather than ignore,
     * since ignoring them would silently change what the client gets. */
    if ((st = read_structured(s, body, r, e)) || (st = read_reasoning(s, body, r, e)))
        return st;
    if ((st = read_template_args(s, kind, body, r, e)) || (st = read_tool_choice(s, body, r, e)))
        return st;
    int n_ends = 0;
    const char *const *ends = kind == SRV_KIND_CHAT && s->b->renderer
                                  ? chat_renderer_turn_ends(s->b->renderer, &n_ends) : NULL;
    if ((st = read_stop(body, r, e, ends, n_ends)))
        return st;
    return kind == SRV_KIND_CHAT ? read_messages(body, r, e, s->b->chat_json != NULL)
                                 : read_prompt(s, body, r, e);
}

int api_prepare_prompt(struct srv *s, struct srv_request *r, struct srv_error *e)
{
    struct kn_err err = {0};
    struct srv_backend *b = s->b;
    if (r->kind == SRV_KIND_CHAT && b->chat_json) {
        if (b->chat_json(b->ctx, r->input, r->tools, r->tmpl_kwargs, true, &r->render_now,
                         &r->ids, &r->n_ids, &r->rendered, &err) != KN_OK)
            return err.status == KN_E_NOMEM
                       ? srv_error_set(e, 500, "server_error", NULL, NULL, "%s", err.msg)
                       : BAD(e, "messages", "%s", err.msg);
    } else if (r->kind == SRV_KIND_CHAT) {
        if (b->chat(b->ctx, r->msgs, r->n_msgs, &r->ids, &r->n_ids, &r->rendered, &err) != KN_OK)
            return err.status == KN_E_NOMEM
                       ? srv_error_set(e, 500, "server_error", NULL, NULL, "%s", err.msg)
                       : BAD(e, "messages", "%s", err.msg);
    } else if (r->prompt_text) {
        if (b->tokenize(b->ctx, r->prompt_text, r->prompt_len, true, true, &r->ids, &r->n_ids,
                        &err) != KN_OK)
            return BAD(e, "prompt", "%s", err.msg);
    }
    if (r->n_ids == 0)
        return BAD(e, r->kind == SRV_KIND_CHAT ? "messages" : "prompt",
                   "the prompt is empty: it has no tokens");
    if ((int64_t)r->n_ids >= b->n_ctx)
        return srv_error_set(e, 400, "invalid_request_error", "context_length_exceeded",
                             r->kind == SRV_KIND_CHAT ? "messages" : "prompt",
                             "the prompt has %zu tokens but the slot context holds %lld "
                             "(--ctx-size), and at least one must be left for the answer",
                             r->n_ids, (long long)b->n_ctx);
    /* A template that opens the reasoning in the prompt makes the reply start inside it:
     * the rule kinetic run and chat apply to their rendered prompt (session_prompt). */
    if (r->think_open && r->rendered) {
        r->think_inside = chat_prompt_opens_think(r->rendered, strlen(r->rendered), r->think_open);
        if (r->think)
            r->think->inside = r->think_inside; /* nothing has been fed yet */
    }
    return 0;
}
