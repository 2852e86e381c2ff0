/* server.h: `kinetic serve`, an OpenAI-compatible HTTP server (libmicrohttpd) in front of
 * Convoy, the continuous-batching scheduler.
 *
 * Three layers, each usable and testable on its own:
 *   backend  a table of functions over one model: tokenize, render a chat, decode a
 *            token, and the engine's forward-pass interface (struct engine_lm) over one
 *            sequence per slot. srv_toy_backend() is a built-in deterministic stand-in
 *            used to test the layers above without a model.
 *   convoy   the scheduler: n slots, a bounded queue, one thread, driving the engine's
 *            one generation step (engine_slots_step: the batched forward pass, RAD-1,
 *            sampling and the stop rule, shared with kinetic run). A job's tokens and
 *            log-probabilities depend only on the job (its prompt, settings and seed),
 *            never on what else shares the step (docs/numerics.md).
 *   http     routing, auth, limits, OpenAI request parsing and response shapes, SSE.
 *
 * Ownership: the server borrows the backend; a job is shared by its HTTP connection and
 * the scheduler and freed by whichever releases it last (srv_job_release). */
#ifndef KN_SERVER_H
#define KN_SERVER_H

#include "../base/base.h"
#include "../base/json.h"
#include "../engine/session.h"
#include "../sample/sample.h"
#include "../text/text.h"

#include <pthread.h>

/* ---------------------------------------------------------------- backend */

struct srv_msg {
    char *role;
    char *content;
};

struct grammar_vocab;

/* The shared prompt cache's counters (engine.h struct pcache_stats, with the cache's
 * size limit) as /metrics and /slots report them. */
struct srv_cache_stats {
    int64_t hits, misses, tokens_restored, stores, evictions, records;
    size_t bytes, max_bytes;
};

struct srv_backend {
    void *ctx;
    const char *name;          /* model name shown by /v1/models unless --alias */
    const char *model_path;    /* for receipts */
    const char *device_class;  /* e.g. cpu-x86_64-avx2; for receipts */
    /* With a GPU (--device): its name, numerics and --gpu-layers, for receipts; NULL,
     * NULL, -1: the CPU runs everything. */
    const char *device_name, *numerics;
    int64_t gpu_layers;
    int32_t n_vocab;
    int64_t n_ctx;             /* positions per slot */
    const char *cache_type;    /* the slots' KV cache type, "f32", "f16" or "q8_0" (the session's
                                * kv_name), for receipts; NULL for the toy, which makes none */
    size_t kv_bytes_per_slot;  /* one slot's KV cache (model_kv_bytes); 0 for the toy */
    int n_slots;
    int64_t max_batch;         /* most tokens in one step (<= lm.max_batch when set) */
    size_t max_piece;          /* longest token piece in bytes */
    const char *chat_format;   /* the chat template family in use, for the log */

    /* Thread-safe (HTTP threads call them concurrently). *ids is malloc'd. */
    KN_MUST_USE enum kn_status (*tokenize)(void *ctx, const char *text, size_t len,
                                           bool add_special, bool parse_special, int32_t **ids,
                                           size_t *n, struct kn_err *err);
    /* Renders the chat with the model's template (assistant turn opened) and tokenizes
     * it; *text receives the rendered prompt (malloc'd) for logs and receipts. */
    KN_MUST_USE enum kn_status (*chat)(void *ctx, const struct srv_msg *msgs, size_t n_msgs,
                                       int32_t **ids, size_t *n, char **text, struct kn_err *err);
    /* The bytes token id stands for in generated text (control tokens give nothing). */
    const char *(*piece)(void *ctx, int32_t id, size_t *len);
    /* The vocabulary text of a token (for logprobs' "token" fields), any token. */
    const char *(*token_text)(void *ctx, int32_t id, size_t *len);
    bool (*is_eog)(void *ctx, int32_t id);
    /* A token's text as DRY sees it, in sample_ctx_prepare's shape: the same function
     * kinetic run hands to its sampler, so DRY penalises the same tokens (NULL: DRY is
     * refused). Thread-safe, read-only. */
    const char *(*sample_piece)(const void *pctx, int32_t id, size_t *len);
    const void *sample_pctx;
    /* Builds a new grammar vocabulary for this model exactly as kinetic run builds its own
     * (same pieces, same end-of-generation ids), so a grammar allows the same tokens in
     * both (NULL: grammars are refused). The server calls it once and shares the result. */
    KN_MUST_USE enum kn_status (*grammar_vocab)(void *ctx, struct grammar_vocab **out,
                                                struct kn_err *err);
    /* The reasoning markers of the model's family ("<think>", "</think>"), or NULL when
     * its vocabulary has none. Whether a reply starts inside them is decided per rendered
     * prompt (chat_prompt_opens_think, as session_prompt decides it). */
    const char *think_open, *think_close;

