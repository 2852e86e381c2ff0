/* backend_model.c: the server backend over a real GGUF model: the tokenizer, the chat
 * template (chosen exactly as `kinetic run` chooses it, so a receipt made by the server
 * reruns the same prompt), and the engine's forward pass over one KV cache per slot
 * (engine_lm_model_open: the same interface and step kinetic run generates with). */
#include "server.h"
#include "chat/chat.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "kernels/isa.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "sample/sample.h"
#include "token/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mb {
    struct model *m;
    struct tok *tk;
    struct kern_pool *pool;
    struct engine_lm lm;       /* the slots' sequences and the shared prompt cache */
    int n_slots;
    struct chat_renderer cr;
    bool cr_ok;
    size_t cache_max;
    char name[256];
};

static enum kn_status mb_tokenize(void *ctx, const char *text, size_t len, bool add_special,
                                  bool parse_special, int32_t **ids, size_t *n, struct kn_err *err)
{
    struct mb *b = ctx;
    size_t cap = len + 3; /* a token covers at least one byte; plus BOS and EOS */
    int32_t *v = kn_malloc(cap * sizeof *v, err);
    if (!v)
        return KN_E_NOMEM;
    enum kn_status st = tok_encode(b->tk, text, len, add_special, parse_special, v, cap, n, err);
    if (st != KN_OK) {
        free(v);
        return st;
    }
    *ids = v;
    return KN_OK;
}

/* The rendered prompt's text and (when ids is not NULL) tokens. */
static enum kn_status mb_finish(struct mb *b, struct chat_prompt *cp, int32_t **ids, size_t *n,
                                char **text, struct kn_err *err)
{
    enum kn_status st = KN_OK;
    if (ids)
        st = chat_prompt_tokenize(cp, b->tk, ids, n, err);
    if (st == KN_OK) {
        *text = cp->text; /* NUL-terminated; the prompt hands it over */
        cp->text = NULL;
    }
    chat_prompt_free(cp);
    return st;
}

static enum kn_status mb_chat(void *ctx, const struct srv_msg *msgs, size_t n_msgs, int32_t **ids,
                              size_t *n, char **text, struct kn_err *err)
{
    struct mb *b = ctx;
    struct chat_message *cm = kn_malloc((n_msgs ? n_msgs : 1) * sizeof *cm, err);
    if (!cm)
        return KN_E_NOMEM;
    for (size_t i = 0; i < n_msgs; i++)
        cm[i] = (struct chat_message){msgs[i].role, msgs[i].content};
    struct chat_prompt cp = {0};
    enum kn_status st = chat_renderer_render(&b->cr, cm, n_msgs, true, &cp, err);
    free(cm);
    if (st != KN_OK)
        return st;
    return mb_finish(b, &cp, ids, n, text, err);
}

static enum kn_status mb_chat_json(void *ctx, const struct json_value *messages,
                                   const struct json_value *tools, const struct json_value *kwargs,
                                   bool add_generation_prompt, int64_t *now, int32_t **ids,
                                   size_t *n, char **text, struct kn_err *err)
{
    struct mb *b = ctx;
    struct chat_prompt cp = {0};
    enum kn_status st = chat_renderer_render_json(&b->cr, messages, tools, kwargs,
                                                  add_generation_prompt, &cp, err);
    if (st != KN_OK)
        return st;
    if (now)
        *now = cp.now;
    return mb_finish(b, &cp, ids, n, text, err);
}

static const char *mb_piece(void *ctx, int32_t id, size_t *len)
{
    struct mb *b = ctx;
    return tok_piece(b->tk, id, false, len);
}

static const char *mb_token_text(void *ctx, int32_t id, size_t *len)
{
    struct mb *b = ctx;
    const char *p = tok_piece(b->tk, id, true, len);
    return p ? p : "";
}

static bool mb_is_eog(void *ctx, int32_t id)
{
    struct mb *b = ctx;
    return tok_is_eog(b->tk, id);
}

/* As kinetic run builds its grammar vocabulary, so a grammar allows the same tokens. */
static enum kn_status mb_grammar_vocab(void *ctx, struct grammar_vocab **out, struct kn_err *err)
{
    struct mb *b = ctx;
    return grammar_vocab_from_tok(out, b->tk, (int32_t)b->m->hp.n_vocab, err);
}

/* The family's reasoning markers when its vocabulary has them (chat_think_markers, as
 * kinetic run and chat choose them); none otherwise, so "auto" leaves the text whole. */
static void mb_find_think(struct mb *b, struct srv_backend *out)
{
    const char *o, *c;
    if (chat_think_markers(b->tk, &o, &c)) {
        out->think_open = o;
        out->think_close = c;
        out->think_inside = strcmp(o, "<think>") == 0 && b->cr.tmpl.open_think;
    }
}

