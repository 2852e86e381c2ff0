/* embeddings.c: POST /v1/embeddings in OpenAI's shape.
 *
 *   {"input": "text" | ["text", ...] | [id, ...] | [[id, ...], ...],
 *    "encoding_format": "float" (default) | "base64", "dimensions": D, "model", "user"}
 *   -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": ...}],
 *       "model", "usage": {"prompt_tokens", "total_tokens"}}
 *
 * Each input is one sequence, tokenized as a completion prompt is (the model's BOS/EOS
 * rules, special tokens parsed, as llama-server does) and embedded by the backend
 * (model_embed: pooled as the GGUF says, L2-normalised). base64 is the embedding's
 * little-endian float32 bytes, as OpenAI sends it. Every input is checked before any is
 * embedded, so a bad one costs no compute. */
#include "srv_internal.h"

#include <stdlib.h>
#include <string.h>

/* The most inputs one request may hold (OpenAI's limit). */
#define SRV_EMBED_MAX_INPUTS 2048

#define EBAD(e, param, ...) \
    srv_error_set((e), 400, "invalid_request_error", "invalid_value", (param), __VA_ARGS__)

struct embed_input {
    int32_t *ids;
    size_t n;
};

static void inputs_free(struct embed_input *in, size_t n)
{
    for (size_t i = 0; in && i < n; i++)
        free(in[i].ids);
    free(in);
}

/* Token ids of a JSON array (every element an id of the vocabulary). */
static int read_ids(struct srv *s, const struct json_value *a, const char *what,
                    struct embed_input *out, struct srv_error *e)
{
    size_t n = json_len(a);
    if (n == 0)
        return EBAD(e, "input", "%s is an empty array of token ids", what);
    if (!(out->ids = malloc(n * sizeof *out->ids)))
        return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        int64_t id;
        if (!json_int(json_at(a, i), &id) || id < 0 || id >= s->b->n_vocab)
            return EBAD(e, "input", "%s[%zu] must be a token id between 0 and %d", what, i,
                        (int)s->b->n_vocab - 1);
        out->ids[i] = (int32_t)id;
    }
    out->n = n;
    return 0;
}

static int read_text(struct srv *s, const struct json_value *v, const char *what,
                     struct embed_input *out, struct srv_error *e)
{
    if (v->u.string.len == 0)
        return EBAD(e, "input", "%s is an empty string", what);
    struct kn_err err = {0};
    if (s->b->tokenize(s->b->ctx, v->u.string.s, v->u.string.len, true, true, &out->ids,
                       &out->n, &err) != KN_OK)
        return EBAD(e, "input", "%s: %s", what, err.msg);
    if (out->n == 0)
        return EBAD(e, "input", "%s has no tokens", what);
    return 0;
}

/* "input" in any of its four shapes into *in (n_in sequences). */
static int read_inputs(struct srv *s, const struct json_value *v, struct embed_input **in,
                       size_t *n_in, struct srv_error *e)
{
    *in = NULL;
    *n_in = 0;
    if (!v || json_is(v, JSON_NULL))
        return EBAD(e, "input", "'input' is required: a string, an array of strings, an array "
                    "of token ids or an array of such arrays");
    bool many = json_is(v, JSON_ARRAY) && json_len(v) > 0 &&
                (json_is(json_at(v, 0), JSON_STRING) || json_is(json_at(v, 0), JSON_ARRAY));
    size_t n = many ? json_len(v) : 1;
    if (!json_is(v, JSON_STRING) && !json_is(v, JSON_ARRAY))
        return EBAD(e, "input", "'input' must be a string, an array of strings, an array of "
                    "token ids or an array of such arrays");
    if (n > SRV_EMBED_MAX_INPUTS)
        return EBAD(e, "input", "'input' holds %zu inputs; at most %d per request", n,
                    SRV_EMBED_MAX_INPUTS);
    if (!(*in = calloc(n, sizeof **in)))
        return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
    *n_in = n;
    for (size_t i = 0; i < n; i++) {
        const struct json_value *x = many ? json_at(v, i) : v;
        char what[48];
        if (many)
            snprintf(what, sizeof what, "input[%zu]", i);
        else
            snprintf(what, sizeof what, "input");
        int st;
        if (json_is(x, JSON_STRING))
            st = read_text(s, x, what, &(*in)[i], e);
        else if (json_is(x, JSON_ARRAY))
            st = read_ids(s, x, what, &(*in)[i], e);
        else
            st = EBAD(e, "input", "%s must be a string or an array of token ids (an array's "
                      "inputs are all strings or all token arrays)", what);
        if (st)
            return st;
        if ((int64_t)(*in)[i].n > s->b->n_ctx)
            return srv_error_set(e, 400, "invalid_request_error", "context_length_exceeded",
                                 "input", "%s has %zu tokens but the context holds %lld "
                                 "(--ctx-size)", what, (*in)[i].n, (long long)s->b->n_ctx);
    }
    return 0;
}

