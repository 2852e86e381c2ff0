/* backend_model.c: the server backend over a real GGUF model: the tokenizer, the chat
 * template (chosen exactly as `kinetic run` chooses it, so a receipt made by the server
 * reruns the same prompt), and the engine's forward pass over one KV cache per slot
 * (engine_lm_model_open: the same interface and step kinetic run generates with). */
#include "server.h"
#include "chat/chat.h"
#include "engine/session.h"
#include "grammar/grammar.h"
#include "kernels/isa.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "sample/sample.h"
#include "token/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mb {
    struct session s;          /* model, tokenizer, template, pool, context, KV type */
    bool s_ok;
    struct engine_lm lm;       /* the slots' sequences and the shared prompt cache */
    int n_slots;
    size_t cache_max;
    char name[256];
    /* POST /v1/embeddings: its own thread pool, forward pass and f32 KV cache, made at
     * the first request and used by one request at a time (emu), so embeddings never
     * share a pass with the slots (the scheduler thread owns the session's pool). */
    pthread_mutex_t emu;
    struct kern_pool *epool;
    struct model_fwd *efwd;
    struct model_kv ekv;
    bool ekv_ok;
};

static enum kn_status mb_tokenize(void *ctx, const char *text, size_t len, bool add_special,
                                  bool parse_special, int32_t **ids, size_t *n, struct kn_err *err)
{
    struct mb *b = ctx;
    size_t cap = len + 3; /* a token covers at least one byte; plus BOS and EOS */
    int32_t *v = kn_malloc(cap * sizeof *v, err);
    if (!v)
        return KN_E_NOMEM;
    enum kn_status st = tok_encode(b->s.tk, text, len, add_special, parse_special, v, cap, n, err);
    if (st != KN_OK) {
        free(v);
        return st;
    }
    *ids = v;
    return KN_OK;
}

/* Renders with session_prompt, as run, chat and verify-receipt do: the rendered prompt's
 * text and (when ids is not NULL) tokens. */
static enum kn_status mb_render(struct mb *b, const struct session_input *in, int32_t **ids,
                                size_t *n, char **text, int64_t *now, struct kn_err *err)
{
    struct session_prompt sp;
    enum kn_status st = session_prompt(&b->s, in, ids != NULL, &sp, err);
    if (st != KN_OK)
        return st;
    if (ids) {
        *ids = sp.ids; /* the prompt hands them over */
        *n = (size_t)sp.n;
        sp.ids = NULL;
    }
    if (now)
        *now = sp.cp.now; /* the clock strftime_now read, for the receipt's template */
    *text = sp.cp.text; /* NUL-terminated */
    sp.cp.text = NULL;
    session_prompt_free(&sp);
    return KN_OK;
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
    struct session_input in = {.msgs = cm, .n_msgs = n_msgs};
    enum kn_status st = mb_render(b, &in, ids, n, text, NULL, err);
    free(cm);
    return st;
}

static enum kn_status mb_chat_json(void *ctx, const struct json_value *messages,
                                   const struct json_value *tools, const struct json_value *kwargs,
                                   bool add_generation_prompt, int64_t *now, int32_t **ids,
                                   size_t *n, char **text, struct kn_err *err)
{
    struct mb *b = ctx;
    struct session_input in = {.messages = messages, .tools = tools, .kwargs = kwargs,
                               .no_generation_prompt = !add_generation_prompt};
    return mb_render(b, &in, ids, n, text, now, err);
}

static const char *mb_piece(void *ctx, int32_t id, size_t *len)
{
    struct mb *b = ctx;
    return tok_piece(b->s.tk, id, false, len);
}

static const char *mb_token_text(void *ctx, int32_t id, size_t *len)
{
    struct mb *b = ctx;
    const char *p = tok_piece(b->s.tk, id, true, len);
    return p ? p : "";
}

static bool mb_is_eog(void *ctx, int32_t id)
{
    struct mb *b = ctx;
    return tok_is_eog(b->s.tk, id);
}

/* As kinetic run builds its grammar vocabulary, so a grammar allows the same tokens. */
static enum kn_status mb_grammar_vocab(void *ctx, struct grammar_vocab **out, struct kn_err *err)
{
    struct mb *b = ctx;
    return grammar_vocab_from_tok(out, b->s.tk, (int32_t)b->s.m->hp.n_vocab, err);
}

/* The family's reasoning markers when its vocabulary has them (the session's choice, as
 * for kinetic run and chat); none otherwise, so "auto" leaves the text whole. Whether a
 * reply starts inside them is a property of each rendered prompt (api.c). */
static void mb_find_think(struct mb *b, struct srv_backend *out)
{
    if (b->s.think_native) {
        out->think_open = b->s.think_open;
        out->think_close = b->s.think_close;
    }
}

static void mb_cache_stats(void *ctx, struct srv_cache_stats *out)
{
    struct mb *b = ctx;
    struct pcache_stats ps = pcache_get_stats(engine_lm_model_cache(&b->lm));
    *out = (struct srv_cache_stats){ps.hits, ps.misses, ps.tokens_restored, ps.stores,
                                    ps.evictions, ps.records, ps.bytes, b->cache_max};
}