    /* The forward pass over the slots' sequences (sequence s: slot s), Warm Start's
     * shared prompt cache included: the engine's step drives it (scheduler thread only). */
    struct engine_lm lm;
    void (*free)(void *ctx);
    /* The prompt cache's counters (NULL: no cache). Thread-safe. */
    void (*cache_stats)(void *ctx, struct srv_cache_stats *out);
    /* Optional (NULL: chat above). Renders OpenAI messages (the JSON array as sent) with
     * the model's template, passing tools (an array or NULL) and kwargs
     * (chat_template_kwargs, an object or NULL) to it; *text receives the rendered prompt
     * (malloc'd). ids may be NULL (text only, for /apply-template); else the prompt's
     * tokens, in which only the template's own text makes control tokens. Thread-safe.
     * KN_E_ARG: the request's fault (bad messages, a template error or
     * raise_exception). */
    KN_MUST_USE enum kn_status (*chat_json)(void *ctx, const struct json_value *messages,
                                            const struct json_value *tools,
                                            const struct json_value *kwargs,
                                            bool add_generation_prompt, int64_t *now,
                                            int32_t **ids, size_t *n, char **text,
                                            struct kn_err *err);
    /* Optional (NULL: POST /v1/embeddings answers that the model gives none). The
     * L2-normalised embedding of ids[0..n-1] (model_embed: pooled as pooling says,
     * truncated to dims values) into out (dims). Thread-safe: calls run one at a time on
     * the backend's own forward pass and KV cache, outside the slots, so an embedding's
     * bits never depend on what the slots or other requests are doing. KN_E_ARG and
     * KN_E_LIMIT are the request's fault. */
    KN_MUST_USE enum kn_status (*embed)(void *ctx, const int32_t *ids, size_t n, int64_t dims,
                                        float *out, struct kn_err *err);
    const char *pooling;       /* the model's pooling ("mean", "cls", "last", "none") */
    int64_t n_embd;            /* the embedding's full length */
    bool embd_matryoshka;      /* "dimensions" below n_embd allowed (model_embed_matryoshka) */
    bool encoder_only;         /* bert, nomic-bert: completions are refused (400) */
    /* The chat renderer chat_json uses (for receipts' template record), or NULL. *now
     * above receives the clock its template's strftime_now read (chat_prompt.now). */
    const struct chat_renderer *renderer;
};

/* A deterministic stand-in model: 256 byte tokens plus BOS (256) and EOS (257); the
 * "KV cache" of a slot is a chain of hashes over its tokens, and the logits of a token
 * are a pseudo-random function of that chain, so any mix-up of slots, positions or
 * chunking changes the output. delay_us: simulated compute per forward call (plus a
 * tenth of it per token). */
KN_MUST_USE enum kn_status srv_toy_backend(struct srv_backend *out, int n_slots, int64_t n_ctx,
                                           int delay_us, struct kn_err *err);

