/* sampling.c: the server's sampler: penalties, top-k, top-p, min-p and temperature, drawn
 * with a counter-based random number keyed by (seed, token index), so a token's draw
 * depends on nothing but the request (docs/numerics.md rule 8). Candidates are ordered by
 * logit, ties by lower id, so the order never depends on a sort's stability. */
#include "server.h"
#include "kernels/ops.h"

#include <assert.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

struct srv_sampler {
    int32_t n_vocab;
    float *work;        /* (n_vocab) penalised logits */
    int32_t *idx;       /* (n_vocab) candidate ids */
    double *p;          /* (n_vocab) candidate probabilities */
    int32_t *count;     /* (n_vocab) occurrences in the penalty window, zero between calls */
};

void srv_sampling_defaults(struct srv_sampling *s)
{
    memset(s, 0, sizeof *s);
    s->temperature = 1.0;
    s->top_p = 1.0;
    s->top_k = 40;
    s->min_p = 0.05;
    s->repeat_penalty = 1.0;
    s->repeat_last_n = 64;
}

uint64_t srv_fresh_seed(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^ (uint64_t)getpid();
    }
    return v & 0x7FFFFFFFFFFFFFFFull; /* fits a JSON int64 */
}

enum kn_status srv_sampler_create(struct srv_sampler **out, int32_t n_vocab, struct kn_err *err)
{
    *out = NULL;
    struct srv_sampler *s = kn_calloc(1, sizeof *s, err);
    if (!s)
        return KN_E_NOMEM;
    s->n_vocab = n_vocab;
    s->work = kn_malloc((size_t)n_vocab * sizeof *s->work, err);
    s->idx = kn_malloc((size_t)n_vocab * sizeof *s->idx, err);
    s->p = kn_malloc((size_t)n_vocab * sizeof *s->p, err);
    s->count = kn_calloc((size_t)n_vocab, sizeof *s->count, err);
    if (!s->work || !s->idx || !s->p || !s->count) {
        srv_sampler_free(s);
        return KN_E_NOMEM;
    }
    *out = s;
    return KN_OK;
}

void srv_sampler_free(struct srv_sampler *s)
{
    if (!s)
        return;
    free(s->work);
    free(s->idx);
    free(s->p);
    free(s->count);
    free(s);
}

/* SplitMix64 finaliser: a bijective mix of the counter. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A uniform double in [0, 1) for (seed, index). */
static double uniform(uint64_t seed, int64_t index)
{
    uint64_t r = mix64(mix64(seed + 0x9E3779B97F4A7C15ull) ^ (uint64_t)index);
    return (double)(r >> 11) * 0x1.0p-53;
}

/* True if a ranks before b: higher value first, then lower id. */
static inline bool before(float va, int32_t a, float vb, int32_t b)
{
    return va > vb || (va == vb && a < b);
}

static const float *g_sort_vals; /* only for the comparator below; the scheduler is single-threaded */
static int cmp_desc(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    float va = g_sort_vals[a], vb = g_sort_vals[b];
    if (before(va, a, vb, b))
        return -1;
    if (before(vb, b, va, a))
        return 1;
    return 0;
}

/* Puts the k best ids of v (n) into idx[0..k-1], best first; returns k (<= n). */
static int64_t top_k_ids(const float *v, int32_t n, int64_t k, int32_t *idx)
{
    if (k <= 0 || k > 256 || k >= n) {
        for (int32_t i = 0; i < n; i++)
            idx[i] = i;
        g_sort_vals = v;
        qsort(idx, (size_t)n, sizeof *idx, cmp_desc);
        return k > 0 && k < n ? k : n;
    }
    int64_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (m == k && !before(v[i], i, v[idx[k - 1]], idx[k - 1]))
            continue;
        int64_t j = m < k ? m++ : k - 1;
        while (j > 0 && before(v[i], i, v[idx[j - 1]], idx[j - 1])) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    return m;
}

int32_t srv_sample(struct srv_sampler *s, const struct srv_sampling *p, const float *logits,
                   const int32_t *history, int64_t n_history, int64_t token_index)
{
    int32_t n = s->n_vocab;
    float *w = s->work;
    memcpy(w, logits, (size_t)n * sizeof *w);

    /* Penalties over the last repeat_last_n tokens of the history. */
    bool pen = p->repeat_penalty != 1.0 || p->presence_penalty != 0.0 ||
               p->frequency_penalty != 0.0;
    if (pen && p->repeat_last_n != 0) {
        int64_t from = p->repeat_last_n < 0 || p->repeat_last_n > n_history
                           ? 0 : n_history - p->repeat_last_n;
        for (int64_t i = from; i < n_history; i++)
            if (history[i] >= 0 && history[i] < n)
                s->count[history[i]]++;
        for (int64_t i = from; i < n_history; i++) {
            int32_t t = history[i];
            if (t < 0 || t >= n || s->count[t] == 0)
                continue;
            float x = w[t];
            if (p->repeat_penalty != 1.0)
                x = x > 0 ? (float)(x / p->repeat_penalty) : (float)(x * p->repeat_penalty);
            x -= (float)(s->count[t] * p->frequency_penalty + p->presence_penalty);
            w[t] = x;
            s->count[t] = 0; /* applied once; also leaves count zeroed for the next call */
        }
    }

    if (p->temperature <= 0.0) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (before(w[i], i, w[best], best))
                best = i;
        return best;
    }

    int64_t m = top_k_ids(w, n, p->top_k, s->idx);
    /* Probabilities at the temperature, in rank order (the sum's order is fixed). */
    double mx = w[s->idx[0]], sum = 0.0;
    for (int64_t i = 0; i < m; i++) {
        s->p[i] = exp(((double)w[s->idx[i]] - mx) / p->temperature);
        sum += s->p[i];
    }
    /* min-p: drop candidates below min_p times the best one's probability. */
    if (p->min_p > 0.0) {
        int64_t keep = 1;
        while (keep < m && s->p[keep] >= p->min_p * s->p[0])
            keep++;
        if (keep < m) {
            m = keep;
            sum = 0.0;
            for (int64_t i = 0; i < m; i++)
                sum += s->p[i];
        }
    }
    /* top-p: the smallest prefix whose mass reaches top_p. */
    if (p->top_p < 1.0) {
        double acc = 0.0;
        int64_t keep = 0;
        while (keep < m) {
            acc += s->p[keep++] / sum;
            if (acc >= p->top_p)
                break;
        }
        if (keep < m) {
            m = keep;
            sum = 0.0;
            for (int64_t i = 0; i < m; i++)
                sum += s->p[i];
        }
    }
    double u = uniform(p->seed, token_index) * sum, acc = 0.0;
    for (int64_t i = 0; i < m; i++) {
        acc += s->p[i];
        if (u < acc)
            return s->idx[i];
    }
    return s->idx[m - 1];
}

void srv_logprobs(struct srv_sampler *s, const float *logits, float *lp, int k, int32_t *top_ids,
                  float *top_lp)
{
    int32_t n = s->n_vocab;
    /* Kinetic's own exp and log (docs/numerics.md rule 6): no libm in the bits. */
    kern_log_softmax(lp, logits, n);
    assert(k >= 0 && k <= SRV_MAX_TOP_LOGPROBS);
    if (k > 0) {
        int64_t m = top_k_ids(lp, n, k, s->idx);
        for (int64_t i = 0; i < m; i++) {
            top_ids[i] = s->idx[i];
            top_lp[i] = lp[s->idx[i]];
        }
        for (int64_t i = m; i < k; i++) {
            top_ids[i] = -1;
            top_lp[i] = -INFINITY;
        }
    }
}
