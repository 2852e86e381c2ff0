/* test_sample.c: the sampler chain against hand-computed distributions, ties, edge
 * cases, and the purity of (logits, settings, seed, index) -> token. */
#include "check.h"
#include "sample/sample.h"

#include <math.h>

static struct sample_params plain(float temp)
{
    struct sample_params p;
    sample_params_default(&p);
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = 1234;
    return p;
}

/* Draws many tokens (one per token index) and counts them. */
static void histogram(struct sample_ctx *s, const struct sample_params *p, const float *logits,
                      int n_draws, int *counts)
{
    for (int i = 0; i < s->n_vocab; i++)
        counts[i] = 0;
    for (int i = 0; i < n_draws; i++)
        counts[sample_token(s, p, logits, NULL, 0, (uint64_t)i)]++;
}

static void test_uniform(void)
{
    double sum = 0;
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        float u = sample_uniform(7, (uint64_t)i);
        bad += !(u >= 0.0f && u < 1.0f);
        sum += u;
    }
    CHECK_EQ_INT(bad, 0);
    CHECKF(fabs(sum / 100000 - 0.5) < 0.005, "mean %f", sum / 100000);
    CHECK(sample_uniform(7, 3) == sample_uniform(7, 3));
    CHECK(sample_uniform(7, 3) != sample_uniform(8, 3));
    CHECK(sample_uniform(7, 3) != sample_uniform(7, 4));
}

static void test_greedy(struct sample_ctx *s)
{
    struct sample_params p = plain(0);
    float l[6] = {1, 3, 2, 3, NAN, -INFINITY};
    CHECK_EQ_INT(sample_token(s, &p, l, NULL, 0, 0), 1); /* tie 1 vs 3: lowest id */
    /* repeat penalty 2 on token 1 (logit 3 -> 1.5): token 3 wins */
    p.repeat_penalty = 2.0f;
    int32_t hist[2] = {1, 1};
    CHECK_EQ_INT(sample_token(s, &p, l, hist, 2, 0), 3);
    /* counted once per distinct token; frequency penalty counts occurrences */
    p.repeat_penalty = 1.0f;
    p.frequency_penalty = 0.6f; /* token 1: 3 - 2*0.6 = 1.8 < 2 (token 2)... token 3 wins */
    CHECK_EQ_INT(sample_token(s, &p, l, hist, 2, 0), 3);
    int32_t hist3[3] = {1, 3, 3};
    /* token 1: 2.4, token 3: 1.8, token 2: 2 */
    CHECK_EQ_INT(sample_token(s, &p, l, hist3, 3, 0), 1);
    /* repeat_last_n = 2 looks only at {3, 3}: token 3: 1.8, token 1 back to 3 */
    p.repeat_last_n = 2;
    CHECK_EQ_INT(sample_token(s, &p, l, hist3, 3, 0), 1);
    p.frequency_penalty = 0;
    p.presence_penalty = 1.5f; /* token 3 -> 1.5, token 1 unpenalised (3) */
    CHECK_EQ_INT(sample_token(s, &p, l, hist3, 3, 0), 1);
    /* negative logits are multiplied by the repeat penalty */
    float neg[6] = {-1, -1.5f, -9, -9, -9, -9};
    struct sample_params q = plain(0);
    q.repeat_penalty = 2.0f;
    int32_t h0 = 0;
    CHECK_EQ_INT(sample_token(s, &q, neg, &h0, 1, 0), 1); /* -1 -> -2 < -1.5 */
    /* counts are left clean for the next call */
    CHECK_EQ_INT(sample_token(s, &q, neg, NULL, 0, 0), 0);
}

