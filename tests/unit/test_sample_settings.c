/* test_sample_settings.c: the sampling settings table (src/sample/settings.c) walked row
 * by row: every row's names find it and no other; the defaults are the rows' defaults and
 * pass the check; an out-of-range value gives the same message through the text form
 * (flags, /set), JSON (requests, receipts, /save) and the struct check; an in-range value
 * other than the default survives the text form and JSON; receipts (base + extra) and
 * /save (all) round-trip, strictly. tests/py/test_settings_table.py does the same through
 * run, chat, the server and verify-receipt. */
#include "check.h"

#include <math.h>
#include <stdint.h>

#include "base/base.h"
#include "base/json.h"
#include "sample/sample.h"
#include "sample_examples.h"

/* An in-range value other than the default, in text form. */
static void example_good(const struct sample_setting *s, char *text, size_t n)
{
    switch (s->type) {
    case SAMPLE_T_FLOAT: snprintf(text, n, "%.9g", s->lo + (s->hi - s->lo) * 0.625); break;
    case SAMPLE_T_INT:
    case SAMPLE_T_INT64: snprintf(text, n, "%.0f", s->lo + 3 <= s->hi ? s->lo + 3 : s->hi); break;
    case SAMPLE_T_SEED: snprintf(text, n, "%lld", (long long)SAMPLE_SEED_MAX); break;
    case SAMPLE_T_BREAKERS: snprintf(text, n, "[\"a\",\"\\n\"]"); break;
    case SAMPLE_T_BIAS: snprintf(text, n, "3+0.5,9-100"); break;
    case SAMPLE_T_CHAIN: snprintf(text, n, "top_p;temperature"); break;
    }
}

static char *fmt(const struct sample_setting *s, const struct sample_params *p)
{
    struct kn_buf b = {0};
    CHECK(sample_setting_format(s, p, &b));
    return b.p;
}

static void test_names_and_defaults(void)
{
    struct sample_params d;
    struct kn_err err = {0};
    sample_params_default(&d);
    CHECK(sample_params_check(&d, &err) == KN_OK);
    CHECK(sample_n_settings <= SAMPLE_MAX_SETTINGS);
    for (size_t i = 0; i < sample_n_settings; i++) {
        const struct sample_setting *s = &sample_settings[i];
        const char *names[] = {s->name, s->key, s->flag, s->alias[0], s->alias[1]};
        for (int k = 0; k < 5; k++)
            if (names[k])
                CHECKF(sample_setting_find(names[k]) == s, "%s finds another row", names[k]);
        CHECKF(s->help && *s->help && s->metavar && s->flag, "%s: help", s->name);
        /* the struct default is the row's default */
        char def[64];
        char *got = fmt(s, &d);
        switch (s->type) {
        case SAMPLE_T_FLOAT:
            CHECKF(strtof(got, NULL) == (float)s->def, "%s default %s", s->name, got);
            break;
        case SAMPLE_T_INT:
        case SAMPLE_T_INT64:
        case SAMPLE_T_SEED:
            snprintf(def, sizeof def, "%.0f", s->def);
            CHECK_STR(got, def);
            break;
        default: break;
        }
        free(got);
    }
    CHECK(sample_setting_find("max_completion_tokens") == sample_setting_find("n_predict"));
    CHECK(sample_setting_find("temp") == sample_setting_find("temperature"));
    CHECK(sample_setting_find("warmth") == NULL);
    /* the receipt spec's keys, in its order, are the base rows */
    static const char *const base[] = {"temperature", "top_k", "top_p", "min_p", "repeat_penalty",
                                       "presence_penalty", "frequency_penalty", "repeat_last_n",
                                       "seed", "max_tokens"};
    size_t k = 0;
    for (size_t i = 0; i < sample_n_settings; i++)
        if (sample_settings[i].always) {
            CHECK(k < 10);
            if (k < 10)
                CHECK_STR(sample_settings[i].key, base[k]);
            k++;
        }
    CHECK_EQ_INT(k, 10);
}

