/* chat_jinja.c: the chat renderer run, chat and serve share (see chat.h): the model's own
 * Jinja chat template through src/jinja, the built-in families as the fallback, and the
 * tokenization that lets only template text become control tokens. */
#include "chat.h"

#include "../base/json.h"
#include "../gguf/gguf.h"
#include "../jinja/jinja.h"
#include "../token/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *chat_renderer_name(const struct chat_renderer *cr)
{
    return cr->engine == CHAT_ENGINE_JINJA ? "jinja" : chat_format_name(cr->tmpl.format);
}

bool chat_renderer_no_template(const struct chat_renderer *cr)
{
    return cr->engine == CHAT_ENGINE_BUILTIN &&
           (cr->choice == CHAT_CHOICE_NONE || cr->choice == CHAT_CHOICE_UNKNOWN);
}

const char *const *chat_renderer_turn_ends(const struct chat_renderer *cr, int *n)
{
    static const char *const plain[CHAT_PLAIN_N_TURN_ENDS] = CHAT_PLAIN_TURN_ENDS;
    bool is_plain = cr->engine == CHAT_ENGINE_BUILTIN && cr->tmpl.format == CHAT_FORMAT_PLAIN;
    *n = is_plain ? CHAT_PLAIN_N_TURN_ENDS : 0;
    return is_plain ? plain : NULL;
}

void chat_renderer_free(struct chat_renderer *cr)
{
    jinja_free(cr->jinja);
    json_free(cr->kwargs);
    free(cr->src);
    memset(cr, 0, sizeof *cr);
}

/* The text of special token id into buf ("" if none or too long). */
static void token_text(const struct tok *t, int32_t id, char *buf, size_t cap)
{
    size_t len = 0;
    const char *s = id == TOK_NULL ? NULL : tok_text(t, id, &len);
    if (!s || len >= cap)
        len = 0;
    if (len)
        memcpy(buf, s, len);
    buf[len] = 0;
}

/* Builds a chat_prompt from text and per-byte marks (1 = template text). */
static enum kn_status prompt_from_marks(char *text, const uint8_t *marks, size_t len,
                                        struct chat_prompt *out, struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    size_t n_segs = 0;
    for (size_t i = 0; i < len; i++)
        if (i == 0 || (marks[i] != 0) != (marks[i - 1] != 0))
            n_segs++;
    out->segs = malloc((n_segs ? n_segs : 1) * sizeof *out->segs);
    if (!out->segs) {
        free(text);
        return kn_fail(err, KN_E_NOMEM, "out of memory rendering the chat prompt");
    }
    for (size_t i = 0; i < len; i++) {
        bool sp = marks[i] != 0;
        if (i == 0 || sp != (marks[i - 1] != 0))
            out->segs[out->n_segs++] = (struct chat_segment){i, 0, sp};
        out->segs[out->n_segs - 1].len++;
    }
    out->segs_cap = n_segs ? n_segs : 1;
    out->text = text; /* NUL-terminated by the renderer */
    out->len = len;
    out->cap = len + 1;
    return KN_OK;
}

/* Renders context-free pieces: messages (already normalised), tools, kwargs. */
static enum kn_status render_jinja(const struct chat_renderer *cr, const struct json_value *msgs,
                                   const struct json_value *tools,
                                   const struct json_value *req_kwargs, bool add_gen,
                                   struct chat_prompt *out, struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    /* The renderer's kwargs, then the request's over them. */
    struct json_value *kw = NULL;
    if (cr->kwargs || req_kwargs) {
        kw = cr->kwargs ? json_clone(cr->kwargs) : json_new_object();
        if (!kw)
            return kn_fail(err, KN_E_NOMEM, "out of memory");
        for (size_t i = 0; req_kwargs && i < req_kwargs->u.object.len; i++) {
            const struct json_member *m = &req_kwargs->u.object.items[i];
            if (strlen(m->key) != m->key_len) {
                json_free(kw);
                return kn_fail(err, KN_E_ARG, "chat_template_kwargs: a key contains a NUL byte");
            }
            json_free(json_object_take(kw, m->key));
            enum kn_status st = json_object_set(kw, m->key, json_clone(m->value), err);
            if (st != KN_OK) {
                json_free(kw);
                return st;
            }
        }
    }
    struct json_value *ctx = NULL;
    enum kn_status st = jinja_chat_context(msgs, tools, NULL, add_gen, cr->bos, cr->eos, kw,
                                           &ctx, err);
    if (st != KN_OK) {
        json_free(kw);
        return st;
    }
    /* BOS/EOS count as template text unless the kwargs replaced them. */
    const char *trusted[2];
    size_t n_trusted = 0;
    if (!json_get(kw, "bos_token"))
        trusted[n_trusted++] = "bos_token";
    if (!json_get(kw, "eos_token"))
        trusted[n_trusted++] = "eos_token";
    json_free(kw);
    int64_t now = cr->fixed_now ? cr->now : chat_clock_now();
    struct jinja_options jo = {.trusted_vars = trusted, .n_trusted_vars = n_trusted,
                               .trust_roles = true, .fixed_time = true, .now_unix = now};
    char *text = NULL;
    uint8_t *marks = NULL;
    size_t len = 0;
    struct jinja_diag diag;
    st = jinja_render_marked(cr->jinja, ctx, &jo, &text, &marks, &len, &diag, err);
    json_free(ctx);
    if (st != KN_OK) {
        kn_err_prefix(err, cr->source);
        return st;
    }
    st = prompt_from_marks(text, marks, len, out, err);
    free(marks);
    if (st == KN_OK)
        out->now = now;
    return st;
}