static enum kn_status mb_embed(void *ctx, const int32_t *ids, size_t n, int64_t dims, float *out,
                               struct kn_err *err)
{
    struct mb *b = ctx;
    const struct model *m = b->s.m;
    pthread_mutex_lock(&b->emu);
    enum kn_status st = KN_OK;
    if (!b->efwd) {
        st = kern_pool_create(kern_pool_threads(b->s.pool), &b->epool, err);
        if (st == KN_OK)
            st = model_fwd_create(&b->efwd, m, model_embed_batch(&m->hp, b->s.n_batch, b->s.n_ctx),
                                  b->epool, err);
        if (st == KN_OK && (st = model_kv_init(&b->ekv, m, b->s.n_ctx, MODEL_KV_F32, err)) == KN_OK)
            b->ekv_ok = true;
        if (st != KN_OK) {
            model_fwd_free(b->efwd);
            b->efwd = NULL;
            kern_pool_free(b->epool);
            b->epool = NULL;
        }
    }
    if (st == KN_OK)
        st = model_embed(b->efwd, &b->ekv, ids, (int64_t)n, dims, out, err);
    pthread_mutex_unlock(&b->emu);
    return st;
}

static void mb_free(void *ctx)
{
    struct mb *b = ctx;
    if (!b)
        return;
    if (b->ekv_ok)
        model_kv_free(&b->ekv);
    model_fwd_free(b->efwd);
    kern_pool_free(b->epool);
    pthread_mutex_destroy(&b->emu);
    engine_lm_model_close(&b->lm);
    if (b->s_ok)
        session_close(&b->s);
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
    pthread_mutex_init(&b->emu, NULL);
    /* The model, tokenizer and template, context, threads and KV type: the session's
     * defaults, the same as kinetic run's; the slots hold their own caches. */
    struct session_opts so = o->session;
    so.level = SESSION_MODEL;
    so.name = "kinetic serve";
    so.conversation = true;
    enum kn_status st = session_open(&b->s, &so, err);
    if (st != KN_OK)
        goto fail;
    b->s_ok = true;
    int64_t n_ctx = b->s.n_ctx;
    if (n_ctx < 8) {
        st = kn_fail(err, KN_E_ARG, "serve: --ctx-size %lld is too small (at least 8)",
                     (long long)n_ctx);
        goto fail;
    }
    int64_t max_batch = b->s.n_batch;
    if (max_batch < o->n_slots)
        max_batch = o->n_slots;
    if (o->cache_ram_mib > (INT64_C(1) << 20)) {
        st = kn_fail(err, KN_E_ARG, "serve: --cache-ram %lld MiB is too large",
                     (long long)o->cache_ram_mib);
        goto fail;
    }
    b->cache_max = o->cache_ram_mib > 0 ? (size_t)o->cache_ram_mib << 20 : 0;
    /* The slots' caches and the shared prompt cache hold the session's KV type. */
    struct engine_lm_model_params lp = {.n_seq = o->n_slots, .n_ctx = n_ctx,
                                        .max_batch = max_batch, .kv_type = b->s.kv_type,
                                        .cache_bytes = b->cache_max};
    if ((st = engine_lm_model_open(&b->lm, b->s.m, b->s.tk, b->s.pool, &lp, err)) != KN_OK)
        goto fail;

    const char *path = so.model_path, *base = strrchr(path, '/');
    snprintf(b->name, sizeof b->name, "%s", base ? base + 1 : path);
    out->ctx = b;
    out->name = b->name;
    out->model_path = path;
    out->cache_type = b->s.kv_name;
    out->kv_bytes_per_slot = model_kv_bytes(b->s.m, n_ctx, b->s.kv_type);
    struct session_record dev; /* the device's part of the session's record */
    session_record_init(&b->s, NULL, &dev);
    out->device_class = dev.device_class ? dev.device_class : kern_device_class(kn_isa_active());
    out->device_name = dev.device_name;
    out->numerics = dev.numerics;
    out->gpu_layers = dev.gpu_layers;
    out->n_vocab = (int32_t)b->s.m->hp.n_vocab;
    out->n_ctx = n_ctx;
    out->n_slots = o->n_slots;
    out->max_batch = max_batch;
    out->max_piece = tok_max_piece(b->s.tk) + 4;
    out->chat_format = chat_renderer_name(&b->s.cr);
    out->tokenize = mb_tokenize;
    out->chat = mb_chat;
    out->chat_json = mb_chat_json;
    out->renderer = &b->s.cr;
    out->piece = mb_piece;
    out->token_text = mb_token_text;
    out->is_eog = mb_is_eog;
    out->sample_piece = sample_tok_piece;
    out->sample_pctx = b->s.tk;
    out->grammar_vocab = mb_grammar_vocab;
    mb_find_think(b, out);
    const struct model_hparams *hp = &b->s.m->hp;
    out->pooling = model_pooling_name(hp->pooling);
    out->n_embd = hp->n_embd;
    out->embd_matryoshka = model_embed_matryoshka(hp);
    out->encoder_only = model_arch_is_bert(hp->arch);
    if (hp->pooling != MODEL_POOLING_NONE)
        out->embed = mb_embed;
    out->lm = b->lm;
    out->free = mb_free;
    if (b->cache_max)
        out->cache_stats = mb_cache_stats;
    return KN_OK;
fail:
    mb_free(b);
    return st;
}
