/* pool.c: the forward pass's thread pool. A job is a number of shares that the caller
 * and the workers take one at a time from a shared counter, or a range of units each
 * thread starts on its own part of (stealing from the others when done), so a thread
 * the OS leaves waiting (a busy machine) costs the job its help, never a stall. Workers spin briefly
 * on the job word (the gap between two kernels of one forward pass is microseconds),
 * then sleep on a condition variable so an idle server costs no CPU. */
#include "kernels.h"

#include <pthread.h>
#include <sched.h>
#include <assert.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* A worker spins this long on the job word before it sleeps (checking the clock every
 * POOL_SPIN pauses): long enough to stay awake between the decode steps of `kinetic run`
 * (sampling a 262k vocabulary takes a millisecond), since waking a sleeping vCPU takes
 * tens of microseconds; short enough that an idle server soon costs nothing. */
#define POOL_SPIN_SECONDS 0.002
/* Pauses between clock checks of a spinning worker, and pauses before the caller
 * starts yielding its core while it waits for the workers that joined a job: their
 * last share is tens of microseconds away, and a yield on a busy machine can hand the
 * core to another process for a whole time slice (measured: median decode step of
 * Gemma 3 270M 12.8 ms with 8192, 36 ms with 256, under load 10 on 2 cores). */
#define POOL_SPIN 4096
#define POOL_SPIN_DONE 8192

/* The job word: the job's generation (high 32 bits), a closed flag, and the number of
 * workers that joined it. A worker may join only while the job is open; the caller
 * closes it once every share is taken and then waits for the joined workers alone, so
 * a worker the OS has not run yet (a busy machine) never holds the caller up. */
#define JOB_CLOSED ((uint64_t)1 << 31)
#define JOB_COUNT ((uint64_t)JOB_CLOSED - 1)
#define JOB_GEN(j) ((uint32_t)((j) >> 32))

/* A range job's unit range of one thread slot: front (low 32 bits) and back (high),
 * on its own cache line, so the owner's takes never contend with the other threads
 * until one of them comes to steal. */
struct pool_range {
    _Alignas(64) _Atomic uint64_t fb;
};

struct kern_pool;
/* A worker's start argument: its pool and its range slot, 1..n-1 (the caller is 0). */
struct pool_worker {
    struct kern_pool *pool;
    int slot;
};

