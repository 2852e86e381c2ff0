/* chat.h: built-in chat-template renderers for the common model families, chosen by
 * recognising the model's tokenizer.chat_template (a full Jinja engine is later work).
 *
 * A rendered prompt is a list of segments: template text (turn markers such as
 * <|im_start|>, which the tokenizer must turn into special tokens) and message content
 * (user text, tokenized with special-token parsing off so that a user cannot smuggle
 * control tokens in). The leading BOS token is not rendered: the caller adds it when the
 * tokenizer wants one (tokenizer.ggml.add_bos_token), exactly as for a raw prompt.
 *
 * Fallback (the caller's policy, see `kinetic run --help`): a model without a template is
 * a base model and gets "raw": the system text (if any) and a blank line, then the
 * prompt, with no markers. A template that is not recognised gets the family whose turn
 * tokens the vocabulary has (chat_template_from_vocab: <|im_start|> chatml,
 * <|start_header_id|> llama3, <start_of_turn> gemma, <|user|> + <|end|> phi3), else raw. */
#ifndef KN_CHAT_H
#define KN_CHAT_H

#include "../base/base.h"

enum chat_format {
    CHAT_FORMAT_RAW = 0,  /* no markers: the prompt as is */
    CHAT_FORMAT_CHATML,   /* <|im_start|>role\n...<|im_end|>\n (Qwen, SmolLM, Hermes...) */
    CHAT_FORMAT_LLAMA3,   /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    CHAT_FORMAT_LLAMA2,   /* [INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] */
    CHAT_FORMAT_MISTRAL,  /* [INST]...[/INST] without <<SYS>> */
    CHAT_FORMAT_GEMMA,    /* <start_of_turn>user\n...<end_of_turn>\n, assistant = "model" */
    CHAT_FORMAT_PHI3,     /* <|user|>\n...<|end|>\n<|assistant|>\n */
    CHAT_FORMAT_COUNT,
};

/* "raw", "chatml", "llama3", "llama2", "mistral", "gemma", "phi3". */
const char *chat_format_name(enum chat_format f);
bool chat_format_from_name(const char *name, enum chat_format *out);

/* A recognised template: the family plus the variations its Jinja source shows. */
struct chat_template {
    enum chat_format format;
    bool default_system;      /* chatml: Qwen2.5 adds "You are Qwen, ..." when no system */
    bool open_think;          /* chatml: QwQ opens the reply with "<think>\n" */
    bool llama3_date_header;  /* llama3.1+: system turn with the knowledge/today date lines */
    bool mistral_spaces;      /* mistral v1: "[INST] text [/INST]" rather than "[INST]text[/INST]" */
    const char *bos;          /* BOS text for turns after the first (llama2/mistral), or "" */
    const char *eos;          /* EOS text that closes an assistant turn (llama2/mistral), or "" */
};

/* Recognises a Jinja template source; returns false (and sets RAW) when no family fits. */
bool chat_template_detect(const char *src, size_t len, struct chat_template *out);

/* Picks a family from the vocabulary when there is no template: has_token(name, ctx)
 * says whether the vocabulary holds that exact token text. Returns false for RAW. */
bool chat_template_from_vocab(bool (*has_token)(const char *text, void *ctx), void *ctx,
                              struct chat_template *out);

struct gguf_file;
struct tok;

/* How chat_template_for_model chose. */
enum chat_choice {
    CHAT_CHOICE_FORCED = 0, /* the caller's format (--chat-format, --raw) */
    CHAT_CHOICE_TEMPLATE,   /* tokenizer.chat_template, recognised */
    CHAT_CHOICE_VOCAB,      /* a template not recognised: the family its turn tokens show */
    CHAT_CHOICE_NONE,       /* no template: a base model, prompt raw */
    CHAT_CHOICE_UNKNOWN,    /* a template not recognised and no family fits: raw */
};

/* Chooses the template the way run, chat and serve all do: *forced when forced is not
 * NULL, else the recognised tokenizer.chat_template; a model without one is a base model
 * and gets its prompt raw; an unrecognised template gets the family whose turn tokens the
 * vocabulary holds, else raw. Sets tmpl->bos/eos to the model's BOS/EOS text, kept in
 * bos_buf/eos_buf (cap bytes each; "" when a token is absent or longer). */
enum chat_choice chat_template_for_model(struct chat_template *tmpl, const enum chat_format *forced,
                                         const struct gguf_file *g, const struct tok *tk,
                                         char *bos_buf, char *eos_buf, size_t cap);

struct chat_message {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content;
};

struct chat_segment {
    size_t off, len;     /* into chat_prompt.text */
    bool special;        /* template text: parse special tokens; false for message content */
};

struct chat_prompt {
    char *text;          /* NUL-terminated concatenation of the segments */
    size_t len, cap;
    struct chat_segment *segs;
    size_t n_segs, segs_cap;
};

/* Renders msgs with the template; add_generation_prompt opens the assistant turn.
 * The result is owned by out (chat_prompt_free). Fails with KN_E_ARG for roles the
 * family cannot express (e.g. a second system message). */
KN_MUST_USE enum kn_status chat_render(const struct chat_template *t, const struct chat_message *msgs,
                                       size_t n_msgs, bool add_generation_prompt,
                                       struct chat_prompt *out, struct kn_err *err);
void chat_prompt_free(struct chat_prompt *p);

#endif
