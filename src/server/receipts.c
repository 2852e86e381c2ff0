/* receipts.c: receipts for server completions ("receipt": true): the receipt module's
 * format, optionally signed with --sign-key. The server hands over exactly what
 * engine_generate would have produced for the request run alone (end-of-generation token
 * left out, the context rule of kinetic run), so verify-receipt's plain rerun compares
 * like with like. */
#include "server.h"
#include "receipt/receipt.h"

#include <sodium.h>
#include <stdlib.h>

struct srv_signer {
    bool sign;
    struct receipt_key key;
};

enum kn_status srv_signer_open(struct srv_signer **out, const char *key_path, struct kn_err *err)
{
    *out = NULL;
    struct srv_signer *s = kn_calloc(1, sizeof *s, err);
    if (!s)
        return KN_E_NOMEM;
    if (key_path) {
        enum kn_status st = receipt_key_load(key_path, &s->key, err);
        if (st != KN_OK) {
            free(s);
            return st;
        }
        s->sign = true;
    }
    *out = s;
    return KN_OK;
}

void srv_signer_free(struct srv_signer *s)
{
    if (!s)
        return;
    receipt_key_wipe(&s->key);
    sodium_memzero(s, sizeof *s);
    free(s);
}

enum kn_status srv_receipt_build(void *ctx, const struct srv_receipt_input *in,
                                 struct json_value **out, struct kn_err *err)
{
    struct srv_signer *sg = ctx;
    *out = NULL;
    struct session_record run = {
        .model_path = in->model_path,
        .input = in->input,
        .prompt = in->prompt,
        .n_prompt = (int64_t)in->n_prompt,
        .sampling = in->sampling,
        .max_tokens = in->max_tokens,
        .stop = in->stop,
        .n_stop = in->n_stop,
        .finish = in->finish,
        .text = in->text,
        .text_len = in->text_len,
        .output = in->out_ids,
        .n_output = in->n_out,
        .ctx_size = in->n_ctx,
        .cache_type = in->cache_type,
        .device_class = in->numerics ? in->device_class : NULL, /* NULL: the CPU's */
        .device_name = in->device_name,
        .numerics = in->numerics,
        .gpu_layers = in->gpu_layers,
        .grammar = in->grammar,
        .response_format = in->response_format,
    };
    /* How the input became the prompt: as the server rendered or tokenized it. */
    struct receipt_template tm = {0};
    enum kn_status st = KN_OK;
    if (in->renderer)
        st = receipt_template_from_renderer(&tm, in->renderer, in->tools, in->kwargs, true,
                                            in->render_now, err);
    else if (!in->chat)
        receipt_template_plain(&tm, in->prompt_is_text ? "text" : "ids");
    if (st != KN_OK)
        return st;
    run.tmpl = tm.present ? &tm : NULL;
    run.think_open = in->think_open;
    run.think_close = in->think_close;
    run.think_inside = in->think_inside;
    struct receipt r = {0};
    st = receipt_from_run(&r, &run, err);
    receipt_template_free(&tm);
    if (st == KN_OK && sg && sg->sign)
        st = receipt_sign(&r, &sg->key, err);
    if (st == KN_OK)
        st = receipt_to_json(&r, sg && sg->sign, out, err);
    receipt_free(&r);
    return st;
}
