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
 * a base model. A single prompt (kinetic run) gets "raw": the system text (if any) and a
 * blank line, then the prompt, with no markers, which the model continues. A conversation
 * (chat, serve: chat_renderer_opts.conversation) gets "plain": role-prefixed turns
 * ("System: ...\nUser: ...\nAssistant:"), which a base model continues as the assistant
 * until it writes the next turn's "User:" (CHAT_PLAIN_TURN_ENDS, stop strings). A template
 * that is not recognised gets the family whose turn tokens the vocabulary has
 * (chat_template_from_vocab: <|im_start|> chatml, <|start_header_id|> llama3,
 * <start_of_turn> gemma, <|user|> + <|end|> phi3), else raw (plain for a conversation). */
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
    CHAT_FORMAT_PLAIN,    /* System: ...\nUser: ...\nAssistant: ...\nTool: ...\nAssistant: no
                           * control tokens (docs/chat.md "Models without a template") */
    CHAT_FORMAT_COUNT,
};

/* "raw", "chatml", "llama3", "llama2", "mistral", "gemma", "phi3", "plain". */
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

/* The plain format's ends of an assistant turn: the next turn's role line, which a base
 * model writes when it goes on past its answer. Chat and serve stop answers there. */
#define CHAT_PLAIN_TURN_ENDS {"\nUser:", "\nAssistant:", "\nSystem:", "\nTool:"}
#define CHAT_PLAIN_N_TURN_ENDS 4

struct chat_message {
    const char *role;    /* "system", "user" or "assistant" ("tool" too for plain) */
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
    int64_t now;         /* the clock a Jinja template's strftime_now() read (see
                          * chat_renderer.fixed_now); 0 for the built-in families */
};

/* Renders msgs with the template; add_generation_prompt opens the assistant turn.
 * The result is owned by out (chat_prompt_free). Fails with KN_E_ARG for roles the
 * family cannot express (e.g. a second system message). */
KN_MUST_USE enum kn_status chat_render(const struct chat_template *t, const struct chat_message *msgs,
                                       size_t n_msgs, bool add_generation_prompt,
                                       struct chat_prompt *out, struct kn_err *err);
void chat_prompt_free(struct chat_prompt *p);

/* ================================================================ the chat renderer
 *
 * What run, chat and serve use (chat_jinja.c): the model's own tokenizer.chat_template
 * (or --chat-template FILE) rendered by the Jinja engine exactly as transformers renders
 * it, with the built-in families above as the fallback for a template Kinetic cannot
 * render. The policy, in order:
 *   raw                 no template: the prompt as is (--raw)
 *   chat_format         a built-in family (--chat-format NAME)
 *   template_file       this Jinja file (--chat-template FILE); errors name line and column
 *   tokenizer.chat_template, Jinja: when it parses and renders a one-message conversation
 *   tokenizer.chat_template, built-in: the family it shows (chat_template_for_model),
 *                       with a warning, when the Jinja engine cannot render it
 *   no template         a base model: raw
 * Template variables: messages, tools (or none), add_generation_prompt, bos_token and
 * eos_token (the model's BOS/EOS text), then kwargs (--chat-template-kwargs, then a
 * request's chat_template_kwargs) at top level.
 *
 * Safety: a rendered prompt keeps, byte by byte, whether the template produced it
 * (jinja_render_marked); chat_prompt_tokenize makes control tokens only from template
 * bytes, so message text ("<|im_end|>" typed by a user) stays ordinary text. */

struct jinja_template;
struct json_value;

enum chat_engine { CHAT_ENGINE_BUILTIN = 0, CHAT_ENGINE_JINJA };

struct chat_renderer {
    enum chat_engine engine;
    enum chat_choice choice;       /* how the built-in family was chosen (BUILTIN) */
    struct chat_template tmpl;     /* BUILTIN: the renderer; JINJA: the family the template
                                    * source shows (chat_template_detect), for its traits
                                    * such as open_think (the prompt opens a <think> block) */
    struct jinja_template *jinja;  /* JINJA */
    char source[160];              /* where the template came from, for messages */
    char bos[256], eos[256];       /* the model's BOS/EOS text ("" when absent) */
    struct json_value *kwargs;     /* --chat-template-kwargs (an object) or NULL */
    char warning[600];             /* why the Jinja template was not used, or "" */
    /* JINJA: the template's source (NUL-terminated), which receipts hash or record. */
    char *src;
    size_t src_len;
    /* strftime_now(): the template reads the clock as local wall-clock time, given as
     * seconds since the epoch of that time read as UTC (so %Y-%m-%d %H:%M show the local
     * date and time; %z and %Z show UTC). A render records the value in chat_prompt.now;
     * with fixed_now set it uses now instead of the clock (verify-receipt's re-render). */
    bool fixed_now;
    int64_t now;
};

