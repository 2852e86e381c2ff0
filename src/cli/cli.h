/* cli.h: the kinetic command line: subcommands and a small option parser that every
 * subcommand shares, so flags and their errors look the same everywhere. */
#ifndef KN_CLI_H
#define KN_CLI_H

#include "device/device.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CLI_FLAG: no value (dest: bool *). CLI_STR, CLI_INT, CLI_FLOAT: one value. CLI_STRS: a
 * value each time it is given, appended (dest: struct cli_strs *). CLI_POS: a positional
 * argument given as a flag (dest: &pos[k] of the pos array handed to cli_parse, e.g.
 * -m/--model for MODEL.gguf): the loose positionals fill the slots no flag gave, in order.
 * CLI_NOTE: a llama.cpp flag that has no effect in Kinetic (dest: NULL): accepted, and its
 * help, which says why, is printed as a note; an arg "[a|b|c]" makes its value optional,
 * taken as --name=a or from the next argument when that is one of the words. */
enum cli_kind { CLI_FLAG, CLI_STR, CLI_INT, CLI_FLOAT, CLI_STRS, CLI_POS, CLI_NOTE };

#define CLI_MAX_STRS 16
struct cli_strs {
    const char *v[CLI_MAX_STRS];
    int n;
};

struct cli_opt {
    const char *name;  /* long name without dashes, e.g. "threads" */
    char short_name;   /* 0 for none */
    enum cli_kind kind;
    void *dest;        /* bool*, const char**, int64_t*, double*, struct cli_strs* */
    const char *arg;   /* metavariable in help, e.g. "N" */
    const char *help;
    bool *seen;        /* optional: set when the option was given */
    const char *aliases; /* other spellings with their dashes, space-separated (llama.cpp's,
                          * e.g. "-ngl --n-gpu-layers"), or NULL; help lists them */
};
#define CLI_OPT_END {NULL, 0, 0, NULL, NULL, NULL, NULL, NULL}

/* Aliases of the flags several commands share, so each spelling is written once. */
#define CLI_ALIAS_GPU_LAYERS "-ngl --n-gpu-layers"
#define CLI_ALIAS_SYSTEM "-sys --system-prompt"
#define CLI_ALIAS_PARALLEL "-np"
/* The llama.cpp flags that change nothing in Kinetic (CLI_NOTE rows), with why. */
#define CLI_OPT_FLASH_ATTN                                                                \
    {"flash-attn", 0, CLI_NOTE, NULL, "[on|off|auto|1|0]",                                \
     "changes nothing: Kinetic's attention is always tiled (flash-attention style)", NULL, \
     "-fa"}
#define CLI_OPT_JINJA                                                                     \
    {"jinja", 0, CLI_NOTE, NULL, NULL,                                                    \
     "changes nothing: Kinetic always renders the chat template with its Jinja engine",   \
     NULL, NULL}

/* Parses argv[1..] (argv[0] is the subcommand). Options may come before or after
 * positional arguments; "--" ends options; "-" alone is positional. Stores at most
 * max_pos positionals (max_pos <= CLI_MAX_POS; *n_pos: how many, from the first, with
 * CLI_POS flags counted). Prints a message naming the bad option (an unknown one with the
 * nearest spelling the command takes: "did you mean '--temp'?") and pointing to --help,
 * and returns 2 on error; returns 1 when --help was printed; 0 otherwise. */
#define CLI_MAX_POS 64
int cli_parse(const char *cmd, const char *usage, int argc, char **argv,
              const struct cli_opt *opts, const char **pos, int max_pos, int *n_pos);
void cli_print_help(const char *cmd, const char *usage, const struct cli_opt *opts);
/* The word of words[0..n_words) nearest to typed by the rule an unknown option's
 * suggestion follows, copied into buf (size bytes), or NULL when none is near. */
const char *cli_nearest_word(const char *typed, const char *const *words, size_t n_words,
                             char *buf, size_t size);

/* The grammar the flags ask for (at most one given; all NULL: none): GBNF text (*gbnf,
 * owned) and, for a JSON Schema, the response_format a receipt records (*rf, owned:
 * {"type": "json_schema", "json_schema": {"schema": S}}), compiled into *g (owned). Errors
 * name the flag or file, with the line and column of a bad grammar or schema, and leave
 * all three NULL. */
struct grammar;
struct json_value;
struct kn_err;
int cli_grammar(const char *grammar, const char *grammar_file, const char *json_schema,
                const char *json_schema_file, char **gbnf, struct json_value **rf,
                struct grammar **g, struct kn_err *err);

/* Reads a prompt from path: a regular file, or standard input for "-" (anything else, a
 * FIFO, a directory, /dev/zero, is refused without blocking), at most CLI_PROMPT_MAX_BYTES
 * (cli_prompt.c: what the largest context holds at 16 bytes a token, 16 MiB). *out:
 * malloc'd, NUL-terminated; *len: its length. */
/* The session flags run, chat and serve share (--ctx-size, --threads, --batch-size,
 * --kv-type): one range and one message each, from the session's and the kernels' limits.
 * threads and batch of 0 stand for the session's default where a command allows it
 * (zero_is_default). Prints "kinetic CMD: ..." and returns 2 on a bad value, else 0. */
