/* engine.h: generation over the model. A single-sequence engine (a KV cache, the token
 * history, prompt processing in fixed-size chunks, engine_generate) and the one
 * generation step it shares with the server: slots over many sequences, each sampled
 * until an end-of-generation token, a stop string, a token limit or the context limit.
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

/* RAD-1's counters of one generation (one engine_generate call, one slot's request). */
struct engine_draft_stats {
    int64_t proposed;     /* draft tokens sent to verification */
    int64_t accepted;     /* draft tokens equal to the sampled token (and generation went on) */
    int64_t passes;       /* verification passes (forward passes with drafts) */
    int64_t steps;        /* forward passes of generation, with or without drafts */
    int64_t full;         /* passes whose drafts were all accepted */
    int64_t none;         /* passes whose first draft was already rejected */
    int64_t partial;      /* passes with some drafts accepted, then one rejected */
};

/* The forward-pass interface the generation step drives (slots.c): n_seq sequences, each
 * with its own KV cache of n_ctx positions. engine_lm_model implements it over a real
 * model; the server's toy (src/server/toy.c) over a hash chain, so the scheduling can be
 * tested without a model. */
struct engine_batch {
    int64_t n;
    /* token i belongs to sequence seq[i] at position pos[i]; a sequence's tokens appear in
     * position order and the positions below each one hold its earlier tokens */
    const int32_t *tokens, *pos, *seq;
    const int64_t *out_rows;  /* logits are wanted for tokens out_rows[0..n_out-1] */
    int64_t n_out;
};

struct engine_lm {
    void *ctx;
    int32_t n_vocab;
    int n_seq;
    int64_t n_ctx;            /* positions per sequence */
    int64_t max_batch;        /* most tokens per forward call; 0: no limit */
    size_t max_piece;         /* longest piece() in bytes */
    /* Runs the batch; writes logits (b->n_out, n_vocab). */
    KN_MUST_USE enum kn_status (*forward)(void *ctx, const struct engine_batch *b, float *logits,
                                          struct kn_err *err);
    /* Forgets sequence seq (NULL: nothing to forget; positions are overwritten in order). */
    void (*seq_reset)(void *ctx, int seq);
    bool (*is_eog)(void *ctx, int32_t id);
    /* The bytes token id adds to generated text (control tokens: none). */
    const char *(*piece)(void *ctx, int32_t id, size_t *len);
    /* A token's text as DRY sees it (sample_ctx_prepare's shape), and its context. */
    const char *(*sample_piece)(const void *pctx, int32_t id, size_t *len);
    const void *sample_pctx;
    /* Warm Start's shared prompt cache (both NULL: none). Sequence seq holds
     * tokens[0..keep-1]; cache_restore copies the cached entries of positions keep.. of
     * the longest known prefix of tokens[0..max_n-1] into it and returns that prefix's
     * length (keep when the cache knows nothing longer); cache_store records seq's first
     * n positions, which hold tokens[0..n-1]. */
    int64_t (*cache_restore)(void *ctx, int seq, const int32_t *tokens, int64_t keep,
                             int64_t max_n);
    KN_MUST_USE enum kn_status (*cache_store)(void *ctx, int seq, const int32_t *tokens,
                                              int64_t n, struct kn_err *err);
};

struct engine_slots;

