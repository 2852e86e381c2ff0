/* repl.c: the conversation behind `kinetic chat` (see repl.h). */
#include "repl.h"

#include "../base/json.h"
#include "../chat/chat.h"
#include "../engine/session.h"
#include "../receipt/receipt.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Zero Wait evaluates a chunk of tokens per call and sizes it so that a call takes about
 * REPL_PREFILL_MS: a keystroke waits about that long at worst. */
#define REPL_PREFILL_MS 25.0
#define REPL_PREFILL_MAX 64
/* Save files larger than this are refused (a conversation is text, not a model). */
#define REPL_SAVE_MAX ((size_t)64 << 20)

struct repl_msg {
    char *role;    /* "user" or "assistant" */
    char *content;
};

/* What one turn cost, for /stats. */
struct repl_turn_stats {
    int64_t n_prompt;     /* tokens of the whole conversation given to the model */
    int64_t n_reused;     /* of those, already in the KV cache at Enter */
    int64_t n_typed;      /* evaluated by Zero Wait while the line was typed */
    int64_t n_gen;        /* generated tokens */
    int64_t n_drafted;    /* RAD-1 draft tokens proposed */
    int64_t n_accepted;   /* of those, equal to the sampled token */
    double prompt_s, gen_s;
};

struct repl {
    struct repl_opts o;
    char *system;
    struct session s;       /* model, tokenizer, template, engine, sampler, grammar, stops */
    bool s_ok;
    struct receipt_key key;
    bool have_key;

    struct repl_msg *msgs;  /* user/assistant turns; the system message is apart */
    size_t n_msgs, cap_msgs;

    int32_t *toks;          /* scratch: a rendered conversation's tokens */
    size_t cap_toks;
    /* Reasoning (<think> ... </think>): split off the answer, shown dimmed or hidden
     * (/set reasoning show|hide); never part of the conversation or the receipt text. */
    bool hide_reasoning;
    char *stops[TEXT_MAX_STOPS];         /* the stop strings (owned; the session has */
    int n_stops;                           /* its own copy), /set stop changes them */

    /* Zero Wait: the target computed for the last partial line. */
    char *zw_text;
    size_t zw_len;
    bool zw_valid;
    int32_t *zw_toks;
    int64_t n_zw_toks, cap_zw_toks;
    int64_t zw_done;        /* tokens Zero Wait evaluated since the last answer */
    int64_t zw_chunk;       /* tokens per call, adapted to the model's speed */

    /* The last answer, for /receipt. */
    bool have_last;
    struct json_value *last_input;
    int32_t *last_prompt, *last_out;
    int64_t n_last_prompt, n_last_out;
    char *last_text;
    size_t last_text_len;
    char last_finish[16];
    struct sample_params last_sp;
    int64_t last_max_tokens;
    char *last_stops[TEXT_MAX_STOPS];   /* the stop strings the last answer ran with */
    int n_last_stops;
    int64_t toks_now, last_now;         /* the clock strftime_now read for r->toks, the answer */
    const char *last_topen, *last_tclose; /* the answer's reasoning split */
    bool last_tinside;

    struct repl_turn_stats last;
    struct repl_turn_stats total;
    int64_t n_turns;
};

/* ================================================================ small helpers */

static char *dupn(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

static void stops_free(char **v, int *n)
{
    for (int i = 0; i < *n; i++)
        free(v[i]);
    *n = 0;
}

/* Copies n strings into v (which held *n_v, freed first). */
static enum kn_status stops_copy(char **v, int *n_v, const char *const *src, int n,
                                 struct kn_err *err)
{
    stops_free(v, n_v);
    for (int i = 0; i < n; i++) {
        if (!(v[i] = kn_strdup(src[i], err))) {
            stops_free(v, n_v);
            return KN_E_NOMEM;
        }
        *n_v = i + 1;
    }
    return KN_OK;
}

static void msgs_clear(struct repl *r)
{
    for (size_t i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].role);
        free(r->msgs[i].content);
    }
    r->n_msgs = 0;
}

static bool msgs_push(struct repl *r, const char *role, const char *content, size_t len)
{
    if (r->n_msgs == r->cap_msgs) {
        size_t cap = r->cap_msgs ? r->cap_msgs * 2 : 16;
        struct repl_msg *t = realloc(r->msgs, cap * sizeof *t);
        if (!t)
            return false;
        r->msgs = t;
        r->cap_msgs = cap;
    }
    char *ro = dupn(role, strlen(role)), *co = dupn(content, len);
    if (!ro || !co) {
        free(ro);
        free(co);
        return false;
    }
    r->msgs[r->n_msgs++] = (struct repl_msg){ro, co};
    return true;
}

static void msgs_pop(struct repl *r)
{
    if (r->n_msgs) {
        r->n_msgs--;
        free(r->msgs[r->n_msgs].role);
        free(r->msgs[r->n_msgs].content);
    }
}

/* ================================================================ rendering */

/* The conversation (system + turns, then `extra` as a user message when not NULL) as
 * tokens in r->toks: session_prompt, as `kinetic run` and `kinetic serve` render and
 * tokenize (message text never becomes special tokens, BOS first when the model wants
 * it). [*text_start, *text_end) receives the tokens of the last message-text segment
 * (where a partial user line is; the template's closing markers follow it);
 * *think_inside (may be NULL) whether the reply starts inside the reasoning. */
