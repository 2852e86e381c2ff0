/* test_kern_pool.c: the thread pool runs every share of a job exactly once, returns only
 * when all are done (also after its workers fell asleep), and splits work deterministically. */
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
