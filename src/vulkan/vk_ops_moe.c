/* vk_ops_moe.c: the Vulkan backend's mixture-of-experts ops (backend.h moe_route, moe_ffn;
 * docs/numerics.md "Mixture of experts"), giving the CPU backend's bits. The routing is
 * one shader; the expert products stay on the device with no read-back: the batch's
 * (token, rank) rows are gathered once (row j = token j / k), quantized once per
 * activation kind, grouped by expert on the device (moe_group.comp, the CPU's counting
 * sort), and each expert's product is one dispatch over its own rows (vkk_matmul_expert
 * reads the count and the row list on the device; row groups past the count return at
 * once). A row's product does not depend on the rows beside it, so the bits are those of
 * the CPU's grouped products. gpt-oss's expert biases (moe_ffn_oai, the same function)
 * are added to each expert's rows the same way (vkk_moe_bias), after the product and
 * before the activation or the weighting, as on the CPU. */
#include "vk_ops_moe.h"

#include "vk_kern.h"
#include "vk_ops_core.h"

#include <stdlib.h>

void vk_op_moe_route(struct kern_stream *s, const struct kern_moe_gate *g,
                     const struct kern_buf *logits, const struct kern_buf *bias, int64_t T,
                     struct kern_buf *ids, struct kern_buf *w)
{
    vkk_moe_route(vk_stream_cmd(s), g, vkk_at(vk_buf(logits), 0),
                  vkk_at(bias ? vk_buf(bias) : NULL, 0), T, vkk_at(vk_buf(ids), 0),
                  vkk_at(vk_buf(w), 0));
}

/* One product of every expert over the rows routed to it: y (R, N) of x (R, K), plus the
 * expert's bias (bias NULL: none). A token routes to an expert at most once: an expert has
 * at most T rows. */
static void moe_product(struct kern_stream *s, const struct kern_buf *const *w,
                        const struct kern_buf *const *bias, int32_t n_expert,
                        const struct vkr_buf *x, const struct vkr_buf *q, int64_t R, int64_t T,
                        const struct vkr_buf *groups, struct vkr_buf *y)
{
    for (int32_t e = 0; e < n_expert; e++) {
        const struct kern_weight *we = w[e]->w;
        vkk_matmul_expert(vk_stream_cmd(s), we, vk_buf(w[e]), vkk_at(x, 0), vkk_at(q, 0), R,
                          vkk_at(y, 0), we->N, groups, n_expert, e, T);
        if (bias && bias[e])
            vkk_moe_bias(vk_stream_cmd(s), vkk_at(y, 0), R, we->N, vkk_at(vk_buf(bias[e]), 0),
                         groups, n_expert, e, T);
    }
}

/* Also moe_ffn_oai: f's act and biases say which. */
void vk_op_moe_ffn(struct kern_stream *s, const struct kern_moe_ffn *f, const struct kern_buf *x,
                   const struct kern_buf *ids, const struct kern_buf *w, int64_t T,
                   struct kern_buf *y)
{
    struct vkr_cmd *c = vk_stream_cmd(s);
    if (T <= 0 || vkr_cmd_failed(c))
        return;
    const struct kern_weight *g0 = f->gate[0]->w, *d0 = f->down[0]->w;
    const int64_t k = f->n_used, R = T * k, E = g0->K, F = g0->N;
    for (int32_t e = 0; e < f->n_expert; e++)
        if (f->gate[e]->w->type != g0->type || f->up[e]->w->type != f->up[0]->w->type ||
            f->down[e]->w->type != d0->type) { /* one quantization per product */
            vkr_cmd_fail(c, KN_E_UNSUPPORTED, "Vulkan moe_ffn: experts of one layer have "
                         "weights of different types");
            return;
        }
    int64_t *rows = malloc((size_t)R * sizeof *rows);
    if (!rows) {
        vkr_cmd_fail(c, KN_E_NOMEM, "Vulkan moe_ffn: out of memory for %lld rows", (long long)R);
        return;
    }
    for (int64_t j = 0; j < R; j++)
        rows[j] = j / k;
    struct vkr_buf *xg = vk_stream_scratch(s, VK_SLOT_MOE_X, (size_t)(R * E) * sizeof(float));
    struct vkr_buf *gb = vk_stream_scratch(s, VK_SLOT_MOE_G, (size_t)(R * F) * sizeof(float));
    struct vkr_buf *ub = vk_stream_scratch(s, VK_SLOT_MOE_U, (size_t)(R * F) * sizeof(float));
    struct vkr_buf *yg = vk_stream_scratch(s, VK_SLOT_MOE_Y, (size_t)(R * E) * sizeof(float));
    struct vkr_buf *groups = vk_stream_scratch(
        s, VK_SLOT_MOE_GROUPS, (size_t)(f->n_expert + (int64_t)f->n_expert * R) * sizeof(int32_t));
    if (xg && gb && ub && yg && groups) {
        vkk_moe_group(c, vkk_at(vk_buf(ids), 0), R, f->n_expert, groups);
        vkk_eltwise(c, VKK_GATHER, vkk_at(xg, 0), vkk_at(vk_buf(x), 0), rows, R, E, 0.0f);
        /* gate and up, each activation kind quantized once */
        enum kern_act_kind kg = kern_act_kind_for(g0->type);
        enum kern_act_kind ku = kern_act_kind_for(f->up[0]->w->type);
        const struct vkr_buf *qg = vk_act_prepare(s, kg, xg, 0, R, E);
        const struct vkr_buf *qu = ku == kg ? qg : vk_act_prepare(s, ku, xg, 0, R, E);
        moe_product(s, f->gate, f->gate_b, f->n_expert, xg, qg, R, T, groups, gb);
        moe_product(s, f->up, f->up_b, f->n_expert, xg, qu, R, T, groups, ub);
        vkk_eltwise(c, vk_glu_op(f->act), vkk_at(gb, 0), vkk_at(ub, 0), NULL, 1, R * F, 0.0f);
        const struct vkr_buf *qd = vk_act_prepare(s, kern_act_kind_for(d0->type), gb, 0, R, F);
        moe_product(s, f->down, f->down_b, f->n_expert, gb, qd, R, T, groups, yg);
        vkk_moe_sum(c, vkk_at(yg, 0), vkk_at(vk_buf(w), 0), T, k, E, vkk_at(vk_buf(y), 0));
    }
    free(rows);
}