struct kern_pool {
    int n;
    pthread_t *threads;
    struct pool_worker *workers; /* (n) */
    kern_task_fn fn;
    void *ctx;
    int n_shares;
    kern_range_fn range_fn;     /* non-NULL: a range job (kern_pool_run_range) */
    struct pool_range *ranges;  /* (n): slot i's part of a range job */
    uint32_t gen;           /* the caller's copy of the current generation */
    _Atomic int next;       /* the next share to hand out */
    _Atomic uint64_t job;   /* see JOB_* */
    _Atomic int sleepers;   /* workers waiting (or about to wait) on cv */
    _Atomic bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* Takes shares until none is left. Which thread runs a share never changes its bits:
 * a share's outputs are computed the same way everywhere (docs/numerics.md). */
static void take_shares(struct kern_pool *pool)
{
    const int n = pool->n_shares;
    for (;;) {
        int i = atomic_fetch_add_explicit(&pool->next, 1, memory_order_relaxed);
        if (i >= n)
            return;
        pool->fn(pool->ctx, i, n);
    }
}

#define RANGE_F(w) ((int64_t)(uint32_t)(w))
#define RANGE_B(w) ((int64_t)((w) >> 32))
#define RANGE_W(f, b) ((uint64_t)(uint32_t)(b) << 32 | (uint32_t)(f))

/* A range job on thread slot `slot`: takes chunks from the front of the slot's own
 * range, each a quarter of what is left there (one unit at least), so a thread streams
 * through one contiguous part of the weights; when that is empty, it steals the back
 * half of the largest range left and works through it the same way. Every change of a
 * range is a compare-and-swap of its (front, back) word, except the store that gives an
 * empty range the half its owner stole: a slot has one thread, and thieves leave empty
 * ranges alone, so nothing else writes it then. */
static void take_range(struct kern_pool *pool, int slot)
{
    struct pool_range *own = &pool->ranges[slot];
    for (;;) {
        uint64_t w = atomic_load_explicit(&own->fb, memory_order_acquire);
        int64_t f = RANGE_F(w), b = RANGE_B(w);
        if (f < b) {
            int64_t n = (b - f + 3) / 4;
            if (atomic_compare_exchange_weak_explicit(&own->fb, &w, RANGE_W(f + n, b),
                                                      memory_order_acq_rel, memory_order_acquire))
                pool->range_fn(pool->ctx, f, f + n);
            continue;
        }
        /* Own range empty: steal the back half of the largest other one. */
        int victim = -1;
        int64_t most = 0;
        for (int i = 0; i < pool->n; i++) {
            uint64_t v = atomic_load_explicit(&pool->ranges[i].fb, memory_order_acquire);
            if (i != slot && RANGE_B(v) - RANGE_F(v) > most) {
                most = RANGE_B(v) - RANGE_F(v);
                victim = i;
            }
        }
        if (victim < 0)
            return;
        uint64_t v = atomic_load_explicit(&pool->ranges[victim].fb, memory_order_acquire);
        int64_t vf = RANGE_F(v), vb = RANGE_B(v);
        if (vf >= vb)
            continue;
        int64_t n = (vb - vf + 1) / 2;
        if (atomic_compare_exchange_strong_explicit(&pool->ranges[victim].fb, &v,
                                                    RANGE_W(vf, vb - n), memory_order_acq_rel,
                                                    memory_order_acquire))
            atomic_store_explicit(&own->fb, RANGE_W(vb - n, vb), memory_order_release);
    }
}

static void run_job(struct kern_pool *pool, int slot)
{
    if (pool->range_fn)
        take_range(pool, slot);
    else
        take_shares(pool);
}

static void *worker_main(void *p)
{
    struct kern_pool *pool = ((struct pool_worker *)p)->pool;
    const int slot = ((struct pool_worker *)p)->slot;
    uint32_t seen = 0;
    for (;;) {
        uint64_t j = atomic_load_explicit(&pool->job, memory_order_acquire);
        double spin_end = 0;
        for (int i = 1; JOB_GEN(j) == seen; i++) {
            cpu_relax();
            j = atomic_load_explicit(&pool->job, memory_order_acquire);
            if (i % POOL_SPIN == 0) {
                double t = kn_now();
                if (spin_end == 0)
                    spin_end = t + POOL_SPIN_SECONDS;
                else if (t > spin_end)
                    break;
            }
        }
        if (JOB_GEN(j) == seen) {
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleepers, 1);
            while (JOB_GEN(j = atomic_load(&pool->job)) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop))
            return NULL;
        seen = JOB_GEN(j);
        /* Join the job unless the caller already closed it (it took every share). */
        bool joined = false;
        while (JOB_GEN(j) == seen && !(j & JOB_CLOSED)) {
            if (atomic_compare_exchange_weak_explicit(&pool->job, &j, j + 1, memory_order_acquire,
                                                      memory_order_acquire)) {
                joined = true;
                break;
            }
        }
        if (!joined)
            continue;
        run_job(pool, slot);
        atomic_fetch_sub_explicit(&pool->job, 1, memory_order_release);
    }
}