static enum kn_status repl_tokens(struct repl *r, const char *extra, int64_t *n_out,
                                  int64_t *text_start, int64_t *text_end, bool *think_inside,
                                  struct kn_err *err)
{
    size_t nm = r->n_msgs + 2;
    struct chat_message *cm = malloc(nm * sizeof *cm);
    if (!cm)
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    size_t k = 0;
    if (r->system)
        cm[k++] = (struct chat_message){"system", r->system};
    for (size_t i = 0; i < r->n_msgs; i++)
        cm[k++] = (struct chat_message){r->msgs[i].role, r->msgs[i].content};
    if (extra)
        cm[k++] = (struct chat_message){"user", extra};
    struct session_prompt sp;
    struct session_input in = {.msgs = cm, .n_msgs = k};
    enum kn_status st = session_prompt(&r->s, &in, true, &sp, err);
    free(cm);
    if (st != KN_OK)
        return st;
    r->toks_now = sp.cp.now;
    size_t n = (size_t)sp.n;
    if (n > r->cap_toks) {
        int32_t *t = realloc(r->toks, n * sizeof *t);
        if (!t) {
            session_prompt_free(&sp);
            return kn_fail(err, KN_E_NOMEM, "out of memory");
        }
        r->toks = t;
        r->cap_toks = n;
    }
    if (n)
        memcpy(r->toks, sp.ids, n * sizeof *sp.ids);
    if (think_inside)
        *think_inside = sp.think_inside;
    /* The last message-text segment, in tokens: the tokens that the prompt cut before the
     * segment's start (and before its end) shares with the whole prompt. Text between
     * control tokens is tokenized whole, so these are the safe prefixes, not exact
     * boundaries; Zero Wait only needs prefixes of the final prompt. */
    const struct chat_prompt *cp = &sp.cp;
    size_t seg = cp->n_segs;
    for (size_t i = cp->n_segs; i-- > 0;)
        if (!cp->segs[i].special) {
            seg = i;
            break;
        }
    size_t cut[2] = {cp->len, cp->len};
    if (seg < cp->n_segs) {
        cut[0] = cp->segs[seg].off;
        cut[1] = cp->segs[seg].off + cp->segs[seg].len;
    }
    int64_t pos[2] = {(int64_t)n, (int64_t)n};
    for (int c = 0; c < 2; c++) {
        if (cut[c] >= cp->len)
            continue;
        struct chat_prompt part = *cp;
        part.len = cut[c];
        part.n_segs = 0;
        while (part.n_segs < cp->n_segs && cp->segs[part.n_segs].off < cut[c])
            part.n_segs++;
        int32_t *pi = NULL;
        size_t pn = 0;
        if ((st = chat_prompt_tokenize(&part, r->s.tk, &pi, &pn, err)) != KN_OK) {
            session_prompt_free(&sp);
            return st;
        }
        size_t same = 0;
        while (same < pn && same < n && pi[same] == r->toks[same])
            same++;
        free(pi);
        pos[c] = (int64_t)same;
    }
    session_prompt_free(&sp);
    *text_start = pos[0];
    *text_end = pos[1] > pos[0] ? pos[1] : pos[0];
    *n_out = (int64_t)n;
    return KN_OK;
}

/* The messages as sent, for the receipt's input and /save. */
static struct json_value *repl_messages_json(const struct repl *r, struct kn_err *err)
{
    struct json_value *arr = json_new_array();
    if (!arr) {
        kn_fail(err, KN_E_NOMEM, "out of memory");
        return NULL;
    }
    for (size_t i = r->system ? 0 : 1; i < r->n_msgs + 1; i++) {
        const char *role = i ? r->msgs[i - 1].role : "system";
        const char *content = i ? r->msgs[i - 1].content : r->system;
        struct json_value *m = json_new_object();
        if (!m || json_object_set(m, "role", json_new_string(role), err) != KN_OK ||
            json_object_set(m, "content", json_new_string(content), err) != KN_OK ||
            json_array_push(arr, m, err) != KN_OK) {
            if (!m)
                kn_fail(err, KN_E_NOMEM, "out of memory");
            json_free(arr);
            return NULL;
        }
    }
    return arr;
}

/* ================================================================ open / close */

/* Sets the stop strings every answer ends at (n == 0: none): the session's (which also
 * sizes the reply's split for them, and adds the template's turn ends: the plain format's
 * next "User:") and the REPL's copy of what the session then holds, for /set. On failure
 * the old strings stay. */
static enum kn_status repl_set_stops(struct repl *r, const char *const *given, int n,
                                     struct kn_err *err)
{
    char *copy[TEXT_MAX_STOPS] = {0};
    int n_copy = 0;
    enum kn_status st = session_set_stop(&r->s, given, n, err);
    if (st == KN_OK && (st = stops_copy(copy, &n_copy, (const char *const *)r->s.stops,
                                        r->s.n_stop, err)) == KN_OK) {
        stops_free(r->stops, &r->n_stops);
        memcpy(r->stops, copy, sizeof copy);
        r->n_stops = n_copy;
        return KN_OK;
    }
    /* Only memory can fail after the session took them: put the old strings back. */
    struct kn_err e2 = {0};
    if (session_set_stop(&r->s, (const char *const *)r->stops, r->n_stops, &e2) != KN_OK &&
        st == KN_OK)
        st = kn_fail(err, e2.status, "%s", e2.msg);
    return st;
}

