/* receipt.c: building, writing, reading and signing receipts. Field names, nesting and
 * order follow the receipt spec; docs/receipts.md has the byte-level rules. */
#include "receipt.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../crypto/blake3.h"
#include "../model/model.h"
#include "../text/text.h"

_Static_assert(RECEIPT_MAX_VALUES > (size_t)MODEL_MAX_CTX + 1 + 4096,
               "a receipt must hold a full context's ids");

void receipt_free(struct receipt *r)
{
    free(r->model_file);
    free(r->model_path);
    free(r->device_name);
    json_free(r->input);
    receipt_template_free(&r->tmpl);
    free(r->prompt_ids);
    for (int64_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r->grammar);
    json_free(r->response_format);
    free(r->text);
    free(r->output_ids);
    memset(r, 0, sizeof *r);
}

void receipt_tokens_blake3(const int32_t *ids, int64_t n, char out_hex[65])
{
    uint8_t out[BLAKE3_OUT_LEN];
    blake3_hash_tokens(ids, (size_t)n, out);
    blake3_hex(out, BLAKE3_OUT_LEN, out_hex);
}

/* ================================================================ writing */

static struct json_value *json_ids(const int32_t *ids, int64_t n, struct kn_err *err)
{
    struct json_value *arr = json_new_array();
    if (!arr) {
        kn_fail(err, KN_E_NOMEM, "out of memory building a receipt");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++)
        if (json_array_push(arr, json_new_int(ids[i]), err) != KN_OK) {
            json_free(arr);
            return NULL;
        }
    return arr;
}

/* Builders that stop at the first failure: each set/push records it in *st. */
struct build {
    enum kn_status st;
    struct kn_err *err;
};

static struct json_value *obj(struct build *b)
{
    struct json_value *o = json_new_object();
    if (!o && b->st == KN_OK)
        b->st = kn_fail(b->err, KN_E_NOMEM, "out of memory building a receipt");
    return o;
}

static void set(struct build *b, struct json_value *o, const char *key, struct json_value *v)
{
    if (b->st != KN_OK || !o) {
        json_free(v);
        return;
    }
    b->st = json_object_set(o, key, v, b->err);
}

static struct json_value *tokens_obj(struct build *b, const int32_t *ids, int64_t n)
{
    char hex[65];
    receipt_tokens_blake3(ids, n, hex);
    struct json_value *o = obj(b);
    set(b, o, "count", json_new_int(n));
    set(b, o, "blake3", json_new_string(hex));
    set(b, o, "ids", b->st == KN_OK ? json_ids(ids, n, b->err) : NULL);
    return o;
}

static bool chat_engine(const char *engine)
{
    return strcmp(engine, "text") != 0 && strcmp(engine, "ids") != 0;
}

static struct json_value *template_obj(struct build *b, const struct receipt_template *t)
{
    struct json_value *o = obj(b);
    set(b, o, "engine", json_new_string(t->engine));
    if (!chat_engine(t->engine))
        return o;
    set(b, o, "source", json_new_string(t->source));
    if (strcmp(t->engine, "jinja") == 0)
        set(b, o, "blake3", json_new_string(t->blake3));
    set(b, o, "add_generation_prompt", json_new_bool(t->add_generation_prompt));
    if (t->kwargs)
        set(b, o, "kwargs", json_clone(t->kwargs));
    if (t->tools)
        set(b, o, "tools", json_clone(t->tools));
    if (t->has_now)
        set(b, o, "now", json_new_int(t->now));
    if (t->text)
        set(b, o, "text", json_new_string(t->text));
    return o;
}

/* Each format version and the canonical form its signature covers. */
static const struct {
    int64_t version;
    enum json_style style;
} receipt_versions[] = {
    {RECEIPT_VERSION_LEGACY, JSON_COMPACT},
    {RECEIPT_VERSION, JSON_JCS},
};

bool receipt_version_style(int64_t v, enum json_style *style)
{
    for (size_t i = 0; i < sizeof receipt_versions / sizeof receipt_versions[0]; i++)
        if (receipt_versions[i].version == v) {
            *style = receipt_versions[i].style;
            return true;
        }
    return false;
}

/* The first integer Kinetic uses exactly that RFC 8785 cannot sign exactly (its numbers
 * are doubles: a seed of 2^53 + 1 would sign as 2^53, so the signature would cover both),
 * or NULL; *v gets its value. The other integers are bounded far below 2^53 (ids, counts,
 * ctx-size, the int32 settings). */