static void test_bad_values_one_message(void)
{
    for (size_t i = 0; i < sample_n_settings; i++) {
        const struct sample_setting *s = &sample_settings[i];
        char text[128], json[128];
        sample_example_bad(s, text, json, sizeof text);
        struct sample_params p, q;
        sample_params_default(&p);
        sample_params_default(&q);
        struct kn_err e1 = {0}, e2 = {0}, e3 = {0};
        CHECKF(sample_setting_parse(s, text, &p, &e1) == KN_E_ARG, "%s accepts %s", s->name, text);
        struct json_value *v = NULL;
        CHECK(json_parse(json, strlen(json), NULL, &v, &e2) == KN_OK);
        CHECKF(sample_setting_read(s, v, &q, &e2) == KN_E_FORMAT, "%s accepts JSON %s", s->name,
               json);
        CHECKF(strcmp(e1.msg, e2.msg) == 0, "%s: '%s' vs '%s'", s->name, e1.msg, e2.msg);
        /* a refused value leaves the struct as it was */
        char *a = fmt(s, &p), *b = fmt(s, &q), *c;
        struct sample_params d;
        sample_params_default(&d);
        c = fmt(s, &d);
        CHECK_STR(a, c);
        CHECK_STR(b, c);
        free(a);
        free(b);
        free(c);
        /* the struct check says the same where the field can hold the value */
        bool stored = true;
        if (s->type == SAMPLE_T_FLOAT)
            *(float *)((char *)&d + s->offset) = (float)(s->hi + 1);
        else if (s->type == SAMPLE_T_SEED)
            d.seed = UINT64_C(1) << 63;
        else if (s->type == SAMPLE_T_INT64 || (s->type == SAMPLE_T_INT && s->hi < INT32_MAX))
            s->type == SAMPLE_T_INT64 ? (void)(*(int64_t *)((char *)&d + s->offset) = (int64_t)s->hi + 1)
                                      : (void)(*(int32_t *)((char *)&d + s->offset) = (int32_t)s->hi + 1);
        else
            stored = false;
        if (stored) {
            CHECKF(sample_params_check(&d, &e3) == KN_E_ARG && strcmp(e3.msg, e1.msg) == 0,
                   "%s: check says '%s', parse '%s'", s->name, e3.msg, e1.msg);
        }
        /* the message names the setting */
        CHECKF(strstr(e1.msg, s->name) != NULL, "%s: %s", s->name, e1.msg);
        json_free(v);
    }
    /* inf and nan are not numbers in range; a seed of -1 is refused as the reader refuses it */
    struct sample_params p;
    struct kn_err err = {0};
    sample_params_default(&p);
    CHECK(sample_setting_parse(sample_setting_find("temp"), "inf", &p, &err) == KN_E_ARG &&
          strstr(err.msg, "not inf"));
    CHECK(sample_setting_parse(sample_setting_find("temp"), "nan", &p, &err) == KN_E_ARG);
    CHECK(sample_setting_parse(sample_setting_find("seed"), "-1", &p, &err) == KN_E_ARG);
    CHECK_STR(err.msg, "seed must be between 0 and 9223372036854775807, not -1");
    CHECK(sample_setting_parse(sample_setting_find("seed"), "18446744073709551615", &p, &err) ==
          KN_E_ARG);
    CHECK(sample_setting_parse(sample_setting_find("n_predict"), "0", &p, &err) == KN_E_ARG &&
          strstr(err.msg, "-1 or between 1 and 1048576"));
    CHECK(sample_setting_parse(sample_setting_find("top_k"), "1.5", &p, &err) == KN_E_ARG &&
          strstr(err.msg, "top_k must be an integer"));
    CHECK(sample_setting_parse(sample_setting_find("repeat_penalty"), "0", &p, &err) == KN_E_ARG &&
          strstr(err.msg, "above 0 and at most 100"));
    /* logit_bias ids against a vocabulary */
    CHECK(sample_setting_parse(sample_setting_find("logit_bias"), "99999+5", &p, &err) == KN_OK);
    CHECK(sample_params_check_vocab(&p, 1000, &err) == KN_E_ARG &&
          strstr(err.msg, "outside the vocabulary of 1000 tokens"));
}