enum kn_status repl_open(struct repl **out, const struct repl_opts *o, struct kn_err *err)
{
    *out = NULL;
    struct repl *r = calloc(1, sizeof *r);
    if (!r)
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    r->o = *o;
    r->o.sp.n_predict = o->n_predict; /* from here on the settings table's row (/set) */
    enum kn_status st = KN_OK;
    if (o->system && !(r->system = kn_strdup(o->system, err))) {
        st = KN_E_NOMEM;
        goto fail;
    }
    if (o->sign_key) {
        if ((st = receipt_key_load(o->sign_key, &r->key, err)) != KN_OK)
            goto fail;
        r->have_key = true;
    }
    /* The session of `kinetic run` and `kinetic serve`: the same template choice and
     * defaults (context, threads, batch, KV type). */
    struct session_opts so;
    session_opts_default(&so);
    so.model_path = o->model_path;
    so.name = "kinetic chat";
    so.conversation = true;
    so.chat_format = o->chat_format;
    so.chat_template = o->chat_template;
    so.chat_template_kwargs = o->chat_template_kwargs;
    so.ctx_size = o->ctx_size;
    so.batch = o->batch;
    so.threads = o->threads;
    so.kv_type = o->kv_type;
    so.device = o->device;
    so.gpu_layers = o->gpu_layers;
    so.device_class = o->device_class;
    so.device_name = o->device_name;
    so.no_draft = o->no_draft;
    so.repack_cache = o->repack_cache;
    so.sp = r->o.sp;
    so.grammar = o->grammar;
    so.gbnf = o->gbnf;
    so.response_format = o->response_format;
    if ((st = session_open(&r->s, &so, err)) != KN_OK)
        goto fail;
    r->s_ok = true;
    r->hide_reasoning = o->hide_reasoning;
    if ((st = repl_set_stops(r, o->stop, o->n_stop, err)) != KN_OK)
        goto fail;
    *out = r;
    return KN_OK;
fail:
    repl_close(r);
    return st;
}

static void repl_last_clear(struct repl *r)
{
    json_free(r->last_input);
    free(r->last_prompt);
    free(r->last_out);
    free(r->last_text);
    r->last_input = NULL;
    r->last_prompt = r->last_out = NULL;
    r->last_text = NULL;
    stops_free(r->last_stops, &r->n_last_stops);
    r->have_last = false;
}

void repl_close(struct repl *r)
{
    if (!r)
        return;
    if (r->have_key)
        receipt_key_wipe(&r->key);
    repl_last_clear(r);
    msgs_clear(r);
    free(r->msgs);
    free(r->toks);
    stops_free(r->stops, &r->n_stops);
    free(r->zw_text);
    free(r->zw_toks);
    free(r->system);
    if (r->s_ok)
        session_close(&r->s);
    free(r);
}

/* ================================================================ a turn */

struct repl_gen {
    struct repl *r;
    struct session_reply reply; /* the answer (kept) and the reasoning, printed to out */
    bool nomem, interrupted;
};

/* Streams each token's text; stops the answer when the interrupt flag is set (after
 * this token, which is kept: the answer is exactly the tokens shown). */
static bool gen_on_token(void *ctx, int32_t id, int64_t index)
{
    struct repl_gen *g = ctx;
    (void)id;
    (void)index;
    size_t tn;
    const char *t = engine_text(&g->r->s.e, &tn);
    if (!session_reply_feed(&g->reply, t, tn, false)) {
        g->nomem = true;
        return false;
    }
    if (g->r->o.interrupt && *g->r->o.interrupt) {
        g->interrupted = true;
        return false;
    }
    return true;
}

static bool interrupted(const struct repl *r)
{
    return r->o.interrupt && *r->o.interrupt;
}

/* Evaluates the prompt but its last token with the engine's prompt reuse (engine_prefill
 * keeps what the engine holds: the earlier turns, what Zero Wait typed ahead), a batch
 * at a time so that Ctrl-C is seen between batches. Returns the positions reused. */
static enum kn_status prefill_prompt(struct repl *r, const int32_t *toks, int64_t n,
                                     int64_t *n_reused, struct kn_err *err)
{
    struct engine *e = &r->s.e;
    int64_t done = pcache_restore(NULL, e, toks, n, n - 1);
    *n_reused = done;
    while (done < n - 1) {
        if (interrupted(r))
            return kn_fail(err, KN_E_CANCELLED, "interrupted");
        int64_t upto = n - 1 - done < e->n_batch ? n - 1 : done + e->n_batch;
        enum kn_status st = engine_prefill(e, toks, upto, err);
        if (st != KN_OK)
            return st;
        done = upto;
    }
    return KN_OK;
}

enum kn_status repl_ask(struct repl *r, const char *text, size_t len, FILE *out,
                        struct kn_err *err)
{
    if (!json_utf8_valid(text, len))
        return kn_fail(err, KN_E_ARG, "the message is not valid UTF-8");
    if (!msgs_push(r, "user", text, len))
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    int64_t n = 0, text_start = 0, text_end = 0;
    bool think_inside = false;
    struct repl_gen g = {.r = r};
    enum kn_status st = repl_tokens(r, NULL, &n, &text_start, &text_end, &think_inside, err);
    if (st != KN_OK)
        goto drop;
    if (n == 0) {
        st = kn_fail(err, KN_E_ARG, "the prompt is empty (and the model adds no BOS token)");
        goto drop;
    }
    if (n >= r->s.n_ctx) {
        st = kn_fail(err, KN_E_LIMIT,
                     "the conversation is %lld tokens; the context holds %lld; /reset to start "
                     "over, or use a larger --ctx-size",
                     (long long)n, (long long)r->s.n_ctx);
        goto drop;
    }
    struct repl_turn_stats ts = {.n_prompt = n, .n_typed = r->zw_done};
    r->zw_done = 0;
    r->zw_valid = false;
    double t0 = kn_now();
    /* What was evaluated stays valid in the cache, also when this fails; only the
     * message goes. */
    if ((st = prefill_prompt(r, r->toks, n, &ts.n_reused, err)) != KN_OK)
        goto drop;
    double t1 = kn_now();
    int64_t toks_now = r->toks_now;
    const char *topen = r->s.think_open, *tclose = r->s.think_close;
    bool tinside = think_inside;
    if ((st = session_reply_init(&g.reply, &r->s, think_inside, out, !r->hide_reasoning, err)) !=
        KN_OK)
        goto drop;
    struct session_gen gen;
    st = session_generate(&r->s, &r->o.sp, r->toks, n, gen_on_token, &g, &gen,
                          err);
    if (st == KN_OK && g.nomem)
        st = kn_fail(err, KN_E_NOMEM, "out of memory");
    if (st == KN_OK && !session_reply_finish(&g.reply, &r->s))
        st = kn_fail(err, KN_E_NOMEM, "out of memory");
    if (st != KN_OK)
        goto drop;
    fputc('\n', out);
    fflush(out);
    if (gen.finish == ENGINE_FINISH_CONTEXT)
        fprintf(stderr, "kinetic chat: the answer stopped at the context limit (%lld tokens); "
                "/reset to start over, or use a larger --ctx-size\n", (long long)r->s.n_ctx);

