/* test_receipt.c: receipts round-trip through their JSON form, sign and verify, and any
 * change to a signed field breaks the signature. */
#include "check.h"
#include "grammar/grammar.h"
#include "receipt/receipt.h"

#include <sodium.h>
#include <fcntl.h>
#include <unistd.h>

static void fill(struct receipt *r)
{
    struct kn_err err;
    memset(r, 0, sizeof *r);
    strcpy(r->version, "0.1.0");
    strcpy(r->build, "378534cb64f30a15");
    strcpy(r->numerics, "canonical-1");
    r->model_file = strdup("m.gguf");
    r->model_path = strdup("models/m.gguf");
    r->model_size = 1099627808;
    strcpy(r->model_blake3, "f4240740be2392a21da1668fab289a441684b47db70bd96d8f863b576f44bfb4");
    strcpy(r->device_class, "cpu-x86_64-avx2");
    r->device_name = strdup("the CPU");
    r->ctx_size = 32768;
    strcpy(r->cache_type, "f32");
    struct json_value *msgs = json_new_array(), *m = json_new_object();
    CHECK(json_object_set(m, "role", json_new_string("user"), &err) == KN_OK);
    CHECK(json_object_set(m, "content", json_new_string("Name three rivers."), &err) == KN_OK);
    CHECK(json_array_push(msgs, m, &err) == KN_OK);
    r->input = msgs;
    static const int32_t prompt[] = {124894, 124899, 5922, 207, 2617};
    r->n_prompt = 5;
    r->prompt_ids = malloc(sizeof prompt);
    memcpy(r->prompt_ids, prompt, sizeof prompt);
    sample_params_default(&r->sampling);
    r->sampling.seed = 42;
    r->max_tokens = -1;
    r->n_stop = 1;
    r->stop = calloc(2, sizeof *r->stop);
    r->stop[0] = strdup("\n\n");
    strcpy(r->finish, "stop");
    /* Output text may hold a NUL (a model can emit one): it is kept, not cut. */
    static const char text[] = "1. The Nile River \xc3\xa9\0and after the NUL";
    r->text = malloc(sizeof text);
    memcpy(r->text, text, sizeof text);
    r->text_len = sizeof text - 1;
    static const int32_t out[] = {25, 22, 440, 124900};
    r->n_output = 4;
    r->output_ids = malloc(sizeof out);
    memcpy(r->output_ids, out, sizeof out);
}

/* The receipt as written (receipt_to_json, no signature) in the compact form, which keeps
 * the field order: what the field-layout checks read. */
static enum kn_status written(const struct receipt *r, char **out, size_t *len,
                              struct kn_err *err)
{
    struct json_value *doc;
    enum kn_status st = receipt_to_json(r, false, &doc, err);
    if (st != KN_OK)
        return st;
    st = json_write(doc, JSON_COMPACT, out, len, err);
    json_free(doc);
    return st;
}

