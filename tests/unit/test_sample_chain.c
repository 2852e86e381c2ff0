/* test_sample_chain.c: the samplers added to canonical-1's chain (typical-p, top-n-sigma,
 * XTC, DRY, Mirostat, logit bias, min_keep, a configurable order) against hand-computed
 * distributions, the original chain's exact tokens (a hash of 9000 draws made by the code
 * before this change), and stop strings across token boundaries. */
#include "check.h"
#include "base/json.h"
#include "sample/sample.h"
#include "text/text.h"

#include <math.h>

/* Random old-style settings and logits for trial t; returns the params via setters. */
#define GOLDEN_NV 300
static void golden_trial(int trial, float *temp, int32_t *top_k, float *top_p, float *min_p,
                         float *rp, float *pp, float *fp, int32_t *rln, uint64_t *seed, float *l,
                         int32_t *hist)
{
    *temp = trial % 7 == 0 ? 0 : sample_uniform(999, trial * 10 + 1) * 2;
    *top_k = (int)(sample_uniform(999, trial * 10 + 2) * 60) - 10;
    if (*top_k < 0)
        *top_k = 0;
    *top_p = sample_uniform(999, trial * 10 + 3) < 0.3f ? 1.0f : sample_uniform(999, trial * 10 + 4);
    *min_p = sample_uniform(999, trial * 10 + 5) < 0.3f ? 0 : sample_uniform(999, trial * 10 + 6) * 0.3f;
    *rp = 1 + sample_uniform(999, trial * 10 + 7);
    *pp = sample_uniform(999, trial * 10 + 8) - 0.5f;
    *fp = sample_uniform(999, trial * 10 + 9) - 0.5f;
    *rln = (trial % 5) - 1;
    *seed = (uint64_t)trial * 31 + 7;
    for (int i = 0; i < GOLDEN_NV; i++) {
        float u = sample_uniform((uint64_t)trial, (uint64_t)i);
        l[i] = trial % 11 == 0 ? floorf(u * 4) : (u - 0.5f) * 20;
        if (sample_uniform((uint64_t)trial + 5, (uint64_t)i) < 0.05f)
            l[i] = -INFINITY;
    }
    for (int i = 0; i < 100; i++)
        hist[i] = (int32_t)(sample_uniform((uint64_t)trial + 9, (uint64_t)i) * GOLDEN_NV);
}

/* Tokens the original chain (penalties -> top-k -> top-p -> min-p -> temperature) drew
 * for golden_trial's settings, hashed (FNV-1a 64); made with the code before issue 10. */
static void test_golden(void)
{
    struct kn_err err;
    struct sample_ctx s;
    CHECK(sample_ctx_init(&s, GOLDEN_NV, &err) == KN_OK);
    float l[GOLDEN_NV];
    int32_t hist[100];
    uint64_t h = 1469598103934665603ull;
    for (int trial = 0; trial < 3000; trial++) {
        struct sample_params q;
        sample_params_default(&q);
        golden_trial(trial, &q.temperature, &q.top_k, &q.top_p, &q.min_p, &q.repeat_penalty,
                     &q.presence_penalty, &q.frequency_penalty, &q.repeat_last_n, &q.seed, l, hist);
        for (int idx = 0; idx < 3; idx++) {
            int32_t t = sample_token(&s, &q, l, hist, 100, (uint64_t)idx);
            h = (h ^ (uint64_t)(uint32_t)t) * 1099511628211ull;
        }
    }
    CHECKF(h == 0xb0b0271350d46c02ull, "hash %016llx", (unsigned long long)h);
    /* a zeroed struct with the old fields set samples the same way */
    struct sample_params a, b;
    sample_params_default(&a);
    memset(&b, 0, sizeof b);
    b.temperature = a.temperature;
    b.top_k = a.top_k;
    b.top_p = a.top_p;
    b.min_p = a.min_p;
    b.repeat_penalty = a.repeat_penalty;
    b.repeat_last_n = a.repeat_last_n;
    int same = 0;
    for (int trial = 0; trial < 200; trial++) {
        float d1, d2, d3, d4, d5, d6, d7;
        int32_t i1, i2;
        uint64_t sd;
        golden_trial(trial, &d1, &i1, &d2, &d3, &d4, &d5, &d6, &i2, &sd, l, hist);
        a.seed = b.seed = sd;
        (void)d7;
        same += sample_token(&s, &a, l, hist, 100, 3) == sample_token(&s, &b, l, hist, 100, 3);
    }
    CHECK_EQ_INT(same, 200);
    sample_ctx_free(&s);
}

static struct sample_params plain(float temp)
{
    struct sample_params p;
    sample_params_default(&p);
    p.temperature = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.seed = 4321;
    return p;
}

enum { N = 6, DRAWS = 100000 };

static void histogram(struct sample_ctx *s, const struct sample_params *p, const float *logits,
                      int n_draws, int *counts)
{
    for (int i = 0; i < s->n_vocab; i++)
        counts[i] = 0;
    for (int i = 0; i < n_draws; i++) {
        int32_t t = sample_token(s, p, logits, NULL, 0, (uint64_t)i);
        if (t >= 0 && t < s->n_vocab)
            counts[t]++;
    }
}