/* The standard base64 alphabet with padding, of the floats' little-endian bytes. */
static struct json_value *base64_floats(const float *x, int64_t n)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t nb = (size_t)n * 4, cap = (nb + 2) / 3 * 4 + 1;
    uint8_t *bytes = malloc(nb ? nb : 1);
    char *t = malloc(cap);
    struct json_value *v = NULL;
    if (bytes && t) {
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            for (int k = 0; k < 4; k++)
                bytes[i * 4 + k] = (uint8_t)(u >> (8 * k));
        }
        size_t o = 0;
        for (size_t i = 0; i < nb; i += 3) {
            const uint32_t a = bytes[i], b = i + 1 < nb ? bytes[i + 1] : 0,
                           c = i + 2 < nb ? bytes[i + 2] : 0;
            const uint32_t w = a << 16 | b << 8 | c;
            t[o++] = abc[w >> 18 & 63];
            t[o++] = abc[w >> 12 & 63];
            t[o++] = i + 1 < nb ? abc[w >> 6 & 63] : '=';
            t[o++] = i + 2 < nb ? abc[w & 63] : '=';
        }
        v = json_new_stringn(t, o);
    }
    free(bytes);
    free(t);
    return v;
}

int api_embeddings(struct srv *s, const struct json_value *body, char **out, struct srv_error *e)
{
    *out = NULL;
    const struct srv_backend *b = s->b;
    if (!b->embed)
        return srv_error_set(e, 400, "invalid_request_error", "model_not_embedding", NULL,
                             "the model %s gives no embeddings: its pooling_type is %s; serve "
                             "an embedding model (pooling mean, cls or last)",
                             s->model_id, b->pooling ? b->pooling : "none");
    bool b64 = false;
    const struct json_value *v = json_get(body, "encoding_format");
    if (v && !json_is(v, JSON_NULL)) {
        const char *f = json_str(v);
        if (f && strcmp(f, "base64") == 0)
            b64 = true;
        else if (!f || strcmp(f, "float") != 0)
            return EBAD(e, "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    }
    int64_t dims = b->n_embd;
    v = json_get(body, "dimensions");
    if (v && !json_is(v, JSON_NULL)) {
        if (!json_int(v, &dims) || dims < 1 || dims > b->n_embd)
            return EBAD(e, "dimensions", "'dimensions' must be an integer between 1 and the "
                        "model's %lld", (long long)b->n_embd);
        if (dims < b->n_embd && !b->embd_matryoshka)
            return EBAD(e, "dimensions", "this model's embeddings are not Matryoshka-trained, so "
                        "they cannot be shortened: 'dimensions' must be %lld (or absent)",
                        (long long)b->n_embd);
    }
    struct embed_input *in;
    size_t n_in;
    int st = read_inputs(s, json_get(body, "input"), &in, &n_in, e);
    if (st) {
        inputs_free(in, n_in);
        return st;
    }
    float *vec = malloc((size_t)dims * sizeof *vec);
    bool ok = vec != NULL;
    struct json_value *root = json_new_object(), *data = json_new_array();
    int64_t n_tokens = 0;
    for (size_t i = 0; ok && i < n_in; i++) {
        struct kn_err err = {0};
        if (b->embed(b->ctx, in[i].ids, in[i].n, dims, vec, &err) != KN_OK) {
            st = err.status == KN_E_ARG || err.status == KN_E_LIMIT || err.status == KN_E_UNSUPPORTED
                     ? EBAD(e, "input", "input %zu: %s", i, err.msg)
                     : srv_error_set(e, 500, "server_error", NULL, NULL, "%s", err.msg);
            break;
        }
        n_tokens += (int64_t)in[i].n;
        struct json_value *item = json_new_object(), *emb;
        if (b64) {
            emb = base64_floats(vec, dims);
        } else {
            emb = json_new_array();
            for (int64_t k = 0; emb && k < dims; k++)
                if (json_array_push(emb, json_new_float(vec[k]), NULL) != KN_OK) {
                    json_free(emb);
                    emb = NULL;
                }
        }
        api_json_set(item, "object", json_new_string("embedding"), &ok);
        api_json_set(item, "index", json_new_int((int64_t)i), &ok);
        api_json_set(item, "embedding", emb, &ok);
        if (ok && json_array_push(data, item, NULL) != KN_OK)
            ok = false;
        else if (!ok)
            json_free(item);
    }
    free(vec);
    inputs_free(in, n_in);
    if (st) {
        json_free(data);
        json_free(root);
        return st;
    }
    struct json_value *usage = json_new_object();
    api_json_set(usage, "prompt_tokens", json_new_int(n_tokens), &ok);
    api_json_set(usage, "total_tokens", json_new_int(n_tokens), &ok);
    api_json_set(root, "object", json_new_string("list"), &ok);
    api_json_set(root, "data", data, &ok);
    api_json_set(root, "model", json_new_string(s->model_id), &ok);
    api_json_set(root, "usage", usage, &ok);
    *out = api_json_finish(root, ok);
    return *out ? 0 : srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
}
