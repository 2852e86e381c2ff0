/* session.c: one options struct and one set of defaults for run, chat, serve and
 * verify-receipt (see session.h). */
#include "session.h"

#include "../gguf/gguf.h"
#include "../grammar/grammar.h"
#include "../kernels/kernels.h"
#include "../token/tok.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ================================================================ defaults */

void session_opts_default(struct session_opts *o)
{
    memset(o, 0, sizeof *o);
    o->level = SESSION_ENGINE;
    o->gpu_layers = -1;
    sample_params_default(&o->sp);
}

int session_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n > SESSION_THREADS_MAX_DEFAULT ? SESSION_THREADS_MAX_DEFAULT : (int)n;
}

int64_t session_ctx_size(int64_t asked, int64_t n_ctx_train)
{
    if (asked)
        return asked;
    return n_ctx_train < SESSION_CTX_MAX_DEFAULT ? n_ctx_train : SESSION_CTX_MAX_DEFAULT;
}

/* ================================================================ open / close */

/* The template's warnings, the same for every command. */
static void warn_template(const struct session *s)
{
    const struct chat_renderer *cr = &s->cr;
    const char *name = s->o.name;
    if (!name)
        return;
    if (cr->warning[0])
        fprintf(stderr, "%s: warning: the model's chat template cannot be rendered (%s); "
                "using the built-in %s template\n", name, cr->warning,
                chat_format_name(cr->tmpl.format));
    if (cr->engine == CHAT_ENGINE_BUILTIN && cr->choice == CHAT_CHOICE_VOCAB)
        fprintf(stderr, "%s: chat template not recognised; using the %s format its tokens suggest\n",
                name, chat_format_name(cr->tmpl.format));
    else if (cr->engine == CHAT_ENGINE_BUILTIN && cr->choice == CHAT_CHOICE_UNKNOWN)
        fprintf(stderr, "%s: chat template not recognised; sending the prompt %s (see --chat-format)\n",
                name, s->o.conversation ? "as plain User:/Assistant: turns" : "raw");
    if (s->o.conversation && cr->choice == CHAT_CHOICE_NONE)
        /* Said once, where the model is opened: a base model continues text, it does not
         * answer, and a user who expected answers should know why (docs/chat.md). */
        kn_log(KN_LOG_WARN, "%s: %s has no chat template (tokenizer.chat_template): it is a base "
               "model, which continues text rather than answering. Turns are written as plain "
               "\"User: ...\" / \"Assistant:\" text and an answer ends where the model starts the "
               "next turn (\"User:\"...) "
               "(docs/chat.md); give --chat-template FILE to use an instruction template",
               name, s->o.model_path);
    kn_log(KN_LOG_DEBUG, "chat template %s (%s)", chat_renderer_name(cr), cr->source);
}

static void stops_clear(struct session *s)
{
    for (int i = 0; i < s->n_stop; i++)
        free(s->stops[i]);
    s->n_stop = 0;
}

