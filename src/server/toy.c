/* toy.c: a deterministic stand-in model for testing the server without a real one.
 *
 * Vocabulary: ids 0..255 are bytes, 256 is BOS, 257 is EOS. Each slot keeps a "KV cache"
 * h[pos] = mix(h[pos - 1], token, pos); the logits of a token are a pseudo-random function
 * of its h, favouring lowercase letters and spaces so output reads as text, with a small
 * chance of EOS. A batch that feeds a position whose predecessor was never written, or
 * mixes up slots, fails or changes every later logit: the scheduler tests rely on that.
 * It implements the engine's forward-pass interface (struct engine_lm), so the tests run
 * the engine's own generation step, without a model. */
#include "server.h"
#include "grammar/grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TOY_BOS 256
#define TOY_EOS 257
#define TOY_VOCAB 258

/* The toy's Warm Start: a few sequences with their chain values, least recently used
 * replaced first, longest common prefix restored (the real backend uses engine pcache). */
#define TOY_CACHE_RECS 8

struct toy_rec {
    int32_t *tokens;
    uint64_t *h;
    int64_t n;
    uint64_t last_use;
};

struct toy {
    int n_slots;
    int64_t n_ctx;
    int delay_us;
    uint64_t *h;      /* (n_slots, n_ctx) */
    uint8_t *filled;  /* (n_slots, n_ctx) */
    char pieces[TOY_VOCAB][8];
    struct toy_rec recs[TOY_CACHE_RECS];
    uint64_t clock;
    pthread_mutex_t cmu;  /* guards cstats (read by HTTP threads) */
    struct srv_cache_stats cstats;
};

static uint64_t toy_mix(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static enum kn_status toy_tokenize(void *ctx, const char *text, size_t len, bool add_special,
                                   bool parse_special, int32_t **ids, size_t *n,
                                   struct kn_err *err)
{
    (void)ctx;
    (void)parse_special;
    size_t cap = len + 1;
    int32_t *v = kn_malloc(cap * sizeof *v, err);
    if (!v)
        return KN_E_NOMEM;
    size_t k = 0;
    if (add_special)
        v[k++] = TOY_BOS;
    for (size_t i = 0; i < len; i++)
        v[k++] = (uint8_t)text[i];
    *ids = v;
    *n = k;
    return KN_OK;
}

/* ChatML-like rendering; the documented fallback for models without a template. */
static enum kn_status toy_chat(void *ctx, const struct srv_msg *msgs, size_t n_msgs, int32_t **ids,
                               size_t *n, char **text, struct kn_err *err)
{
    size_t len = 0;
    for (size_t i = 0; i < n_msgs; i++)
        len += strlen(msgs[i].role) + strlen(msgs[i].content) + 32;
    len += 32;
    char *t = kn_malloc(len, err);
    if (!t)
        return KN_E_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n_msgs; i++)
        k += (size_t)snprintf(t + k, len - k, "<|im_start|>%s\n%s<|im_end|>\n", msgs[i].role,
                              msgs[i].content);
    k += (size_t)snprintf(t + k, len - k, "<|im_start|>assistant\n");
    enum kn_status st = toy_tokenize(ctx, t, k, true, true, ids, n, err);
    if (st != KN_OK) {
        free(t);
        return st;
    }
    *text = t;
    return KN_OK;
}

static const char *toy_piece(void *ctx, int32_t id, size_t *len)
{
    struct toy *t = ctx;
    if (id < 0 || id >= 256) {
        *len = 0;
        return "";
    }
    *len = 1;
    return t->pieces[id];
}

static const char *toy_token_text(void *ctx, int32_t id, size_t *len)
{
    struct toy *t = ctx;
    if (id < 0 || id >= TOY_VOCAB) {
        *len = 0;
        return "";
    }
    *len = strlen(t->pieces[id]);
    return t->pieces[id];
}

/* The piece in the shape samplers and grammars take (pctx: the struct toy). */
static const char *toy_sample_piece(const void *ctx, int32_t id, size_t *len)
{
    return toy_piece((void *)ctx, id, len);
}

static enum kn_status toy_grammar_vocab(void *ctx, struct grammar_vocab **out, struct kn_err *err)
{
    const int32_t eog[1] = {TOY_EOS};
    return grammar_vocab_init(out, TOY_VOCAB, toy_sample_piece, ctx, eog, 1, err);
}

