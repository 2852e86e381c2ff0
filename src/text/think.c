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
    return KN_OK;
}

void text_think_feed(struct text_think *t, const char *bytes, size_t len, char *content,
                     size_t *n_content, char *reasoning, size_t *n_reasoning)
{
    *n_content = *n_reasoning = 0;
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
        size_t hold = 0;
        for (size_t l = t->n_held < tl - 1 ? t->n_held : tl - 1; l > 0; l--)
            if (memcmp(t->held + t->n_held - l, tag, l) == 0) {
                hold = l;
                break;
            }
        size_t emit = t->n_held - hold;
        memcpy(out + *n_out, t->held, emit);
        *n_out += emit;
        memmove(t->held, t->held + emit, hold);
        t->n_held = hold;
    }
}

void text_think_flush(struct text_think *t, char *content, size_t *n_content, char *reasoning,
                      size_t *n_reasoning)
{
    *n_content = *n_reasoning = 0;
    if (t->inside) {
        memcpy(reasoning, t->held, t->n_held);
        *n_reasoning = t->n_held;
    } else {
        memcpy(content, t->held, t->n_held);
        *n_content = t->n_held;
    }
    t->n_held = 0;
}