    /* The receipt of this answer: input is the conversation as sent (before the answer),
     * prompt the exact tokens, output the answer's tokens. An interrupted answer is
     * recorded as what it is, the first n tokens: max_tokens n, finish "length", which a
     * rerun reproduces exactly. */
    repl_last_clear(r);
    r->last_input = repl_messages_json(r, err);
    r->last_prompt = malloc((size_t)n * sizeof(int32_t));
    r->last_out = malloc(((size_t)gen.n + 1) * sizeof(int32_t));
    char *text_valid = json_utf8_sanitize(g.reply.text.p, g.reply.text.n, &r->last_text_len);
    r->last_text = text_valid;
    if (!r->last_input || !r->last_prompt || !r->last_out || !text_valid) {
        repl_last_clear(r);
        st = kn_fail(err, KN_E_NOMEM, "out of memory");
        goto drop;
    }
    memcpy(r->last_prompt, r->toks, (size_t)n * sizeof(int32_t));
    memcpy(r->last_out, gen.ids, (size_t)gen.n * sizeof(int32_t));
    r->n_last_prompt = n;
    r->n_last_out = gen.n;
    r->last_sp = r->o.sp;
    r->last_now = toks_now;
    r->last_topen = topen;
    r->last_tclose = tclose;
    r->last_tinside = tinside;
    if (stops_copy(r->last_stops, &r->n_last_stops, (const char *const *)r->stops, r->n_stops,
                   err) != KN_OK) {
        repl_last_clear(r);
        st = KN_E_NOMEM;
        goto drop;
    }
    if (g.interrupted) {
        r->last_max_tokens = gen.n;
        snprintf(r->last_finish, sizeof r->last_finish, "length");
    } else {
        r->last_max_tokens = r->o.sp.n_predict;
        snprintf(r->last_finish, sizeof r->last_finish, "%s", engine_finish_name(gen.finish));
    }
    r->have_last = true;

    /* The answer joins the conversation as the text the user saw. */
    bool ok = msgs_push(r, "assistant", text_valid, r->last_text_len);
    session_reply_free(&g.reply);
    if (!ok)
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    if (g.interrupted)
        fprintf(stderr, "[answer stopped after %lld tokens]\n", (long long)gen.n);

    ts.n_gen = gen.n;
    ts.n_drafted = r->s.e.draft_stats.proposed;
    ts.n_accepted = r->s.e.draft_stats.accepted;
    ts.prompt_s = t1 - t0 + gen.prompt_s;
    ts.gen_s = gen.gen_s;
    r->last = ts;
    r->total.n_prompt += ts.n_prompt;
    r->total.n_reused += ts.n_reused;
    r->total.n_typed += ts.n_typed;
    r->total.n_gen += ts.n_gen;
    r->total.n_drafted += ts.n_drafted;
    r->total.n_accepted += ts.n_accepted;
    r->total.prompt_s += ts.prompt_s;
    r->total.gen_s += ts.gen_s;
    r->n_turns++;
    return KN_OK;

drop:
    session_reply_free(&g.reply);
    msgs_pop(r);
    return st;
}

/* ================================================================ Zero Wait */

bool repl_prefill(struct repl *r, const char *partial, size_t len)
{
    if (!r->o.zero_wait)
        return false;
    if (!r->zw_valid || r->zw_len != len || (len && memcmp(r->zw_text, partial, len) != 0)) {
        /* A new target for this text. An empty line (or one of spaces only, which the
         * template may trim away) still gives the conversation and the user-turn header:
         * render a placeholder and keep what comes before it. */
        r->zw_valid = false;
        char *copy = dupn(partial, len);
        if (!copy)
            return false;
        free(r->zw_text);
        r->zw_text = copy;
        r->zw_len = len;
        bool blank = true;
        for (size_t i = 0; i < len && blank; i++)
            blank = partial[i] == ' ' || partial[i] == '\t' || partial[i] == '\n';
        if (!json_utf8_valid(partial, len))
            return false;
        struct kn_err err;
        int64_t n = 0, text_start = 0, text_end = 0;
        if (repl_tokens(r, blank ? "x" : copy, &n, &text_start, &text_end, NULL, &err) != KN_OK)
            return false;
        /* The stable part: everything before the last message text (which may begin
         * with earlier text: the raw format has no markers, Gemma puts the system text
         * there), and that text but its last REPL_UNSTABLE tokens (a word being typed may
         * still merge differently), or but the placeholder and as many more. */
        int64_t stable = text_end - REPL_UNSTABLE - (blank ? 1 : 0);
        if (stable < text_start)
            stable = text_start;
        if (stable >= r->s.n_ctx)
            stable = r->s.n_ctx - 1;
        if (stable > r->cap_zw_toks) {
            int32_t *t = realloc(r->zw_toks, (size_t)stable * sizeof *t);
            if (!t)
                return false;
            r->zw_toks = t;
            r->cap_zw_toks = stable;
        }
        memcpy(r->zw_toks, r->toks, (size_t)stable * sizeof(int32_t));
        r->n_zw_toks = stable;
        r->zw_valid = true;
    }
    /* The engine's Zero Wait (engine_prefill) a few tokens at a time: keep the prefix the
     * engine shares with the target, then evaluate at most zw_chunk more of it. */
    int64_t p = pcache_restore(NULL, &r->s.e, r->zw_toks, r->n_zw_toks, r->n_zw_toks);
    if (p >= r->n_zw_toks)
        return false;
    if (r->zw_chunk < 1)
        r->zw_chunk = 4;
    int64_t c = r->n_zw_toks - p < r->zw_chunk ? r->n_zw_toks - p : r->zw_chunk;
    struct kn_err err;
    double t0 = kn_now();
    if (engine_prefill(&r->s.e, r->zw_toks, p + c, &err) != KN_OK) {
        r->zw_valid = false;
        return false;
    }
    double ms = (kn_now() - t0) * 1e3;
    if (c == r->zw_chunk) {
        if (ms > 2 * REPL_PREFILL_MS && r->zw_chunk > 1)
            r->zw_chunk /= 2;
        else if (ms < REPL_PREFILL_MS / 2 && r->zw_chunk < REPL_PREFILL_MAX)
            r->zw_chunk *= 2;
    }
    r->zw_done += c;
    return p + c < r->n_zw_toks;
}