enum kn_status session_set_stop(struct session *s, const char *const *stops, int n,
                                struct kn_err *err)
{
    if (!s->engine_ok)
        return kn_fail(err, KN_E_INTERNAL, "session_set_stop needs an engine");
    if (n < 0 || n > TEXT_MAX_STOPS)
        return kn_fail(err, KN_E_ARG, "at most %d stop strings, not %d", TEXT_MAX_STOPS, n);
    /* The template's turn ends (the plain format's next role line) are always among them,
     * as an end-of-turn token would be: run, chat and serve answer alike. */
    const char *all[TEXT_MAX_STOPS];
    int n_ends = 0;
    const char *const *ends = s->cr_ok ? chat_renderer_turn_ends(&s->cr, &n_ends) : NULL;
    for (int i = 0; i < n; i++)
        all[i] = stops[i];
    for (int k = 0; k < n_ends; k++) {
        bool have = false;
        for (int i = 0; i < n && !have; i++)
            have = strcmp(all[i], ends[k]) == 0;
        if (have)
            continue;
        if (n == TEXT_MAX_STOPS)
            return kn_fail(err, KN_E_ARG, "at most %d stop strings, with the %d that end the plain "
                           "format's turns", TEXT_MAX_STOPS, n_ends);
        all[n++] = ends[k];
    }
    stops = all;
    /* One token's text, the tail the stop matcher held back and a marker's held bytes. */
    size_t cap = tok_max_piece(s->tk) + TEXT_MAX_MARKER + 16;
    char *copy[TEXT_MAX_STOPS] = {0};
    enum kn_status st = KN_OK;
    for (int i = 0; i < n && st == KN_OK; i++) {
        cap += strlen(stops[i]);
        if (!(copy[i] = kn_strdup(stops[i], err)))
            st = KN_E_NOMEM;
    }
    if (st == KN_OK && (st = engine_set_stop(&s->e, stops, n, err)) == KN_OK) {
        stops_clear(s);
        memcpy(s->stops, copy, sizeof copy);
        s->n_stop = n;
        s->split_cap = cap;
        return KN_OK;
    }
    for (int i = 0; i < n; i++)
        free(copy[i]);
    /* engine_set_stop clears on failure: put the old strings back (they were accepted
     * before, so only memory can fail). */
    struct kn_err e2 = {0};
    if (engine_set_stop(&s->e, (const char *const *)s->stops, s->n_stop, &e2) != KN_OK)
        s->n_stop = 0;
    return st;
}

/* The engine, the sampler, the grammar and the stop strings. */
static enum kn_status open_engine(struct session *s, const char *const *stop, int n_stop,
                                  struct kn_err *err)
{
    const struct session_opts *o = &s->o;
    enum kn_status st;
    if ((st = sample_params_check_vocab(&o->sp, s->n_vocab, err)) != KN_OK)
        return st;
    struct engine_params ep = {.n_ctx = s->n_ctx, .n_batch = s->n_batch, .kv_type = s->kv_type,
                               .no_draft = o->no_draft, .draft_max = o->draft_max};
    if ((st = engine_init(&s->e, s->m, s->pool, &ep, err)) != KN_OK)
        return st;
    s->engine_ok = true;
    if ((st = sample_ctx_init(&s->sctx, (int32_t)s->n_vocab, err)) != KN_OK)
        return st;
    s->sctx_ok = true;
    if (o->grammar) {
        if ((st = grammar_vocab_from_tok(&s->gvocab, s->tk, (int32_t)s->n_vocab, err)) != KN_OK ||
            (st = grammar_state_init(&s->gstate, o->grammar, err)) != KN_OK)
            return st;
        sample_ctx_set_grammar(&s->sctx, s->gstate, s->gvocab);
    }
    if (!(s->gen = kn_malloc((size_t)s->n_ctx * sizeof *s->gen, err)))
        return KN_E_NOMEM;
    return session_set_stop(s, stop, n_stop, err);
}

enum kn_status session_open(struct session *s, const struct session_opts *o, struct kn_err *err)
{
    memset(s, 0, sizeof *s);
    s->o = *o;
    s->o.stop = NULL; /* copied into s->stops */
    s->o.n_stop = 0;
    if (!s->o.kv_type)
        s->o.kv_type = SESSION_KV_TYPE_DEFAULT;
    if (!s->o.threads)
        s->o.threads = session_default_threads();
    if (!s->o.batch)
        s->o.batch = SESSION_BATCH_DEFAULT;
    enum kn_status st = KN_OK;
    if (!model_kv_type_from_name(s->o.kv_type, &s->kv_type))
        return kn_fail(err, KN_E_ARG, "--kv-type must be " MODEL_KV_TYPE_NAMES ", not '%s'", s->o.kv_type);
    s->kv_name = model_kv_type_name(s->kv_type);
    if (o->level == SESSION_ENGINE && (st = sample_params_check(&o->sp, err)) != KN_OK)
        return st;