struct chat_renderer_opts {
    bool raw;                      /* --raw */
    const char *chat_format;       /* --chat-format NAME, or NULL */
    const char *template_file;     /* --chat-template FILE, or NULL */
    const char *kwargs_json;       /* --chat-template-kwargs JSON (an object), or NULL */
    const char *template_text;     /* a Jinja template's source given as text (a receipt's
                                    * recorded --chat-template), named template_name */
    const char *template_name;
    bool conversation;             /* chat and serve: a model without a template gets the
                                    * plain turns format instead of raw */
};

/* Whether the renderer's template reads the clock (its source calls strftime_now), so
 * that the time is part of what made the prompt. */
bool chat_renderer_reads_clock(const struct chat_renderer *cr);
/* The clock strftime_now() reads now (see chat_renderer.now). */
int64_t chat_clock_now(void);

/* Chooses and loads the template (see above). Errors: an unknown --chat-format, an
 * unreadable or invalid --chat-template file ("FILE: template syntax error at line L,
 * column C: ..."), --chat-template-kwargs that is not a JSON object. */
KN_MUST_USE enum kn_status chat_renderer_init(struct chat_renderer *cr,
                                              const struct chat_renderer_opts *o,
                                              const struct gguf_file *g, const struct tok *tk,
                                              struct kn_err *err);
void chat_renderer_free(struct chat_renderer *cr);
/* "jinja" or the built-in family's name. */
const char *chat_renderer_name(const struct chat_renderer *cr);
/* Whether the model has no template Kinetic could use (none, or one not recognised, and
 * nothing forced): a base model, which continues text rather than answering. */
bool chat_renderer_no_template(const struct chat_renderer *cr);
/* The stop strings that end an answer in the renderer's format (CHAT_PLAIN_TURN_ENDS for
 * plain; *n of them), or NULL and 0 when the model's end-of-turn token ends it. */
const char *const *chat_renderer_turn_ends(const struct chat_renderer *cr, int *n);

/* Renders plain text messages (role, content). */
KN_MUST_USE enum kn_status chat_renderer_render(const struct chat_renderer *cr,
                                                const struct chat_message *msgs, size_t n_msgs,
                                                bool add_generation_prompt,
                                                struct chat_prompt *out, struct kn_err *err);
/* Renders OpenAI-style messages: a JSON array of objects with role, content (a string,
 * null, or an array of {"type":"text","text":...} parts, joined) and any other members
 * (tool_calls, tool_call_id, name, reasoning_content), passed to the template as they
 * are; tools (an array or NULL) and kwargs (an object or NULL, over the renderer's own)
 * as template variables. The built-in families take only string contents and ignore
 * tools and kwargs. */
KN_MUST_USE enum kn_status chat_renderer_render_json(const struct chat_renderer *cr,
                                                     const struct json_value *messages,
                                                     const struct json_value *tools,
                                                     const struct json_value *kwargs,
                                                     bool add_generation_prompt,
                                                     struct chat_prompt *out,
                                                     struct kn_err *err);

/* Tokenizes a rendered prompt: control tokens only from template text (segments with
 * special set), the text between them tokenized whole; one BOS at the start when the
 * vocabulary wants one and the template did not write it. *ids is malloc'd. */
KN_MUST_USE enum kn_status chat_prompt_tokenize(const struct chat_prompt *p, const struct tok *tk,
                                                int32_t **ids, size_t *n, struct kn_err *err);

/* ---------------------------------------------------------------- reasoning markers */

/* The reasoning markers of tk's model family: the first known pair (<think>, Command R7B's
 * <|START_THINKING|>, Magistral's [THINK], Seed-OSS's <seed:think>) whose two markers are
 * both single tokens of the vocabulary. Returns false, and "<think>"/"</think>" as the
 * conventional pair, when the vocabulary has none of them. */
bool chat_think_markers(const struct tok *tk, const char **open, const char **close);
/* Whether a rendered prompt ends by opening the reasoning (the template wrote the open
 * marker for the model, blanks after it aside), so the answer starts inside it. */