/* ================================================================ slash commands */

const char *const repl_help_text =
    "Type a message and press Enter. A line ending in '\\' continues on the next line;\n"
    "pasted text (bracketed paste) is kept whole, newlines included. Start a line with\n"
    "'//' to send text that begins with '/'. Ctrl-C stops an answer (or clears the line);\n"
    "Ctrl-D on an empty line, or /quit, exits.\n"
    "\n"
    "  /receipt FILE       save the receipt of the last answer (signed with --sign-key)\n"
    "  /reset              forget the conversation (the system message stays)\n"
    "  /system [TEXT]      set the system message (none without TEXT)\n"
    "  /set [NAME VALUE]   change a setting, or list them: every sampling setting by\n"
    "                      its name or flag (temperature or temp, top_k, n_predict,\n"
    "                      seed, dry_multiplier, logit_bias, samplers...: the names\n"
    "                      /set lists), with the ranges of --help;\n"
    "                      /set reasoning show|hide shows <think> reasoning dimmed or\n"
    "                      hides it; /set stop TEXT: answers end at TEXT (not shown,\n"
    "                      not kept; escapes \\n \\t \\r \\\\ \\xHH); /set stop alone: none\n"
    "  /seed N             the seed every answer is sampled with\n"
    "  /save FILE          save the conversation and settings as JSON\n"
    "  /load FILE          load a conversation saved with /save\n"
    "  /stats              prompt tokens reused from the cache, tokens/s, drafts accepted\n"
    "  /help               this text\n"
    "  /quit               exit\n";

/* Lists the settings as /set takes them back: "temperature 0.8, top_k 50, ...", then the
 * stop strings. */
static void settings_print(const struct repl *r, FILE *out)
{
    struct kn_buf b = {0};
    for (size_t i = 0; i < sample_n_settings; i++) {
        const struct sample_setting *s = &sample_settings[i];
        b.n = 0;
        if (!sample_setting_format(s, &r->o.sp, &b))
            break;
        fprintf(out, "%s%s %s", i ? ", " : "", s->name, b.p);
    }
    free(b.p);
    fputc('\n', out);
    /* The stop strings as /set stop and --stop take them back (same escapes). */
    fputs(r->n_stops ? "stop" : "stop none (/set stop TEXT sets one)", out);
    for (int i = 0; i < r->n_stops; i++) {
        fputs(" \"", out);
        for (const unsigned char *c = (const unsigned char *)r->stops[i]; *c; c++) {
            if (*c == '\n')
                fputs("\\n", out);
            else if (*c == '\t')
                fputs("\\t", out);
            else if (*c == '\r')
                fputs("\\r", out);
            else if (*c == '\\' || *c == '"')
                fprintf(out, "\\%c", *c);
            else if (*c < 0x20 || *c == 0x7f ||
                     (*c == ' ' && (!c[1] || c == (const unsigned char *)r->stops[i])))
                fprintf(out, "\\x%02x", *c); /* a space at either end too: /set trims it */
            else
                fputc(*c, out);
        }
        fputc('"', out);
    }
    fputc('\n', out);
}

