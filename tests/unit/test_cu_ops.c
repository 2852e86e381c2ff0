/* test_cu_ops.c: the CUDA backend's ops against the CPU backend through the device seam
 * on a real NVIDIA GPU: the start-up self-test (the arithmetic probes and
 * kern_backend_check) must find the device canonical-1, the table must have every op but
 * the MoE pair, and kern_backend_check must pass again with a two-thread CPU pool (every
 * op on crafted inputs with negative zeros, denormals and large values, every weight
 * type, both RoPE modes with YaRN, f32 and f16 caches, causal, windowed and soft-capped
 * attention over two sequences and two passes). Skips (exit 77) with the reason where
 * there is no CUDA device or the build has no kernels. */
#include <stddef.h>

#include "check.h"
#include "cuda/cu_backend.h"
#include "kernels/backend.h"

int main(void)
{
    struct kn_err err = {0};
    if (cu_device_count(&err) == 0) {
        printf("skipped: %s\n", err.msg);
        return 77;
    }
    struct kern_backend *be = cu_backend_open(0, &err);
    CHECKF(be != NULL, "cuda:0: %s", err.msg);
    if (!be)
        CHECK_DONE();
    const struct cu_info *in = cu_backend_info(be);
    const struct cu_selftest *t = cu_backend_selftest(be);
    printf("device: %s (sm%d%d, %d SMs), class %s, numerics %s\nself-test: %s\n", in->name,
           in->cc_major, in->cc_minor, in->sm_count, cu_backend_class(be), be->ops->numerics(be),
           t->report);
    CHECKF(t->canonical, "the self-test did not find canonical-1: %s", t->report);
    CHECK(kern_backend_missing_op(be) == NULL);
    CHECK(kern_backend_has_softcap(be) && kern_backend_has_shortconv(be));
    struct kern_pool *pool = NULL;
    CHECK(kern_pool_create(2, &pool, &err) == KN_OK);
    enum kn_status st = kern_backend_check(be, pool, &err);
    CHECKF(st == KN_OK, "kern_backend_check: %s", err.msg);
    kern_pool_free(pool);
    cu_backend_close(be);
    CHECK_DONE();
}
