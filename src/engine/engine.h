/* engine.h: a single-sequence decode loop over the model: a KV cache, the token
 * history, prompt processing in fixed-size chunks (micro-batches), and generation with
 * the sampler until an end-of-generation token, a token limit or the context limit.
 *
 * Chunking never changes a result (docs/numerics.md): a prompt evaluated in chunks of 1,
 * 7 or 512 tokens leaves the same KV cache bits and the same logits. */
#ifndef KN_ENGINE_H
#define KN_ENGINE_H

#include "../base/base.h"
#include "../kernels/kernels.h"
#include "../model/model.h"

struct engine_params {
    int64_t n_ctx;            /* KV cache positions (context size) */
    int64_t n_batch;          /* most tokens per forward pass (micro-batch) */
    enum model_kv_type kv_type;
    /* Speed features (spec), all on when zero: */
    bool no_draft;            /* turn RAD-1 drafting off (verify-receipt does) */
    int32_t draft_max;        /* most draft tokens per verification pass; 0: default (16) */
};

struct engine {
    const struct model *m;
    struct kern_pool *pool;   /* not owned */
    struct model_fwd *fwd;
    struct model_kv kv;
    int64_t n_ctx, n_batch;
    int32_t *history;         /* (n_ctx) tokens at positions 0..n_past-1 */
    int64_t n_past;
    int32_t *pos;             /* (n_batch) scratch positions */
    float *logits;            /* (n_vocab) logits after the last evaluated token */
    bool have_logits;
    /* ---- RAD-1 drafting (draft.c); see the banner at the end of this header. */
    bool draft;               /* drafting on in engine_generate */
    int32_t draft_max;        /* most draft tokens per pass (< n_batch) */
    int32_t draft_len;        /* the adaptive draft length now */
    float *draft_logits;      /* (draft_max + 1, n_vocab) verification rows */
    int64_t *draft_rows;      /* (n_batch) 0, 1, 2, ...: every row of a batch */
    int32_t *draft_tokens;    /* (draft_max + 1) the token being decoded, then the drafts */
    struct engine_draft_stats {
        int64_t proposed;     /* draft tokens sent to verification */
        int64_t accepted;     /* draft tokens equal to the sampled token */
        int64_t passes;       /* verification passes (forward passes with drafts) */
        int64_t steps;        /* forward passes of generation, with or without drafts */
        int64_t full;         /* passes whose drafts were all accepted */
        int64_t none;         /* passes whose first draft was already rejected */
        int64_t partial;      /* passes with some drafts accepted, then one rejected */
    } draft_stats;            /* of the last engine_generate call */
    /* ---- stop strings and the generated text (generate.c) */
    struct text_stop *stop; /* engine_set_stop's matcher (n == 0: no stop strings) */
    char **stop_strs;         /* its strings, owned */
    char *text;               /* the bytes safe to show after the current token */
    size_t text_n, text_cap;
};

KN_MUST_USE enum kn_status engine_init(struct engine *e, const struct model *m, struct kern_pool *pool,
                                       const struct engine_params *p, struct kn_err *err);
void engine_free(struct engine *e);
/* Forgets the sequence (the cache is overwritten by the next tokens). */
void engine_reset(struct engine *e);

/* Appends n tokens at positions n_past.., in chunks of at most n_batch, and leaves the
 * logits after the last one in e->logits. Fails with KN_E_LIMIT (nothing evaluated)
 * when the tokens do not fit in the context. */
KN_MUST_USE enum kn_status engine_eval(struct engine *e, const int32_t *tokens, int64_t n,
                                       struct kn_err *err);

/* ---------------------------------------------------------------- generation */

struct tok;
struct sample_params;
struct sample_ctx;

/* Why generation ended: an end-of-generation token, a stop string or a grammar that
 * cannot go on ("stop"), the token limit or the context limit ("length"). */
enum engine_finish { ENGINE_FINISH_STOP = 0, ENGINE_FINISH_LENGTH, ENGINE_FINISH_CONTEXT };
/* "stop" or "length", as OpenAI and receipts name them. */
const char *engine_finish_name(enum engine_finish f);

/* Called with each generated token; returning false stops generation early (the result
 * then ends with that token and finish is ENGINE_FINISH_STOP). */
typedef bool (*engine_token_fn)(void *ctx, int32_t id, int64_t index);