/* The known hash of token ids: BLAKE3 of their little-endian bytes. */
static void test_token_hash(void)
{
    char hex[65];
    receipt_tokens_blake3(NULL, 0, hex);
    CHECK_STR(hex, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
}

static void test_roundtrip_and_sign(void)
{
    struct kn_err err = {0};
    struct receipt r;
    fill(&r);
    char *bytes;
    size_t len;
    CHECK(written(&r, &bytes, &len, &err) == KN_OK);
    CHECKF(strstr(bytes, "\"temperature\":0.8,\"top_k\":50,\"top_p\":0.95,\"min_p\":0.05,"
                         "\"repeat_penalty\":1.1,\"presence_penalty\":0.0") != NULL,
           "%s", bytes);
    CHECK(strstr(bytes, "\"max_tokens\":null") != NULL);
    CHECK(strncmp(bytes, "{\"receipt\":2,\"kinetic\":{\"version\":\"0.1.0\"", 40) == 0);
    free(bytes);

    char keypath[] = "/tmp/kn_receipt_key_XXXXXX";
    int fd = mkstemp(keypath);
    CHECK(write(fd, "  000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n", 67) == 67);
    close(fd);
    struct receipt_key key;
    CHECK(receipt_key_load(keypath, &key, &err) == KN_OK);
    CHECK(receipt_sign(&r, &key, &err) == KN_OK);
    receipt_key_wipe(&key);
    CHECK(r.has_signature && strlen(r.signature) == 128 && strlen(r.public_key) == 64);

    char path[] = "/tmp/kn_receipt_XXXXXX";
    close(mkstemp(path));
    CHECK(receipt_write(&r, path, &err) == KN_OK);
    struct json_value *doc;
    CHECK(json_parse_file(path, NULL, &doc, &err) == KN_OK);
    struct receipt back;
    CHECKF(receipt_from_json(doc, &back, &err) == KN_OK, "%s", err.msg);
    CHECK(receipt_check_hashes(doc, &back, &err) == KN_OK);
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_VALID);
    CHECK(back.sampling.temperature == 0.8f && back.sampling.seed == 42 && back.max_tokens == -1);
    CHECK(back.n_output == 4 && back.output_ids[3] == 124900);
    CHECK(back.text_len == r.text_len && memcmp(back.text, r.text, r.text_len) == 0);
    CHECK_STR(back.stop[0], "\n\n");

    /* Any changed field breaks the signature. */
    struct json_value *s = (struct json_value *)json_get(doc, "sampling");
    struct json_value *seed = (struct json_value *)json_get(s, "seed");
    seed->u.number.i = 43;
    seed->u.number.d = 43;
    free(seed->u.number.text);
    seed->u.number.text = strdup("43");
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_INVALID);
    seed->u.number.i = 42;
    seed->u.number.d = 42;
    free(seed->u.number.text);
    seed->u.number.text = strdup("42");
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_VALID);
    struct json_value *out = (struct json_value *)json_get(doc, "output");
    struct json_value *text = (struct json_value *)json_get(out, "text");
    text->u.string.s[0] = '2';
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_INVALID);
    text->u.string.s[0] = '1';
    back.public_key[0] = back.public_key[0] == 'a' ? 'b' : 'a';
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_INVALID);

    /* Token hashes are checked against the ids. */
    back.output_ids[0] = 26;
    CHECK(receipt_check_hashes(doc, &back, &err) == KN_E_MISMATCH);
    CHECK(strstr(err.msg, "output.tokens.blake3") != NULL);

    receipt_free(&back);
    json_free(doc);
    receipt_free(&r);
    unlink(path);

    /* Bad keys. */
    fd = open(keypath, O_WRONLY | O_TRUNC);
    CHECK(write(fd, "abc\n", 4) == 4);
    close(fd);
    CHECK(receipt_key_load(keypath, &key, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "64 hex digits") != NULL);
    fd = open(keypath, O_WRONLY | O_TRUNC);
    CHECK(write(fd, "0123456789abcdef0123456789abcdef", 32) == 32); /* 32 raw bytes */
    close(fd);
    CHECK(receipt_key_load(keypath, &key, &err) == KN_OK);
    unlink(keypath);
}

static void test_strict(void)
{
    struct kn_err err;
    struct receipt r, back;
    fill(&r);
    struct json_value *doc;
    CHECK(receipt_to_json(&r, true, &doc, &err) == KN_OK);
    CHECK(receipt_from_json(doc, &back, &err) == KN_OK);
    receipt_free(&back);
    CHECK(json_object_set(doc, "extra", json_new_int(1), &err) == KN_OK);
    CHECK(receipt_from_json(doc, &back, &err) == KN_E_FORMAT);
    CHECK_STR(err.msg, "receipt: unknown field extra");
    json_free(json_object_take(doc, "extra"));
    json_free(json_object_take((struct json_value *)json_get(doc, "model"), "blake3"));
    CHECK(receipt_from_json(doc, &back, &err) == KN_E_FORMAT);
    CHECK_STR(err.msg, "receipt: field model.blake3 is missing");
    json_free(doc);
    receipt_free(&r);
}

/* grammar and response_format: written only when used (receipts without them keep their
 * bytes), read back, null accepted, covered by the signature. */