struct srv_model_opts {
    /* The model path, chat template, --ctx-size (per slot), --batch-size (tokens per
     * forward call), --threads and --kv-type, with the session's defaults (the same as
     * kinetic run's); the level is SESSION_MODEL. */
    struct session_opts session;
    int n_slots;
    int64_t cache_ram_mib;     /* the shared prompt cache (Warm Start); 0: none */
};

/* The backend over a GGUF model file (model, tokenizer, chat template, a KV cache per
 * slot). The chat template is chosen as `kinetic run` chooses it (a model without one is
 * a base model and gets the messages raw), unless chat_format forces a family. */
KN_MUST_USE enum kn_status srv_model_backend(struct srv_backend *out, const struct srv_model_opts *o,
                                             struct kn_err *err);

/* ---------------------------------------------------------------- logprobs */

/* log-softmax of the raw logits into lp (n_vocab); the top k (k <= 20) by log-probability,
 * ties by lower id, into top_ids/top_lp (missing entries: id -1). */
void srv_logprobs(const float *logits, int32_t n_vocab, float *lp, int k, int32_t *top_ids,
                  float *top_lp);

/* ---------------------------------------------------------------- jobs */

#define SRV_MAX_TOP_LOGPROBS 20
#define SRV_MAX_STOP TEXT_MAX_STOPS /* one limit for run, chat and the server */

enum srv_job_state { SRV_JOB_QUEUED = 0, SRV_JOB_RUNNING, SRV_JOB_DONE };
enum srv_finish { SRV_FINISH_NONE = 0, SRV_FINISH_STOP, SRV_FINISH_LENGTH, SRV_FINISH_CANCELLED,
                  SRV_FINISH_ERROR };
const char *srv_finish_str(enum srv_finish f);

/* One generation request. The fields above "results" are set before convoy_submit and
 * read-only afterwards; the results are written by the scheduler under the convoy lock. */
struct srv_job {
    int32_t *prompt;           /* (n_prompt) owned */
    size_t n_prompt;
    int64_t max_tokens;        /* >= 1; capped by the slot context */
    char *stop[SRV_MAX_STOP];  /* owned */
    size_t stop_len[SRV_MAX_STOP];
    int n_stop;
    struct sample_params sampling;
    bool seed_given;           /* false: the server drew the seed */
    int n_top;                 /* top log-probabilities kept per token (0..20) */
    bool ignore_eos;           /* benchmarks: end-of-generation tokens do not stop */
    bool want_logprobs;
    /* A grammar constraining the output (grammar, json_schema or response_format), or
     * NULL. The job owns grammar and gstate (a fresh state at the grammar's start);
     * gvocab is the server's shared vocabulary. Only the scheduler advances gstate. */
    struct grammar *grammar;
    struct grammar_state *gstate;
    const struct grammar_vocab *gvocab;
    bool prefill;              /* Zero Wait: evaluate the prompt into the cache, sample nothing */

    /* results (sized for max_tokens at srv_job_alloc_results) */
    enum srv_job_state state;
    enum srv_finish finish;
    char error[256];
    bool error_is_request;     /* the error is the request's fault (a grammar no token can
                                * continue): HTTP 400 rather than 500 */
    int32_t *out_ids;          /* (n_out) generated ids, an end-of-generation id included */
    float *out_lp;             /* (n_out) log-probability of each, if want_logprobs */
    int32_t *top_ids;          /* (n_out, n_top) */
    float *top_lp;
    size_t *text_end;          /* (n_out) text length after each token: the text safe to
                                * show then (a possible stop-string start held back) */
    int64_t n_out;
    int64_t out_cap;           /* max_tokens when the results were sized */
    char *text;                /* generated text safe to show: it ends before a matched stop
                                * string, and while running holds back a tail that may start
                                * one (released at the end) */
    size_t text_len, text_cap;
    bool cancel;               /* set by the HTTP side: free the slot at the next step */
    double t_submit, t_start, t_first, t_done;
    /* speed features (timings): prompt positions not recomputed (held by the slot or
     * restored from the prompt cache), RAD-1 draft tokens verified and accepted; a
     * prefill that gave way to a waiting request before its end */
    int64_t n_cached, draft_n, draft_n_accepted;
    bool preempted;
    uint64_t task;             /* numbered by the convoy at submission, from 1 */