int64_t chat_clock_now(void)
{
    time_t t = time(NULL);
    struct tm tm;
    if (!localtime_r(&t, &tm))
        return (int64_t)t;
    return (int64_t)t + (int64_t)tm.tm_gmtoff;
}

bool chat_renderer_reads_clock(const struct chat_renderer *cr)
{
    static const char needle[] = "strftime_now";
    if (cr->engine != CHAT_ENGINE_JINJA || !cr->src)
        return false;
    for (size_t i = 0; i + sizeof needle - 1 <= cr->src_len; i++)
        if (memcmp(cr->src + i, needle, sizeof needle - 1) == 0)
            return true;
    return false;
}

/* Keeps the template's source for receipts. */
static enum kn_status keep_source(struct chat_renderer *cr, const char *src, size_t len,
                                  struct kn_err *err)
{
    cr->src = malloc(len + 1);
    if (!cr->src)
        return kn_fail(err, KN_E_NOMEM, "out of memory loading the chat template");
    memcpy(cr->src, src, len);
    cr->src[len] = 0;
    cr->src_len = len;
    return KN_OK;
}

/* OpenAI messages as the template sees them: content parts joined into one string,
 * "developer" as "system" (most templates know only system), an assistant turn that only
 * calls tools (content null or absent, as the openai client replays it) with content "",
 * as llama.cpp and most templates expect, other members as sent. */
static enum kn_status normalise(const struct json_value *messages, struct json_value **out,
                                struct kn_err *err)
{
    *out = NULL;
    if (!json_is(messages, JSON_ARRAY))
        return kn_fail(err, KN_E_ARG, "messages must be an array");
    struct json_value *arr = json_new_array();
    if (!arr)
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    enum kn_status st = KN_OK;
    for (size_t i = 0; st == KN_OK && i < json_len(messages); i++) {
        const struct json_value *m = json_at(messages, i);
        if (!json_is(m, JSON_OBJECT)) {
            st = kn_fail(err, KN_E_ARG, "messages[%zu] must be an object", i);
            break;
        }
        const char *role = json_str(json_get(m, "role"));
        if (!role) {
            st = kn_fail(err, KN_E_ARG, "messages[%zu].role must be a string", i);
            break;
        }
        struct json_value *nm = json_new_object();
        if (!nm) {
            st = kn_fail(err, KN_E_NOMEM, "out of memory");
            break;
        }
        if (chat_msg_only_calls(m))
            st = json_object_set(nm, "content", json_new_string(""), err);
        for (size_t k = 0; st == KN_OK && k < m->u.object.len; k++) {
            const struct json_member *mem = &m->u.object.items[k];
            if (strcmp(mem->key, "content") == 0 && json_is(mem->value, JSON_NULL) &&
                json_get(nm, "content"))
                continue; /* replaced by "" above */
            struct json_value *v = NULL;
            if (strcmp(mem->key, "role") == 0) {
                v = json_new_string(strcmp(role, "developer") == 0 ? "system" : role);
            } else if (strcmp(mem->key, "content") == 0 && json_is(mem->value, JSON_ARRAY)) {
                struct kn_buf b = {0};
                bool ok = kn_buf_add(&b, "", 0);
                for (size_t j = 0; ok && j < json_len(mem->value); j++) {
                    const struct json_value *part = json_at(mem->value, j);
                    const char *type = json_str(json_get(part, "type"));
                    const struct json_value *t = json_get(part, "text");
                    if (!type || strcmp(type, "text") != 0 || !json_is(t, JSON_STRING)) {
                        free(b.p);
                        json_free(nm);
                        json_free(arr);
                        return kn_fail(err, KN_E_ARG, "messages[%zu].content[%zu]: only text parts "
                                       "({\"type\": \"text\", \"text\": \"...\"}) are supported", i, j);
                    }
                    ok = kn_buf_add(&b, t->u.string.s, t->u.string.len);
                }
                v = ok ? json_new_stringn(b.p, b.n) : NULL;
                free(b.p);
            } else {
                v = json_clone(mem->value);
            }
            st = json_object_set(nm, mem->key, v, err);
        }
        if (st == KN_OK)
            st = json_array_push(arr, nm, err);
        else
            json_free(nm);
    }
    if (st != KN_OK) {
        json_free(arr);
        return st;
    }
    *out = arr;
    return KN_OK;
}