static void test_distribution(struct sample_ctx *s)
{
    enum { N = 200000 };
    static int counts[6];
    float l[6] = {2, 1, 0, -1, -INFINITY, -INFINITY};
    struct sample_params p = plain(1.0f);
    histogram(s, &p, l, N, counts);
    double z = 1 + exp(-1) + exp(-2) + exp(-3);
    for (int i = 0; i < 4; i++) {
        double want = exp(-(double)i) / z;
        CHECKF(fabs((double)counts[i] / N - want) < 0.005, "token %d: %f vs %f", i,
               (double)counts[i] / N, want);
    }
    CHECK_EQ_INT(counts[4] + counts[5], 0);

    /* temperature 2 flattens: p_i proportional to exp(-i/2) */
    p.temperature = 2.0f;
    histogram(s, &p, l, N, counts);
    z = 1 + exp(-0.5) + exp(-1) + exp(-1.5);
    for (int i = 0; i < 4; i++) {
        double want = exp(-(double)i / 2) / z;
        CHECKF(fabs((double)counts[i] / N - want) < 0.005, "T=2 token %d: %f vs %f", i,
               (double)counts[i] / N, want);
    }

    /* top-k 2: only the two best, renormalised */
    p = plain(1.0f);
    p.top_k = 2;
    histogram(s, &p, l, N, counts);
    double want0 = 1 / (1 + exp(-1));
    CHECKF(fabs((double)counts[0] / N - want0) < 0.005, "top-k: %f", (double)counts[0] / N);
    CHECK_EQ_INT(counts[0] + counts[1], N);

    /* top-p: probabilities 0.5, 0.3, 0.2; top_p 0.7 keeps {0, 1} (0.5 < 0.7 <= 0.8) */
    float lp[6] = {logf(0.5f), logf(0.3f), logf(0.2f), -INFINITY, -INFINITY, -INFINITY};
    p = plain(1.0f);
    p.top_p = 0.7f;
    histogram(s, &p, lp, N, counts);
    CHECK_EQ_INT(counts[0] + counts[1], N);
    CHECKF(fabs((double)counts[0] / N - 0.625) < 0.005, "top-p: %f", (double)counts[0] / N);
    /* top_p 0.5 keeps exactly the first (its mass reaches 0.5) */
    p.top_p = 0.5f;
    histogram(s, &p, lp, 1000, counts);
    CHECK_EQ_INT(counts[0], 1000);

    /* min-p 0.5: p_i / p_max = 1, 0.6, 0.4 -> keeps {0, 1} */
    p = plain(1.0f);
    p.min_p = 0.5f;
    histogram(s, &p, lp, N, counts);
    CHECK_EQ_INT(counts[0] + counts[1], N);
    CHECKF(fabs((double)counts[0] / N - 0.625) < 0.005, "min-p: %f", (double)counts[0] / N);
}

static void test_edges(struct sample_ctx *s)
{
    struct sample_params p = plain(0.8f);
    float all_inf[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK_EQ_INT(sample_token(s, &p, all_inf, NULL, 0, 5), 0);
    float equal[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    static int counts[6];
    histogram(s, &p, equal, 60000, counts);
    for (int i = 0; i < 6; i++)
        CHECKF(fabs(counts[i] / 60000.0 - 1 / 6.0) < 0.01, "equal logits token %d", i);
    /* top_k 1 is greedy whatever the draw, ties broken by id */
    p.top_k = 1;
    histogram(s, &p, equal, 100, counts);
    CHECK_EQ_INT(counts[0], 100);
    /* one finite candidate */
    float one[6] = {-INFINITY, -INFINITY, -INFINITY, 4, -INFINITY, -INFINITY};
    p = plain(1.5f);
    histogram(s, &p, one, 100, counts);
    CHECK_EQ_INT(counts[3], 100);
}

/* The draw for token index i does not depend on what was sampled before. */
static void test_purity(struct sample_ctx *s)
{
    float l[6] = {0.1f, 0.3f, 0.2f, 0.25f, 0.0f, 0.15f};
    struct sample_params p;
    sample_params_default(&p);
    p.seed = 99;
    int32_t first[50];
    for (int i = 0; i < 50; i++)
        first[i] = sample_token(s, &p, l, NULL, 0, (uint64_t)i);
    int same = 0;
    for (int i = 49; i >= 0; i--)
        same += sample_token(s, &p, l, NULL, 0, (uint64_t)i) == first[i];
    CHECK_EQ_INT(same, 50);
    p.seed = 100;
    int differ = 0;
    for (int i = 0; i < 50; i++)
        differ += sample_token(s, &p, l, NULL, 0, (uint64_t)i) != first[i];
    CHECK(differ > 10);
}

static void test_params(void)
{
    struct sample_params p;
    sample_params_default(&p);
    CHECK(p.temperature == 0.8f && p.top_k == 50 && p.top_p == 0.95f && p.min_p == 0.05f);
    CHECK(p.repeat_penalty == 1.1f && p.repeat_last_n == 64);
    struct kn_err err;
    CHECK(sample_params_check(&p, &err) == KN_OK);
    p.top_p = 1.5f;
    CHECK(sample_params_check(&p, &err) == KN_E_ARG && strstr(err.msg, "top_p"));
    sample_params_default(&p);
    p.temperature = NAN;
    CHECK(sample_params_check(&p, &err) == KN_E_ARG && strstr(err.msg, "temperature"));
    CHECK(sample_fresh_seed() < (UINT64_C(1) << 53));
}

int main(void)
{
    struct sample_ctx s;
    struct kn_err err;
    CHECK(sample_ctx_init(&s, 6, &err) == KN_OK);
    test_uniform();
    test_greedy(&s);
    test_distribution(&s);
    test_edges(&s);
    test_purity(&s);
    test_params();
    sample_ctx_free(&s);
    CHECK_DONE();
}
