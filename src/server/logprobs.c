/* logprobs.c: log-probabilities for the API's logprobs and top_logprobs: the log-softmax
 * of the raw logits (Kinetic's own exp and log, docs/numerics.md rule 6), and the k most
 * likely tokens, ties by lower id, so the list never depends on a sort's stability. */
#include "server.h"
#include "kernels/ops.h"

#include <assert.h>
#include <math.h>

void srv_logprobs(const float *logits, int32_t n_vocab, float *lp, int k, int32_t *top_ids,
                  float *top_lp)
{
    assert(k >= 0 && k <= SRV_MAX_TOP_LOGPROBS);
    kern_log_softmax(lp, logits, n_vocab);
    int m = 0;
    for (int32_t i = 0; i < n_vocab && k > 0; i++) {
        float v = lp[i];
        if (m == k && !(v > top_lp[k - 1]))
            continue; /* equal values keep the lower id already listed */
        int j = m < k ? m++ : k - 1;
        while (j > 0 && v > top_lp[j - 1]) {
            top_lp[j] = top_lp[j - 1];
            top_ids[j] = top_ids[j - 1];
            j--;
        }
        top_lp[j] = v;
        top_ids[j] = i;
    }
    for (int i = m; i < k; i++) {
        top_ids[i] = -1;
        top_lp[i] = -INFINITY;
    }
}
