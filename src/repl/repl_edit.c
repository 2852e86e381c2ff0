/* repl_edit.c: libedit line editing for `kinetic chat` (see repl_edit.h).
 *
 * libedit reads keys through a character function we supply (EL_GETCFN). Ours waits with
 * poll(): while no key is waiting it calls the idle hook (Zero Wait's pre-evaluation), it
 * recognises bracketed paste (ESC [200~ ... ESC [201~) and hands the pasted text to
 * libedit whole through a bound editor function, and it turns Ctrl-C into an abandoned
 * line. UTF-8 is decoded here into the wide characters libedit wants. */
#include "repl_edit.h"

#include <errno.h>
#include <histedit.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

/* The key our getc function returns after a paste; bound to "kn-paste". */
#define EDIT_PASTE_KEY 0x1e /* ^^ */
/* How long the rest of an escape sequence may take to arrive. */
#define EDIT_ESC_MS 30
#define EDIT_HISTORY 500

enum { EDIT_TIMEOUT = -1, EDIT_EOF = -2, EDIT_INTR = -3, EDIT_ERR = -4 };

struct repl_edit {
    EditLine *el;
    History *hist;
    HistEvent ev;
    int fd;
    int wake_fd;            /* readable when the SIGINT handler ran (any thread), or -1 */
    FILE *out;
    volatile sig_atomic_t *interrupt;
    const char *prompt;
    repl_idle_fn idle;
    void *idle_ctx;
    bool idle_more;         /* the idle hook has work left for the current line */
    bool interrupted;       /* the current read ended with Ctrl-C */
    unsigned char queue[16];/* bytes read ahead (a sequence that was not a paste) */
    int q_head, q_len;
    char *paste;            /* the text of the last paste, for kn-paste */
    size_t paste_len, paste_cap;
    char *line;             /* the last line returned */
    size_t line_cap;
    struct sigaction old_winch;
    bool have_winch;
    struct termios orig;    /* the terminal as we found it */
    bool have_orig;
};

/* Between lines (while an answer streams) the terminal stays out of canonical mode and
 * does not echo: libedit prints the prompt before it switches the terminal to its own
 * mode, so keys typed at that moment, or during an answer, would otherwise meet the
 * kernel's line discipline (echoed twice, and a Ctrl-D there becomes an end-of-file
 * marker that is lost on the switch). Signals stay on: Ctrl-C still raises SIGINT. */
static void edit_quiet(struct repl_edit *ed)
{
    if (!ed->have_orig)
        return;
    struct termios t = ed->orig;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 1;
    t.c_cc[VTIME] = 0;
    tcsetattr(ed->fd, TCSADRAIN, &t);
}

static bool paste_add(struct repl_edit *ed, char c)
{
    if (ed->paste_len + 2 > ed->paste_cap) {
        size_t cap = ed->paste_cap ? ed->paste_cap * 2 : 256;
        char *t = realloc(ed->paste, cap);
        if (!t)
            return false;
        ed->paste = t;
        ed->paste_cap = cap;
    }
    ed->paste[ed->paste_len++] = c;
    ed->paste[ed->paste_len] = 0;
    return true;
}

/* One byte from the terminal. timeout_ms < 0: wait as long as it takes, running the idle
 * hook while nothing is typed; otherwise EDIT_TIMEOUT after that long. */
/* Set by SIGWINCH: the terminal changed size and libedit must learn the new width. */
static volatile sig_atomic_t edit_winch;

static void on_sigwinch(int sig)
{
    (void)sig;
    edit_winch = 1;
}

static void drain_wake(struct repl_edit *ed)
{
    char tmp[64];
    if (ed->wake_fd >= 0)
        while (read(ed->wake_fd, tmp, sizeof tmp) > 0)
            ;
}

static int raw_byte(struct repl_edit *ed, int timeout_ms)
{
    /* The SIGINT handler may run on any thread (the kernel pool's too), so a poll() here
     * is not sure to be interrupted: the handler also writes to a pipe we watch, and the
     * flag is checked before every wait. */
    struct pollfd pfd[2] = {{.fd = ed->fd, .events = POLLIN}, {.fd = ed->wake_fd, .events = POLLIN}};
    for (;;) {
        if (ed->interrupt && *ed->interrupt)
            return EDIT_INTR;
        if (edit_winch) {
            edit_winch = 0;
            el_resize(ed->el);
            el_set(ed->el, EL_REFRESH);
        }
        int t = timeout_ms;
        if (t < 0 && ed->idle && ed->idle_more)
            t = 0;
        else if (t < 0)
            t = 250; /* SIGWINCH may land on another thread: look at the flag now and then */
        int rc = poll(pfd, ed->wake_fd >= 0 ? 2 : 1, t);
        if (rc < 0) {
            if (errno != EINTR)
                return EDIT_ERR;
            continue;
        }
        if (rc > 0 && ed->wake_fd >= 0 && (pfd[1].revents & POLLIN)) {
            drain_wake(ed);
            continue;
        }
        if (rc == 0) {
            if (timeout_ms >= 0)
                return EDIT_TIMEOUT;
            if (!(ed->idle && ed->idle_more))
                continue; /* the periodic look at the flags */
            const LineInfo *li = el_line(ed->el);
            ed->idle_more = ed->idle(ed->idle_ctx, li->buffer, (size_t)(li->lastchar - li->buffer));
            continue;
        }
        unsigned char b;
        ssize_t n = read(ed->fd, &b, 1);
        if (n == 1)
            return b;
        if (n == 0)
            return EDIT_EOF;
        if (errno == EINTR) {
            if (ed->interrupt && *ed->interrupt)
                return EDIT_INTR;
            continue;
        }
        if (errno != EAGAIN)
            return EDIT_ERR;
    }
}

