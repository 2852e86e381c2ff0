/* vk_ops_core.h: the Vulkan backend's op functions (vk_ops_core.c), each with its op's
 * signature from src/kernels/backend.h; vk_ops_fill (vk_ops_table.c) puts them in the
 * table. */
#ifndef KN_VULKAN_VK_OPS_CORE_H
#define KN_VULKAN_VK_OPS_CORE_H

#include "vk_kern.h"
#include "vk_ops.h"

void vk_op_embed(struct kern_stream *s, struct kern_buf *x, const struct kern_buf *table,
                 const int32_t *tokens, int64_t T, float scale);
void vk_op_rope_table(struct kern_stream *s, struct kern_buf *tab, const struct kern_rope *rope,
                      const int32_t *pos, int64_t T);
void vk_op_rope(struct kern_stream *s, struct kern_buf *x, const struct kern_buf *tab,
                const struct kern_rope *rope, int64_t T, int64_t H, int64_t D);
void vk_op_rmsnorm(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *x,
                   const struct kern_buf *w, int64_t rows, int64_t n, float eps);
void vk_op_matmul(struct kern_stream *s, int n, const struct kern_buf *const *w,
                  const struct kern_buf *x, int64_t M, struct kern_buf *const *y);
void vk_op_add_rows(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *b, int64_t M,
                    int64_t n);
void vk_op_add(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *a, int64_t n);
void vk_op_scale(struct kern_stream *s, struct kern_buf *y, float v, int64_t n);
void vk_op_glu(struct kern_stream *s, enum kern_glu kind, struct kern_buf *g,
               const struct kern_buf *u, int64_t n);
/* The eltwise op of a gated activation. */
enum vkk_elt vk_glu_op(enum kern_glu kind);
void vk_op_layernorm(struct kern_stream *s, struct kern_buf *y, const struct kern_buf *x,
                     const struct kern_buf *w, const struct kern_buf *b, int64_t rows, int64_t n,
                     float eps);
void vk_op_gelu(struct kern_stream *s, struct kern_buf *x, int64_t n);
void vk_op_gather(struct kern_stream *s, struct kern_buf *dst, const struct kern_buf *src,
                  const int64_t *rows, int64_t n_rows, int64_t n);
void vk_op_kv_store(struct kern_stream *s, const struct kern_attn_batch *b);
void vk_op_attention(struct kern_stream *s, const struct kern_attn_batch *b);
void vk_op_shortconv(struct kern_stream *s, const struct kern_conv_batch *b);
void vk_op_logits(struct kern_stream *s, const struct kern_buf *w, const struct kern_buf *b,
                  const struct kern_buf *x, int64_t M, float *logits);

#endif
