/* moe.c: routing of a mixture-of-experts layer (ops.h "mixture of experts";
 * docs/numerics.md "Mixture of experts"). The expert products themselves are ordinary
 * per-row matrix products (backend_cpu.c groups the rows by expert). */
#include "ops.h"

#include <string.h>

void kern_moe_route(const struct kern_moe_gate *g, const float *logits, const float *bias,
                    int64_t T, int32_t *ids, float *w)
{
    const int32_t n = g->n_expert, k = g->n_used;
    float p[KERN_MOE_MAX_EXPERTS], sel[KERN_MOE_MAX_EXPERTS];
    bool taken[KERN_MOE_MAX_EXPERTS];
    for (int64_t t = 0; t < T; t++) {
        const float *l = logits + t * n;
        int32_t *id = ids + t * k;
        float *wt = w + t * k;
        if (g->gating == KERN_MOE_SOFTMAX)
            kern_softmax(p, l, n);
        else if (g->gating == KERN_MOE_SOFTMAX_WEIGHT)
            memcpy(p, l, (size_t)n * sizeof *p);
        else
            for (int32_t i = 0; i < n; i++)
                p[i] = 1.0f / (1.0f + kern_expf(-l[i]));
        for (int32_t i = 0; i < n; i++) {
            sel[i] = bias ? p[i] + bias[i] : p[i];
            taken[i] = false;
        }
        for (int32_t r = 0; r < k; r++) {
            int32_t best = -1;
            /* strictly greater: an equal score later in the scan keeps the lower index;
             * a NaN score is never chosen over a number */
            for (int32_t i = 0; i < n; i++)
                if (!taken[i] && (best < 0 || sel[i] > sel[best] || (sel[best] != sel[best] && sel[i] == sel[i])))
                    best = i;
            taken[best] = true;
            id[r] = best;
            wt[r] = p[best];
        }
        if (g->gating == KERN_MOE_SOFTMAX_WEIGHT) /* gpt-oss: over the chosen logits */
            kern_softmax(wt, wt, k);
        if (g->norm) {
            float sum = wt[0];
            for (int32_t r = 1; r < k; r++)
                sum += wt[r];
            if (!(sum >= KERN_MOE_NORM_MIN))
                sum = KERN_MOE_NORM_MIN;
            for (int32_t r = 0; r < k; r++)
                wt[r] = wt[r] / sum;
        }
        if (g->scale != 1.0f)
            for (int32_t r = 0; r < k; r++)
                wt[r] *= g->scale;
    }
}