static void test_grammar_fields(void)
{
    struct kn_err err = {0};
    struct receipt r, back;
    fill(&r);
    char *plain;
    size_t plain_len;
    CHECK(written(&r, &plain, &plain_len, &err) == KN_OK);
    CHECK(strstr(plain, "grammar") == NULL && strstr(plain, "response_format") == NULL);
    free(plain);

    const char *rf_text = "{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
                          "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                          "\"required\":[\"a\"]}}}";
    CHECK(json_parse(rf_text, strlen(rf_text), NULL, &r.response_format, &err) == KN_OK);
    CHECK(grammar_from_response_format(r.response_format, &r.grammar, &err) == KN_OK);
    CHECK(r.grammar && strstr(r.grammar, "root") != NULL);
    char *bytes;
    size_t len;
    CHECK(written(&r, &bytes, &len, &err) == KN_OK);
    CHECKF(strstr(bytes, "\"stop\":[\"\\n\\n\"],\"grammar\":\"") != NULL, "%s", bytes);
    CHECK(strstr(bytes, ",\"response_format\":{\"type\":\"json_schema\"") != NULL);
    free(bytes);

    struct receipt_key key;
    unsigned char seed[32] = {7};
    crypto_sign_seed_keypair(key.pk, key.sk, seed);
    CHECK(receipt_sign(&r, &key, &err) == KN_OK);
    struct json_value *doc;
    CHECK(receipt_to_json(&r, true, &doc, &err) == KN_OK);
    CHECKF(receipt_from_json(doc, &back, &err) == KN_OK, "%s", err.msg);
    CHECK_STR(back.grammar, r.grammar);
    CHECK(json_is(json_get(back.response_format, "json_schema"), JSON_OBJECT));
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_VALID);
    /* Changing the grammar or a stop string breaks the signature. */
    struct json_value *smp = (struct json_value *)json_get(doc, "sampling");
    struct json_value *g = (struct json_value *)json_get(smp, "grammar");
    char saved = g->u.string.s[0];
    g->u.string.s[0] = saved == 'x' ? 'y' : 'x';
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_INVALID);
    g->u.string.s[0] = saved;
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_VALID);
    struct json_value *stop0 = (struct json_value *)json_at(json_get(smp, "stop"), 0);
    stop0->u.string.s[0] = 'X';
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_INVALID);
    stop0->u.string.s[0] = '\n';
    struct json_value *rf = (struct json_value *)json_get(smp, "response_format");
    struct json_value *type = (struct json_value *)json_get(rf, "type");
    type->u.string.s[5] = 'X';
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_INVALID);
    type->u.string.s[5] = 's';
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_VALID);
    receipt_free(&back);

    /* null means none; other types are malformed. */
    json_free(json_object_take(smp, "grammar"));
    json_free(json_object_take(smp, "response_format"));
    CHECK(json_object_set(smp, "grammar", json_new_null(), &err) == KN_OK);
    CHECK(json_object_set(smp, "response_format", json_new_null(), &err) == KN_OK);
    CHECKF(receipt_from_json(doc, &back, &err) == KN_OK, "%s", err.msg);
    CHECK(back.grammar == NULL && back.response_format == NULL);
    receipt_free(&back);
    json_free(json_object_take(smp, "grammar"));
    CHECK(json_object_set(smp, "grammar", json_new_int(3), &err) == KN_OK);
    CHECK(receipt_from_json(doc, &back, &err) == KN_E_FORMAT);
    CHECK_STR(err.msg, "receipt: field sampling.grammar must be a string");
    json_free(json_object_take(smp, "grammar"));
    json_free(json_object_take(smp, "response_format"));
    CHECK(json_object_set(smp, "response_format", json_new_string("json"), &err) == KN_OK);
    CHECK(receipt_from_json(doc, &back, &err) == KN_E_FORMAT);
    CHECK(strstr(err.msg, "sampling.response_format must be an object") != NULL);
    json_free(doc);
    receipt_free(&r);
}

/* response_format to GBNF: text gives none, json_object the JSON grammar, json_schema the
 * schema's conversion; mistakes are named. */