struct engine {
    const struct model *m;
    struct kern_pool *pool;   /* not owned */
    struct model_fwd *fwd;
    struct model_kv kv;
    int64_t n_ctx, n_batch;
    int32_t *history;         /* (n_ctx + 1) tokens at positions 0..n_past-1 */
    int64_t n_past;
    int32_t *pos;             /* (n_batch) scratch positions */
    float *logits;            /* (n_vocab) logits after the last evaluated token */
    bool have_logits;
    /* ---- generation: a one-slot client of the multi-sequence step (slots.c) over kv */
    struct engine_lm lm;      /* engine_lm_model over fwd and kv */
    struct engine_slots *slots;
    bool draft;               /* RAD-1 drafting on in engine_generate */
    int32_t draft_max;        /* most draft tokens per pass (< n_batch) */
    struct engine_draft_stats draft_stats; /* of the last engine_generate call */
    /* ---- stop strings and the generated text (generate.c) */
    char **stop_strs;         /* engine_set_stop's strings, owned */
    int n_stop;
    const char *text;         /* engine_text's bytes (borrowed from the slot) */
    size_t text_n;
    int stop_matched;
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
/* As engine_eval, and writes the logits of tokens first..n-1 of this call into out
 * ((n - first, n_vocab), in order; 0 <= first < n), as perplexity needs. A token's logits
 * do not depend on which other rows are asked for (docs/numerics.md), so each row holds
 * the bits engine_eval would leave after that token. */
KN_MUST_USE enum kn_status engine_eval_rows(struct engine *e, const int32_t *tokens, int64_t n,
                                            int64_t first, float *out, struct kn_err *err);

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
 * is full. ids (capacity e->n_ctx) receives the tokens. It is a one-slot client of the
 * generation step the server's slots take (engine_slots_step): run, chat, serve and
 * verify-receipt produce tokens in one place, so they cannot drift apart. */
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
/* Called by engine_free. */
void engine_stop_free(struct engine *e);

/* ================================================================ speed features
 * RAD-1 drafting (draft.c), Warm Start (pcache.c) and Zero Wait (prefill.c). None of them
 * changes a token or a logit: a KV entry's bits do not depend on how or when it was
 * computed (docs/numerics.md rules 1 and 5), and sampling is a pure function of
 * (logits, settings, seed, token index, history) (rule 8). */

/* ---- RAD-1 (draft.c): its constants and rules, used by the generation step. */

/* The most draft tokens per pass for a draft_max setting (0: the default, 16; no_draft:
 * 0, drafting off) within a batch of max_batch tokens (a pass holds the decoded token
 * and its drafts). KN_E_ARG for a setting outside 0..ENGINE_DRAFT_LIMIT. */
#define ENGINE_DRAFT_LIMIT 256
KN_MUST_USE enum kn_status engine_draft_max(bool no_draft, int64_t draft_max, int64_t max_batch,
                                            int32_t *out, struct kn_err *err);
/* The draft length a generation starts with. */
int32_t engine_draft_start(int32_t dmax);
/* The next draft length after a pass that accepted `accepted` of `proposed` drafts
 * (counted in st's full/none/partial): double after a full pass, else one more than were
 * accepted; within 1..dmax. */
int32_t engine_draft_adapt(int32_t len, int32_t dmax, int64_t accepted, int64_t proposed,
                           struct engine_draft_stats *st);
/* The drafts for a sequence seq[0..p] whose token at position p is fed next: at most
 * len and room, none past the context's end (n_ctx) or the token limit (n_out generated
 * of max_tokens, -1: none; row k samples token n_out + k). Writes them to out (RAD-1's
 * lookup window) and returns how many. */
int64_t engine_draft_next(const int32_t *seq, int64_t p, int32_t len, int64_t room, int64_t n_ctx,
                          int64_t n_out, int64_t max_tokens, int32_t *out);

/* Forgets every position from n_past on (n_past <= e->n_past); the KV entries below stay
 * valid, the ones above are overwritten by the next tokens. Clears have_logits when the
 * sequence gets shorter. */
void engine_truncate(struct engine *e, int64_t n_past);

/* RAD-1's proposal: looks the longest suffix (n_max..n_min tokens) of seq[0..n-1] up in
 * the earlier sequence (the most recent occurrence wins) and writes up to max_out of the
 * tokens that followed it to out. Returns how many (0: no match). Pure; no allocation. */
int64_t engine_draft_propose(const int32_t *seq, int64_t n, int32_t n_max, int32_t n_min,
                             int32_t *out, int64_t max_out);

/* Length of the common prefix of a[0..na-1] and b[0..nb-1]: the positions a sequence
 * holding a may keep for b (Warm Start, Zero Wait, chat turns). */
int64_t engine_common_prefix(const int32_t *a, int64_t na, const int32_t *b, int64_t nb);

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
/* Length of the longest cached prefix of tokens[0..n-1] a KV cache of n_ctx positions
 * could restore (no copy): only records made under the RoPE choice such a cache makes
 * count (phi3's LongRoPE: the long or short factors, by context; model_rope_long). */
int64_t pcache_lookup(struct pcache *c, int64_t n_ctx, const int32_t *tokens, int64_t n);
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
 * type and shape and the numerics version, each record's RoPE choice kept; checksummed. pcache_load adds a file's records
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

/* ================================================================ many sequences
 * The one generation step (slots.c), for one sequence (engine_generate) or many (the
 * server's Convoy). Each step runs ONE forward pass over every generating slot's next
 * token and its RAD-1 drafts, then prompt chunks of slots still reading their prompt
 * (requests' first, Zero Wait prefills' with what is left), then samples each slot that
 * has logits, row by row in order, and applies the per-token stop rule. A request's
 * tokens and logits depend only on the request (its prompt, settings and seed), never on
 * what else shares the step (docs/numerics.md rules 1, 2, 5 and 8): joining, leaving,
 * chunking and slot numbers change only timing.
 *
 * One thread drives a struct engine_slots (no locking inside); the client owns the
 * queues and decides which request enters which free slot (engine_slots_pick helps). */

struct grammar_state;
struct grammar_vocab;
struct text_stop;

/* One request for a slot. Everything is borrowed until the slot ends. */
struct engine_req {
    const int32_t *prompt;    /* (n_prompt) the whole sequence so far; copied at entry */
    int64_t n_prompt;         /* >= 1; < n_ctx unless logits is set */
    const struct sample_params *sp;
    struct sample_ctx *sctx;  /* NULL: the slot's own sampler */
    struct grammar_state *grammar;        /* with the slot's own sampler: attached, or NULL */
    const struct grammar_vocab *gvocab;
    int64_t max_tokens;       /* -1: no limit but the context */
    const char *const *stop;  /* stop strings (non-empty), n_stop <= TEXT_MAX_STOPS */
    int n_stop;
    bool ignore_eos;          /* end-of-generation tokens are ordinary tokens */
    bool prefill;             /* Zero Wait: evaluate the prompt into the cache, sample nothing */
    /* The prompt is evaluated in the slot's sequence already (positions 0..n_prompt-1)
     * and these are its last logits (n_vocab, read at the first step): the slot samples
     * at once, no prefix reuse. NULL: the step feeds the prompt. */
    const float *logits;
};

/* One sampled token, handed to the step's callback in slot order, each slot's tokens in
 * order. */
struct engine_tok {
    int slot;
    int32_t id;
    int64_t index;            /* its index among the slot's generated tokens */
    const float *logits;      /* (n_vocab) the row it was sampled from (valid during the call) */
    bool eog;                 /* an end-of-generation token: it ends the output, not part of it */
    bool last;                /* the step ends the slot with this token */
    const char *text;         /* the bytes it adds to the text safe to show (a tail that may */
    size_t text_len;          /* start a stop string is held back; a matched one never shows) */
    const char *tail;         /* last: the held-back tail released at the end */
    size_t tail_len;
};
/* Returning false ends the slot after this token (finish ENGINE_FINISH_STOP). */
typedef bool (*engine_tok_fn)(void *ctx, const struct engine_tok *t);

struct engine_slot {
    /* ---- read by the client between steps */
    bool busy;                /* holds a request */
    bool done;                /* the request ended (finish, stuck, failed); engine_slot_end */
    enum engine_finish finish;
    bool stuck;               /* ended because no token continues the grammar, which is
                               * not complete (finish ENGINE_FINISH_STOP) */
    bool failed;              /* the forward pass failed (its error was returned) */
    int stop_matched;         /* the stop string that ended it, or -1 */
    int64_t n_fed;            /* prompt positions in the sequence */
    int64_t n_out;            /* generated tokens (an end-of-generation token not counted) */
    int64_t n_cached;         /* prompt positions not recomputed (slot or prompt cache) */
    struct engine_draft_stats draft;
    const float *last_logits; /* the row the last token was sampled from (until the next step) */
    /* ---- private to slots.c */
    struct engine_req req;
    struct sample_ctx *sctx, *own;
    int32_t *history;         /* (n_ctx + 1) prompt, then generated tokens */
    int64_t held;             /* leading positions of the sequence that hold history */
    bool fresh, store_pending;
    int32_t next_token;       /* sampled, not yet fed */
    int32_t draft_len;
    int32_t *feed;            /* (dmax + 1) this step's [token, d1..dk] */
    int n_draft;
    int64_t row0;             /* first output row this step; -1: none */
    bool decoding;
    struct text_stop *stop;
    char *text;               /* this token's bytes (text_n), then the released tail (tail_n) */
    size_t text_n, tail_n, text_cap;
};

struct engine_slots_stats {
    uint64_t steps, tokens_prompt, draft_proposed, draft_accepted, draft_passes;
    uint64_t prompt_tokens_reused;  /* positions not recomputed (slot or cache) */
    uint64_t slot_reuse_tokens;     /* of them, kept from what the slot held */
    uint64_t cache_restored_tokens; /* of them, copied from the shared prompt cache */
};

struct engine_slots_params {
    int64_t max_batch;        /* most tokens per step (<= lm->max_batch when that is set) */
    bool no_draft;            /* RAD-1 off */
    int64_t draft_max;        /* most drafts per slot and step; 0: RAD-1's default */
    bool no_warm_start;       /* neither slot reuse nor the prompt cache */
};

struct engine_slots {
    const struct engine_lm *lm;   /* borrowed */
    int n_slots;
    int64_t max_batch;
    int32_t dmax;                 /* most drafts per slot and step; 0: RAD-1 off */
    bool warm;
    struct engine_slot *slot;     /* (n_slots) */
    /* batch scratch, sized once */
    int32_t *tokens, *pos, *seq;
    int64_t *out_rows;
    float *logits;                /* (out_cap, n_vocab) */
    int64_t out_cap;
    struct engine_slots_stats stats;
};

/* Slots over lm's sequences (slot s uses sequence s; n_slots <= lm->n_seq). */
KN_MUST_USE enum kn_status engine_slots_init(struct engine_slots *es, const struct engine_lm *lm,
                                             int n_slots, const struct engine_slots_params *p,
                                             struct kn_err *err);
void engine_slots_free(struct engine_slots *es);
/* The free slot whose sequence holds the longest prefix of prompt (lowest index on a
 * tie); -1 when none is free. */
int engine_slots_pick(const struct engine_slots *es, const int32_t *prompt, int64_t n);
/* The slot for a request (Zero Wait's rule): the free slot engine_slots_pick chooses;
 * else, for a generating request, a running prefill gives its slot up: it ends (what it
 * evaluated is stored at the next flush) and *preempted names its slot (else -1).
 * Returns -1 when no slot can be had (the request waits). */
int engine_slots_admit(struct engine_slots *es, const int32_t *prompt, int64_t n, bool prefill,
                       int *preempted);
/* Whether a prompt of n tokens fits a slot: a prefill's up to the context, a generating
 * request's with a position left for its first token. KN_E_LIMIT (or KN_E_ARG: empty). */
KN_MUST_USE enum kn_status engine_slots_check_prompt(const struct engine_slots *es, int64_t n,
                                                     bool prefill, struct kn_err *err);
/* Gives free slot s the request: sets its sampler up (the per-request state afresh, the
 * grammar attached) and its stop strings. The slot enters at the next step: it keeps
 * what its sequence holds of the prompt and restores more from the prompt cache. Fails
 * (the slot stays free) when the sampler or the stop strings refuse the settings. */
KN_MUST_USE enum kn_status engine_slot_begin(struct engine_slots *es, int s,
                                             const struct engine_req *r, struct kn_err *err);
/* Frees slot s, done or not (a cancelled request, a preempted prefill): what its sequence
 * holds (prompt and accepted tokens) is stored in the prompt cache at the next flush and
 * stays for the slot's next request. */
void engine_slot_end(struct engine_slots *es, int s);
/* Stores the sequences of ended slots in the prompt cache (done before every step). */
void engine_slots_flush(struct engine_slots *es);
/* How many slots hold a request that is not done. */
int engine_slots_running(const struct engine_slots *es);
/* Runs one step over every running slot, calling fn (may be NULL) for each sampled
 * token. On a failed forward pass every running slot ends failed (its sequence
 * forgotten) and the error is returned. */
KN_MUST_USE enum kn_status engine_slots_step(struct engine_slots *es, engine_tok_fn fn, void *ctx,
                                             struct kn_err *err);

/* ---- engine_lm over a real model (lm.c): model_forward_multi over one KV cache per
 * sequence, the tokenizer's pieces and end-of-generation ids, and an optional shared
 * prompt cache (Warm Start). */
struct engine_lm_model_params {
    int n_seq;
    int64_t n_ctx;            /* positions per sequence */
    int64_t max_batch;        /* tokens per forward call */
    enum model_kv_type kv_type;
    size_t cache_bytes;       /* the shared prompt cache; 0: none */
};
/* Opens the sequences' KV caches and the forward pass (owned; freed by
 * engine_lm_model_close). m, tk and pool are borrowed. */
KN_MUST_USE enum kn_status engine_lm_model_open(struct engine_lm *out, const struct model *m,
                                                const struct tok *tk, struct kern_pool *pool,
                                                const struct engine_lm_model_params *p,
                                                struct kn_err *err);
void engine_lm_model_close(struct engine_lm *lm);
/* The model's prompt cache, or NULL. */
struct pcache *engine_lm_model_cache(const struct engine_lm *lm);
/* For struct engine (engine.c): the interface over caches and a forward pass the caller
 * keeps (kvs: n_seq caches), without a prompt cache; and engine_lm_model_bind points it
 * at those caches again (kvs NULL: unchanged) and at the tokenizer whose pieces and
 * end-of-generation ids the step uses (engine_generate binds both per call, so a moved
 * struct engine still works). */
KN_MUST_USE enum kn_status engine_lm_model_wrap(struct engine_lm *out, const struct model *m,
                                                struct model_fwd *fwd, struct model_kv *kvs,
                                                int n_seq, int64_t max_batch, struct kn_err *err);
void engine_lm_model_bind(struct engine_lm *lm, struct model_kv *kvs, const struct tok *tk);

/* ---------------------------------------------------------------- the repack cache */

/* The repack cache (rcache.c): the CPU's repacked weights kept in a file and mapped at
 * the next start instead of rebuilt; the same bits either way. The session opens one
 * for its model (session_opts.repack_cache) and hands rcache_repack to model_open. */
#define RCACHE_ENV "KINETIC_REPACK_CACHE" /* the setting when no flag gives one */
struct rcache;
/* setting: a folder, "off", or NULL / "" for $KINETIC_REPACK_CACHE, else
 * kn_cache_dir()/repack. *out is NULL when off. A folder that cannot be named only costs a
 * note on stderr (prefixed with who, NULL: "kinetic"); errors are out of memory. */
KN_MUST_USE enum kn_status rcache_open(struct rcache **out, const char *setting,
                                       const char *model_path, const char *who,
                                       struct kn_err *err);
/* The model_load_opts.repack_fn of a cache (ctx: the struct rcache, NULL: off): maps a
 * valid file for these weights, else repacks in memory (kern_weight_repack) and writes
 * the file. The weights borrow from the mapping: close the model before the cache. */
KN_MUST_USE enum kn_status rcache_repack(void *ctx, struct kern_pool *pool,
                                         struct kern_weight *const *ws, size_t n,
                                         struct kn_err *err);
void rcache_close(struct rcache *rc);

#endif
