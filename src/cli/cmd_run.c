/* cmd_run.c: `kinetic run`: one prompt through a model, the continuation streamed to
 * stdout, a timing summary on stderr. */
#include "cli.h"

#include "base/base.h"
#include "base/json.h"
#include "chat/chat.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "receipt/hashcache.h"
#include "receipt/receipt.h"
#include "sample/sample.h"
#include "text/text.h"
#include "token/tok.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --stop takes as many strings as the engine and the server take (one limit). */
static_assert(CLI_MAX_STRS == TEXT_MAX_STOPS, "--stop repeats up to TEXT_MAX_STOPS times");

static const char *const run_usage =
    "MODEL.gguf [PROMPT | -] [options]";

static const char *const run_more_help =
    "\n"
    "The prompt comes from PROMPT, from -f FILE, or from standard input ('-' or -f -).\n"
    "Chat models get their own chat template: tokenizer.chat_template is rendered by\n"
    "Kinetic's Jinja engine exactly as Hugging Face transformers renders it (bos_token,\n"
    "eos_token, add_generation_prompt set; --chat-template-kwargs adds variables such as\n"
    "'{\"enable_thinking\": false}'). --chat-template FILE uses a Jinja file instead. A template\n"
    "the engine cannot render falls back, with a warning, to the built-in renderer of its\n"
    "family (chatml, llama3, llama2, mistral, gemma, phi3), which --chat-format forces. A\n"
    "model without tokenizer.chat_template (a base model) gets the prompt raw (--system\n"
    "text first, then a blank line). --raw always sends the prompt as is, with BOS if the\n"
    "model wants one. Message text never turns into control tokens; only the template's\n"
    "own text does. --messages FILE takes a whole conversation instead of PROMPT: a JSON\n"
    "array of OpenAI-style messages, or {\"messages\": [...], \"tools\": [...]}; tool\n"
    "definitions and assistant tool_calls go to the template. --print-prompt shows the rendered prompt and its tokens and exits\n"
    "(with --json: {\"prompt\": text, \"prompt_tokens\": [ids], \"template\": name}).\n"
    "\n"
    "Generation stops at an end-of-generation token, after -n tokens, or at the context\n"
    "limit (with a message). Without --seed a fresh random seed is drawn and printed on\n"
    "stderr; the same seed, prompt and settings give the same tokens on any thread count\n"
    "and instruction set.\n"
    "\n"
    "--stop TEXT (repeatable; llama.cpp's -r/--reverse-prompt is an alias) ends generation\n"
    "after the token whose text completes TEXT (matched across token boundaries); the text\n"
    "printed and recorded stops before TEXT. \\n, \\t, \\r, \\\\ and \\xHH in TEXT are escapes.\n"
    "\n"
    "--grammar GBNF, --grammar-file FILE, --json-schema JSON or --json-schema-file FILE\n"
    "constrain the output (llama.cpp's GBNF; JSON Schema converted to GBNF). Drafting\n"
    "stays on and never changes a token. A receipt records the grammar used and, for a\n"
    "schema, {\"type\": \"json_schema\", \"json_schema\": {\"schema\": ...}}.\n"
    "\n"
    "Reasoning between <think> and </think> is split off the answer: --reasoning show\n"
    "(default) prints it (dimmed on a terminal), --reasoning hide does not. It is never part\n"
    "of the receipt's output.text (the tokens keep it).\n"
    "\n"
    "--json prints one JSON object on stdout instead of streaming text:\n"
    "  {\"prompt_tokens\": [ids], \"tokens\": [generated ids], \"text\": \"...\",\n"
    "   \"reasoning\": \"...\", \"stop\": \"eog\" | \"stop_string\" | \"length\" | \"context\",\n"
    "   \"seed\": N, \"prompt_ms\": F, \"gen_ms\": F}\n"
    "--logits-out FILE writes the logits of every generated position as little-endian\n"
    "float32 rows of n_vocab values (for checking against a reference).\n";

/* ================================================================ helpers */

/* Prints s as a JSON string. Generated text may hold invalid UTF-8 (a model can emit
 * byte tokens that never form a character): such sequences become U+FFFD so the output
 * stays valid JSON; the token ids carry the exact bytes. */
static void run_print_str(FILE *out, const char *s0, size_t n0)
{
    size_t n = 0;
    char *clean = json_utf8_sanitize(s0, n0, &n);
    const char *s = clean ? clean : "";
    if (!clean)
        n = 0;
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (c < 0x20)
                fprintf(out, "\\u%04x", c);
            else
                fputc(c, out);
        }
    }
    fputc('"', out);
    free(clean);
}