static bool near(int count, int n, double want)
{
    return fabs((double)count / n - want) < 0.006;
}

#define LP(a, b, c, d) {logf(a), logf(b), logf(c), logf(d), -INFINITY, -INFINITY}

static void test_typical(struct sample_ctx *s)
{
    /* p = .5 .3 .15 .05: entropy 1.1422 nats; |-ln p - H| = .449 .062 .755 1.854, so
     * the most typical order is 1, 0, 2, 3. typical_p .5: 0.3 then 0.8 > .5 -> {1, 0}. */
    float l[N] = LP(0.5f, 0.3f, 0.15f, 0.05f);
    static int c[N];
    struct sample_params p = plain(1.0f);
    p.typical_p = 0.5f;
    histogram(s, &p, l, DRAWS, c);
    CHECK_EQ_INT(c[0] + c[1], DRAWS);
    CHECKF(near(c[0], DRAWS, 0.625), "typical: %d", c[0]);
    p.typical_p = 0.2f; /* 0.3 > 0.2 already: only token 1 */
    histogram(s, &p, l, 1000, c);
    CHECK_EQ_INT(c[1], 1000);
    p.min_keep = 3; /* at least three: {1, 0, 2} */
    histogram(s, &p, l, DRAWS, c);
    CHECK_EQ_INT(c[0] + c[1] + c[2], DRAWS);
    CHECKF(near(c[2], DRAWS, 0.15 / 0.95), "typical min_keep: %d", c[2]);
}

static void test_top_n_sigma(struct sample_ctx *s)
{
    /* logits 3 2 1 0 (and -inf, ignored): mean 1.5, sigma sqrt(1.25) = 1.118 */
    float l[N] = {3, 2, 1, 0, -INFINITY, -INFINITY};
    static int c[N];
    struct sample_params p = plain(1.0f);
    p.top_n_sigma = 1.0f; /* keep l >= 1.882: {0, 1} */
    histogram(s, &p, l, DRAWS, c);
    CHECK_EQ_INT(c[0] + c[1], DRAWS);
    CHECKF(near(c[0], DRAWS, 1 / (1 + exp(-1))), "sigma 1: %d", c[0]);
    p.top_n_sigma = 2.0f; /* keep l >= 0.764: {0, 1, 2} */
    histogram(s, &p, l, DRAWS, c);
    CHECK_EQ_INT(c[0] + c[1] + c[2], DRAWS);
    CHECK(c[2] > 0);
    /* all equal: sigma 0 keeps all */
    float eq[N] = {1, 1, 1, 1, 1, 1};
    p.top_n_sigma = 1.0f;
    histogram(s, &p, eq, 60000, c);
    for (int i = 0; i < N; i++)
        CHECK(near(c[i], 60000, 1 / 6.0));
    /* one finite candidate */
    float one[N] = {-INFINITY, -INFINITY, 5, -INFINITY, -INFINITY, -INFINITY};
    histogram(s, &p, one, 100, c);
    CHECK_EQ_INT(c[2], 100);
}

static void test_xtc(struct sample_ctx *s)
{
    float l[N] = LP(0.4f, 0.3f, 0.2f, 0.1f);
    static int c[N];
    struct sample_params p = plain(1.0f);
    p.xtc_probability = 1.0f;
    p.xtc_threshold = 0.15f; /* 0, 1, 2 are above: all but the least likely (2) go */
    histogram(s, &p, l, DRAWS, c);
    CHECK_EQ_INT(c[2] + c[3], DRAWS);
    CHECKF(near(c[2], DRAWS, 2 / 3.0), "xtc: %d", c[2]);
    /* only one above the threshold: nothing removed */
    p.xtc_threshold = 0.35f;
    histogram(s, &p, l, DRAWS, c);
    CHECKF(near(c[0], DRAWS, 0.4), "xtc one above: %d", c[0]);
    /* probability 0.5: half the draws as above, half untouched */
    p.xtc_threshold = 0.15f;
    p.xtc_probability = 0.5f;
    histogram(s, &p, l, DRAWS, c);
    CHECKF(near(c[0], DRAWS, 0.2), "xtc half: %d", c[0]);
    CHECKF(near(c[2], DRAWS, 0.5 * 0.2 + 0.5 * 2 / 3.0), "xtc half: %d", c[2]);
    /* min_keep 5: removing would leave 4 (2, 3 and the two -inf candidates, which count
     * as in llama.cpp), so nothing is removed */
    p.xtc_probability = 1.0f;
    p.min_keep = 5;
    histogram(s, &p, l, DRAWS, c);
    CHECKF(near(c[0], DRAWS, 0.4), "xtc min_keep: %d", c[0]);
    /* threshold above 0.5 turns it off */
    p.min_keep = 0;
    p.xtc_threshold = 0.6f;
    histogram(s, &p, l, DRAWS, c);
    CHECKF(near(c[0], DRAWS, 0.4), "xtc off: %d", c[0]);
    /* its stream is not the token stream */
    int same = 0;
    for (uint64_t i = 0; i < 1000; i++)
        same += sample_uniform(sample_xtc_key(5), i) == sample_uniform(5, i);
    CHECK(same < 5);
}

