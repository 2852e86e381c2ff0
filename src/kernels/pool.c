/* pool.c: the forward pass's thread pool. Workers spin briefly on a generation counter
 * (the gap between two kernels of one forward pass is microseconds), then sleep on a
 * condition variable so an idle server costs no CPU. */
#include "kernels.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Spin iterations before a worker sleeps (about 100-300 us), and before the caller
 * starts yielding its core while it waits for the others. */
#define POOL_SPIN 4096
#define POOL_SPIN_DONE 256

struct kern_pool {
    int n;
    pthread_t *threads;
    kern_task_fn fn;
    void *ctx;
    _Atomic uint64_t gen;   /* incremented for each job; workers run when it changes */
    _Atomic int pending;    /* workers still running the current job */
    _Atomic int sleepers;   /* workers waiting (or about to wait) on cv */
    _Atomic bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

struct worker_arg {
    struct kern_pool *pool;
    int ith;
};

static void *worker_main(void *p)
{
    struct worker_arg wa = *(struct worker_arg *)p;
    free(p);
    struct kern_pool *pool = wa.pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = atomic_load_explicit(&pool->gen, memory_order_acquire);
        for (int i = 0; g == seen && i < POOL_SPIN; i++) {
            cpu_relax();
            g = atomic_load_explicit(&pool->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleepers, 1);
            while ((g = atomic_load(&pool->gen)) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop))
            return NULL;
        seen = g;
        pool->fn(pool->ctx, wa.ith, pool->n);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_release);
    }
}

enum kn_status kern_pool_create(int n_threads, struct kern_pool **out, struct kn_err *err)
{
    *out = NULL;
    if (n_threads < 1 || n_threads > 256)
        return kn_fail(err, KN_E_ARG, "--threads %d is out of range; use 1 to 256", n_threads);
    struct kern_pool *pool = kn_calloc(1, sizeof *pool, err);
    if (!pool)
        return KN_E_NOMEM;
    pool->n = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    pool->threads = kn_calloc((size_t)n_threads, sizeof *pool->threads, err);
    if (!pool->threads) {
        kern_pool_free(pool);
        return KN_E_NOMEM;
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = kn_malloc(sizeof *wa, err);
        if (!wa) {
            pool->n = i; /* join the ones started */
            kern_pool_free(pool);
            return KN_E_NOMEM;
        }
        wa->pool = pool;
        wa->ith = i;
        if (pthread_create(&pool->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            pool->n = i;
            kern_pool_free(pool);
            return kn_fail(err, KN_E_NOMEM,
                           "could not start worker thread %d of %d; use fewer --threads", i,
                           n_threads);
        }
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
    atomic_fetch_add(&pool->gen, 1);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->cv);
    pthread_mutex_destroy(&pool->mu);
    free(pool->threads);
    free(pool);
}

int kern_pool_threads(const struct kern_pool *pool)
{
    return pool ? pool->n : 1;
}

void kern_pool_run(struct kern_pool *pool, kern_task_fn fn, void *ctx)
{
    if (!pool || pool->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store_explicit(&pool->pending, pool->n - 1, memory_order_relaxed);
    /* seq_cst: either a worker about to sleep sees the new generation, or we see it
     * counted in sleepers and wake it under the mutex it checks the counter with. */
    atomic_fetch_add(&pool->gen, 1);
    if (atomic_load(&pool->sleepers) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    fn(ctx, 0, pool->n);
    for (int i = 0; atomic_load_explicit(&pool->pending, memory_order_acquire) > 0; i++) {
        if (i < POOL_SPIN_DONE)
            cpu_relax();
        else
            sched_yield(); /* let a descheduled worker have this core */
    }
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