bool chat_prompt_opens_think(const char *text, size_t len, const char *open);

/* ================================================================ tool calls
 * (chat_tools.c; docs/server.md "Tool calls") */

enum chat_tool_syntax {
    CHAT_TOOLS_HERMES = 0, /* <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>: Hermes 2
                            * Pro / 3, Qwen 2.5 / 3, and the fallback for templates without tools */
    CHAT_TOOLS_LLAMA3,     /* Llama 3.x: the answer is {"name": N, "parameters": {...}}, or
                            * <|python_tag|>{...}; several separated by ';' */
    CHAT_TOOLS_MISTRAL,    /* [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] */
    CHAT_TOOLS_FUNCTIONARY,/* v3.2 >>>N\n{...} (>>>all\n: text); the generation prompt ends with
                            * the first >>>. The parser also reads v3.1's form */
    CHAT_TOOLS_HARMONY,    /* gpt-oss: a message header addressed to=functions.N (in the channel
                            * part or the role part), <|message|>{arguments}, <|call|> */
    CHAT_TOOLS_FUNCTIONARY_V31, /* v3.1 <function=N>{...}</function> (the parser also reads v3.2's) */
    CHAT_TOOLS_COUNT,
};
#define CHAT_TOOLS_MAX_CALLS 32 /* calls kept from one answer */

const char *chat_tool_syntax_name(enum chat_tool_syntax s);
/* The syntax the renderer's template writes calls in (its Jinja source's markers, else its
 * family; Hermes when neither shows one). */
enum chat_tool_syntax chat_tool_syntax_of(const struct chat_renderer *cr);

struct chat_tool_call {
    char *name;
    char *arguments;   /* JSON text (compact), as OpenAI's function.arguments */
};
struct chat_tool_calls {
    struct chat_tool_call call[CHAT_TOOLS_MAX_CALLS];
    int n;
    char *content;     /* the text outside the calls; NULL when it is only white space */
    size_t content_len;
};
/* Finds the calls in a generated text. A call whose JSON does not parse (or lacks a name)
 * ends the search: its marker and the rest are dropped (content never holds partial call
 * markup; text without a marker, such as Llama 3's bare JSON that is no call, stays
 * content). KN_E_NOMEM only. */
KN_MUST_USE enum kn_status chat_tool_calls_parse(enum chat_tool_syntax syn, const char *text,
                                                 size_t len, struct chat_tool_calls *out,
                                                 struct kn_err *err);
void chat_tool_calls_free(struct chat_tool_calls *c);
/* Keeps the first n calls (parallel_tool_calls false: one), freeing the others. */
void chat_tool_calls_keep(struct chat_tool_calls *c, int n);
/* How much of a growing answer a stream may send as content: up to the first call marker,
 * or a tail that may become one (Llama 3: nothing while the answer may be a bare call;
 * functionary v3.2: nothing while it may open with a call's recipient line). */
size_t chat_tool_calls_safe_end(enum chat_tool_syntax syn, const char *text, size_t len);
/* Where an answer's content begins in its text: after functionary v3.2's "all\n"
 * recipient line (the generation prompt wrote its ">>>"), else 0. A stream starts its
 * content there, as chat_tool_calls_parse does. */
size_t chat_tool_calls_content_start(enum chat_tool_syntax syn, const char *text, size_t len);
/* Whether an OpenAI message is an assistant turn that only calls tools: tool_calls with
 * content null or absent (as the openai client replays it). Its content counts as "". */
bool chat_msg_only_calls(const struct json_value *msg);
/* How forced calls are written (tool_choice "required" or a named function): open CALL
 * (sep CALL)* close, sep NULL for one call; CALL = call_open NAME call_mid ARGUMENTS
 * call_close, NAME a JSON string (name_json: a member of the call's JSON object) or the
 * bare name, ARGUMENTS a value of the tool's parameters schema. The server makes the
 * grammar from it, one alternative per tool. */
struct chat_tool_frame {
    const char *open, *sep, *close;
    const char *call_open, *call_mid, *call_close;
    bool name_json;
};
void chat_tool_call_frame(enum chat_tool_syntax syn, bool parallel, struct chat_tool_frame *f);
/* Whether name can be written in f's calls (a bare name: letters, digits, '_', '-', '.'). */
bool chat_tool_name_ok(const struct chat_tool_frame *f, const char *name);

#endif
