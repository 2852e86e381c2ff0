/* jinja.h: a Jinja2 template engine that renders Hugging Face chat templates byte for byte
 * as transformers does (jinja2's ImmutableSandboxedEnvironment with trim_blocks and
 * lstrip_blocks on, the loopcontrols extension, transformers' tojson filter and its
 * raise_exception and strftime_now globals).
 *
 * Values follow Python: ints are int64 (overflow is an error, never a wrap), floats print
 * as Python's repr, lists/dicts print as Python's repr, undefined names behave like
 * jinja2.Undefined (print as "", fail on attribute access, arithmetic and calls). Mutating
 * methods of lists and dicts (append, pop, update...) fail as in the immutable sandbox.
 *
 * Safety: the source size, expression nesting, call depth, loop iterations, output size,
 * working memory and the render's total work (evaluation steps plus every byte or element
 * a string or list operation scans, compares or copies) are bounded (struct jinja_limits),
 * so a hostile template is refused in well under a second; every error names the template
 * line and column. Nothing is rendered partially: on failure *out is NULL.
 *
 * Typical use (what transformers' apply_chat_template does):
 *     struct jinja_template *t;
 *     jinja_parse(&t, src, len, NULL, &err);
 *     struct json_value *ctx;   // {"messages": [...], "tools": [...], ...}
 *     jinja_chat_context(messages, tools, NULL, true, "<bos>", "<eos>", kwargs, &ctx, &err);
 *     jinja_render(t, ctx, NULL, &text, &len, &diag, &err);
 *     jinja_free(t); json_free(ctx);
 */
#ifndef KN_JINJA_H
#define KN_JINJA_H

#include "../base/base.h"
#include "../base/json.h"

/* Limits; a zero field takes the default. */
struct jinja_limits {
    size_t max_source;     /* template bytes; default 1 MiB */
    size_t max_depth;      /* nesting of expressions/statements at parse time and of
                            * macro calls + evaluation at render time; default 256 */
    size_t max_iterations; /* loop iterations over the whole render; default 1,000,000 */
    size_t max_output;     /* bytes of output (macro output included); default 16 MiB */
    size_t max_memory;     /* working memory of one render; default 256 MiB */
    size_t max_work;       /* work units of one render: a byte scanned, compared or copied
                            * is one unit, a value compared, copied or looked up or a
                            * code point case-mapped or classified JINJA_ELEM_WORK units, an evaluation step JINJA_STEP_WORK
                            * units (about a nanosecond each); default 64 Mi units
                            * (JINJA_MAX_WORK) */
};
enum { JINJA_ELEM_WORK = 4, JINJA_STEP_WORK = 16 };
#define JINJA_MAX_WORK ((size_t)64 << 20)

/* Options of one render. */
struct jinja_options {
    struct jinja_limits limits;
    /* strftime_now() uses this time (seconds since the epoch, formatted in UTC) when
     * fixed_time is set; otherwise the current local time, like transformers. */
    bool fixed_time;
    int64_t now_unix;
    /* jinja_render_marked only: top-level context variables whose string values count as
     * template text (the model's bos_token and eos_token, say), and whether
     * messages[i].role counts as template text when it is a standard role (system, user,
     * assistant, tool, developer, model, ipython, function), so that '<|' + role + '|>'
     * still makes a control token. */
    const char *const *trusted_vars;
    size_t n_trusted_vars;
    bool trust_roles;
};

enum jinja_error_kind {
    JINJA_ERR_NONE = 0,
    JINJA_ERR_SYNTAX,     /* the template does not parse (TemplateSyntaxError) */
    JINJA_ERR_RAISED,     /* the template called raise_exception(message) */
    JINJA_ERR_UNDEFINED,  /* use of an undefined value (UndefinedError) */
    JINJA_ERR_TYPE,       /* an operation on values of the wrong type (TypeError...) */
    JINJA_ERR_SECURITY,   /* a mutating method the immutable sandbox refuses */
    JINJA_ERR_LIMIT,      /* a limit of struct jinja_limits was reached */
    JINJA_ERR_UNSUPPORTED /* a jinja2 feature this engine does not implement */
};

/* Where and why a parse or render failed. */
struct jinja_diag {
    enum jinja_error_kind kind;
    int line, column;     /* 1-based position in the template of the failing construct */
    char message[512];    /* for JINJA_ERR_RAISED: exactly the template's message */
};

struct jinja_template;

/* Parses a template (len bytes, no NUL needed). limits may be NULL (defaults); diag may be
 * NULL. Syntax errors return KN_E_FORMAT, with "line L, column C" in err. */
KN_MUST_USE enum kn_status jinja_parse(struct jinja_template **out, const char *src, size_t len,
                                       const struct jinja_limits *limits,
                                       struct jinja_diag *diag, struct kn_err *err);
void jinja_free(struct jinja_template *t);

/* Renders with the members of the JSON object context as top-level variables. On success
 * *out is a NUL-terminated heap string (free()) of *out_len bytes. Errors: KN_E_ARG for
 * raise_exception and template runtime errors, KN_E_LIMIT for limits, KN_E_NOMEM. */
KN_MUST_USE enum kn_status jinja_render(const struct jinja_template *t,
                                        const struct json_value *context,
                                        const struct jinja_options *opts, char **out,
                                        size_t *out_len, struct jinja_diag *diag,
                                        struct kn_err *err);

/* As jinja_render, and also says where each output byte came from: (*marks)[i] is 1 when
 * byte i is the template's own text (its literal text and string literals, and the
 * context values opts names as trusted), 0 when it came from the context (message
 * content, tools, extra variables) or was computed from it. Concatenation (+, ~, macro
 * and block output), join and strip/trim keep each byte's mark; any other operation on a
 * string marks its whole result 0. The tokenizer parses control tokens only where
 * every byte is marked 1, so text in messages can never become a control token
 * (tok_encode_marked). *marks is malloc'd (free()), out_len bytes. */
KN_MUST_USE enum kn_status jinja_render_marked(const struct jinja_template *t,
                                               const struct json_value *context,
                                               const struct jinja_options *opts, char **out,
                                               uint8_t **marks, size_t *out_len,
                                               struct jinja_diag *diag, struct kn_err *err);

/* Builds the context transformers' apply_chat_template passes to a chat template:
 * messages (an array, cloned), tools and documents (cloned, or null when NULL),
 * add_generation_prompt, bos_token and eos_token (omitted when NULL), then every member of
 * kwargs (an object or NULL: chat_template_kwargs such as enable_thinking) at top level,
 * replacing a member of the same name. The caller frees *out with json_free. */
KN_MUST_USE enum kn_status jinja_chat_context(const struct json_value *messages,
                                              const struct json_value *tools,
                                              const struct json_value *documents,
                                              bool add_generation_prompt, const char *bos_token,
                                              const char *eos_token,
                                              const struct json_value *kwargs,
                                              struct json_value **out, struct kn_err *err);

/* Picks the chat template from a tokenizer_config.json "chat_template" value: a string, or
 * a list of {name, template} (name NULL or "default" picks "default"; else that name).
 * Returns NULL when there is none. The string is owned by the JSON tree. */
const char *jinja_pick_template(const struct json_value *chat_template, const char *name,
                                size_t *len);

#endif