static void test_bias_minkeep(struct sample_ctx *s)
{
    float l[N] = {5, 4, 3, 2, 1, 0};
    struct sample_bias bias[3] = {{0, -100.0f}, {1, -INFINITY}, {5, 10.0f}};
    struct sample_params p = plain(0);
    memcpy(p.logit_bias, bias, sizeof bias);
    p.n_logit_bias = 2;
    CHECK_EQ_INT(sample_token(s, &p, l, NULL, 0, 0), 2); /* 0 and 1 banned */
    p.n_logit_bias = 3;
    CHECK_EQ_INT(sample_token(s, &p, l, NULL, 0, 0), 5); /* 0 + 10 wins */
    static int c[N];
    p = plain(1.0f);
    memcpy(p.logit_bias, bias, sizeof bias);
    p.n_logit_bias = 2;
    histogram(s, &p, l, 20000, c);
    CHECK_EQ_INT(c[0] + c[1], 0);
    struct kn_err err;
    struct sample_bias badb = {-1, 1.0f};
    p.logit_bias[0] = badb;
    p.n_logit_bias = 1;
    CHECK(sample_params_check(&p, &err) == KN_E_ARG && strstr(err.msg, "logit_bias"));
    struct sample_bias big = {6, 1.0f};
    p.logit_bias[0] = big;
    CHECK(sample_ctx_prepare(s, &p, 16, NULL, NULL, &err) == KN_E_ARG &&
          strstr(err.msg, "vocabulary of 6"));
    /* everything banned but nothing else: the lowest id, as for all -inf */
    struct sample_bias all[6] = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY},
                                 {3, -INFINITY}, {4, -INFINITY}, {5, -INFINITY}};
    p = plain(0.7f);
    memcpy(p.logit_bias, all, sizeof all);
    p.n_logit_bias = 6;
    CHECK_EQ_INT(sample_token(s, &p, l, NULL, 0, 0), 0);

    /* min_keep with min_p and top_p: p = .5 .3 .15 .05 */
    float lp[N] = LP(0.5f, 0.3f, 0.15f, 0.05f);
    p = plain(1.0f);
    p.min_p = 0.9f; /* only token 0 ... */
    histogram(s, &p, lp, 1000, c);
    CHECK_EQ_INT(c[0], 1000);
    p.min_keep = 2; /* ... unless two must stay */
    histogram(s, &p, lp, DRAWS, c);
    CHECK_EQ_INT(c[0] + c[1], DRAWS);
    CHECKF(near(c[0], DRAWS, 0.625), "min_p min_keep: %d", c[0]);
    p = plain(1.0f);
    p.top_p = 0.1f;
    p.min_keep = 3;
    histogram(s, &p, lp, DRAWS, c);
    CHECK_EQ_INT(c[0] + c[1] + c[2], DRAWS);
    CHECKF(near(c[2], DRAWS, 0.15 / 0.95), "top_p min_keep: %d", c[2]);
}

static void test_order(struct sample_ctx *s)
{
    float l[N] = LP(0.5f, 0.3f, 0.2f, 1e-30f);
    static int c[N];
    struct kn_err err;
    /* default: top_p at temperature 1 keeps {0, 1}, then T = 0.5 */
    struct sample_params p = plain(0.5f);
    p.top_p = 0.6f;
    histogram(s, &p, l, DRAWS, c);
    CHECK_EQ_INT(c[0] + c[1], DRAWS);
    CHECKF(near(c[0], DRAWS, 0.25 / (0.25 + 0.09)), "default order: %d", c[0]);
    /* temperature first: p = .658 .237 .105, top_p 0.6 keeps only {0} */
    CHECK(sample_chain_parse(&p, "temperature;top_p", &err) == KN_OK);
    CHECK_EQ_INT(p.n_samplers, 2);
    histogram(s, &p, l, 1000, c);
    CHECK_EQ_INT(c[0], 1000);
    /* aliases, separators, errors */
    CHECK(sample_chain_parse(&p, "top-k, typical nucleus;temp", &err) == KN_OK);
    CHECK_EQ_INT(p.n_samplers, 4);
    CHECK(p.samplers[0] == SAMPLE_TOP_K && p.samplers[1] == SAMPLE_TYPICAL_P &&
          p.samplers[2] == SAMPLE_TOP_P && p.samplers[3] == SAMPLE_TEMPERATURE);
    CHECK(sample_chain_parse(&p, "top_k;bogus", &err) == KN_E_ARG && strstr(err.msg, "'bogus'"));
    CHECK(sample_chain_parse(&p, " ; ", &err) == KN_E_ARG);
    CHECK_STR(sample_step_name(SAMPLE_TYPICAL_P), "typ_p");
    CHECK(sample_step_name(99) == NULL);
    /* no temperature step: temperature 1 */
    p = plain(0.1f);
    CHECK(sample_chain_parse(&p, "top_k", &err) == KN_OK);
    float l3[N] = {2, 1, 0, -1, -INFINITY, -INFINITY};
    histogram(s, &p, l3, DRAWS, c);
    CHECKF(near(c[0], DRAWS, 1 / (1 + exp(-1) + exp(-2) + exp(-3))), "no temp: %d", c[0]);
    /* penalties after top_k act on the kept candidates and re-sort them */
    p = plain(0);
    p.top_k = 2;
    p.repeat_penalty = 4;
    CHECK(sample_chain_parse(&p, "top_k;penalties;temperature", &err) == KN_OK);
    int32_t h = 0;
    CHECK_EQ_INT(sample_token(s, &p, l3, &h, 1, 0), 1); /* greedy: 2/4 < 1 */
    p.temperature = 1;
    histogram(s, &p, l3, 0, c);
    int cnt1 = 0;
    for (int i = 0; i < 20000; i++) {
        int32_t t = sample_token(s, &p, l3, &h, 1, (uint64_t)i);
        CHECK(t == 0 || t == 1);
        cnt1 += t == 1;
    }
    CHECKF(near(cnt1, 20000, 1 / (1 + exp(-0.5))), "penalties after top_k: %d", cnt1);
}

