/* chat_tools.c: the tool-call syntaxes of the model families (docs/server.md "Tool
 * calls"): which one a template uses, how calls are found in a generated text, where a
 * stream must hold its text back (a call may be starting), and how a forced call is
 * written, from which the server builds the grammar that forces one. */
#include "chat.h"
#include "../base/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const syntax_names[CHAT_TOOLS_COUNT] = {
    [CHAT_TOOLS_HERMES] = "hermes", [CHAT_TOOLS_LLAMA3] = "llama3",
    [CHAT_TOOLS_MISTRAL] = "mistral", [CHAT_TOOLS_FUNCTIONARY] = "functionary",
    [CHAT_TOOLS_HARMONY] = "harmony", [CHAT_TOOLS_FUNCTIONARY_V31] = "functionary-v3.1",
};

const char *chat_tool_syntax_name(enum chat_tool_syntax s)
{
    return (unsigned)s < CHAT_TOOLS_COUNT ? syntax_names[s] : "unknown";
}

enum chat_tool_syntax chat_tool_syntax_of(const struct chat_renderer *cr)
{
    const char *src = cr && cr->engine == CHAT_ENGINE_JINJA ? cr->src : NULL;
    if (src) {
        if (strstr(src, "to=functions") || strstr(src, "<|channel|>"))
            return CHAT_TOOLS_HARMONY;
        if (strstr(src, "[TOOL_CALLS]"))
            return CHAT_TOOLS_MISTRAL;
        if (strstr(src, ">>>"))
            return CHAT_TOOLS_FUNCTIONARY;
        if (strstr(src, "<function="))
            return CHAT_TOOLS_FUNCTIONARY_V31;
        if (strstr(src, "<tool_call>"))
            return CHAT_TOOLS_HERMES;
        if (strstr(src, "<|python_tag|>") || strstr(src, "ipython"))
            return CHAT_TOOLS_LLAMA3;
    }
    if (cr && cr->tmpl.format == CHAT_FORMAT_LLAMA3)
        return CHAT_TOOLS_LLAMA3;
    if (cr && cr->tmpl.format == CHAT_FORMAT_MISTRAL)
        return CHAT_TOOLS_MISTRAL;
    return CHAT_TOOLS_HERMES; /* chatml families, and the fallback for templates without tools */
}

/* ---------------------------------------------------------------- scanning */

static bool is_space(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static size_t skip_space(const char *t, size_t i, size_t len)
{
    while (i < len && is_space(t[i]))
        i++;
    return i;
}

/* The end (one past) of the JSON object or array starting at t[i] ('{' or '['), by
 * bracket matching outside strings; 0 when it does not close within len. */
static size_t json_end(const char *t, size_t i, size_t len)
{
    int depth = 0;
    bool str = false;
    for (size_t k = i; k < len; k++) {
        char c = t[k];
        if (str) {
            if (c == '\\')
                k++;
            else if (c == '"')
                str = false;
            continue;
        }
        if (c == '"')
            str = true;
        else if (c == '{' || c == '[')
            depth++;
        else if ((c == '}' || c == ']') && --depth == 0)
            return k + 1;
    }
    return 0;
}

static const char *find(const char *t, size_t from, size_t len, const char *pat)
{
    size_t pl = strlen(pat);
    for (size_t i = from; i + pl <= len; i++)
        if (memcmp(t + i, pat, pl) == 0)
            return t + i;
    return NULL;
}

/* ---------------------------------------------------------------- results */

void chat_tool_calls_free(struct chat_tool_calls *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->call[i].name);
        free(c->call[i].arguments);
    }
    free(c->content);
    memset(c, 0, sizeof *c);
}

static bool append(char **buf, size_t *len, size_t *cap, const char *p, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t nc = (*cap ? *cap : 64);
        while (nc < *len + n + 1)
            nc *= 2;
        char *b = realloc(*buf, nc);
        if (!b)
            return false;
        *buf = b;
        *cap = nc;
    }
    memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = '\0';
    return true;
}

