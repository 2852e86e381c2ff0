/* session.h: what `kinetic run`, `kinetic chat`, `kinetic serve` and `verify-receipt` open
 * before they generate, from one options struct with one set of defaults: the model (or
 * only its vocabulary), the tokenizer, the chat template, the thread pool, the context and
 * KV decisions, one engine with its sampler, grammar and stop strings, and the Warm Start
 * file. It also holds the steps every caller shares:
 *   session_prompt   messages + template settings -> rendered prompt and prompt tokens
 *                    (the one function run, chat, serve and verify all call)
 *   session_generate prompt tokens -> generated tokens (engine_eval_prompt, then
 *                    engine_generate)
 *   session_reply_*  the generated text split into answer and reasoning, kept and printed
 *   session_record   what a receipt records of the run (receipt_from_run consumes it;
 *                    the receipt module sits above the engine, so the record is plain)
 * A default decided here is decided for all four: the context min(trained, 4096), the
 * thread count (CPUs online, at most 16), the prompt batch 512, the KV type
 * (SESSION_KV_TYPE_DEFAULT), the
 * reasoning markers and whether a reply starts inside them, the stop-string limit
 * (TEXT_MAX_STOPS). */
/* The session is above the chat templates and the grammar and below the receipt module:
 * it fills a plain record the receipt consumes. */
#ifndef KN_SESSION_H
#define KN_SESSION_H

#include "../base/base.h"
#include "../chat/chat.h"
#include "../model/model.h"
#include "../sample/sample.h"
#include "../text/text.h"
#include "engine.h"

#include <stdio.h>

struct gguf_file;
struct grammar;
struct grammar_vocab;
struct grammar_state;
struct json_value;
struct receipt_template;

#define SESSION_CTX_MAX_DEFAULT 4096   /* the default context: min(trained, this) */
#define SESSION_BATCH_DEFAULT 512      /* prompt tokens per forward pass */
#define SESSION_BATCH_MAX 65536        /* the most --batch-size accepts */
#define SESSION_THREADS_MAX_DEFAULT 16 /* the default threads: CPUs online, at most this */
#define SESSION_CACHE_RAM_DEFAULT 2048 /* MiB of the Warm Start file's cache */
#define SESSION_KV_TYPE_DEFAULT "f16"  /* the KV cache element type (llama.cpp's default) */

/* How much a session opens. */
enum session_level {
    SESSION_VOCAB = 0, /* the GGUF metadata, tokenizer and template (run --print-prompt) */
    SESSION_MODEL,     /* + the weights, thread pool, context and KV type (serve: its slots
                        * hold their own caches) */
    SESSION_ENGINE,    /* + one engine with its sampler, grammar and stop strings */
};

struct session_opts {
    const char *model_path;
    enum session_level level;
    const char *name;          /* for warnings on stderr, e.g. "kinetic run"; NULL: none */
    /* The chat template (chat_renderer_init's policy). */
    bool no_template;          /* the prompt comes as token ids: no template is loaded */
    bool raw;                  /* the prompt as is (--raw) */
    bool conversation;         /* chat, serve: no template gets the plain turns format */
    const char *chat_format, *chat_template, *chat_template_kwargs;
    /* Load settings; 0 / NULL: the defaults above. */
    int64_t ctx_size;
    int64_t batch;
    int threads;
    const char *kv_type;       /* "f32", "f16" or "q8_0" */
    /* The device (--device, --gpu-layers): the first gpu_layers layers run on device, a
     * backend of the device seam (NULL: the CPU runs everything); gpu_layers < 0 or more
     * than the model has: all. device_class and device_name are what receipts record of
     * it (NULL: the CPU's). Borrowed. */
    struct kern_backend *device;
    int64_t gpu_layers;
    const char *device_class, *device_name;
    /* The repack cache (engine.h, rcache_open): a folder, "off", or NULL for
     * $KINETIC_REPACK_CACHE, else the user's cache folder (--repack-cache). */
    const char *repack_cache;
    bool no_draft;
    int32_t draft_max;         /* 0: the engine's default */
    /* Sampling (SESSION_ENGINE), n_predict included: checked, logit-bias ids against the
     * vocabulary too. */
    struct sample_params sp;
    const char *const *stop;   /* n_stop non-empty strings (copied) */
    int n_stop;
    /* A grammar every generation follows (NULL: none), its GBNF text and the
     * response_format it came from (NULL: none), for receipts. Borrowed. */
    const struct grammar *grammar;
    const char *gbnf;
    const struct json_value *response_format;
};

