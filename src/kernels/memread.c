/* memread.c: the machine's streaming-read rate, the ceiling of every memory-bound
 * kernel (a decode step reads each weight once). A plain read of a buffer written once,
 * on a pool's threads, each summing its contiguous share; `kinetic bench` and
 * bench_kernels both compare the products against it. */
#include "kernels.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

struct kern_memread {
    const uint64_t *p;
    int64_t n; /* 64-bit words */
    size_t bytes;
    uint64_t sum[KERN_POOL_MAX_THREADS];
};

enum kn_status kern_memread_create(int64_t mib, struct kern_memread **out, struct kn_err *err)
{
    *out = NULL;
    if (mib < 1 || mib > KERN_MEMREAD_MAX_MIB)
        return kn_fail(err, KN_E_ARG, "a streaming read of %lld MiB is out of range; use 1 to %d",
                       (long long)mib, KERN_MEMREAD_MAX_MIB);
    struct kern_memread *r = kn_calloc(1, sizeof *r, err);
    if (!r)
        return KN_E_NOMEM;
    r->bytes = (size_t)mib << 20;
    void *buf;
    /* Transparent huge pages where the system allows, as the packed weights have
     * (matmul.c), so both figures pay the same for their page tables. */
    if (posix_memalign(&buf, (size_t)2 << 20, r->bytes) != 0) {
        free(r);
        return kn_fail(err, KN_E_NOMEM, "out of memory for a %lld MiB streaming-read buffer",
                       (long long)mib);
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(buf, r->bytes, MADV_HUGEPAGE);
#endif
    memset(buf, 1, r->bytes);
    r->p = buf;
    r->n = (int64_t)(r->bytes / 8);
    *out = r;
    return KN_OK;
}

void kern_memread_free(struct kern_memread *r)
{
    if (!r)
        return;
    free((void *)r->p);
    free(r);
}

/* Sums this thread's contiguous share: four independent accumulators, so that the adds
 * never limit the read. */
static void memread_task(void *ctx, int ith, int nth)
{
    struct kern_memread *r = ctx;
    int64_t lo, hi;
    kern_split(r->n, 8, ith, nth, &lo, &hi);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (int64_t i = lo; i + 8 <= hi; i += 8) {
        a += r->p[i] ^ r->p[i + 4];
        b += r->p[i + 1] ^ r->p[i + 5];
        c += r->p[i + 2] ^ r->p[i + 6];
        d += r->p[i + 3] ^ r->p[i + 7];
    }
    r->sum[ith] = a + b + c + d;
}

double kern_memread_run(struct kern_memread *r, struct kern_pool *pool)
{
    double t0 = kn_now();
    kern_pool_run(pool, memread_task, r);
    double s = kn_now() - t0;
    /* Every word holds the same bytes, so each XOR and each sum is zero, which the
     * compiler cannot know: it reads every word. */
    volatile uint64_t sink = 0;
    for (int i = 0; i < kern_pool_threads(pool); i++)
        sink += r->sum[i];
    (void)sink;
    return (double)r->bytes / s / 1e9;
}
