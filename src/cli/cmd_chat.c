/* cmd_chat.c: `kinetic chat`: an interactive conversation with a model (line editing,
 * streaming answers, slash commands, receipts), or, when standard input is not a
 * terminal, the same conversation read line by line for scripts. The conversation itself
 * lives in src/repl/repl.c, line editing in src/repl/repl_edit.c. */
#include "cli.h"

#include "base/base.h"
#include "repl/repl.h"
#include "repl/repl_edit.h"
#include "base/json.h"
#include "engine/session.h"
#include "grammar/grammar.h"
#include "sample/sample.h"
#include "text/text.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <langinfo.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --stop takes as many strings as the engine and the server take (one limit). */
static_assert(CLI_MAX_STRS == TEXT_MAX_STOPS, "--stop repeats up to TEXT_MAX_STOPS times");

static const char *const chat_usage = "MODEL.gguf [options]";

static const char *const chat_more_help =
    "\n"
    "Each message is sent with the whole conversation so far, rendered with the model's\n"
    "chat template (as 'kinetic run' chooses it; a model without one, a base model, gets\n"
    "plain 'User: ...' / 'Assistant:' turns, ended where it starts the next turn, and\n"
    "chat says so at start-up: docs/chat.md). The KV cache is kept between turns: only\n"
    "the tokens that differ from the cached ones are evaluated (Warm Start). While a line\n"
    "is typed, the conversation, the user-turn header and the stable part of the line are\n"
    "evaluated between keystrokes (Zero Wait; --no-zero-wait turns it off), so little is\n"
    "left to do at Enter. Neither changes an answer: every answer equals a fresh run of\n"
    "the same tokens, and '/receipt FILE' saves a receipt that 'kinetic verify-receipt'\n"
    "checks by rerunning it from scratch.\n"
    "\n"
    "--stop TEXT (repeatable; -r is an alias) ends every answer where TEXT appears, as in\n"
    "'kinetic run' (escapes \\n \\t \\r \\\\ \\xHH); the stop string is neither shown nor\n"
    "kept in the conversation. /set stop TEXT changes it, /set stop alone removes it.\n"
    "\n"
    "Every answer is sampled with the session's seed (--seed, /seed; without one a fresh\n"
    "seed is drawn and printed), so an answer depends only on the conversation so far and\n"
    "the settings.\n"
    "\n"
    "Editing: libedit (emacs keys, history with the arrow keys, ~/.editrc). A line ending\n"
    "in '\\' continues on the next line; pasted text is kept whole, newlines included\n"
    "(bracketed paste). Ctrl-C stops an answer, or abandons the line being typed; Ctrl-D\n"
    "on an empty line exits. Type /help for the slash commands.\n"
    "\n"
    "When standard input is not a terminal, each line is a message or a slash command\n"
    "(a trailing '\\' continues it), and the answers are printed one per turn. There a\n"
    "message that cannot be answered (e.g. the conversation no longer fits the context)\n"
    "ends the session with exit status 1; interactively it is reported and the session\n"
    "goes on.\n";

static volatile sig_atomic_t chat_interrupt;
static int chat_wake[2] = {-1, -1}; /* self-pipe: wakes the line editor's poll() */

/* Runs on whichever thread the kernel picks: sets the flag the generation loop checks and
 * wakes the line editor (async-signal-safe calls only). */
static void on_sigint(int sig)
{
    (void)sig;
    int saved = errno;
    chat_interrupt = 1;
    if (chat_wake[1] >= 0) {
        ssize_t w = write(chat_wake[1], "!", 1);
        (void)w;
    }
    errno = saved;
}

/* Zero Wait's hook: the message so far (earlier continued lines + the line being typed). */
struct chat_idle {
    struct repl *r;
    struct kn_buf *msg;
    struct kn_buf tmp;
};

static bool chat_idle_fn(void *ctx, const char *line, size_t len)
{
    struct chat_idle *ci = ctx;
    ci->tmp.n = 0;
    if (!kn_buf_add(&ci->tmp, ci->msg->p ? ci->msg->p : "", ci->msg->n) || !kn_buf_add(&ci->tmp, line, len))
        return false;
    const char *s = ci->tmp.p;
    size_t n = ci->tmp.n;
    if (n && s[0] == '/') {
        if (n < 2 || s[1] != '/')
            return false; /* a command, not a message */
        s++;
        n--;
    }
    /* A trailing backslash will not be part of the message. */
    if (n && s[n - 1] == '\\')
        n--;
    return repl_prefill(ci->r, s, n);
}

