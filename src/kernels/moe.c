/* moe.c: routing of a mixture-of-experts layer (ops.h "mixture of experts";
 * docs/numerics.md "Mixture of experts"). The expert products themselves are ordinary
 * per-row matrix products (backend_cpu.c groups the rows by expert). */
#include "ops.h"

void kern_moe_route(const struct kern_moe_gate *g, const float *logits, const float *bias,
                    int64_t T, int32_t *ids, float *w)
{
    /* kern_hd.h states each token's rule once, shared with the CUDA kernel */
    for (int64_t t = 0; t < T; t++)
        kn_hd_moe_route_row((int)g->gating, g->n_expert, g->n_used, g->norm, g->scale,
                            logits + t * g->n_expert, bias, ids + t * g->n_used, w + t * g->n_used);
}
