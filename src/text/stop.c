/* stop.c: stop strings found in streamed text across token boundaries (text.h). */
#include "text.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- stop strings */

enum kn_status text_stop_init(struct text_stop *s, const char *const *stops, int n,
                              struct kn_err *err)
{
    memset(s, 0, sizeof *s);
    s->matched = -1;
    if (n < 0 || n > TEXT_MAX_STOPS)
        return kn_fail(err, KN_E_ARG, "at most %d stop strings, not %d", TEXT_MAX_STOPS, n);
    for (int i = 0; i < n; i++) {
        size_t len = stops[i] ? strlen(stops[i]) : 0;
        if (len == 0)
            return kn_fail(err, KN_E_ARG, "stop string %d is empty", i);
        s->stop[i] = stops[i];
        s->len[i] = len;
        if (len > s->max_len)
            s->max_len = len;
    }
    s->n = n;
    s->held = kn_malloc(s->max_len + 1, err);
    return s->held ? KN_OK : KN_E_NOMEM;
}

char *text_stop_unescape(const char *s, const char *what, struct kn_err *err)
{
    char *out = kn_malloc(strlen(s) + 1, err), *o = out;
    if (!out)
        return NULL;
    for (; *s; s++) {
        if (*s != '\\' || !s[1]) {
            *o++ = *s;
            continue;
        }
        s++;
        switch (*s) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case 'x': {
            int v = 0, k = 0;
            for (; k < 2 && ((s[1] >= '0' && s[1] <= '9') || ((s[1] | 32) >= 'a' && (s[1] | 32) <= 'f')); k++, s++)
                v = v * 16 + (s[1] <= '9' ? s[1] - '0' : (s[1] | 32) - 'a' + 10);
            if (k == 0 || v == 0) {
                free(out);
                kn_fail(err, KN_E_ARG, "%s: \\x needs one or two hex digits (not 00)", what);
                return NULL;
            }
            *o++ = (char)v;
            break;
        }
        default: *o++ = *s; break; /* \\ and \" and anything else: the character */
        }
    }
    *o = 0;
    if (!out[0]) {
        free(out);
        kn_fail(err, KN_E_ARG, "%s: a stop string needs at least one byte", what);
        return NULL;
    }
    return out;
}

void text_stop_free(struct text_stop *s)
{
    free(s->held);
    memset(s, 0, sizeof *s);
    s->matched = -1;
}

/* The length of the longest suffix of held that is a proper prefix of a stop string. */
static size_t stop_hold(const struct text_stop *s)
{
    size_t best = 0;
    for (int i = 0; i < s->n; i++)
        for (size_t l = s->n_held < s->len[i] - 1 ? s->n_held : s->len[i] - 1; l > best; l--)
            if (memcmp(s->held + s->n_held - l, s->stop[i], l) == 0) {
                best = l;
                break;
            }
    return best;
}

bool text_stop_feed(struct text_stop *s, const char *bytes, size_t len, char *out,
                    size_t *n_out)
{
    *n_out = 0;
    if (s->matched >= 0)
        return true;
    for (size_t b = 0; b < len; b++) {
        s->held[s->n_held++] = bytes[b];
        /* A stop string ending at this byte: the earliest-ending match wins. */
        for (int i = 0; i < s->n; i++)
            if (s->n_held >= s->len[i] &&
                memcmp(s->held + s->n_held - s->len[i], s->stop[i], s->len[i]) == 0) {
                size_t keep = s->n_held - s->len[i];
                memcpy(out + *n_out, s->held, keep);
                *n_out += keep;
                s->n_held = 0;
                s->matched = i;
                return true;
            }
        size_t hold = stop_hold(s);
        size_t emit = s->n_held - hold;
        if (emit > 0) {
            memcpy(out + *n_out, s->held, emit);
            *n_out += emit;
            memmove(s->held, s->held + emit, hold);
            s->n_held = hold;
        }
    }
    return false;
}

void text_stop_flush(struct text_stop *s, char *out, size_t *n_out)
{
    *n_out = 0;
    if (s->matched >= 0)
        return;
    memcpy(out, s->held, s->n_held);
    *n_out = s->n_held;
    s->n_held = 0;
}
