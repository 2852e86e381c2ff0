/* repl.h: the conversation behind `kinetic chat`: messages, sampling settings, one engine
 * whose KV cache is reused across turns (Warm Start) and filled while the user is still
 * typing (Zero Wait), slash commands, receipts of the last answer, and saving/loading a
 * conversation.
 *
 * Every answer is made by the one generation loop (engine_generate) from the exact tokens
 * of the whole conversation rendered with the chat template, so it equals a fresh run of
 * those tokens (a KV entry's bits do not depend on how or when it was computed,
 * docs/numerics.md); the receipt of any turn therefore verifies with
 * `kinetic verify-receipt`, which reruns from scratch.
 *
 * Line editing lives apart, in repl_edit.h (libedit's header declares tok_* names of its
 * own, so it is kept out of files that include token/tok.h). */
#ifndef KN_REPL_H
#define KN_REPL_H

#include "../base/base.h"
#include "../sample/sample.h"
#include "../text/text.h"

#include <signal.h>
#include <stdio.h>

struct repl;
struct grammar;
struct json_value;

struct repl_opts {
    const char *model_path;
    const char *system;           /* NULL: no system message */
    const char *chat_format;      /* NULL: the model's template (see chat_renderer_init) */
    const char *chat_template;    /* --chat-template FILE, or NULL */
    const char *chat_template_kwargs; /* --chat-template-kwargs JSON, or NULL */
    const char *sign_key;         /* NULL: receipts are not signed */
    const char *kv_type;          /* "f32", "f16" or "q8_0" */
    struct sample_params sp;      /* the seed included */
    int64_t n_predict;            /* -1: until end of generation or the context limit */
    int64_t ctx_size;             /* 0: the session's default, min(model's, 4096) */
    int64_t batch;                /* prompt tokens per forward pass */
    int threads;
    bool zero_wait;               /* pre-evaluate the line being typed (repl_prefill) */
    bool no_draft;                /* turn RAD-1 drafting off (it never changes a token) */
    bool hide_reasoning;          /* hide <think> reasoning instead of showing it dimmed */
    /* A grammar every answer follows (NULL: none), its GBNF text and the response_format
     * it came from (NULL: none), for receipts. Borrowed: they outlive the repl. */
    const struct grammar *grammar;
    const char *gbnf;
    const struct json_value *response_format;
    /* Stop strings (already unescaped, non-empty; at most TEXT_MAX_STOPS): every answer
     * ends at the first one it contains, which is neither shown nor added to the
     * conversation. Copied by repl_open; /set stop changes them. */
    const char *const *stop;
    int n_stop;
    volatile sig_atomic_t *interrupt; /* set (by a SIGINT handler) to stop the answer */
    /* The device (session_opts: device, gpu_layers, device_class, device_name); borrowed. */
    struct kern_backend *device;
    int64_t gpu_layers;
    const char *device_class, *device_name;
    const char *repack_cache; /* session_opts.repack_cache */
};

/* Opens the session of `kinetic run` (session_open: model, tokenizer, template, engine,
 * sampler, grammar and stop strings, with its defaults for the zero / NULL options) and
 * reads the signing key. */
KN_MUST_USE enum kn_status repl_open(struct repl **out, const struct repl_opts *o,
                                     struct kn_err *err);
void repl_close(struct repl *r);

/* Answers a user message: appends it to the conversation, evaluates only the tokens the
 * KV cache does not already hold, streams the answer to out and appends it too. When
 * *interrupt is set the answer stops there (and is kept, as far as it got); an interrupt
 * during the prompt drops the message. A conversation that no longer fits the context is
 * refused (KN_E_LIMIT) and the message dropped. */
KN_MUST_USE enum kn_status repl_ask(struct repl *r, const char *text, size_t len, FILE *out,
                                    struct kn_err *err);

/* Zero Wait: given the line being typed, evaluates (at most a few tokens per call, so
 * keystrokes stay responsive) the part of the next prompt that is unlikely to change:
 * the conversation so far, the user-turn header and the partial text except its last
 * REPL_UNSTABLE tokens. Returns true while work remains for this text. Never changes an
 * answer: repl_ask reuses only the cached tokens that equal the final prompt's. */
#define REPL_UNSTABLE 2
bool repl_prefill(struct repl *r, const char *partial, size_t len);

/* Runs a slash command line ("/receipt a.json"); output for the user goes to out,
 * notes to stderr. *quit is set by /quit. A bad command or argument is reported on out and
 * is not an error; only failures the session cannot continue from return non-KN_OK. */
KN_MUST_USE enum kn_status repl_command(struct repl *r, const char *line, FILE *out, bool *quit,
                                        struct kn_err *err);

/* The text of /help. */
extern const char *const repl_help_text;

#endif
