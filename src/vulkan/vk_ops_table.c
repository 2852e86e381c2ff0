/* vk_ops_table.c: the ops the Vulkan backend has (vk_ops.h). One line per op whose
 * shader and host function exist, `ops-><op> = vk_op_<op>;`; an op left out stays NULL
 * and model_open refuses to put a layer that needs it on a Vulkan device. The soft-capped
 * attention computes kern_tanhf in double: a device without shaderFloat64 lacks it (and
 * the self-test clears it where the device's double math is not exact). */
#include "vk_ops_core.h"
#include "vk_ops_moe.h"

void vk_ops_fill(struct kern_backend_ops *ops, const struct vkr_info *dev)
{
    ops->embed = vk_op_embed;
    ops->rope_table = vk_op_rope_table;
    ops->rope = vk_op_rope;
    ops->rmsnorm = vk_op_rmsnorm;
    ops->matmul = vk_op_matmul;
    ops->add_rows = vk_op_add_rows;
    ops->add = vk_op_add;
    ops->scale = vk_op_scale;
    ops->glu = vk_op_glu;
    ops->gather = vk_op_gather;
    ops->kv_store = vk_op_kv_store;
    ops->attention = vk_op_attention;
    ops->logits = vk_op_logits;
    ops->shortconv = vk_op_shortconv;
    ops->moe_route = vk_op_moe_route;
    ops->moe_ffn = vk_op_moe_ffn;
    if (dev->float64)
        ops->attention_softcap = vk_op_attention; /* the batch's softcap > 0 */
    ops->attention_sinks = vk_op_attention;   /* the batch's sinks */
    ops->moe_ffn_oai = vk_op_moe_ffn;         /* f's act and expert biases */
    ops->layernorm = vk_op_layernorm;
    ops->gelu = vk_op_gelu;
}
