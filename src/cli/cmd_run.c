/* cmd_run.c: `kinetic run`: one prompt through a model, the continuation streamed to
 * stdout, a timing summary on stderr. */
#include "cli.h"

#include "base/base.h"
#include "base/json.h"
#include "chat/chat.h"
#include "engine/session.h"
#include "grammar/grammar.h"
#include "crypto/hashcache.h"
#include "receipt/receipt.h"
#include "sample/sample.h"
#include "text/text.h"

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
    "'{\"enable_thinking\": false}'). --chat-template FILE (or --chat-template-file FILE) uses a\n"
    "Jinja file instead. A template the engine cannot render falls back, with a warning, to\n"
    "the built-in renderer of its family (chatml, llama3, llama2, mistral, gemma, phi3), which\n"
    "--chat-format NAME (or --chat-template NAME, as llama.cpp names them) forces. A\n"
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
    "--stop TEXT (repeatable; -r/--reverse-prompt, llama.cpp's name) ends generation\n"
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
    "float32 rows of n_vocab values (for checking against a reference).\n"
    "\n"
    "llama.cpp's spellings are accepted where the meaning is the same (each listed with\n"
    "'also' above): -m, -p, -ngl, -sys, -ctk/-ctv (Kinetic has one KV cache type, so they\n"
    "must agree), --chat-template NAME, --reasoning-format auto|deepseek; --jinja and\n"
    "-fa change nothing here and say so.\n";

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

/* What the per-token callback needs: the session, the reply's text and the logits file. */
struct run_gen {
    const struct run_opts *o;
    const struct session *s;
    FILE *logits_f;
    struct session_reply *reply;
    struct kn_err *err;
    bool failed;
};

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
    const char *prompt_cache, *repack_cache;
    const char *system, *file, *prompt_ids, *logits_out, *kv_type, *chat_format;
    const char *receipt, *sign_key;
    const char *chat_template, *chat_template_file, *chat_template_kwargs, *messages;
    const char *cache_type_k, *cache_type_v, *reasoning_format;
    /* stop strings, grammars, reasoning */
    struct cli_strs stop;
    const char *grammar, *grammar_file, *json_schema, *json_schema_file, *reasoning;
};

static bool run_write_logits(struct run_gen *g)
{
    size_t n_vocab = (size_t)g->s->n_vocab;
    if (fwrite(g->s->e.logits, sizeof(float), n_vocab, g->logits_f) != n_vocab) {
        kn_fail(g->err, KN_E_IO, "cannot write %s", g->o->logits_out);
        g->failed = true;
        return false;
    }
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
    const char *t = engine_text(&g->s->e, &n);
    if (!session_reply_feed(g->reply, t, n, false)) {
        kn_fail(g->err, KN_E_NOMEM, "out of memory");
        g->failed = true;
        return false;
    }
    return true;
}

/* ================================================================ input and output */

/* The prompt as given: text (PROMPT, -f FILE, standard input), a conversation
 * (--messages) or token ids (--prompt-ids). */
struct run_input {
    struct kn_buf text;
    struct json_value *conv;                  /* the --messages document */
    const struct json_value *msgs, *tools;    /* in conv */
    int32_t *ids;
    int64_t n_ids;
};

static void run_input_free(struct run_input *in)
{
    free(in->text.p);
    json_free(in->conv);
    free(in->ids);
}