enum kn_status kern_pool_create(int n_threads, struct kern_pool **out, struct kn_err *err)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > KERN_POOL_MAX_THREADS)
        return kn_fail(err, KN_E_ARG, "--threads %d is out of range; use 1 to %d", n_threads,
                       KERN_POOL_MAX_THREADS);
    struct kern_pool *pool = kn_calloc(1, sizeof *pool, err);
    if (!pool)
        return KN_E_NOMEM;
    pool->n = 1; /* threads running so far: kern_pool_free joins those */
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    pool->threads = kn_calloc((size_t)n_threads, sizeof *pool->threads, err);
    pool->workers = pool->threads ? kn_calloc((size_t)n_threads, sizeof *pool->workers, err) : NULL;
    if (pool->workers &&
        posix_memalign((void **)&pool->ranges, 64, (size_t)n_threads * sizeof *pool->ranges) != 0) {
        pool->ranges = NULL;
        kn_fail(err, KN_E_NOMEM, "out of memory for a pool of %d threads", n_threads);
    }
    if (!pool->ranges) {
        kern_pool_free(pool);
        return KN_E_NOMEM;
    }
    for (int i = 1; i < n_threads; i++) {
        pool->workers[i] = (struct pool_worker){pool, i};
        if (pthread_create(&pool->threads[i], NULL, worker_main, &pool->workers[i]) != 0) {
            kern_pool_free(pool);
            return kn_fail(err, KN_E_NOMEM,
                           "could not start worker thread %d of %d; use fewer --threads", i,
                           n_threads);
        }
        pool->n = i + 1;
    }
    *out = pool;
    return KN_OK;
}

void kern_pool_free(struct kern_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, true);
    pool->gen++;
    atomic_store(&pool->job, (uint64_t)pool->gen << 32 | JOB_CLOSED);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool->threads);
    free(pool->workers);
    free(pool->ranges);
    free(pool);
}

int kern_pool_threads(const struct kern_pool *pool)
{
    return pool ? pool->n : 1;
}

/* Starts the job set up in pool, runs the caller's part (slot 0) and returns when
 * every thread that joined it is done. */
static void run_published(struct kern_pool *pool)
{
    /* seq_cst: publishes fn/ctx/next with the new generation, and either a worker about
     * to sleep sees the generation, or we see it counted in sleepers and wake it under
     * the mutex it checks the generation with. */
    pool->gen++;
    atomic_store(&pool->job, (uint64_t)pool->gen << 32);
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    run_job(pool, 0);
    /* Every share (unit) is taken: close the job, then wait for the workers that joined it. */
    uint64_t j = atomic_fetch_or_explicit(&pool->job, JOB_CLOSED, memory_order_acq_rel);
    for (int i = 0; (j & JOB_COUNT) != 0; i++) {
        if (i < POOL_SPIN_DONE)
            cpu_relax();
        else
            sched_yield(); /* let a descheduled worker have this core */
        j = atomic_load_explicit(&pool->job, memory_order_acquire);
    }
}

void kern_pool_run_shares(struct kern_pool *pool, kern_task_fn fn, void *ctx, int n_shares)
{
    assert(n_shares >= 1);
    if (!pool || pool->n == 1 || n_shares == 1) {
        for (int i = 0; i < n_shares; i++)
            fn(ctx, i, n_shares);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    pool->n_shares = n_shares;
    pool->range_fn = NULL;
    atomic_store_explicit(&pool->next, 0, memory_order_relaxed);
    run_published(pool);
}

void kern_pool_run_range(struct kern_pool *pool, kern_range_fn fn, void *ctx, int64_t n_units)
{
    assert(n_units >= 0 && n_units < ((int64_t)1 << 31));
    if (!pool || pool->n == 1 || n_units <= 1) {
        if (n_units > 0)
            fn(ctx, 0, n_units);
        return;
    }
    for (int i = 0; i < pool->n; i++) {
        int64_t lo, hi;
        kern_split(n_units, 1, i, pool->n, &lo, &hi);
        atomic_store_explicit(&pool->ranges[i].fb, RANGE_W(lo, hi), memory_order_relaxed);
    }
    pool->range_fn = fn;
    pool->ctx = ctx;
    run_published(pool);
}

void kern_pool_run(struct kern_pool *pool, kern_task_fn fn, void *ctx)
{
    kern_pool_run_shares(pool, fn, ctx, kern_pool_threads(pool));
}

void kern_split(int64_t n, int64_t align, int ith, int nth, int64_t *lo, int64_t *hi)
{
    if (align < 1)
        align = 1;
    int64_t units = (n + align - 1) / align;
    int64_t per = units / nth, extra = units % nth;
    /* The first `extra` threads take one unit more. */
    int64_t u0 = ith * per + (ith < extra ? ith : extra);
    int64_t u1 = u0 + per + (ith < extra ? 1 : 0);
    int64_t a = u0 * align, b = u1 * align;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}