static const char *const dry_pieces[N] = {"a", "b", "c", "\n", "d", "e"};
static const char *dry_piece(const void *ctx, int32_t id, size_t *len)
{
    (void)ctx;
    *len = strlen(dry_pieces[id]);
    return dry_pieces[id];
}

static void test_dry(struct sample_ctx *s)
{
    struct kn_err err;
    struct sample_params p = plain(0);
    p.dry_multiplier = 1.0f;
    p.dry_base = 2.0f;
    p.dry_allowed_length = 2;
    CHECK(sample_ctx_prepare(s, &p, 64, dry_piece, NULL, &err) == KN_OK);
    /* history a b c a b c a b: "a b c a b" repeats before c, length 5, so c gets
     * 1 * 2^(5-2) = 8: logit 2 - 8 = -6. */
    int32_t h[8] = {0, 1, 2, 0, 1, 2, 0, 1};
    float l[N] = {-10, -10, 2, -10, -5.5f, -10};
    CHECK_EQ_INT(sample_token(s, &p, l, h, 8, 0), 4);
    l[4] = -6.5f;
    CHECK_EQ_INT(sample_token(s, &p, l, h, 8, 0), 2);
    /* a breaker (newline) limits the match: history a b c \n a b -> after the newline
     * only "a b" (2 tokens), so c gets 1 * 2^0 = 1: 2 - 1 = 1 */
    int32_t hb[9] = {0, 1, 2, 0, 1, 2, 3, 0, 1};
    float lb[N] = {-10, -10, 2, -10, 0.9f, -10};
    CHECK_EQ_INT(sample_token(s, &p, lb, hb, 9, 0), 2); /* 1 > 0.9 */
    lb[4] = 1.1f;
    CHECK_EQ_INT(sample_token(s, &p, lb, hb, 9, 0), 4);
    /* without the breaker the repeat is 6 long: c gets 2^4 = 16 */
    p.n_dry_breakers = 0;
    CHECK(sample_ctx_prepare(s, &p, 64, dry_piece, NULL, &err) == KN_OK);
    lb[4] = -13.9f;
    CHECK_EQ_INT(sample_token(s, &p, lb, hb, 9, 0), 2);
    lb[4] = -14.1f;
    CHECK_EQ_INT(sample_token(s, &p, lb, hb, 9, 0), 2);
    /* history ...c \n a b c \n: the newline (a breaker) is never penalised itself */
    sample_params_default(&p);
    p.temperature = 0;
    p.repeat_penalty = 1;
    p.dry_multiplier = 5.0f;
    CHECK(sample_ctx_prepare(s, &p, 64, dry_piece, NULL, &err) == KN_OK);
    int32_t hn[8] = {3, 0, 1, 2, 3, 0, 1, 2};
    float ln[N] = {-10, -10, -10, 1, 0.5f, -10};
    CHECK_EQ_INT(sample_token(s, &p, ln, hn, 8, 0), 3);
    /* short histories and dry_penalty_last_n limit it */
    p.dry_penalty_last_n = 2;
    CHECK_EQ_INT(sample_token(s, &p, l, h, 8, 0), 2);
    /* the scratch is clean after each call: no penalty without history */
    p.dry_penalty_last_n = -1;
    CHECK_EQ_INT(sample_token(s, &p, l, h, 0, 0), 2);
    /* a breaker spanning two tokens: breaker "c\n" ends at token \n */
    p = plain(0);
    p.dry_multiplier = 1.0f;
    p.dry_base = 2.0f;
    p.dry_allowed_length = 2;
    p.n_dry_breakers = 1;
    strcpy(p.dry_breakers[0], "c\n");
    CHECK(sample_ctx_prepare(s, &p, 64, dry_piece, NULL, &err) == KN_OK);
    CHECK_EQ_INT(sample_token(s, &p, lb, hb, 9, 0), 2); /* limit 2 again: c gets 1 */
    p.dry_breakers[0][0] = 0;
    CHECK(sample_params_check(&p, &err) == KN_E_ARG && strstr(err.msg, "breaker"));
}