static const char *inexact_int(const struct receipt *r, int64_t *v)
{
    const struct {
        const char *field;
        int64_t v;
        bool present;
    } ints[] = {
        {"sampling.seed", (int64_t)r->sampling.seed, true},
        {"model.size", (int64_t)r->model_size, true},
        {"template.now", r->tmpl.now, r->tmpl.present && r->tmpl.has_now},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (ints[i].present && (ints[i].v > JSON_EXACT_INT_MAX || ints[i].v < -JSON_EXACT_INT_MAX)) {
            *v = ints[i].v;
            return ints[i].field;
        }
    return NULL;
}

int64_t receipt_version_for(const struct receipt *r)
{
    int64_t v;
    return inexact_int(r, &v) ? RECEIPT_VERSION_LEGACY : RECEIPT_VERSION;
}

/* r's format version: what it was read as, else what its values are written as. */
static int64_t format_of(const struct receipt *r)
{
    return r->format ? r->format : receipt_version_for(r);
}

/* A receipt of a JCS version holds no integer JCS cannot sign exactly. */
static enum kn_status check_exact_ints(const struct receipt *r, enum kn_status fail,
                                       struct kn_err *err)
{
    enum json_style style;
    int64_t v;
    const char *field = inexact_int(r, &v);
    if (!field || !receipt_version_style(format_of(r), &style) || style != JSON_JCS)
        return KN_OK;
    return kn_fail(err, fail, "receipt: %s is %lld, beyond 2^53: a version-%lld receipt is "
                   "signed over RFC 8785 JSON, whose numbers are doubles, which cannot hold it "
                   "exactly (Kinetic writes such a receipt as version %d)", field, (long long)v,
                   (long long)format_of(r), RECEIPT_VERSION_LEGACY);
}

enum kn_status receipt_to_json(const struct receipt *r, bool with_signature,
                               struct json_value **out, struct kn_err *err)
{
    enum kn_status st = check_exact_ints(r, KN_E_ARG, err);
    if (st != KN_OK) {
        *out = NULL;
        return st;
    }
    struct build b = {KN_OK, err};
    struct json_value *root = obj(&b);
    set(&b, root, "receipt", json_new_int(format_of(r)));

    struct json_value *kin = obj(&b);
    set(&b, kin, "version", json_new_string(r->version));
    set(&b, kin, "build", json_new_string(r->build));
    set(&b, kin, "numerics", json_new_string(r->numerics));
    set(&b, root, "kinetic", kin);

    struct json_value *model = obj(&b);
    set(&b, model, "file", json_new_string(r->model_file ? r->model_file : ""));
    set(&b, model, "path", json_new_string(r->model_path ? r->model_path : ""));
    set(&b, model, "size", json_new_int((int64_t)r->model_size));
    set(&b, model, "blake3", json_new_string(r->model_blake3));
    set(&b, root, "model", model);

    struct json_value *dev = obj(&b);
    set(&b, dev, "class", json_new_string(r->device_class));
    set(&b, dev, "name", json_new_string(r->device_name ? r->device_name : ""));
    struct json_value *settings = obj(&b);
    set(&b, settings, "ctx-size", json_new_int(r->ctx_size));
    set(&b, settings, "cache-type", json_new_string(r->cache_type));
    if (r->gpu_layers > 0) /* only then: CPU receipts keep their bytes */
        set(&b, settings, "gpu-layers", json_new_int(r->gpu_layers));
    set(&b, dev, "settings", settings);
    set(&b, root, "device", dev);

    set(&b, root, "input", r->input ? json_clone(r->input) : json_new_string(""));
    /* Written only when recorded, so receipts made before keep their bytes. */
    if (r->tmpl.present)
        set(&b, root, "template", template_obj(&b, &r->tmpl));

    char hex[65];
    receipt_tokens_blake3(r->prompt_ids, r->n_prompt, hex);
    struct json_value *prompt = obj(&b);
    set(&b, prompt, "count", json_new_int(r->n_prompt));
    set(&b, prompt, "blake3", json_new_string(hex));
    set(&b, prompt, "ids", b.st == KN_OK ? json_ids(r->prompt_ids, r->n_prompt, err) : NULL);
    set(&b, root, "prompt", prompt);

    /* The sampling settings through the table (sample.h): the receipt spec's first ten
     * (max_tokens from r->max_tokens), stop, grammar and response_format, then the
     * samplers of issue 10 that are on, so receipts that do not use them keep their bytes. */
    struct sample_params s = r->sampling;
    s.n_predict = r->max_tokens < 0 ? -1 : r->max_tokens;
    struct json_value *smp = obj(&b);
    if (b.st == KN_OK && smp)
        b.st = sample_params_json_write(&s, smp, SAMPLE_JSON_BASE, err);
    struct json_value *stop = json_new_array();
    for (int64_t i = 0; stop && b.st == KN_OK && i < r->n_stop; i++)
        b.st = json_array_push(stop, json_new_string(r->stop[i]), err);
    set(&b, smp, "stop", stop);
    /* Present only when used, so receipts without them keep the spec's bytes. */
    if (r->grammar)
        set(&b, smp, "grammar", json_new_string(r->grammar));
    if (r->response_format)
        set(&b, smp, "response_format", json_clone(r->response_format));
    if (b.st == KN_OK && smp)
        b.st = sample_params_json_write(&s, smp, SAMPLE_JSON_EXTRA, err);
    set(&b, root, "sampling", smp);

    struct json_value *output = obj(&b);
    set(&b, output, "finish", json_new_string(r->finish));
    set(&b, output, "text", json_new_stringn(r->text ? r->text : "", r->text ? r->text_len : 0));
    if (r->think.present) {
        struct json_value *th = obj(&b);
        set(&b, th, "open", json_new_string(r->think.open));
        set(&b, th, "close", json_new_string(r->think.close));
        set(&b, th, "inside", json_new_bool(r->think.inside));
        set(&b, output, "think", th);
    }
    set(&b, output, "tokens", tokens_obj(&b, r->output_ids, r->n_output));
    set(&b, root, "output", output);

    if (with_signature && r->has_signature) {
        struct json_value *sig = obj(&b);
        set(&b, sig, "public_key", json_new_string(r->public_key));
        set(&b, sig, "ed25519", json_new_string(r->signature));
        set(&b, root, "signature", sig);
    }
    if (b.st != KN_OK) {
        json_free(root);
        *out = NULL;
        return b.st;
    }
    *out = root;
    return KN_OK;
}

enum kn_status receipt_signed_bytes(const struct receipt *r, char **out, size_t *out_len,
                                    struct kn_err *err)
{
    enum json_style style;
    if (!receipt_version_style(format_of(r), &style))
        return kn_fail(err, KN_E_UNSUPPORTED, "receipt: version %lld cannot be signed",
                       (long long)format_of(r));
    struct json_value *doc;
    enum kn_status st = receipt_to_json(r, false, &doc, err);
    if (st != KN_OK)
        return st;
    st = json_write(doc, style, out, out_len, err);
    json_free(doc);
    return st;
}

enum kn_status receipt_write(const struct receipt *r, const char *path, struct kn_err *err)
{
    struct json_value *doc;
    enum kn_status st = receipt_to_json(r, true, &doc, err);
    if (st != KN_OK)
        return st;
    char *text;
    size_t len;
    st = json_write(doc, JSON_PRETTY, &text, &len, err);
    json_free(doc);
    if (st != KN_OK)
        return st;
    st = kn_write_file_atomic(path, text, len, err);
    free(text);
    return st;
}

/* ================================================================ reading */

/* Strict field access: each failure names the field's dotted path. */
static enum kn_status need(const struct json_value *o, const char *path, const char *key,
                           enum json_type type, const struct json_value **out,
                           struct kn_err *err)
{
    static const char *const names[] = {"null", "a boolean", "a number", "a string",
                                        "an array", "an object"};
    const struct json_value *v = json_get(o, key);
    if (!v)
        return kn_fail(err, KN_E_FORMAT, "receipt: field %s%s%s is missing", path,
                       *path ? "." : "", key);
    if (!json_is(v, type))
        return kn_fail(err, KN_E_FORMAT, "receipt: field %s%s%s must be %s", path,
                       *path ? "." : "", key, names[type]);
    *out = v;
    return KN_OK;
}

/* Rejects members other than those listed (a NULL-terminated list). */
static enum kn_status only(const struct json_value *o, const char *path,
                           const char *const *keys, struct kn_err *err)
{
    for (size_t i = 0; i < o->u.object.len; i++) {
        const char *k = o->u.object.items[i].key;
        bool known = false;
        for (const char *const *p = keys; *p; p++)
            known |= strcmp(*p, k) == 0 && strlen(k) == o->u.object.items[i].key_len;
        if (!known)
            return kn_fail(err, KN_E_FORMAT, "receipt: unknown field %s%s%s", path,
                           *path ? "." : "", k);
    }
    return KN_OK;
}

static enum kn_status get_str(const struct json_value *o, const char *path, const char *key,
                              char *dst, size_t cap, struct kn_err *err)
{
    const struct json_value *v;
    enum kn_status st = need(o, path, key, JSON_STRING, &v, err);
    if (st != KN_OK)
        return st;
    if (v->u.string.len >= cap || strlen(v->u.string.s) != v->u.string.len)
        return kn_fail(err, KN_E_FORMAT, "receipt: field %s.%s is too long or holds a NUL",
                       path, key);
    memcpy(dst, v->u.string.s, v->u.string.len + 1);
    return KN_OK;
}

static enum kn_status get_strdup(const struct json_value *o, const char *path, const char *key,
                                 char **dst, struct kn_err *err)
{
    const struct json_value *v;
    enum kn_status st = need(o, path, key, JSON_STRING, &v, err);
    if (st != KN_OK)
        return st;
    *dst = kn_malloc(v->u.string.len + 1, err);
    if (!*dst)
        return KN_E_NOMEM;
    memcpy(*dst, v->u.string.s, v->u.string.len + 1);
    return KN_OK;
}

static enum kn_status get_int(const struct json_value *o, const char *path, const char *key,
                              int64_t lo, int64_t hi, int64_t *dst, struct kn_err *err)
{
    const struct json_value *v;
    enum kn_status st = need(o, path, key, JSON_NUMBER, &v, err);
    if (st != KN_OK)
        return st;
    if (!json_int(v, dst) || *dst < lo || *dst > hi)
        return kn_fail(err, KN_E_FORMAT, "receipt: field %s.%s must be an integer from %lld to %lld",
                       path, key, (long long)lo, (long long)hi);
    return KN_OK;
}

static bool is_hex(const char *s, size_t n)
{
    if (strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* The ids array; more than max ids (what the context holds) is refused before anything
 * is allocated for them. */
static enum kn_status get_ids(const struct json_value *o, const char *path, int64_t max,
                              int32_t **ids, int64_t *n, struct kn_err *err)
{
    const struct json_value *arr;
    enum kn_status st = need(o, path, "ids", JSON_ARRAY, &arr, err);
    if (st != KN_OK)
        return st;
    size_t len = json_len(arr);
    if ((uint64_t)len > (uint64_t)max)
        return kn_fail(err, KN_E_FORMAT,
                       "receipt: %s.ids holds %zu tokens, more than device.settings.ctx-size "
                       "(%lld) can hold", path, len, (long long)max);
    *ids = kn_calloc(len ? len : 1, sizeof **ids, err);
    if (!*ids)
        return KN_E_NOMEM;
    for (size_t i = 0; i < len; i++) {
        int64_t v;
        if (!json_int(json_at(arr, i), &v) || v < 0 || v > INT32_MAX)
            return kn_fail(err, KN_E_FORMAT, "receipt: %s.ids[%zu] is not a token id", path, i);
        (*ids)[i] = (int32_t)v;
    }
    *n = (int64_t)len;
    return KN_OK;
}

#define TRY(x)                  \
    do {                        \
        enum kn_status st_ = x; \
        if (st_ != KN_OK)       \
            return st_;         \
    } while (0)

static enum kn_status get_bool(const struct json_value *o, const char *path, const char *key,
                               bool *dst, struct kn_err *err)
{
    const struct json_value *v;
    TRY(need(o, path, key, JSON_BOOL, &v, err));
    *dst = v->u.boolean;
    return KN_OK;
}

/* The "template" object: what each engine needs, nothing else. */
static enum kn_status parse_template(const struct json_value *doc, struct receipt *r,
                                     struct kn_err *err)
{
    struct receipt_template *t = &r->tmpl;
    const struct json_value *o, *v;
    TRY(need(doc, "", "template", JSON_OBJECT, &o, err));
    TRY(get_str(o, "template", "engine", t->engine, sizeof t->engine, err));
    if (!receipt_template_engine_known(t->engine))
        return kn_fail(err, KN_E_FORMAT, "receipt: template.engine '%s' is not one this Kinetic "
                       "knows (jinja, a built-in family, text, ids)", t->engine);
    t->present = true;
    if (!chat_engine(t->engine)) {
        static const char *const plain[] = {"engine", NULL};
        TRY(only(o, "template", plain, err));
        bool ids = strcmp(t->engine, "ids") == 0;
        if (!json_is(r->input, JSON_STRING) && !(ids && json_is(r->input, JSON_ARRAY)))
            return kn_fail(err, KN_E_FORMAT, "receipt: template.engine '%s' needs the input "
                           "as a string%s", t->engine, ids ? " or an array of token ids" : "");
        return KN_OK;
    }
    static const char *const keys[] = {"engine", "source", "blake3", "add_generation_prompt",
                                       "kwargs", "tools", "now", "text", NULL};
    TRY(only(o, "template", keys, err));
    TRY(get_str(o, "template", "source", t->source, sizeof t->source, err));
    bool jinja = strcmp(t->engine, "jinja") == 0;
    bool file = strcmp(t->source, "file") == 0;
    if (strcmp(t->source, "model") != 0 && !file && strcmp(t->source, "forced") != 0)
        return kn_fail(err, KN_E_FORMAT, "receipt: template.source must be \"model\", \"file\" "
                       "or \"forced\"");
    if (file != (jinja && strcmp(t->source, "model") != 0))
        return kn_fail(err, KN_E_FORMAT, "receipt: template.source \"%s\" does not go with "
                       "template.engine \"%s\"", t->source, t->engine);
    if (jinja) {
        TRY(get_str(o, "template", "blake3", t->blake3, sizeof t->blake3, err));
        if (!is_hex(t->blake3, 64))
            return kn_fail(err, KN_E_FORMAT, "receipt: template.blake3 must be 64 lowercase hex "
                           "digits");
    } else if (json_get(o, "blake3")) {
        return kn_fail(err, KN_E_FORMAT, "receipt: template.blake3 is only for a jinja template");
    }
    if (file) {
        TRY(get_strdup(o, "template", "text", &t->text, err));
        if (strlen(t->text) != json_get(o, "text")->u.string.len)
            return kn_fail(err, KN_E_FORMAT, "receipt: field template.text holds a NUL");
    } else if (json_get(o, "text")) {
        return kn_fail(err, KN_E_FORMAT, "receipt: template.text is only for a template file");
    }
    TRY(get_bool(o, "template", "add_generation_prompt", &t->add_generation_prompt, err));
    if ((v = json_get(o, "kwargs"))) {
        if (!json_is(v, JSON_OBJECT))
            return kn_fail(err, KN_E_FORMAT, "receipt: field template.kwargs must be an object");
        if (!(t->kwargs = json_clone(v)))
            return kn_fail(err, KN_E_NOMEM, "out of memory reading a receipt");
    }
    if ((v = json_get(o, "tools"))) {
        if (!json_is(v, JSON_ARRAY))
            return kn_fail(err, KN_E_FORMAT, "receipt: field template.tools must be an array");
        if (!(t->tools = json_clone(v)))
            return kn_fail(err, KN_E_NOMEM, "out of memory reading a receipt");
    }
    if (json_get(o, "now")) {
        if (!jinja)
            return kn_fail(err, KN_E_FORMAT, "receipt: template.now is only for a jinja template");
        TRY(get_int(o, "template", "now", INT64_MIN / 2, INT64_MAX / 2, &t->now, err));
        t->has_now = true;
    }
    if (json_is(r->input, JSON_STRING) && strcmp(t->engine, "raw") != 0)
        return kn_fail(err, KN_E_FORMAT, "receipt: the input is a string, which only the raw "
                       "template (or text, ids) takes; template.engine is '%s'", t->engine);
    return KN_OK;
}

static enum kn_status parse(const struct json_value *doc, struct receipt *r, struct kn_err *err)
{
    const struct json_value *v, *o, *sub;
    int64_t n;
    if (!json_is(doc, JSON_OBJECT))
        return kn_fail(err, KN_E_FORMAT, "receipt: not a JSON object");
    static const char *const top[] = {"receipt", "kinetic", "model", "device", "input",
                                      "template", "prompt", "sampling", "output", "signature",
                                      NULL};
    TRY(only(doc, "", top, err));
    TRY(get_int(doc, "", "receipt", 0, INT32_MAX, &r->format, err));
    enum json_style style;
    if (!receipt_version_style(r->format, &style))
        return kn_fail(err, KN_E_UNSUPPORTED,
                       "receipt: version %lld is not supported (this Kinetic reads versions "
                       "%d and %d)", (long long)r->format, RECEIPT_VERSION_LEGACY,
                       RECEIPT_VERSION);

    TRY(need(doc, "", "kinetic", JSON_OBJECT, &o, err));
    static const char *const kin[] = {"version", "build", "numerics", NULL};
    TRY(only(o, "kinetic", kin, err));
    TRY(get_str(o, "kinetic", "version", r->version, sizeof r->version, err));
    TRY(get_str(o, "kinetic", "build", r->build, sizeof r->build, err));
    TRY(get_str(o, "kinetic", "numerics", r->numerics, sizeof r->numerics, err));

    TRY(need(doc, "", "model", JSON_OBJECT, &o, err));
    static const char *const model[] = {"file", "path", "size", "blake3", NULL};
    TRY(only(o, "model", model, err));
    TRY(get_strdup(o, "model", "file", &r->model_file, err));
    TRY(get_strdup(o, "model", "path", &r->model_path, err));
    TRY(get_int(o, "model", "size", 0, INT64_MAX, &n, err));
    r->model_size = (uint64_t)n;
    TRY(get_str(o, "model", "blake3", r->model_blake3, sizeof r->model_blake3, err));
    if (!is_hex(r->model_blake3, 64))
        return kn_fail(err, KN_E_FORMAT, "receipt: model.blake3 must be 64 lowercase hex digits");

    TRY(need(doc, "", "device", JSON_OBJECT, &o, err));
    static const char *const dev[] = {"class", "name", "settings", NULL};
    TRY(only(o, "device", dev, err));
    TRY(get_str(o, "device", "class", r->device_class, sizeof r->device_class, err));
    TRY(get_strdup(o, "device", "name", &r->device_name, err));
    TRY(need(o, "device", "settings", JSON_OBJECT, &sub, err));
    static const char *const settings[] = {"ctx-size", "cache-type", "gpu-layers", NULL};
    TRY(only(sub, "device.settings", settings, err));
    TRY(get_int(sub, "device.settings", "ctx-size", 1, MODEL_MAX_CTX, &r->ctx_size, err));
    TRY(get_str(sub, "device.settings", "cache-type", r->cache_type, sizeof r->cache_type, err));
    if (json_get(sub, "gpu-layers"))
        TRY(get_int(sub, "device.settings", "gpu-layers", 1, INT32_MAX, &r->gpu_layers, err));

    v = json_get(doc, "input");
    if (!v)
        return kn_fail(err, KN_E_FORMAT, "receipt: field input is missing");
    if (!json_is(v, JSON_STRING) && !json_is(v, JSON_ARRAY))
        return kn_fail(err, KN_E_FORMAT,
                       "receipt: field input must be the prompt text or an array of messages");
    r->input = json_clone(v);
    if (!r->input)
        return kn_fail(err, KN_E_NOMEM, "out of memory reading a receipt");

    if (json_get(doc, "template"))
        TRY(parse_template(doc, r, err));

    /* The context holds the prompt and every output token but the last (sampled from
     * the final position, never stored): n_prompt + n_output <= ctx-size + 1. */
    TRY(need(doc, "", "prompt", JSON_OBJECT, &o, err));
    static const char *const tokens[] = {"count", "blake3", "ids", NULL};
    TRY(only(o, "prompt", tokens, err));
    TRY(get_ids(o, "prompt", r->ctx_size - 1, &r->prompt_ids, &r->n_prompt, err));
    if (r->n_prompt == 0)
        return kn_fail(err, KN_E_FORMAT, "receipt: prompt.ids is empty");

    TRY(need(doc, "", "sampling", JSON_OBJECT, &o, err));
    /* The settings through the table (sample.h), strictly: the base keys must be there,
     * each is range-checked as run, chat and the server check it, nothing unknown. */
    static const char *const smp_extra[] = {"stop", "grammar", "response_format", NULL};
    struct sample_params *s = &r->sampling;
    struct kn_err serr = {0};
    sample_params_default(s);
    if (sample_params_json_read(o, s, SAMPLE_READ_BASE | SAMPLE_READ_STRICT, smp_extra, &serr) !=
            KN_OK ||
        sample_params_check(s, &serr) != KN_OK)
        return kn_fail(err, serr.status == KN_E_NOMEM ? KN_E_NOMEM : KN_E_FORMAT,
                       "receipt: sampling: %s", serr.msg);
    r->max_tokens = s->n_predict;
    TRY(need(o, "sampling", "stop", JSON_ARRAY, &sub, err));
    r->n_stop = (int64_t)json_len(sub);
    r->stop = kn_calloc((size_t)r->n_stop + 1, sizeof *r->stop, err);
    if (!r->stop)
        return KN_E_NOMEM;
    for (int64_t i = 0; i < r->n_stop; i++) {
        const char *str = json_str(json_at(sub, (size_t)i));
        if (!str) {
            r->n_stop = i;
            return kn_fail(err, KN_E_FORMAT, "receipt: sampling.stop[%lld] must be a string",
                           (long long)i);
        }
        r->stop[i] = kn_strdup(str, err);
        if (!r->stop[i]) {
            r->n_stop = i;
            return KN_E_NOMEM;
        }
    }
    /* grammar: the GBNF text (null or absent: none); response_format: an object (null or
     * absent: none). Whether they agree is checked by verify-receipt. */
    v = json_get(o, "grammar");
    if (v && !json_is(v, JSON_NULL)) {
        TRY(get_strdup(o, "sampling", "grammar", &r->grammar, err));
        if (strlen(r->grammar) != v->u.string.len)
            return kn_fail(err, KN_E_FORMAT, "receipt: field sampling.grammar holds a NUL");
    }
    v = json_get(o, "response_format");
    if (v && !json_is(v, JSON_NULL)) {
        if (!json_is(v, JSON_OBJECT))
            return kn_fail(err, KN_E_FORMAT,
                           "receipt: field sampling.response_format must be an object or null");
        r->response_format = json_clone(v);
        if (!r->response_format)
            return kn_fail(err, KN_E_NOMEM, "out of memory reading a receipt");
    }

    TRY(need(doc, "", "output", JSON_OBJECT, &o, err));
    static const char *const out[] = {"finish", "text", "think", "tokens", NULL};
    TRY(only(o, "output", out, err));
    TRY(get_str(o, "output", "finish", r->finish, sizeof r->finish, err));
    if (strcmp(r->finish, "stop") != 0 && strcmp(r->finish, "length") != 0)
        return kn_fail(err, KN_E_FORMAT, "receipt: output.finish must be \"stop\" or \"length\"");
    TRY(get_strdup(o, "output", "text", &r->text, err));
    r->text_len = json_get(o, "text")->u.string.len;
    if (json_get(o, "think")) {
        TRY(need(o, "output", "think", JSON_OBJECT, &sub, err));
        static const char *const think[] = {"open", "close", "inside", NULL};
        TRY(only(sub, "output.think", think, err));
        TRY(get_str(sub, "output.think", "open", r->think.open, TEXT_MAX_MARKER + 1, err));
        TRY(get_str(sub, "output.think", "close", r->think.close, TEXT_MAX_MARKER + 1, err));
        if (!r->think.open[0] || !r->think.close[0])
            return kn_fail(err, KN_E_FORMAT, "receipt: output.think's markers must not be empty");
        TRY(get_bool(sub, "output.think", "inside", &r->think.inside, err));
        r->think.present = true;
    }
    TRY(need(o, "output", "tokens", JSON_OBJECT, &sub, err));
    TRY(only(sub, "output.tokens", tokens, err));
    TRY(get_ids(sub, "output.tokens", r->ctx_size + 1 - r->n_prompt, &r->output_ids,
                &r->n_output, err));

    v = json_get(doc, "signature");
    if (v) {
        TRY(need(doc, "", "signature", JSON_OBJECT, &o, err));
        static const char *const sig[] = {"public_key", "ed25519", NULL};
        TRY(only(o, "signature", sig, err));
        TRY(get_str(o, "signature", "public_key", r->public_key, sizeof r->public_key, err));
        TRY(get_str(o, "signature", "ed25519", r->signature, sizeof r->signature, err));
        if (!is_hex(r->public_key, RECEIPT_KEY_HEX))
            return kn_fail(err, KN_E_FORMAT,
                           "receipt: signature.public_key must be 64 lowercase hex digits");
        if (!is_hex(r->signature, RECEIPT_SIG_HEX))
            return kn_fail(err, KN_E_FORMAT,
                           "receipt: signature.ed25519 must be 128 lowercase hex digits");
        r->has_signature = true;
    }
    return check_exact_ints(r, KN_E_FORMAT, err);
}

enum kn_status receipt_from_json(const struct json_value *doc, struct receipt *r,
                                 struct kn_err *err)
{
    memset(r, 0, sizeof *r);
    enum kn_status st = parse(doc, r, err);
    if (st != KN_OK)
        receipt_free(r);
    return st;
}

enum kn_status receipt_read(const char *path, struct receipt *r, struct kn_err *err)
{
    memset(r, 0, sizeof *r);
    struct json_limits lim = RECEIPT_JSON_LIMITS;
    struct json_value *doc;
    enum kn_status st = json_parse_file(path, &lim, &doc, err);
    if (st != KN_OK)
        return st;
    st = receipt_from_json(doc, r, err);
    json_free(doc);
    return st;
}

static enum kn_status check_tokens(const struct json_value *o, const char *path,
                                   const int32_t *ids, int64_t n, struct kn_err *err)
{
    int64_t count;
    TRY(get_int(o, path, "count", 0, INT64_MAX, &count, err));
    if (count != n)
        return kn_fail(err, KN_E_MISMATCH, "%s.count is %lld but %s.ids holds %lld tokens", path,
                       (long long)count, path, (long long)n);
    char want[65], hex[65];
    TRY(get_str(o, path, "blake3", want, sizeof want, err));
    receipt_tokens_blake3(ids, n, hex);
    if (strcmp(want, hex) != 0)
        return kn_fail(err, KN_E_MISMATCH, "%s.blake3 is %.16s but the ids hash to %.16s", path,
                       want, hex);
    return KN_OK;
}

enum kn_status receipt_check_hashes(const struct json_value *doc, const struct receipt *r,
                                    struct kn_err *err)
{
    TRY(check_tokens(json_get(doc, "prompt"), "prompt", r->prompt_ids, r->n_prompt, err));
    return check_tokens(json_get(json_get(doc, "output"), "tokens"), "output.tokens",
                        r->output_ids, r->n_output, err);
}

/* ================================================================ signing */

enum kn_status receipt_key_load(const char *path, struct receipt_key *key, struct kn_err *err)
{
    if (sodium_init() < 0)
        return kn_fail(err, KN_E_INTERNAL, "libsodium could not be initialised");
    char *buf;
    size_t len;
    enum kn_status st = kn_read_file(path, 4096, &buf, &len, err);
    if (st != KN_OK) {
        if (st == KN_E_LIMIT)
            return kn_fail(err, KN_E_ARG,
                           "%s: not an Ed25519 key: a key file holds 32 bytes or 64 hex digits, "
                           "and this one is larger than 4096 bytes",
                           path);
        return st;
    }
    unsigned char seed[32];
    bool ok = false;
    if (len == 32) {
        memcpy(seed, buf, 32);
        ok = true;
    } else {
        /* 64 hex digits, whitespace around them allowed */
        size_t a = 0, b = len;
        while (a < b && (buf[a] == ' ' || buf[a] == '\n' || buf[a] == '\r' || buf[a] == '\t'))
            a++;
        while (b > a &&
               (buf[b - 1] == ' ' || buf[b - 1] == '\n' || buf[b - 1] == '\r' || buf[b - 1] == '\t'))
            b--;
        size_t got = 0;
        const char *end = NULL;
        ok = b - a == 64 &&
             sodium_hex2bin(seed, 32, buf + a, 64, NULL, &got, &end) == 0 && got == 32 &&
             end == buf + b;
    }
    sodium_memzero(buf, len);
    free(buf);
    if (!ok) {
        /* Never suggest overwriting the file that was given: it may be anything. */
        sodium_memzero(seed, sizeof seed);
        return kn_fail(err, KN_E_ARG,
                       "%s: not an Ed25519 key: the file must hold the 32-byte secret as 32 raw "
                       "bytes or 64 hex digits (make a new key file with: openssl rand -hex 32 > "
                       "receipt.key)",
                       path);
    }
    crypto_sign_seed_keypair(key->pk, key->sk, seed);
    sodium_memzero(seed, sizeof seed);
    return KN_OK;
}

void receipt_key_wipe(struct receipt_key *key)
{
    sodium_memzero(key, sizeof *key);
}

enum kn_status receipt_sign(struct receipt *r, const struct receipt_key *key, struct kn_err *err)
{
    char *msg;
    size_t len;
    TRY(receipt_signed_bytes(r, &msg, &len, err));
    unsigned char sig[crypto_sign_BYTES];
    crypto_sign_detached(sig, NULL, (const unsigned char *)msg, len, key->sk);
    free(msg);
    sodium_bin2hex(r->public_key, sizeof r->public_key, key->pk, sizeof key->pk);
    sodium_bin2hex(r->signature, sizeof r->signature, sig, sizeof sig);
    r->has_signature = true;
    return KN_OK;
}

enum receipt_sig_state receipt_check_signature(const struct json_value *doc,
                                               const struct receipt *r)
{
    if (!r->has_signature)
        return RECEIPT_SIG_ABSENT;
    if (sodium_init() < 0)
        return RECEIPT_SIG_INVALID;
    enum json_style style;
    if (!receipt_version_style(r->format, &style))
        return RECEIPT_SIG_INVALID;
    struct json_value *copy = json_clone(doc);
    if (!copy)
        return RECEIPT_SIG_INVALID;
    json_free(json_object_take(copy, "signature"));
    char *msg;
    size_t len;
    struct kn_err err;
    /* Version 2 on: the bytes any JCS library rebuilds from the parsed values. */
    enum kn_status st = json_write(copy, style, &msg, &len, &err);
    json_free(copy);
    if (st != KN_OK)
        return RECEIPT_SIG_INVALID;
    unsigned char pk[32], sig[64];
    size_t got_pk = 0, got_sig = 0;
    bool ok = sodium_hex2bin(pk, 32, r->public_key, 64, NULL, &got_pk, NULL) == 0 && got_pk == 32 &&
              sodium_hex2bin(sig, 64, r->signature, 128, NULL, &got_sig, NULL) == 0 &&
              got_sig == 64 &&
              crypto_sign_verify_detached(sig, (const unsigned char *)msg, len, pk) == 0;
    free(msg);
    return ok ? RECEIPT_SIG_VALID : RECEIPT_SIG_INVALID;
}
