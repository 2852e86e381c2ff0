/* vk_ops_moe.h: the Vulkan backend's mixture-of-experts ops (vk_ops_moe.c), with their
 * ops' signatures from src/kernels/backend.h; vk_ops_fill puts them in the table. */
#ifndef KN_VULKAN_VK_OPS_MOE_H
#define KN_VULKAN_VK_OPS_MOE_H

#include "vk_ops.h"

void vk_op_moe_route(struct kern_stream *s, const struct kern_moe_gate *g,
                     const struct kern_buf *logits, const struct kern_buf *bias, int64_t T,
                     struct kern_buf *ids, struct kern_buf *w);
void vk_op_moe_ffn(struct kern_stream *s, const struct kern_moe_ffn *f, const struct kern_buf *x,
                   const struct kern_buf *ids, const struct kern_buf *w, int64_t T,
                   struct kern_buf *y);

#endif
