/* sample.h: turning logits into a token, as a function of (logits, settings, seed,
 * token index) and, for the few samplers that carry state (Mirostat's mu, a grammar), of
 * the tokens sampled before. Random numbers come from a counter-based generator keyed by
 * the seed and the index of the generated token, so speculative verification and plain
 * decoding draw the same number for the same position. Ties break by token id. The order
 * of every float step is part of the numerics contract (docs/numerics.md, "Sampling"). */
#ifndef KN_SAMPLE_H
#define KN_SAMPLE_H

#include "../base/base.h"

struct grammar_state;
struct grammar_vocab;
struct json_value;

/* The steps of the sampler chain, as named in settings and receipts (llama.cpp's names). */
enum sample_step {
    SAMPLE_PENALTIES = 0, /* "penalties": repeat, presence, frequency */
    SAMPLE_DRY,           /* "dry" */
    SAMPLE_TOP_N_SIGMA,   /* "top_n_sigma" */
    SAMPLE_TOP_K,         /* "top_k" */
    SAMPLE_TYPICAL_P,     /* "typ_p" */
    SAMPLE_TOP_P,         /* "top_p" */
    SAMPLE_MIN_P,         /* "min_p" */
    SAMPLE_XTC,           /* "xtc" */
    SAMPLE_TEMPERATURE,   /* "temperature" */
    SAMPLE_N_STEPS
};
#define SAMPLE_MAX_CHAIN 16
#define SAMPLE_MAX_BREAKERS 16
#define SAMPLE_MAX_BREAKER_LEN 64
#define SAMPLE_MAX_BIAS 512

/* One logit bias: added to the token's logit before everything else. A bias of -100 or
 * less (OpenAI's "ban"), or -inf, removes the token. */
struct sample_bias {
    int32_t id;
    float bias;
};

struct sample_params {
    float temperature;       /* <= 0: greedy (argmax, lowest id on ties) */
    int32_t top_k;           /* <= 0: off */
    float top_p;             /* >= 1: off */
    float min_p;             /* <= 0: off */
    float repeat_penalty;    /* 1: off */
    float presence_penalty;  /* 0: off */
    float frequency_penalty; /* 0: off */
    int32_t repeat_last_n;   /* tokens of history the penalties look at; 0: off, -1: all */
    uint64_t seed;           /* 0 .. 2^63-1 (SAMPLE_SEED_MAX), exact as a JSON integer */

    /* ---- added in issue 10; every zero value means "off", so a zeroed struct with the
     * fields above set samples exactly as before. The struct owns everything (no
     * pointers): it can be copied, stored in a receipt and compared with memcmp-free
     * field checks. */
    float typical_p;         /* 0 or >= 1: off */
    float top_n_sigma;       /* <= 0: off */
    float xtc_probability;   /* 0: off */
    float xtc_threshold;     /* > 0.5: off */
    float dry_multiplier;    /* 0: off */
    float dry_base;          /* >= 1 (llama.cpp: 1.75); < 1: off */
    int32_t dry_allowed_length;
    int32_t dry_penalty_last_n; /* 0: off, -1: all history */
    int32_t n_dry_breakers;
    char dry_breakers[SAMPLE_MAX_BREAKERS][SAMPLE_MAX_BREAKER_LEN + 1]; /* non-empty */
    int32_t mirostat;        /* 0: off, 1 or 2 */
    float mirostat_tau;
    float mirostat_eta;
    int32_t min_keep;        /* 0 or 1: keep at least one */
    int32_t n_logit_bias;
    struct sample_bias logit_bias[SAMPLE_MAX_BIAS];
    int32_t n_samplers;      /* 0: the default chain */
    uint8_t samplers[SAMPLE_MAX_CHAIN]; /* enum sample_step values, applied in this order */

    /* ---- the generation limit, kept here so that it is one row of the settings table
     * like the others (n_predict, receipts' max_tokens). The sampler never reads it; the
     * caller of the generation loop passes it on. */
    int64_t n_predict;       /* -1: until end of generation or the context limit */
};