/* The plain format's tools (docs/chat.md "Models without a template"): the tool
 * definitions and how to call one go into the first system turn (one is added when there
 * is none), and an assistant turn's tool_calls are written after its text in the Hermes
 * syntax the answer is parsed in (chat_tool_syntax_of). Rewrites the normalised messages
 * msgs in place. */
static enum kn_status plain_tools(struct json_value *msgs, const struct json_value *tools,
                                  struct kn_err *err)
{
    enum kn_status st = KN_OK;
    for (size_t i = 0; st == KN_OK && i < json_len(msgs); i++) {
        struct json_value *m = (struct json_value *)json_at(msgs, i);
        const struct json_value *calls = json_get(m, "tool_calls");
        if (!json_is(calls, JSON_ARRAY) || json_len(calls) == 0)
            continue;
        struct kn_buf b = {0};
        const char *c = json_str(json_get(m, "content"));
        bool ok = kn_buf_add(&b, c ? c : "", c ? strlen(c) : 0);
        for (size_t k = 0; ok && k < json_len(calls); k++) {
            const struct json_value *f = json_get(json_at(calls, k), "function");
            const char *name = json_str(json_get(f, "name"));
            const struct json_value *a = json_get(f, "arguments");
            if (!name)
                continue;
            /* arguments: OpenAI sends a JSON text; an object is taken as it is */
            struct json_value *args = NULL, *call = json_new_object();
            if (json_is(a, JSON_STRING)) {
                if (json_parse(a->u.string.s, a->u.string.len, &JSON_INPUT_LIMITS, &args, NULL) != KN_OK)
                    args = NULL;
            } else if (a)
                args = json_clone(a);
            char *js = NULL;
            bool named = call && json_object_set(call, "name", json_new_string(name), err) == KN_OK;
            if (!named)
                json_free(args); /* not handed to the call */
            ok = named &&
                 json_object_set(call, "arguments", args ? args : json_new_object(), err) == KN_OK &&
                 json_write(call, JSON_COMPACT, &js, NULL, err) == KN_OK;
            json_free(call);
            ok = ok && kn_buf_add(&b, b.n ? "\n<tool_call>" : "<tool_call>", b.n ? 12 : 11) &&
                 kn_buf_add(&b, js, strlen(js)) && kn_buf_add(&b, "</tool_call>", 12);
            free(js);
        }
        json_free(json_object_take(m, "content"));
        st = ok ? json_object_set(m, "content", json_new_stringn(b.p ? b.p : "", b.n), err)
                : kn_fail(err, KN_E_NOMEM, "out of memory rendering tool calls");
        free(b.p);
    }
    if (st != KN_OK || !tools || json_len(tools) == 0)
        return st;
    char *defs = NULL;
    if ((st = json_write(tools, JSON_COMPACT, &defs, NULL, err)) != KN_OK)
        return st;
    static const char how[] =
        "You can call these tools. To call one, answer with <tool_call>{\"name\": NAME, "
        "\"arguments\": {...}}</tool_call> and nothing else; its result comes back in a "
        "Tool: turn.\nTools: ";
    struct json_value *sys = json_len(msgs) ? (struct json_value *)json_at(msgs, 0) : NULL;
    const char *role = json_str(json_get(sys, "role"));
    const char *had = role && strcmp(role, "system") == 0 ? json_str(json_get(sys, "content")) : NULL;
    struct kn_buf b = {0};
    bool ok = (!had || !*had || (kn_buf_add(&b, had, strlen(had)) && kn_buf_add(&b, "\n\n", 2))) &&
              kn_buf_add(&b, how, sizeof how - 1) && kn_buf_add(&b, defs, strlen(defs));
    free(defs);
    if (!ok) {
        free(b.p);
        return kn_fail(err, KN_E_NOMEM, "out of memory rendering tools");
    }
    struct json_value *text = json_new_stringn(b.p, b.n);
    free(b.p);
    if (role && strcmp(role, "system") == 0) {
        json_free(json_object_take(sys, "content"));
        return json_object_set(sys, "content", text, err);
    }
    struct json_value *m = json_new_object();
    if (!m || json_object_set(m, "role", json_new_string("system"), err) != KN_OK ||
        json_object_set(m, "content", text, err) != KN_OK) {
        json_free(m);
        return kn_fail(err, KN_E_NOMEM, "out of memory rendering tools");
    }
    if (json_array_push(msgs, m, err) != KN_OK)
        return KN_E_NOMEM;
    struct json_value **it = msgs->u.array.items; /* the new turn goes first */
    memmove(it + 1, it, (msgs->u.array.len - 1) * sizeof *it);
    it[0] = m;
    return KN_OK;
}