static void test_response_format(void)
{
    struct kn_err err = {0};
    struct json_value *v;
    char *g;
    const char *text = "{\"type\":\"text\"}";
    CHECK(json_parse(text, strlen(text), NULL, &v, &err) == KN_OK);
    CHECK(grammar_from_response_format(v, &g, &err) == KN_OK && g == NULL);
    json_free(v);
    CHECK(grammar_from_response_format(NULL, &g, &err) == KN_OK && g == NULL);
    const char *obj = "{\"type\":\"json_object\"}";
    CHECK(json_parse(obj, strlen(obj), NULL, &v, &err) == KN_OK);
    CHECK(grammar_from_response_format(v, &g, &err) == KN_OK);
    CHECK_STR(g, grammar_json_object_gbnf());
    free(g);
    json_free(v);
    const char *bad = "{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"string\","
                      "\"pattern\":\"a+\"}}}";
    CHECK(json_parse(bad, strlen(bad), NULL, &v, &err) == KN_OK);
    CHECK(grammar_from_response_format(v, &g, &err) != KN_OK);
    CHECKF(strstr(err.msg, "JSON schema") && strstr(err.msg, "pattern"), "%s", err.msg);
    json_free(v);
    const char *missing = "{\"type\":\"json_schema\"}";
    CHECK(json_parse(missing, strlen(missing), NULL, &v, &err) == KN_OK);
    CHECK(grammar_from_response_format(v, &g, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "json_schema") != NULL);
    json_free(v);
    const char *odd = "{\"type\":\"yaml\"}";
    CHECK(json_parse(odd, strlen(odd), NULL, &v, &err) == KN_OK);
    CHECK(grammar_from_response_format(v, &g, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "unknown type \"yaml\"") != NULL);
    json_free(v);
}

/* Reads text as a receipt; returns the status and leaves the message in err. */
static enum kn_status read_text(const char *text, struct receipt *r, struct kn_err *err)
{
    struct json_value *doc;
    struct json_limits lim = RECEIPT_JSON_LIMITS;
    enum kn_status st = json_parse(text, strlen(text), &lim, &doc, err);
    if (st != KN_OK)
        return st;
    st = receipt_from_json(doc, r, err);
    json_free(doc);
    return st;
}

/* Edits a receipt's compact JSON: replaces the first `from` with `to`. */
static char *edit(const char *text, const char *from, const char *to)
{
    const char *at = strstr(text, from);
    CHECKF(at != NULL, "%s not in the receipt", from);
    if (!at)
        return strdup(text);
    size_t a = (size_t)(at - text), n = strlen(text) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)a, text, to, at + strlen(from));
    return out;
}

/* The template record and the reasoning split: written only when recorded, read back
 * field for field to the same canonical bytes, each combination a renderer cannot make
 * refused; ids beyond the context and documents beyond the value limit are refused. */