    /* ---- the model (or its vocabulary only), the tokenizer and the template */
    if (o->level == SESSION_VOCAB) {
        if ((st = gguf_open(&s->gguf_own, o->model_path, err)) != KN_OK)
            goto fail;
        s->gguf = s->gguf_own;
    } else {
        /* The pool first: model_open repacks the weights on its threads. */
        if ((st = kern_pool_create(s->o.threads, &s->pool, err)) != KN_OK)
            goto fail;
        if ((st = rcache_open(&s->rc, o->repack_cache, o->model_path, o->name, err)) != KN_OK)
            goto fail;
        struct model_load_opts lo = {
            .repack = true, .device = o->device,
            .device_layers = o->gpu_layers < 0 ? INT64_MAX : o->gpu_layers, .pool = s->pool,
            .repack_fn = rcache_repack, .repack_ctx = s->rc};
        if ((st = model_open(&s->m, o->model_path, &lo, err)) != KN_OK)
            goto fail;
        s->gguf = s->m->gguf;
    }
    if ((st = tok_load(&s->tk, s->gguf, err)) != KN_OK) {
        kn_err_prefix(err, o->model_path);
        goto fail;
    }
    if (!o->no_template) {
        struct chat_renderer_opts ro = {.raw = o->raw, .chat_format = o->chat_format,
                                        .template_file = o->chat_template,
                                        .kwargs_json = o->chat_template_kwargs,
                                        .conversation = o->conversation};
        if ((st = chat_renderer_init(&s->cr, &ro, s->gguf, s->tk, err)) != KN_OK)
            goto fail;
        s->cr_ok = true;
        warn_template(s);
    }
    s->think_native = chat_think_markers(s->tk, &s->think_open, &s->think_close);
    s->n_vocab = s->m ? s->m->hp.n_vocab : tok_n_vocab(s->tk);
    if (o->level == SESSION_VOCAB)
        return KN_OK;

    /* ---- context, threads */
    s->n_ctx = session_ctx_size(o->ctx_size, s->m->hp.n_ctx_train);
    s->n_batch = s->o.batch;
    if (s->n_ctx > s->m->hp.n_ctx_train && s->o.name)
        fprintf(stderr, "%s: warning: --ctx-size %lld exceeds the %lld tokens the model was trained on\n",
                s->o.name, (long long)s->n_ctx, (long long)s->m->hp.n_ctx_train);
    if (o->level == SESSION_MODEL)
        return KN_OK;

    /* ---- one engine, its sampler, grammar and stop strings */
    if ((st = open_engine(s, o->stop, o->n_stop, err)) != KN_OK)
        goto fail;
    return KN_OK;
fail:
    session_close(s);
    return st;
}

enum kn_status session_start_engine(struct session *s, struct kn_err *err)
{
    if (!s->m || s->engine_ok)
        return kn_fail(err, KN_E_INTERNAL, "session_start_engine needs a SESSION_MODEL session");
    enum kn_status st = sample_params_check(&s->o.sp, err);
    if (st != KN_OK)
        return st;
    s->o.level = SESSION_ENGINE;
    return open_engine(s, NULL, 0, err);
}

void session_close(struct session *s)
{
    pcache_free(s->pc);
    free(s->gen);
    stops_clear(s);
    grammar_state_free(s->gstate);
    grammar_vocab_free(s->gvocab);
    if (s->sctx_ok)
        sample_ctx_free(&s->sctx);
    if (s->engine_ok)
        engine_free(&s->e);
    kern_pool_free(s->pool);
    if (s->cr_ok)
        chat_renderer_free(&s->cr);
    tok_free(s->tk);
    model_close(s->m);
    rcache_close(s->rc); /* after the model: its weights may borrow from the mapping */
    gguf_close(s->gguf_own);
    memset(s, 0, sizeof *s);
}

/* ================================================================ prompts */

enum kn_status session_prompt(const struct session *s, const struct session_input *in,
                              bool want_ids, struct session_prompt *out, struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    if (!s->cr_ok)
        return kn_fail(err, KN_E_INTERNAL, "session_prompt: the session has no template");
    return session_prompt_with(s, &s->cr, in, !in->no_generation_prompt && !s->o.raw, want_ids,
                               out, err);
}