static int next_byte(struct repl_edit *ed, int timeout_ms)
{
    if (ed->q_len) {
        int b = ed->queue[ed->q_head];
        ed->q_head = (ed->q_head + 1) % (int)sizeof ed->queue;
        ed->q_len--;
        return b;
    }
    return raw_byte(ed, timeout_ms);
}

static void unread(struct repl_edit *ed, const unsigned char *b, int n)
{
    for (int i = 0; i < n && ed->q_len < (int)sizeof ed->queue; i++)
        ed->queue[(ed->q_head + ed->q_len++) % (int)sizeof ed->queue] = b[i];
}

/* After ESC: true (and the paste text in ed->paste) when "[200~" follows; otherwise the
 * bytes read are queued for libedit (arrow keys and the like). */
static int try_paste(struct repl_edit *ed)
{
    static const char start[] = "[200~", end[] = "\x1b[201~";
    unsigned char got[8];
    int n = 0;
    while (start[n]) {
        int b = next_byte(ed, EDIT_ESC_MS);
        if (b < 0) {
            unread(ed, got, n);
            return b == EDIT_TIMEOUT ? 0 : b;
        }
        got[n++] = (unsigned char)b;
        if (b != (unsigned char)start[n - 1]) {
            unread(ed, got, n);
            return 0;
        }
    }
    /* Read until the end marker; terminals send a newline in a paste as CR. */
    ed->paste_len = 0;
    int matched = 0;
    bool cr = false;
    for (;;) {
        int b = raw_byte(ed, 1000);
        if (b < 0 && b != EDIT_TIMEOUT)
            return b;
        if (b == EDIT_TIMEOUT)
            break; /* a terminal that never ends the paste: keep what came */
        if (b == (unsigned char)end[matched]) {
            if (!end[++matched])
                break;
            continue;
        }
        for (int i = 0; i < matched; i++)
            if (!paste_add(ed, end[i]))
                return EDIT_ERR;
        matched = b == 0x1b ? 1 : 0;
        if (matched)
            continue;
        if (b == '\r') {
            b = '\n';
            cr = true;
        } else if (b == '\n' && cr) {
            cr = false;
            continue;  /* CR LF: one newline */
        } else {
            cr = false;
        }
        if (!paste_add(ed, (char)b))
            return EDIT_ERR;
    }
    return 1;
}

static int edit_getc(EditLine *el, wchar_t *wc)
{
    struct repl_edit *ed = NULL;
    el_get(el, EL_CLIENTDATA, &ed);
    int b = next_byte(ed, -1);
    if (b == 0x1b && ed->q_len == 0) {
        int p = try_paste(ed);
        if (p == 1) {
            *wc = EDIT_PASTE_KEY;
            ed->idle_more = true;
            return 1;
        }
        if (p < 0)
            b = p;
    }
    if (b == 0x03) /* Ctrl-C read as a character (the terminal's ISIG is off) */
        b = EDIT_INTR;
    if (b == EDIT_INTR) {
        ed->interrupted = true;
        *wc = 0;
        errno = EINTR;
        return -1;
    }
    if (b == EDIT_EOF) {
        *wc = 0;
        return 0;
    }
    if (b < 0) {
        *wc = 0;
        return -1;
    }
    ed->idle_more = true;
    /* UTF-8 to one wide character; a malformed sequence passes its first byte through. */
    wchar_t c = (wchar_t)b;
    int more = b >= 0xf0 && b < 0xf8 ? 3 : b >= 0xe0 ? 2 : b >= 0xc0 ? 1 : 0;
    if (b >= 0x80 && b < 0xc0)
        more = 0;
    if (more) {
        unsigned char got[4];
        uint32_t cp = (uint32_t)b & (0x3fu >> more);
        int i = 0;
        for (; i < more; i++) {
            int x = next_byte(ed, EDIT_ESC_MS);
            if (x < 0)
                break;
            got[i] = (unsigned char)x;
            if ((x & 0xc0) != 0x80) {
                i++;
                break;
            }
            cp = cp << 6 | ((uint32_t)x & 0x3f);
        }
        if (i == more && (got[more - 1] & 0xc0) == 0x80)
            c = (wchar_t)cp;
        else
            unread(ed, got, i);
    }
    *wc = c;
    return 1;
}