static enum kn_status run_read_input(const struct run_opts *o, const char *prompt_arg,
                                     struct run_input *in, struct kn_err *err)
{
    if (o->prompt_ids)
        return parse_ids(o->prompt_ids, &in->ids, &in->n_ids, err);
    if (o->messages) {
        enum kn_status st = json_parse_file(o->messages, &JSON_INPUT_LIMITS, &in->conv, err);
        if (st != KN_OK) {
            kn_err_prefix(err, "--messages");
            return st;
        }
        in->msgs = json_is(in->conv, JSON_ARRAY) ? in->conv : json_get(in->conv, "messages");
        in->tools = json_is(in->conv, JSON_OBJECT) ? json_get(in->conv, "tools") : NULL;
        if (!json_is(in->msgs, JSON_ARRAY) || json_len(in->msgs) == 0)
            return kn_fail(err, KN_E_ARG, "--messages %s: want a non-empty JSON array of messages, "
                           "or an object with one in \"messages\"", o->messages);
        return KN_OK;
    }
    if (prompt_arg && strcmp(prompt_arg, "-") != 0)
        return kn_buf_add(&in->text, prompt_arg, strlen(prompt_arg))
                   ? KN_OK : kn_fail(err, KN_E_NOMEM, "out of memory");
    if (!o->file && !prompt_arg)
        return kn_fail(err, KN_E_ARG, "no prompt: give PROMPT, -f FILE or '-' for standard input");
    /* -f FILE, -f - or '-': bounded, and never blocking on a FIFO (cli_read_prompt). */
    char *text = NULL;
    size_t len = 0;
    enum kn_status st = cli_read_prompt(prompt_arg ? "-" : o->file, &text, &len, err);
    /* The prompt's text goes into the receipt, whose verifier refuses a NUL byte (the
     * renderer would stop there): refuse it here, as the server does. */
    if (st == KN_OK && memchr(text, 0, len))
        st = kn_fail(err, KN_E_ARG, "the prompt in %s holds a NUL byte at offset %zu; give text",
                     prompt_arg || strcmp(o->file, "-") == 0 ? "standard input" : o->file,
                     (size_t)((const char *)memchr(text, 0, len) - text));
    if (st == KN_OK && !kn_buf_add(&in->text, text, len))
        st = kn_fail(err, KN_E_NOMEM, "out of memory");
    free(text);
    return st;
}

/* --print-prompt: the rendered prompt and its tokens, as text or JSON. */
static void run_print_prompt(const struct run_opts *o, const struct session *s,
                             const struct session_prompt *sp)
{
    const char *tname = chat_renderer_name(&s->cr);
    if (o->json) {
        printf("{\"prompt\": ");
        run_print_str(stdout, sp->cp.text, sp->cp.len);
        printf(", \"template\": ");
        run_print_str(stdout, tname, strlen(tname));
        printf(", \"source\": ");
        run_print_str(stdout, s->cr.source, strlen(s->cr.source));
        printf(", \"prompt_tokens\": [");
        for (int64_t i = 0; i < sp->n; i++)
            printf(i ? ", %d" : "%d", sp->ids[i]);
        printf("]}\n");
    } else {
        fwrite(sp->cp.text, 1, sp->cp.len, stdout);
        printf("\n[template %s from %s; %lld tokens:", tname, s->cr.source, (long long)sp->n);
        for (int64_t i = 0; i < sp->n; i++)
            printf(" %d", sp->ids[i]);
        printf("]\n");
    }
}

/* The shortest span a rate is given for: below it (and for no tokens, or for one generated
 * token, which costs no decode pass) the clock says nothing useful. */
#define RUN_RATE_MIN_S 0.001

/* "12.3 t/s" for n tokens (or passes) in sec seconds, "- t/s" when there is no rate. */
static const char *rate_str(char *buf, size_t cap, int64_t n, double sec)
{
    if (n < 1 || sec < RUN_RATE_MIN_S)
        snprintf(buf, cap, "- t/s");
    else
        snprintf(buf, cap, "%.1f t/s", (double)n / sec);
    return buf;
}