/* Parses "1,2, 3" into ids. */
static enum kn_status parse_ids(const char *s, int32_t **out, int64_t *n_out, struct kn_err *err)
{
    int64_t cap = 16, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids)
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            free(ids);
            return kn_fail(err, KN_E_ARG, "--prompt-ids: '%.20s' is not a token id", p);
        }
        if (n == cap) {
            cap *= 2;
            int32_t *t = realloc(ids, (size_t)cap * sizeof *t);
            if (!t) {
                free(ids);
                return kn_fail(err, KN_E_NOMEM, "out of memory");
            }
            ids = t;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    *out = ids;
    *n_out = n;
    return KN_OK;
}

/* ================================================================ the command */

struct run_opts;

/* What the per-token callback needs: where the text goes and the logits file. */
struct run_gen {
    const struct run_opts *o;
    const struct engine *e;
    int64_t n_vocab;
    FILE *logits_f;
    struct text_think *think;
    bool show_reasoning, dim;    /* print the reasoning; dimmed (a terminal) */
    bool in_reasoning;           /* the last bytes printed were reasoning */
    char *content, *reasoning;   /* scratch for the split */
    struct kn_buf *text;         /* the answer: after stop strings and reasoning */
    struct kn_buf *rtext;        /* the reasoning */
    struct kn_err *err;
    bool failed;
};

static bool run_write_logits(struct run_gen *g);
static bool run_on_token(void *ctx, int32_t id, int64_t index);

/* The receipt's input for a chat run: the messages as sent. */
static struct json_value *run_messages(const char *system, const char *user, size_t user_len,
                                       struct kn_err *err)
{
    struct json_value *arr = json_new_array();
    const char *roles[2] = {"system", "user"};
    for (int i = system ? 0 : 1; arr && i < 2; i++) {
        struct json_value *m = json_new_object();
        if (json_object_set(m, "role", json_new_string(roles[i]), err) != KN_OK ||
            json_object_set(m, "content",
                            i ? json_new_stringn(user, user_len) : json_new_string(system),
                            err) != KN_OK ||
            json_array_push(arr, m, err) != KN_OK) {
            json_free(arr);
            return NULL;
        }
    }
    return arr;
}

struct run_opts {
    int64_t ctx_size, threads, batch;
    bool raw, json, print_prompt;
    bool no_draft, no_warm_start;
    int64_t draft_max, cache_ram;
    const char *prompt_cache;
    const char *device, *system, *file, *prompt_ids, *logits_out, *kv_type, *chat_format;
    const char *receipt, *sign_key;
    const char *chat_template, *chat_template_kwargs, *messages;
    /* stop strings, grammars, reasoning */
    struct cli_strs stop;
    const char *grammar, *grammar_file, *json_schema, *json_schema_file, *reasoning;
};

static bool run_write_logits(struct run_gen *g)
{
    if (fwrite(g->e->logits, sizeof(float), (size_t)g->n_vocab, g->logits_f) != (size_t)g->n_vocab) {
        kn_fail(g->err, KN_E_IO, "cannot write %s", g->o->logits_out);
        g->failed = true;
        return false;
    }
    return true;
}

/* Splits text the engine says is safe to show (stop strings held back and cut) into
 * answer and reasoning, keeps both and prints them. */
static bool run_emit(struct run_gen *g, const char *bytes, size_t len, bool last)
{
    size_t nc = 0, nr = 0;
    if (last)
        text_think_flush(g->think, g->content, &nc, g->reasoning, &nr);
    else
        text_think_feed(g->think, bytes, len, g->content, &nc, g->reasoning, &nr);
    if (!kn_buf_add(g->text, g->content, nc) || !kn_buf_add(g->rtext, g->reasoning, nr)) {
        kn_fail(g->err, KN_E_NOMEM, "out of memory");
        g->failed = true;
        return false;
    }
    if (g->o->json)
        return true;
    /* Within one feed the kinds come in order: reasoning ends before content starts
     * (or the reverse), so print the kind that was open first. */
    bool r_first = g->in_reasoning || !g->think->inside;
    for (int k = 0; k < 2; k++) {
        bool is_r = (k == 0) == r_first;
        const char *p = is_r ? g->reasoning : g->content;
        size_t n = is_r ? nr : nc;
        if (n == 0 || (is_r && !g->show_reasoning))
            continue;
        if (g->dim && is_r != g->in_reasoning)
            fputs(is_r ? "\x1b[2m" : "\x1b[0m", stdout);
        g->in_reasoning = is_r;
        fwrite(p, 1, n, stdout);
    }
    if (last && g->dim && g->in_reasoning) {
        fputs("\x1b[0m", stdout);
        g->in_reasoning = false;
    }
    fflush(stdout);
    return true;
}

/* Writes the logits, then streams the text the token adds. */
static bool run_on_token(void *ctx, int32_t id, int64_t index)
{
    struct run_gen *g = ctx;
    (void)id;
    (void)index;
    if (g->logits_f && !run_write_logits(g))
        return false;
    size_t n;
    const char *t = engine_text(g->e, &n);
    return run_emit(g, t, n, false);
}