/* ================================================================ the settings table
 *
 * Every sampling setting is one row of sample_settings[]: its names (in /set and
 * messages, in receipts and requests, llama.cpp's and OpenAI's other request keys, the
 * command-line flag), type, default, range, whether it is on, and help text. Defaults,
 * range checks and their messages, the flags of `kinetic run` and `kinetic chat`, the
 * server's request parsing, receipt writing and reading, and the REPL's /set, /save and
 * /load all walk this one table; adding a setting is adding a row (docs/architecture.md). */

enum sample_type {
    SAMPLE_T_FLOAT,    /* a float field */
    SAMPLE_T_INT,      /* an int32_t field */
    SAMPLE_T_INT64,    /* an int64_t field (n_predict; JSON null and -1: no limit) */
    SAMPLE_T_SEED,     /* the uint64_t seed, 0 .. SAMPLE_SEED_MAX */
    SAMPLE_T_BREAKERS, /* dry_breakers: text form a JSON array of strings, or "none" */
    SAMPLE_T_BIAS,     /* logit_bias: text form llama.cpp's ID+B,ID-B,ID-inf, or "none" */
    SAMPLE_T_CHAIN,    /* samplers: text form "top_k;top_p;temperature", or "default" */
};
#define SAMPLE_SEED_MAX INT64_MAX

struct sample_setting {
    const char *name;        /* /set, /save and messages: "temperature", "n_predict" */
    const char *key;         /* receipts and requests: "temperature", "max_tokens" */
    const char *alias[2];    /* other request keys, first found wins: "max_completion_tokens" */
    const char *flag;        /* the long flag of run and chat, without dashes: "temp" */
    char short_flag;         /* 0: none */
    enum sample_type type;
    size_t offset;           /* of the field in struct sample_params */
    double def;              /* numeric default (list settings: see sample_params_default) */
    double lo, hi;           /* numeric range, inclusive (the seed: 0 .. SAMPLE_SEED_MAX) */
    bool lo_open;            /* lo itself is refused ("above 0") */
    bool no_zero;            /* 0 is refused (n_predict: -1 or 1 ..) */
    const char *note;        /* after the range in messages and help: "1: off" */
    bool always;             /* in every receipt (the settings of the receipt spec's first
                              * version); the others only when on, so receipts that do not
                              * use them keep their bytes */
    bool (*on)(const struct sample_params *p); /* changes what is sampled; NULL: always */
    const char *metavar;     /* "F", "N", "LIST" */
    const char *help;
};
#define SAMPLE_MAX_SETTINGS 32 /* rows of the table at most (sizes the CLI's arrays) */
extern const struct sample_setting sample_settings[];
extern const size_t sample_n_settings;

/* The row whose name, key, alias or flag is name (the flag without dashes), or NULL. */
const struct sample_setting *sample_setting_find(const char *name);
/* Sets the row's field from its text form (a number; the list forms above), checking the
 * range. Every surface reports a bad value with the message this writes: "temperature
 * must be between 0 and 100, not 150". */
KN_MUST_USE enum kn_status sample_setting_parse(const struct sample_setting *s, const char *text,
                                                struct sample_params *p, struct kn_err *err);
/* Sets the row's field from a JSON value (n_predict: null is -1, no limit), with the same
 * checks and messages. */
KN_MUST_USE enum kn_status sample_setting_read(const struct sample_setting *s,
                                               const struct json_value *v,
                                               struct sample_params *p, struct kn_err *err);
/* Appends the field's text form (what sample_setting_parse reads back to the same value)
 * to b; false when out of memory. */
KN_MUST_USE bool sample_setting_format(const struct sample_setting *s,
                                       const struct sample_params *p, struct kn_buf *b);
/* Writes the row's range ("between 0 and 100 (1: off)") into buf. */
void sample_setting_range(const struct sample_setting *s, char *buf, size_t n);
/* Whether the row is on in p (rows without a predicate: always). */
bool sample_setting_on(const struct sample_setting *s, const struct sample_params *p);

