/* test_kern_pool.c: the thread pool runs every share of a job, and every unit of a range
 * job, exactly once, returns only when all are done (also after its workers fell asleep
 * or while one of them is slow), and splits work deterministically. */
#include "check.h"
#include "kernels/kernels.h"

#include <stdatomic.h>
#include <time.h>

struct job {
    _Atomic int calls[8];
    _Atomic int total;
    _Atomic int nth_seen;
};

static void job_fn(void *p, int ith, int nth)
{
    struct job *j = p;
    atomic_fetch_add(&j->calls[ith], 1);
    atomic_fetch_add(&j->total, 1);
    atomic_store(&j->nth_seen, nth);
}

/* A range job's record: how often each unit ran, and which calls took which units. */
#define RANGE_MAX 5000
struct range_job {
    _Atomic unsigned char done[RANGE_MAX];
    _Atomic int calls;
    int64_t slow_lo, slow_hi; /* units that take a while (a thread slowed down) */
};

static void range_fn(void *p, int64_t u0, int64_t u1)
{
    struct range_job *j = p;
    atomic_fetch_add(&j->calls, 1);
    for (int64_t u = u0; u < u1; u++) {
        atomic_fetch_add(&j->done[u], 1);
        if (u >= j->slow_lo && u < j->slow_hi)
            for (volatile int spin = 0; spin < 20000; spin++) {
            }
    }
}

/* Runs n_units of a range job on p (units in [slow_lo, slow_hi) slow) and checks that
 * each ran exactly once. */
static bool range_once(struct kern_pool *p, int64_t n_units, int64_t slow_lo, int64_t slow_hi)
{
    static struct range_job j;
    memset(&j, 0, sizeof j);
    j.slow_lo = slow_lo;
    j.slow_hi = slow_hi;
    kern_pool_run_range(p, range_fn, &j, n_units);
    for (int64_t u = 0; u < RANGE_MAX; u++)
        if (atomic_load(&j.done[u]) != (u < n_units ? 1 : 0))
            return false;
    return n_units == 0 || atomic_load(&j.calls) >= 1;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

int main(void)
{
    struct kn_err err;
    struct kern_pool *p;
    CHECK(kern_pool_create(0, &p, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "--threads") != NULL);
    CHECK(kern_pool_threads(NULL) == 1);
    for (int n = 1; n <= 4; n++) {
        CHECK(kern_pool_create(n, &p, &err) == KN_OK);
        CHECK(kern_pool_threads(p) == n);
        bool ok = true;
        for (int rep = 0; rep < 2000; rep++) {
            struct job j = {0};
            kern_pool_run(p, job_fn, &j);
            /* Everything done on return: every thread exactly once. */
            if (atomic_load(&j.total) != n || atomic_load(&j.nth_seen) != n)
                ok = false;
            for (int i = 0; i < n; i++)
                if (atomic_load(&j.calls[i]) != 1)
                    ok = false;
            if (rep % 500 == 0)
                sleep_ms(20); /* let the workers fall asleep, then wake them */
        }
        CHECKF(ok, "threads=%d", n);
        kern_pool_free(p);
    }
    /* More shares than threads: each share exactly once, whichever thread takes it. */
    for (int n = 1; n <= 3; n++) {
        CHECK(kern_pool_create(n, &p, &err) == KN_OK);
        bool ok = true;
        for (int rep = 0; rep < 500; rep++) {
            int shares = 1 + rep % 8;
            struct job j = {0};
            kern_pool_run_shares(p, job_fn, &j, shares);
            if (atomic_load(&j.total) != shares || atomic_load(&j.nth_seen) != shares)
                ok = false;
            for (int i = 0; i < shares; i++)
                if (atomic_load(&j.calls[i]) != 1)
                    ok = false;
            if (rep == 250)
                sleep_ms(20);
        }
        CHECKF(ok, "threads=%d", n);
        kern_pool_free(p);
    }
    /* Range jobs: every unit exactly once, for any length (none, fewer than the threads,
     * many), with the caller's or a worker's part slow so that the others steal from it,
     * and after the workers fell asleep. */
    static const int64_t lens[] = {0, 1, 2, 3, 7, 16, 100, 1001, RANGE_MAX};
    for (int n = 1; n <= 4; n++) {
        CHECK(kern_pool_create(n, &p, &err) == KN_OK);
        bool ok = true;
        for (int rep = 0; rep < 60 && ok; rep++) {
            int64_t len = lens[rep % (int)(sizeof lens / sizeof lens[0])];
            int64_t slot_len = len / n; /* about one thread's part */
            int64_t slow_lo = rep % 3 == 0 ? 0 : rep % 3 == 1 ? len - slot_len : len;
            ok = range_once(p, len, slow_lo, slow_lo + (rep % 3 == 2 ? 0 : slot_len));
            if (rep == 30)
                sleep_ms(20);
        }
        CHECKF(ok, "threads=%d", n);
        kern_pool_free(p);
    }
    CHECK(range_once(NULL, 777, 0, 0));
    /* A share job after a range job (and the reverse) on the same pool. */
    CHECK(kern_pool_create(3, &p, &err) == KN_OK);
    for (int rep = 0; rep < 50; rep++) {
        struct job sj = {0};
        kern_pool_run_shares(p, job_fn, &sj, 5);
        CHECK(atomic_load(&sj.total) == 5);
        CHECK(range_once(p, 50 + rep, 0, 10));
    }
    kern_pool_free(p);

    struct job j = {0};
    kern_pool_run(NULL, job_fn, &j);
    CHECK(atomic_load(&j.total) == 1 && atomic_load(&j.nth_seen) == 1);

    /* kern_split: contiguous, covering, aligned, the same every time. */
    for (int64_t n = 0; n < 200; n += 7) {
        for (int nth = 1; nth <= 5; nth++) {
            int64_t prev = 0;
            for (int i = 0; i < nth; i++) {
                int64_t lo, hi, lo2, hi2;
                kern_split(n, 16, i, nth, &lo, &hi);
                kern_split(n, 16, i, nth, &lo2, &hi2);
                CHECK(lo == lo2 && hi == hi2);
                CHECK(lo == prev && hi >= lo);
                CHECK((lo % 16 == 0 || lo == n) && (hi % 16 == 0 || hi == n));
                prev = hi;
            }
            CHECK(prev == n);
        }
    }
    int64_t lo, hi;
    kern_split(100, 16, 0, 2, &lo, &hi);
    CHECK(lo == 0 && hi == 64);
    kern_split(100, 16, 1, 2, &lo, &hi);
    CHECK(lo == 64 && hi == 100);
    CHECK_DONE();
}