static void test_mirostat(struct sample_ctx *s)
{
    /* p = .5 .25 .25: surprises 1, 2, 2 bits. tau 1: mu starts at 2 (keeps all). */
    float l[N] = {logf(0.5f), logf(0.25f), logf(0.25f), -INFINITY, -INFINITY, -INFINITY};
    struct sample_params p = plain(1.0f);
    p.mirostat = 2;
    p.mirostat_tau = 1.0f;
    p.mirostat_eta = 0.1f;
    sample_ctx_reset(s);
    int32_t first = -1;
    uint64_t i = 0;
    for (; i < 100; i++) {
        sample_ctx_reset(s);
        first = sample_token(s, &p, l, NULL, 0, i);
        if (first != 0)
            break;
        CHECKF(fabsf(s->mirostat_mu - 2.0f) < 1e-5f, "mu %g", (double)s->mirostat_mu);
    }
    CHECK(first == 1 || first == 2);
    CHECKF(fabsf(s->mirostat_mu - 1.9f) < 1e-5f, "mu after a 2-bit token: %g", (double)s->mirostat_mu);
    /* now mu 1.9 < 2: only token 0 survives; its surprise (alone: 0 bits) takes mu back
     * up to 1.9 - 0.1 * (0 - 1) = 2 */
    int32_t next = sample_token(s, &p, l, NULL, 0, i + 1);
    CHECK_EQ_INT(next, 0);
    CHECKF(fabsf(s->mirostat_mu - 2.0f) < 1e-5f, "mu %g", (double)s->mirostat_mu);
    /* replay reproduces the sequence and mu */
    float lr[N] = {0.3f, 0.1f, 0.2f, -0.4f, 0.0f, -1.0f};
    for (int v = 1; v <= 2; v++) {
        p.mirostat = v;
        p.mirostat_tau = 2.0f;
        int32_t a[40], b[40];
        float mua, mub;
        sample_ctx_reset(s);
        for (int j = 0; j < 40; j++)
            a[j] = sample_token(s, &p, lr, NULL, 0, (uint64_t)j);
        mua = s->mirostat_mu;
        sample_ctx_reset(s);
        for (int j = 0; j < 40; j++)
            b[j] = sample_token(s, &p, lr, NULL, 0, (uint64_t)j);
        mub = s->mirostat_mu;
        CHECK(memcmp(a, b, sizeof a) == 0);
        CHECK(mua == mub && isfinite(mua));
        int distinct = 0;
        for (int j = 0; j < 40; j++)
            distinct |= 1 << a[j];
        CHECKF(__builtin_popcount((unsigned)distinct) >= 2, "mirostat v%d picks one token only", v);
    }
    /* greedy ignores mirostat */
    p.temperature = 0;
    CHECK_EQ_INT(sample_token(s, &p, lr, NULL, 0, 0), 0);
}

/* Every sampler on: same inputs, same token; all -inf: lowest id; NaN logits never win. */
static void test_all_on(struct sample_ctx *s)
{
    struct kn_err err;
    struct sample_params p;
    sample_params_default(&p);
    p.typical_p = 0.9f;
    p.top_n_sigma = 2.0f;
    p.xtc_probability = 0.5f;
    p.dry_multiplier = 0.8f;
    p.min_keep = 2;
    p.seed = 77;
    CHECK(sample_params_check(&p, &err) == KN_OK);
    CHECK(sample_ctx_prepare(s, &p, 64, dry_piece, NULL, &err) == KN_OK);
    float l[N] = {0.1f, 0.3f, NAN, 0.25f, 0.0f, 0.15f};
    int32_t h[10] = {0, 1, 3, 0, 1, 3, 0, 1, 4, 5};
    int32_t first[64];
    for (int i = 0; i < 64; i++) {
        first[i] = sample_token(s, &p, l, h, 10, (uint64_t)i);
        CHECK(first[i] >= 0 && first[i] < N && first[i] != 2);
    }
    for (int i = 63; i >= 0; i--)
        CHECK_EQ_INT(sample_token(s, &p, l, h, 10, (uint64_t)i), first[i]);
    float inf[N] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    CHECK_EQ_INT(sample_token(s, &p, inf, h, 10, 0), 0);
    float eq[N] = {1, 1, 1, 1, 1, 1};
    int seen = 0;
    struct sample_params q = plain(1.0f);
    q.typical_p = 0.5f;
    q.top_n_sigma = 1.0f;
    q.xtc_probability = 1.0f;
    for (int i = 0; i < 200; i++)
        seen |= 1 << sample_token(s, &q, eq, NULL, 0, (uint64_t)i);
    CHECK(seen != 0);
    /* settings' ranges */
    sample_params_default(&p);
    p.typical_p = 1.5f;
    CHECK(sample_params_check(&p, &err) == KN_E_ARG && strstr(err.msg, "typical_p"));
    sample_params_default(&p);
    p.mirostat = 3;
    CHECK(sample_params_check(&p, &err) == KN_E_ARG && strstr(err.msg, "mirostat"));
    sample_params_default(&p);
    p.xtc_probability = -0.1f;
    CHECK(sample_params_check(&p, &err) == KN_E_ARG && strstr(err.msg, "xtc_probability"));
    sample_params_default(&p);
    p.min_keep = -1;
    CHECK(sample_params_check(&p, &err) == KN_E_ARG && strstr(err.msg, "min_keep"));
}

