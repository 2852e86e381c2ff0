/* sample.h: turning logits into a token, as a pure function of (logits, settings, seed,
 * token index). Random numbers come from a counter-based generator keyed by the seed and
 * the index of the generated token, so speculative verification and plain decoding draw
 * the same number for the same position. Ties break by token id. The order of every
 * float step is part of the numerics contract (docs/numerics.md, "Sampling"). */
#ifndef KN_SAMPLE_H
#define KN_SAMPLE_H

#include "../base/base.h"

struct sample_params {
    float temperature;       /* <= 0: greedy (argmax, lowest id on ties) */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    int32_t repeat_last_n;   /* tokens of history the penalties look at; 0: off, -1: all */
    uint64_t seed;
};

/* Kinetic's defaults, those of the receipt spec: temperature 0.8, top_k 50, top_p 0.95,
 * min_p 0.05, repeat_penalty 1.1, repeat_last_n 64, no presence/frequency penalty. */
void sample_params_default(struct sample_params *p);
/* Checks every setting's range; names the bad one. */
KN_MUST_USE enum kn_status sample_params_check(const struct sample_params *p, struct kn_err *err);
/* A fresh random seed from the OS, for requests that give none. */
uint64_t sample_fresh_seed(void);

/* The counter-based generator: a uniform float in [0, 1) with 24 random bits, a pure
 * function of (seed, index). */
float sample_uniform(uint64_t seed, uint64_t index);

/* Scratch space for one sequence's sampling, sized for the vocabulary once. */
struct sample_ctx {
    int32_t n_vocab;
    struct sample_cand *cand; /* n_vocab candidates */
    int32_t *count;           /* n_vocab occurrence counts, all zero between calls */
};
struct sample_cand {
    int32_t id;
    float logit;
    float p;
};

KN_MUST_USE enum kn_status sample_ctx_init(struct sample_ctx *s, int32_t n_vocab,
                                           struct kn_err *err);
void sample_ctx_free(struct sample_ctx *s);

/* Samples the token at generated-token index token_index from logits (n_vocab floats,
 * not modified). history holds the sequence so far (prompt and generated tokens) for
 * the penalties. Returns the token id. */
int32_t sample_token(struct sample_ctx *s, const struct sample_params *p, const float *logits,
                     const int32_t *history, int64_t n_history, uint64_t token_index);

#endif