enum kn_status chat_renderer_render_json(const struct chat_renderer *cr,
                                         const struct json_value *messages,
                                         const struct json_value *tools,
                                         const struct json_value *kwargs,
                                         bool add_generation_prompt, struct chat_prompt *out,
                                         struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    if (kwargs && !json_is(kwargs, JSON_OBJECT))
        return kn_fail(err, KN_E_ARG, "chat_template_kwargs must be a JSON object");
    if (tools && !json_is(tools, JSON_ARRAY) && !json_is(tools, JSON_NULL))
        return kn_fail(err, KN_E_ARG, "tools must be an array");
    struct json_value *msgs = NULL;
    enum kn_status st = normalise(messages, &msgs, err);
    if (st != KN_OK)
        return st;
    if (cr->engine == CHAT_ENGINE_JINJA) {
        st = render_jinja(cr, msgs, json_is(tools, JSON_NULL) ? NULL : tools, kwargs,
                          add_generation_prompt, out, err);
        json_free(msgs);
        return st;
    }
    if (cr->tmpl.format == CHAT_FORMAT_PLAIN &&
        (st = plain_tools(msgs, json_is(tools, JSON_NULL) ? NULL : tools, err)) != KN_OK) {
        json_free(msgs);
        return st;
    }
    size_t n = json_len(msgs);
    struct chat_message *cm = malloc((n ? n : 1) * sizeof *cm);
    if (!cm) {
        json_free(msgs);
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n && st == KN_OK; i++) {
        const struct json_value *m = json_at(msgs, i);
        const struct json_value *c = json_get(m, "content");
        if (c && !json_is(c, JSON_STRING) && !json_is(c, JSON_NULL))
            st = kn_fail(err, KN_E_ARG, "messages[%zu].content must be a string for the built-in "
                         "%s template", i, chat_format_name(cr->tmpl.format));
        cm[i] = (struct chat_message){json_str(json_get(m, "role")), c && json_str(c) ? json_str(c) : ""};
    }
    if (st == KN_OK)
        st = chat_render(&cr->tmpl, cm, n, add_generation_prompt, out, err);
    free(cm);
    json_free(msgs);
    return st;
}

enum kn_status chat_renderer_render(const struct chat_renderer *cr,
                                    const struct chat_message *msgs, size_t n_msgs,
                                    bool add_generation_prompt, struct chat_prompt *out,
                                    struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    if (cr->engine != CHAT_ENGINE_JINJA)
        return chat_render(&cr->tmpl, msgs, n_msgs, add_generation_prompt, out, err);
    struct json_value *arr = json_new_array();
    enum kn_status st = arr ? KN_OK : kn_fail(err, KN_E_NOMEM, "out of memory");
    for (size_t i = 0; st == KN_OK && i < n_msgs; i++) {
        struct json_value *m = json_new_object();
        if (!m) {
            st = kn_fail(err, KN_E_NOMEM, "out of memory");
            break;
        }
        st = json_object_set(m, "role", json_new_string(msgs[i].role), err);
        if (st == KN_OK)
            st = json_object_set(m, "content", json_new_string(msgs[i].content), err);
        if (st == KN_OK)
            st = json_array_push(arr, m, err);
        else
            json_free(m);
    }
    if (st == KN_OK)
        st = render_jinja(cr, arr, NULL, NULL, add_generation_prompt, out, err);
    json_free(arr);
    return st;
}

