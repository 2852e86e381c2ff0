/* vk_ops_table.c: the ops the Vulkan backend has (vk_ops.h). One line per op whose
 * shader and host function exist, `ops-><op> = vk_op_<op>;`; an op left out stays NULL
 * and model_open refuses to put a layer that needs it on a Vulkan device. */
#include "vk_ops.h"

void vk_ops_fill(struct kern_backend_ops *ops)
{
    (void)ops;
}
