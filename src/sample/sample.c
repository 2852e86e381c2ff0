/* sample.c: the sampler chain penalties -> top-k -> top-p -> min-p -> temperature ->
 * draw, each step in a fixed order over candidates sorted by (logit desc, id asc). */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "kernels/kernels.h"

void sample_params_default(struct sample_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 0.8f;
    p->top_k = 50;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.1f;
    p->repeat_last_n = 64;
}

enum kn_status sample_params_check(const struct sample_params *p, struct kn_err *err)
{
    if (!isfinite(p->temperature) || p->temperature < 0 || p->temperature > 100)
        return kn_fail(err, KN_E_ARG, "temperature must be between 0 and 100, not %g",
                       (double)p->temperature);
    if (!isfinite(p->top_p) || p->top_p < 0 || p->top_p > 1)
        return kn_fail(err, KN_E_ARG, "top_p must be between 0 and 1, not %g", (double)p->top_p);
    if (!isfinite(p->min_p) || p->min_p < 0 || p->min_p > 1)
        return kn_fail(err, KN_E_ARG, "min_p must be between 0 and 1, not %g", (double)p->min_p);
    if (p->top_k < 0)
        return kn_fail(err, KN_E_ARG, "top_k must be 0 (off) or positive, not %d", p->top_k);
    if (!isfinite(p->repeat_penalty) || p->repeat_penalty <= 0)
        return kn_fail(err, KN_E_ARG, "repeat_penalty must be positive, not %g",
                       (double)p->repeat_penalty);
    if (!isfinite(p->presence_penalty) || fabsf(p->presence_penalty) > 100)
        return kn_fail(err, KN_E_ARG, "presence_penalty must be between -100 and 100, not %g",
                       (double)p->presence_penalty);
    if (!isfinite(p->frequency_penalty) || fabsf(p->frequency_penalty) > 100)
        return kn_fail(err, KN_E_ARG, "frequency_penalty must be between -100 and 100, not %g",
                       (double)p->frequency_penalty);
    if (p->repeat_last_n < -1)
        return kn_fail(err, KN_E_ARG, "repeat_last_n must be -1 (all), 0 (off) or positive, not %d",
                       p->repeat_last_n);
    return KN_OK;
}

uint64_t sample_fresh_seed(void)
{
    uint64_t s;
    if (getrandom(&s, sizeof s, 0) != (ssize_t)sizeof s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec;
    }
    /* Seeds travel through JSON: keep them exact in a double (53 bits). */
    return s & ((UINT64_C(1) << 53) - 1);
}

/* SplitMix64's finaliser: a bijective mixer with good avalanche. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

float sample_uniform(uint64_t seed, uint64_t index)
{
    uint64_t z = mix64(mix64(seed ^ UINT64_C(0x4b696e6574696321)) + index * UINT64_C(0x9e3779b97f4a7c15));
    return (float)(z >> 40) * 0x1p-24f;
}

enum kn_status sample_ctx_init(struct sample_ctx *s, int32_t n_vocab, struct kn_err *err)
{
    memset(s, 0, sizeof *s);
    if (n_vocab <= 0)
        return kn_fail(err, KN_E_ARG, "vocabulary size must be positive, not %d", n_vocab);
    s->n_vocab = n_vocab;
    s->cand = kn_calloc((size_t)n_vocab, sizeof *s->cand, err);
    s->count = kn_calloc((size_t)n_vocab, sizeof *s->count, err);
    if (!s->cand || !s->count) {
        sample_ctx_free(s);
        return KN_E_NOMEM;
    }
    return KN_OK;
}

void sample_ctx_free(struct sample_ctx *s)
{
    free(s->cand);
    free(s->count);
    memset(s, 0, sizeof *s);
}

/* The total order of candidates: higher logit first, then lower id. */
static inline bool cand_before(const struct sample_cand *a, const struct sample_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb)
{
    const struct sample_cand *a = pa, *b = pb;
    return cand_before(a, b) ? -1 : cand_before(b, a) ? 1 : 0;
}

/* Moves the k first candidates in the total order to cand[0..k), sorted. A min-heap of
 * the best k seen so far: O(n log k). */