/* Kinetic's defaults, those of the receipt spec: temperature 0.8, top_k 50, top_p 0.95,
 * min_p 0.05, repeat_penalty 1.1, repeat_last_n 64, no presence/frequency penalty; the
 * samplers added later are off (typical_p 1, dry_multiplier 0, xtc_probability 0,
 * mirostat 0) with llama.cpp's values for their secondary settings (xtc_threshold 0.1,
 * dry_base 1.75, dry_allowed_length 2, dry_penalty_last_n -1, breakers "\n" ":" "\"" "*",
 * mirostat_tau 5, mirostat_eta 0.1); seed 0, n_predict -1. All from the table. */
void sample_params_default(struct sample_params *p);
/* Checks every setting's range (the table's); names the bad one. */
KN_MUST_USE enum kn_status sample_params_check(const struct sample_params *p, struct kn_err *err);
/* Checks the logit_bias ids against a vocabulary of n_vocab tokens. */
KN_MUST_USE enum kn_status sample_params_check_vocab(const struct sample_params *p, int64_t n_vocab,
                                                     struct kn_err *err);
/* A fresh random seed from the OS, for requests that give none: below 2^53, so that it is
 * exact in every JSON reader, JavaScript's included. */
uint64_t sample_fresh_seed(void);

/* The default chain: penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc,
 * temperature (llama.cpp's order; the original Kinetic chain is the same order with the
 * steps that were off left out, so old settings give the same tokens). */
extern const uint8_t sample_default_chain[9];
/* The name of a step ("top_k"...), or NULL. */
const char *sample_step_name(int step);
/* Parses a step name (llama.cpp's names and aliases: "top-k", "typical", "temp"...) into
 * *step; false if unknown. */
bool sample_step_parse(const char *name, size_t len, int *step);
/* Parses a chain given as names separated by ';', ',' or spaces ("top_k;top_p;temperature")
 * into p->samplers. Errors name the unknown step. */
KN_MUST_USE enum kn_status sample_chain_parse(struct sample_params *p, const char *text,
                                              struct kn_err *err);

/* ---- settings as JSON (receipts, server requests, /save)
 *
 * What sample_params_json_write writes, in table order: SAMPLE_JSON_BASE the rows every
 * receipt has (temperature ... seed, max_tokens; n_predict -1 as null), SAMPLE_JSON_EXTRA
 * the other rows that are on (a sampler's secondary settings with it), SAMPLE_JSON_ALL
 * every row, on or off. Floats are written with the fewest digits that read back to the
 * same float; logit_bias as [[id, bias], ...] with bans (<= -100, -inf) as -100;
 * samplers as names. */
enum {
    SAMPLE_JSON_BASE = 1,
    SAMPLE_JSON_EXTRA = 2,
    SAMPLE_JSON_ALL = 4,
};
KN_MUST_USE enum kn_status sample_params_json_write(const struct sample_params *p,
                                                    struct json_value *obj, unsigned what,
                                                    struct kn_err *err);
/* How sample_params_json_read reads: SAMPLE_READ_ALIASES also takes each row's aliases
 * and its name (requests, /load); SAMPLE_READ_BASE requires the base rows (receipts);
 * SAMPLE_READ_STRICT refuses keys that are neither a row nor in extra (NULL-terminated). */
enum {
    SAMPLE_READ_ALIASES = 1,
    SAMPLE_READ_BASE = 2,
    SAMPLE_READ_STRICT = 4,
};
/* The value of row s in obj and the key it was found under (key may be NULL), or NULL:
 * its key, or with SAMPLE_READ_ALIASES its aliases first, then its key and name, where
 * null means "not given" (except for n_predict, where it means no limit). */
const struct json_value *sample_setting_lookup(const struct sample_setting *s,
                                               const struct json_value *obj, unsigned how,
                                               const char **key);
/* Reads the rows present in obj into p (others untouched: call sample_params_default
 * first), each checked by sample_setting_read, so errors name the setting and its range.
 * logit_bias may also be OpenAI's object form {"123": -100, ...} and samplers a string
 * ("top_k;top_p") or an array of names. */
KN_MUST_USE enum kn_status sample_params_json_read(const struct json_value *obj,
                                                   struct sample_params *p, unsigned how,
                                                   const char *const *extra, struct kn_err *err);