/* Kinetic's defaults: sample_params_default, level SESSION_ENGINE, gpu_layers -1 (all
 * on the device, when there is one), the rest zero (each zero meaning its default). */
void session_opts_default(struct session_opts *o);

/* The defaults, for callers that report them before a model is open. */
int session_default_threads(void);
/* asked, or min(trained, SESSION_CTX_MAX_DEFAULT) when asked is 0. */
int64_t session_ctx_size(int64_t asked, int64_t n_ctx_train);

struct session {
    struct session_opts o;     /* as given, defaults filled in; strings borrowed */
    struct gguf_file *gguf_own;/* SESSION_VOCAB: the file (else the model's) */
    const struct gguf_file *gguf;
    struct model *m;           /* NULL at SESSION_VOCAB */
    struct tok *tk;
    struct chat_renderer cr;
    bool cr_ok;
    int64_t n_vocab;
    int64_t n_ctx, n_batch;
    enum model_kv_type kv_type;
    const char *kv_name;       /* "f32", "f16" or "q8_0": what the receipt records */
    const char *think_open, *think_close; /* the reasoning markers (chat_think_markers) */
    bool think_native;         /* the vocabulary has them as tokens */
    struct kern_pool *pool;
    struct rcache *rc;         /* the repack cache the weights may borrow from, or NULL */
    /* SESSION_ENGINE */
    struct engine e;
    bool engine_ok;
    struct sample_ctx sctx;
    bool sctx_ok;
    struct grammar_vocab *gvocab;
    struct grammar_state *gstate;
    int32_t *gen;              /* (n_ctx) the generated tokens */
    char *stops[TEXT_MAX_STOPS]; /* owned copies (the engine has its own) */
    int n_stop;
    size_t split_cap;          /* bytes a reply split can produce from one feed */
    struct pcache *pc;         /* Warm Start (session_open_cache), or NULL */
    const char *cache_path;
    char model_hex[65];        /* with pc: the model file's BLAKE3 the cache is bound to */
    double cache_load_s;
};

/* Opens everything o->level asks for; settings that need no model (KV type, sampling
 * settings) are checked before it is loaded. Prints the template warnings on stderr (prefixed
 * with o->name). Errors name the problem (a bad --kv-type, settings out of range, a
 * logit bias outside the vocabulary, a context too small for anything). */
KN_MUST_USE enum kn_status session_open(struct session *s, const struct session_opts *o,
                                        struct kn_err *err);
void session_close(struct session *s);
/* Raises a SESSION_MODEL session to SESSION_ENGINE with the options it was opened with
 * (the one struct: sampling settings, drafting switches, grammar; no stop strings yet,
 * session_set_stop adds them), checking the sampling settings then: verify-receipt checks
 * a receipt against the model's vocabulary before it starts the rerun. */
KN_MUST_USE enum kn_status session_start_engine(struct session *s, struct kn_err *err);

/* Sets the stop strings of the following generations (copied; at most TEXT_MAX_STOPS,
 * each non-empty); on failure the old ones stay. */
KN_MUST_USE enum kn_status session_set_stop(struct session *s, const char *const *stops, int n,
                                            struct kn_err *err);

/* ---------------------------------------------------------------- prompts */

/* A conversation to render: plain messages, or OpenAI-style JSON messages (with tools
 * and template kwargs). */
struct session_input {
    const struct chat_message *msgs; /* when not NULL: these n_msgs messages */
    size_t n_msgs;
    const struct json_value *messages; /* else this JSON array */
    const struct json_value *tools, *kwargs;
    bool no_generation_prompt; /* leave the assistant turn closed (continue a message) */
};

struct session_prompt {
    struct chat_prompt cp;     /* the rendered text and its segments */
    int32_t *ids;              /* the tokens (malloc'd) */
    int64_t n;
    bool think_inside;         /* the template opened the reasoning: the reply starts in it */
};

/* Renders the conversation with the session's template and tokenizes it: control tokens
 * only from the template's own text, one BOS when the model wants it. With --raw the
 * template is "raw" and no generation prompt is added. ids may be skipped (want_ids false:
 * the text only). Thread-safe (the server calls it from its HTTP threads). */
KN_MUST_USE enum kn_status session_prompt(const struct session *s, const struct session_input *in,
                                          bool want_ids, struct session_prompt *out,
                                          struct kn_err *err);
/* session_prompt with a renderer of the caller's instead of the session's, add saying
 * whether the generation prompt is added: verify-receipt renders a receipt's input with
 * the receipt's template, through the same rendering and tokenization. */
KN_MUST_USE enum kn_status session_prompt_with(const struct session *s,
                                               const struct chat_renderer *cr,
                                               const struct session_input *in, bool add,
                                               bool want_ids, struct session_prompt *out,
                                               struct kn_err *err);