/* Generates after the evaluated prompt (e->have_logits): samples token i with index i,
 * stops before an end-of-generation token, after the token whose text completes a stop
 * string (engine_set_stop), after max_tokens tokens (-1: no limit), or when the context
 * is full. ids (capacity e->n_ctx) receives the tokens. Every caller that
 * must produce a receipt's tokens (run, chat, verify-receipt) goes through here, so they
 * cannot drift apart. */
KN_MUST_USE enum kn_status engine_generate(struct engine *e, const struct tok *tk,
                                           struct sample_ctx *sctx,
                                           const struct sample_params *sp, int64_t max_tokens,
                                           engine_token_fn on_token, void *ctx, int32_t *ids,
                                           int64_t *n_ids, enum engine_finish *finish,
                                           struct kn_err *err);

/* Stop strings for the following engine_generate calls (copied; n = 0: none; at most
 * TEXT_MAX_STOPS, each non-empty). They are matched on the bytes of the token pieces
 * (tok_piece without control tokens), across token boundaries; the token that completes
 * one is the last generated token and finish is ENGINE_FINISH_STOP. */
KN_MUST_USE enum kn_status engine_set_stop(struct engine *e, const char *const *stops, int n,
                                           struct kn_err *err);
/* The generated text that is safe to show, the same with or without drafting: inside an
 * on_token callback, the bytes that token adds (a tail that could start a stop string is
 * held back until ruled out; a matched stop string and everything after it never
 * appear); after engine_generate returns, the held-back tail released at the end (empty
 * when a stop string matched). Concatenated, the pieces are the output text. */
const char *engine_text(const struct engine *e, size_t *len);
/* The index of the stop string that ended the last engine_generate, or -1. */
int engine_stop_matched(const struct engine *e);
/* For the generation loops (generate.c, draft.c): engine_text_begin starts a generation's
 * text; engine_text_push feeds a generated token and returns true when it completed a stop
 * string; engine_text_end releases the held-back tail. */
KN_MUST_USE enum kn_status engine_text_begin(struct engine *e, const struct tok *tk,
                                             struct kn_err *err);
bool engine_text_push(struct engine *e, const struct tok *tk, int32_t id);
void engine_text_end(struct engine *e);
/* Called by engine_free. */
void engine_stop_free(struct engine *e);

/* ================================================================ speed features
 * RAD-1 drafting (draft.c), Warm Start (pcache.c) and Zero Wait (prefill.c). None of them
 * changes a token or a logit: a KV entry's bits do not depend on how or when it was
 * computed (docs/numerics.md rules 1 and 5), and sampling is a pure function of
 * (logits, settings, seed, token index, history) (rule 8). */

/* Called by engine_init / engine_free: sizes and frees the drafting buffers. */
KN_MUST_USE enum kn_status engine_draft_init(struct engine *e, const struct engine_params *p,
                                             struct kn_err *err);
void engine_draft_free(struct engine *e);

/* Appends n tokens (1 <= n <= n_batch) at positions n_past.. in one forward pass and
 * writes the logits of every one of them to logits_out (n, n_vocab); e->logits gets the
 * last row. Row i equals what engine_eval would leave in e->logits after token i. */
KN_MUST_USE enum kn_status engine_eval_all(struct engine *e, const int32_t *tokens, int64_t n,
                                           float *logits_out, struct kn_err *err);

/* Forgets every position from n_past on (n_past <= e->n_past); the KV entries below stay
 * valid, the ones above are overwritten by the next tokens. Clears have_logits when the
 * sequence gets shorter. */
void engine_truncate(struct engine *e, int64_t n_past);

/* RAD-1's proposal: looks the longest suffix (n_max..n_min tokens) of seq[0..n-1] up in
 * the earlier sequence (the most recent occurrence wins) and writes up to max_out of the
 * tokens that followed it to out. Returns how many (0: no match). Pure; no allocation. */
int64_t engine_draft_propose(const int32_t *seq, int64_t n, int32_t n_max, int32_t n_min,
                             int32_t *out, int64_t max_out);

/* engine_generate's loop with drafting (engine_generate calls it when e->draft): the same
 * tokens, finish reason, callbacks and final state (n_past, history, e->logits) as the
 * plain loop, with fewer forward passes when the text repeats itself. */
KN_MUST_USE enum kn_status engine_generate_draft(struct engine *e, const struct tok *tk,
                                                 struct sample_ctx *sctx,
                                                 const struct sample_params *sp,
                                                 int64_t max_tokens, engine_token_fn on_token,
                                                 void *ctx, int32_t *ids, int64_t *n_ids,
                                                 enum engine_finish *finish, struct kn_err *err);

