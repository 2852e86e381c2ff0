/* test_vk_ops.c: the Vulkan backend's op table (src/vulkan/vk_ops_core.c) against the CPU
 * backend through the device seam: kern_backend_check (every op on crafted inputs with
 * negative zeros, denormals and large values, every weight type, embedding tables, both
 * RoPE modes with YaRN, f32, f16 and q8_0 caches, causal and windowed attention over two
 * sequences and two passes) must find every output byte equal; and the table has every
 * op. Where the driver's fma is not fused (lavapipe), the shaders' own fma builds are
 * what makes them agree: forcing the driver's fma must then fail the check; the integer
 * builds of division and sqrt must agree too, and so must the quantized products with
 * and without the int8 dot product builds (where the device has them). Skips (exit
 * 77) with the reason when the build has no Vulkan or there is no device. */
#include <stddef.h>
#include <string.h>

#include "check.h"
#include "kernels/backend.h"
#include "vulkan/vk_backend.h"
#include "vulkan/vk_kern.h"
#include "vulkan/vk_ops.h"

int main(void)
{
    struct kn_err err = {0};
    struct kern_backend *be = vk_backend_open(0, VK_CHECK_FULL, &err);
    if (!be) {
        printf("skipped: no Vulkan device: %s\n", err.msg);
        return 77;
    }
    const struct vkr_info *in = vk_backend_info(be);
    printf("device: %s (%s), numerics %s\n", in->name, in->driver_info, be->ops->numerics(be));
    /* every required op of the table is there (backend.h KERN_BACKEND_OPS); the optional
     * ones it lacks are named, and kern_backend_check leaves them out */
    for (int i = 0; i < KERN_OP_COUNT; i++) {
        const struct kern_op_desc *d = &kern_backend_op_table[i];
        bool has = kern_backend_has_op(be, (enum kern_op)i);
        CHECKF(has || d->optional, "required op %s is NULL on Vulkan", d->name);
        if (!has)
            printf("no op %s on this backend yet: %s run only on the CPU\n", d->name, d->needs);
    }
    CHECK(kern_backend_missing_op(be) == NULL);
    /* what the self-test reports of them is the table's list */
    char lack[256];
    if (kern_backend_missing_optional(be, lack, sizeof lack) > 0)
        CHECKF(strstr(vk_backend_selftest(be)->report, lack) != NULL,
               "the self-test report does not name the missing ops '%s': %s", lack,
               vk_backend_selftest(be)->report);
    printf("self-test: %s\n", vk_backend_selftest(be)->report);
    struct kern_pool *pool = NULL;
    CHECK(kern_pool_create(2, &pool, &err) == KN_OK);
    enum kn_status st = kern_backend_check(be, pool, &err);
    CHECKF(st == KN_OK, "kern_backend_check: %s", err.msg);
    struct vkr *rt = ((struct vk_backend *)be)->rt;
    /* every op with the integer builds of division and sqrt (kn_common.glsl; what a
     * device whose own are not correctly rounded runs): the same bytes */
    const struct vk_selftest *stt = vk_backend_selftest(be);
    vkk_divsqrt_set(rt, (struct vkk_divsqrt){true, true});
    st = kern_backend_check(be, pool, &err);
    CHECKF(st == KN_OK, "kern_backend_check with the integer division and sqrt: %s", err.msg);
    vkk_divsqrt_set(rt, (struct vkk_divsqrt){stt->div_soft, stt->sqrt_soft});
    /* the products with the int8 dot product builds (by default where the device has
     * them, as on lavapipe) and with the scalar ones (or the other way round, under
     * KINETIC_VK_DOT=0): the same bytes */
    bool dot = vkk_dot(rt);
    printf("int8 dot product builds: %s\n", dot ? "on in the check above" : "off in the check above");
    if (vkr_device_info(rt)->int_dot) {
        CHECK(vkk_dot_set(rt, !dot) == !dot && vkk_dot(rt) == !dot);
        st = kern_backend_check(be, pool, &err);
        CHECKF(st == KN_OK, "kern_backend_check with the int8 dot product builds %s: %s",
               dot ? "off" : "on", err.msg);
        vkk_dot_set(rt, dot);
    } else {
        CHECK(!dot && !vkk_dot_set(rt, true)); /* never on where the device has none */
    }
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