/* The help texts of those flags, built from the same constants (engine/session.h). */
#define CLI_XSTR_(x) #x
#define CLI_XSTR(x) CLI_XSTR_(x)
#define CLI_HELP_THREADS "threads (default: CPUs online, at most " CLI_XSTR(SESSION_THREADS_MAX_DEFAULT) ")"
#define CLI_HELP_BATCH "prompt tokens per forward pass (default " CLI_XSTR(SESSION_BATCH_DEFAULT) "); never changes the output"
#define CLI_HELP_CTX "context size in tokens (default: min(model's, " CLI_XSTR(SESSION_CTX_MAX_DEFAULT) "))"
#define CLI_HELP_REPACK_CACHE "keep the repacked weights in DIR and map them at the next start, or off (default: $" RCACHE_ENV ", else ~/.cache/kinetic/repack; never changes the output)"
#define CLI_HELP_KV "KV cache type: " MODEL_KV_TYPE_NAMES " (default " SESSION_KV_TYPE_DEFAULT ")"
#define CLI_HELP_KV_K "the K cache's type (llama.cpp's); Kinetic keeps K and V in one type, so it must equal V's (--kv-type)"
#define CLI_HELP_KV_V "the V cache's type (llama.cpp's); it must equal K's"
int cli_check_session(const char *cmd, int64_t ctx_size, int64_t threads, int64_t batch,
                      const char *kv_type, bool zero_is_default);

/* -ctk/-ctv (llama.cpp's --cache-type-k/-v, k and v: NULL when not given) onto Kinetic's
 * one KV cache type *kv_type (--kv-type or its default), which both stand for when not
 * given: refuses a bad name, or K and V of different types (Kinetic has one). Prints
 * "kinetic CMD: ..." and returns 2, else 0. */
int cli_kv_types(const char *cmd, const char **kv_type, const char *k, const char *v);
/* --chat-template NAME|FILE and --chat-template-file FILE: a built-in family's name
 * (chat/chat.h's, as --chat-format takes) moves to *chat_format; anything else must be a
 * file; --chat-template-file is always one and becomes *chat_template. Prints "kinetic
 * CMD: ..." and returns 2 for both given, two different families, or neither a family nor
 * a file; else 0. */
int cli_chat_template(const char *cmd, const char **chat_format, const char **chat_template,
                      const char *chat_template_file);
/* llama.cpp's --reasoning-format FMT (NULL: not given). run and chat always split <think>
 * reasoning off the answer, which auto and deepseek mean; the server (server: true) takes
 * the choice per request, so only auto, the request's default, has a meaning there. Prints
 * why another value has none and returns 2, else 0. */
int cli_reasoning_format(const char *cmd, const char *fmt, bool server);
#define CLI_HELP_REASONING_FORMAT "llama.cpp's: auto or deepseek, as Kinetic always does (see --reasoning)"
#define CLI_HELP_CHAT_TEMPLATE "render chats with this Jinja template file instead of the model's, or a built-in template by name (as --chat-format)"
#define CLI_HELP_CHAT_TEMPLATE_FILE "render chats with this Jinja template file (even one named like a built-in template)"
#define CLI_HELP_CHAT_FORMAT "force a built-in template: chatml, llama3, llama2, mistral, gemma, phi3, plain, raw"

int cli_read_prompt(const char *path, char **out, size_t *len, struct kn_err *err);

/* ---- --device and --gpu-layers (run, chat, serve, bench, embed, verify-receipt): one parse, one
 * set of messages, the registry's names (device/device.h). */
#define CLI_HELP_DEVICE "the device: " DEVICE_HELP "; default cpu"
#define CLI_HELP_GPU_LAYERS "with a GPU --device: the first N layers on it, the rest on the CPU (default: all)"
struct cli_device {
    const char *spec;     /* --device; NULL: cpu */
    int64_t gpu_layers;   /* --gpu-layers; -1: all */
    struct device dev;
    bool open;
};
#define CLI_DEVICE_INIT {.spec = NULL, .gpu_layers = -1}
/* Opens d->spec and sets so's device fields (device, gpu_layers, class, name). Prints
 * "kinetic CMD: ..." and returns 2 for a bad --device or --gpu-layers, 1 when the device
 * cannot be opened; warns when the device does not meet canonical-1. */
struct session_opts;
int cli_device_open(const char *cmd, struct cli_device *d, struct session_opts *so);
void cli_device_close(struct cli_device *d);

/* ---- the sampling flags of run and chat, one per row of the settings table (sample.h):
 * --temp, --top-k, ..., -s/--seed, -n/--n-predict; help text, default and range from the
 * table. */
struct sample_params;
struct cli_sampling {
    const char *text[32];  /* the value given for each row (SAMPLE_MAX_SETTINGS), or NULL */
    char help[32][320];
};
/* cli_parse over the sampling options followed by own (up to its NULL row), then the
 * sampling flags applied over the defaults into *p (a bad value prints "kinetic CMD:
 * <the table's message>"), and at least one positional (the model file). Returns 0 to go
 * on, -1 when --help was printed (more_help after the options; exit 0), else the exit
 * status (2: usage). */
int cli_parse_sampling(const char *cmd, const char *usage, const char *more_help, int argc,
                       char **argv, const struct cli_opt *own, struct cli_sampling *cs,
                       struct sample_params *p, const char **pos, int max_pos, int *n_pos);
/* Whether the flag of the row named name was given. */
bool cli_sampling_given(const struct cli_sampling *cs, const char *name);

int cmd_chat(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_devices(int argc, char **argv);

#endif