/* ---- Warm Start: the prompt cache (pcache.c). Thread-safe: server slots may share one.
 * Records token sequences with their KV entries; a new prompt restores the longest
 * prefix it shares with any record, at any token boundary. Bounded to max_bytes (tokens
 * and KV rows), least recently used records evicted first. */
struct pcache;
struct pcache_stats {
    int64_t hits, misses;       /* restores that copied entries / found nothing new */
    int64_t tokens_restored;    /* positions copied into engines */
    int64_t stores, stores_redundant, evictions;
    size_t bytes;               /* held now */
    int64_t records;            /* held now */
};
/* A cache for engines of model m with KV type `type`. */
KN_MUST_USE enum kn_status pcache_create(struct pcache **out, const struct model *m,
                                         enum model_kv_type type, size_t max_bytes,
                                         struct kn_err *err);
void pcache_free(struct pcache *c);
void pcache_clear(struct pcache *c);
struct pcache_stats pcache_get_stats(struct pcache *c);
/* Length of the longest cached prefix of tokens[0..n-1] (no copy). */
int64_t pcache_lookup(struct pcache *c, const int32_t *tokens, int64_t n);
/* Makes e hold the longest known prefix of tokens[0..max_n-1] (max_n <= n): keeps what e
 * holds already (its common prefix with tokens), then copies further KV entries from c
 * (c may be NULL). Sets n_past (and the history) to that length and returns it; e has no
 * logits afterwards when anything changed. */
int64_t pcache_restore(struct pcache *c, struct engine *e, const int32_t *tokens, int64_t n,
                       int64_t max_n);
/* Records e's first n positions (n <= e->n_past; a sequence larger than the cache keeps
 * the prefix that fits). Fails only for lack of memory. */
KN_MUST_USE enum kn_status pcache_store(struct pcache *c, const struct engine *e, int64_t n,
                                        struct kn_err *err);
/* The same two on a bare KV cache whose first `keep` positions hold tokens[0..keep-1]
 * (server slots, which have no engine): pcache_restore_kv copies the entries of positions
 * keep.. of the longest cached prefix of tokens[0..max_n-1] into kv and returns its
 * length (keep when the cache knows nothing longer); pcache_store_kv records kv's first n
 * positions, which hold tokens[0..n-1]. */
int64_t pcache_restore_kv(struct pcache *c, struct model_kv *kv, const int32_t *tokens,
                          int64_t keep, int64_t max_n);
KN_MUST_USE enum kn_status pcache_store_kv(struct pcache *c, const struct model_kv *kv,
                                           const int32_t *tokens, int64_t n, struct kn_err *err);
/* The cache file (docs/speed.md): bound to the model's BLAKE3 (64 hex digits), the KV
 * type and shape and the numerics version; checksummed. pcache_load adds a file's records
 * (evicting as needed) and fails with KN_E_FORMAT, leaving the cache empty, for anything
 * wrong: callers warn and carry on with an empty cache. pcache_save writes atomically. */
KN_MUST_USE enum kn_status pcache_load(struct pcache *c, const char *path, const char *model_hex,
                                       struct kn_err *err);
KN_MUST_USE enum kn_status pcache_save(struct pcache *c, const char *path, const char *model_hex,
                                       struct kn_err *err);

/* ---- Zero Wait and prompt evaluation (prefill.c). */

/* Pre-evaluates a partial prompt (text still being typed) and keeps it: reuses the
 * common prefix of tokens and what e holds, evaluates the rest. The final prompt, given
 * to engine_eval_prompt, then costs only the tokens after the longest common prefix (the
 * last token of a partial text may tokenize differently once more text comes; the
 * common-prefix rule takes care of it). n may be 0 (nothing to do). */
KN_MUST_USE enum kn_status engine_prefill(struct engine *e, const int32_t *tokens, int64_t n,
                                          struct kn_err *err);
/* Evaluates a prompt for generation, reusing (1) what e already holds (Zero Wait, a
 * previous chat turn) and (2) the prompt cache c (NULL: none), and evaluating at least the
 * last token, so e->logits are the prompt's. With c, records the prompt in c afterwards.
 * *n_reused (may be NULL) receives how many positions were not recomputed. The logits
 * and KV entries are bit-identical to a cold engine_eval of the whole prompt. */
KN_MUST_USE enum kn_status engine_eval_prompt(struct engine *e, struct pcache *c,
                                              const int32_t *tokens, int64_t n,
                                              int64_t *n_reused, struct kn_err *err);

#endif