static enum kn_status cmd_receipt(struct repl *r, const char *file, FILE *out, struct kn_err *err)
{
    if (!*file) {
        fprintf(out, "/receipt needs a file name: /receipt answer.json\n");
        return KN_OK;
    }
    if (!r->have_last) {
        fprintf(out, "no answer yet: a receipt is made of the last answer\n");
        return KN_OK;
    }
    struct receipt rc = {0};
    /* The session's record (model, context, KV type, grammar), with what the last answer
     * ran with and produced, and how its prompt was rendered. */
    struct receipt_template tm;
    struct kn_err e2 = {0};
    if (receipt_template_from_renderer(&tm, &r->s.cr, NULL, NULL, true, r->last_now, &e2) != KN_OK) {
        *err = e2;
        return e2.status;
    }
    struct session_record rr;
    session_record_init(&r->s, NULL, &rr);
    rr.tmpl = &tm;
    rr.think_open = r->last_topen;
    rr.think_close = r->last_tclose;
    rr.think_inside = r->last_tinside;
    rr.input = r->last_input;
    rr.prompt = r->last_prompt;
    rr.n_prompt = r->n_last_prompt;
    rr.sampling = &r->last_sp;
    rr.max_tokens = r->last_max_tokens;
    rr.stop = (const char *const *)r->last_stops;
    rr.n_stop = r->n_last_stops;
    rr.finish = r->last_finish;
    rr.text = r->last_text;
    rr.text_len = r->last_text_len;
    rr.output = r->last_out;
    rr.n_output = r->n_last_out;
    enum kn_status rst = receipt_from_run(&rc, &rr, &e2);
    receipt_template_free(&tm);
    if (rst != KN_OK ||
        (r->have_key && receipt_sign(&rc, &r->key, &e2) != KN_OK) ||
        receipt_write(&rc, file, &e2) != KN_OK) {
        receipt_free(&rc);
        if (e2.status == KN_E_NOMEM) {
            *err = e2;
            return KN_E_NOMEM;
        }
        fprintf(out, "cannot save the receipt: %s\n", e2.msg);
        return KN_OK;
    }
    receipt_free(&rc);
    fprintf(stderr, "receipt written to %s (%lld prompt and %lld output tokens%s)\n", file,
            (long long)r->n_last_prompt, (long long)r->n_last_out, r->have_key ? ", signed" : "");
    return KN_OK;
}

/* The settings of /save: every row of the settings table under its receipt key (on or
 * off, so /load restores them all), then the stop strings. */
static struct json_value *settings_json(const struct repl *r, struct kn_err *err)
{
    struct json_value *o = json_new_object();
    if (!o) {
        kn_fail(err, KN_E_NOMEM, "out of memory");
        return NULL;
    }
    if (sample_params_json_write(&r->o.sp, o, SAMPLE_JSON_ALL, err) != KN_OK) {
        json_free(o);
        return NULL;
    }
    struct json_value *stops = json_new_array();
    for (int i = 0; stops && i < r->n_stops; i++)
        if (json_array_push(stops, json_new_string(r->stops[i]), err) != KN_OK) {
            json_free(stops);
            json_free(o);
            return NULL;
        }
    if (json_object_set(o, "stop", stops, err) != KN_OK) {
        json_free(o);
        return NULL;
    }
    return o;
}

#define REPL_SAVE_FORMAT "kinetic-chat-1"

static enum kn_status cmd_save(struct repl *r, const char *file, FILE *out, struct kn_err *err)
{
    if (!*file) {
        fprintf(out, "/save needs a file name: /save chat.json\n");
        return KN_OK;
    }
    struct json_value *doc = json_new_object();
    struct json_value *msgs = NULL, *set = NULL;
    char *text = NULL;
    size_t len = 0;
    enum kn_status st = KN_E_NOMEM;
    if (!doc)
        goto nomem;
    msgs = repl_messages_json(r, err);
    set = msgs ? settings_json(r, err) : NULL;
    if (!msgs || !set)
        goto fail;
    const char *slash = strrchr(r->o.model_path, '/');
    if (json_object_set(doc, "format", json_new_string(REPL_SAVE_FORMAT), err) != KN_OK ||
        json_object_set(doc, "model", json_new_string(slash ? slash + 1 : r->o.model_path), err) != KN_OK ||
        json_object_set(doc, "messages", msgs, err) != KN_OK) {
        msgs = NULL;
        goto fail;
    }
    msgs = NULL;
    st = json_object_set(doc, "settings", set, err);
    set = NULL;
    if (st != KN_OK || (st = json_write(doc, JSON_PRETTY, &text, &len, err)) != KN_OK)
        goto fail;
    json_free(doc);
    struct kn_err e2 = {0};
    if (kn_write_file_atomic(file, text, len, &e2) != KN_OK)
        fprintf(out, "cannot save the conversation: %s\n", e2.msg);
    else
        fprintf(stderr, "conversation saved to %s (%zu messages)\n", file, r->n_msgs);
    free(text);
    return KN_OK;
nomem:
    kn_fail(err, KN_E_NOMEM, "out of memory");
fail:
    json_free(doc);
    json_free(msgs);
    json_free(set);
    return st == KN_OK ? KN_E_NOMEM : st;
}

/* Reads a /save file strictly into a new conversation and settings; nothing changes on
 * failure. */
