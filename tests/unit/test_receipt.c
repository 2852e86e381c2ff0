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
    r->text = strdup("1. The Nile River \xc3\xa9");
    static const int32_t out[] = {25, 22, 440, 124900};
    r->n_output = 4;
    r->output_ids = malloc(sizeof out);
    memcpy(r->output_ids, out, sizeof out);
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
    CHECK(receipt_signed_bytes(&r, &bytes, &len, &err) == KN_OK);
    CHECKF(strstr(bytes, "\"temperature\":0.8,\"top_k\":50,\"top_p\":0.95,\"min_p\":0.05,"
                         "\"repeat_penalty\":1.1,\"presence_penalty\":0.0") != NULL,
           "%s", bytes);
    CHECK(strstr(bytes, "\"max_tokens\":null") != NULL);
    CHECK(strncmp(bytes, "{\"receipt\":1,\"kinetic\":{\"version\":\"0.1.0\"", 40) == 0);
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
    CHECK_STR(back.text, r.text);
    CHECK_STR(back.stop[0], "\n\n");

    /* Any changed field breaks the signature. */
    struct json_value *s = (struct json_value *)json_get(doc, "sampling");
    struct json_value *seed = (struct json_value *)json_get(s, "seed");
    seed->u.number.i = 43;
    free(seed->u.number.text);
    seed->u.number.text = strdup("43");
    CHECK(receipt_check_signature(doc, &back) == RECEIPT_SIG_INVALID);
    seed->u.number.i = 42;
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
    CHECK(receipt_signed_bytes(&r, &plain, &plain_len, &err) == KN_OK);
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
    CHECK(receipt_signed_bytes(&r, &bytes, &len, &err) == KN_OK);
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

int main(void)
{
    test_token_hash();
    test_roundtrip_and_sign();
    test_strict();
    test_grammar_fields();
    test_response_format();
    CHECK_DONE();
}