    int64_t n_fed;             /* prompt tokens in the slot's cache (after each step) */

    /* private to convoy */
    pthread_cond_t cv;
    int refs;
    int slot;
    struct srv_job *next;      /* queue link */
};

/* A new job with one reference (the caller's); prompt is copied. */
KN_MUST_USE enum kn_status srv_job_new(struct srv_job **out, const int32_t *prompt, size_t n_prompt,
                                       struct kn_err *err);
/* Sizes the result arrays for job->max_tokens, job->n_top and max_piece bytes per token. */
KN_MUST_USE enum kn_status srv_job_alloc_results(struct srv_job *job, size_t max_piece,
                                                 struct kn_err *err);

/* ---------------------------------------------------------------- convoy */

struct convoy;

struct convoy_stats {
    int n_slots, slots_busy, queued, queue_cap;
    uint64_t jobs_done, jobs_cancelled, tokens_prompt, tokens_generated, steps;
    double busy_seconds;       /* time spent in forward + sampling */
    /* speed features */
    uint64_t draft_proposed, draft_accepted, draft_passes;
    uint64_t prompt_tokens_reused;  /* positions not recomputed (slot or cache) */
    uint64_t slot_reuse_tokens;     /* of them, kept from what the slot held */
    uint64_t cache_restored_tokens; /* of them, copied from the shared prompt cache */
    uint64_t prefills_done, prefills_preempted, prefill_tokens;
    int prefill_queued, prefill_queue_cap;
    int draft_max;                  /* 0: RAD-1 off */
};

/* The speed features (docs/speed.md); zero values: all on, default lengths. */
struct convoy_speed {
    bool no_draft;             /* RAD-1 drafting off */
    int draft_max;             /* most draft tokens per slot and step; 0: 16 */
    bool no_warm_start;        /* neither slot reuse nor the backend's prompt cache */
    int prefill_queue;         /* Zero Wait requests that may wait; 0: 2 x slots */
};

/* Starts the scheduler thread over backend (borrowed) with queue_cap waiting jobs. */
KN_MUST_USE enum kn_status convoy_start(struct convoy **out, struct srv_backend *backend,
                                        int queue_cap, struct kn_err *err);
/* The same with the speed features set (speed NULL: all on). */
KN_MUST_USE enum kn_status convoy_start_speed(struct convoy **out, struct srv_backend *backend,
                                              int queue_cap, const struct convoy_speed *speed,
                                              struct kn_err *err);
/* Queues a Zero Wait job (job->prefill): it runs only in a slot no waiting request needs,
 * with small prompt chunks while others generate, and gives its slot up (storing what it
 * has evaluated) when a request waits for one. KN_E_LIMIT when its queue is full. */
KN_MUST_USE enum kn_status convoy_submit_prefill(struct convoy *c, struct srv_job *job,
                                                 struct kn_err *err);
/* Cancels every job and joins the thread; later submissions fail with KN_E_CANCELLED.
 * The convoy stays valid for the jobs' holders until convoy_free. */
void convoy_stop(struct convoy *c);
void convoy_free(struct convoy *c);
/* Queues job (taking a reference). KN_E_LIMIT when the queue is full, KN_E_CANCELLED when
 * the convoy is stopping. */
KN_MUST_USE enum kn_status convoy_submit(struct convoy *c, struct srv_job *job, struct kn_err *err);
/* Waits until the job has more than seen output tokens, is done, or timeout_ms passed.
 * Returns true if the job is done. */
