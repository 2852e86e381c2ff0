/* progress.h: the progress of long work (kinetic synth's tensors, verify-receipt's rerun,
 * a device's self-test), on standard error, never on standard output (results go there,
 * and scripts parse them).
 *
 * On a terminal the reporter draws one line, redrawn in place ("\r") at most
 * KN_PROGRESS_BAR_HZ times a second, and finishes it with a newline; work done within
 * KN_PROGRESS_BAR_DELAY_S draws nothing. Anywhere else (a log, a pipe) it writes a plain
 * line at each quarter of the work and, between quarters, one at most every
 * KN_PROGRESS_LINE_S, so a log gets a handful of lines however long the work. Work of
 * unknown size (total 0) is a few steps, each perhaps long: the bar shows each step as
 * it starts and is cleared at the end (what follows reports the outcome); the lines give
 * the step and the time, at most every KN_PROGRESS_LINE_S.
 *
 *   struct kn_progress p;
 *   kn_progress_begin(&p, kn_progress_mode_for(stderr), stderr, "synth", "bytes", total);
 *   for (...) kn_progress_update(&p, done, tensor_name);
 *   kn_progress_end(&p);
 *
 * One thread drives a reporter. Code deep in a call tree that cannot be handed one (a
 * device's self-test, run inside its open) names its step with kn_progress_stage, which
 * goes to the reporter the calling thread attached, or nowhere. */
#ifndef KN_BASE_PROGRESS_H
#define KN_BASE_PROGRESS_H

#include "base.h"

#include <stdio.h>

/* The bar's most redraws per second. */
#define KN_PROGRESS_BAR_HZ 10
/* The bar appears only once the work has run this long (quick work leaves no line). */
#define KN_PROGRESS_BAR_DELAY_S 0.5
/* Lines: the longest gap between two lines while the work goes on (besides the quarters). */
#define KN_PROGRESS_LINE_S 10.0

enum kn_progress_mode {
    KN_PROGRESS_OFF = 0, /* nothing (the zero value: a caller that says nothing gets none) */
    KN_PROGRESS_LINES,   /* a plain line now and then: logs and pipes */
    KN_PROGRESS_BAR,     /* one line redrawn in place: a terminal */
};

/* A reporter. The fields are the reporter's; read them, do not set them. */
struct kn_progress {
    FILE *out;
    enum kn_progress_mode mode;
    char what[64];      /* the work, the start of every line: "synth", "rerun" */
    char unit[16];      /* what total counts ("tokens"); "bytes" is shown in MiB or GiB */
    uint64_t total;     /* 0: unknown (steps only) */
    uint64_t done;
    char detail[128];   /* the current step: a tensor's name, "prefill", an op */
    double t0;          /* when the work began */
    double t_out;       /* when the last line or redraw was written */
    uint64_t done_out;  /* done as that output showed it */
    int quarter;        /* lines: the quarters of the work reported so far (0..4) */
    int cols;           /* bar: the terminal's width */
    bool shown;         /* bar: a line is on the screen, unfinished */
};

/* The mode for a stream: the bar on a terminal, lines elsewhere. */
enum kn_progress_mode kn_progress_mode_for(FILE *f);

/* Starts reporting work of total units (0: unknown) to out; with mode KN_PROGRESS_OFF
 * every call on p does nothing. */
void kn_progress_begin(struct kn_progress *p, enum kn_progress_mode mode, FILE *out,
                       const char *what, const char *unit, uint64_t total);
/* Records that done units are finished and, when detail is not NULL, the current step;
 * writes a line or redraws the bar when that is due. */
void kn_progress_update(struct kn_progress *p, uint64_t done, const char *detail);
/* Writes a line of its own (a notice: what starts, what it costs), above the bar on a
 * terminal; the bar is redrawn at the next update. Nothing with mode KN_PROGRESS_OFF. */
void kn_progress_note(struct kn_progress *p, const char *fmt, ...) KN_PRINTF(2, 3);
/* Finishes: the final state (the bar's last redraw and a newline; a last line unless the
 * last one already showed it). p may be begun again afterwards. */
void kn_progress_end(struct kn_progress *p);

/* Makes p (NULL: none) the reporter of the calling thread's kn_progress_stage. */
void kn_progress_attach(struct kn_progress *p);
/* Names the current step on the calling thread's attached reporter, if any. */
void kn_progress_stage(const char *fmt, ...) KN_PRINTF(1, 2);
/* Clears the calling thread's attached bar from the screen before other text goes to
 * standard error (kn_log, a note of the repack cache), so that the text does not run on
 * from the bar's line; the next update draws the bar again. */
void kn_progress_interrupt(void);

#endif