/* Adds a call from an object {"name": S, key: object-or-string}: arguments as compact JSON
 * text (a string's text when the model wrote the arguments as a string). */
static int add_call(struct chat_tool_calls *c, const struct json_value *o, const char *key)
{
    const char *name = json_str(json_get(o, "name"));
    const struct json_value *args = json_get(o, key);
    if (!name && json_get(o, "function")) { /* {"function": {"name", "arguments"}} */
        const struct json_value *f = json_get(o, "function");
        name = json_str(json_get(f, "name"));
        args = json_get(f, key) ? json_get(f, key) : json_get(f, "arguments");
    }
    if (!name || !*name || c->n >= CHAT_TOOLS_MAX_CALLS)
        return 0;
    char *text = NULL;
    if (!args || json_is(args, JSON_NULL)) {
        text = strdup("{}");
    } else if (json_is(args, JSON_STRING)) {
        text = strdup(args->u.string.s);
    } else if (json_is(args, JSON_OBJECT)) {
        if (json_write(args, JSON_COMPACT, &text, NULL, NULL) != KN_OK)
            text = NULL;
    } else {
        return 0; /* arguments must be an object */
    }
    char *nm = strdup(name);
    if (!text || !nm) {
        free(text);
        free(nm);
        return -1;
    }
    c->call[c->n].name = nm;
    c->call[c->n].arguments = text;
    c->n++;
    return 1;
}

/* Parses t[a, b) as JSON; NULL when it is not. */
static struct json_value *parse_json(const char *t, size_t a, size_t b)
{
    struct json_value *v = NULL;
    struct json_limits lim = {b - a + 1, 64, b - a + 1, 0};
    if (json_parse(t + a, b - a, &lim, &v, NULL) != KN_OK)
        return NULL;
    return v;
}

/* One or more call objects (an object, or an array of them) at t[i, end); returns the
 * calls added, or -1 out of memory. */
static int add_calls_json(struct chat_tool_calls *c, const char *t, size_t i, size_t end,
                          const char *key)
{
    struct json_value *v = parse_json(t, i, end);
    if (!v)
        return 0;
    int added = 0, r = 0;
    if (json_is(v, JSON_OBJECT)) {
        r = add_call(c, v, key);
        added += r > 0;
    } else if (json_is(v, JSON_ARRAY)) {
        for (size_t k = 0; k < v->u.array.len && r >= 0; k++) {
            r = add_call(c, v->u.array.items[k], key);
            added += r > 0;
        }
    }
    json_free(v);
    return r < 0 ? -1 : added;
}

/* Functionary v3.2 (">>>name\n{args}") and v3.1 ("<function=name>{args}</function>"):
 * the arguments of the named function. */
static int add_named_call(struct chat_tool_calls *c, const char *name, size_t nl, const char *t,
                          size_t i, size_t end)
{
    struct json_value *v = parse_json(t, i, end);
    if (!v)
        return 0;
    int r = 0;
    if (json_is(v, JSON_OBJECT) && nl > 0 && c->n < CHAT_TOOLS_MAX_CALLS) {
        char *text = NULL, *nm = malloc(nl + 1);
        if (json_write(v, JSON_COMPACT, &text, NULL, NULL) == KN_OK && nm) {
            memcpy(nm, name, nl);
            nm[nl] = '\0';
            c->call[c->n].name = nm;
            c->call[c->n].arguments = text;
            c->n++;
            r = 1;
        } else {
            free(text);
            free(nm);
            r = -1;
        }
    }
    json_free(v);
    return r;
}

/* Whether a tool name can be written bare: the parsers end a bare name at white space, '<',
 * '>' or a newline, so names keep to OpenAI's letters, digits, '_' and '-' (and '.'). */
static bool name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-' || c == '.';
}

/* Whether t starts with functionary v3.2's recipient line, "NAME\n" (or "all\n"), whole
 * or still growing (no newline yet). */
