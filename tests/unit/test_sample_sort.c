/* test_sample_sort.c: the full sort behind top-p and Mirostat on a large vocabulary (a
 * radix sort above 2048 candidates) gives exactly the total order (higher logit first,
 * then lower id; -0 equals +0): sampling with top_k 0 must pick the same tokens as with
 * top_k n-1 (a heap selection, another algorithm), when the one candidate top_k n-1 drops
 * has a probability of exactly 0. Logits are coarse so that ties are everywhere. */
#include "check.h"
#include "sample/sample.h"

#include <math.h>

#define NV 40000

static void trial(struct sample_ctx *s, float *l, int variant)
{
    for (int i = 0; i < NV; i++) {
        float u = sample_uniform(77 + (uint64_t)variant, (uint64_t)i);
        if (variant == 0)
            l[i] = floorf(u * 6) - 3;          /* six values: ties everywhere */
        else if (variant == 1)
            l[i] = (u - 0.5f) * 30;            /* nearly all distinct, positive and negative */
        else
            l[i] = u < 0.5f ? (u < 0.25f ? -0.0f : 0.0f) : floorf(u * 3); /* zeros of both signs */
    }
    l[1234] = -1e30f; /* the worst: exp(-1e30 - max) is exactly 0 */
    l[77] = -INFINITY; /* banned tokens sort last in both */
    struct sample_params a, b;
    sample_params_default(&a);
    a.temperature = 1.0f;
    a.top_k = 0;
    a.min_p = 0;
    a.repeat_penalty = 1.0f;
    b = a;
    b.top_k = NV - 2; /* all but the -inf one and the worst */
    int differ = 0;
    for (int seed = 0; seed < 200; seed++) {
        float top_p = seed % 3 == 0 ? 0.5f : seed % 3 == 1 ? 0.9f : 0.999f;
        a.top_p = b.top_p = top_p;
        a.seed = b.seed = (uint64_t)seed;
        int32_t ta = sample_token(s, &a, l, NULL, 0, (uint64_t)seed);
        int32_t tb = sample_token(s, &b, l, NULL, 0, (uint64_t)seed);
        differ += ta != tb;
    }
    CHECKF(differ == 0, "variant %d: %d of 200 draws differ", variant, differ);
}

int main(void)
{
    struct sample_ctx s;
    struct kn_err err;
    CHECK(sample_ctx_init(&s, NV, &err) == KN_OK);
    float *l = malloc(NV * sizeof *l);
    for (int v = 0; v < 3; v++)
        trial(&s, l, v);
    free(l);
    sample_ctx_free(&s);
    CHECK_DONE();
}