bool convoy_wait(struct convoy *c, struct srv_job *job, int64_t seen, int timeout_ms);
/* Asks the scheduler to drop the job (it finishes as cancelled). */
void convoy_cancel(struct convoy *c, struct srv_job *job);
/* The convoy lock guards every job's results; hold it while reading them. */
void convoy_lock(struct convoy *c);
void convoy_unlock(struct convoy *c);
/* Drops one reference (the last frees the job). */
void convoy_release(struct convoy *c, struct srv_job *job);
void convoy_get_stats(struct convoy *c, struct convoy_stats *out);

/* One slot as GET /slots and /metrics show it, published by the scheduler under the lock
 * after each admission and step. The job fields are the current job's, or the last one's
 * after it ended (has_job false: the slot never ran one). */
struct convoy_slot_info {
    bool busy;                 /* holds a request or a Zero Wait prefill */
    bool prefill;
    bool has_job;
    uint64_t task;             /* the job's number (srv_job.task) */
    int64_t n_prompt, n_decoded, max_tokens, n_cached;
    int64_t positions;         /* KV cache positions this slot's sequence holds */
    struct sample_params sampling;
    bool ignore_eos;
    int n_top;
};
/* Copies the n_slots entries into out (n_slots of them). */
void convoy_get_slots(struct convoy *c, struct convoy_slot_info *out);
/* KV cache positions in use by busy slots (what a new request cannot have), and all of
 * them (slots x context): the utilization /metrics reports. */
void convoy_kv_usage(struct convoy *c, int64_t *used, int64_t *total);

/* ---------------------------------------------------------------- receipts hook */

struct json_value;
struct chat_renderer;

/* Everything a receipt records about one finished completion (all borrowed). */
struct srv_receipt_input {
    /* How the input became the prompt: a chat rendered by renderer (NULL: none) with
     * tools, kwargs and the clock it read; else a completion prompt given as text
     * (tokenized with special tokens, "text") or as token ids ("ids"). */
    const struct chat_renderer *renderer;
    const struct json_value *tools, *kwargs;
    int64_t render_now;
    bool chat, prompt_is_text;
    /* The reasoning split applied to text, or NULL: none. */
    const char *think_open, *think_close;
    bool think_inside;
    const char *model_path;
    const char *device_class;
    const char *device_name, *numerics; /* srv_backend's */
    int64_t gpu_layers;
    int64_t n_ctx;                 /* the slot context (--ctx-size) */
    const char *cache_type;        /* the slots' KV cache type: "f32", "f16" or "q8_0" */
    const struct json_value *input;/* the messages array or the prompt, as sent */
    const int32_t *prompt;         /* the exact prompt tokens */
    size_t n_prompt;
    const struct sample_params *sampling;
    bool seed_given;
    int64_t max_tokens;            /* -1: no limit but the context */
    const char *const *stop;
    int n_stop;
    const char *grammar;           /* the GBNF text the output was constrained by, or NULL */
    const struct json_value *response_format; /* as the request gave it (json_schema: as
                                   * {"type": "json_schema", "json_schema": {"schema": S}}) */
    const char *finish;            /* "stop" or "length" */
    const char *text;              /* output text after stop strings and reasoning are cut */
    size_t text_len;
    const int32_t *out_ids;        /* generated tokens, without an end-of-generation id */
    int64_t n_out;
};

/* Builds a receipt object (*out, owned by the caller) for a finished completion. */
typedef enum kn_status (*srv_receipt_fn)(void *ctx, const struct srv_receipt_input *in,
                                         struct json_value **out, struct kn_err *err);

/* The receipt module's receipts (src/receipt), signed when the signer has a key. */
struct srv_signer;
/* key_path: an Ed25519 key file (--sign-key), or NULL for unsigned receipts. */
KN_MUST_USE enum kn_status srv_signer_open(struct srv_signer **out, const char *key_path,
                                           struct kn_err *err);
void srv_signer_free(struct srv_signer *s);
/* A srv_receipt_fn; ctx is a struct srv_signer. */
KN_MUST_USE enum kn_status srv_receipt_build(void *ctx, const struct srv_receipt_input *in,
                                             struct json_value **out, struct kn_err *err);