static bool recipient_line(const char *t, size_t len)
{
    size_t k = 0;
    while (k < len && name_char(t[k]))
        k++;
    return k == len || (k > 0 && t[k] == '\n');
}

enum kn_status chat_tool_calls_parse(enum chat_tool_syntax syn, const char *t, size_t len,
                                     struct chat_tool_calls *out, struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    size_t clen = 0, ccap = 0;
    size_t i = 0; /* text before i is settled: content appended or a call consumed */
    bool oom = false;
    while (i < len && !oom) {
        size_t start = len, body = len, stop = len, next = len;
        const char *p;
        int r = 0;
        bool marked = false; /* a call's marker opens at start */
        switch (syn) {
        case CHAT_TOOLS_HERMES:
            if ((p = find(t, i, len, "<tool_call>"))) {
                start = (size_t)(p - t);
                marked = true;
                body = skip_space(t, start + 11, len);
                stop = body < len && t[body] == '{' ? json_end(t, body, len) : 0;
                if (stop) {
                    const char *q = find(t, stop, len, "</tool_call>");
                    size_t after = skip_space(t, stop, len);
                    next = skip_space(t, q && (size_t)(q - t) == after ? after + 12 : after, len);
                    r = add_calls_json(out, t, body, stop, "arguments");
                }
            }
            break;
        case CHAT_TOOLS_MISTRAL:
            if ((p = find(t, i, len, "[TOOL_CALLS]"))) {
                start = (size_t)(p - t);
                marked = true;
                body = skip_space(t, start + 12, len);
                stop = body < len && (t[body] == '[' || t[body] == '{') ? json_end(t, body, len) : 0;
                if (stop) {
                    next = stop;
                    r = add_calls_json(out, t, body, stop, "arguments");
                }
            }
            break;
        case CHAT_TOOLS_LLAMA3: {
            size_t k = skip_space(t, i, len);
            if ((p = find(t, i, len, "<|python_tag|>"))) {
                start = (size_t)(p - t);
                marked = true;
                body = skip_space(t, start + 14, len);
            } else if (k < len && t[k] == '{' && (i == 0 || out->n > 0)) {
                /* the answer is the call (or the next one after ';') */
                start = body = k;
            }
            stop = body < len && t[body] == '{' ? json_end(t, body, len) : 0;
            if (start < len && stop) {
                next = skip_space(t, stop, len);
                if (next < len && t[next] == ';') /* several, separated by ';' */
                    next = skip_space(t, next + 1, len);
                r = add_calls_json(out, t, body, stop, "parameters");
                if (r == 0)
                    r = add_calls_json(out, t, body, stop, "arguments");
            }
            break;
        }
        case CHAT_TOOLS_FUNCTIONARY:
        case CHAT_TOOLS_FUNCTIONARY_V31: {
            /* v3.2's generation prompt ends with ">>>": its answer opens with a recipient */
            size_t hl = 3;
            if (syn == CHAT_TOOLS_FUNCTIONARY && i == 0 && recipient_line(t, len)) {
                p = t;
                hl = 0;
            } else {
                p = find(t, i, len, ">>>");
            }
            if (p) {
                start = (size_t)(p - t);
                marked = hl > 0;
                const char *nlp = memchr(p + hl, '\n', len - (start + hl));
                if (nlp) {
                    size_t name_len = (size_t)(nlp - (p + hl));
                    body = skip_space(t, (size_t)(nlp - t) + 1, len);
                    if (name_len == 3 && memcmp(p + hl, "all", 3) == 0) {
                        /* >>>all\ntext: content up to the next >>> */
                        const char *q = find(t, body, len, ">>>");
                        size_t e = q ? (size_t)(q - t) : len;
                        oom |= !append(&out->content, &clen, &ccap, t + i, start - i);
                        oom |= !append(&out->content, &clen, &ccap, t + body, e - body);
                        i = e;
                        continue;
                    }
                    stop = body < len && t[body] == '{' ? json_end(t, body, len) : 0;
                    if (stop) {
                        next = stop;
                        r = add_named_call(out, p + hl, name_len, t, body, stop);
                    }
                }
            } else if ((p = find(t, i, len, "<function="))) {
                start = (size_t)(p - t);
                marked = true;
                const char *gt = memchr(p, '>', len - start);
                if (gt) {
                    size_t name_len = (size_t)(gt - (p + 10));
                    body = skip_space(t, (size_t)(gt - t) + 1, len);
                    stop = body < len && t[body] == '{' ? json_end(t, body, len) : 0;
                    if (stop) {
                        const char *q = find(t, stop, len, "</function>");
                        next = q && (size_t)(q - t) == stop ? stop + 11 : stop;
                        r = add_named_call(out, p + 10, name_len, t, body, stop);
                    }
                }
            }
            break;
        }
        case CHAT_TOOLS_HARMONY:
            if ((p = find(t, i, len, "to=functions."))) {
                /* the call starts at its header: the last <|start|> (else <|channel|>)
                 * before the recipient and after the previous message's body */
                size_t at = (size_t)(p - t), from = i;
                marked = true;
                for (const char *q = find(t, i, at, "<|message|>"); q; q = find(t, from, at, "<|message|>"))
                    from = (size_t)(q - t) + 11;
                start = at;
                const char *h = NULL;
                for (const char *q = find(t, from, at, "<|start|>"); q; q = find(t, (size_t)(q - t) + 1, at, "<|start|>"))
                    h = q;
                if (!h)
                    for (const char *q = find(t, from, at, "<|channel|>"); q; q = find(t, (size_t)(q - t) + 1, at, "<|channel|>"))
                        h = q;
                if (h)
                    start = (size_t)(h - t);
                size_t name = at + 13, ne = name;
                while (ne < len && t[ne] != ' ' && t[ne] != '<' && t[ne] != '\n')
                    ne++;
                const char *m = find(t, ne, len, "<|message|>");
                if (m && ne > name) {
                    body = skip_space(t, (size_t)(m - t) + 11, len);
                    stop = body < len && t[body] == '{' ? json_end(t, body, len) : 0;
                    if (stop) {
                        next = stop;
                        if (len - stop >= 8 && memcmp(t + stop, "<|call|>", 8) == 0)
                            next = stop + 8;
                        r = add_named_call(out, t + name, ne - name, t, body, stop);
                    }
                }
            }
            break;
        default:
            break;
        }
        if (r < 0) {
            oom = true;
            break;
        }
        if (r == 0) {
            /* no well-formed call from here: the text before a call's marker is content;
             * the marker and what follows (a call cut short, or one without a name) are
             * dropped, so content never carries partial call markup. Without a marker
             * (Llama 3's bare JSON, a functionary recipient line) the rest is content. */
            oom |= !append(&out->content, &clen, &ccap, t + i, (marked ? start : len) - i);
            break;
        }
        oom |= !append(&out->content, &clen, &ccap, t + i, start - i);
        i = next;
    }
    if (oom) {
        chat_tool_calls_free(out);
        return kn_fail(err, KN_E_NOMEM, "out of memory parsing tool calls");
    }
    /* content that is only white space (between or around calls) is no content */
    bool blank = true;
    for (size_t k = 0; k < clen && blank; k++)
        blank = is_space(out->content[k]);
    if (blank) {
        free(out->content);
        out->content = NULL;
        clen = 0;
    }
    out->content_len = clen;
    return KN_OK;
}