static bool toy_is_eog(void *ctx, int32_t id)
{
    (void)ctx;
    return id == TOY_EOS;
}

static void toy_slot_reset(void *ctx, int slot)
{
    struct toy *t = ctx;
    memset(t->filled + (size_t)slot * (size_t)t->n_ctx, 0, (size_t)t->n_ctx);
}

static enum kn_status toy_forward(void *ctx, const struct engine_batch *b, float *logits,
                                  struct kn_err *err)
{
    struct toy *t = ctx;
    for (int64_t i = 0; i < b->n; i++) {
        int s = b->seq[i];
        int64_t p = b->pos[i];
        if (s < 0 || s >= t->n_slots || p < 0 || p >= t->n_ctx || b->tokens[i] < 0 ||
            b->tokens[i] >= TOY_VOCAB)
            return kn_fail(err, KN_E_INTERNAL, "toy: bad batch entry %lld (slot %d, pos %lld)",
                           (long long)i, s, (long long)p);
        size_t base = (size_t)s * (size_t)t->n_ctx;
        if (p > 0 && !t->filled[base + (size_t)p - 1])
            return kn_fail(err, KN_E_INTERNAL, "toy: slot %d position %lld fed before %lld", s,
                           (long long)p, (long long)p - 1);
        uint64_t prev = p > 0 ? t->h[base + (size_t)p - 1] : 0x1234567ull;
        t->h[base + (size_t)p] = toy_mix(prev ^ toy_mix((uint64_t)b->tokens[i] * 131 + (uint64_t)p));
        t->filled[base + (size_t)p] = 1;
    }
    for (int64_t r = 0; r < b->n_out; r++) {
        int64_t i = b->out_rows[r];
        uint64_t h = t->h[(size_t)b->seq[i] * (size_t)t->n_ctx + (size_t)b->pos[i]];
        float *lg = logits + r * TOY_VOCAB;
        for (int32_t v = 0; v < TOY_VOCAB; v++) {
            uint64_t z = toy_mix(h ^ ((uint64_t)v << 40));
            float u = (float)(z >> 40) * (1.0f / 16777216.0f); /* [0, 1) exactly */
            bool text = (v >= 'a' && v <= 'z') || v == ' ';
            lg[v] = text ? 8.0f * u : (v == TOY_EOS ? 4.0f * u : -8.0f + 4.0f * u);
        }
    }
    if (t->delay_us > 0) {
        long us = t->delay_us + (long)(t->delay_us / 10) * (long)b->n;
        struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    return KN_OK;
}

static int64_t toy_cache_restore(void *ctx, int slot, const int32_t *tokens, int64_t keep,
                                 int64_t max_n)
{
    struct toy *t = ctx;
    int best = -1;
    int64_t len = keep;
    for (int i = 0; i < TOY_CACHE_RECS; i++) {
        int64_t l = engine_common_prefix(t->recs[i].tokens, t->recs[i].n, tokens, max_n);
        if (l > len) {
            len = l;
            best = i;
        }
    }
    pthread_mutex_lock(&t->cmu);
    if (best < 0) {
        t->cstats.misses++;
        pthread_mutex_unlock(&t->cmu);
        return keep;
    }
    t->cstats.hits++;
    t->cstats.tokens_restored += len - keep;
    pthread_mutex_unlock(&t->cmu);
    size_t base = (size_t)slot * (size_t)t->n_ctx;
    memcpy(t->h + base + keep, t->recs[best].h + keep, (size_t)(len - keep) * sizeof *t->h);
    memset(t->filled + base + keep, 1, (size_t)(len - keep));
    t->recs[best].last_use = ++t->clock;
    return len;
}

static enum kn_status toy_cache_store(void *ctx, int slot, const int32_t *tokens, int64_t n,
                                      struct kn_err *err)
{
    struct toy *t = ctx;
    size_t base = (size_t)slot * (size_t)t->n_ctx;
    int victim = 0;
    for (int i = 0; i < TOY_CACHE_RECS; i++) {
        struct toy_rec *r = &t->recs[i];
        if (r->n >= n && engine_common_prefix(r->tokens, r->n, tokens, n) == n) {
            r->last_use = ++t->clock; /* held already */
            return KN_OK;
        }
        if (r->last_use < t->recs[victim].last_use)
            victim = i;
    }
    for (int64_t p = 0; p < n; p++)
        if (!t->filled[base + (size_t)p])
            return kn_fail(err, KN_E_INTERNAL, "toy: storing slot %d position %lld never fed",
                           slot, (long long)p);
    struct toy_rec *r = &t->recs[victim];
    int32_t *tk = kn_malloc((size_t)n * sizeof *tk, err);
    uint64_t *h = kn_malloc((size_t)n * sizeof *h, err);
    if (!tk || !h) {
        free(tk);
        free(h);
        return KN_E_NOMEM;
    }
    pthread_mutex_lock(&t->cmu);
    if (r->n)
        t->cstats.evictions++;
    else
        t->cstats.records++;
    t->cstats.stores++;
    pthread_mutex_unlock(&t->cmu);
    free(r->tokens);
    free(r->h);
    memcpy(tk, tokens, (size_t)n * sizeof *tk);
    memcpy(h, t->h + base, (size_t)n * sizeof *h);
    *r = (struct toy_rec){tk, h, n, ++t->clock};
    return KN_OK;
}

static void toy_cache_stats(void *ctx, struct srv_cache_stats *out)
{
    struct toy *t = ctx;
    pthread_mutex_lock(&t->cmu);
    *out = t->cstats;
    pthread_mutex_unlock(&t->cmu);
}

static void toy_free(void *ctx)
{
    struct toy *t = ctx;
    if (!t)
        return;
    for (int i = 0; i < TOY_CACHE_RECS; i++) {
        free(t->recs[i].tokens);
        free(t->recs[i].h);
    }
    pthread_mutex_destroy(&t->cmu);
    free(t->h);
    free(t->filled);
    free(t);
}

enum kn_status srv_toy_backend(struct srv_backend *out, int n_slots, int64_t n_ctx, int delay_us,
                               struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    if (n_slots < 1 || n_ctx < 8)
        return kn_fail(err, KN_E_ARG, "toy: need at least 1 slot and 8 positions");
    struct toy *t = kn_calloc(1, sizeof *t, err);
    if (!t)
        return KN_E_NOMEM;
    size_t cells;
    if (!kn_mul_size((size_t)n_slots, (size_t)n_ctx, &cells)) {
        free(t);
        return kn_fail(err, KN_E_LIMIT, "toy: context too large");
    }
    pthread_mutex_init(&t->cmu, NULL);
    t->n_slots = n_slots;
    t->n_ctx = n_ctx;
    t->delay_us = delay_us;
    t->h = kn_malloc(cells * sizeof *t->h, err);
    t->filled = kn_calloc(cells, 1, err);
    if (!t->h || !t->filled) {
        toy_free(t);
        return KN_E_NOMEM;
    }
    for (int v = 0; v < 256; v++) {
        t->pieces[v][0] = (char)v;
        t->pieces[v][1] = '\0';
    }
    strcpy(t->pieces[TOY_BOS], "<s>");
    strcpy(t->pieces[TOY_EOS], "</s>");
    out->ctx = t;
    out->name = "toy";
    out->model_path = "(built-in toy model)";
    out->device_class = "toy";
    out->n_vocab = TOY_VOCAB;
    out->n_ctx = n_ctx;
    out->n_slots = n_slots;
    out->max_batch = 64 > n_slots ? 64 : n_slots;
    out->max_piece = 4;
    out->chat_format = "chatml";
    out->tokenize = toy_tokenize;
    out->chat = toy_chat;
    out->piece = toy_piece;
    out->token_text = toy_token_text;
    out->is_eog = toy_is_eog;
    out->sample_piece = toy_sample_piece;
    out->sample_pctx = t;
    out->grammar_vocab = toy_grammar_vocab;
    out->lm = (struct engine_lm){
        .ctx = t,
        .n_vocab = TOY_VOCAB,
        .n_seq = n_slots,
        .n_ctx = n_ctx,
        .max_piece = out->max_piece,
        .forward = toy_forward,
        .seq_reset = toy_slot_reset,
        .is_eog = toy_is_eog,
        .piece = toy_piece,
        .sample_piece = toy_sample_piece,
        .sample_pctx = t,
        .cache_restore = toy_cache_restore,
        .cache_store = toy_cache_store,
    };
    out->free = toy_free;
    out->cache_stats = toy_cache_stats;
    return KN_OK;
}
