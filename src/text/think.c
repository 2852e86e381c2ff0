/* think.c: the reasoning/content split of streamed text (text.h). */
#include "text.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- reasoning split */

enum kn_status text_think_init(struct text_think *t, const char *open, const char *close,
                               bool start_inside, struct kn_err *err)
{
    memset(t, 0, sizeof *t);
    size_t ol = open ? strlen(open) : 0, cl = close ? strlen(close) : 0;
    if (ol == 0 || cl == 0 || ol > TEXT_MAX_MARKER || cl > TEXT_MAX_MARKER)
        return kn_fail(err, KN_E_ARG, "reasoning markers must have 1 to %d bytes",
                       TEXT_MAX_MARKER);
    memcpy(t->open, open, ol);
    memcpy(t->close, close, cl);
    t->open_len = ol;
    t->close_len = cl;
    t->inside = start_inside;
    t->harmony = strcmp(t->open, TEXT_HARMONY_OPEN) == 0;
    return KN_OK;
}

static bool ends_with(const char *b, size_t n, const char *s, size_t sl)
{
    return n >= sl && memcmp(b + n - sl, s, sl) == 0;
}

static bool contains(const char *b, size_t n, const char *s)
{
    size_t sl = strlen(s);
    for (size_t i = 0; i + sl <= n; i++)
        if (memcmp(b + i, s, sl) == 0)
            return true;
    return false;
}

/* The length of the longest tail of the held bytes (shorter than tag) that is a prefix of
 * tag: bytes that may still become the marker. */
static size_t held_tail(const struct text_think *t, const char *tag, size_t tl)
{
    for (size_t l = t->n_held < tl - 1 ? t->n_held : tl - 1; l > 0; l--)
        if (memcmp(t->held + t->n_held - l, tag, l) == 0)
            return l;
    return 0;
}

/* Emits the held bytes but the last hold to out, keeping those. */
static void emit_held(struct text_think *t, size_t hold, char *out, size_t *n_out)
{
    size_t emit = t->n_held - hold;
    memcpy(out + *n_out, t->held, emit);
    *n_out += emit;
    memmove(t->held, t->held + emit, hold);
    t->n_held = hold;
}

/* The harmony split (text.h TEXT_HARMONY_OPEN), one byte at a time. */
static void harmony_byte(struct text_think *t, char c, char *content, size_t *n_content,
                         char *reasoning, size_t *n_reasoning)
{
    static const char *const starts[2] = {"<|start|>", "<|channel|>"};
    t->held[t->n_held++] = c;
    if (t->in_header) {
        if (ends_with(t->held, t->n_held, "<|message|>", 11)) {
            bool tool = contains(t->held, t->n_held, "to=functions.");
            t->inside = !tool && contains(t->held, t->n_held, "<|channel|>analysis");
            if (tool) { /* the call's header stays for the tool-call parser */
                memcpy(content + *n_content, t->held, t->n_held);
                *n_content += t->n_held;
            }
            t->n_held = 0;
            t->in_header = false;
        } else if (t->n_held == TEXT_MAX_MARKER) { /* too long for a header: content */
            memcpy(content + *n_content, t->held, t->n_held);
            *n_content += t->n_held;
            t->n_held = 0;
            t->in_header = false;
            t->inside = false;
        }
        return;
    }
    char *out = t->inside ? reasoning : content;
    size_t *n_out = t->inside ? n_reasoning : n_content;
    for (int m = 0; m < 2; m++) {
        size_t ml = strlen(starts[m]);
        if (ends_with(t->held, t->n_held, starts[m], ml)) {
            memcpy(out + *n_out, t->held, t->n_held - ml);
            *n_out += t->n_held - ml;
            memmove(t->held, t->held + t->n_held - ml, ml);
            t->n_held = ml;
            t->in_header = true;
            return;
        }
    }
    /* keep the longest tail that may grow into a header's start */
    size_t h0 = held_tail(t, starts[0], strlen(starts[0])), h1 = held_tail(t, starts[1], strlen(starts[1]));
    emit_held(t, h0 > h1 ? h0 : h1, out, n_out);
}

void text_think_feed(struct text_think *t, const char *bytes, size_t len, char *content,
                     size_t *n_content, char *reasoning, size_t *n_reasoning)
{
    *n_content = *n_reasoning = 0;
    if (t->harmony) {
        for (size_t b = 0; b < len; b++)
            harmony_byte(t, bytes[b], content, n_content, reasoning, n_reasoning);
        return;
    }
    for (size_t b = 0; b < len; b++) {
        const char *tag = t->inside ? t->close : t->open;
        size_t tl = t->inside ? t->close_len : t->open_len;
        char *out = t->inside ? reasoning : content;
        size_t *n_out = t->inside ? n_reasoning : n_content;
        t->held[t->n_held++] = bytes[b];
        if (t->n_held >= tl && memcmp(t->held + t->n_held - tl, tag, tl) == 0) {
            memcpy(out + *n_out, t->held, t->n_held - tl);
            *n_out += t->n_held - tl;
            t->n_held = 0;
            t->inside = !t->inside;
            continue;
        }
        emit_held(t, held_tail(t, tag, tl), out, n_out);
    }
}

void text_think_flush(struct text_think *t, char *content, size_t *n_content, char *reasoning,
                      size_t *n_reasoning)
{
    *n_content = *n_reasoning = 0;
    if (t->in_header) /* an unfinished header: content */
        t->inside = false;
    t->in_header = false;
    if (t->inside) {
        memcpy(reasoning, t->held, t->n_held);
        *n_reasoning = t->n_held;
    } else {
        memcpy(content, t->held, t->n_held);
        *n_content = t->n_held;
    }
    t->n_held = 0;
}