bool chat_msg_only_calls(const struct json_value *msg)
{
    const char *role = json_str(json_get(msg, "role"));
    const struct json_value *c = json_get(msg, "content");
    return role && strcmp(role, "assistant") == 0 && json_get(msg, "tool_calls") &&
           (!c || json_is(c, JSON_NULL));
}

size_t chat_tool_calls_content_start(enum chat_tool_syntax syn, const char *t, size_t len)
{
    return syn == CHAT_TOOLS_FUNCTIONARY && len >= 4 && memcmp(t, "all\n", 4) == 0 ? 4 : 0;
}

size_t chat_tool_calls_safe_end(enum chat_tool_syntax syn, const char *t, size_t len)
{
    const char *marks[3] = {NULL, NULL, NULL};
    switch (syn) {
    case CHAT_TOOLS_HERMES: marks[0] = "<tool_call>"; break;
    case CHAT_TOOLS_MISTRAL: marks[0] = "[TOOL_CALLS]"; break;
    case CHAT_TOOLS_LLAMA3: {
        marks[0] = "<|python_tag|>";
        size_t k = skip_space(t, 0, len);
        if (k == len || t[k] == '{')
            return 0; /* the answer may be a bare JSON call */
        break;
    }
    case CHAT_TOOLS_FUNCTIONARY:
        if (recipient_line(t, len) && chat_tool_calls_content_start(syn, t, len) == 0)
            return 0; /* the answer may open with a call's recipient line */
        /* fall through */
    case CHAT_TOOLS_FUNCTIONARY_V31: marks[0] = ">>>"; marks[1] = "<function="; break;
    case CHAT_TOOLS_HARMONY: marks[0] = "<|start|>"; marks[1] = "<|channel|>"; marks[2] = "to=functions."; break;
    default: break;
    }
    size_t end = len;
    for (int m = 0; m < 3 && marks[m]; m++) {
        size_t ml = strlen(marks[m]);
        const char *p = find(t, 0, len, marks[m]);
        if (p && (size_t)(p - t) < end)
            end = (size_t)(p - t);
        /* a tail that may grow into the marker */
        for (size_t k = ml - 1 < len ? ml - 1 : len; k > 0; k--)
            if (memcmp(t + len - k, marks[m], k) == 0) {
                if (len - k < end)
                    end = len - k;
                break;
            }
    }
    return end;
}