static void mb_cache_stats(void *ctx, struct srv_cache_stats *out)
{
    struct mb *b = ctx;
    struct pcache_stats ps = pcache_get_stats(engine_lm_model_cache(&b->lm));
    *out = (struct srv_cache_stats){ps.hits, ps.misses, ps.tokens_restored, ps.stores,
                                    ps.evictions, ps.records, ps.bytes, b->cache_max};
}

static void mb_free(void *ctx)
{
    struct mb *b = ctx;
    if (!b)
        return;
    engine_lm_model_close(&b->lm);
    kern_pool_free(b->pool);
    if (b->cr_ok)
        chat_renderer_free(&b->cr);
    tok_free(b->tk);
    model_close(b->m);
    free(b);
}

enum kn_status srv_model_backend(struct srv_backend *out, const struct srv_model_opts *o,
                                 struct kn_err *err)
{
    memset(out, 0, sizeof *out);
    struct mb *b = kn_calloc(1, sizeof *b, err);
    if (!b)
        return KN_E_NOMEM;
    b->n_slots = o->n_slots;
    enum kn_status st;
    struct model_load_opts lo = {.repack = true};
    if ((st = model_open(&b->m, o->path, &lo, err)) != KN_OK)
        goto fail;
    if ((st = tok_load(&b->tk, b->m->gguf, err)) != KN_OK) {
        kn_err_prefix(err, o->path);
        goto fail;
    }
    /* The policy of kinetic run (see its --help): --chat-format forces a family; a model
     * without tokenizer.chat_template is a base model and gets the messages raw (a system
     * text, a blank line, then the turns' text); a template that is not recognised gets
     * the family whose turn tokens the vocabulary holds, else raw. */
    struct chat_renderer_opts ro = {.chat_format = o->chat_format,
                                    .template_file = o->chat_template,
                                    .kwargs_json = o->chat_template_kwargs};
    if ((st = chat_renderer_init(&b->cr, &ro, b->m->gguf, b->tk, err)) != KN_OK) {
        kn_err_prefix(err, "serve");
        goto fail;
    }
    b->cr_ok = true;
    if (b->cr.warning[0])
        fprintf(stderr, "kinetic serve: warning: the model's chat template cannot be rendered (%s); "
                "using the built-in %s template\n", b->cr.warning, chat_format_name(b->cr.tmpl.format));

    int64_t n_ctx = o->n_ctx ? o->n_ctx
                             : (b->m->hp.n_ctx_train < 4096 ? b->m->hp.n_ctx_train : 4096);
    if (n_ctx < 8) {
        st = kn_fail(err, KN_E_ARG, "serve: --ctx-size %lld is too small (at least 8)",
                     (long long)n_ctx);
        goto fail;
    }
    int64_t max_batch = o->max_batch ? o->max_batch : 512;
    if (max_batch < o->n_slots)
        max_batch = o->n_slots;
    int threads = o->threads;
    if (threads <= 0) { /* as kinetic run: the CPUs online, at most 16 */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n < 1 ? 1 : n > 16 ? 16 : (int)n;
    }
    if (o->cache_ram_mib > (INT64_C(1) << 20)) {
        st = kn_fail(err, KN_E_ARG, "serve: --cache-ram %lld MiB is too large",
                     (long long)o->cache_ram_mib);
        goto fail;
    }
    b->cache_max = o->cache_ram_mib > 0 ? (size_t)o->cache_ram_mib << 20 : 0;
    struct engine_lm_model_params lp = {.n_seq = o->n_slots, .n_ctx = n_ctx,
                                        .max_batch = max_batch, .kv_type = MODEL_KV_F32,
                                        .cache_bytes = b->cache_max};
    if ((st = kern_pool_create(threads, &b->pool, err)) != KN_OK ||
        (st = engine_lm_model_open(&b->lm, b->m, b->tk, b->pool, &lp, err)) != KN_OK)
        goto fail;

    const char *base = strrchr(o->path, '/');
    snprintf(b->name, sizeof b->name, "%s", base ? base + 1 : o->path);
    out->ctx = b;
    out->name = b->name;
    out->model_path = o->path;
    out->device_class = kern_device_class(kern_isa_active());
    out->n_vocab = (int32_t)b->m->hp.n_vocab;
    out->n_ctx = n_ctx;
    out->n_slots = o->n_slots;
    out->max_batch = max_batch;
    out->max_piece = tok_max_piece(b->tk) + 4;
    out->chat_format = chat_renderer_name(&b->cr);
    out->tokenize = mb_tokenize;
    out->chat = mb_chat;
    out->chat_json = mb_chat_json;
    out->renderer = &b->cr;
    out->piece = mb_piece;
    out->token_text = mb_token_text;
    out->is_eog = mb_is_eog;
    out->sample_piece = sample_tok_piece;
    out->sample_pctx = b->tk;
    out->grammar_vocab = mb_grammar_vocab;
    mb_find_think(b, out);
    out->lm = b->lm;
    out->free = mb_free;
    if (b->cache_max)
        out->cache_stats = mb_cache_stats;
    return KN_OK;
fail:
    mb_free(b);
    return st;
}