static void select_top_k(struct sample_cand *cand, int32_t n, int32_t k)
{
    /* heap[0] is the worst of the kept candidates */
    for (int32_t i = 1; i < k; i++) {
        int32_t c = i;
        while (c > 0) {
            int32_t parent = (c - 1) / 2;
            if (!cand_before(&cand[parent], &cand[c]))
                break;
            struct sample_cand t = cand[c];
            cand[c] = cand[parent];
            cand[parent] = t;
            c = parent;
        }
    }
    for (int32_t i = k; i < n; i++) {
        if (!cand_before(&cand[i], &cand[0]))
            continue;
        cand[0] = cand[i];
        int32_t c = 0;
        for (;;) {
            int32_t l = 2 * c + 1, r = l + 1, worst = c;
            if (l < k && cand_before(&cand[worst], &cand[l]))
                worst = l;
            if (r < k && cand_before(&cand[worst], &cand[r]))
                worst = r;
            if (worst == c)
                break;
            struct sample_cand t = cand[c];
            cand[c] = cand[worst];
            cand[worst] = t;
            c = worst;
        }
    }
    qsort(cand, (size_t)k, sizeof *cand, cand_cmp);
}

static void apply_penalties(struct sample_ctx *s, const struct sample_params *p,
                            const int32_t *history, int64_t n_history)
{
    if (p->repeat_last_n == 0 ||
        (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f))
        return;
    int64_t n = p->repeat_last_n < 0 || p->repeat_last_n > n_history ? n_history : p->repeat_last_n;
    const int32_t *recent = history + (n_history - n);
    for (int64_t i = 0; i < n; i++)
        if (recent[i] >= 0 && recent[i] < s->n_vocab)
            s->count[recent[i]]++;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = recent[i];
        if (id < 0 || id >= s->n_vocab || s->count[id] == 0)
            continue; /* out of range, or already applied */
        struct sample_cand *c = &s->cand[id];
        if (c->logit <= 0)
            c->logit = c->logit * p->repeat_penalty;
        else
            c->logit = c->logit / p->repeat_penalty;
        c->logit = c->logit - ((float)s->count[id] * p->frequency_penalty + p->presence_penalty);
        s->count[id] = 0;
    }
}

int32_t sample_token(struct sample_ctx *s, const struct sample_params *p, const float *logits,
                     const int32_t *history, int64_t n_history, uint64_t token_index)
{
    int32_t n = s->n_vocab;
    struct sample_cand *cand = s->cand;
    for (int32_t i = 0; i < n; i++) {
        float l = logits[i];
        cand[i].id = i;
        cand[i].logit = l != l ? -INFINITY : l; /* NaN never wins */
        cand[i].p = 0;
    }
    apply_penalties(s, p, history, n_history);

    if (p->temperature <= 0) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (cand[i].logit > cand[best].logit)
                best = i;
        return best;
    }

    /* top-k: keep the k best, sorted. */
    int32_t k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    select_top_k(cand, n, k);
    if (cand[0].logit == -INFINITY)
        return cand[0].id; /* nothing has any probability: lowest id */

    /* Probabilities at temperature 1 relative to the best: p_i = exp(l_i - l_0). */
    float sum = 0;
    for (int32_t i = 0; i < k; i++) {
        cand[i].p = kern_expf(cand[i].logit - cand[0].logit);
        sum = sum + cand[i].p;
    }
    /* top-p: the shortest prefix whose mass reaches top_p. */
    if (p->top_p < 1.0f) {
        float limit = p->top_p * sum, cum = 0;
        int32_t keep = k;
        for (int32_t i = 0; i < k; i++) {
            cum = cum + cand[i].p;
            if (cum >= limit) {
                keep = i + 1;
                break;
            }
        }
        k = keep;
    }
    /* min-p: drop candidates less likely than min_p times the best (whose p is 1). */
    if (p->min_p > 0) {
        int32_t keep = 1;
        while (keep < k && cand[keep].p >= p->min_p)
            keep++;
        k = keep;
    }
    /* Temperature, then one draw from the counter-based generator. */
    sum = 0;
    for (int32_t i = 0; i < k; i++) {
        cand[i].p = kern_expf((cand[i].logit - cand[0].logit) / p->temperature);
        sum = sum + cand[i].p;
    }
    float target = sample_uniform(p->seed, token_index) * sum, cum = 0;
    for (int32_t i = 0; i < k; i++) {
        cum = cum + cand[i].p;
        if (cum > target)
            return cand[i].id;
    }
    return cand[k - 1].id;
}
