/* test_progress.c: the progress reporter's lines, bar and rate limits (base/progress.h),
 * on a clock the test drives: progress.c is included for its *_at functions. */
#include "check.h"
#include "../../src/base/progress.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A reporter writing to memory. */
struct mem {
    char *buf;
    size_t len;
    FILE *f;
};

static void mem_open(struct mem *m)
{
    m->buf = NULL;
    m->len = 0;
    m->f = open_memstream(&m->buf, &m->len);
}

static void mem_close(struct mem *m)
{
    fclose(m->f);
    free(m->buf);
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

/* Lines: one at each quarter, whatever the number of updates; the last names no step
 * and no estimate; the end adds nothing when the last line showed the end. */
static void test_lines_quarters(void)
{
    struct mem m;
    mem_open(&m);
    struct kn_progress p;
    progress_begin_at(&p, KN_PROGRESS_LINES, m.f, "rerun", "tokens", 100, 0.0);
    for (int i = 1; i <= 100; i++)
        progress_update_at(&p, (uint64_t)i, i <= 40 ? "prefill" : "generating", i / 25.0);
    progress_end_at(&p, 4.1);
    fflush(m.f);
    CHECKF(count(m.buf, "\n") == 4, "%s", m.buf);
    CHECKF(strstr(m.buf, "rerun: 25% 25/100 tokens, 1.0 s, about 3.0 s left: prefill\n") != NULL,
           "%s", m.buf);
    CHECKF(strstr(m.buf, "rerun: 75% 75/100 tokens, 3.0 s, about 1.0 s left: generating\n") != NULL,
           "%s", m.buf);
    CHECKF(strstr(m.buf, "rerun: 100% 100/100 tokens, 4.0 s\n") != NULL, "%s", m.buf);
    CHECK(strchr(m.buf, '\r') == NULL && strchr(m.buf, '\033') == NULL);
    mem_close(&m);
}

/* Lines of slow work: between quarters, one every KN_PROGRESS_LINE_S at most. */
static void test_lines_slow(void)
{
    struct mem m;
    mem_open(&m);
    struct kn_progress p;
    progress_begin_at(&p, KN_PROGRESS_LINES, m.f, "synth", "bytes", 10000ull << 20, 0.0);
    /* 55 s of 1 MiB every 0.1 s: 5% of the work, no quarter */
    for (int i = 1; i <= 550; i++)
        progress_update_at(&p, (uint64_t)i << 20, "blk.0.ffn_up.weight", i / 10.0);
    fflush(m.f);
    CHECKF(count(m.buf, "\n") == (int)(55.0 / KN_PROGRESS_LINE_S), "%s", m.buf);
    CHECKF(strstr(m.buf, "synth: 1% 100/10000 MiB, 10 s, about 16m30s left: blk.0.ffn_up.weight\n") !=
               NULL, "%s", m.buf);
    CHECKF(strstr(m.buf, "synth: 5% 500/10000 MiB, 50 s, about 15m50s left: blk.0.ffn_up.weight\n") !=
               NULL, "%s", m.buf);
    /* the end of work that stopped early: a last line, where it stopped */
    progress_end_at(&p, 55.05);
    fflush(m.f);
    CHECKF(strstr(m.buf, "synth: 5% 550/10000 MiB, 55 s\n") != NULL, "%s", m.buf);
    mem_close(&m);
}

/* Work of unknown size: its step and the time, every KN_PROGRESS_LINE_S at most; the end
 * adds nothing (nothing was counted). */
static void test_lines_steps(void)
{
    struct mem m;
    mem_open(&m);
    struct kn_progress p;
    progress_begin_at(&p, KN_PROGRESS_LINES, m.f, "vulkan:0 self-test", NULL, 0, 0.0);
    progress_update_at(&p, 0, "vulkan:0: arithmetic probes", 0.2);
    progress_update_at(&p, 0, "vulkan:0: attention", 10.6);
    progress_update_at(&p, 0, "vulkan:0: short convolution and experts", 11.0);
    progress_end_at(&p, 12.0);
    fflush(m.f);
    CHECKF(strcmp(m.buf, "vulkan:0 self-test: 11 s: vulkan:0: attention\n") == 0, "%s", m.buf);
    mem_close(&m);

    /* the bar shows each step at once, however soon after the last (a step skipped would
     * stand on the screen for the whole next one), with no time (it would stand still),
     * and is cleared at the end */
    mem_open(&m);
    progress_begin_at(&p, KN_PROGRESS_BAR, m.f, "vulkan:0 self-test", NULL, 0, 0.0);
    progress_update_at(&p, 0, "vulkan:0: attention", 0.01);
    progress_update_at(&p, 0, "vulkan:0: experts", 0.02);
    progress_end_at(&p, 3.0);
    fflush(m.f);
    CHECKF(strcmp(m.buf, "\rvulkan:0 self-test  vulkan:0: attention\033[K"
                         "\rvulkan:0 self-test  vulkan:0: experts\033[K\r\033[K") == 0, "%s", m.buf);
    mem_close(&m);
}

/* The bar: nothing before KN_PROGRESS_BAR_DELAY_S, then at most KN_PROGRESS_BAR_HZ
 * redraws a second however many updates, each cut to the width and erasing what a
 * longer line left, and one newline at the end after a last redraw at the final state. */
static void test_bar(void)
{
    struct mem m;
    mem_open(&m);
    struct kn_progress p;
    progress_begin_at(&p, KN_PROGRESS_BAR, m.f, "synth", "bytes", 2000ull << 20, 0.0);
    CHECK(p.cols == 80); /* a memory stream is no terminal */
    int draws_before = 0;
    for (int i = 1; i <= 2000; i++) {
        progress_update_at(&p, (uint64_t)i << 20,
                           "blk.12.ffn_down.weight, a long step name that the width cuts off", 0.001 * i);
        if (i == 499) {
            fflush(m.f);
            draws_before = m.len ? count(m.buf, "\r") : 0;
        }
    }
    progress_end_at(&p, 2.0);
    fflush(m.f);
    CHECK(draws_before == 0);
    int draws = count(m.buf, "\r");
    /* 1.5 s of redraws at 10 a second, the first at 0.5 s, and the end's */
    CHECKF(draws >= 14 && draws <= (int)(1.5 * KN_PROGRESS_BAR_HZ) + 2, "%d redraws", draws);
    CHECK(count(m.buf, "\n") == 1 && m.buf[m.len - 1] == '\n');
    CHECK(count(m.buf, "\033[K") == draws);
    /* every redraw fits the width less one column */
    for (char *s = m.buf; (s = strchr(s, '\r')); s++) {
        char *e = strstr(s, "\033[K");
        CHECKF(e && e - s - 1 <= 79, "a redraw of %d columns", e ? (int)(e - s - 1) : -1);
    }
    CHECKF(strstr(m.buf, "\rsynth [####################] 100% 2000/2000 MiB, 2.0 s\033[K\n") != NULL,
           "%s", m.buf);
    mem_close(&m);

    /* one redraw's text: the bar, the state, the step */
    mem_open(&m);
    progress_begin_at(&p, KN_PROGRESS_BAR, m.f, "synth", "bytes", 2000ull << 20, 0.0);
    progress_update_at(&p, 1000ull << 20, "blk.1", 1.0);
    fflush(m.f);
    CHECKF(strcmp(m.buf, "\rsynth [##########----------]  50% 1000/2000 MiB, 1.0 s, about 1.0 s "
                         "left  blk.1\033[K") == 0, "%s", m.buf);
    mem_close(&m);

    /* quick work leaves no line */
    mem_open(&m);
    progress_begin_at(&p, KN_PROGRESS_BAR, m.f, "synth", "bytes", 100, 0.0);
    for (int i = 1; i <= 100; i++)
        progress_update_at(&p, (uint64_t)i, NULL, 0.004 * i);
    progress_end_at(&p, 0.41);
    fflush(m.f);
    CHECK(m.len == 0);
    mem_close(&m);
}

/* A note clears the bar's line and stands on its own; the next update redraws at once. */
static void test_note(void)
{
    struct mem m;
    mem_open(&m);
    struct kn_progress p;
    progress_begin_at(&p, KN_PROGRESS_BAR, m.f, "rerun", "tokens", 10, 0.0);
    progress_update_at(&p, 1, "prefill", 0.6);
    kn_progress_note(&p, "a notice %d", 7);
    progress_update_at(&p, 2, "generating", 0.61);
    fflush(m.f);
    CHECKF(strstr(m.buf, "\r\033[Ka notice 7\n\rrerun [####") != NULL, "%s", m.buf);
    mem_close(&m);

    /* off: nothing at all, notes included */
    mem_open(&m);
    progress_begin_at(&p, KN_PROGRESS_OFF, m.f, "rerun", "tokens", 10, 0.0);
    kn_progress_note(&p, "a notice");
    progress_update_at(&p, 5, "x", 20.0);
    progress_end_at(&p, 30.0);
    fflush(m.f);
    CHECK(m.len == 0);
    mem_close(&m);
}

/* kn_progress_stage names the step on the thread's attached reporter, and on none once
 * it is detached. */
static void test_stage(void)
{
    struct mem m;
    mem_open(&m);
    struct kn_progress p;
    kn_progress_begin(&p, KN_PROGRESS_LINES, m.f, "cuda:0 self-test", NULL, 0);
    kn_progress_stage("not attached");
    CHECK(p.detail[0] == 0);
    kn_progress_attach(&p);
    kn_progress_stage("%s: attention", "cuda:0");
    CHECK_STR(p.detail, "cuda:0: attention");
    kn_progress_attach(NULL);
    kn_progress_stage("detached");
    CHECK_STR(p.detail, "cuda:0: attention");
    kn_progress_end(&p);
    mem_close(&m);

    /* other text on stderr: the attached bar's line is cleared first, and the next
     * update draws it again */
    mem_open(&m);
    progress_begin_at(&p, KN_PROGRESS_BAR, m.f, "verify-receipt", NULL, 0, 0.0);
    kn_progress_interrupt(); /* none attached: nothing */
    kn_progress_attach(&p);
    progress_update_at(&p, 0, "loading the model", 0.1);
    kn_progress_interrupt();
    kn_progress_interrupt(); /* nothing on the screen now */
    fputs("a note\n", m.f);
    progress_update_at(&p, 0, "loading the model", 0.11);
    kn_progress_attach(NULL);
    fflush(m.f);
    CHECKF(strcmp(m.buf, "\rverify-receipt  loading the model\033[K\r\033[Ka note\n"
                         "\rverify-receipt  loading the model\033[K") == 0, "%s", m.buf);
    mem_close(&m);
}

int main(void)
{
    test_lines_quarters();
    test_lines_slow();
    test_lines_steps();
    test_bar();
    test_note();
    test_stage();
    CHECK_DONE();
}
