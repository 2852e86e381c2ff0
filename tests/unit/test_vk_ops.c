/* test_vk_ops.c: the Vulkan backend's op table (src/vulkan/vk_ops_core.c) against the CPU
 * backend through the device seam: kern_backend_check (every op on crafted inputs with
 * negative zeros, denormals and large values, every weight type, embedding tables, both
 * RoPE modes with YaRN, f32 and f16 caches, causal and windowed attention over two
 * sequences and two passes) must find every output byte equal; and the table has every
 * op. Where the driver's fma is not fused (lavapipe), the shaders' own fma builds are
 * what makes them agree: forcing the driver's fma must then fail the check. Skips (exit
 * 77) with the reason when the build has no Vulkan or there is no device. */
#include <stddef.h>

#include "check.h"
#include "kernels/backend.h"
#include "vulkan/vk_backend.h"
#include "vulkan/vk_kern.h"
#include "vulkan/vk_ops.h"

int main(void)
{
    struct kn_err err = {0};
    struct kern_backend *be = vk_backend_open(0, &err);
    if (!be) {
        printf("skipped: no Vulkan device: %s\n", err.msg);
        return 77;
    }
    const struct vkr_info *in = vk_backend_info(be);
    printf("device: %s (%s), numerics %s\n", in->name, in->driver_info, be->ops->numerics(be));
    /* every op of the table is there, except the ones backend.h lets a device lack
     * (kern_backend_has_moe, kern_backend_has_shortconv, kern_backend_has_softcap:
     * model_open refuses those layers by
     * name) */
    const void *const *slot = (const void *const *)be->ops;
    size_t n_slots = sizeof(struct kern_backend_ops) / sizeof(void *);
    const size_t moe_route = offsetof(struct kern_backend_ops, moe_route) / sizeof(void *);
    const size_t moe_ffn = offsetof(struct kern_backend_ops, moe_ffn) / sizeof(void *);
    const size_t conv = offsetof(struct kern_backend_ops, shortconv) / sizeof(void *);
    const size_t capped = offsetof(struct kern_backend_ops, attention_softcap) / sizeof(void *);
    for (size_t i = 0; i < n_slots; i++)
        CHECKF(slot[i] != NULL || i == moe_route || i == moe_ffn || i == conv || i == capped,
               "op %zu of struct kern_backend_ops is NULL", i);
    if (!kern_backend_has_softcap(be))
        printf("no soft-capped attention on this backend yet: gemma2 layers stay on the CPU\n");
    if (!kern_backend_has_moe(be))
        printf("no MoE ops on this backend yet: mixture-of-experts layers stay on the CPU\n");
    if (!kern_backend_has_shortconv(be))
        printf("no short convolution on this backend yet: lfm2's conv layers stay on the CPU\n");
    struct kern_pool *pool = NULL;
    CHECK(kern_pool_create(2, &pool, &err) == KN_OK);
    enum kn_status st = kern_backend_check(be, pool, &err);
    CHECKF(st == KN_OK, "kern_backend_check: %s", err.msg);
    struct vkr *rt = ((struct vk_backend *)be)->rt;
    enum vkk_fma mode;
    CHECKF(vkk_fma_probe(rt, &mode, &err) == KN_OK, "%s", err.msg);
    if (mode == VKK_FMA_F64) {
        vkk_fma_set(rt, VKK_FMA_NATIVE);
        st = kern_backend_check(be, pool, &err);
        printf("with the driver's unfused fma: %s\n", err.msg);
        CHECK(st == KN_E_MISMATCH);
        vkk_fma_set(rt, mode);
    }
    kern_pool_free(pool);
    vk_backend_close(be);
    CHECK_DONE();
}