enum kn_status session_prompt_with(const struct session *s, const struct chat_renderer *cr,
                                   const struct session_input *in, bool add, bool want_ids,
                                   struct session_prompt *out, struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    enum kn_status st;
    if (in->msgs)
        st = chat_renderer_render(cr, in->msgs, in->n_msgs, add, &out->cp, err);
    else
        st = chat_renderer_render_json(cr, in->messages, in->tools, in->kwargs, add, &out->cp,
                                       err);
    if (st != KN_OK)
        return st;
    if (want_ids) {
        size_t n = 0;
        if ((st = chat_prompt_tokenize(&out->cp, s->tk, &out->ids, &n, err)) != KN_OK) {
            session_prompt_free(out);
            return st;
        }
        out->n = (int64_t)n;
    }
    /* A template that opens the reasoning in the prompt (DeepSeek-R1, Qwen3 thinking)
     * makes the reply start inside it. */
    out->think_inside = chat_prompt_opens_think(out->cp.text, out->cp.len, s->think_open);
    return KN_OK;
}

void session_prompt_free(struct session_prompt *p)
{
    chat_prompt_free(&p->cp);
    free(p->ids);
    memset(p, 0, sizeof *p);
}

/* ================================================================ generation */

enum kn_status session_generate(struct session *s, const struct sample_params *sp,
                                const int32_t *prompt, int64_t n_prompt, engine_token_fn on_token,
                                void *ctx, struct session_gen *out, struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    out->ids = s->gen;
    out->finish = ENGINE_FINISH_LENGTH;
    if (!s->engine_ok)
        return kn_fail(err, KN_E_INTERNAL, "session_generate needs an engine");
    if (n_prompt >= s->n_ctx)
        return kn_fail(err, KN_E_LIMIT, "the prompt has %lld tokens; the context holds %lld; use a larger --ctx-size",
                       (long long)n_prompt, (long long)s->n_ctx);
    double t0 = kn_now();
    enum kn_status st = engine_eval_prompt(&s->e, s->pc, prompt, n_prompt, &out->n_reused, err);
    if (st != KN_OK)
        return st;
    double t1 = kn_now();
    if (s->gstate)
        grammar_state_reset(s->gstate); /* each generation starts the grammar afresh */
    st = engine_generate(&s->e, s->tk, &s->sctx, sp, sp->n_predict, on_token, ctx, s->gen, &out->n,
                         &out->finish, err);
    out->by_string = engine_stop_matched(&s->e) >= 0;
    out->prompt_s = t1 - t0;
    out->gen_s = kn_now() - t1;
    return st;
}

const char *session_stop_name(const struct session_gen *g)
{
    switch (g->finish) {
    case ENGINE_FINISH_STOP: return g->by_string ? "stop_string" : "eog";
    case ENGINE_FINISH_CONTEXT: return "context";
    default: return "length";
    }
}

enum kn_status session_open_cache(struct session *s, const char *path, int64_t ram_mib,
                                  const char *model_hex, struct kn_err *err)
{
    if (!s->engine_ok)
        return kn_fail(err, KN_E_INTERNAL, "session_open_cache needs an engine");
    if (ram_mib < 1 || ram_mib > ((int64_t)1 << 30))
        return kn_fail(err, KN_E_ARG, "--cache-ram must be in 1..%lld MiB", (long long)1 << 30);
    enum kn_status st = pcache_create(&s->pc, s->m, s->kv_type, (size_t)ram_mib << 20, err);
    if (st != KN_OK)
        return st;
    snprintf(s->model_hex, sizeof s->model_hex, "%s", model_hex);
    s->cache_path = path;
    struct kn_err lerr = {0};
    double t0 = kn_now();
    if (access(path, F_OK) == 0 && pcache_load(s->pc, path, s->model_hex, &lerr) != KN_OK &&
        s->o.name)
        fprintf(stderr, "%s: warning: ignoring the prompt cache: %s; it will be rewritten\n",
                s->o.name, lerr.msg);
    s->cache_load_s = kn_now() - t0;
    return KN_OK;
}