static void test_good_values_round_trip(void)
{
    struct sample_params all;
    sample_params_default(&all);
    for (size_t i = 0; i < sample_n_settings; i++) {
        const struct sample_setting *s = &sample_settings[i];
        char text[128];
        example_good(s, text, sizeof text);
        struct sample_params p, q;
        sample_params_default(&p);
        struct kn_err err = {0};
        CHECKF(sample_setting_parse(s, text, &p, &err) == KN_OK, "%s %s: %s", s->name, text,
               err.msg);
        CHECKF(sample_setting_parse(s, text, &all, &err) == KN_OK, "%s", err.msg);
        char *a = fmt(s, &p);
        struct sample_params d;
        sample_params_default(&d);
        char *def = fmt(s, &d);
        CHECKF(strcmp(a, def) != 0, "%s: %s is the default", s->name, text);
        /* text form -> value -> text form */
        sample_params_default(&q);
        CHECKF(sample_setting_parse(s, a, &q, &err) == KN_OK, "%s reads back %s: %s", s->name, a,
               err.msg);
        char *b = fmt(s, &q);
        CHECK_STR(a, b);
        free(a);
        free(b);
        free(def);
    }
    CHECK(sample_params_check(&all, NULL) == KN_OK);
    /* /save: every row; receipts: base + extra (all on here), read strictly */
    const unsigned whats[2] = {SAMPLE_JSON_ALL, SAMPLE_JSON_BASE | SAMPLE_JSON_EXTRA};
    const unsigned hows[2] = {SAMPLE_READ_ALIASES | SAMPLE_READ_STRICT,
                              SAMPLE_READ_BASE | SAMPLE_READ_STRICT};
    for (int w = 0; w < 2; w++) {
        struct kn_err err = {0};
        struct json_value *o = json_new_object();
        CHECK(sample_params_json_write(&all, o, whats[w], &err) == KN_OK);
        CHECK_EQ_INT(json_len(o), sample_n_settings);
        char *text = NULL;
        CHECK(json_write(o, JSON_COMPACT, &text, NULL, &err) == KN_OK);
        json_free(o);
        CHECK(json_parse(text, strlen(text), NULL, &o, &err) == KN_OK);
        struct sample_params q;
        sample_params_default(&q);
        CHECKF(sample_params_json_read(o, &q, hows[w], NULL, &err) == KN_OK, "%s", err.msg);
        for (size_t i = 0; i < sample_n_settings; i++) {
            char *a = fmt(&sample_settings[i], &all), *b = fmt(&sample_settings[i], &q);
            CHECKF(strcmp(a, b) == 0, "%s: %s vs %s", sample_settings[i].name, a, b);
            free(a);
            free(b);
        }
        free(text);
        json_free(o);
    }
    /* strict: unknown keys and (for receipts) aliases are refused; a missing base key too */
    const struct {
        const char *json;
        unsigned how;
        const char *want;
    } cases[] = {
        {"{\"warmth\":1}", SAMPLE_READ_STRICT, "unknown setting 'warmth'"},
        {"{\"n_predict\":5}", SAMPLE_READ_STRICT, "unknown setting 'n_predict'"},
        {"{\"temperature\":0.5}", SAMPLE_READ_BASE, "top_k is missing"},
        {"{\"max_tokens\":0}", 0, "n_predict (max_tokens) must be -1 or between 1 and 1048576"},
        {"{\"seed\":\"42\"}", 0, "seed must be an integer"},
        {"{\"seed\":9223372036854775808}", 0, "not 9223372036854775808"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct kn_err err = {0};
        struct json_value *o = NULL;
        struct sample_params q;
        sample_params_default(&q);
        CHECK(json_parse(cases[i].json, strlen(cases[i].json), NULL, &o, &err) == KN_OK);
        CHECKF(sample_params_json_read(o, &q, cases[i].how, NULL, &err) == KN_E_FORMAT &&
                   strstr(err.msg, cases[i].want),
               "%s: %s", cases[i].json, err.msg);
        json_free(o);
    }
    /* aliases: the first given wins (max_completion_tokens, n_predict, then max_tokens);
     * null is "no limit" for n_predict */
    struct json_value *o = NULL;
    struct kn_err err = {0};
    const char *req = "{\"max_tokens\":5,\"n_predict\":7}";
    struct sample_params q;
    sample_params_default(&q);
    CHECK(json_parse(req, strlen(req), NULL, &o, &err) == KN_OK);
    CHECK(sample_params_json_read(o, &q, SAMPLE_READ_ALIASES, NULL, &err) == KN_OK &&
          q.n_predict == 7);
    json_free(o);
    req = "{\"max_tokens\":null}";
    q.n_predict = 9;
    CHECK(json_parse(req, strlen(req), NULL, &o, &err) == KN_OK);
    CHECK(sample_params_json_read(o, &q, 0, NULL, &err) == KN_OK && q.n_predict == -1);
    json_free(o);
}

int main(void)
{
    test_names_and_defaults();
    test_bad_values_one_message();
    test_good_values_round_trip();
    CHECK_DONE();
}