/* ---- stop strings */

static void feed_all(struct text_stop *st, const char *const *pieces, int n, char *out,
                     size_t *len, bool *stopped)
{
    *len = 0;
    *stopped = false;
    char buf[256];
    for (int i = 0; i < n && !*stopped; i++) {
        size_t k;
        *stopped = text_stop_feed(st, pieces[i], strlen(pieces[i]), buf, &k);
        memcpy(out + *len, buf, k);
        *len += k;
    }
    if (!*stopped) {
        size_t k;
        text_stop_flush(st, buf, &k);
        memcpy(out + *len, buf, k);
        *len += k;
    }
    out[*len] = 0;
}

/* The --stop / /set stop decoder that run and chat share. */
static void test_stop_unescape(void)
{
    struct kn_err err;
    char *s = text_stop_unescape("a\\nb\\tc\\rd\\\\e\\\"f\\x41\\x7g\\q\\", "--stop", &err);
    CHECK(s != NULL);
    if (s)
        CHECK_STR(s, "a\nb\tc\rd\\e\"fA\x07gq\\");
    free(s);
    const char *bad[] = {"\\x", "\\xg", "\\x00", "\\x0"};
    for (int i = 0; i < 4; i++) {
        CHECK(text_stop_unescape(bad[i], "/set stop", &err) == NULL);
        CHECK(err.status == KN_E_ARG && strstr(err.msg, "/set stop: \\x needs") == err.msg);
    }
    CHECK(text_stop_unescape("", "--stop", &err) == NULL);
    CHECK(err.status == KN_E_ARG && strstr(err.msg, "at least one byte") != NULL);
}

static void test_stop(void)
{
    struct kn_err err;
    struct text_stop st;
    const char *stops[] = {"</s>", "\n\nUser:"};
    CHECK(text_stop_init(&st, stops, 2, &err) == KN_OK);
    const char *p1[] = {"Hel", "lo wor", "ld<", "/s>tail", "more"};
    char out[256];
    size_t len;
    bool stopped;
    feed_all(&st, p1, 5, out, &len, &stopped);
    CHECK(stopped);
    CHECK_STR(out, "Hello world");
    CHECK_EQ_INT(st.matched, 0);
    text_stop_free(&st);

    /* a held-back prefix is emitted once ruled out, and at the end */
    CHECK(text_stop_init(&st, stops, 2, &err) == KN_OK);
    char buf[64];
    size_t k;
    CHECK(!text_stop_feed(&st, "a\n", 2, buf, &k));
    CHECK_EQ_INT(k, 1); /* "\n" might start "\n\nUser:" */
    CHECK(!text_stop_feed(&st, "\nUs", 3, buf, &k));
    CHECK_EQ_INT(k, 0);
    CHECK(!text_stop_feed(&st, "ed", 2, buf, &k)); /* "\n\nUse" + "d": not a stop */
    buf[k] = 0;
    CHECK_STR(buf, "\n\nUsed");
    CHECK(!text_stop_feed(&st, "x<", 2, buf, &k));
    CHECK_EQ_INT(k, 1);
    text_stop_flush(&st, buf, &k);
    CHECK(k == 1 && buf[0] == '<');
    text_stop_free(&st);

    /* the earliest-ending match wins; one piece holding the whole stop and more */
    const char *s2[] = {"abcd", "bc"};
    CHECK(text_stop_init(&st, s2, 2, &err) == KN_OK);
    const char *p2[] = {"xabcdy"};
    feed_all(&st, p2, 1, out, &len, &stopped);
    CHECK(stopped && st.matched == 1);
    CHECK_STR(out, "xa");
    CHECK(text_stop_feed(&st, "zz", 2, buf, &k) && k == 0); /* stays stopped */
    text_stop_free(&st);

    /* overlapping prefix: "aab" with stop "ab" */
    const char *s3[] = {"ab"};
    CHECK(text_stop_init(&st, s3, 1, &err) == KN_OK);
    const char *p3[] = {"a", "a", "b"};
    feed_all(&st, p3, 3, out, &len, &stopped);
    CHECK(stopped);
    CHECK_STR(out, "a");
    text_stop_free(&st);

    /* multi-byte UTF-8 stop split across pieces */
    const char *s4[] = {"\xc3\xa9t\xc3\xa9"};
    CHECK(text_stop_init(&st, s4, 1, &err) == KN_OK);
    const char *p4[] = {"l'\xc3", "\xa9", "t", "\xc3", "\xa9!"};
    feed_all(&st, p4, 5, out, &len, &stopped);
    CHECK(stopped);
    CHECK_STR(out, "l'");
    text_stop_free(&st);

    /* no stop strings: everything passes through */
    CHECK(text_stop_init(&st, NULL, 0, &err) == KN_OK);
    CHECK(!text_stop_feed(&st, "abc", 3, buf, &k) && k == 3);
    text_stop_free(&st);
    const char *bad[] = {""};
    CHECK(text_stop_init(&st, bad, 1, &err) == KN_E_ARG && strstr(err.msg, "empty"));
    text_stop_free(&st);
}