static enum kn_status load_doc(struct repl *r, const struct json_value *doc, struct kn_err *err)
{
    if (!json_is(doc, JSON_OBJECT))
        return kn_fail(err, KN_E_FORMAT, "not a saved conversation (a JSON object is expected)");
    for (size_t i = 0; i < json_len(doc); i++) {
        const char *k = doc->u.object.items[i].key;
        if (strcmp(k, "format") && strcmp(k, "model") && strcmp(k, "messages") && strcmp(k, "settings"))
            return kn_fail(err, KN_E_FORMAT, "unknown field '%s'", k);
    }
    const char *fmt = json_str(json_get(doc, "format"));
    if (!fmt || strcmp(fmt, REPL_SAVE_FORMAT) != 0)
        return kn_fail(err, KN_E_FORMAT, "not a saved conversation (\"format\" must be \"%s\")",
                       REPL_SAVE_FORMAT);
    const struct json_value *msgs = json_get(doc, "messages");
    const struct json_value *set = json_get(doc, "settings");
    if (!json_is(msgs, JSON_ARRAY))
        return kn_fail(err, KN_E_FORMAT, "\"messages\" must be an array");
    if (!json_is(set, JSON_OBJECT))
        return kn_fail(err, KN_E_FORMAT, "\"settings\" must be an object");
    for (size_t i = 0; i < json_len(msgs); i++) {
        const struct json_value *m = json_at(msgs, i);
        const char *role = json_str(json_get(m, "role"));
        const char *content = json_str(json_get(m, "content"));
        if (!json_is(m, JSON_OBJECT) || json_len(m) != 2 || !role || !content)
            return kn_fail(err, KN_E_FORMAT, "message %zu must be {\"role\", \"content\"} with strings", i);
        if (strlen(content) != json_get(m, "content")->u.string.len)
            return kn_fail(err, KN_E_FORMAT, "message %zu contains a NUL character", i);
        bool sys = strcmp(role, "system") == 0;
        if (sys ? i != 0 : strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0)
            return kn_fail(err, KN_E_FORMAT, "message %zu has role '%s': one leading system message, "
                           "then user and assistant messages", i, role);
    }
    /* The settings through the table (names, keys and aliases; files saved before a
     * setting existed keep the current value of it), then the stop strings. */
    struct sample_params sp = r->o.sp;
    static const char *const extra[] = {"stop", NULL};
    struct kn_err serr = {0};
    if (sample_params_json_read(set, &sp, SAMPLE_READ_ALIASES | SAMPLE_READ_STRICT, extra, &serr) !=
        KN_OK)
        return kn_fail(err, serr.status == KN_E_NOMEM ? KN_E_NOMEM : KN_E_FORMAT, "settings: %s",
                       serr.msg);
    const char *stops[TEXT_MAX_STOPS];
    int n_stops = -1; /* -1: the file has none; the current ones stay */
    const struct json_value *v = json_get(set, "stop");
    if (v) {
        if (!json_is(v, JSON_ARRAY) || json_len(v) > TEXT_MAX_STOPS)
            return kn_fail(err, KN_E_FORMAT, "settings.stop must be an array of at most %d "
                           "strings", TEXT_MAX_STOPS);
        n_stops = 0;
        for (size_t j = 0; j < json_len(v); j++) {
            const struct json_value *sv = json_at(v, j);
            const char *t = json_str(sv);
            if (!t || !*t || strlen(t) != sv->u.string.len)
                return kn_fail(err, KN_E_FORMAT, "settings.stop[%zu] must be a non-empty "
                               "string without NUL characters", j);
            stops[n_stops++] = t;
        }
    }
    /* Everything checked: replace the conversation. */
    size_t first = 0;
    char *system = NULL;
    if (json_len(msgs) && strcmp(json_str(json_get(json_at(msgs, 0), "role")), "system") == 0) {
        if (!(system = kn_strdup(json_str(json_get(json_at(msgs, 0), "content")), err)))
            return KN_E_NOMEM;
        first = 1;
    }
    /* Checked above, so only memory can fail here, before anything has changed. */
    enum kn_status sst = n_stops >= 0 ? repl_set_stops(r, stops, n_stops, err) : KN_OK;
    if (sst != KN_OK) {
        free(system);
        return sst;
    }
    msgs_clear(r);
    for (size_t i = first; i < json_len(msgs); i++) {
        const struct json_value *m = json_at(msgs, i);
        const struct json_value *c = json_get(m, "content");
        if (!msgs_push(r, json_str(json_get(m, "role")), c->u.string.s, c->u.string.len)) {
            free(system);
            return kn_fail(err, KN_E_NOMEM, "out of memory");
        }
    }
    free(r->system);
    r->system = system;
    r->o.sp = sp;
    r->zw_valid = false;
    return KN_OK;
}

static enum kn_status cmd_load(struct repl *r, const char *file, FILE *out, struct kn_err *err)
{
    if (!*file) {
        fprintf(out, "/load needs a file name: /load chat.json\n");
        return KN_OK;
    }
    struct json_value *doc = NULL;
    struct json_limits lim = {.max_bytes = REPL_SAVE_MAX};
    struct kn_err e2 = {0};
    if (json_parse_file(file, &lim, &doc, &e2) != KN_OK || load_doc(r, doc, &e2) != KN_OK) {
        json_free(doc);
        if (e2.status == KN_E_NOMEM) {
            *err = e2;
            return KN_E_NOMEM;
        }
        fprintf(out, "cannot load %s: %s\n", file, e2.msg);
        return KN_OK;
    }
    json_free(doc);
    fprintf(stderr, "conversation loaded from %s (%zu messages%s)\n", file, r->n_msgs,
            r->system ? " and a system message" : "");
    return KN_OK;
}

static void cmd_stats(const struct repl *r, FILE *out)
{
    if (!r->n_turns) {
        fprintf(out, "no answer yet\n");
        return;
    }
    const struct repl_turn_stats *l = &r->last, *t = &r->total;
    fprintf(out, "last answer: prompt %lld tokens, %lld reused from the cache (Warm Start; "
            "Zero Wait evaluated %lld while the line was typed), %lld evaluated after Enter "
            "in %.3f s; %lld tokens generated in %.3f s (%.1f tokens/s)\n",
            (long long)l->n_prompt, (long long)l->n_reused, (long long)l->n_typed,
            (long long)(l->n_prompt - l->n_reused), l->prompt_s, (long long)l->n_gen, l->gen_s,
            l->gen_s > 0 ? (double)l->n_gen / l->gen_s : 0.0);
    fprintf(out, "session: %lld answers; prompt tokens %lld, %lld reused (%.0f%%); "
            "%lld tokens generated in %.3f s (%.1f tokens/s); context %lld of %lld used\n",
            (long long)r->n_turns, (long long)t->n_prompt, (long long)t->n_reused,
            t->n_prompt ? 100.0 * (double)t->n_reused / (double)t->n_prompt : 0.0,
            (long long)t->n_gen, t->gen_s, t->gen_s > 0 ? (double)t->n_gen / t->gen_s : 0.0,
            (long long)r->s.e.n_past, (long long)r->s.n_ctx);
    fprintf(out, "drafts (RAD-1): last answer %lld proposed, %lld accepted; session %lld "
            "proposed, %lld accepted (%.0f%%)\n",
            (long long)l->n_drafted, (long long)l->n_accepted, (long long)t->n_drafted,
            (long long)t->n_accepted,
            t->n_drafted ? 100.0 * (double)t->n_accepted / (double)t->n_drafted : 0.0);
}

