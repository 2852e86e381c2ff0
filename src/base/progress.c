/* progress.c: the progress reporter (progress.h). Every function takes the time from
 * one place, the *_at functions' now, so that the unit test can drive the clock. */
#include "progress.h"

#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* The bar's width in characters, between its brackets. */
#define BAR_WIDTH 20

enum kn_progress_mode kn_progress_mode_for(FILE *f)
{
    return isatty(fileno(f)) ? KN_PROGRESS_BAR : KN_PROGRESS_LINES;
}

/* The terminal's width (80 when it cannot be asked). */
static int term_cols(FILE *f)
{
    struct winsize ws;
    if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

static void fmt_secs(char *buf, size_t cap, double s)
{
    if (s < 10)
        snprintf(buf, cap, "%.1f s", s);
    else if (s < 120)
        snprintf(buf, cap, "%.0f s", s);
    else
        snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)s % 60);
}

/* "275/1100 MiB" or "40/128 tokens". */
static void fmt_amount(char *buf, size_t cap, const struct kn_progress *p)
{
    if (strcmp(p->unit, "bytes") != 0) {
        snprintf(buf, cap, "%llu/%llu %s", (unsigned long long)p->done,
                 (unsigned long long)p->total, p->unit);
        return;
    }
    bool gib = p->total >= (10ull << 30);
    double div = gib ? (double)(1ull << 30) : (double)(1ull << 20);
    int dec = p->total < (100ull << 20) ? 1 : 0;
    snprintf(buf, cap, "%.*f/%.*f %s", dec, (double)p->done / div, dec, (double)p->total / div,
             gib ? "GiB" : "MiB");
}

/* The state without the work's name: "25% 275/1100 MiB, 16 s, about 48 s left" (final:
 * no estimate), or for work of unknown size the time alone. */
static void fmt_state(char *buf, size_t cap, const struct kn_progress *p, double now, bool final)
{
    char el[32];
    double t = now - p->t0;
    fmt_secs(el, sizeof el, t);
    if (!p->total) {
        snprintf(buf, cap, "%s", el);
        return;
    }
    char am[64], left[48] = "";
    fmt_amount(am, sizeof am, p);
    if (!final && p->done > 0 && p->done < p->total && t >= 1.0) {
        char eta[32];
        fmt_secs(eta, sizeof eta, t * (double)(p->total - p->done) / (double)p->done);
        snprintf(left, sizeof left, ", about %s left", eta);
    }
    snprintf(buf, cap, "%3d%% %s, %s%s", (int)(p->done * 100 / p->total), am, el, left);
}

/* Lines: "synth: 25% 275/1100 MiB, 16 s, about 48 s left: blk.5.attn_q.weight". */
static void write_line(struct kn_progress *p, double now, bool final)
{
    char st[160];
    fmt_state(st, sizeof st, p, now, final);
    const char *s = st + strspn(st, " ");
    bool detail = !final && p->detail[0];
    fprintf(p->out, "%s: %s%s%s\n", p->what, s, detail ? ": " : "", detail ? p->detail : "");
    fflush(p->out);
    p->t_out = now;
    p->done_out = p->done;
}

/* The bar: "\rsynth [#####---------------]  25% 275/1100 MiB, 16 s, about 48 s left  name",
 * cut to the terminal's width less one column (a line that wrapped could not be redrawn
 * in place), then erase to the end of the line (what a longer line left). */
static void draw_bar(struct kn_progress *p, double now, bool final)
{
    char st[160], line[512];
    fmt_state(st, sizeof st, p, now, final);
    const char *detail = final ? "" : p->detail;
    if (p->total) {
        char bar[BAR_WIDTH + 1];
        int fill = (int)(p->done * BAR_WIDTH / p->total);
        for (int i = 0; i < BAR_WIDTH; i++)
            bar[i] = i < fill ? '#' : '-';
        bar[BAR_WIDTH] = 0;
        snprintf(line, sizeof line, "%s [%s] %s%s%s", p->what, bar, st, *detail ? "  " : "",
                 detail);
    } else { /* the step alone: a redraw comes only with the next step, so a time shown
              * here would stand still */
        snprintf(line, sizeof line, "%s  %s", p->what, detail);
    }
    int width = p->cols - 1;
    if (width > 0 && (size_t)width < sizeof line)
        line[width] = 0;
    fprintf(p->out, "\r%s\033[K", line);
    fflush(p->out);
    p->shown = true;
    p->t_out = now;
    p->done_out = p->done;
}