/* Splits pieces into content and reasoning; returns them joined as "content|reasoning". */
static void think_run(struct text_think *t, const char *const *pieces, int n, char *c, char *r)
{
    size_t nc = 0, nr = 0, a, b;
    char bc[256], br[256];
    for (int i = 0; i < n; i++) {
        text_think_feed(t, pieces[i], strlen(pieces[i]), bc, &a, br, &b);
        memcpy(c + nc, bc, a);
        memcpy(r + nr, br, b);
        nc += a;
        nr += b;
    }
    text_think_flush(t, bc, &a, br, &b);
    memcpy(c + nc, bc, a);
    memcpy(r + nr, br, b);
    c[nc + a] = 0;
    r[nr + b] = 0;
}

static void test_think(void)
{
    struct kn_err err;
    struct text_think t;
    char c[256], r[256];
    CHECK(text_think_init(&t, "<think>", "</think>", false, &err) == KN_OK);
    const char *p1[] = {"<th", "ink>Let me", " see.</", "think>\n\nThe answer", " is <", "b>4</b>"};
    think_run(&t, p1, 6, c, r);
    CHECK_STR(r, "Let me see.");
    CHECK_STR(c, "\n\nThe answer is <b>4</b>");
    /* starting inside (the template opened the block); a second block; an unclosed one */
    CHECK(text_think_init(&t, "<think>", "</think>", true, &err) == KN_OK);
    const char *p2[] = {"hmm</think>A<think>more", "</thin"};
    think_run(&t, p2, 2, c, r);
    CHECK_STR(c, "A");
    CHECK_STR(r, "hmmmore</thin");
    /* a held prefix that turns out not to be a marker is emitted where it was */
    CHECK(text_think_init(&t, "<think>", "</think>", false, &err) == KN_OK);
    const char *p3[] = {"a <thi", "s> b"};
    think_run(&t, p3, 2, c, r);
    CHECK_STR(c, "a <this> b");
    CHECK_STR(r, "");
    CHECK(text_think_init(&t, "", "</think>", false, &err) == KN_E_ARG);
    /* gpt-oss's harmony format (<|end|> and <|return|> are not printed): the analysis
     * channel is reasoning, final is content, headers go to neither, pieces cut anywhere */
    CHECK(text_think_init(&t, TEXT_HARMONY_OPEN, TEXT_HARMONY_CLOSE, false, &err) == KN_OK);
    const char *h1[] = {"<|chan", "nel|>analysis<|mess", "age|>Think <b>.", "<|start|>assis",
                        "tant<|channel|>final<|message|>The <|answer", " is 4."};
    think_run(&t, h1, 6, c, r);
    CHECK_STR(r, "Think <b>.");
    CHECK_STR(c, "The <|answer is 4.");
    /* a tool call after the analysis: its header stays in the content for the parser */
    CHECK(text_think_init(&t, TEXT_HARMONY_OPEN, TEXT_HARMONY_CLOSE, false, &err) == KN_OK);
    const char *h2[] = {"<|channel|>analysis<|message|>Need weather.<|start|>assistant<|channel|>commentary",
                        " to=functions.get <|constrain|>json<|message|>{\"c\": 1}"};
    think_run(&t, h2, 2, c, r);
    CHECK_STR(r, "Need weather.");
    CHECK_STR(c, "<|start|>assistant<|channel|>commentary to=functions.get <|constrain|>json<|message|>{\"c\": 1}");
    /* no analysis at all: a final answer straight away; an unfinished header is content */
    CHECK(text_think_init(&t, TEXT_HARMONY_OPEN, TEXT_HARMONY_CLOSE, false, &err) == KN_OK);
    const char *h3[] = {"<|channel|>final<|message|>Hi", "<|start|>assist"};
    think_run(&t, h3, 2, c, r);
    CHECK_STR(c, "Hi<|start|>assist");
    CHECK_STR(r, "");
}