enum kn_status chat_prompt_tokenize(const struct chat_prompt *p, const struct tok *tk,
                                    int32_t **ids, size_t *n, struct kn_err *err)
{
    *ids = NULL;
    *n = 0;
    uint8_t *marks = malloc(p->len ? p->len : 1);
    if (!marks)
        return kn_fail(err, KN_E_NOMEM, "out of memory tokenizing the chat prompt");
    memset(marks, 0, p->len);
    for (size_t i = 0; i < p->n_segs; i++)
        if (p->segs[i].special)
            memset(marks + p->segs[i].off, 1, p->segs[i].len);
    int32_t *v = NULL;
    size_t k = 0;
    enum kn_status st = tok_encode_marked(tk, p->text ? p->text : "", marks, p->len, false, &v,
                                          &k, err);
    free(marks);
    if (st != KN_OK)
        return st;
    /* One BOS when the vocabulary wants one: the template may have written it already
     * (bos_token), as Gemma's and Llama's do. */
    const struct tok_special *sp = tok_specials(tk);
    if (sp->add_bos && sp->bos != TOK_NULL && (k == 0 || v[0] != sp->bos)) {
        int32_t *w = malloc((k + 1) * sizeof *w);
        if (!w) {
            free(v);
            return kn_fail(err, KN_E_NOMEM, "out of memory tokenizing the chat prompt");
        }
        w[0] = sp->bos;
        if (k)
            memcpy(w + 1, v, k * sizeof *w);
        free(v);
        v = w;
        k++;
    }
    *ids = v;
    *n = k;
    return KN_OK;
}

/* Parses a template; on failure the error names where (src_name, line, column). */
static enum kn_status parse_template(const char *src, size_t len, const char *src_name,
                                     struct jinja_template **out, struct kn_err *err)
{
    struct jinja_diag diag;
    enum kn_status st = jinja_parse(out, src, len, NULL, &diag, err);
    if (st != KN_OK)
        kn_err_prefix(err, src_name);
    return st;
}

/* Whether the template renders a one-message conversation (a template that uses a
 * feature the engine lacks fails here, before any request). */
static enum kn_status trial_render(const struct chat_renderer *cr, struct kn_err *err)
{
    struct chat_message m = {"user", "Hello"};
    struct chat_prompt cp;
    enum kn_status st = chat_renderer_render(cr, &m, 1, true, &cp, err);
    if (st == KN_OK)
        chat_prompt_free(&cp);
    return st;
}