enum kn_status session_save_cache(struct session *s, struct kn_err *err)
{
    if (!s->pc)
        return KN_OK;
    return pcache_save(s->pc, s->cache_path, s->model_hex, err);
}

/* ================================================================ the reply's text */

enum kn_status session_reply_init(struct session_reply *r, const struct session *s,
                                  bool think_inside, FILE *out, bool show_reasoning,
                                  struct kn_err *err)
{
    memset(r, 0, sizeof *r);
    enum kn_status st = text_think_init(&r->think, s->think_open, s->think_close, think_inside,
                                        err);
    if (st != KN_OK)
        return st;
    r->out = out;
    r->show_reasoning = show_reasoning;
    r->dim = out && isatty(fileno(out));
    r->content = malloc(s->split_cap);
    r->reasoning = malloc(s->split_cap);
    /* Both buffers hold text (possibly empty) from the start. */
    if (!r->content || !r->reasoning || !kn_buf_add(&r->text, "", 0) ||
        !kn_buf_add(&r->rtext, "", 0)) {
        session_reply_free(r);
        return kn_fail(err, KN_E_NOMEM, "out of memory");
    }
    return KN_OK;
}

void session_reply_free(struct session_reply *r)
{
    free(r->content);
    free(r->reasoning);
    free(r->text.p);
    free(r->rtext.p);
    memset(r, 0, sizeof *r);
}

bool session_reply_feed(struct session_reply *r, const char *bytes, size_t len, bool last)
{
    size_t nc = 0, nr = 0;
    if (last)
        text_think_flush(&r->think, r->content, &nc, r->reasoning, &nr);
    else
        text_think_feed(&r->think, bytes, len, r->content, &nc, r->reasoning, &nr);
    if (!kn_buf_add(&r->text, r->content, nc) || !kn_buf_add(&r->rtext, r->reasoning, nr))
        return false;
    if (!r->out)
        return true;
    /* Within one feed the kinds come in order: reasoning ends before content starts (or
     * the reverse), so print the kind that was open first. */
    bool r_first = r->in_reasoning || !r->think.inside;
    for (int k = 0; k < 2; k++) {
        bool is_r = (k == 0) == r_first;
        size_t n = is_r ? nr : nc;
        if (n == 0 || (is_r && !r->show_reasoning))
            continue;
        if (r->dim && is_r != r->in_reasoning)
            fputs(is_r ? "\x1b[2m" : "\x1b[0m", r->out);
        r->in_reasoning = is_r;
        fwrite(is_r ? r->reasoning : r->content, 1, n, r->out);
    }
    if (last && r->dim && r->in_reasoning) {
        fputs("\x1b[0m", r->out);
        r->in_reasoning = false;
    }
    fflush(r->out);
    return true;
}

bool session_reply_finish(struct session_reply *r, const struct session *s)
{
    size_t tn;
    const char *tail = engine_text(&s->e, &tn);
    return session_reply_feed(r, tail, tn, false) && session_reply_feed(r, NULL, 0, true);
}

/* ================================================================ the receipt's record */

void session_record_init(const struct session *s, const struct session_gen *g,
                         struct session_record *r)
{
    *r = (struct session_record){
        .model_path = s->o.model_path,
        .sampling = &s->o.sp,
        .max_tokens = s->o.sp.n_predict,
        .stop = (const char *const *)s->stops,
        .n_stop = s->n_stop,
        .ctx_size = s->n_ctx,
        .cache_type = s->kv_name,
        .grammar = s->o.gbnf,
        .response_format = s->o.response_format,
        .think_open = s->think_open,
        .think_close = s->think_close,
        .gpu_layers = -1,
    };
    if (s->m && s->m->dev && s->m->n_dev_layers > 0) {
        r->device_class = s->o.device_class;
        r->device_name = s->o.device_name;
        r->numerics = s->m->dev->ops->numerics(s->m->dev);
        r->gpu_layers = s->m->n_dev_layers;
    }
    if (g) {
        r->output = g->ids;
        r->n_output = g->n;
        r->finish = engine_finish_name(g->finish);
    }
}
