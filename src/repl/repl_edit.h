/* repl_edit.h: line editing for `kinetic chat` with libedit: history, a prompt, bracketed
 * paste (pasted text is inserted whole, newlines included, instead of sending each line),
 * Ctrl-C that abandons the line, and an idle hook that runs between keystrokes (Zero
 * Wait processes the line being typed there).
 *
 * Kept in its own file: libedit's <histedit.h> declares tok_* functions of its own, which
 * must not meet token/tok.h in one translation unit. */
#ifndef KN_REPL_EDIT_H
#define KN_REPL_EDIT_H

#include "../base/base.h"

#include <signal.h>
#include <stdio.h>

struct repl_edit;

/* Called whenever no key is waiting, with the line as typed so far; returns true while it
 * has more work for this line (it is then called again as soon as no key is waiting),
 * false to wait for the next key. Each call should take a few milliseconds at most. */
typedef bool (*repl_idle_fn)(void *ctx, const char *line, size_t len);

enum repl_read {
    REPL_READ_LINE = 0,   /* a line (without its final newline) */
    REPL_READ_EOF,        /* Ctrl-D on an empty line, or the end of the input */
    REPL_READ_INTERRUPT,  /* Ctrl-C: the line was abandoned */
    REPL_READ_ERROR,
};

/* Starts editing on the terminal in/out (both must be terminals). interrupt is the flag a
 * SIGINT handler sets; wake_fd (or -1) the non-blocking read end of a pipe the handler
 * also writes a byte to, so that a wait for a key ends whichever thread took the signal.
 * repl_edit_read clears both when it starts and when it reports the interrupt. */
KN_MUST_USE enum kn_status repl_edit_open(struct repl_edit **ed, const char *prog, FILE *in,
                                          FILE *out, volatile sig_atomic_t *interrupt,
                                          int wake_fd, struct kn_err *err);
void repl_edit_close(struct repl_edit *ed);
void repl_edit_set_idle(struct repl_edit *ed, repl_idle_fn fn, void *ctx);
/* Reads one line. *line (valid until the next call) holds it without the final newline;
 * pasted text may contain newlines. */
enum repl_read repl_edit_read(struct repl_edit *ed, const char *prompt, const char **line,
                              size_t *len);
/* Adds a line to the history (arrow keys recall it). */
void repl_edit_history_add(struct repl_edit *ed, const char *line);

#endif