/* The end of the output (--json: the whole result), then the timing summary on stderr. */
static void run_print_result(const struct run_opts *o, const struct session *s,
                             const struct session_gen *g, const struct session_reply *reply,
                             const int32_t *ptoks, int64_t n_ptoks)
{
    const char *stop = session_stop_name(g);
    const struct engine_draft_stats *ds = &s->e.draft_stats;
    if (o->json) {
        printf("{\"prompt_tokens\": [");
        for (int64_t i = 0; i < n_ptoks; i++)
            printf(i ? ", %d" : "%d", ptoks[i]);
        printf("], \"tokens\": [");
        for (int64_t i = 0; i < g->n; i++)
            printf(i ? ", %d" : "%d", g->ids[i]);
        printf("], \"text\": ");
        run_print_str(stdout, reply->text.p, reply->text.n);
        printf(", \"reasoning\": ");
        run_print_str(stdout, reply->rtext.p, reply->rtext.n);
        printf(", \"stop\": \"%s\", \"seed\": %llu, \"prompt_ms\": %.3f, \"gen_ms\": %.3f", stop,
               (unsigned long long)s->o.sp.seed, g->prompt_s * 1e3, g->gen_s * 1e3);
        printf(", \"prompt_reused\": %lld, \"cache_load_ms\": %.3f", (long long)g->n_reused,
               s->cache_load_s * 1e3);
        printf(", \"draft_proposed\": %lld, \"draft_accepted\": %lld, \"draft_passes\": %lld, \"forward_passes\": %lld}\n",
               (long long)ds->proposed, (long long)ds->accepted, (long long)ds->passes,
               (long long)ds->steps);
    } else {
        printf("\n");
    }
    fflush(stdout);
    if (g->finish == ENGINE_FINISH_CONTEXT)
        fprintf(stderr, "kinetic run: stopped at the context limit (%lld tokens); use a larger --ctx-size\n",
                (long long)s->n_ctx);
    if (s->gstate && grammar_state_error(s->gstate)) /* a bound of grammar.h stopped it */
        fprintf(stderr, "kinetic run: the grammar stopped the output: %s\n",
                grammar_state_error(s->gstate));
    /* Generated tokens after the first each cost one forward pass. */
    int64_t n_dec = g->n > 0 ? g->n - 1 : 0;
    if (strcmp(stop, "eog") == 0)
        n_dec = g->n;
    if (s->pc)
        fprintf(stderr, "kinetic run: prompt cache: %lld of %lld prompt tokens reused (file read in %.3f s)\n",
                (long long)g->n_reused, (long long)n_ptoks, s->cache_load_s);
    char pr[32], gr[32];
    fprintf(stderr, "kinetic run: prompt %lld token%s in %.3f s (%s); generated %lld token%s in %.3f s (%s); %lld thread%s; draft %lld/%lld accepted in %lld pass%s%s\n",
            (long long)n_ptoks, n_ptoks == 1 ? "" : "s", g->prompt_s,
            rate_str(pr, sizeof pr, n_ptoks, g->prompt_s), (long long)g->n, g->n == 1 ? "" : "s",
            g->gen_s, rate_str(gr, sizeof gr, n_dec, g->gen_s), (long long)s->o.threads,
            s->o.threads == 1 ? "" : "s", (long long)ds->accepted, (long long)ds->proposed,
            (long long)ds->passes, ds->passes == 1 ? "" : "es", s->e.draft ? "" : " (off)");
}

/* --receipt FILE: the session's record with the input as given (the ids as typed, the raw
 * text, or the messages), signed with key when not NULL. */
static enum kn_status run_write_receipt(const struct run_opts *o, const struct session *s,
                                        const struct run_input *in,
                                        const struct session_prompt *sp, const int32_t *ptoks,
                                        int64_t n_ptoks, const struct session_gen *g,
                                        const struct session_reply *reply,
                                        const struct receipt_key *key, struct kn_err *err)
{
    struct json_value *input;
    if (o->prompt_ids)
        input = json_new_string(o->prompt_ids);
    else if (o->raw)
        input = json_new_stringn(in->text.p ? in->text.p : "", in->text.n);
    else if (in->msgs)
        input = json_clone(in->msgs);
    else
        input = run_messages(o->system, in->text.p ? in->text.p : "", in->text.n, err);
    if (!input)
        return kn_fail(err, KN_E_NOMEM, "out of memory building the receipt");
    /* How the input became the prompt, for verify-receipt to render it again. */
    struct receipt_template rtmpl = {0};
    enum kn_status st;
    if (o->prompt_ids)
        receipt_template_plain(&rtmpl, "ids");
    else if ((st = receipt_template_from_renderer(&rtmpl, &s->cr, in->tools, NULL,
                                                  in->msgs ? true : !o->raw, sp->cp.now,
                                                  err)) != KN_OK) {
        json_free(input);
        return st;
    }
    struct session_record rr;
    session_record_init(s, g, &rr);
    rr.tmpl = &rtmpl;
    rr.think_inside = sp->think_inside;
    rr.input = input;
    rr.prompt = ptoks;
    rr.n_prompt = n_ptoks;
    rr.text = reply->text.p;
    rr.text_len = reply->text.n;
    struct receipt rcpt = {0};
    st = receipt_from_run(&rcpt, &rr, err);
    if (st == KN_OK && key)
        st = receipt_sign(&rcpt, key, err);
    if (st == KN_OK)
        st = receipt_write(&rcpt, o->receipt, err);
    receipt_free(&rcpt);
    receipt_template_free(&rtmpl);
    json_free(input);
    if (st == KN_OK)
        fprintf(stderr, "kinetic run: receipt written to %s%s\n", o->receipt, key ? " (signed)" : "");
    return st;
}