/* ---------------------------------------------------------------- forced calls */

/* Each syntax's forced calls (chat_tool_call_frame): around the calls, then one call. */
static const struct chat_tool_frame frames[CHAT_TOOLS_COUNT] = {
    [CHAT_TOOLS_HERMES] = {"<tool_call>\n", "\n</tool_call>\n<tool_call>\n", "\n</tool_call>",
                           "{\"name\": ", ", \"arguments\": ", "}", true},
    [CHAT_TOOLS_LLAMA3] = {"", ";", "", "{\"name\": ", ", \"parameters\": ", "}", true},
    [CHAT_TOOLS_MISTRAL] = {"[TOOL_CALLS][", ",", "]", "{\"name\": ", ", \"arguments\": ", "}", true},
    /* v3.2: the generation prompt wrote the first ">>>" */
    [CHAT_TOOLS_FUNCTIONARY] = {"", ">>>", "", "", "\n", "", false},
    [CHAT_TOOLS_FUNCTIONARY_V31] = {"", "", "", "<function=", ">", "</function>", false},
    /* the generation prompt ends with <|start|>assistant; <|call|> (end of generation)
     * ends the turn after one call, so there is no separator */
    [CHAT_TOOLS_HARMONY] = {"", NULL, "", "<|channel|>commentary to=functions.",
                            " <|constrain|>json<|message|>", "", false},
};

void chat_tool_calls_keep(struct chat_tool_calls *c, int n)
{
    for (int i = n; i < c->n; i++) {
        free(c->call[i].name);
        free(c->call[i].arguments);
        c->call[i].name = c->call[i].arguments = NULL;
    }
    if (n < c->n)
        c->n = n;
}

void chat_tool_call_frame(enum chat_tool_syntax syn, bool parallel, struct chat_tool_frame *f)
{
    *f = frames[(unsigned)syn < CHAT_TOOLS_COUNT ? syn : CHAT_TOOLS_HERMES];
    if (!parallel)
        f->sep = NULL;
}

bool chat_tool_name_ok(const struct chat_tool_frame *f, const char *name)
{
    if (f->name_json)
        return true;
    if (!*name)
        return false;
    for (const char *c = name; *c; c++)
        if (!name_char(*c))
            return false;
    return true;
}