int cmd_chat(int argc, char **argv)
{
    int64_t ctx_size = 0, threads = session_default_threads(), batch = SESSION_BATCH_DEFAULT;
    bool no_zero_wait = false, no_draft = false;
    const char *system = NULL, *sign_key = NULL, *kv_type = SESSION_KV_TYPE_DEFAULT, *chat_format = NULL;
    const char *chat_template = NULL, *chat_template_kwargs = NULL, *repack_cache = NULL;
    const char *chat_template_file = NULL, *cache_type_k = NULL, *cache_type_v = NULL;
    const char *reasoning_format = NULL;
    const char *reasoning = "show";
    const char *grammar = NULL, *grammar_file = NULL, *json_schema = NULL, *json_schema_file = NULL;
    struct cli_strs stop = {0};
    struct cli_device dv = CLI_DEVICE_INIT;
    const char *pos[1] = {NULL};
    /* The sampling flags are those of `kinetic run`: both come from the settings table
     * (cli_sampling), -n/--n-predict limiting every answer. */
    const struct cli_opt own[] = {
        {"model", 'm', CLI_POS, &pos[0], "MODEL.gguf", "the model file (instead of the argument)", NULL, NULL},
        {"ctx-size", 'c', CLI_INT, &ctx_size, "N", CLI_HELP_CTX "; the whole conversation must fit", NULL, NULL},
        {"threads", 't', CLI_INT, &threads, "N", CLI_HELP_THREADS, NULL, NULL},
        {"batch-size", 'b', CLI_INT, &batch, "N", CLI_HELP_BATCH, NULL, NULL},
        {"kv-type", 0, CLI_STR, &kv_type, "T", CLI_HELP_KV, NULL, NULL},
        {"cache-type-k", 0, CLI_STR, &cache_type_k, "T", CLI_HELP_KV_K, NULL, "-ctk"},
        {"cache-type-v", 0, CLI_STR, &cache_type_v, "T", CLI_HELP_KV_V, NULL, "-ctv"},
        {"repack-cache", 0, CLI_STR, &repack_cache, "DIR", CLI_HELP_REPACK_CACHE, NULL, NULL},
        {"device", 0, CLI_STR, &dv.spec, "DEV", CLI_HELP_DEVICE, NULL, NULL},
        {"gpu-layers", 0, CLI_INT, &dv.gpu_layers, "N", CLI_HELP_GPU_LAYERS, NULL, CLI_ALIAS_GPU_LAYERS},
        {"system", 0, CLI_STR, &system, "TEXT", "system message (/system changes it)", NULL, CLI_ALIAS_SYSTEM},
        {"chat-format", 0, CLI_STR, &chat_format, "NAME", CLI_HELP_CHAT_FORMAT, NULL, NULL},
        {"chat-template", 0, CLI_STR, &chat_template, "FILE|NAME", CLI_HELP_CHAT_TEMPLATE, NULL, NULL},
        {"chat-template-file", 0, CLI_STR, &chat_template_file, "FILE", CLI_HELP_CHAT_TEMPLATE_FILE, NULL, NULL},
        {"chat-template-kwargs", 0, CLI_STR, &chat_template_kwargs, "JSON", "extra template variables, a JSON object, e.g. '{\"enable_thinking\": false}'", NULL, NULL},
        CLI_OPT_JINJA,
        {"sign-key", 0, CLI_STR, &sign_key, "KEYFILE", "sign the receipts /receipt saves with this Ed25519 key", NULL, NULL},
        {"no-zero-wait", 0, CLI_FLAG, &no_zero_wait, NULL, "do not evaluate the line while it is typed", NULL, NULL},
        {"no-draft", 0, CLI_FLAG, &no_draft, NULL, "turn RAD-1 drafting off (it never changes a token)", NULL, NULL},
        {"grammar", 0, CLI_STR, &grammar, "GBNF", "constrain every answer with a GBNF grammar", NULL, NULL},
        {"grammar-file", 0, CLI_STR, &grammar_file, "FILE", "read the GBNF grammar from FILE", NULL, NULL},
        {"json-schema", 0, CLI_STR, &json_schema, "JSON", "answer with JSON matching this JSON Schema", NULL, NULL},
        {"json-schema-file", 0, CLI_STR, &json_schema_file, "FILE", "read the JSON Schema from FILE", NULL, NULL},
        {"stop", 'r', CLI_STRS, &stop, "TEXT", "end every answer where TEXT appears (repeatable; not shown, not kept; /set stop changes it)", NULL, "--reverse-prompt"},
        {"reasoning", 0, CLI_STR, &reasoning, "MODE", "show <think> reasoning dimmed (default) or hide it; /set reasoning changes it", NULL, NULL},
        {"reasoning-format", 0, CLI_STR, &reasoning_format, "FMT", CLI_HELP_REASONING_FORMAT, NULL, NULL},
        CLI_OPT_FLASH_ATTN,
        CLI_OPT_END,
    };
    struct cli_sampling cs;
    struct sample_params sp;
    int n_pos = 0;
    int rc = cli_parse_sampling("chat", chat_usage, chat_more_help, argc, argv, own, &cs, &sp, pos, 1,
                                &n_pos);
    if (rc)
        return rc < 0 ? 0 : rc;
    if ((rc = cli_kv_types("chat", &kv_type, cache_type_k, cache_type_v)) != 0 ||
        (rc = cli_check_session("chat", ctx_size, threads, batch, kv_type, false)) != 0 ||
        (rc = cli_reasoning_format("chat", reasoning_format, false)) != 0 ||
        (rc = cli_chat_template("chat", &chat_format, &chat_template, chat_template_file)) != 0)
        return rc;
    if (strcmp(reasoning, "show") != 0 && strcmp(reasoning, "hide") != 0) {
        fprintf(stderr, "kinetic chat: --reasoning must be show or hide, not '%s'\n", reasoning);
        return 2;
    }

    /* Stop strings: mistakes in them should not cost a model load. */
    char *stops[CLI_MAX_STRS] = {0};
    struct kn_err err = {0};
    for (int i = 0; i < stop.n; i++)
        if (!(stops[i] = text_stop_unescape(stop.v[i], "--stop", &err))) {
            fprintf(stderr, "kinetic chat: %s\n", err.msg);
            for (int j = 0; j < i; j++)
                free(stops[j]);
            return err.status == KN_E_NOMEM ? 1 : 2;
        }

    /* Wide characters in libedit follow LC_CTYPE; numbers keep the C locale. */
    if (!setlocale(LC_CTYPE, "") || strcmp(nl_langinfo(CODESET), "UTF-8") != 0)
        setlocale(LC_CTYPE, "C.UTF-8");

    if (!cli_sampling_given(&cs, "seed")) {
        sp.seed = sample_fresh_seed();
        fprintf(stderr, "kinetic chat: seed %llu\n", (unsigned long long)sp.seed);
    }
    bool interactive = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    struct repl_opts ro = {
        .model_path = pos[0], .system = system, .chat_format = chat_format, .sign_key = sign_key,
        .chat_template = chat_template, .chat_template_kwargs = chat_template_kwargs,
        .kv_type = kv_type, .repack_cache = repack_cache,
        .sp = sp,
        .n_predict = sp.n_predict, .ctx_size = ctx_size, .batch = batch, .threads = (int)threads,
        .zero_wait = !no_zero_wait && interactive, .no_draft = no_draft, .interrupt = &chat_interrupt,
        .hide_reasoning = strcmp(reasoning, "hide") == 0,
        .stop = (const char *const *)stops, .n_stop = stop.n,
    };

    char *gbnf = NULL;
    struct json_value *rf = NULL;
    struct grammar *gram = NULL;
    if (cli_grammar(grammar, grammar_file, json_schema, json_schema_file, &gbnf, &rf, &gram,
                    &err) != KN_OK) {
        fprintf(stderr, "kinetic chat: %s\n", err.msg);
        for (int i = 0; i < stop.n; i++)
            free(stops[i]);
        return err.status == KN_E_NOMEM || err.status == KN_E_IO ? 1 : 2;
    }
    ro.grammar = gram;
    ro.gbnf = gbnf;
    ro.response_format = rf;
    struct repl *r = NULL;
    struct repl_edit *ed = NULL;
    struct kn_buf msg = {0};
    struct chat_idle ci = {0};
    char *line_buf = NULL;
    size_t line_cap = 0;
    int ret = 1;

    struct session_opts dso;
    session_opts_default(&dso);
    if ((ret = cli_device_open("chat", &dv, &dso)) != 0)
        goto out;
    ret = 1;
    ro.device = dso.device;
    ro.gpu_layers = dso.gpu_layers;
    ro.device_class = dso.device_class;
    ro.device_name = dso.device_name;
    if (repl_open(&r, &ro, &err) != KN_OK) {
        fprintf(stderr, "kinetic chat: %s\n", err.msg);
        goto out;
    }
    if (interactive) {
        if (pipe(chat_wake) != 0 || fcntl(chat_wake[0], F_SETFL, O_NONBLOCK) != 0 ||
            fcntl(chat_wake[1], F_SETFL, O_NONBLOCK) != 0) {
            fprintf(stderr, "kinetic chat: cannot create a pipe: %s\n", strerror(errno));
            goto out;
        }
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = 0; /* no SA_RESTART: a waiting poll() returns at once */
        sigaction(SIGINT, &sa, NULL);
        if (repl_edit_open(&ed, "kinetic", stdin, stdout, &chat_interrupt, chat_wake[0], &err) != KN_OK) {
            fprintf(stderr, "kinetic chat: %s\n", err.msg);
            goto out;
        }
        ci.r = r;
        ci.msg = &msg;
        if (ro.zero_wait)
            repl_edit_set_idle(ed, chat_idle_fn, &ci);
        fprintf(stderr, "kinetic chat: %s; /help lists the commands, Ctrl-D exits\n", pos[0]);
    }

    for (;;) {
        /* ---- one message: lines continued with a trailing backslash. */
        msg.n = 0;
        if (!kn_buf_add(&msg, "", 0))
            goto nomem;
        bool eof = false, cancelled = false;
        for (;;) {
            const char *line = NULL;
            size_t len = 0;
            if (interactive) {
                enum repl_read rr = repl_edit_read(ed, msg.n ? "... " : "> ", &line, &len);
                if (rr == REPL_READ_INTERRUPT) {
                    cancelled = true;
                    break;
                }
                if (rr == REPL_READ_ERROR) {
                    fprintf(stderr, "kinetic chat: cannot read the terminal: %s\n", strerror(errno));
                    goto out;
                }
                if (rr == REPL_READ_EOF) {
                    eof = true;
                    break;
                }
            } else {
                errno = 0;
                ssize_t n = getline(&line_buf, &line_cap, stdin);
                if (n < 0) {
                    if (ferror(stdin)) {
                        fprintf(stderr, "kinetic chat: cannot read standard input: %s\n", strerror(errno));
                        goto out;
                    }
                    eof = true;
                    break;
                }
                len = (size_t)n;
                while (len && (line_buf[len - 1] == '\n' || line_buf[len - 1] == '\r'))
                    len--;
                line = line_buf;
            }
            if (len && line[len - 1] == '\\') {
                if (!kn_buf_add(&msg, line, len - 1) || !kn_buf_add(&msg, "\n", 1))
                    goto nomem;
                continue;
            }
            if (!kn_buf_add(&msg, line, len))
                goto nomem;
            break;
        }
        if (cancelled)
            continue;
        if (eof) {
            /* Ctrl-D ends the session; continued lines not yet sent are dropped. */
            if (interactive)
                fputc('\n', stdout);
            break;
        }
        bool blank = true;
        for (size_t i = 0; i < msg.n && blank; i++)
            blank = msg.p[i] == ' ' || msg.p[i] == '\t' || msg.p[i] == '\n';
        if (blank)
            continue;
        if (interactive)
            repl_edit_history_add(ed, msg.p);

        /* ---- a command or a message. */
        if (msg.p[0] == '/' && msg.p[1] != '/') {
            bool quit = false;
            if (repl_command(r, msg.p, stdout, &quit, &err) != KN_OK) {
                fprintf(stderr, "kinetic chat: %s\n", err.msg);
                goto out;
            }
            if (quit)
                break;
            continue;
        }
        const char *text = msg.p[0] == '/' ? msg.p + 1 : msg.p;
        chat_interrupt = 0;
        enum kn_status st = repl_ask(r, text, strlen(text), stdout, &err);
        chat_interrupt = 0;
        if (st == KN_E_CANCELLED) {
            fprintf(stderr, "[interrupted before the answer began; the message was not sent]\n");
        } else if (st == KN_E_NOMEM) {
            fprintf(stderr, "kinetic chat: %s\n", err.msg);
            goto out;
        } else if (st != KN_OK) {
            fprintf(stderr, "kinetic chat: %s\n", err.msg);
            if (!interactive)
                goto out;
        }
    }
    ret = 0;
    goto out;
nomem:
    fprintf(stderr, "kinetic chat: out of memory\n");
out:
    repl_edit_close(ed);
    if (chat_wake[0] >= 0) {
        signal(SIGINT, SIG_DFL);
        close(chat_wake[0]);
        close(chat_wake[1]);
        chat_wake[0] = chat_wake[1] = -1;
    }
    repl_close(r);
    cli_device_close(&dv); /* after the model, whose buffers live on it */
    grammar_free(gram);
    free(gbnf);
    json_free(rf);
    for (int i = 0; i < stop.n; i++)
        free(stops[i]);
    free(msg.p);
    free(ci.tmp.p);
    free(line_buf);
    return ret;
}