static unsigned char edit_paste_fn(EditLine *el, int ch)
{
    struct repl_edit *ed = NULL;
    (void)ch;
    el_get(el, EL_CLIENTDATA, &ed);
    if (ed->paste_len && el_insertstr(el, ed->paste) != 0)
        return CC_ERROR;
    ed->paste_len = 0;
    return CC_REFRESH;
}

static char *edit_prompt(EditLine *el)
{
    struct repl_edit *ed = NULL;
    el_get(el, EL_CLIENTDATA, &ed);
    return (char *)(ed && ed->prompt ? ed->prompt : "> ");
}

enum kn_status repl_edit_open(struct repl_edit **out, const char *prog, FILE *in, FILE *out_f,
                              volatile sig_atomic_t *interrupt, int wake_fd, struct kn_err *err)
{
    *out = NULL;
    struct repl_edit *ed = calloc(1, sizeof *ed);
    if (!ed)
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    ed->fd = fileno(in);
    ed->out = out_f;
    ed->interrupt = interrupt;
    ed->wake_fd = wake_fd;
    ed->have_orig = tcgetattr(ed->fd, &ed->orig) == 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigwinch;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGWINCH, &sa, &ed->old_winch);
    ed->have_winch = true;
    ed->el = el_init(prog, in, out_f, stderr);
    ed->hist = history_init();
    if (!ed->el || !ed->hist) {
        repl_edit_close(ed);
        return kn_fail(err, KN_E_IO, "cannot start line editing on this terminal");
    }
    history(ed->hist, &ed->ev, H_SETSIZE, EDIT_HISTORY);
    history(ed->hist, &ed->ev, H_SETUNIQUE, 1);
    el_set(ed->el, EL_CLIENTDATA, ed);
    el_set(ed->el, EL_EDITOR, "emacs");
    el_set(ed->el, EL_HIST, history, ed->hist);
    el_set(ed->el, EL_PROMPT, edit_prompt);
    el_set(ed->el, EL_GETCFN, edit_getc);
    /* The wide call keeps our static strings; the narrow el_set copies them and never
     * frees the copies (a known libedit leak). */
    el_wset(ed->el, EL_ADDFN, L"kn-paste", L"insert the pasted text", edit_paste_fn);
    el_set(ed->el, EL_BIND, "^^", "kn-paste", NULL);
    el_source(ed->el, NULL); /* the user's ~/.editrc, if any */
    /* Ask the terminal to mark pastes. */
    fputs("\x1b[?2004h", out_f);
    fflush(out_f);
    edit_quiet(ed);
    *out = ed;
    return KN_OK;
}

void repl_edit_close(struct repl_edit *ed)
{
    if (!ed)
        return;
    if (ed->el) {
        fputs("\x1b[?2004l", ed->out);
        fflush(ed->out);
        el_end(ed->el);
    }
    if (ed->have_orig)
        tcsetattr(ed->fd, TCSADRAIN, &ed->orig);
    if (ed->have_winch)
        sigaction(SIGWINCH, &ed->old_winch, NULL);
    if (ed->hist)
        history_end(ed->hist);
    free(ed->paste);
    free(ed->line);
    free(ed);
}

void repl_edit_set_idle(struct repl_edit *ed, repl_idle_fn fn, void *ctx)
{
    ed->idle = fn;
    ed->idle_ctx = ctx;
}

enum repl_read repl_edit_read(struct repl_edit *ed, const char *prompt, const char **line,
                              size_t *len)
{
    ed->prompt = prompt;
    ed->interrupted = false;
    /* A Ctrl-C from before this line (it stopped an answer) is spent. */
    drain_wake(ed);
    if (ed->interrupt)
        *ed->interrupt = 0;
    ed->idle_more = ed->idle != NULL; /* start on the conversation before a key is typed */
    int n = 0;
    const char *s = el_gets(ed->el, &n);
    edit_quiet(ed);
    if (ed->interrupted) {
        if (ed->interrupt)
            *ed->interrupt = 0;
        fputs("^C\n", ed->out);
        fflush(ed->out);
        /* Abandon what was typed so far. */
        el_reset(ed->el);
        edit_quiet(ed);
        return REPL_READ_INTERRUPT;
    }
    if (!s)
        return n < 0 ? REPL_READ_ERROR : REPL_READ_EOF;
    if (n == 0)
        return REPL_READ_EOF;
    size_t l = (size_t)n;
    if (l && s[l - 1] == '\n')
        l--;
    if (l + 1 > ed->line_cap) {
        char *t = realloc(ed->line, l + 1);
        if (!t)
            return REPL_READ_ERROR;
        ed->line = t;
        ed->line_cap = l + 1;
    }
    memcpy(ed->line, s, l);
    ed->line[l] = 0;
    *line = ed->line;
    *len = l;
    return REPL_READ_LINE;
}

void repl_edit_history_add(struct repl_edit *ed, const char *line)
{
    if (line && *line)
        history(ed->hist, &ed->ev, H_ENTER, line);
}