static int fail(const struct kn_err *err)
{
    fprintf(stderr, "kinetic run: %s\n", err->msg);
    return 1;
}

int cmd_run(int argc, char **argv)
{
    struct run_opts o = {
        .ctx_size = 0, .threads = session_default_threads(), .batch = SESSION_BATCH_DEFAULT,
        .kv_type = SESSION_KV_TYPE_DEFAULT, .cache_ram = SESSION_CACHE_RAM_DEFAULT,
    };
    struct cli_device dv = CLI_DEVICE_INIT;
    const char *pos[2] = {NULL, NULL}; /* MODEL.gguf, PROMPT */
    /* The sampling flags (--temp ... -s, -n) come from the settings table (cli_sampling). */
    const struct cli_opt own[] = {
        {"model", 'm', CLI_POS, &pos[0], "MODEL.gguf", "the model file (instead of the first argument)", NULL, NULL},
        {"prompt", 'p', CLI_POS, &pos[1], "PROMPT", "the prompt (instead of the second argument)", NULL, NULL},
        {"ctx-size", 'c', CLI_INT, &o.ctx_size, "N", CLI_HELP_CTX, NULL, NULL},
        {"threads", 't', CLI_INT, &o.threads, "N", CLI_HELP_THREADS, NULL, NULL},
        {"batch-size", 'b', CLI_INT, &o.batch, "N", CLI_HELP_BATCH, NULL, NULL},
        {"device", 0, CLI_STR, &dv.spec, "DEV", CLI_HELP_DEVICE, NULL, NULL},
        {"gpu-layers", 0, CLI_INT, &dv.gpu_layers, "N", CLI_HELP_GPU_LAYERS, NULL, CLI_ALIAS_GPU_LAYERS},
        {"kv-type", 0, CLI_STR, &o.kv_type, "T", CLI_HELP_KV, NULL, NULL},
        {"cache-type-k", 0, CLI_STR, &o.cache_type_k, "T", CLI_HELP_KV_K, NULL, "-ctk"},
        {"cache-type-v", 0, CLI_STR, &o.cache_type_v, "T", CLI_HELP_KV_V, NULL, "-ctv"},
        {"repack-cache", 0, CLI_STR, &o.repack_cache, "DIR", CLI_HELP_REPACK_CACHE, NULL, NULL},
        {"system", 0, CLI_STR, &o.system, "TEXT", "system message for the chat template", NULL, CLI_ALIAS_SYSTEM},
        {"raw", 0, CLI_FLAG, &o.raw, NULL, "send the prompt as is, without the chat template", NULL, NULL},
        {"chat-format", 0, CLI_STR, &o.chat_format, "NAME", CLI_HELP_CHAT_FORMAT, NULL, NULL},
        {"chat-template", 0, CLI_STR, &o.chat_template, "FILE|NAME", CLI_HELP_CHAT_TEMPLATE, NULL, NULL},
        {"chat-template-file", 0, CLI_STR, &o.chat_template_file, "FILE", CLI_HELP_CHAT_TEMPLATE_FILE, NULL, NULL},
        {"chat-template-kwargs", 0, CLI_STR, &o.chat_template_kwargs, "JSON", "extra template variables, a JSON object, e.g. '{\"enable_thinking\": false}'", NULL, NULL},
        CLI_OPT_JINJA,
        {"messages", 0, CLI_STR, &o.messages, "FILE", "the conversation as JSON: [messages] or {\"messages\": [...], \"tools\": [...]}", NULL, NULL},
        {"file", 'f', CLI_STR, &o.file, "FILE", "read the prompt from FILE ('-' = standard input)", NULL, NULL},
        {"prompt-ids", 0, CLI_STR, &o.prompt_ids, "IDS", "use these comma-separated token ids as the prompt (no template, no tokenizer)", NULL, NULL},
        {"print-prompt", 0, CLI_FLAG, &o.print_prompt, NULL, "print the rendered prompt and its token ids, then exit", NULL, NULL},
        {"json", 0, CLI_FLAG, &o.json, NULL, "print a JSON result (ids, text, stop reason, seed) instead of streaming", NULL, NULL},
        {"logits-out", 0, CLI_STR, &o.logits_out, "FILE", "write the logits of each generated position (float32)", NULL, NULL},
        {"receipt", 0, CLI_STR, &o.receipt, "FILE", "write a receipt of this run to FILE (check it with kinetic verify-receipt)", NULL, NULL},
        {"sign-key", 0, CLI_STR, &o.sign_key, "KEYFILE", "sign the receipt with this Ed25519 key (32 bytes or 64 hex digits)", NULL, NULL},
        {"no-draft", 0, CLI_FLAG, &o.no_draft, NULL, "turn RAD-1 drafting off (never changes the output)", NULL, NULL},
        {"draft-max", 0, CLI_INT, &o.draft_max, "N", "most draft tokens per verification pass (default 16)", NULL, NULL},
        {"prompt-cache", 0, CLI_STR, &o.prompt_cache, "FILE", "Warm Start: keep the prompt's KV entries in FILE and reuse the longest cached prefix next time", NULL, NULL},
        {"cache-ram", 0, CLI_INT, &o.cache_ram, "MiB", "most memory (and file size) of the prompt cache (default " CLI_XSTR(SESSION_CACHE_RAM_DEFAULT) ")", NULL, NULL},
        {"no-warm-start", 0, CLI_FLAG, &o.no_warm_start, NULL, "turn the prompt cache off (never changes the output)", NULL, NULL},
        {"stop", 'r', CLI_STRS, &o.stop, "TEXT", "stop after the text TEXT appears (repeatable; not printed)", NULL, "--reverse-prompt"},
        {"grammar", 0, CLI_STR, &o.grammar, "GBNF", "constrain the output with a GBNF grammar", NULL, NULL},
        {"grammar-file", 0, CLI_STR, &o.grammar_file, "FILE", "read the GBNF grammar from FILE", NULL, NULL},
        {"json-schema", 0, CLI_STR, &o.json_schema, "JSON", "constrain the output to JSON matching this JSON Schema", NULL, NULL},
        {"json-schema-file", 0, CLI_STR, &o.json_schema_file, "FILE", "read the JSON Schema from FILE", NULL, NULL},
        {"reasoning", 0, CLI_STR, &o.reasoning, "MODE", "show (default; dimmed on a terminal) or hide <think> reasoning", NULL, NULL},
        {"reasoning-format", 0, CLI_STR, &o.reasoning_format, "FMT", CLI_HELP_REASONING_FORMAT, NULL, NULL},
        CLI_OPT_FLASH_ATTN,
        CLI_OPT_END,
    };
    struct cli_sampling cs;
    struct sample_params spar;
    int n_pos = 0;
    int rc = cli_parse_sampling("run", run_usage, run_more_help, argc, argv, own, &cs, &spar, pos, 2,
                                &n_pos);
    if (rc)
        return rc < 0 ? 0 : rc;
    if (cli_kv_types("run", &o.kv_type, o.cache_type_k, o.cache_type_v) != 0 ||
        cli_check_session("run", o.ctx_size, o.threads, o.batch, o.kv_type, false) != 0 ||
        cli_reasoning_format("run", o.reasoning_format, false) != 0)
        return 2;
    enum chat_format forced_format = CHAT_FORMAT_RAW;
    if (o.chat_format && !chat_format_from_name(o.chat_format, &forced_format)) {
        fprintf(stderr, "kinetic run: unknown --chat-format '%s'\n", o.chat_format);
        return 2;
    }
    if (o.raw && (o.chat_template || o.chat_template_file || o.chat_template_kwargs)) {
        fprintf(stderr, "kinetic run: --raw sends the prompt as is; it cannot be combined with --chat-template or --chat-template-kwargs\n");
        return 2;
    }
    if (cli_chat_template("run", &o.chat_format, &o.chat_template, o.chat_template_file) != 0)
        return 2;
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

    if (o.reasoning && strcmp(o.reasoning, "show") != 0 && strcmp(o.reasoning, "hide") != 0) {
        fprintf(stderr, "kinetic run: --reasoning must be show or hide, not '%s'\n", o.reasoning);
        return 2;
    }
    if (o.draft_max < 0 || o.draft_max > ENGINE_DRAFT_LIMIT) {
        fprintf(stderr, "kinetic run: --draft-max must be in 0..%d\n", ENGINE_DRAFT_LIMIT);
        return 2;
    }
    struct kn_err err = {0};
    int ret = 1;
    struct run_input in = {0};
    struct session s = {0};
    bool s_ok = false;
    struct session_prompt sp = {0};
    struct session_reply reply = {0};
    char *gbnf = NULL;
    struct json_value *rf = NULL;
    struct grammar *gram = NULL;
    char *stops[CLI_MAX_STRS] = {0};
    FILE *logits_f = NULL;
    struct receipt_key key;
    bool have_key = false;

    /* ---- stop strings, the grammar, the signing key and the prompt: mistakes in them
     * should not cost a model load. */
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
    if (o.sign_key) {
        if (receipt_key_load(o.sign_key, &key, &err) != KN_OK)
            goto out;
        have_key = true;
    }
    if (run_read_input(&o, prompt_arg, &in, &err) != KN_OK)
        goto out;

    /* ---- the session: --print-prompt needs only the vocabulary and template (it also
     * works on a vocabulary-only GGUF file); token ids need no template. */
    struct session_opts so;
    session_opts_default(&so);
    so.model_path = model_path;
    so.level = o.print_prompt && !o.prompt_ids ? SESSION_VOCAB : SESSION_ENGINE;
    so.name = "kinetic run";
    so.no_template = o.prompt_ids != NULL;
    so.raw = o.raw;
    so.chat_format = o.chat_format;
    so.chat_template = o.chat_template;
    so.chat_template_kwargs = o.chat_template_kwargs;
    so.ctx_size = o.ctx_size;
    so.batch = o.batch;
    so.threads = (int)o.threads;
    so.kv_type = o.kv_type;
    so.no_draft = o.no_draft;
    so.repack_cache = o.repack_cache;
    so.draft_max = (int32_t)o.draft_max;
    so.stop = (const char *const *)stops;
    so.n_stop = o.stop.n;
    so.grammar = gram;
    so.gbnf = gbnf;
    so.response_format = rf;
    /* ---- the seed: a fresh one unless given (not for --print-prompt). */
    if (so.level == SESSION_ENGINE && !cli_sampling_given(&cs, "seed")) {
        spar.seed = sample_fresh_seed();
        fprintf(stderr, "kinetic run: seed %llu\n", (unsigned long long)spar.seed);
    }
    so.sp = spar;
    if (so.level == SESSION_ENGINE && (ret = cli_device_open("run", &dv, &so)) != 0)
        goto out;
    ret = 1;
    if (session_open(&s, &so, &err) != KN_OK) {
        if (err.status == KN_E_ARG) { /* a flag the model refuses: a logit bias outside its
                                       * vocabulary, a template error, a context too large */
            fprintf(stderr, "kinetic run: %s\n", err.msg);
            ret = 2;
            err.msg[0] = 0;
        }
        goto out;
    }
    s_ok = true;

    /* ---- prompt tokens: ids given, or the conversation through the template. */
    const int32_t *ptoks = in.ids;
    int64_t n_ptoks = in.n_ids;
    if (!o.prompt_ids) {
        struct chat_message msgs[2];
        size_t nm = 0;
        if (o.system && !o.raw)
            msgs[nm++] = (struct chat_message){"system", o.system};
        msgs[nm++] = (struct chat_message){"user", in.text.p};
        struct session_input si = {.msgs = in.msgs ? NULL : msgs, .n_msgs = nm,
                                   .messages = in.msgs, .tools = in.tools};
        if (session_prompt(&s, &si, true, &sp, &err) != KN_OK)
            goto out;
        if (o.print_prompt) {
            run_print_prompt(&o, &s, &sp);
            ret = 0;
            goto out;
        }
        ptoks = sp.ids;
        n_ptoks = sp.n;
    }
    if (n_ptoks == 0) {
        kn_fail(&err, KN_E_ARG, "the prompt is empty (and the model adds no BOS token)");
        goto out;
    }
    if (o.logits_out && !(logits_f = fopen(o.logits_out, "wb"))) {
        kn_fail(&err, KN_E_IO, "cannot write %s: %s", o.logits_out, strerror(errno));
        goto out;
    }
    bool show_reasoning = !o.reasoning || strcmp(o.reasoning, "show") == 0;
    if (session_reply_init(&reply, &s, sp.think_inside, o.json ? NULL : stdout, show_reasoning,
                           &err) != KN_OK)
        goto out;
    /* ---- Warm Start: the prompt cache file, when asked for. */
    if (o.prompt_cache && !o.no_warm_start) {
        char model_hex[65];
        if (hashcache_model_blake3(model_path, model_hex, &err) != KN_OK ||
            session_open_cache(&s, o.prompt_cache, o.cache_ram, model_hex, &err) != KN_OK)
            goto out;
    }

    /* ---- prompt, then generation, streamed to stdout; then the result. */
    struct run_gen g = {.o = &o, .s = &s, .logits_f = logits_f, .reply = &reply, .err = &err};
    struct session_gen gen;
    if (session_generate(&s, &s.o.sp, ptoks, n_ptoks, run_on_token, &g, &gen,
                         &err) != KN_OK ||
        g.failed)
        goto out;
    /* The logits the end-of-generation token was sampled from. */
    if (strcmp(session_stop_name(&gen), "eog") == 0 && logits_f && !run_write_logits(&g))
        goto out;
    if (!session_reply_finish(&reply, &s)) {
        kn_fail(&err, KN_E_NOMEM, "out of memory");
        goto out;
    }
    run_print_result(&o, &s, &gen, &reply, ptoks, n_ptoks);
    if (o.receipt && run_write_receipt(&o, &s, &in, &sp, ptoks, n_ptoks, &gen, &reply,
                                       have_key ? &key : NULL, &err) != KN_OK)
        goto out;
    if (session_save_cache(&s, &err) != KN_OK)
        goto out;
    ret = 0;

out:
    if (have_key)
        receipt_key_wipe(&key);
    if (ret && err.msg[0])
        fail(&err);
    if (logits_f && fclose(logits_f) != 0 && ret == 0) {
        fprintf(stderr, "kinetic run: cannot write %s\n", o.logits_out);
        ret = 1;
    }
    session_reply_free(&reply);
    session_prompt_free(&sp);
    if (s_ok)
        session_close(&s);
    cli_device_close(&dv); /* after the model, whose buffers live on it */
    grammar_free(gram);
    free(gbnf);
    json_free(rf);
    for (int i = 0; i < CLI_MAX_STRS; i++)
        free(stops[i]);
    run_input_free(&in);
    return ret;
}
