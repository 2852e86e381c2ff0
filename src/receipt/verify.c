/* verify.c: receipts from runs, and verify-receipt: token hashes, then the signature, then
 * the model file, then a rerun on one sequence with every speed feature off. */
#include "receipt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "../base/progress.h"
#include "../chat/chat.h"
#include "../crypto/blake3.h"
#include "../engine/session.h"
#include "../gguf/gguf.h"
#include "../grammar/grammar.h"
#include "../kernels/kernels.h"
#include "../model/model.h"
#include "../text/text.h"
#include "../token/tok.h"
#include "../crypto/buildid.h"
#include "../device/device.h"
#include "../crypto/hashcache.h"

/* The CPU's model name (the device registry's reading of it), owned by the caller. */
static char *cpu_name(void)
{
    char name[256];
    device_cpu_name(name, sizeof name);
    return strdup(name);
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

enum kn_status receipt_from_run(struct receipt *r, const struct session_record *run,
                                struct kn_err *err)
{
    memset(r, 0, sizeof *r); /* format 0: receipt_version_for chooses when it is written */
    snprintf(r->version, sizeof r->version, "%s", KN_VERSION);
    snprintf(r->build, sizeof r->build, "%s", kn_build_id());
    snprintf(r->numerics, sizeof r->numerics, "%s", KN_NUMERICS);
    struct stat st;
    if (stat(run->model_path, &st) != 0)
        return kn_fail(err, KN_E_IO, "%s: cannot stat: %s", run->model_path, strerror(errno));
    r->model_size = (uint64_t)st.st_size;
    enum kn_status s = hashcache_model_blake3(run->model_path, r->model_blake3, err);
    if (s != KN_OK)
        return s;
    if (run->device_class) {
        snprintf(r->device_class, sizeof r->device_class, "%s", run->device_class);
        snprintf(r->numerics, sizeof r->numerics, "%s", run->numerics ? run->numerics : KN_NUMERICS);
        r->gpu_layers = run->gpu_layers > 0 ? run->gpu_layers : 0;
    } else {
        snprintf(r->device_class, sizeof r->device_class, "%s", kern_device_class(kn_isa_active()));
    }
    snprintf(r->cache_type, sizeof r->cache_type, "%s", run->cache_type);
    r->ctx_size = run->ctx_size;
    r->sampling = *run->sampling;
    r->max_tokens = run->max_tokens;
    snprintf(r->finish, sizeof r->finish, "%s", run->finish);
    r->model_file = strdup(base_name(run->model_path));
    r->model_path = strdup(run->model_path);
    r->device_name = run->device_class && run->device_name ? strdup(run->device_name) : cpu_name();
    r->input = json_clone(run->input);
    r->prompt_ids = malloc(((size_t)run->n_prompt + 1) * sizeof(int32_t));
    r->output_ids = malloc(((size_t)run->n_output + 1) * sizeof(int32_t));
    r->stop = calloc((size_t)run->n_stop + 1, sizeof(char *));
    if (run->grammar && !(r->grammar = strdup(run->grammar))) {
        receipt_free(r);
        return kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
    }
    if (run->response_format && !(r->response_format = json_clone(run->response_format))) {
        receipt_free(r);
        return kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
    }
    if (run->tmpl && receipt_template_copy(&r->tmpl, run->tmpl, err) != KN_OK) {
        receipt_free(r);
        return KN_E_NOMEM;
    }
    if (run->think_open && run->think_close) {
        if (strlen(run->think_open) > TEXT_MAX_MARKER || strlen(run->think_close) > TEXT_MAX_MARKER) {
            receipt_free(r);
            return kn_fail(err, KN_E_INTERNAL, "a reasoning marker is longer than %d bytes",
                           TEXT_MAX_MARKER);
        }
        r->think.present = true;
        snprintf(r->think.open, sizeof r->think.open, "%s", run->think_open);
        snprintf(r->think.close, sizeof r->think.close, "%s", run->think_close);
        r->think.inside = run->think_inside;
    }
    size_t tl;
    r->text = json_utf8_sanitize(run->text ? run->text : "", run->text ? run->text_len : 0, &tl);
    r->text_len = tl;
    if (!r->model_file || !r->model_path || !r->device_name || !r->input || !r->prompt_ids ||
        !r->output_ids || !r->stop || !r->text) {
        receipt_free(r);
        return kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
    }
    memcpy(r->prompt_ids, run->prompt, (size_t)run->n_prompt * sizeof(int32_t));
    r->n_prompt = run->n_prompt;
    memcpy(r->output_ids, run->output, (size_t)run->n_output * sizeof(int32_t));
    r->n_output = run->n_output;
    for (int64_t i = 0; i < run->n_stop; i++) {
        if (!(r->stop[i] = strdup(run->stop[i]))) {
            receipt_free(r);
            return kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
        }
        r->n_stop = i + 1;
    }
    return KN_OK;
}

/* ================================================================ verify-receipt */

static bool class_to_isa(const char *cls, enum kn_isa *out)
{
    for (int i = 0; i < KN_ISA_COUNT; i++)
        if (strcmp(cls, kern_device_class((enum kn_isa)i)) == 0) {
            *out = (enum kn_isa)i;
            return true;
        }
    return false;
}

/* A token's text for reports: the piece with control characters escaped, quoted. */
static void piece_quoted(const struct tok *tk, int32_t id, char *buf, size_t cap)
{
    size_t len = 0;
    const char *p = tok_piece(tk, id, true, &len);
    /* A piece that is not whole UTF-8 (a byte token) is shown byte by byte. */
    bool utf8 = p && json_utf8_valid(p, len);
    size_t o = 0;
    buf[o++] = '"';
    for (size_t i = 0; p && i < len && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        if (utf8 && c >= 0xc0 && o + 12 >= cap)
            break; /* never cut a character */
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(buf + o, cap - o, "\\%c", c);
        else if (c < 0x20 || (!utf8 && c >= 0x80))
            o += (size_t)snprintf(buf + o, cap - o, c == '\n' ? "\\n" : "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o++] = '"';
    buf[o] = 0;
}

/* Locates the model: --model, else the receipt's path as given, else next to the receipt. */
static char *find_model(const char *receipt_path, const struct receipt *r, const char *given)
{
    if (given)
        return strdup(given);
    struct stat st;
    if (stat(r->model_path, &st) == 0)
        return strdup(r->model_path);
    const char *slash = receipt_path ? strrchr(receipt_path, '/') : NULL;
    if (slash && r->model_file[0] && !strchr(r->model_file, '/')) {
        size_t n = (size_t)(slash - receipt_path) + 1 + strlen(r->model_file) + 1;
        char *p = malloc(n);
        if (p) {
            snprintf(p, n, "%.*s/%s", (int)(slash - receipt_path), receipt_path, r->model_file);
            if (stat(p, &st) == 0)
                return p;
            free(p);
        }
    }
    return strdup(r->model_path);
}

struct rerun_cmp {
    const struct receipt *r;
    int64_t first_diff; /* -1 while identical */
    struct kn_progress *progress; /* of the prompt's and the output's tokens */
};

/* Stops the rerun at the first token that differs from the receipt's. */
static bool compare_token(void *ctx, int32_t id, int64_t i)
{
    struct rerun_cmp *c = ctx;
    kn_progress_update(c->progress, (uint64_t)(c->r->n_prompt + i + 1), "generating");
    if (i >= c->r->n_output || c->r->output_ids[i] != id) {
        c->first_diff = i;
        return false;
    }
    return true;
}

bool receipt_key_hex_ok(const char *s)
{
    if (!s || strlen(s) != RECEIPT_KEY_HEX)
        return false;
    for (size_t i = 0; i < RECEIPT_KEY_HEX; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')))
            return false;
    }
    return true;
}

/* ================================================================ input -> prompt tokens */

/* Reports the first place two token lists differ ("what" names the side computed). */
static void report_tokens(FILE *out, const struct tok *tk, const char *what, const int32_t *got,
                          int64_t n_got, const int32_t *want, int64_t n_want)
{
    int64_t i = 0;
    while (i < n_got && i < n_want && got[i] == want[i])
        i++;
    char a[96], b[96];
    if (i < n_got && i < n_want) {
        piece_quoted(tk, got[i], a, sizeof a);
        piece_quoted(tk, want[i], b, sizeof b);
        fprintf(out, "input: MISMATCH: %s does not give the recorded prompt tokens: token %lld is "
                     "%d (%s), the receipt has %d (%s)\n",
                what, (long long)i, got[i], a, want[i], b);
    } else if (i < n_want) {
        piece_quoted(tk, want[i], b, sizeof b);
        fprintf(out, "input: MISMATCH: %s does not give the recorded prompt tokens: it gives %lld "
                     "tokens, the receipt has %lld; token %lld there is %d (%s)\n",
                what, (long long)n_got, (long long)n_want, (long long)i, want[i], b);
    } else {
        piece_quoted(tk, got[i], a, sizeof a);
        fprintf(out, "input: MISMATCH: %s does not give the recorded prompt tokens: it gives %lld "
                     "tokens, the receipt has %lld; token %lld is %d (%s)\n",
                what, (long long)n_got, (long long)n_want, (long long)i, got[i], a);
    }
}

/* The ids of an "ids" input: "1, 2,3" as kinetic run --prompt-ids reads it, or the
 * array of ids a server completion was given. */
static bool parse_id_list(const struct json_value *in, const struct receipt *r, int32_t *ids,
                          int64_t *n)
{
    *n = 0;
    if (json_is(in, JSON_ARRAY)) {
        for (size_t i = 0; i < json_len(in); i++) {
            int64_t v;
            if (!json_int(json_at(in, i), &v) || v < 0 || v > INT32_MAX || *n >= r->ctx_size)
                return false;
            ids[(*n)++] = (int32_t)v;
        }
        return true;
    }
    const char *s = json_str(in);
    while (*s) {
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s)
            break;
        if (*s < '0' || *s > '9' || *n >= r->ctx_size)
            return false;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno || v > INT32_MAX)
            return false;
        ids[(*n)++] = (int32_t)v;
        s = end;
    }
    return true;
}

/* Whether any string in the input holds a NUL byte: the renderer reads message text as C
 * strings, so the text would end there for the prompt but not for a person reading it. */
static bool input_has_nul(const struct json_value *v)
{
    if (json_is(v, JSON_STRING))
        return memchr(v->u.string.s, 0, v->u.string.len) != NULL;
    if (json_is(v, JSON_ARRAY)) {
        for (size_t i = 0; i < json_len(v); i++)
            if (input_has_nul(json_at(v, i)))
                return true;
    } else if (json_is(v, JSON_OBJECT)) {
        for (size_t i = 0; i < v->u.object.len; i++)
            if (input_has_nul(v->u.object.items[i].value))
                return true;
    }
    return false;
}

/* ================================================================ legacy receipts
 *
 * A receipt written before template recording (no "template", no "output.think") does not
 * say how its input became the prompt tokens. An older Kinetic made prompt tokens from an
 * input in a few fixed ways by default, so verify-receipt tries exactly those, in this
 * order, through the functions run and serve use; the input is proven only when one of
 * them gives the recorded tokens:
 *   1. token ids: a string of ids (run --prompt-ids) or an array of ids (a server
 *      completion given ids), read as they are;
 *   2. a string: the raw prompt as run --raw tokenizes it (the raw renderer, the text as
 *      one user message, then chat_prompt_tokenize);
 *   3. a string: the prompt as serve tokenizes a completion (BOS, special tokens parsed);
 *   4. messages: the model's default template as run, chat and serve choose it without
 *      options (chat_renderer_init with none: tokenizer.chat_template, else the built-in
 *      family or raw), add_generation_prompt true, no kwargs, no tools. A template that
 *      reads the clock renders with today's clock: the receipt did not record the date, so
 *      it is proven only if today's date happens to give the same tokens.
 * Anything else (a --chat-template file, --chat-format, kwargs, tools, no generation
 * prompt) is a setting no legacy receipt recorded, so such an input is not proven: the
 * input-mismatch outcome. */

enum legacy_way { LEGACY_IDS, LEGACY_RAW, LEGACY_TEXT, LEGACY_CHAT, LEGACY_WAYS };

/* What the rendering that gave the prompt tokens says about the reasoning split. */
struct legacy_prompt {
    bool opens_think;       /* the prompt ends by opening the reasoning (run's rule) */
    bool chat;              /* rendered from messages: serve splits chat replies only */
    bool family_open_think; /* the template's family opens the reply in <think> (serve's) */
};

/* Renders the receipt's input one legacy way (what names it). Returns 1 with *ids
 * (malloc'd), 0 when the way does not apply to this input, -1 when the input cannot be
 * rendered that way (err says why) and -2 when the check itself failed (err). */
static int legacy_render(enum legacy_way way, const struct receipt *r, const struct gguf_file *g,
                         const struct tok *tk, int32_t **ids, size_t *n, char *what, size_t cap,
                         struct legacy_prompt *lp, bool *clock, struct kn_err *err)
{
    const struct json_value *in = r->input;
    bool text = json_is(in, JSON_STRING);
    const char *topen, *tclose;
    chat_think_markers(tk, &topen, &tclose);
    *ids = NULL;
    *n = 0;
    memset(lp, 0, sizeof *lp);
    if (way == LEGACY_IDS) {
        snprintf(what, cap, "token ids, as run --prompt-ids and a server completion read them");
        int64_t k = 0;
        if (!text && !json_is(in, JSON_ARRAY))
            return 0;
        if (!(*ids = malloc(((size_t)r->ctx_size + 1) * sizeof **ids)))
            return kn_fail(err, KN_E_NOMEM, "out of memory"), -2;
        if (!parse_id_list(in, r, *ids, &k)) {
            free(*ids);
            *ids = NULL;
            return 0;
        }
        *n = (size_t)k;
        return 1;
    }
    if (way == LEGACY_TEXT) {
        snprintf(what, cap, "the prompt as serve tokenizes a completion: BOS, special tokens parsed");
        if (!text)
            return 0;
        size_t tcap = in->u.string.len + 3;
        if (!(*ids = malloc(tcap * sizeof **ids)))
            return kn_fail(err, KN_E_NOMEM, "out of memory"), -2;
        if (tok_encode(tk, in->u.string.s, in->u.string.len, true, true, *ids, tcap, n, err) !=
            KN_OK) {
            free(*ids);
            *ids = NULL;
            return -2;
        }
        lp->opens_think = chat_prompt_opens_think(in->u.string.s, in->u.string.len, topen);
        return 1;
    }
    if ((way == LEGACY_RAW) != text)
        return 0;
    struct chat_renderer cr = {0};
    struct chat_prompt cp = {0};
    struct json_value *msgs = NULL;
    struct chat_renderer_opts ro = {.raw = way == LEGACY_RAW};
    int rc = -2;
    snprintf(what, cap, "the raw prompt, as run --raw tokenizes it");
    if (chat_renderer_init(&cr, &ro, g, tk, err) != KN_OK)
        return -1;
    if (way == LEGACY_CHAT) {
        snprintf(what, cap, "the model's default template: %s (%s), add_generation_prompt true, no "
                            "kwargs, no tools",
                 chat_renderer_name(&cr), cr.source);
        *clock = cr.engine == CHAT_ENGINE_JINJA && chat_renderer_reads_clock(&cr);
    }
    const struct json_value *m = in;
    if (text) { /* run --raw: the prompt as the one user message */
        struct json_value *one = json_new_object();
        if (!(msgs = json_new_array()) || !one ||
            json_object_set(one, "role", json_new_string("user"), err) != KN_OK ||
            json_object_set(one, "content", json_new_stringn(in->u.string.s, in->u.string.len),
                            err) != KN_OK ||
            json_array_push(msgs, one, err) != KN_OK) {
            json_free(one);
            kn_fail(err, KN_E_NOMEM, "out of memory");
            goto done;
        }
        m = msgs;
    }
    if (chat_renderer_render_json(&cr, m, NULL, NULL, way == LEGACY_CHAT, &cp, err) != KN_OK) {
        rc = -1;
        goto done;
    }
    if (chat_prompt_tokenize(&cp, tk, ids, n, err) != KN_OK)
        goto done;
    lp->opens_think = chat_prompt_opens_think(cp.text ? cp.text : "", cp.len, topen);
    lp->chat = way == LEGACY_CHAT;
    lp->family_open_think = cr.tmpl.open_think;
    rc = 1;
done:
    json_free(msgs);
    chat_prompt_free(&cp);
    chat_renderer_free(&cr);
    return rc;
}

/* The input of a receipt without a template record, proven by the first legacy way that
 * gives the recorded prompt tokens (see above); else the closest one's first difference. */
static int prove_input_legacy(const struct receipt *r, const struct gguf_file *g,
                              const struct tok *tk, FILE *out, struct legacy_prompt *lp)
{
    char what[400], best_what[400] = "", why[600] = "";
    int32_t *best = NULL;
    size_t best_n = 0, best_common = 0;
    bool clock = false;
    for (int w = 0; w < LEGACY_WAYS; w++) {
        struct kn_err err = {0};
        struct legacy_prompt p;
        int32_t *ids = NULL;
        size_t n = 0;
        int k = legacy_render((enum legacy_way)w, r, g, tk, &ids, &n, what, sizeof what, &p,
                              &clock, &err);
        if (k == -2) {
            fprintf(out, "input: could not check: %s\n", err.msg[0] ? err.msg : "out of memory");
            free(best);
            return RECEIPT_EXIT_ERROR;
        }
        if (k == -1 && !why[0])
            snprintf(why, sizeof why, "%.200s: %.380s", what, err.msg);
        if (k != 1)
            continue;
        if ((int64_t)n == r->n_prompt && memcmp(ids, r->prompt_ids, n * sizeof *ids) == 0) {
            fprintf(out, "input: proven (legacy receipt): it renders with the model's default "
                         "template settings (%s) to the %lld recorded prompt tokens%s\n",
                    what, (long long)r->n_prompt,
                    clock ? "; the template reads the clock, and today's date gives the same "
                            "tokens" : "");
            *lp = p;
            free(ids);
            free(best);
            return -1;
        }
        size_t c = 0;
        while (c < n && (int64_t)c < r->n_prompt && ids[c] == r->prompt_ids[c])
            c++;
        if (!best || c > best_common) {
            free(best);
            best = ids;
            best_n = n;
            best_common = c;
            snprintf(best_what, sizeof best_what, "%s", what);
        } else {
            free(ids);
        }
    }
    if (!best) {
        fprintf(out, "input: MISMATCH: the receipt records no template, and its input cannot be "
                     "rendered with the model's default template settings%s%s\n",
                why[0] ? ": " : "", why);
        return RECEIPT_EXIT_TEXT;
    }
    char lead[700];
    snprintf(lead, sizeof lead, "the receipt records no template, and %sthe model's default "
                                "rendering (%s)",
             clock ? "the model's template reads the clock (strftime_now), whose reading a "
                     "receipt without a template record does not hold, so it renders with "
                     "today's date; " : "",
             best_what);
    report_tokens(out, tk, lead, best, (int64_t)best_n, r->prompt_ids, r->n_prompt);
    free(best);
    return RECEIPT_EXIT_TEXT;
}

/* Renders the receipt's input again as run, chat and serve rendered it, and tokenizes it
 * the same way: the template record gives the renderer (chat_renderer_init), and
 * session_prompt_with, the function under run's, chat's and serve's session_prompt, renders
 * and tokenizes; a receipt without one goes the legacy ways (prove_input_legacy, which
 * fills lp for prove_text). Returns an exit code, or -1 when the input gives the recorded
 * tokens. */
static int prove_input(const struct receipt *r, const struct session *s, FILE *out,
                       struct legacy_prompt *lp)
{
    const struct gguf_file *g = s->gguf;
    const struct tok *tk = s->tk;
    const struct receipt_template *t = &r->tmpl;
    if (input_has_nul(r->input)) {
        fprintf(out, "input: MISMATCH: the input holds a NUL byte, where the rendered prompt "
                     "ends; what follows it did not make the prompt tokens\n");
        return RECEIPT_EXIT_TEXT;
    }
    if (!t->present)
        return prove_input_legacy(r, g, tk, out, lp);
    struct kn_err err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = RECEIPT_EXIT_ERROR;
    struct chat_renderer cr = {0};
    bool cr_ok = false;
    struct session_prompt sp = {0};
    struct json_value *msgs = NULL;
    const char *what = "input";
    if (strcmp(t->engine, "ids") == 0) {
        ids = malloc((size_t)r->ctx_size * sizeof *ids);
        int64_t k = 0;
        if (!ids)
            goto fail;
        if (!parse_id_list(r->input, r, ids, &k)) {
            fprintf(out, "input: MISMATCH: template.engine is \"ids\" but the input is not a list "
                         "of token ids that fits the context\n");
            rc = RECEIPT_EXIT_TEXT;
            goto done;
        }
        n = (size_t)k;
        what = "input (token ids)";
    } else if (strcmp(t->engine, "text") == 0) {
        const struct json_value *in = r->input;
        size_t cap = in->u.string.len + 3; /* as serve tokenizes a completion prompt */
        if (!(ids = malloc(cap * sizeof *ids)))
            goto fail;
        if (tok_encode(tk, in->u.string.s, in->u.string.len, true, true, ids, cap, &n, &err) !=
            KN_OK)
            goto fail;
        what = "input (text, tokenized)";
    } else {
        /* plain is what a conversation (chat, serve) gets for a model without a template */
        struct chat_renderer_opts ro = {.conversation = strcmp(t->engine, "plain") == 0};
        if (strcmp(t->source, "file") == 0) {
            ro.template_text = t->text;
            ro.template_name = "template.text";
        } else if (strcmp(t->source, "forced") == 0) {
            ro.raw = strcmp(t->engine, "raw") == 0;
            ro.chat_format = ro.raw ? NULL : t->engine;
        }
        if (chat_renderer_init(&cr, &ro, g, tk, &err) != KN_OK) {
            fprintf(out, "input: MISMATCH: the receipt's template cannot be loaded: %s\n", err.msg);
            rc = RECEIPT_EXIT_TEXT;
            goto done;
        }
        cr_ok = true;
        if (strcmp(chat_renderer_name(&cr), t->engine) != 0) {
            fprintf(out, "input: MISMATCH: the receipt says template.engine \"%s\", but %s renders "
                         "with \"%s\" for this model\n",
                    t->engine, cr.source, chat_renderer_name(&cr));
            rc = RECEIPT_EXIT_TEXT;
            goto done;
        }
        if (cr.engine == CHAT_ENGINE_JINJA) {
            uint8_t h[BLAKE3_OUT_LEN];
            char hex[65];
            blake3_hash(cr.src, cr.src_len, h);
            blake3_hex(h, sizeof h, hex);
            if (strcmp(hex, t->blake3) != 0) {
                fprintf(out, "input: MISMATCH: template.blake3 is %.16s, but %s hashes to %.16s\n",
                        t->blake3, strcmp(t->source, "file") == 0 ? "template.text"
                                                                   : "the model's tokenizer.chat_template",
                        hex);
                rc = RECEIPT_EXIT_TEXT;
                goto done;
            }
            if (chat_renderer_reads_clock(&cr) && !t->has_now) {
                fprintf(out, "input: MISMATCH: the template reads the clock (strftime_now) but the "
                             "receipt records no template.now\n");
                rc = RECEIPT_EXIT_TEXT;
                goto done;
            }
        }
        cr.fixed_now = true;
        cr.now = t->now;
        const struct json_value *m = r->input;
        if (json_is(m, JSON_STRING)) { /* --raw: the prompt as the one user message */
            struct json_value *one = json_new_object();
            if (!(msgs = json_new_array()) || !one ||
                json_object_set(one, "role", json_new_string("user"), &err) != KN_OK ||
                json_object_set(one, "content", json_new_stringn(m->u.string.s, m->u.string.len),
                                &err) != KN_OK ||
                json_array_push(msgs, one, &err) != KN_OK) {
                json_free(one);
                goto fail;
            }
            m = msgs;
        }
        struct session_input in = {.messages = m, .tools = t->tools, .kwargs = t->kwargs};
        enum kn_status st = session_prompt_with(s, &cr, &in, t->add_generation_prompt, true, &sp,
                                                &err);
        if (st == KN_E_NOMEM)
            goto fail;
        if (st != KN_OK) {
            fprintf(out, "input: MISMATCH: the input cannot be rendered with the receipt's "
                         "template: %s\n", err.msg);
            rc = RECEIPT_EXIT_TEXT;
            goto done;
        }
        ids = sp.ids; /* ours now; session_prompt_free frees the rest */
        n = (size_t)sp.n;
        sp.ids = NULL;
    }
    if ((int64_t)n != r->n_prompt || memcmp(ids, r->prompt_ids, n * sizeof *ids) != 0) {
        report_tokens(out, tk, what, ids, (int64_t)n, r->prompt_ids, r->n_prompt);
        rc = RECEIPT_EXIT_TEXT;
        goto done;
    }
    fprintf(out, "input: proven: it renders (%s) to the %lld recorded prompt tokens\n", t->engine,
            (long long)r->n_prompt);
    rc = -1;
    goto done;
fail:
    fprintf(out, "input: could not check: %s\n", err.msg[0] ? err.msg : "out of memory");
    rc = RECEIPT_EXIT_ERROR;
done:
    json_free(msgs);
    session_prompt_free(&sp);
    if (cr_ok)
        chat_renderer_free(&cr);
    free(ids);
    return rc;
}

/* ================================================================ output tokens -> text */

/* A few bytes of s around off, escaped, for reports. */
static void excerpt(const char *s, size_t len, size_t off, char *buf, size_t cap)
{
    size_t a = off > 12 ? off - 12 : 0, o = 0;
    buf[o++] = '"';
    for (size_t i = a; i < len && i < off + 12 && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            o += (size_t)snprintf(buf + o, cap - o, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f)
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o++] = '"';
    buf[o] = 0;
}

/* A reasoning split output.text may have been made with. */
struct text_split {
    bool on;
    const char *open, *close;
    bool inside;
};

/* Decodes the output tokens as the engine does (token pieces through the recorded stop
 * strings), then splits the reasoning off as sp says. Returns 0 with *clean (malloc'd,
 * sanitized as receipts store text), else an exit code with the reason printed. */
static int decode_text(const struct receipt *r, const struct tok *tk, const struct text_split *sp,
                       char **clean, size_t *clean_len, FILE *out)
{
    struct kn_err err = {0};
    struct text_stop ts;
    *clean = NULL;
    if (text_stop_init(&ts, (const char *const *)r->stop, (int)r->n_stop, &err) != KN_OK) {
        fprintf(out, "receipt: sampling.stop: %s\n", err.msg);
        return RECEIPT_EXIT_MALFORMED;
    }
    struct kn_buf raw = {0}, content = {0};
    size_t cap = tok_max_piece(tk) + ts.max_len + TEXT_MAX_MARKER + 16;
    char *buf = malloc(cap), *rbuf = malloc(cap);
    bool ok = buf && rbuf && kn_buf_add(&raw, "", 0) && kn_buf_add(&content, "", 0);
    for (int64_t i = 0; ok && i < r->n_output; i++) {
        size_t len = 0, n = 0;
        const char *p = tok_piece(tk, r->output_ids[i], false, &len);
        bool stopped = text_stop_feed(&ts, p ? p : "", p ? len : 0, buf, &n);
        ok = kn_buf_add(&raw, buf, n);
        if (stopped)
            break;
    }
    if (ok && ts.matched < 0) {
        size_t n = 0;
        text_stop_flush(&ts, buf, &n);
        ok = kn_buf_add(&raw, buf, n);
    }
    text_stop_free(&ts);
    const char *text = raw.p;
    size_t text_len = raw.n;
    if (ok && sp->on) {
        struct text_think th;
        ok = text_think_init(&th, sp->open, sp->close, sp->inside, &err) == KN_OK;
        /* Each feed's outputs hold its bytes plus a held-back marker (text.h). */
        size_t step = cap - TEXT_MAX_MARKER - 1;
        for (size_t i = 0; ok && i < raw.n; i += step) {
            size_t k = raw.n - i < step ? raw.n - i : step, nc = 0, nr = 0;
            text_think_feed(&th, raw.p + i, k, buf, &nc, rbuf, &nr);
            ok = kn_buf_add(&content, buf, nc);
        }
        if (ok) {
            size_t nc = 0, nr = 0;
            text_think_flush(&th, buf, &nc, rbuf, &nr);
            ok = kn_buf_add(&content, buf, nc);
        }
        text = content.p;
        text_len = content.n;
    }
    *clean = ok ? json_utf8_sanitize(text, text_len, clean_len) : NULL;
    free(buf);
    free(rbuf);
    free(raw.p);
    free(content.p);
    if (!*clean) {
        fprintf(out, "output.text: could not check: %s\n", err.msg[0] ? err.msg : "out of memory");
        return RECEIPT_EXIT_ERROR;
    }
    return 0;
}

/* Decodes the output tokens, splits the reasoning off as recorded and compares with
 * output.text byte for byte. A receipt without a template record (legacy, see above)
 * records no split either: its text is proven when it is the decoded text without a split
 * or with the split the model's family gets by default (chat_think_markers: run always
 * splits at that pair, starting inside when the prompt opened it; serve splits chat
 * replies when the vocabulary has the pair, starting inside for a family that opens
 * <think>, and nothing else). So the whole decoded text, reasoning included, is accepted
 * only where serve would have written it: a completion, or a vocabulary without the
 * markers. Returns an exit code, or -1 when they agree. */
static int prove_text(const struct receipt *r, const struct tok *tk, const struct legacy_prompt *lp,
                      FILE *out)
{
    struct text_split splits[3];
    const char *how[3];
    int ns = 0;
    bool legacy = !r->tmpl.present;
    const char *topen = NULL, *tclose = NULL;
    if (!legacy) {
        splits[ns] = (struct text_split){r->think.present, r->think.open, r->think.close,
                                         r->think.inside};
        how[ns++] = "";
    } else {
        bool known = chat_think_markers(tk, &topen, &tclose);
        if (!lp->chat || !known) { /* serve: a completion, or a vocabulary without markers */
            splits[ns] = (struct text_split){false, NULL, NULL, false};
            how[ns++] = "no reasoning split, as serve writes it by default";
        }
        splits[ns] = (struct text_split){true, topen, tclose, lp->opens_think};
        how[ns++] = "the reasoning split off as run does by default";
        bool in = strcmp(topen, "<think>") == 0 && lp->family_open_think;
        if (lp->chat && known && in != lp->opens_think) {
            splits[ns] = (struct text_split){true, topen, tclose, in};
            how[ns++] = "the reasoning split off as serve does by default";
        }
    }
    char *best = NULL;
    size_t best_len = 0, best_i = 0;
    for (int k = 0; k < ns; k++) {
        char *clean;
        size_t clean_len;
        int rc = decode_text(r, tk, &splits[k], &clean, &clean_len, out);
        if (rc) {
            free(best);
            return rc;
        }
        size_t want_len = r->text_len, i = 0;
        while (i < clean_len && i < want_len && clean[i] == r->text[i])
            i++;
        if (i == clean_len && i == want_len) {
            if (legacy)
                fprintf(out, "output.text: proven (legacy receipt): the %lld output tokens decode "
                             "to it (%zu bytes; %s)\n",
                        (long long)r->n_output, want_len, how[k]);
            else
                fprintf(out, "output.text: proven: the %lld output tokens decode to it (%zu "
                             "bytes)\n",
                        (long long)r->n_output, want_len);
            free(clean);
            free(best);
            return -1;
        }
        if (!best || i > best_i) {
            free(best);
            best = clean;
            best_len = clean_len;
            best_i = i;
        } else {
            free(clean);
        }
    }
    char a[128], b[128], why[200] = "";
    excerpt(r->text, r->text_len, best_i, a, sizeof a);
    excerpt(best, best_len, best_i, b, sizeof b);
    if (legacy)
        snprintf(why, sizeof why, " (the receipt records no reasoning split; %sthe model's "
                                  "default %.20s...%.20s split alike)",
                 ns > 1 && !splits[0].on ? "with none and with " : "with ", topen, tclose);
    fprintf(out, "output.text: MISMATCH: it is not the text of the output tokens%s: they differ "
                 "at byte %zu (the receipt has %zu bytes, the tokens give %zu): the receipt "
                 "reads %s, the tokens %s\n",
            why, best_i, r->text_len, best_len, a, b);
    free(best);
    return RECEIPT_EXIT_TEXT;
}

/* ================================================================ verify-receipt */

/* Every id of a receipt's token list is one of the model's; the first that is not is
 * reported as a malformed receipt. */
static bool ids_in_vocab(FILE *out, const char *what, const int32_t *ids, int64_t n,
                         int64_t n_vocab)
{
    for (int64_t i = 0; i < n; i++)
        if (ids[i] >= n_vocab) {
            fprintf(out, "receipt: %s token %lld (id %d) is outside the model's vocabulary of "
                         "%lld\n", what, (long long)i, ids[i], (long long)n_vocab);
            return false;
        }
    return true;
}

int receipt_verify_json(struct json_value *doc, const char *path,
                        const struct receipt_verify_opts *o, FILE *out)
{
    struct kn_err err = {0};
    struct receipt r = {0};
    struct session s = {0}; /* the model, then the rerun's engine (engine/session.h) */
    bool s_ok = false;
    struct device dev = {0}; /* the rerun's device (device/device.h) */
    bool dev_ok = false;
    char *model_path = NULL;
    struct grammar *gram = NULL;
    char *rf_gbnf = NULL;
    int rc = RECEIPT_EXIT_ERROR;
    enum receipt_sig_state sig;
    /* The slow steps before the rerun, named (the model's first hash, a device's
     * self-test, the weights' first repack): progress of unknown size, and the
     * reporter the self-test's kn_progress_stage reaches. The report shares a terminal
     * with it: the bar is cleared (kn_progress_interrupt) before each report line. */
    struct kn_progress load = {0};

    enum kn_status st;
    if (receipt_from_json(doc, &r, &err) != KN_OK) {
        fprintf(out, "%s\n", err.msg);
        json_free(doc);
        return RECEIPT_EXIT_MALFORMED;
    }
    fprintf(out,
            "receipt: %s, %lld prompt and %lld output tokens, seed %llu, made on %s by Kinetic %s "
            "(build %s)\n",
            r.model_file, (long long)r.n_prompt, (long long)r.n_output,
            (unsigned long long)r.sampling.seed, r.device_class, r.version, r.build);

    /* 1. token hashes */
    if (receipt_check_hashes(doc, &r, &err) != KN_OK) {
        fprintf(out, "tokens: %s: the receipt was changed or damaged\n", err.msg);
        rc = RECEIPT_EXIT_HASHES;
        goto done;
    }
    /* 2. signature: nothing else in the receipt is trusted before it is checked */
    sig = receipt_check_signature(doc, &r);
    switch (sig) {
    case RECEIPT_SIG_VALID:
        if (o->public_key && strcasecmp(o->public_key, r.public_key) != 0) {
            fprintf(out, "signature: valid, but made with public key %s, not %s\n", r.public_key,
                    o->public_key);
            rc = RECEIPT_EXIT_SIGNATURE;
            goto done;
        }
        fprintf(out, "signature: valid, public key %s%s%s\n", r.public_key,
                o->public_key ? " (the one --public-key asks for)"
                              : " (anyone can sign: give --public-key to require the maker's key)",
                r.format == RECEIPT_VERSION_LEGACY
                    ? "; a version-1 receipt, signed over its legacy canonical form"
                    : "");
        break;
    case RECEIPT_SIG_INVALID:
        fprintf(out, "signature: INVALID for public key %s: the receipt was changed after signing\n",
                r.public_key);
        rc = RECEIPT_EXIT_SIGNATURE;
        goto done;
    case RECEIPT_SIG_ABSENT:
        if (o->public_key) {
            fprintf(out, "signature: absent, but --public-key asks for one\n");
            rc = RECEIPT_EXIT_SIGNATURE;
            goto done;
        }
        fprintf(out, "signature: absent (the receipt is not signed)\n");
        break;
    }

    /* The grammar must compile, and agree with the response_format it came from. */
    if (r.response_format) {
        if (grammar_from_response_format(r.response_format, &rf_gbnf, &err) != KN_OK) {
            fprintf(out, "receipt: sampling.%s\n", err.msg);
            rc = RECEIPT_EXIT_MALFORMED;
            goto done;
        }
        if ((rf_gbnf == NULL) != (r.grammar == NULL) ||
            (rf_gbnf && strcmp(rf_gbnf, r.grammar) != 0)) {
            fprintf(out, "receipt: MISMATCH: sampling.grammar is not the grammar "
                         "sampling.response_format gives; the receipt was changed\n");
            rc = RECEIPT_EXIT_MALFORMED;
            goto done;
        }
    }
    if (r.grammar && grammar_parse(r.grammar, strlen(r.grammar), NULL, &gram, &err) != KN_OK) {
        fprintf(out, "receipt: sampling.grammar: %s\n", err.msg);
        rc = RECEIPT_EXIT_MALFORMED;
        goto done;
    }
    if (strcmp(r.model_file, base_name(r.model_path)) != 0) {
        fprintf(out, "receipt: model.file \"%s\" is not the base name of model.path \"%s\"\n",
                r.model_file, r.model_path);
        rc = RECEIPT_EXIT_MALFORMED;
        goto done;
    }

    /* 3. the model file: its size, then its BLAKE3 (a regular GGUF file only) */
    model_path = find_model(path, &r, o->model);
    if (!model_path) {
        fprintf(out, "model: out of memory\n");
        goto done;
    }
    struct stat sb;
    if (stat(model_path, &sb) != 0) {
        fprintf(out, "model: %s: %s; point --model at the receipt's model (%s, BLAKE3 %.16s)\n",
                model_path, strerror(errno), r.model_file, r.model_blake3);
        rc = RECEIPT_EXIT_MODEL;
        goto done;
    }
    char hex[65];
    kn_progress_begin(&load, o->progress, stderr, "verify-receipt", NULL, 0);
    kn_progress_attach(&load);
    kn_progress_update(&load, 0, "hashing the model file");
    st = hashcache_model_blake3(model_path, hex, &err);
    kn_progress_interrupt(); /* off the screen before the report's next line */
    if (st != KN_OK) {
        fprintf(out, "model: %s\n", err.msg);
        rc = RECEIPT_EXIT_MODEL;
        goto done;
    }
    if (strcmp(hex, r.model_blake3) != 0) {
        fprintf(out,
                "model: %s is not the receipt's model: its BLAKE3 is %.16s, the receipt's (%s) is "
                "%.16s\n",
                model_path, hex, r.model_file, r.model_blake3);
        rc = RECEIPT_EXIT_MODEL;
        goto done;
    }
    if ((uint64_t)sb.st_size != r.model_size) {
        fprintf(out, "model: MISMATCH: model.size is %llu bytes, but the file with the receipt's "
                     "BLAKE3 has %llu\n",
                (unsigned long long)r.model_size, (unsigned long long)sb.st_size);
        rc = RECEIPT_EXIT_TEXT;
        goto done;
    }
    fprintf(out, "model: %s matches (BLAKE3 %.16s, %llu bytes)\n", base_name(model_path), hex,
            (unsigned long long)r.model_size);

    /* 4. the rerun's device, then the model and its vocabulary. --device names a CPU
     * class, cpu or a registry device (vulkan:N); without it, the receipt's class: a GPU
     * of that class if this machine has one, else the CPU (which computes the same bits
     * when the receipt's numerics are canonical-1). */
    enum kn_isa isa = kn_isa_active();
    char spec[32] = "cpu";
    if (o->device && !class_to_isa(o->device, &isa)) {
        if (device_spec_valid(o->device)) {
            snprintf(spec, sizeof spec, "%s", o->device);
        } else if (!device_find_class(o->device, spec, sizeof spec)) {
            fprintf(out, "rerun: unknown device '%s' (this CPU has", o->device);
            for (int i = 0; i < KN_ISA_COUNT; i++)
                if (kn_isa_supported((enum kn_isa)i))
                    fprintf(out, " %s", kern_device_class((enum kn_isa)i));
            fprintf(out, "; or %s)\n", DEVICE_HELP);
            rc = RECEIPT_EXIT_USAGE;
            goto done;
        }
    } else if (!o->device && strncmp(r.device_class, "cpu-", 4) != 0 &&
               !device_find_class(r.device_class, spec, sizeof spec)) {
        fprintf(out, "rerun: this machine has no device of the receipt's class %s; rerunning on "
                     "the CPU\n", r.device_class);
    }
    if (kn_isa_set(isa, &err) != KN_OK) {
        fprintf(out, "rerun: %s\n", err.msg);
        goto done;
    }
    kn_progress_update(&load, 0, "opening the device");
    st = device_open(spec, &dev, &err);
    kn_progress_interrupt();
    if (st != KN_OK) {
        fprintf(out, "rerun: %s\n", err.msg);
        goto done;
    }
    dev_ok = true;
    enum model_kv_type kv;
    if (!model_kv_type_from_name(r.cache_type, &kv)) {
        fprintf(out, "receipt: device.settings.cache-type '%s' is not one this build has ("
                     MODEL_KV_TYPE_NAMES ")\n", r.cache_type);
        rc = RECEIPT_EXIT_MALFORMED;
        goto done;
    }
    /* The session of kinetic run with the receipt's load settings (its context and cache
     * type; the threads never change a token); the prompt is the receipt's tokens. */
    struct session_opts so;
    session_opts_default(&so);
    so.model_path = model_path;
    so.level = SESSION_MODEL;
    so.no_template = true;
    so.ctx_size = r.ctx_size;
    so.threads = o->threads > 0 ? o->threads : 0;
    so.kv_type = r.cache_type;
    /* The rerun's engine (session_start_engine, after the input is proven): the recorded
     * settings, every speed feature off. */
    so.no_draft = true;
    so.sp = r.sampling;
    so.sp.n_predict = r.max_tokens;
    so.grammar = gram;
    so.gbnf = r.grammar;
    so.response_format = r.response_format;
    if (device_is_gpu(&dev)) { /* the receipt's --gpu-layers unless told otherwise */
        so.device = dev.be;
        so.gpu_layers = o->gpu_layers >= 0 ? o->gpu_layers : r.gpu_layers > 0 ? r.gpu_layers : -1;
        so.device_class = dev.cls;
        so.device_name = dev.name;
    }
    kn_progress_update(&load, 0, "loading the model");
    st = session_open(&s, &so, &err);
    kn_progress_attach(NULL);
    kn_progress_end(&load);
    if (st != KN_OK) {
        fprintf(out, "rerun: %s\n", err.msg);
        goto done;
    }
    s_ok = true;
    const struct model *m = s.m;
    const struct tok *tk = s.tk;
    if (!ids_in_vocab(out, "prompt", r.prompt_ids, r.n_prompt, m->hp.n_vocab) ||
        !ids_in_vocab(out, "output", r.output_ids, r.n_output, m->hp.n_vocab)) {
        rc = RECEIPT_EXIT_MALFORMED;
        goto done;
    }
    if (sample_params_check_vocab(&r.sampling, m->hp.n_vocab, &err) != KN_OK) {
        fprintf(out, "receipt: sampling.%s\n", err.msg);
        rc = RECEIPT_EXIT_MALFORMED;
        goto done;
    }
    if (r.n_stop > TEXT_MAX_STOPS) {
        fprintf(out, "receipt: sampling.stop: %lld stop strings, at most %d\n", (long long)r.n_stop,
                TEXT_MAX_STOPS);
        rc = RECEIPT_EXIT_MALFORMED;
        goto done;
    }

    /* 5. what a person reads: the input and the output text */
    struct legacy_prompt lp = {0};
    int prc = prove_input(&r, &s, out, &lp);
    if (prc < 0)
        prc = prove_text(&r, tk, &lp, out);
    if (prc >= 0) {
        rc = prc;
        goto done;
    }

    /* 6. the rerun: one sequence, recorded settings, every speed feature off */
    if (session_start_engine(&s, &err) != KN_OK) {
        fprintf(out, "rerun: %s\n", err.msg);
        goto done;
    }
    if (session_set_stop(&s, (const char *const *)r.stop, (int)r.n_stop, &err) != KN_OK) {
        fprintf(out, "receipt: sampling.stop: %s\n", err.msg);
        rc = RECEIPT_EXIT_MALFORMED;
        goto done;
    }
    /* The progress counts the prompt's tokens, then the output's. To count the prompt's,
     * its chunks of n_batch but the last are evaluated here, one engine_prefill each:
     * the forward passes engine_eval_prompt would make, position for position, and
     * session_generate keeps them and evaluates the last chunk. */
    struct kn_progress prog;
    kn_progress_begin(&prog, o->progress, stderr, "rerun", "tokens",
                      (uint64_t)(r.n_prompt + r.n_output));
    int64_t k = 0;
    for (; k + s.e.n_batch < r.n_prompt; k += s.e.n_batch) {
        kn_progress_update(&prog, (uint64_t)k, "prefill");
        if (engine_prefill(&s.e, r.prompt_ids, k + s.e.n_batch, &err) != KN_OK) {
            kn_progress_end(&prog);
            fprintf(out, "rerun: %s\n", err.msg);
            goto done;
        }
    }
    kn_progress_update(&prog, (uint64_t)k, "prefill");
    struct rerun_cmp cmp = {&r, -1, &prog};
    struct session_gen gen;
    enum kn_status gst = session_generate(&s, &s.o.sp, r.prompt_ids, r.n_prompt, compare_token,
                                          &cmp, &gen, &err);
    kn_progress_end(&prog);
    if (gst != KN_OK) {
        fprintf(out, "rerun: %s\n", err.msg);
        goto done;
    }
    const int32_t *ids = gen.ids;
    int64_t n_ids = gen.n;
    enum engine_finish fin = gen.finish;
    /* The rerun's class and numerics: the device's when it ran layers. */
    bool on_gpu = s.m->dev && s.m->n_dev_layers > 0;
    const char *cls = on_gpu ? dev.cls : kern_device_class(isa);
    const char *num = on_gpu ? dev.numerics : KN_NUMERICS;
    bool same_class = strcmp(cls, r.device_class) == 0,
         same_build = strcmp(kn_build_id(), r.build) == 0,
         same_numerics = strcmp(num, r.numerics) == 0;
    /* What differs between the runs: the receipt spec asks the report to say so. Two CPU
     * classes (x86-64 or aarch64, any level) compute canonical-1's bits alike, so a rerun
     * on another one is a cross-ISA check, reported as such. */
    bool cross_isa = !same_class && kern_device_class_is_cpu(r.device_class) &&
                     kern_device_class_is_cpu(cls);
    if (!same_class || !same_build || !same_numerics)
        fprintf(out, "runs: receipt on %s, build %s, numerics %s; rerun on %s, build %s, numerics "
                     "%s%s%s%s\n",
                r.device_class, r.build, r.numerics, cls, kn_build_id(), num,
                same_class ? ""
                : cross_isa ? " (device class differs) (a cross-ISA rerun: every CPU class "
                              "computes canonical-1's bits)"
                            : " (device class differs)",
                same_build ? "" : " (build differs)",
                same_numerics ? "" : " (numerics differ: bits are promised only within one "
                                     "numerics version)");
    if (cmp.first_diff < 0 && n_ids == r.n_output && strcmp(engine_finish_name(fin), r.finish) == 0) {
        char th[65];
        receipt_tokens_blake3(ids, n_ids, th);
        if (!same_numerics) {
            fprintf(out, "rerun: not identical: the same %lld output tokens on %s (BLAKE3 %.16s), "
                         "but under numerics %s, not the receipt's %s, which proves nothing about "
                         "its bits\n",
                    (long long)n_ids, cls, th, num, r.numerics);
            rc = RECEIPT_EXIT_DIFFERS;
            goto done;
        }
        fprintf(out, "rerun: identical, %lld of %lld output tokens on %s (BLAKE3 %.16s)%s%s\n",
                (long long)n_ids, (long long)r.n_output, cls, th,
                cross_isa ? "; cross-ISA: the receipt was made on " : "",
                cross_isa ? r.device_class : "");
        rc = RECEIPT_EXIT_IDENTICAL;
        goto done;
    }
    /* The first difference: a different token, or one run ended where the other went on. */
    int64_t i = cmp.first_diff >= 0 ? cmp.first_diff : n_ids;
    char a[96], b[96];
    if (i < r.n_output)
        piece_quoted(tk, r.output_ids[i], a, sizeof a);
    if (cmp.first_diff >= 0)
        piece_quoted(tk, ids[i], b, sizeof b);
    if (i < r.n_output && cmp.first_diff >= 0)
        fprintf(out, "rerun: DIFFERS at output token %lld of %lld: the receipt has %d %s, the rerun %d %s\n",
                (long long)i, (long long)r.n_output, r.output_ids[i], a, ids[i], b);
    else if (i < r.n_output)
        fprintf(out, "rerun: DIFFERS at output token %lld of %lld: the receipt has %d %s, the rerun ended (%s)\n",
                (long long)i, (long long)r.n_output, r.output_ids[i], a, engine_finish_name(fin));
    else if (cmp.first_diff >= 0)
        fprintf(out, "rerun: DIFFERS at output token %lld: the receipt ended (%s), the rerun went on with %d %s\n",
                (long long)i, r.finish, ids[i], b);
    else
        fprintf(out, "rerun: DIFFERS: both give %lld tokens, but the receipt ended with \"%s\" and the rerun with \"%s\"\n",
                (long long)i, r.finish, engine_finish_name(fin));
    /* Who is to blame: a difference is Kinetic's bug only when the maker's own key vouches
     * for the receipt and nothing that fixes the bits differs. */
    bool vouched = sig == RECEIPT_SIG_VALID && o->public_key;
    if (vouched && same_build && same_numerics && same_class)
        fprintf(out, "verdict: the same build %s, numerics %s and device class %s under the "
                     "maker's valid signature: this difference is a bug; please report it\n",
                r.build, r.numerics, cls);
    else if (!same_build || !same_numerics || !same_class)
        fprintf(out, "verdict: bits are promised only for the same build, numerics and device "
                     "class; rerun with those to check the receipt\n");
    else
        fprintf(out, "verdict: the receipt's tokens are not what this model produces with these "
                     "settings (the receipt is %s)\n",
                sig == RECEIPT_SIG_VALID ? "signed by a key --public-key did not name, so anyone "
                                           "could have made it"
                                         : "not signed");
    rc = RECEIPT_EXIT_DIFFERS;

done:
    kn_progress_attach(NULL);
    kn_progress_end(&load); /* a check that failed before the model was loaded */
    if (s_ok)
        session_close(&s);
    if (dev_ok)
        device_close(&dev); /* after the model, whose buffers live on it */
    grammar_free(gram);
    free(rf_gbnf);
    free(model_path);
    receipt_free(&r);
    json_free(doc);
    return rc;
}

int receipt_verify(const char *path, const struct receipt_verify_opts *o, FILE *out)
{
    struct kn_err err = {0};
    struct json_value *doc = NULL;
    struct json_limits lim = RECEIPT_JSON_LIMITS;
    enum kn_status st = json_parse_file(path, &lim, &doc, &err);
    if (st != KN_OK) {
        fprintf(out, "receipt: %s\n", err.msg);
        return st == KN_E_IO ? RECEIPT_EXIT_ERROR : RECEIPT_EXIT_MALFORMED;
    }
    return receipt_verify_json(doc, path, o, out);
}

int receipt_verify_text(const char *text, size_t len, const char *path,
                        const struct receipt_verify_opts *o, FILE *out)
{
    struct kn_err err = {0};
    struct json_value *doc = NULL;
    struct json_limits lim = RECEIPT_JSON_LIMITS;
    if (json_parse(text, len, &lim, &doc, &err) != KN_OK) {
        fprintf(out, "receipt: %s\n", err.msg);
        return RECEIPT_EXIT_MALFORMED;
    }
    return receipt_verify_json(doc, path, o, out);
}
