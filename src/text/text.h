/* text.h: post-processing of generated text, shared by the engine, the server and the
 * CLI: stop strings matched across token boundaries, and the split of a reply into
 * reasoning and content at markers such as <think> and </think>. Both work on bytes as
 * they stream, holding back only a tail that could still start what they look for.
 * Nothing here depends on the model, the tokenizer or the sampler. */
#ifndef KN_TEXT_H
#define KN_TEXT_H

#include "../base/base.h"

#include <stdbool.h>
#include <stddef.h>

/* ---------------------------------------------------------------- stop strings */

/* Finds stop strings in streamed text across token boundaries. Text goes in piece by
 * piece; what comes out is the text that can safely be shown: a tail that could be the
 * start of a stop string is held back until it is ruled out. When a stop string is
 * found, it and everything after it are dropped and matched says which one. */
#define TEXT_MAX_STOPS 16
struct text_stop {
    int n;
    const char *stop[TEXT_MAX_STOPS]; /* not owned; non-empty */
    size_t len[TEXT_MAX_STOPS];
    size_t max_len;
    char *held;                         /* max_len bytes: a possible stop prefix */
    size_t n_held;
    int matched;                        /* index of the stop string found, or -1 */
};
/* stops: n non-empty NUL-terminated strings (kept by reference). */
KN_MUST_USE enum kn_status text_stop_init(struct text_stop *s, const char *const *stops, int n,
                                          struct kn_err *err);
void text_stop_free(struct text_stop *s);
/* Feeds len bytes; writes the bytes safe to emit to out (capacity len + max_len) and
 * their count to *n_out. Returns true once a stop string has matched (then s->matched
 * names it and later calls emit nothing). */
bool text_stop_feed(struct text_stop *s, const char *bytes, size_t len, char *out,
                    size_t *n_out);
/* At the end of generation (no stop matched): emits the held-back bytes (at most max_len). */
void text_stop_flush(struct text_stop *s, char *out, size_t *n_out);
/* A stop string as typed on a command line (`kinetic run --stop`, `kinetic chat --stop`,
 * chat's /set stop) decoded into a new string (free()): \n \t \r \\ \" and \xHH (one or
 * two hex digits, not 00) are escapes; any other escaped character stands for itself.
 * Fails (KN_E_ARG, the message starting with what, e.g. "--stop") on a bad \x or an
 * empty result: a stop string needs at least one byte. */
char *text_stop_unescape(const char *s, const char *what, struct kn_err *err);

/* ---------------------------------------------------------------- reasoning split */

/* Splits streamed text into content and reasoning at markers such as <think> and
 * </think> (the markers themselves go to neither). Like the stop matcher it holds back
 * a tail that could be the start of the marker it is waiting for. start_inside: the
 * output starts inside the reasoning (templates that put the opening marker in the
 * prompt). */
#define TEXT_MAX_MARKER 127
/* gpt-oss's harmony format: open = TEXT_HARMONY_OPEN (close = TEXT_HARMONY_CLOSE) selects
 * a split by message headers instead of two markers. A header is "<|start|>ROLE" or
 * "<|channel|>" up to "<|message|>" (at most TEXT_MAX_MARKER bytes; a longer one is
 * content). The body after a header on the analysis channel is reasoning; after any other
 * header (final, commentary) it is content, and a header that addresses a tool
 * ("to=functions.NAME") is kept in the content, where the tool-call parser finds it;
 * other headers go to neither. */
#define TEXT_HARMONY_OPEN "<|channel|>analysis<|message|>"
#define TEXT_HARMONY_CLOSE "<|start|>"
struct text_think {
    char open[TEXT_MAX_MARKER + 1], close[TEXT_MAX_MARKER + 1];
    size_t open_len, close_len;
    bool inside;
    char held[TEXT_MAX_MARKER + 1];
    size_t n_held;
    bool harmony, in_header; /* harmony: n_held bytes of held are a header while in_header */
};
/* open and close: non-empty, at most TEXT_MAX_MARKER bytes. */
KN_MUST_USE enum kn_status text_think_init(struct text_think *t, const char *open,
                                           const char *close, bool start_inside,
                                             struct kn_err *err);
/* Feeds len bytes; content and reasoning (each of capacity len + TEXT_MAX_MARKER)
 * receive the bytes of each kind that are safe to show, their counts in *n_content and
 * *n_reasoning. Bytes keep their order within each kind. */
void text_think_feed(struct text_think *t, const char *bytes, size_t len, char *content,
                     size_t *n_content, char *reasoning, size_t *n_reasoning);
/* At the end: the held-back bytes go to the kind they were in. */
void text_think_flush(struct text_think *t, char *content, size_t *n_content, char *reasoning,
                      size_t *n_reasoning);

#endif
