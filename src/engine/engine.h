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

/* Why generation ended: an end-of-generation token ("stop"), the token limit or the
 * context limit ("length"). */
enum engine_finish { ENGINE_FINISH_STOP = 0, ENGINE_FINISH_LENGTH, ENGINE_FINISH_CONTEXT };
/* "stop" or "length", as OpenAI and receipts name them. */
const char *engine_finish_name(enum engine_finish f);

/* Called with each generated token; returning false stops generation early (the result
 * then ends with that token and finish is ENGINE_FINISH_STOP). */
typedef bool (*engine_token_fn)(void *ctx, int32_t id, int64_t index);

/* Generates after the evaluated prompt (e->have_logits): samples token i with index i,
 * stops before an end-of-generation token, after max_tokens tokens (-1: no limit), or
 * when the context is full. ids (capacity e->n_ctx) receives the tokens. Every caller that
 * must produce a receipt's tokens (run, chat, verify-receipt) goes through here, so they
 * cannot drift apart. */
KN_MUST_USE enum kn_status engine_generate(struct engine *e, const struct tok *tk,
                                           struct sample_ctx *sctx,
                                           const struct sample_params *sp, int64_t max_tokens,
                                           engine_token_fn on_token, void *ctx, int32_t *ids,
                                           int64_t *n_ids, enum engine_finish *finish,
                                           struct kn_err *err);

#endif