/* The counter-based generator: a uniform float in [0, 1) with 24 random bits, a pure
 * function of (seed, index). */
float sample_uniform(uint64_t seed, uint64_t index);
/* The key of XTC's own stream: XTC's draw for token i is sample_uniform(sample_xtc_key(seed), i),
 * independent of the token draw sample_uniform(seed, i). */
uint64_t sample_xtc_key(uint64_t seed);

/* Scratch space and per-request state for one sequence's sampling, sized for the
 * vocabulary once. */
struct sample_ctx {
    int32_t n_vocab;
    struct sample_cand *cand; /* n_vocab candidates */
    int32_t *count;           /* n_vocab occurrence counts, all zero between calls */
    /* ---- set up by sample_ctx_prepare (optional; needed by DRY, Mirostat, grammars) */
    int32_t *dry_len;         /* n_vocab: 1 + longest repeat per token, zero between calls */
    uint8_t *dry_single;      /* n_vocab: 1 if the token's text contains a breaker */
    int32_t *dry_z;           /* max_history scratch for the Z-function */
    int64_t max_history;
    const char *(*piece)(const void *pctx, int32_t id, size_t *len);
    const void *pctx;
    struct sample_cand *scratch; /* n_vocab scratch (typical-p's order) */
    uint8_t *allowed;         /* n_vocab grammar mask */
    float mirostat_mu;        /* Mirostat's state; NaN until the first Mirostat draw of a
                               * request, which starts it at 2 * tau */
    struct grammar_state *grammar;       /* not owned; advanced by each sampled token */
    const struct grammar_vocab *gvocab;  /* not owned */
};
struct sample_cand {
    int32_t id;
    float logit;
    float p;
};

KN_MUST_USE enum kn_status sample_ctx_init(struct sample_ctx *s, int32_t n_vocab,
                                           struct kn_err *err);
void sample_ctx_free(struct sample_ctx *s);

/* Prepares s for one request with settings p: checks logit_bias ids against the
 * vocabulary, sizes DRY's scratch for histories of up to max_history tokens (the context
 * size; DRY looks at no more), finds the tokens whose text contains a DRY sequence breaker
 * (piece(pctx, id, &len) gives a token's bytes; sample_tok_piece adapts a struct tok) and
 * resets Mirostat. Needed when DRY is on (without it DRY does nothing); piece may be NULL
 * when DRY is off. Call it (or sample_ctx_reset) before each new request. */
KN_MUST_USE enum kn_status sample_ctx_prepare(struct sample_ctx *s, const struct sample_params *p,
                                              int64_t max_history,
                                              const char *(*piece)(const void *pctx, int32_t id,
                                                                   size_t *len),
                                              const void *pctx, struct kn_err *err);
/* Resets the per-request state (Mirostat's mu) for a new request. */
void sample_ctx_reset(struct sample_ctx *s);
/* Attaches a grammar (NULL to detach): only tokens that continue it can be sampled, and
 * end-of-generation tokens (those gv was built with) only where it is complete. Each
 * sampled token advances the state. Neither is owned. */
void sample_ctx_set_grammar(struct sample_ctx *s, struct grammar_state *g,
                            const struct grammar_vocab *gv);
/* tok_piece(t, id, true, len) in the shape sample_ctx_prepare wants (pctx: a struct tok). */
const char *sample_tok_piece(const void *tok, int32_t id, size_t *len);

/* Samples the token at generated-token index token_index from logits (n_vocab floats,
 * not modified). history holds the sequence so far (prompt and generated tokens) for
 * the penalties and DRY. Returns the token id; with a grammar attached, -1 when no token
 * can continue it (the grammar cannot be completed with this vocabulary). The per-request
 * state (Mirostat's mu, the grammar) advances by the returned token: it is a function of
 * the tokens sampled so far, so replaying a request reproduces it. */
int32_t sample_token(struct sample_ctx *s, const struct sample_params *p, const float *logits,
                     const int32_t *history, int64_t n_history, uint64_t token_index);

#endif