static void test_template_fields(void)
{
    struct kn_err err;
    struct receipt r, back;
    fill(&r);
    char *plain;
    size_t plain_len;
    CHECK(written(&r, &plain, &plain_len, &err) == KN_OK);
    CHECK(strstr(plain, "\"template\"") == NULL && strstr(plain, "\"think\"") == NULL);
    free(plain);

    struct receipt_template *t = &r.tmpl;
    t->present = true;
    strcpy(t->engine, "jinja");
    strcpy(t->source, "file");
    strcpy(t->blake3, "ab00000000000000000000000000000000000000000000000000000000000000");
    t->text = strdup("{{ messages[0].content }}{{ strftime_now('%Y') }}");
    t->add_generation_prompt = true;
    const char *kw = "{\"enable_thinking\": false}", *tools = "[{\"type\": \"function\"}]";
    CHECK(json_parse(kw, strlen(kw), NULL, &t->kwargs, &err) == KN_OK);
    CHECK(json_parse(tools, strlen(tools), NULL, &t->tools, &err) == KN_OK);
    t->has_now = true;
    t->now = 1764595995;
    r.think.present = true;
    strcpy(r.think.open, "<think>");
    strcpy(r.think.close, "</think>");
    r.think.inside = true;
    char *a, *b;
    size_t na, nb;
    CHECK(written(&r, &a, &na, &err) == KN_OK);
    CHECKF(strstr(a, "\"input\":[{\"role\":\"user\",\"content\":\"Name three rivers.\"}],"
                     "\"template\":{\"engine\":\"jinja\",\"source\":\"file\",\"blake3\":\"ab00") != NULL,
           "%s", a);
    CHECK(strstr(a, "\"add_generation_prompt\":true,\"kwargs\":{\"enable_thinking\":false},"
                    "\"tools\":[{\"type\":\"function\"}],\"now\":1764595995,\"text\":") != NULL);
    CHECK(strstr(a, "\"think\":{\"open\":\"<think>\",\"close\":\"</think>\",\"inside\":true}") != NULL);
    CHECKF(read_text(a, &back, &err) == KN_OK, "%s", err.msg);
    CHECK(back.tmpl.present && back.tmpl.has_now && back.tmpl.now == 1764595995 &&
          back.think.present && back.think.inside);
    CHECK(written(&back, &b, &nb, &err) == KN_OK);
    CHECK(na == nb && memcmp(a, b, na) == 0);
    free(b);
    receipt_free(&back);

    /* Combinations no renderer makes, and ids that do not fit the context. */
    static const struct {
        const char *from, *to, *msg;
    } bad[] = {
        {"\"source\":\"file\"", "\"source\":\"model\"", "template.text is only for a template file"},
        {"\"source\":\"file\"", "\"source\":\"forced\"", "does not go with template.engine"},
        {"\"source\":\"file\"", "\"source\":\"disk\"", "template.source must be"},
        {"\"engine\":\"jinja\",\"source\":\"file\"", "\"engine\":\"chatml\",\"source\":\"model\"",
         "template.blake3 is only for a jinja template"},
        {"\"engine\":\"jinja\"", "\"engine\":\"vicuna\"", "template.engine 'vicuna' is not one"},
        {"\"blake3\":\"ab00", "\"blake3\":\"AB00", "template.blake3 must be 64 lowercase hex"},
        {"\"now\":1764595995", "\"now\":\"today\"", "template.now must be a number"},
        {"\"kwargs\":{\"enable_thinking\":false}", "\"kwargs\":[]", "template.kwargs must be an object"},
        {"\"tools\":[{\"type\":\"function\"}]", "\"tools\":{}", "template.tools must be an array"},
        {"\"add_generation_prompt\":true", "\"add_generation_prompt\":1", "add_generation_prompt must be a bool"},
        {"\"add_generation_prompt\":true,", "", "field template.add_generation_prompt is missing"},
        {"\"inside\":true", "\"inside\":true,\"x\":1", "unknown field output.think.x"},
        {"\"open\":\"<think>\"", "\"open\":\"\"", "markers must not be empty"},
        {"\"ctx-size\":32768", "\"ctx-size\":6", "output.tokens.ids holds 4 tokens, more than"},
        {"\"ctx-size\":32768", "\"ctx-size\":5", "prompt.ids holds 5 tokens, more than"},
        {"\"ctx-size\":32768", "\"ctx-size\":1048577", "ctx-size must be an integer from 1 to 1048576"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *x = edit(a, bad[i].from, bad[i].to);
        CHECKF(read_text(x, &back, &err) == KN_E_FORMAT, "%s", bad[i].msg);
        CHECKF(strstr(err.msg, bad[i].msg) != NULL, "%s: %s", bad[i].msg, err.msg);
        free(x);
    }
    /* ctx-size 8 holds 5 prompt and 4 output tokens: the last is never stored. */
    char *x = edit(a, "\"ctx-size\":32768", "\"ctx-size\":8");
    CHECKF(read_text(x, &back, &err) == KN_OK, "%s", err.msg);
    receipt_free(&back);
    free(x);
    /* A string input only with raw, text or ids. */
    x = edit(a, "\"input\":[{\"role\":\"user\",\"content\":\"Name three rivers.\"}]", "\"input\":\"hi\"");
    CHECK(read_text(x, &back, &err) == KN_E_FORMAT && strstr(err.msg, "only the raw") != NULL);
    free(x);
    free(a);

    /* More values than a context's ids: refused while parsing. */
    size_t n = RECEIPT_MAX_VALUES + 10, len = 0;
    char *big = malloc(2 * n + 4);
    big[len++] = '[';
    for (size_t i = 0; i < n; i++) {
        big[len++] = '0';
        big[len++] = i + 1 < n ? ',' : ']';
    }
    struct json_value *doc;
    struct json_limits lim = RECEIPT_JSON_LIMITS;
    CHECK(json_parse(big, len, &lim, &doc, &err) == KN_E_LIMIT);
    CHECKF(strstr(err.msg, "values in the document") != NULL, "%s", err.msg);
    free(big);
    receipt_free(&r);
}

/* Sets number v to the value text reads as (the reader's fields: text, is_int, i, d). */
static void set_number(struct json_value *v, const char *text)
{
    struct json_value *n;
    struct kn_err err;
    CHECK(json_parse(text, strlen(text), NULL, &n, &err) == KN_OK && json_is(n, JSON_NUMBER));
    free(v->u.number.text);
    v->u.number = n->u.number;
    n->u.number.text = NULL;
    json_free(n);
}

/* Version 2 is signed over RFC 8785 (JCS): members sorted, numbers as ECMAScript writes
 * them, so a parsed receipt written again by any JSON library (which may write 0.0 as 0)
 * keeps its signature; version 1 keeps its legacy compact form, where 0 and 0.0 differ. The
 * version is signed, so a receipt cannot be moved to the other form. */
static void test_jcs_signing(void)
{
    struct kn_err err = {0};
    struct receipt r, back;
    fill(&r);
    char *bytes;
    size_t len;
    CHECK(receipt_signed_bytes(&r, &bytes, &len, &err) == KN_OK);
    static const char head[] =
        "{\"device\":{\"class\":\"cpu-x86_64-avx2\",\"name\":\"the CPU\","
        "\"settings\":{\"cache-type\":\"f32\",\"ctx-size\":32768}},"
        "\"input\":[{\"content\":\"Name three rivers.\",\"role\":\"user\"}],"
        "\"kinetic\":{\"build\":\"378534cb64f30a15\",\"numerics\":\"canonical-1\","
        "\"version\":\"0.1.0\"},\"model\":";
    CHECKF(strncmp(bytes, head, sizeof head - 1) == 0, "%s", bytes);
    CHECKF(strstr(bytes, "\"receipt\":2,\"sampling\":{\"frequency_penalty\":0,\"max_tokens\":null,"
                         "\"min_p\":0.05,\"presence_penalty\":0,\"repeat_last_n\":64,"
                         "\"repeat_penalty\":1.1,\"seed\":42,\"stop\":[\"\\n\\n\"],"
                         "\"temperature\":0.8,\"top_k\":50,\"top_p\":0.95}") != NULL, "%s", bytes);
    free(bytes);

    struct receipt_key key;
    unsigned char seed[32] = {9};
    crypto_sign_seed_keypair(key.pk, key.sk, seed);
    CHECK(receipt_sign(&r, &key, &err) == KN_OK);
    struct json_value *doc;
    CHECK(receipt_to_json(&r, true, &doc, &err) == KN_OK);
    CHECKF(receipt_from_json(doc, &back, &err) == KN_OK, "%s", err.msg);
    CHECK(back.format == RECEIPT_VERSION);
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_VALID);
    /* The same values in another spelling, as JavaScript or jq write them: still valid. */
    struct json_value *smp = (struct json_value *)json_get(doc, "sampling");
    set_number((struct json_value *)json_get(smp, "presence_penalty"), "0");
    set_number((struct json_value *)json_get(smp, "temperature"), "8e-1");
    set_number((struct json_value *)json_get(smp, "seed"), "42.0");
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_VALID);
    /* ... and read: a float setting given as an integer, an integer one as 42.0. */
    receipt_free(&back);
    CHECKF(receipt_from_json(doc, &back, &err) == KN_OK, "%s", err.msg);
    CHECK(back.sampling.presence_penalty == 0.0f && back.sampling.temperature == 0.8f &&
          back.sampling.seed == 42);
    /* Another value is not. */
    set_number((struct json_value *)json_get(smp, "temperature"), "0.81");
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_INVALID);
    set_number((struct json_value *)json_get(smp, "temperature"), "0.8");
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_VALID);
    /* The version is signed: read as version 1, the bytes are the legacy ones. */
    set_number((struct json_value *)json_get(doc, "receipt"), "1");
    receipt_free(&back);
    CHECKF(receipt_from_json(doc, &back, &err) == KN_OK, "%s", err.msg);
    CHECK(back.format == RECEIPT_VERSION_LEGACY);
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_INVALID);
    receipt_free(&back);
    json_free(doc);

    /* Version 1: signed over the legacy form, which keeps the field order and tells 0.0
     * from 0 (why a JavaScript round trip broke it). */
    r.format = RECEIPT_VERSION_LEGACY;
    CHECK(receipt_signed_bytes(&r, &bytes, &len, &err) == KN_OK);
    CHECK(strncmp(bytes, "{\"receipt\":1,\"kinetic\":{\"version\":\"0.1.0\"", 40) == 0);
    CHECK(strstr(bytes, "\"presence_penalty\":0.0,") != NULL);
    free(bytes);
    CHECK(receipt_sign(&r, &key, &err) == KN_OK);
    CHECK(receipt_to_json(&r, true, &doc, &err) == KN_OK);
    CHECKF(receipt_from_json(doc, &back, &err) == KN_OK, "%s", err.msg);
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_VALID);
    smp = (struct json_value *)json_get(doc, "sampling");
    set_number((struct json_value *)json_get(smp, "presence_penalty"), "0");
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_INVALID);
    set_number((struct json_value *)json_get(smp, "presence_penalty"), "0.0");
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_VALID);
    receipt_free(&back);
    /* Versions other than 1 and 2 are refused. */
    set_number((struct json_value *)json_get(doc, "receipt"), "3");
    CHECK(receipt_from_json(doc, &back, &err) == KN_E_UNSUPPORTED);
    CHECK_STR(err.msg, "receipt: version 3 is not supported (this Kinetic reads versions 1 and 2)");
    json_free(doc);

    /* A seed beyond 2^53 would be signed as its nearest double (2^53 + 1 as 2^53, so the
     * signature would cover both): a receipt holding one is written as version 1, whose
     * form is exact for every int64, and a version-2 receipt holding one is refused, read or
     * written. 2^53 itself is exact. */
    r.format = 0;
    r.sampling.seed = ((uint64_t)1 << 53) + 1;
    CHECK(receipt_version_for(&r) == RECEIPT_VERSION_LEGACY);
    CHECK(receipt_sign(&r, &key, &err) == KN_OK);
    CHECK(receipt_to_json(&r, true, &doc, &err) == KN_OK);
    CHECKF(receipt_from_json(doc, &back, &err) == KN_OK, "%s", err.msg);
    CHECK(back.format == RECEIPT_VERSION_LEGACY && back.sampling.seed == ((uint64_t)1 << 53) + 1);
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_VALID);
    receipt_free(&back);
    set_number((struct json_value *)json_get(doc, "receipt"), "2");
    CHECK(receipt_from_json(doc, &back, &err) == KN_E_FORMAT);
    CHECK_STR(err.msg, "receipt: sampling.seed is 9007199254740993, beyond 2^53: a version-2 "
                       "receipt is signed over RFC 8785 JSON, whose numbers are doubles, which "
                       "cannot hold it exactly (Kinetic writes such a receipt as version 1)");
    json_free(doc);
    r.format = RECEIPT_VERSION;
    CHECK(receipt_to_json(&r, false, &doc, &err) == KN_E_ARG && doc == NULL);
    CHECK(strstr(err.msg, "sampling.seed is 9007199254740993, beyond 2^53") != NULL);
    r.format = 0;
    r.sampling.seed = (uint64_t)1 << 53;
    CHECK(receipt_version_for(&r) == RECEIPT_VERSION);
    r.sampling.seed = UINT64_C(9223372036854775807); /* the largest seed: version 1 */
    CHECK(receipt_version_for(&r) == RECEIPT_VERSION_LEGACY);
    receipt_key_wipe(&key);
    receipt_free(&r);
}

int main(void)
{
    test_token_hash();
    test_roundtrip_and_sign();
    test_strict();
    test_grammar_fields();
    test_response_format();
    test_template_fields();
    test_jcs_signing();
    CHECK_DONE();
}