static void test_json(void)
{
    struct kn_err err;
    struct sample_params p, q;
    /* the defaults (everything new off) add nothing */
    sample_params_default(&p);
    struct json_value *o = json_new_object();
    CHECK(sample_params_json_write(&p, o, SAMPLE_JSON_EXTRA, &err) == KN_OK);
    CHECK_EQ_INT(json_len(o), 0);
    json_free(o);
    /* everything on: written in the documented order, read back the same */
    p.typical_p = 0.7f;
    p.top_n_sigma = 1.5f;
    p.xtc_probability = 0.3f;
    p.xtc_threshold = 0.2f;
    p.dry_multiplier = 0.8f;
    p.dry_base = 1.9f;
    p.dry_allowed_length = 3;
    p.dry_penalty_last_n = 128;
    p.n_dry_breakers = 2;
    strcpy(p.dry_breakers[0], "\n");
    strcpy(p.dry_breakers[1], "###");
    p.mirostat = 2;
    p.mirostat_tau = 4.5f;
    p.mirostat_eta = 0.15f;
    p.min_keep = 3;
    p.n_logit_bias = 2;
    p.logit_bias[0] = (struct sample_bias){17, -INFINITY};
    p.logit_bias[1] = (struct sample_bias){3, 0.1f};
    CHECK(sample_chain_parse(&p, "top_k;temperature", &err) == KN_OK);
    o = json_new_object();
    CHECK(sample_params_json_write(&p, o, SAMPLE_JSON_EXTRA, &err) == KN_OK);
    char *text = NULL;
    CHECK(json_write(o, JSON_COMPACT, &text, NULL, &err) == KN_OK);
    CHECK_STR(text, "{\"typical_p\":0.7,\"top_n_sigma\":1.5,\"xtc_probability\":0.3,"
                    "\"xtc_threshold\":0.2,\"dry_multiplier\":0.8,\"dry_base\":1.9,"
                    "\"dry_allowed_length\":3,\"dry_penalty_last_n\":128,"
                    "\"dry_sequence_breakers\":[\"\\n\",\"###\"],\"mirostat\":2,"
                    "\"mirostat_tau\":4.5,\"mirostat_eta\":0.15,\"min_keep\":3,"
                    "\"logit_bias\":[[17,-100.0],[3,0.1]],\"samplers\":[\"top_k\",\"temperature\"]}");
    /* the keys in table order */
    for (size_t i = 0, k = 0; i < json_len(o); i++, k++) {
        while (k < sample_n_settings && sample_settings[k].always)
            k++;
        CHECK(k < sample_n_settings);
        CHECK_STR(o->u.object.items[i].key, sample_settings[k].key);
    }
    memset(&q, 0, sizeof q);
    CHECK(sample_params_json_read(o, &q, 0, NULL, &err) == KN_OK);
    CHECK(q.typical_p == p.typical_p && q.top_n_sigma == p.top_n_sigma &&
          q.xtc_probability == p.xtc_probability && q.xtc_threshold == p.xtc_threshold &&
          q.dry_multiplier == p.dry_multiplier && q.dry_base == p.dry_base &&
          q.dry_allowed_length == 3 && q.dry_penalty_last_n == 128 && q.n_dry_breakers == 2 &&
          strcmp(q.dry_breakers[1], "###") == 0 && q.mirostat == 2 &&
          q.mirostat_tau == p.mirostat_tau && q.mirostat_eta == p.mirostat_eta &&
          q.min_keep == 3 && q.n_logit_bias == 2 && q.logit_bias[0].id == 17 &&
          q.logit_bias[0].bias == -100.0f && q.logit_bias[1].bias == 0.1f && q.n_samplers == 2 &&
          q.samplers[1] == SAMPLE_TEMPERATURE);
    free(text);
    json_free(o);
    /* OpenAI's logit_bias object (false bans), samplers as a string, and errors */
    const char *req = "{\"logit_bias\":{\"5\":-100,\"9\":2.5,\"11\":false},\"samplers\":\"top_p;min_p\"}";
    CHECK(json_parse(req, strlen(req), NULL, &o, &err) == KN_OK);
    sample_params_default(&q);
    CHECK(sample_params_json_read(o, &q, 0, NULL, &err) == KN_OK);
    CHECK(q.n_logit_bias == 3 && q.logit_bias[1].id == 9 && q.logit_bias[1].bias == 2.5f &&
          q.logit_bias[2].bias == -100.0f && q.n_samplers == 2 && q.samplers[0] == SAMPLE_TOP_P);
    json_free(o);
    const struct {
        const char *json, *want;
    } bad[] = {
        {"{\"typical_p\":\"x\"}", "typical_p must be a number"},
        {"{\"mirostat\":1.5}", "mirostat must be an integer"},
        {"{\"logit_bias\":{\"abc\":1}}", "logit_bias entry 0"},
        {"{\"logit_bias\":[[1]]}", "logit_bias entry 0"},
        {"{\"samplers\":[\"top_k\",\"warp\"]}", "samplers[1] is not a sampler name"},
        {"{\"dry_sequence_breakers\":[\"\"]}", "dry_sequence_breakers[0]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(json_parse(bad[i].json, strlen(bad[i].json), NULL, &o, &err) == KN_OK);
        sample_params_default(&q);
        CHECKF(sample_params_json_read(o, &q, 0, NULL, &err) == KN_E_FORMAT && strstr(err.msg, bad[i].want),
               "%s: %s", bad[i].json, err.msg);
        json_free(o);
    }
}

int main(void)
{
    struct sample_ctx s;
    struct kn_err err;
    test_golden();
    CHECK(sample_ctx_init(&s, N, &err) == KN_OK);
    test_typical(&s);
    test_top_n_sigma(&s);
    test_xtc(&s);
    test_bias_minkeep(&s);
    test_order(&s);
    test_dry(&s);
    test_mirostat(&s);
    test_all_on(&s);
    sample_ctx_free(&s);
    test_stop();
    test_stop_unescape();
    test_think();
    test_json();
    CHECK_DONE();
}