enum kn_status repl_command(struct repl *r, const char *line, FILE *out, bool *quit,
                            struct kn_err *err)
{
    *quit = false;
    /* "/name rest": the rest keeps inner spaces (file names, system text). */
    const char *p = line + 1;
    size_t nl = strcspn(p, " \t");
    char name[32];
    if (nl >= sizeof name)
        nl = sizeof name - 1;
    memcpy(name, p, nl);
    name[nl] = 0;
    const char *rest = p + strcspn(p, " \t");
    while (*rest == ' ' || *rest == '\t')
        rest++;
    char *arg = dupn(rest, strlen(rest));
    if (!arg)
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    for (size_t n = strlen(arg); n && (arg[n - 1] == ' ' || arg[n - 1] == '\t'); n--)
        arg[n - 1] = 0;
    enum kn_status st = KN_OK;

    if (strcmp(name, "quit") == 0 || strcmp(name, "exit") == 0) {
        *quit = true;
    } else if (strcmp(name, "help") == 0) {
        fputs(repl_help_text, out);
    } else if (strcmp(name, "receipt") == 0) {
        st = cmd_receipt(r, arg, out, err);
    } else if (strcmp(name, "reset") == 0) {
        msgs_clear(r);
        r->zw_valid = false;
        fprintf(stderr, "conversation cleared%s\n", r->system ? " (the system message stays)" : "");
    } else if (strcmp(name, "system") == 0) {
        char *s = NULL;
        if (*arg && !(s = kn_strdup(arg, err))) {
            st = KN_E_NOMEM;
        } else if (*arg && !json_utf8_valid(arg, strlen(arg))) {
            free(s);
            fprintf(out, "the system message is not valid UTF-8\n");
        } else {
            free(r->system);
            r->system = s;
            r->zw_valid = false;
            fprintf(stderr, s ? "system message set\n" : "system message removed\n");
        }
    } else if (strcmp(name, "set") == 0) {
        if (!*arg) {
            settings_print(r, out);
        } else {
            char sname[64];
            size_t k = strcspn(arg, " \t");
            const char *val = arg + k;
            while (*val == ' ' || *val == '\t')
                val++;
            snprintf(sname, sizeof sname, "%.*s", (int)(k < 63 ? k : 63), arg);
            const struct sample_setting *s = sample_setting_find(sname);
            if (strcmp(sname, "stop") == 0) {
                /* /set stop TEXT: answers end at TEXT (escapes as --stop); /set stop: none. */
                char *one = NULL;
                struct kn_err e3 = {0};
                if (*val && !(one = text_stop_unescape(val, "/set stop", &e3))) {
                    if (e3.status == KN_E_NOMEM)
                        st = kn_fail(err, KN_E_NOMEM, "out of memory");
                    else
                        fprintf(out, "%s\n", e3.msg);
                } else if ((st = repl_set_stops(r, (const char *const *)&one, one ? 1 : 0,
                                                &e3)) != KN_OK) {
                    if (st == KN_E_NOMEM)
                        *err = e3;
                    else {
                        fprintf(out, "%s\n", e3.msg);
                        st = KN_OK;
                    }
                } else {
                    settings_print(r, out);
                }
                free(one);
                fflush(out);
                free(arg);
                return st;
            }
            if (strcmp(sname, "reasoning") == 0) {
                if (strcmp(val, "show") == 0 || strcmp(val, "hide") == 0) {
                    r->hide_reasoning = val[0] == 'h';
                    fprintf(out, "reasoning %s\n", val);
                } else {
                    fprintf(out, "/set reasoning takes show or hide\n");
                }
                fflush(out);
                free(arg);
                return st;
            }
            struct kn_err e2 = {0};
            struct sample_params t = r->o.sp;
            if (!s) {
                fprintf(out, "unknown setting '%s'; /set alone lists them (and reasoning, "
                        "stop)\n", sname);
            } else if (!*val) {
                fprintf(out, "/set %s needs a value: /set %s VALUE\n", s->name, s->name);
            } else if (sample_setting_parse(s, val, &t, &e2) != KN_OK) {
                if (e2.status == KN_E_NOMEM)
                    st = kn_fail(err, KN_E_NOMEM, "out of memory");
                else
                    fprintf(out, "%s\n", e2.msg);
            } else {
                r->o.sp = t;
                settings_print(r, out);
            }
        }
    } else if (strcmp(name, "seed") == 0) {
        /* /seed N: the same as /set seed N */
        struct kn_err e2 = {0};
        struct sample_params t = r->o.sp;
        if (!*arg)
            fprintf(out, "/seed needs a value: /seed 42\n");
        else if (sample_setting_parse(sample_setting_find("seed"), arg, &t, &e2) != KN_OK)
            fprintf(out, "%s\n", e2.msg);
        else {
            r->o.sp = t;
            fprintf(stderr, "seed %llu\n", (unsigned long long)t.seed);
        }
    } else if (strcmp(name, "save") == 0) {
        st = cmd_save(r, arg, out, err);
    } else if (strcmp(name, "load") == 0) {
        st = cmd_load(r, arg, out, err);
    } else if (strcmp(name, "stats") == 0) {
        cmd_stats(r, out);
    } else {
        fprintf(out, "unknown command '/%s'; /help lists the commands (start a line with '//' "
                "to send text beginning with '/')\n", name);
    }
    fflush(out);
    free(arg);
    return st;
}