/* ---------------------------------------------------------------- http server */

/* The defaults of the connection limits and deadlines (kinetic serve --help and
 * docs/server.md quote them). */
#define SRV_DEFAULT_TIMEOUT_S 30           /* --timeout: an idle connection is closed */
#define SRV_DEFAULT_HEADER_TIMEOUT_S 10    /* --header-timeout: request line and headers */
#define SRV_DEFAULT_MAX_CONNECTIONS 512    /* --max-connections: open at once, in all */
#define SRV_DEFAULT_MAX_CONNECTIONS_PER_IP 32 /* --max-connections-per-ip */
/* A request body must arrive at this many bytes per second on average, counted from the
 * end of its headers after a grace of the header timeout. */
#define SRV_MIN_BODY_RATE 1024

struct srv_config {
    const char *host;          /* default 127.0.0.1 */
    int port;                  /* 0: any free port (see srv_port) */
    const char *api_key;       /* NULL: no auth */
    const char *alias;         /* model id in responses; NULL: backend name */
    size_t max_body;           /* bytes; default 1 MiB */
    int max_depth;             /* JSON nesting; default 32 */
    int timeout_s;             /* idle connection timeout; 0: SRV_DEFAULT_TIMEOUT_S */
    int header_timeout_s;      /* request line and headers; 0: SRV_DEFAULT_HEADER_TIMEOUT_S */
    int queue;                 /* waiting requests beyond the slots; default 4 * slots */
    int max_connections;       /* open at once, in all; 0: SRV_DEFAULT_MAX_CONNECTIONS */
    int max_connections_per_ip;/* from one address (IPv6: one /64); 0: the default */
    int64_t default_max_tokens;/* when a request names none; 0: the rest of the context */
    srv_receipt_fn receipt;    /* NULL: "receipt": true is refused as unavailable */
    void *receipt_ctx;
    struct convoy_speed speed; /* RAD-1, Warm Start, Zero Wait switches */
    bool no_zero_wait;         /* POST /prefill does nothing (answers {"tokens": 0}) */
    const char *cors;          /* --cors ORIGIN: Access-Control-Allow-Origin on every answer
                                * and CORS preflights answered; NULL: none */
    bool no_verify;            /* --no-verify: POST /verify-receipt is off (403) */
    const char *replica;       /* --replica NAME: the X-Kinetic-Replica header's name;
                                * NULL: HOST:PORT */
    const char *build;         /* the build id the header names (kn_build_id); NULL: none */
};

struct srv;

/* POST /verify-receipt: one at a time, at least this long apart (else 429). */
#define SRV_VERIFY_INTERVAL_S 2
#define SRV_XSTR_(x) #x
#define SRV_XSTR(x) SRV_XSTR_(x) /* a number macro as text (Retry-After, help texts) */

/* Listens and serves. backend NULL: the model is still loading: /health answers 503
 * {"status":"loading model"} and every other endpoint 503 (code model_loading) until
 * srv_attach gives the backend. */
KN_MUST_USE enum kn_status srv_start(struct srv **out, const struct srv_config *cfg,
                                     struct srv_backend *backend, struct kn_err *err);
/* Attaches the backend of a server started without one (borrowed; it must outlive the
 * server) and starts answering. */
KN_MUST_USE enum kn_status srv_attach(struct srv *s, struct srv_backend *backend,
                                      struct kn_err *err);
int srv_port(const struct srv *s);
/* The graceful drain (SIGTERM, a rolling restart): from now on every POST is answered 503
 * (code "draining", Retry-After: a load balancer retries it on another replica) and
 * /health says 503 "draining"; admitted work runs to its end. srv_busy tells when it
 * has: no request waits for a slot or runs in one. srv_stop then ends the rest. */
void srv_drain(struct srv *s);
bool srv_busy(struct srv *s);
/* Stops accepting, cancels work, joins every thread and frees the server. */
void srv_stop(struct srv *s);

#endif
