/* test_json.c: the strict JSON reader (valid and invalid documents in the spirit of
 * JSONTestSuite, limits, error positions), the canonical and pretty writers (exact bytes),
 * round trips, and the builder. */
#include "check.h"
#include "base/json.h"

#include <math.h>
#include <unistd.h>

/* Parses doc and returns its canonical compact form (static buffer), or NULL. */
static char out_buf[4096];
static const char *canon_n(const char *doc, size_t len)
{
    struct json_value *v;
    struct kn_err err;
    if (json_parse(doc, len, NULL, &v, &err) != KN_OK) {
        fprintf(stderr, "  parse failed: %s\n", err.msg);
        return NULL;
    }
    char *s;
    size_t n;
    if (json_write(v, JSON_COMPACT, &s, &n, &err) != KN_OK) {
        fprintf(stderr, "  write failed: %s\n", err.msg);
        json_free(v);
        return NULL;
    }
    snprintf(out_buf, sizeof out_buf, "%s", s);
    CHECK(n == strlen(s) || memchr(s, 0, n)); /* length is reported */
    free(s);
    json_free(v);
    return out_buf;
}
static const char *canon(const char *doc) { return canon_n(doc, strlen(doc)); }

struct valid_case {
    const char *in, *out;
};

static void test_valid(void)
{
    static const struct valid_case cases[] = {
        {"{\"a\":1}", "{\"a\":1}"},
        {" \t\r\n{ \"b\" : 1 , \"a\" : [ ] , \"c\" : { } }\n ", "{\"b\":1,\"a\":[],\"c\":{}}"},
        {"[1, 2.5, -0.0, 1e2, 1E-2, true, false, null, \"x\"]",
         "[1,2.5,-0.0,100.0,0.01,true,false,null,\"x\"]"},
        {"0", "0"}, {"-0", "0"}, {"0.1", "0.1"}, {"1.0", "1.0"}, {"0.8", "0.8"},
        {"0.95", "0.95"}, {"1.1", "1.1"}, {"100.0", "100.0"}, {"1e15", "1000000000000000.0"},
        {"1e16", "1e+16"}, {"0.0001", "0.0001"}, {"0.00001", "1e-05"}, {"1.5e-7", "1.5e-07"},
        {"123456789012345678901234567890", "1.2345678901234568e+29"},
        {"-9223372036854775808", "-9223372036854775808"},
        {"9223372036854775807", "9223372036854775807"},
        {"9223372036854775808", "9.223372036854776e+18"},
        {"5e-324", "5e-324"}, {"1e-400", "0.0"}, {"1.7976931348623157e308", "1.7976931348623157e+308"},
        {"0.1e1", "1.0"}, {"3.141592653589793", "3.141592653589793"}, {"-12.5E+3", "-12500.0"},
        {"\"\"", "\"\""}, {"true", "true"}, {"null", "null"}, {"[[[]]]", "[[[]]]"},
        {"\"\\u00e9\\ud83d\\ude00\\n\\t\\\"\\\\\\/\\u0001\\u001f\\u007f\\b\\f\\r\"",
         "\"\xc3\xa9\xf0\x9f\x98\x80\\n\\t\\\"\\\\/\\u0001\\u001f\x7f\\b\\f\\r\""},
        {"\"\\uD83D\\uDE00\"", "\"\xf0\x9f\x98\x80\""}, /* upper-case hex */
        {"\"\xe2\x82\xac \xf4\x8f\xbf\xbf \xef\xbf\xbf\"", "\"\xe2\x82\xac \xf4\x8f\xbf\xbf \xef\xbf\xbf\""},
        {"{\"\\u0061\":1,\"b\":2}", "{\"a\":1,\"b\":2}"},
        {"{\"a\":1,\"A\":2}", "{\"a\":1,\"A\":2}"},
        {"[\"\x7f\"]", "[\"\x7f\"]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = canon(cases[i].in);
        CHECKF(got && strcmp(got, cases[i].out) == 0, "case %zu: %s -> %s (want %s)", i,
               cases[i].in, got ? got : "(error)", cases[i].out);
    }
    /* \u0000 inside a string and a key keeps its length. */
    struct json_value *v;
    struct kn_err err;
    const char *doc = "{\"k\\u0000x\":\"a\\u0000b\"}";
    CHECK(json_parse(doc, strlen(doc), NULL, &v, &err) == KN_OK);
    CHECK_EQ_INT(v->u.object.items[0].key_len, 3);
    CHECK_EQ_INT(v->u.object.items[0].value->u.string.len, 3);
    char *s;
    CHECK(json_write(v, JSON_COMPACT, &s, NULL, &err) == KN_OK);
    CHECK_STR(s, "{\"k\\u0000x\":\"a\\u0000b\"}");
    free(s);
    json_free(v);
    /* Numbers keep their text and both values. */
    doc = "[12, -3.50, 1e400000000000000000000000000000000000000000000000000]";
    CHECK(json_parse(doc, strlen(doc), NULL, &v, &err) != KN_OK); /* too large */
    doc = "[12, -3.50, 123456789012345678901]";
    CHECK(json_parse(doc, strlen(doc), NULL, &v, &err) == KN_OK);
    int64_t i64;
    double d;
    CHECK(json_int(json_at(v, 0), &i64) && i64 == 12);
    CHECK(!json_int(json_at(v, 1), &i64) && json_double(json_at(v, 1), &d) && d == -3.5);
    CHECK_STR(json_at(v, 1)->u.number.text, "-3.50");
    CHECK(!json_int(json_at(v, 2), &i64));
    CHECK_STR(json_at(v, 2)->u.number.text, "123456789012345678901");
    json_free(v);
}

struct invalid_case {
    const char *in;
    size_t len; /* 0: strlen */
    enum kn_status st;
    const char *msg; /* a substring of the message */
};

static void test_invalid(void)
{
    static const struct invalid_case cases[] = {
        {"", 0, KN_E_FORMAT, "empty document"},
        {"  \n ", 0, KN_E_FORMAT, "empty document"},
        {"[", 0, KN_E_FORMAT, "expected a value"},
        {"]", 0, KN_E_FORMAT, "expected a value"},
        {"[1,]", 0, KN_E_FORMAT, "trailing comma"},
        {"{\"a\":1,}", 0, KN_E_FORMAT, "trailing comma"},
        {"[1,,2]", 0, KN_E_FORMAT, "expected a value"},
        {"{,}", 0, KN_E_FORMAT, "expected a string key"},
        {"{a:1}", 0, KN_E_FORMAT, "expected a string key"},
        {"{\"a\" 1}", 0, KN_E_FORMAT, "expected ':'"},
        {"{\"a\":}", 0, KN_E_FORMAT, "expected a value"},
        {"{\"a\"}", 0, KN_E_FORMAT, "expected ':'"},
        {"{\"a\":1", 0, KN_E_FORMAT, "expected ',' or '}'"},
        {"[1 2]", 0, KN_E_FORMAT, "expected ',' or ']'"},
        {"01", 0, KN_E_FORMAT, "leading zeros"},
        {"-01", 0, KN_E_FORMAT, "leading zeros"},
        {"1.", 0, KN_E_FORMAT, "digit must follow"},
        {"1.e3", 0, KN_E_FORMAT, "digit must follow"},
        {".5", 0, KN_E_FORMAT, "expected a value"},
        {"-", 0, KN_E_FORMAT, "digit after '-'"},
        {"[-]", 0, KN_E_FORMAT, "digit after '-'"},
        {"+1", 0, KN_E_FORMAT, "expected a value"},
        {"1e", 0, KN_E_FORMAT, "exponent needs digits"},
        {"1e+", 0, KN_E_FORMAT, "exponent needs digits"},
        {"0x10", 0, KN_E_FORMAT, "after the document"},
        {"1e400", 0, KN_E_FORMAT, "too large"},
        {"-1e400", 0, KN_E_FORMAT, "too large"},
        {"NaN", 0, KN_E_FORMAT, "expected a value"},
        {"Infinity", 0, KN_E_FORMAT, "expected a value"},
        {"tru", 0, KN_E_FORMAT, "expected a value"},
        {"nul", 0, KN_E_FORMAT, "expected a value"},
        {"True", 0, KN_E_FORMAT, "expected a value"},
        {"'a'", 0, KN_E_FORMAT, "expected a value"},
        {"\"abc", 0, KN_E_FORMAT, "not terminated"},
        {"\"abc\\\"", 0, KN_E_FORMAT, "not terminated"},
        {"\"\\x\"", 0, KN_E_FORMAT, "invalid escape"},
        {"\"\\u12\"", 0, KN_E_FORMAT, "4 hex digits"},
        {"\"\\u12G4\"", 0, KN_E_FORMAT, "4 hex digits"},
        {"\"\\uD800\"", 0, KN_E_FORMAT, "high surrogate"},
        {"\"\\uD800x\"", 0, KN_E_FORMAT, "high surrogate"},
        {"\"\\uD800\\u0041\"", 0, KN_E_FORMAT, "high surrogate"},
        {"\"\\uD800\\uD800\"", 0, KN_E_FORMAT, "high surrogate"},
        {"\"\\uDC00\"", 0, KN_E_FORMAT, "low surrogate"},
        {"\"\\uDFFF\\uD800\"", 0, KN_E_FORMAT, "low surrogate"},
        {"\"a\x01\"", 0, KN_E_FORMAT, "control character 0x01"},
        {"\"\t\"", 0, KN_E_FORMAT, "control character 0x09"},
        {"\"\n\"", 0, KN_E_FORMAT, "control character 0x0a"},
        {"\"\xc0\xaf\"", 0, KN_E_FORMAT, "invalid UTF-8"},         /* overlong '/' */
        {"\"\xe0\x80\xaf\"", 0, KN_E_FORMAT, "invalid UTF-8"},     /* overlong, 3 bytes */
        {"\"\xed\xa0\x80\"", 0, KN_E_FORMAT, "invalid UTF-8"},     /* encoded surrogate */
        {"\"\xf4\x90\x80\x80\"", 0, KN_E_FORMAT, "invalid UTF-8"}, /* above U+10FFFF */
        {"\"\xf5\x80\x80\x80\"", 0, KN_E_FORMAT, "invalid UTF-8"},
        {"\"\xe2\x82\"", 0, KN_E_FORMAT, "invalid UTF-8"}, /* truncated */
        {"\"\x80\"", 0, KN_E_FORMAT, "invalid UTF-8"},     /* lone continuation */
        {"\"\xff\"", 0, KN_E_FORMAT, "invalid UTF-8"},
        {"\xef\xbb\xbf{}", 0, KN_E_FORMAT, "byte order mark"},
        {"1 2", 0, KN_E_FORMAT, "after the document"},
        {"[1]x", 0, KN_E_FORMAT, "after the document"},
        {"{}{}", 0, KN_E_FORMAT, "after the document"},
        {"1\0", 2, KN_E_FORMAT, "byte 0x00"},
        {"// c\n1", 0, KN_E_FORMAT, "expected a value"},
        {"/* c */ 1", 0, KN_E_FORMAT, "expected a value"},
        {"[1]\f", 0, KN_E_FORMAT, "after the document"},
        {"\xc2\xa0 1", 0, KN_E_FORMAT, "expected a value"},
        {"{\"a\":1,\"a\":2}", 0, KN_E_FORMAT, "duplicate key \"a\""},
        {"{\"a\":1,\"\\u0061\":2}", 0, KN_E_FORMAT, "duplicate key \"a\""},
        {"{\"x\":{\"b\":[],\"b\":{}}}", 0, KN_E_FORMAT, "duplicate key \"b\""},
        {"{\"k0\":0,\"k1\":1,\"k2\":2,\"k3\":3,\"k4\":4,\"k5\":5,\"k6\":6,\"k7\":7,\"k8\":8,"
         "\"k9\":9,\"k10\":0,\"k11\":0,\"k12\":0,\"k13\":0,\"k14\":0,\"k15\":0,\"k16\":0,"
         "\"k17\":0,\"k5\":0,\"k18\":0}",
         0, KN_E_FORMAT, "duplicate key \"k5\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].in);
        struct json_value *v = (struct json_value *)1;
        struct kn_err err = {0};
        enum kn_status st = json_parse(cases[i].in, len, NULL, &v, &err);
        CHECKF(st == cases[i].st && v == NULL, "case %zu (%s): status %d", i, cases[i].in, st);
        CHECKF(strstr(err.msg, cases[i].msg) != NULL, "case %zu (%s): message \"%s\" lacks \"%s\"",
               i, cases[i].in, err.msg, cases[i].msg);
        CHECKF(strncmp(err.msg, "JSON: ", 6) == 0, "case %zu: %s", i, err.msg);
    }
}

static void test_positions_and_limits(void)
{
    struct json_value *v;
    struct kn_err err;
    const char *doc = "{\n  \"a\": 1,\n  \"\xc3\xa9\": tru\n}";
    CHECK(json_parse(doc, strlen(doc), NULL, &v, &err) == KN_E_FORMAT);
    CHECKF(strstr(err.msg, "line 3, column 8 (byte 20)") != NULL, "%s", err.msg);
    doc = "{\"a\": 1,\n \"a\": 2}";
    CHECK(json_parse(doc, strlen(doc), NULL, &v, &err) == KN_E_FORMAT);
    CHECKF(strstr(err.msg, "line 2, column 2 (byte 10)") != NULL, "%s", err.msg);

    /* Depth: 64 levels pass by default, 65 fail; a configured limit applies. */
    char deep[300];
    for (int n = 64; n <= 65; n++) {
        memset(deep, '[', (size_t)n);
        memset(deep + n, ']', (size_t)n);
        enum kn_status st = json_parse(deep, 2 * (size_t)n, NULL, &v, &err);
        CHECK_EQ_INT(st, n == 64 ? KN_OK : KN_E_LIMIT);
        if (st == KN_OK)
            json_free(v);
        else
            CHECKF(strstr(err.msg, "nested deeper than the limit of 64") != NULL, "%s", err.msg);
    }
    struct json_limits lim = {.max_depth = 3};
    CHECK(json_parse("[[[1]]]", 7, &lim, &v, &err) == KN_OK);
    json_free(v);
    CHECK(json_parse("[[[[1]]]]", 9, &lim, &v, &err) == KN_E_LIMIT);
    CHECK(json_parse("{\"a\":{\"b\":{\"c\":{}}}}", 20, &lim, &v, &err) == KN_E_LIMIT);
    /* A deep hostile document stops at the limit instead of exhausting the stack. */
    size_t big = 1 << 20;
    char *bomb = malloc(big);
    memset(bomb, '[', big);
    CHECK(json_parse(bomb, big, NULL, &v, &err) == KN_E_LIMIT);
    free(bomb);

    lim = (struct json_limits){.max_bytes = 10};
    CHECK(json_parse("[1,2,3,4,5]", 11, &lim, &v, &err) == KN_E_LIMIT);
    CHECK(strstr(err.msg, "exceeds the limit of 10") != NULL);
    CHECK(json_parse("[1,2,3,45]", 10, &lim, &v, &err) == KN_OK);
    json_free(v);
    lim = (struct json_limits){.max_string = 4};
    CHECK(json_parse("[\"abcd\"]", 8, &lim, &v, &err) == KN_OK);
    json_free(v);
    CHECK(json_parse("[\"abcde\"]", 9, &lim, &v, &err) == KN_E_LIMIT);
    CHECK(strstr(err.msg, "string longer than the limit of 4") != NULL);
    CHECK(json_parse("{\"abcde\":1}", 11, &lim, &v, &err) == KN_E_LIMIT);
    CHECK(json_parse("[\"\\u00e9\\u00e9\\u00e9\"]", 22, &lim, &v, &err) == KN_E_LIMIT); /* 6 bytes */
}

static const char *pretty_expected =
    "{\n"
    "  \"receipt\": 1,\n"
    "  \"kinetic\": {\n"
    "    \"version\": \"0.1.0\",\n"
    "    \"build\": \"378534cb64f30a15\"\n"
    "  },\n"
    "  \"input\": [\n"
    "    {\n"
    "      \"role\": \"user\",\n"
    "      \"content\": \"Name three rivers.\"\n"
    "    }\n"
    "  ],\n"
    "  \"sampling\": {\n"
    "    \"temperature\": 0.8,\n"
    "    \"presence_penalty\": 0.0,\n"
    "    \"seed\": 42,\n"
    "    \"max_tokens\": null,\n"
    "    \"stop\": [],\n"
    "    \"settings\": {}\n"
    "  },\n"
    "  \"ids\": [124894, 124899, 5922],\n"
    "  \"text\": \"1. The Nile River \\n2. \\\"Amazon\\\"\",\n"
    "  \"nested\": [\n"
    "    [1, 2],\n"
    "    [],\n"
    "    true\n"
    "  ]\n"
    "}\n";

static const char *compact_expected =
    "{\"receipt\":1,\"kinetic\":{\"version\":\"0.1.0\",\"build\":\"378534cb64f30a15\"},"
    "\"input\":[{\"role\":\"user\",\"content\":\"Name three rivers.\"}],"
    "\"sampling\":{\"temperature\":0.8,\"presence_penalty\":0.0,\"seed\":42,"
    "\"max_tokens\":null,\"stop\":[],\"settings\":{}},\"ids\":[124894,124899,5922],"
    "\"text\":\"1. The Nile River \\n2. \\\"Amazon\\\"\",\"nested\":[[1,2],[],true]}";

static void test_builder_and_writer(void)
{
    struct kn_err err;
    struct json_value *r = json_new_object();
    CHECK(json_object_set(r, "receipt", json_new_int(1), &err) == KN_OK);
    struct json_value *k = json_new_object();
    CHECK(json_object_set(k, "version", json_new_string("0.1.0"), &err) == KN_OK);
    CHECK(json_object_set(k, "build", json_new_string("378534cb64f30a15"), &err) == KN_OK);
    CHECK(json_object_set(r, "kinetic", k, &err) == KN_OK);
    struct json_value *in = json_new_array(), *msg = json_new_object();
    CHECK(json_object_set(msg, "role", json_new_string("user"), &err) == KN_OK);
    CHECK(json_object_set(msg, "content", json_new_string("Name three rivers."), &err) == KN_OK);
    CHECK(json_array_push(in, msg, &err) == KN_OK);
    CHECK(json_object_set(r, "input", in, &err) == KN_OK);
    struct json_value *s = json_new_object();
    CHECK(json_object_set(s, "temperature", json_new_double(0.8), &err) == KN_OK);
    CHECK(json_object_set(s, "presence_penalty", json_new_double(0.0), &err) == KN_OK);
    CHECK(json_object_set(s, "seed", json_new_int(42), &err) == KN_OK);
    CHECK(json_object_set(s, "max_tokens", json_new_null(), &err) == KN_OK);
    CHECK(json_object_set(s, "stop", json_new_array(), &err) == KN_OK);
    CHECK(json_object_set(s, "settings", json_new_object(), &err) == KN_OK);
    CHECK(json_object_set(r, "sampling", s, &err) == KN_OK);
    struct json_value *ids = json_new_array();
    const int64_t idv[] = {124894, 124899, 5922};
    for (int i = 0; i < 3; i++)
        CHECK(json_array_push(ids, json_new_int(idv[i]), &err) == KN_OK);
    CHECK(json_object_set(r, "ids", ids, &err) == KN_OK);
    CHECK(json_object_set(r, "text", json_new_string("1. The Nile River \n2. \"Amazon\""), &err) == KN_OK);
    struct json_value *nested = json_new_array(), *pair = json_new_array();
    CHECK(json_array_push(pair, json_new_int(1), &err) == KN_OK);
    CHECK(json_array_push(pair, json_new_int(2), &err) == KN_OK);
    CHECK(json_array_push(nested, pair, &err) == KN_OK);
    CHECK(json_array_push(nested, json_new_array(), &err) == KN_OK);
    CHECK(json_array_push(nested, json_new_bool(true), &err) == KN_OK);
    CHECK(json_object_set(r, "nested", nested, &err) == KN_OK);

    /* Duplicate keys are refused when building too, and the value is freed (ASan). */
    CHECK(json_object_set(r, "ids", json_new_int(5), &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "\"ids\" is already") != NULL);
    CHECK(json_array_push(r, json_new_int(5), &err) == KN_E_INTERNAL);
    CHECK(json_array_push(ids, NULL, &err) == KN_E_NOMEM);

    char *pretty, *compact;
    size_t plen;
    CHECK(json_write(r, JSON_PRETTY, &pretty, &plen, &err) == KN_OK);
    CHECKF(strcmp(pretty, pretty_expected) == 0, "pretty:\n%s", pretty);
    CHECK_EQ_INT(plen, strlen(pretty_expected));
    CHECK(json_write(r, JSON_COMPACT, &compact, NULL, &err) == KN_OK);
    CHECKF(strcmp(compact, compact_expected) == 0, "compact:\n%s", compact);

    /* Round trips: pretty and compact both parse back to the same canonical bytes. */
    const char *c2 = canon(pretty);
    CHECK(c2 && strcmp(c2, compact_expected) == 0);
    c2 = canon(compact);
    CHECK(c2 && strcmp(c2, compact_expected) == 0);

    /* Clone is deep and equal; take removes one member keeping the others' order. */
    struct json_value *c = json_clone(r);
    struct json_value *t = json_object_take(c, "kinetic");
    CHECK(t && json_is(t, JSON_OBJECT) && json_len(t) == 2);
    json_free(t);
    CHECK(json_object_take(c, "nope") == NULL);
    char *cs;
    CHECK(json_write(c, JSON_COMPACT, &cs, NULL, &err) == KN_OK);
    CHECK(strncmp(cs, "{\"receipt\":1,\"input\":", 21) == 0);
    free(cs);
    json_free(c);

    /* Access helpers. */
    CHECK_STR(json_str(json_get(json_get(r, "kinetic"), "build")), "378534cb64f30a15");
    CHECK(json_get(r, "missing") == NULL && json_get(ids, "x") == NULL);
    CHECK(json_at(ids, 3) == NULL && json_len(ids) == 3 && json_len(NULL) == 0);
    CHECK(json_str(json_at(ids, 0)) == NULL);

    free(pretty);
    free(compact);
    json_free(r);
}

static void test_writer_refusals(void)
{
    struct kn_err err;
    char *out = (char *)1;
    struct json_value *v = json_new_double(NAN);
    CHECK(json_write(v, JSON_COMPACT, &out, NULL, &err) == KN_E_ARG && out == NULL);
    CHECK(strstr(err.msg, "NaN") != NULL);
    json_free(v);
    v = json_new_double(-INFINITY);
    CHECK(json_write(v, JSON_COMPACT, &out, NULL, &err) == KN_E_ARG);
    json_free(v);
    v = json_new_stringn("a\xff", 2);
    CHECK(json_write(v, JSON_COMPACT, &out, NULL, &err) == KN_E_ARG);
    CHECK(strstr(err.msg, "UTF-8") != NULL);
    json_free(v);
    /* Sanitizing replaces each bad byte with U+FFFD and keeps good text. */
    size_t n;
    char *clean = json_utf8_sanitize("a\xff\xe2\x82\xac\xe2\x82", 7, &n);
    CHECK(clean && n == 1 + 3 + 3 + 3 + 3);
    CHECK(memcmp(clean, "a\xef\xbf\xbd\xe2\x82\xac\xef\xbf\xbd\xef\xbf\xbd", n) == 0);
    CHECK(json_utf8_valid(clean, n));
    free(clean);
    CHECK(!json_utf8_valid("\xed\xbf\xbf", 3) && json_utf8_valid("\xee\x80\x80", 3));

    /* Doubles: exact canonical text. */
    static const struct { double d; const char *s; } dd[] = {
        {0.0, "0.0"}, {-0.0, "-0.0"}, {1.0, "1.0"}, {0.1, "0.1"}, {1.0 / 3, "0.3333333333333333"},
        {2.0 / 3, "0.6666666666666666"}, {100.0, "100.0"}, {1e21, "1e+21"}, {1e-7, "1e-07"},
        {123456.789, "123456.789"}, {-2.5e-5, "-2.5e-05"}, {9007199254740993.0, "9007199254740992.0"},
        {1e15, "1000000000000000.0"}, {1.5e300, "1.5e+300"}, {4.9406564584124654e-324, "5e-324"},
        {0.30000000000000004, "0.30000000000000004"}, {1e100, "1e+100"}, {0.95, "0.95"},
    };
    for (size_t i = 0; i < sizeof dd / sizeof dd[0]; i++) {
        v = json_new_double(dd[i].d);
        CHECK(json_write(v, JSON_COMPACT, &out, NULL, &err) == KN_OK);
        CHECKF(strcmp(out, dd[i].s) == 0, "%.17g -> %s (want %s)", dd[i].d, out, dd[i].s);
        /* And it reads back as the same double. */
        struct json_value *b;
        CHECK(json_parse(out, strlen(out), NULL, &b, &err) == KN_OK);
        CHECK(memcmp(&b->u.number.d, &dd[i].d, sizeof(double)) == 0 && !b->u.number.is_int);
        json_free(b);
        free(out);
        json_free(v);
    }
    v = json_new_int(INT64_MIN);
    CHECK(json_write(v, JSON_COMPACT, &out, NULL, &err) == KN_OK);
    CHECK_STR(out, "-9223372036854775808");
    free(out);
    json_free(v);
}

/* Random doubles round-trip bit for bit through the canonical text. */
static void test_double_roundtrip(void)
{
    uint64_t x = 88172645463325252ull;
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double d;
        memcpy(&d, &x, sizeof d);
        if (!isfinite(d))
            continue;
        struct json_value *v = json_new_double(d), *b;
        char *out;
        struct kn_err err;
        if (json_write(v, JSON_COMPACT, &out, NULL, &err) != KN_OK ||
            json_parse(out, strlen(out), NULL, &b, &err) != KN_OK) {
            bad++;
            json_free(v);
            continue;
        }
        if (memcmp(&b->u.number.d, &d, sizeof d) != 0)
            bad++;
        free(out);
        json_free(b);
        json_free(v);
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_file(void)
{
    char path[] = "/tmp/kn_json_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    const char *doc = "{\"a\": [1, 2,]}";
    CHECK(write(fd, doc, strlen(doc)) == (ssize_t)strlen(doc));
    close(fd);
    struct json_value *v;
    struct kn_err err;
    CHECK(json_parse_file(path, NULL, &v, &err) == KN_E_FORMAT);
    CHECKF(strncmp(err.msg, path, strlen(path)) == 0 && strstr(err.msg, "trailing comma"), "%s",
           err.msg);
    unlink(path);
    CHECK(json_parse_file(path, NULL, &v, &err) == KN_E_IO);
}

/* Parses doc and returns its JCS form (static buffer), or the error message. */
static const char *jcs(const char *doc)
{
    struct json_value *v;
    struct kn_err err;
    char *s;
    if (json_parse(doc, strlen(doc), NULL, &v, &err) != KN_OK)
        return "(parse error)";
    if (json_write(v, JSON_JCS, &s, NULL, &err) != KN_OK) {
        snprintf(out_buf, sizeof out_buf, "ERR %s", err.msg);
    } else {
        snprintf(out_buf, sizeof out_buf, "%s", s);
        free(s);
    }
    json_free(v);
    return out_buf;
}

/* JSON_JCS (RFC 8785): the examples of its sections 3.2.3 (members sorted by UTF-16 code
 * units: U+1F600, a surrogate pair, before U+FB33) and 3.2.4, and numbers as ECMAScript
 * writes them (tests/py/test_receipt_jcs.py holds Appendix B's number samples and compares
 * random doubles with Node and the rfc8785 package). */
static void test_jcs(void)
{
    static const struct valid_case cases[] = {
        {"{\"\\u20ac\":\"Euro Sign\",\"\\r\":\"Carriage Return\",\"\\ufb33\":\"Hebrew Letter Dalet "
         "With Dagesh\",\"1\":\"One\",\"\\ud83d\\ude00\":\"Emoji: Grinning Face\",\"\\u0080\":"
         "\"Control\",\"\\u00f6\":\"Latin Small Letter O With Diaeresis\"}",
         "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\xc2\x80\":\"Control\",\"\xc3\xb6\":\"Latin "
         "Small Letter O With Diaeresis\",\"\xe2\x82\xac\":\"Euro Sign\",\"\xf0\x9f\x98\x80\":"
         "\"Emoji: Grinning Face\",\"\xef\xac\xb3\":\"Hebrew Letter Dalet With Dagesh\"}"},
        {"{\"numbers\": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],"
         "\"string\": \"\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\\"\\/\","
         "\"literals\": [null, true, false]}",
         "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],"
         "\"string\":\"\xe2\x82\xac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}"},
        {"{\"b\":{\"d\":1,\"c\":2},\"a\":[{\"z\":0,\"y\":1}],\"\":3,\"aa\":4,\"A\":5}",
         "{\"\":3,\"A\":5,\"a\":[{\"y\":1,\"z\":0}],\"aa\":4,\"b\":{\"c\":2,\"d\":1}}"},
        {"{\"k\\u0000b\":1,\"k\":2,\"k\\u0000a\":3}", "{\"k\":2,\"k\\u0000a\":3,\"k\\u0000b\":1}"},
        {"[0.0, -0.0, -0, 1.0, 100.0, 1e21, 1e20, 1e-6, 1e-7, 0.1, -1.5e-10, 5e-324]",
         "[0,0,0,1,100,1e+21,100000000000000000000,0.000001,1e-7,0.1,-1.5e-10,5e-324]"},
        {"[9007199254740992, -9007199254740992, 9007199254740994, 9223372036854775807.0, "
         "-9223372036854775808, 18446744073709551616]",
         "[9007199254740992,-9007199254740992,9007199254740994,9223372036854776000,"
         "-9223372036854776000,18446744073709552000]"},
        {"\"\\u007f\\u2028\\ud83d\\ude00\\b\\f\\t\\u001f\"", "\"\x7f\xe2\x80\xa8\xf0\x9f\x98\x80\\b\\f\\t\\u001f\""},
        /* Integers beyond 2^53 as their nearest doubles, as any JCS library reads them;
         * what JCS writes reads back to itself. */
        {"[9007199254740993, -9223372036854775807, 1152921504606846976, 1152921504606847000]",
         "[9007199254740992,-9223372036854776000,1152921504606847000,1152921504606847000]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = jcs(cases[i].in);
        CHECKF(strcmp(got, cases[i].out) == 0, "jcs case %zu: %s -> %s (want %s)", i,
               cases[i].in, got, cases[i].out);
    }
    /* Writing sorts a copy of the order: the tree keeps its own. */
    struct json_value *v;
    struct kn_err err;
    char *s;
    CHECK(json_parse("{\"b\":1,\"a\":2}", 13, NULL, &v, &err) == KN_OK);
    CHECK(json_write(v, JSON_JCS, &s, NULL, &err) == KN_OK);
    CHECK_STR(s, "{\"a\":2,\"b\":1}");
    free(s);
    CHECK(json_write(v, JSON_COMPACT, &s, NULL, &err) == KN_OK);
    CHECK_STR(s, "{\"b\":1,\"a\":2}");
    free(s);
    json_free(v);
}

/* `test_json batch` (or `test_json jcs`) reads records "<length>\n<bytes>" from stdin and
 * answers each with "OK <length>\n<compact (or JCS) bytes>\n" or "ERR <message>\n": the
 * pytests cross-check the reader and writers against Python's json module, the rfc8785
 * package and Node with it. */
static int batch(enum json_style style)
{
    size_t len;
    while (scanf("%zu", &len) == 1) {
        if (getchar() != '\n')
            return 2;
        char *doc = malloc(len + 1);
        if (fread(doc, 1, len, stdin) != len)
            return 2;
        struct json_value *v;
        struct kn_err err;
        char *out;
        size_t n;
        if (json_parse(doc, len, NULL, &v, &err) == KN_OK &&
            json_write(v, style, &out, &n, &err) == KN_OK) {
            printf("OK %zu\n", n);
            fwrite(out, 1, n, stdout);
            printf("\n");
            free(out);
        } else {
            printf("ERR %s\n", err.msg);
        }
        if (v)
            json_free(v);
        free(doc);
    }
    return 0;
}

/* `test_json jcs-bits` reads IEEE 754 doubles as 16 hex digits, one a line (RFC 8785's
 * Appendix B gives its number samples so), and writes each as JSON_JCS writes it, or
 * "ERR <message>". */
static int jcs_bits(void)
{
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        uint64_t bits = strtoull(line, NULL, 16);
        double d;
        memcpy(&d, &bits, sizeof d);
        struct json_value *v = json_new_double(d);
        struct kn_err err;
        char *out;
        if (!v)
            return 2;
        if (json_write(v, JSON_JCS, &out, NULL, &err) == KN_OK) {
            printf("%s\n", out);
            free(out);
        } else {
            printf("ERR %s\n", err.msg);
        }
        json_free(v);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "batch") == 0)
        return batch(JSON_COMPACT);
    if (argc == 2 && strcmp(argv[1], "jcs") == 0)
        return batch(JSON_JCS);
    if (argc == 2 && strcmp(argv[1], "jcs-bits") == 0)
        return jcs_bits();
    test_valid();
    test_invalid();
    test_positions_and_limits();
    test_builder_and_writer();
    test_writer_refusals();
    test_double_roundtrip();
    test_file();
    test_jcs();
    CHECK_DONE();
}