enum kn_status chat_renderer_init(struct chat_renderer *cr, const struct chat_renderer_opts *o,
                                  const struct gguf_file *g, const struct tok *tk,
                                  struct kn_err *err)
{
    memset(cr, 0, sizeof *cr);
    enum kn_status st;
    const struct tok_special *sp = tok_specials(tk);
    token_text(tk, sp->bos, cr->bos, sizeof cr->bos);
    token_text(tk, sp->eos, cr->eos, sizeof cr->eos);
    if (o->raw && (o->chat_format || o->template_file))
        return kn_fail(err, KN_E_ARG, "--raw sends the prompt without a template; it cannot be "
                       "combined with --chat-format or --chat-template");
    if (o->chat_format && o->template_file)
        return kn_fail(err, KN_E_ARG, "give --chat-format (a built-in family) or --chat-template "
                       "(a Jinja file), not both");
    if (o->kwargs_json) {
        if ((st = json_parse(o->kwargs_json, strlen(o->kwargs_json), &JSON_INPUT_LIMITS, &cr->kwargs, err)) != KN_OK) {
            kn_err_prefix(err, "--chat-template-kwargs is not valid JSON");
            return st;
        }
        if (!json_is(cr->kwargs, JSON_OBJECT)) {
            chat_renderer_free(cr);
            return kn_fail(err, KN_E_ARG, "--chat-template-kwargs must be a JSON object, e.g. "
                           "'{\"enable_thinking\": false}'");
        }
    }
    enum chat_format forced;
    if (o->raw || o->chat_format) {
        if (o->raw)
            forced = CHAT_FORMAT_RAW;
        else if (!chat_format_from_name(o->chat_format, &forced)) {
            chat_renderer_free(cr);
            return kn_fail(err, KN_E_ARG, "unknown --chat-format '%s' (raw, chatml, llama3, llama2, "
                           "mistral, gemma, phi3, plain)", o->chat_format);
        }
        char b[256], e[256];
        cr->choice = chat_template_for_model(&cr->tmpl, &forced, g, tk, b, e, sizeof b);
        cr->tmpl.bos = cr->bos;
        cr->tmpl.eos = cr->eos;
        snprintf(cr->source, sizeof cr->source, "%s", o->raw ? "--raw" : "--chat-format");
        return KN_OK;
    }
    if (o->template_file || o->template_text) {
        char *src = NULL;
        size_t len = 0;
        const char *name = o->template_file ? o->template_file
                           : o->template_name ? o->template_name : "the chat template";
        if (o->template_text) {
            len = strlen(o->template_text);
            if (!(src = malloc(len + 1))) {
                chat_renderer_free(cr);
                return kn_fail(err, KN_E_NOMEM, "out of memory loading the chat template");
            }
            memcpy(src, o->template_text, len + 1);
        } else if ((st = kn_read_file(o->template_file, (size_t)1 << 20, &src, &len, err)) != KN_OK) {
            kn_err_prefix(err, "--chat-template");
            chat_renderer_free(cr);
            return st;
        }
        st = parse_template(src, len, name, &cr->jinja, err);
        if (st == KN_OK)
            st = keep_source(cr, src, len, err);
        chat_template_detect(src, len, &cr->tmpl); /* the family, for its traits (open_think) */
        cr->tmpl.bos = cr->bos;
        cr->tmpl.eos = cr->eos;
        free(src);
        if (st != KN_OK) {
            chat_renderer_free(cr);
            return st;
        }
        cr->engine = CHAT_ENGINE_JINJA;
        cr->choice = CHAT_CHOICE_FORCED;
        snprintf(cr->source, sizeof cr->source, "%s", name);
        return KN_OK;
    }
    struct gguf_str src = {0};
    if (gguf_get_str(g, "tokenizer.chat_template", &src)) {
        struct kn_err jerr = {0};
        snprintf(cr->source, sizeof cr->source, "tokenizer.chat_template");
        if (parse_template(src.data, src.len, cr->source, &cr->jinja, &jerr) == KN_OK) {
            chat_template_detect(src.data, src.len, &cr->tmpl); /* traits such as open_think */
            cr->tmpl.bos = cr->bos;
            cr->tmpl.eos = cr->eos;
            cr->engine = CHAT_ENGINE_JINJA;
            cr->choice = CHAT_CHOICE_TEMPLATE;
            if (trial_render(cr, &jerr) == KN_OK) {
                if ((st = keep_source(cr, src.data, src.len, err)) != KN_OK)
                    chat_renderer_free(cr);
                return st;
            }
            jinja_free(cr->jinja);
            cr->jinja = NULL;
            cr->engine = CHAT_ENGINE_BUILTIN;
        }
        snprintf(cr->warning, sizeof cr->warning, "%.500s", jerr.msg);
    }
    /* No template (a base model: raw) or one the Jinja engine cannot render: the
     * built-in family the template or the vocabulary shows. */
    char b[256], e[256];
    cr->choice = chat_template_for_model(&cr->tmpl, NULL, g, tk, b, e, sizeof b);
    cr->tmpl.bos = cr->bos;
    cr->tmpl.eos = cr->eos;
    if (o->conversation && chat_renderer_no_template(cr))
        cr->tmpl.format = CHAT_FORMAT_PLAIN; /* turns the model can tell apart */
    if (cr->choice == CHAT_CHOICE_UNKNOWN)
        snprintf(cr->source, sizeof cr->source, "tokenizer.chat_template (not recognised: %s)",
                 chat_format_name(cr->tmpl.format));
    else if (cr->choice != CHAT_CHOICE_NONE)
        snprintf(cr->source, sizeof cr->source, "tokenizer.chat_template (built-in %s)",
                 chat_format_name(cr->tmpl.format));
    else
        snprintf(cr->source, sizeof cr->source, "no tokenizer.chat_template");
    return KN_OK;
}