void session_prompt_free(struct session_prompt *p);

/* ---------------------------------------------------------------- generation */

struct session_gen {
    int32_t *ids;              /* (n_ctx) the generated tokens; owned by the session */
    int64_t n;
    enum engine_finish finish;
    bool by_string;            /* finish STOP because a stop string matched */
    int64_t n_reused;          /* prompt positions not recomputed (Warm Start, Zero Wait) */
    double prompt_s, gen_s;
};

/* Evaluates the prompt (reusing what the engine holds and the Warm Start cache), then
 * generates with sp, at most sp->n_predict tokens (a grammar starts afresh). on_token as
 * for engine_generate. */
KN_MUST_USE enum kn_status session_generate(struct session *s, const struct sample_params *sp,
                                            const int32_t *prompt, int64_t n_prompt,
                                            engine_token_fn on_token, void *ctx,
                                            struct session_gen *out, struct kn_err *err);
/* "eog", "stop_string", "length" or "context": kinetic run's stop reason. */
const char *session_stop_name(const struct session_gen *g);
/* Warm Start from a file (SESSION_ENGINE): a prompt cache of at most ram_mib MiB bound to
 * the model's BLAKE3 (model_hex, 64 hex digits; the caller hashes the file), filled from
 * path when it exists. A file that does not fit is ignored with a warning (it is rewritten
 * by session_save_cache). */
KN_MUST_USE enum kn_status session_open_cache(struct session *s, const char *path,
                                              int64_t ram_mib, const char *model_hex,
                                              struct kn_err *err);
/* Writes the Warm Start file (when the session has one). */
KN_MUST_USE enum kn_status session_save_cache(struct session *s, struct kn_err *err);

/* ---------------------------------------------------------------- the reply's text */

/* The generated text split into answer and reasoning as it streams, both kept; printed
 * to out (NULL: not printed), the reasoning dimmed on a terminal or hidden. */
struct session_reply {
    struct text_think think;
    FILE *out;
    bool show_reasoning, dim, in_reasoning;
    char *content, *reasoning; /* the split's scratch (split_cap bytes each) */
    struct kn_buf text, rtext; /* the answer and the reasoning so far */
};
KN_MUST_USE enum kn_status session_reply_init(struct session_reply *r, const struct session *s,
                                              bool think_inside, FILE *out, bool show_reasoning,
                                              struct kn_err *err);
void session_reply_free(struct session_reply *r);
/* Feeds the bytes engine_text gives (last: flush what the splitter holds). False: out of
 * memory. */
bool session_reply_feed(struct session_reply *r, const char *bytes, size_t len, bool last);
/* After generation: the tail the stop matcher held back, then the splitter's flush. */
bool session_reply_finish(struct session_reply *r, const struct session *s);

/* ---------------------------------------------------------------- the receipt's record */

/* What a finished generation hands over to become a receipt (receipt_from_run). Pointers
 * are borrowed. */
struct session_record {
    const char *model_path;          /* as given by the user */
    const struct json_value *input;  /* messages array or prompt string */
    const int32_t *prompt;
    int64_t n_prompt;
    const struct sample_params *sampling;
    int64_t max_tokens;              /* -1: none */
    const char *const *stop;
    int64_t n_stop;
    const char *finish;              /* "stop" or "length" */
    const char *text;                /* the output text (sanitised to UTF-8 by the receipt) */
    size_t text_len;
    const int32_t *output;
    int64_t n_output;
    int64_t ctx_size;
    const char *cache_type;          /* "f32", "f16" or "q8_0" */
    /* The device that ran layers, or all NULL and -1: the CPU ran everything. */
    const char *device_class, *device_name, *numerics;
    int64_t gpu_layers;              /* the layers it ran (--gpu-layers), or -1 */
    const char *grammar;             /* the GBNF text used, or NULL */
    const struct json_value *response_format; /* as the request gave it, or NULL */
    const struct receipt_template *tmpl;  /* how input became the prompt (copied), the
                                           * receipt module's record */
    const char *think_open, *think_close; /* the reasoning split of text, or NULL: none */
    bool think_inside;                    /* the output started inside the reasoning */
};

/* The session's part of the record: model path, context, KV type, the session's sampling
 * settings (max_tokens: their n_predict), stop strings, grammar and response_format, the
 * reasoning markers the reply was split at; and, with g, the output and finish. The caller
 * sets input, prompt, text, tmpl and think_inside. */
void session_record_init(const struct session *s, const struct session_gen *g,
                         struct session_record *r);

#endif