static int fail(const struct kn_err *err)
{
    fprintf(stderr, "kinetic run: %s\n", err->msg);
    return 1;
}

static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > 16 ? 16 : (int)n;
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o = {
        .ctx_size = 0, .threads = default_threads(), .batch = 512, .device = "cpu",
        .kv_type = "f32", .cache_ram = 2048,
    };
    /* The sampling flags (--temp ... -s, -n) come from the settings table (cli_sampling). */
    const struct cli_opt own[] = {
        {"ctx-size", 'c', CLI_INT, &o.ctx_size, "N", "context size in tokens (default: min(model's, 4096))", NULL},
        {"threads", 't', CLI_INT, &o.threads, "N", "threads (default: CPUs online, at most 16)", NULL},
        {"batch-size", 'b', CLI_INT, &o.batch, "N", "prompt tokens per forward pass (default 512); never changes the output", NULL},
        {"device", 0, CLI_STR, &o.device, "DEV", "cpu (cuda and vulkan are not available in this build)", NULL},
        {"kv-type", 0, CLI_STR, &o.kv_type, "T", "KV cache type: f32 or f16 (default f32)", NULL},
        {"system", 0, CLI_STR, &o.system, "TEXT", "system message for the chat template", NULL},
        {"raw", 0, CLI_FLAG, &o.raw, NULL, "send the prompt as is, without the chat template", NULL},
        {"chat-format", 0, CLI_STR, &o.chat_format, "NAME", "force a built-in template: chatml, llama3, llama2, mistral, gemma, phi3, raw", NULL},
        {"chat-template", 0, CLI_STR, &o.chat_template, "FILE", "render chats with this Jinja template instead of the model's", NULL},
        {"chat-template-kwargs", 0, CLI_STR, &o.chat_template_kwargs, "JSON", "extra template variables, a JSON object, e.g. '{\"enable_thinking\": false}'", NULL},
        {"messages", 0, CLI_STR, &o.messages, "FILE", "the conversation as JSON: [messages] or {\"messages\": [...], \"tools\": [...]}", NULL},
        {"file", 'f', CLI_STR, &o.file, "FILE", "read the prompt from FILE ('-' = standard input)", NULL},
        {"prompt-ids", 0, CLI_STR, &o.prompt_ids, "IDS", "use these comma-separated token ids as the prompt (no template, no tokenizer)", NULL},
        {"print-prompt", 0, CLI_FLAG, &o.print_prompt, NULL, "print the rendered prompt and its token ids, then exit", NULL},
        {"json", 0, CLI_FLAG, &o.json, NULL, "print a JSON result (ids, text, stop reason, seed) instead of streaming", NULL},
        {"logits-out", 0, CLI_STR, &o.logits_out, "FILE", "write the logits of each generated position (float32)", NULL},
        {"receipt", 0, CLI_STR, &o.receipt, "FILE", "write a receipt of this run to FILE (check it with kinetic verify-receipt)", NULL},
        {"sign-key", 0, CLI_STR, &o.sign_key, "KEYFILE", "sign the receipt with this Ed25519 key (32 bytes or 64 hex digits)", NULL},
        {"no-draft", 0, CLI_FLAG, &o.no_draft, NULL, "turn RAD-1 drafting off (never changes the output)", NULL},
        {"draft-max", 0, CLI_INT, &o.draft_max, "N", "most draft tokens per verification pass (default 16)", NULL},
        {"prompt-cache", 0, CLI_STR, &o.prompt_cache, "FILE", "Warm Start: keep the prompt's KV entries in FILE and reuse the longest cached prefix next time", NULL},
        {"cache-ram", 0, CLI_INT, &o.cache_ram, "MiB", "most memory (and file size) of the prompt cache (default 2048)", NULL},
        {"no-warm-start", 0, CLI_FLAG, &o.no_warm_start, NULL, "turn the prompt cache off (never changes the output)", NULL},
        {"stop", 0, CLI_STRS, &o.stop, "TEXT", "stop after the text TEXT appears (repeatable; not printed)", NULL},
        {"reverse-prompt", 'r', CLI_STRS, &o.stop, "TEXT", "the same as --stop (llama.cpp's name)", NULL},
        {"grammar", 0, CLI_STR, &o.grammar, "GBNF", "constrain the output with a GBNF grammar", NULL},
        {"grammar-file", 0, CLI_STR, &o.grammar_file, "FILE", "read the GBNF grammar from FILE", NULL},
        {"json-schema", 0, CLI_STR, &o.json_schema, "JSON", "constrain the output to JSON matching this JSON Schema", NULL},
        {"json-schema-file", 0, CLI_STR, &o.json_schema_file, "FILE", "read the JSON Schema from FILE", NULL},
        {"reasoning", 0, CLI_STR, &o.reasoning, "MODE", "show (default; dimmed on a terminal) or hide <think> reasoning", NULL},
        {NULL, 0, 0, NULL, NULL, NULL, NULL},
    };
    struct cli_sampling cs;
    struct sample_params spar;
    const char *pos[2];
    int n_pos = 0;
    int rc = cli_parse_sampling("run", run_usage, run_more_help, argc, argv, own, &cs, &spar, pos, 2,
                                &n_pos);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (strcmp(o.device, "cpu") != 0) {
        if (strcmp(o.device, "cuda") == 0 || strcmp(o.device, "vulkan") == 0)
            fprintf(stderr, "kinetic run: --device %s is not available in this build; use --device cpu\n", o.device);
        else
            fprintf(stderr, "kinetic run: unknown --device '%s' (cpu, cuda, vulkan)\n", o.device);
        return 2;
    }
    if (o.threads < 1 || o.threads > 256) {
        fprintf(stderr, "kinetic run: --threads must be in 1..256\n");
        return 2;
    }
    if (o.batch < 1 || o.batch > 65536) {
        fprintf(stderr, "kinetic run: --batch-size must be in 1..65536\n");
        return 2;
    }
    if (o.ctx_size < 0) {
        fprintf(stderr, "kinetic run: --ctx-size must not be negative\n");
        return 2;
    }
    if (o.ctx_size > MODEL_MAX_CTX) {
        fprintf(stderr, "kinetic run: --ctx-size must be at most %lld\n", (long long)MODEL_MAX_CTX);
        return 2;
    }
    enum model_kv_type kv_type;
    if (!model_kv_type_from_name(o.kv_type, &kv_type)) {
        fprintf(stderr, "kinetic run: --kv-type must be f32 or f16\n");
        return 2;
    }
    enum chat_format forced_format = CHAT_FORMAT_RAW;
    if (o.chat_format && !chat_format_from_name(o.chat_format, &forced_format)) {
        fprintf(stderr, "kinetic run: unknown --chat-format '%s'\n", o.chat_format);
        return 2;
    }
    if (o.raw && (o.chat_template || o.chat_template_kwargs)) {
        fprintf(stderr, "kinetic run: --raw sends the prompt as is; it cannot be combined with --chat-template or --chat-template-kwargs\n");
        return 2;
    }
    if (o.sign_key && !o.receipt) {
        fprintf(stderr, "kinetic run: --sign-key signs a receipt; add --receipt FILE\n");
        return 2;
    }
    if (o.raw && (o.system || o.chat_format)) {
        fprintf(stderr, "kinetic run: --raw sends the prompt as is; it cannot be combined with --system or --chat-format\n");
        return 2;
    }
    const char *model_path = pos[0];
    const char *prompt_arg = n_pos > 1 ? pos[1] : NULL;
    if ((prompt_arg != NULL) + (o.file != NULL) + (o.prompt_ids != NULL) + (o.messages != NULL) > 1) {
        fprintf(stderr, "kinetic run: give the prompt once: as an argument, with -f, --prompt-ids or --messages\n");
        return 2;
    }
    if (o.messages && (o.raw || o.system)) {
        fprintf(stderr, "kinetic run: --messages holds the whole conversation; it cannot be combined with --raw or --system\n");
        return 2;
    }

    struct kn_err err = {0};
    int ret = 1;
    struct kn_buf prompt = {0}, text = {0};
    struct model *m = NULL;
    struct tok *tk = NULL;
    struct kern_pool *pool = NULL;
    struct engine e = {0};
    bool engine_ok = false;
    int32_t *ptoks = NULL, *gen = NULL;
    int64_t n_ptoks = 0, n_gen = 0;
    struct chat_prompt cp = {0};
    struct chat_renderer cr = {0};
    bool cr_ok = false;
    struct gguf_file *g_only = NULL;
    struct json_value *conv = NULL;
    const struct json_value *conv_msgs = NULL, *conv_tools = NULL;
    struct text_think think;
    struct kn_buf rtext = {0};
    char *content_buf = NULL, *reasoning_buf = NULL;
    char *gbnf = NULL;
    struct json_value *rf = NULL;
    struct grammar *gram = NULL;
    struct grammar_vocab *gvocab = NULL;
    struct grammar_state *gstate = NULL;
    char *stops[CLI_MAX_STRS] = {0};
    struct sample_ctx sctx = {0};
    bool sctx_ok = false;
    FILE *logits_f = NULL;
    struct receipt_key key;
    bool have_key = false;
    struct json_value *input = NULL;
    struct receipt rcpt = {0};
    struct receipt_template rtmpl = {0};
    const char *topen = NULL, *tclose = NULL;
    bool tinside = false;
    enum engine_finish finish = ENGINE_FINISH_LENGTH;
    struct pcache *pc = NULL;
    char model_hex[65] = {0};
    int64_t n_reused = 0;
    double cache_load_s = 0;

    if (o.reasoning && strcmp(o.reasoning, "show") != 0 && strcmp(o.reasoning, "hide") != 0) {
        fprintf(stderr, "kinetic run: --reasoning must be show or hide, not '%s'\n", o.reasoning);
        return 2;
    }
    /* ---- stop strings and the grammar: mistakes in them should not cost a model load. */
    for (int i = 0; i < o.stop.n; i++)
        if (!(stops[i] = text_stop_unescape(o.stop.v[i], "--stop", &err))) {
            if (err.status != KN_E_NOMEM) { /* "" or a bad escape: a usage error */
                fprintf(stderr, "kinetic run: %s\n", err.msg);
                ret = 2;
                err.msg[0] = 0;
            }
            goto out;
        }
    if (cli_grammar(o.grammar, o.grammar_file, o.json_schema, o.json_schema_file, &gbnf, &rf, &gram,
                    &err) != KN_OK) {
        if (err.status != KN_E_NOMEM && err.status != KN_E_IO) {
            fprintf(stderr, "kinetic run: %s\n", err.msg);
            ret = 2;
            err.msg[0] = 0;
        }
        goto out;
    }

    /* ---- the signing key first: a bad key should not cost a model load. */
    if (o.sign_key) {
        if (receipt_key_load(o.sign_key, &key, &err) != KN_OK)
            goto out;
        have_key = true;
    }

    /* ---- the prompt text, or the conversation. */
    if (o.messages) {
        if (json_parse_file(o.messages, &JSON_INPUT_LIMITS, &conv, &err) != KN_OK) {
            kn_err_prefix(&err, "--messages");
            goto out;
        }
        conv_msgs = json_is(conv, JSON_ARRAY) ? conv : json_get(conv, "messages");
        conv_tools = json_is(conv, JSON_OBJECT) ? json_get(conv, "tools") : NULL;
        if (!json_is(conv_msgs, JSON_ARRAY) || json_len(conv_msgs) == 0) {
            kn_fail(&err, KN_E_ARG, "--messages %s: want a non-empty JSON array of messages, or an "
                    "object with one in \"messages\"", o.messages);
            goto out;
        }
    } else if (!o.prompt_ids) {
        enum kn_status st = KN_OK;
        if (prompt_arg && strcmp(prompt_arg, "-") != 0)
            st = kn_buf_add(&prompt, prompt_arg, strlen(prompt_arg)) ? KN_OK : KN_E_NOMEM;
        else if (o.file || (prompt_arg && strcmp(prompt_arg, "-") == 0)) {
            char *text = NULL;
            size_t len = 0;
            bool from_stdin = prompt_arg && strcmp(prompt_arg, "-") == 0;
            st = cli_read_prompt(from_stdin ? "-" : o.file, &text, &len, &err);
            if (st == KN_OK && !kn_buf_add(&prompt, text, len))
                st = kn_fail(&err, KN_E_NOMEM, "out of memory");
            free(text);
        } else {
            kn_fail(&err, KN_E_ARG, "no prompt: give PROMPT, -f FILE or '-' for standard input");
            goto out;
        }
        if (st != KN_OK)
            goto out;
    }

    /* ---- the model and its tokenizer. */
    /* --print-prompt needs only the vocabulary and template: it also works on a
     * vocabulary-only GGUF file. */
    struct model_load_opts lo = {.repack = true};
    const struct gguf_file *gf = NULL;
    if (o.print_prompt && !o.prompt_ids) {
        if (gguf_open(&g_only, model_path, &err) != KN_OK)
            goto out;
        gf = g_only;
    } else {
        if (model_open(&m, model_path, &lo, &err) != KN_OK)
            goto out;
        gf = m->gguf;
    }
    if (tok_load(&tk, gf, &err) != KN_OK) {
        kn_err_prefix(&err, model_path);
        goto out;
    }

    /* ---- prompt tokens: ids given, raw text, or the chat template. */
    if (o.prompt_ids) {
        if (parse_ids(o.prompt_ids, &ptoks, &n_ptoks, &err) != KN_OK)
            goto out;
    } else {
        struct chat_renderer_opts ro = {.raw = o.raw, .chat_format = o.chat_format,
                                        .template_file = o.chat_template,
                                        .kwargs_json = o.chat_template_kwargs};
        if (chat_renderer_init(&cr, &ro, gf, tk, &err) != KN_OK)
            goto out;
        cr_ok = true;
        if (cr.warning[0])
            fprintf(stderr, "kinetic run: warning: the model's chat template cannot be rendered (%s); "
                    "using the built-in %s template\n", cr.warning, chat_format_name(cr.tmpl.format));
        if (cr.engine == CHAT_ENGINE_BUILTIN && cr.choice == CHAT_CHOICE_VOCAB)
            fprintf(stderr, "kinetic run: chat template not recognised; using the %s format its tokens suggest\n",
                    chat_format_name(cr.tmpl.format));
        else if (cr.engine == CHAT_ENGINE_BUILTIN && cr.choice == CHAT_CHOICE_UNKNOWN)
            fprintf(stderr, "kinetic run: chat template not recognised; sending the prompt raw (see --chat-format)\n");
        struct chat_message msgs[2];
        size_t nm = 0;
        if (o.system && !o.raw)
            msgs[nm++] = (struct chat_message){"system", o.system};
        msgs[nm++] = (struct chat_message){"user", prompt.p};
        if (conv_msgs) {
            if (chat_renderer_render_json(&cr, conv_msgs, conv_tools, NULL, true, &cp, &err) != KN_OK)
                goto out;
        } else if (chat_renderer_render(&cr, msgs, nm, !o.raw, &cp, &err) != KN_OK) {
            goto out;
        }
        if (!o.json)
            kn_log(KN_LOG_DEBUG, "chat template %s (%s)", chat_renderer_name(&cr), cr.source);
        /* Control tokens only from the template's own text; one BOS if the model wants it. */
        size_t nt = 0;
        if (chat_prompt_tokenize(&cp, tk, &ptoks, &nt, &err) != KN_OK)
            goto out;
        n_ptoks = (int64_t)nt;
        if (o.print_prompt) {
            if (o.json) {
                printf("{\"prompt\": ");
                run_print_str(stdout, cp.text, cp.len);
                printf(", \"template\": ");
                run_print_str(stdout, chat_renderer_name(&cr), strlen(chat_renderer_name(&cr)));
                printf(", \"source\": ");
                run_print_str(stdout, cr.source, strlen(cr.source));
                printf(", \"prompt_tokens\": [");
                for (int64_t i = 0; i < n_ptoks; i++)
                    printf(i ? ", %d" : "%d", ptoks[i]);
                printf("]}\n");
            } else {
                fwrite(cp.text, 1, cp.len, stdout);
                printf("\n[template %s from %s; %lld tokens:", chat_renderer_name(&cr), cr.source,
                       (long long)n_ptoks);
                for (int64_t i = 0; i < n_ptoks; i++)
                    printf(" %d", ptoks[i]);
                printf("]\n");
            }
            ret = 0;
            goto out;
        }
    }
    if (n_ptoks == 0) {
        kn_fail(&err, KN_E_ARG, "the prompt is empty (and the model adds no BOS token)");
        goto out;
    }

    /* ---- context, threads, engine. */
    int64_t n_ctx = o.ctx_size ? o.ctx_size : (m->hp.n_ctx_train < 4096 ? m->hp.n_ctx_train : 4096);
    if (n_ctx > m->hp.n_ctx_train)
        fprintf(stderr, "kinetic run: warning: --ctx-size %lld exceeds the %lld tokens the model was trained on\n",
                (long long)n_ctx, (long long)m->hp.n_ctx_train);
    if (n_ptoks >= n_ctx) {
        kn_fail(&err, KN_E_LIMIT, "the prompt has %lld tokens; the context holds %lld; use a larger --ctx-size",
                (long long)n_ptoks, (long long)n_ctx);
        goto out;
    }
    if (kern_pool_create((int)o.threads, &pool, &err) != KN_OK)
        goto out;
    if (o.draft_max < 0 || o.draft_max > ENGINE_DRAFT_LIMIT) {
        kn_fail(&err, KN_E_ARG, "--draft-max must be in 0..%d", ENGINE_DRAFT_LIMIT);
        goto out;
    }
    struct engine_params ep = {.n_ctx = n_ctx, .n_batch = o.batch, .kv_type = kv_type,
                               .no_draft = o.no_draft, .draft_max = (int32_t)o.draft_max};
    if (engine_init(&e, m, pool, &ep, &err) != KN_OK)
        goto out;
    engine_ok = true;

    /* ---- the seed, and logit biases against the vocabulary (a usage error). */
    if (!cli_sampling_given(&cs, "seed")) {
        spar.seed = sample_fresh_seed();
        fprintf(stderr, "kinetic run: seed %llu\n", (unsigned long long)spar.seed);
    }
    const uint64_t seed = spar.seed;
    const int64_t n_vocab = m->hp.n_vocab;
    if (sample_params_check_vocab(&spar, n_vocab, &err) != KN_OK) {
        fprintf(stderr, "kinetic run: %s\n", err.msg);
        err.msg[0] = 0;
        ret = 2;
        goto out;
    }
    if (sample_ctx_init(&sctx, (int32_t)n_vocab, &err) != KN_OK)
        goto out;
    sctx_ok = true;
    if (gram) {
        if (grammar_vocab_from_tok(&gvocab, tk, (int32_t)n_vocab, &err) != KN_OK ||
            grammar_state_init(&gstate, gram, &err) != KN_OK)
            goto out;
        sample_ctx_set_grammar(&sctx, gstate, gvocab);
    }
    if (engine_set_stop(&e, (const char *const *)stops, o.stop.n, &err) != KN_OK)
        goto out;
    gen = malloc((size_t)n_ctx * sizeof *gen);
    /* The splitter's outputs: one token's text, what the stop matcher held back and a
     * marker's held-back bytes. */
    size_t split_cap = tok_max_piece(tk) + TEXT_MAX_MARKER + 16;
    for (int i = 0; i < o.stop.n; i++)
        split_cap += strlen(stops[i]);
    content_buf = malloc(split_cap);
    reasoning_buf = malloc(split_cap);
    if (!gen || !content_buf || !reasoning_buf) {
        kn_fail(&err, KN_E_NOMEM, "out of memory");
        goto out;
    }
    if (o.logits_out && !(logits_f = fopen(o.logits_out, "wb"))) {
        kn_fail(&err, KN_E_IO, "cannot write %s: %s", o.logits_out, strerror(errno));
        goto out;
    }
    {
        /* A template that opens the reasoning in the prompt (DeepSeek-R1, Qwen3 thinking)
         * makes the output start inside it. */
        chat_think_markers(tk, &topen, &tclose);
        tinside = chat_prompt_opens_think(cp.text, cp.len, topen);
        if (text_think_init(&think, topen, tclose, tinside, &err) != KN_OK)
            goto out;
    }

    /* ---- Warm Start: the prompt cache file, when asked for. */
    if (o.prompt_cache && !o.no_warm_start) {
        if (o.cache_ram < 1 || o.cache_ram > ((int64_t)1 << 30)) {
            kn_fail(&err, KN_E_ARG, "--cache-ram must be in 1..%lld MiB", (long long)1 << 30);
            goto out;
        }
        if (hashcache_model_blake3(model_path, model_hex, &err) != KN_OK ||
            pcache_create(&pc, m, kv_type, (size_t)o.cache_ram << 20, &err) != KN_OK)
            goto out;
        struct kn_err lerr = {0};
        double tl = kn_now();
        if (access(o.prompt_cache, F_OK) == 0 &&
            pcache_load(pc, o.prompt_cache, model_hex, &lerr) != KN_OK)
            fprintf(stderr, "kinetic run: warning: ignoring the prompt cache: %s; it will be rewritten\n",
                    lerr.msg);
        cache_load_s = kn_now() - tl;
    }

    /* ---- prompt, then generation. */
    double t0 = kn_now();
    if (engine_eval_prompt(&e, pc, ptoks, n_ptoks, &n_reused, &err) != KN_OK)
        goto out;
    double t1 = kn_now();
    struct run_gen g = {
        .o = &o, .e = &e, .n_vocab = n_vocab, .logits_f = logits_f, .think = &think,
        .show_reasoning = !o.reasoning || strcmp(o.reasoning, "show") == 0,
        .dim = isatty(STDOUT_FILENO) != 0, .content = content_buf, .reasoning = reasoning_buf,
        .text = &text, .rtext = &rtext, .err = &err,
    };
    if (engine_generate(&e, tk, &sctx, &spar, spar.n_predict, run_on_token, &g, gen, &n_gen, &finish,
                        &err) != KN_OK ||
        g.failed)
        goto out;
    bool by_string = engine_stop_matched(&e) >= 0;
    /* The logits the end-of-generation token was sampled from. */
    if (finish == ENGINE_FINISH_STOP && !by_string && logits_f && !run_write_logits(&g))
        goto out;
    const char *stop = finish == ENGINE_FINISH_STOP ? (by_string ? "stop_string" : "eog")
                       : finish == ENGINE_FINISH_CONTEXT ? "context" : "length";
    double t2 = kn_now();
    {
        /* The tail the stop matcher held back, then what the splitter holds. */
        size_t tn;
        const char *tail = engine_text(&e, &tn);
        if (!run_emit(&g, tail, tn, false) || !run_emit(&g, NULL, 0, true))
            goto out;
    }
    if (o.json) {
        printf("{\"prompt_tokens\": [");
        for (int64_t i = 0; i < n_ptoks; i++)
            printf(i ? ", %d" : "%d", ptoks[i]);
        printf("], \"tokens\": [");
        for (int64_t i = 0; i < n_gen; i++)
            printf(i ? ", %d" : "%d", gen[i]);
        printf("], \"text\": ");
        run_print_str(stdout, text.p ? text.p : "", text.n);
        printf(", \"reasoning\": ");
        run_print_str(stdout, rtext.p ? rtext.p : "", rtext.n);
        printf(", \"stop\": \"%s\", \"seed\": %llu, \"prompt_ms\": %.3f, \"gen_ms\": %.3f", stop,
               (unsigned long long)seed, (t1 - t0) * 1e3, (t2 - t1) * 1e3);
        printf(", \"prompt_reused\": %lld, \"cache_load_ms\": %.3f", (long long)n_reused,
               cache_load_s * 1e3);
        printf(", \"draft_proposed\": %lld, \"draft_accepted\": %lld, \"draft_passes\": %lld, \"forward_passes\": %lld}\n",
               (long long)e.draft_stats.proposed, (long long)e.draft_stats.accepted,
               (long long)e.draft_stats.passes, (long long)e.draft_stats.steps);
    } else {
        printf("\n");
    }
    fflush(stdout);
    if (strcmp(stop, "context") == 0)
        fprintf(stderr, "kinetic run: stopped at the context limit (%lld tokens); use a larger --ctx-size\n",
                (long long)n_ctx);
    /* Generated tokens after the first each cost one forward pass. */
    int64_t n_dec = n_gen > 0 ? n_gen - 1 : 0;
    if (strcmp(stop, "eog") == 0)
        n_dec = n_gen;
    const struct engine_draft_stats *ds = &e.draft_stats;
    if (pc)
        fprintf(stderr, "kinetic run: prompt cache: %lld of %lld prompt tokens reused (file read in %.3f s)\n",
                (long long)n_reused, (long long)n_ptoks, cache_load_s);
    fprintf(stderr, "kinetic run: prompt %lld tokens in %.3f s (%.1f t/s); generated %lld tokens in %.3f s (%.1f t/s); %lld threads; draft %lld/%lld accepted in %lld passes%s\n",
            (long long)n_ptoks, t1 - t0, (t1 - t0) > 0 ? n_ptoks / (t1 - t0) : 0.0, (long long)n_gen,
            t2 - t1, (t2 - t1) > 0 && n_dec ? n_dec / (t2 - t1) : 0.0, (long long)o.threads,
            (long long)ds->accepted, (long long)ds->proposed, (long long)ds->passes,
            e.draft ? "" : " (off)");
    if (o.receipt) {
        if (o.prompt_ids)
            input = json_new_string(o.prompt_ids);
        else if (o.raw)
            input = json_new_stringn(prompt.p ? prompt.p : "", prompt.n);
        else if (conv_msgs)
            input = json_clone(conv_msgs);
        else
            input = run_messages(o.system, prompt.p ? prompt.p : "", prompt.n, &err);
        if (!input) {
            kn_fail(&err, KN_E_NOMEM, "out of memory building the receipt");
            goto out;
        }
        /* How the input became the prompt, for verify-receipt to render it again. */
        if (o.prompt_ids)
            receipt_template_plain(&rtmpl, "ids");
        else if (receipt_template_from_renderer(&rtmpl, &cr, conv_tools, NULL,
                                                conv_msgs ? true : !o.raw, cp.now, &err) != KN_OK)
            goto out;
        struct receipt_run rr = {
            .model_path = model_path, .input = input, .prompt = ptoks, .n_prompt = n_ptoks,
            .sampling = &spar, .max_tokens = spar.n_predict,
            .stop = (const char *const *)stops, .n_stop = o.stop.n,
            .grammar = gbnf, .response_format = rf,
            .finish = engine_finish_name(finish), .text = text.p, .text_len = text.n,
            .output = gen, .n_output = n_gen, .ctx_size = n_ctx, .cache_type = o.kv_type,
            .tmpl = &rtmpl, .think_open = topen, .think_close = tclose, .think_inside = tinside,
        };
        if (receipt_from_run(&rcpt, &rr, &err) != KN_OK ||
            (have_key && receipt_sign(&rcpt, &key, &err) != KN_OK) ||
            receipt_write(&rcpt, o.receipt, &err) != KN_OK)
            goto out;
        fprintf(stderr, "kinetic run: receipt written to %s%s\n", o.receipt,
                have_key ? " (signed)" : "");
    }
    if (pc && pcache_save(pc, o.prompt_cache, model_hex, &err) != KN_OK)
        goto out;
    ret = 0;

out:
    pcache_free(pc);
    if (have_key)
        receipt_key_wipe(&key);
    receipt_free(&rcpt);
    receipt_template_free(&rtmpl);
    json_free(input);
    if (ret && err.msg[0])
        fail(&err);
    if (logits_f && fclose(logits_f) != 0 && ret == 0) {
        fprintf(stderr, "kinetic run: cannot write %s\n", o.logits_out);
        ret = 1;
    }
    if (sctx_ok)
        sample_ctx_free(&sctx);
    grammar_state_free(gstate);
    grammar_vocab_free(gvocab);
    grammar_free(gram);
    free(gbnf);
    json_free(rf);
    for (int i = 0; i < CLI_MAX_STRS; i++)
        free(stops[i]);
    free(content_buf);
    free(reasoning_buf);
    free(rtext.p);
    free(gen);
    free(ptoks);
    chat_prompt_free(&cp);
    if (cr_ok)
        chat_renderer_free(&cr);
    if (engine_ok)
        engine_free(&e);
    kern_pool_free(pool);
    tok_free(tk);
    model_close(m);
    gguf_close(g_only);
    json_free(conv);
    free(prompt.p);
    free(text.p);
    return ret;
}