/* ---------------------------------------------------------------- clocked */

static void progress_begin_at(struct kn_progress *p, enum kn_progress_mode mode, FILE *out,
                              const char *what, const char *unit, uint64_t total, double now)
{
    memset(p, 0, sizeof *p);
    p->mode = out ? mode : KN_PROGRESS_OFF;
    p->out = out;
    snprintf(p->what, sizeof p->what, "%s", what);
    snprintf(p->unit, sizeof p->unit, "%s", unit ? unit : "");
    p->total = total;
    p->t0 = p->t_out = now;
    p->cols = mode == KN_PROGRESS_BAR ? term_cols(out) : 80;
}

static void progress_update_at(struct kn_progress *p, uint64_t done, const char *detail,
                               double now)
{
    if (p->mode == KN_PROGRESS_OFF)
        return;
    p->done = p->total && done > p->total ? p->total : done;
    if (detail)
        snprintf(p->detail, sizeof p->detail, "%s", detail);
    if (p->mode == KN_PROGRESS_BAR) {
        /* Steps (work of unknown size) are few and each may be long: every one is drawn
         * at once, as a step skipped would stand on the screen for the whole next one. */
        if (p->total && now - p->t0 < KN_PROGRESS_BAR_DELAY_S)
            return;
        if (p->total && p->shown && now - p->t_out < 1.0 / KN_PROGRESS_BAR_HZ)
            return;
        draw_bar(p, now, false);
        return;
    }
    int q = p->total ? (int)(p->done * 4 / p->total) : 0;
    if (q > p->quarter) {
        p->quarter = q;
        write_line(p, now, q == 4);
    } else if (now - p->t_out >= KN_PROGRESS_LINE_S) {
        write_line(p, now, false);
    }
}

static void progress_end_at(struct kn_progress *p, double now)
{
    if (p->mode == KN_PROGRESS_BAR && !p->total) {
        if (p->shown) /* steps are cleared: what follows reports their outcome */
            fputs("\r\033[K", p->out);
        fflush(p->out);
    } else if (p->mode == KN_PROGRESS_BAR) {
        if (p->shown || (p->done && now - p->t0 >= KN_PROGRESS_BAR_DELAY_S)) {
            draw_bar(p, now, true);
            fputc('\n', p->out);
            fflush(p->out);
        }
    } else if (p->mode == KN_PROGRESS_LINES && p->done != p->done_out) {
        write_line(p, now, true);
    }
    p->shown = false;
    p->mode = KN_PROGRESS_OFF;
}

static void progress_vnote(struct kn_progress *p, const char *fmt, va_list ap)
{
    if (p->mode == KN_PROGRESS_OFF)
        return;
    if (p->shown) {
        fputs("\r\033[K", p->out);
        p->shown = false; /* the next update redraws at once */
    }
    vfprintf(p->out, fmt, ap);
    fputc('\n', p->out);
    fflush(p->out);
}

/* ---------------------------------------------------------------- public */

void kn_progress_begin(struct kn_progress *p, enum kn_progress_mode mode, FILE *out,
                       const char *what, const char *unit, uint64_t total)
{
    progress_begin_at(p, mode, out, what, unit, total, kn_now());
}

void kn_progress_update(struct kn_progress *p, uint64_t done, const char *detail)
{
    if (p->mode != KN_PROGRESS_OFF)
        progress_update_at(p, done, detail, kn_now());
}

void kn_progress_note(struct kn_progress *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    progress_vnote(p, fmt, ap);
    va_end(ap);
}

void kn_progress_end(struct kn_progress *p)
{
    if (p->mode != KN_PROGRESS_OFF)
        progress_end_at(p, kn_now());
}

static _Thread_local struct kn_progress *attached;

void kn_progress_attach(struct kn_progress *p)
{
    attached = p;
}

void kn_progress_interrupt(void)
{
    struct kn_progress *p = attached;
    if (p && p->mode == KN_PROGRESS_BAR && p->shown) {
        fputs("\r\033[K", p->out);
        fflush(p->out);
        p->shown = false;
    }
}

void kn_progress_stage(const char *fmt, ...)
{
    struct kn_progress *p = attached;
    if (!p || p->mode == KN_PROGRESS_OFF)
        return;
    char buf[sizeof p->detail];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    kn_progress_update(p, p->done, buf);
}
