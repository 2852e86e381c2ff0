/* template.c: the receipt's "template" record, how the input became the prompt tokens:
 * made from the chat renderer run, chat and serve render with, so that verify-receipt can
 * render the input again with the same renderer and compare the tokens. */
#include "receipt.h"

#include <stdlib.h>
#include <string.h>

#include "../chat/chat.h"
#include "../crypto/blake3.h"

void receipt_template_free(struct receipt_template *t)
{
    free(t->text);
    json_free(t->kwargs);
    json_free(t->tools);
    memset(t, 0, sizeof *t);
}

void receipt_template_plain(struct receipt_template *t, const char *engine)
{
    memset(t, 0, sizeof *t);
    t->present = true;
    snprintf(t->engine, sizeof t->engine, "%s", engine);
}

bool receipt_template_engine_known(const char *name)
{
    enum chat_format f;
    return strcmp(name, "jinja") == 0 || strcmp(name, "text") == 0 ||
           strcmp(name, "ids") == 0 || chat_format_from_name(name, &f);
}

enum kn_status receipt_template_copy(struct receipt_template *dst,
                                     const struct receipt_template *src, struct kn_err *err)
{
    *dst = *src;
    dst->text = NULL;
    dst->kwargs = dst->tools = NULL;
    if ((src->text && !(dst->text = strdup(src->text))) ||
        (src->kwargs && !(dst->kwargs = json_clone(src->kwargs))) ||
        (src->tools && !(dst->tools = json_clone(src->tools)))) {
        receipt_template_free(dst);
        return kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
    }
    return KN_OK;
}

/* The renderer's kwargs with the request's over them, as chat_jinja.c merges them, or
 * NULL when there are none. */
static enum kn_status merged_kwargs(const struct json_value *base, const struct json_value *req,
                                    struct json_value **out, struct kn_err *err)
{
    *out = NULL;
    if (!base && !req)
        return KN_OK;
    struct json_value *kw = base ? json_clone(base) : json_new_object();
    if (!kw)
        return kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
    for (size_t i = 0; req && i < req->u.object.len; i++) {
        const struct json_member *m = &req->u.object.items[i];
        json_free(json_object_take(kw, m->key));
        enum kn_status st = json_object_set(kw, m->key, json_clone(m->value), err);
        if (st != KN_OK) {
            json_free(kw);
            return st;
        }
    }
    *out = kw;
    return KN_OK;
}

enum kn_status receipt_template_from_renderer(struct receipt_template *t,
                                              const struct chat_renderer *cr,
                                              const struct json_value *tools,
                                              const struct json_value *kwargs,
                                              bool add_generation_prompt, int64_t now,
                                              struct kn_err *err)
{
    memset(t, 0, sizeof *t);
    t->present = true;
    snprintf(t->engine, sizeof t->engine, "%s", chat_renderer_name(cr));
    bool forced = cr->choice == CHAT_CHOICE_FORCED;
    bool jinja = cr->engine == CHAT_ENGINE_JINJA;
    snprintf(t->source, sizeof t->source, "%s",
             !forced ? "model" : jinja ? "file" : "forced");
    t->add_generation_prompt = add_generation_prompt;
    if (jinja) {
        uint8_t h[BLAKE3_OUT_LEN];
        blake3_hash(cr->src ? cr->src : "", cr->src ? cr->src_len : 0, h);
        blake3_hex(h, sizeof h, t->blake3);
        if (forced && !(t->text = strdup(cr->src ? cr->src : "")))
            return kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
        t->has_now = chat_renderer_reads_clock(cr);
        t->now = t->has_now ? now : 0;
    }
    enum kn_status st = merged_kwargs(cr->kwargs, kwargs, &t->kwargs, err);
    if (st == KN_OK && tools && !json_is(tools, JSON_NULL) && !(t->tools = json_clone(tools)))
        st = kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
    if (st != KN_OK)
        receipt_template_free(t);
    return st;
}
